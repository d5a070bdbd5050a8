/*
 * cuda — the CUDA runtime behind dlopen, for device destinations.
 *
 * DESIGN
 * feedfs never links CUDA: the runtime is looked up at the first device
 * request ($FEEDFS_CUDART names one library, else libcudart.so, .so.13,
 * .so.12 in the loader's path) and every call goes through a pointer
 * resolved with dlsym. No library, a library without one of the calls, or no
 * device: -ENODEV and one log line that says which; the daemon goes on with
 * the host path only. With the toolkit's headers at build time
 * (FEEDFS_HAVE_CUDA_H, make finds $(CUDA_HOME)/include), the pointer types
 * below are checked against the toolkit's own prototypes; without them, the
 * few declarations here stand in (the runtime's C ABI, stable since 4.x).
 *
 * A copy takes the runtime's one lock (c->mu) for its whole length: the
 * staging buffers are the holder's. It reads the file GPU_CHUNK at a time
 * through rd_read into pinned staging (GPU_STAGES buffers of GPU_STAGE
 * bytes, page-locked with cudaHostRegister) and issues one cudaMemcpyAsync
 * per buffer on its own stream, so up to GPU_STAGES copies are in flight
 * while the next buffer fills; a buffer is refilled only after its event.
 * Opened IPC handles are kept (GPU_HANDLES, least recently used goes) since
 * cudaIpcOpenMemHandle costs milliseconds and a loader reuses its buffers.
 * When libcuda's cuMemGetAddressRange is there, the allocation's size bounds
 * the copy (EFAULT past it); without it the client's library checks.
 * Untested on a GPU in this tree's CI: see docs/DEVICE.md.
 */
#include "gpu_i.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"
#include "feedfs/prefetch.h"
#include "feedfs/util.h"

#ifdef FEEDFS_HAVE_CUDA_H
#include <cuda_runtime_api.h>
#else
/* The part of the runtime's C API this file uses. */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct cudaIpcMemHandle_st {
	char reserved[64];
} cudaIpcMemHandle_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1 };
#define cudaSuccess 0
#define cudaHostRegisterPortable 0x01
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaIpcMemLazyEnablePeerAccess 0x01
#endif

#define TAG "cuda"
#define GPU_STAGES 4
#define GPU_STAGE (4u << 20)
#define GPU_HANDLES 16

typedef cudaError_t (*cu_count_fn)(int *count);
typedef cudaError_t (*cu_version_fn)(int *version);
typedef cudaError_t (*cu_ipc_open_fn)(void **dev, cudaIpcMemHandle_t handle, unsigned int flags);
typedef cudaError_t (*cu_ipc_close_fn)(void *dev);
typedef cudaError_t (*cu_host_register_fn)(void *p, size_t size, unsigned int flags);
typedef cudaError_t (*cu_host_unregister_fn)(void *p);
typedef cudaError_t (*cu_memcpy_async_fn)(void *dst, const void *src, size_t n,
					  enum cudaMemcpyKind kind, cudaStream_t s);
typedef cudaError_t (*cu_stream_create_fn)(cudaStream_t *s, unsigned int flags);
typedef cudaError_t (*cu_stream_fn)(cudaStream_t s);
typedef cudaError_t (*cu_event_create_fn)(cudaEvent_t *e, unsigned int flags);
typedef cudaError_t (*cu_event_record_fn)(cudaEvent_t e, cudaStream_t s);
typedef cudaError_t (*cu_event_fn)(cudaEvent_t e);
typedef const char *(*cu_error_string_fn)(cudaError_t e);
/* libcuda (driver API): CUresult cuMemGetAddressRange_v2(CUdeviceptr *, size_t *, CUdeviceptr) */
typedef int (*cu_addr_range_fn)(unsigned long long *base, size_t *size, unsigned long long p);

#ifdef FEEDFS_HAVE_CUDA_H
#define SAME_TYPE(fn, type) \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&fn), type), #fn " prototype")
SAME_TYPE(cudaGetDeviceCount, cu_count_fn);
SAME_TYPE(cudaRuntimeGetVersion, cu_version_fn);
SAME_TYPE(cudaIpcOpenMemHandle, cu_ipc_open_fn);
SAME_TYPE(cudaIpcCloseMemHandle, cu_ipc_close_fn);
SAME_TYPE(cudaHostRegister, cu_host_register_fn);
SAME_TYPE(cudaHostUnregister, cu_host_unregister_fn);
SAME_TYPE(cudaMemcpyAsync, cu_memcpy_async_fn);
SAME_TYPE(cudaStreamCreateWithFlags, cu_stream_create_fn);
SAME_TYPE(cudaStreamSynchronize, cu_stream_fn);
SAME_TYPE(cudaStreamDestroy, cu_stream_fn);
SAME_TYPE(cudaEventCreateWithFlags, cu_event_create_fn);
SAME_TYPE(cudaEventRecord, cu_event_record_fn);
SAME_TYPE(cudaEventSynchronize, cu_event_fn);
SAME_TYPE(cudaEventDestroy, cu_event_fn);
SAME_TYPE(cudaGetErrorString, cu_error_string_fn);
_Static_assert(sizeof(cudaIpcMemHandle_t) == FEEDFS_IPC_HANDLE_SIZE, "IPC handle size");
#endif

struct cu_api {
	cu_count_fn get_device_count;
	cu_version_fn runtime_version;
	cu_ipc_open_fn ipc_open;
	cu_ipc_close_fn ipc_close;
	cu_host_register_fn host_register;
	cu_host_unregister_fn host_unregister;
	cu_memcpy_async_fn memcpy_async;
	cu_stream_create_fn stream_create;
	cu_stream_fn stream_sync, stream_destroy;
	cu_event_create_fn event_create;
	cu_event_record_fn event_record;
	cu_event_fn event_sync, event_destroy;
	cu_error_string_fn error_string;
};

struct cu_handle {
	uint8_t key[FEEDFS_IPC_HANDLE_SIZE];
	char *dev;                      /* NULL: free slot */
	size_t size;                    /* 0: unknown */
	uint64_t last_use;
};

struct gpu_cuda {
	void *lib, *driver;
	struct cu_api api;
	cu_addr_range_fn addr_range;    /* may be NULL */
	pthread_mutex_t mu;             /* a whole copy; innermost but for rd_read */
	char *stage[GPU_STAGES];
	int registered[GPU_STAGES];
	cudaStream_t stream[GPU_STAGES];
	cudaEvent_t event[GPU_STAGES];
	int busy[GPU_STAGES];           /* a copy from it may be in flight */
	struct cu_handle handles[GPU_HANDLES];
	uint64_t tick;
};

static const char *cu_err(struct gpu_cuda *c, cudaError_t e)
{
	const char *s = c->api.error_string ? c->api.error_string(e) : NULL;

	return s ? s : "unknown CUDA error";
}

#define RESOLVE(c, field, name) \
	((c)->api.field = (__typeof__((c)->api.field))dlsym((c)->lib, name)) != NULL

static int resolve_all(struct gpu_cuda *c, const char **missing)
{
	static const char *names[] = {
		"cudaGetDeviceCount", "cudaRuntimeGetVersion", "cudaIpcOpenMemHandle",
		"cudaIpcCloseMemHandle", "cudaHostRegister", "cudaHostUnregister",
		"cudaMemcpyAsync", "cudaStreamCreateWithFlags", "cudaStreamSynchronize",
		"cudaStreamDestroy", "cudaEventCreateWithFlags", "cudaEventRecord",
		"cudaEventSynchronize", "cudaEventDestroy", "cudaGetErrorString",
	};
	int ok[sizeof(names) / sizeof(names[0])];
	size_t i = 0;

	ok[i++] = RESOLVE(c, get_device_count, names[0]);
	ok[i++] = RESOLVE(c, runtime_version, names[1]);
	ok[i++] = RESOLVE(c, ipc_open, names[2]);
	ok[i++] = RESOLVE(c, ipc_close, names[3]);
	ok[i++] = RESOLVE(c, host_register, names[4]);
	ok[i++] = RESOLVE(c, host_unregister, names[5]);
	ok[i++] = RESOLVE(c, memcpy_async, names[6]);
	ok[i++] = RESOLVE(c, stream_create, names[7]);
	ok[i++] = RESOLVE(c, stream_sync, names[8]);
	ok[i++] = RESOLVE(c, stream_destroy, names[9]);
	ok[i++] = RESOLVE(c, event_create, names[10]);
	ok[i++] = RESOLVE(c, event_record, names[11]);
	ok[i++] = RESOLVE(c, event_sync, names[12]);
	ok[i++] = RESOLVE(c, event_destroy, names[13]);
	ok[i++] = RESOLVE(c, error_string, names[14]);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!ok[i]) {
			*missing = names[i];
			return -ENODEV;
		}
	return 0;
}

static void *open_runtime(char *tried, size_t len)
{
	static const char *defaults[] = { "libcudart.so", "libcudart.so.13", "libcudart.so.12" };
	const char *env = getenv("FEEDFS_CUDART");
	size_t n = 0;

	tried[0] = '\0';
	if (env && *env) {
		snprintf(tried, len, "%s ($FEEDFS_CUDART)", env);
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	}
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		void *h = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);

		if (h)
			return h;
		n += (size_t)snprintf(tried + n, n < len ? len - n : 0, "%s%s", i ? ", " : "",
				      defaults[i]);
		if (n >= len)
			n = len - 1;
	}
	return NULL;
}

void gpu_cuda_unload(struct gpu_cuda *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < GPU_HANDLES; i++)
		if (c->handles[i].dev)
			c->api.ipc_close(c->handles[i].dev);
	for (unsigned i = 0; i < GPU_STAGES; i++) {
		if (c->event[i])
			c->api.event_destroy(c->event[i]);
		if (c->stream[i])
			c->api.stream_destroy(c->stream[i]);
		if (c->registered[i])
			c->api.host_unregister(c->stage[i]);
		free(c->stage[i]);
	}
	/* The runtime stays loaded: unloading CUDA in a live process is not
	 * something its documentation promises to survive. */
	pthread_mutex_destroy(&c->mu);
	free(c);
}

static int setup_staging(struct gpu_cuda *c)
{
	for (unsigned i = 0; i < GPU_STAGES; i++) {
		cudaError_t e;

		if (posix_memalign((void **)&c->stage[i], 4096, GPU_STAGE) != 0) {
			c->stage[i] = NULL;
			return -ENOMEM;
		}
		e = c->api.host_register(c->stage[i], GPU_STAGE, cudaHostRegisterPortable);
		if (e != cudaSuccess) {
			log_warn(TAG, "cudaHostRegister of staging: %s", cu_err(c, e));
			return -ENODEV;
		}
		c->registered[i] = 1;
		e = c->api.stream_create(&c->stream[i], cudaStreamNonBlocking);
		if (e == cudaSuccess)
			e = c->api.event_create(&c->event[i], cudaEventDisableTiming);
		if (e != cudaSuccess) {
			log_warn(TAG, "CUDA stream or event: %s", cu_err(c, e));
			return -ENODEV;
		}
	}
	return 0;
}

int gpu_cuda_load(struct gpu_cuda **out, int *runtime_version)
{
	struct gpu_cuda *c;
	const char *missing = NULL;
	char tried[256];
	int count = 0, r;
	cudaError_t e;

	*out = NULL;
	*runtime_version = 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->mu, NULL);
	c->lib = open_runtime(tried, sizeof(tried));
	if (!c->lib) {
		log_info(TAG, "no CUDA runtime (tried %s): device reads answer ENODEV", tried);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return -ENODEV;
	}
	r = resolve_all(c, &missing);
	if (r < 0) {
		log_warn(TAG, "the CUDA runtime lacks %s: device reads answer ENODEV", missing);
		pthread_mutex_destroy(&c->mu);
		free(c);
		return r;
	}
	c->api.runtime_version(runtime_version);
	e = c->api.get_device_count(&count);
	if (e != cudaSuccess || count <= 0) {
		log_info(TAG, "CUDA runtime %d but no device (%s): device reads answer ENODEV",
			 *runtime_version, e != cudaSuccess ? cu_err(c, e) : "0 devices");
		pthread_mutex_destroy(&c->mu);
		free(c);
		return -ENODEV;
	}
	c->driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (c->driver)
		c->addr_range = (cu_addr_range_fn)dlsym(c->driver, "cuMemGetAddressRange_v2");
	r = setup_staging(c);
	if (r < 0) {
		gpu_cuda_unload(c);
		return r;
	}
	log_info(TAG, "CUDA runtime %d, %d device(s): device reads on", *runtime_version, count);
	*out = c;
	return 0;
}

/* The mapping of handle (c->mu held): opened once, kept. */
static struct cu_handle *handle_get(struct gpu_cuda *c, const uint8_t *key, int *err)
{
	struct cu_handle *victim = &c->handles[0];
	cudaIpcMemHandle_t h;
	cudaError_t e;
	void *dev = NULL;

	for (unsigned i = 0; i < GPU_HANDLES; i++) {
		struct cu_handle *x = &c->handles[i];

		if (x->dev && memcmp(x->key, key, sizeof(x->key)) == 0) {
			x->last_use = ++c->tick;
			return x;
		}
		if (!x->dev || (victim->dev && x->last_use < victim->last_use))
			victim = x;
	}
	memcpy(&h, key, sizeof(h));
	e = c->api.ipc_open(&dev, h, cudaIpcMemLazyEnablePeerAccess);
	if (e != cudaSuccess) {
		log_warn(TAG, "cudaIpcOpenMemHandle: %s", cu_err(c, e));
		*err = -EINVAL;
		return NULL;
	}
	if (victim->dev)
		c->api.ipc_close(victim->dev);
	memcpy(victim->key, key, sizeof(victim->key));
	victim->dev = dev;
	victim->size = 0;
	if (c->addr_range) {
		unsigned long long base = 0;
		size_t size = 0;

		if (c->addr_range(&base, &size, (unsigned long long)(uintptr_t)dev) == 0 &&
		    base == (unsigned long long)(uintptr_t)dev)
			victim->size = size;
	}
	victim->last_use = ++c->tick;
	return victim;
}

/* Wait for every copy in flight (c->mu held); the first error, or 0. */
static int drain(struct gpu_cuda *c)
{
	int r = 0;

	for (unsigned i = 0; i < GPU_STAGES; i++)
		if (c->busy[i]) {
			cudaError_t e = c->api.event_sync(c->event[i]);

			c->busy[i] = 0;
			if (e != cudaSuccess && r == 0) {
				log_warn(TAG, "device copy: %s", cu_err(c, e));
				r = -EIO;
			}
		}
	return r;
}

ssize_t gpu_cuda_copy(struct gpu_cuda *c, const uint8_t *key, uint64_t dev_off,
		      struct rd_file *rd, uint64_t file_off, uint64_t len)
{
	struct cu_handle *h;
	uint64_t done = 0;
	unsigned k = 0;
	int err = 0, eof = 0;
	ssize_t r = 0;

	pthread_mutex_lock(&c->mu);
	h = handle_get(c, key, &err);
	if (!h) {
		pthread_mutex_unlock(&c->mu);
		return err;
	}
	if (h->size && (dev_off > h->size || len > h->size - dev_off)) {
		pthread_mutex_unlock(&c->mu);
		return -EFAULT;
	}
	while (done < len && !eof) {
		unsigned i = k++ % GPU_STAGES;
		size_t fill = 0, want = (size_t)(len - done < GPU_STAGE ? len - done : GPU_STAGE);
		cudaError_t e;

		if (c->busy[i]) {
			e = c->api.event_sync(c->event[i]);
			c->busy[i] = 0;
			if (e != cudaSuccess) {
				log_warn(TAG, "device copy: %s", cu_err(c, e));
				r = -EIO;
				break;
			}
		}
		while (fill < want) {
			size_t n = want - fill < GPU_CHUNK ? want - fill : GPU_CHUNK;

			r = rd_read(rd, file_off + done + fill, n, c->stage[i] + fill);
			if (r < 0)
				break;
			fill += (size_t)r;
			if ((size_t)r < n) {
				eof = 1;
				break;
			}
		}
		if (r < 0)
			break;
		if (fill) {
			e = c->api.memcpy_async(h->dev + dev_off + done, c->stage[i], fill,
						cudaMemcpyHostToDevice, c->stream[i]);
			if (e == cudaSuccess)
				e = c->api.event_record(c->event[i], c->stream[i]);
			if (e != cudaSuccess) {
				log_warn(TAG, "cudaMemcpyAsync: %s", cu_err(c, e));
				r = -EIO;
				break;
			}
			c->busy[i] = 1;
		}
		done += fill;
	}
	err = drain(c);
	pthread_mutex_unlock(&c->mu);
	if (r < 0)
		return r;
	return err < 0 ? err : (ssize_t)done;
}
