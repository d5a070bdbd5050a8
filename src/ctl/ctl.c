/*
 * ctl — the mount's control socket (see ctl.h): where it lives, the stats
 * verb, the once-a-second throughput ticker, and the metrics listener.
 */
#include "feedfs/ctl.h"
#include "feedfs/heap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "feedfs/hash.h"
#include "feedfs/log.h"
#include "feedfs/notify.h"
#include "feedfs/util.h"

#define TAG "ctl"
#define CTL_MAX_CONNS 64
#define TICK_MS 1000

struct ctl {
	struct ctl_config cfg;
	struct ctl_server *srv;
	struct ctl_metrics *metrics;
	pthread_t ticker;
	int ticker_started;
	int watchdog;                   /* $WATCHDOG_USEC is ours: ping each tick */
	/* Guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;              /* CLOCK_MONOTONIC: the ticker's sleep */
	int stopping;
	struct stats_rate rate;         /* the last full interval */
	uint64_t last_ns, last_fuse_bytes, last_fuse_reads, last_s3_bytes;
};

static int runtime_dir(char *out, size_t out_len)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	int n;

	if (geteuid() == 0)
		n = snprintf(out, out_len, "/run/feedfs");
	else if (x && x[0] == '/')
		n = snprintf(out, out_len, "%s/feedfs", x);
	else
		n = snprintf(out, out_len, "/tmp/feedfs-%u", (unsigned)geteuid());
	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

int ctl_socket_path(const char *mount_abs, char *out, size_t out_len)
{
	char dir[256];
	int n, e = runtime_dir(dir, sizeof(dir));

	if (e < 0)
		return e;
	n = snprintf(out, out_len, "%s/ctl-%016llx.sock", dir,
		     (unsigned long long)util_fnv1a64(UTIL_FNV1A64_INIT, mount_abs,
							   strlen(mount_abs)));
	if (n < 0 || (size_t)n >= out_len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

/* Only a dir we own and nobody else may write to holds our socket. */
static int private_dir(char *msg, size_t msg_len)
{
	char dir[256];
	struct stat sb;
	int e = runtime_dir(dir, sizeof(dir));

	if (e < 0) {
		snprintf(msg, msg_len, "control socket dir: %s", strerror(-e));
		return e;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		e = -errno;
		snprintf(msg, msg_len, "cannot create the control socket dir %s: %s", dir,
			 strerror(-e));
		return e;
	}
	if (lstat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
	    (sb.st_mode & 022)) {
		snprintf(msg, msg_len, "control socket dir %s is not a private directory owned "
			 "by uid %u", dir, (unsigned)geteuid());
		return -EPERM;
	}
	return 0;
}

/* ---- the ticker ------------------------------------------------------------ */

/* One STATUS line for systemctl status (a no-op outside a Type=notify unit):
 * the last second's throughput and what the cache and the budget hold. */
static void tick_status(const struct stats_reg *r, const struct stats_rate *rate)
{
	uint64_t cache_used = stats_reg_value(r, "cache", "bytes_used");
	uint64_t cache_cap = stats_reg_value(r, "cache", "capacity_bytes");
	uint64_t bud_used = stats_reg_value(r, "budget", "used_bytes");
	uint64_t bud_max = stats_reg_value(r, "budget", "max_bytes");
	char cache[64] = "no cache";

	if (cache_cap)
		snprintf(cache, sizeof(cache), "cache %llu/%llu MiB",
			 (unsigned long long)(cache_used >> 20), (unsigned long long)(cache_cap >> 20));
	notify_status("reads %.1f MiB/s (%.0f/s), S3 %.1f MiB/s, %s, memory %llu/%llu MiB",
		      (double)rate->fuse_bytes / rate->seconds / 1048576.0,
		      (double)rate->fuse_reads / rate->seconds,
		      (double)rate->s3_bytes / rate->seconds / 1048576.0, cache,
		      (unsigned long long)(bud_used >> 20), (unsigned long long)(bud_max >> 20));
}

static void tick(struct ctl *c)
{
	const struct stats_reg *r = c->cfg.reg;
	struct stats_rate rate;
	uint64_t now = stats_now_ns();
	uint64_t fb = stats_reg_value(r, "fs", "read_bytes");
	uint64_t fr = stats_reg_value(r, "fs", "reads");
	uint64_t sb = stats_reg_value(r, "s3", "object_bytes");

	pthread_mutex_lock(&c->mu);
	if (c->last_ns) {
		c->rate.seconds = (double)(now - c->last_ns) / 1e9;
		c->rate.fuse_bytes = fb - c->last_fuse_bytes;
		c->rate.fuse_reads = fr - c->last_fuse_reads;
		c->rate.s3_bytes = sb - c->last_s3_bytes;
	}
	c->last_ns = now;
	c->last_fuse_bytes = fb;
	c->last_fuse_reads = fr;
	c->last_s3_bytes = sb;
	rate = c->rate;
	pthread_mutex_unlock(&c->mu);
	if (rate.seconds > 0)
		tick_status(r, &rate);
	heap_tick();
	/* The unit's watchdog (WatchdogSec=): a serving process whose ticker
	 * stops is restarted by systemd. Once a second is well within it. */
	if (c->watchdog)
		notify_watchdog();
}

static void *ticker_main(void *arg)
{
	struct ctl *c = arg;

	pthread_mutex_lock(&c->mu);
	while (!c->stopping) {
		pthread_mutex_unlock(&c->mu);
		tick(c);
		pthread_mutex_lock(&c->mu);
		if (!c->stopping)
			util_cond_wait_ms(&c->cv, &c->mu, TICK_MS);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

void ctl_rate(struct ctl *c, struct stats_rate *out)
{
	pthread_mutex_lock(&c->mu);
	*out = c->rate;
	pthread_mutex_unlock(&c->mu);
}

/* ---- S: stats ---------------------------------------------------------------- */

/* "S json|text|prom" -> "OK <n>\n" + n bytes. */
static int handle_stats(void *arg, struct ctl_conn *k, const char *line)
{
	struct ctl *c = arg;
	struct stats_rate now;
	char *buf = NULL, head[64];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int e;

	if (!f)
		return util_send_all(k->fd, "ERR 12\n", 7) < 0 ? -1 : 0;
	ctl_rate(c, &now);
	if (strcmp(line, "json") == 0)
		e = stats_render_json(c->cfg.reg, c->cfg.mount, &now, f);
	else if (strcmp(line, "text") == 0)
		e = stats_render_text(c->cfg.reg, c->cfg.mount, &now, f);
	else if (strcmp(line, "prom") == 0)
		e = stats_render_prom(c->cfg.reg, c->cfg.mount, f);
	else
		e = -EINVAL;
	if (fclose(f) != 0 && e == 0)
		e = -ENOMEM;
	if (e < 0)
		snprintf(head, sizeof(head), "ERR %d\n", -e);
	else
		snprintf(head, sizeof(head), "OK %zu\n", len);
	e = util_send_all(k->fd, head, strlen(head)) < 0 ||
	    (head[0] == 'O' && util_send_all(k->fd, buf, len) < 0) ? -1 : 0;
	free(buf);
	return e;
}

/* ---- start and stop --------------------------------------------------------- */

int ctl_start(const struct ctl_config *cfg, struct ctl **out, char *msg, size_t msg_len)
{
	struct ctl_server_config sc;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct ctl *c = calloc(1, sizeof(*c));
	int e;

	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	pthread_mutex_init(&c->mu, NULL);
	util_cond_init_monotonic(&c->cv);
	if (cfg->metrics_host) {
		/* Before the socket: a port in use fails the mount, and leaves
		 * nothing behind. */
		e = ctl_metrics_start(cfg->metrics_host, cfg->metrics_port, cfg->reg, cfg->mount,
				      &c->metrics, msg, msg_len);
		if (e < 0)
			goto fail;
	}
	e = private_dir(msg, msg_len);
	if (e == 0) {
		e = ctl_socket_path(cfg->mount_abs, path, sizeof(path));
		if (e < 0)
			snprintf(msg, msg_len, "control socket path: %s", strerror(-e));
	}
	if (e < 0)
		goto fail;
	memset(&sc, 0, sizeof(sc));
	sc.what = "control";
	sc.path = path;
	sc.max_conns = CTL_MAX_CONNS;
	sc.verbs[0] = (struct ctl_verb){ 'S', handle_stats, c };
	sc.n_verbs = 1;
	for (size_t i = 0; i < cfg->n_extra && sc.n_verbs < CTL_VERBS_MAX; i++)
		sc.verbs[sc.n_verbs++] = cfg->extra[i];
	sc.conn_end = cfg->conn_end;
	sc.conn_end_arg = cfg->conn_end_arg;
	/* A socket left by a daemon that died on this mount point: the mount
	 * point is ours now (it was checked free), so is its socket path. */
	e = ctl_server_start(&sc, &c->srv, msg, msg_len);
	if (e < 0)
		goto fail;
	c->watchdog = notify_watchdog_usec() > 0;
	if (pthread_create(&c->ticker, NULL, ticker_main, c) == 0)
		c->ticker_started = 1;
	log_info(TAG, "control socket %s", path);
	*out = c;
	return 0;
fail:
	ctl_metrics_stop(c->metrics);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
	return e;
}

void ctl_stop(struct ctl *c)
{
	if (!c)
		return;
	ctl_metrics_stop(c->metrics);
	ctl_server_stop(c->srv);
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	if (c->ticker_started)
		pthread_join(c->ticker, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
