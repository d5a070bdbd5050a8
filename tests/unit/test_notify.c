/* notify: the datagrams a service manager would read, from a socket bound here. */
#include "harness.h"

#include "feedfs/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Bind a datagram socket at name ("/path" or "@abstract") and point
 * $NOTIFY_SOCKET at it; returns the fd. */
static int listen_at(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t n = strlen(name);
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0);
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	else
		len++;
	CHECK_EQ_INT(bind(fd, (struct sockaddr *)&sa, len), 0);
	setenv("NOTIFY_SOCKET", name, 1);
	return fd;
}

/* The next datagram, NUL-terminated, or "" when none is waiting. */
static const char *next_msg(int fd)
{
	static char buf[1024];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

static void t_path_socket(void)
{
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/tmp/feedfs-notify-%d.sock", (int)getpid());
	unlink(path);
	fd = listen_at(path);
	CHECK_EQ_INT(notify_ready(), 1);
	CHECK_STR(next_msg(fd), "READY=1");
	CHECK_EQ_INT(notify_status("%d MiB/s, cache %d%%", 812, 37), 1);
	CHECK_STR(next_msg(fd), "STATUS=812 MiB/s, cache 37%");
	CHECK_EQ_INT(notify_watchdog(), 1);
	CHECK_STR(next_msg(fd), "WATCHDOG=1");
	CHECK_EQ_INT(notify_stopping(), 1);
	CHECK_STR(next_msg(fd), "STOPPING=1");
	/* A newline would start a second assignment: it is flattened. */
	CHECK_EQ_INT(notify_status("a\nREADY=1"), 1);
	CHECK_STR(next_msg(fd), "STATUS=a READY=1");
	CHECK_STR(next_msg(fd), "");
	close(fd);
	unlink(path);
	/* Nobody listening any more: the error, not a crash or a hang. */
	CHECK_EQ_INT(notify_ready(), -ENOENT);
}

static void t_abstract_socket(void)
{
	char name[64];
	int fd;

	snprintf(name, sizeof(name), "@feedfs-notify-test-%d", (int)getpid());
	fd = listen_at(name);
	CHECK_EQ_INT(notify_ready(), 1);
	CHECK_STR(next_msg(fd), "READY=1");
	CHECK_EQ_INT(notify_send("STATUS=x\nWATCHDOG=1"), 1);
	CHECK_STR(next_msg(fd), "STATUS=x\nWATCHDOG=1");
	close(fd);
}

static void t_no_socket(void)
{
	unsetenv("NOTIFY_SOCKET");
	CHECK_EQ_INT(notify_ready(), 0);
	CHECK_EQ_INT(notify_status("x %d", 1), 0);
	CHECK_EQ_INT(notify_watchdog(), 0);
	setenv("NOTIFY_SOCKET", "", 1);
	CHECK_EQ_INT(notify_ready(), 0);
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	CHECK_EQ_INT(notify_ready(), -EAFNOSUPPORT);
	unsetenv("NOTIFY_SOCKET");
}

static void t_watchdog_usec(void)
{
	char pid[32];

	unsetenv("WATCHDOG_PID");
	unsetenv("WATCHDOG_USEC");
	CHECK_EQ_INT(notify_watchdog_usec(), 0);
	setenv("WATCHDOG_USEC", "30000000", 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 30000000);
	setenv("WATCHDOG_USEC", "30s", 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 0);
	setenv("WATCHDOG_USEC", "-5", 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 0);
	setenv("WATCHDOG_USEC", "0", 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 0);
	setenv("WATCHDOG_USEC", "20000000", 1);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 20000000);
	/* The parent: the keeper, whose serving process pings for it. */
	snprintf(pid, sizeof(pid), "%d", (int)getppid());
	setenv("WATCHDOG_PID", pid, 1);
	CHECK_EQ_INT(notify_watchdog_usec(), 20000000);
	/* Inherited by some unrelated process: not ours to ping. */
	setenv("WATCHDOG_PID", "1", 1);
	CHECK_EQ_INT(getppid() == 1 ? 0 : notify_watchdog_usec(), 0);
	unsetenv("WATCHDOG_PID");
	unsetenv("WATCHDOG_USEC");
}

static const struct test tests[] = {
	TEST(t_path_socket), TEST(t_abstract_socket), TEST(t_no_socket), TEST(t_watchdog_usec),
	{ 0 },
};

int main(void)
{
	return harness_run("notify", tests);
}
