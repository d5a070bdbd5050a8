/*
 * state.c — the region a keeper's servers share (design in feedfs/keep.h).
 *
 * One memfd, mapped whole by each server:
 *   [header: magic, the saved INIT request, the node log's length]
 *   [KEEP_SLOTS handle slots]
 *   [the node log: records (ino, path length, is_dir, path), 8-aligned]
 * Its size is reserved with ftruncate; only the pages written are memory.
 * One server at a time writes it. Every server indexes the log (node id ->
 * record) when it maps the region and keeps the index as it appends, so a
 * node forgotten and created again under the same id and path is not logged
 * twice: the log grows with the distinct nodes, not with lookups.
 * Slots: kind is written last (release) and read first (acquire), so a
 * successor never sees half a slot. A server allocates the lowest free slot
 * from a bitmap of its own (under keep.mu), built when it maps the region
 * from the slots below the header's high-water mark, so the pages of slots
 * touched stay those of the most handles ever open at once, not all of them.
 * A region whose mark is 0 but that has data (written by a binary before
 * the mark) is scanned page by page where the memfd has data (SEEK_DATA):
 * reading a hole would allocate it.
 */
#include "feedfs/keep.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "keep_i.h"

#define TAG "keep"
#define KEEP_MAGIC 0x314b736664656566ull    /* "feedfsK1" */
#define KEEP_VERSION 1u
#define HDR_BYTES 4096u

struct keep_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t init_len;
	uint64_t log_tail;                  /* bytes of the log written */
	uint32_t log_full;                  /* a node did not fit: logged once */
	uint32_t slots_hwm;                 /* slots below it may be in use (0: unknown) */
	unsigned char init[KEEP_INIT_MAX];
};

struct keep_slot {
	uint32_t kind;                      /* enum keep_kind; written last */
	int32_t backing;                    /* FUSE passthrough backing id; 0: none */
	uint64_t ino;
	uint64_t size;
	char etag[KEEP_ETAG_MAX];
};

struct keep_rec {
	uint64_t ino;
	uint32_t len;
	uint32_t is_dir;
	/* then len bytes of path, padded to 8 */
};

#define SLOTS_OFF HDR_BYTES
#define SLOTS_BYTES ((uint64_t)KEEP_SLOTS * sizeof(struct keep_slot))
#define LOG_OFF (((SLOTS_OFF + SLOTS_BYTES) + 4095) & ~(uint64_t)4095)
#define REGION_BYTES (LOG_OFF + KEEP_LOG_BYTES)

struct keep {
	unsigned char *base;
	struct keep_hdr *hdr;
	struct keep_slot *slots;
	unsigned char *log;
	pthread_mutex_t mu;                 /* slot allocation: used[] and the mark */
	uint64_t used[KEEP_SLOTS / 64];     /* slot i in use: bit i */
	/* Node id -> log offset + 1, open addressing; the fs lock covers it
	 * (keep_log_node and keep_find_node are called under it). */
	uint64_t *idx_ino, *idx_off;
	size_t idx_mask, idx_count;
};

_Static_assert(sizeof(struct keep_hdr) <= HDR_BYTES, "keep header fits its page");

uint64_t keep_region_bytes(void)
{
	return REGION_BYTES;
}

uint64_t keep_log_bytes(const struct keep *k)
{
	return __atomic_load_n(&k->hdr->log_tail, __ATOMIC_ACQUIRE);
}

uint32_t keep_slots_hwm(const struct keep *k)
{
	return __atomic_load_n(&k->hdr->slots_hwm, __ATOMIC_ACQUIRE);
}

static size_t rec_bytes(size_t len)
{
	return (sizeof(struct keep_rec) + len + 7) & ~(size_t)7;
}

static size_t idx_slot(const struct keep *k, uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 17) & k->idx_mask;
}

/* Point id at log offset off (the newest record of an id wins). */
static int idx_put(struct keep *k, uint64_t ino, uint64_t off)
{
	size_t i;

	if (2 * (k->idx_count + 1) > k->idx_mask + 1) {
		size_t cap = k->idx_mask ? 2 * (k->idx_mask + 1) : 1024, old = k->idx_mask + 1;
		uint64_t *oi = k->idx_ino, *oo = k->idx_off;
		uint64_t *ni = calloc(cap, sizeof(*ni)), *no = calloc(cap, sizeof(*no));

		if (!ni || !no) {
			free(ni);
			free(no);
			return -ENOMEM;
		}
		k->idx_ino = ni;
		k->idx_off = no;
		k->idx_mask = cap - 1;
		k->idx_count = 0;
		for (size_t j = 0; oo && j < old; j++)
			if (oo[j])
				idx_put(k, oi[j], oo[j] - 1);
		free(oi);
		free(oo);
	}
	for (i = idx_slot(k, ino); k->idx_off[i] && k->idx_ino[i] != ino; i = (i + 1) & k->idx_mask)
		;
	if (!k->idx_off[i])
		k->idx_count++;
	k->idx_ino[i] = ino;
	k->idx_off[i] = off + 1;
	return 0;
}

static const struct keep_rec *idx_get(const struct keep *k, uint64_t ino)
{
	size_t i;

	if (!k->idx_off)
		return NULL;
	for (i = idx_slot(k, ino); k->idx_off[i]; i = (i + 1) & k->idx_mask)
		if (k->idx_ino[i] == ino)
			return (const struct keep_rec *)(k->log + k->idx_off[i] - 1);
	return NULL;
}

/* Index every logged node. */
static int index_log(struct keep *k)
{
	uint64_t tail = __atomic_load_n(&k->hdr->log_tail, __ATOMIC_ACQUIRE), off;
	int e;

	for (off = 0; off + sizeof(struct keep_rec) <= tail;) {
		const struct keep_rec *r = (const struct keep_rec *)(k->log + off);

		if ((e = idx_put(k, r->ino, off)) < 0)
			return e;
		off += rec_bytes(r->len);
	}
	return 0;
}

static void mark_used(struct keep *k, uint32_t i)
{
	if (__atomic_load_n(&k->slots[i].kind, __ATOMIC_ACQUIRE) != KEEP_FREE)
		k->used[i / 64] |= 1ull << (i % 64);
}

/* The slots a previous server may have left open: below the mark, or, in a
 * region without one, on the pages that hold data. */
static void index_slots(struct keep *k, int state_fd)
{
	uint32_t hwm = k->hdr->slots_hwm;
	off_t pos = SLOTS_OFF, end = (off_t)(SLOTS_OFF + SLOTS_BYTES);

	if (hwm) {
		for (uint32_t i = 0; i < hwm && i < KEEP_SLOTS; i++)
			mark_used(k, i);
		return;
	}
	while (pos < end) {
		off_t data = lseek(state_fd, pos, SEEK_DATA), hole;
		uint64_t first, last;

		if (data < 0 || data >= end)
			break;
		hole = lseek(state_fd, data, SEEK_HOLE);
		if (hole < 0 || hole > end)
			hole = end;
		first = ((uint64_t)data - SLOTS_OFF) / sizeof(struct keep_slot);
		last = ((uint64_t)hole - SLOTS_OFF + sizeof(struct keep_slot) - 1) /
		       sizeof(struct keep_slot);
		for (uint64_t i = first; i < last && i < KEEP_SLOTS; i++) {
			mark_used(k, (uint32_t)i);
			if (k->used[i / 64] & (1ull << (i % 64)))
				hwm = (uint32_t)i + 1;
		}
		pos = hole;
	}
	k->hdr->slots_hwm = hwm;
}

int keep_open(int state_fd, struct keep **out)
{
	struct keep *k;
	struct stat st;
	void *p;
	int e;

	if (fstat(state_fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size != REGION_BYTES)
		return -EINVAL;
	p = mmap(NULL, REGION_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		 state_fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	k = calloc(1, sizeof(*k));
	if (!k) {
		munmap(p, REGION_BYTES);
		return -ENOMEM;
	}
	k->base = p;
	k->hdr = p;
	k->slots = (struct keep_slot *)(k->base + SLOTS_OFF);
	k->log = k->base + LOG_OFF;
	pthread_mutex_init(&k->mu, NULL);
	if (k->hdr->magic == 0) {
		k->hdr->version = KEEP_VERSION;
		__atomic_store_n(&k->hdr->magic, KEEP_MAGIC, __ATOMIC_RELEASE);
	} else if (k->hdr->magic != KEEP_MAGIC || k->hdr->version != KEEP_VERSION) {
		keep_close(k);
		return -EPROTO;     /* another binary's layout: no takeover */
	} else if ((e = index_log(k)) < 0) {
		keep_close(k);
		return e;
	} else {
		index_slots(k, state_fd);
	}
	*out = k;
	return 0;
}

void keep_close(struct keep *k)
{
	if (!k)
		return;
	munmap(k->base, REGION_BYTES);
	pthread_mutex_destroy(&k->mu);
	free(k->idx_ino);
	free(k->idx_off);
	free(k);
}

void keep_save_init(struct keep *k, const void *buf, size_t len)
{
	if (len > KEEP_INIT_MAX)
		len = KEEP_INIT_MAX;        /* INIT is ~100 bytes; never seen */
	memcpy(k->hdr->init, buf, len);
	__atomic_store_n(&k->hdr->init_len, (uint32_t)len, __ATOMIC_RELEASE);
}

size_t keep_init(struct keep *k, void *buf, size_t cap)
{
	size_t len = __atomic_load_n(&k->hdr->init_len, __ATOMIC_ACQUIRE);

	if (len > cap)
		return 0;
	memcpy(buf, k->hdr->init, len);
	return len;
}

void keep_log_node(struct keep *k, uint64_t ino, const char *path, size_t len, int is_dir)
{
	uint64_t tail = k->hdr->log_tail;
	size_t need = rec_bytes(len);
	const struct keep_rec *old = idx_get(k, ino);
	struct keep_rec *r;

	if (old && old->len == len && old->is_dir == (uint32_t)!!is_dir &&
	    memcmp(old + 1, path, len) == 0)
		return;                     /* created again: the record stands */
	if (tail + need > KEEP_LOG_BYTES) {
		if (!k->hdr->log_full) {
			k->hdr->log_full = 1;
			log_warn(TAG, "node log full (%llu MiB): nodes from now on would answer "
				 "ESTALE after a takeover", (unsigned long long)(KEEP_LOG_BYTES >> 20));
		}
		return;
	}
	r = (struct keep_rec *)(k->log + tail);
	r->ino = ino;
	r->len = (uint32_t)len;
	r->is_dir = !!is_dir;
	memcpy(r + 1, path, len);
	__atomic_store_n(&k->hdr->log_tail, tail + need, __ATOMIC_RELEASE);
	if (idx_put(k, ino, tail) < 0)
		log_warn(TAG, "node log index: out of memory (a node may be logged twice)");
}

int keep_find_node(struct keep *k, uint64_t ino, const char **path, size_t *len, int *is_dir)
{
	const struct keep_rec *r = idx_get(k, ino);

	if (!r)
		return 0;
	*path = (const char *)(r + 1);
	*len = r->len;
	*is_dir = (int)r->is_dir;
	return 1;
}

int64_t keep_handle_open(struct keep *k, enum keep_kind kind, uint64_t ino, uint64_t size,
			 const char *etag)
{
	pthread_mutex_lock(&k->mu);
	for (uint32_t w = 0; w < KEEP_SLOTS / 64; w++) {
		uint32_t i;
		struct keep_slot *s;

		if (k->used[w] == ~0ull)
			continue;
		i = w * 64 + (uint32_t)__builtin_ctzll(~k->used[w]);
		k->used[w] |= 1ull << (i % 64);
		if (i + 1 > k->hdr->slots_hwm)
			__atomic_store_n(&k->hdr->slots_hwm, i + 1, __ATOMIC_RELEASE);
		pthread_mutex_unlock(&k->mu);
		s = &k->slots[i];
		s->ino = ino;
		s->size = size;
		s->backing = 0;
		memset(s->etag, 0, sizeof(s->etag));
		if (etag)
			strncpy(s->etag, etag, sizeof(s->etag) - 1);
		__atomic_store_n(&s->kind, (uint32_t)kind, __ATOMIC_RELEASE);
		return (int64_t)i + 1;
	}
	pthread_mutex_unlock(&k->mu);
	return -ENFILE;
}

void keep_handle_close(struct keep *k, uint64_t fh)
{
	uint32_t i;

	if (fh == 0 || fh > KEEP_SLOTS)
		return;
	i = (uint32_t)(fh - 1);
	__atomic_store_n(&k->slots[i].kind, (uint32_t)KEEP_FREE, __ATOMIC_RELEASE);
	pthread_mutex_lock(&k->mu);
	k->used[i / 64] &= ~(1ull << (i % 64));
	pthread_mutex_unlock(&k->mu);
}

void keep_handle_set_backing(struct keep *k, uint64_t fh, int32_t backing)
{
	if (fh == 0 || fh > KEEP_SLOTS)
		return;
	__atomic_store_n(&k->slots[fh - 1].backing, backing, __ATOMIC_RELEASE);
}

int32_t keep_handle_backing(struct keep *k, uint64_t fh)
{
	if (fh == 0 || fh > KEEP_SLOTS)
		return 0;
	return __atomic_load_n(&k->slots[fh - 1].backing, __ATOMIC_ACQUIRE);
}

void keep_handles_each(struct keep *k, keep_handle_fn fn, void *arg)
{
	keep_slots_each(k, KEEP_FILE, fn, arg);
}

void keep_slots_each(struct keep *k, enum keep_kind kind, keep_handle_fn fn, void *arg)
{
	uint32_t hwm = __atomic_load_n(&k->hdr->slots_hwm, __ATOMIC_ACQUIRE);

	/* Not past the mark: reading a slot page never written would allocate it. */
	for (uint32_t i = 0; i < hwm && i < KEEP_SLOTS; i++) {
		const struct keep_slot *s = &k->slots[i];

		if (__atomic_load_n(&s->kind, __ATOMIC_ACQUIRE) != (uint32_t)kind)
			continue;
		fn(arg, (uint64_t)i + 1, s->ino, s->etag,
		   __atomic_load_n(&s->backing, __ATOMIC_ACQUIRE));
	}
}

int keep_handle_get(struct keep *k, uint64_t fh, enum keep_kind kind, uint64_t *ino,
		    uint64_t *size, char *etag)
{
	const struct keep_slot *s;

	if (fh == 0 || fh > KEEP_SLOTS)
		return -EBADF;
	s = &k->slots[fh - 1];
	if (__atomic_load_n(&s->kind, __ATOMIC_ACQUIRE) != (uint32_t)kind)
		return -EBADF;
	*ino = s->ino;
	*size = s->size;
	if (etag)
		memcpy(etag, s->etag, KEEP_ETAG_MAX);
	return 0;
}
