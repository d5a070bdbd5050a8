/*
 * test_sigv4 — SigV4 signing against vectors computed by botocore
 * (tests/vectors/gen_sigv4.py), one folder per case under tests/vectors/sigv4/.
 * The vectors dir is $FEEDFS_SIGV4_VECTORS or tests/vectors/sigv4 relative to
 * the working directory (make runs tests from the repo root).
 */
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "feedfs/creds.h"
#include "../../src/s3/s3_i.h"

#define MAXKV 16

struct vcase {
	char method[16], host[256], bucket[128], region[64], service[16], date[32];
	char ak[128], sk[128], token[512], payload[80];
	char key[2048];
	size_t key_len;
	int has_key, path_style;
	char qbuf[MAXKV][512], hbuf[MAXKV][512];
	struct sigv4_kv q[MAXKV], h[MAXKV];
	size_t nq, nh;
};

static char *read_all(const char *dir, const char *name)
{
	char path[1024];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static int unhex(const char *s, char *out, size_t cap, size_t *len)
{
	size_t n = strlen(s), i;

	if (n % 2 || n / 2 > cap)
		return -1;
	for (i = 0; i < n / 2; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (char)v;
	}
	*len = n / 2;
	return 0;
}

#define SETF(field) snprintf(v->field, sizeof(v->field), "%s", val)

static int load_case(const char *dir, struct vcase *v)
{
	char *txt = read_all(dir, "request.txt"), *line, *save = NULL;

	memset(v, 0, sizeof(*v));
	if (!txt)
		return -1;
	for (line = strtok_r(txt, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '='), *val;

		if (line[0] == '#' || !eq)
			continue;
		*eq = '\0';
		val = eq + 1;
		if (!strcmp(line, "method")) SETF(method);
		else if (!strcmp(line, "host")) SETF(host);
		else if (!strcmp(line, "bucket")) SETF(bucket);
		else if (!strcmp(line, "region")) SETF(region);
		else if (!strcmp(line, "service")) SETF(service);
		else if (!strcmp(line, "date")) SETF(date);
		else if (!strcmp(line, "access_key")) SETF(ak);
		else if (!strcmp(line, "secret_key")) SETF(sk);
		else if (!strcmp(line, "token")) SETF(token);
		else if (!strcmp(line, "payload")) SETF(payload);
		else if (!strcmp(line, "path_style")) v->path_style = atoi(val);
		else if (!strcmp(line, "key_hex")) {
			if (unhex(val, v->key, sizeof(v->key), &v->key_len))
				goto bad;
			v->has_key = 1;
		} else if (!strcmp(line, "query") && v->nq < MAXKV) {
			char *b = v->qbuf[v->nq], *e;

			snprintf(b, sizeof(v->qbuf[0]), "%s", val);
			e = strchr(b, '=');
			if (!e)
				goto bad;
			*e = '\0';
			v->q[v->nq++] = (struct sigv4_kv){ b, e + 1 };
		} else if (!strcmp(line, "header") && v->nh < MAXKV) {
			char *b = v->hbuf[v->nh], *e;

			snprintf(b, sizeof(v->hbuf[0]), "%s", val);
			e = strchr(b, ':');
			if (!e)
				goto bad;
			*e = '\0';
			v->h[v->nh++] = (struct sigv4_kv){ b, e + 1 };
		}
	}
	free(txt);
	return 0;
bad:
	free(txt);
	return -1;
}

static const char *vectors_dir(void)
{
	const char *d = getenv("FEEDFS_SIGV4_VECTORS");

	return d && d[0] ? d : "tests/vectors/sigv4";
}

static void t_vectors(void)
{
	DIR *d = opendir(vectors_dir());
	struct dirent *de;
	int n_cases = 0;

	CHECK(d != NULL);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char dir[1024], *want_cr, *want_sts, *want_auth;
		struct vcase v;
		struct s3_creds cr = {0};
		struct sigv4_input in;
		struct sigv4_output out;
		struct tm tm = {0};
		char *uri;
		int ret;

		if (de->d_name[0] == '.')
			continue;
		snprintf(dir, sizeof(dir), "%s/%s", vectors_dir(), de->d_name);
		if (load_case(dir, &v)) {
			harness_fail(__FILE__, __LINE__, "%s: cannot load request.txt", de->d_name);
			continue;
		}
		n_cases++;
		uri = s3_build_canonical_uri("", v.bucket, v.path_style,
					     v.has_key ? v.key : NULL, v.key_len);
		strptime(v.date, "%Y%m%dT%H%M%SZ", &tm);
		cr.access_key_id = v.ak;
		cr.secret_access_key = v.sk;
		cr.session_token = v.token[0] ? v.token : NULL;
		in = (struct sigv4_input){
			.method = v.method, .host = v.host, .canonical_uri = uri,
			.query = v.q, .n_query = v.nq, .headers = v.h, .n_headers = v.nh,
			.payload_hash = v.payload, .region = v.region, .service = v.service,
			.time_s = timegm(&tm),
		};
		ret = sigv4_sign(&in, &cr, &out);
		CHECK_EQ_INT(ret, 0);
		want_cr = read_all(dir, "canonical_request.txt");
		want_sts = read_all(dir, "string_to_sign.txt");
		want_auth = read_all(dir, "authorization.txt");
		if (ret == 0) {
			if (!want_cr || strcmp(out.canonical_request, want_cr))
				harness_fail(__FILE__, __LINE__, "%s: canonical request\n%s\n--- want\n%s",
					     de->d_name, out.canonical_request, want_cr ? want_cr : "?");
			if (!want_sts || strcmp(out.string_to_sign, want_sts))
				harness_fail(__FILE__, __LINE__, "%s: string to sign differs", de->d_name);
			if (!want_auth || strcmp(out.authorization, want_auth))
				harness_fail(__FILE__, __LINE__, "%s: authorization\n%s\n--- want\n%s",
					     de->d_name, out.authorization, want_auth ? want_auth : "?");
			CHECK_STR(out.amz_date, v.date);
			if (v.token[0])
				CHECK_STR(out.security_token, v.token);
			else
				CHECK(out.security_token == NULL);
			sigv4_output_cleanup(&out);
		}
		free(want_cr);
		free(want_sts);
		free(want_auth);
		free(uri);
	}
	closedir(d);
	/* Guard against an empty or mislocated folder passing silently. */
	CHECK(n_cases >= 20);
}

static void t_uri_encode(void)
{
	char *s = s3_uri_encode("a b/c~d+e%f", 11, 1);

	CHECK_STR(s, "a%20b/c~d%2Be%25f");
	free(s);
	s = s3_uri_encode("a/b", 3, 0);
	CHECK_STR(s, "a%2Fb");
	free(s);
	s = s3_uri_encode("\xe6\x95\xb0\x00z", 5, 1);
	CHECK_STR(s, "%E6%95%B0%00z");
	free(s);
}

static void t_canonical_query(void)
{
	struct sigv4_kv q[] = {
		{ "prefix", "a b/" }, { "list-type", "2" }, { "continuation-token", "x=/y" },
		{ "delimiter", "/" }, { "encoding-type", "url" }, { "max-keys", "1" },
	};
	char *s = sigv4_canonical_query(q, 6);

	CHECK_STR(s, "continuation-token=x%3D%2Fy&delimiter=%2F&encoding-type=url&"
		  "list-type=2&max-keys=1&prefix=a%20b%2F");
	free(s);
	s = sigv4_canonical_query(NULL, 0);
	CHECK_STR(s, "");
	free(s);
}

static void t_missing_inputs(void)
{
	struct s3_creds cr = { .access_key_id = "a", .secret_access_key = NULL };
	struct sigv4_input in = { .method = "GET", .host = "h", .canonical_uri = "/",
				  .region = "r", .service = "s3" };
	struct sigv4_output out;

	CHECK_EQ_INT(sigv4_sign(&in, &cr, &out), -EINVAL);
}

/* Throttling backs off; a 500, reset, short body or stall goes again at
 * once (jitter only) for S3_QUICK_RETRIES, then backs off from the start. */
static void t_retry_delay_by_cause(void)
{
	enum s3_retry_cause quick[] = { S3_RETRY_SERVER, S3_RETRY_NETWORK, S3_RETRY_BODY,
					S3_RETRY_STALL };

	for (uint64_t rnd = 0; rnd < 5000; rnd += 7) {
		for (size_t i = 0; i < sizeof(quick) / sizeof(quick[0]); i++) {
			for (int a = 1; a <= S3_QUICK_RETRIES; a++)
				CHECK(s3_retry_delay_ms(quick[i], a, rnd) <= S3_QUICK_JITTER_MS);
			CHECK_EQ_INT(s3_retry_delay_ms(quick[i], S3_QUICK_RETRIES + 1, rnd),
				     s3_backoff_ms(1, rnd));
			CHECK_EQ_INT(s3_retry_delay_ms(quick[i], S3_QUICK_RETRIES + 3, rnd),
				     s3_backoff_ms(3, rnd));
		}
		for (int a = 1; a < 12; a++) {
			CHECK_EQ_INT(s3_retry_delay_ms(S3_RETRY_THROTTLE, a, rnd), s3_backoff_ms(a, rnd));
			CHECK_EQ_INT(s3_retry_delay_ms(S3_RETRY_CONNECT, a, rnd), s3_backoff_ms(a, rnd));
		}
	}
	/* the backoff of throttling really waits: rnd just under its ceiling */
	CHECK_EQ_INT(s3_retry_delay_ms(S3_RETRY_THROTTLE, 1, 100), 100);
	CHECK_EQ_INT(s3_retry_delay_ms(S3_RETRY_SERVER, 1, 100), 100 % (S3_QUICK_JITTER_MS + 1));
}

static void t_backoff(void)
{
	/* Full jitter: within [0, min(cap, base*2^(n-1))]. */
	CHECK(s3_backoff_ms(1, 12345) <= 100);
	CHECK(s3_backoff_ms(3, ~0ull) <= 400);
	CHECK_EQ_INT(s3_backoff_ms(2, 200), 200);
	for (int a = 1; a < 40; a++)
		CHECK(s3_backoff_ms(a, (uint64_t)a * 0x9E3779B97F4A7C15ull) <= 20000);
	CHECK_EQ_INT(s3_backoff_ms(30, 20000), 20000);
	CHECK_EQ_INT(s3_backoff_ms(30, 20001), 0);
}

static const struct test tests[] = {
	TEST(t_vectors), TEST(t_uri_encode), TEST(t_canonical_query),
	TEST(t_missing_inputs), TEST(t_backoff), TEST(t_retry_delay_by_cause), { 0 },
};

int main(void)
{
	return harness_run("sigv4", tests);
}
