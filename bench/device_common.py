"""bench/device_common.py — what bench/device_cpu.py and bench/gpu_feed.py
share: an in-process S3 stub (tests/integration/s3stub.py) holding N files of
random bytes, a feedfs mount of it with a disk cache, warmed, and the helpers
that drop only the mount's kernel page cache and read CPU time.

The passes of both benchmarks read from the same warm disk cache: the
daemon's cache files stay in the page cache, while the kernel's pages of the
FUSE files are dropped before every pass (POSIX_FADV_DONTNEED on each file,
or all page cache with --drop all), so every pass goes through the daemon.
Metadata is cached for the whole run (--metadata-ttl 3600): the passes
measure the data path, not lookups against the in-process stub (which, in
the benchmark's own process, answers a LIST of thousands of keys slowly).
"""
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "python"))
from s3stub import S3Stub  # noqa: E402

MIB = 1 << 20
BUCKET = "devbench"


class Dataset:
    def __init__(self, binary, nfiles, file_mib, extra_args=(), env=None, file_bytes=None):
        self.work = tempfile.mkdtemp(prefix="feedfs-devbench-")
        self.mnt = os.path.join(self.work, "mnt")
        self.cache = os.path.join(self.work, "cache")
        os.makedirs(self.mnt)
        os.makedirs(self.cache)
        self.stub = S3Stub().start()
        self.stub.create_bucket(BUCKET)
        rnd = random.Random(17)
        self.files, self.sha = [], {}
        self.size = file_bytes or file_mib * MIB
        for i in range(nfiles):
            k = "f%05d.bin" % i
            data = rnd.randbytes(self.size)
            self.stub.put(BUCKET, k, data)
            self.files.append(k)
            self.sha[k] = hashlib.sha256(data).hexdigest()
        e = dict(os.environ if env is None else env)
        e.update({"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"})
        cache_size = "%dM" % (nfiles * self.size * 2 // MIB + 256)
        argv = [binary, "s3://" + BUCKET, self.mnt, "--endpoint-url", self.stub.url,
                "--force-path-style", "--region", "us-east-1", "--cache-dir", self.cache,
                "--cache-size", cache_size, "--metadata-ttl", "3600",
                "--log-file", os.path.join(self.work, "feedfs.log")]
        subprocess.run(argv + list(extra_args), check=True, env=e, timeout=60)
        self.pid = int(subprocess.run(["pgrep", "-f", "--newest", self.mnt], capture_output=True,
                                      text=True).stdout.split()[0])
        # Warm: every byte once through read(), so the disk cache holds it all.
        for k in self.files:
            with open(self.path(k), "rb") as f:
                while f.read(8 * MIB):
                    pass

    def path(self, k):
        return os.path.join(self.mnt, k)

    def drop(self, how="fuse"):
        if how == "all":
            subprocess.run(["sync"])
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            return
        for k in self.files:
            fd = os.open(self.path(k), os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)

    def daemon_cpu_s(self):
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt])
        for _ in range(100):
            if not os.path.exists("/proc/%d" % self.pid):
                break
            time.sleep(0.1)
        self.stub.stop()
        shutil.rmtree(self.work, ignore_errors=True)


def self_cpu_s():
    t = os.times()
    return t.user + t.system


def median(xs):
    s = sorted(xs)
    return s[len(s) // 2]
