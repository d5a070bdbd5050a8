"""Dataset snapshots (issue 34): `feedfs snapshot SOURCE FILE`, `--print`, and a
mount from the snapshot with `--snapshot FILE`: the tree and every byte as the
bucket held them when the snapshot was taken, no LIST and no HEAD, reads
pinned to the snapshot's ETags; a bad snapshot mounts nothing."""

import errno
import os

import pytest

from conftest import BIG_KEY, content_for, list_all, put_many, sha256
from counting_proxy import CountingProxy
from fsmodel import diff_trees, expected_tree, walk_mount
from mounter import s3rver_args

# What a read of an object deleted since the snapshot answers (S3: 404 NoSuchKey).
DELETED_ERRNO = errno.ENOENT


@pytest.fixture
def proxy(s3server):
    p = CountingProxy(s3server.url).start()
    yield p
    p.stop()


def lists_and_heads(p):
    """LIST requests (GETs with a query) and HEADs the proxy forwarded."""
    c = p.counts()
    return c.get("GET", 0) - p.gets(), c.get("HEAD", 0)


def take(mounter, endpoint, source, out):
    cp = mounter.run(["snapshot", source, out] + s3rver_args(endpoint))
    assert cp.returncode == 0, cp.stderr
    return cp


def dataset(n_dirs=5, n_files=40):
    objs = {}
    for d in range(n_dirs):
        for f in range(n_files):
            k = "data/d%02d/f%03d.bin" % (d, f)
            objs[k] = content_for(k, (d * 7919 + f * 131) % 20000)
    objs["data/empty.bin"] = b""
    objs["data/marker/"] = b""
    objs["data/shadow"] = content_for("data/shadow", 10)
    objs["data/shadow/child"] = content_for("data/shadow/child", 11)
    objs["data/数据/图片 01.jpg"] = content_for("数据", 999)
    objs["other/outside.bin"] = content_for("other", 5)       # outside the prefix
    return objs


@pytest.fixture
def snap_bucket(s3, new_bucket):
    b = new_bucket("snap")
    objs = dataset()
    put_many(s3, b, sorted(objs.items()))
    return b, objs


def read_all(root, objs, prefix):
    """Keys under prefix whose bytes on the mount differ from objs."""
    bad = []
    for k, v in objs.items():
        if not k.startswith(prefix) or k.endswith("/") or k == "data/shadow":
            continue
        with open(os.path.join(root, k[len(prefix):]), "rb") as f:
            if sha256(f.read()) != sha256(v):
                bad.append(k)
    return bad


def test_print_lists_the_bucket(mounter, s3, s3server, snap_bucket, tmp_path):
    """--print shows every key under the prefix once, with the size and ETag
    the store lists, in byte order; nothing outside the prefix."""
    b, objs = snap_bucket
    out = str(tmp_path / "s.snap")
    take(mounter, s3server.url, "s3://%s/data/" % b, out)
    cp = mounter.run(["snapshot", "--print", out])
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert lines[0].startswith("# feedfs snapshot v1 of s3://%s/data/: " % b)
    got = [tuple(line.split("\t")) for line in lines[1:]]
    want = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b, Prefix="data/"):
        for o in page.get("Contents", []):
            want.append((o["Key"], str(o["Size"]), o["ETag"]))
    want.sort(key=lambda t: t[0].encode())
    assert got == want
    assert not any(k.startswith("other/") for k, _, _ in got)


@pytest.mark.san
def test_mount_from_snapshot_no_list_no_head(mounter, s3server, snap_bucket, proxy, tmp_path):
    """The tree equals the model of the listing, every byte equals what was
    uploaded, and the store saw no LIST and no HEAD from the mount."""
    b, objs = snap_bucket
    out = str(tmp_path / "s.snap")
    take(mounter, s3server.url, "s3://%s/data/" % b, out)
    proxy.reset()
    m = mounter.mount("s3://%s/data/" % b, args=s3rver_args(proxy.url) + ["--snapshot", out])
    want, _ = expected_tree([(k, len(v)) for k, v in objs.items()], prefix="data/")
    got = walk_mount(m.path)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    assert sorted(os.listdir(m.path)) == sorted(["d00", "d01", "d02", "d03", "d04", "empty.bin",
                                                 "marker", "shadow", "数据"])
    assert read_all(m.path, objs, "data/") == []
    assert lists_and_heads(proxy) == (0, 0)
    # a name the snapshot does not hold: ENOENT, still without a request
    with pytest.raises(FileNotFoundError):
        os.stat(m.p("d00/nope.bin"))
    assert lists_and_heads(proxy) == (0, 0)
    from mounter import feedfs_stats
    st = feedfs_stats(m)
    assert st["fs"]["snap_listings"] >= 8       # root, d00..d04, marker, shadow, 数据
    assert st["fs"]["list_pages"] == 0 and st["fs"]["heads"] == 0


def test_edge_bucket_tree_from_snapshot(mounter, s3server, edge, edge_sha, tmp_path):
    """The edge bucket (markers, shadowing, unicode, 1500-key and 2000-prefix
    directories, a 1024-byte key) shows the same tree from a snapshot as the
    model computed from its listing; small files read right."""
    out = str(tmp_path / "edge.snap")
    take(mounter, s3server.url, "s3://%s" % edge.name, out)
    m = mounter.mount(edge.name, args=s3rver_args(s3server.url) + ["--snapshot", out])
    want, hidden = expected_tree(edge.listing)
    problems = diff_trees(want, walk_mount(m.path))
    assert not problems, "\n".join(problems)
    for k in ["数据/训练集/图片 01.jpg", "special/tab\tname.txt", "many/f01234.dat",
              "withmarker/sub/b.txt", "sizes/8388611.bin"]:
        with open(m.p(k), "rb") as f:
            assert sha256(f.read()) == edge_sha[k], k
    assert os.path.getsize(m.p(BIG_KEY)) == 300 * 1024 * 1024


@pytest.mark.san
def test_changed_object_is_estale_new_one_absent(mounter, s3, s3server, snap_bucket, tmp_path):
    """After the snapshot: a replaced object answers ESTALE (never the new
    bytes), an added one does not exist, the others read as before."""
    b, objs = snap_bucket
    out = str(tmp_path / "s.snap")
    take(mounter, s3server.url, "s3://%s/data/" % b, out)
    s3.put_object(Bucket=b, Key="data/d01/f005.bin", Body=b"replaced " * 100)
    s3.put_object(Bucket=b, Key="data/d01/added.bin", Body=b"new")
    s3.delete_object(Bucket=b, Key="data/d02/f007.bin")
    m = mounter.mount("s3://%s/data/" % b, args=s3rver_args(s3server.url) + ["--snapshot", out])
    assert os.path.getsize(m.p("d01/f005.bin")) == len(objs["data/d01/f005.bin"])
    with pytest.raises(OSError) as ei:
        with open(m.p("d01/f005.bin"), "rb") as f:
            f.read()
    assert ei.value.errno == errno.ESTALE
    # deleted since: still listed (the snapshot's), its read fails as S3's 404 does
    assert os.path.getsize(m.p("d02/f007.bin")) == len(objs["data/d02/f007.bin"])
    with pytest.raises(OSError) as ei:
        with open(m.p("d02/f007.bin"), "rb") as f:
            f.read()
    assert ei.value.errno == DELETED_ERRNO, ei.value
    assert not os.path.exists(m.p("d01/added.bin"))
    assert "added.bin" not in os.listdir(m.p("d01"))
    with open(m.p("d01/f006.bin"), "rb") as f:
        assert f.read() == objs["data/d01/f006.bin"]


def mount_fails(mounter, source, args):
    cp = mounter.mount(source, args=args, ok=False, text=True)
    assert cp.returncode == 1, (cp.returncode, cp.stderr)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    return lines[0]


@pytest.mark.san
def test_bad_snapshots_mount_nothing(mounter, s3, s3server, snap_bucket, new_bucket, tmp_path):
    """Truncated, corrupted, another version, another bucket or prefix: one
    line saying which, exit 1, nothing mounted."""
    b, _ = snap_bucket
    good = str(tmp_path / "good.snap")
    take(mounter, s3server.url, "s3://%s/data/" % b, good)
    with open(good, "rb") as f:
        data = f.read()
    src = "s3://%s/data/" % b
    base = s3rver_args(s3server.url)

    def variant(name, blob):
        p = str(tmp_path / name)
        with open(p, "wb") as f:
            f.write(blob)
        return p

    line = mount_fails(mounter, src, base + ["--snapshot", variant("t", data[:len(data) // 2])])
    assert "truncated" in line and "t" in line
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x20
    line = mount_fails(mounter, src, base + ["--snapshot", variant("c", bytes(flipped))])
    assert "corrupt: checksum mismatch" in line
    v9 = bytearray(data)
    v9[8] = 9
    line = mount_fails(mounter, src, base + ["--snapshot", variant("v", bytes(v9))])
    assert "snapshot version 9, this feedfs reads 1" in line
    line = mount_fails(mounter, "s3://%s/other/" % b, base + ["--snapshot", good])
    assert "describes s3://%s/data/, not s3://%s/other/" % (b, b) in line
    other = new_bucket("snapother")
    line = mount_fails(mounter, "s3://%s/data/" % other, base + ["--snapshot", good])
    assert "describes s3://%s/data/" % b in line
    line = mount_fails(mounter, src, base + ["--snapshot", variant("x", b"not a snapshot" * 20)])
    assert "not a feedfs snapshot" in line
    line = mount_fails(mounter, src, base + ["--snapshot", str(tmp_path / "missing.snap")])
    assert "No such file or directory" in line


def test_snapshot_command_errors(mounter, s3server, tmp_path):
    cp = mounter.run(["snapshot", "s3://no-such-bucket-x/", str(tmp_path / "o.snap")] +
                     s3rver_args(s3server.url))
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1, cp.stderr
    assert "no-such-bucket-x" in cp.stderr
    assert not os.listdir(tmp_path)         # no partial file left behind
    cp = mounter.run(["snapshot", "s3://b/", "s3://b/out.snap"] + s3rver_args(s3server.url))
    assert cp.returncode == 2 and "only a local file" in cp.stderr
    cp = mounter.run(["snapshot", "--print", str(tmp_path / "none.snap")])
    assert cp.returncode == 1 and "none.snap" in cp.stderr


def test_hidden_keys_and_if_match_on_a_faithful_store(mounter, stub, tmp_path):
    """On the stub (which stores what s3rver refuses and honours If-Match):
    keys that cannot be POSIX names are hidden and counted exactly as the model
    says, a prefix holding only sub-prefixes is a directory, the walk sends no
    request, and a replaced object answers ESTALE through a real 412."""
    stub.create_bucket("hb")
    keys = {"ok.txt": b"ok", "a//b": b"x", "p/./q": b"y", "x/" + "n" * 300 + "/f": b"z",
            "only/sub/deep.txt": b"deep", "keep/me.bin": content_for("keep", 5000)}
    for k, v in keys.items():
        stub.put("hb", k, v)
    out = str(tmp_path / "h.snap")
    take(mounter, stub.url, "s3://hb/", out)
    stub.reset_counts()
    m = mounter.mount("s3://hb/", args=s3rver_args(stub.url) + ["--snapshot", out])
    want, hidden = expected_tree([(k, len(v)) for k, v in keys.items()])
    assert len(hidden) == 3
    problems = diff_trees(want, walk_mount(m.path))
    assert not problems, "\n".join(problems)
    assert os.path.isdir(m.p("only/sub"))
    with open(m.p("keep/me.bin"), "rb") as f:
        assert f.read() == keys["keep/me.bin"]
    c = dict(stub.counts)
    assert c.get("list", 0) == 0 and c.get("head", 0) == 0, c
    from mounter import feedfs_stats
    assert feedfs_stats(m)["fs"]["hidden"] == 3
    stub.put("hb", "ok.txt", b"changed")
    with pytest.raises(OSError) as ei:
        with open(m.p("ok.txt"), "rb") as f:
            f.read()
    assert ei.value.errno == errno.ESTALE


def test_snapshot_fetched_from_the_store(mounter, s3, s3server, snap_bucket, new_bucket, proxy,
                                         tmp_path):
    """--snapshot s3://BUCKET/KEY: the snapshot kept as an object (another
    bucket of the same store) is fetched with GETs, no LIST or HEAD, and the
    mount serves the same tree and bytes; a missing or foreign object fails
    the mount with one line naming the URL."""
    b, objs = snap_bucket
    out = str(tmp_path / "s.snap")
    take(mounter, s3server.url, "s3://%s/data/" % b, out)
    sb = new_bucket("snaps")
    with open(out, "rb") as f:
        s3.put_object(Bucket=sb, Key="job/s.snap", Body=f.read())
    proxy.reset()
    url = "s3://%s/job/s.snap" % sb
    m = mounter.mount("s3://%s/data/" % b, args=s3rver_args(proxy.url) + ["--snapshot", url])
    want, _ = expected_tree([(k, len(v)) for k, v in objs.items()], prefix="data/")
    problems = diff_trees(want, walk_mount(m.path))
    assert not problems, "\n".join(problems)
    assert read_all(m.path, objs, "data/") == []
    assert lists_and_heads(proxy) == (0, 0)
    assert proxy.gets("job/s.snap") == 2          # the header, then the rest
    line = mount_fails(mounter, "s3://%s/data/" % b,
                       s3rver_args(s3server.url) + ["--snapshot", "s3://%s/job/none" % sb])
    assert line.startswith("feedfs: cannot fetch the snapshot s3://%s/job/none: " % sb)
    s3.put_object(Bucket=sb, Key="job/junk", Body=b"x" * 500)
    line = mount_fails(mounter, "s3://%s/data/" % b,
                       s3rver_args(s3server.url) + ["--snapshot", "s3://%s/job/junk" % sb])
    assert line == "feedfs: snapshot s3://%s/job/junk: not a feedfs snapshot" % sb
