/*
 * gpu — the device-feed path inside the daemon (docs/DEVICE.md): the ioctls
 * of include/feedfs/feedfs_ioctl.h on open files, the shared-memory regions
 * clients register over the control socket (the D verb), and the CUDA
 * runtime, loaded with dlopen only when a device destination is asked for.
 *
 * DESIGN
 * One struct gpu per mount, made before the FUSE session and destroyed after
 * it and after the control socket (so no ioctl or channel can still use it).
 * src/fs/ hands every ioctl on an open file to gpu_ioctl with that file's
 * read handle: bytes come through the normal read path (prefetch, cache,
 * ETag pinned at open, so a replaced object fails with ESTALE) and are copied
 * once, straight into the destination (a region) or into pinned staging and
 * from there by DMA (a device). No FUSE data transfer carries them.
 * Threads: gpu_ioctl runs on FUSE workers, the D verb on control-socket
 * connection threads; g->mu guards the region table only and is never held
 * across a copy or a read (regions are reference counted instead).
 */
#ifndef FEEDFS_GPU_H
#define FEEDFS_GPU_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct gpu;
struct rd_file;
struct ctl_config;
struct stats_group;

/* Nothing is loaded yet (CUDA at first use). 0 or -ENOMEM. */
int gpu_new(struct gpu **out);
/* After the FUSE session and the control socket are gone. NULL is a no-op. */
void gpu_destroy(struct gpu *g);

/* Add the D verb (device channel: register/unregister regions) to cfg. */
void gpu_ctl_register(struct gpu *g, struct ctl_config *cfg);

/* One ioctl on an open file (rd) from a caller of uid and pid (as FUSE gives
 * them: pid 0 when the caller's PID namespace is not ours). in/in_len is what the
 * kernel copied in; out (out_cap bytes) is what goes back. Returns the bytes
 * of out to reply with (>= 0) or -errno (-ENOTTY: not ours). */
ssize_t gpu_ioctl(struct gpu *g, struct rd_file *rd, uid_t uid, pid_t pid, unsigned int cmd,
		  const void *in, size_t in_len, void *out, size_t out_cap);

extern const struct stats_group gpu_stats_group;   /* "device"; obj: struct gpu * */

/* Registered now (tests, the stats gauge). */
uint64_t gpu_regions(struct gpu *g);

#endif
