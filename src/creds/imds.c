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

int creds_imds_new(const struct creds_options *o, void **state)
{
	struct creds_mds_role *st = xcalloc(1, sizeof(*st));
	const char *ep = util_getenv_nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *mode = util_getenv_nonempty("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");

	*state = st;
	st->list_path = CREDS_PATH;
	st->role_what = "IAM role";
	st->where = "instance metadata";
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

static int imds_load(void *state, struct s3_creds *out)
{
	struct creds_mds_role *st = state;
	char why[CREDS_REASON_MAX] = "";
	struct json_value v;
	int rc;

	if (st->disabled)
		return -ENOENT;
	rc = creds_mds_role_fetch(st, &v);
	if (rc)
		return rc;
	rc = creds_from_aws_json(&v, out, why);
	if (rc)
		creds_reason(st->m.reason, "%s: %s", st->mds.endpoint, why);
	else
		creds_reason(st->m.detail, "role %s from %s%s", st->role, st->mds.endpoint,
			     st->mds.v1 ? " (IMDSv1)" : "");
	json_free(&v);
	return rc;
}

const struct creds_provider_ops creds_imds_ops = {
	.name = "imds",
	.load = imds_load,
	.destroy = creds_mds_role_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
