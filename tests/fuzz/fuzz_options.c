/*
 * fuzz_options — the option value parsers (src/util/util.c): sizes, seconds,
 * unsigned numbers, and URI encoding/decoding round trips, plus the endpoint
 * URL splitter of src/s3/client.c. Input: byte 0 picks the parser, the rest
 * is the NUL-terminated argument.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/util.h"
#include "../../src/s3/s3_i.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
	switch (data[0] % 6) {
	case 0: {
		uint64_t v;

		(void)util_parse_size(s, &v);
		break;
	}
	case 1: {
		int64_t ms;

		if (util_parse_seconds_ms(s, &ms) == 0 && ms < 0 && !strchr(s, '-'))
			abort();
		break;
	}
	case 2: {
		uint32_t v;

		(void)util_parse_u32(s, data[0] & 0x80 ? 8 : 10, &v);
		break;
	}
	case 3: {
		/* encode then decode gives the bytes back (NULs included) */
		char *enc = util_uri_encode((const char *)data + 1, n, data[0] & 0x80);
		size_t dl = 0;
		char *dec = enc ? util_uri_decode(enc, strlen(enc), &dl) : NULL;

		if (enc && (!dec || dl != n || memcmp(dec, data + 1, n) != 0))
			abort();
		free(enc);
		free(dec);
		break;
	}
	case 4: {
		size_t dl;
		char *dec = s3_url_decode((const char *)data + 1, n, &dl);

		if (dec && dec[dl] != '\0')
			abort();
		free(dec);
		dec = util_uri_decode((const char *)data + 1, n, &dl);
		free(dec);
		break;
	}
	case 5: {
		char *scheme = NULL, *auth = NULL, *base = NULL;
		int64_t ms;

		if (s3_parse_endpoint(s, &scheme, &auth, &base) == 0) {
			free(scheme);
			free(auth);
			free(base);
		}
		(void)util_parse_iso8601_ms(s, &ms);
		break;
	}
	}
	free(s);
	return 0;
}
