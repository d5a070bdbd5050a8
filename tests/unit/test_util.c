#include "harness.h"

#include "feedfs/hash.h"
#include "feedfs/util.h"
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

static const struct test tests[] = {
	TEST(t_parse_size), TEST(t_parse_seconds), TEST(t_parse_u32), TEST(t_uri),
	TEST(t_log_level), TEST(t_hash), { 0 },
};

int main(void)
{
	return harness_run("util", tests);
}
