/*
 * Unit tests for loader-order prefetch (src/prefetch/hint.c) over a real
 * rd_ahead and the shared fake fetcher (fake_fetch.h).
 *
 * Paths resolve through a table-free fake: "fN" is the object "k/fN" of
 * FILE_SIZE bytes with ETag "eN"; "big*" is larger than ahead takes; "miss*"
 * is not in the bucket. Every count is exact: the fake logs each GET, the
 * engine counts each open, and waits are for conditions (with a deadline),
 * never for time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "feedfs/hint.h"
#include "feedfs/prefetch.h"
#include "feedfs/util.h"
#include "fake_fetch.h"
#include "harness.h"

#define FILE_SIZE 4000
#define MAX_FILE 8192

static struct fake_fetch fk;
static struct rd_budget *budget;
static struct rd_ahead *ahead;
static struct hint *hint;
static uint64_t cfg_head;               /* hint_config.head_size of the next setup */
static int cfg_charge;                  /* the next setup charges orders to the budget */

/* "slow*" paths resolve only once the gate opens (a LIST taking its time). */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_open = 1, gate_waiting;

static void gate_set(int open)
{
	pthread_mutex_lock(&gate_mu);
	gate_open = open;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
}

/* Wait (up to 5 s) until the resolver is held at the gate. */
static int gate_wait_blocked(void)
{
	int ok;

	for (int i = 0; i < 5000; i++) {
		pthread_mutex_lock(&gate_mu);
		ok = gate_waiting;
		pthread_mutex_unlock(&gate_mu);
		if (ok)
			return 1;
		usleep(1000);
	}
	return 0;
}

static int fake_resolve(void *arg, const char *path, size_t len, char **key, size_t *key_len,
			char *etag, size_t etag_len, uint64_t *size)
{
	(void)arg;
	if (len >= 4 && memcmp(path, "miss", 4) == 0)
		return -ENOENT;
	if (len >= 4 && memcmp(path, "slow", 4) == 0) {
		pthread_mutex_lock(&gate_mu);
		gate_waiting = 1;
		while (!gate_open)
			pthread_cond_wait(&gate_cv, &gate_mu);
		gate_waiting = 0;
		pthread_mutex_unlock(&gate_mu);
	}
	*key = xasprintf("k/%.*s", (int)len, path);
	*key_len = strlen(*key);
	snprintf(etag, etag_len, "\"e%.*s\"", (int)len, path);
	*size = len >= 3 && memcmp(path, "big", 3) == 0 ? MAX_FILE + 1 : FILE_SIZE;
	return 0;
}

static void setup(unsigned max_inflight, unsigned window, int hold)
{
	struct rd_ahead_config ac;
	struct hint_config hc;

	fake_fetch_init(&fk, 2, 0);
	if (hold)
		fake_fetch_hold(&fk, 0, UINT64_MAX);
	CHECK_EQ_INT(rd_budget_new(1 << 20, &budget), 0);
	memset(&ac, 0, sizeof(ac));
	ac.inner = &fk.base;
	ac.budget = budget;
	ac.max_bytes = 1 << 20;
	ac.max_file_size = MAX_FILE;
	ac.max_inflight = max_inflight;
	ac.hold_ms = 600000;            /* nothing expires by itself in a test */
	CHECK_EQ_INT(rd_ahead_new(&ac, &ahead), 0);
	memset(&hc, 0, sizeof(hc));
	hc.ahead = ahead;
	hc.resolve = fake_resolve;
	hc.window = window;
	hc.tick_ms = 5;
	hc.head_size = cfg_head;
	hc.budget = cfg_charge ? budget : NULL;
	CHECK_EQ_INT(hint_new(&hc, &hint), 0);
}

static void teardown(void)
{
	hint_destroy(hint);
	cfg_head = 0;
	cfg_charge = 0;
	fake_fetch_hold(&fk, 0, 0);
	rd_ahead_destroy(ahead);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	rd_budget_destroy(budget);
	fake_fetch_fini(&fk);
}

/* "f<from>\n" ... "f<to-1>\n", malloc'd, for hint_set_order. */
static char *order_of(int from, int to, size_t *nbytes)
{
	char *p = malloc((size_t)(to - from) * 16 + 1);
	size_t n = 0;

	for (int i = from; i < to; i++)
		n += (size_t)sprintf(p + n, "f%d\n", i);
	*nbytes = n;
	return p;
}

static void send_order(char *payload, size_t nbytes, size_t count)
{
	CHECK_EQ_INT(hint_order_check(payload, nbytes, count), 0);
	CHECK_EQ_INT(hint_set_order(hint, "", payload, nbytes, count), 0);
	CHECK(hint_wait_resolved(hint, 5000));
}

static void open_file(int i)
{
	char key[32];

	snprintf(key, sizeof(key), "k/f%d", i);
	hint_opened(hint, key, strlen(key));
}

static struct hint_stats stats(void)
{
	struct hint_stats st;

	hint_get_stats(hint, &st);
	return st;
}

/* Wait up to 5 s until the fake has seen n GETs; the count then. */
static uint64_t wait_calls(uint64_t n)
{
	for (int i = 0; i < 5000 && fake_fetch_calls(&fk) < n; i++)
		usleep(1000);
	return fake_fetch_calls(&fk);
}

static int logged(const char *key)
{
	int found = 0;

	pthread_mutex_lock(&fk.mu);
	for (size_t i = 0; i < fk.nlog; i++)
		found += strcmp(fk.log[i].key, key) == 0;
	pthread_mutex_unlock(&fk.mu);
	return found;
}

/* The key of GET i (log order), or "" when there is none. */
static const char *log_key(size_t i)
{
	static char key[FAKE_FETCH_STR];

	pthread_mutex_lock(&fk.mu);
	snprintf(key, sizeof(key), "%s", i < fk.nlog ? fk.log[i].key : "");
	pthread_mutex_unlock(&fk.mu);
	return key;
}

struct opener {
	pthread_t t;
	int idx;
};

static void *opener_main(void *arg)
{
	open_file(((struct opener *)arg)->idx);
	return NULL;
}

/* Four workers open indexes 1, 0, 3, 2 at once: the window moves past all
 * four, whatever order the opens arrive in. */
static void t_window_advances_with_concurrent_out_of_order_opens(void)
{
	struct opener op[4] = { { .idx = 1 }, { .idx = 0 }, { .idx = 3 }, { .idx = 2 } };
	struct hint_stats st;
	size_t nb;
	char *p;

	setup(64, 8, 0);
	p = order_of(0, 40, &nb);
	send_order(p, nb, 40);
	CHECK_EQ_INT(wait_calls(8), 8);
	usleep(20000);                  /* a wrong extra GET would show now */
	CHECK_EQ_INT(fake_fetch_calls(&fk), 8);
	CHECK_EQ_INT(logged("k/f7"), 1);
	CHECK_EQ_INT(logged("k/f8"), 0);
	st = stats();
	CHECK_EQ_INT(st.orders, 1);
	CHECK_EQ_INT(st.paths, 40);
	CHECK_EQ_INT(st.resolved, 40);
	CHECK_EQ_INT(st.fetched, 8);

	for (int i = 0; i < 4; i++)
		CHECK_EQ_INT(pthread_create(&op[i].t, NULL, opener_main, &op[i]), 0);
	for (int i = 0; i < 4; i++)
		pthread_join(op[i].t, NULL);
	CHECK_EQ_INT(wait_calls(12), 12);
	CHECK_EQ_INT(logged("k/f11"), 1);
	CHECK_EQ_INT(logged("k/f12"), 0);
	st = stats();
	CHECK_EQ_INT(st.consumed, 4);
	CHECK_EQ_INT(st.hits, 4);
	CHECK_EQ_INT(st.fetched, 12);

	/* A second open of the same file settles nothing new. */
	open_file(2);
	CHECK_EQ_INT(stats().consumed, 4);

	{
		struct rd_ahead_stats as;

		rd_ahead_get_stats(ahead, &as);
		CHECK_EQ_INT(as.issued, 12);
	}

	/* The loader jumps to 30: what lies more than a window (8) behind it
	 * unopened ages out, so 4..11 (fetched) are wasted and freed, and the
	 * window is now [23, 31): 23..29 are wanted (30 is open already). */
	open_file(30);
	st = stats();
	CHECK_EQ_INT(st.wasted, 8);
	CHECK_EQ_INT(st.consumed, 5);
	CHECK_EQ_INT(st.hits, 4);           /* 30 was not fetched */
	CHECK_EQ_INT(wait_calls(12 + 7), 12 + 7);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 12 + 7);
	CHECK_EQ_INT(logged("k/f23"), 1);
	CHECK_EQ_INT(logged("k/f29"), 1);
	CHECK_EQ_INT(logged("k/f30"), 0);
	CHECK_EQ_INT(logged("k/f31"), 0);
	CHECK_EQ_INT(logged("k/f22"), 0);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	/* Held in ahead: 0..3 (opened, never read here) and 23..29. */
	CHECK_EQ_INT(rd_budget_used(budget), (4 + 7) * FILE_SIZE);
	teardown();
}

/* Bytes served to a reader are the object's, fetched once for the order. */
static void read_done(struct fetch_req *fr, ssize_t r)
{
	__atomic_store_n((ssize_t *)fr->done_arg, r, __ATOMIC_RELEASE);
}

static void t_opened_file_is_read_from_the_prefetch(void)
{
	static char buf[FILE_SIZE];
	ssize_t got = 0;
	struct fetch_req fr;
	size_t nb;
	char *p;

	setup(64, 4, 0);
	p = order_of(0, 2, &nb);
	send_order(p, nb, 2);
	CHECK_EQ_INT(wait_calls(2), 2);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	open_file(0);
	fr = (struct fetch_req){ .key = "k/f0", .key_len = 4, .etag = "\"ef0\"",
				 .obj_size = FILE_SIZE, .off = 0, .len = FILE_SIZE, .buf = buf,
				 .done = read_done, .done_arg = &got };
	CHECK_EQ_INT(fetcher_fetch(rd_ahead_fetcher(ahead), &fr), 0);
	for (int i = 0; i < 5000 && !__atomic_load_n(&got, __ATOMIC_ACQUIRE); i++)
		usleep(1000);
	CHECK_EQ_INT(got, FILE_SIZE);
	CHECK(fake_fetch_check(buf, "k/f0", "\"ef0\"", 0, FILE_SIZE));
	CHECK_EQ_INT(fake_fetch_calls(&fk), 2);
	CHECK_EQ_INT(stats().hits, 1);
	teardown();
}

/* Ahead takes two GETs at once: the rest are refused, then fetched as each
 * GET ends (the tick retries), in order. */
static void t_refused_files_are_retried_as_room_frees(void)
{
	size_t nb;
	char *p;

	setup(2, 16, 1);
	p = order_of(0, 6, &nb);
	send_order(p, nb, 6);
	CHECK_EQ_INT(wait_calls(2), 2);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 2);
	CHECK_EQ_INT(stats().fetched, 2);
	fake_fetch_complete(&fk, 0, 0);
	CHECK_EQ_INT(wait_calls(3), 3);
	CHECK_STR(log_key(2), "k/f2");
	fake_fetch_complete(&fk, 1, 0);
	fake_fetch_complete(&fk, 2, 0);
	CHECK_EQ_INT(wait_calls(5), 5);
	CHECK_STR(log_key(3), "k/f3");
	CHECK_STR(log_key(4), "k/f4");
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 5);     /* still two in flight */
	CHECK_EQ_INT(stats().fetched, 5);
	teardown();
}

/* Clear frees at once what is held, and what is in flight when it ends. */
static void t_clear_frees_everything(void)
{
	struct rd_ahead_stats as;
	struct hint_stats st;
	size_t nb;
	char *p;

	setup(2, 16, 1);
	p = order_of(0, 4, &nb);
	send_order(p, nb, 4);
	CHECK_EQ_INT(wait_calls(2), 2);
	fake_fetch_complete(&fk, 0, 0);     /* f0 held; f1 in flight */
	CHECK_EQ_INT(wait_calls(3), 3);     /* f2 in flight too */
	CHECK_EQ_INT(rd_budget_used(budget), 3 * FILE_SIZE);
	hint_clear(hint, NULL);
	st = stats();
	CHECK_EQ_INT(st.paths, 0);
	CHECK_EQ_INT(st.wasted, 3);
	CHECK_EQ_INT(rd_budget_used(budget), 2 * FILE_SIZE);   /* f0 freed now */
	fake_fetch_complete(&fk, 1, 0);
	fake_fetch_complete(&fk, 2, 0);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	rd_ahead_get_stats(ahead, &as);
	CHECK_EQ_INT(as.dropped, 3);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 3);     /* nothing more for a cleared order */
	teardown();
}

/* A new order replaces the old one: the old one's fetches are dropped, its
 * files no longer count, and the new one is fetched. */
static void t_new_order_replaces_the_old(void)
{
	struct hint_stats st;
	size_t nb;
	char *p;

	setup(64, 4, 0);
	p = order_of(0, 4, &nb);
	send_order(p, nb, 4);
	CHECK_EQ_INT(wait_calls(4), 4);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	CHECK_EQ_INT(rd_budget_used(budget), 4 * FILE_SIZE);
	p = order_of(100, 103, &nb);
	send_order(p, nb, 3);
	CHECK_EQ_INT(wait_calls(7), 7);
	CHECK_EQ_INT(logged("k/f102"), 1);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	st = stats();
	CHECK_EQ_INT(st.orders, 2);
	CHECK_EQ_INT(st.paths, 3);
	CHECK_EQ_INT(st.wasted, 4);
	CHECK_EQ_INT(rd_budget_used(budget), 3 * FILE_SIZE);
	open_file(1);                       /* of the old order: nothing */
	CHECK_EQ_INT(stats().consumed, 0);
	open_file(101);
	st = stats();
	CHECK_EQ_INT(st.consumed, 1);
	CHECK_EQ_INT(st.hits, 1);
	teardown();
}

/* Missing paths are counted and skipped; files ahead cannot take are not
 * fetched but count as consumed when opened. */
static void t_missing_and_big_files_are_skipped(void)
{
	static const char order[] = "miss1\nf0\nbig1\nmiss2\nf1\n";
	struct hint_stats st;
	char *p = strdup(order);

	setup(64, 8, 0);
	send_order(p, strlen(order), 5);
	CHECK_EQ_INT(wait_calls(2), 2);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 2);
	CHECK_EQ_INT(logged("k/big1"), 0);
	st = stats();
	CHECK_EQ_INT(st.missing, 2);
	CHECK_EQ_INT(st.resolved, 3);
	CHECK_EQ_INT(st.fetched, 2);
	hint_opened(hint, "k/big1", 6);
	st = stats();
	CHECK_EQ_INT(st.consumed, 1);
	CHECK_EQ_INT(st.hits, 0);
	teardown();
}

/* The loader opens a file whose path is still resolving: when it resolves it
 * is settled as consumed, not fetched for nobody. */
static void t_open_before_resolution_is_not_fetched(void)
{
	static const char order[] = "slow0\nf1\n";
	struct hint_stats st;

	setup(64, 8, 0);
	gate_set(0);
	CHECK_EQ_INT(hint_set_order(hint, "", strdup(order), strlen(order), 2), 0);
	CHECK(gate_wait_blocked());
	hint_opened(hint, "k/slow0", 7);
	CHECK_EQ_INT(stats().consumed, 0);      /* not known yet */
	gate_set(1);
	CHECK(hint_wait_resolved(hint, 5000));
	CHECK_EQ_INT(wait_calls(1), 1);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 1);
	CHECK_EQ_INT(logged("k/slow0"), 0);
	CHECK_EQ_INT(logged("k/f1"), 1);
	st = stats();
	CHECK_EQ_INT(st.consumed, 1);
	CHECK_EQ_INT(st.fetched, 1);
	CHECK_EQ_INT(st.hits, 0);
	open_file(1);
	st = stats();
	CHECK_EQ_INT(st.consumed, 2);
	CHECK_EQ_INT(st.hits, 1);
	CHECK_EQ_INT(st.wasted, 0);
	teardown();
}

/* The order's path rule, exactly as the O verb applies it. */
static void t_order_check(void)
{
	static const struct {
		const char *payload;
		size_t count;
		int want;
	} cases[] = {
		{ "a\n", 1, 0 },
		{ "d/e/f.jpg\nx\n", 2, 0 },
		{ "..a/b..\n.x\n", 2, 0 },
		{ "a\nb\n", 1, -EINVAL },           /* count differs */
		{ "a", 1, -EINVAL },                /* not ended by '\n' */
		{ "/a\n", 1, -EINVAL },
		{ "a/../b\n", 1, -EINVAL },
		{ "..\n", 1, -EINVAL },
		{ "./a\n", 1, -EINVAL },
		{ "a/.\n", 1, -EINVAL },
		{ "a//b\n", 1, -EINVAL },
		{ "a/\n", 1, -EINVAL },
		{ "\n", 1, -EINVAL },
		{ "ok\n\nok\n", 3, -EINVAL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK_EQ_INT(hint_order_check(cases[i].payload, strlen(cases[i].payload),
					      cases[i].count), cases[i].want);
	CHECK_EQ_INT(hint_order_check("a\0b\n", 4, 1), -EINVAL);
	CHECK_EQ_INT(hint_order_check("a\n", 2, HINT_MAX_PATHS + 1), -E2BIG);
}


/* Two ranks of a distributed loader share the mount: each stream keeps its
 * own order and window; a new order or a clear of one leaves the other. */
static void t_streams_keep_their_own_orders(void)
{
	struct hint_stats st;
	size_t nb0, nb1, nb2;
	char *p0, *p1, *p2;

	setup(64, 4, 0);
	p0 = order_of(0, 10, &nb0);
	p1 = order_of(100, 110, &nb1);
	CHECK_EQ_INT(hint_set_order(hint, "rank0", p0, nb0, 10), 0);
	CHECK_EQ_INT(hint_set_order(hint, "rank1", p1, nb1, 10), 0);
	CHECK(hint_wait_resolved(hint, 5000));
	CHECK_EQ_INT(wait_calls(8), 8);
	usleep(20000);
	CHECK_EQ_INT(fake_fetch_calls(&fk), 8);
	CHECK_EQ_INT(logged("k/f3"), 1);
	CHECK_EQ_INT(logged("k/f103"), 1);
	CHECK_EQ_INT(logged("k/f4"), 0);
	st = stats();
	CHECK_EQ_INT(st.streams, 2);
	CHECK_EQ_INT(st.paths, 20);
	CHECK_EQ_INT(st.orders, 2);

	/* Each open moves its own stream's window only. */
	open_file(0);
	open_file(100);
	CHECK_EQ_INT(wait_calls(10), 10);
	CHECK_EQ_INT(logged("k/f4"), 1);
	CHECK_EQ_INT(logged("k/f104"), 1);
	st = stats();
	CHECK_EQ_INT(st.consumed, 2);
	CHECK_EQ_INT(st.hits, 2);

	/* rank0's next epoch: its unopened f1..f4 are dropped, rank1 untouched. */
	p2 = order_of(200, 204, &nb2);
	CHECK_EQ_INT(hint_set_order(hint, "rank0", p2, nb2, 4), 0);
	CHECK(hint_wait_resolved(hint, 5000));
	CHECK_EQ_INT(wait_calls(14), 14);
	st = stats();
	CHECK_EQ_INT(st.streams, 2);
	CHECK_EQ_INT(st.paths, 14);
	CHECK_EQ_INT(st.wasted, 4);
	open_file(101);
	CHECK_EQ_INT(stats().hits, 3);
	CHECK_EQ_INT(wait_calls(15), 15);
	CHECK_EQ_INT(logged("k/f105"), 1);

	/* Clearing rank1 drops f102..f105; "all" then drops rank0's four. */
	hint_clear(hint, "rank1");
	st = stats();
	CHECK_EQ_INT(st.streams, 1);
	CHECK_EQ_INT(st.wasted, 8);
	hint_clear(hint, NULL);
	st = stats();
	CHECK_EQ_INT(st.streams, 0);
	CHECK_EQ_INT(st.paths, 0);
	CHECK_EQ_INT(st.wasted, 12);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	/* Held: the three opened files (f0, f100, f101), never read here. */
	CHECK_EQ_INT(rd_budget_used(budget), 3 * FILE_SIZE);
	teardown();
}

/* Stream names: a short token or the default "". */
static void t_stream_names(void)
{
	char long_name[HINT_STREAM_MAX + 2];

	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	CHECK_EQ_INT(hint_stream_check(""), 0);
	CHECK_EQ_INT(hint_stream_check("rank-0.epoch_3"), 0);
	CHECK_EQ_INT(hint_stream_check("a b"), -EINVAL);
	CHECK_EQ_INT(hint_stream_check("a/b"), -EINVAL);
	CHECK_EQ_INT(hint_stream_check("\xe6\x95\xb0"), -EINVAL);
	CHECK_EQ_INT(hint_stream_check(long_name), -EINVAL);
	long_name[HINT_STREAM_MAX] = '\0';
	CHECK_EQ_INT(hint_stream_check(long_name), 0);
	setup(64, 4, 0);
	{
		char *p = strdup("f1\n");

		CHECK_EQ_INT(hint_set_order(hint, "a b", p, 3, 1), -EINVAL);
		free(p);                    /* still ours */
	}
	CHECK_EQ_INT(stats().streams, 0);
	teardown();
}

struct sync_fetch {
	struct fetch_req req;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	ssize_t result;
};

static void sync_done(struct fetch_req *req, ssize_t result)
{
	struct sync_fetch *s = req->done_arg;

	pthread_mutex_lock(&s->mu);
	s->done = 1;
	s->result = result;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* Read [off, off+len) of (key, etag, obj_size) through ahead's fetcher. */
static ssize_t fetch_through_ahead(const char *key, const char *etag, uint64_t obj_size,
				   uint64_t off, size_t len, char *buf)
{
	struct sync_fetch s = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

	s.req = (struct fetch_req){ .key = key, .key_len = strlen(key), .etag = etag,
				    .obj_size = obj_size, .off = off, .len = len, .buf = buf,
				    .done = sync_done, .done_arg = &s };
	if (fetcher_fetch(rd_ahead_fetcher(ahead), &s.req) < 0)
		return -EIO;
	pthread_mutex_lock(&s.mu);
	while (!s.done)
		pthread_cond_wait(&s.cv, &s.mu);
	pthread_mutex_unlock(&s.mu);
	return s.result;
}

/* A file larger than ahead takes whole gets its first window fetched; the
 * stream's first GET of that window is answered from it, the rest of the
 * file goes to the fetcher below as usual. */
static void t_large_file_gets_its_first_window(void)
{
	static const char order[] = "big1\nf2\n";
	char buf[2048];
	size_t big = 0;

	cfg_head = 1024;
	setup(64, 8, 0);
	CHECK_EQ_INT(hint_set_order(hint, "", strdup(order), strlen(order), 2), 0);
	CHECK(hint_wait_resolved(hint, 5000));
	CHECK_EQ_INT(wait_calls(2), 2);
	while (fake_fetch_pending(&fk))
		usleep(1000);
	pthread_mutex_lock(&fk.mu);
	for (size_t i = 0; i < fk.nlog; i++)
		if (strcmp(fk.log[i].key, "k/big1") == 0)
			big = i + 1;
	CHECK(big != 0);
	if (big) {
		CHECK_EQ_INT(fk.log[big - 1].off, 0);
		CHECK_EQ_INT(fk.log[big - 1].len, 1024);
		CHECK_EQ_INT(fk.log[big - 1].obj_size, MAX_FILE + 1);
	}
	pthread_mutex_unlock(&fk.mu);
	CHECK_EQ_INT(stats().fetched, 2);
	CHECK_EQ_INT(rd_budget_used(budget), 1024 + FILE_SIZE);

	hint_opened(hint, "k/big1", 6);
	CHECK_EQ_INT(stats().hits, 1);
	CHECK_EQ_INT(fetch_through_ahead("k/big1", "\"ebig1\"", MAX_FILE + 1, 0, 1024, buf),
		     1024);
	CHECK(fake_fetch_check(buf, "k/big1", "\"ebig1\"", 0, 1024));
	CHECK_EQ_INT(fake_fetch_calls(&fk), 2);         /* answered from the window */
	CHECK_EQ_INT(fetch_through_ahead("k/big1", "\"ebig1\"", MAX_FILE + 1, 1024, 2048, buf),
		     2048);
	CHECK(fake_fetch_check(buf, "k/big1", "\"ebig1\"", 1024, 2048));
	CHECK_EQ_INT(fake_fetch_calls(&fk), 3);         /* past it: below */
	/* The answer thread frees the window after the claim's done returned. */
	for (int i = 0; i < 5000 && rd_budget_used(budget) != FILE_SIZE; i++)
		usleep(1000);
	CHECK_EQ_INT(rd_budget_used(budget), FILE_SIZE);
	teardown();
}

/* An order is charged to the memory budget while it is held, and one that
 * would take more than half the budget is refused. */
static void t_order_is_charged_to_the_budget(void)
{
	struct hint_stats st;
	size_t nb = 0;
	char *p;

	cfg_charge = 1;
	setup(64, 8, 0);
	p = malloc(100 * 16);
	for (int i = 0; i < 100; i++)
		nb += (size_t)sprintf(p + nb, "miss%d\n", i);  /* nothing to fetch */
	CHECK_EQ_INT(hint_set_order(hint, "", p, nb, 100), 0);
	CHECK(hint_wait_resolved(hint, 5000));
	st = stats();
	CHECK(st.bytes > 2 * nb + 100 * 48);
	CHECK_EQ_INT(rd_budget_used(budget), st.bytes);
	CHECK_EQ_INT(st.missing, 100);
	hint_clear(hint, NULL);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	CHECK_EQ_INT(stats().bytes, 0);

	/* 300,000 bytes of payload, twice over, is more than half of 1 MiB. */
	nb = 300000;
	p = malloc(nb);
	for (size_t i = 0; i < nb; i += 3)
		memcpy(p + i, "a0\n", 3);
	CHECK_EQ_INT(hint_order_check(p, nb, nb / 3), 0);
	CHECK_EQ_INT(hint_set_order(hint, "", p, nb, nb / 3), -E2BIG);
	free(p);
	CHECK_EQ_INT(rd_budget_used(budget), 0);
	CHECK_EQ_INT(stats().streams, 0);
	teardown();
}

static const struct test tests[] = {
	TEST(t_window_advances_with_concurrent_out_of_order_opens),
	TEST(t_opened_file_is_read_from_the_prefetch),
	TEST(t_refused_files_are_retried_as_room_frees),
	TEST(t_clear_frees_everything),
	TEST(t_new_order_replaces_the_old),
	TEST(t_missing_and_big_files_are_skipped),
	TEST(t_open_before_resolution_is_not_fetched),
	TEST(t_order_check),
	TEST(t_streams_keep_their_own_orders),
	TEST(t_stream_names),
	TEST(t_large_file_gets_its_first_window),
	TEST(t_order_is_charged_to_the_budget),
	{ 0 },
};

int main(void)
{
	return harness_run("hint", tests);
}
