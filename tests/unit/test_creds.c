/*
 * test_creds — the chain core (order, errors, copy-out, refresh, invalidate,
 * threads) with fake providers and an injectable clock, plus the env provider
 * and the shared helpers.
 */
#include "harness.h"

#include "../../src/creds/creds_i.h"
#include "feedfs/creds.h"
#include "feedfs/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOUR_MS (3600LL * 1000)
#define T0      1700000000000LL    /* 2023-11-14T22:13:20Z */
#define RETRY_MAX_FOR_TEST 60000

/* ---- a fake clock ---------------------------------------------------------- */

static _Atomic int64_t fake_now = T0;

static int64_t fake_clock(void *arg)
{
	return atomic_load(&fake_now);
}

/* ---- a programmable fake provider ---------------------------------------- */

struct fake {
	const char *name;
	int rc;                   /* what load returns */
	int64_t life_ms;          /* 0: static credentials */
	_Atomic int loads;
	_Atomic int destroyed;
	_Atomic int gate_closed;  /* load spins while set (a slow network) */
	_Atomic int in_load;
	int serial;               /* bumped per successful load: AK<serial>/SK<serial> */
};

static int fake_load(void *state, struct s3_creds *out)
{
	struct fake *f = state;
	char ak[32], sk[32], tok[32];

	atomic_fetch_add(&f->loads, 1);
	atomic_store(&f->in_load, 1);
	while (atomic_load(&f->gate_closed)) {
		struct timespec ts = { 0, 1000000L };
		nanosleep(&ts, NULL);
	}
	atomic_store(&f->in_load, 0);
	if (f->rc)
		return f->rc;
	f->serial++;
	snprintf(ak, sizeof(ak), "AKIDFAKE%08d", f->serial);
	snprintf(sk, sizeof(sk), "SK%d", f->serial);
	snprintf(tok, sizeof(tok), "TOK%d", f->serial);
	return creds_fill(out, ak, sk, f->life_ms ? tok : NULL,
			  f->life_ms ? atomic_load(&fake_now) + f->life_ms : 0);
}

static void fake_destroy(void *state)
{
	atomic_fetch_add(&((struct fake *)state)->destroyed, 1);
}

static const char *fake_explain(void *state)
{
	return ((struct fake *)state)->rc == -ENOENT ? "fake says nothing here" : "fake broke";
}

static const struct creds_provider_ops fake_ops[3] = {
	{ .name = "fake-a", .load = fake_load, .destroy = fake_destroy, .explain = fake_explain },
	{ .name = "fake-b", .load = fake_load, .destroy = fake_destroy, .explain = fake_explain },
	{ .name = "fake-c", .load = fake_load, .destroy = fake_destroy, .explain = fake_explain },
};

static int new_fake_chain(struct fake *f, size_t n, int background, struct creds_chain **out,
			  char *msg, size_t msg_len)
{
	const struct creds_provider_ops *ops[3];
	void *states[3];
	struct creds_chain_config cfg = {
		.ops = ops, .states = states, .n = n, .wall_ms = fake_clock,
		.background = background, .retry_min_ms = 1000,
	};

	for (size_t i = 0; i < n; i++) {
		ops[i] = &fake_ops[i];
		states[i] = &f[i];
	}
	return creds_chain_new_config(&cfg, out, msg, msg_len);
}

/* ---- env provider ---------------------------------------------------------- */

static const char *const all_env[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SECURITY_TOKEN",
	"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
	"ALIBABA_CLOUD_SECURITY_TOKEN", NULL,
};

static void clear_env(void)
{
	for (int i = 0; all_env[i]; i++)
		unsetenv(all_env[i]);
}

static void t_env_table(void)
{
	static const struct {
		const char *set[8];   /* NAME=value pairs */
		int rc;
		const char *ak, *sk, *tok;
	} cases[] = {
		{ { NULL }, -ENOENT, NULL, NULL, NULL },
		{ { "AWS_ACCESS_KEY_ID=AK1", "AWS_SECRET_ACCESS_KEY=SK1", NULL }, 0, "AK1", "SK1", NULL },
		{ { "AWS_ACCESS_KEY_ID=AK1", "AWS_SECRET_ACCESS_KEY=SK1", "AWS_SESSION_TOKEN=T1", NULL },
		  0, "AK1", "SK1", "T1" },
		{ { "AWS_ACCESS_KEY_ID=AK1", NULL }, -EINVAL, NULL, NULL, NULL },
		{ { "AWS_SECRET_ACCESS_KEY=SK1", NULL }, -EINVAL, NULL, NULL, NULL },
		{ { "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", NULL }, -ENOENT, NULL, NULL, NULL },
		{ { "OSS_ACCESS_KEY_ID=OA", "OSS_ACCESS_KEY_SECRET=OS", "OSS_SECURITY_TOKEN=OT", NULL },
		  0, "OA", "OS", "OT" },
		{ { "ALIBABA_CLOUD_ACCESS_KEY_ID=LA", "ALIBABA_CLOUD_ACCESS_KEY_SECRET=LS", NULL },
		  0, "LA", "LS", NULL },
		/* AWS first, then OSS, then ALIBABA_CLOUD. */
		{ { "OSS_ACCESS_KEY_ID=OA", "OSS_ACCESS_KEY_SECRET=OS",
		    "AWS_ACCESS_KEY_ID=AK1", "AWS_SECRET_ACCESS_KEY=SK1", NULL }, 0, "AK1", "SK1", NULL },
		{ { "ALIBABA_CLOUD_ACCESS_KEY_ID=LA", "ALIBABA_CLOUD_ACCESS_KEY_SECRET=LS",
		    "OSS_ACCESS_KEY_ID=OA", "OSS_ACCESS_KEY_SECRET=OS", NULL }, 0, "OA", "OS", NULL },
		/* The token of another family is not borrowed. */
		{ { "OSS_ACCESS_KEY_ID=OA", "OSS_ACCESS_KEY_SECRET=OS", "AWS_SESSION_TOKEN=T1", NULL },
		  0, "OA", "OS", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_creds cr;
		void *st;
		int rc;

		clear_env();
		memset(&cr, 0, sizeof(cr));   /* a failed load leaves it untouched */
		for (int j = 0; cases[i].set[j]; j++)
			putenv((char *)cases[i].set[j]);
		CHECK_EQ_INT(creds_env_new(NULL, &st), 0);
		rc = creds_env_ops.load(st, &cr);
		if (rc != cases[i].rc)
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d, expected %d", i, rc,
				     cases[i].rc);
		if (rc == 0) {
			CHECK_STR(cr.access_key_id, cases[i].ak);
			CHECK_STR(cr.secret_access_key, cases[i].sk);
			if (cases[i].tok)
				CHECK_STR(cr.session_token, cases[i].tok);
			else
				CHECK(cr.session_token == NULL);
			CHECK_EQ_INT(cr.expires_wall_ms, 0);
		} else {
			CHECK(creds_env_ops.explain(st)[0] != '\0');
		}
		creds_cleanup(&cr);
		creds_env_ops.destroy(st);
	}
	clear_env();
}

static void t_chain_env_and_anonymous(void)
{
	struct creds_options o = { 0 };
	struct creds_chain *c;
	struct s3_creds cr;
	char msg[512], line[256];

	clear_env();
	o.provider = "env";
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), -ENOENT);
	CHECK(c == NULL);
	CHECK(strstr(msg, "no credentials found; tried: env (") != NULL);
	CHECK(strstr(msg, "--no-sign-request") != NULL);

	setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 1);
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), 0);
	CHECK_STR(creds_chain_source(c), "env");
	CHECK_EQ_INT(creds_chain_anonymous(c), 0);
	CHECK_EQ_INT(creds_get(c, &cr), 0);
	CHECK_STR(cr.access_key_id, "AKIAIOSFODNN7EXAMPLE");
	CHECK_STR(cr.secret_access_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY");
	creds_cleanup(&cr);
	CHECK(cr.access_key_id == NULL && cr.secret_access_key == NULL);
	creds_chain_describe(c, line, sizeof(line));
	CHECK(strstr(line, "env: AWS_ACCESS_KEY_ID") == line);
	CHECK(strstr(line, "****MPLE") != NULL);
	CHECK(strstr(line, "AKIAIOSFODNN7EXAMPLE") == NULL);
	CHECK(strstr(line, "wJalr") == NULL);
	CHECK(strstr(line, "static") != NULL);
	/* A reload of static credentials re-reads the environment. */
	setenv("AWS_ACCESS_KEY_ID", "AKIAROTATED000000000", 1);
	CHECK_EQ_INT(creds_invalidate(c), 0);   /* coalesced: loaded < 1 s ago */
	usleep(1100 * 1000);
	CHECK_EQ_INT(creds_invalidate(c), 0);
	CHECK_EQ_INT(creds_get(c, &cr), 0);
	CHECK_STR(cr.access_key_id, "AKIAROTATED000000000");
	creds_cleanup(&cr);
	creds_chain_destroy(c);

	/* Half-set environment: the chain stops and says why. */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not") != NULL);
	clear_env();

	o.anonymous = 1;
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(creds_chain_anonymous(c), 1);
	CHECK_STR(creds_chain_source(c), "anonymous");
	CHECK_EQ_INT(creds_get(c, &cr), -ENOKEY);
	CHECK_EQ_INT(creds_invalidate(c), 0);
	creds_chain_destroy(c);

	o.anonymous = 0;
	o.provider = "no-such-provider";
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), -EINVAL);
	CHECK(strstr(msg, "unknown credentials provider") != NULL);
}

/* ---- chain order ---------------------------------------------------------- */

static void t_chain_order(void)
{
	static const struct {
		int rc[3];
		int want_rc;
		const char *winner;
		const char *msg_has;
	} cases[] = {
		{ { 0, 0, 0 }, 0, "fake-a", "" },
		{ { -ENOENT, 0, 0 }, 0, "fake-b", "" },
		{ { -ENOENT, -ENOENT, 0 }, 0, "fake-c", "" },
		{ { -ENOENT, -ENOENT, -ENOENT }, -ENOENT, NULL,
		  "no credentials found; tried: fake-a (fake says nothing here); fake-b (fake says "
		  "nothing here); fake-c (fake says nothing here)" },
		{ { -ENOENT, -EACCES, 0 }, -EACCES, NULL, "credentials from fake-b failed: fake broke" },
		{ { -EIO, 0, 0 }, -EIO, NULL, "credentials from fake-a failed" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fake f[3] = { { 0 } };
		struct creds_chain *c = NULL;
		char msg[512];
		int rc;

		for (int j = 0; j < 3; j++)
			f[j].rc = cases[i].rc[j];
		rc = new_fake_chain(f, 3, 0, &c, msg, sizeof(msg));
		CHECK_EQ_INT(rc, cases[i].want_rc);
		if (rc == 0) {
			CHECK_STR(creds_chain_source(c), cases[i].winner);
			CHECK(msg[0] == '\0');
			/* Providers after the winner are never asked; all but the
			 * winner are destroyed at once. */
			int w = cases[i].winner[5] - 'a';
			for (int j = 0; j < 3; j++) {
				CHECK_EQ_INT(f[j].loads, j <= w ? 1 : 0);
				CHECK_EQ_INT(f[j].destroyed, j == w ? 0 : 1);
			}
			creds_chain_destroy(c);
			CHECK_EQ_INT(f[w].destroyed, 1);
		} else {
			CHECK(c == NULL);
			if (!strstr(msg, cases[i].msg_has))
				harness_fail(__FILE__, __LINE__, "case %zu: msg \"%s\"", i, msg);
			for (int j = 0; j < 3; j++)
				CHECK_EQ_INT(f[j].destroyed, 1);
		}
	}
}

/* ---- refresh --------------------------------------------------------------- */

static void get_ak(struct creds_chain *c, char *ak, size_t n)
{
	struct s3_creds cr;

	ak[0] = '\0';
	if (creds_get(c, &cr) == 0)
		snprintf(ak, n, "%s", cr.access_key_id);
	creds_cleanup(&cr);
}

/* Refresh-on-get: before the window nothing happens; in the window the first
 * caller reloads; every caller gets valid credentials throughout. */
static void t_refresh_on_get(void)
{
	struct fake f = { .life_ms = HOUR_MS };
	struct creds_chain *c;
	char msg[256], ak[64];
	uint64_t refreshes, failures;

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, 0, &c, msg, sizeof(msg)), 0);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000001");

	/* One ms before the window: still the first. */
	atomic_store(&fake_now, T0 + HOUR_MS - CREDS_REFRESH_MARGIN_MS - 1);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000001");
	CHECK_EQ_INT(f.loads, 1);

	/* In the window: reloaded once. */
	atomic_store(&fake_now, T0 + HOUR_MS - CREDS_REFRESH_MARGIN_MS);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	get_ak(c, ak, sizeof(ak));
	CHECK_EQ_INT(f.loads, 2);

	/* A failing refresh keeps the current credentials and backs off. */
	f.rc = -EIO;
	atomic_store(&fake_now, T0 + 2 * HOUR_MS - 2 * CREDS_REFRESH_MARGIN_MS);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	CHECK_EQ_INT(f.loads, 3);
	get_ak(c, ak, sizeof(ak));           /* inside the back-off: no new load */
	CHECK_EQ_INT(f.loads, 3);
	atomic_fetch_add(&fake_now, 1000);   /* back-off 1 s passed */
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	CHECK_EQ_INT(f.loads, 4);
	atomic_fetch_add(&fake_now, 1500);   /* back-off doubled to 2 s: not yet */
	get_ak(c, ak, sizeof(ak));
	CHECK_EQ_INT(f.loads, 4);

	/* Expired and the source still fails: now, and only now, get fails. */
	atomic_store(&fake_now, T0 + 2 * HOUR_MS - CREDS_REFRESH_MARGIN_MS);
	{
		struct s3_creds cr;
		CHECK_EQ_INT(creds_get(c, &cr), -EIO);
		CHECK(cr.access_key_id == NULL);
	}
	/* The source recovers. */
	f.rc = 0;
	atomic_fetch_add(&fake_now, RETRY_MAX_FOR_TEST);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000003");
	creds_chain_counters(c, &refreshes, &failures);
	CHECK(refreshes >= 4);
	CHECK(failures >= 3);
	creds_chain_destroy(c);
}

/* Short-lived credentials refresh at half their life, not 5 min early. */
static void t_refresh_short_lived(void)
{
	struct fake f = { .life_ms = 60 * 1000 };
	struct creds_chain *c;
	char msg[256], ak[64];

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, 0, &c, msg, sizeof(msg)), 0);
	atomic_store(&fake_now, T0 + 29999);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000001");
	atomic_store(&fake_now, T0 + 30000);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	creds_chain_destroy(c);
}

/* A source that keeps handing out the same near-expiry credentials is not
 * asked in a loop. */
static void t_refresh_same_creds_no_loop(void)
{
	struct fake f = { .life_ms = 60 * 1000 };
	struct creds_chain *c;
	char msg[256], ak[64];

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, 0, &c, msg, sizeof(msg)), 0);
	f.life_ms = 10 * 1000;   /* from now on, already inside the window */
	atomic_store(&fake_now, T0 + 30000);
	for (int i = 0; i < 100; i++)
		get_ak(c, ak, sizeof(ak));
	CHECK_EQ_INT(f.loads, 2);
	creds_chain_destroy(c);
}

/* Background refresher: callers never wait for a slow refresh. */
static void t_refresh_background_no_wait(void)
{
	struct fake f = { .life_ms = HOUR_MS };
	struct creds_chain *c;
	char msg[256], ak[64];

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, 1, &c, msg, sizeof(msg)), 0);
	atomic_store(&f.gate_closed, 1);
	atomic_store(&fake_now, T0 + HOUR_MS - 60 * 1000);
	get_ak(c, ak, sizeof(ak));          /* wakes the refresher */
	CHECK_STR(ak, "AKIDFAKE00000001");
	for (int i = 0; i < 200 && !atomic_load(&f.in_load); i++)
		usleep(1000);
	CHECK_EQ_INT(atomic_load(&f.in_load), 1);
	/* The refresh hangs; callers still get the old copy at once. */
	for (int i = 0; i < 1000; i++) {
		get_ak(c, ak, sizeof(ak));
		CHECK_STR(ak, "AKIDFAKE00000001");
	}
	atomic_store(&f.gate_closed, 0);
	CHECK_EQ_INT(creds_chain_wait_idle(c, 2000), 0);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	creds_chain_destroy(c);
}

static void t_invalidate(void)
{
	struct fake f = { .life_ms = HOUR_MS };
	struct creds_chain *c;
	char msg[256], ak[64];

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, 0, &c, msg, sizeof(msg)), 0);
	/* Right after a load, a burst of 403s coalesces onto that load. */
	CHECK_EQ_INT(creds_invalidate(c), 0);
	CHECK_EQ_INT(f.loads, 1);
	atomic_fetch_add(&fake_now, 1000);
	CHECK_EQ_INT(creds_invalidate(c), 0);
	CHECK_EQ_INT(f.loads, 2);
	CHECK_EQ_INT(creds_invalidate(c), 0);
	CHECK_EQ_INT(f.loads, 2);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	/* A failed forced reload reports the error and keeps the old copy. */
	f.rc = -ECONNREFUSED;
	atomic_fetch_add(&fake_now, 1000);
	CHECK_EQ_INT(creds_invalidate(c), -ECONNREFUSED);
	get_ak(c, ak, sizeof(ak));
	CHECK_STR(ak, "AKIDFAKE00000002");
	creds_chain_destroy(c);
}

/* ---- many threads, a fast clock, zero failures ------------------------------- */

struct hammer {
	struct creds_chain *c;
	_Atomic int stop;
	_Atomic long gets, failures, torn, expired;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;

	while (!atomic_load(&h->stop)) {
		struct s3_creds cr;
		int64_t before = atomic_load(&fake_now);
		int rc = creds_get(h->c, &cr);

		atomic_fetch_add(&h->gets, 1);
		if (rc) {
			atomic_fetch_add(&h->failures, 1);
			continue;
		}
		/* AK and SK come from the same load. */
		if (atoi(cr.access_key_id + 8) != atoi(cr.secret_access_key + 2) ||
		    atoi(cr.secret_access_key + 2) != atoi(cr.session_token + 3))
			atomic_fetch_add(&h->torn, 1);
		if (cr.expires_wall_ms <= before)
			atomic_fetch_add(&h->expired, 1);
		creds_cleanup(&cr);
	}
	return NULL;
}

static void hammer_run(int background)
{
	struct fake f = { .life_ms = 1000 };
	struct hammer h = { 0 };
	pthread_t th[6];
	char msg[256];
	uint64_t refreshes, failures;

	atomic_store(&fake_now, T0);
	CHECK_EQ_INT(new_fake_chain(&f, 1, background, &h.c, msg, sizeof(msg)), 0);
	for (int i = 0; i < 6; i++)
		pthread_create(&th[i], NULL, hammer_main, &h);
	/* 400 steps of 50 ms fake time = 20 credential lifetimes. A step never
	 * jumps past the refresh window, as real time would not. */
	for (int i = 0; i < 400; i++) {
		atomic_fetch_add(&fake_now, 50);
		usleep(500);
		/* Real loads take a sliver of a credential's life: do not let
		 * the fake clock outrun one that is in flight. */
		creds_chain_wait_idle(h.c, 1000);
	}
	atomic_store(&h.stop, 1);
	for (int i = 0; i < 6; i++)
		pthread_join(th[i], NULL);
	creds_chain_counters(h.c, &refreshes, &failures);
	CHECK(h.gets > 1000);
	CHECK_EQ_INT(h.failures, 0);
	CHECK_EQ_INT(h.torn, 0);
	CHECK_EQ_INT(h.expired, 0);
	CHECK_EQ_INT(failures, 0);
	CHECK(refreshes >= 19);
	creds_chain_destroy(h.c);
}

static void t_threads_refresh_on_get(void) { hammer_run(0); }
static void t_threads_background(void) { hammer_run(1); }

static const struct test tests[] = {
	TEST(t_env_table),
	TEST(t_chain_env_and_anonymous),
	TEST(t_chain_order),
	TEST(t_refresh_on_get),
	TEST(t_refresh_short_lived),
	TEST(t_refresh_same_creds_no_loop),
	TEST(t_refresh_background_no_wait),
	TEST(t_invalidate),
	TEST(t_threads_refresh_on_get),
	TEST(t_threads_background),
	{ 0 },
};

int main(void)
{
	log_set_level(LOG_ERR);
	return harness_run("creds", tests);
}
