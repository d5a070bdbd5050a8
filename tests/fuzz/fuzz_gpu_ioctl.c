/*
 * fuzz_gpu_ioctl — the device-feed ioctl checks of src/gpu/ioctl.c (the one
 * user ABI, feedfs_ioctl.h): whatever command and bytes a caller sends, the
 * answer is a reply size within the out buffer or ENOTTY/EINVAL/ENOENT/
 * ENODEV/EXDEV/EPERM/EFAULT, and nothing is read from a file (no region is
 * registered, CUDA points nowhere). Input: 4 bytes of command (its size
 * field capped to the buffer), then the request.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/feedfs_ioctl.h"
#include "feedfs/gpu.h"

static struct gpu *g;
static unsigned char out[16384];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned int cmd;
	ssize_t r;

	if (!g) {
		setenv("FEEDFS_CUDART", "/nonexistent/libcudart.so", 1);
		if (gpu_new(&g) < 0)
			abort();
	}
	if (size < 4)
		return 0;
	memcpy(&cmd, data, 4);
	/* Half the inputs made our type and read/write, so the checks behind
	 * the first one see traffic. */
	if (cmd & 1)
		cmd = (cmd & ~((unsigned)_IOC_TYPEMASK << _IOC_TYPESHIFT) &
		       ~((unsigned)_IOC_DIRMASK << _IOC_DIRSHIFT)) |
		      ((unsigned)FEEDFS_IOC_MAGIC << _IOC_TYPESHIFT) |
		      ((unsigned)(_IOC_READ | _IOC_WRITE) << _IOC_DIRSHIFT);
	r = gpu_ioctl(g, NULL, 0, 1, cmd, data + 4, size - 4, out, sizeof(out));
	if (r > (ssize_t)sizeof(out))
		abort();
	if (r < 0 && r != -ENOTTY && r != -EINVAL && r != -ENOENT && r != -ENODEV &&
	    r != -EXDEV && r != -EPERM && r != -EFAULT)
		abort();
	if (gpu_regions(g) != 0)
		abort();
	return 0;
}
