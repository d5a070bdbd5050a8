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
};

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

static void start_one(struct s3_http *h, struct s3_req *r)
{
	CURL *e = easy_get(h);
	int ret;

	if (!e) {
		r->result = -ENOMEM;
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
		complete(r);
		return;
	}
	r->next = h->active;
	h->active = r;
	h->n_active++;
}

static void active_remove(struct s3_http *h, struct s3_req *r)
{
	for (struct s3_req **pp = &h->active; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			h->n_active--;
			return;
		}
	}
	BUG_ON(1);
}

/* Take an attempt out of curl before its end (cancel, shutdown). */
static void active_abort(struct s3_http *h, struct s3_req *r)
{
	active_remove(h, r);
	curl_multi_remove_handle(h->multi, r->easy);
	easy_put(h, r->easy);
	r->easy = NULL;
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
		curl_multi_remove_handle(h->multi, e);
		active_remove(h, r);
		delay = s3_req_attempt_end(r, cc);     /* still reads e's info */
		easy_put(h, e);
		if (delay < 0) {
			complete(r);
		} else {
			r->due_ms = util_now_ms() + delay;
			timer_insert(h, r);
		}
	}
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
			if (!cancel_match(a, note))
				continue;
			if (a->len - a->got <= S3_CANCEL_FINISH_BYTES)
				break;          /* nearly there: cheaper to let it finish */
			active_abort(h, a);
			r = a;
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
		active_abort(h, r);
		r->result = -ECANCELED;
		snprintf(r->reason, sizeof(r->reason), "client shutting down");
		complete(r);
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

		timeout_ms = S3_POLL_IDLE_MS;
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

void s3_http_destroy(struct s3_http *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stopping = 1;
	pthread_mutex_unlock(&h->lock);
	curl_multi_wakeup(h->multi);
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
