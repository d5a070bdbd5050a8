/*
 * hint.c — loader-order prefetch (design and contract in feedfs/hint.h).
 *
 * One struct hint_order per order, swapped whole under hint.mu: its payload
 * (the paths, '\n' turned into NUL), one entry per path, and a chained hash
 * of resolved keys (bucket heads and links are entry indexes + 1). An entry
 * moves NEW -> READY | SKIP | MISSING (resolver), READY -> WANTED (ahead took
 * it), and from any of them to OPENED (an open) or AGED (left behind).
 */
#include "feedfs/hint.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/ahead.h"
#include "feedfs/hash.h"
#include "feedfs/log.h"
#include "feedfs/prefetch.h"
#include "feedfs/stats.h"
#include "feedfs/util.h"

#define TAG "order"
#define HINT_DEFAULT_WINDOW 256u
#define HINT_DEFAULT_TICK_MS 20
#define HINT_WANDER_OPENS 64u   /* opens off the order in a row: stop growing */
#define HINT_SEED 0x6f72646572ull
#define HINT_EARLY 64u          /* opens remembered while their paths resolve */
#define HINT_KEY_SLACK 48u      /* a resolved key's cost beyond its path: ETag, NULs */

enum he_state { HE_NEW, HE_READY, HE_WANTED, HE_OPENED, HE_MISSING, HE_SKIP, HE_AGED };

struct hint_ent {
	char *key;              /* once resolved: key, NUL, ETag, NUL */
	uint64_t size;
	uint32_t path_off, path_len;
	uint32_t key_len;
	uint32_t hnext;         /* next entry + 1 in the key's chain; 0: none */
	uint8_t state;
};

struct hint_order {
	char *payload;
	struct hint_ent *ents;
	size_t n;
	uint32_t *tab;          /* bucket heads: entry + 1 */
	size_t tab_mask;
	size_t low;             /* first index not settled */
	size_t top1;            /* furthest index opened + 1; 0: none */
	size_t rnext;           /* next index to resolve */
	size_t nresolved;       /* settled by the resolver: found, missing or failed */
	size_t nfound;          /* found in the bucket */
	unsigned wander;        /* opens off the order in a row */
	int refused;            /* the last pass was refused: retry on the tick */
	int64_t fill_ms;        /* when the last pass ran */
	/* Opens that found no entry while names were still resolving (the
	 * loader starts at once): key hashes, so the entry is settled when it
	 * resolves instead of being fetched for nobody. 0: a free slot. */
	uint64_t early[HINT_EARLY];
	unsigned n_early;       /* slots written (the ring wraps) */
	int missing_logged;
	uint64_t id;            /* unique per hint: the resolver's check that its
				 * order is still current after an unlocked resolve */
	uint64_t charged;       /* budget bytes this order holds (hint_config.budget) */
	int64_t used_ms;        /* set, or last opened: the oldest stream goes first */
	char stream[HINT_STREAM_MAX + 1];
};

struct hint {
	struct hint_config cfg;
	uint64_t max_size;      /* ahead's largest file */
	uint64_t head_size;     /* what a larger file gets: its first window */
	pthread_mutex_t mu;
	pthread_cond_t cv;      /* resolver: new order, stop, tick (monotonic) */
	pthread_cond_t done_cv; /* hint_wait_resolved */
	struct hint_order *cur[HINT_MAX_STREAMS];   /* under mu; NULL: a free slot */
	uint64_t next_id;       /* under mu */
	unsigned rr;            /* under mu: the stream the resolver serves next */
	int stop;               /* under mu */
	pthread_t thread;
	struct hint_stats st;   /* under mu (paths, resolved filled by get_stats) */
};

static void order_free(struct hint *h, struct hint_order *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->n; i++)
		free(o->ents[i].key);
	free(o->ents);
	free(o->tab);
	free(o->payload);
	if (o->charged)
		rd_budget_give(h->cfg.budget, o->charged);
	free(o);
}

/* What an order of count paths in nbytes costs, charged to the budget: the
 * payload, the entries and the hash table now, and each resolved key with
 * its ETag later (estimated as the path plus HINT_KEY_SLACK). */
static uint64_t order_cost(size_t nbytes, size_t count, size_t tab_cap)
{
	return 2 * (uint64_t)nbytes +
	       (uint64_t)count * (sizeof(struct hint_ent) + HINT_KEY_SLACK) +
	       (uint64_t)tab_cap * sizeof(uint32_t) + sizeof(struct hint_order);
}

static uint64_t key_hash(const char *key, size_t key_len)
{
	return util_hash64(key, key_len, HINT_SEED) | 1;   /* never 0: a free early slot */
}

static uint32_t *chain_head(struct hint_order *o, const char *key, size_t key_len)
{
	return &o->tab[key_hash(key, key_len) & o->tab_mask];
}

/* Was key opened before it resolved? Takes the mark (hint.mu held). */
static int early_take(struct hint_order *o, const char *key, size_t key_len)
{
	uint64_t kh;

	if (!o->n_early)
		return 0;
	kh = key_hash(key, key_len);
	for (unsigned j = 0; j < HINT_EARLY; j++)
		if (o->early[j] == kh) {
			o->early[j] = 0;
			return 1;
		}
	return 0;
}

/* The entry an open of key settles: the lowest unsettled one with that key;
 * -2 when the key is in the order but every copy is settled; -1 not at all. */
static long order_find(struct hint_order *o, const char *key, size_t key_len)
{
	long best = -1, any = -1;

	for (uint32_t j = *chain_head(o, key, key_len); j; j = o->ents[j - 1].hnext) {
		const struct hint_ent *e = &o->ents[j - 1];

		if (e->key_len != key_len || memcmp(e->key, key, key_len) != 0)
			continue;
		any = (long)j - 1;
		if (e->state != HE_OPENED && e->state != HE_AGED &&
		    (best < 0 || (long)j - 1 < best))
			best = (long)j - 1;
	}
	return best >= 0 ? best : any >= 0 ? -2 : -1;
}

/* Bytes of e fetched ahead: a file ahead takes whole, whole; a larger one
 * its first window (the read path's first readahead chunk, so the stream's
 * first GET is answered from it), the ordinary readahead after that. */
static uint64_t ent_want_len(const struct hint *h, const struct hint_ent *e)
{
	return e->size <= h->max_size ? e->size : h->head_size;
}

/* Hand the resolved files of [low, low + window) to ahead, in order, until it
 * refuses one (hint.mu held). */
static void order_fill_locked(struct hint *h, struct hint_order *o)
{
	size_t end = o->low + h->cfg.window < o->n ? o->low + h->cfg.window : o->n;

	o->refused = 0;
	o->fill_ms = util_now_ms();
	if (o->wander >= HINT_WANDER_OPENS)
		return;             /* the loader left the order: do not grow */
	for (size_t i = o->low; i < end; i++) {
		struct hint_ent *e = &o->ents[i];

		if (e->state != HE_READY)
			continue;
		if (!rd_ahead_want_head(h->cfg.ahead, e->key, e->key_len,
					e->key + e->key_len + 1, e->size, ent_want_len(h, e))) {
			o->refused = 1;
			pthread_cond_broadcast(&h->cv);     /* the tick retries */
			return;
		}
		e->state = HE_WANTED;
		h->st.fetched++;
	}
}

/* A file fetched for the order will not be opened for it (hint.mu held). */
static void ent_drop_locked(struct hint *h, struct hint_ent *e)
{
	if (e->state == HE_WANTED) {
		h->st.wasted++;
		rd_ahead_forget(h->cfg.ahead, e->key, e->key_len, e->key + e->key_len + 1);
	}
}

/* Move low over settled entries and age out those left window behind top. */
static void order_advance_locked(struct hint *h, struct hint_order *o)
{
	while (o->low < o->n) {
		struct hint_ent *e = &o->ents[o->low];

		if (e->state == HE_OPENED || e->state == HE_MISSING || e->state == HE_SKIP ||
		    e->state == HE_AGED) {
			o->low++;
			continue;
		}
		if (o->top1 <= o->low + h->cfg.window)
			break;
		ent_drop_locked(h, e);
		e->state = HE_AGED;
		o->low++;
	}
}

/* Forget everything the order fetched and nobody opened (hint.mu held). */
static void order_release_locked(struct hint *h, struct hint_order *o)
{
	if (!o)
		return;
	for (size_t i = 0; i < o->n; i++)
		ent_drop_locked(h, &o->ents[i]);
}

/* The slot of stream (NULL: none); when absent and make, a free one or the
 * least recently used, whose order is then replaced. -1: absent. */
static int stream_slot(struct hint *h, const char *stream, int make)
{
	int free_slot = -1, oldest = 0;

	for (int j = 0; j < HINT_MAX_STREAMS; j++) {
		struct hint_order *o = h->cur[j];

		if (!o) {
			if (free_slot < 0)
				free_slot = j;
			continue;
		}
		if (strcmp(o->stream, stream) == 0)
			return j;
		if (h->cur[oldest] == NULL || o->used_ms < h->cur[oldest]->used_ms)
			oldest = j;
	}
	if (!make)
		return -1;
	if (free_slot < 0) {
		log_info(TAG, "%d order streams at once: stream '%s' (least recently used) "
			 "is replaced by '%s'", HINT_MAX_STREAMS, h->cur[oldest]->stream, stream);
		return oldest;
	}
	return free_slot;
}

/* Put o (NULL: none) in slot j and free what was there: everything it
 * fetched and nobody opened is forgotten now. */
static void order_swap(struct hint *h, int j, struct hint_order *o)
{
	struct hint_order *old;

	pthread_mutex_lock(&h->mu);
	old = h->cur[j];
	order_release_locked(h, old);
	h->cur[j] = o;
	if (o) {
		o->id = ++h->next_id;
		o->used_ms = util_now_ms();
		h->st.orders++;
		order_fill_locked(h, o);        /* nothing resolved yet: usually a no-op */
	}
	pthread_cond_broadcast(&h->cv);
	pthread_cond_broadcast(&h->done_cv);
	pthread_mutex_unlock(&h->mu);
	order_free(h, old);                 /* outside the lock: it may be large */
}

/* Store what resolving entry i gave (hint.mu held; the order is still the one
 * it was taken from). key is taken over. */
static void ent_resolved_locked(struct hint *h, struct hint_order *o, size_t i, int r,
				char *key, size_t key_len, const char *etag, uint64_t size)
{
	struct hint_ent *e = &o->ents[i];
	size_t elen = strlen(etag);
	char *k = NULL;

	o->nresolved++;
	if (r == 0 && (k = realloc(key, key_len + 1 + elen + 1)) != NULL) {
		uint32_t *head;

		key = NULL;
		k[key_len] = '\0';
		memcpy(k + key_len + 1, etag, elen + 1);
		e->key = k;
		e->key_len = (uint32_t)key_len;
		e->size = size;
		o->nfound++;
		head = chain_head(o, k, key_len);
		e->hnext = *head;
		*head = (uint32_t)i + 1;
		if (e->state == HE_NEW && early_take(o, k, key_len)) {
			/* Opened already (hash collisions aside): settle it unfetched. */
			e->state = HE_OPENED;
			h->st.consumed++;
			if (i + 1 > o->top1)
				o->top1 = i + 1;
		} else if (e->state == HE_NEW) {
			e->state = size && elen && (size <= h->max_size || h->head_size) ?
				   HE_READY : HE_SKIP;
		}
	} else if (r == -ENOENT || r == -ENOTDIR || r == -EISDIR || r == -EINVAL ||
		   r == -ENAMETOOLONG) {
		h->st.missing++;
		if (!o->missing_logged) {
			o->missing_logged = 1;
			log_info(TAG, "'%.*s' of the order is not in the bucket: skipped "
				 "(order.missing counts the others)", (int)e->path_len,
				 o->payload + e->path_off);
		}
		if (e->state == HE_NEW)
			e->state = HE_MISSING;
	} else {
		log_debug(TAG, "resolving '%.*s': %s", (int)e->path_len, o->payload + e->path_off,
			  strerror(r < 0 ? -r : ENOMEM));
		if (e->state == HE_NEW)
			e->state = HE_SKIP;
	}
	free(key);
	if (o->nresolved == o->n)
		pthread_cond_broadcast(&h->done_cv);
	if (i < o->low + h->cfg.window) {
		order_advance_locked(h, o);
		order_fill_locked(h, o);
	}
}

/* The order whose next path the resolver takes: the streams in turn, so
 * that every rank's first files resolve early (hint.mu held). NULL: none. */
static struct hint_order *resolve_pick(struct hint *h)
{
	for (unsigned n = 0; n < HINT_MAX_STREAMS; n++) {
		struct hint_order *o = h->cur[(h->rr + n) % HINT_MAX_STREAMS];

		if (o && o->rnext < o->n) {
			h->rr = (h->rr + n + 1) % HINT_MAX_STREAMS;
			return o;
		}
	}
	return NULL;
}

/* Retry the fill of every order whose last pass was refused, tick_ms after
 * it (hint.mu held). 1 when one is still waiting. */
static int refill_due(struct hint *h)
{
	int64_t now = util_now_ms();
	int waiting = 0;

	for (int j = 0; j < HINT_MAX_STREAMS; j++) {
		struct hint_order *o = h->cur[j];

		if (!o || !o->refused)
			continue;
		if (now - o->fill_ms >= h->cfg.tick_ms)
			order_fill_locked(h, o);
		waiting |= o->refused;
	}
	return waiting;
}

static struct hint_order *order_by_id(struct hint *h, uint64_t id)
{
	for (int j = 0; j < HINT_MAX_STREAMS; j++)
		if (h->cur[j] && h->cur[j]->id == id)
			return h->cur[j];
	return NULL;
}

/* The resolver: paths of the current orders in order, then the refused
 * files' retries on the tick. */
static void *hint_main(void *arg)
{
	struct hint *h = arg;
	char *path = NULL;
	size_t path_cap = 0;

	pthread_setname_np(pthread_self(), "feedfs-order");
	pthread_mutex_lock(&h->mu);
	while (!h->stop) {
		struct hint_order *o;
		char etag[HINT_ETAG_MAX], *key = NULL;
		size_t i, len, key_len = 0;
		uint64_t size = 0, id;
		int r, waiting;

		/* A long order resolves for a while: keep retrying refused files. */
		waiting = refill_due(h);
		o = resolve_pick(h);
		if (!o) {
			if (waiting)
				util_cond_wait_ms(&h->cv, &h->mu, h->cfg.tick_ms);
			else
				pthread_cond_wait(&h->cv, &h->mu);
			continue;
		}
		i = o->rnext++;
		len = o->ents[i].path_len;
		if (len + 1 > path_cap) {
			char *p = realloc(path, len + 1);

			if (!p) {
				ent_resolved_locked(h, o, i, -ENOMEM, NULL, 0, "", 0);
				continue;
			}
			path = p;
			path_cap = len + 1;
		}
		memcpy(path, o->payload + o->ents[i].path_off, len);
		path[len] = '\0';
		id = o->id;
		pthread_mutex_unlock(&h->mu);

		etag[0] = '\0';
		r = h->cfg.resolve(h->cfg.resolve_arg, path, len, &key, &key_len, etag,
				   sizeof(etag), &size);
		if (r < 0)
			key = NULL;

		pthread_mutex_lock(&h->mu);
		o = order_by_id(h, id);
		if (!o) {                       /* replaced meanwhile: o is gone */
			free(key);
			continue;
		}
		ent_resolved_locked(h, o, i, r, key, key_len, etag, size);
	}
	pthread_mutex_unlock(&h->mu);
	free(path);
	return NULL;
}

int hint_new(const struct hint_config *cfg, struct hint **out)
{
	struct hint *h;

	if (!cfg->ahead || !cfg->resolve)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->cfg = *cfg;
	if (!h->cfg.window)
		h->cfg.window = HINT_DEFAULT_WINDOW;
	if (!h->cfg.tick_ms)
		h->cfg.tick_ms = HINT_DEFAULT_TICK_MS;
	h->max_size = rd_ahead_max_file_size(cfg->ahead);
	h->head_size = cfg->head_size < h->max_size ? cfg->head_size : h->max_size;
	pthread_mutex_init(&h->mu, NULL);
	util_cond_init_monotonic(&h->cv);
	util_cond_init_monotonic(&h->done_cv);
	if (pthread_create(&h->thread, NULL, hint_main, h) != 0) {
		pthread_cond_destroy(&h->done_cv);
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->mu);
		free(h);
		return -ENOMEM;
	}
	*out = h;
	return 0;
}

void hint_destroy(struct hint *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stop = 1;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->mu);
	pthread_join(h->thread, NULL);
	for (int j = 0; j < HINT_MAX_STREAMS; j++)
		order_swap(h, j, NULL);
	pthread_cond_destroy(&h->done_cv);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

int hint_order_check(const char *payload, size_t nbytes, size_t count)
{
	size_t seen = 0, i = 0;

	if (count > HINT_MAX_PATHS || nbytes > HINT_MAX_BYTES)
		return -E2BIG;
	if (nbytes && payload[nbytes - 1] != '\n')
		return -EINVAL;
	while (i < nbytes) {
		const char *p = payload + i, *nl = memchr(p, '\n', nbytes - i);
		size_t len = (size_t)(nl - p), s = 0;

		if (len == 0 || p[0] == '/' || memchr(p, '\0', len))
			return -EINVAL;
		/* Each segment: not empty (no "//", no trailing '/'), not "." or "..". */
		while (s <= len) {
			const char *q = memchr(p + s, '/', len - s);
			size_t end = q ? (size_t)(q - p) : len, sl = end - s;

			if (sl == 0 || (sl == 1 && p[s] == '.') ||
			    (sl == 2 && p[s] == '.' && p[s + 1] == '.'))
				return -EINVAL;
			s = end + 1;
		}
		seen++;
		i += len + 1;
	}
	return seen == count ? 0 : -EINVAL;
}

int hint_stream_check(const char *stream)
{
	size_t n = strlen(stream);

	if (n > HINT_STREAM_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)stream[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			return -EINVAL;
	}
	return 0;
}

int hint_set_order(struct hint *h, const char *stream, char *payload, size_t nbytes,
		   size_t count)
{
	struct hint_order *o;
	size_t cap = 16, off = 0;
	uint64_t cost;
	int j, e;

	if (hint_stream_check(stream) < 0)
		return -EINVAL;
	while (cap < 2 * count)
		cap <<= 1;
	cost = order_cost(nbytes, count, cap);
	if (h->cfg.budget) {
		/* Bounded with everything else the mount holds. More than half
		 * of it would starve the reads the order is for. */
		if (cost > rd_budget_max(h->cfg.budget) / 2)
			return -E2BIG;
		e = rd_budget_take(h->cfg.budget, cost, 1);
		if (e < 0)
			return e;
	}
	o = calloc(1, sizeof(*o));
	if (o) {
		o->ents = calloc(count ? count : 1, sizeof(*o->ents));
		o->tab = calloc(cap, sizeof(*o->tab));
	}
	if (!o || !o->ents || !o->tab) {
		if (o) {
			free(o->ents);
			free(o->tab);
		}
		free(o);
		if (h->cfg.budget)
			rd_budget_give(h->cfg.budget, cost);
		return -ENOMEM;
	}
	o->charged = h->cfg.budget ? cost : 0;
	o->tab_mask = cap - 1;
	strcpy(o->stream, stream);
	for (size_t i = 0; i < count && off < nbytes; i++) {
		char *nl = memchr(payload + off, '\n', nbytes - off);
		size_t len = nl ? (size_t)(nl - (payload + off)) : nbytes - off;

		if (nl)
			*nl = '\0';
		o->ents[i].path_off = (uint32_t)off;
		o->ents[i].path_len = (uint32_t)len;
		o->n = i + 1;
		off += len + 1;
	}
	o->payload = payload;
	pthread_mutex_lock(&h->mu);
	j = stream_slot(h, stream, 1);
	pthread_mutex_unlock(&h->mu);
	/* Two orders for one new stream at once could pick one free slot each;
	 * orders come from one control connection per loader, so the cost of
	 * that race is a duplicate stream until it is replaced, never a leak. */
	order_swap(h, j, o);
	return 0;
}

void hint_clear(struct hint *h, const char *stream)
{
	for (int j = 0; j < HINT_MAX_STREAMS; j++) {
		int match;

		pthread_mutex_lock(&h->mu);
		match = h->cur[j] && (!stream || strcmp(h->cur[j]->stream, stream) == 0);
		pthread_mutex_unlock(&h->mu);
		if (match)
			order_swap(h, j, NULL);
	}
}

/* An open of key against order o: 1 when it was o's (hint.mu held). */
static int order_opened_locked(struct hint *h, struct hint_order *o, const char *key,
			       size_t key_len)
{
	long i = order_find(o, key, key_len);

	if (i == -1)
		return 0;
	o->wander = 0;
	o->used_ms = util_now_ms();
	if (i >= 0) {
		struct hint_ent *e = &o->ents[i];

		h->st.consumed++;
		if (e->state == HE_WANTED)
			h->st.hits++;
		e->state = HE_OPENED;
		if ((size_t)i + 1 > o->top1)
			o->top1 = (size_t)i + 1;
	}
	order_advance_locked(h, o);
	order_fill_locked(h, o);
	return 1;
}

void hint_opened(struct hint *h, const char *key, size_t key_len)
{
	int found = 0;

	pthread_mutex_lock(&h->mu);
	for (int j = 0; j < HINT_MAX_STREAMS && !found; j++)
		if (h->cur[j])
			found = order_opened_locked(h, h->cur[j], key, key_len);
	/* In no order: perhaps not resolved yet; and the loader may have left
	 * the orders (each stops growing after HINT_WANDER_OPENS such opens). */
	for (int j = 0; j < HINT_MAX_STREAMS && !found; j++) {
		struct hint_order *o = h->cur[j];

		if (!o)
			continue;
		if (o->nresolved < o->n)
			o->early[o->n_early++ % HINT_EARLY] = key_hash(key, key_len);
		if (o->wander < HINT_WANDER_OPENS)
			o->wander++;
	}
	pthread_mutex_unlock(&h->mu);
}

void hint_get_stats(struct hint *h, struct hint_stats *out)
{
	pthread_mutex_lock(&h->mu);
	*out = h->st;
	out->paths = out->resolved = out->streams = out->bytes = 0;
	for (int j = 0; j < HINT_MAX_STREAMS; j++) {
		const struct hint_order *o = h->cur[j];

		if (!o)
			continue;
		out->streams++;
		out->paths += o->n;
		out->resolved += o->nfound;
		out->bytes += o->charged;
	}
	pthread_mutex_unlock(&h->mu);
}

/* Every path of every order resolved (hint.mu held). */
static int all_resolved_locked(struct hint *h)
{
	for (int j = 0; j < HINT_MAX_STREAMS; j++)
		if (h->cur[j] && h->cur[j]->nresolved < h->cur[j]->n)
			return 0;
	return 1;
}

int hint_wait_resolved(struct hint *h, int64_t timeout_ms)
{
	int64_t end = util_now_ms() + timeout_ms;
	int ok;

	pthread_mutex_lock(&h->mu);
	while (!all_resolved_locked(h) && util_now_ms() < end)
		util_cond_wait_ms(&h->done_cv, &h->mu, end - util_now_ms());
	ok = all_resolved_locked(h);
	pthread_mutex_unlock(&h->mu);
	return ok;
}

/* ---- the "order" counters (stats.h) ---------------------------------------- */

static void hint_snapshot(void *obj, void *out)
{
	hint_get_stats(obj, out);
}

#define ROW_C(f, metric, help) STATS_COUNTER(struct hint_stats, f, metric, "", help)
#define ROW_G(f, metric, help) STATS_GAUGE(struct hint_stats, f, metric, "", help)
static const struct stats_field hint_fields[] = {
	ROW_C(orders, "order_orders_total", "Loader orders received (feedfs prefetch --order)."),
	ROW_G(streams, "order_streams", "Orders held now (one per stream: a rank of a distributed loader)."),
	ROW_G(paths, "order_paths", "Paths in the current orders."),
	ROW_G(resolved, "order_resolved", "Paths of the current orders resolved so far."),
	ROW_G(bytes, "order_bytes", "Memory the current orders hold, charged to --max-memory."),
	ROW_C(missing, "order_missing_total", "Paths of an order not in the bucket (skipped)."),
	ROW_C(fetched, "order_fetched_total", "Files fetched ahead for an order."),
	ROW_C(hits, "order_hits_total", "Opens of a file fetched or in flight for the order."),
	ROW_C(wasted, "order_wasted_total", "Files fetched for an order and dropped unopened."),
	ROW_C(consumed, "order_consumed_total", "Files of an order opened."),
};
#undef ROW_C
#undef ROW_G

const struct stats_group hint_stats_group = {
	.name = "order",
	.fields = hint_fields,
	.n_fields = sizeof(hint_fields) / sizeof(hint_fields[0]),
	.snapshot_size = sizeof(struct hint_stats),
	.snapshot = hint_snapshot,
};
