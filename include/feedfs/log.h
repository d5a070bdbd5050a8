/*
 * log — one-line, leveled, tagged logging with a pluggable sink.
 *
 * Levels are syslog's (LOG_ERR .. LOG_DEBUG). Every line carries a subsystem tag
 * ("s3", "fs", "read", ...). The sink is stderr (default), a file (--log-file) or
 * syslog/journald (daemon without --log-file). libfuse's own messages are routed in
 * by log_init(). Never pass a secret to these functions: there is no scrubbing.
 * Thread-safe: each line is written with one write(2)/syslog(3) call.
 */
#ifndef FEEDFS_LOG_H
#define FEEDFS_LOG_H

#include <syslog.h>

enum log_sink { LOG_SINK_STDERR, LOG_SINK_FILE, LOG_SINK_SYSLOG };

/* Parse "error|warn|info|debug" (or a syslog number). Returns level or -EINVAL. */
int log_level_parse(const char *s);

/* Configure the sink. path is used for LOG_SINK_FILE. Returns 0 or -errno. */
int log_init(enum log_sink sink, const char *path, int level);
void log_set_level(int level);
int log_get_level(void);
void log_close(void);

void log_msg(int level, const char *tag, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_err(tag, ...)   log_msg(LOG_ERR, tag, __VA_ARGS__)
#define log_warn(tag, ...)  log_msg(LOG_WARNING, tag, __VA_ARGS__)
#define log_info(tag, ...)  log_msg(LOG_INFO, tag, __VA_ARGS__)
#define log_debug(tag, ...) do { if (log_get_level() >= LOG_DEBUG) \
		log_msg(LOG_DEBUG, tag, __VA_ARGS__); } while (0)

/* Always-on invariant check: logs and aborts. */
#define BUG_ON(cond) do { if (__builtin_expect(!!(cond), 0)) { \
		log_msg(LOG_CRIT, "bug", "%s:%d: BUG_ON(%s)", __FILE__, __LINE__, #cond); \
		abort(); } } while (0)

#endif
