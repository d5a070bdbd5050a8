#!/usr/bin/python3
"""bench/thread_cpu.py — a cold sequential read's CPU, thread by thread, two binaries.

    bench/thread_cpu.py OLD_BIN NEW_BIN [ROUNDS]

Over the s3rver and data that `make bench` prepared (build/bench/data), alternates
the two binaries ROUNDS times (default 3): a fresh mount, the page cache dropped,
`dd bs=1M` of the 2 GiB object. Prints MB/s and the daemon's CPU-seconds per GiB
(user + system, from /proc/PID/task/*/stat): in total, of its busiest thread (the
http thread on a cold read) and of all the others (mostly the FUSE workers), and
their medians. Timing only; not a test; does not verify bytes (ab.py does).
Needs root (drop_caches, mounts).
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (the A/B helper: paths, mount, umount, drop_caches)

GIB = 1 << 30


def thread_cpu(pid):
    """{tid: CPU-seconds} of every thread of pid."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        f = open("/proc/%d/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()
        out[t] = (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bins = [os.path.abspath(b) for b in sys.argv[1:3]]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    size = os.path.getsize(os.path.join(ab.DATA, "s3rver", ab.BUCKET, ab.NAME + "._S3rver_object"))
    os.makedirs(ab.WORK, exist_ok=True)
    port = ab.free_port()
    srv = subprocess.Popen([os.path.join(ab.ROOT, "tests", "node_modules", ".bin", "s3rver"), "-d",
                            os.path.join(ab.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port), "--silent"],
                           env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"),
                           start_new_session=True, stdout=subprocess.DEVNULL)
    mnt = os.path.join(ab.WORK, "mnt")
    res = {b: [] for b in bins}
    try:
        time.sleep(3)
        for r in range(rounds):
            for b in (bins if r % 2 == 0 else bins[::-1]):
                ab.mount(b, port, mnt, [])
                pid = ab.daemon_pid(b)
                ab.drop_caches()
                c0, t0 = thread_cpu(pid), time.monotonic()
                subprocess.run(["dd", "if=" + os.path.join(mnt, ab.NAME), "of=/dev/null", "bs=1M"],
                               check=True, capture_output=True)
                dt, c1 = time.monotonic() - t0, thread_cpu(pid)
                ab.umount(mnt)
                d = sorted((c1[t] - c0.get(t, 0) for t in c1), reverse=True)
                row = (size / dt / 1e6, sum(d) / (size / GIB), d[0] / (size / GIB), sum(d[1:]) / (size / GIB))
                res[b].append(row)
                print("round %d %-22s %6.1f MB/s  total %.2f  busiest thread %.2f  others %.2f cpu-s/GiB" % (
                    (r + 1, os.path.basename(b)) + row), flush=True)
        for b in bins:
            m = [statistics.median(x[i] for x in res[b]) for i in range(4)]
            print("median %-22s %6.1f MB/s  total %.2f  busiest %.2f  others %.2f" % ((os.path.basename(b),) + tuple(m)))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()


if __name__ == "__main__":
    main()
