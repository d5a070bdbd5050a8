"""Several mounts on one cache dir (many pods on one node, one NVMe cache).

The first mount owns the cache dir; a second mount of the same bucket at the
same endpoint attaches to it and reads through the owner's cache. GETs are
counted by the counting proxy that both mounts talk to; each daemon's counters
(`feedfs stats --json`, read while it runs) say how its reads were served. Bytes are always
compared with what was uploaded. No timing is asserted.
"""

import os
import time

import pytest

from cachelib import BS, OBJECTS, drop_page_cache, expected, kill_9, read_all
from conftest import content_for, settled_stats, sha256, unmount


def attach_stats(m, proxy):
    """The attached mount's counters from its running daemon, once readahead
    and cancels still in flight have finished."""
    st = settled_stats(m, proxy)
    assert "attach" in st, "no attach group in the stats of %s" % m.path
    return st["attach"]


def log_text(m):
    with open(m.log, errors="replace") as f:
        return f.read()


@pytest.mark.san
@pytest.mark.tsan
def test_second_mount_reads_through_the_owners_cache(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    other = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    assert "is in use by feedfs pid %d: attached" % owner.server in log_text(other)

    # Cold, through the attached mount: the owner fetches, once per block.
    assert read_all(other) == expected()
    assert proxy.gets() > 0
    # Then everything is in the owner's cache, for both mounts.
    drop_page_cache()
    proxy.reset()
    assert read_all(owner) == expected()
    drop_page_cache()
    assert read_all(other) == expected()
    src = content_for("big.bin", OBJECTS["big.bin"])
    with open(other.p("big.bin"), "rb") as f:          # across block edges
        for off in (0, (1 << 20) - 5, 3 * (1 << 20) + 17, len(src) - 9):
            f.seek(off)
            assert f.read(4096) == src[off:off + 4096]
    assert proxy.gets() == 0, proxy.get_paths

    st = attach_stats(other, proxy)
    assert st["reads"] > 0 and st["fallbacks"] == 0, st
    assert settled_stats(owner, proxy)["cache"]["checksum_failures"] == 0
    assert not unmount(other.path, other.pids)
    assert not unmount(owner.path, owner.pids)


def test_warm_through_an_attached_mount_fills_the_owners_cache(mount, bucket, proxy, tmp_path):
    """feedfs warm on an attached mount (here one of a sub-prefix) fetches
    through the owner: afterwards both read those files with zero GETs."""
    import subprocess
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    other = mount(bucket, "small/", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    cp = subprocess.run([other.binary, "warm", other.p("a.bin"), other.p("b.bin")],
                        capture_output=True, timeout=120)
    assert cp.returncode == 0, cp.stderr.decode()
    assert b"2/2 files" in cp.stdout, cp.stdout
    assert proxy.gets() == 2, proxy.get_paths       # the owner's, one per file
    drop_page_cache()
    proxy.reset()
    keys = ["small/a.bin", "small/b.bin"]
    assert read_all(owner, keys) == expected(keys)
    with open(other.p("a.bin"), "rb") as f:
        assert sha256(f.read()) == expected(["small/a.bin"])["small/a.bin"]
    assert proxy.gets() == 0, proxy.get_paths


def test_a_seek_cancels_what_is_not_yet_asked_of_the_owner(mount, s3, bucket, proxy,
                                                           tmp_path):
    """Blocks from 16 MiB on are held 2 s at the owner's S3: the attached
    mount's readahead past that is in hand when the reader seeks, and stops
    before its next block; every byte read is right."""
    mib = 1 << 20
    key, size = "long.bin", 64 * mib + 5
    want = content_for(key, size)
    s3.put_object(Bucket=bucket, Key=key, Body=want)
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    other = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    proxy.delay_s, proxy.delay_from = 2.0, 16 * mib
    with open(other.p(key), "rb", buffering=0) as f:
        for off in range(0, 12 * mib, mib):
            f.seek(off)
            assert f.read(mib) == want[off:off + mib], off
        far = 50 * mib + 3
        f.seek(far)
        assert f.read(70000) == want[far:far + 70000]
        proxy.delay_s, proxy.delay_from = 0, None
        f.seek(12 * mib)
        assert sha256(f.read(20 * mib)) == sha256(want[12 * mib:32 * mib])
    st = attach_stats(other, proxy)
    assert st["cancelled"] >= 1 and st["fallbacks"] == 0, st
    assert not unmount(other.path, other.pids)
    assert not unmount(owner.path, owner.pids)


@pytest.mark.san
def test_owner_gone_the_attached_mount_reads_from_s3(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    other = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    assert read_all(other, ["mid.bin"]) == expected(["mid.bin"])
    kill_9(owner)
    drop_page_cache()
    proxy.reset()
    assert read_all(other) == expected()
    assert proxy.gets() > 0                             # its own GETs now
    assert attach_stats(other, proxy)["fallbacks"] > 0
    assert not unmount(other.path, other.pids)
    assert "stopped answering" in log_text(other)


def test_owner_unmounted_the_attached_mount_reads_from_s3(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    other = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    assert not unmount(owner.path, owner.pids)
    drop_page_cache()
    assert read_all(other) == expected()
    assert attach_stats(other, proxy)["fallbacks"] > 0
    assert not unmount(other.path, other.pids)


def test_changed_object_through_the_owner_is_fetched_anew(mount, s3, bucket, proxy, tmp_path):
    """The attached mount names the ETag it saw at open; the owner's cache
    keys by it, so a replaced object is never served from its old blocks."""
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, "--metadata-ttl", "1",
                  endpoint=proxy.url)
    other = mount(bucket, "", "--cache-dir", cdir, *BS, "--metadata-ttl", "1",
                  endpoint=proxy.url)
    assert read_all(owner, ["mid.bin"]) == expected(["mid.bin"])
    assert read_all(other, ["mid.bin"]) == expected(["mid.bin"])
    new = content_for("mid.bin v2", OBJECTS["mid.bin"])       # same size, new bytes
    s3.put_object(Bucket=bucket, Key="mid.bin", Body=new)
    time.sleep(2.5)                                          # outlive --metadata-ttl
    drop_page_cache()
    with open(other.p("mid.bin"), "rb") as f:
        assert sha256(f.read()) == sha256(new)
    with open(owner.p("mid.bin"), "rb") as f:
        assert sha256(f.read()) == sha256(new)
    assert attach_stats(other, proxy)["fallbacks"] == 0
    assert not unmount(other.path, other.pids)


def test_mounts_started_together_share(mount, bucket, proxy, tmp_path):
    """Pods of one node start at once: whichever takes the lock owns the dir,
    the others wait for its share socket and attach; none fails."""
    import threading
    cdir = str(tmp_path / "cache")
    got, errs = [], []

    def one(i):
        try:
            got.append(mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url,
                             mnt=str(tmp_path / ("together%d" % i))))
        except BaseException as e:          # pytest.fail raises outside Exception
            errs.append(repr(e))

    for i in range(3):
        os.mkdir(str(tmp_path / ("together%d" % i)))
    ts = [threading.Thread(target=one, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    # (Mounts made at once may share a log file: count lines over the files.)
    text = "".join(log_text(m) for m in {m.log: m for m in got}.values())
    assert len(got) == 3
    assert text.count(": attached, reads go through its cache") == 2, text[-2000:]
    assert text.count("other mounts of this bucket may attach") == 1, text[-2000:]
    for m in got:
        assert read_all(m) == expected()


def second(mount, bucket, url, args):
    """A second mount of the cache dir that must be refused: its one-line error."""
    cp = mount(bucket, "", *args, endpoint=url, ok=False)
    err = cp.stderr.decode()
    assert cp.returncode == 1, err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_another_bucket_on_an_owned_cache_dir_is_refused(mount, s3, bucket, new_bucket,
                                                         proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    b2 = new_bucket("share2")
    s3.put_object(Bucket=b2, Key="x", Body=b"x")
    err = second(mount, b2, proxy.url, ["--cache-dir", cdir] + BS)
    assert "in use by feedfs pid %d and its owner mounts another bucket or endpoint" % (
        owner.server) in err, err
    assert "refused a mount" in log_text(owner)


def test_cache_clear_of_an_owned_cache_dir_is_refused(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    err = second(mount, bucket, proxy.url, ["--cache-dir", cdir, "--cache-clear"] + BS)
    assert "in use by feedfs pid %d" % owner.server in err, err
    assert read_all(owner) == expected()                # untouched


def talk(path, data, timeout=10):
    """Send data on a fresh connection to the share socket; return all it answers
    before it closes (or the timeout)."""
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    out = b""
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except (ConnectionResetError, BrokenPipeError):
        pass                    # closed on us with our bytes unread: the same answer
    finally:
        s.close()
    return out


@pytest.mark.san
def test_share_socket_protocol_table(mount, s3, bucket, proxy, tmp_path):
    """The owner answers only well-formed requests of a mount that named its
    bucket and endpoint; anything else closes that connection, and the owner
    goes on serving."""
    cdir = str(tmp_path / "cache")
    owner = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    sock = os.path.join(cdir, "share.sock")
    assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
    ident = ("%s\n%s" % (bucket, proxy.url)).encode()
    hello = b"H %d\n" % len(ident) + ident
    src = content_for("mid.bin", OBJECTS["mid.bin"])
    etag = s3.head_object(Bucket=bucket, Key="mid.bin")["ETag"].encode()

    def r(key, tag, size, off, n):
        return b"R %d %d %d %d %d\n" % (len(key), len(tag), size, off, n) + key + tag

    ok = talk(sock, hello + r(b"mid.bin", etag, len(src), 5, 4096))
    head, _, body = ok.partition(b"\n")
    assert head.startswith(b"OK ") and len(head.split()) == 3, ok[:80]
    head2, _, body2 = body.partition(b"\n")
    assert head2 == b"OK 4096" and body2 == src[5:5 + 4096]
    cases = [
        (b"R 7 3 10 0 1\nmid.binabc", b""),                  # no hello first
        (b"H 3\nabc", b"ERR 18\n"),                          # another bucket/endpoint
        (hello + r(b"mid.bin", etag, len(src), len(src), 1), b""),        # past the end
        (hello + r(b"mid.bin", etag, len(src), 0, 0), b""),               # empty
        (hello + r(b"mid.bin", etag, len(src), 0, 1 << 30), b""),         # over max read
        (hello + b"R 1 2 3\n", b""),                                     # short line
        (hello + b"R -1 2 3 4 5\n", b""),                                # not a number
        (hello + r(b"mid.bin", b'"nope"', len(src), 0, 10), b"ERR "),    # stale ETag
        (hello + r(b"gone.bin", b'"x"', 100, 0, 10), b"ERR "),          # no such key
        (b"X" * 200, b""),                                               # no line at all
    ]
    for req, want in cases:
        got = talk(sock, req)
        got = got.partition(b"\n")[2] if got.startswith(b"OK ") else got
        assert got.startswith(want) and (want or got == b""), (req[:60], got[:60])
    # Still serving, right bytes.
    assert read_all(owner) == expected()
    drop_page_cache()
    other = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    assert read_all(other) == expected()



def test_a_full_owner_leaves_new_mounts_without_a_cache(mount, bucket, proxy, tmp_path):
    """At 64 share connections the owner answers EBUSY; a mount that finds it
    full mounts without a cache (a warning, not a failure) and reads right."""
    import socket
    cdir = str(tmp_path / "cache")
    mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
    sock = os.path.join(cdir, "share.sock")
    ident = ("%s\n%s" % (bucket, proxy.url)).encode()
    held = []
    try:
        for _ in range(64):
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(10)
            c.connect(sock)
            c.sendall(b"H %d\n" % len(ident) + ident)
            assert c.recv(64).startswith(b"OK ")
            held.append(c)
        assert talk(sock, b"H %d\n" % len(ident) + ident) == b"ERR 16\n"
        late = mount(bucket, "", "--cache-dir", cdir, *BS, endpoint=proxy.url)
        assert "serves as many attached mounts as it can: mounting without a cache" in (
            log_text(late))
        proxy.reset()
        assert read_all(late) == expected()
        assert proxy.gets() > 0                     # its own GETs
    finally:
        for c in held:
            c.close()
