/*
 * promote — whole objects as plain files for FUSE passthrough (promote.h).
 *
 * DESIGN
 * One table (hash by name + an LRU list) of the files in cache_dir/promoted,
 * under p->lock, a leaf: held for lookups, inserts and evictions (whose
 * unlinkat is the only I/O done under it; it is one syscall on a directory
 * we own). One promoter thread takes wishes from a bounded FIFO (same lock,
 * cond `work`) and builds one file at a time: it reads the object through
 * cache_fetch_cached, chunk after chunk into one buffer, and writes each
 * chunk at its offset in a temporary file (".t-<name>"); only a complete,
 * fully checked object is renamed to its name and entered into the table,
 * evicting least recently opened files until it fits.
 *
 * An evicted file may still be held open by a passthrough backing id that
 * the fs keeps for reuse (fs/passthrough.c): the eviction hook tells the fs
 * the name, so that it drops the id and the disk space comes back. The names
 * are collected under p->lock and reported by the promoter after it let go
 * of it (the hook takes the fs's passthrough lock, which is taken before
 * p->lock elsewhere); p->hook_lock keeps the hook from being unset while
 * it runs.
 */
#include "feedfs/promote.h"

#include "feedfs/cache.h"
#include "feedfs/fetch.h"
#include "feedfs/log.h"
#include "feedfs/stats.h"
#include "feedfs/util.h"

#include "cksum_i.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define TAG "promote"
#define BUCKETS 4096u
#define TMP_PREFIX ".t-"
#define CHUNK_DEFAULT (4u << 20)

struct pent {
	char name[PROMOTE_NAME_LEN + 1];
	uint64_t size;
	struct pent *hnext;
	struct pent *prev, *next;       /* LRU: head.next is the most recent */
};

struct wish {
	struct wish *next;
	char name[PROMOTE_NAME_LEN + 1];
	uint64_t size;
	size_t key_len;
	char *etag;                     /* after key */
	char key[];
};

struct promote_counters {
	uint64_t promotions, promoted_bytes, not_cached, failures, dropped, evictions;
};

struct promote {
	char *bucket;
	int dir_fd;
	uint64_t max_bytes;
	struct cache *cache;
	uint32_t chunk;

	pthread_mutex_t lock;           /* leaf; guards all below */
	pthread_cond_t work, idle;
	struct pent *b[BUCKETS];
	struct pent lru;
	uint64_t files, bytes;
	struct wish *q, **q_tail;
	unsigned nq;
	int busy, stop;
	const char *building;           /* name being built (busy), for dedup */
	int thread_ok;
	pthread_t thread;

	struct promote_counters st;     /* relaxed atomics */

	/* Lock order: hook_lock, then (inside the hook) the fs's locks, then
	 * p->lock. evicted_fn is written under both, read under either. */
	pthread_mutex_t hook_lock;
	promote_evicted_fn evicted_fn;
	void *evicted_arg;
	struct gone *gone;              /* evicted, not reported yet (p->lock) */
};

struct gone {
	struct gone *next;
	char name[PROMOTE_NAME_LEN + 1];
};

#define PCNT(p, f, v) __atomic_add_fetch(&(p)->st.f, (v), __ATOMIC_RELAXED)

void promote_name(const char *bucket, const char *key, size_t key_len, const char *etag,
		  char out[PROMOTE_NAME_LEN + 1])
{
	struct cksum_h128_state s;
	struct cksum_h128 h;

	/* The cache's object identity (cache.c object_id): one name per version. */
	if (!bucket)
		bucket = "";
	cksum_h128_init(&s);
	cksum_h128_field(&s, bucket, strlen(bucket));
	cksum_h128_field(&s, key, key_len);
	cksum_h128_field(&s, etag, strlen(etag));
	h = cksum_h128_final(&s);
	snprintf(out, PROMOTE_NAME_LEN + 1, "%016llx%016llx", (unsigned long long)h.hi,
		 (unsigned long long)h.lo);
}

static int is_name(const char *s)
{
	size_t i;

	for (i = 0; s[i]; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return i == PROMOTE_NAME_LEN;
}

static unsigned bucket_of(const char *name)
{
	return (unsigned)strtoul(name + PROMOTE_NAME_LEN - 8, NULL, 16) % BUCKETS;
}

/* p->lock held. */
static struct pent *find(struct promote *p, const char *name)
{
	for (struct pent *e = p->b[bucket_of(name)]; e; e = e->hnext)
		if (strcmp(e->name, name) == 0)
			return e;
	return NULL;
}

static void lru_unlink(struct pent *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
}

static void lru_push(struct promote *p, struct pent *e)
{
	e->next = p->lru.next;
	e->prev = &p->lru;
	p->lru.next->prev = e;
	p->lru.next = e;
}

/* p->lock held: drop e from the table and the directory. */
static void evict(struct promote *p, struct pent *e)
{
	struct pent **pp = &p->b[bucket_of(e->name)];

	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(e);
	p->files--;
	p->bytes -= e->size;
	if (p->evicted_fn) {
		struct gone *g = malloc(sizeof(*g));

		/* Out of memory: the fs keeps its id until its own bound drops
		 * it; the bytes it reads are still the right ones. */
		if (g) {
			memcpy(g->name, e->name, sizeof(g->name));
			g->next = p->gone;
			p->gone = g;
		}
	}
	if (unlinkat(p->dir_fd, e->name, 0) < 0 && errno != ENOENT)
		log_warn(TAG, "cannot remove promoted file %s: %s", e->name, strerror(errno));
	free(e);
}

/* p->lock held: room for size more bytes, oldest first. */
static void make_room(struct promote *p, uint64_t size)
{
	while (p->files && p->bytes + size > p->max_bytes) {
		evict(p, p->lru.prev);
		PCNT(p, evictions, 1);
	}
}

/* p->lock held: enter a file (most recent when recent, else least). */
static void insert(struct promote *p, const char *name, uint64_t size, int recent)
{
	struct pent *e = xcalloc(1, sizeof(*e));

	memcpy(e->name, name, PROMOTE_NAME_LEN + 1);
	e->size = size;
	e->hnext = p->b[bucket_of(name)];
	p->b[bucket_of(name)] = e;
	if (recent) {
		lru_push(p, e);
	} else {
		e->prev = p->lru.prev;
		e->next = &p->lru;
		p->lru.prev->next = e;
		p->lru.prev = e;
	}
	p->files++;
	p->bytes += size;
}

struct scanned {
	char name[PROMOTE_NAME_LEN + 1];
	uint64_t size;
	int64_t mtime_ns;
};

static int by_mtime_desc(const void *a, const void *b)
{
	const struct scanned *x = a, *y = b;

	return x->mtime_ns < y->mtime_ns ? 1 : x->mtime_ns > y->mtime_ns ? -1 : 0;
}

/* Load the directory: newest first into the LRU, temporaries removed. */
static int scan(struct promote *p, int clear)
{
	struct scanned *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *d;
	int fd = dup(p->dir_fd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((d = readdir(dir))) {
		struct stat st;

		if (strncmp(d->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0 ||
		    (clear && is_name(d->d_name))) {
			(void)unlinkat(p->dir_fd, d->d_name, 0);
			continue;
		}
		if (!is_name(d->d_name) || fstatat(p->dir_fd, d->d_name, &st, 0) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (n == cap) {
			struct scanned *nv = realloc(v, (cap ? cap * 2 : 256) * sizeof(*v));

			if (!nv)
				break;              /* the files not seen stay, unused */
			v = nv;
			cap = cap ? cap * 2 : 256;
		}
		memcpy(v[n].name, d->d_name, PROMOTE_NAME_LEN + 1);
		v[n].size = (uint64_t)st.st_size;
		v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
		n++;
	}
	closedir(dir);
	if (n)
		qsort(v, n, sizeof(*v), by_mtime_desc);
	for (size_t i = 0; i < n; i++) {
		if (p->bytes + v[i].size > p->max_bytes) {
			(void)unlinkat(p->dir_fd, v[i].name, 0);
			PCNT(p, evictions, 1);
			continue;
		}
		insert(p, v[i].name, v[i].size, 0);
	}
	free(v);
	return 0;
}

/* ---- building one file (promoter thread) ---- */

struct waitreq {
	struct fetch_req fr;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int done;
	ssize_t res;
};

static void chunk_done(struct fetch_req *fr, ssize_t res)
{
	struct waitreq *w = fr->done_arg;

	pthread_mutex_lock(&w->m);
	w->res = res;
	w->done = 1;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->m);
}

static ssize_t read_cached(struct promote *p, const struct wish *wi, uint64_t off, size_t len,
			   char *buf)
{
	struct waitreq w = { .m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
	int e;

	w.fr.key = wi->key;
	w.fr.key_len = wi->key_len;
	w.fr.etag = wi->etag;
	w.fr.obj_size = wi->size;
	w.fr.off = off;
	w.fr.len = len;
	w.fr.buf = buf;
	w.fr.done = chunk_done;
	w.fr.done_arg = &w;
	e = cache_fetch_cached(p->cache, &w.fr);
	if (e < 0)
		return e;
	pthread_mutex_lock(&w.m);
	while (!w.done)
		pthread_cond_wait(&w.cv, &w.m);
	pthread_mutex_unlock(&w.m);
	return w.res;
}

/* Room on the disk for size more bytes, keeping the cache's reserve free. */
static int disk_room(struct promote *p, uint64_t size)
{
	struct statvfs sv;
	uint64_t avail, reserve;

	if (fstatvfs(p->dir_fd, &sv) < 0)
		return 0;
	avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	reserve = (uint64_t)sv.f_blocks * sv.f_frsize / 100 * CACHE_DISK_RESERVE_PCT;
	return avail > reserve && avail - reserve > size;
}

/* 0: promoted; -ENODATA: not all cached; other -errno: failed. */
static int build(struct promote *p, const struct wish *wi, char *buf)
{
	char tmp[sizeof(TMP_PREFIX) + PROMOTE_NAME_LEN];
	uint64_t off = 0;
	int fd, e = 0;

	if (!disk_room(p, wi->size))
		return -ENOSPC;
	snprintf(tmp, sizeof(tmp), TMP_PREFIX "%s", wi->name);
	fd = openat(p->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (off < wi->size && !e) {
		size_t len = wi->size - off < p->chunk ? (size_t)(wi->size - off) : p->chunk;
		ssize_t r = read_cached(p, wi, off, len, buf);

		if (r < 0) {
			e = (int)r;
		} else if ((size_t)r != len) {
			e = -EIO;
		} else {
			for (size_t w = 0; w < len && !e; ) {
				ssize_t n = pwrite(fd, buf + w, len - w, (off_t)(off + w));

				if (n < 0 && errno != EINTR)
					e = -errno;
				else if (n > 0)
					w += (size_t)n;
			}
			off += len;
		}
		pthread_mutex_lock(&p->lock);
		if (p->stop)
			e = -ECANCELED;
		pthread_mutex_unlock(&p->lock);
	}
	if (close(fd) < 0 && !e)
		e = -errno;
	if (!e) {
		pthread_mutex_lock(&p->lock);
		make_room(p, wi->size);
		if (renameat(p->dir_fd, tmp, p->dir_fd, wi->name) < 0) {
			e = -errno;
		} else if (!find(p, wi->name)) {
			insert(p, wi->name, wi->size, 1);
		}
		pthread_mutex_unlock(&p->lock);
	}
	if (e)
		(void)unlinkat(p->dir_fd, tmp, 0);
	return e;
}

/* Tells the hook of the files evicted since the last call; no p->lock. */
static void report_gone(struct promote *p)
{
	struct gone *g;

	pthread_mutex_lock(&p->hook_lock);
	pthread_mutex_lock(&p->lock);
	g = p->gone;
	p->gone = NULL;
	pthread_mutex_unlock(&p->lock);
	while (g) {
		struct gone *next = g->next;

		if (p->evicted_fn)
			p->evicted_fn(p->evicted_arg, g->name);
		free(g);
		g = next;
	}
	pthread_mutex_unlock(&p->hook_lock);
}

static void *promoter(void *arg)
{
	struct promote *p = arg;
	char *buf = xmalloc(p->chunk);

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct wish *wi;
		int e;

		if (!p->q)
			pthread_cond_broadcast(&p->idle);
		while (!p->q && !p->stop)
			pthread_cond_wait(&p->work, &p->lock);
		if (p->stop)
			break;
		wi = p->q;
		p->q = wi->next;
		if (!p->q)
			p->q_tail = &p->q;
		p->nq--;
		if (find(p, wi->name)) {
			free(wi);
			continue;
		}
		p->busy = 1;
		p->building = wi->name;
		pthread_mutex_unlock(&p->lock);

		e = build(p, wi, buf);
		report_gone(p);
		if (e == 0) {
			PCNT(p, promotions, 1);
			PCNT(p, promoted_bytes, wi->size);
			log_debug(TAG, "promoted %.*s (%llu bytes)", (int)wi->key_len, wi->key,
				  (unsigned long long)wi->size);
		} else if (e == -ENODATA) {
			PCNT(p, not_cached, 1);
		} else if (e != -ECANCELED) {
			PCNT(p, failures, 1);
			log_debug(TAG, "not promoted %.*s: %s", (int)wi->key_len, wi->key,
				  strerror(-e));
		}
		free(wi);
		pthread_mutex_lock(&p->lock);
		p->busy = 0;
		p->building = NULL;
	}
	while (p->q) {
		struct wish *wi = p->q;

		p->q = wi->next;
		free(wi);
	}
	p->q_tail = &p->q;
	p->nq = 0;
	pthread_cond_broadcast(&p->idle);
	pthread_mutex_unlock(&p->lock);
	free(buf);
	return NULL;
}

/* ---- the interface ---- */

int promote_new(const struct promote_config *cfg, struct promote **out)
{
	struct promote *p;
	char path[4096];
	int e;

	if (!cfg->cache_dir || !cfg->max_bytes)
		return -EINVAL;
	if ((size_t)snprintf(path, sizeof(path), "%s/" PROMOTE_DIR, cfg->cache_dir) >= sizeof(path))
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	p = xcalloc(1, sizeof(*p));
	p->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->dir_fd < 0) {
		e = -errno;
		free(p);
		return e;
	}
	p->bucket = xstrdup(cfg->bucket ? cfg->bucket : "");
	p->max_bytes = cfg->max_bytes;
	p->cache = cfg->cache;
	p->chunk = cfg->chunk ? cfg->chunk : CHUNK_DEFAULT;
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_init(&p->hook_lock, NULL);
	pthread_cond_init(&p->work, NULL);
	pthread_cond_init(&p->idle, NULL);
	p->lru.prev = p->lru.next = &p->lru;
	p->q_tail = &p->q;
	e = scan(p, cfg->clear);
	if (e == 0 && p->cache) {
		e = -pthread_create(&p->thread, NULL, promoter, p);
		p->thread_ok = e == 0;
	}
	if (e < 0) {
		promote_destroy(p);
		return e;
	}
	*out = p;
	return 0;
}

void promote_destroy(struct promote *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->work);
	pthread_mutex_unlock(&p->lock);
	if (p->thread_ok)
		pthread_join(p->thread, NULL);
	while (p->q) {
		struct wish *wi = p->q;

		p->q = wi->next;
		free(wi);
	}
	while (p->lru.next != &p->lru) {
		struct pent *e = p->lru.next;

		lru_unlink(e);
		free(e);
	}
	while (p->gone) {
		struct gone *g = p->gone;

		p->gone = g->next;
		free(g);
	}
	pthread_mutex_destroy(&p->hook_lock);
	pthread_cond_destroy(&p->idle);
	pthread_cond_destroy(&p->work);
	pthread_mutex_destroy(&p->lock);
	close(p->dir_fd);
	free(p->bucket);
	free(p);
}

void promote_key_name(struct promote *p, const char *key, size_t key_len, const char *etag,
		      char out[PROMOTE_NAME_LEN + 1])
{
	promote_name(p->bucket, key, key_len, etag, out);
}

int promote_touch(struct promote *p, const char *name, uint64_t size)
{
	struct pent *e;
	int r = -ENOENT;

	pthread_mutex_lock(&p->lock);
	e = find(p, name);
	if (e && e->size == size) {
		lru_unlink(e);
		lru_push(p, e);
		r = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

int promote_has(struct promote *p, const char *key, size_t key_len, const char *etag,
		uint64_t size)
{
	char name[PROMOTE_NAME_LEN + 1];
	struct pent *e;
	int r;

	promote_key_name(p, key, key_len, etag, name);
	pthread_mutex_lock(&p->lock);
	e = find(p, name);
	r = e && e->size == size;
	pthread_mutex_unlock(&p->lock);
	return r;
}

void promote_set_evicted(struct promote *p, promote_evicted_fn fn, void *arg)
{
	pthread_mutex_lock(&p->hook_lock);
	pthread_mutex_lock(&p->lock);
	p->evicted_fn = fn;
	p->evicted_arg = arg;
	if (!fn) {
		while (p->gone) {
			struct gone *g = p->gone;

			p->gone = g->next;
			free(g);
		}
	}
	pthread_mutex_unlock(&p->lock);
	pthread_mutex_unlock(&p->hook_lock);
}

int promote_open(struct promote *p, const char *key, size_t key_len, const char *etag,
		 uint64_t size)
{
	char name[PROMOTE_NAME_LEN + 1];
	struct pent *e;
	int fd;

	if (!etag || !etag[0])
		return -ENOENT;
	promote_name(p->bucket, key, key_len, etag, name);
	pthread_mutex_lock(&p->lock);
	e = find(p, name);
	if (!e || e->size != size) {
		pthread_mutex_unlock(&p->lock);
		return -ENOENT;
	}
	lru_unlink(e);
	lru_push(p, e);
	/* Opened under the lock so that an eviction cannot come in between. */
	fd = openat(p->dir_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fd = -errno;
		log_warn(TAG, "promoted file %s is gone (%s): dropped", name, strerror(-fd));
		evict(p, e);
		fd = -ENOENT;
	}
	pthread_mutex_unlock(&p->lock);
	return fd;
}

void promote_want(struct promote *p, const char *key, size_t key_len, const char *etag,
		  uint64_t size)
{
	char name[PROMOTE_NAME_LEN + 1];
	size_t etag_len;
	struct wish *wi;

	if (!p->thread_ok || !etag || !etag[0] || size == 0 || size > p->max_bytes / 2)
		return;
	promote_name(p->bucket, key, key_len, etag, name);
	pthread_mutex_lock(&p->lock);
	if (find(p, name) || (p->building && strcmp(p->building, name) == 0)) {
		pthread_mutex_unlock(&p->lock);
		return;
	}
	for (wi = p->q; wi; wi = wi->next)
		if (strcmp(wi->name, name) == 0)
			break;
	if (wi || p->nq >= PROMOTE_QUEUE_MAX) {
		if (!wi)
			PCNT(p, dropped, 1);
		pthread_mutex_unlock(&p->lock);
		return;
	}
	pthread_mutex_unlock(&p->lock);

	etag_len = strlen(etag);
	wi = xcalloc(1, sizeof(*wi) + key_len + etag_len + 2);
	memcpy(wi->name, name, sizeof(name));
	wi->size = size;
	wi->key_len = key_len;
	memcpy(wi->key, key, key_len);
	wi->etag = wi->key + key_len + 1;
	memcpy(wi->etag, etag, etag_len + 1);

	pthread_mutex_lock(&p->lock);
	if (p->stop || p->nq >= PROMOTE_QUEUE_MAX) {
		pthread_mutex_unlock(&p->lock);
		free(wi);
		return;
	}
	*p->q_tail = wi;
	p->q_tail = &wi->next;
	p->nq++;
	pthread_cond_signal(&p->work);
	pthread_mutex_unlock(&p->lock);
}

void promote_drain(struct promote *p)
{
	pthread_mutex_lock(&p->lock);
	while ((p->q || p->busy) && !p->stop)
		pthread_cond_wait(&p->idle, &p->lock);
	pthread_mutex_unlock(&p->lock);
}

void promote_get_stats(struct promote *p, struct promote_stats *o)
{
	memset(o, 0, sizeof(*o));
	o->promotions = __atomic_load_n(&p->st.promotions, __ATOMIC_RELAXED);
	o->promoted_bytes = __atomic_load_n(&p->st.promoted_bytes, __ATOMIC_RELAXED);
	o->not_cached = __atomic_load_n(&p->st.not_cached, __ATOMIC_RELAXED);
	o->failures = __atomic_load_n(&p->st.failures, __ATOMIC_RELAXED);
	o->dropped = __atomic_load_n(&p->st.dropped, __ATOMIC_RELAXED);
	o->evictions = __atomic_load_n(&p->st.evictions, __ATOMIC_RELAXED);
	pthread_mutex_lock(&p->lock);
	o->files = p->files;
	o->bytes = p->bytes;
	pthread_mutex_unlock(&p->lock);
	o->max_bytes = p->max_bytes;
}

static void promote_snapshot(void *obj, void *out)
{
	promote_get_stats(obj, out);
}

#define ROW_C(f, metric, labels, help) STATS_COUNTER(struct promote_stats, f, metric, labels, help)
#define ROW_G(f, metric, help) STATS_GAUGE(struct promote_stats, f, metric, "", help)
static const struct stats_field promote_fields[] = {
	ROW_C(promotions, "promotions_total", "",
	      "Objects copied from verified cache blocks into promoted files (passthrough)."),
	ROW_C(promoted_bytes, "promoted_written_bytes_total", "", "Bytes of those files."),
	ROW_C(not_cached, "promotions_skipped_total", "why=\"not_cached\"",
	      "Promotions not done, by why."),
	ROW_C(failures, "promotions_skipped_total", "why=\"error\"", ""),
	ROW_C(dropped, "promotions_skipped_total", "why=\"queue_full\"", ""),
	ROW_C(evictions, "promoted_evictions_total", "", "Promoted files removed to make room."),
	ROW_G(files, "promoted_files", "Promoted files now."),
	ROW_G(bytes, "promoted_bytes", "Bytes of promoted files now."),
	ROW_G(max_bytes, "promoted_capacity_bytes", "The bound on promoted files' bytes."),
};
#undef ROW_C
#undef ROW_G

const struct stats_group promote_stats_group = {
	.name = "promote",
	.fields = promote_fields,
	.n_fields = sizeof(promote_fields) / sizeof(promote_fields[0]),
	.snapshot_size = sizeof(struct promote_stats),
	.snapshot = promote_snapshot,
};
