/*
 * cli — the commands that talk to a running mount through its control
 * socket: `feedfs stats` (src/cli/stats.c), `feedfs warm` (src/cli/warm.c)
 * and `feedfs prefetch` (src/cli/prefetch.c), with what they share
 * (src/cli/mounts.c); and `feedfs snapshot` (src/cli/snapshot.c), which
 * talks to the store instead.
 */
#ifndef FEEDFS_CLI_H
#define FEEDFS_CLI_H

#include <stddef.h>

/* Longest feedfs mount point (from /proc/self/mountinfo) that holds the
 * absolute path abs. 0, or -ENOENT. */
int cli_find_mount(const char *abs, char *mnt, size_t mnt_len);

/* Connect to the control socket of the feedfs mount that holds path (any
 * path on it). Returns the fd, or -1 after printing one line naming `cmd`
 * (e.g. "feedfs stats: /x is not a feedfs mount"). mnt gets the mount point. */
int cli_ctl_connect(const char *cmd, const char *path, char *mnt, size_t mnt_len);

/* Connect to a unix socket. fd or -errno. */
int cli_unix_connect(const char *sock);

/* `feedfs stats [--json|--prom] [--watch] MOUNTPOINT`; argv[0] is "stats".
 * Returns the exit status: 0, 1 (not a mount, no daemon), 2 (usage). */
int cli_stats_main(int argc, char **argv);

/* `feedfs warm [--jobs N] PATH...`; argv[0] is "warm". Returns the exit
 * status: 0 all warmed, 1 some failed, 2 usage. */
int cli_warm_main(int argc, char **argv);

/* `feedfs prefetch --order FILE MOUNTPOINT` / `--clear MOUNTPOINT`; argv[0]
 * is "prefetch". Returns the exit status: 0 sent, 1 refused or no daemon,
 * 2 usage. */
int cli_prefetch_main(int argc, char **argv);

/* `feedfs snapshot [OPTIONS] SOURCE FILE` / `--print FILE`
 * (src/cli/snapshot.c); argv[0] is "snapshot". Returns the exit status: 0,
 * 1 (the store or the file failed), 2 (usage). */
int cli_snapshot_main(int argc, char **argv);

#endif
