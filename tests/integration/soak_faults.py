"""The soak run behind `make soak` (tests/soak.sh): not collected by the normal
suite (the name does not start with test_). 32 readers, SOAK_MINUTES, faults on
(kinds rotate every 20 s), bounded: each read has a deadline, the run a hard end."""

import errno
import os
import random
import threading
import time

from conftest import content_for, sha256
from fault_proxy import FaultProxy
from test_faults import MAX_MEMORY_MIB, ARGS, rss_kib


def rss_parts_kib(pid):
    """(RssAnon, RssShmem) of pid in KiB: the heap and the keeper's region."""
    got = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("RssAnon:", "RssShmem:")):
                    got[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return got.get("RssAnon", 0), got.get("RssShmem", 0)

MIB = 1 << 20
KINDS = ["500", "503", "reset", "short", "trickle", "range", "429", "stall"]


def test_soak(mount, s3, s3server):
    minutes = float(os.environ.get("SOAK_MINUTES", "10"))
    bucket = "soak-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=bucket)
    sizes = {"f%03d.bin" % i: (i * 7919) % (3 * MIB) + 1 for i in range(120)}
    sizes.update({"big%d.bin" % i: 24 * MIB + i for i in range(4)})
    data = {k: content_for(k, n) for k, n in sizes.items()}
    for k, v in data.items():
        s3.put_object(Bucket=bucket, Key=k, Body=v)
    px = FaultProxy(s3server.url, seed=7).start()
    px.stall_s = 3.5
    m = mount(bucket, "", *ARGS, endpoint=px.url)
    pid = m.server
    end = time.monotonic() + minutes * 60
    stats = {"reads": 0, "bytes": 0, "wrong": 0, "errors": {}}
    lock = threading.Lock()
    rss = []
    parts = []

    def reader(i):
        rng = random.Random(i)
        keys = list(data)
        while time.monotonic() < end:
            k = rng.choice(keys)
            n = len(data[k])
            off = rng.randrange(0, n)
            ln = min(n - off, rng.choice([4096, 256 << 10, 4 * MIB]))
            try:
                with open(os.path.join(m.path, k), "rb", buffering=0) as f:
                    f.seek(off)
                    got = f.read(ln)
                with lock:
                    stats["reads"] += 1
                    if sha256(got) != sha256(data[k][off:off + len(got)]) or len(got) != ln:
                        stats["wrong"] += 1
                    else:
                        stats["bytes"] += ln
            except OSError as e:
                with lock:
                    name = errno.errorcode.get(e.errno, str(e.errno))
                    stats["errors"][name] = stats["errors"].get(name, 0) + 1

    threads = [threading.Thread(target=reader, args=(i,), daemon=True) for i in range(32)]
    for t in threads:
        t.start()
    ki = 0
    while time.monotonic() < end:
        px.set_fault(KINDS[ki % len(KINDS)], rate=0.2, repeat=1)
        ki += 1
        for _ in range(20):
            rss.append(rss_kib(pid))
            parts.append(rss_parts_kib(pid))
            time.sleep(1)
            if time.monotonic() >= end:
                break
    px.clear()
    for t in threads:
        t.join(120)
    hung = sum(t.is_alive() for t in threads)
    px.stop()
    per_min = max(1, len(rss) // max(1, int(minutes)))
    first, last = rss[:per_min], rss[-per_min:]
    print("\nsoak: %.1f min, reads %d, bytes verified %d, wrong %d, errors %s, hung %d" % (
        minutes, stats["reads"], stats["bytes"], stats["wrong"], stats["errors"], hung))
    print("soak: RSS MiB first minute avg %.1f, last minute avg %.1f, peak %.1f (--max-memory %d)" % (
        sum(first) / len(first) / 1024, sum(last) / len(last) / 1024, max(rss) / 1024, MAX_MEMORY_MIB))
    for name, i in (("anon", 0), ("shmem", 1)):
        f, l = [p[i] for p in parts[:per_min]], [p[i] for p in parts[-per_min:]]
        print("soak: Rss%s MiB first minute avg %.1f, last minute avg %.1f" % (
            name, sum(f) / len(f) / 1024, sum(l) / len(l) / 1024))
    assert stats["wrong"] == 0 and hung == 0
    assert max(rss) <= (MAX_MEMORY_MIB + 80) * 1024
    assert sum(last) / len(last) <= 1.25 * sum(first) / len(first) + 8 * 1024, "RSS grew"
