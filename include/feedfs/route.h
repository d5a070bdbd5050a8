/*
 * route — the bottom of one read path shared by several sources (--sources
 * with --cache-dir): a fetcher whose keys name their source, "NAME\0KEY",
 * and which hands each request to that source's fetcher with KEY alone.
 *
 * Why: the block cache sits over one fetcher and keys its blocks by the
 * request's key and ETag. Giving it "NAME\0KEY" keeps the sources apart in
 * one cache dir (the same key and ETag in two buckets are two objects), and
 * this layer strips the name again on the way to the store. No S3 key holds
 * a NUL (the fs hides such keys), so the split is unambiguous.
 *
 * Requests are forwarded as copies (one small allocation each, freed when
 * the source's fetcher completes them); cancel is not forwarded (cancels =
 * 0), as the cache above does not cancel either. Built before the sources'
 * fetchers are used; the names and fetchers must outlive it.
 */
#ifndef FEEDFS_ROUTE_H
#define FEEDFS_ROUTE_H

#include <stddef.h>

#include "feedfs/fetch.h"

struct route;

/* n sources: names[i] (no NUL inside) goes to inner[i]. 0 or -ENOMEM. */
int route_new(const char *const *names, struct fetcher *const *inner, size_t n,
	      struct route **out);
void route_destroy(struct route *r);
struct fetcher *route_fetcher(struct route *r);

/* The routed key "NAME\0KEY" (malloc'd, *len bytes, NUL-terminated after). */
char *route_key(const char *name, size_t name_len, const char *key, size_t key_len,
		size_t *len);

#endif
