"""Several sources in one tree (issue 34): `feedfs --sources FILE MOUNTPOINT`,
each source the top-level directory of its name, on different servers, listed
or from a snapshot; a bad sources file or a bad source mounts nothing."""

import os
import signal
import time

import pytest

from conftest import content_for, put_many, sha256
from fsmodel import diff_trees, expected_tree, walk_mount
from mounter import feedfs_stats, s3rver_args, settled_stats


def objs_for(stem, n_dirs=3, n_files=15):
    out = {}
    for d in range(n_dirs):
        for f in range(n_files):
            k = "%s/d%d/f%02d.bin" % (stem, d, f)
            out[k] = content_for(k, 100 + (d * 997 + f * 131) % 9000)
    return out


def write(tmp_path, name, text):
    p = str(tmp_path / name)
    with open(p, "w") as f:
        f.write(text)
    return p


def check_source(mnt, name, objs, prefix):
    want, _ = expected_tree([(k, len(v)) for k, v in objs.items()], prefix=prefix)
    got = walk_mount(os.path.join(mnt, name))
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    for k, v in objs.items():
        if k.startswith(prefix):
            with open(os.path.join(mnt, name, k[len(prefix):]), "rb") as f:
                assert sha256(f.read()) == sha256(v), k


@pytest.fixture
def two_servers(s3, new_bucket, stub):
    """Bucket A on s3rver (train/ and other/), bucket B on the stub."""
    a = new_bucket("srca")
    objs_a = objs_for("train")
    objs_a.update(objs_for("other", 1, 3))
    put_many(s3, a, sorted(objs_a.items()))
    stub.create_bucket("srcb")
    objs_b = objs_for("val", 2, 10)
    for k, v in objs_b.items():
        stub.put("srcb", k, v)
    return a, objs_a, objs_b


@pytest.mark.san
def test_two_servers_and_a_snapshot_in_one_tree(mounter, s3server, stub, two_servers, tmp_path):
    """train (s3rver, listed), val (the stub, listed), frozen (s3rver, from a
    snapshot): ls shows exactly the three names, every byte is right, and the
    snapshot source sends no LIST after the mount."""
    a, objs_a, objs_b = two_servers
    snap = str(tmp_path / "train.snap")
    cp = mounter.run(["snapshot", "s3://%s/train/" % a, snap] + s3rver_args(s3server.url))
    assert cp.returncode == 0, cp.stderr
    ep_a = "endpoint_url=%s,force_path_style,region=us-east-1" % s3server.url
    ep_b = "endpoint_url=%s,force_path_style" % stub.url
    f = write(tmp_path, "sources", "# two servers, three sources\n"
              "train  s3://%s/train/  %s\n"
              "\n"
              "val\ts3://srcb/val/\t%s\n"
              "frozen s3://%s/train/  %s,snapshot=%s\n" % (a, ep_a, ep_b, a, ep_a, snap))
    m = mounter.mount("--sources=" + f)
    assert sorted(os.listdir(m.path)) == ["frozen", "train", "val"]
    check_source(m.path, "train", objs_a, "train/")
    check_source(m.path, "val", objs_b, "val/")
    stub.reset_counts()
    check_source(m.path, "frozen", objs_a, "train/")
    assert not os.path.exists(m.p("other"))
    with pytest.raises(FileNotFoundError):
        os.stat(m.p("nosuch/x"))
    assert stub.counts.get("list", 0) == 0       # nothing of frozen went to the stub
    # counters: each source's s3 group, and the mount's "s3" is their sum
    st = settled_stats(m)
    assert sorted(st["sources"]) == ["frozen", "train", "val"]
    for key in ("requests", "get_requests", "list_requests", "head_requests", "gets",
                "object_bytes"):
        assert sum(st["sources"][n]["s3"][key] for n in st["sources"]) == st["s3"][key], key
    for n, files in (("frozen", 45), ("train", 45), ("val", 20)):
        assert st["sources"][n]["s3"]["gets"] >= files, n      # each file read once
    assert st["sources"]["frozen"]["s3"]["list_requests"] == 0
    assert st["sources"]["train"]["s3"]["list_requests"] >= 1
    prom = feedfs_stats(m, "--prom")
    lines = [x for x in prom.splitlines() if x.startswith("feedfs_s3_requests_total")]
    assert any('kind="get",source="val"}' in x for x in lines), lines
    assert any(x.endswith('kind="list",source="frozen"} 0') for x in lines), lines


def mount_fails(mounter, sources_file):
    cp = mounter.mount("--sources=" + sources_file, ok=False, text=True)
    assert cp.returncode == 1, (cp.returncode, cp.stderr)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    return lines[0]


def test_bad_sources_files(mounter, s3server, two_servers, tmp_path):
    """Each mistake is one line naming the file and line; nothing mounts."""
    a, _, _ = two_servers
    ep = "endpoint_url=%s,force_path_style,region=us-east-1" % s3server.url
    good = "x s3://%s/train/ %s\n" % (a, ep)
    cases = [
        (good + "x s3://%s/ %s\n" % (a, ep), ":2: duplicate name 'x' (line 1)"),
        ("a/b s3://%s/ %s\n" % (a, ep), ":1: 'a/b' is not a valid name"),
        (".. s3://%s/ %s\n" % (a, ep), ":1: '..' is not a valid name"),
        (good + "# c\ny s3://%s/ %s,colour=blue\n" % (a, ep), ":3: unknown key 'colour'"),
        (good + "z\n", ":2: no URL for 'z'"),
        ("y s3://%s/ %s,max_memory=1G\n" % (a, ep), ":1: unknown key 'max-memory'"),
        ("y ftp://%s/ %s\n" % (a, ep), ":1: 'ftp://%s/': the source is s3://" % a),
        ("# nothing\n\n", ": no sources"),
    ]
    for i, (text, want) in enumerate(cases):
        f = write(tmp_path, "s%d" % i, text)
        line = mount_fails(mounter, f)
        assert line.startswith("feedfs: " + f) and want in line, (text, line)


def test_a_failing_source_names_itself(mounter, s3server, stub, two_servers, tmp_path):
    a, _, _ = two_servers
    ep = "endpoint_url=%s,force_path_style,region=us-east-1" % s3server.url
    f = write(tmp_path, "s", "ok s3://%s/train/ %s\nbad s3://no-such-bucket-34/ %s\n" % (a, ep, ep))
    line = mount_fails(mounter, f)
    assert line.startswith("feedfs: source bad (%s:2): " % f), line
    assert "no-such-bucket-34" in line


def test_restart_survival_across_sources(mounter, s3server, stub, two_servers, tmp_path):
    """kill -9 of the server: the successor re-reads the sources file and
    serves both sources; a file open on each before the kill reads on."""
    a, objs_a, objs_b = two_servers
    f = write(tmp_path, "s", "train s3://%s/train/ endpoint_url=%s,force_path_style,"
              "region=us-east-1\nval s3://srcb/val/ endpoint_url=%s,force_path_style\n"
              % (a, s3server.url, stub.url))
    m = mounter.mount("--sources=" + f)
    fa = open(m.p("train/d1/f03.bin"), "rb")
    fb = open(m.p("val/d0/f07.bin"), "rb")
    try:
        pid = feedfs_stats(m)["pid"]
        os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if feedfs_stats(m)["takeovers"] >= 1:
                    break
            except AssertionError:
                pass                                # between servers
            time.sleep(0.1)
        assert feedfs_stats(m)["takeovers"] == 1
        assert fa.read() == objs_a["train/d1/f03.bin"]
        assert fb.read() == objs_b["val/d0/f07.bin"]
        assert sorted(os.listdir(m.path)) == ["train", "val"]
        check_source(m.path, "val", objs_b, "val/")
    finally:
        fa.close()
        fb.close()


def test_dry_run_checks_every_source(mounter, stub, tmp_path):
    """--dry-run --sources: one ok line per source, or the failing one's line."""
    stub.create_bucket("dr")
    stub.put("dr", "x/a.txt", b"hello")
    ep = "endpoint_url=%s,force_path_style" % stub.url
    f = write(tmp_path, "s", "one s3://dr/x/ %s\ntwo s3://dr/ %s\n" % (ep, ep))
    cp = mounter.run(["--dry-run", "--sources", f])
    assert cp.returncode == 0, cp.stderr
    lines = cp.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("ok: source one: bucket 'dr' prefix 'x/' at %s" % stub.url)
    assert lines[1].startswith("ok: source two: bucket 'dr' prefix '' at %s" % stub.url)
    f = write(tmp_path, "s2", "one s3://dr/x/ %s\ntwo s3://nope/ %s\n" % (ep, ep))
    cp = mounter.run(["--dry-run", "--sources", f])
    assert cp.returncode == 1 and cp.stdout == ""
    # the log's error line (stderr in the foreground) and then the one line
    last = cp.stderr.strip().splitlines()[-1]
    assert last.startswith("feedfs: source two (%s:2): bucket 'nope' does not exist" % f), last


def test_one_cache_dir_for_two_sources_without_collisions(mounter, s3, s3server, stub,
                                                          new_bucket, tmp_path):
    """The same keys (and sizes) in two buckets on two servers, one --cache-dir:
    each source reads its own bytes, and after a remount on the same cache dir
    every byte comes from the cache (no GET to either server), still each
    source's own."""
    from counting_proxy import CountingProxy
    a = new_bucket("cca")
    stub.create_bucket("ccb")
    keys = ["same/f%02d.bin" % i for i in range(12)]
    data_a = {k: content_for("A" + k, 70000 + i) for i, k in enumerate(keys)}
    data_b = {k: content_for("B" + k, 70000 + i) for i, k in enumerate(keys)}
    put_many(s3, a, sorted(data_a.items()))
    for k, v in data_b.items():
        stub.put("ccb", k, v)
    proxy = CountingProxy(s3server.url).start()
    try:
        f = write(tmp_path, "s", "a s3://%s/ endpoint_url=%s,force_path_style,region=us-east-1\n"
                  "b s3://ccb/ endpoint_url=%s,force_path_style\n" % (a, proxy.url, stub.url))
        cache = str(tmp_path / "cache")
        args = ["--cache-dir", cache, "--cache-size", "64M"]

        def read_both(m):
            for k in keys:
                with open(m.p("a/" + k), "rb") as fa, open(m.p("b/" + k), "rb") as fb:
                    assert sha256(fa.read()) == sha256(data_a[k]), k
                    assert sha256(fb.read()) == sha256(data_b[k]), k

        m = mounter.mount("--sources=" + f, args=args)
        read_both(m)
        assert proxy.gets() > 0 and stub.counts.get("get", 0) > 0
        settled_stats(m)
        assert mounter.unmount(m) == []
        proxy.reset()
        stub.reset_counts()
        m = mounter.mount("--sources=" + f, args=args)
        read_both(m)
        st = settled_stats(m)
        # from the cache's blocks, or (as root, Linux 6.9+) from the files
        # promoted out of them and passed through to the kernel
        assert st["cache"]["hits"] + st["fs"]["pt_opens"] >= len(keys), (st["cache"], st["fs"])
        assert proxy.gets() == 0 and stub.counts.get("get", 0) == 0, (proxy.gets(),
                                                                      stub.counts)
    finally:
        proxy.stop()
