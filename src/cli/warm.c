/*
 * warm — `feedfs warm PATH...`: fill a running mount's block cache ahead of a
 * job, through its daemon (the W verb of its control socket, src/ctl/warm.c),
 * never through the mount itself.
 *
 * Finds the feedfs mount holding each PATH in /proc/self/mountinfo, walks
 * directories (metadata only), and has --jobs connections work through the
 * file list. Progress: one rewritten line on a terminal, plain lines every
 * few seconds otherwise. A mount without a cache answers every file with
 * EOPNOTSUPP.
 */
#include "feedfs/cli.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "feedfs/ctl.h"
#include "feedfs/util.h"

#define WARM_MAX_CONNS 64

struct wfile {
	char *rel;                      /* relative to the mount root */
	uint64_t size;
};

struct wjob {
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct wfile *files;
	size_t nfiles, cap;
	uint64_t total_bytes;
	atomic_size_t next;
	atomic_size_t done_files, failed;
	atomic_ullong done_bytes;
	atomic_int conn_failed;
	atomic_int no_cache;            /* the daemon answered EOPNOTSUPP: nothing to warm */
};

static struct wjob *walk_job;
static size_t walk_root_len;

static int add_file(struct wjob *j, const char *abs, size_t root_len, uint64_t size)
{
	const char *rel = abs + root_len;

	while (*rel == '/')
		rel++;
	if (!*rel)
		return 0;
	if (j->nfiles == j->cap) {
		size_t nc = j->cap ? j->cap * 2 : 256;
		struct wfile *nf = realloc(j->files, nc * sizeof(*nf));

		if (!nf)
			return -ENOMEM;
		j->files = nf;
		j->cap = nc;
	}
	j->files[j->nfiles].rel = strdup(rel);
	if (!j->files[j->nfiles].rel)
		return -ENOMEM;
	j->files[j->nfiles++].size = size;
	j->total_bytes += size;
	return 0;
}

static int walk_cb(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F && S_ISREG(st->st_mode))
		return add_file(walk_job, p, walk_root_len, (uint64_t)st->st_size) < 0;
	return 0;
}

static void *client_worker(void *arg)
{
	struct wjob *j = arg;
	int fd = cli_unix_connect(j->sock);

	if (fd < 0) {
		atomic_store(&j->conn_failed, -fd);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		char hdr[32], line[64];

		if (i >= j->nfiles)
			break;
		snprintf(hdr, sizeof(hdr), "W %zu\n", strlen(j->files[i].rel));
		if (util_send_all(fd, hdr, strlen(hdr)) < 0 ||
		    util_send_all(fd, j->files[i].rel, strlen(j->files[i].rel)) < 0)
			goto lost;
		if (util_read_line(fd, line, sizeof(line)) < 0)
			goto lost;
		if (strncmp(line, "OK ", 3) == 0) {
			atomic_fetch_add(&j->done_bytes, strtoull(line + 3, NULL, 10));
		} else {
			int e = strncmp(line, "ERR ", 4) == 0 ? atoi(line + 4) : EPROTO;

			if (e == EOPNOTSUPP) {
				/* The mount has no cache: every file would say so. */
				atomic_store(&j->no_cache, 1);
				break;
			}
			fprintf(stderr, "feedfs warm: %s: %s\n", j->files[i].rel, strerror(e));
			atomic_fetch_add(&j->failed, 1);
		}
		atomic_fetch_add(&j->done_files, 1);
	}
	close(fd);
	return NULL;
lost:
	atomic_store(&j->conn_failed, ECONNRESET);
	close(fd);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void progress(struct wjob *j, double t0, int tty, int final)
{
	double el = now_s() - t0, mib = atomic_load(&j->done_bytes) / 1048576.0;
	double rate = el > 0 ? mib / el : 0;
	double left = j->total_bytes / 1048576.0 - mib;
	char eta[32];

	if (final)
		snprintf(eta, sizeof(eta), "%.1fs", el);
	else if (rate > 0)
		snprintf(eta, sizeof(eta), "ETA %.0fs", left > 0 ? left / rate : 0);
	else
		snprintf(eta, sizeof(eta), "ETA ?");
	fprintf(tty ? stderr : stdout, "%swarm: %zu/%zu files, %.1f/%.1f MiB, %.1f MiB/s, %s%s%s",
		tty ? "\r" : "", atomic_load(&j->done_files), j->nfiles, mib,
		j->total_bytes / 1048576.0, rate, eta,
		atomic_load(&j->failed) ? ", some failed" : "", tty && !final ? "\033[K" : "\n");
	fflush(tty ? stderr : stdout);
}

static const char warm_usage[] =
	"usage: feedfs warm [--jobs N] MOUNTPOINT/PATH...\n"
	"    Loads the files (directories: everything below) into the block cache of\n"
	"    the feedfs daemon serving them, without reading through the mount.\n"
	"    --jobs N   files warmed in parallel, 1..64 (default 4)\n";

int cli_warm_main(int argc, char **argv)
{
	struct wjob *j = calloc(1, sizeof(*j));
	char mnt[PATH_MAX] = "";
	pthread_t th[WARM_MAX_CONNS];
	long jobs = 4;
	int tty = isatty(STDERR_FILENO), status = 0, npaths = 0;
	double t0, last = 0;

	if (!j)
		return 1;
	for (int i = 1; i < argc; i++) {
		char abs[PATH_MAX], m[PATH_MAX];
		struct stat st;

		if (strcmp(argv[i], "--jobs") == 0 || strcmp(argv[i], "-j") == 0) {
			char *end;

			if (i + 1 >= argc)
				goto usage;
			jobs = strtol(argv[++i], &end, 10);
			if (*end || jobs < 1 || jobs > WARM_MAX_CONNS)
				goto usage;
			continue;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(warm_usage, stdout);
			return 0;
		}
		if (!realpath(argv[i], abs) || stat(abs, &st) < 0) {
			fprintf(stderr, "feedfs warm: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (cli_find_mount(abs, m, sizeof(m)) < 0) {
			fprintf(stderr, "feedfs warm: %s is not on a feedfs mount\n", argv[i]);
			return 1;
		}
		if (mnt[0] && strcmp(mnt, m)) {
			fprintf(stderr, "feedfs warm: %s and %s are on different mounts\n", mnt, m);
			return 2;
		}
		strcpy(mnt, m);
		npaths++;
		if (S_ISDIR(st.st_mode)) {
			walk_job = j;
			walk_root_len = strlen(mnt);
			if (nftw(abs, walk_cb, 32, FTW_PHYS) != 0) {
				fprintf(stderr, "feedfs warm: walking %s failed\n", argv[i]);
				return 1;
			}
		} else if (S_ISREG(st.st_mode) && add_file(j, abs, strlen(mnt),
							  (uint64_t)st.st_size) < 0) {
			return 1;
		}
	}
	if (!npaths)
		goto usage;
	if (ctl_socket_path(mnt, j->sock, sizeof(j->sock)) < 0 ||
	    access(j->sock, F_OK) < 0) {
		fprintf(stderr, "feedfs warm: no control socket for %s (%s): are you the "
			"owner of its daemon?\n", mnt, j->sock);
		return 1;
	}
	if ((size_t)jobs > j->nfiles)
		jobs = j->nfiles ? (long)j->nfiles : 1;
	t0 = now_s();
	for (long i = 0; i < jobs; i++)
		if (pthread_create(&th[i], NULL, client_worker, j) != 0)
			jobs = i;
	while (atomic_load(&j->done_files) < j->nfiles && !atomic_load(&j->conn_failed) &&
	       !atomic_load(&j->no_cache)) {
		usleep(200 * 1000);
		if (tty || now_s() - last >= 5) {
			progress(j, t0, tty, 0);
			last = now_s();
		}
	}
	for (long i = 0; i < jobs; i++)
		pthread_join(th[i], NULL);
	if (atomic_load(&j->no_cache)) {
		fprintf(stderr, "feedfs warm: %s has no block cache (mounted without "
			"--cache-dir): nothing to warm\n", mnt);
		status = 1;
		goto out;
	}
	progress(j, t0, tty, 1);
	if (atomic_load(&j->conn_failed)) {
		fprintf(stderr, "feedfs warm: lost the daemon (%s): %s\n", j->sock,
			strerror(atomic_load(&j->conn_failed)));
		status = 1;
	}
	if (atomic_load(&j->failed))
		status = 1;
out:
	for (size_t i = 0; i < j->nfiles; i++)
		free(j->files[i].rel);
	free(j->files);
	free(j);
	return status;
usage:
	fputs(warm_usage, stderr);
	return 2;
}
