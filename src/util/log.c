/*
 * log — leveled, tagged, one-line logging. See log.h.
 *
 * Each line is formatted into a stack buffer and written with a single write(2)
 * (or syslog(3)), so lines from concurrent threads never interleave. The level is
 * an atomic int read on every call; the sink is chosen once at start-up.
 */
#include "feedfs/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <fuse_log.h>

static _Atomic int log_level = LOG_INFO;
static enum log_sink log_sink = LOG_SINK_STDERR;
static int log_fd = STDERR_FILENO;

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
	[LOG_ERR] = "error", [LOG_WARNING] = "warn", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

int log_level_parse(const char *s)
{
	static const struct { const char *name; int level; } names[] = {
		{ "error", LOG_ERR }, { "err", LOG_ERR }, { "warn", LOG_WARNING },
		{ "warning", LOG_WARNING }, { "notice", LOG_NOTICE }, { "info", LOG_INFO },
		{ "debug", LOG_DEBUG },
	};

	if (!s)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(s, names[i].name) == 0)
			return names[i].level;
	if (s[0] >= '0' && s[0] <= '7' && s[1] == '\0')
		return s[0] - '0';
	return -EINVAL;
}

static void __attribute__((format(printf, 2, 0)))
fuse_log_sink(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char line[1024];
	size_t n;

	if ((int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n && line[n - 1] == '\n')
		line[--n] = '\0';
	log_msg((int)level, "fuse", "%s", line);
}

int log_init(enum log_sink sink, const char *path, int level)
{
	if (sink == LOG_SINK_FILE) {
		int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

		if (fd < 0)
			return -errno;
		if (log_fd != STDERR_FILENO && log_fd >= 0)
			close(log_fd);
		log_fd = fd;
	} else if (sink == LOG_SINK_SYSLOG) {
		openlog("feedfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	}
	log_sink = sink;
	log_set_level(level);
	fuse_set_log_func(fuse_log_sink);
	return 0;
}

void log_set_level(int level)
{
	atomic_store(&log_level, level);
}

int log_get_level(void)
{
	return atomic_load_explicit(&log_level, memory_order_relaxed);
}

void log_close(void)
{
	if (log_sink == LOG_SINK_FILE && log_fd != STDERR_FILENO) {
		close(log_fd);
		log_fd = STDERR_FILENO;
	} else if (log_sink == LOG_SINK_SYSLOG) {
		closelog();
	}
	log_sink = LOG_SINK_STDERR;
}

void log_msg(int level, const char *tag, const char *fmt, ...)
{
	char line[2048];
	va_list ap;
	int off = 0, n;

	if (level > atomic_load_explicit(&log_level, memory_order_relaxed))
		return;
	if (level < 0 || level > LOG_DEBUG)
		level = LOG_ERR;
	if (log_sink != LOG_SINK_SYSLOG) {
		struct timespec ts;
		struct tm tm;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		off = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ",
			       tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
			       tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
	}
	n = snprintf(line + off, sizeof(line) - (size_t)off, "feedfs[%s] %s: ",
		     level_names[level], tag);
	off += n;
	va_start(ap, fmt);
	n = vsnprintf(line + off, sizeof(line) - (size_t)off, fmt, ap);
	va_end(ap);
	off = n < 0 ? off : off + n;
	if ((size_t)off >= sizeof(line) - 1)
		off = sizeof(line) - 2;   /* truncated: keep the line whole */
	if (log_sink == LOG_SINK_SYSLOG) {
		syslog(level, "%s", line);
		return;
	}
	line[off++] = '\n';
	/* One write per line; a short write on a log is not worth a retry loop. */
	if (write(log_fd, line, (size_t)off) < 0)
		(void)0;
}
