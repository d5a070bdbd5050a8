/*
 * util_curl — what the two libcurl users (the s3 data path's multi handle and
 * the credential providers' blocking easy calls) must agree on: one
 * curl_global_init per process, and one mapping of a failed transfer to errno.
 */
#ifndef FEEDFS_UTIL_CURL_H
#define FEEDFS_UTIL_CURL_H

#include <curl/curl.h>

/* curl_global_init(CURL_GLOBAL_DEFAULT), run once per process whoever calls
 * first (it is not thread-safe itself, so every module goes through here
 * before it makes a handle). 0, or -EIO when libcurl could not start. */
int util_curl_init(void);

/* A transfer that ended with cc != CURLE_OK -> -errno, as s3.h documents:
 *   cannot resolve host or proxy -> -EHOSTUNREACH, cannot connect ->
 *   -ECONNREFUSED, timed out -> -ETIMEDOUT, out of memory -> -ENOMEM,
 *   anything else (TLS, a malformed URL, a reset connection) -> -EIO.
 * *retry (when not NULL) is 1 when another attempt may succeed, 0 for a
 * certificate problem, a malformed URL or an unsupported scheme, which will
 * not fix themselves, and for out of memory. */
int util_curl_errno(CURLcode cc, int *retry);

#endif
