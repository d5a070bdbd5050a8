/*
 * util — parsing, clocks, checked allocation, URI encoding. See util.h.
 */
#include "feedfs/util.h"
#include "feedfs/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int util_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v, mul = 1;

	if (!s || !*s || isspace((unsigned char)*s) || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !isfinite(v))
		return -EINVAL;
	switch (toupper((unsigned char)*end)) {
	case 'K': mul = 1024.0; end++; break;
	case 'M': mul = 1024.0 * 1024; end++; break;
	case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
	case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	/* Accept "M", "MB", "MiB" (all binary) and a bare "B" for bytes. */
	if (mul > 1 && (end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b'))
		end += 2;
	else if (*end == 'B' || *end == 'b')
		end++;
	if (*end)
		return -EINVAL;
	v *= mul;
	if (v >= 18446744073709551616.0)
		return -ERANGE;
	if (v != floor(v))
		return -EINVAL;
	*out = (uint64_t)v;
	return 0;
}

int util_parse_seconds_ms(const char *s, int64_t *out_ms)
{
	char *end;
	double v;

	if (!s || !*s || isspace((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !isfinite(v) || v < 0)
		return -EINVAL;
	if (v > 9.2e15)
		return -ERANGE;
	*out_ms = (int64_t)llround(v * 1000.0);
	return 0;
}

int util_parse_u32(const char *s, int base, uint32_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || *end)
		return -EINVAL;
	if (v > UINT32_MAX)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t util_now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

void util_cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

void util_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_cond_timedwait(cv, mu, &ts);
}
int64_t util_wall_ms(void) { return clock_ms(CLOCK_REALTIME); }

/* n decimal digits at *p into *out, advancing *p; -1 on anything else. */
static int iso_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)**p))
			return -1;
		v = v * 10 + (**p - '0');
		(*p)++;
	}
	*out = v;
	return 0;
}

static int iso_mdays(int y, int mo)
{
	static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return mo == 2 && leap ? 29 : mdays[mo - 1];
}

/* Days from 1970-01-01 to y-mo-d (proleptic Gregorian, y >= 1970): what
 * timegm() computes, without its time-zone lock (a listing page parses a
 * thousand dates). Counts from March so that the leap day ends a year. */
static int64_t iso_days(int y, int mo, int d)
{
	int64_t yy = mo <= 2 ? y - 1 : y;
	int64_t era = yy / 400, yoe = yy - era * 400;
	int64_t doy = (153 * (mo > 2 ? mo - 3 : mo + 9) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + doe - 719468;
}

int util_parse_iso8601_ms(const char *s, int64_t *out_ms)
{
	int y, mo, d, h, mi, sec = 0, ms = 0, off_min = 0;
	const char *p = s;
	time_t t;

	if (!s)
		return -EINVAL;
	if (iso_digits(&p, 4, &y) || *p++ != '-' || iso_digits(&p, 2, &mo) || *p++ != '-' ||
	    iso_digits(&p, 2, &d) || (*p != 'T' && *p != 't' && *p != ' '))
		return -EINVAL;
	p++;
	if (iso_digits(&p, 2, &h) || *p++ != ':' || iso_digits(&p, 2, &mi))
		return -EINVAL;
	/* Aliyun sometimes omits the seconds: "2024-05-01T12:00Z". */
	if (*p == ':') {
		p++;
		if (iso_digits(&p, 2, &sec))
			return -EINVAL;
	}
	if (*p == '.') {
		int scale = 100;

		if (!isdigit((unsigned char)*++p))
			return -EINVAL;
		for (; isdigit((unsigned char)*p); p++, scale /= 10)
			ms += (*p - '0') * scale;   /* digits past the third truncate */
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1, oh, om;

		if (iso_digits(&p, 2, &oh))
			return -EINVAL;
		if (*p == ':')
			p++;
		if (iso_digits(&p, 2, &om) || oh > 23 || om > 59)
			return -EINVAL;
		off_min = sign * (oh * 60 + om);
	}
	/* else no zone: UTC, which is what S3's LastModified and STS answers mean. */
	if (*p || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > iso_mdays(y, mo) || h > 23 ||
	    mi > 59 || sec > 60)
		return -EINVAL;
	/* a leap second (60) is the next minute's first */
	t = (time_t)iso_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
	*out_ms = ((int64_t)t - (int64_t)off_min * 60) * 1000 + ms;
	return 0;
}

const char *util_getenv_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static void *oom(size_t n)
{
	log_msg(LOG_CRIT, "util", "out of memory allocating %zu bytes", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	return p ? p : oom(n);
}

void *xcalloc(size_t n, size_t m)
{
	void *p = calloc(n ? n : 1, m ? m : 1);

	return p ? p : oom(n * m);
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	return p ? p : oom(strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	char *p = xmalloc(n + 1);

	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

int util_einval(char *msg, size_t msg_len, const char *fmt, ...)
{
	va_list ap;

	if (msg && msg_len) {
		va_start(ap, fmt);
		vsnprintf(msg, msg_len, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&p, fmt, ap);
	va_end(ap);
	return n < 0 ? oom(0) : p;
}

char *util_uri_encode(const char *s, size_t len, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = xmalloc(len * 3 + 1), *o = out;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
		    (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

char *util_uri_decode(const char *s, size_t len, size_t *out_len)
{
	char *out = xmalloc(len + 1), *o = out;

	for (size_t i = 0; i < len; i++) {
		if (s[i] != '%') {
			*o++ = s[i];
			continue;
		}
		if (i + 2 >= len) {
			free(out);
			return NULL;
		}
		int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);

		if (h < 0 || l < 0) {
			free(out);
			return NULL;
		}
		*o++ = (char)(h << 4 | l);
		i += 2;
	}
	*o = '\0';
	if (out_len)
		*out_len = (size_t)(o - out);
	return out;
}

void util_wipe(void *p, size_t n)
{
	if (p)
		explicit_bzero(p, n);
}

/* All n bytes through send() (MSG_NOSIGNAL) or read(); EINTR retried.
 * 0, or -1 on an error or end of file. */
static int xfer_all(int fd, char *p, size_t n, int out)
{
	while (n) {
		ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL) : read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int util_send_all(int fd, const void *buf, size_t n)
{
	return xfer_all(fd, (char *)buf, n, 1);
}

int util_read_all(int fd, void *buf, size_t n)
{
	return xfer_all(fd, buf, n, 0);
}

int util_read_line(int fd, char *line, size_t cap)
{
	for (size_t i = 0; i + 1 < cap; i++) {
		if (util_read_all(fd, line + i, 1) < 0)
			return -1;
		if (line[i] == '\n') {
			line[i] = '\0';
			return 0;
		}
	}
	return -1;
}
