/*
 * server — the control plane's unix-socket server (see ctl.h).
 *
 * DESIGN
 * One listener thread accepts and starts one detached thread per connection,
 * at most max_conns at once (over it the peer is told EBUSY). A connection
 * reads one request line at a time and hands it to the verb's handler, which
 * answers on the same fd. Stopping writes to a pipe the listener polls, shuts
 * every connection's fd down (so a handler blocked on it returns) and waits
 * until the last connection thread has gone.
 * Locks: srv.mu guards the connection list and count; handlers take their own.
 */
#include "feedfs/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "ctl"
#define CTL_LINE_MAX 256

struct ctl_conn_node {
	struct ctl_conn k;
	struct ctl_conn_node *next;
};

struct ctl_server {
	struct ctl_server_config cfg;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int lfd;
	int stop_pipe[2];
	pthread_t listener;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct ctl_conn_node *conns;        /* under mu */
	unsigned nconns;                    /* under mu */
	int stopping;                       /* under mu */
};

int ctl_parse_nums(const char *s, unsigned long long *v, int n)
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

int ctl_peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void *conn_main(void *arg)
{
	struct ctl_conn_node *node = arg;
	struct ctl_conn *k = &node->k;
	struct ctl_server *s = k->srv;

	for (;;) {
		char line[CTL_LINE_MAX];
		size_t i;

		if (util_read_line(k->fd, line, sizeof(line)) < 0 || !line[0] ||
		    (line[1] != ' ' && line[1] != '\0'))
			break;
		for (i = 0; i < s->cfg.n_verbs; i++)
			if (s->cfg.verbs[i].verb == line[0])
				break;
		if (i == s->cfg.n_verbs)
			break;              /* unknown verb: a peer we do not speak with */
		if (s->cfg.verbs[i].fn(s->cfg.verbs[i].arg, k, line[1] ? line + 2 : "") < 0)
			break;
	}
	if (s->cfg.conn_end)
		s->cfg.conn_end(s->cfg.conn_end_arg, k);

	pthread_mutex_lock(&s->mu);
	for (struct ctl_conn_node **pp = &s->conns; *pp; pp = &(*pp)->next)
		if (*pp == node) {
			*pp = node->next;
			break;
		}
	s->nconns--;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	close(k->fd);
	free(node);
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

static void accept_one(struct ctl_server *s)
{
	struct ctl_conn_node *node;
	pthread_attr_t at;
	pthread_t t;
	int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		return;
	pthread_mutex_lock(&s->mu);
	if (s->stopping || s->nconns >= s->cfg.max_conns || !(node = calloc(1, sizeof(*node)))) {
		pthread_mutex_unlock(&s->mu);
		refuse_busy(fd);
		return;
	}
	if (s->cfg.send_timeout_s) {
		/* A peer that stops reading must not hold a handler for ever. */
		struct timeval tv = { .tv_sec = s->cfg.send_timeout_s };

		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
	node->k.fd = fd;
	node->k.srv = s;
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &at, conn_main, node) != 0) {
		pthread_mutex_unlock(&s->mu);
		pthread_attr_destroy(&at);
		close(fd);
		free(node);
		return;
	}
	pthread_attr_destroy(&at);
	node->next = s->conns;
	s->conns = node;
	s->nconns++;
	pthread_mutex_unlock(&s->mu);
}

int ctl_wait_listener(int lfd, int stop_fd)
{
	struct pollfd p[2] = { { .fd = lfd, .events = POLLIN },
			       { .fd = stop_fd, .events = POLLIN } };

	if (poll(p, 2, -1) < 0)
		return errno == EINTR ? 0 : -errno;
	if (p[1].revents)
		return -ECANCELED;
	return 1;
}

static void *listener_main(void *arg)
{
	struct ctl_server *s = arg;
	int r;

	while ((r = ctl_wait_listener(s->lfd, s->stop_pipe[0])) >= 0)
		if (r > 0)
			accept_one(s);
	return NULL;
}

static void server_free(struct ctl_server *s)
{
	if (s->lfd >= 0)
		close(s->lfd);
	if (s->stop_pipe[0] >= 0) {
		close(s->stop_pipe[0]);
		close(s->stop_pipe[1]);
	}
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

int ctl_server_start(const struct ctl_server_config *cfg, struct ctl_server **out, char *msg,
		     size_t msg_len)
{
	struct ctl_server *s = calloc(1, sizeof(*s));
	struct sockaddr_un sa;
	mode_t old;
	int e;

	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->lfd = s->stop_pipe[0] = s->stop_pipe[1] = -1;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	if (strlen(cfg->path) >= sizeof(s->path)) {
		snprintf(msg, msg_len, "%s socket path %s is too long", cfg->what, cfg->path);
		server_free(s);
		return -ENAMETOOLONG;
	}
	memcpy(s->path, cfg->path, strlen(cfg->path) + 1);
	s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd < 0 || pipe2(s->stop_pipe, O_CLOEXEC) < 0) {
		e = -errno;
		snprintf(msg, msg_len, "%s socket: %s", cfg->what, strerror(-e));
		server_free(s);
		return e;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, s->path, strlen(s->path) + 1);
	unlink(s->path);
	old = umask(0177);
	e = bind(s->lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
	umask(old);
	if (e == 0 && (chmod(s->path, 0600) < 0 || listen(s->lfd, 64) < 0))
		e = -errno;
	if (e < 0) {
		snprintf(msg, msg_len, "%s socket %s: %s", cfg->what, s->path, strerror(-e));
		server_free(s);
		return e;
	}
	if (pthread_create(&s->listener, NULL, listener_main, s) != 0) {
		snprintf(msg, msg_len, "cannot start the %s thread", cfg->what);
		unlink(s->path);
		server_free(s);
		return -EAGAIN;
	}
	*out = s;
	return 0;
}

void ctl_server_stop(struct ctl_server *s)
{
	if (!s)
		return;
	if (write(s->stop_pipe[1], "x", 1) < 0) {
		/* cannot happen with an open pipe; the join below would hang */
		BUG_ON(1);
	}
	pthread_join(s->listener, NULL);
	unlink(s->path);
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	for (struct ctl_conn_node *n = s->conns; n; n = n->next)
		shutdown(n->k.fd, SHUT_RDWR);
	while (s->nconns)
		pthread_cond_wait(&s->cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	server_free(s);
}
