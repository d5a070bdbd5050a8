/*
 * prefetch stats — the memory budget's gauges and across-file readahead's
 * counters as tables (stats.h).
 */
#include "feedfs/ahead.h"
#include "feedfs/prefetch.h"
#include "feedfs/stats.h"

struct budget_snap {
	uint64_t used_bytes, peak_bytes, max_bytes;
};

static void budget_snapshot(void *obj, void *out)
{
	struct budget_snap *s = out;

	s->used_bytes = rd_budget_used(obj);
	s->peak_bytes = rd_budget_peak(obj);
	s->max_bytes = rd_budget_max(obj);
}

#define ROW_B(f, metric, help) STATS_GAUGE(struct budget_snap, f, metric, "", help)
static const struct stats_field budget_fields[] = {
	ROW_B(used_bytes, "memory_budget_used_bytes",
	      "Read buffers charged to the memory budget now (in flight and held)."),
	ROW_B(peak_bytes, "memory_budget_peak_bytes", "The most ever charged at once."),
	ROW_B(max_bytes, "memory_budget_bytes",
	      "The read buffers' budget: --max-memory less the cache's io buffers."),
};
#undef ROW_B

const struct stats_group budget_stats_group = {
	.name = "budget",
	.fields = budget_fields,
	.n_fields = sizeof(budget_fields) / sizeof(budget_fields[0]),
	.snapshot_size = sizeof(struct budget_snap),
	.snapshot = budget_snapshot,
};

static void ahead_snapshot(void *obj, void *out)
{
	rd_ahead_get_stats(obj, out);
}

#define ROW_A(f, metric, help) STATS_COUNTER(struct rd_ahead_stats, f, metric, "", help)
static const struct stats_field ahead_fields[] = {
	ROW_A(wanted, "ahead_wanted_total", "Files asked for ahead of their open."),
	ROW_A(issued, "ahead_fetches_total", "Whole-file GETs started ahead of an open."),
	ROW_A(hits, "ahead_hits_total", "Reads answered from a file fetched ahead."),
	ROW_A(joined, "ahead_joined_total", "Reads that joined a fetch ahead still in flight."),
	ROW_A(dropped, "ahead_dropped_total", "Files fetched ahead and freed unused."),
	ROW_A(failed, "ahead_failed_total", "Fetches ahead that failed."),
	ROW_A(skipped, "ahead_skipped_total", "Files not fetched ahead for lack of room or budget."),
};
#undef ROW_A

const struct stats_group ahead_stats_group = {
	.name = "ahead",
	.fields = ahead_fields,
	.n_fields = sizeof(ahead_fields) / sizeof(ahead_fields[0]),
	.snapshot_size = sizeof(struct rd_ahead_stats),
	.snapshot = ahead_snapshot,
};
