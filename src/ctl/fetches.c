/*
 * fetches — block fetches a control connection waits for (warm, share):
 * fetch through the cache into buffers the connection owns, and wait until
 * every one has come back, whatever happens to the peer.
 * Locks: fx->mu guards the in-flight count and the buffers' busy flags, and
 * is the only lock taken in done (on the cache thread).
 */
#include "ctl_i.h"

#include <errno.h>
#include <stdlib.h>

#include "feedfs/ctl.h"
#include "feedfs/log.h"

void ctl_fetches_init(struct ctl_fetches *fx)
{
	pthread_mutex_init(&fx->mu, NULL);
	pthread_cond_init(&fx->cv, NULL);
	fx->inflight = 0;
	fx->err = 0;
}

void ctl_fetches_destroy(struct ctl_fetches *fx)
{
	pthread_cond_destroy(&fx->cv);
	pthread_mutex_destroy(&fx->mu);
}

/* Cache thread: must not block beyond fx->mu. */
static void io_done(struct fetch_req *req, ssize_t result)
{
	struct ctl_io *io = req->done_arg;
	struct ctl_fetches *fx = io->fx;

	pthread_mutex_lock(&fx->mu);
	if (result != (ssize_t)req->len && fx->err == 0)
		fx->err = result < 0 ? result : -EIO;
	io->busy = 0;
	fx->inflight--;
	pthread_cond_broadcast(&fx->cv);
	pthread_mutex_unlock(&fx->mu);
}

/* Start one fetch of [off, off + len) of the object into buf. */
static int io_fetch(struct ctl_io *io, const struct ctl_source *src, const char *key, size_t klen,
		    const char *etag, uint64_t size, uint64_t off, size_t len, char *buf)
{
	io->req = (struct fetch_req){
		.key = key, .key_len = klen, .etag = etag, .obj_size = size,
		.off = off, .len = len, .buf = buf, .done = io_done, .done_arg = io,
	};
	return fetcher_fetch(src->fetcher, &io->req);
}

static void io_unclaim(struct ctl_fetches *fx, struct ctl_io *io)
{
	pthread_mutex_lock(&fx->mu);
	io->busy = 0;
	fx->inflight--;
	pthread_mutex_unlock(&fx->mu);
}

/* Wait for every fetch in flight; the first error, or 0. */
static ssize_t wait_all(struct ctl_fetches *fx, ssize_t err)
{
	pthread_mutex_lock(&fx->mu);
	while (fx->inflight)
		pthread_cond_wait(&fx->cv, &fx->mu);
	if (err == 0)
		err = fx->err;
	pthread_mutex_unlock(&fx->mu);
	return err;
}

ssize_t ctl_fetch_object(struct ctl_fetches *fx, const struct ctl_source *src, int fd,
			 const char *key, size_t klen, const char *etag, uint64_t size,
			 char **bufs, struct ctl_io *ios, unsigned depth)
{
	uint64_t off = 0;
	unsigned slot = 0;
	ssize_t err = 0;

	fx->err = 0;
	while (off < size && err == 0) {
		size_t n = size - off < src->block ? (size_t)(size - off) : src->block;
		int rc;

		pthread_mutex_lock(&fx->mu);
		while (fx->inflight >= depth)
			pthread_cond_wait(&fx->cv, &fx->mu);
		err = fx->err;
		if (err == 0) {
			/* Fetches complete in any order: take a buffer no fetch owns. */
			for (slot = 0; ios[slot].busy; slot++)
				BUG_ON(slot + 1 >= depth);
			ios[slot].busy = 1;
			fx->inflight++;
		}
		pthread_mutex_unlock(&fx->mu);
		if (err)
			break;
		if (ctl_peer_gone(fd)) {
			io_unclaim(fx, &ios[slot]);
			err = -ECANCELED;
			break;
		}
		ios[slot].fx = fx;
		rc = io_fetch(&ios[slot], src, key, klen, etag, size, off, n, bufs[slot]);
		if (rc < 0) {
			io_unclaim(fx, &ios[slot]);
			err = rc;
			break;
		}
		off += n;
	}
	err = wait_all(fx, err);
	return err < 0 ? err : (ssize_t)size;
}

ssize_t ctl_fetch_range(struct ctl_fetches *fx, const struct ctl_source *src, const char *key,
			size_t klen, const char *etag, uint64_t size, uint64_t off, size_t len,
			char *buf, struct ctl_io *io)
{
	ssize_t err;
	int rc;

	pthread_mutex_lock(&fx->mu);
	fx->err = 0;
	io->busy = 1;
	fx->inflight++;
	pthread_mutex_unlock(&fx->mu);
	io->fx = fx;
	rc = io_fetch(io, src, key, klen, etag, size, off, len, buf);
	if (rc < 0)
		io_unclaim(fx, io);
	err = wait_all(fx, rc < 0 ? rc : 0);
	return err < 0 ? err : (ssize_t)len;
}
