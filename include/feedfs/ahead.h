/*
 * ahead — readahead across files: whole small objects fetched before they are
 * opened, for loaders that read a directory of small files in listing order.
 *
 * DESIGN
 * A training loader opens thousands of 100 KiB files, a few at a time; each
 * open then waits one round trip for its GET. The fs layer sees the opens and
 * the directory's listing; when the opens of one directory follow the listing
 * order it asks this module (rd_ahead_want) for the next files in that order.
 * Each wanted object is fetched whole, by one GET with If-Match, into a buffer
 * charged to the read budget; the entry is keyed by (key, ETag).
 *  - rd_ahead_fetcher is a fetcher (fetch.h) over an inner one (the block
 *    cache, the attached cache, or S3); it is the top of the stack that
 *    rd_config names. A request for bytes of an entry is answered from it:
 *    the bytes are copied and the entry is freed (a dataset file is read once
 *    per epoch; the page cache and the block cache keep it after that). A
 *    request that finds the entry still in flight joins it. Anything else is
 *    handed to the inner fetcher as it is (the caller's own struct fetch_req).
 *  - Cancel: a joined request is taken off its entry and ends -ECANCELED (on
 *    the answer thread; the entry's GET goes on); one answered from a finished
 *    entry gets its full result; any other is forwarded to the inner fetcher,
 *    which holds it. `cancels` is the inner fetcher's.
 *  - Never wrong bytes: an entry serves only requests naming the same ETag,
 *    and its GET was made with If-Match on that ETag (a changed object fails
 *    it, and the joined requests get that error, -ESTALE).
 *  - Bounded: at most max_bytes held or in flight and max_inflight GETs;
 *    budget taken without waiting (no budget, no prefetch). Entries nobody
 *    asked for are dropped after hold_ms, and at once when a demand read of
 *    any file is short of budget (they are a budget client).
 * Threads: want and fetch are called from FUSE workers; GET completions run on
 * the fetcher's thread; answers from a finished entry are handed to one small
 * thread of this module (the fetch contract forbids calling done before fetch
 * returns, and the caller holds its file lock). One mutex guards everything.
 * Lock order: rd_file.mu -> rd_ahead.mu -> rd_budget.mu (the budget's reclaim
 * hook only trylocks rd_ahead.mu).
 */
#ifndef FEEDFS_AHEAD_H
#define FEEDFS_AHEAD_H

#include <stddef.h>
#include <stdint.h>

#include "feedfs/fetch.h"
#include "feedfs/prefetch.h"

struct rd_ahead_config {
	struct fetcher *inner;          /* must outlive the rd_ahead */
	struct rd_budget *budget;       /* must outlive the rd_ahead */
	uint64_t max_bytes;             /* held + in flight; 0: budget max / 4 */
	uint64_t max_file_size;         /* larger objects are never wanted; 0: 8 MiB */
	unsigned max_inflight;          /* GETs at once; 0: 16 */
	int64_t hold_ms;                /* an entry nobody asked for lives this long; 0: 10 s */
};

struct rd_ahead_stats {
	uint64_t wanted;        /* objects asked for by rd_ahead_want */
	uint64_t issued;        /* whole-object GETs started */
	uint64_t hits;          /* requests answered from a finished entry */
	uint64_t joined;        /* requests that joined an entry in flight */
	uint64_t dropped;       /* entries freed unused (expired or reclaimed) */
	uint64_t failed;        /* entry GETs that failed */
	uint64_t skipped;       /* wants refused for lack of room or budget */
};

struct rd_ahead;

/* 0, -EINVAL (no inner fetcher or budget) or -ENOMEM. */
int rd_ahead_new(const struct rd_ahead_config *cfg, struct rd_ahead **out);
/* Waits for the GETs in flight and frees every entry. No want or fetch may be
 * running or start. */
void rd_ahead_destroy(struct rd_ahead *a);

/* Start fetching the object whole unless it is held or in flight already.
 * Returns 1 when it is held, in flight or now fetching; 0 when refused: too
 * big, no ETag, or no room (bytes, GETs in flight, budget). Never blocks on
 * the network. */
int rd_ahead_want(struct rd_ahead *a, const char *key, size_t key_len, const char *etag,
		   uint64_t size);

/* The same for the first len bytes of an object of size bytes (len <= size):
 * the entry answers a request inside [0, len) of that object. len above the
 * largest file is refused. */
int rd_ahead_want_head(struct rd_ahead *a, const char *key, size_t key_len, const char *etag,
		       uint64_t size, uint64_t len);

/* The object is no longer wanted (an order hint was cleared or moved past
 * it): a held entry nobody claimed is freed now, one in flight as soon as its
 * GET ends, unless a read joins it or it is wanted again first. Counted in
 * `dropped`. Unknown objects are ignored. Never blocks on the network. */
void rd_ahead_forget(struct rd_ahead *a, const char *key, size_t key_len, const char *etag);

/* This layer as a fetcher (fetch.h): see DESIGN. Lives as long as a. */
struct fetcher *rd_ahead_fetcher(struct rd_ahead *a);

/* The largest object rd_ahead_want takes. */
uint64_t rd_ahead_max_file_size(const struct rd_ahead *a);

void rd_ahead_get_stats(struct rd_ahead *a, struct rd_ahead_stats *out);
struct stats_group;
extern const struct stats_group ahead_stats_group;     /* obj: struct rd_ahead * */

#endif
