/*
 * sigv4_i.h — AWS Signature Version 4 for S3 (private to src/s3/).
 *
 * Pure functions: no I/O, no clock, no globals. The caller passes the time, so
 * the same inputs always give the same signature (that is what makes the
 * table-driven vectors in tests/vectors/sigv4/ possible).
 */
#ifndef FEEDFS_S3_SIGV4_I_H
#define FEEDFS_S3_SIGV4_I_H

#include <stddef.h>
#include <stdint.h>

struct s3_creds;

#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"
#define SIGV4_EMPTY_SHA256 \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* One query parameter or header, raw (not encoded). value may be "". */
struct sigv4_kv {
	const char *name;
	const char *value;
};

struct sigv4_input {
	const char *method;              /* "GET", "HEAD" */
	const char *host;                /* Host header value: "bucket.host:port" */
	const char *canonical_uri;       /* already encoded, see s3_uri_encode() */
	const struct sigv4_kv *query;    /* unsorted, raw; encoded and sorted inside */
	size_t n_query;
	const struct sigv4_kv *headers;  /* extra headers to sign (Range, If-Match) */
	size_t n_headers;
	const char *payload_hash;        /* NULL: UNSIGNED-PAYLOAD */
	const char *region;
	const char *service;             /* "s3" */
	int64_t time_s;                  /* Unix seconds (UTC) */
};

/* What the request must carry. Strings are malloc'd; wipe with sigv4_output_cleanup().
 * canonical_request and string_to_sign are kept for tests only: never log them
 * in production (they are harmless, but the habit is not). */
struct sigv4_output {
	char amz_date[17];               /* "20240102T030405Z" */
	char *authorization;             /* full header value */
	char *content_sha256;            /* x-amz-content-sha256 value */
	char *security_token;            /* NULL when the creds have none */
	char *canonical_request;
	char *string_to_sign;
};

/* Percent-encode per SigV4: every byte except A-Z a-z 0-9 - _ . ~ becomes %XX
 * (upper-case hex); keep_slash leaves '/' alone (object key paths).
 * Returns a malloc'd NUL-terminated string, or NULL on allocation failure. */
char *s3_uri_encode(const char *s, size_t len, int keep_slash);

/* "a=1&b=2": names and values encoded, sorted by encoded name then value. The
 * same string is used as the URL's query, so what is signed is what is sent. */
char *sigv4_canonical_query(const struct sigv4_kv *q, size_t n);

/* Sign. Returns 0 or -errno (-EINVAL for missing inputs, -ENOMEM). */
int sigv4_sign(const struct sigv4_input *in, const struct s3_creds *cr,
	       struct sigv4_output *out);
void sigv4_output_cleanup(struct sigv4_output *out);

#endif
