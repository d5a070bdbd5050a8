/*
 * uring — FUSE requests over io_uring (--fuse-uring, Linux 6.14+), next to
 * libfuse 3.14, which predates it.
 *
 * DESIGN
 * The kernel hands requests to ring entries that the daemon registered with
 * IORING_OP_URING_CMD on /dev/fuse (include/feedfs/fuse_uring.h), one queue
 * per possible CPU; a reply and the wait for the next request are one SQE
 * (COMMIT_AND_FETCH), so a request costs the daemon one io_uring_enter
 * instead of a read and a writev.
 *
 * libfuse still decodes and dispatches every request: each ring thread
 * copies the entry's header, first argument and payload into one buffer
 * laid out as /dev/fuse would have delivered it and calls
 * fuse_session_process_buf. The reply comes back through the custom-io
 * seam's writev (dirops.c), after its INIT and OPEN patches, from whichever
 * thread replies: fs_uring_reply finds the entry by the reply's unique,
 * copies the reply into the entry and wakes its thread, which commits.
 * libfuse's own multi-threaded loop keeps reading /dev/fuse for what never
 * comes over the ring (INIT, FORGET, INTERRUPT, requests made before every
 * queue had an entry); notifications (unique 0) and replies to those go to
 * /dev/fuse as before.
 *
 * Threads: FS_URING_PER_QUEUE threads per queue, each owning one io_uring
 * (128-byte SQEs, one issuer, task work deferred to its own wait) and one
 * entry. One entry per thread because the kernel hands a request to any
 * available entry of the queue and only the entry's owner can take it: an
 * entry is available exactly while its thread waits, so a request never
 * waits behind a slow one of the same thread. A queue whose threads are all
 * busy (blocked on S3) keeps its requests queued in the kernel until one
 * commits: the number of threads per queue bounds the requests in flight
 * made on one CPU.
 *
 * Negotiation and fallback: fs_uring_want before the session starts; the
 * INIT reply asks for FUSE_OVER_IO_URING when the kernel speaks 7.42+ and
 * the module parameter is Y (fs_uring_init_reply); fs_uring_start, after
 * INIT, registers every entry, and on any refusal the threads end and
 * /dev/fuse serves alone (one log line). Not under the keeper: a server's
 * ring entries die with it, and a request the kernel had handed to one
 * would never be answered nor resent (FUSE_NOTIFY_RESEND covers /dev/fuse).
 * At unmount the kernel completes every entry with ENOTCONN and the threads
 * end; fs_uring_stop joins them before the session goes. A lazy unmount
 * with files still open keeps the connection (and the entries) alive, so
 * fs_uring_stop also posts each ring a message (IORING_OP_MSG_RING): a
 * waiting thread ends, and closing its ring cancels its entry; requests
 * the kernel still queues for the ring end when the last reference to the
 * connection goes (ECONNABORTED), as they would without the ring.
 */
#include "fs_i.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <liburing.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <sys/uio.h>
#include <unistd.h>

#include "feedfs/fuse_passthrough.h"
#include "feedfs/fuse_uring.h"
#include "feedfs/log.h"

#define TAG "fs"
#define FS_URING_THREADS_MAX 64u    /* all queues together */
#define FS_URING_PER_QUEUE_MAX 16u
#define STOP_DATA 0x73746f70u        /* user_data of fs_uring_stop's message */
/* aligned_alloc wants a multiple of the alignment (C11; ASan checks it). */
#define HDR_ALLOC ((sizeof(struct fuse_uring_req_header) + 63) & ~(size_t)63)

struct ent {
	/* Set by the owner before the request goes to libfuse, cleared after
	 * the commit; read by any replying thread (fs_uring_reply). */
	_Atomic uint64_t unique;
	pthread_mutex_t m;
	pthread_cond_t c;
	int replied;                /* under m */
	struct fuse_uring_req_header *hdr;
	char *payload;
	struct iovec iov[2];
	char *req;                  /* the request as /dev/fuse lays it out */
	struct io_uring ring;
	int ring_ok;
	uint16_t qid;
	pthread_t thread;
	int thread_ok;
};

static struct {
	int mode;                   /* FS_URING_* */
	int keeper;                 /* served under the keeper: never asked for */
	atomic_int offered;         /* op_init: 7.42+ and the parameter is Y */
	atomic_int negotiated;      /* the INIT reply asked for it */
	size_t max_payload;         /* from the INIT reply */
	struct fs *fs;
	struct fuse_session *se;
	int fd;
	unsigned n;
	struct ent *ents;
	/* What a replying thread may scan: U.n once the entries are ready
	 * (release), 0 before and after (fs_uring_reply loads it first). */
	atomic_uint live;
	/* start-up: every thread says how its REGISTER went */
	pthread_mutex_t m;
	pthread_cond_t c;
	unsigned reported;
	int err;                    /* the first refusal */
	atomic_int serving;         /* the kernel handed us a request */
} U = { .m = PTHREAD_MUTEX_INITIALIZER, .c = PTHREAD_COND_INITIALIZER };

static int ring_init(struct io_uring *ring, int single);
static int submit(struct ent *e, uint32_t cmd, uint64_t commit_id, int wait);
static int wait_res(struct ent *e, int timeout_ms);

/* Whether this process can make the rings at all (128-byte SQEs): asked
 * before the INIT reply commits the connection to the ring. */
static int ring_probe(void)
{
	struct io_uring ring;
	int r = ring_init(&ring, 0);

	if (r == 0)
		io_uring_queue_exit(&ring);
	return r;
}

void fs_uring_want(int mode, int keeper)
{
	int r;

	U.mode = mode;
	U.keeper = keeper;
	if (mode != FS_URING_OFF && !keeper && (r = ring_probe()) < 0) {
		U.mode = FS_URING_OFF;
		log_warn(TAG, "fuse-uring: off: no io_uring with 128-byte SQEs here (%s)",
			 strerror(-r));
	}
}

/*
 * Once the INIT reply asked for the ring, the kernel holds every new request
 * until each queue has an entry, unless a REGISTER fails in the kernel,
 * which turns the ring off for the connection. When our own setup failed
 * (a ring, memory, a thread), one REGISTER for a queue that does not exist
 * makes that happen, and /dev/fuse serves alone. 0, or -errno when even
 * that could not be sent (the mount then waits for a ring that never comes:
 * logged as an error).
 */
static int ring_refuse(void)
{
	struct ent e;
	int r;

	memset(&e, 0, sizeof(e));
	e.qid = 0xffff;
	e.hdr = aligned_alloc(64, HDR_ALLOC);
	e.payload = malloc(U.max_payload);
	r = e.hdr && e.payload ? ring_init(&e.ring, 0) : -ENOMEM;
	if (r == 0) {
		e.iov[0].iov_base = e.hdr;
		e.iov[0].iov_len = sizeof(*e.hdr);
		e.iov[1].iov_base = e.payload;
		e.iov[1].iov_len = U.max_payload;
		r = submit(&e, FUSE_URING_CMD_REGISTER, 0, 1);
		if (r == 0)
			r = wait_res(&e, 1000);
		io_uring_queue_exit(&e.ring);
		r = r == -EINVAL ? 0 : r < 0 ? r : -EPROTO;
	}
	free(e.hdr);
	free(e.payload);
	return r;
}

/* The module parameter: 1 Y, 0 N, -1 absent (no FUSE over io_uring here). */
int fs_uring_param(void)
{
	char c = 0;
	int fd = open(FUSE_URING_PARAM, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	return c == 'Y' || c == 'y' || c == '1';
}

void fs_uring_offered(int proto_minor)
{
	atomic_store(&U.offered, proto_minor >= (int)FUSE_URING_MINOR && fs_uring_param() == 1);
}

int fs_uring_init_reply(void *init_out, size_t len)
{
	struct fuse_pt_init_out *o = init_out;
	size_t pages;

	if (U.mode == FS_URING_OFF || U.keeper || !atomic_load(&U.offered) ||
	    len < offsetof(struct fuse_pt_init_out, max_stack_depth))
		return 0;
	o->flags |= FUSE_PT_INIT_EXT;
	o->flags2 |= FUSE_URING_FLAGS2_OVER_IO_URING;
	pages = (o->flags & FUSE_URING_INIT_MAX_PAGES) ? o->max_pages : 32;
	U.max_payload = FUSE_URING_MIN_READ_BUFFER;
	if (o->max_write > U.max_payload)
		U.max_payload = o->max_write;
	if (pages * (size_t)sysconf(_SC_PAGESIZE) > U.max_payload)
		U.max_payload = pages * (size_t)sysconf(_SC_PAGESIZE);
	atomic_store(&U.negotiated, 1);
	log_debug(TAG, "init: FUSE over io_uring asked for in the reply (payload %zu)",
		  U.max_payload);
	return 1;
}

/* One REGISTER or COMMIT_AND_FETCH for e, submitted (and, with wait, in
 * the same io_uring_enter, a completion waited for): 0 or -errno. */
static int submit(struct ent *e, uint32_t cmd, uint64_t commit_id, int wait)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&e->ring);
	struct fuse_uring_cmd_req *req;
	int r;

	if (!sqe)
		return -EBUSY;
	memset(sqe, 0, 128);                /* SQE128: the command area too */
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = U.fd;
	sqe->addr = (uint64_t)(uintptr_t)e->iov;
	sqe->len = 2;
	sqe->cmd_op = cmd;
	req = (struct fuse_uring_cmd_req *)sqe->cmd;
	req->qid = e->qid;
	req->commit_id = commit_id;
	do {
		r = wait ? io_uring_submit_and_wait(&e->ring, 1) : io_uring_submit(&e->ring);
	} while (r == -EINTR);
	return r < 0 ? r : 0;
}

/* The next completion's res (0: a request is in the entry), -ETIME when
 * none came within timeout_ms (< 0: wait as long as it takes). */
static int wait_res(struct ent *e, int timeout_ms)
{
	struct __kernel_timespec ts = { timeout_ms / 1000, (timeout_ms % 1000) * 1000000LL };
	struct io_uring_cqe *cqe;
	int r;

	do {
		r = timeout_ms < 0 ? io_uring_wait_cqe(&e->ring, &cqe)
				   : io_uring_wait_cqe_timeout(&e->ring, &cqe, &ts);
	} while (r == -EINTR);
	if (r < 0)
		return r;
	r = cqe->user_data == STOP_DATA ? -ESHUTDOWN : cqe->res;
	io_uring_cqe_seen(&e->ring, cqe);
	return r;
}

static void report(int err)
{
	pthread_mutex_lock(&U.m);
	if (err && !U.err)
		U.err = err;
	U.reported++;
	pthread_cond_broadcast(&U.c);
	pthread_mutex_unlock(&U.m);
}

/* The request now in e, as libfuse reads it from /dev/fuse: its length,
 * or -EPROTO for an entry that does not add up. */
static ssize_t assemble(struct ent *e)
{
	const struct fuse_in_header *ih = (const void *)e->hdr->in_out;
	size_t payload = e->hdr->ent.payload_sz, op_len;

	if (ih->len < sizeof(*ih) || payload > U.max_payload || ih->len < sizeof(*ih) + payload)
		return -EPROTO;
	op_len = ih->len - sizeof(*ih) - payload;
	if (op_len > FUSE_URING_OP_IN_SZ)
		return -EPROTO;
	memcpy(e->req, ih, sizeof(*ih));
	memcpy(e->req + sizeof(*ih), e->hdr->op_in, op_len);
	memcpy(e->req + sizeof(*ih) + op_len, e->payload, payload);
	return (ssize_t)ih->len;
}

static void *ring_thread(void *arg)
{
	struct ent *e = arg;
	uint64_t unique = 0;
	int r;

	r = ring_init(&e->ring, 1);
	if (r < 0) {
		report(r);
		return NULL;
	}
	e->ring_ok = 1;
	/* A refusal completes at once; a registered entry completes only when
	 * a request comes: 100 ms of silence is a yes. */
	r = submit(e, FUSE_URING_CMD_REGISTER, 0, 0);
	if (r == 0)
		r = wait_res(e, 100);
	report(r == -ETIME ? 0 : r < 0 ? r : 0);
	if (r == -ETIME)
		r = wait_res(e, -1);
	for (;;) {
		const struct fuse_in_header *ih = (const void *)e->hdr->in_out;
		struct fuse_buf fb;
		ssize_t len;

		if (r < 0)
			break;
		atomic_store(&U.serving, 1);
		unique = ih->unique;
		len = assemble(e);
		pthread_mutex_lock(&e->m);
		e->replied = 0;
		pthread_mutex_unlock(&e->m);
		atomic_store(&e->unique, unique);
		if (len < 0) {
			struct fuse_out_header oh = { .len = sizeof(oh), .error = -EIO, .unique = unique };
			struct iovec iov = { &oh, sizeof(oh) };

			log_warn(TAG, "fuse-uring: a request of %u bytes (payload %u) does not add up",
				 ih->len, e->hdr->ent.payload_sz);
			fs_uring_reply(&iov, 1);
		} else {
			memset(&fb, 0, sizeof(fb));
			fb.mem = e->req;
			fb.size = (size_t)len;
			FS_STAT_INC(U.fs, uring_requests);
			fuse_session_process_buf(U.se, &fb);
		}
		/* The reply may come from another thread (and after this one
		 * returned): the entry is committed once it is in. */
		pthread_mutex_lock(&e->m);
		while (!e->replied)
			pthread_cond_wait(&e->c, &e->m);
		pthread_mutex_unlock(&e->m);
		atomic_store(&e->unique, 0);
		r = submit(e, FUSE_URING_CMD_COMMIT_AND_FETCH, unique, 1);
		if (r == 0)
			r = wait_res(e, -1);
	}
	if (r != -ENOTCONN && r != -ECANCELED && r != -ENODEV && r != -ESHUTDOWN &&
	    atomic_load(&U.serving))
		log_warn(TAG, "fuse-uring: queue %u thread ends: %s", e->qid, strerror(-r));
	return NULL;
}

int fs_uring_reply(const struct iovec *iov, int count)
{
	const struct fuse_out_header *oh = iov[0].iov_base;
	unsigned n = atomic_load_explicit(&U.live, memory_order_acquire);
	size_t body = 0, off = 0;
	struct ent *e = NULL;

	if (!n || !oh->unique || iov[0].iov_len != sizeof(*oh))
		return 0;
	for (unsigned i = 0; i < n && !e; i++)
		if (atomic_load(&U.ents[i].unique) == oh->unique)
			e = &U.ents[i];
	if (!e)
		return 0;                   /* came over /dev/fuse */
	for (int i = 1; i < count; i++)
		body += iov[i].iov_len;
	pthread_mutex_lock(&e->m);
	if (body > U.max_payload) {
		struct fuse_out_header err = { .len = sizeof(err), .error = -EIO, .unique = oh->unique };

		log_warn(TAG, "fuse-uring: a reply of %zu bytes does not fit the entry", body);
		memcpy(e->hdr->in_out, &err, sizeof(err));
		e->hdr->ent.payload_sz = 0;
	} else {
		memcpy(e->hdr->in_out, oh, sizeof(*oh));
		for (int i = 1; i < count; i++) {
			memcpy(e->payload + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
		e->hdr->ent.payload_sz = (uint32_t)body;
	}
	e->replied = 1;
	pthread_cond_signal(&e->c);
	pthread_mutex_unlock(&e->m);
	return 1;
}

static void free_ents(void)
{
	atomic_store(&U.live, 0);
	for (unsigned i = 0; i < U.n; i++) {
		struct ent *e = &U.ents[i];

		if (e->ring_ok)
			io_uring_queue_exit(&e->ring);
		free(e->hdr);
		free(e->payload);
		free(e->req);
		pthread_mutex_destroy(&e->m);
		pthread_cond_destroy(&e->c);
	}
	free(U.ents);
	U.ents = NULL;
	U.n = 0;
}

static int ent_init(struct ent *e, uint16_t qid)
{
	pthread_mutex_init(&e->m, NULL);
	pthread_cond_init(&e->c, NULL);
	e->qid = qid;
	e->hdr = aligned_alloc(64, HDR_ALLOC);
	e->payload = malloc(U.max_payload);
	e->req = malloc(sizeof(struct fuse_in_header) + FUSE_URING_OP_IN_SZ + U.max_payload);
	if (!e->hdr || !e->payload || !e->req)
		return -ENOMEM;
	memset(e->hdr, 0, sizeof(*e->hdr));
	e->iov[0].iov_base = e->hdr;
	e->iov[0].iov_len = sizeof(*e->hdr);
	e->iov[1].iov_base = e->payload;
	e->iov[1].iov_len = U.max_payload;
	return 0;
}

/* e's ring, made by the thread that will be its only submitter (with
 * IORING_SETUP_SINGLE_ISSUER any other thread's submission fails EEXIST). */
static int ring_init(struct io_uring *ring, int single)
{
	struct io_uring_params p;
	int r;

	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_SQE128;
	if (single)
		p.flags |= IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
	r = io_uring_queue_init_params(2, ring, &p);
	if (r == -EINVAL && single) {       /* a kernel without deferred task work */
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_SQE128;
		r = io_uring_queue_init_params(2, ring, &p);
	}
	return r;
}

/* The kernel's number of queues: one per possible CPU (num_possible_cpus(),
 * requests go to the queue of task_cpu()), which may be more than the CPUs
 * present. Every queue must get an entry or the ring never serves: the
 * highest CPU number in /sys/devices/system/cpu/possible, plus one. */
static unsigned possible_cpus(void)
{
	char buf[256];
	ssize_t n;
	const char *p;
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return (unsigned)get_nprocs_conf();
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return (unsigned)get_nprocs_conf();
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] < '0' || buf[n - 1] > '9'))
		buf[--n] = '\0';
	p = buf + n;
	while (p > buf && p[-1] >= '0' && p[-1] <= '9')
		p--;
	return (unsigned)strtoul(p, NULL, 10) + 1;
}

/* Every thread started is joined; the entries freed. */
static void join_all(void)
{
	for (unsigned i = 0; i < U.n; i++)
		if (U.ents[i].thread_ok)
			pthread_join(U.ents[i].thread, NULL);
	free_ents();
}

int fs_uring_start(struct fs *fs, struct fuse_session *se)
{
	const char *why = NULL;
	unsigned nq = possible_cpus(), per_q, started = 0;
	int param = fs_uring_param(), r = 0;

	if (U.mode == FS_URING_OFF)
		return 0;
	if (U.keeper)
		why = "the keeper is on (--no-keeper to use it)";
	else if (param < 0)
		why = "this kernel has no FUSE over io_uring (6.14+, CONFIG_FUSE_IO_URING)";
	else if (param == 0)
		why = "the fuse module's enable_uring parameter is N";
	else if (!atomic_load(&U.negotiated))
		why = "the kernel did not offer it in INIT (protocol 7.42+)";
	if (why) {
		if (U.mode == FS_URING_ON)
			log_warn(TAG, "fuse-uring: off: %s; requests go through /dev/fuse", why);
		else
			log_info(TAG, "fuse-uring: off: %s", why);
		return 0;
	}
	if (nq == 0 || nq > 0xffff)
		nq = 1;
	per_q = FS_URING_THREADS_MAX / nq;
	if (per_q > FS_URING_PER_QUEUE_MAX)
		per_q = FS_URING_PER_QUEUE_MAX;
	if (per_q < 2)
		per_q = 2;
	U.fs = fs;
	U.se = se;
	U.fd = fuse_session_fd(se);
	U.ents = calloc((size_t)nq * per_q, sizeof(*U.ents));
	if (!U.ents) {
		r = -ENOMEM;
		goto fail;
	}
	U.n = nq * per_q;
	for (unsigned i = 0; i < U.n && r == 0; i++)
		r = ent_init(&U.ents[i], (uint16_t)(i % nq));
	/* Tests: a setup that fails after INIT asked for the ring. */
	if (r == 0 && getenv("FEEDFS_URING_SETUP_FAIL"))
		r = -ECANCELED;
	U.reported = 0;
	U.err = 0;
	if (r == 0)
		atomic_store_explicit(&U.live, U.n, memory_order_release);
	for (unsigned i = 0; i < U.n && r == 0; i++) {
		r = -pthread_create(&U.ents[i].thread, NULL, ring_thread, &U.ents[i]);
		U.ents[i].thread_ok = r == 0;
		started += r == 0;
	}
	/* Every thread started says how its REGISTER went. */
	pthread_mutex_lock(&U.m);
	while (U.reported < started)
		pthread_cond_wait(&U.c, &U.m);
	if (r == 0)
		r = U.err;
	pthread_mutex_unlock(&U.m);
	if (r < 0)
		goto fail;
	log_info(TAG, "fuse-uring: requests over io_uring: %u queues, %u threads each, "
		 "%zu KiB payload per entry", nq, per_q, U.max_payload / 1024);
	return 1;
fail:
	log_warn(TAG, "fuse-uring: off: the ring could not be set up (%s); requests go through "
		 "/dev/fuse", strerror(-r));
	if (ring_refuse() < 0)
		log_err(TAG, "fuse-uring: the kernel waits for ring entries that will not come: "
			"requests of this mount hang until it is unmounted");
	if (U.ents) {
		/* Registered entries end at unmount (ENOTCONN); those refused
		 * ended already. Joined then, by fs_uring_stop. */
		for (unsigned i = 0; i < U.n; i++)
			if (!U.ents[i].thread_ok && U.ents[i].ring_ok) {
				io_uring_queue_exit(&U.ents[i].ring);
				U.ents[i].ring_ok = 0;
			}
	}
	return 0;
}

void fs_uring_stop(void)
{
	struct io_uring ring;
	unsigned sent = 0;

	if (!U.ents)
		return;
	/* A thread still waiting (the connection outlives a lazy unmount)
	 * gets a completion of ours; one that ended ignores it. */
	if (io_uring_queue_init(8, &ring, 0) == 0) {
		for (unsigned i = 0; i < U.n; i++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

			if (!U.ents[i].ring_ok || !U.ents[i].thread_ok)
				continue;
			if (!sqe) {
				io_uring_submit_and_wait(&ring, sent);
				io_uring_cq_advance(&ring, io_uring_cq_ready(&ring));
				sent = 0;
				sqe = io_uring_get_sqe(&ring);
			}
			io_uring_prep_msg_ring(sqe, U.ents[i].ring.ring_fd, 0, STOP_DATA, 0);
			sent++;
		}
		if (sent)
			io_uring_submit_and_wait(&ring, sent);
		io_uring_queue_exit(&ring);
	}
	join_all();
}
