/*
 * test_promote — promoted files (src/cache/promote.c) and the cache's
 * cached-only fetch they are built from (cache_fetch_cached).
 *
 * Each test has its own cache dir under /tmp. The cache sits on the shared
 * fake fetcher (fake_fetch.h), whose bytes are a pure function of (key,
 * ETag, offset), so every promoted byte can be checked, and whose call count
 * shows that building a file never asked the store for anything.
 */
#include "fake_fetch.h"
#include "harness.h"

#include "feedfs/cache.h"
#include "feedfs/log.h"
#include "feedfs/promote.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KB 1024ull
#define TBS (64 * 1024u)

static char tdir[256];
static int tcount;

static void rm_tree(const char *d)
{
	char cmd[600];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	if (system(cmd) != 0)
		harness_fail(__FILE__, __LINE__, "cannot remove %s", d);
}

static const char *new_dir(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/feedfs-promote-test.%d.%d", (int)getpid(), tcount++);
	rm_tree(tdir);
	CHECK(mkdir(tdir, 0700) == 0);
	return tdir;
}

static void put_file(const char *dir, const char *name, size_t size, time_t mtime)
{
	char p[512], *buf = calloc(1, size ? size : 1);
	struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };
	int fd;

	snprintf(p, sizeof(p), "%s/" PROMOTE_DIR "/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	CHECK(write(fd, buf, size) == (ssize_t)size);
	CHECK(futimens(fd, ts) == 0);
	close(fd);
	free(buf);
}

static int exists(const char *dir, const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/" PROMOTE_DIR "/%s", dir, name);
	return access(p, F_OK) == 0;
}

static struct promote *open_promote(const char *dir, uint64_t max, struct cache *c, int clear)
{
	struct promote_config cfg = { .cache_dir = dir, .bucket = "bkt", .max_bytes = max,
				      .cache = c, .chunk = TBS, .clear = clear };
	struct promote *p = NULL;
	int rc = promote_new(&cfg, &p);

	if (rc < 0)
		harness_fail(__FILE__, __LINE__, "promote_new: %d", rc);
	return p;
}

/* ---- names ---- */

static void t_names(void)
{
	static const struct { const char *bucket, *key, *etag; } v[] = {
		{ "bkt", "a/b.jpg", "\"e1\"" },
		{ "bkt", "a/b.jpg", "\"e2\"" },          /* a new version: another file */
		{ "bkt", "a/b.jpgx", "\"e1\"" },
		{ "bkx", "a/b.jpg", "\"e1\"" },
		{ "bkt", "ab", "c" },                    /* fields are length-delimited */
		{ "bkt", "a", "bc" },
		{ "", "k", "e" },
	};
	char names[sizeof(v) / sizeof(v[0])][PROMOTE_NAME_LEN + 1], again[PROMOTE_NAME_LEN + 1];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		promote_name(v[i].bucket, v[i].key, strlen(v[i].key), v[i].etag, names[i]);
		CHECK_EQ_INT(strlen(names[i]), PROMOTE_NAME_LEN);
		CHECK_EQ_INT(strspn(names[i], "0123456789abcdef"), PROMOTE_NAME_LEN);
		promote_name(v[i].bucket, v[i].key, strlen(v[i].key), v[i].etag, again);
		CHECK_STR(again, names[i]);
		for (size_t j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				harness_fail(__FILE__, __LINE__, "rows %zu and %zu share a name", i, j);
	}
	promote_name(NULL, "k", 1, "e", again);      /* NULL bucket is "" */
	CHECK_STR(again, names[6]);
}

/* ---- the directory at start ---- */

static void t_scan_keeps_ours_and_drops_temporaries(void)
{
	const char *d = new_dir();
	char a[PROMOTE_NAME_LEN + 1], b[PROMOTE_NAME_LEN + 1], p[512];
	struct promote_stats st;
	struct promote *pr;
	int fd;

	snprintf(p, sizeof(p), "%s/" PROMOTE_DIR, d);
	CHECK(mkdir(p, 0700) == 0);
	promote_name("bkt", "a", 1, "ea", a);
	promote_name("bkt", "b", 1, "eb", b);
	put_file(d, a, 1000, 1000);
	put_file(d, b, 2000, 2000);
	put_file(d, ".t-0123", 10, 3000);            /* a build cut short */
	put_file(d, "README", 5, 3000);              /* not ours: left alone */
	pr = open_promote(d, 1 << 20, NULL, 0);
	promote_get_stats(pr, &st);
	CHECK_EQ_INT(st.files, 2);
	CHECK_EQ_INT(st.bytes, 3000);
	CHECK(!exists(d, ".t-0123"));
	CHECK(exists(d, "README"));

	fd = promote_open(pr, "a", 1, "ea", 1000);
	CHECK(fd >= 0);
	if (fd >= 0)
		close(fd);
	CHECK_EQ_INT(promote_open(pr, "a", 1, "ea", 999), -ENOENT);     /* another size */
	CHECK_EQ_INT(promote_open(pr, "a", 1, "eb", 1000), -ENOENT);    /* another version */
	CHECK_EQ_INT(promote_open(pr, "c", 1, "ec", 1), -ENOENT);
	CHECK_EQ_INT(promote_open(pr, "a", 1, "", 1000), -ENOENT);
	promote_destroy(pr);

	pr = open_promote(d, 1 << 20, NULL, 1);      /* clear */
	promote_get_stats(pr, &st);
	CHECK_EQ_INT(st.files, 0);
	CHECK(!exists(d, a) && !exists(d, b));
	CHECK(exists(d, "README"));
	promote_destroy(pr);
	rm_tree(d);
}

static void t_scan_evicts_oldest_beyond_the_bound(void)
{
	const char *d = new_dir();
	char n[4][PROMOTE_NAME_LEN + 1], p[512];
	struct promote_stats st;
	struct promote *pr;

	snprintf(p, sizeof(p), "%s/" PROMOTE_DIR, d);
	CHECK(mkdir(p, 0700) == 0);
	for (int i = 0; i < 4; i++) {
		char key[16];

		snprintf(key, sizeof(key), "k%d", i);
		promote_name("bkt", key, strlen(key), "e", n[i]);
		put_file(d, n[i], 1000, 1000 + i);   /* k3 newest */
	}
	pr = open_promote(d, 2500, NULL, 0);         /* room for two */
	promote_get_stats(pr, &st);
	CHECK_EQ_INT(st.files, 2);
	CHECK_EQ_INT(st.evictions, 2);
	CHECK(!exists(d, n[0]) && !exists(d, n[1]));
	CHECK(exists(d, n[2]) && exists(d, n[3]));
	promote_destroy(pr);
	rm_tree(d);
}

/* ---- building from the cache ---- */

struct rig {
	struct fake_fetch fk;
	struct cache *c;
	struct promote *p;
	const char *dir;
};

static void rig_open_bs(struct rig *r, uint64_t promote_max, uint32_t bs)
{
	struct cache_config cfg = { .bucket = "bkt", .block_size = bs, .size_bytes = 64 * (uint64_t)bs,
				    .buffer_bytes = 16 * (uint64_t)bs, .no_direct = 1 };
	char msg[256] = "";

	r->dir = new_dir();
	fake_fetch_init(&r->fk, 2, 0);
	cfg.dir = r->dir;
	cfg.inner = &r->fk.base;
	r->c = NULL;
	if (cache_new(&cfg, &r->c, msg, sizeof(msg)) < 0)
		harness_fail(__FILE__, __LINE__, "cache_new: %s", msg);
	r->p = r->c ? open_promote(r->dir, promote_max, r->c, 0) : NULL;
}

static void rig_open(struct rig *r, uint64_t promote_max)
{
	rig_open_bs(r, promote_max, TBS);
}

static void rig_close(struct rig *r)
{
	promote_destroy(r->p);
	cache_destroy(r->c);
	fake_fetch_fini(&r->fk);
	rm_tree(r->dir);
}

struct wait1 {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
	ssize_t res;
	struct fetch_req fr;
};

static void wait1_done(struct fetch_req *fr, ssize_t res)
{
	struct wait1 *w = fr->done_arg;

	pthread_mutex_lock(&w->m);
	w->res = res;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

/* One read of [off, off+len) of (key, etag, size): through the cache's
 * fetcher, or cached-only. */
static ssize_t fetch1(struct cache *c, int cached_only, const char *key, const char *etag,
		      uint64_t size, uint64_t off, size_t len, void *buf)
{
	struct wait1 w = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int rc;

	w.fr = (struct fetch_req){ .key = key, .key_len = strlen(key), .etag = etag,
				   .obj_size = size, .off = off, .len = len, .buf = buf,
				   .done = wait1_done, .done_arg = &w };
	rc = cached_only ? cache_fetch_cached(c, &w.fr) : fetcher_fetch(cache_fetcher(c), &w.fr);
	if (rc < 0)
		return rc;
	pthread_mutex_lock(&w.m);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.m);
	pthread_mutex_unlock(&w.m);
	return w.res;
}

static void read_whole(struct rig *r, const char *key, const char *etag, uint64_t size)
{
	char *buf = malloc(TBS);

	for (uint64_t off = 0; off < size; off += TBS) {
		size_t len = size - off < TBS ? (size_t)(size - off) : TBS;

		CHECK_EQ_INT(fetch1(r->c, 0, key, etag, size, off, len, buf), len);
	}
	cache_sync(r->c);
	free(buf);
}

/* The promoted file of (key, etag) holds exactly the object's bytes. */
static int file_is_object(struct promote *p, const char *key, const char *etag, uint64_t size)
{
	int fd = promote_open(p, key, strlen(key), etag, size), ok;
	char *buf;

	if (fd < 0)
		return 0;
	buf = malloc(size + 1);
	ok = pread(fd, buf, size + 1, 0) == (ssize_t)size &&
	     fake_fetch_check(buf, key, etag, 0, size);
	free(buf);
	close(fd);
	return ok;
}

static void t_fetch_cached_refuses_what_is_not_cached(void)
{
	struct rig r;
	char *buf = malloc(4 * TBS);
	uint64_t size = 3 * TBS + 100, calls;

	rig_open(&r, 1 << 20);
	fake_fetch_add(&r.fk, "o", size, "e1");
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", size, 0, size, buf), -ENODATA);
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), 0);
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "", size, 0, size, buf), -EINVAL);
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", FETCH_SIZE_UNKNOWN, 0, 10, buf), -EINVAL);
	/* Blocks 0 and 1 cached (no pieces at this block size): a range within
	 * them is served, the whole object (block 2 and 3 missing) is not. */
	CHECK_EQ_INT(fetch1(r.c, 0, "o", "e1", size, 10, TBS + 100, buf), TBS + 100);
	cache_sync(r.c);
	calls = fake_fetch_calls(&r.fk);
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", size, 0, 2 * TBS, buf), 2 * TBS);
	CHECK(fake_fetch_check(buf, "o", "e1", 0, 2 * TBS));
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", size, 0, size, buf), -ENODATA);
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", size, 2 * TBS, 10, buf), -ENODATA);
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);
	read_whole(&r, "o", "e1", size);
	calls = fake_fetch_calls(&r.fk);
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e1", size, 0, size, buf), size);
	CHECK(fake_fetch_check(buf, "o", "e1", 0, size));
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);
	/* Another ETag is another object: nothing cached. */
	CHECK_EQ_INT(fetch1(r.c, 1, "o", "e2", size, 0, size, buf), -ENODATA);
	rig_close(&r);
	free(buf);
}

/* With blocks larger than pieces (128 KiB), a block a random reader cached
 * piece by piece counts when every piece is here, and is read piece by piece
 * (found as a promotion that never completed on a 256 MiB object whose first
 * block a cold dd had fetched as pieces). */
static void t_fetch_cached_takes_blocks_held_as_pieces(void)
{
	const uint32_t bs = 512 * 1024, piece = 128 * 1024;
	const uint64_t size = 2 * (uint64_t)bs + 1000;
	char *buf = malloc(size);
	struct cache_stats cs;
	struct rig r;
	uint64_t calls;

	rig_open_bs(&r, 64 * (uint64_t)bs, bs);
	fake_fetch_add(&r.fk, "p", size, "e");
	/* Block 0: three of its four pieces, by small random reads. */
	for (int i = 0; i < 3; i++)
		CHECK_EQ_INT(fetch1(r.c, 0, "p", "e", size, (uint64_t)i * piece + 7, 100, buf), 100);
	/* Blocks 1 and 2 (short) whole. */
	CHECK_EQ_INT(fetch1(r.c, 0, "p", "e", size, bs, size - bs, buf), size - bs);
	cache_sync(r.c);
	cache_get_stats(r.c, &cs);
	CHECK(cs.pieces >= 3);
	calls = fake_fetch_calls(&r.fk);
	CHECK_EQ_INT(fetch1(r.c, 1, "p", "e", size, 0, bs, buf), -ENODATA);
	CHECK_EQ_INT(fetch1(r.c, 1, "p", "e", size, bs, size - bs, buf), size - bs);
	CHECK(fake_fetch_check(buf, "p", "e", bs, size - bs));
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);
	/* The fourth piece: now block 0 is here, as pieces. */
	CHECK_EQ_INT(fetch1(r.c, 0, "p", "e", size, 3 * piece + 7, 100, buf), 100);
	cache_sync(r.c);
	calls = fake_fetch_calls(&r.fk);
	CHECK_EQ_INT(fetch1(r.c, 1, "p", "e", size, 0, size, buf), size);
	CHECK(fake_fetch_check(buf, "p", "e", 0, size));
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);
	promote_want(r.p, "p", 1, "e", size);
	promote_drain(r.p);
	CHECK(file_is_object(r.p, "p", "e", size));
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);
	rig_close(&r);
	free(buf);
}

static void t_promotes_only_whole_objects_and_never_fetches(void)
{
	static const struct { const char *key; uint64_t size; int read_whole, promoted; } v[] = {
		{ "small.jpg", 5000, 1, 1 },                 /* inside one block */
		{ "edge.bin", 2 * TBS, 1, 1 },               /* exactly two blocks */
		{ "three.bin", 3 * TBS + 17, 1, 1 },         /* short last block */
		{ "cold.bin", 2 * TBS, 0, 0 },               /* never read */
		{ "big.bin", 40 * TBS, 1, 0 },               /* above max_bytes / 2 */
	};
	struct promote_stats st;
	struct rig r;
	uint64_t calls;
	int want_promoted = 0;

	rig_open(&r, 64 * TBS);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		fake_fetch_add(&r.fk, v[i].key, v[i].size, "e");
		if (v[i].read_whole)
			read_whole(&r, v[i].key, "e", v[i].size);
		want_promoted += v[i].promoted;
	}
	calls = fake_fetch_calls(&r.fk);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		promote_want(r.p, v[i].key, strlen(v[i].key), "e", v[i].size);
	promote_want(r.p, "small.jpg", 9, "e", 5000);       /* a duplicate: ignored */
	promote_want(r.p, "empty", 5, "e", 0);              /* nothing to pass through */
	promote_want(r.p, "noetag", 6, "", 10);
	promote_drain(r.p);
	CHECK_EQ_INT(fake_fetch_calls(&r.fk), calls);       /* the store was not asked */
	promote_get_stats(r.p, &st);
	CHECK_EQ_INT(st.promotions, want_promoted);
	CHECK_EQ_INT(st.not_cached, 1);
	CHECK_EQ_INT(st.failures, 0);
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		int ok = file_is_object(r.p, v[i].key, "e", v[i].size);

		if (ok != v[i].promoted)
			harness_fail(__FILE__, __LINE__, "%s: promoted %d, want %d", v[i].key, ok,
				     v[i].promoted);
	}
	CHECK_EQ_INT(st.bytes, 5000 + 2 * TBS + 3 * TBS + 17);
	rig_close(&r);
}

/* A rig with room for three promoted files of size bytes: keys[0..3] read
 * whole through the cache, keys[0..2] promoted in that order. */
static void rig_three_of_four(struct rig *r, const char *const keys[4], uint64_t size)
{
	rig_open(r, 6 * TBS + 1);
	for (int i = 0; i < 4; i++) {
		fake_fetch_add(&r->fk, keys[i], size, "e");
		read_whole(r, keys[i], "e", size);
	}
	for (int i = 0; i < 3; i++) {
		promote_want(r->p, keys[i], 1, "e", size);
		promote_drain(r->p);
	}
}

static void t_least_recently_opened_goes_first(void)
{
	struct promote_stats st;
	struct rig r;
	const uint64_t size = 2 * TBS;
	const char *keys[] = { "a", "b", "c", "d" };
	int fd;

	rig_three_of_four(&r, keys, size);
	fd = promote_open(r.p, "a", 1, "e", size);          /* a is used: b is the oldest */
	CHECK(fd >= 0);
	promote_want(r.p, "d", 1, "e", size);
	promote_drain(r.p);
	promote_get_stats(r.p, &st);
	CHECK_EQ_INT(st.promotions, 4);
	CHECK_EQ_INT(st.evictions, 1);
	CHECK_EQ_INT(st.files, 3);
	CHECK(file_is_object(r.p, "a", "e", size));
	CHECK(!file_is_object(r.p, "b", "e", size));
	CHECK(file_is_object(r.p, "c", "e", size));
	CHECK(file_is_object(r.p, "d", "e", size));
	if (fd >= 0) {                                       /* an open file outlives eviction */
		char *buf = malloc(size);

		CHECK_EQ_INT(pread(fd, buf, size, 0), size);
		CHECK(fake_fetch_check(buf, "a", "e", 0, size));
		free(buf);
		close(fd);
	}
	rig_close(&r);
}

struct heard {
	int calls;
	char name[PROMOTE_NAME_LEN + 1];
};

static void hear_eviction(void *arg, const char *name)
{
	struct heard *h = arg;

	h->calls++;
	memcpy(h->name, name, sizeof(h->name));
}

/* What passthrough.c's kept backing ids rely on: promote_touch sees exactly
 * the files promote_open would open (and keeps them recent, without I/O),
 * and the eviction hook names every file removed to make room. */
static void t_touch_and_the_eviction_hook(void)
{
	struct heard h = { 0 };
	struct rig r;
	const uint64_t size = 2 * TBS;
	const char *keys[] = { "a", "b", "c", "d" };
	char na[PROMOTE_NAME_LEN + 1], nb[PROMOTE_NAME_LEN + 1];

	rig_three_of_four(&r, keys, size);
	promote_set_evicted(r.p, hear_eviction, &h);
	promote_key_name(r.p, "a", 1, "e", na);
	promote_key_name(r.p, "b", 1, "e", nb);
	CHECK_EQ_INT(promote_touch(r.p, na, size), 0);      /* a is used: b is the oldest */
	CHECK_EQ_INT(promote_touch(r.p, na, size + 1), -ENOENT);
	promote_key_name(r.p, "a", 1, "other-etag", na);
	CHECK_EQ_INT(promote_touch(r.p, na, size), -ENOENT);
	promote_want(r.p, "d", 1, "e", size);
	promote_drain(r.p);
	CHECK_EQ_INT(h.calls, 1);
	CHECK(strcmp(h.name, nb) == 0);
	CHECK_EQ_INT(promote_touch(r.p, nb, size), -ENOENT);
	CHECK(!file_is_object(r.p, "b", "e", size));
	promote_set_evicted(r.p, NULL, NULL);
	rig_close(&r);
}

static const struct test tests[] = {
	TEST(t_names),
	TEST(t_scan_keeps_ours_and_drops_temporaries),
	TEST(t_scan_evicts_oldest_beyond_the_bound),
	TEST(t_fetch_cached_refuses_what_is_not_cached),
	TEST(t_fetch_cached_takes_blocks_held_as_pieces),
	TEST(t_promotes_only_whole_objects_and_never_fetches),
	TEST(t_least_recently_opened_goes_first),
	TEST(t_touch_and_the_eviction_hook),
	{ 0 }
};

int main(void)
{
	log_set_level(LOG_WARNING);
	return harness_run("promote", tests);
}
