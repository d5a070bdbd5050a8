/*
 * metadata — the session-token dance shared by the EC2 IMDSv2 and Aliyun ECS
 * (hardened mode) metadata services: PUT /latest/api/token with a TTL header,
 * then GETs carrying the token header. The token is cached until shortly
 * before its TTL ends and fetched again once when a GET answers 401.
 * A token endpoint that answers 400/404/405 marks a service without session
 * tokens; then GETs go without one, if the caller allows that (IMDSv1).
 *
 * Both services then serve a role's credentials the same way: a list whose
 * first line names the role, and the role's JSON under the same path. The two
 * providers (imds.c, ecs_ram.c) share that too (creds_mds_role_fetch) and keep
 * only how they read the JSON.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MDS_TOKEN_TTL_S 21600

void creds_mds_init(struct creds_mds *m, const char *name, const char *endpoint,
		    const char *ttl_header, const char *token_header, int v1_allowed,
		    int real_address)
{
	memset(m, 0, sizeof(*m));
	m->name = name;
	m->endpoint = xstrdup(endpoint);
	m->ttl_header = ttl_header;
	m->token_header = token_header;
	m->v1_allowed = v1_allowed;
	/* The real link-local services answer in microseconds or not at all:
	 * do not hold a mount for long off-cloud. */
	m->connect_timeout_ms = real_address ? 1000 : 2000;
	m->timeout_ms = real_address ? 2000 : 5000;
}

void creds_mds_cleanup(struct creds_mds *m)
{
	creds_free_secret(m->token);
	free(m->endpoint);
	memset(m, 0, sizeof(*m));
}

static int fetch_token(struct creds_mds *m, char *why)
{
	char ttl[96];
	const char *hdrs[] = { ttl, NULL };
	struct creds_http_resp rs;
	struct creds_http_req rq;
	char *url = creds_url_join(m->endpoint, "/latest/api/token");
	int rc;

	snprintf(ttl, sizeof(ttl), "%s: %d", m->ttl_header, MDS_TOKEN_TTL_S);
	rq = (struct creds_http_req){
		.method = "PUT", .url = url, .headers = hdrs,
		.connect_timeout_ms = m->connect_timeout_ms, .timeout_ms = m->timeout_ms,
		.no_proxy = 1,
	};
	rc = creds_http(&rq, &rs, why);
	free(url);
	if (rc)
		return rc;
	if (rs.status == 200 && rs.len > 0 && rs.len < 4096 && !strpbrk(rs.body, "\r\n")) {
		creds_free_secret(m->token);
		m->token = xstrdup(rs.body);
		m->token_expires_ms = util_now_ms() + (MDS_TOKEN_TTL_S - 60) * 1000LL;
		m->v1 = 0;
	} else if (rs.status == 400 || rs.status == 404 || rs.status == 405) {
		if (!m->v1_allowed) {
			creds_reason(why, "%s has no session tokens (HTTP %ld) and the "
				     "token-less mode is disabled", m->name, rs.status);
			rc = -EACCES;
		} else {
			m->v1 = 1;
		}
	} else if (rs.status == 403) {
		creds_reason(why, "%s refused a session token (HTTP 403): metadata access "
			     "disabled for this instance?", m->name);
		rc = -EACCES;
	} else {
		creds_reason(why, "%s token request: HTTP %ld", m->name, rs.status);
		rc = -EIO;
	}
	creds_http_resp_cleanup(&rs);
	return rc;
}

int creds_mds_get(struct creds_mds *m, const char *path, struct creds_http_resp *rs, char *why)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		char hdr[4200];
		const char *hdrs[] = { hdr, NULL };
		struct creds_http_req rq;
		char *url;
		int rc;

		if (!m->v1 && (!m->token || util_now_ms() >= m->token_expires_ms)) {
			if ((rc = fetch_token(m, why)))
				return rc;
		}
		if (m->token && !m->v1)
			snprintf(hdr, sizeof(hdr), "%s: %s", m->token_header, m->token);
		else
			hdrs[0] = NULL;
		url = creds_url_join(m->endpoint, path);
		rq = (struct creds_http_req){
			.method = "GET", .url = url, .headers = hdrs,
			.connect_timeout_ms = m->connect_timeout_ms, .timeout_ms = m->timeout_ms,
			.no_proxy = 1,
		};
		rc = creds_http(&rq, rs, why);
		util_wipe(hdr, sizeof(hdr));
		free(url);
		if (rc)
			return rc;
		if (rs->status != 401 || attempt == 1)
			return 0;
		/* Token expired or revoked: one fresh token, one more try. */
		creds_http_resp_cleanup(rs);
		creds_free_secret(m->token);
		m->token = NULL;
		m->v1 = 0;
	}
	return -EIO;
}

/* ---- the role steps IMDS and the ECS RAM role share ----------------------- */

/* A transport failure means "not on this cloud": a miss, with the cause kept. */
static int role_unreachable(struct creds_mds_role *r, int rc, const char *why)
{
	creds_reason(r->m.reason, "no %s at %s (%s)", r->where, r->mds.endpoint, why);
	return rc == -EACCES ? -EACCES : -ENOENT;
}

/* The first line of the role list names the role. */
static int role_discover(struct creds_mds_role *r)
{
	char why[CREDS_REASON_MAX] = "";
	struct creds_http_resp rs;
	size_t n;
	int rc = creds_mds_get(&r->mds, r->list_path, &rs, why);

	if (rc)
		return role_unreachable(r, rc, why);
	if (rs.status == 404) {
		creds_http_resp_cleanup(&rs);
		creds_reason(r->m.reason, "no %s attached to this instance (%s)", r->role_what,
			     r->mds.endpoint);
		return -ENOENT;
	}
	n = rs.status == 200 ? strcspn(rs.body, "\r\n") : 0;
	if (n == 0 || n >= sizeof(r->role) || !creds_role_name_ok(rs.body, n)) {
		creds_reason(r->m.reason, "%s: role list: HTTP %ld, no usable role name",
			     r->mds.endpoint, rs.status);
		creds_http_resp_cleanup(&rs);
		return -EIO;
	}
	memcpy(r->role, rs.body, n);
	r->role[n] = '\0';
	creds_http_resp_cleanup(&rs);
	return 0;
}

int creds_mds_role_fetch(struct creds_mds_role *r, struct json_value *v)
{
	char why[CREDS_REASON_MAX] = "", *path;
	struct creds_http_resp rs;
	const char *code;
	int rc;

	if (!r->role_fixed && (rc = role_discover(r)))
		return rc;
	path = xasprintf("%s%s", r->list_path, r->role);
	rc = creds_mds_get(&r->mds, path, &rs, why);
	free(path);
	if (rc)
		return role_unreachable(r, rc, why);
	if (rs.status != 200) {
		long status = rs.status;

		creds_reason(r->m.reason, "%s: credentials of role %s: HTTP %ld%s", r->mds.endpoint,
			     r->role, status,
			     status == 404 ? " (no such role on this instance)" : "");
		creds_http_resp_cleanup(&rs);
		/* A role the user named that is not there is their error. */
		return status == 404 && r->role_fixed ? -EINVAL : -EIO;
	}
	rc = json_parse(rs.body, rs.len, v);
	creds_http_resp_cleanup(&rs);
	if (rc) {
		creds_reason(r->m.reason, "%s: credentials are not valid JSON", r->mds.endpoint);
		return -EIO;
	}
	code = json_get_str(v, "Code");
	if (code && strcmp(code, "Success")) {
		creds_reason(r->m.reason, "%s: role %s: Code %.64s", r->mds.endpoint, r->role,
			     code);
		json_free(v);
		return -EIO;
	}
	return 0;
}

void creds_mds_role_destroy(void *state)
{
	struct creds_mds_role *r = state;

	if (!r->disabled)
		creds_mds_cleanup(&r->mds);
	free(r);
}
