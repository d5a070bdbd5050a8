/*
 * http — the one blocking HTTP call the credential providers need: a fresh
 * libcurl easy handle per request, short timeouts, no redirects, http/https
 * only, a capped response body that is wiped when freed.
 *
 * This is deliberately separate from the data path's curl multi handle (owned
 * by the s3 http thread): credential loads are rare, run on the chain's
 * refresher thread or in creds_chain_new(), and must not queue behind reads.
 */
#include "creds_i.h"

#include "feedfs/buf.h"
#include "feedfs/util.h"
#include "feedfs/util_curl.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct body {
	struct util_buf b;      /* .wipe: a body may carry credentials */
	int too_big;
};

static size_t on_data(char *p, size_t size, size_t n, void *arg)
{
	struct body *bd = arg;
	size_t add = size * n;

	if (bd->b.len + add > CREDS_HTTP_MAX_BODY) {
		bd->too_big = 1;
		return 0;
	}
	return util_buf_append(&bd->b, p, add) ? 0 : add;
}

int creds_http(const struct creds_http_req *rq, struct creds_http_resp *rs, char *err)
{
	struct curl_slist *hdrs = NULL;
	struct body b = { .b.wipe = 1 };
	char cerr[CURL_ERROR_SIZE] = "";
	CURL *h;
	CURLcode rc;
	int ret = 0;

	memset(rs, 0, sizeof(*rs));
	if (util_curl_init()) {
		creds_reason(err, "libcurl initialisation failed");
		return -EIO;
	}
	h = curl_easy_init();
	if (!h) {
		creds_reason(err, "libcurl: no handle");
		return -ENOMEM;
	}
	for (const char *const *p = rq->headers; p && *p; p++)
		hdrs = curl_slist_append(hdrs, *p);
	/* No "Expect: 100-continue" round trip for a small POST/PUT. */
	hdrs = curl_slist_append(hdrs, "Expect:");

	curl_easy_setopt(h, CURLOPT_URL, rq->url);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "feedfs-creds");
	if (rq->no_proxy)
		curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
	if (!strcmp(rq->method, "POST") || !strcmp(rq->method, "PUT")) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, rq->body ? rq->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)(rq->body ? rq->body_len : 0));
		if (!strcmp(rq->method, "PUT"))
			curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
	}

	rc = curl_easy_perform(h);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &rs->status);
		rs->len = b.b.len;
		rs->body = util_buf_take(&b.b);   /* not NULL: a failed append fails the transfer */
		if (!rs->body) {
			rs->len = 0;
			rs->body = xstrdup("");
		}
	} else if (b.too_big) {
		creds_reason(err, "response larger than %d bytes", CREDS_HTTP_MAX_BODY);
		ret = -EMSGSIZE;
	} else {
		/* curl's message names the host and the cause; never a header. */
		creds_reason(err, "%s", cerr[0] ? cerr : curl_easy_strerror(rc));
		ret = util_curl_errno(rc, NULL);
	}
	util_buf_free(&b.b);
	/* The list may hold a token; libcurl frees it without wiping. */
	for (struct curl_slist *l = hdrs; l; l = l->next)
		util_wipe(l->data, strlen(l->data));
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return ret;
}

void creds_http_resp_cleanup(struct creds_http_resp *rs)
{
	if (rs->body) {
		util_wipe(rs->body, rs->len);
		free(rs->body);
	}
	memset(rs, 0, sizeof(*rs));
}

char *creds_url_join(const char *base, const char *path)
{
	size_t bl = strlen(base);

	while (bl && base[bl - 1] == '/')
		bl--;
	while (*path == '/')
		path++;
	return xasprintf("%.*s/%s", (int)bl, base, path);
}
