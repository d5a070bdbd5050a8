/*
 * route — one read path's bottom over several sources (include/feedfs/route.h).
 *
 * DESIGN
 * fetch splits the key at its first NUL, finds the source by name (a linear
 * scan: at most SOURCES_MAX names), and queues a copy of the request with the
 * key after the NUL on that source's fetcher. The copy carries the caller's
 * request; its done hands the result back and frees the copy, on the inner
 * fetcher's thread, as the contract asks. A key with no NUL or an unknown
 * name is -EINVAL at once (done is not called). No state is shared between
 * requests, so there is no lock.
 */
#include "feedfs/route.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct route_src {
	const char *name;
	size_t name_len;
	struct fetcher *inner;
};

struct route {
	struct fetcher base;
	struct route_src *src;
	size_t n;
};

struct route_req {
	struct fetch_req req;           /* what the source's fetcher sees */
	struct fetch_req *outer;        /* the caller's */
};

static void route_done(struct fetch_req *req, ssize_t result)
{
	struct route_req *rr = fetcher_of(req, struct route_req, req);
	struct fetch_req *outer = rr->outer;

	free(rr);
	outer->done(outer, result);
}

static int route_fetch(struct fetcher *f, struct fetch_req *req)
{
	struct route *r = fetcher_of(f, struct route, base);
	const char *nul = memchr(req->key, '\0', req->key_len);
	size_t nl = nul ? (size_t)(nul - req->key) : 0;
	struct route_req *rr;
	int e;

	if (!nul)
		return -EINVAL;
	for (size_t i = 0; i < r->n; i++) {
		if (r->src[i].name_len != nl || memcmp(r->src[i].name, req->key, nl) != 0)
			continue;
		rr = malloc(sizeof(*rr));
		if (!rr)
			return -ENOMEM;
		rr->req = *req;
		rr->req.key = nul + 1;
		rr->req.key_len = req->key_len - nl - 1;
		rr->req.done = route_done;
		rr->req.done_arg = NULL;
		rr->outer = req;
		e = fetcher_fetch(r->src[i].inner, &rr->req);
		if (e < 0)
			free(rr);
		return e;
	}
	return -EINVAL;
}

static const struct fetcher_ops route_ops = { .fetch = route_fetch, .cancel = NULL };

int route_new(const char *const *names, struct fetcher *const *inner, size_t n,
	      struct route **out)
{
	struct route *r = calloc(1, sizeof(*r));

	if (!r || !(r->src = calloc(n ? n : 1, sizeof(*r->src)))) {
		free(r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		r->src[i] = (struct route_src){ names[i], strlen(names[i]), inner[i] };
	r->n = n;
	r->base.ops = &route_ops;
	r->base.cancels = 0;
	*out = r;
	return 0;
}

void route_destroy(struct route *r)
{
	if (!r)
		return;
	free(r->src);
	free(r);
}

struct fetcher *route_fetcher(struct route *r)
{
	return &r->base;
}

char *route_key(const char *name, size_t name_len, const char *key, size_t key_len,
		size_t *len)
{
	char *k = malloc(name_len + 1 + key_len + 1);

	if (!k)
		return NULL;
	memcpy(k, name, name_len);
	k[name_len] = '\0';
	memcpy(k + name_len + 1, key, key_len);
	k[name_len + 1 + key_len] = '\0';
	*len = name_len + 1 + key_len;
	return k;
}
