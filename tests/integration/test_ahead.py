"""Readahead across files: a loader that reads a directory of small files in
listing order gets the next files fetched before it opens them.

GETs are counted by the counting proxy (with a small per-GET delay, so that
prefetching has something to hide); the daemon's 'ahead' counters, read while
it runs, say how many reads were served from prefetched files. Bytes are
always compared with what was uploaded. Nothing here asserts a time.
"""
# Request counts through the counting proxy are exact here, so every mount
# behind it has hedging off (--hedge-budget 0): a hedge is a second GET of
# the same bytes whenever the loaded machine stalls a response.

import os
import random

import pytest

from conftest import content_for, logged_stats, read_in_threads, settled_stats, unmount
from counting_proxy import CountingProxy

NFILES = 150


def sizes():
    rnd = random.Random(150)
    return {"cls/f%04d.jpg" % i: rnd.randint(20 * 1024, 150 * 1024) for i in range(NFILES)}


SIZES = sizes()


@pytest.fixture(scope="module")
def abucket(s3):
    b = "ahead-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=b)
    for k, n in SIZES.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    s3.put_object(Bucket=b, Key="other/x.bin", Body=content_for("other/x.bin", 1000))
    return b


@pytest.fixture
def proxy(s3server):
    p = CountingProxy(s3server.url).start()
    p.delay_s = 0.005
    yield p
    p.stop()


def ahead_stats(m, proxy):
    """The running daemon's readahead-across-files counters, once the
    prefetches still in flight have finished."""
    st = settled_stats(m, proxy)
    assert "ahead" in st, "no ahead group in the stats of %s" % m.path
    a = st["ahead"]
    return {"wanted": a["wanted"], "fetched": a["issued"], "served": a["hits"] + a["joined"],
            "dropped": a["dropped"], "failed": a["failed"]}


def read_in_order(m, keys, threads):
    """Like a loader: a pool of threads taking the files in this order."""
    return read_in_threads(m, keys, lambda k: content_for(k, SIZES[k]), threads, timeout=120)


def object_gets(proxy):
    with proxy.lock:
        return list(proxy.get_paths)


def gets_per_key(proxy):
    out = {}
    for p in object_gets(proxy):
        k = p.split("/", 2)[-1]
        out[k] = out.get(k, 0) + 1
    return out


def test_listing_order_reads_are_prefetched(mount, abucket, proxy):
    m = mount(abucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    names = sorted(os.listdir(m.p("cls")))
    assert names == sorted(k.split("/")[1] for k in SIZES)
    keys = ["cls/" + n for n in names]
    proxy.reset()
    assert read_in_order(m, keys, threads=4) == []
    per_key = gets_per_key(proxy)
    assert set(per_key) == set(keys), sorted(set(keys) - set(per_key))[:5]
    twice = [k for k, n in per_key.items() if n > 1]
    st = ahead_stats(m, proxy)
    # All but the first few files (the detector needs a streak of opens in
    # order) come from prefetches; a file is fetched twice only when its open
    # raced the prefetch that was about to start.
    assert st["served"] >= NFILES - 20, st
    assert st["failed"] == 0, st
    assert len(twice) <= 4, twice
    assert not unmount(m.path, m.pids)
    # Dropped from the unmount log: the unmount drops (and counts) every
    # prefetched file nobody claimed, and those are waste too.
    dropped = logged_stats(m.log)["ahead"]["dropped"]
    assert dropped >= st["dropped"] and dropped <= len(twice) + 4, (dropped, st)


def test_shuffled_reads_prefetch_nothing(mount, abucket, proxy):
    """One reader in a seeded random order: deterministic, and no opens in a
    row follow the listing, so nothing is fetched that was not asked for."""
    m = mount(abucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    keys = ["cls/" + n for n in sorted(os.listdir(m.p("cls")))]
    random.Random(11).shuffle(keys)
    proxy.reset()
    assert read_in_order(m, keys, threads=1) == []
    per_key = gets_per_key(proxy)
    assert sorted(per_key) == sorted(keys)
    assert all(n == 1 for n in per_key.values()), per_key
    st = ahead_stats(m, proxy)
    assert st["fetched"] == 0 and st["served"] == 0, st
    assert not unmount(m.path, m.pids)


def test_prefetched_files_land_in_the_block_cache(mount, abucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    cargs = ("--cache-dir", cdir, "--cache-size", "256M", "--block-size", "1M")
    m = mount(abucket, "", *cargs, "--hedge-budget", "0", endpoint=proxy.url)
    keys = ["cls/" + n for n in sorted(os.listdir(m.p("cls")))]
    assert read_in_order(m, keys, threads=4) == []
    assert ahead_stats(m, proxy)["served"] >= NFILES - 20
    assert not unmount(m.path, m.pids)
    proxy.reset()
    m2 = mount(abucket, "", *cargs, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_in_order(m2, keys, threads=4) == []
    assert object_gets(proxy) == [], object_gets(proxy)[:5]
