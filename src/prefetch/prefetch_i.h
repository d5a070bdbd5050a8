/*
 * prefetch_i.h — private to src/prefetch/: the budget's internals and the hook
 * through which a waiting demand read reclaims idle buffers of any open file.
 */
#ifndef FEEDFS_PREFETCH_I_H
#define FEEDFS_PREFETCH_I_H

#include <pthread.h>
#include <stdint.h>

#include "feedfs/prefetch.h"

/*
 * A budget client is something that holds charged buffers it could let go of
 * (an open rd_file). reclaim_fn runs with the budget mutex held: it may only
 * pthread_mutex_trylock() its own lock (never block: lock order is
 * rd_file.mu -> rd_budget.mu), must not call rd_budget_give(), and returns the
 * bytes it freed (the budget uncharges them itself). It should stop once it has
 * freed `need` bytes.
 */
struct rd_budget_client;
typedef uint64_t (*rd_reclaim_fn)(struct rd_budget_client *c, uint64_t need);

struct rd_budget_client {
	struct rd_budget_client *prev, *next;   /* guarded by rd_budget.mu */
	rd_reclaim_fn reclaim;
};

struct rd_budget {
	/* Lock order: rd_file.mu -> rd_budget.mu. The budget never blocks on a
	 * file lock: reclaim only trylocks. */
	pthread_mutex_t mu;
	pthread_cond_t cond;        /* signalled when bytes come back or become reclaimable */
	uint64_t max, used, peak;
	unsigned waiters;           /* demand reads in rd_budget_take(wait=1) */
	struct rd_budget_client clients;    /* sentinel of a circular list */
};

/* Take n bytes only if the charged total stays within limit (and max); never
 * waits or reclaims. 0 or -EAGAIN. Readahead's way to share a smaller cap. */
int rd_budget_take_within(struct rd_budget *b, uint64_t n, uint64_t limit);
void rd_budget_register(struct rd_budget *b, struct rd_budget_client *c);
/* After this returns no reclaim_fn call on c is running or will start. */
void rd_budget_unregister(struct rd_budget *b, struct rd_budget_client *c);
/* Wake demand waiters: something became reclaimable. Cheap when nobody waits. */
void rd_budget_notify(struct rd_budget *b);

#endif
