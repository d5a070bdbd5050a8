/*
 * imds — EC2 instance metadata (IMDSv2): the IAM role attached to the instance.
 *
 *   PUT  /latest/api/token                         (X-aws-ec2-metadata-token-ttl-seconds)
 *   GET  /latest/meta-data/iam/security-credentials/         -> role name
 *   GET  /latest/meta-data/iam/security-credentials/<role>   -> JSON credentials
 *
 * Endpoint: $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://[fd00:ec2::254]
 * when $AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE is IPv6, else
 * http://169.254.169.254 (1 s connect timeout). Off with
 * AWS_EC2_METADATA_DISABLED=true; token-less IMDSv1 fallback off with
 * AWS_EC2_METADATA_V1_DISABLED=true. Nothing answering, or no role attached, is
 * a miss (-ENOENT) so the chain moves on when not on EC2.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CREDS_PATH "/latest/meta-data/iam/security-credentials/"

struct imds_state {
	struct creds_msgs m;            /* first: see creds_state_explain() */
	int disabled;
	struct creds_mds mds;
	char role[256];
};

int creds_imds_new(const struct creds_options *o, void **state)
{
	struct imds_state *st = xcalloc(1, sizeof(*st));
	const char *ep = util_getenv_nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode = util_getenv_nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");

	*state = st;
	if (creds_env_true("AWS_EC2_METADATA_DISABLED")) {
		st->disabled = 1;
		creds_reason(st->m.reason, "disabled by AWS_EC2_METADATA_DISABLED");
		return 0;
	}
	creds_mds_init(&st->mds, "EC2 instance metadata",
		       ep ? ep : mode && !strcasecmp(mode, "IPv6") ? "http://[fd00:ec2::254]"
							    : "http://169.254.169.254",
		       "X-aws-ec2-metadata-token-ttl-seconds", "X-aws-ec2-metadata-token",
		       !creds_env_true("AWS_EC2_METADATA_V1_DISABLED"), ep == NULL);
	return 0;
}

/* A transport failure means "not on EC2": a miss, with the cause kept. */
static int unreachable(struct imds_state *st, int rc, const char *why)
{
	creds_reason(st->m.reason, "no instance metadata at %s (%s)", st->mds.endpoint, why);
	return rc == -EACCES ? -EACCES : -ENOENT;
}

static int imds_load(void *state, struct s3_creds *out)
{
	struct imds_state *st = state;
	char why[CREDS_REASON_MAX] = "", *path;
	struct creds_http_resp rs;
	struct json_value v;
	const char *code;
	size_t n;
	int rc;

	if (st->disabled)
		return -ENOENT;
	rc = creds_mds_get(&st->mds, CREDS_PATH, &rs, why);
	if (rc)
		return unreachable(st, rc, why);
	if (rs.status == 404) {
		creds_http_resp_cleanup(&rs);
		creds_reason(st->m.reason, "no IAM role attached to this instance (%s)",
			     st->mds.endpoint);
		return -ENOENT;
	}
	if (rs.status != 200 || rs.len == 0) {
		creds_reason(st->m.reason, "%s: role list: HTTP %ld", st->mds.endpoint, rs.status);
		creds_http_resp_cleanup(&rs);
		return -EIO;
	}
	n = strcspn(rs.body, "\r\n");
	if (n == 0 || n >= sizeof(st->role) || !creds_role_name_ok(rs.body, n)) {
		creds_reason(st->m.reason, "%s: unexpected role name", st->mds.endpoint);
		creds_http_resp_cleanup(&rs);
		return -EIO;
	}
	memcpy(st->role, rs.body, n);
	st->role[n] = '\0';
	creds_http_resp_cleanup(&rs);

	path = xasprintf("%s%s", CREDS_PATH, st->role);
	rc = creds_mds_get(&st->mds, path, &rs, why);
	free(path);
	if (rc)
		return unreachable(st, rc, why);
	if (rs.status != 200) {
		creds_reason(st->m.reason, "%s: credentials of role %s: HTTP %ld", st->mds.endpoint,
			     st->role, rs.status);
		creds_http_resp_cleanup(&rs);
		return -EIO;
	}
	if (json_parse(rs.body, rs.len, &v)) {
		creds_reason(st->m.reason, "%s: credentials are not valid JSON", st->mds.endpoint);
		creds_http_resp_cleanup(&rs);
		return -EIO;
	}
	creds_http_resp_cleanup(&rs);
	code = json_get_str(&v, "Code");
	if (code && strcmp(code, "Success")) {
		creds_reason(st->m.reason, "%s: role %s: Code %.64s", st->mds.endpoint, st->role, code);
		rc = -EIO;
	} else {
		rc = creds_from_aws_json(&v, out, why);
		if (rc)
			creds_reason(st->m.reason, "%s: %s", st->mds.endpoint, why);
		else
			creds_reason(st->m.detail, "role %s from %s%s", st->role, st->mds.endpoint,
				     st->mds.v1 ? " (IMDSv1)" : "");
	}
	json_free(&v);
	return rc;
}

static void imds_destroy(void *state)
{
	struct imds_state *st = state;

	if (!st->disabled)
		creds_mds_cleanup(&st->mds);
	free(st);
}

const struct creds_provider_ops creds_imds_ops = {
	.name = "imds",
	.load = imds_load,
	.destroy = imds_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
