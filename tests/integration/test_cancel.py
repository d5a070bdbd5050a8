"""A seek cancels the readahead it leaves behind.

A stream's readahead GETs still in flight when the reader seeks elsewhere (or
closes the file) are cancelled at the S3 client: the connection stops
carrying bytes nobody wants. The counting proxy holds every GET response for
a while, so readahead is still in flight at the seek; it counts responses the
client hung up on, and the daemon's s3 counters count cancelled GETs (read
while it runs once nothing is in flight, or logged at unmount). Bytes are compared with what was uploaded; nothing asserts a
time.
"""

import pytest

from conftest import content_for, logged_stats, settled_stats, sha256, unmount
from counting_proxy import CountingProxy

MIB = 1 << 20
SIZE = 96 * MIB + 12345
KEY = "shards/big.bin"


@pytest.fixture(scope="module")
def cbucket(s3):
    b = "cancel-t"
    s3.create_bucket(Bucket=b)
    s3.put_object(Bucket=b, Key=KEY, Body=content_for(KEY, SIZE))
    return b


@pytest.fixture
def slow_proxy(s3server):
    p = CountingProxy(s3server.url).start()
    p.delay_s = 2.0
    yield p
    p.stop()


# Every GET here is held 2 s, longer than the hedge delay: hedges (a second
# GET, one of the two cut) would be counted as aborted responses. Off.


def s3_stats(m, proxy):
    """The running daemon's S3 counters once no GET is in flight any more (a
    cancel is counted when its transfer has ended)."""
    st = settled_stats(m, proxy)
    assert "s3" in st, "no s3 group in the stats of %s" % m.path
    return st["s3"]


def read_at(f, off, n):
    f.seek(off)
    return f.read(n)


@pytest.mark.parametrize("start,far", [(0, 80 * MIB + 4099), (40 * MIB, 3 * MIB + 7)],
                         ids=["forward", "backward"])
def test_seek_cancels_readahead_in_flight(mount, cbucket, slow_proxy, start, far):
    """GETs from start + 16 MiB on are held 2 s, the ones before come at
    once: the stream's readahead past that is in flight when the reader
    seeks (to bytes the page cache does not hold)."""
    want = content_for(KEY, SIZE)
    slow_proxy.delay_from = start + 16 * MIB
    m = mount(cbucket, "", "--hedge-budget", "0", endpoint=slow_proxy.url)
    with open(m.p(KEY), "rb", buffering=0) as f:
        for off in range(start, start + 12 * MIB, MIB):     # a stream: readahead grows
            assert read_at(f, off, MIB) == want[off:off + MIB], off
        assert read_at(f, far, 70000) == want[far:far + 70000]     # the seek
        slow_proxy.delay_from = None
        slow_proxy.delay_s = 0
        # Over what was cancelled: fetched again, same bytes.
        a, b = start + 12 * MIB, start + 32 * MIB
        assert sha256(read_at(f, a, b - a)) == sha256(want[a:b])
    st = s3_stats(m, slow_proxy)
    assert st["cancelled"] >= 1, st
    assert st["errors"] == 0, st                    # a cancel is not an error
    assert slow_proxy.aborted >= 1
    assert not unmount(m.path, m.pids)


def test_no_cancel_without_a_seek(mount, cbucket, slow_proxy):
    """A whole sequential read cancels nothing. (A few bytes may be fetched
    twice: the kernel's reads of one big read() can straggle in behind what
    the stream already let go of.)"""
    m = mount(cbucket, "", "--hedge-budget", "0", endpoint=slow_proxy.url)
    with open(m.p(KEY), "rb") as f:
        got = f.read()
    assert sha256(got) == sha256(content_for(KEY, SIZE))
    assert not unmount(m.path, m.pids)
    # From the unmount log, not the running daemon: every GET is held 2 s here,
    # so counters that stand still do not mean nothing is in flight, and a GET
    # the unmount cut short would be a cancel too.
    st = logged_stats(m.log)["s3"]
    assert st["cancelled"] == 0, st
    assert slow_proxy.aborted == 0
    assert SIZE <= slow_proxy.get_bytes < SIZE * 1.1
