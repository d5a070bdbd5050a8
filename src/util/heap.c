/*
 * heap.c — gauges of the malloc heap and the periodic trim (feedfs/heap.h).
 */
#include "feedfs/heap.h"

#include <malloc.h>
#include <stdio.h>
#include <unistd.h>

#include "feedfs/stats.h"

static struct {
	unsigned ticks;
	uint64_t trims, trimmed;
} heap;

void heap_tick(void)
{
	struct mallinfo2 mi;

	if (++heap.ticks % HEAP_TRIM_EVERY_S)
		return;
	mi = mallinfo2();
	if (mi.fordblks < HEAP_TRIM_MIN_FREE)
		return;
	__atomic_add_fetch(&heap.trims, 1, __ATOMIC_RELAXED);
	if (malloc_trim(0))
		__atomic_add_fetch(&heap.trimmed, 1, __ATOMIC_RELAXED);
}

static uint64_t rss_bytes(void)
{
	unsigned long size, resident;
	FILE *f = fopen("/proc/self/statm", "re");
	int n;

	if (!f)
		return 0;
	n = fscanf(f, "%lu %lu", &size, &resident);
	fclose(f);
	return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

void heap_get_stats(struct heap_stats *out)
{
	struct mallinfo2 mi = mallinfo2();

	out->rss_bytes = rss_bytes();
	out->heap_in_use_bytes = mi.uordblks + mi.hblkhd;
	out->heap_free_bytes = mi.fordblks;
	out->trims = __atomic_load_n(&heap.trims, __ATOMIC_RELAXED);
	out->trimmed = __atomic_load_n(&heap.trimmed, __ATOMIC_RELAXED);
}

void *heap_stats_obj(void)
{
	return &heap;
}

static void process_snapshot(void *obj, void *out)
{
	(void)obj;
	heap_get_stats(out);
}

#define ROW_G(f, metric, help) STATS_GAUGE(struct heap_stats, f, metric, "", help)
#define ROW_C(f, metric, help) STATS_COUNTER(struct heap_stats, f, metric, "", help)
static const struct stats_field process_fields[] = {
	ROW_G(rss_bytes, "process_resident_bytes", "The serving process's resident memory."),
	ROW_G(heap_in_use_bytes, "heap_in_use_bytes", "Bytes malloc has given out and not had back."),
	ROW_G(heap_free_bytes, "heap_free_bytes",
	      "Bytes free inside malloc's arena (resident until trimmed)."),
	ROW_C(trims, "heap_trims_total", "Periodic malloc_trim calls (free pages back to the kernel)."),
	ROW_C(trimmed, "heap_trims_released_total", "Trims that gave pages back."),
};
#undef ROW_G
#undef ROW_C

const struct stats_group process_stats_group = {
	.name = "process",
	.fields = process_fields,
	.n_fields = sizeof(process_fields) / sizeof(process_fields[0]),
	.snapshot_size = sizeof(struct heap_stats),
	.snapshot = process_snapshot,
};
