/*
 * http — the thread that owns the curl multi handle.
 *
 * DESIGN
 * One thread per client ("http thread") owns the CURLM, every easy handle and
 * every request from submission to completion. Other threads hand requests over
 * through `sub` (a locked FIFO) and curl_multi_wakeup(); nothing else crosses.
 *
 * On the http thread a request sits in exactly one place:
 *   wait   FIFO of requests ready to start, held back by max_connections
 *   active attempts in curl (linked by r->next, at most max_connections)
 *   timers requests waiting out a retry backoff, sorted by due time
 * and leaves by its done() callback, which runs on this thread and owns r after.
 *
 * Connections stay in the multi handle's cache (sized to max_connections), so
 * consecutive requests reuse warm keep-alive connections. Easy handles are
 * pooled and reset between attempts.
 *
 * Cancel: s3_get_cancel() submits an S3_OP_CANCEL note through `sub`, so it is
 * handled after every request submitted before it and before any submitted
 * after it. The GET it names is taken out of wait or timers, or out of curl
 * (which closes its connection) unless little is left to receive, and
 * completes with -ECANCELED; a GET that is not found has completed already.
 *
 * Hedging: an attempt of a GET, HEAD or LIST that has moved no byte for
 * longer than its kind's hedge delay gets a hedge: a one-attempt copy of the
 * request (s3_req_hedge_new) on another connection, linked both ways
 * (r->hedge, hedge->primary) and kept in `active` like any attempt. The hedge
 * delay is the p99 of the longest byte-to-byte gap of recent good attempts of
 * that kind that were not hedged (struct s3_gap, decayed), times 3/2, kept within
 * [S3_HEDGE_FLOOR_MS, S3_HEDGE_CAP_MS] but never under 1.2 x that p99 (a store
 * slow throughout is not hedged on every attempt); until S3_GAP_MIN_SAMPLES
 * are in, the cap. Budget: each primary attempt earns --hedge-budget hundredths of a
 * hedge (at most S3_HEDGE_BURST saved up, half of it to start with), so
 * hedges stay within that share of requests (default 5%), and at most
 * max_active/8 (at least 1) run at once; a primary is hedged at most once per
 * attempt. Outcomes:
 *   the primary's attempt succeeds first: the hedge is cut and freed;
 *   the hedge succeeds first: its answer is copied into the primary
 *     (s3_req_hedge_adopt), the primary's attempt is cut, the primary
 *     completes;
 *   the primary's attempt fails first: it waits (in no queue, waiting_hedge)
 *     with what s3_req_attempt_end decided (deferred_delay); the hedge's
 *     success completes it, the hedge's failure applies the decision;
 *   the hedge fails first: it is dropped, the primary goes on.
 * So a hedge never adds an attempt to the budget, never changes an errno, and
 * never reaches done(): only primaries complete. Bytes are checked exactly as
 * for any attempt (range, length, ETag), in the hedge's own buffer.
 *
 * Shutdown: s3_http_destroy() sets `stopping`; the thread completes everything
 * it holds with -ECANCELED and exits, then the destroyer joins it.
 */
#include "s3_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "s3"
#define S3_POLL_IDLE_MS 1000

#define S3_HEDGE_FLOOR_MS 200       /* below: CPU hiccups would look like stalls */
#define S3_HEDGE_CAP_MS 1000        /* above: a stall costs a data-loader step */
#define S3_GAP_MIN_SAMPLES 32
#define S3_GAP_DECAY 2048           /* halve the counts at this many samples */
#define S3_GAP_BUCKETS 64           /* quarter octaves from 1 ms: up to ~65 s */
#define S3_HEDGE_COST 100           /* tokens: a primary attempt earns budget_pct */
#define S3_HEDGE_BURST 1000         /* 10 hedges saved up at most */

/* Longest gap without a byte in good attempts of one request kind (GET, HEAD,
 * LIST), in quarter-octave buckets: gap g ms falls in the first bucket whose
 * bound is >= g. http thread only. */
struct s3_gap {
	uint32_t n[S3_GAP_BUCKETS];
	uint32_t total;
	int64_t delay_ms;           /* the hedge delay it gives, kept current */
};

struct s3_http {
	CURLM *multi;
	pthread_t thread;
	char *ca_bundle;
	int max_active;

	/* Lock order: leaf. Held only to move the sub list; nothing is called
	 * under it except curl_multi_wakeup after release. */
	pthread_mutex_t lock;
	struct s3_req *sub_head, *sub_tail;
	int stopping;

	/* http thread only */
	struct s3_req *wait_head, *wait_tail;
	struct s3_req *active;
	int n_active;
	struct s3_req *timers;
	CURL **pool;
	int n_pool;
	struct s3_gap gap[3];       /* by enum s3_op: GET, HEAD, LIST */
	int n_hedges;               /* hedges in active */
	int max_hedges;
	int hedge_tokens;           /* hundredths of a hedge */
	int hedge_earn;             /* tokens a primary attempt earns: --hedge-budget */
};

static double gap_bound_ms[S3_GAP_BUCKETS];
static pthread_once_t gap_once = PTHREAD_ONCE_INIT;

static void gap_bounds_init(void)
{
	double b = 1.0;

	for (int i = 0; i < S3_GAP_BUCKETS; i++, b *= 1.189207115)   /* 2^(1/4) */
		gap_bound_ms[i] = b;
}

static int64_t gap_delay(const struct s3_gap *g)
{
	uint64_t want, seen = 0;
	int64_t d;
	int i;

	if (g->total < S3_GAP_MIN_SAMPLES)
		return S3_HEDGE_CAP_MS;
	want = ((uint64_t)g->total * 99 + 99) / 100;
	for (i = 0; i < S3_GAP_BUCKETS - 1; i++) {
		seen += g->n[i];
		if (seen >= want)
			break;
	}
	d = (int64_t)(gap_bound_ms[i] * 1.5);
	d = d < S3_HEDGE_FLOOR_MS ? S3_HEDGE_FLOOR_MS : d > S3_HEDGE_CAP_MS ? S3_HEDGE_CAP_MS : d;
	/* A store slow throughout (its p99 past the cap) gains nothing from a
	 * twin of every attempt: hedge only past its own tail then. */
	if ((double)d < gap_bound_ms[i] * 1.2)
		d = (int64_t)(gap_bound_ms[i] * 1.2);
	return d;
}

static void gap_add(struct s3_gap *g, int64_t ms)
{
	int i = 0;

	while (i < S3_GAP_BUCKETS - 1 && (double)ms > gap_bound_ms[i])
		i++;
	g->n[i]++;
	if (++g->total >= S3_GAP_DECAY) {
		/* Halving keeps the tail that of the store as it is now. */
		g->total = 0;
		for (int j = 0; j < S3_GAP_BUCKETS; j++) {
			g->n[j] /= 2;
			g->total += g->n[j];
		}
	}
	if (g->total % 16 == 0 || g->total < S3_GAP_MIN_SAMPLES + 16)
		g->delay_ms = gap_delay(g);
}

static void fifo_push(struct s3_req **head, struct s3_req **tail, struct s3_req *r)
{
	r->next = NULL;
	if (*tail)
		(*tail)->next = r;
	else
		*head = r;
	*tail = r;
}

static void complete(struct s3_req *r)
{
	if (r->result < 0) {
		S3_STAT_INC(r->c, errors);
		s3_req_log_failure(r);
	}
	s3_req_observe(r);
	r->next = NULL;
	r->done(r);     /* r belongs to the callback from here on */
}

static void timer_insert(struct s3_http *h, struct s3_req *r)
{
	struct s3_req **pp = &h->timers;

	while (*pp && (*pp)->due_ms <= r->due_ms)
		pp = &(*pp)->next;
	r->next = *pp;
	*pp = r;
}

static CURL *easy_get(struct s3_http *h)
{
	CURL *e;

	if (h->n_pool > 0) {
		e = h->pool[--h->n_pool];
		curl_easy_reset(e);
		return e;
	}
	return curl_easy_init();
}

static void easy_put(struct s3_http *h, CURL *e)
{
	if (h->n_pool < h->max_active)
		h->pool[h->n_pool++] = e;
	else
		curl_easy_cleanup(e);
}

static void hedge_drop(struct s3_req *hg);

static void start_one(struct s3_http *h, struct s3_req *r)
{
	CURL *e = easy_get(h);
	int ret;

	if (!e) {
		r->result = -ENOMEM;
		if (r->primary)
			hedge_drop(r);
		else
			complete(r);
		return;
	}
	ret = s3_req_attempt_start(r, e);
	if (!ret && h->ca_bundle)
		curl_easy_setopt(e, CURLOPT_CAINFO, h->ca_bundle);
	if (!ret && curl_multi_add_handle(h->multi, e) != CURLM_OK)
		ret = -ENOMEM;
	if (ret) {
		easy_put(h, e);
		r->easy = NULL;
		r->result = ret;
		snprintf(r->reason, sizeof(r->reason), "could not start request: %s",
			 strerror(-ret));
		if (r->primary)
			hedge_drop(r);
		else
			complete(r);
		return;
	}
	r->next = h->active;
	h->active = r;
	h->n_active++;
	if (r->primary) {
		h->n_hedges++;
	} else {
		h->hedge_tokens += h->hedge_earn;
		if (h->hedge_tokens > S3_HEDGE_BURST)
			h->hedge_tokens = S3_HEDGE_BURST;
	}
}

static void active_remove(struct s3_http *h, struct s3_req *r)
{
	for (struct s3_req **pp = &h->active; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			h->n_active--;
			h->n_hedges -= r->primary != NULL;
			return;
		}
	}
	BUG_ON(1);
}

/* Take an attempt out of curl before its end (cancel, shutdown). */
static void active_abort(struct s3_http *h, struct s3_req *r)
{
	active_remove(h, r);
	s3_req_lowat_reset(r);
	curl_multi_remove_handle(h->multi, r->easy);
	easy_put(h, r->easy);
	r->easy = NULL;
}

/* Unhook hedge hg from its primary and free it (it was already taken out of
 * curl). */
static void hedge_drop(struct s3_req *hg)
{
	hg->primary->hedge = NULL;
	s3_req_free(hg);
}

/* Primary r's attempt is over with r->deferred_delay decided: apply it. */
static void primary_resume(struct s3_http *h, struct s3_req *r, int64_t delay)
{
	r->waiting_hedge = 0;
	if (delay < 0) {
		complete(r);
	} else {
		r->due_ms = util_now_ms() + delay;
		timer_insert(h, r);
	}
}

/* A hedge's attempt ended (taken out of curl and active). */
static void hedge_end(struct s3_http *h, struct s3_req *hg)
{
	struct s3_req *p = hg->primary;

	if (hg->result != 0) {
		log_debug(TAG, "hedge lost: %s", hg->reason[0] ? hg->reason : "failed");
		hedge_drop(hg);
		if (p->waiting_hedge)
			primary_resume(h, p, p->deferred_delay);
		return;
	}
	S3_STAT_INC(p->c, hedges_won);
	if (p->easy)
		active_abort(h, p);     /* its attempt is still in curl: cut it */
	p->waiting_hedge = 0;
	s3_req_hedge_adopt(p, hg);
	hedge_drop(hg);
	complete(p);
}

/* A primary's attempt ended with attempt_end's verdict delay. */
static void primary_end(struct s3_http *h, struct s3_req *r, int64_t delay)
{
	struct s3_req *hg = r->hedge;

	if (!hg) {
		primary_resume(h, r, delay);
		return;
	}
	if (delay < 0 && r->result == 0) {
		s3_req_cut_unsent(hg);
		active_abort(h, hg);    /* won: the hedge is not needed */
		hedge_drop(hg);
		complete(r);
		return;
	}
	/* Failed while its hedge runs: the hedge may still bring the answer. */
	r->waiting_hedge = 1;
	r->deferred_delay = delay;
}

static int gap_kind(const struct s3_req *r)
{
	return r->op == S3_OP_GET ? 0 : r->op == S3_OP_HEAD ? 1 : 2;
}

static void reap(struct s3_http *h)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(h->multi, &left))) {
		struct s3_req *r = NULL;
		CURL *e = m->easy_handle;
		CURLcode cc = m->data.result;
		int64_t delay;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
		s3_req_lowat_reset(r);          /* its connection may be reused */
		curl_multi_remove_handle(h->multi, e);
		active_remove(h, r);
		delay = s3_req_attempt_end(r, cc);     /* still reads e's info */
		easy_put(h, e);
		/* A hedged attempt that still won was an outlier by the estimate
		 * it is compared with (often a dead connection that curl
		 * reconnected in silence after the stall): counting it would
		 * raise the tail to the stall and end hedging. */
		if (delay < 0 && r->result == 0 && r->hedged_attempt != r->attempt)
			gap_add(&h->gap[gap_kind(r)], r->max_gap_ms);
		if (r->primary)
			hedge_end(h, r);
		else
			primary_end(h, r, delay);
	}
}

/* Hedge what has stalled, within the budget; returns ms until the next
 * attempt would be due for a hedge (S3_POLL_IDLE_MS when none). */
static int hedge_scan(struct s3_http *h)
{
	int64_t now = util_now_ms(), next = S3_POLL_IDLE_MS;
	struct s3_req *r;

	for (r = h->active; r; r = r->next) {
		int64_t idle, delay;
		struct s3_req *hg;

		if (r->primary || r->hedge || r->quick || r->op == S3_OP_CANCEL ||
		    r->hedged_attempt == r->attempt)
			continue;
		delay = h->gap[gap_kind(r)].delay_ms;
		idle = now - r->progress_ms;
		if (idle < delay) {
			if (delay - idle < next)
				next = delay - idle;
			continue;
		}
		if (!r->slow_seen) {
			r->slow_seen = 1;
			S3_STAT_INC(r->c, stalls);
		}
		if (!h->hedge_earn || h->n_hedges >= h->max_hedges ||
		    h->n_active >= h->max_active || h->hedge_tokens < S3_HEDGE_COST)
			continue;       /* looked at again when something ends */
		r->hedged_attempt = r->attempt;
		if (s3_req_hedge_new(r, &hg) < 0)
			continue;
		h->hedge_tokens -= S3_HEDGE_COST;
		r->hedge = hg;
		S3_STAT_INC(r->c, hedges_started);
		log_debug(TAG, "hedging an attempt with no byte for %lld ms (delay %lld ms)",
			  (long long)idle, (long long)delay);
		/* Pushed at the head of active while walking it: r->next is
		 * unchanged, and the hedge is never hedged itself. */
		start_one(h, hg);
		if (!r->hedge)
			continue;       /* could not start: start_one dropped it */
	}
	return (int)(next < 0 ? 0 : next);
}

static int cancel_match(const struct s3_req *r, const struct s3_req *note)
{
	return r->op == S3_OP_GET && r->user_done == note->user_done &&
	       r->user_arg == note->user_arg;
}

/* Unlink the request matching note from a singly linked list; NULL if none. */
static struct s3_req *unlink_match(struct s3_req **head, struct s3_req **tail,
				   const struct s3_req *note)
{
	struct s3_req *prev = NULL;

	for (struct s3_req **pp = head; *pp; prev = *pp, pp = &(*pp)->next) {
		struct s3_req *r = *pp;

		if (!cancel_match(r, note))
			continue;
		*pp = r->next;
		if (tail && *tail == r)
			*tail = prev;
		r->next = NULL;
		return r;
	}
	return NULL;
}

/* Handle one cancel note (and free it). Not an error: not logged, counted
 * apart (n_cancelled). */
static void cancel_one(struct s3_http *h, struct s3_req *note)
{
	struct s3_req *r = unlink_match(&h->wait_head, &h->wait_tail, note);

	if (!r)
		r = unlink_match(&h->timers, NULL, note);
	if (!r) {
		for (struct s3_req *a = h->active; a; a = a->next) {
			/* A primary whose attempt failed waits on its hedge: found
			 * through the hedge. */
			struct s3_req *p = a->primary ? a->primary : a;

			if (!cancel_match(p, note) || (a->primary && !p->waiting_hedge))
				continue;
			if (!p->waiting_hedge && p->len - p->got <= S3_CANCEL_FINISH_BYTES)
				break;          /* nearly there: cheaper to let it finish */
			if (p->hedge) {
				active_abort(h, p->hedge);
				hedge_drop(p->hedge);
			}
			if (p->easy)
				active_abort(h, p);
			p->waiting_hedge = 0;
			r = p;
			break;
		}
	}
	s3_req_free(note);
	if (!r)
		return;
	S3_STAT_INC(r->c, cancelled);
	r->result = -ECANCELED;
	s3_req_observe(r);
	r->next = NULL;
	r->done(r);
}

static void cancel_all(struct s3_http *h)
{
	struct s3_req *r, *next;

	while ((r = h->active)) {
		struct s3_req *p = r->primary ? r->primary : r;

		if (p->hedge) {
			active_abort(h, p->hedge);
			hedge_drop(p->hedge);
		}
		if (p->easy)
			active_abort(h, p);
		p->waiting_hedge = 0;
		p->result = -ECANCELED;
		snprintf(p->reason, sizeof(p->reason), "client shutting down");
		complete(p);
	}
	for (r = h->wait_head; r; r = next) {
		next = r->next;
		r->result = -ECANCELED;
		complete(r);
	}
	h->wait_head = h->wait_tail = NULL;
	for (r = h->timers; r; r = next) {
		next = r->next;
		r->result = -ECANCELED;
		complete(r);
	}
	h->timers = NULL;
}

static void *http_main(void *arg)
{
	struct s3_http *h = arg;

	for (;;) {
		struct s3_req *sub;
		int stopping, running, timeout_ms;
		int64_t now;

		pthread_mutex_lock(&h->lock);
		sub = h->sub_head;
		h->sub_head = h->sub_tail = NULL;
		stopping = h->stopping;
		pthread_mutex_unlock(&h->lock);
		while (sub) {
			struct s3_req *next = sub->next;

			if (sub->op == S3_OP_CANCEL)
				cancel_one(h, sub);
			else
				fifo_push(&h->wait_head, &h->wait_tail, sub);
			sub = next;
		}
		if (stopping) {
			cancel_all(h);
			break;
		}

		now = util_now_ms();
		while (h->timers && h->timers->due_ms <= now) {
			struct s3_req *r = h->timers;

			h->timers = r->next;
			fifo_push(&h->wait_head, &h->wait_tail, r);
		}
		while (h->wait_head && h->n_active < h->max_active) {
			struct s3_req *r = h->wait_head;

			h->wait_head = r->next;
			if (!h->wait_head)
				h->wait_tail = NULL;
			start_one(h, r);
		}

		curl_multi_perform(h->multi, &running);
		reap(h);

		timeout_ms = hedge_scan(h);
		if (h->timers) {
			int64_t d = h->timers->due_ms - util_now_ms();

			timeout_ms = d < 0 ? 0 : d < timeout_ms ? (int)d : timeout_ms;
		}
		if (h->wait_head && h->n_active < h->max_active)
			timeout_ms = 0;
		curl_multi_poll(h->multi, NULL, 0, timeout_ms, NULL);
	}
	return NULL;
}

int s3_http_new(const struct s3_http_opts *o, struct s3_http **out)
{
	struct s3_http *h = calloc(1, sizeof(*h));
	int ret;

	if (!h)
		return -ENOMEM;
	h->max_active = o->max_connections > 0 ? o->max_connections : 32;
	h->max_hedges = h->max_active / 8 > 0 ? h->max_active / 8 : 1;
	h->hedge_earn = o->hedge_budget_pct;
	h->hedge_tokens = o->hedge_budget_pct > 0 ? S3_HEDGE_BURST / 2 : 0;
	pthread_once(&gap_once, gap_bounds_init);
	for (int i = 0; i < 3; i++)
		h->gap[i].delay_ms = S3_HEDGE_CAP_MS;
	h->pool = calloc((size_t)h->max_active, sizeof(*h->pool));
	h->ca_bundle = o->ca_bundle ? strdup(o->ca_bundle) : NULL;
	h->multi = curl_multi_init();
	if (!h->pool || !h->multi || (o->ca_bundle && !h->ca_bundle)) {
		ret = -ENOMEM;
		goto fail;
	}
	/* The connection cache must hold every parallel connection, or finished
	 * transfers close sockets the next request would have reused. */
	curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, (long)h->max_active);
	curl_multi_setopt(h->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)h->max_active);
	pthread_mutex_init(&h->lock, NULL);
	ret = -pthread_create(&h->thread, NULL, http_main, h);
	if (ret) {
		pthread_mutex_destroy(&h->lock);
		goto fail;
	}
	*out = h;
	return 0;
fail:
	if (h->multi)
		curl_multi_cleanup(h->multi);
	free(h->pool);
	free(h->ca_bundle);
	free(h);
	return ret;
}

void s3_http_quiesce(struct s3_http *h)
{
	pthread_mutex_lock(&h->lock);
	h->stopping = 1;
	pthread_mutex_unlock(&h->lock);
	curl_multi_wakeup(h->multi);
}

void s3_http_destroy(struct s3_http *h)
{
	if (!h)
		return;
	s3_http_quiesce(h);
	pthread_join(h->thread, NULL);
	while (h->n_pool > 0)
		curl_easy_cleanup(h->pool[--h->n_pool]);
	curl_multi_cleanup(h->multi);
	pthread_mutex_destroy(&h->lock);
	free(h->pool);
	free(h->ca_bundle);
	free(h);
}

int s3_http_submit(struct s3_http *h, struct s3_req *r)
{
	pthread_mutex_lock(&h->lock);
	if (h->stopping) {
		pthread_mutex_unlock(&h->lock);
		return -ESHUTDOWN;
	}
	fifo_push(&h->sub_head, &h->sub_tail, r);
	pthread_mutex_unlock(&h->lock);
	curl_multi_wakeup(h->multi);
	return 0;
}
