/*
 * sigv4 — AWS Signature Version 4 request signing for S3.
 *
 * canonical request = METHOD \n URI \n QUERY \n HEADERS \n \n SIGNED \n PAYLOADHASH
 * string to sign    = AWS4-HMAC-SHA256 \n DATE \n SCOPE \n hex(sha256(canonical))
 * signing key       = HMAC chain "AWS4"+secret -> date -> region -> service -> aws4_request
 *
 * Always signed: host, x-amz-content-sha256, x-amz-date, x-amz-security-token
 * (when the credentials carry one), plus whatever the caller adds (Range, If-Match).
 * The URI is taken as given (S3 does not normalise paths), the query is encoded
 * and sorted here.
 */
#include "sigv4_i.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "feedfs/buf.h"
#include "feedfs/creds.h"
#include "feedfs/util.h"

static int is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == '~';
}

char *s3_uri_encode(const char *s, size_t len, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(len * 3 + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (is_unreserved(c) || (keep_slash && c == '/')) {
			*o++ = (char)c;
		} else {
			*o++ = '%';
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		}
	}
	*o = '\0';
	return out;
}

struct enc_kv {
	char *name, *value;
};

static int enc_kv_cmp(const void *a, const void *b)
{
	const struct enc_kv *x = a, *y = b;
	int r = strcmp(x->name, y->name);

	return r ? r : strcmp(x->value, y->value);
}

char *sigv4_canonical_query(const struct sigv4_kv *q, size_t n)
{
	struct enc_kv *e = calloc(n ? n : 1, sizeof(*e));
	struct util_buf b = {0};
	char *res = NULL;
	size_t i;

	if (!e)
		return NULL;
	for (i = 0; i < n; i++) {
		const char *v = q[i].value ? q[i].value : "";

		e[i].name = s3_uri_encode(q[i].name, strlen(q[i].name), 0);
		e[i].value = s3_uri_encode(v, strlen(v), 0);
		if (!e[i].name || !e[i].value)
			goto out;
	}
	/* Byte order of the encoded forms, as SigV4 specifies. */
	qsort(e, n, sizeof(*e), enc_kv_cmp);
	for (i = 0; i < n; i++) {
		if (i)
			util_buf_putc(&b, '&');
		util_buf_puts(&b, e[i].name);
		util_buf_putc(&b, '=');
		util_buf_puts(&b, e[i].value);
	}
	res = util_buf_take(&b);
	b.p = NULL;
out:
	for (i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].value);
	}
	free(e);
	free(b.p);
	return res;
}

static void hex_encode(const unsigned char *in, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * n] = '\0';
}

static int sha256_hex(const char *s, size_t n, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return -EIO;
	hex_encode(md, 32, out);
	return 0;
}

static int hmac256(const void *key, size_t klen, const char *msg, unsigned char out[32])
{
	unsigned int olen = 0;

	if (!HMAC(EVP_sha256(), key, (int)klen, (const unsigned char *)msg, strlen(msg),
		  out, &olen) || olen != 32)
		return -EIO;
	return 0;
}

/* A header as signed: lower-case name, value with outer blanks trimmed and inner
 * runs of blanks folded to one space (SigV4 "Trimall"). */
struct canon_hdr {
	char *name;
	char *value;
};

static char *trimall(const char *v)
{
	char *out = malloc(strlen(v) + 1), *o = out;
	int space = 0;

	if (!out)
		return NULL;
	for (; *v; v++) {
		if (isspace((unsigned char)*v)) {
			space = 1;
			continue;
		}
		if (space && o != out)
			*o++ = ' ';
		space = 0;
		*o++ = *v;
	}
	*o = '\0';
	return out;
}

static int canon_hdr_cmp(const void *a, const void *b)
{
	/* Stable for equal names is not needed: equal names are joined with ','
	 * in input order below only if qsort kept it, so we sort names only and
	 * accept any order among duplicates (we never send duplicates). */
	return strcmp(((const struct canon_hdr *)a)->name, ((const struct canon_hdr *)b)->name);
}

static int canon_hdr_add(struct canon_hdr *h, size_t *n, const char *name, const char *value)
{
	size_t i, len = strlen(name);

	h[*n].name = malloc(len + 1);
	h[*n].value = trimall(value ? value : "");
	if (!h[*n].name || !h[*n].value) {
		free(h[*n].name);
		free(h[*n].value);
		return -ENOMEM;
	}
	for (i = 0; i < len; i++)
		h[*n].name[i] = (char)tolower((unsigned char)name[i]);
	h[*n].name[len] = '\0';
	(*n)++;
	return 0;
}

static void format_amz_date(int64_t t, char out[17])
{
	time_t tt = (time_t)t;
	struct tm tm;

	gmtime_r(&tt, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

/* Stage 0: the headers that are signed, lower-cased, trimmed and sorted: host,
 * x-amz-content-sha256, x-amz-date, x-amz-security-token (with a session
 * token) and the caller's. Fills out's content_sha256 and security_token.
 * 0 or -ENOMEM; *h is the caller's to free, with its *nh entries. */
static int signed_headers(const struct sigv4_input *in, const struct s3_creds *cr,
			  struct sigv4_output *out, struct canon_hdr **h, size_t *nh)
{
	int has_token = cr->session_token && cr->session_token[0];

	out->content_sha256 = strdup(in->payload_hash ? in->payload_hash : SIGV4_UNSIGNED_PAYLOAD);
	if (has_token)
		out->security_token = strdup(cr->session_token);
	if (!out->content_sha256 || (has_token && !out->security_token))
		return -ENOMEM;
	*h = calloc(in->n_headers + 4, sizeof(**h));
	if (!*h)
		return -ENOMEM;
	if (canon_hdr_add(*h, nh, "host", in->host) ||
	    canon_hdr_add(*h, nh, "x-amz-content-sha256", out->content_sha256) ||
	    canon_hdr_add(*h, nh, "x-amz-date", out->amz_date) ||
	    (out->security_token &&
	     canon_hdr_add(*h, nh, "x-amz-security-token", out->security_token)))
		return -ENOMEM;
	for (size_t i = 0; i < in->n_headers; i++)
		if (canon_hdr_add(*h, nh, in->headers[i].name, in->headers[i].value))
			return -ENOMEM;
	qsort(*h, *nh, sizeof(**h), canon_hdr_cmp);
	return 0;
}

/* Stage 1: METHOD \n URI \n QUERY \n HEADERS \n \n SIGNED \n PAYLOADHASH, and
 * SIGNED ("host;x-amz-date;...") on its own for the authorization value.
 * 0 or -ENOMEM; both strings are the caller's. */
static int canonical_request(const struct sigv4_input *in, const struct canon_hdr *h,
			     size_t nh, const char *query, const char *content_sha256,
			     char **canonical, char **signed_names)
{
	struct util_buf b = { 0 }, names = { 0 };

	util_buf_puts(&b, in->method);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, in->canonical_uri[0] ? in->canonical_uri : "/");
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, query);
	util_buf_putc(&b, '\n');
	for (size_t i = 0; i < nh; i++) {
		/* Repeated names become one line with values joined by ','. */
		if (i && strcmp(h[i].name, h[i - 1].name) == 0) {
			util_buf_putc(&b, ',');
			util_buf_puts(&b, h[i].value);
			continue;
		}
		if (i) {
			util_buf_putc(&b, '\n');
			util_buf_putc(&names, ';');
		}
		util_buf_puts(&b, h[i].name);
		util_buf_putc(&b, ':');
		util_buf_puts(&b, h[i].value);
		util_buf_puts(&names, h[i].name);
	}
	util_buf_puts(&b, "\n\n");
	util_buf_puts(&names, "");
	util_buf_append(&b, names.p ? names.p : "", names.len);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, content_sha256);
	*canonical = util_buf_take(&b);
	*signed_names = util_buf_take(&names);   /* NULL when an append to it failed */
	if (!*canonical || !*signed_names) {
		free(*canonical);
		free(*signed_names);
		*canonical = *signed_names = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Stage 2: AWS4-HMAC-SHA256 \n DATE \n SCOPE \n hex(sha256(canonical)).
 * 0, -ENOMEM, or -EIO when OpenSSL fails. */
static int string_to_sign(const char *amz_date, const char *scope, const char *canonical,
			  char **out)
{
	struct util_buf b = { 0 };
	char hash_hex[65];

	if (sha256_hex(canonical, strlen(canonical), hash_hex))
		return -EIO;
	util_buf_puts(&b, "AWS4-HMAC-SHA256\n");
	util_buf_puts(&b, amz_date);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, scope);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, hash_hex);
	*out = util_buf_take(&b);
	return *out ? 0 : -ENOMEM;
}

/* Stage 3: the signing key, HMAC chain "AWS4"+secret -> date -> region ->
 * service -> aws4_request, into k. The secret only ever lives in a wiped heap
 * copy and in k. 0, -ENOMEM, or -EIO when OpenSSL fails. */
static int signing_key(const char *secret, const char *date8, const char *region,
		       const char *service, unsigned char k[32])
{
	size_t slen = strlen(secret);
	char *kk = malloc(slen + 5);
	int rc;

	if (!kk)
		return -ENOMEM;
	memcpy(kk, "AWS4", 4);
	memcpy(kk + 4, secret, slen + 1);
	rc = hmac256(kk, slen + 4, date8, k);
	util_wipe(kk, slen + 4);
	free(kk);
	if (rc || hmac256(k, 32, region, k) || hmac256(k, 32, service, k) ||
	    hmac256(k, 32, "aws4_request", k))
		return -EIO;
	return 0;
}

/* Stage 4: the Authorization header's value. 0 or -ENOMEM. */
static int authorization_value(const char *access_key_id, const char *scope,
			       const char *signed_names, const char *sig_hex, char **out)
{
	struct util_buf b = { 0 };

	util_buf_puts(&b, "AWS4-HMAC-SHA256 Credential=");
	util_buf_puts(&b, access_key_id);
	util_buf_putc(&b, '/');
	util_buf_puts(&b, scope);
	util_buf_puts(&b, ", SignedHeaders=");
	util_buf_puts(&b, signed_names);
	util_buf_puts(&b, ", Signature=");
	util_buf_puts(&b, sig_hex);
	*out = util_buf_take(&b);
	return *out ? 0 : -ENOMEM;
}

int sigv4_sign(const struct sigv4_input *in, const struct s3_creds *cr,
	       struct sigv4_output *out)
{
	struct canon_hdr *h = NULL;
	size_t nh = 0;
	char *query = NULL, *signed_names = NULL, date8[9], scope[256], sig_hex[65];
	unsigned char k[32];
	int ret;

	memset(out, 0, sizeof(*out));
	if (!in->method || !in->host || !in->canonical_uri || !in->region || !in->service ||
	    !cr || !cr->access_key_id || !cr->secret_access_key)
		return -EINVAL;

	format_amz_date(in->time_s, out->amz_date);
	memcpy(date8, out->amz_date, 8);
	date8[8] = '\0';
	snprintf(scope, sizeof(scope), "%s/%s/%s/aws4_request", date8, in->region, in->service);

	ret = signed_headers(in, cr, out, &h, &nh);
	if (ret)
		goto out;
	query = sigv4_canonical_query(in->query, in->n_query);
	if (!query) {
		ret = -ENOMEM;
		goto out;
	}
	ret = canonical_request(in, h, nh, query, out->content_sha256, &out->canonical_request,
				&signed_names);
	if (ret)
		goto out;
	ret = string_to_sign(out->amz_date, scope, out->canonical_request, &out->string_to_sign);
	if (ret)
		goto out;
	ret = signing_key(cr->secret_access_key, date8, in->region, in->service, k);
	if (ret)
		goto out;
	if (hmac256(k, 32, out->string_to_sign, k)) {
		ret = -EIO;
		goto out;
	}
	hex_encode(k, 32, sig_hex);
	ret = authorization_value(cr->access_key_id, scope, signed_names, sig_hex,
				  &out->authorization);
out:
	if (ret)
		sigv4_output_cleanup(out);
	for (size_t i = 0; i < nh; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
	free(query);
	free(signed_names);
	util_wipe(k, sizeof(k));
	return ret;
}

void sigv4_output_cleanup(struct sigv4_output *out)
{
	if (out->authorization)
		util_wipe(out->authorization, strlen(out->authorization));
	free(out->authorization);
	if (out->security_token)
		util_wipe(out->security_token, strlen(out->security_token));
	free(out->security_token);
	free(out->content_sha256);
	free(out->canonical_request);
	free(out->string_to_sign);
	memset(out, 0, sizeof(*out));
}
