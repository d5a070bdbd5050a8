/*
 * container — the container credentials endpoint (ECS task roles, EKS Pod
 * Identity).
 *
 * $AWS_CONTAINER_CREDENTIALS_RELATIVE_URI is appended to http://169.254.170.2;
 * otherwise $AWS_CONTAINER_CREDENTIALS_FULL_URI is used as is, but plain http
 * only to a loopback host or the ECS/EKS agent addresses (169.254.170.2,
 * 169.254.170.23, fd00:ec2::23): the endpoint receives the authorization
 * token. The token is the contents of $AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
 * (re-read on every load: EKS rotates it), else
 * $AWS_CONTAINER_AUTHORIZATION_TOKEN, sent as the Authorization header.
 * The answer is JSON: AccessKeyId, SecretAccessKey, Token, Expiration.
 * When configured, every failure is an error (the chain stops), not a miss.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ECS_AGENT "http://169.254.170.2"
#define TOKEN_MAX (16 * 1024)

struct container_state {
	struct creds_msgs m;            /* first: see creds_state_explain() */
	char *url;
	int bad_config;
	int real_address;
};

/* Which hosts may get the token over plain http. */
static int http_allowed(const char *host)
{
	static const char *const ok[] = { "localhost", "::1", "[::1]", "169.254.170.2",
		"169.254.170.23", "fd00:ec2::23", "[fd00:ec2::23]", NULL };

	if (!strncmp(host, "127.", 4))
		return 1;
	for (int i = 0; ok[i]; i++)
		if (!strcasecmp(host, ok[i]))
			return 1;
	return 0;
}

/* 0 when url is usable; else -EINVAL with reason. */
static int check_full_uri(const char *url, char *reason)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int rc = 0;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, url, 0) ||
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) ||
	    curl_url_get(u, CURLUPART_HOST, &host, 0)) {
		creds_reason(reason, "AWS_CONTAINER_CREDENTIALS_FULL_URI is not a URL");
		rc = -EINVAL;
	} else if (!strcasecmp(scheme, "https")) {
		rc = 0;
	} else if (strcasecmp(scheme, "http")) {
		creds_reason(reason, "AWS_CONTAINER_CREDENTIALS_FULL_URI: scheme %s not allowed",
			     scheme);
		rc = -EINVAL;
	} else if (!http_allowed(host)) {
		creds_reason(reason, "AWS_CONTAINER_CREDENTIALS_FULL_URI: plain http only to "
			     "loopback or the ECS/EKS agent, not %s", host);
		rc = -EINVAL;
	}
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}

int creds_container_new(const struct creds_options *o, void **state)
{
	struct container_state *st = xcalloc(1, sizeof(*st));
	const char *rel = util_getenv_nonempty("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = util_getenv_nonempty("AWS_CONTAINER_CREDENTIALS_FULL_URI");

	*state = st;
	if (rel) {
		st->url = xasprintf("%s%s%s", ECS_AGENT, rel[0] == '/' ? "" : "/", rel);
		st->real_address = 1;
	} else if (full) {
		if (check_full_uri(full, st->m.reason))
			st->bad_config = 1;
		else
			st->url = xstrdup(full);
	} else {
		creds_reason(st->m.reason, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, "
			     "AWS_CONTAINER_CREDENTIALS_FULL_URI not set");
	}
	return 0;
}

static int container_load(void *state, struct s3_creds *out)
{
	struct container_state *st = state;
	const char *tf = util_getenv_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	char why[CREDS_REASON_MAX] = "", *token = NULL, *hdr = NULL;
	const char *hdrs[] = { NULL, "Accept: application/json", NULL };
	struct creds_http_resp rs;
	struct creds_http_req rq;
	struct json_value v;
	int rc;

	if (st->bad_config)
		return -EINVAL;
	if (!st->url)
		return -ENOENT;
	if (tf) {
		rc = creds_read_file(tf, TOKEN_MAX, &token);
		if (rc) {
			creds_reason(st->m.reason, "cannot read AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE "
				     "%s: %s", tf, strerror(-rc));
			return rc;
		}
	} else if (util_getenv_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN")) {
		token = xstrdup(util_getenv_nonempty("AWS_CONTAINER_AUTHORIZATION_TOKEN"));
	}
	if (token && strpbrk(token, "\r\n")) {
		creds_reason(st->m.reason, "the container authorization token contains a line break");
		creds_free_secret(token);
		return -EINVAL;
	}
	if (token && *token) {
		hdr = xasprintf("Authorization: %s", token);
		hdrs[0] = hdr;
	} else {
		hdrs[0] = "Accept: application/json";
		hdrs[1] = NULL;
	}
	creds_free_secret(token);
	rq = (struct creds_http_req){
		.method = "GET", .url = st->url, .headers = hdrs,
		.connect_timeout_ms = st->real_address ? 1000 : 2000,
		.timeout_ms = st->real_address ? 2000 : 5000, .no_proxy = 1,
	};
	rc = creds_http(&rq, &rs, why);
	creds_free_secret(hdr);
	if (rc) {
		creds_reason(st->m.reason, "%s: %s", st->url, why);
		return rc;
	}
	if (json_parse(rs.body, rs.len, &v)) {
		creds_reason(st->m.reason, "%s: HTTP %ld, response is not JSON", st->url, rs.status);
		rc = rs.status == 200 ? -EINVAL : rs.status == 401 || rs.status == 403 ? -EACCES : -EIO;
		creds_http_resp_cleanup(&rs);
		return rc;
	}
	if (rs.status != 200) {
		const char *code = json_get_str(&v, "Code"), *msg = json_get_str(&v, "Message");

		creds_reason(st->m.reason, "%s: HTTP %ld%s %.64s %.120s", st->url, rs.status,
			     rs.status == 401 || rs.status == 403 ? " (authorization token rejected)" : "",
			     code ? code : "", msg ? msg : "");
		rc = rs.status == 401 || rs.status == 403 ? -EACCES : -EIO;
	} else {
		rc = creds_from_aws_json(&v, out, why);
		if (rc)
			creds_reason(st->m.reason, "%s: %s", st->url, why);
		else
			creds_reason(st->m.detail, "%s", st->url);
	}
	json_free(&v);
	creds_http_resp_cleanup(&rs);
	return rc;
}

static void container_destroy(void *state)
{
	struct container_state *st = state;

	free(st->url);
	free(st);
}

const struct creds_provider_ops creds_container_ops = {
	.name = "container",
	.load = container_load,
	.destroy = container_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
