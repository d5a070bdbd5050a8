/*
 * listing — the listing service under lookup and opendir: subtree listings and
 * what goes into the listing cache (fs->lcache).
 *
 * DESIGN
 * A directory without a fresh cached listing is first listed as a subtree:
 * its prefix WITHOUT a delimiter, page after page, up to fs->subtree_max_keys
 * keys (fs_subtree_list). When the whole subtree fits, fs_tree_* (names.c)
 * builds the listing of the directory and of every directory below it from
 * those keys, with exactly the rules of a delimited listing, and all of them
 * go into the cache: a walk of the tree then costs one LIST per 1000 keys
 * instead of one per directory (os.walk is sequential, so on a 10-50 ms store
 * that is also the number of round trips). Keys that arrive in any order are
 * fine. When the cap is reached and the keys came in byte order (S3's
 * guarantee; s3rver lists out of order), the directories wholly before the
 * last key read are complete and go into the cache; the rest of what was read
 * (the directory itself and those on the way to the last key) is dropped,
 * and so is everything when the order broke. The directory with all its
 * ancestors is marked too big for FS_BIG_TTL_FACTOR TTLs so the cap is paid
 * once, not at every expiry. Why a cap at all: the first readdir of a huge
 * tree would otherwise wait for all of it.
 *
 * A lookup's LIST of "P N/" asks for a full page for the same reason: when it
 * is not truncated it is N's subtree, and fs_subtree_from_page fills the cache
 * from it at no extra request.
 *
 * Install rule (fs_listing_install), for subtrees and for the delimited
 * listings dir.c builds alike: a listing replaces a cached one only when it is
 * not older (fetched_ms), so a slow walk never undoes a newer one.
 *
 * Locks: the listing functions take fs->lock only around cache updates, never
 * across an S3 request; the _cached/_install helpers expect it held.
 *
 * Single-flight: a subtree listing, and the listing resolve.c makes for
 * loader-order prefetch, register their directory in fs->inflight while they
 * run. A lookup in that directory that misses the cache waits for it and
 * answers from what it installed (fs.c do_lookup); a second subtree listing
 * of the same directory waits for the first instead of paying twice. Who
 * waits holds no lock but fs->lock, which the wait releases.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/buf.h"
#include "feedfs/log.h"
#include "feedfs/s3.h"
#include "feedfs/util.h"

#define TAG "fs"

struct fs_listing *fs_listing_cached(struct fs *fs, const char *path, size_t len,
				     int64_t now_ms)
{
	struct fs_listing *l;

	/* Several sources: the root lists their names, for good (source.c). */
	if (fs->multi && len == 0)
		return fs->root_listing;
	l = fs_lcache_get(&fs->lcache, path, len, now_ms, fs->opts.metadata_ttl_ms);
	/* A snapshot answers every miss, from the file (snapview.c). */
	if (!l && fs_path_snap(fs, path, len))
		l = fs_snap_listing_locked(fs, path, len, now_ms);
	return l;
}

int fs_listing_install(struct fs *fs, const char *path, size_t len, struct fs_listing *l,
		       int64_t now_ms)
{
	struct fs_listing *cur = fs_lcache_get(&fs->lcache, path, len, now_ms,
					       fs->opts.metadata_ttl_ms);

	int r;

	if (cur && cur->fetched_ms > l->fetched_ms)
		return 0;
	r = fs_lcache_put(&fs->lcache, path, len, l);
	if (fs->meta_max)
		fs_meta_trim_listings(fs);
	return r;
}

void fs_listing_log_hidden(const char *prefix, uint64_t hidden)
{
	if (hidden)
		log_info(TAG, "%llu key(s) under '%s' hidden: not POSIX names "
			 "(empty, '.', '..', NUL or over 255 bytes)",
			 (unsigned long long)hidden, prefix);
}

/* Is directory d on the path of `last` (itself or an ancestor of it)? */
static int on_path(const struct fs_tree_dir *d, const char *last, size_t last_len)
{
	return d->path_len == 0 ||
	       (last_len > d->path_len && memcmp(last, d->path, d->path_len) == 0 &&
		last[d->path_len] == '/');
}

/*
 * Put the listings of a finished tree in the cache (fs->lock not held): all
 * of them, or with `last` (the mount-relative path of the greatest key read,
 * when the listing stopped at its cap but came in byte order) all but the
 * root and the directories on the way to `last`, which may hold keys not read
 * yet; every other directory's keys all sort before `last` and were read.
 */
static void tree_install(struct fs *fs, struct fs_tree *t, const char *prefix,
			 const char *last, size_t last_len)
{
	int64_t now = util_now_ms();

	fs_tree_finish(t);
	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; i < t->n; i++) {
		const struct fs_tree_dir *d = &t->dirs[i];

		if (last && on_path(d, last, last_len))
			continue;
		if (fs_listing_install(fs, d->path, d->path_len, d->l, now) < 0)
			break;      /* out of memory: the rest is listed when needed */
	}
	pthread_mutex_unlock(&fs->lock);
	FS_STAT_ADD(fs, subtree_dirs, t->n);
	if (t->hidden) {
		FS_STAT_ADD(fs, hidden, t->hidden);
		fs_listing_log_hidden(prefix, t->hidden);
	}
}

/* Place one page's objects in t. 0 or -ENOMEM. */
static int tree_add_page(struct fs_tree *t, const char *prefix, size_t prefix_len,
			 const struct s3_list_page *pg)
{
	for (size_t i = 0; i < pg->n_objects; i++) {
		const struct s3_object *o = &pg->objects[i];
		const char *rel;
		size_t rel_len;
		int r;

		/* The server answered for another prefix: nothing we can place. */
		if (fs_key_path(prefix, prefix_len, o->key, o->key_len, 0, &rel, &rel_len) < 0) {
			t->hidden++;
			continue;
		}
		r = fs_tree_add(t, rel, rel_len, o->size, o->mtime_ms, o->etag);
		if (r < 0)
			return r;
	}
	return 0;
}

void fs_subtree_from_page(struct fs *fs, const char *path, size_t path_len,
			  const char *prefix, size_t prefix_len, const struct s3_list_page *pg)
{
	struct fs_tree t;

	/* Common prefixes would mean a delimiter was used: not a subtree. */
	if (pg->truncated || pg->n_prefixes)
		return;
	if (fs_tree_init(&t, path, path_len, util_now_ms()) < 0)
		return;
	if (tree_add_page(&t, prefix, prefix_len, pg) == 0) {
		FS_STAT_INC(fs, subtree_walks);
		tree_install(fs, &t, prefix, NULL, 0);
	}
	fs_tree_cleanup(&t);
}

/* Mark path and every directory above it too big for a subtree listing: each
 * of them holds at least as many keys (fs->lock held). */
static void mark_big_locked(struct fs *fs, const char *path, size_t len, int64_t until_ms)
{
	for (;;) {
		const char *slash;

		fs_lcache_mark_big(&fs->lcache, path, len, until_ms);
		if (len == 0)
			return;
		slash = memrchr(path, '/', len);
		len = slash ? (size_t)(slash - path) : 0;
	}
}

int fs_listing_claim(struct fs *fs, struct fs_inflight *e, const char *path, size_t len)
{
	for (struct fs_inflight *i = fs->inflight; i; i = i->next)
		if (i->len == len && memcmp(i->path, path, len) == 0)
			return 0;
	e->path = path;
	e->len = len;
	e->joinable = 1;
	e->next = fs->inflight;
	fs->inflight = e;
	return 1;
}

void fs_listing_release(struct fs *fs, struct fs_inflight *e)
{
	for (struct fs_inflight **pp = &fs->inflight; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			break;
		}
	}
	pthread_cond_broadcast(&fs->inflight_done);
}

int fs_listing_wait(struct fs *fs, const char *path, size_t len)
{
	int waited = 0;

	for (;;) {
		struct fs_inflight *i;

		for (i = fs->inflight; i; i = i->next)
			if (i->joinable && i->len == len && memcmp(i->path, path, len) == 0)
				break;
		if (!i)
			return waited;
		waited = 1;
		pthread_cond_wait(&fs->inflight_done, &fs->lock);
	}
}

static int subtree_list(struct fs *fs, const char *path, size_t path_len, const char *prefix,
			size_t prefix_len, long max_keys, struct fs_inflight *me);

int fs_subtree_list(struct fs *fs, const char *path, size_t path_len, const char *prefix,
		    size_t prefix_len)
{
	return fs_subtree_list_max(fs, path, path_len, prefix, prefix_len, fs->subtree_max_keys);
}

int fs_subtree_list_max(struct fs *fs, const char *path, size_t path_len, const char *prefix,
			size_t prefix_len, long max_keys)
{
	struct fs_inflight me;
	int r;

	/* A snapshot's directories, and the root of several sources, are never
	 * listed (list-ahead may still queue them): "too big" sends the caller
	 * to the cache, which answers. */
	if (!fs_path_listed(fs, path, path_len))
		return 0;
	pthread_mutex_lock(&fs->lock);
	if (!fs_listing_claim(fs, &me, path, path_len)) {
		/* Someone lists it now: take what that listing installs. */
		(void)fs_listing_wait(fs, path, path_len);
		r = fs_listing_cached(fs, path, path_len, util_now_ms()) ? 1 : 0;
		pthread_mutex_unlock(&fs->lock);
		return r;
	}
	pthread_mutex_unlock(&fs->lock);
	r = subtree_list(fs, path, path_len, prefix, prefix_len, max_keys, &me);
	pthread_mutex_lock(&fs->lock);
	fs_listing_release(fs, &me);
	pthread_mutex_unlock(&fs->lock);
	return r;
}

/* Does key a sort strictly before key b (bytes, as S3 orders them)? */
static int key_before(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c < 0 || (c == 0 && al < bl);
}

/*
 * Keeps `last` the greatest key of a subtree listing so far while its pages
 * come in byte order; 0 (and last emptied) once one did not.
 */
static int key_order_page(struct util_buf *last, const struct s3_list_page *pg)
{
	const struct s3_object *o = pg->objects;

	if (pg->n_objects == 0)
		return 1;
	if (last->len && !key_before(last->p, last->len, o[0].key, o[0].key_len))
		goto broken;
	for (size_t i = 1; i < pg->n_objects; i++)
		if (!key_before(o[i - 1].key, o[i - 1].key_len, o[i].key, o[i].key_len))
			goto broken;
	util_buf_reset(last);
	if (util_buf_append(last, o[pg->n_objects - 1].key, o[pg->n_objects - 1].key_len) == 0)
		return 1;
broken:
	util_buf_free(last);
	return 0;
}

/* The capped tree's complete directories into the cache: all but those on
 * the way to the greatest key read (its path from the mount root). */
static void tree_install_before(struct fs *fs, struct fs_tree *t, const char *dir,
				size_t dir_len, const char *prefix, size_t prefix_len,
				const struct util_buf *last)
{
	struct util_buf path = { 0 };
	const char *rel;
	size_t rel_len;

	if (fs_key_path(prefix, prefix_len, last->p, last->len, 0, &rel, &rel_len) < 0)
		return;
	if (dir_len) {
		util_buf_append(&path, dir, dir_len);
		util_buf_putc(&path, '/');
	}
	if (util_buf_append(&path, rel, rel_len) == 0) {
		FS_STAT_INC(fs, subtree_kept);
		tree_install(fs, t, prefix, path.p, path.len);
	}
	util_buf_free(&path);
}

static int subtree_list(struct fs *fs, const char *path, size_t path_len, const char *prefix,
			size_t prefix_len, long max_keys, struct fs_inflight *me)
{
	struct s3_client *s3 = fs_path_s3(fs, path, path_len);
	struct util_buf last = { 0 };  /* greatest key read, while in order */
	int ordered = 1;
	struct fs_tree t;
	char *token = NULL;
	uint64_t seen = 0;
	int r, pages = 0;

	r = fs_tree_init(&t, path, path_len, util_now_ms());
	if (r < 0)
		return r;
	for (;;) {
		struct s3_list_page pg;

		memset(&pg, 0, sizeof(pg));
		FS_STAT_INC(fs, list_pages);
		FS_STAT_INC(fs, subtree_pages);
		if (++pages == FS_JOIN_MAX_PAGES + 1) {
			pthread_mutex_lock(&fs->lock);
			me->joinable = 0;       /* too long to keep lookups waiting */
			pthread_cond_broadcast(&fs->inflight_done);
			pthread_mutex_unlock(&fs->lock);
		}
		r = s3_list(s3, prefix, NULL, token, 0, &pg);
		free(token);
		token = NULL;
		if (r < 0) {
			log_warn(TAG, "subtree listing of '%s' failed: %s", prefix, strerror(-r));
			break;
		}
		seen += pg.n_objects;
		ordered = ordered && key_order_page(&last, &pg);
		r = tree_add_page(&t, prefix, prefix_len, &pg);
		if (r == 0 && pg.truncated && pg.next_token && pg.next_token[0]) {
			token = strdup(pg.next_token);
			if (!token)
				r = -ENOMEM;
		}
		s3_list_page_cleanup(&pg);
		if (r < 0)
			break;
		if (!token) {
			FS_STAT_INC(fs, subtree_walks);
			tree_install(fs, &t, prefix, NULL, 0);
			r = 1;
			break;
		}
		if (seen >= (uint64_t)max_keys) {
			int64_t now = util_now_ms();

			FS_STAT_INC(fs, subtree_too_big);
			log_debug(TAG, "'%s' holds more than %ld keys: listed by level",
				  prefix, max_keys);
			pthread_mutex_lock(&fs->lock);
			mark_big_locked(fs, path, path_len,
					now + FS_BIG_TTL_FACTOR * fs->opts.metadata_ttl_ms);
			pthread_mutex_unlock(&fs->lock);
			/* In byte order (S3's, not s3rver's): the directories
			 * wholly before the last key are complete; keep them. */
			if (ordered && last.len)
				tree_install_before(fs, &t, path, path_len, prefix, prefix_len,
						    &last);
			free(token);
			r = 0;
			break;
		}
	}
	util_buf_free(&last);
	fs_tree_cleanup(&t);
	return r;
}

/* ---------- list-ahead: the next directories of a walk ---------- */

struct fs_lahead {
	pthread_mutex_t mu;             /* the queue; taken after fs->lock, never before */
	pthread_cond_t cv;
	char *q[FS_AHEAD_QUEUE];        /* paths (malloc'd), a ring */
	size_t qlen[FS_AHEAD_QUEUE];
	unsigned head, n;
	int stop;
	pthread_t th[FS_AHEAD_THREADS];
	int nth;
	/* Under fs->lock: how far the walk of one parent has been queued. */
	uint64_t parent_hash;
	long upto;
};

/* Queue path (fs->lock held); 0 when the queue is full. */
static int lahead_push(struct fs_lahead *la, const char *path, size_t len)
{
	char *p;
	int ok = 0;

	pthread_mutex_lock(&la->mu);
	if (la->n < FS_AHEAD_QUEUE && (p = malloc(len + 1))) {
		unsigned slot = (la->head + la->n) % FS_AHEAD_QUEUE;

		memcpy(p, path, len);
		p[len] = '\0';
		la->q[slot] = p;
		la->qlen[slot] = len;
		la->n++;
		ok = 1;
		pthread_cond_signal(&la->cv);
	}
	pthread_mutex_unlock(&la->mu);
	return ok;
}

static int inflight_has(const struct fs *fs, const char *path, size_t len)
{
	for (const struct fs_inflight *i = fs->inflight; i; i = i->next)
		if (i->len == len && memcmp(i->path, path, len) == 0)
			return 1;
	return 0;
}

/* The kernel caches a readdir of directory path within the TTL (dir.c): a
 * walk of it needs no listing (fs->lock held). */
static int rdc_fresh(const struct fs *fs, const char *path, size_t len, int64_t now)
{
	const struct fs_node *n = fs_inodes_find(&fs->inodes, path, len, 1);

	return n && n->rdc_ms && now - n->rdc_ms < fs->opts.metadata_ttl_ms;
}

void fs_list_ahead_locked(struct fs *fs, const char *dir, size_t dlen,
			  const struct fs_listing *pl, long i)
{
	struct fs_lahead *la = fs->lahead;
	uint64_t h = fs_hash64(dir, dlen, 0x61686561);
	char path[FS_KEY_MAX + 1];
	int64_t now = util_now_ms();
	long j, dirs = 0;

	if (!la || !fs->subtree_max_keys || dlen + 1 + FS_NAME_MAX > FS_KEY_MAX)
		return;
	if (la->parent_hash == h && la->upto > i + FS_AHEAD_DIRS / 2)
		return;                     /* queued far enough already */
	j = la->parent_hash == h && la->upto > i ? la->upto : i;
	memcpy(path, dir, dlen);
	if (dlen)
		path[dlen] = '/';
	for (; j < (long)pl->n && dirs < FS_AHEAD_DIRS; j++) {
		const struct fs_dirent *d = &pl->ents[j];
		size_t plen = dlen + (dlen ? 1 : 0) + d->name_len;

		if (!d->is_dir)
			continue;
		dirs++;
		memcpy(path + dlen + (dlen ? 1 : 0), d->name, d->name_len);
		if (fs_listing_cached(fs, path, plen, now) || inflight_has(fs, path, plen) ||
		    fs_lcache_is_big(&fs->lcache, path, plen, now) || rdc_fresh(fs, path, plen, now))
			continue;
		if (!lahead_push(la, path, plen))
			break;
	}
	la->parent_hash = h;
	la->upto = j;
}

static void *lahead_main(void *arg)
{
	struct fs *fs = arg;
	struct fs_lahead *la = fs->lahead;

	pthread_mutex_lock(&la->mu);
	for (;;) {
		char *path, *prefix;
		size_t len, plen;
		int skip;

		while (!la->n && !la->stop)
			pthread_cond_wait(&la->cv, &la->mu);
		if (la->stop)
			break;
		path = la->q[la->head];
		len = la->qlen[la->head];
		la->head = (la->head + 1) % FS_AHEAD_QUEUE;
		la->n--;
		pthread_mutex_unlock(&la->mu);

		/* The walk may have got there first. */
		pthread_mutex_lock(&fs->lock);
		skip = fs_listing_cached(fs, path, len, util_now_ms()) || inflight_has(fs, path, len) ||
		       rdc_fresh(fs, path, len, util_now_ms());
		pthread_mutex_unlock(&fs->lock);
		if (!skip && fs_path_key(fs, path, len, FS_KEY_DIR, &prefix, &plen) == 0) {
			FS_STAT_INC(fs, ahead_lists);
			(void)fs_subtree_list(fs, path, len, prefix, plen);
			free(prefix);
		}
		free(path);
		pthread_mutex_lock(&la->mu);
	}
	while (la->n) {
		free(la->q[la->head]);
		la->head = (la->head + 1) % FS_AHEAD_QUEUE;
		la->n--;
	}
	pthread_mutex_unlock(&la->mu);
	return NULL;
}

int fs_list_ahead_start(struct fs *fs)
{
	const char *env = getenv("FEEDFS_LIST_AHEAD");
	struct fs_lahead *la;

	if ((env && strcmp(env, "0") == 0) || !fs->subtree_max_keys)
		return 0;
	la = calloc(1, sizeof(*la));
	if (!la)
		return -ENOMEM;
	pthread_mutex_init(&la->mu, NULL);
	pthread_cond_init(&la->cv, NULL);
	la->upto = -1;
	fs->lahead = la;
	for (int i = 0; i < FS_AHEAD_THREADS; i++)
		if (pthread_create(&la->th[la->nth], NULL, lahead_main, fs) == 0)
			la->nth++;
	return 0;
}

void fs_list_ahead_stop(struct fs *fs)
{
	struct fs_lahead *la = fs->lahead;

	if (!la)
		return;
	pthread_mutex_lock(&la->mu);
	la->stop = 1;
	pthread_cond_broadcast(&la->cv);
	pthread_mutex_unlock(&la->mu);
	for (int i = 0; i < la->nth; i++)
		pthread_join(la->th[i], NULL);
	pthread_cond_destroy(&la->cv);
	pthread_mutex_destroy(&la->mu);
	free(la);
	fs->lahead = NULL;
}
