/*
 * test_snap — the snapshot file (src/snap/snap.c): what is written reads back
 * entry for entry, lookups by binary search find exactly the keys written,
 * and every kind of damage is refused at open with its own line.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedfs/snap.h"
#include "harness.h"

#define N_KEYS 1000

/* Key i: "d%03d/f%05d.jpg", sorted by i; every 7th has an odd ETag, every
 * 11th a version id. */
static void key_of(unsigned i, char *k, size_t n)
{
	snprintf(k, n, "d%03u/f%05u.jpg", i / 100, i);
}

static void etag_of(unsigned i, char *e, size_t n)
{
	if (i % 7 == 0)
		snprintf(e, n, "\"%08x-%u\"", i * 2654435761u, i % 5 + 1);
	else
		snprintf(e, n, "\"%032x\"", i * 2654435761u);
}

static char *tmpfile_path(void)
{
	static char p[64];

	snprintf(p, sizeof(p), "/tmp/feedfs-test-snap.XXXXXX");
	close(mkstemp(p));
	return p;
}

/* Write N_KEYS (plus the empty key first: the prefix's own marker). */
static void write_file(const char *path, unsigned n)
{
	struct snap_meta m = { .store = "s3", .bucket = "bkt", .prefix = "train/",
			       .created_ms = 1700000000123 };
	struct snap_writer *w;
	int fd = open(path, O_WRONLY | O_TRUNC);

	CHECK(fd >= 0);
	CHECK_EQ_INT(snap_writer_new(fd, &m, &w), 0);
	CHECK_EQ_INT(snap_writer_add(w, "", 0, 0, 5, "\"d41d8cd98f00b204e9800998ecf8427e\"", NULL,
				     0), 0);
	for (unsigned i = 0; i < n; i++) {
		char k[64], e[64], v[32];
		int vl = i % 11 == 0 ? snprintf(v, sizeof(v), "ver.%u", i) : 0;

		key_of(i, k, sizeof(k));
		etag_of(i, e, sizeof(e));
		CHECK_EQ_INT(snap_writer_add(w, k, strlen(k), (uint64_t)i * 1000003,
					     1700000000000 + (int64_t)(i % 13) * 1000 - 5000, e,
					     v, (size_t)vl), 0);
	}
	CHECK_EQ_INT(snap_writer_count(w), n + 1);
	CHECK_EQ_INT(snap_writer_finish(w), 0);
	snap_writer_free(w);
	close(fd);
}

static void t_roundtrip(void)
{
	char *path = tmpfile_path(), msg[256];
	struct snap *s;
	struct snap_cursor c;
	struct snap_entry e;
	unsigned i = 0;

	write_file(path, N_KEYS);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(snap_count(s), N_KEYS + 1);
	CHECK_STR(snap_meta(s)->bucket, "bkt");
	CHECK_STR(snap_meta(s)->prefix, "train/");
	CHECK_STR(snap_meta(s)->store, "s3");
	CHECK_EQ_INT(snap_meta(s)->created_ms, 1700000000123);
	snap_seek(&c, s, NULL, 0);
	CHECK_EQ_INT(snap_next(&c, &e), 1);
	CHECK_EQ_INT(e.key_len, 0);
	CHECK_EQ_INT(e.mtime_ms, 5);
	while (snap_next(&c, &e) == 1) {
		char k[64], et[64], v[32];

		key_of(i, k, sizeof(k));
		etag_of(i, et, sizeof(et));
		if (e.key_len != strlen(k) || memcmp(e.key, k, e.key_len) || strcmp(e.etag, et) ||
		    e.size != (uint64_t)i * 1000003 ||
		    e.mtime_ms != 1700000000000 + (int64_t)(i % 13) * 1000 - 5000)
			harness_fail(__FILE__, __LINE__, "entry %u: %s %s %llu", i, e.key, e.etag,
				     (unsigned long long)e.size);
		if (i % 11 == 0) {
			snprintf(v, sizeof(v), "ver.%u", i);
			CHECK(e.version && e.version_len == strlen(v) &&
			      memcmp(e.version, v, e.version_len) == 0);
		} else {
			CHECK(e.version == NULL);
		}
		i++;
	}
	CHECK_EQ_INT(i, N_KEYS);
	snap_close(s);
	unlink(path);
}

static void t_find_and_seek(void)
{
	char *path = tmpfile_path(), msg[256], k[64];
	struct snap *s;
	struct snap_cursor c;
	struct snap_entry e;

	write_file(path, N_KEYS);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), 0);
	for (unsigned i = 0; i < N_KEYS; i++) {
		key_of(i, k, sizeof(k));
		if (snap_find(&c, s, k, strlen(k), &e) != 1 || e.size != (uint64_t)i * 1000003)
			harness_fail(__FILE__, __LINE__, "find %s", k);
	}
	/* Absent keys: before all, between two, a prefix of one, after all. */
	CHECK_EQ_INT(snap_find(&c, s, "a", 1, &e), 0);
	CHECK_EQ_INT(snap_find(&c, s, "d000/f00000.jp", 14, &e), 0);
	CHECK_EQ_INT(snap_find(&c, s, "d000/f00000.jpg0", 16, &e), 0);
	CHECK_EQ_INT(snap_find(&c, s, "zzz", 3, &e), 0);
	CHECK_EQ_INT(snap_find(&c, s, "", 0, &e), 1);
	/* Seek lands on the first key >= the target: a directory's first entry. */
	snap_seek(&c, s, "d005/", 5);
	CHECK_EQ_INT(snap_next(&c, &e), 1);
	CHECK_STR(e.key, "d005/f00500.jpg");
	snap_seek(&c, s, "d004/g", 6);          /* past d004's files: d005's first */
	CHECK_EQ_INT(snap_next(&c, &e), 1);
	CHECK_STR(e.key, "d005/f00500.jpg");
	snap_seek(&c, s, "e", 1);
	CHECK_EQ_INT(snap_next(&c, &e), 0);
	snap_close(s);
	unlink(path);
}

static void t_empty(void)
{
	char *path = tmpfile_path(), msg[256];
	struct snap_meta m = { .store = "s3", .bucket = "b", .prefix = "" };
	struct snap_writer *w;
	struct snap *s;
	struct snap_cursor c;
	struct snap_entry e;
	int fd = open(path, O_WRONLY | O_TRUNC);

	CHECK_EQ_INT(snap_writer_new(fd, &m, &w), 0);
	CHECK_EQ_INT(snap_writer_finish(w), 0);
	snap_writer_free(w);
	close(fd);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), 0);
	CHECK_EQ_INT(snap_count(s), 0);
	CHECK_EQ_INT(snap_find(&c, s, "x", 1, &e), 0);
	snap_seek(&c, s, NULL, 0);
	CHECK_EQ_INT(snap_next(&c, &e), 0);
	snap_close(s);
	unlink(path);
}

static void t_writer_refuses_disorder(void)
{
	struct snap_meta m = { .store = "s3", .bucket = "b", .prefix = "" };
	struct snap_writer *w;
	int fd = open("/dev/null", O_WRONLY);
	char big[SNAP_KEY_MAX + 1];

	CHECK_EQ_INT(snap_writer_new(fd, &m, &w), 0);
	CHECK_EQ_INT(snap_writer_add(w, "b", 1, 1, 0, "\"x\"", NULL, 0), 0);
	CHECK_EQ_INT(snap_writer_add(w, "a", 1, 1, 0, "\"x\"", NULL, 0), -EINVAL);
	CHECK_EQ_INT(snap_writer_add(w, "b", 1, 1, 0, "\"x\"", NULL, 0), -EINVAL);
	memset(big, 'z', sizeof(big));
	CHECK_EQ_INT(snap_writer_add(w, big, sizeof(big), 1, 0, "\"x\"", NULL, 0), -EINVAL);
	CHECK_EQ_INT(snap_writer_add(w, "ba", 2, 1, 0, "\"x\"", NULL, 0), 0);
	snap_writer_free(w);
	close(fd);
}

static unsigned char *slurp(const char *path, size_t *len)
{
	struct stat st;
	unsigned char *b;
	int fd = open(path, O_RDONLY);

	fstat(fd, &st);
	b = malloc((size_t)st.st_size);
	CHECK(read(fd, b, (size_t)st.st_size) == st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return b;
}

static void put_file(const char *path, const void *b, size_t len)
{
	int fd = open(path, O_WRONLY | O_TRUNC);

	CHECK(write(fd, b, len) == (ssize_t)len);
	close(fd);
}

/* Each damage is refused with its own words, and nothing is opened. */
static void t_damage(void)
{
	char *path = tmpfile_path(), msg[256];
	struct snap *s = NULL;
	unsigned char *orig, *b;
	size_t len;

	write_file(path, N_KEYS);
	orig = slurp(path, &len);
	b = malloc(len);

	put_file(path, orig, len / 2);                          /* truncated */
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "truncated") != NULL);
	put_file(path, orig, 100);                              /* inside the header */
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "truncated") != NULL);

	memcpy(b, orig, len);                                   /* a body byte */
	b[len / 2] ^= 0x40;
	put_file(path, b, len);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "checksum mismatch") != NULL);

	memcpy(b, orig, len);                                   /* a header byte */
	b[30] ^= 1;
	put_file(path, b, len);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "header checksum") != NULL);

	memcpy(b, orig, len);                                   /* another version */
	b[8] = 7;
	put_file(path, b, len);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EPROTO);
	CHECK(strstr(msg, "version 7") != NULL);

	put_file(path, "hello world, not a snapshot at all", 34);
	CHECK_EQ_INT(snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)), -EBADMSG);
	CHECK(strstr(msg, "not a feedfs snapshot") != NULL);

	CHECK_EQ_INT(snap_open("/nonexistent/x.snap", 0, &s, msg, sizeof(msg)), -ENOENT);
	CHECK(strstr(msg, "/nonexistent/x.snap") != NULL);

	/* Without the CRCs (the fuzzer's way), every single-byte change after
	 * the header either opens into a snapshot that decodes to its end or is
	 * refused: never a crash (ASan watches). */
	for (size_t i = 128; i < len; i += 7) {
		memcpy(b, orig, len);
		b[i] ^= 0xff;
		if (snap_open_mem(b, len, SNAP_OPEN_NO_CRC | (i % 2 ? SNAP_OPEN_ENTRIES : 0), &s, msg,
				  sizeof(msg)) == 0) {
			struct snap_cursor c;
			struct snap_entry e;

			snap_seek(&c, s, NULL, 0);
			while (snap_next(&c, &e) == 1)
				;
			snap_find(&c, s, "d003/f00333.jpg", 15, &e);
			snap_close(s);
		}
	}
	free(b);
	free(orig);
	unlink(path);
}

static const struct test tests[] = {
	TEST(t_roundtrip),
	TEST(t_find_and_seek),
	TEST(t_empty),
	TEST(t_writer_refuses_disorder),
	TEST(t_damage),
	{ 0 },
};

int main(void)
{
	return harness_run("snap", tests);
}
