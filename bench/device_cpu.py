#!/usr/bin/python3
"""bench/device_cpu.py — the CPU side of the device-feed path: the
shared-memory path (READ ioctls into a registered region) against read(2)
into the same region, from the same warm disk cache.

    bench/device_cpu.py FEEDFS_BIN [NFILES [FILE_MIB [REPS [CHUNK_MIB]]]]

Defaults: 16 files of 32 MiB, 5 repetitions, 4 MiB per call. The two modes
alternate (read, shm, read, shm, ...; the first pass of each is dropped as a
warm-up of the region's pages), the kernel's pages of the FUSE files are
dropped before every pass (device_common.py), and each pass's bytes are
checked against the SHA-256 of what was uploaded (outside the timing).
Prints one line per pass and a table of medians: GB/s, and CPU seconds per
GiB of this process, of the daemon, and both. Needs root (FUSE, fadvise is
enough for the page cache). Timing only; not a test.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_common import MIB, Dataset, median, self_cpu_s  # noqa: E402
from feedfs import device as fdev  # noqa: E402


def main():
    binary = os.path.abspath(sys.argv[1])
    nfiles = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    file_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    chunk = (int(sys.argv[5]) if len(sys.argv) > 5 else 4) * MIB
    ds = Dataset(binary, nfiles, file_mib)
    try:
        ch = fdev.Channel(ds.mnt)
        region = ch.region(ds.size)
        view = region.view
        lib = ch.lib

        def pass_read(k):
            with open(ds.path(k), "rb", buffering=0) as f:
                at = 0
                while at < ds.size:
                    n = f.readinto(view[at:at + chunk])
                    if not n:
                        break
                    at += n
            return at

        def pass_shm(k):
            fd = os.open(ds.path(k), os.O_RDONLY)
            try:
                at = 0
                while at < ds.size:
                    n = lib.feedfs_read_host(fd, region.id, at, at, min(chunk, ds.size - at))
                    if n <= 0:
                        if n < 0:
                            raise OSError(-n, os.strerror(-n))
                        break
                    at += n
            finally:
                os.close(fd)
            return at

        modes = {"read": pass_read, "shm": pass_shm}
        res = {m: [] for m in modes}
        for rep in range(reps + 1):
            for m, fn in (modes.items() if rep % 2 == 0 else reversed(list(modes.items()))):
                ds.drop()
                c0, d0 = self_cpu_s(), ds.daemon_cpu_s()
                t0 = os.times().elapsed
                total = 0
                for k in ds.files:
                    total += fn(k)
                secs = os.times().elapsed - t0
                c1, d1 = self_cpu_s(), ds.daemon_cpu_s()
                # Verify (untimed): the last file's bytes are in the region.
                assert total == ds.size * nfiles, (m, total)
                assert hashlib.sha256(view).hexdigest() == ds.sha[ds.files[-1]], m
                gib = total / (1 << 30)
                row = (total / secs / 1e9, (c1 - c0) / gib, (d1 - d0) / gib)
                print("pass %d %-5s %.2f GB/s  client %.3f s/GiB  daemon %.3f s/GiB" %
                      ((rep, m) + row), flush=True)
                if rep:
                    res[m].append(row)
        print()
        print("| path | GB/s (median of %d) | client CPU s/GiB | daemon CPU s/GiB | total CPU s/GiB |"
              % reps)
        print("|---|---|---|---|---|")
        for m in modes:
            g = median([r[0] for r in res[m]])
            c = median([r[1] for r in res[m]])
            d = median([r[2] for r in res[m]])
            print("| %s | %.2f | %.3f | %.3f | %.3f |" % (
                "read(2) into the region" if m == "read" else "READ ioctl into the region",
                g, c, d, c + d))
        region.free()
        ch.close()
    finally:
        ds.close()


if __name__ == "__main__":
    main()
