"""Subtree listings: a walk of a whole tree costs about one LIST per 1000 keys, not
one per directory, and shows exactly the tree the bucket model says.

feedfs lists a directory it opens (or looks up) without a delimiter, up to a cap
of keys ($FEEDFS_LIST_SUBTREE_MAX_KEYS, default 100,000; 0 turns it off), and
keeps the listing of every directory below it for --metadata-ttl. A directory
over the cap is listed level by level as before. LIST requests are counted by a
proxy between feedfs and s3rver (a LIST is a GET with a query string); these
tests assert request counts, never timings.
"""

import os
import time

import pytest

from conftest import content_for, list_all, make_client, put_many
from fsmodel import add_quirk2_markers, diff_trees, expected_tree, walk_mount

N_TOP, N_MID, N_FILES = 8, 12, 30          # 2880 files in 96 leaf directories


def tree_objects():
    """{key: bytes}: three levels of files, a deeper branch, markers, a shadowed
    file, a name only a directory can have, and keys no POSIX name can show."""
    objs = {}
    for i in range(N_TOP):
        for j in range(N_MID):
            for k in range(N_FILES):
                key = "top%02d/mid%02d/f%03d.bin" % (i, j, k)
                objs[key] = content_for(key, (i * 7 + j * 3 + k) % 50)
    for k in ("deep/a/b/c/d/leaf.txt", "deep/a/b/other.txt", "deep/a/x.txt",
              "shadow", "shadow/inside.txt", "top00/mid00", "empty/", "emptyish/sub/",
              "emptyish/file.txt", "top.txt", "sp ace/ü.txt"):
        objs[k] = b"" if k.endswith("/") else content_for(k, 123)
    # quirk 2: so that the level-by-level fallback is compared with the model
    # too. test_only_subdirs covers the rest.
    return add_quirk2_markers(objs)


@pytest.fixture(scope="module")
def tree_bucket(s3server):
    s3 = make_client(s3server.url)
    name = "listing-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=name)
    objs = tree_objects()
    put_many(s3, name, sorted(objs.items()), threads=32)
    for k in ("bad//empty-segment", "./dot"):      # s3rver may fold or refuse these
        try:
            s3.put_object(Bucket=name, Key=k, Body=b"x")
        except Exception:  # noqa: BLE001 - quirk 7
            pass
    return name, list_all(s3, name)


def lists(p):
    """LIST requests so far (GETs with a query string)."""
    return p.counts().get("GET", 0) - p.gets()


def heads(p):
    return p.counts().get("HEAD", 0)


def n_dirs(want):
    return 1 + sum(1 for t, _ in want.values() if t == "d")


@pytest.mark.san
def test_walk_default_cap_one_list_per_1000_keys(tree_bucket, proxy, mount):
    name, listing = tree_bucket
    want, _ = expected_tree(listing)
    m = mount(name, endpoint=proxy.url)
    proxy.reset()
    got = walk_mount(m.path)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    pages = (len(listing) + 999) // 1000
    # one flat listing of the root answers every directory of the tree
    assert lists(proxy) <= pages + 1, "%d LISTs for %d keys in %d directories" % (
        lists(proxy), len(listing), n_dirs(want))
    assert heads(proxy) == 0
    # lookups and stats of any path are answered from the same listings
    proxy.reset()
    for p in ("top03/mid07/f011.bin", "deep/a/b/c/d/leaf.txt", "shadow/inside.txt"):
        assert os.stat(m.p(p)).st_size == want[p][1]
    assert not os.path.exists(m.p("top03/mid07/nope.bin"))
    assert lists(proxy) == 0 and heads(proxy) == 0


@pytest.mark.parametrize("cap", ["500", "0"])
def test_walk_over_cap_falls_back(tree_bucket, proxy, mount, monkeypatch, cap):
    """cap 500: the root (and each topNN, 360 keys, fits) is too big and listed by
    level; cap 0: no subtree listings at all (one delimited LIST per directory).
    Either way the tree is the same."""
    name, listing = tree_bucket
    want, _ = expected_tree(listing)
    monkeypatch.setenv("FEEDFS_LIST_SUBTREE_MAX_KEYS", cap)
    m = mount(name, endpoint=proxy.url)
    proxy.reset()
    got = walk_mount(m.path)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    if cap == "0":
        assert lists(proxy) >= n_dirs(want)
    else:
        # root: one page to learn it is too big, then its delimited listing; one
        # subtree listing per top-level directory
        top = sum(1 for p in want if "/" not in p and want[p][0] == "d")
        assert lists(proxy) <= 2 + top + 2, "%d LISTs" % lists(proxy)
    assert heads(proxy) == 0


def test_only_subdirs_visible(new_bucket, s3, proxy, mount):
    """A prefix that holds only sub-prefixes (no marker) is a directory. s3rver
    leaves it out of delimited listings (quirk 2); a flat listing always has it."""
    b = new_bucket("onlysub")
    keys = ["od/a/b/leaf.txt", "od/a/c/leaf2.txt", "x/y/z/w.txt", "file.txt"]
    put_many(s3, b, [(k, content_for(k, 10)) for k in keys])
    want, _ = expected_tree(list_all(s3, b))
    m = mount(b, endpoint=proxy.url)
    got = walk_mount(m.path)
    assert not diff_trees(want, got), diff_trees(want, got)
    assert got["od"] == ("d", None) and got["od/a/b"] == ("d", None)


def test_cold_stat_by_path(tree_bucket, proxy, mount):
    """No readdir at all: the lookup of a directory lists its subtree in the same
    one request that tells it is a directory; files below need no request."""
    name, listing = tree_bucket
    want, _ = expected_tree(listing)
    m = mount(name, endpoint=proxy.url)
    proxy.reset()
    for j in range(N_MID):
        for k in (0, 17, 29):
            p = "top05/mid%02d/f%03d.bin" % (j, k)
            assert os.stat(m.p(p)).st_size == want[p][1]
    # root is not listed; "top05" is looked up with one 1000-key page (360 keys:
    # the whole subtree), everything below is answered from it
    assert lists(proxy) <= 2, "%d LISTs" % lists(proxy)
    assert heads(proxy) == 0


def test_changes_visible_after_ttl(new_bucket, s3, mount):
    b = new_bucket("lttl")
    put_many(s3, b, [("d/s/a.txt", b"a"), ("d/s/gone.txt", b"g"), ("d/t.txt", b"t")])
    m = mount(b, "", "--metadata-ttl", "2", "--negative-ttl", "2")
    assert walk_mount(m.path) == {"d": ("d", None), "d/s": ("d", None),
                                  "d/s/a.txt": ("f", 1), "d/s/gone.txt": ("f", 1),
                                  "d/t.txt": ("f", 1)}
    s3.put_object(Bucket=b, Key="d/s/new.txt", Body=b"new!")
    s3.put_object(Bucket=b, Key="d/n/deeper.txt", Body=b"xy")
    s3.delete_object(Bucket=b, Key="d/s/gone.txt")
    want = {"d": ("d", None), "d/s": ("d", None), "d/s/a.txt": ("f", 1),
            "d/s/new.txt": ("f", 4), "d/t.txt": ("f", 1), "d/n": ("d", None),
            "d/n/deeper.txt": ("f", 2)}
    deadline = time.monotonic() + 60
    while True:
        got = walk_mount(m.path)
        if got == want:
            break
        assert time.monotonic() < deadline, diff_trees(want, got)
        time.sleep(0.3)
    with open(m.p("d/s/new.txt"), "rb") as f:
        assert f.read() == b"new!"
