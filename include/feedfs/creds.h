/*
 * creds — where request-signing credentials come from.
 *
 * A provider is a small ops table (load + destroy). A chain tries providers in
 * order; the first that yields credentials wins and is remembered. Temporary
 * credentials (expires_wall_ms != 0) are reloaded from the winning provider when
 * less than CREDS_REFRESH_MARGIN_MS remain. creds_get() is thread-safe and hands
 * out a private copy, which the caller wipes with creds_cleanup().
 *
 * The chain, in order: env (AWS_/OSS_/ALIBABA_CLOUD_ keys), profile (shared
 * files, credential_process), web-identity (EKS IRSA), oidc-rrsa (ACK RRSA),
 * container (ECS/EKS Pod Identity), imds (EC2), ecs-ram-role (Aliyun ECS);
 * or anonymous (--no-sign-request). Every provider and variable is described
 * in docs/CREDENTIALS.md. Secrets are never logged and are wiped when freed.
 */
#ifndef FEEDFS_CREDS_H
#define FEEDFS_CREDS_H

#include <stddef.h>
#include <stdint.h>

#define CREDS_REFRESH_MARGIN_MS (5 * 60 * 1000)

struct s3_creds {
	char *access_key_id;
	char *secret_access_key;
	char *session_token;      /* NULL when none */
	int64_t expires_wall_ms;  /* 0: does not expire */
};

struct creds_provider_ops {
	const char *name;         /* "env", "anonymous", ... (shown to users) */
	/* Returns 0 and fills *out; -ENOENT when this source has nothing to offer;
	 * another -errno when it has something but failed (then the chain stops). */
	int (*load)(void *state, struct s3_creds *out);
	void (*destroy)(void *state);
	/* Optional (may be NULL), never a secret: why the last load gave nothing
	 * or failed ("AWS_ACCESS_KEY_ID not set"), and where a successful load came
	 * from ("profile 'dev' in /root/.aws/credentials"). */
	const char *(*explain)(void *state);
	const char *(*detail)(void *state);
};

struct creds_chain;

struct creds_options {
	int anonymous;            /* --no-sign-request: no provider, unsigned requests */
	/* Added with the full chain (all optional: zero means the default). */
	const char *profile;      /* --profile; NULL: $AWS_PROFILE, else "default" */
	const char *region;       /* picks the regional STS endpoint; NULL: $AWS_REGION,
				   * $AWS_DEFAULT_REGION, else the global endpoint */
	const char *provider;     /* NULL: the whole chain; else only the provider with
				   * this name ("env", "profile", "imds", ...) */
};

/* Builds the chain and loads once. On failure returns -errno and writes one
 * user-facing line into msg (what was tried). */
int creds_chain_new(const struct creds_options *opts, struct creds_chain **out,
		    char *msg, size_t msg_len);
void creds_chain_destroy(struct creds_chain *c);

/* 1 when requests must be sent unsigned. */
int creds_chain_anonymous(const struct creds_chain *c);

/* Name of the provider that won ("env", "anonymous"). Never a secret. */
const char *creds_chain_source(const struct creds_chain *c);

/* One secret-free line for `feedfs --print-credentials-source`: the provider,
 * where it read from, the access key id masked to its last 4 characters and
 * the expiry, e.g. "profile: profile 'dev' in /root/.aws/credentials
 * (key ****WXYZ, temporary, expires 2024-05-01T12:00:00Z)". Returns the
 * length snprintf would write. */
int creds_chain_describe(struct creds_chain *c, char *buf, size_t len);

/* Copy of the current credentials, refreshed if close to expiry. 0 or -errno.
 * Never blocks on a refresh while the current credentials are still valid: a
 * refresh runs in the background (or in one caller, single flight) and every
 * other caller keeps the old copy meanwhile. An anonymous chain gives -ENOKEY. */
int creds_get(struct creds_chain *c, struct s3_creds *out);

/* Force a reload (after a 403 ExpiredToken). 0 or -errno. */
int creds_invalidate(struct creds_chain *c);

/* The `region` of a profile in the shared config file ($AWS_CONFIG_FILE, else
 * ~/.aws/config); profile NULL: $AWS_PROFILE, else "default". 1 and buf filled
 * when set, else 0 (no file, no profile, no region: all mean "not set"). */
int creds_profile_region(const char *profile, char *buf, size_t len);

/* Wipe and free the strings of a copy. */
void creds_cleanup(struct s3_creds *cr);

#endif
