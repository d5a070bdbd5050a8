#include "harness.h"

#include "feedfs/buf.h"
#include "feedfs/hash.h"
#include "feedfs/util.h"
#include "feedfs/util_curl.h"
#include "feedfs/log.h"

#include <errno.h>
#include <stdlib.h>

static void t_parse_size(void)
{
	static const struct { const char *in; int rc; uint64_t out; } cases[] = {
		{ "0", 0, 0 }, { "4096", 0, 4096 }, { "8M", 0, 8ull << 20 },
		{ "8MiB", 0, 8ull << 20 }, { "8mb", 0, 8ull << 20 }, { "1k", 0, 1024 },
		{ "1G", 0, 1ull << 30 }, { "1.5G", 0, 3ull << 29 }, { "2T", 0, 2ull << 40 },
		{ "512B", 0, 512 }, { "", -EINVAL, 0 }, { "abc", -EINVAL, 0 },
		{ "-1", -EINVAL, 0 }, { "+1", -EINVAL, 0 }, { " 1", -EINVAL, 0 },
		{ "1X", -EINVAL, 0 }, { "1MiBx", -EINVAL, 0 }, { "0.5", -EINVAL, 0 },
		{ "99999999999T", -ERANGE, 0 }, { "nan", -EINVAL, 0 }, { "inf", -EINVAL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t v = 12345;
		int rc = util_parse_size(cases[i].in, &v);

		CHECK_EQ_INT(rc, cases[i].rc);
		if (rc == 0)
			CHECK_EQ_INT(v, cases[i].out);
	}
}

static void t_parse_seconds(void)
{
	int64_t ms = 0;

	CHECK_EQ_INT(util_parse_seconds_ms("60", &ms), 0);
	CHECK_EQ_INT(ms, 60000);
	CHECK_EQ_INT(util_parse_seconds_ms("0.25", &ms), 0);
	CHECK_EQ_INT(ms, 250);
	CHECK_EQ_INT(util_parse_seconds_ms("0", &ms), 0);
	CHECK_EQ_INT(ms, 0);
	CHECK_EQ_INT(util_parse_seconds_ms("-1", &ms), -EINVAL);
	CHECK_EQ_INT(util_parse_seconds_ms("1s", &ms), -EINVAL);
	CHECK_EQ_INT(util_parse_seconds_ms("", &ms), -EINVAL);
}

static void t_parse_u32(void)
{
	uint32_t v = 0;

	CHECK_EQ_INT(util_parse_u32("0444", 8, &v), 0);
	CHECK_EQ_INT(v, 0444);
	CHECK_EQ_INT(util_parse_u32("1000", 10, &v), 0);
	CHECK_EQ_INT(v, 1000);
	CHECK_EQ_INT(util_parse_u32("0999", 8, &v), -EINVAL);
	CHECK_EQ_INT(util_parse_u32("-1", 10, &v), -EINVAL);
	CHECK_EQ_INT(util_parse_u32("4294967296", 10, &v), -ERANGE);
}

static void t_uri(void)
{
	char *e = util_uri_encode("a b/数+%~_.-", strlen("a b/数+%~_.-"), 1);
	size_t n = 0;
	char *d;

	CHECK_STR(e, "a%20b/%E6%95%B0%2B%25~_.-");
	d = util_uri_decode(e, strlen(e), &n);
	CHECK_STR(d, "a b/数+%~_.-");
	free(d);
	free(e);
	e = util_uri_encode("a/b", 3, 0);
	CHECK_STR(e, "a%2Fb");
	free(e);
	d = util_uri_decode("a+b%2", 5, &n);
	CHECK(d == NULL);
	d = util_uri_decode("%zz", 3, &n);
	CHECK(d == NULL);
	d = util_uri_decode("x%00y", 5, &n);
	CHECK(d != NULL);
	CHECK_EQ_INT(n, 3);
	CHECK(d && d[1] == '\0' && d[2] == 'y');
	free(d);
	d = util_uri_decode("a+b", 3, &n);
	CHECK_STR(d, "a+b");
	free(d);
}

static void t_log_level(void)
{
	CHECK_EQ_INT(log_level_parse("debug"), LOG_DEBUG);
	CHECK_EQ_INT(log_level_parse("WARN"), LOG_WARNING);
	CHECK_EQ_INT(log_level_parse("error"), LOG_ERR);
	CHECK_EQ_INT(log_level_parse("7"), 7);
	CHECK_EQ_INT(log_level_parse("loud"), -EINVAL);
}

/* Published FNV-1a 64 values (any build, any host must agree on them: a socket
 * name is derived from one), and the finaliser's values, which the disk cache's
 * block identities depend on. */
static void t_hash(void)
{
	CHECK_EQ_INT(util_fnv1a64(UTIL_FNV1A64_INIT, "", 0), 0xcbf29ce484222325ULL);
	CHECK_EQ_INT(util_fnv1a64(UTIL_FNV1A64_INIT, "a", 1), 0xaf63dc4c8601ec8cULL);
	CHECK_EQ_INT(util_fnv1a64(UTIL_FNV1A64_INIT, "foobar", 6), 0x85944171f73967e8ULL);
	/* Continuing over fields is the same as hashing their concatenation. */
	CHECK_EQ_INT(util_fnv1a64(util_fnv1a64(UTIL_FNV1A64_INIT, "foo", 3), "bar", 3),
		     0x85944171f73967e8ULL);
	CHECK_EQ_INT(util_mix64(0), 0);
	CHECK_EQ_INT(util_mix64(1), 0xb456bcfc34c2cb2cULL);
	CHECK_EQ_INT(util_hash64("foobar", 6, 0), 0x2c22194922d1672bULL);
	CHECK(util_hash64("foobar", 6, 1) != util_hash64("foobar", 6, 0));
}

/* The one ISO 8601 parser: the inputs both of its predecessors were tested
 * with (s3/list.c's for LastModified, creds/common.c's for expiries) plus the
 * rule they disagreed on: a time without a zone is UTC. */
static void t_iso8601(void)
{
	static const struct {
		const char *s;
		int rc;
		int64_t ms;
	} cases[] = {
#define T0 1700000000000LL   /* 2023-11-14T22:13:20Z */
		{ "2023-11-14T22:13:20Z", 0, T0 },
		{ "2023-11-14T22:13:20z", 0, T0 },
		{ "2023-11-14T22:13:20.250Z", 0, T0 + 250 },
		{ "2023-11-14T22:13:20.5Z", 0, T0 + 500 },
		{ "2023-11-14T22:13:20.999999Z", 0, T0 + 999 },
		{ "2023-11-15T06:13:20+08:00", 0, T0 },
		{ "2023-11-14T22:13:20+00:00", 0, T0 },
		{ "2023-11-14T21:13:20-0100", 0, T0 },
		{ "2023-11-14T17:43:20.250-04:30", 0, T0 + 250 },
		{ "2023-11-14T22:13Z", 0, T0 - 20000 },
		{ "2023-11-14 22:13:20Z", 0, T0 },
		{ "2023-11-14T22:13:20", 0, T0 },          /* no zone: UTC */
		{ "2023-11-14T22:13:20.125", 0, T0 + 125 },
		{ "1970-01-01T00:00:01.5Z", 0, 1500 },
		{ "2024-02-29T23:59:59.123456Z", 0, 1709251199123LL },   /* leap day */
		{ "2000-02-29T00:00:00Z", 0, 951782400000LL },          /* 400-year leap */
		{ "2023-02-29T00:00:00Z", -EINVAL, 0 },
		{ "1900-02-29T00:00:00Z", -EINVAL, 0 },   /* also before 1970 */
		{ "2023-04-31T00:00:00Z", -EINVAL, 0 },
		{ "1969-12-31T23:59:59Z", -EINVAL, 0 },
		{ "2023-13-14T22:13:20Z", -EINVAL, 0 },
		{ "2023-11-14T24:00:00Z", -EINVAL, 0 },
		{ "2023-11-14T22:60:00Z", -EINVAL, 0 },
		{ "2023-11-14T22:13:20.Z", -EINVAL, 0 },
		{ "2023-11-14T22:13:20+8", -EINVAL, 0 },
		{ "2023-11-14T22:13:20+08:", -EINVAL, 0 },
		{ "2023-11-14T22:13:20+24:00", -EINVAL, 0 },
		{ "2023-11-14T22:13:20Zjunk", -EINVAL, 0 },
		{ "2024-02-29T23:59:59Zjunk", -EINVAL, 0 },
		{ "2023-11-14T22:13:20 ", -EINVAL, 0 },
		{ "2024-02-29", -EINVAL, 0 },
		{ "2023-1-14T22:13:20Z", -EINVAL, 0 },
		{ "", -EINVAL, 0 },
		{ "yesterday", -EINVAL, 0 },
#undef T0
	};
	int64_t ms = 7;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc;

		ms = -1;
		rc = util_parse_iso8601_ms(cases[i].s, &ms);
		if (rc != cases[i].rc || (rc == 0 && ms != cases[i].ms))
			harness_fail(__FILE__, __LINE__, "\"%s\": rc %d ms %lld", cases[i].s, rc,
				     (long long)ms);
		if (rc != 0 && ms != -1)
			harness_fail(__FILE__, __LINE__, "\"%s\": failed but wrote %lld",
				     cases[i].s, (long long)ms);
	}
	ms = 7;
	CHECK_EQ_INT(util_parse_iso8601_ms(NULL, &ms), -EINVAL);
	CHECK_EQ_INT(ms, 7);

	/* Every day from 1970 to 2500 against libc's timegm (the parser does
	 * its own calendar arithmetic). */
	for (int y = 1970; y <= 2500; y++)
		for (int mo = 1; mo <= 12; mo++)
			for (int d = 1; d <= 31; d++) {
				struct tm tm = { .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d,
						 .tm_hour = 23, .tm_min = 59, .tm_sec = 58 };
				char s[96];   /* room for any int: -Wformat-truncation */
				time_t t = timegm(&tm);
				int rc;

				snprintf(s, sizeof(s), "%04d-%02d-%02dT23:59:58.001Z", y, mo, d);
				rc = util_parse_iso8601_ms(s, &ms);
				if (tm.tm_mday != d) {          /* no such day: timegm rolled over */
					if (rc != -EINVAL)
						harness_fail(__FILE__, __LINE__, "\"%s\" accepted", s);
				} else if (rc != 0 || ms != (int64_t)t * 1000 + 1) {
					harness_fail(__FILE__, __LINE__, "\"%s\": rc %d ms %lld, timegm %lld",
						     s, rc, (long long)ms, (long long)t);
					return;
				}
			}
}

static void t_getenv_nonempty(void)
{
	setenv("FEEDFS_T_ENV", "v", 1);
	CHECK_STR(util_getenv_nonempty("FEEDFS_T_ENV"), "v");
	setenv("FEEDFS_T_ENV", "", 1);
	CHECK(util_getenv_nonempty("FEEDFS_T_ENV") == NULL);
	unsetenv("FEEDFS_T_ENV");
	CHECK(util_getenv_nonempty("FEEDFS_T_ENV") == NULL);
}

static void t_buf(void)
{
	struct util_buf b = { 0 };
	char big[1000], *s;

	s = util_buf_take(&b);              /* "" when nothing was appended */
	CHECK_STR(s, "");
	free(s);
	CHECK_EQ_INT(util_buf_puts(&b, "ab"), 0);
	CHECK_EQ_INT(util_buf_putc(&b, 'c'), 0);
	CHECK_EQ_INT(util_buf_append(&b, "\0d", 2), 0);
	CHECK_EQ_INT(b.len, 5);
	CHECK_MEM(b.p, "abc\0d", 6);        /* NULs kept, and terminated */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	CHECK_EQ_INT(util_buf_append(&b, big, sizeof(big)), 0);   /* grows past one step */
	CHECK_EQ_INT(b.len, 1005);
	CHECK(b.cap > b.len);
	CHECK_MEM(b.p, "abc\0d", 5);
	CHECK_MEM(b.p + 5, big, sizeof(big));
	CHECK_EQ_INT(b.p[1005], '\0');
	/* reset keeps the storage and empties the string */
	{
		char *before = b.p;
		size_t cap = b.cap;

		util_buf_reset(&b);
		CHECK(b.p == before && b.cap == cap && b.len == 0 && b.p[0] == '\0');
	}
	/* An impossible size fails, sticks, and take gives NULL. */
	CHECK_EQ_INT(util_buf_reserve(&b, (size_t)-1), -ENOMEM);
	CHECK(b.oom);
	CHECK_EQ_INT(util_buf_puts(&b, "x"), -ENOMEM);
	CHECK_EQ_INT(b.len, 0);
	CHECK(util_buf_take(&b) == NULL);
	CHECK(b.p == NULL && b.len == 0 && b.cap == 0 && !b.oom);
	/* take hands over the bytes and leaves the buffer empty */
	util_buf_puts(&b, "xyz");
	s = util_buf_take(&b);
	CHECK_STR(s, "xyz");
	CHECK(b.p == NULL && b.len == 0);
	free(s);
	util_buf_free(&b);
}

/* A secret buffer is wiped on reset (the bytes after the NUL are zero too). */
static void t_buf_wipe(void)
{
	struct util_buf b = { .wipe = 1 };

	CHECK_EQ_INT(util_buf_puts(&b, "secret"), 0);
	util_buf_reset(&b);
	CHECK_MEM(b.p, "\0\0\0\0\0\0", 6);
	CHECK(b.wipe);
	/* growth moves a secret: the new storage has the bytes, all of them */
	util_buf_puts(&b, "k");
	for (int i = 0; i < 600; i++)
		util_buf_putc(&b, 's');
	CHECK_EQ_INT(b.len, 601);
	CHECK_EQ_INT(b.p[0], 'k');
	CHECK_EQ_INT(b.p[600], 's');
	util_buf_free(&b);
	CHECK(b.p == NULL && b.wipe);
}

static void t_curl_errno(void)
{
	static const struct { CURLcode cc; int err, retry; } cases[] = {
		{ CURLE_COULDNT_RESOLVE_HOST, -EHOSTUNREACH, 1 },
		{ CURLE_COULDNT_RESOLVE_PROXY, -EHOSTUNREACH, 1 },
		{ CURLE_COULDNT_CONNECT, -ECONNREFUSED, 1 },
		{ CURLE_OPERATION_TIMEDOUT, -ETIMEDOUT, 1 },
		{ CURLE_PEER_FAILED_VERIFICATION, -EIO, 0 },
		{ CURLE_SSL_CACERT_BADFILE, -EIO, 0 },
		{ CURLE_SSL_CERTPROBLEM, -EIO, 0 },
		{ CURLE_URL_MALFORMAT, -EIO, 0 },
		{ CURLE_UNSUPPORTED_PROTOCOL, -EIO, 0 },
		{ CURLE_OUT_OF_MEMORY, -ENOMEM, 0 },
		{ CURLE_RECV_ERROR, -EIO, 1 },
		{ CURLE_GOT_NOTHING, -EIO, 1 },
		{ CURLE_WRITE_ERROR, -EIO, 1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int retry = -1;

		CHECK_EQ_INT(util_curl_errno(cases[i].cc, &retry), cases[i].err);
		CHECK_EQ_INT(retry, cases[i].retry);
		CHECK_EQ_INT(util_curl_errno(cases[i].cc, NULL), cases[i].err);
	}
	CHECK_EQ_INT(util_curl_init(), 0);
	CHECK_EQ_INT(util_curl_init(), 0);   /* once; a second call is free */
}

static const struct test tests[] = {
	TEST(t_parse_size), TEST(t_parse_seconds), TEST(t_parse_u32), TEST(t_uri),
	TEST(t_log_level), TEST(t_hash),
	TEST(t_iso8601), TEST(t_getenv_nonempty),
	TEST(t_buf), TEST(t_buf_wipe), TEST(t_curl_errno), { 0 },
};

int main(void)
{
	return harness_run("util", tests);
}
