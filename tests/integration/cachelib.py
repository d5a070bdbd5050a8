"""cachelib — what the block-cache tests share (test_cache.py, test_share.py):
the bucket of OBJECTS, the counting proxy in front of s3rver, and helpers to
read everything back and compare it. A pytest plugin (conftest's
pytest_plugins) for the fixtures; a plain module for the rest.
"""

import os
import signal
import subprocess
import time

import pytest

from conftest import content_for, sha256
from counting_proxy import CountingProxy

MIB = 1 << 20
# An explicit size: the default (half the free disk, preallocated) would fill a
# shared test disk quickly.
BS = ["--block-size", "1M", "--cache-size", "64M"]

OBJECTS = {
    "one.bin": 1,
    "small/a.bin": 100 * 1024,
    "small/b.bin": 100 * 1024 + 7,
    "mid.bin": 5 * MIB + 3,
    "big.bin": 13 * MIB,
    "edge.bin": 2 * MIB,
}


@pytest.fixture
def proxy(s3server):
    """A counting proxy (counting_proxy.py) in front of s3rver."""
    p = CountingProxy(s3server.url).start()
    yield p
    p.stop()


@pytest.fixture
def bucket(s3, new_bucket):
    """A fresh bucket holding OBJECTS (content_for bytes)."""
    b = new_bucket("cache")
    for k, n in OBJECTS.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


def drop_page_cache():
    subprocess.run(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass                      # not root: O_DIRECT-free reads still go to FUSE after remount


def read_all(m, keys=OBJECTS):
    out = {}
    for k in keys:
        with open(m.p(k), "rb") as f:
            out[k] = sha256(f.read())
    return out


def expected(keys=OBJECTS):
    return {k: sha256(content_for(k, OBJECTS[k])) for k in keys}


def expected_for(sizes):
    return {k: sha256(content_for(k, n)) for k, n in sizes.items()}


def kill_9(m):
    """SIGKILL the daemon, wait for it to be gone, detach its dead mount."""
    for pid in m.pids:
        os.kill(pid, signal.SIGKILL)
    for pid in m.pids:
        for _ in range(200):
            if not os.path.exists("/proc/%d" % pid):
                break
            time.sleep(0.05)
    subprocess.run(["fusermount3", "-uz", m.path], capture_output=True)
