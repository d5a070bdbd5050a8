#!/usr/bin/python3
"""train_reader.py MNT MANIFEST — what a data loader does, through the mount.

Walks the tree (os.walk), reads every image with 8 threads as a DataLoader would,
checks each size against the manifest, then reads the shard sequentially. Prints
files/s and MB/s. Exit status 1 when anything is missing or has the wrong size.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor


def read_file(path, bufsize=1 << 20):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bufsize)
            if not b:
                return n
            n += len(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mnt")
    ap.add_argument("manifest")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--verify-shard", action="store_true", help="also sha256 the shard")
    a = ap.parse_args()
    with open(a.manifest) as f:
        manifest = json.load(f)
    bad = []

    t0 = time.monotonic()
    images = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(a.mnt, "train")):
        dirnames.sort()
        for n in sorted(filenames):
            images.append(os.path.join(dirpath, n))
    walk_s = time.monotonic() - t0
    want = sorted(k for k in manifest if k.startswith("train/"))
    got = sorted(os.path.relpath(p, a.mnt) for p in images)
    if got != want:
        bad.append("walk: %d files, manifest has %d" % (len(got), len(want)))
    print("  walk: %d files in %d class folders, %.2fs" % (
        len(images), len({os.path.dirname(p) for p in images}), walk_s), flush=True)

    lock = threading.Lock()
    total = [0]

    def one(path):
        n = read_file(path)
        key = os.path.relpath(path, a.mnt)
        if key not in manifest or manifest[key]["size"] != n:
            with lock:
                bad.append("%s: read %d bytes, want %s" % (key, n, manifest.get(key, {}).get("size")))
        with lock:
            total[0] += n

    t0 = time.monotonic()
    with ThreadPoolExecutor(a.threads) as ex:
        list(ex.map(one, images))
    dt = time.monotonic() - t0
    print("  images: %d files, %.1f MB in %.2fs with %d threads: %.0f files/s, %.1f MB/s" % (
        len(images), total[0] / 1e6, dt, a.threads, len(images) / dt, total[0] / 1e6 / dt), flush=True)

    shard_keys = sorted(k for k in manifest if k.startswith("shards/"))
    for key in shard_keys:
        path = os.path.join(a.mnt, key)
        t0 = time.monotonic()
        h = hashlib.sha256() if a.verify_shard else None
        n = 0
        with open(path, "rb", buffering=0) as f:
            while True:
                b = f.read(8 << 20)
                if not b:
                    break
                n += len(b)
                if h:
                    h.update(b)
        dt = time.monotonic() - t0
        if n != manifest[key]["size"]:
            bad.append("%s: read %d bytes, want %d" % (key, n, manifest[key]["size"]))
        if h and h.hexdigest() != manifest[key]["sha256"]:
            bad.append("%s: sha256 differs" % key)
        print("  shard %s: %.1f MB in %.2fs sequential: %.1f MB/s" % (key, n / 1e6, dt, n / 1e6 / dt), flush=True)

    if bad:
        print("FAILED: %d problems" % len(bad), file=sys.stderr)
        for b in bad[:20]:
            print("  " + b, file=sys.stderr)
        return 1
    print("  all %d files have the sizes in the manifest" % (len(images) + len(shard_keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
