/*
 * cache — block cache over the inner fetcher (see cache.h).
 *
 * DESIGN
 * Threads. One cache thread owns the io_uring ring, the index (index.c), the
 * table of block operations in flight and the io buffer pool. Nothing else
 * touches them, so none of it is locked. Two things cross into the cache thread,
 * both through `q` (mutex + eventfd; the eventfd is read by the ring itself, so
 * the thread sleeps in one place, io_uring_submit_and_wait):
 *   - new requests (struct creq), pushed by the fetcher's fetch on any thread;
 *   - finished inner fetches (struct bop), pushed by the inner fetch's done
 *     callback on the fetcher's thread.
 * The eventfd is written only when a queue goes from empty to non-empty; the
 * cache thread drains both queues whole on each wakeup.
 *
 * Work. A request is split into blocks; each block of a request is a `waiter`
 * (where to copy from, where to, how much) attached to a block operation
 * (struct bop) keyed by the block's 128-bit identity. A bop is one of
 *   READ   slot -> buffer (io_uring), CRC32C check; on mismatch or I/O error the
 *          slot is freed and the same bop turns into a FETCH;
 *   FETCH  inner fetch -> buffer; waiters are served, then the bop turns into a
 *   WRITE  buffer -> a slot claimed by CLOCK; the record is published when the
 *          write completes. Waiters arriving meanwhile are served from the buffer.
 * A bop lives in the in-flight table from creation to its end, so a second
 * request for the same block joins it (single flight) instead of issuing I/O.
 * Every bop holds one io buffer (a block_size, page-aligned, registered buffer)
 * while it runs; without a free buffer it waits in a FIFO. A bop never waits for
 * a second buffer, so the pool cannot deadlock.
 * A request completes (done callback, on the cache thread) when its last waiter
 * is served; a failed block fails the whole request with the first error.
 *
 * Hits. A READ whose creating waiter wants the whole unit reads straight
 * into that waiter's destination (read_direct): the CRC32C is checked there
 * and the copy out of the io buffer is saved; the io buffer is still held
 * (a mismatch turns the READ into a FETCH into it).
 *
 * Partial reads of a block record. A record's CRC32C covers all its bytes, so
 * serving 4 KiB of a 4 MiB block would read and check the whole block. So
 * the CRC32C of each piece of a block record (c->piece bytes, the last one
 * shorter) is kept too, in memory: computed in the same pass as the record's
 * own CRC when the block is written or read whole (the record's CRC is
 * combined from the pieces' ones, cksum_crc32c_combine), in a direct-mapped
 * table by page (struct psum, at most PSUM_BYTES), tagged with the record's
 * number, identity, length and CRC so that a reused or replaced record never
 * matches. A request that covers a block only in part, whose record holds the
 * whole block and has its piece sums here, reads just the pieces it needs
 * out of the record (READ bops with the pieces' identities, in_block): the
 * record's page is pinned, not marked busy, and each piece is checked
 * against its own sum; a mismatch drops the block record and fetches that
 * piece (then cached as a piece record). Without the sums (after a restart,
 * or lost to a collision) the first partial read reads the block whole, as
 * before, and records them. Not persisted: the index format is unchanged.
 */
#include "feedfs/cache.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#include "cksum_i.h"
#include "index_i.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define TAG "cache"
#define SLAB_FILE "slab"
#define LOCK_FILE "lock"
#define IO_ALIGN 4096u
#define RING_ENTRIES 512u
#define MAX_BUFFERS 256u
#define INFLIGHT_BUCKETS 1024u
#define PSUM_BYTES (4u << 20)           /* piece sums of block records: the table's size */
#define SIZE_UNKNOWN FETCH_SIZE_UNKNOWN

struct waiter {
	struct creq *req;
	char *dst;
	uint32_t src_off;           /* offset inside the unit */
	uint32_t n;
	struct waiter *next;
};

/* One caller request; key and etag are copied in after the waiters. */
struct creq {
	struct cache *c;
	const char *key;
	size_t key_len;
	const char *etag;
	struct cksum_h128 obj;
	uint64_t obj_size;          /* SIZE_UNKNOWN: blocks are never widened past the end */
	uint64_t off;
	size_t len;
	char *buf;
	struct fetch_req *fr;       /* the caller's; fr->done(fr, ...) when finished */
	uint32_t nwaiters;          /* allocated: enough for every unit the request may touch */
	uint32_t pending;
	int barrier;                /* cache_sync */
	int cached_only;            /* cache_fetch_cached: -ENODATA unless every block is here */
	int err;
	struct creq *qnext;
	struct waiter w[];
};

struct iobuf {
	char *p;
	int index;                  /* registered buffer index */
	struct iobuf *next;
};

/* Io buffers of one size, and the bops waiting for one. */
struct pool {
	uint32_t size;
	uint32_t n;
	struct iobuf *free;
	struct bop *wait, **wait_tail;
};

enum bop_kind { BOP_READ, BOP_FETCH, BOP_WRITE };

/* One unit operation (a block, or a piece); its address is the io_uring user_data. */
struct bop {
	struct cache *c;
	struct cksum_h128 id;
	enum bop_kind kind;
	int started;                /* has its buffer */
	uint64_t start;             /* object offset of the unit */
	uint32_t len;               /* unit prefix this bop reads or fetches */
	uint32_t io_len, io_done;   /* bytes of the current slab I/O (aligned up) */
	uint32_t rec;               /* index record read or written; IDX_NONE */
	uint64_t slab_off;
	uint32_t data_crc;
	ssize_t result;             /* inner fetch result */
	struct fetch_req ireq;      /* FETCH: the request to the inner fetcher */
	char *key;
	size_t key_len;
	char *etag;
	struct pool *pool;
	struct iobuf *buf;
	struct waiter *waiters;
	struct bop *hnext;          /* in-flight table chain */
	struct bop *qnext;          /* buffer FIFO / completion queue */
	/* Runs of pieces fetched by one GET: the carrier (members != NULL) owns
	 * the GET and the buffer; each member (carrier != NULL) is a piece in the
	 * in-flight table that requests join, with no buffer of its own. */
	struct bop *carrier;
	struct bop *members;        /* chained through next_member, in order */
	int in_block;               /* READ of one piece out of block record rec (pinned) */
	/* READ straight into its first waiter's destination (DESIGN, "Hits");
	 * NULL: into buf. Reset when the READ turns into a FETCH. */
	char *io_dst;
	struct waiter *io_owner;
	struct bop *next_member;
};

/* Piece sums of one block record (see DESIGN); ps_stride bytes each. */
struct psum {
	uint32_t rec1;              /* record + 1 the sums are of; 0: none */
	uint32_t pend1;             /* record + 1 being written with these sums; 0: none */
	uint32_t len, crc;          /* the record's, when rec1 is set */
	uint64_t lo, hi;            /* the record's identity, when rec1 is set */
	uint32_t sum[];             /* CRC32C of piece i: [i * piece, min((i + 1) * piece, len)) */
};

struct cache_counters {
	_Atomic uint64_t hits, misses, coalesced, bypass, inner_fetches, bytes_from_disk,
		bytes_from_inner, bytes_written, checksum_failures, io_errors, evictions,
		write_skipped, slots_used, bytes_used, pieces;
};

struct cache {
	/* Immutable after cache_new. */
	struct fetcher base;        /* what the read path, warm and share fetch through */
	char *dir;
	char *bucket;
	uint32_t bs;
	uint32_t piece;             /* piece size; == bs when pieces are off */
	struct fetcher *inner;      /* misses and bypassed requests: S3 */
	int dir_fd, lock_fd, slab_fd, efd;
	int direct, registered, ring_ok;
	pthread_t thread;
	char *buf_mem;
	size_t buf_mem_len;
	struct iobuf *bufs;

	/* Locked part: hand-offs to the cache thread. Lock order: q.lock is a leaf. */
	struct {
		pthread_mutex_t lock;
		struct creq *reqs, **reqs_tail;
		struct bop *done, **done_tail;
		int stopping;
		int plugged;            /* cache_plug: new requests wait in reqs */
	} q;

	/* Cache thread only. */
	struct io_uring ring;
	struct cache_index ix;
	struct bop *inflight[INFLIGHT_BUCKETS];
	struct pool big, small;
	uint64_t live;              /* requests + bops not finished */
	uint64_t writes;            /* BOP_WRITE in flight */
	struct creq *barriers;      /* cache_sync callers waiting for writes == 0 */
	char *ps_mem;               /* ps_n struct psum; none when pieces are off */
	uint32_t ps_n;
	size_t ps_stride;
	struct cksum_shift piece_shift;     /* combines piece CRCs into a record's */
	uint64_t efd_val;
	int stop_seen;

	struct cache_counters st;
};

#define CNT_ADD(c, f, v) atomic_fetch_add_explicit(&(c)->st.f, (v), memory_order_relaxed)
#define CNT_SET(c, f, v) atomic_store_explicit(&(c)->st.f, (v), memory_order_relaxed)

static void bop_run(struct bop *op);
static void bop_fetch(struct bop *op);
static void run_complete(struct bop *car, ssize_t res);

/* ---- queue hand-offs (any thread) ---- */

static void wake(struct cache *c)
{
	uint64_t one = 1;

	/* Only a wakeup: the data crossed in the queue. */
	if (write(c->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_err(TAG, "eventfd write: %s", strerror(errno));
}

static void push_req(struct cache *c, struct creq *r)
{
	int was_empty;

	pthread_mutex_lock(&c->q.lock);
	was_empty = !c->q.reqs && !c->q.done;
	r->qnext = NULL;
	*c->q.reqs_tail = r;
	c->q.reqs_tail = &r->qnext;
	pthread_mutex_unlock(&c->q.lock);
	if (was_empty)
		wake(c);
}

/* Inner fetch completion: runs on the fetcher's thread. */
static void inner_done(struct fetch_req *req, ssize_t result)
{
	struct bop *op = req->done_arg;
	struct cache *c = op->c;
	int was_empty;

	op->result = result;
	pthread_mutex_lock(&c->q.lock);
	was_empty = !c->q.reqs && !c->q.done;
	op->qnext = NULL;
	*c->q.done_tail = op;
	c->q.done_tail = &op->qnext;
	/* Wake under the lock: once the cache thread can see this op it may
	 * finish, and cache_destroy() close efd and free c. */
	if (was_empty)
		wake(c);
	pthread_mutex_unlock(&c->q.lock);
}

/* ---- cache thread: buffers, table, requests ---- */

static struct io_uring_sqe *get_sqe(struct cache *c)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&c->ring);

	if (!sqe) {
		io_uring_submit(&c->ring);
		sqe = io_uring_get_sqe(&c->ring);
	}
	BUG_ON(!sqe);
	return sqe;
}

static void arm_eventfd(struct cache *c)
{
	struct io_uring_sqe *sqe = get_sqe(c);

	io_uring_prep_read(sqe, c->efd, &c->efd_val, sizeof(c->efd_val), 0);
	io_uring_sqe_set_data(sqe, &c->efd_val);
}

static uint64_t table_slot(struct cksum_h128 id)
{
	return (id.lo >> 3) % INFLIGHT_BUCKETS;
}

static void table_add(struct cache *c, struct bop *op)
{
	struct bop **h = &c->inflight[table_slot(op->id)];

	op->hnext = *h;
	*h = op;
}

static void table_del(struct cache *c, struct bop *op)
{
	struct bop **pp = &c->inflight[table_slot(op->id)];

	while (*pp && *pp != op)
		pp = &(*pp)->hnext;
	BUG_ON(!*pp);
	*pp = op->hnext;
}

/* A bop for this unit that will hold at least `need` bytes of it. */
static struct bop *table_find(struct cache *c, struct cksum_h128 id, uint32_t need)
{
	for (struct bop *op = c->inflight[table_slot(id)]; op; op = op->hnext)
		if (op->id.lo == id.lo && op->id.hi == id.hi && op->len >= need)
			return op;
	return NULL;
}

static void req_finish_block(struct creq *r, int err)
{
	if (err && !r->err)
		r->err = err;
	if (--r->pending)
		return;
	r->c->live--;
	r->fr->done(r->fr, r->err ? r->err : (ssize_t)r->len);
	free(r);
}

/* src: the start of the waiter's unit in some buffer. */
static void serve_from(const char *src, struct waiter *w)
{
	memcpy(w->dst, src + w->src_off, w->n);
	req_finish_block(w->req, 0);
}

static void serve(struct bop *op, struct waiter *w)
{
	serve_from(op->io_dst ? op->io_dst : op->buf->p, w);
}

/* With io_dst, the owner's bytes are in place already, and it is finished
 * last: its done callback may reuse its buffer, which the others copy from. */
static void serve_all(struct bop *op, int err)
{
	struct waiter *w = op->waiters, *owner = op->io_dst ? op->io_owner : NULL;

	op->waiters = NULL;
	while (w) {
		struct waiter *next = w->next;

		if (err)
			req_finish_block(w->req, err);
		else if (w != owner)
			serve(op, w);
		w = next;
	}
	if (owner && !err)
		req_finish_block(owner->req, 0);
}

static void buf_put(struct pool *pl, struct iobuf *b)
{
	struct bop *op = pl->wait;

	if (op) {
		pl->wait = op->qnext;
		if (!pl->wait)
			pl->wait_tail = &pl->wait;
		op->buf = b;
		op->started = 1;
		bop_run(op);
		return;
	}
	b->next = pl->free;
	pl->free = b;
}

static void release_barriers(struct cache *c)
{
	struct creq *r = c->barriers;

	c->barriers = NULL;
	while (r) {
		struct creq *next = r->qnext;

		r->pending = 1;
		req_finish_block(r, 0);
		r = next;
	}
}

static void bop_end(struct bop *op)
{
	struct cache *c = op->c;

	BUG_ON(op->waiters);
	if (op->kind == BOP_WRITE && --c->writes == 0)
		release_barriers(c);
	table_del(c, op);
	c->live--;
	if (op->buf)
		buf_put(op->pool, op->buf);
	free(op->key);
	free(op->etag);
	free(op);
}

static struct bop *bop_new(struct cache *c, struct creq *r, struct cksum_h128 id,
			   uint64_t start, enum bop_kind kind, uint32_t len, uint32_t rec)
{
	struct bop *op = xcalloc(1, sizeof(*op));

	op->c = c;
	op->id = id;
	op->start = start;
	op->kind = kind;
	op->len = len;
	op->rec = rec;
	op->pool = len <= c->small.size ? &c->small : &c->big;
	op->key = xmalloc(r->key_len ? r->key_len : 1);
	memcpy(op->key, r->key, r->key_len);
	op->key_len = r->key_len;
	op->etag = xstrdup(r->etag);
	table_add(c, op);
	c->live++;
	return op;
}

/* Give the bop a buffer and run it, or queue it until a buffer is free. */
static void bop_start(struct bop *op)
{
	struct pool *pl = op->pool;
	struct iobuf *b = pl->free;

	if (!b) {
		op->qnext = NULL;
		*pl->wait_tail = op;
		pl->wait_tail = &op->qnext;
		return;
	}
	pl->free = b->next;
	op->buf = b;
	op->started = 1;
	bop_run(op);
}

static uint32_t align_up(uint32_t n)
{
	return (n + IO_ALIGN - 1) & ~(IO_ALIGN - 1);
}

static void submit_slab_io(struct bop *op)
{
	struct cache *c = op->c;
	struct io_uring_sqe *sqe = get_sqe(c);
	char *p = (op->io_dst ? op->io_dst : op->buf->p) + op->io_done;
	unsigned n = op->io_len - op->io_done;
	uint64_t off = op->slab_off + op->io_done;
	int rd = op->kind == BOP_READ;

	if (c->registered && !op->io_dst) {
		if (rd)
			io_uring_prep_read_fixed(sqe, c->slab_fd, p, n, off, op->buf->index);
		else
			io_uring_prep_write_fixed(sqe, c->slab_fd, p, n, off, op->buf->index);
	} else if (rd) {
		io_uring_prep_read(sqe, c->slab_fd, p, n, off);
	} else {
		io_uring_prep_write(sqe, c->slab_fd, p, n, off);
	}
	io_uring_sqe_set_data(sqe, op);
}

/*
 * A READ whose first waiter (the one that created it: the tail of the list,
 * joiners are pushed in front) wants the whole unit reads the slab straight
 * into that waiter's destination, which then needs no copy. The destination
 * is the caller's buffer until its done callback (the fetch contract), and
 * the callback comes only once the bytes passed their CRC32C; on a mismatch
 * or an I/O error the READ turns into a FETCH into buf, as before, and serves
 * everyone from there. With O_DIRECT the destination and the length must be
 * IO_ALIGN-aligned (the read is not rounded up past the destination's end);
 * buffered, any will do.
 */
static void read_direct(struct bop *op)
{
	struct waiter *w = op->waiters;

	op->io_dst = NULL;
	op->io_owner = NULL;
	if (!w || op->members || op->carrier)
		return;
	while (w->next)
		w = w->next;
	if (w->src_off != 0 || w->n != op->len)
		return;
	if (op->c->direct && (((uintptr_t)w->dst | op->len) & (IO_ALIGN - 1)))
		return;
	op->io_dst = w->dst;
	op->io_owner = w;
}

static void bop_run(struct bop *op)
{
	op->io_done = 0;
	switch (op->kind) {
	case BOP_READ:
		read_direct(op);
		op->io_len = op->io_dst ? op->len : align_up(op->len);
		submit_slab_io(op);
		break;
	case BOP_FETCH:
		bop_fetch(op);
		break;
	case BOP_WRITE:
		BUG_ON(1);  /* a WRITE is reached only from a FETCH that holds its buffer */
	}
}

static void bop_fetch(struct bop *op)
{
	struct cache *c = op->c;
	int rc;

	op->kind = BOP_FETCH;
	CNT_ADD(c, inner_fetches, 1);
	/* The object size is not needed below the cache: S3 takes ranges. */
	op->ireq = (struct fetch_req){
		.key = op->key, .key_len = op->key_len, .etag = op->etag,
		.obj_size = SIZE_UNKNOWN, .off = op->start, .len = op->len,
		.buf = op->buf->p, .done = inner_done, .done_arg = op,
	};
	rc = fetcher_fetch(c->inner, &op->ireq);
	if (rc < 0) {
		log_warn(TAG, "inner fetch not queued: %s", strerror(-rc));
		if (op->members) {
			run_complete(op, rc);
			return;
		}
		serve_all(op, rc);
		bop_end(op);
	}
}

static void publish_fill(struct cache *c)
{
	CNT_SET(c, slots_used, c->ix.used);
	CNT_SET(c, bytes_used, c->ix.used_bytes);
	CNT_SET(c, evictions, c->ix.evicted);
}

/* ---- piece sums of block records (see DESIGN) ------------------------------ */

static struct psum *psum_at(const struct cache *c, uint32_t rec)
{
	/* By page: a block record has a page of its own, so consecutive blocks
	 * take consecutive entries (records are numbered page * rpp + i). */
	return (struct psum *)(c->ps_mem + (size_t)(idx_page_of(&c->ix, rec) % c->ps_n) *
			       c->ps_stride);
}

/* Does a record of len bytes get piece sums? */
static int psum_wanted(const struct cache *c, uint32_t len)
{
	return c->ps_n && len > c->piece;
}

/* CRC32C of p[0..len), and of each of its pieces into sum[]: one pass. */
static uint32_t piece_crcs(const struct cache *c, const char *p, uint32_t len, uint32_t *sum)
{
	uint32_t crc = 0;

	for (uint32_t i = 0, off = 0; off < len; i++, off += c->piece) {
		uint32_t n = len - off < c->piece ? len - off : c->piece;

		sum[i] = cksum_crc32c(0, p + off, n);
		crc = n == c->piece ? cksum_crc32c_combine(&c->piece_shift, crc, sum[i])
				    : cksum_crc32c(crc, p + off, n);
	}
	return crc;
}

static void psum_tag(struct psum *e, uint32_t rec, const struct idx_rec *x)
{
	e->rec1 = rec + 1;
	e->pend1 = 0;
	e->len = x->len;
	e->crc = x->data_crc;
	e->lo = x->id_lo;
	e->hi = x->id_hi;
}

/* The piece sums of VALID record rec, or NULL when they are not here. */
static const uint32_t *psum_get(const struct cache *c, uint32_t rec)
{
	const struct idx_rec *x = &c->ix.rec[rec];
	const struct psum *e;

	if (!psum_wanted(c, x->len))
		return NULL;
	e = psum_at(c, rec);
	if (e->rec1 != rec + 1 || e->len != x->len || e->crc != x->data_crc ||
	    e->lo != x->id_lo || e->hi != x->id_hi)
		return NULL;
	return e->sum;
}

/* The record's data cannot be used: drop it and fetch the unit instead (for
 * an in_block read, the block record goes and the piece is fetched). */
static void read_failed(struct bop *op)
{
	struct cache *c = op->c;

	if (c->ix.flags[op->rec] & IDX_F_VALID)
		idx_remove(&c->ix, op->rec);
	if (op->in_block)
		idx_unpin(&c->ix, op->rec, 0);
	else
		idx_read_end(&c->ix, op->rec, 0);
	publish_fill(c);
	op->rec = IDX_NONE;
	op->in_block = 0;
	op->io_dst = NULL;              /* the fetch goes to buf; serve copies from there */
	op->io_owner = NULL;
	bop_fetch(op);
}

static void read_complete(struct bop *op)
{
	struct cache *c = op->c;
	const struct idx_rec *r = &c->ix.rec[op->rec];
	uint32_t want = op->in_block ? op->data_crc : r->data_crc, crc;
	struct psum *e = NULL;

	if (!op->in_block && psum_wanted(c, op->len)) {
		/* Read whole: record the piece sums on the way (same pass). */
		e = psum_at(c, op->rec);
		e->rec1 = e->pend1 = 0;
		crc = piece_crcs(c, op->io_dst ? op->io_dst : op->buf->p, op->len, e->sum);
	} else {
		crc = cksum_crc32c(0, op->io_dst ? op->io_dst : op->buf->p, op->len);
	}
	if (crc != want) {
		CNT_ADD(c, checksum_failures, 1);
		log_warn(TAG, "checksum mismatch in record %u (object offset %llu%s): refetching",
			 op->rec, (unsigned long long)op->start, op->in_block ? ", a piece" : "");
		read_failed(op);
		return;
	}
	if (e)
		psum_tag(e, op->rec, r);
	CNT_ADD(c, hits, 1);
	CNT_ADD(c, bytes_from_disk, op->len);
	if (op->in_block)
		idx_unpin(&c->ix, op->rec, 1);
	else
		idx_read_end(&c->ix, op->rec, 1);
	serve_all(op, 0);
	bop_end(op);
}

/* The fetched unit is with its waiters; now keep it, behind their backs. */
static void start_write(struct bop *op)
{
	struct cache *c = op->c;
	uint32_t rec = idx_alloc(&c->ix, op->len, &op->slab_off);

	publish_fill(c);
	if (rec == IDX_NONE) {
		CNT_ADD(c, write_skipped, 1);
		bop_end(op);
		return;
	}
	op->kind = BOP_WRITE;
	c->writes++;
	op->rec = rec;
	if (psum_wanted(c, op->len)) {
		/* The sums are published with the record (write_complete). */
		struct psum *e = psum_at(c, rec);

		e->rec1 = 0;
		e->pend1 = rec + 1;
		op->data_crc = piece_crcs(c, op->buf->p, op->len, e->sum);
	} else {
		op->data_crc = cksum_crc32c(0, op->buf->p, op->len);
	}
	op->io_len = align_up(op->len);
	op->io_done = 0;
	/* Never leave stale memory in the record's tail (O_DIRECT writes whole pages). */
	memset(op->buf->p + op->len, 0, op->io_len - op->len);
	submit_slab_io(op);
}

static void write_complete(struct bop *op, int ok)
{
	struct cache *c = op->c;
	uint32_t old = ok ? idx_lookup(&c->ix, op->id) : IDX_NONE;

	/* At most one record per identity: keep the longer prefix. */
	if (old != IDX_NONE && (c->ix.flags[old] & IDX_F_BUSY || c->ix.rec[old].len >= op->len)) {
		ok = 0;
	} else if (old != IDX_NONE) {
		idx_remove(&c->ix, old);
	}
	idx_write_end(&c->ix, op->rec, op->slab_off, ok, op->id, op->data_crc, op->len);
	if (ok && psum_wanted(c, op->len)) {
		struct psum *e = psum_at(c, op->rec);

		if (e->pend1 == op->rec + 1)        /* still this write's sums */
			psum_tag(e, op->rec, &c->ix.rec[op->rec]);
	}
	if (ok)
		CNT_ADD(c, bytes_written, op->len);
	publish_fill(c);
	bop_end(op);
}

/* The carrier's GET is over: each member's waiters are served from its
 * buffer, and each member piece is kept (start_write) when a piece buffer is
 * free to copy it into; else it is left uncached rather than waited for. */
static void run_complete(struct bop *car, ssize_t res)
{
	struct cache *c = car->c;
	struct bop *m, *next;

	if (res >= 0 && res != (ssize_t)car->len) {
		log_err(TAG, "inner fetch returned %zd bytes, asked for %u", res, car->len);
		res = -EIO;
	}
	for (m = car->members; m; m = next) {
		const char *src = car->buf->p + (m->start - car->start);
		struct waiter *w = m->waiters;
		struct iobuf *b = c->small.free;

		next = m->next_member;
		m->carrier = NULL;
		if (res < 0) {
			serve_all(m, (int)res);
			bop_end(m);
			continue;
		}
		m->waiters = NULL;
		while (w) {
			struct waiter *wn = w->next;

			serve_from(src, w);
			w = wn;
		}
		CNT_ADD(c, misses, 1);
		CNT_ADD(c, bytes_from_inner, m->len);
		if (!b) {
			CNT_ADD(c, write_skipped, 1);
			bop_end(m);
			continue;
		}
		c->small.free = b->next;
		m->buf = b;
		m->started = 1;
		memcpy(b->p, src, m->len);
		start_write(m);
	}
	car->members = NULL;
	bop_end(car);
}

static void fetch_complete(struct bop *op)
{
	struct cache *c = op->c;
	ssize_t res = op->result;

	if (op->members) {
		run_complete(op, res);
		return;
	}
	if (res >= 0 && res != (ssize_t)op->len) {
		log_err(TAG, "inner fetch returned %zd bytes, asked for %u", res, op->len);
		res = -EIO;
	}
	if (res < 0) {
		serve_all(op, (int)res);
		bop_end(op);
		return;
	}
	CNT_ADD(c, misses, 1);
	CNT_ADD(c, bytes_from_inner, op->len);
	serve_all(op, 0);
	start_write(op);
}

static void slab_cqe(struct bop *op, int res)
{
	struct cache *c = op->c;

	if (res == -EAGAIN || res == -EINTR) {
		submit_slab_io(op);
		return;
	}
	if (res > 0) {
		op->io_done += (uint32_t)res;
		if (op->io_done < op->io_len) {     /* short: requeue the rest */
			submit_slab_io(op);
			return;
		}
	}
	if (res <= 0) {
		CNT_ADD(c, io_errors, 1);
		log_err(TAG, "slab %s at offset %llu: %s", op->kind == BOP_READ ? "read" : "write",
			(unsigned long long)op->slab_off,
			res ? strerror(-res) : "unexpected end of file");
		if (op->kind == BOP_READ)
			read_failed(op);
		else
			write_complete(op, 0);
		return;
	}
	if (op->kind == BOP_READ)
		read_complete(op);
	else
		write_complete(op, 1);
}

/* Pieces have their own identities: the unit number with the top bit set. */
#define PIECE_TAG (1ull << 63)
#define RUN_TAG   (3ull << 62)      /* carriers: never looked up, never stored */

/* Serve w (bytes [start + w->src_off, + w->n) of one unit) from a bop in flight,
 * the slab, or a new inner fetch of want bytes from start. need: bytes of the
 * unit the waiter needs, from its start. */
static void attach(struct cache *c, struct creq *r, struct waiter *w, struct cksum_h128 id,
		   uint64_t start, uint32_t want, uint32_t need, uint32_t rec)
{
	struct bop *op = table_find(c, id, need);

	r->pending++;
	if (op) {
		CNT_ADD(c, coalesced, 1);
		if (op->kind == BOP_WRITE) {
			serve(op, w);
		} else {
			w->next = op->waiters;
			op->waiters = w;
		}
		return;
	}
	if (rec == IDX_NONE)
		rec = idx_lookup(&c->ix, id);
	if (rec != IDX_NONE && !(c->ix.flags[rec] & IDX_F_BUSY) && c->ix.rec[rec].len >= need) {
		idx_read_begin(&c->ix, rec);
		op = bop_new(c, r, id, start, BOP_READ, c->ix.rec[rec].len, rec);
		op->slab_off = idx_offset(&c->ix, rec);
	} else {
		op = bop_new(c, r, id, start, BOP_FETCH, want, IDX_NONE);
	}
	w->next = NULL;
	op->waiters = w;
	bop_start(op);
}

/* Serve w from piece [start, start + len) of block record rec, which starts
 * `at` bytes into the record and whose CRC32C is crc. 0, or -EBUSY when the
 * record's page cannot take one more pin (then nothing was done). */
static int piece_from_block(struct cache *c, struct creq *r, struct waiter *w,
			    struct cksum_h128 pid, uint64_t start, uint32_t len, uint32_t rec,
			    uint32_t at, uint32_t crc)
{
	struct bop *op;

	if (idx_pin(&c->ix, rec) < 0)
		return -EBUSY;
	op = bop_new(c, r, pid, start, BOP_READ, len, rec);
	op->in_block = 1;
	op->data_crc = crc;
	op->slab_off = idx_offset(&c->ix, rec) + at;
	r->pending++;
	w->next = NULL;
	op->waiters = w;
	bop_start(op);
	return 0;
}

/*
 * The missing pieces of one block, in order (members, already in the table
 * with their waiters), fetched by one GET of [start, end). A single piece is
 * an ordinary unit operation. The run may have holes (pieces that were
 * cached or in flight): the GET covers them too, which is cheaper than a
 * second request.
 */
static void start_run(struct cache *c, struct creq *r, struct bop *run, uint64_t start,
		      uint64_t end)
{
	struct bop *car;

	if (!run->next_member) {
		bop_start(run);
		return;
	}
	car = bop_new(c, r, cksum_h128_block(r->obj, RUN_TAG | (start / c->piece)), start,
		      BOP_FETCH, (uint32_t)(end - start), IDX_NONE);
	car->members = run;
	for (struct bop *m = run; m; m = m->next_member)
		m->carrier = car;
	bop_start(car);
}

/* cache_fetch_cached, one unit: cached with need bytes, or being read or
 * written with them. */
static int unit_here(struct cache *c, struct cksum_h128 id, uint32_t need)
{
	uint32_t rec;

	if (table_find(c, id, need))
		return 1;
	rec = idx_lookup(&c->ix, id);
	return rec != IDX_NONE && c->ix.rec[rec].len >= need;
}

/* cache_fetch_cached: is every block of r here whole (to EOF), as a block
 * or as all of its pieces? A block of which some pieces are missing is not:
 * a partially cached object is never served from the cache alone. */
static int all_cached(struct cache *c, const struct creq *r)
{
	uint64_t first = r->off / c->bs, last = (r->off + r->len - 1) / c->bs;

	for (uint64_t blk = first; blk <= last; blk++) {
		uint64_t bstart = blk * c->bs, bend = bstart + c->bs;
		int whole = 1;

		if (bend > r->obj_size)
			bend = r->obj_size;
		if (unit_here(c, cksum_h128_block(r->obj, blk), (uint32_t)(bend - bstart)))
			continue;
		if (c->piece >= c->bs)
			return 0;
		for (uint64_t p = bstart / c->piece; p * c->piece < bend && whole; p++) {
			uint64_t ps = p * c->piece, pe = ps + c->piece < bend ? ps + c->piece : bend;

			whole = unit_here(c, cksum_h128_block(r->obj, PIECE_TAG | p),
					  (uint32_t)(pe - ps));
		}
		if (!whole)
			return 0;
	}
	return 1;
}

/*
 * Split a new request into waiters on unit operations. A block the request
 * covers whole (to EOF), or whose size is unknown, is one unit. A block it
 * covers only in part is served from the block's record when one holds the
 * bytes (only the pieces needed, when the record's piece sums are here; the
 * whole record otherwise), else piece by piece: a random reader then fetches
 * and caches pieces (c->piece bytes) instead of whole blocks.
 */
static void req_begin(struct cache *c, struct creq *r)
{
	uint64_t first = r->off / c->bs, last = (r->off + r->len - 1) / c->bs;
	uint32_t nw = 0;

	c->live++;
	if (r->barrier) {                   /* cache_sync barrier */
		r->qnext = c->barriers;
		c->barriers = r;
		if (c->writes == 0)
			release_barriers(c);
		return;
	}
	r->pending = 1;                     /* not done before the loop ends */
	if (r->cached_only && !all_cached(c, r)) {
		req_finish_block(r, -ENODATA);
		return;
	}
	for (uint64_t blk = first; blk <= last; blk++) {
		uint64_t bstart = blk * c->bs, bend = bstart + c->bs;
		uint64_t s = r->off > bstart ? r->off : bstart;
		uint64_t e = r->off + r->len < bend ? r->off + r->len : bend;
		struct cksum_h128 id = cksum_h128_block(r->obj, blk);
		uint32_t need = (uint32_t)(e - bstart), want = need, rec;
		const uint32_t *sums = NULL;

		if (r->obj_size != SIZE_UNKNOWN) {
			if (bend > r->obj_size)
				bend = r->obj_size;
			want = (uint32_t)(bend - bstart);
		}
		rec = idx_lookup(&c->ix, id);
		/* Part of a block whose record holds it whole, with its piece
		 * sums here and no read of it in flight: only the pieces needed. */
		if (rec != IDX_NONE && r->obj_size != SIZE_UNKNOWN && !r->cached_only &&
		    !(s == bstart && e == bend) && c->ix.rec[rec].len == want &&
		    !table_find(c, id, need))
			sums = psum_get(c, rec);
		/* A whole block is one unit, except for a cached-only request
		 * when only its pieces are here (all_cached checked them all). */
		if (!sums && (r->obj_size == SIZE_UNKNOWN || c->piece >= c->bs ||
			      (s == bstart && e == bend && !r->cached_only) ||
			      table_find(c, id, need) ||
			      (rec != IDX_NONE && c->ix.rec[rec].len >= need))) {
			struct waiter *w = &r->w[nw++];

			w->req = r;
			w->dst = r->buf + (s - r->off);
			w->src_off = (uint32_t)(s - bstart);
			w->n = (uint32_t)(e - s);
			attach(c, r, w, id, bstart, want, need, rec);
			continue;
		}
		struct bop *run = NULL, **tail = &run;
		uint64_t run_start = 0, run_end = 0;

		for (uint64_t p = s / c->piece; p * c->piece < e; p++) {
			uint64_t ps = p * c->piece, pe = ps + c->piece;
			uint64_t ws = s > ps ? s : ps, we = e < pe ? e : pe;
			struct waiter *w = &r->w[nw++];
			struct cksum_h128 pid = cksum_h128_block(r->obj, PIECE_TAG | p);
			uint32_t prec;

			if (pe > r->obj_size)
				pe = r->obj_size;
			BUG_ON(nw > r->nwaiters);
			w->req = r;
			w->dst = r->buf + (ws - r->off);
			w->src_off = (uint32_t)(ws - ps);
			w->n = (uint32_t)(we - ws);
			CNT_ADD(c, pieces, 1);
			prec = idx_lookup(&c->ix, pid);
			if (!table_find(c, pid, (uint32_t)(we - ps)) &&
			    (prec == IDX_NONE || c->ix.rec[prec].len < (uint32_t)(we - ps))) {
				if (sums && piece_from_block(c, r, w, pid, ps, (uint32_t)(pe - ps), rec,
							     (uint32_t)(ps - bstart),
							     sums[(ps - bstart) / c->piece]) == 0)
					continue;
				/* Missing: one more member of this block's run. */
				struct bop *m = bop_new(c, r, pid, ps, BOP_FETCH, (uint32_t)(pe - ps),
							IDX_NONE);

				if (!run)
					run_start = ps;
				run_end = pe;
				r->pending++;
				w->next = NULL;
				m->waiters = w;
				*tail = m;
				tail = &m->next_member;
				continue;
			}
			attach(c, r, w, pid, ps, (uint32_t)(pe - ps), (uint32_t)(we - ps), prec);
		}
		if (run)
			start_run(c, r, run, run_start, run_end);
	}
	BUG_ON(nw > r->nwaiters);
	req_finish_block(r, 0);
}

static void drain_queues(struct cache *c)
{
	struct creq *r;
	struct bop *op;

	pthread_mutex_lock(&c->q.lock);
	r = c->q.plugged ? NULL : c->q.reqs;
	op = c->q.done;
	if (r) {
		c->q.reqs = NULL;
		c->q.reqs_tail = &c->q.reqs;
	}
	c->q.done = NULL;
	c->q.done_tail = &c->q.done;
	c->stop_seen = c->q.stopping;
	pthread_mutex_unlock(&c->q.lock);

	while (op) {
		struct bop *next = op->qnext;

		fetch_complete(op);
		op = next;
	}
	while (r) {
		struct creq *next = r->qnext;

		req_begin(c, r);
		r = next;
	}
}

void cache_plug(struct cache *c, int on)
{
	pthread_mutex_lock(&c->q.lock);
	c->q.plugged = on;
	pthread_mutex_unlock(&c->q.lock);
	if (!on)
		wake(c);
}

static void *cache_thread(void *arg)
{
	struct cache *c = arg;

	arm_eventfd(c);
	for (;;) {
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		int rc = io_uring_submit_and_wait(&c->ring, 1);

		if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
			log_err(TAG, "io_uring_submit_and_wait: %s", strerror(-rc));
			abort();
		}
		io_uring_for_each_cqe(&c->ring, head, cqe) {
			void *ud = io_uring_cqe_get_data(cqe);
			int res = cqe->res;

			n++;
			if (ud == &c->efd_val) {
				drain_queues(c);
				arm_eventfd(c);
			} else {
				/* Handlers may queue SQEs but never reap CQEs: safe here. */
				slab_cqe(ud, res);
			}
		}
		io_uring_cq_advance(&c->ring, n);
		if (c->stop_seen && c->live == 0)
			break;
	}
	return NULL;
}

/* ---- request entry points (any thread) ---- */

static struct cksum_h128 object_id(const struct cache *c, const char *key, size_t key_len,
				   const char *etag)
{
	struct cksum_h128_state s;

	cksum_h128_init(&s);
	cksum_h128_field(&s, c->bucket, strlen(c->bucket));
	cksum_h128_field(&s, key, key_len);
	cksum_h128_field(&s, etag, strlen(etag));
	return cksum_h128_final(&s);
}

/* The fetcher's fetch (fetch.h). With the object size known every block is
 * fetched and cached whole (the last one short), whatever part of it was
 * asked for; without it (FETCH_SIZE_UNKNOWN) a block may be widened down to
 * its start but never past the requested end. */
static int fetch_common(struct cache *c, struct fetch_req *fr, int cached_only)
{
	const char *key = fr->key, *etag = fr->etag;
	size_t key_len = fr->key_len, len = fr->len;
	uint64_t obj_size = fr->obj_size, off = fr->off;
	uint64_t nblocks, nw;
	size_t etag_len, w_bytes;
	struct creq *r;
	char *p;

	if (!len || !fr->buf || !fr->done || off + len < off)
		return -EINVAL;
	if (cached_only && (!etag || !etag[0] || obj_size == SIZE_UNKNOWN))
		return -EINVAL;
	if (!etag || !etag[0]) {
		/* Without a version we could not tell a changed object: no caching.
		 * The caller's own request goes down, so its cancel can follow. */
		CNT_ADD(c, bypass, 1);
		return fetcher_fetch(c->inner, fr);
	}
	if (obj_size != SIZE_UNKNOWN && off + len > obj_size)
		return -EINVAL;
	nblocks = (off + len - 1) / c->bs - off / c->bs + 1;
	/* Only the first and the last block can be covered in part, and those
	 * may be served piece by piece. */
	nw = nblocks + (c->piece < c->bs && obj_size != SIZE_UNKNOWN ? 2ull * (c->bs / c->piece) : 0);
	if (nw > UINT32_MAX / 2)
		return -EINVAL;
	etag_len = strlen(etag);
	w_bytes = sizeof(*r) + nw * sizeof(struct waiter);
	r = xcalloc(1, w_bytes + key_len + etag_len + 1);
	p = (char *)r + w_bytes;
	memcpy(p, key, key_len);
	r->key = p;
	r->key_len = key_len;
	memcpy(p + key_len, etag, etag_len + 1);
	r->etag = p + key_len;
	r->c = c;
	r->obj = object_id(c, key, key_len, etag);
	r->obj_size = obj_size;
	r->off = off;
	r->len = len;
	r->buf = fr->buf;
	r->fr = fr;
	r->nwaiters = (uint32_t)nw;
	r->cached_only = cached_only;
	push_req(c, r);
	return 0;
}

static int cache_fetch(struct fetcher *f, struct fetch_req *fr)
{
	return fetch_common(fetcher_of(f, struct cache, base), fr, 0);
}

int cache_fetch_cached(struct cache *c, struct fetch_req *fr)
{
	return fetch_common(c, fr, 1);
}

/* A request the cache holds is one or more block operations that other
 * requests may share, and the blocks are worth caching whatever the reader
 * does next: nothing is cut short (cancels = 0), every request runs to its
 * end. A request that bypassed the cache (no ETag) is the inner fetcher's,
 * and its cancel goes there. */
static void cache_cancel(struct fetcher *f, struct fetch_req *fr)
{
	struct cache *c = fetcher_of(f, struct cache, base);

	if (!fr->etag || !fr->etag[0])
		fetcher_cancel(c->inner, fr);
}

static const struct fetcher_ops cache_ops = {
	.fetch = cache_fetch,
	.cancel = cache_cancel,
};

struct fetcher *cache_fetcher(struct cache *c)
{
	return &c->base;
}

struct cache_barrier {
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
	struct fetch_req fr;
};

static void barrier_done(struct fetch_req *fr, ssize_t res)
{
	struct cache_barrier *b = fr->done_arg;

	pthread_mutex_lock(&b->m);
	b->done = 1;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->m);
}

void cache_sync(struct cache *c)
{
	struct cache_barrier b = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
				   { .done = barrier_done } };
	struct creq *r = xcalloc(1, sizeof(*r));

	b.fr.done_arg = &b;
	r->c = c;
	r->barrier = 1;
	r->fr = &b.fr;
	push_req(c, r);
	pthread_mutex_lock(&b.m);
	while (!b.done)
		pthread_cond_wait(&b.cv, &b.m);
	pthread_mutex_unlock(&b.m);
}

void cache_get_stats(struct cache *c, struct cache_stats *o)
{
#define LD(f) atomic_load_explicit(&c->st.f, memory_order_relaxed)
	memset(o, 0, sizeof(*o));
	o->hits = LD(hits);
	o->misses = LD(misses);
	o->coalesced = LD(coalesced);
	o->bypass = LD(bypass);
	o->inner_fetches = LD(inner_fetches);
	o->bytes_from_disk = LD(bytes_from_disk);
	o->bytes_from_inner = LD(bytes_from_inner);
	o->bytes_written = LD(bytes_written);
	o->checksum_failures = LD(checksum_failures);
	o->io_errors = LD(io_errors);
	o->evictions = LD(evictions);
	o->write_skipped = LD(write_skipped);
	o->blocks_used = LD(slots_used);
	o->bytes_used = LD(bytes_used);
	o->pieces = LD(pieces);
#undef LD
	o->pages = c->ix.npages;
	o->block_size = c->bs;
	o->piece_size = c->piece;
	o->direct_io = c->direct;
	o->registered_buffers = c->registered;
	o->recovered_unclean = c->ix.recovered_unclean;
}

/* ---- setup and teardown ---- */

/* Takes the per-dir lock; on -EBUSY names the owner in msg. */
static int lock_dir(int dir_fd, const char *dir, int *out_fd, char *msg, size_t msg_len)
{
	int fd = openat(dir_fd, LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	char pid[32];
	int rc, n;

	if (fd < 0) {
		rc = -errno;
		snprintf(msg, msg_len, "cache dir %s is not writable: %s", dir, strerror(-rc));
		return rc;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		rc = errno == EWOULDBLOCK ? -EBUSY : -errno;
		n = (int)pread(fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(msg, msg_len, "cache dir %s is in use by feedfs pid %s; give each mount "
			 "its own --cache-dir", dir, pid[0] ? pid : "(unknown)");
		close(fd);
		return rc;
	}
	n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		log_warn(TAG, "cannot record our pid in %s/%s", dir, LOCK_FILE);
	*out_fd = fd;
	return 0;
}

/* Opens the cache dir, creating it 0700. */
static int open_dir(const char *dir, int *out, char *msg, size_t msg_len)
{
	struct stat st;
	int fd, rc;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		rc = -errno;
		snprintf(msg, msg_len, "cannot create cache dir %s: %s", dir, strerror(-rc));
		return rc;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		snprintf(msg, msg_len, "cannot open cache dir %s: %s", dir, strerror(-rc));
		return rc;
	}
	if (fstat(fd, &st) == 0 && (st.st_mode & 077))
		log_warn(TAG, "cache dir %s is accessible to other users (mode %03o)", dir,
			 st.st_mode & 0777);
	if (faccessat(fd, ".", W_OK, AT_EACCESS) < 0) {
		rc = -errno;
		snprintf(msg, msg_len, "cache dir %s is not writable: %s", dir, strerror(-rc));
		close(fd);
		return rc;
	}
	*out = fd;
	return 0;
}

/* Cache size in blocks: the configured size, or half of what is free beyond
 * the 5% reserve. Space the slab already holds counts as free. With no size
 * configured, an existing slab keeps its size while it still fits: free space
 * moves all the time, and a new geometry would start the cache cold on every
 * restart. */
static int size_slots(const struct cache_config *cfg, int dir_fd, uint32_t bs,
		      uint32_t *out, char *msg, size_t msg_len)
{
	struct statvfs vfs;
	struct stat st;
	uint64_t have = 0, have_size = 0, avail, reserve, usable, size, n;

	if (fstatvfs(dir_fd, &vfs) < 0) {
		snprintf(msg, msg_len, "cannot stat cache dir %s: %s", cfg->dir, strerror(errno));
		return -errno;
	}
	if (fstatat(dir_fd, SLAB_FILE, &st, AT_SYMLINK_NOFOLLOW) == 0 && !cfg->clear &&
	    S_ISREG(st.st_mode)) {
		have = (uint64_t)st.st_blocks * 512;
		have_size = (uint64_t)st.st_size;
	}
	avail = (uint64_t)vfs.f_bavail * vfs.f_frsize + have;
	reserve = (uint64_t)vfs.f_blocks * vfs.f_frsize * CACHE_DISK_RESERVE_PCT / 100;
	usable = avail > reserve ? avail - reserve : 0;
	size = cfg->size_bytes ? cfg->size_bytes : usable / 2;
	if (!cfg->size_bytes && have_size && have_size % bs == 0 &&
	    have_size / bs >= CACHE_MIN_SLOTS && have_size <= usable)
		size = have_size;
	if (size > usable) {
		snprintf(msg, msg_len, "--cache-size %llu MiB is more than the %llu MiB free on %s "
			 "once %u%% of the disk is kept free", (unsigned long long)(size >> 20),
			 (unsigned long long)(usable >> 20), cfg->dir, CACHE_DISK_RESERVE_PCT);
		return -ENOSPC;
	}
	n = size / bs;
	if (n < CACHE_MIN_SLOTS) {
		snprintf(msg, msg_len, "cache size %llu bytes is too small: it must hold at least "
			 "%u blocks of %u bytes", (unsigned long long)size, CACHE_MIN_SLOTS, bs);
		return -EINVAL;
	}
	if (n > UINT32_MAX - 1)
		n = UINT32_MAX - 1;
	*out = (uint32_t)n;
	return 0;
}

/* O_DIRECT where the filesystem takes it (probed with one aligned read). */
static int open_slab(struct cache *c, uint32_t nslots, int no_direct, char *msg, size_t msg_len)
{
	off_t len = (off_t)nslots * c->bs;
	struct stat st;
	int rc;

	c->slab_fd = -1;
	if (!no_direct)
		c->slab_fd = openat(c->dir_fd, SLAB_FILE,
				    O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_DIRECT, 0600);
	if (c->slab_fd >= 0) {
		c->direct = 1;
	} else {
		c->slab_fd = openat(c->dir_fd, SLAB_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
				    0600);
		if (c->slab_fd < 0) {
			rc = -errno;
			snprintf(msg, msg_len, "cannot open %s/%s: %s", c->dir, SLAB_FILE, strerror(-rc));
			return rc;
		}
	}
	if (fstat(c->slab_fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(msg, msg_len, "%s/%s is not a regular file", c->dir, SLAB_FILE);
		return -EINVAL;
	}
	if (c->ix.wiped || st.st_size != len) {
		if (ftruncate(c->slab_fd, 0) < 0 || ftruncate(c->slab_fd, len) < 0) {
			rc = -errno;
			snprintf(msg, msg_len, "cannot size %s/%s: %s", c->dir, SLAB_FILE, strerror(-rc));
			return rc;
		}
	}
	/* Reserve the space now so that a full disk shows up here, not mid-run. */
	rc = posix_fallocate(c->slab_fd, 0, len);
	if (rc && rc != EOPNOTSUPP && rc != EINVAL) {
		snprintf(msg, msg_len, "cannot reserve %lld MiB for %s/%s: %s",
			 (long long)(len >> 20), c->dir, SLAB_FILE, strerror(rc));
		return -rc;
	}
	if (c->direct) {
		void *probe;
		ssize_t n = -1;

		if (posix_memalign(&probe, IO_ALIGN, IO_ALIGN) == 0) {
			n = pread(c->slab_fd, probe, IO_ALIGN, 0);
			free(probe);
		}
		if (n < 0) {
			log_info(TAG, "O_DIRECT refused by the filesystem of %s: using buffered I/O",
				 c->dir);
			close(c->slab_fd);
			c->direct = 0;
			return open_slab(c, nslots, 1, msg, msg_len);
		}
	}
	return 0;
}

static void pool_init(struct pool *pl, uint32_t size, uint32_t n)
{
	pl->size = size;
	pl->n = n;
	pl->free = NULL;
	pl->wait = NULL;
	pl->wait_tail = &pl->wait;
}

static uint32_t piece_size(uint32_t bs)
{
	return bs > CACHE_PIECE ? CACHE_PIECE : bs;
}

/* How many block buffers (nb) and piece buffers (ns) a cache of block size bs
 * gets for buffer_bytes (0: the default). One place, so that cache_io_bytes
 * tells the caller exactly what cache_new will map. */
static void pool_counts(uint32_t bs, uint64_t buffer_bytes, uint64_t *nb, uint64_t *ns)
{
	uint64_t want = buffer_bytes ? buffer_bytes : CACHE_BUFFER_DEFAULT;
	uint32_t piece = piece_size(bs);

	*nb = want / bs;
	if (*nb < 4)
		*nb = 4;
	if (*nb > MAX_BUFFERS)
		*nb = MAX_BUFFERS;
	*ns = 0;
	if (piece < bs) {
		*ns = want / 4 / piece;
		*ns = *ns < 16 ? 16 : *ns > MAX_BUFFERS ? MAX_BUFFERS : *ns;
	}
}

uint64_t cache_io_bytes(uint32_t block_size, uint64_t buffer_bytes)
{
	uint32_t bs = block_size ? block_size : CACHE_BLOCK_DEFAULT;
	uint64_t nb, ns;

	pool_counts(bs, buffer_bytes, &nb, &ns);
	return nb * bs + ns * piece_size(bs);
}

/* A sixth of --max-memory for block buffers, and a quarter of that again for
 * piece buffers (pool_counts): the cache's io stays a fixed fraction of what the
 * user gave, and the read path keeps the rest for in-flight and readahead. */
uint64_t cache_buffer_share(uint64_t max_memory)
{
	uint64_t b = max_memory / 6;

	return b < CACHE_BUFFER_DEFAULT ? b : CACHE_BUFFER_DEFAULT;
}

uint64_t cache_io_reserve(uint32_t block_size, uint64_t max_memory)
{
	return cache_io_bytes(block_size, cache_buffer_share(max_memory));
}

/* Two pools: blocks (want_bytes of them) and, when pieces are on, small
 * buffers of one piece (a quarter more) for pieces and small objects, so that
 * many of those can be in flight without holding a block-sized buffer each. */
static int setup_buffers(struct cache *c, uint64_t want_bytes)
{
	uint64_t nb, ns;
	struct iovec *iov;
	uint32_t n;
	char *p;
	int rc;

	pool_counts(c->bs, want_bytes, &nb, &ns);
	BUG_ON(c->piece != piece_size(c->bs));
	pool_init(&c->big, c->bs, (uint32_t)nb);
	pool_init(&c->small, ns ? c->piece : 0, (uint32_t)ns);
	n = (uint32_t)(nb + ns);
	c->buf_mem_len = (size_t)nb * c->bs + (size_t)ns * c->piece;
	c->buf_mem = mmap(NULL, c->buf_mem_len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->buf_mem == MAP_FAILED) {
		c->buf_mem = NULL;
		return -ENOMEM;
	}
	c->bufs = xcalloc(n, sizeof(*c->bufs));
	iov = xcalloc(n, sizeof(*iov));
	p = c->buf_mem;
	for (uint32_t i = 0; i < n; i++) {
		struct pool *pl = i < nb ? &c->big : &c->small;

		c->bufs[i].p = p;
		c->bufs[i].index = (int)i;
		c->bufs[i].next = pl->free;
		pl->free = &c->bufs[i];
		iov[i].iov_base = p;
		iov[i].iov_len = pl->size;
		p += pl->size;
	}
	rc = io_uring_register_buffers(&c->ring, iov, n);
	c->registered = rc == 0;
	if (rc < 0)
		log_info(TAG, "io buffers not registered (%s): plain reads and writes",
			 strerror(-rc));
	free(iov);
	return 0;
}

static void cache_free(struct cache *c, int clean)
{
	if (c->ring_ok)
		io_uring_queue_exit(&c->ring);
	if (c->ix.map) {
		if (clean && c->slab_fd >= 0 && fdatasync(c->slab_fd) < 0)
			log_warn(TAG, "fdatasync slab: %s", strerror(errno));
		idx_close(&c->ix, clean);
	}
	if (c->buf_mem)
		munmap(c->buf_mem, c->buf_mem_len);
	free(c->bufs);
	free(c->ps_mem);
	if (c->slab_fd >= 0)
		close(c->slab_fd);
	if (c->efd >= 0)
		close(c->efd);
	if (c->lock_fd >= 0)
		close(c->lock_fd);     /* releases the flock */
	if (c->dir_fd >= 0)
		close(c->dir_fd);
	pthread_mutex_destroy(&c->q.lock);
	free(c->dir);
	free(c->bucket);
	free(c);
}

int cache_new(const struct cache_config *cfg, struct cache **out, char *msg, size_t msg_len)
{
	struct cache *c;
	uint32_t bs = cfg->block_size ? cfg->block_size : CACHE_BLOCK_DEFAULT;
	uint32_t nslots;
	int rc;

	*out = NULL;
	if (!cfg->dir || !cfg->dir[0] || !cfg->inner) {
		snprintf(msg, msg_len, "cache: no directory or no inner fetcher");
		return -EINVAL;
	}
	if (bs < CACHE_BLOCK_MIN || bs > CACHE_BLOCK_MAX || (bs & (bs - 1))) {
		snprintf(msg, msg_len, "--block-size %u is not a power of two between %u KiB "
			 "and %u MiB", bs, CACHE_BLOCK_MIN >> 10, CACHE_BLOCK_MAX >> 20);
		return -EINVAL;
	}
	c = xcalloc(1, sizeof(*c));
	c->dir_fd = c->lock_fd = c->slab_fd = c->efd = -1;
	c->ix.fd = -1;
	c->dir = xstrdup(cfg->dir);
	c->bucket = xstrdup(cfg->bucket ? cfg->bucket : "");
	c->bs = bs;
	c->piece = piece_size(bs);
	c->inner = cfg->inner;
	c->base.ops = &cache_ops;
	c->base.cancels = 0;
	pthread_mutex_init(&c->q.lock, NULL);
	c->q.reqs_tail = &c->q.reqs;
	c->q.done_tail = &c->q.done;

	rc = open_dir(cfg->dir, &c->dir_fd, msg, msg_len);
	if (rc < 0)
		goto fail;
	rc = lock_dir(c->dir_fd, cfg->dir, &c->lock_fd, msg, msg_len);
	if (rc < 0)
		goto fail;
	rc = size_slots(cfg, c->dir_fd, bs, &nslots, msg, msg_len);
	if (rc < 0)
		goto fail;
	rc = idx_open(&c->ix, c->dir_fd, bs, nslots, cfg->clear, msg, msg_len);
	if (rc < 0)
		goto fail;
	rc = open_slab(c, nslots, cfg->no_direct, msg, msg_len);
	if (rc < 0)
		goto fail;
	if (c->piece < bs) {
		size_t per = sizeof(struct psum) + (bs / c->piece) * sizeof(uint32_t);

		c->ps_stride = (per + 7) & ~(size_t)7;
		c->ps_n = c->ix.npages < PSUM_BYTES / c->ps_stride ? c->ix.npages
							       : (uint32_t)(PSUM_BYTES / c->ps_stride);
		c->ps_n = c->ps_n ? c->ps_n : 1;
		c->ps_mem = xcalloc(c->ps_n, c->ps_stride);
		cksum_crc32c_shift_init(&c->piece_shift, c->piece);
	}
	c->efd = eventfd(0, EFD_CLOEXEC);
	if (c->efd < 0) {
		rc = -errno;
		snprintf(msg, msg_len, "eventfd: %s", strerror(-rc));
		goto fail;
	}
	rc = io_uring_queue_init(RING_ENTRIES, &c->ring, 0);
	if (rc < 0) {
		snprintf(msg, msg_len, "io_uring setup failed: %s", strerror(-rc));
		goto fail;
	}
	c->ring_ok = 1;
	rc = setup_buffers(c, cfg->buffer_bytes);
	if (rc < 0) {
		snprintf(msg, msg_len, "cannot allocate cache io buffers: %s", strerror(-rc));
		goto fail;
	}
	publish_fill(c);
	rc = -pthread_create(&c->thread, NULL, cache_thread, c);
	if (rc < 0) {
		snprintf(msg, msg_len, "cannot start cache thread: %s", strerror(-rc));
		goto fail;
	}
	log_info(TAG, "%s: %u pages of %u KiB (%llu MiB), %u records (%llu MiB) cached%s, %s, "
		 "%s buffers", c->dir, nslots, bs >> 10,
		 (unsigned long long)(((uint64_t)nslots * bs) >> 20), c->ix.used,
		 (unsigned long long)(c->ix.used_bytes >> 20),
		 c->ix.recovered_unclean ? " after an unclean shutdown" : "",
		 c->direct ? "O_DIRECT" : "buffered", c->registered ? "registered" : "plain");
	*out = c;
	return 0;
fail:
	cache_free(c, 0);
	return rc;
}

void cache_destroy(struct cache *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->q.lock);
	c->q.stopping = 1;
	pthread_mutex_unlock(&c->q.lock);
	wake(c);
	pthread_join(c->thread, NULL);
	cache_free(c, 1);
}

int cache_clear(const char *dir, char *msg, size_t msg_len)
{
	static const char *const files[] = { IDX_FILE, SLAB_FILE };
	int dfd, lfd = -1, rc;

	rc = open_dir(dir, &dfd, msg, msg_len);
	if (rc < 0)
		return rc;
	rc = lock_dir(dfd, dir, &lfd, msg, msg_len);
	for (size_t i = 0; rc == 0 && i < sizeof(files) / sizeof(files[0]); i++) {
		if (unlinkat(dfd, files[i], 0) < 0 && errno != ENOENT) {
			rc = -errno;
			snprintf(msg, msg_len, "cannot remove %s/%s: %s", dir, files[i], strerror(-rc));
		}
	}
	if (lfd >= 0)
		close(lfd);
	close(dfd);
	return rc;
}
