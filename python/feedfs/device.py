"""feedfs.device — the device-feed path from Python (docs/DEVICE.md), ctypes
over libfeedfs (build/libfeedfs.so, or the installed libfeedfs.so.1).

DESIGN
The daemon copies a file's bytes, through its read path and cache, straight
into memory the caller shares with it: a region (a sealed memfd registered
over the mount's control socket) or, with CUDA in the daemon, device memory
named by a CUDA IPC handle. A process keeps one channel per mount (opened on
first use, reopened after fork) and, per thread, one staging region that
grows to the largest read asked. So:

  read_into(path, out)     out in a region from buffer(): one copy, by the
                           daemon. Any other writable buffer: the daemon
                           fills the staging region, then one memcpy here.
                           A CUDA tensor: read_to_device. Not on a feedfs
                           mount (or a daemon without the path): a plain read.
  read_to_device(path, t)  the ioctl into the tensor's CUDA allocation; when
                           the daemon has no CUDA (ENODEV), the caller is in
                           another PID namespace (EXDEV), or the tensor cannot
                           be exported (PyTorch expandable segments), the host
                           path instead: staging region -> tensor.copy_(). No
                           usable GPU in this process: NoDeviceError.
  load_batch / collate     many files into one region-backed tensor.

Channels and regions belong to the process that made them: a forked child
(a DataLoader worker) opens its own on first use and never speaks on its
parent's. A batch tensor that a worker process returns is copied by torch
into its own shared memory to cross processes; the one-copy path is for
loaders in the training process (threads, or num_workers=0).

Nothing here imports numpy, torch or paddle until a value of theirs is seen.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import mmap
import os
import threading
import weakref

import time
from typing import Any, Dict, Iterable, List, Literal, Optional, Sequence, Tuple, Union

from . import StrPath, _feedfs_mounts, _longest_mount, mount_point

__all__ = ["NoDeviceError", "read_into", "read_to_device", "gpu_available", "buffer",
           "load_batch", "collate", "FileDataset", "library", "library_path"]

IOCTL_VERSION = 1
DEST_REGION, DEST_CUDA_IPC = 1, 2
CAP_HOST, CAP_DEVICE, CAP_BATCH = 1, 2, 4


class NoDeviceError(RuntimeError):
    """No usable GPU or CUDA runtime for a device read; the message says why."""


class _Dest(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("flags", ctypes.c_uint32),
                ("region", ctypes.c_uint64), ("offset", ctypes.c_uint64),
                ("ipc_handle", ctypes.c_uint8 * 64)]


class _Extent(ctypes.Structure):
    _fields_ = [("file_offset", ctypes.c_uint64), ("length", ctypes.c_uint64),
                ("dest_offset", ctypes.c_uint64), ("result", ctypes.c_int64)]


class _Region(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("base", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("memfd", ctypes.c_int)]


_lib: Union[ctypes.CDLL, None, Literal[False]] = None
_lib_path: Optional[str] = None
_lib_lock = threading.Lock()


def _library_candidates() -> List[str]:
    """Where library() looks, in order (see there)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.environ.get("FEEDFS_LIB", ""),
            # the wheel of `make python-wheel` carries it next to this file
            os.path.join(here, "libfeedfs.so.1"),
            # `make install`: the package is in <prefix>/lib/python3*/dist-packages,
            # the library in <prefix>/lib (ld.so does not search /usr/local/lib
            # until ldconfig has run)
            os.path.join(here, "..", "..", "..", "libfeedfs.so.1")
            if os.path.basename(os.path.dirname(here)) in ("dist-packages", "site-packages") else "",
            # the source tree this package is in, after `make`
            os.path.join(here, "..", "..", "build", "libfeedfs.so"),
            "libfeedfs.so.1", ctypes.util.find_library("feedfs") or ""]


def library() -> Optional[ctypes.CDLL]:
    """The loaded libfeedfs (ctypes.CDLL), or None when it cannot be found:
    $FEEDFS_LIB, else libfeedfs.so.1 next to this module (the wheel that
    `make python-wheel` builds carries it), else <prefix>/lib/libfeedfs.so.1
    of a `make install`, else build/libfeedfs.so of the source tree this
    package is in, else libfeedfs.so.1 from the loader's path. The device
    reads take the plain path without it; library_path() says which file
    was loaded."""
    global _lib, _lib_path
    with _lib_lock:
        if _lib is not None:
            return _lib or None
        cands = _library_candidates()
        for c in cands:
            if not c or (os.sep in c and not os.path.exists(c)):
                continue
            try:
                lib = ctypes.CDLL(c)
            except OSError:
                continue
            _declare(lib)
            _lib, _lib_path = lib, c
            return lib
        _lib = False
        return None


def library_path() -> Optional[str]:
    """The file library() loaded (as it was named: a path, or "libfeedfs.so.1"
    for the loader's search), or None when none could be loaded."""
    library()
    return _lib_path


def _declare(lib: ctypes.CDLL) -> None:
    vp, u64, sz, ssz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_ssize_t
    lib.feedfs_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(vp)]
    lib.feedfs_open.restype = ctypes.c_int
    lib.feedfs_close.argtypes = [vp]
    lib.feedfs_close.restype = None
    lib.feedfs_region_new.argtypes = [vp, sz, ctypes.POINTER(_Region)]
    lib.feedfs_region_new.restype = ctypes.c_int
    lib.feedfs_region_free.argtypes = [vp, ctypes.POINTER(_Region)]
    lib.feedfs_region_free.restype = ctypes.c_int
    lib.feedfs_unregister.argtypes = [vp, u64]
    lib.feedfs_unregister.restype = ctypes.c_int
    lib.feedfs_read_host.argtypes = [ctypes.c_int, u64, u64, u64, sz]
    lib.feedfs_read_host.restype = ssz
    lib.feedfs_read_device.argtypes = [ctypes.c_int, ctypes.c_char_p, u64, u64, sz]
    lib.feedfs_read_device.restype = ssz
    lib.feedfs_read_batch.argtypes = [ctypes.c_int, ctypes.POINTER(_Dest),
                                      ctypes.POINTER(_Extent), sz]
    lib.feedfs_read_batch.restype = ssz
    lib.feedfs_send_order.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.POINTER(ctypes.c_char_p), sz]
    lib.feedfs_send_order.restype = ctypes.c_int
    lib.feedfs_clear_order.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.feedfs_clear_order.restype = ctypes.c_int


def _check(r: int, what: object) -> int:
    if r < 0:
        raise OSError(-r, "%s: %s" % (what, os.strerror(-r)))
    return r


# ---- channels and regions ---------------------------------------------------

class Region:
    """A registered region: .view is a writable memoryview of its bytes (it
    keeps the region alive), .address its address here, .id what the daemon
    calls it. Unregistered and unmapped when nothing refers to it."""

    def __init__(self, chan: Channel, size: int) -> None:
        self._chan = chan
        self._r = _Region()
        _check(chan.lib.feedfs_region_new(chan.ptr, size, ctypes.byref(self._r)), "region")
        self.id, self.size = int(self._r.id), size
        self.address = int(self._r.base or 0)
        self.pinned = False         # load_batch(pin=True) page-locked it

    @property
    def view(self) -> memoryview:
        arr = (ctypes.c_char * self.size).from_address(self.address)
        setattr(arr, "_owner", self)     # the memory lives while a view does
        return memoryview(arr).cast("B")

    def free(self) -> None:
        # In a forked child the channel's socket is the parent's: saying
        # anything on it would unregister the parent's region. The daemon
        # frees it when the parent's channel closes.
        if self._r.id and self._chan.ptr and self._chan.pid == os.getpid():
            self._chan.lib.feedfs_region_free(self._chan.ptr, ctypes.byref(self._r))
        self._r.id = 0

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:   # noqa: BLE001 -- interpreter shutdown
            pass


class Channel:
    """One mount's device channel (regions live as long as it does)."""

    def __init__(self, path: StrPath) -> None:
        lib = library()
        if lib is None:
            raise OSError(errno.ENOENT, "libfeedfs not found (build it: make; or set FEEDFS_LIB)")
        self.lib: ctypes.CDLL = lib
        p = ctypes.c_void_p()
        _check(self.lib.feedfs_open(os.fsencode(path), ctypes.byref(p)), "feedfs channel")
        self.ptr: Optional[ctypes.c_void_p] = p
        self.pid = os.getpid()

    def region(self, size: int) -> Region:
        return Region(self, size)

    def close(self) -> None:
        if self.ptr and self.pid == os.getpid():
            self.lib.feedfs_close(self.ptr)
        self.ptr = None


_chans: Dict[str, Union[Channel, Literal[False]]] = {}
_chans_lock = threading.Lock()
_tls = threading.local()


def _channel(mp: str) -> Optional[Channel]:
    """The process's channel to mount mp (None: this daemon has no device path)."""
    with _chans_lock:
        c = _chans.get(mp)
        if c is not None and (c is False or c.pid == os.getpid()):
            return c or None
        try:
            c = Channel(mp)
        except OSError as e:
            if e.errno not in (errno.EPROTO, errno.ENOENT, errno.ECONNREFUSED):
                raise
            c = False
        _chans[mp] = c
        return c or None


def _forget(mp: str) -> None:
    """Drop the cached channel of mp (its daemon went away or was replaced)."""
    with _chans_lock:
        c = _chans.pop(mp, None)
    if c:
        c.close()


_STALE_CHANNEL = (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ENOENT)


def _staging(chan: Channel, mp: str, size: int) -> Region:
    """This thread's staging region on mp, at least size bytes."""
    regs = getattr(_tls, "regs", None)
    if regs is None:
        regs = _tls.regs = {}
    r = regs.get(mp)
    if r is not None and (r._chan is not chan or r.size < size):
        r = None                    # freed when its last view goes
    if r is None:
        r = regs[mp] = chan.region(max(size, 1 << 20))
    return r


_buffers: "weakref.WeakValueDictionary[int, Region]" = weakref.WeakValueDictionary()     # address -> Region of buffer()


def buffer(nbytes: int, path: StrPath) -> memoryview:
    """A writable memoryview of nbytes in a region registered with the mount
    holding path: read_into() into it is the daemon's one copy."""
    chan = _channel(mount_point(path))
    if chan is None:
        return memoryview(bytearray(nbytes))
    r = chan.region(nbytes)
    _buffers[r.address] = r
    return r.view


# Batches reuse regions: registering one costs a control-socket round trip,
# and a fresh mapping costs the daemon a page fault per 4 KiB at its first
# copy. A batch's region goes back to the pool when the last view of it does.
_POOL_MAX = 8
_pool: List[Region] = []
_pool_lock = threading.RLock()      # RLock: a lease may be collected while held


class _Lease:
    """Keeps a pooled region out of the pool while a view of it lives."""
    __slots__ = ("region",)

    def __init__(self, region: Region) -> None:
        self.region = region

    def __del__(self) -> None:
        r = self.region
        try:
            with _pool_lock:
                if r._chan.ptr and r._chan.pid == os.getpid() and len(_pool) < _POOL_MAX:
                    _pool.append(r)
        except Exception:   # noqa: BLE001 -- interpreter shutdown
            pass


def _pooled(nbytes: int, chan: Channel) -> Tuple[memoryview, Region]:
    """(memoryview of nbytes, Region) from the pool or a new region."""
    best = None
    with _pool_lock:
        for r in _pool:
            if r._chan is chan and nbytes <= r.size <= 2 * nbytes + (1 << 20) and (
                    best is None or r.size < best.size):
                best = r
        if best is not None:
            _pool.remove(best)
    if best is None:
        best = chan.region(max(nbytes, 1))
        _buffers[best.address] = best
    arr = (ctypes.c_char * nbytes).from_address(best.address)
    setattr(arr, "_owner", _Lease(best))
    return memoryview(arr).cast("B"), best


def _in_region(addr: int, n: int) -> Tuple[Optional[Region], int]:
    for a, r in list(_buffers.items()):
        if r._chan.pid == os.getpid() and a <= addr and addr + n <= a + r.size:
            return r, addr - a
    return None, 0


# ---- buffers of many kinds --------------------------------------------------

def _is_cuda_tensor(x: Any) -> bool:
    return getattr(x, "is_cuda", False) is True or (
        type(x).__module__.startswith("paddle") and "gpu" in str(getattr(x, "place", "")).lower())


def _writable_view(out: Any) -> Optional[memoryview]:
    """A writable byte memoryview over out's memory (bytes-like, numpy array,
    torch CPU tensor), or None with a paddle tensor (handled by copying)."""
    mod = type(out).__module__
    if mod.startswith("torch"):
        if not out.is_contiguous():
            raise ValueError("read_into needs a contiguous tensor")
        return memoryview(out.view(-1).view(__import__("torch").uint8).numpy()).cast("B")
    if mod.startswith("paddle"):
        return None                 # its numpy() is a copy: read_into copies back
    m = memoryview(out)
    if m.readonly:
        raise ValueError("read_into needs a writable buffer")
    return m.cast("B") if m.format != "B" or m.ndim != 1 else m


def _addr(view: memoryview) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(view)) if len(view) else 0


def _plain_read(path: StrPath, view: memoryview, offset: int, length: int) -> int:
    with open(path, "rb", buffering=0) as f:
        done = 0
        while done < length:
            n = os.preadv(f.fileno(), [view[done:length]], offset + done)
            if n == 0:
                break
            done += n
        return done


_MOUNTS_TTL_S = 1.0
_mounts: Tuple[float, List[bytes]] = (0.0, [])


def _mount_of(path: StrPath) -> Optional[str]:
    """The feedfs mount point (str) holding path, or None. A path found on a
    mount is answered from a list at most a second old: a batch of many small
    files would otherwise parse /proc/self/mountinfo once per file. (A file
    that is no longer on a feedfs mount answers the ioctl ENOTTY, and the read
    takes the plain path.)"""
    global _mounts
    now = time.monotonic()
    when, mounts = _mounts
    if now - when <= _MOUNTS_TTL_S:
        # A path spelled under a mount point is on it (a feedfs tree holds no
        # symlinks), which saves the realpath's lstat per component.
        mp = _longest_mount(os.fsencode(os.path.abspath(path)), mounts)
        if mp is not None:
            return os.fsdecode(mp)
    real = os.fsencode(os.path.realpath(path))
    mp = _longest_mount(real, mounts) if now - when <= _MOUNTS_TTL_S else None
    if mp is None:                  # not known yet: a mount made since is found at once
        mounts = _feedfs_mounts()
        _mounts = (now, mounts)
        mp = _longest_mount(real, mounts)
    return os.fsdecode(mp) if mp is not None else None


def _host_read(path: StrPath, view: memoryview, offset: int, length: int) -> int:
    """Fill view[:length] from path at offset through the region path."""
    if length == 0:
        return 0
    mp = _mount_of(path)
    chan = _channel(mp) if mp is not None else None
    if mp is None or chan is None:
        return _plain_read(path, view, offset, length)
    reg, roff = _in_region(_addr(view), length)
    fd = os.open(path, os.O_RDONLY)
    try:
        if reg is not None:
            n = int(chan.lib.feedfs_read_host(fd, reg.id, roff, offset, length))
            if n == -errno.ENOTTY:      # not (or no longer) a feedfs file
                return _plain_read(path, view, offset, length)
            return _check(n, path)
        for attempt in (0, 1):
            try:
                st = _staging(chan, mp, length)
                n = chan.lib.feedfs_read_host(fd, st.id, 0, offset, length)
            except OSError as e:
                n = -e.errno
            # A remounted daemon knows neither our channel nor its regions:
            # open a new channel once, then give up on the region path.
            if n == -errno.ENOTTY:
                return _plain_read(path, view, offset, length)
            if n >= 0 or attempt or -n not in _STALE_CHANNEL:
                break
            _forget(mp)
            chan = _channel(mp)
            if chan is None:
                return _plain_read(path, view, offset, length)
        n = _check(n, path)
        view[:n] = st.view[:n]
        return n
    finally:
        os.close(fd)


def read_into(path: StrPath, out: Any, offset: int = 0, length: Optional[int] = None) -> int:
    """Fill out (bytes-like, numpy array, torch/paddle CPU or CUDA tensor)
    with the bytes of path at offset; length defaults to out's size and may
    not exceed it (ValueError). Returns the bytes read (0 at or past end of
    file)."""
    if offset < 0:
        raise ValueError("offset must be >= 0")
    if _is_cuda_tensor(out):
        return read_to_device(path, out, offset, length)
    view = _writable_view(out)
    if view is None:                    # paddle CPU tensor (untested here)
        arr = out.numpy()
        n = read_into(path, arr, offset, length)
        out.set_value(arr)
        return n
    size = len(view)
    if length is None:
        length = size
    if length < 0 or length > size:
        raise ValueError("length %d is larger than the buffer (%d bytes)" % (length, size))
    return _host_read(path, view, offset, length)


# ---- the device path --------------------------------------------------------

_cudart: Union[ctypes.CDLL, None, Literal[False]] = None


def _cuda_runtime() -> Optional[ctypes.CDLL]:
    global _cudart
    if _cudart is None:
        _cudart = False
        for name in (os.environ.get("FEEDFS_CUDART", ""), "libcudart.so", "libcudart.so.13",
                     "libcudart.so.12"):
            if not name:
                continue
            try:
                _cudart = ctypes.CDLL(name)
                break
            except OSError:
                continue
    return _cudart or None


def _no_gpu_reason() -> Optional[str]:
    """None when this process sees a CUDA device, else why not."""
    try:
        import torch
        if torch.cuda.is_available():
            return None
        return "torch sees no CUDA device (torch %s)" % torch.__version__
    except ImportError:
        pass
    rt = _cuda_runtime()
    if rt is None:
        return "no CUDA runtime (libcudart) could be loaded"
    n = ctypes.c_int(0)
    e = rt.cudaGetDeviceCount(ctypes.byref(n))
    if e != 0 or n.value <= 0:
        return "CUDA runtime loaded but no device (cudaGetDeviceCount error %d, %d devices)" % (
            e, n.value)
    return None


def gpu_available() -> bool:
    """True when this process can use a CUDA device (torch, else libcudart)."""
    return _no_gpu_reason() is None


_cu: Any = None  # libcuda.so.1 once loaded; False when this process has none


def _driver() -> Any:
    """The CUDA driver library, or None. Only the driver is asked (it is where
    a GPU is): a second libcudart would be a second runtime in the process."""
    global _cu
    if _cu is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64),
                                                    ctypes.POINTER(ctypes.c_size_t),
                                                    ctypes.c_uint64]
            lib.cuIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_uint64]
            _cu = lib
        except (OSError, AttributeError):
            _cu = False
    return _cu or None


def _ipc_handle(t: Any) -> Optional[Tuple[bytes, int]]:
    """(64-byte handle, byte offset) of a torch CUDA tensor's allocation, or
    None when it cannot be exported (expandable segments export only file
    descriptors; other allocators none at all).

    The driver is asked first: the allocation that holds the tensor's first
    byte (cuMemGetAddressRange), and its legacy IPC handle; memory from the
    virtual memory API (expandable segments) has none. Where the driver calls
    fail (no current context on this thread), torch's own export is parsed:
    torch < 2.2 gives the 64 bytes alone, later versions prefix them with a
    version byte and the kind b"c" (b"e" for an expandable segment)."""
    cu = _driver()
    if cu is not None:
        ptr = t.data_ptr()
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        h = (ctypes.c_uint8 * 64)()
        if cu.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ptr) == 0:
            if cu.cuIpcGetMemHandle(h, base.value) == 0:
                return bytes(h), ptr - base.value
            return None
    try:
        # torch >= 2.0: untyped_storage(); 1.x: the typed storage's own.
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        share = st._share_cuda_()
    except Exception:       # noqa: BLE001 -- torch raises RuntimeError, version-dependent
        return None
    # (device, handle, storage size, storage offset bytes, ...)
    handle, off = share[1], share[3]
    if not isinstance(handle, (bytes, bytearray)):
        return None
    if len(handle) > 64 and handle[-65:-64] == b"c":
        handle = handle[-64:]
    if len(handle) != 64:
        return None
    return bytes(handle), off + t.storage_offset() * t.element_size()


def read_to_device(path: StrPath, dst: Any, offset: int = 0, length: Optional[int] = None) -> int:
    """Fill a CUDA tensor (torch; paddle through the host path) with the
    bytes of path at offset. Returns the bytes read. Raises NoDeviceError
    when this process has no usable GPU."""
    why = _no_gpu_reason()
    if why is not None:
        raise NoDeviceError("read_to_device: " + why)
    nbytes = dst.numel() * dst.element_size() if hasattr(dst, "numel") else None
    if nbytes is None:
        raise TypeError("read_to_device needs a CUDA tensor")
    if length is None:
        length = nbytes
    if length < 0 or length > nbytes:
        raise ValueError("length %d is larger than the tensor (%d bytes)" % (length, nbytes))
    mp = _mount_of(path)
    chan = _channel(mp) if mp else None
    if chan is not None and type(dst).__module__.startswith("torch") and dst.is_contiguous():
        h = _ipc_handle(dst)
        if h is not None:
            fd = os.open(path, os.O_RDONLY)
            try:
                r = int(chan.lib.feedfs_read_device(fd, h[0], h[1], offset, length))
            finally:
                os.close(fd)
            if r >= 0:
                return r
            if -r not in (errno.ENODEV, errno.EXDEV, errno.EINVAL, errno.EFAULT):
                _check(r, path)
    # The host path: staging region (or a plain read), then one copy to the GPU.
    import torch
    host = torch.empty(length, dtype=torch.uint8)
    n = read_into(path, host, offset, length)
    flat = dst.view(-1).view(torch.uint8) if type(dst).__module__.startswith("torch") else None
    if flat is None:
        import paddle
        dst.set_value(paddle.to_tensor(host.numpy()[:n]))
        return n
    flat[:n].copy_(host[:n])
    return n


# ---- batches ----------------------------------------------------------------

def _fill_batch(paths: Sequence[StrPath]) -> Tuple[memoryview, List[int]]:
    """(view of all bytes of paths back to back, sizes), one READ ioctl per
    file into one pooled region when they are on a feedfs mount, else (or
    for a file on another mount) plain reads into memory of our own."""
    fds = []
    try:
        for p in paths:
            fds.append(os.open(p, os.O_RDONLY))
        sizes = [os.fstat(fd).st_size for fd in fds]
        total = sum(sizes)
        mp = _mount_of(paths[0]) if paths else None
        chan = _channel(mp) if mp is not None else None
        reg: Optional[Region] = None
        if chan is None:
            view = memoryview(bytearray(total))
        else:
            view, reg = _pooled(total, chan)
        at = 0
        for i, (p, fd, n) in enumerate(zip(paths, fds, sizes)):
            got = -1
            if chan is not None and reg is not None and n:
                got = int(chan.lib.feedfs_read_host(fd, reg.id, at, 0, n))
            if got < 0:
                if reg is not None and n and -got not in (errno.ENOTTY, errno.ENOENT):
                    _check(got, p)
                if mp is not None and reg is not None and got == -errno.ENOENT and mp == _mount_of(p):
                    _forget(mp)         # a remounted daemon: a new channel next batch
                got = _plain_read(p, view[at:at + n], 0, n) if n else 0
            sizes[i] = got              # short only if the file shrank since fstat
            at += n
        return view, sizes
    finally:
        for fd in fds:
            os.close(fd)


def load_batch(paths: Iterable[StrPath], device: Any = None, pin: bool = False,
               framework: str = "torch") -> Tuple[Any, List[int]]:
    """The bytes of paths, back to back, in one uint8 torch tensor, and their
    sizes. device=None: a CPU tensor over one region (the daemon's copy is
    the only one; regions are pooled and reused once a batch's tensor is
    gone; pin=True page-locks the region, once, for fast .cuda());
    device="cuda": one device tensor, filled by read_to_device (or its host
    fallback). framework="paddle": a paddle tensor of the same bytes
    (paddle.to_tensor copies them; on device= when given)."""
    paths = list(paths)
    if framework not in ("torch", "paddle"):
        raise ValueError("framework must be 'torch' or 'paddle'")
    if framework == "torch" and device is not None and str(device).startswith("cuda"):
        import torch
        sizes = [os.stat(p).st_size for p in paths]
        out = torch.empty(sum(sizes), dtype=torch.uint8, device=device)
        at = 0
        for p, s in zip(paths, sizes):
            if s:
                read_to_device(p, out[at:at + s])
            at += s
        return out, sizes
    view, sizes = _fill_batch(paths)
    if framework == "paddle":
        import numpy as np
        import paddle
        arr = np.frombuffer(view, dtype=np.uint8)
        return paddle.to_tensor(arr, place=device) if device else paddle.to_tensor(arr), sizes
    import torch
    if not len(view):
        return torch.empty(0, dtype=torch.uint8), sizes
    t = torch.frombuffer(view, dtype=torch.uint8)
    if pin and torch.cuda.is_available():
        reg, _ = _in_region(t.data_ptr(), len(view))
        if reg is not None and not reg.pinned:
            torch.cuda.cudart().cudaHostRegister(reg.address, reg.size, 0)
            reg.pinned = True
    return t, sizes


def collate(batch: Iterable[StrPath]) -> Tuple[Any, List[int]]:
    """A DataLoader collate_fn for FileDataset: a list of paths -> (one uint8
    tensor of all their bytes, their sizes)."""
    return load_batch(list(batch))


class FileDataset:
    """A map-style dataset of paths (use with collate): item i is paths[i]."""

    def __init__(self, paths: Iterable[StrPath]) -> None:
        self.paths: List[StrPath] = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> StrPath:
        return self.paths[i]
