"""A booted systemd (issue 37 part 4), in `make test-deploy` only.

A Debian 12 root made by mmdebstrap from this machine's apt sources
(tests/deploy/rootfs.sh systemd, cached in build/deploy/), with feedfs put in by
`make install DESTDIR=ROOT PREFIX=/usr`, is booted by `systemd-nspawn --boot`
(systemd 252 as its PID 1, the host's network: s3rver on 127.0.0.1). Checked
under that systemd, what the unit tests cannot:
  - feedfs@NAME from /etc/feedfs/NAME.env: Type=notify stays `activating` while
    feedfs waits for S3 (held by a gate in front of s3rver), `systemctl start`
    returns once READY=1 came, and the mount answers then, every byte right;
  - the STATUS line of `systemctl status` (StatusText);
  - the watchdog: a serving process stopped with SIGSTOP stops pinging, systemd
    says "Watchdog timeout", Restart=on-failure brings the mount back;
  - `systemctl stop` unmounts and the unit ends `inactive` with Result=success;
  - an /etc/fstab line mounted by systemd at boot (mount.feedfs through the
    fstab generator), every byte right.

Skipped with one line when FEEDFS_DEPLOY_TESTS is not set (make test), or when
systemd-nspawn cannot boot the root here."""

import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import content_for, sha256
from mounter import ACCESS_KEY, REGION, ROOT, SECRET_KEY
from servers import Gate

ROOTFS_SH = os.path.join(ROOT, "tests", "deploy", "rootfs.sh")
TARBALL = os.path.join(ROOT, "build", "deploy", "bookworm-systemd.tar")
BOOT_TIMEOUT_S = 120

pytestmark = pytest.mark.skipif(os.environ.get("FEEDFS_DEPLOY_TESTS") != "1",
                                reason="the booted systemd runs in make test-deploy")


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            for t in os.listdir("/proc/%d/task" % p):
                with open("/proc/%d/task/%s/children" % (p, t)) as f:
                    kids = [int(x) for x in f.read().split()]
                out += kids
                todo += kids
        except OSError:
            pass
    return out


def ns_pid1(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("NSpid:"):
                    v = line.split()
                    return len(v) > 2 and v[-1] == "1"
    except OSError:
        pass
    return False


class Machine:
    """A booted nspawn container; run() executes a command inside it."""

    def __init__(self, rootdir, log):
        self.rootdir = rootdir
        self.logf = open(log, "wb")
        self.log = log
        self.proc = subprocess.Popen(
            # --register=no --keep-unit: no machined and no scope unit, so no
            # system bus is needed (the host's PID 1 need not be systemd)
            ["systemd-nspawn", "-q", "-D", rootdir, "--boot", "--register=no", "--keep-unit",
             "--machine=feedfs-it-%d" % os.getpid(), "--bind=/dev/fuse",
             "--console=passive", "--resolv-conf=off", "--timezone=off"],
            stdin=subprocess.DEVNULL, stdout=self.logf, stderr=subprocess.STDOUT)
        self.leader = None
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while self.leader is None:
            if self.proc.poll() is not None:
                return
            self.leader = next((p for p in descendants(self.proc.pid) if ns_pid1(p)), None)
            if time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def run(self, *cmd, timeout=60, check=True):
        argv = ["nsenter", "-t", str(self.leader), "-m", "-u", "-i", "-p", "-r", "-w",
                "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_PAGER=cat",
                "LANG=C.UTF-8"] + list(cmd)
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
        if check:
            assert cp.returncode == 0, "%s: exit %d: %s%s" % (" ".join(cmd), cp.returncode,
                                                              cp.stdout, cp.stderr)
        return cp

    def popen(self, *cmd):
        return subprocess.Popen(
            ["nsenter", "-t", str(self.leader), "-m", "-u", "-i", "-p", "-r", "-w",
             "env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"] + list(cmd),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def prop(self, unit, name):
        return self.run("systemctl", "show", "-P", name, unit).stdout.rstrip("\n")

    def log_tail(self, n=4000):
        with open(self.log, "rb") as f:
            return f.read()[-n:].decode(errors="replace")

    def poweroff(self):
        if self.proc.poll() is None:
            if self.leader:
                self.run("systemctl", "poweroff", "--no-block", check=False)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.logf.close()


@pytest.fixture(scope="module")
def bucket(s3):
    name = "nspawn-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=name)
    files = {"big.bin": 16 << 20, "dir/a.bin": 123457, "dir/b.txt": 3}
    for k, n in files.items():
        s3.put_object(Bucket=name, Key=k, Body=content_for(k, n))
    return name, {k: sha256(content_for(k, n)) for k, n in files.items()}


@pytest.fixture(scope="module")
def gate(s3server):
    g = Gate(s3server.port)
    yield g
    g.close()


@pytest.fixture(scope="module")
def machine(tmp_path_factory, feedfs_bin, s3server, bucket, gate):
    if not shutil.which("systemd-nspawn"):
        pytest.skip("systemd-nspawn is not installed (tests/deps.sh --deploy)")
    cp = subprocess.run([ROOTFS_SH, "systemd", TARBALL], capture_output=True, text=True,
                        timeout=1800, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    work = tmp_path_factory.mktemp("nspawn")
    rootdir = str(work / "root")
    os.mkdir(rootdir)
    subprocess.run(["tar", "-C", rootdir, "-xpf", TARBALL], check=True, timeout=600)
    cp = subprocess.run(["make", "-s", "-C", ROOT, "install", "DESTDIR=" + rootdir,
                         "PREFIX=/usr", "BUILD=" + os.path.dirname(feedfs_bin)],
                        capture_output=True, text=True, timeout=300)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    name, _ = bucket

    def put(path, text, mode=0o644):
        p = os.path.join(rootdir, path.lstrip("/"))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)

    # feedfs@ds: through the gate, so that the test decides when S3 answers
    put("/etc/feedfs/ds.env",
        "FEEDFS_SOURCE=s3://%s/\nFEEDFS_MOUNTPOINT=/mnt/ds\n"
        "FEEDFS_OPTIONS=--endpoint-url http://127.0.0.1:%d --force-path-style --region %s "
        "--allow-other\nAWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n"
        % (name, gate.port, REGION, ACCESS_KEY, SECRET_KEY), 0o600)
    # the fstab mount reads root's shared credentials file (mount units have no env file)
    put("/root/.aws/credentials", "[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        % (ACCESS_KEY, SECRET_KEY), 0o600)
    put("/etc/fstab", "s3://%s/ /mnt/fstab feedfs _netdev,nofail,endpoint_url=%s,"
        "force_path_style,region=%s,allow_other 0 0\n" % (name, s3server.url, REGION))
    os.makedirs(os.path.join(rootdir, "mnt/fstab"), exist_ok=True)
    put("/etc/hostname", "feedfs-it\n")

    m = Machine(rootdir, str(work / "console.log"))
    try:
        if m.leader is None:
            lines = [l for l in m.log_tail().strip().splitlines()
                     if not l.startswith(("Spawning container", "Press ^]"))]
            pytest.skip("systemd-nspawn cannot boot here: %s" % (lines[0] if lines else
                                                                  "no PID 1 appeared"))
        # PID 1 is there before its bus is: ask again until systemctl can
        # connect, then --wait for the end of the boot.
        deadline = time.monotonic() + BOOT_TIMEOUT_S
        while True:
            cp = m.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT_S,
                       check=False)
            state = cp.stdout.strip()
            if state not in ("", "offline") or m.proc.poll() is not None or \
                    time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if state not in ("running", "degraded"):
            pytest.skip("systemd-nspawn cannot boot here: is-system-running says %r (%s)"
                        % (state, cp.stderr.strip().replace("\n", " ")))
        yield m
    finally:
        m.poweroff()
        subprocess.run(["umount", "-R", "-l", rootdir], capture_output=True)


def sha_in(m, path):
    cp = m.run("sha256sum", path, timeout=120)
    return cp.stdout.split()[0]


def mount_fstype(m, path):
    cp = m.run("findmnt", "-n", "-o", "FSTYPE", "-M", path, check=False)
    return cp.stdout.split()[-1] if cp.stdout.split() else ""


def test_fstab_line_mounted_at_boot(machine, bucket):
    m = machine
    _, want = bucket
    # the generator's unit for /mnt/fstab, started at boot by remote-fs.target
    assert m.prop("mnt-fstab.mount", "ActiveState") == "active", \
        m.run("journalctl", "-b", "--no-pager", "-u", "mnt-fstab.mount", check=False).stdout
    assert mount_fstype(m, "/mnt/fstab") == "fuse.feedfs"
    for k, digest in sorted(want.items()):
        assert sha_in(m, "/mnt/fstab/" + k) == digest, k
    m.run("umount", "/mnt/fstab")
    assert mount_fstype(m, "/mnt/fstab") == ""


def test_unit_notify_status_watchdog_stop(machine, bucket, gate):
    m = machine
    _, want = bucket
    unit = "feedfs@ds.service"
    # Type=notify: while S3 does not answer, the unit is activating, and
    # `systemctl start` waits.
    start = m.popen("systemctl", "start", unit)
    deadline = time.monotonic() + 60
    while not (gate.connections and m.prop(unit, "ActiveState") == "activating"):
        assert start.poll() is None, "systemctl start returned while S3 was held: %r" % (
            start.communicate(),)
        assert time.monotonic() < deadline, "feedfs never reached S3: %s" % (
            m.run("journalctl", "--no-pager", "-u", unit, check=False).stdout)
        time.sleep(0.2)
    assert m.prop(unit, "ActiveState") == "activating"
    assert start.poll() is None
    gate.opened.set()
    out, err = start.communicate(timeout=120)
    assert start.returncode == 0, err
    # active now, and so the mount answers at once
    assert (m.prop(unit, "ActiveState"), m.prop(unit, "SubState")) == ("active", "running")
    assert mount_fstype(m, "/mnt/ds") == "fuse.feedfs"
    for k, digest in sorted(want.items()):
        assert sha_in(m, "/mnt/ds/" + k) == digest, k

    # The STATUS line, refreshed once a second by the serving process.
    deadline = time.monotonic() + 30
    while not m.prop(unit, "StatusText").startswith("reads "):
        assert time.monotonic() < deadline, "no STATUS line: %r" % m.prop(unit, "StatusText")
        time.sleep(0.5)
    assert re.fullmatch(r"reads \d+\.\d MiB/s \(\d+/s\), S3 \d+\.\d MiB/s, "
                        r"(no cache|cache \d+/\d+ MiB), memory \d+/\d+ MiB",
                        m.prop(unit, "StatusText")), m.prop(unit, "StatusText")

    # The watchdog: a hung serving process (SIGSTOP) stops pinging; systemd
    # kills the service after WatchdogSec and Restart=on-failure mounts again.
    keeper = int(m.prop(unit, "MainPID"))
    kids = m.run("cat", "/proc/%d/task/%d/children" % (keeper, keeper)).stdout.split()
    assert len(kids) == 1, kids
    server = int(kids[0])
    m.run("kill", "-STOP", str(server))
    deadline = time.monotonic() + 180
    while not (m.prop(unit, "NRestarts") == "1" and m.prop(unit, "ActiveState") == "active"):
        assert time.monotonic() < deadline, "no restart after the server hung: %s" % (
            m.run("journalctl", "--no-pager", "-u", unit, check=False).stdout[-3000:])
        time.sleep(1)
    journal = m.run("journalctl", "--no-pager", "-u", unit).stdout
    assert "Watchdog timeout" in journal, journal[-3000:]
    assert int(m.prop(unit, "MainPID")) != keeper
    assert mount_fstype(m, "/mnt/ds") == "fuse.feedfs"
    for k, digest in sorted(want.items()):
        assert sha_in(m, "/mnt/ds/" + k) == digest, k

    # systemctl stop: SIGTERM to the keeper, which unmounts; a clean stop.
    m.run("systemctl", "stop", unit, timeout=90)
    assert m.prop(unit, "ActiveState") == "inactive"
    assert m.prop(unit, "Result") == "success"
    assert mount_fstype(m, "/mnt/ds") == ""
