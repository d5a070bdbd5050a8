/*
 * list — ListObjectsV2 and ListObjects V1 response parsing.
 *
 * DESIGN
 * A page (at most ~1000 entries, a few hundred KiB) goes through libxml2's
 * SAX2 push parser in one chunk: one small callback per element start, text
 * and end, and a state that knows where in the schema it is (depth 1 the
 * ListBucketResult, 2 its children, 3 inside a Contents or CommonPrefixes).
 * No document tree is built: walking a million keys, building and freeing
 * that tree took most of the daemon's CPU (malloc per node, several threads'
 * parsers contending for the allocator). Text is collected only for the
 * elements we read, in one buffer reused for the whole page; a key costs one
 * malloc, its own.
 *
 * Anything that does not fit the schema we rely on (missing Key, unparsable
 * Size, truncated without a token, a DTD, XML that is not well formed)
 * rejects the whole page with -EIO rather than guessing. Keys and prefixes
 * are decoded only when the response itself says
 * <EncodingType>url</EncodingType> (which may come after the keys, so they are
 * kept raw and decoded in place at the end): some servers ignore the
 * encoding-type request parameter, and decoding a raw key such as "a+b%25"
 * would silently rename it.
 */
#include "s3_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>

#include "feedfs/buf.h"
#include "feedfs/util.h"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes s[0, len) in place (the result is never longer) and NUL-terminates
 * it: its length, or -1 on a bad escape. S3 encodes listing keys form-style
 * (space as '+', '+' as %2B), hence '+' -> ' '. */
static ssize_t url_decode_inplace(char *s, size_t len)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi, lo;

			if (i + 2 >= len)
				return -1;
			hi = hexval((unsigned char)s[i + 1]);
			lo = hexval((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0)
				return -1;
			s[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else {
			s[o++] = s[i] == '+' ? ' ' : s[i];
		}
	}
	s[o] = '\0';
	return (ssize_t)o;
}

char *s3_url_decode(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(len + 1);
	ssize_t n;

	if (!out)
		return NULL;
	memcpy(out, s, len);
	n = url_decode_inplace(out, len);
	if (n < 0) {
		free(out);
		return NULL;
	}
	*out_len = (size_t)n;
	return out;
}

/* Byte-wise compare of two (possibly NUL-holding) strings. */
static int bytes_cmp(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);

	return c ? c : (al > bl) - (al < bl);
}

/* V1 without NextMarker: the next page starts after the greatest name of this
 * one, key or common prefix (listings are in byte order on real servers; taking
 * the maximum also holds when a server orders them otherwise). */
static char *v1_last_name(const struct s3_list_page *p)
{
	const char *best = NULL;
	size_t best_len = 0;

	for (size_t i = 0; i < p->n_objects; i++)
		if (!best || bytes_cmp(p->objects[i].key, p->objects[i].key_len, best, best_len) > 0) {
			best = p->objects[i].key;
			best_len = p->objects[i].key_len;
		}
	for (size_t i = 0; i < p->n_prefixes; i++)
		if (!best || bytes_cmp(p->prefixes[i], p->prefix_lens[i], best, best_len) > 0) {
			best = p->prefixes[i];
			best_len = p->prefix_lens[i];
		}
	if (!best || memchr(best, '\0', best_len))
		return NULL;    /* a marker travels as a C string */
	return strndup(best, best_len);
}

/* What the text being collected belongs to. */
enum lp_cap { CAP_NONE, CAP_KEY, CAP_SIZE, CAP_MTIME, CAP_ETAG, CAP_PREFIX, CAP_TRUNC,
	      CAP_TOKEN, CAP_MARKER, CAP_ENCODING };

/* The SAX parse's state: where we are in the schema, and the page so far. */
struct lp {
	xmlParserCtxtPtr ctxt;
	struct s3_list_page *out;
	int v1, depth, err, url, have_trunc;
	int in_contents, have_key, have_size;  /* depth 2 is a Contents */
	int in_prefixes, have_prefix;          /* depth 2 is a CommonPrefixes */
	enum lp_cap cap;
	int cap_depth;                         /* the collected element's depth */
	struct util_buf text;                  /* collected text, reused per element */
	size_t obj_cap, pre_cap, len_cap;
	char *next_marker;                     /* V1, raw until decoded */
};

static void lp_fail(struct lp *st)
{
	if (!st->err) {
		st->err = 1;
		xmlStopParser(st->ctxt);
	}
}

/* Room for one more entry in an array of cap entries holding n; 0 or -1. */
static int grow(void **arr, size_t *cap, size_t n, size_t each)
{
	size_t c = *cap ? *cap * 2 : 64;
	void *p;

	if (n < *cap)
		return 0;
	p = realloc(*arr, c * each);
	if (!p)
		return -1;
	memset((char *)p + *cap * each, 0, (c - *cap) * each);
	*arr = p;
	*cap = c;
	return 0;
}

static char *text_dup(const struct lp *st)
{
	char *p = malloc(st->text.len + 1);

	if (p)
		memcpy(p, st->text.len ? st->text.p : "", st->text.len + 1);
	return p;
}

static void capture(struct lp *st, enum lp_cap cap)
{
	st->cap = cap;
	st->cap_depth = st->depth;
	util_buf_reset(&st->text);
}

/* strcmp(name, lit) == 0, with the first byte checked inline: element
 * names are compared a few million times in a walk of a big bucket. */
static inline int name_is(const char *name, const char *lit)
{
	return name[0] == lit[0] && strcmp(name, lit) == 0;
}

static void on_start(void *ctx, const xmlChar *localname, const xmlChar *prefix,
		     const xmlChar *uri, int nb_ns, const xmlChar **ns, int nb_attr,
		     int nb_defaulted, const xmlChar **attrs)
{
	struct lp *st = ctx;
	struct s3_list_page *out = st->out;
	const char *name = (const char *)localname;

	(void)prefix, (void)uri, (void)nb_ns, (void)ns, (void)nb_attr;
	(void)nb_defaulted, (void)attrs;
	st->depth++;
	if (st->err || st->cap != CAP_NONE)
		return;                 /* inside an element whose text we collect */
	if (st->depth == 1) {
		if (!name_is(name, "ListBucketResult"))
			lp_fail(st);
	} else if (st->depth == 2) {
		if (name_is(name, "Contents")) {
			/* Counted at once so that a failure frees its key. */
			if (grow((void **)&out->objects, &st->obj_cap, out->n_objects,
				 sizeof(*out->objects)))
				return lp_fail(st);
			out->n_objects++;
			st->in_contents = 1;
			st->have_key = st->have_size = 0;
		} else if (name_is(name, "CommonPrefixes")) {
			st->in_prefixes = 1;
			st->have_prefix = 0;
		} else if (name_is(name, "IsTruncated")) {
			capture(st, CAP_TRUNC);
		} else if (!st->v1 && name_is(name, "NextContinuationToken")) {
			capture(st, CAP_TOKEN);
		} else if (st->v1 && name_is(name, "NextMarker")) {
			capture(st, CAP_MARKER);
		} else if (name_is(name, "EncodingType")) {
			capture(st, CAP_ENCODING);
		}
	} else if (st->depth == 3 && st->in_contents) {
		if (name_is(name, "Key")) {
			if (st->have_key)
				return lp_fail(st);
			capture(st, CAP_KEY);
		} else if (name_is(name, "Size")) {
			capture(st, CAP_SIZE);
		} else if (name_is(name, "LastModified")) {
			capture(st, CAP_MTIME);
		} else if (name_is(name, "ETag")) {
			capture(st, CAP_ETAG);
		}
	} else if (st->depth == 3 && st->in_prefixes) {
		if (name_is(name, "Prefix") && !st->have_prefix)
			capture(st, CAP_PREFIX);
	}
}

static void on_text(void *ctx, const xmlChar *ch, int len)
{
	struct lp *st = ctx;

	if (st->err || st->cap == CAP_NONE || len <= 0)
		return;
	if (util_buf_append(&st->text, ch, (size_t)len))
		lp_fail(st);
}

/* The collected text of the element that just ended: 0 or -1. */
static int finish(struct lp *st)
{
	struct s3_list_page *out = st->out;
	struct s3_object *o = out->n_objects ? &out->objects[out->n_objects - 1] : NULL;
	const char *t = st->text.len ? st->text.p : "";
	char *end;

	switch (st->cap) {
	case CAP_KEY:
		o->key = text_dup(st);
		o->key_len = st->text.len;
		st->have_key = 1;
		return o->key ? 0 : -1;
	case CAP_SIZE:
		if (t[0] < '0' || t[0] > '9')
			return -1;
		errno = 0;
		o->size = strtoull(t, &end, 10);
		st->have_size = 1;
		return errno == 0 && end == t + st->text.len ? 0 : -1;
	case CAP_MTIME:
		return util_parse_iso8601_ms(t, &o->mtime_ms) ? -1 : 0;
	case CAP_ETAG:
		/* An ETag too long to keep is dropped, not truncated: a cut
		 * ETag would make every If-Match fail. */
		if (st->text.len < S3_ETAG_MAX && !memchr(t, '\0', st->text.len))
			memcpy(o->etag, t, st->text.len + 1);
		return 0;
	case CAP_PREFIX:
		if (grow((void **)&out->prefixes, &st->pre_cap, out->n_prefixes,
			 sizeof(*out->prefixes)) ||
		    grow((void **)&out->prefix_lens, &st->len_cap, out->n_prefixes,
			 sizeof(*out->prefix_lens)))
			return -1;
		out->prefixes[out->n_prefixes] = text_dup(st);
		if (!out->prefixes[out->n_prefixes])
			return -1;
		out->prefix_lens[out->n_prefixes++] = st->text.len;
		st->have_prefix = 1;
		return 0;
	case CAP_TRUNC:
		if (strcmp(t, "true") == 0)
			out->truncated = 1;
		else if (strcmp(t, "false") != 0)
			return -1;
		st->have_trunc = 1;
		return 0;
	case CAP_TOKEN:
		free(out->next_token);
		out->next_token = text_dup(st);
		return out->next_token ? 0 : -1;
	case CAP_MARKER:
		free(st->next_marker);
		st->next_marker = text_dup(st);
		return st->next_marker ? 0 : -1;
	case CAP_ENCODING:
		st->url = strcmp(t, "url") == 0;
		return 0;
	case CAP_NONE:
		break;
	}
	return 0;
}

static void on_end(void *ctx, const xmlChar *localname, const xmlChar *prefix,
		   const xmlChar *uri)
{
	struct lp *st = ctx;

	(void)localname, (void)prefix, (void)uri;
	if (!st->err && st->cap != CAP_NONE && st->depth == st->cap_depth) {
		if (finish(st))
			lp_fail(st);
		st->cap = CAP_NONE;
	}
	if (!st->err && st->depth == 2 && st->in_contents) {
		struct s3_object *o = &st->out->objects[st->out->n_objects - 1];

		if (!st->have_key || !st->have_size || o->key_len == 0)
			lp_fail(st);
		st->in_contents = 0;
	} else if (!st->err && st->depth == 2 && st->in_prefixes) {
		if (!st->have_prefix)
			lp_fail(st);
		st->in_prefixes = 0;
	}
	st->depth--;
}

/* A listing never has a DTD: refusing it keeps entities out entirely. */
static void on_dtd(void *ctx, const xmlChar *name, const xmlChar *external_id,
		   const xmlChar *system_id)
{
	(void)name, (void)external_id, (void)system_id;
	lp_fail(ctx);
}

/* Parse errors show in wellFormed; nothing is printed. */
static void on_error(void *ctx, xmlErrorPtr error)
{
	(void)ctx, (void)error;
}

/* Every key, prefix and V1 marker decoded in place: 0 or -1. */
static int decode_all(struct lp *st)
{
	struct s3_list_page *out = st->out;
	ssize_t n;

	for (size_t i = 0; i < out->n_objects; i++) {
		n = url_decode_inplace(out->objects[i].key, out->objects[i].key_len);
		if (n <= 0)
			return -1;      /* a key that decodes to nothing is no key */
		out->objects[i].key_len = (size_t)n;
	}
	for (size_t i = 0; i < out->n_prefixes; i++) {
		n = url_decode_inplace(out->prefixes[i], out->prefix_lens[i]);
		if (n < 0)
			return -1;
		out->prefix_lens[i] = (size_t)n;
	}
	if (st->next_marker) {
		n = url_decode_inplace(st->next_marker, strlen(st->next_marker));
		if (n < 0 || strlen(st->next_marker) != (size_t)n)
			return -1;      /* a marker travels as a C string */
	}
	return 0;
}

static int list_parse(const char *body, size_t len, int v1, struct s3_list_page *out)
{
	struct lp st = { .out = out, .v1 = v1 };
	xmlSAXHandler sax;
	int ret = -EIO;

	memset(out, 0, sizeof(*out));
	if (!body || len == 0 || len > S3_LISTBODY_MAX)
		return -EIO;
	memset(&sax, 0, sizeof(sax));
	sax.initialized = XML_SAX2_MAGIC;
	sax.startElementNs = on_start;
	sax.endElementNs = on_end;
	sax.characters = on_text;
	sax.cdataBlock = on_text;
	sax.internalSubset = on_dtd;
	sax.serror = on_error;
	st.ctxt = xmlCreatePushParserCtxt(&sax, &st, NULL, 0, NULL);
	if (!st.ctxt)
		return -EIO;
	xmlCtxtUseOptions(st.ctxt, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	xmlParseChunk(st.ctxt, body, (int)len, 1);
	if (!st.ctxt->wellFormed || st.err || !st.have_trunc || st.depth != 0)
		goto out;
	if (st.url && decode_all(&st))
		goto out;
	if (v1 && out->truncated) {
		out->next_token = st.next_marker && st.next_marker[0] ? st.next_marker
								      : v1_last_name(out);
		if (out->next_token == st.next_marker)
			st.next_marker = NULL;
	}
	if (out->truncated && (!out->next_token || !out->next_token[0]))
		goto out;      /* we could not ask for the next page */
	if (!out->truncated) {
		free(out->next_token);
		out->next_token = NULL;
	}
	ret = 0;
out:
	xmlFreeParserCtxt(st.ctxt);
	util_buf_free(&st.text);
	free(st.next_marker);
	if (ret)
		s3_list_page_cleanup(out);
	return ret;
}

int s3_list_parse(const char *body, size_t len, struct s3_list_page *out)
{
	return list_parse(body, len, 0, out);
}

int s3_list_parse_v1(const char *body, size_t len, struct s3_list_page *out)
{
	return list_parse(body, len, 1, out);
}

void s3_list_page_cleanup(struct s3_list_page *p)
{
	size_t i;

	if (!p)
		return;
	for (i = 0; i < p->n_objects; i++)
		s3_object_cleanup(&p->objects[i]);
	for (i = 0; i < p->n_prefixes; i++)
		free(p->prefixes[i]);
	free(p->objects);
	free(p->prefixes);
	free(p->prefix_lens);
	free(p->next_token);
	memset(p, 0, sizeof(*p));
}

void s3_object_cleanup(struct s3_object *o)
{
	if (!o)
		return;
	free(o->key);
	memset(o, 0, sizeof(*o));
}
