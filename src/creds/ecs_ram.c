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

int creds_ecs_ram_new(const struct creds_options *o, void **state)
{
	struct creds_mds_role *st = xcalloc(1, sizeof(*st));
	const char *ep = util_getenv_nonempty("ALIBABA_CLOUD_ECS_METADATA_ENDPOINT");
	const char *role = util_getenv_nonempty("ALIBABA_CLOUD_ECS_METADATA");
	char *url;

	*state = st;
	st->list_path = CREDS_PATH;
	st->role_what = "RAM role";
	st->where = "ECS metadata";
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

static int ecs_load(void *state, struct s3_creds *out)
{
	struct creds_mds_role *st = state;
	struct json_value v;
	const char *ak, *sk, *tok, *exp;
	int64_t exp_ms = 0;
	int rc;

	if (st->disabled)
		return -ENOENT;
	rc = creds_mds_role_fetch(st, &v);
	if (rc)
		return rc;
	/* Same shape as Aliyun STS's Credentials object, plus Code. */
	ak = json_get_str(&v, "AccessKeyId");
	sk = json_get_str(&v, "AccessKeySecret");
	tok = json_get_str(&v, "SecurityToken");
	exp = json_get_str(&v, "Expiration");
	if (!ak || !sk || !tok || !exp || util_parse_iso8601_ms(exp, &exp_ms)) {
		creds_reason(st->m.reason, "%s: role %s: incomplete credentials", st->mds.endpoint,
			     st->role);
		rc = -EIO;
	} else {
		rc = creds_fill(out, ak, sk, tok, exp_ms);
		creds_reason(st->m.detail, "RAM role %s from %s%s", st->role, st->mds.endpoint,
			     st->mds.v1 ? " (normal mode)" : "");
	}
	json_free(&v);
	return rc;
}

const struct creds_provider_ops creds_ecs_ram_ops = {
	.name = "ecs-ram-role",
	.load = ecs_load,
	.destroy = creds_mds_role_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
