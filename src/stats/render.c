/*
 * render — the registry as JSON (`feedfs stats --json`), Prometheus text
 * (/metrics), a human table (`feedfs stats`) and log lines (unmount). Every
 * one walks the same tables (stats.h); only the human table picks counters
 * by name, and it shows a missing group as absent, never as zeros.
 */
#include "feedfs/stats.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/log.h"

#define SNAP_MAX 1024

static void snap(const struct stats_reg *r, size_t i, unsigned char *out)
{
	const struct stats_group *g = r->group[i].g;

	BUG_ON(g->snapshot_size > SNAP_MAX);
	memset(out, 0, SNAP_MAX);
	g->snapshot(r->group[i].obj, out);
}

int stats_reg_has(const struct stats_reg *r, const char *group)
{
	for (size_t i = 0; i < r->n_groups; i++)
		if (strcmp(r->group[i].g->name, group) == 0 && !r->group[i].source)
			return 1;
	return 0;
}

/* ---- JSON ----------------------------------------------------------------- */

static void json_str(FILE *o, const char *s)
{
	fputc('"', o);
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(o, "\\%c", *p);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(o, "\\u%04x", *p);
		else
			fputc(*p, o);
	}
	fputc('"', o);
}

static void json_hist(FILE *o, const struct stats_hist_desc *d)
{
	struct stats_hist h;

	stats_hist_read(d->h, &h);
	fprintf(o, "{\"count\":%llu,\"sum_seconds\":%.6f,\"p50_seconds\":%.6f,"
		"\"p90_seconds\":%.6f,\"p99_seconds\":%.6f,\"buckets\":[",
		(unsigned long long)h.count, (double)h.sum_ns / 1e9, stats_hist_quantile(&h, 0.5),
		stats_hist_quantile(&h, 0.9), stats_hist_quantile(&h, 0.99));
	for (unsigned i = 0; i <= STATS_HIST_BOUNDS; i++) {
		if (i < STATS_HIST_BOUNDS)
			fprintf(o, "%s[%g,%llu]", i ? "," : "", stats_hist_bounds_s[i],
				(unsigned long long)h.bucket[i]);
		else
			fprintf(o, ",[\"+Inf\",%llu]", (unsigned long long)h.bucket[i]);
	}
	fputs("]}", o);
}

/* sep, then "name":{...} of group i. */
static void json_group(FILE *o, const struct stats_reg *r, size_t i, unsigned char *s,
		       const char *sep)
{
	const struct stats_group *g = r->group[i].g;

	snap(r, i, s);
	fputs(sep, o);
	json_str(o, g->name);
	fputs(":{", o);
	for (size_t j = 0; j < g->n_fields; j++) {
		fprintf(o, "%s", j ? "," : "");
		json_str(o, g->fields[j].key);
		fprintf(o, ":%llu", (unsigned long long)stats_field_value(&g->fields[j], s));
	}
	fputc('}', o);
}

int stats_render_json(const struct stats_reg *r, const struct stats_mount *m,
		      const struct stats_rate *now, FILE *o)
{
	unsigned char s[SNAP_MAX];
	uint64_t up_ns = stats_now_ns() - m->started_ns;
	int first = 1;

	fprintf(o, "{\"version\":");
	json_str(o, m->version);
	fprintf(o, ",\"pid\":%d,\"takeovers\":%u,\"source\":", m->pid, m->takeovers);
	{
		char src[2048];

		snprintf(src, sizeof(src), "s3://%s/%s", m->bucket, m->prefix);
		json_str(o, src);
	}
	fputs(",\"bucket\":", o);
	json_str(o, m->bucket);
	fputs(",\"prefix\":", o);
	json_str(o, m->prefix);
	fputs(",\"endpoint\":", o);
	json_str(o, m->endpoint);
	fputs(",\"mountpoint\":", o);
	json_str(o, m->mountpoint);
	fprintf(o, ",\"started_unix_ms\":%lld,\"uptime_seconds\":%.3f",
		(long long)m->started_wall_ms, (double)up_ns / 1e9);
	if (now && now->seconds > 0)
		fprintf(o, ",\"now\":{\"seconds\":%.3f,\"fuse_read_bytes_per_second\":%.0f,"
			"\"fuse_reads_per_second\":%.1f,\"s3_bytes_per_second\":%.0f}", now->seconds,
			(double)now->fuse_bytes / now->seconds, (double)now->fuse_reads / now->seconds,
			(double)now->s3_bytes / now->seconds);
	for (size_t i = 0; i < r->n_groups; i++) {
		if (!r->group[i].source)
			json_group(o, r, i, s, ",");
	}
	/* Per source: "sources":{"train":{"s3":{...}},...}, in registration order
	 * (one source's groups are registered together). */
	{
		const char *cur = NULL;

		for (size_t i = 0; i < r->n_groups; i++) {
			const char *src = r->group[i].source;

			if (!src)
				continue;
			if (!cur || strcmp(cur, src) != 0) {
				fputs(cur ? "}," : ",\"sources\":{", o);
				json_str(o, src);
				fputs(":{", o);
				json_group(o, r, i, s, "");
				cur = src;
			} else {
				json_group(o, r, i, s, ",");
			}
		}
		if (cur)
			fputs("}}", o);
	}
	fputs(",\"histograms\":{", o);
	for (size_t i = 0; i < r->n_hist_sets; i++)
		for (size_t j = 0; j < r->n_hist[i]; j++) {
			const struct stats_hist_desc *d = &r->hists[i][j];

			fprintf(o, "%s", first ? "" : ",");
			first = 0;
			json_str(o, d->key);
			fputc(':', o);
			json_hist(o, d);
		}
	fputs("}}\n", o);
	return ferror(o) ? -EIO : 0;
}

/* ---- Prometheus text format 0.0.4 ----------------------------------------- */

static void prom_label_value(FILE *o, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\' || *s == '"')
			fprintf(o, "\\%c", *s);
		else if (*s == '\n')
			fputs("\\n", o);
		else
			fputc(*s, o);
	}
}

/* {bucket="b",prefix="p/"[,extra][,le="x"]} */
static void prom_labels(FILE *o, const struct stats_mount *m, const char *extra, const char *le)
{
	fputs("{bucket=\"", o);
	prom_label_value(o, m->bucket);
	fputs("\",prefix=\"", o);
	prom_label_value(o, m->prefix);
	fputc('"', o);
	if (extra && *extra)
		fprintf(o, ",%s", extra);
	if (le)
		fprintf(o, ",le=\"%s\"", le);
	fputc('}', o);
}

/* HELP and TYPE once per metric name, however many label sets follow. */
struct prom_seen {
	const char *name[256];
	size_t n;
};

static void prom_head(FILE *o, struct prom_seen *seen, const char *metric, const char *type,
		      const char *help)
{
	for (size_t i = 0; i < seen->n; i++)
		if (strcmp(seen->name[i], metric) == 0)
			return;
	if (seen->n < sizeof(seen->name) / sizeof(seen->name[0]))
		seen->name[seen->n++] = metric;
	fprintf(o, "# HELP feedfs_%s %s\n# TYPE feedfs_%s %s\n", metric, help, metric, type);
}

int stats_render_prom(const struct stats_reg *r, const struct stats_mount *m, FILE *o)
{
	struct prom_seen seen = { .n = 0 };
	unsigned char s[SNAP_MAX];

	prom_head(o, &seen, "up_seconds", "gauge", "Seconds since the mount started.");
	fputs("feedfs_up_seconds", o);
	prom_labels(o, m, NULL, NULL);
	fprintf(o, " %.3f\n", (double)(stats_now_ns() - m->started_ns) / 1e9);
	prom_head(o, &seen, "takeovers_total", "counter",
		  "Servers that took the mount over after the previous one died.");
	fputs("feedfs_takeovers_total", o);
	prom_labels(o, m, NULL, NULL);
	fprintf(o, " %u\n", m->takeovers);
	for (size_t i = 0; i < r->n_groups; i++) {
		const struct stats_group *g = r->group[i].g;

		if (r->group[i].source)
			continue;           /* beside its total, below */
		snap(r, i, s);
		for (size_t j = 0; j < g->n_fields; j++) {
			const struct stats_field *f = &g->fields[j];

			prom_head(o, &seen, f->metric,
				  f->kind == STATS_KIND_COUNTER ? "counter" : "gauge", f->help);
			fprintf(o, "feedfs_%s", f->metric);
			prom_labels(o, m, f->labels, NULL);
			fprintf(o, " %llu\n", (unsigned long long)stats_field_value(f, s));
			/* Each source's series of the same metric, with its label:
			 * a metric's samples must stay together in the text. */
			for (size_t k = 0; k < r->n_groups; k++) {
				unsigned char ks[SNAP_MAX];
				char lab[512];

				/* The same table (the total may be a copy of the group
				 * with its own snapshot: daemon.c's s3 sum). */
				if (!r->group[k].source || r->group[k].g->fields != g->fields)
					continue;
				snap(r, k, ks);
				snprintf(lab, sizeof(lab), "%s%ssource=\"%s\"", f->labels,
					 *f->labels ? "," : "", r->group[k].source);
				fprintf(o, "feedfs_%s", f->metric);
				prom_labels(o, m, lab, NULL);
				fprintf(o, " %llu\n", (unsigned long long)stats_field_value(f, ks));
			}
		}
	}
	for (size_t i = 0; i < r->n_hist_sets; i++)
		for (size_t j = 0; j < r->n_hist[i]; j++) {
			const struct stats_hist_desc *d = &r->hists[i][j];
			struct stats_hist h;
			uint64_t cum = 0;
			char le[32];

			stats_hist_read(d->h, &h);
			prom_head(o, &seen, d->metric, "histogram", d->help);
			for (unsigned b = 0; b <= STATS_HIST_BOUNDS; b++) {
				cum += h.bucket[b];
				if (b < STATS_HIST_BOUNDS)
					snprintf(le, sizeof(le), "%g", stats_hist_bounds_s[b]);
				else
					snprintf(le, sizeof(le), "+Inf");
				fprintf(o, "feedfs_%s_bucket", d->metric);
				prom_labels(o, m, d->labels, le);
				fprintf(o, " %llu\n", (unsigned long long)cum);
			}
			fprintf(o, "feedfs_%s_sum", d->metric);
			prom_labels(o, m, d->labels, NULL);
			fprintf(o, " %.9f\n", (double)h.sum_ns / 1e9);
			fprintf(o, "feedfs_%s_count", d->metric);
			prom_labels(o, m, d->labels, NULL);
			fprintf(o, " %llu\n", (unsigned long long)h.count);
		}
	return ferror(o) ? -EIO : 0;
}

/* ---- log lines ------------------------------------------------------------ */

void stats_log(const struct stats_reg *r)
{
	unsigned char s[SNAP_MAX];

	for (size_t i = 0; i < r->n_groups; i++) {
		const struct stats_group *g = r->group[i].g;
		char line[4096];
		size_t n = 0;

		char tag[128];

		snap(r, i, s);
		line[0] = '\0';
		for (size_t j = 0; j < g->n_fields && n < sizeof(line); j++)
			n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%s %llu", j ? ", " : "",
					      g->fields[j].key,
					      (unsigned long long)stats_field_value(&g->fields[j], s));
		if (r->group[i].source)
			snprintf(tag, sizeof(tag), "%s[%s]", g->name, r->group[i].source);
		else
			snprintf(tag, sizeof(tag), "%s", g->name);
		log_info(tag, "%s", line);
	}
}

/* ---- the human table ------------------------------------------------------ */

static uint64_t val(const struct stats_reg *r, const char *g, const char *k)
{
	return stats_reg_value(r, g, k);
}

static const char *human_bytes(double b, char *buf, size_t len)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
	return buf;
}

static const struct stats_hist_desc *find_hist(const struct stats_reg *r, const char *key)
{
	for (size_t i = 0; i < r->n_hist_sets; i++)
		for (size_t j = 0; j < r->n_hist[i]; j++)
			if (strcmp(r->hists[i][j].key, key) == 0)
				return &r->hists[i][j];
	return NULL;
}

static void text_latency(FILE *o, const struct stats_reg *r, const char *label, const char *key)
{
	const struct stats_hist_desc *d = find_hist(r, key);
	struct stats_hist h;

	if (!d)
		return;
	stats_hist_read(d->h, &h);
	if (!h.count) {
		fprintf(o, "  %-22s -\n", label);
		return;
	}
	fprintf(o, "  %-22s %9llu   p50 %8.2f ms   p90 %8.2f ms   p99 %8.2f ms\n", label,
		(unsigned long long)h.count, stats_hist_quantile(&h, 0.5) * 1e3,
		stats_hist_quantile(&h, 0.9) * 1e3, stats_hist_quantile(&h, 0.99) * 1e3);
}

int stats_render_text(const struct stats_reg *r, const struct stats_mount *m,
		      const struct stats_rate *now, FILE *o)
{
	double up = (double)(stats_now_ns() - m->started_ns) / 1e9;
	char b1[32], b2[32], b3[32];

	fprintf(o, "feedfs s3://%s/%s on %s\n", m->bucket, m->prefix, m->mountpoint);
	fprintf(o, "  pid %d, up %.0f s, takeovers %u, endpoint %s\n\n", m->pid, up, m->takeovers,
		m->endpoint);

	fprintf(o, "throughput                 now            since mount\n");
	if (now && now->seconds > 0) {
		fprintf(o, "  read (FUSE)        %10s/s    %10s/s\n",
			human_bytes((double)now->fuse_bytes / now->seconds, b1, sizeof(b1)),
			human_bytes((double)val(r, "fs", "read_bytes") / (up > 0 ? up : 1), b2,
				    sizeof(b2)));
		fprintf(o, "  from S3            %10s/s    %10s/s\n",
			human_bytes((double)now->s3_bytes / now->seconds, b1, sizeof(b1)),
			human_bytes((double)val(r, "s3", "bytes_in") / (up > 0 ? up : 1), b2,
				    sizeof(b2)));
	}
	fprintf(o, "  read in all        %12s in %llu reads; from S3 %s\n\n",
		human_bytes((double)val(r, "fs", "read_bytes"), b1, sizeof(b1)),
		(unsigned long long)val(r, "fs", "reads"),
		human_bytes((double)val(r, "s3", "bytes_in"), b2, sizeof(b2)));

	fprintf(o, "S3 requests (sent)  get %llu  head %llu  list %llu   errors %llu  cancelled %llu\n",
		(unsigned long long)val(r, "s3", "get_requests"),
		(unsigned long long)val(r, "s3", "head_requests"),
		(unsigned long long)val(r, "s3", "list_requests"),
		(unsigned long long)val(r, "s3", "errors"),
		(unsigned long long)val(r, "s3", "cancelled"));
	fprintf(o, "retries             %llu: throttled %llu, server error %llu, network %llu, "
		"stall %llu, bad body %llu, expired credentials %llu\n",
		(unsigned long long)val(r, "s3", "retries"),
		(unsigned long long)val(r, "s3", "retries_throttle"),
		(unsigned long long)val(r, "s3", "retries_server"),
		(unsigned long long)val(r, "s3", "retries_network"),
		(unsigned long long)val(r, "s3", "retries_stall"),
		(unsigned long long)val(r, "s3", "retries_body"),
		(unsigned long long)val(r, "s3", "retries_expired"));
	fprintf(o, "hedges              %llu sent, %llu won; %llu attempts stalled past the "
		"hedge delay\n\n",
		(unsigned long long)val(r, "s3", "hedges_started"),
		(unsigned long long)val(r, "s3", "hedges_won"),
		(unsigned long long)val(r, "s3", "stalls"));

	if (stats_reg_has(r, "cache")) {
		uint64_t h = val(r, "cache", "hits"), mi = val(r, "cache", "misses");

		fprintf(o, "cache               hits %llu  misses %llu  hit rate %.1f%%  evictions %llu  "
			"checksum failures %llu\n                    used %s of %s\n\n",
			(unsigned long long)h, (unsigned long long)mi,
			h + mi ? 100.0 * (double)h / (double)(h + mi) : 0.0,
			(unsigned long long)val(r, "cache", "evictions"),
			(unsigned long long)val(r, "cache", "checksum_failures"),
			human_bytes((double)val(r, "cache", "bytes_used"), b1, sizeof(b1)),
			human_bytes((double)val(r, "cache", "capacity_bytes"), b2, sizeof(b2)));
	} else if (stats_reg_has(r, "attach")) {
		fprintf(o, "cache               attached to another mount's: reads %llu (%s), "
			"sent to S3 instead %llu\n\n",
			(unsigned long long)val(r, "attach", "reads"),
			human_bytes((double)val(r, "attach", "bytes"), b1, sizeof(b1)),
			(unsigned long long)val(r, "attach", "fallbacks"));
	} else {
		fprintf(o, "cache               none (no --cache-dir)\n\n");
	}
	if (stats_reg_has(r, "ahead"))
		fprintf(o, "readahead (files)   wanted %llu  fetched %llu  served %llu  "
			"dropped unused %llu\n",
			(unsigned long long)val(r, "ahead", "wanted"),
			(unsigned long long)val(r, "ahead", "issued"),
			(unsigned long long)(val(r, "ahead", "hits") + val(r, "ahead", "joined")),
			(unsigned long long)val(r, "ahead", "dropped"));
	if (stats_reg_has(r, "budget"))
		fprintf(o, "memory budget       in use %s of %s (peak %s)\n\n",
			human_bytes((double)val(r, "budget", "used_bytes"), b1, sizeof(b1)),
			human_bytes((double)val(r, "budget", "max_bytes"), b2, sizeof(b2)),
			human_bytes((double)val(r, "budget", "peak_bytes"), b3, sizeof(b3)));

	if (stats_reg_has(r, "device") && (val(r, "device", "direct_bytes") ||
					   val(r, "device", "channels")))
		fprintf(o, "direct (device feed) %s in %llu reads, %llu batches (to a GPU %s); "
			"errors %llu; regions now %llu\n\n",
			human_bytes((double)val(r, "device", "direct_bytes"), b1, sizeof(b1)),
			(unsigned long long)val(r, "device", "reads"),
			(unsigned long long)val(r, "device", "batches"),
			human_bytes((double)val(r, "device", "device_bytes"), b2, sizeof(b2)),
			(unsigned long long)val(r, "device", "errors"),
			(unsigned long long)val(r, "device", "regions"));
	fprintf(o, "latency                     count\n");
	text_latency(o, r, "read wait (FUSE)", "read_wait");
	text_latency(o, r, "FUSE read", "fuse_read");
	text_latency(o, r, "S3 GET", "s3_get_ok");
	text_latency(o, r, "S3 HEAD", "s3_head_ok");
	text_latency(o, r, "S3 LIST", "s3_list_ok");
	return ferror(o) ? -EIO : 0;
}
