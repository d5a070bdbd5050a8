/*
 * mount.feedfs — the helper mount(8) runs for "-t feedfs" and fstab lines of
 * type feedfs:
 *
 *   mount.feedfs SPEC DIR [-sfnv] [-N NS] [-o OPTIONS]
 *
 * DESIGN
 * It turns the call into "feedfs SPEC DIR --long-option value ..." (the
 * mapping is src/fstab.c's, checked against feedfs's own option table) and
 * execs feedfs without -f: feedfs forks, and its parent exits only once the
 * mount answers or with the one line saying why it could not, which is what
 * mount(8) waits for. Nothing else runs before exec, so a bad option is one
 * line and exit status 1 (mount(8)'s "incorrect invocation"), and feedfs's
 * own exit status and message reach mount(8) unchanged.
 *
 * feedfs is looked for next to this program first (build/, or an install's
 * sbin/ with bin/ beside it: ../bin/feedfs), then on $PATH, so that a helper
 * runs the feedfs it was installed with.
 *
 * -s (sloppy) drops options feedfs does not know instead of failing; -f
 * (fake) and -v print the command; -n (no mtab) is the default on any
 * system with /proc/self/mounts; -N (another mount namespace) is refused.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/fstab.h"

#define PROG "mount.feedfs"

static int usage(void)
{
	fprintf(stderr, "usage: " PROG " SOURCE MOUNTPOINT [-sfnv] [-o OPTIONS]\n"
		"  SOURCE: s3://BUCKET[/PREFIX], oss://..., gs://..., or BUCKET[/PREFIX]\n"
		"  OPTIONS: feedfs's long options with '_' for '-' (endpoint_url=URL,\n"
		"           force_path_style, cache_dir=DIR, ...); see mount.feedfs(8)\n");
	return 1;
}

/* An executable file "feedfs" in dir; 1 and the path in out, else 0. */
static int try_dir(const char *dir, size_t dir_len, char *out, size_t out_len)
{
	int n = snprintf(out, out_len, "%.*s/feedfs", (int)dir_len, dir);

	return n > 0 && (size_t)n < out_len && access(out, X_OK) == 0;
}

static int find_feedfs(char *out, size_t out_len)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	const char *path = getenv("PATH"), *p, *colon;
	char *slash;

	if (n > 0) {
		self[n] = '\0';
		slash = strrchr(self, '/');
		if (slash) {
			*slash = '\0';
			if (try_dir(self, strlen(self), out, out_len))
				return 0;
			if (strlen(self) + 8 < sizeof(self)) {
				strcat(self, "/../bin");
				if (try_dir(self, strlen(self), out, out_len))
					return 0;
			}
		}
	}
	for (p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p; p = colon + 1) {
		colon = strchr(p, ':');
		if (!colon)
			colon = p + strlen(p);
		if (colon > p && try_dir(p, (size_t)(colon - p), out, out_len))
			return 0;
		if (!*colon)
			break;
	}
	return -ENOENT;
}

int main(int argc, char **argv)
{
	struct fstab_args fa = { 0 };
	const char *opts = NULL, *spec, *dir;
	char *joined = NULL;
	int c, sloppy = 0, fake = 0, verbose = 0, e, rc = 1;
	char msg[512], bin[PATH_MAX];
	char **args = NULL;

	opterr = 0;
	while ((c = getopt(argc, argv, "sfnvo:N:t:h")) != -1) {
		switch (c) {
		case 's': sloppy = 1; break;
		case 'f': fake = 1; break;
		case 'n': break;
		case 'v': verbose = 1; break;
		case 't': break;        /* "feedfs" or "fuse.feedfs": this helper either way */
		case 'o':
			/* mount(8) passes one -o; join several, as mount does. */
			if (opts) {
				char *j = malloc(strlen(opts) + strlen(optarg) + 2);

				if (!j)
					return 1;
				sprintf(j, "%s,%s", opts, optarg);
				free(joined);
				opts = joined = j;
			} else {
				opts = optarg;
			}
			break;
		case 'N':
			fprintf(stderr, PROG ": -N (another mount namespace) is not supported\n");
			return 1;
		case 'h':
			usage();
			return 0;
		default:
			fprintf(stderr, PROG ": unknown flag '-%c' (see " PROG " -h)\n", optopt);
			return 1;
		}
	}
	if (argc - optind != 2)
		return usage();
	spec = argv[optind];
	dir = argv[optind + 1];
	e = opts ? fstab_parse_opts(opts, sloppy, &fa, msg, sizeof(msg)) : 0;
	if (e < 0) {
		fprintf(stderr, PROG ": %s\n", e == -EINVAL ? msg : strerror(-e));
		goto out;
	}
	if (find_feedfs(bin, sizeof(bin)) < 0) {
		fprintf(stderr, PROG ": feedfs not found next to " PROG " nor on PATH\n");
		goto out;
	}
	args = calloc((size_t)fa.argc + 4, sizeof(*args));
	if (!args)
		goto out;
	args[0] = bin;
	args[1] = (char *)spec;
	args[2] = (char *)dir;
	if (fa.argc)
		memcpy(args + 3, fa.argv, (size_t)fa.argc * sizeof(*args));
	if (verbose || fake) {
		fprintf(stderr, PROG ":");
		for (int i = 0; args[i]; i++)
			fprintf(stderr, " %s", args[i]);
		fprintf(stderr, "\n");
	}
	if (fake) {
		rc = 0;
		goto out;
	}
	execv(bin, args);
	fprintf(stderr, PROG ": cannot run %s: %s\n", bin, strerror(errno));
out:
	free(args);
	fstab_args_free(&fa);
	free(joined);
	return rc;
}
