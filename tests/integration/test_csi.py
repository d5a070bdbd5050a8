"""feedfs-csi, the CSI node plugin (issue 37 part 1), called over its unix
socket as kubelet calls it: gRPC, CSI v1 messages written from the spec
(csiclient.py), real feedfs mounts of the local S3 server.

What kubelet does for a pod that declares a feedfs volume, and what the plugin
must answer: publish the volume into the pod's target path (a bind mount of one
feedfs mount per (source, options, secrets) on the node, made once, shared),
unpublish it when the pod goes (the mount stays while another pod uses it,
goes with the last one), refuse bad requests with the spec's gRPC code.
"""

import os
import re
import signal
import subprocess
import time

import grpc
import pytest

from conftest import content_for, sha256
from csiclient import (Client, capability, decode, f_msg, f_str, publish_request,
                       unpublish_request)
from mounter import ACCESS_KEY, REGION, ROOT, SECRET_KEY, is_mounted, pid_alive, s3rver_env
from servers import Gate

DRIVER = "csi.feedfs.io"
FILES = {"a.bin": 3 << 20, "dir/b.bin": 12345, "dir/sub/c.txt": 1, "e.bin": 1 << 20}
CRED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
SECRETS = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
WAIT_S = 60          # bound on every wait below (a hung plugin fails, it is not timed)


def feedfs_version():
    with open(os.path.join(ROOT, "include", "feedfs", "options.h")) as f:
        return re.search(r'#define FEEDFS_VERSION "([^"]+)"', f.read()).group(1)


def mount_table():
    """[(dev, mount point, fstype)] of /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fs = line.split()
            sep = fs.index("-", 6)
            out.append((fs[2], fs[4].encode().decode("unicode_escape"), fs[sep + 1]))
    return out


def dev_of(path):
    found = [d for d, p, _ in mount_table() if p == path]
    return found[-1] if found else None


def wait_for(cond, what, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail("gave up waiting (%ds) for %s" % (timeout, what))
        time.sleep(0.05)


class Plugin:
    """One feedfs-csi process on a socket in tmp; `env` is its (the node's) environment."""

    def __init__(self, binary, tmp, env, args=()):
        self.binary, self.tmp, self.env, self.args = binary, str(tmp), env, list(args)
        self.sock = os.path.join(self.tmp, "plugin", "csi.sock")
        self.state = os.path.join(self.tmp, "state")
        self.logpath = os.path.join(self.tmp, "plugin.log")
        self.proc = None
        self.client = None

    def start(self):
        # A socket file left by a killed plugin would refuse connections
        # until the new one replaces it: wait for the new one's.
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        self.log = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--endpoint", "unix://" + self.sock, "--node-id", "node-1",
             "--state-dir", self.state] + self.args,
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env)
        wait_for(lambda: os.path.exists(self.sock) or self.proc.poll() is not None,
                 "the plugin's socket")
        assert self.proc.poll() is None, self.log_text()
        self.client = Client(self.sock)
        self.client.call("Identity", "Probe", wait_for_ready=True)
        return self

    def kill(self, sig=signal.SIGKILL):
        self.client.close()
        self.proc.send_signal(sig)
        self.proc.wait(WAIT_S)
        self.log.close()

    def log_text(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def base_mounts(self):
        """The feedfs mounts the plugin made (STATE/mounts/KEY)."""
        pre = os.path.join(self.state, "mounts") + "/"
        return sorted(p for _, p, t in mount_table() if p.startswith(pre))


@pytest.fixture
def csi_bin(feedfs_bin):
    b = os.path.join(os.path.dirname(feedfs_bin), "feedfs-csi")
    assert os.access(b, os.X_OK), "%s is not built (make all builds it next to feedfs)" % b
    return b


def _cleanup(tmp):
    """Unmounts whatever a failed test left under tmp, deepest first, and
    stops the feedfs daemons the plugin started there."""
    tmp = str(tmp)
    for _, p, _ in sorted(mount_table(), key=lambda e: -len(e[1])):
        if p.startswith(tmp + "/"):
            subprocess.run(["umount", "-l", p], capture_output=True)
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"feedfs" and \
                    any(a.startswith(tmp.encode()) for a in argv):
                os.kill(int(d), signal.SIGKILL)


def _running(p, tmp_path):
    """A fixture's life of plugin p: started, yielded, stopped (SIGTERM), and
    what it left under tmp_path cleaned up."""
    p.start()
    yield p
    if p.proc.poll() is None:
        p.kill(signal.SIGTERM)
    _cleanup(tmp_path)


@pytest.fixture
def plugin(csi_bin, tmp_path):
    """The plugin with no credentials in its environment: every volume brings its own."""
    env = {k: v for k, v in os.environ.items() if k not in CRED_VARS}
    yield from _running(Plugin(csi_bin, tmp_path, env), tmp_path)


@pytest.fixture
def node_plugin(csi_bin, tmp_path):
    """The plugin with the node's credentials (s3rver's keys) in its
    environment, and a block cache per mount under tmp/cache."""
    yield from _running(Plugin(csi_bin, tmp_path, s3rver_env(),
                               args=["--cache-root", os.path.join(str(tmp_path), "cache")]),
                        tmp_path)


@pytest.fixture
def dataset(s3, new_bucket):
    b = new_bucket("csi")
    for k, n in FILES.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b, {k: sha256(content_for(k, n)) for k, n in FILES.items()}


def attrs(bucket, endpoint, **extra):
    """volumeAttributes of a static PV of the bucket on the local S3 server."""
    a = {"source": "s3://%s/" % bucket, "endpoint_url": endpoint, "force_path_style": "true",
         "region": REGION}
    a.update(extra)
    return a


def target(tmp, pod):
    """Where kubelet asks for pod's volume (its parent exists, as kubelet makes it)."""
    d = os.path.join(str(tmp), "kubelet", "pods", pod, "volumes", "kubernetes.io~csi", "data")
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, "mount")


def check_bytes(root, want):
    got = {}
    for k in want:
        with open(os.path.join(root, k), "rb") as f:
            got[k] = sha256(f.read())
    assert got == want


def code_of(fn):
    with pytest.raises(grpc.RpcError) as ei:
        fn()
    return ei.value.code(), ei.value.details()


def feedfs_pids(path):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"feedfs" and path.encode() in argv:
                out.append(int(d))
    return out


# ---------------------------------------------------------------- identity

def test_identity_and_node_info(plugin):
    c = plugin.client
    info = decode(c.call("Identity", "GetPluginInfo"))
    assert info[1] == [DRIVER.encode()]
    assert info[2] == [feedfs_version().encode()]
    assert decode(c.call("Identity", "GetPluginCapabilities")) == {}   # no controller
    # ProbeResponse.ready = BoolValue{value: true}
    assert decode(c.call("Identity", "Probe")) == {1: [b"\x08\x01"]}
    assert decode(c.call("Node", "NodeGetInfo")) == {1: [b"node-1"]}
    caps = decode(c.call("Node", "NodeGetCapabilities"))
    types = sorted(decode(decode(cap)[1][0])[1][0] for cap in caps[1])
    assert types == [2]                                  # GET_VOLUME_STATS, no staging
    code, _ = code_of(lambda: c.call("Node", "NodeStageVolume", f_str(1, "v")))
    assert code == grpc.StatusCode.UNIMPLEMENTED


def test_help_and_bad_flags(csi_bin):
    cp = subprocess.run([csi_bin, "--help"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and "--endpoint unix:///PATH/csi.sock" in cp.stdout
    cp = subprocess.run([csi_bin, "--version"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and cp.stdout == "feedfs-csi %s\n" % feedfs_version()
    cp = subprocess.run([csi_bin], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 2
    assert cp.stderr == "feedfs-csi: --endpoint unix:///PATH/csi.sock is required\n"
    cp = subprocess.run([csi_bin, "--endpoint", "tcp://0.0.0.0:1"], capture_output=True,
                        text=True, timeout=30)
    assert cp.returncode == 2 and "only unix:// sockets" in cp.stderr


# ---------------------------------------------------------------- two pods, one mount

def test_two_pods_share_one_mount(plugin, dataset, s3server, tmp_path):
    bucket, want = dataset
    c = plugin.client
    ctx = attrs(bucket, s3server.url)
    ta, tb = target(tmp_path, "pod-a"), target(tmp_path, "pod-b")

    # The plugin's environment has no keys: without the Secret's, the mount
    # is refused, and nothing is left mounted or bound.
    code, msg = code_of(lambda: c.publish("vol-1", ta, ctx))
    assert code == grpc.StatusCode.INTERNAL and "could not mount" in msg
    assert plugin.base_mounts() == [] and not is_mounted(ta)
    # s3rver checks the key id only
    bad = {"key_id": "NOT-S3RVER", "access_key": "not-the-key-0123456789"}
    code, msg = code_of(lambda: c.publish("vol-1", ta, ctx, secrets=bad))
    assert code == grpc.StatusCode.INTERNAL and "not-the-key" not in msg
    assert plugin.base_mounts() == []

    c.publish("vol-1", ta, ctx, secrets=SECRETS)
    c.publish("vol-1", tb, ctx, secrets=SECRETS)
    c.publish("vol-1", tb, ctx, secrets=SECRETS)      # again: the same answer, nothing new
    bases = plugin.base_mounts()
    assert len(bases) == 1, bases                     # one feedfs mount for both pods
    assert dev_of(ta) == dev_of(tb) == dev_of(bases[0])
    assert len(feedfs_pids(bases[0])) >= 1
    check_bytes(ta, want)
    check_bytes(tb, want)
    # read-only, whatever the pod asks
    with pytest.raises(OSError):
        open(os.path.join(ta, "new.txt"), "wb")

    # NodeGetVolumeStats: bytes and inodes of the published path
    st = decode(c.call("Node", "NodeGetVolumeStats", f_str(1, "vol-1") + f_str(2, ta)))
    units = sorted(decode(u).get(4, [0])[0] for u in st[1])
    assert units == [1, 2]

    # Pod B holds a file open across pod A's going away.
    held = open(os.path.join(tb, "a.bin"), "rb")
    first = held.read(1 << 20)
    c.unpublish("vol-1", ta)
    assert not is_mounted(ta) and not os.path.exists(ta)
    assert plugin.base_mounts() == bases              # B still uses it
    rest = held.read()
    held.close()
    assert sha256(first + rest) == want["a.bin"]
    check_bytes(tb, want)

    c.unpublish("vol-1", tb)
    assert not is_mounted(tb) and not os.path.exists(tb)
    assert plugin.base_mounts() == []                 # the last pod took the mount with it
    wait_for(lambda: not any(pid_alive(p) for p in feedfs_pids(bases[0])), "feedfs to exit")
    c.unpublish("vol-1", tb)                          # again: the same answer

    log = plugin.log_text()
    assert "unmounted %s" % bases[0] in log
    for secret in (SECRET_KEY, "not-the-key-0123456789"):
        assert secret not in log, "a secret in the plugin's log"


def test_restarted_plugin_unpublishes(plugin, dataset, s3server, tmp_path):
    """Who uses a mount is read from the kernel's mount table: a plugin killed
    and started again unpublishes the pods of the one before it, and unmounts
    with the last."""
    bucket, want = dataset
    ctx = attrs(bucket, s3server.url)
    ta, tb = target(tmp_path, "pod-a"), target(tmp_path, "pod-b")
    plugin.client.publish("vol-1", ta, ctx, secrets=SECRETS)
    plugin.client.publish("vol-1", tb, ctx, secrets=SECRETS)
    bases = plugin.base_mounts()
    plugin.kill()
    check_bytes(ta, want)                             # the mounts outlive the plugin
    plugin.start()
    # a new pod of the volume joins the same mount: the keys are the same
    # after a restart (the salt of their HMAC is kept in the state dir, 0600)
    tc = target(tmp_path, "pod-c")
    plugin.client.publish("vol-1", tc, ctx, secrets=SECRETS)
    assert plugin.base_mounts() == bases
    assert os.stat(os.path.join(plugin.state, "key-salt")).st_mode & 0o777 == 0o600
    plugin.client.unpublish("vol-1", ta)
    assert plugin.base_mounts() == bases
    check_bytes(tb, want)
    check_bytes(tc, want)
    plugin.client.unpublish("vol-1", tb)
    plugin.client.unpublish("vol-1", tc)
    assert plugin.base_mounts() == []


def test_mount_options_and_node_credentials(node_plugin, dataset, s3server, tmp_path):
    """A PV's mountOptions (volume_capability.mount.mount_flags) are feedfs
    options as in fstab; without a Secret the node's credentials serve.
    Other options are another mount."""
    bucket, want = dataset
    c = node_plugin.client
    ta, tb = target(tmp_path, "pod-a"), target(tmp_path, "pod-b")
    flags = ["endpoint_url=%s,force_path_style" % s3server.url, "region=%s" % REGION]
    c.publish("vol-pv", ta, {"source": "s3://%s/dir/" % bucket},
              cap=capability(mount_flags=flags))
    c.publish("vol-inline", tb, attrs(bucket, s3server.url, metadata_ttl="30",
                                      **{"csi.storage.k8s.io/ephemeral": "true",
                                         "csi.storage.k8s.io/pod.name": "pod-b"}))
    bases = node_plugin.base_mounts()
    assert len(bases) == 2
    assert dev_of(ta) != dev_of(tb)
    check_bytes(ta, {k[4:]: v for k, v in want.items() if k.startswith("dir/")})
    check_bytes(tb, want)
    # one block cache per mount, named as the mount (--cache-root), in use
    caches = os.path.join(str(tmp_path), "cache")
    assert sorted(os.listdir(caches)) == sorted(os.path.basename(b) for b in bases)
    for b in bases:
        assert os.listdir(os.path.join(caches, os.path.basename(b))) != []
    c.unpublish("vol-pv", ta)
    c.unpublish("vol-inline", tb)
    assert node_plugin.base_mounts() == []


# ---------------------------------------------------------------- bad requests

def _bad_cases(tmp, url):
    t = target(tmp, "pod-bad")
    ctx = {"source": "s3://b/", "endpoint_url": url, "force_path_style": "true"}
    INVALID = grpc.StatusCode.INVALID_ARGUMENT
    pub = lambda *a, **kw: ("Node", "NodePublishVolume", publish_request(*a, **kw))  # noqa: E731
    return [
        ("no volume_id", pub(None, t, ctx), INVALID, "volume_id is required"),
        ("no target", pub("v", None, ctx), INVALID, "target_path is required"),
        ("relative target", pub("v", "pods/a/mount", ctx), INVALID, "not an absolute path"),
        ("no capability", pub("v", t, ctx, cap=False), INVALID, "volume_capability is required"),
        ("block", pub("v", t, ctx, cap=capability(block=True)), INVALID, "block access"),
        ("no access mode", pub("v", t, ctx, cap=f_msg(2, b"")), INVALID, "access_mode is required"),
        ("no source", pub("v", t, {"region": "r"}), INVALID, "'source' is required"),
        ("not a URL", pub("v", t, {"source": "/etc"}), INVALID, "must be an s3://"),
        ("unknown secret key", pub("v", t, ctx, secrets={"password": "hunter2-secret"}), INVALID,
         "secret key 'password'"),
        ("unknown option", pub("v", t, dict(ctx, colour="red")), INVALID,
         "unknown option 'colour' (feedfs has no --colour)"),
        ("flag with a value", pub("v", t, dict(ctx, force_path_style="yes")), INVALID,
         "option 'force_path_style' takes no value"),
        ("unknown mount flag", pub("v", t, ctx, cap=capability(mount_flags=["colour=red"])),
         INVALID, "unknown option 'colour'"),
        ("not for mount", pub("v", t, dict(ctx, foreground="true")), INVALID,
         "cannot be used with mount(8)"),
        ("inline cache_dir", pub("v", t, dict(ctx, cache_dir="/etc", **{
            "csi.storage.k8s.io/ephemeral": "true"})), INVALID, "not allowed in an inline volume"),
        ("smuggled option", pub("v", t, dict(ctx, **{
            "csi.storage.k8s.io/ephemeral": "true", "region=x,cache_dir": "/etc"})), INVALID,
         "'region=x,cache_dir' is not a feedfs option name"),
        ("unpublish no volume_id", ("Node", "NodeUnpublishVolume", unpublish_request(None, t)),
         INVALID, "volume_id is required"),
        ("unpublish no target", ("Node", "NodeUnpublishVolume", unpublish_request("v", None)),
         INVALID, "target_path is required"),
        ("unpublish relative", ("Node", "NodeUnpublishVolume", unpublish_request("v", "a/b")),
         INVALID, "not an absolute path"),
        ("stats no path", ("Node", "NodeGetVolumeStats", f_str(1, "v")), INVALID,
         "volume_path is required"),
        ("stats not mounted", ("Node", "NodeGetVolumeStats", f_str(1, "v") + f_str(2, t)),
         grpc.StatusCode.NOT_FOUND, "is not mounted"),
        ("not protobuf", ("Node", "NodePublishVolume", b"\x0a\x05ab"), None, ""),
    ]


def test_bad_requests(plugin, s3server, tmp_path):
    for name, (svc, method, body), want, text in _bad_cases(tmp_path, s3server.url):
        code, msg = code_of(lambda: plugin.client.call(svc, method, body))
        if want is not None:
            assert (code, text in msg) == (want, True), "%s: %s %s" % (name, code, msg)
        else:
            assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL), name
        assert "hunter2-secret" not in msg
    # nothing was mounted, bound or created
    assert plugin.base_mounts() == []
    assert not os.path.exists(target(tmp_path, "pod-bad"))
    assert "hunter2-secret" not in plugin.log_text()


# ---------------------------------------------------------------- waiting for the mount

def test_publish_waits_for_the_mount(plugin, dataset, s3server, tmp_path):
    """kubelet publishes two pods of one volume while its mount cannot be ready
    (the store has not answered yet): neither publish returns, nor is
    anything bound in a target, until the mount answers; then both do, on
    one mount, and read the right bytes."""
    bucket, want = dataset
    gate = Gate(s3server.port)
    try:
        ctx = attrs(bucket, gate.url)
        ta, tb = target(tmp_path, "pod-a"), target(tmp_path, "pod-b")
        fa = plugin.client.future("Node", "NodePublishVolume",
                                  publish_request("vol-1", ta, ctx, secrets=SECRETS))
        assert gate.accepted.wait(WAIT_S), "feedfs never reached the store"
        fb = plugin.client.future("Node", "NodePublishVolume",
                                  publish_request("vol-1", tb, ctx, secrets=SECRETS))
        # B's request has reached the plugin (it logs it before waiting on the mount)
        wait_for(lambda: "publish volume vol-1 at %s" % tb in plugin.log_text(), "B's publish")
        assert not fa.done() and not fb.done()
        assert not is_mounted(ta) and not is_mounted(tb)
        gate.open()
        fa.result(timeout=WAIT_S)
        fb.result(timeout=WAIT_S)
        assert len(plugin.base_mounts()) == 1
        check_bytes(ta, want)
        check_bytes(tb, want)
        plugin.client.unpublish("vol-1", ta)
        plugin.client.unpublish("vol-1", tb)
        assert plugin.base_mounts() == []
    finally:
        gate.close()


def test_target_holding_another_mount(plugin, dataset, s3server, tmp_path):
    """A target path that holds some other mount: ALREADY_EXISTS, and the
    refused publish leaves no feedfs mount behind."""
    bucket, _ = dataset
    t = target(tmp_path, "pod-x")
    os.makedirs(t)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "other", t], check=True)
    try:
        code, msg = code_of(lambda: plugin.client.publish(
            "vol-1", t, attrs(bucket, s3server.url), secrets=SECRETS))
        assert code == grpc.StatusCode.ALREADY_EXISTS and "holds another mount" in msg
        assert plugin.base_mounts() == []
    finally:
        subprocess.run(["umount", t], capture_output=True)


def test_dead_mount_is_replaced(plugin, dataset, s3server, tmp_path):
    """A killed serving process is replaced by its keeper under the pod's
    reads. A mount that died whole (server and keeper killed): the next pod
    gets a new mount that reads right; the old pod's unpublish still
    succeeds (kubelet would retry it forever otherwise), and the new mount
    goes with its last pod."""
    bucket, want = dataset
    ctx = attrs(bucket, s3server.url)
    ta, tb = target(tmp_path, "pod-a"), target(tmp_path, "pod-b")
    plugin.client.publish("vol-1", ta, ctx, secrets=SECRETS)
    (base,) = plugin.base_mounts()
    old_dev = dev_of(base)

    # First the restart survival feedfs has anyway: the serving process
    # (the keeper's child) killed, the keeper starts a successor, and the
    # pod reads on through a file it held open, on the same mount.
    def ppid(pid):
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    pids = feedfs_pids(base)
    (server,) = [p for p in pids if ppid(p) in pids]
    held = open(os.path.join(ta, "a.bin"), "rb")
    first = held.read(1 << 20)
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: not pid_alive(server) and len(feedfs_pids(base)) == 2, "a successor")
    assert sha256(first + held.read()) == want["a.bin"]
    held.close()
    check_bytes(ta, want)
    assert dev_of(base) == old_dev

    # Then the whole mount killed, keeper too.
    def kill_all():         # the keeper starts a successor for a server killed before it
        for pid in feedfs_pids(base):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not any(pid_alive(p) for p in feedfs_pids(base))
    wait_for(kill_all, "every feedfs process of the mount to die")
    with pytest.raises(OSError):
        os.listdir(ta)                                # the old pod's mount is dead
    plugin.client.publish("vol-1", tb, ctx, secrets=SECRETS)
    assert plugin.base_mounts() == [base] and dev_of(base) != old_dev
    assert dev_of(tb) == dev_of(base)
    check_bytes(tb, want)
    plugin.client.unpublish("vol-1", ta)
    assert not is_mounted(ta)
    assert plugin.base_mounts() == [base]
    plugin.client.unpublish("vol-1", tb)
    assert plugin.base_mounts() == []
