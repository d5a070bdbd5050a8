/*
 * mount — the program's start-up mechanics around the FUSE session: checks on
 * the mount point, and a daemon start that returns to the shell only once the
 * mount is ready (or with the one line that says why it is not).
 */
#ifndef FEEDFS_MOUNT_H
#define FEEDFS_MOUNT_H

#include <stddef.h>

/* The mount point must exist, be a directory, be empty and not already be a
 * mount point. On success writes its absolute path into abs. Returns 0, or
 * -errno with one user-facing line in msg. */
int mount_check_point(const char *path, char *abs, size_t abs_len, char *msg, size_t msg_len);

/* Fork. The parent waits for the child's status line and exits: 0 after "ok",
 * 1 after an error line (printed to stderr as "feedfs: LINE"), 1 when the child
 * dies first. Only the child returns: 0 with *notify_fd set (after setsid), or
 * -errno when fork itself failed (still in the only process). */
int mount_daemon_start(int *notify_fd);

/* Child: report start-up success (err == NULL) or failure through notify_fd and
 * close it. On success also detaches stdio (to /dev/null) and chdir("/"). */
void mount_daemon_ready(int notify_fd, const char *err);

/* Split one line of /proc/self/mountinfo in place: *mountpoint (unescaped)
 * and *fstype (NULL when the line has none). 0, or -1 for a short line. */
int mount_info_fields(char *line, char **mountpoint, char **fstype);
/* The device number of the mount on top at abs, from mountinfo (the mount
 * itself is never touched: its daemon may be this very process). 0, or
 * -ENOENT when nothing is mounted there. */
int mount_dev(const char *abs, unsigned *major, unsigned *minor);

/* Escape ',' and '\' for a -o option value (fsname=...). Returns malloc'd. */
char *mount_opt_escape(const char *s);

#endif
