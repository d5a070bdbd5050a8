/*
 * order — the O verb of a mount's control socket: a training loader's file
 * order for loader-order prefetch (hint.h; `feedfs prefetch --order`).
 *
 * DESIGN
 * "O <count> <nbytes>[ <stream>]\n" + exactly nbytes of payload: count paths,
 * each ended by '\n', relative to the mount root, in the order the loader
 * opens them. The order replaces the previous one of the same stream (a
 * name of [A-Za-z0-9._-], at most HINT_STREAM_MAX bytes; none: the default
 * stream): one per rank of a distributed loader. "O 0 0 <stream>\n" clears
 * that stream's order, "O 0 0\n" every order. Bounds: HINT_MAX_PATHS paths and
 * HINT_MAX_BYTES bytes; over them the reply is "ERR 7" (E2BIG) and the
 * connection is closed without reading the payload (nobody should have to
 * receive half a gigabyte to refuse it). A malformed path refuses the whole
 * order, "ERR 22" (EINVAL), and nothing changes. Otherwise the list is stored
 * (the engine resolves it in the background) and the reply is "OK <count>\n"
 * at once. The payload buffer is handed to the engine as it is: one copy of
 * the order in memory, not two.
 */
#include "feedfs/ctl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "feedfs/hint.h"
#include "feedfs/log.h"
#include "feedfs/util.h"

#define TAG "order"

/* "OK <v>\n" or "ERR <v>\n". 0, or -1 when the peer is gone. */
static int reply(struct ctl_conn *k, const char *what, unsigned long long v)
{
	char line[64];

	snprintf(line, sizeof(line), "%s %llu\n", what, v);
	return util_send_all(k->fd, line, strlen(line)) < 0 ? -1 : 0;
}

static int handle_order(void *arg, struct ctl_conn *k, const char *line)
{
	struct hint *h = arg;
	unsigned long long v[2];
	char nums[64], *payload;
	const char *stream = "", *sp;
	size_t nl;
	int e;

	/* "<count> <nbytes>" then, after one more space, the stream. */
	sp = strchr(line, ' ');
	sp = sp ? strchr(sp + 1, ' ') : NULL;
	nl = sp ? (size_t)(sp - line) : strlen(line);
	if (nl >= sizeof(nums))
		return -1;
	memcpy(nums, line, nl);
	nums[nl] = '\0';
	if (ctl_parse_nums(nums, v, 2) < 0)
		return -1;
	if (sp) {
		stream = sp + 1;
		if (!stream[0] || hint_stream_check(stream) < 0) {
			reply(k, "ERR", EINVAL);
			return -1;              /* a payload may follow, unread */
		}
	}
	if (v[0] > HINT_MAX_PATHS || v[1] > HINT_MAX_BYTES) {
		reply(k, "ERR", E2BIG);
		shutdown(k->fd, SHUT_WR);
		return -1;
	}
	if (v[0] == 0 || v[1] == 0) {
		if (v[0] != v[1]) {
			/* No paths in some bytes, or paths in none: malformed. Bytes
			 * sent are unread, so that connection cannot go on. */
			if (reply(k, "ERR", EINVAL) < 0)
				return -1;
			return v[1] ? -1 : 0;
		}
		hint_clear(h, sp ? stream : NULL);
		if (sp)
			log_info(TAG, "order of stream '%s' cleared", stream);
		else
			log_info(TAG, "orders cleared");
		return reply(k, "OK", 0);
	}
	payload = malloc((size_t)v[1]);
	if (!payload) {
		reply(k, "ERR", ENOMEM);
		return -1;                  /* the payload is still unread */
	}
	if (util_read_all(k->fd, payload, (size_t)v[1]) < 0) {
		free(payload);
		return -1;
	}
	e = hint_order_check(payload, (size_t)v[1], (size_t)v[0]);
	if (e == 0)
		e = hint_set_order(h, stream, payload, (size_t)v[1], (size_t)v[0]);
	if (e < 0) {
		free(payload);
		log_info(TAG, "order of %llu paths%s%s refused: %s", v[0], sp ? " for stream " : "",
			 stream, e == -E2BIG ? "it needs more than half the memory budget "
			 "(--max-memory)" : strerror(-e));
		return reply(k, "ERR", (unsigned long long)-e);
	}
	log_info(TAG, "order of %llu paths (%llu bytes)%s%s received", v[0], v[1],
		 sp ? " for stream " : "", stream);
	return reply(k, "OK", v[0]);
}

void ctl_order_register(struct hint *h, struct ctl_config *cfg)
{
	BUG_ON(cfg->n_extra >= sizeof(cfg->extra) / sizeof(cfg->extra[0]));
	cfg->extra[cfg->n_extra++] = (struct ctl_verb){ 'O', handle_order, h };
}
