/*
 * error — the one place where S3 outcomes become errno values.
 *
 * A row matches by S3 error code (exact) or, for rows without a code, by HTTP
 * status range. Code rows are tried first because the code is more specific
 * (a 403 may be AccessDenied, or ExpiredToken which is worth a creds reload;
 * a 503 may be SlowDown). Unknown codes fall through to their status row.
 */
#include "s3_i.h"

#include <errno.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

struct s3_err_row {
	const char *code;   /* NULL: match by status range */
	long status_lo, status_hi;
	int err;            /* positive errno */
	int retry;
};

static const struct s3_err_row s3_err_table[] = {
	/* by code */
	{ "NoSuchKey",                0, 0, ENOENT,    0 },
	{ "NoSuchBucket",             0, 0, ENOENT,    0 },
	{ "NoSuchVersion",            0, 0, ENOENT,    0 },
	{ "AccessDenied",             0, 0, EACCES,    0 },
	{ "AllAccessDisabled",        0, 0, EACCES,    0 },
	{ "AccountProblem",           0, 0, EACCES,    0 },
	{ "InvalidAccessKeyId",       0, 0, EACCES,    0 },
	{ "SignatureDoesNotMatch",    0, 0, EACCES,    0 },
	{ "AuthorizationHeaderMalformed", 0, 0, EACCES, 0 },  /* wrong region */
	{ "InvalidToken",             0, 0, EACCES,    0 },
	{ "ExpiredToken",             0, 0, EACCES,    0 },  /* client reloads creds once */
	{ "TokenRefreshRequired",     0, 0, EACCES,    0 },
	{ "RequestTimeTooSkewed",     0, 0, EACCES,    0 },
	{ "PreconditionFailed",       0, 0, ESTALE,    0 },
	{ "InvalidRange",             0, 0, EINVAL,    0 },
	{ "InvalidArgument",          0, 0, EINVAL,    0 },
	{ "InvalidBucketName",        0, 0, EINVAL,    0 },
	{ "PermanentRedirect",        0, 0, EIO,       0 },  /* bucket in another region */
	{ "NotImplemented",           0, 0, EOPNOTSUPP, 0 },
	{ "SlowDown",                 0, 0, EAGAIN,    1 },
	{ "Throttling",               0, 0, EAGAIN,    1 },
	{ "ThrottlingException",      0, 0, EAGAIN,    1 },
	{ "RequestLimitExceeded",     0, 0, EAGAIN,    1 },
	{ "TooManyRequests",          0, 0, EAGAIN,    1 },
	{ "RequestTimeout",           0, 0, ETIMEDOUT, 1 },  /* 400, but transient */
	{ "InternalError",            0, 0, EIO,       1 },
	{ "ServiceUnavailable",       0, 0, EIO,       1 },
	/* by status, when the code is absent or unknown */
	{ NULL, 400, 400, EINVAL,  0 },
	{ NULL, 401, 401, EACCES,  0 },
	{ NULL, 403, 403, EACCES,  0 },
	{ NULL, 404, 404, ENOENT,  0 },
	{ NULL, 408, 408, ETIMEDOUT, 1 },
	{ NULL, 412, 412, ESTALE,  0 },
	{ NULL, 416, 416, EINVAL,  0 },
	{ NULL, 429, 429, EAGAIN,  1 },
	{ NULL, 500, 599, EIO,     1 },
	{ NULL, 300, 499, EIO,     0 },
};

int s3_error_errno(long status, const char *code, int *retryable)
{
	const struct s3_err_row *row = NULL;
	size_t i, n = sizeof(s3_err_table) / sizeof(s3_err_table[0]);

	if (code && code[0]) {
		for (i = 0; i < n && !row; i++)
			if (s3_err_table[i].code && strcmp(s3_err_table[i].code, code) == 0)
				row = &s3_err_table[i];
	}
	for (i = 0; i < n && !row; i++)
		if (!s3_err_table[i].code && status >= s3_err_table[i].status_lo &&
		    status <= s3_err_table[i].status_hi)
			row = &s3_err_table[i];
	if (retryable)
		*retryable = row ? row->retry : 0;
	return row ? -row->err : -EIO;
}

static void copy_text(xmlNode *n, char *dst, size_t cap)
{
	xmlChar *t = xmlNodeGetContent(n);

	if (t) {
		size_t l = strlen((const char *)t);

		if (l >= cap)
			l = cap - 1;
		memcpy(dst, t, l);
		dst[l] = '\0';
		xmlFree(t);
	}
}

int s3_error_parse(const char *body, size_t len, struct s3_error_info *out)
{
	xmlDoc *doc;
	xmlNode *root, *n;

	memset(out, 0, sizeof(*out));
	if (!body || len == 0 || len > S3_ERRBODY_MAX)
		return -EIO;
	doc = xmlReadMemory(body, (int)len, "error.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		return -EIO;
	root = xmlDocGetRootElement(doc);
	if (!root || strcmp((const char *)root->name, "Error") != 0) {
		xmlFreeDoc(doc);
		return -EIO;
	}
	for (n = root->children; n; n = n->next) {
		if (n->type != XML_ELEMENT_NODE)
			continue;
		if (strcmp((const char *)n->name, "Code") == 0)
			copy_text(n, out->code, sizeof(out->code));
		else if (strcmp((const char *)n->name, "Message") == 0)
			copy_text(n, out->message, sizeof(out->message));
		else if (strcmp((const char *)n->name, "RequestId") == 0)
			copy_text(n, out->request_id, sizeof(out->request_id));
		else if (strcmp((const char *)n->name, "Region") == 0)
			/* AuthorizationHeaderMalformed: where the bucket really is. */
			copy_text(n, out->region, sizeof(out->region));
	}
	xmlFreeDoc(doc);
	return 0;
}
