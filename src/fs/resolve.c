/*
 * resolve — a mount-relative path to its object (key, ETag, size) from the
 * listing of its directory, for callers that name files without opening them
 * (loader-order prefetch, hint.h).
 *
 * DESIGN
 * A loader's order names thousands of files of a few directories. A HEAD per
 * name would cost a round trip each, more than the prefetch saves; the
 * listing cache (listing.c) already holds every directory a walk or a lookup
 * listed, with each file's size and ETag. So: a fresh cached listing answers
 * (no request); otherwise the directory is listed once, as a subtree when
 * that is allowed (which also fills the cache for the lookups the loader's
 * opens make next), else with a delimiter page after page, and the answer
 * comes from that listing. The ETag is the one the listing saw: an open
 * within the metadata TTL reads that same version, and a later one that
 * finds another version reads it with its own ETag (ahead keys by ETag), so a
 * stale answer here costs a wasted fetch, never wrong bytes.
 * Locks: fs->lock only around cache reads and installs, never across a LIST.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/s3.h"
#include "feedfs/util.h"

#define TAG "fs"

/* Answer from listing l (fs->lock held, or l referenced). */
static int from_listing(struct fs *fs, const struct fs_listing *l, const char *path,
			size_t len, const char *name, size_t nlen, char **key, size_t *key_len,
			char *etag, size_t etag_len, uint64_t *size)
{
	long i = fs_listing_find(l, name, nlen);
	const struct fs_dirent *d;

	if (i < 0)
		return -ENOENT;
	d = &l->ents[i];
	if (d->is_dir)
		return -EISDIR;
	{
		char buf[FS_ETAG_MAX];

		fs_dirent_etag(d, buf);
		snprintf(etag, etag_len, "%s", buf);
	}
	*size = d->size;
	return fs_path_key(fs, path, len, 0, key, key_len);
}

/* One directory listed with a delimiter, every page; a new reference on a
 * complete listing (also installed in the cache), or -errno. No lock held.
 * me: this listing's entry in fs->inflight, or NULL when it has none. */
static int list_dir(struct fs *fs, const char *dir, size_t dlen, struct fs_inflight *me,
		    struct fs_listing **out)
{
	int pages = 0;
	struct fs_listing *l;
	char *prefix, *token = NULL;
	size_t plen, idx;
	int r;

	if (!fs_path_listed(fs, dir, dlen))
		return -ENOENT;     /* never: the snapshot (or the root) answered from the cache */
	r = fs_path_key(fs, dir, dlen, FS_KEY_DIR, &prefix, &plen);
	if (r < 0)
		return r;
	l = fs_listing_new(util_now_ms());
	if (!l) {
		free(prefix);
		return -ENOMEM;
	}
	for (;;) {
		struct s3_list_page pg;

		memset(&pg, 0, sizeof(pg));
		FS_STAT_INC(fs, list_pages);
		if (me && ++pages == FS_JOIN_MAX_PAGES + 1) {
			pthread_mutex_lock(&fs->lock);
			me->joinable = 0;       /* too long to keep lookups waiting */
			pthread_cond_broadcast(&fs->inflight_done);
			pthread_mutex_unlock(&fs->lock);
		}
		r = s3_list(fs_path_s3(fs, dir, dlen), prefix, "/", token, 0, &pg);
		free(token);
		token = NULL;
		if (r < 0)
			break;
		for (size_t i = 0; i < pg.n_objects + pg.n_prefixes; i++) {
			int is_prefix = i >= pg.n_objects;
			const struct s3_object *o = is_prefix ? NULL : &pg.objects[i];
			const char *item = o ? o->key : pg.prefixes[i - pg.n_objects];
			size_t item_len = o ? o->key_len : pg.prefix_lens[i - pg.n_objects];
			enum fs_name_verdict why;
			const char *name = NULL;
			size_t nlen = 0;

			switch (fs_item_classify(prefix, plen, item, item_len, is_prefix, &name,
						 &nlen, &why)) {
			case FS_ITEM_FILE:
				fs_listing_add(l, name, nlen, 0, o->size, o->mtime_ms, o->etag, &idx);
				break;
			case FS_ITEM_DIR:
				fs_listing_add(l, name, nlen, 1, 0, 0, NULL, &idx);
				break;
			case FS_ITEM_HIDDEN:
				l->hidden++;
				break;
			case FS_ITEM_SELF:
				break;
			}
		}
		if (pg.truncated && pg.next_token && pg.next_token[0] &&
		    !(token = strdup(pg.next_token)))
			r = -ENOMEM;
		s3_list_page_cleanup(&pg);
		if (r < 0 || !token)
			break;
	}
	if (r < 0) {
		log_warn(TAG, "listing '%s' to resolve a path failed: %s", prefix, strerror(-r));
		fs_listing_put(l);
		free(prefix);
		return r;
	}
	fs_listing_done(l);
	if (l->hidden) {
		FS_STAT_ADD(fs, hidden, l->hidden);
		fs_listing_log_hidden(prefix, l->hidden);
	}
	free(prefix);
	pthread_mutex_lock(&fs->lock);
	(void)fs_listing_install(fs, dir, dlen, l, util_now_ms());
	pthread_mutex_unlock(&fs->lock);
	*out = l;
	return 0;
}

int fs_resolve(struct fs *fs, const char *path, size_t len, char **key, size_t *key_len,
	       char *etag, size_t etag_len, uint64_t *size)
{
	const char *slash = memrchr(path, '/', len), *name = slash ? slash + 1 : path;
	size_t dlen = slash ? (size_t)(slash - path) : 0, nlen = len - (size_t)(name - path);
	struct fs_listing *l;
	char *k;
	size_t kl;
	int r, big;

	/* The path's own rules first (segments, lengths): a bad one is in no bucket. */
	r = fs_key_for_path("", 0, path, len, &k, &kl);
	if (r < 0)
		return r;
	free(k);
	for (int pass = 0; pass < 2; pass++) {
		int64_t now = util_now_ms();

		pthread_mutex_lock(&fs->lock);
		l = fs_listing_cached(fs, path, dlen, now);
		if (l) {
			r = from_listing(fs, l, path, len, name, nlen, key, key_len, etag, etag_len,
					 size);
			pthread_mutex_unlock(&fs->lock);
			return r;
		}
		big = !fs->subtree_max_keys || fs_lcache_is_big(&fs->lcache, path, dlen, now);
		pthread_mutex_unlock(&fs->lock);
		if (pass || big)
			break;
		/* Not cached: a subtree listing fills the cache for this directory
		 * and everything below; look again. */
		r = fs_path_key(fs, path, dlen, FS_KEY_DIR, &k, &kl);
		if (r < 0)
			return r;
		r = fs_subtree_list(fs, path, dlen, k, kl);
		free(k);
		if (r < 0)
			return r;
	}
	/* Too big for a subtree, or nothing is cached (a zero TTL): list it here,
	 * registered so that lookups in the directory wait for this listing. */
	{
		struct fs_inflight me;
		int mine;

		pthread_mutex_lock(&fs->lock);
		mine = fs_listing_claim(fs, &me, path, dlen);
		pthread_mutex_unlock(&fs->lock);
		r = list_dir(fs, path, dlen, mine ? &me : NULL, &l);
		if (mine) {
			pthread_mutex_lock(&fs->lock);
			fs_listing_release(fs, &me);
			pthread_mutex_unlock(&fs->lock);
		}
	}
	if (r < 0)
		return r;
	r = from_listing(fs, l, path, len, name, nlen, key, key_len, etag, etag_len, size);
	fs_listing_put(l);
	return r;
}
