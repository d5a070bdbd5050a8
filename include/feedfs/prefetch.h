/*
 * prefetch — the read path: turns FUSE reads of one open file into ranged GETs,
 * with a sequential detector and a growing readahead window, under one global
 * memory budget.
 *
 * DESIGN
 * Each open file (struct rd_file) keeps an ordered list of segments: byte ranges
 * [off, off+len) with a buffer, each filled by one request (struct fetch_req,
 * embedded in the segment) to cfg->fetcher: the fetcher stack of fetch.h in
 * production, the shared fake (tests/unit/fake_fetch.c) in unit tests.
 *  - Small objects (size <= part_size) are fetched whole on the first read.
 *  - A sequential reader (each read starts where the last ended, give or take
 *    a small forward skip or a backward re-read inside what is held) gets a
 *    window that starts at RD_WINDOW_MIN and doubles each time the reader
 *    catches up with it, up to max_window; the window is cut into segments of
 *    at most part_size, fetched in parallel.
 *  - A random reader fetches only the bytes it asks for (rounded out to 64 KiB,
 *    or to cfg->random_align: the cache's piece size when the cache is on), and its
 *    window resets. Readahead chunks end on the same alignment.
 *  - Segments behind the reader are freed; on a seek, the stream's readahead
 *    that is no longer wanted is dropped, and its GETs still in flight are
 *    cancelled through the fetcher when it cancels (fetcher->cancels; when it
 *    does not, or a GET was nearly done, it finishes into its buffer).
 *    rd_close cancels the same way before it waits for its GETs.
 * Every segment buffer is charged to the budget before its GET is issued.
 * Readahead never waits for budget: it just issues less. A demand read asks for
 * at most min(part_size, budget max) bytes and waits for them without holding
 * the file lock, reclaiming meanwhile completed buffers nobody waits on from any
 * open file; see src/prefetch/prefetch.c for why this cannot deadlock.
 * A fetch result of -ESTALE (the object changed: If-Match failed) fails the read
 * with -ESTALE and all held segments are dropped: bytes of two versions are
 * never mixed.
 * Threads: rd_read may be called concurrently on one rd_file (the kernel issues
 * parallel reads); one mutex per rd_file, a condvar for completions. Fetch
 * completions run on the fetcher's thread and only take that mutex briefly.
 */
#ifndef FEEDFS_PREFETCH_H
#define FEEDFS_PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/fetch.h"

#define RD_WINDOW_MIN (1u << 20)    /* first readahead window: 1 MiB */

/* Global memory budget for in-flight and readahead buffers. */
struct rd_budget;
int rd_budget_new(uint64_t max_bytes, struct rd_budget **out);
void rd_budget_destroy(struct rd_budget *b);
/* Take n bytes: returns 0, or -EAGAIN when wait == 0 and not available, or
 * -EINVAL when n > max (never satisfiable). wait != 0 blocks, reclaiming idle
 * buffers of open files meanwhile; the caller must hold no rd_file lock. */
int rd_budget_take(struct rd_budget *b, uint64_t n, int wait);
void rd_budget_give(struct rd_budget *b, uint64_t n);
uint64_t rd_budget_used(struct rd_budget *b);
uint64_t rd_budget_peak(struct rd_budget *b);
uint64_t rd_budget_max(struct rd_budget *b);
struct stats_group;
extern const struct stats_group budget_stats_group;    /* obj: struct rd_budget * */

struct rd_config {
	struct fetcher *fetcher;        /* the top of the fetcher stack (fetch.h); it
					 * must outlive every rd_file. Its cancel ends
					 * readahead a seek left behind, when it cancels */
	struct rd_budget *budget;
	uint64_t part_size;         /* max bytes per GET; default 8 MiB */
	uint64_t max_window;        /* readahead cap; default 64 MiB, clamped to budget/4 */
	uint64_t max_ahead;         /* readahead of all streams together: a stream issues
				     * readahead only while the budget's charged bytes
				     * stay within this; 0: the budget's max. Demand
				     * reads may still use the whole budget. */
	uint64_t align;             /* segment alignment, a power of two: the cache's
				     * block size, so blocks are fetched and cached
				     * whole; 0: 64 KiB. part_size is rounded up to it. */
	uint64_t random_align;      /* a random read's alignment (a power of two, at
				     * most align): the cache's piece size; 0: align */
	struct stats_hist *read_wait; /* optional: every read's wait for bytes that
				     * were not there yet is observed here (0 when
				     * all were); must outlive the files */
};

/* The readahead caps for ncpu CPUs (<= 0: 1) and a budget of budget bytes:
 * max_ahead = 64 MiB per CPU, at most the budget; max_window = a quarter of
 * that, at most 64 MiB. Fetching far ahead of the readers costs more than it
 * gives (BENCHMARKS.md, "4 readers, cold"); demand reads may still use the
 * whole budget. */
void rd_config_set_caps(struct rd_config *cfg, long ncpu, uint64_t budget);

/* The first readahead chunk of a stream from offset 0 of a large object,
 * as rd_open would set it up for cfg: what a file's first GET fetches. */
uint64_t rd_first_window(const struct rd_config *cfg);

struct rd_file;
struct stats_hist;

/* key and etag are copied. etag may be NULL (then no If-Match). size is the
 * object size as known at open; every request carries it. cfg->fetcher and
 * cfg->budget are required; both must outlive the file. Returns NULL only on allocation failure. */
struct rd_file *rd_open(const struct rd_config *cfg, const char *key, size_t key_len,
			uint64_t size, const char *etag);

/* Read up to len bytes at off into dst. Returns bytes read (short only at EOF,
 * 0 at or past EOF) or -errno: the fetch's errno for a part that failed (a later
 * read retries it), or -ESTALE for every read once the object is seen to have
 * changed. Blocks until the bytes are there. May be called concurrently. */
ssize_t rd_read(struct rd_file *f, uint64_t off, size_t len, char *dst);

/*
 * Zero-copy read: as rd_read, but iov[0..*niov) points into the segments that
 * hold the bytes, which are pinned (not freed, reclaimed or changed) until
 * rd_unpin; a segment whose GET is in flight is waited for and pinned the same
 * way. Only when that cannot be done without waiting for budget while holding
 * a pin (bytes not yet fetched after pinned ones), or the read spans more than
 * RD_PIN_MAX segments, are the bytes copied into dst (len bytes) and iov[0]
 * points at dst (nothing pinned). Returns as rd_read. iov must hold RD_PIN_MAX
 * entries. Call rd_unpin once the bytes are used, without holding other
 * rd_file locks; hold a pin only for the reply (microseconds). rd_close waits
 * for outstanding pins: the kernel may release the file while the thread that
 * sent the reply is still to call rd_unpin.
 */
#define RD_PIN_MAX 8
struct rd_seg;
struct rd_pin {
	struct rd_seg *seg[RD_PIN_MAX];
	unsigned n;
};
struct iovec;
ssize_t rd_read_iov(struct rd_file *f, uint64_t off, size_t len, char *dst,
		    struct iovec *iov, unsigned *niov, struct rd_pin *pin);
void rd_unpin(struct rd_file *f, struct rd_pin *pin);

/* Waits for this file's GETs in flight, frees everything. No rd_read may be
 * running or start on f. */
void rd_close(struct rd_file *f);

#endif
