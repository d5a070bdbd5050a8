/*
 * mount — mount-point checks and the daemon start handshake (see mount.h).
 *
 * The handshake is one pipe: the child writes "ok\n" or one error line, then
 * closes it; the parent reads to EOF. A child that dies before writing leaves
 * an empty read, which the parent reports with the child's exit status.
 */
#include "feedfs/mount.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

/* mountinfo escapes ' ', '\t', '\n' and '\' as \ooo. */
static void unescape_octal(char *s)
{
	char *d = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*d++ = *s++;
		}
	}
	*d = '\0';
}

int mount_info_fields(char *line, char **mountpoint, char **fstype)
{
	/* id parent major:minor root MOUNTPOINT opts [optional...] - FSTYPE ... */
	char *save = NULL, *tok = strtok_r(line, " \n", &save);

	for (int i = 0; tok && i < 4; i++)
		tok = strtok_r(NULL, " \n", &save);
	if (!tok)
		return -1;
	*mountpoint = tok;
	*fstype = NULL;
	while ((tok = strtok_r(NULL, " \n", &save)))
		if (strcmp(tok, "-") == 0) {
			*fstype = strtok_r(NULL, " \n", &save);
			break;
		}
	unescape_octal(*mountpoint);
	return 0;
}

int mount_dev(const char *abs, unsigned *major, unsigned *minor)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *mp, *type;
	size_t cap = 0;
	int found = -ENOENT;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		unsigned ma, mi;

		if (sscanf(line, "%*s %*s %u:%u", &ma, &mi) != 2 ||
		    mount_info_fields(line, &mp, &type) < 0 || strcmp(mp, abs) != 0)
			continue;
		*major = ma;            /* the last one listed is on top */
		*minor = mi;
		found = 0;
	}
	free(line);
	fclose(f);
	return found;
}

/* 1 and the fs type in fstype when abs is a mount point, 0 when not. */
static int is_mounted(const char *abs, char *fstype, size_t fstype_len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, *mp, *type;
	size_t cap = 0;
	int found = 0;

	if (!f)
		return 0;
	while (!found && getline(&line, &cap, f) > 0) {
		if (mount_info_fields(line, &mp, &type) < 0 || strcmp(mp, abs) != 0)
			continue;
		found = 1;
		snprintf(fstype, fstype_len, "%s", type ? type : "?");
	}
	free(line);
	fclose(f);
	return found;
}

/* A mount point whose daemon died answers ENOTCONN. When it is a FUSE mount of
 * ours (fstype fuse.feedfs in mountinfo), detach it lazily so that a restart
 * needs no manual 'fusermount3 -u'. Anything else is left alone. Returns 0 when
 * it was detached, -errno otherwise. */
static int detach_stale(const char *path)
{
	char abs[PATH_MAX], fstype[64];
	pid_t pid;
	int status;

	if (path[0] == '/') {
		if (snprintf(abs, sizeof(abs), "%s", path) >= (int)sizeof(abs))
			return -ENAMETOOLONG;
	} else {
		char cwd[PATH_MAX];

		if (!getcwd(cwd, sizeof(cwd)) ||
		    snprintf(abs, sizeof(abs), "%s/%s", cwd, path) >= (int)sizeof(abs))
			return -ENAMETOOLONG;
	}
	/* No realpath(): it would stat the dead mount. Trim trailing slashes. */
	for (size_t n = strlen(abs); n > 1 && abs[n - 1] == '/'; n--)
		abs[n - 1] = '\0';
	if (!is_mounted(abs, fstype, sizeof(fstype)) || strcmp(fstype, "fuse.feedfs") != 0)
		return -ENOTCONN;
	if (umount2(abs, MNT_DETACH) == 0)
		return 0;
	/* Not root: fusermount3 (setuid) may unmount a mount of this user. */
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		execlp("fusermount3", "fusermount3", "-u", "-z", "--", abs, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -ENOTCONN;
	return 0;
}

int mount_check_point(const char *path, char *abs, size_t abs_len, char *msg, size_t msg_len)
{
	char real[PATH_MAX], fstype[64];
	struct dirent *de;
	struct statfs sfs;
	struct stat st;
	DIR *d;

	/* statfs always reaches the daemon (stat may be answered from cached
	 * attributes): ENOTCONN (ECONNABORTED while the kernel is still tearing
	 * the connection down) means nobody serves this mount any more. */
	if (statfs(path, &sfs) < 0 && (errno == ENOTCONN || errno == ECONNABORTED) &&
	    detach_stale(path) == 0)
		fprintf(stderr, "feedfs: %s was a stale feedfs mount (its daemon died): "
			"detached it\n", path);
	if (stat(path, &st) < 0) {
		int e = errno;

		if (e == ENOTCONN)
			snprintf(msg, msg_len, "mount point '%s' is a stale FUSE mount (%s): "
				 "run 'fusermount3 -u %s' first", path, strerror(e), path);
		else if (e == ENOENT)
			snprintf(msg, msg_len, "mount point '%s' does not exist", path);
		else
			snprintf(msg, msg_len, "mount point '%s': %s", path, strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(msg, msg_len, "mount point '%s' is not a directory", path);
		return -ENOTDIR;
	}
	if (!realpath(path, real)) {
		int e = errno;

		snprintf(msg, msg_len, "mount point '%s': %s", path, strerror(e));
		return -e;
	}
	if (is_mounted(real, fstype, sizeof(fstype))) {
		snprintf(msg, msg_len, "mount point '%s' is already mounted (%s)", real, fstype);
		return -EBUSY;
	}
	d = opendir(real);
	if (!d) {
		int e = errno;

		snprintf(msg, msg_len, "mount point '%s': %s", real, strerror(e));
		return -e;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
			closedir(d);
			snprintf(msg, msg_len, "mount point '%s' is not empty", real);
			return -ENOTEMPTY;
		}
	}
	closedir(d);
	if (strlen(real) >= abs_len) {
		snprintf(msg, msg_len, "mount point '%s': path too long", real);
		return -ENAMETOOLONG;
	}
	strcpy(abs, real);
	return 0;
}

static void parent_wait(int rfd, pid_t child)
{
	char buf[2048];
	size_t n = 0;
	int status;

	for (;;) {
		ssize_t r = read(rfd, buf + n, sizeof(buf) - 1 - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
		if (n == sizeof(buf) - 1)
			break;
	}
	buf[n] = '\0';
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (strcmp(buf, "ok") == 0)
		_exit(0);
	if (n) {
		fprintf(stderr, "feedfs: %s\n", buf);
		/* The child is the keeper (keep.h), which exits once its server
		 * has: when this command returns, nothing of the mount is left. */
		waitpid(child, &status, 0);
		_exit(1);
	}
	if (waitpid(child, &status, 0) == child && WIFSIGNALED(status))
		fprintf(stderr, "feedfs: daemon died during start-up (signal %d)\n",
			WTERMSIG(status));
	else
		fprintf(stderr, "feedfs: daemon exited during start-up\n");
	_exit(1);
}

int mount_daemon_start(int *notify_fd)
{
	int p[2];
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		int e = errno;

		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid > 0) {
		close(p[1]);
		parent_wait(p[0], pid);       /* does not return */
	}
	close(p[0]);
	setsid();
	*notify_fd = p[1];
	return 0;
}

void mount_daemon_ready(int notify_fd, const char *err)
{
	const char *line = err ? err : "ok";
	size_t len = strlen(line);
	int fd;

	if (notify_fd < 0)
		return;
	/* One write: the parent reads to EOF anyway. */
	{
		char *buf = malloc(len + 2);

		if (buf) {
			memcpy(buf, line, len);
			buf[len] = '\n';
			if (write(notify_fd, buf, len + 1) < 0) {
				/* parent gone: nothing to tell */
			}
			free(buf);
		}
	}
	close(notify_fd);
	if (err)
		return;
	fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (chdir("/") < 0) {
		/* harmless: we hold no relative paths after mounting */
	}
}

char *mount_opt_escape(const char *s)
{
	char *out = malloc(strlen(s) * 2 + 1), *d = out;

	if (!out)
		return NULL;
	for (; *s; s++) {
		if (*s == ',' || *s == '\\')
			*d++ = '\\';
		*d++ = *s;
	}
	*d = '\0';
	return out;
}
