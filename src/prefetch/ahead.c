/*
 * ahead.c — readahead across files (design and contract in feedfs/ahead.h).
 *
 * An entry is in the table from rd_ahead_want until it is claimed (a request
 * took its bytes), fails, or is dropped; its buffer is charged to the budget
 * for exactly that long (plus the copy of a claim). Claims of a finished entry
 * are queued to the answer thread; claims of an entry in flight wait on it and
 * are answered by the GET's completion.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/ahead.h"
#include "feedfs/hash.h"
#include "feedfs/log.h"
#include "feedfs/util.h"
#include "prefetch_i.h"

#define TAG "ahead"
#define AH_BUCKETS 1024u
#define AH_DEFAULT_FILE_MAX (8ull << 20)
#define AH_DEFAULT_INFLIGHT 16u
#define AH_DEFAULT_HOLD_MS 10000
#define AH_TICK_MS 1000         /* the answer thread also expires entries this often */

enum ah_state { AH_INFLIGHT, AH_DONE };

/* A request waiting for an entry's bytes. */
struct ah_claim {
	struct ah_claim *next;
	struct fetch_req *req;  /* the caller's: answered with req->done */
	struct ah_ent *ent;     /* for a queued answer: the (unlinked) entry to copy
				 * from; NULL: a cancelled join, answered -ECANCELED */
};

struct ah_ent {
	struct rd_ahead *a;
	struct fetch_req req;               /* the entry's own whole-object GET */
	struct ah_ent *hnext;               /* hash chain */
	struct ah_ent *prev, *next;         /* age list, oldest first */
	char *key;                          /* key_len bytes, then the etag, NUL-terminated */
	size_t key_len;
	const char *etag;
	uint64_t size;                      /* bytes held: [0, size) of the object */
	uint64_t obj_size;
	unsigned char *buf;
	enum ah_state state;
	int64_t done_ms;
	struct ah_claim *claims;            /* joined while in flight */
	int linked;                         /* in the table and the age list */
	int forget;                         /* in flight, no longer wanted: freed at
					     * its end unless a read joined it */
};

struct rd_ahead {
	struct fetcher base;                /* what the read path fetches through */
	struct rd_ahead_config cfg;
	pthread_mutex_t mu;
	pthread_cond_t cond;                /* answer queue, in-flight count, stop */
	struct ah_ent *tab[AH_BUCKETS];
	struct ah_ent age;                  /* sentinel */
	uint64_t bytes;                     /* held + in flight (all charged) */
	unsigned inflight;
	struct ah_claim *q_head, *q_tail;   /* answers for the answer thread */
	int stop;
	pthread_t thread;
	struct rd_budget_client bc;
	struct rd_ahead_stats st;
};

static uint64_t ent_hash(const char *key, size_t key_len, const char *etag)
{
	/* Mixed: the bucket index takes the low bits, which raw FNV spreads poorly. */
	return util_mix64(util_fnv1a64(util_fnv1a64(UTIL_FNV1A64_INIT, key, key_len), etag,
				       strlen(etag)));
}

static struct ah_ent **bucket(struct rd_ahead *a, uint64_t h)
{
	return &a->tab[h & (AH_BUCKETS - 1)];
}

static struct ah_ent *ent_find(struct rd_ahead *a, const char *key, size_t key_len,
			       const char *etag)
{
	for (struct ah_ent *e = *bucket(a, ent_hash(key, key_len, etag)); e; e = e->hnext)
		if (e->key_len == key_len && memcmp(e->key, key, key_len) == 0 &&
		    strcmp(e->etag, etag) == 0)
			return e;
	return NULL;
}

static void ent_link(struct rd_ahead *a, struct ah_ent *e)
{
	struct ah_ent **b = bucket(a, ent_hash(e->key, e->key_len, e->etag));

	e->hnext = *b;
	*b = e;
	e->next = &a->age;
	e->prev = a->age.prev;
	a->age.prev->next = e;
	a->age.prev = e;
	e->linked = 1;
}

static void ent_unlink(struct rd_ahead *a, struct ah_ent *e)
{
	struct ah_ent **p = bucket(a, ent_hash(e->key, e->key_len, e->etag));

	while (*p != e)
		p = &(*p)->hnext;
	*p = e->hnext;
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->prev = e->next = e->hnext = NULL;
	e->linked = 0;
}

/* Frees an unlinked entry; returns the bytes to uncharge. Caller holds a->mu. */
static uint64_t ent_free_locked(struct rd_ahead *a, struct ah_ent *e)
{
	uint64_t n = e->size;

	BUG_ON(e->linked || a->bytes < n);
	a->bytes -= n;
	free(e->buf);
	free(e->key);
	free(e);
	return n;
}

/* Drop finished entries nobody claimed: those older than hold_ms, or (need > 0)
 * the oldest until need bytes are freed. Returns the bytes freed (not given). */
static uint64_t drop_idle_locked(struct rd_ahead *a, int64_t now_ms, uint64_t need)
{
	uint64_t freed = 0;
	struct ah_ent *e, *n;

	for (e = a->age.next; e != &a->age; e = n) {
		n = e->next;
		if (e->state != AH_DONE)
			continue;
		if (need ? freed >= need : now_ms - e->done_ms < a->cfg.hold_ms)
			continue;
		ent_unlink(a, e);
		freed += ent_free_locked(a, e);
		a->st.dropped++;
	}
	return freed;
}

static uint64_t ahead_reclaim(struct rd_budget_client *c, uint64_t need)
{
	struct rd_ahead *a = (struct rd_ahead *)((char *)c - offsetof(struct rd_ahead, bc));
	uint64_t freed;

	if (pthread_mutex_trylock(&a->mu) != 0)
		return 0;
	freed = drop_idle_locked(a, 0, need);
	pthread_mutex_unlock(&a->mu);
	return freed;
}

/* Copy the claimed range out of a finished entry. */
static ssize_t claim_copy(const struct ah_claim *c, const struct ah_ent *e)
{
	memcpy(c->req->buf, e->buf + c->req->off, c->req->len);
	return (ssize_t)c->req->len;
}

/* Queue c for the answer thread. Caller holds a->mu. */
static void answer_queue_locked(struct rd_ahead *a, struct ah_claim *c)
{
	c->next = NULL;
	if (a->q_tail)
		a->q_tail->next = c;
	else
		a->q_head = c;
	a->q_tail = c;
	pthread_cond_broadcast(&a->cond);
}

/* The answer thread: claims of finished entries (copy, done, free), and the
 * periodic expiry of entries nobody asked for. */
static void *answer_main(void *arg)
{
	struct rd_ahead *a = arg;

	pthread_setname_np(pthread_self(), "feedfs-ahead");
	pthread_mutex_lock(&a->mu);
	for (;;) {
		struct ah_claim *c = a->q_head;
		uint64_t freed;

		if (!c) {
			if (a->stop)
				break;
			freed = drop_idle_locked(a, util_now_ms(), 0);
			if (freed) {
				pthread_mutex_unlock(&a->mu);
				rd_budget_give(a->cfg.budget, freed);
				pthread_mutex_lock(&a->mu);
				continue;
			}
			util_cond_wait_ms(&a->cond, &a->mu, AH_TICK_MS);
			continue;
		}
		a->q_head = c->next;
		if (!a->q_head)
			a->q_tail = NULL;
		pthread_mutex_unlock(&a->mu);

		if (!c->ent) {                  /* a join that was cancelled */
			c->req->done(c->req, -ECANCELED);
			free(c);
			pthread_mutex_lock(&a->mu);
			continue;
		}
		c->req->done(c->req, claim_copy(c, c->ent));
		pthread_mutex_lock(&a->mu);
		freed = ent_free_locked(a, c->ent);
		pthread_mutex_unlock(&a->mu);
		rd_budget_give(a->cfg.budget, freed);
		free(c);
		pthread_mutex_lock(&a->mu);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

static int ahead_fetch(struct fetcher *f, struct fetch_req *req);
static void ahead_cancel(struct fetcher *f, struct fetch_req *req);

int rd_ahead_new(const struct rd_ahead_config *cfg, struct rd_ahead **out)
{
	struct rd_ahead *a;

	static const struct fetcher_ops ops = { .fetch = ahead_fetch, .cancel = ahead_cancel };

	if (!cfg->inner || !cfg->budget)
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	a->base.ops = &ops;
	a->base.cancels = cfg->inner->cancels;  /* what it forwards, inner ends */
	a->cfg = *cfg;
	if (!a->cfg.max_bytes)
		a->cfg.max_bytes = rd_budget_max(cfg->budget) / 4;
	if (!a->cfg.max_file_size)
		a->cfg.max_file_size = AH_DEFAULT_FILE_MAX;
	if (!a->cfg.max_inflight)
		a->cfg.max_inflight = AH_DEFAULT_INFLIGHT;
	if (!a->cfg.hold_ms)
		a->cfg.hold_ms = AH_DEFAULT_HOLD_MS;
	a->age.prev = a->age.next = &a->age;
	pthread_mutex_init(&a->mu, NULL);
	util_cond_init_monotonic(&a->cond);
	if (pthread_create(&a->thread, NULL, answer_main, a) != 0) {
		pthread_cond_destroy(&a->cond);
		pthread_mutex_destroy(&a->mu);
		free(a);
		return -ENOMEM;
	}
	a->bc.reclaim = ahead_reclaim;
	rd_budget_register(a->cfg.budget, &a->bc);
	*out = a;
	return 0;
}

void rd_ahead_destroy(struct rd_ahead *a)
{
	uint64_t freed;

	if (!a)
		return;
	rd_budget_unregister(a->cfg.budget, &a->bc);
	pthread_mutex_lock(&a->mu);
	while (a->inflight)
		pthread_cond_wait(&a->cond, &a->mu);
	a->stop = 1;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->thread, NULL);      /* answers every queued claim first */
	pthread_mutex_lock(&a->mu);
	freed = drop_idle_locked(a, 0, UINT64_MAX);
	BUG_ON(a->bytes != 0 || a->age.next != &a->age);
	pthread_mutex_unlock(&a->mu);
	rd_budget_give(a->cfg.budget, freed);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->mu);
	free(a);
}

/* Completion of an entry's GET, on the fetcher's thread. */
static void ent_done(struct fetch_req *req, ssize_t result)
{
	struct ah_ent *e = req->done_arg;
	struct rd_ahead *a = e->a;
	struct ah_claim *claims;
	uint64_t freed = 0;
	int ok = result == (ssize_t)e->size;

	pthread_mutex_lock(&a->mu);
	BUG_ON(e->state != AH_INFLIGHT || a->inflight == 0);
	e->state = AH_DONE;
	e->done_ms = util_now_ms();
	claims = e->claims;
	e->claims = NULL;
	if (!ok) {
		a->st.failed++;
		log_debug(TAG, "prefetch of %.*s failed: %s", (int)e->key_len, e->key,
			  strerror(result < 0 ? (int)-result : EIO));
	}
	if (ok && !claims && e->forget)
		a->st.dropped++;            /* forgotten while in flight: freed below */
	if (ok && !claims && !e->forget) {
		/* Held for a later claim. From the unlock on, a claim or a drop may
		 * free e, and once inflight is 0 rd_ahead_destroy may free a (and
		 * its caller the budget): nothing is touched after the unlock. */
		rd_budget_notify(a->cfg.budget);    /* reclaimable now */
		a->inflight--;
		pthread_cond_broadcast(&a->cond);   /* destroy waits for inflight == 0 */
		pthread_mutex_unlock(&a->mu);
		return;
	}
	ent_unlink(a, e);           /* failed, or claimed: nobody else can find it now */
	pthread_mutex_unlock(&a->mu);

	/* Answer the joined requests outside the lock (their done takes file locks). */
	while (claims) {
		struct ah_claim *c = claims;

		claims = c->next;
		c->req->done(c->req, ok ? claim_copy(c, e) : result < 0 ? result : -EIO);
		free(c);
	}

	pthread_mutex_lock(&a->mu);
	freed = ent_free_locked(a, e);
	rd_budget_give(a->cfg.budget, freed);  /* before inflight drops: see above */
	a->inflight--;
	pthread_cond_broadcast(&a->cond);
	pthread_mutex_unlock(&a->mu);
}

int rd_ahead_want(struct rd_ahead *a, const char *key, size_t key_len, const char *etag,
		   uint64_t size)
{
	return rd_ahead_want_head(a, key, key_len, etag, size, size);
}

int rd_ahead_want_head(struct rd_ahead *a, const char *key, size_t key_len, const char *etag,
		       uint64_t obj_size, uint64_t size)
{
	struct ah_ent *e;
	size_t elen;
	uint64_t freed;
	int rc;

	if (!etag || !etag[0] || size == 0 || size > obj_size || size > a->cfg.max_file_size)
		return 0;
	elen = strlen(etag);
	pthread_mutex_lock(&a->mu);
	a->st.wanted++;
	if ((e = ent_find(a, key, key_len, etag))) {
		e->forget = 0;              /* wanted again */
		pthread_mutex_unlock(&a->mu);
		return 1;
	}
	freed = drop_idle_locked(a, util_now_ms(), 0);
	if (a->inflight >= a->cfg.max_inflight || a->bytes + size > a->cfg.max_bytes ||
	    rd_budget_take(a->cfg.budget, size, 0) < 0) {
		a->st.skipped++;
		pthread_mutex_unlock(&a->mu);
		rd_budget_give(a->cfg.budget, freed);
		return 0;
	}
	e = calloc(1, sizeof(*e));
	if (e) {
		e->key = malloc(key_len + 1 + elen + 1);
		e->buf = malloc(size);
	}
	if (!e || !e->key || !e->buf) {
		if (e) {
			free(e->key);
			free(e->buf);
		}
		free(e);
		pthread_mutex_unlock(&a->mu);
		rd_budget_give(a->cfg.budget, freed + size);
		return 0;
	}
	memcpy(e->key, key, key_len);
	e->key[key_len] = '\0';
	memcpy(e->key + key_len + 1, etag, elen + 1);
	e->etag = e->key + key_len + 1;
	e->key_len = key_len;
	e->size = size;
	e->obj_size = obj_size;
	e->a = a;
	e->state = AH_INFLIGHT;
	ent_link(a, e);
	a->bytes += size;
	a->inflight++;
	a->st.issued++;
	pthread_mutex_unlock(&a->mu);
	rd_budget_give(a->cfg.budget, freed);

	/* From here the entry belongs to its GET: ent_done may run (on the fetcher's
	 * thread) before this call returns, so e is not touched after success. */
	e->req = (struct fetch_req){
		.key = e->key, .key_len = key_len, .etag = e->etag, .obj_size = obj_size,
		.off = 0, .len = (size_t)size, .buf = e->buf, .done = ent_done, .done_arg = e,
	};
	rc = fetcher_fetch(a->cfg.inner, &e->req);
	if (rc < 0) {
		struct ah_claim *claims;

		pthread_mutex_lock(&a->mu);
		ent_unlink(a, e);
		claims = e->claims;         /* reads that joined meanwhile get the error */
		e->claims = NULL;
		freed = ent_free_locked(a, e);
		a->inflight--;
		a->st.failed++;
		pthread_cond_broadcast(&a->cond);
		pthread_mutex_unlock(&a->mu);
		rd_budget_give(a->cfg.budget, freed);
		while (claims) {
			struct ah_claim *c = claims;

			claims = c->next;
			c->req->done(c->req, rc);
			free(c);
		}
		return 0;
	}
	return 1;
}

void rd_ahead_forget(struct rd_ahead *a, const char *key, size_t key_len, const char *etag)
{
	struct ah_ent *e;
	uint64_t freed;

	if (!etag || !etag[0])
		return;
	pthread_mutex_lock(&a->mu);
	e = ent_find(a, key, key_len, etag);
	if (!e) {
		pthread_mutex_unlock(&a->mu);
		return;
	}
	if (e->state == AH_INFLIGHT) {
		e->forget = 1;              /* ent_done frees it */
		pthread_mutex_unlock(&a->mu);
		return;
	}
	/* Linked and done: held, unclaimed (a claim unlinks it). */
	ent_unlink(a, e);
	freed = ent_free_locked(a, e);
	a->st.dropped++;
	pthread_mutex_unlock(&a->mu);
	rd_budget_give(a->cfg.budget, freed);
}

/* The read path's fetch: see "Cancel" and the DESIGN in ahead.h. */
static int ahead_fetch(struct fetcher *f, struct fetch_req *req)
{
	struct rd_ahead *a = fetcher_of(f, struct rd_ahead, base);
	struct ah_claim *c;
	struct ah_ent *e;

	if (!req->etag || !req->etag[0])
		return fetcher_fetch(a->cfg.inner, req);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_lock(&a->mu);
	e = ent_find(a, req->key, req->key_len, req->etag);
	if (!e || e->obj_size != req->obj_size || req->off > e->size ||
	    req->len > e->size - req->off) {
		pthread_mutex_unlock(&a->mu);
		free(c);
		/* Not ours: the caller's own request, so its cancel reaches inner. */
		return fetcher_fetch(a->cfg.inner, req);
	}
	c->req = req;
	if (e->state == AH_INFLIGHT) {
		c->next = e->claims;
		e->claims = c;
		a->st.joined++;
	} else {
		ent_unlink(a, e);           /* claimed: the answer thread copies and frees it */
		c->ent = e;
		answer_queue_locked(a, c);
		a->st.hits++;
	}
	pthread_mutex_unlock(&a->mu);
	return 0;
}

/* A request joined to an entry in flight is taken off it and answered
 * -ECANCELED by the answer thread (the entry's GET goes on: the object may
 * still be opened). One already queued for an answer gets its full result
 * soon. Anything else was the inner fetcher's to begin with; a request being
 * answered by ent_done right now is not found either and is forwarded, which
 * the inner fetcher ignores (it does not hold it). */
static void ahead_cancel(struct fetcher *f, struct fetch_req *req)
{
	struct rd_ahead *a = fetcher_of(f, struct rd_ahead, base);
	struct ah_claim **pp = NULL, *c = NULL;
	struct ah_ent *e = NULL;

	pthread_mutex_lock(&a->mu);
	if (req->etag && req->etag[0])
		e = ent_find(a, req->key, req->key_len, req->etag);
	if (e && e->state == AH_INFLIGHT)
		for (pp = &e->claims; *pp && (*pp)->req != req; pp = &(*pp)->next)
			;
	if (pp && *pp) {
		c = *pp;
		*pp = c->next;
		c->ent = NULL;
		answer_queue_locked(a, c);
	} else {
		for (c = a->q_head; c && c->req != req; c = c->next)
			;
	}
	pthread_mutex_unlock(&a->mu);
	if (!c)
		fetcher_cancel(a->cfg.inner, req);
}

struct fetcher *rd_ahead_fetcher(struct rd_ahead *a)
{
	return &a->base;
}

uint64_t rd_ahead_max_file_size(const struct rd_ahead *a)
{
	return a->cfg.max_file_size;
}

void rd_ahead_get_stats(struct rd_ahead *a, struct rd_ahead_stats *out)
{
	pthread_mutex_lock(&a->mu);
	*out = a->st;
	pthread_mutex_unlock(&a->mu);
}
