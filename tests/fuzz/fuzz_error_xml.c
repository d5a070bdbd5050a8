/*
 * fuzz_error_xml — S3 <Error> documents (src/s3/error.c), and the errno table
 * with whatever code the document carried.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/s3/s3_i.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct s3_error_info info;
	int retry = 0, e;
	long status;

	if (size < 2)
		return 0;
	status = 300 + (data[0] % 250);
	memset(&info, 0x5a, sizeof(info));
	if (s3_error_parse((const char *)data + 1, size - 1, &info) == 0) {
		if (!memchr(info.code, '\0', sizeof(info.code)) ||
		    !memchr(info.message, '\0', sizeof(info.message)) ||
		    !memchr(info.request_id, '\0', sizeof(info.request_id)) ||
		    !memchr(info.region, '\0', sizeof(info.region)))
			abort();
		e = s3_error_errno(status, info.code, &retry);
		if (e >= 0)
			abort();
	}
	return 0;
}
