/*
 * test_sources — the sources file (src/sources.c): each line becomes a
 * source whose options are the base's with its URL and keys over them, and
 * every mistake is one line naming the line.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/sources.h"
#include "harness.h"

static void base_options(struct options *o)
{
	char *argv[] = { "feedfs", "--region", "eu-west-1", "--max-memory", "64M", "b", "/m", NULL };
	char msg[256];

	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_REGION");
	unsetenv("AWS_PROFILE");
	setenv("AWS_CONFIG_FILE", "/nonexistent/c", 1);
	CHECK_EQ_INT(options_parse(7, argv, o, msg, sizeof(msg)), 0);
}

static void t_good(void)
{
	static const char text[] =
		"# comment\n"
		"\n"
		"train s3://b1/train/ endpoint_url=http://127.0.0.1:9000,force_path_style\n"
		"  val\toss://b2/v region=cn-hangzhou,profile=p2\r\n"
		"snap gs://b3 snapshot=/s/x.snap,no_sign_request=1\n"
		"rel s3://b4/ snapshot=snaps/r.snap\n";
	struct options base;
	struct source_spec *s;
	size_t n;
	char msg[256];

	base_options(&base);
	CHECK_EQ_INT(sources_parse(text, strlen(text), "/etc/feedfs/job.sources", &base, &s, &n, msg,
				   sizeof(msg)), 0);
	CHECK_EQ_INT(n, 4);
	CHECK_STR(s[3].o.snapshot, "/etc/feedfs/snaps/r.snap");
	CHECK_STR(s[0].name, "train");
	CHECK_EQ_INT(s[0].line, 3);
	CHECK_STR(s[0].o.bucket, "b1");
	CHECK_STR(s[0].o.prefix, "train/");
	CHECK_STR(s[0].o.endpoint, "http://127.0.0.1:9000");
	CHECK_EQ_INT(s[0].o.force_path_style, 1);
	CHECK_STR(s[0].o.region, "eu-west-1");              /* the base's */
	CHECK_EQ_INT(s[0].o.max_memory, 64 << 20);
	CHECK_STR(s[1].name, "val");
	CHECK_EQ_INT(s[1].o.store, S3_STORE_OSS);
	CHECK_STR(s[1].o.prefix, "v/");
	CHECK_STR(s[1].o.region, "cn-hangzhou");
	CHECK_STR(s[1].o.profile, "p2");
	CHECK_EQ_INT(s[1].o.force_path_style, 0);
	CHECK_EQ_INT(s[2].o.store, S3_STORE_GCS);
	CHECK_STR(s[2].o.snapshot, "/s/x.snap");
	CHECK_EQ_INT(s[2].o.no_sign, 1);
	sources_free(s, n);
	options_free(&base);
}

static void t_refused(void)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		{ "a s3://b/\na s3://c/\n", "F:2: duplicate name 'a' (line 1)" },
		{ "a/b s3://b/\n", "F:1: 'a/b' is not a valid name (1..255 bytes, no '/', not . "
		  "or ..)" },
		{ ". s3://b/\n", "F:1: '.' is not a valid name (1..255 bytes, no '/', not . or ..)" },
		{ "a\n", "F:1: no URL for 'a'" },
		{ "a s3://b/ k=v x\n", "F:1: unexpected 'x' (options are one key=value,... list)" },
		{ "a s3://b/ colour=blue\n", "F:1: unknown key 'colour'" },
		{ "a s3://b/ part_size=1M\n", "F:1: unknown key 'part-size'" },
		{ "a s3://b/ region\n", "F:1: region needs a value" },
		{ "a s3://b/ force_path_style=no\n", "F:1: force-path-style is a flag (no value, or 1)" },
		{ "a s3://b/ endpoint_url=ftp://x\n", "F:1: --endpoint-url: 'ftp://x' must start "
		  "with http:// or https://" },
		{ "a ftp://b/\n", "F:1: 'ftp://b/': the source is s3://, oss:// or gs://BUCKET[/PREFIX] "
		  "(other stores: s3:// with --endpoint-url)" },
		{ "# only a comment\n", "F: no sources" },
		{ "", "F: no sources" },
	};
	struct options base;

	base_options(&base);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct source_spec *s = NULL;
		size_t n = 0;
		char msg[512];
		int e = sources_parse(cases[i].text, strlen(cases[i].text), "F", &base, &s, &n, msg,
				      sizeof(msg));

		if (e != -EINVAL || strcmp(msg, cases[i].msg) != 0)
			harness_fail(__FILE__, __LINE__, "case %zu: %d '%s', want '%s'", i, e, msg,
				     cases[i].msg);
	}
	options_free(&base);
}

static const struct test tests[] = {
	TEST(t_good),
	TEST(t_refused),
	{ 0 },
};

int main(void)
{
	return harness_run("sources", tests);
}
