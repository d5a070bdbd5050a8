/*
 * lib_client — a small program over libfeedfs, driven by
 * tests/integration/test_device.py against a real mount. It writes the
 * bytes it got to stdout so that the test compares them with the checksums
 * of what was uploaded; errors go to stderr as "error <errno>" and exit 3.
 *
 *   lib_client read  FILE OFF LEN           one READ ioctl into a new region
 *   lib_client batch FILE OFF:LEN[,...]     one batch into one region, packed
 *   lib_client threads FILE N               N threads, one channel, a region
 *                                           each, the whole file; all equal
 *   lib_client hold  MOUNT SIZE             register, say "held <id>", sleep
 *   lib_client order MOUNT PATH...          feedfs_send_order (default stream)
 *   lib_client order-stream MOUNT S PATH... feedfs_send_order for stream S
 *   lib_client clear MOUNT [S]              feedfs_clear_order (every stream, or S)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedfs/libfeedfs.h"

static int fail(const char *what, long e)
{
	fprintf(stderr, "%s: error %ld (%s)\n", what, -e, strerror((int)-e));
	return 3;
}

static void out(const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(1, c, n);

		if (w <= 0)
			exit(4);
		c += w;
		n -= (size_t)w;
	}
}

static int cmd_read(const char *file, unsigned long long off, unsigned long long len)
{
	struct feedfs_channel *ch;
	struct feedfs_region r;
	ssize_t n;
	int fd, e;

	e = feedfs_open(file, &ch);
	if (e < 0)
		return fail("open channel", e);
	e = feedfs_region_new(ch, len ? len : 1, &r);
	if (e < 0)
		return fail("region", e);
	fd = open(file, O_RDONLY);
	if (fd < 0)
		return fail("open", -errno);
	n = feedfs_read_host(fd, r.id, 0, off, len);
	if (n < 0)
		return fail("read", n);
	out(r.base, (size_t)n);
	fprintf(stderr, "read %zd\n", n);
	close(fd);
	feedfs_region_free(ch, &r);
	feedfs_close(ch);
	return 0;
}

static int cmd_batch(const char *file, char *spec)
{
	struct feedfs_extent ext[1024];
	struct feedfs_channel *ch;
	struct feedfs_region r;
	struct feedfs_ioc_dest d;
	size_t n = 0, total = 0, packed = 0;
	ssize_t got;
	int fd, e;

	for (char *t = strtok(spec, ","); t && n < 1024; t = strtok(NULL, ",")) {
		unsigned long long o, l;

		if (sscanf(t, "%llu:%llu", &o, &l) != 2)
			return fail("spec", -EINVAL);
		ext[n] = (struct feedfs_extent){ o, l, total, 0 };
		total += l;
		n++;
	}
	e = feedfs_open(file, &ch);
	if (e < 0)
		return fail("open channel", e);
	e = feedfs_region_new(ch, total ? total : 1, &r);
	if (e < 0)
		return fail("region", e);
	fd = open(file, O_RDONLY);
	if (fd < 0)
		return fail("open", -errno);
	memset(&d, 0, sizeof(d));
	d.kind = FEEDFS_DEST_REGION;
	d.region = r.id;
	got = feedfs_read_batch(fd, &d, ext, n);
	if (got < 0)
		return fail("batch", got);
	/* Short extents (end of file) leave holes: write what each got. */
	for (size_t i = 0; i < n; i++) {
		out((char *)r.base + ext[i].dest_offset, (size_t)ext[i].result);
		packed += (size_t)ext[i].result;
	}
	fprintf(stderr, "batch %zd in %zu extents\n", got, n);
	close(fd);
	feedfs_region_free(ch, &r);
	feedfs_close(ch);
	return packed == (size_t)got ? 0 : 5;
}

struct worker {
	struct feedfs_channel *ch;
	const char *file;
	size_t size;
	struct feedfs_region r;
	long err;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	int fd;
	long e = feedfs_region_new(w->ch, w->size, &w->r);

	if (e < 0) {
		w->err = e;
		return NULL;
	}
	fd = open(w->file, O_RDONLY);
	if (fd < 0) {
		w->err = -errno;
		return NULL;
	}
	/* In 3 pieces, so the pieces of threads interleave on the file. */
	for (size_t at = 0; at < w->size && !w->err; ) {
		size_t n = w->size / 3 + 1;

		if (n > w->size - at)
			n = w->size - at;       /* the region ends there: EFAULT past it */
		ssize_t r = feedfs_read_host(fd, w->r.id, at, at, n);

		if (r < 0)
			w->err = r;
		else if (r == 0)
			break;
		else
			at += (size_t)r;
	}
	close(fd);
	return NULL;
}

static int cmd_threads(const char *file, int n)
{
	struct worker w[32];
	pthread_t t[32];
	struct feedfs_channel *ch;
	struct stat st;
	int e;

	if (n < 1 || n > 32 || stat(file, &st) < 0)
		return fail("args", -EINVAL);
	e = feedfs_open(file, &ch);
	if (e < 0)
		return fail("open channel", e);
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ .ch = ch, .file = file, .size = (size_t)st.st_size };
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < n; i++) {
		if (w[i].err)
			return fail("thread", w[i].err);
		if (memcmp(w[i].r.base, w[0].r.base, w[0].size) != 0)
			return fail("threads differ", -EIO);
	}
	out(w[0].r.base, w[0].size);
	for (int i = 0; i < n; i++)
		feedfs_region_free(ch, &w[i].r);
	feedfs_close(ch);
	return 0;
}

static int cmd_hold(const char *mount, unsigned long long size)
{
	struct feedfs_channel *ch;
	struct feedfs_region r;
	int e = feedfs_open(mount, &ch);

	if (e < 0)
		return fail("open channel", e);
	e = feedfs_region_new(ch, size, &r);
	if (e < 0)
		return fail("region", e);
	printf("held %llu\n", (unsigned long long)r.id);
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	if (argc == 5 && strcmp(argv[1], "read") == 0)
		return cmd_read(argv[2], strtoull(argv[3], NULL, 10), strtoull(argv[4], NULL, 10));
	if (argc == 4 && strcmp(argv[1], "batch") == 0)
		return cmd_batch(argv[2], argv[3]);
	if (argc == 4 && strcmp(argv[1], "threads") == 0)
		return cmd_threads(argv[2], atoi(argv[3]));
	if (argc == 4 && strcmp(argv[1], "hold") == 0)
		return cmd_hold(argv[2], strtoull(argv[3], NULL, 10));
	if (argc >= 4 && strcmp(argv[1], "order") == 0) {
		int e = feedfs_send_order(argv[2], NULL, (const char *const *)argv + 3,
					  (size_t)argc - 3);

		return e < 0 ? fail("order", e) : 0;
	}
	if (argc >= 5 && strcmp(argv[1], "order-stream") == 0) {
		int e = feedfs_send_order(argv[2], argv[3], (const char *const *)argv + 4,
					  (size_t)argc - 4);

		return e < 0 ? fail("order", e) : 0;
	}
	if ((argc == 3 || argc == 4) && strcmp(argv[1], "clear") == 0) {
		int e = feedfs_clear_order(argv[2], argc == 4 ? argv[3] : NULL);

		return e < 0 ? fail("clear", e) : 0;
	}
	fprintf(stderr, "usage: see the top of tests/lib/lib_client.c\n");
	return 2;
}
