"""Restart survival (include/feedfs/keep.h): the mount outlives the process
that serves it. The process feedfs starts is a keeper holding /dev/fuse; its
server can be killed (kill -9) or replaced (SIGUSR2, a new binary on disk)
while readers have files open, and a successor takes the mount over. Every
byte is compared with what was uploaded; the serving pid and the takeover
count come from `feedfs stats --json`.
"""
import errno
import hashlib
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import content_for, feedfs_stats
from mounter import pid_alive

MIB = 1 << 20
NFILES = 8
SIZE = 24 * MIB


@pytest.fixture(scope="module")
def kbucket(s3):
    b = "keep-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=b)
    data = {}
    for i in range(NFILES):
        k = "shards/s%02d.bin" % i
        data[k] = content_for(k, SIZE)
        s3.put_object(Bucket=b, Key=k, Body=data[k])
    for d in ("a", "b"):
        for i in range(20):
            k = "tree/%s/f%02d.txt" % (d, i)
            data[k] = content_for(k, 1000 + i)
            s3.put_object(Bucket=b, Key=k, Body=data[k])
    return b, data


def serving_pid(m):
    return feedfs_stats(m)["pid"]


def wait_takeover(m, n, timeout=30):
    """Stats once the n-th successor serves (the control socket answers)."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            st = feedfs_stats(m)
            if st["takeovers"] >= n:
                return st
            last = st["takeovers"]
        except AssertionError as e:      # between servers: no socket yet
            last = str(e)
        time.sleep(0.1)
    pytest.fail("takeover %d never came: %r" % (n, last))


class Readers:
    """NFILES threads, one open file each, reading it whole in 1 MiB steps
    with a pause, so that they are mid-file when the server dies."""

    def __init__(self, m, data, pause=0.01):
        self.m, self.data, self.pause = m, data, pause
        self.results = {}
        self.ts = [threading.Thread(target=self.run, args=(k,)) for k in sorted(data)
                   if k.startswith("shards/")]

    def run(self, k):
        h = hashlib.sha256()
        try:
            with open(self.m.p(k), "rb", buffering=0) as f:
                while True:
                    b = f.read(MIB)
                    if not b:
                        break
                    h.update(b)
                    time.sleep(self.pause)
            self.results[k] = h.hexdigest() == hashlib.sha256(self.data[k]).hexdigest()
        except OSError as e:
            self.results[k] = "errno %d (%s)" % (e.errno, e.strerror)

    def start(self):
        for t in self.ts:
            t.start()

    def join(self):
        for t in self.ts:
            t.join(120)
        return self.results


# Not in the TSan pass: a successor inherits /dev/fuse across exec, and TSan,
# which orders a reply written to a descriptor before the next request read
# from it only for descriptors it saw opened, then reports the kernel-ordered
# read-then-release of one handle as a race (it is not: the kernel sends
# RELEASE only after every READ of the file was answered).
@pytest.mark.san
def test_kill_9_under_readers_with_open_files(mount, kbucket):
    bucket, data = kbucket
    m = mount(bucket, "")
    first = serving_pid(m)
    assert feedfs_stats(m)["takeovers"] == 0
    r = Readers(m, data)
    r.start()
    pids = [first]
    for n in (1, 2, 3):
        time.sleep(0.4)
        os.kill(pids[-1], signal.SIGKILL)
        st = wait_takeover(m, n)
        assert st["pid"] not in pids
        pids.append(st["pid"])
    res = r.join()
    assert res == {k: True for k in data if k.startswith("shards/")}, res
    # The tree the dead servers never listed, and one they did: lookups of
    # numbers the successor never gave out are adopted.
    assert sorted(os.listdir(m.p("tree/a"))) == ["f%02d.txt" % i for i in range(20)]
    for k in ("tree/a/f03.txt", "tree/b/f19.txt"):
        assert open(m.p(k), "rb").read() == data[k]
    assert feedfs_stats(m)["takeovers"] == 3
    for p in pids[:-1]:
        assert not pid_alive(p)


@pytest.mark.san
def test_open_directory_and_cwd_survive(mount, kbucket):
    bucket, data = kbucket
    m = mount(bucket, "")
    fd = os.open(m.p("tree/b"), os.O_RDONLY | os.O_DIRECTORY)
    f = open(m.p("tree/b/f07.txt"), "rb")
    try:
        st0 = os.fstat(f.fileno())
        os.kill(serving_pid(m), signal.SIGKILL)
        wait_takeover(m, 1)
        # The open file (a handle the successor never opened), fstat on it,
        # and the directory handle: all answered by the successor.
        assert f.read() == data["tree/b/f07.txt"]
        assert os.fstat(f.fileno()).st_size == st0.st_size
        assert sorted(os.listdir("/proc/self/fd/%d" % fd)) == \
            ["f%02d.txt" % i for i in range(20)]
        names = sorted(e.name for e in os.scandir(m.p("tree/b")))
        assert names == ["f%02d.txt" % i for i in range(20)]
    finally:
        f.close()
        os.close(fd)


def test_upgrade_by_sigusr2_runs_the_binary_now_on_disk(mounter, s3server, kbucket, tmp_path):
    bucket, data = kbucket
    binary = str(tmp_path / "feedfs")
    shutil.copy2(mounter.binary, binary)
    m = mounter.mount("s3://%s/" % bucket, ["--endpoint-url", s3server.url,
                                            "--force-path-style", "--region", "us-east-1"],
                      binary=binary)
    keeper = min(m.pids)
    old = serving_pid(m)
    # "Upgrade": a new file at the binary's path (install(1) replaces it so).
    tmp = binary + ".new"
    shutil.copy2(mounter.binary, tmp)
    os.rename(tmp, binary)
    new_ino = os.stat(binary).st_ino
    r = Readers(m, data, pause=0.02)
    r.start()
    time.sleep(0.3)
    os.kill(keeper, signal.SIGUSR2)
    st = wait_takeover(m, 1)
    assert st["pid"] != old
    assert os.stat("/proc/%d/exe" % st["pid"]).st_ino == new_ino
    assert r.join() == {k: True for k in data if k.startswith("shards/")}


def test_crash_loop_stops_with_eio_not_a_hang(mount, kbucket):
    bucket, data = kbucket
    m = mount(bucket, "")
    k = "tree/a/f01.txt"
    assert open(m.p(k), "rb").read() == data[k]
    for n in range(1, 5):
        os.kill(serving_pid(m), signal.SIGKILL)
        wait_takeover(m, n)
    os.kill(serving_pid(m), signal.SIGKILL)      # the 5th death within 60 s
    time.sleep(0.5)
    with pytest.raises(OSError) as ei:
        open(m.p("tree/b/f02.txt"), "rb").read()
    assert ei.value.errno == errno.EIO
    log = open(m.log, errors="replace").read()
    assert log.count("no more restarts") == 1, log[-2000:]
    # every successor the log announces was started; the last death starts none
    assert log.count("successor ") - log.count("successor starts in") == \
        log.count(" started (takeover"), log[-2000:]


def test_no_keeper_is_one_process(mount, kbucket):
    bucket, data = kbucket
    m = mount(bucket, "", "--no-keeper")
    assert len(m.pids) == 1 and serving_pid(m) == m.pids[0]
    assert open(m.p("tree/a/f00.txt"), "rb").read() == data["tree/a/f00.txt"]


def fuse_conn(m):
    """/sys/fs/fuse/connections/N of m's mount (N: the minor of its st_dev),
    mounting the fusectl file system there when it is not (as root)."""
    top = "/sys/fs/fuse/connections"
    if not os.listdir(top):
        r = subprocess.run(["mount", "-t", "fusectl", "fusectl", top], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip("no fusectl at %s: %s" % (top, r.stderr.strip()))
    conn = "%s/%d" % (top, os.minor(os.stat(m.path).st_dev))
    assert os.path.exists(conn + "/abort"), "%s has no abort file" % conn
    return conn


def wait_gone(pids, what):
    for pid in pids:
        end = time.monotonic() + 30
        while pid_alive(pid) and time.monotonic() < end:
            time.sleep(0.05)
        assert not pid_alive(pid), "%s: process %d still running 30 s after" % (what, pid)


@pytest.mark.san
@pytest.mark.vg
def test_adopted_handles_freed_when_the_kernel_never_releases_them(mount, kbucket):
    """A successor adopts an open directory and an open file, then the kernel
    ends the connection with both still open (an abort: no RELEASE ever comes,
    as when the releases are still queued at an unmount). The successor frees
    them at its exit (the ASan and valgrind passes fail on a leak), exits
    clean, and the keeper starts no successor for the mount that is gone."""
    bucket, data = kbucket
    m = mount(bucket, "")
    conn = fuse_conn(m)
    fd = os.open(m.p("tree/a"), os.O_RDONLY | os.O_DIRECTORY)
    f = open(m.p("tree/a/f03.txt"), "rb")
    try:
        os.kill(serving_pid(m), signal.SIGKILL)
        st = wait_takeover(m, 1)
        # getdents on the handle itself (a listdir of /proc/self/fd/N would
        # open a new one): the successor adopts it.
        assert sorted(os.listdir(fd)) == ["f%02d.txt" % i for i in range(20)]
        assert f.read() == data["tree/a/f03.txt"]
        with open(conn + "/abort", "w") as a:
            a.write("1")
        wait_gone([st["pid"]] + m.pids, "after the abort")
    finally:
        f.close()
        os.close(fd)
    log = open(m.log, errors="replace").read()
    assert "started (takeover 2)" not in log, log[-3000:]
    assert "the mount is gone" in log, log[-3000:]


def test_no_successor_once_the_mount_is_gone(mount, kbucket):
    """The server dies (SIGKILL) after the kernel ended the connection: that
    is the end of the mount, not a death to recover from."""
    bucket, data = kbucket
    m = mount(bucket, "")
    conn = fuse_conn(m)
    assert open(m.p("tree/b/f01.txt"), "rb").read() == data["tree/b/f01.txt"]
    server = serving_pid(m)
    os.kill(server, signal.SIGSTOP)     # it cannot see the abort and exit 0 first
    with open(conn + "/abort", "w") as a:
        a.write("1")
    os.kill(server, signal.SIGKILL)
    wait_gone(m.pids, "after the abort and the kill")
    log = open(m.log, errors="replace").read()
    assert "started (takeover" not in log, log[-3000:]
    assert "killed by signal 9 after the mount was gone: no successor" in log, log[-3000:]
