/*
 * inode — the live-node table (see inode_i.h for the numbering rule).
 *
 * Two chained hash tables over the same nodes: by inode number (every FUSE
 * request) and by (path, type) (lookup and readdirplus find the node a name
 * already has). They grow together at load factor 1.
 */
#include "inode_i.h"

#include "feedfs/keep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define DIR_SEED 0x6469722f6469722fULL   /* distinct numbers for a dir and a file of one path */

uint64_t fs_ino_hash(const char *path, size_t len, int is_dir)
{
	return fs_hash64(path, len, is_dir ? DIR_SEED : 0);
}

static size_t ino_bucket(const struct fs_inodes *t, uint64_t ino)
{
	return (size_t)(ino * 0x9e3779b97f4a7c15ULL >> 7) & (t->cap - 1);
}

int fs_inodes_init(struct fs_inodes *t)
{
	memset(t, 0, sizeof(*t));
	t->cap = 1024;
	t->by_ino = calloc(t->cap, sizeof(*t->by_ino));
	t->by_path = calloc(t->cap, sizeof(*t->by_path));
	if (!t->by_ino || !t->by_path) {
		free(t->by_ino);
		free(t->by_path);
		return -ENOMEM;
	}
	t->bytes = 2 * t->cap * sizeof(*t->by_ino);
	return 0;
}

size_t fs_node_bytes(const struct fs_node *n)
{
	size_t b = sizeof(*n) + n->path_len + 1 + 16;

	if (n->etag_kind == FS_ETAG_STR)
		b += strlen(n->etag.u.str) + 1 + 16;
	return b;
}

static void node_free(struct fs_node *n)
{
	if (n->etag_kind == FS_ETAG_STR)
		free(n->etag.u.str);
	free(n);
}

static uint64_t node_hash(const struct fs_node *n)
{
	return fs_ino_hash(n->path, n->path_len, n->is_dir);
}

void fs_inodes_cleanup(struct fs_inodes *t)
{
	for (size_t i = 0; i < t->cap; i++) {
		struct fs_node *n = t->by_ino[i];

		while (n) {
			struct fs_node *next = n->ino_next;

			node_free(n);
			n = next;
		}
	}
	free(t->by_ino);
	free(t->by_path);
	memset(t, 0, sizeof(*t));
}

static struct fs_node *ino_find(const struct fs_inodes *t, uint64_t ino)
{
	struct fs_node *n = t->by_ino[ino_bucket(t, ino)];

	while (n && n->ino != ino)
		n = n->ino_next;
	return n;
}

static struct fs_node *node_add(struct fs_inodes *t, const char *path, size_t len, int is_dir,
				uint64_t forced_ino);

struct fs_node *fs_inodes_get(struct fs_inodes *t, uint64_t ino)
{
	struct fs_node *n = ino_find(t, ino);
	const char *path;
	size_t len;
	int is_dir;

	if (n)
		n->used = 1;
	if (n || !t->keep || !keep_find_node(t->keep, ino, &path, &len, &is_dir))
		return n;
	/* A number the previous server gave out (keep.h): the kernel holds a
	 * reference, so this process adopts it. The path may have a node of
	 * another number here already (a hash collision resolved the other
	 * way): then the number cannot be honoured. */
	if (fs_inodes_find(t, path, len, is_dir))
		return NULL;
	n = node_add(t, path, len, is_dir, ino);
	if (n)
		n->nlookup = 1;
	return n;
}

struct fs_node *fs_inodes_find(const struct fs_inodes *t, const char *path, size_t len,
			       int is_dir)
{
	uint64_t h = fs_ino_hash(path, len, is_dir);
	struct fs_node *n = t->by_path[h & (t->cap - 1)];

	for (; n; n = n->path_next) {
		if (n->path_len == len && n->is_dir == !!is_dir &&
		    memcmp(n->path, path, len) == 0)
			return n;
	}
	return NULL;
}

static void grow(struct fs_inodes *t)
{
	size_t ncap = t->cap * 2;
	struct fs_node **bi = calloc(ncap, sizeof(*bi));
	struct fs_node **bp = calloc(ncap, sizeof(*bp));
	struct fs_node *all = NULL;

	if (!bi || !bp) {     /* stay at the current size: slower, still correct */
		free(bi);
		free(bp);
		return;
	}
	for (size_t i = 0; i < t->cap; i++) {
		struct fs_node *n = t->by_ino[i];

		while (n) {
			struct fs_node *next = n->ino_next;

			n->ino_next = all;
			all = n;
			n = next;
		}
	}
	free(t->by_ino);
	free(t->by_path);
	t->by_ino = bi;
	t->by_path = bp;
	t->bytes += 2 * (ncap - t->cap) * sizeof(*bi);
	t->cap = ncap;
	while (all) {
		struct fs_node *next = all->ino_next;
		size_t b = ino_bucket(t, all->ino);

		all->ino_next = t->by_ino[b];
		t->by_ino[b] = all;
		b = node_hash(all) & (t->cap - 1);
		all->path_next = t->by_path[b];
		t->by_path[b] = all;
		all = next;
	}
}

struct fs_node *fs_inodes_add(struct fs_inodes *t, const char *path, size_t len, int is_dir)
{
	return node_add(t, path, len, is_dir, 0);
}

/* forced_ino: an adopted number (0: hash and probe, and log it). */
static struct fs_node *node_add(struct fs_inodes *t, const char *path, size_t len, int is_dir,
				uint64_t forced_ino)
{
	struct fs_node *n;
	uint64_t h;
	size_t b;

	if (len > FS_KEY_MAX)
		return NULL;            /* no key is that long: callers check first */
	if (t->count + 1 > t->cap)
		grow(t);
	n = calloc(1, sizeof(*n) + len + 1);
	if (!n)
		return NULL;
	memcpy(n->path, path, len);
	n->path[len] = '\0';
	n->path_len = (uint16_t)len;
	n->is_dir = !!is_dir;
	n->used = 1;
	h = fs_ino_hash(path, len, is_dir);
	if (len == 0 && is_dir) {
		n->ino = FS_ROOT_INO;
	} else if (forced_ino) {
		n->ino = forced_ino;
	} else {
		/* Probe past live numbers; 0 and the root's are reserved. */
		uint64_t ino = h;

		while (ino <= FS_ROOT_INO || ino_find(t, ino))
			ino++;
		n->ino = ino;
		if (t->keep)
			keep_log_node(t->keep, ino, path, len, is_dir);
	}
	b = ino_bucket(t, n->ino);
	n->ino_next = t->by_ino[b];
	t->by_ino[b] = n;
	b = h & (t->cap - 1);
	n->path_next = t->by_path[b];
	t->by_path[b] = n;
	t->count++;
	t->bytes += fs_node_bytes(n);
	return n;
}

struct fs_node *fs_inodes_get_path(struct fs_inodes *t, const char *path, size_t len,
				   int is_dir)
{
	struct fs_node *n = fs_inodes_find(t, path, len, is_dir);

	if (n)
		n->used = 1;
	return n ? n : fs_inodes_add(t, path, len, is_dir);
}

static void unlink_node(struct fs_inodes *t, struct fs_node *n)
{
	struct fs_node **pp = &t->by_ino[ino_bucket(t, n->ino)];

	while (*pp != n)
		pp = &(*pp)->ino_next;
	*pp = n->ino_next;
	pp = &t->by_path[node_hash(n) & (t->cap - 1)];
	while (*pp != n)
		pp = &(*pp)->path_next;
	*pp = n->path_next;
	t->count--;
	t->bytes -= fs_node_bytes(n);
}

int fs_inodes_forget(struct fs_inodes *t, struct fs_node *n, uint64_t nlookup)
{
	n->nlookup = nlookup >= n->nlookup ? 0 : n->nlookup - nlookup;
	if (n->nlookup || n->ino == FS_ROOT_INO)
		return 0;
	unlink_node(t, n);
	node_free(n);
	return 1;
}
