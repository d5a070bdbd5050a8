/*
 * creds_i.h — private to src/creds/: the provider constructors, the chain's test
 * seam (custom providers, injectable clock) and the small helpers every provider
 * shares (string copies that wipe, HTTP, JSON; ISO 8601 times are util_parse_iso8601_ms).
 *
 * Provider contract (see also struct creds_provider_ops in creds.h):
 *   *_new(opts, &state) -> 0, or -errno (only on allocation-type failures; a
 *     source that is simply not configured still gets a state and answers
 *     -ENOENT from load, so the chain can say "tried X: not configured").
 *   load() is never called concurrently for one state: the chain single-flights
 *     every load, so provider state needs no lock of its own.
 *   load() never logs a secret; it may put a short, secret-free reason for its
 *     last outcome in a buffer that ops->explain() returns.
 */
#ifndef FEEDFS_CREDS_I_H
#define FEEDFS_CREDS_I_H

#include "feedfs/creds.h"

#include <stddef.h>
#include <stdint.h>

#define CREDS_TAG "creds"
#define CREDS_REASON_MAX 256

/* ---- the chain's test seam ------------------------------------------------ */

typedef int64_t (*creds_clock_fn)(void *arg);

struct creds_chain_config {
	const struct creds_provider_ops *const *ops;  /* n entries, in chain order */
	void **states;            /* n entries; ownership moves to the chain (also on failure) */
	size_t n;
	int anonymous;
	creds_clock_fn wall_ms;   /* NULL: util_wall_ms */
	void *clock_arg;
	int background;           /* 1: a refresher thread; 0: refresh on get, single flight */
	int64_t refresh_margin_ms;/* 0: CREDS_REFRESH_MARGIN_MS */
	int64_t retry_min_ms;     /* first back-off after a failed refresh; 0: 1000 */
};

int creds_chain_new_config(const struct creds_chain_config *cfg, struct creds_chain **out,
			   char *msg, size_t msg_len);

/* Counters for tests: loads attempted after the first, and how many failed. */
void creds_chain_counters(struct creds_chain *c, uint64_t *refreshes, uint64_t *failures);

/* Block until no refresh is in flight and none is due (tests only; bounded by
 * timeout_ms of real time). Returns 0 or -ETIMEDOUT. */
int creds_chain_wait_idle(struct creds_chain *c, int timeout_ms);

/* ---- providers -------------------------------------------------------------- */

extern const struct creds_provider_ops creds_env_ops;        /* "env" */
extern const struct creds_provider_ops creds_profile_ops;    /* "profile" / "process" */
extern const struct creds_provider_ops creds_webid_ops;      /* "web-identity" */
extern const struct creds_provider_ops creds_rrsa_ops;       /* "oidc-rrsa" */
extern const struct creds_provider_ops creds_container_ops;  /* "container" */
extern const struct creds_provider_ops creds_imds_ops;       /* "imds" */
extern const struct creds_provider_ops creds_ecs_ram_ops;    /* "ecs-ram-role" */

int creds_env_new(const struct creds_options *o, void **state);
int creds_profile_new(const struct creds_options *o, void **state);
int creds_webid_new(const struct creds_options *o, void **state);
int creds_rrsa_new(const struct creds_options *o, void **state);
int creds_container_new(const struct creds_options *o, void **state);
int creds_imds_new(const struct creds_options *o, void **state);
int creds_ecs_ram_new(const struct creds_options *o, void **state);

/* ---- shared helpers (src/creds/common.c) ---------------------------------- */

/* Fill *out with copies of the strings (tok may be NULL or ""). Returns 0 or
 * -EINVAL when ak or sk is missing/empty. */
int creds_fill(struct s3_creds *out, const char *ak, const char *sk, const char *tok,
	       int64_t expires_wall_ms);
/* Deep copy; dst must be empty. */
void creds_copy(struct s3_creds *dst, const struct s3_creds *src);
/* Free a string that may hold a secret. */
void creds_free_secret(char *s);

/* "1", "true", "yes", "on" (any case). */
int creds_env_true(const char *name);

/* Read a small file (<= max bytes) into a NUL-terminated buffer; trailing
 * whitespace is stripped. 0 or -errno. Caller frees with creds_free_secret. */
int creds_read_file(const char *path, size_t max, char **out);

/* A metadata role name: 1..n of [A-Za-z0-9_+=,.@-] (IAM's own set). */
int creds_role_name_ok(const char *s, size_t n);

/* Every provider's state struct begins with this, so one pair of functions
 * serves ops->explain and ops->detail for all of them. */
struct creds_msgs {
	char reason[CREDS_REASON_MAX];  /* why the last load found nothing or failed */
	char detail[CREDS_REASON_MAX];  /* where the last credentials came from */
};
const char *creds_state_explain(void *state);
const char *creds_state_detail(void *state);

/* snprintf into a reason buffer of CREDS_REASON_MAX (never pass a secret);
 * a NULL buf is ignored. */
void creds_reason(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- HTTP (src/creds/http.c): libcurl easy, blocking, short timeouts -------- */

struct creds_http_req {
	const char *method;       /* "GET", "PUT", "POST" */
	const char *url;
	const char *const *headers; /* NULL-terminated "Name: value" list, may be NULL */
	const char *body;         /* may be NULL */
	size_t body_len;
	long connect_timeout_ms;
	long timeout_ms;
	int no_proxy;             /* 1 for link-local metadata services */
};

struct creds_http_resp {
	long status;
	char *body;               /* NUL-terminated; wiped on cleanup */
	size_t len;
};

#define CREDS_HTTP_MAX_BODY (256 * 1024)

/* 0 when any HTTP response arrived (check status); on transport failure
 * util_curl_errno's -errno (-ECONNREFUSED, -ETIMEDOUT, -EHOSTUNREACH, -ENOMEM,
 * -EIO) or -EMSGSIZE for a body over CREDS_HTTP_MAX_BODY, with a short
 * secret-free description in err (CREDS_REASON_MAX). */
int creds_http(const struct creds_http_req *rq, struct creds_http_resp *rs, char *err);
void creds_http_resp_cleanup(struct creds_http_resp *rs);

/* "http://127.0.0.1:1234" + "/path" with one '/' between. Malloc'd. */
char *creds_url_join(const char *base, const char *path);

/* ---- metadata services (src/creds/metadata.c) ------------------------------
 * EC2 IMDSv2 and Aliyun ECS hardened mode share the token dance and the role
 * discovery. Owned by one provider state; used only inside its load (never
 * concurrently). */

struct creds_mds {
	const char *name;           /* "EC2 instance metadata" (messages) */
	char *endpoint;             /* "http://169.254.169.254" */
	const char *ttl_header;     /* "X-aws-ec2-metadata-token-ttl-seconds" */
	const char *token_header;   /* "X-aws-ec2-metadata-token" */
	int v1_allowed;             /* fall back to token-less GETs */
	int v1;                     /* the service has no tokens */
	char *token;                /* a secret */
	int64_t token_expires_ms;   /* monotonic */
	long connect_timeout_ms, timeout_ms;
};

/* real_address: the endpoint is the cloud's link-local default (short
 * timeouts: 1 s to connect, 2 s in all). */
void creds_mds_init(struct creds_mds *m, const char *name, const char *endpoint,
		    const char *ttl_header, const char *token_header, int v1_allowed,
		    int real_address);
void creds_mds_cleanup(struct creds_mds *m);
/* GET endpoint+path with the session token. 0 when an HTTP answer came back
 * (check rs->status), else -errno with why set. */
int creds_mds_get(struct creds_mds *m, const char *path, struct creds_http_resp *rs, char *why);

/* The state of IMDS and the ECS RAM role: a role's credentials from a metadata
 * service, the role named by the user or discovered (first line of list_path). */
struct creds_mds_role {
	struct creds_msgs m;        /* first: see creds_state_explain() */
	int disabled;               /* off by environment: load is -ENOENT, no mds */
	struct creds_mds mds;
	const char *list_path;      /* "/latest/meta-data/iam/security-credentials/" */
	const char *role_what;      /* "IAM role" (messages) */
	const char *where;          /* "instance metadata" (messages) */
	char role[256];
	int role_fixed;             /* named by the user: not discovered */
};

struct json_value;
/* Discover the role unless fixed, GET list_path+role and parse the JSON; a
 * "Code" other than "Success" is an error. 0 with *v filled (json_free it), or
 * -errno with m.reason set: -ENOENT when the service does not answer or no role
 * is attached (a miss), -EACCES when it refuses tokens, -EINVAL for a fixed role
 * that is not there, -EIO for an unusable answer. */
int creds_mds_role_fetch(struct creds_mds_role *r, struct json_value *v);
/* ops->destroy for a state that is a struct creds_mds_role (frees it). */
void creds_mds_role_destroy(void *state);

/* ---- JSON (src/creds/json.c): a small strict DOM parser --------------------- */

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json_value {
	enum json_type type;
	double num;               /* JSON_NUMBER, JSON_BOOL (0/1) */
	char *str;                /* JSON_STRING: decoded UTF-8, NUL-terminated */
	size_t str_len;
	size_t n;                 /* JSON_ARRAY / JSON_OBJECT: element count */
	char **keys;              /* JSON_OBJECT: n keys */
	struct json_value *items; /* n values */
};

#define JSON_MAX_DEPTH 32

/* Parse exactly one value (surrounding whitespace allowed). 0 or -EINVAL. */
int json_parse(const char *s, size_t len, struct json_value *out);
/* Frees and wipes every string (they may be secrets). */
void json_free(struct json_value *v);
/* Member of an object by key (first match), or NULL. */
const struct json_value *json_get(const struct json_value *obj, const char *key);
/* The string member, or NULL when absent or not a string. */
const char *json_get_str(const struct json_value *obj, const char *key);

/* The credential JSON that IMDS, the container endpoint and credential_process
 * return: AccessKeyId, SecretAccessKey, Token|SessionToken, Expiration.
 * Returns 0, or -EINVAL with a reason. */
int creds_from_aws_json(const struct json_value *obj, struct s3_creds *out, char *reason);

/* ---- STS role providers (src/creds/sts.c) ---------------------------------- */

/* The state of web identity and RRSA, or its first member: a role assumed
 * with a token file at an STS endpoint. */
struct creds_sts_role {
	struct creds_msgs m;            /* first: see creds_state_explain() */
	char *token_file, *role_arn, *session_name, *endpoint;
	int half_configured;            /* some of the variables set: load is -EINVAL */
};

/* Parse an STS answer into *out: 0, or -errno with a reason. */
typedef int (*creds_sts_parse_fn)(const char *s, size_t len, struct s3_creds *out,
				  char *reason);
/* The form body to POST for token (a malloc'd secret). */
typedef char *(*creds_sts_form_fn)(const struct creds_sts_role *r, const char *token);

/* What tells one STS provider from the other. */
struct creds_sts_kind {
	const char *token_what;         /* "web identity token" (messages) */
	const char *accept;             /* "Accept: application/xml" */
	creds_sts_form_fn form;
	creds_sts_parse_fn parse;
};

/* ops->load of an STS role provider: -ENOENT when not configured, -EINVAL
 * when half configured; else reads the token file, POSTs k->form's body to
 * r->endpoint and parses the answer with k->parse. Fills r->m.reason on
 * failure, r->m.detail on success. 0 or -errno. */
int creds_sts_role_load(struct creds_sts_role *r, const struct creds_sts_kind *k,
			struct s3_creds *out);
/* ops->destroy for a state that is a struct creds_sts_role (frees it). */
void creds_sts_role_destroy(void *state);

/* ---- STS XML (src/creds/webid.c) ------------------------------------------ */

/* Parse an AssumeRoleWithWebIdentity response (or an STS <ErrorResponse>).
 * 0 and *out filled, or -EACCES / -EINVAL with a reason naming the STS code. */
int creds_parse_sts_xml(const char *xml, size_t len, struct s3_creds *out, char *reason);

/* ---- Aliyun STS JSON (src/creds/rrsa.c) ----------------------------------- */
int creds_parse_aliyun_sts_json(const char *s, size_t len, struct s3_creds *out,
				char *reason);

/* ---- shared config files (src/creds/profile.c) ------------------------------ */

struct ini_kv { char *key; char *value; };
struct ini_profile {
	char *name;
	struct ini_kv *kv;
	size_t n;
};
struct ini_file {
	struct ini_profile *profiles;
	size_t n;
};

/* Parse an AWS-style INI text. is_config: section "[profile x]" names x, and
 * "[default]" names default; otherwise "[x]" names x. Keys are lower-cased.
 * Returns 0 or -EINVAL (with line number in reason). */
int creds_ini_parse(const char *text, int is_config, struct ini_file *out, char *reason);
void creds_ini_free(struct ini_file *f);
const struct ini_profile *creds_ini_profile(const struct ini_file *f, const char *name);
const char *creds_ini_get(const struct ini_profile *p, const char *key);

/* Parse credential_process output. 0 or -EINVAL with reason. */
int creds_parse_process_json(const char *s, size_t len, struct s3_creds *out, char *reason);

#endif
