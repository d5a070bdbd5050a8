/*
 * source — which source a path of the tree belongs to (fs_i.h).
 *
 * DESIGN
 * A mount serves one source (a bucket prefix, its S3 client, its read path,
 * maybe a snapshot) as the whole tree, or several (--sources, sources.h), each
 * as the top-level directory of its name. Everything in src/fs/ that turns a
 * path into a request asks here: fs_src_of gives the source and the path
 * inside it, and the key, the client, the read path and the snapshot are that
 * source's. With one source nothing changes: it covers the tree and the path
 * is its own. With several, the root is a listing of the names, built once
 * (fs->root_listing, never expiring, never in the bounded cache), so a
 * lookup or readdir at the root never reaches a store; a name that is no
 * source is ENOENT there. Paths are unique across sources (they start with
 * the name), so inode numbers, the listing cache and the keeper's log need no
 * source of their own.
 */
#include "fs_i.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "feedfs/route.h"
#include "feedfs/util.h"

const struct fs_src *fs_src_of(const struct fs *fs, const char *path, size_t len,
			       const char **rel, size_t *rel_len)
{
	const char *slash;
	size_t first;

	if (!fs->multi) {
		*rel = path;
		*rel_len = len;
		return &fs->src[0];
	}
	if (len == 0)
		return NULL;
	slash = memchr(path, '/', len);
	first = slash ? (size_t)(slash - path) : len;
	for (size_t i = 0; i < fs->n_src; i++) {
		const struct fs_src *s = &fs->src[i];

		if (s->name_len == first && memcmp(s->name, path, first) == 0) {
			*rel = slash ? slash + 1 : path + len;
			*rel_len = slash ? len - first - 1 : 0;
			return s;
		}
	}
	return NULL;
}

const struct snap *fs_path_snap(const struct fs *fs, const char *path, size_t len)
{
	const char *rel;
	size_t rl;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rl);

	return s ? s->snap : NULL;
}

int fs_path_listed(const struct fs *fs, const char *path, size_t len)
{
	const char *rel;
	size_t rl;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rl);

	return s && !s->snap;
}

struct s3_client *fs_path_s3(const struct fs *fs, const char *path, size_t len)
{
	const char *rel;
	size_t rl;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rl);

	return s ? s->s3 : NULL;
}

const struct rd_config *fs_path_rd(const struct fs *fs, const char *path, size_t len)
{
	const char *rel;
	size_t rl;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rl);

	return s ? &s->rd : NULL;
}

int fs_path_read_key(const struct fs *fs, const char *path, size_t len, char **key,
		     size_t *key_len)
{
	const char *rel;
	size_t rl, kl;
	const struct fs_src *s = fs_src_of(fs, path, len, &rel, &rl);
	char *k, *routed;
	int r = fs_path_key(fs, path, len, 0, &k, &kl);

	if (r < 0 || !fs->opts.route_keys || !s || !s->name)
		goto out;
	routed = route_key(s->name, s->name_len, k, kl, &kl);
	free(k);
	if (!routed)
		return -ENOMEM;
	k = routed;
out:
	if (r == 0) {
		*key = k;
		*key_len = kl;
	}
	return r;
}

int fs_src_init(struct fs *fs, const struct fs_options *opts, struct s3_client *s3,
		const struct rd_config *rd)
{
	size_t n = opts->n_sources ? opts->n_sources : 1;

	fs->src = calloc(n, sizeof(*fs->src));
	if (!fs->src)
		return -ENOMEM;
	fs->n_src = n;
	fs->multi = opts->n_sources > 0;
	for (size_t i = 0; i < n; i++) {
		struct fs_src *d = &fs->src[i];
		const struct fs_source *o = fs->multi ? &opts->sources[i] : NULL;

		d->name = o ? o->name : NULL;
		d->name_len = o ? strlen(o->name) : 0;
		d->prefix = strdup(o ? o->prefix : opts->prefix ? opts->prefix : "");
		if (!d->prefix)
			return -ENOMEM;
		d->prefix_len = strlen(d->prefix);
		d->s3 = o ? o->s3 : s3;
		d->snap = o ? o->snap : opts->snap;
		d->rd = o ? *o->rd : *rd;
	}
	if (!fs->multi)
		return 0;
	/* The root: the names, as directories, for good. */
	fs->root_listing = fs_listing_new(util_now_ms());
	if (!fs->root_listing)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		size_t idx;

		if (fs_listing_add(fs->root_listing, fs->src[i].name, fs->src[i].name_len, 1, 0, 0,
				   NULL, &idx) == FS_ADD_NOMEM)
			return -ENOMEM;
	}
	fs_listing_done(fs->root_listing);
	return 0;
}

void fs_src_cleanup(struct fs *fs)
{
	for (size_t i = 0; fs->src && i < fs->n_src; i++)
		free(fs->src[i].prefix);
	free(fs->src);
	fs->src = NULL;
	if (fs->root_listing)
		fs_listing_put(fs->root_listing);
	fs->root_listing = NULL;
}
