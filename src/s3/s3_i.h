/*
 * s3_i.h — state shared by the files of src/s3/ (private to the module).
 *
 * Who touches what:
 *   struct s3_req is handed from the submitting thread to the http thread by
 *   s3_http_submit(); from then on ONLY the http thread reads or writes it, until
 *   its done() callback runs (on the http thread), which hands it back.
 *   struct s3_client's fields are immutable after s3_client_new(), except the
 *   stats (atomics).
 */
#ifndef FEEDFS_S3_I_H
#define FEEDFS_S3_I_H

#include <curl/curl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "feedfs/buf.h"
#include "feedfs/s3.h"
#include "feedfs/stats.h"
#include "sigv4_i.h"

#define S3_CODE_MAX 64
#define S3_REQID_MAX 128
#define S3_MSG_MAX 256
#define S3_REGION_MAX 64
#define S3_ERRBODY_MAX (64 * 1024)      /* error documents are small */
#define S3_LISTBODY_MAX (64 * 1024 * 1024)

struct s3_http;

/* S3_OP_CANCEL is no request: a note to the http thread, carried through the
 * same FIFO as submissions so that it is seen after the GET it names and
 * before any later GET (see s3_get_cancel). */
enum s3_op { S3_OP_GET, S3_OP_HEAD, S3_OP_LIST, S3_OP_CANCEL };

/* The latency histograms of a client: kind x outcome. */
enum { S3_HIST_GET_OK, S3_HIST_GET_ERROR, S3_HIST_GET_CANCELLED, S3_HIST_HEAD_OK,
       S3_HIST_HEAD_ERROR, S3_HIST_LIST_OK, S3_HIST_LIST_ERROR, S3_HIST_N };
/* Record a finished request's latency (http thread, just before done). */
struct s3_req;
void s3_req_observe(struct s3_req *r);

/* ---- error.c ------------------------------------------------------------ */

struct s3_error_info {
	char code[S3_CODE_MAX];
	char message[S3_MSG_MAX];
	char request_id[S3_REQID_MAX];
	char region[S3_REGION_MAX];         /* <Region>, sent with a wrong signing region */
};

/* Map an HTTP status and S3 error code ("" or NULL when none) to -errno, and
 * say whether the request is worth another attempt. One table decides both. */
int s3_error_errno(long status, const char *code, int *retryable);
/* Parse an <Error> document; fields not present stay "". 0 or -EIO. */
int s3_error_parse(const char *body, size_t len, struct s3_error_info *out);

/* ---- list.c ------------------------------------------------------------- */

/* Parse a ListObjectsV2 response body into *out (zeroed first). 0 or -EIO on
 * malformed input (nothing leaks, *out is left empty). */
int s3_list_parse(const char *body, size_t len, struct s3_list_page *out);
/* The same for ListObjects V1: out->next_token is the marker of the next page,
 * NextMarker when the server sent one, else the greatest key or common prefix
 * of this page (servers omit NextMarker without a delimiter, and some with). */
int s3_list_parse_v1(const char *body, size_t len, struct s3_list_page *out);
/* Form-style decoding used by S3's encoding-type=url: %XX and '+' -> ' '.
 * Returns malloc'd bytes (NUL-terminated) and length, or NULL if malformed. */
char *s3_url_decode(const char *s, size_t len, size_t *out_len);

/* ---- client / request --------------------------------------------------- */

/* Why an attempt failed in a way worth another one (the retries_* counters,
 * and the delay before that attempt). */
enum s3_retry_cause {
	S3_RETRY_BODY,          /* body short, long or of the wrong range */
	S3_RETRY_STALL,         /* cut by the --stall-timeout watchdog */
	S3_RETRY_NETWORK,       /* reset, cut short, transfer error */
	S3_RETRY_THROTTLE,      /* 503 SlowDown, 429 and their codes */
	S3_RETRY_SERVER,        /* other 5xx, RequestTimeout */
	S3_RETRY_EXPIRED,       /* ExpiredToken: credentials reloaded, no delay */
	S3_RETRY_CONNECT,       /* no connection: refused, unresolved, timed out
				 * (counted with network, backs off) */
};


struct s3_client {
	struct s3_http *http;
	struct creds_chain *creds;
	char *scheme;               /* "http" / "https" */
	char *authority;            /* host[:port] as the Host header (default port dropped) */
	char *base_path;            /* endpoint path prefix without trailing '/', usually "" */
	char *bucket;
	char *region;
	char *endpoint_shown;       /* for user-facing messages */
	int path_style;
	/* Kept to rebuild the endpoint when the bucket's region is discovered.
	 * region, authority, endpoint_shown and path_style may change ONLY in
	 * s3_check_access(), before any other request is submitted. */
	enum s3_store store;
	int endpoint_from_region;   /* no --endpoint-url: derived from store + region */
	int oss_internal;
	int force_path_style;
	int list_v1;
	int connect_timeout_ms;
	int stall_timeout_ms;
	int no_verify_tls;          /* cfg.no_verify_tls */
	int max_attempts;
	long get_recv_buf;          /* curl's receive buffer for large GETs, bytes */
	/* http thread only: sockets curl opened, for SO_RCVLOWAT (request.c);
	 * a ring, entries may be stale (each use checks the connection). */
#define S3_LOWAT_FDS 128
	int lowat_fd[S3_LOWAT_FDS];
	unsigned lowat_next;
	struct s3_stats stats;      /* relaxed atomics: S3_STAT_ADD */
	/* Latency by kind and outcome, S3_HIST_* order; hist_desc names them. */
	struct stats_hist hist[S3_HIST_N];
	struct stats_hist_desc hist_desc[S3_HIST_N];
};

#define S3_STAT_ADD(c, field, n) __atomic_add_fetch(&(c)->stats.field, (n), __ATOMIC_RELAXED)
#define S3_STAT_INC(c, field) S3_STAT_ADD(c, field, 1)

struct s3_req;
typedef void (*s3_req_done_fn)(struct s3_req *r);

struct s3_req {
	struct s3_client *c;
	enum s3_op op;
	char *key;                  /* raw key (GET/HEAD) */
	size_t key_len;
	char *url;                  /* full URL, query included */
	char *host;                 /* Host header value */
	char *canonical_uri;
	struct sigv4_kv *query;     /* owned strings */
	size_t n_query;
	char *if_match;
	uint64_t off;               /* GET */
	size_t len;
	unsigned char *buf;
	int quick;                  /* mount check: short timeouts, no long retries */

	/* per attempt, reset by s3_req_attempt_start() */
	CURL *easy;
	struct curl_slist *hdrs;
	long status;
	size_t got;                 /* GET bytes written into buf */
	int overflow;               /* GET body longer than asked */
	int lowat;                  /* SO_RCVLOWAT set on its socket; 0: never set */
	int lowat_fd;               /* that socket, once found; -1: not looked up */
	uint64_t body_ns;           /* stats_now_ns() at its first body piece; 0: none yet */
	size_t body_first;          /* that piece's bytes */
	struct util_buf body;       /* error / list body */
	int body_too_big;
	uint64_t content_length;
	int have_content_length;
	char content_range[96];
	char etag[S3_ETAG_MAX];
	int64_t last_modified_ms;
	char request_id[S3_REQID_MAX];
	char bucket_region[S3_REGION_MAX];  /* x-amz-bucket-region */
	char curl_err[CURL_ERROR_SIZE];
	int64_t progress_ms;        /* last time a byte moved (or the attempt began) */
	curl_off_t progress_bytes;  /* bytes moved as of progress_ms */
	int stalled;                /* the attempt was cut by the stall watchdog */
	int64_t max_gap_ms;         /* longest time without a byte in this attempt */
	int slow_seen;              /* counted in stats.stalls (once per attempt) */
	int fresh_conn;             /* next attempt: a new connection (not throttled) */
	enum s3_retry_cause retry_cause;    /* why the next attempt is made */

	/* hedging (http.c): a hedge is a one-attempt twin of a primary request */
	struct s3_req *primary;     /* set in a hedge: the request it races for */
	struct s3_req *hedge;       /* set in a primary: its hedge in flight */
	unsigned char *hedge_buf;   /* a GET hedge's own buffer (r->buf points here) */
	size_t hedge_from;          /* a GET hedge covers primary bytes [hedge_from, len) */
	int hedged_attempt;         /* the primary attempt that was hedged, 0 none */
	int waiting_hedge;          /* primary attempt over, its hedge still runs */
	int64_t deferred_delay;     /* what attempt_end said then: delay or -1 */

	/* across attempts */
	int attempt;                /* 1-based number of the attempt in flight */
	int expired_retried;
	int64_t due_ms;             /* timer: when to start the next attempt */
	uint64_t submit_ns;         /* stats_now_ns() at s3_req_new: latency start */
	struct s3_req *next;        /* queue link (owned by whichever queue holds it) */

	/* outcome */
	int result;                 /* 0 / len or -errno */
	long final_status;
	struct s3_error_info err;
	char reason[S3_MSG_MAX];    /* transport failure text, for messages */
	int curl_code;
	long os_errno;              /* errno of a failed connect, from curl */

	s3_req_done_fn done;        /* runs on the http thread, once */
	void *done_arg;
	s3_get_done_fn user_done;
	void *user_arg;
};

/* request.c */
int s3_req_new(struct s3_client *c, enum s3_op op, const char *key, size_t key_len,
	       struct s3_req **out);
int s3_req_add_query(struct s3_req *r, const char *name, const char *value);
/* Build URL, Host and canonical URI from the client config (after the query is set). */
int s3_req_finish_setup(struct s3_req *r);
void s3_req_free(struct s3_req *r);
/* Called on the http thread: prepare r->easy for one attempt (re-signs). 0 or -errno. */
int s3_req_attempt_start(struct s3_req *r, CURL *easy);
/* Called on the http thread when an attempt's transfer ended. Returns a delay in
 * ms (>= 0) when it must be retried, or -1 when r is complete (r->result set). */
int64_t s3_req_attempt_end(struct s3_req *r, CURLcode cc);
/* A hedge for primary p (its attempt in flight, on the http thread): the same
 * request once more, one attempt only. A GET whose primary already holds
 * verified bytes asks only for the rest, with If-Match on the ETag those bytes
 * came with. 0 or -errno. */
int s3_req_hedge_new(struct s3_req *p, struct s3_req **out);
/* r's attempt is being cut (r->easy still set): when it sent nothing yet,
 * take back what s3_req_attempt_start counted for it. */
void s3_req_cut_unsent(struct s3_req *r);
/* Copy a successful hedge's outcome into its primary (p->result = 0). */
void s3_req_hedge_adopt(struct s3_req *p, struct s3_req *hedge);
/* Log the final failure once (no secrets). */
void s3_req_log_failure(const struct s3_req *r);
/* Host header value: the endpoint's authority, or bucket.authority. malloc'd. */
char *s3_build_host(const char *authority, const char *bucket, int path_style);
/* 1 when the bucket must be addressed as ENDPOINT/BUCKET: forced; an IP literal
 * or localhost endpoint (no DNS name to put the bucket in); a bucket name that
 * is not a DNS label (upper case, '_'); a dotted name over https (a wildcard
 * certificate covers one label only). */
int s3_pick_path_style(const char *scheme, const char *authority, const char *bucket,
		       int force);
/* Split "scheme://authority/path" (default port dropped, IPv6 "[::1]:p" kept
 * with its brackets). 0 or -EINVAL; on success the three are malloc'd. */
int s3_parse_endpoint(const char *url, char **scheme, char **authority, char **base_path);
/* The region a failed answer says the bucket is in (x-amz-bucket-region
 * header, else <Region> of the error body), or NULL. */
const char *s3_discovered_region(const struct s3_req *r);
/* Canonical URI for a key (or the bucket when key == NULL). malloc'd. */
char *s3_build_canonical_uri(const char *base_path, const char *bucket, int path_style,
			     const char *key, size_t key_len);
/* Backoff for attempt n (1-based, the one that just failed): full jitter
 * in [0, min(cap, base * 2^(n-1))]. rnd is a uniformly random 64-bit value. */
int64_t s3_backoff_ms(int attempt, uint64_t rnd);

#define S3_BACKOFF_BASE_MS 100
#define S3_BACKOFF_CAP_MS 20000

/* Delay before the attempt after `attempt` failed for `cause`: throttling
 * and connect failures back off with full jitter (s3_backoff_ms); anything
 * else goes again at once, within S3_QUICK_JITTER_MS, for its first
 * S3_QUICK_RETRIES retries and then backs off as throttling would from its
 * first step. */
int64_t s3_retry_delay_ms(enum s3_retry_cause cause, int attempt, uint64_t rnd);

#define S3_QUICK_RETRIES 3
#define S3_QUICK_JITTER_MS 20

/*
 * curl's receive buffer for GETs of at least S3_BIG_GET bytes. At curl's
 * default (16 KiB) a 2 GiB read is 131,072 poll + recv rounds on the http
 * thread; bigger reads cut that per-byte overhead. The buffer lives in each
 * pooled easy handle (at most max_connections of them), so all of them
 * together stay within S3_RECV_BUF_TOTAL: 256 KiB each up to 64 connections,
 * less above, never below curl's default.
 */
#define S3_BIG_GET (1L << 20)
#define S3_RECV_BUF_MAX (256L << 10)
#define S3_RECV_BUF_MIN (16L << 10)
#define S3_RECV_BUF_TOTAL (16L << 20)
long s3_get_recv_buf(int max_connections);

/*
 * The body of a big GET is received in bites: while more than two receive
 * buffers of the body are still to come, its socket's SO_RCVLOWAT is one
 * receive buffer, or what the body's rate so far brings in S3_LOWAT_WAIT_NS if
 * that is less (none under S3_LOWAT_MIN), so the http thread is woken (and
 * curl polls and recv()s) once per ~256 KiB instead of once per segment the
 * server wrote (measured: 2.5x fewer syscalls, about 0.7x the http thread's
 * CPU per GiB on a cold sequential read; bench/results/coldpath.md), and a
 * slow store's bytes still move at least every few ms (the hedge and stall
 * clocks see no longer gaps than that). It never stalls a
 * response: it is set only with a Content-Length and more than twice it still
 * to come (TLS and curl's own buffer hold far less than that), is back to 1
 * before the last two buffers, and is reset before the handle leaves curl, so
 * no pooled connection keeps it. The socket is found by its addresses among
 * the last S3_LOWAT_FDS sockets curl opened (none found: no SO_RCVLOWAT).
 */
#define S3_LOWAT_WAIT_NS (10ull * 1000 * 1000)
#define S3_LOWAT_MIN (16 << 10)
struct s3_req;
void s3_req_lowat_reset(struct s3_req *r);

/* http.c */
struct s3_http_opts {
	const char *ca_bundle;
	int max_connections;
	int hedge_budget_pct;       /* 0: no hedges */
};
int s3_http_new(const struct s3_http_opts *o, struct s3_http **out);
/* The owner thread ends every request, waiting, backing off or in flight,
 * with -ECANCELED and exits; submissions from then on get -ESHUTDOWN.
 * Returns at once; s3_http_destroy joins the thread. */
void s3_http_quiesce(struct s3_http *h);
/* Completes everything still queued or in flight with -ECANCELED, then joins. */
void s3_http_destroy(struct s3_http *h);
/* Any thread. Hands r to the http thread. 0, or -ESHUTDOWN (r not taken).
 * An S3_OP_CANCEL r names its GET by user_done and user_arg; the http thread
 * frees it. */
int s3_http_submit(struct s3_http *h, struct s3_req *r);

/* A GET in curl with at most this much left to receive is let finish when
 * cancelled: cutting it closes its keep-alive connection, and the next GET
 * would pay a new connection (and TLS handshake) for it. */
#define S3_CANCEL_FINISH_BYTES (256u << 10)

#endif
