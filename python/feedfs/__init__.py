"""feedfs — talk to a running feedfs mount from Python (standard library only).

feedfs mounts an S3 bucket read-only (FUSE). This package makes training
loops read it fast: it tells the mount the order in which the loader will
open files, so the daemon fetches them ahead of the readers, and it reads
samples and whole batches. `import feedfs` imports neither torch nor paddle.

  feedfs.torch.FolderDataset(root, transform=None)    items (sample, class_index),
                                  classes as torchvision's ImageFolder
  feedfs.torch.ListDataset(paths, labels=None, transform=None)   the same from a
                                  list; ListDataset.from_file(label_file)
  feedfs.torch.OrderedSampler(sampler)      sampler= of a DataLoader: each epoch's
                                  order goes to the mount (paths from the dataset)
  feedfs.torch.OrderedBatchSampler(batch_sampler)   the same for batch samplers;
                                  feedfs.paddle has it for paddle.io, no paddle import
  send_order(mountpoint, paths), clear_order(mountpoint), stats(mountpoint)
                                  the control socket by hand
  read_into, read_to_device, load_batch, collate, FileDataset
                                  the device-feed path (docs/DEVICE.md)
  __version__                     the daemon's version (feedfs --version)

Typed (py.typed). docs/PYTHON.md in the feedfs source tree has one complete
example per framework (PyTorch, a Paddle batch sampler, plain Python), what
resuming (state_dict) and Lightning need, and the errors.

    import feedfs.torch
    from torch.utils.data import DataLoader, RandomSampler
    ds = feedfs.torch.FolderDataset("/mnt/data/train", transform=decode)
    loader = DataLoader(ds, batch_size=256, num_workers=8,
                        sampler=feedfs.torch.OrderedSampler(RandomSampler(ds)))

DESIGN
Every feedfs mount has a control socket (include/feedfs/ctl.h): a unix stream
socket at ctl_socket_path(mount point), only the daemon's uid may connect.
Requests are one line, "VERB ARGS\\n"; replies are "OK ...\\n" or
"ERR <errno>\\n". This module finds that socket the way the C client does
(src/cli/mounts.c, src/ctl/ctl.c) and speaks two verbs:

  O <count> <nbytes>[ <stream>]\\n + payload
                                   the loader's order: count paths relative
                                   to the mount root, each ended by "\\n";
                                   it replaces the order of the same stream
                                   (one per rank of a distributed loader;
                                   none: the default stream). "O 0 0\\n"
                                   clears every order, "O 0 0 <stream>\\n"
                                   one. Reply "OK <count>\\n".
  S json\\n                         the mount's counters. Reply "OK <n>\\n" and
                                   n bytes of JSON.

One connection per call, opened and closed inside it, so the helpers are safe
to call from any thread or process. Paths are checked here with the daemon's
own rules before anything is sent, so a bad path is a ValueError naming it,
not a bare "ERR 22" from the daemon. The sampler wrappers are in feedfs.order
(feedfs.torch and feedfs.paddle give them their frameworks' names), the
datasets in feedfs.datasets; each is imported on first use (`feedfs.torch`),
so `import feedfs` never imports torch. feedfs.device (read_into, read_to_device, ...: the
device-feed path over libfeedfs, docs/DEVICE.md) is re-exported here; it
imports only ctypes until a tensor is seen.
"""
from __future__ import annotations

import errno
import json
import os
import socket
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ._version import __version__

# What the helpers accept as a path, and as a stream name.
StrPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
Stream = Union[str, bytes, None]

__all__ = ["__version__", "StrPath", "Stream", "control_socket", "mount_point", "send_order", "clear_order", "stats",
           "ORDER_MAX_PATHS", "ORDER_MAX_BYTES", "STREAM_MAX",
           # the device-feed path (feedfs.device, docs/DEVICE.md)
           "NoDeviceError", "read_into", "read_to_device", "gpu_available", "buffer",
           "load_batch", "collate", "FileDataset"]

# The daemon's bounds on one order (the O verb): over either it answers
# "ERR 7" (E2BIG) and closes the connection.
ORDER_MAX_PATHS = 1 << 22
ORDER_MAX_BYTES = 512 << 20
# A stream name: 1 to STREAM_MAX bytes of [A-Za-z0-9._-].
STREAM_MAX = 64
_STREAM_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

MOUNTINFO = "/proc/self/mountinfo"
FSTYPE = "fuse.feedfs"
TIMEOUT_S = 30.0
_REPLY_LINE_MAX = 256
_STATS_REPLY_MAX = 16 << 20     # what `feedfs stats` accepts, too

_FNV1A64_INIT = 0xcbf29ce484222325
_FNV1A64_PRIME = 0x100000001b3


def _fnv1a64(data: bytes, h: int = _FNV1A64_INIT) -> int:
    """FNV-1a 64 of bytes, as util_fnv1a64 (src/util/hash.c)."""
    for b in data:
        h = ((h ^ b) * _FNV1A64_PRIME) & 0xffffffffffffffff
    return h


def _unescape_octal(field: bytes) -> bytes:
    """mountinfo writes ' ', '\\t', '\\n' and '\\\\' as \\ooo; undo that (bytes)."""
    out = bytearray()
    i, n = 0, len(field)
    while i < n:
        c = field[i:i + 4]
        if (len(c) == 4 and c[0] == 0x5c and 0x30 <= c[1] <= 0x33 and 0x30 <= c[2] <= 0x37
                and 0x30 <= c[3] <= 0x37):
            out.append((c[1] - 0x30) * 64 + (c[2] - 0x30) * 8 + (c[3] - 0x30))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return bytes(out)


def _feedfs_mounts(mountinfo: str = MOUNTINFO) -> List[bytes]:
    """The mount points (bytes, unescaped) of every fuse.feedfs line of mountinfo."""
    out = []
    with open(mountinfo, "rb") as f:
        for line in f:
            # id parent major:minor root MOUNTPOINT opts [optional...] - FSTYPE ...
            fields = line.split()
            if len(fields) < 5 or b"-" not in fields[5:]:
                continue
            sep = fields.index(b"-", 5)
            if sep + 1 < len(fields) and fields[sep + 1] == FSTYPE.encode():
                out.append(_unescape_octal(fields[4]))
    return out


def _longest_mount(abs_path: bytes, mounts: Iterable[bytes]) -> Optional[bytes]:
    """The longest of mounts (bytes) that is abs_path or a directory above it; None if none."""
    best = None
    for mp in mounts:
        pre = b"" if mp == b"/" else mp
        if abs_path == mp or abs_path.startswith(pre + b"/"):
            if best is None or len(mp) > len(best):
                best = mp
    return best


def mount_point(path: StrPath, mountinfo: str = MOUNTINFO) -> str:
    """The mount point (str) of the feedfs mount that holds path.

    path may be the mount point or anything under it; it is resolved with
    os.path.realpath first. The answer is the longest fuse.feedfs mount point
    in /proc/self/mountinfo that contains it, with mountinfo's \\ooo escapes
    undone. Raises OSError(ENOENT) when path is on no feedfs mount."""
    abs_path = os.fsencode(os.path.realpath(path))
    mp = _longest_mount(abs_path, _feedfs_mounts(mountinfo))
    if mp is None:
        raise OSError(errno.ENOENT, "%s is not a feedfs mount" % os.fsdecode(path))
    return os.fsdecode(mp)


def _shown(path: StrPath) -> str:
    """path as a message shows it (bytes decoded as the file system does)."""
    return os.fsdecode(path)


def _runtime_dir() -> str:
    """Where the daemon keeps its sockets (runtime_dir in src/ctl/ctl.c)."""
    if os.geteuid() == 0:
        return "/run/feedfs"
    x = os.environ.get("XDG_RUNTIME_DIR", "")
    if x.startswith("/"):
        return x + "/feedfs"
    return "/tmp/feedfs-%d" % os.geteuid()


def _socket_for_mount(mp: str) -> str:
    """ctl_socket_path(mp): "<runtime dir>/ctl-%016x.sock" of FNV-1a-64(mp)."""
    return "%s/ctl-%016x.sock" % (_runtime_dir(), _fnv1a64(os.fsencode(mp)))


def control_socket(path: StrPath) -> str:
    """The control socket path (str) of the feedfs mount holding path.

    The mount point is found as mount_point() does; the socket is
    "ctl-<16 hex digits>.sock", the digits the FNV-1a-64 of the mount point's
    bytes, in /run/feedfs when the euid is 0, else in $XDG_RUNTIME_DIR/feedfs
    when that is absolute, else in /tmp/feedfs-<uid>: the daemon's own rule.
    Only the daemon's uid may connect to it. Raises OSError(ENOENT) when path
    is on no feedfs mount."""
    return _socket_for_mount(mount_point(path))


# ---- paths ------------------------------------------------------------------

def _check_rel(rel: bytes, shown: object) -> None:
    """Refuse what the daemon refuses (ERR 22): the message names the path."""
    # The common case in a few substring scans (an order may hold millions):
    # no "", "." or ".." segment can hide in a path that passes them.
    if (rel and rel[0] not in b"/." and rel[-1] != 0x2f and b"/." not in rel and b"//" not in rel
            and b"\0" not in rel and b"\n" not in rel):
        return
    if not rel:
        raise ValueError("feedfs order: empty path (%r)" % (shown,))
    if b"\0" in rel:
        raise ValueError("feedfs order: path %r holds a NUL byte" % (shown,))
    if b"\n" in rel:
        raise ValueError("feedfs order: path %r holds a newline" % (shown,))
    if rel.startswith(b"/"):
        raise ValueError("feedfs order: path %r is absolute but not under the mount" % (shown,))
    for seg in rel.split(b"/"):
        if seg == b"..":
            raise ValueError("feedfs order: path %r has a '..' segment (it could leave the mount)"
                             % (shown,))
        if seg in (b"", b"."):
            raise ValueError("feedfs order: path %r has an empty or '.' segment" % (shown,))


def _roots(mountpoint: StrPath) -> List[bytes]:
    """The prefixes an absolute path of this mount may start with (bytes, no
    trailing '/' unless "/"): the mount point as mountinfo has it, and the
    caller's spelling of it when that is the mount root by another name (a
    symlink). Absolute paths are matched as strings, never resolved: resolving
    would look every name up through the mount, the cost the order saves."""
    mp = mount_point(mountpoint)
    roots = [os.fsencode(mp)]
    given = os.fsencode(os.path.abspath(mountpoint))
    if given not in roots and os.path.realpath(mountpoint) == os.path.realpath(mp):
        roots.append(given)
    return roots


def _relative(p: StrPath, roots: Sequence[bytes]) -> bytes:
    """One path of an order as the bytes sent (mount-relative, no newline)."""
    b = os.fsencode(p)
    if b.startswith(b"/"):
        for r in roots:
            pre = b"" if r == b"/" else r
            if b.startswith(pre + b"/"):
                rel = b[len(pre) + 1:]
                _check_rel(rel, p)
                return rel
        raise ValueError("feedfs order: %r is not under the mount point %s"
                         % (p, os.fsdecode(roots[0])))
    _check_rel(b, p)
    return b


def encode_paths(mountpoint: StrPath, paths: Iterable[StrPath]) -> List[bytes]:
    """paths (str, bytes or os.PathLike; absolute under the mount or relative
    to its root) -> list of bytes, each mount-relative and ended by "\\n", in
    the same order. Raises ValueError on the first path the daemon would
    refuse. The samplers use it once and join the result every epoch."""
    roots = _roots(mountpoint)
    return [_relative(p, roots) + b"\n" for p in paths]


# ---- the socket -------------------------------------------------------------

def _connect(mountpoint: StrPath, timeout: float) -> socket.socket:
    path = control_socket(mountpoint)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except OSError as e:
        s.close()
        raise OSError(e.errno, "cannot reach the feedfs daemon of %s at %s: %s (is it yours? the "
                      "socket is its uid's only)" % (_shown(mountpoint), path, e.strerror)) from e
    return s


def _read_line(s: socket.socket, buf: bytes) -> "tuple[str, bytes]":
    """One reply line (str, without "\\n") and what followed it (bytes)."""
    while b"\n" not in buf:
        if len(buf) > _REPLY_LINE_MAX:
            raise OSError(errno.EPROTO, "feedfs daemon: reply line too long")
        got = s.recv(4096)
        if not got:
            raise OSError(errno.EPROTO, "feedfs daemon closed the connection without a reply")
        buf += got
    line, _, rest = buf.partition(b"\n")
    return line.decode("ascii", "replace"), rest


def _reply_ok(line: str, what: str, mountpoint: StrPath) -> str:
    """The text after "OK " of a reply, or the OSError the reply means."""
    if line.startswith("OK ") or line == "OK":
        return line[3:]
    if line.startswith("ERR "):
        try:
            e = int(line[4:])
        except ValueError:
            e = errno.EPROTO
        raise OSError(e, "feedfs daemon of %s refused %s: %s" % (_shown(mountpoint), what, os.strerror(e)))
    raise OSError(errno.EPROTO, "feedfs daemon of %s answered %r to %s" % (_shown(mountpoint), line, what))


def _stream_bytes(stream: Stream) -> bytes:
    """The stream name as sent (b"" for the default stream), or ValueError."""
    if stream is None:
        return b""
    b = stream.encode() if isinstance(stream, str) else bytes(stream)
    if not 1 <= len(b) <= STREAM_MAX or not set(b) <= _STREAM_CHARS:
        raise ValueError("feedfs: stream name %r: 1 to %d of [A-Za-z0-9._-]" % (stream, STREAM_MAX))
    return b


def _send_order_payload(mountpoint: StrPath, lines: Sequence[bytes], timeout: float = TIMEOUT_S,
                        stream: Stream = None) -> int:
    """Send lines (bytes each ended by "\\n", already checked) as one order."""
    sb = _stream_bytes(stream)
    count = len(lines)
    payload = b"".join(lines)
    if count > ORDER_MAX_PATHS or len(payload) > ORDER_MAX_BYTES:
        raise OSError(errno.E2BIG, "feedfs order: %d paths, %d bytes: over the daemon's bounds "
                      "(%d paths, %d bytes)" % (count, len(payload), ORDER_MAX_PATHS, ORDER_MAX_BYTES))
    with _connect(mountpoint, timeout) as s:
        s.sendall(b"O %d %d%s\n" % (count, len(payload), b" " + sb if sb else b""))
        try:
            if payload:
                s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass            # the daemon refused early and closed: its ERR line is still there
        line, _ = _read_line(s, b"")
    got = _reply_ok(line, "the order" if count else "clearing the order", mountpoint)
    try:
        return int(got)
    except ValueError:
        raise OSError(errno.EPROTO, "feedfs daemon of %s answered %r to the order"
                      % (_shown(mountpoint), line)) from None


def send_order(mountpoint: StrPath, paths: Iterable[StrPath], timeout: float = TIMEOUT_S,
               stream: Stream = None) -> int:
    """Tell the mount the order in which the loader will open paths; returns
    the number of paths the daemon accepted.

    mountpoint is the mount point or any path inside the mount (it is used to
    find the mount). Each path is absolute under the mount point, or relative
    to the mount root (not to the current directory); str, bytes or
    os.PathLike. What is sent, on one new connection, is exactly
    "O <count> <nbytes>\\n" then the count paths, mount-relative, each ended
    by "\\n" (nbytes bytes in all). The daemon answers "OK <count>\\n" as soon
    as it has stored the list (it resolves names in the background) and this
    order replaces the mount's previous one of the same stream. stream (None:
    the default stream) names the order, as " <stream>" after nbytes: the
    ranks of a distributed loader sharing one mount each send their own (e.g.
    "rank3"), and the daemon keeps each rank's window. An empty paths sends
    "O 0 0[ <stream>]\\n", which clears the stream's order (every order
    when stream is None).

    Raises ValueError, before anything is sent, for a path the daemon refuses
    (empty, NUL or newline in it, a "", "." or ".." segment, absolute but not
    under the mount); OSError(E2BIG) for more than ORDER_MAX_PATHS paths or
    ORDER_MAX_BYTES bytes; OSError(errno) for the daemon's "ERR <errno>"; and
    OSError when the mount or its daemon cannot be reached."""
    return _send_order_payload(mountpoint, encode_paths(mountpoint, paths), timeout, stream)


def clear_order(mountpoint: StrPath, timeout: float = TIMEOUT_S, stream: Stream = None) -> int:
    """Drop the mount's orders: sends "O 0 0\\n" (with stream: "O 0 0
    <stream>\\n", that stream's only); the daemon frees what it fetched ahead
    for them at once. Returns 0. Raises ValueError for a bad stream name and
    OSError as send_order."""
    return _send_order_payload(mountpoint, [], timeout, stream)


def stats(mountpoint: StrPath, timeout: float = TIMEOUT_S) -> Dict[str, Any]:
    """The mount's counters as a dict (what `feedfs stats --json` prints).

    Sends "S json\\n"; the daemon answers "OK <n>\\n" and n bytes of JSON.
    The order's counters are in the group "order" (orders, streams, paths,
    resolved, bytes, missing, fetched, hits, wasted, consumed) on a daemon
    that has them.
    Raises OSError for "ERR <errno>" or when the daemon cannot be reached."""
    with _connect(mountpoint, timeout) as s:
        s.sendall(b"S json\n")
        line, rest = _read_line(s, b"")
        got = _reply_ok(line, "the stats request", mountpoint)
        try:
            n = int(got)
        except ValueError:
            n = -1
        if not 0 <= n <= _STATS_REPLY_MAX:
            raise OSError(errno.EPROTO, "feedfs daemon of %s answered %r to the stats request"
                          % (_shown(mountpoint), line))
        while len(rest) < n:
            more = s.recv(min(1 << 20, n - len(rest)))
            if not more:
                raise OSError(errno.EPROTO, "feedfs daemon of %s closed the stats reply after %d of "
                              "%d bytes" % (_shown(mountpoint), len(rest), n))
            rest += more
    counters: Dict[str, Any] = json.loads(rest[:n].decode("utf-8"))
    return counters


def __getattr__(name: str) -> Any:
    # `import feedfs; feedfs.torch.OrderedSampler(...)` without importing
    # torch (or feedfs.torch) on `import feedfs`.
    if name in ("torch", "paddle", "order", "datasets"):
        import importlib
        return importlib.import_module(__name__ + "." + name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


from .device import (NoDeviceError, read_into, read_to_device, gpu_available,  # noqa: E402
                     buffer, load_batch, collate, FileDataset)
