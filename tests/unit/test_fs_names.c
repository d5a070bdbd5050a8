/*
 * test_fs_names — key -> name rules, listing merge (dedup, shadowing, stable
 * indexes) and the inode table (stable numbers, nlookup/forget).
 */
#include "harness.h"

#include <stdlib.h>

#include "../../src/fs/inode_i.h"
#include "../../src/fs/names_i.h"

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
		CHECK_EQ_INT(strlen(l->ents[idx].etag), FS_ETAG_MAX - 1);
	}
	fs_listing_put(l);
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

static const struct test tests[] = {
	TEST(t_name_check),
	TEST(t_classify),
	TEST(t_listing_merge),
	TEST(t_listing_big),
	TEST(t_inode_stable),
	TEST(t_inode_many),
	TEST(t_inode_collision),
	{ 0 },
};

int main(void)
{
	return harness_run("fs_names", tests);
}
