/*
 * fuzz_names — key -> POSIX name mapping (src/fs/names.c): classification of
 * listing items and the per-directory listing. Input: byte 0 splits the rest
 * into a directory prefix and an item. A FILE or DIR verdict must give a name
 * that is a safe path component: not empty, not "." or "..", no '/' or NUL, at
 * most 255 bytes, and inside the item. Bit 0x40 of byte 0 also round-trips
 * the item as prefix + path through the key builders (key_round_trip).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/fs/names_i.h"

/*
 * Path <-> key: the item split at plen into a mount prefix and a path. A key
 * that builds must name the same path again (fs_key_path), hold no NUL, fit
 * FS_KEY_MAX and be exactly prefix + path (+ '/'); and a child path built by
 * fs_path_join from the path's last segment must have, as a file key, the
 * parent's directory-form key followed by the name.
 */
static void key_round_trip(const char *item, size_t plen, size_t ilen, unsigned flags)
{
	const char *path = item + plen, *back, *slash;
	size_t len = ilen - plen, kl, bl;
	char *key;
	int r = fs_key(item, plen, path, len, flags, &key, &kl);

	if (r == -EINVAL && !memchr(item, '\0', ilen))
		abort();
	if (r == -ENAMETOOLONG && ilen + ((flags & FS_KEY_DIR) && len) <= FS_KEY_MAX)
		abort();
	if (r < 0)
		return;
	if (kl > FS_KEY_MAX || strlen(key) != kl || memcmp(key, item, ilen) != 0 ||
	    kl != ilen + ((flags & FS_KEY_DIR) && len))
		abort();
	if (fs_key_path(item, plen, key, kl, flags, &back, &bl) != 0 || bl != len ||
	    memcmp(back, path, len) != 0)
		abort();
	free(key);

	slash = memrchr(path, '/', len);
	{
		const char *name = slash ? slash + 1 : path;
		size_t dl = slash ? (size_t)(slash - path) : 0, nl = len - (size_t)(name - path);
		char *child, *dkey, *fkey;
		size_t cl, dkl, fkl;

		/* "/c" is no path (a leading '/'): its "directory" would be the
		 * root, whose child is "c". */
		if (slash == path)
			return;
		if (fs_path_join(path, dl, name, nl, &child, &cl) != 0)
			return;
		if (cl != len || memcmp(child, path, len) != 0)
			abort();
		if (fs_key(item, plen, child, cl, 0, &fkey, &fkl) != 0)
			abort();        /* it built above */
		if (fs_key(item, plen, path, dl, FS_KEY_DIR, &dkey, &dkl) == 0) {
			if (fkl != dkl + nl || memcmp(fkey, dkey, dkl) != 0 ||
			    memcmp(fkey + dkl, name, nl) != 0)
				abort();
			free(dkey);
		}
		free(fkey);
		free(child);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *item, *name = NULL;
	size_t plen, ilen, nlen = 0;
	enum fs_name_verdict v = FS_NAME_OK;
	enum fs_item_kind k;
	char *copy;

	if (size < 1)
		return 0;
	plen = data[0] % (size);
	if (plen > size - 1)
		plen = size - 1;
	/* the item must start with the prefix (as the listing API guarantees) */
	ilen = size - 1;
	copy = malloc(ilen ? ilen : 1);
	if (!copy)
		return 0;
	memcpy(copy, data + 1, ilen);
	item = copy;
	k = fs_item_classify(item, plen, item, ilen, ilen && item[ilen - 1] == '/', &name,
			     &nlen, &v);
	if (k == FS_ITEM_FILE || k == FS_ITEM_DIR) {
		if (!name || name < item || name + nlen > item + ilen || nlen == 0 ||
		    nlen > FS_NAME_MAX || memchr(name, '/', nlen) || memchr(name, '\0', nlen) ||
		    (nlen == 1 && name[0] == '.') || (nlen == 2 && name[0] == '.' && name[1] == '.'))
			abort();
		if (fs_name_check(name, nlen) != FS_NAME_OK)
			abort();
		{
			struct fs_listing *l = fs_listing_new(0);

			if (l) {
				size_t idx;

				fs_listing_add(l, name, nlen, k == FS_ITEM_DIR, 1, 0, "\"e\"", &idx);
				if (fs_listing_find(l, name, nlen) < 0)
					abort();
				fs_listing_put(l);
			}
		}
	}
	(void)fs_name_check(item, ilen);
	if (data[0] & 0x80) {
		/* The item as a batch of keys ('\n'-separated) placed in a subtree:
		 * every directory path must be made of safe components. */
		struct fs_tree t;

		if (fs_tree_init(&t, "", 0, 0) == 0) {
			const char *q = item, *e = item + ilen;

			while (q < e) {
				const char *nl = memchr(q, '\n', (size_t)(e - q));
				size_t n = nl ? (size_t)(nl - q) : (size_t)(e - q);

				fs_tree_add(&t, q, n, n, 0, "\"e\"");
				q += n + 1;
			}
			fs_tree_finish(&t);
			for (size_t i = 0; i < t.n; i++) {
				const char *d = t.dirs[i].path;
				size_t dl = t.dirs[i].path_len, s = 0;

				for (size_t j = 0; j <= dl; j++) {
					if (j < dl && d[j] != '/')
						continue;
					if (dl && fs_name_check(d + s, j - s) != FS_NAME_OK)
						abort();
					s = j + 1;
				}
			}
			fs_tree_cleanup(&t);
		}
	}
	if (data[0] & 0x40)
		key_round_trip(item, plen, ilen, data[0] & 1 ? FS_KEY_DIR : 0);
	(void)fs_hash64(item, ilen, 7);
	free(copy);
	return 0;
}
