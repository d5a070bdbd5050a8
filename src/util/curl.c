/*
 * curl — libcurl's process-wide start and its error mapping (see
 * feedfs/util_curl.h).
 */
#include "feedfs/util_curl.h"

#include <errno.h>
#include <pthread.h>

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

int util_curl_init(void)
{
	pthread_once(&curl_once, curl_init_once);
	return curl_init_rc == CURLE_OK ? 0 : -EIO;
}

int util_curl_errno(CURLcode cc, int *retry)
{
	int again = 1, err;

	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		err = -EHOSTUNREACH;
		break;
	case CURLE_COULDNT_CONNECT:
		err = -ECONNREFUSED;
		break;
	case CURLE_OPERATION_TIMEDOUT:
		err = -ETIMEDOUT;
		break;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL:
		again = 0;      /* a wrong certificate or URL will not fix itself */
		err = -EIO;
		break;
	case CURLE_OUT_OF_MEMORY:
		again = 0;
		err = -ENOMEM;
		break;
	default:
		err = -EIO;
		break;
	}
	if (retry)
		*retry = again;
	return err;
}
