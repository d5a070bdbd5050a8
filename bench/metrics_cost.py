#!/usr/bin/python3
"""bench/metrics_cost.py — what one scrape of /metrics costs the daemon.

    bench/metrics_cost.py [BIN] [SCRAPES]

Mounts the bench's 2 GiB object (the data `make bench` prepared) with
--cache-dir and --metrics-addr, reads it once (so every counter group and
histogram has values), then fetches /metrics SCRAPES times (default 2000) back
to back and prints the daemon's CPU-seconds per scrape (user + system, from
/proc) and the bytes of one answer. At one scrape a second that is the share
of one CPU that scraping takes, whatever the workload; compare it with the
daemon's CPU per second during the sequential read (bench/ab.py prints
cpu-s/GiB). Timing only; not a test. Needs root (mounts).
"""
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import ab

MIB = 1 << 20


def main():
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ab.ROOT, "build", "feedfs"))
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    os.makedirs(ab.WORK, exist_ok=True)
    s3rver = os.path.join(ab.ROOT, "tests", "node_modules", ".bin", "s3rver")
    port, mport = ab.free_port(), ab.free_port()
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    srv = subprocess.Popen([s3rver, "-d", os.path.join(ab.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port),
                            "--silent"], env=env, start_new_session=True)
    mnt = os.path.join(ab.WORK, "mnt")
    cdir = os.path.join(ab.WORK, "cache-metrics")
    try:
        time.sleep(3)
        shutil.rmtree(cdir, ignore_errors=True)
        ab.mount(binary, port, mnt, ["--cache-dir", cdir, "--cache-size", "3G",
                                     "--metrics-addr", "127.0.0.1:%d" % mport])
        pid = ab.daemon_pid(binary)
        t0, c0 = time.monotonic(), ab.cpu_s(pid)
        nbytes = ab.read_pass(os.path.join(mnt, ab.NAME), {}) and os.path.getsize(os.path.join(mnt, ab.NAME))
        read_s, read_cpu = time.monotonic() - t0, ab.cpu_s(pid) - c0
        url = "http://127.0.0.1:%d/metrics" % mport
        size = len(urllib.request.urlopen(url, timeout=5).read())
        c0, t0 = ab.cpu_s(pid), time.monotonic()
        for _ in range(n):
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
        wall, cpu = time.monotonic() - t0, ab.cpu_s(pid) - c0
        ab.umount(mnt)
        per = cpu / n
        print("binary %s" % binary)
        print("read of %.0f MiB: %.1f s, daemon %.2f CPU-s (%.2f CPUs busy on average)"
              % (nbytes / MIB, read_s, read_cpu, read_cpu / read_s))
        print("%d scrapes of %d bytes in %.2f s: daemon %.3f CPU-s, %.3f ms of CPU per scrape"
              % (n, size, wall, cpu, per * 1e3))
        print("one scrape a second: %.4f%% of one CPU; %.4f%% of the daemon's CPU during that read"
              % (per * 100, per / (read_cpu / read_s) * 100))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()


if __name__ == "__main__":
    main()
