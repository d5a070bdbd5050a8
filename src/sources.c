/*
 * sources — the file of `feedfs --sources FILE` (include/feedfs/sources.h).
 *
 * DESIGN
 * A line is split on blanks into NAME, URL and at most one key=value list.
 * Each source's struct options starts as a copy of the base (the command
 * line) with the fields options_free owns cleared, so the copy owns only what
 * is set here (bucket, prefix, snapshot); the keys are applied through
 * options_set, the command line's own parser, so a value means and is checked
 * exactly as the option would be; options_set_source then checks the
 * combination. Parsing never prints: the first problem is the one line.
 */
#include "feedfs/sources.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "feedfs/util.h"

#define SOURCES_FILE_MAX (1u << 20)

static const char *const source_keys[] = {
	"endpoint-url", "region", "profile", "force-path-style", "no-sign-request", "list-v1",
	"internal", "ca-bundle", "no-verify-ssl", "snapshot",
};

static int key_allowed(const char *name)
{
	for (size_t i = 0; i < sizeof(source_keys) / sizeof(source_keys[0]); i++)
		if (strcmp(source_keys[i], name) == 0)
			return 1;
	return 0;
}

/* Apply "k=v" (k with '_', value optional for flags) to o. */
static int apply_kv(struct options *o, char *kv, const char *file, int line, char *msg,
		    size_t msg_len)
{
	char *eq = strchr(kv, '='), why[512];
	const char *value = NULL;
	int flag, e;

	if (eq) {
		*eq = '\0';
		value = eq + 1;
	}
	for (char *p = kv; *p; p++)
		if (*p == '_')
			*p = '-';
	if (!kv[0] || !key_allowed(kv))
		return util_einval(msg, msg_len, "%s:%d: unknown key '%s'", file, line, kv);
	flag = options_lookup(kv) == 0;
	if (flag) {
		if (value && strcmp(value, "1") && strcmp(value, "true") && strcmp(value, "yes"))
			return util_einval(msg, msg_len, "%s:%d: %s is a flag (no value, or 1)", file,
					   line, kv);
		value = NULL;
	} else if (!value || !value[0]) {
		return util_einval(msg, msg_len, "%s:%d: %s needs a value", file, line, kv);
	}
	why[0] = '\0';
	if (strcmp(kv, "snapshot") == 0 && value[0] != '/' && !strstr(value, "://")) {
		/* A relative snapshot is beside the sources file (the daemon runs
		 * in "/", and the file is what names it). */
		const char *slash = strrchr(file, '/');
		char *abs = xasprintf("%.*s%s", slash ? (int)(slash - file + 1) : 0, file, value);

		e = options_set(o, kv, abs, why, sizeof(why));
		free(abs);
	} else {
		e = options_set(o, kv, value, why, sizeof(why));
	}
	if (e == -EINVAL)
		return util_einval(msg, msg_len, "%s:%d: %s", file, line, why);
	return e;
}

static int name_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= 255 && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

/* One non-blank line into spec; -EINVAL with the line's problem in msg. */
static int parse_line(char *text, const char *file, int line, const struct options *base,
		      struct source_spec *spec, char *msg, size_t msg_len)
{
	char *save = NULL, *name, *url, *kvs, *extra, *kv, why[512];
	int e;

	name = strtok_r(text, " \t", &save);
	url = strtok_r(NULL, " \t", &save);
	kvs = strtok_r(NULL, " \t", &save);
	extra = strtok_r(NULL, " \t", &save);
	if (!name_ok(name))
		return util_einval(msg, msg_len, "%s:%d: '%s' is not a valid name (1..255 bytes, "
				   "no '/', not . or ..)", file, line, name);
	if (!url)
		return util_einval(msg, msg_len, "%s:%d: no URL for '%s'", file, line, name);
	if (extra)
		return util_einval(msg, msg_len, "%s:%d: unexpected '%s' (options are one "
				   "key=value,... list)", file, line, extra);
	spec->o = *base;
	spec->o.bucket = spec->o.prefix = spec->o.snapshot = spec->o.sources = NULL;
	/* The cache and the metrics endpoint are the mount's, not a source's. */
	spec->o.cache_dir = spec->o.metrics_host = NULL;
	spec->o.cache_size = 0;
	spec->o.cache_clear = 0;
	spec->line = line;
	spec->name = strdup(name);
	if (!spec->name)
		return -ENOMEM;
	for (kv = kvs ? strtok_r(kvs, ",", &save) : NULL; kv; kv = strtok_r(NULL, ",", &save)) {
		e = apply_kv(&spec->o, kv, file, line, msg, msg_len);
		if (e < 0)
			return e;
	}
	why[0] = '\0';
	e = options_set_source(&spec->o, url, why, sizeof(why));
	if (e == -EINVAL)
		return util_einval(msg, msg_len, "%s:%d: %s", file, line, why);
	return e;
}

int sources_parse(const char *text, size_t len, const char *name, const struct options *base,
		  struct source_spec **out, size_t *n, char *msg, size_t msg_len)
{
	struct source_spec *specs = calloc(SOURCES_MAX, sizeof(*specs));
	size_t count = 0, pos = 0;
	int line = 0, e = 0;

	if (!specs)
		return -ENOMEM;
	while (pos < len && e == 0) {
		const char *nl = memchr(text + pos, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - text - pos) : len - pos;
		char *copy;
		size_t i = 0;

		line++;
		if (memchr(text + pos, '\0', ll)) {
			e = util_einval(msg, msg_len, "%s:%d: a NUL byte", name, line);
			break;
		}
		copy = xstrndup(text + pos, ll);
		pos += ll + (nl ? 1 : 0);
		if (ll && copy[ll - 1] == '\r')
			copy[ll - 1] = '\0';
		while (copy[i] == ' ' || copy[i] == '\t')
			i++;
		if (copy[i] && copy[i] != '#') {
			if (count == SOURCES_MAX) {
				e = util_einval(msg, msg_len, "%s:%d: more than %d sources", name,
						line, SOURCES_MAX);
			} else {
				specs[count].text = copy;   /* the options point into it */
				e = parse_line(copy + i, name, line, base, &specs[count], msg,
					       msg_len);
				copy = NULL;
				count++;        /* freed with the rest, even half-filled */
			}
			for (size_t j = 0; e == 0 && j + 1 < count; j++)
				if (strcmp(specs[j].name, specs[count - 1].name) == 0)
					e = util_einval(msg, msg_len, "%s:%d: duplicate name '%s' "
							"(line %d)", name, line, specs[j].name,
							specs[j].line);
		}
		free(copy);
	}
	if (e == 0 && count == 0)
		e = util_einval(msg, msg_len, "%s: no sources", name);
	if (e < 0) {
		sources_free(specs, count);
		return e;
	}
	*out = specs;
	*n = count;
	return 0;
}

int sources_load(const char *path, const struct options *base, struct source_spec **out,
		 size_t *n, char *msg, size_t msg_len)
{
	char *buf = malloc(SOURCES_FILE_MAX + 1);
	ssize_t got;
	int fd, e;

	if (!buf)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		e = -errno;
		free(buf);
		return util_einval(msg, msg_len, "--sources %s: %s", path, strerror(-e));
	}
	got = read(fd, buf, SOURCES_FILE_MAX + 1);
	close(fd);
	if (got < 0 || got > (ssize_t)SOURCES_FILE_MAX) {
		free(buf);
		return util_einval(msg, msg_len, "--sources %s: %s", path,
				   got < 0 ? strerror(errno) : "larger than 1 MiB");
	}
	e = sources_parse(buf, (size_t)got, path, base, out, n, msg, msg_len);
	free(buf);
	return e;
}

void sources_free(struct source_spec *s, size_t n)
{
	if (!s)
		return;
	for (size_t i = 0; i < n; i++) {
		free(s[i].name);
		free(s[i].text);
		options_free(&s[i].o);
	}
	free(s);
}
