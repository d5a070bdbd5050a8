"""The on-disk block cache through a real mount (--cache-dir).

GETs are counted by a small proxy (counting_proxy.py) between feedfs and s3rver;
the cache's own counters are read from the running daemon (`feedfs stats --json`)
once they settled.
Blocks are 1 MiB here so that a few MiB of data spans many blocks. No timing is
asserted: sleeps only wait out a TTL.
"""
# Request counts through the counting proxy are exact here, so every mount
# behind it has hedging off (--hedge-budget 0): a hedge is a second GET of
# the same bytes whenever the loaded machine stalls a response.

import os
import subprocess
import threading
import time

import pytest

from cachelib import (BS, MIB, OBJECTS, drop_page_cache, expected, expected_for,  # noqa: F401
                      kill_9, read_all)
from conftest import content_for, settled_stats, sha256, unmount


def cache_stats(m, proxy=None):
    """The cache's counters from the running daemon, once they stopped moving
    (write-behind and readahead still in flight could add to them)."""
    st = settled_stats(m, proxy)
    assert "cache" in st, "no cache group in the stats of %s" % m.path
    return st["cache"]


def umount(m):
    problems = unmount(m.path, m.pids)
    assert not problems, problems


def test_bytes_equal_source_and_second_mount_makes_zero_gets(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m1 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m1) == expected()
    assert proxy.gets() > 0
    st = cache_stats(m1, proxy)
    assert st["misses"] > 0 and st["checksum_failures"] == 0
    umount(m1)

    drop_page_cache()
    proxy.reset()
    m2 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m2) == expected()
    # random reads across block edges, from disk too
    with open(m2.p("big.bin"), "rb") as f:
        src = content_for("big.bin", OBJECTS["big.bin"])
        for off in (0, MIB - 5, 3 * MIB + 17, 13 * MIB - 9):
            f.seek(off)
            assert f.read(4096) == src[off:off + 4096]
    assert proxy.gets() == 0, proxy.get_paths
    st = cache_stats(m2, proxy)
    assert st["hits"] > 0 and st["inner_fetches"] == 0
    umount(m2)


def test_flipped_bytes_in_slab_are_refetched(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m1 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m1) == expected()
    umount(m1)
    slab = os.path.join(cdir, "slab")
    used = 0
    unit = 4096                  # records are packed on 4 KiB boundaries: hit them all
    with open(slab, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        for at in range(10, size, unit):
            f.seek(at)
            b = f.read(1)
            f.seek(at)
            f.write(bytes([b[0] ^ 0xFF]))
            used += 1
    assert used > 0
    drop_page_cache()
    proxy.reset()
    m2 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m2) == expected()
    assert proxy.gets() > 0
    st = cache_stats(m2, proxy)
    assert st["checksum_failures"] > 0
    umount(m2)


def test_eviction_under_small_cache_keeps_bytes_right(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(bucket, "", "--cache-dir", cdir, *BS, "--cache-size", "4M", "--hedge-budget", "0", endpoint=proxy.url)
    for _ in range(2):
        assert read_all(m) == expected()
        drop_page_cache()
    st = cache_stats(m, proxy)
    assert st["evictions"] > 0
    assert st["pages"] == 4
    assert st["bytes_used"] <= 4 << 20
    umount(m)


@pytest.mark.san
def test_many_small_files_share_pages_and_second_mount_makes_zero_gets(
        mount, s3, new_bucket, proxy, tmp_path):
    # 60 files of ~30 KiB in 8 pages of 1 MiB: packed 8 to a page, all of them
    # stay (one file a block would keep only 8).
    b = new_bucket("packed")
    keys = {"imgs/%02d/图像 %03d.jpg" % (i % 5, i): 30 * 1024 + 37 * i for i in range(60)}
    for k, n in keys.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    cdir = str(tmp_path / "cache")
    # The second mount must read every file from the slab: with passthrough
    # on, files promoted by the first mount would be read by the kernel
    # instead (test_passthrough.py covers that path).
    args = ("--cache-dir", cdir, "--block-size", "1M", "--cache-size", "8M", "--passthrough=off")
    m1 = mount(b, "", *args, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m1, keys) == expected_for(keys)
    st = cache_stats(m1, proxy)
    assert st["blocks_used"] == 60 and st["evictions"] == 0, st
    umount(m1)
    drop_page_cache()
    proxy.reset()
    m2 = mount(b, "", *args, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m2, keys) == expected_for(keys)
    assert proxy.gets() == 0, proxy.get_paths[:5]
    st = cache_stats(m2, proxy)
    assert st["hits"] == 60 and st["checksum_failures"] == 0, st
    umount(m2)


@pytest.mark.san
def test_random_reads_fetch_pieces_not_blocks(mount, bucket, proxy, tmp_path):
    # 4 KiB reads scattered over a 13 MiB object fetch 128 KiB pieces; a block a
    # read would be 1 MiB each. The pieces are cached: a second mount re-reads
    # them with no GET at all.
    cdir = str(tmp_path / "cache")
    src = content_for("big.bin", OBJECTS["big.bin"])
    # Ascending, 1.5 MiB apart, from 1.5 MiB: each read is random to the
    # detector (more than 1 MiB past the last), so no stream starts.
    offs = [k * 1536 * 1024 + (k * 7919 * 4099) % 65536 for k in range(1, 9)]

    def pass_(m):
        fd = os.open(m.p("big.bin"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            for o in offs:
                assert os.pread(fd, 4096, o) == src[o:o + 4096], o
        finally:
            os.close(fd)

    m1 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    pass_(m1)
    assert 0 < proxy.get_bytes <= len(offs) * 256 * 1024, (proxy.get_bytes, len(offs))
    st = cache_stats(m1, proxy)
    assert st["pieces"] >= len(offs) and st["checksum_failures"] == 0, st
    umount(m1)
    drop_page_cache()
    proxy.reset()
    m2 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    pass_(m2)
    assert proxy.gets() == 0, proxy.get_paths[:5]
    umount(m2)


def test_changed_object_is_fetched_anew(mount, s3, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(bucket, "", "--cache-dir", cdir, *BS, "--metadata-ttl", "1", "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m, ["mid.bin"]) == expected(["mid.bin"])
    new = content_for("mid.bin v2", OBJECTS["mid.bin"])       # same size, new bytes
    s3.put_object(Bucket=bucket, Key="mid.bin", Body=new)
    time.sleep(2.5)                                          # outlive --metadata-ttl
    with open(m.p("mid.bin"), "rb") as f:
        got = f.read()
    assert sha256(got) == sha256(new)
    umount(m)


def test_kill_9_then_restart_keeps_a_valid_cache(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m1 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m1) == expected()
    time.sleep(0.5)                                          # let write-behind land (not required)
    kill_9(m1)
    drop_page_cache()
    proxy.reset()
    m2 = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    assert read_all(m2) == expected()
    umount(m2)
    with open(m2.log, errors="replace") as f:
        assert "recovered after a crash" in f.read()


@pytest.mark.tsan
def test_concurrent_readers_of_one_block_make_one_get(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(bucket, "", "--cache-dir", cdir, "--cache-size", "64M",  # 4 MiB blocks
              endpoint=proxy.url)
    proxy.reset()
    proxy.delay_s = 0.5
    want = sha256(content_for("edge.bin", OBJECTS["edge.bin"]))
    got, start = [], threading.Barrier(8)

    def reader():
        start.wait()
        with open(m.p("edge.bin"), "rb") as f:
            got.append(sha256(f.read()))
    ts = [threading.Thread(target=reader) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert got == [want] * 8
    assert proxy.gets("edge.bin") == 1, proxy.get_paths
    umount(m)


@pytest.mark.parametrize("args,needle", [
    (["--cache-size", "2M"], "too small"),
    (["--block-size", "3M"], "power of two"),
    # 4 x 8 MiB parts + a sixth of 36 MiB in 1 MiB blocks (6) + 16 pieces of 128 KiB (2)
    (["--max-memory", "36M"], "at least 4 x --part-size + 8 MiB of cache io buffers (40 MiB)"),
])
def test_bad_cache_options_fail_with_one_line(mount, bucket, tmp_path, args, needle):
    cp = mount(bucket, "", "--cache-dir", str(tmp_path / "c"), *BS, *args, ok=False)
    err = cp.stderr.decode()
    assert cp.returncode in (1, 2) and needle in err, err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("mem,io_mib,budget_mib", [
    ([], 80, 368),                    # default 512 MiB: 64 MiB of blocks + 16 of pieces,
                                      # 64 MiB (an eighth) of metadata
    (["--max-memory", "40M"], 8, 32),  # the smallest a cache mount with 8 MiB parts takes
], ids=["default", "40M"])
def test_cache_io_buffers_come_out_of_max_memory(mount, bucket, tmp_path, mem, io_mib, budget_mib):
    # Readahead gets what the cache's io buffers and the metadata share leave
    # of --max-memory (never less than 4 parts: the 40M case), and
    # reads still return the right bytes.
    m = mount(bucket, "", "--cache-dir", str(tmp_path / "c"), *BS, *mem)
    assert read_all(m) == expected()
    umount(m)
    with open(m.log, errors="replace") as f:
        log = f.read()
    want = "io buffers %d MiB of --max-memory, readahead budget %d MiB" % (io_mib, budget_mib)
    assert want in log, log
    # Readahead of all streams shares 64 MiB per CPU of that budget; a stream a quarter.
    cap = min(64 * os.cpu_count(), budget_mib)
    want = "readahead: up to %d MiB per stream, %d MiB for all streams together (%d CPUs), " \
           "of a %d MiB budget" % (min(64, cap // 4), cap, os.cpu_count(), budget_mib)
    assert want in log, log


def test_cache_dir_under_a_file_fails(mount, bucket, tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"x")
    cp = mount(bucket, "", "--cache-dir", str(f / "c"), ok=False)
    err = cp.stderr.decode()
    assert cp.returncode == 1 and "cache dir" in err, err


def test_warm_then_read_makes_zero_gets(mount, bucket, proxy, tmp_path):
    cdir = str(tmp_path / "cache")
    m = mount(bucket, "", "--cache-dir", cdir, *BS, "--hedge-budget", "0", endpoint=proxy.url)
    cp = subprocess.run([m.binary, "warm", "--jobs", "3", m.p("small"), m.p("big.bin"),
                         m.p("mid.bin")], capture_output=True, timeout=120)
    assert cp.returncode == 0, cp.stderr.decode()
    assert b"4/4 files" in cp.stdout, cp.stdout
    proxy.reset()
    keys = ["small/a.bin", "small/b.bin", "big.bin", "mid.bin"]
    assert read_all(m, keys) == expected(keys)
    assert proxy.gets() == 0, proxy.get_paths
    umount(m)


def test_bdi_readahead_raised_as_root(mount, bucket, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root")
    m = mount(bucket, "", "--cache-dir", str(tmp_path / "c"), *BS)
    st = os.stat(m.path)
    path = "/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev), os.minor(st.st_dev))
    for _ in range(100):                 # the daemon sets it just after INIT
        with open(path) as f:
            kb = int(f.read())
        if kb >= 1024:
            break
        time.sleep(0.05)
    assert kb >= 1024


def test_warm_takes_every_name_a_key_can_have(mount, s3, new_bucket, proxy, tmp_path):
    """The control socket's W verb carries the path's length, so names with a newline,
    a tab or CJK characters are warmed like any other (given alone, and found by a
    walk): every byte is then read from the cache, with no GET."""
    b = new_bucket("warmnames")
    names = ["nl/a\nb.bin", "nl/tab\there.bin", "nl/数据 集.bin", "nl/plain.bin"]
    for k in names:
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, 3 * MIB + 5))
    m = mount(b, "", "--cache-dir", str(tmp_path / "cache"), *BS, "--hedge-budget", "0",
              endpoint=proxy.url)
    cp = subprocess.run([m.binary, "warm", m.p(names[0])], capture_output=True, timeout=120)
    assert cp.returncode == 0 and b"1/1 files" in cp.stdout, (cp.stdout, cp.stderr)
    cp = subprocess.run([m.binary, "warm", m.p("nl")], capture_output=True, timeout=120)
    assert cp.returncode == 0 and b"4/4 files" in cp.stdout, (cp.stdout, cp.stderr)
    proxy.reset()
    for k in names:
        with open(m.p(k), "rb") as f:
            assert sha256(f.read()) == sha256(content_for(k, 3 * MIB + 5)), k
    assert proxy.gets() == 0, proxy.get_paths
    umount(m)
