/* fuse_ceiling: the fastest a FUSE daemon can serve a local directory on this
 * machine, measured the way feedfs is mounted. Not part of feedfs and not a test:
 * a bench probe (bench/fuse_ceiling.sh) that answers "how much of the gap between
 * feedfs's disk cache and a local `dd` is FUSE itself?".
 *
 * A read-only low-level passthrough of DIR with the same connection settings as
 * src/fs/fs.c (1 MiB max_read, async reads, readdirplus off here since lookups
 * are cached for an hour, no keep_cache, noflush, a multi-threaded loop of at
 * most 64 workers). Two ways to answer a read:
 *   splice  fuse_reply_data() with an fd-backed buffer: libfuse splices the
 *           file's page-cache pages to /dev/fuse (no copy through the daemon);
 *   copy    pread() into a per-thread buffer, then fuse_reply_buf(): one copy in
 *           the daemon, the shape of feedfs's reply from a segment.
 * With --direct the files are opened O_DIRECT (no page cache of the source),
 * which is what feedfs's slab reads do.
 *
 * Usage: fuse_ceiling [--copy] [--direct] [--readahead-kb N] DIR MOUNTPOINT
 * (foreground; unmount with fusermount3 -u, or SIGTERM). --readahead-kb sets the
 * mount's /sys/class/bdi/MAJ:MIN/read_ahead_kb once INIT is answered, as feedfs
 * does as root with its part size (8192 by default). Nodes are pointers to a small struct holding
 * the path below DIR (no fd each: 20,000 files would exceed the fd limit);
 * forget frees them. Files are opened with keep_cache, as feedfs opens an object
 * whose ETag has not changed. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define MAX_READ (1u << 20)

struct node {
	char *path;             /* relative to root_fd; "." for the root */
	uint64_t nlookup;       /* guarded by node_lock */
};

static pthread_mutex_t node_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node root_node = { .path = "." };
static int root_fd;
static int copy_mode, direct_mode;
static pthread_key_t buf_key;
static unsigned readahead_kb;
static const char *mount_path;

static struct node *node_of(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID ? &root_node : (struct node *)(uintptr_t)ino;
}

static void ce_init(void *userdata, struct fuse_conn_info *conn)
{
	conn->max_read = MAX_READ;
	conn->max_readahead = MAX_READ;
	conn->max_write = MAX_READ;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE | FUSE_CAP_SPLICE_READ);
	if (!copy_mode && (conn->capable & FUSE_CAP_SPLICE_WRITE))
		conn->want |= FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE;
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static void ce_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct node *p = node_of(parent), *n;
	struct fuse_entry_param e;
	char *path;

	memset(&e, 0, sizeof(e));
	if (asprintf(&path, "%s/%s", p->path, name) < 0) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (fstatat(root_fd, path, &e.attr, AT_SYMLINK_NOFOLLOW) < 0 ||
	    !(n = calloc(1, sizeof(*n)))) {
		int err = errno ? errno : ENOMEM;

		free(path);
		fuse_reply_err(req, err);
		return;
	}
	n->path = path;
	n->nlookup = 1;
	e.ino = (fuse_ino_t)(uintptr_t)n;
	e.attr_timeout = e.entry_timeout = 3600.0;
	fuse_reply_entry(req, &e);
}

static void ce_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = node_of(ino);
	int gone;

	pthread_mutex_lock(&node_lock);
	n->nlookup -= nlookup;
	gone = n != &root_node && n->nlookup == 0;
	pthread_mutex_unlock(&node_lock);
	if (gone) {
		free(n->path);
		free(n);
	}
	fuse_reply_none(req);
}

static void ce_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	if (fstatat(root_fd, node_of(ino)->path, &st, AT_SYMLINK_NOFOLLOW) < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_attr(req, &st, 3600.0);
}

static int reopen(fuse_ino_t ino, int flags)
{
	return openat(root_fd, node_of(ino)->path, flags | O_NOFOLLOW | O_CLOEXEC);
}

static void ce_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd = reopen(ino, O_RDONLY | O_DIRECTORY);
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		int err = errno;

		if (fd >= 0)
			close(fd);
		fuse_reply_err(req, err);
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	fuse_reply_open(req, fi);
}

/* Answers from telldir positions; one reply buffer per call. */
static void ce_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	DIR *d = (DIR *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0;
	struct dirent *de;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	seekdir(d, off);
	while ((de = readdir(d))) {
		struct stat st = { .st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12 };
		size_t n = fuse_add_direntry(req, buf + used, size - used, de->d_name, &st,
					     telldir(d));

		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void ce_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	closedir((DIR *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void ce_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd;

	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fd = reopen(ino, O_RDONLY | (direct_mode ? O_DIRECT : 0));
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fi->fh = (uint64_t)fd;
	fi->noflush = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

static void ce_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	if (copy_mode || direct_mode) {
		char *buf = pthread_getspecific(buf_key);
		ssize_t n;

		if (!buf) {
			if (posix_memalign((void **)&buf, 4096, MAX_READ)) {
				fuse_reply_err(req, ENOMEM);
				return;
			}
			pthread_setspecific(buf_key, buf);
		}
		if (size > MAX_READ)
			size = MAX_READ;
		n = pread((int)fi->fh, buf, size, off);
		if (n < 0)
			fuse_reply_err(req, errno);
		else
			fuse_reply_buf(req, buf, (size_t)n);
		return;
	}
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);

	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = (int)fi->fh;
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

static void ce_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

/* stat() of the mount waits until the loop has answered INIT; the kernel only
 * takes a larger readahead after that. */
static void *readahead_main(void *arg)
{
	char sys[96];
	struct stat st;
	FILE *f;

	if (stat(mount_path, &st) < 0)
		return NULL;
	snprintf(sys, sizeof(sys), "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev),
		 minor(st.st_dev));
	f = fopen(sys, "w");
	if (!f || fprintf(f, "%u\n", readahead_kb) < 0 || fclose(f) != 0)
		fprintf(stderr, "fuse_ceiling: cannot set %s\n", sys);
	return NULL;
}

static const struct fuse_lowlevel_ops ops = {
	.init = ce_init,
	.lookup = ce_lookup,
	.forget = ce_forget,
	.getattr = ce_getattr,
	.opendir = ce_opendir,
	.readdir = ce_readdir,
	.releasedir = ce_releasedir,
	.open = ce_open,
	.read = ce_read,
	.release = ce_release,
};

int main(int argc, char **argv)
{
	char *fargv[] = { argv[0], "-o", "ro,default_permissions,noatime,fsname=fuse_ceiling,"
			  "max_read=1048576", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *lcfg;
	struct fuse_session *se;
	int i = 1, rc;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--copy"))
			copy_mode = 1;
		else if (!strcmp(argv[i], "--direct"))
			direct_mode = 1;
		else if (!strcmp(argv[i], "--readahead-kb") && i + 1 < argc)
			readahead_kb = (unsigned)strtoul(argv[++i], NULL, 10);
		else
			break;
	}
	if (argc - i != 2) {
		fprintf(stderr, "usage: %s [--copy] [--direct] [--readahead-kb N] DIR MOUNTPOINT\n",
			argv[0]);
		return 2;
	}
	root_fd = open(argv[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root_fd < 0) {
		perror(argv[i]);
		return 1;
	}
	root_node.nlookup = 1;
	pthread_key_create(&buf_key, free);
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se || fuse_set_signal_handlers(se) || fuse_session_mount(se, argv[i + 1]))
		return 1;
	mount_path = argv[i + 1];
	if (readahead_kb) {
		pthread_t t;

		if (pthread_create(&t, NULL, readahead_main, NULL) == 0)
			pthread_detach(t);
	}
	lcfg = fuse_loop_cfg_create();
	fuse_loop_cfg_set_max_threads(lcfg, 64);
	fuse_loop_cfg_set_idle_threads(lcfg, 16);
	rc = fuse_session_loop_mt(se, lcfg);
	fuse_loop_cfg_destroy(lcfg);
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc ? 1 : 0;
}
