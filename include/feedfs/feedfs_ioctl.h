/*
 * feedfs_ioctl — the user ABI of the device-feed path (docs/DEVICE.md). This
 * is the one stable interface of feedfs to programs other than its own:
 * change it only by adding a version.
 *
 * DESIGN
 * The commands are ioctls on an open file of a feedfs mount. FUSE forwards
 * only "restricted" ioctls from a regular file: the kernel copies exactly
 * _IOC_SIZE(cmd) bytes in (for _IOC_WRITE) and out (for _IOC_READ), sizes it
 * learns from the command number alone. So every struct here has a fixed
 * size, all are _IOWR, and none holds a pointer into the caller's memory:
 * the daemon cannot reach it. A destination is named instead: a shared-memory
 * region that the caller registered with the daemon over the mount's control
 * socket (the D verb, src/gpu/region.c), or a CUDA IPC memory handle.
 * _IOC_SIZE is 14 bits, so no struct may exceed 16383 bytes; the batch form
 * is bounded to FEEDFS_BATCH_MAX extents (8.3 KiB) for that reason.
 *
 * Every struct starts with {version, size}: the daemon refuses (EINVAL) a
 * version it does not speak or a size that is not sizeof its struct, and a
 * command whose _IOC_SIZE is not that size (an old or new header). A command
 * feedfs does not know at all answers ENOTTY, as any file would.
 *
 * Errors of a single read are the ioctl's errno. ESTALE: the object was
 * replaced since the file was opened (reads are pinned to the ETag seen at
 * open, as read(2) is). ENOENT: no such region (never registered, or already
 * unregistered). EFAULT: the destination range is outside the region.
 * EPERM: the region belongs to another uid. ENODEV: no usable CUDA device or
 * runtime in the daemon (FEEDFS_CAP_DEVICE unset; caps.device_errno says why).
 * EINVAL: a bad flag, kind, version or size, or offset + length overflowing.
 */
#ifndef FEEDFS_FEEDFS_IOCTL_H
#define FEEDFS_FEEDFS_IOCTL_H

#include <linux/ioctl.h>
#include <stdint.h>

#define FEEDFS_IOCTL_VERSION 1
#define FEEDFS_IOC_MAGIC 0xF7

/* caps.flags */
#define FEEDFS_CAP_HOST   (1u << 0)     /* shared-memory regions */
#define FEEDFS_CAP_DEVICE (1u << 1)     /* CUDA IPC destinations */
#define FEEDFS_CAP_BATCH  (1u << 2)

/* dest.kind */
#define FEEDFS_DEST_REGION   1          /* region id + offset */
#define FEEDFS_DEST_CUDA_IPC 2          /* cudaIpcMemHandle_t + offset into it */

#define FEEDFS_IPC_HANDLE_SIZE 64       /* sizeof(cudaIpcMemHandle_t) */
#define FEEDFS_BATCH_MAX 256

struct feedfs_ioc_caps {
	uint32_t version;               /* in: FEEDFS_IOCTL_VERSION; out: the daemon's */
	uint32_t size;                  /* in: sizeof(struct feedfs_ioc_caps) */
	uint32_t flags;                 /* out: FEEDFS_CAP_* */
	uint32_t batch_max;             /* out: FEEDFS_BATCH_MAX */
	uint64_t len_max;               /* out: the most one read or extent may ask */
	int32_t device_errno;           /* out: 0, or why FEEDFS_CAP_DEVICE is unset */
	int32_t cuda_runtime;           /* out: cudaRuntimeGetVersion, 0 if none */
	uint64_t reserved[4];
};

struct feedfs_ioc_dest {
	uint32_t kind;                  /* FEEDFS_DEST_* */
	uint32_t flags;                 /* 0 */
	uint64_t region;                /* FEEDFS_DEST_REGION: the id from registration */
	uint64_t offset;                /* bytes into the region or device allocation */
	uint8_t ipc_handle[FEEDFS_IPC_HANDLE_SIZE];     /* FEEDFS_DEST_CUDA_IPC */
};

struct feedfs_ioc_read {
	uint32_t version;
	uint32_t size;                  /* sizeof(struct feedfs_ioc_read) */
	uint32_t flags;                 /* 0 */
	uint32_t reserved0;
	uint64_t file_offset;
	uint64_t length;
	struct feedfs_ioc_dest dest;
	int64_t result;                 /* out: bytes copied (short only at end of file) */
	uint64_t reserved[3];
};

struct feedfs_ioc_extent {
	uint64_t file_offset;
	uint64_t length;
	uint64_t dest_offset;           /* added to dest.offset */
	int64_t result;                 /* out: bytes, -errno, or -ECANCELED after a failure */
};

/* Many extents of one file into one destination. The ioctl itself fails only
 * for a malformed request; each extent's outcome is its result, extents run
 * in order and stop at the first failure. */
struct feedfs_ioc_batch {
	uint32_t version;
	uint32_t size;                  /* sizeof(struct feedfs_ioc_batch) */
	uint32_t flags;                 /* 0 */
	uint32_t count;                 /* 1..FEEDFS_BATCH_MAX */
	struct feedfs_ioc_dest dest;
	int64_t result;                 /* out: bytes of all extents that succeeded */
	int32_t error;                  /* out: 0, or the first failing extent's errno */
	uint32_t failed;                /* out: index of that extent (count if none) */
	uint64_t reserved[2];
	struct feedfs_ioc_extent ext[FEEDFS_BATCH_MAX];
};

#define FEEDFS_IOC_CAPS  _IOWR(FEEDFS_IOC_MAGIC, 0, struct feedfs_ioc_caps)
#define FEEDFS_IOC_READ  _IOWR(FEEDFS_IOC_MAGIC, 1, struct feedfs_ioc_read)
#define FEEDFS_IOC_BATCH _IOWR(FEEDFS_IOC_MAGIC, 2, struct feedfs_ioc_batch)

/* The ABI's sizes, checked at compile time where the header is used. */
#ifndef __cplusplus
_Static_assert(sizeof(struct feedfs_ioc_caps) == 64, "caps ABI");
_Static_assert(sizeof(struct feedfs_ioc_dest) == 88, "dest ABI");
_Static_assert(sizeof(struct feedfs_ioc_read) == 152, "read ABI");
_Static_assert(sizeof(struct feedfs_ioc_extent) == 32, "extent ABI");
_Static_assert(sizeof(struct feedfs_ioc_batch) == 136 + 32 * FEEDFS_BATCH_MAX, "batch ABI");
_Static_assert(sizeof(struct feedfs_ioc_batch) < (1u << 14), "fits _IOC_SIZE");
#endif

#endif
