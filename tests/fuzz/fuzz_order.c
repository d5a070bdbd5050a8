/*
 * fuzz_order — the path rule of a loader's order (hint_order_check, the O
 * verb's and `feedfs prefetch`'s check), against the mount's own path rule
 * (fs_key_for_path), an independent implementation. Input: byte 0 adjusts
 * the claimed path count (0: the true count of lines, else off by one either
 * way), the rest is the payload. The check must accept exactly the payloads
 * that end with '\n' (or are empty), hold the claimed number of lines, and
 * whose every line is made of segments that fs_key_for_path takes (or refuses
 * only for length): so no leading '/', no empty, "." or ".." segment, no NUL.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/fs.h"
#include "feedfs/hint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data + 1;
	size_t n = size ? size - 1 : 0, lines = 0, i = 0, count;
	int valid = n == 0 || p[n - 1] == '\n', r;   /* "" is "O 0 0", a clear */

	if (!size)
		return 0;
	while (i < n) {
		const char *nl = memchr(p + i, '\n', n - i);
		size_t len = nl ? (size_t)(nl - (p + i)) : n - i;
		char *key;
		size_t kl;

		lines++;
		/* Segment by segment: fs_key_for_path stops at the first bad one,
		 * and a segment that is only too long must not hide a ".." after it. */
		for (size_t s = 0; s <= len; ) {
			const char *sl = memchr(p + i + s, '/', len - s);
			size_t e = sl ? (size_t)(sl - (p + i)) : len;

			r = fs_key_for_path("", 0, p + i + s, e - s, &key, &kl);
			if (r == 0)
				free(key);
			else if (r != -ENAMETOOLONG)
				valid = 0;
			s = e + 1;
		}
		i += len + 1;
	}
	count = data[0] % 3 == 0 ? lines : data[0] % 3 == 1 ? lines + 1 : lines - 1;
	if (count != lines)
		valid = 0;
	r = hint_order_check(p, n, count);
	if (r != (valid ? 0 : -EINVAL) && !(r == -E2BIG && count > HINT_MAX_PATHS))
		abort();
	return 0;
}
