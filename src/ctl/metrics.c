/*
 * metrics — Prometheus text at http://HOST:PORT/metrics (--metrics-addr).
 *
 * DESIGN
 * One thread, one connection at a time: a scrape is a few KiB once every few
 * seconds, so there is nothing to gain from concurrency and a bound to keep.
 * Each connection gets 5 s to send its request head (8 KiB at most) and is
 * answered with HTTP/1.0 semantics (Connection: close). Only GET and HEAD of
 * /metrics (any query string) are served; other paths 404, other methods 405.
 * Nothing is listened on unless the option is given; a bad address or a port
 * in use is reported at mount time, by ctl_start.
 */
#include "feedfs/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "metrics"
#define HEAD_MAX 8192
#define REQ_TIMEOUT_S 5

struct ctl_metrics {
	const struct stats_reg *reg;
	const struct stats_mount *mount;
	int lfd;
	int stop_pipe[2];
	pthread_t thread;
};

static void reply(int fd, const char *status, const char *body, size_t len, int head_only)
{
	char h[256];
	int n = snprintf(h, sizeof(h), "HTTP/1.0 %s\r\nContent-Type: text/plain; version=0.0.4; "
			 "charset=utf-8\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
			 status, len);

	if (util_send_all(fd, h, (size_t)n) == 0 && !head_only && len)
		util_send_all(fd, body, len);
}

/* Read until the end of the request head; 0, or -1 (timeout, too big, gone). */
static int read_head(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap) {
		ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);

		if (r <= 0)
			return -1;
		n += (size_t)r;
		buf[n] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return 0;
	}
	return -1;
}

static void serve(struct ctl_metrics *m, int fd)
{
	struct timeval tv = { .tv_sec = REQ_TIMEOUT_S };
	char req[HEAD_MAX], *sp, *path, *end;
	int head_only;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (read_head(fd, req, sizeof(req)) < 0)
		return;
	sp = strchr(req, ' ');
	if (!sp) {
		reply(fd, "400 Bad Request", "bad request\n", 12, 0);
		return;
	}
	*sp = '\0';
	path = sp + 1;
	end = path + strcspn(path, " ?\r\n");
	head_only = strcmp(req, "HEAD") == 0;
	if (strcmp(req, "GET") != 0 && !head_only) {
		reply(fd, "405 Method Not Allowed", "only GET\n", 9, 0);
	} else if ((size_t)(end - path) != 8 || memcmp(path, "/metrics", 8) != 0) {
		reply(fd, "404 Not Found", "see /metrics\n", 13, head_only);
	} else {
		char *body = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&body, &len);
		int e = f ? stats_render_prom(m->reg, m->mount, f) : -ENOMEM;

		if (f && fclose(f) != 0 && e == 0)
			e = -ENOMEM;
		if (e < 0) {
			reply(fd, "500 Internal Server Error", "", 0, 0);
		} else {
			reply(fd, "200 OK", body, len, head_only);
		}
		free(body);
	}
}

static void *metrics_main(void *arg)
{
	struct ctl_metrics *m = arg;

	int r;

	while ((r = ctl_wait_listener(m->lfd, m->stop_pipe[0])) >= 0) {
		int fd = r > 0 ? accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC) : -1;

		if (fd < 0)
			continue;
		serve(m, fd);
		close(fd);
	}
	return NULL;
}

static void metrics_free(struct ctl_metrics *m)
{
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->stop_pipe[0] >= 0) {
		close(m->stop_pipe[0]);
		close(m->stop_pipe[1]);
	}
	free(m);
}

int ctl_metrics_start(const char *host, unsigned port, const struct stats_reg *reg,
		      const struct stats_mount *mount, struct ctl_metrics **out, char *msg,
		      size_t msg_len)
{
	struct addrinfo hints, *ai = NULL;
	struct ctl_metrics *m = calloc(1, sizeof(*m));
	char h[256], p[16];
	size_t hl = strlen(host);
	int e, one = 1;

	if (!m)
		return -ENOMEM;
	m->reg = reg;
	m->mount = mount;
	m->lfd = m->stop_pipe[0] = m->stop_pipe[1] = -1;
	/* "[::1]" is how the option writes an IPv6 host. */
	if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']')
		snprintf(h, sizeof(h), "%.*s", (int)(hl - 2), host + 1);
	else
		snprintf(h, sizeof(h), "%s", host);
	snprintf(p, sizeof(p), "%u", port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	e = getaddrinfo(h, p, &hints, &ai);
	if (e != 0) {
		snprintf(msg, msg_len, "--metrics-addr %s:%u: %s", host, port, gai_strerror(e));
		metrics_free(m);
		return -EINVAL;
	}
	m->lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (m->lfd < 0 || pipe2(m->stop_pipe, O_CLOEXEC) < 0) {
		e = -errno;
		goto fail;
	}
	setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(m->lfd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(m->lfd, 16) < 0) {
		e = -errno;
		goto fail;
	}
	if (pthread_create(&m->thread, NULL, metrics_main, m) != 0) {
		e = -EAGAIN;
		goto fail;
	}
	freeaddrinfo(ai);
	log_info(TAG, "Prometheus metrics at http://%s:%u/metrics", host, port);
	*out = m;
	return 0;
fail:
	snprintf(msg, msg_len, "--metrics-addr %s:%u: %s", host, port, strerror(-e));
	freeaddrinfo(ai);
	metrics_free(m);
	return e;
}

void ctl_metrics_stop(struct ctl_metrics *m)
{
	if (!m)
		return;
	if (write(m->stop_pipe[1], "x", 1) < 0)
		BUG_ON(1);
	pthread_join(m->thread, NULL);
	metrics_free(m);
}
