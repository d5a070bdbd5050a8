/*
 * env — explicit credentials from the environment.
 *
 * Three families, first complete one wins:
 *   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN
 *   OSS_ACCESS_KEY_ID / OSS_ACCESS_KEY_SECRET / OSS_SECURITY_TOKEN
 *   ALIBABA_CLOUD_ACCESS_KEY_ID / ALIBABA_CLOUD_ACCESS_KEY_SECRET /
 *   ALIBABA_CLOUD_SECURITY_TOKEN
 * A key id without its secret (or the reverse) is an error, not a miss: a
 * half-set environment is a mistake the user wants to hear about. The
 * environment is read on every load, so a reload picks up new values.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <stdlib.h>

struct env_family {
	const char *ak, *sk, *tok;
};

static const struct env_family families[] = {
	{ "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN" },
	{ "OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SECURITY_TOKEN" },
	{ "ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
	  "ALIBABA_CLOUD_SECURITY_TOKEN" },
};

struct env_state {
	struct creds_msgs m;            /* first: see creds_state_explain() */
};

int creds_env_new(const struct creds_options *o, void **state)
{
	*state = xcalloc(1, sizeof(struct env_state));
	return 0;
}

static int env_load(void *state, struct s3_creds *out)
{
	struct env_state *st = state;

	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		const struct env_family *f = &families[i];
		const char *ak = util_getenv_nonempty(f->ak), *sk = util_getenv_nonempty(f->sk);

		if (!ak && !sk)
			continue;
		if (!ak || !sk) {
			creds_reason(st->m.reason, "%s is set but %s is not",
				     ak ? f->ak : f->sk, ak ? f->sk : f->ak);
			return -EINVAL;
		}
		creds_reason(st->m.detail, "%s%s", f->ak,
			     util_getenv_nonempty(f->tok) ? " with a session token" : "");
		return creds_fill(out, ak, sk, util_getenv_nonempty(f->tok), 0);
	}
	creds_reason(st->m.reason, "AWS_ACCESS_KEY_ID, OSS_ACCESS_KEY_ID, "
		     "ALIBABA_CLOUD_ACCESS_KEY_ID not set");
	return -ENOENT;
}

const struct creds_provider_ops creds_env_ops = {
	.name = "env",
	.load = env_load,
	.destroy = free,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
