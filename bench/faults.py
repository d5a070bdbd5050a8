#!/usr/bin/python3
"""Fault mode of the benchmark (issue 20): the edge-case tree of the tests, by path,
with 8 threads, through a proxy that breaks about 10% of ALL requests.

    bench/faults.py [--bin NAME=PATH ...] [--threads 8] [--rate 0.10] [--stall-s 2]
                    [--latency-ms 0] [--deadline-s 120] [--out FILE]

For each binary (default: build/feedfs as "after"), two passes on a fresh mount:
no faults, then faults. A pass opens every file of the tree by its path in one
seeded shuffled order (no walk first), `threads` readers taking the next path,
and compares each file's SHA-256 with what was uploaded. The fault proxy
(tests/integration/fault_proxy.py, set_mix) answers each attempt, listings and
HEADs included, with probability `rate` with one of: 503 SlowDown, 500, a reset
mid-body, a body cut short, a stall of `stall_s` mid-body, drawn by a hash of
(seed, request, attempt) so both binaries meet the same schedule for the same
requests. With --latency-ms, bench/proxy.py sits behind it (first byte delayed).

Reported per pass: files read (of all), wrong bytes, errors, wall time, rate,
max and p99 per-file latency, requests the proxy saw, and for the fault pass the
extra requests over the same binary's fault-free pass. A pass that is still
reading at --deadline-s is cut: its files read are what it managed.
"""
import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("FEEDFS_BIN", os.path.join(ROOT, "build", "feedfs"))

import conftest                      # noqa: E402  (S3Server, edge tree, helpers)
from fault_proxy import FaultProxy   # noqa: E402
from mounter import mount_argv, s3rver_args, s3rver_env  # noqa: E402

KINDS = ("503", "500", "reset", "short", "stall")


def log(*a):
    print("[faults %s] %s" % (time.strftime("%H:%M:%S"), " ".join(str(x) for x in a)), flush=True)


def p99(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def feedfs_counters(binary, mnt):
    cp = subprocess.run([binary, "stats", "--json", mnt], capture_output=True, text=True, timeout=30)
    return json.loads(cp.stdout) if cp.returncode == 0 else {}


def mount(binary, bucket, mnt, endpoint, logf):
    os.makedirs(mnt, exist_ok=True)
    argv = mount_argv(binary, "s3://" + bucket, mnt, logf, s3rver_args(endpoint))
    cp = subprocess.run(argv, capture_output=True, env=s3rver_env(None), timeout=60,
                        stdin=subprocess.DEVNULL)
    if cp.returncode != 0:
        raise SystemExit("mount failed: %s" % cp.stderr.decode(errors="replace"))


def unmount(mnt):
    subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
    time.sleep(0.5)


def drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def one_pass(mnt, rels, want, threads, deadline_s):
    it = iter(rels)
    lock = threading.Lock()
    lat, errors, wrong = [], [], []

    def worker():
        while True:
            with lock:
                rel = next(it, None)
            if rel is None or time.monotonic() > end:
                return
            t = time.monotonic()
            try:
                with open(os.path.join(mnt, rel), "rb", buffering=0) as f:
                    b = f.readall()
            except OSError as e:
                with lock:
                    errors.append("%s: %s" % (rel, e))
                continue
            d = time.monotonic() - t
            with lock:
                lat.append(d)
                if hashlib.sha256(b).hexdigest() != want[rel]:
                    wrong.append(rel)
    t0 = time.monotonic()
    end = t0 + deadline_s
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(max(0.0, end + 1 - time.monotonic()))
    wall = time.monotonic() - t0
    hung = sum(t.is_alive() for t in ts)
    return {"files": len(lat) - len(wrong), "of": len(rels), "wrong": len(wrong),
            "errors": len(errors), "first_error": errors[0] if errors else None,
            "hung_readers": hung, "wall_s": round(wall, 2),
            "files_per_s": round((len(lat) - len(wrong)) / wall, 1),
            "max_s": round(max(lat) if lat else 0.0, 3), "p99_s": round(p99(lat), 3),
            "cut_at_deadline": hung > 0 or len(lat) + len(errors) < len(rels)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH (repeatable)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rate", type=float, default=0.10)
    ap.add_argument("--stall-s", type=float, default=2.0)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--deadline-s", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--out", default=None, help="append the JSON results to FILE")
    ap.add_argument("--files", type=int, default=0,
                    help="top the tree up to this many files with one wide prefix (the "
                         "issue's tree had 6105; the tests' has about 3550)")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.bin] or [["after", os.environ["FEEDFS_BIN"]]]

    work = tempfile.mkdtemp(prefix="feedfs-faults-")
    srv = conftest.S3Server(work)
    children = []
    try:
        s3 = conftest.make_client(srv.url)
        objs = conftest.edge_objects()
        bucket = "edge"
        s3.create_bucket(Bucket=bucket)
        log("uploading the edge-case tree: %d objects" % len(objs))
        conftest.put_many(s3, bucket, sorted(objs.items()))
        listed = conftest.list_all(s3, bucket)
        want = {}
        dirs = {k.rsplit("/", 1)[0] for k, _ in listed if "/" in k}
        for k, _ in listed:
            if k.endswith("/") or k not in objs or k in dirs:
                continue              # markers, shadowed files: directories; folded keys
            want[k] = hashlib.sha256(objs[k]).hexdigest()
        extra = {}
        for i in range(max(0, a.files - len(want))):
            k = "wide/w%05d.dat" % i
            extra[k] = conftest.content_for(k, 1 + (i * 7919) % 40000)
            want[k] = hashlib.sha256(extra[k]).hexdigest()
        if extra:
            log("topping up with %d files under wide/" % len(extra))
            conftest.put_many(s3, bucket, sorted(extra.items()))
            listed = conftest.list_all(s3, bucket)
        rels = sorted(want)
        random.Random(a.seed).shuffle(rels)
        log("%d files to read by path (of %d keys listed)" % (len(rels), len(listed)))
        upstream = srv.url
        if a.latency_ms > 0:
            port = conftest.free_port()
            pp = subprocess.Popen([sys.executable, os.path.join(HERE, "proxy.py"), "--listen",
                                   str(port), "--upstream", upstream.rsplit(":", 1)[1],
                                   "--latency-ms", str(a.latency_ms)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            children.append(pp)
            time.sleep(1.0)
            upstream = "http://127.0.0.1:%d" % port
        results = {"meta": {"threads": a.threads, "rate": a.rate, "stall_s": a.stall_s,
                            "latency_ms": a.latency_ms, "deadline_s": a.deadline_s,
                            "files": len(rels), "kinds": KINDS, "cmd": " ".join(sys.argv)},
                   "runs": {}}
        for name, binary in bins:
            res = {}
            for mode in ("clean", "faults"):
                px = FaultProxy(upstream, seed=a.seed).start()
                px.stall_s = a.stall_s
                mnt = os.path.join(work, "mnt-%s-%s" % (name, mode))
                mount(binary, bucket, mnt, px.url, os.path.join(work, "%s-%s.log" % (name, mode)))
                drop_caches()
                base = len(px.log)
                if mode == "faults":
                    px.set_mix(a.rate, KINDS)
                log("%s %s: reading" % (name, mode))
                r = one_pass(mnt, rels, want, a.threads, a.deadline_s)
                r["requests"] = len(px.log) - base
                r["injected"] = dict(px.injected)
                st = feedfs_counters(binary, mnt).get("s3", {})
                r["counters"] = {k: st.get(k) for k in (
                    "requests", "retries", "retries_throttle", "retries_server",
                    "retries_network", "retries_body", "retries_stall", "stalls",
                    "hedges_started", "hedges_won", "errors") if k in st}
                px.clear()
                unmount(mnt)
                px.stop()
                res[mode] = r
                log("%s %s: %s" % (name, mode, json.dumps(r)))
            if res["clean"]["requests"]:
                res["faults"]["extra_requests_pct"] = round(
                    100.0 * (res["faults"]["requests"] / res["clean"]["requests"] - 1), 1)
            results["runs"][name] = res
        text = json.dumps(results, indent=1)
        print(text)
        if a.out:
            with open(a.out, "a") as f:
                f.write(text + "\n")
    finally:
        for c in children:
            c.terminate()
        srv.stop()


if __name__ == "__main__":
    main()
