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
 * The kernel decides when to ask for it (FUSE_CAP_READDIRPLUS_AUTO, fs.c
 * op_init): the first batch of a directory, then only while the reader also
 * looks entries up. A walk that only needs names and types (find -type f)
 * then makes no node per file, so a million-key walk holds listings, not a
 * million nodes; a stat after a plain readdir is a lookup answered from the
 * cached listing, with no request to the store.
 *
 * The kernel's readdir cache (FOPEN_CACHE_DIR): every handle asks the kernel
 * to keep what it reads in the directory's page cache, and opendir lets the
 * kernel answer from it (keep_cache) exactly when what it holds is the
 * listing of generation rdc_ms (the node remembers the fetched_ms of the
 * listing it last served) and that listing is still within --metadata-ttl.
 * A warm walk is then answered by the kernel with no readdir request at all,
 * and a listing that expired is replaced by a new generation, which opens
 * without keep_cache: the kernel drops the old one, so changes still show
 * within one TTL. Not while a stat walk runs past the low mark of the
 * metadata share (stat_walk_locked): then the kernel's cache would answer
 * names whose dentries are gone, and each stat would be a lookup. When that
 * listing has left our cache (the metadata
 * budget) the handle is opened lazily: nothing is listed unless the kernel
 * does call readdir (its cache was reclaimed), and then the listing is
 * fetched again. Known limit: if the kernel lost only the tail of its cache
 * and the bucket changed meanwhile, offsets past what it kept index the new
 * listing (counted as fs.readdir_regen).
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
	struct fs_listing *l;       /* one reference; NULL: lazy (opened on the
				     * kernel's cache, listed at the first readdir) */
	char *token;                /* next continuation token; NULL before the first page */
	int done;                   /* l is complete */
	int64_t rdc_ms;             /* a lazy handle: the generation the kernel caches */
	struct fs_dirh *prev, *next; /* fs->open_dirs, under fs->lock, once published */
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

/* dh is the kernel's now (fs->lock held): track it, so that a handle the
 * kernel never releases is still freed at exit (fs_close_open_dirs). */
static void open_dirs_add_locked(struct fs *fs, struct fs_dirh *dh)
{
	dh->prev = NULL;
	dh->next = fs->open_dirs;
	if (fs->open_dirs)
		fs->open_dirs->prev = dh;
	fs->open_dirs = dh;
}

static void open_dirs_del_locked(struct fs *fs, struct fs_dirh *dh)
{
	if (dh->prev)
		dh->prev->next = dh->next;
	else
		fs->open_dirs = dh->next;
	if (dh->next)
		dh->next->prev = dh->prev;
	dh->prev = dh->next = NULL;
}

void fs_close_open_dirs(struct fs *fs)
{
	struct fs_dirh *dh;

	pthread_mutex_lock(&fs->lock);
	for (unsigned i = 0; fs->dirs && i < KEEP_SLOTS; i++)
		__atomic_store_n(&fs->dirs[i], NULL, __ATOMIC_RELEASE);
	while ((dh = fs->open_dirs) != NULL) {
		open_dirs_del_locked(fs, dh);
		pthread_mutex_unlock(&fs->lock);
		dirh_free(dh);
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
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

/* A walk opens this directory: list the next ones of its parent ahead
 * (listing.c), from the parent's cached listing (fs->lock held). */
static void list_ahead_locked(struct fs *fs, const struct fs_dirh *dh, int64_t now)
{
	const char *slash = memrchr(dh->path, '/', dh->path_len);
	size_t plen = slash ? (size_t)(slash - dh->path) : 0;
	const char *name = slash ? slash + 1 : dh->path;
	const struct fs_listing *pl;
	long i;

	if (!dh->path_len)
		return;
	pl = fs_listing_cached(fs, dh->path, plen, now);
	if (!pl)
		return;
	i = fs_listing_find(pl, name, dh->path_len - (size_t)(name - dh->path));
	if (i >= 0)
		fs_list_ahead_locked(fs, dh->path, plen, pl, i + 1);
}

/* Remember that the kernel's readdir cache of directory ino now holds (or
 * will hold) the listing of generation fetched_ms (fs->lock held). */
static void rdc_set_locked(struct fs *fs, fuse_ino_t ino, int64_t fetched_ms)
{
	struct fs_node *n = fs_inodes_get(&fs->inodes, ino);

	if (n && n->is_dir)
		n->rdc_ms = fetched_ms;
}

/*
 * Give dh its listing: a fresh cached one, else the directory is first listed
 * as a subtree (one flat listing of it and everything below,
 * fs_subtree_list) unless it is known to be too big; if that fails or is too
 * big, an empty listing that readdir fills page by page with a delimiter. A
 * failed subtree listing is not an error here: the delimited listing will
 * report (or survive) the same trouble. No lock held.
 */
static int dirh_load(struct fs *fs, struct fs_dirh *dh)
{
	int64_t now = util_now_ms();
	int r = 0, big;

	pthread_mutex_lock(&fs->lock);
	if (dirh_share_cached(fs, dh, now))
		goto unlock;
	if (!fs_path_listed(fs, dh->path, dh->path_len)) {
		r = -ENOMEM;        /* the snapshot (or the root) answers every miss but this */
		goto unlock;
	}
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
	return r;
}

/*
 * The reader stats what it lists (plus_walk) and the nodes are past the low
 * mark, so the files of a directory the kernel still has in its readdir cache
 * have likely lost their dentries: answering from that cache would cost a
 * lookup round trip per file. Without keep_cache the kernel asks readdirplus,
 * whose entries come with nodes (plus_files), from our cached listing or one
 * LIST (which the first lookup would have sent anyway). fs->lock held.
 */
static int nodes_past_low_locked(const struct fs *fs)
{
	return fs->meta_max && fs->inodes.bytes >= fs->meta_max / 100 * FS_META_NODES_LOW;
}

static int stat_walk_locked(const struct fs *fs)
{
	return fs->plus_walk && nodes_past_low_locked(fs);
}

/*
 * Open a handle on directory ino. *keep_cache: the kernel's readdir cache of
 * it holds a listing this handle can stand behind (see DESIGN): the one
 * cached here, or, when that is gone but the generation the kernel holds is
 * within the TTL, a lazy handle that lists only if the kernel asks.
 */
static int do_opendir(struct fs *fs, fuse_ino_t ino, struct fs_dirh **out, int *keep_cache)
{
	struct fs_dirh *dh = calloc(1, sizeof(*dh));
	int64_t now = util_now_ms();
	int64_t rdc = 0;
	int r;

	*keep_cache = 0;
	if (!dh)
		return -ENOMEM;
	pthread_mutex_init(&dh->lock, NULL);
	dh->ino = ino;

	pthread_mutex_lock(&fs->lock);
	r = dirh_init_locked(fs, dh, ino);
	if (r == 0) {
		struct fs_node *n = fs_inodes_get(&fs->inodes, ino);

		rdc = n ? n->rdc_ms : 0;
		if (n)
			n->plus_hint /= 2;
		if (fs->plus_walk)
			fs->plus_walk--;
		list_ahead_locked(fs, dh, now);
		if (rdc && now - rdc < fs->opts.metadata_ttl_ms && !stat_walk_locked(fs)) {
			/* The kernel holds a generation within the TTL: it answers.
			 * The handle stays lazy (dh->l NULL) even when a newer
			 * listing is cached (list-ahead, a lookup): sharing that would
			 * mix two generations' offsets. */
			*keep_cache = 1;
			dh->rdc_ms = rdc;
		} else if (dirh_share_cached(fs, dh, now)) {
			n->rdc_ms = dh->l->fetched_ms;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (r == 0 && !dh->l && !dh->rdc_ms)
		r = dirh_load(fs, dh);
	if (r < 0) {
		dirh_free(dh);
		return r;
	}
	if (dh->done && !*keep_cache) {
		pthread_mutex_lock(&fs->lock);
		rdc_set_locked(fs, ino, dh->l->fetched_ms);
		pthread_mutex_unlock(&fs->lock);
	}
	*out = dh;
	return 0;
}

/* The kernel is done with fh: free what this process holds for it. */
static void dir_release(struct fs *fs, uint64_t fh)
{
	struct fs_dirh *dh;

	if (!fs->keep) {
		dh = (struct fs_dirh *)(uintptr_t)fh;
		pthread_mutex_lock(&fs->lock);
		if (dh)
			open_dirs_del_locked(fs, dh);
		pthread_mutex_unlock(&fs->lock);
		dirh_free(dh);
		return;
	}
	if (fh == 0 || fh > KEEP_SLOTS)
		return;
	pthread_mutex_lock(&fs->lock);
	dh = fs->dirs[fh - 1];
	__atomic_store_n(&fs->dirs[fh - 1], NULL, __ATOMIC_RELEASE);
	if (dh)
		open_dirs_del_locked(fs, dh);
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
	int keep;

	if (!fs->keep)
		return (struct fs_dirh *)(uintptr_t)fh;
	if (fh == 0 || fh > KEEP_SLOTS)
		return NULL;
	dh = __atomic_load_n(&fs->dirs[fh - 1], __ATOMIC_ACQUIRE);
	if (dh)
		return dh;
	if (keep_handle_get(fs->keep, fh, KEEP_DIR, &sino, &size, NULL) < 0 || sino != ino ||
	    do_opendir(fs, ino, &dh, &keep) < 0)
		return NULL;
	pthread_mutex_lock(&fs->lock);
	had = fs->dirs[fh - 1];
	if (!had) {
		__atomic_store_n(&fs->dirs[fh - 1], dh, __ATOMIC_RELEASE);
		open_dirs_add_locked(fs, dh);
	}
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
	int keep, r = do_opendir(fs, ino, &dh, &keep);

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	/* Nothing is cached with a zero TTL: the kernel must not either. */
	if (fs->opts.metadata_ttl_ms > 0) {
		fi->cache_readdir = 1;
		fi->keep_cache = (unsigned)keep;
		if (keep)
			FS_STAT_INC(fs, readdir_kept);
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
		open_dirs_add_locked(fs, dh);
		pthread_mutex_unlock(&fs->lock);
		fi->fh = (uint64_t)fh;
	} else {
		pthread_mutex_lock(&fs->lock);
		open_dirs_add_locked(fs, dh);
		pthread_mutex_unlock(&fs->lock);
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

	if (!fs_path_listed(fs, dh->path, dh->path_len))
		return -EIO;        /* never: the snapshot (or the root) answered dirh_load */
	memset(&pg, 0, sizeof(pg));
	FS_STAT_INC(fs, list_pages);
	r = s3_list(fs_path_s3(fs, dh->path, dh->path_len), dh->prefix, "/", dh->token, 0, &pg);
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
	rdc_set_locked(fs, dh->ino, dh->l->fetched_ms);
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

/*
 * readdirplus of a file entry makes a node (and a lookup count) only where
 * that pays (fs->lock held). While the nodes take less than FS_META_NODES_LOW
 * of the metadata share, always: a node is ~150 bytes and spares a stat its
 * round trip. Past that, only in a directory whose files were looked up
 * since its last opendir (plus_hint: the reader stats what it lists), or
 * while files anywhere were looked up from a listing within the last
 * FS_PLUS_WALK_MAX opendirs (plus_walk: a stat walk such as `ls -lR`,
 * `find -printf %s` or rsync reads a whole directory before it stats any
 * entry, so the directory's own hint comes too late; a lookup would make
 * the node anyway, plus a round trip), up to the whole share (the reaper,
 * reap.c, brings the nodes back under FS_META_NODES_HIGH). Otherwise the
 * entry goes out plain
 * (node id 0) and a stat is a lookup answered from the cached listing. A
 * walk that only needs names (find -type f) of a tree bigger than the share
 * thus stops making file nodes at FS_META_NODES_LOW and the reaper (whose
 * invalidations also cost the parent its kernel readdir cache) has nothing
 * to do. Directories always get theirs: a walk descends into them.
 */
static int plus_files(struct fs *fs, struct fs_dirh *dh)
{
	struct fs_node *dn;

	if (!nodes_past_low_locked(fs))
		return 1;
	if (fs->inodes.bytes >= fs->meta_max)
		return 0;
	dn = fs_inodes_get(&fs->inodes, dh->ino);
	return (dn && dn->plus_hint) || fs->plus_walk;
}

/* Fill buf with entries from position off. Returns bytes used, or -errno
 * when nothing could be returned. */
static ssize_t do_readdir(struct fs *fs, fuse_req_t req, struct fs_dirh *dh, char *buf,
			  size_t size, off_t off, int plus)
{
	char path[FS_KEY_MAX + 1];
	size_t used = 0, plen;
	int r = 0;

	if (dh->path_len > FS_KEY_MAX - 2)
		return -ENAMETOOLONG;       /* no entry below it could have a key */
	memcpy(path, dh->path, dh->path_len);
	if (dh->path_len)
		path[dh->path_len] = '/';
	pthread_mutex_lock(&dh->lock);
	if (!dh->l) {
		/* A lazy handle: the kernel's cache did not answer after all. */
		r = dirh_load(fs, dh);
		if (r < 0)
			goto out;
		if (dh->done && dh->l->fetched_ms != dh->rdc_ms && off > 2)
			FS_STAT_INC(fs, readdir_regen);
		if (dh->done) {
			pthread_mutex_lock(&fs->lock);
			rdc_set_locked(fs, dh->ino, dh->l->fetched_ms);
			pthread_mutex_unlock(&fs->lock);
		}
	}
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
		/* The entry's path, without a malloc per entry. */
		plen = dh->path_len + (dh->path_len ? 1 : 0) + d->name_len;
		if (plen > FS_KEY_MAX)
			plen = 0;               /* no key is that long: no number either */
		else if (dh->path_len)
			memcpy(path + dh->path_len + 1, d->name, d->name_len);
		else
			memcpy(path, d->name, d->name_len);
		if (plus && plen) {
			struct fs_node *n = NULL;

			pthread_mutex_lock(&fs->lock);
			if (d->is_dir || plus_files(fs, dh))
				n = fs_inodes_get_path(&fs->inodes, path, plen, d->is_dir);
			if (n) {
				fs_node_set_from_dirent(&fs->inodes, n, d, dh->l->fetched_ms);
				n->nlookup++;
				fs_fill_entry(fs, n, &e);
			}
			pthread_mutex_unlock(&fs->lock);
			if (!n) {
				/* A plain entry (node id 0: the kernel makes no dentry
				 * and looks the name up if it needs it). */
				e.attr.st_ino = fs_ino_hash(path, plen, d->is_dir);
				e.attr.st_mode = d->is_dir ? S_IFDIR : S_IFREG;
			}
			fuse_add_direntry_plus(req, buf + used, size - used, d->name, &e, p + 1);
		} else {
			/* d_ino is informational for plain readdir: the number the
			 * entry gets when looked up (barring a collision). */
			e.attr.st_ino = plen ? fs_ino_hash(path, plen, d->is_dir) : 0;
			e.attr.st_mode = d->is_dir ? S_IFDIR : S_IFREG;
			if (plus)
				fuse_add_direntry_plus(req, buf + used, size - used, d->name, &e,
						       p + 1);
			else
				fuse_add_direntry(req, buf + used, size - used, d->name, &e.attr,
						  p + 1);
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
