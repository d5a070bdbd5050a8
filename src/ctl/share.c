/*
 * share — the owner's side of cache sharing: other mounts of the same bucket
 * at the same endpoint, given the same --cache-dir, attach to the mount that
 * owns the dir (src/cache/attach.c is their side) and read through its cache.
 *
 * DESIGN (protocol in cache.h, "Sharing")
 * A second control socket, CACHE_SHARE_SOCKET in the cache dir (0600 in the
 * 0700 dir: the same uid only), served by the same socket server with two
 * verbs: H (the attacher names bucket and endpoint; another one is refused
 * with EXDEV) and R (a range through the cache, at most max_read bytes). The
 * buffer of each R is charged to the owner's read budget while it is served,
 * so attached mounts cost the owner no memory beyond --max-memory. A peer
 * that stops reading is given up on after SHARE_SEND_TIMEOUT_S.
 */
#include "feedfs/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "ctl_i.h"
#include "feedfs/cache.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "share"
#define SHARE_MAX_CONNS 64
#define SHARE_SEND_TIMEOUT_S 60

struct ctl_share {
	struct ctl_source src;
	char *id;                       /* what an attacher must name */
	size_t id_len;
	struct rd_budget *budget;
	uint32_t max_read;              /* largest R */
	struct ctl_server *srv;
};

struct share_state {
	struct ctl_fetches fx;
	struct ctl_io io;
	int hello;                      /* 1: H accepted */
	char key[CTL_PATH_MAX];
};

static void share_state_free(void *arg, struct ctl_conn *k)
{
	struct share_state *st = k->state;

	if (!st)
		return;
	ctl_fetches_destroy(&st->fx);
	free(st);
	k->state = NULL;
}

static struct share_state *share_state_get(struct ctl_conn *k)
{
	struct share_state *st = k->state;

	if (!st && (st = calloc(1, sizeof(*st)))) {
		ctl_fetches_init(&st->fx);
		k->state = st;
	}
	return st;
}

/* "H <n>": an attacher names the bucket and endpoint it mounts (n bytes
 * follow); only the same ones may read this cache. */
static int handle_hello(void *arg, struct ctl_conn *k, const char *line)
{
	struct ctl_share *s = arg;
	struct share_state *st = share_state_get(k);
	unsigned long long n;
	char reply[64];

	if (!st || st->hello || ctl_parse_nums(line, &n, 1) < 0 || n == 0 || n > CTL_PATH_MAX ||
	    util_read_all(k->fd, st->key, (size_t)n) < 0)
		return -1;
	if (n != s->id_len || memcmp(st->key, s->id, (size_t)n) != 0) {
		log_warn(TAG, "refused a mount that asked to share this cache for another "
			 "bucket or endpoint");
		snprintf(reply, sizeof(reply), "ERR %d\n", EXDEV);
		return util_send_all(k->fd, reply, strlen(reply)) < 0 ? -1 : 0;
	}
	st->hello = 1;
	snprintf(reply, sizeof(reply), "OK %u %u\n", s->src.block, s->max_read);
	return util_send_all(k->fd, reply, strlen(reply)) < 0 ? -1 : 0;
}

/* "R <key len> <etag len> <object size> <off> <len>", then key and ETag: the
 * bytes through the cache, "OK <len>\n" and len bytes, or "ERR <errno>\n". */
static int handle_read(void *arg, struct ctl_conn *k, const char *line)
{
	struct ctl_share *s = arg;
	struct share_state *st = k->state;
	unsigned long long v[5];
	char etag[CTL_ETAG_MAX], reply[64], *buf = NULL;
	ssize_t r;
	int rc;

	if (!st || !st->hello || ctl_parse_nums(line, v, 5) < 0 || v[0] == 0 ||
	    v[0] > CTL_PATH_MAX || v[1] == 0 || v[1] >= CTL_ETAG_MAX || v[4] == 0 ||
	    v[4] > s->max_read || v[3] > v[2] || v[4] > v[2] - v[3] ||
	    util_read_all(k->fd, st->key, (size_t)v[0]) < 0 ||
	    util_read_all(k->fd, etag, (size_t)v[1]) < 0)
		return -1;
	etag[v[1]] = '\0';
	r = rd_budget_take(s->budget, v[4], 1);
	if (r == 0 && !(buf = malloc((size_t)v[4]))) {
		rd_budget_give(s->budget, v[4]);
		r = -ENOMEM;
	}
	if (r == 0)
		r = ctl_fetch_range(&st->fx, &s->src, st->key, (size_t)v[0], etag, v[2], v[3],
				    (size_t)v[4], buf, &st->io);
	if (r < 0) {
		snprintf(reply, sizeof(reply), "ERR %d\n", (int)-r);
		rc = util_send_all(k->fd, reply, strlen(reply));
	} else {
		snprintf(reply, sizeof(reply), "OK %zd\n", r);
		rc = util_send_all(k->fd, reply, strlen(reply)) < 0 ||
		     util_send_all(k->fd, buf, (size_t)r) < 0 ? -1 : 0;
	}
	if (buf) {
		free(buf);
		rd_budget_give(s->budget, v[4]);
	}
	return rc;
}

int ctl_share_start(struct cache *c, const char *cache_dir, const char *id, size_t id_len,
		    struct rd_budget *budget, struct ctl_share **out, char *msg, size_t msg_len)
{
	struct ctl_server_config sc;
	struct cache_stats cst;
	struct ctl_share *s = calloc(1, sizeof(*s));
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int e;

	if (!s || !(s->id = malloc(id_len ? id_len : 1))) {
		free(s);
		return -ENOMEM;
	}
	cache_get_stats(c, &cst);
	s->src = (struct ctl_source){ cache_fetcher(c), cst.block_size };
	memcpy(s->id, id, id_len);
	s->id_len = id_len;
	s->budget = budget;
	s->max_read = s->src.block;
	while (s->max_read > (64u << 10) && s->max_read > rd_budget_max(budget) / 4)
		s->max_read /= 2;
	e = cache_share_socket_path(cache_dir, path, sizeof(path));
	if (e < 0) {
		snprintf(msg, msg_len, "the path %s/%s is too long for a unix socket", cache_dir,
			 CACHE_SHARE_SOCKET);
		goto fail;
	}
	memset(&sc, 0, sizeof(sc));
	sc.what = "share";
	sc.path = path;
	sc.verbs[0] = (struct ctl_verb){ 'H', handle_hello, s };
	sc.verbs[1] = (struct ctl_verb){ 'R', handle_read, s };
	sc.n_verbs = 2;
	sc.max_conns = SHARE_MAX_CONNS;
	sc.send_timeout_s = SHARE_SEND_TIMEOUT_S;
	sc.conn_end = share_state_free;
	/* We hold the cache dir's lock: a socket there is a dead owner's. */
	e = ctl_server_start(&sc, &s->srv, msg, msg_len);
	if (e < 0)
		goto fail;
	log_info(TAG, "share socket %s: other mounts of this bucket may attach", path);
	*out = s;
	return 0;
fail:
	free(s->id);
	free(s);
	return e;
}

void ctl_share_stop(struct ctl_share *s)
{
	if (!s)
		return;
	ctl_server_stop(s->srv);
	free(s->id);
	free(s);
}
