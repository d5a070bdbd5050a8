/*
 * daemon — one mount's life (include/feedfs/daemon.h).
 *
 * DESIGN
 * daemon_run builds one struct running in stages, each a function that
 * returns 0 or -errno with the user-facing line in msg:
 *   process_setup   no core dumps, malloc tuning, the log sink
 *   start_s3        the credential chain, the S3 client, the access check
 *   build_read_path the memory budget, the block cache (own or attached),
 *                   the readahead caps, readahead across files: rd_config
 *   start_session   the fs, loader-order prefetch over it, the FUSE
 *                   session, its signal handlers
 *   mount_fs        the control socket (stats, warm, order, /metrics), mount,
 *                   "ready" to the parent
 *   run_loop        the INIT (saved or replayed under a keeper), the
 *                   kernel readahead, the multi-threaded loop
 * Any failure takes the one unwind path, fail(): report the line once,
 * teardown() what was built, in reverse order. Threads (s3's http thread,
 * creds' refresher, the cache's ring) start here only, after the fork.
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "feedfs/attach.h"
#include "feedfs/cache.h"
#include "feedfs/creds.h"
#include "feedfs/ctl.h"
#include "feedfs/daemon.h"
#include "feedfs/fs.h"
#include "feedfs/gpu.h"
#include "feedfs/heap.h"
#include "feedfs/hint.h"
#include "feedfs/keep.h"
#include "feedfs/log.h"
#include "feedfs/mount.h"
#include "feedfs/notify.h"
#include "feedfs/options.h"
#include "feedfs/prefetch.h"
#include "feedfs/promote.h"
#include "feedfs/route.h"
#include "feedfs/s3.h"
#include "feedfs/snap.h"
#include "feedfs/sources.h"
#include "feedfs/stack.h"
#include "feedfs/stats.h"
#include "feedfs/util.h"

#define TAG "main"
#define MIB (1ULL << 20)

struct warm_view {
	struct s3_client *s3;
	const char *prefix;
	size_t prefix_len;
};

/* ctl_resolve_fn for `feedfs warm`: a mount-relative path -> its object, by
 * HEAD (the listing the kernel saw may be older; the cache keys by ETag, so
 * warming the current version is what a later open will read). */
static int warm_resolve(void *arg, const char *path, size_t path_len, char **key,
			size_t *key_len, char *etag, size_t etag_len, uint64_t *size)
{
	const struct warm_view *v = arg;
	struct s3_object obj;
	char *k;
	size_t klen;
	int e;

	e = fs_key_for_path(v->prefix, v->prefix_len, path, path_len, &k, &klen);
	if (e < 0)
		return e;
	memset(&obj, 0, sizeof(obj));
	e = s3_head(v->s3, k, klen, &obj);
	if (e < 0) {
		free(k);
		return e;
	}
	snprintf(etag, etag_len, "%s", obj.etag);
	*size = obj.size;
	s3_object_cleanup(&obj);
	*key = k;
	*key_len = klen;
	return 0;
}

/* The kernel lets a FUSE daemon only lower the readahead at INIT, so raising
 * it must happen once INIT has been answered: run_loop answers it before the
 * loop starts, then sets the BDI's read_ahead_kb, found from mountinfo (a
 * stat of the mount would wait for the loop). As root; best effort: a
 * failure is logged, never fatal. */
static void set_bdi_readahead(const struct options *o)
{
	uint64_t kb = o->part_size / 1024;
	unsigned ma, mi, v = (unsigned)(kb < 1024 ? 1024 : kb > 16384 ? 16384 : kb);
	char sys[128], val[32];
	int fd, n, e;

	if (o->no_bdi_readahead || geteuid() != 0)
		return;
	e = mount_dev(o->mount_abs, &ma, &mi);
	if (e < 0) {
		log_warn(TAG, "read_ahead_kb not set: %s not in mountinfo", o->mount_abs);
		return;
	}
	snprintf(sys, sizeof(sys), "/sys/class/bdi/%u:%u/read_ahead_kb", ma, mi);
	n = snprintf(val, sizeof(val), "%u\n", v);
	fd = open(sys, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, val, (size_t)n) != n)
		log_warn(TAG, "cannot set %s to %u: %s", sys, v, strerror(errno));
	else
		log_info(TAG, "kernel readahead of the mount: %s = %u", sys, v);
	if (fd >= 0)
		close(fd);
}

static char *mount_options(const struct options *o)
{
	char *fsname_raw = xasprintf("feedfs:%s/%s", o->bucket, o->prefix);
	char *fsname = mount_opt_escape(fsname_raw);
	char *s;

	if (!fsname) {
		free(fsname_raw);
		return NULL;
	}
	s = xasprintf("ro,default_permissions,noatime,fsname=%s,subtype=feedfs,"
		      "max_read=1048576%s", fsname, o->allow_other ? ",allow_other" : "");
	free(fsname);
	free(fsname_raw);
	return s;
}

/* One source of --sources: what start_s3 made for it, and its read path. */
struct source_run {
	struct creds_chain *creds;
	struct s3_client *s3;
	struct snap *snap;
	struct stack stack;             /* s3 -> across-file readahead (no cache) */
	struct s3_fetcher s3f;          /* with --cache-dir: under the route (route.h) */
	struct rd_config rd;
	struct fs_source fsrc;          /* what the fs gets */
};

struct running {
	struct source_spec *specs;      /* --sources: n_src of them; else NULL */
	struct source_run *srcs;
	size_t n_src;
	struct stats_group s3_sum;      /* --sources: the s3 group summed over them */
	struct route *route;            /* --sources with --cache-dir: the stack's bottom */
	struct creds_chain *creds;
	struct s3_client *s3;
	struct stack stack;             /* the read path's fetchers: cache, attach, ahead */
	struct ctl_warm *warm;
	struct rd_budget *budget;
	struct fs *fs;
	struct hint *hint;              /* loader-order prefetch (the O verb) */
	const struct keep_env *ke;      /* under a keeper: what it handed over; else NULL */
	struct keep *keep;              /* the region the keeper's servers share */
	struct gpu *gpu;                /* the device-feed path (ioctls, the D verb) */
	struct promote *promote;        /* promoted files for passthrough; NULL: none */
	struct snap *snap;              /* --snapshot: the mapped file; NULL: listed */
	struct fuse_session *se;
	struct ctl *ctl;                /* the control socket, /metrics */
	struct stats_reg reg;           /* what ctl and the unmount log read */
	struct stats_mount smount;
	int mounted, handlers;
};

/* A successor's session sits on the inherited descriptor (/dev/fd/N), so
 * libfuse does not know the mount point: unmount it here, lazily as libfuse
 * does (fusermount3 for a user). */
static void unmount_taken_over(struct running *r)
{
	const char *mnt = r->ke->mount_abs;

	if (umount2(mnt, MNT_DETACH) == 0 || errno == EINVAL || errno == ENOENT)
		return;             /* unmounted now, or already (fusermount3 -u) */
	if (errno == EPERM) {
		pid_t pid = fork();

		if (pid == 0) {
			execlp("fusermount3", "fusermount3", "-u", "-z", "--", mnt, (char *)NULL);
			_exit(127);
		}
		if (pid > 0 && waitpid(pid, NULL, 0) == pid)
			return;
	}
	log_warn(TAG, "cannot unmount %s: %s", mnt, strerror(errno));
}

/* The connection is gone (fs_session_on_end): requests of ours waiting on
 * the store are answered to no one; end them instead of their retries. */
static void quiesce_all(struct running *r);

static void session_ended(void *r)
{
	log_info(TAG, "the mount is gone: requests still out to the store are ended");
	quiesce_all(r);
}

/* Every client of the mount: no more requests (s3_client_quiesce). */
static void quiesce_all(struct running *r)
{
	if (!r->srcs) {
		if (r->s3)
			s3_client_quiesce(r->s3);
		return;
	}
	for (size_t i = 0; i < r->n_src; i++)
		if (r->srcs[i].s3)
			s3_client_quiesce(r->srcs[i].s3);
}

/* --sources: each source's read path, client, snapshot and credentials, in
 * the order teardown() frees a single source's. */
static void sources_teardown(struct running *r)
{
	for (size_t i = 0; r->srcs && i < r->n_src; i++) {
		struct source_run *s = &r->srcs[i];

		stack_destroy(&s->stack);
		snap_close(s->snap);
		if (s->s3)
			s3_client_destroy(s->s3);
		if (s->creds)
			creds_chain_destroy(s->creds);
	}
	if (r->srcs) {
		r->s3 = NULL;       /* source 0's, destroyed above */
		r->creds = NULL;
		r->snap = NULL;
	}
	free(r->srcs);
	r->srcs = NULL;
	route_destroy(r->route);
	r->route = NULL;
	sources_free(r->specs, r->n_src);
	r->specs = NULL;
}

static void teardown(struct running *r)
{
	if (r->handlers)
		fuse_remove_signal_handlers(r->se);
	if (r->mounted == 2)
		unmount_taken_over(r);
	else if (r->mounted)
		fuse_session_unmount(r->se);
	fs_uring_stop();                    /* the unmount ended every ring entry */
	/* Nothing asks the store for anything any more: end what is still out
	 * (readahead GETs backing off against a store that went away would
	 * otherwise keep the process up for their last retry, a minute). */
	if (r->mounted)
		quiesce_all(r);
	/* Warming fetches through the cache, the cache through s3: stop them in
	 * that order, each after the last user of it (ctl_stop ends warming). */
	ctl_stop(r->ctl);
	ctl_warm_free(r->warm);
	fs_stop(r->fs);                     /* the reaper notifies the session */
	if (r->se)
		fuse_session_destroy(r->se);
	if (r->fs)
		fs_close_open_handles(r->fs);
	stats_log(&r->reg);
	/* No ioctl (the session is gone) nor channel (ctl is) can reach it. */
	gpu_destroy(r->gpu);
	/* No open or O request is left to tell it anything; it resolves through
	 * the fs and fetches through ahead (in the stack): before both. */
	hint_destroy(r->hint);
	if (r->fs)
		fs_destroy(r->fs);
	snap_close(r->snap);                /* after the fs, its reader */
	promote_destroy(r->promote);        /* after the fs (its user), before the cache */
	stack_destroy(&r->stack);           /* after its users, before s3 (its bottom) */
	sources_teardown(r);                /* after the fs and the cache; r->s3 was source 0's */
	if (r->s3)
		s3_client_destroy(r->s3);
	if (r->budget)
		rd_budget_destroy(r->budget);
	if (r->creds)
		creds_chain_destroy(r->creds);
	keep_close(r->keep);
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

/* No core dumps, malloc tuned for the read path, the log sink. Before any
 * thread starts. */
static int process_setup(const struct options *o, char *msg, size_t msg_len)
{
	enum log_sink sink;
	int e;

	/* Credentials live in this process: no core dumps of it, and no ptrace by
	 * other processes of the same user (docs/SECURITY.md). */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	/* Read buffers are megabytes each and come and go all the time. Served
	 * by mmap (glibc's default above its threshold) every one costs a page
	 * fault per 4 KiB, which on a VM was half the daemon's CPU on a cold
	 * sequential read. Keep them in one arena that is not trimmed: freed
	 * buffers are reused, and the arena never outgrows the --max-memory peak
	 * by more than fragmentation. The ctl ticker gives free pages back every
	 * few seconds instead (heap.h), so resident memory follows what is in
	 * use. Before any thread starts. */
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	sink = o->log_file ? LOG_SINK_FILE : o->foreground ? LOG_SINK_STDERR : LOG_SINK_SYSLOG;
	e = log_init(sink, o->log_file, o->log_level);
	if (e < 0) {
		snprintf(msg, msg_len, "--log-file %s: %s", o->log_file, strerror(-e));
		return e;
	}
	log_debug(TAG, "core dumps off: PR_GET_DUMPABLE is %d", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
	return 0;
}

static void s3_config_from(const struct options *o, struct creds_chain *creds,
			   struct s3_config *scfg)
{
	memset(scfg, 0, sizeof(*scfg));
	scfg->endpoint_url = o->endpoint;
	scfg->region = o->region;
	scfg->bucket = o->bucket;
	scfg->force_path_style = o->force_path_style;
	scfg->store = o->store;
	scfg->oss_internal = o->oss_internal;
	scfg->list_v1 = o->list_v1;
	scfg->creds = creds;
	scfg->ca_bundle = o->ca_bundle;
	scfg->connect_timeout_ms = (int)o->connect_timeout_ms;
	scfg->stall_timeout_ms = (int)o->stall_timeout_ms;
	scfg->no_verify_tls = o->no_verify_tls;
	scfg->max_retries = (int)o->max_retries;
	scfg->hedge_budget_pct = (int)o->hedge_budget_pct;
	scfg->max_connections = (int)o->max_connections;
}

const char *daemon_store_scheme(const struct options *o)
{
	return o->store == S3_STORE_OSS ? "oss" : o->store == S3_STORE_GCS ? "gs" : "s3";
}

int daemon_open_store(const struct options *o, struct creds_chain **creds,
		      struct s3_client **s3, char *msg, size_t msg_len)
{
	struct creds_options copts;
	struct s3_config scfg;
	int e;

	memset(&copts, 0, sizeof(copts));
	copts.anonymous = o->no_sign;
	copts.region = o->region;
	copts.profile = o->profile;
	msg[0] = '\0';
	e = creds_chain_new(&copts, creds, msg, msg_len);
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, msg_len, "no credentials: %s", strerror(-e));
		return e;
	}
	s3_config_from(o, *creds, &scfg);
	e = s3_client_new(&scfg, s3);
	if (e < 0) {
		snprintf(msg, msg_len, "cannot start the S3 client: %s", strerror(-e));
		creds_chain_destroy(*creds);
		*creds = NULL;
		return e;
	}
	return 0;
}

#define SNAP_FETCH_CHUNK (64u << 20)

/* GET [off, off + len) of key into fd at off, in SNAP_FETCH_CHUNK pieces. */
static ssize_t fetch_range(struct s3_client *c, const char *key, int fd, uint64_t off,
			   uint64_t len)
{
	char *buf = malloc(len < SNAP_FETCH_CHUNK ? (size_t)len : SNAP_FETCH_CHUNK);
	ssize_t n = buf ? 0 : -ENOMEM;

	while (buf && len) {
		size_t k = len < SNAP_FETCH_CHUNK ? (size_t)len : SNAP_FETCH_CHUNK;

		n = s3_get(c, key, strlen(key), NULL, off, k, buf);
		if (n < 0)
			break;
		if (pwrite(fd, buf, k, (off_t)off) != (ssize_t)k) {
			n = -errno;
			break;
		}
		off += k;
		len -= k;
	}
	free(buf);
	return n < 0 ? n : 0;
}

/*
 * --snapshot SCHEME://BUCKET/KEY: fetch it through the source's store (its
 * endpoint, region and credentials; a client of its own for BUCKET) into an
 * unlinked file under --cache-dir or $TMPDIR, and map that: a first GET of
 * the header says the length, then GETs of at most 64 MiB (one for a
 * snapshot of up to ~2.5M keys). *path gets the file's name (unlinked by the
 * caller once mapped). One line in msg on failure.
 */
static int fetch_snapshot(const struct options *o, struct running *r, char **path,
			  char *msg, size_t msg_len)
{
	const char *url = strstr(o->snapshot, "://") + 3, *slash = strchr(url, '/');
	const char *dir = o->cache_dir ? o->cache_dir : util_getenv_nonempty("TMPDIR");
	char *bucket = xstrndup(url, (size_t)(slash - url)), hdr[SNAP_HEADER_LEN];
	struct s3_config scfg;
	struct s3_client *c = NULL;
	uint64_t len = 0;
	ssize_t n;
	int fd = -1, e;

	s3_config_from(o, r->creds, &scfg);
	scfg.bucket = bucket;
	*path = xasprintf("%s/feedfs-snapshot.XXXXXX", dir ? dir : "/tmp");
	e = s3_client_new(&scfg, &c);
	n = e < 0 ? e : s3_get(c, slash + 1, strlen(slash + 1), NULL, 0, sizeof(hdr), hdr);
	if (n >= 0 && (e = snap_file_length(hdr, sizeof(hdr), &len)) < 0) {
		snprintf(msg, msg_len, "snapshot %s: %s", o->snapshot, e == -EPROTO
			 ? "another format version (see feedfs snapshot --print)"
			 : "not a feedfs snapshot");
		goto out;
	}
	if (n >= 0 && (fd = mkstemp(*path)) < 0)
		n = -errno;
	if (n >= 0 && (pwrite(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)))
		n = -errno;
	if (n >= 0)
		n = fetch_range(c, slash + 1, fd, sizeof(hdr), len - sizeof(hdr));
	e = n < 0 ? (int)n : 0;
	if (e < 0)
		snprintf(msg, msg_len, "cannot fetch the snapshot %s: %s", o->snapshot,
			 strerror(-e));
out:
	if (fd >= 0)
		close(fd);
	if (e < 0 && fd >= 0)
		unlink(*path);
	if (c)
		s3_client_destroy(c);
	free(bucket);
	return e;
}

/*
 * --snapshot: map and check the file (snap.h), fetched first when it is a
 * URL, and that it describes SOURCE (scheme, bucket and prefix). One line in
 * msg on failure.
 */
static int open_snapshot(const struct options *o, struct running *r, char *msg,
			 size_t msg_len)
{
	const struct snap_meta *m;
	char *fetched = NULL;
	int e;

	if (strstr(o->snapshot, "://")) {
		e = fetch_snapshot(o, r, &fetched, msg, msg_len);
		if (e == 0) {
			e = snap_open(fetched, 0, &r->snap, msg, msg_len);
			unlink(fetched);        /* the mapping keeps it */
			if (e < 0) {        /* name the URL, not the temporary file */
				char why[512];
				const char *colon = strstr(msg, ": ");

				snprintf(why, sizeof(why), "%s", colon ? colon + 2 : strerror(-e));
				snprintf(msg, msg_len, "snapshot %s: %s", o->snapshot, why);
			}
		}
		free(fetched);
	} else {
		e = snap_open(o->snapshot, 0, &r->snap, msg, msg_len);
	}
	if (e < 0)
		return e;
	m = snap_meta(r->snap);
	if (strcmp(m->store, daemon_store_scheme(o)) || strcmp(m->bucket, o->bucket) ||
	    strcmp(m->prefix, o->prefix)) {
		snprintf(msg, msg_len, "snapshot %s describes %s://%s/%s, not %s://%s/%s",
			 o->snapshot, m->store, m->bucket, m->prefix, daemon_store_scheme(o),
			 o->bucket, o->prefix);
		return -EINVAL;
	}
	log_info(TAG, "snapshot %s: %llu keys of %s://%s/%s, %llu bytes mapped", o->snapshot,
		 (unsigned long long)snap_count(r->snap), m->store, m->bucket, m->prefix,
		 (unsigned long long)snap_bytes(r->snap));
	return 0;
}

/*
 * A snapshot mount's access check, without a LIST: the first bytes (at
 * most 4 KiB) of the first object of 2 bytes or more, pinned to its ETag
 * (a one-byte range, bytes=0-0, is one s3rver answers wrongly). Credentials,
 * bucket and endpoint are then known good. An object changed since the snapshot (-ESTALE) does not
 * stop the mount (its reads will fail, the others are right): it is logged.
 * An empty snapshot checks nothing.
 */
static int snap_check_access(const struct options *o, struct running *r, char *msg,
			     size_t msg_len)
{
	struct snap_cursor c;
	struct snap_entry e;
	char *key, head[4096];
	ssize_t n;

	snap_seek(&c, r->snap, NULL, 0);
	do {
		if (snap_next(&c, &e) != 1)
			return 0;
	} while (e.size < 2);
	key = xasprintf("%s%.*s", o->prefix, (int)e.key_len, e.key);
	n = s3_get(r->s3, key, strlen(key), e.etag, 0,
		   e.size < sizeof(head) ? (size_t)e.size : sizeof(head), head);
	if (n == -ESTALE) {
		log_warn(TAG, "s3://%s/%s changed since the snapshot: its reads answer ESTALE",
			 o->bucket, key);
		n = 1;
	}
	if (n < 0)
		snprintf(msg, msg_len, "cannot read s3://%s/%s (the snapshot's first object): %s",
			 o->bucket, key, strerror((int)-n));
	free(key);
	return n < 0 ? (int)n : 0;
}

/* The credential chain, the S3 client, and the check that SOURCE is readable. */
static int start_s3(const struct options *o, struct running *r, char *msg, size_t msg_len)
{
	int e;

	if (o->no_verify_tls) {
		log_warn(TAG, "WARNING: --no-verify-ssl: TLS certificates are NOT checked; "
			 "anyone on the network path can read and alter the data");
		if (!o->foreground || o->log_file)
			fprintf(stderr, "feedfs: WARNING: --no-verify-ssl: TLS certificates are "
				"NOT checked (unsafe)\n");
	}
	e = daemon_open_store(o, &r->creds, &r->s3, msg, msg_len);
	if (e < 0)
		return e;
	log_info(TAG, "feedfs %s: bucket '%s' prefix '%s' endpoint %s region %s "
		 "credentials from %s, mount point %s", FEEDFS_VERSION, o->bucket, o->prefix,
		 o->endpoint ? o->endpoint : "(store default)", o->region ? o->region : "(default)",
		 creds_chain_source(r->creds), o->dry_run ? "(none: --dry-run)" : o->mount_abs);
	msg[0] = '\0';
	if (o->snapshot) {
		e = open_snapshot(o, r, msg, msg_len);
		return e < 0 ? e : snap_check_access(o, r, msg, msg_len);
	}
	e = s3_check_access(r->s3, o->prefix, msg, msg_len);
	if (e < 0) {
		if (!msg[0])
			snprintf(msg, msg_len, "cannot list s3://%s/%s: %s", o->bucket,
				 o->prefix, strerror(-e));
		return e;
	}
	return 0;
}

/*
 * --sources: each source's store, checked as a single mount's (start_s3:
 * credentials, client, LIST or snapshot check), in file order; the first
 * failure is the line, naming the source and its line. r->s3 is source 0's
 * (the counters and the control socket's view); the mount is labelled
 * "sources" where a bucket would be named.
 */
static int start_sources(struct options *o, struct running *r, char *msg, size_t msg_len)
{
	char why[1024];
	int e;

	e = sources_load(o->sources, o, &r->specs, &r->n_src, msg, msg_len);
	if (e < 0)
		return e;
	r->srcs = calloc(r->n_src, sizeof(*r->srcs));
	if (!r->srcs)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_src; i++) {
		struct source_spec *sp = &r->specs[i];
		struct running one;

		memset(&one, 0, sizeof(one));
		why[0] = '\0';
		/* For its log line: where it shows (cut if the path is that long). */
		if ((size_t)snprintf(sp->o.mount_abs, sizeof(sp->o.mount_abs), "%.*s/%s",
				     PATH_MAX - 258, o->mount_abs, sp->name) >= sizeof(sp->o.mount_abs))
			sp->o.mount_abs[0] = '\0';
		sp->o.dry_run = o->dry_run;
		e = start_s3(&sp->o, &one, why, sizeof(why));
		r->srcs[i].creds = one.creds;
		r->srcs[i].s3 = one.s3;
		r->srcs[i].snap = one.snap;
		if (e < 0) {
			snprintf(msg, msg_len, "source %s (%.*s:%d): %s", sp->name, 1024, o->sources,
				 sp->line, why[0] ? why : strerror(-e));
			return e;
		}
	}
	r->s3 = r->srcs[0].s3;
	free(o->bucket);
	free(o->prefix);
	o->bucket = xstrdup("sources");
	o->prefix = xstrdup("");
	return 0;
}

/* --sources with --cache-dir: one read path for all, over a route (route.h)
 * to each source's client; the stack is built over it as for one source. */
static int sources_route(struct running *r)
{
	const char **names = calloc(r->n_src, sizeof(*names));
	struct fetcher **inner = calloc(r->n_src, sizeof(*inner));
	int e = names && inner ? 0 : -ENOMEM;

	for (size_t i = 0; e == 0 && i < r->n_src; i++) {
		s3_fetcher_init(&r->srcs[i].s3f, r->srcs[i].s3);
		names[i] = r->specs[i].name;
		inner[i] = &r->srcs[i].s3f.base;
	}
	if (e == 0)
		e = route_new(names, inner, r->n_src, &r->route);
	free(names);
	free(inner);
	return e;
}

/* --sources: a read path per source, all in one budget (no block cache). */
static int sources_read_path(const struct options *o, struct running *r, uint64_t ra_budget,
			     long ncpu, char *msg, size_t msg_len)
{
	for (size_t i = 0; i < r->n_src; i++) {
		struct source_run *s = &r->srcs[i];
		struct stack_config scfg;
		int e;

		memset(&scfg, 0, sizeof(scfg));
		scfg.s3 = s->s3;
		scfg.budget = r->budget;
		scfg.part_size = o->part_size;
		e = stack_build(&scfg, &s->stack, msg, msg_len);
		if (e < 0)
			return e;
		s->rd = s->stack.rd;
		s->rd.budget = r->budget;
		s->rd.part_size = o->part_size;
		rd_config_set_caps(&s->rd, ncpu, ra_budget);
		s->fsrc = (struct fs_source){ .name = r->specs[i].name,
					      .prefix = r->specs[i].o.prefix, .s3 = s->s3,
					      .snap = s->snap, .rd = &s->rd };
	}
	return 0;
}

/* --dry-run: everything a mount checks before touching the mount point. */
static void dry_run_report(const struct options *o, struct running *r)
{
	char cdesc[512];

	if (r->srcs) {
		for (size_t i = 0; i < r->n_src; i++) {
			const struct options *so = &r->specs[i].o;

			creds_chain_describe(r->srcs[i].creds, cdesc, sizeof(cdesc));
			printf("ok: source %s: bucket '%s' prefix '%s' at %s (region %s) is "
			       "readable; credentials %s\n", r->specs[i].name, so->bucket, so->prefix,
			       s3_client_endpoint(r->srcs[i].s3), s3_client_region(r->srcs[i].s3),
			       cdesc);
		}
		fflush(stdout);
		return;
	}

	creds_chain_describe(r->creds, cdesc, sizeof(cdesc));
	printf("ok: bucket '%s' prefix '%s' at %s (region %s) is readable; "
	       "credentials %s\n", o->bucket, o->prefix, s3_client_endpoint(r->s3),
	       s3_client_region(r->s3), cdesc);
	fflush(stdout);
}

/* Memory the block cache maps for its io buffers (0 without --cache-dir). */
static uint64_t io_reserve(const struct options *o)
{
	return o->cache_dir ? cache_io_reserve((uint32_t)o->block_size, o->max_memory) : 0;
}

/* The metadata share of --max-memory (listings and nodes, src/fs/reap.c):
 * an eighth, at least 4 MiB. 256 MiB gives 32 MiB: ~450,000 listed entries
 * of short names, or ~200,000 nodes the kernel holds. */
static uint64_t metadata_share(const struct options *o)
{
	uint64_t m = o->max_memory / 8;

	return m < 4 * MIB ? 4 * MIB : m;
}

/* Readahead gets what the cache's io buffers and the metadata share leave of
 * --max-memory, but never less than the 4 parts a stream needs (options.c
 * checks that --max-memory covers them and the io buffers): on a mount that
 * small the metadata share comes on top. */
static uint64_t readahead_budget(const struct options *o)
{
	uint64_t floor = 4 * o->part_size, rest = o->max_memory - io_reserve(o);

	return rest >= floor + metadata_share(o) ? rest - metadata_share(o)
						 : (rest > floor ? rest : floor);
}

/*
 * The read path under fs: budget, then S3, or the block cache over S3 (our
 * own, or another mount's that we attach to), then readahead across files on
 * top. Fills rcfg for fs_new.
 */

/* --passthrough=on with a cache dir: what the INIT reply asks for and the fs
 * tracks, the same in every server of a keeper (promoted files may still be
 * missing: then nothing new is passed through). */
static int passthrough_on(const struct options *o)
{
	return !o->passthrough_off && o->cache_dir;
}

/*
 * Promoted files for FUSE passthrough (promote.h): a quarter of the cache's
 * capacity, beside the slab in the cache dir. Wiped after an unclean stop
 * (a file renamed in before its data reached the disk could read back as
 * zeros) and with --cache-clear. Without it (an error is logged) reads go
 * the normal way.
 */
static void start_promote(const struct options *o, struct running *r,
			  const struct cache_stats *cs)
{
	struct promote_config pc;
	int e;

	memset(&pc, 0, sizeof(pc));
	pc.cache_dir = o->cache_dir;
	pc.bucket = o->bucket;
	pc.max_bytes = cs->pages * cs->block_size / 4;
	pc.cache = r->stack.cache;
	pc.chunk = cs->block_size;
	pc.clear = o->cache_clear || cs->recovered_unclean;
	e = promote_new(&pc, &r->promote);
	if (e < 0) {
		log_warn(TAG, "no promoted files in %s/" PROMOTE_DIR " (%s): reads are not "
			 "passed through", o->cache_dir, strerror(-e));
		r->promote = NULL;
		return;
	}
	log_info(TAG, "passthrough: up to %llu MiB of promoted files in %s/" PROMOTE_DIR "%s",
		 (unsigned long long)(pc.max_bytes / MIB), o->cache_dir,
		 pc.clear ? " (emptied)" : "");
}

static int build_read_path(const struct options *o, struct running *r, struct rd_config *rcfg,
			   char *msg, size_t msg_len)
{
	char share_id[1024];
	size_t share_len;
	struct cache_config ccfg;
	struct stack_config scfg;
	uint64_t ra_budget = readahead_budget(o);
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int e;

	e = rd_budget_new(ra_budget, &r->budget);
	if (e < 0) {
		snprintf(msg, msg_len, "memory budget: %s", strerror(-e));
		return e;
	}
	if (r->srcs && o->cache_dir) {
		e = sources_route(r);
		if (e < 0) {
			snprintf(msg, msg_len, "out of memory");
			return e;
		}
	} else if (r->srcs) {
		e = sources_read_path(o, r, ra_budget, ncpu, msg, msg_len);
		if (e < 0)
			return e;
		*rcfg = r->srcs[0].rd;
		log_info(TAG, "%zu sources, readahead budget %llu MiB", r->n_src,
			 (unsigned long long)(ra_budget / MIB));
		return 0;
	}
	if (o->cache_dir) {
		memset(&ccfg, 0, sizeof(ccfg));
		ccfg.dir = o->cache_dir;
		ccfg.size_bytes = o->cache_size;
		ccfg.block_size = (uint32_t)o->block_size;
		ccfg.bucket = o->bucket;
		ccfg.clear = o->cache_clear;
		ccfg.buffer_bytes = cache_buffer_share(o->max_memory);
	}
	/* Who may share our cache dir: mounts of the same bucket and endpoint. */
	share_len = (size_t)snprintf(share_id, sizeof(share_id), "%s\n%s", o->bucket,
				     r->srcs ? o->sources : s3_client_endpoint(r->s3));
	if (share_len >= sizeof(share_id))
		share_len = sizeof(share_id) - 1;
	memset(&scfg, 0, sizeof(scfg));
	scfg.s3 = r->route ? NULL : r->s3;
	scfg.bottom = r->route ? route_fetcher(r->route) : NULL;
	scfg.budget = r->budget;
	scfg.part_size = o->part_size;
	scfg.cache = o->cache_dir ? &ccfg : NULL;
	scfg.share_id = share_id;
	scfg.share_id_len = share_len;
	e = stack_build(&scfg, &r->stack, msg, msg_len);
	if (e < 0)
		return e;
	*rcfg = r->stack.rd;
	rcfg->budget = r->budget;
	rcfg->part_size = o->part_size;
	if (r->stack.attach) {
		log_info(TAG, "%s: attached, reads go through its cache (blocks of %u KiB)%s", msg,
			 attach_block_size(r->stack.attach) >> 10,
			 o->cache_size ? "; --cache-size is the owner's to set" : "");
	} else if (r->stack.cache) {
		struct cache_stats cs;

		cache_get_stats(r->stack.cache, &cs);
		log_info(TAG, "block cache %s: %llu pages of %u KiB (%llu MiB), %llu in use%s%s; "
			 "io buffers %llu MiB of --max-memory, readahead budget %llu MiB",
			 o->cache_dir, (unsigned long long)cs.pages, cs.block_size >> 10,
			 (unsigned long long)(cs.pages * cs.block_size / MIB),
			 (unsigned long long)cs.blocks_used,
			 cs.direct_io ? ", O_DIRECT" : "",
			 cs.recovered_unclean ? ", recovered after a crash" : "",
			 (unsigned long long)(io_reserve(o) / MIB),
			 (unsigned long long)(ra_budget / MIB));
		if (!o->passthrough_off)
			start_promote(o, r, &cs);
	}
	/* Readahead of all streams together: the prefetch module's caps for
	 * this machine's CPUs, within the budget. */
	rd_config_set_caps(rcfg, ncpu, ra_budget);
	for (size_t i = 0; r->route && i < r->n_src; i++) {
		/* Every source reads through the one stack, keys routed by name. */
		r->srcs[i].rd = *rcfg;
		r->srcs[i].fsrc = (struct fs_source){ .name = r->specs[i].name,
						      .prefix = r->specs[i].o.prefix,
						      .s3 = r->srcs[i].s3, .snap = r->srcs[i].snap,
						      .rd = &r->srcs[i].rd };
	}
	log_info(TAG, "readahead: up to %llu MiB per stream, %llu MiB for all "
		 "streams together (%ld CPUs), of a %llu MiB budget",
		 (unsigned long long)(rcfg->max_window / MIB),
		 (unsigned long long)(rcfg->max_ahead / MIB), ncpu,
		 (unsigned long long)(ra_budget / MIB));
	log_info(TAG, "metadata: up to %llu MiB of listings and nodes",
		 (unsigned long long)(metadata_share(o) / MIB));
	return 0;
}

/* hint_resolve_fn and fs_opened_fn: the order engine and the fs meet here. */
static int order_resolve(void *arg, const char *path, size_t len, char **key, size_t *key_len,
			 char *etag, size_t etag_len, uint64_t *size)
{
	return fs_resolve(arg, path, len, key, key_len, etag, etag_len, size);
}

static void order_opened(void *arg, const char *key, size_t key_len)
{
	hint_opened(arg, key, key_len);
}

/* Loader-order prefetch: resolves names through the fs, fetches through
 * ahead, is told of every open. */
static int start_order(struct running *r, const struct rd_config *rcfg, char *msg,
		       size_t msg_len)
{
	struct hint_config hc;
	int e;

	memset(&hc, 0, sizeof(hc));
	hc.ahead = r->stack.ahead;
	hc.resolve = order_resolve;
	hc.resolve_arg = r->fs;
	hc.budget = r->budget;
	hc.head_size = rd_first_window(rcfg);
	e = hint_new(&hc, &r->hint);
	if (e < 0) {
		snprintf(msg, msg_len, "cannot start loader-order prefetch: %s", strerror(-e));
		return e;
	}
	fs_set_opened(r->fs, order_opened, r->hint);
	return 0;
}

/* The fs over the read path, and the FUSE session with its signal handlers. */
static int start_session(const struct options *o, struct running *r,
			 const struct rd_config *rcfg, char *msg, size_t msg_len)
{
	struct fs_options fopts;
	struct sigaction dfl;
	char *mopts;

	memset(&fopts, 0, sizeof(fopts));
	fopts.prefix = o->prefix;
	fopts.uid = o->uid;
	fopts.gid = o->gid;
	fopts.file_mode = o->file_mode;
	fopts.dir_mode = o->dir_mode;
	fopts.metadata_ttl_ms = o->metadata_ttl_ms;
	fopts.negative_ttl_ms = o->negative_ttl_ms;
	fopts.metadata_max_bytes = metadata_share(o);
	fopts.ahead = r->stack.ahead;
	fopts.snap = r->snap;
	if (r->srcs) {
		struct fs_source *fs_srcs = calloc(r->n_src, sizeof(*fs_srcs));

		if (!fs_srcs) {
			snprintf(msg, msg_len, "out of memory");
			return -ENOMEM;
		}
		for (size_t i = 0; i < r->n_src; i++)
			fs_srcs[i] = r->srcs[i].fsrc;
		fopts.sources = fs_srcs;
		fopts.n_sources = r->n_src;
		fopts.ahead = NULL;         /* its keys are the sources' own, not routed */
		fopts.route_keys = r->route != NULL;
		mopts = fs_new(&fopts, r->s3, rcfg, &r->fs) == 0 ? mount_options(o) : NULL;
		free(fs_srcs);              /* fs_new copied what it keeps */
	} else {
		mopts = fs_new(&fopts, r->s3, rcfg, &r->fs) == 0 ? mount_options(o) : NULL;
	}
	if (mopts && ((r->keep && fs_set_keep(r->fs, r->keep) < 0) || gpu_new(&r->gpu) < 0)) {
		free(mopts);
		mopts = NULL;
	}
	if (!mopts) {
		snprintf(msg, msg_len, "out of memory");
		return -ENOMEM;
	}
	fs_set_gpu(r->fs, r->gpu);
	fs_set_promote(r->fs, r->promote);
	/* Tracked whenever configured, promoted files or not: a successor whose
	 * promoted dir failed must still keep the nodes its predecessor passed
	 * through on their backing files (fs/passthrough.c). */
	if (passthrough_on(o) && fs_set_passthrough(r->fs, 1) < 0) {
		snprintf(msg, msg_len, "out of memory");
		return -ENOMEM;
	}
	if (r->stack.ahead && !r->srcs) {   /* order paths resolve to unrouted keys */
		int e = start_order(r, rcfg, msg, msg_len);

		if (e < 0) {
			free(mopts);
			return e;
		}
	}
	{
		char *argv[] = { "feedfs", "-o", mopts, o->debug ? "-d" : NULL, NULL };
		struct fuse_args args = FUSE_ARGS_INIT(o->debug ? 4 : 3, argv);

		r->se = fuse_session_new(&args, fs_lowlevel_ops(), sizeof(struct fuse_lowlevel_ops),
					 r->fs);
		fuse_opt_free_args(&args);
	}
	free(mopts);
	if (!r->se) {
		snprintf(msg, msg_len, "cannot create the FUSE session (see the log)");
		return -EIO;
	}
	fs_set_session(r->fs, r->se);
	/* libfuse installs its exit handlers only where a signal still has its
	 * default action. A background job of a non-interactive shell (a CI
	 * script's `feedfs ... &`) starts with SIGINT ignored and would then
	 * ignore the SIGINT that --help says unmounts. SIGHUP keeps an inherited
	 * "ignore": that is what nohup asks for. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGINT, &dfl, NULL);
	sigaction(SIGTERM, &dfl, NULL);
	if (fuse_set_signal_handlers(r->se) < 0) {
		snprintf(msg, msg_len, "cannot install signal handlers");
		return -EIO;
	}
	r->handlers = 1;
	return 0;
}

/* stats_group snapshot of r->s3_sum: every source's s3 counters added up
 * (struct s3_stats is all uint64_t). */
static void s3_sum_snapshot(void *obj, void *out)
{
	const struct running *r = obj;
	uint64_t one[sizeof(struct s3_stats) / sizeof(uint64_t)], *sum = out;

	BUG_ON(s3_stats_group.snapshot_size != sizeof(one));
	memset(out, 0, sizeof(one));
	for (size_t i = 0; i < r->n_src; i++) {
		s3_stats_group.snapshot(r->srcs[i].s3, one);
		for (size_t j = 0; j < sizeof(one) / sizeof(one[0]); j++)
			sum[j] += one[j];
	}
}

/* The s3 counters: the client's; with --sources their sum as "s3" and each
 * source's under its name (stats_reg_group_source). */
static void register_s3_stats(struct running *r)
{
	if (!r->srcs) {
		stats_reg_group(&r->reg, &s3_stats_group, r->s3);
		return;
	}
	r->s3_sum = s3_stats_group;
	r->s3_sum.snapshot = s3_sum_snapshot;
	stats_reg_group(&r->reg, &r->s3_sum, r);
	for (size_t i = 0; i < r->n_src; i++)
		stats_reg_group_source(&r->reg, &s3_stats_group, r->srcs[i].s3, r->specs[i].name);
}

/* What the renderings read: every module built, and the mount itself. */
static void register_stats(const struct options *o, struct running *r)
{
	const struct stats_hist_desc *d;
	size_t n;

	stats_reg_group(&r->reg, &fs_stats_group, r->fs);
	register_s3_stats(r);
	stats_reg_group(&r->reg, &cache_stats_group, r->stack.cache);
	stats_reg_group(&r->reg, &promote_stats_group, r->promote);
	stats_reg_group(&r->reg, &attach_stats_group, r->stack.attach);
	stats_reg_group(&r->reg, &ahead_stats_group, r->stack.ahead);
	stats_reg_group(&r->reg, &budget_stats_group, r->budget);
	stats_reg_group(&r->reg, &hint_stats_group, r->hint);
	stats_reg_group(&r->reg, &gpu_stats_group, r->gpu);
	stats_reg_group(&r->reg, &process_stats_group, heap_stats_obj());
	d = fs_hists(r->fs, &n);
	stats_reg_hists(&r->reg, d, n);
	d = s3_client_hists(r->s3, &n);
	stats_reg_hists(&r->reg, d, n);
	r->smount = (struct stats_mount){
		.version = FEEDFS_VERSION, .bucket = o->bucket, .prefix = o->prefix,
		.endpoint = s3_client_endpoint(r->s3), .mountpoint = o->mount_abs,
		.pid = (int)getpid(), .takeovers = r->ke ? r->ke->takeovers : 0,
		.started_wall_ms = util_wall_ms(),
		.started_ns = stats_now_ns(),
	};
}

/* The control socket: stats always, `feedfs warm` into the cache we own or
 * the owner's (a mount without a cache answers EOPNOTSUPP), the loader's
 * order (`feedfs prefetch`), and /metrics when asked. Before the mount: a port in use fails it. */
static int start_ctl(const struct options *o, struct running *r, struct warm_view *view,
		     char *msg, size_t msg_len)
{
	struct ctl_config cc;
	int e;

	view->s3 = r->s3;
	view->prefix = o->prefix;
	view->prefix_len = strlen(o->prefix);
	if (r->stack.cached && !r->srcs)    /* warm_resolve knows one source */
		e = ctl_warm_new(r->stack.cached, r->stack.cached_block, warm_resolve, view,
				 &r->warm);
	else
		e = ctl_warm_new(NULL, 0, NULL, NULL, &r->warm);
	if (e < 0) {
		snprintf(msg, msg_len, "out of memory");
		return e;
	}
	memset(&cc, 0, sizeof(cc));
	cc.mount_abs = o->mount_abs;
	cc.reg = &r->reg;
	cc.mount = &r->smount;
	cc.metrics_host = o->metrics_host;
	cc.metrics_port = o->metrics_port;
	ctl_warm_register(r->warm, &cc);
	if (r->hint)
		ctl_order_register(r->hint, &cc);
	gpu_ctl_register(r->gpu, &cc);
	return ctl_start(&cc, &r->ctl, msg, msg_len);
}

/* The control socket, mount, and tell the parent we are ready. */
static int mount_fs(const struct options *o, struct running *r, struct warm_view *view,
		    int notify_fd, char *msg, size_t msg_len)
{
	int e;

	register_stats(o, r);
	e = start_ctl(o, r, view, msg, msg_len);
	if (e < 0)
		return e;
	if (r->ke && r->ke->fuse_fd >= 0) {
		/* A successor: the connection is the keeper's (keep.h). */
		char dev[32];

		snprintf(dev, sizeof(dev), "/dev/fd/%d", r->ke->fuse_fd);
		if (fuse_session_mount(r->se, dev) < 0) {
			snprintf(msg, msg_len, "takeover: cannot use %s", dev);
			return -EIO;
		}
		r->mounted = 2;
		fs_session_on_end(session_ended, r);
		(void)fs_session_parallel_dirops(r->se);  /* the replayed INIT's reply too */
		log_info(TAG, "took over s3://%s/%s on %s (takeover %u)", o->bucket, o->prefix,
			 o->mount_abs, r->ke->takeovers);
		return 0;
	}
	if (fuse_session_mount(r->se, o->mount_abs) < 0) {
		snprintf(msg, msg_len, "cannot mount on %s (is /dev/fuse usable? "
			 "is fusermount3 installed?)", o->mount_abs);
		return -EIO;
	}
	r->mounted = 1;
	fs_session_on_end(session_ended, r);
	fs_uring_want(o->fuse_uring, r->keep != NULL);  /* before the seam: INIT asks */
	(void)fs_session_parallel_dirops(r->se);  /* logs when it cannot */
	if (r->ke && r->ke->chan_fd >= 0) {
		e = keep_send_fuse_fd(r->ke->chan_fd, fuse_session_fd(r->se));
		if (e < 0)
			log_warn(TAG, "the keeper did not take the mount (%s): it will not "
				 "survive this process", strerror(-e));
		close(r->ke->chan_fd);
	}
	log_info(TAG, "mounted s3://%s/%s on %s", o->bucket, o->prefix, o->mount_abs);
	mount_daemon_ready(notify_fd, NULL);
	return 0;
}

/* The multi-threaded FUSE loop, until unmount or a signal. */
static int run_loop(const struct options *o, struct running *r, char *msg, size_t msg_len)
{
	struct fuse_loop_config *lcfg;
	int e;

	lcfg = fuse_loop_cfg_create();
	if (!lcfg) {
		snprintf(msg, msg_len, "out of memory");
		return -ENOMEM;
	}
	/* Reads block on S3: enough workers for a DataLoader's parallel readers. */
	fuse_loop_cfg_set_max_threads(lcfg, 64);
	fuse_loop_cfg_set_idle_threads(lcfg, 16);
	/* The INIT, here before the loop: saved for a successor (under a
	 * keeper), or replayed from the first server. */
	e = r->mounted == 2 ? keep_takeover_init(r->keep, r->se, msg, msg_len)
			    : keep_first_init(r->keep, r->se, msg, msg_len);
	if (e < 0) {
		fuse_loop_cfg_destroy(lcfg);
		return e;
	}
	set_bdi_readahead(o);
	/* INIT is answered: the ring entries can be registered (fs/uring.c). */
	(void)fs_uring_start(r->fs, r->se);
	/* A Type=notify unit (systemd/feedfs@.service): ready once INIT is
	 * answered; a successor says again that it serves. */
	notify_ready();
	if (r->mounted == 2)
		notify_status("took the mount over (takeover %u)", r->ke->takeovers);
	e = fuse_session_loop_mt(r->se, lcfg);
	fuse_loop_cfg_destroy(lcfg);
	log_info(TAG, "unmounting %s (loop ended: %d)", o->mount_abs, e);
	return 0;
}

int daemon_run(struct options *o, int notify_fd, const struct keep_env *ke)
{
	struct running r;
	struct rd_config rcfg;
	struct warm_view warm_view;
	char msg[PATH_MAX + 512];
	int e;

	memset(&r, 0, sizeof(r));
	msg[0] = '\0';
	e = process_setup(o, msg, sizeof(msg));
	if (e == 0 && ke && ke->state_fd >= 0) {
		r.ke = ke;
		e = keep_open(ke->state_fd, &r.keep);
		if (e < 0)
			snprintf(msg, sizeof(msg), "keeper state: %s", strerror(-e));
	}
	if (e == 0)
		e = o->sources ? start_sources(o, &r, msg, sizeof(msg))
			       : start_s3(o, &r, msg, sizeof(msg));
	if (e == 0 && o->dry_run) {
		dry_run_report(o, &r);
		teardown(&r);
		log_close();
		return 0;
	}
	if (e == 0)
		e = build_read_path(o, &r, &rcfg, msg, sizeof(msg));
	if (e == 0)
		e = start_session(o, &r, &rcfg, msg, sizeof(msg));
	if (e == 0)
		e = mount_fs(o, &r, &warm_view, notify_fd, msg, sizeof(msg));
	if (e < 0)
		return fail(notify_fd, &r, msg);
	/* Ready was reported: from here a failure only reaches the log. */
	e = run_loop(o, &r, msg, sizeof(msg));
	if (e < 0)
		return fail(-1, &r, msg);
	teardown(&r);
	log_close();
	return 0;
}
