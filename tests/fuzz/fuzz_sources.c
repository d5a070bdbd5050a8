/*
 * fuzz_sources — the --sources file (src/sources.c). Input: the file's text.
 * It parses into 1..SOURCES_MAX sources, each with a bucket and a name that
 * is a file name, unique; or it is refused with one line (never empty,
 * never a newline in it).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/sources.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct options base;
	static int ready;
	struct source_spec *s = NULL;
	size_t n = 0;
	char msg[1024];
	int e;

	if (!ready) {
		char *argv[] = { "feedfs", "--region", "us-east-1", "b", "/m", NULL };

		setenv("AWS_CONFIG_FILE", "/nonexistent/fuzz", 1);
		if (options_parse(5, argv, &base, msg, sizeof(msg)) != 0)
			abort();
		ready = 1;
	}
	msg[0] = '\0';
	e = sources_parse((const char *)data, size, "F", &base, &s, &n, msg, sizeof(msg));
	if (e < 0) {
		if (e == -EINVAL && (!msg[0] || strchr(msg, '\n')))
			abort();
		return 0;
	}
	if (n == 0 || n > SOURCES_MAX)
		abort();
	for (size_t i = 0; i < n; i++) {
		if (!s[i].o.bucket || !s[i].o.bucket[0] || !s[i].name[0] || strchr(s[i].name, '/') ||
		    strlen(s[i].name) > 255 || !strcmp(s[i].name, ".") || !strcmp(s[i].name, ".."))
			abort();
		for (size_t j = 0; j < i; j++)
			if (strcmp(s[i].name, s[j].name) == 0)
				abort();
	}
	sources_free(s, n);
	return 0;
}
