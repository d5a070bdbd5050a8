"""Deployment (issue 18): the mount.feedfs helper, `make install`, the systemd
unit (systemd-analyze verify), and the STATUS lines a Type=notify unit reads."""

import os
import shutil
import socket
import stat
import subprocess
import time

import pytest

from conftest import REGION, content_for, is_mounted, sha256
from mounter import ROOT, Mount, pids_of_mount, s3rver_env

# What `make install DESTDIR=D PREFIX=/usr` lays out: path -> mode.
INSTALLED = {
    "usr/bin/feedfs": 0o755,
    "usr/bin/feedfs-csi": 0o755,            # the CSI node plugin (issue 37)
    "sbin/mount.feedfs": 0o755,
    "usr/share/man/man1/feedfs.1": 0o644,
    "usr/share/man/man8/mount.feedfs.8": 0o644,
    "usr/share/man/man8/feedfs-csi.8": 0o644,
    "usr/lib/systemd/system/feedfs@.service": 0o644,
    "usr/share/doc/feedfs/feedfs.env.example": 0o644,
    "usr/share/doc/feedfs/DEPLOY.md": 0o644,
    # libfeedfs, the device-feed path's and the loader order's client library
    "usr/include/feedfs/libfeedfs.h": 0o644,
    "usr/include/feedfs/feedfs_ioctl.h": 0o644,
    "usr/lib/libfeedfs.a": 0o644,
    "usr/lib/libfeedfs.so.1": 0o755,
    "usr/lib/libfeedfs.so": 0o755,          # the link to it (os.stat follows it)
}
# Every setting that gives a unit its own mount namespace, which cuts mount
# propagation to the host: a FUSE mount made inside would be invisible.
NAMESPACE_SETTINGS = (
    "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateMounts",
    "ReadOnlyPaths", "ReadWritePaths", "InaccessiblePaths", "ExecPaths", "NoExecPaths",
    "TemporaryFileSystem", "BindPaths", "BindReadOnlyPaths", "ProtectKernelTunables",
    "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc",
    "ProcSubset", "RootDirectory", "RootImage", "MountFlags", "DynamicUser", "PrivateUsers",
    "MountAPIVFS", "ProtectHostname",
)


@pytest.fixture
def helper(feedfs_bin):
    h = os.path.join(os.path.dirname(feedfs_bin), "mount.feedfs")
    if not os.access(h, os.X_OK):
        pytest.skip("%s not built (make all builds it next to feedfs)" % h)
    return h


@pytest.fixture
def data_bucket(s3, new_bucket):
    b = new_bucket("deploy")
    files = {"a.bin": 3 << 20, "dir/b.bin": 12345, "dir/c.txt": 1}
    for k, n in files.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b, {k: sha256(content_for(k, n)) for k, n in files.items()}


def one_line(cp):
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, "want one line on stderr, got %r" % cp.stderr
    return lines[0]


def test_helper_fstab_mount(helper, mounter, s3server, data_bucket, tmp_path):
    """An fstab line's call: mount(8)'s own options dropped, the rest mapped;
    the mount then reads back what was uploaded."""
    bucket, want = data_bucket
    mnt = tmp_path / "fstab-mnt"
    mnt.mkdir()
    log = str(tmp_path / "helper-feedfs.log")
    opts = ("rw,_netdev,nofail,noauto,x-systemd.automount,endpoint_url=%s,force_path_style,"
            "region=%s,log_file=%s,metadata_ttl=30" % (s3server.url, REGION, log))
    cp = subprocess.run([helper, "s3://%s" % bucket, str(mnt), "-o", opts], capture_output=True,
                        text=True, timeout=60, env=s3rver_env(), stdin=subprocess.DEVNULL)
    pids = pids_of_mount(mounter.binary, str(mnt))
    if is_mounted(str(mnt)):
        with mounter.lock:
            mounter.mounted.append(Mount(str(mnt), log, pids, mounter.binary))
    assert cp.returncode == 0, cp.stderr
    assert is_mounted(str(mnt))
    assert len(pids) == 2, "want a keeper and its server for %s, found %r" % (mnt, pids)
    for k, digest in want.items():
        with open(mnt / k, "rb") as f:
            assert sha256(f.read()) == digest, k
    assert sorted(os.listdir(mnt / "dir")) == ["b.bin", "c.txt"]


@pytest.mark.parametrize("opts,line", [
    ("_netdev,colour=red", "mount.feedfs: unknown option 'colour' (feedfs has no --colour)"),
    ("cache_dir", "mount.feedfs: option 'cache_dir' needs a value (cache_dir=...)"),
    ("allow_other=1", "mount.feedfs: option 'allow_other' takes no value"),
    ("foreground", "mount.feedfs: option 'foreground' cannot be used with mount(8)"),
])
def test_helper_bad_option(helper, s3server, data_bucket, tmp_path, opts, line):
    """A bad option: one line naming it, exit 1, nothing mounted, no feedfs run."""
    mnt = tmp_path / "m"
    mnt.mkdir()
    cp = subprocess.run([helper, "s3://%s" % data_bucket[0], str(mnt), "-o", opts],
                        capture_output=True, text=True, timeout=30, env=s3rver_env())
    assert cp.returncode == 1
    assert one_line(cp) == line
    assert not is_mounted(str(mnt))


def test_helper_fake_prints_command(helper, feedfs_bin):
    cp = subprocess.run([helper, "-f", "s3://b/p", "/mnt/x", "-o",
                         "ro,cache_dir=\"/var/c,1\",allow_other,max_memory=1G"],
                        capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert one_line(cp) == ("mount.feedfs: %s s3://b/p /mnt/x --cache-dir /var/c,1 "
                            "--allow-other --max-memory 1G" % feedfs_bin)


@pytest.fixture(scope="module")
def installed(tmp_path_factory, feedfs_bin):
    """`make install DESTDIR=D PREFIX=/usr` of the build feedfs_bin belongs to."""
    d = tmp_path_factory.mktemp("destdir")
    cp = subprocess.run(["make", "-s", "-C", ROOT, "install", "DESTDIR=%s" % d, "PREFIX=/usr",
                         "BUILD=%s" % os.path.dirname(feedfs_bin)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return str(d)


def test_make_install_layout(installed, feedfs_bin):
    found = {}
    for top, _dirs, files in os.walk(installed):
        for f in files:
            p = os.path.join(top, f)
            found[os.path.relpath(p, installed)] = stat.S_IMODE(os.stat(p).st_mode)
    want = dict(INSTALLED)
    for f in sorted(os.listdir(os.path.join(ROOT, "python", "feedfs"))):
        if f.endswith(".py") or f == "py.typed":
            want["usr/lib/python3/dist-packages/feedfs/" + f] = 0o644
    assert found == want
    with open(os.path.join(installed, "usr/bin/feedfs"), "rb") as a, open(feedfs_bin, "rb") as b:
        assert a.read() == b.read()
    with open(os.path.join(installed, "usr/lib/systemd/system/feedfs@.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/feedfs ${FEEDFS_SOURCE} ${FEEDFS_MOUNTPOINT} -f" in unit
    # The installed helper finds the installed feedfs (../bin is not beside
    # /sbin here, so PATH): -f prints what it would run.
    env = dict(os.environ, PATH=os.path.join(installed, "usr/bin"))
    cp = subprocess.run([os.path.join(installed, "sbin/mount.feedfs"), "-f", "b", "/m"],
                        capture_output=True, text=True, env=env, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert one_line(cp) == "mount.feedfs: %s b /m" % os.path.join(installed, "usr/bin/feedfs")


def test_installed_python_package_finds_its_library(installed):
    """The package of a PREFIX=/usr install imports with Debian's python3 and
    loads <prefix>/lib/libfeedfs.so.1 of the same install (no ldconfig, no
    FEEDFS_LIB); its version is the installed daemon's."""
    env = {k: v for k, v in os.environ.items() if k not in ("FEEDFS_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = os.path.join(installed, "usr/lib/python3/dist-packages")
    code = ("import os, feedfs, feedfs.device as d; d.library(); "
            "print(feedfs.__file__, os.path.realpath(d.library_path()), feedfs.__version__)")
    cp = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                        env=env, cwd="/", timeout=60)
    assert cp.returncode == 0, cp.stderr
    version = subprocess.run([os.path.join(installed, "usr/bin/feedfs"), "--version"],
                             capture_output=True, text=True, timeout=30).stdout.split()[1]
    assert cp.stdout.split() == [
        os.path.join(installed, "usr/lib/python3/dist-packages/feedfs/__init__.py"),
        os.path.join(installed, "usr/lib/libfeedfs.so.1"), version]


def test_default_prefix_python_dir_is_on_python3s_path(tmp_path, feedfs_bin):
    """make install's default (PREFIX=/usr/local) puts the package in a
    directory that Debian's /usr/bin/python3 searches."""
    d = str(tmp_path / "destdir")
    cp = subprocess.run(["make", "-s", "-C", ROOT, "install", "DESTDIR=%s" % d,
                         "BUILD=%s" % os.path.dirname(feedfs_bin)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    found = [os.path.dirname(os.path.dirname(os.path.relpath(os.path.join(top, "__init__.py"), d)))
             for top, _dirs, files in os.walk(d)
             if "__init__.py" in files and os.path.basename(top) == "feedfs"]
    path = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(chr(10).join(sys.path))"],
                          capture_output=True, text=True, timeout=30, cwd="/").stdout.split("\n")
    assert len(found) == 1 and "/" + found[0] in path, (found, path)
    assert found[0].startswith("usr/local/lib/python3.")


def test_systemd_unit_verifies(installed, tmp_path):
    """systemd-analyze verify of the installed unit, man pages included."""
    sa = shutil.which("systemd-analyze")
    if not sa:
        pytest.skip("systemd-analyze is not installed (Debian package systemd): unit not verified")
    with open(os.path.join(installed, "usr/lib/systemd/system/feedfs@.service")) as f:
        unit = f.read()
    # verify checks that ExecStart's binary exists: point it at the installed one.
    unit = unit.replace("ExecStart=/usr/bin/feedfs",
                        "ExecStart=%s" % os.path.join(installed, "usr/bin/feedfs"))
    (tmp_path / "feedfs@.service").write_text(unit)
    env = dict(os.environ, MANPATH=os.path.join(installed, "usr/share/man"), SYSTEMD_LOG_LEVEL="notice")
    cp = subprocess.run([sa, "verify", "./feedfs@test.service"], cwd=tmp_path, capture_output=True,
                        text=True, env=env, timeout=60)
    assert cp.returncode == 0 and cp.stderr.strip() == "", cp.stderr


def test_systemd_unit_keeps_mount_visible():
    """No setting that gives the service its own mount namespace, and the
    notify settings the keeper's serving child needs."""
    with open(os.path.join(ROOT, "systemd", "feedfs@.service")) as f:
        keys = {}
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "[")) and "=" in line:
                k, v = line.split("=", 1)
                keys.setdefault(k, []).append(v)
    assert sorted(set(keys) & set(NAMESPACE_SETTINGS)) == []
    assert keys["Type"] == ["notify"] and keys["NotifyAccess"] == ["all"]
    assert keys["KillMode"] == ["mixed"]
    assert keys["DeviceAllow"] == ["/dev/fuse rw"]
    assert keys["CapabilityBoundingSet"] == ["CAP_SYS_ADMIN"]
    assert keys["EnvironmentFile"] == ["/etc/feedfs/%i.env"]


def test_notify_status_lines(mount, data_bucket, tmp_path):
    """With $NOTIFY_SOCKET, the mount sends a STATUS line a second with the
    last second's reads; a reader's bytes show up in one."""
    bucket, want = data_bucket
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(1.0)
    os.environ["NOTIFY_SOCKET"] = path
    try:
        m = mount(bucket)
    finally:
        del os.environ["NOTIFY_SOCKET"]
    deadline = time.monotonic() + 20
    seen = []
    while time.monotonic() < deadline:
        with open(m.p("a.bin"), "rb") as f:       # 3 MiB a pass: "reads" is not 0.0
            assert sha256(f.read()) == want["a.bin"]
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            continue
        seen.append(msg)
        if msg.startswith("STATUS=reads ") and not msg.startswith("STATUS=reads 0.0 MiB/s"):
            break
    else:
        pytest.fail("no STATUS line with reads in 20 s; got %r" % seen[-5:])
    sock.close()
    assert "no cache" in msg and "memory " in msg, msg
