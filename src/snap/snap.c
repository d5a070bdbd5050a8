/*
 * snap — the snapshot file: writer, checked reader, cursors
 * (include/feedfs/snap.h; the byte layout is docs/SNAPSHOT.md).
 *
 * DESIGN
 * Layout: a 128-byte header, the meta strings (store, bucket, prefix), the
 * blocks of entries, the index (one little-endian u64 offset per block).
 * Integers in the header and index are little-endian; in entries, LEB128
 * varints. A block starts with a key stored whole (shared = 0) and its
 * mtime as a delta from 0, so a cursor can start at any block: that is all
 * a binary search needs. One entry:
 *   varint shared, varint suffix_len, suffix bytes,
 *   u8 flags (SNAP_F_MD5, SNAP_F_VERSION; other bits must be 0),
 *   varint size, varint zigzag(mtime_ms - previous mtime_ms),
 *   ETag: 16 bytes when SNAP_F_MD5 ('"' + 32 lowercase hex + '"'), else
 *   varint len + bytes; version id (SNAP_F_VERSION): varint len + bytes.
 * With a 20-byte relative name in MD5 form that is ~23 bytes + the suffix.
 *
 * Checks: the header CRC32C covers the header; the body CRC32C everything
 * after it (that read also brings the file into the page cache the walk
 * will use); the index must point at increasing offsets inside the file and
 * the blocks' first keys must increase. SNAP_OPEN_ENTRIES decodes every
 * entry once more (bounds, order, block boundaries, counts): `--print` and
 * the fuzzer ask for it; a mount does not (a second at 10M keys).
 *
 * CRC32C comes from the cache's checksum code (src/cache/cksum.c, the SSE4.2
 * instruction where the CPU has it): one implementation in the daemon.
 */
#include "feedfs/snap.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../cache/cksum_i.h"

#define SNAP_MAGIC "FEEDSNAP"
#define SNAP_HDR_LEN SNAP_HEADER_LEN
#define SNAP_HDR_CRC_OFF 124
#define SNAP_F_MD5 0x01
#define SNAP_F_VERSION 0x02
#define SNAP_META_STR_MAX 1024

struct snap {
	const uint8_t *map;
	size_t len;
	int mapped;                     /* munmap at close */
	uint64_t n_keys, n_blocks, index_off, blocks_off;
	uint32_t block_keys;
	struct snap_meta meta;
	char *strs;                     /* meta strings, one allocation */
};

/* ---- little helpers ------------------------------------------------------ */

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static void wr32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void wr64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

/* LEB128 from [*p, end): 0 and *p advanced, or -EBADMSG. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned shift = 0; shift < 64; shift += 7) {
		uint8_t b;

		if (*p >= end)
			return -EBADMSG;
		b = *(*p)++;
		if (shift == 63 && b > 1)
			return -EBADMSG;
		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return 0;
		}
	}
	return -EBADMSG;
}

static size_t put_varint(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* '"' + 32 lowercase hex + '"' -> 16 bytes; 1, else 0. */
static int etag_md5(const char *s, uint8_t out[16])
{
	if (strlen(s) != 34 || s[0] != '"' || s[33] != '"')
		return 0;
	for (int i = 0; i < 16; i++) {
		int hi = hexval(s[1 + 2 * i]), lo = hexval(s[2 + 2 * i]);

		if (hi < 0 || lo < 0)
			return 0;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 1;
}

static int keycmp(const char *a, size_t al, const char *b, size_t bl)
{
	size_t n = al < bl ? al : bl;
	int c = n ? memcmp(a, b, n) : 0;  /* a or b may be NULL when its length is 0 */

	return c ? c : (al > bl) - (al < bl);
}

static int fail(char *msg, size_t msg_len, int e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int fail(char *msg, size_t msg_len, int e, const char *fmt, ...)
{
	va_list ap;

	if (msg && msg_len) {
		va_start(ap, fmt);
		vsnprintf(msg, msg_len, fmt, ap);
		va_end(ap);
	}
	return e;
}

/* ---- reading --------------------------------------------------------------- */

static uint64_t block_off(const struct snap *s, uint64_t b)
{
	return rd64(s->map + s->index_off + 8 * b);
}

static uint64_t block_end(const struct snap *s, uint64_t b)
{
	return b + 1 < s->n_blocks ? block_off(s, b + 1) : s->index_off;
}

static uint32_t block_n(const struct snap *s, uint64_t b)
{
	return b + 1 < s->n_blocks ? s->block_keys
				   : (uint32_t)(s->n_keys - (s->n_blocks - 1) * s->block_keys);
}

static void cursor_at_block(struct snap_cursor *c, uint64_t b)
{
	const struct snap *s = c->s;

	c->block = b;
	c->key_len = 0;
	c->mtime_ms = 0;
	if (b < s->n_blocks) {
		c->pos = block_off(s, b);
		c->left = block_n(s, b);
	} else {
		c->pos = s->index_off;
		c->left = 0;
	}
}

/* Decode the entry at c into e (key into c->key) and step past it. */
static int decode(struct snap_cursor *c, struct snap_entry *e)
{
	const struct snap *s = c->s;
	const uint8_t *p, *end;
	uint64_t shared, suffix, size, mt, n;
	int first;
	uint8_t flags;

	if (c->block >= s->n_blocks)
		return 0;
	first = c->left == block_n(s, c->block);
	p = s->map + c->pos;
	end = s->map + block_end(s, c->block);
	if (get_varint(&p, end, &shared) < 0 || get_varint(&p, end, &suffix) < 0)
		return -EBADMSG;
	if ((first && shared) || shared > c->key_len || suffix > SNAP_KEY_MAX - shared ||
	    suffix > (uint64_t)(end - p))
		return -EBADMSG;
	memcpy(c->key + shared, p, suffix);
	p += suffix;
	c->key_len = shared + suffix;
	c->key[c->key_len] = '\0';
	if (p >= end)
		return -EBADMSG;
	flags = *p++;
	if (flags & ~(SNAP_F_MD5 | SNAP_F_VERSION))
		return -EBADMSG;
	if (get_varint(&p, end, &size) < 0 || get_varint(&p, end, &mt) < 0)
		return -EBADMSG;
	e->key = c->key;
	e->key_len = c->key_len;
	e->size = size;
	c->mtime_ms = (int64_t)((uint64_t)(first ? 0 : c->mtime_ms) + (uint64_t)unzigzag(mt));
	e->mtime_ms = c->mtime_ms;
	if (flags & SNAP_F_MD5) {
		static const char hex[] = "0123456789abcdef";

		if (end - p < 16)
			return -EBADMSG;
		e->etag[0] = '"';
		for (int i = 0; i < 16; i++) {
			e->etag[1 + 2 * i] = hex[p[i] >> 4];
			e->etag[2 + 2 * i] = hex[p[i] & 15];
		}
		e->etag[33] = '"';
		e->etag[34] = '\0';
		p += 16;
	} else {
		if (get_varint(&p, end, &n) < 0 || n >= SNAP_ETAG_MAX || n > (uint64_t)(end - p))
			return -EBADMSG;
		memcpy(e->etag, p, n);
		e->etag[n] = '\0';
		p += n;
	}
	e->version = NULL;
	e->version_len = 0;
	if (flags & SNAP_F_VERSION) {
		if (get_varint(&p, end, &n) < 0 || n == 0 || n > SNAP_VERSION_ID_MAX ||
		    n > (uint64_t)(end - p))
			return -EBADMSG;
		e->version = (const char *)p;
		e->version_len = n;
		p += n;
	}
	c->pos = (uint64_t)(p - s->map);
	if (--c->left == 0) {
		if ((uint64_t)(p - s->map) != block_end(s, c->block))
			return -EBADMSG;        /* bytes left over in the block */
		cursor_at_block(c, c->block + 1);
	}
	return 1;
}

int snap_next(struct snap_cursor *c, struct snap_entry *e)
{
	return decode(c, e);
}

/* The first key of block b, in place: 0 and *k, *kl; -EBADMSG. */
static int first_key(const struct snap *s, uint64_t b, const char **k, size_t *kl)
{
	const uint8_t *p = s->map + block_off(s, b), *end = s->map + block_end(s, b);
	uint64_t shared, suffix;

	if (get_varint(&p, end, &shared) < 0 || get_varint(&p, end, &suffix) < 0 || shared ||
	    suffix > SNAP_KEY_MAX || suffix > (uint64_t)(end - p))
		return -EBADMSG;
	*k = (const char *)p;
	*kl = suffix;
	return 0;
}

void snap_seek(struct snap_cursor *c, const struct snap *s, const char *key, size_t len)
{
	uint64_t lo = 0, hi = s->n_blocks;

	c->s = s;
	/* The last block whose first key is <= key (block 0 when none is). */
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		const char *k;
		size_t kl;

		if (first_key(s, mid, &k, &kl) < 0 || keycmp(k, kl, key, len) > 0)
			hi = mid;
		else
			lo = mid;
	}
	cursor_at_block(c, lo);
	if (!len)
		return;
	/* Step over the entries before key; the cursor is left on the first
	 * one >= key. Entries are re-decoded from a saved position, so the
	 * cursor never has to hold one it already passed. */
	for (;;) {
		struct snap_cursor save = *c;
		struct snap_entry e;

		if (decode(c, &e) != 1 || keycmp(e.key, e.key_len, key, len) >= 0) {
			*c = save;
			return;
		}
	}
}

int snap_find(struct snap_cursor *c, const struct snap *s, const char *key, size_t len,
	      struct snap_entry *e)
{
	snap_seek(c, s, key, len);
	if (decode(c, e) != 1)
		return 0;
	return e->key_len == len && memcmp(e->key, key, len) == 0;
}

/* Every entry once: bounds, order, block boundaries, the count. */
static int check_entries(struct snap *s, char *msg, size_t msg_len)
{
	struct snap_cursor c;
	struct snap_entry e;
	char prev[SNAP_KEY_MAX + 1];
	size_t prev_len = 0;
	uint64_t n = 0;
	int r;

	c.s = s;
	cursor_at_block(&c, 0);
	while ((r = decode(&c, &e)) == 1) {
		if (n && keycmp(prev, prev_len, e.key, e.key_len) >= 0)
			return fail(msg, msg_len, -EBADMSG, "corrupt: key %llu is not after the one "
				    "before it", (unsigned long long)n);
		memcpy(prev, e.key, e.key_len);
		prev_len = e.key_len;
		n++;
	}
	if (r < 0)
		return fail(msg, msg_len, -EBADMSG, "corrupt: entry %llu does not decode",
			    (unsigned long long)n);
	if (n != s->n_keys)
		return fail(msg, msg_len, -EBADMSG, "corrupt: %llu entries, the header says %llu",
			    (unsigned long long)n, (unsigned long long)s->n_keys);
	return 0;
}

static int read_meta(struct snap *s, uint64_t off, uint64_t len, char *msg, size_t msg_len)
{
	const uint8_t *p = s->map + off, *end = p + len;
	const char **dst[3] = { &s->meta.store, &s->meta.bucket, &s->meta.prefix };
	char *w;

	s->strs = malloc(len + 3);
	if (!s->strs)
		return -ENOMEM;
	w = s->strs;
	for (int i = 0; i < 3; i++) {
		uint64_t n;

		if (get_varint(&p, end, &n) < 0 || n > SNAP_META_STR_MAX || n > (uint64_t)(end - p) ||
		    memchr(p, '\0', n))
			return fail(msg, msg_len, -EBADMSG, "corrupt: bad source description");
		memcpy(w, p, n);
		w[n] = '\0';
		*dst[i] = w;
		w += n + 1;
		p += n;
	}
	if (p != end)
		return fail(msg, msg_len, -EBADMSG, "corrupt: bad source description");
	return 0;
}

/* The blocks' first keys, in order: what snap_seek's binary search needs. */
static int check_blocks(const struct snap *s, char *msg, size_t msg_len)
{
	const char *prev = NULL, *k;
	size_t prev_len = 0, kl;

	for (uint64_t b = 0; b < s->n_blocks; b++) {
		if (first_key(s, b, &k, &kl) < 0 || (b && keycmp(prev, prev_len, k, kl) >= 0))
			return fail(msg, msg_len, -EBADMSG, "corrupt: block %llu is out of order",
				    (unsigned long long)b);
		prev = k;
		prev_len = kl;
	}
	return 0;
}

int snap_open_mem(const void *buf, size_t len, unsigned flags, struct snap **out, char *msg,
		  size_t msg_len)
{
	int verify_crc = !(flags & SNAP_OPEN_NO_CRC);
	struct snap *s;
	const uint8_t *h = buf;
	uint64_t file_len, meta_off, meta_len;
	uint32_t version;
	int r;

	if (len < SNAP_HDR_LEN || memcmp(h, SNAP_MAGIC, 8) != 0)
		return fail(msg, msg_len, -EBADMSG, len < 8 || memcmp(h, SNAP_MAGIC, 8) != 0
			    ? "not a feedfs snapshot" : "truncated (%zu bytes)", len);
	version = rd32(h + 8);
	if (version != SNAP_VERSION)
		return fail(msg, msg_len, -EPROTO, "snapshot version %u, this feedfs reads %u",
			    version, SNAP_VERSION);
	if (verify_crc && cksum_crc32c(0, h, SNAP_HDR_CRC_OFF) != rd32(h + SNAP_HDR_CRC_OFF))
		return fail(msg, msg_len, -EBADMSG, "corrupt: header checksum mismatch");
	file_len = rd64(h + 16);
	if (file_len != len)
		return fail(msg, msg_len, -EBADMSG, "%s (%zu bytes, the header says %llu)",
			    len < file_len ? "truncated" : "corrupt: trailing bytes", len,
			    (unsigned long long)file_len);
	if (verify_crc && cksum_crc32c(0, h + SNAP_HDR_LEN, len - SNAP_HDR_LEN) != rd32(h + 76))
		return fail(msg, msg_len, -EBADMSG, "corrupt: checksum mismatch");
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->map = buf;
	s->len = len;
	s->n_keys = rd64(h + 24);
	s->n_blocks = rd64(h + 32);
	meta_off = rd64(h + 40);
	meta_len = rd64(h + 48);
	s->index_off = rd64(h + 56);
	s->meta.created_ms = (int64_t)rd64(h + 64);
	s->block_keys = rd32(h + 72);
	s->blocks_off = meta_off + meta_len;
	r = -EBADMSG;
	if (meta_off != SNAP_HDR_LEN || meta_len > len - SNAP_HDR_LEN ||
	    s->index_off < s->blocks_off || s->index_off > len || s->block_keys == 0 ||
	    s->block_keys > 1u << 16 || (len - s->index_off) / 8 != s->n_blocks ||
	    (len - s->index_off) % 8 ||
	    s->n_blocks != (s->n_keys + s->block_keys - 1) / s->block_keys) {
		fail(msg, msg_len, r, "corrupt: inconsistent header");
		goto out;
	}
	for (uint64_t b = 0; b < s->n_blocks; b++) {
		uint64_t o = block_off(s, b);

		if ((b == 0 && o != s->blocks_off) || o >= s->index_off ||
		    (b && o <= block_off(s, b - 1))) {
			fail(msg, msg_len, r, "corrupt: bad block index");
			goto out;
		}
	}
	if (!s->n_blocks && s->blocks_off != s->index_off) {
		fail(msg, msg_len, r, "corrupt: inconsistent header");
		goto out;
	}
	r = read_meta(s, meta_off, meta_len, msg, msg_len);
	if (r == 0)
		r = check_blocks(s, msg, msg_len);
	if (r == 0 && (flags & SNAP_OPEN_ENTRIES))
		r = check_entries(s, msg, msg_len);
out:
	if (r < 0) {
		snap_close(s);
		return r;
	}
	*out = s;
	return 0;
}

int snap_file_length(const void *hdr, size_t n, uint64_t *len)
{
	const uint8_t *h = hdr;

	if (n < SNAP_HDR_LEN || memcmp(h, SNAP_MAGIC, 8) != 0)
		return -EBADMSG;
	if (rd32(h + 8) != SNAP_VERSION)
		return -EPROTO;
	*len = rd64(h + 16);
	return *len >= SNAP_HDR_LEN ? 0 : -EBADMSG;
}

int snap_open(const char *path, unsigned flags, struct snap **out, char *msg, size_t msg_len)
{
	struct stat st;
	void *map;
	char why[256];
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(msg, msg_len, -errno, "snapshot %s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		r = S_ISREG(st.st_mode) ? -errno : -EINVAL;
		close(fd);
		return fail(msg, msg_len, r, "snapshot %s: not a regular file", path);
	}
	if (st.st_size < SNAP_HDR_LEN) {
		char head[8] = { 0 };
		ssize_t n = pread(fd, head, sizeof(head), 0);

		close(fd);
		return fail(msg, msg_len, -EBADMSG, "snapshot %s: %s", path,
			    n == 8 && memcmp(head, SNAP_MAGIC, 8) == 0 ? "truncated"
								       : "not a feedfs snapshot");
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	r = errno;
	close(fd);
	if (map == MAP_FAILED)
		return fail(msg, msg_len, -r, "snapshot %s: %s", path, strerror(r));
	/* Read once in order now (the checks), at random later (lookups). */
	(void)madvise(map, (size_t)st.st_size, MADV_SEQUENTIAL);
	why[0] = '\0';
	r = snap_open_mem(map, (size_t)st.st_size, flags & ~SNAP_OPEN_NO_CRC, out, why,
			  sizeof(why));
	if (r < 0) {
		munmap(map, (size_t)st.st_size);
		return fail(msg, msg_len, r, "snapshot %s: %s", path,
			    why[0] ? why : strerror(-r));
	}
	(void)madvise(map, (size_t)st.st_size, MADV_RANDOM);
	(*out)->mapped = 1;
	return 0;
}

void snap_close(struct snap *s)
{
	if (!s)
		return;
	if (s->mapped)
		munmap((void *)s->map, s->len);
	free(s->strs);
	free(s);
}

const struct snap_meta *snap_meta(const struct snap *s)
{
	return &s->meta;
}

uint64_t snap_count(const struct snap *s)
{
	return s->n_keys;
}

uint64_t snap_bytes(const struct snap *s)
{
	return s->len;
}

/* ---- writing --------------------------------------------------------------- */

#define WBUF_CAP (1u << 20)

struct snap_writer {
	int fd;
	int err;                        /* sticky -errno */
	uint64_t off;                   /* file offset of wbuf[0] */
	uint8_t *wbuf;
	size_t wlen;
	uint32_t crc;                   /* of every byte after the header */
	uint64_t n;
	uint64_t *blocks;
	size_t n_blocks, cap_blocks;
	int64_t mtime_ms;
	int64_t created_ms;
	uint64_t meta_len;
	size_t key_len;
	char key[SNAP_KEY_MAX];
};

static int wflush(struct snap_writer *w)
{
	size_t done = 0;

	while (!w->err && done < w->wlen) {
		ssize_t n = pwrite(w->fd, w->wbuf + done, w->wlen - done, (off_t)(w->off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			w->err = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	w->off += w->wlen;
	w->wlen = 0;
	return w->err;
}

/* Append n bytes of the body (CRC'd). */
static int wput(struct snap_writer *w, const void *p, size_t n)
{
	const uint8_t *b = p;

	w->crc = cksum_crc32c(w->crc, p, n);
	while (n && !w->err) {
		size_t k = WBUF_CAP - w->wlen < n ? WBUF_CAP - w->wlen : n;

		memcpy(w->wbuf + w->wlen, b, k);
		w->wlen += k;
		b += k;
		n -= k;
		if (w->wlen == WBUF_CAP)
			wflush(w);
	}
	return w->err;
}

static int wput_str(struct snap_writer *w, const char *s)
{
	uint8_t v[10];
	size_t n = strlen(s);

	if (n > SNAP_META_STR_MAX)
		return -EINVAL;
	wput(w, v, put_varint(v, n));
	return wput(w, s, n);
}

int snap_writer_new(int fd, const struct snap_meta *meta, struct snap_writer **out)
{
	struct snap_writer *w = calloc(1, sizeof(*w));
	uint8_t zero[SNAP_HDR_LEN] = { 0 };
	int r;

	if (!w)
		return -ENOMEM;
	w->wbuf = malloc(WBUF_CAP);
	if (!w->wbuf) {
		free(w);
		return -ENOMEM;
	}
	w->fd = fd;
	w->created_ms = meta->created_ms;
	/* The header's room, outside the body CRC: written last. */
	memcpy(w->wbuf, zero, sizeof(zero));
	w->wlen = SNAP_HDR_LEN;
	wput_str(w, meta->store ? meta->store : "s3");
	wput_str(w, meta->bucket ? meta->bucket : "");
	r = wput_str(w, meta->prefix ? meta->prefix : "");
	w->meta_len = w->off + w->wlen - SNAP_HDR_LEN;
	if (r < 0) {
		snap_writer_free(w);
		return r;
	}
	*out = w;
	return 0;
}

int snap_writer_add(struct snap_writer *w, const char *key, size_t key_len, uint64_t size,
		    int64_t mtime_ms, const char *etag, const char *version, size_t version_len)
{
	uint8_t head[64], md5[16];
	size_t shared = 0, h = 0, elen = etag ? strlen(etag) : 0;
	int first = w->n % SNAP_BLOCK_KEYS == 0, is_md5 = etag && etag_md5(etag, md5);
	uint8_t flags = (uint8_t)((is_md5 ? SNAP_F_MD5 : 0) | (version_len ? SNAP_F_VERSION : 0));

	if (w->err)
		return w->err;
	if (key_len > SNAP_KEY_MAX || elen >= SNAP_ETAG_MAX || version_len > SNAP_VERSION_ID_MAX ||
	    (w->n && keycmp(w->key, w->key_len, key, key_len) >= 0))
		return -EINVAL;
	if (first) {
		if (w->n_blocks == w->cap_blocks) {
			size_t cap = w->cap_blocks ? 2 * w->cap_blocks : 1024;
			uint64_t *nb = realloc(w->blocks, cap * sizeof(*nb));

			if (!nb)
				return -ENOMEM;
			w->blocks = nb;
			w->cap_blocks = cap;
		}
		w->blocks[w->n_blocks++] = w->off + w->wlen;
		w->mtime_ms = 0;
	} else {
		while (shared < key_len && shared < w->key_len && w->key[shared] == key[shared])
			shared++;
	}
	h += put_varint(head + h, shared);
	h += put_varint(head + h, key_len - shared);
	wput(w, head, h);
	wput(w, key + shared, key_len - shared);
	h = 0;
	head[h++] = flags;
	h += put_varint(head + h, size);
	h += put_varint(head + h, zigzag((int64_t)((uint64_t)mtime_ms - (uint64_t)w->mtime_ms)));
	wput(w, head, h);
	if (is_md5) {
		wput(w, md5, 16);
	} else {
		wput(w, head, put_varint(head, elen));
		wput(w, etag ? etag : "", elen);
	}
	if (version_len) {
		wput(w, head, put_varint(head, version_len));
		wput(w, version, version_len);
	}
	memcpy(w->key, key, key_len);
	w->key_len = key_len;
	w->mtime_ms = mtime_ms;
	w->n++;
	return w->err;
}

uint64_t snap_writer_count(const struct snap_writer *w)
{
	return w->n;
}

int snap_writer_finish(struct snap_writer *w)
{
	uint8_t hdr[SNAP_HDR_LEN], v[8];
	uint64_t index_off = w->off + w->wlen, file_len;
	ssize_t n;

	for (size_t i = 0; i < w->n_blocks; i++) {
		wr64(v, w->blocks[i]);
		wput(w, v, 8);
	}
	if (wflush(w) < 0)
		return w->err;
	file_len = w->off;
	memset(hdr, 0, sizeof(hdr));
	memcpy(hdr, SNAP_MAGIC, 8);
	wr32(hdr + 8, SNAP_VERSION);
	wr32(hdr + 12, SNAP_HDR_LEN);
	wr64(hdr + 16, file_len);
	wr64(hdr + 24, w->n);
	wr64(hdr + 32, w->n_blocks);
	wr64(hdr + 40, SNAP_HDR_LEN);
	wr64(hdr + 48, w->meta_len);
	wr64(hdr + 56, index_off);
	wr64(hdr + 64, (uint64_t)w->created_ms);
	wr32(hdr + 72, SNAP_BLOCK_KEYS);
	wr32(hdr + 76, w->crc);
	wr32(hdr + SNAP_HDR_CRC_OFF, cksum_crc32c(0, hdr, SNAP_HDR_CRC_OFF));
	do
		n = pwrite(w->fd, hdr, sizeof(hdr), 0);
	while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof(hdr))
		w->err = n < 0 ? -errno : -EIO;
	return w->err;
}

void snap_writer_free(struct snap_writer *w)
{
	if (!w)
		return;
	free(w->wbuf);
	free(w->blocks);
	free(w);
}
