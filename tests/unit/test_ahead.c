/*
 * Unit tests for readahead across files (src/prefetch/ahead.c).
 *
 * The fake inner fetch only records requests; each test completes them
 * itself, in the order it wants, with bytes that are a function of (key, ETag,
 * offset), so every byte handed to a reader is checked. Readers' answers may
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
#include "harness.h"

#define NREQ 64

struct req {
	char key[64];
	char etag[16];
	uint64_t off;
	size_t len;
	unsigned char *buf;
	rd_fetch_done_fn done;
	void *arg;
	int completed;
};

static struct req reqs[NREQ];
static int nreq;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static unsigned char byte_at(const char *key, const char *etag, uint64_t pos)
{
	unsigned h = 2166136261u;

	for (const char *p = key; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	for (const char *p = etag; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return (unsigned char)(h ^ (pos * 2654435761u) ^ (pos >> 7));
}

static int fake_fetch(void *arg, const char *key, size_t key_len, const char *etag,
		      uint64_t obj_size, uint64_t off, size_t len, void *buf,
		      rd_fetch_done_fn done, void *done_arg)
{
	struct req *r;

	(void)arg;
	(void)obj_size;
	pthread_mutex_lock(&mu);
	if (nreq == NREQ) {
		pthread_mutex_unlock(&mu);
		return -ENOMEM;
	}
	r = &reqs[nreq++];
	memset(r, 0, sizeof(*r));
	snprintf(r->key, sizeof(r->key), "%.*s", (int)key_len, key);
	snprintf(r->etag, sizeof(r->etag), "%s", etag ? etag : "");
	r->off = off;
	r->len = len;
	r->buf = buf;
	r->done = done;
	r->arg = done_arg;
	pthread_mutex_unlock(&mu);
	return 0;
}

/* Complete request i: the right bytes and len, or an error. */
static void complete(int i, ssize_t err)
{
	struct req *r = &reqs[i];

	if (!err)
		for (size_t k = 0; k < r->len; k++)
			r->buf[k] = byte_at(r->key, r->etag, r->off + k);
	r->completed = 1;
	r->done(r->arg, err ? err : (ssize_t)r->len);
}

/* A reader's request and its answer. */
struct answer {
	int got;
	ssize_t result;
	unsigned char buf[8192];
};

static void answer_done(void *arg, ssize_t result)
{
	struct answer *a = arg;

	pthread_mutex_lock(&mu);
	a->result = result;
	a->got = 1;
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
	for (size_t k = 0; k < len; k++)
		if (a->buf[k] != byte_at(key, etag, off + k))
			return 0;
	return 1;
}

static struct rd_budget *budget;

static struct rd_ahead *setup(uint64_t budget_bytes, unsigned max_inflight, int64_t hold_ms)
{
	struct rd_ahead_config c;
	struct rd_ahead *a = NULL;

	nreq = 0;
	memset(reqs, 0, sizeof(reqs));
	CHECK_EQ_INT(rd_budget_new(budget_bytes, &budget), 0);
	memset(&c, 0, sizeof(c));
	c.fetch_sized = fake_fetch;
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
}

static int fetch(struct rd_ahead *a, const char *key, const char *etag, uint64_t size,
		 uint64_t off, size_t len, struct answer *ans)
{
	memset(ans, 0, sizeof(*ans));
	return rd_ahead_fetch_sized(a, key, strlen(key), etag, size, off, len, ans->buf,
				    answer_done, ans);
}

static void t_want_then_claim_serves_the_bytes_once(void)
{
	struct rd_ahead *a = setup(1 << 20, 4, 10000);
	struct rd_ahead_stats st;
	struct answer ans;

	CHECK_EQ_INT(rd_ahead_want(a, "d/f1", 4, "\"e1\"", 5000), 1);
	CHECK_EQ_INT(rd_ahead_want(a, "d/f1", 4, "\"e1\"", 5000), 1);   /* already in flight */
	CHECK_EQ_INT(nreq, 1);
	CHECK_EQ_INT(reqs[0].off, 0);
	CHECK_EQ_INT(reqs[0].len, 5000);
	CHECK_EQ_INT(rd_budget_used(budget), 5000);
	complete(0, 0);
	CHECK_EQ_INT(fetch(a, "d/f1", "\"e1\"", 5000, 0, 5000, &ans), 0);
	CHECK(wait_answer(&ans));
	CHECK_EQ_INT(ans.result, 5000);
	CHECK(bytes_ok(&ans, "d/f1", "\"e1\"", 0, 5000));
	CHECK_EQ_INT(nreq, 1);                  /* no GET of its own */
	/* Claimed entries are gone: the next read goes to the inner fetch. */
	CHECK_EQ_INT(fetch(a, "d/f1", "\"e1\"", 5000, 0, 5000, &ans), 0);
	CHECK_EQ_INT(nreq, 2);
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
	CHECK_EQ_INT(nreq, 1);
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
	CHECK_EQ_INT(nreq, 2);
	CHECK_STR(reqs[1].etag, "new");
	complete(1, 0);
	CHECK(wait_answer(&x));
	CHECK(bytes_ok(&x, "f3", "new", 0, 4000));
	/* Same ETag, other size: not ours either. No ETag: straight through. */
	CHECK_EQ_INT(fetch(a, "f3", "old", 4001, 0, 4001, &y), 0);
	CHECK_EQ_INT(fetch(a, "f3", "", 4000, 0, 4000, &z), 0);
	CHECK_EQ_INT(nreq, 4);
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
	CHECK_EQ_INT(nreq, 2);                  /* a fresh GET, not the failed entry */
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
	CHECK_EQ_INT(nreq, 3);
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
	CHECK_EQ_INT(nreq, 3);                  /* fetched again */
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
	{0},
};

int main(void)
{
	return harness_run("ahead", tests);
}
