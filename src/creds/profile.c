/*
 * profile — the shared credentials and config files (~/.aws/credentials,
 * ~/.aws/config), including credential_process.
 *
 * Which profile: creds_options.profile (--profile), else $AWS_PROFILE, else
 * "default". Which files: $AWS_SHARED_CREDENTIALS_FILE and $AWS_CONFIG_FILE,
 * else ~/.aws/credentials and ~/.aws/config. Both are re-read on every load, so
 * a rotated key is picked up by the next refresh or 403.
 *
 * Format (the subset of INI the AWS tools write):
 *   - "[name]" in the credentials file; "[profile name]" or "[default]" in the
 *     config file (other config sections such as [sso-session x] are skipped);
 *   - "key = value", spaces around '=' optional, keys case-insensitive;
 *   - full-line comments starting with '#' or ';', and inline comments when
 *     '#' or ';' follows whitespace (keys and tokens never contain spaces);
 *   - lines indented deeper than the key before them continue it (nested
 *     "s3 =" blocks) and are ignored here; a key before any section or a line without '=' is an error.
 * For the chosen profile, keys come from the credentials file first, then the
 * config file. aws_access_key_id without aws_secret_access_key is an error.
 * credential_process runs through /bin/sh with stdin from /dev/null, stderr
 * passed through, stdout captured (64 KiB cap, 30 s limit) and parsed as
 * {"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken"?,
 *  "Expiration"?}; with an Expiration the chain refreshes it like any other
 * temporary credentials.
 *
 * A missing file or a missing default profile is a miss (-ENOENT); a profile
 * named explicitly but found nowhere is an error, as is a broken file.
 */
#include "creds_i.h"

#include "feedfs/log.h"
#include "feedfs/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define PROFILE_FILE_MAX   (1024 * 1024)
#define PROCESS_OUT_MAX    (64 * 1024)
#define PROCESS_TIMEOUT_MS 30000

/* ---- INI ------------------------------------------------------------------- */

static char *trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
		*--e = '\0';
	return s;
}

static struct ini_profile *ini_section(struct ini_file *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->profiles[i].name, name))
			return &f->profiles[i];
	f->profiles = realloc(f->profiles, (f->n + 1) * sizeof(*f->profiles));
	if (!f->profiles)
		abort();
	memset(&f->profiles[f->n], 0, sizeof(f->profiles[f->n]));
	f->profiles[f->n].name = xstrdup(name);
	return &f->profiles[f->n++];
}

static void ini_set(struct ini_profile *p, const char *key, const char *value)
{
	for (size_t i = 0; i < p->n; i++) {
		if (!strcmp(p->kv[i].key, key)) {
			creds_free_secret(p->kv[i].value);
			p->kv[i].value = xstrdup(value);
			return;
		}
	}
	p->kv = realloc(p->kv, (p->n + 1) * sizeof(*p->kv));
	if (!p->kv)
		abort();
	p->kv[p->n].key = xstrdup(key);
	p->kv[p->n].value = xstrdup(value);
	p->n++;
}

/* "profile  x" -> "x" for the config file; NULL for sections we skip. */
static const char *section_name(char *inside, int is_config)
{
	if (!is_config)
		return inside;
	if (!strcmp(inside, "default"))
		return inside;
	if (!strncmp(inside, "profile", 7) && (inside[7] == ' ' || inside[7] == '\t')) {
		char *n = trim(inside + 8);

		return *n ? n : NULL;
	}
	return NULL;   /* [sso-session x], [services x], ... */
}

int creds_ini_parse(const char *text, int is_config, struct ini_file *out, char *reason)
{
	char *copy = xstrdup(text), *line, *next;
	struct ini_profile *cur = NULL;
	int in_section = 0, have_key = 0, lineno = 0, rc = 0;
	size_t key_indent = 0;

	memset(out, 0, sizeof(*out));
	for (line = copy; line; line = next) {
		char *s, *eq, *key, *val;
		size_t indent;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		if (lineno == 1 && !strncmp(line, "\xEF\xBB\xBF", 3))
			line += 3;   /* a UTF-8 byte order mark from Windows editors */
		s = trim(line);
		indent = (size_t)(s - line);
		if (!*s || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *close = strchr(s, ']');
			const char *name;

			if (!close || *trim(close + 1)) {
				creds_reason(reason, "line %d: bad section header", lineno);
				rc = -EINVAL;
				break;
			}
			*close = '\0';
			if (!*trim(s + 1)) {
				creds_reason(reason, "line %d: empty section name", lineno);
				rc = -EINVAL;
				break;
			}
			name = section_name(trim(s + 1), is_config);
			cur = name ? ini_section(out, name) : NULL;
			in_section = 1;
			have_key = 0;
			continue;
		}
		if (have_key && indent > key_indent)
			continue;   /* continuation / nested block: not ours */
		eq = strchr(s, '=');
		if (!eq) {
			creds_reason(reason, "line %d: expected 'key = value'", lineno);
			rc = -EINVAL;
			break;
		}
		if (!in_section) {
			creds_reason(reason, "line %d: key before any [section]", lineno);
			rc = -EINVAL;
			break;
		}
		*eq = '\0';
		key = trim(s);
		val = trim(eq + 1);
		for (char *c = val; *c; c++) {
			if ((*c == '#' || *c == ';') && c > val && (c[-1] == ' ' || c[-1] == '\t')) {
				*c = '\0';
				val = trim(val);
				break;
			}
		}
		if (!*key) {
			creds_reason(reason, "line %d: empty key", lineno);
			rc = -EINVAL;
			break;
		}
		for (char *c = key; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		have_key = 1;
		key_indent = indent;
		if (cur)
			ini_set(cur, key, val);
	}
	util_wipe(copy, strlen(text));
	free(copy);
	if (rc)
		creds_ini_free(out);
	return rc;
}

void creds_ini_free(struct ini_file *f)
{
	for (size_t i = 0; i < f->n; i++) {
		struct ini_profile *p = &f->profiles[i];

		for (size_t k = 0; k < p->n; k++) {
			free(p->kv[k].key);
			creds_free_secret(p->kv[k].value);
		}
		free(p->kv);
		free(p->name);
	}
	free(f->profiles);
	memset(f, 0, sizeof(*f));
}

const struct ini_profile *creds_ini_profile(const struct ini_file *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->profiles[i].name, name))
			return &f->profiles[i];
	return NULL;
}

const char *creds_ini_get(const struct ini_profile *p, const char *key)
{
	if (!p)
		return NULL;
	for (size_t i = 0; i < p->n; i++)
		if (!strcmp(p->kv[i].key, key))
			return p->kv[i].value[0] ? p->kv[i].value : NULL;
	return NULL;
}

/* ---- credential_process ------------------------------------------------------ */

int creds_parse_process_json(const char *s, size_t len, struct s3_creds *out, char *reason)
{
	struct json_value v;
	const struct json_value *ver;
	int rc;

	memset(out, 0, sizeof(*out));
	if (json_parse(s, len, &v)) {
		creds_reason(reason, "credential_process output is not valid JSON");
		return -EINVAL;
	}
	ver = json_get(&v, "Version");
	if (!ver || ver->type != JSON_NUMBER || ver->num != 1) {
		creds_reason(reason, "credential_process output: Version must be 1");
		rc = -EINVAL;
	} else {
		rc = creds_from_aws_json(&v, out, reason);
	}
	json_free(&v);
	return rc;
}

static int run_process(const char *cmd, char **out, size_t *out_len, char *reason)
{
	posix_spawn_file_actions_t fa;
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	int64_t deadline = util_now_ms() + PROCESS_TIMEOUT_MS;
	char *buf = xmalloc(PROCESS_OUT_MAX + 1);
	size_t len = 0;
	int pfd[2], status = 0, rc = 0;
	pid_t pid;

	*out = NULL;
	if (pipe2(pfd, O_CLOEXEC) < 0) {
		free(buf);
		return -errno;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
	rc = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(pfd[1]);
	if (rc) {
		close(pfd[0]);
		free(buf);
		creds_reason(reason, "cannot run credential_process: %s", strerror(rc));
		return -rc;
	}
	for (;;) {
		struct pollfd p = { .fd = pfd[0], .events = POLLIN };
		int64_t left = deadline - util_now_ms();
		ssize_t n;

		if (left <= 0) {
			kill(pid, SIGKILL);
			creds_reason(reason, "credential_process did not finish within %d s",
				     PROCESS_TIMEOUT_MS / 1000);
			rc = -ETIMEDOUT;
			break;
		}
		n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0)
			continue;
		n = read(pfd[0], buf + len, PROCESS_OUT_MAX + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
		if (len > PROCESS_OUT_MAX) {
			kill(pid, SIGKILL);
			creds_reason(reason, "credential_process wrote more than %d bytes",
				     PROCESS_OUT_MAX);
			rc = -EMSGSIZE;
			break;
		}
	}
	close(pfd[0]);
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR) {
			status = 0;   /* SIGCHLD ignored by the host process: judge by output */
			break;
		}
	}
	if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
		if (WIFEXITED(status))
			creds_reason(reason, "credential_process exited with status %d",
				     WEXITSTATUS(status));
		else
			creds_reason(reason, "credential_process killed by signal %d",
				     WTERMSIG(status));
		rc = -EIO;
	}
	if (rc) {
		util_wipe(buf, len);
		free(buf);
		return rc;
	}
	buf[len] = '\0';
	*out = buf;
	*out_len = len;
	return 0;
}

/* ---- the provider --------------------------------------------------------------- */

struct profile_state {
	struct creds_msgs m;            /* first: see creds_state_explain() */
	char *profile;
	int explicit_profile;
	char *cred_path, *config_path;
	int warned_mode;
};

static char *home_path(const char *env, const char *rel)
{
	const char *v = util_getenv_nonempty(env), *home = util_getenv_nonempty("HOME");

	if (!home) {
		struct passwd *pw = getpwuid(getuid());

		home = pw && pw->pw_dir ? pw->pw_dir : "/";
	}
	if (v && v[0] == '~' && v[1] == '/')
		return xasprintf("%s/%s", home, v + 2);
	if (v)
		return xstrdup(v);
	return xasprintf("%s/%s", home, rel);
}

int creds_profile_new(const struct creds_options *o, void **state)
{
	struct profile_state *st = xcalloc(1, sizeof(*st));
	const char *name = o && o->profile ? o->profile : util_getenv_nonempty("AWS_PROFILE");

	st->explicit_profile = name != NULL;
	st->profile = xstrdup(name ? name : "default");
	st->cred_path = home_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
	st->config_path = home_path("AWS_CONFIG_FILE", ".aws/config");
	*state = st;
	return 0;
}

/* 0 (maybe *found = 0 when absent) or -errno with st->m.reason set. */
static int load_file(struct profile_state *st, const char *path, int is_config,
		     struct ini_file *f, int *found)
{
	char why[CREDS_REASON_MAX] = "";
	struct stat sb;
	char *text;
	int rc;

	*found = 0;
	memset(f, 0, sizeof(*f));
	rc = creds_read_file(path, PROFILE_FILE_MAX, &text);
	if (rc == -ENOENT || rc == -ENOTDIR)
		return 0;
	if (rc) {
		creds_reason(st->m.reason, "cannot read %s: %s", path, strerror(-rc));
		return rc;
	}
	if (!is_config && !st->warned_mode && stat(path, &sb) == 0 && (sb.st_mode & 077)) {
		log_warn(CREDS_TAG, "%s is accessible by group or others (mode %03o); "
			 "run: chmod 600 %s", path, (unsigned)(sb.st_mode & 0777), path);
		st->warned_mode = 1;
	}
	rc = creds_ini_parse(text, is_config, f, why);
	creds_free_secret(text);
	if (rc) {
		creds_reason(st->m.reason, "%s: %s", path, why);
		return rc;
	}
	*found = 1;
	return 0;
}

static int from_process(struct profile_state *st, const char *cmd, const char *where,
			struct s3_creds *out)
{
	char why[CREDS_REASON_MAX] = "";
	size_t len = 0;
	char *text;
	int rc;

	rc = run_process(cmd, &text, &len, why);
	if (rc == 0) {
		rc = creds_parse_process_json(text, len, out, why);
		creds_free_secret(text);
	}
	if (rc) {
		creds_reason(st->m.reason, "profile '%s' in %s: %s", st->profile, where, why);
		return rc == -ENOENT ? -EIO : rc;
	}
	creds_reason(st->m.detail, "credential_process of profile '%s' in %s", st->profile, where);
	return 0;
}

static int profile_load(void *state, struct s3_creds *out)
{
	struct profile_state *st = state;
	struct ini_file cred, conf;
	const struct ini_profile *pc, *pf, *src;
	const char *ak, *sk, *tok, *proc, *where;
	int have_cred, have_conf, rc;

	st->m.reason[0] = '\0';
	if ((rc = load_file(st, st->cred_path, 0, &cred, &have_cred)))
		return rc;
	if ((rc = load_file(st, st->config_path, 1, &conf, &have_conf))) {
		creds_ini_free(&cred);
		return rc;
	}
	pc = creds_ini_profile(&cred, st->profile);
	pf = creds_ini_profile(&conf, st->profile);

	/* The credentials file wins for keys; the config file may hold them too. */
	src = creds_ini_get(pc, "aws_access_key_id") || creds_ini_get(pc, "aws_secret_access_key")
	      ? pc : pf;
	where = src == pc ? st->cred_path : st->config_path;
	ak = creds_ini_get(src, "aws_access_key_id");
	sk = creds_ini_get(src, "aws_secret_access_key");
	tok = creds_ini_get(src, "aws_session_token");
	proc = creds_ini_get(pc, "credential_process");
	if (!proc)
		proc = creds_ini_get(pf, "credential_process");

	if (ak || sk) {
		if (!ak || !sk) {
			creds_reason(st->m.reason, "profile '%s' in %s has %s but no %s", st->profile,
				     where, ak ? "aws_access_key_id" : "aws_secret_access_key",
				     ak ? "aws_secret_access_key" : "aws_access_key_id");
			rc = -EINVAL;
		} else {
			rc = creds_fill(out, ak, sk, tok, 0);
			creds_reason(st->m.detail, "profile '%s' in %s", st->profile, where);
		}
	} else if (proc) {
		rc = from_process(st, proc, creds_ini_get(pc, "credential_process") ?
				  st->cred_path : st->config_path, out);
	} else if (pc || pf) {
		const struct ini_profile *p = pf ? pf : pc;
		const char *unsupported = creds_ini_get(p, "role_arn") ? "role_arn" :
					  creds_ini_get(p, "sso_start_url") ||
					  creds_ini_get(p, "sso_session") ? "sso" : NULL;

		if (unsupported)
			creds_reason(st->m.reason, "profile '%s' uses %s, which feedfs does not "
				     "support; export the credentials or use credential_process",
				     st->profile, unsupported);
		else
			creds_reason(st->m.reason, "profile '%s' has no aws_access_key_id or "
				     "credential_process", st->profile);
		rc = st->explicit_profile ? -EINVAL : -ENOENT;
	} else if (!have_cred && !have_conf) {
		creds_reason(st->m.reason, "no %s or %s", st->cred_path, st->config_path);
		rc = st->explicit_profile ? -EINVAL : -ENOENT;
	} else {
		creds_reason(st->m.reason, "no profile '%s' in %s or %s", st->profile,
			     st->cred_path, st->config_path);
		rc = st->explicit_profile ? -EINVAL : -ENOENT;
	}
	creds_ini_free(&cred);
	creds_ini_free(&conf);
	return rc;
}

static void profile_destroy(void *state)
{
	struct profile_state *st = state;

	free(st->profile);
	free(st->cred_path);
	free(st->config_path);
	free(st);
}

const struct creds_provider_ops creds_profile_ops = {
	.name = "profile",
	.load = profile_load,
	.destroy = profile_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};

/* ---- the profile's region (not a credential, but it lives in the same file) ---- */

int creds_profile_region(const char *profile, char *buf, size_t len)
{
	const char *name = profile ? profile : util_getenv_nonempty("AWS_PROFILE");
	char *path = home_path("AWS_CONFIG_FILE", ".aws/config"), *text = NULL;
	char reason[CREDS_REASON_MAX];
	struct ini_file f = {0};
	const struct ini_profile *p;
	const char *v;
	int found = 0;

	if (creds_read_file(path, 1 << 20, &text) == 0 &&
	    creds_ini_parse(text, 1, &f, reason) == 0) {
		p = creds_ini_profile(&f, name ? name : "default");
		v = p ? creds_ini_get(p, "region") : NULL;
		if (v && v[0] && strlen(v) < len) {
			snprintf(buf, len, "%s", v);
			found = 1;
		}
		creds_ini_free(&f);
	}
	free(text);
	free(path);
	return found;
}
