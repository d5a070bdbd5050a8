"""Fixtures for the feedfs integration tests: a real FUSE mount over a local S3 server.

Session scope: one s3rver (tests/node_modules/.bin/s3rver) on a free 127.0.0.1 port
with its data in a temporary directory, and the populated buckets. Function scope:
`mount` and everything else that starts feedfs comes from mounter.py (one Mounter
a test: watchdog, $FEEDFS_WRAP, unmount and sanitizer-report check at teardown);
each mount logs to its own --log-file, attached to the report of a failing test.
"""

import hashlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

# Tests talk to 127.0.0.1 only. A feedfs whose credential chain found nothing
# would otherwise go on to the real instance-metadata addresses: switch those
# providers off for every daemon started from here, and keep the user's own
# ~/.aws files out of the tests.
os.environ.update({
    "AWS_EC2_METADATA_DISABLED": "true",
    "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/feedfs-tests/credentials",
    "AWS_CONFIG_FILE": "/nonexistent/feedfs-tests/config",
})
for _v in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
           "AWS_WEB_IDENTITY_TOKEN_FILE", "ALIBABA_CLOUD_ROLE_ARN", "AWS_PROFILE"):
    os.environ.pop(_v, None)
from concurrent.futures import ThreadPoolExecutor

import pytest

# Fixtures of other modules, for every test: the one way feedfs is started
# (mounter.py), the RGW / credential / TLS servers (servers.py), the block
# cache's bucket and counting proxy (cachelib.py).
pytest_plugins = ["mounter", "servers", "cachelib"]
# conftest imports from them before pytest loads them as plugins: have their
# asserts rewritten all the same.
pytest.register_assert_rewrite(*pytest_plugins)

# Many test modules import these from here; they live where they are used.
from fsmodel import add_quirk2_markers  # noqa: E402
from mounter import (ACCESS_KEY, REGION, ROOT, SECRET_KEY, Mount, feedfs_stats,  # noqa: E402,F401
                     is_mounted, logged_stats, pid_alive, pids_of_mount, run_feedfs, settled_stats,
                     unmount)

S3RVER = os.path.join(ROOT, "tests", "node_modules", ".bin", "s3rver")


# ---------------------------------------------------------------- helpers

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port():
    """A port nothing listens on (bound then released; nothing else binds in between)."""
    return free_port()


def content_for(key, size):
    """Deterministic bytes for a key: what is uploaded and what the mount must return."""
    if size == 0:
        return b""
    return hashlib.shake_256(key.encode("utf-8")).digest(size)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def read_in_threads(m, keys, want, threads=4, timeout=180):
    """Like a loader's workers: `threads` threads taking the files of mount m
    in the order of keys, by path (no walk first), each read whole and
    compared with want(key). Returns the keys whose bytes were wrong; fails
    the test when a reader hangs."""
    it = iter(keys)
    lock = threading.Lock()
    bad = []

    def worker():
        while True:
            with lock:
                k = next(it, None)
            if k is None:
                return
            with open(m.p(k), "rb") as f:
                got = f.read()
            if sha256(got) != sha256(want(k)):
                bad.append(k)

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
    assert not any(t.is_alive() for t in ts), "readers hung"
    return bad


def node_needs_legacy_provider():
    """--openssl-legacy-provider exists from Node 17 (OpenSSL 3); older Node refuses it."""
    try:
        out = subprocess.run(["node", "-p", "process.versions.node"], capture_output=True,
                             text=True, timeout=30).stdout
        return int(out.split(".")[0]) >= 17
    except Exception:
        return True


class S3Server:
    """One s3rver process; `url` is its endpoint."""

    def __init__(self, workdir, binary=S3RVER):
        if not os.access(binary, os.X_OK):
            pytest.exit("s3rver not found at %s: run tests/deps.sh" % binary, returncode=3)
        self.datadir = os.path.join(workdir, "s3rver-data")
        os.makedirs(self.datadir, exist_ok=True)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.logpath = os.path.join(workdir, "s3rver.log")
        env = dict(os.environ)
        if node_needs_legacy_provider():
            # s3rver's ListObjectsV2 continuation token uses DES (quirk 1).
            env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
        self.logf = open(self.logpath, "wb")
        self.proc = subprocess.Popen(
            [binary, "-d", self.datadir, "-a", "127.0.0.1", "-p", str(self.port), "--silent"],
            stdout=self.logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("s3rver exited with %s: %s" % (self.proc.returncode, self.log_tail()))
            try:
                with urllib.request.urlopen(self.url + "/", timeout=2) as r:
                    r.read()
                break
            except urllib.error.HTTPError:
                break                       # it answers (an S3 error is an answer)
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("s3rver did not answer on %s: %s" % (self.url, self.log_tail()))
                time.sleep(0.1)

    def log_tail(self, n=4000):
        try:
            with open(self.logpath, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.logf.close()


def make_client(endpoint, secret=SECRET_KEY, pool=64):
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=secret,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=pool,
                      retries={"max_attempts": 5, "mode": "standard"}))


def put_many(client, bucket, items, threads=32):
    """items: iterable of (key, bytes). Uploads in parallel; raises on the first failure."""
    def one(kv):
        client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1])
    with ThreadPoolExecutor(threads) as ex:
        for _ in ex.map(one, items):
            pass


def list_all(client, bucket, prefix=""):
    """[(key, size)] of every object, no delimiter (what the model is computed from)."""
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out.append((o["Key"], o["Size"]))
    return out


@pytest.fixture(scope="session")
def session_dir():
    d = tempfile.mkdtemp(prefix="feedfs-it-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def s3server(session_dir):
    srv = S3Server(session_dir)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def s3(s3server):
    return make_client(s3server.url)


@pytest.fixture
def stub():
    """A fresh in-memory S3 stub (see s3stub.py) for cases s3rver cannot serve."""
    from s3stub import S3Stub
    st = S3Stub().start()
    yield st
    st.stop()


_bucket_seq = [0]


@pytest.fixture
def new_bucket(s3):
    """Creates a fresh, uniquely named bucket on s3rver."""
    def make(stem="t"):
        _bucket_seq[0] += 1
        name = "%s-%d-%d" % (stem, os.getpid() % 100000, _bucket_seq[0])
        s3.create_bucket(Bucket=name)
        return name
    return make


# ---------------------------------------------------------------- the edge-case bucket

def long_key(total, seg=200, head="long1024/"):
    """A key of exactly `total` bytes made of ASCII segments of at most `seg` bytes."""
    parts, n = [], len(head)
    i = 0
    while True:
        room = total - n
        if room <= seg:
            parts.append(("L%d" % i).ljust(room, "l"))
            break
        parts.append(("S%d" % i).ljust(seg, "s"))
        n += seg + 1
        i += 1
        if total - n < 3:         # keep the last segment meaningful
            raise ValueError("bad total")
    k = head + "/".join(parts)
    assert len(k.encode()) == total, len(k.encode())
    return k


EDGE_NAMES = [
    "数据/训练集/图片 01.jpg", "数据/训练集/图片 02.jpg", "数据/验证集/标签.txt",
    "emoji/😀 smile.txt", "emoji/🚀/rocket.bin",
    "accents/cafe\u0301.txt", "accents/caf\u00e9.txt",      # NFD and NFC: two names
    "special/sp ace.txt", "special/two  spaces .txt", "special/plus+sign.txt",
    "special/pct%.txt", "special/pct%25.txt", "special/pct%2F.txt", "special/hash#.txt",
    "special/eq=amp&.txt", "special/semi;colon.txt", "special/q?mark.txt",
    "special/quote'\".txt", "special/angle<>.txt", "special/tilde~star*.txt",
    "special/back\\slash.txt", "special/colon:at@.txt", "special/comma,bang!.txt",
    "special/brace{}[]().txt", "special/dollar$caret^.txt", "special/tab\tname.txt",
    "special/-leading-dash", "special/.hidden", "special/..dots", "special/trailingdot.",
    "withmarker/a.txt", "withmarker/sub/b.txt", "withmarker/sub/c.txt",
    "shadow", "shadow/child", "shadowm", "top.txt",
]
EDGE_MARKERS = ["emptydir/", "withmarker/", "shadowm/", "nested/emptysub/"]
DEEP = ["d%d" % i for i in range(1, 9)]
BIG_KEY = "big/big.bin"
BIG_SIZE = 300 * 1024 * 1024
N_MANY = 1500
N_PREFIXES = 2000


def edge_objects():
    """{key: bytes} for everything in the edge bucket except the big object."""
    objs = {}
    for i, k in enumerate(EDGE_NAMES):
        objs[k] = content_for(k, 100 + 997 * i)
    for k in EDGE_MARKERS:
        objs[k] = b""
    objs["empty.bin"] = b""
    objs["seg233/" + "n" * 230 + ".ok"] = content_for("seg233", 4321)   # s3rver's limit (quirk 7)
    objs[long_key(1024)] = content_for("long1024", 777)
    # depth 8, with a marker at each level (quirk 2: s3rver drops prefixes that hold only prefixes)
    for i in range(1, len(DEEP) + 1):
        objs["/".join(DEEP[:i]) + "/"] = b""
    objs["/".join(DEEP) + "/leaf.txt"] = content_for("deep", 8888)
    for i in range(N_MANY):
        k = "many/f%05d.dat" % i
        objs[k] = content_for(k, (i * 131) % 3000)
    for i in range(N_PREFIXES):
        k = "prefixes/p%04d/only.txt" % i
        objs[k] = content_for(k, 64 + i % 50)
    # quirk 2: markers for the directories that hold only sub-directories; the
    # stub test covers the rest
    add_quirk2_markers(objs)
    # sizes around typical part / block edges
    for n in (1, 4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 1, 8 << 20, (8 << 20) + 3):
        k = "sizes/%d.bin" % n
        objs[k] = content_for(k, n)
    return objs


# keys s3rver may refuse or fold: we upload what it takes and model what it lists.
EDGE_MAYBE = ["a//b", "./dot", "../dotdot", "p/./q", "p/../q", "/leading"]


def make_big_file(path, size=BIG_SIZE):
    """Random bytes streamed to disk (kept for the session: the reference copy).
    Returns the sha256."""
    h = hashlib.sha256()
    chunk = 8 << 20
    with open(path, "wb") as f:
        left = size
        while left:
            b = os.urandom(min(chunk, left))
            h.update(b)
            f.write(b)
            left -= len(b)
    return h.hexdigest()


class EdgeBucket:
    def __init__(self, name, objects, big_path, big_sha, listing, refused):
        self.name = name
        self.objects = objects            # key -> bytes (small ones)
        self.big_path = big_path
        self.big_sha = big_sha
        self.listing = listing            # [(key, size)] as s3rver lists it
        self.refused = refused            # keys s3rver would not store

    def expected(self, path):
        """bytes a mount must return for a relative path (small objects only)."""
        return self.objects[path]


@pytest.fixture(scope="session")
def edge(s3, session_dir):
    from boto3.s3.transfer import TransferConfig
    name = "edge"
    s3.create_bucket(Bucket=name)
    objs = edge_objects()
    big_path = os.path.join(session_dir, "big.bin")
    big_sha = make_big_file(big_path)
    big_err = []

    def upload_big():
        try:
            s3.upload_file(big_path, name, BIG_KEY, Config=TransferConfig(
                multipart_threshold=1 << 40, max_concurrency=1))
        except Exception as e:  # noqa: BLE001 - reported below
            big_err.append(e)
    t = threading.Thread(target=upload_big)
    t.start()
    put_many(s3, name, sorted(objs.items()))
    refused = []
    for k in EDGE_MAYBE:
        try:
            s3.put_object(Bucket=name, Key=k, Body=content_for(k, 10))
        except Exception:  # noqa: BLE001 - s3rver refuses some of these (quirk 7)
            refused.append(k)
    t.join()
    if big_err:
        raise big_err[0]
    listing = list_all(s3, name)
    yield EdgeBucket(name, objs, big_path, big_sha, listing, refused)


@pytest.fixture(scope="session")
def edge_sha(edge, s3):
    """key -> sha256 of what was uploaded, for every listed object."""
    out = {k: sha256(v) for k, v in edge.objects.items()}
    out[BIG_KEY] = edge.big_sha
    # keys s3rver folded (e.g. './dot'): hash what it serves under the listed name
    for k, _ in edge.listing:
        if k not in out:
            out[k] = sha256(s3.get_object(Bucket=edge.name, Key=k)["Body"].read())
    return out
