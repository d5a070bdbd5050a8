/*
 * dirops — ask the kernel for parallel directory operations.
 *
 * DESIGN
 * Without FUSE_PARALLEL_DIROPS in the INIT reply, the kernel holds a
 * directory's inode lock across every lookup in it: one slow LIST or HEAD
 * makes every other lookup in that directory wait, whatever the number of
 * readers. op_init asks for it (conn->want), but libfuse 3.14 (Debian
 * 3.14.0-4) does not put the bit into its reply: with -d, the kernel offers
 * flags 0x73fffffb (bit 18 set), op_init's want holds FUSE_CAP_PARALLEL_DIROPS,
 * and the reply flags are 0x4040b029 (bit 18 clear).
 *
 * So the session writes through fuse_session_custom_io() on its own /dev/fuse
 * fd, with plain read and writev, and sets the bit in the INIT reply: the
 * first reply of the session (the kernel sends nothing else until INIT is
 * answered), recognised by its size and version, and only when the kernel
 * offered the flag (fs_dirops_offered, from op_init). Every other message is
 * written as is. $FEEDFS_PARALLEL_DIROPS=0 leaves the bit alone (to measure
 * the difference).
 *
 * The same seam carries FUSE passthrough (passthrough.c, which libfuse 3.14
 * predates): the INIT reply's flags2 and max_stack_depth, and OPEN replies
 * that the open handler marked for passthrough (FOPEN_PASSTHROUGH and the
 * backing id). An own request loop on /dev/fuse would have done the same
 * with far more code to own; the seam is two hooks.
 *
 * And FUSE over io_uring (uring.c): the INIT reply asks for it, and every
 * reply, once patched, goes to the ring entry that holds its request, or
 * to /dev/fuse when none does (send()).
 */
#include "fs_i.h"

#include <errno.h>
#include <linux/fuse.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/fuse_passthrough.h"
#include "feedfs/log.h"

#define TAG "fs"

static atomic_int dirops_offered;     /* op_init saw the kernel offer it */
static atomic_int init_done;          /* the INIT reply has gone */
static int dirops_wanted;             /* set before the session starts */

void fs_dirops_offered(int offered)
{
	atomic_store(&dirops_offered, offered);
}

static void (*end_fn)(void *);        /* fs_session_on_end; set before the loop */
static void *end_arg;
static atomic_int ended;

void fs_session_on_end(void (*fn)(void *), void *arg)
{
	end_fn = fn;
	end_arg = arg;
}

/* ENODEV: the connection is gone (unmounted or aborted), no reply reaches
 * anyone any more. The loop now joins its workers, and a worker waiting for
 * a GET that backs off against a store that went away would hold it up for
 * the GET's last retry: end_fn ends such waits at once. */
static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);

	(void)userdata;
	if (n < 0 && errno == ENODEV && end_fn && !atomic_exchange(&ended, 1)) {
		int e = errno;

		end_fn(end_arg);
		errno = e;
	}
	return n;
}

/* A reply, patched already: to its ring entry, else to /dev/fuse. */
static ssize_t send_iov(int fd, const struct iovec *iov, int count)
{
	if (fs_uring_reply(iov, count)) {
		ssize_t n = 0;

		for (int i = 0; i < count; i++)
			n += (ssize_t)iov[i].iov_len;
		return n;
	}
	return writev(fd, iov, count);
}

static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct fuse_init_out out;
	struct fuse_pt_open_out open_out;
	struct iovec mine[2];
	const struct fuse_out_header *oh = iov[0].iov_base;
	int changed = 0;

	(void)userdata;
	if (count == 2 && oh->error == 0 && fs_pt_open_reply(iov, count, &open_out)) {
		/* An OPEN reply of this thread, to pass through (passthrough.c). */
		mine[0] = iov[0];
		mine[1].iov_base = &open_out;
		mine[1].iov_len = sizeof(open_out);
		return send_iov(fd, mine, 2);
	}
	if (atomic_load(&init_done) || count != 2 || iov[0].iov_len != sizeof(*oh) ||
	    oh->error != 0 || iov[1].iov_len < offsetof(struct fuse_init_out, flags) +
	    sizeof(out.flags) || iov[1].iov_len > sizeof(out))
		return send_iov(fd, iov, count);
	atomic_store(&init_done, 1);
	memset(&out, 0, sizeof(out));
	memcpy(&out, iov[1].iov_base, iov[1].iov_len);
	if (out.major != FUSE_KERNEL_VERSION)
		return send_iov(fd, iov, count);
	if (dirops_wanted && atomic_load(&dirops_offered) && !(out.flags & FUSE_PARALLEL_DIROPS)) {
		out.flags |= FUSE_PARALLEL_DIROPS;
		changed = 1;
		log_debug(TAG, "init: parallel dirops set in the reply (libfuse left it out)");
	}
	_Static_assert(sizeof(out) == sizeof(struct fuse_pt_init_out), "7.38 and 7.40 sizes");
	changed |= fs_pt_init_reply(&out, iov[1].iov_len);
	changed |= fs_uring_init_reply(&out, iov[1].iov_len);
	if (!changed)
		return send_iov(fd, iov, count);
	mine[0] = iov[0];
	mine[1].iov_base = &out;
	mine[1].iov_len = iov[1].iov_len;
	return send_iov(fd, mine, 2);
}

int fs_session_parallel_dirops(struct fuse_session *se)
{
	static const struct fuse_custom_io io = { .read = io_read, .writev = io_writev };
	const char *env = getenv("FEEDFS_PARALLEL_DIROPS");
	int fd = fuse_session_fd(se);

	dirops_wanted = !(env && strcmp(env, "0") == 0);
	if (fd < 0)
		return 0;
	if (fuse_session_custom_io(se, &io, fd) != 0) {
		log_warn(TAG, "cannot patch the INIT reply: lookups in one directory run one "
			 "at a time, and reads are never passed through");
		return -EIO;
	}
	return 1;
}
