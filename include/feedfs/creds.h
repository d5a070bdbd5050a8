/*
 * creds — where request-signing credentials come from.
 *
 * A provider is a small ops table (load + destroy). A chain tries providers in
 * order; the first that yields credentials wins and is remembered. Temporary
 * credentials (expires_wall_ms != 0) are reloaded from the winning provider when
 * less than CREDS_REFRESH_MARGIN_MS remain. creds_get() is thread-safe and hands
 * out a private copy, which the caller wipes with creds_cleanup().
 *
 * This issue ships two providers: environment (AWS_ACCESS_KEY_ID /
 * AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN) and anonymous (--no-sign-request).
 * The full chain (profiles, IMDS, web identity, OSS, ...) slots in as more
 * providers behind the same ops table.
 */
#ifndef FEEDFS_CREDS_H
#define FEEDFS_CREDS_H

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
};

struct creds_chain;

struct creds_options {
	int anonymous;            /* --no-sign-request: no provider, unsigned requests */
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

/* Copy of the current credentials, refreshed if close to expiry. 0 or -errno. */
int creds_get(struct creds_chain *c, struct s3_creds *out);

/* Force a reload (after a 403 ExpiredToken). 0 or -errno. */
int creds_invalidate(struct creds_chain *c);

/* Wipe and free the strings of a copy. */
void creds_cleanup(struct s3_creds *cr);

#endif
