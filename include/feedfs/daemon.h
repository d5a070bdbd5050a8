/*
 * daemon — one mount's life: build the modules in dependency order (log,
 * creds, s3, the read path, fs, the FUSE session), mount, run the FUSE loop,
 * and tear down in reverse.
 */
#ifndef FEEDFS_DAEMON_H
#define FEEDFS_DAEMON_H

struct options;
struct keep_env;

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
