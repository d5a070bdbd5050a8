#!/usr/bin/python3
"""bench/pt_ab.py — the small-file passthrough epoch, two binaries side by side.

    bench/pt_ab.py OLD_BIN NEW_BIN [ROUNDS] [THREADS]       (root; make all first)

Over bench/passthrough.py's data (build/bench/pt, made on first use), mounts
both binaries at once, each with its own disk cache (build/bench/pt/cache-a,
cache-b) and any extra options in $A_OPTS / $B_OPTS, reads every small file
once through each (cold) and waits until all 2,000 are promoted. Then ROUNDS
(default 7) rounds, each of three passes in a rotating order: the local copy,
mount A, mount B; before every pass a stat of every file and `echo 1` (names
and attributes cached, page cache dropped: an epoch within the entry
timeout). A pass is THREADS (default 8) readers, every file read whole and
its sha256 checked. Prints files/s per pass, medians, B/A and mount/local
ratios, and per mount the daemon's CPU-seconds per epoch and its OPEN,
passthrough-open and backing-open counters per epoch.
With DROP=3 every pass drops dentries and inodes too (`echo 3`: every file's
LOOKUP, and every directory's, reaches the daemon again).
With STRACE=1 the last round's passes run under `strace -c -f` on each
daemon (slower: for counting syscalls per file, not for timing).
A binary given as floor:N is build/bench/pt_floor with N threads over the
local copy (`make build/bench/pt_floor`): the least any daemon can do per
passthrough open, with no feedfs counters.
Timing only; not a test.
"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import passthrough as pt  # noqa: E402  (data, epoch, drop, stats)


DROP = int(os.environ.get("DROP", "1"))


FLOORS = {}  # mount point -> the pt_floor process serving it


def mount(binary, mnt, port, cache, extra):
    os.makedirs(mnt, exist_ok=True)
    if is_floor(binary):
        FLOORS[mnt] = subprocess.Popen([os.path.join(pt.ROOT, "build", "bench", "pt_floor"),
                                        "-t", binary.split(":")[1], pt.LOCAL, mnt])
        for _ in range(50):
            if os.path.ismount(mnt):
                return
            time.sleep(0.1)
        raise SystemExit("pt_floor did not mount " + mnt)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_EC2_METADATA_DISABLED="true", ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
    subprocess.run([binary, "s3://" + pt.BUCKET, mnt, "--endpoint-url",
                    "http://127.0.0.1:%d" % port, "--force-path-style", "--region", "us-east-1",
                    "--cache-dir", cache, "--cache-size", "3G", "--metadata-ttl", "3600",
                    "--log-file", cache + ".log"] + extra, env=env, check=True)


def is_floor(binary):
    return os.path.basename(binary).startswith("floor:")


def stats(binary, mnt):
    import json
    if is_floor(binary):
        return {"pid": FLOORS[mnt].pid, "promote": {"promotions": pt.NSMALL}, "fs": {}}
    cp = subprocess.run([binary, "stats", "--json", mnt], capture_output=True, text=True,
                        check=True)
    return json.loads(cp.stdout)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    bins = {w: a if a.startswith("floor:") else os.path.abspath(a)
            for w, a in (("A", sys.argv[1]), ("B", sys.argv[2]))}
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    opts = {"A": os.environ.get("A_OPTS", "").split(), "B": os.environ.get("B_OPTS", "").split()}
    os.makedirs(pt.WORK, exist_ok=True)
    port = 19000 + os.getpid() % 1000
    srv = pt.start_s3rver(port)
    mnts = {w: os.path.join(pt.WORK, "mnt-" + w.lower()) for w in bins}
    try:
        time.sleep(3)
        man = pt.prepare(port)
        for w in bins:
            cache = os.path.join(pt.WORK, "cache-" + w.lower())
            subprocess.run(["rm", "-rf", cache], check=True)
            mount(bins[w], mnts[w], port, cache, opts[w])
            pt.epoch(mnts[w], man, threads)
        for w in bins:
            for _ in range(600):
                st = stats(bins[w], mnts[w])
                if st["promote"]["promotions"] >= pt.NSMALL:
                    break
                time.sleep(0.5)
            if st["promote"]["promotions"] < pt.NSMALL:
                raise SystemExit("%s: not every object was promoted: %r" % (w, st["promote"]))
        roots = {"local": pt.LOCAL, "A": mnts["A"], "B": mnts["B"]}
        res = {k: [] for k in roots}
        cpu = {w: 0.0 for w in bins}
        base = {w: stats(bins[w], mnts[w]) for w in bins}
        order = ["local", "A", "B"]
        for r in range(n):
            straced = os.environ.get("STRACE") == "1" and r == n - 1
            for who in order[r % 3:] + order[:r % 3]:
                root = roots[who]
                for rel in man["small"]:
                    os.stat(os.path.join(root, rel))
                pt.drop(DROP)
                tr = None
                if who != "local":
                    pid = stats(bins[who], mnts[who])["pid"]
                    c0 = pt.cpu_s(pid)
                    if straced:
                        log = os.path.join(pt.WORK, "strace-%s.txt" % who)
                        tr = subprocess.Popen(["strace", "-c", "-f", "-o", log, "-p", str(pid)])
                        time.sleep(1)
                v = pt.epoch(root, man, threads)
                if tr:
                    tr.terminate()
                    tr.wait()
                if who != "local" and not straced:
                    cpu[who] += pt.cpu_s(pid) - c0
                if not straced:
                    res[who].append(v)
            print("round %d: %s" % (r + 1, ", ".join("%s %.0f" % (k, v[-1]) for k, v in
                                                       res.items() if v)), flush=True)
        timed = len(res["A"])
        print()
        print("| pass | median files/s | all rounds |")
        print("|---|---|---|")
        for k, v in res.items():
            print("| %s | %.0f | %s |" % (k, statistics.median(v), ", ".join("%.0f" % x for x in v)))
        ma, mb, ml = (statistics.median(res[k]) for k in ("A", "B", "local"))
        print("\nB/A %.2fx (per-round B/A: %s); A/local %.2fx; B/local %.2fx" % (
            mb / ma, ", ".join("%.2f" % (b / a) for a, b in zip(res["A"], res["B"])),
            ma / ml, mb / ml))
        epochs = n  # every round ran one epoch per mount
        for w in bins:
            st = stats(bins[w], mnts[w])
            d = {k: st["fs"].get(k, 0) - base[w]["fs"].get(k, 0)
                 for k in ("opens", "pt_opens", "pt_backing_opens", "reads", "flushes")}
            print("%s %s %s: CPU %.3f s/epoch; per epoch: %s" % (
                w, bins[w], " ".join(opts[w]), cpu[w] / max(timed, 1),
                ", ".join("%s %.0f" % (k, x / epochs) for k, x in d.items())))
    finally:
        for w in bins:
            subprocess.run(["fusermount3", "-u", mnts[w]], capture_output=True)
            if mnts[w] in FLOORS:
                FLOORS[mnts[w]].wait()
        srv.terminate()


if __name__ == "__main__":
    main()
