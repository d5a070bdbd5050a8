/*
 * fetcher.c — the S3 client behind the read path's fetcher ops (fetch.h).
 *
 * The request itself is the GET's callback argument: it is unique while the
 * GET runs and the caller keeps it alive until done, so it names the GET for
 * s3_get_cancel too.
 */
#include "feedfs/s3.h"

static void s3f_done(void *arg, ssize_t result)
{
	struct fetch_req *req = arg;

	req->done(req, result);
}

static int s3f_fetch(struct fetcher *f, struct fetch_req *req)
{
	struct s3_fetcher *sf = fetcher_of(f, struct s3_fetcher, base);

	return s3_get_async(sf->client, req->key, req->key_len, req->etag, req->off, req->len,
			    req->buf, s3f_done, req);
}

/* When the note cannot be queued (no memory, shutting down) the GET just runs
 * to its end, which the contract allows. */
static void s3f_cancel(struct fetcher *f, struct fetch_req *req)
{
	struct s3_fetcher *sf = fetcher_of(f, struct s3_fetcher, base);

	(void)s3_get_cancel(sf->client, s3f_done, req);
}

static const struct fetcher_ops s3f_ops = {
	.fetch = s3f_fetch,
	.cancel = s3f_cancel,
};

void s3_fetcher_init(struct s3_fetcher *sf, struct s3_client *c)
{
	sf->base.ops = &s3f_ops;
	sf->base.cancels = 1;
	sf->client = c;
}
