/*
 * fake_cudart — a stand-in CUDA runtime for the device path's tests on
 * machines without a GPU (tests/integration/test_device.py loads it into the
 * daemon with FEEDFS_CUDART=build/tests/libfake_cudart.so).
 *
 * "Device memory" is a shared file: an IPC handle is "FAKE" followed by the
 * file's NUL-ended path, and opening it maps the file. Copies are really
 * asynchronous in the way that matters: cudaMemcpyAsync only queues the copy
 * on its stream, and the bytes move when an event recorded after it, or the
 * stream, is synchronized. So a caller that refills a staging buffer before
 * waiting for the copy out of it ships the wrong bytes, and the test's
 * checksum says so.
 *
 * $FAKE_CUDART_DEVICES=0: cudaGetDeviceCount fails as without a device.
 * Only the calls src/gpu/cuda.c makes exist here.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define OK 0
#define ERR_INVALID 1
#define ERR_NO_DEVICE 100
#define QMAX 64
#define MAPS 32

struct op {
	void *dst;
	const void *src;
	size_t n;
};

struct stream {
	struct op q[QMAX];
	unsigned n;
};

struct event {
	struct stream *s;
};

struct map {
	void *p;
	size_t n;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct map maps[MAPS];

static void flush(struct stream *s)
{
	for (unsigned i = 0; i < s->n; i++)
		memcpy(s->q[i].dst, s->q[i].src, s->q[i].n);
	s->n = 0;
}

API int cudaGetDeviceCount(int *count)
{
	const char *e = getenv("FAKE_CUDART_DEVICES");

	if (e && strcmp(e, "0") == 0) {
		*count = 0;
		return ERR_NO_DEVICE;
	}
	*count = 1;
	return OK;
}

API int cudaRuntimeGetVersion(int *v)
{
	*v = 12040;
	return OK;
}

API const char *cudaGetErrorString(int e)
{
	return e == ERR_NO_DEVICE ? "no CUDA-capable device is detected (fake)" : "fake error";
}

typedef struct {
	char reserved[64];
} fake_handle;

API int cudaIpcOpenMemHandle(void **dev, fake_handle h, unsigned int flags)
{
	char path[61];
	struct stat st;
	void *p;
	int fd;

	if (memcmp(h.reserved, "FAKE", 4) != 0)
		return ERR_INVALID;
	memcpy(path, h.reserved + 4, 60);
	path[60] = '\0';
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return ERR_INVALID;
	if (fstat(fd, &st) < 0 || st.st_size == 0) {
		close(fd);
		return ERR_INVALID;
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return ERR_INVALID;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAPS; i++)
		if (!maps[i].p) {
			maps[i] = (struct map){ p, (size_t)st.st_size };
			break;
		}
	pthread_mutex_unlock(&mu);
	*dev = p;
	return OK;
}

API int cudaIpcCloseMemHandle(void *dev)
{
	int r = ERR_INVALID;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAPS; i++)
		if (maps[i].p == dev) {
			munmap(maps[i].p, maps[i].n);
			maps[i].p = NULL;
			r = OK;
		}
	pthread_mutex_unlock(&mu);
	return r;
}

API int cudaHostRegister(void *p, size_t n, unsigned int flags)
{
	return p && n ? OK : ERR_INVALID;
}

API int cudaHostUnregister(void *p)
{
	return OK;
}

API int cudaStreamCreateWithFlags(struct stream **s, unsigned int flags)
{
	*s = calloc(1, sizeof(**s));
	return *s ? OK : ERR_INVALID;
}

API int cudaStreamSynchronize(struct stream *s)
{
	flush(s);
	return OK;
}

API int cudaStreamDestroy(struct stream *s)
{
	flush(s);
	free(s);
	return OK;
}

API int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, struct stream *s)
{
	if (kind != 1 || !s || s->n == QMAX)
		return ERR_INVALID;
	s->q[s->n++] = (struct op){ dst, src, n };
	return OK;
}

API int cudaEventCreateWithFlags(struct event **e, unsigned int flags)
{
	*e = calloc(1, sizeof(**e));
	return *e ? OK : ERR_INVALID;
}

API int cudaEventRecord(struct event *e, struct stream *s)
{
	e->s = s;
	return OK;
}

API int cudaEventSynchronize(struct event *e)
{
	if (e->s)
		flush(e->s);
	return OK;
}

API int cudaEventDestroy(struct event *e)
{
	free(e);
	return OK;
}
