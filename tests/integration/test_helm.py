"""Kubernetes (issue 18 part 6): the helm/feedfs chart rendered by
tests/helm/gotmpl.py (no helm binary here) and checked against the
Kubernetes object schemas of python3-kubernetes; the example pod; the image's
entrypoints (feedfs-node, fluid-feedfs, ack-feedfs) with one line per bad
input; and the pod's HostToContainer view simulated with a mount namespace.

What is NOT tested here: a real cluster, helm itself, the image build (no
container engine), Fluid's and ACK's controllers."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import content_for, is_mounted, sha256
from mounter import ROOT, REGION, pid_alive, pids_of_mount, s3rver_env

sys.path.insert(0, os.path.join(ROOT, "tests", "helm"))
from gotmpl import Renderer, TemplateError, render_chart  # noqa: E402

CHART = os.path.join(ROOT, "helm", "feedfs")
NODE = os.path.join(ROOT, "helm", "image", "feedfs-node")
FLUID = os.path.join(ROOT, "helm", "fluid", "fluid-feedfs.py")
ACK = os.path.join(ROOT, "helm", "ack", "ack-feedfs")
MODELS = {("apps/v1", "DaemonSet"): "V1DaemonSet", ("v1", "ServiceAccount"): "V1ServiceAccount",
          ("v1", "Service"): "V1Service", ("v1", "Pod"): "V1Pod",
          ("storage.k8s.io/v1", "CSIDriver"): "V1CSIDriver",
          ("v1", "PersistentVolume"): "V1PersistentVolume",
          ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim"}


@pytest.fixture(scope="module")
def k8s():
    kc = pytest.importorskip("kubernetes.client",
                             reason="python3-kubernetes is not installed: schemas not checked")
    return kc.ApiClient()


def validate(api, doc):
    """Deserialize doc into its python3-kubernetes model (which rejects a
    missing required field or a wrong type) and serialize it back: a field
    the schema does not have is dropped on the way, so any difference is a
    typo or a misplaced key."""
    model = MODELS[(doc["apiVersion"], doc["kind"])]

    class Resp:
        data = json.dumps(doc)
    obj = api.deserialize(Resp(), model)
    back = api.sanitize_for_serialization(obj)
    assert back == doc, "%s does not round-trip through %s:\n%s" % (
        doc["kind"], model, json.dumps({"rendered": doc, "schema": back}, indent=1, sort_keys=True))
    return obj


def docs_of(rendered):
    out = []
    for name, text in sorted(rendered.items()):
        if name.endswith(".txt"):
            continue
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def by_kind(docs):
    return {d["kind"]: d for d in docs}


@pytest.mark.parametrize("src,data,out", [
    # trimming: "{{-" eats the whitespace before, "-}}" after, newlines included
    ("a  {{- .x -}}  \n b", {"x": 1}, "a1b"),
    # Go's truth: 0, "", empty list/map and nil are false
    ("{{ if .a }}T{{ else }}F{{ end }}" * 5, None, None),
    # maps range in sorted key order; $k, $v; dot is the element
    ("{{ range $k, $v := .m }}{{ $k }}={{ . }};{{ end }}", {"m": {"b": 2, "a": 1}}, "a=1;b=2;"),
    # the pipeline value is the last argument; printf's verbs
    ("{{ .s | printf \"%s-%d\" \"x\" | quote }}", {"s": 5}, '"x-5"'),
    # a variable set inside range is the outer one (Go 1.11 semantics)
    ("{{ $f := false }}{{ range .l }}{{ if . }}{{ $f = true }}{{ end }}{{ end }}{{ $f }}",
     {"l": [0, 3]}, "true"),
    ("{{ default \"d\" .missing }} {{ and 1 0 }} {{ or 0 \"o\" }} {{ not 0 }}", {}, "d 0 o true"),
])
def test_renderer_semantics(src, data, out):
    r = Renderer()
    if out is None:       # the truth table
        for v, want in [(0, "F"), ("", "F"), ([], "F"), ({}, "F"), (None, "F"), (1, "T"),
                        ("0", "T"), ([0], "T"), (False, "F"), (True, "T")]:
            assert r.render(r.load("{{ if .a }}T{{ else }}F{{ end }}"), {"a": v}) == want, v
        return
    assert r.render(r.load(src), data) == out


def test_renderer_errors_like_helm():
    r = Renderer()
    with pytest.raises(TemplateError, match="nil pointer evaluating .a.b"):
        r.render(r.load("{{ .a.b }}"), {})
    with pytest.raises(TemplateError, match="function 'lookup' not defined"):
        r.render(r.load("{{ lookup 1 }}"), {})
    with pytest.raises(TemplateError, match="missing {{end}}"):
        r.load("{{ if .a }}x")


def test_chart_default_values(k8s):
    rendered = render_chart(CHART, release="feedfs", namespace="kube-system")
    docs = docs_of(rendered)
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "Service", "ServiceAccount"]
    for d in docs:
        validate(k8s, d)
    ds = by_kind(docs)["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (c,) = spec["containers"]
    assert c["securityContext"]["privileged"] is True
    assert c["args"][:2] == ["s3://my-bucket/datasets/", "/mnt/feedfs/datasets"]
    assert "--max-memory" not in c["args"]          # the budget follows the memory limit
    assert c["resources"]["limits"]["memory"] == "2Gi"
    mounts = {v["name"]: v for v in c["volumeMounts"]}
    assert mounts["mount-root"] == {"name": "mount-root", "mountPath": "/mnt/feedfs",
                                    "mountPropagation": "Bidirectional"}
    assert mounts["dev-fuse"]["mountPath"] == "/dev/fuse"
    vols = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    assert vols["dev-fuse"] == {"path": "/dev/fuse", "type": "CharDevice"}
    assert vols["cache"]["path"] == "/mnt/nvme/feedfs-cache"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["FEEDFS_CACHE_DIR"] == "/cache/datasets"
    assert "envFrom" not in c and "FEEDFS_CREDENTIALS_SECRET" not in env
    assert ds["spec"]["selector"]["matchLabels"] == \
        {k: v for k, v in ds["spec"]["template"]["metadata"]["labels"].items()}
    notes = rendered["NOTES.txt"]
    assert "/mnt/feedfs/datasets  <-  s3://my-bucket/datasets/" in notes
    assert "kube-system" in notes


def test_chart_two_mounts_secret_irsa(k8s):
    values = {
        "mounts": [
            {"name": "imagenet", "source": "s3://b1/imagenet/", "cache": True,
             "options": ["--region", "us-west-2"]},
            {"name": "minio", "source": "s3://b2", "endpoint": "http://minio:9000",
             "options": ["--force-path-style"],
             "resources": {"limits": {"memory": "512Mi"}}},
        ],
        "credentials": {"existingSecret": "s3-keys"},
        "serviceAccount": {"annotations": {
            "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/feedfs"}},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "cache": {"size": "100G"},
    }
    docs = docs_of(render_chart(CHART, values, release="data"))
    kinds = by_kind(docs)
    assert sorted(kinds) == ["DaemonSet", "Service", "ServiceAccount", "ServiceMonitor"]
    for d in docs:
        if d["kind"] != "ServiceMonitor":      # a CRD: no model in python3-kubernetes
            validate(k8s, d)
    ds = kinds["DaemonSet"]
    assert ds["metadata"]["name"] == "data-feedfs"
    c1, c2 = ds["spec"]["template"]["spec"]["containers"]
    assert c1["args"] == ["s3://b1/imagenet/", "/mnt/feedfs/imagenet", "--log-level", "info",
                          "--allow-other", "--cache-size", "100G", "--metrics-addr",
                          "0.0.0.0:9464", "--region", "us-west-2"]
    assert c2["args"] == ["s3://b2", "/mnt/feedfs/minio", "--log-level", "info", "--allow-other",
                          "--endpoint-url", "http://minio:9000", "--metrics-addr",
                          "0.0.0.0:9465", "--force-path-style"]
    assert c2["resources"] == {"limits": {"memory": "512Mi"}}
    assert [v["name"] for v in c2["volumeMounts"]] == ["mount-root", "dev-fuse"]
    for c in (c1, c2):
        assert c["envFrom"] == [{"secretRef": {"name": "s3-keys", "optional": True}}]
        assert {"name": "FEEDFS_CREDENTIALS_SECRET", "value": "s3-keys"} in c["env"]
    assert [p["containerPort"] for p in c1["ports"] + c2["ports"]] == [9464, 9465]
    assert kinds["ServiceAccount"]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/feedfs"}
    svc = kinds["Service"]["spec"]
    assert svc["clusterIP"] == "None"
    assert [(p["name"], p["port"]) for p in svc["ports"]] == [("metrics-0", 9464),
                                                             ("metrics-1", 9465)]
    sm = kinds["ServiceMonitor"]
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics-0", "metrics-1"]


def test_chart_without_cache_or_metrics(k8s):
    values = {"mounts": [{"name": "a", "source": "s3://a"}], "metrics": {"enabled": False},
              "serviceAccount": {"create": False}}
    docs = docs_of(render_chart(CHART, values))
    assert [d["kind"] for d in docs] == ["DaemonSet"]
    ds = validate(k8s, docs[0])
    spec = ds.spec.template.spec
    assert spec.service_account_name == "default"
    assert [v.name for v in spec.volumes] == ["mount-root", "dev-fuse"]
    assert spec.containers[0].ports is None
    assert "--metrics-addr" not in spec.containers[0].args


@pytest.mark.parametrize("values,msg", [
    ({"mounts": []}, "fail: values: mounts must list at least one mount"),
    ({"mounts": [{"source": "s3://x"}]}, "required: values: every mount needs a name"),
    ({"mounts": [{"name": "x"}]}, "required: values: every mount needs a source"),
])
def test_chart_refuses_bad_values(values, msg):
    with pytest.raises(TemplateError) as e:
        render_chart(CHART, values)
    assert str(e.value) == msg


def test_example_pod(k8s):
    with open(os.path.join(ROOT, "helm", "examples", "training-pod-hostpath.yaml")) as f:
        pod = yaml.safe_load(f)
    p = validate(k8s, pod)
    (vm,) = p.spec.containers[0].volume_mounts
    assert vm.mount_propagation == "HostToContainer" and vm.read_only is True
    # the mount root of the chart's default values, not a mount point under it
    (vol,) = p.spec.volumes
    assert vol.host_path.path == yaml.safe_load(open(os.path.join(CHART, "values.yaml")))["mountRoot"]


def test_chart_csi_driver(k8s):
    """csi.enabled: a CSIDriver and the node plugin's DaemonSet (feedfs-csi and
    kubelet's node-driver-registrar), next to the mounts' DaemonSet."""
    docs = docs_of(render_chart(CHART, {"csi": {"enabled": True},
                                        "credentials": {"existingSecret": "s3-keys"}},
                                release="data", namespace="kube-system"))
    for d in docs:
        validate(k8s, d)
    (drv,) = [d for d in docs if d["kind"] == "CSIDriver"]
    assert drv["metadata"]["name"] == "csi.feedfs.io"
    assert drv["spec"]["attachRequired"] is False
    assert drv["spec"]["volumeLifecycleModes"] == ["Persistent", "Ephemeral"]
    dss = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}
    assert sorted(dss) == ["data-feedfs", "data-feedfs-csi-node"]
    ds = dss["data-feedfs-csi-node"]
    # its pods are not the mounts DaemonSet's, nor the metrics Service's
    sel = ds["spec"]["selector"]["matchLabels"]
    assert sel != dss["data-feedfs"]["spec"]["selector"]["matchLabels"]
    assert all(ds["spec"]["template"]["metadata"]["labels"][k] == v for k, v in sel.items())
    spec = ds["spec"]["template"]["spec"]
    plugin, reg = spec["containers"]
    assert plugin["command"][-1] == "/usr/local/bin/feedfs-csi"
    assert plugin["args"] == ["--endpoint", "unix:///csi/csi.sock", "--driver-name",
                              "csi.feedfs.io", "--state-dir",
                              "/var/lib/kubelet/plugins/csi.feedfs.io", "--cache-root", "/cache"]
    assert plugin["envFrom"] == [{"secretRef": {"name": "s3-keys", "optional": True}}]
    assert plugin["securityContext"]["privileged"] is True
    pm = {v["name"]: v for v in plugin["volumeMounts"]}
    # the pods' volume directories are under kubelet's: the bind mounts
    # made there must reach the node
    assert pm["kubelet-dir"] == {"name": "kubelet-dir", "mountPath": "/var/lib/kubelet",
                                 "mountPropagation": "Bidirectional"}
    assert "--csi-address=/csi/csi.sock" in reg["args"]
    assert "--kubelet-registration-path=/var/lib/kubelet/plugins/csi.feedfs.io/csi.sock" \
        in reg["args"]
    vols = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"]}
    assert vols["plugin-dir"] == "/var/lib/kubelet/plugins/csi.feedfs.io"
    assert vols["registration-dir"] == "/var/lib/kubelet/plugins_registry"
    # off by default: the chart renders what it did before
    kinds = [d["kind"] for d in docs_of(render_chart(CHART))]
    assert "CSIDriver" not in kinds and kinds.count("DaemonSet") == 1


def _baseline_ok(pod_spec):
    """What the baseline Pod Security Standard refuses that a training pod
    could hold: hostPath volumes, privileged containers, host namespaces,
    added capabilities, mount propagation (it needs privileged)."""
    bad = [v["name"] for v in pod_spec.get("volumes", []) if "hostPath" in v]
    for k in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(k):
            bad.append(k)
    for c in pod_spec["containers"]:
        sc = c.get("securityContext") or {}
        if sc.get("privileged") or (sc.get("capabilities") or {}).get("add"):
            bad.append(c["name"])
        bad += [m["name"] for m in c.get("volumeMounts", []) if m.get("mountPropagation")]
    return bad


@pytest.mark.parametrize("name", ["training-pod.yaml", "training-pod-inline.yaml"])
def test_example_csi_pods(k8s, name):
    """The examples that declare the dataset as a volume: every object
    validates, the pod holds nothing the baseline standard refuses (the
    hostPath example does), and the volume is the driver's."""
    with open(os.path.join(ROOT, "helm", "examples", name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        validate(k8s, d)
    kinds = {d["kind"]: d for d in docs}
    pod = kinds["Pod"]["spec"]
    assert _baseline_ok(pod) == []
    (vol,) = pod["volumes"]
    if name == "training-pod.yaml":
        pv, pvc = kinds["PersistentVolume"]["spec"], kinds["PersistentVolumeClaim"]
        assert pv["csi"]["driver"] == "csi.feedfs.io"
        assert pv["csi"]["volumeAttributes"]["source"].startswith("s3://")
        assert vol["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
        assert pvc["spec"]["volumeName"] == kinds["PersistentVolume"]["metadata"]["name"]
        assert pv["claimRef"]["name"] == pvc["metadata"]["name"]
    else:
        assert sorted(kinds) == ["Pod"]
        assert vol["csi"]["driver"] == "csi.feedfs.io"
        assert vol["csi"]["volumeAttributes"]["source"].startswith("s3://")
    with open(os.path.join(ROOT, "helm", "examples", "training-pod-hostpath.yaml")) as f:
        assert _baseline_ok(yaml.safe_load(f)["spec"]) != []


def test_fluid_profile_and_parser(tmp_path):
    prof = yaml.safe_load(open(os.path.join(ROOT, "helm", "fluid", "thinruntimeprofile.yaml")))
    assert prof["kind"] == "ThinRuntimeProfile"
    assert prof["spec"]["fileSystemType"] == "fuse.feedfs"
    assert prof["spec"]["fuse"]["command"][-1] == "/usr/local/bin/fluid-feedfs"
    ds = list(yaml.safe_load_all(open(os.path.join(ROOT, "helm", "fluid", "dataset.yaml"))))
    assert [d["kind"] for d in ds] == ["Secret", "Dataset", "ThinRuntime"]
    assert ds[2]["spec"]["profileName"] == prof["metadata"]["name"]
    # What Fluid writes for that Dataset: encryptOptions become file paths
    # (below the secrets dir Fluid mounts them in).
    (tmp_path / "ak").write_text("AKIATEST\n")
    (tmp_path / "sk").write_text("secret-test\n")
    cfg = {"targetPath": "/runtime-mnt/thin/default/imagenet/thin-fuse",
           "runtimeOptions": {"metadata-ttl": "60", "allow_other": ""},
           "mounts": [{"name": "imagenet", "mountPoint": "s3://my-bucket/imagenet/",
                       "options": {"region": "us-east-1", "metadata-ttl": "300",
                                   "force-path-style": "true", "no-sign-request": "false",
                                   "access-key-id": str(tmp_path / "ak"),
                                   "secret-access-key": str(tmp_path / "sk")}}]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    env = dict(os.environ, FLUID_CONFIG=str(tmp_path / "config.json"),
               FLUID_SECRETS_DIR=str(tmp_path / "secrets"))
    cp = subprocess.run([sys.executable, FLUID, "--print"], capture_output=True, text=True,
                        env=env, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert json.loads(cp.stdout) == {
        "argv": ["feedfs-node", "s3://my-bucket/imagenet/",
                 "/runtime-mnt/thin/default/imagenet/thin-fuse", "--metadata-ttl", "300",
                 "--allow-other", "--region", "us-east-1", "--force-path-style"],
        "env": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]}
    # Two mounts in one Dataset, and a missing secret file: one line each.
    for bad, line in [
        (dict(cfg, mounts=cfg["mounts"] * 2),
         "fluid-feedfs: the Dataset has 2 mounts; feedfs serves one per ThinRuntime"),
        (dict(cfg, mounts=[dict(cfg["mounts"][0], options={
            "access-key-id": str(tmp_path / "secrets" / "s3-keys" / "ak")})]),
         "fluid-feedfs: encryptOption access-key-id: cannot read %s: "
         "No such file or directory" % (tmp_path / "secrets" / "s3-keys" / "ak")),
    ]:
        (tmp_path / "config.json").write_text(json.dumps(bad))
        cp = subprocess.run([sys.executable, FLUID, "--print"], capture_output=True, text=True,
                            env=env, timeout=30)
        assert cp.returncode == 1 and cp.stderr.splitlines() == [line]


@pytest.mark.parametrize("storage", ["configmap", "secret"])
def test_fluid_secrets_by_path_or_inline(tmp_path, storage):
    """Fluid hands encryptOptions over as the path of the mounted Secret's
    file (THIN_FUSE_CONFIG_STORAGE=configmap, its default) or inline, the
    value itself (=secret): feedfs gets the same variables either way, and a
    value is never printed."""
    values = {"access-key-id": "AKIAFLUIDTEST", "secret-access-key": "/sk+starts/with=slash",
              "session-token": "token-fluid-test"}
    sdir = tmp_path / "secrets" / "s3-keys"
    sdir.mkdir(parents=True)
    opts = {"region": "us-east-1"}
    for k, v in values.items():
        if storage == "configmap":
            (sdir / k).write_text(v + "\n")
            opts[k] = str(sdir / k)
        else:
            opts[k] = v
    cfg = {"targetPath": "/runtime-mnt/thin/default/d/thin-fuse",
           "mounts": [{"name": "d", "mountPoint": "s3://b/p/", "options": opts}]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    # FEEDFS_NODE stands in for feedfs-node: it writes what it was given
    out = tmp_path / "out"
    node = tmp_path / "node.sh"
    node.write_text('#!/bin/sh\nprintf "%%s\\n" "$*" "$AWS_ACCESS_KEY_ID" '
                    '"$AWS_SECRET_ACCESS_KEY" "$AWS_SESSION_TOKEN" >%s\n' % out)
    node.chmod(0o755)
    env = dict(os.environ, FLUID_CONFIG=str(tmp_path / "config.json"),
               FLUID_SECRETS_DIR=str(tmp_path / "secrets"), FEEDFS_NODE=str(node))
    cp = subprocess.run([sys.executable, FLUID], capture_output=True, text=True, env=env,
                        timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert out.read_text().splitlines() == [
        "s3://b/p/ /runtime-mnt/thin/default/d/thin-fuse --region us-east-1",
        "AKIAFLUIDTEST", "/sk+starts/with=slash", "token-fluid-test"]
    cp = subprocess.run([sys.executable, FLUID, "--print"], capture_output=True, text=True,
                        env=env, timeout=30)
    for v in values.values():
        assert v not in cp.stdout + cp.stderr
    # an empty inline value is refused, naming the option only
    cfg["mounts"][0]["options"]["secret-access-key"] = ""
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    cp = subprocess.run([sys.executable, FLUID, "--print"], capture_output=True, text=True,
                        env=env, timeout=30)
    assert cp.returncode == 1
    assert cp.stderr.splitlines() == ["fluid-feedfs: encryptOption secret-access-key is empty"]


def run_node(args, env_extra, timeout=30):
    env = dict(os.environ)
    env.update(env_extra)
    return subprocess.run(["sh", NODE] + args, capture_output=True, text=True, env=env,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("env,line", [
    ({"FEEDFS_DEV_FUSE": "/nonexistent/fuse"},
     "feedfs-node: /nonexistent/fuse is missing: the container must be privileged or mount "
     "/dev/fuse (hostPath, type CharDevice)"),
    ({"FEEDFS_CREDENTIALS_SECRET": "s3-keys", "AWS_ACCESS_KEY_ID": "",
      "ALIBABA_CLOUD_ACCESS_KEY_ID": ""},
     "feedfs-node: credentials: Secret 's3-keys' is missing or has no AWS_ACCESS_KEY_ID "
     "(kubectl get secret s3-keys -o yaml)"),
    ({"FEEDFS_CACHE_DIR": "/proc/feedfs-cache", "FEEDFS_CACHE_HOSTPATH": "/mnt/nvme/c/x"},
     "feedfs-node: cache dir /proc/feedfs-cache (node path /mnt/nvme/c/x) is not writable: "
     "check cache.hostPath and the node's disk"),
])
def test_node_entrypoint_bad_input(tmp_path, env, line):
    env = dict(env, FEEDFS="/bin/false")
    cp = run_node(["s3://b", str(tmp_path / "m")], env)
    assert cp.returncode == 1
    assert cp.stderr.splitlines() == [line]


def test_ack_entrypoint_bad_input(tmp_path):
    env = dict(os.environ, FEEDFS_NODE="/bin/echo", FEEDFS_SOURCE="oss://b/p",
               FEEDFS_TARGET=str(tmp_path))
    env.pop("FEEDFS_REGION", None)
    cp = subprocess.run(["sh", ACK], capture_output=True, text=True, env=env, timeout=30)
    assert cp.returncode == 1
    assert cp.stderr.splitlines() == [
        "ack-feedfs: FEEDFS_REGION is not set: oss:// needs the bucket's region (cn-hangzhou, ...)"]
    env.update(FEEDFS_REGION="cn-hangzhou", FEEDFS_INTERNAL="true",
               FEEDFS_OPTIONS="--allow-other --metadata-ttl 30")
    cp = subprocess.run(["sh", ACK], capture_output=True, text=True, env=env, timeout=30)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.split() == ["oss://b/p", str(tmp_path), "--region", "cn-hangzhou",
                                 "--internal", "--allow-other", "--metadata-ttl", "30"]


# ---------------------------------------------------------------- the pod's view

@pytest.fixture
def shared_root(tmp_path):
    """A directory made a shared mount, like the kubelet's hostPath with
    Bidirectional propagation on the node: mounts under it propagate."""
    root = tmp_path / "node-mnt"
    root.mkdir()
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    subprocess.run(["mount", "--make-shared", str(root)], check=True)
    yield root
    subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def data(s3, new_bucket):
    b = new_bucket("pod")
    files = {"train/%03d.bin" % i: 256 * 1024 + i for i in range(6)}
    for k, n in files.items():
        s3.put_object(Bucket=b, Key=k, Body=content_for(k, n))
    return b, {k: sha256(content_for(k, n)) for k, n in files.items()}


def pod_read(pid, path):
    """sha256 of path as the pod (mount namespace of pid) reads it, or the
    error text."""
    cp = subprocess.run(["nsenter", "-t", str(pid), "-m", "sha256sum", path], capture_output=True,
                        text=True, timeout=30)
    return cp.stdout.split()[0] if cp.returncode == 0 else cp.stderr.strip()


def node_mount(feedfs_bin, bucket, mnt, log, s3server):
    """feedfs-node SOURCE MNT as the DaemonSet's container runs it (foreground)."""
    env = s3rver_env({"FEEDFS": feedfs_bin})
    p = subprocess.Popen(["sh", NODE, "s3://%s" % bucket, str(mnt), "--endpoint-url",
                          s3server.url, "--force-path-style", "--region", REGION,
                          "--log-file", log], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        assert p.poll() is None, "feedfs-node exited %s: %s" % (p.returncode, p.stderr.read())
        assert time.monotonic() < deadline, "not mounted after 60 s"
        # mounted and answering: a dead mount left there is mounted too, but
        # its statfs fails with ENOTCONN
        if is_mounted(str(mnt)):
            try:
                os.statvfs(str(mnt))
                return p
            except OSError:
                pass
        time.sleep(0.1)


def test_pod_view_survives_replaced_daemon(shared_root, feedfs_bin, s3server, data, tmp_path):
    """The pod is a mount namespace made with --propagation slave (what
    HostToContainer gives a container) holding the node's mount root. The
    node's feedfs container is killed with SIGKILL and started again, as the
    kubelet restarts it: the pod reads the same bytes through the new mount
    without being restarted. Before that, only the serving process is killed
    (as the OOM killer would): the keeper's successor takes the mount over
    and the pod reads on with no error at all."""
    bucket, want = data
    mnt = shared_root / "datasets"
    node = node_mount(feedfs_bin, bucket, mnt, str(tmp_path / "node1.log"), s3server)
    pod = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", "sleep", "300"])
    procs = [node, pod]
    try:
        time.sleep(0.2)      # unshare has made the namespace before it execs sleep
        k = sorted(want)[0]
        assert pod_read(pod.pid, str(mnt / k)) == want[k]
        pids = sorted(pids_of_mount(feedfs_bin, str(mnt)))
        assert len(pids) == 2           # the keeper (the container's process) and its server
        # The server dies inside the container (the OOM killer, a crash): the
        # keeper's successor takes over and the pod never sees a dead mount.
        os.kill(pids[1], signal.SIGKILL)
        for key, digest in sorted(want.items()):
            assert pod_read(pod.pid, str(mnt / key)) == digest, key
        # The whole container is killed (its cgroup: every process in it).
        killed = pids_of_mount(feedfs_bin, str(mnt))
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        node.wait(30)
        deadline = time.monotonic() + 30
        while any(pid_alive(pid) for pid in killed):
            assert time.monotonic() < deadline, "killed processes still alive"
            time.sleep(0.05)
        # The dead mount: an error, never a hang. The kernel ends the connection
        # when the last /dev/fuse file is released, which may come a moment
        # after the processes are gone (a file still in flight between keeper
        # and server is released with its socket); a request that came before
        # that ends ECONNABORTED, every one after it ENOTCONN.
        while True:
            err = pod_read(pod.pid, str(mnt / k))
            if "not connected" in err:
                break
            assert "connection abort" in err, err
            assert time.monotonic() < deadline, "the dead mount never said ENOTCONN"
            time.sleep(0.1)
        node = node_mount(feedfs_bin, bucket, mnt, str(tmp_path / "node2.log"), s3server)
        procs.append(node)
        for key, digest in sorted(want.items()):
            assert pod_read(pod.pid, str(mnt / key)) == digest, key
        # The pod's namespace has exactly one live mount there: the new one.
        cp = subprocess.run(["nsenter", "-t", str(pod.pid), "-m", "findmnt", "-n", "-o",
                             "FSTYPE", str(mnt)], capture_output=True, text=True, timeout=30)
        assert cp.stdout.split() == ["fuse.feedfs"]
        node.send_signal(signal.SIGTERM)          # the kubelet stopping the container
        assert node.wait(30) == 0
        assert not is_mounted(str(mnt))
        assert "No such file" in pod_read(pod.pid, str(mnt / k))    # unmounted there too
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
