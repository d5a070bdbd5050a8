/*
 * fs — the FUSE low-level filesystem: a bucket prefix as a read-only tree.
 *
 * DESIGN
 * Every op is a thin wrapper: it calls a do_ helper that returns 0 or -errno
 * and then replies exactly once. Ops run on libfuse's worker threads (the
 * multi-threaded loop) and may block on S3; no lock is held while they do.
 *
 * State: one table of live nodes (inode.c), each with a kernel lookup count
 * (lookup and readdirplus add one, forget removes; the root is never freed).
 * A node caches its attributes for --metadata-ttl (node.c); complete directory
 * listings (built by readdir, dir.c, or a subtree listing, listing.c) are
 * cached by directory path for the same time (fs->lcache, names.c), which
 * answers lookups, including negative ones, without requests. Misses that went
 * to S3 are remembered for --negative-ttl. The kernel is told the same TTLs
 * (entry/attr timeouts), so a change in the bucket shows within one TTL.
 *
 * Layers: this file holds the ops that reply; it sits on listing.c and
 * node.c, as dir.c does, and offers nothing back (fs_i.h lists who offers
 * what). Object keys come from one builder (fs_key, names.c).
 *
 * Lookup of name N in directory prefix P, when no fresh listing answers: a
 * name the store said is a directory within the TTL (fs->known_dirs, or a
 * fresh listing of N with entries) is one, with no request. Else if
 * P is being listed, wait for that listing (single-flight, listing.c) and
 * look again. Else ListObjectsV2 prefix "P N/", one page (any key below makes N a directory,
 * which shadows a file N; a page that is not truncated is N's whole subtree
 * and is cached as such); when N is no directory and P is not known too big,
 * P's subtree is listed (up to FS_LOOKUP_LIST_MAX_KEYS) and the cache looked
 * at again; else HEAD "P N" (a file), else ENOENT.
 *
 * Files: open refreshes stale attributes with HEAD and keeps the kernel page
 * cache (keep_cache) only when the ETag equals the one seen at the previous
 * open; reads go through prefetch (rd_*) with If-Match on that ETag, so an
 * object replaced under an open file fails reads with ESTALE instead of mixing
 * versions. Everything that would modify answers EROFS.
 */
#include "fs_i.h"

#include "feedfs/keep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "feedfs/fuse_passthrough.h"
#include "feedfs/feedfs_ioctl.h"
#include "feedfs/gpu.h"
#include "feedfs/promote.h"
#include "feedfs/log.h"
#include "feedfs/s3.h"
#include "feedfs/util.h"

#define TAG "fs"
#define PATHS_BUCKETS 4096
#define PATHS_MAX 65536
#define FS_IOCTL_MAX (16u << 10)        /* _IOC_SIZE is 14 bits: no reply is larger */

/* ---------- path sets: full child path -> expiry (fs->lock held) ----------
 * Two of them: fs->neg, names the store said do not exist (--negative-ttl),
 * and fs->known_dirs, names the store said are directories (--metadata-ttl). The
 * second answers a directory's lookup again after the kernel forgot its node
 * (drop_caches, memory pressure, the reaper) when its parent has no complete
 * listing to answer from (over one page of keys): without it every such
 * lookup listed the store again. */

struct paths_ent {
	struct paths_ent *next;
	int64_t expires_ms;
	size_t len;
	char path[];
};

struct fs_paths {
	struct paths_ent *b[PATHS_BUCKETS];
	size_t count;
};

static void paths_clear(struct fs_paths *ps)
{
	for (size_t i = 0; i < PATHS_BUCKETS; i++) {
		while (ps->b[i]) {
			struct paths_ent *e = ps->b[i];

			ps->b[i] = e->next;
			free(e);
		}
	}
	ps->count = 0;
}

static struct paths_ent **paths_slot(struct fs_paths *ps, const char *path, size_t len)
{
	struct paths_ent **pp = &ps->b[fs_hash64(path, len, 7) % PATHS_BUCKETS];

	while (*pp && !((*pp)->len == len && memcmp((*pp)->path, path, len) == 0))
		pp = &(*pp)->next;
	return pp;
}

static int paths_hit(struct fs_paths *ps, const char *path, size_t len, int64_t now_ms)
{
	struct paths_ent **pp = paths_slot(ps, path, len), *e = *pp;

	if (!e)
		return 0;
	if (e->expires_ms > now_ms)
		return 1;
	*pp = e->next;
	free(e);
	ps->count--;
	return 0;
}

static void paths_remove(struct fs_paths *ps, const char *path, size_t len)
{
	struct paths_ent **pp = paths_slot(ps, path, len), *e = *pp;

	if (e) {
		*pp = e->next;
		free(e);
		ps->count--;
	}
}

static void paths_add(struct fs_paths *ps, const char *path, size_t len, int64_t expires_ms)
{
	struct paths_ent **pp, *e;

	/* Bounded: a scan of many missing names (or a tree of many directories)
	 * must not grow without limit. */
	if (ps->count >= PATHS_MAX)
		paths_clear(ps);
	pp = paths_slot(ps, path, len);
	if (*pp) {
		(*pp)->expires_ms = expires_ms;
		return;
	}
	e = malloc(sizeof(*e) + len);
	if (!e)
		return;
	e->next = NULL;
	e->expires_ms = expires_ms;
	e->len = len;
	memcpy(e->path, path, len);
	*pp = e;
	ps->count++;
}


static struct fs *req_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* ---------- lookup ---------- */

enum { RS_MAY_LIST_PARENT, RS_HEAD_ONLY };
#define RS_RELOOK 2

/* 1 when a lookup in directory path[0, dir_len) should list that
 * directory's subtree rather than HEAD one name: subtree listings are on and
 * the directory is not known to be too big. Takes fs->lock. */
static int should_list_parent(struct fs *fs, const char *path, size_t dir_len)
{
	int big;

	if (!fs->subtree_max_keys)
		return 0;
	pthread_mutex_lock(&fs->lock);
	big = fs_lcache_is_big(&fs->lcache, path, dir_len, util_now_ms());
	pthread_mutex_unlock(&fs->lock);
	return !big;
}

/* List the subtree of directory path[0, dir_len), capped for a lookup. */
static void list_parent(struct fs *fs, const char *path, size_t dir_len)
{
	long cap = fs->subtree_max_keys < FS_LOOKUP_LIST_MAX_KEYS ? fs->subtree_max_keys
								  : FS_LOOKUP_LIST_MAX_KEYS;
	char *dp;
	size_t dpl;

	if (fs_path_key(fs, path, dir_len, FS_KEY_DIR, &dp, &dpl) < 0)
		return;
	FS_STAT_INC(fs, lookup_listings);
	(void)fs_subtree_list_max(fs, path, dir_len, dp, dpl, cap);
	free(dp);
}

/* Ask S3 what path (relative to the mount root) is: 1 directory, 0 file
 * (with *obj filled), or -errno (-ENOENT: neither; -ENAMETOOLONG: its key
 * would be longer than any key can be). path[0, dir_len) is its directory.
 * RS_MAY_LIST_PARENT: when the name is no directory, list the directory's
 * subtree instead of a HEAD and return RS_RELOOK (the caller looks in the
 * cache again, then calls once more with RS_HEAD_ONLY, which skips the LIST
 * it already made). */
static int remote_stat(struct fs *fs, const char *path, size_t path_len, size_t dir_len,
		       int how, struct s3_object *obj)
{
	struct s3_list_page page;
	size_t klen, dlen;
	char *key, *dirp = NULL;
	int r;

	/* A snapshot's listings answer every lookup (snapview.c); what they do
	 * not hold does not exist: never a LIST or HEAD. */
	if (!fs_path_listed(fs, path, path_len))
		return -ENOENT;
	r = fs_path_key(fs, path, path_len, 0, &key, &klen);
	if (r < 0)
		return r;
	if (how == RS_HEAD_ONLY)
		goto head;
	r = fs_path_key(fs, path, path_len, FS_KEY_DIR, &dirp, &dlen);
	if (r == -ENAMETOOLONG)
		goto head;          /* a key of the longest length: no key lies below it */
	if (r < 0)
		goto out;

	/* With subtree listings on, ask for a whole page (not max-keys=1): the
	 * same one request, and when N holds at most 1000 keys it is N's complete
	 * subtree, which answers the opendir and the lookups that usually follow. */
	memset(&page, 0, sizeof(page));
	r = s3_list(fs_path_s3(fs, path, path_len), dirp, NULL, NULL,
		    fs->subtree_max_keys ? 0 : 1, &page);
	FS_STAT_INC(fs, list_pages);
	if (r < 0)
		goto out;
	{
		int is_dir = page.n_objects > 0 || page.n_prefixes > 0;

		if (is_dir && fs->subtree_max_keys)
			fs_subtree_from_page(fs, path, path_len, dirp, dlen, &page);
		s3_list_page_cleanup(&page);
		if (is_dir) {
			r = 1;
			goto out;
		}
	}
	/* A file, or nothing: one listing of the directory answers this name
	 * and every later lookup in it (a reader opening files by path pays one
	 * LIST per 1000 keys, not a LIST and a HEAD per name), and lookups in it
	 * meanwhile wait for that listing (single-flight). */
	if (should_list_parent(fs, path, dir_len)) {
		list_parent(fs, path, dir_len);
		r = RS_RELOOK;
		goto out;
	}
head:
	memset(obj, 0, sizeof(*obj));
	FS_STAT_INC(fs, heads);
	r = s3_head(fs_path_s3(fs, path, path_len), key, klen, obj);
out:
	free(dirp);
	free(key);
	return r;
}

/* Path is a directory by what the store said within the metadata TTL: a
 * lookup that listed below it, or a fresh listing of it with entries
 * (fs->lock held). */
static int known_dir(struct fs *fs, const char *path, size_t len, int64_t now_ms)
{
	const struct fs_listing *l;

	if (paths_hit(fs->known_dirs, path, len, now_ms))
		return 1;
	l = fs_listing_cached(fs, path, len, now_ms);
	return l && l->n > 0;
}

static int do_lookup(struct fs *fs, fuse_ino_t parent, const char *name,
		     struct fuse_entry_param *e)
{
	size_t nlen = strlen(name), plen;
	struct fs_node *p, *n;
	struct fs_listing *pl;
	struct s3_object obj;
	int64_t now = util_now_ms();
	char *path;
	int r, file, listed = 0;

	FS_STAT_INC(fs, lookups);
	if (nlen > FS_NAME_MAX)
		return -ENAMETOOLONG;
	if (fs_name_check(name, nlen) != FS_NAME_OK)
		return -ENOENT;

	pthread_mutex_lock(&fs->lock);
	p = fs_inodes_get(&fs->inodes, parent);
	if (!p || !p->is_dir) {
		pthread_mutex_unlock(&fs->lock);
		return p ? -ENOTDIR : -ESTALE;
	}
	r = fs_path_join(p->path, p->path_len, name, nlen, &path, &plen);
	if (r < 0) {
		pthread_mutex_unlock(&fs->lock);
		return r;
	}
again:
	pl = fs_listing_cached(fs, p->path, p->path_len, now);
	if (pl) {
		long i = fs_listing_find(pl, name, nlen);

		FS_STAT_INC(fs, lookups_cached);
		if (i < 0) {
			r = -ENOENT;
		} else {
			const struct fs_dirent *d = &pl->ents[i];
			int64_t when = pl->fetched_ms;

			n = fs_inodes_get_path(&fs->inodes, path, plen, d->is_dir);
			if (!d->is_dir && p->plus_hint < 255)
				p->plus_hint++;     /* dir.c plus_files */
			if (!d->is_dir && fs->plus_walk < FS_PLUS_WALK_MAX)
				fs->plus_walk++;
			if (d->is_dir)
				fs_list_ahead_locked(fs, p->path, p->path_len, pl, i);
			if (n) {
				fs_node_set_from_dirent(&fs->inodes, n, d, when);
				n->nlookup++;
				fs_fill_entry(fs, n, e);
				r = 0;
			} else {
				r = -ENOMEM;
			}
		}
		pthread_mutex_unlock(&fs->lock);
		free(path);
		return r;
	}
	if (paths_hit(fs->neg, path, plen, now)) {
		FS_STAT_INC(fs, negative_hits);
		pthread_mutex_unlock(&fs->lock);
		free(path);
		return -ENOENT;
	}
	if (known_dir(fs, path, plen, now)) {
		FS_STAT_INC(fs, dir_hits);
		n = fs_inodes_get_path(&fs->inodes, path, plen, 1);
		if (n) {
			n->nlookup++;
			fs_fill_entry(fs, n, e);
		}
		pthread_mutex_unlock(&fs->lock);
		free(path);
		return n ? 0 : -ENOMEM;
	}
	/* The directory is being listed: that listing answers this lookup
	 * (single-flight), unless it fails or turns out too big to cache. The
	 * kernel holds the parent while it looks up in it, so p stays. */
	if (fs_listing_wait(fs, p->path, p->path_len)) {
		FS_STAT_INC(fs, lookups_joined);
		now = util_now_ms();
		if (fs_listing_cached(fs, p->path, p->path_len, now))
			goto again;
	}
	pthread_mutex_unlock(&fs->lock);

	if (!listed)
		FS_STAT_INC(fs, lookups_remote);
	r = remote_stat(fs, path, plen, p->path_len, listed ? RS_HEAD_ONLY : RS_MAY_LIST_PARENT,
			&obj);
	if (r == RS_RELOOK) {
		/* The parent's subtree was listed: the cache may answer now. */
		listed = 1;
		pthread_mutex_lock(&fs->lock);
		now = util_now_ms();
		goto again;
	}
	file = r == 0;

	pthread_mutex_lock(&fs->lock);
	if (r == -ENOENT) {
		if (fs->opts.negative_ttl_ms > 0)
			paths_add(fs->neg, path, plen, util_now_ms() + fs->opts.negative_ttl_ms);
	} else if (r >= 0) {
		paths_remove(fs->neg, path, plen);
		if (r == 1 && fs->opts.metadata_ttl_ms > 0)
			paths_add(fs->known_dirs, path, plen, now + fs->opts.metadata_ttl_ms);
		else
			paths_remove(fs->known_dirs, path, plen);
		n = fs_inodes_get_path(&fs->inodes, path, plen, r == 1);
		if (n) {
			if (r == 0)
				fs_node_set_from_object(&fs->inodes, n, &obj, now);
			n->nlookup++;
			fs_fill_entry(fs, n, e);
			r = 0;
		} else {
			r = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&fs->lock);
	if (file)
		s3_object_cleanup(&obj);
	free(path);
	return r;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = req_fs(req);
	struct fuse_entry_param e;
	int r = do_lookup(fs, parent, name, &e);

	if (r == 0) {
		fuse_reply_entry(req, &e);
	} else if (r == -ENOENT && fs->opts.negative_ttl_ms > 0) {
		/* ino 0: the kernel caches the miss for entry_timeout. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs_ttl_s(fs->opts.negative_ttl_ms);
		fuse_reply_entry(req, &e);
	} else {
		fuse_reply_err(req, -r);
	}
}

static void forget_one(struct fs *fs, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_node *n = fs_inodes_get(&fs->inodes, ino);

	if (n)
		fs_inodes_forget(&fs->inodes, n, nlookup);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs *fs = req_fs(req);

	pthread_mutex_lock(&fs->lock);
	forget_one(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct fs *fs = req_fs(req);

	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; i < count; i++)
		forget_one(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

/* ---------- attributes ---------- */

/* The hash an open records of the ETag it reads (| 1: 0 stays "none"). */
static uint64_t open_etag_hash(const char *etag)
{
	return etag[0] ? fs_hash64(etag, strlen(etag), 0x6f70656e) | 1 : 0;
}

/* Make a file node's attributes fresh (HEAD when older than the TTL). On
 * success fills *st and, when etag is not NULL, the current ETag. */
static int refresh_attrs(struct fs *fs, fuse_ino_t ino, struct stat *st, char *etag,
			 uint64_t *size, int *keep_cache)
{
	struct s3_client *s3;
	struct s3_object obj;
	struct fs_node *n;
	int64_t now = util_now_ms();
	size_t klen;
	char *key;
	int r;

	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	if (!n) {
		pthread_mutex_unlock(&fs->lock);
		return -ESTALE;
	}
	if (n->is_dir || fs_attrs_fresh(fs, n, now))
		goto fill;
	if (fs_path_snap(fs, n->path, n->path_len)) {
		/* From the snapshot (a node adopted after a takeover): no HEAD. */
		r = fs_snap_node_attrs_locked(fs, n, now);
		if (r == 0)
			goto fill;
		pthread_mutex_unlock(&fs->lock);
		return r;
	}
	r = fs_path_key(fs, n->path, n->path_len, 0, &key, &klen);
	s3 = fs_path_s3(fs, n->path, n->path_len);
	pthread_mutex_unlock(&fs->lock);
	if (r < 0)
		return r;

	memset(&obj, 0, sizeof(obj));
	FS_STAT_INC(fs, heads);
	r = s3_head(s3, key, klen, &obj);
	free(key);

	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	if (r < 0 || !n) {
		pthread_mutex_unlock(&fs->lock);
		if (r >= 0)
			s3_object_cleanup(&obj);
		return r < 0 ? r : -ESTALE;
	}
	fs_node_set_from_object(&fs->inodes, n, &obj, now);
	s3_object_cleanup(&obj);
fill:
	if (st)
		fs_fill_stat(fs, n, st);
	if (etag)
		fs_node_etag(n, etag);
	if (size)
		*size = n->size;
	if (keep_cache) {
		char cur[FS_ETAG_MAX];
		uint64_t h;

		fs_node_etag(n, cur);
		h = open_etag_hash(cur);
		*keep_cache = h && n->open_etag_hash == h;
		n->open_etag_hash = h;
	}
	r = n->is_dir ? 1 : 0;
	pthread_mutex_unlock(&fs->lock);
	return r;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = req_fs(req);
	struct stat st;
	int r;

	FS_STAT_INC(fs, getattrs);
	r = refresh_attrs(fs, ino, &st, NULL, NULL, NULL);

	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, fs_ttl_s(fs->opts.metadata_ttl_ms));
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct fs *fs = req_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct stat st;
	mode_t bits;
	int r;

	if (mask & W_OK) {
		fuse_reply_err(req, EROFS);
		return;
	}
	r = refresh_attrs(fs, ino, &st, NULL, NULL, NULL);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (ctx->uid == 0)       /* root: X needs some x bit, R always */
		bits = (st.st_mode & 0111) ? 05 : 04;
	else if (ctx->uid == st.st_uid)
		bits = (st.st_mode >> 6) & 7;
	else if (ctx->gid == st.st_gid)
		bits = (st.st_mode >> 3) & 7;
	else
		bits = st.st_mode & 7;
	fuse_reply_err(req, ((mode_t)mask & 05 & ~bits) ? EACCES : 0);
}

/* ---------- files ---------- */

/* The node of f->ino counts its open handles: reap.c never evicts an open
 * file (fs->lock held). */
static void node_opened_locked(struct fs *fs, struct fs_file *f, int delta)
{
	struct fs_node *n = fs_inodes_get(&fs->inodes, f->ino);

	if (n && (delta > 0 || n->opens))
		n->opens += (uint32_t)delta;
}

static void open_files_add(struct fs *fs, struct fs_file *f)
{
	pthread_mutex_lock(&fs->lock);
	node_opened_locked(fs, f, 1);
	f->next = &fs->open_files;
	f->prev = fs->open_files.prev;
	fs->open_files.prev->next = f;
	fs->open_files.prev = f;
	pthread_mutex_unlock(&fs->lock);
}

static void open_files_del(struct fs *fs, struct fs_file *f)
{
	pthread_mutex_lock(&fs->lock);
	node_opened_locked(fs, f, -1);
	f->prev->next = f->next;
	f->next->prev = f->prev;
	pthread_mutex_unlock(&fs->lock);
}

void fs_close_open_handles(struct fs *fs)
{
	fs_close_open_dirs(fs);
	for (;;) {
		struct fs_file *f;

		pthread_mutex_lock(&fs->lock);
		f = fs->open_files.next;
		if (f == &fs->open_files) {
			pthread_mutex_unlock(&fs->lock);
			return;
		}
		f->prev->next = f->next;
		f->next->prev = f->prev;
		pthread_mutex_unlock(&fs->lock);
		rd_close(f->rd);
		free(f);
	}
}

int fs_set_keep(struct fs *fs, struct keep *k)
{
	fs->files = calloc(KEEP_SLOTS, sizeof(*fs->files));
	fs->dirs = calloc(KEEP_SLOTS, sizeof(*fs->dirs));
	if (!fs->files || !fs->dirs) {
		free(fs->files);
		free(fs->dirs);
		fs->files = NULL;
		fs->dirs = NULL;
		return -ENOMEM;
	}
	fs->keep = k;
	fs->inodes.keep = k;
	return 0;
}

/* The fh the kernel gets for f: its slot under a keeper, else the pointer. */
static int file_publish(struct fs *fs, struct fs_file *f, fuse_ino_t ino, uint64_t size,
			const char *etag, struct fuse_file_info *fi)
{
	int64_t fh;

	if (!fs->keep) {
		fi->fh = (uintptr_t)f;
		open_files_add(fs, f);
		return 0;
	}
	fh = keep_handle_open(fs->keep, KEEP_FILE, ino, size, etag);
	if (fh < 0)
		return (int)fh;
	f->fh = (uint64_t)fh;
	fi->fh = (uint64_t)fh;
	open_files_add(fs, f);
	pthread_mutex_lock(&fs->lock);
	__atomic_store_n(&fs->files[fh - 1], f, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fs->lock);
	return 0;
}

/* A handle the previous server opened (keep.h): open it again here, pinned
 * to the ETag it was opened with. NULL when fh names no open file. */
static struct fs_file *file_adopt(struct fs *fs, uint64_t fh, fuse_ino_t ino)
{
	char etag[KEEP_ETAG_MAX];
	const struct rd_config *rd;
	struct fs_file *f, *had;
	struct fs_node *n;
	uint64_t sino, size;
	size_t klen;
	char *key;
	int r;

	if (keep_handle_get(fs->keep, fh, KEEP_FILE, &sino, &size, etag) < 0 || sino != ino)
		return NULL;
	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	r = n ? fs_path_read_key(fs, n->path, n->path_len, &key, &klen) : -ESTALE;
	rd = n ? fs_path_rd(fs, n->path, n->path_len) : NULL;
	pthread_mutex_unlock(&fs->lock);
	if (r < 0)
		return NULL;
	f = calloc(1, sizeof(*f));
	if (f)
		f->rd = rd_open(rd, key, klen, size, etag[0] ? etag : NULL);
	free(key);
	if (!f || !f->rd) {
		free(f);
		return NULL;
	}
	f->fh = fh;
	f->ino = ino;
	f->etag_hash = open_etag_hash(etag);
	pthread_mutex_lock(&fs->lock);
	had = fs->files[fh - 1];
	if (!had) {
		__atomic_store_n(&fs->files[fh - 1], f, __ATOMIC_RELEASE);
		node_opened_locked(fs, f, 1);
		f->next = &fs->open_files;
		f->prev = fs->open_files.prev;
		fs->open_files.prev->next = f;
		fs->open_files.prev = f;
	}
	pthread_mutex_unlock(&fs->lock);
	if (had) {                          /* another worker adopted it first */
		rd_close(f->rd);
		free(f);
		return had;
	}
	log_debug(TAG, "open file %llu of inode %llu adopted from the previous server",
		  (unsigned long long)fh, (unsigned long long)ino);
	return f;
}

static struct fs_file *file_of(struct fs *fs, uint64_t fh, fuse_ino_t ino)
{
	struct fs_file *f;

	if (!fs->keep)
		return (struct fs_file *)(uintptr_t)fh;
	if (fh == 0 || fh > KEEP_SLOTS)
		return NULL;
	f = __atomic_load_n(&fs->files[fh - 1], __ATOMIC_ACQUIRE);
	return f ? f : file_adopt(fs, fh, ino);
}

/* The kernel is done with fh: free what this process holds for it. */
static void file_release(struct fs *fs, uint64_t fh)
{
	struct fs_file *f;

	if (!fs->keep) {
		f = (struct fs_file *)(uintptr_t)fh;
		if (f && f->pt_counted)
			fs_pt_release(fs, f->ino, f->backing);
	} else {
		uint64_t ino, size;

		if (fh == 0 || fh > KEEP_SLOTS)
			return;
		pthread_mutex_lock(&fs->lock);
		f = fs->files[fh - 1];
		__atomic_store_n(&fs->files[fh - 1], NULL, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&fs->lock);
		/* The slot, not f: a passthrough handle a predecessor opened is
		 * never adopted here (no READ comes for it). */
		if (fs->pt && keep_handle_get(fs->keep, fh, KEEP_FILE, &ino, &size, NULL) == 0)
			fs_pt_release(fs, ino, keep_handle_backing(fs->keep, fh));
		keep_handle_close(fs->keep, fh);
	}
	if (f) {
		open_files_del(fs, f);
		/* A handle that only fed devices is not promoted: its ioctls
		 * read through the block cache whatever is promoted, and
		 * building the file (a whole second read of the object, and
		 * a write of it) would only cost CPU and evict files that
		 * read(2) does use. */
		if (f->want_key && fs->promote &&
		    (__atomic_load_n(&f->read_fuse, __ATOMIC_RELAXED) ||
		     !__atomic_load_n(&f->read_device, __ATOMIC_RELAXED)))
			promote_want(fs->promote, f->want_key, f->want_key_len,
				     f->want_key + f->want_key_len + 1, f->want_size);
		rd_close(f->rd);
		free(f->want_key);
		free(f);
	}
}

void fs_set_promote(struct fs *fs, struct promote *p)
{
	fs->promote = p;
}

int fs_set_passthrough(struct fs *fs, int on)
{
	return fs_pt_init(fs, on);
}

/* Remember (key, etag, size) to ask for its promotion when f is released:
 * by then the reader has usually read it whole, so every block is cached
 * (or in its write-behind) and the promoter can build the file. */
static void want_promotion(struct fs_file *f, const char *key, size_t klen, const char *etag,
			   uint64_t size)
{
	size_t elen = strlen(etag);

	f->want_key = malloc(klen + elen + 2);
	if (!f->want_key)
		return;                     /* not promoted: reads stay the normal way */
	memcpy(f->want_key, key, klen);
	f->want_key[klen] = '\0';
	memcpy(f->want_key + klen + 1, etag, elen + 1);
	f->want_key_len = klen;
	f->want_size = size;
}

void fs_set_session(struct fs *fs, struct fuse_session *se)
{
	fs->se = se;
	fs_reap_start(fs);
}

void fs_set_opened(struct fs *fs, fs_opened_fn fn, void *arg)
{
	fs->opened = fn;
	fs->opened_arg = arg;
}

void fs_set_gpu(struct fs *fs, struct gpu *g)
{
	fs->gpu = g;
}

static int do_open(struct fs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const struct rd_config *rd;
	char etag[FS_ETAG_MAX];
	struct fs_file *f;
	struct fs_node *n;
	uint64_t size;
	int keep = 0, moved = 0, r;
	size_t klen;
	char *key;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & (O_TRUNC | O_APPEND | O_CREAT)))
		return -EROFS;
	r = refresh_attrs(fs, ino, NULL, etag, &size, &keep);
	if (r < 0)
		return r;
	if (r == 1)
		return -EISDIR;

	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	r = n ? fs_path_read_key(fs, n->path, n->path_len, &key, &klen) : -ESTALE;
	rd = n ? fs_path_rd(fs, n->path, n->path_len) : NULL;
	moved = n && n->size_moved;
	pthread_mutex_unlock(&fs->lock);
	if (r < 0)
		return r;

	f = calloc(1, sizeof(*f));
	if (f)
		f->rd = rd_open(rd, key, klen, size, etag[0] ? etag : NULL);
	if (!f || !f->rd) {
		free(key);
		free(f);
		return -ENOMEM;
	}
	f->ino = ino;
	f->etag_hash = open_etag_hash(etag);
	if (fs->pt) {
		/* After refresh_attrs: the ETag is the one the normal path would
		 * pin, so a replaced object is never read from an older file. */
		r = fs_pt_open(fs, ino, key, klen, etag, size, fi->flags);
		if (r < 0) {
			rd_close(f->rd);
			free(f);
			free(key);
			return r;
		}
		f->backing = r;
		f->pt_counted = 1;
		if (!f->backing && fs_pt_active(fs) && etag[0] && size > 0)
			want_promotion(f, key, klen, etag, size);
	}
	FS_STAT_INC(fs, opens);
	if (keep) {
		FS_STAT_INC(fs, keep_cache);
	} else if (moved && fs->se) {
		/* This handle reads the version with `etag`; the kernel may still
		 * hold the size of an older one (a readdirplus update it dropped,
		 * or a HEAD just now), and it cuts reads at that size: bytes of the
		 * new version up to the old length would look like a whole file.
		 * Invalidate the attributes (not the pages: keep_cache=0 does that)
		 * so the first read fetches them again. Attribute-only invalidation
		 * takes no lock that this open holds. Only when the size ever
		 * changed: otherwise every size the kernel can hold is this one,
		 * and a first open costs no GETATTR (fstat, then read). */
		FS_STAT_INC(fs, size_invals);
		fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
	}
	r = file_publish(fs, f, ino, size, etag, fi);
	if (r < 0) {
		log_warn(TAG, "open of inode %llu: %d handles open already: ENFILE",
			 (unsigned long long)ino, KEEP_SLOTS);
		if (f->pt_counted)
			fs_pt_release(fs, ino, f->backing);
		rd_close(f->rd);
		free(f->want_key);
		free(f);
		free(key);
		return r;
	}
	if (fs->keep && f->backing > 0)
		keep_handle_set_backing(fs->keep, f->fh, f->backing);
	fi->keep_cache = keep;
	/* Read-only: nothing to flush, so close() costs the reader no round trip. */
	fi->noflush = 1;
	fs_order_opened(fs, ino);
	/* Loader-order prefetch; not for a passed-through file, whose reads
	 * never come here (the next files are likely promoted too). */
	if (fs->opened && !f->backing)
		fs->opened(fs->opened_arg, key, klen);
	free(key);
	return f->backing;
}

/* An open that failed after refresh_attrs noted its ETag for keep_cache, but
 * the kernel dropped no pages for it: the next open must drop them. */
static void open_failed(struct fs *fs, fuse_ino_t ino)
{
	struct fs_node *n;

	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	if (n)
		n->open_etag_hash = 0;
	pthread_mutex_unlock(&fs->lock);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int r = do_open(req_fs(req), ino, fi), e;

	if (r < 0) {
		open_failed(req_fs(req), ino);
		fuse_reply_err(req, -r);
		return;
	}
	fs_pt_reply_begin(r);               /* the seam patches this reply (passthrough.c) */
	e = fuse_reply_open(req, fi);
	fs_pt_reply_end();
	if (e == -ENOENT) {                         /* interrupted open */
		file_release(req_fs(req), fi->fh);
		open_failed(req_fs(req), ino);
	}
}

/*
 * Each FUSE worker keeps one read buffer for its life. A fresh 1 MiB malloc
 * per read is an mmap plus 256 page faults, and on virtual machines those
 * faults cost more than the copy itself (measured: most of the daemon's CPU
 * on a sequential read). Bounded: one buffer of at most max_read per worker.
 */
static __thread char *read_buf;
static __thread size_t read_buf_len;

static void read_buf_free(void *p)
{
	free(p);
}

static pthread_key_t read_buf_key;
static pthread_once_t read_buf_once = PTHREAD_ONCE_INIT;

static void read_buf_key_init(void)
{
	pthread_key_create(&read_buf_key, read_buf_free);
}

static char *read_buf_get(size_t size)
{
	if (size <= read_buf_len)
		return read_buf;
	pthread_once(&read_buf_once, read_buf_key_init);
	free(read_buf);
	read_buf_len = 0;
	read_buf = malloc(size);
	if (read_buf)
		read_buf_len = size;
	pthread_setspecific(read_buf_key, read_buf);   /* freed when the worker exits */
	return read_buf;
}

/* A read found the object changed: counted, and the next open looks again. */
static void mark_stale(struct fs *fs, fuse_ino_t ino)
{
	struct fs_node *n;

	FS_STAT_INC(fs, estale);
	pthread_mutex_lock(&fs->lock);
	n = fs_inodes_get(&fs->inodes, ino);
	if (n)
		n->attr_ms = 0;
	pthread_mutex_unlock(&fs->lock);
}

/*
 * A read that failed after its retries is remembered for a moment: the
 * kernel reads the first page of a failed readahead again at once, and that
 * request would run a second chain of attempts for the same error (twice
 * --max-retries, twice the wait). Errors an application caused (EINTR) or
 * that stay anyway (ESTALE) are not kept.
 */
#define FS_READ_FAIL_KEEP_NS 1000000000ull

static int fail_kept(int err)
{
	return err == -EIO || err == -ETIMEDOUT || err == -EACCES || err == -ENOENT;
}

static void fail_note(struct fs *fs, struct fs_file *f, uint64_t off, size_t size, int err)
{
	pthread_mutex_lock(&fs->lock);
	f->fail_off = off;
	f->fail_end = off + size;
	f->fail_err = err;
	f->fail_ns = stats_now_ns();
	pthread_mutex_unlock(&fs->lock);
}

/*
 * What a read of f must answer before any work: 0, or -errno.
 *
 * ESTALE when a newer version of f's object has been opened since f was. That
 * open dropped the kernel's pages of the file (keep_cache=0), and the pages
 * are the inode's, shared by every open file: a read answered now with f's
 * older bytes would put them back for the new version's readers, and a later
 * open of the new version keeps them (same ETag, keep_cache=1). A read the
 * kernel sent before that open holds its pages locked, and the open's
 * invalidation waits for them, then drops them.
 */
static int read_early(struct fs *fs, const struct fs_file *f, uint64_t off, size_t size,
		      uint64_t now)
{
	struct fs_node *n;
	int r = 0;

	pthread_mutex_lock(&fs->lock);
	n = f->etag_hash ? fs_inodes_get(&fs->inodes, f->ino) : NULL;
	if (n && n->open_etag_hash && n->open_etag_hash != f->etag_hash)
		r = -ESTALE;
	else if (f->fail_err && now - f->fail_ns < FS_READ_FAIL_KEEP_NS &&
		 off < f->fail_end && off + size > f->fail_off)
		r = f->fail_err;
	pthread_mutex_unlock(&fs->lock);
	return r;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct fs *fs = req_fs(req);
	struct fs_file *f = file_of(fs, fi->fh, ino);
	char *buf = size ? read_buf_get(size) : NULL;
	struct iovec iov[RD_PIN_MAX];
	struct rd_pin pin;
	unsigned niov = 0;
	uint64_t t0 = stats_now_ns();
	ssize_t r;

	if (!f || (size && !buf)) {
		fuse_reply_err(req, f ? ENOMEM : EBADF);
		return;
	}
	FS_STAT_INC(fs, reads);
	if (!__atomic_load_n(&f->read_fuse, __ATOMIC_RELAXED))
		__atomic_store_n(&f->read_fuse, 1, __ATOMIC_RELAXED);
	r = read_early(fs, f, (uint64_t)off, size, t0);
	if (r == -ESTALE) {
		FS_STAT_INC(fs, estale);
		if (!__atomic_exchange_n(&f->superseded_logged, 1, __ATOMIC_RELAXED))
			log_warn(TAG, "inode %llu: a newer version was opened since this file "
				 "was: its reads get ESTALE", (unsigned long long)ino);
	}
	if (r < 0) {
		fuse_reply_err(req, (int)-r);
		return;
	}
	/* Bytes already fetched go to the kernel straight from the segment
	 * buffers (one writev, no copy here); others are copied into buf. */
	pin.n = 0;
	r = size ? rd_read_iov(f->rd, (uint64_t)off, size, buf, iov, &niov, &pin) : 0;
	if (r < 0) {
		if (fail_kept((int)r))
			fail_note(fs, f, (uint64_t)off, size, (int)r);
		if (r == -ESTALE) {
			mark_stale(fs, ino);
			log_warn(TAG, "object of inode %llu changed while open: ESTALE",
				 (unsigned long long)ino);
		}
		fuse_reply_err(req, (int)-r);
	} else if (niov) {
		struct rd_file *rd = f->rd;     /* f may be released once the reply is out */

		FS_STAT_ADD(fs, read_bytes, (uint64_t)r);
		fuse_reply_iov(req, iov, (int)niov);
		rd_unpin(rd, &pin);
	} else {
		fuse_reply_buf(req, NULL, 0);
	}
	stats_hist_observe(&fs->hist[FS_HIST_READ], stats_now_ns() - t0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	file_release(req_fs(req), fi->fh);
	fuse_reply_err(req, 0);
}

/*
 * The device-feed ioctls (feedfs_ioctl.h) on an open file: the kernel passes
 * restricted ioctls only, their in and out sizes taken from cmd, so in_buf
 * already holds the whole request. The bytes go through this handle's read
 * path (its ETag pin included) into the named destination, not through FUSE.
 * Directories and 32-bit callers get ENOTTY: the ABI is for 64-bit callers
 * on files.
 */
static void op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
		     struct fuse_file_info *fi, unsigned flags, const void *in_buf,
		     size_t in_bufsz, size_t out_bufsz)
{
	struct fs *fs = req_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	char out[FS_IOCTL_MAX];
	struct fs_file *f = NULL;
	ssize_t r;

	if (fs->gpu && !(flags & (FUSE_IOCTL_DIR | FUSE_IOCTL_COMPAT)))
		f = file_of(fs, fi->fh, ino);
	if (!f) {
		fuse_reply_err(req, ENOTTY);
		return;
	}
	if ((cmd == FEEDFS_IOC_READ || cmd == FEEDFS_IOC_BATCH) &&
	    !__atomic_load_n(&f->read_device, __ATOMIC_RELAXED))
		__atomic_store_n(&f->read_device, 1, __ATOMIC_RELAXED);
	r = gpu_ioctl(fs->gpu, f->rd, ctx->uid, ctx->pid, cmd, in_buf, in_bufsz, out,
		      out_bufsz < sizeof(out) ? out_bufsz : sizeof(out));
	if (r == -ESTALE)
		mark_stale(fs, ino);
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else
		fuse_reply_ioctl(req, 0, r ? out : NULL, (size_t)r);
}

/* Not sent for our files (noflush at open); counted, so tests can tell. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	FS_STAT_INC(req_fs(req), flushes);
	fuse_reply_err(req, 0);
}

/* ---------- the filesystem as a whole ---------- */

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = req_fs(req);
	struct statvfs sv;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = FS_BLKSIZE;
	sv.f_frsize = 4096;
	sv.f_blocks = (1ULL << 50) / 4096;     /* 1 PiB: a bucket has no fixed size */
	pthread_mutex_lock(&fs->lock);
	sv.f_files = fs->inodes.count;      /* live inodes: a hint, nothing is free */
	pthread_mutex_unlock(&fs->lock);
	sv.f_namemax = FS_NAME_MAX;
	sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	/* No extended attributes: every name is absent. ENODATA rather than
	 * ENOTSUP so tools that probe (ls for security.*) keep working quietly. */
	fuse_reply_err(req, ENODATA);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, 0);
	else
		fuse_reply_buf(req, NULL, 0);
}

/* Everything that would change the tree. */
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		     dev_t rdev)
{
	fuse_reply_err(req, EROFS);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	fuse_reply_err(req, EROFS);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	fuse_reply_err(req, EROFS);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	fuse_reply_err(req, EROFS);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		     off_t off, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	fuse_reply_err(req, EROFS);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, EROFS);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
			 off_t length, struct fuse_file_info *fi)
{
	fuse_reply_err(req, EROFS);
}

static void op_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			       struct fuse_file_info *fi_in, fuse_ino_t ino_out,
			       off_t off_out, struct fuse_file_info *fi_out, size_t len,
			       int flags)
{
	fuse_reply_err(req, EROFS);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_read = 1u << 20;            /* matches the max_read= mount option */
	conn->max_readahead = 1u << 20;
	conn->max_write = 1u << 20;           /* libfuse derives max_pages from it */
	/* Plus where the reader also looks entries up, plain for a walk that
	 * only needs names (dir.c DESIGN): a stat after a plain readdir is a
	 * lookup answered from the cached listing, never a HEAD per entry. */
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_READDIRPLUS_AUTO)
		conn->want |= FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	fs_dirops_offered(!!(conn->capable & FUSE_CAP_PARALLEL_DIROPS));
	/* Passthrough came with 7.40; libfuse 3.14's capable bits end at 32. */
	fs_pt_offered(conn->proto_major == 7 && conn->proto_minor >= FUSE_PT_MINOR);
	fs_uring_offered(conn->proto_major == 7 ? (int)conn->proto_minor : 0);
	/* The kernel drops cached pages when a refreshed mtime/size differs. */
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* Replies are memory buffers: splice would only add a pipe copy. */
	conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_SPLICE_READ);
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	log_debug(TAG, "init: capable 0x%x want 0x%x", conn->capable, conn->want);
}

static const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.access = op_access,
	.open = op_open,
	.read = op_read,
	.flush = op_flush,
	.release = op_release,
	.ioctl = op_ioctl,
	.opendir = fs_op_opendir,
	.readdir = fs_op_readdir,
	.readdirplus = fs_op_readdirplus,
	.releasedir = fs_op_releasedir,
	.statfs = op_statfs,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.setattr = op_setattr,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_unlink,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.write = op_write,
	.setxattr = op_setxattr,
	.removexattr = op_removexattr,
	.create = op_create,
	.fallocate = op_fallocate,
	.copy_file_range = op_copy_file_range,
};

const struct fuse_lowlevel_ops *fs_lowlevel_ops(void)
{
	return &fs_ops;
}

/* The subtree-listing cap: nothing is cached with a zero TTL, so a subtree
 * listing would only be thrown away. */
static long subtree_max_keys(const struct fs_options *opts)
{
	const char *env = getenv("FEEDFS_LIST_SUBTREE_MAX_KEYS");
	long v = FS_SUBTREE_MAX_KEYS_DEFAULT;

	if (env && *env) {
		char *end;

		errno = 0;
		v = strtol(env, &end, 10);
		if (errno || *end || v < 0) {
			log_warn(TAG, "FEEDFS_LIST_SUBTREE_MAX_KEYS='%s' ignored: not a count", env);
			v = FS_SUBTREE_MAX_KEYS_DEFAULT;
		}
	}
	if (opts->metadata_ttl_ms <= 0 || (opts->snap && !opts->n_sources))
		v = 0;              /* a snapshot lists nothing (snapview.c) */
	return v;
}

int fs_new(const struct fs_options *opts, struct s3_client *s3, const struct rd_config *rd,
	   struct fs **out)
{
	struct fs *fs = calloc(1, sizeof(*fs));
	struct fs_node *root;
	int r = -ENOMEM;

	if (!fs)
		return -ENOMEM;
	/* First what fs_destroy relies on, so that every failure below can
	 * unwind through it whatever is still unset. */
	pthread_mutex_init(&fs->lock, NULL);
	pthread_cond_init(&fs->inflight_done, NULL);
	pthread_mutex_init(&fs->reap_mu, NULL);
	util_cond_init_monotonic(&fs->reap_cond);
	fs->open_files.prev = fs->open_files.next = &fs->open_files;
	fs->opts = *opts;
	fs->prefix = strdup(opts->prefix ? opts->prefix : "");
	fs->neg = calloc(1, sizeof(*fs->neg));
	fs->known_dirs = calloc(1, sizeof(*fs->known_dirs));
	if (!fs->prefix || !fs->neg || !fs->known_dirs)
		goto fail;
	/* The listing cache's own bound: the metadata share when there is one
	 * (reap.c trims it further by what the nodes take). */
	fs->meta_max = opts->metadata_max_bytes;
	r = fs_lcache_init(&fs->lcache, fs->meta_max ? fs->meta_max : FS_LCACHE_MAX_BYTES);
	if (r < 0)
		goto fail;
	r = fs_inodes_init(&fs->inodes);
	if (r < 0)
		goto fail;
	fs->subtree_max_keys = subtree_max_keys(opts);
	fs->prefix_len = strlen(fs->prefix);
	fs->opts.prefix = fs->prefix;
	fs->rd = *rd;
	r = fs_src_init(fs, opts, s3, rd);
	if (r < 0)
		goto fail;
	fs_stats_init(fs);
	fs->mount_wall_ms = util_wall_ms();
	r = fs_list_ahead_start(fs);
	if (r < 0)
		goto fail;
	root = fs_inodes_add(&fs->inodes, "", 0, 1);
	if (!root) {
		r = -ENOMEM;
		goto fail;
	}
	root->nlookup = 1;
	*out = fs;
	return 0;
fail:
	fs_destroy(fs);
	return r;
}

void fs_destroy(struct fs *fs)
{
	if (!fs)
		return;
	fs_stop(fs);
	fs_pt_destroy(fs);
	fs_inodes_cleanup(&fs->inodes);
	fs_lcache_cleanup(&fs->lcache);
	fs_src_cleanup(fs);
	free(fs->files);
	free(fs->dirs);
	if (fs->neg)
		paths_clear(fs->neg);
	free(fs->neg);
	if (fs->known_dirs)
		paths_clear(fs->known_dirs);
	free(fs->known_dirs);
	pthread_cond_destroy(&fs->inflight_done);
	pthread_cond_destroy(&fs->reap_cond);
	pthread_mutex_destroy(&fs->reap_mu);
	pthread_mutex_destroy(&fs->lock);
	free(fs->prefix);
	free(fs);
}

