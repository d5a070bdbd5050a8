/*
 * ioctl — the device-feed ioctls (include/feedfs/feedfs_ioctl.h) on an open
 * file, and the module's life and counters. See gpu.h for the design.
 *
 * DESIGN
 * Checks first, in the order the ABI promises: a command of another type or
 * number is ENOTTY; ours with an _IOC_SIZE, a size field or a version other
 * than this build's is EINVAL, as is a length or offset that overflows.
 * Then one destination is resolved (a region reference, or the CUDA runtime)
 * and the bytes are copied extent by extent through rd_read_iov, GPU_CHUNK
 * at a time: the read path's own buffers, budget and ETag pin, one copy into
 * the region (outside the file's lock when the bytes are there already). A device destination in a daemon without CUDA is ENODEV, one whose
 * caller lives in another PID namespace is EXDEV (legacy CUDA IPC handles do
 * not open there); the client library falls back to the host path on both.
 */
#include "gpu_i.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "feedfs/log.h"
#include "feedfs/prefetch.h"
#include "feedfs/stats.h"
#include "feedfs/util.h"

#define TAG "device"

int gpu_new(struct gpu **out)
{
	struct gpu *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	pthread_mutex_init(&g->mu, NULL);
	pthread_mutex_init(&g->cuda_mu, NULL);
	g->cuda_errno = ENODEV;
	*out = g;
	return 0;
}

void gpu_destroy(struct gpu *g)
{
	if (!g)
		return;
	gpu_regions_free_all(g);
	gpu_cuda_unload(g->cuda);
	pthread_mutex_destroy(&g->cuda_mu);
	pthread_mutex_destroy(&g->mu);
	free(g);
}

/* The runtime is loaded at the first caps query or device read, once: a
 * mount nobody asks for a device never touches CUDA. */
static struct gpu_cuda *cuda_get(struct gpu *g)
{
	struct gpu_cuda *c;

	pthread_mutex_lock(&g->cuda_mu);
	if (!g->cuda_tried) {
		int e = gpu_cuda_load(&g->cuda, &g->cuda_runtime);

		g->cuda_errno = e < 0 ? -e : 0;
		g->cuda_tried = 1;
	}
	c = g->cuda;
	pthread_mutex_unlock(&g->cuda_mu);
	return c;
}

/* ---- destinations ---- */

struct dest {
	int kind;
	struct gpu_region *region;      /* a reference, FEEDFS_DEST_REGION */
	const uint8_t *handle;          /* FEEDFS_DEST_CUDA_IPC */
	struct gpu_cuda *cuda;
	uint64_t base;                  /* dest.offset */
};

/* Another PID namespace than ours: the kernel gives FUSE the caller's pid as
 * seen from the daemon's namespace, 0 when it cannot be seen. */
static int other_pid_ns(pid_t pid)
{
	struct stat a, b;
	char p[64];

	if (pid <= 0)
		return 1;
	snprintf(p, sizeof(p), "/proc/%d/ns/pid", (int)pid);
	if (stat(p, &a) < 0 || stat("/proc/self/ns/pid", &b) < 0)
		return 0;       /* cannot tell: let CUDA say */
	return a.st_ino != b.st_ino || a.st_dev != b.st_dev;
}

static int dest_open(struct gpu *g, const struct feedfs_ioc_dest *d, uid_t uid, pid_t pid,
		     struct dest *out)
{
	memset(out, 0, sizeof(*out));
	out->kind = (int)d->kind;
	out->base = d->offset;
	if (d->flags)
		return -EINVAL;
	switch (d->kind) {
	case FEEDFS_DEST_REGION:
		out->region = gpu_region_get(g, d->region);
		if (!out->region)
			return -ENOENT;
		if (uid != 0 && uid != out->region->uid) {
			gpu_region_put(g, out->region);
			out->region = NULL;
			return -EPERM;
		}
		return 0;
	case FEEDFS_DEST_CUDA_IPC:
		/* Before CUDA: a handle from another namespace cannot open. */
		if (other_pid_ns(pid))
			return -EXDEV;
		out->cuda = cuda_get(g);
		if (!out->cuda)
			return -ENODEV;
		out->handle = d->ipc_handle;
		return 0;
	default:
		return -EINVAL;
	}
}

static void dest_close(struct gpu *g, struct dest *d)
{
	if (d->region)
		gpu_region_put(g, d->region);
	d->region = NULL;
}

/* One extent: len bytes of the file at off to dest at dest offset doff.
 * Bytes (short only at end of file) or -errno. */
static ssize_t copy_extent(struct gpu *g, struct rd_file *rd, struct dest *d, uint64_t off,
			   uint64_t len, uint64_t doff)
{
	uint64_t at, done = 0;

	if (len > GPU_LEN_MAX || off + len < off || d->base + doff < doff ||
	    d->base + doff + len < d->base + doff)
		return -EINVAL;
	at = d->base + doff;
	if (d->kind == FEEDFS_DEST_CUDA_IPC) {
		ssize_t r = gpu_cuda_copy(d->cuda, d->handle, at, rd, off, len);

		if (r > 0) {
			GPU_STAT_ADD(g, device_bytes, (uint64_t)r);
			GPU_STAT_ADD(g, direct_bytes, (uint64_t)r);
		}
		return r;
	}
	if (at > d->region->size || len > d->region->size - at)
		return -EFAULT;
	while (done < len) {
		size_t n = (size_t)(len - done < GPU_CHUNK ? len - done : GPU_CHUNK);
		char *to = d->region->base + at + done;
		struct iovec iov[RD_PIN_MAX];
		struct rd_pin pin;
		unsigned niov = 0;
		ssize_t r = rd_read_iov(rd, off + done, n, to, iov, &niov, &pin);

		/* Bytes already fetched come pinned: copy them here, outside the
		 * file's lock, as the FUSE reply does (completions and other
		 * readers of the file go on meanwhile; the region's first-touch
		 * page faults land here too). Others were copied into `to`. */
		if (r > 0 && pin.n) {
			size_t k = 0;

			for (unsigned i = 0; i < niov; i++) {
				memcpy(to + k, iov[i].iov_base, iov[i].iov_len);
				k += iov[i].iov_len;
			}
		}
		rd_unpin(rd, &pin);
		if (r < 0) {
			/* The error, not the bytes so far: a short count means end of
			 * file in this ABI, and after ESTALE the region holds bytes of
			 * a version the caller must not use. */
			if (r == -ESTALE)
				GPU_STAT_ADD(g, estale, 1);
			return r;
		}
		done += (uint64_t)r;
		GPU_STAT_ADD(g, direct_bytes, (uint64_t)r);
		if ((size_t)r < n)
			break;          /* end of file */
	}
	return (ssize_t)done;
}

/* ---- the commands ---- */

static int check_head(unsigned int cmd, size_t want, const void *in, size_t in_len,
		      size_t out_cap)
{
	const uint32_t *h = in;

	if (_IOC_SIZE(cmd) != want || in_len < want || out_cap < want)
		return -EINVAL;
	if (h[0] != FEEDFS_IOCTL_VERSION || h[1] != want)
		return -EINVAL;
	return 0;
}

static ssize_t do_caps(struct gpu *g, struct feedfs_ioc_caps *c)
{
	memset(c, 0, sizeof(*c));
	c->version = FEEDFS_IOCTL_VERSION;
	c->size = sizeof(*c);
	c->flags = FEEDFS_CAP_HOST | FEEDFS_CAP_BATCH;
	c->batch_max = FEEDFS_BATCH_MAX;
	c->len_max = GPU_LEN_MAX;
	if (cuda_get(g))
		c->flags |= FEEDFS_CAP_DEVICE;
	c->device_errno = g->cuda ? 0 : g->cuda_errno;
	c->cuda_runtime = g->cuda_runtime;
	return sizeof(*c);
}

static ssize_t do_read(struct gpu *g, struct rd_file *rd, uid_t uid, pid_t pid,
		       struct feedfs_ioc_read *q)
{
	struct dest d;
	ssize_t r;

	if (q->flags || q->reserved0)
		return -EINVAL;
	r = dest_open(g, &q->dest, uid, pid, &d);
	if (r == 0)
		r = copy_extent(g, rd, &d, q->file_offset, q->length, 0);
	dest_close(g, &d);
	if (r < 0) {
		GPU_STAT_ADD(g, errors, 1);
		return r;
	}
	GPU_STAT_ADD(g, reads, 1);
	q->result = r;
	return sizeof(*q);
}

static ssize_t do_batch(struct gpu *g, struct rd_file *rd, uid_t uid, pid_t pid,
			struct feedfs_ioc_batch *b)
{
	struct dest d;
	uint32_t i;
	ssize_t r;

	if (b->flags || b->count == 0 || b->count > FEEDFS_BATCH_MAX)
		return -EINVAL;
	r = dest_open(g, &b->dest, uid, pid, &d);
	if (r < 0) {
		GPU_STAT_ADD(g, errors, 1);
		return r;
	}
	b->result = 0;
	b->error = 0;
	b->failed = b->count;
	for (i = 0; i < b->count; i++) {
		struct feedfs_ioc_extent *x = &b->ext[i];

		if (b->error) {
			x->result = -ECANCELED;
			continue;
		}
		r = copy_extent(g, rd, &d, x->file_offset, x->length, x->dest_offset);
		x->result = r;
		if (r < 0) {
			b->error = (int32_t)-r;
			b->failed = i;
			GPU_STAT_ADD(g, errors, 1);
		} else {
			b->result += r;
		}
	}
	dest_close(g, &d);
	GPU_STAT_ADD(g, batches, 1);
	return sizeof(*b);
}

ssize_t gpu_ioctl(struct gpu *g, struct rd_file *rd, uid_t uid, pid_t pid, unsigned int cmd,
		  const void *in, size_t in_len, void *out, size_t out_cap)
{
	ssize_t r;

	if (_IOC_TYPE(cmd) != FEEDFS_IOC_MAGIC || _IOC_DIR(cmd) != (_IOC_READ | _IOC_WRITE))
		return -ENOTTY;
	switch (_IOC_NR(cmd)) {
	case _IOC_NR(FEEDFS_IOC_CAPS):
		r = check_head(cmd, sizeof(struct feedfs_ioc_caps), in, in_len, out_cap);
		return r < 0 ? r : do_caps(g, out);
	case _IOC_NR(FEEDFS_IOC_READ):
		r = check_head(cmd, sizeof(struct feedfs_ioc_read), in, in_len, out_cap);
		if (r < 0)
			return r;
		memcpy(out, in, sizeof(struct feedfs_ioc_read));
		return do_read(g, rd, uid, pid, out);
	case _IOC_NR(FEEDFS_IOC_BATCH):
		r = check_head(cmd, sizeof(struct feedfs_ioc_batch), in, in_len, out_cap);
		if (r < 0)
			return r;
		memcpy(out, in, sizeof(struct feedfs_ioc_batch));
		return do_batch(g, rd, uid, pid, out);
	default:
		return -ENOTTY;
	}
}

/* ---- counters ---- */

static void gpu_snapshot(void *obj, void *out)
{
	struct gpu *g = obj;
	struct gpu_stats *s = out;

	stats_copy_u64(s, &g->stats, sizeof(*s));
	pthread_mutex_lock(&g->mu);
	s->regions = g->n_regions;
	s->region_bytes = g->region_bytes;
	pthread_mutex_unlock(&g->mu);
}

#define ROW_C(f, metric, help) STATS_COUNTER(struct gpu_stats, f, metric, "", help)
#define ROW_G(f, metric, help) STATS_GAUGE(struct gpu_stats, f, metric, "", help)
static const struct stats_field gpu_fields[] = {
	ROW_C(direct_bytes, "direct_bytes_total",
	      "Bytes delivered by the direct paths (ioctl into a region or device memory)."),
	ROW_C(device_bytes, "direct_device_bytes_total", "Of them, bytes copied into device memory."),
	ROW_C(reads, "direct_reads_total", "READ ioctls that succeeded."),
	ROW_C(batches, "direct_batches_total", "BATCH ioctls answered."),
	ROW_C(errors, "direct_errors_total", "Direct reads or extents that failed."),
	ROW_C(estale, "direct_estale_total",
	      "Direct reads failed with ESTALE: the object changed while open."),
	ROW_C(channels, "device_channels_total", "Device channels opened (the D verb)."),
	ROW_C(registered, "device_regions_registered_total", "Shared-memory regions registered."),
	ROW_C(unregistered, "device_regions_unregistered_total",
	      "Regions unregistered by their client."),
	ROW_C(freed_at_close, "device_regions_freed_at_close_total",
	      "Regions freed because their channel closed (the client ended or died)."),
	ROW_G(regions, "device_regions", "Regions registered now."),
	ROW_G(region_bytes, "device_region_bytes", "Bytes of the regions registered now."),
};
#undef ROW_C
#undef ROW_G

const struct stats_group gpu_stats_group = {
	.name = "device",
	.fields = gpu_fields,
	.n_fields = sizeof(gpu_fields) / sizeof(gpu_fields[0]),
	.snapshot_size = sizeof(struct gpu_stats),
	.snapshot = gpu_snapshot,
};
