/*
 * Unit tests for the heap gauges and the periodic trim (src/util/heap.c),
 * under the daemon's malloc settings: buffers freed below a live one stay
 * resident until heap_tick's trim gives their pages back.
 * Skipped where malloc is not glibc's (ASan, valgrind): they bring their own.
 */
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/heap.h"
#include "feedfs/stats.h"
#include "harness.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define OWN_MALLOC 1
#else
#define OWN_MALLOC 0
#endif

static int glibc_malloc(void)
{
	/* valgrind replaces malloc too; its mallinfo2 reports nothing in use. */
	char *volatile p = malloc(1 << 20);
	struct heap_stats st;

	if (p)
		p[0] = 1;
	heap_get_stats(&st);
	free(p);
	return !OWN_MALLOC && st.heap_in_use_bytes >= (1 << 20);
}

static void t_trim_gives_free_pages_back(void)
{
	enum { N = 48, SZ = 1 << 20 };
	char *bufs[N];
	struct heap_stats before, after;

	if (!glibc_malloc()) {
		printf("    skip: malloc is not glibc's here\n");
		return;
	}
	mallopt(M_ARENA_MAX, 1);
	mallopt(M_MMAP_THRESHOLD, 32 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	for (int i = 0; i < N; i++) {
		bufs[i] = malloc(SZ);
		CHECK(bufs[i] != NULL);
		memset(bufs[i], 0x5a, SZ);
	}
	for (int i = 0; i < N - 1; i++)     /* the last one pins the top */
		free(bufs[i]);
	heap_get_stats(&before);
	CHECK(before.heap_free_bytes >= (uint64_t)(N - 2) * SZ);
	for (int i = 1; i < HEAP_TRIM_EVERY_S; i++)
		heap_tick();
	heap_get_stats(&after);
	CHECK_EQ_INT(after.trims, 0);       /* not before its period */
	heap_tick();
	heap_get_stats(&after);
	CHECK_EQ_INT(after.trims, 1);
	CHECK_EQ_INT(after.trimmed, 1);
	CHECK(after.rss_bytes + (uint64_t)(N - 8) * SZ <= before.rss_bytes);
	CHECK(bufs[N - 1][SZ - 1] == 0x5a);
	free(bufs[N - 1]);
	/* Less than HEAP_TRIM_MIN_FREE free: no call at all. */
	malloc_trim(0);
	for (int i = 0; i < HEAP_TRIM_EVERY_S; i++)
		heap_tick();
	heap_get_stats(&after);
	CHECK_EQ_INT(after.trims, 1);
}

static void t_process_group_reads_the_gauges(void)
{
	char snap[sizeof(struct heap_stats)];
	const struct stats_group *g = &process_stats_group;

	CHECK_EQ_INT(g->snapshot_size, sizeof(struct heap_stats));
	g->snapshot(heap_stats_obj(), snap);
	CHECK(((struct heap_stats *)snap)->rss_bytes > 0);
	CHECK_STR(g->fields[0].key, "rss_bytes");
}

static const struct test tests[] = {
	TEST(t_trim_gives_free_pages_back),
	TEST(t_process_group_reads_the_gauges),
	{ NULL, NULL },
};

int main(void)
{
	return harness_run("heap", tests);
}
