/*
 * test_s3_url — endpoints and addressing: default endpoints per store, path- vs
 * virtual-hosted style, dotted buckets, IPv6 and ports (URL, Host and the SigV4
 * canonical host), region discovery, ListObjects V1 parsing, and the size of
 * curl's receive buffer for large GETs.
 */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>

#include "feedfs/creds.h"
#include "../../src/s3/s3_i.h"

/* ---- default endpoints and addressing rules ------------------------------ */

static void t_default_endpoints(void)
{
	static const struct { enum s3_store st; const char *region; int internal; const char *want; } c[] = {
		{ S3_STORE_AWS, "us-east-1", 0, "https://s3.us-east-1.amazonaws.com" },
		{ S3_STORE_AWS, "eu-west-3", 0, "https://s3.eu-west-3.amazonaws.com" },
		{ S3_STORE_AWS, "cn-north-1", 0, "https://s3.cn-north-1.amazonaws.com.cn" },
		{ S3_STORE_AWS, NULL, 0, "https://s3.us-east-1.amazonaws.com" },
		{ S3_STORE_OSS, "cn-hangzhou", 0, "https://oss-cn-hangzhou.aliyuncs.com" },
		{ S3_STORE_OSS, "cn-hangzhou", 1, "https://oss-cn-hangzhou-internal.aliyuncs.com" },
		{ S3_STORE_OSS, "oss-cn-beijing", 0, "https://oss-cn-beijing.aliyuncs.com" },
		{ S3_STORE_GCS, "auto", 0, "https://storage.googleapis.com" },
		{ S3_STORE_GCS, NULL, 0, "https://storage.googleapis.com" },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		char *e = s3_default_endpoint(c[i].st, c[i].region, c[i].internal);

		CHECK_STR(e, c[i].want);
		free(e);
	}
}

static void t_path_style_rules(void)
{
	static const struct { const char *scheme, *auth, *bucket; int force, want; } c[] = {
		{ "https", "s3.us-east-1.amazonaws.com", "data", 0, 0 },
		{ "https", "s3.us-east-1.amazonaws.com", "data", 1, 1 },
		{ "https", "s3.us-east-1.amazonaws.com", "my.data.set", 0, 1 },  /* TLS wildcard */
		{ "http", "minio.lan:9000", "my.data", 0, 0 },                   /* no TLS: fine */
		{ "https", "s3.example.com", "Upper", 0, 1 },
		{ "https", "s3.example.com", "under_score", 0, 1 },
		{ "http", "127.0.0.1:4568", "b", 0, 1 },
		{ "http", "127.0.0.1", "b", 0, 1 },
		{ "http", "[::1]:9000", "b", 0, 1 },
		{ "http", "[fd00::1]", "b", 0, 1 },
		{ "http", "localhost:9000", "b", 0, 1 },
		{ "https", "storage.googleapis.com", "b", 0, 0 },
		{ "https", "10.0.0.1.nip.io", "b", 0, 0 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		int got = s3_pick_path_style(c[i].scheme, c[i].auth, c[i].bucket, c[i].force);

		if (got != c[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu (%s %s %s): %d, expected %d", i,
				     c[i].scheme, c[i].auth, c[i].bucket, got, c[i].want);
	}
}

static void t_parse_endpoint(void)
{
	static const struct { const char *url, *scheme, *auth, *base; } ok[] = {
		{ "http://127.0.0.1:4568", "http", "127.0.0.1:4568", "" },
		{ "http://[::1]:9000", "http", "[::1]:9000", "" },
		{ "http://[::1]:80/", "http", "[::1]", "" },
		{ "https://h.example:443/base/", "https", "h.example", "/base" },
		{ "https://h.example:8443/a/b", "https", "h.example:8443", "/a/b" },
		{ "http://h:8080", "http", "h:8080", "" },
	};
	static const char *bad[] = { "ftp://h", "http://", "h:9000", "http://u:p@h",
				     "http://[::1:9000", "http://h?x=1" };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		char *s = NULL, *a = NULL, *b = NULL;

		CHECK_EQ_INT(s3_parse_endpoint(ok[i].url, &s, &a, &b), 0);
		CHECK_STR(s, ok[i].scheme);
		CHECK_STR(a, ok[i].auth);
		CHECK_STR(b, ok[i].base);
		free(s);
		free(a);
		free(b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *s = NULL, *a = NULL, *b = NULL;

		if (s3_parse_endpoint(bad[i], &s, &a, &b) != -EINVAL)
			harness_fail(__FILE__, __LINE__, "'%s' accepted", bad[i]);
	}
}

/* ---- whole requests: URL, Host, canonical URI ------------------------------ */

struct url_case {
	enum s3_store store;
	const char *endpoint, *region, *bucket;
	int force, internal;
	const char *key;
	const char *url, *host, *curi, *region_used;
};

static void check_url_case(const struct url_case *k, struct creds_chain *anon)
{
	struct s3_config cfg = {
		.endpoint_url = k->endpoint, .region = k->region, .bucket = k->bucket,
		.force_path_style = k->force, .store = k->store, .oss_internal = k->internal,
		.creds = anon,
	};
	struct s3_client *c = NULL;
	struct s3_req *r = NULL;

	CHECK_EQ_INT(s3_client_new(&cfg, &c), 0);
	if (!c)
		return;
	CHECK_EQ_INT(s3_req_new(c, k->key ? S3_OP_GET : S3_OP_LIST, k->key,
				k->key ? strlen(k->key) : 0, &r), 0);
	if (!k->key) {
		s3_req_add_query(r, "list-type", "2");
		s3_req_add_query(r, "prefix", "a b/");
	}
	CHECK_EQ_INT(s3_req_finish_setup(r), 0);
	CHECK_STR(r->url, k->url);
	CHECK_STR(r->host, k->host);
	CHECK_STR(r->canonical_uri, k->curi);
	CHECK_STR(s3_client_region(c), k->region_used);
	s3_req_free(r);
	s3_client_destroy(c);
}

static void t_request_urls(void)
{
	static const struct url_case cases[] = {
		{ S3_STORE_AWS, NULL, "eu-west-1", "data", 0, 0, "a b/c+d.txt",
		  "https://data.s3.eu-west-1.amazonaws.com/a%20b/c%2Bd.txt",
		  "data.s3.eu-west-1.amazonaws.com", "/a%20b/c%2Bd.txt", "eu-west-1" },
		{ S3_STORE_AWS, NULL, NULL, "my.dotted.bucket", 0, 0, "k",
		  "https://s3.us-east-1.amazonaws.com/my.dotted.bucket/k",
		  "s3.us-east-1.amazonaws.com", "/my.dotted.bucket/k", "us-east-1" },
		{ S3_STORE_AWS, NULL, "us-west-2", "data", 1, 0, NULL,
		  "https://s3.us-west-2.amazonaws.com/data?list-type=2&prefix=a%20b%2F",
		  "s3.us-west-2.amazonaws.com", "/data", "us-west-2" },
		{ S3_STORE_AWS, NULL, "eu-west-1", "data", 0, 0, NULL,
		  "https://data.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=a%20b%2F",
		  "data.s3.eu-west-1.amazonaws.com", "/", "eu-west-1" },
		{ S3_STORE_OSS, NULL, "cn-hangzhou", "ds", 0, 0, "数据/1.jpg",
		  "https://ds.oss-cn-hangzhou.aliyuncs.com/%E6%95%B0%E6%8D%AE/1.jpg",
		  "ds.oss-cn-hangzhou.aliyuncs.com", "/%E6%95%B0%E6%8D%AE/1.jpg", "cn-hangzhou" },
		{ S3_STORE_OSS, NULL, "cn-shanghai", "ds", 0, 1, "k",
		  "https://ds.oss-cn-shanghai-internal.aliyuncs.com/k",
		  "ds.oss-cn-shanghai-internal.aliyuncs.com", "/k", "cn-shanghai" },
		{ S3_STORE_GCS, NULL, NULL, "gbucket", 0, 0, "x/y",
		  "https://gbucket.storage.googleapis.com/x/y",
		  "gbucket.storage.googleapis.com", "/x/y", "auto" },
		{ S3_STORE_AWS, "http://[::1]:9000", NULL, "b", 0, 0, "k 1",
		  "http://[::1]:9000/b/k%201", "[::1]:9000", "/b/k%201", "us-east-1" },
		{ S3_STORE_AWS, "http://127.0.0.1:4740", "us-east-1", "b", 0, 0, "100%",
		  "http://127.0.0.1:4740/b/100%25", "127.0.0.1:4740", "/b/100%25", "us-east-1" },
		{ S3_STORE_AWS, "https://minio.lan:443/s3/", "home", "b", 1, 0, "k",
		  "https://minio.lan/s3/b/k", "minio.lan", "/s3/b/k", "home" },
		{ S3_STORE_AWS, "https://ceph.lan:8443", "default", "b", 0, 0, "k",
		  "https://b.ceph.lan:8443/k", "b.ceph.lan:8443", "/k", "default" },
	};
	struct creds_options o = { .anonymous = 1 };
	struct creds_chain *anon = NULL;
	char msg[256];

	CHECK_EQ_INT(creds_chain_new(&o, &anon, msg, sizeof(msg)), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_url_case(&cases[i], anon);
	creds_chain_destroy(anon);
}

/* SigV4 signs the Host header as sent: brackets and port included. */
static void t_sigv4_ipv6_host(void)
{
	struct s3_creds cr = { .access_key_id = "AKIDEXAMPLE",
			       .secret_access_key = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" };
	struct sigv4_input in = {
		.method = "GET", .host = "[::1]:9000", .canonical_uri = "/b/k",
		.payload_hash = SIGV4_EMPTY_SHA256, .region = "us-east-1", .service = "s3",
		.time_s = 1700000000,
	};
	struct sigv4_output so;

	CHECK_EQ_INT(sigv4_sign(&in, &cr, &so), 0);
	CHECK(so.canonical_request && strstr(so.canonical_request, "\nhost:[::1]:9000\n"));
	sigv4_output_cleanup(&so);
}

/* ---- region discovery --------------------------------------------------------- */

static void t_region_discovery(void)
{
	const char *body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error>"
		"<Code>AuthorizationHeaderMalformed</Code><Message>the region 'us-east-1' is "
		"wrong; expecting 'eu-central-1'</Message><Region>eu-central-1</Region>"
		"<RequestId>R1</RequestId></Error>";
	struct s3_req r;

	memset(&r, 0, sizeof(r));
	CHECK_EQ_INT(s3_error_parse(body, strlen(body), &r.err), 0);
	CHECK_STR(r.err.region, "eu-central-1");
	CHECK_STR(r.err.code, "AuthorizationHeaderMalformed");

	r.result = -EACCES;
	CHECK_STR(s3_discovered_region(&r), "eu-central-1");
	/* The header wins over the body (301 PermanentRedirect has no <Region>). */
	strcpy(r.bucket_region, "ap-southeast-2");
	CHECK_STR(s3_discovered_region(&r), "ap-southeast-2");
	/* Nothing to discover on success, and nothing that is not a region name. */
	r.result = 0;
	CHECK(s3_discovered_region(&r) == NULL);
	r.result = -EIO;
	strcpy(r.bucket_region, "evil.com/x");
	CHECK(s3_discovered_region(&r) == NULL);
	memset(&r, 0, sizeof(r));
	r.result = -EIO;
	CHECK(s3_discovered_region(&r) == NULL);
}

/* ---- ListObjects V1 ------------------------------------------------------------ */

#define V1HDR "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Name>b</Name>"

static int v1(const char *xml, struct s3_list_page *p)
{
	return s3_list_parse_v1(xml, strlen(xml), p);
}

static void t_v1_next_marker(void)
{
	struct s3_list_page p;

	CHECK_EQ_INT(v1(V1HDR "<Prefix></Prefix><Marker></Marker><NextMarker>d/b%2Bc</NextMarker>"
			"<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
			"<Contents><Key>d/a%20b</Key><Size>3</Size></Contents>"
			"<Contents><Key>d/b%2Bc</Key><Size>4</Size></Contents></ListBucketResult>", &p), 0);
	CHECK_EQ_INT(p.n_objects, 2);
	CHECK_EQ_INT(p.truncated, 1);
	CHECK_STR(p.next_token, "d/b+c");          /* decoded like the keys */
	if (p.n_objects == 2)
		CHECK_STR(p.objects[0].key, "d/a b");
	s3_list_page_cleanup(&p);
}

static void t_v1_no_next_marker(void)
{
	struct s3_list_page p;

	/* Without a delimiter servers may omit NextMarker: the last key. */
	CHECK_EQ_INT(v1(V1HDR "<Marker>a</Marker><IsTruncated>true</IsTruncated>"
			"<Contents><Key>k1</Key><Size>1</Size></Contents>"
			"<Contents><Key>k2</Key><Size>1</Size></Contents></ListBucketResult>", &p), 0);
	CHECK_STR(p.next_token, "k2");
	s3_list_page_cleanup(&p);

	/* With a delimiter: the greatest of keys and common prefixes. */
	CHECK_EQ_INT(v1(V1HDR "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
			"<Contents><Key>a.txt</Key><Size>1</Size></Contents>"
			"<CommonPrefixes><Prefix>p0001/</Prefix></CommonPrefixes>"
			"<CommonPrefixes><Prefix>p0002/</Prefix></CommonPrefixes>"
			"</ListBucketResult>", &p), 0);
	CHECK_EQ_INT(p.n_prefixes, 2);
	CHECK_STR(p.next_token, "p0002/");
	s3_list_page_cleanup(&p);

	/* A V2 token in a V1 answer is not a marker. */
	CHECK_EQ_INT(v1(V1HDR "<IsTruncated>true</IsTruncated><NextContinuationToken>T"
			"</NextContinuationToken><Contents><Key>z</Key><Size>1</Size></Contents>"
			"</ListBucketResult>", &p), 0);
	CHECK_STR(p.next_token, "z");
	s3_list_page_cleanup(&p);
}

static void t_v1_last_page_and_bad(void)
{
	struct s3_list_page p;

	CHECK_EQ_INT(v1(V1HDR "<NextMarker>x</NextMarker><IsTruncated>false</IsTruncated>"
			"<Contents><Key>x</Key><Size>1</Size></Contents></ListBucketResult>", &p), 0);
	CHECK(p.next_token == NULL);
	CHECK_EQ_INT(p.truncated, 0);
	s3_list_page_cleanup(&p);

	/* Truncated with nothing to continue from: rejected, not looped on. */
	CHECK_EQ_INT(v1(V1HDR "<IsTruncated>true</IsTruncated></ListBucketResult>", &p), -EIO);
	CHECK_EQ_INT(v1(V1HDR "<Contents><Key>x</Key><Size>1</Size></Contents></ListBucketResult>",
			&p), -EIO);
	CHECK_EQ_INT(v1(V1HDR "<NextMarker>%ZZ</NextMarker><EncodingType>url</EncodingType>"
			"<IsTruncated>true</IsTruncated></ListBucketResult>", &p), -EIO);
	/* V2 parsing is unchanged: a truncated page without a token is refused there. */
	{
		const char *x = V1HDR "<NextMarker>x</NextMarker><IsTruncated>true</IsTruncated>"
			"<Contents><Key>x</Key><Size>1</Size></Contents></ListBucketResult>";

		CHECK_EQ_INT(s3_list_parse(x, strlen(x), &p), -EIO);
	}
}

/* The receive buffer of large GETs: 256 KiB while all connections' buffers
 * fit 16 MiB, less above, never under curl's own 16 KiB. */
static void t_get_recv_buf_table(void)
{
	static const struct { int conns; long want; } cases[] = {
		{ 0, 256 << 10 }, { 1, 256 << 10 }, { 32, 256 << 10 }, { 64, 256 << 10 },
		{ 65, (16 << 20) / 65 }, { 128, 128 << 10 }, { 1024, 16 << 10 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		long got = s3_get_recv_buf(cases[i].conns);

		CHECK_EQ_INT(got, cases[i].want);
		CHECK(cases[i].conns < 2 || got * cases[i].conns <= S3_RECV_BUF_TOTAL ||
		      got == S3_RECV_BUF_MIN);
	}
}

static const struct test tests[] = {
	TEST(t_default_endpoints),
	TEST(t_path_style_rules),
	TEST(t_parse_endpoint),
	TEST(t_request_urls),
	TEST(t_sigv4_ipv6_host),
	TEST(t_region_discovery),
	TEST(t_v1_next_marker),
	TEST(t_v1_no_next_marker),
	TEST(t_v1_last_page_and_bad),
	TEST(t_get_recv_buf_table),
	{0},
};

int main(void)
{
	return harness_run("s3_url", tests);
}
