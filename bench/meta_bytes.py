#!/usr/bin/env python3
"""meta_bytes — metadata bytes per entry: the serving daemon's RSS growth over
a stat walk (find -printf %s: every entry listed, given a node and stat'ed)
of DIRS x FILES computed keys, divided by the entries; with --max-memory 4G
nothing is evicted. Also feedfs's own accounting (fs.node_bytes per node,
fs.listing_bytes per listed entry) when the binary reports it.

    python3 bench/meta_bytes.py --names short --dirs 100 --files 1000 [--bin B]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dirs", type=int, default=100)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--names", default="short")
    ap.add_argument("--bin", default=os.path.join(os.path.dirname(HERE), "build", "feedfs"))
    a = ap.parse_args()
    srv, port = scale.start_synth(a.dirs, a.files, a.names)
    tmp = tempfile.mkdtemp(prefix="feedfs-meta.")
    mnt = os.path.join(tmp, "mnt")
    os.mkdir(mnt)
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    n = a.dirs * a.files
    try:
        subprocess.run([a.bin, "s3://synth/", mnt, "--endpoint-url",
                        "http://127.0.0.1:%d" % port, "--force-path-style", "--region",
                        "us-east-1", "--max-memory", "4G", "--metadata-ttl", "3600",
                        "--log-file", os.path.join(tmp, "log")], check=True, env=env)
        pid = scale.serving_pid(a.bin, mnt)
        os.listdir(mnt)
        time.sleep(0.5)
        rss0 = scale.mem_of(pid)["VmRSS"]
        out = subprocess.run(["find", mnt, "-type", "f", "-printf", "%s\n"],
                             capture_output=True, check=True).stdout.split()
        assert len(out) == n
        time.sleep(0.5)
        rss1 = scale.mem_of(pid)["VmRSS"]
        res = {"entries": n, "names": a.names, "bin": a.bin,
               "rss_growth_mib": rss1 - rss0,
               "rss_bytes_per_entry": round((rss1 - rss0) * 1048576 / n)}
        st = subprocess.run([a.bin, "stats", "--json", mnt], capture_output=True, text=True)
        fs = json.loads(st.stdout).get("fs", {}) if st.returncode == 0 else {}
        if "node_bytes" in fs:
            res["node_bytes_per_node"] = round(fs["node_bytes"] / max(1, fs["live_inodes"]))
            res["listing_bytes_per_entry"] = round(fs["listing_bytes"] / n)
            res["live_inodes"] = fs["live_inodes"]
        print(json.dumps(res))
    finally:
        subprocess.run(["fusermount3", "-u", mnt])
        srv.terminate()


if __name__ == "__main__":
    main()
