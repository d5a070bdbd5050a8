/*
 * mounts — finding a feedfs mount and its control socket, for the clients.
 */
#include "feedfs/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "feedfs/ctl.h"
#include "feedfs/mount.h"

int cli_find_mount(const char *abs, char *mnt, size_t mnt_len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0, best = 0;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *mp, *type;
		size_t l;

		if (mount_info_fields(line, &mp, &type) < 0 || !type || strcmp(type, "fuse.feedfs"))
			continue;
		l = strlen(mp);
		if (l == 1)
			l = 0;                  /* "/" */
		if (strncmp(abs, mp, l) == 0 && (abs[l] == '/' || abs[l] == '\0') &&
		    strlen(mp) + 1 > best && strlen(mp) < mnt_len) {
			best = strlen(mp) + 1;
			strcpy(mnt, mp);
		}
	}
	free(line);
	fclose(f);
	return best ? 0 : -ENOENT;
}

int cli_unix_connect(const char *path)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int cli_ctl_connect(const char *cmd, const char *path, char *mnt, size_t mnt_len)
{
	char abs[PATH_MAX], sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd;

	if (!realpath(path, abs)) {
		fprintf(stderr, "%s: %s: %s\n", cmd, path, strerror(errno));
		return -1;
	}
	if (cli_find_mount(abs, mnt, mnt_len) < 0) {
		fprintf(stderr, "%s: %s is not a feedfs mount\n", cmd, path);
		return -1;
	}
	if (ctl_socket_path(mnt, sock, sizeof(sock)) < 0) {
		fprintf(stderr, "%s: no control socket path for %s\n", cmd, mnt);
		return -1;
	}
	fd = cli_unix_connect(sock);
	if (fd < 0) {
		fprintf(stderr, "%s: cannot reach the daemon of %s at %s: %s (is it yours? "
			"the socket is its uid's only)\n", cmd, mnt, sock, strerror(-fd));
		return -1;
	}
	return fd;
}
