/*
 * fs stats — the fs module's counters as one table, and its read-path
 * histograms: how long FUSE reads took, and how long they waited for bytes
 * that were not there yet (feedfs_read_wait_seconds).
 */
#include "fs_i.h"

#include <string.h>

static void fs_snapshot(void *obj, void *out)
{
	struct fs *fs = obj;
	struct fs_stats *s = out;

	stats_copy_u64(s, &fs->stats, sizeof(*s));
	pthread_mutex_lock(&fs->lock);
	s->live_inodes = fs->inodes.count;
	s->listing_dirs = fs->lcache.count;
	s->listing_bytes = fs->lcache.bytes;
	s->listing_evictions = fs->lcache.evictions;
	s->node_bytes = fs->inodes.bytes;
	s->meta_bytes = fs_meta_bytes(fs);
	s->meta_max = fs->meta_max;
	pthread_mutex_unlock(&fs->lock);
}

#define ROW_C(f, metric, labels, help) STATS_COUNTER(struct fs_stats, f, metric, labels, help)
#define ROW_G(f, metric, help) STATS_GAUGE(struct fs_stats, f, metric, "", help)
static const struct stats_field fs_fields[] = {
	ROW_C(lookups, "fuse_lookups_total", "", "Name lookups the kernel asked for."),
	ROW_C(lookups_cached, "fuse_lookup_answers_total", "from=\"cache\"",
	      "Lookups by where the answer came from."),
	ROW_C(lookups_remote, "fuse_lookup_answers_total", "from=\"store\"", ""),
	ROW_C(negative_hits, "fuse_lookup_answers_total", "from=\"negative_cache\"", ""),
	ROW_C(dir_hits, "fuse_lookup_answers_total", "from=\"directory_cache\"", ""),
	ROW_C(lookups_joined, "fuse_lookups_joined_total", "",
	      "Lookups that waited for a listing of their directory already in flight."),
	ROW_C(lookup_listings, "fs_lookup_listings_total", "",
	      "Subtree listings started by a lookup in a directory with no fresh listing."),
	ROW_C(list_pages, "fs_list_pages_total", "", "Listing pages read for lookups and readdir."),
	ROW_C(snap_listings, "fs_snapshot_listings_total", "",
	      "Directory listings built from the snapshot (--snapshot), with no request."),
	ROW_C(heads, "fs_heads_total", "", "HEAD requests made for lookups."),
	ROW_C(getattrs, "fuse_getattrs_total", "", "GETATTR requests answered."),
	ROW_C(opens, "fuse_opens_total", "", "Files opened."),
	ROW_C(keep_cache, "fuse_opens_keep_cache_total", "",
	      "Opens that kept the kernel's page cache of the file."),
	ROW_C(size_invals, "fuse_size_invalidations_total", "",
	      "Opens that invalidated the kernel's attributes: the file's size changed."),
	ROW_C(flushes, "fuse_flushes_total", "", "FLUSH requests answered."),
	ROW_C(reads, "fuse_reads_total", "", "READ requests answered."),
	ROW_C(read_bytes, "fuse_read_bytes_total", "", "Bytes answered to READ requests."),
	ROW_C(pt_opens, "fuse_passthrough_opens_total", "",
	      "Opens answered with FUSE passthrough: the kernel reads the promoted file."),
	ROW_C(pt_backing_opens, "fuse_passthrough_backing_opens_total", "",
	      "Promoted files registered with the kernel as backing files."),
	ROW_C(pt_backing_reuses, "fuse_passthrough_backing_reuses_total", "",
	      "Passthrough opens that reused a backing id kept from an earlier open."),
	ROW_C(pt_backing_closes, "fuse_passthrough_backing_closes_total", "",
	      "Backing ids closed (bound of kept ids, new ETag, evicted promoted file)."),
	ROW_C(uring_requests, "fuse_uring_requests_total", "",
	      "FUSE requests that came over io_uring (--fuse-uring) instead of /dev/fuse."),
	ROW_C(pt_refused, "fuse_passthrough_refused_total", "",
	      "Backing files the kernel refused (the open was served the normal way)."),
	ROW_C(pt_stale, "fuse_passthrough_stale_total", "",
	      "Opens failed ESTALE: the node was open for passthrough on an older version."),
	ROW_C(estale, "fuse_estale_total", "",
	      "Reads failed with ESTALE: the object changed while open."),
	ROW_C(hidden, "fs_hidden_keys_total", "",
	      "Keys hidden because their path cannot be a POSIX name."),
	ROW_C(subtree_walks, "fs_subtree_listings_total", "",
	      "Flat listings of a whole subtree, made to answer many lookups at once."),
	ROW_C(subtree_pages, "fs_subtree_pages_total", "", "Pages those listings read."),
	ROW_C(subtree_dirs, "fs_subtree_dirs_total", "", "Directories those listings filled."),
	ROW_C(subtree_too_big, "fs_subtree_too_big_total", "",
	      "Subtree listings given up as too big (listed by delimiter instead)."),
	ROW_C(subtree_kept, "fs_subtree_kept_total", "",
	      "Of those, listings in key order whose complete directories were kept."),
	ROW_G(live_inodes, "fs_inodes", "Inodes the kernel holds."),
	ROW_G(listing_dirs, "fs_listing_cache_dirs", "Directories in the listing cache."),
	ROW_G(listing_bytes, "fs_listing_cache_bytes", "Bytes of the listing cache."),
	ROW_C(listing_evictions, "fs_listing_cache_evictions_total", "",
	      "Listings evicted from the listing cache."),
	ROW_G(node_bytes, "fs_node_bytes", "Bytes of the nodes the kernel holds, with their tables."),
	ROW_G(meta_bytes, "fs_metadata_bytes", "Bytes of metadata: listings and nodes."),
	ROW_G(meta_max, "fs_metadata_max_bytes",
	      "The metadata share of --max-memory (0: unbounded)."),
	ROW_C(meta_invals, "fs_metadata_invalidations_total", "",
	      "Entries the kernel was asked to forget to keep metadata within its share."),
	ROW_C(ahead_lists, "fs_list_ahead_total", "",
	      "Subtree listings made ahead of a walk, for the next directories."),
	ROW_C(readdir_kept, "fuse_opendir_kept_total", "",
	      "Opendirs answered from the kernel's readdir cache."),
	ROW_C(readdir_regen, "fs_readdir_regen_total", "",
	      "Lazy directory handles that had to list again and found another listing."),
};
#undef ROW_C
#undef ROW_G

const struct stats_group fs_stats_group = {
	.name = "fs",
	.fields = fs_fields,
	.n_fields = sizeof(fs_fields) / sizeof(fs_fields[0]),
	.snapshot_size = sizeof(struct fs_stats),
	.snapshot = fs_snapshot,
};

void fs_stats_init(struct fs *fs)
{
	fs->hist_desc[FS_HIST_READ] = (struct stats_hist_desc){
		.key = "fuse_read", .metric = "fuse_read_duration_seconds", .labels = "",
		.help = "FUSE READ requests, from arrival to the reply.",
		.h = &fs->hist[FS_HIST_READ],
	};
	fs->hist_desc[FS_HIST_WAIT] = (struct stats_hist_desc){
		.key = "read_wait", .metric = "read_wait_seconds", .labels = "",
		.help = "How long each FUSE read waited for bytes that were not there yet "
			"(0 when all were): the data-starvation signal.",
		.h = &fs->hist[FS_HIST_WAIT],
	};
	fs->rd.read_wait = &fs->hist[FS_HIST_WAIT];
	for (size_t i = 0; i < fs->n_src; i++)
		fs->src[i].rd.read_wait = &fs->hist[FS_HIST_WAIT];
}

const struct stats_hist_desc *fs_hists(struct fs *fs, size_t *n)
{
	*n = FS_HIST_N;
	return fs->hist_desc;
}
