/* Unit tests for the read-buffer budget (src/prefetch/budget.c). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "feedfs/prefetch.h"
#include "../../src/prefetch/prefetch_i.h"
#include "harness.h"

/* A hung test fails the run instead of hanging CI. */
static void wd_fire(int sig)
{
	static const char m[] = "  FAIL watchdog: budget test hung (deadlock?)\n";

	(void)sig;
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(3);
	_exit(3);
}

static void wd_arm(unsigned s)
{
	signal(SIGALRM, wd_fire);
	alarm(s);
}

static void t_new_rejects_zero(void)
{
	struct rd_budget *b = NULL;

	CHECK_EQ_INT(rd_budget_new(0, &b), -EINVAL);
	CHECK_EQ_INT(rd_budget_new(100, &b), 0);
	CHECK_EQ_INT(rd_budget_max(b), 100);
	rd_budget_destroy(b);
	rd_budget_destroy(NULL);
}

/* One table: a sequence of take/give steps and what each must return. */
struct step { char op; uint64_t n; int wait; int want; uint64_t used; };

static void t_take_give_table(void)
{
	static const struct step steps[] = {
		{ 't', 0, 0, 0, 0 },
		{ 't', 60, 0, 0, 60 },
		{ 't', 40, 0, 0, 100 },
		{ 't', 1, 0, -EAGAIN, 100 },
		{ 't', 101, 1, -EINVAL, 100 },     /* never satisfiable: no wait */
		{ 'g', 60, 0, 0, 40 },
		{ 't', 60, 1, 0, 100 },            /* fits: wait does not block */
		{ 'g', 100, 0, 0, 0 },
		{ 't', 100, 0, 0, 100 },
		{ 'g', 100, 0, 0, 0 },
	};
	struct rd_budget *b;

	wd_arm(10);
	CHECK_EQ_INT(rd_budget_new(100, &b), 0);
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		const struct step *s = &steps[i];

		if (s->op == 't')
			CHECK_EQ_INT(rd_budget_take(b, s->n, s->wait), s->want);
		else
			rd_budget_give(b, s->n);
		CHECK_EQ_INT(rd_budget_used(b), s->used);
	}
	CHECK_EQ_INT(rd_budget_peak(b), 100);
	rd_budget_destroy(b);
	alarm(0);
}

/* take_within: only while the charged total stays within the limit (never
 * beyond max), without waiting. */
static void t_take_within(void)
{
	struct rd_budget *b;

	wd_arm(10);
	CHECK_EQ_INT(rd_budget_new(100, &b), 0);
	CHECK_EQ_INT(rd_budget_take_within(b, 30, 40), 0);
	CHECK_EQ_INT(rd_budget_take_within(b, 20, 40), -EAGAIN);   /* 50 > 40 */
	CHECK_EQ_INT(rd_budget_take_within(b, 10, 40), 0);         /* exactly 40 */
	CHECK_EQ_INT(rd_budget_take(b, 60, 0), 0);                 /* demand: up to max */
	CHECK_EQ_INT(rd_budget_take_within(b, 1, 1000), -EAGAIN);  /* limit > max: max */
	CHECK_EQ_INT(rd_budget_used(b), 100);
	rd_budget_give(b, 100);
	rd_budget_destroy(b);
	alarm(0);
}

struct waiter { struct rd_budget *b; uint64_t n; atomic_int done; };

static void *waiter_main(void *arg)
{
	struct waiter *w = arg;

	if (rd_budget_take(w->b, w->n, 1) == 0)
		atomic_store(&w->done, 1);
	return NULL;
}

static void t_wait_woken_by_give(void)
{
	struct rd_budget *b;
	struct waiter w = { 0 };
	pthread_t th;

	wd_arm(10);
	CHECK_EQ_INT(rd_budget_new(10, &b), 0);
	CHECK_EQ_INT(rd_budget_take(b, 8, 0), 0);
	w.b = b;
	w.n = 5;
	pthread_create(&th, NULL, waiter_main, &w);
	usleep(50 * 1000);
	CHECK_EQ_INT(atomic_load(&w.done), 0);     /* still short by 3 */
	rd_budget_give(b, 8);
	pthread_join(th, NULL);
	CHECK_EQ_INT(atomic_load(&w.done), 1);
	CHECK_EQ_INT(rd_budget_used(b), 5);
	rd_budget_give(b, 5);
	rd_budget_destroy(b);
	alarm(0);
}

/* A client holding idle bytes: a blocked waiter must get them via reclaim. */
struct holder { struct rd_budget_client c; uint64_t idle; int calls; };

static uint64_t holder_reclaim(struct rd_budget_client *c, uint64_t need)
{
	struct holder *h = (struct holder *)c;
	uint64_t n = need < h->idle ? need : h->idle;

	h->calls++;
	h->idle -= n;
	return n;
}

static void t_wait_reclaims_idle(void)
{
	struct rd_budget *b;
	struct holder h = { .c.reclaim = holder_reclaim };

	wd_arm(10);
	CHECK_EQ_INT(rd_budget_new(64, &b), 0);
	rd_budget_register(b, &h.c);
	CHECK_EQ_INT(rd_budget_take(b, 64, 0), 0);
	h.idle = 64;
	/* wait == 0 never reclaims: readahead must not evict others. */
	CHECK_EQ_INT(rd_budget_take(b, 16, 0), -EAGAIN);
	CHECK_EQ_INT(h.calls, 0);
	CHECK_EQ_INT(rd_budget_take(b, 16, 1), 0);
	CHECK(h.calls >= 1);
	CHECK_EQ_INT(h.idle, 48);                  /* took only what was needed */
	CHECK_EQ_INT(rd_budget_used(b), 64);
	CHECK_EQ_INT(rd_budget_peak(b), 64);
	rd_budget_unregister(b, &h.c);
	rd_budget_give(b, h.idle);                 /* what the holder kept */
	rd_budget_give(b, 16);                     /* what the waiter got */
	CHECK_EQ_INT(rd_budget_used(b), 0);
	rd_budget_destroy(b);
	alarm(0);
}

/* Many threads take and give at random: used never exceeds max. */
struct churn { struct rd_budget *b; unsigned seed; atomic_int over; };

static void *churn_main(void *arg)
{
	struct churn *c = arg;
	unsigned seed = c->seed;

	for (int i = 0; i < 20000; i++) {
		uint64_t n = 1 + rand_r(&seed) % 300;

		if (rd_budget_take(c->b, n, rand_r(&seed) & 1) == 0) {
			if (rd_budget_used(c->b) > 1000)
				atomic_store(&c->over, 1);
			rd_budget_give(c->b, n);
		}
	}
	return NULL;
}

static void t_concurrent_never_over(void)
{
	struct rd_budget *b;
	struct churn c[8];
	pthread_t th[8];

	wd_arm(60);
	CHECK_EQ_INT(rd_budget_new(1000, &b), 0);
	for (int i = 0; i < 8; i++) {
		c[i].b = b;
		c[i].seed = 1234u + (unsigned)i;
		atomic_init(&c[i].over, 0);
		pthread_create(&th[i], NULL, churn_main, &c[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(atomic_load(&c[i].over), 0);
	}
	CHECK(rd_budget_peak(b) <= 1000);
	CHECK_EQ_INT(rd_budget_used(b), 0);
	rd_budget_destroy(b);
	alarm(0);
}

static const struct test tests[] = {
	TEST(t_new_rejects_zero),
	TEST(t_take_give_table),
	TEST(t_take_within),
	TEST(t_wait_woken_by_give),
	TEST(t_wait_reclaims_idle),
	TEST(t_concurrent_never_over),
	{ 0 },
};

int main(void)
{
	return harness_run("budget", tests);
}
