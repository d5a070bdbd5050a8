/*
 * buf — growable byte buffer (see feedfs/buf.h).
 */
#include "feedfs/buf.h"
#include "feedfs/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MIN_CAP 256

int util_buf_reserve(struct util_buf *b, size_t n)
{
	size_t need, cap;
	char *np;

	if (b->oom)
		return -ENOMEM;
	if (n >= (size_t)-1 - b->len)
		goto fail;
	need = b->len + n + 1;
	if (need <= b->cap)
		return 0;
	for (cap = b->cap ? b->cap : BUF_MIN_CAP; cap < need; cap *= 2)
		if (cap > (size_t)-1 / 2) {
			cap = need;
			break;
		}
	if (b->wipe) {
		/* realloc could leave a copy of the secret in freed memory. */
		np = malloc(cap);
		if (np && b->p) {
			memcpy(np, b->p, b->len + 1);
			util_wipe(b->p, b->cap);
			free(b->p);
		}
	} else {
		np = realloc(b->p, cap);
	}
	if (!np)
		goto fail;
	if (!b->p)
		np[0] = '\0';
	b->p = np;
	b->cap = cap;
	return 0;
fail:
	b->oom = 1;
	return -ENOMEM;
}

int util_buf_append(struct util_buf *b, const void *p, size_t n)
{
	int rc = util_buf_reserve(b, n);

	if (rc)
		return rc;
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
	b->p[b->len] = '\0';
	return 0;
}

int util_buf_puts(struct util_buf *b, const char *s)
{
	return util_buf_append(b, s, strlen(s));
}

int util_buf_putc(struct util_buf *b, char c)
{
	return util_buf_append(b, &c, 1);
}

void util_buf_reset(struct util_buf *b)
{
	if (b->p) {
		if (b->wipe)
			util_wipe(b->p, b->len);
		b->p[0] = '\0';
	}
	b->len = 0;
	b->oom = 0;
}

void util_buf_free(struct util_buf *b)
{
	if (b->p && b->wipe)
		util_wipe(b->p, b->cap);
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}

char *util_buf_take(struct util_buf *b)
{
	char *s;

	if (b->oom) {
		util_buf_free(b);
		return NULL;
	}
	s = b->p ? b->p : strdup("");
	b->p = NULL;
	b->len = b->cap = 0;
	return s;
}
