/*
 * ctl — the control plane: one unix socket per mount, always on, and the
 * optional Prometheus listener (--metrics-addr).
 *
 * DESIGN
 * The mount's control socket lives at ctl_socket_path(mount point): 0600 in
 * a 0700 directory owned by the daemon's uid (/run/feedfs for root, else
 * $XDG_RUNTIME_DIR/feedfs or /tmp/feedfs-UID), so only that uid may talk to
 * it. Its requests are one line each, a verb letter and arguments; replies
 * are "OK ..." or "ERR <errno>\n". Handlers are registered per verb:
 *   S json|text|prom   stats (src/ctl/ctl.c): "OK <n>\n" + n bytes
 *   W <n> + path       warm one file into the cache (src/ctl/warm.c)
 *   O <count> <nbytes> + paths   the loader's file order (src/ctl/order.c)
 *   H, R               cache sharing, on the cache dir's own socket
 *                      (src/ctl/share.c; protocol in cache.h)
 * and the next capabilities (shared-memory regions) add verbs.
 * src/ctl/server.c is the socket server itself: one listener thread, one
 * thread per connection (bounded), one request at a time per connection;
 * stopping cuts every connection and waits for its handler to return.
 * A ticker thread samples the throughput counters once a second, so "now"
 * rates need no client state.
 */
#ifndef FEEDFS_CTL_H
#define FEEDFS_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "feedfs/stats.h"

/* ---- the socket server (server.c) ---------------------------------------- */

struct ctl_server;
struct ctl_conn {
	int fd;
	void *state;            /* the handlers' own per-connection state */
	struct ctl_server *srv;
};

/* Handle one request: line is the request line without its verb and the
 * space after it. Returns 0 to read the next request, -1 to close. */
typedef int (*ctl_handler_fn)(void *arg, struct ctl_conn *k, const char *line);

struct ctl_verb {
	char verb;
	ctl_handler_fn fn;
	void *arg;
};

#define CTL_VERBS_MAX 8
struct ctl_server_config {
	const char *what;                   /* "control", "share": for messages */
	const char *path;                   /* socket path; whatever is there is replaced */
	struct ctl_verb verbs[CTL_VERBS_MAX];
	size_t n_verbs;
	unsigned max_conns;                 /* over it: "ERR 16" (EBUSY) and close */
	int send_timeout_s;                 /* 0: none */
	void (*conn_end)(void *arg, struct ctl_conn *k);    /* frees k->state; may be NULL */
	void *conn_end_arg;
};

/* Bind (0600) and start listening. 0 or -errno with one line in msg. */
int ctl_server_start(const struct ctl_server_config *cfg, struct ctl_server **out, char *msg,
		     size_t msg_len);
/* Stop accepting, cut open connections, wait for their handlers, remove the
 * socket. NULL is a no-op. */
void ctl_server_stop(struct ctl_server *s);
/* A listener thread's wait: 1 when lfd has a connection to accept, 0 to wait
 * again (EINTR), -ECANCELED once stop_fd is readable (stop), or -errno. */
int ctl_wait_listener(int lfd, int stop_fd);
/* The peer closed, or the server is stopping (the fd was shut down). */
int ctl_peer_gone(int fd);
/* Parse exactly n unsigned decimals separated by single spaces. 0 or -1. */
int ctl_parse_nums(const char *s, unsigned long long *v, int n);

/* ---- the mount's control socket (ctl.c) ------------------------------------ */

/* The control socket path for a mount point (absolute). 0 or -errno. */
int ctl_socket_path(const char *mount_abs, char *out, size_t out_len);

struct ctl_config {
	const char *mount_abs;
	const struct stats_reg *reg;        /* must outlive the ctl */
	const struct stats_mount *mount;
	/* More verbs (warm): appended to S. */
	struct ctl_verb extra[CTL_VERBS_MAX - 1];
	size_t n_extra;
	void (*conn_end)(void *arg, struct ctl_conn *k);
	void *conn_end_arg;
	const char *metrics_host;           /* NULL: no /metrics listener */
	unsigned metrics_port;
};

struct ctl;
/* Create the private dir, bind the socket, start the ticker and, when asked,
 * the metrics listener. 0 or -errno with one line in msg (e.g.
 * "--metrics-addr 127.0.0.1:9100: Address already in use"). */
int ctl_start(const struct ctl_config *cfg, struct ctl **out, char *msg, size_t msg_len);
void ctl_stop(struct ctl *c);
/* The last second's throughput (the ticker's). */
void ctl_rate(struct ctl *c, struct stats_rate *out);

/* ---- warm (warm.c): the W verb of the mount's socket ---------------------- */

/* Map a mount-relative path to its object: *key (malloc'd), etag (NUL-ended,
 * at most etag_len) and size. Returns 0 or -errno. Runs on a ctl thread. */
typedef int (*ctl_resolve_fn)(void *arg, const char *path, size_t path_len, char **key,
			      size_t *key_len, char *etag, size_t etag_len, uint64_t *size);
struct ctl_warm;
/* Blocks are fetched through fetcher (our cache, or the owner's through
 * attach; it must outlive the ctl), block bytes at a time. With no fetcher
 * (no cache) every W is answered EOPNOTSUPP. 0 or -ENOMEM. */
struct fetcher;
int ctl_warm_new(struct fetcher *fetcher, uint32_t block, ctl_resolve_fn resolve,
		 void *resolve_arg, struct ctl_warm **out);
/* Add the W verb (and the per-connection cleanup) to a ctl_config. */
void ctl_warm_register(struct ctl_warm *w, struct ctl_config *cfg);
/* After ctl_stop. NULL is a no-op. */
void ctl_warm_free(struct ctl_warm *w);

/* ---- order (order.c): the O verb of the mount's socket --------------------- */

/* Add the O verb (loader-order prefetch, hint.h) to a ctl_config; h must
 * outlive the ctl. Needs no per-connection state. */
struct hint;
void ctl_order_register(struct hint *h, struct ctl_config *cfg);

/* ---- share (share.c): the cache dir's socket --------------------------------- */

struct cache;
struct rd_budget;
struct ctl_share;
/* Listen on the cache dir's share socket; id (id_len bytes) is what attachers
 * must name; budget (which must outlive it) is charged for the buffers. 0 or
 * -errno with a line in msg. Stop before cache_destroy. */
int ctl_share_start(struct cache *c, const char *cache_dir, const char *id, size_t id_len,
		    struct rd_budget *budget, struct ctl_share **out, char *msg, size_t msg_len);
void ctl_share_stop(struct ctl_share *s);

/* ---- /metrics (metrics.c) --------------------------------------------------- */

struct ctl_metrics;
/* Listen on host:port (TCP) and answer GET /metrics with the registry in
 * Prometheus text format; anything else 404. 0 or -errno with a line. */
int ctl_metrics_start(const char *host, unsigned port, const struct stats_reg *reg,
		      const struct stats_mount *mount, struct ctl_metrics **out, char *msg,
		      size_t msg_len);
void ctl_metrics_stop(struct ctl_metrics *m);

#endif
