/*
 * node — what a node is to S3 and to the kernel: its object keys, its
 * attributes (learnt from a listing or a HEAD) and the stat/entry replies
 * built from them.
 *
 * DESIGN
 * The ops that reply (fs.c) and the directory handles (dir.c) both turn nodes
 * into FUSE entries and both learn attributes from listings; this file is that
 * shared layer, so neither of them needs the other. Everything here is called
 * with fs->lock held (it reads or writes node fields) except fs_path_key, which
 * only reads the immutable prefix. Nothing here blocks or sends a request.
 *
 * Attributes have one rule: a listing's view (taken at the listing's
 * fetched_ms) never overwrites newer attributes from a HEAD, and every size a
 * node ever had is remembered as "moved" so that an open can tell the kernel
 * its cached size may be stale (fs.c do_open).
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/s3.h"

int fs_path_key(const struct fs *fs, const char *path, size_t len, unsigned flags,
		char **key, size_t *key_len)
{
	const char *rel;
	size_t rel_len;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rel_len);

	if (!s) {
		/* The root of a tree of several sources (its listing is built in,
		 * never asked for) or a name that is no source. */
		if (len)
			return -ENOENT;
		*key = strdup("");
		*key_len = 0;
		return *key ? 0 : -ENOMEM;
	}
	return fs_key(s->prefix, s->prefix_len, rel, rel_len, flags, key, key_len);
}

int fs_attrs_fresh(const struct fs *fs, const struct fs_node *n, int64_t now_ms)
{
	/* A snapshot's attributes never go stale: it does not change. */
	if (fs_path_snap(fs, n->path, n->path_len))
		return n->attr_ms != 0;
	return n->attr_ms && now_ms - n->attr_ms < fs->opts.metadata_ttl_ms;
}

void fs_fill_stat(const struct fs *fs, const struct fs_node *n, struct stat *st)
{
	int64_t mt = n->is_dir ? fs->mount_wall_ms : n->mtime_ms;

	memset(st, 0, sizeof(*st));
	st->st_ino = n->ino;
	st->st_uid = fs->opts.uid;
	st->st_gid = fs->opts.gid;
	if (n->is_dir) {
		st->st_mode = S_IFDIR | (fs->opts.dir_mode & 07777);
		st->st_nlink = 2;
	} else {
		st->st_mode = S_IFREG | (fs->opts.file_mode & 07777);
		st->st_nlink = 1;
		st->st_size = (off_t)n->size;
		st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
	}
	st->st_blksize = FS_BLKSIZE;
	st->st_mtim.tv_sec = mt / 1000;
	st->st_mtim.tv_nsec = (mt % 1000) * 1000000;
	st->st_atim = st->st_mtim;
	st->st_ctim = st->st_mtim;
}

void fs_fill_entry(const struct fs *fs, const struct fs_node *n, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = n->ino;
	e->attr_timeout = fs_ttl_s(fs->opts.metadata_ttl_ms);
	e->entry_timeout = fs_ttl_s(fs->opts.metadata_ttl_ms);
	fs_fill_stat(fs, n, &e->attr);
}

/* Every size this node ever had is a size the kernel may hold for it. */
static void node_set_size(struct fs_node *n, uint64_t size)
{
	if (n->size_known && n->size != size)
		n->size_moved = 1;
	n->size_known = 1;
	n->size = size;
}

/* The node's ETag becomes s (bytes of the table move with it: t). An ETag
 * of an odd form that cannot be copied is left out (""): the read path then
 * pins no version, as for a store that sends none. */
static void node_set_etag(struct fs_inodes *t, struct fs_node *n, const char *s)
{
	uint8_t md5[16];

	if (n->etag_kind == FS_ETAG_STR) {
		if (strcmp(n->etag.u.str, s) == 0)
			return;
		t->bytes -= strlen(n->etag.u.str) + 1 + 16;
		free(n->etag.u.str);
	}
	n->etag_kind = FS_ETAG_NONE;
	if (!s[0])
		return;
	if (fs_etag_md5(s, md5)) {
		memcpy(n->etag.u.md5, md5, 16);
		n->etag_kind = FS_ETAG_MD5;
		return;
	}
	n->etag.u.str = strndup(s, FS_ETAG_MAX - 1);
	if (n->etag.u.str) {
		n->etag_kind = FS_ETAG_STR;
		t->bytes += strlen(n->etag.u.str) + 1 + 16;
	}
}

void fs_node_etag(const struct fs_node *n, char *dst)
{
	fs_etag_str(&n->etag, n->etag_kind, dst);
}

void fs_node_set_from_dirent(struct fs_inodes *t, struct fs_node *n, const struct fs_dirent *d,
			     int64_t when_ms)
{
	char etag[FS_ETAG_MAX];

	if (n->is_dir || d->is_dir || n->attr_ms > when_ms)
		return;
	node_set_size(n, d->size);
	n->mtime_ms = d->mtime_ms;
	fs_dirent_etag(d, etag);
	node_set_etag(t, n, etag);
	n->attr_ms = when_ms;
}

void fs_node_set_from_object(struct fs_inodes *t, struct fs_node *n, const struct s3_object *o,
			     int64_t when_ms)
{
	node_set_size(n, o->size);
	n->mtime_ms = o->mtime_ms;
	node_set_etag(t, n, o->etag);
	n->attr_ms = when_ms;
}
