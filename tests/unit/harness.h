/*
 * harness — a tiny table-friendly unit test harness.
 *
 *   static void t_parse(void) { CHECK_EQ_INT(f(1), 2); CHECK_STR(s, "x"); }
 *   static const struct test tests[] = { TEST(t_parse), {0} };
 *   int main(void) { return harness_run("util", tests); }
 *
 * Each test function runs once; a failed CHECK records the failure with file and
 * line and the test goes on. The run ends with one line the CI recognises:
 *   "util: N passed, N failed"
 * and exits non-zero when anything failed.
 */
#ifndef FEEDFS_TEST_HARNESS_H
#define FEEDFS_TEST_HARNESS_H

#include <stdio.h>
#include <string.h>
#include <stdint.h>

struct test {
	const char *name;
	void (*fn)(void);
};
#define TEST(f) { #f, f }

extern int harness_failed_checks;
void harness_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int harness_run(const char *suite, const struct test *tests);

#define CHECK(c) do { if (!(c)) harness_fail(__FILE__, __LINE__, "CHECK(%s)", #c); } while (0)
#define CHECK_EQ_INT(a, b) do { long long _a = (long long)(a), _b = (long long)(b); \
	if (_a != _b) harness_fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
				   #a, _a, #b, _b); } while (0)
#define CHECK_STR(a, b) do { const char *_a = (a), *_b = (b); \
	if (!_a || !_b || strcmp(_a, _b) != 0) harness_fail(__FILE__, __LINE__, \
		"%s == \"%s\", expected \"%s\"", #a, _a ? _a : "(null)", _b ? _b : "(null)"); } while (0)
#define CHECK_MEM(a, b, n) do { if (memcmp((a), (b), (n)) != 0) \
	harness_fail(__FILE__, __LINE__, "memory %s differs from %s (%zu bytes)", #a, #b, (size_t)(n)); } while (0)

#endif
