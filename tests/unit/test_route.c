/*
 * test_route — the route under a cache shared by several sources
 * (src/route.c): "NAME\0KEY" reaches NAME's fetcher as KEY with the rest of
 * the request unchanged, its result comes back to the caller's done once,
 * and a key without a name, or an unknown name, is refused at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/route.h"
#include "harness.h"

/* An inner fetcher that holds what it was given; the test completes it. */
struct holder {
	struct fetcher base;
	struct fetch_req *req;
	int calls;
};

static int hold_fetch(struct fetcher *f, struct fetch_req *req)
{
	struct holder *h = fetcher_of(f, struct holder, base);

	h->req = req;
	h->calls++;
	return 0;
}

static const struct fetcher_ops hold_ops = { .fetch = hold_fetch };

static int done_calls;
static ssize_t done_result;
static struct fetch_req *done_req;

static void outer_done(struct fetch_req *req, ssize_t result)
{
	done_calls++;
	done_result = result;
	done_req = req;
}

static void t_routes_by_name(void)
{
	struct holder a = { .base = { &hold_ops, 1 } }, b = { .base = { &hold_ops, 1 } };
	const char *names[] = { "train", "val" };
	struct fetcher *inner[] = { &a.base, &b.base };
	struct route *r;
	struct fetch_req req;
	char buf[8];
	size_t kl;
	char *key = route_key("val", 3, "d/x.bin", 7, &kl);

	CHECK_EQ_INT(kl, 11);
	CHECK(memcmp(key, "val\0d/x.bin", 12) == 0);
	CHECK_EQ_INT(route_new(names, inner, 2, &r), 0);
	CHECK_EQ_INT(route_fetcher(r)->cancels, 0);
	memset(&req, 0, sizeof(req));
	req.key = key;
	req.key_len = kl;
	req.etag = "\"e\"";
	req.off = 4096;
	req.len = sizeof(buf);
	req.buf = buf;
	req.obj_size = 10000;
	req.done = outer_done;
	CHECK_EQ_INT(fetcher_fetch(route_fetcher(r), &req), 0);
	CHECK_EQ_INT(a.calls, 0);
	CHECK_EQ_INT(b.calls, 1);
	CHECK_EQ_INT(b.req->key_len, 7);
	CHECK(memcmp(b.req->key, "d/x.bin", 7) == 0);
	CHECK_STR(b.req->etag, "\"e\"");
	CHECK_EQ_INT(b.req->off, 4096);
	CHECK_EQ_INT(b.req->len, sizeof(buf));
	CHECK(b.req->buf == buf);
	CHECK_EQ_INT(b.req->obj_size, 10000);
	CHECK_EQ_INT(done_calls, 0);
	b.req->done(b.req, (ssize_t)sizeof(buf));      /* the source completes it */
	CHECK_EQ_INT(done_calls, 1);
	CHECK_EQ_INT(done_result, sizeof(buf));
	CHECK(done_req == &req);

	/* No name, an unknown name, a name that is a prefix of one: refused. */
	req.key = "d/x.bin";
	req.key_len = 7;
	CHECK_EQ_INT(fetcher_fetch(route_fetcher(r), &req), -EINVAL);
	req.key = "test\0k";
	req.key_len = 6;
	CHECK_EQ_INT(fetcher_fetch(route_fetcher(r), &req), -EINVAL);
	req.key = "trai\0k";
	CHECK_EQ_INT(fetcher_fetch(route_fetcher(r), &req), -EINVAL);
	CHECK_EQ_INT(a.calls + b.calls, 1);
	CHECK_EQ_INT(done_calls, 1);
	route_destroy(r);
	free(key);
}

static const struct test tests[] = {
	TEST(t_routes_by_name),
	{ 0 },
};

int main(void)
{
	return harness_run("route", tests);
}
