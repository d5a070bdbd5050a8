"""feedfs over Ceph RGW, the faithful S3 server: the tree and bytes of an edge-case
bucket, directories that hold only sub-directories (no markers), paged common
prefixes, real SigV4 checks, If-Match -> 412 -> ESTALE, ListObjects V1, IPv6."""

import errno
import os
import random

import pytest

from conftest import content_for
from fsmodel import diff_trees, expected_tree, walk_mount
from servers import RGW_BIG_KEY, RGW_BIG_SIZE, RGW_N_KEYS, RGW_N_PREFIXES, ForwardProxy


def rgw_env(rgw, secret=None):
    return {"AWS_ACCESS_KEY_ID": rgw.access, "AWS_SECRET_ACCESS_KEY": secret or rgw.secret}


def file_sha(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


@pytest.fixture
def edge_mnt(feedfs, rgw, rgw_edge):
    mnt, _ = feedfs.mount("s3://" + rgw_edge.name, rgw.url, env=rgw_env(rgw))
    return mnt


def check_tree(edge, mnt):
    want, _ = expected_tree(edge.listing)
    got = walk_mount(mnt)
    problems = diff_trees(want, got)
    assert not problems, "\n".join(problems)
    assert sum(1 for p in got if p.startswith("many/")) == RGW_N_KEYS
    assert sum(1 for p in got if p.startswith("prefixes/") and p.count("/") == 1) == RGW_N_PREFIXES


def test_tree_matches_bucket(rgw_edge, edge_mnt):
    check_tree(rgw_edge, edge_mnt)


def test_dirs_holding_only_subdirs(rgw_edge, edge_mnt):
    """No marker objects: RGW lists the prefixes, and so must the mount."""
    assert sorted(os.listdir(edge_mnt)) == sorted(
        {k.split("/")[0] for k, _ in rgw_edge.listing})
    assert os.listdir(os.path.join(edge_mnt, "onlydirs")) != []
    assert sorted(os.listdir(os.path.join(edge_mnt, "onlydirs"))) == ["a", "x"]
    assert os.listdir(os.path.join(edge_mnt, "onlydirs/a/b")) == ["c"]
    assert os.path.isdir(os.path.join(edge_mnt, "deep/1/2/3/4/5/6/7"))
    assert len(os.listdir(os.path.join(edge_mnt, "prefixes"))) == RGW_N_PREFIXES


def test_names_and_bytes(rgw_edge, edge_mnt):
    for k, data in rgw_edge.objects.items():
        if k.startswith(("many/", "prefixes/")) and not k.endswith(("00.dat", "00/only.txt")):
            continue        # a sample of the bulk keys is enough
        with open(os.path.join(edge_mnt, k), "rb") as f:
            assert f.read() == data, k


def test_big_object_sha256_and_preads(rgw_edge, edge_mnt):
    p = os.path.join(edge_mnt, RGW_BIG_KEY)
    assert os.stat(p).st_size == RGW_BIG_SIZE
    assert file_sha(p) == rgw_edge.big_sha
    # random preads against the object's own bytes (read back once through S3 by
    # range, not through the mount)
    import hashlib
    rnd = random.Random(7)
    with open(p, "rb", buffering=0) as f:
        whole = b"".join(iter(lambda: f.read(8 << 20), b""))
        assert hashlib.sha256(whole).hexdigest() == rgw_edge.big_sha
        for _ in range(200):
            off = rnd.randrange(0, RGW_BIG_SIZE)
            n = rnd.choice([1, 511, 4096, 65537, 1 << 20])
            assert os.pread(f.fileno(), n, off) == whole[off:off + n]


@pytest.mark.san
def test_wrong_secret_fails_mount(feedfs, rgw, rgw_edge):
    cp = feedfs.mount("s3://" + rgw_edge.name, rgw.url, env=rgw_env(rgw, "not-the-secret"),
                      ok=False)
    assert cp.returncode == 1
    assert "SignatureDoesNotMatch" in cp.stderr and "secret key does not match" in cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_unknown_key_id_fails_mount(feedfs, rgw, rgw_edge):
    env = {"AWS_ACCESS_KEY_ID": "NOSUCHKEYID000000000", "AWS_SECRET_ACCESS_KEY": rgw.secret}
    cp = feedfs.mount("s3://" + rgw_edge.name, rgw.url, env=env, ok=False)
    assert cp.returncode == 1 and "InvalidAccessKeyId" in cp.stderr, cp.stderr


def test_dry_run(feedfs, rgw, rgw_edge):
    cp = feedfs.run(["--dry-run", "s3://%s/many/" % rgw_edge.name, "--endpoint-url", rgw.url],
                    env=rgw_env(rgw))
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith("ok: bucket '%s' prefix 'many/'" % rgw_edge.name)
    assert rgw.secret not in cp.stdout + cp.stderr
    cp = feedfs.run(["--dry-run", "s3://%s" % rgw_edge.name, "--endpoint-url", rgw.url],
                    env=rgw_env(rgw, "wrong"))
    assert cp.returncode == 1 and "SignatureDoesNotMatch" in cp.stderr
    cp = feedfs.run(["--dry-run", "s3://no-such-bucket-feedfs", "--endpoint-url", rgw.url],
                    env=rgw_env(rgw))
    assert cp.returncode == 1 and "does not exist" in cp.stderr


def test_list_v1(feedfs, rgw, rgw_edge):
    mnt, log = feedfs.mount("s3://" + rgw_edge.name, rgw.url, args=["--list-v1"],
                            env=rgw_env(rgw))
    check_tree(rgw_edge, mnt)
    with open(os.path.join(mnt, "special/pct%25.txt"), "rb") as f:
        assert f.read() == rgw_edge.objects["special/pct%25.txt"]
    assert "ListObjects V1" in open(log, errors="replace").read()


@pytest.mark.san
def test_replaced_object_is_estale_never_mixed(feedfs, rgw, rgw_s3, rgw_edge):
    key = "replace/obj.bin"
    size = 24 << 20
    a = content_for("version-a", size)
    b = content_for("version-b", size)
    rgw_s3.put_object(Bucket=rgw_edge.name, Key=key, Body=a)
    mnt, log = feedfs.mount("s3://" + rgw_edge.name, rgw.url, env=rgw_env(rgw),
                            args=["--part-size", "1M", "--metadata-ttl", "0",
                                  "--no-bdi-readahead"])
    p = os.path.join(mnt, key)
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, 4096, 0) == a[:4096]
        rgw_s3.put_object(Bucket=rgw_edge.name, Key=key, Body=b)
        stale = 0
        for off in (20 << 20, 12 << 20, 16 << 20, 0, 4096, 8 << 20):
            try:
                got = os.pread(fd, 65536, off)
            except OSError as e:
                assert e.errno == errno.ESTALE, e
                stale += 1
                continue
            assert got == a[off:off + len(got)], "bytes of version B through an open file at %d" % off
        assert stale >= 1, "reads far from what was fetched must fail with ESTALE"
    finally:
        os.close(fd)
    # a new open sees the new version
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.pread(fd, 65536, 20 << 20) == b[20 << 20:(20 << 20) + 65536]
    finally:
        os.close(fd)
    text = open(log, errors="replace").read()
    assert "412" in text or "PreconditionFailed" in text or "changed" in text


def test_ipv6_endpoint_signed_host(feedfs, rgw, rgw_edge):
    """RGW checks the signature over Host: "[::1]:PORT" must be signed as sent."""
    try:
        px = ForwardProxy(rgw.url, ipv6=True)
    except OSError as e:
        pytest.skip("no IPv6 loopback: %s" % e)
    try:
        mnt, _ = feedfs.mount("s3://%s/special/" % rgw_edge.name, px.url, env=rgw_env(rgw))
        with open(os.path.join(mnt, "plus+sign.txt"), "rb") as f:
            assert f.read() == rgw_edge.objects["special/plus+sign.txt"]
        assert px.count >= 2
    finally:
        px.stop()
