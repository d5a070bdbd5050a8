/*
 * stats — counters as tables, latency histograms, and the three renderings
 * that read them: the unmount log line, the control socket's `feedfs stats`
 * reply (text and JSON), and Prometheus text at /metrics.
 *
 * DESIGN
 * A module keeps its counters as plain uint64_t fields of one struct, bumped
 * with relaxed atomics, and describes them ONCE in a table of stats_field rows
 * (STATS_COUNTER / STATS_GAUGE below: key, Prometheus metric and labels, help,
 * offset of the field). Nothing else names a counter: the renderers walk the
 * table, so a new counter is one field and one row. A module publishes the
 * table as a stats_group and offers a snapshot function (a struct copy with
 * relaxed loads, taken by the renderers without the module's locks).
 * Histograms (stats_hist) are lock-free bucket arrays on fixed bounds, from
 * 50 us to 60 s, observed in nanoseconds; they live in the module that times
 * the event and are read in place.
 * The daemon lists what it built in a stats_reg (groups with their objects,
 * and histograms); renderers take the registry, so a mount without a cache
 * simply has no cache group.
 * Labels never carry an object key (cardinality; keys may be private): a
 * metric's labels are fixed strings of its row, and every series also carries
 * the mount's bucket and prefix.
 */
#ifndef FEEDFS_STATS_H
#define FEEDFS_STATS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum stats_kind { STATS_KIND_COUNTER, STATS_KIND_GAUGE };

struct stats_field {
	const char *key;        /* unique in its group: JSON member, log word */
	const char *metric;     /* Prometheus name without "feedfs_", e.g. "s3_requests_total" */
	const char *labels;     /* fixed labels, e.g. "kind=\"get\"", or "" */
	enum stats_kind kind;
	const char *help;       /* one line, for # HELP and docs/METRICS.md */
	size_t off;             /* offset of a uint64_t in the group's snapshot struct */
};

#define STATS_COUNTER(type, field, metric, labels, help) \
	{ #field, metric, labels, STATS_KIND_COUNTER, help, offsetof(type, field) }
#define STATS_GAUGE(type, field, metric, labels, help) \
	{ #field, metric, labels, STATS_KIND_GAUGE, help, offsetof(type, field) }

/* A module's table; snapshot copies the live counters of obj into out (a
 * struct of snapshot_size bytes that the fields' offsets index). */
struct stats_group {
	const char *name;       /* "s3", "cache", ...: JSON object and log tag */
	const struct stats_field *fields;
	size_t n_fields;
	size_t snapshot_size;
	void (*snapshot)(void *obj, void *out);
};

/* Histogram bounds (seconds): STATS_HIST_BOUNDS upper bounds plus +Inf. */
#define STATS_HIST_BOUNDS 18
extern const double stats_hist_bounds_s[STATS_HIST_BOUNDS];

struct stats_hist {
	uint64_t bucket[STATS_HIST_BOUNDS + 1];     /* not cumulative; last is +Inf */
	uint64_t count;
	uint64_t sum_ns;
};

/* Record one event of ns nanoseconds. Lock-free; any thread. */
void stats_hist_observe(struct stats_hist *h, uint64_t ns);
/* Copy with relaxed loads (count is the sum of the copied buckets). */
void stats_hist_read(const struct stats_hist *h, struct stats_hist *out);
/* The q-quantile (0 < q < 1) in seconds, interpolated inside its bucket;
 * 0 when empty; the last finite bound when it falls in +Inf. */
double stats_hist_quantile(const struct stats_hist *h, double q);

/* CLOCK_MONOTONIC in nanoseconds, for timing events. */
uint64_t stats_now_ns(void);

/* A histogram as the registry shows it. */
struct stats_hist_desc {
	const char *key;        /* JSON member, e.g. "s3_get_ok" */
	const char *metric;     /* e.g. "s3_request_duration_seconds" */
	const char *labels;     /* e.g. "kind=\"get\",outcome=\"ok\"" */
	const char *help;
	const struct stats_hist *h;
};

#define STATS_REG_MAX 16
#define STATS_REG_GROUPS_MAX 96     /* the mount's groups and a few per source */
struct stats_reg {
	struct {
		const struct stats_group *g;
		void *obj;
		const char *source;     /* NULL: the mount's; else one source's (--sources) */
	} group[STATS_REG_GROUPS_MAX];
	size_t n_groups;
	const struct stats_hist_desc *hists[STATS_REG_MAX];   /* arrays of descs */
	size_t n_hist[STATS_REG_MAX];
	size_t n_hist_sets;
};

/* Add a group (obj is what its snapshot reads) or an array of n histograms.
 * Silently ignores a NULL obj/array; BUG_ON when full (a fixed, small set). */
void stats_reg_group(struct stats_reg *r, const struct stats_group *g, void *obj);
/* The same group for one source of several (--sources), beside a mount-wide
 * one of the same table (the totals). It renders as that source's: in JSON
 * under "sources": {NAME: {group: {...}}}, in Prometheus as the same metrics
 * with a source="NAME" label next to the total's series (a total is a group with the
 * same fields table), logged as
 * "group[NAME]". Totals only everywhere else (stats_reg_value, the table).
 * Register one source's groups one after the other; source must outlive r. */
void stats_reg_group_source(struct stats_reg *r, const struct stats_group *g, void *obj,
			    const char *source);
void stats_reg_hists(struct stats_reg *r, const struct stats_hist_desc *d, size_t n);

/* Read one field of a snapshot. */
static inline uint64_t stats_field_value(const struct stats_field *f, const void *snap)
{
	return *(const uint64_t *)((const char *)snap + f->off);
}

/* Copy a struct of uint64_t counters with relaxed loads (a snapshot). */
static inline void stats_copy_u64(void *dst, const void *src, size_t size)
{
	const uint64_t *s = src;
	uint64_t *d = dst;

	for (size_t i = 0; i < size / sizeof(uint64_t); i++)
		d[i] = __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

/* The value of group.key in a registry right now (tests, STATUS lines);
 * 0 when absent. */
uint64_t stats_reg_value(const struct stats_reg *r, const char *group, const char *key);

/* What the renderings say about the mount itself. */
struct stats_mount {
	const char *version;
	const char *bucket;
	const char *prefix;         /* "" or ends with '/' */
	const char *endpoint;
	const char *mountpoint;
	int pid;                    /* the process serving the mount */
	unsigned takeovers;         /* servers before this one (keep.h) */
	int64_t started_wall_ms;    /* CLOCK_REALTIME at mount */
	uint64_t started_ns;        /* stats_now_ns() at mount */
};

/* Throughput over the last interval (the control socket's ticker). */
struct stats_rate {
	double seconds;             /* 0: no interval yet */
	uint64_t fuse_bytes, fuse_reads, s3_bytes;
};

/* Renderings (src/stats/render.c). Each writes to out and returns 0 or -EIO. */
int stats_render_json(const struct stats_reg *r, const struct stats_mount *m,
		      const struct stats_rate *now, FILE *out);
int stats_render_prom(const struct stats_reg *r, const struct stats_mount *m, FILE *out);
int stats_render_text(const struct stats_reg *r, const struct stats_mount *m,
		      const struct stats_rate *now, FILE *out);
/* One log line per group: "s3: requests 12, get_requests 10, ...". */
void stats_log(const struct stats_reg *r);
/* A group's snapshot is in the registry: 1, else 0. */
int stats_reg_has(const struct stats_reg *r, const char *group);

#endif
