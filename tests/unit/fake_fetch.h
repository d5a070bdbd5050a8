/*
 * fake_fetch — the one fake fetcher (feedfs/fetch.h) of the unit tests.
 *
 * Serves objects whose byte i is a pure function of (key, ETag, i), so
 * objects of any size (> 4 GiB included) cost no memory and every returned
 * byte can be checked (fake_fetch_check). Requests complete asynchronously on
 * the fake's own worker threads, after a set latency, as the http thread
 * would; every request is logged in order with the number outstanding when it
 * was submitted, so tests assert on the log and the counts, never on timings.
 *  - Objects: registered ones (fake_fetch_add) have a size (a range past it
 *    is a bug, counted in bad_range) and a current ETag; a request whose
 *    If-Match names another ETag fails with -ESTALE (fake_fetch_set_etag
 *    changes the object: new bytes, old ETag stale). An unregistered key
 *    takes any range; its current ETag is current_etag ("" : whatever the
 *    request names).
 *  - Injection: the fail_nth-th request (1-based) fails with fail_err;
 *    queue_err makes fetch itself refuse.
 *  - Holds: requests starting in [hold_lo, hold_hi) are not started until
 *    cancelled, released (fake_fetch_complete) or the hold changes.
 *  - Cancel: marks the pending request; it ends with -ECANCELED when its
 *    worker gets to it (never from the cancelling thread). A cancel naming no
 *    pending request is counted in cancel_unknown (a bug in the caller).
 *    base.cancels is 1; a test may set it to 0.
 * Fields below mu are read by tests under mu (or after fake_fetch_fini).
 */
#ifndef FEEDFS_TEST_FAKE_FETCH_H
#define FEEDFS_TEST_FAKE_FETCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/fetch.h"

#define FAKE_FETCH_OBJS 64
#define FAKE_FETCH_WORKERS 8
#define FAKE_FETCH_STR 64

struct fake_fetch_obj {
	char key[FAKE_FETCH_STR];
	uint64_t size;
	char etag[FAKE_FETCH_STR];
};

/* One fetch call, in submission order. */
struct fake_fetch_log {
	char key[FAKE_FETCH_STR];
	char etag[FAKE_FETCH_STR];      /* the request's If-Match, "" for none */
	int obj;                        /* registered object index, or -1 */
	uint64_t obj_size, off;
	size_t len;
	unsigned outstanding;           /* outstanding at submission, itself included */
	int finished;                   /* its done has returned */
	ssize_t result;                 /* what done was given */
};

struct fake_fetch_req;

struct fake_fetch {
	struct fetcher base;            /* hand &fk->base to the layer under test */
	pthread_t workers[FAKE_FETCH_WORKERS];
	unsigned nworkers;
	unsigned latency_us;

	pthread_mutex_t mu;
	pthread_cond_t cond;            /* broadcast on every change */
	int stop;
	struct fake_fetch_req *head, **tail;    /* not yet taken by a worker */
	struct fake_fetch_req *pending;         /* submitted, done not yet returned */
	struct fake_fetch_obj objs[FAKE_FETCH_OBJS];
	int nobjs;
	char current_etag[FAKE_FETCH_STR];      /* unregistered keys; "" any */
	struct fake_fetch_log *log;
	size_t nlog, cap_log;
	unsigned outstanding, max_outstanding;
	unsigned done_calls;            /* requests whose done is about to run or ran */
	uint64_t bytes;                 /* bytes asked for */
	int bad_range;
	size_t fail_nth;
	int fail_err;
	int queue_err;
	unsigned cancel_calls, cancelled, cancel_unknown;
	uint64_t hold_lo, hold_hi;
};

/* nworkers 1..FAKE_FETCH_WORKERS (1: completions in submission order). */
void fake_fetch_init(struct fake_fetch *fk, unsigned nworkers, unsigned latency_us);
/* Releases every hold, waits for every request, joins the workers and checks
 * that nothing is outstanding, no range was bad and no cancel was unknown. */
void fake_fetch_fini(struct fake_fetch *fk);

/* Register an object; returns its index. */
int fake_fetch_add(struct fake_fetch *fk, const char *key, uint64_t size, const char *etag);
/* The object changed: its ETag (and so its bytes) are now etag. */
void fake_fetch_set_etag(struct fake_fetch *fk, const char *key, const char *etag);
void fake_fetch_hold(struct fake_fetch *fk, uint64_t lo, uint64_t hi);
/* Let held request i (its log index) complete, with err (0: its normal
 * result), and wait until its done has returned. */
void fake_fetch_complete(struct fake_fetch *fk, size_t i, int err);
/* Requests whose done has not returned yet. */
unsigned fake_fetch_pending(struct fake_fetch *fk);
/* Counts, read under the lock. */
uint64_t fake_fetch_calls(struct fake_fetch *fk);
uint64_t fake_fetch_bytes(struct fake_fetch *fk);
uint64_t fake_fetch_last_len(struct fake_fetch *fk);

/* The byte pattern. */
uint64_t fake_fetch_seed(const char *key, size_t key_len, const char *etag);
void fake_fetch_pattern(char *dst, uint64_t seed, uint64_t off, size_t len);
/* 1 when buf holds exactly the bytes of (key, etag) at [off, off+len). */
int fake_fetch_check(const void *buf, const char *key, const char *etag, uint64_t off,
		     size_t len);

#endif
