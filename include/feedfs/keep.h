/*
 * keep — the mount outlives the process that serves it.
 *
 * DESIGN
 * A FUSE mount dies with the last open /dev/fuse descriptor: kill -9 of the
 * serving process left every reader with ENOTCONN. So the process the user
 * (or systemd) starts is a keeper: it forks the server, which builds and
 * mounts as before and then hands the keeper a copy of the /dev/fuse
 * descriptor (SCM_RIGHTS over a socketpair). The keeper does nothing else
 * that can fail: it waits. When the server dies without having unmounted,
 * the connection lives on in the keeper's descriptor, requests queue in the
 * kernel, and the keeper execs a successor (the binary's path on disk, so a
 * replaced binary is an upgrade) that takes the connection over:
 *  - the INIT state: the server saved the raw INIT request it answered; the
 *    successor's libfuse session processes that same request (its reply goes
 *    to a request the kernel no longer has and is dropped), so both sides
 *    agree on what was negotiated;
 *  - requests the dead process had read and not answered: FUSE_NOTIFY_RESEND
 *    (Linux 6.9) puts them back in the queue;
 *  - node ids: a node id is a hash of its path (fs/inode_i.h); every node
 *    created is logged (id, path, type) in a shared region, so the successor
 *    knows an id it never handed out;
 *  - open handles: with the keeper, a file or directory handle (fi->fh) is a
 *    slot number in the shared region, whose slot holds (kind, node id, size,
 *    ETag); the successor reopens it on first use, pinned to the same ETag,
 *    so a file replaced meanwhile still fails ESTALE, never wrong bytes.
 * The shared region is one memfd the keeper creates and every server maps;
 * only one server runs at a time (the keeper starts the next one after the
 * previous one is reaped), so the region has one writer.
 * A crash loop (KEEP_CRASH_MAX deaths within KEEP_CRASH_WINDOW_S) stops the
 * restarts with one log line; the keeper then answers every request EIO until
 * the mount is unmounted. SIGTERM/SIGINT to the keeper are passed to the
 * server, which unmounts as before; SIGUSR2 restarts the server (an upgrade:
 * the successor is the binary now on disk).
 * Limits: handles beyond KEEP_SLOTS open at once fail ENFILE; the node log
 * holds one record per distinct (id, path) and is not compacted otherwise
 * (KEEP_LOG_BYTES, then new nodes are not logged and an id the successor
 * cannot map answers ESTALE); a request that was in flight when
 * the server died and was already answered is not resent.
 */
#ifndef FEEDFS_KEEP_H
#define FEEDFS_KEEP_H

#include <stddef.h>
#include <stdint.h>

#define KEEP_SLOTS 65536u               /* handles open at once */
#define KEEP_LOG_BYTES (1ull << 30)     /* node log, reserved (pages used as written) */
#define KEEP_INIT_MAX 1024u
#define KEEP_ETAG_MAX 128u
#define KEEP_CRASH_MAX 5
#define KEEP_CRASH_WINDOW_S 60

/* KEEP_IDLE: no handle, a passthrough backing id kept registered for the
 * next open of a node (fs/passthrough.c): ino, size, the promoted file's
 * name in the etag field, and the id. A successor adopts it (or closes it),
 * so an id never outlives the process that knew it. */
enum keep_kind { KEEP_FREE = 0, KEEP_FILE = 1, KEEP_DIR = 2, KEEP_IDLE = 3 };

struct keep;                            /* the shared region, as one server maps it */

/* What a server learns from its environment (keep_from_env). */
struct keep_env {
	int state_fd;                   /* the shared region; -1: not under a keeper */
	int chan_fd;                    /* first server: where to send the /dev/fuse fd */
	int fuse_fd;                    /* successor: the connection to take over; -1: mount */
	unsigned takeovers;             /* successors started before this server */
	const char *mount_abs;          /* successor: the mount point (not stat()ed: it is ours) */
};

/* ---- the keeper (the process the user starts) ---- */

/* Run the mount under a keeper: fork the server, which calls serve(arg, env)
 * and returns its exit status; restart it as described in DESIGN. argv is
 * main's (the successor gets it again, with the keeper's state in its
 * environment). notify_fd is closed in the keeper once the first server
 * has it. Returns the exit status for main. */
typedef int (*keep_serve_fn)(void *arg, const struct keep_env *env);
int keep_run(char **argv, const char *mount_abs, int notify_fd, keep_serve_fn serve, void *arg);

/* In a successor: fills env from FEEDFS_KEEP (and clears it). 1 when this
 * process is a successor, 0 when not, -EINVAL when the variable is bad. */
int keep_from_env(struct keep_env *env);

/* ---- the server's side ---- */

/* Map the region (state_fd). 0, -errno. */
int keep_open(int state_fd, struct keep **out);
void keep_close(struct keep *k);

/* The raw INIT request answered by the first server. */
void keep_save_init(struct keep *k, const void *buf, size_t len);
size_t keep_init(struct keep *k, void *buf, size_t cap);

/* Node log: a node id given out for (path, is_dir). Called under the fs lock. */
void keep_log_node(struct keep *k, uint64_t ino, const char *path, size_t len, int is_dir);
/* A successor's question: the path of a node id it never gave out. 1 and
 * (*path, *len: inside the region, *is_dir), or 0. */
int keep_find_node(struct keep *k, uint64_t ino, const char **path, size_t *len, int *is_dir);

/* Handles. open: the lowest free slot filled; returns the fh (slot + 1) or
 * -ENFILE. */
int64_t keep_handle_open(struct keep *k, enum keep_kind kind, uint64_t ino, uint64_t size,
			 const char *etag);
void keep_handle_close(struct keep *k, uint64_t fh);
/* What fh names: 0 and the fields (etag: KEEP_ETAG_MAX bytes), -EBADF when
 * it is not an open handle of that kind. */
int keep_handle_get(struct keep *k, uint64_t fh, enum keep_kind kind, uint64_t *ino,
		    uint64_t *size, char *etag);

/* FUSE passthrough (src/fs/passthrough.c): the backing id a file handle was
 * opened with (0: none). Backing ids belong to the connection, so a successor
 * must know them to keep every open of a node on one backing file and to
 * close an id when its node's last passthrough handle is released. The slot
 * field was padding before: the region's layout and version do not change. */
void keep_handle_set_backing(struct keep *k, uint64_t fh, int32_t backing);
int32_t keep_handle_backing(struct keep *k, uint64_t fh);
/* Every open file handle (a successor rebuilding its passthrough state). */
typedef void (*keep_handle_fn)(void *arg, uint64_t fh, uint64_t ino, const char *etag,
			       int32_t backing);
void keep_handles_each(struct keep *k, keep_handle_fn fn, void *arg);
/* The same over the slots of one kind (KEEP_IDLE: the kept backing ids). */
void keep_slots_each(struct keep *k, enum keep_kind kind, keep_handle_fn fn, void *arg);

/* Send the keeper the connection (first server, after mounting). */
int keep_send_fuse_fd(int chan_fd, int fuse_fd);

struct fuse_session;
/* First server: read the INIT request, save it (k may be NULL: serving
 * alone), process it (before the loop, so INIT is answered when it returns).
 * Successor: process the saved INIT on a session "mounted" on the inherited
 * descriptor, then ask the kernel to resend what the dead process had read.
 * 0, or -errno with a line in msg. */
int keep_first_init(struct keep *k, struct fuse_session *se, char *msg, size_t msg_len);
int keep_takeover_init(struct keep *k, struct fuse_session *se, char *msg, size_t msg_len);

#endif
