/*
 * Unit tests for the read path (src/prefetch/prefetch.c).
 *
 * The shared fake fetcher (fake_fetch.h) serves objects whose byte i is a pure
 * function of (key, ETag, i), so objects of any size (> 4 GiB included) cost
 * no memory and every returned byte can be checked. Requests complete on a
 * small worker pool after a set latency, like the http thread would; each
 * request is logged with the number of requests outstanding when it was
 * submitted, so tests assert on the log, never on timings. Errors are
 * injected by request number, and a "version change" makes If-Match fail
 * with -ESTALE and changes the bytes.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/ahead.h"
#include "feedfs/prefetch.h"
#include "fake_fetch.h"
#include "harness.h"

#define MiB (1ull << 20)
#define KiB (1ull << 10)

/* ---- watchdog: a hung test (deadlock) fails the run ---- */
static const char *wd_test = "?";

static void wd_fire(int sig)
{
	static const char m[] = "  FAIL watchdog: prefetch test hung (deadlock?): ";

	(void)sig;
	if (write(2, m, sizeof(m) - 1) < 0 || write(2, wd_test, strlen(wd_test)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(3);
	_exit(3);
}

/* Seconds are for a plain or ASan build; slower tools (TSan, valgrind) scale
 * them with FEEDFS_WD_SCALE=N. */
static void wd_arm_named(const char *name, unsigned s)
{
	const char *scale = getenv("FEEDFS_WD_SCALE");

	wd_test = name;
	signal(SIGALRM, wd_fire);
	alarm(s * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
}
#define wd_arm(s) wd_arm_named(__func__, (s))

/* ---- the fake fetcher (tests/unit/fake_fetch.c) ---- */
/* Every object is registered with ETag "v<version>"; the bytes a read must
 * return are those of (key, that ETag). */
static uint64_t obj_seed(const char *key, unsigned version)
{
	char etag[32];

	snprintf(etag, sizeof(etag), "\"v%u\"", version);
	return fake_fetch_seed(key, strlen(key), etag);
}

/* Returns 1 when buf holds exactly the pattern at off. */
static int pat_ok(uint64_t seed, uint64_t off, const char *buf, size_t len)
{
	char tmp[4096];

	for (size_t i = 0; i < len; i += sizeof(tmp)) {
		size_t n = len - i < sizeof(tmp) ? len - i : sizeof(tmp);

		fake_fetch_pattern(tmp, seed, off + i, n);
		if (memcmp(tmp, buf + i, n) != 0)
			return 0;
	}
	return 1;
}

static int fake_add(struct fake_fetch *fk, const char *key, uint64_t size)
{
	return fake_fetch_add(fk, key, size, "\"v1\"");
}

/* ---- test environment ---- */
struct env {
	struct fake_fetch fk;
	struct rd_budget *b;
	struct rd_config cfg;
};

static void env_init(struct env *e, uint64_t budget, unsigned latency_us)
{
	fake_fetch_init(&e->fk, FAKE_FETCH_WORKERS, latency_us);
	CHECK_EQ_INT(rd_budget_new(budget, &e->b), 0);
	/* Without cancel unless a test asks for it (the block cache's case). */
	e->fk.base.cancels = 0;
	e->cfg = (struct rd_config){ .fetcher = &e->fk.base, .budget = e->b };
}

static void env_fini(struct env *e)
{
	fake_fetch_fini(&e->fk);
	CHECK_EQ_INT(rd_budget_used(e->b), 0);
	CHECK(rd_budget_peak(e->b) <= rd_budget_max(e->b));
	rd_budget_destroy(e->b);
}

struct obj { struct rd_file *f; uint64_t seed, size; int idx; };

static struct obj env_open(struct env *e, const char *key, uint64_t size)
{
	struct obj o;

	o.idx = fake_add(&e->fk, key, size);
	o.seed = obj_seed(key, 1);
	o.size = size;
	o.f = rd_open(&e->cfg, key, strlen(key), size, "\"v1\"");
	CHECK(o.f != NULL);
	return o;
}

/* rd_read and check: returns 1 when the result (count and bytes) is right. */
static int read_ok(struct obj *o, uint64_t off, size_t len, char *buf)
{
	ssize_t want = off >= o->size ? 0 : (ssize_t)(len < o->size - off ? len : o->size - off);
	ssize_t got = rd_read(o->f, off, len, buf);

	if (got != want) {
		fprintf(stderr, "  read(%llu, %zu) = %zd, want %zd\n",
			(unsigned long long)off, len, got, want);
		return 0;
	}
	return pat_ok(o->seed, off, buf, (size_t)got);
}

/* ---- tests ---- */

/* Edge sizes and offsets, one table: every byte and count must be right. */
static void t_edges_table(void)
{
	static const struct { uint64_t size, off; size_t len; } cases[] = {
		{ 0, 0, 4096 },                         /* empty: 0, no GET */
		{ 0, 100, 1 },
		{ 1, 0, 100 },                          /* 1-byte object */
		{ 1, 1, 100 },                          /* at EOF */
		{ 1, 0, 0 },
		{ 1000003, 999000, 128 * KiB },         /* straddles EOF */
		{ 1000003, 1000003, 10 },
		{ 1000003, 5000000, 10 },               /* past EOF */
		{ 8 * MiB, 8 * MiB - 1, 2 },            /* == part size: small */
		{ 8 * MiB + 1, 8 * MiB - 3, 1 * MiB },  /* part + 1: EOF byte */
		{ 9 * MiB - 17, 3 * MiB + 5, 1 * MiB },
		{ 6 * 1024 * MiB + 12345, 4096 * MiB - 7, 1 * MiB },  /* spans 4 GiB */
		{ 6 * 1024 * MiB + 12345, 6 * 1024 * MiB, 1 * MiB }, /* EOF > 4 GiB */
	};
	char *buf = malloc(2 * MiB);

	wd_arm(60);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct env e;
		char key[32];
		struct obj o;

		env_init(&e, 64 * MiB, 0);
		snprintf(key, sizeof(key), "edge%zu", i);
		o = env_open(&e, key, cases[i].size);
		if (!read_ok(&o, cases[i].off, cases[i].len, buf))
			harness_fail(__FILE__, __LINE__, "edge case %zu", i);
		if (cases[i].size == 0)
			CHECK_EQ_INT(e.fk.nlog, 0);
		rd_close(o.f);
		env_fini(&e);
	}
	free(buf);
	alarm(0);
}

/* A small object (<= part size) is fetched once, whole, whatever the reads. */
static void t_small_object_once(void)
{
	static const uint64_t sizes[] = { 1, 4095, 3 * MiB + 7, 8 * MiB };
	char *buf = malloc(1 * MiB);

	wd_arm(60);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		struct env e;
		struct obj o;
		unsigned seed = 7;
		int bad = 0;

		env_init(&e, 64 * MiB, 500);
		o = env_open(&e, "small", sizes[i]);
		for (int k = 0; k < 50; k++) {
			uint64_t off = (uint64_t)rand_r(&seed) % sizes[i];
			size_t len = 1 + (size_t)rand_r(&seed) % (1 * MiB);

			bad += !read_ok(&o, off, len, buf);
		}
		CHECK_EQ_INT(bad, 0);
		CHECK_EQ_INT(e.fk.nlog, 1);
		CHECK_EQ_INT(e.fk.log[0].off, 0);
		CHECK_EQ_INT(e.fk.log[0].len, sizes[i]);
		rd_close(o.f);
		env_fini(&e);
	}
	free(buf);
	alarm(0);
}

/* One `cat` of 300 MiB: growing windows, parallel parts, each byte fetched once. */
static void t_sequential_window_grows(void)
{
	const uint64_t size = 300 * MiB + 4321;
	struct env e;
	struct obj o;
	char *buf = malloc(128 * KiB);
	int bad = 0;
	size_t max_len = 0, big = 0;
	uint64_t expect_off = 0;

	wd_arm(120);
	env_init(&e, 512 * MiB, 2000);
	o = env_open(&e, "seq", size);
	for (uint64_t off = 0; off < size; off += 128 * KiB)
		bad += !read_ok(&o, off, 128 * KiB, buf);
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(rd_read(o.f, size, 128 * KiB, buf), 0);
	rd_close(o.f);

	CHECK(e.fk.nlog > 0);
	CHECK(e.fk.log[0].len <= 1 * MiB);              /* low time to first byte */
	CHECK_EQ_INT(e.fk.log[0].off, 0);
	for (size_t i = 0; i < e.fk.nlog; i++) {
		const struct fake_fetch_log *l = &e.fk.log[i];

		CHECK(l->len <= 8 * MiB);
		if (l->len > max_len) {
			/* Windows only grow: a bigger request never comes before a
			 * smaller one has been seen, until the cap. */
			max_len = l->len;
		}
		big += l->len == 8 * MiB;
		/* No gaps, no overlaps: every byte exactly once, in order. */
		if (l->off != expect_off)
			bad++;
		expect_off = l->off + l->len;
	}
	CHECK_EQ_INT(bad, 0);
	CHECK_EQ_INT(expect_off, size);
	CHECK_EQ_INT(e.fk.bytes, size);
	CHECK_EQ_INT(max_len, 8 * MiB);
	CHECK(big >= 30);
	/* Window doubling: 1, 2, 4 MiB requests appear before the first 8 MiB. */
	CHECK_EQ_INT(e.fk.log[1].len, 2 * MiB);
	CHECK_EQ_INT(e.fk.log[2].len, 4 * MiB);
	CHECK(e.fk.max_outstanding >= 4);               /* parts in parallel */
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* Readahead of all streams shares cfg.max_ahead: 4 streams over a large
 * budget stay within it (plus one demand part each), with every byte right;
 * the same streams without the cap use far more. */
struct capped { struct obj o; atomic_int bad; };

static void *capped_main(void *arg)
{
	struct capped *c = arg;
	char *buf = malloc(MiB);

	for (uint64_t off = 0; off < c->o.size; off += MiB)
		if (!read_ok(&c->o, off, MiB, buf))
			atomic_fetch_add(&c->bad, 1);
	free(buf);
	return NULL;
}

static uint64_t capped_peak(uint64_t max_ahead)
{
	struct env e;
	struct capped c[4];
	pthread_t th[4];
	uint64_t peak;

	env_init(&e, 512 * MiB, 1000);
	e.cfg.max_ahead = max_ahead;
	for (int i = 0; i < 4; i++) {
		char key[16];

		snprintf(key, sizeof(key), "cap%d", i);
		c[i].o = env_open(&e, key, 100 * MiB + (uint64_t)i * 4099);
		atomic_init(&c[i].bad, 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, capped_main, &c[i]);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(atomic_load(&c[i].bad), 0);
		rd_close(c[i].o.f);
	}
	peak = rd_budget_peak(e.b);
	env_fini(&e);
	return peak;
}

static void t_readahead_shares_max_ahead(void)
{
	uint64_t capped, free_run;

	wd_arm(120);
	capped = capped_peak(24 * MiB);
	free_run = capped_peak(0);
	if (capped > 24 * MiB + 4 * 8 * MiB || free_run <= 24 * MiB + 4 * 8 * MiB)
		fprintf(stderr, "  peak %llu MiB with the cap, %llu MiB without\n",
			(unsigned long long)(capped / MiB), (unsigned long long)(free_run / MiB));
	CHECK(capped <= 24 * MiB + 4 * 8 * MiB);
	CHECK(free_run > 24 * MiB + 4 * 8 * MiB);
	alarm(0);
}

/* The kernel's parallel, reordered reads on one file: like the kernel, the
 * threads take the next 128 KiB in order from a shared cursor, so they run at
 * most a few reads apart but finish in any order. Still one stream. */
struct par { struct obj *o; atomic_uint_fast64_t *cursor; uint64_t chunk; atomic_int bad; };

static void *par_main(void *arg)
{
	struct par *p = arg;
	char *buf = malloc(p->chunk);

	for (;;) {
		uint64_t off = atomic_fetch_add(p->cursor, p->chunk);

		if (off >= p->o->size)
			break;
		if (!read_ok(p->o, off, p->chunk, buf))
			atomic_fetch_add(&p->bad, 1);
	}
	free(buf);
	return NULL;
}

static void t_parallel_reads_one_file(void)
{
	const uint64_t size = 64 * MiB + 999;
	struct env e;
	struct obj o;
	struct par p[4];
	pthread_t th[4];
	atomic_uint_fast64_t cursor;

	wd_arm(120);
	env_init(&e, 256 * MiB, 300);
	o = env_open(&e, "par", size);
	atomic_init(&cursor, 0);
	for (int k = 0; k < 4; k++) {
		p[k] = (struct par){ .o = &o, .cursor = &cursor, .chunk = 128 * KiB };
		pthread_create(&th[k], NULL, par_main, &p[k]);
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(th[k], NULL);
		CHECK_EQ_INT(atomic_load(&p[k].bad), 0);
	}
	rd_close(o.f);
	if (e.fk.bytes > size + size / 4 || e.fk.nlog >= 100)
		fprintf(stderr, "  fetched %llu bytes in %zu GETs\n",
			(unsigned long long)e.fk.bytes, e.fk.nlog);
	/* Streamed, not random: few large requests, little refetching. */
	CHECK(e.fk.bytes <= size + size / 4);
	CHECK(e.fk.nlog < 100);
	env_fini(&e);
	alarm(0);
}

/* Random reads fetch what they need, not whole parts. */
static void t_random_fetches_little(void)
{
	const uint64_t size = 5ull * 1024 * MiB + 77;
	struct env e;
	struct obj o;
	char *buf = malloc(256 * KiB);
	unsigned seed = 99;
	uint64_t read_bytes = 0;
	int bad = 0;

	wd_arm(120);
	env_init(&e, 128 * MiB, 0);
	o = env_open(&e, "rand", size);
	for (int i = 0; i < 400; i++) {
		uint64_t off = ((uint64_t)rand_r(&seed) << 16 ^ (uint64_t)rand_r(&seed)) % size;
		size_t len = 16 * KiB + (size_t)rand_r(&seed) % (240 * KiB);

		bad += !read_ok(&o, off, len, buf);
		read_bytes += off < size ? (len < size - off ? len : size - off) : 0;
	}
	rd_close(o.f);
	CHECK_EQ_INT(bad, 0);
	CHECK(e.fk.bytes <= 3 * read_bytes);
	for (size_t i = 0; i < e.fk.nlog; i++)
		CHECK(e.fk.log[i].len <= 8 * MiB);
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* Small reads at scattered offsets of a region not much bigger than the
 * sequential tolerances (9 MiB back, 1 MiB ahead; here a 24 MiB object, over
 * one part so not fetched whole): an O_DIRECT 4 KiB reader, fio, a page
 * reader. They start no stream: each fetches its own 128 KiB-aligned bytes,
 * not whole blocks. Small reads that follow each other exactly still make a
 * stream. */
static void t_small_scattered_reads_start_no_stream(void)
{
	const uint64_t size = 24 * MiB + 77, bs = 4 * MiB;
	struct env e;
	struct obj o;
	char buf[4096];
	unsigned seed = 5;
	uint64_t fetched;
	int bad = 0;

	wd_arm(60);
	env_init(&e, 64 * MiB, 0);
	e.cfg.align = bs;
	e.cfg.random_align = 128 * KiB;
	e.cfg.part_size = 8 * MiB;
	o = env_open(&e, "scatter", size);
	for (int i = 0; i < 200; i++) {
		uint64_t off = ((uint64_t)rand_r(&seed) % (size / 4096)) * 4096;

		bad += !read_ok(&o, off, 4096, buf);
	}
	pthread_mutex_lock(&e.fk.mu);
	fetched = e.fk.bytes;
	for (size_t i = 0; i < e.fk.nlog; i++)
		CHECK(e.fk.log[i].len <= 128 * KiB);
	pthread_mutex_unlock(&e.fk.mu);
	/* Every fetch is one 128 KiB unit, at most one per read. */
	CHECK(fetched <= 200 * 128 * KiB);
	rd_close(o.f);

	/* 4 KiB reads one after the other: a stream (it fetches ahead). */
	o = env_open(&e, "contiguous", 64 * MiB);
	pthread_mutex_lock(&e.fk.mu);
	fetched = e.fk.bytes;
	pthread_mutex_unlock(&e.fk.mu);
	for (uint64_t off = 0; off < 64 * 4096; off += 4096)
		bad += !read_ok(&o, off, 4096, buf);
	rd_close(o.f);
	pthread_mutex_lock(&e.fk.mu);
	CHECK(e.fk.bytes - fetched >= bs);
	pthread_mutex_unlock(&e.fk.mu);
	CHECK_EQ_INT(bad, 0);
	env_fini(&e);
	alarm(0);
}

/* A small part size caps each demand GET; a 1 MiB random read spans several. */
static void t_demand_capped_at_part(void)
{
	struct env e;
	struct obj o;
	char *buf = malloc(1 * MiB);

	wd_arm(60);
	env_init(&e, 64 * MiB, 0);
	e.cfg.part_size = 256 * KiB;
	o = env_open(&e, "cap", 100 * MiB);
	CHECK(read_ok(&o, 50 * MiB + 12345, 1 * MiB, buf));   /* random: not at 0 */
	CHECK(e.fk.nlog >= 4);
	for (size_t i = 0; i < e.fk.nlog; i++)
		CHECK(e.fk.log[i].len <= 256 * KiB);
	rd_close(o.f);
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* 16 readers, 16 files, a budget far below what they would like: correct
 * bytes, peak <= max, no deadlock. */
struct tiny { struct obj o; unsigned seed; atomic_int bad; };

static void *tiny_main(void *arg)
{
	struct tiny *t = arg;
	char *buf = malloc(1 * MiB);

	for (uint64_t off = 0; off < t->o.size; ) {
		size_t len = 4 * KiB + (size_t)rand_r(&t->seed) % (1 * MiB - 4 * KiB);

		if (!read_ok(&t->o, off, len, buf))
			atomic_fetch_add(&t->bad, 1);
		off += len;
	}
	for (int i = 0; i < 30; i++) {
		uint64_t off = (uint64_t)rand_r(&t->seed) % t->o.size;

		if (!read_ok(&t->o, off, 200 * KiB, buf))
			atomic_fetch_add(&t->bad, 1);
	}
	free(buf);
	return NULL;
}

static void t_tiny_budget_16_readers(void)
{
	struct env e;
	struct tiny t[16];
	pthread_t th[16];

	wd_arm(240);
	env_init(&e, 3 * MiB, 200);
	for (int i = 0; i < 16; i++) {
		char key[32];

		snprintf(key, sizeof(key), "tiny%d", i);
		t[i].o = env_open(&e, key, 12 * MiB + (uint64_t)i * 7919);
		t[i].seed = 1000u + (unsigned)i;
		atomic_init(&t[i].bad, 0);
	}
	for (int i = 0; i < 16; i++)
		pthread_create(&th[i], NULL, tiny_main, &t[i]);
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(atomic_load(&t[i].bad), 0);
		rd_close(t[i].o.f);
	}
	CHECK(rd_budget_peak(e.b) <= 3 * MiB);
	env_fini(&e);
	alarm(0);
}

/* An idle open file holding readahead must not starve another file's demand
 * read: the waiter reclaims the idle buffers. */
static void t_idle_file_cannot_starve(void)
{
	struct env e;
	struct obj a, b;
	char *buf = malloc(1 * MiB);

	wd_arm(60);
	env_init(&e, 4 * MiB, 100);
	a = env_open(&e, "idle", 64 * MiB);
	b = env_open(&e, "busy", 64 * MiB);
	for (uint64_t off = 0; off < 8 * MiB; off += 1 * MiB)
		CHECK(read_ok(&a, off, 1 * MiB, buf));
	/* a now sits on readahead; b must still make progress. */
	for (uint64_t off = 0; off < 16 * MiB; off += 1 * MiB)
		CHECK(read_ok(&b, 33 * MiB - off, 1 * MiB, buf));
	rd_close(a.f);
	rd_close(b.f);
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* The object changes under a stream: -ESTALE, and never a byte of v2. */
static void t_estale_mid_stream(void)
{
	struct env e;
	struct obj o;
	char *buf = malloc(1 * MiB);
	int n_ok = 0, n_stale = 0, other = 0;

	wd_arm(60);
	env_init(&e, 256 * MiB, 200);
	o = env_open(&e, "stale", 200 * MiB);
	for (uint64_t off = 0; off < 4 * MiB; off += 128 * KiB)
		CHECK(read_ok(&o, off, 128 * KiB, buf));
	fake_fetch_set_etag(&e.fk, "stale", "\"v2\"");
	for (uint64_t off = 4 * MiB; off < 100 * MiB; off += 128 * KiB) {
		ssize_t r = rd_read(o.f, off, 128 * KiB, buf);

		if (r == (ssize_t)(128 * KiB) && n_stale == 0 && pat_ok(o.seed, off, buf, 128 * KiB))
			n_ok++;         /* held before the change: consistent v1 */
		else if (r == -ESTALE)
			n_stale++;
		else
			other++;
	}
	CHECK(n_stale > 0);
	CHECK_EQ_INT(other, 0);
	/* Sticky: even bytes held before, or random offsets, are refused. */
	CHECK_EQ_INT(rd_read(o.f, 0, 4096, buf), -ESTALE);
	CHECK_EQ_INT(rd_read(o.f, 150 * MiB, 4096, buf), -ESTALE);
	rd_close(o.f);
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* Other errors fail the read that needed the part; a retry succeeds. */
static void t_errors_then_retry_table(void)
{
	static const struct { int err; size_t nth; uint64_t size, off; } cases[] = {
		{ -EIO, 1, 100 * MiB, 0 },              /* first GET of a stream */
		{ -EACCES, 1, 100 * MiB, 40 * MiB },    /* random demand GET */
		{ -ENOENT, 1, 3 * MiB, 5 },             /* small object */
		{ -EIO, 2, 100 * MiB, 0 },              /* a readahead part */
	};
	char *buf = malloc(1 * MiB);

	wd_arm(60);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct env e;
		struct obj o;
		int saw_err = 0;

		env_init(&e, 64 * MiB, 100);
		e.fk.fail_nth = cases[i].nth;
		e.fk.fail_err = cases[i].err;
		o = env_open(&e, "err", cases[i].size);
		/* Read forward until the failed part is hit, then retry it. */
		for (uint64_t off = cases[i].off; off < cases[i].off + 8 * MiB; off += 128 * KiB) {
			ssize_t r = rd_read(o.f, off, 128 * KiB, buf);

			if (r < 0) {
				if (r != cases[i].err)
					harness_fail(__FILE__, __LINE__, "case %zu: %zd", i, r);
				saw_err = 1;
				if (!read_ok(&o, off, 128 * KiB, buf))
					harness_fail(__FILE__, __LINE__, "case %zu: retry", i);
			} else if (!pat_ok(o.seed, off, buf, (size_t)r)) {
				harness_fail(__FILE__, __LINE__, "case %zu: bytes", i);
			}
		}
		/* A failed readahead part nobody waited on is just refetched. */
		if (cases[i].nth == 1 && !saw_err)
			harness_fail(__FILE__, __LINE__, "case %zu: error not seen", i);
		rd_close(o.f);
		env_fini(&e);
	}
	free(buf);
	alarm(0);
}

/* fetch refusing to queue: the read fails with its errno, nothing leaks. */
static void t_queue_failure(void)
{
	struct env e;
	struct obj o;
	char buf[4096];

	wd_arm(30);
	env_init(&e, 64 * MiB, 0);
	o = env_open(&e, "q", 100 * MiB);
	e.fk.queue_err = -ENOMEM;
	CHECK_EQ_INT(rd_read(o.f, 0, sizeof(buf), buf), -ENOMEM);
	e.fk.queue_err = 0;
	CHECK(read_ok(&o, 0, sizeof(buf), buf));
	rd_close(o.f);
	env_fini(&e);
	alarm(0);
}

/* Close with GETs in flight: waits for them, frees everything (ASan/LSan). */
/* The block cache's sized fetch: each request carries the object size, and
 * with align = 4 MiB every segment of a stream (readahead, tail) covers whole
 * blocks, so each block is fetched exactly once by one segment; random reads
 * round out only to random_align (the cache's 128 KiB pieces). */
static void t_aligned_sized_fetch(void)
{
	const uint64_t size = 70 * MiB + 12345, bs = 4 * MiB;
	struct env e;
	struct obj o;
	char *buf = malloc(1 * MiB);
	unsigned seed = 7;
	size_t nstream;
	int bad = 0, small = 0;

	wd_arm(120);
	env_init(&e, 256 * MiB, 0);
	e.cfg.align = bs;
	e.cfg.random_align = 128 * KiB;
	e.cfg.part_size = 6 * MiB;                   /* rounded up to 8 MiB */
	o = env_open(&e, "aligned", size);
	for (uint64_t off = 0; off < size; off += 128 * KiB)   /* a stream ... */
		bad += !read_ok(&o, off, 128 * KiB, buf);
	pthread_mutex_lock(&e.fk.mu);
	nstream = e.fk.nlog;
	pthread_mutex_unlock(&e.fk.mu);
	for (int i = 0; i < 50; i++) {                /* ... then random reads */
		uint64_t off = ((uint64_t)rand_r(&seed) << 16 ^ (uint64_t)rand_r(&seed)) % size;

		bad += !read_ok(&o, off, 64 * KiB + (size_t)rand_r(&seed) % (512 * KiB), buf);
	}
	rd_close(o.f);
	CHECK_EQ_INT(bad, 0);
	CHECK(e.fk.nlog > 0);
	for (size_t i = 0; i < e.fk.nlog; i++)      /* every request names the size */
		CHECK_EQ_INT(e.fk.log[i].obj_size, size);
	for (size_t i = 0; i < e.fk.nlog; i++) {
		uint64_t end = e.fk.log[i].off + e.fk.log[i].len;
		uint64_t a = i < nstream ? bs : 128 * KiB;

		CHECK(e.fk.log[i].off % a == 0);
		CHECK(end % a == 0 || end == size);
		CHECK(e.fk.log[i].len <= 8 * MiB);
		small += i >= nstream && e.fk.log[i].len < bs;
	}
	/* Most random reads start no stream: they fetch less than a block. */
	CHECK(small >= 30);
	env_fini(&e);
	free(buf);
	alarm(0);
}

static void t_close_with_gets_in_flight(void)
{
	struct env e;
	char *buf = malloc(1 * MiB);

	wd_arm(60);
	env_init(&e, 256 * MiB, 20000);
	for (int round = 0; round < 3; round++) {
		struct obj o = env_open(&e, round == 0 ? "c0" : round == 1 ? "c1" : "c2", 200 * MiB);
		unsigned inflight;

		/* The readahead past what is read stays out until just before
		 * the close (not only for the fake's latency, which valgrind's
		 * slowness outlasted). */
		fake_fetch_hold(&e.fk, (uint64_t)(round + 1) * MiB, 200 * MiB);
		for (uint64_t off = 0; off < (uint64_t)(round + 1) * MiB; off += 512 * KiB)
			CHECK(read_ok(&o, off, 512 * KiB, buf));
		pthread_mutex_lock(&e.fk.mu);
		inflight = e.fk.outstanding;
		pthread_mutex_unlock(&e.fk.mu);
		CHECK(inflight > 0);            /* the test does test something */
		fake_fetch_hold(&e.fk, 0, 0);   /* they start: out for the latency */
		rd_close(o.f);
		CHECK_EQ_INT(rd_budget_used(e.b), 0);
	}
	env_fini(&e);
	free(buf);
	alarm(0);
}


/*
 * A seek ends a stream: its readahead still in flight is cancelled at the seek
 * (the fake ends those GETs with -ECANCELED), forward or backward; the random
 * read and a later read of the cancelled range get the right bytes, and every
 * charged byte comes back. Without a cancel function the same GETs run to
 * their end. The reads of the first 6 MiB pass the middle of the 3..7 MiB
 * chunk and issue 7..15 MiB, which the fake holds until cancelled or released.
 * Returns the cancel calls made by the seek itself.
 */
static unsigned seek_run(int with_cancel, int backward, int via_ahead)
{
	struct rd_ahead *ah = NULL;
	struct env e;
	struct obj o;
	char *buf = malloc(MiB);
	uint64_t start = backward ? 100 * MiB : 0, far = backward ? 20 * MiB + 3 : 150 * MiB + 3;
	unsigned at_seek;

	env_init(&e, 256 * MiB, 1000);
	e.fk.base.cancels = with_cancel;
	if (via_ahead) {
		/* The production stack's top: the cancel must pass through the
		 * across-file readahead (no entry for these GETs) to the fake. */
		CHECK_EQ_INT(rd_ahead_new(&(struct rd_ahead_config){ .inner = &e.fk.base,
								     .budget = e.b }, &ah), 0);
		e.cfg.fetcher = rd_ahead_fetcher(ah);
	}
	fake_fetch_hold(&e.fk, start + 7 * MiB, start + 15 * MiB + 1);
	o = env_open(&e, with_cancel ? (backward ? "seekb1" : "seekf1") :
			 (backward ? "seekb0" : "seekf0"), 200 * MiB + 77);
	for (uint64_t off = start; off < start + 6 * MiB; off += MiB)
		CHECK(read_ok(&o, off, MiB, buf));
	CHECK(fake_fetch_pending(&e.fk) > 0);         /* readahead is out there to cancel */
	CHECK(read_ok(&o, far, 4096, buf));     /* the seek */
	pthread_mutex_lock(&e.fk.mu);
	at_seek = e.fk.cancel_calls;
	pthread_mutex_unlock(&e.fk.mu);
	fake_fetch_hold(&e.fk, 0, 0);
	CHECK(read_ok(&o, far + 4096, 60000, buf));
	/* Over the cancelled readahead: fetched again, right bytes. */
	for (uint64_t off = start + 6 * MiB; off < start + 20 * MiB; off += MiB)
		CHECK(read_ok(&o, off, MiB, buf));
	rd_close(o.f);
	pthread_mutex_lock(&e.fk.mu);
	/* With the cancel, the held GET ended -ECANCELED, not served. */
	CHECK_EQ_INT(e.fk.cancelled > 0, with_cancel);
	pthread_mutex_unlock(&e.fk.mu);
	rd_ahead_destroy(ah);
	env_fini(&e);
	free(buf);
	return at_seek;
}

static void t_seek_cancels_readahead(void)
{
	for (int backward = 0; backward < 2; backward++) {
		wd_arm(60);
		for (int via_ahead = 0; via_ahead < 2; via_ahead++) {
			CHECK_EQ_INT(seek_run(0, backward, via_ahead), 0);
			CHECK(seek_run(1, backward, via_ahead) > 0);
		}
	}
	alarm(0);
}

/* rd_close cancels what is in flight before it waits for it (without the
 * cancel, the held GET would keep it waiting until the watchdog fires). */
static void t_close_cancels(void)
{
	struct env e;
	char *buf = malloc(MiB);

	wd_arm(60);
	env_init(&e, 256 * MiB, 1000);
	e.fk.base.cancels = 1;
	fake_fetch_hold(&e.fk, 7 * MiB, 15 * MiB + 1);
	struct obj o = env_open(&e, "cc", 100 * MiB);

	for (uint64_t off = 0; off < 6 * MiB; off += MiB)
		CHECK(read_ok(&o, off, MiB, buf));
	CHECK(fake_fetch_pending(&e.fk) > 0);
	rd_close(o.f);
	CHECK_EQ_INT(rd_budget_used(e.b), 0);
	pthread_mutex_lock(&e.fk.mu);
	CHECK(e.fk.cancel_calls > 0);
	CHECK(e.fk.cancelled > 0);
	/* rd_close waited for every one: each done has at least begun (the
	 * fake's own count of outstanding requests drops only after done
	 * returns, which rd_close does not wait for) */
	CHECK_EQ_INT(e.fk.done_calls, e.fk.nlog);
	pthread_mutex_unlock(&e.fk.mu);
	env_fini(&e);
	free(buf);
	alarm(0);
}

/* Gather iov into out; returns total bytes. */
static size_t iov_gather(const struct iovec *iov, unsigned n, char *out)
{
	size_t t = 0;

	for (unsigned i = 0; i < n; i++) {
		memcpy(out + t, iov[i].iov_base, iov[i].iov_len);
		t += iov[i].iov_len;
	}
	return t;
}

static int iov_in_dst(const struct iovec *iov, unsigned n, const char *dst, size_t cap)
{
	for (unsigned i = 0; i < n; i++)
		if ((const char *)iov[i].iov_base >= dst && (const char *)iov[i].iov_base < dst + cap)
			return 1;
	return 0;
}

/* Zero-copy reads: bytes already fetched are pinned in place, and so are
 * bytes whose GET is in flight (once it is done); a pinned segment outlives
 * being dropped behind the reader, and every byte and every budget byte comes
 * back right. */
static void t_read_iov_pins_and_copies(void)
{
	struct env e;
	struct obj o;
	char *dst = malloc(8 * MiB), *got = malloc(8 * MiB);
	struct iovec iov1[RD_PIN_MAX], iov2[RD_PIN_MAX];
	struct rd_pin pin1, pin2;
	unsigned n1, n2;
	ssize_t r;

	wd_arm(20);
	env_init(&e, 64 * MiB, 200);
	e.cfg.part_size = 2 * MiB;
	o = env_open(&e, "iov", 24 * MiB);
	/* Nothing fetched yet: the read waits for its GET, then points into
	 * the segment (the cold path: no copy into dst). */
	r = rd_read_iov(o.f, 0, MiB, dst, iov1, &n1, &pin1);
	CHECK_EQ_INT(r, (ssize_t)MiB);
	CHECK(n1 >= 1 && pin1.n == n1);
	CHECK(!iov_in_dst(iov1, n1, dst, 8 * MiB));
	CHECK_EQ_INT(iov_gather(iov1, n1, got), MiB);
	CHECK(pat_ok(o.seed, 0, got, MiB));
	rd_unpin(o.f, &pin1);
	/* The same bytes again: finished now, so pinned in place. */
	memset(dst, 0, 8 * MiB);
	r = rd_read_iov(o.f, 0, MiB, dst, iov1, &n1, &pin1);
	CHECK_EQ_INT(r, (ssize_t)MiB);
	CHECK(n1 >= 1 && pin1.n == n1);
	CHECK(!iov_in_dst(iov1, n1, dst, 8 * MiB));
	CHECK_EQ_INT(iov_gather(iov1, n1, got), MiB);
	CHECK(pat_ok(o.seed, 0, got, MiB));
	/* 3 MiB across segments of at most one part (2 MiB): several pieces. */
	CHECK(read_ok(&o, MiB, 2 * MiB, dst));
	CHECK(read_ok(&o, 3 * MiB, MiB, dst));
	r = rd_read_iov(o.f, MiB, 3 * MiB, dst, iov2, &n2, &pin2);
	CHECK_EQ_INT(r, (ssize_t)(3 * MiB));
	CHECK(n2 >= 2 && pin2.n == n2);
	CHECK(!iov_in_dst(iov2, n2, dst, 8 * MiB));
	CHECK_EQ_INT(iov_gather(iov2, n2, got), 3 * MiB);
	CHECK(pat_ok(o.seed, MiB, got, 3 * MiB));
	rd_unpin(o.f, &pin2);
	/* Read far on: the first segment is dropped behind the reader while still
	 * pinned by pin1; its bytes must stay intact (ASan: not freed) until the
	 * unpin, which frees it. */
	for (uint64_t off = 3 * MiB; off < 20 * MiB; off += MiB)
		CHECK(read_ok(&o, off, MiB, dst));
	CHECK_EQ_INT(iov_gather(iov1, n1, got), MiB);
	CHECK(pat_ok(o.seed, 0, got, MiB));
	rd_unpin(o.f, &pin1);
	CHECK_EQ_INT(pin1.n, 0);
	/* At EOF and past it: 0, nothing pinned. */
	CHECK_EQ_INT(rd_read_iov(o.f, 24 * MiB, 10, dst, iov1, &n1, &pin1), 0);
	CHECK_EQ_INT(n1, 0);
	rd_close(o.f);
	env_fini(&e);           /* budget back to 0: the dropped pinned segment was freed */
	free(dst);
	free(got);
	alarm(0);
}

/* The copying path stays for what cannot be pinned: a read that runs from a
 * finished segment into bytes nobody fetches yet must not wait for budget
 * while it pins the first piece, so it copies (readahead is off here:
 * max_ahead 1 byte, every GET is a demand GET). */
static void t_read_iov_copies_past_a_gap(void)
{
	struct env e;
	struct obj o;
	char *dst = malloc(MiB);
	struct iovec iov[RD_PIN_MAX];
	struct rd_pin pin;
	unsigned n;

	wd_arm(20);
	env_init(&e, 64 * MiB, 200);
	e.cfg.part_size = 2 * MiB;
	e.cfg.max_ahead = 1;
	o = env_open(&e, "gap", 24 * MiB);
	CHECK(read_ok(&o, 0, 64 * KiB, dst));           /* segment [0, 64 KiB) */
	memset(dst, 0, MiB);
	CHECK_EQ_INT(rd_read_iov(o.f, 0, 128 * KiB, dst, iov, &n, &pin), (ssize_t)(128 * KiB));
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(pin.n, 0);
	CHECK(iov[0].iov_base == dst);
	CHECK(pat_ok(o.seed, 0, dst, 128 * KiB));
	rd_close(o.f);
	env_fini(&e);
	free(dst);
	alarm(0);
}

/* A read that waits in place for a GET that fails: the errno, nothing pinned,
 * the segment freed (budget back to 0 at the end); the next read refetches.
 * Then -ESTALE while another read's pin is out: that pin's bytes stay intact
 * (ASan: not freed) until its unpin, and every later read fails -ESTALE. */
static void t_read_iov_wait_fails_cleanly(void)
{
	struct env e;
	struct obj o;
	char *dst = malloc(MiB), *got = malloc(MiB);
	struct iovec iov[RD_PIN_MAX], iov1[RD_PIN_MAX];
	struct rd_pin pin, pin1;
	unsigned n, n1;

	wd_arm(30);
	env_init(&e, 64 * MiB, 200);
	e.cfg.part_size = 2 * MiB;
	e.fk.fail_nth = 1;
	e.fk.fail_err = -EIO;
	o = env_open(&e, "waitfail", 24 * MiB);
	CHECK_EQ_INT(rd_read_iov(o.f, 0, MiB, dst, iov, &n, &pin), -EIO);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(pin.n, 0);
	CHECK_EQ_INT(rd_read_iov(o.f, 0, MiB, dst, iov1, &n1, &pin1), (ssize_t)MiB);
	CHECK(n1 >= 1 && pin1.n == n1 && !iov_in_dst(iov1, n1, dst, MiB));
	/* The object changes; a seek far on waits for a GET that answers
	 * -ESTALE, which drops every held segment, pin1's included. */
	fake_fetch_set_etag(&e.fk, "waitfail", "\"v2\"");
	CHECK_EQ_INT(rd_read_iov(o.f, 20 * MiB, MiB, dst, iov, &n, &pin), -ESTALE);
	CHECK_EQ_INT(pin.n, 0);
	CHECK_EQ_INT(rd_read_iov(o.f, 0, MiB, dst, iov, &n, &pin), -ESTALE);
	CHECK_EQ_INT(iov_gather(iov1, n1, got), MiB);
	CHECK(pat_ok(o.seed, 0, got, MiB));
	rd_unpin(o.f, &pin1);
	rd_close(o.f);
	env_fini(&e);
	free(dst);
	free(got);
	alarm(0);
}

/* 16 readers over 3 MiB of budget (so demand reads reclaim other files'
 * segments all the time) and 4 of them on one shared file, all through
 * rd_read_iov: each holds its pins a little (a reply being written) before it
 * checks the bytes and unpins. A pinned segment reclaimed or freed early is a
 * wrong byte or an ASan report; a pin held across a budget wait deadlocks
 * (watchdog). */
struct iovr {
	struct obj *o;
	unsigned seed;
	atomic_int bad;
};

static void *iovr_main(void *arg)
{
	struct iovr *t = arg;
	char *dst = malloc(MiB), *got = malloc(MiB);
	struct iovec iov[RD_PIN_MAX];
	struct rd_pin pin;
	unsigned n;

	for (int i = 0; i < 60; i++) {
		int seq = rand_r(&t->seed) % 4 != 0;
		size_t len = 4 * KiB + (size_t)rand_r(&t->seed) % (MiB - 4 * KiB);
		uint64_t off = seq ? (uint64_t)i * 256 * KiB % t->o->size
				   : (uint64_t)rand_r(&t->seed) % t->o->size;
		ssize_t want = (ssize_t)(len < t->o->size - off ? len : t->o->size - off);
		ssize_t r = rd_read_iov(t->o->f, off, len, dst, iov, &n, &pin);

		if (r != want || iov_gather(iov, n, got) != (size_t)want) {
			atomic_fetch_add(&t->bad, 1);
		} else {
			usleep(50);             /* the reply's writev */
			if (!pat_ok(t->o->seed, off, got, (size_t)r) ||
			    iov_gather(iov, n, got) != (size_t)r ||
			    !pat_ok(t->o->seed, off, got, (size_t)r))
				atomic_fetch_add(&t->bad, 1);
		}
		rd_unpin(t->o->f, &pin);
	}
	free(dst);
	free(got);
	return NULL;
}

static void t_read_iov_races_reclaim(void)
{
	struct env e;
	struct obj o[13];
	struct iovr t[16];
	pthread_t th[16];

	wd_arm(240);
	env_init(&e, 3 * MiB, 200);
	for (int i = 0; i < 13; i++) {
		char key[32];

		snprintf(key, sizeof(key), "iovr%d", i);
		o[i] = env_open(&e, key, 12 * MiB + (uint64_t)i * 7919);
	}
	for (int i = 0; i < 16; i++) {
		t[i].o = &o[i < 4 ? 0 : i - 3];         /* readers 0-3 share o[0] */
		t[i].seed = 2000u + (unsigned)i;
		atomic_init(&t[i].bad, 0);
	}
	for (int i = 0; i < 16; i++)
		pthread_create(&th[i], NULL, iovr_main, &t[i]);
	for (int i = 0; i < 16; i++) {
		pthread_join(th[i], NULL);
		CHECK_EQ_INT(atomic_load(&t[i].bad), 0);
	}
	for (int i = 0; i < 13; i++)
		rd_close(o[i].f);
	CHECK(rd_budget_peak(e.b) <= 3 * MiB);
	env_fini(&e);
	alarm(0);
}

static const struct test tests[] = {
	TEST(t_edges_table),
	TEST(t_small_object_once),
	TEST(t_sequential_window_grows),
	TEST(t_parallel_reads_one_file),
	TEST(t_readahead_shares_max_ahead),
	TEST(t_random_fetches_little),
	TEST(t_small_scattered_reads_start_no_stream),
	TEST(t_demand_capped_at_part),
	TEST(t_tiny_budget_16_readers),
	TEST(t_idle_file_cannot_starve),
	TEST(t_estale_mid_stream),
	TEST(t_errors_then_retry_table),
	TEST(t_queue_failure),
	TEST(t_close_with_gets_in_flight),
	TEST(t_seek_cancels_readahead),
	TEST(t_close_cancels),
	TEST(t_aligned_sized_fetch),
	TEST(t_read_iov_pins_and_copies),
	TEST(t_read_iov_copies_past_a_gap),
	TEST(t_read_iov_wait_fails_cleanly),
	TEST(t_read_iov_races_reclaim),
	{ 0 },
};

int main(void)
{
	return harness_run("prefetch", tests);
}
