/*
 * fuzz_creds — the credential parsers of src/creds/: shared config/credentials
 * INI files, the JSON DOM and the credential JSON of IMDS / containers /
 * credential_process, Aliyun STS JSON, STS AssumeRoleWithWebIdentity XML, and
 * ISO 8601 expirations. Input: byte 0 picks the parser, the rest is the text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/creds.h"
#include "feedfs/util.h"
#include "../../src/creds/creds_i.h"

static void check_creds(int e, struct s3_creds *cr)
{
	if (e == 0 && (!cr->access_key_id || !cr->secret_access_key))
		abort();
	creds_cleanup(cr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char reason[CREDS_REASON_MAX];
	struct s3_creds cr;
	char *s;
	size_t n;

	if (size < 1)
		return 0;
	n = size - 1;
	s = malloc(n + 1);
	if (!s)
		return 0;
	memcpy(s, data + 1, n);
	s[n] = '\0';
	memset(&cr, 0, sizeof(cr));
	reason[0] = '\0';
	switch (data[0] % 7) {
	case 0:
	case 1: {
		struct ini_file f;

		memset(&f, 0, sizeof(f));
		if (creds_ini_parse(s, data[0] % 7, &f, reason) == 0) {
			const struct ini_profile *p = creds_ini_profile(&f, "default");

			if (p)
				(void)creds_ini_get(p, "aws_access_key_id");
			creds_ini_free(&f);
		}
		break;
	}
	case 2: {
		struct json_value v;

		memset(&v, 0, sizeof(v));
		if (json_parse(s, n, &v) == 0) {
			if (v.type == JSON_OBJECT)
				check_creds(creds_from_aws_json(&v, &cr, reason), &cr);
			json_free(&v);
		}
		break;
	}
	case 3:
		check_creds(creds_parse_process_json(s, n, &cr, reason), &cr);
		break;
	case 4:
		check_creds(creds_parse_aliyun_sts_json(s, n, &cr, reason), &cr);
		break;
	case 5:
		check_creds(creds_parse_sts_xml(s, n, &cr, reason), &cr);
		break;
	case 6: {
		int64_t ms;

		(void)util_parse_iso8601_ms(s, &ms);
		break;
	}
	}
	if (!memchr(reason, '\0', sizeof(reason)))
		abort();
	free(s);
	return 0;
}
