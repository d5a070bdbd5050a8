/* fstab: mount(8) option strings to feedfs arguments (src/fstab.c). */
#include "harness.h"

#include "feedfs/fstab.h"
#include "feedfs/options.h"

#include <errno.h>
#include <stdlib.h>

/* The arguments joined by single spaces. */
static const char *joined(const struct fstab_args *a)
{
	static char buf[1024];
	size_t n = 0;

	buf[0] = '\0';
	for (int i = 0; i < a->argc; i++)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? " " : "", a->argv[i]);
	return buf;
}

static void t_maps(void)
{
	static const struct { const char *in; int sloppy; const char *out; int dropped; } cases[] = {
		{ "", 0, "", 0 },
		{ "rw", 0, "", 1 },
		{ "ro,_netdev,noauto,nofail,user,users,defaults,x-systemd.automount,"
		  "x-systemd.requires=network-online.target,comment=x", 0, "", 10 },
		{ "endpoint_url=http://127.0.0.1:9000,force_path_style", 0,
		  "--endpoint-url http://127.0.0.1:9000 --force-path-style", 0 },
		{ "cache_dir=/var/cache/feedfs,cache_size=20G,allow_other,_netdev", 0,
		  "--cache-dir /var/cache/feedfs --cache-size 20G --allow-other", 1 },
		{ "cache-dir=/c", 0, "--cache-dir /c", 0 },            /* dashes work too */
		{ "cache_dir=\"/a,b\",ro", 0, "--cache-dir /a,b", 1 },   /* quoted commas */
		{ ",,allow_other,,", 0, "--allow-other", 0 },
		{ "region=", 0, "--region ", 0 },                       /* feedfs judges the value */
		{ "max_memory=1G,metadata_ttl=30", 0, "--max-memory 1G --metadata-ttl 30", 0 },
		{ "bogus,allow_other", 1, "--allow-other", 1 },         /* -s drops unknown ones */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fstab_args a = { 0 };
		char msg[256];

		CHECK_EQ_INT(fstab_parse_opts(cases[i].in, cases[i].sloppy, &a, msg, sizeof(msg)), 0);
		CHECK_STR(joined(&a), cases[i].out);
		CHECK_EQ_INT(a.dropped, cases[i].dropped);
		CHECK(a.argv == NULL || a.argv[a.argc] == NULL);
		fstab_args_free(&a);
	}
}

static void t_rejects(void)
{
	static const struct { const char *in; const char *msg; } cases[] = {
		{ "bogus_opt=1", "unknown option 'bogus_opt' (feedfs has no --bogus-opt)" },
		{ "_netdev,colour", "unknown option 'colour' (feedfs has no --colour)" },
		{ "allow_other=yes", "option 'allow_other' takes no value" },
		{ "cache_dir", "option 'cache_dir' needs a value (cache_dir=...)" },
		{ "foreground", "option 'foreground' cannot be used with mount(8)" },
		{ "dry_run", "option 'dry_run' cannot be used with mount(8)" },
		{ "help", "option 'help' cannot be used with mount(8)" },
		{ "=x", "empty option name in '=x'" },
		{ "cache_dir=\"/a", "unterminated quote in 'cache_dir=\"/a'" },
		{ "noexec", "unknown option 'noexec' (feedfs has no --noexec)" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fstab_args a = { 0 };
		char msg[256];

		CHECK_EQ_INT(fstab_parse_opts(cases[i].in, 0, &a, msg, sizeof(msg)), -EINVAL);
		CHECK_STR(msg, cases[i].msg);
		fstab_args_free(&a);
	}
}

/* Every option of the table maps, with the value rule the table states. */
static void t_every_option(void)
{
	const char *name;

	for (size_t i = 0; (name = options_long_name(i)); i++) {
		char opt[128], want[160];
		struct fstab_args a = { 0 };
		int kind = options_lookup(name), e;

		CHECK(kind == 0 || kind == 1);
		snprintf(opt, sizeof(opt), "%s%s", name, kind ? "=v" : "");
		for (char *c = opt; *c; c++)
			if (*c == '-')
				*c = '_';
		e = fstab_parse_opts(opt, 0, &a, NULL, 0);
		if (strcmp(name, "help") && strcmp(name, "version") && strcmp(name, "dry-run") &&
		    strcmp(name, "print-credentials-source") && strcmp(name, "foreground") &&
		    strcmp(name, "debug")) {
			CHECK_EQ_INT(e, 0);
			snprintf(want, sizeof(want), "--%s%s", name, kind ? " v" : "");
			CHECK_STR(joined(&a), want);
		} else {
			CHECK_EQ_INT(e, -EINVAL);
		}
		fstab_args_free(&a);
	}
	CHECK_EQ_INT(options_lookup("cache-dir"), 1);
	CHECK_EQ_INT(options_lookup("allow-other"), 0);
	CHECK_EQ_INT(options_lookup("cache_dir"), -ENOENT);
	CHECK_EQ_INT(options_lookup(""), -ENOENT);
}

static const struct test tests[] = {
	TEST(t_maps), TEST(t_rejects), TEST(t_every_option), { 0 },
};

int main(void)
{
	return harness_run("fstab", tests);
}
