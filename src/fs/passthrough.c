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
 *  - the last passthrough handle's release closes the backing id (the
 *    kernel keeps the file for handles still using it).
 * Our counts can only lag the kernel's (it drops its count before sending
 * RELEASE), which errs toward a normal open: never EIO.
 * Under a keeper each handle's backing id is in its slot (keep.h), and a
 * successor rebuilds the table from the slots before serving.
 *
 * Lock order: pt->lock, then the promote table's lock (a leaf, inside
 * promote_open); fs->lock is never taken under pt->lock. pt->lock is held
 * across one openat and one ioctl on first use of a node, so that two opens
 * of one node cannot register two backing files.
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

struct pt_node {
	struct pt_node *next;
	uint64_t ino;
	uint32_t normal;            /* handles open the normal way */
	uint32_t passed;            /* handles open for passthrough */
	int32_t backing;            /* > 0 while passed > 0 */
	char etag[FS_ETAG_MAX];     /* what the passthrough handles read */
};

struct fs_pt {
	pthread_mutex_t lock;       /* leaf, see DESIGN */
	struct pt_node *b[PT_BUCKETS];
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

	if (n && !n->normal && !n->passed) {
		*pp = n->next;
		free(n);
	}
}

/* A backing id for the promoted file of (key, etag, size): > 0, 0 when
 * there is none or the kernel refused. pt->lock held. */
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
	if (!n->normal && !(flags & O_DIRECT) && fs_pt_active(fs) && etag[0] && size > 0)
		id = backing_open(fs, key, klen, etag, size);
	if (id > 0) {
		n->passed = 1;
		n->backing = id;
		snprintf(n->etag, sizeof(n->etag), "%s", etag);
		FS_STAT_INC(fs, pt_opens);
		FS_STAT_INC(fs, pt_backing_opens);
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
			close_id = n->backing;
			n->backing = 0;
		}
	} else if (n && backing <= 0 && n->normal) {
		n->normal--;
	}
	node_put(pt, ino);
	if (close_id > 0) {
		uint32_t id = (uint32_t)close_id;

		/* Under the lock: a new open of this node must not get the id
		 * between our decision and the kernel forgetting it. */
		if (ioctl(fuse_session_fd(fs->se), FUSE_PT_DEV_IOC_BACKING_CLOSE, &id) < 0)
			log_debug(TAG, "passthrough: closing backing id %u: %s", id,
				  strerror(errno));
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

int fs_pt_init(struct fs *fs, int on)
{
	atomic_store(&pt_wanted, on);
	if (!on)
		return 0;
	fs->pt = calloc(1, sizeof(*fs->pt));
	if (!fs->pt)
		return -ENOMEM;
	pthread_mutex_init(&fs->pt->lock, NULL);
	if (fs->keep) {
		/* A successor: the handles its predecessors left open. */
		pthread_mutex_lock(&fs->pt->lock);
		keep_handles_each(fs->keep, adopt_handle, fs);
		pthread_mutex_unlock(&fs->pt->lock);
	}
	return 0;
}

void fs_pt_destroy(struct fs *fs)
{
	if (!fs->pt)
		return;
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
