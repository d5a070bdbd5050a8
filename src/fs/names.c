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

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

uint64_t fs_hash64(const void *p, size_t n, uint64_t seed)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ULL ^ seed;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	/* splitmix64 finaliser: FNV's low bits are weak for table indexing. */
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	h ^= h >> 31;
	return h;
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
	for (size_t i = 0; i < l->n; i++)
		free(l->ents[i].name);
	free(l->ents);
	free(l->index);
	free(l);
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
		e->etag[0] = '\0';
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
	e->name = malloc(len + 1);
	if (!e->name)
		return FS_ADD_NOMEM;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	e->name_len = (uint32_t)len;
	e->is_dir = !!is_dir;
	if (!is_dir) {
		e->size = size;
		e->mtime_ms = mtime_ms;
		if (etag) {
			size_t el = strnlen(etag, FS_ETAG_MAX - 1);

			memcpy(e->etag, etag, el);
			e->etag[el] = '\0';
		}
	}
	*idx = l->n++;
	l->index[s] = (uint32_t)l->n;
	return FS_ADD_NEW;
}
