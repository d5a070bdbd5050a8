/*
 * test_cache — the block cache over a fake inner fetch (src/cache/).
 *
 * Every test uses its own cache dir under /tmp and the shared fake fetcher
 * (fake_fetch.h) as the inner one: it serves a deterministic pattern per
 * (key, ETag) on its own thread (one worker: in order) and counts calls. FEEDFS_CACHE_BENCH=DIR runs the warm-read measurement instead
 * (see docs/CACHE.md); it is not a test.
 */
#include "fake_fetch.h"
#include "harness.h"

#include "feedfs/cache.h"
#include "feedfs/log.h"

#include "../../src/cache/cksum_i.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* Blocking wrapper over the cache's fetcher (size 0: unknown). */
struct sync_wait {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
	ssize_t res;
	struct fetch_req fr;
};

static void sync_done(struct fetch_req *fr, ssize_t res)
{
	struct sync_wait *w = fr->done_arg;

	pthread_mutex_lock(&w->m);
	w->res = res;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

static ssize_t sync_wait_for(struct sync_wait *w)
{
	pthread_mutex_lock(&w->m);
	while (!w->done)
		pthread_cond_wait(&w->cv, &w->m);
	pthread_mutex_unlock(&w->m);
	pthread_mutex_destroy(&w->m);
	pthread_cond_destroy(&w->cv);
	return w->res;
}

/* Start one request through the cache's fetcher; done goes to w. */
static int cfetch(struct cache *c, const char *key, const char *etag, uint64_t size,
		  uint64_t off, size_t len, void *buf, struct sync_wait *w)
{
	w->fr = (struct fetch_req){
		.key = key, .key_len = strlen(key), .etag = etag,
		.obj_size = size ? size : FETCH_SIZE_UNKNOWN, .off = off, .len = len,
		.buf = buf, .done = sync_done, .done_arg = w,
	};
	return fetcher_fetch(cache_fetcher(c), &w->fr);
}

static ssize_t cread(struct cache *c, const char *key, const char *etag, uint64_t size,
		     uint64_t off, size_t len, void *buf)
{
	struct sync_wait w = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int rc = cfetch(c, key, etag, size, off, len, buf, &w);

	if (rc < 0)
		return rc;
	return sync_wait_for(&w);
}


/* ---- per-test fixture ---- */

#define KB 1024ull
#define MB (1024ull * 1024)
#define GB (1024ull * MB)
#define TBS (64 * 1024u)           /* test block size */

static char tdir[256];
static int tcount;
static int t_no_direct;            /* open_cache: force buffered slab I/O */

static void rm_dir(const char *d)
{
	static const char *const names[] = { "index", "slab", "lock" };
	char p[512];

	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", d, names[i]);
		unlink(p);
	}
	rmdir(d);
}

static const char *new_dir(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/feedfs-cache-test.%d.%d", (int)getpid(), tcount++);
	rm_dir(tdir);
	return tdir;
}

static struct cache *open_cache(struct fake_fetch *f, const char *dir, uint64_t size, uint32_t bs)
{
	struct cache_config cfg = {
		.dir = dir, .size_bytes = size, .block_size = bs, .bucket = "bkt",
		.inner = &f->base, .buffer_bytes = 16 * (uint64_t)bs,
		.no_direct = t_no_direct,
	};
	struct cache *c = NULL;
	char msg[256] = "";
	int rc = cache_new(&cfg, &c, msg, sizeof(msg));

	if (rc < 0)
		harness_fail(__FILE__, __LINE__, "cache_new: %d %s", rc, msg);
	return c;
}

static void stats(struct cache *c, struct cache_stats *s)
{
	cache_get_stats(c, s);
}

/* Reads [0, size) in chunks of `chunk` and checks every byte. */
static int read_all(struct cache *c, const char *key, const char *etag, uint64_t size,
		    size_t chunk, int sized)
{
	char *buf = NULL;
	int ok = 1;

	/* Page-aligned, as the read path's segments: a whole block is then read
	 * straight into it (O_DIRECT or not), its CRC32C checked there. */
	if (posix_memalign((void **)&buf, 4096, chunk) != 0)
		return 0;

	for (uint64_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		ssize_t r = cread(c, key, etag, sized ? size : 0, off, n, buf);

		if (r != (ssize_t)n || !fake_fetch_check(buf, key, etag, off, n)) {
			ok = 0;
			break;
		}
	}
	free(buf);
	return ok;
}

/* ---- tests ---- */

static void t_crc32c(void)
{
	static const struct { const char *in; uint32_t crc; } v[] = {
		{ "", 0 }, { "a", 0xC1D04330 }, { "123456789", 0xE3069283 },
		{ "The quick brown fox jumps over the lazy dog", 0x22620404 },
	};
	char buf[1000];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		CHECK_EQ_INT(cksum_crc32c(0, v[i].in, strlen(v[i].in)), v[i].crc);
		CHECK_EQ_INT(cksum_crc32c_sw(0, v[i].in, strlen(v[i].in)), v[i].crc);
	}
	fake_fetch_pattern(buf, 42, 3, sizeof(buf));
	for (size_t n = 0; n < sizeof(buf); n += 37) {
		CHECK_EQ_INT(cksum_crc32c(0, buf + 1, n), cksum_crc32c_sw(0, buf + 1, n));
		/* incremental == one shot */
		CHECK_EQ_INT(cksum_crc32c(cksum_crc32c(0, buf, n / 2), buf + n / 2, n - n / 2),
			     cksum_crc32c(0, buf, n));
	}
	/* The hardware path's three lanes (256 B .. 64 KiB each) and the
	 * table path agree at every length around the lane sizes, at odd
	 * addresses and from a running CRC. */
	{
		size_t big = (3u << 16) * 2 + 4096;
		char *b = malloc(big + 1);
		static const size_t lens[] = { 767, 768, 769, 3071, 3072, 3080, 12288, 49151,
					       49152, 131072, 131072 + 8, 196607, 196608,
					       196608 + 777, 393216 + 4096 };

		CHECK(b != NULL);
		fake_fetch_pattern(b, 7, 11, big + 1);
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			CHECK(lens[i] <= big);
			CHECK_EQ_INT(cksum_crc32c(0, b + 1, lens[i]), cksum_crc32c_sw(0, b + 1, lens[i]));
			CHECK_EQ_INT(cksum_crc32c(0x12345678u, b, lens[i]),
				     cksum_crc32c_sw(0x12345678u, b, lens[i]));
		}
		free(b);
	}
	/* combined from the parts' CRCs == one shot, for every split */
	for (size_t nb = 0; nb <= sizeof(buf); nb += 61) {
		struct cksum_shift sh;

		cksum_crc32c_shift_init(&sh, nb);
		for (size_t na = 0; na + nb <= sizeof(buf); na += 113)
			CHECK_EQ_INT(cksum_crc32c_combine(&sh, cksum_crc32c(0, buf, na),
							  cksum_crc32c(0, buf + na, nb)),
				     cksum_crc32c(0, buf, na + nb));
	}
}

static void t_hash_fields(void)
{
	struct cksum_h128_state s1, s2;
	struct cksum_h128 a, b, x, y;

	cksum_h128_init(&s1);
	cksum_h128_field(&s1, "ab", 2);
	cksum_h128_field(&s1, "c", 1);
	cksum_h128_init(&s2);
	cksum_h128_field(&s2, "a", 1);
	cksum_h128_field(&s2, "bc", 2);
	a = cksum_h128_final(&s1);
	b = cksum_h128_final(&s2);
	CHECK(a.lo != b.lo || a.hi != b.hi);
	x = cksum_h128_block(a, 0);
	y = cksum_h128_block(a, 1);
	CHECK(x.lo != y.lo && x.hi != y.hi);
	CHECK(x.lo || x.hi);
}

static void t_config_errors(void)
{
	struct fake_fetch f;
	static const struct {
		const char *dir; uint64_t size; uint32_t bs; int no_inner; int rc; const char *word;
	} cases[] = {
		{ NULL, 0, 0, 0, -EINVAL, "directory" },
		{ "D", 1 * MB, 3000, 0, -EINVAL, "power of two" },
		{ "D", 1 * MB, 128 * MB, 0, -EINVAL, "power of two" },
		{ "D", 100 * KB, TBS, 0, -EINVAL, "too small" },
		{ "D", 1ull << 60, TBS, 0, -ENOSPC, "free" },
		{ "D", 1 * MB, TBS, 1, -EINVAL, "fetch" },
		{ "/proc/version/x", 1 * MB, TBS, 0, -ENOTDIR, "cache dir" },
		{ "/proc/feedfs-nope", 1 * MB, TBS, 0, -ENOENT, "cache dir" },
	};

	fake_fetch_init(&f, 1, 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *d = cases[i].dir && !strcmp(cases[i].dir, "D") ? new_dir() : cases[i].dir;
		struct cache_config cfg = { .dir = d, .size_bytes = cases[i].size,
			.block_size = cases[i].bs, .inner = cases[i].no_inner ? NULL : &f.base };
		struct cache *c = (void *)1;
		char msg[256] = "";
		int rc = cache_new(&cfg, &c, msg, sizeof(msg));

		CHECK_EQ_INT(rc, cases[i].rc);
		CHECK(c == NULL);
		if (!strstr(msg, cases[i].word))
			harness_fail(__FILE__, __LINE__, "case %zu: message '%s' lacks '%s'", i, msg,
				     cases[i].word);
		if (d && d == tdir)
			rm_dir(d);
	}
	fake_fetch_fini(&f);
}

static void t_modes_and_names(void)
{
	struct fake_fetch f;
	const char *d = new_dir();
	struct stat st;
	char p[512], buf[100];
	struct cache *c;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 1 * MB, TBS);
	if (!c)
		goto out;
	CHECK_EQ_INT(cread(c, "../../etc/passwd", "\"e\"", 0, 0, sizeof(buf), buf), sizeof(buf));
	CHECK_EQ_INT(stat(d, &st), 0);
	CHECK_EQ_INT(st.st_mode & 0777, 0700);
	static const char *const names[] = { "index", "slab", "lock" };
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/%s", d, names[i]);
		CHECK_EQ_INT(stat(p, &st), 0);
		CHECK_EQ_INT(st.st_mode & 0777, 0600);
	}
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Every byte served equals the source, across block boundaries, sized or not;
 * a second pass is served from disk with no inner fetch. */
static void t_bytes_equal_source(void)
{
	static const struct { uint64_t off; size_t len; } reads[] = {
		{ 0, 1 }, { 0, TBS }, { 1, TBS }, { TBS - 1, 2 }, { 3 * TBS + 100, 5 * TBS + 3 },
		{ 10 * TBS, 64 }, { 10 * TBS + 64, 64 }, { 12 * TBS - 10, 10 },
	};
	const uint64_t size = 12 * TBS;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char *buf = malloc(8 * TBS);

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 64 * TBS, TBS);
	if (!c)
		goto out;
	for (int sized = 0; sized < 2; sized++) {
		const char *key = sized ? "dir/sized" : "dir/unsized";

		for (int pass = 0; pass < 2; pass++) {
			uint64_t calls0 = fake_fetch_calls(&f);

			for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
				memset(buf, 0xAA, reads[i].len);
				CHECK_EQ_INT(cread(c, key, "\"v1\"", sized ? size : 0, reads[i].off,
						   reads[i].len, buf), reads[i].len);
				if (!fake_fetch_check(buf, key, "\"v1\"", reads[i].off, reads[i].len))
					harness_fail(__FILE__, __LINE__, "sized %d pass %d read %zu: wrong bytes",
						     sized, pass, i);
			}
			if (pass == 1)
				CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
		}
	}
	stats(c, &s);
	CHECK(s.hits > 0);
	CHECK(s.bytes_from_disk > 0);
	CHECK_EQ_INT(s.checksum_failures, 0);
	CHECK_EQ_INT(s.inner_fetches, fake_fetch_calls(&f));
	cache_destroy(c);
out:
	free(buf);
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* A second instance over the same dir serves a full re-read with zero fetches. */
static void t_restart_warm(void)
{
	const uint64_t size = 20 * TBS + 777;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 32 * TBS, TBS);
	if (!c)
		goto out;
	CHECK(read_all(c, "warm/obj", "\"a\"", size, 3 * TBS, 1));
	cache_destroy(c);
	CHECK_EQ_INT(fake_fetch_calls(&f), 21);
	t_no_direct = 1;        /* the buffered path reads what O_DIRECT wrote */
	c = open_cache(&f, d, 32 * TBS, TBS);
	t_no_direct = 0;
	if (!c)
		goto out;
	CHECK(read_all(c, "warm/obj", "\"a\"", size, TBS, 1));
	CHECK(read_all(c, "warm/obj", "\"a\"", size, 4096, 0));
	stats(c, &s);
	CHECK_EQ_INT(fake_fetch_calls(&f), 21);
	CHECK_EQ_INT(s.inner_fetches, 0);
	CHECK_EQ_INT(s.recovered_unclean, 0);
	CHECK_EQ_INT(s.direct_io, 0);
	CHECK_EQ_INT(s.blocks_used, 21);
	CHECK(s.hits >= 21);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Flipped bytes in the slab are detected, counted and refetched. */
static void t_corruption_refetched(void)
{
	const uint64_t size = 16 * TBS;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char p[512];
	int fd;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	CHECK(read_all(c, "bad/obj", "\"a\"", size, 2 * TBS, 1));
	cache_destroy(c);
	/* flip one byte in every other slot */
	snprintf(p, sizeof(p), "%s/slab", d);
	fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	for (uint64_t slot = 0; slot < 16; slot += 2) {
		unsigned char b;
		off_t o = (off_t)(slot * TBS + 1000 + slot);

		CHECK_EQ_INT(pread(fd, &b, 1, o), 1);
		b ^= 0x10;
		CHECK_EQ_INT(pwrite(fd, &b, 1, o), 1);
	}
	close(fd);
	uint64_t calls0 = fake_fetch_calls(&f);

	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	CHECK(read_all(c, "bad/obj", "\"a\"", size, TBS, 1));
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 8);
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 8);
	CHECK(read_all(c, "bad/obj", "\"a\"", size, TBS, 1));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 8);     /* repaired copies are hits */
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/*
 * Requests that join a slab read in flight get their own parts of it: a part
 * of the block, the whole block at an unaligned address, the whole block at
 * another address. All four are queued while the cache is plugged and handed
 * over together, so the first starts the slab read and the other three find
 * it in flight whatever the scheduler does (retrying up to 400 rounds for a
 * join, as this test did, still failed under load). The slab writes of the
 * first read are waited for first: under load the four joined those instead.
 */
static void t_slab_read_joined(void)
{
	const uint64_t size = 8 * TBS;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s0, s;
	struct cache *c;
	char *mem = NULL;
	int joined;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c || posix_memalign((void **)&mem, 4096, 5 * TBS))
		goto out;
	CHECK(read_all(c, "join/obj", "\"j\"", size, TBS, 1));
	for (int round = 0; round < 8; round++) {
		static const struct { size_t at, off, len; } rq[] = {
			{ 0, 0, TBS }, { TBS, 100, 300 }, { 2 * TBS + 8, 0, TBS }, { 4 * TBS, 0, TBS },
		};
		struct sync_wait w[4];
		uint64_t blk = (uint64_t)(round % 8) * TBS;

		memset(mem, 0xAA, 5 * TBS);
		cache_sync(c);          /* the block is on the slab: no write to join */
		stats(c, &s0);
		cache_plug(c, 1);
		for (int i = 0; i < 4; i++) {
			w[i] = (struct sync_wait){ .m = PTHREAD_MUTEX_INITIALIZER,
						   .cv = PTHREAD_COND_INITIALIZER };
			CHECK_EQ_INT(cfetch(c, "join/obj", "\"j\"", size, blk + rq[i].off,
					    rq[i].len, mem + rq[i].at, &w[i]), 0);
		}
		cache_plug(c, 0);
		for (int i = 0; i < 4; i++) {
			CHECK_EQ_INT(sync_wait_for(&w[i]), rq[i].len);
			CHECK(fake_fetch_check(mem + rq[i].at, "join/obj", "\"j\"", blk + rq[i].off,
					 rq[i].len));
		}
		stats(c, &s);
		joined = s.coalesced - s0.coalesced == 3 && s.hits - s0.hits == 1;
		CHECK(joined);
	}
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 0);
	CHECK_EQ_INT(s.inner_fetches, 8);
	cache_destroy(c);
out:
	free(mem);
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* A cache far smaller than the data keeps serving correct bytes. */
static void t_eviction(void)
{
	const uint64_t size = 40 * TBS + 5;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char buf[3000];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 8 * TBS, TBS);
	if (!c)
		goto out;
	for (int pass = 0; pass < 2; pass++)
		CHECK(read_all(c, "ev/obj", "\"x\"", size, TBS + 17, pass));
	srand(7);
	for (int i = 0; i < 300; i++) {
		uint64_t off = ((uint64_t)rand() * 7919) % (size - sizeof(buf));
		int hot = i % 2;    /* half the reads hit a small hot set */

		if (hot)
			off = (uint64_t)(rand() % 3) * TBS + 10;
		CHECK_EQ_INT(cread(c, "ev/obj", "\"x\"", size, off, sizeof(buf), buf), sizeof(buf));
		CHECK(fake_fetch_check(buf, "ev/obj", "\"x\"", off, sizeof(buf)));
		cache_sync(c);      /* writes behind land before the next read */
	}
	stats(c, &s);
	if (!s.evictions || !s.hits)
		fprintf(stderr, "hits %llu misses %llu coalesced %llu ev %llu skipped %llu io %llu used %llu\n",
			(unsigned long long)s.hits, (unsigned long long)s.misses,
			(unsigned long long)s.coalesced, (unsigned long long)s.evictions,
			(unsigned long long)s.write_skipped, (unsigned long long)s.io_errors,
			(unsigned long long)s.blocks_used);
	CHECK(s.evictions > 0);
	CHECK(s.blocks_used <= 8);
	CHECK(s.hits > 0);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* A new ETag for the same key never gets the old blocks. */
static void t_etag_change(void)
{
	const uint64_t size = 6 * TBS;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache *c;
	char *buf = malloc(size);

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 32 * TBS, TBS);
	if (!c)
		goto out;
	snprintf(f.current_etag, sizeof(f.current_etag), "\"v1\"");
	CHECK(read_all(c, "same/key", "\"v1\"", size, TBS, 1));
	CHECK_EQ_INT(fake_fetch_calls(&f), 6);
	snprintf(f.current_etag, sizeof(f.current_etag), "\"v2\"");
	CHECK_EQ_INT(cread(c, "same/key", "\"v2\"", size, 0, size, buf), size);
	CHECK(fake_fetch_check(buf, "same/key", "\"v2\"", 0, size));
	CHECK(!fake_fetch_check(buf, "same/key", "\"v1\"", 0, 64));
	CHECK_EQ_INT(fake_fetch_calls(&f), 12);
	/* a stale ETag on a block not cached fails with the inner error, caches nothing */
	CHECK_EQ_INT(cread(c, "other/key", "\"v1\"", 0, 0, 100, buf), -ESTALE);
	CHECK_EQ_INT(cread(c, "other/key", "\"v1\"", 0, 0, 100, buf), -ESTALE);
	cache_destroy(c);
out:
	free(buf);
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* A child fills the cache and dies without cache_destroy (both _exit and
 * SIGKILL); the next start is unclean, serves correct bytes, and is warm. */
static void t_crash_restart(void)
{
	const uint64_t size = 24 * TBS;
	for (int how = 0; how < 2; how++) {
		const char *d = new_dir();
		int pfd[2];
		pid_t pid;
		struct fake_fetch f;
		struct cache_stats s;
		struct cache *c;
		int status = 0;
		char ch = 0;

		CHECK_EQ_INT(pipe(pfd), 0);
		pid = fork();
		if (pid == 0) {
			fake_fetch_init(&f, 1, 0);
			c = open_cache(&f, d, 32 * TBS, TBS);
			if (!c || !read_all(c, "crash/obj", "\"c\"", size, TBS, 1))
				_exit(3);
			cache_sync(c);
			if (write(pfd[1], "r", 1) != 1)
				_exit(4);
			if (how == 0)
				_exit(0);
			/* keep the cache busy until killed */
			for (;;)
				read_all(c, "crash/other", "\"c\"", 6 * TBS, 2 * TBS, 1);
		}
		close(pfd[1]);
		CHECK_EQ_INT(read(pfd[0], &ch, 1), 1);
		close(pfd[0]);
		if (how == 1) {
			usleep(50 * 1000);
			kill(pid, SIGKILL);
		}
		waitpid(pid, &status, 0);
		fake_fetch_init(&f, 1, 0);
		c = open_cache(&f, d, 32 * TBS, TBS);
		if (c) {
			CHECK(read_all(c, "crash/obj", "\"c\"", size, TBS / 2, 1));
			stats(c, &s);
			CHECK_EQ_INT(s.recovered_unclean, 1);
			CHECK(s.hits >= 24);                    /* synced before the crash: all warm */
			CHECK_EQ_INT(fake_fetch_calls(&f), 0);
			CHECK(read_all(c, "crash/other", "\"c\"", 64 * TBS, 3 * TBS, 1));
			CHECK(read_all(c, "crash/obj", "\"c\"", size, TBS / 2, 1));
			stats(c, &s);
			CHECK_EQ_INT(s.io_errors, 0);
			cache_destroy(c);
		}
		fake_fetch_fini(&f);
		rm_dir(d);
	}
}

struct burst {
	struct cache *c;
	char buf[16][TBS];
	struct sync_wait w[16];
};

static void *burst_thread(void *arg)
{
	struct burst *b = arg;

	for (int i = 0; i < 16; i++) {
		int rc;

		pthread_mutex_init(&b->w[i].m, NULL);
		pthread_cond_init(&b->w[i].cv, NULL);
		b->w[i].done = 0;
		/* different sub-ranges of block 3 */
		rc = cfetch(b->c, "sf/obj", "\"s\"", 8 * TBS, 3 * TBS + i * 100, TBS - i * 100,
			    b->buf[i], &b->w[i]);
		if (rc < 0)
			sync_done(&b->w[i].fr, rc);
	}
	return NULL;
}

/* Concurrent requests for one missing block cause one inner fetch. */
static void t_single_flight(void)
{
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	struct burst *b = calloc(4, sizeof(*b));
	pthread_t th[4];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 32 * TBS, TBS);
	if (!c)
		goto out;
	fake_fetch_hold(&f, 0, UINT64_MAX);
	for (int t = 0; t < 4; t++) {
		b[t].c = c;
		pthread_create(&th[t], NULL, burst_thread, &b[t]);
	}
	for (int t = 0; t < 4; t++)
		pthread_join(th[t], NULL);
	/* open the gate only once all 64 have reached the cache thread */
	for (int i = 0; i < 5000; i++) {
		stats(c, &s);
		if (s.coalesced == 63 && fake_fetch_pending(&f) == 1)
			break;
		usleep(1000);
	}
	fake_fetch_hold(&f, 0, 0);
	for (int t = 0; t < 4; t++)
		for (int i = 0; i < 16; i++) {
			CHECK_EQ_INT(sync_wait_for(&b[t].w[i]), TBS - i * 100);
			CHECK(fake_fetch_check(b[t].buf[i], "sf/obj", "\"s\"", 3 * TBS + i * 100, TBS - i * 100));
		}
	CHECK_EQ_INT(fake_fetch_calls(&f), 1);
	stats(c, &s);
	CHECK_EQ_INT(s.coalesced, 63);
	cache_destroy(c);
out:
	free(b);
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* The last block is short: fetched and cached at its true length. */
static void t_short_last_block(void)
{
	const uint64_t size = 3 * TBS + TBS / 2 + 7;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache *c;
	char buf[200];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	CHECK_EQ_INT(cread(c, "short/obj", "\"s\"", size, size - 100, 100, buf), 100);
	CHECK(fake_fetch_check(buf, "short/obj", "\"s\"", size - 100, 100));
	CHECK_EQ_INT(fake_fetch_last_len(&f), TBS / 2 + 7);
	CHECK_EQ_INT(cread(c, "short/obj", "\"s\"", size, 3 * TBS, 50, buf), 50);
	CHECK_EQ_INT(fake_fetch_calls(&f), 1);
	CHECK(read_all(c, "short/obj", "\"s\"", size, TBS, 1));
	CHECK_EQ_INT(fake_fetch_calls(&f), 4);
	/* unsized: the tail request is cached as the prefix it asked for */
	CHECK(read_all(c, "short/u", "\"s\"", size, TBS, 0));
	CHECK(read_all(c, "short/u", "\"s\"", size, TBS, 0));
	CHECK_EQ_INT(fake_fetch_calls(&f), 8);
	/* past EOF is refused (sized) */
	CHECK_EQ_INT(cread(c, "short/obj", "\"s\"", size, size - 1, 2, buf), -EINVAL);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Offsets beyond 4 GiB (block numbers and in-block offsets stay exact). */
static void t_big_offsets(void)
{
	const uint64_t size = 5 * GB + 12345;
	static const uint64_t offs[] = { 4 * GB - 100, 4 * GB, 4 * GB + TBS - 1, 5 * GB + 12345 - 300 };
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache *c;
	char buf[300];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
			CHECK_EQ_INT(cread(c, "big", "\"b\"", size, offs[i], sizeof(buf), buf), sizeof(buf));
			CHECK(fake_fetch_check(buf, "big", "\"b\"", offs[i], sizeof(buf)));
			/* differs from the same in-block offset below 4 GiB */
			CHECK(!fake_fetch_check(buf, "big", "\"b\"", offs[i] - 4 * GB, sizeof(buf)));
		}
	CHECK_EQ_INT(fake_fetch_calls(&f), 4);   /* 4 distinct blocks */
	CHECK_EQ_INT(fake_fetch_last_len(&f), (5 * GB + 12345) % TBS);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* No ETag: passed through, never cached. One owner per dir. Clear. */
static void t_bypass_sharing_clear(void)
{
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_config cfg = { .dir = d, .size_bytes = 16 * TBS, .block_size = TBS,
				    .inner = &f.base };
	struct cache_stats s;
	struct cache *c, *c2 = (void *)1;
	char msg[256] = "", buf[100];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	for (int i = 0; i < 2; i++)
		CHECK_EQ_INT(cread(c, "nv", NULL, 0, 0, sizeof(buf), buf), sizeof(buf));
	CHECK(fake_fetch_check(buf, "nv", "", 0, sizeof(buf)));
	stats(c, &s);
	CHECK_EQ_INT(s.bypass, 2);
	CHECK_EQ_INT(fake_fetch_calls(&f), 2);
	CHECK_EQ_INT(cread(c, "k", "\"e\"", 0, 0, sizeof(buf), buf), sizeof(buf));

	CHECK_EQ_INT(cache_new(&cfg, &c2, msg, sizeof(msg)), -EBUSY);
	CHECK(c2 == NULL);
	char pid[32];
	snprintf(pid, sizeof(pid), "pid %d", (int)getpid());
	if (!strstr(msg, pid))
		harness_fail(__FILE__, __LINE__, "no owner pid in '%s'", msg);
	CHECK_EQ_INT(cache_clear(d, msg, sizeof(msg)), -EBUSY);
	cache_destroy(c);

	CHECK_EQ_INT(cache_clear(d, msg, sizeof(msg)), 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	uint64_t calls0 = fake_fetch_calls(&f);
	CHECK_EQ_INT(cread(c, "k", "\"e\"", 0, 0, sizeof(buf), buf), sizeof(buf));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 1);        /* cold again */
	cache_destroy(c);
	/* geometry change: warning, cold start, not an error */
	c = open_cache(&f, d, 16 * TBS, TBS * 2);
	if (c) {
		stats(c, &s);
		CHECK_EQ_INT(s.blocks_used, 0);
		cache_destroy(c);
	}
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

struct stress_arg {
	struct cache *c;
	unsigned seed;
	uint32_t bs;                /* TBS: one record a page; 1 MiB: packing and pieces */
	int ok;
};

static void *stress_thread(void *arg)
{
	struct stress_arg *a = arg;
	static const char *const keys[] = { "s/a", "s/b", "s/c" };
	const int big = a->bs > TBS;
	const uint64_t size = (big ? 12 : 30) * (uint64_t)a->bs + 99;
	char *buf = malloc(3 * (size_t)a->bs);

	a->ok = 1;
	for (int i = 0; i < 300; i++) {
		const char *k = keys[rand_r(&a->seed) % 3];
		/* With 1 MiB blocks mostly parts of a block (pieces), now and then
		 * up to two blocks (whole blocks). */
		size_t len = 1 + rand_r(&a->seed) % (big && i % 8 ? a->bs / 3 : 2 * a->bs);
		uint64_t off = (uint64_t)rand_r(&a->seed) % (size - len);
		int sized = rand_r(&a->seed) % 2;

		if (cread(a->c, k, "\"z\"", sized ? size : 0, off, len, buf) != (ssize_t)len ||
		    !fake_fetch_check(buf, k, "\"z\"", off, len))
			a->ok = 0;
	}
	free(buf);
	return NULL;
}

/* Several threads, random ranges, small cache: always the right bytes. */
static void stress(uint32_t bs, uint64_t cache_bytes)
{
	struct fake_fetch f;
	const char *d = new_dir();
	struct stress_arg a[4];
	pthread_t th[4];
	struct cache_stats s;
	struct cache *c;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, cache_bytes, bs);
	if (!c)
		goto out;
	for (int t = 0; t < 4; t++) {
		a[t] = (struct stress_arg){ .c = c, .seed = 100 + t, .bs = bs };
		pthread_create(&th[t], NULL, stress_thread, &a[t]);
	}
	for (int t = 0; t < 4; t++) {
		pthread_join(th[t], NULL);
		CHECK(a[t].ok);
	}
	stats(c, &s);
	CHECK(s.hits > 0);
	CHECK(s.evictions > 0);
	CHECK_EQ_INT(s.checksum_failures, 0);
	if (bs > CACHE_PIECE)
		CHECK(s.pieces > 0);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

static void t_concurrent_stress(void)
{
	stress(TBS, 20 * TBS);
}

/* The same with 1 MiB blocks in 6 pages: pieces, packed pages and whole
 * blocks of three 12 MiB objects evict each other. */
static void t_concurrent_stress_pieces(void)
{
	stress(1024 * 1024, 6 * MB);
}

/* ---- measurement (not a test): FEEDFS_CACHE_BENCH=DIR ---- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	sync();
	if (fd >= 0) {
		if (write(fd, "3\n", 2) != 2)
			fprintf(stderr, "drop_caches failed\n");
		close(fd);
	}
}

/* Cold fill then warm sequential read of `size` bytes in requests of `req`
 * bytes with `depth` requests in flight (the prefetch window's shape). */
static int bench(const char *dir, uint32_t bs, uint64_t size, size_t req, int depth)
{
	struct fake_fetch f;
	struct cache *c;
	char *bufs = malloc((size_t)depth * req);
	struct sync_wait *w = calloc(depth, sizeof(*w));
	struct cache_stats s;
	double t0, t1;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, dir, size + 64 * (uint64_t)bs, bs);
	if (!c)
		return 1;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			drop_caches();
		t0 = now_s();
		for (uint64_t off = 0, i = 0; off < size; off += req, i++) {
			int k = (int)(i % depth);

			if (i >= (uint64_t)depth && sync_wait_for(&w[k]) != (ssize_t)req)
				fprintf(stderr, "bench: read failed\n");
			pthread_mutex_init(&w[k].m, NULL);
			pthread_cond_init(&w[k].cv, NULL);
			w[k].done = 0;
			if (cfetch(c, "bench/obj", "\"b\"", size, off, req,
				   bufs + (size_t)k * req, &w[k]) < 0)
				sync_done(&w[k].fr, -EIO);
		}
		for (int k = 0; k < depth && (uint64_t)k * req < size; k++)
			sync_wait_for(&w[k]);
		t1 = now_s();
		stats(c, &s);
		printf("bench bs=%uMiB pass=%s size=%lluMiB req=%zuMiB depth=%d: %.2f s, %.0f MiB/s "
		       "(hits %llu misses %llu direct %d registered %d)\n", bs >> 20,
		       pass ? "warm" : "cold", (unsigned long long)(size >> 20), req >> 20, depth,
		       t1 - t0, size / MB / (t1 - t0), (unsigned long long)s.hits,
		       (unsigned long long)s.misses, s.direct_io, s.registered_buffers);
	}
	cache_destroy(c);
	fake_fetch_fini(&f);
	free(bufs);
	free(w);
	return 0;
}

/* With 1 MiB blocks a page holds up to 8 packed records: small objects share
 * pages, survive a restart packed, and a big block still gets a page of its own. */
static void t_packed_small_objects(void)
{
	const uint32_t bs = 1024 * 1024;
	const uint64_t small = 100 * KB, mixed = 2 * MB + 512 * KB;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char key[64];

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 8ull * bs, bs);
	if (!c)
		goto out;
	for (int i = 0; i < 24; i++) {
		snprintf(key, sizeof(key), "img/%03d.jpg", i);
		CHECK(read_all(c, key, "\"s\"", small, small, 1));
	}
	CHECK(read_all(c, "shard/big.tar", "\"s\"", mixed, bs, 1));
	cache_sync(c);
	stats(c, &s);
	CHECK_EQ_INT(s.pages, 8);
	CHECK_EQ_INT(s.blocks_used, 24 + 3);      /* 24 objects + 3 blocks of the shard */
	CHECK_EQ_INT(s.bytes_used, 24 * small + mixed);
	CHECK_EQ_INT(s.evictions, 0);
	CHECK_EQ_INT(s.write_skipped, 0);
	CHECK_EQ_INT(s.pieces, 0);                  /* whole objects, whole blocks */
	cache_destroy(c);

	uint64_t calls0 = fake_fetch_calls(&f);

	c = open_cache(&f, d, 8ull * bs, bs);
	if (!c)
		goto out;
	stats(c, &s);
	CHECK_EQ_INT(s.blocks_used, 27);
	for (int i = 23; i >= 0; i--) {
		snprintf(key, sizeof(key), "img/%03d.jpg", i);
		CHECK(read_all(c, key, "\"s\"", small, small, 1));
		CHECK(read_all(c, key, "\"s\"", small, 4096, 1));   /* parts of a packed record */
	}
	CHECK(read_all(c, "shard/big.tar", "\"s\"", mixed, 300 * KB, 1));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 0);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Many small objects through a 4-page cache: pages are evicted whole and the
 * bytes stay right; a flipped byte inside a packed page costs one record. */
static void t_packed_eviction_and_corruption(void)
{
	const uint32_t bs = 1024 * 1024;
	const uint64_t small = 60 * KB + 123;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char key[64], p[512];
	int fd;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 4ull * bs, bs);
	if (!c)
		goto out;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 100; i++) {
			snprintf(key, sizeof(key), "e/%d", i);
			CHECK(read_all(c, key, "\"e\"", small, 7000, 1));
		}
	}
	cache_sync(c);
	stats(c, &s);
	CHECK(s.evictions > 0);
	CHECK(s.blocks_used <= 4 * 8);
	CHECK(s.bytes_used <= 4ull * bs);
	cache_destroy(c);

	/* Keep 16 records (2 pages), then corrupt the second record of page 0. */
	rm_dir(d);
	c = open_cache(&f, d, 4ull * bs, bs);
	if (!c)
		goto out;
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "k/%d", i);
		CHECK(read_all(c, key, "\"e\"", small, small, 1));
	}
	cache_destroy(c);
	snprintf(p, sizeof(p), "%s/slab", d);
	fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	{
		unsigned char b;
		off_t o = (off_t)(64 * KB + 100);   /* 60 KiB + 123 rounds up to 64 KiB */

		CHECK_EQ_INT(pread(fd, &b, 1, o), 1);
		b ^= 0x01;
		CHECK_EQ_INT(pwrite(fd, &b, 1, o), 1);
	}
	close(fd);
	uint64_t calls0 = fake_fetch_calls(&f);

	c = open_cache(&f, d, 4ull * bs, bs);
	if (!c)
		goto out;
	stats(c, &s);
	CHECK_EQ_INT(s.blocks_used, 16);
	for (int i = 0; i < 16; i++) {
		snprintf(key, sizeof(key), "k/%d", i);
		CHECK(read_all(c, key, "\"e\"", small, small, 1));
	}
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 1);
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 1);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Small reads inside a block fetch and keep 128 KiB pieces, not the block;
 * once the block is cached whole, such reads are served from it. */
static void t_pieces_for_partial_reads(void)
{
	const uint32_t bs = 1024 * 1024;
	const uint64_t size = 8 * MB + 5000;
	static const uint64_t offs[] = { 0, 4096, 3 * MB + 7, 128 * KB - 100, 5 * MB - 2000,
					 8 * MB + 500, 2 * MB + 640 * KB };
	const size_t n = 4096;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char buf[4096];
	uint64_t calls0, bytes0;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		CHECK_EQ_INT(cread(c, "r/obj", "\"p\"", size, offs[i], n, buf), n);
		CHECK(fake_fetch_check(buf, "r/obj", "\"p\"", offs[i], n));
	}
	/* 0 and 4096 share a piece, and 128K-100 adds the next one; 8M+500 is the
	 * short last block's only piece; 5M-2000 spans a block edge: 7 pieces. */
	CHECK_EQ_INT(fake_fetch_calls(&f), 7);
	CHECK_EQ_INT(fake_fetch_bytes(&f), 6 * CACHE_PIECE + 5000);
	cache_sync(c);
	cache_destroy(c);

	calls0 = fake_fetch_calls(&f);
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		memset(buf, 0, n);
		CHECK_EQ_INT(cread(c, "r/obj", "\"p\"", size, offs[i], n, buf), n);
		CHECK(fake_fetch_check(buf, "r/obj", "\"p\"", offs[i], n));
	}
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);     /* pieces survive a restart */
	/* A stream reads whole blocks: fetched whole, whatever pieces there are. */
	bytes0 = fake_fetch_bytes(&f);
	CHECK(read_all(c, "r/obj", "\"p\"", size, bs, 1));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 9);
	CHECK_EQ_INT(fake_fetch_bytes(&f) - bytes0, size);
	cache_sync(c);
	calls0 = fake_fetch_calls(&f);
	for (uint64_t off = 3; off + n < size; off += 777 * KB) {
		CHECK_EQ_INT(cread(c, "r/obj", "\"p\"", size, off, n, buf), n);
		CHECK(fake_fetch_check(buf, "r/obj", "\"p\"", off, n));
	}
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 0);
	CHECK_EQ_INT(s.piece_size, CACHE_PIECE);
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* A part of a block cached whole is read as the pieces it covers, each
 * checked against its own CRC32C (kept in memory when the block is written or
 * read whole), not as the whole block; a bad piece drops the block record and
 * is fetched again, and the bytes stay right. */
static void t_partial_reads_of_a_block_read_only_their_pieces(void)
{
	const uint32_t bs = 1024 * 1024;
	const uint64_t size = 4 * MB + 5000;
	const size_t n = 4096;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s0, s1;
	struct cache *c;
	char buf[4096], p[512];
	uint64_t calls0;
	int fd, flipped;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	CHECK(read_all(c, "w/obj", "\"w\"", size, bs, 1));
	cache_sync(c);
	calls0 = fake_fetch_calls(&f);
	stats(c, &s0);
	/* 20 reads of 4 KiB inside pieces of the four whole blocks: 20 pieces read. */
	for (int i = 0; i < 20; i++) {
		uint64_t off = (uint64_t)(i % 4) * bs + (uint64_t)((i * 3) % 8) * CACHE_PIECE + 1000 + i;

		CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, off, n, buf), n);
		CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", off, n));
	}
	stats(c, &s1);
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
	CHECK_EQ_INT(s1.bytes_from_disk - s0.bytes_from_disk, 20 * (uint64_t)CACHE_PIECE);
	/* Across a piece edge: two pieces. */
	CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, bs + CACHE_PIECE - 100, n, buf), n);
	CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", bs + CACHE_PIECE - 100, n));
	stats(c, &s0);
	CHECK_EQ_INT(s0.bytes_from_disk - s1.bytes_from_disk, 2 * (uint64_t)CACHE_PIECE);

	/* Flip a byte of piece 3 of block 2 on disk, under the running cache
	 * (its page is the one that holds block 2's bytes there). */
	snprintf(p, sizeof(p), "%s/slab", d);
	fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	flipped = 0;
	for (uint64_t pg = 0; pg < 16; pg++) {
		unsigned char b[64];
		off_t o = (off_t)(pg * bs + 3 * CACHE_PIECE + 100);

		CHECK_EQ_INT(pread(fd, b, sizeof(b), o), sizeof(b));
		if (!fake_fetch_check(b, "w/obj", "\"w\"", 2 * bs + 3 * CACHE_PIECE + 100, sizeof(b)))
			continue;
		b[0] ^= 0x01;
		CHECK_EQ_INT(pwrite(fd, b, 1, o), 1);
		flipped++;
	}
	close(fd);
	CHECK_EQ_INT(flipped, 1);
	calls0 = fake_fetch_calls(&f);
	CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, 2 * bs + 3 * CACHE_PIECE + 50, n, buf), n);
	CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", 2 * bs + 3 * CACHE_PIECE + 50, n));
	stats(c, &s1);
	CHECK_EQ_INT(s1.checksum_failures - s0.checksum_failures, 1);
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 1);     /* that piece, fetched */
	/* The block record is gone: another piece of it is fetched, not read. */
	CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, 2 * bs + 6 * CACHE_PIECE, n, buf), n);
	CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", 2 * bs + 6 * CACHE_PIECE, n));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 2);
	cache_sync(c);
	cache_destroy(c);

	/* After a restart the sums are gone: the first partial read of a block
	 * reads it whole and records them, the next one reads a piece. */
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	calls0 = fake_fetch_calls(&f);
	stats(c, &s0);
	CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, 7, n, buf), n);
	CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", 7, n));
	CHECK_EQ_INT(cread(c, "w/obj", "\"w\"", size, 5 * CACHE_PIECE + 9, n, buf), n);
	CHECK(fake_fetch_check(buf, "w/obj", "\"w\"", 5 * CACHE_PIECE + 9, n));
	stats(c, &s1);
	CHECK_EQ_INT(s1.bytes_from_disk - s0.bytes_from_disk, bs + CACHE_PIECE);
	CHECK_EQ_INT(s1.checksum_failures, 0);
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
	/* Block 2's fetched pieces and its other pieces: bytes right. */
	CHECK(read_all(c, "w/obj", "\"w\"", size, 4096 * 7, 1));
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* The missing pieces of one block that one request needs are fetched by one
 * GET (a run) and cached as pieces; a cached piece inside the run is a hole
 * the GET covers rather than a second request. */
static void t_piece_runs(void)
{
	const uint32_t bs = 1024 * 1024;
	const uint64_t size = 4 * MB;
	const uint64_t P = CACHE_PIECE;
	struct fake_fetch f;
	const char *d = new_dir();
	struct cache_stats s;
	struct cache *c;
	char *buf = malloc(bs);
	uint64_t calls0, bytes0;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	/* 600 KiB from 100 KiB into block 1: pieces 8..13 of the object, one GET */
	CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, MB + 100 * KB, 600 * KB, buf), 600 * KB);
	CHECK(fake_fetch_check(buf, "run/obj", "\"r\"", MB + 100 * KB, 600 * KB));
	CHECK_EQ_INT(fake_fetch_calls(&f), 1);
	CHECK_EQ_INT(fake_fetch_bytes(&f), 6 * P);
	CHECK_EQ_INT(fake_fetch_last_len(&f), 6 * P);
	cache_sync(c);
	stats(c, &s);
	CHECK_EQ_INT(s.blocks_used, 6);             /* kept as six pieces */
	/* each piece alone is a hit */
	for (uint64_t p = 8; p < 14; p++) {
		CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, p * P + 5, 1000, buf), 1000);
		CHECK(fake_fetch_check(buf, "run/obj", "\"r\"", p * P + 5, 1000));
	}
	CHECK_EQ_INT(fake_fetch_calls(&f), 1);
	/* a hole: piece 17 cached, then 16..18 asked for: one GET of 3 pieces */
	CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, 17 * P + 1, 10, buf), 10);
	cache_sync(c);
	calls0 = fake_fetch_calls(&f);
	bytes0 = fake_fetch_bytes(&f);
	CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, 16 * P + 3, 2 * P + 7, buf), 2 * P + 7);
	CHECK(fake_fetch_check(buf, "run/obj", "\"r\"", 16 * P + 3, 2 * P + 7));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 1);
	CHECK_EQ_INT(fake_fetch_bytes(&f) - bytes0, 3 * P);
	cache_sync(c);
	cache_destroy(c);

	calls0 = fake_fetch_calls(&f);
	c = open_cache(&f, d, 16ull * bs, bs);
	if (!c)
		goto out;
	CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, MB + 100 * KB, 600 * KB, buf), 600 * KB);
	CHECK(fake_fetch_check(buf, "run/obj", "\"r\"", MB + 100 * KB, 600 * KB));
	CHECK_EQ_INT(cread(c, "run/obj", "\"r\"", size, 16 * P, 3 * P, buf), 3 * P);
	CHECK(fake_fetch_check(buf, "run/obj", "\"r\"", 16 * P, 3 * P));
	CHECK_EQ_INT(fake_fetch_calls(&f) - calls0, 0);
	stats(c, &s);
	CHECK_EQ_INT(s.checksum_failures, 0);
	cache_destroy(c);
out:
	free(buf);
	fake_fetch_fini(&f);
	rm_dir(d);
}

/* Cancel through the cache: a request it holds runs to its end (its blocks
 * are shared and worth keeping: no cancel reaches the inner fetcher), and a
 * request that bypassed it (no ETag) is the inner fetcher's, where the
 * cancel goes and ends it -ECANCELED. Each done runs exactly once. */
static void t_cancel_through_the_cache(void)
{
	struct fake_fetch f;
	const char *d = new_dir();
	struct sync_wait held = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	struct sync_wait by = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	char *b1 = malloc(TBS), *b2 = malloc(TBS);
	struct cache *c;

	fake_fetch_init(&f, 1, 0);
	c = open_cache(&f, d, 16 * TBS, TBS);
	if (!c)
		goto out;
	CHECK_EQ_INT(cache_fetcher(c)->cancels, 0);
	fake_fetch_hold(&f, 0, UINT64_MAX);
	CHECK_EQ_INT(cfetch(c, "cx/obj", "\"c\"", 4 * TBS, TBS, TBS, b1, &held), 0);
	CHECK_EQ_INT(cfetch(c, "cx/nv", "", 0, 0, TBS, b2, &by), 0);
	while (fake_fetch_calls(&f) < 2)        /* the block GET leaves on the cache thread */
		usleep(1000);
	fetcher_cancel(cache_fetcher(c), &held.fr);
	fetcher_cancel(cache_fetcher(c), &by.fr);
	CHECK_EQ_INT(sync_wait_for(&by), -ECANCELED);
	pthread_mutex_lock(&f.mu);
	CHECK_EQ_INT(f.cancel_calls, 1);        /* only the bypassed one went down */
	CHECK_EQ_INT(f.cancelled, 1);
	pthread_mutex_unlock(&f.mu);
	fake_fetch_hold(&f, 0, 0);
	CHECK_EQ_INT(sync_wait_for(&held), TBS);
	CHECK(fake_fetch_check(b1, "cx/obj", "\"c\"", TBS, TBS));
	cache_destroy(c);
out:
	fake_fetch_fini(&f);
	free(b1);
	free(b2);
	rm_dir(d);
}

static const struct test tests[] = {
	TEST(t_crc32c),
	TEST(t_hash_fields),
	TEST(t_config_errors),
	TEST(t_modes_and_names),
	TEST(t_bytes_equal_source),
	TEST(t_restart_warm),
	TEST(t_corruption_refetched),
	TEST(t_slab_read_joined),
	TEST(t_eviction),
	TEST(t_etag_change),
	TEST(t_crash_restart),
	TEST(t_single_flight),
	TEST(t_short_last_block),
	TEST(t_big_offsets),
	TEST(t_bypass_sharing_clear),
	TEST(t_concurrent_stress),
	TEST(t_packed_small_objects),
	TEST(t_packed_eviction_and_corruption),
	TEST(t_pieces_for_partial_reads),
	TEST(t_concurrent_stress_pieces),
	TEST(t_partial_reads_of_a_block_read_only_their_pieces),
	TEST(t_piece_runs),
	TEST(t_cancel_through_the_cache),
	{ 0 },
};

int main(void)
{
	const char *bdir = getenv("FEEDFS_CACHE_BENCH");

	log_set_level(getenv("FEEDFS_TEST_VERBOSE") ? LOG_DEBUG : LOG_ERR);
	if (bdir) {
		const char *bs = getenv("FEEDFS_CACHE_BENCH_BS");
		const char *sz = getenv("FEEDFS_CACHE_BENCH_MB");
		uint32_t b = (bs ? (uint32_t)atoi(bs) : 4) << 20;

		return bench(bdir, b, (sz ? (uint64_t)atoll(sz) : 2048) * MB, 8 * MB, 8);
	}
	return harness_run("cache", tests);
}
