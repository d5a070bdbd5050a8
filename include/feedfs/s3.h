/*
 * s3 — the S3 client: SigV4-signed HTTP requests over one libcurl multi handle.
 *
 * DESIGN
 * One thread (the "http thread") owns the curl multi handle and every easy handle
 * in flight; connections are kept alive and reused. Any thread may submit work;
 * submissions cross to the http thread through a locked queue and a wakeup.
 * Completion callbacks run ON THE HTTP THREAD and must not block.
 * Retries (5xx, 429/503 SlowDown, connection reset, short body, stall) happen
 * inside this module, by cause: throttling backs off exponentially with full
 * jitter; the rest is retried at once on a fresh connection (a few times,
 * then with backoff too). Each retry re-signs the request. A GET, HEAD or
 * LIST that moves no byte for longer than the store's recent tail is hedged:
 * a second, identical request races it and the first good answer wins
 * (src/s3/http.c). Neither changes the attempt budget or any errno below. Only the final outcome reaches the caller, as a byte count
 * or a negative errno mapped by one table (src/s3/error.c):
 *   NoSuchKey/404 -> -ENOENT, NoSuchBucket -> -ENOENT, AccessDenied/403 -> -EACCES,
 *   SignatureDoesNotMatch/InvalidAccessKeyId -> -EACCES, 412 PreconditionFailed ->
 *   -ESTALE, InvalidRange/416 -> -EINVAL, retries exhausted / connect failure -> -EIO
 *   (-EHOSTUNREACH/-ECONNREFUSED for the mount-time check), timeouts -> -ETIMEDOUT
 *   after retries.
 * Every failure is logged once, with the key, HTTP status, S3 code and request id.
 *
 * Keys are passed and returned as raw bytes (UTF-8 as stored in the bucket); this
 * module does all URI encoding and `encoding-type=url` decoding.
 */
#ifndef FEEDFS_S3_H
#define FEEDFS_S3_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "feedfs/fetch.h"

struct creds_chain;
struct s3_client;

#define S3_ETAG_MAX 128

/* Which service a bucket URL names (s3://, oss://, gs://); it picks the default
 * endpoint and signing region. Any other store: S3_STORE_AWS + endpoint_url. */
enum s3_store { S3_STORE_AWS = 0, S3_STORE_OSS, S3_STORE_GCS };

struct s3_config {
	const char *endpoint_url;   /* "http://127.0.0.1:4568"; NULL: s3_default_endpoint() */
	const char *region;         /* NULL: "us-east-1" ("auto" for GCS) */
	const char *bucket;
	int force_path_style;       /* else virtual-hosted (bucket.host) where it can work:
				     * see s3_pick_path_style() in s3_i.h */
	enum s3_store store;
	int oss_internal;           /* OSS: the -internal (in-VPC) endpoint */
	int list_v1;                /* ListObjects V1 (marker) for stores without V2 */
	struct creds_chain *creds;  /* never NULL; may be anonymous */
	const char *ca_bundle;      /* NULL: system default */
	int no_verify_tls;          /* --no-verify-ssl: skip peer and host checks (unsafe) */
	int connect_timeout_ms;     /* 0: default 10 s */
	int stall_timeout_ms;       /* no bytes for this long -> retry; 0: default 30 s */
	int max_retries;            /* 0: default 10 attempts in all */
	int hedge_budget_pct;       /* hedges within this % of extra requests; 0: none */
	int max_connections;        /* concurrent requests; 0: default 32 */
};

struct s3_object {
	char *key;                  /* full key, decoded, NUL-terminated; may hold NULs: see key_len */
	size_t key_len;
	uint64_t size;
	int64_t mtime_ms;           /* LastModified / Last-Modified, wall clock */
	char etag[S3_ETAG_MAX];     /* with its quotes, exactly as the server sent it */
};

struct s3_list_page {
	struct s3_object *objects;  /* keys in page order */
	size_t n_objects;
	char **prefixes;            /* CommonPrefixes, decoded, each ends with the delimiter */
	size_t *prefix_lens;
	size_t n_prefixes;
	char *next_token;           /* NextContinuationToken; NULL when !truncated */
	int truncated;
};

/* Counters (monotonic, bumped and read with relaxed atomics); described once
 * in s3_stats_group (src/s3/client.c), which every rendering walks. */
struct s3_stats {
	uint64_t requests;          /* HTTP requests sent, every attempt */
	uint64_t get_requests, head_requests, list_requests;
	uint64_t gets, heads, lists; /* operations asked for, once whatever their retries */
	uint64_t retries;           /* attempts after the first, by cause: */
	uint64_t retries_throttle;  /* 503 SlowDown, 429 */
	uint64_t retries_server;    /* other 5xx */
	uint64_t retries_network;   /* connect failure, reset, transfer error */
	uint64_t retries_stall;     /* no byte for --stall-timeout */
	uint64_t retries_body;      /* body short, long or of the wrong range */
	uint64_t retries_expired;   /* ExpiredToken: credentials reloaded */
	uint64_t stalls;            /* attempts that went longer than the hedge delay
				     * without a byte (each counted once) */
	uint64_t hedges_started;    /* second requests sent for a stalled attempt */
	uint64_t hedges_won;        /* ... that finished first and gave the answer */
	uint64_t errors;            /* operations that failed in the end */
	uint64_t cancelled;         /* GETs ended early by s3_get_cancel */
	uint64_t bytes_in;          /* response bytes of every kind */
	uint64_t object_bytes;      /* GET body bytes accepted (object data) */
};

struct stats_group;
struct stats_hist_desc;
extern const struct stats_group s3_stats_group;   /* obj: struct s3_client * */
/* Request latency, submit to completion (retries included), by kind and
 * outcome: *n descriptors, valid while the client lives. */
const struct stats_hist_desc *s3_client_hists(struct s3_client *c, size_t *n);

/* Default endpoint of a store for a region (malloc'd):
 *   AWS  https://s3.<region>.amazonaws.com (".com.cn" for cn-* regions)
 *   OSS  https://oss-<region>[-internal].aliyuncs.com ("oss-" in region tolerated)
 *   GCS  https://storage.googleapis.com */
char *s3_default_endpoint(enum s3_store store, const char *region, int internal);

int s3_client_new(const struct s3_config *cfg, struct s3_client **out);
/* Signing region and endpoint in use (after any discovery by s3_check_access). */
const char *s3_client_region(const struct s3_client *c);
const char *s3_client_endpoint(const struct s3_client *c);
/* No more requests: everything waiting, backing off or in flight ends now
 * with -ECANCELED, new ones fail -ESHUTDOWN. For the teardown once the
 * session is over, so that an unmount does not wait out retries. */
void s3_client_quiesce(struct s3_client *c);
void s3_client_destroy(struct s3_client *c);
void s3_client_stats(struct s3_client *c, struct s3_stats *out);

/* Mount-time check: one ListObjectsV2 of `prefix` with max-keys=1. When the
 * answer says the bucket lives in another region (x-amz-bucket-region header or
 * <Region> of the error), the client switches to that region (and, without an
 * explicit endpoint, to its endpoint), logs it once and asks again. Returns 0 or
 * -errno and, on failure, writes one user-facing line into msg, e.g.
 * "bucket 'x' does not exist (NoSuchBucket, request id ABC)" or
 * "cannot connect to http://127.0.0.1:1: Connection refused". Does not retry
 * connection failures for long (a few seconds at most). */
int s3_check_access(struct s3_client *c, const char *prefix, char *msg, size_t msg_len);

/* One ListObjectsV2 page (encoding-type=url requested, decoded only when the
 * response says <EncodingType>url</EncodingType>). delimiter may be NULL.
 * continuation may be NULL. With cfg.list_v1 the request is ListObjects V1 and
 * continuation/next_token carry the marker instead; callers see no difference. max_keys 0: server default (1000). Blocking. */
int s3_list(struct s3_client *c, const char *prefix, const char *delimiter,
	    const char *continuation, int max_keys, struct s3_list_page *out);
void s3_list_page_cleanup(struct s3_list_page *p);

/* HeadObject. Blocking. 0 or -errno (-ENOENT when absent). */
int s3_head(struct s3_client *c, const char *key, size_t key_len, struct s3_object *out);
void s3_object_cleanup(struct s3_object *o);

/* Ranged GET of exactly [off, off+len) into buf (len > 0; never for a size-0
 * object). if_match may be NULL; when set, a changed object yields -ESTALE.
 * A body shorter or longer than len, or a Content-Range that does not match, is
 * retried and never delivered as success.
 * done(arg, result) runs on the http thread with result == len or -errno.
 * Returns 0 when queued, -errno when it could not be queued (done not called). */
typedef void (*s3_get_done_fn)(void *arg, ssize_t result);
int s3_get_async(struct s3_client *c, const char *key, size_t key_len,
		 const char *if_match, uint64_t off, size_t len, void *buf,
		 s3_get_done_fn done, void *arg);

/* Ask that the GET queued by s3_get_async with (done, arg) end early. Its
 * done still runs exactly once, later, on the http thread: with -ECANCELED,
 * or with its full result when it finished first or had at most
 * S3_CANCEL_FINISH_BYTES (256 KiB) left to receive. Never calls done itself.
 * The caller must not have seen done(arg) run before this call (so arg names
 * that GET and no later one: the cancel reaches the http thread behind the
 * GET it names and ahead of any GET submitted after it). A cancelled GET is
 * not an error: not counted in errors, not logged. 0, or -errno when the note
 * could not be queued (the GET then runs to its end). */
int s3_get_cancel(struct s3_client *c, s3_get_done_fn done, void *arg);

/* The client as the bottom of the read path's fetcher stack (fetch.h):
 * fetch is s3_get_async of [off, off+len) with If-Match on the request's ETag
 * (obj_size is not needed), cancel is s3_get_cancel (cancels = 1; a note that
 * cannot be queued lets the GET run to its end). Caller-allocated; nothing to
 * destroy. done runs on the http thread. */
struct s3_fetcher {
	struct fetcher base;
	struct s3_client *client;
};
void s3_fetcher_init(struct s3_fetcher *sf, struct s3_client *c);

/* Blocking form of s3_get_async. Returns len or -errno. */
ssize_t s3_get(struct s3_client *c, const char *key, size_t key_len,
	       const char *if_match, uint64_t off, size_t len, void *buf);

#endif
