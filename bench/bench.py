#!/usr/bin/python3
"""feedfs side-by-side benchmark driver (run through bench/run.sh or `make bench`).

Starts s3rver (persistent data dir under build/bench/data), creates the datasets
once, measures the server and local-disk ceilings, mounts every contender
configuration fresh for each workload and measures it cold (fresh mount, caches
dropped) and warm (same mount, second pass), verifying the bytes as it goes.
Writes one JSON file into bench/results/. bench/report.py turns it into tables,
charts and BENCHMARKS.md.

Knobs (environment): QUICK=1, SIZE_SCALE, REPS, CONTENDERS, WORKLOADS, LATENCY_MS,
BW_MBPS, PASS_TIMEOUT, RAND_SECONDS, MAX_MINUTES, FEEDFS, S3RVER. See bench/README.md.
"""
import atexit
import concurrent.futures as cf
import datetime
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(ROOT, "build", "bench")
DATA = os.path.join(WORK, "data")
S3DIR = os.path.join(DATA, "s3rver")
LOCAL = os.path.join(DATA, "local")
MNTROOT = os.path.join(WORK, "mnt")
CACHEROOT = os.path.join(WORK, "cache")
LOGDIR = os.path.join(WORK, "logs")
RESULTS = os.path.join(HERE, "results")
KEY = SECRET = "S3RVER"
MiB = 1 << 20
KiB = 1 << 10


def env_int(name, default):
    v = os.environ.get(name, "")
    return int(v) if v.strip() else default


def env_float(name, default):
    v = os.environ.get(name, "")
    return float(v) if v.strip() else default


QUICK = os.environ.get("QUICK", "") not in ("", "0")
SCALE = env_float("SIZE_SCALE", 0.05 if QUICK else 1.0)
LAT_MS = env_float("LATENCY_MS", 0.0)
BW_MBPS = env_float("BW_MBPS", 0.0)
REPS = max(1, env_int("REPS", 1 if QUICK else 3))
PASS_TIMEOUT = env_float("PASS_TIMEOUT", 30 if QUICK else 240)
RAND_SECONDS = env_float("RAND_SECONDS", 1.5 if QUICK else 4)
MAX_MINUTES = env_float("MAX_MINUTES", 20 if QUICK else 180)
CONTENDERS = [c.strip() for c in (os.environ.get("CONTENDERS") or "feedfs,s3fs,rclone").split(",") if c.strip()]
_wl_default = "1,2,5,6,7" if LAT_MS > 0 else "1,2,3,4,5,6,7"
WORKLOADS = {int(w) for w in (os.environ.get("WORKLOADS") or _wl_default).replace(" ", "").split(",") if w}
FEEDFS = os.environ.get("FEEDFS") or os.path.join(ROOT, "build", "feedfs")
SCRAPED = os.path.join(HERE, "scraped.sh")
PASSTHROUGH = os.path.join(ROOT, "build", "bench", "fuse_ceiling")   # bench/fuse_ceiling.c
PASSTHROUGH_READAHEAD_KB = 8192     # what feedfs sets for itself with its default 8 MiB parts
S3RVER = os.environ.get("S3RVER", "")

# dataset shapes (the sizes at SIZE_SCALE=1)
LARGE_MIB = max(64, int(2048 * SCALE) // 8 * 8)
EPOCH_N = max(200, int(20000 * SCALE))
EPOCH_CLASSES = max(10, min(100, int(100 * SCALE) if SCALE < 1 else 100))
EPOCH_KIB = 100
TREE_N = max(1000, int(100000 * SCALE))
TREE_PREFIXES = max(10, int(1000 * SCALE))
# W6: what a train_list.txt names (PaddleOCR label files, COCO annotations):
# small files of mixed sizes, opened by path in a shuffled order, no walk.
BYPATH_N = max(200, int(2000 * SCALE))
BYPATH_KIB = (4, 160)
BYPATH_DIRS = 20
# W7: a real torch DataLoader over torchvision's ImageFolder (JPEGs of mixed
# sizes in class directories), with and without feedfs's sampler wrapper.
IMGF_N = max(200, int(2000 * SCALE))
IMGF_CLASSES = 20
IMGF_WORKERS = 4

B_LARGE = "large-%dm" % LARGE_MIB
B_EPOCH = "epoch-%dx%dk-%dc" % (EPOCH_N, EPOCH_KIB, EPOCH_CLASSES)
B_TREE = "tree-%d-%dp" % (TREE_N, TREE_PREFIXES)
B_BYPATH = "bypath-%d-%d-%dk" % (BYPATH_N, BYPATH_KIB[0], BYPATH_KIB[1])
B_IMGF = "imagefolder-%d-%dc" % (IMGF_N, IMGF_CLASSES)
LARGE_NAME = "big.bin"

T_START = time.monotonic()
DEADLINE = T_START + MAX_MINUTES * 60


def log(*a):
    el = time.monotonic() - T_START
    print("[bench %5.0fs] %s" % (el, " ".join(str(x) for x in a)), flush=True)


# ---------------------------------------------------------------- processes
_children = []        # Popen objects we started (server, proxy, daemons)
_mounts = set()       # mountpoints we mounted


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, timeout=30):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            return False
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def stop_proc(p, timeout=10):
    if p is None or p.poll() is not None:
        return
    try:
        p.terminate()
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
    except ProcessLookupError:
        pass


def unmount(mnt):
    if not os.path.ismount(mnt):
        _mounts.discard(mnt)
        return
    for cmd in (["fusermount3", "-u", mnt], ["fusermount", "-u", mnt], ["umount", mnt], ["umount", "-l", mnt]):
        try:
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if not os.path.ismount(mnt):
            break
    _mounts.discard(mnt)


def cleanup():
    for m in list(_mounts):
        unmount(m)
    for p in reversed(_children):
        stop_proc(p, 5)


def _on_signal(sig, frame):
    log("signal %d: cleaning up" % sig)
    cleanup()
    os._exit(130)


atexit.register(cleanup)
signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


# This VM hands the memory the guest frees back to its host within seconds (free
# page reporting, virtio_balloon), and the next first touch of such a page costs
# about ten times a normal one: writing 6 GiB to tmpfs 12 s after dropping the
# caches ran at ~3.5 GB/s for the first 1-1.5 GiB, then at ~300 MB/s; right after
# that, at ~4 GB/s for 5 GiB. A cold pass fills the server's page cache and, for a
# filesystem, the reader's too (2 GiB each in W1), while curl's ceilings write to
# /dev/null: measured as is, the contenders paid the host for memory and the
# ceilings hardly did. A cold feedfs `dd` of the 2 GiB object ran at 185-209 MB/s
# 12 s after the last pass and at 272-355 right after 6 GiB were touched; curl
# (8 MiB ranges x4) at 294-430 and 364-430 (bench/host_memory.py,
# bench/results/probes/20261201T0705Z-host-memory.txt). So each cold measurement,
# ceilings and contenders alike, starts right after BACK_MEMORY_GIB (default 6;
# 0: off) of memory were written and freed, as on a machine whose memory is its own.
BACK_MEMORY_GIB = env_float("BACK_MEMORY_GIB", 6)


def back_memory():
    """Touch and free BACK_MEMORY_GIB of memory (through a tmpfs file), at most a third
    of what is available, so the next pass finds memory the host backs."""
    try:
        avail = int([ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemAvailable:")][0]) * 1024
    except (OSError, IndexError, ValueError):
        return
    n = int(min(BACK_MEMORY_GIB * (1 << 30), avail / 3)) >> 20
    if n <= 0 or not os.path.isdir("/dev/shm"):
        return
    path = "/dev/shm/feedfs-bench-back-memory"
    buf = b"\xa5" * (1 << 20)
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        try:
            for _ in range(n):
                os.write(fd, buf)
        finally:
            os.close(fd)
    except OSError:
        pass                    # tmpfs too small: measure without it
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def drop_page_cache():
    """sync and drop the page cache; False when not allowed (not root)."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        return False
    return True


def drop_caches():
    """Drop the page cache before a cold pass, then back_memory()."""
    if not drop_page_cache():
        return False
    back_memory()
    return True


def sh(cmd, timeout=30):
    try:
        r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, text=True)
        return r.stdout.strip()
    except Exception as e:  # noqa: BLE001 - version probes are best effort
        return "unavailable (%s)" % e


# ---------------------------------------------------------------- server
class Server:
    def __init__(self):
        self.port = free_port()
        self.proc = None
        self.proxy = None
        self.endpoint_port = self.port

    def start(self):
        os.makedirs(S3DIR, exist_ok=True)
        env = dict(os.environ)
        env["NODE_OPTIONS"] = (env.get("NODE_OPTIONS", "") + " --openssl-legacy-provider").strip()
        logf = open(os.path.join(LOGDIR, "s3rver.log"), "ab")
        self.proc = subprocess.Popen([S3RVER, "-d", S3DIR, "-a", "127.0.0.1", "-p", str(self.port), "--silent"],
                                     env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        _children.append(self.proc)
        if not wait_port(self.port, self.proc):
            raise SystemExit("s3rver did not start; see %s/s3rver.log" % LOGDIR)
        log("s3rver on 127.0.0.1:%d (data %s)" % (self.port, S3DIR))
        if LAT_MS > 0 or BW_MBPS > 0:
            pp = free_port()
            logf2 = open(os.path.join(LOGDIR, "proxy.log"), "ab")
            self.proxy = subprocess.Popen([sys.executable, os.path.join(HERE, "proxy.py"), "--listen", str(pp),
                                           "--upstream", str(self.port), "--latency-ms", str(LAT_MS),
                                           "--bw-mbps", str(BW_MBPS)], stdout=logf2, stderr=subprocess.STDOUT,
                                          start_new_session=True)
            _children.append(self.proxy)
            if not wait_port(pp, self.proxy):
                raise SystemExit("latency proxy did not start")
            self.endpoint_port = pp
            log("latency proxy on 127.0.0.1:%d (+%g ms first byte, bw cap %g MB/s)" % (pp, LAT_MS, BW_MBPS))

    @property
    def direct(self):
        return "http://127.0.0.1:%d" % self.port

    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.endpoint_port


def s3client(url, pool=32):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=url, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=pool,
                                      retries={"max_attempts": 5}))


# ---------------------------------------------------------------- datasets
def manifest_path(bucket):
    return os.path.join(DATA, "manifest-%s.json" % bucket)


def load_manifest(bucket):
    try:
        with open(manifest_path(bucket)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def save_manifest(bucket, m):
    tmp = manifest_path(bucket) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(m, f)
    os.replace(tmp, manifest_path(bucket))


def bucket_ok(s3, bucket, m):
    try:
        keys = list(m["files"].keys())
        for k in (keys[0], keys[-1], keys[len(keys) // 2]):
            s3.head_object(Bucket=bucket, Key=k)
        return True
    except Exception:  # noqa: BLE001
        return False


def upload_files(s3, bucket, files, threads=16):
    """files: list of relative paths under LOCAL/bucket. Bounded retries per object."""
    base = os.path.join(LOCAL, bucket)
    done = [0]
    lock = threading.Lock()
    t0 = time.monotonic()

    def put(rel):
        with open(os.path.join(base, rel), "rb") as f:
            body = f.read()
        for attempt in range(5):
            try:
                s3.put_object(Bucket=bucket, Key=rel, Body=body)
                break
            except Exception:  # noqa: BLE001
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        with lock:
            done[0] += 1
            if done[0] % 5000 == 0:
                log("  %s: %d/%d uploaded (%.0f/s)" % (bucket, done[0], len(files), done[0] / (time.monotonic() - t0)))

    with cf.ThreadPoolExecutor(threads) as ex:
        list(ex.map(put, files))


DIRECT_SEED = os.environ.get("DIRECT_SEED", "1") not in ("", "0")


def seed_direct(bucket, files):
    """Write objects straight into s3rver's on-disk store (3.7.1 layout: KEY._S3rver_object,
    KEY._S3rver_object.md5, KEY._S3rver_metadata.json). Creating 100k keys through PUTs costs
    ~15 min on a busy 2-core machine; this takes seconds. DIRECT_SEED=0 uploads with boto3."""
    base = os.path.join(LOCAL, bucket)
    dst = os.path.join(S3DIR, bucket)
    meta = '{\n  "content-type": "binary/octet-stream"\n}'
    made = set()
    for rel in files:
        with open(os.path.join(base, rel), "rb") as f:
            b = f.read()
        p = os.path.join(dst, rel)
        d = os.path.dirname(p)
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        with open(p + "._S3rver_object", "wb") as f:
            f.write(b)
        with open(p + "._S3rver_object.md5", "w") as f:
            f.write(hashlib.md5(b).hexdigest())
        with open(p + "._S3rver_metadata.json", "w") as f:
            f.write(meta)


def seed(s3, bucket, files, threads=16):
    ensure_bucket(s3, bucket)
    if DIRECT_SEED:
        seed_direct(bucket, files)
    else:
        upload_files(s3, bucket, files, threads)


def ensure_bucket(s3, bucket):
    try:
        s3.create_bucket(Bucket=bucket)
    except Exception as e:  # noqa: BLE001
        if "BucketAlready" not in str(e):
            raise


def make_large(s3):
    m = load_manifest(B_LARGE)
    if m and bucket_ok(s3, B_LARGE, m):
        return m
    log("creating dataset %s (one %d MiB object) - once, cached in %s" % (B_LARGE, LARGE_MIB, DATA))
    d = os.path.join(LOCAL, B_LARGE)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, LARGE_NAME)
    h = hashlib.sha256()
    crcs = []
    with open(path, "wb") as f:
        for _ in range(LARGE_MIB):
            b = os.urandom(MiB)
            h.update(b)
            crcs.append(zlib.crc32(b))
            f.write(b)
    ensure_bucket(s3, B_LARGE)
    from boto3.s3.transfer import TransferConfig
    s3.upload_file(path, B_LARGE, LARGE_NAME,
                   Config=TransferConfig(multipart_threshold=64 * MiB, multipart_chunksize=64 * MiB, max_concurrency=4))
    m = {"bucket": B_LARGE, "size": LARGE_MIB * MiB, "sha256": h.hexdigest(), "crc_mib": crcs,
         "files": {LARGE_NAME: h.hexdigest()}}
    save_manifest(B_LARGE, m)
    return m


def make_epoch(s3):
    m = load_manifest(B_EPOCH)
    if m and bucket_ok(s3, B_EPOCH, m):
        return m
    log("creating dataset %s (%d x %d KiB in %d classes) - once" % (B_EPOCH, EPOCH_N, EPOCH_KIB, EPOCH_CLASSES))
    base = os.path.join(LOCAL, B_EPOCH)
    files = {}
    for i in range(EPOCH_N):
        rel = "class_%03d/img_%06d.bin" % (i % EPOCH_CLASSES, i)
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        b = os.urandom(EPOCH_KIB * KiB)
        with open(p, "wb") as f:
            f.write(b)
        files[rel] = hashlib.sha256(b).hexdigest()
    seed(s3, B_EPOCH, sorted(files))
    m = {"bucket": B_EPOCH, "files": files, "size_each": EPOCH_KIB * KiB}
    save_manifest(B_EPOCH, m)
    return m


def make_tree(s3):
    m = load_manifest(B_TREE)
    if m and bucket_ok(s3, B_TREE, m):
        return m
    log("creating dataset %s (%d tiny keys in %d prefixes) - once, may take minutes on s3rver" %
        (B_TREE, TREE_N, TREE_PREFIXES))
    base = os.path.join(LOCAL, B_TREE)
    files = {}
    for i in range(TREE_N):
        rel = "p_%04d/k_%06d" % (i % TREE_PREFIXES, i)
        p = os.path.join(base, rel)
        if i < TREE_PREFIXES:
            os.makedirs(os.path.dirname(p), exist_ok=True)
        b = ("%s %08x\n" % (rel, i * 2654435761 & 0xffffffff)).encode()
        with open(p, "wb") as f:
            f.write(b)
        files[rel] = len(b)
    seed(s3, B_TREE, sorted(files))
    m = {"bucket": B_TREE, "files": files}
    save_manifest(B_TREE, m)
    return m


def put_markers(s3, bucket, names):
    """Zero-byte "dir/" objects. s3rver leaves a prefix that holds only
    sub-prefixes out of its parent's CommonPrefixes (tests/../s3rver-quirks
    #2; real S3 lists it), so a mount that resolves a path from its parent's
    listing (rclone) would not find "images/part_00/..." at all."""
    for n in names:
        s3.put_object(Bucket=bucket, Key=n, Body=b"")


def make_bypath(s3):
    m = load_manifest(B_BYPATH)
    if m and bucket_ok(s3, B_BYPATH, m):
        put_markers(s3, B_BYPATH, ["images/"])
        return m
    log("creating dataset %s (%d files of %d-%d KiB in %d dirs) - once" %
        (B_BYPATH, BYPATH_N, BYPATH_KIB[0], BYPATH_KIB[1], BYPATH_DIRS))
    base = os.path.join(LOCAL, B_BYPATH)
    rng = random.Random(619)                 # the sizes are part of the dataset: seeded
    files, sizes = {}, {}
    for i in range(BYPATH_N):
        rel = "images/part_%02d/img_%06d.jpg" % (i % BYPATH_DIRS, i)
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        b = os.urandom(rng.randint(BYPATH_KIB[0] * KiB, BYPATH_KIB[1] * KiB))
        with open(p, "wb") as f:
            f.write(b)
        files[rel] = hashlib.sha256(b).hexdigest()
        sizes[rel] = len(b)
    seed(s3, B_BYPATH, sorted(files))
    put_markers(s3, B_BYPATH, ["images/"])
    m = {"bucket": B_BYPATH, "files": files, "sizes": sizes}
    save_manifest(B_BYPATH, m)
    return m


def make_imagefolder(s3):
    m = load_manifest(B_IMGF)
    if m and bucket_ok(s3, B_IMGF, m):
        put_markers(s3, B_IMGF, ["train/"])
        return m
    from PIL import Image
    log("creating dataset %s (%d JPEGs in %d classes) - once" % (B_IMGF, IMGF_N, IMGF_CLASSES))
    base = os.path.join(LOCAL, B_IMGF)
    rng = random.Random(717)
    files, sizes = {}, {}
    for i in range(IMGF_N):
        rel = "train/class_%02d/img_%05d.jpg" % (i % IMGF_CLASSES, i)
        p = os.path.join(base, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        # Noise compresses badly: 48..330 px a side gives ~4..160 KiB files.
        w, h = rng.randint(48, 330), rng.randint(48, 330)
        Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3)).save(p, "JPEG", quality=85)
        with open(p, "rb") as f:
            b = f.read()
        files[rel] = hashlib.sha256(b).hexdigest()
        sizes[rel] = len(b)
    seed(s3, B_IMGF, sorted(files))
    put_markers(s3, B_IMGF, ["train/"])
    m = {"bucket": B_IMGF, "files": files, "sizes": sizes}
    save_manifest(B_IMGF, m)
    return m


# ---------------------------------------------------------------- RSS sampling
class RssSampler:
    def __init__(self, pid):
        self.pid = pid
        self.peak_kib = 0
        self.hwm_kib = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _read(self):
        rss = hwm = 0
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1])
                    elif line.startswith("VmHWM:"):
                        hwm = int(line.split()[1])
        except OSError:
            pass
        return rss, hwm

    def _run(self):
        while not self._stop.wait(0.1):
            rss, hwm = self._read()
            self.peak_kib = max(self.peak_kib, rss)
            self.hwm_kib = max(self.hwm_kib, hwm)

    def stop(self):
        rss, hwm = self._read()
        self.peak_kib = max(self.peak_kib, rss)
        self.hwm_kib = max(self.hwm_kib, hwm)
        self._stop.set()
        self._t.join(2)
        return max(self.peak_kib, self.hwm_kib) / 1024.0


# ---------------------------------------------------------------- contenders
class Contender:
    """One mount configuration. kind: 'fuse' (a daemon) or 'local' (a local directory)."""

    def __init__(self, name, family, argv_fn=None, env=None, cache=False, kind="fuse", options="",
                 workloads=None, order_fn=None):
        self.name, self.family, self.argv_fn, self.env = name, family, argv_fn, env or {}
        self.cache, self.kind, self.options = cache, kind, options
        self.workloads = workloads  # None: every workload
        self.order_fn = order_fn    # W6: order_fn(root, rel_paths) before each pass
        self.broken = None  # set when it cannot mount at all

    def runs(self, w):
        return w in WORKLOADS and (self.workloads is None or w in self.workloads)

    def cachedir(self, bucket):
        return os.path.join(CACHEROOT, self.name, bucket)

    def mount(self, bucket):
        """Returns (root, proc). For local, root is the local copy and proc None."""
        if self.kind == "local":
            return os.path.join(LOCAL, bucket), None
        mnt = os.path.join(MNTROOT, self.name, bucket)
        os.makedirs(mnt, exist_ok=True)
        unmount(mnt)
        cdir = self.cachedir(bucket)
        shutil.rmtree(cdir, ignore_errors=True)   # cold = empty disk cache too
        os.makedirs(cdir, exist_ok=True)
        env = dict(os.environ)
        env.update(self.env)
        env.pop("AWS_CA_BUNDLE", None)             # rclone 1.60 refuses it for plain http
        logf = open(os.path.join(LOGDIR, "%s-%s.log" % (self.name, bucket)), "ab")
        argv = self.argv_fn(bucket, mnt, cdir)
        logf.write(("\n# %s %s\n" % (datetime.datetime.now().isoformat(), " ".join(argv))).encode())
        logf.flush()
        proc = subprocess.Popen(argv, env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        _children.append(proc)
        end = time.monotonic() + 30
        while time.monotonic() < end:
            if os.path.ismount(mnt):
                _mounts.add(mnt)
                # the mount must answer a listing before timing starts
                try:
                    os.listdir(mnt)
                except OSError as e:
                    self._kill(proc, mnt)
                    raise RuntimeError("mounted but root listing failed: %s" % e)
                return mnt, proc
            if proc.poll() is not None:
                raise RuntimeError("daemon exited with %s before mounting (log %s)" % (proc.returncode, logf.name))
            time.sleep(0.05)
        self._kill(proc, mnt)
        raise RuntimeError("not mounted within 30 s")

    def _kill(self, proc, mnt):
        unmount(mnt)
        stop_proc(proc, 10)
        if proc in _children:
            _children.remove(proc)

    def umount(self, root, proc):
        if self.kind == "local":
            return
        self._kill(proc, root)


def make_contenders(server):
    ep = server.endpoint
    cs = []
    if "local" in CONTENDERS or True:
        cs.append(Contender("local-disk", "disk", kind="local", options="the same files in build/bench/data/local"))
    if os.access(PASSTHROUGH, os.X_OK) and not LAT_MS:
        # The fastest a FUSE daemon serves those files here: what FUSE itself costs
        # (bench/fuse_ceiling.c; the kernel readahead feedfs sets for itself, 8 MiB).
        cs.append(Contender("fuse-passthrough", "disk",
                            lambda b, m, c: [PASSTHROUGH, "--readahead-kb", str(PASSTHROUGH_READAHEAD_KB),
                                             os.path.join(LOCAL, b), m],
                            options="bench/fuse_ceiling.c over build/bench/data/local (splice replies, "
                                    "read_ahead_kb 8192)"))
    if "feedfs" in CONTENDERS:
        if os.access(FEEDFS, os.X_OK):
            fenv = {"AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": "us-east-1"}
            fbase = ["--endpoint-url", ep, "--force-path-style", "-f"]
            cs.append(Contender("feedfs", "feedfs",
                                lambda b, m, c: [FEEDFS, "s3://%s" % b, m] + fbase +
                                ["--log-file", os.path.join(LOGDIR, "feedfs-daemon-%s.log" % b)],
                                env=fenv, options="defaults (--endpoint-url, --force-path-style)"))
            if "--metrics-addr" in sh("%s --help 2>&1" % FEEDFS):
                # The same mount scraped once a second (bench/scraped.sh): what
                # /metrics costs the sequential read (issue 16: under 1%).
                cs.append(Contender("feedfs-scraped", "feedfs",
                                    lambda b, m, c: [SCRAPED, str(free_port()), FEEDFS, "s3://%s" % b, m] +
                                    fbase + ["--log-file",
                                             os.path.join(LOGDIR, "feedfs-scraped-daemon-%s.log" % b)],
                                    env=fenv, workloads={1},
                                    options="defaults + --metrics-addr, GET /metrics every second"))
            if "--order" in sh("%s prefetch --help 2>&1" % FEEDFS):
                # The same mount told the loader's order before each pass
                # (issue 19): `feedfs prefetch --order - MOUNTPOINT`, paths on stdin.
                cs.append(Contender("feedfs-order", "feedfs",
                                    lambda b, m, c: [FEEDFS, "s3://%s" % b, m] + fbase +
                                    ["--log-file", os.path.join(LOGDIR, "feedfs-order-daemon-%s.log" % b)],
                                    env=fenv, workloads={6, 7}, order_fn=send_order_cli,
                                    options="defaults; the pass's order sent with feedfs prefetch --order "
                                            "before it"))
            else:
                log("feedfs-order: %s has no 'prefetch' subcommand (no --order in 'feedfs prefetch "
                    "--help') - skipped" % FEEDFS)
            if "--cache-dir" in sh("%s --help 2>&1" % FEEDFS):
                cs.append(Contender("feedfs-cache", "feedfs",
                                    lambda b, m, c: [FEEDFS, "s3://%s" % b, m] + fbase +
                                    # 6 GiB holds the largest dataset (2 GiB object, 2 GiB
                                    # epoch) and fits the disks we run on; feedfs refuses a
                                    # size beyond the free space (keeping 5% free).
                                    ["--cache-dir", c, "--cache-size", "6G",
                                     "--log-file", os.path.join(LOGDIR, "feedfs-cache-daemon-%s.log" % b)],
                                    env=fenv, cache=True, options="--cache-dir DIR --cache-size 6G"))
        else:
            log("feedfs: %s not built - skipped" % FEEDFS)
    if "s3fs" in CONTENDERS and shutil.which("s3fs"):
        pw = os.path.join(WORK, "s3fs.passwd")
        with open(pw, "w") as f:
            f.write("%s:%s\n" % (KEY, SECRET))
        os.chmod(pw, 0o600)
        tuned = ("parallel_count=16,multipart_size=8,multireq_max=64,max_stat_cache_size=400000,"
                 "stat_cache_expire=3600,enable_noobj_cache,kernel_cache")
        base = "passwd_file=%s,url=%s,use_path_request_style,ro" % (pw, ep)
        cs.append(Contender("s3fs", "s3fs", lambda b, m, c: ["s3fs", b, m, "-f", "-o", base + "," + tuned],
                            options="-o use_path_request_style,ro," + tuned))
        cs.append(Contender("s3fs-cache", "s3fs", lambda b, m, c: ["s3fs", b, m, "-f", "-o",
                                                                   base + "," + tuned + ",use_cache=" + c],
                            cache=True, options="-o use_path_request_style,ro," + tuned + ",use_cache=DIR"))
    if "rclone" in CONTENDERS and shutil.which("rclone"):
        conf = os.path.join(WORK, "rclone.conf")
        open(conf, "a").close()
        renv = {"RCLONE_CONFIG": conf, "RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
                "RCLONE_CONFIG_BENCH_ENDPOINT": ep, "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true",
                "RCLONE_CONFIG_BENCH_REGION": "us-east-1", "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": KEY,
                "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": SECRET}
        common = ["--read-only", "--dir-cache-time", "1h", "--attr-timeout", "1h", "--no-modtime",
                  "--use-server-modtime", "--log-level", "NOTICE"]
        off = ["--vfs-cache-mode", "off", "--buffer-size", "128M", "--vfs-read-chunk-size", "64M",
               "--max-read-ahead", "1M"]
        full = ["--vfs-cache-mode", "full", "--vfs-cache-max-size", "16G", "--vfs-read-chunk-size", "16M",
                "--buffer-size", "64M", "--vfs-read-ahead", "512M"]
        cs.append(Contender("rclone-off", "rclone",
                            lambda b, m, c: ["rclone", "mount", "bench:" + b, m, "--cache-dir", c] + common + off,
                            env=renv, options=" ".join(common[:-2] + off)))
        cs.append(Contender("rclone-full", "rclone",
                            lambda b, m, c: ["rclone", "mount", "bench:" + b, m, "--cache-dir", c] + common + full,
                            env=renv, cache=True, options=" ".join(common[:-2] + full + ["--cache-dir", "DIR"])))
    return cs


# ---------------------------------------------------------------- workloads
class Wrong(Exception):
    """The contender returned wrong bytes (or wrong metadata)."""


def send_order_cli(root, rels):
    """feedfs-order: hand the pass's order to the mount the way a user would.
    Returns the seconds it took (it returns once the daemon has the list)."""
    t0 = time.monotonic()
    p = subprocess.run([FEEDFS, "prefetch", "--order", "-", root], input="".join(r + "\n" for r in rels),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    if p.returncode != 0:
        raise RuntimeError("feedfs prefetch --order exited %d: %s" % (p.returncode, p.stdout.strip()))
    return time.monotonic() - t0


def feedfs_counters(root):
    """The mount's request and order counters (python/feedfs over its control
    socket), for the result file; None when the mount has no such socket."""
    try:
        if os.path.join(ROOT, "python") not in sys.path:
            sys.path.insert(0, os.path.join(ROOT, "python"))
        import feedfs
        st = feedfs.stats(root)
    except Exception:  # noqa: BLE001 - counters are context, not a measurement
        return None
    s3 = st.get("s3", {})
    out = {k: s3.get(k) for k in ("get_requests", "head_requests", "list_requests")}
    if "order" in st:
        out["order"] = st["order"]
    return out


def _read_full(fd, mv, off):
    n = 0
    while n < len(mv):
        r = os.preadv(fd, [mv[n:]], off + n)
        if r <= 0:
            break
        n += r
    return n


def w_seq(root, man, readers, deadline, want_ttfb=False):
    """Read the large object sequentially by `readers` readers at different offsets. MB/s."""
    path = os.path.join(root, LARGE_NAME)
    size = man["size"]
    seg = size // readers
    crcs = man["crc_mib"]
    errors, wrong = [], []
    total = [0]
    lock = threading.Lock()
    ttfb = [None]

    def reader(i):
        buf = bytearray(MiB)
        mv = memoryview(buf)
        lo, hi = i * seg, (i + 1) * seg if i < readers - 1 else size
        t0 = time.monotonic()
        fd = os.open(path, os.O_RDONLY)
        got = 0
        try:
            off = lo
            k = 0
            while off < hi:
                n = _read_full(fd, mv[:min(MiB, hi - off)], off)
                if k == 0 and i == 0:
                    ttfb[0] = time.monotonic() - t0
                if n <= 0:
                    raise IOError("short read at %d" % off)
                if off % MiB == 0 and n == MiB and (k % 16 == 0 or k < 2) and zlib.crc32(mv[:n]) != crcs[off // MiB]:
                    wrong.append("bytes differ in MiB %d" % (off // MiB))
                    return
                off += n
                got += n
                k += 1
                if time.monotonic() > deadline:
                    errors.append("timeout")
                    break
        except OSError as e:
            errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            os.close(fd)
            with lock:
                total[0] += got

    t0 = time.monotonic()
    ths = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    el = time.monotonic() - t0
    if wrong:
        raise Wrong(wrong[0])
    res = {"value": total[0] / 1e6 / el, "unit": "MB/s", "seconds": el, "bytes": total[0]}
    if errors:
        res["error"] = errors[0]
        res["partial"] = errors[0] == "timeout"
    if want_ttfb and ttfb[0] is not None:
        res["ttfb_ms"] = ttfb[0] * 1000
    return res


def verify_large_sha(root, man, deadline):
    h = hashlib.sha256()
    t0 = time.monotonic()
    with open(os.path.join(root, LARGE_NAME), "rb", buffering=0) as f:
        while True:
            b = f.read(4 * MiB)
            if not b:
                break
            h.update(b)
            if time.monotonic() > deadline:
                return {"ok": False, "error": "sha256 pass timed out"}
    el = time.monotonic() - t0
    ok = h.hexdigest() == man["sha256"]
    return {"ok": ok, "seconds": el, "error": None if ok else "sha256 mismatch on the large object"}


def read_files(root, rels, expect, threads, deadline):
    """`threads` readers take the next of rels (paths relative to root) from
    one shared iterator and read it whole, sha256 checked against expect[rel].
    Returns (files, bytes, first error or None); raises Wrong on wrong bytes."""
    it = iter(rels)
    lock = threading.Lock()
    done = [0, 0]
    errors, wrong = [], []

    def worker():
        n = nbytes = 0
        while True:
            if time.monotonic() > deadline:
                errors.append("timeout")
                break
            with lock:
                rel = next(it, None)
            if rel is None:
                break
            try:
                with open(os.path.join(root, rel), "rb", buffering=0) as f:
                    b = f.readall()
            except OSError as e:
                errors.append("%s: %s" % (rel, e))
                break
            if hashlib.sha256(b).hexdigest() != expect.get(rel):
                wrong.append("bytes differ in %s (%d bytes read)" % (rel, len(b)))
                break
            n += 1
            nbytes += len(b)
        with lock:
            done[0] += n
            done[1] += nbytes

    ths = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    if wrong:
        raise Wrong(wrong[0])
    return done[0], done[1], errors[0] if errors else None


def files_result(files, nbytes, el, error, **extra):
    res = {"value": files / el, "unit": "files/s", "seconds": el, "files": files, "bytes": nbytes,
           "sha256_verified": files}
    res.update(extra)
    if error:
        res["error"] = error
        res["partial"] = error == "timeout"
    return res


def w_epoch(root, man, threads, deadline):
    """os.walk + read every file with `threads` threads, sha256 each against the source. files/s."""
    t0 = time.monotonic()
    paths = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for fn in files:
            paths.append(os.path.join(d, fn))
        if time.monotonic() > deadline:
            break
    t_walk = time.monotonic() - t0
    if len(paths) != len(man["files"]):
        raise Wrong("walk saw %d files, expected %d" % (len(paths), len(man["files"])))
    random.Random(1234).shuffle(paths)       # a training loader shuffles
    cut = len(root) + 1
    files, nbytes, err = read_files(root, [p[cut:] for p in paths], man["files"], threads, deadline)
    return files_result(files, nbytes, time.monotonic() - t0, err, walk_s=t_walk)


def w_bypath(root, man, threads, deadline, epoch, order_fn=None):
    """W6: open every file by its path in a seeded shuffled order (no walk, no
    listing first: the names come from a list, as a train_list.txt gives them),
    `threads` readers taking the next path from one shared iterator, sha256 of
    each against the source. order_fn(root, rel_paths), when given, is told the
    order first, inside the timed pass. files/s."""
    rels = sorted(man["files"])
    random.Random(4242 + epoch).shuffle(rels)
    t0 = time.monotonic()
    order_s = order_fn(root, rels) if order_fn else None
    files, nbytes, err = read_files(root, rels, man["files"], threads, deadline)
    extra = {"order_s": order_s} if order_s is not None else {}
    return files_result(files, nbytes, time.monotonic() - t0, err, **extra)


def w_loader(root, epoch, workers, order, deadline):
    """W7: one epoch of torch's DataLoader over ImageFolder (bench/loader.py, a
    process of its own: torch and its workers stay out of this one). Each
    image's sha256 is checked in the worker that reads it. samples/s."""
    cmd = [sys.executable, os.path.join(HERE, "loader.py"), root, manifest_path(B_IMGF), str(epoch),
           str(workers)] + (["--order"] if order else [])
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=max(10, deadline - time.monotonic()) + 60)
    except subprocess.TimeoutExpired:
        return {"value": 0.0, "unit": "samples/s", "error": "timed out", "files": 0}
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"value": 0.0, "unit": "samples/s", "files": 0,
                "error": "loader.py exited %d: %s" % (p.returncode, p.stderr.strip()[-300:])}
    if out.get("error") and "wrong bytes" in out["error"]:
        raise Wrong(out["error"])
    r = {"value": out["samples_per_s"], "unit": "samples/s", "files": out["samples"],
         "elapsed_s": out["wall_s"], "scan_s": out["scan_s"], "workers": workers, "order": order}
    if out.get("error"):
        r["error"] = out["error"]
    return r


def w_list(root, man, deadline):
    """os.walk + lstat of every key. seconds (lower is better)."""
    t0 = time.monotonic()
    n = 0
    bad = None
    cut = len(root) + 1
    expect = man["files"]
    timed_out = False
    for d, dirs, files in os.walk(root):
        for fn in files:
            p = os.path.join(d, fn)
            st = os.lstat(p)
            n += 1
            if bad is None and expect.get(p[cut:]) != st.st_size:
                bad = "%s: size %d, expected %s" % (p[cut:], st.st_size, expect.get(p[cut:]))
        if time.monotonic() > deadline:
            timed_out = True
            break
    el = time.monotonic() - t0
    if bad:
        raise Wrong(bad)
    if not timed_out and n != len(expect):
        raise Wrong("walk saw %d keys, expected %d" % (n, len(expect)))
    res = {"value": el, "unit": "s", "keys": n}
    if timed_out:
        res.update(error="timeout", partial=True)
    return res


def w_rand(root, man, bs, readers, seconds, replay=None):
    """Random aligned reads of `bs` bytes in the large object for `seconds`. IOPS.
    replay: the offsets of an earlier (cold) run, re-read for the warm figure."""
    path = os.path.join(root, LARGE_NAME)
    size = man["size"]
    samples = []
    offs_out = [[] for _ in range(readers)]
    errors = []
    counts = [0] * readers
    end = time.monotonic() + seconds

    def reader(i):
        rng = random.Random(1000 + i * 7919 + bs)
        fd = os.open(path, os.O_RDONLY)
        try:
            seq = replay[i] if replay else None
            k = 0
            while k < 500000:
                if seq is not None:
                    if k >= len(seq):
                        break
                    off = seq[k]
                else:
                    if time.monotonic() > end:
                        break
                    off = rng.randrange(0, (size - bs) // 4096) * 4096
                b = os.pread(fd, bs, off)
                if len(b) != bs:
                    errors.append("short read %d at %d" % (len(b), off))
                    break
                if k % 8 == 0:
                    samples.append((off, zlib.crc32(b)))
                offs_out[i].append(off)
                k += 1
            counts[i] = k
        except OSError as e:
            errors.append("%s: %s" % (type(e).__name__, e))
        finally:
            os.close(fd)

    t0 = time.monotonic()
    ths = [threading.Thread(target=reader, args=(i,)) for i in range(readers)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    el = time.monotonic() - t0
    # compare samples with the source (after timing, so the check costs no timed I/O)
    src = os.path.join(LOCAL, B_LARGE, LARGE_NAME)
    with open(src, "rb") as f:
        for off, c in samples[:400]:
            f.seek(off)
            if zlib.crc32(f.read(bs)) != c:
                raise Wrong("random %d-byte read at %d differs from the source" % (bs, off))
    res = {"value": sum(counts) / el, "unit": "IOPS", "ops": sum(counts), "seconds": el,
           "MBps": sum(counts) * bs / 1e6 / el, "samples_verified": min(len(samples), 400)}
    if errors:
        res["error"] = errors[0]
    return res, offs_out


def w_ttfb(root, man, n=10, paths=None):
    """Time from open() of a never-opened file to its first 4 KiB (lookup included). ms (median)."""
    if paths is None:
        keys = sorted(man["files"])
        step = max(1, len(keys) // n)
        paths = [keys[(i * step + 7) % len(keys)] for i in range(n)]
    ts = []
    for rel in paths:
        t0 = time.monotonic()
        fd = os.open(os.path.join(root, rel), os.O_RDONLY)
        try:
            b = os.read(fd, 4096)
        finally:
            os.close(fd)
        ts.append((time.monotonic() - t0) * 1000)
        exp = man["files"][rel]
        if len(b) == 0 or (isinstance(exp, str) and len(b) != 4096):
            raise Wrong("short first read of %s" % rel)
    return {"value": statistics.median(ts), "unit": "ms", "min_ms": min(ts), "max_ms": max(ts), "n": len(ts)}, paths


# ---------------------------------------------------------------- ceilings
def curl_cfg_run(cfg_lines, timeout):
    """Run one curl over a config of many transfers (one connection reused). Returns (ok, out)."""
    p = subprocess.run(["curl", "-s", "-S", "--fail", "-K", "-"], input="\n".join(cfg_lines) + "\n",
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    return p.returncode == 0, p.stderr.strip()


def parallel_curls(cfgs, timeout):
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(len(cfgs)) as ex:
        outs = list(ex.map(lambda c: curl_cfg_run(c, timeout), cfgs))
    el = time.monotonic() - t0
    bad = [o for ok, o in outs if not ok]
    return el, (bad[0] or "curl failed") if bad else None


def ceil_seq(url, size, streams, timeout):
    seg = size // streams
    cfgs = []
    for i in range(streams):
        lo, hi = i * seg, (size - 1 if i == streams - 1 else (i + 1) * seg - 1)
        cfgs.append(['url = "%s"' % url, 'range = "%d-%d"' % (lo, hi), 'output = "/dev/null"'])
    el, err = parallel_curls(cfgs, timeout)
    return {"value": size / 1e6 / el, "unit": "MB/s", "seconds": el, "error": err}


def ceil_ranges(url, size, part, streams, timeout):
    """streams curls, each fetching every streams-th range of `part` bytes back to back over one
    connection: a readahead's request pattern with always `streams` GETs in flight."""
    cfgs = [[] for _ in range(streams)]
    for i, lo in enumerate(range(0, size, part)):
        c = cfgs[i % streams]
        if c:
            c.append("next")
        c += ['url = "%s"' % url, 'range = "%d-%d"' % (lo, min(lo + part, size) - 1), 'output = "/dev/null"']
    el, err = parallel_curls(cfgs, timeout)
    return {"value": size / 1e6 / el, "unit": "MB/s", "seconds": el, "error": err}


# The sequential ceiling: curl over long ranges (1, 4, 8 streams) and over 8 MiB ranges 8 at a time;
# the best of them is the ceiling a client is compared with.
SEQ_CEILINGS = (("1 stream", lambda u, n, t: ceil_seq(u, n, 1, t)),
                ("4 streams", lambda u, n, t: ceil_seq(u, n, 4, t)),
                ("8 streams", lambda u, n, t: ceil_seq(u, n, 8, t)),
                ("8MiB ranges x8", lambda u, n, t: ceil_ranges(u, n, 8 * MiB, 8, t)))


def ceil_small(base, keys, clients, timeout):
    cfgs = [[] for _ in range(clients)]
    for i, k in enumerate(keys):
        c = cfgs[i % clients]
        if c:
            c.append("next")
        c += ['url = "%s/%s"' % (base, k), 'output = "/dev/null"']
    el, err = parallel_curls(cfgs, timeout)
    return {"value": len(keys) / el, "unit": "GET/s", "seconds": el, "n": len(keys), "error": err}


def ceil_rand(url, size, bs, clients, seconds):
    # enough ranged GETs for ~`seconds`; rate-probed with a small first batch is overkill: fixed count
    n_each = max(20, int((300 if bs >= MiB else 600) * seconds / clients))
    rng = random.Random(77 + bs)
    cfgs = []
    for _ in range(clients):
        c = []
        for _j in range(n_each):
            off = rng.randrange(0, (size - bs) // 4096) * 4096
            if c:
                c.append("next")
            c += ['url = "%s"' % url, 'range = "%d-%d"' % (off, off + bs - 1), 'output = "/dev/null"']
        cfgs.append(c)
    el, err = parallel_curls(cfgs, 120)
    return {"value": n_each * clients / el, "unit": "IOPS", "seconds": el, "error": err}


def ceil_ttfb(base, keys):
    ts = []
    for k in keys:
        out = subprocess.run(["curl", "-s", "-o", "/dev/null", "-r", "0-4095", "-w", "%{time_starttransfer}",
                              "%s/%s" % (base, k)], stdout=subprocess.PIPE, text=True, timeout=30).stdout
        ts.append(float(out) * 1000)
    return {"value": statistics.median(ts), "unit": "ms", "min_ms": min(ts), "max_ms": max(ts), "n": len(ts)}


def ceil_list(server, bucket, deadline):
    s3 = s3client(server.endpoint, 4)
    t0 = time.monotonic()
    n = 0
    prefixes = []
    pg = s3.get_paginator("list_objects_v2")
    for page in pg.paginate(Bucket=bucket, Delimiter="/"):
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    for pfx in sorted(set(prefixes)):
        for page in pg.paginate(Bucket=bucket, Prefix=pfx, Delimiter="/"):
            n += len(page.get("Contents", []))
        if time.monotonic() > deadline:
            break
    return {"value": time.monotonic() - t0, "unit": "s", "keys": n}


# ---------------------------------------------------------------- run
class Run:
    def __init__(self, server, mans):
        self.server, self.mans = server, mans
        self.results = []
        self.verify = []
        self.paired = []        # W1 ceilings measured just before each contender's cold pass

    def add(self, contender, workload, variant, phase, rep, res, rss=None):
        r = {"config": contender.name if hasattr(contender, "name") else contender,
             "family": contender.family if hasattr(contender, "family") else "server",
             "workload": workload, "variant": variant, "phase": phase, "rep": rep}
        r.update(res)
        r.setdefault("ok", "error" not in res or res.get("partial", False) or not res.get("error"))
        if rss is not None:
            r["rss_peak_mib"] = round(rss, 1)
        self.results.append(r)
        v = r.get("value")
        log("  %-12s W%-2s %-14s %-4s rep%d: %s %s%s%s" % (
            r["config"], workload, variant, phase, rep,
            "%.1f" % v if isinstance(v, (int, float)) else v, r.get("unit", ""),
            "" if rss is None else "  rss %.0f MiB" % rss,
            "" if not res.get("error") else "  [%s]" % res["error"]))

    def over_budget(self):
        return time.monotonic() > DEADLINE

    # -- ceilings --------------------------------------------------------
    def ceilings(self, rep):
        """The server's ceilings, each measurement from a cold page cache as every contender's cold
        pass is (the server's store shares this machine's page cache: a pattern run after another
        over the same object would read it from memory)."""
        srv = self.server
        base = srv.endpoint
        to = PASS_TIMEOUT
        ml, me = self.mans.get("large"), self.mans.get("epoch")
        S = "server"
        if 1 in WORKLOADS and ml:
            url = "%s/%s/%s" % (base, B_LARGE, LARGE_NAME)
            for name, fn in SEQ_CEILINGS:
                drop_caches()       # each pattern from a cold server, as every contender's cold pass
                self.add(S, 1, name, "cold", rep, fn(url, ml["size"], to))
        if 2 in WORKLOADS and me:
            keys = sorted(me["files"])
            random.Random(rep).shuffle(keys)
            keys = keys[:min(len(keys), 8000)]
            for c in (8, 16):
                drop_caches()
                self.add(S, 2, "%d clients" % c, "cold", rep, ceil_small("%s/%s" % (base, B_EPOCH), keys, c, to))
        if 3 in WORKLOADS and "tree" in self.mans:
            drop_caches()
            self.add(S, 3, "ListObjectsV2", "cold", rep, ceil_list(srv, B_TREE, time.monotonic() + to))
        if 4 in WORKLOADS and ml:
            url = "%s/%s/%s" % (base, B_LARGE, LARGE_NAME)
            for bs, lab in ((4 * KiB, "4KiB"), (MiB, "1MiB")):
                for c in (1, 8):
                    drop_caches()
                    self.add(S, 4, "%s x%d" % (lab, c), "cold", rep, ceil_rand(url, ml["size"], bs, c, RAND_SECONDS))
        if 5 in WORKLOADS and me:
            keys = sorted(me["files"])
            drop_caches()
            self.add(S, 5, "small object", "cold", rep, ceil_ttfb("%s/%s" % (base, B_EPOCH), keys[rep::max(1, len(keys) // 10)][:10]))
        mb = self.mans.get("bypath")
        if 6 in WORKLOADS and mb:
            # every file once, in the pass's shuffled order, by as many curls as readers
            keys = sorted(mb["files"])
            random.Random(4242 + 2 * rep).shuffle(keys)
            for c in (4, 16):
                drop_caches()
                self.add(S, 6, "%d clients" % c, "cold", rep, ceil_small("%s/%s" % (base, B_BYPATH), keys, c, to))

    def paired_ceiling(self, c, rep):
        """The sequential ceiling again, right before c's cold 1-reader pass: the server's disk
        drifts over a long run, so W1's target is judged on the ratio to this one."""
        ml = self.mans["large"]
        url = "%s/%s/%s" % (self.server.endpoint, B_LARGE, LARGE_NAME)
        for name, fn in SEQ_CEILINGS[1:]:       # one stream is never the best
            drop_caches()
            r = fn(url, ml["size"], PASS_TIMEOUT)
            self.paired.append({"config": c.name, "rep": rep, "pattern": name, "value": r["value"],
                                "error": r["error"]})
            log("  %-12s W1  paired ceiling rep%d: curl %s %.1f MB/s" % (c.name, rep, name, r["value"]))

    # -- one contender, one rep -------------------------------------------
    def session(self, c, bucket, fn):
        """Fresh mount of `bucket`, drop caches, run fn(root), unmount; returns peak RSS MiB."""
        root, proc = c.mount(bucket)
        sampler = RssSampler(proc.pid) if proc else None
        try:
            drop_caches()
            fn(root)
        finally:
            rss = sampler.stop() if sampler else None
            c.umount(root, proc)
        return rss

    def guarded(self, c, workload, variant, rep, fn, bucket):
        """Run one mount session; a contender that errors or returns wrong bytes is marked, not timed."""
        pending = []

        def add(phase, res):
            pending.append((phase, res))

        try:
            rss = self.session(c, bucket, lambda root: fn(root, add))
        except Wrong as e:
            log("  !! %s returned WRONG BYTES in W%d %s: %s" % (c.name, workload, variant, e))
            self.add(c, workload, variant, "cold", rep, {"value": None, "ok": False, "wrong": True, "error": str(e)})
            return
        except Exception as e:  # noqa: BLE001 - any failure marks the contender
            log("  !! %s failed in W%d %s: %s" % (c.name, workload, variant, e))
            self.add(c, workload, variant, "cold", rep, {"value": None, "ok": False, "error": "%s: %s" % (type(e).__name__, e)})
            return
        for phase, res in pending:
            self.add(c, workload, variant, phase, rep, res, rss)

    def contender_rep(self, c, rep):
        ml, me, mt = self.mans.get("large"), self.mans.get("epoch"), self.mans.get("tree")
        dl = lambda: time.monotonic() + PASS_TIMEOUT  # noqa: E731
        if c.runs(1) and ml:
            for readers in (1, 4):
                def f(root, add, readers=readers):
                    r = w_seq(root, ml, readers, dl(), want_ttfb=(readers == 1))
                    add("cold", r)
                    add("warm", w_seq(root, ml, readers, dl()))
                    if c.cache and c.family == "feedfs" and readers == 1:
                        drop_caches()        # epoch 2 from feedfs's own disk cache
                        add("disk", w_seq(root, ml, readers, dl()))
                    if rep == 0 and readers == 1:
                        v = verify_large_sha(root, ml, dl())
                        self.verify.append({"config": c.name, "dataset": B_LARGE, **v})
                        if not v["ok"]:
                            raise Wrong(v["error"])
                if readers == 1 and c.family != "disk":
                    self.paired_ceiling(c, rep)
                self.guarded(c, 1, "%d reader%s" % (readers, "s" if readers > 1 else ""), rep, f, B_LARGE)
        if c.runs(2) and me:
            for th in (8, 16):
                def f(root, add, th=th):
                    r = w_epoch(root, me, th, dl())
                    add("cold", r)
                    add("warm", w_epoch(root, me, th, dl()))
                    if c.cache and c.family == "feedfs" and th == 8:
                        drop_caches()
                        add("disk", w_epoch(root, me, th, dl()))
                    if rep == 0 and th == 16 and not r.get("error"):
                        self.verify.append({"config": c.name, "dataset": B_EPOCH, "ok": True,
                                            "files_sha256": r["sha256_verified"]})
                self.guarded(c, 2, "%d threads" % th, rep, f, B_EPOCH)
        if c.runs(3) and mt:
            def f(root, add):
                add("cold", w_list(root, mt, dl()))
                add("warm", w_list(root, mt, dl()))
            self.guarded(c, 3, "walk+stat", rep, f, B_TREE)
        if c.runs(4) and ml:
            for bs, lab in ((4 * KiB, "4KiB"), (MiB, "1MiB")):
                for readers in (1, 8):
                    def f(root, add, bs=bs, readers=readers):
                        r, offs = w_rand(root, ml, bs, readers, RAND_SECONDS)
                        add("cold", r)
                        r2, _ = w_rand(root, ml, bs, readers, PASS_TIMEOUT, replay=offs)
                        add("warm", r2)
                    self.guarded(c, 4, "%s x%d" % (lab, readers), rep, f, B_LARGE)
        if c.runs(5) and me:
            def f(root, add):
                r, paths = w_ttfb(root, me)
                add("cold", r)
                r2, _ = w_ttfb(root, me, paths=paths)
                add("warm", r2)
            self.guarded(c, 5, "small object", rep, f, B_EPOCH)
        mb = self.mans.get("bypath")
        if c.runs(6) and mb:
            for th in (4, 16):
                def f(root, add, th=th):
                    # cold: a fresh mount, epoch 2*rep; warm: the next epoch (a new
                    # shuffle, and a new order for feedfs-order) on the same mount
                    for phase, epoch in (("cold", 2 * rep), ("warm", 2 * rep + 1)):
                        r = w_bypath(root, mb, th, dl(), epoch, c.order_fn)
                        if c.family == "feedfs":
                            k = feedfs_counters(root)
                            if k is not None:
                                r["counters"] = k
                        add(phase, r)
                        if rep == 0 and th == 16 and phase == "cold" and not r.get("error"):
                            self.verify.append({"config": c.name, "dataset": B_BYPATH, "ok": True,
                                                "files_sha256": r["sha256_verified"]})
                self.guarded(c, 6, "%d threads" % th, rep, f, B_BYPATH)
        mi = self.mans.get("imagefolder")
        if c.runs(7) and mi:
            def f(root, add):
                # cold: a fresh mount, epoch 2*rep; warm: the next epoch on it
                for phase, epoch in (("cold", 2 * rep), ("warm", 2 * rep + 1)):
                    r = w_loader(root, epoch, IMGF_WORKERS, c.order_fn is not None, dl())
                    if c.family == "feedfs":
                        k = feedfs_counters(root)
                        if k is not None:
                            r["counters"] = k
                    add(phase, r)
                    if rep == 0 and phase == "cold" and not r.get("error"):
                        self.verify.append({"config": c.name, "dataset": B_IMGF, "ok": True,
                                            "files_sha256": r["files"]})
            self.guarded(c, 7, "%d workers" % IMGF_WORKERS, rep, f, B_IMGF)


def versions():
    v = {}
    v["feedfs"] = (sh("git -C %s rev-parse --short HEAD" % ROOT) + (" (dirty tree)" if sh(
        "git -C %s status --porcelain -- src include | head -1" % ROOT) else ""))
    if os.access(FEEDFS, os.X_OK):
        v["feedfs_version"] = sh("%s --version 2>&1 | head -1" % FEEDFS)
    v["s3fs"] = sh("s3fs --version 2>&1 | head -1")
    v["rclone"] = sh("rclone version 2>&1 | head -1")
    v["s3rver"] = sh("%s --version" % S3RVER)
    v["node"] = sh("node --version")
    v["curl"] = sh("curl --version | head -1")
    v["python"] = platform.python_version()
    v["fuse3"] = sh("fusermount3 --version 2>&1")
    return v


def machine():
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) / 1024 / 1024
    cpu = sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2").strip()
    return {"nproc": os.cpu_count(), "mem_gib": round(mem, 1), "kernel": platform.release(), "cpu": cpu,
            "os": sh(". /etc/os-release && echo $PRETTY_NAME"), "hostname": socket.gethostname()}


def busy_snapshot():
    la = os.getloadavg()
    top = sh("ps -eo pcpu,comm --sort=-pcpu --no-headers | head -5")
    return {"loadavg": [round(x, 2) for x in la], "top": top.splitlines()}


def main():
    for d in (WORK, DATA, LOCAL, MNTROOT, CACHEROOT, LOGDIR, RESULTS):
        os.makedirs(d, exist_ok=True)
    if not S3RVER or not os.access(S3RVER, os.X_OK):
        raise SystemExit("s3rver not found (set S3RVER=...)")
    started = datetime.datetime.now(datetime.timezone.utc)
    meta = {"command": os.environ.get("BENCH_COMMAND", "make bench"), "date": started.isoformat(timespec="seconds"),
            "machine": machine(), "versions": versions(),
            "knobs": {"QUICK": QUICK, "SIZE_SCALE": SCALE, "REPS": REPS, "CONTENDERS": CONTENDERS,
                      "WORKLOADS": sorted(WORKLOADS), "LATENCY_MS": LAT_MS, "BW_MBPS": BW_MBPS,
                      "PASS_TIMEOUT": PASS_TIMEOUT, "RAND_SECONDS": RAND_SECONDS, "MAX_MINUTES": MAX_MINUTES},
            "datasets": {"large": {"bucket": B_LARGE, "bytes": LARGE_MIB * MiB},
                         "epoch": {"bucket": B_EPOCH, "files": EPOCH_N, "kib": EPOCH_KIB, "classes": EPOCH_CLASSES},
                         "tree": {"bucket": B_TREE, "keys": TREE_N, "prefixes": TREE_PREFIXES},
                         "bypath": {"bucket": B_BYPATH, "files": BYPATH_N, "kib": list(BYPATH_KIB),
                                    "dirs": BYPATH_DIRS},
                         "imagefolder": {"bucket": B_IMGF, "files": IMGF_N, "classes": IMGF_CLASSES,
                                         "workers": IMGF_WORKERS}},
            "busy_start": busy_snapshot(), "drop_caches": drop_caches()}
    log("machine %s; scale %g, reps %d, workloads %s, contenders %s, latency %g ms" % (
        meta["machine"], SCALE, REPS, sorted(WORKLOADS), CONTENDERS, LAT_MS))
    server = Server()
    server.start()
    s3 = s3client(server.direct)
    t_ds = time.monotonic()
    mans = {}
    if WORKLOADS & {1, 4}:
        mans["large"] = make_large(s3)
    if WORKLOADS & {2, 5}:
        mans["epoch"] = make_epoch(s3)
    if 3 in WORKLOADS:
        mans["tree"] = make_tree(s3)
    if 6 in WORKLOADS:
        mans["bypath"] = make_bypath(s3)
    if 7 in WORKLOADS:
        mans["imagefolder"] = make_imagefolder(s3)
    meta["dataset_prep_s"] = round(time.monotonic() - t_ds, 1)
    if os.environ.get("PREPARE_ONLY", "") not in ("", "0"):
        log("datasets ready in %.0f s (PREPARE_ONLY)" % meta["dataset_prep_s"])
        return
    run = Run(server, mans)
    contenders = make_contenders(server)
    meta["contenders"] = {c.name: {"family": c.family, "options": c.options, "cache": c.cache} for c in contenders}
    meta["max_memory_default_mib"] = 512
    if os.access(FEEDFS, os.X_OK):
        import re
        mm = re.search(r"--max-memory.*?\(default (\d+)\s*([MG])i?B?\)", sh("%s --help 2>&1" % FEEDFS), re.S)
        if mm:
            meta["max_memory_default_mib"] = int(mm.group(1)) * (1024 if mm.group(2) == "G" else 1)
    log("contenders: %s" % ", ".join(c.name for c in contenders))
    skipped = []
    meta["skipped"] = skipped
    tag = started.strftime("%Y%m%dT%H%M%SZ") + ("-lat%g" % LAT_MS if LAT_MS > 0 else "") + ("-quick" if QUICK else "")
    path = os.path.join(RESULTS, "%s.json" % tag)

    def save(partial):
        meta["busy_end"] = busy_snapshot()
        meta["duration_s"] = round(time.monotonic() - T_START, 1)
        meta["partial"] = partial
        out = {"meta": meta, "results": run.results, "verification": run.verify, "paired": run.paired}
        with open(path + ".tmp", "w") as f:
            json.dump(out, f, indent=1)
        os.replace(path + ".tmp", path)

    for rep in range(REPS):
        if run.over_budget():
            skipped.append("rep %d and later (MAX_MINUTES)" % rep)
            break
        log("== rep %d/%d: ceilings" % (rep + 1, REPS))
        drop_caches()
        run.ceilings(rep)
        order = contenders[:] if rep % 2 == 0 else contenders[::-1]   # alternate order against drift
        for c in order:
            if run.over_budget():
                skipped.append("%s rep %d (MAX_MINUTES)" % (c.name, rep))
                continue
            log("== rep %d/%d: %s" % (rep + 1, REPS, c.name))
            run.contender_rep(c, rep)
            save(partial=True)       # a run cut short still leaves what it measured
    meta["skipped"] = skipped
    save(partial=False)
    with open(os.path.join(WORK, "last-result"), "w") as f:
        f.write(path + "\n")
    log("wrote %s (%.1f min)" % (path, meta["duration_s"] / 60))


if __name__ == "__main__":
    main()
