"""`ls -l` of a large directory must not cost one HEAD per entry, and close() no
round trip to the daemon.

s3rver's request log omits the method (its logger cuts it off), so it cannot tell a
HEAD from a GET; this test runs on the S3 stub, which counts requests by kind."""

import os
import subprocess
import time

from conftest import settled_stats, unmount


def test_ls_l_no_head_per_entry(stub, mount):
    stub.create_bucket("plus")
    n = 1500
    for i in range(n):
        stub.put("plus", "d/f%05d.jpg" % i, b"x" * (i % 97))
    m = mount("plus", endpoint=stub.url)
    stub.reset_counts()
    out = subprocess.run(["ls", "-l", m.p("d")], capture_output=True, text=True, check=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("-")]
    assert len(lines) == n
    # sizes in ls -l come from the listing
    sizes = sorted(int(l.split()[4]) for l in lines)
    assert sizes == sorted(i % 97 for i in range(n))
    heads, gets, lists = stub.count("head"), stub.count("get"), stub.count("list")
    assert heads <= 5, "%d HEADs for ls -l of %d entries" % (heads, n)
    assert gets == 0, "%d GETs for ls -l" % gets
    assert lists <= 10, "%d LIST requests for one directory of %d entries" % (lists, n)
    # a second ls -l within the TTL costs nothing more than a relist
    stub.reset_counts()
    subprocess.run(["ls", "-l", m.p("d")], capture_output=True, check=True)
    assert stub.count("head") <= 5


def fs_stats(m):
    """The running daemon's FUSE op counters, once they stopped moving (an op
    may be counted just after the kernel had its answer)."""
    return settled_stats(m)["fs"]


def test_first_open_sends_no_getattr(stub, mount):
    """A loader's open + fstat + read of a file it has just listed costs one OPEN
    and one READ: the attributes from the listing stand (no invalidation, so no
    GETATTR) while the object's size never changed. Once a size changes, opens
    of that file invalidate the kernel's attributes again and every byte of the
    new version is read (the case fs.c do_open exists for)."""
    stub.create_bucket("noattr")
    n = 20
    body = {i: bytes([65 + i]) * (5000 + 7 * i) for i in range(n)}
    for i in range(n):
        stub.put("noattr", "d/f%02d.bin" % i, body[i])
    m = mount("noattr", endpoint=stub.url)
    assert sorted(os.listdir(m.p("d"))) == ["f%02d.bin" % i for i in range(n)]
    for i in range(n):
        with open(m.p("d/f%02d.bin" % i), "rb", buffering=0) as f:
            assert os.fstat(f.fileno()).st_size == len(body[i])
            assert f.readall() == body[i]
    st = fs_stats(m)
    assert st["opens"] == n and st["size_invals"] == 0, st
    assert st["getattrs"] <= 2, st            # the mount root's, never one per file
    assert not unmount(m.path, m.pids)

    m = mount("noattr", "", "--metadata-ttl", "1", endpoint=stub.url)
    assert read_all_of(m.p("d/f00.bin")) == body[0]
    # f00 grows; within a few TTLs an open reads all of the new version, never a
    # prefix of it cut at the old size
    new = b"z" * 40000
    stub.put("noattr", "d/f00.bin", new)
    deadline = time.monotonic() + 20
    while True:
        time.sleep(1.2)
        os.listdir(m.p("d"))                 # the listing learns the new size
        got = read_all_of(m.p("d/f00.bin"))
        assert got in (body[0], new), "wrong bytes: %d of them" % len(got)
        if got == new:
            break
        assert time.monotonic() < deadline, "the new version never showed"
    st = fs_stats(m)
    assert st["size_invals"] >= 1, st
    assert not unmount(m.path, m.pids)


def read_all_of(path):
    with open(path, "rb", buffering=0) as f:
        return f.readall()


def test_close_sends_no_flush(stub, mount):
    """Files are opened with FOPEN_NOFLUSH: a training loader's close() of each
    small file costs no FUSE round trip. The daemon counts the flushes it gets."""
    stub.create_bucket("noflush")
    n = 20
    for i in range(n):
        stub.put("noflush", "f%02d.bin" % i, bytes([i]) * (1000 + i))
    m = mount("noflush", endpoint=stub.url)
    for i in range(n):
        fd = os.open(m.p("f%02d.bin" % i), os.O_RDONLY)
        dup = os.dup(fd)
        assert os.read(fd, 1 << 20) == bytes([i]) * (1000 + i)
        os.close(dup)            # each close() would be one FLUSH
        os.close(fd)
    st = fs_stats(m)
    assert st["opens"] >= n and st["flushes"] == 0, st
    assert not unmount(m.path, m.pids)
