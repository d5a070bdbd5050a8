/*
 * test_creds_providers — every network provider against the local stand-ins in
 * tests/creds_servers.py (127.0.0.1 only), through the real chain: load,
 * source/description, wrong tokens, the default chain order, forced reloads,
 * and live refresh under several threads with short-lived credentials.
 *
 * SAFETY: every chain built here has each metadata/STS endpoint overridden to
 * 127.0.0.1 (safe_env) and AWS_CONTAINER_CREDENTIALS_RELATIVE_URI unset; no
 * test may reach 169.254.169.254, 100.100.100.200, 169.254.170.2 or AWS.
 * Needs /usr/bin/python3; run from the repository root (or set FEEDFS_SRCDIR).
 */
#include "harness.h"

#include "../../src/creds/creds_i.h"
#include "feedfs/creds.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

struct server {
	pid_t pid;
	int stdin_fd;
	int port;
	char base[64];
};

static struct server srv, srv_short;
static char tmpdir[64];
static int skip;

static int server_start(struct server *s, const char *lifetime)
{
	const char *dir = getenv("FEEDFS_SRCDIR") ? getenv("FEEDFS_SRCDIR") : ".";
	char script[512], line[64];
	int in[2], out[2], n = 0;
	posix_spawn_file_actions_t fa;
	FILE *f;

	snprintf(script, sizeof(script), "%s/tests/creds_servers.py", dir);
	if (access(script, R_OK) || access("/usr/bin/python3", X_OK))
		return -ENOENT;
	char *argv[] = { "/usr/bin/python3", script, "--die-with-stdin", "--lifetime",
			 (char *)lifetime, NULL };
	if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC))
		return -errno;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	if (posix_spawn(&s->pid, argv[0], &fa, NULL, argv, environ))
		return -EIO;
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	s->stdin_fd = in[1];
	f = fdopen(out[0], "r");
	if (f && fgets(line, sizeof(line), f))
		n = sscanf(line, "PORT %d", &s->port);
	if (f)
		fclose(f);
	if (n != 1)
		return -EIO;
	snprintf(s->base, sizeof(s->base), "http://127.0.0.1:%d", s->port);
	return 0;
}

static void server_stop(struct server *s)
{
	if (s->pid <= 0)
		return;
	close(s->stdin_fd);      /* --die-with-stdin */
	kill(s->pid, SIGTERM);   /* and in case it is stuck: only our own child */
	waitpid(s->pid, NULL, 0);
	s->pid = 0;
}

static const char *const config_env[] = {
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET", "OSS_SECURITY_TOKEN",
	"ALIBABA_CLOUD_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
	"ALIBABA_CLOUD_SECURITY_TOKEN", "AWS_PROFILE",
	"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
	"ALIBABA_CLOUD_ROLE_ARN", "ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
	"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
	"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
	"AWS_EC2_METADATA_DISABLED", "AWS_EC2_METADATA_V1_DISABLED", "ALIBABA_CLOUD_ECS_METADATA",
	"ALIBABA_CLOUD_ECS_METADATA_DISABLED", "ALIBABA_CLOUD_IMDSV1_DISABLED",
	"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "AWS_ENDPOINT_URL", "ALIBABA_CLOUD_STS_REGION",
	NULL,
};

/* Nothing configured, and every endpoint that could leave the machine points
 * at the local server (or a closed local port when base is NULL). */
static void safe_env(const char *base)
{
	char v[128];

	for (int i = 0; config_env[i]; i++)
		unsetenv(config_env[i]);
	base = base ? base : "http://127.0.0.1:1";
	snprintf(v, sizeof(v), "%s/imds", base);
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", v, 1);
	snprintf(v, sizeof(v), "%s/ecs", base);
	setenv("ALIBABA_CLOUD_ECS_METADATA_ENDPOINT", v, 1);
	snprintf(v, sizeof(v), "%s/sts", base);
	setenv("AWS_ENDPOINT_URL_STS", v, 1);
	snprintf(v, sizeof(v), "%s/aliyun-sts", base);
	setenv("ALIBABA_CLOUD_STS_ENDPOINT", v, 1);
	snprintf(v, sizeof(v), "%s/nonexistent-credentials", tmpdir);
	setenv("AWS_SHARED_CREDENTIALS_FILE", v, 1);
	snprintf(v, sizeof(v), "%s/nonexistent-config", tmpdir);
	setenv("AWS_CONFIG_FILE", v, 1);
}

static void write_tmp(const char *name, const char *text, char *path, size_t len)
{
	FILE *f;

	snprintf(path, len, "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
}

/* Configure one provider against server s (ok: the right token). */
static void configure(const char *provider, const struct server *s, int ok)
{
	char v[256], path[256];

	if (!strcmp(provider, "web-identity")) {
		write_tmp("webid-token", ok ? "web-identity-token-ok\n" : "forged", path, sizeof(path));
		setenv("AWS_WEB_IDENTITY_TOKEN_FILE", path, 1);
		setenv("AWS_ROLE_ARN", "arn:aws:iam::000000000000:role/feedfs", 1);
		setenv("AWS_ROLE_SESSION_NAME", "unit-test", 1);
		snprintf(v, sizeof(v), "%s/sts", s->base);
		setenv("AWS_ENDPOINT_URL_STS", v, 1);
	} else if (!strcmp(provider, "oidc-rrsa")) {
		write_tmp("oidc-token", ok ? "oidc-token-ok" : "forged", path, sizeof(path));
		setenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE", path, 1);
		setenv("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/feedfs", 1);
		setenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN", "acs:ram::1:oidc-provider/ack", 1);
		snprintf(v, sizeof(v), "%s/aliyun-sts", s->base);
		setenv("ALIBABA_CLOUD_STS_ENDPOINT", v, 1);
	} else if (!strcmp(provider, "container")) {
		snprintf(v, sizeof(v), "%s/container/creds", s->base);
		setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", v, 1);
		write_tmp("container-token", ok ? "container-token-ok\n" : "forged", path, sizeof(path));
		setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path, 1);
	} else if (!strcmp(provider, "imds")) {
		snprintf(v, sizeof(v), "%s/imds", s->base);
		setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", v, 1);
	} else if (!strcmp(provider, "ecs-ram-role")) {
		snprintf(v, sizeof(v), "%s/ecs", s->base);
		setenv("ALIBABA_CLOUD_ECS_METADATA_ENDPOINT", v, 1);
	}
}

static const char *const net_providers[] = {
	"web-identity", "oidc-rrsa", "container", "imds", "ecs-ram-role", NULL,
};

static const char *token_prefix(const char *provider)
{
	return !strcmp(provider, "web-identity") ? "feedfs-session-sts-" :
	       !strcmp(provider, "oidc-rrsa") ? "feedfs-session-aliyun-sts-" :
	       !strcmp(provider, "container") ? "feedfs-session-container-" :
	       !strcmp(provider, "imds") ? "feedfs-session-imds-" : "feedfs-session-ecs-";
}

/* ---- each provider loads from its server ------------------------------------- */

static void t_each_provider(void)
{
	if (skip)
		return;
	for (int i = 0; net_providers[i]; i++) {
		const char *p = net_providers[i];
		struct creds_options o = { .provider = p };
		struct creds_chain *c = NULL;
		struct s3_creds cr;
		char msg[512], line[512];
		int64_t now = util_wall_ms();

		safe_env(srv.base);
		configure(p, &srv, 1);
		if (creds_chain_new(&o, &c, msg, sizeof(msg))) {
			harness_fail(__FILE__, __LINE__, "%s: %s", p, msg);
			continue;
		}
		CHECK_STR(creds_chain_source(c), p);
		CHECK_EQ_INT(creds_get(c, &cr), 0);
		CHECK_STR(cr.access_key_id, "S3RVER");
		CHECK_STR(cr.secret_access_key, "S3RVER");
		if (!cr.session_token || strncmp(cr.session_token, token_prefix(p),
						 strlen(token_prefix(p))))
			harness_fail(__FILE__, __LINE__, "%s: session token %s", p,
				     cr.session_token ? cr.session_token : "(none)");
		/* The server issues 900 s credentials (whole seconds). */
		CHECK(cr.expires_wall_ms > now + 890 * 1000 && cr.expires_wall_ms < now + 901 * 1000);
		creds_chain_describe(c, line, sizeof(line));
		if (strncmp(line, p, strlen(p)) || !strstr(line, "temporary, expires") ||
		    strstr(line, "S3RVER") || strstr(line, "feedfs-session"))
			harness_fail(__FILE__, __LINE__, "%s: describe \"%s\"", p, line);
		creds_cleanup(&cr);
		creds_chain_destroy(c);
	}
}

/* ---- wrong tokens, bad config: clear errors ------------------------------------ */

static void t_wrong_token(void)
{
	static const struct {
		const char *provider, *msg_has;
	} cases[] = {
		{ "web-identity", "InvalidIdentityToken" },
		{ "oidc-rrsa", "AuthenticationFail.OIDCToken.Invalid" },
		{ "container", "authorization token rejected" },
	};

	if (skip)
		return;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct creds_options o = { .provider = cases[i].provider };
		struct creds_chain *c = NULL;
		char msg[512];
		int rc;

		safe_env(srv.base);
		configure(cases[i].provider, &srv, 0);
		rc = creds_chain_new(&o, &c, msg, sizeof(msg));
		CHECK_EQ_INT(rc, -EACCES);
		CHECK(c == NULL);
		if (!strstr(msg, cases[i].msg_has) || !strstr(msg, "failed") || strstr(msg, "forged"))
			harness_fail(__FILE__, __LINE__, "%s: \"%s\"", cases[i].provider, msg);
	}
}

static void t_bad_config(void)
{
	static const struct {
		const char *set[4];
		const char *provider;
		int rc;
		const char *msg_has;
	} cases[] = {
		{ { "AWS_ROLE_ARN=arn:aws:iam::1:role/x", NULL }, "web-identity", -EINVAL,
		  "AWS_ROLE_ARN is set but AWS_WEB_IDENTITY_TOKEN_FILE is not" },
		{ { "AWS_ROLE_ARN=arn:aws:iam::1:role/x",
		    "AWS_WEB_IDENTITY_TOKEN_FILE=/nonexistent/token", NULL }, "web-identity", -ENOENT,
		  "cannot read web identity token /nonexistent/token" },
		{ { "ALIBABA_CLOUD_ROLE_ARN=acs:ram::1:role/x", NULL }, "oidc-rrsa", -EINVAL,
		  "ALIBABA_CLOUD_OIDC_PROVIDER_ARN is not set" },
		/* The token would go in clear text to a non-local host: refused, no traffic. */
		{ { "AWS_CONTAINER_CREDENTIALS_FULL_URI=http://192.0.2.1/creds", NULL }, "container",
		  -EINVAL, "plain http only to loopback" },
		{ { "AWS_CONTAINER_CREDENTIALS_FULL_URI=ftp://127.0.0.1/creds", NULL }, "container",
		  -EINVAL, "scheme ftp not allowed" },
		{ { "AWS_EC2_METADATA_DISABLED=true", NULL }, "imds", -ENOENT,
		  "imds (disabled by AWS_EC2_METADATA_DISABLED)" },
		{ { "ALIBABA_CLOUD_ECS_METADATA_DISABLED=1", NULL }, "ecs-ram-role", -ENOENT,
		  "disabled by ALIBABA_CLOUD_ECS_METADATA_DISABLED" },
		{ { "ALIBABA_CLOUD_ECS_METADATA=no-such-role", NULL }, "ecs-ram-role", -EINVAL,
		  "no such role on this instance" },
	};

	if (skip)
		return;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct creds_options o = { .provider = cases[i].provider };
		struct creds_chain *c = NULL;
		char msg[512];
		int rc;

		safe_env(srv.base);
		for (int j = 0; cases[i].set[j]; j++)
			putenv((char *)cases[i].set[j]);
		rc = creds_chain_new(&o, &c, msg, sizeof(msg));
		if (rc != cases[i].rc || !strstr(msg, cases[i].msg_has))
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d \"%s\"", i, rc, msg);
		creds_chain_destroy(c);
	}
}

/* IMDSv1 fallback, and its off switch. */
static void t_imds_v1(void)
{
	struct creds_options o = { .provider = "imds" };
	struct creds_chain *c = NULL;
	char msg[512], v[128], line[512];

	if (skip)
		return;
	safe_env(srv.base);
	snprintf(v, sizeof(v), "%s/imds-v1", srv.base);
	setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", v, 1);
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), 0);
	if (c) {
		creds_chain_describe(c, line, sizeof(line));
		CHECK(strstr(line, "(IMDSv1)") != NULL);
		creds_chain_destroy(c);
	}
	setenv("AWS_EC2_METADATA_V1_DISABLED", "true", 1);
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), -EACCES);
	CHECK(strstr(msg, "token-less mode is disabled") != NULL);
}

/* ---- the default chain's order -------------------------------------------------------- */

static void t_default_chain_order(void)
{
	/* Configure everything, then peel the winner off one by one. */
	static const char *const order[] = { "env", "profile", "web-identity", "oidc-rrsa",
		"container", "imds", "ecs-ram-role", NULL };
	char path[256], v[300];

	if (skip)
		return;
	safe_env(srv.base);
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
	write_tmp("credentials", "[default]\naws_access_key_id=AKPROF\naws_secret_access_key=SKPROF\n",
		  path, sizeof(path));
	chmod(path, 0600);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	for (int i = 0; net_providers[i]; i++)
		configure(net_providers[i], &srv, 1);

	for (int i = 0; order[i]; i++) {
		struct creds_chain *c = NULL;
		char msg[1024];

		if (creds_chain_new(NULL, &c, msg, sizeof(msg))) {
			harness_fail(__FILE__, __LINE__, "step %d: %s", i, msg);
			break;
		}
		if (strcmp(creds_chain_source(c), order[i]))
			harness_fail(__FILE__, __LINE__, "step %d: %s won, expected %s", i,
				     creds_chain_source(c), order[i]);
		creds_chain_destroy(c);
		/* Unconfigure the winner. */
		if (!strcmp(order[i], "env")) {
			unsetenv("AWS_ACCESS_KEY_ID");
			unsetenv("AWS_SECRET_ACCESS_KEY");
		} else if (!strcmp(order[i], "profile")) {
			snprintf(v, sizeof(v), "%s/none", tmpdir);
			setenv("AWS_SHARED_CREDENTIALS_FILE", v, 1);
		} else if (!strcmp(order[i], "web-identity")) {
			unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
			unsetenv("AWS_ROLE_ARN");
		} else if (!strcmp(order[i], "oidc-rrsa")) {
			unsetenv("ALIBABA_CLOUD_ROLE_ARN");
			unsetenv("ALIBABA_CLOUD_OIDC_PROVIDER_ARN");
			unsetenv("ALIBABA_CLOUD_OIDC_TOKEN_FILE");
		} else if (!strcmp(order[i], "container")) {
			unsetenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
		} else if (!strcmp(order[i], "imds")) {
			setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1", 1);
		}
	}
	/* Nothing anywhere: one line naming every provider tried. */
	{
		struct creds_chain *c = NULL;
		char msg[2048];

		safe_env(NULL);
		CHECK_EQ_INT(creds_chain_new(NULL, &c, msg, sizeof(msg)), -ENOENT);
		for (int i = 0; order[i]; i++) {
			snprintf(v, sizeof(v), "%s (", order[i]);
			if (!strstr(msg, v))
				harness_fail(__FILE__, __LINE__, "%s missing from \"%s\"", order[i], msg);
		}
		CHECK(strstr(msg, "no instance metadata at http://127.0.0.1:1") != NULL);
	}
}

/* ---- IMDS session token reuse; forced reload ------------------------------------------- */

static long stat_count(const char *key)
{
	struct creds_http_req rq = { .method = "GET", .connect_timeout_ms = 2000,
				     .timeout_ms = 5000 };
	struct creds_http_resp rs;
	struct json_value v;
	char url[128], why[CREDS_REASON_MAX];
	const struct json_value *n;
	long r = -1;

	snprintf(url, sizeof(url), "%s/stats", srv.base);
	rq.url = url;
	if (creds_http(&rq, &rs, why))
		return -1;
	if (json_parse(rs.body, rs.len, &v) == 0) {
		n = json_get(&v, key);
		r = n && n->type == JSON_NUMBER ? (long)n->num : 0;
		json_free(&v);
	}
	creds_http_resp_cleanup(&rs);
	return r;
}

static void t_invalidate_and_token_reuse(void)
{
	struct creds_options o = { .provider = "imds" };
	struct creds_chain *c = NULL;
	struct s3_creds a, b;
	char msg[512], url[128];
	long puts0, puts1;

	if (skip)
		return;
	safe_env(srv.base);
	configure("imds", &srv, 1);
	puts0 = stat_count("PUT /imds/latest/api/token");
	CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), 0);
	if (!c)
		return;
	CHECK_EQ_INT(creds_get(c, &a), 0);
	usleep(1100 * 1000);              /* past the 403-burst coalescing window */
	CHECK_EQ_INT(creds_invalidate(c), 0);
	CHECK_EQ_INT(creds_get(c, &b), 0);
	CHECK(a.session_token && b.session_token && strcmp(a.session_token, b.session_token));
	puts1 = stat_count("PUT /imds/latest/api/token");
	CHECK_EQ_INT(puts1 - puts0, 1);   /* two loads, one session token */
	creds_cleanup(&a);
	creds_cleanup(&b);
	creds_chain_destroy(c);
	(void)url;
}

/* ---- live refresh under threads, short-lived credentials -------------------------------- */

struct hammer {
	struct creds_chain *c;
	_Atomic int stop;
	_Atomic long gets, failures, expired, distinct;
	pthread_mutex_t mu;
	char last[128];
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;

	while (!atomic_load(&h->stop)) {
		struct s3_creds cr;
		int64_t before = util_wall_ms();
		int rc = creds_get(h->c, &cr);

		atomic_fetch_add(&h->gets, 1);
		if (rc) {
			atomic_fetch_add(&h->failures, 1);
			continue;
		}
		if (cr.expires_wall_ms <= before)
			atomic_fetch_add(&h->expired, 1);
		pthread_mutex_lock(&h->mu);
		if (strcmp(h->last, cr.session_token)) {
			snprintf(h->last, sizeof(h->last), "%s", cr.session_token);
			h->distinct++;
		}
		pthread_mutex_unlock(&h->mu);
		creds_cleanup(&cr);
		usleep(200);
	}
	return NULL;
}

static void t_live_refresh_threads(void)
{
	if (skip)
		return;
	for (int i = 0; net_providers[i]; i++) {
		const char *p = net_providers[i];
		struct creds_options o = { .provider = p };
		struct hammer h = { .mu = PTHREAD_MUTEX_INITIALIZER };
		pthread_t th[4];
		uint64_t refreshes, failures;
		char msg[512];

		safe_env(srv_short.base);
		configure(p, &srv_short, 1);
		if (creds_chain_new(&o, &h.c, msg, sizeof(msg))) {
			harness_fail(__FILE__, __LINE__, "%s: %s", p, msg);
			continue;
		}
		for (int t = 0; t < 4; t++)
			pthread_create(&th[t], NULL, hammer_main, &h);
		usleep(3500 * 1000);   /* credentials live 2-3 s: several refreshes */
		atomic_store(&h.stop, 1);
		for (int t = 0; t < 4; t++)
			pthread_join(th[t], NULL);
		creds_chain_counters(h.c, &refreshes, &failures);
		if (h.failures || h.expired || failures || refreshes < 2 || h.distinct < 3 ||
		    h.gets < 100)
			harness_fail(__FILE__, __LINE__, "%s: gets %ld failures %ld expired %ld "
				     "distinct %ld refreshes %llu refresh failures %llu", p,
				     (long)h.gets, (long)h.failures, (long)h.expired,
				     (long)h.distinct, (unsigned long long)refreshes,
				     (unsigned long long)failures);
		else
			printf("    %s: %ld gets, %llu refreshes, 0 failures\n", p, (long)h.gets,
			       (unsigned long long)refreshes);
		creds_chain_destroy(h.c);
	}
}

static const struct test tests[] = {
	TEST(t_each_provider),
	TEST(t_wrong_token),
	TEST(t_bad_config),
	TEST(t_imds_v1),
	TEST(t_default_chain_order),
	TEST(t_invalidate_and_token_reuse),
	TEST(t_live_refresh_threads),
	{ 0 },
};

int main(void)
{
	char cmd[128];
	int rc;

	log_set_level(LOG_CRIT);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/feedfs-creds-XXXXXX");
	if (!mkdtemp(tmpdir))
		return 1;
	if (server_start(&srv, "900") || server_start(&srv_short, "3")) {
		printf("  SKIP creds_providers: cannot start tests/creds_servers.py "
		       "(needs /usr/bin/python3; run from the repository root)\n");
		skip = 1;
	}
	rc = harness_run("creds_providers", tests);
	server_stop(&srv);
	server_stop(&srv_short);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		rc = 1;
	return rc;
}
