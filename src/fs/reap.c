/*
 * reap — metadata inside its share of --max-memory.
 *
 * DESIGN
 * Metadata is two things: listings (fs->lcache: what the store said a
 * directory holds) and nodes (fs->inodes: what the kernel holds a lookup
 * count on). Both are counted in bytes (fs_listing_bytes, fs_node_bytes and
 * the tables) against fs->meta_max, a share of --max-memory (daemon.c).
 *
 * Listings are what the kernel does not hold: they go first. An install
 * trims the cache, oldest first, to what the nodes leave of the share
 * (listing.c fs_listing_install), and the reaper trims it again when nodes
 * grow. A dropped listing costs one LIST when the directory is needed again.
 *
 * Nodes cannot simply be freed: the kernel names them by number and would
 * get ESTALE. So when the nodes alone exceed FS_META_NODES_HIGH of the
 * share, this thread asks the kernel to forget cold ones: it picks nodes by
 * CLOCK (the `used` bit, set by every request that touches a node, spares a
 * node once and is cleared as the hand passes), never the root nor a file
 * with an open handle nor a directory whose readdir the kernel caches within
 * the TTL (its next walk would list again), files before directories, and
 * sends fuse_lowlevel_notify_inval_entry(parent,
 * name) for each. The kernel drops the dentry; an inode nothing else holds
 * is evicted and FORGET frees the node here (fs.c). What the kernel still
 * holds (a cwd, an mmap) it keeps, and so do we. A dropped entry comes back
 * by lookup: from the cached listing (no request), or one LIST of its
 * directory (fs.c do_lookup) — the same answer, never a wrong one; it gets
 * its old inode number back (numbers are a hash of the path, inode_i.h).
 *
 * Why a thread: an invalidation takes the parent directory's lock in the
 * kernel, which a lookup in it may hold while it waits for a FUSE worker;
 * a worker that invalidated could wait on itself. This thread holds no lock
 * while it notifies, and no request waits for it.
 *
 * Locks: fs->lock while choosing, never while notifying; fs->reap_mu guards
 * the thread's start, stop and wake-ups, never held with fs->lock.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "fs"
#define REAP_BATCH 1024            /* invalidations per pass */
#define REAP_VISIT 8192            /* nodes looked at per pass: fs->lock is held
				    * that long (~100 us), lookups wait behind it */
#define REAP_IDLE_MS 250           /* passes while under the share: just a look */

struct reap_pick {
	fuse_ino_t parent;
	uint16_t len;
	char name[FS_NAME_MAX + 1];
};

size_t fs_meta_bytes(const struct fs *fs)
{
	return fs->inodes.bytes + fs->lcache.bytes;
}

/* Listings while the whole is over the share (fs->lock held). */
void fs_meta_trim_listings(struct fs *fs)
{
	size_t nodes = fs->inodes.bytes;
	size_t room = nodes < fs->meta_max ? fs->meta_max - nodes : 0;

	fs_lcache_trim(&fs->lcache, room);
}

/* Choose up to max cold nodes (fs->lock held); returns how many. Files
 * first: a directory's node carries what its listing and the kernel's
 * readdir cache are keyed by (dir.c), and invalidating it drops everything
 * below it; directories only when a whole sweep found no file to drop. */
static size_t pick_locked(struct fs *fs, struct reap_pick *p, size_t max, size_t want_bytes,
			  int dirs)
{
	struct fs_inodes *t = &fs->inodes;
	size_t n = 0, freed = 0, seen = 0, limit = REAP_VISIT;
	int64_t now = util_now_ms();

	while (n < max && freed < want_bytes && seen < limit) {
		struct fs_node *x = t->by_ino[t->hand];

		t->hand = (t->hand + 1) & (t->cap - 1);
		seen++;                           /* an empty bucket costs too */
		for (; x && n < max; x = x->ino_next, seen++) {
			const char *slash, *name;
			struct fs_node *parent;
			size_t plen, nlen;

			if (x->ino == FS_ROOT_INO || x->opens || (x->is_dir && !dirs))
				continue;
			/* A directory the kernel caches a readdir of (dir.c): dropping it
			 * would cost the next walk a LIST and its readdirs. */
			if (x->is_dir && x->rdc_ms && now - x->rdc_ms < fs->opts.metadata_ttl_ms)
				continue;
			if (x->used) {
				x->used = 0;          /* spared once: touched since */
				continue;
			}
			slash = memrchr(x->path, '/', x->path_len);
			plen = slash ? (size_t)(slash - x->path) : 0;
			name = slash ? slash + 1 : x->path;
			nlen = x->path_len - (size_t)(name - x->path);
			parent = fs_inodes_find(t, x->path, plen, 1);
			if (!parent || nlen > FS_NAME_MAX)
				continue;
			p[n].parent = parent->ino;
			p[n].len = (uint16_t)nlen;
			memcpy(p[n].name, name, nlen);
			p[n].name[nlen] = '\0';
			n++;
			freed += fs_node_bytes(x);
			/* Not again next pass unless it is still here by then. */
			x->used = 1;
		}
	}
	return n;
}

static void *reap_main(void *arg)
{
	struct fs *fs = arg;
	struct reap_pick *picks = calloc(REAP_BATCH, sizeof(*picks));
	size_t dry = 0;                     /* passes in a row that found nothing */
	int more = 0;

	if (!picks) {
		log_warn(TAG, "metadata reaper: out of memory; metadata is not bounded");
		return NULL;
	}
	pthread_mutex_lock(&fs->reap_mu);
	while (!fs->reap_stop) {
		size_t n = 0, nodes, high, low, passes;

		/* While over, passes follow each other without the idle wait (the
		 * lock is let go between them). */
		if (!more)
			util_cond_wait_ms(&fs->reap_cond, &fs->reap_mu, REAP_IDLE_MS);
		if (fs->reap_stop)
			break;
		pthread_mutex_unlock(&fs->reap_mu);

		pthread_mutex_lock(&fs->lock);
		fs_meta_trim_listings(fs);
		nodes = fs->inodes.bytes;
		high = fs->meta_max / 100 * FS_META_NODES_HIGH;
		low = fs->meta_max / 100 * FS_META_NODES_LOW;
		/* Passes that see every node once: after that many without a file
		 * to drop, directories may go too; after twice that, rest. */
		passes = (fs->inodes.count + fs->inodes.cap) / REAP_VISIT + 1;
		if (nodes > high) {
			n = pick_locked(fs, picks, REAP_BATCH, nodes - low, dry >= passes);
			dry = n ? 0 : dry + 1;
		} else {
			dry = 0;
		}
		pthread_mutex_unlock(&fs->lock);
		more = nodes > high && dry < 2 * passes;

		for (size_t i = 0; i < n; i++) {
			int r = fuse_lowlevel_notify_inval_entry(fs->se, picks[i].parent,
								 picks[i].name, picks[i].len);

			if (r == 0)
				FS_STAT_INC(fs, meta_invals);
			else if (r == -ENOTCONN || r == -ENODEV)
				break;                  /* unmounting */
		}
		pthread_mutex_lock(&fs->reap_mu);
	}
	pthread_mutex_unlock(&fs->reap_mu);
	free(picks);
	return NULL;
}

void fs_reap_start(struct fs *fs)
{
	pthread_mutex_lock(&fs->reap_mu);
	if (!fs->reap_running && fs->se && fs->meta_max &&
	    pthread_create(&fs->reap_thread, NULL, reap_main, fs) == 0)
		fs->reap_running = 1;
	pthread_mutex_unlock(&fs->reap_mu);
}

void fs_stop(struct fs *fs)
{
	int running;

	if (!fs)
		return;
	pthread_mutex_lock(&fs->reap_mu);
	fs->reap_stop = 1;
	running = fs->reap_running;
	fs->reap_running = 0;
	pthread_cond_signal(&fs->reap_cond);
	pthread_mutex_unlock(&fs->reap_mu);
	if (running)
		pthread_join(fs->reap_thread, NULL);
	fs_list_ahead_stop(fs);
	fs_pt_stop(fs);                     /* before the session's fd goes */
}
