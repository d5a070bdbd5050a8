/*
 * index — where cached data lives in the slab: pages, packed records, CLOCK.
 *
 * The slab is cut into pages of block_size bytes. A page holds either one
 * record of more than half a page (a block) or up to recs_per_page smaller
 * records packed one after another on 4 KiB boundaries (short last blocks of
 * small objects, and pieces). Record r belongs to page r / recs_per_page; a
 * page hands out its records in order while it is the fill page.
 * Records are persisted through a shared mapping of the index file; the rest
 * (hash chains, flags, page fill) is rebuilt at open.
 * Eviction is CLOCK over pages: evicting a page drops every record in it.
 * Owned by the cache thread: no locking inside.
 */
#ifndef FEEDFS_CACHE_INDEX_I_H
#define FEEDFS_CACHE_INDEX_I_H

#include <stddef.h>
#include <stdint.h>

#include "cksum_i.h"

#define IDX_MAGIC       "FEEDFSCI"
#define IDX_VERSION     2u
#define IDX_HDR_BYTES   4096u
#define IDX_NONE        UINT32_MAX
#define IDX_FILE        "index"
#define IDX_UNIT        4096u          /* record positions and lengths round up to this */

/* On-disk header: first 4 KiB of the index file; little-endian. */
struct idx_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;      /* IDX_HDR_BYTES */
	uint32_t block_size;        /* page size */
	uint32_t rec_bytes;         /* sizeof(struct idx_rec) */
	uint64_t page_count;
	uint64_t slab_bytes;        /* page_count * block_size */
	uint32_t clean;             /* 1 after a clean shutdown, 0 while open */
	uint32_t recs_per_page;
	uint32_t hdr_crc;           /* CRC32C of the bytes before this field */
};

/* On-disk record, at IDX_HDR_BYTES + r * 32. All zero: free. */
struct idx_rec {
	uint64_t id_lo, id_hi;      /* 128-bit identity of the data */
	uint32_t data_crc;          /* CRC32C of the len bytes */
	uint32_t len;               /* valid bytes, 1..block_size */
	uint32_t pos;               /* slab offset / IDX_UNIT; inside page r / recs_per_page */
	uint32_t rec_crc;           /* CRC32C of the 28 bytes before it */
};

enum {
	IDX_F_VALID = 1,            /* record flags: live and linked */
	IDX_F_BUSY = 2,             /* a read of it is in flight */
};

struct cache_index {
	int fd;
	void *map;
	size_t map_len;
	struct idx_header *hdr;     /* in map */
	struct idx_rec *rec;        /* in map: the persisted part of the index */
	uint32_t *next;             /* hash chain link per record */
	uint32_t *heads;            /* chain heads, mask + 1 of them */
	uint64_t mask;
	uint8_t *flags;             /* per record */
	uint32_t nrecs;
	/* Per page. */
	uint32_t npages;
	uint32_t rpp;               /* records per page */
	uint32_t block_size;
	uint16_t *pins;             /* I/O in flight on the page, +1 while it is the fill page */
	uint8_t *pref;              /* CLOCK reference bit */
	uint32_t *fill;             /* bytes handed out from the page's start */
	uint32_t *nused;            /* records handed out */
	uint32_t *empty;            /* pages never filled since open: used before evicting */
	uint32_t nempty;
	uint32_t fill_page;         /* IDX_NONE when none */
	uint32_t hand;              /* CLOCK hand, a page */
	uint32_t used;              /* VALID records */
	uint64_t used_bytes;        /* their len, summed */
	uint64_t evicted;           /* records dropped by eviction, ever */
	int recovered_unclean;      /* header said the last run did not shut down */
	int wiped;                  /* the index was (re)created: slab content is junk */
};

/* Records per page for a block size: one per 128 KiB, at least 1. */
uint32_t idx_recs_per_page(uint32_t block_size);

/* Opens or creates dir_fd/index for this geometry. clear or a header mismatch
 * (logged) recreate it empty. Records that fail their own CRC or lie outside
 * their page are dropped. Marks the header "not clean" on disk before
 * returning. 0 or -errno + msg. */
int idx_open(struct cache_index *ix, int dir_fd, uint32_t block_size, uint32_t npages,
	     int clear, char *msg, size_t msg_len);
/* Marks clean (when clean != 0), syncs the mapping, frees everything. */
void idx_close(struct cache_index *ix, int clean);

static inline uint32_t idx_page_of(const struct cache_index *ix, uint32_t r)
{
	return r / ix->rpp;
}

static inline uint64_t idx_offset(const struct cache_index *ix, uint32_t r)
{
	return (uint64_t)ix->rec[r].pos * IDX_UNIT;
}

uint32_t idx_lookup(struct cache_index *ix, struct cksum_h128 id);

/* Reading a VALID record: pins its page (no eviction) and marks it BUSY. */
void idx_read_begin(struct cache_index *ix, uint32_t r);
/* The read is over: unpins, sets the page's reference bit when ok. */
void idx_read_end(struct cache_index *ix, uint32_t r, int ok);
/* Hold r's page while a part of r is read without marking r busy (a piece
 * read out of a block record): the page is neither evicted nor refilled
 * until idx_unpin. -EBUSY when the page's pin count is full. */
int idx_pin(struct cache_index *ix, uint32_t r);
void idx_unpin(struct cache_index *ix, uint32_t r, int ok);

/* Room for len bytes: a record (not VALID, not linked) and its slab offset in
 * a page pinned for the write. Evicts a page when needed (records dropped are
 * counted in ix->evicted). IDX_NONE when every page is pinned. */
uint32_t idx_alloc(struct cache_index *ix, uint32_t len, uint64_t *slab_off);
/* The write of an allocated record finished: ok publishes it (record written,
 * chain linked, VALID) at the offset idx_alloc gave; either way the page is
 * unpinned. */
void idx_write_end(struct cache_index *ix, uint32_t r, uint64_t slab_off, int ok,
		   struct cksum_h128 id, uint32_t data_crc, uint32_t len);
/* Unlinks and zeroes a VALID record (its page stays as it is). */
void idx_remove(struct cache_index *ix, uint32_t r);

#endif
