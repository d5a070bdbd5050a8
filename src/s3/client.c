/*
 * client — the public face of src/s3/ (see include/feedfs/s3.h for the DESIGN).
 *
 * Each call builds one struct s3_req, hands it to the http thread and, for the
 * blocking forms, waits on a condvar that the request's done() callback signals
 * from the http thread. List bodies are parsed by the waiting caller, so XML
 * work never holds up the http thread.
 */
#include "s3_i.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libxml/parser.h>

#include "feedfs/creds.h"
#include "feedfs/log.h"
#include "feedfs/util.h"
#include "feedfs/util_curl.h"

#define TAG "s3"

static pthread_once_t s3_global_once = PTHREAD_ONCE_INIT;
static int s3_global_ok;

static void s3_global_init(void)
{
	/* Both must run once before any thread uses them. */
	s3_global_ok = util_curl_init() == 0;
	xmlInitParser();
}

/* "scheme://authority/path" -> parts; the default port is dropped from the
 * authority because that is what goes into (and is signed as) Host. An IPv6
 * literal keeps its brackets: "[::1]:4568" is both the Host header and the
 * canonical host of SigV4. */
int s3_parse_endpoint(const char *url, char **scheme, char **authority, char **base_path)
{
	const char *p = strstr(url, "://"), *auth, *slash;
	char *sc, *au, *bp;
	size_t alen, bl;

	if (!p)
		return -EINVAL;
	sc = xstrndup(url, (size_t)(p - url));
	if (strcmp(sc, "http") != 0 && strcmp(sc, "https") != 0) {
		free(sc);
		return -EINVAL;
	}
	auth = p + 3;
	slash = strpbrk(auth, "/?#");
	alen = slash ? (size_t)(slash - auth) : strlen(auth);
	if (alen == 0 || memchr(auth, '@', alen) ||
	    (auth[0] == '[' && !memchr(auth, ']', alen))) {
		free(sc);
		return -EINVAL;
	}
	if (slash && *slash != '/') {
		free(sc);
		return -EINVAL;         /* a query or fragment in an endpoint is a mistake */
	}
	au = xstrndup(auth, alen);
	{
		const char *dflt = strcmp(sc, "http") == 0 ? ":80" : ":443";
		size_t dl = strlen(dflt);

		if (alen > dl && strcmp(au + alen - dl, dflt) == 0)
			au[alen - dl] = '\0';
	}
	bp = xstrdup(slash ? slash : "");
	bl = strlen(bp);
	while (bl > 0 && bp[bl - 1] == '/')
		bp[--bl] = '\0';
	*scheme = sc;
	*authority = au;
	*base_path = bp;
	return 0;
}

/* Host part of an authority, without port or IPv6 brackets, into buf. */
static void authority_host(const char *authority, char *buf, size_t cap)
{
	const char *end;

	if (authority[0] == '[') {
		end = strchr(authority, ']');
		snprintf(buf, cap, "%.*s", end ? (int)(end - authority - 1) : 0, authority + 1);
		return;
	}
	end = strrchr(authority, ':');
	snprintf(buf, cap, "%.*s", end ? (int)(end - authority) : (int)strlen(authority),
		 authority);
}

static int is_ipv4_literal(const char *h)
{
	int dots = 0;

	if (!*h)
		return 0;
	for (; *h; h++) {
		if (*h == '.')
			dots++;
		else if (*h < '0' || *h > '9')
			return 0;
	}
	return dots == 3;
}

int s3_pick_path_style(const char *scheme, const char *authority, const char *bucket,
		       int force)
{
	char host[256];

	if (force || authority[0] == '[')
		return 1;
	authority_host(authority, host, sizeof(host));
	if (is_ipv4_literal(host) || strcasecmp(host, "localhost") == 0)
		return 1;
	for (const char *b = bucket; *b; b++)
		if ((*b >= 'A' && *b <= 'Z') || *b == '_')
			return 1;   /* not a DNS label: only the path can carry it */
	if (strchr(bucket, '.') && strcmp(scheme, "https") == 0)
		return 1;
	return 0;
}

char *s3_default_endpoint(enum s3_store store, const char *region, int internal)
{
	const char *r = region && region[0] ? region : "us-east-1";

	switch (store) {
	case S3_STORE_OSS:
		if (strncmp(r, "oss-", 4) == 0)
			r += 4;
		return xasprintf("https://oss-%s%s.aliyuncs.com", r, internal ? "-internal" : "");
	case S3_STORE_GCS:
		return xstrdup("https://storage.googleapis.com");
	default:
		return xasprintf("https://s3.%s.amazonaws.com%s", r,
				 strncmp(r, "cn-", 3) == 0 ? ".cn" : "");
	}
}

/* (Re)compute endpoint parts and addressing from the current region. */
static int client_set_endpoint(struct s3_client *c, const char *url)
{
	char *sc, *au, *bp;
	int ret = s3_parse_endpoint(url, &sc, &au, &bp);

	if (ret)
		return ret;
	free(c->scheme);
	free(c->authority);
	free(c->base_path);
	c->scheme = sc;
	c->authority = au;
	c->base_path = bp;
	c->path_style = s3_pick_path_style(sc, au, c->bucket, c->force_path_style);
	return 0;
}

static void hists_init(struct s3_client *c);

int s3_client_new(const struct s3_config *cfg, struct s3_client **out)
{
	struct s3_client *c;
	struct s3_http_opts ho;
	const char *region;
	int ret;

	if (!cfg || !cfg->bucket || !cfg->bucket[0] || !cfg->creds)
		return -EINVAL;
	pthread_once(&s3_global_once, s3_global_init);
	if (!s3_global_ok)
		return -EIO;
	c = xcalloc(1, sizeof(*c));
	hists_init(c);
	c->creds = cfg->creds;
	region = cfg->region && cfg->region[0] ? cfg->region
					       : cfg->store == S3_STORE_GCS ? "auto" : "us-east-1";
	c->region = xstrdup(region);
	c->bucket = xstrdup(cfg->bucket);
	c->store = cfg->store;
	c->oss_internal = cfg->oss_internal;
	c->force_path_style = cfg->force_path_style;
	c->list_v1 = cfg->list_v1;
	c->endpoint_from_region = !cfg->endpoint_url;
	c->endpoint_shown = cfg->endpoint_url ? xstrdup(cfg->endpoint_url)
					      : s3_default_endpoint(c->store, c->region,
								    c->oss_internal);
	ret = client_set_endpoint(c, c->endpoint_shown);
	if (ret) {
		log_err(TAG, "bad endpoint URL '%s' (want http[s]://host[:port][/path])",
			c->endpoint_shown);
		goto fail;
	}
	log_debug(TAG, "endpoint %s, %s-style, region %s, %s", c->endpoint_shown,
		  c->path_style ? "path" : "virtual-hosted", c->region,
		  c->list_v1 ? "ListObjects V1" : "ListObjectsV2");
	c->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 10000;
	c->stall_timeout_ms = cfg->stall_timeout_ms > 0 ? cfg->stall_timeout_ms : 30000;
	c->no_verify_tls = cfg->no_verify_tls;
	c->max_attempts = cfg->max_retries > 0 ? cfg->max_retries : 10;
	ho.ca_bundle = cfg->ca_bundle;
	ho.hedge_budget_pct = cfg->hedge_budget_pct;
	ho.max_connections = cfg->max_connections > 0 ? cfg->max_connections : 32;
	c->get_recv_buf = s3_get_recv_buf(ho.max_connections);
	ret = s3_http_new(&ho, &c->http);
	if (ret)
		goto fail;
	*out = c;
	return 0;
fail:
	c->http = NULL;
	s3_client_destroy(c);
	return ret;
}

const char *s3_client_region(const struct s3_client *c)
{
	return c->region;
}

const char *s3_client_endpoint(const struct s3_client *c)
{
	return c->endpoint_shown;
}

void s3_client_quiesce(struct s3_client *c)
{
	if (c)
		s3_http_quiesce(c->http);
}

void s3_client_destroy(struct s3_client *c)
{
	if (!c)
		return;
	s3_http_destroy(c->http);
	free(c->scheme);
	free(c->authority);
	free(c->base_path);
	free(c->bucket);
	free(c->region);
	free(c->endpoint_shown);
	free(c);
}

void s3_client_stats(struct s3_client *c, struct s3_stats *o)
{
	stats_copy_u64(o, &c->stats, sizeof(*o));
}

static void s3_snapshot(void *obj, void *out)
{
	s3_client_stats(obj, out);
}

#define ROW_C(f, metric, labels, help) STATS_COUNTER(struct s3_stats, f, metric, labels, help)
static const struct stats_field s3_fields[] = {
	ROW_C(requests, "s3_http_requests_total", "", "HTTP requests sent to the store, every attempt."),
	ROW_C(get_requests, "s3_requests_total", "kind=\"get\"",
	      "Requests sent to the store by kind, every attempt (a proxy counts these)."),
	ROW_C(head_requests, "s3_requests_total", "kind=\"head\"", ""),
	ROW_C(list_requests, "s3_requests_total", "kind=\"list\"", ""),
	ROW_C(gets, "s3_operations_total", "kind=\"get\"",
	      "Operations asked of the S3 client, each once whatever its retries."),
	ROW_C(heads, "s3_operations_total", "kind=\"head\"", ""),
	ROW_C(lists, "s3_operations_total", "kind=\"list\"", ""),
	ROW_C(retries, "s3_retries_all_total", "", "Attempts after the first, all causes."),
	ROW_C(retries_throttle, "s3_retries_total", "cause=\"throttle\"",
	      "Attempts after the first, by the cause of the failure before them."),
	ROW_C(retries_server, "s3_retries_total", "cause=\"server\"", ""),
	ROW_C(retries_network, "s3_retries_total", "cause=\"network\"", ""),
	ROW_C(retries_stall, "s3_retries_total", "cause=\"stall\"", ""),
	ROW_C(retries_body, "s3_retries_total", "cause=\"body\"", ""),
	ROW_C(retries_expired, "s3_retries_total", "cause=\"expired_credentials\"", ""),
	ROW_C(stalls, "s3_stalls_total", "",
	      "Attempts that moved no byte for longer than the hedge delay (once each)."),
	ROW_C(hedges_started, "s3_hedges_total", "",
	      "Hedges: second requests sent for an attempt that moved no byte for too long."),
	ROW_C(hedges_won, "s3_hedges_won_total", "",
	      "Hedges that finished first and gave the answer (the attempt they raced was cut)."),
	ROW_C(errors, "s3_errors_total", "", "Operations that failed after their retries."),
	ROW_C(cancelled, "s3_cancelled_total", "", "GETs ended early because the reader moved on."),
	ROW_C(bytes_in, "s3_received_bytes_total", "", "Response bytes of every kind received."),
	ROW_C(object_bytes, "s3_bytes_total", "", "Object bytes received by GETs."),
};
#undef ROW_C

const struct stats_group s3_stats_group = {
	.name = "s3",
	.fields = s3_fields,
	.n_fields = sizeof(s3_fields) / sizeof(s3_fields[0]),
	.snapshot_size = sizeof(struct s3_stats),
	.snapshot = s3_snapshot,
};

static const struct {
	const char *key, *labels;
} s3_hist_names[S3_HIST_N] = {
	[S3_HIST_GET_OK] = { "s3_get_ok", "kind=\"get\",outcome=\"ok\"" },
	[S3_HIST_GET_ERROR] = { "s3_get_error", "kind=\"get\",outcome=\"error\"" },
	[S3_HIST_GET_CANCELLED] = { "s3_get_cancelled", "kind=\"get\",outcome=\"cancelled\"" },
	[S3_HIST_HEAD_OK] = { "s3_head_ok", "kind=\"head\",outcome=\"ok\"" },
	[S3_HIST_HEAD_ERROR] = { "s3_head_error", "kind=\"head\",outcome=\"error\"" },
	[S3_HIST_LIST_OK] = { "s3_list_ok", "kind=\"list\",outcome=\"ok\"" },
	[S3_HIST_LIST_ERROR] = { "s3_list_error", "kind=\"list\",outcome=\"error\"" },
};

static void hists_init(struct s3_client *c)
{
	for (int i = 0; i < S3_HIST_N; i++) {
		c->hist_desc[i].key = s3_hist_names[i].key;
		c->hist_desc[i].metric = "s3_request_duration_seconds";
		c->hist_desc[i].labels = s3_hist_names[i].labels;
		c->hist_desc[i].help = "S3 operations from submit to outcome, retries included.";
		c->hist_desc[i].h = &c->hist[i];
	}
}

const struct stats_hist_desc *s3_client_hists(struct s3_client *c, size_t *n)
{
	*n = S3_HIST_N;
	return c->hist_desc;
}

void s3_req_observe(struct s3_req *r)
{
	int i;

	switch (r->op) {
	case S3_OP_GET:
		i = r->result >= 0 ? S3_HIST_GET_OK : r->result == -ECANCELED
			? S3_HIST_GET_CANCELLED : S3_HIST_GET_ERROR;
		break;
	case S3_OP_HEAD:
		i = r->result >= 0 ? S3_HIST_HEAD_OK : S3_HIST_HEAD_ERROR;
		break;
	case S3_OP_LIST:
		i = r->result >= 0 ? S3_HIST_LIST_OK : S3_HIST_LIST_ERROR;
		break;
	default:
		return;
	}
	stats_hist_observe(&r->c->hist[i], stats_now_ns() - r->submit_ns);
}

/* ---- blocking calls ------------------------------------------------------ */

struct s3_waiter {
	pthread_mutex_t lock;   /* leaf */
	pthread_cond_t cond;
	int done;
};

static void waiter_done(struct s3_req *r)
{
	struct s3_waiter *w = r->done_arg;

	pthread_mutex_lock(&w->lock);
	w->done = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Submit r and wait for its outcome; r stays owned by the caller afterwards. */
static int run_blocking(struct s3_client *c, struct s3_req *r)
{
	struct s3_waiter w = { .done = 0 };
	int ret;

	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	r->done = waiter_done;
	r->done_arg = &w;
	ret = s3_http_submit(c->http, r);
	if (!ret) {
		pthread_mutex_lock(&w.lock);
		while (!w.done)
			pthread_cond_wait(&w.cond, &w.lock);
		pthread_mutex_unlock(&w.lock);
		ret = r->result;
	}
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return ret;
}

static int list_req(struct s3_client *c, const char *prefix, const char *delimiter,
		    const char *continuation, int max_keys, int quick, struct s3_req **out)
{
	struct s3_req *r;
	char mk[16];
	int ret = s3_req_new(c, S3_OP_LIST, NULL, 0, &r);

	if (ret)
		return ret;
	r->quick = quick;
	snprintf(mk, sizeof(mk), "%d", max_keys);
	if ((!c->list_v1 && (ret = s3_req_add_query(r, "list-type", "2"))) ||
	    (ret = s3_req_add_query(r, "encoding-type", "url")) ||
	    (ret = s3_req_add_query(r, "prefix", prefix ? prefix : "")) ||
	    (delimiter && (ret = s3_req_add_query(r, "delimiter", delimiter))) ||
	    (continuation && (ret = s3_req_add_query(r, c->list_v1 ? "marker"
								  : "continuation-token",
						     continuation))) ||
	    (max_keys > 0 && (ret = s3_req_add_query(r, "max-keys", mk))) ||
	    (ret = s3_req_finish_setup(r))) {
		s3_req_free(r);
		return ret;
	}
	*out = r;
	return 0;
}

/* A listing whose body does not parse is asked for again this many times in
 * all (within --max-retries): a page cut inside a well-formed HTTP answer (a
 * proxy, a server restarting) is a fault on the wire like a short body. */
#define S3_LIST_PARSE_ATTEMPTS 3

int s3_list(struct s3_client *c, const char *prefix, const char *delimiter,
	    const char *continuation, int max_keys, struct s3_list_page *out)
{
	int attempts = c->max_attempts < S3_LIST_PARSE_ATTEMPTS ? c->max_attempts
								: S3_LIST_PARSE_ATTEMPTS;

	for (int i = 1;; i++) {
		struct s3_req *r;
		int ret, malformed = 0;

		memset(out, 0, sizeof(*out));
		ret = list_req(c, prefix, delimiter, continuation, max_keys, 0, &r);
		if (ret)
			return ret;
		S3_STAT_INC(c, lists);
		ret = run_blocking(c, r);
		if (ret == 0) {
			ret = c->list_v1 ? s3_list_parse_v1(r->body.p, r->body.len, out)
					 : s3_list_parse(r->body.p, r->body.len, out);
			if (ret) {
				malformed = 1;
				log_msg(i < attempts ? LOG_WARNING : LOG_ERR, TAG,
					"LIST prefix '%s': malformed ListObjects%s response "
					"(%zu bytes, request id %s)%s", prefix ? prefix : "",
					c->list_v1 ? " V1" : "V2", r->body.len,
					r->request_id[0] ? r->request_id : "-",
					i < attempts ? ": asked again" : "");
				if (i < attempts) {
					S3_STAT_INC(c, retries);
					S3_STAT_INC(c, retries_body);
				} else {
					S3_STAT_INC(c, errors);
				}
			}
		}
		s3_req_free(r);
		if (!malformed || i >= attempts)
			return ret;
	}
}

int s3_head(struct s3_client *c, const char *key, size_t key_len, struct s3_object *out)
{
	struct s3_req *r;
	int ret;

	memset(out, 0, sizeof(*out));
	if (!key || key_len == 0)
		return -EINVAL;
	ret = s3_req_new(c, S3_OP_HEAD, key, key_len, &r);
	if (ret)
		return ret;
	ret = s3_req_finish_setup(r);
	if (ret) {
		s3_req_free(r);
		return ret;
	}
	S3_STAT_INC(c, heads);
	ret = run_blocking(c, r);
	if (ret == 0) {
		out->key = r->key;
		out->key_len = r->key_len;
		r->key = NULL;
		out->size = r->content_length;
		out->mtime_ms = r->last_modified_ms;
		memcpy(out->etag, r->etag, sizeof(out->etag));
	}
	s3_req_free(r);
	return ret;
}

static void get_async_done(struct s3_req *r)
{
	s3_get_done_fn fn = r->user_done;
	void *arg = r->user_arg;
	ssize_t res = r->result < 0 ? r->result : (ssize_t)r->len;

	s3_req_free(r);
	fn(arg, res);
}

static int get_req(struct s3_client *c, const char *key, size_t key_len,
		   const char *if_match, uint64_t off, size_t len, void *buf,
		   struct s3_req **out)
{
	struct s3_req *r;
	int ret;

	if (!key || key_len == 0 || len == 0 || !buf || off + len < off)
		return -EINVAL;
	ret = s3_req_new(c, S3_OP_GET, key, key_len, &r);
	if (ret)
		return ret;
	r->off = off;
	r->len = len;
	r->buf = buf;
	if (if_match && if_match[0] && !(r->if_match = strdup(if_match))) {
		s3_req_free(r);
		return -ENOMEM;
	}
	ret = s3_req_finish_setup(r);
	if (ret) {
		s3_req_free(r);
		return ret;
	}
	S3_STAT_INC(c, gets);
	*out = r;
	return 0;
}

int s3_get_async(struct s3_client *c, const char *key, size_t key_len,
		 const char *if_match, uint64_t off, size_t len, void *buf,
		 s3_get_done_fn done, void *arg)
{
	struct s3_req *r;
	int ret;

	if (!done)
		return -EINVAL;
	ret = get_req(c, key, key_len, if_match, off, len, buf, &r);
	if (ret)
		return ret;
	r->done = get_async_done;
	r->user_done = done;
	r->user_arg = arg;
	ret = s3_http_submit(c->http, r);
	if (ret)
		s3_req_free(r);
	return ret;
}

int s3_get_cancel(struct s3_client *c, s3_get_done_fn done, void *arg)
{
	struct s3_req *r;
	int ret;

	if (!done)
		return -EINVAL;
	ret = s3_req_new(c, S3_OP_CANCEL, NULL, 0, &r);
	if (ret)
		return ret;
	r->user_done = done;
	r->user_arg = arg;
	ret = s3_http_submit(c->http, r);
	if (ret)
		s3_req_free(r);
	return ret;
}

ssize_t s3_get(struct s3_client *c, const char *key, size_t key_len,
	       const char *if_match, uint64_t off, size_t len, void *buf)
{
	struct s3_req *r;
	int ret = get_req(c, key, key_len, if_match, off, len, buf, &r);

	if (ret)
		return ret;
	ret = run_blocking(c, r);
	s3_req_free(r);
	return ret < 0 ? ret : (ssize_t)len;
}

/* ---- mount-time check ---------------------------------------------------- */

static void access_message(const struct s3_client *c, const struct s3_req *r,
			   const char *prefix, char *msg, size_t n)
{
	const char *code = r->err.code, *rid = r->err.request_id[0] ? r->err.request_id : "-";

	if (r->result == 0) {
		snprintf(msg, n, "bucket '%s' at %s is readable", c->bucket, c->endpoint_shown);
	} else if (r->curl_code == CURLE_COULDNT_CONNECT) {
		snprintf(msg, n, "cannot connect to %s: %s", c->endpoint_shown,
			 r->os_errno ? strerror((int)r->os_errno) : r->reason);
	} else if (r->curl_code == CURLE_COULDNT_RESOLVE_HOST) {
		snprintf(msg, n, "cannot resolve the host of %s: %s", c->endpoint_shown, r->reason);
	} else if (r->curl_code == CURLE_OPERATION_TIMEDOUT) {
		snprintf(msg, n, "no answer from %s within a few seconds: %s",
			 c->endpoint_shown, r->reason);
	} else if (r->curl_code == CURLE_PEER_FAILED_VERIFICATION ||
		   r->curl_code == CURLE_SSL_CACERT_BADFILE ||
		   r->curl_code == CURLE_SSL_CONNECT_ERROR) {
		snprintf(msg, n, "TLS certificate of %s was not accepted: %s "
			 "(wrong host name, or a private CA: pass its bundle)",
			 c->endpoint_shown, r->reason);
	} else if (r->curl_code != CURLE_OK) {
		snprintf(msg, n, "request to %s failed: %s", c->endpoint_shown, r->reason);
	} else if (strcmp(code, "NoSuchBucket") == 0) {
		snprintf(msg, n, "bucket '%s' does not exist (NoSuchBucket, request id %s)",
			 c->bucket, rid);
	} else if (strcmp(code, "AccessDenied") == 0 || (!code[0] && r->final_status == 403)) {
		snprintf(msg, n, "access denied listing bucket '%s' prefix '%s' "
			 "(AccessDenied, request id %s): the credentials lack s3:ListBucket",
			 c->bucket, prefix ? prefix : "", rid);
	} else if (strcmp(code, "InvalidAccessKeyId") == 0) {
		snprintf(msg, n, "the access key id is not known to %s "
			 "(InvalidAccessKeyId, request id %s)", c->endpoint_shown, rid);
	} else if (strcmp(code, "SignatureDoesNotMatch") == 0) {
		snprintf(msg, n, "the secret key does not match the access key id, or the "
			 "clock is off (SignatureDoesNotMatch, request id %s)", rid);
	} else {
		snprintf(msg, n, "listing bucket '%s' at %s failed: HTTP %ld %s%s(request id %s)%s%s",
			 c->bucket, c->endpoint_shown, r->final_status, code,
			 code[0] ? " " : "", rid, r->err.message[0] ? ": " : "", r->err.message);
	}
}

const char *s3_discovered_region(const struct s3_req *r)
{
	const char *reg = r->bucket_region[0] ? r->bucket_region : r->err.region;

	if (r->result == 0 || !reg[0])
		return NULL;
	for (const char *p = reg; *p; p++)     /* it goes into a host name */
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-'))
			return NULL;
	return reg;
}

/* Switch the client to the region the server named. Only at mount time, with
 * no other request in flight (see s3_i.h). 0, or -errno. */
static int switch_region(struct s3_client *c, const char *region)
{
	char *old = c->region;

	log_info(TAG, "bucket '%s' is in region %s, not %s: signing for %s from now on",
		 c->bucket, region, old, region);
	c->region = xstrdup(region);
	free(old);
	if (c->endpoint_from_region) {
		char *ep = s3_default_endpoint(c->store, c->region, c->oss_internal);
		int ret = client_set_endpoint(c, ep);

		if (ret) {
			free(ep);
			return ret;
		}
		free(c->endpoint_shown);
		c->endpoint_shown = ep;
	}
	return 0;
}

static int check_once(struct s3_client *c, const char *prefix, struct s3_req **out)
{
	struct s3_req *r;
	struct s3_list_page page;
	int ret = list_req(c, prefix, NULL, NULL, 1, 1, &r);

	if (ret)
		return ret;
	S3_STAT_INC(c, lists);
	ret = run_blocking(c, r);
	if (ret == 0) {
		ret = c->list_v1 ? s3_list_parse_v1(r->body.p, r->body.len, &page)
				 : s3_list_parse(r->body.p, r->body.len, &page);
		if (ret == 0)
			s3_list_page_cleanup(&page);
		else
			snprintf(r->reason, sizeof(r->reason), "malformed ListObjects%s response",
				 c->list_v1 ? " V1" : "V2");
	}
	*out = r;
	return ret;
}

int s3_check_access(struct s3_client *c, const char *prefix, char *msg, size_t msg_len)
{
	struct s3_req *r = NULL;
	const char *reg;
	int ret = check_once(c, prefix, &r);

	if (ret && r && (reg = s3_discovered_region(r)) && strcmp(reg, c->region) != 0) {
		char region[S3_REGION_MAX];

		snprintf(region, sizeof(region), "%s", reg);
		s3_req_free(r);
		r = NULL;
		ret = switch_region(c, region);
		if (ret == 0)
			ret = check_once(c, prefix, &r);
	}
	if (!r) {
		if (msg && msg_len)
			snprintf(msg, msg_len, "cannot build the request: %s", strerror(-ret));
		return ret;
	}
	if (msg && msg_len) {
		if (ret && r->result == 0)
			snprintf(msg, msg_len, "%s at %s does not look like S3: %s",
				 c->bucket, c->endpoint_shown, r->reason);
		else
			access_message(c, r, prefix, msg, msg_len);
	}
	s3_req_free(r);
	return ret;
}
