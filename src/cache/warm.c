/*
 * warm — fill a running mount's block cache ahead of a job (`feedfs warm`).
 *
 * DESIGN
 * Daemon side. One listener thread accepts on a unix socket (0600 in a 0700
 * dir; the path is derived from the mount point, cache_warm_socket_path) and
 * starts one thread per connection, at most WARM_MAX_CONNS at once. A
 * connection handles one request at a time: it reads a mount-relative path,
 * resolves it to (key, ETag, size) through the daemon's resolve function (a
 * HEAD) and fetches the object block by block through the cache's fetcher, with
 * WARM_DEPTH blocks in flight into buffers it owns. The bytes go nowhere: the
 * point is the cache's write-behind. So warming reads S3 once per missing block
 * and the disk once per cached one (to verify it), and never goes through FUSE
 * or the kernel page cache.
 * Interrupting is safe: between blocks the connection polls for the peer having
 * gone; it then waits for the blocks in flight (their done callbacks write
 * into its buffers) and exits. cache_warm_stop shuts every connection down the
 * same way before the cache is destroyed.
 * Locks: warm.mu guards the connection list and count; conn.mu guards its
 * in-flight count and is the only lock taken in done (on the cache thread).
 *
 * Client side (cache_warm_main). Finds the feedfs mount holding each PATH in
 * /proc/self/mountinfo, walks directories (metadata only), and has --jobs
 * connections work through the file list. Progress: one rewritten line on a
 * terminal, plain lines every few seconds otherwise.
 */
#include "feedfs/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "warm"
#define WARM_MAX_CONNS 64
#define SHARE_MAX_CONNS 64
#define SHARE_SEND_TIMEOUT_S 60
#define WARM_DEPTH 2
#define WARM_PATH_MAX 8192
#define WARM_ETAG_MAX 128

/* ---------- socket path ---------- */

static uint64_t fnv1a64(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int runtime_dir(char *out, size_t out_len)
{
	const char *x = getenv("XDG_RUNTIME_DIR");
	int n;

	if (geteuid() == 0)
		n = snprintf(out, out_len, "/run/feedfs");
	else if (x && x[0] == '/')
		n = snprintf(out, out_len, "%s/feedfs", x);
	else
		n = snprintf(out, out_len, "/tmp/feedfs-%u", (unsigned)geteuid());
	return n < 0 || (size_t)n >= out_len ? -ENAMETOOLONG : 0;
}

int cache_warm_socket_path(const char *mount_abs, char *out, size_t out_len)
{
	char dir[256];
	int n, e = runtime_dir(dir, sizeof(dir));

	if (e < 0)
		return e;
	n = snprintf(out, out_len, "%s/ctl-%016llx.sock", dir,
		     (unsigned long long)fnv1a64(mount_abs));
	if (n < 0 || (size_t)n >= out_len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

/* ---------- daemon side ---------- */

struct warm_conn {
	struct warm_conn *next;
	struct cache_warm *w;
	int fd;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned inflight;
	ssize_t err;                    /* first failure of a block, or 0 */
};

struct cache_warm {
	struct fetcher *fetcher;        /* through a cache: ours, or the owner's */
	cache_resolve_fn resolve;       /* NULL on a share socket: no W requests */
	void *resolve_arg;
	char *share_id;                 /* share socket: what an attacher must name */
	size_t share_id_len;
	struct rd_budget *budget;       /* share socket: its read buffers are charged here */
	uint32_t max_read;              /* share socket: largest R */
	uint32_t block;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd;
	int stop_pipe[2];
	pthread_t listener;
	/* Guarded by mu. */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct warm_conn *conns;
	unsigned nconns;
	int stopping;
};

/* Parse exactly n unsigned decimal numbers separated by single spaces. */
static int parse_nums(const char *s, unsigned long long *v, int n)
{
	for (int i = 0; i < n; i++) {
		char *end;

		if (*s < '0' || *s > '9')
			return -1;
		errno = 0;
		v[i] = strtoull(s, &end, 10);
		if (errno || (i + 1 < n ? *end != ' ' : *end != '\0'))
			return -1;
		s = end + (i + 1 < n);
	}
	return 0;
}

/* The peer closed (or the daemon is stopping: the fd was shut down). */
static int peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

struct warm_io {
	struct warm_conn *conn;
	size_t len;
	int busy;               /* under conn->mu: a fetch owns this buffer */
	struct fetch_req req;
};

/* Start one fetch into buf through the server's fetcher. */
static int io_fetch(struct warm_io *io, const char *key, size_t klen, const char *etag,
		    uint64_t size, uint64_t off, size_t len, char *buf);

/* Cache thread: must not block beyond conn->mu. */
static void block_done(struct fetch_req *req, ssize_t result)
{
	struct warm_io *io = req->done_arg;
	struct warm_conn *k = io->conn;

	pthread_mutex_lock(&k->mu);
	if (result != (ssize_t)io->len && k->err == 0)
		k->err = result < 0 ? result : -EIO;
	io->busy = 0;
	k->inflight--;
	pthread_cond_broadcast(&k->cv);
	pthread_mutex_unlock(&k->mu);
}

static int io_fetch(struct warm_io *io, const char *key, size_t klen, const char *etag,
		    uint64_t size, uint64_t off, size_t len, char *buf)
{
	io->req = (struct fetch_req){
		.key = key, .key_len = klen, .etag = etag, .obj_size = size,
		.off = off, .len = len, .buf = buf, .done = block_done, .done_arg = io,
	};
	return fetcher_fetch(io->conn->w->fetcher, &io->req);
}

/* Fetch every block of one object through the cache. Returns bytes or -errno. */
static ssize_t warm_object(struct warm_conn *k, const char *key, size_t klen, const char *etag,
			   uint64_t size, char **bufs, struct warm_io *ios)
{
	uint32_t bs = k->w->block;
	uint64_t off = 0;
	unsigned slot = 0;
	ssize_t err = 0;

	k->err = 0;
	while (off < size && err == 0) {
		size_t n = size - off < bs ? (size_t)(size - off) : bs;
		int rc;

		pthread_mutex_lock(&k->mu);
		while (k->inflight >= WARM_DEPTH)
			pthread_cond_wait(&k->cv, &k->mu);
		err = k->err;
		if (err == 0) {
			/* Fetches complete in any order: take a buffer no fetch owns. */
			for (slot = 0; ios[slot].busy; slot++)
				BUG_ON(slot + 1 >= WARM_DEPTH);
			ios[slot].busy = 1;
			k->inflight++;
		}
		pthread_mutex_unlock(&k->mu);
		if (err)
			break;
		if (peer_gone(k->fd)) {
			pthread_mutex_lock(&k->mu);
			ios[slot].busy = 0;
			k->inflight--;
			pthread_mutex_unlock(&k->mu);
			err = -ECANCELED;
			break;
		}
		ios[slot].conn = k;
		ios[slot].len = n;
		rc = io_fetch(&ios[slot], key, klen, etag, size, off, n, bufs[slot]);
		if (rc < 0) {
			pthread_mutex_lock(&k->mu);
			ios[slot].busy = 0;
			k->inflight--;
			pthread_mutex_unlock(&k->mu);
			err = rc;
			break;
		}
		off += n;
	}
	pthread_mutex_lock(&k->mu);
	while (k->inflight)
		pthread_cond_wait(&k->cv, &k->mu);
	if (err == 0)
		err = k->err;
	pthread_mutex_unlock(&k->mu);
	return err < 0 ? err : (ssize_t)size;
}

/* One range of an object through the cache into buf (len <= block). */
static ssize_t fetch_range(struct warm_conn *k, const char *key, size_t klen, const char *etag,
			   uint64_t size, uint64_t off, size_t len, char *buf, struct warm_io *io)
{
	ssize_t err;
	int rc;

	pthread_mutex_lock(&k->mu);
	k->err = 0;
	io->busy = 1;
	k->inflight++;
	pthread_mutex_unlock(&k->mu);
	io->conn = k;
	io->len = len;
	rc = io_fetch(io, key, klen, etag, size, off, len, buf);
	pthread_mutex_lock(&k->mu);
	if (rc < 0) {
		io->busy = 0;
		k->inflight--;
	}
	while (k->inflight)
		pthread_cond_wait(&k->cv, &k->mu);
	err = rc < 0 ? rc : k->err;
	pthread_mutex_unlock(&k->mu);
	return err < 0 ? err : (ssize_t)len;
}

/* "H <n>": an attacher names the bucket and endpoint it mounts (n bytes
 * follow); only the same ones may read this cache. 1 accepted, 0 refused,
 * -1 connection error. */
static int handle_hello(struct warm_conn *k, const char *args, char *tmp)
{
	struct cache_warm *w = k->w;
	unsigned long long n;
	char reply[64];

	if (parse_nums(args, &n, 1) < 0 || n == 0 || n > WARM_PATH_MAX ||
	    util_read_all(k->fd, tmp, (size_t)n) < 0)
		return -1;
	if (n != w->share_id_len || memcmp(tmp, w->share_id, (size_t)n) != 0) {
		log_warn(TAG, "refused a mount that asked to share this cache for another "
			 "bucket or endpoint");
		snprintf(reply, sizeof(reply), "ERR %d\n", EXDEV);
		util_send_all(k->fd, reply, strlen(reply));
		return 0;
	}
	snprintf(reply, sizeof(reply), "OK %u %u\n", w->block, w->max_read);
	util_send_all(k->fd, reply, strlen(reply));
	return 1;
}

/* "R <key len> <etag len> <object size> <off> <len>", then key and ETag: the
 * bytes through the cache, "OK <len>\n" and len bytes, or "ERR <errno>\n".
 * The buffer is charged to the read budget for the length of the request, so
 * attached mounts cost the owner no memory beyond --max-memory. 0, or -1 on a
 * connection or protocol error. */
static int handle_read(struct warm_conn *k, const char *args, char *keybuf, struct warm_io *io)
{
	struct cache_warm *w = k->w;
	unsigned long long v[5];
	char etag[WARM_ETAG_MAX], reply[64], *buf = NULL;
	ssize_t r;
	int rc;

	if (parse_nums(args, v, 5) < 0 || v[0] == 0 || v[0] > WARM_PATH_MAX || v[1] == 0 ||
	    v[1] >= WARM_ETAG_MAX || v[4] == 0 || v[4] > w->max_read || v[3] > v[2] ||
	    v[4] > v[2] - v[3] || util_read_all(k->fd, keybuf, (size_t)v[0]) < 0 ||
	    util_read_all(k->fd, etag, (size_t)v[1]) < 0)
		return -1;
	etag[v[1]] = '\0';
	r = rd_budget_take(w->budget, v[4], 1);
	if (r == 0 && !(buf = malloc((size_t)v[4]))) {
		rd_budget_give(w->budget, v[4]);
		r = -ENOMEM;
	}
	if (r == 0)
		r = fetch_range(k, keybuf, (size_t)v[0], etag, v[2], v[3], (size_t)v[4], buf, io);
	if (r < 0) {
		snprintf(reply, sizeof(reply), "ERR %d\n", (int)-r);
		rc = util_send_all(k->fd, reply, strlen(reply));
	} else {
		snprintf(reply, sizeof(reply), "OK %zd\n", r);
		rc = util_send_all(k->fd, reply, strlen(reply)) < 0 ||
		     util_send_all(k->fd, buf, (size_t)r) < 0 ? -1 : 0;
	}
	if (buf) {
		free(buf);
		rd_budget_give(w->budget, v[4]);
	}
	return rc;
}

static void *conn_main(void *arg)
{
	struct warm_conn *k = arg;
	struct cache_warm *w = k->w;
	struct warm_io ios[WARM_DEPTH] = { { 0 } };
	char *bufs[WARM_DEPTH] = { NULL };
	char *path = malloc(WARM_PATH_MAX + 1);
	int ok = path != NULL, hello = 0;

	/* A share connection takes its buffer per request (handle_read). */
	for (int i = 0; i < WARM_DEPTH && ok && w->resolve; i++)
		ok = (bufs[i] = malloc(w->block)) != NULL;
	while (ok) {
		char etag[WARM_ETAG_MAX], reply[64], line[128], *key = NULL;
		unsigned long long n;
		size_t klen;
		uint64_t size;
		ssize_t r;

		if (util_read_line(k->fd, line, sizeof(line)) < 0 || !line[0] || line[1] != ' ')
			break;
		if (line[0] == 'H' && w->share_id && !hello) {
			hello = handle_hello(k, line + 2, path);
			if (hello < 0)
				break;
			continue;
		}
		if (line[0] == 'R' && hello > 0) {
			if (handle_read(k, line + 2, path, &ios[0]) < 0)
				break;
			continue;
		}
		if (line[0] != 'W' || !w->resolve || parse_nums(line + 2, &n, 1) < 0 ||
		    n == 0 || n > WARM_PATH_MAX || util_read_all(k->fd, path, (size_t)n) < 0)
			break;
		path[n] = '\0';
		r = w->resolve(w->resolve_arg, path, n, &key, &klen, etag, sizeof(etag), &size);
		if (r == 0 && !etag[0])
			r = -ENOTSUP;           /* no ETag: the cache cannot hold it */
		if (r == 0)
			r = warm_object(k, key, klen, etag, size, bufs, ios);
		free(key);
		if (r < 0) {
			log_info(TAG, "warming %s: %s", path, strerror((int)-r));
			snprintf(reply, sizeof(reply), "ERR %d\n", (int)-r);
		} else {
			snprintf(reply, sizeof(reply), "OK %lld\n", (long long)r);
		}
		util_send_all(k->fd, reply, strlen(reply));
	}
	for (int i = 0; i < WARM_DEPTH; i++)
		free(bufs[i]);
	free(path);

	pthread_mutex_lock(&w->mu);
	for (struct warm_conn **pp = &w->conns; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	w->nconns--;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	close(k->fd);
	pthread_cond_destroy(&k->cv);
	pthread_mutex_destroy(&k->mu);
	free(k);
	return NULL;
}

/* Over the connection limit: say EBUSY and close. Closing a unix socket with
 * the peer's request unread resets the peer, which may then never see the
 * answer, so read what it sent first (briefly: this is the listener). */
static void refuse_busy(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char sink[4096];

	util_send_all(fd, "ERR 16\n", 7);
	shutdown(fd, SHUT_WR);
	for (int i = 0; i < 8 && poll(&p, 1, 50) > 0; i++)
		if (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
			break;
	close(fd);
}

static void *listener_main(void *arg)
{
	struct cache_warm *w = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = w->lfd, .events = POLLIN },
				       { .fd = w->stop_pipe[0], .events = POLLIN } };
		struct warm_conn *k;
		pthread_attr_t at;
		pthread_t t;
		int fd;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (p[1].revents)
			break;
		fd = accept4(w->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&w->mu);
		if (w->stopping || w->nconns >= (w->resolve ? WARM_MAX_CONNS : SHARE_MAX_CONNS) ||
		    !(k = calloc(1, sizeof(*k)))) {
			pthread_mutex_unlock(&w->mu);
			refuse_busy(fd);
			continue;
		}
		if (w->share_id) {
			/* An attached mount that stops reading must not hold a
			 * buffer of our budget for ever: give up on it. */
			struct timeval tv = { .tv_sec = SHARE_SEND_TIMEOUT_S };

			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		}
		k->w = w;
		k->fd = fd;
		pthread_mutex_init(&k->mu, NULL);
		pthread_cond_init(&k->cv, NULL);
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &at, conn_main, k) != 0) {
			pthread_mutex_unlock(&w->mu);
			pthread_attr_destroy(&at);
			close(fd);
			free(k);
			continue;
		}
		pthread_attr_destroy(&at);
		k->next = w->conns;
		w->conns = k;
		w->nconns++;
		pthread_mutex_unlock(&w->mu);
	}
	return NULL;
}

static struct cache_warm *server_new(struct fetcher *fetcher, uint32_t block)
{
	struct cache_warm *w = calloc(1, sizeof(*w));

	if (!w)
		return NULL;
	w->lfd = w->stop_pipe[0] = w->stop_pipe[1] = -1;
	w->fetcher = fetcher;
	w->block = block;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	return w;
}

static void server_free(struct cache_warm *w)
{
	if (w->lfd >= 0)
		close(w->lfd);
	if (w->stop_pipe[0] >= 0) {
		close(w->stop_pipe[0]);
		close(w->stop_pipe[1]);
	}
	pthread_cond_destroy(&w->cv);
	pthread_mutex_destroy(&w->mu);
	free(w->share_id);
	free(w);
}

/* Bind w->path (0600; whatever was there is stale: the caller owns the path)
 * and start the listener. 0 or -errno with a line in msg. */
static int server_listen(struct cache_warm *w, const char *what, char *msg, size_t msg_len)
{
	struct sockaddr_un sa;
	mode_t old;
	int e;

	w->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (w->lfd < 0 || pipe2(w->stop_pipe, O_CLOEXEC) < 0) {
		e = -errno;
		snprintf(msg, msg_len, "%s socket: %s", what, strerror(-e));
		return e;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, w->path, strlen(w->path) + 1);
	unlink(w->path);
	old = umask(0177);
	e = bind(w->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old);
	if (e == 0 && (chmod(w->path, 0600) < 0 || listen(w->lfd, 64) < 0))
		e = -errno;
	if (e < 0) {
		snprintf(msg, msg_len, "%s socket %s: %s", what, w->path, strerror(-e));
		return e;
	}
	if (pthread_create(&w->listener, NULL, listener_main, w) != 0) {
		snprintf(msg, msg_len, "cannot start the %s thread", what);
		unlink(w->path);
		return -EAGAIN;
	}
	return 0;
}

int cache_warm_start(struct fetcher *fetcher, uint32_t block,
		     const char *mount_abs, cache_resolve_fn resolve, void *resolve_arg,
		     struct cache_warm **out, char *msg, size_t msg_len)
{
	struct cache_warm *w = server_new(fetcher, block);
	char dir[256];
	struct stat sb;
	int e;

	if (!w)
		return -ENOMEM;
	w->resolve = resolve;
	w->resolve_arg = resolve_arg;
	e = runtime_dir(dir, sizeof(dir));
	if (e == 0)
		e = cache_warm_socket_path(mount_abs, w->path, sizeof(w->path));
	if (e < 0) {
		snprintf(msg, msg_len, "warm socket path: %s", strerror(-e));
		goto fail;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		e = -errno;
		snprintf(msg, msg_len, "cannot create %s: %s", dir, strerror(-e));
		goto fail;
	}
	/* Only a dir we own and nobody else may write to holds our socket. */
	if (lstat(dir, &sb) < 0 || !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid() ||
	    (sb.st_mode & 022)) {
		e = -EPERM;
		snprintf(msg, msg_len, "%s is not a private directory owned by uid %u", dir,
			 (unsigned)geteuid());
		goto fail;
	}
	/* A socket left by a daemon that died on this mount point: the mount
	 * point is ours now (it was checked free), so is its socket path. */
	e = server_listen(w, "warm", msg, msg_len);
	if (e < 0)
		goto fail;
	log_info(TAG, "control socket %s", w->path);
	*out = w;
	return 0;
fail:
	server_free(w);
	return e;
}

int cache_share_socket_path(const char *cache_dir, char *out, size_t out_len)
{
	int n = snprintf(out, out_len, "%s/%s", cache_dir, CACHE_SHARE_SOCKET);

	if (n < 0 || (size_t)n >= out_len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

int cache_share_start(struct cache *c, const char *cache_dir, const char *id, size_t id_len,
		      struct rd_budget *budget, struct cache_warm **out, char *msg, size_t msg_len)
{
	struct cache_stats st;
	struct cache_warm *w;

	cache_get_stats(c, &st);
	w = server_new(cache_fetcher(c), st.block_size);
	int e;

	if (!w)
		return -ENOMEM;
	w->budget = budget;
	w->max_read = w->block;
	while (w->max_read > (64u << 10) && w->max_read > rd_budget_max(budget) / 4)
		w->max_read /= 2;
	w->share_id = malloc(id_len);
	if (!w->share_id) {
		server_free(w);
		return -ENOMEM;
	}
	memcpy(w->share_id, id, id_len);
	w->share_id_len = id_len;
	e = cache_share_socket_path(cache_dir, w->path, sizeof(w->path));
	if (e < 0) {
		snprintf(msg, msg_len, "the path %s/%s is too long for a unix socket", cache_dir,
			 CACHE_SHARE_SOCKET);
		server_free(w);
		return e;
	}
	/* We hold the cache dir's lock: a socket there is a dead owner's. */
	e = server_listen(w, "share", msg, msg_len);
	if (e < 0) {
		server_free(w);
		return e;
	}
	log_info(TAG, "share socket %s: other mounts of this bucket may attach", w->path);
	*out = w;
	return 0;
}

void cache_warm_stop(struct cache_warm *w)
{
	if (!w)
		return;
	if (write(w->stop_pipe[1], "x", 1) < 0) {
		/* cannot happen with an open pipe; the join below would hang */
		BUG_ON(1);
	}
	pthread_join(w->listener, NULL);
	unlink(w->path);
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	for (struct warm_conn *k = w->conns; k; k = k->next)
		shutdown(k->fd, SHUT_RDWR);
	while (w->nconns)
		pthread_cond_wait(&w->cv, &w->mu);
	pthread_mutex_unlock(&w->mu);
	server_free(w);
}

/* ---------- client side ---------- */

struct wfile {
	char *rel;                      /* relative to the mount root */
	uint64_t size;
};

struct wjob {
	char sock[sizeof(((struct sockaddr_un *)0)->sun_path)];
	struct wfile *files;
	size_t nfiles, cap;
	uint64_t total_bytes;
	atomic_size_t next;
	atomic_size_t done_files, failed;
	atomic_ullong done_bytes;
	atomic_int conn_failed;
};

/* Longest feedfs mount point that holds abs. 0, or -ENOENT. */
static int find_mount(const char *abs, char *mnt, size_t mnt_len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t cap = 0, best = 0;

	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		char *save = NULL, *tok = strtok_r(line, " ", &save), *mp, *d, *s;
		size_t l;

		for (int i = 0; tok && i < 4; i++)
			tok = strtok_r(NULL, " ", &save);
		mp = tok;
		while ((tok = strtok_r(NULL, " ", &save)) && strcmp(tok, "-"))
			;
		tok = tok ? strtok_r(NULL, " ", &save) : NULL;
		if (!mp || !tok || strcmp(tok, "fuse.feedfs"))
			continue;
		for (d = s = mp; *s; ) {     /* undo \ooo escapes */
			if (s[0] == '\\' && s[1] && s[2] && s[3]) {
				*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
				s += 4;
			} else {
				*d++ = *s++;
			}
		}
		*d = '\0';
		l = strlen(mp);
		if (l == 1)
			l = 0;                  /* "/" */
		if (strncmp(abs, mp, l) == 0 && (abs[l] == '/' || abs[l] == '\0') &&
		    strlen(mp) + 1 > best && strlen(mp) < mnt_len) {
			best = strlen(mp) + 1;
			strcpy(mnt, mp);
		}
	}
	free(line);
	fclose(f);
	return best ? 0 : -ENOENT;
}

static struct wjob *walk_job;
static size_t walk_root_len;

static int add_file(struct wjob *j, const char *abs, size_t root_len, uint64_t size)
{
	const char *rel = abs + root_len;

	while (*rel == '/')
		rel++;
	if (!*rel || strchr(rel, '\n'))
		return 0;
	if (j->nfiles == j->cap) {
		size_t nc = j->cap ? j->cap * 2 : 256;
		struct wfile *nf = realloc(j->files, nc * sizeof(*nf));

		if (!nf)
			return -ENOMEM;
		j->files = nf;
		j->cap = nc;
	}
	j->files[j->nfiles].rel = strdup(rel);
	if (!j->files[j->nfiles].rel)
		return -ENOMEM;
	j->files[j->nfiles++].size = size;
	j->total_bytes += size;
	return 0;
}

static int walk_cb(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F && S_ISREG(st->st_mode))
		return add_file(walk_job, p, walk_root_len, (uint64_t)st->st_size) < 0;
	return 0;
}

static int conn_open(const char *path)
{
	struct sockaddr_un sa;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

static void *client_worker(void *arg)
{
	struct wjob *j = arg;
	int fd = conn_open(j->sock);

	if (fd < 0) {
		atomic_store(&j->conn_failed, -fd);
		return NULL;
	}
	for (;;) {
		size_t i = atomic_fetch_add(&j->next, 1);
		char hdr[32], line[64];

		if (i >= j->nfiles)
			break;
		snprintf(hdr, sizeof(hdr), "W %zu\n", strlen(j->files[i].rel));
		if (util_send_all(fd, hdr, strlen(hdr)) < 0 ||
		    util_send_all(fd, j->files[i].rel, strlen(j->files[i].rel)) < 0)
			goto lost;
		if (util_read_line(fd, line, sizeof(line)) < 0)
			goto lost;
		if (strncmp(line, "OK ", 3) == 0) {
			atomic_fetch_add(&j->done_bytes, strtoull(line + 3, NULL, 10));
		} else {
			int e = strncmp(line, "ERR ", 4) == 0 ? atoi(line + 4) : EPROTO;

			fprintf(stderr, "feedfs warm: %s: %s\n", j->files[i].rel, strerror(e));
			atomic_fetch_add(&j->failed, 1);
		}
		atomic_fetch_add(&j->done_files, 1);
	}
	close(fd);
	return NULL;
lost:
	atomic_store(&j->conn_failed, ECONNRESET);
	close(fd);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void progress(struct wjob *j, double t0, int tty, int final)
{
	double el = now_s() - t0, mib = atomic_load(&j->done_bytes) / 1048576.0;
	double rate = el > 0 ? mib / el : 0;
	double left = j->total_bytes / 1048576.0 - mib;
	char eta[32];

	if (final)
		snprintf(eta, sizeof(eta), "%.1fs", el);
	else if (rate > 0)
		snprintf(eta, sizeof(eta), "ETA %.0fs", left > 0 ? left / rate : 0);
	else
		snprintf(eta, sizeof(eta), "ETA ?");
	fprintf(tty ? stderr : stdout, "%swarm: %zu/%zu files, %.1f/%.1f MiB, %.1f MiB/s, %s%s%s",
		tty ? "\r" : "", atomic_load(&j->done_files), j->nfiles, mib,
		j->total_bytes / 1048576.0, rate, eta,
		atomic_load(&j->failed) ? ", some failed" : "", tty && !final ? "\033[K" : "\n");
	fflush(tty ? stderr : stdout);
}

static const char warm_usage[] =
	"usage: feedfs warm [--jobs N] MOUNTPOINT/PATH...\n"
	"    Loads the files (directories: everything below) into the block cache of\n"
	"    the feedfs daemon serving them, without reading through the mount.\n"
	"    --jobs N   files warmed in parallel, 1..64 (default 4)\n";

int cache_warm_main(int argc, char **argv)
{
	struct wjob *j = calloc(1, sizeof(*j));
	char mnt[PATH_MAX] = "";
	pthread_t th[WARM_MAX_CONNS];
	long jobs = 4;
	int tty = isatty(STDERR_FILENO), status = 0, npaths = 0;
	double t0, last = 0;

	if (!j)
		return 1;
	for (int i = 1; i < argc; i++) {
		char abs[PATH_MAX], m[PATH_MAX];
		struct stat st;

		if (strcmp(argv[i], "--jobs") == 0 || strcmp(argv[i], "-j") == 0) {
			char *end;

			if (i + 1 >= argc)
				goto usage;
			jobs = strtol(argv[++i], &end, 10);
			if (*end || jobs < 1 || jobs > WARM_MAX_CONNS)
				goto usage;
			continue;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			fputs(warm_usage, stdout);
			return 0;
		}
		if (!realpath(argv[i], abs) || stat(abs, &st) < 0) {
			fprintf(stderr, "feedfs warm: %s: %s\n", argv[i], strerror(errno));
			return 1;
		}
		if (find_mount(abs, m, sizeof(m)) < 0) {
			fprintf(stderr, "feedfs warm: %s is not on a feedfs mount\n", argv[i]);
			return 1;
		}
		if (mnt[0] && strcmp(mnt, m)) {
			fprintf(stderr, "feedfs warm: %s and %s are on different mounts\n", mnt, m);
			return 2;
		}
		strcpy(mnt, m);
		npaths++;
		if (S_ISDIR(st.st_mode)) {
			walk_job = j;
			walk_root_len = strlen(mnt);
			if (nftw(abs, walk_cb, 32, FTW_PHYS) != 0) {
				fprintf(stderr, "feedfs warm: walking %s failed\n", argv[i]);
				return 1;
			}
		} else if (S_ISREG(st.st_mode) && add_file(j, abs, strlen(mnt),
							  (uint64_t)st.st_size) < 0) {
			return 1;
		}
	}
	if (!npaths)
		goto usage;
	if (cache_warm_socket_path(mnt, j->sock, sizeof(j->sock)) < 0 ||
	    access(j->sock, F_OK) < 0) {
		fprintf(stderr, "feedfs warm: no control socket for %s (%s): is its cache on "
			"(--cache-dir) and are you its owner?\n", mnt, j->sock);
		return 1;
	}
	if ((size_t)jobs > j->nfiles)
		jobs = j->nfiles ? (long)j->nfiles : 1;
	t0 = now_s();
	for (long i = 0; i < jobs; i++)
		if (pthread_create(&th[i], NULL, client_worker, j) != 0)
			jobs = i;
	while (atomic_load(&j->done_files) < j->nfiles && !atomic_load(&j->conn_failed)) {
		usleep(200 * 1000);
		if (tty || now_s() - last >= 5) {
			progress(j, t0, tty, 0);
			last = now_s();
		}
	}
	for (long i = 0; i < jobs; i++)
		pthread_join(th[i], NULL);
	progress(j, t0, tty, 1);
	if (atomic_load(&j->conn_failed)) {
		fprintf(stderr, "feedfs warm: lost the daemon (%s): %s\n", j->sock,
			strerror(atomic_load(&j->conn_failed)));
		status = 1;
	}
	if (atomic_load(&j->failed))
		status = 1;
	for (size_t i = 0; i < j->nfiles; i++)
		free(j->files[i].rel);
	free(j->files);
	free(j);
	return status;
usage:
	fputs(warm_usage, stderr);
	return 2;
}
