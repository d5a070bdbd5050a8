/*
 * options — the command line (include/feedfs/options.h).
 *
 * DESIGN
 * One table, opt_specs[], holds every option: its long name and short letter,
 * its metavar (NULL: it takes no value), the help text, the help section, and
 * how its value is stored: a parser kind writing at an offsetof() into struct
 * options, with an optional range and the words that reject it, or a small
 * handler for the few that need more. getopt_long's table is built from it on
 * every call, and so is --help: a new option is one entry here.
 *
 * Nothing here prints or exits. Every rejection is one line in msg, worded as
 * users saw it when main.c printed it itself; tests pin those words. After the
 * loop, the positional arguments (SOURCE, MOUNTPOINT) and the checks that
 * involve more than one option run once, in a fixed order, so that the first
 * problem in that order is the one reported.
 *
 * getopt keeps its state in globals: optind = 0 asks glibc for a full
 * re-initialisation, so options_parse can run any number of times in one
 * process (unit tests, the fuzzer).
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/cache.h"
#include "feedfs/cgroup.h"
#include "feedfs/creds.h"
#include "feedfs/log.h"
#include "feedfs/options.h"
#include "feedfs/util.h"

#define MIB (1ULL << 20)

enum opt_kind {
	OPT_FLAG,       /* int = 1 */
	OPT_STR,        /* const char * = the argument */
	OPT_SIZE,       /* uint64_t, util_parse_size */
	OPT_SECONDS,    /* int64_t milliseconds, util_parse_seconds_ms, >= 0 */
	OPT_U32,        /* uint32_t, decimal */
	OPT_OCTAL,      /* uint32_t, octal */
	OPT_FN,         /* handler */
	OPT_HELP,       /* options_parse returns OPTIONS_HELP */
	OPT_VERSION,    /* options_parse returns OPTIONS_VERSION */
};

enum opt_section { SEC_GENERAL, SEC_CACHE };

/* Store arg into o; 0 or -EINVAL with one line in msg. */
typedef int opt_handler_fn(struct options *o, const char *arg, char *msg, size_t msg_len);

struct opt_spec {
	const char *name;           /* long name, without "--" */
	char short_name;            /* 0: none */
	const char *metavar;        /* NULL: takes no value */
	enum opt_kind kind;
	size_t off;                 /* offsetof(struct options, field) for the kinds */
	int64_t min, max;           /* when range is set: inclusive bounds (ms for seconds) */
	const char *range;          /* "--NAME: 'ARG' <range>" when out of bounds */
	opt_handler_fn *handler;    /* OPT_FN */
	enum opt_section section;
	const char *help;           /* lines separated by '\n', no final newline */
};

#define bad util_einval        /* one line and -EINVAL */

static int set_debug(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	o->debug = 1;
	o->foreground = 1;
	/* libfuse logs each request at debug level: without this the log's
	 * level (info) drops them. An explicit --log-level still wins. */
	if (!o->log_level_set)
		o->log_level = LOG_DEBUG;
	return 0;
}

static int set_passthrough(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	if (strcmp(arg, "on") == 0)
		o->passthrough_off = 0;
	else if (strcmp(arg, "off") == 0)
		o->passthrough_off = 1;
	else
		return bad(msg, msg_len, "--passthrough: '%s' is not on or off", arg);
	return 0;
}

/* The values are fs.h's FS_URING_OFF, _AUTO, _ON. */
static int set_fuse_uring(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	if (strcmp(arg, "off") == 0)
		o->fuse_uring = 0;
	else if (strcmp(arg, "auto") == 0)
		o->fuse_uring = 1;
	else if (strcmp(arg, "on") == 0)
		o->fuse_uring = 2;
	else
		return bad(msg, msg_len, "--fuse-uring: '%s' is not auto, on or off", arg);
	return 0;
}

static int set_log_level(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	int lvl = log_level_parse(arg);

	if (lvl < 0)
		return bad(msg, msg_len, "--log-level: '%s' is not one of error, warn, info, debug",
			   arg);
	o->log_level = lvl;
	o->log_level_set = 1;
	return 0;
}

static int set_cache_dir(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	char *cwd;

	if (!arg[0])
		return bad(msg, msg_len, "--cache-dir: empty path");
	free(o->cache_dir);
	o->cache_dir = NULL;
	if (arg[0] == '/') {
		o->cache_dir = strdup(arg);
	} else {
		/* The daemon changes to "/": keep the dir where the user meant. */
		cwd = realpath(".", NULL);
		if (!cwd)
			return bad(msg, msg_len, "--cache-dir: cannot resolve '%s'", arg);
		o->cache_dir = xasprintf("%s/%s", cwd, arg);
		free(cwd);
	}
	return o->cache_dir ? 0 : -ENOMEM;
}

/* --snapshot FILE|URL: a file is made absolute (the daemon changes to "/");
 * a URL is kept as given and must use the source's scheme (check_combined):
 * the daemon fetches it through the source's store. */
static int set_snapshot(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	char *cwd;
	const char *s = strstr(arg, "://");

	if (!arg[0])
		return bad(msg, msg_len, "--snapshot: empty path");
	if (s && (!strchr(s + 3, '/') || strchr(s + 3, '/') == s + 3 ||
		  strchr(s + 3, '/')[1] == '\0' || arg[strlen(arg) - 1] == '/'))
		return bad(msg, msg_len, "--snapshot: '%s' is not SCHEME://BUCKET/KEY", arg);
	free(o->snapshot);
	o->snapshot = NULL;
	if (s || arg[0] == '/') {
		o->snapshot = strdup(arg);
	} else {
		cwd = realpath(".", NULL);
		if (!cwd)
			return bad(msg, msg_len, "--snapshot: cannot resolve '%s'", arg);
		o->snapshot = xasprintf("%s/%s", cwd, arg);
		free(cwd);
	}
	return o->snapshot ? 0 : -ENOMEM;
}

static int set_sources(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	char *cwd;

	if (!arg[0])
		return bad(msg, msg_len, "--sources: empty path");
	free(o->sources);
	o->sources = NULL;
	if (arg[0] == '/') {
		o->sources = strdup(arg);
	} else {
		cwd = realpath(".", NULL);
		if (!cwd)
			return bad(msg, msg_len, "--sources: cannot resolve '%s'", arg);
		o->sources = xasprintf("%s/%s", cwd, arg);
		free(cwd);
	}
	return o->sources ? 0 : -ENOMEM;
}

static int set_profile(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	if (!arg[0])
		return bad(msg, msg_len, "--profile: empty name");
	o->profile = arg;
	return 0;
}

/* HOST:PORT, HOST an IPv4 literal, "localhost" or "[IPv6]", PORT 1..65535.
 * Only the form is checked here; binding it is the listener's. */
static int set_metrics_addr(struct options *o, const char *arg, char *msg, size_t msg_len)
{
	unsigned char addr[16];
	const char *host = arg, *colon;
	size_t host_len;
	uint32_t port;
	char hbuf[64];

	if (arg[0] == '[') {
		const char *close = strchr(arg, ']');

		if (!close || close[1] != ':')
			goto bad_form;
		host = arg + 1;
		host_len = (size_t)(close - host);
		colon = close + 1;
	} else {
		colon = strchr(arg, ':');
		if (!colon || strchr(colon + 1, ':'))
			goto bad_form;
		host_len = (size_t)(colon - arg);
	}
	if (host_len == 0 || host_len >= sizeof(hbuf))
		goto bad_form;
	memcpy(hbuf, host, host_len);
	hbuf[host_len] = '\0';
	if (arg[0] == '[' ? inet_pton(AF_INET6, hbuf, addr) != 1
			  : strcmp(hbuf, "localhost") != 0 && inet_pton(AF_INET, hbuf, addr) != 1)
		goto bad_form;
	if (util_parse_u32(colon + 1, 10, &port) < 0 || port < 1 || port > 65535)
		goto bad_form;
	free(o->metrics_host);
	o->metrics_host = strdup(hbuf);
	if (!o->metrics_host)
		return -ENOMEM;
	o->metrics_port = (uint16_t)port;
	return 0;
bad_form:
	return bad(msg, msg_len, "--metrics-addr: '%s' is not HOST:PORT (e.g. 127.0.0.1:9100)",
		   arg);
}

#define AT(field) offsetof(struct options, field)

static const struct opt_spec opt_specs[] = {
	{ .name = "endpoint-url", .metavar = "URL", .kind = OPT_STR, .off = AT(endpoint),
	  .help = "S3 endpoint, any S3-compatible store (default:\n"
		  "$AWS_ENDPOINT_URL, else by scheme: s3://\n"
		  "https://s3.REGION.amazonaws.com, oss://\n"
		  "https://oss-REGION.aliyuncs.com, gs://\n"
		  "https://storage.googleapis.com). IPv6: http://[::1]:9000" },
	{ .name = "region", .metavar = "R", .kind = OPT_STR, .off = AT(region),
	  .help = "signing region (default: $AWS_REGION, else\n"
		  "$AWS_DEFAULT_REGION, else the profile's region, else\n"
		  "us-east-1, 'auto' for gs://); a wrong region is\n"
		  "corrected from the bucket's answer at mount time" },
	{ .name = "force-path-style", .kind = OPT_FLAG, .off = AT(force_path_style),
	  .help = "address the bucket as ENDPOINT/BUCKET, not BUCKET.HOST\n"
		  "(automatic for IP/localhost endpoints and for dotted\n"
		  "bucket names over https)" },
	{ .name = "internal", .kind = OPT_FLAG, .off = AT(oss_internal),
	  .help = "oss://: use oss-REGION-internal.aliyuncs.com (in-VPC)" },
	{ .name = "list-v1", .kind = OPT_FLAG, .off = AT(list_v1),
	  .help = "list with ListObjects V1 (marker) for stores without V2" },
	{ .name = "no-sign-request", .kind = OPT_FLAG, .off = AT(no_sign),
	  .help = "send unsigned requests (public buckets)" },
	{ .name = "profile", .metavar = "NAME", .kind = OPT_FN, .handler = set_profile,
	  .help = "shared config/credentials profile (default:\n"
		  "$AWS_PROFILE, else default); see docs/CREDENTIALS.md" },
	{ .name = "print-credentials-source", .kind = OPT_FLAG, .off = AT(print_creds),
	  .help = "print which credential source won and where it\n"
		  "read from (never a secret), exit 0; 1 if none" },
	{ .name = "dry-run", .kind = OPT_FLAG, .off = AT(dry_run),
	  .help = "check credentials and access to SOURCE as a mount\n"
		  "would, print one line, exit 0 or 1; mounts nothing" },
	{ .name = "snapshot", .metavar = "FILE", .kind = OPT_FN, .handler = set_snapshot,
	  .help = "names, sizes and ETags from FILE, written by\n"
		  "'feedfs snapshot SOURCE FILE': no LIST or HEAD ever,\n"
		  "every read pinned to the snapshot's ETag (ESTALE if\n"
		  "the object changed since); FILE must describe SOURCE.\n"
		  "FILE may be s3://BUCKET/KEY on the source's store:\n"
		  "fetched at mount (GETs of 64MiB) into --cache-dir or\n"
		  "$TMPDIR, mapped, and unlinked" },
	{ .name = "sources", .metavar = "FILE", .kind = OPT_FN, .handler = set_sources,
	  .help = "several sources in one tree: FILE holds one a line,\n"
		  "NAME URL [key=value,...] (keys: endpoint_url, region,\n"
		  "profile, force_path_style, no_sign_request, list_v1,\n"
		  "internal, ca_bundle, no_verify_ssl, snapshot); each is\n"
		  "the directory NAME; no SOURCE argument then" },
	{ .name = "part-size", .metavar = "SIZE", .kind = OPT_SIZE, .off = AT(part_size),
	  .help = "bytes per ranged GET, 1MiB..256MiB (default 8MiB)" },
	{ .name = "max-memory", .metavar = "SIZE", .kind = OPT_SIZE, .off = AT(max_memory),
	  .help = "memory for in-flight and readahead buffers, metadata\n"
		  "(listings and inodes: an eighth) and, with --cache-dir,\n"
		  "the cache's io buffers (80MiB at the default); at least\n"
		  "4 x part size (default 512MiB; under a cgroup memory\n"
		  "limit L: L/2 - 64MiB, at least 32MiB); readahead of all\n"
		  "files stays within 64MiB per CPU" },
	{ .name = "metadata-ttl", .metavar = "SECONDS", .kind = OPT_SECONDS,
	  .off = AT(metadata_ttl_ms),
	  .help = "how long attributes, names and listings are trusted\n"
		  "(default 60); changes in the bucket show after it" },
	{ .name = "negative-ttl", .metavar = "SECONDS", .kind = OPT_SECONDS,
	  .off = AT(negative_ttl_ms),
	  .help = "how long a missing name is remembered (default 5)" },
	{ .name = "uid", .metavar = "UID", .kind = OPT_U32, .off = AT(uid),
	  .help = "owner of every file (default: the caller's uid)" },
	{ .name = "gid", .metavar = "GID", .kind = OPT_U32, .off = AT(gid),
	  .help = "group of every file (default: the caller's gid)" },
	{ .name = "file-mode", .metavar = "MODE", .kind = OPT_OCTAL, .off = AT(file_mode),
	  .help = "permission bits of files, octal (default 0444)" },
	{ .name = "dir-mode", .metavar = "MODE", .kind = OPT_OCTAL, .off = AT(dir_mode),
	  .help = "permission bits of directories, octal (default 0555)" },
	{ .name = "allow-other", .kind = OPT_FLAG, .off = AT(allow_other),
	  .help = "let other users access the mount (needs root or\n"
		  "user_allow_other in /etc/fuse.conf)" },
	{ .name = "log-level", .metavar = "LEVEL", .kind = OPT_FN, .handler = set_log_level,
	  .help = "error, warn, info or debug (default info)" },
	{ .name = "log-file", .metavar = "PATH", .kind = OPT_STR, .off = AT(log_file),
	  .help = "log to PATH (default: stderr in the foreground,\n"
		  "syslog as a daemon)" },
	{ .name = "ca-bundle", .metavar = "PATH", .kind = OPT_STR, .off = AT(ca_bundle),
	  .help = "CA certificates for TLS (default: $AWS_CA_BUNDLE,\n"
		  "else the system's)" },
	{ .name = "connect-timeout", .metavar = "SECONDS", .kind = OPT_SECONDS,
	  .off = AT(connect_timeout_ms), .min = 1, .max = INT32_MAX,
	  .range = "is out of range",
	  .help = "TCP/TLS connect timeout (default 10)" },
	{ .name = "stall-timeout", .metavar = "SECONDS", .kind = OPT_SECONDS,
	  .off = AT(stall_timeout_ms), .min = 1000, .max = INT32_MAX,
	  .range = "is not in 1..2147483 seconds",
	  .help = "a transfer with no bytes for this long is\n"
		  "dropped and retried (default 30)" },
	{ .name = "max-retries", .metavar = "N", .kind = OPT_U32, .off = AT(max_retries),
	  .min = 1, .max = 100, .range = "is not in 1..100",
	  .help = "attempts per S3 request in all, 1..100 (default 10)" },
	{ .name = "hedge-budget", .metavar = "PCT", .kind = OPT_U32, .off = AT(hedge_budget_pct),
	  .min = 0, .max = 100, .range = "is not in 0..100",
	  .help = "a GET, HEAD or LIST with no bytes for longer than\n"
		  "the store's recent tail gets a second request; hedges\n"
		  "stay within PCT% extra requests, 0..100, 0 off\n"
		  "(default 5)" },
	{ .name = "no-verify-ssl", .kind = OPT_FLAG, .off = AT(no_verify_tls),
	  .help = "do not check the server's TLS certificate: UNSAFE,\n"
		  "for test endpoints only (warns at start)" },
	{ .name = "max-connections", .metavar = "N", .kind = OPT_U32, .off = AT(max_connections),
	  .min = 1, .max = 1024, .range = "is not in 1..1024",
	  .help = "concurrent S3 requests, 1..1024 (default 32)" },
	{ .name = "no-bdi-readahead", .kind = OPT_FLAG, .off = AT(no_bdi_readahead),
	  .help = "keep the kernel's readahead for the mount; by default,\n"
		  "as root, feedfs raises it (/sys/class/bdi/.../\n"
		  "read_ahead_kb) to the part size, at most 16MiB" },
	{ .name = "passthrough", .metavar = "on|off", .kind = OPT_FN,
	  .handler = set_passthrough,
	  .help = "on (default): with --cache-dir, as root, on Linux\n"
		  "6.9+, objects cached whole and verified are copied\n"
		  "to plain files and their reads served by the kernel\n"
		  "from them (FUSE passthrough); off: every read comes\n"
		  "through the daemon" },
	{ .name = "fuse-uring", .metavar = "auto|on|off", .kind = OPT_FN,
	  .handler = set_fuse_uring,
	  .help = "off (default): FUSE requests are read from /dev/fuse;\n"
		  "auto/on: over io_uring where the kernel has it (6.14+,\n"
		  "fuse module parameter enable_uring=Y) and the keeper\n"
		  "is off (--no-keeper); on also warns when it cannot;\n"
		  "either way /dev/fuse serves when it cannot" },
	{ .name = "metrics-addr", .metavar = "HOST:PORT", .kind = OPT_FN,
	  .handler = set_metrics_addr,
	  .help = "serve Prometheus metrics at http://HOST:PORT/metrics\n"
		  "(off by default); HOST: an IPv4 address, localhost\n"
		  "or [IPv6]" },
	{ .name = "no-keeper", .kind = OPT_FLAG, .off = AT(no_keeper),
	  .help = "serve in one process: without the keeper (on by\n"
		  "default) a crash of the daemon leaves the mount dead\n"
		  "(ENOTCONN) instead of a successor taking it over" },
	{ .name = "foreground", .short_name = 'f', .kind = OPT_FLAG, .off = AT(foreground),
	  .help = "stay in the foreground" },
	{ .name = "debug", .short_name = 'd', .kind = OPT_FN, .handler = set_debug,
	  .help = "print every FUSE request (implies -f and, without --log-level, debug)" },
	{ .name = "help", .short_name = 'h', .kind = OPT_HELP,
	  .help = "print this help and exit" },
	{ .name = "version", .kind = OPT_VERSION,
	  .help = "print the version and exit" },

	{ .name = "cache-dir", .metavar = "DIR", .kind = OPT_FN, .handler = set_cache_dir,
	  .section = SEC_CACHE,
	  .help = "keep fetched blocks in DIR on local disk (created\n"
		  "0700); they survive restarts and are checked\n"
		  "(CRC32C) on every read. Other mounts of the\n"
		  "same bucket given the same DIR read through\n"
		  "the first one's cache." },
	{ .name = "cache-size", .metavar = "SIZE", .kind = OPT_SIZE, .off = AT(cache_size),
	  .section = SEC_CACHE,
	  .help = "disk space for blocks (default: half of the free\n"
		  "space, after keeping 5% of the disk free)" },
	{ .name = "block-size", .metavar = "SIZE", .kind = OPT_SIZE, .off = AT(block_size),
	  .section = SEC_CACHE,
	  .help = "cache block, a power of two from 1MiB to 16MiB\n"
		  "(default 4MiB); changing it starts the cache cold" },
	{ .name = "cache-clear", .kind = OPT_FLAG, .off = AT(cache_clear),
	  .section = SEC_CACHE,
	  .help = "drop every cached block at start" },
};

#define N_SPECS (sizeof(opt_specs) / sizeof(opt_specs[0]))

/* getopt_long's val for entry i: above every char, so a short letter and a
 * long-only entry never collide. */
#define SPEC_VAL(i) (256 + (int)(i))

const char *options_long_name(size_t i)
{
	return i < N_SPECS ? opt_specs[i].name : NULL;
}

int options_lookup(const char *long_name)
{
	for (size_t i = 0; i < N_SPECS; i++)
		if (strcmp(opt_specs[i].name, long_name) == 0)
			return opt_specs[i].metavar ? 1 : 0;
	return -ENOENT;
}

/* ---- --help ---------------------------------------------------------------- */

static const char help_head[] =
"NAME\n"
"    feedfs - mount an S3 bucket prefix as a read-only POSIX file system\n"
"\n"
"SYNOPSIS\n"
"    feedfs [OPTIONS] s3://BUCKET[/PREFIX/] MOUNTPOINT\n"
"    feedfs [OPTIONS] BUCKET[/PREFIX/] MOUNTPOINT\n"
"    feedfs [OPTIONS] oss://BUCKET[/PREFIX/] MOUNTPOINT    (Aliyun OSS)\n"
"    feedfs [OPTIONS] gs://BUCKET[/PREFIX/] MOUNTPOINT     (GCS, HMAC keys)\n"
"    feedfs --snapshot FILE [OPTIONS] SOURCE MOUNTPOINT\n"
"    feedfs --sources FILE [OPTIONS] MOUNTPOINT            (several, one directory each)\n"
"    feedfs --dry-run [OPTIONS] SOURCE\n"
"    feedfs --print-credentials-source [--profile NAME]\n"
"    feedfs warm [--jobs N] MOUNTPOINT/PATH...\n"
"    feedfs stats [--json | --prom] [--watch] MOUNTPOINT\n"
"    feedfs prefetch --order FILE MOUNTPOINT | --clear MOUNTPOINT\n"
"    feedfs snapshot [OPTIONS] SOURCE FILE | --print FILE\n"
"\n"
"    Keys under PREFIX appear as files, '/' in keys as directories. The tree is\n"
"    read-only; every write answers EROFS. By default feedfs becomes a daemon\n"
"    and returns once the mount is ready (exit 0), or prints one line saying\n"
"    why it could not mount. Unmount with 'fusermount3 -u MOUNTPOINT', 'umount'\n"
"    or SIGTERM/SIGINT/SIGHUP to the daemon (SIGHUP not when it was started\n"
"    with SIGHUP ignored, as under nohup).\n"
"\n"
"OPTIONS\n";

static const char help_cache_head[] =
"\n"
"  Block cache (off unless --cache-dir is given):\n";

static const char help_tail[] =
"\n"
"  feedfs warm [--jobs N] PATH...  loads files and directories of a running\n"
"    mount into its cache ahead of a job, through the daemon (not the mount);\n"
"    prints progress; safe to interrupt. --jobs: files in parallel (default 4).\n"
"\n"
"  feedfs stats [--json | --prom] [--watch] MOUNTPOINT  what a running mount is\n"
"    doing: throughput, S3 requests by kind, retries by cause, cache hits and\n"
"    misses, readahead, memory budget, read-wait and latency percentiles.\n"
"    --json: one object with \"pid\", the source and every counter (docs/METRICS.md);\n"
"    --prom: the Prometheus text of --metrics-addr; --watch: again every second.\n"
"\n"
"  feedfs prefetch --order FILE MOUNTPOINT  hands a loader's file order (one\n"
"    path per line, relative to MOUNTPOINT or under it; '-': stdin) to the\n"
"    daemon, which fetches those files ahead of the opens, within --max-memory;\n"
"    a new order replaces the old. --clear MOUNTPOINT drops it. Counters: the\n"
"    \"order\" group of feedfs stats.\n"
"\n"
"  feedfs snapshot [OPTIONS] SOURCE FILE  lists SOURCE once (the options above\n"
"    for endpoint, region and credentials apply) and writes every key with its\n"
"    size, ETag and time to FILE (docs/SNAPSHOT.md), for --snapshot mounts on\n"
"    every node. --print FILE writes one key a line: KEY, SIZE, ETAG (tabs).\n"
"\n"
"    SIZE takes K, M, G suffixes (powers of 1024): 8M, 512KiB, 1G.\n"
"\n"
"ENVIRONMENT\n"
"    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN\n"
"                           credentials (unless --no-sign-request); the whole\n"
"                           chain (profiles, IRSA, RRSA, ECS/EKS, IMDS, Aliyun\n"
"                           ECS RAM role, OSS_* variables) is in docs/CREDENTIALS.md\n"
"    HTTPS_PROXY, NO_PROXY  honoured for S3 requests (not for metadata services)\n"
"    AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION, AWS_CA_BUNDLE\n"
"                           defaults for the options above\n"
"\n"
"EXAMPLES\n"
"    feedfs s3://datasets/imagenet/ /mnt/imagenet\n"
"    feedfs --endpoint-url http://127.0.0.1:4568 --force-path-style \\\n"
"           mybucket /mnt/b --metadata-ttl 3600\n"
"    feedfs --no-sign-request s3://public-bucket/ /mnt/pub -f --log-level debug\n"
"    feedfs --cache-dir /nvme/feedfs-cache s3://datasets/imagenet/ /mnt/imagenet\n"
"    feedfs warm --jobs 8 /mnt/imagenet/train\n"
"    feedfs stats --watch /mnt/imagenet\n"
"    feedfs prefetch --order epoch3.txt /mnt/imagenet\n"
"\n"
"EXIT STATUS\n"
"    0  mounted (the daemon keeps running), or a clean unmount in the foreground\n"
"    1  could not mount: bucket, credentials, endpoint or mount point (one line\n"
"       on stderr says which)\n"
"    2  bad command line\n";

#define HELP_INDENT 4               /* "    --name" */
#define HELP_TEXT_COL 27            /* where every help line starts */

/* "    -f, --foreground       stay ...": the help starts at HELP_TEXT_COL, or
 * two spaces after a longer head; its later lines at HELP_TEXT_COL. */
static void help_entry(FILE *out, const struct opt_spec *s)
{
	const char *line = s->help, *nl;
	char head[80];
	int n;

	if (s->short_name)
		n = snprintf(head, sizeof(head), "-%c, --%s", s->short_name, s->name);
	else
		n = snprintf(head, sizeof(head), "--%s", s->name);
	if (s->metavar)
		n += snprintf(head + n, sizeof(head) - (size_t)n, " %s", s->metavar);
	fprintf(out, "%*s%s%*s", HELP_INDENT, "", head,
		HELP_INDENT + n < HELP_TEXT_COL ? HELP_TEXT_COL - HELP_INDENT - n : 2, "");
	for (;;) {
		nl = strchr(line, '\n');
		fprintf(out, "%.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
		if (!nl)
			break;
		line = nl + 1;
		fprintf(out, "%*s", HELP_TEXT_COL, "");
	}
}

void options_help(FILE *out)
{
	fputs(help_head, out);
	for (size_t i = 0; i < N_SPECS; i++) {
		if (opt_specs[i].section != SEC_GENERAL)
			continue;
		help_entry(out, &opt_specs[i]);
	}
	fputs(help_cache_head, out);
	for (size_t i = 0; i < N_SPECS; i++) {
		if (opt_specs[i].section != SEC_CACHE)
			continue;
		help_entry(out, &opt_specs[i]);
	}
	fputs(help_tail, out);
}

void options_version(FILE *out)
{
	fprintf(out, "feedfs %s (libfuse %d.%d)\n", FEEDFS_VERSION, FUSE_MAJOR_VERSION,
		FUSE_MINOR_VERSION);
}

/* ---- parsing --------------------------------------------------------------- */

static void set_defaults(struct options *o)
{
	const char *region_env;

	memset(o, 0, sizeof(*o));
	o->endpoint = util_getenv_nonempty("AWS_ENDPOINT_URL");
	region_env = util_getenv_nonempty("AWS_REGION");
	o->region = region_env ? region_env : util_getenv_nonempty("AWS_DEFAULT_REGION");
	o->ca_bundle = util_getenv_nonempty("AWS_CA_BUNDLE");
	o->part_size = 8 * MIB;
	o->hedge_budget_pct = 5;
	o->max_memory = 512 * MIB;
	/* In a container, a fixed 512 MiB can exceed the memory limit (an OOM
	 * kill) or waste most of it: derive the default from the limit. An
	 * explicit --max-memory is applied after this and wins. */
	if (cgroup_memory_limit(&o->cgroup_memory_limit) > 0)
		o->max_memory = cgroup_memory_budget(o->cgroup_memory_limit);
	else
		o->cgroup_memory_limit = 0;
	o->metadata_ttl_ms = 60 * 1000;
	o->negative_ttl_ms = 5 * 1000;
	o->uid = getuid();
	o->gid = getgid();
	o->file_mode = 0444;
	o->dir_mode = 0555;
	o->log_level = LOG_INFO;
	o->block_size = CACHE_BLOCK_DEFAULT;
}

static int out_of_range(const struct opt_spec *s, int64_t v, const char *arg, char *msg,
			size_t msg_len)
{
	if (s->range && (v < s->min || v > s->max))
		return bad(msg, msg_len, "--%s: '%s' %s", s->name, arg, s->range);
	return 0;
}

/* One option with its argument (NULL when it takes none) into o. */
static int apply(const struct opt_spec *s, const char *arg, struct options *o, char *msg,
		 size_t msg_len)
{
	char *field = (char *)o + s->off;
	uint64_t size;
	int64_t ms;
	uint32_t u;

	switch (s->kind) {
	case OPT_FLAG:
		*(int *)field = 1;
		return 0;
	case OPT_STR:
		*(const char **)field = arg;
		return 0;
	case OPT_SIZE:
		if (util_parse_size(arg, &size) < 0)
			return bad(msg, msg_len, "--%s: '%s' is not a size (e.g. 8M, 512K, 1G)",
				   s->name, arg);
		*(uint64_t *)field = size;
		return 0;
	case OPT_SECONDS:
		if (util_parse_seconds_ms(arg, &ms) < 0 || ms < 0)
			return bad(msg, msg_len, "--%s: '%s' is not a number of seconds", s->name,
				   arg);
		*(int64_t *)field = ms;
		return out_of_range(s, ms, arg, msg, msg_len);
	case OPT_U32:
	case OPT_OCTAL:
		if (util_parse_u32(arg, s->kind == OPT_OCTAL ? 8 : 10, &u) < 0)
			return bad(msg, msg_len, "--%s: '%s' is not a%s number", s->name, arg,
				   s->kind == OPT_OCTAL ? "n octal" : "");
		*(uint32_t *)field = u;
		return out_of_range(s, u, arg, msg, msg_len);
	case OPT_FN:
		return s->handler(o, arg, msg, msg_len);
	case OPT_HELP:
		return OPTIONS_HELP;
	case OPT_VERSION:
		return OPTIONS_VERSION;
	}
	return -EINVAL;
}

/* "s3://b/p", "oss://b/p", "gs://b/p", "b/p", "b" -> store, bucket, prefix ("" or
 * ending in '/'). */
static int parse_source(const char *src, struct options *o, char *msg, size_t msg_len)
{
	const char *s = src, *slash;
	size_t plen;

	if (strncmp(s, "s3://", 5) == 0) {
		s += 5;
	} else if (strncmp(s, "oss://", 6) == 0) {
		s += 6;
		o->store = S3_STORE_OSS;
	} else if (strncmp(s, "gs://", 5) == 0) {
		s += 5;
		o->store = S3_STORE_GCS;
	} else if (strstr(s, "://")) {
		return bad(msg, msg_len, "'%s': the source is s3://, oss:// or gs://BUCKET[/PREFIX] "
			   "(other stores: s3:// with --endpoint-url)", src);
	}
	slash = strchr(s, '/');
	free(o->bucket);
	o->bucket = slash ? strndup(s, (size_t)(slash - s)) : strdup(s);
	if (!o->bucket)
		return -ENOMEM;
	if (!o->bucket[0])
		return bad(msg, msg_len, "'%s': no bucket name", src);
	s = slash ? slash + 1 : "";
	plen = strlen(s);
	free(o->prefix);
	o->prefix = malloc(plen + 2);
	if (!o->prefix)
		return -ENOMEM;
	memcpy(o->prefix, s, plen + 1);
	if (plen && s[plen - 1] != '/') {
		o->prefix[plen] = '/';
		o->prefix[plen + 1] = '\0';
	}
	return 0;
}

/* Memory the block cache maps for its io buffers (0 without --cache-dir). */
static uint64_t io_reserve(const struct options *o)
{
	return o->cache_dir ? cache_io_reserve((uint32_t)o->block_size, o->max_memory) : 0;
}

/* The checks that involve more than one option, in the order users met them. */
static int check_combined(const struct options *o, char *msg, size_t msg_len)
{
	const char *scheme = o->store == S3_STORE_OSS ? "oss://"
			     : o->store == S3_STORE_GCS ? "gs://" : "s3://";

	if (o->oss_internal && o->store != S3_STORE_OSS)
		return bad(msg, msg_len, "--internal applies to oss:// sources only");
	if (o->store == S3_STORE_OSS && !o->region && !o->endpoint)
		return bad(msg, msg_len, "oss://: give the bucket's region (--region cn-hangzhou) "
			   "or --endpoint-url");
	if (o->part_size < MIB || o->part_size > 256 * MIB)
		return bad(msg, msg_len, "--part-size must be between 1MiB and 256MiB");
	if (o->max_memory < 4 * o->part_size)
		return bad(msg, msg_len, "--max-memory must be at least 4 x --part-size (%llu MiB)",
			   (unsigned long long)(4 * o->part_size / MIB));
	if (o->file_mode > 07777 || o->dir_mode > 07777)
		return bad(msg, msg_len, "--file-mode/--dir-mode take permission bits (at most "
			   "07777)");
	if (o->block_size < MIB || o->block_size > 16 * MIB || (o->block_size & (o->block_size - 1)))
		return bad(msg, msg_len, "--block-size must be a power of two between 1MiB and 16MiB");
	if (!o->cache_dir && (o->cache_size || o->cache_clear))
		return bad(msg, msg_len, "--cache-size and --cache-clear need --cache-dir");
	/* The cache's io buffers come out of --max-memory, so that the bound holds
	 * with the cache on too (readahead gets the rest). */
	if (o->cache_dir && o->max_memory < 4 * o->part_size + io_reserve(o))
		return bad(msg, msg_len, "with --cache-dir, --max-memory must be at least 4 x "
			   "--part-size + %llu MiB of cache io buffers (%llu MiB)",
			   (unsigned long long)(io_reserve(o) / MIB),
			   (unsigned long long)((4 * o->part_size + io_reserve(o)) / MIB));
	if (o->endpoint && strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
		return bad(msg, msg_len, "--endpoint-url: '%s' must start with http:// or https://",
			   o->endpoint);
	if (o->snapshot && strstr(o->snapshot, "://") &&
	    strncmp(o->snapshot, scheme, strlen(scheme)) != 0)
		return bad(msg, msg_len, "--snapshot: '%s' must be on the source's store (the same "
			   "scheme)", o->snapshot);
	return 0;
}

/* SOURCE and MOUNTPOINT after the options (argv[first..argc)), then the checks. */
static int parse_positional(int argc, char **argv, int first, struct options *o, char *msg,
			    size_t msg_len)
{
	int nargs = argc - first, e;

	if (!o->region && creds_profile_region(o->profile, o->profile_region,
					       sizeof(o->profile_region)))
		o->region = o->profile_region;
	if (o->sources) {
		if (o->snapshot)
			return bad(msg, msg_len, "--snapshot goes in the sources file with --sources "
				   "(snapshot=FILE on a source's line)");
		if (nargs != (o->dry_run ? 0 : 1))
			return bad(msg, msg_len, o->dry_run ? "--dry-run --sources FILE takes no "
				   "argument" : "--sources FILE takes one argument: MOUNTPOINT");
		o->mountpoint = nargs ? argv[first] : NULL;
		return check_combined(o, msg, msg_len);
	}
	if (nargs > 2)
		return bad(msg, msg_len, "unexpected argument '%s'", argv[first + 2]);
	if (o->print_creds)     /* needs no source; one may be given (its scheme is not used) */
		return nargs >= 1 ? parse_source(argv[first], o, msg, msg_len) : 0;
	if (o->dry_run && nargs < 1)
		return bad(msg, msg_len, "--dry-run: expected s3://BUCKET[/PREFIX/]");
	if (!o->dry_run && nargs < 2)
		return bad(msg, msg_len, "expected s3://BUCKET[/PREFIX/] and MOUNTPOINT");
	e = parse_source(argv[first], o, msg, msg_len);
	if (e < 0)
		return e;
	o->mountpoint = nargs >= 2 ? argv[first + 1] : NULL;
	return check_combined(o, msg, msg_len);
}

/* An option getopt_long did not accept: missing value or unknown. */
static int getopt_error(int c, char **argv, char *msg, size_t msg_len)
{
	if (c == ':')
		return bad(msg, msg_len, "option '%s' needs a value", argv[optind - 1]);
	if (optopt && optopt < 256)
		return bad(msg, msg_len, "unknown option '-%c'", optopt);
	return bad(msg, msg_len, "unknown option '%s'", argv[optind - 1]);
}

int options_set(struct options *o, const char *long_name, const char *value, char *msg,
		size_t msg_len)
{
	for (size_t i = 0; i < N_SPECS; i++) {
		const struct opt_spec *s = &opt_specs[i];

		if (strcmp(s->name, long_name) != 0)
			continue;
		if (!s->metavar != !value)
			return bad(msg, msg_len, s->metavar ? "%s needs a value" : "%s takes no value",
				   long_name);
		return apply(s, value, o, msg, msg_len);
	}
	return -ENOENT;
}

int options_set_source(struct options *o, const char *url, char *msg, size_t msg_len)
{
	int e = parse_source(url, o, msg, msg_len);

	return e < 0 ? e : check_combined(o, msg, msg_len);
}

int options_parse(int argc, char **argv, struct options *o, char *msg, size_t msg_len)
{
	struct option lopts[N_SPECS + 1];
	char shorts[2 + N_SPECS];
	size_t ns = 0, i;
	int c, e;

	set_defaults(o);
	if (msg && msg_len)
		msg[0] = '\0';
	shorts[ns++] = ':';             /* report a missing value as ':' */
	for (i = 0; i < N_SPECS; i++) {
		lopts[i] = (struct option){ opt_specs[i].name,
			opt_specs[i].metavar ? required_argument : no_argument, NULL, SPEC_VAL(i) };
		if (opt_specs[i].short_name)
			shorts[ns++] = opt_specs[i].short_name;
	}
	lopts[N_SPECS] = (struct option){ NULL, 0, NULL, 0 };
	shorts[ns] = '\0';

	optind = 0;                     /* glibc: start over, forget the last argv */
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, lopts, NULL)) != -1) {
		const struct opt_spec *s = NULL;

		if (c >= SPEC_VAL(0) && c < SPEC_VAL(N_SPECS)) {
			s = &opt_specs[c - SPEC_VAL(0)];
		} else {
			for (i = 0; i < N_SPECS && !s; i++)
				if (c != 0 && opt_specs[i].short_name == c)
					s = &opt_specs[i];
		}
		if (!s)
			return getopt_error(c, argv, msg, msg_len);
		e = apply(s, optarg, o, msg, msg_len);
		if (e != 0)
			return e;
	}
	return parse_positional(argc, argv, optind, o, msg, msg_len);
}

void options_free(struct options *o)
{
	free(o->bucket);
	free(o->prefix);
	free(o->cache_dir);
	free(o->metrics_host);
	free(o->snapshot);
	free(o->sources);
	o->bucket = o->prefix = o->cache_dir = o->metrics_host = o->snapshot = NULL;
	o->sources = NULL;
}
