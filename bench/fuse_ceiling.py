#!/usr/bin/python3
"""bench/fuse_ceiling.py — how much of the disk-cache targets FUSE itself leaves.

    bench/fuse_ceiling.py [ROUNDS]

The issue's disk-cache targets compare feedfs, a FUSE daemon, with the kernel
reading a local file. This probe puts a third reader between them: the fastest a
FUSE daemon can serve the same local files, `build/bench/fuse_ceiling`
(bench/fuse_ceiling.c, a passthrough with feedfs's connection settings), with
the same kernel readahead feedfs sets for itself (read_ahead_kb = 8192). In
alternating order, ROUNDS times (default 3), each pass from a dropped page cache
(bench.drop_caches: drop, then back memory):
  local         the files on local disk (bench's local-disk ceiling)
  fuse-splice   fuse_ceiling: replies spliced from the file's page cache
  fuse-direct   fuse_ceiling --direct: O_DIRECT pread + one copy in the daemon,
                the shape of feedfs's slab read (no page cache of the source)
  feedfs-disk   feedfs --cache-dir over a cache filled beforehand
on W1 (the 2 GiB object, 1 reader, 1 MiB reads: MB/s) and W2 (20,000 x 100 KiB,
os.walk + shuffled reads by 8 threads, sha256 each: files/s), and W2 once more
on the same mount with the page cache warm (W2warm), using bench.py's own
w_seq and w_epoch over the data `make bench` prepared (build/bench/data).
Before each pass the tree is walked once, then the page cache is dropped: as in
make bench, whose disk pass follows the cold and warm passes on the same mount,
feedfs's listings are then still fresh (--metadata-ttl) and the timed walk
costs no LIST; the file data all comes from disk.
Timing only, not a test. Needs root.
"""
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

import bench

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

WORK = os.path.join(bench.WORK, "ceiling")
SETS = {"W1": "large-2048m", "W2": "epoch-20000x100k-100c"}


def readahead_kb(mnt):
    st = os.stat(mnt)
    with open("/sys/class/bdi/%d:%d/read_ahead_kb" % (os.major(st.st_dev), os.minor(st.st_dev))) as f:
        return int(f.read())


def wait_mounted(mnt, proc):
    for _ in range(100):
        if os.path.ismount(mnt):
            return
        if proc.poll() is not None:
            raise SystemExit("fuse_ceiling exited with %d" % proc.returncode)
        time.sleep(0.05)
    raise SystemExit("fuse_ceiling did not mount %s" % mnt)


class Probe:
    def __init__(self, src, flags):
        self.src, self.flags = src, flags

    def __enter__(self):
        self.mnt = os.path.join(WORK, "mnt-probe")
        os.makedirs(self.mnt, exist_ok=True)
        self.proc = subprocess.Popen([bench.PASSTHROUGH, "--readahead-kb", str(bench.PASSTHROUGH_READAHEAD_KB)] +
                                     self.flags + [self.src, self.mnt])
        wait_mounted(self.mnt, self.proc)
        for _ in range(100):        # the probe sets it once INIT is answered
            if readahead_kb(self.mnt) == bench.PASSTHROUGH_READAHEAD_KB:
                break
            time.sleep(0.01)
        return self.mnt

    def __exit__(self, *a):
        bench.unmount(self.mnt)
        self.proc.wait(timeout=10)


class Feedfs:
    def __init__(self, port, bucket, extra=()):
        self.port, self.bucket, self.extra = port, bucket, list(extra)

    def __enter__(self):
        self.mnt = os.path.join(WORK, "mnt-feedfs")
        os.makedirs(self.mnt, exist_ok=True)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
                   AWS_EC2_METADATA_DISABLED="true", ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
        subprocess.run([bench.FEEDFS, "s3://" + self.bucket, self.mnt, "--endpoint-url",
                        "http://127.0.0.1:%d" % self.port, "--force-path-style", "--region", "us-east-1",
                        "--cache-dir", os.path.join(WORK, "cache-" + self.bucket), "--cache-size", "6G",
                        "--log-file", os.path.join(WORK, "feedfs.log")] + self.extra, env=env, check=True)
        return self.mnt

    def __exit__(self, *a):
        bench.unmount(self.mnt)
        time.sleep(0.5)


def walk(root):
    for _ in os.walk(root):
        pass


def run_pass(w, root, man):
    deadline = time.monotonic() + 240
    if w == "W1":
        return bench.w_seq(root, man, 1, deadline)["value"]
    return bench.w_epoch(root, man, 8, deadline)["value"]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    if not os.access(bench.PASSTHROUGH, os.X_OK):
        raise SystemExit("build it first: make build/bench/fuse_ceiling")
    mans = {w: json.load(open(os.path.join(bench.DATA, "manifest-%s.json" % b))) for w, b in SETS.items()}
    os.makedirs(WORK, exist_ok=True)
    port = bench.free_port()
    s3rver = os.path.join(bench.ROOT, "tests", "node_modules", ".bin", "s3rver")
    srv = subprocess.Popen([s3rver, "-d", os.path.join(bench.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port),
                            "--silent"], env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"),
                           start_new_session=True)
    res = {}
    try:
        if not bench.wait_port(port, srv):
            raise SystemExit("s3rver did not start")
        for w, b in SETS.items():            # fill each cache once
            shutil.rmtree(os.path.join(WORK, "cache-" + b), ignore_errors=True)
            with Feedfs(port, b) as mnt:
                run_pass(w, mnt, mans[w])
        kinds = ["local", "fuse-splice", "fuse-direct", "feedfs-disk"]
        for r in range(rounds):
            order = kinds if r % 2 == 0 else kinds[::-1]
            for w, b in SETS.items():
                src = os.path.join(bench.LOCAL, b)
                for k in order:
                    if k == "local":
                        ctx = contextlib.nullcontext(src)
                    elif k == "feedfs-disk":
                        ctx = Feedfs(port, b)
                    else:
                        ctx = Probe(src, ["--direct"] if k == "fuse-direct" else [])
                    with ctx as root:
                        walk(root)
                        bench.drop_caches()
                        got = {w: run_pass(w, root, mans[w])}
                        if w == "W2":
                            got["W2warm"] = run_pass(w, root, mans[w])
                    for ww, v in got.items():
                        res.setdefault((ww, k), []).append(v)
                        print("round %d %-6s %-12s %9.1f %s" % (r + 1, ww, k, v, "MB/s" if ww == "W1" else "files/s"),
                              flush=True)
        print("\nmedian (min-max) over %d rounds; ratio to local and to fuse-splice:" % rounds)
        for w in ("W1", "W2", "W2warm"):
            loc = statistics.median(res[(w, "local")])
            spl = statistics.median(res[(w, "fuse-splice")])
            for k in kinds:
                v = res[(w, k)]
                m = statistics.median(v)
                print("  %-6s %-12s %9.1f (%.0f-%.0f)  %.2fx local  %.2fx fuse-splice" % (
                    w, k, m, min(v), max(v), m / loc, m / spl))
    finally:
        for m in ("mnt-probe", "mnt-feedfs"):
            bench.unmount(os.path.join(WORK, m))
        srv.terminate()


if __name__ == "__main__":
    main()
