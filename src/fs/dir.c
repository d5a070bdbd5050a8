/*
 * dir — directory handles and readdir/readdirplus.
 *
 * DESIGN
 * opendir makes a handle that holds one listing (names_i.h). If the listing
 * cache (fs->lcache, by directory path) has a complete listing younger than
 * --metadata-ttl the handle shares it (no request at all).
 *
 * Otherwise the directory is first listed as a subtree: its prefix WITHOUT a
 * delimiter, page after page, up to fs->subtree_max_keys keys. When the whole
 * subtree fits, fs_tree_* (names.c) builds the listing of the directory and of
 * every directory below it from those keys, with exactly the rules of a
 * delimited listing, and all of them go into the cache: a walk of the tree
 * then costs one LIST per 1000 keys instead of one per directory (os.walk is
 * sequential, so on a 10-50 ms store that is also the number of round trips).
 * Keys that arrive in any order are fine; pages already read when the cap is
 * reached are dropped (using them needs key order, which s3rver lacks), and
 * the directory with all its ancestors is marked too big for 10 TTLs so the
 * cap is paid once, not at every expiry. Why a cap at all: the first readdir
 * of a huge tree would otherwise wait for all of it. A lookup's LIST of
 * "P N/" asks for a full page for the same reason: when it is not truncated
 * it is N's subtree and fills the cache at no extra request.
 *
 * A directory too big for that (or with subtree listings off: cap 0 or a zero
 * TTL) is listed as before: the handle builds a listing one delimited
 * ListObjectsV2 page at a time, only as far as the kernel's offset has got:
 * a 100k-entry directory is held once, in the listing, never also in a reply
 * queue. Objects and common prefixes of each page are merged into the listing,
 * which de-duplicates across pages (s3rver repeats prefixes) and lets a
 * directory shadow a file of the same name.
 *
 * Offsets: position 0 is ".", 1 is "..", 2+i is listing entry i. Entries are
 * only ever appended, so an offset means the same entry for the life of the
 * handle (telldir/seekdir, and the kernel's re-reads from its last offset).
 * When the walk completes the listing enters the cache; later lookups and
 * readdirs are answered from it until it is older than the TTL.
 *
 * Not done: readdir-ahead (listing the first subdirectories of a big directory
 * in parallel) and coalescing two concurrent subtree listings of one directory
 * (os.walk never does that; two readers would only pay twice).
 *
 * readdirplus gives each entry (not "." / "..") a node and one lookup count,
 * exactly as lookup would, so `ls -l` and os.walk need no request per entry.
 *
 * Known limit: on real S3 a file "x" can arrive on one page and the prefix "x/"
 * on a later one; the entry is upgraded to a directory in place, but the kernel
 * has already been told "file" at that offset. Lookups (and the next readdir)
 * see the directory.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/s3.h"
#include "feedfs/util.h"

#define TAG "fs"

struct fs_dirh {
	/* Lock order: taken before fs->lock. Held across S3 list requests (a
	 * handle is one reader's; the kernel serialises getdents on one file). */
	pthread_mutex_t lock;
	fuse_ino_t ino;
	fuse_ino_t parent_ino;
	char *path;                 /* the directory's path from the mount root */
	size_t path_len;
	char *prefix;               /* what to list: fs prefix + path + "/" */
	size_t prefix_len;
	struct fs_listing *l;       /* one reference */
	char *token;                /* next continuation token; NULL before the first page */
	int done;                   /* l is complete */
};

static struct fs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void dirh_free(struct fs_dirh *dh)
{
	if (!dh)
		return;
	fs_listing_put(dh->l);
	pthread_mutex_destroy(&dh->lock);
	free(dh->token);
	free(dh->path);
	free(dh->prefix);
	free(dh);
}

/* ---------- subtree listings ---------- */

/* Put every listing of a finished tree in the cache, unless the cache holds a
 * newer one for that path (fs->lock not held). */
static void tree_install(struct fs *fs, struct fs_tree *t, const char *prefix)
{
	int64_t now = util_now_ms();

	fs_tree_finish(t);
	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; i < t->n; i++) {
		const struct fs_tree_dir *d = &t->dirs[i];
		struct fs_listing *cur = fs_lcache_get(&fs->lcache, d->path, d->path_len, now,
						       fs->opts.metadata_ttl_ms);

		if (cur && cur->fetched_ms > t->fetched_ms)
			continue;
		if (fs_lcache_put(&fs->lcache, d->path, d->path_len, d->l) < 0)
			break;      /* out of memory: the rest is listed when needed */
	}
	pthread_mutex_unlock(&fs->lock);
	FS_STAT_ADD(fs, subtree_dirs, t->n);
	if (t->hidden) {
		FS_STAT_ADD(fs, hidden, t->hidden);
		log_info(TAG, "%llu key(s) under '%s' hidden: not POSIX names "
			 "(empty, '.', '..', NUL or over 255 bytes)",
			 (unsigned long long)t->hidden, prefix);
	}
}

/* Place one page's objects in t. 0 or -ENOMEM. */
static int tree_add_page(struct fs_tree *t, const char *prefix, size_t prefix_len,
			 const struct s3_list_page *pg)
{
	for (size_t i = 0; i < pg->n_objects; i++) {
		const struct s3_object *o = &pg->objects[i];
		int r;

		/* The server answered for another prefix: nothing we can place. */
		if (o->key_len < prefix_len || memcmp(o->key, prefix, prefix_len) != 0) {
			t->hidden++;
			continue;
		}
		r = fs_tree_add(t, o->key + prefix_len, o->key_len - prefix_len, o->size,
				o->mtime_ms, o->etag);
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
		tree_install(fs, &t, prefix);
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

int fs_subtree_list(struct fs *fs, const char *path, size_t path_len, const char *prefix,
		    size_t prefix_len)
{
	struct fs_tree t;
	char *token = NULL;
	uint64_t seen = 0;
	int r;

	r = fs_tree_init(&t, path, path_len, util_now_ms());
	if (r < 0)
		return r;
	for (;;) {
		struct s3_list_page pg;

		memset(&pg, 0, sizeof(pg));
		FS_STAT_INC(fs, list_pages);
		FS_STAT_INC(fs, subtree_pages);
		r = s3_list(fs->s3, prefix, NULL, token, 0, &pg);
		free(token);
		token = NULL;
		if (r < 0) {
			log_warn(TAG, "subtree listing of '%s' failed: %s", prefix, strerror(-r));
			break;
		}
		seen += pg.n_objects;
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
			tree_install(fs, &t, prefix);
			r = 1;
			break;
		}
		if (seen >= (uint64_t)fs->subtree_max_keys) {
			int64_t now = util_now_ms();

			FS_STAT_INC(fs, subtree_too_big);
			log_debug(TAG, "'%s' holds more than %ld keys: listed by level",
				  prefix, fs->subtree_max_keys);
			pthread_mutex_lock(&fs->lock);
			mark_big_locked(fs, path, path_len,
					now + FS_BIG_TTL_FACTOR * fs->opts.metadata_ttl_ms);
			pthread_mutex_unlock(&fs->lock);
			free(token);
			r = 0;
			break;
		}
	}
	fs_tree_cleanup(&t);
	return r;
}

/* Fill dh's path, prefix and parent from node ino (fs->lock held). */
static int dirh_init_locked(struct fs *fs, struct fs_dirh *dh, fuse_ino_t ino)
{
	struct fs_node *n = fs_inodes_get(&fs->inodes, ino);

	if (!n || !n->is_dir)
		return n ? -ENOTDIR : -ESTALE;
	dh->path = strndup(n->path, n->path_len);
	dh->path_len = n->path_len;
	dh->prefix = fs_dir_prefix(fs, n, &dh->prefix_len);
	if (!dh->path || !dh->prefix)
		return -ENOMEM;
	if (n->path_len == 0) {
		dh->parent_ino = FS_ROOT_INO;
	} else {
		const char *slash = memrchr(n->path, '/', n->path_len);
		size_t plen = slash ? (size_t)(slash - n->path) : 0;
		struct fs_node *p = fs_inodes_find(&fs->inodes, n->path, plen, 1);

		dh->parent_ino = p ? p->ino : fs_ino_hash(n->path, plen, 1);
	}
	return 0;
}

/* Share a fresh cached listing of dh's directory (fs->lock held). 1 if found. */
static int dirh_share_cached(struct fs *fs, struct fs_dirh *dh, int64_t now_ms)
{
	struct fs_listing *l = fs_lcache_get(&fs->lcache, dh->path, dh->path_len, now_ms,
					     fs->opts.metadata_ttl_ms);

	if (!l)
		return 0;
	dh->l = l;
	fs_listing_get(l);
	dh->done = 1;
	return 1;
}

/*
 * A directory without a fresh listing is first listed as a subtree (one flat
 * listing of it and everything below, fs_subtree_list) unless it is known to
 * be too big; if that fails or is too big, the handle lists it page by page
 * with a delimiter as readdir goes. A failed subtree listing is not an error
 * here: the delimited listing will report (or survive) the same trouble.
 */
static int do_opendir(struct fs *fs, fuse_ino_t ino, struct fs_dirh **out)
{
	struct fs_dirh *dh = calloc(1, sizeof(*dh));
	int64_t now = util_now_ms();
	int r, big;

	if (!dh)
		return -ENOMEM;
	pthread_mutex_init(&dh->lock, NULL);
	dh->ino = ino;

	pthread_mutex_lock(&fs->lock);
	r = dirh_init_locked(fs, dh, ino);
	if (r < 0 || dirh_share_cached(fs, dh, now))
		goto unlock;
	big = !fs->subtree_max_keys ||
	      fs_lcache_is_big(&fs->lcache, dh->path, dh->path_len, now);
	pthread_mutex_unlock(&fs->lock);

	if (!big && fs_subtree_list(fs, dh->path, dh->path_len, dh->prefix, dh->prefix_len) > 0) {
		pthread_mutex_lock(&fs->lock);
		/* Just installed; only a cache too small for it can have lost it. */
		if (dirh_share_cached(fs, dh, util_now_ms()))
			goto unlock;
		pthread_mutex_unlock(&fs->lock);
	}
	pthread_mutex_lock(&fs->lock);
	dh->l = fs_listing_new(util_now_ms());
	if (!dh->l)
		r = -ENOMEM;
unlock:
	pthread_mutex_unlock(&fs->lock);
	if (r < 0) {
		dirh_free(dh);
		return r;
	}
	*out = dh;
	return 0;
}

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_dirh *dh;
	int r = do_opendir(req_fs(req), ino, &dh);

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	fi->fh = (uintptr_t)dh;
	if (fuse_reply_open(req, fi) == -ENOENT)
		dirh_free(dh);
}

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	dirh_free((struct fs_dirh *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void add_item(struct fs *fs, struct fs_dirh *dh, const char *item, size_t len,
		     int is_prefix, const struct s3_object *o)
{
	enum fs_name_verdict why;
	const char *name = NULL;
	size_t name_len = 0, idx;
	enum fs_item_kind k = fs_item_classify(dh->prefix, dh->prefix_len, item, len, is_prefix,
					       &name, &name_len, &why);

	switch (k) {
	case FS_ITEM_SELF:
		return;             /* the directory's own "dir/" marker */
	case FS_ITEM_HIDDEN:
		dh->l->hidden++;
		FS_STAT_INC(fs, hidden);
		log_debug(TAG, "hidden key under '%s' (%zu bytes): reason %d",
			  dh->prefix, len, (int)why);
		return;
	case FS_ITEM_FILE:
		fs_listing_add(dh->l, name, name_len, 0, o->size, o->mtime_ms, o->etag, &idx);
		return;
	case FS_ITEM_DIR:
		fs_listing_add(dh->l, name, name_len, 1, 0, 0, NULL, &idx);
		return;
	}
}

/* Fetch the next page into dh->l (dh->lock held). 0 or -errno. */
static int fetch_page(struct fs *fs, struct fs_dirh *dh)
{
	struct s3_list_page pg;
	struct fs_listing *cached;
	int r;

	memset(&pg, 0, sizeof(pg));
	FS_STAT_INC(fs, list_pages);
	r = s3_list(fs->s3, dh->prefix, "/", dh->token, 0, &pg);
	if (r < 0) {
		log_warn(TAG, "listing '%s' failed: %s", dh->prefix, strerror(-r));
		return r;
	}
	for (size_t i = 0; i < pg.n_objects; i++)
		add_item(fs, dh, pg.objects[i].key, pg.objects[i].key_len, 0, &pg.objects[i]);
	for (size_t i = 0; i < pg.n_prefixes; i++)
		add_item(fs, dh, pg.prefixes[i], pg.prefix_lens[i], 1, NULL);

	free(dh->token);
	dh->token = NULL;
	if (pg.truncated && pg.next_token && pg.next_token[0]) {
		dh->token = strdup(pg.next_token);
		if (!dh->token) {
			s3_list_page_cleanup(&pg);
			return -ENOMEM;
		}
	}
	s3_list_page_cleanup(&pg);
	if (dh->token)
		return 0;

	/* Complete: immutable from now on, so it can be shared with the node. */
	dh->done = 1;
	dh->l->complete = 1;
	if (dh->l->hidden)
		log_info(TAG, "%llu key(s) under '%s' hidden: not POSIX names "
			 "(empty, '.', '..', NUL or over 255 bytes)",
			 (unsigned long long)dh->l->hidden, dh->prefix);
	pthread_mutex_lock(&fs->lock);
	cached = fs_lcache_get(&fs->lcache, dh->path, dh->path_len, util_now_ms(),
			       fs->opts.metadata_ttl_ms);
	if (!cached || cached->fetched_ms <= dh->l->fetched_ms)
		fs_lcache_put(&fs->lcache, dh->path, dh->path_len, dh->l);
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

static char *join(const char *dir, size_t dir_len, const char *name, size_t name_len,
		  size_t *len)
{
	size_t n = dir_len + (dir_len ? 1 : 0) + name_len;
	char *p = malloc(n + 1);

	if (!p)
		return NULL;
	memcpy(p, dir, dir_len);
	if (dir_len)
		p[dir_len] = '/';
	memcpy(p + n - name_len, name, name_len);
	p[n] = '\0';
	*len = n;
	return p;
}

/* Fill buf with entries from position off. Returns bytes used, or -errno
 * when nothing could be returned. */
static ssize_t do_readdir(struct fs *fs, fuse_req_t req, struct fs_dirh *dh, char *buf,
			  size_t size, off_t off, int plus)
{
	size_t used = 0;
	int r = 0;

	pthread_mutex_lock(&dh->lock);
	for (off_t p = off < 0 ? 0 : off;; p++) {
		struct fuse_entry_param e;
		const struct fs_dirent *d;
		const char *name;
		size_t need, i;

		memset(&e, 0, sizeof(e));
		if (p < 2) {
			name = p == 0 ? "." : "..";
			e.attr.st_ino = p == 0 ? dh->ino : dh->parent_ino;
			e.attr.st_mode = S_IFDIR;
			/* No lookup count for "." and "..": e.ino stays 0. */
			need = plus ? fuse_add_direntry_plus(req, NULL, 0, name, &e, p + 1)
				    : fuse_add_direntry(req, NULL, 0, name, &e.attr, p + 1);
			if (used + need > size)
				break;
			if (plus)
				fuse_add_direntry_plus(req, buf + used, size - used, name, &e, p + 1);
			else
				fuse_add_direntry(req, buf + used, size - used, name, &e.attr, p + 1);
			used += need;
			continue;
		}
		i = (size_t)(p - 2);
		while (i >= dh->l->n && !dh->done) {
			r = fetch_page(fs, dh);
			if (r < 0)
				goto out;
		}
		if (i >= dh->l->n)
			break;                      /* end of directory */
		d = &dh->l->ents[i];
		need = plus ? fuse_add_direntry_plus(req, NULL, 0, d->name, &e, p + 1)
			    : fuse_add_direntry(req, NULL, 0, d->name, &e.attr, p + 1);
		if (used + need > size)
			break;
		if (plus) {
			size_t plen;
			char *path = join(dh->path, dh->path_len, d->name, d->name_len, &plen);
			struct fs_node *n;

			if (!path) {
				r = -ENOMEM;
				goto out;
			}
			pthread_mutex_lock(&fs->lock);
			n = fs_inodes_get_path(&fs->inodes, path, plen, d->is_dir);
			if (n) {
				fs_node_set_from_dirent(n, d, dh->l->fetched_ms);
				n->nlookup++;
				fs_fill_entry(fs, n, &e);
			}
			pthread_mutex_unlock(&fs->lock);
			free(path);
			if (!n) {
				r = -ENOMEM;
				goto out;
			}
			fuse_add_direntry_plus(req, buf + used, size - used, d->name, &e, p + 1);
		} else {
			size_t plen;
			char *path = join(dh->path, dh->path_len, d->name, d->name_len, &plen);

			/* d_ino is informational for plain readdir: the number the
			 * entry gets when looked up (barring a collision). */
			e.attr.st_ino = path ? fs_ino_hash(path, plen, d->is_dir) : 0;
			e.attr.st_mode = d->is_dir ? S_IFDIR : S_IFREG;
			free(path);
			fuse_add_direntry(req, buf + used, size - used, d->name, &e.attr, p + 1);
		}
		used += need;
	}
out:
	pthread_mutex_unlock(&dh->lock);
	if (r < 0 && used == 0)
		return r;
	return (ssize_t)used;
}

static void readdir_common(fuse_req_t req, size_t size, off_t off,
			   struct fuse_file_info *fi, int plus)
{
	struct fs_dirh *dh = (struct fs_dirh *)(uintptr_t)fi->fh;
	char *buf = malloc(size ? size : 1);
	ssize_t r;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = do_readdir(req_fs(req), req, dh, buf, size, off, plus);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
	free(buf);
}

void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	readdir_common(req, size, off, fi, 0);
}

void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	readdir_common(req, size, off, fi, 1);
}
