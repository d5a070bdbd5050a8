/*
 * index — identity -> record -> slab offset, packing, CLOCK over pages,
 * persistence (see index_i.h).
 *
 * The records live in a MAP_SHARED mapping of the index file, so every update
 * is in the page cache the moment it is stored: a crash of the process loses
 * nothing, a power loss loses what the kernel had not written back. Neither can
 * make us serve wrong bytes: each record carries its own CRC (a torn record is
 * dropped at start) and the CRC of the block data, checked on every read.
 * A page's records are zeroed BEFORE any of its data is overwritten (eviction),
 * and a record is written only AFTER its data is on the slab (both on the cache
 * thread).
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

static void chain_link(struct cache_index *ix, uint32_t r)
{
	struct cksum_h128 id = { ix->rec[r].id_lo, ix->rec[r].id_hi };
	uint64_t b = chain_of(ix, id);

	ix->next[r] = ix->heads[b];
	ix->heads[b] = r;
}

static void chain_unlink(struct cache_index *ix, uint32_t r)
{
	struct cksum_h128 id = { ix->rec[r].id_lo, ix->rec[r].id_hi };
	uint32_t *pp = &ix->heads[chain_of(ix, id)];

	while (*pp != IDX_NONE && *pp != r)
		pp = &ix->next[*pp];
	BUG_ON(*pp != r);
	*pp = ix->next[r];
	ix->next[r] = IDX_NONE;
}

uint32_t idx_recs_per_page(uint32_t block_size)
{
	uint32_t n = block_size / (128u << 10);

	return n ? n : 1;
}

static uint32_t unit_up(uint32_t n)
{
	return (n + IDX_UNIT - 1) & ~(IDX_UNIT - 1);
}

static int header_matches(const struct idx_header *h, uint32_t bs, uint32_t npages,
			  char *why, size_t why_len)
{
	if (memcmp(h->magic, IDX_MAGIC, 8) != 0)
		snprintf(why, why_len, "bad magic");
	else if (h->hdr_crc != hdr_crc(h))
		snprintf(why, why_len, "header checksum mismatch");
	else if (h->version != IDX_VERSION)
		snprintf(why, why_len, "format version %u, this build uses %u", h->version, IDX_VERSION);
	else if (h->header_bytes != IDX_HDR_BYTES || h->rec_bytes != sizeof(struct idx_rec) ||
		 h->recs_per_page != idx_recs_per_page(bs))
		snprintf(why, why_len, "unexpected layout");
	else if (h->block_size != bs)
		snprintf(why, why_len, "block size %u, now %u", h->block_size, bs);
	else if (h->page_count != npages)
		snprintf(why, why_len, "%llu pages, now %u", (unsigned long long)h->page_count, npages);
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
static int idx_create(struct cache_index *ix, int fd, uint32_t bs, uint32_t npages)
{
	size_t len = IDX_HDR_BYTES + (size_t)ix->nrecs * sizeof(struct idx_rec);
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
	ix->hdr->page_count = npages;
	ix->hdr->slab_bytes = (uint64_t)npages * bs;
	ix->hdr->recs_per_page = ix->rpp;
	ix->hdr->clean = 1;
	ix->hdr->hdr_crc = hdr_crc(ix->hdr);
	ix->wiped = 1;
	return 0;
}

/* A record read from disk is usable when its own CRC holds and it lies whole
 * inside its page, on a unit boundary. */
static int rec_ok(const struct cache_index *ix, uint32_t r)
{
	const struct idx_rec *x = &ix->rec[r];
	uint64_t page_start = (uint64_t)idx_page_of(ix, r) * ix->block_size;
	uint64_t off = (uint64_t)x->pos * IDX_UNIT;

	return x->rec_crc == rec_crc(x) && x->len != 0 && x->len <= ix->block_size &&
	       !(x->id_lo == 0 && x->id_hi == 0) && off >= page_start &&
	       off + x->len <= page_start + ix->block_size;
}

static void idx_load(struct cache_index *ix)
{
	uint32_t dropped = 0;

	for (uint32_t r = 0; r < ix->nrecs; r++) {
		struct idx_rec *x = &ix->rec[r];
		uint32_t pg = idx_page_of(ix, r), end;

		if (x->id_lo == 0 && x->id_hi == 0 && x->len == 0 && x->pos == 0)
			continue;
		if (!rec_ok(ix, r) ||
		    idx_lookup(ix, (struct cksum_h128){ x->id_lo, x->id_hi }) != IDX_NONE) {
			memset(x, 0, sizeof(*x));
			dropped++;
			continue;
		}
		chain_link(ix, r);
		ix->flags[r] = IDX_F_VALID;
		ix->used++;
		ix->used_bytes += x->len;
		/* A loaded page is never filled further; this only records its use. */
		end = (uint32_t)(idx_offset(ix, r) - (uint64_t)pg * ix->block_size) + unit_up(x->len);
		if (end > ix->fill[pg])
			ix->fill[pg] = end;
		if (r % ix->rpp + 1 > ix->nused[pg])
			ix->nused[pg] = r % ix->rpp + 1;
	}
	if (dropped)
		log_warn(TAG, "dropped %u torn or invalid index records", dropped);
}

int idx_open(struct cache_index *ix, int dir_fd, uint32_t bs, uint32_t npages,
	     int clear, char *msg, size_t msg_len)
{
	uint32_t rpp = idx_recs_per_page(bs);
	size_t len = IDX_HDR_BYTES + (size_t)npages * rpp * sizeof(struct idx_rec);
	struct stat st;
	char why[128] = "";
	int rc;

	memset(ix, 0, sizeof(*ix));
	if ((uint64_t)npages * rpp >= IDX_NONE ||
	    (uint64_t)npages * bs / IDX_UNIT > UINT32_MAX) {
		snprintf(msg, msg_len, "cache of %u blocks is too large for the index", npages);
		ix->fd = -1;
		return -EINVAL;
	}
	ix->npages = npages;
	ix->rpp = rpp;
	ix->nrecs = npages * rpp;
	ix->block_size = bs;
	ix->fill_page = IDX_NONE;
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
	if (!clear && st.st_size >= (off_t)IDX_HDR_BYTES) {
		rc = map_file(ix, ix->fd, IDX_HDR_BYTES);
		if (rc < 0)
			goto fail;
		if (!header_matches(ix->hdr, bs, npages, why, sizeof(why))) {
			munmap(ix->map, ix->map_len);
			ix->map = NULL;
		} else if (st.st_size != (off_t)len) {
			snprintf(why, sizeof(why), "index size %lld, expected %zu",
				 (long long)st.st_size, len);
			munmap(ix->map, ix->map_len);
			ix->map = NULL;
		} else {
			munmap(ix->map, ix->map_len);
			ix->map = NULL;
			rc = map_file(ix, ix->fd, len);
			if (rc < 0)
				goto fail;
		}
	} else if (!clear && st.st_size != 0) {
		snprintf(why, sizeof(why), "index size %lld, expected %zu", (long long)st.st_size, len);
	}
	if (!ix->map) {
		if (why[0])
			log_warn(TAG, "cache index does not match (%s): starting cold", why);
		rc = idx_create(ix, ix->fd, bs, npages);
		if (rc < 0)
			goto fail;
	}
	ix->mask = 1;
	while (ix->mask < ix->nrecs)
		ix->mask <<= 1;
	ix->heads = xmalloc(ix->mask * sizeof(*ix->heads));
	memset(ix->heads, 0xff, ix->mask * sizeof(*ix->heads));
	ix->mask--;
	ix->next = xmalloc((size_t)ix->nrecs * sizeof(*ix->next));
	memset(ix->next, 0xff, (size_t)ix->nrecs * sizeof(*ix->next));
	ix->flags = xcalloc(ix->nrecs, 1);
	ix->pins = xcalloc(npages, sizeof(*ix->pins));
	ix->pref = xcalloc(npages, 1);
	ix->fill = xcalloc(npages, sizeof(*ix->fill));
	ix->nused = xcalloc(npages, sizeof(*ix->nused));
	ix->empty = xmalloc((size_t)npages * sizeof(*ix->empty));
	ix->recovered_unclean = !ix->wiped && !ix->hdr->clean;
	idx_load(ix);
	for (uint32_t pg = npages; pg-- > 0;)       /* popped lowest first */
		if (ix->nused[pg] == 0)
			ix->empty[ix->nempty++] = pg;
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
	free(ix->pins);
	free(ix->pref);
	free(ix->fill);
	free(ix->nused);
	free(ix->empty);
	memset(ix, 0, sizeof(*ix));
	ix->fd = -1;
}

uint32_t idx_lookup(struct cache_index *ix, struct cksum_h128 id)
{
	for (uint32_t r = ix->heads[chain_of(ix, id)]; r != IDX_NONE; r = ix->next[r])
		if (ix->rec[r].id_lo == id.lo && ix->rec[r].id_hi == id.hi)
			return r;
	return IDX_NONE;
}

void idx_read_begin(struct cache_index *ix, uint32_t r)
{
	uint32_t pg = idx_page_of(ix, r);

	BUG_ON(!(ix->flags[r] & IDX_F_VALID) || (ix->flags[r] & IDX_F_BUSY) ||
	       ix->pins[pg] == UINT16_MAX);
	ix->flags[r] |= IDX_F_BUSY;
	ix->pins[pg]++;
}

void idx_read_end(struct cache_index *ix, uint32_t r, int ok)
{
	uint32_t pg = idx_page_of(ix, r);

	BUG_ON(ix->pins[pg] == 0);
	ix->pins[pg]--;
	ix->flags[r] &= (uint8_t)~IDX_F_BUSY;
	if (ok)
		ix->pref[pg] = 1;
}

int idx_pin(struct cache_index *ix, uint32_t r)
{
	uint32_t pg = idx_page_of(ix, r);

	BUG_ON(!(ix->flags[r] & IDX_F_VALID));
	if (ix->pins[pg] >= UINT16_MAX - 1)
		return -EBUSY;
	ix->pins[pg]++;
	return 0;
}

void idx_unpin(struct cache_index *ix, uint32_t r, int ok)
{
	uint32_t pg = idx_page_of(ix, r);

	BUG_ON(ix->pins[pg] == 0);
	ix->pins[pg]--;
	if (ok)
		ix->pref[pg] = 1;
}

void idx_remove(struct cache_index *ix, uint32_t r)
{
	BUG_ON(r >= ix->nrecs || !(ix->flags[r] & IDX_F_VALID));
	chain_unlink(ix, r);
	ix->used--;
	ix->used_bytes -= ix->rec[r].len;
	memset(&ix->rec[r], 0, sizeof(ix->rec[r]));
	ix->flags[r] &= IDX_F_BUSY;
}

/* A page that was empty at open, else CLOCK over pages: an unpinned page
 * whose reference bit is clear, emptied. IDX_NONE when every page is pinned. */
static uint32_t claim_page(struct cache_index *ix)
{
	if (ix->nempty)
		return ix->empty[--ix->nempty];
	/* Two sweeps: the first may only clear reference bits. */
	for (uint64_t step = 0; step < 2ull * ix->npages + 1; step++) {
		uint32_t pg = ix->hand;

		ix->hand = (pg + 1 == ix->npages) ? 0 : pg + 1;
		if (ix->pins[pg])
			continue;
		if (ix->pref[pg]) {
			ix->pref[pg] = 0;
			continue;
		}
		for (uint32_t r = pg * ix->rpp; r < (pg + 1) * ix->rpp; r++) {
			if (ix->flags[r] & IDX_F_VALID) {
				idx_remove(ix, r);
				ix->evicted++;
			}
		}
		ix->fill[pg] = 0;
		ix->nused[pg] = 0;
		return pg;
	}
	return IDX_NONE;
}

static void close_fill_page(struct cache_index *ix)
{
	if (ix->fill_page != IDX_NONE) {
		ix->pins[ix->fill_page]--;
		ix->fill_page = IDX_NONE;
	}
}

uint32_t idx_alloc(struct cache_index *ix, uint32_t len, uint64_t *slab_off)
{
	uint32_t need = unit_up(len), pg = ix->fill_page, r;

	BUG_ON(len == 0 || len > ix->block_size);
	if (need > ix->block_size / 2 || ix->rpp == 1) {
		/* A page of its own; the fill page stays open for small records. */
		pg = claim_page(ix);
		if (pg == IDX_NONE)
			return IDX_NONE;
		ix->fill[pg] = ix->block_size;
		ix->nused[pg] = ix->rpp;
		r = pg * ix->rpp;
	} else {
		if (pg == IDX_NONE || ix->fill[pg] + need > ix->block_size ||
		    ix->nused[pg] == ix->rpp) {
			close_fill_page(ix);
			pg = claim_page(ix);
			if (pg == IDX_NONE)
				return IDX_NONE;
			ix->fill_page = pg;
			ix->pins[pg]++;
		}
		r = pg * ix->rpp + ix->nused[pg]++;
		*slab_off = (uint64_t)pg * ix->block_size + ix->fill[pg];
		ix->fill[pg] += need;
		ix->pins[pg]++;
		return r;
	}
	*slab_off = (uint64_t)pg * ix->block_size;
	ix->pins[pg]++;
	return r;
}

void idx_write_end(struct cache_index *ix, uint32_t r, uint64_t slab_off, int ok,
		   struct cksum_h128 id, uint32_t data_crc, uint32_t len)
{
	uint32_t pg = idx_page_of(ix, r);

	BUG_ON(r >= ix->nrecs || (ix->flags[r] & IDX_F_VALID) || ix->pins[pg] == 0);
	ix->pins[pg]--;
	if (!ok)
		return;
	{
		struct idx_rec x = { .id_lo = id.lo, .id_hi = id.hi, .data_crc = data_crc,
				     .len = len, .pos = (uint32_t)(slab_off / IDX_UNIT) };

		BUG_ON(len == 0 || len > ix->block_size || slab_off % IDX_UNIT);
		x.rec_crc = rec_crc(&x);
		ix->rec[r] = x;
	}
	chain_link(ix, r);
	ix->flags[r] = IDX_F_VALID;
	ix->pref[pg] = 1;
	ix->used++;
	ix->used_bytes += len;
}
