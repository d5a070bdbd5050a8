/* pt_floor: the least a FUSE daemon can do per open of a passthrough file on
 * this machine. Not part of feedfs and not a test: a bench probe
 * (bench/pt_floor.py) that answers "how close to the local disk can the
 * small-file epoch over promoted objects get, whatever the daemon does?".
 *
 * No libfuse: N threads read /dev/fuse and answer the kernel protocol
 * directly. A read-only view of DIR: LOOKUP and GETATTR from fstatat (an hour
 * of entry and attribute validity), OPEN with FOPEN_PASSTHROUGH and a backing
 * id registered on the node's first open and kept for the life of the mount
 * (what feedfs's kept ids do), RELEASE answered at once, FORGET ignored, no
 * directory listing (ENOSYS: the bench opens files by name). Nothing is
 * fetched or checked: every open is a table lookup and one write.
 *
 * Usage (root, Linux 6.9+): pt_floor [-t THREADS] DIR MOUNTPOINT
 * Runs in the foreground until unmounted (umount MOUNTPOINT). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/fuse_passthrough.h"

#define MAXN (1u << 16)             /* nodes; the bench has ~2,030 */
#define BUFSZ (FUSE_MIN_READ_BUFFER + (1u << 17))

struct node {
	char *path;                 /* below DIR; "." for the root */
	int32_t backing;            /* 0 until the first open */
};

static struct node nodes[MAXN];     /* index = nodeid; 1 is the root */
static uint32_t nnodes = 2;
static uint32_t slots[MAXN * 2];    /* path hash -> node index (open addressing) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int dev_fd, dir_fd;

static uint32_t hash(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s)
		h = (h ^ (uint8_t)*s++) * 16777619u;
	return h;
}

/* The node of path, made on first sight. Returns its id, 0 when full. */
static uint64_t node_of(const char *path)
{
	uint32_t i = hash(path) & (MAXN * 2 - 1);
	uint64_t id = 0;

	pthread_mutex_lock(&lock);
	for (;; i = (i + 1) & (MAXN * 2 - 1)) {
		if (!slots[i]) {
			if (nnodes < MAXN) {
				id = nnodes++;
				nodes[id].path = strdup(path);
				slots[i] = (uint32_t)id;
			}
			break;
		}
		if (!strcmp(nodes[slots[i]].path, path)) {
			id = slots[i];
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return id;
}

static void attr_of(const struct stat *st, uint64_t id, struct fuse_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->ino = id;
	a->size = (uint64_t)st->st_size;
	a->blocks = (uint64_t)st->st_blocks;
	a->mtime = (uint64_t)st->st_mtim.tv_sec;
	a->mtimensec = (uint32_t)st->st_mtim.tv_nsec;
	a->atime = a->mtime;
	a->ctime = a->mtime;
	a->mode = st->st_mode & (S_IFMT | 0555);
	a->nlink = 1;
	a->blksize = 4096;
}

static void reply(uint64_t unique, int err, const void *out, size_t n)
{
	struct fuse_out_header h = { .len = (uint32_t)(sizeof(h) + (err ? 0 : n)),
				     .error = -err, .unique = unique };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)out, err ? 0 : n } };

	if (writev(dev_fd, iov, 2) < 0 && errno != ENOENT)
		perror("pt_floor: writev");
}

static void do_init(const struct fuse_in_header *in, const struct fuse_init_in *i)
{
	struct fuse_pt_init_out o = {
		.major = FUSE_KERNEL_VERSION, .minor = FUSE_PT_MINOR,
		.max_readahead = i->max_readahead,
		.flags = FUSE_ASYNC_READ | FUSE_MAX_PAGES | FUSE_INIT_EXT | FUSE_PARALLEL_DIROPS,
		.max_background = 64, .congestion_threshold = 48,
		.max_write = 1u << 17, .time_gran = 1, .max_pages = 32,
		.flags2 = FUSE_PT_FLAGS2_PASSTHROUGH, .max_stack_depth = 1,
	};

	if (i->minor < FUSE_PT_MINOR) {
		fprintf(stderr, "pt_floor: kernel protocol 7.%u has no passthrough\n", i->minor);
		exit(1);
	}
	reply(in->unique, 0, &o, sizeof(o));
}

static void do_lookup(const struct fuse_in_header *in, const char *name)
{
	char path[4096];
	struct fuse_entry_out e;
	struct stat st;
	const char *parent = nodes[in->nodeid].path;
	uint64_t id;

	snprintf(path, sizeof(path), "%s/%s", parent, name);
	if (fstatat(dir_fd, path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		reply(in->unique, errno, NULL, 0);
		return;
	}
	id = node_of(path);
	if (!id) {
		reply(in->unique, ENOMEM, NULL, 0);
		return;
	}
	memset(&e, 0, sizeof(e));
	e.nodeid = id;
	e.entry_valid = 3600;
	e.attr_valid = 3600;
	attr_of(&st, id, &e.attr);
	reply(in->unique, 0, &e, sizeof(e));
}

static void do_getattr(const struct fuse_in_header *in)
{
	struct fuse_attr_out o;
	struct stat st;

	if (fstatat(dir_fd, nodes[in->nodeid].path, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		reply(in->unique, errno, NULL, 0);
		return;
	}
	memset(&o, 0, sizeof(o));
	o.attr_valid = 3600;
	attr_of(&st, in->nodeid, &o.attr);
	reply(in->unique, 0, &o, sizeof(o));
}

static void do_open(const struct fuse_in_header *in)
{
	struct node *n = &nodes[in->nodeid];
	struct fuse_pt_open_out o = { .open_flags = FUSE_PT_FOPEN_PASSTHROUGH | FOPEN_NOFLUSH };

	pthread_mutex_lock(&lock);
	if (!n->backing) {
		struct fuse_pt_backing_map m = { .fd = openat(dir_fd, n->path, O_RDONLY) };

		if (m.fd >= 0) {
			n->backing = ioctl(dev_fd, FUSE_PT_DEV_IOC_BACKING_OPEN, &m);
			close(m.fd);
		}
		if (n->backing <= 0) {
			perror("pt_floor: backing open");
			n->backing = 0;
		}
	}
	o.backing_id = n->backing;
	pthread_mutex_unlock(&lock);
	if (!o.backing_id)
		reply(in->unique, EIO, NULL, 0);
	else
		reply(in->unique, 0, &o, sizeof(o));
}

static void *serve(void *arg)
{
	char *buf = malloc(BUFSZ);

	(void)arg;
	for (;;) {
		ssize_t got = read(dev_fd, buf, BUFSZ);
		const struct fuse_in_header *in = (const void *)buf;
		const void *body = buf + sizeof(*in);

		if (got < 0) {
			if (errno == EINTR || errno == ENOENT || errno == EAGAIN)
				continue;
			if (errno != ENODEV)
				perror("pt_floor: read");
			exit(0);
		}
		switch (in->opcode) {
		case FUSE_INIT:
			do_init(in, body);
			break;
		case FUSE_LOOKUP:
			do_lookup(in, body);
			break;
		case FUSE_GETATTR:
			do_getattr(in);
			break;
		case FUSE_OPEN:
			do_open(in);
			break;
		case FUSE_RELEASE:
		case FUSE_FLUSH:
			reply(in->unique, 0, NULL, 0);
			break;
		case FUSE_FORGET:
		case FUSE_BATCH_FORGET:
		case FUSE_INTERRUPT:
			break;
		case FUSE_DESTROY:
			reply(in->unique, 0, NULL, 0);
			exit(0);
		default:
			reply(in->unique, ENOSYS, NULL, 0);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = 16, opt;
	char mopts[256];

	while ((opt = getopt(argc, argv, "t:")) != -1) {
		if (opt != 't')
			goto usage;
		threads = atoi(optarg);
	}
	if (argc - optind != 2 || threads < 1)
		goto usage;
	dir_fd = open(argv[optind], O_RDONLY | O_DIRECTORY);
	dev_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (dir_fd < 0 || dev_fd < 0) {
		perror("pt_floor: open");
		return 1;
	}
	nodes[1].path = ".";
	slots[hash(".") & (MAXN * 2 - 1)] = 1;
	snprintf(mopts, sizeof(mopts),
		 "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev_fd);
	if (mount("pt_floor", argv[optind + 1], "fuse.pt_floor", MS_NOSUID | MS_NODEV | MS_RDONLY,
		  mopts) < 0) {
		perror("pt_floor: mount");
		return 1;
	}
	for (int i = 1; i < threads; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, serve, NULL))
			return 1;
	}
	serve(NULL);
	return 0;
usage:
	fprintf(stderr, "usage: pt_floor [-t THREADS] DIR MOUNTPOINT\n");
	return 2;
}
