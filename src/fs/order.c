/*
 * order.c — the listing-order detector that drives readahead across files.
 *
 * A loader that walks a dataset opens the files of a directory in the order
 * readdir gave them, several at a time (so slightly out of order). A shuffled
 * loader jumps around. For each recently opened-in directory (a small table
 * keyed by the directory's path hash; a collision just restarts detection) we
 * keep the furthest listing index opened and a streak of opens that landed
 * within FS_ORDER_NEAR entries of it. After FS_ORDER_STREAK such opens in a
 * row, each open asks the ahead module for the files up to FS_ORDER_AHEAD
 * entries past the furthest one, each once. A jump resets the streak, so a
 * shuffled loader wants nothing and no bandwidth is wasted on it.
 * Only directories whose complete listing is cached take part (a loader lists
 * before it reads); the entries and their ETags come from that listing.
 * Files promoted for passthrough are not wanted: the kernel reads them from
 * their promoted file, so bytes fetched ahead for them would only be dropped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/ahead.h"
#include "feedfs/promote.h"
#include "feedfs/util.h"
#include "fs_i.h"

#define FS_ORDER_NEAR 16       /* entries either side of the furthest open */
#define FS_ORDER_STREAK 4      /* in-order opens before readahead starts */
#define FS_ORDER_AHEAD 32      /* files wanted past the furthest open */

struct fs_order_want {
	char *key;
	size_t key_len;
	char etag[FS_ETAG_MAX];
	uint64_t size;
	long idx;
};

/* The directory's slot key; 0 marks a free slot. */
static uint64_t path_hash(const char *p, size_t n)
{
	return fs_hash64(p, n, 0) | 1;
}

/* Under fs->lock: classify the open of `idx` in directory slot d; returns the
 * range of listing indexes to want, [*from, *to), possibly empty. */
static void order_step(struct fs_order_dir *d, uint64_t h, long idx, long n, long *from,
		       long *to)
{
	*from = *to = 0;
	if (d->hash != h) {
		d->hash = h;
		d->top = d->wanted = idx;
		d->streak = 0;
		return;
	}
	if (idx > d->top - FS_ORDER_NEAR && idx <= d->top + FS_ORDER_NEAR) {
		d->streak++;
	} else {
		d->streak = 0;
		d->wanted = idx;
	}
	if (idx > d->top)
		d->top = idx;
	if (d->wanted < d->top)
		d->wanted = d->top;
	if (d->streak < FS_ORDER_STREAK)
		return;
	*from = d->wanted + 1;
	*to = d->top + 1 + FS_ORDER_AHEAD < n ? d->top + 1 + FS_ORDER_AHEAD : n;
}

void fs_order_opened(struct fs *fs, fuse_ino_t ino)
{
	struct fs_order_want w[FS_ORDER_AHEAD];
	uint64_t max_size, h = 0;
	int nw = 0, i, pt;
	long from, to, last = -1;

	if (!fs->opts.ahead)
		return;
	max_size = rd_ahead_max_file_size(fs->opts.ahead);
	pthread_mutex_lock(&fs->lock);
	{
		struct fs_node *n = fs_inodes_get(&fs->inodes, ino);
		const char *slash, *name;
		struct fs_listing *l;
		size_t dlen, nlen;
		long idx;

		if (!n || n->is_dir)
			goto out;
		slash = memrchr(n->path, '/', n->path_len);
		dlen = slash ? (size_t)(slash - n->path) : 0;
		name = slash ? slash + 1 : n->path;
		nlen = n->path_len - (size_t)(name - n->path);
		l = fs_listing_cached(fs, n->path, dlen, util_now_ms());
		if (!l)
			goto out;
		idx = fs_listing_find(l, name, nlen);
		if (idx < 0)
			goto out;
		h = path_hash(n->path, dlen);
		order_step(&fs->order[h % FS_ORDER_DIRS], h, idx, (long)l->n, &from, &to);
		for (long j = from; j < to && nw < FS_ORDER_AHEAD; j++) {
			const struct fs_dirent *e = &l->ents[j];
			struct fs_order_want *x = &w[nw];
			char *path;
			size_t pl;
			int r;

			if (e->is_dir || e->size == 0 || e->size > max_size || !e->etag_kind)
				continue;
			r = fs_path_join(n->path, dlen, e->name, e->name_len, &path, &pl);
			if (r == 0) {
				r = fs_path_key(fs, path, pl, 0, &x->key, &x->key_len);
				free(path);
			}
			if (r == -ENOMEM)
				break;
			if (r < 0)
				continue;       /* a key no store can hold: nothing to want */
			fs_dirent_etag(e, x->etag);
			x->size = e->size;
			x->idx = j;
			nw++;
		}
	}
out:
	pthread_mutex_unlock(&fs->lock);
	if (!nw)
		return;
	/* Outside fs->lock: want takes the budget's and the fetcher's locks. Stop
	 * at the first file refused for lack of room; the next open asks again.
	 * A promoted file is skipped (counted as wanted): its open will be passed
	 * through and never claim bytes fetched for it. */
	pt = fs_pt_active(fs);
	for (i = 0; i < nw; i++) {
		if (!(pt && promote_has(fs->promote, w[i].key, w[i].key_len, w[i].etag,
					w[i].size)) &&
		    !rd_ahead_want(fs->opts.ahead, w[i].key, w[i].key_len, w[i].etag, w[i].size))
			break;
		last = w[i].idx;
	}
	for (i = 0; i < nw; i++)
		free(w[i].key);
	if (last < 0)
		return;
	pthread_mutex_lock(&fs->lock);
	{
		struct fs_order_dir *d = &fs->order[h % FS_ORDER_DIRS];

		if (d->hash == h && last > d->wanted)
			d->wanted = last;
	}
	pthread_mutex_unlock(&fs->lock);
}
