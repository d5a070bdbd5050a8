/*
 * fs_i — private to src/fs/: the filesystem state shared by fs.c (entries,
 * attributes, files, the ops table) and dir.c (directory handles, readdir).
 */
#ifndef FEEDFS_FS_I_H
#define FEEDFS_FS_I_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>
#include <pthread.h>

#include "feedfs/fs.h"
#include "feedfs/prefetch.h"
#include "inode_i.h"

struct fs_neg;                      /* negative-lookup cache (fs.c) */

struct fs_stats {                   /* relaxed atomics */
	uint64_t lookups, lookups_cached, lookups_remote, negative_hits;
	uint64_t hidden, list_pages, heads, opens, keep_cache, reads, estale;
};

struct fs {
	struct fs_options opts;
	char *prefix;                   /* owned copy of opts.prefix */
	size_t prefix_len;
	struct s3_client *s3;
	struct rd_config rd;
	int64_t mount_wall_ms;          /* mtime of directories */

	/*
	 * Lock order: a dir handle's lock (dir.c) may be held when taking this one,
	 * never the reverse. This lock is innermost: it is never held across an S3
	 * request, a FUSE reply or rd_* calls. It guards `inodes`, every node's
	 * fields (and node->listing pointers) and `neg`.
	 */
	pthread_mutex_t lock;
	struct fs_inodes inodes;
	struct fs_neg *neg;

	struct fs_stats stats;
};

#define FS_STAT_INC(fs, field) __atomic_add_fetch(&(fs)->stats.field, 1, __ATOMIC_RELAXED)
#define FS_STAT_ADD(fs, field, n) __atomic_add_fetch(&(fs)->stats.field, (n), __ATOMIC_RELAXED)

/* fs.c, for dir.c (caller holds fs->lock where noted) */
int fs_listing_fresh(const struct fs *fs, const struct fs_listing *l, int64_t now_ms);
/* "path/name" or "name" under the root; malloc'd, *len set. NULL: -ENOMEM. */
char *fs_child_path(const struct fs_node *parent, const char *name, size_t name_len,
		    size_t *len);
/* S3 prefix listing a directory node: fs prefix + path + "/" (root: fs prefix). */
char *fs_dir_prefix(const struct fs *fs, const struct fs_node *dir, size_t *len);
/* Fill a FUSE entry for a node (lock held). */
void fs_fill_entry(const struct fs *fs, const struct fs_node *n, struct fuse_entry_param *e);
void fs_fill_stat(const struct fs *fs, const struct fs_node *n, struct stat *st);
/* Copy a listed file's attributes to the node unless it knows newer ones (lock held). */
void fs_node_set_from_dirent(struct fs_node *n, const struct fs_dirent *d, int64_t when_ms);

/* dir.c */
void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi);
void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi);
void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif
