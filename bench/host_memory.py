#!/usr/bin/python3
"""bench/host_memory.py — what memory the host takes back costs a cold pass here.

    bench/host_memory.py FEEDFS_BIN [ROUNDS]

On this VM the guest's freed memory goes back to the host within seconds, and
the next first touch of such a page is slow. Prints, first, the rate of writing
6 GiB to a tmpfs file in 512 MiB steps three times: 12 s after dropping the page
cache, right after (the pages just freed), and 12 s later again. Then, ROUNDS
times (default 3), over the s3rver and data that `make bench` prepared: curl with
8 MiB ranges 4 at a time (the best sequential ceiling here) and a `dd bs=1M` of
the 2 GiB object through a fresh feedfs mount, each from a dropped page cache,
once 12 s after the last pass (the host has taken the memory back) and once
right after 6 GiB were written and freed (bench.back_memory). Timing only; not
a test. Needs root.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ab  # noqa: E402  (paths, mount, umount)
import bench  # noqa: E402  (back_memory, the curl ceiling)

MIB = 1 << 20


def drop():
    """Only the page cache: this probe backs memory (or not) itself."""
    if not bench.drop_page_cache():
        raise SystemExit("cannot drop the page cache (root needed)")


def tmpfs_rates(gib=6):
    path = "/dev/shm/feedfs-host-memory-probe"
    buf = b"\x5a" * MIB
    rates, fd = [], os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        t = time.monotonic()
        for i in range(gib * 1024):
            os.write(fd, buf)
            if i % 512 == 511:
                now = time.monotonic()
                rates.append(512 * MIB / 1e6 / (now - t))
                t = now
    finally:
        os.close(fd)
        os.unlink(path)
    return " ".join("%.0f" % r for r in rates)


def main():
    binary = os.path.abspath(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    drop()
    time.sleep(12)
    print("tmpfs write, MB/s per 512 MiB, 12 s after a drop:  " + tmpfs_rates(), flush=True)
    print("                       right after the above:      " + tmpfs_rates(), flush=True)
    time.sleep(12)
    print("                       12 s later:                 " + tmpfs_rates(), flush=True)

    port = ab.free_port()
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    srv = subprocess.Popen([os.path.join(ab.ROOT, "tests/node_modules/.bin/s3rver"), "-d",
                            os.path.join(ab.DATA, "s3rver"), "-a", "127.0.0.1", "-p", str(port), "--silent"],
                           env=env, start_new_session=True, stdout=subprocess.DEVNULL)
    os.makedirs(ab.WORK, exist_ok=True)
    mnt = os.path.join(ab.WORK, "mnt")
    url = "http://127.0.0.1:%d/%s/%s" % (port, ab.BUCKET, ab.NAME)
    size = 2048 * MIB

    def curl(backed):
        drop()
        if backed:
            bench.back_memory()
        return bench.ceil_ranges(url, size, 8 * MIB, 4, 600)["value"]

    def dd(backed):
        ab.mount(binary, port, mnt, [])
        try:
            drop()
            if backed:
                bench.back_memory()
            t0 = time.monotonic()
            subprocess.run(["dd", "if=" + os.path.join(mnt, ab.NAME), "of=/dev/null", "bs=1M"],
                           stderr=subprocess.DEVNULL, check=True)
            return size / 1e6 / (time.monotonic() - t0)
        finally:
            ab.umount(mnt)

    try:
        time.sleep(3)
        for r in range(rounds):
            out = {}
            for name, fn in (("curl", curl), ("feedfs", dd)):
                time.sleep(12)
                out[name, 0] = fn(False)
                out[name, 1] = fn(True)
            print("round %d  12 s idle: curl x4 %4.0f MB/s, feedfs %4.0f (%.0f%%)   memory backed: "
                  "curl x4 %4.0f, feedfs %4.0f (%.0f%%)" % (
                      r + 1, out["curl", 0], out["feedfs", 0], 100 * out["feedfs", 0] / out["curl", 0],
                      out["curl", 1], out["feedfs", 1], 100 * out["feedfs", 1] / out["curl", 1]), flush=True)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()


main()
