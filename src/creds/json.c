/*
 * json — a small strict JSON parser for credential documents (RFC 8259).
 *
 * Builds a tiny DOM: the documents are a few hundred bytes. Strict on purpose:
 * no comments, no trailing commas, no leading zeros, no raw control characters
 * in strings, valid \u escapes only (surrogate pairs combined, lone surrogates
 * rejected), exactly one value, nesting capped at JSON_MAX_DEPTH. Every string
 * is wiped when freed because some of them are secrets.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct jp {
	const char *p, *end;
	int depth;
};

static void skip_ws(struct jp *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hex4(const char *p, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++) {
		char c = p[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xC0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xE0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		o[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	o[0] = (char)(0xF0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	o[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

/* At the opening quote. The decoded string is never longer than the source. */
static int parse_string(struct jp *j, char **out, size_t *out_len)
{
	const char *s = ++j->p;
	char *buf, *o;

	while (j->p < j->end && *j->p != '"') {
		if (*j->p == '\\')
			j->p++;
		j->p++;
	}
	if (j->p >= j->end)
		return -EINVAL;
	buf = o = xmalloc((size_t)(j->p - s) + 1);
	for (const char *p = s; p < j->p; p++) {
		unsigned char c = (unsigned char)*p;

		if (c < 0x20)
			goto bad;
		if (c != '\\') {
			*o++ = (char)c;
			continue;
		}
		p++;
		switch (*p) {
		case '"': *o++ = '"'; break;
		case '\\': *o++ = '\\'; break;
		case '/': *o++ = '/'; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			unsigned cp, lo;

			if (j->p - p < 5 || hex4(p + 1, &cp))
				goto bad;
			p += 4;
			if (cp >= 0xDC00 && cp <= 0xDFFF)
				goto bad;
			if (cp >= 0xD800 && cp <= 0xDBFF) {
				if (j->p - p < 7 || p[1] != '\\' || p[2] != 'u' || hex4(p + 3, &lo) ||
				    lo < 0xDC00 || lo > 0xDFFF)
					goto bad;
				p += 6;
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
			}
			o += put_utf8(o, cp);
			break;
		}
		default:
			goto bad;
		}
	}
	*o = '\0';
	*out_len = (size_t)(o - buf);
	*out = buf;
	j->p++;   /* closing quote */
	return 0;
bad:
	util_wipe(buf, (size_t)(j->p - s) + 1);
	free(buf);
	return -EINVAL;
}

static int parse_number(struct jp *j, double *out)
{
	const char *s = j->p;
	char tmp[64];
	char *end;

	if (j->p < j->end && *j->p == '-')
		j->p++;
	if (j->p >= j->end)
		return -EINVAL;
	if (*j->p == '0') {
		j->p++;
	} else if (*j->p >= '1' && *j->p <= '9') {
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	} else {
		return -EINVAL;
	}
	if (j->p < j->end && *j->p == '.') {
		j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return -EINVAL;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
		j->p++;
		if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
			j->p++;
		if (j->p >= j->end || *j->p < '0' || *j->p > '9')
			return -EINVAL;
		while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if ((size_t)(j->p - s) >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, s, (size_t)(j->p - s));
	tmp[j->p - s] = '\0';
	*out = strtod(tmp, &end);
	return isfinite(*out) ? 0 : -EINVAL;
}

static int literal(struct jp *j, const char *word)
{
	size_t n = strlen(word);

	if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
		return -EINVAL;
	j->p += n;
	return 0;
}

static int parse_value(struct jp *j, struct json_value *v);

static void push(struct json_value *v, size_t *cap)
{
	if (v->n < *cap)
		return;
	*cap = *cap ? *cap * 2 : 4;
	v->items = realloc(v->items, *cap * sizeof(*v->items));
	if (v->type == JSON_OBJECT)
		v->keys = realloc(v->keys, *cap * sizeof(*v->keys));
	if (!v->items || (v->type == JSON_OBJECT && !v->keys))
		abort();
}

static int parse_container(struct jp *j, struct json_value *v, char close)
{
	size_t cap = 0;
	int rc;

	if (++j->depth > JSON_MAX_DEPTH)
		return -EINVAL;
	j->p++;
	skip_ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		j->depth--;
		return 0;
	}
	for (;;) {
		char *key = NULL;
		size_t klen;

		skip_ws(j);
		if (v->type == JSON_OBJECT) {
			if (j->p >= j->end || *j->p != '"')
				return -EINVAL;
			if ((rc = parse_string(j, &key, &klen)))
				return rc;
			skip_ws(j);
			if (j->p >= j->end || *j->p != ':') {
				free(key);
				return -EINVAL;
			}
			j->p++;
		}
		push(v, &cap);
		memset(&v->items[v->n], 0, sizeof(v->items[v->n]));
		if (v->type == JSON_OBJECT)
			v->keys[v->n] = key;
		v->n++;   /* counted before parsing so json_free sees it */
		if ((rc = parse_value(j, &v->items[v->n - 1])))
			return rc;
		skip_ws(j);
		if (j->p < j->end && *j->p == ',') {
			j->p++;
			continue;
		}
		if (j->p < j->end && *j->p == close) {
			j->p++;
			j->depth--;
			return 0;
		}
		return -EINVAL;
	}
}

static int parse_value(struct jp *j, struct json_value *v)
{
	memset(v, 0, sizeof(*v));
	skip_ws(j);
	if (j->p >= j->end)
		return -EINVAL;
	switch (*j->p) {
	case '{':
		v->type = JSON_OBJECT;
		return parse_container(j, v, '}');
	case '[':
		v->type = JSON_ARRAY;
		return parse_container(j, v, ']');
	case '"':
		v->type = JSON_STRING;
		return parse_string(j, &v->str, &v->str_len);
	case 't':
		v->type = JSON_BOOL;
		v->num = 1;
		return literal(j, "true");
	case 'f':
		v->type = JSON_BOOL;
		return literal(j, "false");
	case 'n':
		v->type = JSON_NULL;
		return literal(j, "null");
	default:
		v->type = JSON_NUMBER;
		return parse_number(j, &v->num);
	}
}

int json_parse(const char *s, size_t len, struct json_value *out)
{
	struct jp j = { s, s + len, 0 };
	int rc;

	rc = parse_value(&j, out);
	if (rc == 0) {
		skip_ws(&j);
		if (j.p != j.end)
			rc = -EINVAL;
	}
	if (rc)
		json_free(out);
	return rc;
}

void json_free(struct json_value *v)
{
	if (!v)
		return;
	if (v->str) {
		util_wipe(v->str, v->str_len);
		free(v->str);
	}
	for (size_t i = 0; i < v->n; i++) {
		if (v->keys)
			free(v->keys[i]);
		json_free(&v->items[i]);
	}
	free(v->keys);
	free(v->items);
	memset(v, 0, sizeof(*v));
}

const struct json_value *json_get(const struct json_value *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}

const char *json_get_str(const struct json_value *obj, const char *key)
{
	const struct json_value *v = json_get(obj, key);

	return v && v->type == JSON_STRING ? v->str : NULL;
}

int creds_from_aws_json(const struct json_value *obj, struct s3_creds *out, char *reason)
{
	const char *ak = json_get_str(obj, "AccessKeyId");
	const char *sk = json_get_str(obj, "SecretAccessKey");
	const char *tok = json_get_str(obj, "Token");
	const char *exp = json_get_str(obj, "Expiration");
	int64_t exp_ms = 0;

	memset(out, 0, sizeof(*out));
	if (!obj || obj->type != JSON_OBJECT) {
		creds_reason(reason, "response is not a JSON object");
		return -EINVAL;
	}
	if (!tok)
		tok = json_get_str(obj, "SessionToken");
	if (!ak || !*ak || !sk || !*sk) {
		creds_reason(reason, "response lacks %s", !ak || !*ak ? "AccessKeyId" :
			     "SecretAccessKey");
		return -EINVAL;
	}
	if (exp && util_parse_iso8601_ms(exp, &exp_ms)) {
		creds_reason(reason, "unparseable Expiration '%.40s'", exp);
		return -EINVAL;
	}
	return creds_fill(out, ak, sk, tok, exp_ms);
}
