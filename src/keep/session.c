/*
 * session.c — a server's FUSE session under a keeper (design in
 * feedfs/keep.h): the first server saves the INIT it answers and sends the
 * keeper its /dev/fuse descriptor; a successor replays that INIT on the
 * inherited descriptor and has the kernel resend what its predecessor read.
 */
#define FUSE_USE_VERSION FUSE_MAKE_VERSION(3, 14)
#include <fuse_lowlevel.h>

#include "feedfs/keep.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "keep_i.h"

#define TAG "keep"
#define INIT_READ_BUF (64u << 10)    /* above the kernel's minimum read size */

struct wire_in_header {              /* struct fuse_in_header */
	uint32_t len;
	uint32_t opcode;
	uint64_t unique;
	uint64_t nodeid;
	uint32_t uid, gid, pid;
	uint16_t total_extlen, padding;
};

struct wire_out_header {             /* struct fuse_out_header */
	uint32_t len;
	int32_t error;
	uint64_t unique;
};

int keep_send_fuse_fd(int chan_fd, int fuse_fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))], byte = 'F';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;

	memset(cbuf, 0, sizeof(cbuf));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fuse_fd, sizeof(int));
	return sendmsg(chan_fd, &mh, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

int keep_notify_resend(int fuse_fd)
{
	struct wire_out_header h = { .len = sizeof(h), .error = KEEP_FUSE_NOTIFY_RESEND };

	return write(fuse_fd, &h, sizeof(h)) == (ssize_t)sizeof(h) ? 0 : -errno;
}

int keep_first_init(struct keep *k, struct fuse_session *se, char *msg, size_t msg_len)
{
	char *buf = malloc(INIT_READ_BUF);
	const struct wire_in_header *h = (const struct wire_in_header *)buf;
	struct fuse_buf fb;
	ssize_t n;

	if (!buf) {
		snprintf(msg, msg_len, "out of memory");
		return -ENOMEM;
	}
	do
		n = read(fuse_session_fd(se), buf, INIT_READ_BUF);
	while (n < 0 && errno == EINTR);
	if (n < (ssize_t)sizeof(*h) || h->opcode != KEEP_FUSE_INIT) {
		int e = n < 0 ? errno : EPROTO;

		snprintf(msg, msg_len, "reading the kernel's INIT: %s", strerror(e));
		free(buf);
		return -e;
	}
	if (k)
		keep_save_init(k, buf, (size_t)n);
	memset(&fb, 0, sizeof(fb));
	fb.mem = buf;
	fb.size = (size_t)n;
	fuse_session_process_buf(se, &fb);
	free(buf);
	return 0;
}

int keep_takeover_init(struct keep *k, struct fuse_session *se, char *msg, size_t msg_len)
{
	unsigned char init[KEEP_INIT_MAX];
	struct fuse_buf fb;
	size_t n = keep_init(k, init, sizeof(init));
	int e;

	if (n < sizeof(struct wire_in_header)) {
		snprintf(msg, msg_len, "takeover: no INIT saved by the first server");
		return -EPROTO;
	}
	/* The reply goes to a request the kernel answered long ago: it is
	 * refused (ENOENT) and libfuse drops that silently. What matters is the
	 * session state: the same negotiation as the kernel's. */
	memset(&fb, 0, sizeof(fb));
	fb.mem = init;
	fb.size = n;
	fuse_session_process_buf(se, &fb);
	e = keep_notify_resend(fuse_session_fd(se));
	if (e < 0) {
		/* Without it, requests the dead process had read stay unanswered
		 * until the reader gives up; everything else works. */
		log_warn(TAG, "the kernel cannot resend requests the previous server had "
			 "read (FUSE_NOTIFY_RESEND: %s); those readers wait until interrupted",
			 strerror(-e));
	}
	return 0;
}
