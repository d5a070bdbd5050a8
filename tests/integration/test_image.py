"""The image built and run (issue 37 part 3), in `make test-deploy` only.

helm/image/Dockerfile is built by podman on a Debian base made by mmdebstrap
from this machine's apt sources (tests/deploy/image.sh, `make image`), then run
as the chart runs it: the container's command, arguments, environment,
security context and volumes are taken from the DaemonSet that build/helmtmpl
renders, the hostPath volumes become bind mounts, Bidirectional propagation
`rshared` and a pod's HostToContainer `rslave`. The host (the node) and a
second, already running container (a training pod) read every byte through the
mount, compared with the SHA-256 of what was uploaded to s3rver on 127.0.0.1;
a kill -9 of the serving process inside the container leaves a reader with an
open file reading (the keeper's successor takes over); `podman stop` (SIGTERM
through tini) unmounts on the host.

Skipped with one line when FEEDFS_DEPLOY_TESTS is not set (make test), or when
podman cannot run a container here."""

import hashlib
import json
import os
import subprocess
import time
import urllib.request

import pytest
import yaml

from conftest import content_for, free_port, is_mounted, sha256
from mounter import ACCESS_KEY, REGION, ROOT, SECRET_KEY

IMAGE_SH = os.path.join(ROOT, "tests", "deploy", "image.sh")
HELMTMPL = os.path.join(ROOT, "build", "helmtmpl")
IMAGE = "localhost/feedfs:test"

pytestmark = pytest.mark.skipif(os.environ.get("FEEDFS_DEPLOY_TESTS") != "1",
                                reason="the image is built and run by make test-deploy")


def podman(*args, timeout=120, check=True, env=None):
    cp = subprocess.run([IMAGE_SH, "podman"] + list(args), capture_output=True, text=True,
                        timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check:
        assert cp.returncode == 0, "podman %s: %s" % (" ".join(args), cp.stderr[-3000:])
    return cp


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """localhost/feedfs:test, built by `make image` (its layers are cached)."""
    if subprocess.run(["sh", "-c", "command -v podman"], capture_output=True).returncode:
        pytest.skip("podman is not installed (tests/deps.sh --deploy)")
    log = tmp_path_factory.mktemp("image") / "build.log"
    with open(log, "w") as f:
        cp = subprocess.run(["make", "-s", "-C", ROOT, "image", "IMAGE=" + IMAGE], stdout=f,
                            stderr=subprocess.STDOUT, timeout=1800, stdin=subprocess.DEVNULL)
    # Can podman run a container at all here? If not, that is the machine.
    smoke = podman("run", "--rm", "--network=host", "docker.io/library/debian:bookworm", "true",
                   check=False)
    if smoke.returncode != 0:
        line = (smoke.stderr.strip().splitlines() or ["(no message)"])[-1]
        pytest.skip("podman cannot run a container here: %s" % line)
    assert cp.returncode == 0, "make image failed:\n" + open(log).read()[-6000:]
    return IMAGE


def rendered_daemonset(values):
    cp = subprocess.run(["make", "-s", "-C", ROOT, "build/helmtmpl"], capture_output=True,
                        text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr
    cp = subprocess.run([HELMTMPL, os.path.join(ROOT, "helm", "feedfs"), "--json",
                         "--set-json", json.dumps(values)], capture_output=True, text=True,
                        timeout=60)
    assert cp.returncode == 0, cp.stderr
    (ds,) = [d for d in yaml.safe_load_all(json.loads(cp.stdout)["templates/daemonset.yaml"]) if d]
    return ds["spec"]["template"]["spec"]


PROPAGATION = {"Bidirectional": "rshared", "HostToContainer": "rslave", None: "rprivate"}


def podman_run_args(pod, name):
    """`podman run` arguments for the pod spec's one container, as the kubelet
    would set it up: hostPath volumes as binds with their propagation, the
    security context, the plain environment (values only: fieldRef and the
    Secret are the kubelet's), the command and its arguments."""
    (c,) = pod["containers"]
    vols = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    argv = ["run", "-d", "--name", name, "--network=host"]
    sc = c["securityContext"]
    if sc.get("privileged"):
        argv.append("--privileged")
    for cap in sc.get("capabilities", {}).get("add", []):
        argv += ["--cap-add", cap]
    for vm in c["volumeMounts"]:
        host = vols[vm["name"]]
        if host == "/dev/fuse":
            argv += ["--device", "/dev/fuse"]
            continue
        os.makedirs(host, exist_ok=True)
        argv += ["-v", "%s:%s:%s" % (host, vm["mountPath"],
                                     PROPAGATION[vm.get("mountPropagation")])]
    for e in c.get("env", []):
        if "value" in e:
            argv += ["-e", "%s=%s" % (e["name"], e["value"])]
    # the keys the Secret would bring: named here, their values from our environment
    argv += ["-e", "AWS_ACCESS_KEY_ID", "-e", "AWS_SECRET_ACCESS_KEY"]
    argv += ["--entrypoint", json.dumps(c["command"]), IMAGE] + c["args"]
    return argv


@pytest.fixture
def shared_root(tmp_path):
    """The node's mountRoot: a shared mount, as the kubelet needs for Bidirectional."""
    root = tmp_path / "node-mnt"
    root.mkdir()
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    subprocess.run(["mount", "--make-shared", str(root)], check=True)
    yield root
    subprocess.run(["umount", "-R", "-l", str(root)], check=False)


@pytest.fixture
def data(s3, new_bucket):
    b = new_bucket("image")
    files = {"train/big.bin": 24 << 20, "train/a.bin": 300 * 1024 + 7, "val/b.txt": 5,
             "val/empty": 0}
    for k, n in files.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b, {k: sha256(content_for(k, n)) for k, n in files.items()}


def children(pid):
    out = []
    for t in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, t)) as f:
            out += [int(x) for x in f.read().split()]
    return out


def ns_pid(pid):
    """The pid as the container sees it (the last field of NSpid)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    raise AssertionError("no NSpid for %d" % pid)


def file_sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def test_image_serves_the_host_and_survives_a_server_kill(image, s3server, data, shared_root,
                                                           tmp_path):
    bucket, want = data
    port = free_port()
    values = {"mountRoot": str(shared_root),
              "cache": {"hostPath": str(tmp_path / "nvme-cache")},
              "metrics": {"port": port},
              "mounts": [{"name": "datasets", "source": "s3://%s/" % bucket,
                          "endpoint": s3server.url, "cache": True,
                          "options": ["--force-path-style", "--region", REGION]}]}
    pod = rendered_daemonset(values)
    mnt = shared_root / "datasets"
    probe = pod["containers"][0]["startupProbe"]["exec"]["command"]
    assert probe == pod["containers"][0]["readinessProbe"]["exec"]["command"]
    assert probe[-1] == str(mnt)
    tag = "feedfs-it-%d" % os.getpid()
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    names = []
    try:
        # A training pod that starts before the mount exists: HostToContainer.
        podman("run", "-d", "--name", tag + "-pod", "--network=host", "-v",
               "%s:/data:ro,rslave" % shared_root, "--entrypoint", "sleep", image, "600")
        names.append(tag + "-pod")
        podman(*podman_run_args(pod, tag), env=env)
        names.append(tag)
        deadline = time.monotonic() + 90
        while True:
            st = podman("inspect", "--format", "{{.State.Status}}", tag).stdout.strip()
            assert st == "running", "the container is %s: %s" % (
                st, podman("logs", tag, check=False).stderr[-3000:])
            # the chart's startup probe, run in the container as the kubelet would
            pr = podman("exec", tag, *probe, check=False)
            if pr.returncode == 0:
                break
            assert time.monotonic() < deadline, "not mounted after 90 s: %s" % pr.stderr
            time.sleep(0.5)
        # The host (the node) sees the mount, and reads every byte right.
        assert is_mounted(str(mnt))
        for k, digest in sorted(want.items()):
            assert file_sha(mnt / k) == digest, k
        # The pod started before the mount sees it too.
        for k, digest in sorted(want.items()):
            cp = podman("exec", tag + "-pod", "sha256sum", "/data/datasets/" + k)
            assert cp.stdout.split()[0] == digest, k
        # /metrics of the container's feedfs, on the chart's port
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            assert b"feedfs_" in r.read()
        # The block cache went where the chart put it: the node's cache hostPath.
        assert os.listdir(tmp_path / "nvme-cache" / "datasets")

        # tini -> feedfs (the keeper, which holds /dev/fuse) -> the serving process
        tini = int(podman("inspect", "--format", "{{.State.Pid}}", tag).stdout)
        (keeper,) = children(tini)
        (server,) = children(keeper)
        big = mnt / "train/big.bin"
        h = hashlib.sha256()
        with open(big, "rb") as f:
            h.update(f.read(4 << 20))
            podman("exec", tag, "sh", "-c", "kill -9 %d" % ns_pid(server))
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        assert h.hexdigest() == want["train/big.bin"]
        (successor,) = children(keeper)
        assert successor != server
        assert podman("exec", tag, *probe, check=False).returncode == 0     # still ready
        for k, digest in sorted(want.items()):
            assert file_sha(mnt / k) == digest, k
        cp = podman("exec", tag + "-pod", "sha256sum", "/data/datasets/train/a.bin")
        assert cp.stdout.split()[0] == want["train/a.bin"]

        # The kubelet stopping the container: SIGTERM through tini; feedfs unmounts.
        podman("stop", "-t", "30", tag, timeout=60)
        assert podman("inspect", "--format", "{{.State.ExitCode}}", tag).stdout.strip() == "0"
        assert not is_mounted(str(mnt))
        cp = podman("exec", tag + "-pod", "ls", "/data/datasets/")
        assert cp.stdout.split() == []          # the pod sees the bare directory again
    finally:
        if tag in names:          # feedfs's own log lines, kept with the test's files
            (tmp_path / "container.log").write_text(podman("logs", tag, check=False).stderr)
        for n in names:
            podman("rm", "-f", "-t", "0", n, check=False)
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_image_entrypoints_run(image, tmp_path):
    """The other entrypoints find what they need in the slim image: python3-minimal
    for fluid-feedfs, sh for ack-feedfs; feedfs links against the image's libraries."""
    cp = podman("run", "--rm", "--entrypoint", "/usr/local/bin/feedfs", image, "--version")
    assert cp.stdout.startswith("feedfs "), cp.stdout
    (tmp_path / "ak").write_text("AKIATEST\n")
    (tmp_path / "sk").write_text("secret-test\n")
    cfg = {"targetPath": "/runtime-mnt/thin/default/d/thin-fuse",
           "mounts": [{"name": "d", "mountPoint": "s3://b/p/",
                       "options": {"region": "us-east-1",
                                   "access-key-id": "/etc/fluid/secrets/k/ak",
                                   "secret-access-key": "/etc/fluid/secrets/k/sk"}}]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    cp = podman("run", "--rm", "-v", "%s:/etc/fluid/config:ro" % tmp_path,
                "-v", "%s:/etc/fluid/secrets/k:ro" % tmp_path,
                "--entrypoint", "/usr/local/bin/fluid-feedfs", image, "--print")
    out = json.loads(cp.stdout)
    assert out["argv"][:3] == ["feedfs-node", "s3://b/p/", "/runtime-mnt/thin/default/d/thin-fuse"]
    assert sorted(out["env"]) == ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]
    cp = podman("run", "--rm", "-e", "FEEDFS_SOURCE=oss://b/p", "-e", "FEEDFS_TARGET=/mnt/x",
                "-e", "FEEDFS_REGION=cn-hangzhou", "-e", "FEEDFS_NODE=/bin/echo",
                "--entrypoint", "/usr/local/bin/ack-feedfs", image)
    assert cp.stdout.split() == ["oss://b/p", "/mnt/x", "--region", "cn-hangzhou"]
