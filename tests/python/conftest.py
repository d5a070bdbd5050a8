"""Fixtures for the tests of python/feedfs: a fake control socket.

FakeCtl is a unix socket server in a temporary directory that speaks the
mount's control protocol (include/feedfs/ctl.h) as far as the helpers use it:
it reads one request line, for "O <count> <nbytes>" exactly nbytes more, keeps
the raw bytes of every request, and answers with what the test scripted (by
default "OK <count>" for O and a small JSON for "S json"). `fake_mount`
points feedfs's mount and socket lookup at it, so no FUSE mount is needed.
"""
import os
import socket
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# FEEDFS_TEST_INSTALLED=1 (make python-wheel-test): the package under test is
# the one installed in this interpreter's environment (the wheel in a venv),
# never the source tree's; otherwise (make python-test) it is python/.
INSTALLED = os.environ.get("FEEDFS_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import feedfs  # noqa: E402

if INSTALLED and os.path.realpath(feedfs.__file__).startswith(os.path.join(ROOT, "python") + "/"):
    raise RuntimeError("FEEDFS_TEST_INSTALLED=1 but feedfs was imported from the source tree (%s)"
                       % feedfs.__file__)


def _read_line(c):
    buf = b""
    while not buf.endswith(b"\n"):
        got = c.recv(1)
        if not got:
            return None
        buf += got
    return buf


def _read_exact(c, n):
    buf = b""
    while len(buf) < n:
        got = c.recv(min(65536, n - len(buf)))
        if not got:
            break
        buf += got
    return buf


class FakeCtl:
    def __init__(self, path):
        self.path = path
        self.requests = []          # raw bytes of each request, header and payload
        self.reply = None           # callable(header_line: bytes) -> bytes, or None
        self.drain = True           # read an O request's payload before replying
        self.stats_json = b'{"pid": 1, "order": {"orders": 3, "paths": 2}}'
        self.lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _default(self, line):
        verb, _, args = line.rstrip(b"\n").partition(b" ")
        if verb == b"O":
            return b"OK %s\n" % args.split(b" ")[0]
        if verb == b"S" and args == b"json":
            return b"OK %d\n%s" % (len(self.stats_json), self.stats_json)
        return b"ERR 22\n"

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with c:
                line = _read_line(c)
                if line is None:
                    continue
                raw = line
                if line.startswith(b"O ") and self.drain:
                    n = int(line.split()[2])
                    raw += _read_exact(c, n)
                with self.lock:
                    self.requests.append(raw)
                c.sendall((self.reply or self._default)(line))

    def close(self):
        self.sock.close()

    def orders(self):
        with self.lock:
            return list(self.requests)


@pytest.fixture
def fake_mount(tmp_path, monkeypatch):
    """(mount root, FakeCtl): feedfs sees tmp_path/mnt as a feedfs mount whose
    control socket is the fake's."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    ctl = FakeCtl(str(tmp_path / "ctl.sock"))
    monkeypatch.setattr(feedfs, "mount_point", lambda p, mountinfo=None: str(mnt))
    monkeypatch.setattr(feedfs, "control_socket", lambda p: ctl.path)
    yield str(mnt), ctl
    ctl.close()
