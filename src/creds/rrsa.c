/*
 * rrsa — Alibaba Cloud RRSA (ACK "RAM Roles for Service Accounts"): an OIDC
 * token projected into the pod, exchanged at Aliyun STS AssumeRoleWithOIDC for
 * temporary keys.
 *
 * Configured by ALIBABA_CLOUD_ROLE_ARN + ALIBABA_CLOUD_OIDC_PROVIDER_ARN +
 * ALIBABA_CLOUD_OIDC_TOKEN_FILE (all three, or it is an error when some are
 * set), ALIBABA_CLOUD_ROLE_SESSION_NAME (default "feedfs-<pid>"). Endpoint:
 * $ALIBABA_CLOUD_STS_ENDPOINT (a host name, or a URL with scheme), else
 * sts.<ALIBABA_CLOUD_STS_REGION>.aliyuncs.com (sts-vpc.… when
 * ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED is true), else sts.aliyuncs.com, over
 * https unless the URL says otherwise. The call is anonymous (no signature):
 * a form POST of the RPC parameters; the answer is JSON. The token file is
 * re-read on every load.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int creds_parse_aliyun_sts_json(const char *s, size_t len, struct s3_creds *out,
				char *reason)
{
	struct json_value v;
	const struct json_value *cr;
	const char *ak, *sk, *tok, *exp;
	int64_t exp_ms = 0;
	int rc = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (json_parse(s, len, &v)) {
		creds_reason(reason, "STS response is not valid JSON");
		return -EINVAL;
	}
	cr = json_get(&v, "Credentials");
	if (!cr) {
		const char *code = json_get_str(&v, "Code"), *msg = json_get_str(&v, "Message");

		if (code) {
			creds_reason(reason, "STS error %.64s: %.160s", code, msg ? msg : "");
			rc = !strncmp(code, "AuthenticationFail", 18) ||
			     !strncmp(code, "InvalidParameter.OIDCToken", 26) ||
			     !strncmp(code, "NoPermission", 12) ||
			     !strncmp(code, "EntityNotExist", 14) ? -EACCES : -EIO;
		} else {
			creds_reason(reason, "STS response has no Credentials");
		}
		goto out;
	}
	ak = json_get_str(cr, "AccessKeyId");
	sk = json_get_str(cr, "AccessKeySecret");
	tok = json_get_str(cr, "SecurityToken");
	exp = json_get_str(cr, "Expiration");
	if (!ak || !sk || !tok || !exp) {
		creds_reason(reason, "STS Credentials lack %s", !ak ? "AccessKeyId" :
			     !sk ? "AccessKeySecret" : !tok ? "SecurityToken" : "Expiration");
		goto out;
	}
	if (util_parse_iso8601_ms(exp, &exp_ms)) {
		creds_reason(reason, "STS Expiration '%.40s' is not a time", exp);
		goto out;
	}
	rc = creds_fill(out, ak, sk, tok, exp_ms);
out:
	json_free(&v);
	return rc;
}

struct rrsa_state {
	struct creds_sts_role r;        /* first: creds_sts_role_load/destroy take it */
	char *provider_arn;
};

static char *aliyun_sts_endpoint(void)
{
	const char *v = util_getenv_nonempty("ALIBABA_CLOUD_STS_ENDPOINT");
	const char *region = util_getenv_nonempty("ALIBABA_CLOUD_STS_REGION");

	if (v)
		return strstr(v, "://") ? xstrdup(v) : xasprintf("https://%s", v);
	if (region)
		return xasprintf("https://sts%s.%s.aliyuncs.com",
				 creds_env_true("ALIBABA_CLOUD_VPC_ENDPOINT_ENABLED") ? "-vpc" : "",
				 region);
	return xstrdup("https://sts.aliyuncs.com");
}

int creds_rrsa_new(const struct creds_options *o, void **state)
{
	struct rrsa_state *st = xcalloc(1, sizeof(*st));
	static const char *const names[3] = { "ALIBABA_CLOUD_ROLE_ARN",
		"ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE" };
	const char *v[3];
	int set = 0;

	*state = st;
	for (int i = 0; i < 3; i++)
		set += (v[i] = util_getenv_nonempty(names[i])) != NULL;
	if (set == 0) {
		creds_reason(st->r.m.reason, "ALIBABA_CLOUD_ROLE_ARN, ALIBABA_CLOUD_OIDC_PROVIDER_ARN, "
			     "ALIBABA_CLOUD_OIDC_TOKEN_FILE not set");
		return 0;
	}
	if (set < 3) {
		st->r.half_configured = 1;
		creds_reason(st->r.m.reason, "RRSA needs ALIBABA_CLOUD_ROLE_ARN, "
			     "ALIBABA_CLOUD_OIDC_PROVIDER_ARN and ALIBABA_CLOUD_OIDC_TOKEN_FILE; "
			     "%s is not set", !v[0] ? names[0] : !v[1] ? names[1] : names[2]);
		return 0;
	}
	st->r.role_arn = xstrdup(v[0]);
	st->provider_arn = xstrdup(v[1]);
	st->r.token_file = xstrdup(v[2]);
	st->r.session_name = util_getenv_nonempty("ALIBABA_CLOUD_ROLE_SESSION_NAME")
		? xstrdup(util_getenv_nonempty("ALIBABA_CLOUD_ROLE_SESSION_NAME"))
		: xasprintf("feedfs-%ld", (long)getpid());
	st->r.endpoint = aliyun_sts_endpoint();
	return 0;
}

static char *enc(const char *s)
{
	return util_uri_encode(s, strlen(s), 0);
}

static char *rrsa_form(const struct creds_sts_role *r, const char *token)
{
	const struct rrsa_state *st = (const struct rrsa_state *)r;
	char ts[32], *body, *e[4];
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
	e[0] = enc(r->role_arn);
	e[1] = enc(st->provider_arn);
	e[2] = enc(token);
	e[3] = enc(r->session_name);
	body = xasprintf("Action=AssumeRoleWithOIDC&Format=JSON&Version=2015-04-01"
			 "&Timestamp=%s&DurationSeconds=3600&RoleArn=%s&OIDCProviderArn=%s"
			 "&OIDCToken=%s&RoleSessionName=%s", ts, e[0], e[1], e[2], e[3]);
	for (int i = 0; i < 4; i++)
		creds_free_secret(e[i]);
	return body;
}

static const struct creds_sts_kind rrsa_kind = {
	.token_what = "OIDC token",
	.accept = "Accept: application/json",
	.form = rrsa_form,
	.parse = creds_parse_aliyun_sts_json,
};

static int rrsa_load(void *state, struct s3_creds *out)
{
	return creds_sts_role_load(state, &rrsa_kind, out);
}

static void rrsa_destroy(void *state)
{
	struct rrsa_state *st = state;

	free(st->provider_arn);
	creds_sts_role_destroy(&st->r);   /* frees st: r is its first member */
}

const struct creds_provider_ops creds_rrsa_ops = {
	.name = "oidc-rrsa",
	.load = rrsa_load,
	.destroy = rrsa_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
