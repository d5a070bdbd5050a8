#!/usr/bin/python3
"""bench/random_ab.py — random 4 KiB O_DIRECT reads from the disk cache, two binaries.

    bench/random_ab.py OLD_BIN NEW_BIN [ROUNDS] [SECONDS]    (root; make all first)

Over bench/passthrough.py's data (build/bench/pt, made on first use), mounts
both binaries at once with --passthrough=off (the slab path, not a promoted
file), each with its own disk cache, reads the 256 MiB object once whole
through each (a stream: the cache then holds it as whole blocks) and checks
its sha256 against the local copy. Then ROUNDS (default 3) rounds, each mount
in turn: page cache dropped, SECONDS (default 4) of single-threaded random
4 KiB reads at 4 KiB-aligned offsets with O_DIRECT (every read reaches the
daemon), each compared with the local copy. Prints IOPS, wrong reads (must be
0), slab bytes read per read (cache_read_bytes_total{from="disk"}) and S3 GETs
(must be 0). With REGION_MIB=N the reads fall in the object's first N MiB
only (a reader concentrated on a few blocks). Timing only; not a test.
"""
import hashlib
import mmap
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import passthrough as pt  # noqa: E402  (data, drop)
import pt_ab  # noqa: E402  (mount, stats)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bins = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    secs = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
    port = 19000 + os.getpid() % 1000
    srv = pt.start_s3rver(port)
    mnts = {w: os.path.join(pt.WORK, "mnt-r" + w.lower()) for w in bins}
    region = int(os.environ.get("REGION_MIB", "0")) << 20
    try:
        time.sleep(3)
        pt.prepare(port)
        local = open(os.path.join(pt.LOCAL, "big.bin"), "rb").read()
        digest = hashlib.sha256(local).digest()
        for w in bins:
            cache = os.path.join(pt.WORK, "cache-r" + w.lower())
            subprocess.run(["rm", "-rf", cache], check=True)
            pt_ab.mount(bins[w], mnts[w], port, cache, ["--passthrough=off"])
            with open(os.path.join(mnts[w], pt.BIG), "rb") as f:
                if hashlib.sha256(f.read()).digest() != digest:
                    raise SystemExit("%s: wrong bytes in the first read" % w)
        time.sleep(2)
        buf = mmap.mmap(-1, 4096)
        for r in range(n):
            for w in bins:
                pt.drop(3)
                s0 = pt_ab.stats(bins[w], mnts[w])
                fd = os.open(os.path.join(mnts[w], pt.BIG), os.O_RDONLY | os.O_DIRECT)
                rng = random.Random(1000 + r)
                reads = bad = 0
                t0 = time.monotonic()
                while time.monotonic() - t0 < secs:
                    off = rng.randrange((region or len(local)) // 4096) * 4096
                    got = os.preadv(fd, [buf], off)
                    bad += buf[:got] != local[off:off + got] or got != 4096
                    reads += 1
                el = time.monotonic() - t0
                os.close(fd)
                s1 = pt_ab.stats(bins[w], mnts[w])
                disk = s1["cache"]["bytes_from_disk"] - s0["cache"]["bytes_from_disk"]
                print("round %d %s: %.0f IOPS, %d reads, %d wrong, %.0f KiB from the slab per "
                      "read, %d S3 GETs" % (r + 1, w, reads / el, reads, bad,
                                           disk / reads / 1024,
                                           s1["s3"]["gets"] - s0["s3"]["gets"]), flush=True)
    finally:
        for w in bins:
            subprocess.run(["fusermount3", "-u", mnts[w]], capture_output=True)
        os.killpg(srv.pid, 15)


if __name__ == "__main__":
    main()
