/*
 * fuzz_http_headers — response header lines and range checks of one S3 GET
 * attempt (on_header, on_body, check_success in src/s3/request.c, which is
 * compiled into this harness so that its static functions can be reached).
 *
 * Input: byte 0 picks the requested range; then header lines separated by
 * '\n', up to an empty line; the rest is the body, delivered in 3 pieces. The
 * invariants: never a byte written past the requested length, and an attempt
 * judged a success has exactly that many bytes for exactly that range.
 */
#include "../../src/s3/request.c"

static const uint64_t offs[] = { 0, 1, 4095, 1 << 20, 0xffffffffull, 1ull << 40 };
static const size_t lens[] = { 1, 7, 100, 4096 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct s3_client c;
	struct s3_req r;
	unsigned char buf[4096 + 16];
	const char *p = (const char *)data, *end;
	size_t left;

	if (size < 1)
		return 0;
	memset(&r, 0, sizeof(r));
	r.c = &c;
	r.op = S3_OP_GET;
	r.off = offs[data[0] % 6];
	r.len = lens[(data[0] / 6) % 4];
	r.buf = buf;
	r.if_match = (data[0] & 0x80) ? "\"abc\"" : NULL;
	memset(buf, 0xee, sizeof(buf));
	p++;
	left = size - 1;
	while (left) {
		const char *nl = memchr(p, '\n', left);
		size_t n = nl ? (size_t)(nl - p) + 1 : left;
		char *line = malloc(n);     /* exact size: ASan sees any over-read */

		if (!line)
			return 0;
		memcpy(line, p, n);
		on_header(line, 1, n, &r);
		free(line);
		p += n;
		left -= n;
		if (n <= 2)
			break;          /* blank line: headers done */
	}
	end = p + left;
	for (int piece = 0; piece < 3 && p < end; piece++) {
		size_t n = piece == 2 ? (size_t)(end - p) : (size_t)(end - p) / 2;
		char *chunk = malloc(n ? n : 1);

		if (!chunk)
			break;
		memcpy(chunk, p, n);
		if (on_body(chunk, 1, n, &r) != n) {
			free(chunk);
			break;
		}
		free(chunk);
		p += n;
	}
	for (size_t i = r.len; i < sizeof(buf); i++)
		if (buf[i] != 0xee)
			abort();        /* written past the requested length */
	if (r.got > r.len)
		abort();
	if (r.status >= 200 && r.status < 300 && check_success(&r) == 0 &&
	    (r.got != r.len || (r.status == 206 && !content_range_ok(&r))))
		abort();
	util_buf_free(&r.body);
	return 0;
}
