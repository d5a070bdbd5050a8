/*
 * dir — directory handles and readdir/readdirplus.
 *
 * DESIGN
 * opendir makes a handle that holds one listing (names_i.h). If the listing
 * cache (fs->lcache, by directory path) has a complete listing younger than
 * --metadata-ttl the handle shares it (no request at all).
 *
 * Otherwise the directory is first listed as a subtree (listing.c: one flat
 * listing of it and everything below, which fills the cache for the whole
 * tree) unless it is known to be too big.
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
 * When the walk completes the listing enters the cache (fs_listing_install);
 * later lookups and readdirs are answered from it until it is older than the
 * TTL. Entries become FUSE entries through node.c, as lookup's do.
 *
 * Not done: readdir-ahead (listing the first subdirectories of a big directory
 * in parallel).
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

#include "feedfs/keep.h"

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

/* Fill dh's path, prefix and parent from node ino (fs->lock held). */
static int dirh_init_locked(struct fs *fs, struct fs_dirh *dh, fuse_ino_t ino)
{
	struct fs_node *n = fs_inodes_get(&fs->inodes, ino);
	int r;

	if (!n || !n->is_dir)
		return n ? -ENOTDIR : -ESTALE;
	dh->path = strndup(n->path, n->path_len);
	dh->path_len = n->path_len;
	if (!dh->path)
		return -ENOMEM;
	r = fs_path_key(fs, n->path, n->path_len, FS_KEY_DIR, &dh->prefix, &dh->prefix_len);
	if (r < 0)
		return r;
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
	struct fs_listing *l = fs_listing_cached(fs, dh->path, dh->path_len, now_ms);

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

/* The kernel is done with fh: free what this process holds for it. */
static void dir_release(struct fs *fs, uint64_t fh)
{
	struct fs_dirh *dh;

	if (!fs->keep) {
		dirh_free((struct fs_dirh *)(uintptr_t)fh);
		return;
	}
	if (fh == 0 || fh > KEEP_SLOTS)
		return;
	pthread_mutex_lock(&fs->lock);
	dh = fs->dirs[fh - 1];
	__atomic_store_n(&fs->dirs[fh - 1], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->lock);
	keep_handle_close(fs->keep, fh);
	if (dh)
		dirh_free(dh);
}

/* The handle fh names: under a keeper one the previous server opened is
 * opened again (the listing is fetched again; offsets index the same sorted
 * listing). NULL when fh names no open directory. */
static struct fs_dirh *dir_of(struct fs *fs, uint64_t fh, fuse_ino_t ino)
{
	struct fs_dirh *dh, *had;
	uint64_t sino, size;

	if (!fs->keep)
		return (struct fs_dirh *)(uintptr_t)fh;
	if (fh == 0 || fh > KEEP_SLOTS)
		return NULL;
	dh = __atomic_load_n(&fs->dirs[fh - 1], __ATOMIC_ACQUIRE);
	if (dh)
		return dh;
	if (keep_handle_get(fs->keep, fh, KEEP_DIR, &sino, &size, NULL) < 0 || sino != ino ||
	    do_opendir(fs, ino, &dh) < 0)
		return NULL;
	pthread_mutex_lock(&fs->lock);
	had = fs->dirs[fh - 1];
	if (!had)
		__atomic_store_n(&fs->dirs[fh - 1], dh, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->lock);
	if (had) {
		dirh_free(dh);
		return had;
	}
	return dh;
}

void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = req_fs(req);
	struct fs_dirh *dh;
	int r = do_opendir(fs, ino, &dh);

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (fs->keep) {
		int64_t fh = keep_handle_open(fs->keep, KEEP_DIR, ino, 0, NULL);

		if (fh < 0) {
			dirh_free(dh);
			fuse_reply_err(req, ENFILE);
			return;
		}
		pthread_mutex_lock(&fs->lock);
		__atomic_store_n(&fs->dirs[fh - 1], dh, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&fs->lock);
		fi->fh = (uint64_t)fh;
	} else {
		fi->fh = (uintptr_t)dh;
	}
	if (fuse_reply_open(req, fi) == -ENOENT)
		dir_release(fs, fi->fh);
}

void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	dir_release(req_fs(req), fi->fh);
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
	fs_listing_done(dh->l);
	fs_listing_log_hidden(dh->prefix, dh->l->hidden);
	pthread_mutex_lock(&fs->lock);
	/* Out of memory only costs the cache entry: the handle has its listing. */
	(void)fs_listing_install(fs, dh->path, dh->path_len, dh->l, util_now_ms());
	pthread_mutex_unlock(&fs->lock);
	return 0;
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
			char *path = NULL;
			struct fs_node *n;

			r = fs_path_join(dh->path, dh->path_len, d->name, d->name_len, &path, &plen);
			if (r < 0)
				goto out;
			pthread_mutex_lock(&fs->lock);
			n = fs_inodes_get_path(&fs->inodes, path, plen, d->is_dir);
			if (n) {
				fs_node_set_from_dirent(&fs->inodes, n, d, dh->l->fetched_ms);
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
			char *path = NULL;

			/* d_ino is informational for plain readdir: the number the
			 * entry gets when looked up (barring a collision). */
			fs_path_join(dh->path, dh->path_len, d->name, d->name_len, &path, &plen);
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

static void readdir_common(fuse_req_t req, fuse_ino_t fi_ino, size_t size, off_t off,
			   struct fuse_file_info *fi, int plus)
{
	struct fs_dirh *dh = dir_of(req_fs(req), fi->fh, fi_ino);
	char *buf = malloc(size ? size : 1);
	ssize_t r;

	if (!dh || !buf) {
		free(buf);
		fuse_reply_err(req, dh ? ENOMEM : EBADF);
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
	readdir_common(req, ino, size, off, fi, 0);
}

void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	readdir_common(req, ino, size, off, fi, 1);
}
