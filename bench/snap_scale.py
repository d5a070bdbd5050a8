#!/usr/bin/env python3
"""snap_scale — a mount from a snapshot against a listed mount, side by side in one run.

Over bench/synth_s3.py (DIRS x FILES computed keys), in this order:

  plain_listing   a plain paginated ListObjectsV2 client, the whole flat listing
  snapshot_take   `feedfs snapshot s3://synth/ FILE` (its size per key is reported)
  file_read       reading FILE once (sha256 of every byte; page cache warm, as on a node
                  that just fetched it)
  listed          a listed mount: find -type f, cold (skipped with --no-listed)
  empty           a mount from a snapshot of an empty prefix: its peak RSS is the baseline
  snap            the mount from FILE: seconds from start to mounted, then find -type f
                  cold and warm, then READS random files by path with every byte checked

each with seconds, the endpoint's request counts (LIST, HEAD, GET) and the daemon's
peak RSS (VmHWM, which counts the mapped snapshot's pages) and its anonymous and
file-backed RSS after each step; the ratios the issue sets targets for are computed from the same run. Timing
is reported, never asserted; counts and bytes are asserted.

    python3 bench/snap_scale.py --dirs 1000 --files 1000 --max-memory 64M \\
        --out bench/results/snap-1m.json
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from scale import (counts, cpu_of, delta, plain_listing, serving_pid,  # noqa: E402
                   start_synth, synth_s3, timed, wrong_files)


def mem_of(pid):
    """MiB: VmHWM and VmRSS, and RSS split into anonymous (the heap: what
    --max-memory bounds) and file-backed (the mapped snapshot: page cache,
    shared and reclaimable, counted in RSS while mapped)."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:", "RssAnon:", "RssFile:")):
                out[line.split(":")[0]] = int(line.split()[1]) // 1024
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--max-memory", default="64M")
    ap.add_argument("--reads", type=int, default=100)
    ap.add_argument("--no-listed", action="store_true", help="skip the listed mount's walk")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "feedfs"))
    ap.add_argument("--out")
    a = ap.parse_args()

    srv, port = start_synth(a.dirs, a.files, "short")
    keys = synth_s3.Keys(a.dirs, a.files, "short")
    ep = ["--endpoint-url", "http://127.0.0.1:%d" % port, "--force-path-style",
          "--region", "us-east-1"]
    res = {"keys": keys.n, "dirs": a.dirs, "files": a.files, "max_memory": a.max_memory}
    tmp = tempfile.mkdtemp(prefix="feedfs-snapscale.")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    snap = os.path.join(tmp, "synth.snap")
    mounted = []

    def mount(name, extra, source="s3://synth/"):
        mnt = os.path.join(tmp, name)
        os.mkdir(mnt)
        argv = [a.bin, source, mnt, "--max-memory", a.max_memory, "--metadata-ttl", "3600",
                "--log-file", os.path.join(tmp, name + ".log")] + ep + extra
        t0 = time.monotonic()
        subprocess.run(argv, check=True, env=env, timeout=600)
        s = round(time.monotonic() - t0, 2)
        mounted.append(mnt)
        return mnt, serving_pid(a.bin, mnt), s

    def unmount(mnt):
        subprocess.run(["fusermount3", "-u", mnt], check=True)
        mounted.remove(mnt)

    def walk(mnt, pid, name):
        c0, u0 = counts(port), cpu_of(pid)
        out, s = timed(lambda: subprocess.run(["find", mnt, "-type", "f"], capture_output=True,
                                              check=True).stdout.count(b"\n"))
        assert out == keys.n, (name, out, keys.n)
        return {"s": s, "requests": delta(c0, counts(port)), "cpu_s": round(cpu_of(pid) - u0, 2),
                **mem_of(pid)}

    try:
        n, pages, secs = plain_listing(port)
        assert n == keys.n, (n, keys.n)
        res["plain_listing"] = {"s": round(secs, 2), "pages": pages}

        c0 = counts(port)
        cp, s = timed(lambda: subprocess.run([a.bin, "snapshot", "s3://synth/", snap] + ep,
                                             env=env, capture_output=True, text=True,
                                             timeout=3600))
        assert cp.returncode == 0, cp.stderr
        size = os.path.getsize(snap)
        names = sum(len(keys.key(i)) for i in range(0, keys.n, max(1, keys.n // 100000)))
        names = names * keys.n // len(range(0, keys.n, max(1, keys.n // 100000)))
        res["snapshot_take"] = {"s": s, "requests": delta(c0, counts(port)), "bytes": size,
                                "bytes_per_key": round(size / keys.n, 2),
                                "key_bytes_per_key": round(names / keys.n, 2)}

        def read_file():
            h = hashlib.sha256()
            with open(snap, "rb") as f:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        return h.hexdigest()
                    h.update(b)
        _, s = timed(read_file)
        res["file_read"] = {"s": s}

        if not a.no_listed:
            mnt, pid, s = mount("listed", [])
            res["listed"] = {"mount_s": s, "walk_cold": walk(mnt, pid, "listed")}
            unmount(mnt)

        # the baseline: a mount of nothing (a snapshot of an empty prefix)
        empty = os.path.join(tmp, "empty.snap")
        subprocess.run([a.bin, "snapshot", "s3://synth/nothing-here/", empty] + ep, env=env,
                       check=True, capture_output=True, timeout=60)
        mnt, pid, s = mount("empty", ["--snapshot", empty], source="s3://synth/nothing-here/")
        assert os.listdir(mnt) == []
        res["empty"] = {"mount_s": s, **mem_of(pid)}
        unmount(mnt)

        c0 = counts(port)
        mnt, pid, s = mount("snap", ["--snapshot", snap])
        res["snap"] = {"mount_s": s, "mount_requests": delta(c0, counts(port))}
        res["snap"]["walk_cold"] = walk(mnt, pid, "snap cold")
        res["snap"]["walk_warm"] = walk(mnt, pid, "snap warm")
        rnd = random.Random(34)
        picks = [rnd.randrange(keys.n) for _ in range(a.reads)]

        def reads():
            return wrong_files(mnt, keys, picks)
        c0 = counts(port)
        bad, s = timed(reads)
        assert bad == 0, "%d files with wrong bytes" % bad
        res["snap"]["reads"] = {"n": a.reads, "s": s, "requests": delta(c0, counts(port))}
        st = subprocess.run([a.bin, "stats", "--json", mnt], capture_output=True, text=True)
        if st.returncode == 0:
            fs = json.loads(st.stdout).get("fs", {})
            res["snap"]["fs"] = {k: fs.get(k) for k in ("snap_listings", "list_pages", "heads",
                                                        "listing_bytes", "node_bytes",
                                                        "meta_max")}
        res["snap"].update(mem_of(pid))
        unmount(mnt)
        sw = res["snap"]["walk_cold"]
        for kind in ("list", "head"):
            assert sw["requests"].get(kind, 0) == 0, sw["requests"]
        r = {"snapshot_take_vs_plain_listing": round(res["snapshot_take"]["s"] /
                                                     max(res["plain_listing"]["s"], 0.01), 2),
             "snap_mount_plus_walk_vs_file_read": round((res["snap"]["mount_s"] + sw["s"]) /
                                                        max(res["file_read"]["s"], 0.01), 2),
             "snap_walk_vs_file_read": round(sw["s"] / max(res["file_read"]["s"], 0.01), 2),
             "snap_peak_rss_above_empty_mib": res["snap"]["VmHWM"] - res["empty"]["VmHWM"],
             "snap_anon_rss_above_empty_mib": (max(sw["RssAnon"], res["snap"]["walk_warm"]["RssAnon"],
                                                   res["snap"]["RssAnon"]) - res["empty"]["RssAnon"])}
        if "listed" in res:
            r["snap_mount_plus_walk_vs_listed_walk"] = round(
                (res["snap"]["mount_s"] + sw["s"]) / max(res["listed"]["walk_cold"]["s"], 0.01), 2)
        res["ratios"] = r
    finally:
        for m in list(mounted):
            subprocess.run(["fusermount3", "-u", m])
        srv.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    res["command"] = " ".join(["python3", "bench/snap_scale.py"] + sys.argv[1:])
    js = json.dumps(res, indent=1, sort_keys=True)
    print(js)
    if a.out:
        with open(a.out, "w") as f:
            f.write(js + "\n")


if __name__ == "__main__":
    main()
