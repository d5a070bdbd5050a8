/*
 * inode — private to src/fs/: the table of live nodes (what the kernel holds a
 * lookup count on), by inode number and by (path, type).
 *
 * Inode numbers are a 64-bit hash of the node's path and type, so a path keeps
 * its number for the life of the mount even across forget and lookup again; a
 * collision with a live node probes to the next free number. 0 and 1
 * (FUSE_ROOT_ID) are never handed out by hashing.
 *
 * No locking inside: the caller holds fs->lock around every call.
 */
#ifndef FEEDFS_FS_INODE_I_H
#define FEEDFS_FS_INODE_I_H

#include <stddef.h>
#include <stdint.h>

#include "names_i.h"

#define FS_ROOT_INO 1

/*
 * A node: what the kernel holds a lookup count on. Laid out for millions of
 * them (docs/ARCHITECTURE.md, "Metadata"): one allocation with the path
 * inline, the ETag in 16 bytes (names_i.h), the ETag of the previous open as
 * a 64-bit hash (it only decides keep_cache: equal hashes of different ETags,
 * 2^-64 per change, would keep stale pages), no stored path hash (it is
 * recomputed when the tables move a node). ~100 bytes + the path.
 */
struct fs_node {
	uint64_t ino;
	uint64_t nlookup;            /* kernel references; the root is never freed */
	struct fs_node *ino_next;    /* chain in by_ino */
	struct fs_node *path_next;   /* chain in by_path */

	/* Attributes (files), valid while attr_ms is within the metadata TTL. */
	uint64_t size;
	int64_t mtime_ms;            /* wall clock */
	union {
		int64_t attr_ms;     /* files: monotonic time the attributes were learnt;
		                      * 0: stale */
		int64_t rdc_ms;      /* directories: fetched_ms of the listing last given
		                      * to the kernel's readdir cache (dir.c); 0: none */
	};
	uint64_t open_etag_hash;     /* of the ETag at the previous open (0: none):
	                              * the keep_cache decision */
	struct fs_etag etag;         /* etag_kind says the form; FS_ETAG_STR: malloc'd */
	uint32_t opens;              /* open file handles (never evicted while > 0) */
	uint8_t etag_kind;
	uint8_t is_dir;
	uint8_t size_known;          /* size has been set once */
	uint8_t size_moved;          /* set again to another value: the kernel may hold an
	                              * older size (fs.c do_open invalidates it) */
	uint8_t used;                /* touched since the reaper last passed (CLOCK bit) */
	uint8_t plus_hint;           /* directories: files looked up in it, saturating,
	                              * halved at each opendir (dir.c plus_files) */
	uint16_t path_len;           /* <= FS_KEY_MAX */
	char path[];                 /* from the mount root, no leading/trailing '/';
	                              * root ""; NUL-terminated */
	/* Directory listings live in the path-keyed cache (fs->lcache), not here:
	 * a subtree listing fills it for directories that have no node yet. */
};

/* Heap bytes of a node (with malloc's header), for the metadata budget. */
size_t fs_node_bytes(const struct fs_node *n);

struct keep;

struct fs_inodes {
	struct keep *keep;           /* under a keeper: numbers are logged and adopted */
	struct fs_node **by_ino;
	struct fs_node **by_path;
	size_t cap;                  /* both tables, power of two */
	size_t count;
	size_t bytes;                /* nodes (fs_node_bytes) + both tables */
	size_t hand;                 /* the reaper's CLOCK hand: a by_ino bucket */
};

int fs_inodes_init(struct fs_inodes *t);
/* Frees every node (unmount). */
void fs_inodes_cleanup(struct fs_inodes *t);

/* The node of ino; under a keeper, one the previous server gave out is
 * adopted (created from its logged path, nlookup 1). */
struct fs_node *fs_inodes_get(struct fs_inodes *t, uint64_t ino);
struct fs_node *fs_inodes_find(const struct fs_inodes *t, const char *path, size_t len,
			       int is_dir);
/* New node for (path, is_dir) with nlookup 0; the root when path is "" and
 * is_dir. Must not exist yet. NULL on allocation failure. */
struct fs_node *fs_inodes_add(struct fs_inodes *t, const char *path, size_t len, int is_dir);
/* Find or add. */
struct fs_node *fs_inodes_get_path(struct fs_inodes *t, const char *path, size_t len,
				   int is_dir);
/* Drop n kernel references; frees the node (and returns 1) when none remain,
 * except for the root. */
int fs_inodes_forget(struct fs_inodes *t, struct fs_node *n, uint64_t nlookup);

/* The number a path would get without collisions. */
uint64_t fs_ino_hash(const char *path, size_t len, int is_dir);

#endif
