#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>

int harness_failed_checks;

void harness_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	harness_failed_checks++;
	fprintf(stderr, "  FAIL %s:%d: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int harness_run(const char *suite, const struct test *tests)
{
	int passed = 0, failed = 0;

	for (const struct test *t = tests; t->name; t++) {
		int before = harness_failed_checks;

		t->fn();
		if (harness_failed_checks == before) {
			passed++;
			printf("  ok   %s\n", t->name);
		} else {
			failed++;
			printf("  FAIL %s\n", t->name);
		}
	}
	printf("%s: %d passed, %d failed\n", suite, passed, failed);
	return failed ? 1 : 0;
}
