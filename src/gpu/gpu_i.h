/*
 * gpu_i — private to src/gpu/: the mount's device-feed state, its regions,
 * and what each file offers the others:
 *   ioctl.c  (gpu_ioctl, the stats table) -> region.c (table, D verb)
 *   ioctl.c  -> cuda.c (the runtime behind dlopen)
 */
#ifndef FEEDFS_GPU_I_H
#define FEEDFS_GPU_I_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/feedfs_ioctl.h"
#include "feedfs/gpu.h"

/* Reads go through the read path this many bytes at a time: what one FUSE
 * read asks (max_read), so readahead sees the same sequential stream. */
#define GPU_CHUNK (1u << 20)
/* The most one read or extent may ask (it is bounded by the file anyway). */
#define GPU_LEN_MAX (1ull << 40)
#define GPU_CHAN_REGIONS_MAX 256        /* regions one channel may hold */
#define GPU_REGION_MAX (1ull << 40)

struct gpu_stats {                      /* relaxed atomics; rows in ioctl.c */
	uint64_t direct_bytes;          /* bytes delivered by the direct paths */
	uint64_t device_bytes;          /* of them, into device memory */
	uint64_t reads, batches, errors, estale;
	uint64_t registered, unregistered, freed_at_close;
	uint64_t channels;
	uint64_t regions;               /* gauge, filled in snapshots */
	uint64_t region_bytes;          /* gauge, filled in snapshots */
};

/* A client's memfd, mapped here. Lives while the table or a copy holds it. */
struct gpu_region {
	uint64_t id;                    /* random, never 0 */
	uid_t uid;                      /* the registering peer's */
	char *base;
	size_t size;
	unsigned refs;                  /* under g->mu */
	const void *chan;               /* the channel that registered it */
	struct gpu_region *next;        /* g->regions, under g->mu */
};

struct gpu_cuda;

struct gpu {
	/* Lock order: g->mu is innermost; nothing is called while it is held
	 * but list walks and munmap of a region nobody uses. */
	pthread_mutex_t mu;
	struct gpu_region *regions;     /* under mu */
	uint64_t n_regions, region_bytes;       /* under mu */

	/* CUDA: loaded once, at the first caps query or device read. Never
	 * held with mu. */
	pthread_mutex_t cuda_mu;
	int cuda_tried;                 /* under cuda_mu; then the three below are set */
	struct gpu_cuda *cuda;          /* NULL: cuda_errno says why */
	int cuda_errno;
	int cuda_runtime;

	struct gpu_stats stats;
};

#define GPU_STAT_ADD(g, f, n) __atomic_add_fetch(&(g)->stats.f, (n), __ATOMIC_RELAXED)

/* ---- region.c ---- */
/* The region id with a reference (gpu_region_put), or NULL. */
struct gpu_region *gpu_region_get(struct gpu *g, uint64_t id);
void gpu_region_put(struct gpu *g, struct gpu_region *r);
/* Unmap every region left (gpu_destroy). */
void gpu_regions_free_all(struct gpu *g);

/* ---- cuda.c ---- */
/* dlopen the runtime ($FEEDFS_CUDART, else libcudart.so, .so.13, .so.12)
 * and check for a device. 0, or -ENODEV (no runtime, no device, or a
 * runtime without the calls we need) with a log line saying which. */
int gpu_cuda_load(struct gpu_cuda **out, int *runtime_version);
void gpu_cuda_unload(struct gpu_cuda *c);
/* Copy len bytes of the file at file_off into the device allocation behind
 * handle, at dev_off: through pinned staging, several copies in flight.
 * Bytes (short only at end of file) or -errno. */
ssize_t gpu_cuda_copy(struct gpu_cuda *c, const uint8_t *handle, uint64_t dev_off,
		      struct rd_file *rd, uint64_t file_off, uint64_t len);

#endif
