#!/usr/bin/python3
"""bench/uring_ab.py — FUSE over io_uring against /dev/fuse, side by side.

    bench/uring_ab.py [ROUNDS]          (root; make all first)

Builds its own data once (build/bench/uring: a local s3rver with 10,000
objects of 1 KiB in 100 directories and one 1 GiB object), sets the fuse
module's enable_uring to Y (put back as it was at the end), and mounts
build/feedfs twice, both --no-keeper, no cache dir: "dev" as is, "uring"
with --fuse-uring=on. ROUNDS (default 5) rounds, the two mounts in
alternating order:
  stat   echo 3 > drop_caches, then os.walk + stat of every file of the 10k
         tree: OPENDIR, READDIRPLUS and whatever LOOKUP or GETATTR the kernel
         still sends, all answered from the daemon's listing cache (filled by
         the first walk), no S3;
  cold   the mount remounted, page cache dropped, the 1 GiB object read in
         1 MiB reads, CRC32 checked: MB/s and the daemon's CPU-seconds per
         GiB (user + system, /proc/PID/stat).
Prints every pass, medians, uring/dev ratios, and the uring daemon's
fuse_uring_requests_total (it must not be 0). Timing only; not a test.
"""
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import time
import zlib

import boto3
from botocore.config import Config

import passthrough as pt  # its drop()

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(ROOT, "build", "bench", "uring")
FEEDFS = os.environ.get("FEEDFS", os.path.join(ROOT, "build", "feedfs"))
S3RVER = os.path.join(ROOT, "tests", "node_modules", ".bin", "s3rver")
PARAM = "/sys/module/fuse/parameters/enable_uring"
BUCKET = "uring-bench"
BIG = "big.bin"
MIB = 1 << 20
NFILES = 10000
SIDES = {"dev": ["--no-keeper"], "uring": ["--no-keeper", "--fuse-uring=on"]}


def client(port):
    return boto3.client("s3", endpoint_url="http://127.0.0.1:%d" % port, region_name="us-east-1",
                        aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
                        config=Config(max_pool_connections=32, s3={"addressing_style": "path"}))


def prepare(port):
    man_path = os.path.join(WORK, "manifest.json")
    if os.path.exists(man_path):
        return json.load(open(man_path))
    s3 = client(port)
    s3.create_bucket(Bucket=BUCKET)
    keys = ["t/d%02d/f%05d" % (i % 100, i) for i in range(NFILES)]
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=k.encode() * 100), keys))
    path = os.path.join(WORK, "big.tmp")
    crc = 0
    with open(path, "wb") as f:
        for _ in range(1024):
            b = os.urandom(MIB)
            crc = zlib.crc32(b, crc)
            f.write(b)
    s3.upload_file(path, BUCKET, BIG)
    os.unlink(path)
    man = {"crc": crc, "size": 1024 * MIB}
    json.dump(man, open(man_path, "w"))
    return man


def mount(side, port):
    mnt = os.path.join(WORK, "mnt-" + side)
    os.makedirs(mnt, exist_ok=True)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER",
               AWS_EC2_METADATA_DISABLED="true", ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
    subprocess.run([FEEDFS, "s3://" + BUCKET, mnt, "--endpoint-url", "http://127.0.0.1:%d" % port,
                    "--force-path-style", "--region", "us-east-1", "--metadata-ttl", "3600",
                    "--log-file", os.path.join(WORK, side + ".log")] + SIDES[side],
                   env=env, check=True)
    time.sleep(0.5)                     # the ring's threads register after INIT
    return mnt


def umount(mnt):
    subprocess.run(["fusermount3", "-u", mnt], check=True)
    time.sleep(0.5)


def stats(mnt):
    cp = subprocess.run([FEEDFS, "stats", "--json", mnt], capture_output=True, text=True,
                        check=True)
    return json.loads(cp.stdout)


def cpu_s(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def stat_pass(mnt):
    pt.drop(3)
    t0 = time.monotonic()
    n = 0
    for d, _, files in os.walk(os.path.join(mnt, "t")):
        for f in files:
            os.stat(os.path.join(d, f))
            n += 1
    el = time.monotonic() - t0
    if n != NFILES:
        raise SystemExit("walked %d files, want %d" % (n, NFILES))
    return n / el


def cold_pass(mnt, man):
    pt.drop(3)
    pid = stats(mnt)["pid"]
    c0, t0, crc, n = cpu_s(pid), time.monotonic(), 0, 0
    with open(os.path.join(mnt, BIG), "rb", buffering=0) as f:
        while True:
            b = f.read(MIB)
            if not b:
                break
            crc = zlib.crc32(b, crc)
            n += len(b)
    el = time.monotonic() - t0
    if crc != man["crc"] or n != man["size"]:
        raise SystemExit("wrong bytes: %d bytes, crc %x" % (n, crc))
    return n / el / 1e6, (cpu_s(pid) - c0) / (n / (1 << 30))


def med(v):
    return statistics.median(v)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if not os.path.exists(PARAM):
        raise SystemExit("no %s: this kernel has no FUSE over io_uring" % PARAM)
    os.makedirs(WORK, exist_ok=True)
    old = open(PARAM).read().strip()
    port = 19000 + os.getpid() % 1000
    srv = subprocess.Popen([S3RVER, "-d", os.path.join(WORK, "s3rver"), "-a", "127.0.0.1", "-p",
                            str(port), "--silent"],
                           env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider"),
                           start_new_session=True)
    mnts = {}
    try:
        with open(PARAM, "w") as f:
            f.write("Y")
        time.sleep(3)
        man = prepare(port)
        for side in SIDES:
            mnts[side] = mount(side, port)
            stat_pass(mnts[side])          # fills the listing cache
        res = {(s, k): [] for s in SIDES for k in ("stat", "cold", "cpu")}
        for r in range(rounds):
            order = ("dev", "uring") if r % 2 == 0 else ("uring", "dev")
            for side in order:
                res[(side, "stat")].append(stat_pass(mnts[side]))
            for side in order:
                umount(mnts[side])
                mnts[side] = mount(side, port)
                v, c = cold_pass(mnts[side], man)
                res[(side, "cold")].append(v)
                res[(side, "cpu")].append(c)
                stat_pass(mnts[side])      # the listing cache again, for the next stat pass
            print("round %d: %s" % (r + 1, ", ".join(
                "%s %s %.0f" % (s, k, res[(s, k)][-1]) if k != "cpu" else
                "%s cpu %.2f s/GiB" % (s, res[(s, k)][-1])
                for s in SIDES for k in ("stat", "cold", "cpu"))), flush=True)
        st = stats(mnts["uring"])["fs"]
        print("\n| measure | /dev/fuse | io_uring | io_uring / dev |")
        print("|---|---|---|---|")
        for k, name in (("stat", "stat of 10k files after echo 3, files/s"),
                        ("cold", "cold 1 GiB read, MB/s"),
                        ("cpu", "cold 1 GiB read, daemon CPU-s per GiB")):
            d, u = res[("dev", k)], res[("uring", k)]
            print("| %s | %.2f (%s) | %.2f (%s) | %.2f× |" % (
                name, med(d), ", ".join("%.2f" % x for x in d), med(u),
                ", ".join("%.2f" % x for x in u), med(u) / med(d)))
        print("\nuring daemon: fuse_uring_requests_total %d (this mount's last life)" %
              st["uring_requests"])
        if st["uring_requests"] == 0:
            raise SystemExit("the uring mount served nothing over the ring")
    finally:
        for m in mnts.values():
            subprocess.run(["fusermount3", "-u", m], capture_output=True)
        srv.terminate()
        with open(PARAM, "w") as f:
            f.write(old)


if __name__ == "__main__":
    main()
