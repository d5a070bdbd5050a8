/*
 * fuzz_snap — the snapshot reader (src/snap/snap.c). Input: byte 0, then a
 * snapshot file. Byte 0: bit 0 set checks the CRCs (clear: mutations reach
 * the header checks and the decoder), bit 1 set opens without the entry pass
 * (as a mount does). Every key decoded must be found again by binary search,
 * and lookups of keys near them must not crash; with the entry pass, a file
 * that opens must decode to its end; one that does not open must say why.
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
	if (snap_open_mem(data + 1, size - 1, (data[0] & 1 ? 0 : SNAP_OPEN_NO_CRC) |
			  (data[0] & 2 ? 0 : SNAP_OPEN_ENTRIES), &s, msg, sizeof(msg)) < 0) {
		if (!msg[0])
			abort();
		return 0;
	}
	snap_seek(&c, s, NULL, 0);
	while ((r = snap_next(&c, &e)) == 1) {
		char key[SNAP_KEY_MAX + 1];
		size_t kl = e.key_len;

		memcpy(key, e.key, kl);
		if (!(data[0] & 2) &&
		    (!snap_find(&f, s, key, kl, &g) || g.size != e.size || strcmp(g.etag, e.etag)))
			abort();
		if (kl) {
			key[kl - 1] ^= 1;       /* a neighbour: found or not, never a crash */
			(void)snap_find(&f, s, key, kl, &g);
		}
		n++;
	}
	/* With SNAP_OPEN_ENTRIES every entry decoded already: none may fail now. */
	if (!(data[0] & 2) && (r < 0 || n != snap_count(s)))
		abort();
	snap_close(s);
	return 0;
}
