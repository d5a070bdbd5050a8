"""`ls -l` of a large directory must not cost one HEAD per entry, and close() no
round trip to the daemon.

s3rver's request log omits the method (its logger cuts it off), so it cannot tell a
HEAD from a GET; this test runs on the S3 stub, which counts requests by kind."""

import os
import re
import subprocess

from conftest import unmount


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
    assert not unmount(m.path, m.pids)
    with open(m.log, errors="replace") as f:
        line = [l for l in f if "flushes " in l][-1]
    assert int(re.search(r"opens (\d+)", line).group(1)) >= n, line
    assert int(re.search(r"flushes (\d+)", line).group(1)) == 0, line
