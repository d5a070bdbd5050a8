/*
 * names — bucket keys to POSIX names, and directory listings.
 *
 * DESIGN
 * A key is a path: segments split on '/'. A directory lists, for its prefix P,
 * the objects P+N (files) and the common prefixes P+N+"/" (directories), exactly
 * what a ListObjectsV2 with delimiter '/' returns. A segment that cannot be a
 * POSIX name hides the item (and so everything under it); it is counted, never
 * fatal. When the same name is both a file and a directory the directory wins
 * (it is the only way to reach the keys below it).
 *
 * Listings keep entries in arrival order so an entry's index is a stable readdir
 * offset for as long as a handle holds the listing; a name index (open
 * addressing, linear probing, never deleted from) gives O(1) de-duplication
 * across pages and O(1) lookups for the cache.
 */
#include "names_i.h"

#include "feedfs/fs.h"
#include "feedfs/hash.h"
#include "feedfs/s3.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Listings copy the ETag S3 sent into fs entries: one that fits s3's buffer must
 * fit ours, or a whole ETag would be cut and every If-Match would fail.
 * (cache/warm.c's WARM_ETAG_MAX is the third such limit.) */
_Static_assert(FS_ETAG_MAX == S3_ETAG_MAX, "FS_ETAG_MAX must equal S3_ETAG_MAX");

enum fs_name_verdict fs_name_check(const char *name, size_t len)
{
	if (len == 0)
		return FS_NAME_EMPTY;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return FS_NAME_DOT;
	if (memchr(name, '\0', len))
		return FS_NAME_NUL;
	if (len > FS_NAME_MAX)
		return FS_NAME_TOO_LONG;
	return FS_NAME_OK;
}

enum fs_item_kind fs_item_classify(const char *dir_prefix, size_t dir_prefix_len,
				   const char *item, size_t item_len, int is_prefix,
				   const char **name, size_t *name_len,
				   enum fs_name_verdict *verdict)
{
	const char *rest, *slash;
	size_t rest_len, seg_len;
	int is_dir;

	*verdict = FS_NAME_OK;
	/* The server answered for another prefix: nothing we can place. */
	if (item_len < dir_prefix_len || memcmp(item, dir_prefix, dir_prefix_len) != 0) {
		*verdict = FS_NAME_EMPTY;
		return FS_ITEM_HIDDEN;
	}
	rest = item + dir_prefix_len;
	rest_len = item_len - dir_prefix_len;
	if (rest_len == 0)
		return is_prefix ? (*verdict = FS_NAME_EMPTY, FS_ITEM_HIDDEN) : FS_ITEM_SELF;

	/* First segment; anything after a '/' makes it a directory (for a
	 * CommonPrefix the '/' is the last byte; an object "N/" is a marker). */
	slash = memchr(rest, '/', rest_len);
	seg_len = slash ? (size_t)(slash - rest) : rest_len;
	is_dir = slash != NULL || is_prefix;

	*verdict = fs_name_check(rest, seg_len);
	if (*verdict != FS_NAME_OK)
		return FS_ITEM_HIDDEN;
	*name = rest;
	*name_len = seg_len;
	return is_dir ? FS_ITEM_DIR : FS_ITEM_FILE;
}

/* a + b + c as one malloc'd NUL-terminated string of at most FS_KEY_MAX bytes. */
static int concat3(const char *a, size_t al, const char *b, size_t bl, const char *c,
		   size_t cl, char **out, size_t *out_len)
{
	size_t n;
	char *p;

	if (memchr(a, '\0', al) || memchr(b, '\0', bl) || memchr(c, '\0', cl))
		return -EINVAL;
	/* Each part alone is checked first, so the sum cannot wrap. */
	if (al > FS_KEY_MAX || bl > FS_KEY_MAX || cl > FS_KEY_MAX)
		return -ENAMETOOLONG;
	n = al + bl + cl;
	if (n > FS_KEY_MAX)
		return -ENAMETOOLONG;
	p = malloc(n + 1);
	if (!p)
		return -ENOMEM;
	memcpy(p, a, al);
	memcpy(p + al, b, bl);
	memcpy(p + al + bl, c, cl);
	p[n] = '\0';
	*out = p;
	*out_len = n;
	return 0;
}

int fs_key(const char *prefix, size_t prefix_len, const char *path, size_t path_len,
	   unsigned flags, char **key, size_t *key_len)
{
	/* The root's directory form is the prefix itself: "X/" never "X//". */
	int slash = (flags & FS_KEY_DIR) && path_len > 0;

	return concat3(prefix, prefix_len, path, path_len, "/", slash ? 1 : 0, key, key_len);
}

int fs_key_path(const char *prefix, size_t prefix_len, const char *key, size_t key_len,
		unsigned flags, const char **path, size_t *path_len)
{
	size_t n;

	if (key_len < prefix_len || memcmp(key, prefix, prefix_len) != 0)
		return -EINVAL;
	n = key_len - prefix_len;
	if ((flags & FS_KEY_DIR) && n > 0) {
		if (key[key_len - 1] != '/' || n == 1)
			return -EINVAL;
		n--;
	}
	*path = key + prefix_len;
	*path_len = n;
	return 0;
}

/* A name the mount cannot show, as the errno the builders answer. */
static int name_errno(enum fs_name_verdict v)
{
	return v == FS_NAME_OK ? 0 : v == FS_NAME_TOO_LONG ? -ENAMETOOLONG : -EINVAL;
}

int fs_key_for_path(const char *prefix, size_t prefix_len, const char *path, size_t path_len,
		    char **key, size_t *key_len)
{
	size_t s = 0;

	if (path_len == 0)
		return -EINVAL;
	for (size_t i = 0; i <= path_len; i++) {
		if (i < path_len && path[i] != '/')
			continue;
		int e = name_errno(fs_name_check(path + s, i - s));

		if (e < 0)
			return e;
		s = i + 1;
	}
	return fs_key(prefix, prefix_len, path, path_len, 0, key, key_len);
}

int fs_path_join(const char *dir, size_t dir_len, const char *name, size_t name_len,
		 char **path, size_t *path_len)
{
	int e = name_errno(fs_name_check(name, name_len));

	if (e < 0)
		return e;
	if (memchr(name, '/', name_len))
		return -EINVAL;
	return concat3(dir, dir_len, "/", dir_len ? 1 : 0, name, name_len, path, path_len);
}

uint64_t fs_hash64(const void *p, size_t n, uint64_t seed)
{
	return util_hash64(p, n, seed);
}

/* One more than each lowercase hex digit's value, 0 for any other byte: a
 * table, because a branch per digit mispredicts on random hex (this runs
 * twice per listed key). */
static const uint8_t hex_lower1[256] = {
	['0'] = 1, ['1'] = 2, ['2'] = 3, ['3'] = 4, ['4'] = 5, ['5'] = 6, ['6'] = 7,
	['7'] = 8, ['8'] = 9, ['9'] = 10, ['a'] = 11, ['b'] = 12, ['c'] = 13, ['d'] = 14,
	['e'] = 15, ['f'] = 16,
};

int fs_etag_md5(const char *s, uint8_t out[16])
{
	int ok = 1;

	if (strnlen(s, 35) != 34 || s[0] != '"' || s[33] != '"')
		return 0;
	/* Lowercase only: what comes back out must be the same text. */
	for (int i = 0; i < 16; i++) {
		unsigned hi = hex_lower1[(unsigned char)s[1 + 2 * i]];
		unsigned lo = hex_lower1[(unsigned char)s[2 + 2 * i]];

		ok &= (hi != 0) & (lo != 0);
		out[i] = (uint8_t)(((hi - 1) & 15) << 4 | ((lo - 1) & 15));
	}
	return ok;
}

void fs_etag_str(const struct fs_etag *e, uint8_t kind, char *dst)
{
	static const char hex[] = "0123456789abcdef";

	if (kind == FS_ETAG_MD5) {
		dst[0] = '"';
		for (int i = 0; i < 16; i++) {
			dst[1 + 2 * i] = hex[e->u.md5[i] >> 4];
			dst[2 + 2 * i] = hex[e->u.md5[i] & 15];
		}
		dst[33] = '"';
		dst[34] = '\0';
	} else if (kind == FS_ETAG_STR) {
		size_t n = strnlen(e->u.str, FS_ETAG_MAX - 1);

		memcpy(dst, e->u.str, n);
		dst[n] = '\0';
	} else {
		dst[0] = '\0';
	}
}

int fs_etag_eq(const struct fs_etag *e, uint8_t kind, const char *s)
{
	char buf[FS_ETAG_MAX];

	fs_etag_str(e, kind, buf);
	return strcmp(buf, s) == 0;
}

struct fs_chunk {
	struct fs_chunk *next;
	size_t cap, used;
	char data[];
};

#define FS_CHUNK_MIN 256
#define FS_CHUNK_MAX (64u << 10)

/* n bytes of l's arena that never move; NULL: -ENOMEM. Chunks double from
 * FS_CHUNK_MIN so that a small directory does not pay for a big chunk. */
static char *arena_alloc(struct fs_listing *l, size_t n)
{
	struct fs_chunk *c = l->chunks;

	if (!c || c->cap - c->used < n) {
		size_t cap = c ? c->cap * 2 : FS_CHUNK_MIN;

		if (cap > FS_CHUNK_MAX)
			cap = FS_CHUNK_MAX;
		if (cap < n)
			cap = n;
		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = l->chunks;
		l->chunks = c;
		l->arena_bytes += sizeof(*c) + cap;
	}
	c->used += n;
	return c->data + c->used - n;
}

struct fs_listing *fs_listing_new(int64_t now_ms)
{
	struct fs_listing *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->refs = 1;
	l->fetched_ms = now_ms;
	return l;
}

void fs_listing_get(struct fs_listing *l)
{
	__atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
}

void fs_listing_put(struct fs_listing *l)
{
	if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	while (l->chunks) {
		struct fs_chunk *c = l->chunks;

		l->chunks = c->next;
		free(c);
	}
	free(l->ents);
	free(l->index);
	free(l);
}

void fs_listing_done(struct fs_listing *l)
{
	/* Immutable from now on: give back the array's growth room. */
	if (l->n && l->n < l->cap) {
		struct fs_dirent *e = realloc(l->ents, l->n * sizeof(*e));

		if (e) {
			l->ents = e;
			l->cap = l->n;
		}
	}
	l->complete = 1;
}

/* Slot holding name, or the empty slot where it would go. */
static size_t index_slot(const struct fs_listing *l, const char *name, size_t len)
{
	size_t mask = l->index_cap - 1;
	size_t s = fs_hash64(name, len, 0) & mask;

	for (;;) {
		uint32_t v = l->index[s];
		const struct fs_dirent *e;

		if (v == 0)
			return s;
		e = &l->ents[v - 1];
		if (e->name_len == len && memcmp(e->name, name, len) == 0)
			return s;
		s = (s + 1) & mask;
	}
}

static int index_grow(struct fs_listing *l)
{
	size_t ncap = l->index_cap ? l->index_cap * 2 : 64;
	uint32_t *old = l->index;
	size_t ocap = l->index_cap;

	l->index = calloc(ncap, sizeof(*l->index));
	if (!l->index) {
		l->index = old;
		return -ENOMEM;
	}
	l->index_cap = ncap;
	for (size_t i = 0; i < ocap; i++) {
		if (old[i]) {
			const struct fs_dirent *e = &l->ents[old[i] - 1];

			l->index[index_slot(l, e->name, e->name_len)] = old[i];
		}
	}
	free(old);
	return 0;
}

long fs_listing_find(const struct fs_listing *l, const char *name, size_t len)
{
	uint32_t v;

	if (!l->index_cap)
		return -1;
	v = l->index[index_slot(l, name, len)];
	return v ? (long)v - 1 : -1;
}

enum fs_add_result fs_listing_add(struct fs_listing *l, const char *name, size_t len,
				  int is_dir, uint64_t size, int64_t mtime_ms,
				  const char *etag, size_t *idx)
{
	struct fs_dirent *e;
	size_t s;

	/* Keep the load factor under 1/2. */
	if ((l->n + 1) * 2 > l->index_cap && index_grow(l))
		return FS_ADD_NOMEM;
	s = index_slot(l, name, len);
	if (l->index[s]) {
		e = &l->ents[l->index[s] - 1];
		*idx = l->index[s] - 1;
		if (e->is_dir || !is_dir)
			return FS_ADD_DUP;
		/* dir shadows file: the entry keeps its index (offset). */
		e->is_dir = 1;
		e->size = 0;
		e->mtime_ms = 0;
		e->etag_kind = FS_ETAG_NONE;
		return FS_ADD_UPGRADED;
	}
	if (l->n == l->cap) {
		size_t ncap = l->cap ? l->cap * 2 : 32;
		struct fs_dirent *n = realloc(l->ents, ncap * sizeof(*n));

		if (!n)
			return FS_ADD_NOMEM;
		l->ents = n;
		l->cap = ncap;
	}
	e = &l->ents[l->n];
	memset(e, 0, sizeof(*e));
	e->name = arena_alloc(l, len + 1);
	if (!e->name)
		return FS_ADD_NOMEM;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	e->name_len = (uint32_t)len;
	e->is_dir = !!is_dir;
	if (!is_dir) {
		e->size = size;
		e->mtime_ms = mtime_ms;
		if (etag && etag[0]) {
			if (fs_etag_md5(etag, e->etag.u.md5)) {
				e->etag_kind = FS_ETAG_MD5;
			} else {
				size_t el = strnlen(etag, FS_ETAG_MAX - 1);

				e->etag.u.str = arena_alloc(l, el + 1);
				if (!e->etag.u.str)
					return FS_ADD_NOMEM;
				memcpy(e->etag.u.str, etag, el);
				e->etag.u.str[el] = '\0';
				e->etag_kind = FS_ETAG_STR;
			}
		}
	}
	*idx = l->n++;
	l->index[s] = (uint32_t)l->n;
	return FS_ADD_NEW;
}

size_t fs_listing_bytes(const struct fs_listing *l)
{
	/* Every allocation plus malloc's own header (~16 bytes) for each. */
	return sizeof(*l) + 16 + l->cap * sizeof(*l->ents) + 16 +
	       l->index_cap * sizeof(*l->index) + 16 + l->arena_bytes;
}

/* ---------- subtree: many listings from one flat key list ---------- */

static size_t tree_slot(const struct fs_tree *t, const char *path, size_t len, uint64_t h)
{
	size_t mask = t->index_cap - 1;

	for (size_t s = h & mask;; s = (s + 1) & mask) {
		uint32_t v = t->index[s];
		const struct fs_tree_dir *d;

		if (v == 0)
			return s;
		d = &t->dirs[v - 1];
		if (d->hash == h && d->path_len == len && memcmp(d->path, path, len) == 0)
			return s;
	}
}

static int tree_index_grow(struct fs_tree *t)
{
	size_t ncap = t->index_cap ? t->index_cap * 2 : 64;
	uint32_t *ni = calloc(ncap, sizeof(*ni));

	if (!ni)
		return -ENOMEM;
	free(t->index);
	t->index = ni;
	t->index_cap = ncap;
	for (size_t i = 0; i < t->n; i++) {
		const struct fs_tree_dir *d = &t->dirs[i];

		t->index[tree_slot(t, d->path, d->path_len, d->hash)] = (uint32_t)i + 1;
	}
	return 0;
}

/* The directory at path, created (with an empty listing) if new. NULL: -ENOMEM. */
static struct fs_tree_dir *tree_dir(struct fs_tree *t, const char *path, size_t len)
{
	uint64_t h = fs_hash64(path, len, 0x74726565);
	struct fs_tree_dir *d;
	size_t s;

	if ((t->n + 1) * 2 > t->index_cap && tree_index_grow(t) < 0)
		return NULL;
	s = tree_slot(t, path, len, h);
	if (t->index[s])
		return &t->dirs[t->index[s] - 1];
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 16;
		struct fs_tree_dir *nd = realloc(t->dirs, ncap * sizeof(*nd));

		if (!nd)
			return NULL;
		t->dirs = nd;
		t->cap = ncap;
	}
	d = &t->dirs[t->n];
	d->path = malloc(len + 1);
	d->l = fs_listing_new(t->fetched_ms);
	if (!d->path || !d->l) {
		free(d->path);
		fs_listing_put(d->l);
		return NULL;
	}
	memcpy(d->path, path, len);
	d->path[len] = '\0';
	d->path_len = len;
	d->hash = h;
	t->index[s] = (uint32_t)++t->n;
	return d;
}

int fs_tree_init(struct fs_tree *t, const char *path, size_t len, int64_t now_ms)
{
	memset(t, 0, sizeof(*t));
	t->fetched_ms = now_ms;
	if (!tree_dir(t, path, len)) {
		fs_tree_cleanup(t);
		return -ENOMEM;
	}
	return 0;
}

void fs_tree_cleanup(struct fs_tree *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->dirs[i].path);
		fs_listing_put(t->dirs[i].l);
	}
	free(t->dirs);
	free(t->index);
	free(t->scratch);
	memset(t, 0, sizeof(*t));
}

int fs_tree_add(struct fs_tree *t, const char *rel, size_t rel_len, uint64_t size,
		int64_t mtime_ms, const char *etag)
{
	size_t base = t->dirs[0].path_len, body_len, pos = 0, need, idx;
	struct fs_listing *cur = t->dirs[0].l;
	int marker;

	if (rel_len == 0)
		return 1;                   /* D's own marker: not an entry */
	t->keys++;
	marker = rel[rel_len - 1] == '/';
	body_len = marker ? rel_len - 1 : rel_len;

	/* scratch = D's path [+ '/'] + body: every directory on the way is a
	 * prefix of it, so its path needs no allocation. */
	need = base + 1 + body_len + 1;
	if (need > t->scratch_cap) {
		char *ns = realloc(t->scratch, need);

		if (!ns)
			return -ENOMEM;
		t->scratch = ns;
		t->scratch_cap = need;
	}
	memcpy(t->scratch, t->dirs[0].path, base);
	if (base)
		t->scratch[base++] = '/';
	memcpy(t->scratch + base, rel, body_len);

	for (;;) {
		const char *seg = rel + pos;
		const char *slash = memchr(seg, '/', body_len - pos);
		size_t seg_len = slash ? (size_t)(slash - seg) : body_len - pos;
		int last = slash == NULL;
		struct fs_tree_dir *d;

		if (fs_name_check(seg, seg_len) != FS_NAME_OK) {
			cur->hidden++;
			t->hidden++;
			return 0;
		}
		if (last && !marker) {
			if (fs_listing_add(cur, seg, seg_len, 0, size, mtime_ms, etag, &idx) ==
			    FS_ADD_NOMEM)
				return -ENOMEM;
			return 1;
		}
		if (fs_listing_add(cur, seg, seg_len, 1, 0, 0, NULL, &idx) == FS_ADD_NOMEM)
			return -ENOMEM;
		/* The directory "seg" is the first base + pos + seg_len bytes of scratch. */
		d = tree_dir(t, t->scratch, base + pos + seg_len);
		if (!d)
			return -ENOMEM;
		cur = d->l;
		if (last)
			return 1;
		pos += seg_len + 1;
	}
}

void fs_tree_finish(struct fs_tree *t)
{
	for (size_t i = 0; i < t->n; i++)
		fs_listing_done(t->dirs[i].l);
}

struct fs_listing *fs_tree_find(const struct fs_tree *t, const char *path, size_t len)
{
	uint32_t v;

	if (!t->index_cap)
		return NULL;
	v = t->index[tree_slot(t, path, len, fs_hash64(path, len, 0x74726565))];
	return v ? t->dirs[v - 1].l : NULL;
}

/* ---------- the listing cache ---------- */

struct fs_lcache_ent {
	struct fs_lcache_ent *next;             /* bucket chain */
	struct fs_lcache_ent *older, *newer;    /* install order (only with a listing) */
	struct fs_listing *l;                   /* one reference, or NULL */
	size_t bytes;                           /* charged for l */
	int64_t big_until_ms;
	uint64_t hash;
	size_t len;
	char path[];
};

int fs_lcache_init(struct fs_lcache *c, size_t max_bytes)
{
	memset(c, 0, sizeof(*c));
	c->b = calloc(1024, sizeof(*c->b));
	if (!c->b)
		return -ENOMEM;
	c->nb = 1024;
	c->max_bytes = max_bytes;
	return 0;
}

void fs_lcache_cleanup(struct fs_lcache *c)
{
	for (size_t i = 0; i < c->nb; i++) {
		while (c->b[i]) {
			struct fs_lcache_ent *e = c->b[i];

			c->b[i] = e->next;
			fs_listing_put(e->l);
			free(e);
		}
	}
	free(c->b);
	memset(c, 0, sizeof(*c));
}

static struct fs_lcache_ent **lc_slot(struct fs_lcache *c, const char *path, size_t len,
				      uint64_t h)
{
	struct fs_lcache_ent **pp = &c->b[h & (c->nb - 1)];

	while (*pp && !((*pp)->hash == h && (*pp)->len == len &&
			memcmp((*pp)->path, path, len) == 0))
		pp = &(*pp)->next;
	return pp;
}

static void lc_unlink_order(struct fs_lcache *c, struct fs_lcache_ent *e)
{
	if (e->older)
		e->older->newer = e->newer;
	else if (c->oldest == e)
		c->oldest = e->newer;
	if (e->newer)
		e->newer->older = e->older;
	else if (c->newest == e)
		c->newest = e->older;
	e->older = e->newer = NULL;
}

/* Drops e's listing (the entry stays while it carries a live "big" mark). */
static void lc_drop_listing(struct fs_lcache *c, struct fs_lcache_ent *e)
{
	if (!e->l)
		return;
	lc_unlink_order(c, e);
	fs_listing_put(e->l);
	e->l = NULL;
	c->bytes -= e->bytes;
	e->bytes = 0;
}

static void lc_remove(struct fs_lcache *c, struct fs_lcache_ent **pp)
{
	struct fs_lcache_ent *e = *pp;

	lc_drop_listing(c, e);
	*pp = e->next;
	c->count--;
	free(e);
}

static void lc_grow(struct fs_lcache *c)
{
	size_t nnb = c->nb * 2;
	struct fs_lcache_ent **nb = calloc(nnb, sizeof(*nb));

	if (!nb)
		return;             /* longer chains: slower, still correct */
	for (size_t i = 0; i < c->nb; i++) {
		while (c->b[i]) {
			struct fs_lcache_ent *e = c->b[i];

			c->b[i] = e->next;
			e->next = nb[e->hash & (nnb - 1)];
			nb[e->hash & (nnb - 1)] = e;
		}
	}
	free(c->b);
	c->b = nb;
	c->nb = nnb;
}

static struct fs_lcache_ent *lc_get_or_add(struct fs_lcache *c, const char *path, size_t len)
{
	uint64_t h = fs_hash64(path, len, 0x6c636163);
	struct fs_lcache_ent **pp = lc_slot(c, path, len, h), *e;

	if (*pp)
		return *pp;
	if (c->count + 1 > c->nb) {
		lc_grow(c);
		pp = lc_slot(c, path, len, h);
	}
	e = calloc(1, sizeof(*e) + len);
	if (!e)
		return NULL;
	e->hash = h;
	e->len = len;
	memcpy(e->path, path, len);
	*pp = e;
	c->count++;
	return e;
}

struct fs_listing *fs_lcache_get(struct fs_lcache *c, const char *path, size_t len,
				 int64_t now_ms, int64_t ttl_ms)
{
	uint64_t h = fs_hash64(path, len, 0x6c636163);
	struct fs_lcache_ent **pp = lc_slot(c, path, len, h), *e = *pp;

	if (!e || !e->l)
		return NULL;
	if (e->l->complete && now_ms - e->l->fetched_ms < ttl_ms) {
		/* Least recently used goes first: the parent of a walk, asked
		 * at every step down, stays while its children come and go. */
		if (c->newest != e) {
			lc_unlink_order(c, e);
			e->older = c->newest;
			c->newest->newer = e;
			c->newest = e;
		}
		return e->l;
	}
	lc_drop_listing(c, e);
	if (e->big_until_ms <= now_ms)
		lc_remove(c, pp);
	return NULL;
}

int fs_lcache_put(struct fs_lcache *c, const char *path, size_t len, struct fs_listing *l)
{
	struct fs_lcache_ent *e = lc_get_or_add(c, path, len);

	if (!e)
		return -ENOMEM;
	lc_drop_listing(c, e);
	fs_listing_get(l);
	e->l = l;
	e->bytes = fs_listing_bytes(l) + sizeof(*e) + len;
	c->bytes += e->bytes;
	e->older = c->newest;
	if (c->newest)
		c->newest->newer = e;
	else
		c->oldest = e;
	c->newest = e;
	fs_lcache_trim(c, c->max_bytes);
	return 0;
}

void fs_lcache_trim(struct fs_lcache *c, size_t max_bytes)
{
	/* Oldest first; a listing bigger than the whole bound is still kept
	 * alone (the directory being read needs it). */
	while (c->bytes > max_bytes && c->oldest && c->oldest != c->newest) {
		struct fs_lcache_ent *o = c->oldest;

		c->evictions++;
		lc_drop_listing(c, o);
		if (!o->big_until_ms)
			lc_remove(c, lc_slot(c, o->path, o->len, o->hash));
	}
}

int fs_lcache_mark_big(struct fs_lcache *c, const char *path, size_t len, int64_t until_ms)
{
	struct fs_lcache_ent *e = lc_get_or_add(c, path, len);

	if (!e)
		return -ENOMEM;
	e->big_until_ms = until_ms;
	return 0;
}

int fs_lcache_is_big(struct fs_lcache *c, const char *path, size_t len, int64_t now_ms)
{
	uint64_t h = fs_hash64(path, len, 0x6c636163);
	struct fs_lcache_ent **pp = lc_slot(c, path, len, h), *e = *pp;

	if (!e || !e->big_until_ms)
		return 0;
	if (e->big_until_ms > now_ms)
		return 1;
	e->big_until_ms = 0;
	if (!e->l)
		lc_remove(c, pp);
	return 0;
}
