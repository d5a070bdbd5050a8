/*
 * libfeedfs — the client library (include/feedfs/libfeedfs.h).
 *
 * DESIGN
 * Self-contained: it links nothing of the daemon, so that a training process
 * loads a small .so. It finds a mount's control socket by the daemon's own
 * rule (ctl_socket_path in src/ctl/ctl.c: the runtime dir, then
 * "ctl-<FNV-1a-64 of the mount point>.sock"), speaks the D verb
 * (src/gpu/region.c) on a channel it keeps open, and the O verb
 * (src/ctl/order.c) on a connection per call. A channel's lock is held for
 * one request and its reply, so threads may share a channel.
 */
#include "feedfs/libfeedfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))
#define FEEDFS_FSTYPE "fuse.feedfs"

struct feedfs_channel {
	pthread_mutex_t mu;             /* one request and its reply */
	int fd;
};

/* ---- finding the mount and its socket ---- */

/* mountinfo escapes ' ', '\t', '\n', '\\' as \ooo: undo it in place. */
static void unescape(char *s)
{
	char *o = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
}

API int feedfs_mount_point(const char *path, char *out, size_t out_len)
{
	char real[PATH_MAX], *line = NULL;
	size_t cap = 0, best = 0;
	int found = 0;
	FILE *f;

	if (!realpath(path, real))
		return -errno;
	f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *fld[6], *tok, *fstype = NULL;
		int n = 0;
		size_t ml;

		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			if (n < 6)
				fld[n] = tok;
			if (n >= 6 && strcmp(tok, "-") == 0) {
				fstype = strtok_r(NULL, " \n", &save);
				break;
			}
			n++;
		}
		if (n < 6 || !fstype || strcmp(fstype, FEEDFS_FSTYPE) != 0)
			continue;
		unescape(fld[4]);
		ml = strlen(fld[4]);
		if (!(strcmp(real, fld[4]) == 0 ||
		      (strncmp(real, fld[4], ml) == 0 && (real[ml] == '/' || ml == 1))))
			continue;
		if (ml >= best) {
			if (ml + 1 > out_len) {
				free(line);
				fclose(f);
				return -ENAMETOOLONG;
			}
			memcpy(out, fld[4], ml + 1);
			best = ml;
			found = 1;
		}
	}
	free(line);
	fclose(f);
	return found ? 0 : -ENOENT;
}

static int socket_path(const char *mp, char *out, size_t out_len)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	uint64_t h = 0xcbf29ce484222325ull;
	char dir[256];
	int n;

	for (const unsigned char *p = (const unsigned char *)mp; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	if (geteuid() == 0)
		n = snprintf(dir, sizeof(dir), "/run/feedfs");
	else if (x && x[0] == '/')
		n = snprintf(dir, sizeof(dir), "%s/feedfs", x);
	else
		n = snprintf(dir, sizeof(dir), "/tmp/feedfs-%u", (unsigned)geteuid());
	if (n < 0 || (size_t)n >= sizeof(dir))
		return -ENAMETOOLONG;
	n = snprintf(out, out_len, "%s/ctl-%016llx.sock", dir, (unsigned long long)h);
	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

/* A connection to the control socket of the mount holding path; fd or -errno. */
static int connect_mount(const char *path, char *mp, size_t mp_len)
{
	struct sockaddr_un sa;
	int fd, e;

	e = feedfs_mount_point(path, mp, mp_len);
	if (e < 0)
		return e;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	e = socket_path(mp, sa.sun_path, sizeof(sa.sun_path));
	if (e < 0)
		return e;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static int send_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EPIPE;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

/* One reply line; "OK <v...>" -> 0 with the rest in line, "ERR <e>" -> -e. */
static int read_reply(int fd, char *line, size_t cap)
{
	size_t i = 0;

	while (i + 1 < cap) {
		ssize_t r = read(fd, line + i, 1);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		if (line[i] == '\n')
			break;
		i++;
	}
	line[i] = '\0';
	if (strncmp(line, "OK", 2) == 0 && (line[2] == ' ' || line[2] == '\0'))
		return 0;
	if (strncmp(line, "ERR ", 4) == 0 && atoi(line + 4) > 0)
		return -atoi(line + 4);
	return -EPROTO;
}

/* ---- the channel ---- */

API int feedfs_open(const char *path, struct feedfs_channel **out)
{
	char mp[PATH_MAX], line[128];
	struct feedfs_channel *ch;
	int fd, e;

	fd = connect_mount(path, mp, sizeof(mp));
	if (fd < 0)
		return fd;
	snprintf(line, sizeof(line), "D %d\n", FEEDFS_IOCTL_VERSION);
	e = send_all(fd, line, strlen(line));
	if (e == 0)
		e = read_reply(fd, line, sizeof(line));
	if (e == -EPIPE)
		e = -EPROTO;    /* an older daemon closes on a verb it does not know */
	if (e < 0) {
		close(fd);
		return e;
	}
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		close(fd);
		return -ENOMEM;
	}
	pthread_mutex_init(&ch->mu, NULL);
	ch->fd = fd;
	*out = ch;
	return 0;
}

API void feedfs_close(struct feedfs_channel *ch)
{
	if (!ch)
		return;
	close(ch->fd);
	pthread_mutex_destroy(&ch->mu);
	free(ch);
}

API int feedfs_register_fd(struct feedfs_channel *ch, int memfd, size_t size, uint64_t *id)
{
	char line[64], byte = 'F', ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	struct cmsghdr *c;
	ssize_t w;
	int e;

	memset(ctl, 0, sizeof(ctl));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &memfd, sizeof(int));
	snprintf(line, sizeof(line), "M %zu\n", size);
	pthread_mutex_lock(&ch->mu);
	/* The fd travels with a byte of its own, after the line: the daemon
	 * reads the line a byte at a time and then this one with recvmsg. */
	e = send_all(ch->fd, line, strlen(line));
	if (e == 0) {
		do
			w = sendmsg(ch->fd, &mh, MSG_NOSIGNAL);
		while (w < 0 && errno == EINTR);
		e = w == 1 ? 0 : -errno;
	}
	if (e == 0)
		e = read_reply(ch->fd, line, sizeof(line));
	pthread_mutex_unlock(&ch->mu);
	if (e == 0) {
		char *end;

		errno = 0;
		*id = strtoull(line + 3, &end, 10);
		if (errno || *end || *id == 0)
			e = -EPROTO;
	}
	return e;
}

API int feedfs_unregister(struct feedfs_channel *ch, uint64_t id)
{
	char line[64];
	int e;

	snprintf(line, sizeof(line), "U %llu\n", (unsigned long long)id);
	pthread_mutex_lock(&ch->mu);
	e = send_all(ch->fd, line, strlen(line));
	if (e == 0)
		e = read_reply(ch->fd, line, sizeof(line));
	pthread_mutex_unlock(&ch->mu);
	return e;
}

API int feedfs_region_new(struct feedfs_channel *ch, size_t size, struct feedfs_region *out)
{
	int fd, e;
	void *p;

	memset(out, 0, sizeof(*out));
	out->memfd = -1;
	if (size == 0)
		return -EINVAL;
	fd = memfd_create("feedfs-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
		e = -errno;
		close(fd);
		return e;
	}
	/* Populated here: the pages are then this process's (its memory cgroup
	 * pays for them, not the daemon's, which would otherwise fault them in
	 * at its first copy), and no copy of the daemon waits on page faults. */
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (p == MAP_FAILED) {
		e = -errno;
		close(fd);
		return e;
	}
	e = feedfs_register_fd(ch, fd, size, &out->id);
	if (e < 0) {
		munmap(p, size);
		close(fd);
		return e;
	}
	out->base = p;
	out->size = size;
	out->memfd = fd;
	return 0;
}

API int feedfs_region_free(struct feedfs_channel *ch, struct feedfs_region *r)
{
	int e = r->id ? feedfs_unregister(ch, r->id) : 0;

	if (r->base)
		munmap(r->base, r->size);
	if (r->memfd >= 0)
		close(r->memfd);
	memset(r, 0, sizeof(*r));
	r->memfd = -1;
	return e;
}

/* ---- reads ---- */

API int feedfs_caps(int fd, struct feedfs_ioc_caps *out)
{
	memset(out, 0, sizeof(*out));
	out->version = FEEDFS_IOCTL_VERSION;
	out->size = sizeof(*out);
	return ioctl(fd, FEEDFS_IOC_CAPS, out) < 0 ? -errno : 0;
}

static ssize_t read_one(int fd, const struct feedfs_ioc_dest *dest, uint64_t file_off, size_t len)
{
	struct feedfs_ioc_read q;

	memset(&q, 0, sizeof(q));
	q.version = FEEDFS_IOCTL_VERSION;
	q.size = sizeof(q);
	q.file_offset = file_off;
	q.length = len;
	q.dest = *dest;
	if (ioctl(fd, FEEDFS_IOC_READ, &q) < 0)
		return -errno;
	return (ssize_t)q.result;
}

API ssize_t feedfs_read_host(int fd, uint64_t region, uint64_t region_off, uint64_t file_off,
			     size_t len)
{
	struct feedfs_ioc_dest d = { .kind = FEEDFS_DEST_REGION, .region = region,
				     .offset = region_off };

	return read_one(fd, &d, file_off, len);
}

API ssize_t feedfs_read_device(int fd, const void *ipc_handle, uint64_t dev_off,
			       uint64_t file_off, size_t len)
{
	struct feedfs_ioc_dest d = { .kind = FEEDFS_DEST_CUDA_IPC, .offset = dev_off };

	memcpy(d.ipc_handle, ipc_handle, sizeof(d.ipc_handle));
	return read_one(fd, &d, file_off, len);
}

API ssize_t feedfs_read_batch(int fd, const struct feedfs_ioc_dest *dest,
			      struct feedfs_extent *ext, size_t n)
{
	struct feedfs_ioc_batch *b = malloc(sizeof(*b));
	ssize_t total = 0;
	int err = 0;

	if (!b)
		return -ENOMEM;
	for (size_t at = 0; at < n; at += FEEDFS_BATCH_MAX) {
		size_t k = n - at < FEEDFS_BATCH_MAX ? n - at : FEEDFS_BATCH_MAX;

		if (err) {
			for (size_t i = 0; i < k; i++)
				ext[at + i].result = -ECANCELED;
			continue;
		}
		memset(b, 0, sizeof(*b));
		b->version = FEEDFS_IOCTL_VERSION;
		b->size = sizeof(*b);
		b->count = (uint32_t)k;
		b->dest = *dest;
		for (size_t i = 0; i < k; i++) {
			b->ext[i].file_offset = ext[at + i].file_offset;
			b->ext[i].length = ext[at + i].length;
			b->ext[i].dest_offset = ext[at + i].dest_offset;
		}
		if (ioctl(fd, FEEDFS_IOC_BATCH, b) < 0) {
			err = errno;
			for (size_t i = 0; i < k; i++)
				ext[at + i].result = i ? -ECANCELED : -err;
			continue;
		}
		for (size_t i = 0; i < k; i++)
			ext[at + i].result = b->ext[i].result;
		total += b->result;
		err = b->error;
	}
	free(b);
	return err ? -err : total;
}

/* ---- the loader's order (the O verb) ---- */

/* A path as the daemon takes it (relative, no empty, . or .. component, no
 * newline); rel is where it starts. 0 or -EINVAL. */
static int order_path(const char *mp, const char *p, const char **rel)
{
	size_t ml = strlen(mp);
	const char *s;

	if (p[0] == '/') {
		if (strncmp(p, mp, ml) != 0 || (ml > 1 && p[ml] != '/'))
			return -EINVAL;
		p += ml > 1 ? ml + 1 : 1;
	}
	if (!*p || strchr(p, '\n'))
		return -EINVAL;
	for (s = p; *s; ) {
		const char *e = strchr(s, '/');
		size_t n = e ? (size_t)(e - s) : strlen(s);

		if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			return -EINVAL;
		s += n + (e != NULL);
		if (e && !*s)
			return -EINVAL;         /* a trailing slash: not a file */
	}
	*rel = p;
	return 0;
}

/* A stream name as the daemon takes it (hint_stream_check): 1 to 64 of
 * [A-Za-z0-9._-]; NULL is the default stream. */
static int stream_ok(const char *stream)
{
	size_t n;

	if (!stream)
		return 1;
	n = strlen(stream);
	if (n == 0 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)stream[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

static int order_request(const char *mountpoint, const char *stream, const char *payload,
			 size_t len, size_t n)
{
	char mp[PATH_MAX], line[160];
	int fd, e;

	if (!stream_ok(stream))
		return -EINVAL;
	fd = connect_mount(mountpoint, mp, sizeof(mp));
	if (fd < 0)
		return fd;
	snprintf(line, sizeof(line), "O %zu %zu%s%s\n", n, len, stream ? " " : "",
		 stream ? stream : "");
	e = send_all(fd, line, strlen(line));
	if (e == 0 && len)
		e = send_all(fd, payload, len);
	if (e == 0)
		e = read_reply(fd, line, sizeof(line));
	close(fd);
	return e;
}

API int feedfs_send_order(const char *mountpoint, const char *stream, const char *const *paths,
			 size_t n)
{
	char mp[PATH_MAX], *buf;
	size_t len = 0, at = 0;
	int e;

	if (n == 0)
		return -EINVAL;
	e = feedfs_mount_point(mountpoint, mp, sizeof(mp));
	if (e < 0)
		return e;
	for (size_t i = 0; i < n; i++) {
		const char *rel;

		e = order_path(mp, paths[i], &rel);
		if (e < 0)
			return e;
		len += strlen(rel) + 1;
	}
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *rel;
		size_t l;

		order_path(mp, paths[i], &rel);
		l = strlen(rel);
		memcpy(buf + at, rel, l);
		buf[at + l] = '\n';
		at += l + 1;
	}
	e = order_request(mountpoint, stream, buf, len, n);
	free(buf);
	return e;
}

API int feedfs_clear_order(const char *mountpoint, const char *stream)
{
	return order_request(mountpoint, stream, NULL, 0, 0);
}
