/*
 * fuzz_snap — the snapshot reader (src/snap/snap.c). Input: a snapshot file,
 * opened without its CRCs (byte 0 of the input is dropped: bit 0 set asks
 * for the CRCs too), so mutations reach the header checks and the entry
 * decoder. A file that opens must then decode to its end, every key it holds
 * must be found again by binary search, and lookups of keys near them must
 * not fail; one that does not open must say why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/snap.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct snap *s;
	struct snap_cursor c, f;
	struct snap_entry e, g;
	char msg[256];
	uint64_t n = 0;
	int r;

	if (size < 1)
		return 0;
	msg[0] = '\0';
	if (snap_open_mem(data + 1, size - 1, data[0] & 1, &s, msg, sizeof(msg)) < 0) {
		if (!msg[0])
			abort();
		return 0;
	}
	snap_seek(&c, s, NULL, 0);
	while ((r = snap_next(&c, &e)) == 1) {
		char key[SNAP_KEY_MAX + 1];
		size_t kl = e.key_len;

		memcpy(key, e.key, kl);
		if (!snap_find(&f, s, key, kl, &g) || g.size != e.size || strcmp(g.etag, e.etag))
			abort();
		if (kl) {
			key[kl - 1] ^= 1;       /* a neighbour: found or not, never a crash */
			(void)snap_find(&f, s, key, kl, &g);
		}
		n++;
	}
	/* snap_open decoded every entry already: none may fail now. */
	if (r < 0 || n != snap_count(s))
		abort();
	snap_close(s);
	return 0;
}
