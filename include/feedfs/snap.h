/*
 * snap — dataset snapshots: every key of a bucket prefix with its size, ETag,
 * last-modified time (and version id where known), in one file that a mount
 * reads in place (docs/SNAPSHOT.md has the byte layout).
 *
 * The file is sorted by key (byte order, as S3 lists), cut into blocks of
 * SNAP_BLOCK_KEYS keys; inside a block each key is stored as the bytes it
 * shares with the one before plus the rest (prefix compression), sizes and
 * times as varints, an MD5-form ETag as its 16 bytes. An index of block
 * offsets closes the file; a lookup is a binary search over the blocks'
 * first keys and a scan of at most one block, straight from the mapping: an
 * open snapshot allocates nothing per key.
 *
 * snap_open checks what a mount relies on before it uses the file: the
 * header's own CRC, the magic and version, the length, the CRC32C of the
 * whole body, the block index, and that the blocks' first keys increase
 * (what the binary search needs). SNAP_OPEN_ENTRIES adds one pass over every
 * entry (bounds, strictly increasing keys, the counts): about a second for
 * 10M keys, which a mount does not pay (the CRC already says the file is
 * what the writer wrote). Every read is bounds-checked anyway: the mapping
 * is trusted no further than that, and an entry that does not decode ends
 * its listing with a log line.
 *
 * Keys in the file are relative to the snapshot's prefix (SNAPSHOT.md): the
 * key "train/a.jpg" of a snapshot of s3://b/train/ is stored as "a.jpg".
 *
 * Thread safety: an open snap is immutable; any number of threads may use
 * cursors on it at once (a cursor is one thread's).
 */
#ifndef FEEDFS_SNAP_H
#define FEEDFS_SNAP_H

#include <stddef.h>
#include <stdint.h>

#define SNAP_VERSION 1
#define SNAP_KEY_MAX 1024           /* S3's limit; == FS_KEY_MAX */
#define SNAP_ETAG_MAX 128           /* == S3_ETAG_MAX, with its quotes */
#define SNAP_VERSION_ID_MAX 1024
#define SNAP_BLOCK_KEYS 64

/* What a snapshot describes (strings owned by the snap, or by the caller
 * for the writer). store: "s3", "oss" or "gs" (the URL scheme). */
struct snap_meta {
	const char *store;
	const char *bucket;
	const char *prefix;             /* "" or ending in '/' */
	int64_t created_ms;             /* wall clock */
};

struct snap;

#define SNAP_OPEN_NO_CRC 1u          /* skip the CRCs (a fuzzer reaches the decoder) */
#define SNAP_OPEN_ENTRIES 2u         /* also decode every entry once */

/* Map and check the snapshot file at path (flags: SNAP_OPEN_*). 0 and *out,
 * or -errno with one user-facing line in msg naming the file and what is
 * wrong ("truncated", "corrupt: checksum mismatch", "version 7, this feedfs
 * reads 1", ...). */
int snap_open(const char *path, unsigned flags, struct snap **out, char *msg, size_t msg_len);

/* The same over a buffer the caller keeps alive until snap_close (fuzzing,
 * tests). */
int snap_open_mem(const void *buf, size_t len, unsigned flags, struct snap **out, char *msg,
		  size_t msg_len);
void snap_close(struct snap *s);

/* The length of the whole file from its first SNAP_HEADER_LEN bytes (to fetch
 * a snapshot with a first small GET): 0 and *len, or -EBADMSG (not a
 * snapshot header) / -EPROTO (another version); nothing else is checked
 * (snap_open does that once the file is whole). */
#define SNAP_HEADER_LEN 128
int snap_file_length(const void *hdr, size_t n, uint64_t *len);

const struct snap_meta *snap_meta(const struct snap *s);
uint64_t snap_count(const struct snap *s);
/* Bytes of the file (what the mount costs in page cache). */
uint64_t snap_bytes(const struct snap *s);

/* One entry. key points into the cursor (valid until its next call);
 * version into the mapping (NULL when the snapshot has none for it). */
struct snap_entry {
	const char *key;                /* relative to the snapshot's prefix */
	size_t key_len;
	uint64_t size;
	int64_t mtime_ms;
	char etag[SNAP_ETAG_MAX];       /* NUL-terminated, with quotes as listed */
	const char *version;
	size_t version_len;
};

/* A position in the snapshot, on the stack of one thread. */
struct snap_cursor {
	const struct snap *s;
	uint64_t block;                 /* block of the next entry */
	uint64_t pos;                   /* file offset of the next entry */
	uint32_t left;                  /* entries left in that block */
	int64_t mtime_ms;               /* the previous entry's (delta base) */
	size_t key_len;                 /* the previous entry's key */
	char key[SNAP_KEY_MAX + 1];
};

/* At the first entry >= key[0, len) (len 0: the first entry). */
void snap_seek(struct snap_cursor *c, const struct snap *s, const char *key, size_t len);
/* The next entry: 1 and *e, 0 at the end, -EBADMSG for bytes that do not
 * decode (never after snap_open's pass, unless the file changed under it). */
int snap_next(struct snap_cursor *c, struct snap_entry *e);
/* The entry of exactly key: 1 and *e (its key in c), 0 when absent. */
int snap_find(struct snap_cursor *c, const struct snap *s, const char *key, size_t len,
	      struct snap_entry *e);

/*
 * Writing: entries in strictly increasing key order (memcmp, shorter first),
 * keys relative to meta->prefix. The file is written through fd (from its
 * current offset 0; the header goes last, with pwrite). snap_writer_add
 * answers -EINVAL for a key not after the previous one or a field over its
 * limit, -errno for a failed write; snap_writer_finish writes the index and
 * the header and returns 0 or -errno; free after either.
 */
struct snap_writer;
int snap_writer_new(int fd, const struct snap_meta *meta, struct snap_writer **out);
int snap_writer_add(struct snap_writer *w, const char *key, size_t key_len, uint64_t size,
		    int64_t mtime_ms, const char *etag, const char *version, size_t version_len);
int snap_writer_finish(struct snap_writer *w);
uint64_t snap_writer_count(const struct snap_writer *w);
void snap_writer_free(struct snap_writer *w);

#endif
