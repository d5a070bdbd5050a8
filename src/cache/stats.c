/*
 * cache stats — the block cache's and the attached-cache client's counters
 * as tables (stats.h); the counters themselves stay where they are bumped.
 */
#include "feedfs/attach.h"
#include "feedfs/cache.h"
#include "feedfs/stats.h"

static void cache_snapshot(void *obj, void *out)
{
	struct cache_stats *s = out;

	cache_get_stats(obj, s);
	s->capacity_bytes = s->pages * s->block_size;
}

#define ROW_C(f, metric, labels, help) STATS_COUNTER(struct cache_stats, f, metric, labels, help)
#define ROW_G(f, metric, help) STATS_GAUGE(struct cache_stats, f, metric, "", help)
static const struct stats_field cache_fields[] = {
	ROW_C(hits, "cache_hits_total", "", "Blocks served from the disk cache."),
	ROW_C(misses, "cache_misses_total", "", "Blocks fetched from the store into the cache."),
	ROW_C(coalesced, "cache_coalesced_total", "",
	      "Block requests that joined a disk read or fetch already in flight."),
	ROW_C(bypass, "cache_bypass_total", "", "Requests passed to the store uncached (no ETag)."),
	ROW_C(pieces, "cache_pieces_total", "", "Parts of blocks asked for by random readers."),
	ROW_C(inner_fetches, "cache_store_fetches_total", "", "GETs the cache issued."),
	ROW_C(bytes_from_disk, "cache_read_bytes_total", "from=\"disk\"",
	      "Bytes the cache delivered, by where they came from."),
	ROW_C(bytes_from_inner, "cache_read_bytes_total", "from=\"store\"", ""),
	ROW_C(bytes_written, "cache_written_bytes_total", "", "Bytes written to the cache file."),
	ROW_C(checksum_failures, "cache_checksum_failures_total", "",
	      "Cached blocks whose CRC32C did not match (refetched, never served)."),
	ROW_C(io_errors, "cache_io_errors_total", "", "Cache file read or write errors."),
	ROW_C(evictions, "cache_evictions_total", "", "Cached records dropped to make room."),
	ROW_C(write_skipped, "cache_write_skipped_total", "",
	      "Fetched blocks not cached because every page was pinned."),
	ROW_G(blocks_used, "cache_records", "Records (blocks and pieces) cached now."),
	ROW_G(bytes_used, "cache_used_bytes", "Bytes cached now."),
	ROW_G(pages, "cache_pages", "Capacity of the cache file, in blocks."),
	ROW_G(capacity_bytes, "cache_capacity_bytes", "Capacity of the cache file."),
};
#undef ROW_C
#undef ROW_G

const struct stats_group cache_stats_group = {
	.name = "cache",
	.fields = cache_fields,
	.n_fields = sizeof(cache_fields) / sizeof(cache_fields[0]),
	.snapshot_size = sizeof(struct cache_stats),
	.snapshot = cache_snapshot,
};

static void attach_snapshot(void *obj, void *out)
{
	attach_get_stats(obj, out);
}

#define ROW_A(f, metric, help) STATS_COUNTER(struct attach_stats, f, metric, "", help)
static const struct stats_field attach_fields[] = {
	ROW_A(reads, "attach_reads_total", "Requests answered by the owning mount's cache."),
	ROW_A(bytes, "attach_read_bytes_total", "Bytes those requests carried."),
	ROW_A(fallbacks, "attach_fallbacks_total",
	      "Requests sent to the store instead (the owner gone, or no ETag)."),
	ROW_A(cancelled, "attach_cancelled_total", "Requests ended early by a seek or close."),
};
#undef ROW_A

const struct stats_group attach_stats_group = {
	.name = "attach",
	.fields = attach_fields,
	.n_fields = sizeof(attach_fields) / sizeof(attach_fields[0]),
	.snapshot_size = sizeof(struct attach_stats),
	.snapshot = attach_snapshot,
};
