"""The mounted tree equals the bucket: names, types, sizes and every byte."""

import errno
import hashlib
import os

import pytest

from conftest import BIG_KEY, N_MANY, N_PREFIXES, content_for
from fsmodel import diff_trees, expected_tree, walk_mount


@pytest.fixture
def edge_mount(mount, edge):
    return mount(edge.name)


def file_sha(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


@pytest.mark.vg
@pytest.mark.san
def test_walk_matches_bucket(edge, edge_mount):
    want, hidden = expected_tree(edge.listing)
    got = walk_mount(edge_mount.path)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    # the fixture really holds what the tests below rely on
    assert want["shadow"] == ("d", None) and want["shadow/child"][0] == "f"
    assert want["emptydir"] == ("d", None) and os.listdir(edge_mount.p("emptydir")) == []
    assert sum(1 for p in want if p.startswith("many/")) == N_MANY
    assert sum(1 for p, t in want.items() if p.startswith("prefixes/") and p.count("/") == 1) == N_PREFIXES


def test_listing_of_one_dir(edge, edge_mount):
    """readdir of single directories equals the model (names only, order ignored)."""
    want, _ = expected_tree(edge.listing)
    for d in ["", "many", "prefixes", "special", "数据/训练集", "withmarker", "d1/d2/d3"]:
        names = sorted(os.listdir(edge_mount.p(d)))
        exp = sorted(p[len(d) + 1 if d else 0:] for p in want
                     if p.startswith(d + "/" if d else "") and "/" not in p[len(d) + 1 if d else 0:])
        assert names == exp, d


def test_unicode_names_byte_exact(edge, edge_mount):
    raw = os.listdir(os.fsencode(edge_mount.p("accents")))
    assert sorted(raw) == sorted(["cafe\u0301.txt".encode(), "caf\u00e9.txt".encode()])
    for k in ["数据/训练集/图片 01.jpg", "emoji/😀 smile.txt", "special/pct%25.txt",
              "special/plus+sign.txt", "special/sp ace.txt", "special/tab\tname.txt"]:
        with open(edge_mount.p(k), "rb") as f:
            assert f.read() == edge.objects[k], k


def test_long_names(edge, edge_mount):
    keys = [k for k in edge.objects if (k.startswith("long1024/") or k.startswith("seg233/"))
            and not k.endswith("/")]
    assert len(keys) == 2
    for k in keys:
        with open(edge_mount.p(k), "rb") as f:
            assert f.read() == edge.objects[k]
    assert any(len(k.encode()) == 1024 for k in keys)


@pytest.mark.san
def test_small_files_sha256(edge, edge_sha, edge_mount):
    want, _ = expected_tree(edge.listing)
    # Enumerate first, as a training loader does (ImageFolder walks, then opens):
    # opening 3,500 paths cold would cost a lookup request per directory, and
    # s3rver answers each of those by scanning thousands of siblings on disk.
    assert not diff_trees(want, walk_mount(edge_mount.path))
    n = 0
    for p, (kind, size) in sorted(want.items()):
        if kind != "f" or p == BIG_KEY:
            continue
        got = file_sha(edge_mount.p(p))
        assert got == edge_sha[p], p
        n += 1
    assert n > N_MANY + N_PREFIXES


def test_big_file_sha256(edge, edge_mount):
    p = edge_mount.p(BIG_KEY)
    assert os.stat(p).st_size == os.path.getsize(edge.big_path)
    assert file_sha(p, 4 << 20) == edge.big_sha


def test_empty_object(edge, edge_mount):
    p = edge_mount.p("empty.bin")
    st = os.stat(p)
    assert st.st_size == 0
    with open(p, "rb") as f:
        assert f.read() == b""
        assert os.pread(f.fileno(), 100, 0) == b""
        assert os.pread(f.fileno(), 100, 5) == b""


def test_shadowing(edge, edge_mount):
    import stat
    assert stat.S_ISDIR(os.stat(edge_mount.p("shadow")).st_mode)
    assert stat.S_ISDIR(os.stat(edge_mount.p("shadowm")).st_mode)
    assert os.listdir(edge_mount.p("shadow")) == ["child"]
    assert os.listdir(edge_mount.p("shadowm")) == []
    assert open(edge_mount.p("shadow/child"), "rb").read() == edge.objects["shadow/child"]


def test_stat_attributes(edge, edge_mount):
    """Files are regular and read-only, directories are directories; link counts sane."""
    import stat
    st = os.stat(edge_mount.p("top.txt"))
    assert stat.S_ISREG(st.st_mode) and st.st_size == len(edge.objects["top.txt"])
    assert st.st_mode & 0o222 == 0, oct(st.st_mode)
    st = os.stat(edge_mount.p("many"))
    assert stat.S_ISDIR(st.st_mode)
    assert st.st_nlink >= 1


def test_prefix_mount(edge, mount):
    """Mounting s3://bucket/withmarker/ shows only that prefix, relative."""
    m = mount(edge.name, "withmarker/")
    want, _ = expected_tree(edge.listing, prefix="withmarker/")
    got = walk_mount(m.path)
    assert not diff_trees(want, got), diff_trees(want, got)
    assert open(m.p("a.txt"), "rb").read() == edge.objects["withmarker/a.txt"]


def test_hidden_keys_and_faithful_listing(stub, mount):
    """On the S3 stub (which stores what s3rver refuses): keys that cannot be POSIX
    paths are hidden, a 255-byte name is shown, a prefix holding only sub-prefixes is a
    directory (s3rver quirk 2), and names needing URL encoding come back intact."""
    stub.create_bucket("faithful")
    keys = {
        "ok.txt": 10, "a//b": 11, "/leading": 12, "./dot": 13, "p/./q": 14, "p/../q": 15,
        "..": 16, "x/..": 17, "trail//": 0, "onlysub/b/c.txt": 18,
        "seg255/" + "n" * 255: 19, "seg256/" + "n" * 256: 20,
        "enc/sp ace": 21, "enc/plus+": 22, "enc/pct%25": 23, "enc/数据 01": 24,
        "enc/amp&lt;": 25, "enc/😀": 26,
    }
    for k, n in keys.items():
        stub.put("faithful", k, content_for(k, n))
    m = mount("faithful", endpoint=stub.url)
    want, hidden = expected_tree([(k, n) for k, n in keys.items()])
    assert {"a//b", "/leading", "./dot", "p/./q", "p/../q", "..", "x/..",
            "trail//", "seg256/" + "n" * 256} <= set(hidden)
    got = walk_mount(m.path)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    for k in ["seg255/" + "n" * 255, "onlysub/b/c.txt", "enc/plus+", "enc/pct%25", "enc/sp ace"]:
        assert open(m.p(k), "rb").read() == content_for(k, keys[k]), k
    with pytest.raises(OSError) as e:
        os.stat(m.p("seg256/" + "n" * 256))
    assert e.value.errno in (errno.ENOENT, errno.ENAMETOOLONG)


def test_stub_listing_pagination(stub, mount):
    """More than 1000 keys and more than 1000 common prefixes in one directory, paged by
    a server that counts both toward max-keys (real S3 does; s3rver does not, quirk 3)."""
    stub.create_bucket("pages")
    for i in range(1100):
        stub.put("pages", "d/f%04d" % i, b"x")
        stub.put("pages", "d/p%04d/y" % i, b"y")
    m = mount("pages", endpoint=stub.url)
    names = os.listdir(m.p("d"))
    assert len(names) == 2200 and len(set(names)) == 2200
    assert sorted(names) == sorted(["f%04d" % i for i in range(1100)] + ["p%04d" % i for i in range(1100)])
