/*
 * libfeedfs — the client library of a feedfs mount (build/libfeedfs.so, .a):
 * the device-feed path (docs/DEVICE.md) and the loader's file order.
 *
 * DESIGN
 * A channel is one connection to the mount's control socket, turned into a
 * device channel (the D verb): regions are registered on it and live as long
 * as it does (the daemon frees them when it closes, or when this process
 * dies). Reads are ioctls (feedfs_ioctl.h) on a file descriptor of a file of
 * that mount, opened by the caller with open(2); they need no channel, only
 * a region id (or a CUDA IPC handle). Every call returns >= 0 or -errno and
 * is safe from any thread: a channel's requests are serialized by its own
 * lock, the ioctls are independent.
 */
#ifndef FEEDFS_LIBFEEDFS_H
#define FEEDFS_LIBFEEDFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/feedfs_ioctl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FEEDFS_LIB_VERSION 1

struct feedfs_channel;

/* The mount point of the feedfs mount holding path (realpath'ed), into out.
 * 0, -ENOENT (not on a feedfs mount) or -ENAMETOOLONG. */
int feedfs_mount_point(const char *path, char *out, size_t out_len);

/* Open the device channel of the mount holding path. 0 or -errno (-ENOENT:
 * not a feedfs mount; -EPROTO: a daemon without the device path). */
int feedfs_open(const char *path, struct feedfs_channel **out);
/* Close it: the daemon unregisters every region registered on it. */
void feedfs_close(struct feedfs_channel *ch);

/* Register size bytes of memfd (sealed with F_SEAL_SHRINK) with the daemon.
 * *id names it in reads. 0 or -errno. */
int feedfs_register_fd(struct feedfs_channel *ch, int memfd, size_t size, uint64_t *id);
int feedfs_unregister(struct feedfs_channel *ch, uint64_t id);

/* A region made here: a sealed memfd, mapped, registered. */
struct feedfs_region {
	uint64_t id;
	void *base;
	size_t size;
	int memfd;
};
int feedfs_region_new(struct feedfs_channel *ch, size_t size, struct feedfs_region *out);
/* Unregister, unmap, close. 0 or -errno (the memory is gone either way). */
int feedfs_region_free(struct feedfs_channel *ch, struct feedfs_region *r);

/* What the daemon of the file fd offers. 0 or -errno. */
int feedfs_caps(int fd, struct feedfs_ioc_caps *out);

/* len bytes of the open file fd at file_off into region id at region_off.
 * Bytes (short only at end of file, 0 past it) or -errno. */
ssize_t feedfs_read_host(int fd, uint64_t region, uint64_t region_off, uint64_t file_off,
			 size_t len);
/* Into device memory: handle is a cudaIpcMemHandle_t (64 bytes) of the
 * allocation, dev_off bytes into it. -ENODEV without CUDA in the daemon,
 * -EXDEV from another PID namespace: use the host path then. */
ssize_t feedfs_read_device(int fd, const void *ipc_handle, uint64_t dev_off, uint64_t file_off,
			   size_t len);

/* Many extents of one file into one destination; more than FEEDFS_BATCH_MAX
 * go in several ioctls. Each ext[i].result is filled. Total bytes, or the
 * first failure's -errno (the extents after it are -ECANCELED). */
struct feedfs_extent {
	uint64_t file_offset, length, dest_offset;
	int64_t result;
};
ssize_t feedfs_read_batch(int fd, const struct feedfs_ioc_dest *dest, struct feedfs_extent *ext,
			  size_t n);

/* The loader's file order (the O verb; `feedfs prefetch --order`): n paths
 * relative to the mount root, or absolute under it, in the order they will be
 * opened. It replaces the order of the same stream: stream names it (1 to 64
 * of [A-Za-z0-9._-], e.g. "rank3" for one rank of a distributed loader on a
 * shared mount); NULL is the default stream. mountpoint may be any path on
 * the mount. 0 or -errno (-EINVAL: a path or stream name the daemon would
 * refuse; -E2BIG: over its bounds, or more than half of --max-memory).
 * clear drops stream's order; with NULL, every order. */
int feedfs_send_order(const char *mountpoint, const char *stream, const char *const *paths,
		      size_t n);
int feedfs_clear_order(const char *mountpoint, const char *stream);

#ifdef __cplusplus
}
#endif

#endif
