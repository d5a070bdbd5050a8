"""Reads at random offsets, past EOF, through mmap, and from many threads at once."""

import hashlib
import mmap
import os
import random
import threading

import pytest

from conftest import BIG_KEY, feedfs_stats
from fsmodel import walk_mount


@pytest.fixture
def edge_mount(mount, edge):
    return mount(edge.name)


def test_random_preads_big(edge, edge_mount):
    rnd = random.Random(1234)
    size = os.path.getsize(edge.big_path)
    with open(edge.big_path, "rb") as src, open(edge_mount.p(BIG_KEY), "rb", buffering=0) as f:
        fd = f.fileno()
        for i in range(300):
            length = rnd.choice([1, 7, 4096, 65536, 131072, 1 << 20, 3 << 20, rnd.randint(1, 5 << 20)])
            off = rnd.randrange(0, size)
            src.seek(off)
            want = src.read(length)
            got = os.pread(fd, length, off)
            # a pread on a regular file may be short only at EOF
            assert got == want, "pread(%d, %d) #%d: got %d bytes" % (off, length, i, len(got))
        # the last bytes, and past the end
        src.seek(size - 10)
        assert os.pread(fd, 1000, size - 10) == src.read()
        assert os.pread(fd, 100, size) == b""
        assert os.pread(fd, 100, size + 12345) == b""


@pytest.mark.vg
@pytest.mark.san
def test_random_preads_small(edge, edge_mount):
    rnd = random.Random(99)
    from fsmodel import expected_tree
    want, _ = expected_tree(edge.listing)
    keys = sorted(k for k, v in edge.objects.items() if len(v) > 0 and want.get(k, ("d",))[0] == "f")
    for k in rnd.sample(keys, 200) + [k for k in keys if k.startswith("sizes/")]:
        data = edge.objects[k]
        with open(edge_mount.p(k), "rb", buffering=0) as f:
            fd = f.fileno()
            for _ in range(5):
                off = rnd.randrange(0, len(data) + 10)
                n = rnd.randint(1, len(data) + 10)
                assert os.pread(fd, n, off) == data[off:off + n], (k, off, n)
            assert os.pread(fd, 10, len(data)) == b""
            assert os.pread(fd, 10, len(data) + 1000) == b""


def test_sequential_read_sizes(edge, edge_mount):
    """Odd read sizes in order give back the exact object (sizes around part edges)."""
    for k in [k for k in edge.objects if k.startswith("sizes/")]:
        data = edge.objects[k]
        out = bytearray()
        with open(edge_mount.p(k), "rb", buffering=0) as f:
            while True:
                b = f.read(12345)
                if not b:
                    break
                out += b
        assert bytes(out) == data, k


def test_mmap_small_and_big(edge, edge_mount):
    for k in ["sizes/4097.bin", "sizes/1048577.bin", "special/sp ace.txt", "数据/训练集/图片 01.jpg"]:
        with open(edge_mount.p(k), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            assert m[:] == edge.objects[k], k
    rnd = random.Random(7)
    size = os.path.getsize(edge.big_path)
    with open(edge.big_path, "rb") as src, open(edge_mount.p(BIG_KEY), "rb") as f, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert len(m) == size
        for _ in range(100):
            off = rnd.randrange(0, size)
            n = rnd.randint(1, 1 << 20)
            src.seek(off)
            assert m[off:off + n] == src.read(n), (off, n)


@pytest.mark.tsan
@pytest.mark.san
def test_concurrent_readers(edge, edge_sha, edge_mount):
    """16 threads over a mix of small files, the same files, and the big one."""
    rnd = random.Random(16)
    from fsmodel import expected_tree
    want, _ = expected_tree(edge.listing)
    small = sorted(k for k in edge.objects if want.get(k, ("d",))[0] == "f")
    walk_mount(edge_mount.path)     # list first, as loaders do (see test_small_files_sha256)
    jobs = [[] for _ in range(16)]
    for i in range(16):
        jobs[i] = rnd.sample(small, 150) + ["sizes/8388611.bin"]
    jobs[0].append(BIG_KEY)
    jobs[7].append(BIG_KEY)
    errors = []

    def worker(keys):
        try:
            for k in keys:
                h = hashlib.sha256()
                with open(edge_mount.p(k), "rb", buffering=0) as f:
                    while True:
                        b = f.read(1 << 20)
                        if not b:
                            break
                        h.update(b)
                if h.hexdigest() != edge_sha[k]:
                    errors.append("sha256 mismatch: %r" % k)
        except Exception as e:   # noqa: BLE001 - any failure of a reader fails the test
            errors.append("%r: %r" % (k, e))

    threads = [threading.Thread(target=worker, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not any(t.is_alive() for t in threads), "readers hung"
    assert not errors, errors[:10]


@pytest.mark.tsan
def test_same_fd_parallel_preads(edge, edge_mount):
    """Several threads pread one descriptor at different offsets."""
    size = os.path.getsize(edge.big_path)
    errors = []
    with open(edge_mount.p(BIG_KEY), "rb", buffering=0) as f, open(edge.big_path, "rb") as src:
        src_fd = src.fileno()

        def worker(seed):
            rnd = random.Random(seed)
            for _ in range(40):
                off, n = rnd.randrange(0, size), rnd.randint(1, 2 << 20)
                if os.pread(f.fileno(), n, off) != os.pread(src_fd, n, off):
                    errors.append((off, n))
        ts = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(600)
    assert not errors, errors[:5]


def test_big_gets_leave_their_connection_clean(edge, mount):
    """A big GET's body is received with SO_RCVLOWAT raised (src/s3/request.c);
    the connection must go back to the pool with it reset, or the next small
    response on it (headers and body under the low-water mark) waits until the
    stall watchdog cuts it. One connection, so every request reuses it: 40 MiB
    of the big object (8 MiB GETs), then small objects and a seek of the big one."""
    m = mount(edge.name, "", "--max-connections", "1", "--stall-timeout", "5")
    with open(edge.big_path, "rb") as src, open(m.p(BIG_KEY), "rb", buffering=0) as f:
        for _ in range(40):
            assert f.read(1 << 20) == src.read(1 << 20)
        for off in (123_457, 200 << 20):
            src.seek(off)
            assert os.pread(f.fileno(), 4096, off) == src.read(4096), off
    small = sorted(k for k in edge.objects if k.startswith("sizes/") and 0 < len(edge.objects[k]) < (256 << 10))
    assert len(small) >= 4, small
    for k in small:
        with open(m.p(k), "rb", buffering=0) as f:
            assert f.read() == edge.objects[k], k
    s3 = feedfs_stats(m)["s3"]
    assert s3["stalls"] == 0 and s3["retries_stall"] == 0 and s3["errors"] == 0, s3
