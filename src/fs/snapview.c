/*
 * snapview — a mount from a snapshot (--snapshot; snap.h): directory listings
 * and file attributes come from the snapshot file, never from the store.
 *
 * DESIGN
 * The rest of src/fs/ answers lookups, readdir and loader-order resolves
 * from complete listings in the listing cache (fs->lcache). In snapshot mode
 * a cache miss is not a LIST: fs_listing_cached (listing.c) asks
 * fs_snap_listing_locked, which builds the directory's listing from the
 * snapshot and installs it. The snapshot is sorted, so the keys of directory
 * P are one contiguous run starting at "P/": files are the keys with no
 * further '/', and each subdirectory N is the first key under "P/N/",
 * after which one binary search skips to "P/N0" ('0' follows '/'), past
 * everything below N. Building a listing thus costs the directory's own
 * entries plus a binary search per subdirectory, never the subtree; the
 * names go through fs_item_classify exactly as a delimited ListObjectsV2
 * page's would (hidden keys, markers, a directory shadowing a file).
 *
 * Memory: the snapshot is a mapping (page cache); the heap holds only the
 * listings of directories in use, inside the metadata share like any other
 * listing, and rebuilt (no request) when evicted or past --metadata-ttl.
 *
 * A path that is no directory of the snapshot gets an empty listing, so every
 * caller is answered from the cache and none falls through to the store;
 * fs.c, dir.c and resolve.c refuse their store paths in snapshot mode as a
 * second guard. Attributes of a node never go stale (the snapshot does not
 * change): node.c keeps them fresh, and a node with none yet (one adopted
 * after a takeover) gets them with fs_snap_node_attrs_locked.
 *
 * Reads: the node's ETag is the snapshot's, and every GET carries it as
 * If-Match (fs.c, prefetch), so an object replaced since the snapshot fails
 * its reads with ESTALE instead of serving other bytes.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/s3.h"
#include "feedfs/snap.h"
#include "feedfs/util.h"

#define TAG "fs"

/* Add the entry e (a key under dir prefix dp) to l; for a key below a
 * subdirectory, add the subdirectory and move c past its subtree. */
static void add_entry(struct fs *fs, struct fs_listing *l, struct snap_cursor *c,
		      const struct snap_entry *e, const char *dp, size_t dp_len)
{
	const char *rest = e->key + dp_len, *name = NULL, *slash;
	size_t rest_len = e->key_len - dp_len, name_len = 0, idx;
	enum fs_name_verdict why;
	enum fs_item_kind k;

	slash = memchr(rest, '/', rest_len);
	if (slash) {
		/* "dp N/...": the common prefix "dp N/" of a delimited listing. */
		char skip[SNAP_KEY_MAX + 2];
		size_t cp_len = (size_t)(slash - e->key) + 1;

		k = fs_item_classify(dp, dp_len, e->key, cp_len, 1, &name, &name_len, &why);
		if (k == FS_ITEM_DIR)
			fs_listing_add(l, name, name_len, 1, 0, 0, NULL, &idx);
		/* Everything under "dp N/" sorts before "dp N0". */
		memcpy(skip, e->key, cp_len);
		skip[cp_len - 1] = '/' + 1;
		snap_seek(c, c->s, skip, cp_len);
	} else {
		k = fs_item_classify(dp, dp_len, e->key, e->key_len, 0, &name, &name_len, &why);
		if (k == FS_ITEM_FILE)
			fs_listing_add(l, name, name_len, 0, e->size, e->mtime_ms, e->etag, &idx);
	}
	if (k == FS_ITEM_HIDDEN) {
		l->hidden++;
		log_debug(TAG, "hidden key in the snapshot under '%.*s' (%zu bytes): reason %d",
			  (int)dp_len, dp, e->key_len, (int)why);
	}
}

struct fs_listing *fs_snap_listing_locked(struct fs *fs, const char *path, size_t len,
					  int64_t now_ms)
{
	const char *rel;
	size_t rel_len;
	const struct fs_src *src = fs_src_of(fs, path, len, &rel, &rel_len);
	const struct snap *s = src ? src->snap : NULL;
	struct snap_cursor c;
	struct snap_entry e;
	struct fs_listing *l;
	char dp[SNAP_KEY_MAX + 2];
	size_t dp_len = rel_len;
	int r;

	/* Keys in the snapshot are relative to its source's prefix: the
	 * directory's run starts at its path inside the source, plus '/'. */
	if (!s || rel_len + 1 > SNAP_KEY_MAX)
		return NULL;
	memcpy(dp, rel, rel_len);
	if (rel_len)
		dp[dp_len++] = '/';
	dp[dp_len] = '\0';
	l = fs_listing_new(now_ms);
	if (!l)
		return NULL;
	snap_seek(&c, s, dp, dp_len);
	while ((r = snap_next(&c, &e)) == 1) {
		if (e.key_len < dp_len || memcmp(e.key, dp, dp_len) != 0)
			break;
		if (e.key_len == dp_len)
			continue;           /* the directory's own marker */
		add_entry(fs, l, &c, &e, dp, dp_len);
	}
	if (r < 0)
		log_err(TAG, "the snapshot does not decode under '%.*s'", (int)dp_len, dp);
	fs_listing_done(l);
	FS_STAT_INC(fs, snap_listings);
	if (l->hidden) {
		FS_STAT_ADD(fs, hidden, l->hidden);
		fs_listing_log_hidden(dp, l->hidden);
	}
	if (fs_lcache_put(&fs->lcache, path, len, l) < 0) {
		fs_listing_put(l);
		return NULL;
	}
	fs_listing_put(l);              /* the cache holds it now */
	if (fs->meta_max)
		fs_meta_trim_listings(fs);
	return fs_lcache_get(&fs->lcache, path, len, now_ms, INT64_MAX);
}

int fs_snap_node_attrs_locked(struct fs *fs, struct fs_node *n, int64_t now_ms)
{
	struct snap_cursor c;
	struct snap_entry e;
	struct s3_object o;
	const char *rel;
	size_t rel_len;
	const struct fs_src *src = fs_src_of(fs, n->path, n->path_len, &rel, &rel_len);

	if (n->is_dir)
		return 0;
	if (!src || !src->snap || !snap_find(&c, src->snap, rel, rel_len, &e))
		return -ENOENT;
	memset(&o, 0, sizeof(o));
	o.size = e.size;
	o.mtime_ms = e.mtime_ms;
	memcpy(o.etag, e.etag, sizeof(o.etag));
	fs_node_set_from_object(&fs->inodes, n, &o, now_ms);
	return 0;
}
