/*
 * fuzz_options — the option value parsers (src/util/util.c): sizes, seconds,
 * unsigned numbers, and URI encoding/decoding round trips, plus the endpoint
 * URL splitter of src/s3/client.c. Input: byte 0 picks the parser, the rest
 * is the NUL-terminated argument.
 *
 * When (byte 0 & 0x7f) >= 0x60, the whole command line parser instead
 * (options_parse, src/options.c): the rest, split at '\n', is argv after
 * "feedfs". It must return one of its documented codes, with a one-line
 * message on -EINVAL, leave a well-formed prefix, and leak nothing after
 * options_free; every input is a fresh call in the same process, so getopt's
 * reset is exercised too.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/options.h"
#include "feedfs/util.h"
#include "../../src/s3/s3_i.h"

#define FUZZ_ARGS_MAX 32

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	/* Parse reads the profile's region: keep it off the machine's files. */
	setenv("AWS_CONFIG_FILE", "/nonexistent/fuzz-config", 1);
	unsetenv("AWS_REGION");
	unsetenv("AWS_DEFAULT_REGION");
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_PROFILE");
	return 0;
}

static void fuzz_command_line(const uint8_t *data, size_t n)
{
	char *text = malloc(n + 1), *argv[FUZZ_ARGS_MAX + 2], msg[512];
	struct options o;
	int argc = 0, e;
	size_t i, start = 0;

	if (!text)
		return;
	memcpy(text, data, n);
	text[n] = '\0';
	argv[argc++] = "feedfs";
	for (i = 0; i <= n && argc <= FUZZ_ARGS_MAX; i++) {
		if (i == n || text[i] == '\n') {
			text[i] = '\0';
			argv[argc++] = text + start;
			start = i + 1;
		}
	}
	argv[argc] = NULL;
	e = options_parse(argc, argv, &o, msg, sizeof(msg));
	if (e != 0 && e != OPTIONS_HELP && e != OPTIONS_VERSION && e != -EINVAL && e != -ENOMEM)
		abort();
	if (e == -EINVAL && (!msg[0] || strchr(msg, '\n')))
		abort();
	if (e == 0 && !o.print_creds && (!o.bucket || !o.bucket[0] || !o.prefix))
		abort();
	if (e == 0 && o.prefix && o.prefix[0] && o.prefix[strlen(o.prefix) - 1] != '/')
		abort();
	if (e == 0 && o.metrics_host && o.metrics_port == 0)
		abort();
	options_free(&o);
	free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s;
	size_t n;

	if (size < 1)
		return 0;
	if ((data[0] & 0x7f) >= 0x60) {
		fuzz_command_line(data + 1, size - 1);
		return 0;
	}
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
