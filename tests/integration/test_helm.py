"""Kubernetes (issue 18 part 6, issue 37 part 2): the helm/feedfs chart rendered
by Go's own text/template with sprig and Helm's additions (build/helmtmpl,
tests/helm/helmtmpl: no helm binary here) and every object checked against the
Kubernetes object schemas of python3-kubernetes, the ServiceMonitor and Fluid
objects against the fields of their CRDs; every example values file; the
example pod; the image's entrypoints (feedfs-node, fluid-feedfs, ack-feedfs)
with one line per bad input; and the pod's HostToContainer view simulated with
a mount namespace.

What is NOT tested here: a real cluster, helm itself (its Go glue is ours:
tests/helm/helmtmpl), the image (tests/integration/test_image.py, make
test-deploy), Fluid's and ACK's controllers."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import content_for, is_mounted, sha256
from mounter import ROOT, REGION, pid_alive, pids_of_mount, s3rver_env

CHART = os.path.join(ROOT, "helm", "feedfs")
HELMTMPL = os.path.join(ROOT, "build", "helmtmpl")
NODE = os.path.join(ROOT, "helm", "image", "feedfs-node")
FLUID = os.path.join(ROOT, "helm", "fluid", "fluid-feedfs.py")
ACK = os.path.join(ROOT, "helm", "ack", "ack-feedfs")
EXAMPLE_VALUES = sorted(glob.glob(os.path.join(ROOT, "helm", "examples", "values-*.yaml")))
MODELS = {("apps/v1", "DaemonSet"): "V1DaemonSet", ("v1", "ServiceAccount"): "V1ServiceAccount",
          ("v1", "Service"): "V1Service", ("v1", "Pod"): "V1Pod", ("v1", "Secret"): "V1Secret",
          ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
          ("v1", "PersistentVolume"): "V1PersistentVolume",
          ("storage.k8s.io/v1", "CSIDriver"): "V1CSIDriver"}


class TemplateError(Exception):
    pass


@pytest.fixture(scope="session")
def helmtmpl():
    """build/helmtmpl, (re)built by make: it is up to date in a second."""
    cp = subprocess.run(["make", "-s", "-C", ROOT, "build/helmtmpl"], capture_output=True,
                        text=True, timeout=600)
    if cp.returncode != 0 and "go: not found" in cp.stderr + cp.stdout:
        pytest.skip("golang-go is not installed (tests/deps.sh): the chart is not rendered")
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return HELMTMPL


def render_chart(chart, values=None, release="feedfs", namespace="default", files=()):
    """{template file: text} as `helm template` renders it, or TemplateError
    with helmtmpl's one line (Helm's message)."""
    argv = [HELMTMPL, chart, "--json", "--name", release, "--namespace", namespace]
    for f in files:
        argv += ["-f", f]
    if values is not None:
        argv += ["--set-json", json.dumps(values)]
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        lines = cp.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), cp.stderr
        raise TemplateError(lines[0][len("Error: "):])
    return json.loads(cp.stdout)


def tmpl_eval(src, data=None):
    cp = subprocess.run([HELMTMPL, "--eval", src, "--data", json.dumps(data or {})],
                        capture_output=True, text=True, timeout=60)
    if cp.returncode != 0:
        raise TemplateError(cp.stderr.strip()[len("Error: "):])
    return cp.stdout


@pytest.fixture(scope="module")
def k8s():
    kc = pytest.importorskip("kubernetes.client",
                             reason="python3-kubernetes is not installed: schemas not checked")
    return kc.ApiClient()


def round_trip(api, model, doc, what):
    """Deserialize doc into its python3-kubernetes model (which rejects a
    missing required field or a wrong type) and serialize it back: a field
    the schema does not have is dropped on the way, so any difference is a
    typo or a misplaced key."""
    class Resp:
        data = json.dumps(doc)
    obj = api.deserialize(Resp(), model)
    back = api.sanitize_for_serialization(obj)
    assert back == doc, "%s does not round-trip through %s:\n%s" % (
        what, model, json.dumps({"rendered": doc, "schema": back}, indent=1, sort_keys=True))
    return obj


# The custom resources python3-kubernetes has no model for: the fields of
# their CRDs' openAPIV3Schema (prometheus-operator's monitoring.coreos.com_
# servicemonitors.yaml, Fluid's data.fluid.io_{datasets,thinruntimes,
# thinruntimeprofiles}.yaml), down to where our objects go. A dict is an
# object with exactly those fields (a name ending in "!" is required); [s] is
# a list of s; "str", "int", "bool", "duration" (prometheus' pattern),
# "strmap" (string to string); ("model", M) a python3-kubernetes model;
# "any" is not looked into.
LABEL_SELECTOR = {"matchLabels": "strmap",
                  "matchExpressions": [{"key!": "str", "operator!": "str", "values": ["str"]}]}
SM_ENDPOINT = {
    "port": "str", "targetPort": "any", "path": "str", "scheme": "str", "params": "any",
    "interval": "duration", "scrapeTimeout": "duration", "tlsConfig": "any",
    "bearerTokenFile": "str", "bearerTokenSecret": "any", "authorization": "any",
    "honorLabels": "bool", "honorTimestamps": "bool", "trackTimestampsStaleness": "bool",
    "basicAuth": "any", "oauth2": "any", "metricRelabelings": ["any"], "relabelings": ["any"],
    "proxyUrl": "str", "followRedirects": "bool", "enableHttp2": "bool", "filterRunning": "bool"}
ENCRYPT_OPTION = {"name!": "str", "valueFrom!": {"secretKeyRef!": {"name!": "str", "key!": "str"}}}
THIN_FUSE = {
    "image": "str", "imageTag": "str", "imagePullPolicy": "str", "command": ["str"],
    "args": ["str"], "env": [("model", "V1EnvVar")], "resources": ("model", "V1ResourceRequirements"),
    "livenessProbe": ("model", "V1Probe"), "readinessProbe": ("model", "V1Probe"),
    "ports": [("model", "V1ContainerPort")], "networkMode": "str",
    "volumeMounts": [("model", "V1VolumeMount")], "nodeSelector": "strmap", "cleanPolicy": "str",
    "lifecycle": ("model", "V1Lifecycle"), "options": "strmap"}
CRD_SPECS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): {
        "jobLabel": "str", "targetLabels": ["str"], "podTargetLabels": ["str"],
        "endpoints": [SM_ENDPOINT], "selector!": LABEL_SELECTOR,
        "namespaceSelector": {"any": "bool", "matchNames": ["str"]}, "sampleLimit": "int",
        "targetLimit": "int", "labelLimit": "int", "labelNameLengthLimit": "int",
        "labelValueLengthLimit": "int", "attachMetadata": {"node": "bool"},
        "keepDroppedTargets": "int", "scrapeProtocols": ["str"], "bodySizeLimit": "str"},
    ("data.fluid.io/v1alpha1", "Dataset"): {
        "mounts": [{"mountPoint!": "str", "name": "str", "path": "str", "options": "strmap",
                    "readOnly": "bool", "shared": "bool", "encryptOptions": [ENCRYPT_OPTION]}],
        "accessModes": ["str"], "owner": "any", "nodeAffinity": "any", "tolerations": ["any"],
        "runtimes": ["any"], "placement": "str", "dataRestoreLocation": "any",
        "sharedOptions": "strmap", "sharedEncryptOptions": [ENCRYPT_OPTION]},
    ("data.fluid.io/v1alpha1", "ThinRuntime"): {
        "profileName": "str", "fuse": THIN_FUSE, "worker": "any", "tieredstore": "any",
        "volumes": [("model", "V1Volume")], "replicas": "int", "runtimeManagement": "any",
        "imagePullSecrets": ["any"], "management": "any"},
    ("data.fluid.io/v1alpha1", "ThinRuntimeProfile"): {
        "fileSystemType!": "str", "fuse": THIN_FUSE, "worker": "any",
        "volumes": [("model", "V1Volume")], "nodePublishSecretPolicy": "str"},
}
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                      r"(([0-9]+)s)?(([0-9]+)ms)?)$")


def check_crd(api, schema, v, where):
    if schema == "any":
        return
    if isinstance(schema, tuple):
        round_trip(api, schema[1], v, where)
    elif isinstance(schema, list):
        assert isinstance(v, list), "%s: want a list, got %r" % (where, v)
        for i, x in enumerate(v):
            check_crd(api, schema[0], x, "%s[%d]" % (where, i))
    elif isinstance(schema, dict):
        assert isinstance(v, dict), "%s: want an object, got %r" % (where, v)
        fields = {k.rstrip("!"): s for k, s in schema.items()}
        for k in schema:
            if k.endswith("!"):
                assert k[:-1] in v, "%s: required field %s is missing" % (where, k[:-1])
        for k, x in v.items():
            assert k in fields, "%s: unknown field %r (the CRD has %s)" % (where, k, sorted(fields))
            check_crd(api, fields[k], x, "%s.%s" % (where, k))
    elif schema == "strmap":
        assert isinstance(v, dict) and all(isinstance(x, str) for x in v.values()), \
            "%s: want a map of strings, got %r" % (where, v)
    elif schema == "duration":
        assert isinstance(v, str) and DURATION.match(v), "%s: not a duration: %r" % (where, v)
    else:
        want = {"str": str, "int": int, "bool": bool}[schema]
        assert isinstance(v, want) and not (want is int and isinstance(v, bool)), \
            "%s: want %s, got %r" % (where, schema, v)


def validate(api, doc):
    """Every object: its model's round trip, or its CRD's fields."""
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SPECS:
        assert set(doc) <= {"apiVersion", "kind", "metadata", "spec"}, sorted(doc)
        round_trip(api, "V1ObjectMeta", doc["metadata"], doc["kind"] + ".metadata")
        check_crd(api, CRD_SPECS[key], doc["spec"], doc["kind"] + ".spec")
        return doc
    assert key in MODELS, "no schema for %s %s" % key
    return round_trip(api, MODELS[key], doc, doc["kind"])


def docs_of(rendered):
    out = []
    for name, text in sorted(rendered.items()):
        if name.endswith(".txt"):
            continue
        out += [d for d in yaml.safe_load_all(text) if d]
    return out


def by_kind(docs):
    out = {}
    for d in docs:
        out.setdefault(d["kind"], []).append(d)
    return out


def daemonsets(docs):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}


# ---------------------------------------------------------------- Helm's glue in helmtmpl

@pytest.mark.parametrize("src,data,out", [
    # toYaml: sigs.k8s.io/yaml (keys sorted, no trailing newline), as Helm
    ("{{ toYaml .m }}", {"m": {"b": [1, "x"], "a": {"c": True}}}, "a:\n  c: true\nb:\n- 1\n- x"),
    ("{{ .m | toYaml | nindent 2 }}", {"m": {"k": "v"}}, "\n  k: v"),
    # missingkey=zero, and "<no value>" removed, as Helm renders a missing key
    ("[{{ .missing }}]", {}, "[]"),
    # required lets 0 and false through (only nil and "" fail)
    ("{{ required \"r\" .z }} {{ required \"r\" .f }}", {"z": 0, "f": False}, "0 false"),
    ("{{ define \"t\" }}<{{ . }}>{{ end }}{{ include \"t\" 5 | upper }}", {}, "<5>"),
    ("{{ tpl \"{{ .x }}-y\" . }}", {"x": "v"}, "v-y"),
    ("{{ toJson .m }}", {"m": {"b": 1, "a": "x"}}, '{"a":"x","b":1}'),
    ("{{ (fromYaml \"a: [1, 2]\").a | len }}", {}, "2"),
    ("{{ lookup \"v1\" \"Secret\" \"ns\" \"n\" | len }}", {}, "0"),
])
def test_helm_functions(helmtmpl, src, data, out):
    assert tmpl_eval(src, data) == out


def test_helm_errors(helmtmpl):
    with pytest.raises(TemplateError, match=r"execution error at \(eval:1:3\): need x$"):
        tmpl_eval('{{ required "need x" .x }}')
    with pytest.raises(TemplateError, match=r"execution error at \(eval:1:3\): no$"):
        tmpl_eval('{{ fail "no" }}')
    with pytest.raises(TemplateError, match=r"nil pointer evaluating interface \{\}\.b"):
        tmpl_eval("{{ .a.b }}")
    with pytest.raises(TemplateError, match=r"function \"env\" not defined"):
        tmpl_eval('{{ env "HOME" }}')         # Helm removes env and expandenv


# ---------------------------------------------------------------- the chart

PROBE = ["/usr/local/bin/feedfs-node", "--probe"]


def test_chart_default_values(helmtmpl, k8s):
    rendered = render_chart(CHART, release="feedfs", namespace="kube-system")
    docs = docs_of(rendered)
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "Service", "ServiceAccount"]
    for d in docs:
        validate(k8s, d)
    (ds,) = by_kind(docs)["DaemonSet"]
    assert ds["metadata"]["name"] == "feedfs-datasets"
    spec = ds["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-node-critical"
    assert spec["tolerations"] == [{"operator": "Exists"}]
    (c,) = spec["containers"]
    assert c["securityContext"]["privileged"] is True
    assert c["args"][:2] == ["s3://my-bucket/datasets/", "/mnt/feedfs/datasets"]
    assert "--max-memory" not in c["args"]          # the budget follows the memory limit
    assert c["resources"]["limits"]["memory"] == "2Gi"
    assert c["startupProbe"] == {"exec": {"command": PROBE + ["/mnt/feedfs/datasets"]},
                                 "periodSeconds": 2, "failureThreshold": 45, "timeoutSeconds": 5}
    assert c["readinessProbe"] == {"exec": {"command": PROBE + ["/mnt/feedfs/datasets"]},
                                   "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 5}
    assert "livenessProbe" not in c
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
    # what the API server would refuse: a selector that does not select the template
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert labels["feedfs.io/mount"] == "datasets"
    notes = rendered["templates/NOTES.txt"]
    assert "/mnt/feedfs/datasets  <-  s3://my-bucket/datasets/" in notes
    assert "kube-system" in notes


def test_chart_two_mounts_secret_irsa(helmtmpl, k8s):
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
        validate(k8s, d)
    dss = daemonsets(docs)
    assert sorted(dss) == ["data-feedfs-imagenet", "data-feedfs-minio"]
    (c1,) = dss["data-feedfs-imagenet"]["spec"]["template"]["spec"]["containers"]
    (c2,) = dss["data-feedfs-minio"]["spec"]["template"]["spec"]["containers"]
    assert c1["args"] == ["s3://b1/imagenet/", "/mnt/feedfs/imagenet", "--log-level", "info",
                          "--allow-other", "--cache-size", "100G", "--metrics-addr",
                          "0.0.0.0:9464", "--region", "us-west-2"]
    assert c2["args"] == ["s3://b2", "/mnt/feedfs/minio", "--log-level", "info", "--allow-other",
                          "--endpoint-url", "http://minio:9000", "--metrics-addr",
                          "0.0.0.0:9464", "--force-path-style"]
    assert c2["resources"] == {"limits": {"memory": "512Mi"}}
    assert [v["name"] for v in c2["volumeMounts"]] == ["mount-root", "dev-fuse"]
    assert [v["name"] for v in dss["data-feedfs-minio"]["spec"]["template"]["spec"]["volumes"]] \
        == ["mount-root", "dev-fuse"]
    for c in (c1, c2):
        assert c["envFrom"] == [{"secretRef": {"name": "s3-keys", "optional": True}}]
        assert {"name": "FEEDFS_CREDENTIALS_SECRET", "value": "s3-keys"} in c["env"]
        assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    # the two DaemonSets select disjoint pods
    sel = [set(d["spec"]["selector"]["matchLabels"].items()) for d in dss.values()]
    assert not sel[0] <= sel[1] and not sel[1] <= sel[0]
    (sa,) = kinds["ServiceAccount"]
    assert sa["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/feedfs"}
    (svc,) = kinds["Service"]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9464, "targetPort": "metrics",
                                     "protocol": "TCP"}]
    # the Service and the ServiceMonitor select every mount's pods
    for d in dss.values():
        tl = d["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= tl.items()
    (sm,) = kinds["ServiceMonitor"]
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"]
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]


def test_chart_adding_a_dataset_leaves_the_others(helmtmpl):
    """The pods of a DaemonSet are re-created when its pod template changes:
    adding a mount, or removing another one, must leave every other mount's
    DaemonSet exactly as it was (while a change of a shared value reaches all)."""
    a = {"name": "a", "source": "s3://a", "cache": True}
    b = {"name": "b", "source": "s3://b", "options": ["--region", "eu-west-1"]}
    c = {"name": "c", "source": "s3://c"}
    one = daemonsets(docs_of(render_chart(CHART, {"mounts": [a, c]})))
    three = daemonsets(docs_of(render_chart(CHART, {"mounts": [b, a, c]})))
    two = daemonsets(docs_of(render_chart(CHART, {"mounts": [b, c]})))
    assert sorted(three) == ["feedfs-a", "feedfs-b", "feedfs-c"]
    assert three["feedfs-a"] == one["feedfs-a"] and three["feedfs-c"] == one["feedfs-c"]
    assert two["feedfs-b"] == three["feedfs-b"] and two["feedfs-c"] == three["feedfs-c"]
    retag = daemonsets(docs_of(render_chart(CHART, {"mounts": [a, c], "image": {"tag": "0.2"}})))
    for n in ("feedfs-a", "feedfs-c"):
        assert retag[n]["spec"]["template"] != one[n]["spec"]["template"]


def test_chart_without_cache_or_metrics(helmtmpl, k8s):
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
    ({"mounts": []}, "values: mounts must list at least one mount"),
    ({"mounts": [{"source": "s3://x"}]}, "values: every mount needs a name"),
    ({"mounts": [{"name": "x"}]}, "values: every mount needs a source"),
    ({"mounts": [{"name": "Data_1", "source": "s3://x"}]},
     "values: mount name \"Data_1\": use lower-case letters, digits and '-' (it names a "
     "container and a DaemonSet)"),
    ({"mounts": [{"name": "x", "source": "s3://x"}, {"name": "x", "source": "s3://y"}]},
     "values: mount name \"x\" is used twice"),
    ({"mounts": [{"name": "n" * 60, "source": "s3://x"}]},
     "values: the DaemonSet of mount \"%s\" would be named feedfs-%s, over 63 characters: "
     "shorten the release or the mount name" % ("n" * 60, "n" * 60)),
])
def test_chart_refuses_bad_values(helmtmpl, values, msg):
    with pytest.raises(TemplateError) as e:
        render_chart(CHART, values)
    assert re.fullmatch(r"execution error at \(feedfs/templates/daemonset\.yaml:\d+:\d+\): (.*)",
                        str(e.value)).group(1) == msg


@pytest.mark.parametrize("path", EXAMPLE_VALUES, ids=os.path.basename)
def test_example_values(helmtmpl, k8s, path):
    """Every helm/examples/values-*.yaml renders, and every object validates."""
    docs = docs_of(render_chart(CHART, release="feedfs", namespace="kube-system", files=[path]))
    with open(path) as f:
        vals = yaml.safe_load(f)
    assert sorted(daemonsets(docs)) == sorted("feedfs-" + m["name"] for m in vals["mounts"])
    for d in docs:
        validate(k8s, d)


def test_example_values_exist():
    assert len(EXAMPLE_VALUES) >= 2, EXAMPLE_VALUES


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
    assert sorted(dss) == ["data-feedfs-csi-node", "data-feedfs-datasets"]
    ds = dss["data-feedfs-csi-node"]
    # its pods are not the mounts DaemonSet's, nor the metrics Service's
    sel = ds["spec"]["selector"]["matchLabels"]
    assert sel != dss["data-feedfs-datasets"]["spec"]["selector"]["matchLabels"]
    (svc,) = [d for d in docs if d["kind"] == "Service"]
    assert not all(ds["spec"]["template"]["metadata"]["labels"].get(k) == v
                   for k, v in svc["spec"]["selector"].items())
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


def test_fluid_objects_validate(k8s):
    """helm/fluid's objects against their models and CRDs' fields."""
    docs = []
    for f in ("thinruntimeprofile.yaml", "dataset.yaml"):
        with open(os.path.join(ROOT, "helm", "fluid", f)) as fh:
            docs += [d for d in yaml.safe_load_all(fh) if d]
    assert sorted(d["kind"] for d in docs) == ["Dataset", "Secret", "ThinRuntime",
                                               "ThinRuntimeProfile"]
    for d in docs:
        validate(k8s, d)


def test_crd_check_can_fail(k8s):
    """The CRD field check refuses what the API server would prune or refuse."""
    sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
          "metadata": {"name": "x"},
          "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [{"port": "m"}]}}
    validate(k8s, sm)
    for bad, what in [
        ({"endpoints": [{"port": "m", "intervall": "30s"}]}, "unknown field 'intervall'"),
        ({"endpoints": [{"port": "m", "interval": "30 s"}]}, "not a duration"),
        ({"selector": None}, "required field selector"),
        ({"namespaceSelector": {"matchNames": "ns"}}, "want a list"),
    ]:
        spec = dict(sm["spec"], **bad)
        spec = {k: v for k, v in spec.items() if v is not None}
        with pytest.raises(AssertionError, match=what):
            validate(k8s, dict(sm, spec=spec))


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


# The pod's mount namespace keeps only the FUSE mounts under the node's mount
# root. unshare copies every mount of the host, those of tests running beside
# this one included; a copy that is not a slave of its original keeps that
# file system alive after its test unmounts it, so the other test's daemon
# never saw the unmount (it ran on, "still running 30s after unmount").
POD_INIT = r"""
import ctypes, os, sys
root = sys.argv[1].rstrip("/") + "/"
libc = ctypes.CDLL(None, use_errno=True)
for line in reversed(open("/proc/self/mountinfo").read().splitlines()):
    f = line.split()
    point = f[4].encode().decode("unicode_escape")
    fstype = f[f.index("-") + 1]
    if fstype.startswith("fuse") and not (point + "/").startswith(root):
        libc.umount2(point.encode(), 2)         # MNT_DETACH
print("ready", flush=True)
os.execvp("sleep", ["sleep", "300"])
"""


def pod_namespace(shared_root):
    """A process in a new mount namespace with --propagation slave (what
    HostToContainer gives a container), holding no FUSE mount of the host
    but those under shared_root; returned once the namespace is ready."""
    pod = subprocess.Popen(["unshare", "--mount", "--propagation", "slave", sys.executable,
                            "-c", POD_INIT, str(shared_root)], stdout=subprocess.PIPE,
                           text=True)
    assert pod.stdout.readline() == "ready\n"
    return pod


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


def probe(mnt):
    """`feedfs-node --probe MNT` as the DaemonSet's startup and readiness probes run it."""
    cp = subprocess.run(["sh", NODE, "--probe", str(mnt)], capture_output=True, text=True,
                        timeout=30)
    return cp.returncode, cp.stderr.strip()


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
    mnt.mkdir()
    assert probe(mnt) == (1, "feedfs-node: probe: %s is not a feedfs mount" % mnt)
    node = node_mount(feedfs_bin, bucket, mnt, str(tmp_path / "node1.log"), s3server)
    pod = pod_namespace(shared_root)
    procs = [node, pod]
    try:
        k = sorted(want)[0]
        assert pod_read(pod.pid, str(mnt / k)) == want[k]
        assert probe(mnt) == (0, "")
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
        assert probe(mnt) == (1, "feedfs-node: probe: %s does not answer (statfs failed)" % mnt)
        node = node_mount(feedfs_bin, bucket, mnt, str(tmp_path / "node2.log"), s3server)
        procs.append(node)
        for key, digest in sorted(want.items()):
            assert pod_read(pod.pid, str(mnt / key)) == digest, key
        # The pod's namespace has exactly one live mount there: the new one.
        cp = subprocess.run(["nsenter", "-t", str(pod.pid), "-m", "findmnt", "-n", "-o",
                             "FSTYPE", str(mnt)], capture_output=True, text=True, timeout=30)
        assert cp.stdout.split() == ["fuse.feedfs"]
        assert probe(mnt) == (0, "")
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
