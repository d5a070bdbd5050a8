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

int sigv4_sign(const struct sigv4_input *in, const struct s3_creds *cr,
	       struct sigv4_output *out)
{
	struct canon_hdr *h = NULL;
	size_t nh = 0, i;
	struct util_buf b = {0}, signed_names = {0};
	char *query = NULL, date8[9], scope_tail[256], hash_hex[65], sig_hex[65];
	unsigned char k[32];
	int ret = -ENOMEM;

	memset(out, 0, sizeof(*out));
	if (!in->method || !in->host || !in->canonical_uri || !in->region || !in->service ||
	    !cr || !cr->access_key_id || !cr->secret_access_key)
		return -EINVAL;

	format_amz_date(in->time_s, out->amz_date);
	memcpy(date8, out->amz_date, 8);
	date8[8] = '\0';
	out->content_sha256 = strdup(in->payload_hash ? in->payload_hash : SIGV4_UNSIGNED_PAYLOAD);
	if (cr->session_token && cr->session_token[0])
		out->security_token = strdup(cr->session_token);
	if (!out->content_sha256 || (cr->session_token && cr->session_token[0] && !out->security_token))
		goto fail;

	h = calloc(in->n_headers + 4, sizeof(*h));
	if (!h)
		goto fail;
	if (canon_hdr_add(h, &nh, "host", in->host) ||
	    canon_hdr_add(h, &nh, "x-amz-content-sha256", out->content_sha256) ||
	    canon_hdr_add(h, &nh, "x-amz-date", out->amz_date) ||
	    (out->security_token && canon_hdr_add(h, &nh, "x-amz-security-token", out->security_token)))
		goto fail;
	for (i = 0; i < in->n_headers; i++)
		if (canon_hdr_add(h, &nh, in->headers[i].name, in->headers[i].value))
			goto fail;
	qsort(h, nh, sizeof(*h), canon_hdr_cmp);

	query = sigv4_canonical_query(in->query, in->n_query);
	if (!query)
		goto fail;

	util_buf_puts(&b, in->method);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, in->canonical_uri[0] ? in->canonical_uri : "/");
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, query);
	util_buf_putc(&b, '\n');
	for (i = 0; i < nh; i++) {
		/* Repeated names become one line with values joined by ','. */
		if (i && strcmp(h[i].name, h[i - 1].name) == 0) {
			util_buf_putc(&b, ',');
			util_buf_puts(&b, h[i].value);
			continue;
		}
		if (i) {
			util_buf_putc(&b, '\n');
			util_buf_putc(&signed_names, ';');
		}
		util_buf_puts(&b, h[i].name);
		util_buf_putc(&b, ':');
		util_buf_puts(&b, h[i].value);
		util_buf_puts(&signed_names, h[i].name);
	}
	util_buf_puts(&b, "\n\n");
	util_buf_puts(&signed_names, "");
	if (signed_names.oom)
		goto fail;
	util_buf_puts(&b, signed_names.p);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, out->content_sha256);
	out->canonical_request = util_buf_take(&b);
	b.p = NULL;
	if (!out->canonical_request)
		goto fail;

	snprintf(scope_tail, sizeof(scope_tail), "%s/%s/%s/aws4_request",
		 date8, in->region, in->service);
	if (sha256_hex(out->canonical_request, strlen(out->canonical_request), hash_hex)) {
		ret = -EIO;
		goto fail;
	}
	b = (struct util_buf){0};
	util_buf_puts(&b, "AWS4-HMAC-SHA256\n");
	util_buf_puts(&b, out->amz_date);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, scope_tail);
	util_buf_putc(&b, '\n');
	util_buf_puts(&b, hash_hex);
	out->string_to_sign = util_buf_take(&b);
	b.p = NULL;
	if (!out->string_to_sign)
		goto fail;

	/* Signing key: the secret only ever lives in this stack buffer and k. */
	{
		size_t slen = strlen(cr->secret_access_key);
		char *kk = malloc(slen + 5);

		if (!kk)
			goto fail;
		memcpy(kk, "AWS4", 4);
		memcpy(kk + 4, cr->secret_access_key, slen + 1);
		ret = hmac256(kk, slen + 4, date8, k);
		util_wipe(kk, slen + 4);
		free(kk);
		if (ret || hmac256(k, 32, in->region, k) || hmac256(k, 32, in->service, k) ||
		    hmac256(k, 32, "aws4_request", k) || hmac256(k, 32, out->string_to_sign, k)) {
			ret = -EIO;
			goto fail;
		}
		hex_encode(k, 32, sig_hex);
		util_wipe(k, sizeof(k));
	}

	b = (struct util_buf){0};
	util_buf_puts(&b, "AWS4-HMAC-SHA256 Credential=");
	util_buf_puts(&b, cr->access_key_id);
	util_buf_putc(&b, '/');
	util_buf_puts(&b, scope_tail);
	util_buf_puts(&b, ", SignedHeaders=");
	util_buf_puts(&b, signed_names.p);
	util_buf_puts(&b, ", Signature=");
	util_buf_puts(&b, sig_hex);
	out->authorization = util_buf_take(&b);
	b.p = NULL;
	if (!out->authorization)
		goto fail;
	ret = 0;
	goto done;
fail:
	if (ret == 0)
		ret = -ENOMEM;
	sigv4_output_cleanup(out);
done:
	for (i = 0; i < nh; i++) {
		free(h[i].name);
		free(h[i].value);
	}
	free(h);
	free(query);
	free(b.p);
	free(signed_names.p);
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
