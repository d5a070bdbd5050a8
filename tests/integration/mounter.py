"""mounter — the one way the integration tests start feedfs (a pytest plugin,
loaded through conftest's pytest_plugins).

DESIGN
  Every daemon a test starts goes through one Mounter, owned by the function
  fixture `mounter`; `mount` (s3rver and the stubs: keys in the environment)
  and servers.py's `feedfs` (RGW, credential providers, TLS: a scrubbed
  environment) are two views of it. So every daemon, whichever view started it:
    - runs under $FEEDFS_WRAP (run.sh sets valgrind there for the `vg` pass);
    - is killed by a watchdog once the test has run TEST_DEADLINE_S since its
      first daemon, so a hung mount fails the test instead of hanging the run;
    - is unmounted at teardown, and a daemon that outlives its unmount fails
      the test;
    - fails the test with any sanitizer or valgrind report it leaves in
      $FEEDFS_SAN_LOG_DIR (reports that were there before the test are not
      its own).
  Plain commands (`feedfs --dry-run`, `feedfs stats`) go through the same
  wrapper and the same report check.

  Counters: `feedfs_stats(m)` reads a running mount's counters through its
  control socket (`feedfs stats --json`); `settled_stats` waits until they stop
  moving. `logged_stats(log)` parses the lines a daemon logs at unmount: only
  for counts that must include what happened while the mount went away.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ACCESS_KEY = "S3RVER"
SECRET_KEY = "S3RVER"
REGION = "us-east-1"
MOUNT_TIMEOUT_S = 60
UMOUNT_TIMEOUT_S = 30
# A test still running this long after its first daemon is hung; the soak
# (tests/soak.sh) runs for minutes on purpose and sets its own.
TEST_DEADLINE_S = float(os.environ.get("FEEDFS_TEST_DEADLINE_S") or 240)
# A command every daemon is started under (run.sh sets it to valgrind for the `vg` pass)
WRAP = shlex.split(os.environ.get("FEEDFS_WRAP", ""))
SAN_LOG_DIR = os.environ.get("FEEDFS_SAN_LOG_DIR")   # set by run.sh for the sanitizer pass


# ---------------------------------------------------------------- processes and mounts

def is_mounted(path):
    # abspath, not realpath: resolving would send a request to a possibly hung mount
    path = os.path.abspath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].encode().decode("unicode_escape")
            if mp == path:
                return True
    return False


def pids_of_mount(binary, mnt):
    """Processes whose command line names this binary and this mount point."""
    found = []
    bname = os.path.basename(binary)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # argv[0] is the binary, or a wrapper (valgrind) that names it later
        named = argv and (os.path.basename(argv[0].decode(errors="replace")) == bname or
                          (WRAP and binary.encode() in argv))
        if named and mnt.encode() in argv:
            found.append(int(d))
    return found


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def s3rver_env(extra=None):
    """os.environ with s3rver's keys and no session token or profile."""
    e = dict(os.environ)
    e.update({"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY})
    e.pop("AWS_SESSION_TOKEN", None)
    e.pop("AWS_PROFILE", None)
    if extra:
        e.update(extra)
    return e


def s3rver_args(endpoint):
    """The options a mount of a local S3 server (s3rver, the stub, a proxy) needs."""
    return ["--endpoint-url", endpoint, "--force-path-style", "--region", REGION]


def mount_argv(binary, source, mnt, log=None, args=()):
    """WRAP + `feedfs SOURCE MNT [--log-file LOG] ARGS`."""
    argv = WRAP + [binary, source, mnt]
    if log:
        argv += ["--log-file", log]
    return argv + list(args)


def run_feedfs(binary, source, mnt, args=(), endpoint=None, env=None, log=None, timeout=MOUNT_TIMEOUT_S):
    """Runs feedfs once (it daemonizes); returns (CompletedProcess, seconds).
    Nothing watches what it mounts: tests use the `mount` fixture, or
    `mounter.mount(..., ok=False)` for a mount that must fail."""
    margs = (s3rver_args(endpoint) if endpoint else []) + list(args)
    t0 = time.monotonic()
    cp = subprocess.run(mount_argv(binary, source, mnt, log, margs), capture_output=True,
                        timeout=timeout, env=s3rver_env(env), stdin=subprocess.DEVNULL)
    return cp, time.monotonic() - t0


def unmount(path, pids, timeout=UMOUNT_TIMEOUT_S):
    """Unmounts (fusermount3 -u, then -uz) and waits for the daemon to exit.
    Returns a list of problems (empty when clean)."""
    problems = []
    if is_mounted(path):
        # The kernel sends FUSE_RELEASE after close() returns, asynchronously;
        # on a loaded machine the mount can still be busy for a moment after
        # the test closed its last file. Busy for 3 s is a real problem.
        for _ in range(15):
            r = subprocess.run(["fusermount3", "-u", path], capture_output=True, text=True)
            if r.returncode == 0 or "busy" not in r.stderr:
                break
            time.sleep(0.2)
        if r.returncode != 0:
            problems.append("fusermount3 -u failed: %s" % r.stderr.strip())
            subprocess.run(["fusermount3", "-uz", path], capture_output=True)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(pid):
            problems.append("daemon %d still running %ds after unmount" % (pid, timeout))
            os.kill(pid, signal.SIGKILL)
    if is_mounted(path):
        problems.append("still mounted after unmount")
        subprocess.run(["fusermount3", "-uz", path], capture_output=True)
    return problems


SAN_ENV = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS")


def san_scoped(argv, env, d):
    """argv and env with every report path that run.sh pointed at
    $FEEDFS_SAN_LOG_DIR (the sanitizers' log_path=, valgrind's --log-file=)
    moved into the directory d: reports then name the test whose daemon wrote
    them. Successors inherit both (the keeper execs the same argv and env)."""
    top = SAN_LOG_DIR.rstrip("/") + "/"
    env = dict(env)
    for k in SAN_ENV:
        v = env.get(k, os.environ.get(k))
        if v:
            env[k] = v.replace("log_path=" + top, "log_path=%s/" % d)
    argv = [a.replace("--log-file=" + top, "--log-file=%s/" % d) for a in argv]
    return argv, env


def san_reports(d):
    """{name: path} of every non-empty report file in directory d."""
    out = {}
    for n in os.listdir(d) if os.path.isdir(d) else ():
        p = os.path.join(d, n)
        if os.path.getsize(p) > 0:
            out[n] = p
    return out


# ---------------------------------------------------------------- counters

def feedfs_stats(m, form="--json"):
    """The mount's counters as its daemon reports them (`feedfs stats --json`):
    the one way tests read counters while a mount runs."""
    cp = subprocess.run([m.binary, "stats", form, m.path], capture_output=True, text=True,
                        timeout=30)
    assert cp.returncode == 0, "feedfs stats %s: exit %d: %s" % (m.path, cp.returncode, cp.stderr)
    return json.loads(cp.stdout) if form == "--json" else cp.stdout


def counter_groups(st):
    """The counter groups of a `feedfs stats --json` object ({group: {key: n}}),
    without what moves on its own (uptime, rates, the process's memory gauges)."""
    return {k: v for k, v in st.items() if isinstance(v, dict) and k not in ("now", "process")}


def settled_stats(m, proxy=None, tries=100):
    """feedfs_stats(m) once what is still in flight (readahead, write-behind,
    cancels) has finished: two reads of every counter a moment apart agree
    (and so do the proxy's counts, given a counting proxy). For counts that
    could still move after the reads the test made."""
    last = None
    for _ in range(tries):
        st = feedfs_stats(m)
        now = (counter_groups(st), (proxy.gets(), proxy.get_bytes) if proxy else None)
        if now == last:
            return st
        last = now
        time.sleep(0.3)
    pytest.fail("counters of %s never settled: %r" % (m.path, last))


def logged_stats(log):
    """The counters a daemon logged at unmount (one line per group, written
    from the same tables as `feedfs stats`): {group: {key: value}}. For
    counts that must include what finished while the mount went away."""
    out = {}
    pat = re.compile(r"feedfs\[\w+\] (\w+): ((?:\w+ \d+(?:, )?)+)$")
    with open(log, errors="replace") as f:
        for line in f:
            mm = pat.search(line.rstrip("\n"))
            if mm:
                out[mm.group(1)] = {k: int(v) for k, v in
                                    (kv.split(" ") for kv in mm.group(2).split(", "))}
    return out


# ---------------------------------------------------------------- the Mounter

class Mount:
    def __init__(self, path, log, pids, binary):
        self.path, self.log, self.pids, self.binary = path, log, pids, binary

    @property
    def server(self):
        """The pid serving the mount: under the keeper (keep.h) the process
        whose parent is the keeper; alone (--no-keeper), the only one."""
        for pid in self.pids:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid in self.pids:
                return pid
        return self.pids[0]

    def p(self, rel):
        return os.path.join(self.path, rel)


class Mounter:
    """Every feedfs one test starts (see DESIGN above). Safe to use from
    several threads at once (mounts started together)."""

    def __init__(self, request, tmp, binary):
        self.request, self.tmp, self.binary = request, str(tmp), binary
        self.mounted = []               # Mount, in mount order; under lock
        self.n = 0                      # names mnt<n>, feedfs<n>.log; under lock
        self.lock = threading.Lock()
        request.node.feedfs_logs = getattr(request.node, "feedfs_logs", [])
        self.san_dirs = []              # this test's report directories; under lock
        self.done = threading.Event()
        self.hung = False
        self.watching = False

    def _watch(self):
        """Starts the watchdog with the first daemon, not the test: a test may
        first wait minutes for a session server (RGW) to come up."""
        with self.lock:
            if self.watching:
                return
            self.watching = True
        threading.Thread(target=self._watchdog, daemon=True).start()

    def _watchdog(self):
        if self.done.wait(TEST_DEADLINE_S):
            return
        self.hung = True
        with self.lock:
            pids = [pid for m in self.mounted for pid in m.pids]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)   # pending requests fail with ENOTCONN
            except OSError:
                pass

    def _paths(self, mnt):
        with self.lock:
            n = self.n
            self.n += 1
        if mnt is None:
            mnt = os.path.join(self.tmp, "mnt%d" % n)
            os.mkdir(mnt)
        log = os.path.join(self.tmp, "feedfs%d.log" % n)
        self.request.node.feedfs_logs.append(log)
        return mnt, log

    def mount(self, source, args=(), env=None, mnt=None, binary=None, ok=True, text=False):
        """`feedfs SOURCE MNT --log-file LOG ARGS` (it daemonizes) with env as its
        whole environment (default: os.environ with s3rver's keys). ok=True:
        fails the test unless it exited 0 and mounted; returns a Mount.
        ok=False (a mount that must fail): returns the CompletedProcess (text
        or bytes) once it checked that nothing got mounted."""
        binary = binary or self.binary
        mnt, log = self._paths(mnt)
        self._watch()
        argv, env = self._scoped(mount_argv(binary, source, mnt, log, args),
                                 s3rver_env() if env is None else env)
        t0 = time.monotonic()
        cp = subprocess.run(argv, capture_output=True, text=text, timeout=MOUNT_TIMEOUT_S,
                            stdin=subprocess.DEVNULL, env=env)
        secs = time.monotonic() - t0
        mounted = cp.returncode == 0 and is_mounted(mnt)
        if mounted:
            m = Mount(mnt, log, pids_of_mount(binary, mnt), binary)
            with self.lock:
                self.mounted.append(m)
        if not ok:
            assert not is_mounted(mnt), "mounted although it should have failed"
            return cp
        if cp.returncode != 0:
            err = cp.stderr if text else cp.stderr.decode(errors="replace")
            pytest.fail("feedfs %s %s exited %d after %.1fs: %s" % (
                source, " ".join(args), cp.returncode, secs, err.strip()))
        if not mounted:
            pytest.fail("feedfs exited 0 but %s is not mounted" % mnt)
        return m

    def run(self, args, env=None, timeout=90, text=True):
        """`feedfs ARGS`, a command that does not mount, under the same wrapper;
        returns the CompletedProcess."""
        self._watch()
        argv, env = self._scoped(WRAP + [self.binary] + list(args),
                                 s3rver_env() if env is None else env)
        return subprocess.run(argv, capture_output=True, text=text, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=env)

    def _scoped(self, argv, env):
        """argv, env writing their sanitizer reports into a directory of this
        test's own (san_scoped); unchanged outside the sanitizer passes."""
        if not SAN_LOG_DIR:
            return argv, env
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.request.node.nodeid)[-100:]
        d = tempfile.mkdtemp(prefix=name + ".", dir=SAN_LOG_DIR)
        with self.lock:
            self.san_dirs.append(d)
        return san_scoped(argv, env, d)

    def find(self, path):
        with self.lock:
            for m in self.mounted:
                if m.path == path:
                    return m
        return None

    def unmount(self, m):
        """Unmounts m now; returns the problems (empty when clean)."""
        with self.lock:
            if m in self.mounted:
                self.mounted.remove(m)
        return unmount(m.path, m.pids)

    def close(self):
        """Teardown: every problem of the test's daemons, as a list of lines."""
        self.done.set()
        problems = []
        if self.hung:
            problems.append("test still running %ds after its first daemon: feedfs killed to "
                            "unblock it" % TEST_DEADLINE_S)
        with self.lock:
            left, self.mounted = self.mounted, []
        for m in reversed(left):
            problems += unmount(m.path, m.pids)
        for d in self.san_dirs:
            for name, path in sorted(san_reports(d).items()):
                with open(path, errors="replace") as f:
                    problems.append("sanitizer report %s:\n%s" % (name, f.read()[-6000:]))
        return problems


# ---------------------------------------------------------------- report hook

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for path in getattr(item, "feedfs_logs", []):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            text = data[-12000:].decode(errors="replace")
            rep.sections.append(("feedfs log %s (last %d bytes)" % (path, len(text)), text))


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def feedfs_bin():
    b = os.environ.get("FEEDFS_BIN", os.path.join(ROOT, "build", "feedfs"))
    if not os.access(b, os.X_OK):
        pytest.exit("FEEDFS_BIN %s is not an executable" % b, returncode=3)
    return os.path.abspath(b)


@pytest.fixture
def mounter(request, feedfs_bin, tmp_path):
    """The test's Mounter; fails the test at teardown on any problem of its daemons."""
    mt = Mounter(request, tmp_path, feedfs_bin)
    yield mt
    problems = mt.close()
    if problems:
        pytest.fail("teardown: " + "\n".join(problems))


@pytest.fixture
def mount(mounter, s3server):
    """mount(bucket, prefix="", *args, endpoint=None, binary=None, mnt=None, ok=True)
    -> Mount (ok=False: the CompletedProcess of a mount that must fail).
    Mounts s3rver (or `endpoint`) with s3rver's keys; unmounts at teardown."""
    def do_mount(bucket, prefix="", *args, endpoint=None, binary=None, mnt=None, ok=True):
        source = "s3://%s/%s" % (bucket, prefix) if prefix else "s3://%s" % bucket
        return mounter.mount(source, s3rver_args(endpoint or s3server.url) + list(args),
                             mnt=mnt, binary=binary, ok=ok)
    return do_mount
