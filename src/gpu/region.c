/*
 * region — shared-memory regions and the D verb of the mount's control
 * socket, which registers them.
 *
 * DESIGN
 * "D <version>\n" turns the connection into a device channel: the reply is
 * "OK <version> <caps>\n" (caps: FEEDFS_CAP_* of feedfs_ioctl.h, without
 * asking CUDA) or "ERR 22" for a version we do not speak. From then on the
 * connection carries only these requests, one line each:
 *   M <size>\n + one byte carrying a memfd (SCM_RIGHTS, its own sendmsg)
 *        -> "OK <id>\n": the daemon maps size bytes of it, shared, and the
 *           ioctls name the region by id. The memfd must be sealed against
 *           shrinking (F_SEAL_SHRINK): a region that shrank under a copy
 *           would kill the daemon with SIGBUS. No seal: "ERR 1" (EPERM);
 *           size 0, over GPU_REGION_MAX or past the file's end: "ERR 22";
 *           no fd with the byte: "ERR 9"; too many regions: "ERR 24".
 *   U <id>\n -> "OK 0\n", or "ERR 2" when this channel holds no such id.
 * The byte with the fd is read with recvmsg after the request line; the line
 * itself is read one byte at a time (util_read_line), so it never swallows
 * the byte and its fd (a plain read would drop the fd).
 * Ending the connection (the client closed it, or died) unregisters every
 * region it registered. Unregistering takes a region out of the table at
 * once (new ioctls naming it get ENOENT); a copy already running holds a
 * reference and finishes into the mapping, which goes when the last
 * reference does. Ids are 64 random bits: a process that can open a file on
 * the mount still cannot aim the daemon at another process's region by
 * guessing, and the ioctl checks the caller's uid against the owner's too.
 */
#include "gpu_i.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedfs/ctl.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "device"
#define LINE_MAX_D 128

struct gpu_region *gpu_region_get(struct gpu *g, uint64_t id)
{
	struct gpu_region *r;

	pthread_mutex_lock(&g->mu);
	for (r = g->regions; r && r->id != id; r = r->next)
		;
	if (r)
		r->refs++;
	pthread_mutex_unlock(&g->mu);
	return r;
}

static void region_unmap(struct gpu_region *r)
{
	munmap(r->base, r->size);
	free(r);
}

void gpu_region_put(struct gpu *g, struct gpu_region *r)
{
	unsigned left;

	pthread_mutex_lock(&g->mu);
	BUG_ON(r->refs == 0);
	left = --r->refs;
	pthread_mutex_unlock(&g->mu);
	if (!left)
		region_unmap(r);
}

/* Take r out of the table (mu held); the table's reference goes with it. */
static int region_unlink_locked(struct gpu *g, struct gpu_region *r)
{
	for (struct gpu_region **pp = &g->regions; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			g->n_regions--;
			g->region_bytes -= r->size;
			return --r->refs == 0;
		}
	BUG_ON(1);
	return 0;
}

void gpu_regions_free_all(struct gpu *g)
{
	pthread_mutex_lock(&g->mu);
	while (g->regions) {
		struct gpu_region *r = g->regions;

		if (region_unlink_locked(g, r))
			region_unmap(r);
	}
	pthread_mutex_unlock(&g->mu);
}

static int reply(int fd, const char *what, unsigned long long v)
{
	char line[64];

	snprintf(line, sizeof(line), "%s %llu\n", what, v);
	return util_send_all(fd, line, strlen(line)) < 0 ? -1 : 0;
}

/* The fd that came with the one byte after the request line; -1 if none.
 * Returns -2 when the peer is gone. */
static int recv_fd(int sock)
{
	char byte, ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	ssize_t n;
	int fd = -1;

	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return -2;
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
		    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
			size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			memcpy(&fd, CMSG_DATA(c), sizeof(int));
			/* More than one: keep the first, close the rest. */
			for (size_t i = 1; i < nfd; i++) {
				int extra;

				memcpy(&extra, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(extra);
			}
		}
	return fd;
}

/* Map size bytes of fd for the channel. The id, or -errno. */
static int64_t region_add(struct gpu *g, const void *chan, uid_t uid, int fd,
			  unsigned long long size, unsigned held, uint64_t *id_out)
{
	struct gpu_region *r;
	struct stat st;
	int seals;

	if (held >= GPU_CHAN_REGIONS_MAX)
		return -EMFILE;
	if (size == 0 || size > GPU_REGION_MAX || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (unsigned long long)st.st_size < size)
		return -EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (r->base == MAP_FAILED) {
		int e = -errno;

		free(r);
		return e;
	}
	r->size = (size_t)size;
	r->uid = uid;
	r->chan = chan;
	r->refs = 1;            /* the table's */
	do {
		if (getrandom(&r->id, sizeof(r->id), 0) != sizeof(r->id)) {
			region_unmap(r);
			return -EAGAIN;
		}
	} while (r->id == 0);
	pthread_mutex_lock(&g->mu);
	r->next = g->regions;
	g->regions = r;
	g->n_regions++;
	g->region_bytes += r->size;
	pthread_mutex_unlock(&g->mu);
	GPU_STAT_ADD(g, registered, 1);
	*id_out = r->id;
	return 0;
}

/* Unregister id if this channel registered it. 0 or -ENOENT. */
static int region_del(struct gpu *g, const void *chan, uint64_t id)
{
	struct gpu_region *r, *gone = NULL;

	pthread_mutex_lock(&g->mu);
	for (r = g->regions; r && !(r->id == id && r->chan == chan); r = r->next)
		;
	if (r && region_unlink_locked(g, r))
		gone = r;
	pthread_mutex_unlock(&g->mu);
	if (!r)
		return -ENOENT;
	if (gone)
		region_unmap(gone);
	GPU_STAT_ADD(g, unregistered, 1);
	return 0;
}

/* Everything the channel still holds; how many there were. */
static unsigned chan_release(struct gpu *g, const void *chan)
{
	unsigned n = 0;

	for (;;) {
		struct gpu_region *r, *gone = NULL;

		pthread_mutex_lock(&g->mu);
		for (r = g->regions; r && r->chan != chan; r = r->next)
			;
		if (r && region_unlink_locked(g, r))
			gone = r;
		pthread_mutex_unlock(&g->mu);
		if (!r)
			return n;
		if (gone)
			region_unmap(gone);
		n++;
	}
}

static int handle_device(void *arg, struct ctl_conn *k, const char *line)
{
	struct gpu *g = arg;
	unsigned long long v;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	unsigned held = 0, freed;

	if (ctl_parse_nums(line, &v, 1) < 0 || v != FEEDFS_IOCTL_VERSION) {
		reply(k->fd, "ERR", EINVAL);
		return -1;
	}
	if (getsockopt(k->fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		reply(k->fd, "ERR", (unsigned long long)errno);
		return -1;
	}
	{
		char head[64];

		snprintf(head, sizeof(head), "OK %d %u\n", FEEDFS_IOCTL_VERSION,
			 FEEDFS_CAP_HOST | FEEDFS_CAP_BATCH);
		if (util_send_all(k->fd, head, strlen(head)) < 0)
			return -1;
	}
	GPU_STAT_ADD(g, channels, 1);
	for (;;) {
		char req[LINE_MAX_D];
		uint64_t id = 0;
		int64_t e;

		if (util_read_line(k->fd, req, sizeof(req)) < 0 || !req[0] ||
		    (req[1] != ' ' && req[1] != '\0'))
			break;
		if (req[0] == 'M' && ctl_parse_nums(req + 2, &v, 1) == 0) {
			int fd = recv_fd(k->fd);

			if (fd == -2)
				break;
			e = fd < 0 ? -EBADF : region_add(g, k, cred.uid, fd, v, held, &id);
			if (fd >= 0)
				close(fd);      /* the mapping keeps the memory */
			if (e == 0)
				held++;
			if ((e < 0 ? reply(k->fd, "ERR", (unsigned long long)-e)
				   : reply(k->fd, "OK", id)) < 0)
				break;
		} else if (req[0] == 'U' && ctl_parse_nums(req + 2, &v, 1) == 0) {
			e = region_del(g, k, v);
			if (e == 0)
				held--;
			if ((e < 0 ? reply(k->fd, "ERR", (unsigned long long)-e)
				   : reply(k->fd, "OK", 0)) < 0)
				break;
		} else {
			reply(k->fd, "ERR", EINVAL);
			break;
		}
	}
	freed = chan_release(g, k);
	if (freed) {
		GPU_STAT_ADD(g, freed_at_close, freed);
		log_info(TAG, "channel of pid %d closed holding %u region(s): freed", (int)cred.pid,
			 freed);
	}
	return -1;
}

void gpu_ctl_register(struct gpu *g, struct ctl_config *cfg)
{
	BUG_ON(cfg->n_extra >= sizeof(cfg->extra) / sizeof(cfg->extra[0]));
	cfg->extra[cfg->n_extra++] = (struct ctl_verb){ 'D', handle_device, g };
}

uint64_t gpu_regions(struct gpu *g)
{
	uint64_t n;

	pthread_mutex_lock(&g->mu);
	n = g->n_regions;
	pthread_mutex_unlock(&g->mu);
	return n;
}
