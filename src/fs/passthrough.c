/*
 * passthrough — reads of promoted objects served by the kernel from the
 * local file (FUSE passthrough, Linux 6.9+), with no READ reaching us.
 *
 * DESIGN
 * Negotiation: libfuse 3.14 knows nothing of passthrough, so the reply seam
 * of dirops.c (fuse_session_custom_io) sets FUSE_PASSTHROUGH (flags2 bit 5,
 * with FUSE_INIT_EXT) and max_stack_depth 1 in the INIT reply, when the
 * option is on and the kernel's protocol minor is 40 or more (op_init sees
 * it in conn->proto_minor; libfuse's capable bits end at 32). A successor
 * under the keeper replays the same INIT through the same seam, so it
 * agrees with the kernel. Whether the kernel took it shows at the first
 * FUSE_DEV_IOC_BACKING_OPEN: EPERM (not negotiated, not root) or ELOOP (the
 * cache dir is itself on a stacked filesystem) turns passthrough off for the
 * life of the process, with one log line; the open goes the normal way.
 *
 * Opens: do_open asks fs_pt_open with the ETag it just made current (the
 * same HEAD/TTL rule as every open). A promoted file of exactly (key, ETag,
 * size) is registered with the kernel (a backing id) and the reply is
 * patched: the open handler stores the id in a thread-local right before
 * fuse_reply_open, and the seam's writev, in the same thread, finds the
 * OPEN reply (out header + 16 bytes) and sets FOPEN_PASSTHROUGH and
 * backing_id. Nothing else in libfuse writes in between.
 *
 * The kernel's io modes (fs/fuse/iomode.c) are a per-inode contract: a node
 * is open either for passthrough (all on one backing file) or for cached io,
 * never both, and a reply that breaks it fails the user's open() with EIO.
 * So this file keeps, per node, the count of handles of each kind, the
 * backing id and the ETag it was opened with (table under pt->lock):
 *  - a node with passthrough handles gets passthrough again, same id, when
 *    the ETag is unchanged; when the object changed meanwhile the open fails
 *    ESTALE (it could only get the old bytes) until those handles close;
 *  - a node with normal handles gets a normal one (no promoted file is
 *    looked at), so a promotion that lands while a file is open waits for
 *    the next open after the last close; an O_DIRECT open starts no
 *    passthrough (the backing file's alignment rules would apply);
 *  - the last passthrough handle's release keeps the backing id, idle, for
 *    the next open of the node (below); the kernel keeps the file for
 *    handles still using it either way.
 * Our counts can only lag the kernel's (it drops its count before sending
 * RELEASE), which errs toward a normal open: never EIO.
 * Under a keeper each handle's backing id is in its slot (keep.h), and a
 * successor rebuilds the table from the slots before serving.
 *
 * Kept ids. Registering costs an openat, a FUSE_DEV_IOC_BACKING_OPEN and,
 * at the last release, a BACKING_CLOSE: three syscalls of the daemon on
 * every open of a small file, each epoch. So an idle id (no handle uses it)
 * stays registered, on an LRU of at most PT_IDLE_MAX ids, with the promoted
 * file's name and size. An open reuses it only when the name computed from
 * the (key, ETag) this open just made current (the same HEAD/TTL rule), and
 * the size, are the ones the id was registered for, and the promote table
 * still lists that file (promote_touch, which also keeps it recent). The
 * name is the cache's identity of (bucket, key, ETag) and a promoted file is
 * only ever renamed into place complete, never written after: the id's file
 * holds exactly the bytes of that version, as a fresh promote_open would.
 * Any other open of the node closes the idle id first. Ids are closed when
 * the LRU is over its bound (oldest first), when an open finds another
 * ETag, when the promote table evicts the file (its hook, so that an
 * unlinked file does not keep its disk space; a file in use is closed at
 * its last release instead), and at unmount (the kernel drops every id of
 * the connection). Under a keeper, ids belong to the connection and outlive
 * a crashed server: each idle id has a keep slot of its own (KEEP_IDLE: the
 * node, the size, the promoted name, the id), taken when it goes idle and
 * freed when it leaves the LRU, so a successor adopts the idle ids as they
 * were (fs_pt_init) instead of leaking them; with no free slot the id is
 * closed. The slots come out of the KEEP_SLOTS handles: at most PT_IDLE_MAX.
 *
 * Lock order: promote's hook lock (the eviction hook), pt->lock, then the
 * promote table's lock (a leaf, inside promote_open and promote_touch);
 * fs->lock is never taken under pt->lock. pt->lock is held across one
 * openat and one ioctl on first use of a node, so that two opens of one
 * node cannot register two backing files.
 */
#include "fs_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/fuse_passthrough.h"
#include "feedfs/keep.h"
#include "feedfs/log.h"
#include "feedfs/promote.h"

#define TAG "fs"
#define PT_BUCKETS 1024u
#define PT_IDLE_MAX 8192u           /* idle backing ids kept ($FEEDFS_PT_IDLE_MAX) */

struct pt_node {
	struct pt_node *next;
	uint64_t ino;
	uint32_t normal;            /* handles open the normal way */
	uint32_t passed;            /* handles open for passthrough */
	int32_t backing;            /* > 0 while passed > 0, or idle (on the LRU) */
	int evicted;                /* the promoted file was evicted: no idle keeping */
	uint64_t size;              /* of the backing file */
	char name[PROMOTE_NAME_LEN + 1];    /* the promoted file the id holds */
	char etag[FS_ETAG_MAX];     /* what the passthrough handles read */
	struct pt_node *iprev, *inext;      /* the idle LRU (inext: older) */
	uint64_t slot;              /* idle under a keeper: its KEEP_IDLE slot */
};

struct fs_pt {
	pthread_mutex_t lock;       /* see DESIGN */
	struct pt_node *b[PT_BUCKETS];
	struct pt_node idle;        /* LRU sentinel: idle.inext is the newest */
	unsigned nidle, idle_max;   /* idle_max 0: ids are closed at last release */
	atomic_int off;             /* the kernel refused: no new passthrough */
};

static atomic_int pt_offered;       /* op_init: the kernel speaks 7.40+ */
static atomic_int pt_wanted;        /* the option (fs_pt_init) */
static atomic_int pt_negotiated;    /* the INIT reply carried the flag */
static __thread int32_t reply_backing;  /* for the OPEN reply this thread sends */

void fs_pt_offered(int offered)
{
	atomic_store(&pt_offered, offered);
}

int fs_pt_init_reply(void *init_out, size_t len)
{
	struct fuse_pt_init_out *o = init_out;

	if (!atomic_load(&pt_wanted) || !atomic_load(&pt_offered) ||
	    len < offsetof(struct fuse_pt_init_out, unused))
		return 0;
	if (o->flags & (1u << 16))          /* FUSE_WRITEBACK_CACHE: the kernel says no */
		return 0;
	o->flags |= FUSE_PT_INIT_EXT;
	o->flags2 |= FUSE_PT_FLAGS2_PASSTHROUGH;
	/* 1: the backing files must not be on a stacked filesystem, and the
	 * mount itself may still be a layer of one (2 would forbid that). */
	o->max_stack_depth = 1;
	atomic_store(&pt_negotiated, 1);
	log_debug(TAG, "init: passthrough asked for in the reply");
	return 1;
}

int fs_pt_open_reply(const struct iovec *iov, int count, void *copy)
{
	int32_t id = reply_backing;
	struct fuse_pt_open_out *o = copy;

	if (id <= 0 || count != 2 || iov[1].iov_len != sizeof(*o))
		return 0;
	reply_backing = 0;
	memcpy(o, iov[1].iov_base, sizeof(*o));
	/* The kernel refuses (EIO to the user) any flag outside passthrough,
	 * direct io and noflush: keep_cache would be such a flag. */
	o->open_flags &= ~FUSE_PT_FOPEN_KEEP_CACHE;
	o->open_flags |= FUSE_PT_FOPEN_PASSTHROUGH;
	o->backing_id = id;
	return 1;
}

void fs_pt_reply_begin(int32_t backing)
{
	reply_backing = backing;
}

void fs_pt_reply_end(void)
{
	reply_backing = 0;
}

int fs_pt_active(const struct fs *fs)
{
	return fs->pt && fs->promote && atomic_load(&pt_negotiated) &&
	       !atomic_load(&fs->pt->off);
}

static struct pt_node **slot_of(struct fs_pt *pt, uint64_t ino)
{
	struct pt_node **pp = &pt->b[ino % PT_BUCKETS];

	while (*pp && (*pp)->ino != ino)
		pp = &(*pp)->next;
	return pp;
}

static struct pt_node *node_get(struct fs_pt *pt, uint64_t ino)
{
	struct pt_node **pp = slot_of(pt, ino);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (*pp)
			(*pp)->ino = ino;
	}
	return *pp;
}

static void node_put(struct fs_pt *pt, uint64_t ino)
{
	struct pt_node **pp = slot_of(pt, ino), *n = *pp;

	if (n && !n->normal && !n->passed && n->backing <= 0) {
		*pp = n->next;
		free(n);
	}
}

static void idle_link(struct fs_pt *pt, struct pt_node *n)
{
	n->iprev = &pt->idle;
	n->inext = pt->idle.inext;
	pt->idle.inext->iprev = n;
	pt->idle.inext = n;
	pt->nidle++;
}

/* n's id goes idle: 0, or -ENFILE (no keep slot for it: close it). */
static int idle_add(struct fs *fs, struct pt_node *n)
{
	if (fs->keep) {
		int64_t slot = keep_handle_open(fs->keep, KEEP_IDLE, n->ino, n->size, n->name);

		if (slot < 0)
			return (int)slot;
		keep_handle_set_backing(fs->keep, (uint64_t)slot, n->backing);
		n->slot = (uint64_t)slot;
	}
	idle_link(fs->pt, n);
	return 0;
}

static void idle_del(struct fs *fs, struct pt_node *n)
{
	struct fs_pt *pt = fs->pt;

	n->iprev->inext = n->inext;
	n->inext->iprev = n->iprev;
	n->iprev = n->inext = NULL;
	pt->nidle--;
	if (n->slot) {
		keep_handle_close(fs->keep, n->slot);
		n->slot = 0;
	}
}

/* Drop a registered id; pt->lock held, so that no open of the node can be
 * handed the id between our decision and the kernel forgetting it. */
static void backing_close(struct fs *fs, int32_t backing)
{
	uint32_t id = (uint32_t)backing;

	FS_STAT_INC(fs, pt_backing_closes);
	if (ioctl(fuse_session_fd(fs->se), FUSE_PT_DEV_IOC_BACKING_CLOSE, &id) < 0)
		log_debug(TAG, "passthrough: closing backing id %u: %s", id, strerror(errno));
}

/* n's idle id closed and n freed when nothing else holds it; pt->lock. */
static void idle_close(struct fs *fs, struct pt_node *n)
{
	idle_del(fs, n);
	backing_close(fs, n->backing);
	n->backing = 0;
	node_put(fs->pt, n->ino);
}

/* A backing id for the promoted file `name` of (key, etag, size): > 0, 0
 * when there is none or the kernel refused. pt->lock held. */
static int32_t backing_open(struct fs *fs, const char *key, size_t klen, const char *etag,
			    uint64_t size)
{
	struct fuse_pt_backing_map map;
	int fd = promote_open(fs->promote, key, klen, etag, size);
	int id, e;

	if (fd < 0)
		return 0;
	memset(&map, 0, sizeof(map));
	map.fd = fd;
	id = ioctl(fuse_session_fd(fs->se), FUSE_PT_DEV_IOC_BACKING_OPEN, &map);
	e = errno;
	close(fd);
	if (id > 0)
		return id;
	FS_STAT_INC(fs, pt_refused);
	if (e == EPERM || e == ELOOP || e == ENOTTY || e == EINVAL || e == EOPNOTSUPP) {
		atomic_store(&fs->pt->off, 1);
		log_warn(TAG, "passthrough off: the kernel refused a backing file (%s)%s",
			 strerror(e), e == ELOOP ? ": the cache dir is on a stacked filesystem" :
			 e == EPERM ? ": not negotiated, or not root" : "");
	} else {
		log_warn(TAG, "passthrough: backing file refused (%s); read the normal way",
			 strerror(e));
	}
	return 0;
}

int fs_pt_open(struct fs *fs, uint64_t ino, const char *key, size_t klen, const char *etag,
	       uint64_t size, int flags)
{
	struct fs_pt *pt = fs->pt;
	struct pt_node *n;
	int32_t id;

	if (!pt)
		return 0;
	pthread_mutex_lock(&pt->lock);
	n = node_get(pt, ino);
	if (!n) {
		pthread_mutex_unlock(&pt->lock);
		return -ENOMEM;
	}
	if (n->passed) {
		if (strcmp(n->etag, etag) != 0) {
			pthread_mutex_unlock(&pt->lock);
			FS_STAT_INC(fs, pt_stale);
			return -ESTALE;
		}
		n->passed++;
		id = n->backing;
		pthread_mutex_unlock(&pt->lock);
		FS_STAT_INC(fs, pt_opens);
		return id;
	}
	id = 0;
	/* O_DIRECT would reach the backing file as O_DIRECT, with its alignment
	 * rules (EINVAL for an unaligned buffer, which the normal path serves):
	 * such an open starts no passthrough, though it must join one. */
	if (!n->normal && !(flags & O_DIRECT) && fs_pt_active(fs) && etag[0] && size > 0) {
		char name[PROMOTE_NAME_LEN + 1];

		promote_key_name(fs->promote, key, klen, etag, name);
		if (n->backing > 0) {
			/* An idle id (DESIGN, "Kept ids"): this very version, and
			 * still a promoted file, or closed. */
			idle_del(fs, n);
			if (n->size == size && strcmp(n->name, name) == 0 &&
			    promote_touch(fs->promote, name, size) == 0) {
				id = n->backing;
				FS_STAT_INC(fs, pt_backing_reuses);
			} else {
				backing_close(fs, n->backing);
				n->backing = 0;
			}
		}
		if (id == 0) {
			id = backing_open(fs, key, klen, etag, size);
			if (id > 0)
				FS_STAT_INC(fs, pt_backing_opens);
		}
		if (id > 0) {
			memcpy(n->name, name, sizeof(n->name));
			n->size = size;
			n->evicted = 0;
		}
	}
	if (id > 0) {
		n->passed = 1;
		n->backing = id;
		snprintf(n->etag, sizeof(n->etag), "%s", etag);
		FS_STAT_INC(fs, pt_opens);
	} else {
		n->normal++;
	}
	pthread_mutex_unlock(&pt->lock);
	return id;
}

void fs_pt_release(struct fs *fs, uint64_t ino, int32_t backing)
{
	struct fs_pt *pt = fs->pt;
	struct pt_node *n;
	int32_t close_id = 0;

	if (!pt)
		return;
	pthread_mutex_lock(&pt->lock);
	n = *slot_of(pt, ino);
	if (n && backing > 0 && n->passed) {
		if (--n->passed == 0) {
			if (pt->idle_max && !n->evicted && n->name[0] && fs_pt_active(fs) &&
			    idle_add(fs, n) == 0) {
				/* Kept for the next open. */
			} else {
				close_id = n->backing;
				n->backing = 0;
			}
		}
	} else if (n && backing <= 0 && n->normal) {
		n->normal--;
	}
	node_put(pt, ino);
	/* Over the bound (a successor may have adopted more than it keeps). */
	while (pt->nidle > pt->idle_max)
		idle_close(fs, pt->idle.iprev);
	if (close_id > 0)
		backing_close(fs, close_id);
	pthread_mutex_unlock(&pt->lock);
}

/* The promote table's hook: the file `name` was evicted. An idle id on it is
 * closed now (the disk space comes back); one in use is closed at its last
 * release. Promoter thread, no lock held by the caller but the hook lock. */
static void pt_evicted(void *arg, const char *name)
{
	struct fs *fs = arg;
	struct fs_pt *pt = fs->pt;

	pthread_mutex_lock(&pt->lock);
	for (unsigned i = 0; i < PT_BUCKETS; i++) {
		struct pt_node *n = pt->b[i], *next;

		for (; n; n = next) {
			next = n->next;
			if (n->backing <= 0 || strcmp(n->name, name) != 0)
				continue;
			if (n->passed)
				n->evicted = 1;
			else
				idle_close(fs, n);      /* may free n; next is kept */
		}
	}
	pthread_mutex_unlock(&pt->lock);
}

static void adopt_handle(void *arg, uint64_t fh, uint64_t ino, const char *etag,
			 int32_t backing)
{
	struct fs *fs = arg;
	struct pt_node *n = node_get(fs->pt, ino);

	(void)fh;
	if (!n)
		return;
	if (backing > 0) {
		n->passed++;
		n->backing = backing;
		snprintf(n->etag, sizeof(n->etag), "%s", etag);
	} else {
		n->normal++;
	}
}

/* A successor: an idle id its predecessor kept (slot fh), adopted as idle.
 * One that a handle of the node holds already is the same id (the server
 * died between taking the idle slot and freeing the handle's): its slot
 * goes. pt->lock held. */
static void adopt_idle(void *arg, uint64_t fh, uint64_t ino, const char *name, int32_t backing)
{
	struct fs *fs = arg;
	struct pt_node *n;
	uint64_t sino, size;

	if (backing <= 0 || strlen(name) != PROMOTE_NAME_LEN ||
	    keep_handle_get(fs->keep, fh, KEEP_IDLE, &sino, &size, NULL) < 0 ||
	    !(n = node_get(fs->pt, ino))) {
		keep_handle_close(fs->keep, fh);
		return;
	}
	if (n->passed || n->backing > 0) {
		if (n->backing != backing)
			log_warn(TAG, "passthrough: node %llu had two backing ids (%d, %d); "
				 "%d stays registered until unmount", (unsigned long long)ino,
				 n->backing, backing, backing);
		keep_handle_close(fs->keep, fh);
		return;
	}
	n->backing = backing;
	n->size = size;
	memcpy(n->name, name, sizeof(n->name));
	n->slot = fh;
	idle_link(fs->pt, n);
}

int fs_pt_init(struct fs *fs, int on)
{
	atomic_store(&pt_wanted, on);
	if (!on)
		return 0;
	fs->pt = calloc(1, sizeof(*fs->pt));
	if (!fs->pt)
		return -ENOMEM;
	pthread_mutex_init(&fs->pt->lock, NULL);
	fs->pt->idle.iprev = fs->pt->idle.inext = &fs->pt->idle;
	if (fs->promote) {
		const char *env = getenv("FEEDFS_PT_IDLE_MAX");

		fs->pt->idle_max = env ? (unsigned)strtoul(env, NULL, 10) : PT_IDLE_MAX;
		if (fs->pt->idle_max > PT_IDLE_MAX)
			fs->pt->idle_max = PT_IDLE_MAX;
	}
	if (fs->keep) {
		/* A successor: the handles its predecessors left open, then the
		 * ids they kept idle (adopted even when this one keeps none:
		 * its first release over the bound closes them). */
		pthread_mutex_lock(&fs->pt->lock);
		keep_handles_each(fs->keep, adopt_handle, fs);
		keep_slots_each(fs->keep, KEEP_IDLE, adopt_idle, fs);
		pthread_mutex_unlock(&fs->pt->lock);
	}
	if (fs->pt->idle_max)
		promote_set_evicted(fs->promote, pt_evicted, fs);
	return 0;
}

void fs_pt_stop(struct fs *fs)
{
	/* No hook call in flight after this, none later: the hook uses the
	 * session's fd, which goes next. The ids need no closing: the kernel
	 * drops them with the connection. */
	if (fs->pt && fs->pt->idle_max && fs->promote)
		promote_set_evicted(fs->promote, NULL, NULL);
}

void fs_pt_destroy(struct fs *fs)
{
	if (!fs->pt)
		return;
	fs_pt_stop(fs);
	for (unsigned i = 0; i < PT_BUCKETS; i++) {
		while (fs->pt->b[i]) {
			struct pt_node *n = fs->pt->b[i];

			fs->pt->b[i] = n->next;
			free(n);
		}
	}
	pthread_mutex_destroy(&fs->pt->lock);
	free(fs->pt);
	fs->pt = NULL;
}

int fs_pt_negotiated(void)
{
	return atomic_load(&pt_negotiated);
}
