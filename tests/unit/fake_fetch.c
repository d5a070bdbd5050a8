/*
 * fake_fetch.c — the shared fake fetcher (contract in fake_fetch.h).
 */
#include "fake_fetch.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

struct fake_fetch_req {
	struct fake_fetch_req *next;    /* in the queue */
	struct fake_fetch_req *pnext;   /* in pending */
	struct fetch_req *req;          /* the caller's, valid until done */
	size_t rec;                     /* its log index */
	int obj;
	int fail;                       /* injected -errno, 0 none */
	int cancelled;
	int released;                   /* fake_fetch_complete */
	int forced;                     /* with released: the -errno, 0 none */
};

uint64_t fake_fetch_seed(const char *key, size_t key_len, const char *etag)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < key_len; i++)
		h = (h ^ (unsigned char)key[i]) * 1099511628211ull;
	h = (h ^ 0xff) * 1099511628211ull;
	for (const char *p = etag ? etag : ""; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= 0x7fb5d329728ea185ull;
	x ^= x >> 27;
	x *= 0x81dadef4bc2dd44dull;
	x ^= x >> 33;
	return x;
}

void fake_fetch_pattern(char *dst, uint64_t seed, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; ) {
		uint64_t pos = off + i, w = mix((pos >> 3) ^ seed);

		for (unsigned k = pos & 7; k < 8 && i < len; k++, i++)
			dst[i] = (char)(w >> (k * 8));
	}
}

int fake_fetch_check(const void *buf, const char *key, const char *etag, uint64_t off,
		     size_t len)
{
	uint64_t seed = fake_fetch_seed(key, strlen(key), etag);
	char tmp[4096];

	for (size_t i = 0; i < len; i += sizeof(tmp)) {
		size_t n = len - i < sizeof(tmp) ? len - i : sizeof(tmp);

		fake_fetch_pattern(tmp, seed, off + i, n);
		if (memcmp(tmp, (const char *)buf + i, n) != 0)
			return 0;
	}
	return 1;
}

static int held(const struct fake_fetch *fk, const struct fake_fetch_req *r)
{
	return !r->cancelled && !r->released && r->req->off >= fk->hold_lo &&
	       r->req->off < fk->hold_hi;
}

/* The first queued request a worker may start, unlinked; NULL if none. */
static struct fake_fetch_req *take_locked(struct fake_fetch *fk)
{
	for (struct fake_fetch_req **pp = &fk->head; *pp; pp = &(*pp)->next) {
		struct fake_fetch_req *r = *pp;

		if (held(fk, r))
			continue;
		*pp = r->next;
		if (!*pp)
			fk->tail = pp;
		return r;
	}
	return NULL;
}

/* The bytes a request gets and its result: runs without the lock, the
 * object's current ETag copied in under it. */
static ssize_t serve(struct fetch_req *q, const char *cur_etag, int known)
{
	const char *want = q->etag ? q->etag : "";

	if (known && want[0] && strcmp(want, cur_etag) != 0)
		return -ESTALE;
	fake_fetch_pattern(q->buf, fake_fetch_seed(q->key, q->key_len, known ? cur_etag : want),
			   q->off, q->len);
	return (ssize_t)q->len;
}

static void *worker_main(void *arg)
{
	struct fake_fetch *fk = arg;

	pthread_mutex_lock(&fk->mu);
	for (;;) {
		struct fake_fetch_req *r = take_locked(fk);
		char cur[FAKE_FETCH_STR];
		struct fetch_req *q;
		ssize_t res;
		int known;

		if (!r) {
			if (fk->stop && !fk->head)
				break;
			pthread_cond_wait(&fk->cond, &fk->mu);
			continue;
		}
		pthread_mutex_unlock(&fk->mu);
		if (fk->latency_us)
			usleep(fk->latency_us);
		pthread_mutex_lock(&fk->mu);
		q = r->req;
		known = r->obj >= 0 || fk->current_etag[0];
		snprintf(cur, sizeof(cur), "%s", r->obj >= 0 ? fk->objs[r->obj].etag :
			 fk->current_etag);
		/* A cancel that came before the end of the latency (or of a
		 * hold) wins, as a cut transfer would. */
		if (r->cancelled) {
			fk->cancelled++;
			res = -ECANCELED;
		} else if (r->released && r->forced) {
			res = r->forced;
		} else if (r->fail) {
			res = r->fail;
		} else {
			res = 0;
		}
		fk->done_calls++;
		pthread_mutex_unlock(&fk->mu);
		if (res == 0)
			res = serve(q, cur, known);
		q->done(q, res);                /* q may be gone from here on */
		pthread_mutex_lock(&fk->mu);
		/* Pending until done has returned: a cancel may come while it
		 * runs (the caller saw it in flight), never after. */
		for (struct fake_fetch_req **pp = &fk->pending; *pp; pp = &(*pp)->pnext)
			if (*pp == r) {
				*pp = r->pnext;
				break;
			}
		fk->log[r->rec].finished = 1;
		fk->log[r->rec].result = res;
		fk->outstanding--;
		pthread_cond_broadcast(&fk->cond);
		free(r);
	}
	pthread_mutex_unlock(&fk->mu);
	return NULL;
}

static int fake_fetch_op(struct fetcher *f, struct fetch_req *q)
{
	struct fake_fetch *fk = fetcher_of(f, struct fake_fetch, base);
	struct fake_fetch_log *l;
	struct fake_fetch_req *r;
	int obj = -1;

	pthread_mutex_lock(&fk->mu);
	if (fk->queue_err) {
		pthread_mutex_unlock(&fk->mu);
		return fk->queue_err;
	}
	for (int i = 0; i < fk->nobjs; i++)
		if (strlen(fk->objs[i].key) == q->key_len &&
		    memcmp(fk->objs[i].key, q->key, q->key_len) == 0)
			obj = i;
	if (q->len == 0 || !q->buf || !q->done ||
	    (obj >= 0 && q->off + q->len > fk->objs[obj].size)) {
		fk->bad_range++;
		pthread_mutex_unlock(&fk->mu);
		return -EINVAL;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		pthread_mutex_unlock(&fk->mu);
		return -ENOMEM;
	}
	if (fk->nlog == fk->cap_log) {
		fk->cap_log = fk->cap_log ? fk->cap_log * 2 : 256;
		fk->log = realloc(fk->log, fk->cap_log * sizeof(*fk->log));
	}
	r->req = q;
	r->obj = obj;
	r->rec = fk->nlog;
	fk->outstanding++;
	if (fk->outstanding > fk->max_outstanding)
		fk->max_outstanding = fk->outstanding;
	l = &fk->log[fk->nlog++];
	memset(l, 0, sizeof(*l));
	snprintf(l->key, sizeof(l->key), "%.*s", (int)q->key_len, q->key);
	snprintf(l->etag, sizeof(l->etag), "%s", q->etag ? q->etag : "");
	l->obj = obj;
	l->obj_size = q->obj_size;
	l->off = q->off;
	l->len = q->len;
	l->outstanding = fk->outstanding;
	if (fk->fail_nth && fk->nlog == fk->fail_nth)
		r->fail = fk->fail_err;
	fk->bytes += q->len;
	r->pnext = fk->pending;
	fk->pending = r;
	*fk->tail = r;
	fk->tail = &r->next;
	pthread_cond_broadcast(&fk->cond);
	pthread_mutex_unlock(&fk->mu);
	return 0;
}

static void fake_cancel_op(struct fetcher *f, struct fetch_req *q)
{
	struct fake_fetch *fk = fetcher_of(f, struct fake_fetch, base);
	struct fake_fetch_req *r;

	pthread_mutex_lock(&fk->mu);
	fk->cancel_calls++;
	for (r = fk->pending; r && r->req != q; r = r->pnext)
		;
	if (r)
		r->cancelled = 1;
	else
		fk->cancel_unknown++;
	pthread_cond_broadcast(&fk->cond);
	pthread_mutex_unlock(&fk->mu);
}

static const struct fetcher_ops fake_ops = {
	.fetch = fake_fetch_op,
	.cancel = fake_cancel_op,
};

void fake_fetch_init(struct fake_fetch *fk, unsigned nworkers, unsigned latency_us)
{
	memset(fk, 0, sizeof(*fk));
	fk->base.ops = &fake_ops;
	fk->base.cancels = 1;
	pthread_mutex_init(&fk->mu, NULL);
	pthread_cond_init(&fk->cond, NULL);
	fk->tail = &fk->head;
	fk->latency_us = latency_us;
	fk->nworkers = nworkers < 1 ? 1 : nworkers > FAKE_FETCH_WORKERS ? FAKE_FETCH_WORKERS
									 : nworkers;
	for (unsigned i = 0; i < fk->nworkers; i++)
		pthread_create(&fk->workers[i], NULL, worker_main, fk);
}

void fake_fetch_fini(struct fake_fetch *fk)
{
	pthread_mutex_lock(&fk->mu);
	fk->stop = 1;
	fk->hold_lo = fk->hold_hi = 0;
	pthread_cond_broadcast(&fk->cond);
	pthread_mutex_unlock(&fk->mu);
	for (unsigned i = 0; i < fk->nworkers; i++)
		pthread_join(fk->workers[i], NULL);
	CHECK_EQ_INT(fk->outstanding, 0);
	CHECK_EQ_INT(fk->bad_range, 0);
	CHECK_EQ_INT(fk->cancel_unknown, 0);
	CHECK(fk->pending == NULL);
	free(fk->log);
	pthread_cond_destroy(&fk->cond);
	pthread_mutex_destroy(&fk->mu);
}

int fake_fetch_add(struct fake_fetch *fk, const char *key, uint64_t size, const char *etag)
{
	int i;

	pthread_mutex_lock(&fk->mu);
	i = fk->nobjs++;
	if (i >= FAKE_FETCH_OBJS)
		harness_fail(__FILE__, __LINE__, "fake_fetch: more than %d objects", FAKE_FETCH_OBJS);
	snprintf(fk->objs[i].key, sizeof(fk->objs[i].key), "%s", key);
	fk->objs[i].size = size;
	snprintf(fk->objs[i].etag, sizeof(fk->objs[i].etag), "%s", etag);
	pthread_mutex_unlock(&fk->mu);
	return i;
}

void fake_fetch_set_etag(struct fake_fetch *fk, const char *key, const char *etag)
{
	pthread_mutex_lock(&fk->mu);
	for (int i = 0; i < fk->nobjs; i++)
		if (strcmp(fk->objs[i].key, key) == 0)
			snprintf(fk->objs[i].etag, sizeof(fk->objs[i].etag), "%s", etag);
	pthread_mutex_unlock(&fk->mu);
}

void fake_fetch_hold(struct fake_fetch *fk, uint64_t lo, uint64_t hi)
{
	pthread_mutex_lock(&fk->mu);
	fk->hold_lo = lo;
	fk->hold_hi = hi;
	pthread_cond_broadcast(&fk->cond);
	pthread_mutex_unlock(&fk->mu);
}

void fake_fetch_complete(struct fake_fetch *fk, size_t i, int err)
{
	struct fake_fetch_req *r;

	pthread_mutex_lock(&fk->mu);
	if (i >= fk->nlog) {
		pthread_mutex_unlock(&fk->mu);
		harness_fail(__FILE__, __LINE__, "fake_fetch_complete: no request %zu", i);
		return;
	}
	for (r = fk->pending; r && r->rec != i; r = r->pnext)
		;
	if (r) {
		r->released = 1;
		r->forced = err;
		pthread_cond_broadcast(&fk->cond);
	}
	while (!fk->log[i].finished)
		pthread_cond_wait(&fk->cond, &fk->mu);
	pthread_mutex_unlock(&fk->mu);
}

unsigned fake_fetch_pending(struct fake_fetch *fk)
{
	unsigned n = 0;

	pthread_mutex_lock(&fk->mu);
	for (struct fake_fetch_req *r = fk->pending; r; r = r->pnext)
		n++;
	pthread_mutex_unlock(&fk->mu);
	return n;
}

uint64_t fake_fetch_calls(struct fake_fetch *fk)
{
	uint64_t n;

	pthread_mutex_lock(&fk->mu);
	n = fk->nlog;
	pthread_mutex_unlock(&fk->mu);
	return n;
}

uint64_t fake_fetch_bytes(struct fake_fetch *fk)
{
	uint64_t n;

	pthread_mutex_lock(&fk->mu);
	n = fk->bytes;
	pthread_mutex_unlock(&fk->mu);
	return n;
}

uint64_t fake_fetch_last_len(struct fake_fetch *fk)
{
	uint64_t n;

	pthread_mutex_lock(&fk->mu);
	n = fk->nlog ? fk->log[fk->nlog - 1].len : 0;
	pthread_mutex_unlock(&fk->mu);
	return n;
}
