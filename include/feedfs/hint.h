/*
 * hint — loader-order prefetch: the daemon is told the order in which a
 * training loader will open files (`feedfs prefetch --order`, the O verb of
 * the control socket) and keeps a window of those files fetched ahead.
 *
 * DESIGN
 * An order is a list of mount-relative paths. Storing it is all the control
 * socket waits for; one thread of this module then resolves the paths, in
 * order, to (key, ETag, size) through the resolve function (the fs's
 * listings: one LIST per directory, never a HEAD per name) and hashes each
 * resolved key to its index (util_hash64), so an open is found in O(1).
 * The window: `low` is the first index not yet settled (opened, missing, not
 * fetchable or aged out) and `top` the furthest index opened. Files in
 * [low, low + window) that are resolved are handed to rd_ahead_want in
 * order; a refusal (no room: bytes, GETs in flight or budget) stops the pass,
 * and the pass runs again on every open and every HINT_TICK_MS while refused
 * files remain, so the window fills as room frees. The budget and ahead's
 * caps bound it; `window` only caps the files considered at once.
 * Many workers open different indexes at once, so an open marks its index
 * consumed (a set, not a "next"); `low` advances over settled indexes, and an
 * index that falls more than `window` behind `top` unopened ages out: if it
 * was fetched it is counted wasted and forgotten by ahead (its memory freed).
 * An open that finds no entry while paths are still resolving (the loader
 * starts as soon as the order is sent) is remembered (HINT_EARLY key hashes),
 * so its entry is settled when it resolves instead of fetched for nobody.
 * Other opens of files outside the order do not move anything; after
 * HINT_WANDER_OPENS of them in a row the window stops growing until an open
 * lands in the order again.
 * A new order or a clear replaces everything at once: every file fetched for
 * the old order and not opened is forgotten by ahead (freed now when held,
 * when its GET ends when in flight), and the old lists are freed.
 * Streams: a distributed loader has one order per rank, all opening files
 * through one node mount; each order names its stream (a short token, ""
 * by default) and replaces only that stream's order. Up to HINT_MAX_STREAMS
 * are kept, each with its own window; a new stream past that replaces the
 * least recently used one. An open settles the first order that holds the
 * file; one in no order counts towards every order's wander. The resolver
 * takes one path of each stream in turn.
 * A file larger than what ahead takes whole gets its first window
 * (head_size: the read path's first readahead chunk, so the stream's first
 * GET is answered from it); the ordinary sequential readahead follows.
 * Stale bytes: ahead keys entries by (key, ETag) and fetches with If-Match, a
 * read names the ETag its open saw, so a file replaced after the order is
 * never answered with the old bytes.
 * Memory: an order (its payload, ~100 bytes per path and its keys) is
 * charged to the read budget when hint_config.budget is set, and refused
 * (-E2BIG) when it would take more than half of it; the protocol bounds it
 * too (HINT_MAX_PATHS, HINT_MAX_BYTES). The charge goes back when the order
 * is replaced or cleared.
 * Threads: hint_set_order/hint_clear from a ctl thread, hint_opened from FUSE
 * workers, the resolver thread. One mutex, hint.mu. Lock order: hint.mu ->
 * rd_ahead.mu -> rd_budget.mu; resolve is called without hint.mu (it takes
 * fs->lock and may LIST), and hint.mu is never taken under fs->lock.
 */
#ifndef FEEDFS_HINT_H
#define FEEDFS_HINT_H

#include <stddef.h>
#include <stdint.h>

#define HINT_MAX_PATHS (1u << 22)           /* paths in one order */
#define HINT_MAX_BYTES (512u << 20)         /* bytes of one order's payload */
#define HINT_ETAG_MAX 128
#define HINT_MAX_STREAMS 64                 /* orders held at once */
#define HINT_STREAM_MAX 64                  /* bytes of a stream name */

/* Path -> object, as fs_resolve: *key malloc'd; 0, -ENOENT or -errno. */
typedef int (*hint_resolve_fn)(void *arg, const char *path, size_t len, char **key,
			       size_t *key_len, char *etag, size_t etag_len, uint64_t *size);

struct rd_ahead;
struct rd_budget;

struct hint_config {
	struct rd_ahead *ahead;         /* must outlive the hint */
	hint_resolve_fn resolve;
	void *resolve_arg;              /* must outlive the hint */
	struct rd_budget *budget;       /* optional: orders are charged to it */
	uint64_t head_size;             /* bytes of a file larger than ahead takes
					 * whole fetched ahead; 0: such files are skipped */
	unsigned window;                /* files considered ahead of `low`; 0: 256 */
	int64_t tick_ms;                /* retry period while refused files wait; 0: 20 */
};

struct hint_stats {
	uint64_t orders;        /* orders received (a clear is not one) */
	uint64_t streams;       /* gauge: orders held now */
	uint64_t paths;         /* gauge: paths in the current orders */
	uint64_t resolved;      /* gauge: paths of the current orders resolved so far */
	uint64_t bytes;         /* gauge: budget bytes the current orders hold */
	uint64_t missing;       /* paths not in the bucket (skipped) */
	uint64_t fetched;       /* files handed to ahead for an order */
	uint64_t hits;          /* opens of a file fetched or in flight for the order */
	uint64_t wasted;        /* files fetched for an order and dropped unopened */
	uint64_t consumed;      /* files of an order opened (each once) */
};

struct hint;

/* Starts the resolver thread. 0, -EINVAL (no ahead or resolve) or -ENOMEM. */
int hint_new(const struct hint_config *cfg, struct hint **out);
/* Stops the thread, forgets what the order fetched, frees everything. No
 * other call may be running or start. NULL is a no-op. */
void hint_destroy(struct hint *h);

/* 0 when payload (nbytes) is count paths, each ended by '\n', each relative
 * (no leading '/', no empty, "." or ".." segment, no NUL); else -EINVAL.
 * Pure: for the ctl handler and the CLI alike. */
int hint_order_check(const char *payload, size_t nbytes, size_t count);
/* 0 when stream is a valid stream name: at most HINT_STREAM_MAX bytes of
 * [A-Za-z0-9._-] ("" is the default stream); else -EINVAL. */
int hint_stream_check(const char *stream);
/* Replace stream's order with payload (count paths, already checked); takes
 * the malloc'd payload over (freed with the order). 0 (payload taken), or
 * (payload still the caller's; the old order stays) -EINVAL (bad stream),
 * -E2BIG (more than half the budget) or -ENOMEM. May wait for budget. */
int hint_set_order(struct hint *h, const char *stream, char *payload, size_t nbytes,
		   size_t count);
/* Drop stream's order (NULL: every stream's) and everything fetched for it
 * and not opened. */
void hint_clear(struct hint *h, const char *stream);

/* A file was opened (any thread, no fs lock held). */
void hint_opened(struct hint *h, const char *key, size_t key_len);

void hint_get_stats(struct hint *h, struct hint_stats *out);
/* For tests: wait (up to timeout_ms) until every path of the current orders is
 * resolved or missing. 1 when they are. */
int hint_wait_resolved(struct hint *h, int64_t timeout_ms);

struct stats_group;
extern const struct stats_group hint_stats_group;   /* "order"; obj: struct hint * */

#endif
