/*
 * keeper.c — the process that holds the mount while servers come and go
 * (design in feedfs/keep.h). Single-threaded: one poll loop over a signalfd
 * (SIGCHLD, the stop signals, SIGUSR2) and the channel the first server
 * sends its /dev/fuse descriptor on.
 */
#include "feedfs/keep.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "feedfs/log.h"
#include "feedfs/notify.h"
#include "keep_i.h"

#define TAG "keep"
#define ENV "FEEDFS_KEEP"

struct keeper {
	char exe[PATH_MAX];
	char **argv;
	const char *mount_abs;
	int state_fd, chan_fd, fuse_fd, sig_fd;
	pid_t pid;                      /* the server; 0: none */
	unsigned takeovers;
	int stopping;                   /* a stop signal was passed on */
	time_t deaths[KEEP_CRASH_MAX];  /* ring of the last deaths */
	unsigned ndeaths;
	sigset_t old_mask;
};

int keep_from_env(struct keep_env *env)
{
	const char *v = getenv(ENV);
	static char mnt[PATH_MAX];
	int s, f, n = 0;
	unsigned t;

	memset(env, 0, sizeof(*env));
	env->state_fd = env->chan_fd = env->fuse_fd = -1;
	if (!v)
		return 0;
	if (sscanf(v, "%d,%d,%u,%n", &s, &f, &t, &n) != 3 || n == 0 || s < 0 || f < 0 ||
	    v[n] != '/' || strlen(v + n) >= sizeof(mnt))
		return -EINVAL;
	strcpy(mnt, v + n);
	unsetenv(ENV);
	env->state_fd = s;
	env->fuse_fd = f;
	env->takeovers = t;
	env->mount_abs = mnt;
	return 1;
}

/* The binary's path on disk, so that a replaced binary is what restarts. */
static void self_path(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	const char *del = " (deleted)";

	if (n <= 0) {
		snprintf(buf, len, "/proc/self/exe");
		return;
	}
	buf[n] = '\0';
	if ((size_t)n > strlen(del) && strcmp(buf + n - strlen(del), del) == 0)
		buf[n - strlen(del)] = '\0';
}

static int recv_fd(int chan)
{
	char cbuf[CMSG_SPACE(sizeof(int))], byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	struct cmsghdr *c;
	int fd = -1;

	if (recvmsg(chan, &mh, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&mh);
	if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
		memcpy(&fd, CMSG_DATA(c), sizeof(int));
	return fd;
}

/* A successor: the same binary path and arguments, the state in ENV. */
static pid_t spawn_successor(struct keeper *kp)
{
	char val[PATH_MAX + 64];
	pid_t pid;

	snprintf(val, sizeof(val), "%d,%d,%u,%s", kp->state_fd, kp->fuse_fd, kp->takeovers,
		 kp->mount_abs);
	fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid;
	/* Child: only these two descriptors cross the exec. */
	fcntl(kp->state_fd, F_SETFD, 0);
	fcntl(kp->fuse_fd, F_SETFD, 0);
	setenv(ENV, val, 1);
	sigprocmask(SIG_SETMASK, &kp->old_mask, NULL);
	execv(kp->exe, kp->argv);
	fprintf(stderr, "feedfs: keeper: exec %s: %s\n", kp->exe, strerror(errno));
	_exit(127);
}

static unsigned recent_deaths(const struct keeper *kp)
{
	time_t now = time(NULL);
	unsigned recent = 0;

	for (unsigned i = 0; i < KEEP_CRASH_MAX && i < kp->ndeaths; i++)
		recent += now - kp->deaths[i] <= KEEP_CRASH_WINDOW_S;
	return recent;
}

/* Count a death; too many within the window means a crash loop. */
static int crash_loop(struct keeper *kp)
{
	kp->deaths[kp->ndeaths++ % KEEP_CRASH_MAX] = time(NULL);
	return recent_deaths(kp) >= KEEP_CRASH_MAX;
}

/* No server will come: answer every request EIO (and the ones the last
 * server had read, resent first) until the mount goes away. */
static void answer_eio(struct keeper *kp)
{
	size_t cap = (1u << 20) + 65536;
	char *buf = malloc(cap);

	keep_notify_resend(kp->fuse_fd);
	while (buf) {
		struct { uint32_t len, opcode; uint64_t unique; } in;
		struct { uint32_t len; int32_t error; uint64_t unique; } out;
		ssize_t n = read(kp->fuse_fd, buf, cap);

		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < (ssize_t)sizeof(in))
			break;          /* ENODEV: unmounted */
		memcpy(&in, buf, sizeof(in));
		if (in.opcode == KEEP_FUSE_FORGET || in.opcode == KEEP_FUSE_BATCH_FORGET ||
		    in.opcode == KEEP_FUSE_INTERRUPT)
			continue;
		out.len = sizeof(out);
		out.error = -EIO;
		out.unique = in.unique;
		if (write(kp->fuse_fd, &out, sizeof(out)) < 0 && errno == ENODEV)
			break;
	}
	free(buf);
}

/* The kernel ended the connection (an unmount, or an abort through
 * /sys/fs/fuse/connections): /dev/fuse then polls POLLERR. A server that
 * ends after that ended with the mount, whatever its status: no successor
 * could serve anything. */
static int mount_gone(const struct keeper *kp)
{
	struct pollfd p = { .fd = kp->fuse_fd, .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

/* The server ended. 1: a successor runs now; 0: done, *rc is the exit status. */
static int server_ended(struct keeper *kp, int status, int *rc)
{
	int clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
	int dead = (int)kp->pid, deaths;

	kp->pid = 0;
	*rc = clean ? 0 : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
	if (clean || kp->fuse_fd < 0 || kp->stopping) {
		/* Unmounted (or never mounted, or asked to stop): closing our copy
		 * ends the connection, as the server's own close did before. */
		if (!clean && kp->fuse_fd >= 0 && kp->stopping)
			log_warn(TAG, "server died while stopping (status 0x%x)", status);
		return 0;
	}
	if (mount_gone(kp)) {
		if (WIFSIGNALED(status))
			log_warn(TAG, "server %d killed by signal %d after the mount was gone: "
				 "no successor", dead, WTERMSIG(status));
		else
			log_warn(TAG, "server %d exited %d after the mount was gone: no successor",
				 dead, WEXITSTATUS(status));
		return 0;
	}
	if (WIFSIGNALED(status))
		log_err(TAG, "server %d killed by signal %d", dead, WTERMSIG(status));
	else
		log_err(TAG, "server %d exited %d without unmounting", dead, WEXITSTATUS(status));
	if (crash_loop(kp)) {
		log_err(TAG, "server died %d times within %d s: no more restarts; the mount "
			"answers EIO until it is unmounted (fusermount3 -u %s)", KEEP_CRASH_MAX,
			KEEP_CRASH_WINDOW_S, kp->mount_abs);
		answer_eio(kp);
		*rc = 1;
		return 0;
	}
	deaths = recent_deaths(kp);
	if (deaths > 1) {                   /* back off a loop: 0, 1, 2, 3 s */
		log_warn(TAG, "%d deaths within %d s: the successor starts in %d s",
			 deaths, KEEP_CRASH_WINDOW_S, deaths - 1);
		sleep(deaths - 1);
	}
	kp->takeovers++;
	kp->pid = spawn_successor(kp);
	if (kp->pid < 0) {
		log_err(TAG, "cannot start a successor: %s; the mount answers EIO",
			strerror(errno));
		kp->pid = 0;
		answer_eio(kp);
		*rc = 1;
		return 0;
	}
	log_info(TAG, "successor %d started (takeover %u)", (int)kp->pid, kp->takeovers);
	return 1;
}

static int keeper_loop(struct keeper *kp)
{
	int rc = 1;

	for (;;) {
		struct pollfd p[2] = { { .fd = kp->sig_fd, .events = POLLIN },
				       { .fd = kp->chan_fd, .events = POLLIN } };
		struct signalfd_siginfo si;

		if (poll(p, kp->chan_fd >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		if (kp->chan_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP))) {
			int fd = recv_fd(kp->chan_fd);

			if (fd >= 0)
				kp->fuse_fd = fd;
			close(kp->chan_fd);     /* one message, or the server is gone */
			kp->chan_fd = -1;
		}
		if (!(p[0].revents & POLLIN))
			continue;
		if (read(kp->sig_fd, &si, sizeof(si)) != sizeof(si))
			continue;
		switch (si.ssi_signo) {
		case SIGCHLD:
			for (;;) {
				int status;
				pid_t w = waitpid(-1, &status, WNOHANG);

				if (w <= 0)
					break;
				if (w == kp->pid && !server_ended(kp, status, &rc))
					return rc;
			}
			break;
		case SIGUSR2:
			if (kp->pid > 0) {
				log_info(TAG, "SIGUSR2: restarting the server (binary %s)", kp->exe);
				kill(kp->pid, SIGKILL);
			}
			break;
		default:                        /* SIGTERM, SIGINT, SIGHUP: unmount */
			if (!kp->stopping)
				notify_stopping();
			kp->stopping = 1;
			if (kp->pid > 0)
				kill(kp->pid, (int)si.ssi_signo);
			break;
		}
	}
}

int keep_run(char **argv, const char *mount_abs, int notify_fd, keep_serve_fn serve, void *arg)
{
	struct keeper kp;
	struct keep_env env;
	sigset_t mask;
	int chan[2], rc;

	/* Its environment may hold credentials: no core dumps, no ptrace by
	 * the same user (docs/SECURITY.md), as the server. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	memset(&kp, 0, sizeof(kp));
	kp.argv = argv;
	kp.mount_abs = mount_abs;
	kp.fuse_fd = kp.chan_fd = -1;
	self_path(kp.exe, sizeof(kp.exe));
	kp.state_fd = memfd_create("feedfs-keep", MFD_CLOEXEC);
	if (kp.state_fd < 0 || ftruncate(kp.state_fd, (off_t)keep_region_bytes()) < 0 ||
	    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, chan) < 0) {
		/* Not fatal: the mount works, it just does not survive its server. */
		log_warn(TAG, "no keeper (%s): the mount will not survive its server",
			 strerror(errno));
		if (kp.state_fd >= 0)
			close(kp.state_fd);
		memset(&env, 0, sizeof(env));
		env.state_fd = env.chan_fd = env.fuse_fd = -1;
		return serve(arg, &env);
	}
	/* As the server does (daemon.c): a background job of a script inherits
	 * SIGINT ignored and must still unmount on it; an ignored SIGHUP is what
	 * nohup asked for and stays so. */
	{
		struct sigaction dfl, hup;

		memset(&dfl, 0, sizeof(dfl));
		dfl.sa_handler = SIG_DFL;
		sigaction(SIGINT, &dfl, NULL);
		sigaction(SIGTERM, &dfl, NULL);
		sigemptyset(&mask);
		sigaddset(&mask, SIGCHLD);
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGUSR2);
		if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler != SIG_IGN)
			sigaddset(&mask, SIGHUP);
	}
	sigprocmask(SIG_BLOCK, &mask, &kp.old_mask);
	kp.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC);
	fflush(NULL);
	kp.pid = kp.sig_fd >= 0 ? fork() : -1;
	if (kp.pid == 0) {
		sigprocmask(SIG_SETMASK, &kp.old_mask, NULL);
		close(kp.sig_fd);
		close(chan[0]);
		memset(&env, 0, sizeof(env));
		env.state_fd = kp.state_fd;
		env.chan_fd = chan[1];
		env.fuse_fd = -1;
		env.mount_abs = mount_abs;
		_exit(serve(arg, &env));
	}
	close(chan[1]);
	if (kp.pid < 0) {
		sigprocmask(SIG_SETMASK, &kp.old_mask, NULL);
		close(chan[0]);
		close(kp.state_fd);
		memset(&env, 0, sizeof(env));
		env.state_fd = env.chan_fd = env.fuse_fd = -1;
		return serve(arg, &env);
	}
	kp.chan_fd = chan[0];
	if (notify_fd >= 0) {
		/* Daemonized: the server reports ready (or its death does); the
		 * keeper lets go of the terminal as the server does once ready. */
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);

		close(notify_fd);
		if (null >= 0) {
			dup2(null, STDIN_FILENO);
			dup2(null, STDOUT_FILENO);
			dup2(null, STDERR_FILENO);
			if (null > STDERR_FILENO)
				close(null);
		}
	}
	rc = keeper_loop(&kp);
	if (kp.fuse_fd >= 0)
		close(kp.fuse_fd);
	close(kp.state_fd);
	close(kp.sig_fd);
	return rc;
}
