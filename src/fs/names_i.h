/*
 * names — private to src/fs/: how bucket keys become POSIX names, and the
 * per-directory listing (the entries one delimited ListObjectsV2 walk produced).
 *
 * Pure logic: no FUSE, no S3, no locks. Callers serialise access.
 */
#ifndef FEEDFS_FS_NAMES_I_H
#define FEEDFS_FS_NAMES_I_H

#include <stddef.h>
#include <stdint.h>

#define FS_NAME_MAX 255
#define FS_ETAG_MAX 128            /* == S3_ETAG_MAX */

/* Why a path segment cannot be a POSIX name (0: it can). */
enum fs_name_verdict {
	FS_NAME_OK = 0,
	FS_NAME_EMPTY,             /* "a//b": empty segment */
	FS_NAME_DOT,               /* "." or ".." */
	FS_NAME_NUL,               /* contains a NUL byte */
	FS_NAME_TOO_LONG,          /* more than 255 bytes */
};

enum fs_name_verdict fs_name_check(const char *name, size_t len);

/* What one item of a delimited listing of directory prefix P is to that
 * directory. For an object key or a CommonPrefix `item` (which starts with P): */
enum fs_item_kind {
	FS_ITEM_FILE,              /* *name is a file of the directory */
	FS_ITEM_DIR,               /* *name is a subdirectory (common prefix or "name/" marker) */
	FS_ITEM_SELF,              /* the directory's own marker object (key == P) */
	FS_ITEM_HIDDEN,            /* cannot be shown: *verdict says why */
};

/* is_prefix: the item came from CommonPrefixes (ends with '/'). On FILE/DIR,
 * *name / *name_len point into item. */
enum fs_item_kind fs_item_classify(const char *dir_prefix, size_t dir_prefix_len,
				   const char *item, size_t item_len, int is_prefix,
				   const char **name, size_t *name_len,
				   enum fs_name_verdict *verdict);

/* 64-bit hash of bytes (FNV-1a with a final avalanche mix). */
uint64_t fs_hash64(const void *p, size_t n, uint64_t seed);

/* One directory entry as listed. */
struct fs_dirent {
	char *name;                /* NUL-terminated; valid names never hold NUL */
	uint32_t name_len;
	uint8_t is_dir;
	uint64_t size;
	int64_t mtime_ms;          /* wall clock; 0 for directories */
	char etag[FS_ETAG_MAX];
};

/*
 * A listing: entries in arrival order (an entry's index never changes, which is
 * what makes readdir offsets stable), plus an open-addressing index by name for
 * de-duplication and lookups. Reference counted: a dir handle building it and
 * the directory node caching it may share one; it is immutable once complete.
 */
struct fs_listing {
	int refs;                  /* atomic */
	int complete;
	int64_t fetched_ms;        /* monotonic time the walk started */
	struct fs_dirent *ents;
	size_t n, cap;
	uint32_t *index;           /* slots: entry index + 1, 0 = empty */
	size_t index_cap;          /* power of two */
	uint64_t hidden;           /* items hidden while building */
};

struct fs_listing *fs_listing_new(int64_t now_ms);
void fs_listing_get(struct fs_listing *l);
void fs_listing_put(struct fs_listing *l);

/* What fs_listing_add did. */
enum fs_add_result {
	FS_ADD_NEW,                /* appended at index *idx */
	FS_ADD_DUP,                /* already present, unchanged (same kind, or a file under a dir) */
	FS_ADD_UPGRADED,           /* a file entry became a directory (dir shadows file) */
	FS_ADD_NOMEM,
};

enum fs_add_result fs_listing_add(struct fs_listing *l, const char *name, size_t len,
				  int is_dir, uint64_t size, int64_t mtime_ms,
				  const char *etag, size_t *idx);

/* Index of name or -1. */
long fs_listing_find(const struct fs_listing *l, const char *name, size_t len);

#endif
