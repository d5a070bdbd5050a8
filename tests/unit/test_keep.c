/*
 * Unit tests for the keeper's shared region (src/keep/state.c): what one
 * server writes (the INIT, node numbers, handles) is what a successor that
 * maps the same memfd reads; a region of another size or layout is refused.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "feedfs/keep.h"
#include "../../src/keep/keep_i.h"
#include "harness.h"

static int region(void)
{
	int fd = memfd_create("test-keep", MFD_CLOEXEC);

	CHECK(fd >= 0);
	CHECK_EQ_INT(ftruncate(fd, (off_t)keep_region_bytes()), 0);
	return fd;
}

static void t_successor_sees_what_the_first_server_wrote(void)
{
	static const char init[] = "\x68\0\0\0\x1a\0\0\0fake INIT bytes";
	int fd = region();
	struct keep *a, *b;
	const char *path;
	char etag[KEEP_ETAG_MAX], buf[KEEP_INIT_MAX];
	uint64_t ino, size;
	size_t len;
	int is_dir;
	int64_t fh1, fh2, fh3;

	CHECK_EQ_INT(keep_open(fd, &a), 0);
	keep_save_init(a, init, sizeof(init));
	keep_log_node(a, 77, "train/c0", 8, 1);
	keep_log_node(a, 78, "train/c0/\xe5\x9b\xbe.jpg", 15, 0);
	keep_log_node(a, 77, "train/c0", 8, 1);     /* logged again after a forget */
	fh1 = keep_handle_open(a, KEEP_FILE, 78, 4096, "\"e1\"");
	fh2 = keep_handle_open(a, KEEP_DIR, 77, 0, NULL);
	fh3 = keep_handle_open(a, KEEP_FILE, 78, 4096, "\"e1\"");
	CHECK(fh1 > 0 && fh2 > 0 && fh3 > 0 && fh1 != fh2 && fh2 != fh3);
	keep_handle_close(a, (uint64_t)fh3);
	CHECK_EQ_INT(keep_find_node(a, 77, &path, &len, &is_dir), 1);
	CHECK_EQ_INT(keep_find_node(a, 79, &path, &len, &is_dir), 0);
	keep_close(a);

	CHECK_EQ_INT(keep_open(fd, &b), 0);
	CHECK_EQ_INT(keep_init(b, buf, sizeof(buf)), sizeof(init));
	CHECK(memcmp(buf, init, sizeof(init)) == 0);
	CHECK_EQ_INT(keep_find_node(b, 78, &path, &len, &is_dir), 1);
	CHECK_EQ_INT(len, 15);
	CHECK(memcmp(path, "train/c0/\xe5\x9b\xbe.jpg", 15) == 0);
	CHECK_EQ_INT(is_dir, 0);
	CHECK_EQ_INT(keep_find_node(b, 77, &path, &len, &is_dir), 1);
	CHECK_EQ_INT(is_dir, 1);
	CHECK_EQ_INT(keep_find_node(b, 79, &path, &len, &is_dir), 0);
	CHECK_EQ_INT(keep_handle_get(b, (uint64_t)fh1, KEEP_FILE, &ino, &size, etag), 0);
	CHECK_EQ_INT(ino, 78);
	CHECK_EQ_INT(size, 4096);
	CHECK(strcmp(etag, "\"e1\"") == 0);
	CHECK_EQ_INT(keep_handle_get(b, (uint64_t)fh2, KEEP_DIR, &ino, &size, NULL), 0);
	CHECK_EQ_INT(ino, 77);
	/* Wrong kind, closed, out of range: not a handle. */
	CHECK_EQ_INT(keep_handle_get(b, (uint64_t)fh2, KEEP_FILE, &ino, &size, etag), -EBADF);
	CHECK_EQ_INT(keep_handle_get(b, (uint64_t)fh3, KEEP_FILE, &ino, &size, etag), -EBADF);
	CHECK_EQ_INT(keep_handle_get(b, 0, KEEP_FILE, &ino, &size, etag), -EBADF);
	CHECK_EQ_INT(keep_handle_get(b, KEEP_SLOTS + 1, KEEP_FILE, &ino, &size, etag), -EBADF);
	/* The successor's own handles never reuse a slot still open. */
	for (int i = 0; i < 100; i++) {
		int64_t fh = keep_handle_open(b, KEEP_FILE, 1, 1, "x");

		CHECK(fh != fh1 && fh != fh2);
	}
	keep_close(b);
	close(fd);
}

/* The soak's growth: each forget and lookup logged its node again, and the
 * slot allocator walked through every slot. Now a node is logged once per
 * (id, path), and a closed slot is the next one given out. */
static void t_log_and_slots_do_not_grow_with_reuse(void)
{
	int fd = region();
	struct keep *a, *b;
	const char *path;
	size_t len;
	int is_dir;
	uint64_t once;
	int64_t fh, keepopen;

	CHECK_EQ_INT(keep_open(fd, &a), 0);
	for (int i = 0; i < 5000; i++) {
		char p[32];
		int n = snprintf(p, sizeof(p), "d/f%d", i);

		keep_log_node(a, 100 + (uint64_t)i, p, (size_t)n, 0);
	}
	once = keep_log_bytes(a);
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 5000; i++) {
			char p[32];
			int n = snprintf(p, sizeof(p), "d/f%d", i);

			keep_log_node(a, 100 + (uint64_t)i, p, (size_t)n, 0);
		}
	CHECK_EQ_INT(keep_log_bytes(a), once);
	/* The same id for another path (a number reused after a forget) is
	 * logged, and the successor maps the id to the newer path. */
	keep_log_node(a, 100, "d/other", 7, 0);
	CHECK(keep_log_bytes(a) > once);
	keepopen = keep_handle_open(a, KEEP_FILE, 7, 1, "e");
	CHECK_EQ_INT(keepopen, 1);
	for (int i = 0; i < 100000; i++) {
		fh = keep_handle_open(a, KEEP_FILE, 7, 1, "e");
		CHECK_EQ_INT(fh, 2);
		keep_handle_close(a, (uint64_t)fh);
	}
	CHECK_EQ_INT(keep_slots_hwm(a), 2);
	keep_close(a);

	CHECK_EQ_INT(keep_open(fd, &b), 0);
	CHECK_EQ_INT(keep_find_node(b, 100, &path, &len, &is_dir), 1);
	CHECK_EQ_INT(len, 7);
	CHECK(memcmp(path, "d/other", 7) == 0);
	CHECK_EQ_INT(keep_find_node(b, 5099, &path, &len, &is_dir), 1);
	/* Slot 1 is still open (the kernel holds it): the successor skips it. */
	CHECK_EQ_INT(keep_handle_open(b, KEEP_DIR, 8, 0, NULL), 2);
	CHECK_EQ_INT(keep_handle_open(b, KEEP_DIR, 8, 0, NULL), 3);
	keep_handle_close(b, 1);
	CHECK_EQ_INT(keep_handle_open(b, KEEP_DIR, 8, 0, NULL), 1);
	keep_close(b);
	close(fd);
}

/* A region written before the high-water mark existed (mark 0): the
 * successor finds the open slots on the pages that hold data. */
static void t_region_without_mark_is_scanned(void)
{
	int fd = region();
	struct keep *a, *b;
	int64_t fh;
	uint32_t zero = 0;
	off_t hwm_off = 8 + 4 + 4 + 8 + 4;  /* magic, version, init_len, log_tail, log_full */

	CHECK_EQ_INT(keep_open(fd, &a), 0);
	for (int i = 0; i < 3000; i++)
		CHECK((fh = keep_handle_open(a, KEEP_FILE, 7, 1, "e")) > 0);
	for (int i = 1; i < 3000; i++)
		keep_handle_close(a, (uint64_t)i);
	keep_close(a);
	CHECK_EQ_INT(pwrite(fd, &zero, sizeof(zero), hwm_off), sizeof(zero));
	CHECK_EQ_INT(keep_open(fd, &b), 0);
	CHECK_EQ_INT(keep_slots_hwm(b), 3000);
	for (int i = 0; i < 2999; i++)
		CHECK(keep_handle_open(b, KEEP_FILE, 7, 1, "e") != 3000);
	CHECK_EQ_INT(keep_handle_open(b, KEEP_FILE, 7, 1, "e"), 3001);
	keep_close(b);
	close(fd);
}

static void t_slots_run_out_with_enfile(void)
{
	int fd = region();
	struct keep *k;
	int64_t fh = 0;

	CHECK_EQ_INT(keep_open(fd, &k), 0);
	for (unsigned i = 0; i < KEEP_SLOTS; i++) {
		fh = keep_handle_open(k, KEEP_FILE, i, 1, "e");
		if (fh < 0)
			break;
	}
	CHECK(fh > 0);
	CHECK_EQ_INT(keep_handle_open(k, KEEP_FILE, 1, 1, "e"), -ENFILE);
	keep_handle_close(k, 5);
	CHECK_EQ_INT(keep_handle_open(k, KEEP_DIR, 1, 0, NULL), 5);
	keep_close(k);
	close(fd);
}

static void t_foreign_regions_are_refused(void)
{
	int fd = memfd_create("test-keep-small", MFD_CLOEXEC);
	struct keep *k;
	uint64_t bad = 0x1122334455667788ull;

	CHECK_EQ_INT(ftruncate(fd, 4096), 0);
	CHECK_EQ_INT(keep_open(fd, &k), -EINVAL);
	close(fd);
	fd = region();
	CHECK_EQ_INT(pwrite(fd, &bad, sizeof(bad), 0), sizeof(bad));
	CHECK_EQ_INT(keep_open(fd, &k), -EPROTO);
	close(fd);
}

static const struct test tests[] = {
	TEST(t_successor_sees_what_the_first_server_wrote),
	TEST(t_log_and_slots_do_not_grow_with_reuse),
	TEST(t_region_without_mark_is_scanned),
	TEST(t_slots_run_out_with_enfile),
	TEST(t_foreign_regions_are_refused),
	{ NULL, NULL },
};

int main(void)
{
	return harness_run("keep", tests);
}
