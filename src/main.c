/*
 * feedfs — mount an S3 bucket prefix as a read-only POSIX tree.
 *
 * This file is wiring only: parse options (exit 2 on any bad one), check the
 * mount point, start the daemon (mount.c), build the modules in dependency
 * order (log, creds, s3, budget, fs, FUSE session), run the multi-threaded FUSE
 * loop, and tear down in reverse. Threads (s3's http thread, creds' refresher)
 * are only started after the fork.
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

#include <errno.h>
#include <malloc.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdarg.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "feedfs/attach.h"
#include "feedfs/cache.h"
#include "feedfs/creds.h"
#include "feedfs/fs.h"
#include "feedfs/log.h"
#include "feedfs/mount.h"
#include "feedfs/prefetch.h"
#include "feedfs/s3.h"
#include "feedfs/stack.h"
#include "feedfs/util.h"

#define FEEDFS_VERSION "0.1.0"
#define TAG "main"
#define MIB (1ULL << 20)

struct options {
	char *bucket;
	char *prefix;                   /* "" or ends with '/' */
	const char *mountpoint;
	char mount_abs[PATH_MAX];
	const char *endpoint;
	const char *region;             /* NULL: profile's, else s3's default + discovery */
	char profile_region[64];
	const char *profile;            /* --profile */
	enum s3_store store;            /* from the URL scheme: s3://, oss://, gs:// */
	int oss_internal;               /* --internal */
	int list_v1;                    /* --list-v1 */
	int dry_run;                    /* --dry-run: check access, print one line */
	int print_creds;                /* --print-credentials-source */
	int force_path_style;
	int no_sign;
	uint64_t part_size;
	uint64_t max_memory;
	int64_t metadata_ttl_ms;
	int64_t negative_ttl_ms;
	uint32_t uid, gid;
	uint32_t file_mode, dir_mode;
	int allow_other;
	int log_level;
	int log_level_set;              /* --log-level given */
	const char *log_file;
	int foreground;
	int debug;
	const char *ca_bundle;
	int64_t connect_timeout_ms;
	int64_t stall_timeout_ms;       /* --stall-timeout; 0: s3's default (30 s) */
	int no_verify_tls;              /* --no-verify-ssl */
	uint32_t max_retries;           /* --max-retries: attempts in all; 0: s3's default (10) */
	uint32_t max_connections;
	char *cache_dir;                /* absolute; NULL: no block cache */
	uint64_t cache_size;            /* 0: cache.h's rule */
	uint64_t block_size;
	int cache_clear;
	int no_bdi_readahead;
};

static const char help_text[] =
"NAME\n"
"    feedfs - mount an S3 bucket prefix as a read-only POSIX file system\n"
"\n"
"SYNOPSIS\n"
"    feedfs [OPTIONS] s3://BUCKET[/PREFIX/] MOUNTPOINT\n"
"    feedfs [OPTIONS] BUCKET[/PREFIX/] MOUNTPOINT\n"
"    feedfs [OPTIONS] oss://BUCKET[/PREFIX/] MOUNTPOINT    (Aliyun OSS)\n"
"    feedfs [OPTIONS] gs://BUCKET[/PREFIX/] MOUNTPOINT     (GCS, HMAC keys)\n"
"    feedfs --dry-run [OPTIONS] SOURCE\n"
"    feedfs --print-credentials-source [--profile NAME]\n"
"    feedfs warm [--jobs N] MOUNTPOINT/PATH...\n"
"\n"
"    Keys under PREFIX appear as files, '/' in keys as directories. The tree is\n"
"    read-only; every write answers EROFS. By default feedfs becomes a daemon\n"
"    and returns once the mount is ready (exit 0), or prints one line saying\n"
"    why it could not mount. Unmount with 'fusermount3 -u MOUNTPOINT', 'umount'\n"
"    or SIGTERM/SIGINT/SIGHUP to the daemon (SIGHUP not when it was started\n"
"    with SIGHUP ignored, as under nohup).\n"
"\n"
"OPTIONS\n"
"    --endpoint-url URL     S3 endpoint, any S3-compatible store (default:\n"
"                           $AWS_ENDPOINT_URL, else by scheme: s3://\n"
"                           https://s3.REGION.amazonaws.com, oss://\n"
"                           https://oss-REGION.aliyuncs.com, gs://\n"
"                           https://storage.googleapis.com). IPv6: http://[::1]:9000\n"
"    --region R             signing region (default: $AWS_REGION, else\n"
"                           $AWS_DEFAULT_REGION, else the profile's region, else\n"
"                           us-east-1, 'auto' for gs://); a wrong region is\n"
"                           corrected from the bucket's answer at mount time\n"
"    --force-path-style     address the bucket as ENDPOINT/BUCKET, not BUCKET.HOST\n"
"                           (automatic for IP/localhost endpoints and for dotted\n"
"                           bucket names over https)\n"
"    --internal             oss://: use oss-REGION-internal.aliyuncs.com (in-VPC)\n"
"    --list-v1              list with ListObjects V1 (marker) for stores without V2\n"
"    --no-sign-request      send unsigned requests (public buckets)\n"
"    --profile NAME         shared config/credentials profile (default:\n"
"                           $AWS_PROFILE, else default); see docs/CREDENTIALS.md\n"
"    --print-credentials-source  print which credential source won and where it\n"
"                           read from (never a secret), exit 0; 1 if none\n"
"    --dry-run              check credentials and access to SOURCE as a mount\n"
"                           would, print one line, exit 0 or 1; mounts nothing\n"
"    --part-size SIZE       bytes per ranged GET, 1MiB..256MiB (default 8MiB)\n"
"    --max-memory SIZE      memory for in-flight and readahead buffers and, with\n"
"                           --cache-dir, the cache's io buffers (80MiB at the\n"
"                           default); at least 4 x part size (default 512MiB);\n"
"                           readahead of all files stays within 64MiB per CPU\n"
"    --metadata-ttl SECONDS how long attributes, names and listings are trusted\n"
"                           (default 60); changes in the bucket show after it\n"
"    --negative-ttl SECONDS how long a missing name is remembered (default 5)\n"
"    --uid UID              owner of every file (default: the caller's uid)\n"
"    --gid GID              group of every file (default: the caller's gid)\n"
"    --file-mode MODE       permission bits of files, octal (default 0444)\n"
"    --dir-mode MODE        permission bits of directories, octal (default 0555)\n"
"    --allow-other          let other users access the mount (needs root or\n"
"                           user_allow_other in /etc/fuse.conf)\n"
"    --log-level LEVEL      error, warn, info or debug (default info)\n"
"    --log-file PATH        log to PATH (default: stderr in the foreground,\n"
"                           syslog as a daemon)\n"
"    --ca-bundle PATH       CA certificates for TLS (default: $AWS_CA_BUNDLE,\n"
"                           else the system's)\n"
"    --connect-timeout SECONDS  TCP/TLS connect timeout (default 10)\n"
"    --stall-timeout SECONDS    a transfer with no bytes for this long is\n"
"                           dropped and retried (default 30)\n"
"    --max-retries N        attempts per S3 request in all, 1..100 (default 10)\n"
"    --no-verify-ssl        do not check the server's TLS certificate: UNSAFE,\n"
"                           for test endpoints only (warns at start)\n"
"    --max-connections N    concurrent S3 requests, 1..1024 (default 32)\n"
"    --no-bdi-readahead     keep the kernel's readahead for the mount; by default,\n"
"                           as root, feedfs raises it (/sys/class/bdi/.../\n"
"                           read_ahead_kb) to the part size, at most 16MiB\n"
"\n"
"  Block cache (off unless --cache-dir is given):\n"
"    --cache-dir DIR        keep fetched blocks in DIR on local disk (created\n"
"                           0700); they survive restarts and are checked\n"
"                           (CRC32C) on every read. Other mounts of the\n"
"                           same bucket given the same DIR read through\n"
"                           the first one's cache.\n"
"    --cache-size SIZE      disk space for blocks (default: half of the free\n"
"                           space, after keeping 5% of the disk free)\n"
"    --block-size SIZE      cache block, a power of two from 1MiB to 16MiB\n"
"                           (default 4MiB); changing it starts the cache cold\n"
"    --cache-clear          drop every cached block at start\n"
"\n"
"  feedfs warm [--jobs N] PATH...  loads files and directories of a running\n"
"    mount into its cache ahead of a job, through the daemon (not the mount);\n"
"    prints progress; safe to interrupt. --jobs: files in parallel (default 4).\n"
"    -f, --foreground       stay in the foreground\n"
"    -d, --debug            print every FUSE request (implies -f)\n"
"    -h, --help             print this help and exit\n"
"    --version              print the version and exit\n"
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
"\n"
"EXIT STATUS\n"
"    0  mounted (the daemon keeps running), or a clean unmount in the foreground\n"
"    1  could not mount: bucket, credentials, endpoint or mount point (one line\n"
"       on stderr says which)\n"
"    2  bad command line\n";

enum {
	OPT_ENDPOINT = 256, OPT_REGION, OPT_PATH_STYLE, OPT_NO_SIGN, OPT_PART_SIZE,
	OPT_MAX_MEMORY, OPT_META_TTL, OPT_NEG_TTL, OPT_UID, OPT_GID, OPT_FILE_MODE,
	OPT_DIR_MODE, OPT_ALLOW_OTHER, OPT_LOG_LEVEL, OPT_LOG_FILE, OPT_VERSION,
	OPT_CA_BUNDLE, OPT_CONNECT_TIMEOUT, OPT_MAX_CONN, OPT_CACHE_DIR, OPT_CACHE_SIZE,
	OPT_BLOCK_SIZE, OPT_CACHE_CLEAR, OPT_NO_BDI_RA,
	OPT_PROFILE, OPT_PRINT_CREDS, OPT_DRY_RUN, OPT_INTERNAL, OPT_LIST_V1,
	OPT_STALL_TIMEOUT, OPT_NO_VERIFY_TLS, OPT_MAX_RETRIES,
};

static const struct option long_opts[] = {
	{ "endpoint-url", required_argument, NULL, OPT_ENDPOINT },
	{ "region", required_argument, NULL, OPT_REGION },
	{ "force-path-style", no_argument, NULL, OPT_PATH_STYLE },
	{ "no-sign-request", no_argument, NULL, OPT_NO_SIGN },
	{ "part-size", required_argument, NULL, OPT_PART_SIZE },
	{ "max-memory", required_argument, NULL, OPT_MAX_MEMORY },
	{ "metadata-ttl", required_argument, NULL, OPT_META_TTL },
	{ "negative-ttl", required_argument, NULL, OPT_NEG_TTL },
	{ "uid", required_argument, NULL, OPT_UID },
	{ "gid", required_argument, NULL, OPT_GID },
	{ "file-mode", required_argument, NULL, OPT_FILE_MODE },
	{ "dir-mode", required_argument, NULL, OPT_DIR_MODE },
	{ "allow-other", no_argument, NULL, OPT_ALLOW_OTHER },
	{ "log-level", required_argument, NULL, OPT_LOG_LEVEL },
	{ "log-file", required_argument, NULL, OPT_LOG_FILE },
	{ "foreground", no_argument, NULL, 'f' },
	{ "debug", no_argument, NULL, 'd' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "ca-bundle", required_argument, NULL, OPT_CA_BUNDLE },
	{ "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },
	{ "stall-timeout", required_argument, NULL, OPT_STALL_TIMEOUT },
	{ "no-verify-ssl", no_argument, NULL, OPT_NO_VERIFY_TLS },
	{ "max-retries", required_argument, NULL, OPT_MAX_RETRIES },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
	{ "cache-dir", required_argument, NULL, OPT_CACHE_DIR },
	{ "cache-size", required_argument, NULL, OPT_CACHE_SIZE },
	{ "block-size", required_argument, NULL, OPT_BLOCK_SIZE },
	{ "cache-clear", no_argument, NULL, OPT_CACHE_CLEAR },
	{ "no-bdi-readahead", no_argument, NULL, OPT_NO_BDI_RA },
	{ "profile", required_argument, NULL, OPT_PROFILE },
	{ "print-credentials-source", no_argument, NULL, OPT_PRINT_CREDS },
	{ "dry-run", no_argument, NULL, OPT_DRY_RUN },
	{ "internal", no_argument, NULL, OPT_INTERNAL },
	{ "list-v1", no_argument, NULL, OPT_LIST_V1 },
	{ NULL, 0, NULL, 0 },
};

static void __attribute__((noreturn, format(printf, 1, 2))) usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("feedfs: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (see feedfs --help)\n", stderr);
	exit(2);
}

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static uint64_t parse_size_opt(const char *name, const char *v)
{
	uint64_t out;

	if (util_parse_size(v, &out) < 0)
		usage_error("%s: '%s' is not a size (e.g. 8M, 512K, 1G)", name, v);
	return out;
}

static int64_t parse_seconds_opt(const char *name, const char *v)
{
	int64_t ms;

	if (util_parse_seconds_ms(v, &ms) < 0 || ms < 0)
		usage_error("%s: '%s' is not a number of seconds", name, v);
	return ms;
}

static uint32_t parse_u32_opt(const char *name, const char *v, int base)
{
	uint32_t out;

	if (util_parse_u32(v, base, &out) < 0)
		usage_error("%s: '%s' is not a%s number", name, v, base == 8 ? "n octal" : "");
	return out;
}

/* "s3://b/p", "oss://b/p", "gs://b/p", "b/p", "b" -> store, bucket, prefix ("" or
 * ending in '/'). */
static void parse_source(const char *src, struct options *o)
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
		usage_error("'%s': the source is s3://, oss:// or gs://BUCKET[/PREFIX] "
			    "(other stores: s3:// with --endpoint-url)", src);
	}
	slash = strchr(s, '/');
	o->bucket = slash ? strndup(s, (size_t)(slash - s)) : strdup(s);
	if (!o->bucket || !o->bucket[0])
		usage_error("'%s': no bucket name", src);
	s = slash ? slash + 1 : "";
	plen = strlen(s);
	o->prefix = malloc(plen + 2);
	if (!o->prefix)
		exit(1);
	memcpy(o->prefix, s, plen + 1);
	if (plen && s[plen - 1] != '/') {
		o->prefix[plen] = '/';
		o->prefix[plen + 1] = '\0';
	}
}

/* The block cache's io buffers come out of --max-memory: a sixth of it for
 * block buffers, at most the cache's default (64 MiB, reached at 384 MiB),
 * and a quarter of that again for piece buffers. */
static uint64_t cache_buffer_bytes(const struct options *o)
{
	uint64_t b = o->max_memory / 6;

	return b < CACHE_BUFFER_DEFAULT ? b : CACHE_BUFFER_DEFAULT;
}

/* Memory the block cache maps for its io buffers (0 without --cache-dir). */
static uint64_t io_reserve(const struct options *o)
{
	return o->cache_dir ? cache_io_bytes((uint32_t)o->block_size, cache_buffer_bytes(o)) : 0;
}

static void parse_args(int argc, char **argv, struct options *o)
{
	const char *region_env;
	int c, lvl;

	memset(o, 0, sizeof(*o));
	o->endpoint = env_nonempty("AWS_ENDPOINT_URL");
	region_env = env_nonempty("AWS_REGION");
	o->region = region_env ? region_env : env_nonempty("AWS_DEFAULT_REGION");
	o->ca_bundle = env_nonempty("AWS_CA_BUNDLE");
	o->part_size = 8 * MIB;
	o->max_memory = 512 * MIB;
	o->metadata_ttl_ms = 60 * 1000;
	o->negative_ttl_ms = 5 * 1000;
	o->uid = getuid();
	o->gid = getgid();
	o->file_mode = 0444;
	o->dir_mode = 0555;
	o->log_level = LOG_INFO;
	o->block_size = CACHE_BLOCK_DEFAULT;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":fdh", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_ENDPOINT: o->endpoint = optarg; break;
		case OPT_REGION: o->region = optarg; break;
		case OPT_PATH_STYLE: o->force_path_style = 1; break;
		case OPT_NO_SIGN: o->no_sign = 1; break;
		case OPT_PART_SIZE: o->part_size = parse_size_opt("--part-size", optarg); break;
		case OPT_MAX_MEMORY: o->max_memory = parse_size_opt("--max-memory", optarg); break;
		case OPT_META_TTL:
			o->metadata_ttl_ms = parse_seconds_opt("--metadata-ttl", optarg);
			break;
		case OPT_NEG_TTL:
			o->negative_ttl_ms = parse_seconds_opt("--negative-ttl", optarg);
			break;
		case OPT_UID: o->uid = parse_u32_opt("--uid", optarg, 10); break;
		case OPT_GID: o->gid = parse_u32_opt("--gid", optarg, 10); break;
		case OPT_FILE_MODE: o->file_mode = parse_u32_opt("--file-mode", optarg, 8); break;
		case OPT_DIR_MODE: o->dir_mode = parse_u32_opt("--dir-mode", optarg, 8); break;
		case OPT_ALLOW_OTHER: o->allow_other = 1; break;
		case OPT_LOG_LEVEL:
			lvl = log_level_parse(optarg);
			if (lvl < 0)
				usage_error("--log-level: '%s' is not one of error, warn, info, debug",
					    optarg);
			o->log_level = lvl;
			o->log_level_set = 1;
			break;
		case OPT_LOG_FILE: o->log_file = optarg; break;
		case 'f': o->foreground = 1; break;
		case 'd': o->debug = 1; o->foreground = 1; break;
		case 'h': fputs(help_text, stdout); exit(0);
		case OPT_VERSION:
			printf("feedfs %s (libfuse %d.%d)\n", FEEDFS_VERSION, FUSE_MAJOR_VERSION,
			       FUSE_MINOR_VERSION);
			exit(0);
		case OPT_CA_BUNDLE: o->ca_bundle = optarg; break;
		case OPT_CONNECT_TIMEOUT:
			o->connect_timeout_ms = parse_seconds_opt("--connect-timeout", optarg);
			if (o->connect_timeout_ms == 0 || o->connect_timeout_ms > INT32_MAX)
				usage_error("--connect-timeout: '%s' is out of range", optarg);
			break;
		case OPT_NO_VERIFY_TLS: o->no_verify_tls = 1; break;
		case OPT_MAX_RETRIES:
			o->max_retries = parse_u32_opt("--max-retries", optarg, 10);
			if (o->max_retries < 1 || o->max_retries > 100)
				usage_error("--max-retries: '%s' is not in 1..100", optarg);
			break;
		case OPT_STALL_TIMEOUT:
			o->stall_timeout_ms = parse_seconds_opt("--stall-timeout", optarg);
			if (o->stall_timeout_ms < 1000 || o->stall_timeout_ms > INT32_MAX)
				usage_error("--stall-timeout: '%s' is not in 1..2147483 seconds", optarg);
			break;
		case OPT_MAX_CONN:
			o->max_connections = parse_u32_opt("--max-connections", optarg, 10);
			if (o->max_connections < 1 || o->max_connections > 1024)
				usage_error("--max-connections: '%s' is not in 1..1024", optarg);
			break;
		case OPT_CACHE_DIR:
			if (!optarg[0])
				usage_error("--cache-dir: empty path");
			free(o->cache_dir);
			if (optarg[0] == '/') {
				o->cache_dir = strdup(optarg);
			} else {
				/* The daemon changes to "/": keep the dir where the user meant. */
				char *cwd = realpath(".", NULL);

				if (!cwd)
					usage_error("--cache-dir: cannot resolve '%s'", optarg);
				o->cache_dir = xasprintf("%s/%s", cwd, optarg);
				free(cwd);
			}
			break;
		case OPT_CACHE_SIZE: o->cache_size = parse_size_opt("--cache-size", optarg); break;
		case OPT_BLOCK_SIZE: o->block_size = parse_size_opt("--block-size", optarg); break;
		case OPT_CACHE_CLEAR: o->cache_clear = 1; break;
		case OPT_NO_BDI_RA: o->no_bdi_readahead = 1; break;
		case OPT_PROFILE:
			if (!optarg[0])
				usage_error("--profile: empty name");
			o->profile = optarg;
			break;
		case OPT_PRINT_CREDS: o->print_creds = 1; break;
		case OPT_DRY_RUN: o->dry_run = 1; break;
		case OPT_INTERNAL: o->oss_internal = 1; break;
		case OPT_LIST_V1: o->list_v1 = 1; break;
		case ':':
			usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt && optopt < 256)
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (!o->region && creds_profile_region(o->profile, o->profile_region,
					       sizeof(o->profile_region)))
		o->region = o->profile_region;
	if (o->print_creds) {
		/* Needs no source; one may be given (its scheme is not used). */
		if (argc - optind > 2)
			usage_error("unexpected argument '%s'", argv[optind + 2]);
		if (argc - optind >= 1)
			parse_source(argv[optind], o);
		return;
	}
	if (o->dry_run) {
		if (argc - optind < 1)
			usage_error("--dry-run: expected s3://BUCKET[/PREFIX/]");
		if (argc - optind > 2)
			usage_error("unexpected argument '%s'", argv[optind + 2]);
	} else {
		if (argc - optind < 2)
			usage_error("expected s3://BUCKET[/PREFIX/] and MOUNTPOINT");
		if (argc - optind > 2)
			usage_error("unexpected argument '%s'", argv[optind + 2]);
	}
	parse_source(argv[optind], o);
	o->mountpoint = argc - optind >= 2 ? argv[optind + 1] : NULL;
	if (o->oss_internal && o->store != S3_STORE_OSS)
		usage_error("--internal applies to oss:// sources only");
	if (o->store == S3_STORE_OSS && !o->region && !o->endpoint)
		usage_error("oss://: give the bucket's region (--region cn-hangzhou) or "
			    "--endpoint-url");

	if (o->part_size < MIB || o->part_size > 256 * MIB)
		usage_error("--part-size must be between 1MiB and 256MiB");
	if (o->max_memory < 4 * o->part_size)
		usage_error("--max-memory must be at least 4 x --part-size (%llu MiB)",
			    (unsigned long long)(4 * o->part_size / MIB));
	if (o->file_mode > 07777 || o->dir_mode > 07777)
		usage_error("--file-mode/--dir-mode take permission bits (at most 07777)");
	if (o->block_size < MIB || o->block_size > 16 * MIB || (o->block_size & (o->block_size - 1)))
		usage_error("--block-size must be a power of two between 1MiB and 16MiB");
	if (!o->cache_dir && (o->cache_size || o->cache_clear))
		usage_error("--cache-size and --cache-clear need --cache-dir");
	/* The cache's io buffers come out of --max-memory, so that the bound holds
	 * with the cache on too (readahead gets the rest). */
	if (o->cache_dir && o->max_memory < 4 * o->part_size + io_reserve(o))
		usage_error("with --cache-dir, --max-memory must be at least 4 x --part-size "
			    "+ %llu MiB of cache io buffers (%llu MiB)",
			    (unsigned long long)(io_reserve(o) / MIB),
			    (unsigned long long)((4 * o->part_size + io_reserve(o)) / MIB));
	if (o->endpoint && strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
		usage_error("--endpoint-url: '%s' must start with http:// or https://", o->endpoint);
}

struct warm_view {
	struct s3_client *s3;
	const char *prefix;
	size_t prefix_len;
};

/* cache_resolve_fn for `feedfs warm`: a mount-relative path -> its object, by
 * HEAD (the listing the kernel saw may be older; the cache keys by ETag, so
 * warming the current version is what a later open will read). */
static int warm_resolve(void *arg, const char *path, size_t path_len, char **key,
			size_t *key_len, char *etag, size_t etag_len, uint64_t *size)
{
	const struct warm_view *v = arg;
	struct s3_object obj;
	char *k;
	int e;

	if (path_len == 0 || path[0] == '/' || memchr(path, '\0', path_len))
		return -EINVAL;
	k = malloc(v->prefix_len + path_len + 1);
	if (!k)
		return -ENOMEM;
	memcpy(k, v->prefix, v->prefix_len);
	memcpy(k + v->prefix_len, path, path_len);
	k[v->prefix_len + path_len] = '\0';
	memset(&obj, 0, sizeof(obj));
	e = s3_head(v->s3, k, v->prefix_len + path_len, &obj);
	if (e < 0) {
		free(k);
		return e;
	}
	snprintf(etag, etag_len, "%s", obj.etag);
	*size = obj.size;
	s3_object_cleanup(&obj);
	*key = k;
	*key_len = v->prefix_len + path_len;
	return 0;
}

/* The kernel lets a FUSE daemon only lower the readahead at INIT, so raising it
 * must happen after INIT has been answered: this thread's stat of the mount
 * root waits for that (the loop answers it), then sets the BDI's read_ahead_kb.
 * Best effort: a failure is logged, never fatal. */
struct bdi_job {
	char path[PATH_MAX];
	unsigned kb;
};

static void *bdi_main(void *arg)
{
	struct bdi_job *j = arg;
	char sys[128], val[32];
	struct stat st;
	int fd, n;

	if (stat(j->path, &st) < 0) {
		log_warn(TAG, "read_ahead_kb not set: stat %s: %s", j->path, strerror(errno));
		free(j);
		return NULL;
	}
	snprintf(sys, sizeof(sys), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	n = snprintf(val, sizeof(val), "%u\n", j->kb);
	fd = open(sys, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, val, (size_t)n) != n)
		log_warn(TAG, "cannot set %s to %u: %s", sys, j->kb, strerror(errno));
	else
		log_info(TAG, "kernel readahead of the mount: %s = %u", sys, j->kb);
	if (fd >= 0)
		close(fd);
	free(j);
	return NULL;
}

static char *mount_options(const struct options *o)
{
	char *fsname_raw = xasprintf("feedfs:%s/%s", o->bucket, o->prefix);
	char *fsname = mount_opt_escape(fsname_raw);
	char *s;

	if (!fsname)
		exit(1);
	s = xasprintf("ro,default_permissions,noatime,fsname=%s,subtype=feedfs,"
		      "max_read=1048576%s", fsname, o->allow_other ? ",allow_other" : "");
	free(fsname);
	free(fsname_raw);
	return s;
}

struct running {
	struct creds_chain *creds;
	struct s3_client *s3;
	struct stack stack;             /* the read path's fetchers: cache, attach, ahead */
	struct cache_warm *warm;
	struct rd_budget *budget;
	struct fs *fs;
	struct fuse_session *se;
	int mounted, handlers;
	pthread_t bdi_thread;
	int bdi_started;
};

static void log_io_stats(struct running *r)
{
	struct s3_stats s;

	if (r->s3) {
		s3_client_stats(r->s3, &s);
		log_info("s3", "requests %llu, gets %llu, heads %llu, lists %llu, retries %llu, "
			 "errors %llu, cancelled %llu, bytes in %llu", (unsigned long long)s.requests,
			 (unsigned long long)s.gets, (unsigned long long)s.heads,
			 (unsigned long long)s.lists, (unsigned long long)s.retries,
			 (unsigned long long)s.errors, (unsigned long long)s.cancelled,
			 (unsigned long long)s.bytes_in);
	}
	if (r->stack.cache) {
		struct cache_stats c;

		cache_get_stats(r->stack.cache, &c);
		log_info("cache", "hits %llu, misses %llu, coalesced %llu, bypass %llu, "
			 "inner fetches %llu, bytes from disk %llu, from s3 %llu, written %llu, "
			 "checksum failures %llu, io errors %llu, evictions %llu, "
			 "write skipped %llu, pieces %llu, records %llu, cached mib %llu, pages %llu",
			 (unsigned long long)c.hits, (unsigned long long)c.misses,
			 (unsigned long long)c.coalesced, (unsigned long long)c.bypass,
			 (unsigned long long)c.inner_fetches,
			 (unsigned long long)c.bytes_from_disk,
			 (unsigned long long)c.bytes_from_inner,
			 (unsigned long long)c.bytes_written,
			 (unsigned long long)c.checksum_failures,
			 (unsigned long long)c.io_errors, (unsigned long long)c.evictions,
			 (unsigned long long)c.write_skipped, (unsigned long long)c.pieces,
			 (unsigned long long)c.blocks_used,
			 (unsigned long long)(c.bytes_used / MIB), (unsigned long long)c.pages);
	}
	if (r->stack.attach) {
		struct attach_stats a;

		attach_get_stats(r->stack.attach, &a);
		log_info("attach", "reads through the owner's cache %llu (%llu bytes), sent to S3 "
			 "instead %llu, cancelled %llu", (unsigned long long)a.reads,
			 (unsigned long long)a.bytes, (unsigned long long)a.fallbacks,
			 (unsigned long long)a.cancelled);
	}
	if (r->stack.ahead) {
		struct rd_ahead_stats a;

		rd_ahead_get_stats(r->stack.ahead, &a);
		log_info("ahead", "files wanted %llu, fetched %llu, served %llu (joined in flight "
			 "%llu), dropped unused %llu, failed %llu, skipped %llu",
			 (unsigned long long)a.wanted, (unsigned long long)a.issued,
			 (unsigned long long)(a.hits + a.joined), (unsigned long long)a.joined,
			 (unsigned long long)a.dropped, (unsigned long long)a.failed,
			 (unsigned long long)a.skipped);
	}
}

static void teardown(struct running *r)
{
	if (r->handlers)
		fuse_remove_signal_handlers(r->se);
	if (r->mounted)
		fuse_session_unmount(r->se);
	if (r->bdi_started)
		pthread_join(r->bdi_thread, NULL);
	if (r->se)
		fuse_session_destroy(r->se);
	/* Warming fetches through the cache, the cache through s3: stop them in
	 * that order, each after the last user of it. */
	cache_warm_stop(r->warm);
	if (r->fs) {
		fs_close_open_files(r->fs);
		fs_log_stats(r->fs);
		fs_destroy(r->fs);
	}
	log_io_stats(r);
	stack_destroy(&r->stack);           /* after its users, before s3 (its bottom) */
	if (r->s3)
		s3_client_destroy(r->s3);
	if (r->budget)
		rd_budget_destroy(r->budget);
	if (r->creds)
		creds_chain_destroy(r->creds);
}

/* Report a start-up failure once: on stderr in the foreground, else through
 * the pipe to the waiting parent (which prints it). Also logged. */
static int fail(int notify_fd, struct running *r, const char *line)
{
	log_err(TAG, "%s", line);
	if (notify_fd >= 0)
		mount_daemon_ready(notify_fd, line);
	else
		fprintf(stderr, "feedfs: %s\n", line);
	teardown(r);
	log_close();
	return 1;
}

static int run(struct options *o, int notify_fd)
{
	struct running r;
	struct creds_options copts;
	struct s3_config scfg;
	struct fs_options fopts;
	struct rd_config rcfg;
	struct stack_config scfg_stack;
	char share_id[1024];
	size_t share_len = 0;
	struct cache_config ccfg;
	struct fuse_loop_config *lcfg;
	struct warm_view warm_view;
	char msg[PATH_MAX + 512], *mopts;
	enum log_sink sink;
	/* Readahead gets what --max-memory leaves after the cache's io buffers. */
	uint64_t ra_budget = o->max_memory - io_reserve(o);
	int e;

	memset(&r, 0, sizeof(r));
	/* Credentials live in this process: no core dumps of it, and no ptrace by
	 * other processes of the same user (docs/SECURITY.md). */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* Read buffers are megabytes each and come and go all the time. Served
	 * by mmap (glibc's default above its threshold) every one costs a page
	 * fault per 4 KiB, which on a VM was half the daemon's CPU on a cold
	 * sequential read. Keep them in one arena that is not trimmed: freed
	 * buffers are reused, and the arena never outgrows the --max-memory peak
	 * by more than fragmentation. Before any thread starts. */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	sink = o->log_file ? LOG_SINK_FILE : o->foreground ? LOG_SINK_STDERR : LOG_SINK_SYSLOG;
	e = log_init(sink, o->log_file, o->log_level);
	if (e < 0) {
		snprintf(msg, sizeof(msg), "--log-file %s: %s", o->log_file, strerror(-e));
		return fail(notify_fd, &r, msg);
	}

	log_debug(TAG, "core dumps off: PR_GET_DUMPABLE is %d", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
	memset(&copts, 0, sizeof(copts));
	copts.anonymous = o->no_sign;
	copts.region = o->region;
	copts.profile = o->profile;
	msg[0] = '\0';
	e = creds_chain_new(&copts, &r.creds, msg, sizeof(msg));
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, sizeof(msg), "no credentials: %s", strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	log_info(TAG, "feedfs %s: bucket '%s' prefix '%s' endpoint %s region %s "
		 "credentials from %s, mount point %s", FEEDFS_VERSION, o->bucket, o->prefix,
		 o->endpoint ? o->endpoint : "(store default)", o->region ? o->region : "(default)",
		 creds_chain_source(r.creds), o->dry_run ? "(none: --dry-run)" : o->mount_abs);

	memset(&scfg, 0, sizeof(scfg));
	scfg.endpoint_url = o->endpoint;
	scfg.region = o->region;
	scfg.bucket = o->bucket;
	scfg.force_path_style = o->force_path_style;
	scfg.store = o->store;
	scfg.oss_internal = o->oss_internal;
	scfg.list_v1 = o->list_v1;
	scfg.creds = r.creds;
	scfg.ca_bundle = o->ca_bundle;
	scfg.connect_timeout_ms = (int)o->connect_timeout_ms;
	scfg.stall_timeout_ms = (int)o->stall_timeout_ms;
	scfg.no_verify_tls = o->no_verify_tls;
	scfg.max_retries = (int)o->max_retries;
	if (o->no_verify_tls) {
		log_warn(TAG, "WARNING: --no-verify-ssl: TLS certificates are NOT checked; "
			 "anyone on the network path can read and alter the data");
		if (!o->foreground || o->log_file)
			fprintf(stderr, "feedfs: WARNING: --no-verify-ssl: TLS certificates are "
				"NOT checked (unsafe)\n");
	}
	scfg.max_connections = (int)o->max_connections;
	e = s3_client_new(&scfg, &r.s3);
	if (e < 0) {
		snprintf(msg, sizeof(msg), "cannot start the S3 client: %s", strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	msg[0] = '\0';
	e = s3_check_access(r.s3, o->prefix, msg, sizeof(msg));
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, sizeof(msg), "cannot list s3://%s/%s: %s", o->bucket,
				 o->prefix, strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	if (o->dry_run) {
		/* Everything a mount checks before touching the mount point. */
		char cdesc[512];

		creds_chain_describe(r.creds, cdesc, sizeof(cdesc));
		printf("ok: bucket '%s' prefix '%s' at %s (region %s) is readable; "
		       "credentials %s\n", o->bucket, o->prefix, s3_client_endpoint(r.s3),
		       s3_client_region(r.s3), cdesc);
		fflush(stdout);
		teardown(&r);
		log_close();
		return 0;
	}

	e = rd_budget_new(ra_budget, &r.budget);
	if (e < 0) {
		snprintf(msg, sizeof(msg), "memory budget: %s", strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	if (o->cache_dir) {
		memset(&ccfg, 0, sizeof(ccfg));
		ccfg.dir = o->cache_dir;
		ccfg.size_bytes = o->cache_size;
		ccfg.block_size = (uint32_t)o->block_size;
		ccfg.bucket = o->bucket;
		ccfg.clear = o->cache_clear;
		ccfg.buffer_bytes = cache_buffer_bytes(o);
	}
	share_len = (size_t)snprintf(share_id, sizeof(share_id), "%s\n%s", o->bucket,
				      s3_client_endpoint(r.s3));
	if (share_len >= sizeof(share_id))
		share_len = sizeof(share_id) - 1;
	memset(&scfg_stack, 0, sizeof(scfg_stack));
	scfg_stack.s3 = r.s3;
	scfg_stack.budget = r.budget;
	scfg_stack.part_size = o->part_size;
	scfg_stack.cache = o->cache_dir ? &ccfg : NULL;
	scfg_stack.share_id = share_id;
	scfg_stack.share_id_len = share_len;
	e = stack_build(&scfg_stack, &r.stack, msg, sizeof(msg));
	if (e < 0)
		return fail(notify_fd, &r, msg);
	rcfg = r.stack.rd;
	rcfg.budget = r.budget;
	rcfg.part_size = o->part_size;
	if (r.stack.attach) {
		log_info(TAG, "%s: attached, reads go through its cache (blocks of %u KiB)%s", msg,
			 attach_block_size(r.stack.attach) >> 10,
			 o->cache_size ? "; --cache-size is the owner's to set" : "");
	} else if (r.stack.cache) {
		struct cache_stats cs;

		cache_get_stats(r.stack.cache, &cs);
		log_info(TAG, "block cache %s: %llu pages of %u KiB (%llu MiB), %llu in use%s%s; "
			 "io buffers %llu MiB of --max-memory, readahead budget %llu MiB",
			 o->cache_dir, (unsigned long long)cs.pages, cs.block_size >> 10,
			 (unsigned long long)(cs.pages * cs.block_size / MIB),
			 (unsigned long long)cs.blocks_used,
			 cs.direct_io ? ", O_DIRECT" : "",
			 cs.recovered_unclean ? ", recovered after a crash" : "",
			 (unsigned long long)(io_reserve(o) / MIB),
			 (unsigned long long)(ra_budget / MIB));
	}
	{
		/* Readahead of all streams together: 64 MiB per CPU, at most the
		 * budget. Bytes fetched far ahead of the reader are copied to
		 * the kernel long after they were written, from memory rather
		 * than cache, and the first touch of every buffer faults: on a
		 * 2-CPU machine 4 cold streams read 1.17x faster with 0.62x the
		 * CPU per GiB at 128 MiB than at 432 (bench/ab.py, figures in
		 * BENCHMARKS.md). Demand reads may still use the whole budget. */
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		uint64_t ahead = (uint64_t)(ncpu > 0 ? ncpu : 1) * 64 * MIB;

		rcfg.max_ahead = ahead < ra_budget ? ahead : ra_budget;
		rcfg.max_window = 64 * MIB < rcfg.max_ahead / 4 ? 64 * MIB : rcfg.max_ahead / 4;
		log_info(TAG, "readahead: up to %llu MiB per stream, %llu MiB for all "
			 "streams together (%ld CPUs), of a %llu MiB budget",
			 (unsigned long long)(rcfg.max_window / MIB),
			 (unsigned long long)(rcfg.max_ahead / MIB), ncpu,
			 (unsigned long long)(ra_budget / MIB));
	}
	memset(&fopts, 0, sizeof(fopts));
	fopts.prefix = o->prefix;
	fopts.uid = o->uid;
	fopts.gid = o->gid;
	fopts.file_mode = o->file_mode;
	fopts.dir_mode = o->dir_mode;
	fopts.metadata_ttl_ms = o->metadata_ttl_ms;
	fopts.negative_ttl_ms = o->negative_ttl_ms;
	fopts.ahead = r.stack.ahead;
	r.fs = fs_new(&fopts, r.s3, &rcfg);
	if (!r.fs)
		return fail(notify_fd, &r, "out of memory");

	mopts = mount_options(o);
	{
		char *argv[] = { "feedfs", "-o", mopts, o->debug ? "-d" : NULL, NULL };
		struct fuse_args args = FUSE_ARGS_INIT(o->debug ? 4 : 3, argv);

		r.se = fuse_session_new(&args, fs_lowlevel_ops(), sizeof(struct fuse_lowlevel_ops),
					r.fs);
		fuse_opt_free_args(&args);
	}
	free(mopts);
	if (!r.se)
		return fail(notify_fd, &r, "cannot create the FUSE session (see the log)");
	fs_set_session(r.fs, r.se);
	/* libfuse installs its exit handlers only where a signal still has its
	 * default action. A background job of a non-interactive shell (a CI
	 * script's `feedfs ... &`) starts with SIGINT ignored and would then
	 * ignore the SIGINT that --help says unmounts. SIGHUP keeps an inherited
	 * "ignore": that is what nohup asks for. */
	{
		struct sigaction dfl;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGTERM, &dfl, NULL);
	}
	if (fuse_set_signal_handlers(r.se) < 0)
		return fail(notify_fd, &r, "cannot install signal handlers");
	r.handlers = 1;
	if (fuse_session_mount(r.se, o->mount_abs) < 0) {
		snprintf(msg, sizeof(msg), "cannot mount on %s (is /dev/fuse usable? "
			 "is fusermount3 installed?)", o->mount_abs);
		return fail(notify_fd, &r, msg);
	}
	r.mounted = 1;
	log_info(TAG, "mounted s3://%s/%s on %s", o->bucket, o->prefix, o->mount_abs);
	if (r.stack.cached) {
		/* Warming an attached mount fills the owner's cache. */
		warm_view.s3 = r.s3;
		warm_view.prefix = o->prefix;
		warm_view.prefix_len = strlen(o->prefix);
		msg[0] = '\0';
		e = cache_warm_start(r.stack.cached, r.stack.cached_block, o->mount_abs,
				     warm_resolve, &warm_view, &r.warm, msg, sizeof(msg));
		if (e < 0)   /* warming is a convenience: mount without it */
			log_warn(TAG, "feedfs warm will not work on this mount: %s", msg);
	}
	mount_daemon_ready(notify_fd, NULL);

	lcfg = fuse_loop_cfg_create();
	if (!lcfg)
		return fail(-1, &r, "out of memory");
	if (!o->no_bdi_readahead && geteuid() == 0) {
		struct bdi_job *j = calloc(1, sizeof(*j));
		uint64_t kb = o->part_size / 1024;

		if (j) {
			snprintf(j->path, sizeof(j->path), "%s", o->mount_abs);
			j->kb = (unsigned)(kb < 1024 ? 1024 : kb > 16384 ? 16384 : kb);
			if (pthread_create(&r.bdi_thread, NULL, bdi_main, j) == 0)
				r.bdi_started = 1;
			else
				free(j);
		}
	}
	/* Reads block on S3: enough workers for a DataLoader's parallel readers. */
	fuse_loop_cfg_set_max_threads(lcfg, 64);
	fuse_loop_cfg_set_idle_threads(lcfg, 16);
	e = fuse_session_loop_mt(r.se, lcfg);
	fuse_loop_cfg_destroy(lcfg);
	log_info(TAG, "unmounting %s (loop ended: %d)", o->mount_abs, e);
	teardown(&r);
	log_close();
	return 0;
}

/* `feedfs --print-credentials-source`: run the chain once, print one line. */
static int print_credentials_source(const struct options *o)
{
	struct creds_options copts;
	struct creds_chain *chain = NULL;
	char msg[2048];
	int e;

	log_init(o->log_file ? LOG_SINK_FILE : LOG_SINK_STDERR, o->log_file,
		 o->log_file ? o->log_level : LOG_WARNING);
	memset(&copts, 0, sizeof(copts));
	copts.anonymous = o->no_sign;
	copts.region = o->region;
	copts.profile = o->profile;
	msg[0] = '\0';
	e = creds_chain_new(&copts, &chain, msg, sizeof(msg));
	if (e < 0) {
		fprintf(stderr, "feedfs: %s\n", msg[0] ? msg : strerror(-e));
		free(o->bucket);
		free(o->prefix);
		log_close();
		return 1;
	}
	creds_chain_describe(chain, msg, sizeof(msg));
	printf("%s\n", msg);
	creds_chain_destroy(chain);
	free(o->bucket);
	free(o->prefix);
	log_close();
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	char msg[PATH_MAX + 256], *log_abs = NULL;
	int notify_fd = -1, e;

	if (argc >= 2 && strcmp(argv[1], "warm") == 0)
		return cache_warm_main(argc - 1, argv + 1);
	parse_args(argc, argv, &o);
	if (o.print_creds)
		return print_credentials_source(&o);
	if (o.dry_run) {
		/* Foreground, nothing mounted: the one line goes to stdout (ok) or
		 * stderr (why not); log lines only from warnings up, unless asked. */
		o.foreground = 1;
		if (!o.log_file && !o.log_level_set)
			o.log_level = LOG_WARNING;
		e = run(&o, -1);
		free(o.bucket);
		free(o.prefix);
		free(o.cache_dir);
		return e;
	}
	if (mount_check_point(o.mountpoint, o.mount_abs, sizeof(o.mount_abs), msg,
			      sizeof(msg)) < 0) {
		fprintf(stderr, "feedfs: %s\n", msg);
		free(o.bucket);
		free(o.prefix);
		return 1;
	}
	if (o.log_file && o.log_file[0] != '/') {
		/* The daemon changes to "/": keep the file where the user meant. */
		char *abs = realpath(".", NULL);

		if (abs) {
			log_abs = xasprintf("%s/%s", abs, o.log_file);
			o.log_file = log_abs;
			free(abs);
		}
	}
	if (!o.foreground) {
		e = mount_daemon_start(&notify_fd);
		if (e < 0) {
			fprintf(stderr, "feedfs: fork: %s\n", strerror(-e));
			return 1;
		}
	}
	e = run(&o, notify_fd);
	free(log_abs);
	free(o.bucket);
	free(o.prefix);
	free(o.cache_dir);
	return e;
}
