/*
 * names — private to src/fs/: how bucket keys become POSIX names, the
 * per-directory listing (what a delimited ListObjectsV2 walk produces), the
 * subtree builder (many listings from one flat listing) and the path-keyed
 * listing cache.
 *
 * Pure logic: no FUSE, no S3, no locks. Callers serialise access.
 */
#ifndef FEEDFS_FS_NAMES_I_H
#define FEEDFS_FS_NAMES_I_H

#include <stddef.h>
#include <stdint.h>

#define FS_NAME_MAX 255
#define FS_ETAG_MAX 128            /* == S3_ETAG_MAX, asserted in names.c */

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

/*
 * Paths and keys: the one place a mount-relative path becomes an object key.
 * A path is what a node holds: segments joined by '/', no leading or trailing
 * '/', "" for the root. The key of path P under mount prefix X ("" or ending
 * in '/') is X P; the directory form (what lists P's children) is X P "/",
 * and for the root X itself. Keys are at most FS_KEY_MAX bytes (S3's limit)
 * and may hold any byte but NUL. Results are malloc'd and NUL-terminated.
 */
#define FS_KEY_MAX 1024
#define FS_KEY_DIR 1u              /* flag: the directory form */

/* The key of path (flags: 0 or FS_KEY_DIR). 0, -EINVAL (a NUL in prefix or
 * path), -ENAMETOOLONG (over FS_KEY_MAX) or -ENOMEM. */
int fs_key(const char *prefix, size_t prefix_len, const char *path, size_t path_len,
	   unsigned flags, char **key, size_t *key_len);
/* The reverse, without copying: *path points into key. 0, or -EINVAL when key
 * is not of that form under prefix (another prefix, or FS_KEY_DIR and no
 * trailing '/' on a non-root path). */
int fs_key_path(const char *prefix, size_t prefix_len, const char *key, size_t key_len,
		unsigned flags, const char **path, size_t *path_len);
/* Child path: "dir/name", or "name" under the root (dir ""). name must be a
 * POSIX name (fs_name_check): -EINVAL if not, -ENAMETOOLONG if over
 * FS_NAME_MAX or if the path is longer than any key could be (FS_KEY_MAX);
 * -EINVAL for a NUL in dir; -ENOMEM. */
int fs_path_join(const char *dir, size_t dir_len, const char *name, size_t name_len,
		 char **path, size_t *path_len);

/* util_hash64 (feedfs/hash.h): FNV-1a with the shared finaliser; the name
 * stays because inode numbers and every fs table are keyed by it. */
uint64_t fs_hash64(const void *p, size_t n, uint64_t seed);

/*
 * A compact ETag. S3's usual form, '"' + 32 lowercase hex digits + '"' (an
 * MD5), is kept as its 16 bytes (FS_ETAG_MD5); any other form (multipart
 * "-N", other stores) as a pointer to a copy (FS_ETAG_STR), owned by whoever
 * holds the etag (a node: malloc'd; a listing: its arena). 16 bytes where a
 * node used to carry two FS_ETAG_MAX buffers.
 */
enum { FS_ETAG_NONE = 0, FS_ETAG_MD5, FS_ETAG_STR };
struct fs_etag {
	union {
		uint8_t md5[16];
		char *str;
	} u;
};
/* 1 and out filled when s is the MD5 form, else 0. */
int fs_etag_md5(const char *s, uint8_t out[16]);
/* The ETag as text into dst (FS_ETAG_MAX bytes); "" for none. */
void fs_etag_str(const struct fs_etag *e, uint8_t kind, char *dst);
/* 1 when e is the ETag s. */
int fs_etag_eq(const struct fs_etag *e, uint8_t kind, const char *s);

/* One directory entry as listed. Names (and ETags not of the MD5 form) live
 * in the listing's arena: an entry costs 48 bytes + its name + 1 (+ 8 of
 * name index), no malloc of its own. */
struct fs_dirent {
	char *name;                /* NUL-terminated, in the arena; never holds NUL */
	uint64_t size;
	int64_t mtime_ms;          /* wall clock; 0 for directories */
	struct fs_etag etag;       /* etag_kind says which form; none for directories */
	uint32_t name_len;
	uint8_t is_dir;
	uint8_t etag_kind;
};

/* The entry's ETag as text into dst (FS_ETAG_MAX bytes). */
static inline void fs_dirent_etag(const struct fs_dirent *d, char *dst)
{
	fs_etag_str(&d->etag, d->etag_kind, dst);
}

/* Arena chunk of a listing: names and odd ETags, never moved once written
 * (entries point into it), freed with the listing. */
struct fs_chunk;

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
	struct fs_chunk *chunks;   /* arena, newest first */
	size_t arena_bytes;        /* bytes of all chunks */
};

struct fs_listing *fs_listing_new(int64_t now_ms);
void fs_listing_get(struct fs_listing *l);
void fs_listing_put(struct fs_listing *l);
/* The listing is whole: mark it complete (immutable from now on). */
void fs_listing_done(struct fs_listing *l);

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

/* Approximate heap bytes held by a listing (for the cache's memory bound). */
size_t fs_listing_bytes(const struct fs_listing *l);

/*
 * A subtree: the listings of a directory D and of every directory below it,
 * built from one listing of D's prefix WITHOUT a delimiter (each key once, in
 * any order). Every key is placed exactly as the delimited listings of each
 * level would place it (fs_item_classify's rules): its first invalid segment
 * hides it in the directory that segment would be listed in, the valid
 * segments before it are directories; "N/" markers make (empty) directories;
 * a directory shadows a file of the same name whichever arrives first.
 * Directories are the ones keys imply, so a prefix holding only sub-prefixes
 * (which some servers leave out of CommonPrefixes) is listed too.
 */
struct fs_tree_dir {
	char *path;                /* from the mount root, no leading/trailing '/' */
	size_t path_len;
	uint64_t hash;
	struct fs_listing *l;      /* one reference */
};

struct fs_tree {
	struct fs_tree_dir *dirs;  /* dirs[0] is D itself */
	size_t n, cap;
	uint32_t *index;           /* by path: dirs index + 1, 0 = empty */
	size_t index_cap;          /* power of two */
	char *scratch;             /* D's path + '/' + the key being placed */
	size_t scratch_cap;
	uint64_t keys, hidden;
	int64_t fetched_ms;
};

/* D is `path` (mount-root relative, "" for the root). 0 or -ENOMEM. */
int fs_tree_init(struct fs_tree *t, const char *path, size_t len, int64_t now_ms);
void fs_tree_cleanup(struct fs_tree *t);
/* rel: the key with D's prefix removed (may hold NUL bytes; rel_len counts
 * them). "" is D's own marker and ignored. 1 placed, 0 hidden, -ENOMEM. */
int fs_tree_add(struct fs_tree *t, const char *rel, size_t rel_len, uint64_t size,
		int64_t mtime_ms, const char *etag);
/* Marks every listing complete (they are immutable from then on). */
void fs_tree_finish(struct fs_tree *t);
/* Listing of a directory of the tree by path, or NULL. */
struct fs_listing *fs_tree_find(const struct fs_tree *t, const char *path, size_t len);

/*
 * The listing cache: complete listings by directory path (mount-root
 * relative), whoever built them (a delimited walk of one directory or a
 * subtree). Entries are trusted for ttl_ms from the listing's fetched_ms and
 * dropped when found older. Memory is bounded: when the listings held exceed
 * max_bytes the least recently installed or found (fs_lcache_get) go first. An entry can also carry a
 * "too big for a subtree listing" mark with its own expiry (big_until_ms),
 * kept when the listing is replaced.
 *
 * No locking inside: the caller serialises (fs->lock).
 */
struct fs_lcache_ent;

struct fs_lcache {
	struct fs_lcache_ent **b;  /* hash buckets */
	size_t nb;                 /* power of two */
	struct fs_lcache_ent *oldest, *newest;   /* install order */
	size_t count, bytes, max_bytes;
	uint64_t evictions;
};

int fs_lcache_init(struct fs_lcache *c, size_t max_bytes);
void fs_lcache_cleanup(struct fs_lcache *c);
/* A fresh complete listing of path (borrowed: valid while the caller's lock
 * is held; take a reference to keep it), or NULL. */
struct fs_listing *fs_lcache_get(struct fs_lcache *c, const char *path, size_t len,
				 int64_t now_ms, int64_t ttl_ms);
/* Installs (takes a new reference on) l as path's listing, replacing any.
 * 0 or -ENOMEM (the cache is unchanged then). */
int fs_lcache_put(struct fs_lcache *c, const char *path, size_t len, struct fs_listing *l);
/* Evict the oldest listings until the cache holds at most max_bytes, always
 * keeping the newest (the directory being read needs it). */
void fs_lcache_trim(struct fs_lcache *c, size_t max_bytes);
/* The "too big" mark: set until until_ms; test at now_ms. */
int fs_lcache_mark_big(struct fs_lcache *c, const char *path, size_t len, int64_t until_ms);
int fs_lcache_is_big(struct fs_lcache *c, const char *path, size_t len, int64_t now_ms);

#endif
