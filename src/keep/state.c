/*
 * state.c — the region a keeper's servers share (design in feedfs/keep.h).
 *
 * One memfd, mapped whole by each server:
 *   [header: magic, the saved INIT request, the node log's length]
 *   [KEEP_SLOTS handle slots]
 *   [the node log: records (ino, path length, is_dir, path), 8-aligned]
 * Its size is reserved with ftruncate; only the pages written are memory.
 * One server at a time writes it. A successor indexes the log once (node id
 * -> record) when it maps the region; after that only its own new nodes are
 * appended. Slots: kind is written last (release) and read first (acquire),
 * so a successor never sees half a slot; within a server, allocation is
 * under keep.mu.
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
	uint32_t pad;
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
	pthread_mutex_t mu;                 /* slot allocation */
	uint32_t hint;                      /* next slot to try */
	/* Successor only: node id -> log offset + 1, open addressing. */
	uint64_t *idx_ino, *idx_off;
	size_t idx_mask;
};

_Static_assert(sizeof(struct keep_hdr) <= HDR_BYTES, "keep header fits its page");

uint64_t keep_region_bytes(void)
{
	return REGION_BYTES;
}

static size_t rec_bytes(size_t len)
{
	return (sizeof(struct keep_rec) + len + 7) & ~(size_t)7;
}

static size_t idx_slot(const struct keep *k, uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 17) & k->idx_mask;
}

/* A successor: index every logged node (the newest record of an id wins). */
static int index_log(struct keep *k)
{
	uint64_t tail = __atomic_load_n(&k->hdr->log_tail, __ATOMIC_ACQUIRE), off, n = 0;
	size_t cap = 16;

	for (off = 0; off + sizeof(struct keep_rec) <= tail; n++)
		off += rec_bytes(((struct keep_rec *)(k->log + off))->len);
	while (cap < 2 * n)
		cap <<= 1;
	k->idx_ino = calloc(cap, sizeof(*k->idx_ino));
	k->idx_off = calloc(cap, sizeof(*k->idx_off));
	if (!k->idx_ino || !k->idx_off)
		return -ENOMEM;
	k->idx_mask = cap - 1;
	for (off = 0; off + sizeof(struct keep_rec) <= tail;) {
		const struct keep_rec *r = (const struct keep_rec *)(k->log + off);
		size_t i = idx_slot(k, r->ino);

		while (k->idx_off[i] && k->idx_ino[i] != r->ino)
			i = (i + 1) & k->idx_mask;
		k->idx_ino[i] = r->ino;
		k->idx_off[i] = off + 1;
		off += rec_bytes(r->len);
	}
	return 0;
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
	struct keep_rec *r;

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
}

int keep_find_node(struct keep *k, uint64_t ino, const char **path, size_t *len, int *is_dir)
{
	const struct keep_rec *r;
	size_t i;

	if (!k->idx_off)
		return 0;
	for (i = idx_slot(k, ino); k->idx_off[i]; i = (i + 1) & k->idx_mask)
		if (k->idx_ino[i] == ino)
			break;
	if (!k->idx_off[i])
		return 0;
	r = (const struct keep_rec *)(k->log + k->idx_off[i] - 1);
	*path = (const char *)(r + 1);
	*len = r->len;
	*is_dir = (int)r->is_dir;
	return 1;
}

int64_t keep_handle_open(struct keep *k, enum keep_kind kind, uint64_t ino, uint64_t size,
			 const char *etag)
{
	pthread_mutex_lock(&k->mu);
	for (uint32_t n = 0; n < KEEP_SLOTS; n++) {
		uint32_t i = (k->hint + n) % KEEP_SLOTS;
		struct keep_slot *s = &k->slots[i];

		if (__atomic_load_n(&s->kind, __ATOMIC_ACQUIRE) != KEEP_FREE)
			continue;
		s->ino = ino;
		s->size = size;
		s->backing = 0;
		memset(s->etag, 0, sizeof(s->etag));
		if (etag)
			strncpy(s->etag, etag, sizeof(s->etag) - 1);
		__atomic_store_n(&s->kind, (uint32_t)kind, __ATOMIC_RELEASE);
		k->hint = (i + 1) % KEEP_SLOTS;
		pthread_mutex_unlock(&k->mu);
		return (int64_t)i + 1;
	}
	pthread_mutex_unlock(&k->mu);
	return -ENFILE;
}

void keep_handle_close(struct keep *k, uint64_t fh)
{
	if (fh == 0 || fh > KEEP_SLOTS)
		return;
	__atomic_store_n(&k->slots[fh - 1].kind, (uint32_t)KEEP_FREE, __ATOMIC_RELEASE);
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
	for (uint32_t i = 0; i < KEEP_SLOTS; i++) {
		const struct keep_slot *s = &k->slots[i];

		if (__atomic_load_n(&s->kind, __ATOMIC_ACQUIRE) != KEEP_FILE)
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
