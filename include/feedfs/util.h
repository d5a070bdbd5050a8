/*
 * util — small helpers shared by every module: size and duration parsing, clocks,
 * ISO 8601 times, environment, checked allocation, URI percent-encoding.
 * The hash (feedfs/hash.h), the growable buffer (feedfs/buf.h) and libcurl's
 * start and errno map (feedfs/util_curl.h) have headers of their own.
 */
#ifndef FEEDFS_UTIL_H
#define FEEDFS_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* "8M", "1G", "512k", "4096", "1.5G" -> bytes (K/M/G/T are powers of 1024,
 * optional trailing "iB"/"B"). Rejects negatives, junk and overflow.
 * Returns 0 and sets *out, or -EINVAL / -ERANGE. */
int util_parse_size(const char *s, uint64_t *out);

/* "30", "1.5" seconds -> milliseconds. Returns 0 or -EINVAL/-ERANGE. */
int util_parse_seconds_ms(const char *s, int64_t *out_ms);

/* Unsigned decimal/octal (base 0 accepted per strtoul rules when base==0). */
int util_parse_u32(const char *s, int base, uint32_t *out);

/* Socket and pipe I/O to the end: all n bytes (EINTR retried; send with
 * MSG_NOSIGNAL, so a closed peer is an error, not SIGPIPE). 0, or -1 on an
 * error, a timeout (SO_RCVTIMEO/SO_SNDTIMEO) or, for reads, end of file. */
int util_send_all(int fd, const void *buf, size_t n);
int util_read_all(int fd, void *buf, size_t n);
/* One line of at most cap - 1 bytes, read a byte at a time (so nothing after
 * the '\n' is consumed), stored without its '\n'. 0, or -1 (as util_read_all,
 * or a longer line). */
int util_read_line(int fd, char *line, size_t cap);

int64_t util_now_ms(void);        /* CLOCK_MONOTONIC */

/* Condition variables timed on CLOCK_MONOTONIC (immune to wall-clock steps):
 * init one with util_cond_init_monotonic, wait at most ms on it (mu held). */
#include <pthread.h>
void util_cond_init_monotonic(pthread_cond_t *cv);
void util_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms);
int64_t util_wall_ms(void);       /* CLOCK_REALTIME */

/* ISO 8601 date and time -> wall-clock ms since the epoch; the one parser for
 * S3's LastModified and every credential expiry. Accepted:
 *   YYYY-MM-DD, then 'T' (or 't' or ' '), then hh:mm with optional :ss,
 *   an optional fraction .d+ (truncated to ms),
 *   a zone: 'Z'/'z', +hh:mm, -hh:mm, +hhmm, -hhmm, or none, which means UTC
 *   (S3 and several STS servers write UTC without saying so).
 * The date must exist (2023-02-29 does not), the year is 1970..9999, a second
 * of 60 (leap) is allowed. Anything else, trailing bytes included, is -EINVAL.
 * Returns 0 and sets *out_ms, or -EINVAL. */
int util_parse_iso8601_ms(const char *s, int64_t *out_ms);

/* getenv that treats a variable set to "" as unset: its value or NULL. */
const char *util_getenv_nonempty(const char *name);

/* malloc/calloc/strdup that abort with a log line on exhaustion: used only for
 * small bookkeeping allocations; data buffers go through the memory budget. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The one-line message of a refusal into msg (when msg_len), and -EINVAL:
 * `return util_einval(msg, msg_len, "...", ...);` in parsers. */
int util_einval(char *msg, size_t msg_len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Percent-encode per RFC 3986 unreserved set (A-Z a-z 0-9 - _ . ~).
 * keep_slash leaves '/' as is (for URI paths). Returns a malloc'd string. */
char *util_uri_encode(const char *s, size_t len, int keep_slash);

/* Decode %XX escapes (and nothing else: '+' stays '+'). Returns malloc'd string
 * and its length in *out_len (may contain NUL), or NULL on a malformed escape. */
char *util_uri_decode(const char *s, size_t len, size_t *out_len);

/* Wipe memory that held a secret (not optimised away). */
void util_wipe(void *p, size_t n);

#endif
