"""python/feedfs against a real mount: it finds the daemon's control socket
(a mount point with a space and a tab, escaped in mountinfo), reads the same
counters as `feedfs stats --json`, and, on a daemon with the order verb
(issue 19), sends and clears an order that the daemon counts. And the
package as users get it (issue 38): FolderDataset through a DataLoader, and
the wheel pip-installed in a venv running docs/PYTHON.md's examples.
"""
import hashlib
import importlib.util as importlib_util
import os
import random
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


@pytest.fixture(scope="module")
def folder_bucket(s3):
    """train/c<k>/<n>.bin: 3 classes, 20 files each, distinct bytes and sizes."""
    b = "folder-t"
    s3.create_bucket(Bucket=b)
    objs = {"train/c%d/%03d.bin" % (i % 3, i): 1500 + 277 * i for i in range(60)}
    for k, n in objs.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b, objs


def test_folder_dataset_dataloader_on_a_mount(mount, folder_bucket):
    """feedfs.torch.FolderDataset and an OrderedSampler given nothing but
    RandomSampler(ds): a real DataLoader (2 workers) reads every file's own
    bytes with its class, and the daemon gets one order per epoch for the
    mount that it found from the dataset's paths."""
    torch = pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")
    import feedfs.torch as ftorch
    b, objs = folder_bucket
    m = mount(b)
    ds = ftorch.FolderDataset(m.p("train"))
    assert ds.classes == ["c0", "c1", "c2"] and len(ds) == len(objs)
    sampler = ftorch.OrderedSampler(torch.utils.data.RandomSampler(ds), strict=True)
    assert sampler.mountpoint == m.path
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2, sampler=sampler,
                                         collate_fn=lambda x: x)
    want = {sha256(content_for(k, n)): int(k.split("/")[1][1]) for k, n in objs.items()}
    for epoch in range(2):
        seen = {}
        for data, label in loader:
            seen[sha256(data)] = label
        assert seen == want, "epoch %d: wrong bytes or classes" % epoch
        assert sampler.sent == len(objs)
    st = feedfs_stats(m)["order"]
    assert st["orders"] == 2 and st["missing"] == 0 and st["consumed"] >= len(objs)


def doc_example(name):
    with open(os.path.join(ROOT, "docs", "PYTHON.md")) as f:
        for block in f.read().split("```python\n")[1:]:
            code = block.split("```", 1)[0]
            if code.startswith("# feedfs example: %s\n" % name):
                return code
    raise AssertionError("no example %r in docs/PYTHON.md" % name)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory, feedfs_bin):
    """A fresh venv (seeing Debian's torch) with the wheel of `make
    python-wheel` pip-installed offline: its python."""
    build = os.path.dirname(feedfs_bin)
    cp = subprocess.run(["make", "-s", "-C", ROOT, "python-wheel", "BUILD=%s" % build],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    dist = os.path.join(build, "python", "dist")
    wheels = [os.path.join(dist, w) for w in os.listdir(dist) if w.endswith(".whl")]
    assert len(wheels) == 1, wheels
    venv = str(tmp_path_factory.mktemp("venv"))
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True,
                   timeout=300)
    py = os.path.join(venv, "bin", "python")
    cp = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", wheels[0]],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return py


def venv_run(py, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FEEDFS_LIB")}
    return subprocess.run([py, *args], capture_output=True, text=True, env=env, cwd="/",
                          timeout=300)


def test_wheel_in_a_venv_runs_the_doc_examples(mount, folder_bucket, wheel_venv, feedfs_bin,
                                               tmp_path):
    """What a user does: the wheel in a venv, its version the daemon's, then
    docs/PYTHON.md's PyTorch and plain examples against a real mount, and
    wrong calls raising the documented errors."""
    b, objs = folder_bucket
    m = mount(b)
    version = subprocess.run([feedfs_bin, "--version"], capture_output=True, text=True,
                             timeout=30).stdout.split()[1]
    cp = venv_run(wheel_venv, "-c", "import feedfs; print(feedfs.__version__, feedfs.__file__)")
    assert cp.returncode == 0, cp.stderr
    got_version, where = cp.stdout.split()
    assert got_version == version and where.startswith(os.path.dirname(os.path.dirname(wheel_venv)))

    if importlib_util.find_spec("torch") is not None:
        ex = tmp_path / "example_pytorch.py"
        ex.write_text(doc_example("pytorch"))
        cp = venv_run(wheel_venv, str(ex), m.p("train"))
        assert cp.returncode == 0, cp.stderr
        total = sum(objs.values())
        assert cp.stdout.splitlines() == [
            "epoch %d: 60 samples, %d bytes, per class [20, 20, 20], order of 60 sent" % (e, total)
            for e in range(2)]

    ex = tmp_path / "example_plain.py"
    ex.write_text(doc_example("plain"))
    cp = venv_run(wheel_venv, str(ex), m.p("train"))
    assert cp.returncode == 0, cp.stderr
    paths = sorted(os.path.join(top, f) for top, _d, files in os.walk(m.p("train")) for f in files)
    random.Random(0).shuffle(paths)
    h = hashlib.sha256()
    for p in paths:
        k = os.path.relpath(p, m.path)
        h.update(content_for(k, objs[k]))
    assert cp.stdout.startswith("60 paths accepted, 60 read, sha256 %s, order counters {"
                                % h.hexdigest()), cp.stdout

    bad = ("import errno, feedfs\n"
           "try:\n    feedfs.send_order(%r, ['a'])\nexcept OSError as e:\n"
           "    print('outside', errno.errorcode[e.errno])\n"
           "try:\n    feedfs.send_order(%r, ['train/c0/000.bin'], stream='no spaces')\n"
           "except ValueError as e:\n    print('stream', 'stream name' in str(e))\n"
           % (str(tmp_path), m.path))
    cp = venv_run(wheel_venv, "-c", bad)
    assert (cp.returncode, cp.stdout) == (0, "outside ENOENT\nstream True\n"), cp.stderr
