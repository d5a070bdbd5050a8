#!/usr/bin/python3
"""bench/device_small.py — many small files, as an image loader reads them:
feedfs.collate (each file by a READ ioctl into one region-backed batch)
against open + readinto of each file into a preallocated numpy batch.

    bench/device_small.py FEEDFS_BIN [NFILES [FILE_KIB [REPS [BATCH]]]]

Defaults: 4000 files of 110 KiB (about ImageNet's mean), 5 repetitions,
batches of 256. Same warm disk cache and page-cache drop as device_cpu.py,
alternating, median; every batch's bytes are checked against the uploads'
SHA-256 in the warm-up pass. Prints files/s, GB/s and CPU per GiB (this
process and the daemon). Needs root. Timing only; not a test.
"""
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_common import Dataset, median, self_cpu_s  # noqa: E402
import feedfs  # noqa: E402


def main():
    import numpy as np
    binary = os.path.abspath(sys.argv[1])
    nfiles = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    kib = int(sys.argv[3]) if len(sys.argv) > 3 else 110
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    bs = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    ds = Dataset(binary, nfiles, 0, file_bytes=kib * 1024)
    paths = [ds.path(k) for k in ds.files]
    batches = [paths[i:i + bs] for i in range(0, len(paths), bs)]
    size = ds.size

    def plain(batch, check):
        out = np.empty(size * len(batch), dtype=np.uint8)
        mv = memoryview(out)
        for i, p in enumerate(batch):
            with open(p, "rb", buffering=0) as f:
                f.readinto(mv[i * size:(i + 1) * size])
        if check:
            verify(batch, bytes(out))

    def direct(batch, check):
        t, _ = feedfs.collate(batch)
        if check:
            verify(batch, bytes(t.numpy()))

    def verify(batch, data):
        for i, p in enumerate(batch):
            got = hashlib.sha256(data[i * size:(i + 1) * size]).hexdigest()
            assert got == ds.sha[os.path.basename(p)], p

    modes = {"read": plain, "collate": direct}
    res = {m: [] for m in modes}
    try:
        for rep in range(reps + 1):
            for m, fn in (modes.items() if rep % 2 == 0 else reversed(list(modes.items()))):
                ds.drop()
                c0, d0, t0 = self_cpu_s(), ds.daemon_cpu_s(), os.times().elapsed
                for b in batches:
                    fn(b, rep == 0)
                secs = os.times().elapsed - t0
                c1, d1 = self_cpu_s(), ds.daemon_cpu_s()
                gib = size * nfiles / (1 << 30)
                row = (nfiles / secs, size * nfiles / secs / 1e9, (c1 - c0) / gib, (d1 - d0) / gib)
                print("pass %d %-8s %7.0f files/s %.2f GB/s  client %.3f  daemon %.3f s/GiB" %
                      ((rep, m) + row), flush=True)
                if rep:
                    res[m].append(row)
        print()
        print("| path | files/s | GB/s | client CPU s/GiB | daemon CPU s/GiB | total |")
        print("|---|---|---|---|---|---|")
        for m in modes:
            r = [median([x[i] for x in res[m]]) for i in range(4)]
            print("| %s | %.0f | %.2f | %.3f | %.3f | %.3f |" % (
                "open + readinto (numpy batch)" if m == "read" else "feedfs.collate (READ ioctls)",
                r[0], r[1], r[2], r[3], r[2] + r[3]))
    finally:
        ds.close()


if __name__ == "__main__":
    main()
