/*
 * fuse_passthrough — the kernel's FUSE passthrough ABI (protocol 7.40, Linux
 * 6.9), which Debian's libfuse 3.14 and its <linux/fuse.h> (7.38) predate.
 *
 * Checked against the kernel's include/uapi/linux/fuse.h and
 * fs/fuse/passthrough.c, fs/fuse/iomode.c:
 *  - INIT: FUSE_PASSTHROUGH is init flag bit 37, i.e. bit 5 of flags2, read
 *    by the kernel only when the reply's flags have FUSE_INIT_EXT; the
 *    reply's max_stack_depth (the u32 after flags2, 1..2) must be set and
 *    writeback caching off, else the kernel leaves passthrough off;
 *  - OPEN: FOPEN_PASSTHROUGH in fuse_open_out.open_flags, and the u32 that
 *    older headers call padding is the backing id;
 *  - FUSE_DEV_IOC_BACKING_OPEN on /dev/fuse (CAP_SYS_ADMIN) registers an open
 *    file and returns its id (> 0); FUSE_DEV_IOC_BACKING_CLOSE drops the id
 *    (files opened with it keep the backing file until they are released).
 * Only wire layouts and numbers live here; the policy is src/fs/passthrough.c.
 */
#ifndef FEEDFS_FUSE_PASSTHROUGH_H
#define FEEDFS_FUSE_PASSTHROUGH_H

#include <stdint.h>
#include <sys/ioctl.h>

#define FUSE_PT_MINOR               40          /* the protocol minor that has it */
#define FUSE_PT_INIT_EXT            (1u << 30)  /* flags: flags2 is valid */
#define FUSE_PT_FLAGS2_PASSTHROUGH  (1u << 5)   /* init flag bit 37 */
#define FUSE_PT_MAX_STACK_DEPTH     2           /* FILESYSTEM_MAX_STACK_DEPTH */
#define FUSE_PT_FOPEN_PASSTHROUGH   (1u << 7)
#define FUSE_PT_FOPEN_KEEP_CACHE    (1u << 1)
/* Open flags the kernel allows beside FOPEN_PASSTHROUGH (iomode.c's
 * FOPEN_PASSTHROUGH_MASK: direct io, parallel direct writes, noflush);
 * any other one, keep_cache included, fails the open with EIO. */

/* struct fuse_init_out as of 7.40: 64 bytes, as libfuse 3.14 sends it. */
struct fuse_pt_init_out {
	uint32_t major, minor, max_readahead, flags;
	uint16_t max_background, congestion_threshold;
	uint32_t max_write, time_gran;
	uint16_t max_pages, map_alignment;
	uint32_t flags2;
	uint32_t max_stack_depth;
	uint32_t unused[6];
};

/* struct fuse_open_out as of 7.40. */
struct fuse_pt_open_out {
	uint64_t fh;
	uint32_t open_flags;
	int32_t backing_id;
};

struct fuse_pt_backing_map {
	int32_t fd;
	uint32_t flags;                             /* must be 0 */
	uint64_t padding;                           /* must be 0 */
};

#define FUSE_PT_DEV_IOC_MAGIC          229
#define FUSE_PT_DEV_IOC_BACKING_OPEN   _IOW(FUSE_PT_DEV_IOC_MAGIC, 1, struct fuse_pt_backing_map)
#define FUSE_PT_DEV_IOC_BACKING_CLOSE  _IOW(FUSE_PT_DEV_IOC_MAGIC, 2, uint32_t)

_Static_assert(sizeof(struct fuse_pt_init_out) == 64, "fuse_init_out is 64 bytes");
_Static_assert(sizeof(struct fuse_pt_open_out) == 16, "fuse_open_out is 16 bytes");
_Static_assert(sizeof(struct fuse_pt_backing_map) == 16, "fuse_backing_map is 16 bytes");

#endif
