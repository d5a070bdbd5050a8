#!/usr/bin/python3
"""bench/server_cpu.py — where the cold sequential read loses to the server ceiling.

    bench/server_cpu.py FEEDFS_BIN[,FEEDFS_BIN2...] [ROUNDS] [FEEDFS OPTIONS...]
    COLD=1 bench/server_cpu.py ...      (every measurement from a dropped page cache)
    ONE=1 bench/server_cpu.py ...       (the curl side is one stream only)

Over the s3rver and data that `make bench` prepared (build/bench/data), with the
server's page cache WARM (the object is read once first, so the disk is out of the
picture), alternates ROUNDS times (default 2): curl with 8 long ranges (the bench's
ceiling), curl with 8 MiB ranges 8 and 4 at a time (feedfs's request pattern), and
a `dd bs=1M` of the object through a fresh feedfs mount (of each binary given, in
turn; the order alternates between rounds). With ONE=1 the curl side is one
stream over the whole object instead (the "one curl stream" a cold sequential
read is held to), and the medians of the rounds are printed. Prints MB/s, the server's
CPU (% of one core and CPU-seconds per GiB served), feedfs's CPU and how busy the
machine was (iowait apart). With COLD=1 each measurement starts from a dropped page
cache instead, as the bench's cold passes do, so s3rver reads its disk. Timing only; not a test; does not verify bytes (bench.py and ab.py do).
Needs root (mounts).
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (the A/B helper: paths, mount, umount)
import bench  # noqa: E402  (its sequential ceilings)

OBJ = os.path.join(ab.DATA, "s3rver", ab.BUCKET, ab.NAME + "._S3rver_object")
SIZE = os.path.getsize(OBJ)


COLD = os.environ.get("COLD", "") not in ("", "0")
ONE = os.environ.get("ONE", "") not in ("", "0")


def tot():
    """(all, idle, iowait) CPU-seconds of the machine so far."""
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    hz = os.sysconf("SC_CLK_TCK")
    return sum(v) / hz, v[3] / hz, v[4] / hz


def curl_pass(res):
    """res: what bench.py's ceil_seq / ceil_ranges returned; a failed curl ends the probe."""
    if res["error"]:
        sys.exit("curl: %s" % res["error"])


def measure(name, node, fn, fp=None):
    if COLD:
        ab.drop_caches()
    c0, f0 = ab.cpu_s(node), (ab.cpu_s(fp) if fp else 0)
    t0, i0, w0 = tot()
    m0 = time.monotonic()
    fn()
    el = time.monotonic() - m0
    t1, i1, w1 = tot()
    dn = ab.cpu_s(node) - c0
    df = (ab.cpu_s(fp) - f0) if fp else 0
    gib = SIZE / (1 << 30)
    r = (SIZE / el / 1e6, 100 * dn / el, dn / gib, 100 * df / el,
         100 * ((t1 - t0) - (i1 - i0) - (w1 - w0)) / el, 100 * (w1 - w0) / el)
    print("%-22s %5.0f MB/s  node %3.0f%%  node %.2f cpu-s/GiB  feedfs %3.0f%%  busy %3.0f%%/200"
          "  iowait %3.0f%%" % ((name,) + r), flush=True)
    return r


def main():
    binaries = sys.argv[1].split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    if not COLD:
        subprocess.run(["cat", OBJ], stdout=subprocess.DEVNULL)      # server page cache warm
    port = ab.free_port()
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    srv = subprocess.Popen([os.path.join(ab.ROOT, "tests/node_modules/.bin/s3rver"), "-d",
                            os.path.join(ab.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port), "--silent"],
                           env=env, start_new_session=True)
    os.makedirs(ab.WORK, exist_ok=True)
    mnt = os.path.join(ab.WORK, "mnt")
    url = "http://127.0.0.1:%d/%s/%s" % (port, ab.BUCKET, ab.NAME)
    try:
        time.sleep(3)
        node = int(subprocess.check_output(["pgrep", "-n", "node"]).split()[0])
        p8 = 8 << 20
        got = {}
        for r in range(rounds):
            if ONE:
                got.setdefault("curl 1 stream", []).append(
                    measure("curl 1 stream", node, lambda: curl_pass(bench.ceil_seq(url, SIZE, 1, 600))))
            else:
                measure("curl 8 long ranges", node, lambda: curl_pass(bench.ceil_seq(url, SIZE, 8, 600)))
                measure("curl 8MiB ranges x8", node, lambda: curl_pass(bench.ceil_ranges(url, SIZE, p8, 8, 600)))
                measure("curl 8MiB ranges x4", node, lambda: curl_pass(bench.ceil_ranges(url, SIZE, p8, 4, 600)))
            for binary in (binaries if r % 2 == 0 else binaries[::-1]):
                ab.mount(binary, port, mnt, sys.argv[3:])
                fp = ab.daemon_pid(binary)
                name = "feedfs dd bs=1M" if len(binaries) == 1 else "dd " + os.path.basename(binary)
                got.setdefault(name, []).append(measure(
                    name, node, lambda: subprocess.run(["dd", "if=" + os.path.join(mnt, ab.NAME), "of=/dev/null",
                                                        "bs=1M"], stderr=subprocess.DEVNULL), fp))
                ab.umount(mnt)
        if ONE:
            import statistics
            base = statistics.median(x[0] for x in got["curl 1 stream"])
            print("\nmedian over %d rounds (MB/s, ratio to curl 1 stream; feedfs cpu-s/GiB):" % rounds)
            for name, rows in got.items():
                mbs = statistics.median(x[0] for x in rows)
                fcpu = statistics.median(x[3] / 100 * (SIZE / x[0] / 1e6) / (SIZE / (1 << 30)) for x in rows)
                print("  %-24s %6.0f MB/s  %.2fx  feedfs %.2f cpu-s/GiB" % (name, mbs, mbs / base, fcpu))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()


main()
