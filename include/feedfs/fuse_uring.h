/*
 * fuse_uring — the kernel's FUSE-over-io_uring ABI (protocol 7.42, Linux
 * 6.14), which Debian's libfuse 3.14 and its <linux/fuse.h> (7.38) predate.
 *
 * Checked against the kernel's include/uapi/linux/fuse.h, fs/fuse/dev_uring.c
 * and Documentation/filesystems/fuse-io-uring.rst:
 *  - INIT: FUSE_OVER_IO_URING is init flag bit 41, i.e. bit 9 of flags2 (with
 *    FUSE_INIT_EXT in flags); the kernel offers it only while the fuse
 *    module's parameter enable_uring is Y, and keeps it for the connection
 *    when the reply carries it;
 *  - after the INIT reply, IORING_OP_URING_CMD SQEs (128-byte SQEs: the
 *    command below sits in the SQE's 80-byte cmd area) on the /dev/fuse fd:
 *    REGISTER gives the kernel one entry of a queue (qid: one queue per
 *    possible CPU; a request goes to the queue of the CPU it was made on),
 *    as two iovecs (sqe->addr, sqe->len = 2): the header area below and a
 *    payload buffer of at least max(8 KiB, max_write, max_pages * page);
 *    the ring serves once every queue has an entry;
 *  - a completion (res 0) means the entry holds a request: fuse_in_header in
 *    in_out, the opcode's first argument in op_in (its size: the header's
 *    len less the header and payload_sz), the other arguments in the
 *    payload (payload_sz bytes), the request's unique in commit_id;
 *  - the reply: fuse_out_header in in_out, the reply's body in the payload,
 *    its size in payload_sz, then COMMIT_AND_FETCH with commit_id = unique
 *    and the same qid, which also makes the entry wait for the next request;
 *  - FORGET, INTERRUPT and the daemon's notifications stay on /dev/fuse.
 * Only wire layouts and numbers live here; the transport is src/fs/uring.c.
 */
#ifndef FEEDFS_FUSE_URING_H
#define FEEDFS_FUSE_URING_H

#include <stdint.h>

#define FUSE_URING_MINOR               42          /* the protocol minor that has it */
#define FUSE_URING_FLAGS2_OVER_IO_URING (1u << 9)  /* init flag bit 41 */
#define FUSE_URING_INIT_MAX_PAGES      (1u << 22)  /* flags: max_pages is valid */
#define FUSE_URING_MIN_READ_BUFFER     8192u
#define FUSE_URING_CMD_REGISTER        1u
#define FUSE_URING_CMD_COMMIT_AND_FETCH 2u
#define FUSE_URING_IN_OUT_SZ           128u
#define FUSE_URING_OP_IN_SZ            128u
#define FUSE_URING_PARAM "/sys/module/fuse/parameters/enable_uring"

struct fuse_uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id;         /* the request's unique */
	uint32_t payload_sz;        /* bytes used in the payload, either way */
	uint32_t padding;
	uint64_t reserved;
};

struct fuse_uring_req_header {
	uint8_t in_out[FUSE_URING_IN_OUT_SZ];      /* fuse_in_header / fuse_out_header */
	uint8_t op_in[FUSE_URING_OP_IN_SZ];        /* the opcode's first argument */
	struct fuse_uring_ent_in_out ent;
};

struct fuse_uring_cmd_req {             /* in the SQE's cmd area */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

_Static_assert(sizeof(struct fuse_uring_ent_in_out) == 32, "fuse_uring_ent_in_out");
_Static_assert(sizeof(struct fuse_uring_req_header) == 288, "fuse_uring_req_header");
_Static_assert(sizeof(struct fuse_uring_cmd_req) == 24, "fuse_uring_cmd_req");

#endif
