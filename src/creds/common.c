/*
 * common — helpers every provider shares: credential copies that wipe, env and
 * small-file reading. See creds_i.h.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void creds_free_secret(char *s)
{
	if (!s)
		return;
	util_wipe(s, strlen(s));
	free(s);
}

void creds_cleanup(struct s3_creds *cr)
{
	if (!cr)
		return;
	creds_free_secret(cr->access_key_id);
	creds_free_secret(cr->secret_access_key);
	creds_free_secret(cr->session_token);
	memset(cr, 0, sizeof(*cr));
}

int creds_fill(struct s3_creds *out, const char *ak, const char *sk, const char *tok,
	       int64_t expires_wall_ms)
{
	memset(out, 0, sizeof(*out));
	if (!ak || !*ak || !sk || !*sk)
		return -EINVAL;
	out->access_key_id = xstrdup(ak);
	out->secret_access_key = xstrdup(sk);
	out->session_token = tok && *tok ? xstrdup(tok) : NULL;
	out->expires_wall_ms = expires_wall_ms;
	return 0;
}

void creds_copy(struct s3_creds *dst, const struct s3_creds *src)
{
	dst->access_key_id = src->access_key_id ? xstrdup(src->access_key_id) : NULL;
	dst->secret_access_key = src->secret_access_key ? xstrdup(src->secret_access_key) : NULL;
	dst->session_token = src->session_token ? xstrdup(src->session_token) : NULL;
	dst->expires_wall_ms = src->expires_wall_ms;
}

int creds_env_true(const char *name)
{
	const char *v = util_getenv_nonempty(name);

	return v && (!strcasecmp(v, "1") || !strcasecmp(v, "true") ||
		     !strcasecmp(v, "yes") || !strcasecmp(v, "on"));
}

int creds_read_file(const char *path, size_t max, char **out)
{
	struct stat st;
	char *buf;
	size_t len = 0;
	int fd, rc = 0;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
		close(fd);
		return rc;
	}
	buf = xmalloc(max + 1);
	for (;;) {
		ssize_t n = read(fd, buf + len, max + 1 - len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max) {
			rc = -EFBIG;
			break;
		}
	}
	close(fd);
	if (rc) {
		util_wipe(buf, len);
		free(buf);
		return rc;
	}
	while (len && isspace((unsigned char)buf[len - 1]))
		len--;
	buf[len] = '\0';
	*out = buf;
	return 0;
}

int creds_role_name_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (!c || (!isalnum(c) && !strchr("_+=,.@-", c)))
			return 0;
	}
	return n > 0;
}

void creds_reason(char *buf, const char *fmt, ...)
{
	va_list ap;

	if (!buf)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, CREDS_REASON_MAX, fmt, ap);
	va_end(ap);
}

const char *creds_state_explain(void *state)
{
	return ((struct creds_msgs *)state)->reason;
}

const char *creds_state_detail(void *state)
{
	return ((struct creds_msgs *)state)->detail;
}
