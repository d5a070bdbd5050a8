#!/usr/bin/env python3
"""scale — walks of millions of keys: feedfs against a plain listing client.

Starts bench/synth_s3.py (DIRS x FILES computed keys) in its own process,
times a plain paginated ListObjectsV2 client (keep-alive, 1000 keys a page,
the whole flat listing) against it, then mounts feedfs on it and measures:

  walk cold   find MNT -type f (count checked)
  walk warm   the same again (the listings are cached: no requests)
  stat        find MNT -type f -printf %s (every file stat'ed; sizes summed
              and checked against the endpoint's formula)
  reads       READS random files opened by path, sha256 of every byte checked

each with seconds, the endpoint's request counts, and the serving daemon's
peak RSS (VmHWM) and current RSS; feedfs's own metadata counters at the end.
Prints one JSON object (and writes it to --out). Timing is reported, never
asserted. cpu_s is the daemon's CPU-seconds in a workload, server_cpu_s the
endpoint's.

    python3 bench/scale.py --dirs 1000 --files 1000 --max-memory 256M \
        --out bench/results/scale-1m.json

With --contender rclone the same workloads run against `rclone mount` (Debian's
rclone, `--vfs-cache-mode off`, directory and attribute caches of an hour, as
the bench's rclone-off) instead of feedfs; --max-memory does not apply to it.
"""

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import synth_s3  # noqa: E402
from mounter import pids_of_mount  # noqa: E402



def wrong_files(mnt, keys, picks):
    """Reads the computed keys numbered picks through the mount; returns how
    many differ from the bytes the synthetic store serves for them."""
    bad = 0
    for i in picks:
        k = keys.key(i)
        with open(os.path.join(mnt, k.decode()), "rb") as f:
            if hashlib.sha256(f.read()).digest() != hashlib.sha256(keys.data(k)).digest():
                bad += 1
    return bad

def start_synth(dirs, files, names):
    """bench/synth_s3.py on a free port, ready: (process, port)."""
    port = int(subprocess.check_output([sys.executable, "-c",
                                        "import socket;s=socket.socket();s.bind(('127.0.0.1',0));"
                                        "print(s.getsockname()[1])"]))
    srv = subprocess.Popen([sys.executable, os.path.join(HERE, "synth_s3.py"), "--dirs",
                            str(dirs), "--files", str(files), "--names", names,
                            "--port", str(port)], stdout=subprocess.PIPE)
    srv.stdout.readline()
    return srv, port


def plain_listing(port, prefix=""):
    """The whole flat listing, one keep-alive connection: (keys, pages, s).
    It asks for encoding-type=url, as boto3 and the AWS CLI do (and feedfs),
    so that the endpoint does the same work per page for both."""
    c = http.client.HTTPConnection("127.0.0.1", port)
    tok, keys, pages = None, 0, 0
    t0 = time.monotonic()
    key_re = re.compile(rb"<Key>")
    tok_re = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")
    while True:
        q = {"list-type": "2", "prefix": prefix, "max-keys": "1000", "encoding-type": "url"}
        if tok:
            q["continuation-token"] = tok
        c.request("GET", "/synth/?" + urllib.parse.urlencode(q))
        body = c.getresponse().read()
        pages += 1
        keys += len(key_re.findall(body))
        m = tok_re.search(body)
        if not m:
            break
        tok = m.group(1).decode()
    return keys, pages, time.monotonic() - t0


def counts(port):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("GET", "/__synth/stats")
    return json.loads(c.getresponse().read())


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)
            if k != "stats" and b.get(k, 0) != a.get(k, 0)}


def cpu_of(pid):
    """CPU-seconds (user + system) the process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        v = f.read().rsplit(")", 1)[1].split()
    return (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")


def mem_of(pid):
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                out[line.split(":")[0]] = int(line.split()[1]) // 1024   # MiB
    return out


def serving_pid(binary, mnt):
    """Under the keeper the process whose parent is the keeper; alone, the one."""
    pids = pids_of_mount(binary, mnt)
    for pid in pids:
        with open("/proc/%d/stat" % pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        if ppid in pids:
            return pid
    return pids[0]


def mount_rclone(port, mnt, tmp, env):
    """rclone mount of the endpoint on mnt, in the foreground (its pid is the
    daemon's); returns once the mount answers. Options as bench.py's rclone-off."""
    conf = os.path.join(tmp, "rclone.conf")
    with open(conf, "w") as f:
        f.write("[synth]\ntype = s3\nprovider = Other\nendpoint = http://127.0.0.1:%d\n"
                "access_key_id = x\nsecret_access_key = y\nforce_path_style = true\n"
                "region = us-east-1\n" % port)
    renv = {k: v for k, v in env.items() if k != "AWS_CA_BUNDLE"}
    p = subprocess.Popen(["rclone", "--config", conf, "mount", "synth:synth", mnt,
                          "--read-only", "--vfs-cache-mode", "off", "--dir-cache-time", "1h",
                          "--attr-timeout", "1h", "--no-modtime", "--use-server-modtime",
                          # synth's ETags are MD5s of the key, not of the bytes
                          "--no-checksum",
                          "--log-level", "NOTICE", "--log-file", os.path.join(tmp, "rclone.log")],
                         env=renv)
    for _ in range(300):
        if os.path.ismount(mnt):
            return p.pid
        if p.poll() is not None:
            raise RuntimeError("rclone mount exited %d" % p.returncode)
        time.sleep(0.1)
    raise RuntimeError("rclone mount did not come up")


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, round(time.monotonic() - t0, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--names", default="short")
    ap.add_argument("--max-memory", default="256M")
    ap.add_argument("--reads", type=int, default=300)
    ap.add_argument("--no-stat", action="store_true", help="skip the stat workload")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "feedfs"))
    ap.add_argument("--args", default="", help="more feedfs options")
    ap.add_argument("--contender", choices=("feedfs", "rclone"), default="feedfs")
    ap.add_argument("--out")
    a = ap.parse_args()

    srv, port = start_synth(a.dirs, a.files, a.names)
    keys = synth_s3.Keys(a.dirs, a.files, a.names)
    res = {"keys": keys.n, "dirs": a.dirs, "files": a.files, "names": a.names,
           "max_memory": a.max_memory, "args": a.args}
    tmp = tempfile.mkdtemp(prefix="feedfs-scale.")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    try:
        v0 = cpu_of(srv.pid)
        n, pages, secs = plain_listing(port)
        assert n == keys.n, (n, keys.n)
        res["plain_listing"] = {"s": round(secs, 2), "pages": pages,
                                "server_cpu_s": round(cpu_of(srv.pid) - v0, 2)}

        if a.contender == "rclone":
            pid = mount_rclone(port, mnt, tmp, env)
            res["max_memory"] = None
            res["rclone"] = subprocess.run(["rclone", "version"], capture_output=True,
                                           text=True).stdout.split("\n")[0]
        else:
            argv = [a.bin, "s3://synth/", mnt, "--endpoint-url", "http://127.0.0.1:%d" % port,
                    "--force-path-style", "--region", "us-east-1", "--max-memory", a.max_memory,
                    "--metadata-ttl", "3600", "--log-file", os.path.join(tmp, "feedfs.log")]
            argv += a.args.split()
            subprocess.run(argv, check=True, env=env, timeout=60)
            pid = serving_pid(a.bin, mnt)
        res["contender"] = a.contender
        res["rss_mounted"] = mem_of(pid)

        def walk():
            out = subprocess.run(["find", mnt, "-type", "f"], capture_output=True, check=True)
            return out.stdout.count(b"\n")

        for name in ("walk_cold", "walk_warm"):
            c0, u0, v0 = counts(port), cpu_of(pid), cpu_of(srv.pid)
            got, s = timed(walk)
            assert got == keys.n, (name, got, keys.n)
            res[name] = {"s": s, "requests": delta(c0, counts(port)),
                         "cpu_s": round(cpu_of(pid) - u0, 2),
                         "server_cpu_s": round(cpu_of(srv.pid) - v0, 2), **mem_of(pid)}

        if not a.no_stat:
            def stat_all():
                out = subprocess.run(["find", mnt, "-type", "f", "-printf", "%s\n"],
                                     capture_output=True, check=True)
                return out.stdout.split()

            c0, u0, v0 = counts(port), cpu_of(pid), cpu_of(srv.pid)
            sizes, s = timed(stat_all)
            assert len(sizes) == keys.n
            want = sum(keys.size(keys.key(i)) for i in range(keys.n))
            assert sum(int(x) for x in sizes) == want, "sizes differ"
            res["stat"] = {"s": s, "requests": delta(c0, counts(port)),
                           "cpu_s": round(cpu_of(pid) - u0, 2),
                         "server_cpu_s": round(cpu_of(srv.pid) - v0, 2), **mem_of(pid)}

        rnd = random.Random(22)
        picks = [rnd.randrange(keys.n) for _ in range(a.reads)]

        def reads():
            return wrong_files(mnt, keys, picks)

        c0, u0, v0 = counts(port), cpu_of(pid), cpu_of(srv.pid)
        bad, s = timed(reads)
        assert bad == 0, "%d files with wrong bytes" % bad
        res["reads"] = {"n": a.reads, "s": s, "requests": delta(c0, counts(port)),
                        "cpu_s": round(cpu_of(pid) - u0, 2),
                         "server_cpu_s": round(cpu_of(srv.pid) - v0, 2), **mem_of(pid)}
        if a.contender == "feedfs":
            st = subprocess.run([a.bin, "stats", "--json", mnt], capture_output=True, text=True)
            if st.returncode == 0:
                res["feedfs_stats_fs"] = json.loads(st.stdout).get("fs")
        res["peak_rss_mib"] = mem_of(pid)["VmHWM"]
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        srv.terminate()
    res["command"] = " ".join(["python3", "bench/scale.py"] + sys.argv[1:])
    js = json.dumps(res, indent=1, sort_keys=True)
    print(js)
    if a.out:
        with open(a.out, "w") as f:
            f.write(js + "\n")


if __name__ == "__main__":
    main()
