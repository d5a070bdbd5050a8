"""`feedfs stats` and /metrics: the counters agree with an independent count,
and bad input fails at mount time with one line.

The counting proxy sits between feedfs and s3rver and counts object GETs and
the body bytes it relays; the daemon's own counters (read through its control
socket) must agree with it. Bytes read are compared with what was uploaded.
"""

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import (content_for, feedfs_stats, free_port, is_mounted, logged_stats,
                      pids_of_mount, run_feedfs, settled_stats, sha256, unmount)

MIB = 1 << 20
# Small files fetched whole, and two objects big enough for ranged GETs in parallel.
OBJECTS = {"train/%03d.jpg" % i: 4096 + 1531 * i for i in range(60)}
OBJECTS.update({"shards/a.tar": 37 * MIB + 12345, "shards/b.tar": 9 * MIB + 1})
SECRET_NAME = "train/007.jpg"     # must never appear in /metrics


@pytest.fixture(scope="module")
def sbucket(s3):
    b = "stats-t"
    s3.create_bucket(Bucket=b)
    for k, n in OBJECTS.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


def read_everything(m):
    for k, n in sorted(OBJECTS.items()):
        with open(m.p(k), "rb") as f:
            data = f.read()
        assert len(data) == n and sha256(data) == sha256(content_for(k, n)), k


def test_counters_agree_with_the_proxy(mount, sbucket, proxy):
    # No hedges: a hedge cut when its twin wins may never be read by the proxy
    # (the close resets the connection with the request still unread), and
    # this test compares request counts with what the proxy saw.
    m = mount(sbucket, "", "--hedge-budget", "0", endpoint=proxy.url)
    read_everything(m)
    st = settled_stats(m, proxy)
    gets, nbytes = proxy.gets(), proxy.get_bytes
    assert gets > len(OBJECTS)      # the shards took several ranged GETs
    assert abs(st["s3"]["get_requests"] - gets) <= 0.02 * gets, (st["s3"], gets)
    assert abs(st["s3"]["object_bytes"] - nbytes) <= 0.02 * nbytes, (st["s3"], nbytes)
    assert st["s3"]["object_bytes"] >= sum(OBJECTS.values())
    assert st["s3"]["gets"] <= st["s3"]["get_requests"]
    assert st["s3"]["errors"] == 0
    # what the readers got
    assert st["fs"]["read_bytes"] == sum(OBJECTS.values())
    assert st["fs"]["opens"] == len(OBJECTS)
    # every FUSE read was timed, and so was its wait
    h = st["histograms"]
    assert h["fuse_read"]["count"] == st["fs"]["reads"] > 0
    assert h["read_wait"]["count"] == st["fs"]["reads"]
    assert h["s3_get_ok"]["count"] == st["s3"]["gets"]
    assert sum(c for _, c in h["s3_get_ok"]["buckets"]) == h["s3_get_ok"]["count"]
    # who serves the mount, and what
    assert st["pid"] in m.pids
    assert st["source"] == "s3://%s/" % sbucket
    assert st["mountpoint"] == os.path.realpath(m.path)
    assert "cache" not in st            # no --cache-dir: no cache group, not zeros
    # the unmount log says the same, from the same tables
    assert not unmount(m.path, m.pids)
    logged = logged_stats(m.log)
    assert logged["s3"]["get_requests"] == proxy.gets()
    assert logged["fs"]["read_bytes"] == st["fs"]["read_bytes"]


def test_text_table_and_watch(mount, sbucket):
    m = mount(sbucket)
    with open(m.p("shards/b.tar"), "rb") as f:
        assert sha256(f.read()) == sha256(content_for("shards/b.tar", OBJECTS["shards/b.tar"]))
    out = subprocess.run([m.binary, "stats", m.path], capture_output=True, text=True,
                         check=True).stdout
    st = feedfs_stats(m)
    assert "feedfs s3://%s/ on %s" % (sbucket, os.path.realpath(m.path)) in out
    assert "S3 requests (sent)  get %d " % st["s3"]["get_requests"] in out
    assert "read wait (FUSE)" in out and "cache               none" in out
    # --watch prints again every second until interrupted
    p = subprocess.Popen([m.binary, "stats", "--watch", m.path], stdout=subprocess.PIPE,
                         text=True)
    time.sleep(2.5)
    p.terminate()
    out, _ = p.communicate(timeout=10)
    assert out.count("feedfs s3://%s/" % sbucket) >= 2


def test_warm_without_a_cache_says_so_once(mount, sbucket):
    """The control socket is always there, so feedfs warm reaches the daemon
    of a mount without --cache-dir: it answers one line and exit 1, not an
    error per file."""
    m = mount(sbucket)
    cp = subprocess.run([m.binary, "warm", m.p("train")], capture_output=True, text=True,
                        timeout=60)
    assert cp.returncode == 1
    assert cp.stderr.strip() == ("feedfs warm: %s has no block cache (mounted without "
                                 "--cache-dir): nothing to warm" % os.path.realpath(m.path))
    assert feedfs_stats(m)["s3"]["get_requests"] == 0      # nothing was fetched


def test_stats_refuses_what_is_not_a_mount(feedfs_bin, tmp_path):
    cp = subprocess.run([feedfs_bin, "stats", str(tmp_path)], capture_output=True, text=True)
    assert cp.returncode == 1
    assert cp.stderr.strip() == "feedfs stats: %s is not a feedfs mount" % tmp_path
    cp = subprocess.run([feedfs_bin, "stats", str(tmp_path / "nope")], capture_output=True,
                        text=True)
    assert cp.returncode == 1 and len(cp.stderr.strip().splitlines()) == 1
    cp = subprocess.run([feedfs_bin, "stats"], capture_output=True, text=True)
    assert cp.returncode == 2


def scrape(port, path="/metrics"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def test_metrics_endpoint(mount, sbucket, tmp_path):
    port = free_port()
    m = mount(sbucket, "", "--metrics-addr", "127.0.0.1:%d" % port)
    read_everything(m)
    st = feedfs_stats(m)
    status, ctype, text = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("feedfs_s3_requests", "feedfs_s3_bytes", "feedfs_read_wait_seconds",
                 "feedfs_fuse_reads"):
        assert name in fams, name
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in fams.values() for s in f.samples}
    def lab(**extra):
        return tuple(sorted(dict(bucket=sbucket, prefix="", **extra).items()))

    mount_labels = lab()
    get = samples[("feedfs_s3_requests_total", lab(kind="get"))]
    assert get >= st["s3"]["get_requests"] > 0     # the scrape came after the stats
    assert samples[("feedfs_fuse_read_bytes_total", mount_labels)] == sum(OBJECTS.values())
    assert fams["feedfs_read_wait_seconds"].type == "histogram"
    wait_count = samples[("feedfs_read_wait_seconds_count", mount_labels)]
    assert wait_count == samples[("feedfs_fuse_reads_total", mount_labels)]
    inf = samples[("feedfs_read_wait_seconds_bucket", lab(le="+Inf"))]
    assert inf == wait_count
    # labels name the mount, never an object
    assert SECRET_NAME not in text and "007.jpg" not in text
    # only /metrics is served
    with pytest.raises(urllib.error.HTTPError) as e:
        scrape(port, "/")
    assert e.value.code == 404
    assert not unmount(m.path, m.pids)
    # the listener went away with the mount
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_no_listener_without_the_option(mount, sbucket):
    m = mount(sbucket)
    out = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True).stdout
    for pid in m.pids:
        assert "pid=%d," % pid not in out, out


@pytest.mark.parametrize("addr", ["9100", "127.0.0.1", "127.0.0.1:", "127.0.0.1:0",
                                  "127.0.0.1:65536", "127.0.0.1:x", ":9100", "[::1:9100"])
def test_malformed_metrics_addr(feedfs_bin, s3server, sbucket, tmp_path, addr):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cp, _ = run_feedfs(feedfs_bin, "s3://" + sbucket, str(mnt), ["--metrics-addr", addr],
                       s3server.url)
    assert cp.returncode == 2, cp
    err = cp.stderr.decode().strip()
    assert len(err.splitlines()) == 1 and "--metrics-addr" in err, err
    assert not is_mounted(str(mnt))


def test_metrics_port_in_use(feedfs_bin, s3server, sbucket, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        cp, _ = run_feedfs(feedfs_bin, "s3://" + sbucket, str(mnt),
                           ["--metrics-addr", "127.0.0.1:%d" % port], s3server.url)
    finally:
        busy.close()
    assert cp.returncode == 1
    err = cp.stderr.decode().strip()
    assert err == "feedfs: --metrics-addr 127.0.0.1:%d: Address already in use" % port, err
    assert not is_mounted(str(mnt))
    assert not pids_of_mount(feedfs_bin, str(mnt))
