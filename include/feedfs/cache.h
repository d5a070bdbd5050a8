/*
 * cache — the on-node block cache: a layer of the read path's fetcher stack.
 *
 * DESIGN (details and on-disk format: docs/CACHE.md)
 * cache_fetcher is a fetcher (fetch.h) over an inner fetcher (S3 in
 * production, see src/stack.c). A request [off, off+len) of
 * (key, ETag) is cut into aligned blocks of block_size. Each block is either read
 * from the slab file on local disk (io_uring, CRC32C checked) or fetched through
 * the inner function; fetched bytes are handed to the caller first and written to
 * the slab behind the reply. Concurrent requests for one block share one disk read
 * or one inner GET (single flight).
 *  - Identity of a cached block: 128-bit hash of (bucket, key, ETag, block number).
 *    A request without an ETag (NULL or "") cannot be verified and bypasses the
 *    cache entirely (the caller's request is handed to the inner fetcher).
 *  - A cached block holds a prefix [0, n) of its block (n == block_size except
 *    for the short last block of an object, or when the object size is unknown).
 *    A request with obj_size FETCH_SIZE_UNKNOWN may widen a fetch down to the
 *    block start but never past the requested end; with the size known it
 *    widens to the full block (or EOF), which is what the read path does.
 *  - Cancel is a no-op (cancels = 0) for the requests it holds: their blocks
 *    are shared and worth caching, so every one runs to its end. A bypassed
 *    request's cancel is forwarded to the inner fetcher, which holds it.
 *  - One thread owns the io_uring ring and the whole index; callers and inner
 *    fetch completions hand work to it through a locked queue + eventfd.
 *    `done` callbacks run ON THE CACHE THREAD (a bypassed request's, on the
 *    inner fetcher's) and must not block.
 *  - One process owns a cache dir (flock); a second one gets -EBUSY and a message
 *    naming the owner pid.
 */
#ifndef FEEDFS_CACHE_H
#define FEEDFS_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/fetch.h"
#include "feedfs/prefetch.h"

#define CACHE_BLOCK_DEFAULT   (4u << 20)     /* why 4 MiB: docs/CACHE.md "Block size" */
#define CACHE_BLOCK_MIN       (4u << 10)
#define CACHE_BLOCK_MAX       (64u << 20)
#define CACHE_PIECE           (128u << 10)   /* unit of a block read in part (random readers) */
#define CACHE_BUFFER_DEFAULT  (64ull << 20)  /* block io buffers when buffer_bytes is 0 */
#define CACHE_MIN_SLOTS       4u
#define CACHE_DISK_RESERVE_PCT 5u            /* always leave this much of the disk free */

struct cache_config {
	const char *dir;            /* --cache-dir; created 0700 when absent */
	uint64_t size_bytes;        /* --cache-size; 0: half of (free - 5% of disk) */
	uint32_t block_size;        /* --block-size; 0: CACHE_BLOCK_DEFAULT; power of 2 */
	const char *bucket;         /* part of every block's identity; NULL: "" */
	struct fetcher *inner;      /* S3 in production; must outlive the cache */
	uint64_t buffer_bytes;      /* io buffers (registered); 0: CACHE_BUFFER_DEFAULT, >= 4 blocks */
	int clear;                  /* --cache-clear: drop all cached blocks at start */
	int no_direct;              /* never use O_DIRECT (tests); default: try it */
};

struct cache_stats {
	uint64_t hits;              /* blocks served from disk */
	uint64_t misses;            /* blocks fetched through the inner fetch */
	uint64_t coalesced;         /* block requests that joined one in flight */
	uint64_t bypass;            /* requests passed through (no ETag) */
	uint64_t inner_fetches;     /* inner GETs issued */
	uint64_t bytes_from_disk;   /* bytes delivered from the slab */
	uint64_t bytes_from_inner;  /* bytes fetched through the inner fetch */
	uint64_t bytes_written;     /* bytes written to the slab */
	uint64_t checksum_failures; /* blocks whose CRC32C did not match on read */
	uint64_t io_errors;         /* slab read/write errors (block refetched / dropped) */
	uint64_t evictions;         /* records dropped to make room */
	uint64_t write_skipped;     /* fetched units not cached (every page pinned) */
	uint64_t pieces;            /* piece units asked for (parts of blocks, random reads) */
	uint64_t pages;             /* capacity, in pages of block_size */
	uint64_t blocks_used;       /* records cached now (blocks and pieces) */
	uint64_t bytes_used;        /* their bytes */
	uint64_t capacity_bytes;    /* pages x block_size (filled by the stats table's snapshot) */
	uint32_t block_size;
	uint32_t piece_size;        /* == block_size when pieces are off */
	int direct_io;              /* 1 when the slab is opened O_DIRECT */
	int registered_buffers;     /* 1 when io buffers are registered with the ring */
	int recovered_unclean;      /* 1 when this start followed a crash */
};

struct cache;

/* Validates cfg, creates or reopens the cache dir, loads the persisted index
 * (a format/geometry mismatch wipes it with a warning) and starts the cache
 * thread. Returns 0 or -errno and one user-facing line in msg, e.g.
 * "cache dir /x is not writable: Permission denied" or
 * "cache dir /x is in use by feedfs pid 1234". */
int cache_new(const struct cache_config *cfg, struct cache **out, char *msg, size_t msg_len);

/* Waits for every request and write in flight, persists the index (clean
 * shutdown marker) and releases the dir. Callers must have stopped fetching. */
void cache_destroy(struct cache *c);

/* The cache as a fetcher (fetch.h; see DESIGN): what the read path, warming
 * and the share socket fetch through. Lives as long as c. -EINVAL for an
 * empty range or one past obj_size. */
struct fetcher *cache_fetcher(struct cache *c);

/* A fetch (fetch.h contract) that never goes to the inner fetcher when the
 * range is not cached: done gets -ENODATA unless every block the range touches
 * is cached whole (to EOF) or being written or read whole. Blocks read from
 * the slab are CRC32C-checked as on every hit (a mismatch refetches the block
 * through the inner fetcher with the ETag pinned, as a hit would). etag and
 * obj_size are required (-EINVAL). The promoted-file builder uses it
 * (promote.h). */
int cache_fetch_cached(struct cache *c, struct fetch_req *fr);

/* Waits until every slab write queued before the call has finished (tests,
 * benchmarks; never needed for correctness). Blocking; not from a done callback. */
void cache_sync(struct cache *c);

/* Tests: while plugged, requests queue up and the cache thread starts none;
 * unplugging hands them over together, in order, so that the later ones find
 * the earlier ones' block operations in flight (joins without a race). */
void cache_plug(struct cache *c, int on);

/* Bytes of io buffers cache_new maps for this block size (0: the default) and
 * buffer_bytes (0: the default): block buffers plus piece buffers. They are not
 * part of the read path's budget; the caller charges them to --max-memory. */
uint64_t cache_io_bytes(uint32_t block_size, uint64_t buffer_bytes);

/* The cache's share of --max-memory for its io buffers: a sixth of max_memory,
 * at most CACHE_BUFFER_DEFAULT (reached at 384 MiB); pass it as buffer_bytes.
 * cache_io_reserve is what cache_new then maps for it (cache_io_bytes): the
 * caller keeps that much of --max-memory out of the read path's budget. */
uint64_t cache_buffer_share(uint64_t max_memory);
uint64_t cache_io_reserve(uint32_t block_size, uint64_t max_memory);

/* Snapshot of the counters (relaxed atomics); their table, for the renderings
 * (stats.h), is cache_stats_group (obj: struct cache *). */
void cache_get_stats(struct cache *c, struct cache_stats *out);
struct stats_group;
extern const struct stats_group cache_stats_group;

/* --cache-clear on a cache that is not open: removes the cache files in dir
 * (only ours, by fixed name). Fails with -EBUSY when another process owns it. */
int cache_clear(const char *dir, char *msg, size_t msg_len);

/*
 * Sharing: one mount owns a cache dir (its lock); other mounts of the same
 * bucket at the same endpoint attach to it through a socket in the cache dir
 * (the owner's side: src/ctl/share.c; the attacher's: src/cache/attach.c) and
 * read through the owner's cache. Requests, one at a time per connection:
 *   client: "H <n>\n" + n bytes naming bucket and endpoint (once, first)
 *   owner:  "OK <block size> <max read>\n", or "ERR <EXDEV>\n" for another
 *           bucket/endpoint, or "ERR <EBUSY>\n" at its connection limit
 *   client: "R <key len> <etag len> <object size> <off> <len>\n" + key + ETag,
 *           len at most max read
 *   owner:  "OK <len>\n" + len bytes (through cache_fetcher), or "ERR <errno>\n"
 * The socket is 0600 in the 0700 cache dir: the same uid only. The owner
 * charges each request's buffer to its read budget while it serves it.
 */
#define CACHE_SHARE_SOCKET "share.sock"
int cache_share_socket_path(const char *cache_dir, char *out, size_t out_len);

#endif
