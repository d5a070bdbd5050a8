/*
 * webid — web identity federation (EKS IRSA): a projected service-account
 * token exchanged at AWS STS AssumeRoleWithWebIdentity for temporary keys.
 *
 * Configured by AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (both required;
 * one without the other is an error), AWS_ROLE_SESSION_NAME (default
 * "feedfs-<pid>"). The call is unsigned (the token is the proof): a form POST
 * to $AWS_ENDPOINT_URL_STS, else $AWS_ENDPOINT_URL, else the regional endpoint
 * https://sts.<region>.amazonaws.com (region from creds_options, $AWS_REGION,
 * $AWS_DEFAULT_REGION), else https://sts.amazonaws.com. The token file is
 * re-read on every load because the kubelet rotates it.
 *
 * The XML answer is parsed with libxml2 with network access and entity
 * expansion off; elements are matched by local name so the STS namespace
 * version does not matter. Text nodes are wiped before the tree is freed.
 */
#include "creds_i.h"

#include "feedfs/util.h"

#include <errno.h>
#include <pthread.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static xmlNode *child(xmlNode *n, const char *name)
{
	for (xmlNode *c = n ? n->children : NULL; c; c = c->next)
		if (c->type == XML_ELEMENT_NODE && !strcmp((const char *)c->name, name))
			return c;
	return NULL;
}

/* The text of an element with only text (no markup) inside, or NULL. */
static const char *text(xmlNode *n)
{
	if (!n || !n->children)
		return NULL;
	if (n->children->type != XML_TEXT_NODE || n->children->next)
		return NULL;
	return (const char *)n->children->content;
}

static void wipe_tree(xmlNode *n)
{
	for (; n; n = n->next) {
		if ((n->type == XML_TEXT_NODE || n->type == XML_CDATA_SECTION_NODE) && n->content)
			util_wipe(n->content, strlen((const char *)n->content));
		wipe_tree(n->children);
	}
}

static pthread_once_t xml_once = PTHREAD_ONCE_INIT;

static void xml_init(void)
{
	xmlInitParser();   /* idempotent; must precede parsing from several threads */
}

int creds_parse_sts_xml(const char *xml, size_t len, struct s3_creds *out, char *reason)
{
	xmlDoc *doc;
	xmlNode *root, *cr;
	const char *ak, *sk, *tok, *exp;
	int64_t exp_ms = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	pthread_once(&xml_once, xml_init);
	if (len > INT32_MAX)
		return -EINVAL;
	doc = xmlReadMemory(xml, (int)len, "sts.xml", NULL,
			    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
			    XML_PARSE_NOCDATA);
	if (!doc) {
		creds_reason(reason, "STS response is not XML");
		return -EINVAL;
	}
	root = xmlDocGetRootElement(doc);
	if (root && !strcmp((const char *)root->name, "ErrorResponse")) {
		xmlNode *err = child(root, "Error");
		const char *code = text(child(err, "Code")), *msg = text(child(err, "Message"));

		creds_reason(reason, "STS error %.64s: %.160s", code ? code : "(no code)",
			     msg ? msg : "");
		rc = code && (!strcmp(code, "InvalidIdentityToken") ||
			      !strcmp(code, "ExpiredTokenException") ||
			      !strcmp(code, "AccessDenied") ||
			      !strcmp(code, "IDPRejectedClaim")) ? -EACCES : -EIO;
		goto out;
	}
	cr = child(child(root, "AssumeRoleWithWebIdentityResult"), "Credentials");
	if (!root || strcmp((const char *)root->name, "AssumeRoleWithWebIdentityResponse") || !cr) {
		creds_reason(reason, "STS response has no AssumeRoleWithWebIdentityResult/Credentials");
		rc = -EINVAL;
		goto out;
	}
	ak = text(child(cr, "AccessKeyId"));
	sk = text(child(cr, "SecretAccessKey"));
	tok = text(child(cr, "SessionToken"));
	exp = text(child(cr, "Expiration"));
	if (!ak || !sk || !tok || !exp) {
		creds_reason(reason, "STS Credentials lack %s", !ak ? "AccessKeyId" :
			     !sk ? "SecretAccessKey" : !tok ? "SessionToken" : "Expiration");
		rc = -EINVAL;
		goto out;
	}
	if (util_parse_iso8601_ms(exp, &exp_ms)) {
		creds_reason(reason, "STS Expiration '%.40s' is not a time", exp);
		rc = -EINVAL;
		goto out;
	}
	rc = creds_fill(out, ak, sk, tok, exp_ms);
out:
	wipe_tree(xmlDocGetRootElement(doc));
	xmlFreeDoc(doc);
	return rc;
}

/* ---- the provider ------------------------------------------------------------- */

/* STS endpoint from the environment and region, shared with nothing else. */
static char *sts_endpoint(const struct creds_options *o)
{
	const char *v = util_getenv_nonempty("AWS_ENDPOINT_URL_STS");
	const char *region = o && o->region ? o->region : util_getenv_nonempty("AWS_REGION");

	if (!v)
		v = util_getenv_nonempty("AWS_ENDPOINT_URL");
	if (v)
		return xstrdup(v);
	if (!region)
		region = util_getenv_nonempty("AWS_DEFAULT_REGION");
	if (region)
		return xasprintf("https://sts.%s.amazonaws.com%s", region,
				 !strncmp(region, "cn-", 3) ? ".cn" : "");
	return xstrdup("https://sts.amazonaws.com");
}

int creds_webid_new(const struct creds_options *o, void **state)
{
	struct creds_sts_role *st = xcalloc(1, sizeof(*st));
	const char *tf = util_getenv_nonempty("AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *arn = util_getenv_nonempty("AWS_ROLE_ARN");
	const char *sn = util_getenv_nonempty("AWS_ROLE_SESSION_NAME");

	*state = st;
	if (!tf && !arn) {
		creds_reason(st->m.reason, "AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN not set");
		return 0;
	}
	if (!tf || !arn) {
		st->half_configured = 1;
		creds_reason(st->m.reason, "%s is set but %s is not",
			     tf ? "AWS_WEB_IDENTITY_TOKEN_FILE" : "AWS_ROLE_ARN",
			     tf ? "AWS_ROLE_ARN" : "AWS_WEB_IDENTITY_TOKEN_FILE");
		return 0;
	}
	st->token_file = xstrdup(tf);
	st->role_arn = xstrdup(arn);
	st->session_name = sn ? xstrdup(sn) : xasprintf("feedfs-%ld", (long)getpid());
	st->endpoint = sts_endpoint(o);
	return 0;
}

static char *webid_form(const struct creds_sts_role *r, const char *token)
{
	char *e_arn = util_uri_encode(r->role_arn, strlen(r->role_arn), 0);
	char *e_sn = util_uri_encode(r->session_name, strlen(r->session_name), 0);
	char *e_tok = util_uri_encode(token, strlen(token), 0);
	char *body = xasprintf("Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s"
			       "&RoleSessionName=%s&WebIdentityToken=%s", e_arn, e_sn, e_tok);

	free(e_arn);
	free(e_sn);
	creds_free_secret(e_tok);
	return body;
}

static const struct creds_sts_kind webid_kind = {
	.token_what = "web identity token",
	.accept = "Accept: application/xml",
	.form = webid_form,
	.parse = creds_parse_sts_xml,
};

static int webid_load(void *state, struct s3_creds *out)
{
	return creds_sts_role_load(state, &webid_kind, out);
}

const struct creds_provider_ops creds_webid_ops = {
	.name = "web-identity",
	.load = webid_load,
	.destroy = creds_sts_role_destroy,
	.explain = creds_state_explain,
	.detail = creds_state_detail,
};
