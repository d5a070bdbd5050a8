/*
 * sources — the file of `feedfs --sources FILE MOUNTPOINT`: several sources
 * in one tree, each the top-level directory NAME.
 *
 * One source a line: NAME URL [key=value,...]. '#' starts a comment line;
 * blank lines are skipped. NAME is a file name (1..255 bytes, not "." or "..",
 * no '/'), unique in the file. URL is a source as on the command line
 * (s3://, oss://, gs://BUCKET[/PREFIX/]). The keys are long options with '_'
 * for '-', as in fstab, from the set that describes a store:
 *   endpoint_url, region, profile, force_path_style, no_sign_request,
 *   list_v1, internal, ca_bundle, no_verify_ssl, snapshot
 * A flag takes no value (force_path_style) or 1/true/yes. A relative
 * snapshot=FILE is taken from the sources file's directory; other paths
 * (ca_bundle) must be absolute. Every other option is the command line's and
 * applies to all sources.
 *
 * Each source's options start as a copy of the command line's (the base) with
 * its own URL and keys applied over them, then checked as a mount would check
 * them. Nothing is printed; a refusal is one line naming the file and line.
 */
#ifndef FEEDFS_SOURCES_H
#define FEEDFS_SOURCES_H

#include <stddef.h>

#include "feedfs/options.h"

#define SOURCES_MAX 64

struct source_spec {
	char *name;                 /* owned */
	int line;                   /* in the file, from 1 */
	char *text;                 /* owned: the line, cut up; the options' strings
				     * (endpoint, region, ...) point into it */
	struct options o;           /* bucket, prefix, snapshot owned (options_free) */
};

/* Read and check path against base. 0 and *out (n entries, 1..SOURCES_MAX),
 * or -errno with one line in msg: "FILE:N: duplicate name 'x'",
 * "FILE:N: unknown key 'y'", "FILE:N: no URL", "FILE: no sources", ... */
int sources_load(const char *path, const struct options *base, struct source_spec **out,
		 size_t *n, char *msg, size_t msg_len);
/* The same from text already read (tests, the fuzzer); name is what lines
 * are reported against. */
int sources_parse(const char *text, size_t len, const char *name, const struct options *base,
		  struct source_spec **out, size_t *n, char *msg, size_t msg_len);
void sources_free(struct source_spec *s, size_t n);

#endif
