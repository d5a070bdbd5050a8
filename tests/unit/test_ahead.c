/*
 * Unit tests for readahead across files (src/prefetch/ahead.c).
 *
 * The inner fetcher is the shared fake (fake_fetch.h) with every request
 * held: each test completes them itself, in the order it wants, with bytes
 * that are a function of (key, ETag, offset), so every byte handed to a
 * reader is checked. Readers' answers may
 * arrive on the module's answer thread: they are collected under a mutex and
 * waited for with a deadline.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "fake_fetch.h"
#include "harness.h"

/* The inner fetcher: the shared fake with every request held, so each test
 * completes them itself (fake_fetch_complete), in the order it wants. */
static struct fake_fetch fk;

static size_t nreq(void)
{
	return (size_t)fake_fetch_calls(&fk);
}

/* Complete request i: the right bytes and len, or an error; returns once
 * its done has. */
static void complete(size_t i, int err)
{
	fake_fetch_complete(&fk, i, err);
}

/* A reader's request and its answer. */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

struct answer {
	int got;                /* dones seen: exactly 1 once answered */
	ssize_t result;
	struct fetch_req fr;
	unsigned char buf[8192];
};

static void answer_done(struct fetch_req *fr, ssize_t result)
{
	struct answer *a = fr->done_arg;

	pthread_mutex_lock(&mu);
	a->result = result;
	a->got++;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

/* Wait up to 5 s for the answer; 1 when it came. */
static int wait_answer(struct answer *a)
{
	struct timespec ts;
	int got;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&mu);
	while (!a->got && pthread_cond_timedwait(&cv, &mu, &ts) == 0)
		;
	got = a->got;
	pthread_mutex_unlock(&mu);
	return got;
}

static int bytes_ok(const struct answer *a, const char *key, const char *etag, uint64_t off,
		    size_t len)
{
	return fake_fetch_check(a->buf, key, etag, off, len);
}

static struct rd_budget *budget;

static struct rd_ahead *setup(uint64_t budget_bytes, unsigned max_inflight, int64_t hold_ms)
{
	struct rd_ahead_config c;
	struct rd_ahead *a = NULL;

	fake_fetch_init(&fk, 2, 0);
	fake_fetch_hold(&fk, 0, UINT64_MAX);
	CHECK_EQ_INT(rd_budget_new(budget_bytes, &budget), 0);
	memset(&c, 0, sizeof(c));
	c.inner = &fk.base;
	c.budget = budget;
	c.max_bytes = budget_bytes;
	c.max_file_size = 8192;
	c.max_inflight = max_inflight;
	c.hold_ms = hold_ms;
	CHECK_EQ_INT(rd_ahead_new(&c, &a), 0);
	return a;
}

static void teardown(struct rd_ahead *a)
{
	rd_ahead_destroy(a);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	rd_budget_destroy(budget);
	fake_fetch_fini(&fk);
}

static int fetch(struct rd_ahead *a, const char *key, const char *etag, uint64_t size,
		 uint64_t off, size_t len, struct answer *ans)
{
	memset(ans, 0, sizeof(*ans));
	ans->fr = (struct fetch_req){
		.key = key, .key_len = strlen(key), .etag = etag, .obj_size = size,
		.off = off, .len = len, .buf = ans->buf, .done = answer_done, .done_arg = ans,
	};
	return fetcher_fetch(rd_ahead_fetcher(a), &ans->fr);
}

static void t_want_then_claim_serves_the_bytes_once(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct rd_ahead_stats st;
	struct answer ans;

	CHECK_EQ_INT(rd_ahead_want(a, "d/f1", 4, "\"e1\"", 5000), 1);
	CHECK_EQ_INT(rd_ahead_want(a, "d/f1", 4, "\"e1\"", 5000), 1);   /* already in flight */
	CHECK_EQ_INT(nreq(), 1);
	CHECK_EQ_INT(fk.log[0].off, 0);
	CHECK_EQ_INT(fk.log[0].len, 5000);
	CHECK_EQ_INT(rd_budget_used(budget), 5000);
	complete(0, 0);
	CHECK_EQ_INT(fetch(a, "d/f1", "\"e1\"", 5000, 0, 5000, &ans), 0);
	CHECK(wait_answer(&ans));
	CHECK_EQ_INT(ans.result, 5000);
	CHECK(bytes_ok(&ans, "d/f1", "\"e1\"", 0, 5000));
	CHECK_EQ_INT(nreq(), 1);                  /* no GET of its own */
	/* Claimed entries are gone: the next read goes to the inner fetch. */
	CHECK_EQ_INT(fetch(a, "d/f1", "\"e1\"", 5000, 0, 5000, &ans), 0);
	CHECK_EQ_INT(nreq(), 2);
	complete(1, 0);
	CHECK(wait_answer(&ans));
	rd_ahead_get_stats(a, &st);
	CHECK_EQ_INT(st.issued, 1);
	CHECK_EQ_INT(st.hits, 1);
	CHECK_EQ_INT(st.joined, 0);
	teardown(a);
}

static void t_requests_join_a_get_in_flight(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct answer whole, part;
	struct rd_ahead_stats st;

	CHECK_EQ_INT(rd_ahead_want(a, "f2", 2, "e", 6000), 1);
	CHECK_EQ_INT(fetch(a, "f2", "e", 6000, 0, 6000, &whole), 0);
	CHECK_EQ_INT(fetch(a, "f2", "e", 6000, 1000, 300, &part), 0);
	CHECK_EQ_INT(nreq(), 1);
	CHECK(!whole.got && !part.got);
	complete(0, 0);
	CHECK(wait_answer(&whole) && wait_answer(&part));
	CHECK_EQ_INT(whole.result, 6000);
	CHECK_EQ_INT(part.result, 300);
	CHECK(bytes_ok(&whole, "f2", "e", 0, 6000));
	CHECK(bytes_ok(&part, "f2", "e", 1000, 300));
	rd_ahead_get_stats(a, &st);
	CHECK_EQ_INT(st.joined, 2);
	teardown(a);
}

static void t_other_etag_or_size_goes_to_the_inner_fetch(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct answer x, y, z;

	CHECK_EQ_INT(rd_ahead_want(a, "f3", 2, "old", 4000), 1);
	complete(0, 0);
	/* The object changed since the listing: never the old bytes. */
	CHECK_EQ_INT(fetch(a, "f3", "new", 4000, 0, 4000, &x), 0);
	CHECK_EQ_INT(nreq(), 2);
	CHECK_STR(fk.log[1].etag, "new");
	complete(1, 0);
	CHECK(wait_answer(&x));
	CHECK(bytes_ok(&x, "f3", "new", 0, 4000));
	/* Same ETag, other size: not ours either. No ETag: straight through. */
	CHECK_EQ_INT(fetch(a, "f3", "old", 4001, 0, 4001, &y), 0);
	CHECK_EQ_INT(fetch(a, "f3", "", 4000, 0, 4000, &z), 0);
	CHECK_EQ_INT(nreq(), 4);
	complete(2, 0);
	complete(3, 0);
	CHECK(wait_answer(&y) && wait_answer(&z));
	teardown(a);                            /* the unclaimed "old" entry is freed */
}

static void t_failed_get_fails_joined_reads_and_is_forgotten(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct answer j, later;
	struct rd_ahead_stats st;

	CHECK_EQ_INT(rd_ahead_want(a, "f4", 2, "e", 3000), 1);
	CHECK_EQ_INT(fetch(a, "f4", "e", 3000, 0, 3000, &j), 0);
	complete(0, -ESTALE);
	CHECK(wait_answer(&j));
	CHECK_EQ_INT(j.result, -ESTALE);
	CHECK_EQ_INT(fetch(a, "f4", "e", 3000, 0, 3000, &later), 0);
	CHECK_EQ_INT(nreq(), 2);                  /* a fresh GET, not the failed entry */
	complete(1, 0);
	CHECK(wait_answer(&later));
	CHECK_EQ_INT(later.result, 3000);
	rd_ahead_get_stats(a, &st);
	CHECK_EQ_INT(st.failed, 1);
	teardown(a);
}

static void t_limits_refuse_without_blocking(void)
{
	struct rd_ahead *a = setup(10000, 2, 10000);
	struct rd_ahead_stats st;

	CHECK_EQ_INT(rd_ahead_want(a, "big", 3, "e", 8193), 0);        /* > max_file_size */
	CHECK_EQ_INT(rd_ahead_want(a, "noetag", 6, "", 100), 0);
	CHECK_EQ_INT(rd_ahead_want(a, "empty", 5, "e", 0), 0);
	CHECK_EQ_INT(rd_ahead_want(a, "a", 1, "e", 4000), 1);
	CHECK_EQ_INT(rd_ahead_want(a, "b", 1, "e", 4000), 1);
	CHECK_EQ_INT(rd_ahead_want(a, "c", 1, "e", 100), 0);          /* 2 GETs in flight */
	complete(0, 0);
	CHECK_EQ_INT(rd_ahead_want(a, "c", 1, "e", 4000), 0);         /* 8000 + 4000 > 10000 */
	CHECK_EQ_INT(rd_ahead_want(a, "c", 1, "e", 2000), 1);
	CHECK_EQ_INT(nreq(), 3);
	rd_ahead_get_stats(a, &st);
	CHECK_EQ_INT(st.skipped, 2);
	complete(1, 0);
	complete(2, 0);
	teardown(a);
}

static void t_budget_reclaims_unclaimed_entries(void)
{
	struct rd_ahead *a = setup(10000, 4, 10000);
	struct rd_ahead_stats st;

	CHECK_EQ_INT(rd_ahead_want(a, "a", 1, "e", 4000), 1);
	CHECK_EQ_INT(rd_ahead_want(a, "b", 1, "e", 4000), 1);
	complete(0, 0);
	complete(1, 0);
	CHECK_EQ_INT(rd_budget_used(budget), 8000);
	/* A demand read short of budget takes it back from held entries. */
	CHECK_EQ_INT(rd_budget_take(budget, 5000, 1), 0);
	rd_budget_give(budget, 5000);
	rd_ahead_get_stats(a, &st);
	CHECK(st.dropped >= 1);
	CHECK(rd_budget_used(budget) <= 4000);
	teardown(a);
}

static void t_unclaimed_entries_expire(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 50);
	struct rd_ahead_stats st;
	struct answer x;

	CHECK_EQ_INT(rd_ahead_want(a, "old", 3, "e", 4000), 1);
	complete(0, 0);
	usleep(120 * 1000);
	CHECK_EQ_INT(rd_ahead_want(a, "new", 3, "e", 1000), 1);       /* expires "old" */
	CHECK_EQ_INT(rd_budget_used(budget), 1000);
	rd_ahead_get_stats(a, &st);
	CHECK_EQ_INT(st.dropped, 1);
	CHECK_EQ_INT(fetch(a, "old", "e", 4000, 0, 4000, &x), 0);
	CHECK_EQ_INT(nreq(), 3);                  /* fetched again */
	complete(1, 0);
	complete(2, 0);
	CHECK(wait_answer(&x));
	CHECK(bytes_ok(&x, "old", "e", 0, 4000));
	teardown(a);
}

static void *destroy_thread(void *arg)
{
	rd_ahead_destroy(arg);
	return NULL;
}

static void t_destroy_waits_for_gets_in_flight(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	pthread_t t;

	CHECK_EQ_INT(rd_ahead_want(a, "a", 1, "e", 4000), 1);
	CHECK_EQ_INT(pthread_create(&t, NULL, destroy_thread, a), 0);
	usleep(50 * 1000);
	CHECK_EQ_INT(rd_budget_used(budget), 4000);     /* still waiting for the GET */
	complete(0, 0);
	pthread_join(t, NULL);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	rd_budget_destroy(budget);
	fake_fetch_fini(&fk);
}

/* A cancel of a request that joined an entry in flight is this layer's: the
 * request ends -ECANCELED exactly once, nothing reaches the inner fetcher,
 * and the entry's GET goes on to serve a later open with the right bytes. */
static void t_cancel_of_a_joined_request_ends_it_here(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct answer j, later;

	CHECK_EQ_INT(rd_ahead_fetcher(a)->cancels, 1);  /* the inner fetcher's */
	CHECK_EQ_INT(rd_ahead_want(a, "c1", 2, "e", 7000), 1);
	CHECK_EQ_INT(fetch(a, "c1", "e", 7000, 100, 2000, &j), 0);
	fetcher_cancel(rd_ahead_fetcher(a), &j.fr);
	CHECK(wait_answer(&j));                 /* before the entry's GET ended */
	CHECK_EQ_INT(j.result, -ECANCELED);
	pthread_mutex_lock(&fk.mu);
	CHECK_EQ_INT(fk.cancel_calls, 0);
	CHECK_EQ_INT(fk.log[0].finished, 0);
	pthread_mutex_unlock(&fk.mu);
	complete(0, 0);
	CHECK_EQ_INT(fetch(a, "c1", "e", 7000, 0, 7000, &later), 0);
	CHECK(wait_answer(&later));
	CHECK_EQ_INT(later.result, 7000);
	CHECK(bytes_ok(&later, "c1", "e", 0, 7000));
	CHECK_EQ_INT(nreq(), 1);
	pthread_mutex_lock(&mu);
	CHECK_EQ_INT(j.got, 1);                 /* exactly once */
	pthread_mutex_unlock(&mu);
	teardown(a);
}

/* A request this layer handed on as it is (no entry for it) is cancelled at
 * the inner fetcher, which holds it: the fake ends it -ECANCELED. */
static void t_cancel_of_a_forwarded_request_reaches_inner(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct answer x, y;

	CHECK_EQ_INT(fetch(a, "c2", "e", 5000, 0, 5000, &x), 0);
	CHECK_EQ_INT(fetch(a, "c3", "", 5000, 0, 5000, &y), 0);    /* no ETag */
	CHECK_EQ_INT(nreq(), 2);
	fetcher_cancel(rd_ahead_fetcher(a), &x.fr);
	fetcher_cancel(rd_ahead_fetcher(a), &y.fr);
	CHECK(wait_answer(&x) && wait_answer(&y));
	CHECK_EQ_INT(x.result, -ECANCELED);
	CHECK_EQ_INT(y.result, -ECANCELED);
	pthread_mutex_lock(&fk.mu);
	CHECK_EQ_INT(fk.cancel_calls, 2);
	CHECK_EQ_INT(fk.cancelled, 2);
	CHECK_EQ_INT(fk.cancel_unknown, 0);
	pthread_mutex_unlock(&fk.mu);
	pthread_mutex_lock(&mu);
	CHECK_EQ_INT(x.got + y.got, 2);
	pthread_mutex_unlock(&mu);
	teardown(a);
}

/* Over an inner fetcher that does not cancel (the block cache), neither
 * does this layer: the read path then keeps what it asked for. */
static void t_cancels_follows_the_inner_fetcher(void)
{
	struct rd_ahead *a;

	fake_fetch_init(&fk, 1, 0);
	fk.base.cancels = 0;
	CHECK_EQ_INT(rd_budget_new(1 << 20, &budget), 0);
	CHECK_EQ_INT(rd_ahead_new(&(struct rd_ahead_config){ .inner = &fk.base,
							     .budget = budget }, &a), 0);
	CHECK_EQ_INT(rd_ahead_fetcher(a)->cancels, 0);
	teardown(a);
}

static const struct test tests[] = {
	TEST(t_want_then_claim_serves_the_bytes_once),
	TEST(t_requests_join_a_get_in_flight),
	TEST(t_other_etag_or_size_goes_to_the_inner_fetch),
	TEST(t_failed_get_fails_joined_reads_and_is_forgotten),
	TEST(t_limits_refuse_without_blocking),
	TEST(t_budget_reclaims_unclaimed_entries),
	TEST(t_unclaimed_entries_expire),
	TEST(t_destroy_waits_for_gets_in_flight),
	TEST(t_cancel_of_a_joined_request_ends_it_here),
	TEST(t_cancel_of_a_forwarded_request_reaches_inner),
	TEST(t_cancels_follows_the_inner_fetcher),
	{0},
};

int main(void)
{
	return harness_run("ahead", tests);
}
