"""FUSE over io_uring (--fuse-uring, src/fs/uring.c).

As root on a kernel with CONFIG_FUSE_IO_URING (6.14+), the fuse module's
parameter enable_uring is set to Y for each test and put back as it was
afterwards; skipped with the reason where the parameter does not exist or
the user cannot set it. A mount with --fuse-uring=on --no-keeper must serve
its requests over the ring (fs.uring_requests counts them) and every name
and byte must be the ones in the bucket; where it cannot (parameter N, the
keeper on) it falls back to /dev/fuse with one log line. No timing asserted.
"""

import os
import random
import time

import pytest

from cachelib import MIB, drop_page_cache
from conftest import content_for, feedfs_stats, read_in_threads, unmount
from mounter import s3rver_args, s3rver_env

PARAM = "/sys/module/fuse/parameters/enable_uring"
# A small tree: names, sizes from 0 bytes to 3 MiB (above the 1 MiB payload
# of an entry: READs of several entries), a deeper directory.
OBJS = {"a/%02d.bin" % i: 1 + i * 7919 for i in range(24)}
OBJS.update({"b/c/%02d.jpg" % i: 4096 + i * 1021 for i in range(12)})
OBJS["big.bin"] = 3 * MIB + 17
OBJS["empty"] = 0


@pytest.fixture
def enable_uring():
    """enable_uring set to Y for the test, restored after; yields a setter."""
    if not os.path.exists(PARAM):
        pytest.skip("this kernel has no FUSE over io_uring (%s does not exist)" % PARAM)
    if os.geteuid() != 0:
        pytest.skip("setting %s needs root" % PARAM)
    with open(PARAM) as f:
        old = f.read().strip()

    def set_param(v):
        with open(PARAM, "w") as f:
            f.write(v)
    set_param("Y")
    try:
        yield set_param
    finally:
        set_param(old)


@pytest.fixture
def ubucket(s3, new_bucket):
    b = new_bucket("ur")
    for k, n in OBJS.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


def walk(root):
    out = set()
    for d, _, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(d, f), root))
    return out


def read_ok(m, keys):
    """Every key read whole by 8 threads (conftest.read_in_threads), bytes right."""
    return read_in_threads(m, keys, lambda k: content_for(k, OBJS[k]), threads=8) == []


def log_lines(m, needle):
    with open(m.log, errors="replace") as f:
        return [ln for ln in f if needle in ln]


def ring_verdict(m):
    """The daemon's one line on the ring (it comes right after INIT, which
    may be after the mount command returned)."""
    for _ in range(100):
        lines = log_lines(m, "fuse-uring: ")
        if lines:
            return lines
        time.sleep(0.1)
    pytest.fail("no fuse-uring line in %s" % m.log)


def umount(m):
    problems = unmount(m.path, m.pids)
    assert not problems, problems


def test_requests_come_over_the_ring(enable_uring, mount, ubucket):
    m = mount(ubucket, "", "--no-keeper", "--fuse-uring=on")
    assert "requests over io_uring" in "".join(ring_verdict(m)), "the ring was not set up"
    before = feedfs_stats(m)["fs"]["uring_requests"]
    assert walk(m.path) == set(OBJS)                        # LOOKUP, READDIR(PLUS), GETATTR
    for k, n in OBJS.items():
        assert os.stat(m.p(k)).st_size == n
    keys = sorted(OBJS)
    random.Random(7).shuffle(keys)
    assert read_ok(m, keys)                                 # OPEN, READ, RELEASE; 8 at once
    drop_page_cache()
    with open(m.p("big.bin"), "rb") as f:                   # reads at offsets, past the end
        src = content_for("big.bin", OBJS["big.bin"])
        for off in (0, MIB - 5, 2 * MIB + 3, OBJS["big.bin"] - 9, OBJS["big.bin"] + 100):
            f.seek(off)
            assert f.read(70001) == src[off:off + 70001]
    st = feedfs_stats(m)["fs"]
    assert st["uring_requests"] - before >= 2 * len(OBJS), st
    with pytest.raises(OSError):
        open(m.p("a/new"), "wb")                            # EROFS comes back over the ring too
    umount(m)


def test_failed_setup_gives_the_connection_back_to_dev_fuse(enable_uring, mounter, s3server,
                                                             ubucket):
    """Once the INIT reply asked for the ring, the kernel holds every request
    until each queue has an entry. A setup that fails then
    ($FEEDFS_URING_SETUP_FAIL) must make the kernel drop the ring (one REGISTER
    it refuses), or every request of the mount would hang."""
    m = mounter.mount("s3://" + ubucket, s3rver_args(s3server.url) +
                      ["--no-keeper", "--fuse-uring=on"],
                      env=s3rver_env({"FEEDFS_URING_SETUP_FAIL": "1"}))
    lines = ring_verdict(m)
    assert len(lines) == 1 and "could not be set up" in lines[0], lines
    assert not log_lines(m, "requests of this mount hang")
    assert walk(m.path) == set(OBJS)
    assert read_ok(m, sorted(OBJS))
    assert feedfs_stats(m)["fs"]["uring_requests"] == 0
    umount(m)


def test_parameter_off_falls_back_to_dev_fuse(enable_uring, mount, ubucket):
    enable_uring("N")
    m = mount(ubucket, "", "--no-keeper", "--fuse-uring=on")
    assert len(ring_verdict(m)) == 1 and log_lines(m, "fuse-uring: off")
    assert read_ok(m, sorted(OBJS))
    assert feedfs_stats(m)["fs"]["uring_requests"] == 0
    umount(m)


def test_keeper_falls_back_to_dev_fuse(enable_uring, mount, ubucket):
    m = mount(ubucket, "", "--fuse-uring=auto")                # the keeper is on by default
    assert len(ring_verdict(m)) == 1 and log_lines(m, "fuse-uring: off: the keeper")
    assert read_ok(m, sorted(OBJS))
    assert feedfs_stats(m)["fs"]["uring_requests"] == 0
    umount(m)


def test_bad_value_is_refused(mount, ubucket):
    cp = mount(ubucket, "", "--fuse-uring=maybe", ok=False)
    assert b"--fuse-uring" in (cp.stderr + cp.stdout)
