/*
 * notify — sd_notify's datagram protocol (include/feedfs/notify.h).
 *
 * DESIGN
 * The protocol is small enough not to pull libsystemd into the daemon: the
 * service manager binds an AF_UNIX SOCK_DGRAM socket, passes its address in
 * $NOTIFY_SOCKET, and reads newline-separated assignments, one datagram per
 * message. A leading '@' names an abstract socket (the '@' becomes a NUL byte
 * and the address length counts exactly the name, no terminator). Vsock
 * addresses ("vsock:CID:PORT", for VMs) are not supported: -EAFNOSUPPORT.
 *
 * Nothing here keeps state: no socket is cached, so there is no lock and no
 * fork hazard (the keeper forks the serving process at any time).
 */
#include "feedfs/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>


/* $NOTIFY_SOCKET into sa; returns the address length, 0 when unset, or -errno. */
static int notify_addr(struct sockaddr_un *sa)
{
	const char *p = getenv("NOTIFY_SOCKET");
	size_t n;

	if (!p || !p[0])
		return 0;
	if (p[0] != '/' && p[0] != '@')
		return -EAFNOSUPPORT;
	n = strlen(p);
	if (n > sizeof(sa->sun_path) || (p[0] == '/' && n == sizeof(sa->sun_path)))
		return -ENAMETOOLONG;
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	memcpy(sa->sun_path, p, n);
	if (p[0] == '@') {
		sa->sun_path[0] = '\0';
		return (int)(offsetof(struct sockaddr_un, sun_path) + n);
	}
	return (int)(offsetof(struct sockaddr_un, sun_path) + n + 1);
}

int notify_send(const char *text)
{
	struct sockaddr_un sa;
	int len = notify_addr(&sa), fd, e = 1;
	size_t n = strlen(text);

	if (len <= 0)
		return len;
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, text, n, MSG_NOSIGNAL, (struct sockaddr *)&sa, (socklen_t)len) != (ssize_t)n)
		e = errno ? -errno : -EIO;
	close(fd);
	return e;
}

int notify_ready(void)
{
	return notify_send("READY=1");
}

int notify_watchdog(void)
{
	return notify_send("WATCHDOG=1");
}

int notify_stopping(void)
{
	return notify_send("STOPPING=1");
}

int notify_status(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	if (!getenv("NOTIFY_SOCKET"))   /* skip the formatting when nobody listens */
		return 0;
	memcpy(buf, "STATUS=", 7);
	va_start(ap, fmt);
	n = vsnprintf(buf + 7, sizeof(buf) - 7, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	for (char *c = buf + 7; *c; c++)
		if (*c == '\n')
			*c = ' ';
	return notify_send(buf);
}

uint64_t notify_watchdog_usec(void)
{
	const char *us = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	char *end;
	unsigned long long v, p;

	if (!us || !us[0])
		return 0;
	errno = 0;
	v = strtoull(us, &end, 10);
	if (errno || *end || us[0] == '-' || v == 0)
		return 0;
	if (pid && pid[0]) {
		errno = 0;
		p = strtoull(pid, &end, 10);
		if (errno || *end)
			return 0;
		if (p != (unsigned long long)getpid() && p != (unsigned long long)getppid())
			return 0;
	}
	return v;
}
