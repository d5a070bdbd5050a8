#!/usr/bin/python3
"""bench/ab.py — two feedfs binaries side by side on the bench's 2 GiB object.

    [READERS=N] [SEEK=K] bench/ab.py OLD_BIN NEW_BIN [ROUNDS]

For one change to the read path: alternates the two binaries ROUNDS times
(default 3) over the same s3rver and data that `make bench` prepared
(build/bench/data), and prints the median and range of
  cold     a fresh mount, page cache dropped, the whole object read in 1 MiB
           reads (by READERS threads, each its own slice; default 1);
  disk     the same with --cache-dir over a cache filled beforehand, page cache
           dropped (what the NVMe cache alone serves).
With SEEK=K the cold pass is a seeking reader instead: each of READERS threads
reads K MiB from each of 256/READERS seeded random offsets (the same for both
binaries), and "wire" is the bytes the daemon took from the server per byte
read (its unmount stats line); the disk pass is skipped.
With SCRAPE=1 the "new" mounts also get --metrics-addr and /metrics is fetched
once a second during their passes, as a Prometheus server would (pass the same
binary twice to see what scraping costs: `SCRAPE=1 bench/ab.py B B 6`).
Every pass is checked against the manifest's CRC32 of 16 sampled MiB blocks
(with SEEK, of every block read).
Also prints the daemon's CPU-seconds per GiB read (user + system, from /proc),
which is steadier than MB/s on a shared machine. Timing only; not a test.
Needs root (drop_caches, mounts).
"""
import concurrent.futures as cf
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import zlib

import bench  # noqa: E402  (drop_caches and back_memory)

# bench.py's handlers clean up its own mounts; here the finally blocks do.
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATA = os.path.join(ROOT, "build", "bench", "data")
WORK = os.path.join(ROOT, "build", "bench", "ab")
BUCKET, NAME = "large-2048m", "big.bin"
MIB = 1 << 20


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def drop_caches():
    """bench.py's: drops the page cache, then touches memory (see back_memory there)."""
    if not bench.drop_caches():
        raise SystemExit("cannot drop the page cache (root needed)")


def mount(binary, port, mnt, extra):
    os.makedirs(mnt, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_EC2_METADATA_DISABLED="true", ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
    subprocess.run([binary, "s3://" + BUCKET, mnt, "--endpoint-url", "http://127.0.0.1:%d" % port,
                    "--force-path-style", "--region", "us-east-1", "--log-file",
                    os.path.join(WORK, "feedfs.log")] + extra, env=env, check=True)


def daemon_pid(binary):
    return int(subprocess.check_output(["pgrep", "-n", "-f", os.path.basename(binary)]).split()[0])


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def umount(mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    time.sleep(0.5)


READERS = int(os.environ.get("READERS", "1"))


def read_pass(path, samples):
    """MB/s of a sequential 1 MiB read of path by READERS threads, each reading its own
    slice (as bench.py's W1 with 4 readers); checks the sampled blocks."""
    got = {}
    size = os.path.getsize(path)
    nmib = (size + MIB - 1) // MIB
    bounds = [(nmib * i // READERS, nmib * (i + 1) // READERS) for i in range(READERS)]

    def reader(lo, hi):
        n = 0
        with open(path, "rb", buffering=0) as f:
            f.seek(lo * MIB)
            for i in range(lo, hi):
                b = f.read(MIB)
                if not b:
                    break
                if i in samples:
                    got[i] = zlib.crc32(b)
                n += len(b)
        return n

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(READERS) as ex:
        n = sum(ex.map(lambda b: reader(*b), bounds))
    dt = time.monotonic() - t0
    bad = [i for i, c in samples.items() if got.get(i) != c]
    if bad:
        raise SystemExit("WRONG BYTES in %s at MiB %s" % (path, bad[:4]))
    return n / dt / 1e6


SEEK = int(os.environ.get("SEEK", "0"))


def seek_pass(path, crcs):
    """MB/s of READERS threads each streaming SEEK MiB from 256/READERS random
    offsets (seeded) and seeking on; checks every block read."""
    nmib = len(crcs)

    def reader(i):
        rnd = random.Random(1000 + i)
        n, bad = 0, []
        with open(path, "rb", buffering=0) as f:
            for _ in range(256 // READERS):
                blk = rnd.randrange(nmib - SEEK)
                f.seek(blk * MIB)
                for b in range(blk, blk + SEEK):
                    d = f.read(MIB)
                    if zlib.crc32(d) != crcs[b]:
                        bad.append(b)
                    n += len(d)
        return n, bad

    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(READERS) as ex:
        out = list(ex.map(reader, range(READERS)))
    dt = time.monotonic() - t0
    bad = [b for _, bb in out for b in bb]
    if bad:
        raise SystemExit("WRONG BYTES in %s at MiB %s" % (path, bad[:4]))
    return sum(n for n, _ in out), dt


def bytes_in():
    """bytes in of the last s3 stats line in the daemon's log ("bytes_in N" from
    the stats tables; "bytes in N" before them)."""
    last = None
    with open(os.path.join(WORK, "feedfs.log"), errors="replace") as f:
        for line in f:
            if ("bytes in " in line or "bytes_in " in line) and "gets " in line:
                last = line
    tag = "bytes_in " if "bytes_in " in last else "bytes in "
    return int(last.rsplit(tag, 1)[1].split()[0].rstrip(","))


SCRAPE = os.environ.get("SCRAPE") == "1"


class Scraper:
    """GET /metrics once a second until stopped; counts the good answers."""

    def __init__(self, port):
        import threading
        import urllib.request
        self.port, self.n, self.stop_ev = port, 0, threading.Event()

        def run():
            while not self.stop_ev.wait(1.0):
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
                        r.read()
                        self.n += 1
                except OSError:
                    pass
        self.t = threading.Thread(target=run, daemon=True)
        self.t.start()

    def stop(self):
        self.stop_ev.set()
        self.t.join()
        return self.n


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bins = {"old": os.path.abspath(sys.argv[1]), "new": os.path.abspath(sys.argv[2])}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    man = json.load(open(os.path.join(DATA, "manifest-%s.json" % BUCKET)))
    crcs = man["crc_mib"]                      # CRC32 of every MiB of the object
    samples = {i: crcs[i] for i in range(0, len(crcs), max(1, len(crcs) // 16))}
    os.makedirs(WORK, exist_ok=True)
    s3rver = os.path.join(ROOT, "tests", "node_modules", ".bin", "s3rver")
    port = free_port()
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    srv = subprocess.Popen([s3rver, "-d", os.path.join(DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port),
                            "--silent"], env=env, start_new_session=True)
    try:
        time.sleep(3)
        mnt = os.path.join(WORK, "mnt")
        cdir = os.path.join(WORK, "cache")
        shutil.rmtree(cdir, ignore_errors=True)
        cargs = ["--cache-dir", cdir, "--cache-size", "3G"]
        if not SEEK:
            mount(bins["old"], port, mnt, cargs)      # fill the cache once (same format for both)
            read_pass(os.path.join(mnt, NAME), samples)
            umount(mnt)
        kinds = (("cold", []),) if SEEK else (("cold", []), ("disk", cargs))
        wire = {b: [] for b in bins}
        res = {(b, k): [] for b in bins for k in ("cold", "disk")}
        cpu = {(b, k): [] for b in bins for k in ("cold", "disk")}
        gib = man["size"] / (1 << 30)
        for r in range(rounds):
            for b in (("old", "new") if r % 2 == 0 else ("new", "old")):
                for kind, extra in kinds:
                    mport = free_port()
                    scraped = SCRAPE and b == "new"
                    mount(bins[b], port, mnt, extra + (["--metrics-addr", "127.0.0.1:%d" % mport]
                                                       if scraped else []))
                    pid = daemon_pid(bins[b])
                    drop_caches()
                    scraper = Scraper(mport) if scraped else None
                    c0 = cpu_s(pid)
                    if SEEK:
                        nread, dt = seek_pass(os.path.join(mnt, NAME), crcs)
                        v = nread / dt / 1e6
                        c = (cpu_s(pid) - c0) / (nread / (1 << 30))
                    else:
                        v = read_pass(os.path.join(mnt, NAME), samples)
                        c = (cpu_s(pid) - c0) / gib
                    if scraper and scraper.stop() == 0:
                        raise SystemExit("SCRAPE=1: no scrape of /metrics succeeded")
                    umount(mnt)
                    res[(b, kind)].append(v)
                    cpu[(b, kind)].append(c)
                    extra_txt = ""
                    if SEEK:
                        w = bytes_in() / nread
                        wire[b].append(w)
                        extra_txt = "  wire %.2f bytes per byte read" % w
                    print("round %d %-3s %-4s %7.1f MB/s  %.2f cpu-s/GiB%s" % (
                        r + 1, b, kind, v, c, extra_txt), flush=True)
        print("\nmedian (min-max) over %d rounds, %s vs %s:" % (rounds, bins["new"], bins["old"]))
        if SEEK:
            print("  seek K=%d MiB, %d readers: wire old %.2f new %.2f bytes per byte read" % (
                SEEK, READERS, statistics.median(wire["old"]), statistics.median(wire["new"])))
        for kind, _ in kinds:
            o, n = res[("old", kind)], res[("new", kind)]
            print("  %-4s MB/s       old %7.1f (%.0f-%.0f)  new %7.1f (%.0f-%.0f)  new/old %.2f" % (
                kind, statistics.median(o), min(o), max(o), statistics.median(n), min(n), max(n),
                statistics.median(n) / statistics.median(o)))
            o, n = cpu[("old", kind)], cpu[("new", kind)]
            print("  %-4s cpu-s/GiB  old %7.2f (%.2f-%.2f)  new %7.2f (%.2f-%.2f)  new/old %.2f" % (
                kind, statistics.median(o), min(o), max(o), statistics.median(n), min(n), max(n),
                statistics.median(n) / statistics.median(o)))
    finally:
        subprocess.run(["fusermount3", "-u", os.path.join(WORK, "mnt")], capture_output=True)
        srv.terminate()


if __name__ == "__main__":
    main()
