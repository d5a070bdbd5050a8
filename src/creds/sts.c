/*
 * sts — what the two STS role providers share: web identity (AWS STS
 * AssumeRoleWithWebIdentity, XML answer, webid.c) and Alibaba Cloud RRSA
 * (Aliyun STS AssumeRoleWithOIDC, JSON answer, rrsa.c).
 *
 * Both hold a role ARN, a token file, a session name and an endpoint, and load
 * the same way: refuse a half-set configuration, re-read the token file (the
 * kubelet rotates it), build a form body around it, POST it anonymously (the
 * token is the proof) and parse the answer. Only the form and the parser
 * differ; each provider describes them in one struct creds_sts_kind. The
 * token and the body are secrets, wiped as soon as they are not needed.
 */
#include "creds_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CREDS_STS_TOKEN_MAX (64 * 1024)

/* POST the form body (wiped and freed here) to endpoint and parse the answer;
 * reason (on failure) or detail (on success, naming role_arn) is filled. */
static int sts_post(const char *endpoint, char *body, const char *accept,
		    creds_sts_parse_fn parse, const char *role_arn, struct s3_creds *out,
		    char *reason, char *detail)
{
	const char *hdrs[] = { "Content-Type: application/x-www-form-urlencoded", accept, NULL };
	char why[CREDS_REASON_MAX] = "";
	struct creds_http_resp rs;
	struct creds_http_req rq = {
		.method = "POST", .url = endpoint, .headers = hdrs,
		.body = body, .body_len = strlen(body),
		.connect_timeout_ms = 3000, .timeout_ms = 10000,
	};
	int rc = creds_http(&rq, &rs, why);

	creds_free_secret(body);
	if (rc) {
		creds_reason(reason, "STS %s: %s", endpoint, why);
		return rc;
	}
	rc = parse(rs.body, rs.len, out, why);
	if (rc)
		creds_reason(reason, "STS %s (HTTP %ld): %s", endpoint, rs.status, why);
	else
		creds_reason(detail, "role %s via STS %s", role_arn, endpoint);
	creds_http_resp_cleanup(&rs);
	return rc;
}

int creds_sts_role_load(struct creds_sts_role *r, const struct creds_sts_kind *k,
			struct s3_creds *out)
{
	char *token = NULL, *body;
	int rc;

	if (r->half_configured)
		return -EINVAL;
	if (!r->token_file)
		return -ENOENT;
	rc = creds_read_file(r->token_file, CREDS_STS_TOKEN_MAX, &token);
	if (rc || !*token) {
		creds_reason(r->m.reason, "cannot read %s %s: %s", k->token_what, r->token_file,
			     rc ? strerror(-rc) : "empty file");
		creds_free_secret(token);
		return rc ? rc : -EINVAL;
	}
	body = k->form(r, token);
	creds_free_secret(token);
	return sts_post(r->endpoint, body, k->accept, k->parse, r->role_arn, out, r->m.reason,
			r->m.detail);
}

void creds_sts_role_destroy(void *state)
{
	struct creds_sts_role *r = state;

	free(r->token_file);
	free(r->role_arn);
	free(r->session_name);
	free(r->endpoint);
	free(r);
}
