/*
 * budget — one global byte budget (--max-memory) for every read buffer.
 *
 * Every segment buffer is charged here before its GET is issued and uncharged
 * when the buffer is freed, so used <= max always holds (peak records it).
 * Readahead takes with wait == 0 and simply issues less. A demand read takes
 * with wait == 1 and, while short, asks registered files to give back idle
 * buffers (completed, nobody waiting on them) through their reclaim hook; see
 * the deadlock argument in prefetch.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "feedfs/log.h"
#include "feedfs/util.h"
#include "prefetch_i.h"

/* A waiter also re-runs reclaim this often, in case a completion made a buffer
 * idle without anyone noticing (belt and braces: completions do notify). */
#define BUDGET_RECHECK_MS 20

int rd_budget_new(uint64_t max_bytes, struct rd_budget **out)
{
	struct rd_budget *b;
	if (max_bytes == 0)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->max = max_bytes;
	b->clients.prev = b->clients.next = &b->clients;
	pthread_mutex_init(&b->mu, NULL);
	util_cond_init_monotonic(&b->cond);
	*out = b;
	return 0;
}

/* Every file must be closed first: a charge left over is a leak in this module. */
void rd_budget_destroy(struct rd_budget *b)
{
	if (!b)
		return;
	BUG_ON(b->used != 0);
	BUG_ON(b->clients.next != &b->clients);
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

/* Ask clients, newest first, for idle bytes until n fits. */
static void budget_reclaim_locked(struct rd_budget *b, uint64_t n)
{
	for (struct rd_budget_client *c = b->clients.prev;
	     c != &b->clients && b->used + n > b->max; c = c->prev) {
		uint64_t freed = c->reclaim(c, b->used + n - b->max);

		BUG_ON(freed > b->used);
		b->used -= freed;
	}
}

/* b->mu held, n fits: charge it. */
static void charge_locked(struct rd_budget *b, uint64_t n)
{
	b->used += n;
	if (b->used > b->peak)
		b->peak = b->used;
}

/*
 * Take n bytes. Returns 0; -EAGAIN when wait == 0 and they are not free now;
 * -EINVAL when n > max (it could never be satisfied: callers cap requests).
 * With wait != 0 the caller must hold no rd_file lock.
 */
int rd_budget_take(struct rd_budget *b, uint64_t n, int wait)
{
	if (n == 0)
		return 0;
	if (n > b->max)
		return -EINVAL;
	pthread_mutex_lock(&b->mu);
	while (b->used + n > b->max) {
		if (!wait) {
			pthread_mutex_unlock(&b->mu);
			return -EAGAIN;
		}
		budget_reclaim_locked(b, n);
		if (b->used + n <= b->max)
			break;
		b->waiters++;
		util_cond_wait_ms(&b->cond, &b->mu, BUDGET_RECHECK_MS);
		b->waiters--;
	}
	charge_locked(b, n);
	pthread_mutex_unlock(&b->mu);
	return 0;
}

int rd_budget_take_within(struct rd_budget *b, uint64_t n, uint64_t limit)
{
	int rc = -EAGAIN;

	if (limit > b->max)
		limit = b->max;
	pthread_mutex_lock(&b->mu);
	if (b->used + n <= limit) {
		charge_locked(b, n);
		rc = 0;
	}
	pthread_mutex_unlock(&b->mu);
	return rc;
}

void rd_budget_give(struct rd_budget *b, uint64_t n)
{
	if (n == 0)
		return;
	pthread_mutex_lock(&b->mu);
	BUG_ON(n > b->used);
	b->used -= n;
	if (b->waiters)
		pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->mu);
}

void rd_budget_notify(struct rd_budget *b)
{
	pthread_mutex_lock(&b->mu);
	if (b->waiters)
		pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->mu);
}

uint64_t rd_budget_used(struct rd_budget *b)
{
	uint64_t v;

	pthread_mutex_lock(&b->mu);
	v = b->used;
	pthread_mutex_unlock(&b->mu);
	return v;
}

uint64_t rd_budget_peak(struct rd_budget *b)
{
	uint64_t v;

	pthread_mutex_lock(&b->mu);
	v = b->peak;
	pthread_mutex_unlock(&b->mu);
	return v;
}

uint64_t rd_budget_max(struct rd_budget *b)
{
	return b->max;      /* immutable after rd_budget_new */
}

void rd_budget_register(struct rd_budget *b, struct rd_budget_client *c)
{
	pthread_mutex_lock(&b->mu);
	c->next = &b->clients;
	c->prev = b->clients.prev;
	b->clients.prev->next = c;
	b->clients.prev = c;
	pthread_mutex_unlock(&b->mu);
}

void rd_budget_unregister(struct rd_budget *b, struct rd_budget_client *c)
{
	/* Reclaim walks the list under b->mu, so once we hold it no walk is on c. */
	pthread_mutex_lock(&b->mu);
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->prev = c->next = NULL;
	pthread_mutex_unlock(&b->mu);
}
