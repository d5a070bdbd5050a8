/*
 * warm — the W verb of a mount's control socket: `feedfs warm` fills the
 * block cache ahead of a job without reading through FUSE.
 *
 * DESIGN
 * "W <n>\n" + n bytes of a mount-relative path: the daemon resolves it to
 * (key, ETag, size) through the resolve function (a HEAD: the listing the
 * kernel saw may be older, and the cache keys by ETag, so warming the
 * current version is what a later open will read), then fetches the object
 * block by block through the cache, WARM_DEPTH blocks in flight into buffers
 * the connection owns. The bytes go nowhere: the point is the cache's
 * write-behind. So warming reads S3 once per missing block and the disk once
 * per cached one (to verify it), never through FUSE or the page cache.
 * Reply: "OK <bytes>\n" or "ERR <errno>\n". A client that goes away stops
 * its work after the blocks in flight (ctl_fetch_object polls for it).
 */
#include "feedfs/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl_i.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "warm"
#define WARM_DEPTH 2

struct ctl_warm {
	struct ctl_source src;
	ctl_resolve_fn resolve;
	void *resolve_arg;
};

/* One connection's buffers, made on its first W. */
struct warm_state {
	struct ctl_fetches fx;
	struct ctl_io ios[WARM_DEPTH];
	char *bufs[WARM_DEPTH];
	char path[CTL_PATH_MAX + 1];
};

static void warm_state_free(void *arg, struct ctl_conn *k)
{
	struct warm_state *st = k->state;

	if (!st)
		return;
	for (int i = 0; i < WARM_DEPTH; i++)
		free(st->bufs[i]);
	ctl_fetches_destroy(&st->fx);
	free(st);
	k->state = NULL;
}

static struct warm_state *warm_state_get(struct ctl_warm *w, struct ctl_conn *k)
{
	struct warm_state *st = k->state;

	if (st)
		return st;
	st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	ctl_fetches_init(&st->fx);
	k->state = st;
	for (int i = 0; i < WARM_DEPTH && w->src.block; i++)
		if (!(st->bufs[i] = malloc(w->src.block)))
			return NULL;            /* freed with the connection */
	return st;
}

static int handle_warm(void *arg, struct ctl_conn *k, const char *line)
{
	struct ctl_warm *w = arg;
	struct warm_state *st = warm_state_get(w, k);
	char etag[CTL_ETAG_MAX], reply[64], *key = NULL;
	unsigned long long n;
	size_t klen;
	uint64_t size;
	ssize_t r;

	if (!st || ctl_parse_nums(line, &n, 1) < 0 || n == 0 || n > CTL_PATH_MAX ||
	    util_read_all(k->fd, st->path, (size_t)n) < 0)
		return -1;
	st->path[n] = '\0';
	if (!w->resolve) {
		/* No cache on this mount: there is nothing to warm into. */
		snprintf(reply, sizeof(reply), "ERR %d\n", EOPNOTSUPP);
		return util_send_all(k->fd, reply, strlen(reply)) < 0 ? -1 : 0;
	}
	r = w->resolve(w->resolve_arg, st->path, n, &key, &klen, etag, sizeof(etag), &size);
	if (r == 0 && !etag[0])
		r = -ENOTSUP;           /* no ETag: the cache cannot hold it */
	if (r == 0)
		r = ctl_fetch_object(&st->fx, &w->src, k->fd, key, klen, etag, size, st->bufs,
				     st->ios, WARM_DEPTH);
	free(key);
	if (r < 0) {
		log_info(TAG, "warming %s: %s", st->path, strerror((int)-r));
		snprintf(reply, sizeof(reply), "ERR %d\n", (int)-r);
	} else {
		snprintf(reply, sizeof(reply), "OK %lld\n", (long long)r);
	}
	return util_send_all(k->fd, reply, strlen(reply)) < 0 ? -1 : 0;
}

int ctl_warm_new(struct fetcher *fetcher, uint32_t block, ctl_resolve_fn resolve,
		 void *resolve_arg, struct ctl_warm **out)
{
	struct ctl_warm *w = calloc(1, sizeof(*w));

	if (!w)
		return -ENOMEM;
	w->src = (struct ctl_source){ fetcher, block };
	w->resolve = resolve;
	w->resolve_arg = resolve_arg;
	*out = w;
	return 0;
}

void ctl_warm_register(struct ctl_warm *w, struct ctl_config *cfg)
{
	BUG_ON(cfg->n_extra >= sizeof(cfg->extra) / sizeof(cfg->extra[0]) || cfg->conn_end);
	cfg->extra[cfg->n_extra++] = (struct ctl_verb){ 'W', handle_warm, w };
	cfg->conn_end = warm_state_free;
	cfg->conn_end_arg = w;
}

void ctl_warm_free(struct ctl_warm *w)
{
	free(w);
}
