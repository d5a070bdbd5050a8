"""Memory in containers (issue 18 part 5): without --max-memory, feedfs takes
its budget from the memory limit of the cgroup it runs in (src/cgroup.c:
limit/2 - 64 MiB, at least 32 MiB), and under load it stays below the limit.

Each test creates a child cgroup with a memory limit (cgroup v2 memory.max
where this process's v2 cgroup has the memory controller, else v1
memory.limit_in_bytes on hybrid hosts) and starts feedfs in it through a
two-line wrapper. Skipped, with the reason, where no memory hierarchy is
writable."""

import os
import stat
import time

import pytest

from conftest import content_for, read_in_threads, sha256
from mounter import feedfs_stats, s3rver_args

MIB = 1 << 20


def budget_for(limit):
    half = limit // 2
    return half - 64 * MIB if half > 96 * MIB else 32 * MIB


def max_memory_of(st):
    """The --max-memory a mount without a cache dir works to: the read buffers'
    budget plus the metadata share (fs.meta_max)."""
    return st["budget"]["max_bytes"] + st["fs"]["meta_max"]


def _proc_cgroups():
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrls, path = line.rstrip("\n").split(":", 2)
            out["v2" if hid == "0" else ctrls] = path
    return out


def _mounts():
    """(fstype, mountpoint, root, super options) of the cgroup mounts."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            pf, qf = pre.split(), post.split()
            if qf[0] in ("cgroup", "cgroup2"):
                out.append((qf[0], pf[4], pf[3], qf[2]))
    return out


class Cgroup:
    """A child cgroup with a memory limit; removed at the end."""

    def __init__(self, limit):
        self.dir = self.v2 = None
        cgs, mounts = _proc_cgroups(), _mounts()
        for fstype, mnt, root, sup in mounts:
            if fstype == "cgroup2" and "v2" in cgs:
                here = os.path.join(mnt, os.path.relpath(cgs["v2"], root).lstrip("./"))
                try:
                    ctrls = open(os.path.join(here, "cgroup.controllers")).read().split()
                except OSError:
                    continue
                if "memory" in ctrls:
                    self._make(here, True, limit)
                    if self.dir:
                        return
        for fstype, mnt, root, sup in mounts:
            if fstype == "cgroup" and "memory" in sup.split(","):
                path = next((p for c, p in cgs.items() if "memory" in c.split(",")), None)
                if path is not None:
                    self._make(os.path.join(mnt, os.path.relpath(path, root).lstrip("./")),
                               False, limit)
                    if self.dir:
                        return

    def _make(self, parent, v2, limit):
        d = os.path.join(parent, "feedfs-test-%d" % os.getpid())
        try:
            os.mkdir(d)
        except FileExistsError:
            pass
        except OSError:
            return
        try:
            if v2:
                if "memory" not in open(os.path.join(d, "cgroup.controllers")).read().split():
                    # Delegate it when we may (the root cgroup, or one without
                    # processes of its own); EBUSY otherwise, and we skip.
                    try:
                        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                            f.write("+memory")
                    except OSError:
                        pass
                if "memory" not in open(os.path.join(d, "cgroup.controllers")).read().split():
                    raise OSError("memory controller not delegated to %s" % d)
                open(os.path.join(d, "memory.max"), "w").write(str(limit))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    open(os.path.join(d, "memory.swap.max"), "w").write("0")
            else:
                open(os.path.join(d, "memory.limit_in_bytes"), "w").write(str(limit))
        except OSError:
            os.rmdir(d)
            return
        self.dir, self.v2 = d, v2

    def peak(self):
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int(open(os.path.join(self.dir, name)).read())
        except OSError:
            return None

    def oom_kills(self):
        name = "memory.events" if self.v2 else "memory.oom_control"
        for line in open(os.path.join(self.dir, name)):
            k, v = line.split()
            if k == "oom_kill":
                return int(v)
        return None

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.dir)
                return
            except OSError:
                time.sleep(0.1)     # the daemon's exit may still be under way


@pytest.fixture
def cgroup_with_limit(tmp_path, feedfs_bin):
    """cg(limit) -> (Cgroup, wrapper): the wrapper runs feedfs inside it."""
    made = []

    def make(limit):
        cg = Cgroup(limit)
        if not cg.dir:
            pytest.skip("no writable cgroup memory hierarchy (v2 memory.max or v1 "
                        "memory.limit_in_bytes) for a child cgroup here")
        made.append(cg)
        wdir = tmp_path / ("wrap%d" % len(made))
        wdir.mkdir()
        w = wdir / "feedfs"      # named feedfs: the Mounter finds the daemon by name
        w.write_text("#!/bin/sh\necho $$ > %s/cgroup.procs || exit 111\nexec %s \"$@\"\n"
                     % (cg.dir, feedfs_bin))
        w.chmod(w.stat().st_mode | stat.S_IXUSR)
        return cg, str(w)
    yield make
    for cg in made:
        cg.remove()


def test_budget_follows_cgroup_limit(cgroup_with_limit, mounter, s3server, s3, new_bucket):
    b = new_bucket("cg")
    s3.put_object(Bucket=b, Key="x", Body=b"x")
    limit = 768 * MIB
    cg, wrapper = cgroup_with_limit(limit)
    m = mounter.mount("s3://%s" % b, s3rver_args(s3server.url), binary=wrapper)
    assert max_memory_of(feedfs_stats(m)) == budget_for(limit) == 320 * MIB
    # An explicit --max-memory wins over the limit.
    m2 = mounter.mount("s3://%s" % b, s3rver_args(s3server.url) + ["--max-memory", "100M"],
                       binary=wrapper)
    assert max_memory_of(feedfs_stats(m2)) == 100 * MIB
    with open(m.p("x"), "rb") as f:
        assert f.read() == b"x"


def test_load_stays_below_cgroup_limit(cgroup_with_limit, mounter, s3server, s3, new_bucket,
                                      feedfs_bin):
    """8 readers of 8 x 24 MiB files in a 256 MiB cgroup (budget 64 MiB, where
    the fixed default would have been 512 MiB): every byte right, no OOM kill,
    the cgroup's peak below its limit."""
    if "/san-" in feedfs_bin or os.environ.get("FEEDFS_WRAP"):
        pytest.skip("a sanitizer or valgrind build's own memory (ASan keeps a 256 MiB "
                    "quarantine) does not fit a 256 MiB cgroup")
    b = new_bucket("cgload")
    keys = ["f%d.bin" % i for i in range(8)]
    for k in keys:
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, 24 * MIB))
    limit = 256 * MIB
    cg, wrapper = cgroup_with_limit(limit)
    m = mounter.mount("s3://%s" % b, s3rver_args(s3server.url), binary=wrapper)
    st = feedfs_stats(m)
    assert max_memory_of(st) == budget_for(limit) == 64 * MIB
    bad = read_in_threads(m, keys, lambda k: content_for(k, 24 * MIB), threads=8)
    assert bad == []
    st = feedfs_stats(m)
    assert st["budget"]["peak_bytes"] <= 64 * MIB
    assert cg.oom_kills() in (0, None)
    peak = cg.peak()
    print("cgroup %s: limit %d MiB, peak %s MiB, budget peak %d MiB" % (
        cg.dir, limit // MIB, peak // MIB if peak else "?", st["budget"]["peak_bytes"] // MIB))
    if peak is not None:
        assert peak < limit
