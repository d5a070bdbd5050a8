"""Every credential source proven end to end: a mount that reads bytes, with every
other source disabled and every network source pointed at tests/creds_servers.py
on 127.0.0.1. Against s3rver (accepts any secret) and Ceph RGW (checks SigV4, so
the stand-ins hand out the RGW user's keys). Also: refresh of short-lived
credentials under continuous reads, broken sources fail the mount with one clear
line, and no secret or session token ever reaches the log (debug level)."""

import os
import secrets
import threading
import time

import pytest

from conftest import content_for
from servers import ForwardProxy

PROVIDERS = ["env", "profile", "profile-process", "web-identity", "oidc-rrsa", "container",
             "imds", "ecs-ram-role"]
KEY = "dir/data.bin"
SIZE = 300_000


def provider_env(name, cs, tmp, access, secret, tokens=None):
    """Environment that enables only `name` (cs: the stand-in server or None)."""
    tokens = tokens or {}
    if name == "env":
        return {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}
    if name in ("profile", "profile-process"):
        cred = os.path.join(tmp, "aws-credentials")
        conf = os.path.join(tmp, "aws-config")
        with open(cred, "w") as f:
            if name == "profile":
                f.write("[dev]\naws_access_key_id = %s\naws_secret_access_key = %s\n" % (access, secret))
            else:
                f.write("[other]\naws_access_key_id = X\naws_secret_access_key = Y\n")
        os.chmod(cred, 0o600)
        with open(conf, "w") as f:
            f.write("[profile dev]\nregion = us-east-1\n")
            if name == "profile-process":
                f.write("credential_process = /bin/echo '{\"Version\": 1, \"AccessKeyId\": \"%s\", "
                        "\"SecretAccessKey\": \"%s\"}'\n" % (access, secret))
        return {"AWS_SHARED_CREDENTIALS_FILE": cred, "AWS_CONFIG_FILE": conf, "AWS_PROFILE": "dev"}
    if name == "web-identity":
        tf = os.path.join(tmp, "web-token")
        with open(tf, "w") as f:
            f.write(tokens.get("web", "web-identity-token-ok"))
        return {"AWS_WEB_IDENTITY_TOKEN_FILE": tf, "AWS_ROLE_ARN": "arn:aws:iam::000000000000:role/feedfs",
                "AWS_ENDPOINT_URL_STS": cs.url + "/sts"}
    if name == "oidc-rrsa":
        tf = os.path.join(tmp, "oidc-token")
        with open(tf, "w") as f:
            f.write(tokens.get("oidc", "oidc-token-ok"))
        return {"ALIBABA_CLOUD_ROLE_ARN": "acs:ram::1000:role/feedfs",
                "ALIBABA_CLOUD_OIDC_PROVIDER_ARN": "acs:ram::1000:oidc-provider/ack",
                "ALIBABA_CLOUD_OIDC_TOKEN_FILE": tf,
                "ALIBABA_CLOUD_STS_ENDPOINT": cs.url + "/aliyun-sts"}
    if name == "container":
        return {"AWS_CONTAINER_CREDENTIALS_FULL_URI": cs.url + "/container/creds",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN": tokens.get("container", "container-token-ok")}
    if name == "imds":
        return {"AWS_EC2_METADATA_DISABLED": None,
                "AWS_EC2_METADATA_SERVICE_ENDPOINT": cs.url + "/imds"}
    if name == "ecs-ram-role":
        return {"ALIBABA_CLOUD_ECS_METADATA_DISABLED": None,
                "ALIBABA_CLOUD_ECS_METADATA_ENDPOINT": cs.url + "/ecs"}
    raise ValueError(name)


def source_name(p):
    return "profile" if p.startswith("profile") else p


class Target:
    def __init__(self, url, access, secret, bucket):
        self.url, self.access, self.secret, self.bucket = url, access, secret, bucket


@pytest.fixture(params=["s3rver", "rgw"])
def target(request, s3server, s3):
    data = content_for(KEY, SIZE)
    if request.param == "s3rver":
        name = "creds-%d" % os.getpid()
        try:
            s3.create_bucket(Bucket=name)
        except Exception:  # noqa: BLE001 - exists from an earlier test
            pass
        s3.put_object(Bucket=name, Key=KEY, Body=data)
        # s3rver takes any secret: hand out a unique one so the log check means something
        return Target(s3server.url, "S3RVER", "feedfs-secret-" + secrets.token_hex(8), name)
    rgw = request.getfixturevalue("rgw")
    c = request.getfixturevalue("rgw_s3")
    name = "feedfs-creds"
    try:
        c.create_bucket(Bucket=name)
    except Exception:  # noqa: BLE001
        pass
    c.put_object(Bucket=name, Key=KEY, Body=data)
    return Target(rgw.url, rgw.access, rgw.secret, name)


def assert_no_secrets(log, secret, extra=()):
    text = open(log, errors="replace").read()
    assert "feedfs[debug]" in text, "the log was not written at debug level"
    assert secret not in text, "the secret key is in the log"
    assert "feedfs-session-" not in text, "a session token is in the log"
    for x in extra:
        assert x not in text


@pytest.mark.san
@pytest.mark.parametrize("provider", PROVIDERS)
def test_provider_mount_reads(provider, target, feedfs, creds_server, tmp_path):
    cs = None if provider in ("env", "profile", "profile-process") else \
        creds_server(access=target.access, secret=target.secret)
    env = provider_env(provider, cs, str(tmp_path), target.access, target.secret)
    cp = feedfs.run(["--print-credentials-source"], env=env)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.startswith(source_name(provider) + ":"), cp.stdout
    assert target.secret not in cp.stdout + cp.stderr and "feedfs-session-" not in cp.stdout
    mnt, log = feedfs.mount("s3://%s/dir/" % target.bucket, target.url, env=env,
                            args=["--force-path-style"])
    with open(os.path.join(mnt, "data.bin"), "rb") as f:
        assert f.read() == content_for(KEY, SIZE)
    assert feedfs.umount(mnt) == []
    text = open(log, errors="replace").read()
    assert "credentials from %s" % source_name(provider) in text
    assert_no_secrets(log, target.secret, ["container-token-ok", "web-identity-token-ok",
                                           "oidc-token-ok"])
    if cs:
        assert sum(cs.stats().values()) >= 1


def test_refresh_under_continuous_reads(feedfs, creds_server, s3server, s3, tmp_path):
    """Credentials living 5 s, a reader looping for 15 s: no error, several
    refreshes, and no token used after it could have expired."""
    lifetime = 5
    name = "creds-refresh-%d" % os.getpid()
    s3.create_bucket(Bucket=name)
    files = {"f%d.bin" % i: content_for("refresh%d" % i, 70_000 + i) for i in range(8)}
    for k, v in files.items():
        s3.put_object(Bucket=name, Key=k, Body=v)
    seen = {}
    lock = threading.Lock()

    def on_request(h):
        tok = h.get("x-amz-security-token")
        if tok:
            with lock:
                first, _ = seen.get(tok, (time.monotonic(), 0))
                seen[tok] = (first, time.monotonic())
    px = ForwardProxy(s3server.url, on_request=on_request)
    cs = creds_server(lifetime=lifetime, secret="feedfs-secret-refresh")
    env = provider_env("container", cs, str(tmp_path), "S3RVER", "feedfs-secret-refresh")
    try:
        mnt, log = feedfs.mount("s3://" + name, px.url, env=env,
                                args=["--metadata-ttl", "0", "--negative-ttl", "0"])
        errors, reads = [], 0
        t_end = time.monotonic() + 15
        while time.monotonic() < t_end:
            for k, v in files.items():
                try:
                    assert k in os.listdir(mnt)
                    fd = os.open(os.path.join(mnt, k), os.O_RDONLY)
                    try:
                        got = os.pread(fd, len(v), 0)
                        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(fd)
                    if got != v:
                        errors.append("%s: wrong bytes" % k)
                    reads += 1
                except OSError as e:
                    errors.append("%s: %s" % (k, e))
        assert not errors, errors[:5]
        assert reads > 50
    finally:
        px.stop()
    fetches = cs.stats().get("GET /container/creds", 0)
    assert fetches >= 3, "credentials were not refreshed (%d fetches)" % fetches
    assert len(seen) >= 3
    for tok, (first, last) in seen.items():
        assert last - first < lifetime, "token %s used %.1fs after first use" % (tok[-6:], last - first)
    assert_no_secrets(log, "feedfs-secret-refresh")


@pytest.mark.parametrize("case,needle", [
    ("container", "authorization token rejected"),
    ("web-identity", "InvalidIdentityToken"),
    ("oidc-rrsa", "OIDCToken.Invalid"),
])
def test_wrong_token_fails_mount(case, needle, feedfs, creds_server, s3server, tmp_path):
    cs = creds_server()
    env = provider_env(case, cs, str(tmp_path), "S3RVER", "S3RVER",
                       tokens={"container": "bad", "web": "bad", "oidc": "bad"})
    cp = feedfs.mount("s3://whatever", s3server.url, env=env, ok=False)
    assert cp.returncode == 1
    assert needle in cp.stderr, cp.stderr
    assert len(cp.stderr.strip().splitlines()) == 1, cp.stderr


def test_expired_credentials_fail_mount(feedfs, creds_server, s3server, tmp_path):
    cs = creds_server(lifetime=-60)
    env = provider_env("imds", cs, str(tmp_path), "S3RVER", "S3RVER")
    cp = feedfs.mount("s3://whatever", s3server.url, env=env, ok=False)
    assert cp.returncode == 1
    assert "expired" in cp.stderr, cp.stderr


@pytest.mark.san
def test_nothing_found_lists_every_source(feedfs, s3server):
    cp = feedfs.mount("s3://whatever", s3server.url, ok=False)
    assert cp.returncode == 1
    line = cp.stderr.strip()
    assert line.startswith("feedfs: no credentials found; tried: env"), line
    for name in ("profile", "web-identity", "oidc-rrsa", "container", "imds", "ecs-ram-role"):
        assert name + " (" in line, name
    cp = feedfs.run(["--print-credentials-source"])
    assert cp.returncode == 1 and "no credentials found" in cp.stderr


def test_named_profile(feedfs, s3server, s3, tmp_path):
    name = "creds-prof-%d" % os.getpid()
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="x.txt", Body=b"profile bytes")
    env = provider_env("profile", None, str(tmp_path), "S3RVER", "feedfs-secret-prof")
    env.pop("AWS_PROFILE")
    mnt, log = feedfs.mount("s3://" + name, s3server.url, env=env, args=["--profile", "dev"])
    with open(os.path.join(mnt, "x.txt"), "rb") as f:
        assert f.read() == b"profile bytes"
    cp = feedfs.run(["--print-credentials-source", "--profile", "dev"], env=env)
    assert cp.returncode == 0 and "profile 'dev'" in cp.stdout, cp.stdout + cp.stderr
    cp = feedfs.mount("s3://" + name, s3server.url, env=env, args=["--profile", "nope"], ok=False)
    assert cp.returncode == 1 and "nope" in cp.stderr, cp.stderr
