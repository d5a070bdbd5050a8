/* Unit tests for counters as tables and their renderings (src/stats/). */
#include <stdlib.h>
#include <string.h>

#include "feedfs/ahead.h"
#include "feedfs/attach.h"
#include "feedfs/cache.h"
#include "feedfs/fs.h"
#include "feedfs/gpu.h"
#include "feedfs/hint.h"
#include "feedfs/prefetch.h"
#include "feedfs/promote.h"
#include "feedfs/s3.h"
#include "feedfs/stats.h"
#include "harness.h"

struct demo_stats {
	uint64_t gets, heads, bytes, held;
};

static void demo_snapshot(void *obj, void *out)
{
	stats_copy_u64(out, obj, sizeof(struct demo_stats));
}

static const struct stats_field demo_fields[] = {
	STATS_COUNTER(struct demo_stats, gets, "demo_requests_total", "kind=\"get\"",
		      "Requests by kind."),
	STATS_COUNTER(struct demo_stats, heads, "demo_requests_total", "kind=\"head\"", ""),
	STATS_COUNTER(struct demo_stats, bytes, "demo_bytes_total", "", "Bytes."),
	STATS_GAUGE(struct demo_stats, held, "demo_held_bytes", "", "Held now."),
};

static const struct stats_group demo_group = {
	.name = "demo", .fields = demo_fields, .n_fields = 4,
	.snapshot_size = sizeof(struct demo_stats), .snapshot = demo_snapshot,
};

static const struct stats_mount demo_mount = {
	.version = "0.0", .bucket = "b\"q", .prefix = "p/", .endpoint = "http://x",
	.mountpoint = "/mnt/a b", .pid = 42,
};

static char *render(int (*fn)(const struct stats_reg *, const struct stats_mount *, FILE *),
		    const struct stats_reg *r)
{
	static char *buf;
	static size_t len;
	FILE *f;

	buf = NULL;
	f = open_memstream(&buf, &len);
	CHECK_EQ_INT(fn(r, &demo_mount, f), 0);
	fclose(f);
	return buf;
}

static int json_fn(const struct stats_reg *r, const struct stats_mount *m, FILE *f)
{
	return stats_render_json(r, m, NULL, f);
}

static void t_hist_buckets_and_quantiles(void)
{
	struct stats_hist h = { { 0 }, 0, 0 }, c;

	stats_hist_observe(&h, 0);                      /* first bucket */
	stats_hist_observe(&h, 50000);                  /* exactly 50 us: still first */
	stats_hist_observe(&h, 50001);                  /* second */
	stats_hist_observe(&h, 3000000000ull);          /* 3 s: the (2.5, 5] bucket */
	stats_hist_observe(&h, 3600ull * 1000000000);   /* an hour: +Inf */
	stats_hist_read(&h, &c);
	CHECK_EQ_INT(c.count, 5);
	CHECK_EQ_INT(c.bucket[0], 2);
	CHECK_EQ_INT(c.bucket[1], 1);
	CHECK_EQ_INT(c.bucket[15], 1);                  /* bounds[15] == 5 s */
	CHECK_EQ_INT(c.bucket[STATS_HIST_BOUNDS], 1);
	CHECK_EQ_INT(c.sum_ns, 50000 + 50001 + 3000000000ull + 3600ull * 1000000000);
	/* the median (rank 2.5 of 5) lies in the second bucket (50..100 us) */
	CHECK(stats_hist_quantile(&c, 0.5) > 0.00005 && stats_hist_quantile(&c, 0.5) <= 0.0001);
	/* p99 is in +Inf: reported as the last finite bound */
	CHECK(stats_hist_quantile(&c, 0.99) == 60);
	memset(&c, 0, sizeof(c));
	CHECK(stats_hist_quantile(&c, 0.5) == 0);
}

static void t_registry_values_and_absent_groups(void)
{
	struct demo_stats d = { 7, 3, 1000, 5 };
	struct stats_reg r;

	memset(&r, 0, sizeof(r));
	stats_reg_group(&r, &demo_group, &d);
	stats_reg_group(&r, &demo_group, NULL);         /* not built: not registered */
	CHECK_EQ_INT(r.n_groups, 1);
	CHECK_EQ_INT(stats_reg_value(&r, "demo", "heads"), 3);
	CHECK_EQ_INT(stats_reg_value(&r, "demo", "nope"), 0);
	CHECK_EQ_INT(stats_reg_value(&r, "cache", "hits"), 0);
	CHECK(stats_reg_has(&r, "demo") && !stats_reg_has(&r, "cache"));
}

static void t_prometheus_text(void)
{
	struct demo_stats d = { 7, 3, 1000, 5 };
	struct stats_hist h = { { 0 }, 0, 0 };
	struct stats_hist_desc hd = { "lat", "demo_seconds", "kind=\"get\"", "Latency.", &h };
	struct stats_reg r;
	char *t;

	memset(&r, 0, sizeof(r));
	stats_reg_group(&r, &demo_group, &d);
	stats_reg_hists(&r, &hd, 1);
	stats_hist_observe(&h, 2000000);                /* 2 ms */
	t = render(stats_render_prom, &r);
	/* HELP and TYPE once per metric, before its first sample */
	CHECK(strstr(t, "# HELP feedfs_demo_requests_total Requests by kind.\n"
			"# TYPE feedfs_demo_requests_total counter\n"
			"feedfs_demo_requests_total{bucket=\"b\\\"q\",prefix=\"p/\",kind=\"get\"} 7\n"
			"feedfs_demo_requests_total{bucket=\"b\\\"q\",prefix=\"p/\",kind=\"head\"} 3\n"));
	CHECK(strstr(strstr(t, "kind=\"head\"} 3"), "# TYPE feedfs_demo_requests_total") == NULL);
	CHECK(strstr(t, "# TYPE feedfs_demo_held_bytes gauge\n"));
	/* cumulative buckets, then _sum and _count */
	CHECK(strstr(t, "feedfs_demo_seconds_bucket{bucket=\"b\\\"q\",prefix=\"p/\",kind=\"get\","
			"le=\"0.001\"} 0\n"));
	CHECK(strstr(t, "le=\"0.0025\"} 1\n"));
	CHECK(strstr(t, "le=\"+Inf\"} 1\n"));
	CHECK(strstr(t, "feedfs_demo_seconds_count{bucket=\"b\\\"q\",prefix=\"p/\",kind=\"get\"} 1\n"));
	CHECK(strstr(t, "feedfs_demo_seconds_sum{bucket=\"b\\\"q\",prefix=\"p/\",kind=\"get\"} "
			"0.002000000\n"));
	free(t);
}

static void t_json(void)
{
	struct demo_stats d = { 7, 3, 1000, 5 };
	struct stats_reg r;
	char *t;

	memset(&r, 0, sizeof(r));
	stats_reg_group(&r, &demo_group, &d);
	t = render(json_fn, &r);
	CHECK(strstr(t, "\"pid\":42,\"takeovers\":0,\"source\":\"s3://b\\\"q/p/\""));
	CHECK(strstr(t, "\"mountpoint\":\"/mnt/a b\""));
	CHECK(strstr(t, "\"demo\":{\"gets\":7,\"heads\":3,\"bytes\":1000,\"held\":5}"));
	CHECK(strstr(t, "\"histograms\":{}}\n"));
	free(t);
}

/* docs/METRICS.md names every metric of every table, and every key is unique
 * in its group (JSON members, log words). Run from the repo root. */
static void t_every_metric_documented(void)
{
	static const struct stats_group *groups[] = {
		&s3_stats_group, &fs_stats_group, &cache_stats_group, &attach_stats_group,
		&ahead_stats_group, &budget_stats_group, &hint_stats_group, &gpu_stats_group,
		&promote_stats_group,
	};
	static const char *hist_metrics[] = {
		"feedfs_s3_request_duration_seconds", "feedfs_fuse_read_duration_seconds",
		"feedfs_read_wait_seconds",
	};
	FILE *f = fopen("docs/METRICS.md", "r");
	char *doc = NULL;
	size_t cap = 0;
	ssize_t n;

	CHECK(f != NULL);
	if (!f)
		return;
	n = getdelim(&doc, &cap, '\0', f);
	fclose(f);
	CHECK(n > 0);
	for (size_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
		for (size_t i = 0; i < groups[g]->n_fields; i++) {
			const struct stats_field *fl = &groups[g]->fields[i];
			char name[128];

			snprintf(name, sizeof(name), "`feedfs_%s", fl->metric);
			if (!strstr(doc, name))
				harness_fail(__FILE__, __LINE__, "docs/METRICS.md does not name %s",
					     name + 1);
			CHECK(fl->help != NULL);
			for (size_t j = 0; j < i; j++)
				if (strcmp(groups[g]->fields[j].key, fl->key) == 0)
					harness_fail(__FILE__, __LINE__, "%s.%s twice", groups[g]->name,
						     fl->key);
			/* a metric's first row carries its help */
			if (i == 0 || strcmp(groups[g]->fields[i - 1].metric, fl->metric) != 0)
				CHECK(fl->help[0] != '\0');
		}
	}
	for (size_t i = 0; i < sizeof(hist_metrics) / sizeof(hist_metrics[0]); i++)
		CHECK(strstr(doc, hist_metrics[i]) != NULL);
	free(doc);
}

static const struct test tests[] = {
	TEST(t_hist_buckets_and_quantiles),
	TEST(t_registry_values_and_absent_groups),
	TEST(t_prometheus_text),
	TEST(t_json),
	TEST(t_every_metric_documented),
	{ 0 },
};

int main(void)
{
	return harness_run("stats", tests);
}
