/*
 * fuzz_list_xml — ListObjectsV2 and V1 response bodies (src/s3/list.c).
 * The first byte picks the parser; the rest is the body. A parse must either
 * fail cleanly (empty page) or give a page whose every key and prefix is within
 * the lengths it claims.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/s3/s3_i.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3_list_page p;
	int e;

	if (size < 1)
		return 0;
	memset(&p, 0, sizeof(p));
	if (data[0] & 1)
		e = s3_list_parse_v1((const char *)data + 1, size - 1, &p);
	else
		e = s3_list_parse((const char *)data + 1, size - 1, &p);
	if (e < 0) {
		if (p.n_objects || p.n_prefixes || p.objects || p.prefixes || p.next_token)
			abort();        /* "nothing leaks, *out is left empty" */
		return 0;
	}
	for (size_t i = 0; i < p.n_objects; i++) {
		volatile char c = p.objects[i].key[p.objects[i].key_len];

		if (c != '\0' || memchr(p.objects[i].etag, '\0', S3_ETAG_MAX) == NULL)
			abort();
	}
	for (size_t i = 0; i < p.n_prefixes; i++)
		if (p.prefixes[i][p.prefix_lens[i]] != '\0')
			abort();
	s3_list_page_cleanup(&p);
	return 0;
}
