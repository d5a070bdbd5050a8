/*
 * fs_i — private to src/fs/: the filesystem state (struct fs) and what each
 * file of the module offers the others (the list at the end).
 */
#ifndef FEEDFS_FS_I_H
#define FEEDFS_FS_I_H

#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>
#include <pthread.h>

#include "feedfs/fs.h"
#include "feedfs/stats.h"
#include "feedfs/prefetch.h"
#include "inode_i.h"

/* ---- reap.c: metadata within fs->meta_max (DESIGN there) ---- */
/* Nodes above this share (percent) of meta_max are invalidated down to the
 * low one: listings get at least what the nodes leave. */
#define FS_META_NODES_HIGH 75
#define FS_META_NODES_LOW 60
#define FS_PLUS_WALK_MAX 64             /* opendirs a stat walk's hint outlives it */
struct fs;
size_t fs_meta_bytes(const struct fs *fs);
/* Drop listings, oldest first, to what the nodes leave (fs->lock held). */
void fs_meta_trim_listings(struct fs *fs);
/* The reaper thread: started with the session (fs_set_session), stopped by
 * fs_stop. */
void fs_reap_start(struct fs *fs);

/* dirops.c: op_init says whether the kernel offered parallel dirops. */
void fs_dirops_offered(int offered);

/* uring.c (its DESIGN block): FUSE requests over io_uring. The seam's
 * hooks: fs_uring_init_reply patches the INIT reply (1 when patched);
 * fs_uring_reply sends a reply to a request that came over the ring (1),
 * 0 for one that goes to /dev/fuse. */
struct iovec;
int fs_uring_param(void);                       /* enable_uring: 1 Y, 0 N, -1 absent */
void fs_uring_offered(int proto_minor);         /* op_init */
int fs_uring_init_reply(void *init_out, size_t len);
int fs_uring_reply(const struct iovec *iov, int count);

/* passthrough.c (its DESIGN block): FUSE passthrough of promoted objects. */
struct fs;
struct iovec;
void fs_pt_offered(int offered);                /* op_init: protocol 7.40+ */
int fs_pt_init(struct fs *fs, int on);          /* after fs_set_keep; 0, -ENOMEM */
void fs_pt_destroy(struct fs *fs);
void fs_pt_stop(struct fs *fs);                 /* no eviction hook runs after it */
int fs_pt_active(const struct fs *fs);
int fs_pt_negotiated(void);
/* The reply seam (dirops.c): patch the INIT reply (1 when patched), and an
 * OPEN reply sent by this thread after fs_pt_reply_begin (1: copy holds the
 * patched fuse_open_out to send instead). */
int fs_pt_init_reply(void *init_out, size_t len);
int fs_pt_open_reply(const struct iovec *iov, int count, void *copy);
void fs_pt_reply_begin(int32_t backing);
void fs_pt_reply_end(void);
/* An open of node ino reading (key, etag, size), with the open's flags: the backing id to pass
 * through (> 0), 0 for a normal open, -ESTALE when the node is open for
 * passthrough on another version. Each call >= 0 is paired with one
 * fs_pt_release(ino, the id or 0). */
int fs_pt_open(struct fs *fs, uint64_t ino, const char *key, size_t klen, const char *etag,
	       uint64_t size, int flags);
void fs_pt_release(struct fs *fs, uint64_t ino, int32_t backing);

struct s3_list_page;
struct s3_object;

struct fs_paths;                    /* path -> expiry: neg and dirs (fs.c) */

struct fs_stats {                   /* relaxed atomics; rows in stats.c */
	uint64_t lookups, lookups_cached, lookups_remote, negative_hits, lookups_joined;
	uint64_t dir_hits;              /* lookups answered by fs->known_dirs (fs.c) */
	uint64_t lookup_listings;       /* subtree listings a lookup started */
	uint64_t hidden, list_pages, heads, opens, keep_cache, flushes, reads, estale;
	uint64_t getattrs, size_invals;
	uint64_t subtree_walks, subtree_pages, subtree_dirs, subtree_too_big, subtree_kept;
	uint64_t read_bytes;            /* bytes answered to FUSE reads */
	uint64_t pt_opens;              /* opens answered with passthrough */
	uint64_t pt_backing_opens;      /* backing files registered with the kernel */
	uint64_t pt_backing_reuses;     /* opens that reused a kept backing id */
	uint64_t pt_backing_closes;     /* backing ids closed */
	uint64_t uring_requests;        /* requests that came over io_uring (uring.c) */
	uint64_t pt_refused;            /* backing files the kernel refused */
	uint64_t pt_stale;              /* opens failed: passthrough on an older version */
	uint64_t readdir_kept;          /* opendirs answered from the kernel's readdir cache */
	uint64_t readdir_regen;         /* see dir.c DESIGN: a lazy handle's listing changed */
	uint64_t meta_invals;           /* entries the kernel was asked to forget (reap.c) */
	uint64_t ahead_lists;           /* subtree listings made ahead of a walk (listing.c) */
	uint64_t snap_listings;         /* listings built from the snapshot (snapview.c) */
	/* Gauges, filled only in snapshots (under fs->lock). */
	uint64_t live_inodes, listing_dirs, listing_bytes, listing_evictions;
	uint64_t node_bytes, meta_bytes, meta_max;
};

/* Histograms of the read path (stats.c names them). */
enum { FS_HIST_READ, FS_HIST_WAIT, FS_HIST_N };

/*
 * Subtree listing (listing.c): the default cap on the keys one flat listing may
 * read before the directory is declared too big and listed with a delimiter.
 * 100,000 keys = 100 pages: the most an oversized directory wastes (once per
 * FS_BIG_TTL_FACTOR x TTL), ~1-3 s on S3 at 10-30 ms a page, and ~15 MB of
 * listings while building. Overridden by $FEEDFS_LIST_SUBTREE_MAX_KEYS
 * (0: subtree listing off) until main.c grows --list-subtree-max-keys.
 */
#define FS_SUBTREE_MAX_KEYS_DEFAULT 100000
#define FS_BIG_TTL_FACTOR 10
/* Memory bound of the listing cache (entries evicted oldest first). */
#define FS_LCACHE_MAX_BYTES (64u << 20)

/* Listing-order detector state of one directory (order.c), under fs->lock. */
#define FS_ORDER_DIRS 64
struct fs_order_dir {
	uint64_t hash;                  /* of the directory's path; 0: free */
	long top;                       /* furthest listing index opened */
	long wanted;                    /* furthest index handed to the ahead module */
	unsigned streak;                /* opens in a row near top */
};

/* One open handle (fi->fh). */
struct fs_file {
	struct rd_file *rd;
	fuse_ino_t ino;                 /* its node counts it open (reap.c spares it) */
	uint64_t fh;                    /* under a keeper: its slot's fh (keep.h) */
	int32_t backing;                /* passthrough backing id; 0: a normal open */
	int pt_counted;                 /* fs_pt_open counted it: fs_pt_release at the end */
	uint64_t etag_hash;             /* of the ETag it reads (fs.c open_etag_hash); 0: none */
	int superseded_logged;          /* its first ESTALE for a newer open was logged */
	uint64_t fail_off, fail_end;    /* the last read that failed (fs.c fail_note), */
	uint64_t fail_ns;               /* when, and with what; under fs->lock */
	int fail_err;
	char *want_key;                 /* promote at release (key, NUL, ETag); NULL: no */
	size_t want_key_len;
	uint64_t want_size;
	int read_fuse;                  /* served a FUSE read (atomic, set once) */
	int read_device;                /* served a device-feed read ioctl (idem) */
	struct fs_file *prev, *next;    /* fs->open_files, under fs->lock */
};

/* One source as the fs holds it (source.c). */
struct fs_src {
	const char *name;               /* NULL: the only source, the whole tree */
	size_t name_len;
	char *prefix;                   /* owned */
	size_t prefix_len;
	struct s3_client *s3;
	const struct snap *snap;
	struct rd_config rd;
};

struct fs {
	struct fs_options opts;
	struct fs_src *src;             /* set once at start (source.c) */
	size_t n_src;
	int multi;                      /* several sources: the root lists their names */
	struct fs_listing *root_listing; /* multi: the root, complete, for good */
	struct fuse_session *se;        /* for attribute invalidations; set once at start */
	fs_opened_fn opened;            /* set once at start (fs_set_opened) */
	void *opened_arg;
	struct gpu *gpu;                /* set once at start (fs_set_gpu); may be NULL */
	struct promote *promote;        /* set once at start (fs_set_promote); may be NULL */
	struct fs_pt *pt;               /* passthrough state; NULL: --passthrough=off */
	char *prefix;                   /* owned copy of opts.prefix */
	size_t prefix_len;
	struct rd_config rd;            /* the first source's; its read_wait is fs->hist's */
	int64_t mount_wall_ms;          /* mtime of directories */

	/*
	 * Lock order: a dir handle's lock (dir.c) may be held when taking this one,
	 * never the reverse. This lock is innermost: it is never held across an S3
	 * request, a FUSE reply or rd_* calls. It guards `inodes`, every node's
	 * fields, `neg`, `known_dirs` and `lcache`.
	 */
	pthread_mutex_t lock;
	struct fs_inodes inodes;
	struct fs_paths *neg;           /* names that do not exist */
	struct fs_paths *known_dirs;    /* names that are directories */
	struct fs_lcache lcache;        /* complete listings by directory path */
	struct fs_inflight *inflight;   /* listings being fetched (listing.c) */
	pthread_cond_t inflight_done;   /* with lock: one of them ended */
	long subtree_max_keys;          /* 0: no subtree listings */
	/* Open handles, so that an unmount with files still open (the kernel
	 * sends no release then) closes them before the budget goes away. */
	struct fs_file open_files;
	struct fs_dirh *open_dirs;      /* the same for directories (dir.c) */
	struct fs_order_dir order[FS_ORDER_DIRS];
	/* Under a keeper (keep.h; fs_set_keep): fi->fh is a slot of the shared
	 * region, and these say what each slot's handle is in this process
	 * (NULL: not yet, for a handle the previous server opened). Written
	 * under lock, read with acquire loads. */
	struct keep *keep;
	struct fs_file **files;
	struct fs_dirh **dirs;

	struct fs_lahead *lahead;       /* list-ahead threads (listing.c); NULL: off */
	/* Metadata budget (reap.c): listings + nodes within meta_max bytes. */
	size_t meta_max;                /* 0: unbounded (no --max-memory share given) */
	unsigned plus_walk;             /* files looked up from a listing lately, anywhere:
	                                 * the reader stats what it lists (dir.c plus_files) */
	pthread_mutex_t reap_mu;        /* never held with `lock` */
	pthread_cond_t reap_cond;
	pthread_t reap_thread;
	int reap_running, reap_stop;

	struct fs_stats stats;
	struct stats_hist hist[FS_HIST_N];
	struct stats_hist_desc hist_desc[FS_HIST_N];
};

/* A listing being fetched, so that lookups in that directory wait for it
 * instead of asking the store themselves (listing.c). On the lister's stack. */
struct fs_inflight {
	struct fs_inflight *next;
	const char *path;
	size_t len;
	int joinable;               /* 0 once it runs past FS_JOIN_MAX_PAGES */
};
/* A lookup waits for a listing of at most this many pages (10,000 keys, a
 * few hundred ms on S3); past that it asks the store for its one name. */
#define FS_JOIN_MAX_PAGES 10
/* fs->lock held. Claim: 1 and e is registered for path, or 0 when another
 * listing of path is in flight. Release: e ends, waiters wake. Wait: 1 after
 * waiting for every joinable listing of path in flight to end or stop being
 * joinable (fs->lock released meanwhile), 0 at once when there is none. */
int fs_listing_claim(struct fs *fs, struct fs_inflight *e, const char *path, size_t len);
void fs_listing_release(struct fs *fs, struct fs_inflight *e);
int fs_listing_wait(struct fs *fs, const char *path, size_t len);
struct fs_dirh;

/* stats.c: name the histograms (fs_new). */
void fs_stats_init(struct fs *fs);

#define FS_STAT_INC(fs, field) __atomic_add_fetch(&(fs)->stats.field, 1, __ATOMIC_RELAXED)
#define FS_STAT_ADD(fs, field, n) __atomic_add_fetch(&(fs)->stats.field, (n), __ATOMIC_RELAXED)

/* st_blksize and statfs's f_bsize: stdio and Python buffer this much. */
#define FS_BLKSIZE (1u << 20)

static inline double fs_ttl_s(int64_t ms)
{
	return (double)ms / 1000.0;
}

/*
 * The files of src/fs/ and what each offers; the graph has no cycle:
 *   fs.c (ops that reply, the ops table) -> dir.c (directory handles)
 *   fs.c, dir.c, resolve.c -> listing.c (listing service) -> node.c (node view)
 *   all of them -> names.c (pure rules, names_i.h), inode.c (node table)
 * fs.c offers nothing to the others.
 */

/* ---- node.c: a node's keys, attributes and FUSE view (fs->lock held, except
 * fs_path_key) ---- */
/* The object key of mount-relative path under the mount prefix (flags: 0 or
 * FS_KEY_DIR for the prefix that lists it); fs_key's returns. */
int fs_path_key(const struct fs *fs, const char *path, size_t len, unsigned flags,
		char **key, size_t *key_len);
/* A file node's attributes were learnt within the metadata TTL. */
int fs_attrs_fresh(const struct fs *fs, const struct fs_node *n, int64_t now_ms);
/* Fill a FUSE entry / stat for a node. */
void fs_fill_entry(const struct fs *fs, const struct fs_node *n, struct fuse_entry_param *e);
void fs_fill_stat(const struct fs *fs, const struct fs_node *n, struct stat *st);
/* Copy a listed file's attributes to the node unless it knows newer ones
 * (t: the table the node is in, which counts its bytes). */
void fs_node_set_from_dirent(struct fs_inodes *t, struct fs_node *n, const struct fs_dirent *d,
			     int64_t when_ms);
/* Attributes from a HEAD (always newer than any listing's). */
void fs_node_set_from_object(struct fs_inodes *t, struct fs_node *n, const struct s3_object *o,
			     int64_t when_ms);
/* The node's ETag as text into dst (FS_ETAG_MAX bytes; "" for none). */
void fs_node_etag(const struct fs_node *n, char *dst);

/* ---- listing.c: subtree listings and the listing cache ---- */
/* A fresh complete listing of directory path, borrowed (fs->lock held). */
struct fs_listing *fs_listing_cached(struct fs *fs, const char *path, size_t len,
				     int64_t now_ms);
/* Cache l as path's listing unless a newer one is cached (fs->lock held).
 * 0 (also when skipped) or -ENOMEM. */
int fs_listing_install(struct fs *fs, const char *path, size_t len, struct fs_listing *l,
		       int64_t now_ms);
/* One log line for the keys a listing of prefix hid (none: nothing). */
void fs_listing_log_hidden(const char *prefix, uint64_t hidden);
/* List directory `path` (prefix: what to list) and everything below it with
 * one flat listing, up to fs->subtree_max_keys keys; install every listing
 * in fs->lcache. 1 installed, 0 too big (marked; list it with a delimiter),
 * -errno. No lock held. */
int fs_subtree_list(struct fs *fs, const char *path, size_t path_len, const char *prefix,
		    size_t prefix_len);
/* The same with a cap of its own (a lookup's: FS_LOOKUP_LIST_MAX_KEYS); past
 * it the directory is marked too big exactly as past fs->subtree_max_keys. */
int fs_subtree_list_max(struct fs *fs, const char *path, size_t path_len, const char *prefix,
			size_t prefix_len, long max_keys);
/* A lookup that misses in a directory with no fresh listing lists the
 * directory's subtree first, up to this many keys (FS_JOIN_MAX_PAGES pages):
 * the lookups that follow in it, and those waiting for it, answer from the
 * cache. Bigger directories are marked too big and looked up name by name. */
#define FS_LOOKUP_LIST_MAX_KEYS (FS_JOIN_MAX_PAGES * 1000L)
/* The same from one flat page already fetched (a lookup's): installs only when
 * the page is the whole subtree (not truncated). No lock held. */
void fs_subtree_from_page(struct fs *fs, const char *path, size_t path_len,
			  const char *prefix, size_t prefix_len, const struct s3_list_page *pg);

/*
 * List-ahead: a lookup that finds directory entry i of a cached listing, or
 * an opendir of it (a walk descending), queues the subtree listings of the
 * directories from i (from i + 1: opendir lists i itself) on (FS_AHEAD_DIRS
 * of them) to FS_AHEAD_THREADS threads, so the store answers
 * for the next directories while the walk reads this one: LISTs overlap the
 * FUSE round trips instead of following them. A lookup or opendir that gets
 * there first joins the listing in flight (single-flight). Listings made
 * ahead go into the bounded cache like any other; $FEEDFS_LIST_AHEAD=0 turns
 * it off. fs->lock held for _locked.
 * Four LISTs in flight, sixteen directories ahead: with two and four, a
 * 1M-key walk left the store idle a quarter of the time (both threads
 * parsing while no LIST was out); with four, a sixth. On a store whose LIST
 * takes 50-100 ms the depth matters more.
 */
#define FS_AHEAD_DIRS 16
#define FS_AHEAD_THREADS 4
#define FS_AHEAD_QUEUE 64
void fs_list_ahead_locked(struct fs *fs, const char *dir, size_t dlen,
			  const struct fs_listing *pl, long i);
int fs_list_ahead_start(struct fs *fs);
void fs_list_ahead_stop(struct fs *fs);

/* ---- source.c: the source a path belongs to (its DESIGN) ---- */
/* The source of mount-relative path and the path inside it (*rel points into
 * path); NULL for the root of a tree of several and for a name that is no
 * source. No lock needed: sources are set once at start. */
const struct fs_src *fs_src_of(const struct fs *fs, const char *path, size_t len,
			       const char **rel, size_t *rel_len);
/* 1 when path's listings come from a store (a source without a snapshot);
 * 0 for a snapshot's paths and the root of several sources, whose listings
 * the cache always has (fs_listing_cached): the LIST paths refuse those. */
int fs_path_listed(const struct fs *fs, const char *path, size_t len);
/* That source's snapshot (NULL: listed, or no source), client, read path. */
const struct snap *fs_path_snap(const struct fs *fs, const char *path, size_t len);
struct s3_client *fs_path_s3(const struct fs *fs, const char *path, size_t len);
const struct rd_config *fs_path_rd(const struct fs *fs, const char *path, size_t len);
/* The key the read path gets for path: its object key, or with
 * opts.route_keys "NAME\0KEY" (route.h). Returns as fs_path_key. */
int fs_path_read_key(const struct fs *fs, const char *path, size_t len, char **key,
		     size_t *key_len);
/* fs_new / fs_destroy: the sources from opts (one: prefix, s3, rd, snap). */
int fs_src_init(struct fs *fs, const struct fs_options *opts, struct s3_client *s3,
		const struct rd_config *rd);
void fs_src_cleanup(struct fs *fs);

/* ---- snapview.c: a mount from a snapshot (fs->opts.snap; its DESIGN) ---- */
/* The listing of directory path built from the snapshot and installed in the
 * cache; borrowed like fs_listing_cached's; an empty one for a path that is no
 * directory of the snapshot; NULL only when out of memory. fs->lock held. */
struct fs_listing *fs_snap_listing_locked(struct fs *fs, const char *path, size_t len,
					  int64_t now_ms);
/* A file node's attributes from the snapshot: 0, or -ENOENT when the
 * snapshot has no such key. fs->lock held. */
int fs_snap_node_attrs_locked(struct fs *fs, struct fs_node *n, int64_t now_ms);

/* ---- order.c: a file was opened; when the opens of its directory follow the
 * listing order, want the next files from fs->opts.ahead. Takes fs->lock. ---- */
void fs_order_opened(struct fs *fs, fuse_ino_t ino);

/* ---- dir.c: directory handles, for fs.c's ops table ---- */
void fs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
/* Free every directory handle the kernel never released (dir.c). */
void fs_close_open_dirs(struct fs *fs);
void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi);
void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi);
void fs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

#endif
