/*
 * fs — the FUSE low-level filesystem: bucket prefix -> read-only POSIX tree.
 *
 * Rules (full text in docs/SEMANTICS.md): keys split on '/'; directories are
 * implicit (common prefixes) or explicit ("dir/" marker objects); a directory
 * shadows a file of the same name; keys whose path cannot be a POSIX name (empty
 * segment, "." or "..", NUL, segment > 255 bytes) are hidden and counted; every
 * mutating operation answers EROFS.
 */
#ifndef FEEDFS_FS_H
#define FEEDFS_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct s3_client;
struct rd_config;
struct rd_ahead;
struct snap;
struct fuse_lowlevel_ops;

/* One source of a tree of several (--sources): the top-level directory name
 * and what serves it. Everything must outlive the fs. */
struct fs_source {
	const char *name;            /* a POSIX name */
	const char *prefix;          /* "" or ending with '/' */
	struct s3_client *s3;
	const struct snap *snap;     /* NULL: listed */
	const struct rd_config *rd;  /* its read path (copied) */
};

struct fs_options {
	const char *prefix;          /* "" or "some/prefix/" (always ends with '/') */
	uid_t uid;
	gid_t gid;
	mode_t file_mode;            /* permission bits only, e.g. 0444 */
	mode_t dir_mode;             /* e.g. 0555 */
	int64_t metadata_ttl_ms;     /* kernel attr/entry timeouts + listing cache */
	int64_t negative_ttl_ms;     /* kernel negative entry timeout + negative cache */
	uint64_t metadata_max_bytes; /* listings + nodes (src/fs/reap.c); 0: unbounded */
	struct rd_ahead *ahead;      /* readahead across files, or NULL: opens that follow
				      * a directory's listing order want the next files */
	const struct snap *snap;     /* --snapshot: names, sizes and ETags from it, never
				      * a LIST or HEAD (src/fs/snapview.c); must outlive
				      * the fs; NULL: from the store */
	int route_keys;              /* several sources over one read path (route.h,
				      * --cache-dir): its keys are "NAME\0KEY" */
	const struct fs_source *sources; /* n_sources > 0: several sources, each the
				      * directory of its name (src/fs/source.c); then
				      * prefix, snap, fs_new's s3 and rd are not used */
	size_t n_sources;
};

struct fs;

/*
 * The object key of a file at mount-relative `path` ("dir/file.jpg": no
 * leading or trailing '/', each segment a name the mount can show) under
 * mount prefix `prefix` ("" or ending in '/'), as the mount itself builds it;
 * for callers outside src/fs/ (e.g. `feedfs warm` resolving paths). *key is
 * malloc'd and NUL-terminated. 0; -EINVAL for an empty path, an empty, "." or
 * ".." segment or a NUL byte; -ENAMETOOLONG for a segment over 255 bytes or a
 * key over 1024 bytes; -ENOMEM.
 */
int fs_key_for_path(const char *prefix, size_t prefix_len, const char *path, size_t path_len,
		    char **key, size_t *key_len);

/* rd is copied; s3 and rd->budget must outlive the fs. 0 and *out set, or
 * -ENOMEM (*out untouched). */
int fs_new(const struct fs_options *opts, struct s3_client *s3, const struct rd_config *rd,
	   struct fs **out);
void fs_destroy(struct fs *fs);

struct fuse_session;
struct keep;

/* Serve under a keeper (keep.h): node numbers are logged and adopted, handles
 * are slots of the shared region. Once, before the session starts. 0 or
 * -ENOMEM. */
int fs_set_keep(struct fs *fs, struct keep *k);

/* The session the fs answers on (for attribute invalidations); once, after
 * fuse_session_new() and before the loop. */
void fs_set_session(struct fs *fs, struct fuse_session *se);
/* Before fuse_session_destroy(): stop what may still notify the kernel (the
 * metadata reaper). */
void fs_stop(struct fs *fs);

/* After fuse_session_mount(): put the session on the custom-io seam
 * (src/fs/dirops.c), so that the INIT reply carries FUSE_PARALLEL_DIROPS,
 * which libfuse 3.14 drops (lookups in one directory need not wait for each
 * other; $FEEDFS_PARALLEL_DIROPS=0 leaves it out), FUSE passthrough when the
 * fs has it on (src/fs/passthrough.c), and the end of the session is seen
 * (fs_session_on_end). 1 set up, -errno when libfuse refused (the mount still
 * works, as before, without any of them). */
int fs_session_parallel_dirops(struct fuse_session *se);
/* fn(arg) runs once, in the loop thread that sees the connection end
 * (unmount, abort: ENODEV on /dev/fuse), before the loop joins its workers.
 * Set once, before the loop. */
void fs_session_on_end(void (*fn)(void *), void *arg);

/* FUSE over io_uring (--fuse-uring; design in src/fs/uring.c).
 * fs_uring_want: before fs_session_parallel_dirops (the INIT reply asks for
 * it, never under the keeper: keeper != 0). fs_uring_start: after INIT was answered, before the loop; registers
 * the ring entries and starts their threads; 1 when requests come over
 * io_uring, 0 when they stay on /dev/fuse (off, keeper on, no kernel
 * support, parameter N, refused: one log line). fs_uring_stop: after the
 * unmount, before fuse_session_destroy; joins the threads. */
enum { FS_URING_OFF = 0, FS_URING_AUTO = 1, FS_URING_ON = 2 };
void fs_uring_want(int mode, int keeper);
int fs_uring_start(struct fs *fs, struct fuse_session *se);
void fs_uring_stop(void);

/* FUSE passthrough of promoted objects (promote.h; design in
 * src/fs/passthrough.c). fs_set_promote: once, before the session starts (p
 * may be NULL: no cache dir of our own). fs_set_passthrough: after
 * fs_set_keep, before the session starts; on = 0 is --passthrough=off.
 * 0 or -ENOMEM. */
struct promote;
void fs_set_promote(struct fs *fs, struct promote *p);
int fs_set_passthrough(struct fs *fs, int on);

/*
 * The object of mount-relative `path` (rules as fs_key_for_path): *key
 * (malloc'd), its ETag (NUL-terminated, at most etag_len) and size, from the
 * listing of its directory: a fresh cached one, else the directory is listed
 * once (one LIST per 1000 keys) and cached; never a HEAD. 0; -ENOENT (not in
 * the bucket), -EISDIR (a directory), -EINVAL / -ENAMETOOLONG (a path no key
 * can have), or the LIST's -errno. Any thread, no fs lock held; may block on
 * S3. (src/fs/resolve.c)
 */
int fs_resolve(struct fs *fs, const char *path, size_t len, char **key, size_t *key_len,
	       char *etag, size_t etag_len, uint64_t *size);

/* Told of every successful open with the object's key (a FUSE worker, no fs
 * lock held). Set once, before the loop starts; NULL fn: nobody. */
typedef void (*fs_opened_fn)(void *arg, const char *key, size_t key_len);
void fs_set_opened(struct fs *fs, fs_opened_fn fn, void *arg);

/* Where ioctls on open files go (the device-feed path, gpu.h). Set once,
 * before the loop; NULL (the default): every ioctl answers ENOTTY. */
struct gpu;
void fs_set_gpu(struct fs *fs, struct gpu *g);

/* Close the file and directory handles the kernel never released: an
 * unmount with handles open, or releases still queued when the session ended
 * (they are sent in the background and may come after the unmount). Adopted
 * handles (a successor's) included. */
void fs_close_open_handles(struct fs *fs);

/* The ops table; pass fs as userdata to fuse_session_new(). */
const struct fuse_lowlevel_ops *fs_lowlevel_ops(void);

/* Counters (lookups, reads, hidden keys, ...): obj is the struct fs *; and
 * the read-path histograms (fuse_read, read_wait), valid while fs lives. */
struct stats_group;
struct stats_hist_desc;
extern const struct stats_group fs_stats_group;
const struct stats_hist_desc *fs_hists(struct fs *fs, size_t *n);

#endif
