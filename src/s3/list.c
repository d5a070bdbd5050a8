/*
 * list — ListObjectsV2 and ListObjects V1 response parsing.
 *
 * The body is parsed into a libxml2 tree (a page is at most ~1000 entries, a few
 * hundred KiB) and walked element by element; anything that does not fit the
 * schema we rely on (missing Key, unparsable Size, truncated without a token)
 * rejects the whole page with -EIO rather than guessing. Keys and prefixes are
 * decoded only when the response itself says <EncodingType>url</EncodingType>:
 * some servers ignore the encoding-type request parameter, and decoding a raw
 * key such as "a+b%25" would silently rename it.
 */
#include "s3_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

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

/* S3 encodes listing keys form-style (space as '+', '+' as %2B), hence '+' -> ' '. */
char *s3_url_decode(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(len + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '%') {
			int hi, lo;

			if (i + 2 >= len) {
				free(out);
				return NULL;
			}
			hi = hexval((unsigned char)s[i + 1]);
			lo = hexval((unsigned char)s[i + 2]);
			if (hi < 0 || lo < 0) {
				free(out);
				return NULL;
			}
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else if (s[i] == '+') {
			out[o++] = ' ';
		} else {
			out[o++] = s[i];
		}
	}
	out[o] = '\0';
	*out_len = o;
	return out;
}

static int name_is(const xmlNode *n, const char *name)
{
	return n->type == XML_ELEMENT_NODE && strcmp((const char *)n->name, name) == 0;
}

/* Text of an element as malloc'd bytes, decoded when url is set. */
static int node_bytes(xmlNode *n, int url, char **out, size_t *out_len)
{
	xmlChar *t = xmlNodeGetContent(n);
	size_t l;

	if (!t)
		return -EIO;
	l = strlen((const char *)t);
	if (url) {
		*out = s3_url_decode((const char *)t, l, out_len);
	} else {
		*out = malloc(l + 1);
		if (*out) {
			memcpy(*out, t, l + 1);
			*out_len = l;
		}
	}
	xmlFree(t);
	return *out ? 0 : -EIO;
}

static int node_u64(xmlNode *n, uint64_t *v)
{
	xmlChar *t = xmlNodeGetContent(n);
	char *end;
	int ret = -EIO;

	if (!t)
		return -EIO;
	if (t[0] >= '0' && t[0] <= '9') {
		errno = 0;
		*v = strtoull((const char *)t, &end, 10);
		if (errno == 0 && *end == '\0')
			ret = 0;
	}
	xmlFree(t);
	return ret;
}

static int parse_contents(xmlNode *c, int url, struct s3_object *o)
{
	int have_key = 0, have_size = 0;

	for (xmlNode *n = c->children; n; n = n->next) {
		if (name_is(n, "Key")) {
			if (have_key || node_bytes(n, url, &o->key, &o->key_len))
				return -EIO;
			have_key = 1;
		} else if (name_is(n, "Size")) {
			if (node_u64(n, &o->size))
				return -EIO;
			have_size = 1;
		} else if (name_is(n, "LastModified")) {
			xmlChar *t = xmlNodeGetContent(n);
			int r = t ? util_parse_iso8601_ms((const char *)t, &o->mtime_ms) : -EIO;

			xmlFree(t);
			if (r)
				return -EIO;
		} else if (name_is(n, "ETag")) {
			xmlChar *t = xmlNodeGetContent(n);

			/* An ETag too long to keep is dropped, not truncated: a cut
			 * ETag would make every If-Match fail. */
			if (t && strlen((const char *)t) < S3_ETAG_MAX)
				strcpy(o->etag, (const char *)t);
			xmlFree(t);
		}
	}
	return have_key && have_size && o->key_len > 0 ? 0 : -EIO;
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

static int list_parse(const char *body, size_t len, int v1, struct s3_list_page *out)
{
	xmlDoc *doc = NULL;
	xmlNode *root, *n;
	size_t n_obj = 0, n_pre = 0;
	int url = 0, have_trunc = 0, ret = -EIO;
	char *next_marker = NULL;

	memset(out, 0, sizeof(*out));
	if (!body || len == 0 || len > S3_LISTBODY_MAX)
		return -EIO;
	doc = xmlReadMemory(body, (int)len, "list.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
	if (!doc)
		return -EIO;
	root = xmlDocGetRootElement(doc);
	if (!root || strcmp((const char *)root->name, "ListBucketResult") != 0)
		goto out;

	/* First pass: encoding and sizes, so the second can decode and fill. */
	for (n = root->children; n; n = n->next) {
		if (name_is(n, "EncodingType")) {
			xmlChar *t = xmlNodeGetContent(n);

			url = t && strcmp((const char *)t, "url") == 0;
			xmlFree(t);
		} else if (name_is(n, "Contents")) {
			n_obj++;
		} else if (name_is(n, "CommonPrefixes")) {
			n_pre++;
		}
	}
	out->objects = calloc(n_obj ? n_obj : 1, sizeof(*out->objects));
	out->prefixes = calloc(n_pre ? n_pre : 1, sizeof(*out->prefixes));
	out->prefix_lens = calloc(n_pre ? n_pre : 1, sizeof(*out->prefix_lens));
	if (!out->objects || !out->prefixes || !out->prefix_lens)
		goto out;

	for (n = root->children; n; n = n->next) {
		if (name_is(n, "Contents")) {
			struct s3_object *o = &out->objects[out->n_objects++];

			if (parse_contents(n, url, o))
				goto out;
		} else if (name_is(n, "CommonPrefixes")) {
			int found = 0;

			for (xmlNode *p = n->children; p; p = p->next) {
				if (!name_is(p, "Prefix") || found)
					continue;
				if (node_bytes(p, url, &out->prefixes[out->n_prefixes],
					       &out->prefix_lens[out->n_prefixes]))
					goto out;
				out->n_prefixes++;
				found = 1;
			}
			if (!found)
				goto out;
		} else if (name_is(n, "IsTruncated")) {
			xmlChar *t = xmlNodeGetContent(n);

			if (t && strcmp((const char *)t, "true") == 0)
				out->truncated = 1;
			else if (!t || strcmp((const char *)t, "false") != 0) {
				xmlFree(t);
				goto out;
			}
			xmlFree(t);
			have_trunc = 1;
		} else if (!v1 && name_is(n, "NextContinuationToken")) {
			size_t l;

			free(out->next_token);
			if (node_bytes(n, 0, &out->next_token, &l))
				goto out;
		} else if (v1 && name_is(n, "NextMarker")) {
			size_t l;

			/* Encoded like the keys when encoding-type=url was honoured. */
			free(next_marker);
			next_marker = NULL;
			if (node_bytes(n, url, &next_marker, &l) || memchr(next_marker, '\0', l))
				goto out;
		}
	}
	if (!have_trunc)
		goto out;
	if (v1 && out->truncated) {
		out->next_token = next_marker && next_marker[0] ? next_marker : v1_last_name(out);
		if (out->next_token == next_marker)
			next_marker = NULL;
	}
	if (out->truncated && (!out->next_token || !out->next_token[0]))
		goto out;      /* we could not ask for the next page */
	if (!out->truncated) {
		free(out->next_token);
		out->next_token = NULL;
	}
	ret = 0;
out:
	free(next_marker);
	xmlFreeDoc(doc);
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
