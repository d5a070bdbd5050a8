/*
 * promote — whole objects as plain files, for FUSE passthrough.
 *
 * DESIGN (details: docs/CACHE.md "Promoted files")
 * The block cache keeps an object as blocks in a slab; the kernel's FUSE
 * passthrough needs one file holding the object's bytes at their own offsets.
 * A promoted file is that file: <cache dir>/promoted/<32 hex>, the hex being
 * the cache's 128-bit identity of (bucket, key, ETag), so a new ETag is
 * another name and an old file can never answer for a new version.
 *  - Built by one promoter thread from the cache only (cache_fetch_cached):
 *    every block must be cached whole, each one passes its CRC32C on the way,
 *    or the object is not promoted (a partially cached object never is). The
 *    bytes go to a temporary name and are renamed into place when complete,
 *    so a name that exists holds the whole object.
 *  - Asked for with promote_want (the read path calls it when a handle that
 *    read through the cache is released); the queue is bounded and drops
 *    wishes beyond it (they come back at the next release).
 *  - Bounded: max_bytes of files, least recently opened evicted first (an
 *    evicted file that is open stays readable: unlink keeps it for its
 *    holders, the kernel's included). Each promotion also leaves
 *    CACHE_DISK_RESERVE_PCT of the disk free.
 *  - Crash: a file renamed into place whose data had not reached the disk
 *    could read back as zeros after a power loss, so promote_new empties the
 *    directory when clear is set (the daemon sets it when the cache index
 *    says the last run did not shut down cleanly, or on --cache-clear).
 * Thread safety: every call may come from any thread; one lock (a leaf)
 * guards the table; no I/O is done under it except unlink of evicted files.
 */
#ifndef FEEDFS_PROMOTE_H
#define FEEDFS_PROMOTE_H

#include <stddef.h>
#include <stdint.h>

#define PROMOTE_DIR        "promoted"
#define PROMOTE_NAME_LEN   32u              /* hex characters of a file name */
#define PROMOTE_QUEUE_MAX  4096u            /* wishes waiting at once */

struct cache;

struct promote_config {
	const char *cache_dir;      /* files go in cache_dir/promoted (created 0700) */
	const char *bucket;         /* part of the identity, as the cache's; NULL: "" */
	uint64_t max_bytes;         /* bound on the files' bytes; > 0 */
	struct cache *cache;        /* where bytes come from; NULL: no promoter (tests) */
	uint32_t chunk;             /* bytes per cache read (the block size); 0: 4 MiB */
	int clear;                  /* remove every promoted file at start */
};

struct promote_stats {
	uint64_t promotions;        /* files built */
	uint64_t promoted_bytes;    /* their bytes, ever */
	uint64_t not_cached;        /* wishes dropped: not every block was cached */
	uint64_t failures;          /* wishes dropped: I/O error, no room, changed size */
	uint64_t dropped;           /* wishes dropped: the queue was full */
	uint64_t evictions;         /* files removed to stay under max_bytes */
	uint64_t files;             /* gauge: promoted files now */
	uint64_t bytes;             /* gauge: their bytes */
	uint64_t max_bytes;         /* gauge: the bound */
};

struct promote;

/* Creates or scans cache_dir/promoted: temporary files are removed, files
 * beyond max_bytes evicted (oldest mtime first), names that are not ours
 * left alone and ignored. Starts the promoter when cache is set. 0, -errno. */
int promote_new(const struct promote_config *cfg, struct promote **out);
/* Stops the promoter (a promotion in flight is abandoned) and frees p. */
void promote_destroy(struct promote *p);

/* The file name (PROMOTE_NAME_LEN hex + NUL) of (bucket, key, etag). */
void promote_name(const char *bucket, const char *key, size_t key_len, const char *etag,
		  char out[PROMOTE_NAME_LEN + 1]);

/* The promoted file of (key, etag) when it exists with exactly size bytes:
 * an O_RDONLY descriptor (the caller closes it), and the file counts as just
 * used. -ENOENT when there is none. */
int promote_open(struct promote *p, const char *key, size_t key_len, const char *etag,
		 uint64_t size);

/* promote_name with p's bucket. */
void promote_key_name(struct promote *p, const char *key, size_t key_len, const char *etag,
		      char out[PROMOTE_NAME_LEN + 1]);

/* 0 when the promoted file `name` exists with exactly size bytes (it then
 * counts as just used, as by promote_open), -ENOENT otherwise. No I/O: for
 * a caller that still holds the file open from an earlier promote_open. */
int promote_touch(struct promote *p, const char *name, uint64_t size);

/* 1 when the promoted file of (key, etag) is listed with exactly size bytes,
 * else 0. No I/O, and the file does not count as used. */
int promote_has(struct promote *p, const char *key, size_t key_len, const char *etag,
		uint64_t size);

/* Called, with no lock of p held, with the name of each file evicted to make
 * room (from the promoter thread, after the promotion that needed the room).
 * promote_set_evicted(p, NULL, NULL) returns once no call is in flight. */
typedef void (*promote_evicted_fn)(void *arg, const char *name);
void promote_set_evicted(struct promote *p, promote_evicted_fn fn, void *arg);

/* Ask for (key, etag, size) to be promoted; cheap, never blocks on I/O. A
 * file that exists already, an empty object, one larger than max_bytes / 2,
 * or one queued already is ignored. */
void promote_want(struct promote *p, const char *key, size_t key_len, const char *etag,
		  uint64_t size);

/* Waits until the queue is empty and no promotion runs (tests, benchmarks). */
void promote_drain(struct promote *p);

void promote_get_stats(struct promote *p, struct promote_stats *out);
struct stats_group;
extern const struct stats_group promote_stats_group;   /* obj: struct promote * */

#endif
