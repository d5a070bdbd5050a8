/*
 * daemon — one mount's life: build the modules in dependency order (log,
 * creds, s3, the read path, fs, the FUSE session), mount, run the FUSE loop,
 * and tear down in reverse.
 */
#ifndef FEEDFS_DAEMON_H
#define FEEDFS_DAEMON_H

struct options;
struct keep_env;
struct creds_chain;
struct s3_client;

/* The credential chain and the S3 client for o's source, as a mount makes
 * them (no access check, nothing logged): for commands that talk to the
 * store without mounting (`feedfs snapshot`). 0, or -errno with one line in
 * msg; on failure nothing is left to destroy. */
int daemon_open_store(const struct options *o, struct creds_chain **creds,
		      struct s3_client **s3, char *msg, size_t msg_len);

/* "s3", "oss" or "gs": the scheme of o's source URL. */
const char *daemon_store_scheme(const struct options *o);

/* Run the mount described by o (parsed and checked, o->mount_abs filled unless
 * o->dry_run) until it is unmounted. notify_fd: the pipe to the waiting parent
 * (mount_daemon_start), or -1 in the foreground. A start-up failure is
 * reported once: through notify_fd, else on stderr as "feedfs: LINE". With
 * o->dry_run, stops after the access check and prints the one "ok" line.
 * Returns the process's exit status: 0, or 1 when it could not start. Threads
 * are started here only: call after the fork. ke: under a keeper (keep.h),
 * what it handed this server (a successor's ke->fuse_fd is the connection to
 * take over); NULL: serve alone. */
int daemon_run(struct options *o, int notify_fd, const struct keep_env *ke);

#endif
