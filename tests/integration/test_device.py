"""The device-feed path (issue 17, docs/DEVICE.md) over a real mount: the
ioctl ABI of include/feedfs/feedfs_ioctl.h, shared-memory regions registered
over the control socket (the D verb), libfeedfs (in C: tests/lib/lib_client.c,
and through python/feedfs over ctypes), and the "device" counters.

Every byte the daemon copies into a region is compared with the SHA-256 of
what was uploaded; errors are exact errnos; counts are exact. No GPU here:
the device destination is checked only for its documented refusal (ENODEV).
"""
import ctypes
import errno
import fcntl
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from conftest import content_for, feedfs_stats, sha256
from counting_proxy import CountingProxy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import feedfs  # noqa: E402
from feedfs import device as fdev  # noqa: E402

MIB = 1 << 20
SIZES = {"d/empty.bin": 0, "d/small.bin": 5000, "d/three.bin": 3 * MIB + 17,
         "d/big.bin": 24 * MIB + 4097}
SHA = {k: sha256(content_for(k, n)) for k, n in SIZES.items()}

# The ABI (feedfs_ioctl.h), spelled out here so the test checks the header's
# numbers rather than trusting them.
MAGIC = 0xF7
IOC_READ, IOC_WRITE = 2, 1
CAPS_SIZE, READ_SIZE, BATCH_SIZE = 64, 152, 136 + 32 * 256


def ioc(nr, size, d=IOC_READ | IOC_WRITE, magic=MAGIC):
    return (d << 30) | (size << 16) | (magic << 8) | nr


def caps_buf(version=1, size=CAPS_SIZE):
    return bytearray(struct.pack("<II", version, size) + bytes(CAPS_SIZE - 8))


def read_buf(region, region_off, file_off, length, kind=1, version=1, size=READ_SIZE, handle=b""):
    dest = struct.pack("<IIQQ", kind, 0, region, region_off) + handle.ljust(64, b"\0")
    b = struct.pack("<IIIIQQ", version, size, 0, 0, file_off, length) + dest
    return bytearray(b + bytes(READ_SIZE - len(b)))


def ioctl_read(fd, *a, **kw):
    """READ ioctl: the result field (bytes), or raises OSError."""
    b = read_buf(*a, **kw)
    fcntl.ioctl(fd, ioc(1, READ_SIZE), b, True)
    return struct.unpack_from("<q", b, 120)[0]


def errno_of(fn):
    with pytest.raises(OSError) as ei:
        fn()
    return ei.value.errno


@pytest.fixture(scope="module")
def dbucket(s3):
    b = "device-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=b)
    for k, n in SIZES.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


@pytest.fixture
def dmount(mount, dbucket):
    return mount(dbucket)


def lib_client():
    p = os.path.join(ROOT, "build", "tests", "lib_client")
    if not os.path.exists(p) or fdev.library() is None:
        pytest.skip("needs build/tests/lib_client and build/libfeedfs.so (make all)")
    return p


def dev_stats(m):
    return feedfs_stats(m)["device"]


def wait_stat(m, key, want, tries=100):
    for _ in range(tries):
        st = dev_stats(m)
        if st[key] == want:
            return st
        time.sleep(0.1)
    pytest.fail("device.%s stayed %r, want %r" % (key, st[key], want))


# ---- the ABI -----------------------------------------------------------------

def test_caps_unknown_command_and_wrong_sizes(dmount):
    with open(dmount.p("d/small.bin"), "rb") as f:
        fd = f.fileno()
        b = caps_buf()
        fcntl.ioctl(fd, ioc(0, CAPS_SIZE), b, True)
        ver, size, flags, bmax, lmax, deverr = struct.unpack_from("<IIIIQi", b)
        assert (ver, size, bmax) == (1, CAPS_SIZE, 256)
        assert flags & 1 and flags & 4           # host regions, batch
        assert not flags & 2 and deverr == errno.ENODEV     # no GPU on this machine
        assert lmax >= 1 << 30
        # Not ours at all: ENOTTY, as any file answers.
        assert errno_of(lambda: fcntl.ioctl(fd, ioc(9, CAPS_SIZE), caps_buf(), True)) == errno.ENOTTY
        assert errno_of(lambda: fcntl.ioctl(fd, ioc(0, CAPS_SIZE, magic=0xF6), caps_buf(),
                                            True)) == errno.ENOTTY
        # Ours with the wrong size in the command, the size field, or version.
        assert errno_of(lambda: fcntl.ioctl(fd, ioc(0, CAPS_SIZE + 8), caps_buf() + bytes(8),
                                            True)) == errno.EINVAL
        assert errno_of(lambda: fcntl.ioctl(fd, ioc(0, CAPS_SIZE), caps_buf(size=60),
                                            True)) == errno.EINVAL
        assert errno_of(lambda: fcntl.ioctl(fd, ioc(0, CAPS_SIZE), caps_buf(version=2),
                                            True)) == errno.EINVAL
        assert errno_of(lambda: ioctl_read(fd, 1, 0, 0, 10, version=0)) == errno.EINVAL
        assert errno_of(lambda: ioctl_read(fd, 1, 0, 0, 10, size=READ_SIZE - 8)) == errno.EINVAL
        # A read naming no registered region, and a bad destination kind.
        assert errno_of(lambda: ioctl_read(fd, 12345, 0, 0, 10)) == errno.ENOENT
        assert errno_of(lambda: ioctl_read(fd, 12345, 0, 0, 10, kind=7)) == errno.EINVAL
        # A directory: ENOTTY (the ABI is for files).
        dfd = os.open(dmount.p("d"), os.O_RDONLY | os.O_DIRECTORY)
        try:
            assert errno_of(lambda: fcntl.ioctl(dfd, ioc(0, CAPS_SIZE), caps_buf(),
                                                True)) == errno.ENOTTY
        finally:
            os.close(dfd)
        # A device destination without CUDA in the daemon: the documented ENODEV.
        assert errno_of(lambda: ioctl_read(fd, 0, 0, 0, 10, kind=2,
                                           handle=b"\1" * 64)) == errno.ENODEV


def test_cuda_runtime_absent(mounter, s3server, dbucket):
    """$FEEDFS_CUDART names a library that is not there: caps say ENODEV,
    a device read is ENODEV, the log says which library was tried, and the
    host path works as ever."""
    from mounter import s3rver_args, s3rver_env
    m = mounter.mount("s3://" + dbucket, s3rver_args(s3server.url),
                      env=s3rver_env({"FEEDFS_CUDART": "/nonexistent/libcudart.so"}))
    with open(m.p("d/small.bin"), "rb") as f:
        b = caps_buf()
        fcntl.ioctl(f.fileno(), ioc(0, CAPS_SIZE), b, True)
        flags, deverr, rt = struct.unpack_from("<I", b, 8)[0], *struct.unpack_from("<ii", b, 24)
        assert not flags & 2 and deverr == errno.ENODEV and rt == 0
        assert errno_of(lambda: ioctl_read(f.fileno(), 0, 0, 0, 10, kind=2,
                                           handle=b"\1" * 64)) == errno.ENODEV
        ch = fdev.Channel(m.path)
        r = ch.region(5000)
        assert ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, 5000) == 5000
        assert sha256(bytes(r.view)) == SHA["d/small.bin"]
        ch.close()
    with open(m.log) as lf:
        log = lf.read()
    assert "no CUDA runtime (tried /nonexistent/libcudart.so ($FEEDFS_CUDART))" in log


# ---- the device destination, over a stand-in CUDA runtime ---------------------

FAKE_CUDART = os.path.join(ROOT, "build", "tests", "libfake_cudart.so")


def fake_device(tmp_path, size):
    """A "device allocation" of the fake runtime (tests/lib/fake_cudart.c):
    a shared file, named in the handle. Returns (path, handle)."""
    p = "/dev/shm/feedfs-fakegpu-%d-%d" % (os.getpid(), size)
    with open(p, "wb") as f:
        f.truncate(size)
    return p, b"FAKE" + p.encode() + b"\0"


@pytest.mark.san
@pytest.mark.tsan
def test_device_reads_through_a_stand_in_runtime(mounter, s3server, dbucket, tmp_path):
    """The daemon's CUDA code end to end, without a GPU: the fake runtime
    queues every cudaMemcpyAsync and moves the bytes only when its event is
    waited for, so a staging buffer refilled too early would ship wrong
    bytes. Whole files (24 MiB: six 4 MiB stages, four in flight), ranges at
    device offsets, a batch, the caps, and the counters, exactly."""
    if not os.path.exists(FAKE_CUDART):
        pytest.skip("needs build/tests/libfake_cudart.so (make all)")
    from mounter import s3rver_args, s3rver_env
    m = mounter.mount("s3://" + dbucket, s3rver_args(s3server.url),
                      env=s3rver_env({"FEEDFS_CUDART": FAKE_CUDART}))
    n = SIZES["d/big.bin"]
    path, handle = fake_device(tmp_path, n + 4096)
    try:
        with open(m.p("d/big.bin"), "rb") as f:
            fd = f.fileno()
            b = caps_buf()
            fcntl.ioctl(fd, ioc(0, CAPS_SIZE), b, True)
            flags = struct.unpack_from("<I", b, 8)[0]
            deverr, rt = struct.unpack_from("<ii", b, 24)
            assert flags & 2 and deverr == 0 and rt == 12040
            assert ioctl_read(fd, 0, 0, 0, n, kind=2, handle=handle) == n
            with open(path, "rb") as d:
                assert sha256(d.read(n)) == SHA["d/big.bin"]
            # A range at a device offset; past the end of the file: short.
            data = content_for("d/big.bin", n)
            assert ioctl_read(fd, 0, 4096, n - 5 * MIB - 3, 6 * MIB, kind=2, handle=handle) == \
                5 * MIB + 3
            with open(path, "rb") as d:
                d.seek(4096)
                assert d.read(5 * MIB + 3) == data[n - 5 * MIB - 3:]
            # A handle the runtime cannot open: EINVAL.
            assert errno_of(lambda: ioctl_read(fd, 0, 0, 0, 10, kind=2,
                                               handle=b"FAKE/nonexistent\0")) == errno.EINVAL
        with open(m.p("d/three.bin"), "rb") as f:
            t = content_for("d/three.bin", SIZES["d/three.bin"])
            ext = [(0, 1000, 0), (MIB, 2 * MIB, 1000), (7, 5, 2 * MIB + 1000)]
            dest = struct.pack("<IIQQ", 2, 0, 0, 100) + handle.ljust(64, b"\0")
            head = struct.pack("<IIII", 1, BATCH_SIZE, 0, len(ext)) + dest + \
                struct.pack("<qiI", 0, 0, 0) + bytes(16)
            body = b"".join(struct.pack("<QQQq", o, ln, d, 0) for o, ln, d in ext)
            b = bytearray(head + body + bytes(BATCH_SIZE - len(head) - len(body)))
            fcntl.ioctl(f.fileno(), ioc(2, BATCH_SIZE), b, True)
            total, err, failed = struct.unpack_from("<qiI", b, 104)
            assert (total, err, failed) == (1000 + 2 * MIB + 5, 0, 3)
            with open(path, "rb") as d:
                d.seek(100)
                assert d.read(1000 + 2 * MIB + 5) == t[:1000] + t[MIB:3 * MIB] + t[7:12]
    finally:
        os.unlink(path)
    st = dev_stats(m)
    want = n + 5 * MIB + 3 + 1000 + 2 * MIB + 5
    assert st["device_bytes"] == want and st["direct_bytes"] == want
    with open(m.log) as lf:
        assert "CUDA runtime 12040, 1 device(s): device reads on" in lf.read()


def test_stand_in_runtime_without_a_device(mounter, s3server, dbucket):
    if not os.path.exists(FAKE_CUDART):
        pytest.skip("needs build/tests/libfake_cudart.so (make all)")
    from mounter import s3rver_args, s3rver_env
    m = mounter.mount("s3://" + dbucket, s3rver_args(s3server.url),
                      env=s3rver_env({"FEEDFS_CUDART": FAKE_CUDART, "FAKE_CUDART_DEVICES": "0"}))
    with open(m.p("d/small.bin"), "rb") as f:
        b = caps_buf()
        fcntl.ioctl(f.fileno(), ioc(0, CAPS_SIZE), b, True)
        assert not struct.unpack_from("<I", b, 8)[0] & 2
        assert struct.unpack_from("<ii", b, 24) == (errno.ENODEV, 12040)
        assert errno_of(lambda: ioctl_read(f.fileno(), 0, 0, 0, 10, kind=2,
                                           handle=b"FAKE/x\0")) == errno.ENODEV
    with open(m.log) as lf:
        assert "no CUDA-capable device is detected (fake)" in lf.read()


def test_device_read_from_another_pid_namespace_is_exdev(dmount):
    """Legacy CUDA IPC handles do not open across PID namespaces: the daemon
    refuses with EXDEV before asking CUDA (and the library falls back)."""
    if os.geteuid() != 0 or subprocess.run(["unshare", "--pid", "--fork", "true"]).returncode:
        pytest.skip("needs root and unshare --pid")
    prog = ("import fcntl,struct,errno,sys\n"
            "f=open(sys.argv[1],'rb')\n"
            "b=bytearray(struct.pack('<IIIIQQ',1,152,0,0,0,10)+struct.pack('<IIQQ',2,0,0,0)"
            "+b'FAKE/x'.ljust(64,b'\\0')+bytes(32))\n"
            "try:\n fcntl.ioctl(f.fileno(),(3<<30)|(152<<16)|(0xF7<<8)|1,b,True); print(0)\n"
            "except OSError as e: print(e.errno)\n")
    cp = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", prog,
                         dmount.p("d/small.bin")], capture_output=True, text=True, timeout=60)
    assert cp.stdout.strip() == str(errno.EXDEV), cp.stderr
    # The same request from our own namespace gets as far as CUDA: ENODEV here.
    with open(dmount.p("d/small.bin"), "rb") as f:
        assert errno_of(lambda: ioctl_read(f.fileno(), 0, 0, 0, 10, kind=2,
                                           handle=b"FAKE/x")) == errno.ENODEV


# ---- the shared-memory path --------------------------------------------------

@pytest.mark.san
def test_whole_files_ranges_and_counters(dmount):
    ch = fdev.Channel(dmount.path)
    total = 0
    try:
        for k, n in SIZES.items():
            r = ch.region(max(n, 4096))   # every range below fits
            fd = os.open(dmount.p(k), os.O_RDONLY)
            try:
                got = fdev._check(ch.lib.feedfs_read_host(fd, r.id, 0, 0, n), k)
                assert got == n
                assert sha256(bytes(r.view[:n])) == SHA[k], k
                total += n
                if n:
                    data = content_for(k, n)
                    for off, ln in ((0, 1), (n // 3, n // 2), (n - 1, 1), (max(n - 100, 0), 100)):
                        got = fdev._check(ch.lib.feedfs_read_host(fd, r.id, 7 if ln < n - 7
                                                                  else 0, off, ln), k)
                        assert got == ln
                        at = 7 if ln < n - 7 else 0
                        assert bytes(r.view[at:at + ln]) == data[off:off + ln], (k, off, ln)
                        total += ln
                    # Crossing the end: short; at and past it: 0.
                    assert ch.lib.feedfs_read_host(fd, r.id, 0, n - 10 if n > 10 else 0, 50) == \
                        min(n, 10) if n > 10 else n
                    total += min(n, 10) if n > 10 else n
                assert ch.lib.feedfs_read_host(fd, r.id, 0, n, 10) == 0
                assert ch.lib.feedfs_read_host(fd, r.id, 0, n + 12345, 10) == 0
            finally:
                os.close(fd)
                r.free()
    finally:
        ch.close()
    st = feedfs_stats(dmount)
    assert st["device"]["direct_bytes"] == total
    assert st["device"]["device_bytes"] == 0
    assert st["fs"]["read_bytes"] == 0          # nothing went through FUSE reads
    assert st["device"]["regions"] == 0
    prom = feedfs_stats(dmount, form="--prom")
    assert "\nfeedfs_direct_bytes_total{" in prom
    assert [ln for ln in prom.splitlines() if ln.startswith("feedfs_direct_bytes_total{")][0] \
        .endswith(" %d" % total)
    text = subprocess.run([dmount.binary, "stats", dmount.path], capture_output=True, text=True,
                          timeout=30).stdout
    assert "direct (device feed)" in text


def test_region_too_small_bad_offsets_and_overflow(dmount):
    ch = fdev.Channel(dmount.path)
    try:
        r = ch.region(4096)
        with open(dmount.p("d/three.bin"), "rb") as f:
            fd = f.fileno()
            rd = ch.lib.feedfs_read_host
            assert rd(fd, r.id, 0, 0, 8192) == -errno.EFAULT       # region too small
            assert rd(fd, r.id, 4000, 0, 97) == -errno.EFAULT      # runs past its end
            assert rd(fd, r.id, 4097, 0, 0) == -errno.EFAULT       # starts past it
            assert rd(fd, r.id, 4096, 0, 0) == 0                   # empty, at the end: fine
            assert errno_of(lambda: ioctl_read(fd, r.id, 1 << 63, 0, 1 << 63)) == errno.EINVAL
            assert errno_of(lambda: ioctl_read(fd, r.id, 0, (1 << 64) - 10, 100)) == errno.EINVAL
            assert rd(fd, r.id, 96, 0, 4000) == 4000
            assert bytes(r.view[96:4096]) == content_for("d/three.bin", 4000)
    finally:
        ch.close()


def test_unsealed_memfd_is_refused(dmount):
    ch = fdev.Channel(dmount.path)
    try:
        fd = os.memfd_create("unsealed")
        os.ftruncate(fd, 8192)
        rid = ctypes.c_uint64()
        ch.lib.feedfs_register_fd.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.c_uint64)]
        assert ch.lib.feedfs_register_fd(ch.ptr, fd, 8192, ctypes.byref(rid)) == -errno.EPERM
        # Sealed but smaller than asked: EINVAL.
        fd2 = os.memfd_create("small", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd2, 4096)
        fcntl.fcntl(fd2, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
        assert ch.lib.feedfs_register_fd(ch.ptr, fd2, 8192, ctypes.byref(rid)) == -errno.EINVAL
        assert ch.lib.feedfs_register_fd(ch.ptr, fd2, 4096, ctypes.byref(rid)) == 0
        assert rid.value != 0
        assert ch.lib.feedfs_unregister(ch.ptr, rid.value) == 0
        assert ch.lib.feedfs_unregister(ch.ptr, rid.value) == -errno.ENOENT
        os.close(fd)
        os.close(fd2)
    finally:
        ch.close()


def test_regions_are_per_channel(dmount):
    """Another channel cannot unregister my region; a closed channel's
    regions are gone (ENOENT), and the gauge says so."""
    a, b = fdev.Channel(dmount.path), fdev.Channel(dmount.path)
    r = a.region(1 << 16)
    assert dev_stats(dmount)["regions"] == 1
    assert b.lib.feedfs_unregister(b.ptr, r.id) == -errno.ENOENT
    with open(dmount.p("d/small.bin"), "rb") as f:
        assert b.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, 5000) == 5000  # same uid: usable
        a.close()
        wait_stat(dmount, "regions", 0)
        assert b.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, 5000) == -errno.ENOENT
    b.close()
    st = dev_stats(dmount)
    assert st["registered"] == 1 and st["freed_at_close"] == 1


def test_file_larger_than_max_memory(mount, dbucket):
    m = mount(dbucket, "", "--part-size", "1M", "--max-memory", "8M")
    n = SIZES["d/big.bin"]
    ch = fdev.Channel(m.path)
    try:
        r = ch.region(n)
        with open(m.p("d/big.bin"), "rb") as f:
            assert ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, n) == n
        assert sha256(bytes(r.view)) == SHA["d/big.bin"]
    finally:
        ch.close()
    st = feedfs_stats(m)
    assert st["budget"]["peak_bytes"] <= 8 * MIB
    assert st["device"]["direct_bytes"] == n


@pytest.mark.san
def test_object_replaced_before_read_is_estale(stub, mount):
    stub.create_bucket("dstale")
    n = 6 * MIB
    stub.put("dstale", "obj.bin", content_for("v1", n))
    m = mount("dstale", "", "--part-size", "1M", "--metadata-ttl", "60", endpoint=stub.url)
    ch = fdev.Channel(m.path)
    try:
        r = ch.region(n)
        os.stat(m.p("obj.bin"))                 # the lookup sees v1's ETag
        with open(m.p("obj.bin"), "rb", buffering=0) as f:
            stub.put("dstale", "obj.bin", content_for("v2", n))
            assert ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, n) == -errno.ESTALE
            # read(2) on the same handle agrees: the handle is pinned to v1.
            assert errno_of(lambda: f.read(4096)) == errno.ESTALE
    finally:
        ch.close()
    st = feedfs_stats(m)
    assert st["device"]["estale"] == 1
    assert st["device"]["direct_bytes"] == 0
    # A new open sees v2 and reads it whole.
    ch = fdev.Channel(m.path)
    try:
        r = ch.region(n)
        deadline = time.monotonic() + 30
        while True:
            with open(m.p("obj.bin"), "rb") as f:
                got = ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, n)
            if got == n or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert got == n
        assert sha256(bytes(r.view)) == sha256(content_for("v2", n))
    finally:
        ch.close()


def test_replaced_mid_read_never_mixes(stub, mount):
    """Replaced after the first MiB was read: the rest is v1 (already held)
    or ESTALE, never v2's bytes."""
    stub.create_bucket("dmix")
    n = 16 * MIB
    v1, v2 = content_for("m1", n), content_for("m2", n)
    stub.put("dmix", "obj.bin", v1)
    m = mount("dmix", "", "--part-size", "1M", endpoint=stub.url)
    ch = fdev.Channel(m.path)
    try:
        r = ch.region(n)
        with open(m.p("obj.bin"), "rb", buffering=0) as f:
            assert ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, MIB) == MIB
            stub.put("dmix", "obj.bin", v2)
            got = ch.lib.feedfs_read_host(f.fileno(), r.id, MIB, MIB, n - MIB)
        assert got in (n - MIB, -errno.ESTALE)
        if got == n - MIB:
            assert bytes(r.view) == v1
        else:
            assert bytes(r.view[:MIB]) == v1[:MIB]
    finally:
        ch.close()


@pytest.mark.san
@pytest.mark.tsan
def test_unregistered_while_in_use(mount, dbucket, s3server):
    """A region unregistered while a big read into it runs: the read either
    never found it (ENOENT) or finishes whole and right; after, ENOENT."""
    proxy = CountingProxy(s3server.url).start()
    try:
        proxy.delay_s = 0.05
        m = mount(dbucket, "", "--part-size", "1M", endpoint=proxy.url)
        n = SIZES["d/big.bin"]
        ch = fdev.Channel(m.path)
        r = ch.region(n)
        out = {}
        f = open(m.p("d/big.bin"), "rb")

        def reader():
            out["r"] = ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, n)

        t = threading.Thread(target=reader)
        t.start()
        time.sleep(0.2)     # most likely mid-copy; either outcome is checked
        other = fdev.Channel(m.path)
        assert ch.lib.feedfs_unregister(ch.ptr, r.id) == 0
        t.join(120)
        assert not t.is_alive()
        assert out["r"] in (n, -errno.ENOENT)
        if out["r"] == n:
            assert sha256(bytes(r.view)) == SHA["d/big.bin"]
        assert ch.lib.feedfs_read_host(f.fileno(), r.id, 0, 0, 10) == -errno.ENOENT
        f.close()
        other.close()
        ch.close()
        st = wait_stat(m, "regions", 0)
        assert st["unregistered"] == 1
    finally:
        proxy.stop()


@pytest.mark.san
def test_client_that_dies_holding_a_region(dmount):
    p = subprocess.Popen([lib_client(), "hold", dmount.path, str(4 * MIB)],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("held ")
        st = dev_stats(dmount)
        assert st["regions"] == 1 and st["region_bytes"] == 4 * MIB
        os.kill(p.pid, signal.SIGKILL)
        p.wait(30)
        st = wait_stat(dmount, "regions", 0)
        assert st["freed_at_close"] == 1 and st["region_bytes"] == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def batch_buf(region, extents, count=None, version=1):
    dest = struct.pack("<IIQQ", 1, 0, region, 0) + bytes(64)
    head = struct.pack("<IIII", version, BATCH_SIZE, 0,
                       len(extents) if count is None else count) + dest
    head += struct.pack("<qiI", 0, 0, 0) + bytes(16)
    assert len(head) == 136
    body = b"".join(struct.pack("<QQQq", o, n, d, 0) for o, n, d in extents)
    return bytearray(head + body + bytes(BATCH_SIZE - len(head) - len(body)))


@pytest.mark.san
def test_batch_ioctl_stops_at_the_first_failure(dmount):
    data = content_for("d/three.bin", SIZES["d/three.bin"])
    ch = fdev.Channel(dmount.path)
    try:
        r = ch.region(1 << 16)
        with open(dmount.p("d/three.bin"), "rb") as f:
            fd = f.fileno()
            ext = [(0, 1000, 0), (5000, 2000, 1000), (0, 10, 70000), (9, 9, 3000)]
            b = batch_buf(r.id, ext)
            fcntl.ioctl(fd, ioc(2, BATCH_SIZE), b, True)
            total, err, failed = struct.unpack_from("<qiI", b, 104)
            res = [struct.unpack_from("<q", b, 136 + 32 * i + 24)[0] for i in range(4)]
            assert res == [1000, 2000, -errno.EFAULT, -errno.ECANCELED]
            assert (total, err, failed) == (3000, errno.EFAULT, 2)
            assert bytes(r.view[:3000]) == data[:1000] + data[5000:7000]
            assert bytes(r.view[3000:3009]) == bytes(9)        # cancelled: not written
            # Malformed batches fail the ioctl itself.
            for bad in (batch_buf(r.id, [], count=0), batch_buf(r.id, [], count=257),
                        batch_buf(r.id, [(0, 1, 0)], version=3)):
                assert errno_of(lambda: fcntl.ioctl(fd, ioc(2, BATCH_SIZE), bad, True)) == \
                    errno.EINVAL
            assert errno_of(lambda: fcntl.ioctl(fd, ioc(2, BATCH_SIZE), batch_buf(999, [(0, 1, 0)]),
                                                True)) == errno.ENOENT
    finally:
        ch.close()
    st = dev_stats(dmount)
    assert st["direct_bytes"] == 3000 and st["batches"] == 1 and st["errors"] == 2


def test_another_uid_cannot_use_my_region(mount, dbucket):
    """Region ids are not capabilities alone: a caller of another uid that
    names root's region gets EPERM (the mount lets it open the file)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch uid")
    m = mount(dbucket, "", "--allow-other")
    ch = fdev.Channel(m.path)
    try:
        r = ch.region(8192)
        rfd, wfd = os.pipe()
        # Opened here (the test's tmp dirs are 0700), used by the child as
        # uid 65534: FUSE tells the daemon the uid of the ioctl's caller.
        f = open(m.p("d/small.bin"), "rb")
        pid = os.fork()
        if pid == 0:
            code = 99
            try:
                os.setgid(65534)
                os.setuid(65534)
                try:
                    ioctl_read(f.fileno(), r.id, 0, 0, 100)
                    code = 0
                except OSError as e:
                    code = e.errno
            finally:
                os.write(wfd, struct.pack("<i", code))
                os._exit(0)
        os.waitpid(pid, 0)
        got = struct.unpack("<i", os.read(rfd, 4))[0]
        assert got == errno.EPERM
        assert bytes(r.view[:100]) == bytes(100)                # nothing written
        assert ioctl_read(f.fileno(), r.id, 0, 0, 100) == 100      # the owner may
        assert bytes(r.view[:100]) == content_for("d/small.bin", 100)
        f.close()
    finally:
        ch.close()


# ---- libfeedfs in C -----------------------------------------------------------

def run_client(*args):
    cp = subprocess.run([lib_client()] + list(args), capture_output=True, timeout=120)
    return cp.returncode, cp.stdout, cp.stderr.decode(errors="replace")


@pytest.mark.san
@pytest.mark.tsan
def test_c_client_read_batch_threads(dmount):
    rc, out, err = run_client("read", dmount.p("d/big.bin"), "0", str(SIZES["d/big.bin"]))
    assert rc == 0, err
    assert sha256(out) == SHA["d/big.bin"]
    data = content_for("d/three.bin", SIZES["d/three.bin"])
    ext = [(0, 100), (MIB - 3, 2 * MIB), (5, 0), (len(data) - 50, 200), (17, 4096)]
    spec = ",".join("%d:%d" % e for e in ext)
    rc, out, err = run_client("batch", dmount.p("d/three.bin"), spec)
    assert rc == 0, err
    assert out == b"".join(data[o:o + ln] for o, ln in ext)
    # More extents than one ioctl carries (256): split by the library.
    many = [(i * 1000, 1000) for i in range(600)]
    rc, out, err = run_client("batch", dmount.p("d/three.bin"), ",".join("%d:%d" % e for e in many))
    assert rc == 0, err
    assert out == data[:600000]
    rc, out, err = run_client("threads", dmount.p("d/three.bin"), "8")
    assert rc == 0, err
    assert sha256(out) == SHA["d/three.bin"]
    # A file not on a feedfs mount: ENOENT from the channel open.
    rc, out, err = run_client("read", "/etc/hostname", "0", "1")
    assert rc == 3 and "error %d " % errno.ENOENT in err


def test_c_send_and_clear_order(dmount):
    if "order" not in feedfs_stats(dmount):
        pytest.skip("this mount has no loader-order prefetch")
    before = feedfs_stats(dmount)["order"]["orders"]
    rc, _, err = run_client("order", dmount.path, "d/small.bin", dmount.p("d/three.bin"))
    assert rc == 0, err
    st = feedfs_stats(dmount)["order"]
    assert st["orders"] == before + 1 and st["paths"] == 2
    rc, _, err = run_client("order", dmount.path, "../x")
    assert rc == 3 and "error %d " % errno.EINVAL in err
    # Two ranks' streams: each its own order; clearing one leaves the other.
    for r, k in ((0, "d/small.bin"), (1, "d/three.bin")):
        rc, _, err = run_client("order-stream", dmount.path, "rank%d" % r, k)
        assert rc == 0, err
    st = feedfs_stats(dmount)["order"]
    assert st["streams"] == 3 and st["paths"] == 4, st
    rc, _, err = run_client("order-stream", dmount.path, "no/slash", "d/small.bin")
    assert rc == 3 and "error %d " % errno.EINVAL in err
    rc, _, err = run_client("clear", dmount.path, "rank0")
    assert rc == 0, err
    st = feedfs_stats(dmount)["order"]
    assert st["streams"] == 2 and st["paths"] == 3, st
    rc, _, err = run_client("clear", dmount.path)
    assert rc == 0, err
    assert feedfs_stats(dmount)["order"]["paths"] == 0


# ---- python/feedfs --------------------------------------------------------------

def test_python_read_into(dmount, tmp_path):
    k, n = "d/three.bin", SIZES["d/three.bin"]
    data = content_for(k, n)
    b = bytearray(n)
    assert feedfs.read_into(dmount.p(k), b) == n and bytes(b) == data
    b = bytearray(1000)
    assert feedfs.read_into(dmount.p(k), b, offset=n - 10) == 10 and bytes(b[:10]) == data[-10:]
    assert feedfs.read_into(dmount.p(k), b, offset=n + 5) == 0
    with pytest.raises(ValueError):
        feedfs.read_into(dmount.p(k), bytearray(10), length=11)
    with pytest.raises(ValueError):
        feedfs.read_into(dmount.p(k), b"readonly")
    # A region-backed buffer: the daemon's copy is the only one.
    before = dev_stats(dmount)["direct_bytes"]
    v = feedfs.buffer(n, dmount.path)
    assert feedfs.read_into(dmount.p(k), v) == n and sha256(bytes(v)) == SHA[k]
    assert dev_stats(dmount)["direct_bytes"] == before + n
    # Not on a feedfs mount: a plain read.
    p = tmp_path / "plain.bin"
    p.write_bytes(b"plain bytes")
    b = bytearray(5)
    assert feedfs.read_into(str(p), b, offset=6) == 5 and bytes(b) == b"bytes"
    np = pytest.importorskip("numpy")
    a = np.zeros(n, dtype=np.uint8)
    assert feedfs.read_into(dmount.p(k), a) == n and a.tobytes() == data
    torch = pytest.importorskip("torch")
    t = torch.zeros(n // 4, dtype=torch.int32)
    assert feedfs.read_into(dmount.p(k), t) == (n // 4) * 4
    assert t.numpy().tobytes() == data[:(n // 4) * 4]


def test_python_batch_and_no_device(dmount):
    torch = pytest.importorskip("torch")
    keys = ["d/small.bin", "d/empty.bin", "d/three.bin"]
    t, sizes = feedfs.collate([dmount.p(k) for k in keys])
    assert sizes == [SIZES[k] for k in keys]
    assert t.dtype == torch.uint8 and t.numel() == sum(sizes)
    assert bytes(t.numpy()) == b"".join(content_for(k, SIZES[k]) for k in keys)
    # Batches reuse regions: after the first batch's tensor is gone, the
    # next batch of the same size takes its region (one registration).
    reg0 = dev_stats(dmount)["registered"]
    del t
    for _ in range(3):
        t, _ = feedfs.collate([dmount.p(k) for k in keys])
        assert bytes(t.numpy()) == b"".join(content_for(k, SIZES[k]) for k in keys)
        del t
    assert dev_stats(dmount)["registered"] == reg0
    ds = feedfs.FileDataset([dmount.p(k) for k in keys])
    dl = torch.utils.data.DataLoader(ds, batch_size=2, collate_fn=feedfs.collate)
    got = [bytes(b.numpy()) for b, _ in dl]
    assert b"".join(got) == b"".join(content_for(k, SIZES[k]) for k in keys)
    if not feedfs.gpu_available():
        with pytest.raises(feedfs.NoDeviceError) as ei:
            feedfs.read_to_device(dmount.p("d/small.bin"), torch.zeros(10))
        assert "CUDA" in str(ei.value) or "cuda" in str(ei.value)
        assert isinstance(ei.value, RuntimeError)


def test_python_read_into_across_a_remount(mount, mounter, dbucket):
    """The process keeps a channel and a staging region per mount: after the
    daemon is replaced (unmount, mount again on the same path) both are
    stale, and read_into opens a new channel instead of failing."""
    k, n = "d/three.bin", SIZES["d/three.bin"]
    m = mount(dbucket)
    b = bytearray(n)
    assert feedfs.read_into(m.p(k), b) == n and sha256(bytes(b)) == SHA[k]
    path = m.path
    assert mounter.unmount(m) == []
    m2 = mount(dbucket, mnt=path)
    b = bytearray(n)
    assert feedfs.read_into(m2.p(k), b) == n and sha256(bytes(b)) == SHA[k]
    st = dev_stats(m2)
    assert st["direct_bytes"] == n and st["channels"] == 1
