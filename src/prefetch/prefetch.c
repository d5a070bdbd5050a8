/*
 * prefetch — FUSE reads of one open object -> ranged GETs, under one budget.
 *
 * DESIGN
 * State. Each rd_file holds a list of segments sorted by offset, never
 * overlapping: [off, off+len) with a buffer of exactly len bytes, charged to the
 * budget before its GET is issued. A segment is INFLIGHT (its GET owns the
 * buffer), DONE (readable) or ERR (failed; already off the list, kept only
 * while readers that waited on it look at the errno). A segment leaves the list
 * ("detached") when dropped; its memory is freed by whoever is last among the
 * completion and the readers waiting on it (seg_put_locked).
 *
 * Policy.
 *  - size <= part: the first read fetches the whole object as one GET.
 *  - Sequential detector: a read is part of the stream when it starts at most
 *    RD_SEQ_SKIP (while streaming: one window, at least one part plus
 *    RD_WINDOW_MIN, which the kernel's readahead spans) past the furthest byte read
 *    so far, or inside held data while streaming, and no more than
 *    RD_SEQ_BACK before it (or anywhere inside held data while streaming):
 *    this absorbs the kernel's reordering of parallel 128 KiB..1 MiB reads.
 *    Not streaming, a read shorter than RD_SHORT that does not start where
 *    the last one ended is random whatever the tolerances say.
 *  - Readahead is issued in chunks. The first chunk is RD_WINDOW_MIN (1 MiB,
 *    low time to first byte). When the reader passes the middle of the newest
 *    chunk it has caught up: the window doubles (up to max_window) and the next
 *    chunk [end of previous, +window) is issued, cut into parts of at most
 *    part bytes that are all in flight at once.
 *  - Anything else is a random read: only its bytes are fetched, rounded out to
 *    the random alignment (64 KiB; the cache's piece size, 128 KiB, when the
 *    cache is on), at most one part per GET, and the window resets.
 *  - Alignment. With the block cache on, cfg->align is its block size: every
 *    segment starts on a block boundary and ends on one (or at EOF), readahead
 *    chunks included, and part is a multiple of it. So each block is fetched by
 *    exactly one segment and cached whole; a misaligned segment would still be
 *    correct (the cache widens to whole blocks or pieces) but would fetch a
 *    block twice. A random read covers only part of a block: the cache serves
 *    it from the block when that is cached, else fetches and keeps pieces.
 *    Cache hits come back through the same asynchronous fetch, so the window
 *    keeps several blocks' disk reads in flight just as it keeps GETs.
 *  - When a stream ends (a random read), its readahead past the furthest byte
 *    read is dropped, except what the new read needs (a forward seek skips
 *    it, a backward one leaves it behind); when the fetcher cancels (S3 without
 *    the block cache, or a mount attached to another's cache) its GETs still in
 *    flight are detached and cancelled, so the connections serve the new
 *    reads instead of bytes nobody wants. Without it (our own block cache:
 *    those blocks are worth caching) they stay and finish. rd_close cancels
 *    every GET in flight the same way.
 *  - Streams free segments RD_SEQ_BACK (or two blocks, when larger)
 *    behind the reader; random readers
 *    keep up to RD_MAX_SEGS segments (LRU) as a small cache.
 *
 * Budget and why demand reads cannot deadlock. Readahead takes budget without
 * waiting, only while the charged total stays within cfg->max_ahead (all
 * streams share it), and issues less when short. A demand GET is at most min(part,
 * budget max) bytes and waits for budget WITHOUT holding the file lock; while
 * it waits, rd_budget_take() reclaims DONE segments nobody waits on, from any
 * open file (this one included; trylock only). Every charged byte is in one of:
 * (a) an INFLIGHT segment: the fetch contract says it completes; (b) a DONE
 * segment with waiters: those readers copy or reply without needing budget and
 * unpin, at the latest once the GETs in flight they also wait for complete
 * (a reader never waits for budget while it holds a pin: pin_range); (c) a
 * DONE idle segment: reclaimable now. File
 * locks are never held across a wait. So charged bytes become reclaimable in
 * bounded time and a waiter's request (<= max) is eventually met: memory is
 * bounded by max, and a read needs at most one request's worth at a time. (Not
 * guaranteed: fairness between demand waiters under permanent overload.)
 *
 * -ESTALE from any GET makes the file stale for good: every held segment is
 * dropped and every later read fails with -ESTALE, so bytes of two versions of
 * the object are never returned through one open file. Other errors fail only
 * the reads that waited on that segment; it is already off the list, so the
 * next read of those bytes issues a fresh GET.
 *
 * Threads and locks. rd_read runs on FUSE worker threads, several at once per
 * file; seg_done runs on the fetcher's thread (the http thread in production)
 * and only takes f->mu briefly. Lock order: rd_file.mu -> rd_budget.mu (the
 * budget only trylocks files). fetcher_fetch and fetcher_cancel are called
 * with f->mu held; the fetch contract (fetch.h) keeps done off this thread.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "feedfs/stats.h"
#include "feedfs/log.h"
#include "prefetch_i.h"

#define RD_ALIGN         (64u << 10)       /* random reads round out to this */
#define RD_PART_DEFAULT  (8ull << 20)
#define RD_WINDOW_MAX_DEFAULT (64ull << 20)
#define RD_SEQ_SKIP      (1ull << 20)      /* forward skip still sequential */
#define RD_SEQ_BACK      (4ull << 20)      /* backward re-read still sequential; kept behind */
#define RD_SHORT         (128ull << 10)    /* shorter, not contiguous: never starts a stream */
#define RD_MAX_SEGS      64                /* random reader's cache, in segments */
#define RD_BUF_ALIGN     4096u             /* segment buffers: O_DIRECT cache hits land in them */

enum seg_state { SEG_INFLIGHT, SEG_DONE, SEG_ERR };

struct rd_seg {
	struct rd_seg *prev, *next;     /* in f->segs; NULL when detached */
	struct rd_file *file;
	uint64_t off;
	size_t len;                     /* == bytes charged to the budget */
	char *buf;                      /* RD_BUF_ALIGN-aligned, inside mem */
	void *mem;                      /* what malloc gave; freed */
	enum seg_state state;
	int err;                        /* SEG_ERR: -errno */
	unsigned waiters;               /* readers blocked on it: pins it */
	int cancelled;                  /* cancel asked for its GET */
	uint64_t last_use;
	struct fetch_req req;           /* its GET; done is seg_done */
};

struct rd_file {
	/* Immutable after rd_open. */
	struct fetcher *fetcher;
	int cancels;                    /* fetcher->cancels: a seek cancels readahead */
	struct rd_budget *budget;
	char *key;
	size_t key_len;
	char *etag;
	uint64_t size, part, max_window, win_min, align, ralign;
	uint64_t max_ahead;             /* readahead only while the budget is within this */
	struct stats_hist *read_wait;   /* cfg->read_wait: each read's wait for bytes */
	uint64_t seq_back;              /* RD_SEQ_BACK, or two blocks when larger */
	struct rd_budget_client bc;

	/* Everything below is guarded by mu. Lock order: mu -> budget->mu. */
	pthread_mutex_t mu;
	pthread_cond_t cond;            /* broadcast on every completion */
	struct rd_seg segs;             /* sentinel: segs.next is the lowest offset */
	unsigned nsegs, inflight;
	unsigned pinned;                /* rd_read_iov pins not yet rd_unpin'ed */
	int stale;                      /* 0 or -ESTALE, sticky */
	uint64_t tick;
	/* Sequential detector and readahead chunk. */
	uint64_t seq_pos;               /* furthest byte read by the stream */
	uint64_t window;                /* 0: not streaming */
	uint64_t ra_end, ra_trigger;
	int ra_short;                   /* last chunk was cut short by budget */
};

static uint64_t min_u64(uint64_t a, uint64_t b) { return a < b ? a : b; }
static uint64_t max_u64(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t seg_end(const struct rd_seg *s) { return s->off + s->len; }

/* First segment that ends after off (it holds off, or is the next one), or the
 * sentinel. */
static struct rd_seg *seg_find(struct rd_file *f, uint64_t off)
{
	struct rd_seg *s;

	for (s = f->segs.next; s != &f->segs; s = s->next)
		if (seg_end(s) > off)
			break;
	return s;
}

static int seg_holds(struct rd_file *f, const struct rd_seg *s, uint64_t off)
{
	return s != &f->segs && s->off <= off;
}

/* Gap around off bounded by its neighbours: next is seg_find(f, off), which
 * does not hold off. */
static void gap_bounds(struct rd_file *f, struct rd_seg *next, uint64_t *lo, uint64_t *hi)
{
	*lo = next->prev == &f->segs ? 0 : seg_end(next->prev);
	*hi = next == &f->segs ? f->size : next->off;
}

static void seg_unlink(struct rd_file *f, struct rd_seg *s)
{
	s->prev->next = s->next;
	s->next->prev = s->prev;
	s->prev = s->next = NULL;
	f->nsegs--;
}

/* Free s if nothing refers to it any more. Returns the bytes to uncharge; the
 * caller gives them (or, inside reclaim, reports them). */
static uint64_t seg_put_locked(struct rd_seg *s)
{
	uint64_t n = s->len;

	if (s->next || s->state == SEG_INFLIGHT || s->waiters)
		return 0;
	free(s->mem);
	free(s);
	return n;
}

static void seg_done(struct fetch_req *req, ssize_t result);

/* Take s off the list. In flight or pinned, it is freed later by seg_done or
 * its last waiter. */
static uint64_t seg_drop(struct rd_file *f, struct rd_seg *s)
{
	seg_unlink(f, s);
	return seg_put_locked(s);
}

/* Ask for s's GET to end early: s must be detached, in flight and waited on by
 * nobody (seg_done frees it). No-op when the fetcher does not cancel. */
static void seg_cancel(struct rd_file *f, struct rd_seg *s)
{
	BUG_ON(s->next || s->state != SEG_INFLIGHT || s->waiters);
	if (!f->cancels || s->cancelled)
		return;
	s->cancelled = 1;
	fetcher_cancel(f->fetcher, &s->req);
}

static uint64_t drop_all(struct rd_file *f)
{
	uint64_t freed = 0;

	while (f->segs.next != &f->segs)
		freed += seg_drop(f, f->segs.next);
	return freed;
}

static int seg_idle(const struct rd_seg *s)
{
	return s->state == SEG_DONE && s->waiters == 0;
}

/* Runs on the fetcher's thread: record the outcome, wake readers, never block
 * beyond the two short mutexes. */
static void seg_done(struct fetch_req *req, ssize_t result)
{
	struct rd_seg *s = req->done_arg;
	struct rd_file *f = s->file;
	struct rd_budget *b = f->budget;
	uint64_t freed = 0;
	int done_ok;

	pthread_mutex_lock(&f->mu);
	BUG_ON(s->state != SEG_INFLIGHT || f->inflight == 0);
	f->inflight--;
	if (result == (ssize_t)s->len) {
		s->state = SEG_DONE;
	} else {
		s->state = SEG_ERR;
		s->err = result < 0 ? (int)result : -EIO;
		if (s->next)
			seg_unlink(f, s);
		if (s->err == -ESTALE && !f->stale) {
			log_warn("read", "object changed while open, dropping its buffers (key %.*s)",
				 (int)f->key_len, f->key);
			f->stale = -ESTALE;
			freed += drop_all(f);
		}
	}
	done_ok = s->state == SEG_DONE;
	freed += seg_put_locked(s);
	/* Uncharge before unlocking: once f->mu is released rd_close may return
	 * and the owner may destroy the budget, so nothing may touch it after. */
	if (freed)
		rd_budget_give(b, freed);
	else if (done_ok)
		rd_budget_notify(b);            /* an idle buffer a waiter may reclaim */
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->mu);
}

/*
 * Insert and issue [off, off+len), already charged to the budget; it must lie
 * in a gap. On failure the charge is given back. Returns 0 or -errno.
 */
static int seg_issue(struct rd_file *f, uint64_t off, size_t len)
{
	struct rd_seg *s, *next;
	int rc;

	BUG_ON(len == 0 || off + len > f->size);
	s = calloc(1, sizeof(*s));
	/* Page-aligned: a cache hit of a whole block is then read from the
	 * slab straight into it, O_DIRECT included (cache.c, read_direct).
	 * Aligned by hand in a plain malloc: posix_memalign of 4-8 MiB made
	 * glibc hand back fresh pages (measured: 18-26 thousand page faults
	 * per GiB read, twice the daemon's CPU), malloc reuses its heap. */
	if (s) {
		s->mem = malloc(len + RD_BUF_ALIGN - 1);
		s->buf = s->mem ? (char *)(((uintptr_t)s->mem + RD_BUF_ALIGN - 1) &
					   ~(uintptr_t)(RD_BUF_ALIGN - 1)) : NULL;
	}
	if (!s || !s->buf) {
		free(s);
		rd_budget_give(f->budget, len);
		return -ENOMEM;
	}
	s->file = f;
	s->off = off;
	s->len = len;
	s->state = SEG_INFLIGHT;
	s->last_use = ++f->tick;
	next = seg_find(f, off);
	BUG_ON(seg_holds(f, next, off) || (next != &f->segs && next->off < off + len));
	s->next = next;
	s->prev = next->prev;
	next->prev->next = s;
	next->prev = s;
	f->nsegs++;
	f->inflight++;
	log_debug("read", "GET %llu+%zu (window %llu, seq_pos %llu)", (unsigned long long)off,
		  len, (unsigned long long)f->window, (unsigned long long)f->seq_pos);
	s->req = (struct fetch_req){
		.key = f->key, .key_len = f->key_len, .etag = f->etag, .obj_size = f->size,
		.off = off, .len = len, .buf = s->buf, .done = seg_done, .done_arg = s,
	};
	rc = fetcher_fetch(f->fetcher, &s->req);
	if (rc < 0) {
		log_warn("read", "could not queue GET of %zu bytes at %llu: %s",
			 len, (unsigned long long)off, strerror(-rc));
		f->inflight--;
		s->state = SEG_ERR;
		rd_budget_give(f->budget, seg_drop(f, s));
		return rc;
	}
	return 0;
}

/* Issue readahead over the gaps of [a, b) without waiting for budget. Returns
 * how far from a the range is now covered. */
static uint64_t issue_range(struct rd_file *f, uint64_t a, uint64_t b)
{
	uint64_t pos = a;

	while (pos < b) {
		struct rd_seg *s = seg_find(f, pos);
		uint64_t lo, hi, n;

		if (seg_holds(f, s, pos)) {
			pos = seg_end(s);
			continue;
		}
		gap_bounds(f, s, &lo, &hi);
		n = min_u64(min_u64(hi, b) - pos, f->part);
		if (rd_budget_take_within(f->budget, n, f->max_ahead) < 0 ||
		    seg_issue(f, pos, n) < 0)
			break;
		pos += n;
	}
	return min_u64(pos, b);
}

static uint64_t align_down_to(uint64_t v, uint64_t a) { return v & ~(a - 1); }
static uint64_t align_up_to(uint64_t v, uint64_t a) { return align_down_to(v + a - 1, a); }
#define align_down(v) align_down_to((v), f->align)
#define align_up(v) align_up_to((v), f->align)

/* Readahead: start a chunk at a, of the current window (ending on the
 * alignment, so a 1 MiB first window covers one whole 4 MiB cache block). */
static void ra_chunk(struct rd_file *f, uint64_t a, uint64_t min_end)
{
	uint64_t b = min_u64(align_up(max_u64(a + f->window, min_end)), f->size);
	uint64_t got = a < b ? issue_range(f, a, b) : a;

	f->ra_short = got < b;
	f->ra_end = got;
	/* Caught up = the reader passes the middle of the newest chunk. At EOF
	 * there is nothing left to trigger. */
	if (got >= f->size)
		f->ra_trigger = UINT64_MAX;
	else
		f->ra_trigger = a + (got - a) / 2;
}

/* Detector: classify the read [off, end) and issue readahead for a stream. */
static void plan_read(struct rd_file *f, uint64_t off, uint64_t end)
{
	struct rd_seg *s = seg_find(f, off);
	int held = seg_holds(f, s, off);
	/* While streaming, the kernel's own readahead has up to read_ahead_kb of
	 * 1 MiB reads in flight on several FUSE threads, and they arrive in any
	 * order: a read inside what we hold, or within one window (at least
	 * seq_back: one part plus one read, the kernel's readahead) ahead, is
	 * still the stream. Calling it random would drop and cancel the
	 * readahead and refetch. */
	uint64_t skip = f->window ? max_u64(f->seq_back, f->window) : RD_SEQ_SKIP;
	uint64_t back = f->window ? max_u64(f->seq_back, f->window) : f->seq_back;
	int seq = (f->window && held) ||
		  (off <= f->seq_pos + skip && off + back >= f->seq_pos);
	uint64_t freed = 0;

	/* Those tolerances are for the kernel's readahead, whose reads are big
	 * (or small ones that follow each other exactly, while its window
	 * ramps up). A short read that does not continue the last one is an
	 * application's own random read (O_DIRECT, a page reader); in a file
	 * smaller than the tolerances every such read would start a stream
	 * and fetch whole blocks. */
	if (seq && !f->window && end - off < RD_SHORT && off != f->seq_pos)
		seq = 0;

	if (!seq) {
		log_debug("read", "random read at %llu+%llu (seq_pos %llu, window %llu)",
			  (unsigned long long)off, (unsigned long long)(end - off),
			  (unsigned long long)f->seq_pos, (unsigned long long)f->window);
		if (f->window) {
			/* The stream is over: drop its unread readahead, and
			 * cancel the part of it still in flight. */
			struct rd_seg *n;

			for (s = f->segs.next; s != &f->segs; s = n) {
				n = s->next;
				if (s->off < f->seq_pos || s->waiters ||
				    (s->off < end && seg_end(s) > off))
					continue;       /* read, or needed by this read */
				if (s->state == SEG_DONE) {
					freed += seg_drop(f, s);
				} else if (s->state == SEG_INFLIGHT && f->cancels) {
					seg_unlink(f, s);
					seg_cancel(f, s);
				}
			}
			rd_budget_give(f->budget, freed);
		}
		f->window = 0;
		f->seq_pos = end;
		return;
	}
	f->seq_pos = max_u64(f->seq_pos, end);
	if (f->window == 0) {
		f->window = f->win_min;
		ra_chunk(f, align_down(off), min_u64(align_up(end), f->size));
	} else if (end >= f->ra_trigger) {
		if (!f->ra_short)
			f->window = min_u64(f->window * 2, f->max_window);
		ra_chunk(f, max_u64(f->ra_end, align_down(off)), 0);
	}
}

/* A stream frees what lies well behind it. */
static void drop_behind(struct rd_file *f)
{
	uint64_t freed = 0;
	struct rd_seg *s, *n;

	if (!f->window || f->seq_pos < f->seq_back)
		return;
	for (s = f->segs.next; s != &f->segs && seg_end(s) <= f->seq_pos - f->seq_back; s = n) {
		n = s->next;
		if (seg_idle(s))
			freed += seg_drop(f, s);
	}
	rd_budget_give(f->budget, freed);
}

/* Keep a random reader's cache to RD_MAX_SEGS: drop least recently used. */
static void trim_cache(struct rd_file *f)
{
	uint64_t freed = 0;

	while (f->nsegs >= RD_MAX_SEGS) {
		struct rd_seg *victim = NULL;

		for (struct rd_seg *s = f->segs.next; s != &f->segs; s = s->next)
			if (seg_idle(s) && (!victim || s->last_use < victim->last_use))
				victim = s;
		if (!victim)
			break;
		freed += seg_drop(f, victim);
	}
	rd_budget_give(f->budget, freed);
}

/*
 * cur (inside the read [cur, end)) lies in a gap: fetch what the read needs
 * from it, waiting for budget if we must. Drops and retakes f->mu. Returns 0
 * (the caller looks again: the bytes may be held now) or -errno.
 */
static int demand_fetch(struct rd_file *f, uint64_t cur, uint64_t end)
{
	struct rd_seg *next = seg_find(f, cur);
	/* A stream fetches whole blocks; a random read only what it needs. */
	uint64_t a = f->window ? f->align : f->ralign;
	uint64_t lo, hi, ds, de;
	int rc;

	gap_bounds(f, next, &lo, &hi);
	if (f->size <= f->part) {
		ds = 0;                         /* small object: all of it, once */
		de = f->size;
	} else {
		ds = align_down_to(cur, a);
		de = align_up_to(end, a);
	}
	ds = max_u64(ds, lo);
	de = min_u64(de, hi);
	if (cur - ds >= f->part)
		ds = max_u64(align_down_to(cur, a), lo);
	de = min_u64(de, ds + f->part);

	trim_cache(f);
	rc = rd_budget_take(f->budget, de - ds, 0);
	if (rc == -EAGAIN) {
		pthread_mutex_unlock(&f->mu);
		rc = rd_budget_take(f->budget, de - ds, 1);
		pthread_mutex_lock(&f->mu);
		if (rc < 0)
			return rc;
		/* Others ran meanwhile: re-fit into the gap as it is now. */
		next = seg_find(f, cur);
		if (f->stale || seg_holds(f, next, cur)) {
			rd_budget_give(f->budget, de - ds);
			return f->stale;
		}
		gap_bounds(f, next, &lo, &hi);
		if (max_u64(ds, lo) > ds || min_u64(de, hi) < de) {
			uint64_t n0 = de - ds;

			ds = max_u64(ds, lo);
			de = min_u64(de, hi);
			rd_budget_give(f->budget, n0 - (de - ds));
		}
	} else if (rc < 0) {
		return rc;
	}
	return seg_issue(f, ds, de - ds);
}

/* Reclaim hook (budget mutex held): give back idle segments, furthest from the
 * start of the object first (the ones a stream needs last). */
static uint64_t rd_reclaim(struct rd_budget_client *c, uint64_t need)
{
	struct rd_file *f = (struct rd_file *)((char *)c - offsetof(struct rd_file, bc));
	uint64_t freed = 0;
	struct rd_seg *s, *p;

	if (pthread_mutex_trylock(&f->mu) != 0)
		return 0;
	for (s = f->segs.prev; s != &f->segs && freed < need; s = p) {
		p = s->prev;
		if (seg_idle(s))
			freed += seg_drop(f, s);
	}
	pthread_mutex_unlock(&f->mu);
	return freed;
}

/* Bytes fetched far ahead of the reader are copied to the kernel long after
 * they were written, from memory rather than cache, and the first touch of
 * every buffer faults: a cap per CPU keeps readahead near the readers. The
 * A/B behind 64 MiB is in BENCHMARKS.md ("4 readers, cold"). */
#define RD_AHEAD_PER_CPU (64ull << 20)
#define RD_WINDOW_MAX    (64ull << 20)

void rd_config_set_caps(struct rd_config *cfg, long ncpu, uint64_t budget)
{
	uint64_t ahead = (uint64_t)(ncpu > 0 ? ncpu : 1) * RD_AHEAD_PER_CPU;

	cfg->max_ahead = min_u64(ahead, budget);
	cfg->max_window = min_u64(RD_WINDOW_MAX, cfg->max_ahead / 4);
}

/* align, part, max_window and win_min of a file opened with cfg. One GET
 * must fit the budget on its own, or a demand read could never be met; one
 * window is at most a quarter so that several streams share. */
static void geometry(const struct rd_config *cfg, struct rd_file *f)
{
	uint64_t bmax = rd_budget_max(cfg->budget);

	f->align = cfg->align ? cfg->align : RD_ALIGN;
	f->part = cfg->part_size ? cfg->part_size : RD_PART_DEFAULT;
	f->part = align_up(f->part);
	if (f->part > bmax)     /* keep whole aligned units when the budget allows */
		f->part = bmax >= f->align ? align_down(bmax) : bmax;
	f->max_window = cfg->max_window ? cfg->max_window : RD_WINDOW_MAX_DEFAULT;
	f->max_window = max_u64(min_u64(f->max_window, bmax / 4), 1);
	f->win_min = min_u64(RD_WINDOW_MIN, f->max_window);
}

uint64_t rd_first_window(const struct rd_config *cfg)
{
	struct rd_file g, *f = &g;

	memset(&g, 0, sizeof(g));
	geometry(cfg, &g);
	/* ra_chunk from 0: one window, out to the alignment; issue_range cuts
	 * it in parts, so the first GET is at most one part. */
	return min_u64(align_up(f->win_min), f->part);
}

struct rd_file *rd_open(const struct rd_config *cfg, const char *key, size_t key_len,
			uint64_t size, const char *etag)
{
	struct rd_file *f;
	uint64_t bmax;

	BUG_ON(!cfg || !cfg->fetcher || !cfg->budget);
	BUG_ON(cfg->align & (cfg->align - 1));
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->key = malloc(key_len + 1);
	f->etag = etag ? strdup(etag) : NULL;
	if (!f->key || (etag && !f->etag)) {
		free(f->key);
		free(f->etag);
		free(f);
		return NULL;
	}
	memcpy(f->key, key, key_len);
	f->key[key_len] = '\0';
	f->key_len = key_len;
	f->fetcher = cfg->fetcher;
	f->cancels = cfg->fetcher->cancels;
	f->budget = cfg->budget;
	f->read_wait = cfg->read_wait;
	f->size = size;

	bmax = rd_budget_max(cfg->budget);
	geometry(cfg, f);
	f->ralign = cfg->random_align && cfg->random_align < f->align ? cfg->random_align : f->align;
	BUG_ON(f->ralign & (f->ralign - 1));
	/* Kernel readahead (raised to the part size) sends 1 MiB reads of a whole
	 * readahead window in any order; with blocks as big as RD_SEQ_BACK, a read
	 * one block back would otherwise look random and refetch its block. */
	/* The daemon raises the mount's read_ahead_kb to the part size, so reads
	 * can straggle in up to one part (plus one max_read) behind the furthest
	 * one: keep that much behind the stream and call such reads sequential. */
	f->seq_back = max_u64(max_u64(RD_SEQ_BACK, 2 * f->align), f->part + RD_WINDOW_MIN);
	f->max_ahead = cfg->max_ahead ? min_u64(cfg->max_ahead, bmax) : bmax;

	f->segs.prev = f->segs.next = &f->segs;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cond, NULL);
	f->bc.reclaim = rd_reclaim;
	rd_budget_register(f->budget, &f->bc);
	return f;
}

/* The read loop, after plan_read, with f->mu held: bytes [off, end) into dst.
 * The time spent waiting for bytes that were not there yet (a demand GET, or
 * one in flight), plus waited (ns this read waited before), goes to
 * f->read_wait: the data-starvation signal. */
static ssize_t read_locked(struct rd_file *f, uint64_t off, uint64_t end, char *dst,
			   uint64_t waited)
{
	uint64_t cur, t0 = 0;
	int rc = 0;

	for (cur = off; cur < end && rc == 0; ) {
		struct rd_seg *s = seg_find(f, cur);

		if (f->stale) {
			rc = f->stale;
		} else if (!seg_holds(f, s, cur)) {
			t0 = f->read_wait ? stats_now_ns() : 0;
			rc = demand_fetch(f, cur, end);
			waited += t0 ? stats_now_ns() - t0 : 0;
		} else if (s->state == SEG_DONE) {
			uint64_t n = min_u64(seg_end(s), end) - cur;

			memcpy(dst + (cur - off), s->buf + (cur - s->off), n);
			s->last_use = ++f->tick;
			cur += n;
		} else {
			s->waiters++;
			t0 = f->read_wait ? stats_now_ns() : 0;
			while (s->state == SEG_INFLIGHT)
				pthread_cond_wait(&f->cond, &f->mu);
			waited += t0 ? stats_now_ns() - t0 : 0;
			s->waiters--;
			if (s->state == SEG_ERR)
				rc = s->err;
			/* Detached meanwhile (error, -ESTALE): we may be last. */
			rd_budget_give(f->budget, seg_put_locked(s));
		}
	}
	if (rc == 0)
		drop_behind(f);
	if (f->read_wait)
		stats_hist_observe(f->read_wait, waited);
	return rc < 0 ? rc : (ssize_t)(end - off);
}

ssize_t rd_read(struct rd_file *f, uint64_t off, size_t len, char *dst)
{
	ssize_t r;

	if (off >= f->size || len == 0)
		return 0;
	len = min_u64(len, f->size - off);

	pthread_mutex_lock(&f->mu);
	if (f->stale) {
		pthread_mutex_unlock(&f->mu);
		return f->stale;
	}
	if (f->size > f->part)
		plan_read(f, off, off + len);
	r = read_locked(f, off, off + len, dst, 0);
	pthread_mutex_unlock(&f->mu);
	return r;
}

static void unpin_locked(struct rd_file *f, struct rd_pin *pin)
{
	uint64_t freed = 0;

	for (unsigned i = 0; i < pin->n; i++) {
		struct rd_seg *s = pin->seg[i];

		BUG_ON(s->waiters == 0);
		s->waiters--;
		freed += seg_put_locked(s);     /* dropped while pinned: last one frees */
	}
	if (pin->n) {
		if (freed)
			rd_budget_give(f->budget, freed);
		else
			rd_budget_notify(f->budget);    /* idle again: reclaimable */
	}
	pin->n = 0;
}

/*
 * Pin [off, end) in place, piece by piece, with f->mu held: finished segments
 * at once, segments in flight once their GET is done (waiting on f->cond, so
 * f->mu is dropped meanwhile). Never waits for budget while it holds a pin:
 * a gap (bytes nobody fetches yet) with pieces already pinned ends the walk,
 * and a gap before anything is pinned is fetched first (demand_fetch, which
 * may wait for budget; nothing pinned then). So pins are only ever held
 * across a wait for a GET already charged and in flight, which completes
 * (the fetch contract): the budget argument above still holds.
 * Returns 1 with all of [off, end) pinned in iov and pin, 0 with nothing
 * pinned (a gap after pinned pieces, or more than RD_PIN_MAX pieces: the
 * caller copies instead), or -errno with nothing pinned. *waited gets the time
 * spent waiting for bytes.
 */
static int pin_range(struct rd_file *f, uint64_t off, uint64_t end, struct iovec *iov,
		     struct rd_pin *pin, uint64_t *waited)
{
	uint64_t cur = off, t0;
	int rc = 0;

	while (cur < end && rc == 0) {
		struct rd_seg *s = seg_find(f, cur);
		uint64_t n;

		if (f->stale) {
			rc = f->stale;
		} else if (!seg_holds(f, s, cur)) {
			if (pin->n)
				break;                  /* no budget wait while pinned */
			t0 = f->read_wait ? stats_now_ns() : 0;
			rc = demand_fetch(f, cur, end);
			*waited += t0 ? stats_now_ns() - t0 : 0;
		} else if (pin->n == RD_PIN_MAX) {
			break;
		} else {
			s->waiters++;                   /* pinned from here on */
			pin->seg[pin->n++] = s;
			if (s->state == SEG_INFLIGHT) {
				t0 = f->read_wait ? stats_now_ns() : 0;
				while (s->state == SEG_INFLIGHT)
					pthread_cond_wait(&f->cond, &f->mu);
				*waited += t0 ? stats_now_ns() - t0 : 0;
			}
			/* A failed segment is off the list already; the
			 * unpin below frees it when we are last. */
			if (s->state == SEG_ERR) {
				rc = s->err;
				break;
			}
			n = min_u64(seg_end(s), end) - cur;
			iov[pin->n - 1].iov_base = s->buf + (cur - s->off);
			iov[pin->n - 1].iov_len = n;
			s->last_use = ++f->tick;
			cur += n;
		}
	}
	/* The object changed while we waited: fail as the copying loop's next
	 * piece would, rather than return bytes of a file that is stale now. */
	if (rc == 0 && cur == end && f->stale)
		rc = f->stale;
	if (rc == 0 && cur == end)
		return 1;
	unpin_locked(f, pin);
	return rc;
}

ssize_t rd_read_iov(struct rd_file *f, uint64_t off, size_t len, char *dst,
		    struct iovec *iov, unsigned *niov, struct rd_pin *pin)
{
	uint64_t end, waited = 0;
	ssize_t r;
	int rc;

	pin->n = 0;
	*niov = 0;
	if (off >= f->size || len == 0) {
		/* Nothing to wait for. Every read is observed, so that the wait
		 * histogram counts what the kernel asked. */
		if (f->read_wait)
			stats_hist_observe(f->read_wait, 0);
		return 0;
	}
	len = min_u64(len, f->size - off);
	end = off + len;

	pthread_mutex_lock(&f->mu);
	if (f->stale) {
		pthread_mutex_unlock(&f->mu);
		if (f->read_wait)
			stats_hist_observe(f->read_wait, 0);
		return f->stale;
	}
	if (f->size > f->part)
		plan_read(f, off, end);
	/* Point at the segments, pinned, instead of copying: finished ones at
	 * once, ones in flight when their GET is done. */
	rc = pin_range(f, off, end, iov, pin, &waited);
	if (rc == 1) {
		*niov = pin->n;
		if (f->read_wait)
			stats_hist_observe(f->read_wait, waited);
		f->pinned++;            /* rd_close waits for the unpin */
		drop_behind(f);         /* pinned segments it drops are freed by the unpin */
		r = (ssize_t)len;
	} else if (rc < 0) {
		if (f->read_wait)
			stats_hist_observe(f->read_wait, waited);
		r = rc;
	} else {
		/* A gap after pinned pieces, or too many pieces: the copying
		 * loop, which may wait for budget because it holds no pin. */
		r = read_locked(f, off, end, dst, waited);
		if (r > 0) {
			iov[0].iov_base = dst;
			iov[0].iov_len = (size_t)r;
			*niov = 1;
		}
	}
	pthread_mutex_unlock(&f->mu);
	return r;
}

void rd_unpin(struct rd_file *f, struct rd_pin *pin)
{
	if (!pin->n)
		return;
	pthread_mutex_lock(&f->mu);
	unpin_locked(f, pin);
	BUG_ON(f->pinned == 0);
	/* The reply is out: the kernel may already have sent the release, and
	 * rd_close waits for this. f is not touched after the unlock. */
	if (--f->pinned == 0)
		pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->mu);
}

void rd_close(struct rd_file *f)
{
	if (!f)
		return;
	/* First out of the budget's reach, so no reclaim touches f from here. */
	rd_budget_unregister(f->budget, &f->bc);
	pthread_mutex_lock(&f->mu);
	while (f->segs.next != &f->segs) {
		struct rd_seg *s = f->segs.next;
		int inflight = s->state == SEG_INFLIGHT;

		rd_budget_give(f->budget, seg_drop(f, s));
		if (inflight)
			seg_cancel(f, s);       /* nobody reads it: no waiters */
	}
	/* Detached GETs in flight still write into their buffers: wait for them
	 * (seg_done frees each one, as nobody else refers to it). A reply sent
	 * from pinned segments may still be unpinning: the kernel can release the
	 * file as soon as the reply is written. */
	while (f->inflight || f->pinned)
		pthread_cond_wait(&f->cond, &f->mu);
	pthread_mutex_unlock(&f->mu);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->mu);
	free(f->key);
	free(f->etag);
	free(f);
}
