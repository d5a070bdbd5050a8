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
#include <getopt.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/creds.h"
#include "feedfs/fs.h"
#include "feedfs/log.h"
#include "feedfs/mount.h"
#include "feedfs/prefetch.h"
#include "feedfs/s3.h"
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
	const char *region;
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
	const char *log_file;
	int foreground;
	int debug;
	const char *ca_bundle;
	int64_t connect_timeout_ms;
	uint32_t max_connections;
};

static const char help_text[] =
"NAME\n"
"    feedfs - mount an S3 bucket prefix as a read-only POSIX file system\n"
"\n"
"SYNOPSIS\n"
"    feedfs [OPTIONS] s3://BUCKET[/PREFIX/] MOUNTPOINT\n"
"    feedfs [OPTIONS] BUCKET[/PREFIX/] MOUNTPOINT\n"
"\n"
"    Keys under PREFIX appear as files, '/' in keys as directories. The tree is\n"
"    read-only; every write answers EROFS. By default feedfs becomes a daemon\n"
"    and returns once the mount is ready (exit 0), or prints one line saying\n"
"    why it could not mount. Unmount with 'fusermount3 -u MOUNTPOINT', 'umount'\n"
"    or SIGTERM/SIGINT/SIGHUP to the daemon.\n"
"\n"
"OPTIONS\n"
"    --endpoint-url URL     S3 endpoint (default: $AWS_ENDPOINT_URL, else\n"
"                           https://s3.REGION.amazonaws.com)\n"
"    --region R             signing region (default: $AWS_REGION, else\n"
"                           $AWS_DEFAULT_REGION, else us-east-1)\n"
"    --force-path-style     address the bucket as ENDPOINT/BUCKET, not BUCKET.HOST\n"
"    --no-sign-request      send unsigned requests (public buckets)\n"
"    --part-size SIZE       bytes per ranged GET, 1MiB..256MiB (default 8MiB)\n"
"    --max-memory SIZE      budget for in-flight and readahead buffers, at least\n"
"                           4 x part size (default 512MiB)\n"
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
"    --max-connections N    concurrent S3 requests, 1..1024 (default 32)\n"
"    -f, --foreground       stay in the foreground\n"
"    -d, --debug            print every FUSE request (implies -f)\n"
"    -h, --help             print this help and exit\n"
"    --version              print the version and exit\n"
"\n"
"    SIZE takes K, M, G suffixes (powers of 1024): 8M, 512KiB, 1G.\n"
"\n"
"ENVIRONMENT\n"
"    AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN\n"
"                           credentials (unless --no-sign-request)\n"
"    AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION, AWS_CA_BUNDLE\n"
"                           defaults for the options above\n"
"\n"
"EXAMPLES\n"
"    feedfs s3://datasets/imagenet/ /mnt/imagenet\n"
"    feedfs --endpoint-url http://127.0.0.1:4568 --force-path-style \\\n"
"           mybucket /mnt/b --metadata-ttl 3600\n"
"    feedfs --no-sign-request s3://public-bucket/ /mnt/pub -f --log-level debug\n"
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
	OPT_CA_BUNDLE, OPT_CONNECT_TIMEOUT, OPT_MAX_CONN,
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
	{ "max-connections", required_argument, NULL, OPT_MAX_CONN },
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

/* "s3://b/p", "b/p", "b" -> bucket, prefix ("" or ending in '/'). */
static void parse_source(const char *src, struct options *o)
{
	const char *s = src, *slash;
	size_t plen;

	if (strncmp(s, "s3://", 5) == 0)
		s += 5;
	else if (strstr(s, "://"))
		usage_error("'%s': only s3:// URLs are supported", src);
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

static void parse_args(int argc, char **argv, struct options *o)
{
	const char *region_env;
	int c, lvl;

	memset(o, 0, sizeof(*o));
	o->endpoint = env_nonempty("AWS_ENDPOINT_URL");
	region_env = env_nonempty("AWS_REGION");
	o->region = region_env ? region_env : env_nonempty("AWS_DEFAULT_REGION");
	if (!o->region)
		o->region = "us-east-1";
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
		case OPT_MAX_CONN:
			o->max_connections = parse_u32_opt("--max-connections", optarg, 10);
			if (o->max_connections < 1 || o->max_connections > 1024)
				usage_error("--max-connections: '%s' is not in 1..1024", optarg);
			break;
		case ':':
			usage_error("option '%s' needs a value", argv[optind - 1]);
		default:
			if (optopt && optopt < 256)
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	if (argc - optind < 2)
		usage_error("expected s3://BUCKET[/PREFIX/] and MOUNTPOINT");
	if (argc - optind > 2)
		usage_error("unexpected argument '%s'", argv[optind + 2]);
	parse_source(argv[optind], o);
	o->mountpoint = argv[optind + 1];

	if (o->part_size < MIB || o->part_size > 256 * MIB)
		usage_error("--part-size must be between 1MiB and 256MiB");
	if (o->max_memory < 4 * o->part_size)
		usage_error("--max-memory must be at least 4 x --part-size (%llu MiB)",
			    (unsigned long long)(4 * o->part_size / MIB));
	if (o->file_mode > 07777 || o->dir_mode > 07777)
		usage_error("--file-mode/--dir-mode take permission bits (at most 07777)");
	if (o->endpoint && strncmp(o->endpoint, "http://", 7) && strncmp(o->endpoint, "https://", 8))
		usage_error("--endpoint-url: '%s' must start with http:// or https://", o->endpoint);
}

/* rd_fetch_fn over the S3 client. */
static int fetch_s3(void *arg, const char *key, size_t key_len, const char *if_match,
		    uint64_t off, size_t len, void *buf, rd_fetch_done_fn done, void *done_arg)
{
	return s3_get_async(arg, key, key_len, if_match, off, len, buf, done, done_arg);
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
	struct rd_budget *budget;
	struct fs *fs;
	struct fuse_session *se;
	int mounted, handlers;
};

static void teardown(struct running *r)
{
	if (r->handlers)
		fuse_remove_signal_handlers(r->se);
	if (r->mounted)
		fuse_session_unmount(r->se);
	if (r->se)
		fuse_session_destroy(r->se);
	if (r->fs) {
		fs_log_stats(r->fs);
		fs_destroy(r->fs);
	}
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
	struct fuse_loop_config *lcfg;
	char msg[PATH_MAX + 512], *mopts;
	enum log_sink sink;
	int e;

	memset(&r, 0, sizeof(r));
	sink = o->log_file ? LOG_SINK_FILE : o->foreground ? LOG_SINK_STDERR : LOG_SINK_SYSLOG;
	e = log_init(sink, o->log_file, o->log_level);
	if (e < 0) {
		snprintf(msg, sizeof(msg), "--log-file %s: %s", o->log_file, strerror(-e));
		return fail(notify_fd, &r, msg);
	}

	memset(&copts, 0, sizeof(copts));
	copts.anonymous = o->no_sign;
	copts.region = o->region;
	msg[0] = '\0';
	e = creds_chain_new(&copts, &r.creds, msg, sizeof(msg));
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, sizeof(msg), "no credentials: %s", strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	log_info(TAG, "feedfs %s: bucket '%s' prefix '%s' endpoint %s region %s "
		 "credentials from %s, mount point %s", FEEDFS_VERSION, o->bucket, o->prefix,
		 o->endpoint ? o->endpoint : "(AWS default)", o->region,
		 creds_chain_source(r.creds), o->mount_abs);

	memset(&scfg, 0, sizeof(scfg));
	scfg.endpoint_url = o->endpoint;
	scfg.region = o->region;
	scfg.bucket = o->bucket;
	scfg.force_path_style = o->force_path_style;
	scfg.creds = r.creds;
	scfg.ca_bundle = o->ca_bundle;
	scfg.connect_timeout_ms = (int)o->connect_timeout_ms;
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

	e = rd_budget_new(o->max_memory, &r.budget);
	if (e < 0) {
		snprintf(msg, sizeof(msg), "memory budget: %s", strerror(-e));
		return fail(notify_fd, &r, msg);
	}
	memset(&rcfg, 0, sizeof(rcfg));
	rcfg.fetch = fetch_s3;
	rcfg.fetch_arg = r.s3;
	rcfg.budget = r.budget;
	rcfg.part_size = o->part_size;
	rcfg.max_window = 64 * MIB < o->max_memory / 4 ? 64 * MIB : o->max_memory / 4;

	memset(&fopts, 0, sizeof(fopts));
	fopts.prefix = o->prefix;
	fopts.uid = o->uid;
	fopts.gid = o->gid;
	fopts.file_mode = o->file_mode;
	fopts.dir_mode = o->dir_mode;
	fopts.metadata_ttl_ms = o->metadata_ttl_ms;
	fopts.negative_ttl_ms = o->negative_ttl_ms;
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
	mount_daemon_ready(notify_fd, NULL);

	lcfg = fuse_loop_cfg_create();
	if (!lcfg)
		return fail(-1, &r, "out of memory");
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

int main(int argc, char **argv)
{
	struct options o;
	char msg[PATH_MAX + 256], *log_abs = NULL;
	int notify_fd = -1, e;

	parse_args(argc, argv, &o);
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
	return e;
}
