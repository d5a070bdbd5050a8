#!/usr/bin/python3
"""bench/passthrough.py — FUSE passthrough of promoted objects against the local disk.

    bench/passthrough.py [ROUNDS] [THREADS]        (root; make all first)

Builds its own data in build/bench/pt/ (once): a 256 MiB object and 2,000
files of 4-160 KiB (sizes seeded, uniform) in 20 directories, as local files
and in a local s3rver. Mounts build/feedfs with a disk cache in the same
build/bench/pt/ (same disk as the local copies), reads everything once (cold,
from s3rver) and waits until every object is promoted. Then ROUNDS (default 7)
alternating rounds, caches dropped before every pass:
  big:   dd if=<256 MiB object> of=/dev/null bs=1M    local copy vs the mount
         (sync; echo 3 > drop_caches)
  small: THREADS (default 8) readers, every file read whole and its sha256
         checked, shuffled with a fixed seed        local dir vs the mount,
         once after a stat of every file and echo 1 (page cache only: names
         and attributes stay cached, as between epochs within the entry
         timeout) and once after echo 3 (dentries and inodes too: every
         file's LOOKUP goes to the daemon again)
and reports the best round of each (and the median), the ratios, and the
daemon's READ count during the passthrough rounds (it must stay 0). Then the
same rounds with --passthrough=off on the same cache (the disk-cache path
through the daemon), as context. Writes bench/results/passthrough-<UTC>.md.
Timing only; not a test.
"""
import datetime
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

import boto3
from botocore.config import Config

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(ROOT, "build", "bench", "pt")
LOCAL = os.path.join(WORK, "local")
FEEDFS = os.environ.get("FEEDFS", os.path.join(ROOT, "build", "feedfs"))
S3RVER = os.path.join(ROOT, "tests", "node_modules", ".bin", "s3rver")
BUCKET = "pt-bench"
BIG = "big/obj-256m.bin"
MIB = 1 << 20
NSMALL = 2000


def content(key, n):
    """Deterministic bytes (sha256 in counter mode of the key), n of them."""
    out, seed, i = bytearray(), key.encode(), 0
    while len(out) < n:
        out += hashlib.sha256(seed + i.to_bytes(8, "little")).digest() * 64
        i += 1
    return bytes(out[:n])


def dataset():
    rnd = random.Random(2026)
    files = {"small/d%02d/f%04d.jpg" % (i % 20, i): rnd.randint(4 * 1024, 160 * 1024)
             for i in range(NSMALL)}
    return files


def prepare(port):
    files = dataset()
    man_path = os.path.join(WORK, "manifest.json")
    if os.path.exists(man_path):
        return json.load(open(man_path))
    man = {"small": {}, "big": None}
    os.makedirs(LOCAL, exist_ok=True)
    s3 = boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                      aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                      config=Config(max_pool_connections=32, s3={"addressing_style": "path"}))
    s3.create_bucket(Bucket=BUCKET)
    big = os.urandom(256 * MIB)
    with open(os.path.join(LOCAL, "big.bin"), "wb") as f:
        f.write(big)
    s3.put_object(Bucket=BUCKET, Key=BIG, Body=big)
    man["big"] = hashlib.sha256(big).hexdigest()
    for k, n in files.items():
        b = content(k, n)
        p = os.path.join(LOCAL, k)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(b)
        s3.put_object(Bucket=BUCKET, Key=k, Body=b)
        man["small"][k] = hashlib.sha256(b).hexdigest()
    json.dump(man, open(man_path, "w"))
    return man


def start_s3rver(port, where=None):
    """s3rver over where (default: this bench's data) on 127.0.0.1:port, in its own
    session."""
    return subprocess.Popen([S3RVER, "-d", where or os.path.join(WORK, "s3rver"), "-a",
                             "127.0.0.1", "-p", str(port), "--silent"],
                            env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"),
                            start_new_session=True)


def drop(what=3):
    """sync, then drop the page cache (1) or the page cache and dentries/inodes (3)."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("%d\n" % what)


def dd(path):
    """MB/s of dd bs=1M from path (dd's own figure)."""
    cp = subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=1M"], capture_output=True,
                        text=True, check=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", cp.stderr)
    return int(m.group(1)) / float(m.group(2)) / 1e6


def epoch(root, man, threads):
    """files/s of THREADS readers over every small file, sha256 checked."""
    rels = sorted(man["small"])
    random.Random(1234).shuffle(rels)
    it, lock, bad = iter(rels), threading.Lock(), []

    def worker():
        while True:
            with lock:
                rel = next(it, None)
            if rel is None:
                return
            with open(os.path.join(root, rel), "rb", buffering=0) as f:
                b = f.readall()
            if hashlib.sha256(b).hexdigest() != man["small"][rel]:
                bad.append(rel)
                return
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    el = time.monotonic() - t0
    if bad:
        raise SystemExit("wrong bytes in %s" % bad[:3])
    return len(rels) / el


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def stats(mnt):
    cp = subprocess.run([FEEDFS, "stats", "--json", mnt], capture_output=True, text=True, check=True)
    return json.loads(cp.stdout)


def mount(mnt, port, extra):
    os.makedirs(mnt, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_EC2_METADATA_DISABLED="true", ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
    subprocess.run([FEEDFS, "s3://" + BUCKET, mnt, "--endpoint-url", "http://127.0.0.1:%d" % port,
                    "--force-path-style", "--region", "us-east-1", "--cache-dir",
                    os.path.join(WORK, "cache"), "--cache-size", "3G", "--metadata-ttl", "3600",
                    "--log-file", os.path.join(WORK, "feedfs.log")] + extra, env=env, check=True)


def umount(mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    time.sleep(1)


PASSES = (("dd", 3), ("epoch", 1), ("epoch", 3))


def name(who, kind, what):
    return "%s %s" % (who, "dd (drop 3)" if kind == "dd" else "epoch (drop %d)" % what)


def rounds(mnt, man, n, threads):
    """n alternating rounds; before every pass: drop 3 for dd; for the epoch
    drop 1 (page cache only: the kernel keeps the mount's entries, as between
    epochs of a job within --metadata-ttl) and drop 3 (every lookup goes to the
    daemon again)."""
    res = {}
    for r in range(n):
        order = ("local", "mount") if r % 2 == 0 else ("mount", "local")
        for kind, what in PASSES:
            for who in order:
                root = LOCAL if who == "local" else mnt
                if what == 1:
                    for rel in man["small"]:        # entries and inodes cached, no data
                        os.stat(os.path.join(root, rel))
                drop(what)
                if kind == "dd":
                    v = dd(os.path.join(root, "big.bin" if who == "local" else BIG))
                else:
                    v = epoch(root, man, threads)
                res.setdefault(name(who, kind, what), []).append(v)
        print("round %d: %s" % (r + 1, ", ".join("%s %.0f" % (k, v[-1]) for k, v in res.items())),
              flush=True)
    return res


def summary(title, res):
    lines = ["### %s" % title, "",
             "| pass | best | median | all rounds |", "|---|---|---|---|"]
    for k, v in res.items():
        unit = "MB/s" if "dd" in k else "files/s"
        lines.append("| %s | %.0f %s | %.0f | %s |" % (k, max(v), unit, statistics.median(v),
                                                       ", ".join("%.0f" % x for x in v)))
    lines.append("")
    for kind, what in PASSES:
        m, l = res[name("mount", kind, what)], res[name("local", kind, what)]
        lines.append("- %s: best mount / best local **%.2f×** (medians %.2f×)" % (
            name("", kind, what).strip(), max(m) / max(l), statistics.median(m) / statistics.median(l)))
    lines.append("")
    return lines


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    os.makedirs(WORK, exist_ok=True)
    port = 19000 + os.getpid() % 1000
    srv = start_s3rver(port)
    mnt = os.path.join(WORK, "mnt")
    out = ["# FUSE passthrough vs local disk (%s)" % datetime.datetime.utcnow().strftime(
        "%Y-%m-%d %H:%M UTC"), "",
        "Command: `sudo bench/passthrough.py %d %d` at %s; kernel %s, %d CPUs." % (
            n, threads, subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                       capture_output=True, text=True).stdout.strip(),
            os.uname().release, os.cpu_count()), ""]
    try:
        time.sleep(3)
        man = prepare(port)
        subprocess.run(["rm", "-rf", os.path.join(WORK, "cache")], check=True)
        mount(mnt, port, [])
        drop()
        cold = epoch(mnt, man, threads)
        dd(os.path.join(mnt, BIG))
        want = NSMALL + 1
        for _ in range(600):
            st = stats(mnt)
            if st["promote"]["promotions"] >= want:
                break
            time.sleep(0.5)
        print("cold epoch %.0f files/s; promoted %d of %d" % (cold, st["promote"]["promotions"], want))
        if st["promote"]["promotions"] < want:
            raise SystemExit("not every object was promoted: %r" % st["promote"])
        r0 = stats(mnt)["fs"]["reads"]
        c0 = cpu_s(stats(mnt)["pid"])
        res = rounds(mnt, man, n, threads)
        st = stats(mnt)
        reads = st["fs"]["reads"] - r0
        out += summary("--passthrough=on (default)", res)
        out += ["Daemon READ requests during these rounds: %d; passthrough opens: %d; daemon "
                "CPU %.2f s." % (reads, st["fs"]["pt_opens"], cpu_s(st["pid"]) - c0), ""]
        umount(mnt)
        mount(mnt, port, ["--passthrough=off"])
        dd(os.path.join(mnt, BIG))               # the same cache: warm metadata only
        c0 = cpu_s(stats(mnt)["pid"])
        res_off = rounds(mnt, man, max(3, n // 2), threads)
        cpu_off = cpu_s(stats(mnt)["pid"]) - c0
        umount(mnt)
        out += summary("--passthrough=off (disk cache through the daemon), context", res_off)
        out += ["Daemon CPU during these rounds: %.2f s." % cpu_off, ""]
    finally:
        subprocess.run(["fusermount3", "-u", mnt], capture_output=True)
        srv.terminate()
    text = "\n".join(out)
    print(text)
    path = os.path.join(HERE, "results", "passthrough-%s.md" %
                        datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"))
    with open(path, "w") as f:
        f.write(text + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
