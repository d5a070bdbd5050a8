/*
 * options — the command line of the daemon: one table of options (name, value,
 * help text, how the value is stored and checked), the parser over it, and the
 * --help text written from the same table, so that an option, its check and its
 * help cannot drift apart.
 *
 * options_parse never prints and never exits: the caller (main.c) prints
 * "feedfs: MSG (see feedfs --help)" and exits 2, which keeps the parser
 * testable and fuzzable. Environment defaults (AWS_ENDPOINT_URL, AWS_REGION,
 * AWS_DEFAULT_REGION, AWS_CA_BUNDLE, the profile's region) are read at parse.
 * String fields point into argv or the environment unless noted as owned;
 * owned ones are freed by options_free.
 */
#ifndef FEEDFS_OPTIONS_H
#define FEEDFS_OPTIONS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "feedfs/s3.h"

#define FEEDFS_VERSION "0.1.0"

struct options {
	char *bucket;                   /* owned */
	char *prefix;                   /* owned; "" or ends with '/' */
	const char *mountpoint;
	char mount_abs[PATH_MAX];       /* filled by main.c (mount_check_point) */
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
	uint64_t max_memory;            /* default: cgroup_memory_budget() under a limit */
	uint64_t cgroup_memory_limit;   /* the cgroup's memory limit at parse; 0: none */
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
	uint32_t hedge_budget_pct;      /* --hedge-budget: extra requests for hedges, %; 0 off */
	uint32_t max_connections;
	char *cache_dir;                /* owned; absolute; NULL: no block cache */
	uint64_t cache_size;            /* 0: cache.h's rule */
	uint64_t block_size;
	int cache_clear;
	int no_bdi_readahead;
	int passthrough_off;            /* --passthrough=off (promote.h, fs/passthrough.c) */
	int fuse_uring;                 /* --fuse-uring: FS_URING_OFF/AUTO/ON (fs/uring.c) */
	int no_keeper;              /* --no-keeper: no restart survival (keep.h) */
	char *metrics_host;             /* owned; --metrics-addr's host: an IPv4 literal,
					 * "localhost" or an IPv6 literal without its
					 * brackets; NULL: no metrics endpoint */
	uint16_t metrics_port;          /* 1..65535 when metrics_host is set */
	char *snapshot;                 /* owned; absolute (or a URL); --snapshot: names
					 * from this file (snap.h), never a LIST; NULL: listed */
	char *sources;                  /* owned; absolute; --sources FILE (sources.h):
					 * then bucket and prefix are NULL */
};

/* What options_parse returns besides 0 and -errno. */
#define OPTIONS_HELP     1          /* -h/--help: print options_help, exit 0 */
#define OPTIONS_VERSION  2          /* --version: print options_version, exit 0 */

/* Fill o from argv (getopt_long; argv may be permuted). Returns 0, OPTIONS_HELP,
 * OPTIONS_VERSION, -EINVAL with one user-facing line in msg (no "feedfs: "
 * prefix, no newline), or -ENOMEM. Call options_free after any return. May be
 * called any number of times in one process (getopt is reset each time). */
int options_parse(int argc, char **argv, struct options *o, char *msg, size_t msg_len);

/* Free what options_parse allocated; o stays safe to free again. */
void options_free(struct options *o);

/* The --help text, built from the option table, and the --version line. */
void options_help(FILE *out);
void options_version(FILE *out);

/* The long name of option i of the table ("cache-dir", no dashes), NULL past
 * the end: for tests that keep docs/feedfs.1 and --help complete. */
const char *options_long_name(size_t i);

/* Apply one option by its long name ("region"; value NULL for a flag) to o,
 * as the command line would: 0, or -EINVAL with one line in msg (-ENOENT:
 * no such option). For the sources file (sources.h). */
int options_set(struct options *o, const char *long_name, const char *value, char *msg,
		size_t msg_len);
/* Set o's source from url (s3://, oss://, gs://BUCKET[/PREFIX/]) and run the
 * checks a mount's options get: 0, or -EINVAL with one line in msg. */
int options_set_source(struct options *o, const char *url, char *msg, size_t msg_len);

/* Whether --long_name exists: 1 when it takes a value, 0 when it is a flag,
 * -ENOENT when there is no such option (mount.feedfs maps fstab options with
 * it, so that a name feedfs does not know fails before anything runs). */
int options_lookup(const char *long_name);

#endif
