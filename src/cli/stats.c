/*
 * stats — `feedfs stats MOUNTPOINT`: what a running mount is doing, from its
 * control socket. The daemon renders (one table, three forms, stats.h); this
 * client only asks and prints, once or every second (--watch).
 */
#include "feedfs/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/util.h"

#define STATS_REPLY_MAX (16u << 20)

static const char stats_usage[] =
"usage: feedfs stats [--json | --prom] [--watch] MOUNTPOINT\n"
"    Prints what the mount is doing: throughput now and since mount, S3\n"
"    requests by kind, retries by cause, cache hits, misses and evictions,\n"
"    readahead, memory budget use, and read-wait and latency percentiles.\n"
"    --json    one JSON object: \"pid\" (the serving process), the source, and\n"
"              every counter and histogram\n"
"    --prom    the Prometheus text that --metrics-addr serves\n"
"    --watch   print again every second, until interrupted\n"
"    Exit status: 0, 1 (not a feedfs mount, or its daemon cannot be reached), 2 (usage).\n";

/* One request on fd; prints the reply. 0 or -1 (a line printed). */
static int ask(int fd, const char *form, const char *mnt, int clear)
{
	char req[32], line[64];
	unsigned long long n;
	char *buf;

	snprintf(req, sizeof(req), "S %s\n", form);
	if (util_send_all(fd, req, strlen(req)) < 0 || util_read_line(fd, line, sizeof(line)) < 0) {
		fprintf(stderr, "feedfs stats: lost the daemon of %s\n", mnt);
		return -1;
	}
	if (strncmp(line, "OK ", 3) != 0 || sscanf(line + 3, "%llu", &n) != 1 ||
	    n > STATS_REPLY_MAX) {
		fprintf(stderr, "feedfs stats: the daemon of %s answered '%s'\n", mnt, line);
		return -1;
	}
	buf = malloc(n ? n : 1);
	if (!buf || util_read_all(fd, buf, (size_t)n) < 0) {
		free(buf);
		fprintf(stderr, "feedfs stats: lost the daemon of %s\n", mnt);
		return -1;
	}
	if (clear)
		fputs("\033[H\033[2J", stdout);
	fwrite(buf, 1, (size_t)n, stdout);
	fflush(stdout);
	free(buf);
	return 0;
}

int cli_stats_main(int argc, char **argv)
{
	const char *form = "text", *path = NULL;
	char mnt[PATH_MAX];
	int watch = 0, fd, rc;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			form = "json";
		} else if (strcmp(argv[i], "--prom") == 0) {
			form = "prom";
		} else if (strcmp(argv[i], "--watch") == 0 || strcmp(argv[i], "-w") == 0) {
			watch = 1;
		} else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(stats_usage, stdout);
			return 0;
		} else if (argv[i][0] == '-' || path) {
			fprintf(stderr, "feedfs stats: unexpected argument '%s'\n%s", argv[i],
				stats_usage);
			return 2;
		} else {
			path = argv[i];
		}
	}
	if (!path) {
		fputs(stats_usage, stderr);
		return 2;
	}
	fd = cli_ctl_connect("feedfs stats", path, mnt, sizeof(mnt));
	if (fd < 0)
		return 1;
	do {
		rc = ask(fd, form, mnt, watch && isatty(STDOUT_FILENO));
		if (rc == 0 && watch)
			sleep(1);
	} while (rc == 0 && watch);
	close(fd);
	return rc < 0 ? 1 : 0;
}
