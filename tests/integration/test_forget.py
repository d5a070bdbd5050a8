"""Lookups after the kernel forgot the nodes (drop_caches, memory pressure):
within --metadata-ttl they are answered from what the daemon already knows,
with no request to the store, even for directories whose parent holds more
keys than one listing page (no complete listing of the parent is cached, so
only the daemon's record of "this name is a directory" can answer). Needs
root (drop_caches); runs in the serial pass (run.sh) because drop_caches
takes the entries of every mount on the machine.
"""

import os
import subprocess
import sys
import time

import pytest

from mounter import ROOT, feedfs_stats, s3rver_args

sys.path.insert(0, os.path.join(ROOT, "bench"))
import synth_s3  # noqa: E402

# 1,200 keys under all/d000NN/ (synth_s3 --names nested): neither the root's
# nor all/'s listing fits one page, so no lookup ever caches either.
DIRS, FILES = 12, 100

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="drop_caches needs root")


@pytest.fixture
def synth():
    s = synth_s3.SynthS3(DIRS, FILES, names="nested").start()
    yield s
    s.stop()


def forget_all(m):
    """Make the kernel forget every entry and inode it can, then wait until
    the daemon has had the FORGETs (only the root is left)."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2\n")
    for _ in range(100):
        if feedfs_stats(m)["fs"]["live_inodes"] == 1:
            return
        time.sleep(0.1)
    pytest.fail("the kernel kept entries: %d live nodes" % feedfs_stats(m)["fs"]["live_inodes"])


def stat_all(m, keys):
    """(inode, size) of every file, looked up by path; every size by the
    endpoint's formula."""
    out = {}
    for i in range(keys.n):
        k = keys.key(i).decode()
        st = os.stat(m.p(k))
        assert st.st_size == keys.size(k.encode()), k
        out[k] = (st.st_ino, st.st_size)
    return out


@pytest.mark.san
def test_directories_are_known_again_without_a_listing(mounter, synth):
    keys = synth.keys
    m = mounter.mount("s3://synth/", s3rver_args(synth.url) + ["--metadata-ttl", "600"])
    first = stat_all(m, keys)
    assert len(first) == DIRS * FILES
    lists = synth.snapshot().get("list", 0)
    assert lists >= DIRS, "every directory was listed once: %d lists" % lists

    forget_all(m)
    before = feedfs_stats(m)["fs"]
    again = stat_all(m, keys)
    after = feedfs_stats(m)["fs"]
    assert again == first
    assert synth.snapshot().get("list", 0) == lists, "a lookup after the forget listed again"
    assert synth.snapshot().get("head", 0) == 0
    # all/ from the record of directories, all/d000NN/ from their listings.
    assert after["dir_hits"] - before["dir_hits"] == DIRS + 1
    assert after["lookups_remote"] == before["lookups_remote"]


def test_known_directories_expire_with_the_metadata_ttl(mounter, synth):
    keys = synth.keys
    m = mounter.mount("s3://synth/", s3rver_args(synth.url) + ["--metadata-ttl", "2"])
    stat_all(m, keys)
    lists = synth.snapshot().get("list", 0)
    time.sleep(2.5)
    forget_all(m)
    before = feedfs_stats(m)["fs"]
    stat_all(m, keys)
    after = feedfs_stats(m)["fs"]
    assert after["dir_hits"] == before["dir_hits"], "an expired directory was still known"
    assert synth.snapshot().get("list", 0) >= lists + DIRS + 1
