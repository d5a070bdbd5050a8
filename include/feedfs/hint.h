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
 * Stale bytes: ahead keys entries by (key, ETag) and fetches with If-Match, a
 * read names the ETag its open saw, so a file replaced after the order is
 * never answered with the old bytes.
 * Memory: the order itself (the payload and ~48 bytes per path) is held
 * outside the read budget; the protocol bounds it (HINT_MAX_PATHS,
 * HINT_MAX_BYTES).
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

/* Path -> object, as fs_resolve: *key malloc'd; 0, -ENOENT or -errno. */
typedef int (*hint_resolve_fn)(void *arg, const char *path, size_t len, char **key,
			       size_t *key_len, char *etag, size_t etag_len, uint64_t *size);

struct rd_ahead;

struct hint_config {
	struct rd_ahead *ahead;         /* must outlive the hint */
	hint_resolve_fn resolve;
	void *resolve_arg;              /* must outlive the hint */
	unsigned window;                /* files considered ahead of `low`; 0: 256 */
	int64_t tick_ms;                /* retry period while refused files wait; 0: 20 */
};

struct hint_stats {
	uint64_t orders;        /* orders received (a clear is not one) */
	uint64_t paths;         /* gauge: paths in the current order */
	uint64_t resolved;      /* gauge: paths of the current order resolved so far */
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
/* Replace the order with payload (count paths, already checked); takes the
 * malloc'd payload over (freed with the order). 0 (payload taken) or -ENOMEM
 * (payload still the caller's; the old order stays). */
int hint_set_order(struct hint *h, char *payload, size_t nbytes, size_t count);
/* Drop the order and everything fetched for it and not opened. */
void hint_clear(struct hint *h);

/* A file was opened (any thread, no fs lock held). */
void hint_opened(struct hint *h, const char *key, size_t key_len);

void hint_get_stats(struct hint *h, struct hint_stats *out);
/* For tests: wait (up to timeout_ms) until every path of the current order is
 * resolved or missing. 1 when they are. */
int hint_wait_resolved(struct hint *h, int64_t timeout_ms);

struct stats_group;
extern const struct stats_group hint_stats_group;   /* "order"; obj: struct hint * */

#endif
