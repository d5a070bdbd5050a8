/*
 * test_creds_parse — the parsers behind the providers: shared config files,
 * the profile provider end to end (files in a temp dir, credential_process),
 * JSON, STS XML, Aliyun STS JSON. No network.
 */
#include "harness.h"

#include "../../src/creds/creds_i.h"
#include "feedfs/creds.h"
#include "feedfs/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- INI --------------------------------------------------------------------- */

static void t_ini_table(void)
{
	static const struct {
		const char *text;
		int is_config;
		int rc;
		const char *profile, *key, *want;   /* want NULL: key absent */
	} cases[] = {
		{ "[default]\naws_access_key_id=AK\n", 0, 0, "default", "aws_access_key_id", "AK" },
		{ "[default]\naws_access_key_id = AK \n", 0, 0, "default", "aws_access_key_id", "AK" },
		{ "[default]\r\naws_access_key_id\t=\tAK\r\n", 0, 0, "default", "aws_access_key_id", "AK" },
		{ "# top\n; also\n[default]\n# c\n  ; c\nAWS_Access_Key_ID = AK\n", 0, 0, "default",
		  "aws_access_key_id", "AK" },
		{ "[default]\naws_access_key_id = AK # inline\n", 0, 0, "default", "aws_access_key_id", "AK" },
		{ "[default]\naws_access_key_id = AK ;inline\n", 0, 0, "default", "aws_access_key_id", "AK" },
		{ "[default]\naws_secret_access_key = a#b;c\n", 0, 0, "default", "aws_secret_access_key",
		  "a#b;c" },
		{ "[default]\nregion =\n", 0, 0, "default", "region", NULL },
		/* [profile x] in config, [x] in credentials. */
		{ "[profile dev]\naws_access_key_id = D\n", 1, 0, "dev", "aws_access_key_id", "D" },
		{ "[profile   dev  ]\naws_access_key_id = D\n", 1, 0, "dev", "aws_access_key_id", "D" },
		{ "[dev]\naws_access_key_id = D\n", 1, 0, "dev", "aws_access_key_id", NULL },
		{ "[profile dev]\naws_access_key_id = D\n", 0, 0, "profile dev", "aws_access_key_id", "D" },
		{ "[dev]\naws_access_key_id = D\n", 0, 0, "dev", "aws_access_key_id", "D" },
		{ "[default]\nk = v\n", 1, 0, "default", "k", "v" },
		{ "[sso-session s]\nk = v\n[default]\nk = w\n", 1, 0, "default", "k", "w" },
		/* Later keys override; later sections merge. */
		{ "[a]\nk = 1\nk = 2\n", 0, 0, "a", "k", "2" },
		{ "[a]\nk = 1\n[b]\nk = 3\n[a]\nj = 2\n", 0, 0, "a", "k", "1" },
		/* Nested blocks are skipped; same-indent keys are keys. */
		{ "[profile p]\ns3 =\n  k = nested\nk = top\n", 1, 0, "p", "k", "top" },
		{ "[p]\n  a = 1\n  k = 2\n", 0, 0, "p", "k", "2" },
		{ "\xEF\xBB\xBF[default]\nk = v\n", 0, 0, "default", "k", "v" },
		/* Broken files. */
		{ "k = v\n[default]\n", 0, -EINVAL, NULL, NULL, NULL },
		{ "[default]\njunk line\n", 0, -EINVAL, NULL, NULL, NULL },
		{ "[default\nk = v\n", 0, -EINVAL, NULL, NULL, NULL },
		{ "[]\nk = v\n", 0, -EINVAL, NULL, NULL, NULL },
		{ "[default]\n = v\n", 0, -EINVAL, NULL, NULL, NULL },
		{ "", 0, 0, "default", "k", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ini_file f;
		char why[CREDS_REASON_MAX] = "";
		int rc = creds_ini_parse(cases[i].text, cases[i].is_config, &f, why);

		if (rc != cases[i].rc) {
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d (%s)", i, rc, why);
			continue;
		}
		if (rc) {
			CHECK(strstr(why, "line ") == why);
			continue;
		}
		const char *got = creds_ini_get(creds_ini_profile(&f, cases[i].profile), cases[i].key);
		if (cases[i].want ? !got || strcmp(got, cases[i].want) : got != NULL)
			harness_fail(__FILE__, __LINE__, "case %zu: %s.%s = \"%s\"", i,
				     cases[i].profile, cases[i].key, got ? got : "(absent)");
		creds_ini_free(&f);
	}
}

/* ---- the profile provider, files on disk -------------------------------------- */

static char tmpdir[64];

static void write_file(const char *name, const char *text, mode_t mode)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	chmod(path, mode);
}

static int load_profile(const char *profile, struct s3_creds *cr, char *why, size_t why_len)
{
	struct creds_options o = { .profile = profile };
	void *st;
	int rc;

	creds_profile_new(&o, &st);
	rc = creds_profile_ops.load(st, cr);
	snprintf(why, why_len, "%s", rc ? creds_profile_ops.explain(st)
				     : creds_profile_ops.detail(st));
	creds_profile_ops.destroy(st);
	return rc;
}

static void t_profile_provider(void)
{
	char path[256], why[512];
	struct s3_creds cr;

	snprintf(tmpdir, sizeof(tmpdir), "/tmp/feedfs-creds-XXXXXX");
	CHECK(mkdtemp(tmpdir) != NULL);
	snprintf(path, sizeof(path), "%s/credentials", tmpdir);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	snprintf(path, sizeof(path), "%s/config", tmpdir);
	setenv("AWS_CONFIG_FILE", path, 1);
	unsetenv("AWS_PROFILE");

	/* No files at all: a miss for the default profile, an error for a named one. */
	CHECK_EQ_INT(load_profile(NULL, &cr, why, sizeof(why)), -ENOENT);
	CHECK(strstr(why, "no ") == why);
	CHECK_EQ_INT(load_profile("dev", &cr, why, sizeof(why)), -EINVAL);

	write_file("credentials",
		   "# test file\n"
		   "[default]\n"
		   "aws_access_key_id = AKDEFAULT\n"
		   "aws_secret_access_key = SKDEFAULT\n"
		   "\n"
		   "[dev]\n"
		   "aws_access_key_id=AKDEV\n"
		   "aws_secret_access_key=SKDEV\n"
		   "aws_session_token=TOKDEV\n"
		   "[half]\n"
		   "aws_access_key_id = AKHALF\n"
		   "[proc]\n"
		   "credential_process = printf '{\"Version\": 1, \"AccessKeyId\": \"AKPROC\", "
		   "\"SecretAccessKey\": \"SKPROC\", \"SessionToken\": \"TOKPROC\", "
		   "\"Expiration\": \"2099-01-01T00:00:00Z\"}'\n", 0600);
	write_file("config",
		   "[default]\n"
		   "region = us-east-1\n"
		   "[profile cfgonly]\n"
		   "aws_access_key_id = AKCFG\n"
		   "aws_secret_access_key = SKCFG\n"
		   "[profile dev]\n"
		   "aws_access_key_id = AKIGNORED\n"
		   "aws_secret_access_key = SKIGNORED\n"
		   "[profile role]\n"
		   "role_arn = arn:aws:iam::1:role/x\n"
		   "source_profile = default\n"
		   "[profile failproc]\n"
		   "credential_process = echo oops >&2; exit 3\n"
		   "[profile badjson]\n"
		   "credential_process = echo '{\"Version\": 2, \"AccessKeyId\": \"A\", "
		   "\"SecretAccessKey\": \"S\"}'\n"
		   "[profile staticproc]\n"
		   "credential_process = echo '{\"Version\": 1, \"AccessKeyId\": \"AKSP\", "
		   "\"SecretAccessKey\": \"SKSP\"}'\n", 0600);

	static const struct {
		const char *profile;
		int rc;
		const char *ak, *sk, *tok;
		int temporary;
		const char *why_has;
	} cases[] = {
		{ NULL, 0, "AKDEFAULT", "SKDEFAULT", NULL, 0, "profile 'default'" },
		{ "dev", 0, "AKDEV", "SKDEV", "TOKDEV", 0, "/credentials" },
		{ "cfgonly", 0, "AKCFG", "SKCFG", NULL, 0, "/config" },
		{ "half", -EINVAL, NULL, NULL, NULL, 0, "has aws_access_key_id but no aws_secret" },
		{ "proc", 0, "AKPROC", "SKPROC", "TOKPROC", 1, "credential_process" },
		{ "staticproc", 0, "AKSP", "SKSP", NULL, 0, "credential_process" },
		{ "failproc", -EIO, NULL, NULL, NULL, 0, "exited with status 3" },
		{ "badjson", -EINVAL, NULL, NULL, NULL, 0, "Version must be 1" },
		{ "role", -EINVAL, NULL, NULL, NULL, 0, "role_arn" },
		{ "nosuch", -EINVAL, NULL, NULL, NULL, 0, "no profile 'nosuch'" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = load_profile(cases[i].profile, &cr, why, sizeof(why));

		if (rc != cases[i].rc || !strstr(why, cases[i].why_has)) {
			harness_fail(__FILE__, __LINE__, "case %zu (%s): rc %d \"%s\"", i,
				     cases[i].profile ? cases[i].profile : "default", rc, why);
			creds_cleanup(&cr);
			continue;
		}
		if (rc == 0) {
			CHECK_STR(cr.access_key_id, cases[i].ak);
			CHECK_STR(cr.secret_access_key, cases[i].sk);
			if (cases[i].tok)
				CHECK_STR(cr.session_token, cases[i].tok);
			else
				CHECK(cr.session_token == NULL);
			CHECK_EQ_INT(cr.expires_wall_ms != 0, cases[i].temporary);
		}
		creds_cleanup(&cr);
	}

	/* AWS_PROFILE picks the profile, and an explicit --profile beats it. */
	setenv("AWS_PROFILE", "dev", 1);
	CHECK_EQ_INT(load_profile(NULL, &cr, why, sizeof(why)), 0);
	CHECK_STR(cr.access_key_id, "AKDEV");
	creds_cleanup(&cr);
	CHECK_EQ_INT(load_profile("cfgonly", &cr, why, sizeof(why)), 0);
	CHECK_STR(cr.access_key_id, "AKCFG");
	creds_cleanup(&cr);
	unsetenv("AWS_PROFILE");

	/* A world-readable credentials file still works (with a warning). */
	write_file("credentials", "[default]\naws_access_key_id=A\naws_secret_access_key=S\n", 0644);
	CHECK_EQ_INT(load_profile(NULL, &cr, why, sizeof(why)), 0);
	creds_cleanup(&cr);

	/* A broken file is an error that names the file and line. */
	write_file("credentials", "[default]\nthis is not ini\n", 0600);
	CHECK_EQ_INT(load_profile(NULL, &cr, why, sizeof(why)), -EINVAL);
	CHECK(strstr(why, "credentials: line 2") != NULL);

	/* Through the chain: source and description, never the secret. */
	write_file("credentials", "[default]\naws_access_key_id=AKIAPROFILE000001234\n"
		   "aws_secret_access_key=SUPERSECRET\n", 0600);
	{
		struct creds_options o = { .provider = "profile" };
		struct creds_chain *c;
		char msg[256], line[512];

		CHECK_EQ_INT(creds_chain_new(&o, &c, msg, sizeof(msg)), 0);
		CHECK_STR(creds_chain_source(c), "profile");
		creds_chain_describe(c, line, sizeof(line));
		CHECK(strstr(line, "profile: profile 'default' in ") == line);
		CHECK(strstr(line, "****1234") != NULL);
		CHECK(strstr(line, "SUPERSECRET") == NULL);
		CHECK(strstr(line, "AKIAPROFILE") == NULL);
		creds_chain_destroy(c);
	}

	snprintf(path, sizeof(path), "rm -rf '%s'", tmpdir);
	CHECK_EQ_INT(system(path), 0);
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
}

/* ---- JSON ------------------------------------------------------------------------ */

static void t_json_table(void)
{
	static const struct {
		const char *text;
		int ok;
		const char *key, *want;
	} cases[] = {
		{ "{\"a\":\"b\"}", 1, "a", "b" },
		{ " \n{ \"a\" : \"b\" , \"c\" : [1, 2.5e3, -0, true, false, null, {}] }\t", 1, "a", "b" },
		{ "{\"a\":\"\\u00e9\\n\\\"\\\\\\/\"}", 1, "a", "\xC3\xA9\n\"\\/" },
		{ "{\"a\":\"\\ud83d\\ude00\"}", 1, "a", "\xF0\x9F\x98\x80" },
		{ "{\"a\":\"x\",\"a\":\"y\"}", 1, "a", "x" },
		{ "{\"n\":{\"a\":\"deep\"}}", 1, "a", NULL },
		{ "{}", 1, "a", NULL },
		{ "", 0, NULL, NULL },
		{ "{", 0, NULL, NULL },
		{ "{\"a\":\"b\",}", 0, NULL, NULL },
		{ "{\"a\":\"b\"} x", 0, NULL, NULL },
		{ "{\"a\":01}", 0, NULL, NULL },
		{ "{\"a\":1.}", 0, NULL, NULL },
		{ "{\"a\":\"\\ud83d\"}", 0, NULL, NULL },
		{ "{\"a\":\"\\ude00\"}", 0, NULL, NULL },
		{ "{\"a\":\"\\x\"}", 0, NULL, NULL },
		{ "{\"a\":\"raw\nnewline\"}", 0, NULL, NULL },
		{ "{'a':'b'}", 0, NULL, NULL },
		{ "{\"a\" \"b\"}", 0, NULL, NULL },
		{ "{\"a\":tru}", 0, NULL, NULL },
		{ "{\"a\":\"b\\", 0, NULL, NULL },
		{ "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", 0,
		  NULL, NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct json_value v;
		int rc = json_parse(cases[i].text, strlen(cases[i].text), &v);

		if ((rc == 0) != cases[i].ok) {
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d", i, rc);
			if (rc == 0)
				json_free(&v);
			continue;
		}
		if (rc)
			continue;
		const char *got = json_get_str(&v, cases[i].key);
		if (cases[i].want ? !got || strcmp(got, cases[i].want) : got != NULL)
			harness_fail(__FILE__, __LINE__, "case %zu: %s = \"%s\"", i, cases[i].key,
				     got ? got : "(absent)");
		json_free(&v);
	}
}

static void t_process_json(void)
{
	static const struct {
		const char *text;
		int rc;
		const char *tok;
		int64_t exp;
	} cases[] = {
		{ "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}", 0, NULL, 0 },
		{ "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"SessionToken\":\"T\","
		  "\"Expiration\":\"2023-11-14T22:13:20Z\"}", 0, "T", 1700000000000LL },
		{ "{\"Version\":2,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}", -EINVAL, NULL, 0 },
		{ "{\"Version\":\"1\",\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}", -EINVAL, NULL, 0 },
		{ "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\"}", -EINVAL, NULL, 0 },
		{ "{\"Version\":1,\"SecretAccessKey\":\"S\"}", -EINVAL, NULL, 0 },
		{ "{\"Version\":1,\"AccessKeyId\":\"A\"}", -EINVAL, NULL, 0 },
		{ "{\"Version\":1,\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"S\",\"Expiration\":\"soon\"}",
		  -EINVAL, NULL, 0 },
		{ "not json", -EINVAL, NULL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_creds cr;
		char why[CREDS_REASON_MAX] = "";
		int rc = creds_parse_process_json(cases[i].text, strlen(cases[i].text), &cr, why);

		if (rc != cases[i].rc)
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d (%s)", i, rc, why);
		if (rc == 0) {
			CHECK_STR(cr.access_key_id, "A");
			if (cases[i].tok)
				CHECK_STR(cr.session_token, cases[i].tok);
			CHECK_EQ_INT(cr.expires_wall_ms, cases[i].exp);
		} else {
			CHECK(why[0] != '\0');
		}
		creds_cleanup(&cr);
	}
}

/* ---- STS XML ------------------------------------------------------------------------ */

#define STS_OK(creds) \
	"<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">" \
	"<AssumeRoleWithWebIdentityResult><Credentials>" creds "</Credentials>" \
	"</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"

static void t_sts_xml(void)
{
	static const struct {
		const char *xml;
		int rc;
		const char *why_has;
	} cases[] = {
		{ STS_OK("<AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
			 "<SessionToken>T</SessionToken><Expiration>2023-11-14T22:13:20Z</Expiration>"),
		  0, "" },
		{ "<?xml version=\"1.0\"?>\n" STS_OK(
			"\n  <SessionToken>T</SessionToken>\n  <SecretAccessKey>S</SecretAccessKey>\n"
			"  <Expiration>2023-11-14T22:13:20.000Z</Expiration>\n"
			"  <AccessKeyId>ASIA</AccessKeyId>\n"), 0, "" },
		{ STS_OK("<AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
			 "<Expiration>2023-11-14T22:13:20Z</Expiration>"), -EINVAL, "SessionToken" },
		{ STS_OK("<AccessKeyId>ASIA</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
			 "<SessionToken>T</SessionToken><Expiration>later</Expiration>"), -EINVAL,
		  "not a time" },
		{ "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error>"
		  "<Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>bad token</Message>"
		  "</Error></ErrorResponse>", -EACCES, "InvalidIdentityToken: bad token" },
		{ "<ErrorResponse><Error><Code>Throttling</Code></Error></ErrorResponse>", -EIO,
		  "Throttling" },
		{ "<Other/>", -EINVAL, "no AssumeRoleWithWebIdentityResult" },
		{ "not xml", -EINVAL, "not XML" },
		{ "<!DOCTYPE r [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>" STS_OK(
			"<AccessKeyId>&x;</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
			"<SessionToken>T</SessionToken><Expiration>2023-11-14T22:13:20Z</Expiration>"),
		  -EINVAL, "AccessKeyId" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_creds cr;
		char why[CREDS_REASON_MAX] = "";
		int rc = creds_parse_sts_xml(cases[i].xml, strlen(cases[i].xml), &cr, why);

		if (rc != cases[i].rc || !strstr(why, cases[i].why_has))
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d \"%s\"", i, rc, why);
		if (rc == 0) {
			CHECK_STR(cr.access_key_id, "ASIA");
			CHECK_STR(cr.secret_access_key, "S");
			CHECK_STR(cr.session_token, "T");
			CHECK(cr.expires_wall_ms == 1700000000000LL);
		}
		creds_cleanup(&cr);
	}
}

static void t_aliyun_sts_json(void)
{
	static const struct {
		const char *text;
		int rc;
		const char *why_has;
	} cases[] = {
		{ "{\"RequestId\":\"r\",\"Credentials\":{\"SecurityToken\":\"T\",\"Expiration\":"
		  "\"2023-11-14T22:13:20Z\",\"AccessKeySecret\":\"S\",\"AccessKeyId\":\"STS.A\"}}", 0, "" },
		{ "{\"RequestId\":\"r\",\"Code\":\"AuthenticationFail.OIDCToken.Invalid\",\"Message\":"
		  "\"The OIDC token is invalid.\"}", -EACCES, "AuthenticationFail.OIDCToken.Invalid" },
		{ "{\"Code\":\"Throttling.User\",\"Message\":\"slow down\"}", -EIO, "Throttling.User" },
		{ "{\"Credentials\":{\"AccessKeyId\":\"STS.A\",\"AccessKeySecret\":\"S\","
		  "\"Expiration\":\"2023-11-14T22:13:20Z\"}}", -EINVAL, "SecurityToken" },
		{ "{\"RequestId\":\"r\"}", -EINVAL, "no Credentials" },
		{ "<html>", -EINVAL, "not valid JSON" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_creds cr;
		char why[CREDS_REASON_MAX] = "";
		int rc = creds_parse_aliyun_sts_json(cases[i].text, strlen(cases[i].text), &cr, why);

		if (rc != cases[i].rc || !strstr(why, cases[i].why_has))
			harness_fail(__FILE__, __LINE__, "case %zu: rc %d \"%s\"", i, rc, why);
		if (rc == 0) {
			CHECK_STR(cr.access_key_id, "STS.A");
			CHECK_STR(cr.secret_access_key, "S");
			CHECK_STR(cr.session_token, "T");
			CHECK(cr.expires_wall_ms == 1700000000000LL);
		}
		creds_cleanup(&cr);
	}
}

static void t_misc_helpers(void)
{
	char *s = creds_url_join("http://127.0.0.1:1/imds/", "/latest/api/token");

	CHECK_STR(s, "http://127.0.0.1:1/imds/latest/api/token");
	free(s);
	s = creds_url_join("http://h", "x");
	CHECK_STR(s, "http://h/x");
	free(s);
	CHECK(creds_role_name_ok("feedfs-role_1.x@y", 17));
	CHECK(!creds_role_name_ok("../etc", 6));
	CHECK(!creds_role_name_ok("a b", 3));
	CHECK(!creds_role_name_ok("", 0));
}

static const struct test tests[] = {
	TEST(t_ini_table),
	TEST(t_profile_provider),
	TEST(t_json_table),
	TEST(t_process_json),
	TEST(t_sts_xml),
	TEST(t_aliyun_sts_json),
	TEST(t_misc_helpers),
	{ 0 },
};

int main(void)
{
	log_set_level(LOG_CRIT);
	return harness_run("creds_parse", tests);
}
