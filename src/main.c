/*
 * feedfs — mount an S3 bucket prefix as a read-only POSIX tree.
 *
 * This file is wiring only: dispatch a subcommand (`feedfs warm`), parse the
 * options (options.c; exit 2 on any bad one), answer --help, --version,
 * --print-credentials-source and --dry-run, check the mount point, become a
 * daemon (mount.c), and hand over to daemon_run (daemon.c), which builds the
 * modules, runs the FUSE loop and tears down. Threads are only started after
 * the fork.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/cli.h"
#include "feedfs/creds.h"
#include "feedfs/daemon.h"
#include "feedfs/keep.h"
#include "feedfs/log.h"
#include "feedfs/mount.h"
#include "feedfs/options.h"
#include "feedfs/util.h"

/* `feedfs NAME ...`: a subcommand gets argv from its own name on. */
static const struct {
	const char *name;
	int (*main_fn)(int argc, char **argv);
} subcommands[] = {
	{ "warm", cli_warm_main },
	{ "stats", cli_stats_main },
	{ "prefetch", cli_prefetch_main },
	{ "snapshot", cli_snapshot_main },
};

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
		log_close();
		return 1;
	}
	creds_chain_describe(chain, msg, sizeof(msg));
	printf("%s\n", msg);
	creds_chain_destroy(chain);
	log_close();
	return 0;
}

struct serve_args {
	struct options *o;
	int notify_fd;
};

/* keep_serve_fn: the server under the keeper. */
static int serve(void *arg, const struct keep_env *ke)
{
	const struct serve_args *a = arg;

	return daemon_run(a->o, a->notify_fd, ke);
}

/* Check the mount point, become a daemon unless -f, run the mount under a
 * keeper (keep.h) unless --no-keeper. */
static int mount_and_run(struct options *o, char **argv)
{
	char msg[PATH_MAX + 256], *log_abs = NULL;
	int notify_fd = -1, e;

	if (mount_check_point(o->mountpoint, o->mount_abs, sizeof(o->mount_abs), msg,
			      sizeof(msg)) < 0) {
		fprintf(stderr, "feedfs: %s\n", msg);
		return 1;
	}
	if (o->log_file && o->log_file[0] != '/') {
		/* The daemon changes to "/": keep the file where the user meant. */
		char *abs = realpath(".", NULL);

		if (abs) {
			log_abs = xasprintf("%s/%s", abs, o->log_file);
			o->log_file = log_abs;
			free(abs);
		}
	}
	if (!o->foreground) {
		e = mount_daemon_start(&notify_fd);
		if (e < 0) {
			fprintf(stderr, "feedfs: fork: %s\n", strerror(-e));
			free(log_abs);
			return 1;
		}
	}
	if (o->no_keeper) {
		e = daemon_run(o, notify_fd, NULL);
	} else {
		struct serve_args a = { .o = o, .notify_fd = notify_fd };

		/* The keeper's few lines go where the server's will (a bad
		 * --log-file is the server's to report). */
		log_init(o->log_file ? LOG_SINK_FILE : o->foreground ? LOG_SINK_STDERR
								     : LOG_SINK_SYSLOG,
			 o->log_file, o->log_level);
		e = keep_run(argv, o->mount_abs, notify_fd, serve, &a);
	}
	free(log_abs);
	return e;
}

static int run_options(struct options *o, char **argv)
{
	if (o->print_creds)
		return print_credentials_source(o);
	if (o->dry_run) {
		/* Foreground, nothing mounted: the one line goes to stdout (ok) or
		 * stderr (why not); log lines only from warnings up, unless asked. */
		o->foreground = 1;
		if (!o->log_file && !o->log_level_set)
			o->log_level = LOG_WARNING;
		return daemon_run(o, -1, NULL);
	}
	return mount_and_run(o, argv);
}

int main(int argc, char **argv)
{
	struct keep_env ke;
	struct options o;
	char msg[PATH_MAX + 256];
	int e;

	for (size_t i = 0; argc >= 2 && i < sizeof(subcommands) / sizeof(subcommands[0]); i++)
		if (strcmp(argv[1], subcommands[i].name) == 0)
			return subcommands[i].main_fn(argc - 1, argv + 1);
	e = options_parse(argc, argv, &o, msg, sizeof(msg));
	if (e == OPTIONS_HELP) {
		options_help(stdout);
		e = 0;
	} else if (e == OPTIONS_VERSION) {
		options_version(stdout);
		e = 0;
	} else if (e < 0) {
		if (e == -EINVAL)
			fprintf(stderr, "feedfs: %s (see feedfs --help)\n", msg);
		else
			fprintf(stderr, "feedfs: %s\n", strerror(-e));
		e = e == -EINVAL ? 2 : 1;
	} else if ((e = keep_from_env(&ke)) != 0) {
		/* A successor the keeper started (keep.h): the mount point is the
		 * live mount it takes over, never stat()ed (that would wait for
		 * this very process). */
		if (e < 0 || strlen(ke.mount_abs) >= sizeof(o.mount_abs)) {
			fprintf(stderr, "feedfs: bad FEEDFS_KEEP in the environment\n");
			e = 1;
		} else {
			strcpy(o.mount_abs, ke.mount_abs);
			e = daemon_run(&o, -1, &ke);
		}
	} else {
		e = run_options(&o, argv);
	}
	options_free(&o);
	return e;
}
