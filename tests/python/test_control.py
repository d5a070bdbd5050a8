"""feedfs (python/feedfs/__init__.py): finding the socket, and the bytes of
each request, against a fake control socket (conftest.FakeCtl)."""
import errno
import os
import shutil
import subprocess
import tempfile

import pytest

import feedfs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- finding the mount and its socket ---------------------------------------

def test_fnv1a64_vectors():
    # The published FNV-1a 64 vectors: util_fnv1a64 gives the same.
    assert feedfs._fnv1a64(b"") == 0xcbf29ce484222325
    assert feedfs._fnv1a64(b"a") == 0xaf63dc4c8601ec8c
    assert feedfs._fnv1a64(b"foobar") == 0x85944171f73967e8


def _mountinfo(tmp_path, lines):
    p = tmp_path / "mountinfo"
    p.write_text("".join(lines))
    return str(p)


def test_mount_point_longest_feedfs_mount_unescaped(tmp_path):
    a = tmp_path / "a"
    inner = a / "my data"
    (inner / "sub").mkdir(parents=True)
    other = inner / "sub" / "other"
    other.mkdir()
    esc = str(inner).replace(" ", "\\040")
    mi = _mountinfo(tmp_path, [
        "22 1 0:21 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n",
        "30 22 0:40 / %s rw,nosuid - fuse.feedfs feedfs rw,user_id=0\n" % a,
        "31 30 0:41 / %s rw,nosuid shared:7 master:2 - fuse.feedfs feedfs rw\n" % esc,
        # longer, but not feedfs: not ours
        "32 31 0:42 / %s rw - fuse.rclone bench: rw\n" % other,
    ])
    assert feedfs.mount_point(str(other / "."), mi) == str(inner)
    assert feedfs.mount_point(str(inner / "sub"), mi) == str(inner)
    assert feedfs.mount_point(str(a), mi) == str(a)
    # a sibling whose name extends the mount point's is not under it
    (tmp_path / "ab").mkdir()
    with pytest.raises(OSError) as ei:
        feedfs.mount_point(str(tmp_path / "ab"), mi)
    assert ei.value.errno == errno.ENOENT


def test_unescape_octal():
    assert feedfs._unescape_octal(b"/mnt/a\\040b\\011c\\012d\\134e") == b"/mnt/a b\tc\nd\\e"
    # not an escape: left as is
    assert feedfs._unescape_octal(b"/x\\48\\4") == b"/x\\48\\4"


def test_runtime_dir_rule(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert feedfs._socket_for_mount("/mnt/data") == \
        "/run/feedfs/ctl-%016x.sock" % feedfs._fnv1a64(b"/mnt/data")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert feedfs._socket_for_mount("/mnt/data").startswith("/run/user/1000/feedfs/ctl-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/dir")
    assert feedfs._socket_for_mount("/mnt/data").startswith("/tmp/feedfs-1000/ctl-")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert feedfs._socket_for_mount("/mnt/data").startswith("/tmp/feedfs-1000/ctl-")


C_PROBE = r"""
#include <stdio.h>
#include "feedfs/ctl.h"
int main(int argc, char **argv)
{
	char out[256];
	for (int i = 1; i < argc; i++) {
		if (ctl_socket_path(argv[i], out, sizeof(out)) < 0)
			return 1;
		puts(out);
	}
	return 0;
}
"""


NOBODY = 65534


@pytest.fixture(scope="module")
def c_probe(tmp_path_factory):
    """ctl_socket_path itself, in a small program linked with build/libfeedfsd.a,
    in a directory every uid may enter (for the runs as another uid)."""
    lib = os.path.join(ROOT, "build", "libfeedfsd.a")
    if not os.path.exists(lib) or not shutil.which("cc") or not shutil.which("pkg-config"):
        pytest.skip("needs build/libfeedfsd.a (make all), cc and pkg-config")
    d = tempfile.mkdtemp(prefix="feedfs-probe-")
    os.chmod(d, 0o755)
    src = os.path.join(d, "probe.c")
    with open(src, "w") as f:
        f.write(C_PROBE)
    exe = os.path.join(d, "probe")
    libs = subprocess.run(["pkg-config", "--libs", "fuse3", "libcurl", "openssl", "libxml-2.0",
                           "liburing"], stdout=subprocess.PIPE, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-std=gnu11", "-I", os.path.join(ROOT, "include"), "-o", exe, src, lib]
                   + libs + ["-pthread", "-ldl", "-lm"], check=True)
    yield exe
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("as_nobody", [False, True])
@pytest.mark.parametrize("xdg", [None, "/run/user/4242", "not-absolute"])
def test_socket_path_matches_the_c_code(c_probe, monkeypatch, xdg, as_nobody):
    cmd = [c_probe]
    if as_nobody:
        # the XDG and /tmp rules apply to a uid other than 0 only
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            pytest.skip("needs root and setpriv to run the probe as uid %d" % NOBODY)
        cmd = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + cmd
        monkeypatch.setattr(os, "geteuid", lambda: NOBODY)
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if xdg:
        env["XDG_RUNTIME_DIR"] = xdg
        monkeypatch.setenv("XDG_RUNTIME_DIR", xdg)
    mps = ["/mnt/data", "/", "/mnt/a b\tc", "/tmp/\u00e9t\u00e9/x"]
    got = subprocess.run(cmd + mps, env=env, stdout=subprocess.PIPE, check=True).stdout
    want = "".join(feedfs._socket_for_mount(m) + "\n" for m in mps)
    assert got == os.fsencode(want)
    assert got.startswith(b"/run/feedfs/" if not as_nobody else
                          (b"/run/user/4242/feedfs/" if xdg == "/run/user/4242" else b"/tmp/feedfs-65534/"))


# ---- the O verb --------------------------------------------------------------

def test_send_order_exact_bytes(fake_mount):
    mnt, ctl = fake_mount
    n = feedfs.send_order(mnt, ["train/b.jpg", mnt + "/train/a b.jpg", b"x/\xff.bin",
                                os.path.join(mnt, "c")])
    assert n == 4
    payload = b"train/b.jpg\ntrain/a b.jpg\nx/\xff.bin\nc\n"
    assert ctl.orders() == [b"O 4 %d\n" % len(payload) + payload]


def test_send_order_through_a_path_inside_the_mount(fake_mount):
    mnt, ctl = fake_mount
    os.mkdir(os.path.join(mnt, "train"))
    # mountpoint may be any path in the mount; relative paths stay relative to its root
    assert feedfs.send_order(os.path.join(mnt, "train"), ["val/1", mnt + "/train/2"]) == 2
    assert ctl.orders() == [b"O 2 14\nval/1\ntrain/2\n"]


def test_symlinked_mount_point_spelling(fake_mount, tmp_path):
    mnt, ctl = fake_mount
    link = tmp_path / "link"
    link.symlink_to(mnt)
    assert feedfs.send_order(str(link), [str(link) + "/k/1", mnt + "/k/2"]) == 2
    assert ctl.orders() == [b"O 2 8\nk/1\nk/2\n"]


def test_clear_and_empty_order(fake_mount):
    mnt, ctl = fake_mount
    assert feedfs.clear_order(mnt) == 0
    assert feedfs.send_order(mnt, []) == 0
    assert ctl.orders() == [b"O 0 0\n", b"O 0 0\n"]


def test_streams_in_the_header(fake_mount):
    mnt, ctl = fake_mount
    assert feedfs.send_order(mnt, ["k/1"], stream="rank2") == 1
    assert feedfs.clear_order(mnt, stream="rank2") == 0
    with pytest.raises(ValueError, match="stream name"):
        feedfs.send_order(mnt, ["k/1"], stream="rank 2")
    assert ctl.orders() == [b"O 1 4 rank2\nk/1\n", b"O 0 0 rank2\n"]


@pytest.mark.parametrize("bad, why", [
    ("", "empty path"),
    ("a/../b", "'..'"),
    ("..", "'..'"),
    ("a/./b", "empty or '.'"),
    ("./a", "empty or '.'"),
    ("a//b", "empty or '.'"),
    ("a/", "empty or '.'"),
    ("a\0b", "NUL"),
    ("a\nb", "newline"),
    ("/elsewhere/a", "not under the mount point"),
])
def test_bad_paths_refused_before_sending(fake_mount, bad, why):
    mnt, ctl = fake_mount
    with pytest.raises(ValueError) as ei:
        feedfs.send_order(mnt, ["ok/1", bad, "ok/2"])
    assert why in str(ei.value)
    assert ctl.orders() == []


def test_names_with_dots_are_not_segments(fake_mount):
    mnt, ctl = fake_mount
    ok = [".hidden/x", "a/.b", "a/..b", "a.b/c...", "..x"]
    assert feedfs.send_order(mnt, ok) == 5
    body = "".join(p + "\n" for p in ok).encode()
    assert ctl.orders() == [b"O 5 %d\n" % len(body) + body]


def test_mount_root_itself_is_refused(fake_mount):
    mnt, ctl = fake_mount
    with pytest.raises(ValueError):
        feedfs.send_order(mnt, [mnt + "/"])
    with pytest.raises(ValueError):
        feedfs.send_order(mnt, [mnt + "/a/../../etc/passwd"])
    assert ctl.orders() == []


@pytest.mark.parametrize("err", [errno.EINVAL, errno.E2BIG, errno.ENOMEM, errno.EBUSY])
def test_err_reply_raises_oserror(fake_mount, err):
    mnt, ctl = fake_mount
    ctl.reply = lambda line: b"ERR %d\n" % err
    with pytest.raises(OSError) as ei:
        feedfs.send_order(mnt, ["a", "b"])
    assert ei.value.errno == err
    assert mnt in str(ei.value)


def test_err_after_draining_nothing(fake_mount):
    # The daemon answers ERR 7 to the header alone and closes: the client
    # still reports E2BIG, not a broken pipe.
    mnt, ctl = fake_mount
    ctl.drain = False
    ctl.reply = lambda line: b"ERR 7\n"
    with pytest.raises(OSError) as ei:
        feedfs.send_order(mnt, ["p/%07d" % i for i in range(200000)])
    assert ei.value.errno == errno.E2BIG
    assert ctl.orders() == [b"O 200000 2000000\n"]


def test_bounds_checked_here(fake_mount, monkeypatch):
    mnt, ctl = fake_mount
    monkeypatch.setattr(feedfs, "ORDER_MAX_PATHS", 3)
    with pytest.raises(OSError) as ei:
        feedfs.send_order(mnt, ["a", "b", "c", "d"])
    assert ei.value.errno == errno.E2BIG
    monkeypatch.setattr(feedfs, "ORDER_MAX_PATHS", 1 << 22)
    monkeypatch.setattr(feedfs, "ORDER_MAX_BYTES", 5)
    with pytest.raises(OSError) as ei:
        feedfs.send_order(mnt, ["ab", "cd"])      # 6 bytes
    assert ei.value.errno == errno.E2BIG
    assert feedfs.send_order(mnt, ["a", "cd"]) == 2   # 5 bytes: at the bound
    assert ctl.orders() == [b"O 2 5\na\ncd\n"]


@pytest.mark.parametrize("reply", [b"what\n", b"OK many\n", b""])
def test_garbled_reply_is_eproto(fake_mount, reply):
    mnt, ctl = fake_mount
    ctl.reply = lambda line: reply
    with pytest.raises(OSError) as ei:
        feedfs.send_order(mnt, ["a"])
    assert ei.value.errno == errno.EPROTO


def test_unreachable_daemon(tmp_path, monkeypatch):
    monkeypatch.setattr(feedfs, "mount_point", lambda p, mountinfo=None: str(tmp_path))
    monkeypatch.setattr(feedfs, "control_socket", lambda p: str(tmp_path / "nobody.sock"))
    with pytest.raises(OSError) as ei:
        feedfs.send_order(str(tmp_path), ["a"])
    assert ei.value.errno == errno.ENOENT
    assert "cannot reach" in str(ei.value)


def test_not_a_feedfs_mount(tmp_path):
    # the real lookup: a temporary directory is on no feedfs mount
    # (unless the tests run inside one, which they do not)
    with pytest.raises(OSError) as ei:
        feedfs.send_order(str(tmp_path), ["a"])
    assert ei.value.errno == errno.ENOENT
    assert "not a feedfs mount" in str(ei.value)


# ---- the S verb --------------------------------------------------------------

def test_stats_json(fake_mount):
    mnt, ctl = fake_mount
    assert feedfs.stats(mnt) == {"pid": 1, "order": {"orders": 3, "paths": 2}}
    assert ctl.orders() == [b"S json\n"]


def test_stats_err_and_short_reply(fake_mount):
    mnt, ctl = fake_mount
    ctl.reply = lambda line: b"ERR 95\n"
    with pytest.raises(OSError) as ei:
        feedfs.stats(mnt)
    assert ei.value.errno == errno.EOPNOTSUPP
    ctl.reply = lambda line: b'OK 50\n{"pid": 1}'
    with pytest.raises(OSError) as ei:
        feedfs.stats(mnt)
    assert ei.value.errno == errno.EPROTO


def test_import_feedfs_does_not_import_torch():
    import sys
    code = "import sys, feedfs; assert 'torch' not in sys.modules and 'feedfs.torch' not in sys.modules"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
