/*
 * ecs_ram — Alibaba Cloud ECS instance RAM role from the metadata service.
 *
 *   PUT  /latest/api/token                         (X-aliyun-ecs-metadata-token-ttl-seconds)
 *   GET  /latest/meta-data/ram/security-credentials/         -> role name
 *   GET  /latest/meta-data/ram/security-credentials/<role>   -> JSON credentials
 *
 * Role: $ALIBABA_CLOUD_ECS_METADATA, else discovered (first line of the list).
 * Endpoint: $ALIBABA_CLOUD_ECS_METADATA_ENDPOINT (host or URL), else
 * http://100.100.100.200 (1 s connect timeout). Off with
 * ALIBABA_CLOUD_ECS_METADATA_DISABLED=true; the token-less fallback off with
 * ALIBABA_CLOUD_IMDSV1_DISABLED=true. Nothing answering is a miss.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define CREDS_PATH "/latest/meta-data/ram/security-credentials/"

struct ecs_state {
	struct creds_msgs m;            /* first: see creds_state_explain() */
	int disabled;
	struct creds_mds mds;
	char role[256];
	int role_fixed;
};

int creds_ecs_ram_new(const struct creds_options *o, void **state)
{
	struct ecs_state *st = xcalloc(1, sizeof(*st));
	const char *ep = util_getenv_nonempty("ALIBABA_CLOUD_ECS_METADATA_ENDPOINT");
	const char *role = util_getenv_nonempty("ALIBABA_CLOUD_ECS_METADATA");
	char *url;

	*state = st;
	if (creds_env_true("ALIBABA_CLOUD_ECS_METADATA_DISABLED")) {
		st->disabled = 1;
		creds_reason(st->m.reason, "disabled by ALIBABA_CLOUD_ECS_METADATA_DISABLED");
		return 0;
	}
	if (role && strlen(role) < sizeof(st->role) && creds_role_name_ok(role, strlen(role))) {
		strcpy(st->role, role);
		st->role_fixed = 1;
	}
	url = !ep ? xstrdup("http://100.100.100.200") :
	      strstr(ep, "://") ? xstrdup(ep) : xasprintf("http://%s", ep);
	creds_mds_init(&st->mds, "ECS instance metadata", url,
		       "X-aliyun-ecs-metadata-token-ttl-seconds", "X-aliyun-ecs-metadata-token",
		       !creds_env_true("ALIBABA_CLOUD_IMDSV1_DISABLED"), ep == NULL);
	free(url);
	return 0;
}

static int unreachable(struct ecs_state *st, int rc, const char *why)
{
	creds_reason(st->m.reason, "no ECS metadata at %s (%s)", st->mds.endpoint, why);
	return rc == -EACCES ? -EACCES : -ENOENT;
}

static int ecs_load(void *state, struct s3_creds *out)
{
	struct ecs_state *st = state;
	char why[CREDS_REASON_MAX] = "", *path;
	struct creds_http_resp rs;
	int rc;

	if (st->disabled)
		return -ENOENT;
	if (!st->role_fixed) {
		size_t n;

		rc = creds_mds_get(&st->mds, CREDS_PATH, &rs, why);
		if (rc)
			return unreachable(st, rc, why);
		if (rs.status == 404) {
			creds_http_resp_cleanup(&rs);
			creds_reason(st->m.reason, "no RAM role attached to this instance (%s)",
				     st->mds.endpoint);
			return -ENOENT;
		}
		n = rs.status == 200 ? strcspn(rs.body, "\r\n") : 0;
		if (n == 0 || n >= sizeof(st->role) || !creds_role_name_ok(rs.body, n)) {
			creds_reason(st->m.reason, "%s: role list: HTTP %ld, no usable role name",
				     st->mds.endpoint, rs.status);
			creds_http_resp_cleanup(&rs);
			return -EIO;
		}
		memcpy(st->role, rs.body, n);
		st->role[n] = '\0';
		creds_http_resp_cleanup(&rs);
	}

	path = xasprintf("%s%s", CREDS_PATH, st->role);
	rc = creds_mds_get(&st->mds, path, &rs, why);
	free(path);
	if (rc)
		return unreachable(st, rc, why);
	if (rs.status != 200) {
		long status = rs.status;

		creds_reason(st->m.reason, "%s: credentials of role %s: HTTP %ld%s", st->mds.endpoint,
			     st->role, status,
			     status == 404 ? " (no such role on this instance)" : "");
		creds_http_resp_cleanup(&rs);
		return status == 404 && st->role_fixed ? -EINVAL : -EIO;
	}
	/* Same shape as Aliyun STS's Credentials object, plus Code. */
	{
		struct json_value v;
		const char *code, *ak, *sk, *tok, *exp;
		int64_t exp_ms = 0;

		if (json_parse(rs.body, rs.len, &v)) {
			creds_reason(st->m.reason, "%s: credentials are not valid JSON",
				     st->mds.endpoint);
			creds_http_resp_cleanup(&rs);
			return -EIO;
		}
		creds_http_resp_cleanup(&rs);
		code = json_get_str(&v, "Code");
		ak = json_get_str(&v, "AccessKeyId");
		sk = json_get_str(&v, "AccessKeySecret");
		tok = json_get_str(&v, "SecurityToken");
		exp = json_get_str(&v, "Expiration");
		if (code && strcmp(code, "Success")) {
			creds_reason(st->m.reason, "%s: role %s: Code %.64s", st->mds.endpoint,
				     st->role, code);
			rc = -EIO;
		} else if (!ak || !sk || !tok || !exp || util_parse_iso8601_ms(exp, &exp_ms)) {
			creds_reason(st->m.reason, "%s: role %s: incomplete credentials",
				     st->mds.endpoint, st->role);
			rc = -EIO;
		} else {
			rc = creds_fill(out, ak, sk, tok, exp_ms);
			creds_reason(st->m.detail, "RAM role %s from %s%s", st->role, st->mds.endpoint,
				     st->mds.v1 ? " (normal mode)" : "");
		}
		json_free(&v);
	}
	return rc;
}

static void ecs_destroy(void *state)
{
	struct ecs_state *st = state;

	if (!st->disabled)
		creds_mds_cleanup(&st->mds);
	free(st);
}

const struct creds_provider_ops creds_ecs_ram_ops = {
	.name = "ecs-ram-role",
	.load = ecs_load,
	.destroy = ecs_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
