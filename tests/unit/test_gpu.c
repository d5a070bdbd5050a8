/*
 * test_gpu — the device-feed module without a mount: the ioctl ABI checks of
 * gpu_ioctl (ENOTTY, EINVAL, ENOENT before any byte is read), and the CUDA
 * loader when the runtime is absent ($FEEDFS_CUDART names a library that is
 * not there): ENODEV, never a crash, and caps say why.
 */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/feedfs_ioctl.h"
#include "feedfs/gpu.h"
#include "../../src/gpu/gpu_i.h"

static void t_abi_checks(void)
{
	struct feedfs_ioc_read q, out;
	struct feedfs_ioc_caps c;
	struct gpu *g;

	CHECK_EQ_INT(gpu_new(&g), 0);
	memset(&q, 0, sizeof(q));
	q.version = FEEDFS_IOCTL_VERSION;
	q.size = sizeof(q);
	q.length = 10;
	q.dest.kind = FEEDFS_DEST_REGION;
	q.dest.region = 99;
	/* Not ours: another type, another number, another direction. */
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, _IOWR('f', 1, struct feedfs_ioc_read), &q, sizeof(q),
			       &out, sizeof(out)), -ENOTTY);
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, _IOWR(FEEDFS_IOC_MAGIC, 9, struct feedfs_ioc_read),
			       &q, sizeof(q), &out, sizeof(out)), -ENOTTY);
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, _IOR(FEEDFS_IOC_MAGIC, 1, struct feedfs_ioc_read),
			       &q, sizeof(q), &out, sizeof(out)), -ENOTTY);
	/* Ours with a wrong size in the command, the size field, the version. */
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, _IOC(_IOC_READ | _IOC_WRITE, FEEDFS_IOC_MAGIC, 1, 144),
			       &q, 144, &out, 144), -EINVAL);
	q.size = 144;
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -EINVAL);
	q.size = sizeof(q);
	q.version = 2;
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -EINVAL);
	q.version = FEEDFS_IOCTL_VERSION;
	q.flags = 1;
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -EINVAL);
	q.flags = 0;
	/* Well formed, but no such region: ENOENT, and the file is not touched. */
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -ENOENT);
	q.dest.kind = 5;
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -EINVAL);
	/* Caps answer without a file. */
	memset(&c, 0, sizeof(c));
	c.version = FEEDFS_IOCTL_VERSION;
	c.size = sizeof(c);
	setenv("FEEDFS_CUDART", "/nonexistent/libcudart.so", 1);
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_CAPS, &c, sizeof(c), &c, sizeof(c)),
		     sizeof(c));
	CHECK_EQ_INT(c.flags, FEEDFS_CAP_HOST | FEEDFS_CAP_BATCH);
	CHECK_EQ_INT(c.device_errno, ENODEV);
	CHECK_EQ_INT(c.batch_max, FEEDFS_BATCH_MAX);
	/* A device destination in that daemon: ENODEV. */
	q.dest.kind = FEEDFS_DEST_CUDA_IPC;
	CHECK_EQ_INT(gpu_ioctl(g, NULL, 0, 1, FEEDFS_IOC_READ, &q, sizeof(q), &out, sizeof(out)),
		     -ENODEV);
	CHECK_EQ_INT(gpu_regions(g), 0);
	gpu_destroy(g);
	unsetenv("FEEDFS_CUDART");
}

static void t_cuda_absent(void)
{
	struct gpu_cuda *c = (struct gpu_cuda *)1;
	int version = -1;

	setenv("FEEDFS_CUDART", "/nonexistent/libcudart.so", 1);
	CHECK_EQ_INT(gpu_cuda_load(&c, &version), -ENODEV);
	CHECK(c == NULL);
	CHECK_EQ_INT(version, 0);
	/* A library that is there but is not CUDA: every call missing. */
	setenv("FEEDFS_CUDART", "libm.so.6", 1);
	CHECK_EQ_INT(gpu_cuda_load(&c, &version), -ENODEV);
	CHECK(c == NULL);
	unsetenv("FEEDFS_CUDART");
	gpu_cuda_unload(NULL);
}

static const struct test tests[] = {
	TEST(t_abi_checks),
	TEST(t_cuda_absent),
	{ 0 },
};

int main(void)
{
	return harness_run("gpu", tests);
}
