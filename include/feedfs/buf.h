/*
 * buf — the one growable byte buffer: response bodies (s3, creds) and the
 * strings SigV4 builds.
 *
 *   struct util_buf b = { .wipe = 1 };     // zero-initialised is ready to use
 *   util_buf_puts(&b, "x"); util_buf_append(&b, p, n);
 *   if (b.oom) ...                          // or check each return
 *   util_buf_free(&b);
 *
 * The bytes are always NUL-terminated once anything was appended (b.p[b.len]
 * is '\0'), so a text body can be handed to a string parser as is; b.p may be
 * NULL while nothing has been. An allocation failure returns -ENOMEM and sets
 * b.oom, after which every append is a no-op: a builder can append a whole
 * string and check once at the end. With .wipe set (the buffer holds secrets:
 * credentials, a signing key's inputs) every byte is wiped before its storage
 * is freed or moved by growth, and on reset.
 */
#ifndef FEEDFS_BUF_H
#define FEEDFS_BUF_H

#include <stddef.h>

struct util_buf {
	char *p;
	size_t len, cap;       /* cap counts the NUL's byte */
	unsigned wipe : 1;     /* set by the owner before first use */
	unsigned oom : 1;      /* sticky: an append failed */
};

/* Room for n more bytes and the NUL. 0, or -ENOMEM (and oom set). */
int util_buf_reserve(struct util_buf *b, size_t n);
/* Append n bytes (may hold NULs). 0, or -ENOMEM. */
int util_buf_append(struct util_buf *b, const void *p, size_t n);
int util_buf_puts(struct util_buf *b, const char *s);
int util_buf_putc(struct util_buf *b, char c);
/* Empty it, keeping the storage (wiped when .wipe); clears oom. */
void util_buf_reset(struct util_buf *b);
/* Release the storage (wiped when .wipe); the struct is empty again, wipe kept. */
void util_buf_free(struct util_buf *b);
/* The bytes as a malloc'd string the caller frees ("" when nothing was
 * appended), leaving b empty; NULL (and b freed) when an append had failed. */
char *util_buf_take(struct util_buf *b);

#endif
