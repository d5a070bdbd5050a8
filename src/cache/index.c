/*
 * index — block identity -> slot, CLOCK eviction, persistence (see index_i.h).
 *
 * The records live in a MAP_SHARED mapping of the index file, so every update
 * is in the page cache the moment it is stored: a crash of the process loses
 * nothing, a power loss loses what the kernel had not written back. Neither can
 * make us serve wrong bytes: each record carries its own CRC (a torn record is
 * dropped at start) and the CRC of the block data, checked on every read.
 * A slot's record is zeroed BEFORE its data is overwritten and written only
 * AFTER the new data is on the slab (both on the cache thread).
 */
#include "index_i.h"

#include "feedfs/log.h"
#include "feedfs/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(struct idx_rec) == 32, "idx_rec is 32 bytes on disk");
_Static_assert(sizeof(struct idx_header) <= IDX_HDR_BYTES, "header fits its page");

#define TAG "cache"

static uint32_t hdr_crc(const struct idx_header *h)
{
	return cksum_crc32c(0, h, offsetof(struct idx_header, hdr_crc));
}

static uint32_t rec_crc(const struct idx_rec *r)
{
	return cksum_crc32c(0, r, offsetof(struct idx_rec, rec_crc));
}

static uint64_t chain_of(const struct cache_index *ix, struct cksum_h128 id)
{
	return (id.lo ^ (id.hi >> 7)) & ix->mask;
}

static void chain_link(struct cache_index *ix, uint32_t slot)
{
	struct cksum_h128 id = { ix->rec[slot].id_lo, ix->rec[slot].id_hi };
	uint64_t b = chain_of(ix, id);

	ix->next[slot] = ix->heads[b];
	ix->heads[b] = slot;
}

static void chain_unlink(struct cache_index *ix, uint32_t slot)
{
	struct cksum_h128 id = { ix->rec[slot].id_lo, ix->rec[slot].id_hi };
	uint32_t *pp = &ix->heads[chain_of(ix, id)];

	while (*pp != IDX_NONE && *pp != slot)
		pp = &ix->next[*pp];
	BUG_ON(*pp != slot);
	*pp = ix->next[slot];
	ix->next[slot] = IDX_NONE;
}

static int header_matches(const struct idx_header *h, uint32_t bs, uint32_t nslots,
			  char *why, size_t why_len)
{
	if (memcmp(h->magic, IDX_MAGIC, 8) != 0)
		snprintf(why, why_len, "bad magic");
	else if (h->hdr_crc != hdr_crc(h))
		snprintf(why, why_len, "header checksum mismatch");
	else if (h->version != IDX_VERSION)
		snprintf(why, why_len, "format version %u, this build uses %u", h->version, IDX_VERSION);
	else if (h->header_bytes != IDX_HDR_BYTES || h->rec_bytes != sizeof(struct idx_rec))
		snprintf(why, why_len, "unexpected layout");
	else if (h->block_size != bs)
		snprintf(why, why_len, "block size %u, now %u", h->block_size, bs);
	else if (h->slot_count != nslots)
		snprintf(why, why_len, "%llu slots, now %u", (unsigned long long)h->slot_count, nslots);
	else
		return 1;
	return 0;
}

static int map_file(struct cache_index *ix, int fd, size_t len)
{
	void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (m == MAP_FAILED)
		return -errno;
	ix->map = m;
	ix->map_len = len;
	ix->hdr = m;
	ix->rec = (struct idx_rec *)((char *)m + IDX_HDR_BYTES);
	return 0;
}

/* Truncates to zero (drops all records) and lays out a fresh header. */
static int idx_create(struct cache_index *ix, int fd, uint32_t bs, uint32_t nslots)
{
	size_t len = IDX_HDR_BYTES + (size_t)nslots * sizeof(struct idx_rec);
	int rc;

	if (ftruncate(fd, 0) < 0 || ftruncate(fd, (off_t)len) < 0)
		return -errno;
	rc = map_file(ix, fd, len);
	if (rc < 0)
		return rc;
	memset(ix->hdr, 0, sizeof(*ix->hdr));
	memcpy(ix->hdr->magic, IDX_MAGIC, 8);
	ix->hdr->version = IDX_VERSION;
	ix->hdr->header_bytes = IDX_HDR_BYTES;
	ix->hdr->block_size = bs;
	ix->hdr->rec_bytes = sizeof(struct idx_rec);
	ix->hdr->slot_count = nslots;
	ix->hdr->slab_bytes = (uint64_t)nslots * bs;
	ix->hdr->clean = 1;
	ix->hdr->hdr_crc = hdr_crc(ix->hdr);
	ix->wiped = 1;
	return 0;
}

static void idx_load(struct cache_index *ix)
{
	uint32_t dropped = 0;

	for (uint32_t s = 0; s < ix->nslots; s++) {
		struct idx_rec *r = &ix->rec[s];

		if (r->id_lo == 0 && r->id_hi == 0 && r->len == 0)
			continue;
		if (r->rec_crc != rec_crc(r) || r->len == 0 || r->len > ix->block_size ||
		    (r->id_lo == 0 && r->id_hi == 0) ||
		    idx_lookup(ix, (struct cksum_h128){ r->id_lo, r->id_hi }) != IDX_NONE) {
			memset(r, 0, sizeof(*r));
			dropped++;
			continue;
		}
		chain_link(ix, s);
		ix->flags[s] = IDX_F_VALID;
		ix->used++;
	}
	if (dropped)
		log_warn(TAG, "dropped %u torn or invalid index records", dropped);
}

int idx_open(struct cache_index *ix, int dir_fd, uint32_t bs, uint32_t nslots,
	     int clear, char *msg, size_t msg_len)
{
	size_t len = IDX_HDR_BYTES + (size_t)nslots * sizeof(struct idx_rec);
	struct stat st;
	char why[128] = "";
	int rc;

	memset(ix, 0, sizeof(*ix));
	ix->nslots = nslots;
	ix->block_size = bs;
	ix->fd = openat(dir_fd, IDX_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (ix->fd < 0) {
		rc = -errno;
		snprintf(msg, msg_len, "cannot open cache index: %s", strerror(-rc));
		return rc;
	}
	if (fstat(ix->fd, &st) < 0) {
		rc = -errno;
		goto fail;
	}
	if (!clear && st.st_size == (off_t)len) {
		rc = map_file(ix, ix->fd, len);
		if (rc < 0)
			goto fail;
		if (!header_matches(ix->hdr, bs, nslots, why, sizeof(why))) {
			munmap(ix->map, ix->map_len);
			ix->map = NULL;
		}
	} else if (!clear && st.st_size != 0) {
		snprintf(why, sizeof(why), "index size %lld, expected %zu", (long long)st.st_size, len);
	}
	if (!ix->map) {
		if (why[0])
			log_warn(TAG, "cache index does not match (%s): starting cold", why);
		rc = idx_create(ix, ix->fd, bs, nslots);
		if (rc < 0)
			goto fail;
	}
	ix->mask = 1;
	while (ix->mask < nslots)
		ix->mask <<= 1;
	ix->heads = xmalloc(ix->mask * sizeof(*ix->heads));
	memset(ix->heads, 0xff, ix->mask * sizeof(*ix->heads));
	ix->mask--;
	ix->next = xmalloc((size_t)nslots * sizeof(*ix->next));
	memset(ix->next, 0xff, (size_t)nslots * sizeof(*ix->next));
	ix->flags = xcalloc(nslots, 1);
	ix->recovered_unclean = !ix->wiped && !ix->hdr->clean;
	idx_load(ix);
	/* From here until idx_close a crash must be visible to the next start. */
	ix->hdr->clean = 0;
	ix->hdr->hdr_crc = hdr_crc(ix->hdr);
	if (msync(ix->map, IDX_HDR_BYTES, MS_SYNC) < 0)
		log_warn(TAG, "msync index header: %s", strerror(errno));
	return 0;
fail:
	snprintf(msg, msg_len, "cannot set up cache index: %s", strerror(-rc));
	idx_close(ix, 0);
	return rc;
}

void idx_close(struct cache_index *ix, int clean)
{
	if (ix->map) {
		if (clean) {
			ix->hdr->clean = 1;
			ix->hdr->hdr_crc = hdr_crc(ix->hdr);
		}
		if (msync(ix->map, ix->map_len, MS_SYNC) < 0)
			log_warn(TAG, "msync index: %s", strerror(errno));
		munmap(ix->map, ix->map_len);
	}
	if (ix->fd >= 0)
		close(ix->fd);
	free(ix->heads);
	free(ix->next);
	free(ix->flags);
	memset(ix, 0, sizeof(*ix));
	ix->fd = -1;
}

uint32_t idx_lookup(struct cache_index *ix, struct cksum_h128 id)
{
	for (uint32_t s = ix->heads[chain_of(ix, id)]; s != IDX_NONE; s = ix->next[s])
		if (ix->rec[s].id_lo == id.lo && ix->rec[s].id_hi == id.hi)
			return s;
	return IDX_NONE;
}

void idx_insert(struct cache_index *ix, uint32_t slot, struct cksum_h128 id,
		uint32_t data_crc, uint32_t len)
{
	struct idx_rec r = { .id_lo = id.lo, .id_hi = id.hi, .data_crc = data_crc, .len = len };

	BUG_ON(slot >= ix->nslots || (ix->flags[slot] & IDX_F_VALID) || len == 0 ||
	       len > ix->block_size);
	r.rec_crc = rec_crc(&r);
	ix->rec[slot] = r;
	chain_link(ix, slot);
	ix->flags[slot] |= IDX_F_VALID | IDX_F_REF;
	ix->used++;
}

void idx_remove(struct cache_index *ix, uint32_t slot)
{
	BUG_ON(slot >= ix->nslots || !(ix->flags[slot] & IDX_F_VALID));
	chain_unlink(ix, slot);
	memset(&ix->rec[slot], 0, sizeof(ix->rec[slot]));
	ix->flags[slot] &= IDX_F_BUSY;
	ix->used--;
}

uint32_t idx_claim(struct cache_index *ix, int *evicted)
{
	/* Two sweeps: the first may only clear reference bits. */
	for (uint64_t step = 0; step < 2ull * ix->nslots + 1; step++) {
		uint32_t s = ix->hand;
		uint8_t f = ix->flags[s];

		ix->hand = (s + 1 == ix->nslots) ? 0 : s + 1;
		if (f & IDX_F_BUSY)
			continue;
		if (f & IDX_F_REF) {
			ix->flags[s] = f & ~IDX_F_REF;
			continue;
		}
		*evicted = 0;
		if (f & IDX_F_VALID) {
			idx_remove(ix, s);
			*evicted = 1;
		}
		ix->flags[s] = IDX_F_BUSY;
		return s;
	}
	return IDX_NONE;
}
