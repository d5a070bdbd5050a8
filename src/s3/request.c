/*
 * request — one S3 request across its attempts: URL and signing, response
 * capture (headers, body straight into the caller's buffer), classification and
 * the retry decision.
 *
 * Everything here after s3_req_finish_setup() runs on the http thread (see
 * s3_i.h). Each attempt is signed afresh: the date moves and credentials may
 * have been refreshed or invalidated in between.
 */
#include "s3_i.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>

#include "feedfs/creds.h"
#include "feedfs/log.h"
#include "feedfs/util.h"
#include "feedfs/util_curl.h"

#define TAG "s3"
#define S3_QUICK_TIMEOUT_MS 3000

static const char *op_name(enum s3_op op)
{
	switch (op) {
	case S3_OP_GET: return "GET";
	case S3_OP_HEAD: return "HEAD";
	case S3_OP_CANCEL: return "CANCEL";
	default: return "LIST";
	}
}

int s3_req_new(struct s3_client *c, enum s3_op op, const char *key, size_t key_len,
	       struct s3_req **out)
{
	struct s3_req *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->c = c;
	r->op = op;
	if (key) {
		r->key = malloc(key_len + 1);
		if (!r->key) {
			free(r);
			return -ENOMEM;
		}
		memcpy(r->key, key, key_len);
		r->key[key_len] = '\0';
		r->key_len = key_len;
	}
	r->submit_ns = stats_now_ns();
	*out = r;
	return 0;
}

int s3_req_add_query(struct s3_req *r, const char *name, const char *value)
{
	struct sigv4_kv *q = realloc(r->query, (r->n_query + 1) * sizeof(*q));

	if (!q)
		return -ENOMEM;
	r->query = q;
	q[r->n_query].name = strdup(name);
	q[r->n_query].value = strdup(value ? value : "");
	if (!q[r->n_query].name || !q[r->n_query].value) {
		free((char *)q[r->n_query].name);
		free((char *)q[r->n_query].value);
		return -ENOMEM;
	}
	r->n_query++;
	return 0;
}

char *s3_build_canonical_uri(const char *base_path, const char *bucket, int path_style,
			     const char *key, size_t key_len)
{
	char *enc = NULL, *res;

	if (key) {
		enc = s3_uri_encode(key, key_len, 1);
		if (!enc)
			return NULL;
	}
	if (path_style) {
		if (key)
			res = xasprintf("%s/%s/%s", base_path, bucket, enc);
		else
			res = xasprintf("%s/%s", base_path, bucket);
	} else {
		res = xasprintf("%s/%s", base_path, key ? enc : "");
	}
	free(enc);
	return res;
}

char *s3_build_host(const char *authority, const char *bucket, int path_style)
{
	return path_style ? xstrdup(authority) : xasprintf("%s.%s", bucket, authority);
}

int s3_req_finish_setup(struct s3_req *r)
{
	struct s3_client *c = r->c;
	char *q;

	r->canonical_uri = s3_build_canonical_uri(c->base_path, c->bucket, c->path_style,
						  r->key, r->key_len);
	r->host = s3_build_host(c->authority, c->bucket, c->path_style);
	q = sigv4_canonical_query(r->query, r->n_query);
	if (!r->canonical_uri || !q) {
		free(q);
		return -ENOMEM;
	}
	r->url = xasprintf("%s://%s%s%s%s", c->scheme, r->host, r->canonical_uri,
			   q[0] ? "?" : "", q);
	free(q);
	return 0;
}

void s3_req_free(struct s3_req *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_query; i++) {
		free((char *)r->query[i].name);
		free((char *)r->query[i].value);
	}
	free(r->query);
	free(r->key);
	free(r->url);
	free(r->host);
	free(r->canonical_uri);
	free(r->if_match);
	free(r->hedge_buf);
	util_buf_free(&r->body);
	if (r->hdrs) {
		for (struct curl_slist *l = r->hdrs; l; l = l->next)
			util_wipe(l->data, strlen(l->data));
		curl_slist_free_all(r->hdrs);
	}
	free(r);
}

int s3_req_hedge_new(struct s3_req *p, struct s3_req **out)
{
	struct s3_req *r;
	const char *match = p->if_match;
	int ret = s3_req_new(p->c, p->op, p->key, p->key_len, &r);

	if (ret)
		return ret;
	for (size_t i = 0; i < p->n_query && !ret; i++)
		ret = s3_req_add_query(r, p->query[i].name, p->query[i].value);
	r->primary = p;
	if (!ret && p->op == S3_OP_GET) {
		/* Bytes the primary has are in its buffer, range-checked; ask only
		 * for the rest, and only of the version they came from (its ETag).
		 * Without an ETag to pin the version, ask for the whole part. */
		if (p->got > 0 && p->got < p->len && p->etag[0] &&
		    (!p->if_match || strcmp(p->etag, p->if_match) == 0)) {
			r->hedge_from = p->got;
			match = p->etag;
		}
		r->off = p->off + r->hedge_from;
		r->len = p->len - r->hedge_from;
		r->buf = r->hedge_buf = malloc(r->len);
		if (!r->buf)
			ret = -ENOMEM;
	}
	if (!ret && match && !(r->if_match = strdup(match)))
		ret = -ENOMEM;
	if (!ret)
		ret = s3_req_finish_setup(r);
	if (ret) {
		s3_req_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

void s3_req_hedge_adopt(struct s3_req *p, struct s3_req *hg)
{
	struct util_buf tmp;

	if (p->op == S3_OP_GET) {
		memcpy(p->buf + hg->hedge_from, hg->buf, hg->len);
		p->got = p->len;
	}
	tmp = p->body;          /* a LIST body: the hedge's is the answer */
	p->body = hg->body;
	hg->body = tmp;
	p->status = p->final_status = hg->status;
	p->content_length = hg->content_length;
	p->have_content_length = hg->have_content_length;
	memcpy(p->etag, hg->etag, sizeof(p->etag));
	memcpy(p->request_id, hg->request_id, sizeof(p->request_id));
	p->last_modified_ms = hg->last_modified_ms;
	p->reason[0] = '\0';
	memset(&p->err, 0, sizeof(p->err));
	p->result = 0;
}

int64_t s3_retry_delay_ms(enum s3_retry_cause cause, int attempt, uint64_t rnd)
{
	/* A 500, a reset, a short body or a stall says nothing about load: the
	 * next attempt goes out at once (on a fresh connection, see
	 * s3_req_attempt_start), spread by a few ms so that a burst of failures
	 * does not come back as one burst. A store that keeps failing that way
	 * is treated as overloaded after S3_QUICK_RETRIES: backoff as for
	 * throttling, counted from the first backoff. */
	int quick = cause != S3_RETRY_THROTTLE && cause != S3_RETRY_CONNECT;

	if (quick && attempt <= S3_QUICK_RETRIES)
		return (int64_t)(rnd % (uint64_t)(S3_QUICK_JITTER_MS + 1));
	if (quick)
		attempt -= S3_QUICK_RETRIES;
	return s3_backoff_ms(attempt, rnd);
}

int64_t s3_backoff_ms(int attempt, uint64_t rnd)
{
	int64_t ceil = S3_BACKOFF_BASE_MS;

	for (int i = 1; i < attempt && ceil < S3_BACKOFF_CAP_MS; i++)
		ceil *= 2;
	if (ceil > S3_BACKOFF_CAP_MS)
		ceil = S3_BACKOFF_CAP_MS;
	return (int64_t)(rnd % (uint64_t)(ceil + 1));
}

/* ---- response capture (curl callbacks, http thread) ---------------------- */

static int body_append(struct s3_req *r, const char *p, size_t n, size_t limit)
{
	if (r->body.len + n > limit) {
		r->body_too_big = 1;
		return 0;
	}
	return util_buf_append(&r->body, p, n);
}

/* 1 when Content-Range says the object ends before the range we asked for:
 * the object was replaced by a shorter one (or the caller's size is stale).
 * That is not transient, so it is answered -ESTALE instead of being retried. */
static int content_range_short(const struct s3_req *r)
{
	unsigned long long a, b, total;

	if (sscanf(r->content_range, "bytes %llu-%llu/%llu", &a, &b, &total) != 3)
		return 0;
	return a == r->off && total < r->off + r->len;
}

/* "bytes A-B/T" must name exactly the range we asked for. */
static int content_range_ok(const struct s3_req *r)
{
	unsigned long long a, b;
	int pos = 0;

	if (sscanf(r->content_range, "bytes %llu-%llu/%n", &a, &b, &pos) != 2 || pos == 0)
		return 0;
	return a == r->off && b == r->off + r->len - 1;
}

/* ---- SO_RCVLOWAT on big GET bodies (see s3_i.h) ----------------------------- */

/* CURLOPT_SOCKOPTFUNCTION: remember every socket curl opens. */
static int lowat_sockopt(void *clientp, curl_socket_t fd, curlsocktype purpose)
{
	struct s3_client *c = clientp;

	(void)purpose;
	for (unsigned i = 0; i < S3_LOWAT_FDS; i++)
		if (c->lowat_fd[i] == (int)fd + 1)
			return CURL_SOCKOPT_OK;
	c->lowat_fd[c->lowat_next++ % S3_LOWAT_FDS] = (int)fd + 1;   /* 0: empty */
	return CURL_SOCKOPT_OK;
}

/* Address and port of sa as text, for comparing with curl's info. */
static int addr_str(const struct sockaddr_storage *sa, char *ip, size_t cap, long *port)
{
	if (sa->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)sa;

		*port = ntohs(a->sin_port);
		return inet_ntop(AF_INET, &a->sin_addr, ip, (socklen_t)cap) ? 0 : -1;
	}
	if (sa->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)sa;

		*port = ntohs(a->sin6_port);
		return inet_ntop(AF_INET6, &a->sin6_addr, ip, (socklen_t)cap) ? 0 : -1;
	}
	return -1;
}

/* The socket of r's connection: the remembered one whose local and remote
 * addresses are those curl reports for the transfer; -1 if none is. */
static int lowat_fd_of(struct s3_req *r)
{
	struct s3_client *c = r->c;
	char *lip = NULL, *pip = NULL, ip[INET6_ADDRSTRLEN];
	long lport = 0, pport = 0, port;

	if (curl_easy_getinfo(r->easy, CURLINFO_LOCAL_IP, &lip) != CURLE_OK || !lip ||
	    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_IP, &pip) != CURLE_OK || !pip ||
	    curl_easy_getinfo(r->easy, CURLINFO_LOCAL_PORT, &lport) != CURLE_OK ||
	    curl_easy_getinfo(r->easy, CURLINFO_PRIMARY_PORT, &pport) != CURLE_OK)
		return -1;
	for (unsigned i = 0; i < S3_LOWAT_FDS; i++) {
		struct sockaddr_storage sa;
		socklen_t len = sizeof(sa);
		int fd = c->lowat_fd[i] - 1;

		if (fd < 0 || getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
		    addr_str(&sa, ip, sizeof(ip), &port) != 0 || port != lport || strcmp(ip, lip))
			continue;
		len = sizeof(sa);
		if (getpeername(fd, (struct sockaddr *)&sa, &len) == 0 &&
		    addr_str(&sa, ip, sizeof(ip), &port) == 0 && port == pport && !strcmp(ip, pip))
			return fd;
	}
	return -1;
}

/* The socket is looked up once per attempt: its connection does not change
 * while the body comes. Setting 1 through it later is always safe. */
static void lowat_set(struct s3_req *r, int want)
{
	if (want == (r->lowat ? r->lowat : 1))
		return;
	if (r->lowat_fd < 0)
		r->lowat_fd = lowat_fd_of(r);
	if (r->lowat_fd >= 0 &&
	    setsockopt(r->lowat_fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
		r->lowat = want;
}

/* After each piece of a big GET's body (n bytes): one receive buffer, or what
 * the rate so far brings in S3_LOWAT_WAIT_NS rounded down to a power of two
 * (so it is rarely set again), while more than two receive buffers are still
 * to come; else 1. */
static void lowat_body(struct s3_req *r, size_t n)
{
	uint64_t bite = (uint64_t)r->c->get_recv_buf, now = stats_now_ns(), want = 1;

	if (!r->body_ns) {
		r->body_ns = now;               /* the rate is timed from here */
		r->body_first = n;
	}
	if (!r->have_content_length || r->content_length < r->got)
		return;
	if (r->content_length - r->got > 2 * bite && now > r->body_ns) {
		/* bytes after the first piece, over the time since it came */
		want = (r->got - r->body_first) * S3_LOWAT_WAIT_NS / (now - r->body_ns);
		want = want >= bite ? bite : want < S3_LOWAT_MIN ? 1 : 1ull << (63 - __builtin_clzll(want));
	}
	lowat_set(r, (int)want);
}

void s3_req_lowat_reset(struct s3_req *r)
{
	if (r->easy && r->lowat > 1)
		lowat_set(r, 1);
}

static size_t on_body(char *p, size_t sz, size_t nm, void *arg)
{
	struct s3_req *r = arg;
	size_t n = sz * nm;

	S3_STAT_ADD(r->c, bytes_in, n);
	if (r->status >= 200 && r->status < 300 && r->op == S3_OP_GET) {
		/* Check the range before the first byte lands: a server that
		 * ignored Range would otherwise stream a whole object at us. */
		if (r->got == 0 && r->status == 206 && !content_range_ok(r)) {
			r->overflow = 1;
			return 0;
		}
		if (n > r->len - r->got) {
			r->overflow = 1;
			return 0;       /* aborts the transfer: never write past len */
		}
		memcpy(r->buf + r->got, p, n);
		r->got += n;
		if (r->len >= (size_t)S3_BIG_GET)
			lowat_body(r, n);
		S3_STAT_ADD(r->c, object_bytes, n);
		return n;
	}
	if (r->status >= 200 && r->status < 300)
		return body_append(r, p, n, S3_LISTBODY_MAX) ? 0 : n;
	/* Error documents: keep the first 64 KiB, drain the rest. */
	if (!r->body_too_big && body_append(r, p, n, S3_ERRBODY_MAX))
		return 0;
	return n;
}

static void copy_hdr_value(char *dst, size_t cap, const char *v, size_t vlen)
{
	if (vlen >= cap)
		vlen = cap - 1;
	memcpy(dst, v, vlen);
	dst[vlen] = '\0';
}

static size_t on_header(char *p, size_t sz, size_t nm, void *arg)
{
	struct s3_req *r = arg;
	size_t n = sz * nm, nlen, vlen;
	const char *colon, *v;

	while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == '\n'))
		n--;
	if (n >= 5 && memcmp(p, "HTTP/", 5) == 0) {
		/* A new response (after a 100 Continue, say): forget the last one. */
		const char *sp = memchr(p, ' ', n);

		/* curl's header data is not NUL-terminated: no strtol here. */
		r->status = 0;
		for (const char *d = sp ? sp + 1 : p + n; d < p + n && *d >= '0' && *d <= '9' &&
		     r->status < 1000; d++)
			r->status = r->status * 10 + (*d - '0');
		r->have_content_length = 0;
		r->content_range[0] = r->etag[0] = r->request_id[0] = '\0';
		r->bucket_region[0] = '\0';
		r->last_modified_ms = 0;
		return sz * nm;
	}
	colon = memchr(p, ':', n);
	if (!colon)
		return sz * nm;
	nlen = (size_t)(colon - p);
	v = colon + 1;
	while (v < p + n && (*v == ' ' || *v == '\t'))
		v++;
	vlen = (size_t)(p + n - v);
	while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;

#define HDR_IS(name) (nlen == sizeof(name) - 1 && strncasecmp(p, name, nlen) == 0)
	if (HDR_IS("Content-Length")) {
		char tmp[32], *end;

		copy_hdr_value(tmp, sizeof(tmp), v, vlen);
		errno = 0;
		r->content_length = strtoull(tmp, &end, 10);
		r->have_content_length = tmp[0] >= '0' && tmp[0] <= '9' && *end == '\0' && !errno;
	} else if (HDR_IS("Content-Range")) {
		copy_hdr_value(r->content_range, sizeof(r->content_range), v, vlen);
	} else if (HDR_IS("ETag")) {
		if (vlen < S3_ETAG_MAX)
			copy_hdr_value(r->etag, sizeof(r->etag), v, vlen);
	} else if (HDR_IS("Last-Modified")) {
		char tmp[64];
		time_t t;

		copy_hdr_value(tmp, sizeof(tmp), v, vlen);
		t = curl_getdate(tmp, NULL);
		if (t != (time_t)-1)
			r->last_modified_ms = (int64_t)t * 1000;
	} else if (HDR_IS("x-amz-request-id")) {
		copy_hdr_value(r->request_id, sizeof(r->request_id), v, vlen);
	} else if (HDR_IS("x-amz-bucket-region")) {
		copy_hdr_value(r->bucket_region, sizeof(r->bucket_region), v, vlen);
	}
#undef HDR_IS
	return sz * nm;
}

/* ---- one attempt --------------------------------------------------------- */

static int add_hdr(struct s3_req *r, const char *name, const char *value)
{
	char *line = xasprintf("%s: %s", name, value);
	struct curl_slist *l = curl_slist_append(r->hdrs, line);

	util_wipe(line, strlen(line));
	free(line);
	if (!l)
		return -ENOMEM;
	r->hdrs = l;
	return 0;
}

static int build_headers(struct s3_req *r)
{
	struct s3_client *c = r->c;
	struct sigv4_kv extra[2];
	size_t n_extra = 0;
	char range[64];
	int ret = 0;

	if (r->op == S3_OP_GET) {
		snprintf(range, sizeof(range), "bytes=%" PRIu64 "-%" PRIu64,
			 r->off, r->off + r->len - 1);
		extra[n_extra++] = (struct sigv4_kv){ "Range", range };
		if (r->if_match)
			extra[n_extra++] = (struct sigv4_kv){ "If-Match", r->if_match };
	}
	for (size_t i = 0; i < n_extra && !ret; i++)
		ret = add_hdr(r, extra[i].name, extra[i].value);
	if (!ret)
		ret = add_hdr(r, "Host", r->host);
	/* Keep curl from adding headers we did not sign or want. */
	if (!ret && !(r->hdrs = curl_slist_append(r->hdrs, "Accept:")))
		ret = -ENOMEM;
	if (ret)
		return ret;

	if (creds_chain_anonymous(c->creds))
		return add_hdr(r, "x-amz-content-sha256", SIGV4_EMPTY_SHA256);

	{
		struct s3_creds cr = {0};
		struct sigv4_output so;
		struct sigv4_input in = {
			.method = r->op == S3_OP_HEAD ? "HEAD" : "GET",
			.host = r->host,
			.canonical_uri = r->canonical_uri,
			.query = r->query, .n_query = r->n_query,
			.headers = extra, .n_headers = n_extra,
			.payload_hash = SIGV4_EMPTY_SHA256,
			.region = c->region,
			.service = "s3",
			.time_s = util_wall_ms() / 1000,
		};

		ret = creds_get(c->creds, &cr);
		if (ret)
			return ret;
		ret = sigv4_sign(&in, &cr, &so);
		creds_cleanup(&cr);
		if (ret)
			return ret;
		ret = add_hdr(r, "x-amz-date", so.amz_date);
		if (!ret)
			ret = add_hdr(r, "x-amz-content-sha256", so.content_sha256);
		if (!ret && so.security_token)
			ret = add_hdr(r, "x-amz-security-token", so.security_token);
		if (!ret)
			ret = add_hdr(r, "Authorization", so.authorization);
		sigv4_output_cleanup(&so);
	}
	return ret;
}

/* Stall watchdog, run by curl about once a second and whenever data moves: an
 * attempt that moved no byte for the stall timeout is cut (and retried). Curl's
 * own low-speed check averages over whole seconds and fired up to ~6 s late. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct s3_req *r = arg;
	int64_t now = util_now_ms();

	(void)dltotal;
	(void)ultotal;
	if (dlnow + ulnow != r->progress_bytes) {
		if (now - r->progress_ms > r->max_gap_ms)
			r->max_gap_ms = now - r->progress_ms;
		r->progress_bytes = dlnow + ulnow;
		r->progress_ms = now;
		return 0;
	}
	if (now - r->progress_ms < r->c->stall_timeout_ms)
		return 0;
	r->stalled = 1;
	return 1;       /* CURLE_ABORTED_BY_CALLBACK */
}

int s3_req_attempt_start(struct s3_req *r, CURL *e)
{
	struct s3_client *c = r->c;
	int ret;

	r->attempt++;
	r->status = 0;
	r->got = 0;
	r->overflow = 0;
	r->lowat = 0;
	r->lowat_fd = -1;
	r->body_ns = 0;
	util_buf_reset(&r->body);
	r->body_too_big = 0;
	r->have_content_length = 0;
	r->content_range[0] = r->etag[0] = r->request_id[0] = r->curl_err[0] = '\0';
	r->bucket_region[0] = '\0';
	r->last_modified_ms = 0;
	r->progress_ms = util_now_ms();
	r->progress_bytes = 0;
	r->max_gap_ms = 0;
	r->stalled = 0;
	r->slow_seen = 0;
	if (r->hdrs) {
		/* The old list held a signature: wipe before freeing. */
		for (struct curl_slist *l = r->hdrs; l; l = l->next)
			util_wipe(l->data, strlen(l->data));
		curl_slist_free_all(r->hdrs);
		r->hdrs = NULL;
	}
	ret = build_headers(r);
	if (ret)
		return ret;
	/* Counted when the retry is really sent: one that a hedge made
	 * unnecessary is not a retry. */
	if (r->attempt > 1) {
		S3_STAT_INC(c, retries);
		S3_STAT_ADD(c, retries_throttle, r->retry_cause == S3_RETRY_THROTTLE);
		S3_STAT_ADD(c, retries_server, r->retry_cause == S3_RETRY_SERVER);
		S3_STAT_ADD(c, retries_network, r->retry_cause == S3_RETRY_NETWORK ||
					       r->retry_cause == S3_RETRY_CONNECT);
		S3_STAT_ADD(c, retries_stall, r->retry_cause == S3_RETRY_STALL);
		S3_STAT_ADD(c, retries_body, r->retry_cause == S3_RETRY_BODY);
		S3_STAT_ADD(c, retries_expired, r->retry_cause == S3_RETRY_EXPIRED);
	}
	S3_STAT_INC(c, requests);
	if (r->op == S3_OP_GET)
		S3_STAT_INC(c, get_requests);
	else if (r->op == S3_OP_HEAD)
		S3_STAT_INC(c, head_requests);
	else
		S3_STAT_INC(c, list_requests);

	r->easy = e;
	curl_easy_setopt(e, CURLOPT_URL, r->url);
	curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);   /* keys may hold "/../" */
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->curl_err);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, c->no_verify_tls ? 0L : 1L);
	curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, c->no_verify_tls ? 0L : 2L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	if (r->quick) {
		long ct = c->connect_timeout_ms < S3_QUICK_TIMEOUT_MS ? c->connect_timeout_ms
								       : S3_QUICK_TIMEOUT_MS;
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, ct);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)S3_QUICK_TIMEOUT_MS);
	} else {
		curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)c->connect_timeout_ms);
	}
	if (r->op == S3_OP_HEAD)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	/* The last attempt failed on its connection (500, reset, short body,
	 * stall): do not hand this one the twin of that connection. */
	if (r->fresh_conn)
		curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
	r->fresh_conn = 0;
	if (r->op == S3_OP_GET && r->len >= (size_t)S3_BIG_GET)
		curl_easy_setopt(e, CURLOPT_BUFFERSIZE, c->get_recv_buf);
	/* Every connection, as any may carry a big GET later. */
	curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, lowat_sockopt);
	curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, c);
	return 0;
}

void s3_req_cut_unsent(struct s3_req *r)
{
	long sent = 0;

	if (!r->easy || curl_easy_getinfo(r->easy, CURLINFO_REQUEST_SIZE, &sent) != CURLE_OK ||
	    sent > 0)
		return;
	/* Counted at start, never reached the store: take it back, so that
	 * the counters stay what a proxy in front of the store sees. */
	S3_STAT_ADD(r->c, requests, (uint64_t)-1);
	if (r->op == S3_OP_GET)
		S3_STAT_ADD(r->c, get_requests, (uint64_t)-1);
	else if (r->op == S3_OP_HEAD)
		S3_STAT_ADD(r->c, head_requests, (uint64_t)-1);
	else
		S3_STAT_ADD(r->c, list_requests, (uint64_t)-1);
	if (r->primary)
		S3_STAT_ADD(r->c, hedges_started, (uint64_t)-1);
}

long s3_get_recv_buf(int max_connections)
{
	long per = S3_RECV_BUF_TOTAL / (max_connections > 0 ? max_connections : 1);

	per = per > S3_RECV_BUF_MAX ? S3_RECV_BUF_MAX : per;
	return per < S3_RECV_BUF_MIN ? S3_RECV_BUF_MIN : per;
}

/* Outcome of one successful-status attempt; 0 ok, 1 retry (reason set), -errno final. */
static int check_success(struct s3_req *r)
{
	switch (r->op) {
	case S3_OP_GET:
		/* Some servers ignore If-Match (s3rver does): compare the ETag the
		 * response carries too, so two versions are never mixed. */
		if (r->if_match && r->etag[0] && strcmp(r->etag, r->if_match) != 0) {
			snprintf(r->reason, sizeof(r->reason),
				 "object changed: ETag %s, expected %s", r->etag, r->if_match);
			return -ESTALE;
		}
		if (r->status == 206 && content_range_short(r)) {
			snprintf(r->reason, sizeof(r->reason),
				 "object is shorter than the range asked (%s)", r->content_range);
			return -ESTALE;
		}
		if (r->status == 206 ? !content_range_ok(r)
				     : !(r->off == 0 && r->have_content_length &&
					 r->content_length == r->len)) {
			snprintf(r->reason, sizeof(r->reason),
				 "response range '%s' does not match the request",
				 r->content_range);
			return 1;
		}
		if (r->got != r->len) {
			snprintf(r->reason, sizeof(r->reason), "short body: %zu of %zu bytes",
				 r->got, r->len);
			return 1;
		}
		return 0;
	case S3_OP_HEAD:
		if (!r->have_content_length) {
			/* S3 always sends it: without it the answer was cut
			 * inside its header block. Retried as a short body. */
			snprintf(r->reason, sizeof(r->reason), "HEAD without Content-Length");
			return 1;
		}
		return 0;
	case S3_OP_LIST:
		if (r->body_too_big) {
			snprintf(r->reason, sizeof(r->reason), "listing body over %d bytes",
				 S3_LISTBODY_MAX);
			return -EIO;
		}
		return 0;       /* parsed by the waiting caller, off the http thread */
	case S3_OP_CANCEL:
		break;          /* a note, never sent */
	}
	return -EIO;
}

int64_t s3_req_attempt_end(struct s3_req *r, CURLcode cc)
{
	struct s3_client *c = r->c;
	int err = 0, retry = 0, max = r->primary ? 1 : r->quick ? 2 : c->max_attempts;
	enum s3_retry_cause cause = S3_RETRY_BODY;
	int64_t tail = util_now_ms() - r->progress_ms;

	if (tail > r->max_gap_ms)
		r->max_gap_ms = tail;
	r->os_errno = 0;
	if (r->easy && cc != CURLE_OK)
		curl_easy_getinfo(r->easy, CURLINFO_OS_ERRNO, &r->os_errno);
	r->easy = NULL;
	r->curl_code = cc;
	r->final_status = r->status;
	memset(&r->err, 0, sizeof(r->err));
	r->reason[0] = '\0';

	if (cc != CURLE_OK && r->overflow && r->status == 206 && content_range_short(r)) {
		snprintf(r->reason, sizeof(r->reason),
			 "object is shorter than the range asked (%s)", r->content_range);
		err = -ESTALE;
	} else if (cc != CURLE_OK && r->overflow) {
		snprintf(r->reason, sizeof(r->reason), "%s",
			 r->got == 0 && r->status == 206 ? "response range does not match the request"
							 : "body longer than requested");
		err = -EIO;
		retry = 1;
	} else if (cc != CURLE_OK && r->stalled) {
		cause = S3_RETRY_STALL;
		snprintf(r->reason, sizeof(r->reason), "no bytes for %d ms (--stall-timeout)",
			 c->stall_timeout_ms);
		err = -ETIMEDOUT;
		retry = !r->quick;
	} else if (cc != CURLE_OK) {
		/* No connection at all is an outage, not a bad connection:
		 * those back off, as throttling does. */
		cause = cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
			cc == CURLE_SSL_CONNECT_ERROR || cc == CURLE_OPERATION_TIMEDOUT
			? S3_RETRY_CONNECT : S3_RETRY_NETWORK;
		err = util_curl_errno(cc, &retry);
		snprintf(r->reason, sizeof(r->reason), "%s",
			 r->curl_err[0] ? r->curl_err : curl_easy_strerror(cc));
		/* The mount check must answer in seconds: no retry of the network. */
		if (r->quick)
			retry = 0;
	} else if (r->status >= 200 && r->status < 300) {
		int s = check_success(r);

		if (s == 0) {
			r->result = 0;
			return -1;
		}
		err = s > 0 ? -EIO : s;
		retry = s > 0;
	} else {
		if (r->body.len)
			s3_error_parse(r->body.p, r->body.len, &r->err);
		if (!r->err.request_id[0])
			snprintf(r->err.request_id, sizeof(r->err.request_id), "%s", r->request_id);
		err = s3_error_errno(r->status, r->err.code, &retry);
		cause = r->status == 429 || r->status == 503 || strcmp(r->err.code, "SlowDown") == 0
			? S3_RETRY_THROTTLE : S3_RETRY_SERVER;
		if (strcmp(r->err.code, "ExpiredToken") == 0 && !r->expired_retried) {
			/* Temporary credentials ran out between refreshes: reload once. */
			r->expired_retried = 1;
			creds_invalidate(c->creds);
			retry = 1;
			if (r->attempt < max) {
				r->retry_cause = S3_RETRY_EXPIRED;
				log_info(TAG, "%s: credentials expired, reloaded; attempt %d",
					 op_name(r->op), r->attempt + 1);
				return 0;
			}
		}
		snprintf(r->reason, sizeof(r->reason), "HTTP %ld%s%s", r->status,
			 r->err.code[0] ? " " : "", r->err.code);
	}

	if (retry && r->attempt < max) {
		static _Thread_local uint64_t rng;
		int64_t delay;

		if (!rng)
			rng = (uint64_t)util_now_ms() * 0x9E3779B97F4A7C15ull ^ (uintptr_t)r;
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		delay = r->quick ? 100 : s3_retry_delay_ms(cause, r->attempt, rng);
		r->fresh_conn = cause != S3_RETRY_THROTTLE && cause != S3_RETRY_CONNECT;
		r->retry_cause = cause;
		if (r->attempt >= 3)
			log_info(TAG, "%s attempt %d/%d failed (%s), retrying in %" PRId64 " ms",
				 op_name(r->op), r->attempt, max, r->reason, delay);
		else
			log_debug(TAG, "%s attempt %d/%d failed (%s), retrying in %" PRId64 " ms",
				  op_name(r->op), r->attempt, max, r->reason, delay);
		return delay;
	}
	/* Out of attempts on something transient: the caller sees -EIO, or
	 * -ETIMEDOUT when the network kept stalling. */
	if (retry && !r->quick && err != -ETIMEDOUT)
		err = -EIO;
	r->result = err;
	return -1;
}

/* Keys go to the log with anything unprintable as \xNN, cut at 256 bytes. */
static void log_key(char *dst, size_t cap, const char *k, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len && o + 5 < cap; i++) {
		unsigned char ch = (unsigned char)k[i];

		if (ch >= 0x20 && ch != 0x7f && ch != '\\') {
			dst[o++] = (char)ch;
		} else {
			snprintf(dst + o, cap - o, "\\x%02x", ch);
			o += 4;
		}
		if (i == 255 && len > 256) {
			snprintf(dst + o, cap - o, "...");
			o += 3;
			break;
		}
	}
	dst[o < cap ? o : cap - 1] = '\0';
}

void s3_req_log_failure(const struct s3_req *r)
{
	char key[1100];
	int level = r->result == -ENOENT ? LOG_DEBUG :
		    r->result == -ESTALE ? LOG_INFO : LOG_ERR;

	if (level == LOG_DEBUG && log_get_level() < LOG_DEBUG)
		return;
	if (r->key) {
		log_key(key, sizeof(key), r->key, r->key_len);
	} else {
		const char *p = "";

		for (size_t i = 0; i < r->n_query; i++)
			if (strcmp(r->query[i].name, "prefix") == 0)
				p = r->query[i].value;
		log_key(key, sizeof(key), p, strlen(p));
	}
	log_msg(level, TAG, "%s %s'%s' failed after %d attempt%s: %s (HTTP %ld, code %s, "
		"request id %s): %s", op_name(r->op), r->key ? "" : "prefix ", key, r->attempt,
		r->attempt == 1 ? "" : "s", strerror(-r->result), r->final_status,
		r->err.code[0] ? r->err.code : "-",
		r->err.request_id[0] ? r->err.request_id :
		(r->request_id[0] ? r->request_id : "-"),
		r->reason[0] ? r->reason : (r->err.message[0] ? r->err.message : "-"));
}
