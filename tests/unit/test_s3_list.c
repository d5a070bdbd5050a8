/*
 * test_s3_list — ListObjectsV2 parsing and the S3 error -> errno table.
 */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>

#include "../../src/s3/s3_i.h"

#define HDR "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" \
	"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"

static int parse(const char *xml, struct s3_list_page *p)
{
	return s3_list_parse(xml, strlen(xml), p);
}

static void t_plain(void)
{
	struct s3_list_page p;
	const char *xml = HDR "<Name>b</Name><Prefix></Prefix><KeyCount>2</KeyCount>"
		"<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
		"<Contents><Key>a+b%25.txt</Key><LastModified>2024-01-02T03:04:05.678Z</LastModified>"
		"<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>11</Size>"
		"<StorageClass>STANDARD</StorageClass></Contents>"
		"<Contents><Key>数据/图 1.jpg</Key><LastModified>2024-01-02T03:04:05Z</LastModified>"
		"<ETag>\"abc-2\"</ETag><Size>18446744073709551615</Size></Contents>"
		"</ListBucketResult>";

	CHECK_EQ_INT(parse(xml, &p), 0);
	CHECK_EQ_INT(p.n_objects, 2);
	CHECK_EQ_INT(p.truncated, 0);
	CHECK(p.next_token == NULL);
	if (p.n_objects == 2) {
		/* No EncodingType in the response: raw, '+' and %25 kept. */
		CHECK_STR(p.objects[0].key, "a+b%25.txt");
		CHECK_EQ_INT(p.objects[0].key_len, 10);
		CHECK_EQ_INT(p.objects[0].size, 11);
		CHECK_EQ_INT(p.objects[0].mtime_ms, 1704164645678LL);
		CHECK_STR(p.objects[0].etag, "\"9b2cf535f27731c974343645a3985328\"");
		CHECK_STR(p.objects[1].key, "数据/图 1.jpg");
		CHECK(p.objects[1].size == UINT64_MAX);
		CHECK_EQ_INT(p.objects[1].mtime_ms, 1704164645000LL);
		CHECK_STR(p.objects[1].etag, "\"abc-2\"");
	}
	s3_list_page_cleanup(&p);
}

static void t_url_encoded(void)
{
	struct s3_list_page p;
	const char *xml = HDR "<Name>b</Name><Prefix>d%2F</Prefix><Delimiter>%2F</Delimiter>"
		"<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>"
		"<Contents><Key>d/a%2Bb%2525+c.txt</Key><Size>1</Size>"
		"<LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>\"e\"</ETag></Contents>"
		"<Contents><Key>d/%E6%95%B0%E6%8D%AE</Key><Size>0</Size>"
		"<LastModified>2024-01-02T03:04:05.000Z</LastModified><ETag>\"e\"</ETag></Contents>"
		"<Contents><Key>d/nul%00in</Key><Size>2</Size></Contents>"
		"<CommonPrefixes><Prefix>d/sub+dir%2F</Prefix></CommonPrefixes>"
		"<CommonPrefixes><Prefix>d/%E5%9B%BE/</Prefix></CommonPrefixes>"
		"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
		"<KeyCount>5</KeyCount><MaxKeys>5</MaxKeys></ListBucketResult>";

	CHECK_EQ_INT(parse(xml, &p), 0);
	CHECK_EQ_INT(p.n_objects, 3);
	CHECK_EQ_INT(p.n_prefixes, 2);
	CHECK_EQ_INT(p.truncated, 1);
	CHECK_STR(p.next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	if (p.n_objects == 3 && p.n_prefixes == 2) {
		CHECK_STR(p.objects[0].key, "d/a+b%25 c.txt");
		CHECK_STR(p.objects[1].key, "d/数据");
		CHECK_EQ_INT(p.objects[2].key_len, 8);
		CHECK_MEM(p.objects[2].key, "d/nul\0in", 8);
		CHECK_STR(p.prefixes[0], "d/sub dir/");
		CHECK_EQ_INT(p.prefix_lens[0], 10);
		CHECK_STR(p.prefixes[1], "d/图/");
	}
	s3_list_page_cleanup(&p);
}

static void t_empty(void)
{
	struct s3_list_page p;

	CHECK_EQ_INT(parse(HDR "<Name>b</Name><Prefix>none/</Prefix><KeyCount>0</KeyCount>"
			   "<MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
			   "</ListBucketResult>", &p), 0);
	CHECK_EQ_INT(p.n_objects, 0);
	CHECK_EQ_INT(p.n_prefixes, 0);
	CHECK_EQ_INT(p.truncated, 0);
	s3_list_page_cleanup(&p);
}

static void t_malformed(void)
{
	static const char *bad[] = {
		"",
		"not xml at all",
		HDR "<IsTruncated>false</IsTruncated>",                   /* unterminated */
		"<Error><Code>NoSuchBucket</Code></Error>",              /* wrong root */
		HDR "<IsTruncated>false</IsTruncated><Contents><Size>1</Size></Contents></ListBucketResult>",
		HDR "<IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>x1</Size></Contents></ListBucketResult>",
		HDR "<IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
		HDR "<IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents></ListBucketResult>",
		HDR "<IsTruncated>false</IsTruncated><Contents><Key>a</Key><Size>1</Size>"
		    "<LastModified>yesterday</LastModified></Contents></ListBucketResult>",
		HDR "<IsTruncated>true</IsTruncated><Contents><Key>a</Key><Size>1</Size></Contents></ListBucketResult>",
		HDR "<IsTruncated>maybe</IsTruncated></ListBucketResult>",
		HDR "</ListBucketResult>",                                /* no IsTruncated */
		HDR "<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
		    "<Contents><Key>a%G1</Key><Size>1</Size></Contents></ListBucketResult>",
		HDR "<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
		    "<Contents><Key>a%2</Key><Size>1</Size></Contents></ListBucketResult>",
		HDR "<IsTruncated>false</IsTruncated><CommonPrefixes></CommonPrefixes></ListBucketResult>",
		"<!DOCTYPE x [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><ListBucketResult>"
		    "<IsTruncated>false</IsTruncated><Contents><Key>&e;</Key><Size>1</Size>"
		    "</Contents></ListBucketResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_list_page p;
		int r = parse(bad[i], &p);

		if (r != -EIO)
			harness_fail(__FILE__, __LINE__, "case %zu: %d, expected -EIO", i, r);
		CHECK(p.objects == NULL && p.n_objects == 0 && p.next_token == NULL);
	}
}

/* EncodingType may come after the keys it describes: they are decoded all the same. */
static void t_encoding_after_keys(void)
{
	struct s3_list_page p;
	const char *xml = HDR "<IsTruncated>false</IsTruncated>"
		"<Contents><Key>a%2Bb+c</Key><Size>1</Size></Contents>"
		"<CommonPrefixes><Prefix>d%2F</Prefix></CommonPrefixes>"
		"<EncodingType>url</EncodingType></ListBucketResult>";

	CHECK_EQ_INT(parse(xml, &p), 0);
	CHECK_EQ_INT(p.n_objects, 1);
	CHECK_EQ_INT(p.n_prefixes, 1);
	if (p.n_objects == 1 && p.n_prefixes == 1) {
		CHECK_STR(p.objects[0].key, "a+b c");
		CHECK_EQ_INT(p.objects[0].key_len, 5);
		CHECK_STR(p.prefixes[0], "d/");
		CHECK_EQ_INT(p.prefix_lens[0], 2);
	}
	s3_list_page_cleanup(&p);
}

/* A key's text may come in pieces: entities, character references, CDATA. */
static void t_text_in_pieces(void)
{
	struct s3_list_page p;
	const char *xml = HDR "<IsTruncated>false</IsTruncated>"
		"<Contents><Key>a&amp;b<![CDATA[<c>]]>&#x1F600;&lt;</Key><Size>7</Size>"
		"<ETag>&quot;x&quot;</ETag></Contents></ListBucketResult>";

	CHECK_EQ_INT(parse(xml, &p), 0);
	CHECK_EQ_INT(p.n_objects, 1);
	if (p.n_objects == 1) {
		CHECK_STR(p.objects[0].key, "a&b<c>\xf0\x9f\x98\x80<");
		CHECK_STR(p.objects[0].etag, "\"x\"");
	}
	s3_list_page_cleanup(&p);
}

/* Only the schema's places count: the result's own <Prefix> is no common
 * prefix, an <Owner>'s children are not the object's, and a page holds as
 * many entries as it brings. */
static void t_schema_places_and_many(void)
{
	char *xml = malloc(400000), *o = xml;
	struct s3_list_page p;

	o += sprintf(o, HDR "<Name>b</Name><Prefix>top/</Prefix><IsTruncated>true</IsTruncated>");
	for (int i = 0; i < 2500; i++)
		o += sprintf(o, "<Contents><Key>top/k%05d</Key><Owner><ID>me</ID><Key>no</Key>"
			     "<Size>9</Size></Owner><Size>%d</Size></Contents>", i, i);
	for (int i = 0; i < 300; i++)
		o += sprintf(o, "<CommonPrefixes><Prefix>top/d%03d/</Prefix></CommonPrefixes>", i);
	sprintf(o, "<NextContinuationToken>t</NextContinuationToken></ListBucketResult>");
	CHECK_EQ_INT(parse(xml, &p), 0);
	CHECK_EQ_INT(p.n_objects, 2500);
	CHECK_EQ_INT(p.n_prefixes, 300);
	CHECK_STR(p.next_token, "t");
	for (size_t i = 0; i < p.n_objects && i < 2500; i++) {
		char want[32];

		snprintf(want, sizeof(want), "top/k%05zu", i);
		if (strcmp(p.objects[i].key, want) != 0 || p.objects[i].size != i) {
			harness_fail(__FILE__, __LINE__, "entry %zu: %s %llu", i, p.objects[i].key,
				     (unsigned long long)p.objects[i].size);
			break;
		}
	}
	if (p.n_prefixes == 300) {
		CHECK_STR(p.prefixes[0], "top/d000/");
		CHECK_STR(p.prefixes[299], "top/d299/");
		CHECK_EQ_INT(p.prefix_lens[299], 9);
	}
	s3_list_page_cleanup(&p);
	free(xml);
}

/* A DTD, even one that only defines an internal entity, is refused. */
static void t_dtd_refused(void)
{
	struct s3_list_page p;

	CHECK_EQ_INT(parse("<!DOCTYPE ListBucketResult [<!ENTITY e \"v\">]><ListBucketResult>"
			   "<IsTruncated>false</IsTruncated><Contents><Key>&e;</Key><Size>1</Size>"
			   "</Contents></ListBucketResult>", &p), -EIO);
	CHECK(p.objects == NULL && p.n_objects == 0);
}

struct err_case {
	long status;
	const char *code;
	int err, retry;
};

static void t_error_table(void)
{
	static const struct err_case cases[] = {
		{ 404, "NoSuchKey", -ENOENT, 0 },
		{ 404, "NoSuchBucket", -ENOENT, 0 },
		{ 403, "AccessDenied", -EACCES, 0 },
		{ 403, "InvalidAccessKeyId", -EACCES, 0 },
		{ 403, "SignatureDoesNotMatch", -EACCES, 0 },
		{ 403, "ExpiredToken", -EACCES, 0 },
		{ 400, "ExpiredToken", -EACCES, 0 },
		{ 503, "SlowDown", -EAGAIN, 1 },
		{ 500, "InternalError", -EIO, 1 },
		{ 412, "PreconditionFailed", -ESTALE, 0 },
		{ 416, "InvalidRange", -EINVAL, 0 },
		{ 400, "RequestTimeout", -ETIMEDOUT, 1 },
		/* unknown or missing codes: by status */
		{ 404, "", -ENOENT, 0 },
		{ 404, NULL, -ENOENT, 0 },
		{ 403, "SomethingNew", -EACCES, 0 },
		{ 412, NULL, -ESTALE, 0 },
		{ 416, NULL, -EINVAL, 0 },
		{ 429, NULL, -EAGAIN, 1 },
		{ 500, "Weird", -EIO, 1 },
		{ 502, NULL, -EIO, 1 },
		{ 503, NULL, -EIO, 1 },
		{ 400, "Weird", -EINVAL, 0 },
		{ 409, NULL, -EIO, 0 },
		{ 301, "PermanentRedirect", -EIO, 0 },
		{ 0, NULL, -EIO, 0 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int retry = -1, e = s3_error_errno(cases[i].status, cases[i].code, &retry);

		if (e != cases[i].err || retry != cases[i].retry)
			harness_fail(__FILE__, __LINE__, "%ld %s: errno %d retry %d, expected %d %d",
				     cases[i].status, cases[i].code ? cases[i].code : "(null)",
				     e, retry, cases[i].err, cases[i].retry);
	}
}

static void t_error_parse(void)
{
	struct s3_error_info ei;
	const char *xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>NoSuchKey</Code>"
		"<Message>The specified key does not exist.</Message><Key>a b</Key>"
		"<RequestId>4442587FB7D0A2F9</RequestId><HostId>xyz</HostId></Error>";

	CHECK_EQ_INT(s3_error_parse(xml, strlen(xml), &ei), 0);
	CHECK_STR(ei.code, "NoSuchKey");
	CHECK_STR(ei.message, "The specified key does not exist.");
	CHECK_STR(ei.request_id, "4442587FB7D0A2F9");
	CHECK_EQ_INT(s3_error_parse("<html>502</html>", 16, &ei), -EIO);
	CHECK_STR(ei.code, "");
	CHECK_EQ_INT(s3_error_parse("<Error><Code>x", 14, &ei), -EIO);
	CHECK_EQ_INT(s3_error_parse(NULL, 0, &ei), -EIO);
}

static const struct test tests[] = {
	TEST(t_plain), TEST(t_url_encoded), TEST(t_empty), TEST(t_malformed),
	TEST(t_encoding_after_keys), TEST(t_text_in_pieces), TEST(t_schema_places_and_many),
	TEST(t_dtd_refused),
	TEST(t_error_table), TEST(t_error_parse), { 0 },
};

int main(void)
{
	return harness_run("s3_list", tests);
}
