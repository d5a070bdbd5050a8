/*
 * test_options — options_parse over its table (src/options.c): every option
 * accepted with a good value and stored where it belongs, every rejection with
 * its exact message, defaults and environment defaults, --help/--version, and
 * --help and docs/feedfs.1 naming every option of the table. options_parse is
 * called hundreds of times in this one process, which is itself the check
 * that getopt is reset between calls.
 */
#include "harness.h"

#include "feedfs/cache.h"
#include "feedfs/cgroup.h"
#include "feedfs/log.h"
#include "feedfs/options.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ULL << 20)
#define MAX_ARGS 16

/* Split line on spaces into argv after "feedfs"; "<empty>" stands for "". The
 * words live in buf, which must outlive the parse (options point into argv). */
struct argv_buf {
	char text[512];
	char *argv[MAX_ARGS + 2];
	int argc;
};

static void split(struct argv_buf *b, const char *line)
{
	char *save = NULL, *w;

	snprintf(b->text, sizeof(b->text), "%s", line);
	b->argc = 0;
	b->argv[b->argc++] = "feedfs";
	for (w = strtok_r(b->text, " ", &save); w && b->argc <= MAX_ARGS;
	     w = strtok_r(NULL, " ", &save))
		b->argv[b->argc++] = strcmp(w, "<empty>") == 0 ? w + strlen(w) : w;
	b->argv[b->argc] = NULL;
}

static int parse(struct argv_buf *b, const char *line, struct options *o, char *msg,
		 size_t msg_len)
{
	split(b, line);
	return options_parse(b->argc, b->argv, o, msg, msg_len);
}

/* No environment or profile may leak into the defaults under test. */
static void clean_env(void)
{
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
	unsetenv("AWS_CA_BUNDLE");
	unsetenv("AWS_PROFILE");
	setenv("AWS_CONFIG_FILE", "/nonexistent/feedfs-test-config", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/feedfs-test-credentials", 1);
}

enum field { F_STR, F_INT, F_U32, F_U64, F_I64, F_U16 };

/* One good value per option: parse line, then the field at off holds the value. */
static const struct accept_case {
	const char *line;
	size_t off;
	enum field type;
	const char *s;
	int64_t v;
} accept_cases[] = {
#define AT(f) offsetof(struct options, f)
	{ "--endpoint-url http://h:9 b /m", AT(endpoint), F_STR, "http://h:9", 0 },
	{ "--region eu-west-1 b /m", AT(region), F_STR, "eu-west-1", 0 },
	{ "--force-path-style b /m", AT(force_path_style), F_INT, NULL, 1 },
	{ "--internal --region cn-hangzhou oss://b /m", AT(oss_internal), F_INT, NULL, 1 },
	{ "--list-v1 b /m", AT(list_v1), F_INT, NULL, 1 },
	{ "--no-sign-request b /m", AT(no_sign), F_INT, NULL, 1 },
	{ "--profile prod b /m", AT(profile), F_STR, "prod", 0 },
	{ "--print-credentials-source", AT(print_creds), F_INT, NULL, 1 },
	{ "--dry-run s3://b/p", AT(dry_run), F_INT, NULL, 1 },
	{ "--part-size 16M b /m", AT(part_size), F_U64, NULL, 16 * MIB },
	{ "--max-memory 1G b /m", AT(max_memory), F_U64, NULL, 1024 * MIB },
	{ "--metadata-ttl 2.5 b /m", AT(metadata_ttl_ms), F_I64, NULL, 2500 },
	{ "--negative-ttl 0 b /m", AT(negative_ttl_ms), F_I64, NULL, 0 },
	{ "--uid 1234 b /m", AT(uid), F_U32, NULL, 1234 },
	{ "--gid 4321 b /m", AT(gid), F_U32, NULL, 4321 },
	{ "--file-mode 0400 b /m", AT(file_mode), F_U32, NULL, 0400 },
	{ "--dir-mode 700 b /m", AT(dir_mode), F_U32, NULL, 0700 },
	{ "--allow-other b /m", AT(allow_other), F_INT, NULL, 1 },
	{ "--log-level debug b /m", AT(log_level), F_INT, NULL, LOG_DEBUG },
	{ "--log-level error b /m", AT(log_level_set), F_INT, NULL, 1 },
	{ "--log-file /tmp/feedfs.log b /m", AT(log_file), F_STR, "/tmp/feedfs.log", 0 },
	{ "--ca-bundle /etc/ca.pem b /m", AT(ca_bundle), F_STR, "/etc/ca.pem", 0 },
	{ "--connect-timeout 3 b /m", AT(connect_timeout_ms), F_I64, NULL, 3000 },
	{ "--stall-timeout 1 b /m", AT(stall_timeout_ms), F_I64, NULL, 1000 },
	{ "--max-retries 100 b /m", AT(max_retries), F_U32, NULL, 100 },
	{ "--hedge-budget 0 b /m", AT(hedge_budget_pct), F_U32, NULL, 0 },
	{ "--hedge-budget 100 b /m", AT(hedge_budget_pct), F_U32, NULL, 100 },
	{ "--no-verify-ssl b /m", AT(no_verify_tls), F_INT, NULL, 1 },
	{ "--max-connections 1024 b /m", AT(max_connections), F_U32, NULL, 1024 },
	{ "--no-bdi-readahead b /m", AT(no_bdi_readahead), F_INT, NULL, 1 },
	{ "--passthrough off b /m", AT(passthrough_off), F_INT, NULL, 1 },
	{ "--passthrough=off b /m", AT(passthrough_off), F_INT, NULL, 1 },
	{ "--passthrough=off --passthrough=on b /m", AT(passthrough_off), F_INT, NULL, 0 },
	{ "b /m", AT(passthrough_off), F_INT, NULL, 0 },
	{ "--fuse-uring=on b /m", AT(fuse_uring), F_INT, NULL, 2 },
	{ "--fuse-uring auto b /m", AT(fuse_uring), F_INT, NULL, 1 },
	{ "--fuse-uring=on --fuse-uring=off b /m", AT(fuse_uring), F_INT, NULL, 0 },
	{ "b /m", AT(fuse_uring), F_INT, NULL, 0 },
	{ "--no-keeper b /m", AT(no_keeper), F_INT, NULL, 1 },
	{ "--metrics-addr 127.0.0.1:9100 b /m", AT(metrics_host), F_STR, "127.0.0.1", 0 },
	{ "--metrics-addr 127.0.0.1:9100 b /m", AT(metrics_port), F_U16, NULL, 9100 },
	{ "--foreground b /m", AT(foreground), F_INT, NULL, 1 },
	{ "-f b /m", AT(foreground), F_INT, NULL, 1 },
	{ "--debug b /m", AT(debug), F_INT, NULL, 1 },
	{ "-d b /m", AT(foreground), F_INT, NULL, 1 },
	{ "--cache-dir /var/cache/f b /m", AT(cache_dir), F_STR, "/var/cache/f", 0 },
	{ "--snapshot /s/d.snap b /m", AT(snapshot), F_STR, "/s/d.snap", 0 },
	{ "--sources /s/list /m", AT(sources), F_STR, "/s/list", 0 },
	{ "--snapshot s3://sb/k/d.snap b /m", AT(snapshot), F_STR, "s3://sb/k/d.snap", 0 },
	{ "--cache-dir /c --cache-size 2G b /m", AT(cache_size), F_U64, NULL, 2048 * MIB },
	{ "--block-size 8M b /m", AT(block_size), F_U64, NULL, 8 * MIB },
	{ "--cache-dir /c --cache-clear b /m", AT(cache_clear), F_INT, NULL, 1 },
	/* options after the positional arguments (getopt permutes) */
	{ "b /m --uid 5", AT(uid), F_U32, NULL, 5 },
	/* a later value wins */
	{ "--part-size 2M --part-size 4M b /m", AT(part_size), F_U64, NULL, 4 * MIB },
	{ "--metrics-addr 1.2.3.4:1 --metrics-addr localhost:2 b /m", AT(metrics_host), F_STR,
	  "localhost", 0 },
#undef AT
};

static void check_field(const struct accept_case *c, const struct options *o)
{
	const char *p = (const char *)o + c->off;

	switch (c->type) {
	case F_STR: CHECK_STR(*(const char *const *)p, c->s); break;
	case F_INT: CHECK_EQ_INT(*(const int *)p, c->v); break;
	case F_U32: CHECK_EQ_INT(*(const uint32_t *)p, c->v); break;
	case F_U64: CHECK_EQ_INT(*(const uint64_t *)p, c->v); break;
	case F_I64: CHECK_EQ_INT(*(const int64_t *)p, c->v); break;
	case F_U16: CHECK_EQ_INT(*(const uint16_t *)p, c->v); break;
	}
}

static void t_accept_every_option(void)
{
	for (size_t i = 0; i < sizeof(accept_cases) / sizeof(accept_cases[0]); i++) {
		struct argv_buf b;
		struct options o;
		char msg[256];
		int e = parse(&b, accept_cases[i].line, &o, msg, sizeof(msg));

		if (e != 0)
			harness_fail(__FILE__, __LINE__, "'%s': %d %s", accept_cases[i].line, e, msg);
		else
			check_field(&accept_cases[i], &o);
		options_free(&o);
	}
}

/* The table above names every option of options.c's table. */
static void t_accept_cases_cover_the_table(void)
{
	const char *name;

	for (size_t i = 0; (name = options_long_name(i)); i++) {
		char want[64];
		int found = 0;

		snprintf(want, sizeof(want), "--%s ", name);
		for (size_t j = 0; j < sizeof(accept_cases) / sizeof(accept_cases[0]); j++) {
			char line[600];

			snprintf(line, sizeof(line), "%s ", accept_cases[j].line);
			found |= strstr(line, want) != NULL;
		}
		if (!found && strcmp(name, "help") && strcmp(name, "version"))
			harness_fail(__FILE__, __LINE__, "no accept case for --%s", name);
	}
}

/* Every rejection, with the one line users see (after "feedfs: "). */
static const struct reject_case {
	const char *line;
	const char *msg;
} reject_cases[] = {
	{ "--part-size x b /m", "--part-size: 'x' is not a size (e.g. 8M, 512K, 1G)" },
	{ "--snapshot s3://b/ b /m", "--snapshot: 's3://b/' is not SCHEME://BUCKET/KEY" },
	{ "--snapshot s3://b b /m", "--snapshot: 's3://b' is not SCHEME://BUCKET/KEY" },
	{ "--snapshot s3://b/d.snap --region r oss://b /m", "--snapshot: 's3://b/d.snap' must be "
	  "on the source's store (the same scheme)" },
	{ "--snapshot <empty> b /m", "--snapshot: empty path" },
	{ "--sources /s b /m", "--sources FILE takes one argument: MOUNTPOINT" },
	{ "--sources /s --snapshot /x /m", "--snapshot goes in the sources file with --sources "
	  "(snapshot=FILE on a source's line)" },
	{ "--cache-size 1Q b /m", "--cache-size: '1Q' is not a size (e.g. 8M, 512K, 1G)" },
	{ "--metadata-ttl -1 b /m", "--metadata-ttl: '-1' is not a number of seconds" },
	{ "--negative-ttl 1s b /m", "--negative-ttl: '1s' is not a number of seconds" },
	{ "--uid x b /m", "--uid: 'x' is not a number" },
	{ "--gid -1 b /m", "--gid: '-1' is not a number" },
	{ "--file-mode 9 b /m", "--file-mode: '9' is not an octal number" },
	{ "--dir-mode rwx b /m", "--dir-mode: 'rwx' is not an octal number" },
	{ "--log-level loud b /m", "--log-level: 'loud' is not one of error, warn, info, debug" },
	{ "--connect-timeout 0 b /m", "--connect-timeout: '0' is out of range" },
	{ "--connect-timeout 9999999 b /m", "--connect-timeout: '9999999' is out of range" },
	{ "--connect-timeout x b /m", "--connect-timeout: 'x' is not a number of seconds" },
	{ "--stall-timeout 0.5 b /m", "--stall-timeout: '0.5' is not in 1..2147483 seconds" },
	{ "--stall-timeout 2147484 b /m",
	  "--stall-timeout: '2147484' is not in 1..2147483 seconds" },
	{ "--max-retries 0 b /m", "--max-retries: '0' is not in 1..100" },
	{ "--hedge-budget 101 b /m", "--hedge-budget: '101' is not in 0..100" },
	{ "--passthrough=yes b /m", "--passthrough: 'yes' is not on or off" },
	{ "--fuse-uring=yes b /m", "--fuse-uring: 'yes' is not auto, on or off" },
	{ "--max-retries 101 b /m", "--max-retries: '101' is not in 1..100" },
	{ "--max-retries x b /m", "--max-retries: 'x' is not a number" },
	{ "--max-connections 0 b /m", "--max-connections: '0' is not in 1..1024" },
	{ "--max-connections 1025 b /m", "--max-connections: '1025' is not in 1..1024" },
	{ "--cache-dir <empty> b /m", "--cache-dir: empty path" },
	{ "--profile <empty> b /m", "--profile: empty name" },
	{ "--bogus b /m", "unknown option '--bogus'" },
	{ "-x b /m", "unknown option '-x'" },
	{ "--dry-run=1 b", "unknown option '--dry-run=1'" },
	{ "b /m --part-size", "option '--part-size' needs a value" },
	{ "", "expected s3://BUCKET[/PREFIX/] and MOUNTPOINT" },
	{ "b", "expected s3://BUCKET[/PREFIX/] and MOUNTPOINT" },
	{ "--dry-run", "--dry-run: expected s3://BUCKET[/PREFIX/]" },
	{ "b /m extra", "unexpected argument 'extra'" },
	{ "--dry-run b /m extra", "unexpected argument 'extra'" },
	{ "--print-credentials-source b /m extra", "unexpected argument 'extra'" },
	{ "ftp://b /m", "'ftp://b': the source is s3://, oss:// or gs://BUCKET[/PREFIX] "
	  "(other stores: s3:// with --endpoint-url)" },
	{ "s3:///p /m", "'s3:///p': no bucket name" },
	{ "<empty> /m", "'': no bucket name" },
	{ "--internal b /m", "--internal applies to oss:// sources only" },
	{ "oss://b /m", "oss://: give the bucket's region (--region cn-hangzhou) or "
	  "--endpoint-url" },
	{ "--part-size 512K b /m", "--part-size must be between 1MiB and 256MiB" },
	{ "--part-size 257M b /m", "--part-size must be between 1MiB and 256MiB" },
	{ "--max-memory 31M b /m", "--max-memory must be at least 4 x --part-size (32 MiB)" },
	{ "--part-size 16M --max-memory 63M b /m",
	  "--max-memory must be at least 4 x --part-size (64 MiB)" },
	{ "--file-mode 17777 b /m", "--file-mode/--dir-mode take permission bits (at most 07777)" },
	{ "--dir-mode 10000 b /m", "--file-mode/--dir-mode take permission bits (at most 07777)" },
	{ "--block-size 3M b /m", "--block-size must be a power of two between 1MiB and 16MiB" },
	{ "--block-size 32M b /m", "--block-size must be a power of two between 1MiB and 16MiB" },
	{ "--block-size 512K b /m", "--block-size must be a power of two between 1MiB and 16MiB" },
	{ "--cache-size 1G b /m", "--cache-size and --cache-clear need --cache-dir" },
	{ "--cache-clear b /m", "--cache-size and --cache-clear need --cache-dir" },
	{ "--cache-dir /c --max-memory 40M b /m", "with --cache-dir, --max-memory must be at "
	  "least 4 x --part-size + 18 MiB of cache io buffers (50 MiB)" },
	{ "--endpoint-url ftp://h b /m", "--endpoint-url: 'ftp://h' must start with http:// or "
	  "https://" },
};

static void t_reject_every_rule(void)
{
	for (size_t i = 0; i < sizeof(reject_cases) / sizeof(reject_cases[0]); i++) {
		struct argv_buf b;
		struct options o;
		char msg[512];
		int e = parse(&b, reject_cases[i].line, &o, msg, sizeof(msg));

		if (e != -EINVAL)
			harness_fail(__FILE__, __LINE__, "'%s': returned %d, expected -EINVAL",
				     reject_cases[i].line, e);
		else if (strcmp(msg, reject_cases[i].msg) != 0)
			harness_fail(__FILE__, __LINE__, "'%s': \"%s\", expected \"%s\"",
				     reject_cases[i].line, msg, reject_cases[i].msg);
		options_free(&o);
	}
}

static void t_metrics_addr(void)
{
	static const struct { const char *arg; const char *host; int port; } good[] = {
		{ "127.0.0.1:9100", "127.0.0.1", 9100 }, { "0.0.0.0:1", "0.0.0.0", 1 },
		{ "localhost:65535", "localhost", 65535 }, { "[::1]:9100", "::1", 9100 },
		{ "[fe80::1:2]:80", "fe80::1:2", 80 }, { "[::]:9100", "::", 9100 },
	};
	static const char *const badv[] = {
		"x", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:65536", ":9100",
		"::1:9100", "[::1]9100", "[::1:9100", "[::1]:", "[]:80", "[zz]:80",
		"[127.0.0.1]:80", "example.com:80", "256.1.1.1:80", "127.0.0.1:80x",
		"127.0.0.1:-1", "localhost:9100:1", "LOCALHOST:1", "1.2.3:80",
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char *argv[] = { "feedfs", "--metrics-addr", (char *)good[i].arg, "b", "/m", NULL };
		struct options o;
		char msg[256];

		CHECK_EQ_INT(options_parse(5, argv, &o, msg, sizeof(msg)), 0);
		CHECK_STR(o.metrics_host, good[i].host);
		CHECK_EQ_INT(o.metrics_port, good[i].port);
		options_free(&o);
	}
	for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++) {
		char *argv[] = { "feedfs", "--metrics-addr", (char *)badv[i], "b", "/m", NULL };
		struct options o;
		char msg[256], want[256];

		snprintf(want, sizeof(want),
			 "--metrics-addr: '%s' is not HOST:PORT (e.g. 127.0.0.1:9100)", badv[i]);
		CHECK_EQ_INT(options_parse(5, argv, &o, msg, sizeof(msg)), -EINVAL);
		CHECK_STR(msg, want);
		CHECK(o.metrics_host == NULL);
		options_free(&o);
	}
}

static void t_defaults(void)
{
	struct argv_buf b;
	struct options o;
	char msg[256];

	CHECK_EQ_INT(parse(&b, "b /m", &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.bucket, "b");
	CHECK_STR(o.prefix, "");
	CHECK_STR(o.mountpoint, "/m");
	CHECK_EQ_INT(o.store, S3_STORE_AWS);
	CHECK(o.endpoint == NULL);
	CHECK(o.region == NULL);
	CHECK(o.ca_bundle == NULL);
	CHECK(o.profile == NULL);
	CHECK(o.cache_dir == NULL);
	CHECK(o.metrics_host == NULL);
	CHECK_EQ_INT(o.metrics_port, 0);
	CHECK_EQ_INT(o.part_size, 8 * MIB);
	/* 512 MiB, or what the cgroup's memory limit leaves (src/cgroup.c). */
	CHECK_EQ_INT(o.max_memory, o.cgroup_memory_limit ?
		     cgroup_memory_budget(o.cgroup_memory_limit) : 512 * MIB);
	CHECK_EQ_INT(o.metadata_ttl_ms, 60000);
	CHECK_EQ_INT(o.negative_ttl_ms, 5000);
	CHECK_EQ_INT(o.uid, getuid());
	CHECK_EQ_INT(o.gid, getgid());
	CHECK_EQ_INT(o.file_mode, 0444);
	CHECK_EQ_INT(o.dir_mode, 0555);
	CHECK_EQ_INT(o.log_level, LOG_INFO);
	CHECK_EQ_INT(o.log_level_set, 0);
	CHECK_EQ_INT(o.block_size, CACHE_BLOCK_DEFAULT);
	CHECK_EQ_INT(o.connect_timeout_ms, 0);
	CHECK_EQ_INT(o.stall_timeout_ms, 0);
	CHECK_EQ_INT(o.max_retries, 0);
	CHECK_EQ_INT(o.hedge_budget_pct, 5);
	CHECK_EQ_INT(o.max_connections, 0);
	CHECK_EQ_INT(o.foreground + o.debug + o.dry_run + o.print_creds + o.allow_other, 0);
	options_free(&o);
}

/* -d prints every FUSE request: libfuse logs them at debug level, so -d
 * raises the log level, unless --log-level says otherwise (either order). */
static void t_debug_logs_requests(void)
{
	struct argv_buf b;
	struct options o;
	char msg[256];

	CHECK_EQ_INT(parse(&b, "-d b /m", &o, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(o.debug + o.foreground, 2);
	CHECK_EQ_INT(o.log_level, LOG_DEBUG);
	options_free(&o);
	CHECK_EQ_INT(parse(&b, "--log-level warn -d b /m", &o, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(o.log_level, LOG_WARNING);
	options_free(&o);
	CHECK_EQ_INT(parse(&b, "-d --log-level error b /m", &o, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(o.log_level, LOG_ERR);
	options_free(&o);
}

static void t_sources(void)
{
	static const struct { const char *line; int store; const char *bucket, *prefix; } cases[] = {
		{ "s3://b/p /m", S3_STORE_AWS, "b", "p/" },
		{ "s3://b/p/q/ /m", S3_STORE_AWS, "b", "p/q/" },
		{ "b/x /m", S3_STORE_AWS, "b", "x/" },
		{ "gs://g/ /m", S3_STORE_GCS, "g", "" },
		{ "--region cn-hangzhou oss://o/d /m", S3_STORE_OSS, "o", "d/" },
		{ "--print-credentials-source gs://g/z", S3_STORE_GCS, "g", "z/" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct argv_buf b;
		struct options o;
		char msg[256];

		CHECK_EQ_INT(parse(&b, cases[i].line, &o, msg, sizeof(msg)), 0);
		CHECK_EQ_INT(o.store, cases[i].store);
		CHECK_STR(o.bucket, cases[i].bucket);
		CHECK_STR(o.prefix, cases[i].prefix);
		options_free(&o);
	}
}

static void t_relative_cache_dir(void)
{
	struct argv_buf b;
	struct options o;
	char msg[256], want[4096], *cwd = realpath(".", NULL);

	CHECK(cwd != NULL);
	snprintf(want, sizeof(want), "%s/rel/dir", cwd ? cwd : "");
	CHECK_EQ_INT(parse(&b, "--cache-dir rel/dir b /m", &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.cache_dir, want);
	options_free(&o);
	free(cwd);
}

static void t_env_defaults(void)
{
	struct argv_buf b;
	struct options o;
	char msg[256];

	setenv("AWS_ENDPOINT_URL", "http://env:1", 1);
	setenv("AWS_REGION", "r-env", 1);
	setenv("AWS_DEFAULT_REGION", "r-default", 1);
	setenv("AWS_CA_BUNDLE", "/env/ca.pem", 1);
	CHECK_EQ_INT(parse(&b, "b /m", &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.endpoint, "http://env:1");
	CHECK_STR(o.region, "r-env");
	CHECK_STR(o.ca_bundle, "/env/ca.pem");
	options_free(&o);

	/* an option wins over its variable */
	CHECK_EQ_INT(parse(&b, "--endpoint-url https://opt:2 --region r-opt --ca-bundle /o b /m",
			   &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.endpoint, "https://opt:2");
	CHECK_STR(o.region, "r-opt");
	CHECK_STR(o.ca_bundle, "/o");
	options_free(&o);

	/* AWS_REGION empty or unset: AWS_DEFAULT_REGION */
	setenv("AWS_REGION", "", 1);
	CHECK_EQ_INT(parse(&b, "b /m", &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.region, "r-default");
	options_free(&o);

	/* the variable's endpoint is checked like the option's */
	setenv("AWS_ENDPOINT_URL", "env:1", 1);
	CHECK_EQ_INT(parse(&b, "b /m", &o, msg, sizeof(msg)), -EINVAL);
	CHECK_STR(msg, "--endpoint-url: 'env:1' must start with http:// or https://");
	options_free(&o);

	/* a region from the environment satisfies oss:// */
	CHECK_EQ_INT(parse(&b, "--endpoint-url http://h oss://o /m", &o, msg, sizeof(msg)), 0);
	CHECK_STR(o.region, "r-default");
	options_free(&o);
	clean_env();
}

static void t_help_version_codes(void)
{
	static const struct { const char *line; int rc; } cases[] = {
		{ "-h", OPTIONS_HELP }, { "--help", OPTIONS_HELP }, { "--help b /m", OPTIONS_HELP },
		{ "--version", OPTIONS_VERSION }, { "b /m --version", OPTIONS_VERSION },
		/* the first of a bad option and --help wins, in argv order */
		{ "--uid x --help", -EINVAL }, { "--help --uid x", OPTIONS_HELP },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct argv_buf b;
		struct options o;
		char msg[256];

		CHECK_EQ_INT(parse(&b, cases[i].line, &o, msg, sizeof(msg)), cases[i].rc);
		options_free(&o);
	}
}

static char *help_text(void)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	options_help(f);
	fclose(f);
	return buf;
}

static void t_help_names_every_option(void)
{
	char *help = help_text(), *warm, *cache;
	const char *name;

	CHECK(help != NULL);
	if (!help)
		return;
	warm = strstr(help, "  feedfs warm [--jobs N] PATH...");
	cache = strstr(help, "  Block cache (off unless --cache-dir is given):\n");
	CHECK(warm != NULL && cache != NULL && cache < warm);
	for (size_t i = 0; (name = options_long_name(i)); i++) {
		char want[64];
		char *at;

		snprintf(want, sizeof(want), "--%s ", name);
		at = strstr(help, want);
		if (!at)
			harness_fail(__FILE__, __LINE__, "--help does not name --%s", name);
		else if (warm && at > warm)
			harness_fail(__FILE__, __LINE__, "--%s is listed after the warm paragraph",
				     name);
	}
	/* general flags sit in OPTIONS, before the block cache section */
	CHECK(strstr(help, "    -f, --foreground       stay in the foreground\n") != NULL);
	CHECK(strstr(help, "-f, --foreground") < cache);
	CHECK(strstr(help, "--metrics-addr HOST:PORT  serve Prometheus metrics at "
		      "http://HOST:PORT/metrics\n") != NULL);
	CHECK(strstr(help, "EXIT STATUS\n") != NULL);
	free(help);
}

/* docs/feedfs.1 names every option ("\-\-cache\-dir"); run from the repo root. */
static void t_man_page_names_every_option(void)
{
	FILE *f = fopen("docs/feedfs.1", "r");
	char *man = NULL;
	size_t cap = 0;
	const char *name;

	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(getdelim(&man, &cap, '\0', f) > 0);
	fclose(f);
	for (size_t i = 0; man && (name = options_long_name(i)); i++) {
		char want[128];
		size_t n = (size_t)snprintf(want, sizeof(want), "\\-\\-");

		for (const char *p = name; *p && n + 3 < sizeof(want); p++) {
			if (*p == '-')
				want[n++] = '\\';
			want[n++] = *p;
		}
		want[n] = '\0';
		if (!strstr(man, want))
			harness_fail(__FILE__, __LINE__, "docs/feedfs.1 does not name --%s", name);
	}
	free(man);
}

static void t_version_line(void)
{
	char *buf = NULL, want[64];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	CHECK(f != NULL);
	if (!f)
		return;
	options_version(f);
	fclose(f);
	snprintf(want, sizeof(want), "feedfs %s (libfuse ", FEEDFS_VERSION);
	CHECK(strncmp(buf, want, strlen(want)) == 0);
	free(buf);
}

/* One process, many parses: each starts from a clean getopt and leaves
 * nothing behind (ASan's leak check runs over this binary). */
static void t_repeated_calls(void)
{
	for (int round = 0; round < 50; round++) {
		struct argv_buf b;
		struct options o;
		char msg[256];

		CHECK_EQ_INT(parse(&b, "--uid x b /m", &o, msg, sizeof(msg)), -EINVAL);
		CHECK_STR(msg, "--uid: 'x' is not a number");
		options_free(&o);
		/* stopped mid-argv above: this parse must still see its first option */
		CHECK_EQ_INT(parse(&b, "--metrics-addr [::1]:9 --cache-dir /c s3://b/p /m", &o,
				   msg, sizeof(msg)), 0);
		CHECK_STR(o.metrics_host, "::1");
		CHECK_STR(o.cache_dir, "/c");
		CHECK_STR(o.prefix, "p/");
		options_free(&o);
		options_free(&o);       /* safe twice */
		CHECK_EQ_INT(parse(&b, "-fd b /m", &o, msg, sizeof(msg)), 0);
		CHECK_EQ_INT(o.debug + o.foreground, 2);
		options_free(&o);
	}
}

static const struct test tests[] = {
	TEST(t_accept_every_option), TEST(t_accept_cases_cover_the_table),
	TEST(t_reject_every_rule), TEST(t_metrics_addr), TEST(t_defaults), TEST(t_debug_logs_requests), TEST(t_sources),
	TEST(t_relative_cache_dir), TEST(t_env_defaults), TEST(t_help_version_codes),
	TEST(t_help_names_every_option), TEST(t_man_page_names_every_option),
	TEST(t_version_line), TEST(t_repeated_calls), { 0 },
};

int main(void)
{
	clean_env();
	return harness_run("options", tests);
}
