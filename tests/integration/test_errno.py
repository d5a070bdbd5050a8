"""Exact errno values: missing paths, files used as directories, and EROFS for every write."""

import errno
import os

import pytest


@pytest.fixture
def m(mount, edge):
    return mount(edge.name)


def err_of(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        return e.errno
    return 0


def name(e):
    return errno.errorcode.get(e, str(e)) if e else "success"


@pytest.mark.vg
@pytest.mark.san
def test_enoent(m):
    assert name(err_of(os.stat, m.p("no-such-file"))) == "ENOENT"
    assert name(err_of(os.open, m.p("no-such-file"), os.O_RDONLY)) == "ENOENT"
    assert name(err_of(os.listdir, m.p("no-such-dir"))) == "ENOENT"
    assert name(err_of(os.stat, m.p("no-such-dir/x"))) == "ENOENT"
    assert name(err_of(os.stat, m.p("withmarker/nope.txt"))) == "ENOENT"
    # asking twice gives the same answer (negative cache)
    assert name(err_of(os.stat, m.p("no-such-file"))) == "ENOENT"


@pytest.mark.san
def test_enotdir_eisdir(m):
    assert name(err_of(os.open, m.p("top.txt/x"), os.O_RDONLY)) == "ENOTDIR"
    assert name(err_of(os.stat, m.p("withmarker/a.txt/x"))) == "ENOTDIR"
    assert name(err_of(os.listdir, m.p("top.txt"))) == "ENOTDIR"
    fd = os.open(m.p("withmarker"), os.O_RDONLY)
    try:
        assert name(err_of(os.read, fd, 10)) == "EISDIR"
    finally:
        os.close(fd)
    assert name(err_of(os.open, m.p("top.txt"), os.O_RDONLY | os.O_DIRECTORY)) == "ENOTDIR"


WRITE_OPS = {
    "open O_WRONLY": lambda m: os.close(os.open(m.p("top.txt"), os.O_WRONLY)),
    "open O_RDWR": lambda m: os.close(os.open(m.p("top.txt"), os.O_RDWR)),
    "open O_CREAT new": lambda m: os.close(os.open(m.p("newfile"), os.O_WRONLY | os.O_CREAT, 0o644)),
    "open O_CREAT|O_EXCL new": lambda m: os.close(os.open(m.p("withmarker/new"), os.O_RDWR | os.O_CREAT | os.O_EXCL)),
    "open O_APPEND": lambda m: os.close(os.open(m.p("top.txt"), os.O_WRONLY | os.O_APPEND)),
    "open O_TRUNC": lambda m: os.close(os.open(m.p("top.txt"), os.O_WRONLY | os.O_TRUNC)),
    "mkdir": lambda m: os.mkdir(m.p("newdir")),
    "mkdir in subdir": lambda m: os.mkdir(m.p("withmarker/newdir")),
    "unlink": lambda m: os.unlink(m.p("top.txt")),
    "rmdir empty": lambda m: os.rmdir(m.p("emptydir")),
    "rename file": lambda m: os.rename(m.p("top.txt"), m.p("top2.txt")),
    "rename dir": lambda m: os.rename(m.p("withmarker"), m.p("withmarker2")),
    "chmod": lambda m: os.chmod(m.p("top.txt"), 0o777),
    "chmod dir": lambda m: os.chmod(m.p("withmarker"), 0o777),
    "chown": lambda m: os.chown(m.p("top.txt"), 1234, 1234),
    "truncate": lambda m: os.truncate(m.p("top.txt"), 0),
    "utime": lambda m: os.utime(m.p("top.txt"), (1, 1)),
    "setxattr": lambda m: os.setxattr(m.p("top.txt"), "user.x", b"1"),
    "removexattr": lambda m: os.removexattr(m.p("top.txt"), "user.x"),
    "symlink": lambda m: os.symlink("top.txt", m.p("newlink")),
    "link": lambda m: os.link(m.p("top.txt"), m.p("newhard")),
    "mknod fifo": lambda m: os.mkfifo(m.p("newfifo")),
}


@pytest.mark.san
@pytest.mark.parametrize("op", sorted(WRITE_OPS))
def test_erofs(m, edge, op):
    assert name(err_of(WRITE_OPS[op], m)) == "EROFS"
    # nothing changed
    assert open(m.p("top.txt"), "rb").read() == edge.objects["top.txt"]
    assert not os.path.exists(m.p("newfile"))


def test_ftruncate_on_readonly_fd(m):
    with open(m.p("top.txt"), "rb") as f:
        e = err_of(os.ftruncate, f.fileno(), 0)
    # the kernel refuses before the filesystem sees it
    assert name(e) in ("EINVAL", "EBADF", "EROFS")
