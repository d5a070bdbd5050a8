/*
 * fstab — mount(8) options to feedfs arguments (include/feedfs/fstab.h).
 *
 * DESIGN
 * The option table in src/options.c is the only list of what feedfs takes:
 * this file asks it (options_lookup) instead of keeping a copy, so a new
 * option works in fstab the day it exists, and one feedfs does not know fails
 * here, before a process starts, with its fstab spelling in the message.
 */
#include "feedfs/fstab.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/options.h"
#include "feedfs/util.h"

#define FSTAB_NAME_MAX 64

/* Only mount(8), systemd-fstab-generator or the kernel's generic flags read
 * these; feedfs is read-only and always nosuid,nodev (libfuse's default). */
static const char *const mount_only[] = {
	"_netdev", "auto", "noauto", "user", "users", "nouser", "owner", "nofail",
	"defaults", "ro", "rw", "async", "nosuid", "nodev", NULL,
};

/* feedfs options that make no sense behind mount(8): they print and exit,
 * do not mount, or keep the helper from ever returning. */
static const char *const not_for_mount[] = {
	"help", "version", "dry-run", "print-credentials-source", "foreground", "debug", NULL,
};

#define bad util_einval        /* one line and -EINVAL */

static int in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (strcmp(*list, s) == 0)
			return 1;
	return 0;
}

static int push(struct fstab_args *a, const char *s, size_t n)
{
	char **v = realloc(a->argv, (size_t)(a->argc + 2) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	a->argv = v;
	v[a->argc] = strndup(s, n);
	if (!v[a->argc])
		return -ENOMEM;
	v[++a->argc] = NULL;
	return 0;
}

/* One option, opt[0..len): name[=value], the value possibly quoted. */
static int one_opt(const char *opt, size_t len, int sloppy, struct fstab_args *a, char *msg,
		   size_t msg_len)
{
	const char *eq = memchr(opt, '=', len), *val = NULL;
	size_t nlen = eq ? (size_t)(eq - opt) : len, vlen = 0;
	char name[FSTAB_NAME_MAX], flag[FSTAB_NAME_MAX + 2];
	int kind, e;

	if (nlen == 0)
		return bad(msg, msg_len, "empty option name in '%.*s'", (int)len, opt);
	if (nlen >= sizeof(name))
		return bad(msg, msg_len, "unknown option '%.*s'", (int)len, opt);
	memcpy(name, opt, nlen);
	name[nlen] = '\0';
	if (eq) {
		val = eq + 1;
		vlen = len - nlen - 1;
		if (vlen >= 2 && val[0] == '"' && val[vlen - 1] == '"') {
			val++;
			vlen -= 2;
		}
	}
	if (in_list(mount_only, name) || strncmp(name, "x-", 2) == 0 ||
	    strcmp(name, "comment") == 0) {
		a->dropped++;
		return 0;
	}
	for (char *c = name; *c; c++)
		if (*c == '_')
			*c = '-';
	if (in_list(not_for_mount, name))
		return bad(msg, msg_len, "option '%.*s' cannot be used with mount(8)", (int)nlen,
			   opt);
	kind = options_lookup(name);
	if (kind == -ENOENT) {
		if (sloppy) {
			a->dropped++;
			return 0;
		}
		return bad(msg, msg_len, "unknown option '%.*s' (feedfs has no --%s)", (int)nlen,
			   opt, name);
	}
	snprintf(flag, sizeof(flag), "--%s", name);
	memcpy(name, opt, nlen);        /* the messages below use the fstab spelling */
	if (kind == 1 && !eq)
		return bad(msg, msg_len, "option '%s' needs a value (%s=...)", name, name);
	if (kind == 0 && eq)
		return bad(msg, msg_len, "option '%s' takes no value", name);
	e = push(a, flag, strlen(flag));
	if (e == 0 && kind == 1)
		e = push(a, val, vlen);
	return e;
}

int fstab_parse_opts(const char *opts, int sloppy, struct fstab_args *a, char *msg,
		     size_t msg_len)
{
	const char *p = opts, *start;
	int quoted, e;

	if (msg && msg_len)
		msg[0] = '\0';
	while (*p) {
		start = p;
		quoted = 0;
		for (; *p && (quoted || *p != ','); p++)
			if (*p == '"')
				quoted = !quoted;
		if (quoted)
			return bad(msg, msg_len, "unterminated quote in '%s'", start);
		if (p > start) {
			e = one_opt(start, (size_t)(p - start), sloppy, a, msg, msg_len);
			if (e < 0)
				return e;
		}
		if (*p == ',')
			p++;
	}
	return 0;
}

void fstab_args_free(struct fstab_args *a)
{
	for (int i = 0; i < a->argc; i++)
		free(a->argv[i]);
	free(a->argv);
	memset(a, 0, sizeof(*a));
}
