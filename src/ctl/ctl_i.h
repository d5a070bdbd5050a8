/*
 * ctl private: a connection's block fetches through the cache, shared by the
 * warm and share handlers (src/ctl/fetches.c).
 */
#ifndef FEEDFS_CTL_I_H
#define FEEDFS_CTL_I_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/fetch.h"

#define CTL_PATH_MAX 8192               /* longest path or key in a request */
#define CTL_ETAG_MAX 128

struct ctl_fetches {
	pthread_mutex_t mu;             /* the only lock a done callback takes */
	pthread_cond_t cv;
	unsigned inflight;              /* under mu */
	ssize_t err;                    /* under mu: first failure of a block, or 0 */
};

struct ctl_io {
	struct ctl_fetches *fx;
	int busy;                       /* under fx->mu: a fetch owns this buffer */
	struct fetch_req req;
};

/* Where blocks come from: our cache, or the owner's for an attached mount. */
struct ctl_source {
	struct fetcher *fetcher;
	uint32_t block;
};

void ctl_fetches_init(struct ctl_fetches *fx);
void ctl_fetches_destroy(struct ctl_fetches *fx);

/* Every block of one object, depth blocks in flight into bufs (each of
 * src->block bytes); the bytes go nowhere (the cache keeps them). Stops early
 * with -ECANCELED when the peer on fd goes away. Bytes or -errno. */
ssize_t ctl_fetch_object(struct ctl_fetches *fx, const struct ctl_source *src, int fd,
			 const char *key, size_t klen, const char *etag, uint64_t size,
			 char **bufs, struct ctl_io *ios, unsigned depth);

/* One range of an object into buf (len <= src->block). len or -errno. */
ssize_t ctl_fetch_range(struct ctl_fetches *fx, const struct ctl_source *src, const char *key,
			size_t klen, const char *etag, uint64_t size, uint64_t off, size_t len,
			char *buf, struct ctl_io *io);

#endif
