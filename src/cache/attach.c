/*
 * attach.c — read through the cache of the mount that owns the cache dir
 * (design and contract in feedfs/attach.h; the owner's side is in warm.c).
 */
#include "feedfs/attach.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "feedfs/cache.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "attach"
#define ATT_LOST (-100000)              /* serve(): the connection is gone */
#define ATT_SILENT_S 300                /* an owner silent this long is gone */

struct att_job {
	struct att_job *next;
	char *key;                      /* key_len bytes, then the ETag, NUL-ended */
	size_t key_len;
	const char *etag;
	uint64_t size, off;
	size_t len;
	char *buf;
	struct fetch_req *req;          /* the caller's: req->done(req, ...) at the end */
	int cancelled;                  /* guarded by attach.mu */
};

struct attach {
	struct fetcher base;            /* what the read path and warm fetch through */
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint32_t block, max_read;
	struct fetcher *inner;          /* S3: the fallback */
	struct att_worker {
		struct attach *a;
		int fd;                 /* its connection to the owner */
		pthread_t th;
		struct att_job *cur;    /* the job in hand, guarded by mu */
	} wk[ATTACH_CONNS];
	int nconns;
	/* Guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct att_job *head, *tail;
	int stop, gone;
	struct attach_stats st;
};

static int job_cancelled(struct attach *a, struct att_job *j)
{
	int c;

	pthread_mutex_lock(&a->mu);
	c = j->cancelled;
	pthread_mutex_unlock(&a->mu);
	return c;
}

/* The owner's answer line: "OK <n>" -> n (>= 0), "ERR <e>" -> -e, else
 * ATT_LOST (connection or protocol failure). */
static long long read_answer(int fd)
{
	char line[64], *end;
	long long v;

	if (util_read_line(fd, line, sizeof(line)) < 0)
		return ATT_LOST;
	if (strncmp(line, "OK ", 3) == 0) {
		v = strtoll(line + 3, &end, 10);
		return *end || v < 0 ? ATT_LOST : v;
	}
	if (strncmp(line, "ERR ", 4) == 0) {
		v = strtoll(line + 4, &end, 10);
		return *end || v <= 0 || v > 4095 ? ATT_LOST : -v;
	}
	return ATT_LOST;
}

/* Connect and name bucket and endpoint; learn the block size and the largest
 * read. Returns the fd, or -errno (-EXDEV, -EBUSY: the owner's answer). */
static int connect_hello(const char *path, const char *id, size_t id_len, uint32_t *block,
			 uint32_t *max_read)
{
	struct sockaddr_un sa;
	struct timeval tv = { .tv_sec = ATT_SILENT_S };
	unsigned long long b, m;
	char hdr[32], line[64];
	int fd, e;

	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	snprintf(hdr, sizeof(hdr), "H %zu\n", id_len);
	e = -EPROTO;
	if (util_send_all(fd, hdr, strlen(hdr)) == 0 && util_send_all(fd, id, id_len) == 0) {
		if (util_read_line(fd, line, sizeof(line)) < 0)
			line[0] = '\0';
		if (sscanf(line, "OK %llu %llu", &b, &m) == 2 && b >= (1u << 20) &&
		    b <= (16u << 20) && !(b & (b - 1)) && m >= 4096 && m <= b) {
			*block = (uint32_t)b;
			*max_read = (uint32_t)m;
			return fd;
		}
		if (strcmp(line, "ERR 18") == 0)
			e = -EXDEV;
		else if (strcmp(line, "ERR 16") == 0)
			e = -EBUSY;
	}
	close(fd);
	return e;
}

/* Ask the owner for the job's bytes, one block at a time. Returns len, the
 * owner's -errno, or ATT_LOST. */
static ssize_t serve(struct attach *a, int fd, struct att_job *j)
{
	size_t elen = strlen(j->etag);
	uint64_t pos = j->off, end = j->off + j->len;

	while (pos < end) {
		uint64_t next = (pos / a->block + 1) * a->block;
		size_t n = (size_t)((next < end ? next : end) - pos);
		char hdr[128];
		long long v;

		if (job_cancelled(a, j))
			return -ECANCELED;      /* the rest is not wanted any more */
		if (n > a->max_read)
			n = a->max_read;
		snprintf(hdr, sizeof(hdr), "R %zu %zu %llu %llu %zu\n", j->key_len, elen,
			 (unsigned long long)j->size, (unsigned long long)pos, n);
		if (util_send_all(fd, hdr, strlen(hdr)) < 0 ||
		    util_send_all(fd, j->key, j->key_len) < 0 ||
		    util_send_all(fd, j->etag, elen) < 0)
			return ATT_LOST;
		v = read_answer(fd);
		if (v == ATT_LOST || (v >= 0 && (size_t)v != n))
			return ATT_LOST;
		if (v < 0)
			return (ssize_t)v;
		if (util_read_all(fd, j->buf + (pos - j->off), n) < 0)
			return ATT_LOST;
		pos += n;
	}
	return (ssize_t)j->len;
}

static void job_free(struct att_job *j)
{
	free(j->key);
	free(j);
}

/* Hand the caller's request to the inner fetcher (which then owns done, and
 * takes its cancel). */
static void fallback(struct attach *a, struct att_job *j)
{
	struct fetch_req *req = j->req;
	int rc = fetcher_fetch(a->inner, req);

	pthread_mutex_lock(&a->mu);
	a->st.fallbacks++;
	pthread_mutex_unlock(&a->mu);
	if (rc < 0)
		req->done(req, rc);
	job_free(j);
}

static void *worker_main(void *arg)
{
	struct att_worker *wk = arg;
	struct attach *a = wk->a;
	pthread_setname_np(pthread_self(), "feedfs-attach");
	pthread_mutex_lock(&a->mu);
	for (;;) {
		struct att_job *j;
		ssize_t r;
		int gone;

		while (!a->head && !a->stop)
			pthread_cond_wait(&a->cv, &a->mu);
		if (!a->head)
			break;
		j = a->head;
		a->head = j->next;
		if (!a->head)
			a->tail = NULL;
		gone = a->gone;
		wk->cur = j;
		pthread_mutex_unlock(&a->mu);

		r = gone ? ATT_LOST : serve(a, wk->fd, j);
		pthread_mutex_lock(&a->mu);
		wk->cur = NULL;
		if (r == -ECANCELED)
			a->st.cancelled++;
		pthread_mutex_unlock(&a->mu);
		if (r == ATT_LOST) {
			pthread_mutex_lock(&a->mu);
			if (!a->gone)
				log_warn(TAG, "the cache's owner stopped answering (%s); reading "
					 "from S3 directly from now on", a->path);
			a->gone = 1;
			pthread_mutex_unlock(&a->mu);
			fallback(a, j);
		} else {
			pthread_mutex_lock(&a->mu);
			if (r >= 0) {
				a->st.reads++;
				a->st.bytes += (uint64_t)r;
			}
			pthread_mutex_unlock(&a->mu);
			j->req->done(j->req, r);
			job_free(j);
		}
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static const struct fetcher_ops attach_ops;

/* Both sides of sharing name the socket so: the owner (src/ctl/share.c) and us. */
int cache_share_socket_path(const char *cache_dir, char *out, size_t out_len)
{
	int n = snprintf(out, out_len, "%s/%s", cache_dir, CACHE_SHARE_SOCKET);

	if (n < 0 || (size_t)n >= out_len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

int attach_new(const char *cache_dir, const char *id, size_t id_len, struct fetcher *inner,
	       struct attach **out, char *msg, size_t msg_len)
{
	struct attach *a = calloc(1, sizeof(*a));
	uint32_t block = 0, max_read = 0;
	int fd, e;

	if (!a)
		return -ENOMEM;
	e = cache_share_socket_path(cache_dir, a->path, sizeof(a->path));
	if (e < 0) {
		snprintf(msg, msg_len, "the path %s/%s is too long for a unix socket", cache_dir,
			 CACHE_SHARE_SOCKET);
		free(a);
		return e;
	}
	fd = connect_hello(a->path, id, id_len, &block, &max_read);
	if (fd < 0) {
		snprintf(msg, msg_len, "%s", fd == -EXDEV ?
			 "its owner mounts another bucket or endpoint, so it cannot be shared" :
			 fd == -EBUSY ? "its owner serves as many attached mounts as it can" :
			 fd == -ENOENT || fd == -ECONNREFUSED ?
			 "its owner does not offer it for sharing (no share socket)" :
			 "its owner's share socket did not answer as expected");
		free(a);
		return fd;
	}
	a->block = block;
	a->max_read = max_read;
	a->base.ops = &attach_ops;
	a->base.cancels = 1;
	a->inner = inner;
	a->wk[a->nconns++].fd = fd;
	while (a->nconns < ATTACH_CONNS) {
		uint32_t b2 = 0, m2 = 0;

		fd = connect_hello(a->path, id, id_len, &b2, &m2);
		if (fd < 0 || b2 != block || m2 != max_read) {
			if (fd >= 0)
				close(fd);
			break;
		}
		a->wk[a->nconns++].fd = fd;
	}
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	for (int i = 0; i < a->nconns; i++) {
		a->wk[i].a = a;
		if (pthread_create(&a->wk[i].th, NULL, worker_main, &a->wk[i]) != 0) {
			for (int k = i; k < a->nconns; k++)
				close(a->wk[k].fd);
			a->nconns = i;
			break;
		}
	}
	if (a->nconns == 0) {
		snprintf(msg, msg_len, "cannot start a thread");
		pthread_cond_destroy(&a->cv);
		pthread_mutex_destroy(&a->mu);
		free(a);
		return -EAGAIN;
	}
	*out = a;
	return 0;
}

void attach_destroy(struct attach *a)
{
	if (!a)
		return;
	pthread_mutex_lock(&a->mu);
	a->stop = 1;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	for (int i = 0; i < a->nconns; i++) {
		pthread_join(a->wk[i].th, NULL);
		close(a->wk[i].fd);
	}
	BUG_ON(a->head);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

uint32_t attach_block_size(const struct attach *a)
{
	return a->block;
}

void attach_get_stats(struct attach *a, struct attach_stats *out)
{
	pthread_mutex_lock(&a->mu);
	*out = a->st;
	pthread_mutex_unlock(&a->mu);
}

/* The fetcher's fetch: queue the request for a worker, or hand it to the
 * inner fetcher as it is (owner gone, no ETag, size unknown). */
static int attach_fetch(struct fetcher *f, struct fetch_req *req)
{
	struct attach *a = fetcher_of(f, struct attach, base);
	const char *etag = req->etag;
	uint64_t obj_size = req->obj_size, off = req->off;
	size_t len = req->len, key_len = req->key_len, elen;
	struct att_job *j;
	int gone;

	pthread_mutex_lock(&a->mu);
	gone = a->gone;
	pthread_mutex_unlock(&a->mu);
	if (gone || !etag || !etag[0] || len == 0 || obj_size == FETCH_SIZE_UNKNOWN ||
	    off > obj_size || len > obj_size - off)
		return fetcher_fetch(a->inner, req);
	elen = strlen(etag);
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->key = malloc(key_len + elen + 1);
	if (!j->key) {
		free(j);
		return -ENOMEM;
	}
	memcpy(j->key, req->key, key_len);
	memcpy(j->key + key_len, etag, elen + 1);
	j->key_len = key_len;
	j->etag = j->key + key_len;
	j->size = obj_size;
	j->off = off;
	j->len = len;
	j->buf = req->buf;
	j->req = req;
	pthread_mutex_lock(&a->mu);
	if (a->tail)
		a->tail->next = j;
	else
		a->head = j;
	a->tail = j;
	pthread_cond_signal(&a->cv);
	pthread_mutex_unlock(&a->mu);
	return 0;
}

/* See attach.h. */
static void attach_cancel(struct fetcher *f, struct fetch_req *req)
{
	struct attach *a = fetcher_of(f, struct attach, base);
	struct att_job *j = NULL;

	pthread_mutex_lock(&a->mu);
	for (j = a->head; j && j->req != req; j = j->next)
		;
	for (int i = 0; !j && i < a->nconns; i++)
		if (a->wk[i].cur && a->wk[i].cur->req == req)
			j = a->wk[i].cur;
	if (j)
		j->cancelled = 1;       /* its worker ends it, never this thread */
	pthread_mutex_unlock(&a->mu);
	/* Not ours: it went to the inner fetcher (no ETag, or the owner gone)
	 * as the caller's own request. */
	if (!j)
		fetcher_cancel(a->inner, req);
}

static const struct fetcher_ops attach_ops = {
	.fetch = attach_fetch,
	.cancel = attach_cancel,
};

struct fetcher *attach_fetcher(struct attach *a)
{
	return &a->base;
}
