/*
 * test_fs_names — key -> name rules, listing merge (dedup, shadowing, stable
 * indexes), subtree listings (many directories from one flat key list, checked
 * against the delimited listing of each), the listing cache (TTL, memory bound,
 * "too big" marks), the path <-> key builders, the inode table (stable
 * numbers, nlookup/forget), and over a real struct fs without FUSE or S3:
 * node attributes and stat/entry fill, the listing install rule and a
 * lookup's page turned into a subtree (node.c, listing.c).
 */
#include "../../src/fs/fs_i.h"      /* first: it sets FUSE_USE_VERSION */
#include "harness.h"

#include <errno.h>
#include <stdlib.h>

#include "../../src/fs/inode_i.h"
#include "../../src/fs/names_i.h"
#include "feedfs/fs.h"
#include "feedfs/s3.h"
#include "feedfs/util.h"

static char long_seg[300];

static void t_name_check(void)
{
	static const struct {
		const char *name;
		size_t len;            /* 0: strlen */
		enum fs_name_verdict want;
	} cases[] = {
		{ "a", 0, FS_NAME_OK },
		{ "file.txt", 0, FS_NAME_OK },
		{ "...", 0, FS_NAME_OK },
		{ ".hidden", 0, FS_NAME_OK },
		{ "..x", 0, FS_NAME_OK },
		{ "x+y%25z", 0, FS_NAME_OK },
		{ "\xe4\xb8\xad\xe6\x96\x87", 0, FS_NAME_OK },  /* 中文 */
		{ "", 0, FS_NAME_EMPTY },
		{ ".", 0, FS_NAME_DOT },
		{ "..", 0, FS_NAME_DOT },
		{ "a\0b", 3, FS_NAME_NUL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].name);

		if (fs_name_check(cases[i].name, len) != cases[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu (%s): got %d want %d", i,
				     cases[i].name, fs_name_check(cases[i].name, len),
				     cases[i].want);
	}
	memset(long_seg, 'a', sizeof(long_seg));
	CHECK_EQ_INT(fs_name_check(long_seg, 255), FS_NAME_OK);
	CHECK_EQ_INT(fs_name_check(long_seg, 256), FS_NAME_TOO_LONG);
	/* 85 three-byte UTF-8 characters = 255 bytes: fine; 86 = 258: too long. */
	{
		char u[86 * 3];

		for (int i = 0; i < 86; i++)
			memcpy(u + i * 3, "\xe6\x96\x87", 3);
		CHECK_EQ_INT(fs_name_check(u, 85 * 3), FS_NAME_OK);
		CHECK_EQ_INT(fs_name_check(u, 86 * 3), FS_NAME_TOO_LONG);
	}
}

static void t_classify(void)
{
	static const struct {
		const char *prefix, *item;
		int is_prefix;
		enum fs_item_kind want;
		const char *name;
	} cases[] = {
		{ "", "a.txt", 0, FS_ITEM_FILE, "a.txt" },
		{ "", "dir/", 1, FS_ITEM_DIR, "dir" },
		{ "p/", "p/a.txt", 0, FS_ITEM_FILE, "a.txt" },
		{ "p/", "p/", 0, FS_ITEM_SELF, NULL },           /* the dir's own marker */
		{ "p/", "p/sub/", 0, FS_ITEM_DIR, "sub" },       /* marker seen as object */
		{ "p/", "p/sub/", 1, FS_ITEM_DIR, "sub" },
		{ "p/", "p/sub/deep.txt", 0, FS_ITEM_DIR, "sub" }, /* undelimited listing */
		{ "p/", "p//", 1, FS_ITEM_HIDDEN, NULL },        /* "p//x": empty segment */
		{ "p/", "p/./", 1, FS_ITEM_HIDDEN, NULL },
		{ "p/", "p/../", 1, FS_ITEM_HIDDEN, NULL },
		{ "p/", "p/.", 0, FS_ITEM_HIDDEN, NULL },
		{ "p/", "p/..", 0, FS_ITEM_HIDDEN, NULL },
		{ "p/", "q/a", 0, FS_ITEM_HIDDEN, NULL },        /* not ours */
		{ "", "\xe4\xb8\xad/", 1, FS_ITEM_DIR, "\xe4\xb8\xad" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *name = NULL;
		size_t nl = 0;
		enum fs_name_verdict why;
		enum fs_item_kind k = fs_item_classify(cases[i].prefix, strlen(cases[i].prefix),
						       cases[i].item, strlen(cases[i].item),
						       cases[i].is_prefix, &name, &nl, &why);

		if (k != cases[i].want) {
			harness_fail(__FILE__, __LINE__, "case %zu (%s): kind %d want %d", i,
				     cases[i].item, k, cases[i].want);
			continue;
		}
		if (cases[i].name && (nl != strlen(cases[i].name) ||
				      memcmp(name, cases[i].name, nl) != 0))
			harness_fail(__FILE__, __LINE__, "case %zu: name '%.*s' want '%s'", i,
				     (int)nl, name, cases[i].name);
	}
	/* NUL inside a key, and a 256-byte segment, are hidden. */
	{
		const char *name;
		size_t nl;
		enum fs_name_verdict why;
		char key[300];

		CHECK_EQ_INT(fs_item_classify("", 0, "a\0b", 3, 0, &name, &nl, &why), FS_ITEM_HIDDEN);
		CHECK_EQ_INT(why, FS_NAME_NUL);
		memset(key, 'k', 256);
		key[256] = '/';
		CHECK_EQ_INT(fs_item_classify("", 0, key, 257, 1, &name, &nl, &why), FS_ITEM_HIDDEN);
		CHECK_EQ_INT(why, FS_NAME_TOO_LONG);
		CHECK_EQ_INT(fs_item_classify("", 0, key, 255, 0, &name, &nl, &why), FS_ITEM_FILE);
	}
}

/* Bytes of a case: a literal (len 0: strlen) or `rep` copies of 'a' (rep > 0). */
struct bytes {
	const char *s;
	size_t len;
	size_t rep;
};

static char *bytes_make(const struct bytes *b, size_t *len)
{
	size_t n = b->rep ? b->rep : b->len ? b->len : strlen(b->s);
	char *p = malloc(n + 1);

	if (b->rep)
		memset(p, 'a', n);
	else
		memcpy(p, b->s, n);
	p[n] = '\0';
	*len = n;
	return p;
}

#define LIT(x) { x, 0, 0 }
#define RAW(x, n) { x, n, 0 }
#define REP(n) { "", 0, n }

static void t_key(void)
{
	static const struct {
		struct bytes prefix, path;
		unsigned flags;
		int want;              /* 0 or -errno */
		const char *key;       /* want == 0; NULL: check the length only */
		size_t key_len;
	} cases[] = {
		{ LIT(""), LIT(""), 0, 0, "", 0 },
		{ LIT(""), LIT(""), FS_KEY_DIR, 0, "", 0 },             /* root of a bucket */
		{ LIT("p/"), LIT(""), FS_KEY_DIR, 0, "p/", 2 },         /* root: never "p//" */
		{ LIT(""), LIT("a.txt"), 0, 0, "a.txt", 5 },
		{ LIT(""), LIT("d/e"), FS_KEY_DIR, 0, "d/e/", 4 },
		{ LIT("p/q/"), LIT("d/f.bin"), 0, 0, "p/q/d/f.bin", 11 },
		{ LIT("p/q/"), LIT("d"), FS_KEY_DIR, 0, "p/q/d/", 6 },
		{ LIT("数据/"), LIT("图片 01.jpg"), 0, 0, "数据/图片 01.jpg", 20 },
		{ LIT("p/"), LIT("sp ace/tab\tx%25"), 0, 0, "p/sp ace/tab\tx%25", 17 },
		/* 1024 bytes is the most; one more is too long. */
		{ REP(24), REP(1000), 0, 0, NULL, 1024 },
		{ REP(24), REP(1001), 0, -ENAMETOOLONG, NULL, 0 },
		{ REP(24), REP(999), FS_KEY_DIR, 0, NULL, 1024 },
		{ REP(24), REP(1000), FS_KEY_DIR, -ENAMETOOLONG, NULL, 0 },
		{ REP(1025), LIT(""), 0, -ENAMETOOLONG, NULL, 0 },
		{ LIT(""), REP(5000), 0, -ENAMETOOLONG, NULL, 0 },
		/* NUL is the one byte a key cannot hold. */
		{ LIT("p/"), RAW("a\0b", 3), 0, -EINVAL, NULL, 0 },
		{ RAW("p\0/", 3), LIT("a"), 0, -EINVAL, NULL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t pl, l, kl = 7777;
		char *pre = bytes_make(&cases[i].prefix, &pl);
		char *path = bytes_make(&cases[i].path, &l);
		char *key = NULL;
		int r = fs_key(pre, pl, path, l, cases[i].flags, &key, &kl);

		if (r != cases[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu: got %d want %d", i, r,
				     cases[i].want);
		if (r == 0 && cases[i].want == 0) {
			const char *back = NULL;
			size_t bl = 0;

			CHECK_EQ_INT(kl, cases[i].key_len);
			CHECK_EQ_INT(strlen(key), kl);       /* NUL-terminated, no NUL inside */
			if (cases[i].key && (kl != cases[i].key_len ||
					     memcmp(key, cases[i].key, kl) != 0))
				harness_fail(__FILE__, __LINE__, "case %zu: key '%s' want '%s'", i,
					     key, cases[i].key);
			/* And back: the key names the same path. */
			CHECK_EQ_INT(fs_key_path(pre, pl, key, kl, cases[i].flags, &back, &bl), 0);
			CHECK_EQ_INT(bl, l);
			CHECK(bl == l && memcmp(back, path, l) == 0);
		}
		if (r < 0)
			CHECK(key == NULL && kl == 7777);     /* outputs untouched on failure */
		free(key);
		free(pre);
		free(path);
	}
}

static void t_key_path(void)
{
	static const struct {
		const char *prefix, *key;
		unsigned flags;
		int want;
		const char *path;
	} cases[] = {
		{ "", "a/b", 0, 0, "a/b" },
		{ "p/", "p/a", 0, 0, "a" },
		{ "p/", "p/", 0, 0, "" },
		{ "p/", "p/", FS_KEY_DIR, 0, "" },
		{ "p/", "p/d/", FS_KEY_DIR, 0, "d" },
		{ "p/", "p/d", FS_KEY_DIR, -EINVAL, NULL },          /* not a directory form */
		{ "p/", "p//", FS_KEY_DIR, -EINVAL, NULL },          /* "p//" is not "p/" */
		{ "p/", "q/a", 0, -EINVAL, NULL },                   /* another prefix */
		{ "p/", "p", 0, -EINVAL, NULL },                     /* shorter than it */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *path = NULL;
		size_t l = 0;
		int r = fs_key_path(cases[i].prefix, strlen(cases[i].prefix), cases[i].key,
				    strlen(cases[i].key), cases[i].flags, &path, &l);

		if (r != cases[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu: got %d want %d", i, r,
				     cases[i].want);
		if (r == 0 && cases[i].path && (l != strlen(cases[i].path) ||
						memcmp(path, cases[i].path, l) != 0))
			harness_fail(__FILE__, __LINE__, "case %zu: path '%.*s' want '%s'", i,
				     (int)l, path, cases[i].path);
	}
}

static void t_path_join(void)
{
	static const struct {
		struct bytes dir, name;
		int want;
		const char *path;      /* NULL: check the length only */
		size_t path_len;
	} cases[] = {
		{ LIT(""), LIT("a"), 0, "a", 1 },
		{ LIT("d"), LIT("a.txt"), 0, "d/a.txt", 7 },
		{ LIT("d/e"), LIT("f"), 0, "d/e/f", 5 },
		{ LIT("数据"), LIT("图片"), 0, "数据/图片", 13 },
		{ LIT("x"), LIT("..."), 0, "x/...", 5 },
		{ LIT(""), REP(255), 0, NULL, 255 },                 /* the longest name */
		{ REP(300), REP(255), 0, NULL, 556 },
		{ LIT(""), REP(256), -ENAMETOOLONG, NULL, 0 },
		{ REP(768), REP(255), 0, NULL, 1024 },               /* as long as any key */
		{ REP(769), REP(255), -ENAMETOOLONG, NULL, 0 },
		{ LIT("d"), LIT(""), -EINVAL, NULL, 0 },
		{ LIT("d"), LIT("."), -EINVAL, NULL, 0 },
		{ LIT("d"), LIT(".."), -EINVAL, NULL, 0 },
		{ LIT("d"), LIT("a/b"), -EINVAL, NULL, 0 },          /* one segment only */
		{ LIT("d"), RAW("a\0b", 3), -EINVAL, NULL, 0 },
		{ RAW("d\0e", 3), LIT("a"), -EINVAL, NULL, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t dl, nl, pl = 7777;
		char *dir = bytes_make(&cases[i].dir, &dl);
		char *name = bytes_make(&cases[i].name, &nl);
		char *path = NULL;
		int r = fs_path_join(dir, dl, name, nl, &path, &pl);

		if (r != cases[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu: got %d want %d", i, r,
				     cases[i].want);
		if (r == 0 && cases[i].want == 0) {
			CHECK_EQ_INT(pl, cases[i].path_len);
			CHECK_EQ_INT(strlen(path), pl);
			if (cases[i].path && (pl != cases[i].path_len ||
					      memcmp(path, cases[i].path, pl) != 0))
				harness_fail(__FILE__, __LINE__, "case %zu: path '%s' want '%s'", i,
					     path, cases[i].path);
			/* The name is the last segment, the directory what precedes it. */
			CHECK(pl >= nl && memcmp(path + pl - nl, name, nl) == 0);
			CHECK(memcmp(path, dir, dl) == 0);
		}
		if (r < 0)
			CHECK(path == NULL && pl == 7777);
		free(path);
		free(dir);
		free(name);
	}
}

/* The public form: what `feedfs warm` hands in is a path the mount showed. */
static void t_key_for_path(void)
{
	static const struct {
		const char *path;
		size_t len;            /* 0: strlen */
		int want;
		const char *key;
	} cases[] = {
		{ "a.jpg", 0, 0, "pre/a.jpg" },
		{ "d/e/f.jpg", 0, 0, "pre/d/e/f.jpg" },
		{ "数据/图片 01.jpg", 0, 0, "pre/数据/图片 01.jpg" },
		{ "", 0, -EINVAL, NULL },
		{ "/a", 0, -EINVAL, NULL },
		{ "a/", 0, -EINVAL, NULL },
		{ "a//b", 0, -EINVAL, NULL },
		{ "a/./b", 0, -EINVAL, NULL },
		{ "../b", 0, -EINVAL, NULL },
		{ "a/..", 0, -EINVAL, NULL },
		{ "a\0b", 3, -EINVAL, NULL },
	};
	char seg[300];
	char *key = NULL;
	size_t kl = 0;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = cases[i].len ? cases[i].len : strlen(cases[i].path);
		int r;

		key = NULL;
		r = fs_key_for_path("pre/", 4, cases[i].path, len, &key, &kl);
		if (r != cases[i].want)
			harness_fail(__FILE__, __LINE__, "case %zu (%s): got %d want %d", i,
				     cases[i].path, r, cases[i].want);
		if (r == 0 && cases[i].key)
			CHECK_STR(key, cases[i].key);
		if (r == 0)
			CHECK_EQ_INT(kl, strlen(cases[i].key));
		free(key);
	}
	/* 255-byte segments are names; 256 are not. */
	memset(seg, 'n', sizeof(seg));
	memcpy(seg, "d/", 2);
	CHECK_EQ_INT(fs_key_for_path("", 0, seg, 2 + 255, &key, &kl), 0);
	CHECK_EQ_INT(kl, 257);
	free(key);
	CHECK_EQ_INT(fs_key_for_path("", 0, seg, 2 + 256, &key, &kl), -ENAMETOOLONG);
	/* Valid segments, but a key over 1024 bytes. */
	{
		char p[1100];

		memset(p, 'x', sizeof(p));
		for (size_t i = 200; i < sizeof(p); i += 201)
			p[i] = '/';
		CHECK_EQ_INT(fs_key_for_path("pre/", 4, p, 1020, &key, &kl), 0);
		CHECK_EQ_INT(kl, 1024);
		free(key);
		CHECK_EQ_INT(fs_key_for_path("pre/", 4, p, 1021, &key, &kl), -ENAMETOOLONG);
	}
}

static void t_listing_merge(void)
{
	struct fs_listing *l = fs_listing_new(100);
	size_t idx;

	CHECK_EQ_INT(fs_listing_add(l, "b", 1, 0, 10, 5, "\"e1\"", &idx), FS_ADD_NEW);
	CHECK_EQ_INT(idx, 0);
	CHECK_EQ_INT(fs_listing_add(l, "a", 1, 1, 0, 0, NULL, &idx), FS_ADD_NEW);
	CHECK_EQ_INT(idx, 1);
	/* s3rver repeats a prefix on a later page: de-duplicated. */
	CHECK_EQ_INT(fs_listing_add(l, "a", 1, 1, 0, 0, NULL, &idx), FS_ADD_DUP);
	CHECK_EQ_INT(l->n, 2);
	/* A file arriving after the dir of the same name: dir shadows file. */
	CHECK_EQ_INT(fs_listing_add(l, "a", 1, 0, 7, 7, "\"x\"", &idx), FS_ADD_DUP);
	CHECK_EQ_INT(l->ents[1].is_dir, 1);
	/* A dir arriving after the file: upgraded in place, index kept. */
	CHECK_EQ_INT(fs_listing_add(l, "b", 1, 1, 0, 0, NULL, &idx), FS_ADD_UPGRADED);
	CHECK_EQ_INT(idx, 0);
	CHECK_EQ_INT(l->ents[0].is_dir, 1);
	CHECK_EQ_INT(l->ents[0].size, 0);
	CHECK_EQ_INT(fs_listing_find(l, "b", 1), 0);
	CHECK_EQ_INT(fs_listing_find(l, "a", 1), 1);
	CHECK_EQ_INT(fs_listing_find(l, "c", 1), -1);
	CHECK_EQ_INT(fs_listing_find(l, "ab", 2), -1);
	fs_listing_get(l);
	fs_listing_put(l);
	fs_listing_put(l);
}

static void t_listing_big(void)
{
	struct fs_listing *l = fs_listing_new(0);
	char name[32];
	size_t idx;
	int ok = 1;

	/* Indexes are arrival order and never move while the index grows. */
	for (int i = 0; i < 100000; i++) {
		int n = snprintf(name, sizeof(name), "f%06d", i);

		if (fs_listing_add(l, name, (size_t)n, i % 7 == 0, (uint64_t)i, i, "\"e\"", &idx)
		    != FS_ADD_NEW || idx != (size_t)i)
			ok = 0;
	}
	CHECK(ok);
	CHECK_EQ_INT(l->n, 100000);
	for (int i = 0; i < 100000; i += 997) {
		int n = snprintf(name, sizeof(name), "f%06d", i);

		CHECK_EQ_INT(fs_listing_find(l, name, (size_t)n), i);
		CHECK_STR(l->ents[i].name, name);
	}
	/* Etag longer than the field is cut, not overrun. */
	{
		char etag[300];

		memset(etag, 'e', sizeof(etag) - 1);
		etag[sizeof(etag) - 1] = '\0';
		fs_listing_add(l, "long-etag", 9, 0, 1, 1, etag, &idx);
		char got[FS_ETAG_MAX];

		fs_dirent_etag(&l->ents[idx], got);
		CHECK_EQ_INT(strlen(got), FS_ETAG_MAX - 1);
	}
	/* The usual quoted MD5 is kept in 16 bytes and comes back as it came;
	 * an uppercase or multipart one is kept as text. */
	{
		static const char *tags[] = { "\"0123456789abcdef0123456789abcdef\"",
					      "\"0123456789ABCDEF0123456789abcdef\"",
					      "\"0123456789abcdef0123456789abcdef-3\"", "x" };
		char got[FS_ETAG_MAX];

		for (int i = 0; i < 4; i++) {
			char nm[8];

			snprintf(nm, sizeof(nm), "tag%d", i);
			fs_listing_add(l, nm, strlen(nm), 0, 1, 1, tags[i], &idx);
			fs_dirent_etag(&l->ents[idx], got);
			CHECK_STR(got, tags[i]);
			CHECK_EQ_INT(l->ents[idx].etag_kind, i == 0 ? FS_ETAG_MD5 : FS_ETAG_STR);
		}
	}
	fs_listing_put(l);
}


/* A quoted lowercase MD5 packs into 16 bytes and back; any other byte in any
 * place, an uppercase digit included, leaves the ETag as text. */
static void t_etag_md5(void)
{
	static const char bad[] = { 'g', 'A', 'F', '/', ':', '`', '"', ' ', '\x80', '\xff' };
	char tag[40], back[FS_ETAG_MAX];
	struct fs_etag e;

	for (int n = 0; n < 256; n++) {
		tag[0] = '"';
		for (int i = 0; i < 32; i++)
			tag[1 + i] = "0123456789abcdef"[(n * 7 + i * (n | 1)) & 15];
		tag[33] = '"';
		tag[34] = '\0';
		CHECK(fs_etag_md5(tag, e.u.md5));
		fs_etag_str(&e, FS_ETAG_MD5, back);
		CHECK_STR(back, tag);
	}
	for (int i = 0; i < 32; i++)
		for (size_t b = 0; b < sizeof(bad); b++) {
			memcpy(tag, "\"0123456789abcdef0123456789abcdef\"", 35);
			tag[1 + i] = bad[b];
			if (fs_etag_md5(tag, e.u.md5))
				harness_fail(__FILE__, __LINE__, "byte %d = 0x%02x accepted", i,
					     (unsigned char)bad[b]);
		}
	CHECK(!fs_etag_md5("\"0123456789abcdef0123456789abcde\"", e.u.md5));
	CHECK(!fs_etag_md5("\"0123456789abcdef0123456789abcdef0\"", e.u.md5));
	CHECK(!fs_etag_md5("0123456789abcdef0123456789abcdef", e.u.md5));
}

/* ---------- subtree: many listings from one flat key list ---------- */

struct tkey {
	const char *k;
	size_t len;                /* 0: strlen */
};

static void tree_add_keys(struct fs_tree *t, const struct tkey *keys, size_t n,
			  const size_t *order)
{
	for (size_t j = 0; j < n; j++) {
		const struct tkey *k = &keys[order ? order[j] : j];
		size_t len = k->len ? k->len : strlen(k->k);

		CHECK(fs_tree_add(t, k->k, len, len * 3, 1000 + (int64_t)len, "\"etag\"") >= 0);
	}
}

/* Entry `name` of directory `dir` in t: 'd', 'f' (with *size) or 0 when absent;
 * '?' when the directory itself has no listing. */
static int tree_entry(const struct fs_tree *t, const char *dir, const char *name,
		      uint64_t *size)
{
	struct fs_listing *l = fs_tree_find(t, dir, strlen(dir));
	long i;

	if (!l)
		return '?';
	i = fs_listing_find(l, name, strlen(name));
	if (i < 0)
		return 0;
	if (size)
		*size = l->ents[i].size;
	return l->ents[i].is_dir ? 'd' : 'f';
}

static size_t tree_n(const struct fs_tree *t, const char *dir)
{
	struct fs_listing *l = fs_tree_find(t, dir, strlen(dir));

	return l ? l->n : (size_t)-1;
}

static void t_tree_basic(void)
{
	static const struct tkey keys[] = {
		{ .k = "" },                     /* the mounted prefix's own marker */
		{ .k = "a/b/c.txt" }, { .k = "a/x.txt" }, { .k = "top" },
		{ .k = "m/" }, { .k = "m/sub/" },     /* markers: empty directories */
		{ .k = "only/deep/er/leaf" },    /* directories holding only directories */
	};
	struct fs_tree t;
	uint64_t size = 0;

	CHECK_EQ_INT(fs_tree_init(&t, "", 0, 42), 0);
	tree_add_keys(&t, keys, sizeof(keys) / sizeof(keys[0]), NULL);
	fs_tree_finish(&t);
	CHECK_EQ_INT(t.keys, 6);
	CHECK_EQ_INT(t.hidden, 0);
	CHECK_EQ_INT(tree_n(&t, ""), 4);            /* a top m only */
	CHECK_EQ_INT(tree_entry(&t, "", "a", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "", "top", &size), 'f');
	CHECK_EQ_INT(size, 9);
	CHECK_EQ_INT(tree_entry(&t, "", "m", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "", "only", NULL), 'd');
	CHECK_EQ_INT(tree_n(&t, "a"), 2);
	CHECK_EQ_INT(tree_entry(&t, "a", "b", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "a", "x.txt", NULL), 'f');
	CHECK_EQ_INT(tree_n(&t, "a/b"), 1);
	CHECK_EQ_INT(tree_entry(&t, "a/b", "c.txt", &size), 'f');
	CHECK_EQ_INT(size, 27);
	CHECK_EQ_INT(tree_n(&t, "m"), 1);
	CHECK_EQ_INT(tree_entry(&t, "m", "sub", NULL), 'd');
	CHECK_EQ_INT(tree_n(&t, "m/sub"), 0);       /* listed, and empty */
	CHECK_EQ_INT(tree_entry(&t, "only", "deep", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "only/deep", "er", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "only/deep/er", "leaf", NULL), 'f');
	CHECK_EQ_INT(tree_entry(&t, "a/b", "nope", NULL), 0);
	CHECK_EQ_INT(tree_entry(&t, "a/b/c.txt", "x", NULL), '?');   /* a file has no listing */
	CHECK_EQ_INT(t.n, 8);                       /* "" a a/b m m/sub only only/deep only/deep/er */
	CHECK(fs_tree_find(&t, "", 0)->complete);
	CHECK(fs_tree_find(&t, "m/sub", 5)->complete);
	CHECK_EQ_INT(fs_tree_find(&t, "a", 1)->fetched_ms, 42);
	{
		char tag[FS_ETAG_MAX];

		fs_dirent_etag(&fs_tree_find(&t, "a", 1)->ents[1], tag);
		CHECK_STR(tag, "\"etag\"");
	}
	fs_tree_cleanup(&t);

	/* A subtree below the root: paths carry D's own path. */
	CHECK_EQ_INT(fs_tree_init(&t, "x/y", 3, 0), 0);
	tree_add_keys(&t, keys, sizeof(keys) / sizeof(keys[0]), NULL);
	CHECK_EQ_INT(tree_entry(&t, "x/y", "a", NULL), 'd');
	CHECK_EQ_INT(tree_entry(&t, "x/y/a/b", "c.txt", NULL), 'f');
	CHECK_EQ_INT(tree_n(&t, "x/y/m/sub"), 0);
	CHECK(fs_tree_find(&t, "a", 1) == NULL);
	fs_tree_cleanup(&t);
}

static void t_tree_shadow(void)
{
	static const struct tkey keys[] = {
		{ .k = "x" }, { .k = "x/y" },                 /* file then dir, top level */
		{ .k = "p/q/r" }, { .k = "p/q" },             /* dir then file, a level down */
		{ .k = "s/t" }, { .k = "s/t/" },              /* file then marker */
		{ .k = "u/v/w/" }, { .k = "u/v/w" }, { .k = "u/v" },   /* marker, then files at two levels */
	};
	static const size_t rev[] = { 8, 7, 6, 5, 4, 3, 2, 1, 0 };
	struct fs_tree t;

	for (int pass = 0; pass < 2; pass++) {
		CHECK_EQ_INT(fs_tree_init(&t, "", 0, 0), 0);
		tree_add_keys(&t, keys, 9, pass ? rev : NULL);
		CHECK_EQ_INT(tree_entry(&t, "", "x", NULL), 'd');
		CHECK_EQ_INT(tree_entry(&t, "x", "y", NULL), 'f');
		CHECK_EQ_INT(tree_entry(&t, "p", "q", NULL), 'd');
		CHECK_EQ_INT(tree_entry(&t, "p/q", "r", NULL), 'f');
		CHECK_EQ_INT(tree_n(&t, "p"), 1);
		CHECK_EQ_INT(tree_entry(&t, "s", "t", NULL), 'd');
		CHECK_EQ_INT(tree_n(&t, "s/t"), 0);
		CHECK_EQ_INT(tree_entry(&t, "u", "v", NULL), 'd');
		CHECK_EQ_INT(tree_entry(&t, "u/v", "w", NULL), 'd');
		CHECK_EQ_INT(tree_n(&t, "u/v"), 1);
		CHECK_EQ_INT(tree_n(&t, "u/v/w"), 0);
		CHECK_EQ_INT(fs_tree_find(&t, "x", 1)->ents[0].size, 9);   /* "x/y": 3 bytes x 3 */
		CHECK_EQ_INT(fs_tree_find(&t, "", 0)->ents[0].size, 0);   /* dir: no size */
		CHECK_EQ_INT(fs_tree_find(&t, "", 0)->ents[0].etag_kind, FS_ETAG_NONE);
		fs_tree_cleanup(&t);
	}
}

static void t_tree_hidden(void)
{
	static char longk[300];
	static const char nulk[] = "n/a\0b/c";
	struct tkey keys[] = {
		{ .k = "a//b" },                  /* empty segment: a listed, empty */
		{ .k = "./dot" }, { .k = "../up" },    /* hidden at the top */
		{ .k = "p/./q" }, { .k = "p/../q" }, { .k = "p/ok" },
		{ .k = "/lead" },                 /* empty first segment */
		{ .k = nulk, .len = sizeof(nulk) - 1 },  /* NUL in a segment: n listed, empty */
		{ .k = longk },                   /* 256-byte segment below "l" */
		{ .k = "e/f//" },                 /* a marker with an empty segment: e/f listed, empty */
	};
	struct fs_tree t;

	memcpy(longk, "l/", 2);
	memset(longk + 2, 'z', 256);
	longk[258] = '\0';
	CHECK_EQ_INT(fs_tree_init(&t, "", 0, 0), 0);
	tree_add_keys(&t, keys, sizeof(keys) / sizeof(keys[0]), NULL);
	CHECK_EQ_INT(t.keys, 10);
	CHECK_EQ_INT(t.hidden, 9);
	CHECK_EQ_INT(tree_n(&t, ""), 5);               /* a p n l e */
	CHECK_EQ_INT(fs_tree_find(&t, "", 0)->hidden, 3);
	CHECK_EQ_INT(tree_n(&t, "a"), 0);
	CHECK_EQ_INT(fs_tree_find(&t, "a", 1)->hidden, 1);
	CHECK_EQ_INT(tree_n(&t, "p"), 1);
	CHECK_EQ_INT(tree_entry(&t, "p", "ok", NULL), 'f');
	CHECK_EQ_INT(fs_tree_find(&t, "p", 1)->hidden, 2);
	CHECK_EQ_INT(tree_n(&t, "n"), 0);
	CHECK_EQ_INT(tree_n(&t, "l"), 0);
	CHECK_EQ_INT(tree_n(&t, "e"), 1);
	CHECK_EQ_INT(tree_n(&t, "e/f"), 0);
	CHECK_EQ_INT(fs_tree_find(&t, "e/f", 3)->hidden, 1);
	fs_tree_cleanup(&t);
}

/* The oracle: directory `dir_prefix` as delimited ListObjectsV2 pages would
 * show it (objects, and each key's common prefix), through fs_item_classify. */
static struct fs_listing *delimited(const char *dir_prefix, const char **keys, size_t n)
{
	struct fs_listing *l = fs_listing_new(0);
	size_t pl = strlen(dir_prefix), idx;

	for (size_t i = 0; i < n; i++) {
		const char *k = keys[i], *name, *slash;
		size_t kl = strlen(k), nl, item_len;
		enum fs_name_verdict why;
		enum fs_item_kind kind;
		int is_prefix;

		if (kl < pl || memcmp(k, dir_prefix, pl) != 0)
			continue;
		slash = memchr(k + pl, '/', kl - pl);
		is_prefix = slash && (size_t)(slash - k) + 1 < kl;
		item_len = is_prefix ? (size_t)(slash - k) + 1 : kl;
		kind = fs_item_classify(dir_prefix, pl, k, item_len, is_prefix, &name, &nl, &why);
		if (kind == FS_ITEM_FILE)
			fs_listing_add(l, name, nl, 0, kl * 3, 1000 + (int64_t)kl, "\"etag\"", &idx);
		else if (kind == FS_ITEM_DIR)
			fs_listing_add(l, name, nl, 1, 0, 0, NULL, &idx);
		else if (kind == FS_ITEM_HIDDEN)
			l->hidden++;
	}
	return l;
}

/* Same entries (any order), kinds, sizes and hidden counts. */
static int same_listing(const struct fs_listing *a, const struct fs_listing *b)
{
	if (a->n != b->n || a->hidden != b->hidden)
		return 0;
	for (size_t i = 0; i < a->n; i++) {
		long j = fs_listing_find(b, a->ents[i].name, a->ents[i].name_len);

		if (j < 0 || b->ents[j].is_dir != a->ents[i].is_dir ||
		    b->ents[j].size != a->ents[i].size)
			return 0;
	}
	return 1;
}

static void t_tree_matches_delimited(void)
{
	enum { N = 400 };
	static char bufs[N][64];
	const char *keys[N];
	size_t order[N];
	struct tkey tk[N];
	unsigned seed = 12345;
	struct fs_tree t;
	int bad = 0;

	/* Keys under "pfx/" over 4 levels: files, markers, shadowed names,
	 * hidden segments; the tree is built from keys with "pfx/" removed. */
	for (int i = 0; i < N; i++) {
		static const char *segs[] = { "a", "b", "c", "d", "", ".", "x", "y" };
		int depth = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 4;
		int n = snprintf(bufs[i], sizeof(bufs[i]), "pfx/");

		for (int d = 0; d < depth; d++) {
			unsigned r = (seed = seed * 1103515245u + 12345u) >> 16;
			const char *sg = segs[r % 8];

			if ((r % 8) >= 4 && (r % 8) < 6 && (r >> 4) % 5 != 0)
				sg = segs[r % 4];   /* bad segments: rarer */
			n += snprintf(bufs[i] + n, sizeof(bufs[i]) - (size_t)n, "%s%s",
				      d ? "/" : "", sg);
		}
		if ((seed >> 20) % 6 == 0)
			n += snprintf(bufs[i] + n, sizeof(bufs[i]) - (size_t)n, "/");
		keys[i] = bufs[i];
		tk[i].k = bufs[i] + 4;
		tk[i].len = strlen(bufs[i] + 4);
		if (!tk[i].len)
			tk[i].k = "";       /* "pfx/" itself: skipped by tree_add_keys's len */
		order[i] = (size_t)(N - 1 - i);
	}
	for (int pass = 0; pass < 3; pass++) {
		if (pass == 2) {            /* shuffled */
			for (int i = N - 1; i > 0; i--) {
				size_t j = ((seed = seed * 1103515245u + 12345u) >> 16) % (unsigned)(i + 1);
				size_t x = order[i];

				order[i] = order[j];
				order[j] = x;
			}
		}
		CHECK_EQ_INT(fs_tree_init(&t, "", 0, 0), 0);
		for (int i = 0; i < N; i++) {
			const struct tkey *k = &tk[pass ? order[i] : (size_t)i];

			if (k->len)
				CHECK(fs_tree_add(&t, k->k, k->len, (k->len + 4) * 3,
						  1000 + (int64_t)k->len + 4, "\"etag\"") >= 0);
		}
		/* Every directory of the tree equals its delimited listing. */
		for (size_t d = 0; d < t.n; d++) {
			char prefix[128];
			struct fs_listing *want;

			snprintf(prefix, sizeof(prefix), "pfx/%s%s", t.dirs[d].path,
				 t.dirs[d].path_len ? "/" : "");
			want = delimited(prefix, keys, N);
			if (!same_listing(want, t.dirs[d].l)) {
				harness_fail(__FILE__, __LINE__, "pass %d: dir '%s' differs from "
					     "its delimited listing", pass, t.dirs[d].path);
				bad++;
			}
			/* ... and every directory entry has a listing of its own. */
			for (size_t e = 0; e < t.dirs[d].l->n; e++) {
				char sub[128];

				if (!t.dirs[d].l->ents[e].is_dir)
					continue;
				snprintf(sub, sizeof(sub), "%s%s%s", t.dirs[d].path,
					 t.dirs[d].path_len ? "/" : "", t.dirs[d].l->ents[e].name);
				if (!fs_tree_find(&t, sub, strlen(sub)))
					bad++;
			}
			fs_listing_put(want);
			if (bad > 5)
				break;
		}
		CHECK(t.n > 20);
		CHECK_EQ_INT(bad, 0);
		fs_tree_cleanup(&t);
	}
}

static void t_lcache(void)
{
	struct fs_lcache c;
	struct fs_listing *a = fs_listing_new(1000), *b = fs_listing_new(2000), *l;
	size_t idx, one;
	char path[16];

	fs_listing_add(a, "f", 1, 0, 1, 1, "\"e\"", &idx);
	a->complete = 1;
	b->complete = 1;
	CHECK_EQ_INT(fs_lcache_init(&c, 1 << 20), 0);
	CHECK(fs_lcache_get(&c, "d", 1, 1000, 60000) == NULL);
	CHECK_EQ_INT(fs_lcache_put(&c, "d", 1, a), 0);
	CHECK(fs_lcache_get(&c, "d", 1, 1500, 60000) == a);
	CHECK(fs_lcache_get(&c, "", 0, 1500, 60000) == NULL);
	CHECK(fs_lcache_get(&c, "dd", 2, 1500, 60000) == NULL);
	/* Replacement. */
	CHECK_EQ_INT(fs_lcache_put(&c, "d", 1, b), 0);
	CHECK(fs_lcache_get(&c, "d", 1, 2500, 60000) == b);
	CHECK_EQ_INT(c.count, 1);
	/* Expiry: TTL from the listing's fetched_ms, then gone. */
	CHECK(fs_lcache_get(&c, "d", 1, 2000 + 60000, 60000) == NULL);
	CHECK_EQ_INT(c.count, 0);
	CHECK_EQ_INT(c.bytes, 0);
	/* An incomplete listing is never answered from. */
	b->complete = 0;
	fs_lcache_put(&c, "i", 1, b);
	CHECK(fs_lcache_get(&c, "i", 1, 2001, 60000) == NULL);
	b->complete = 1;
	/* "Too big" marks: kept across listing replacement and expiry of the
	 * listing, until their own time. */
	CHECK_EQ_INT(fs_lcache_mark_big(&c, "big", 3, 5000), 0);
	CHECK(fs_lcache_is_big(&c, "big", 3, 4999));
	fs_lcache_put(&c, "big", 3, a);
	CHECK(fs_lcache_get(&c, "big", 3, 1001, 100) == a);
	CHECK(fs_lcache_get(&c, "big", 3, 1200, 100) == NULL);   /* listing expired */
	CHECK(fs_lcache_is_big(&c, "big", 3, 4999));
	CHECK(!fs_lcache_is_big(&c, "big", 3, 5000));
	CHECK(!fs_lcache_is_big(&c, "other", 5, 0));
	fs_lcache_cleanup(&c);

	/* Memory bound: oldest installed evicted first. */
	one = fs_listing_bytes(a) + 64;
	CHECK_EQ_INT(fs_lcache_init(&c, one * 10), 0);
	for (int i = 0; i < 100; i++) {
		int n = snprintf(path, sizeof(path), "p%d", i);

		CHECK_EQ_INT(fs_lcache_put(&c, path, (size_t)n, a), 0);
	}
	CHECK(c.bytes <= one * 10);
	CHECK(c.evictions >= 85);
	CHECK(fs_lcache_get(&c, "p99", 3, 1001, 60000) == a);
	CHECK(fs_lcache_get(&c, "p0", 2, 1001, 60000) == NULL);
	CHECK(fs_lcache_get(&c, "p50", 3, 1001, 60000) == NULL);
	l = fs_lcache_get(&c, "p95", 3, 1001, 60000);
	CHECK(l == a);
	/* Entries hold references: a outlives our own put while cached. */
	CHECK(a->refs > 1);
	fs_lcache_cleanup(&c);
	CHECK_EQ_INT(a->refs, 1);
	fs_listing_put(a);
	fs_listing_put(b);
}

static void t_inode_stable(void)
{
	struct fs_inodes t;
	struct fs_node *root, *a, *b, *d;
	uint64_t ino_a;

	CHECK_EQ_INT(fs_inodes_init(&t), 0);
	root = fs_inodes_add(&t, "", 0, 1);
	CHECK(root && root->ino == FS_ROOT_INO);
	root->nlookup = 1;

	a = fs_inodes_get_path(&t, "x/a.txt", 7, 0);
	CHECK(a != NULL);
	ino_a = a->ino;
	CHECK(ino_a > FS_ROOT_INO);
	CHECK_EQ_INT(ino_a, fs_ino_hash("x/a.txt", 7, 0));
	a->nlookup += 2;
	CHECK(fs_inodes_get(&t, ino_a) == a);
	CHECK(fs_inodes_find(&t, "x/a.txt", 7, 0) == a);
	CHECK(fs_inodes_get_path(&t, "x/a.txt", 7, 0) == a);

	/* Same path as a directory: a different node and number. */
	d = fs_inodes_get_path(&t, "x/a.txt", 7, 1);
	CHECK(d && d != a && d->ino != a->ino);
	d->nlookup = 1;

	/* forget: freed at 0, and the same path gets the same number again. */
	CHECK_EQ_INT(fs_inodes_forget(&t, a, 1), 0);
	CHECK_EQ_INT(a->nlookup, 1);
	CHECK_EQ_INT(fs_inodes_forget(&t, a, 1), 1);
	CHECK(fs_inodes_get(&t, ino_a) == NULL);
	CHECK(fs_inodes_find(&t, "x/a.txt", 7, 0) == NULL);
	b = fs_inodes_get_path(&t, "x/a.txt", 7, 0);
	CHECK(b && b->ino == ino_a);
	b->nlookup = 1;

	/* Over-forget clamps at 0; the root is never freed. */
	CHECK_EQ_INT(fs_inodes_forget(&t, root, 5), 0);
	CHECK(fs_inodes_get(&t, FS_ROOT_INO) == root);
	CHECK_EQ_INT(fs_inodes_forget(&t, d, 10), 1);
	CHECK_EQ_INT(t.count, 2);
	fs_inodes_cleanup(&t);
}

static void t_inode_many(void)
{
	struct fs_inodes t;
	char p[64];
	int ok = 1;

	CHECK_EQ_INT(fs_inodes_init(&t), 0);
	/* Growth rehashes both tables; every node stays findable both ways. */
	for (int i = 0; i < 20000; i++) {
		int n = snprintf(p, sizeof(p), "d%d/f%d", i % 100, i);
		struct fs_node *x = fs_inodes_get_path(&t, p, (size_t)n, 0);

		if (!x || x->ino != fs_ino_hash(p, (size_t)n, 0))
			ok = 0;
		else
			x->nlookup = 1;
	}
	CHECK(ok);
	CHECK_EQ_INT(t.count, 20000);
	for (int i = 0; i < 20000; i += 3) {
		int n = snprintf(p, sizeof(p), "d%d/f%d", i % 100, i);
		struct fs_node *x = fs_inodes_find(&t, p, (size_t)n, 0);

		if (!x || fs_inodes_get(&t, x->ino) != x || fs_inodes_forget(&t, x, 1) != 1)
			ok = 0;
	}
	CHECK(ok);
	CHECK_EQ_INT(t.count, 20000 - 6667);
	fs_inodes_cleanup(&t);
}

static void t_inode_collision(void)
{
	struct fs_inodes t;
	struct fs_node *a, *b;

	CHECK_EQ_INT(fs_inodes_init(&t), 0);
	a = fs_inodes_add(&t, "a", 1, 0);
	/* Force a collision: pretend "a" took the number "b" hashes to. */
	{
		struct fs_node **pp;
		uint64_t hb = fs_ino_hash("b", 1, 0);
		size_t bucket;

		/* unlink a from its ino bucket, renumber, relink */
		for (bucket = 0; bucket < t.cap; bucket++)
			for (pp = &t.by_ino[bucket]; *pp; pp = &(*pp)->ino_next)
				if (*pp == a) {
					*pp = a->ino_next;
					goto out;
				}
out:
		a->ino = hb;
		bucket = (size_t)(hb * 0x9e3779b97f4a7c15ULL >> 7) & (t.cap - 1);
		a->ino_next = t.by_ino[bucket];
		t.by_ino[bucket] = a;
	}
	b = fs_inodes_add(&t, "b", 1, 0);
	CHECK(b && b->ino == a->ino + 1);
	CHECK(fs_inodes_get(&t, b->ino) == b);
	CHECK(fs_inodes_get(&t, a->ino) == a);
	fs_inodes_cleanup(&t);
}

/* ---------- node.c and listing.c over a real struct fs (no FUSE session, no S3) ---------- */

static struct fs *fs_for_test(const char *prefix)
{
	struct fs_options o;
	struct rd_config rd;
	struct fs *fs = NULL;

	memset(&o, 0, sizeof(o));
	memset(&rd, 0, sizeof(rd));
	o.prefix = prefix;
	o.uid = 1234;
	o.gid = 5678;
	o.file_mode = 0444;
	o.dir_mode = 0555;
	o.metadata_ttl_ms = 1000;
	CHECK_EQ_INT(fs_new(&o, NULL, &rd, &fs), 0);
	return fs;
}

static void t_fs_new_keys(void)
{
	struct fs *fs = fs_for_test("data/");
	struct fs_node *root;
	char *k;
	size_t kl;

	if (!fs)
		return;
	root = fs_inodes_get(&fs->inodes, FS_ROOT_INO);
	CHECK(root && root->is_dir && root->path_len == 0 && root->nlookup == 1);
	CHECK_EQ_INT(fs_path_key(fs, "a/b.jpg", 7, 0, &k, &kl), 0);
	CHECK_STR(k, "data/a/b.jpg");
	CHECK_EQ_INT(kl, 12);
	free(k);
	CHECK_EQ_INT(fs_path_key(fs, "", 0, FS_KEY_DIR, &k, &kl), 0);
	CHECK_STR(k, "data/");
	free(k);
	CHECK_EQ_INT(fs_path_key(fs, "a", 1, FS_KEY_DIR, &k, &kl), 0);
	CHECK_STR(k, "data/a/");
	free(k);
	fs_destroy(fs);
}

static void t_node_attrs(void)
{
	struct fs *fs = fs_for_test("");
	struct fs_dirent d = { .name = "f", .name_len = 1, .size = 10, .mtime_ms = 7500,
			       .etag_kind = FS_ETAG_STR };
	char tag[FS_ETAG_MAX];
	struct s3_object o = { .size = 11, .mtime_ms = 9250, .etag = "\"e2\"" };
	struct fuse_entry_param e;
	struct fs_node *n, *dn;
	struct stat st;

	if (!fs)
		return;
	d.etag.u.str = "\"e1\"";
	n = fs_inodes_get_path(&fs->inodes, "f", 1, 0);
	dn = fs_inodes_get_path(&fs->inodes, "d", 1, 1);
	CHECK(n && dn);
	if (!n || !dn)
		goto out;
	/* A listing's view at 100. */
	fs_node_set_from_dirent(&fs->inodes, n, &d, 100);
	CHECK_EQ_INT(n->size, 10);
	CHECK_EQ_INT(n->attr_ms, 100);
	fs_node_etag(n, tag);
	CHECK_STR(tag, "\"e1\"");
	CHECK_EQ_INT(n->size_moved, 0);
	CHECK(fs_attrs_fresh(fs, n, 1099));
	CHECK(!fs_attrs_fresh(fs, n, 1100));
	/* A HEAD at 200 with another size: taken, and the size has moved. */
	fs_node_set_from_object(&fs->inodes, n, &o, 200);
	CHECK_EQ_INT(n->size, 11);
	fs_node_etag(n, tag);
	CHECK_STR(tag, "\"e2\"");
	CHECK_EQ_INT(n->size_moved, 1);
	/* An older listing never undoes a newer HEAD. */
	fs_node_set_from_dirent(&fs->inodes, n, &d, 150);
	CHECK_EQ_INT(n->size, 11);
	CHECK_EQ_INT(n->attr_ms, 200);
	/* A directory has no attributes to learn. */
	fs_node_set_from_dirent(&fs->inodes, dn, &d, 300);
	CHECK_EQ_INT(dn->attr_ms, 0);

	fs_fill_stat(fs, n, &st);
	CHECK_EQ_INT(st.st_ino, n->ino);
	CHECK_EQ_INT(st.st_mode, S_IFREG | 0444);
	CHECK_EQ_INT(st.st_nlink, 1);
	CHECK_EQ_INT(st.st_size, 11);
	CHECK_EQ_INT(st.st_blocks, 1);
	CHECK_EQ_INT(st.st_uid, 1234);
	CHECK_EQ_INT(st.st_gid, 5678);
	CHECK_EQ_INT(st.st_blksize, FS_BLKSIZE);
	CHECK_EQ_INT(st.st_mtim.tv_sec, 9);
	CHECK_EQ_INT(st.st_mtim.tv_nsec, 250000000);
	fs_fill_entry(fs, dn, &e);
	CHECK_EQ_INT(e.ino, dn->ino);
	CHECK(e.attr_timeout == 1.0 && e.entry_timeout == 1.0);
	CHECK_EQ_INT(e.attr.st_mode, S_IFDIR | 0555);
	CHECK_EQ_INT(e.attr.st_nlink, 2);
	CHECK_EQ_INT(e.attr.st_mtim.tv_sec, fs->mount_wall_ms / 1000);
out:
	fs_destroy(fs);
}

static void t_listing_install(void)
{
	struct fs *fs = fs_for_test("");
	struct fs_listing *old_l = fs_listing_new(100), *new_l = fs_listing_new(200);

	if (!fs || !old_l || !new_l)
		goto out;
	old_l->complete = new_l->complete = 1;
	CHECK_EQ_INT(fs_listing_install(fs, "d", 1, new_l, 300), 0);
	/* Older than the one cached: skipped, and that is not an error. */
	CHECK_EQ_INT(fs_listing_install(fs, "d", 1, old_l, 300), 0);
	CHECK(fs_listing_cached(fs, "d", 1, 300) == new_l);
	CHECK_EQ_INT(fs_listing_install(fs, "e", 1, old_l, 300), 0);
	CHECK_EQ_INT(fs_listing_install(fs, "e", 1, new_l, 300), 0);
	CHECK(fs_listing_cached(fs, "e", 1, 300) == new_l);
	/* Trusted for the metadata TTL from the listing's own time. */
	CHECK(fs_listing_cached(fs, "e", 1, 1199) == new_l);
	CHECK(fs_listing_cached(fs, "e", 1, 1200) == NULL);
out:
	fs_listing_put(old_l);
	fs_listing_put(new_l);
	fs_destroy(fs);
}

/* A lookup's one flat page of "data/d/": the whole subtree when not truncated. */
static void t_subtree_from_page(void)
{
	static const char *keys[] = {
		"data/d/a.txt", "data/d/s/b.txt", "data/d/s/", "data/x/not-ours", "data/d/../bad",
	};
	struct s3_object objs[5];
	struct s3_list_page pg;
	struct fs *fs = fs_for_test("data/");
	struct fs_listing *l;
	int64_t now;

	if (!fs)
		return;
	fs->opts.metadata_ttl_ms = 3600 * 1000;
	memset(objs, 0, sizeof(objs));
	for (size_t i = 0; i < 5; i++) {
		objs[i].key = (char *)keys[i];
		objs[i].key_len = strlen(keys[i]);
		objs[i].size = 100 + i;
		snprintf(objs[i].etag, sizeof(objs[i].etag), "\"e%zu\"", i);
	}
	memset(&pg, 0, sizeof(pg));
	pg.objects = objs;
	pg.n_objects = 5;

	/* Truncated: not the whole subtree, nothing cached. */
	pg.truncated = 1;
	fs_subtree_from_page(fs, "d", 1, "data/d/", 7, &pg);
	CHECK(fs_listing_cached(fs, "d", 1, util_now_ms()) == NULL);
	CHECK_EQ_INT(fs->stats.subtree_walks, 0);

	pg.truncated = 0;
	fs_subtree_from_page(fs, "d", 1, "data/d/", 7, &pg);
	now = util_now_ms();
	l = fs_listing_cached(fs, "d", 1, now);
	CHECK(l != NULL);
	if (l) {
		long a = fs_listing_find(l, "a.txt", 5), sdir = fs_listing_find(l, "s", 1);

		CHECK_EQ_INT(l->n, 2);
		CHECK(a >= 0 && !l->ents[a].is_dir && l->ents[a].size == 100);
		char tag[FS_ETAG_MAX];

		if (a >= 0)
			fs_dirent_etag(&l->ents[a], tag);
		CHECK(a >= 0 && strcmp(tag, "\"e0\"") == 0);
		CHECK(sdir >= 0 && l->ents[sdir].is_dir);
	}
	l = fs_listing_cached(fs, "d/s", 3, now);
	CHECK(l != NULL);
	if (l) {
		CHECK_EQ_INT(l->n, 1);
		CHECK_EQ_INT(fs_listing_find(l, "b.txt", 5), 0);
		CHECK_EQ_INT(l->ents[0].size, 101);
	}
	CHECK_EQ_INT(fs->stats.subtree_walks, 1);
	CHECK_EQ_INT(fs->stats.subtree_dirs, 2);
	CHECK_EQ_INT(fs->stats.hidden, 2);             /* another prefix; ".." */
	CHECK(fs_listing_cached(fs, "x", 1, now) == NULL);
	fs_destroy(fs);
}

static const struct test tests[] = {
	TEST(t_name_check),
	TEST(t_classify),
	TEST(t_key),
	TEST(t_key_path),
	TEST(t_path_join),
	TEST(t_key_for_path),
	TEST(t_listing_merge),
	TEST(t_listing_big),
	TEST(t_etag_md5),
	TEST(t_tree_basic),
	TEST(t_tree_shadow),
	TEST(t_tree_hidden),
	TEST(t_tree_matches_delimited),
	TEST(t_lcache),
	TEST(t_inode_stable),
	TEST(t_inode_many),
	TEST(t_inode_collision),
	TEST(t_fs_new_keys),
	TEST(t_node_attrs),
	TEST(t_listing_install),
	TEST(t_subtree_from_page),
	{ 0 },
};

int main(void)
{
	return harness_run("fs_names", tests);
}
