#!/usr/bin/python3
"""bench/ab_epoch.py — two feedfs binaries side by side on the bench's epoch.

    bench/ab_epoch.py OLD_BIN NEW_BIN [ROUNDS] [THREADS]

For a change to the small-file path: alternates the two binaries ROUNDS times
(default 4) over the 20,000 x 100 KiB epoch that `make bench` prepared, each a
fresh mount with the page cache dropped, and reads it as bench.py's W2 cold
pass does (walk, shuffle with a fixed seed, THREADS readers, default 8, sha256
of every file checked against the manifest). Prints files/s and the daemon's
CPU-seconds per 1,000 files, median (min-max), new/old; with STATS=1 also each
round's non-zero `feedfs stats` fs counters. Timing only; not a test.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import ab
import bench

BUCKET = "epoch-20000x100k-100c"


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bins = {"old": os.path.abspath(sys.argv[1]), "new": os.path.abspath(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    man = json.load(open(os.path.join(ab.DATA, "manifest-%s.json" % BUCKET)))
    os.makedirs(ab.WORK, exist_ok=True)
    s3rver = os.path.join(ab.ROOT, "tests", "node_modules", ".bin", "s3rver")
    port = ab.free_port()
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    srv = subprocess.Popen([s3rver, "-d", os.path.join(ab.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port),
                            "--silent"], env=env, start_new_session=True)
    mnt = os.path.join(ab.WORK, "mnt-epoch")
    ab.BUCKET = BUCKET
    res = {b: [] for b in bins}
    cpu = {b: [] for b in bins}
    try:
        time.sleep(3)
        for r in range(rounds):
            for b in (("old", "new") if r % 2 == 0 else ("new", "old")):
                ab.mount(bins[b], port, mnt, [])
                pid = ab.daemon_pid(bins[b])
                ab.drop_caches()
                c0 = ab.cpu_s(pid)
                out = bench.w_epoch(mnt, man, threads, time.monotonic() + 600)
                c = (ab.cpu_s(pid) - c0) / (len(man["files"]) / 1000)
                if os.environ.get("STATS"):
                    st = json.loads(subprocess.run([bins[b], "stats", "--json", mnt],
                                                   capture_output=True, text=True).stdout)
                    print("  %s fs: %s" % (b, {k: v for k, v in st.get("fs", {}).items() if v}))
                ab.umount(mnt)
                if out.get("error") or out.get("value") is None:
                    raise SystemExit("round %d %s: %r" % (r + 1, b, out))
                res[b].append(out["value"])
                cpu[b].append(c)
                print("round %d %-3s %7.1f files/s  %.2f cpu-s per 1k files" % (r + 1, b, out["value"], c),
                      flush=True)
        o, n = res["old"], res["new"]
        print("\nmedian (min-max) over %d rounds, %d threads, %s vs %s:" % (rounds, threads, bins["new"], bins["old"]))
        print("  files/s            old %7.1f (%.0f-%.0f)  new %7.1f (%.0f-%.0f)  new/old %.2f" % (
            statistics.median(o), min(o), max(o), statistics.median(n), min(n), max(n),
            statistics.median(n) / statistics.median(o)))
        o, n = cpu["old"], cpu["new"]
        print("  cpu-s per 1k files old %7.2f (%.2f-%.2f)  new %7.2f (%.2f-%.2f)  new/old %.2f" % (
            statistics.median(o), min(o), max(o), statistics.median(n), min(n), max(n),
            statistics.median(n) / statistics.median(o)))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()


if __name__ == "__main__":
    main()
