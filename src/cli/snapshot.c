/*
 * snapshot — `feedfs snapshot [OPTIONS] SOURCE FILE`: list SOURCE once and
 * write every key with its size, ETag and time to FILE (snap.h), and
 * `feedfs snapshot --print FILE`: the same as text.
 *
 * DESIGN
 * The options are the mount's (options.c), FILE in MOUNTPOINT's place: the
 * endpoint, region and credential options mean what they mean for a mount,
 * and daemon_open_store makes the same client. One access check (a LIST of
 * one key, which also finds the bucket's region), then the flat listing of
 * the prefix, 1000 keys a page.
 *
 * Order: S3 lists in byte order, so keys stream straight into the writer
 * and memory stays flat at any size. A store that lists out of order (s3rver
 * does, quirk 4) is listed a second time into memory and sorted: the first
 * LIST pass is wasted there, and the second holds every key (~100 bytes
 * each) until it is written.
 *
 * The file is written beside FILE as FILE.tmp.PID, fsync'd and renamed over
 * FILE: a reader never sees half a snapshot.
 */
#include "feedfs/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedfs/creds.h"
#include "feedfs/daemon.h"
#include "feedfs/log.h"
#include "feedfs/options.h"
#include "feedfs/s3.h"
#include "feedfs/snap.h"
#include "feedfs/util.h"

static const char snapshot_usage[] =
"usage: feedfs snapshot [OPTIONS] SOURCE FILE\n"
"       feedfs snapshot --print FILE\n"
"    Lists SOURCE (s3://, oss://, gs://BUCKET[/PREFIX/]) once and writes every\n"
"    key with its size, ETag and last-modified time to FILE, for\n"
"    'feedfs --snapshot FILE SOURCE MOUNTPOINT' on every node (docs/SNAPSHOT.md).\n"
"    OPTIONS: the mount's endpoint, region and credential options\n"
"    (--endpoint-url, --region, --profile, --force-path-style, ...).\n"
"    --print FILE   one key a line: KEY<TAB>SIZE<TAB>ETAG[<TAB>VERSION], after a\n"
"                   '#' line naming the source; \\\\, \\t, \\n, \\r and other\n"
"                   control bytes of keys escaped as \\\\, \\t, \\n, \\r, \\xHH\n"
"    Exit status: 0, 1 (the store or FILE failed), 2 (usage).\n";

/* One key, escaped for a line of text. */
static void print_escaped(FILE *out, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];

		if (ch == '\\')
			fputs("\\\\", out);
		else if (ch == '\t')
			fputs("\\t", out);
		else if (ch == '\n')
			fputs("\\n", out);
		else if (ch == '\r')
			fputs("\\r", out);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(out, "\\x%02x", ch);
		else
			fputc(ch, out);
	}
}

static int print_main(const char *path)
{
	const struct snap_meta *m;
	struct snap_cursor c;
	struct snap_entry e;
	struct snap *s;
	char msg[PATH_MAX + 256];
	int r;

	if (snap_open(path, SNAP_OPEN_ENTRIES, &s, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "feedfs snapshot: %s\n", msg);
		return 1;
	}
	m = snap_meta(s);
	printf("# feedfs snapshot v%d of %s://%s/%s: %llu keys, taken at %lld ms\n", SNAP_VERSION,
	       m->store, m->bucket, m->prefix, (unsigned long long)snap_count(s),
	       (long long)m->created_ms);
	snap_seek(&c, s, NULL, 0);
	while ((r = snap_next(&c, &e)) == 1) {
		print_escaped(stdout, m->prefix, strlen(m->prefix));
		print_escaped(stdout, e.key, e.key_len);
		printf("\t%llu\t%s", (unsigned long long)e.size, e.etag);
		if (e.version) {
			putchar('\t');
			print_escaped(stdout, e.version, e.version_len);
		}
		putchar('\n');
	}
	snap_close(s);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "feedfs snapshot: writing stdout: %s\n", strerror(errno));
		return 1;
	}
	return r < 0 ? 1 : 0;
}

/* Keys held for sorting (an out-of-order store). */
struct held {
	char *key;                      /* key bytes, then NUL, then the ETag */
	size_t key_len;
	uint64_t size;
	int64_t mtime_ms;
};

struct lister {
	struct s3_client *s3;
	const char *prefix;
	size_t prefix_len;
	struct snap_writer *w;          /* streaming; NULL: holding */
	struct held *held;
	size_t n_held, cap_held;
	uint64_t pages;
};

static int hold(struct lister *L, const struct s3_object *o, const char *rel, size_t rel_len)
{
	struct held *h;
	size_t elen = strlen(o->etag);

	if (L->n_held == L->cap_held) {
		size_t cap = L->cap_held ? 2 * L->cap_held : 4096;
		struct held *nh = realloc(L->held, cap * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		L->held = nh;
		L->cap_held = cap;
	}
	h = &L->held[L->n_held];
	h->key = malloc(rel_len + elen + 2);
	if (!h->key)
		return -ENOMEM;
	memcpy(h->key, rel, rel_len);
	h->key[rel_len] = '\0';
	memcpy(h->key + rel_len + 1, o->etag, elen + 1);
	h->key_len = rel_len;
	h->size = o->size;
	h->mtime_ms = o->mtime_ms;
	L->n_held++;
	return 0;
}

/* Every page of the prefix, into the writer or held. -EDOM when streaming
 * met a key out of order; other -errno with a line in msg. */
static int list_all(struct lister *L, char *msg, size_t msg_len)
{
	char *token = NULL;
	int r = 0;

	do {
		struct s3_list_page pg;

		memset(&pg, 0, sizeof(pg));
		r = s3_list(L->s3, L->prefix, NULL, token, 0, &pg);
		free(token);
		token = NULL;
		if (r < 0) {
			snprintf(msg, msg_len, "listing '%s' failed: %s", L->prefix, strerror(-r));
			return r;
		}
		L->pages++;
		for (size_t i = 0; i < pg.n_objects && r == 0; i++) {
			const struct s3_object *o = &pg.objects[i];

			if (o->key_len < L->prefix_len || memcmp(o->key, L->prefix, L->prefix_len))
				continue;   /* not under the prefix: the store's mistake */
			if (L->w) {
				r = snap_writer_add(L->w, o->key + L->prefix_len,
						    o->key_len - L->prefix_len, o->size, o->mtime_ms,
						    o->etag, NULL, 0);
				if (r == -EINVAL)
					r = -EDOM;
			} else {
				r = hold(L, o, o->key + L->prefix_len, o->key_len - L->prefix_len);
			}
		}
		if (r == 0 && pg.truncated && pg.next_token && pg.next_token[0]) {
			token = strdup(pg.next_token);
			if (!token)
				r = -ENOMEM;
		}
		s3_list_page_cleanup(&pg);
		if (r < 0) {
			if (r != -EDOM)
				snprintf(msg, msg_len, "snapshot: %s", strerror(-r));
			free(token);
			return r;
		}
	} while (token);
	return 0;
}

static int held_cmp(const void *a, const void *b)
{
	const struct held *x = a, *y = b;
	size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
	int c = memcmp(x->key, y->key, n);

	return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Sort what was held and write it (a key listed twice is written once). */
static int write_held(struct lister *L)
{
	int r = 0;

	qsort(L->held, L->n_held, sizeof(*L->held), held_cmp);
	for (size_t i = 0; i < L->n_held && r == 0; i++) {
		const struct held *h = &L->held[i];

		if (i && held_cmp(&L->held[i - 1], h) == 0)
			continue;
		r = snap_writer_add(L->w, h->key, h->key_len, h->size, h->mtime_ms,
				    h->key + h->key_len + 1, NULL, 0);
	}
	return r;
}

static void held_free(struct lister *L)
{
	for (size_t i = 0; i < L->n_held; i++)
		free(L->held[i].key);
	free(L->held);
	L->held = NULL;
	L->n_held = L->cap_held = 0;
}

/* A fresh writer on fd (truncated) for o's source. */
static int new_writer(const struct options *o, int fd, struct snap_writer **w)
{
	struct snap_meta m = { .store = daemon_store_scheme(o), .bucket = o->bucket,
			       .prefix = o->prefix, .created_ms = util_wall_ms() };

	if (ftruncate(fd, 0) < 0)
		return -errno;
	return snap_writer_new(fd, &m, w);
}

static int take(const struct options *o, struct s3_client *s3, int fd, char *msg,
		size_t msg_len, uint64_t *keys, uint64_t *pages)
{
	struct lister L;
	int r;

	memset(&L, 0, sizeof(L));
	L.s3 = s3;
	L.prefix = o->prefix;
	L.prefix_len = strlen(o->prefix);
	msg[0] = '\0';
	r = new_writer(o, fd, &L.w);
	if (r == 0)
		r = list_all(&L, msg, msg_len);
	if (r == -EDOM) {
		/* Out of order: list again, hold, sort (DESIGN). */
		snap_writer_free(L.w);
		L.w = NULL;
		r = list_all(&L, msg, msg_len);
		if (r == 0)
			r = new_writer(o, fd, &L.w);
		if (r == 0)
			r = write_held(&L);
	}
	if (r == 0)
		r = snap_writer_finish(L.w);
	if (r == 0) {
		*keys = snap_writer_count(L.w);
		*pages = L.pages;
	} else if (!msg[0]) {
		snprintf(msg, msg_len, "writing the snapshot: %s", strerror(-r));
	}
	snap_writer_free(L.w);
	held_free(&L);
	return r;
}

static int take_main(struct options *o)
{
	struct creds_chain *creds = NULL;
	struct s3_client *s3 = NULL;
	const char *out = o->mountpoint;
	char msg[PATH_MAX + 512], *tmp;
	uint64_t keys = 0, pages = 0;
	int64_t t0 = util_now_ms();
	int fd, r;

	if (strstr(out, "://")) {
		fprintf(stderr, "feedfs snapshot: '%s': only a local file is supported (upload it "
			"with one PUT afterwards, e.g. aws s3 cp)\n", out);
		return 2;
	}
	log_init(o->log_file ? LOG_SINK_FILE : LOG_SINK_STDERR, o->log_file,
		 o->log_file || o->log_level_set ? o->log_level : LOG_WARNING);
	r = daemon_open_store(o, &creds, &s3, msg, sizeof(msg));
	if (r == 0) {
		msg[0] = '\0';
		r = s3_check_access(s3, o->prefix, msg, sizeof(msg));
		if (r < 0 && !msg[0])
			snprintf(msg, sizeof(msg), "cannot list s3://%s/%s: %s", o->bucket,
				 o->prefix, strerror(-r));
	}
	if (r < 0) {
		fprintf(stderr, "feedfs snapshot: %s\n", msg);
		if (s3)
			s3_client_destroy(s3);
		if (creds)
			creds_chain_destroy(creds);
		log_close();
		return 1;
	}
	tmp = xasprintf("%s.tmp.%d", out, (int)getpid());
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		snprintf(msg, sizeof(msg), "%s: %s", tmp, strerror(-r));
	} else {
		r = take(o, s3, fd, msg, sizeof(msg), &keys, &pages);
		if (r == 0 && fsync(fd) < 0) {
			r = -errno;
			snprintf(msg, sizeof(msg), "%s: fsync: %s", tmp, strerror(-r));
		}
		if (close(fd) < 0 && r == 0) {
			r = -errno;
			snprintf(msg, sizeof(msg), "%s: close: %s", tmp, strerror(-r));
		}
		if (r == 0 && rename(tmp, out) < 0) {
			r = -errno;
			snprintf(msg, sizeof(msg), "%s: %s", out, strerror(-r));
		}
		if (r < 0)
			unlink(tmp);
	}
	free(tmp);
	s3_client_destroy(s3);
	creds_chain_destroy(creds);
	log_close();
	if (r < 0) {
		fprintf(stderr, "feedfs snapshot: %s\n", msg);
		return 1;
	}
	printf("snapshot of %s://%s/%s: %llu keys from %llu LIST pages in %.1f s, written to %s\n",
	       daemon_store_scheme(o), o->bucket, o->prefix, (unsigned long long)keys,
	       (unsigned long long)pages, (double)(util_now_ms() - t0) / 1000.0, out);
	return 0;
}

int cli_snapshot_main(int argc, char **argv)
{
	struct options o;
	char msg[PATH_MAX + 256];
	int r;

	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		fputs(snapshot_usage, stdout);
		return 0;
	}
	if (argc >= 2 && strcmp(argv[1], "--print") == 0) {
		if (argc != 3) {
			fputs(snapshot_usage, stderr);
			return 2;
		}
		return print_main(argv[2]);
	}
	/* argv[0] is "snapshot": it stands where the program name would. */
	r = options_parse(argc, argv, &o, msg, sizeof(msg));
	if (r == 0 && (o.snapshot || o.dry_run || o.print_creds)) {
		snprintf(msg, sizeof(msg), "--snapshot, --dry-run and --print-credentials-source "
			 "do not apply to feedfs snapshot");
		r = -EINVAL;
	}
	if (r != 0) {
		if (r == -EINVAL)
			fprintf(stderr, "feedfs snapshot: %s\n%s", msg, snapshot_usage);
		else if (r > 0)
			fputs(snapshot_usage, stdout);
		else
			fprintf(stderr, "feedfs snapshot: %s\n", strerror(-r));
		options_free(&o);
		return r > 0 ? 0 : r == -EINVAL ? 2 : 1;
	}
	r = take_main(&o);
	options_free(&o);
	return r;
}
