/*
 * attach — read through another mount's block cache (the mount that owns a
 * cache dir), for mounts of the same bucket that were given the same
 * --cache-dir: many pods on one node, one NVMe cache.
 *
 * DESIGN
 * The owner listens on CACHE_SHARE_SOCKET in the cache dir (protocol in
 * cache.h). attach_new connects ATTACH_CONNS times, names the bucket and
 * endpoint on each connection ("H") and learns the owner's block size and
 * largest read (fewer connections when the owner is nearly full). The
 * read path fetches through attach_fetcher (fetch.h): a request is queued; one
 * thread per connection takes it, asks the owner for it block by block ("R",
 * each piece at most the owner's largest read, never across a block
 * boundary) and receives
 * the bytes straight into the caller's buffer, then calls done.
 *  - Never wrong bytes: the owner reads through its cache, keyed by ETag, with
 *    If-Match on a miss; an error it answers (ESTALE included) is the
 *    request's result.
 *  - The owner going away (unmounted, killed) is not an error: the request in
 *    hand and every later one go to the inner fetcher (S3, with this mount's own
 *    credentials), and this is logged once. A restarted owner is not
 *    re-attached to; remount to share again.
 *  - Requests without an ETag or an object size go to the inner fetcher (the
 *    owner's cache needs both), as the caller's own request.
 *  - Cancel (a seek or a close of the reading file; cancels = 1): a request
 *    still queued ends with -ECANCELED without asking the owner; one in hand
 *    stops before its next block (the block being read finishes). A request
 *    that went to the inner fetcher is cancelled there.
 * Threads: fetch is called from the read path (file locks held: it only
 * queues); done runs on an attach thread or, after a fallback, on the inner
 * fetcher's thread. One mutex guards the queue and the state.
 */
#ifndef FEEDFS_ATTACH_H
#define FEEDFS_ATTACH_H

#include <stddef.h>
#include <stdint.h>

#include "feedfs/fetch.h"

#define ATTACH_CONNS 8

struct attach;

struct attach_stats {
	uint64_t reads;         /* requests answered by the owner */
	uint64_t bytes;         /* bytes they carried */
	uint64_t fallbacks;     /* requests sent to the inner fetch instead */
	uint64_t cancelled;     /* requests ended early by a cancel */
};

/*
 * Connect to the owner of cache_dir as a mount of id (id_len bytes: bucket
 * and endpoint). One try: the caller retries an owner still starting.
 * inner is the fetcher used when the owner is gone (it must outlive the
 * attach). Returns 0, or -errno with a
 * line in msg: -ENOENT/-ECONNREFUSED (no owner listening), -EXDEV (the owner
 * mounts another bucket or endpoint), -EBUSY (the owner is at SHARE_MAX_CONNS
 * connections), -EPROTO.
 */
int attach_new(const char *cache_dir, const char *id, size_t id_len, struct fetcher *inner,
	       struct attach **out, char *msg, size_t msg_len);
/* Every request queued must have completed (no read running). */
void attach_destroy(struct attach *a);
uint32_t attach_block_size(const struct attach *a);
void attach_get_stats(struct attach *a, struct attach_stats *out);
struct stats_group;
extern const struct stats_group attach_stats_group;    /* obj: struct attach * */

/* This mount's reads through the owner's cache, as a fetcher (fetch.h; see
 * DESIGN). Lives as long as a. */
struct fetcher *attach_fetcher(struct attach *a);

#endif
