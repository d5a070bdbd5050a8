/*
 * stack — the read path's fetcher stack, built in one place:
 *
 *     s3 -> (own block cache | attached cache) -> across-file readahead -> rd_file
 *
 * DESIGN
 * Each arrow is a struct fetcher (fetch.h) holding the one to its left as its
 * inner fetcher; rd_file (prefetch.h) fetches through the top of the stack.
 *  - s3: the S3 client (s3.h, struct s3_fetcher). It cancels.
 *  - With a cache dir, one of two layers sits on it:
 *    own cache (cache.h): this mount owns the dir; it also opens the dir's
 *      share socket so other mounts of the bucket can attach. It does not
 *      cancel (its blocks are worth keeping).
 *    attached cache (attach.h): another mount of the same bucket and endpoint
 *      owns the dir; reads go through that owner's cache, S3 is the fallback.
 *      Mounts of one node start together, so while the owner is still opening
 *      its cache (no share socket yet) or has just gone (its lock released),
 *      both are retried for up to STACK_ATTACH_WAIT_MS. An owner at its
 *      connection limit is not an error: the mount goes without a cache.
 *  - readahead across files (ahead.h) on top, always: prefetched small files
 *    go through the cache too, so they are cached on disk.
 * The stack fills the read path's fetcher and alignment: with a cache (either
 * kind) segments are aligned to its blocks and random reads to its pieces.
 * Warming (`feedfs warm`) fetches through the cache layer, stack.cached.
 * Teardown is the reverse of the build, after every user of the stack.
 */
#ifndef FEEDFS_STACK_H
#define FEEDFS_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "feedfs/cache.h"
#include "feedfs/fetch.h"
#include "feedfs/prefetch.h"
#include "feedfs/s3.h"

#define STACK_ATTACH_WAIT_MS 20000

struct attach;
struct ctl_share;
struct rd_ahead;

struct stack_config {
	struct s3_client *s3;               /* must outlive the stack; NULL with bottom */
	struct fetcher *bottom;             /* the layer under the cache instead of s3
					     * (several sources: route.h); NULL: s3 */
	struct rd_budget *budget;           /* must outlive the stack */
	uint64_t part_size;                 /* objects up to this are fetched ahead whole */
	const struct cache_config *cache;   /* NULL: no cache dir. Its inner is set here */
	const char *share_id;               /* bucket and endpoint: who may share the dir */
	size_t share_id_len;
};

struct stack {
	struct s3_fetcher s3;
	struct cache *cache;                /* we own the cache dir */
	struct attach *attach;              /* another mount owns it */
	struct ctl_share *share;            /* our cache's share socket (NULL: not shared) */
	struct rd_ahead *ahead;
	struct fetcher *cached;             /* the cache layer, for warming; NULL: none */
	uint32_t cached_block;              /* its block size */
	/* For the read path: fetcher, align and random_align are set; the rest
	 * (budget, part size, readahead caps) is the caller's. */
	struct rd_config rd;
};

/*
 * Build the stack into *st. Returns 0, or -errno with one user-facing line in
 * msg (nothing is left built then), e.g. "cache dir /x is in use by feedfs pid
 * 12 and its owner mounts another bucket or endpoint, so it cannot be shared;
 * give each mount its own --cache-dir". On an attach, msg holds the line that
 * names the owner ("cache dir /x is in use by feedfs pid 12") for the log.
 */
int stack_build(const struct stack_config *cfg, struct stack *st, char *msg, size_t msg_len);

/* Tear down in reverse order; every rd_file and warm server must be gone.
 * A zeroed or failed stack is a no-op. */
void stack_destroy(struct stack *st);

#endif
