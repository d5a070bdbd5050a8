"""Loader-order prefetch: `feedfs prefetch --order FILE MOUNTPOINT` tells the
daemon the order a shuffled loader will open files in, and the daemon keeps
a window of them fetched ahead.

GETs go through the counting proxy with a per-request delay (what prefetch
has to hide); the daemon's "order" counters are read with `feedfs stats`.
Every byte read is compared with what was uploaded. Nothing here asserts a
time: waits are for counters to settle.
"""
# Request counts through the counting proxy are exact here, so every mount
# behind it has hedging off (--hedge-budget 0): a hedge is a second GET of
# the same bytes whenever the loaded machine stalls a response.

import os
import random
import socket

import pytest

from conftest import content_for, feedfs_stats, read_in_threads, settled_stats
from counting_proxy import CountingProxy

NDIRS, PER_DIR = 3, 100
NFILES = NDIRS * PER_DIR


def sizes():
    rnd = random.Random(19)
    return {"train/c%d/img%04d.jpg" % (d, i): rnd.randint(4 * 1024, 40 * 1024)
            for d in range(NDIRS) for i in range(PER_DIR)}


SIZES = sizes()


@pytest.fixture(scope="module")
def obucket(s3):
    b = "order-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=b)
    for k, n in SIZES.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


@pytest.fixture
def proxy(s3server):
    p = CountingProxy(s3server.url).start()
    p.delay_s = 0.02
    yield p
    p.stop()


def shuffled(seed=7):
    keys = sorted(SIZES)
    random.Random(seed).shuffle(keys)
    return keys


def write_order(tmp_path, paths, name="order.txt"):
    f = tmp_path / name
    f.write_text("".join(p + "\n" for p in paths))
    return str(f)


def prefetch(mounter, *args):
    return mounter.run(["prefetch"] + list(args))


def read_in_order(m, keys, threads=4, expect=None):
    """Like a loader's workers: threads taking the files in this order, by
    path (no walk first). Returns the keys whose bytes were wrong."""
    return read_in_threads(m, keys, expect or (lambda k: content_for(k, SIZES[k])), threads)


def list_requests(proxy):
    """ListObjectsV2 requests the proxy relayed (GETs with a query)."""
    with proxy.lock:
        return proxy.by_method.get("GET", 0) - len(proxy.get_paths)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for c in data:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def ctl_path(mnt):
    base = "/run/feedfs" if os.geteuid() == 0 else (
        os.environ["XDG_RUNTIME_DIR"] + "/feedfs"
        if os.environ.get("XDG_RUNTIME_DIR", "").startswith("/") else "/tmp/feedfs-%d" % os.getuid())
    return "%s/ctl-%016x.sock" % (base, fnv1a64(os.path.realpath(mnt).encode()))


def ctl_request(mnt, data):
    """Send raw bytes to the mount's control socket; the first reply line."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(ctl_path(mnt))
    try:
        s.sendall(data)
        buf = b""
        while not buf.endswith(b"\n"):
            c = s.recv(256)
            if not c:
                break
            buf += c
        return buf.decode()
    finally:
        s.close()


def wait_order(m, proxy, paths):
    """Stats once the order is resolved and its prefetches have settled."""
    for _ in range(100):
        st = settled_stats(m, proxy)
        o = st["order"]
        if o["paths"] == paths and o["resolved"] + o["missing"] >= paths:
            return st
    pytest.fail("order never resolved: %r" % st["order"])


@pytest.mark.san
@pytest.mark.tsan
def test_shuffled_order_is_prefetched(mount, mounter, obucket, proxy, tmp_path):
    m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled()
    f = write_order(tmp_path, order)
    proxy.reset()
    cp = prefetch(mounter, "--order", f, m.path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "feedfs prefetch: %d paths sent to %s" % (NFILES, m.path)
    assert read_in_order(m, order, threads=4) == []
    st = settled_stats(m, proxy)
    o = st["order"]
    assert o["orders"] == 1 and o["paths"] == NFILES, o
    assert o["resolved"] == NFILES and o["missing"] == 0, o
    assert o["consumed"] == NFILES, o    # each file once, early opens included
    # A file counts as a hit when it was fetched or in flight at its open;
    # only the first opens can beat the resolver to their file.
    assert o["hits"] >= NFILES - 15, o
    assert o["fetched"] <= NFILES, o
    assert o["wasted"] <= NFILES // 20, o     # the bound: 5% of the fetches
    assert st["fs"]["heads"] == 0, st["fs"]
    # Names came from listings: a few LISTs, not one per file.
    assert list_requests(proxy) <= 3 * NDIRS, proxy.counts()
    gets = proxy.gets()
    assert NFILES <= gets <= NFILES * 1.05, (gets, o)


def test_missing_path_is_counted_and_bad_paths_refused(mount, mounter, obucket, proxy,
                                                        tmp_path):
    m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled(3)[:20]
    f = write_order(tmp_path, order[:10] + ["train/c0/nope.jpg"] + order[10:])
    cp = prefetch(mounter, "--order", f, m.path)
    assert cp.returncode == 0, cp.stderr
    st = wait_order(m, proxy, 21)
    assert st["order"]["missing"] == 1, st["order"]
    assert st["order"]["resolved"] == 20, st["order"]
    # Reading still gives the right bytes.
    assert read_in_order(m, order, threads=4) == []

    # A path escaping the mount: refused by the CLI with one line, exit 1.
    bad = write_order(tmp_path, ["train/c0/img0001.jpg", "train/../etc/passwd"], "bad.txt")
    cp = prefetch(mounter, "--order", bad, m.path)
    assert cp.returncode == 1, (cp.returncode, cp.stdout, cp.stderr)
    assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr
    assert "train/../etc/passwd" in cp.stderr, cp.stderr
    # ... and by the daemon itself, which keeps the order it had.
    assert ctl_request(m.path, b"O 1 20\ntrain/../etc/passwd\n") == "ERR 22\n"
    assert ctl_request(m.path, b"O 1 5\n/abs\n") == "ERR 22\n"
    assert ctl_request(m.path, b"O 3 5\na\n\nb\n") == "ERR 22\n"      # an empty path
    assert feedfs_stats(m)["order"]["paths"] == 21
    # Over the documented bounds: E2BIG, nothing read.
    assert ctl_request(m.path, b"O 4194305 10\n") == "ERR 7\n"
    assert ctl_request(m.path, b"O 1 536870913\n") == "ERR 7\n"
    # Usage errors exit 2; a path that is no feedfs mount exits 1.
    assert prefetch(mounter, "--order", f).returncode == 2
    assert prefetch(mounter, "--clear", "--order", f, m.path).returncode == 2
    cp = prefetch(mounter, "--clear", str(tmp_path))
    assert cp.returncode == 1 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_absolute_paths_and_stdin(mount, mounter, obucket, proxy, tmp_path):
    m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled(5)[:30]
    f = write_order(tmp_path, [os.path.join(m.path, k) for k in order])
    cp = prefetch(mounter, "--order", f, m.path)
    assert cp.returncode == 0, cp.stderr
    st = wait_order(m, proxy, 30)
    assert st["order"]["resolved"] == 30 and st["order"]["missing"] == 0, st["order"]
    outside = write_order(tmp_path, ["/etc/passwd"], "outside.txt")
    cp = prefetch(mounter, "--order", outside, m.path)
    assert cp.returncode == 1 and len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_replaced_file_is_never_served_old(mount, mounter, obucket, s3, proxy, tmp_path):
    """The order fetched version 1; the object is replaced; an open (which,
    with a zero metadata TTL, sees the new ETag) reads version 2 only."""
    keys = ["swap/a%02d.bin" % i for i in range(8)]
    v1 = {k: content_for(k + "v1", 20000) for k in keys}
    v2 = {k: content_for(k + "v2", 20000) for k in keys}
    for k in keys:
        s3.put_object(Bucket=obucket, Key=k, Body=v1[k])
    m = mount(obucket, "", "--metadata-ttl", "0", "--hedge-budget", "0", endpoint=proxy.url)
    cp = prefetch(mounter, "--order", write_order(tmp_path, keys), m.path)
    assert cp.returncode == 0, cp.stderr
    st = wait_order(m, proxy, len(keys))
    assert st["order"]["fetched"] == len(keys), st["order"]
    for k in keys:
        s3.put_object(Bucket=obucket, Key=k, Body=v2[k])
    assert read_in_order(m, keys, threads=4, expect=lambda k: v2[k]) == []


@pytest.mark.san
def test_clear_frees_the_window(mount, mounter, obucket, proxy, tmp_path):
    m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled(11)
    cp = prefetch(mounter, "--order", write_order(tmp_path, order), m.path)
    assert cp.returncode == 0, cp.stderr
    st = wait_order(m, proxy, NFILES)
    assert st["order"]["fetched"] > 0, st["order"]
    assert st["budget"]["used_bytes"] > 0, st["budget"]
    cp = prefetch(mounter, "--clear", m.path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "feedfs prefetch: orders cleared on %s" % m.path
    st = settled_stats(m, proxy)
    assert st["order"]["paths"] == 0, st["order"]
    assert st["order"]["wasted"] == st["order"]["fetched"], st["order"]
    assert st["budget"]["used_bytes"] == 0, st["budget"]
    # A new order after the clear works as the first did.
    cp = prefetch(mounter, "--order", write_order(tmp_path, order[:50], "o2.txt"), m.path)
    assert cp.returncode == 0, cp.stderr
    assert read_in_order(m, order[:50]) == []
    st = settled_stats(m, proxy)
    assert st["order"]["orders"] == 2 and st["order"]["consumed"] == 50, st["order"]


@pytest.mark.san
def test_ranks_sharing_a_mount_keep_their_orders(mount, mounter, obucket, proxy, tmp_path):
    """Two ranks of a distributed loader on one node mount: each sends its
    own shard as its own stream, and both are fetched ahead."""
    m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled(23)
    shards = [order[0::2], order[1::2]]
    for r, shard in enumerate(shards):
        cp = prefetch(mounter, "--order", write_order(tmp_path, shard, "r%d.txt" % r),
                      "--stream", "rank%d" % r, m.path)
        assert cp.returncode == 0, cp.stderr
        assert cp.stdout.strip() == "feedfs prefetch: %d paths sent to %s, stream rank%d" % (
            len(shard), m.path, r)
    st = wait_order(m, proxy, NFILES)
    assert st["order"]["streams"] == 2 and st["order"]["orders"] == 2, st["order"]
    # Both ranks read at once, two workers each, their own shards.
    bad = []
    import threading
    ts = [threading.Thread(target=lambda sh=sh: bad.extend(read_in_order(m, sh, threads=2)))
          for sh in shards]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert bad == []
    st = settled_stats(m, proxy)
    o = st["order"]
    assert o["consumed"] == NFILES, o
    assert o["hits"] >= NFILES - 30, o
    assert o["wasted"] <= NFILES // 20, o
    # Clearing one stream leaves the other; a bad stream name is refused.
    cp = prefetch(mounter, "--clear", "--stream", "rank0", m.path)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.strip() == "feedfs prefetch: order of stream rank0 cleared on %s" % m.path
    o = feedfs_stats(m)["order"]
    assert o["streams"] == 1 and o["paths"] == len(shards[1]), o
    cp = prefetch(mounter, "--order", write_order(tmp_path, order[:3], "x.txt"),
                  "--stream", "a/b", m.path)
    assert cp.returncode == 2 and "--stream" in cp.stderr, cp.stderr
    assert ctl_request(m.path, b"O 1 2 no/slash\na\n") == "ERR 22\n"
    assert feedfs_stats(m)["order"]["streams"] == 1


def test_large_file_gets_its_first_window(mount, mounter, s3, obucket, proxy, tmp_path):
    """A file larger than a part is not fetched whole ahead: its first window
    is, the open's first GET is answered from it, and the rest streams."""
    key = "train/big/shard-000.tar"
    body = content_for(key, 20 << 20)
    s3.put_object(Bucket=obucket, Key=key, Body=body)
    try:
        m = mount(obucket, "", "--hedge-budget", "0", endpoint=proxy.url)
        cp = prefetch(mounter, "--order", write_order(tmp_path, [key, shuffled()[0]]), m.path)
        assert cp.returncode == 0, cp.stderr
        st = wait_order(m, proxy, 2)
        assert st["order"]["fetched"] == 2, st["order"]
        ahead_before = st["ahead"]["hits"] + st["ahead"]["joined"]
        with open(os.path.join(m.path, key), "rb") as f:
            got = f.read()
        assert got == body
        st = settled_stats(m, proxy)
        assert st["order"]["hits"] == 1, st["order"]
        assert st["ahead"]["hits"] + st["ahead"]["joined"] == ahead_before + 1, st["ahead"]
        assert st["order"]["wasted"] == 0, st["order"]
        # Every byte of the file was fetched once: the window, then the rest.
        assert st["s3"]["object_bytes"] <= len(body) + (1 << 20), st["s3"]
    finally:
        s3.delete_object(Bucket=obucket, Key=key)


def test_order_is_charged_to_the_memory_budget(mount, mounter, obucket, proxy, tmp_path):
    m = mount(obucket, "", "--max-memory", "64M", "--hedge-budget", "0", endpoint=proxy.url)
    order = shuffled(5)
    cp = prefetch(mounter, "--order", write_order(tmp_path, order), m.path)
    assert cp.returncode == 0, cp.stderr
    st = wait_order(m, proxy, NFILES)
    held = st["order"]["bytes"]
    payload = sum(len(p) + 1 for p in order)
    assert held >= 2 * payload, st["order"]
    assert st["budget"]["used_bytes"] >= held, (st["budget"], held)
    # An order that would take more than half the budget is refused whole,
    # with E2BIG, and the one held stays.
    big = ["train/c0/" + "x" * 200 + "%07d.jpg" % i for i in range(120000)]
    cp = prefetch(mounter, "--order", write_order(tmp_path, big, "big.txt"), m.path)
    assert cp.returncode == 1, (cp.stdout, cp.stderr)
    assert "too large" in cp.stderr and len(cp.stderr.splitlines()) == 1, cp.stderr
    o = feedfs_stats(m)["order"]
    assert o["paths"] == NFILES and o["bytes"] == held, o
