"""Never wrong bytes, never a hang: reads through a fault-injecting proxy.

feedfs talks to s3rver through fault_proxy.py. For each fault kind, 16 readers
read 14 small files and the four quarters of a 40 MiB file at once (1 MiB parts,
so the big file is dozens of GETs). Asserted for every kind:
  - every read that completes returns the source bytes (SHA-256 per file/range);
  - errors are only the documented ones: none for faults that retries absorb,
    ESTALE where the object "changed" (etag), EIO when retries run out;
  - no reader runs past READER_DEADLINE_S (threads joined with a deadline);
  - the daemon's RSS stays under --max-memory + RSS_OVERHEAD_MIB;
  - once the fault clears, reads succeed again on the same mount.
A table of reads, verified bytes, errors and worst latency per kind is printed at
the end of the module (and written to $FEEDFS_FAULT_TABLE when set).
"""

import errno
import hashlib
import os
import threading
import time

import pytest

from conftest import content_for, sha256
from fault_proxy import FaultProxy

MIB = 1 << 20
SEED = int(os.environ.get("FEEDFS_FAULT_SEED", "20240611"))
BIG = ("big/forty.bin", 40 * MIB)
SMALL = [("small/s%02d.bin" % i, 4096 + i * 97_001) for i in range(14)]   # 4 KiB .. 1.2 MiB
MAX_MEMORY_MIB = 48
RSS_OVERHEAD_MIB = 80            # libc arenas, curl, FUSE threads and buffers
STALL_TIMEOUT_S = 2
READER_DEADLINE_S = 60
MAX_RETRIES_EXHAUST = 3
EIO_BOUND_S = 15                 # 3 attempts: <= 0.3 s of backoff + request time, with room
ARGS = ["--part-size", "1M", "--max-memory", "%dM" % MAX_MEMORY_MIB,
        "--stall-timeout", str(STALL_TIMEOUT_S)]

# kind -> (rate, repeat, errnos a reader may see)
PLAN = {
    "500": (0.4, 2, ()),
    "503": (0.4, 2, ()),
    "429": (0.4, 2, ()),
    "reset": (0.3, 1, ()),
    "short": (0.3, 1, ()),
    "stall": (0.2, 1, ()),
    "trickle": (0.3, 1, ()),
    "range": (0.3, 1, ()),
    "etag": (0.3, 1, (errno.ESTALE,)),
    "refused": (0.0, 0, ()),
}

TABLE = {}       # kind -> dict(reads, bytes, errors, worst_s, injected)


@pytest.fixture(scope="module")
def fdata(s3):
    name = "faults-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=name)
    objs = dict(SMALL)
    objs[BIG[0]] = BIG[1]
    data = {k: content_for(k, n) for k, n in objs.items()}
    for k, v in data.items():
        s3.put_object(Bucket=name, Key=k, Body=v)
    return name, data


@pytest.fixture(scope="module", autouse=True)
def table(request):
    yield
    if not TABLE:
        return
    lines = ["", "fault kind   reads  bytes verified  errors  worst latency  faults injected"]
    for k, t in TABLE.items():
        lines.append("%-10s %7d %15d %7s %12.2fs %16d" % (
            k, t["reads"], t["bytes"], t["errors"], t["worst_s"], t["injected"]))
    text = "\n".join(lines) + "\n"
    out = os.environ.get("FEEDFS_FAULT_TABLE")
    if out:
        with open(out, "a") as f:
            f.write(text)
    capman = request.config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled():
        print(text)


@pytest.fixture
def fproxy(s3server):
    p = FaultProxy(s3server.url, seed=SEED).start()
    p.stall_s = STALL_TIMEOUT_S + 1.5
    yield p
    p.stop()


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler:
    def __init__(self, pid):
        self.pid, self.peak_kib, self.stop = pid, 0, threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self.stop.wait(0.1):
            self.peak_kib = max(self.peak_kib, rss_kib(self.pid))

    def done(self):
        self.stop.set()
        self.t.join(5)
        return self.peak_kib


def tasks_for(data):
    """16 reads: 12 small files whole, the big file in four quarters."""
    tasks = [(k, 0, len(data[k])) for k, _ in SMALL[:12]]
    q = BIG[1] // 4
    tasks += [(BIG[0], i * q, q) for i in range(4)]
    return tasks


def read_range(path, off, n):
    out = bytearray()
    with open(path, "rb", buffering=0) as f:
        f.seek(off)
        while len(out) < n:
            b = f.read(min(MIB, n - len(out)))
            if not b:
                break
            out += b
    return bytes(out)


def run_readers(mnt, data, tasks, deadline_s=READER_DEADLINE_S):
    """Runs each task on its own thread. Returns [(task, ok, errno, seconds)].
    A reader still running at the deadline fails the test (a hang)."""
    results = [None] * len(tasks)

    def one(i, t):
        k, off, n = t
        t0 = time.monotonic()
        try:
            got = read_range(os.path.join(mnt, k), off, n)
            want = data[k][off:off + n]
            if sha256(got) != sha256(want):
                results[i] = (t, False, "WRONG BYTES (%d of %d)" % (len(got), n),
                              time.monotonic() - t0)
            else:
                results[i] = (t, True, 0, time.monotonic() - t0)
        except OSError as e:
            results[i] = (t, False, e.errno, time.monotonic() - t0)
    threads = [threading.Thread(target=one, args=(i, t), daemon=True) for i, t in enumerate(tasks)]
    for th in threads:
        th.start()
    end = time.monotonic() + deadline_s
    for th in threads:
        th.join(max(0.0, end - time.monotonic()))
    hung = [tasks[i] for i, th in enumerate(threads) if th.is_alive()]
    assert not hung, "readers still blocked after %ds: %s" % (deadline_s, hung)
    return results


def drop_page_cache():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


@pytest.mark.parametrize("kind", list(PLAN))
def test_fault_kind(kind, mount, fproxy, fdata):
    bucket, data = fdata
    rate, repeat, allowed = PLAN[kind]
    m = mount(bucket, "", *ARGS, endpoint=fproxy.url)
    pid = m.server
    sampler = RssSampler(pid)
    tasks = tasks_for(data)
    refuser = None
    if kind == "refused":
        refuser = threading.Thread(target=fproxy.refuse_for, args=(2.0,), daemon=True)
        refuser.start()
    else:
        fproxy.set_fault(kind, rate, repeat)
    t0 = time.monotonic()
    res = run_readers(m.path, data, tasks)
    elapsed = time.monotonic() - t0
    if refuser:
        refuser.join(10)
    fproxy.clear()
    peak = sampler.done()

    wrong = [r for r in res if isinstance(r[2], str)]
    assert not wrong, "wrong bytes under %s: %s" % (kind, wrong)
    errs = [r for r in res if not r[1]]
    bad = [r for r in errs if r[2] not in allowed]
    assert not bad, "unexpected errors under %s: %s" % (kind, [(r[0][0], r[2]) for r in bad])
    assert peak <= (MAX_MEMORY_MIB + RSS_OVERHEAD_MIB) * 1024, \
        "RSS peak %d KiB over --max-memory %d MiB + %d MiB" % (peak, MAX_MEMORY_MIB, RSS_OVERHEAD_MIB)
    if kind not in ("refused",):
        assert fproxy.count(kind) > 0, "schedule injected no %s fault" % kind

    # the fault is gone: the same mount reads everything that failed, and one
    # more file from the store (page cache dropped), with the right bytes
    drop_page_cache()
    again = [r[0] for r in errs] + [tasks[0]]
    res2 = run_readers(m.path, data, again, deadline_s=30)
    assert all(r[1] for r in res2), "no recovery after %s: %s" % (kind, res2)

    TABLE[kind] = dict(reads=len(res), bytes=sum(r[0][2] for r in res if r[1]),
                       errors=", ".join(errno.errorcode.get(r[2], str(r[2])) for r in errs) or "0",
                       worst_s=max(r[3] for r in res), injected=fproxy.count(kind),
                       elapsed=elapsed, rss_mib=peak / 1024)


def test_exhausted_retries_surface_eio_in_bound(mount, fproxy, fdata):
    """Every attempt fails: the read fails with EIO within EIO_BOUND_S, nothing
    hangs, and the same mount reads the file once the store answers again."""
    bucket, data = fdata
    m = mount(bucket, "", *ARGS, "--max-retries", str(MAX_RETRIES_EXHAUST), endpoint=fproxy.url)
    fproxy.set_fault("503", rate=1.0, repeat=10 ** 6)
    tasks = [(k, 0, len(data[k])) for k, _ in SMALL[:8]] + [(BIG[0], 0, 4 * MIB)] * 8
    res = run_readers(m.path, data, tasks, deadline_s=EIO_BOUND_S + 15)
    fproxy.clear()
    assert all(not r[1] and r[2] == errno.EIO for r in res), res
    worst = max(r[3] for r in res)
    assert worst <= EIO_BOUND_S, "EIO after %.1fs (bound %ds)" % (worst, EIO_BOUND_S)
    res2 = run_readers(m.path, data, tasks[:9], deadline_s=30)
    assert all(r[1] for r in res2), res2
    TABLE["503 x all"] = dict(reads=len(res), bytes=0, errors="%d x EIO" % len(res),
                             worst_s=worst, injected=fproxy.count("503"))


def test_hung_store_times_out_not_forever(mount, fproxy, fdata):
    """Every attempt stalls: reads fail (ETIMEDOUT or EIO) instead of blocking."""
    bucket, data = fdata
    m = mount(bucket, "", *ARGS, "--max-retries", "1", endpoint=fproxy.url)
    fproxy.set_fault("stall", rate=1.0, repeat=10 ** 6)
    tasks = [(k, 0, len(data[k])) for k, _ in SMALL[8:12]]
    # Two attempts (--max-retries 1), each cut by the stall watchdog within
    # about a second of --stall-timeout (curl runs it about once a second);
    # the kernel may ask once more after a failed readahead.
    bound = 2 * 2 * (STALL_TIMEOUT_S + 1) + 3
    fproxy.stall_s = 30           # the store hangs; feedfs must give up by itself
    res = run_readers(m.path, data, tasks, deadline_s=bound + 15)
    fproxy.clear()
    assert all(not r[1] and r[2] in (errno.EIO, errno.ETIMEDOUT) for r in res), res
    worst = max(r[3] for r in res)
    assert worst <= bound, "failed after %.1fs (bound %.0fs)" % (worst, bound)
    TABLE["stall x all"] = dict(reads=len(res), bytes=0,
                                errors=", ".join(sorted({errno.errorcode[r[2]] for r in res})),
                                worst_s=worst, injected=fproxy.count("stall"))


@pytest.mark.san
def test_unmount_ends_retries_at_once(mounter, mount, fproxy, fdata):
    """The store goes away while readahead GETs are out (connects refused):
    they back off and retry, up to a minute in all. An unmount must not wait
    that out: the daemon is gone within seconds."""
    bucket, data = fdata
    m = mount(bucket, "", *ARGS, endpoint=fproxy.url)
    key = BIG[0]
    # ~0.8 s a part: the readahead's GETs are still out when the store goes
    # (at 160 ms a part they had sometimes all arrived by then)
    fproxy.trickle_pause_s = 0.05
    fproxy.set_fault("trickle", rate=1.0, repeat=10 ** 6)
    with open(m.p(key), "rb") as f:
        assert f.read(MIB) == data[key][:MIB]        # sequential: readahead asks for more
        gone = threading.Thread(target=fproxy.refuse_for, args=(40,), daemon=True)
        gone.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "retrying in" not in open(m.log).read():
            time.sleep(0.1)
    assert "retrying in" in open(m.log).read(), "no GET was left to retry"
    t0 = time.monotonic()
    problems = mounter.unmount(m)
    took = time.monotonic() - t0
    assert not problems, problems
    assert took < 8, "the daemon took %.1f s to exit after its unmount" % took


# ---------------------------------------------------------------- process faults

def wait_dead(pid, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_kill_9_then_restart_on_the_same_mount_point(mount, s3server, fdata):
    """A dead daemon leaves ENOTCONN; feedfs started again on that mount point
    detaches the stale mount itself (no manual fusermount3 -u) and serves."""
    import signal
    bucket, data = fdata
    m1 = mount(bucket, "", *ARGS, "--no-keeper")     # with the keeper it would survive
    k = SMALL[3][0]
    assert open(m1.p(k), "rb").read() == data[k]
    os.kill(m1.pids[0], signal.SIGKILL)
    assert wait_dead(m1.pids[0])
    for probe in (os.statvfs, os.listdir):
        with pytest.raises(OSError) as ei:
            probe(m1.path)
        # ECONNABORTED while the kernel is still aborting the connection
        assert ei.value.errno in (errno.ENOTCONN, errno.ECONNABORTED), ei.value
    m2 = mount(bucket, "", *ARGS, mnt=m1.path)
    assert open(m2.p(k), "rb").read() == data[k]
    assert sha256(read_range(m2.p(BIG[0]), 0, 8 * MIB)) == sha256(data[BIG[0]][:8 * MIB])


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_signal_with_reads_in_flight(sig, mount, fproxy, fdata, tmp_path):
    """SIGTERM/SIGINT while 8 readers are mid-file: the daemon unmounts and exits,
    each reader gets either the right bytes or an error (never wrong bytes, never
    a hang), and the next start reuses the cache index (not a crash recovery)."""
    import re
    import signal
    from conftest import is_mounted
    bucket, data = fdata
    cdir = str(tmp_path / "cache")
    cargs = ARGS + ["--cache-dir", cdir, "--cache-size", "64M", "--block-size", "1M"]
    m1 = mount(bucket, "", *cargs, endpoint=fproxy.url)
    for k, _ in SMALL[:4]:                        # something in the cache for sure
        assert open(m1.p(k), "rb").read() == data[k]
    fproxy.set_fault("trickle", rate=1.0, repeat=10 ** 6)
    holder = {}

    def sender():
        time.sleep(0.7)
        os.kill(m1.pids[0], getattr(signal, sig))
        holder["t"] = time.monotonic()
    threading.Thread(target=sender, daemon=True).start()
    tasks = [(BIG[0], i * 5 * MIB, 5 * MIB) for i in range(8)]
    res = run_readers(m1.path, data, tasks, deadline_s=READER_DEADLINE_S)
    fproxy.clear()
    assert not [r for r in res if isinstance(r[2], str)], res
    assert wait_dead(m1.pids[0], 30), "daemon still running after %s" % sig
    end = time.monotonic() + 10
    while is_mounted(m1.path) and time.monotonic() < end:
        time.sleep(0.05)
    assert not is_mounted(m1.path)
    log1 = open(m1.log, errors="replace").read()
    assert "unmounting" in log1
    m2 = mount(bucket, "", *cargs, endpoint=fproxy.url)
    log2 = open(m2.log, errors="replace").read()
    used = re.search(r"block cache .*?, (\d+) in use", log2)
    assert used and int(used.group(1)) > 0, log2
    assert "recovered after a crash" not in log2
    for k, _ in SMALL[:4]:
        assert open(m2.p(k), "rb").read() == data[k]
    TABLE[sig + " mid-read"] = dict(reads=len(res), bytes=sum(r[0][2] for r in res if r[1]),
                                    errors=", ".join(sorted({errno.errorcode.get(r[2], "?")
                                                             for r in res if not r[1]})) or "0",
                                    worst_s=max(r[3] for r in res), injected=0)


# ---------------------------------------------------------------- cache faults
# (flipped bytes, kill -9 recovery and bad options are in test_cache.py)

def test_truncated_slab_is_detected_and_served_from_the_store(mount, fdata, tmp_path):
    bucket, data = fdata
    cdir = str(tmp_path / "cache")
    cargs = ARGS + ["--cache-dir", cdir, "--cache-size", "64M", "--block-size", "1M"]
    m1 = mount(bucket, "", *cargs)
    keys = [k for k, _ in SMALL] + [BIG[0]]
    for k in keys[-4:]:
        assert sha256(open(m1.p(k), "rb").read()) == sha256(data[k])
    from conftest import unmount
    assert not unmount(m1.path, m1.pids)
    slab = os.path.join(cdir, "slab")
    os.truncate(slab, 3 * MIB)
    drop_page_cache()
    m2 = mount(bucket, "", *cargs)
    for k in keys[-4:]:
        assert sha256(open(m2.p(k), "rb").read()) == sha256(data[k]), k


def test_cache_dir_deleted_while_mounted(mount, fdata, tmp_path):
    import shutil
    bucket, data = fdata
    cdir = str(tmp_path / "cache")
    m = mount(bucket, "", *ARGS, "--cache-dir", cdir, "--cache-size", "64M", "--block-size", "1M")
    for k, _ in SMALL[:6]:
        assert open(m.p(k), "rb").read() == data[k]
    # The daemon may promote a file into cdir/promoted while it is being removed
    # (rmdir: not empty): remove again until it is gone.
    for _ in range(50):
        try:
            shutil.rmtree(cdir)
            break
        except OSError:
            time.sleep(0.1)
    assert not os.path.exists(cdir)
    drop_page_cache()
    for k, _ in SMALL:
        assert open(m.p(k), "rb").read() == data[k], k
    assert sha256(read_range(m.p(BIG[0]), 0, BIG[1])) == sha256(data[BIG[0]])


def test_cache_on_a_full_disk(mount, feedfs_bin, s3server, fdata, tmp_path):
    """A 24 MiB tmpfs, mostly full, under --cache-size 64M: feedfs either refuses
    with one line or mounts with what fits; every byte read is right."""
    import subprocess
    from conftest import run_feedfs
    bucket, data = fdata
    fs = str(tmp_path / "small-fs")
    os.mkdir(fs)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", fs], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs: %s" % r.stderr)
    try:
        with open(os.path.join(fs, "filler"), "wb") as f:
            f.write(b"\0" * (18 * MIB))
        cdir = os.path.join(fs, "cache")
        mnt = str(tmp_path / "full-mnt")
        os.mkdir(mnt)
        cp, _ = run_feedfs(feedfs_bin, "s3://" + bucket, mnt,
                           ARGS + ["--cache-dir", cdir, "--cache-size", "64M", "--block-size", "1M"],
                           endpoint=s3server.url, log=str(tmp_path / "full.log"))
        if cp.returncode != 0:
            assert cp.returncode == 1 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr
            return
        from conftest import pids_of_mount, unmount
        pids = pids_of_mount(feedfs_bin, mnt)
        try:
            # fill the rest of the disk while mounted
            with open(os.path.join(fs, "filler2"), "wb") as f:
                try:
                    f.write(b"\0" * (8 * MIB))
                except OSError:
                    pass
            for k, _ in SMALL:
                assert open(os.path.join(mnt, k), "rb").read() == data[k], k
            got = read_range(os.path.join(mnt, BIG[0]), 0, BIG[1])
            assert sha256(got) == sha256(data[BIG[0]])
        finally:
            assert not unmount(mnt, pids)
    finally:
        subprocess.run(["umount", "-l", fs], capture_output=True)


def _bind_ro(path):
    """Makes path a read-only bind mount of itself; skips when the kernel refuses."""
    import subprocess
    for argv in (["mount", "--bind", path, path], ["mount", "-o", "remount,bind,ro", path, path]):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            subprocess.run(["umount", "-l", path], capture_output=True)
            pytest.skip("%s: %s" % (" ".join(argv), r.stderr.strip()))


def test_read_only_cache_dir_fails_at_mount_with_one_line(feedfs_bin, s3server, fdata, tmp_path):
    """Root ignores file modes, so a read-only bind mount stands for a cache
    disk that is read-only: the mount is refused with one line naming it."""
    import subprocess
    from conftest import run_feedfs
    bucket, _ = fdata
    cdir = str(tmp_path / "cache")
    os.mkdir(cdir, 0o700)
    _bind_ro(cdir)
    try:
        mnt = str(tmp_path / "mnt")
        os.mkdir(mnt)
        cp, secs = run_feedfs(feedfs_bin, "s3://" + bucket, mnt, ARGS + ["--cache-dir", cdir],
                              endpoint=s3server.url, log=str(tmp_path / "ro.log"))
        err = cp.stderr.decode(errors="replace").strip()
        assert cp.returncode == 1, (cp.returncode, err)
        assert len(err.splitlines()) == 1 and cdir in err and "Read-only file system" in err, err
        assert secs < 10
    finally:
        subprocess.run(["umount", "-l", cdir], capture_output=True)


def test_cache_dir_made_read_only_while_mounted(mount, fdata, tmp_path):
    """The cache dir turns read-only under a running daemon: reads stay right,
    unmount is clean, and the cache is usable again once writable."""
    import subprocess
    from conftest import unmount
    bucket, data = fdata
    cdir = str(tmp_path / "cache")
    cargs = ARGS + ["--cache-dir", cdir, "--cache-size", "64M", "--block-size", "1M"]
    m = mount(bucket, "", *cargs)
    for k, _ in SMALL[:6]:
        assert open(m.p(k), "rb").read() == data[k]
    _bind_ro(cdir)
    try:
        drop_page_cache()
        for k, _ in SMALL:
            assert open(m.p(k), "rb").read() == data[k], k
        assert sha256(read_range(m.p(BIG[0]), 0, BIG[1])) == sha256(data[BIG[0]])
        assert not unmount(m.path, m.pids)
    finally:
        subprocess.run(["umount", "-l", cdir], capture_output=True)
    m2 = mount(bucket, "", *cargs)
    drop_page_cache()
    for k, _ in SMALL:
        assert open(m2.p(k), "rb").read() == data[k], k
