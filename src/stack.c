/*
 * stack.c — the read path's fetcher stack (design in feedfs/stack.h).
 */
#include "feedfs/stack.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "feedfs/attach.h"
#include "feedfs/ctl.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "stack"

/* The layer under the cache: the given one (several sources: route.h), or
 * the S3 client's. */
static struct fetcher *stack_bottom(const struct stack_config *cfg, struct stack *st)
{
	return cfg->bottom ? cfg->bottom : &st->s3.base;
}

/*
 * Own the cache dir, or attach to its owner when another mount of the same
 * bucket and endpoint holds it; retried while the owner is starting or has
 * just gone (see stack.h). Returns 0 (st->cache or st->attach set, or neither:
 * the owner is full, a warning is logged) or -errno with a line in msg.
 */
static int open_or_attach(const struct stack_config *cfg, struct stack *st, char *msg,
			  size_t msg_len)
{
	int64_t deadline = util_now_ms() + STACK_ATTACH_WAIT_MS;
	struct cache_config ccfg = *cfg->cache;
	char amsg[256];
	int e;

	ccfg.inner = stack_bottom(cfg, st);
	for (;;) {
		msg[0] = '\0';
		e = cache_new(&ccfg, &st->cache, msg, msg_len);
		if (e != -EBUSY || ccfg.clear)
			return e;
		msg[strcspn(msg, ";")] = '\0';    /* "cache dir D is in use by feedfs pid N" */
		e = attach_new(ccfg.dir, cfg->share_id, cfg->share_id_len, stack_bottom(cfg, st),
			       &st->attach, amsg, sizeof(amsg));
		if (e == 0)
			return 0;
		if (e == -EBUSY) {
			/* Not a configuration error: the node is busy. */
			log_warn(TAG, "%s and %s: mounting without a cache", msg, amsg);
			return 0;
		}
		if ((e != -ENOENT && e != -ECONNREFUSED) || util_now_ms() >= deadline)
			break;
		usleep(200 * 1000);
	}
	snprintf(msg + strlen(msg), msg_len - strlen(msg),
		 " and %s; give each mount its own --cache-dir", amsg);
	return e;
}

/* The cache layer (own or attached, or none) between S3 and readahead. */
static int build_cache(const struct stack_config *cfg, struct stack *st, char *msg,
		       size_t msg_len)
{
	char smsg[512];
	int e;

	if (!cfg->cache)
		return 0;
	e = open_or_attach(cfg, st, msg, msg_len);
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, msg_len, "cache dir %s: %s", cfg->cache->dir, strerror(-e));
		return e;
	}
	if (st->attach) {
		st->cached = attach_fetcher(st->attach);
		st->cached_block = attach_block_size(st->attach);
	} else if (st->cache) {
		struct cache_stats cs;

		smsg[0] = '\0';
		if (ctl_share_start(st->cache, cfg->cache->dir, cfg->share_id, cfg->share_id_len,
				    cfg->budget, &st->share, smsg, sizeof(smsg)) < 0)
			log_warn(TAG, "other mounts cannot share this cache: %s", smsg);
		cache_get_stats(st->cache, &cs);
		st->cached = cache_fetcher(st->cache);
		st->cached_block = cs.block_size;
	}
	return 0;
}

int stack_build(const struct stack_config *cfg, struct stack *st, char *msg, size_t msg_len)
{
	struct rd_ahead_config acfg;
	struct fetcher *below;
	int e;

	memset(st, 0, sizeof(*st));
	msg[0] = '\0';
	if (cfg->s3)
		s3_fetcher_init(&st->s3, cfg->s3);
	e = build_cache(cfg, st, msg, msg_len);
	if (e < 0)
		goto fail;
	below = st->cached ? st->cached : stack_bottom(cfg, st);
	if (st->cached) {
		/* Streams fetch whole blocks, so each is fetched once and cached
		 * whole; a random read only the cache's pieces it needs. */
		st->rd.align = st->cached_block;
		st->rd.random_align = CACHE_PIECE;
	}

	memset(&acfg, 0, sizeof(acfg));
	acfg.inner = below;
	acfg.budget = cfg->budget;
	acfg.max_file_size = cfg->part_size;
	e = rd_ahead_new(&acfg, &st->ahead);
	if (e < 0) {
		snprintf(msg, msg_len, "out of memory");
		goto fail;
	}
	st->rd.fetcher = rd_ahead_fetcher(st->ahead);
	return 0;
fail:
	stack_destroy(st);
	return e;
}

void stack_destroy(struct stack *st)
{
	rd_ahead_destroy(st->ahead);        /* fetches through the cache layer */
	attach_destroy(st->attach);         /* before s3, its fallback */
	ctl_share_stop(st->share);          /* attached mounts fall back to S3 */
	if (st->cache)
		cache_destroy(st->cache);
	memset(st, 0, sizeof(*st));
}
