"""FUSE passthrough of promoted objects (src/fs/passthrough.c, promote.h).

An object read whole through the cache is promoted (copied from its checked
blocks into cache_dir/promoted/); the next open of it is answered with
FOPEN_PASSTHROUGH and the kernel reads the promoted file itself: the daemon's
READ count (fs.reads) must not move. Needs root and a kernel with FUSE
passthrough (6.9+); skipped with the reason otherwise. No timing is asserted.
"""

import errno
import fcntl
import mmap
import os
import struct
import time

import pytest

from cachelib import MIB, drop_page_cache
from conftest import content_for, feedfs_stats, sha256, unmount
from mounter import s3rver_args, s3rver_env

# Small files matter most (datasets of 4-160 KiB images), plus a few blocks.
OBJS = {"img/%03d.jpg" % i: 4096 + i * 9973 for i in range(16)}
OBJS["img/160k.jpg"] = 160 * 1024
OBJS["mid.bin"] = 5 * MIB + 3
OPTS = ["--block-size", "1M", "--cache-size", "64M", "--hedge-budget", "0"]


@pytest.fixture
def pbucket(s3, new_bucket):
    b = new_bucket("pt")
    for k, n in OBJS.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


def want(keys):
    return {k: sha256(content_for(k, OBJS[k])) for k in keys}


def read_keys(m, keys):
    out = {}
    for k in keys:
        with open(m.p(k), "rb") as f:
            out[k] = sha256(f.read())
    return out


def stats(m):
    return feedfs_stats(m)


def wait_promoted(m, n, tries=200):
    """Until n objects were promoted (the promoter works behind the reader)."""
    st = None
    for _ in range(tries):
        st = stats(m)
        if st["promote"]["promotions"] >= n:
            return st
        time.sleep(0.1)
    pytest.fail("promotions stayed at %r of %d: %r" % (st["promote"], n, st["promote"]))


def umount(m):
    problems = unmount(m.path, m.pids)
    assert not problems, problems


def passthrough_or_skip(m):
    """Skip when this kernel or user cannot pass through (the log says why)."""
    if os.geteuid() != 0:
        pytest.skip("FUSE passthrough needs root (the backing-open ioctl)")
    k = os.uname().release.split(".")
    if (int(k[0]), int(k[1].split("-")[0])) < (6, 9):
        pytest.skip("FUSE passthrough needs Linux 6.9+")


@pytest.mark.san
def test_second_epoch_makes_no_reads(mount, pbucket, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    keys = sorted(OBJS)
    assert read_keys(m, keys) == want(keys)                  # epoch 1: cold
    wait_promoted(m, len(keys))
    assert len(os.listdir(os.path.join(cdir, "promoted"))) == len(keys)

    drop_page_cache()
    before = stats(m)
    assert read_keys(m, keys) == want(keys)                  # epoch 2
    after = stats(m)
    assert after["fs"]["reads"] == before["fs"]["reads"], "READs reached the daemon"
    assert after["fs"]["pt_opens"] - before["fs"]["pt_opens"] == len(keys)
    assert after["cache"]["hits"] == before["cache"]["hits"]

    # mmap of a passed-through file reads the same bytes
    drop_page_cache()
    with open(m.p("mid.bin"), "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert sha256(mm[:]) == want(["mid.bin"])["mid.bin"]
            assert mm[MIB - 3:MIB + 5] == content_for("mid.bin", OBJS["mid.bin"])[MIB - 3:MIB + 5]
    # two opens of one node at once share one backing file
    with open(m.p("img/000.jpg"), "rb") as a, open(m.p("img/000.jpg"), "rb") as b:
        assert a.read() == b.read() == content_for("img/000.jpg", OBJS["img/000.jpg"])
    assert stats(m)["fs"]["reads"] == before["fs"]["reads"]
    umount(m)


def test_an_ordered_walk_over_promoted_files_fetches_nothing_ahead(mount, pbucket, tmp_path):
    """A reader that lists a directory and opens its files in listing order
    starts readahead across files (fs/order.c); once they are promoted, their
    opens are passed through and bytes fetched ahead for them would never be
    claimed: none may be wanted, and no block may be read for them. (A fresh
    mount: the detector remembers how far it wanted in a directory.)"""
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    names = os.listdir(m.p("img"))
    keys = ["img/" + n for n in names]
    assert sorted(keys) == sorted(k for k in OBJS if k.startswith("img/"))
    assert read_keys(m, keys) == want(keys)                  # epoch 1: cold, in order
    assert stats(m)["ahead"]["wanted"] > 0                   # the detector did start
    wait_promoted(m, len(keys))
    umount(m)
    drop_page_cache()
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    before = stats(m)
    assert os.listdir(m.p("img")) == names
    assert read_keys(m, keys) == want(keys)                  # epoch 2: in listing order
    after = stats(m)
    assert after["fs"]["pt_opens"] - before["fs"]["pt_opens"] == len(keys)
    assert after["fs"]["reads"] == before["fs"]["reads"]
    assert after["ahead"]["wanted"] == before["ahead"]["wanted"], "files wanted ahead"
    assert after["cache"]["hits"] == before["cache"]["hits"], "blocks read for nothing"
    umount(m)


def delta(before, after, *names):
    return tuple(after["fs"][n] - before["fs"][n] for n in names)


KEPT = ("pt_opens", "pt_backing_opens", "pt_backing_reuses", "pt_backing_closes", "reads")


@pytest.mark.san
def test_backing_ids_are_kept_for_the_next_epoch(mount, pbucket, tmp_path):
    """The last release keeps a node's backing id; the next open of the same
    version reuses it (no openat, no ioctl), with the same bytes."""
    m = mount(pbucket, "", "--cache-dir", str(tmp_path / "cache"), *OPTS)
    passthrough_or_skip(m)
    keys, n = sorted(OBJS), len(OBJS)
    assert read_keys(m, keys) == want(keys)                  # epoch 1: cold
    wait_promoted(m, n)
    drop_page_cache()
    s1 = stats(m)
    assert read_keys(m, keys) == want(keys)                  # epoch 2: registers
    s2 = stats(m)
    assert delta(s1, s2, *KEPT) == (n, n, 0, 0, 0)
    drop_page_cache()
    assert read_keys(m, keys[::-1]) == want(keys)            # epoch 3: reuses
    s3 = stats(m)
    assert delta(s2, s3, *KEPT) == (n, 0, n, 0, 0)
    umount(m)


def test_kept_backing_ids_are_bounded(mounter, s3server, pbucket, tmp_path):
    """$FEEDFS_PT_IDLE_MAX=2: never more than two idle ids, oldest closed."""
    m = mounter.mount("s3://" + pbucket, s3rver_args(s3server.url) +
                      ["--cache-dir", str(tmp_path / "cache")] + OPTS,
                      env=s3rver_env({"FEEDFS_PT_IDLE_MAX": "2"}))
    passthrough_or_skip(m)
    keys = sorted(OBJS)[:5]
    assert read_keys(m, keys) == want(keys)
    reads = wait_promoted(m, len(keys))["fs"]["reads"]
    for order in (keys, keys[::-1], keys):
        drop_page_cache()
        assert read_keys(m, order) == want(keys)
        st = stats(m)["fs"]
        assert st["pt_backing_opens"] - st["pt_backing_closes"] == 2, st
        assert st["reads"] == reads
    assert st["pt_backing_reuses"] > 0                       # the reversed epoch's first two
    umount(m)


@pytest.mark.san
def test_kept_backing_id_is_dropped_for_a_new_version(mount, s3, pbucket, tmp_path):
    m = mount(pbucket, "", "--cache-dir", str(tmp_path / "cache"), *OPTS,
              "--metadata-ttl", "1")
    passthrough_or_skip(m)
    k = "img/003.jpg"
    assert read_keys(m, [k]) == want([k])
    wait_promoted(m, 1)
    assert read_keys(m, [k]) == want([k])                    # registered, then kept idle
    s1 = stats(m)
    assert delta(s1, s1, *KEPT) == (0, 0, 0, 0, 0)
    assert (s1["fs"]["pt_backing_opens"], s1["fs"]["pt_backing_closes"]) == (1, 0)
    new = content_for(k + " v2", OBJS[k])                    # same size, new bytes
    s3.put_object(Bucket=pbucket, Key=k, Body=new)
    time.sleep(2.5)                                          # outlive --metadata-ttl
    drop_page_cache()
    with open(m.p(k), "rb") as f:                            # the kept id is not reused
        assert f.read() == new
    s2 = stats(m)
    assert delta(s1, s2, "pt_opens", "pt_backing_reuses", "pt_backing_closes") == (0, 0, 1)
    wait_promoted(m, 2)                                      # v2 promoted at that release
    drop_page_cache()
    with open(m.p(k), "rb") as f:
        assert f.read() == new
    s3_ = stats(m)
    assert delta(s2, s3_, "pt_opens", "pt_backing_opens", "pt_backing_reuses") == (1, 1, 0)
    umount(m)


def test_kept_backing_id_is_closed_when_its_file_is_evicted(mount, s3, pbucket, tmp_path):
    """--cache-size 8M: promoted files within 2 MiB. A fourth 600 KiB file
    evicts the least recently opened one, whose idle id is then closed (its
    disk space comes back); an open of it reads the normal way."""
    cdir = str(tmp_path / "cache")
    size = 600 * 1024
    ev = ["ev/%d.bin" % i for i in range(4)]
    for k in ev:
        s3.put_object(Bucket=pbucket, Key=k, Body=content_for(k, size))
    m = mount(pbucket, "", "--cache-dir", cdir, "--block-size", "1M", "--cache-size", "8M",
              "--hedge-budget", "0")
    passthrough_or_skip(m)

    def check(keys):
        for k in keys:
            with open(m.p(k), "rb") as f:
                assert f.read() == content_for(k, size), k

    check(ev[:3])
    wait_promoted(m, 3)
    check(ev[:3])                                            # three ids, kept idle
    s1 = stats(m)
    assert (s1["fs"]["pt_backing_opens"], s1["fs"]["pt_backing_closes"]) == (3, 0)
    check(ev[3:])
    wait_promoted(m, 4)
    s2 = stats(m)
    assert s2["promote"]["evictions"] == 1 and s2["promote"]["files"] == 3
    assert s2["fs"]["pt_backing_closes"] == 1                # ev/0's id: evicted, idle
    assert not os.path.exists(os.path.join(cdir, "promoted", ".t-x"))
    drop_page_cache()
    check(ev[1:3])
    s3_ = stats(m)
    assert delta(s2, s3_, "pt_backing_reuses", "reads") == (2, 0)
    check(ev[:1])                                            # the normal way (its release
    assert stats(m)["fs"]["reads"] > s3_["fs"]["reads"]      # asks for it again: last)
    umount(m)


def test_promoted_files_survive_a_remount(mount, pbucket, tmp_path):
    cdir = str(tmp_path / "cache")
    m1 = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m1)
    keys = ["img/001.jpg", "img/160k.jpg"]
    assert read_keys(m1, keys) == want(keys)
    wait_promoted(m1, len(keys))
    umount(m1)
    drop_page_cache()
    m2 = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    assert read_keys(m2, keys) == want(keys)
    st = stats(m2)
    assert st["fs"]["reads"] == 0 and st["fs"]["pt_opens"] == len(keys)
    assert st["promote"]["files"] == len(keys)
    umount(m2)


@pytest.mark.san
def test_replaced_object_is_never_read_from_the_old_file(mount, s3, pbucket, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS, "--metadata-ttl", "1")
    passthrough_or_skip(m)
    k = "img/002.jpg"
    assert read_keys(m, [k]) == want([k])
    wait_promoted(m, 1)
    held = open(m.p(k), "rb")                                # passed through, old version
    assert stats(m)["fs"]["pt_opens"] == 1
    new = content_for(k + " v2", OBJS[k])                    # same size, new bytes
    s3.put_object(Bucket=pbucket, Key=k, Body=new)
    time.sleep(2.5)                                          # outlive --metadata-ttl
    # While a handle of the node reads the old version through passthrough,
    # the kernel allows no other backing file nor a normal open on it: a new
    # open fails ESTALE (the same errno the normal path gives a read of a
    # replaced object), never the old bytes.
    with pytest.raises(OSError) as ei:
        open(m.p(k), "rb")
    assert ei.value.errno == errno.ESTALE
    assert held.read() == content_for(k, OBJS[k])            # the held one: its version, whole
    held.close()
    before = stats(m)["fs"]
    with open(m.p(k), "rb") as f:
        assert f.read() == new
    after = stats(m)["fs"]
    assert after["pt_opens"] == before["pt_opens"]           # not from the old file
    assert after["reads"] > before["reads"]
    umount(m)


def test_partially_cached_object_is_not_passed_through(mount, s3, pbucket, tmp_path):
    cdir = str(tmp_path / "cache")
    k, n = "part/big.bin", 13 * MIB + 5                      # above the part size: not fetched whole
    src = content_for(k, n)
    s3.put_object(Bucket=pbucket, Key=k, Body=src)
    m = mount(pbucket, "", "--cache-dir", cdir, "--block-size", "1M", "--cache-size", "128M",
              "--hedge-budget", "0")
    passthrough_or_skip(m)
    with open(m.p(k), "rb") as f:                            # one random read: pieces only
        f.seek(7 * MIB + 100)
        assert f.read(4096) == src[7 * MIB + 100:7 * MIB + 100 + 4096]
    for _ in range(100):
        st = stats(m)["promote"]
        if st["not_cached"] >= 1:
            break
        time.sleep(0.1)
    assert st["not_cached"] >= 1 and st["promotions"] == 0, st
    before = stats(m)["fs"]
    with open(m.p(k), "rb") as f:
        assert sha256(f.read()) == sha256(src)
    after = stats(m)["fs"]
    assert after["pt_opens"] == before["pt_opens"] and after["reads"] > before["reads"]
    umount(m)


def test_device_ioctl_reaches_the_daemon_on_a_passed_through_file(mount, pbucket, tmp_path):
    """The kernel passes reads, not ioctls: the device-feed ABI still answers."""
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    k = "img/003.jpg"
    assert read_keys(m, [k]) == want([k])
    wait_promoted(m, 1)
    with open(m.p(k), "rb") as f:
        assert stats(m)["fs"]["pt_opens"] == 1
        b = bytearray(struct.pack("<II", 1, 64) + bytes(56))     # FEEDFS_IOC_CAPS
        fcntl.ioctl(f.fileno(), (3 << 30) | (64 << 16) | (0xF7 << 8) | 0, b, True)
        assert struct.unpack_from("<II", b) == (1, 64)
    umount(m)


def test_a_handle_that_only_fed_devices_is_not_promoted(mount, pbucket, tmp_path):
    """Device-feed ioctls read through the block cache whatever is promoted:
    a handle that served only those is not promoted at release (it would read
    and write the whole object again for nobody), one that read(2) is."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python"))
    from feedfs import device as fdev

    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    dev, red = "mid.bin", "img/006.jpg"
    n = OBJS[dev]
    ch = fdev.Channel(m.path)
    r = ch.region(n)
    with open(m.p(dev), "rb") as f:
        assert fdev._check(ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, n), dev) == n
    assert sha256(bytes(r.view)) == want([dev])[dev]
    r.free()
    ch.close()
    assert read_keys(m, [red]) == want([red])
    st = wait_promoted(m, 1)
    time.sleep(0.5)                     # a wish for `dev` would be queued before
    st = stats(m)
    assert st["promote"]["promotions"] == 1, st["promote"]
    assert len([e for e in os.listdir(os.path.join(cdir, "promoted"))
                if not e.startswith(".")]) == 1
    umount(m)


def test_option_off_passes_nothing_through(mount, pbucket, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS, "--passthrough=off")
    keys = ["img/004.jpg", "mid.bin"]
    assert read_keys(m, keys) == want(keys)
    time.sleep(1)
    drop_page_cache()
    assert read_keys(m, keys) == want(keys)
    st = stats(m)
    assert "promote" not in st
    assert st["fs"]["pt_opens"] == 0 and st["fs"]["reads"] > 0
    assert not os.path.exists(os.path.join(cdir, "promoted"))
    umount(m)


def test_bad_option_value_is_refused(mount, pbucket):
    cp = mount(pbucket, "", "--passthrough=maybe", ok=False)
    assert b"--passthrough: 'maybe' is not on or off" in cp.stderr


@pytest.mark.san
def test_passthrough_handles_survive_a_takeover(mount, pbucket, tmp_path):
    """Backing ids belong to the connection: a handle passed through before
    the server dies reads on, and a successor (keep.h) opens the same node on
    the same backing file (the slot carries its id) instead of a normal open,
    which the kernel would refuse with EIO."""
    import signal
    from test_keep import serving_pid, wait_takeover

    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    k = "mid.bin"
    src = content_for(k, OBJS[k])
    assert read_keys(m, [k]) == want([k])
    wait_promoted(m, 1)
    held = open(m.p(k), "rb")
    assert stats(m)["fs"]["pt_opens"] == 1
    assert held.read(MIB) == src[:MIB]
    os.kill(serving_pid(m), signal.SIGKILL)
    st = wait_takeover(m, 1)
    assert st["fs"]["reads"] == 0
    assert held.read() == src[MIB:]                          # no daemon involved
    with open(m.p(k), "rb") as again:                        # the node is passed through
        assert again.read() == src
    st = stats(m)
    assert st["fs"]["pt_opens"] == 1 and st["fs"]["reads"] == 0, st["fs"]
    held.close()
    time.sleep(0.5)                                          # RELEASE is asynchronous
    with open(m.p(k), "rb") as f:                            # last one closed: any way is right
        assert f.read() == src
    umount(m)


def test_o_direct_open_starts_no_passthrough(mount, pbucket, tmp_path):
    """O_DIRECT would reach the backing file with its alignment rules: such an
    open reads the normal way, unaligned buffers included."""
    cdir = str(tmp_path / "cache")
    m = mount(pbucket, "", "--cache-dir", cdir, *OPTS)
    passthrough_or_skip(m)
    k = "img/005.jpg"
    assert read_keys(m, [k]) == want([k])
    wait_promoted(m, 1)
    before = stats(m)["fs"]
    fd = os.open(m.p(k), os.O_RDONLY | os.O_DIRECT)
    try:
        got = os.pread(fd, OBJS[k] + 100, 3)             # unaligned offset and length
    finally:
        os.close(fd)
    assert got == content_for(k, OBJS[k])[3:]
    after = stats(m)["fs"]
    assert after["pt_opens"] == before["pt_opens"] and after["reads"] > before["reads"]
    with open(m.p(k), "rb") as f:                        # the next plain open passes through
        assert f.read() == content_for(k, OBJS[k])
    assert stats(m)["fs"]["pt_opens"] == before["pt_opens"] + 1
    umount(m)


def test_kept_backing_ids_survive_a_takeover(mount, pbucket, tmp_path):
    """An idle backing id is in a keep slot (KEEP_IDLE): a successor adopts
    the ids its predecessor kept. After a crash the successor empties the
    promoted dir (promote.h: a file's data may not have reached the disk), so
    no adopted id may be reused: each one is closed at the next open of its
    node, which reads the normal way; without adoption they would leak."""
    import signal
    from test_keep import serving_pid, wait_takeover

    m = mount(pbucket, "", "--cache-dir", str(tmp_path / "cache"), *OPTS)
    passthrough_or_skip(m)
    keys, n = sorted(OBJS), len(OBJS)
    assert read_keys(m, keys) == want(keys)
    wait_promoted(m, n)
    assert read_keys(m, keys) == want(keys)                  # n ids, then idle
    st = stats(m)["fs"]
    assert (st["pt_backing_opens"], st["pt_backing_closes"]) == (n, 0)
    time.sleep(0.5)                                          # RELEASE is asynchronous
    os.kill(serving_pid(m), signal.SIGKILL)
    wait_takeover(m, 1)
    drop_page_cache()
    assert read_keys(m, keys) == want(keys)
    st = stats(m)["fs"]                                      # the successor's counters
    assert (st["pt_opens"], st["pt_backing_reuses"], st["pt_backing_closes"]) == (0, 0, n), st
    assert st["reads"] > 0
    wait_promoted(m, n)                                      # promoted again, then passed
    drop_page_cache()                                        # through on new ids
    assert read_keys(m, keys) == want(keys)
    st = stats(m)["fs"]
    assert (st["pt_opens"], st["pt_backing_opens"], st["pt_backing_closes"]) == (n, n, n), st
    umount(m)
