/*
 * prefetch — `feedfs prefetch --order FILE MOUNTPOINT` hands a training
 * loader's file order to the mount's daemon (the O verb of its control
 * socket, src/ctl/order.c), which then keeps a window of those files fetched
 * ahead of the loader (hint.h); `--clear` drops the order. `--stream NAME`
 * names the order's stream (one per rank of a distributed loader).
 *
 * FILE has one path per line ('-': stdin), relative to the mount root or
 * absolute under MOUNTPOINT (made relative here); blank lines are skipped.
 * Each path is checked here with the daemon's own rule (hint_order_check),
 * so a bad line is named; the daemon checks again. Returns at once: names
 * are resolved in the daemon's background. Exit 0 sent, 1 refused or no
 * daemon (one line), 2 usage.
 */
#include "feedfs/cli.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/hint.h"
#include "feedfs/util.h"

#define CMD "feedfs prefetch"

static const char prefetch_usage[] =
	"usage: feedfs prefetch --order FILE [--stream NAME] MOUNTPOINT\n"
	"       feedfs prefetch --clear [--stream NAME] MOUNTPOINT\n"
	"    Tells the feedfs daemon of MOUNTPOINT the order in which a loader will\n"
	"    open files, so it fetches them ahead (within --max-memory); a new order\n"
	"    replaces the old one of the same stream. FILE: one path per line,\n"
	"    relative to MOUNTPOINT or absolute under it; '-' reads stdin. At most\n"
	"    4194304 paths, 512 MiB, and half of --max-memory.\n"
	"    --stream NAME: one order per stream (e.g. rank0, rank1: the ranks of a\n"
	"    distributed loader on one mount); NAME is up to 64 of [A-Za-z0-9._-].\n"
	"    Without it, the default stream.\n"
	"    --clear drops the stream's order (without --stream: every order) and\n"
	"    frees what was fetched for it.\n";

struct payload {
	char *buf;
	size_t len, cap, count;
};

static int payload_add(struct payload *p, const char *path, size_t len)
{
	if (p->len + len + 1 > p->cap) {
		size_t nc = p->cap ? p->cap * 2 : 1 << 16;
		char *nb;

		while (nc < p->len + len + 1)
			nc *= 2;
		nb = realloc(p->buf, nc);
		if (!nb)
			return -ENOMEM;
		p->buf = nb;
		p->cap = nc;
	}
	memcpy(p->buf + p->len, path, len);
	p->buf[p->len + len] = '\n';
	p->len += len + 1;
	p->count++;
	return 0;
}

/* Read the order from f into p, relative to mount point mnt. 0, or 1 after
 * one line on stderr. */
static int read_order(FILE *f, const char *name, const char *mnt, struct payload *p)
{
	size_t cap = 0, mlen = strlen(mnt), lineno = 0;
	char *line = NULL;
	ssize_t n;
	int rc = 0;

	if (mlen == 1)
		mlen = 0;                       /* mounted on "/" */
	while ((n = getline(&line, &cap, f)) >= 0) {
		const char *s = line;
		size_t len = (size_t)n;

		lineno++;
		if (len && s[len - 1] == '\n')
			len--;
		if (len && s[len - 1] == '\r')
			len--;
		if (!len)
			continue;
		if (s[0] == '/') {
			if (strncmp(s, mnt, mlen) != 0 || s[mlen] != '/') {
				fprintf(stderr, CMD ": %s:%zu: %.*s is not under %s\n", name, lineno,
					(int)len, s, mnt);
				rc = 1;
				break;
			}
			s += mlen + 1;
			len -= mlen + 1;
		}
		if (payload_add(p, s, len) < 0) {
			fprintf(stderr, CMD ": out of memory\n");
			rc = 1;
			break;
		}
		if (hint_order_check(p->buf + p->len - len - 1, len + 1, 1) < 0) {
			fprintf(stderr, CMD ": %s:%zu: '%.*s' is not a path in the mount (no "
				"empty, '.' or '..' segment, no NUL)\n", name, lineno, (int)len, s);
			rc = 1;
			break;
		}
		if (p->count > HINT_MAX_PATHS || p->len > HINT_MAX_BYTES) {
			fprintf(stderr, CMD ": %s: more than %u paths or %u MiB: too long an "
				"order\n", name, HINT_MAX_PATHS, HINT_MAX_BYTES >> 20);
			rc = 1;
			break;
		}
	}
	if (!rc && ferror(f)) {
		fprintf(stderr, CMD ": reading %s: %s\n", name, strerror(errno));
		rc = 1;
	}
	free(line);
	return rc;
}

/* Send "O count nbytes[ stream]" + payload; 0 and *sent, or 1 after one line. */
static int send_order(int fd, const char *mnt, const char *stream, const struct payload *p,
		      unsigned long long *sent)
{
	char hdr[64 + HINT_STREAM_MAX], line[64];
	int e;

	snprintf(hdr, sizeof(hdr), "O %zu %zu%s%s\n", p->count, p->len, stream ? " " : "",
		 stream ? stream : "");
	if (util_send_all(fd, hdr, strlen(hdr)) < 0 ||
	    (p->len && util_send_all(fd, p->buf, p->len) < 0) ||
	    util_read_line(fd, line, sizeof(line)) < 0) {
		fprintf(stderr, CMD ": lost the daemon of %s (does it know orders?)\n", mnt);
		return 1;
	}
	if (strncmp(line, "OK ", 3) == 0) {
		*sent = strtoull(line + 3, NULL, 10);
		return 0;
	}
	e = strncmp(line, "ERR ", 4) == 0 ? atoi(line + 4) : EPROTO;
	if (e == E2BIG)
		fprintf(stderr, CMD ": the daemon of %s refused the order: too large (it would "
			"take more than half of the mount's --max-memory)\n", mnt);
	else
		fprintf(stderr, CMD ": the daemon of %s refused the order: %s\n", mnt,
			strerror(e));
	return 1;
}

int cli_prefetch_main(int argc, char **argv)
{
	const char *order = NULL, *mountpoint = NULL, *stream = NULL;
	struct payload p = { 0 };
	char mnt[PATH_MAX];
	unsigned long long sent = 0;
	int clear = 0, rc, fd;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(prefetch_usage, stdout);
			return 0;
		} else if (strcmp(argv[i], "--order") == 0 && i + 1 < argc && !order) {
			order = argv[++i];
		} else if (strncmp(argv[i], "--order=", 8) == 0 && argv[i][8] && !order) {
			order = argv[i] + 8;
		} else if (strcmp(argv[i], "--stream") == 0 && i + 1 < argc && !stream) {
			stream = argv[++i];
		} else if (strncmp(argv[i], "--stream=", 9) == 0 && !stream) {
			stream = argv[i] + 9;
		} else if (strcmp(argv[i], "--clear") == 0) {
			clear = 1;
		} else if ((argv[i][0] != '-' || !argv[i][1]) && !mountpoint) {
			mountpoint = argv[i];
		} else {
			goto usage;
		}
	}
	if (!mountpoint || clear == !!order)
		goto usage;
	if (stream && (!stream[0] || hint_stream_check(stream) < 0)) {
		fprintf(stderr, CMD ": --stream '%s': a stream name is 1 to %d of "
			"[A-Za-z0-9._-]\n", stream, HINT_STREAM_MAX);
		return 2;
	}
	fd = cli_ctl_connect(CMD, mountpoint, mnt, sizeof(mnt));
	if (fd < 0)
		return 1;
	rc = 0;
	if (order) {
		FILE *f = strcmp(order, "-") == 0 ? stdin : fopen(order, "re");

		if (!f) {
			fprintf(stderr, CMD ": %s: %s\n", order, strerror(errno));
			close(fd);
			return 1;
		}
		rc = read_order(f, strcmp(order, "-") == 0 ? "stdin" : order, mnt, &p);
		if (f != stdin)
			fclose(f);
		if (!rc && !p.count) {
			fprintf(stderr, CMD ": %s holds no paths (use --clear to drop an order)\n",
				order);
			rc = 1;
		}
	}
	if (!rc)
		rc = send_order(fd, mnt, stream, &p, &sent);
	close(fd);
	free(p.buf);
	if (rc)
		return rc;
	if (clear && stream)
		printf(CMD ": order of stream %s cleared on %s\n", stream, mountpoint);
	else if (clear)
		printf(CMD ": orders cleared on %s\n", mountpoint);
	else
		printf(CMD ": %llu paths sent to %s%s%s\n", sent, mountpoint,
		       stream ? ", stream " : "", stream ? stream : "");
	return 0;
usage:
	fputs(prefetch_usage, stderr);
	return 2;
}
