/*
 * index — the block index: slot records (persisted through a shared mapping of
 * the index file), hash chains from block identity to slot, CLOCK eviction.
 * Owned by the cache thread: no locking inside.
 */
#ifndef FEEDFS_CACHE_INDEX_I_H
#define FEEDFS_CACHE_INDEX_I_H

#include <stddef.h>
#include <stdint.h>

#include "cksum_i.h"

#define IDX_MAGIC       "FEEDFSCI"
#define IDX_VERSION     1u
#define IDX_HDR_BYTES   4096u
#define IDX_NONE        UINT32_MAX
#define IDX_FILE        "index"

/* On-disk header: first 4 KiB of the index file; little-endian. */
struct idx_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;      /* IDX_HDR_BYTES */
	uint32_t block_size;
	uint32_t rec_bytes;         /* sizeof(struct idx_rec) */
	uint64_t slot_count;
	uint64_t slab_bytes;        /* slot_count * block_size */
	uint32_t clean;             /* 1 after a clean shutdown, 0 while open */
	uint32_t hdr_crc;           /* CRC32C of the bytes before this field */
};

/* On-disk record, one per slot, at IDX_HDR_BYTES + slot * 32. All zero: free. */
struct idx_rec {
	uint64_t id_lo, id_hi;      /* 128-bit identity of the block in this slot */
	uint32_t data_crc;          /* CRC32C of the len bytes in the slot */
	uint32_t len;               /* valid bytes, 1..block_size */
	uint32_t reserved;
	uint32_t rec_crc;           /* CRC32C of the 28 bytes before it */
};

enum {
	IDX_F_VALID = 1,            /* record is live and linked */
	IDX_F_REF = 2,              /* CLOCK reference bit */
	IDX_F_BUSY = 4,             /* an I/O on this slot is in flight: never evicted */
};

struct cache_index {
	int fd;
	void *map;
	size_t map_len;
	struct idx_header *hdr;     /* in map */
	struct idx_rec *rec;        /* in map: the persisted part of the index */
	uint32_t *next;             /* hash chain link per slot */
	uint32_t *heads;            /* chain heads, mask + 1 of them */
	uint64_t mask;
	uint8_t *flags;
	uint32_t nslots;
	uint32_t block_size;
	uint32_t hand;              /* CLOCK hand */
	uint32_t used;
	int recovered_unclean;      /* header said the last run did not shut down */
	int wiped;                  /* the index was (re)created: slab content is junk */
};

/* Opens or creates dir_fd/index for this geometry. clear or a header mismatch
 * (logged) recreate it empty. Records that fail their own CRC are dropped.
 * Marks the header "not clean" on disk before returning. 0 or -errno + msg. */
int idx_open(struct cache_index *ix, int dir_fd, uint32_t block_size, uint32_t nslots,
	     int clear, char *msg, size_t msg_len);
/* Marks clean (when clean != 0), syncs the mapping, frees everything. */
void idx_close(struct cache_index *ix, int clean);

uint32_t idx_lookup(struct cache_index *ix, struct cksum_h128 id);
/* Publishes slot (must be BUSY and not VALID): record written, chain linked,
 * flags = VALID|REF|BUSY (caller clears BUSY). */
void idx_insert(struct cache_index *ix, uint32_t slot, struct cksum_h128 id,
		uint32_t data_crc, uint32_t len);
/* Unlinks and zeroes a VALID slot's record; keeps the BUSY bit as it is. */
void idx_remove(struct cache_index *ix, uint32_t slot);
/* CLOCK: picks a slot that is not BUSY, evicting it if VALID (*evicted = 1),
 * and returns it marked BUSY; IDX_NONE when every slot is busy. */
uint32_t idx_claim(struct cache_index *ix, int *evicted);

#endif
