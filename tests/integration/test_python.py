"""python/feedfs against a real mount: it finds the daemon's control socket
(a mount point with a space and a tab, escaped in mountinfo), reads the same
counters as `feedfs stats --json`, and, on a daemon with the order verb
(issue 19), sends and clears an order that the daemon counts.
"""
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from conftest import content_for, feedfs_stats, sha256

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import feedfs  # noqa: E402

OBJECTS = {"train/%03d.jpg" % i: 3000 + 977 * i for i in range(12)}


@pytest.fixture(scope="module")
def pbucket(s3):
    b = "python-t"
    s3.create_bucket(Bucket=b)
    for k, n in OBJECTS.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b


def odd_mount(mount, pbucket, tmp_path):
    mnt = str(tmp_path / "py mnt\tx")
    os.mkdir(mnt)
    return mount(pbucket, mnt=mnt)


def test_socket_and_stats_of_a_real_mount(mount, pbucket, tmp_path):
    m = odd_mount(mount, pbucket, tmp_path)
    assert feedfs.mount_point(m.p("train/003.jpg")) == m.path
    sock = feedfs.control_socket(m.path)
    assert sock == feedfs.control_socket(m.p("train"))
    assert stat.S_ISSOCK(os.stat(sock).st_mode)
    st = feedfs.stats(m.path)
    assert st["pid"] in m.pids
    ref = feedfs_stats(m)
    assert sorted(k for k, v in st.items() if isinstance(v, dict)) == \
        sorted(k for k, v in ref.items() if isinstance(v, dict))
    with pytest.raises(OSError) as ei:
        feedfs.control_socket(str(tmp_path))
    assert "not a feedfs mount" in str(ei.value)


def has_order_verb(binary):
    cp = subprocess.run([binary, "prefetch", "--help"], capture_output=True, text=True, timeout=30)
    return "--order" in cp.stdout + cp.stderr


def order_stats(m, want, tries=100):
    """The mount's order counters once those named in want have those values
    (names resolve in the background); the last seen otherwise."""
    o = {}
    for _ in range(tries):
        o = feedfs.stats(m.path).get("order", {})
        if all(o.get(k) == v for k, v in want.items()):
            break
        time.sleep(0.1)
    return o


def test_order_through_the_daemon(mount, pbucket, tmp_path, feedfs_bin):
    if not has_order_verb(feedfs_bin):
        pytest.skip("this feedfs has no order verb yet (no --order in 'feedfs prefetch --help')")
    m = odd_mount(mount, pbucket, tmp_path)
    names = ["train/%03d.jpg" % i for i in (7, 2, 11, 0)]
    order = names[:2] + [m.p(names[2])] + [names[3], "train/nope.jpg"]
    assert feedfs.send_order(m.path, order) == 5
    o = order_stats(m, {"orders": 1, "paths": 5, "missing": 1})
    assert (o.get("orders"), o.get("paths"), o.get("missing")) == (1, 5, 1), o
    for k in names:
        with open(m.p(k), "rb") as f:
            assert sha256(f.read()) == sha256(content_for(k, OBJECTS[k])), k
    with pytest.raises(ValueError):
        feedfs.send_order(m.path, ["train/../../etc/passwd"])
    # the daemon's own refusal of the same path, sent by hand
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(feedfs.control_socket(m.path))
        body = b"train/../x\n"
        s.sendall(b"O 1 %d\n" % len(body) + body)
        assert s.recv(64) == b"ERR 22\n"
    assert feedfs.clear_order(m.path) == 0
    o = order_stats(m, {"paths": 0})
    assert o.get("paths") == 0, o


def test_imagefolder_dataloader_with_the_ordered_sampler(mount, s3):
    """A real torch DataLoader (2 worker processes) over torchvision's
    ImageFolder on the mount, shuffled by RandomSampler through
    feedfs.torch.OrderedSampler: every sample's bytes and class are the ones
    uploaded, each file is read once per epoch, and the daemon saw the order
    (opens of files it fetched for it)."""
    torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
    datasets = pytest.importorskip("torchvision.datasets",
                                   reason="torchvision is not installed (Debian: python3-torchvision)")
    import feedfs.torch as ftorch
    b = "imagefolder-t"
    s3.create_bucket(Bucket=b)
    objs = {"train/c%d/%03d.jpg" % (i % 3, i): 2000 + 331 * i for i in range(60)}
    for k, n in objs.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    m = mount(b)
    ds = datasets.ImageFolder(m.p("train"), loader=lambda p: open(p, "rb").read())
    assert len(ds) == len(objs) and ds.classes == ["c0", "c1", "c2"]
    sampler = ftorch.OrderedSampler(torch.utils.data.RandomSampler(ds),
                                    [p for p, _ in ds.samples], m.path, strict=True)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, sampler=sampler,
                                         collate_fn=lambda x: x)
    for epoch in range(2):
        seen = {}
        for data, label in loader:
            seen[sha256(data)] = label
        want = {sha256(content_for(k, n)): int(k.split("/")[1][1]) for k, n in objs.items()}
        assert seen == want, "epoch %d: wrong bytes or classes" % epoch
    st = feedfs_stats(m)["order"]
    # one order per epoch: the iterator the DataLoader drops unused sends none
    assert st["orders"] == 2 and st["consumed"] >= len(objs)
    assert st["missing"] == 0
