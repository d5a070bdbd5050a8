/*
 * chain — ordered credential providers, one winner, copy-out under a mutex,
 * refresh of temporary credentials without ever failing a caller meanwhile.
 *
 * DESIGN
 * creds_chain_new() asks each provider in order; the first that loads wins and
 * is the only one kept (the others are destroyed at once). Later loads go to
 * the winner only: a chain never silently switches identity.
 *
 * State is split: the fields above `mu` are set before the chain is handed out
 * and read-only afterwards; the fields below are guarded by `mu`.
 * Lock order: `mu` is a leaf. It is never held across a provider load, which
 * may do file or network I/O for seconds.
 *
 * Loads are single-flight: `loading` marks the one in progress and every other
 * thread keeps copying the current credentials while it runs. When temporary
 * credentials come within the refresh window (CREDS_REFRESH_MARGIN_MS, or half
 * their lifetime when they live shorter than twice that) a refresh is due:
 *   - with a refresher thread (the default when the winner hands out temporary
 *     credentials), creds_get() only wakes it and returns the current copy;
 *   - without one (static credentials that later turn temporary, or tests),
 *     the first caller to notice loads inline while the rest keep the old copy.
 * A failed refresh keeps the old credentials and retries with a doubling
 * back-off (1 s .. 60 s). Only once they have actually expired does creds_get()
 * wait for a load, and fail if it fails.
 *
 * creds_invalidate() (a 403 ExpiredToken) forces one load; a burst of callers
 * coalesces onto the load in flight or on one that finished within 1 s.
 */
#include "creds_i.h"

#include "feedfs/log.h"
#include "feedfs/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RETRY_MAX_MS       60000
#define INVALIDATE_COALESCE_MS 1000
#define THREAD_MAX_SLEEP_MS 60000

struct creds_chain {
	/* Read-only after creds_chain_new(): any thread. */
	int anonymous;
	const struct creds_provider_ops *ops;   /* the winner; NULL when anonymous */
	void *state;
	creds_clock_fn wall_ms;
	void *clock_arg;
	int background;
	int64_t margin_ms;
	int64_t retry_min_ms;

	/* Guarded by mu (a leaf lock: never held across a load). */
	pthread_mutex_t mu;
	pthread_cond_t wake;        /* refresher: a load is wanted, or stop */
	pthread_cond_t done;        /* a load finished (gen changed) */
	struct s3_creds cur;
	char detail[CREDS_REASON_MAX]; /* ops->detail() of the load that produced cur */
	int64_t cur_obtained_ms;    /* wall time of the load that produced cur */
	int loading;                /* a load is in flight (single flight) */
	uint64_t gen;               /* loads completed, successful or not */
	int last_err;               /* result of the last load */
	int64_t retry_at_ms;        /* no automatic load before this (back-off) */
	int64_t backoff_ms;
	int64_t last_load_ms;       /* wall time the last load finished */
	int want_load;              /* invalidate asked the refresher for a load */
	int stop;
	int thread_started;
	pthread_t thread;
	uint64_t refreshes, failures;
};

static int64_t chain_now(const struct creds_chain *c)
{
	return c->wall_ms ? c->wall_ms(c->clock_arg) : util_wall_ms();
}

static const char *prov_explain(const struct creds_provider_ops *ops, void *state)
{
	const char *s = ops->explain ? ops->explain(state) : NULL;

	return s && *s ? s : "nothing found";
}

/* When cur should be replaced: margin before expiry, or half the lifetime
 * for credentials that live shorter than twice the margin. INT64_MAX: never. */
static int64_t refresh_at_locked(const struct creds_chain *c)
{
	int64_t life, margin;

	if (!c->cur.expires_wall_ms)
		return INT64_MAX;
	life = c->cur.expires_wall_ms - c->cur_obtained_ms;
	margin = c->margin_ms;
	if (life > 0 && life / 2 < margin)
		margin = life / 2;
	return c->cur.expires_wall_ms - margin;
}

static int due_locked(const struct creds_chain *c, int64_t now)
{
	return now >= refresh_at_locked(c) && now >= c->retry_at_ms;
}

static int expired_locked(const struct creds_chain *c, int64_t now)
{
	return c->cur.expires_wall_ms && now >= c->cur.expires_wall_ms;
}

/*
 * One load from the winner. Called with mu held and !loading; drops mu for the
 * load and returns with mu held. Records the outcome in last_err/retry_at.
 */
static void load_locked(struct creds_chain *c, int initial)
{
	struct s3_creds fresh = { 0 };
	int64_t now;
	int rc;

	c->loading = 1;
	pthread_mutex_unlock(&c->mu);

	rc = c->ops->load(c->state, &fresh);
	if (rc == 0 && (!fresh.access_key_id || !*fresh.access_key_id ||
			!fresh.secret_access_key || !*fresh.secret_access_key))
		rc = -EINVAL;

	pthread_mutex_lock(&c->mu);
	now = chain_now(c);
	if (!initial)
		c->refreshes++;
	if (rc == 0 && fresh.expires_wall_ms && fresh.expires_wall_ms <= now) {
		log_warn(CREDS_TAG, "%s: the source handed out credentials that have "
			 "already expired (check the clock)", c->ops->name);
		rc = -EKEYEXPIRED;
	}
	if (rc == 0) {
		struct s3_creds old = c->cur;

		c->cur = fresh;
		c->cur_obtained_ms = now;
		/* Still inside the single flight: the provider state is quiet. */
		snprintf(c->detail, sizeof(c->detail), "%s",
			 c->ops->detail && c->ops->detail(c->state) ? c->ops->detail(c->state) : "");
		memset(&fresh, 0, sizeof(fresh));
		creds_cleanup(&old);
		c->backoff_ms = 0;
		c->retry_at_ms = 0;
		/* A source that still hands out the same near-expiry credentials
		 * (IMDS rotates them late) must not be asked again in a loop. */
		if (now >= refresh_at_locked(c)) {
			c->backoff_ms = c->retry_min_ms;
			c->retry_at_ms = now + c->backoff_ms;
			if (c->retry_at_ms > c->cur.expires_wall_ms)
				c->retry_at_ms = c->cur.expires_wall_ms;
		}
		if (!initial)
			log_info(CREDS_TAG, "%s: credentials refreshed%s", c->ops->name,
				 c->cur.expires_wall_ms ? "" : " (static)");
	} else {
		creds_cleanup(&fresh);
		c->failures++;
		c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : c->retry_min_ms;
		if (c->backoff_ms > RETRY_MAX_MS)
			c->backoff_ms = RETRY_MAX_MS;
		c->retry_at_ms = now + c->backoff_ms;
		if (!initial)
			log_warn(CREDS_TAG, "%s: refresh failed: %s (%s); %s, retry in %lld ms",
				 c->ops->name, prov_explain(c->ops, c->state), strerror(-rc),
				 expired_locked(c, now) ? "credentials have expired" :
				 "keeping the current credentials",
				 (long long)c->backoff_ms);
	}
	c->last_err = rc;
	c->last_load_ms = now;
	c->loading = 0;
	c->gen++;
	pthread_cond_broadcast(&c->done);
}

static void wait_load_locked(struct creds_chain *c)
{
	uint64_t gen = c->gen;

	while (c->loading && c->gen == gen)
		pthread_cond_wait(&c->done, &c->mu);
}

static void *refresher_main(void *arg)
{
	struct creds_chain *c = arg;

	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		int64_t now = chain_now(c), next, wait_ms;

		if (!c->loading && (c->want_load || due_locked(c, now))) {
			c->want_load = 0;
			load_locked(c, 0);
			continue;
		}
		next = refresh_at_locked(c);
		if (next < c->retry_at_ms)
			next = c->retry_at_ms;
		wait_ms = next == INT64_MAX ? THREAD_MAX_SLEEP_MS : next - now;
		if (wait_ms < 10)
			wait_ms = 10;
		if (wait_ms > THREAD_MAX_SLEEP_MS)
			wait_ms = THREAD_MAX_SLEEP_MS;
		util_cond_wait_ms(&c->wake, &c->mu, wait_ms);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Ask for a refresh: wake the refresher, or load inline (single flight). */
static void kick_locked(struct creds_chain *c)
{
	if (c->loading)
		return;
	if (c->thread_started)
		pthread_cond_signal(&c->wake);
	else
		load_locked(c, 0);
}

int creds_get(struct creds_chain *c, struct s3_creds *out)
{
	int64_t now;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (c->anonymous)
		return -ENOKEY;
	pthread_mutex_lock(&c->mu);
	now = chain_now(c);
	if (due_locked(c, now) && !expired_locked(c, now)) {
		kick_locked(c);
		now = chain_now(c);
	}
	if (expired_locked(c, now)) {
		/* Nothing valid to hand out: wait for a load, starting one if
		 * none is in flight and the back-off allows. */
		if (c->loading)
			wait_load_locked(c);
		else if (now >= c->retry_at_ms)
			load_locked(c, 0);
		now = chain_now(c);
		if (expired_locked(c, now))
			rc = c->last_err ? c->last_err : -EKEYEXPIRED;
	}
	if (rc == 0)
		creds_copy(out, &c->cur);
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int creds_invalidate(struct creds_chain *c)
{
	int rc;

	if (c->anonymous)
		return 0;
	pthread_mutex_lock(&c->mu);
	if (c->loading) {
		wait_load_locked(c);
	} else if (chain_now(c) - c->last_load_ms >= INVALIDATE_COALESCE_MS ||
		   c->last_err != 0) {
		log_info(CREDS_TAG, "%s: credentials rejected by the server, reloading",
			 c->ops->name);
		load_locked(c, 0);
	}
	rc = c->last_err;
	pthread_mutex_unlock(&c->mu);
	return rc;
}

int creds_chain_anonymous(const struct creds_chain *c)
{
	return c->anonymous;
}

const char *creds_chain_source(const struct creds_chain *c)
{
	return c->anonymous ? "anonymous" : c->ops->name;
}

static void fmt_time(int64_t wall_ms, char *buf, size_t len)
{
	time_t t = (time_t)(wall_ms / 1000);
	struct tm tm;

	if (!gmtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(buf, len, "?");
}

int creds_chain_describe(struct creds_chain *c, char *buf, size_t len)
{
	const char *ak;
	char when[40] = "";
	char key[16] = "";
	size_t ak_len;
	int rc;

	if (c->anonymous)
		return snprintf(buf, len, "anonymous: requests are not signed");
	pthread_mutex_lock(&c->mu);
	ak = c->cur.access_key_id ? c->cur.access_key_id : "";
	ak_len = strlen(ak);
	/* Only the last 4 characters of the key id, and only of a long one. */
	if (ak_len >= 12)
		snprintf(key, sizeof(key), "****%s", ak + ak_len - 4);
	else
		snprintf(key, sizeof(key), "****");
	if (c->cur.expires_wall_ms)
		fmt_time(c->cur.expires_wall_ms, when, sizeof(when));
	rc = snprintf(buf, len, "%s: %s (key %s, %s%s%s)", c->ops->name,
		      c->detail[0] ? c->detail : c->ops->name, key,
		      c->cur.expires_wall_ms ? "temporary, expires " : "static",
		      when, c->cur.session_token ? ", with session token" : "");
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void creds_chain_counters(struct creds_chain *c, uint64_t *refreshes, uint64_t *failures)
{
	pthread_mutex_lock(&c->mu);
	*refreshes = c->refreshes;
	*failures = c->failures;
	pthread_mutex_unlock(&c->mu);
}

int creds_chain_wait_idle(struct creds_chain *c, int timeout_ms)
{
	int64_t deadline = util_now_ms() + timeout_ms;
	int rc = -ETIMEDOUT;

	while (util_now_ms() < deadline) {
		int idle;

		pthread_mutex_lock(&c->mu);
		idle = !c->loading && !c->want_load &&
		       (c->anonymous || !due_locked(c, chain_now(c)));
		pthread_mutex_unlock(&c->mu);
		if (idle) {
			rc = 0;
			break;
		}
		struct timespec ts = { 0, 2 * 1000000L };
		nanosleep(&ts, NULL);
	}
	return rc;
}

static void append(char *msg, size_t msg_len, size_t *pos, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void append(char *msg, size_t msg_len, size_t *pos, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!msg || *pos >= msg_len)
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg + *pos, msg_len - *pos, fmt, ap);
	va_end(ap);
	if (n > 0)
		*pos += (size_t)n;
	if (*pos >= msg_len)
		*pos = msg_len;
}

static struct creds_chain *chain_alloc(const struct creds_chain_config *cfg)
{
	struct creds_chain *c = xcalloc(1, sizeof(*c));

	c->anonymous = cfg->anonymous;
	c->wall_ms = cfg->wall_ms;
	c->clock_arg = cfg->clock_arg;
	c->background = cfg->background;
	c->margin_ms = cfg->refresh_margin_ms > 0 ? cfg->refresh_margin_ms : CREDS_REFRESH_MARGIN_MS;
	c->retry_min_ms = cfg->retry_min_ms > 0 ? cfg->retry_min_ms : 1000;
	pthread_mutex_init(&c->mu, NULL);
	util_cond_init_monotonic(&c->wake);
	pthread_cond_init(&c->done, NULL);
	return c;
}

int creds_chain_new_config(const struct creds_chain_config *cfg, struct creds_chain **out,
			   char *msg, size_t msg_len)
{
	struct creds_chain *c = chain_alloc(cfg);
	size_t pos = 0, i, winner = cfg->n;
	int rc = -ENOENT;

	*out = NULL;
	if (msg && msg_len)
		msg[0] = '\0';
	if (c->anonymous) {
		for (i = 0; i < cfg->n; i++)
			if (cfg->states[i] && cfg->ops[i]->destroy)
				cfg->ops[i]->destroy(cfg->states[i]);
		*out = c;
		return 0;
	}

	for (i = 0; i < cfg->n; i++) {
		const struct creds_provider_ops *ops = cfg->ops[i];

		c->ops = ops;
		c->state = cfg->states[i];
		pthread_mutex_lock(&c->mu);
		load_locked(c, 1);
		rc = c->last_err;
		pthread_mutex_unlock(&c->mu);
		if (rc == 0) {
			winner = i;
			break;
		}
		if (rc != -ENOENT) {
			/* The source exists but is broken: say so instead of
			 * quietly using another identity. The misses before it
			 * are not news: the failure is the whole line. */
			pos = 0;
			append(msg, msg_len, &pos, "credentials from %s failed: %s (%s)",
			       ops->name, prov_explain(ops, c->state), strerror(-rc));
			break;
		}
		append(msg, msg_len, &pos, "%s%s (%s)", pos ? "; " : "no credentials found; tried: ",
		       ops->name, prov_explain(ops, c->state));
	}
	if (cfg->n == 0)
		append(msg, msg_len, &pos, "no credential providers are enabled");
	else if (rc == -ENOENT)
		append(msg, msg_len, &pos, "; for a public bucket use --no-sign-request");

	for (i = 0; i < cfg->n; i++)
		if (i != winner && cfg->states[i] && cfg->ops[i]->destroy)
			cfg->ops[i]->destroy(cfg->states[i]);
	if (winner == cfg->n) {
		c->ops = NULL;
		c->state = NULL;
		creds_chain_destroy(c);
		return rc ? rc : -ENOENT;
	}
	if (msg && msg_len)
		msg[0] = '\0';   /* the misses before the winner are not news */
	c->ops = cfg->ops[winner];
	c->state = cfg->states[winner];
	c->backoff_ms = 0;
	c->retry_at_ms = 0;
	c->failures = 0;
	if (c->cur.expires_wall_ms && c->background) {
		if (pthread_create(&c->thread, NULL, refresher_main, c) == 0)
			c->thread_started = 1;
		else
			log_warn(CREDS_TAG, "no refresher thread; refreshing on demand");
	}
	log_info(CREDS_TAG, "using credentials from %s%s", c->ops->name,
		 c->cur.expires_wall_ms ? " (temporary, refreshed before expiry)" : "");
	*out = c;
	return 0;
}

/* The default chain, in order. */
static const struct {
	const struct creds_provider_ops *ops;
	int (*create)(const struct creds_options *o, void **state);
} default_chain[] = {
	{ &creds_env_ops, creds_env_new },
	{ &creds_profile_ops, creds_profile_new },
	{ &creds_webid_ops, creds_webid_new },
	{ &creds_rrsa_ops, creds_rrsa_new },
	{ &creds_container_ops, creds_container_new },
	{ &creds_imds_ops, creds_imds_new },
	{ &creds_ecs_ram_ops, creds_ecs_ram_new },
};
#define N_DEFAULT (sizeof(default_chain) / sizeof(default_chain[0]))

int creds_chain_new(const struct creds_options *opts, struct creds_chain **out,
		    char *msg, size_t msg_len)
{
	static const struct creds_options none;
	const struct creds_provider_ops *ops[N_DEFAULT];
	void *states[N_DEFAULT];
	struct creds_chain_config cfg = { .ops = ops, .states = states, .background = 1 };
	size_t i, n = 0;
	int rc;

	if (!opts)
		opts = &none;
	*out = NULL;
	cfg.anonymous = opts->anonymous;
	if (!opts->anonymous) {
		for (i = 0; i < N_DEFAULT; i++) {
			if (opts->provider && strcmp(opts->provider, default_chain[i].ops->name) != 0)
				continue;
			rc = default_chain[i].create(opts, &states[n]);
			if (rc < 0) {
				while (n--)
					ops[n]->destroy(states[n]);
				if (msg && msg_len)
					snprintf(msg, msg_len, "credentials: %s: %s",
						 default_chain[i].ops->name, strerror(-rc));
				return rc;
			}
			ops[n++] = default_chain[i].ops;
		}
		if (opts->provider && n == 0) {
			if (msg && msg_len)
				snprintf(msg, msg_len, "unknown credentials provider '%s'",
					 opts->provider);
			return -EINVAL;
		}
	}
	cfg.n = n;
	return creds_chain_new_config(&cfg, out, msg, msg_len);
}

void creds_chain_destroy(struct creds_chain *c)
{
	if (!c)
		return;
	if (c->thread_started) {
		pthread_mutex_lock(&c->mu);
		c->stop = 1;
		pthread_cond_broadcast(&c->wake);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->thread, NULL);
	}
	if (c->ops && c->ops->destroy)
		c->ops->destroy(c->state);
	creds_cleanup(&c->cur);
	pthread_cond_destroy(&c->wake);
	pthread_cond_destroy(&c->done);
	pthread_mutex_destroy(&c->mu);
	util_wipe(c, sizeof(*c));
	free(c);
}
