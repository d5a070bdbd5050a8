/*
 * fetch — the read path's one seam: a request for a byte range of one object
 * version, and the small ops table every layer that can answer it implements.
 *
 * DESIGN
 * The read path is a stack of fetchers (built in one place, src/stack.c):
 *   s3 -> (own block cache | attached cache) -> across-file readahead -> rd_file
 * Each layer is a struct fetcher that holds its own `inner` fetcher and either
 * answers a request itself (from disk, from the owner's cache, from a whole
 * object fetched ahead) or forwards it. A layer that forwards the caller's
 * request hands inner the caller's own struct fetch_req, so the caller's done
 * runs straight from inner and a cancel of that request, forwarded the same
 * way, reaches the layer that holds it. A layer that makes requests of its own
 * (the cache's block GETs) owns those fetch_reqs and their cancels.
 * This header depends on no other feedfs header: adding a field to a request
 * touches this struct and the layers that read it, nothing else.
 *
 * The contract, for every fetcher:
 *  - fetch returns 0 when the request is queued: done(req, result) then runs
 *    exactly once, later, never on the calling thread before fetch returned
 *    (callers hold locks), with result == len or -errno. Or fetch returns
 *    -errno and done is never called.
 *  - A changed object (the ETag no longer matches) is -ESTALE; bytes of
 *    another version are never delivered as success.
 *  - The request (and the key, ETag and buffer it points to) is the caller's
 *    and lives until done ran; a fetcher may keep pointers into it until then.
 *  - done runs on the fetcher's own thread (the http thread, the cache thread,
 *    an attach or ahead thread) and must not block.
 *  - cancel(req) asks that a request end early. The caller calls it only
 *    before that request's done ran; done still runs exactly once, later and
 *    never on the cancelling thread, with -ECANCELED or its full result.
 *    cancel never fails: a fetcher that cannot place the request (it was
 *    handed on, or finished meanwhile) forwards it or ignores it.
 *  - `cancels` says whether cancel can end anything early. 0: cancel is a
 *    no-op and requests run to their end (the block cache: the blocks it is
 *    fetching are worth keeping), so a caller may as well keep what it asked
 *    for. A layer that forwards sets it from its inner fetcher.
 */
#ifndef FEEDFS_FETCH_H
#define FEEDFS_FETCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FETCH_SIZE_UNKNOWN UINT64_MAX

struct fetch_req;
struct fetcher;

/* done(req, len or -errno): exactly once per queued request. */
typedef void (*fetch_done_fn)(struct fetch_req *req, ssize_t result);

struct fetch_req {
	const char *key;            /* raw bytes, key_len of them */
	size_t key_len;
	const char *etag;           /* If-Match; NULL or "": none, and never cached */
	uint64_t obj_size;          /* as known at open; FETCH_SIZE_UNKNOWN when not */
	uint64_t off;               /* [off, off + len) of the object, len > 0 */
	size_t len;
	void *buf;                  /* len bytes, the caller's */
	fetch_done_fn done;
	void *done_arg;             /* the caller's: fetchers never touch it */
};

struct fetcher_ops {
	/* 0 queued, or -errno with done not called. Any thread. */
	int (*fetch)(struct fetcher *f, struct fetch_req *req);
	/* See the contract above; NULL: a no-op. Any thread, locks held. */
	void (*cancel)(struct fetcher *f, struct fetch_req *req);
};

struct fetcher {
	const struct fetcher_ops *ops;
	int cancels;                /* 1: cancel may end a request early */
};

static inline int fetcher_fetch(struct fetcher *f, struct fetch_req *req)
{
	return f->ops->fetch(f, req);
}

static inline void fetcher_cancel(struct fetcher *f, struct fetch_req *req)
{
	if (f->ops->cancel)
		f->ops->cancel(f, req);
}

/* Recover the layer's struct from its embedded struct fetcher. */
#define fetcher_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
