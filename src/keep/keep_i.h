/*
 * keep_i — private to src/keep/: what the keeper and the servers' side share.
 */
#ifndef FEEDFS_KEEP_I_H
#define FEEDFS_KEEP_I_H

#include <stdint.h>

#include "feedfs/keep.h"

/* Bytes of the shared region (the memfd's size). */
uint64_t keep_region_bytes(void);
/* What the region holds: bytes of node log written, and the slots' high-water
 * mark (the most handles open at once, give or take the holes). */
uint64_t keep_log_bytes(const struct keep *k);
uint32_t keep_slots_hwm(const struct keep *k);

/* FUSE wire constants Debian 12's <linux/fuse.h> (7.38) predates. */
#define KEEP_FUSE_INIT 26u
#define KEEP_FUSE_FORGET 2u
#define KEEP_FUSE_INTERRUPT 36u
#define KEEP_FUSE_BATCH_FORGET 42u
#define KEEP_FUSE_NOTIFY_RESEND 7       /* Linux 6.9, protocol 7.40 */

/* Ask the kernel to queue again every request read from fuse_fd and not
 * answered. 0, or -errno (-EINVAL: a kernel without it). */
int keep_notify_resend(int fuse_fd);

#endif
