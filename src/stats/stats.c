/*
 * stats — histograms and the registry (renderings: render.c). See stats.h.
 */
#include "feedfs/stats.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "feedfs/log.h"

/* From a fast cache hit (tens of microseconds) to a request that ran out of
 * retries (tens of seconds); Prometheus' own defaults stop at 10 s, too
 * short for a store's tail. */
const double stats_hist_bounds_s[STATS_HIST_BOUNDS] = {
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60,
};

uint64_t stats_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void stats_hist_observe(struct stats_hist *h, uint64_t ns)
{
	double s = (double)ns / 1e9;
	unsigned i = 0;

	while (i < STATS_HIST_BOUNDS && s > stats_hist_bounds_s[i])
		i++;
	__atomic_add_fetch(&h->bucket[i], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->sum_ns, ns, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->count, 1, __ATOMIC_RELAXED);
}

void stats_hist_read(const struct stats_hist *h, struct stats_hist *out)
{
	out->count = 0;
	for (unsigned i = 0; i <= STATS_HIST_BOUNDS; i++) {
		out->bucket[i] = __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
		out->count += out->bucket[i];
	}
	out->sum_ns = __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED);
}

double stats_hist_quantile(const struct stats_hist *h, double q)
{
	double rank, seen = 0;

	if (h->count == 0)
		return 0;
	rank = q * (double)h->count;
	for (unsigned i = 0; i <= STATS_HIST_BOUNDS; i++) {
		double n = (double)h->bucket[i];

		if (n > 0 && seen + n >= rank) {
			double lo = i ? stats_hist_bounds_s[i - 1] : 0;

			if (i == STATS_HIST_BOUNDS)
				return lo;
			return lo + (stats_hist_bounds_s[i] - lo) * ((rank - seen) / n);
		}
		seen += n;
	}
	return stats_hist_bounds_s[STATS_HIST_BOUNDS - 1];
}

void stats_reg_group_source(struct stats_reg *r, const struct stats_group *g, void *obj,
			    const char *source)
{
	if (!obj)
		return;
	BUG_ON(r->n_groups >= STATS_REG_GROUPS_MAX);
	r->group[r->n_groups].g = g;
	r->group[r->n_groups].obj = obj;
	r->group[r->n_groups].source = source;
	r->n_groups++;
}

void stats_reg_group(struct stats_reg *r, const struct stats_group *g, void *obj)
{
	stats_reg_group_source(r, g, obj, NULL);
}

void stats_reg_hists(struct stats_reg *r, const struct stats_hist_desc *d, size_t n)
{
	if (!d || !n)
		return;
	BUG_ON(r->n_hist_sets >= STATS_REG_MAX);
	r->hists[r->n_hist_sets] = d;
	r->n_hist[r->n_hist_sets] = n;
	r->n_hist_sets++;
}

uint64_t stats_reg_value(const struct stats_reg *r, const char *group, const char *key)
{
	for (size_t i = 0; i < r->n_groups; i++) {
		const struct stats_group *g = r->group[i].g;
		unsigned char snap[1024];

		if (strcmp(g->name, group) != 0 || r->group[i].source)
			continue;
		BUG_ON(g->snapshot_size > sizeof(snap));
		g->snapshot(r->group[i].obj, snap);
		for (size_t j = 0; j < g->n_fields; j++)
			if (strcmp(g->fields[j].key, key) == 0)
				return stats_field_value(&g->fields[j], snap);
	}
	return 0;
}
