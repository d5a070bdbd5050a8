"""HTTPS to a local TLS endpoint with a private CA (made here with openssl): the
mount fails without the CA and works with --ca-bundle or AWS_CA_BUNDLE. Proxy
variables reach libcurl (feedfs never turns them off)."""

import os
import ssl
import subprocess

import pytest

from conftest import content_for
from servers import ForwardProxy

ENV = {"AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER"}


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls"))
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=feedfs test CA", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out", "srv.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    with open(os.path.join(d, "ext.cnf"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "srv.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    return d


@pytest.fixture
def tls_bucket(s3, s3server, tls_files):
    name = "tls-%d" % os.getpid()
    try:
        s3.create_bucket(Bucket=name)
    except Exception:  # noqa: BLE001 - made by an earlier test of this run
        pass
    s3.put_object(Bucket=name, Key="t/x.bin", Body=content_for("tls", 123_457))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(tls_files, "srv.pem"), os.path.join(tls_files, "srv.key"))
    px = ForwardProxy(s3server.url, tls=ctx)
    yield name, px
    px.stop()


def read_x(mnt):
    with open(os.path.join(mnt, "t/x.bin"), "rb") as f:
        assert f.read() == content_for("tls", 123_457)


@pytest.mark.san
def test_https_fails_without_ca(feedfs, tls_bucket):
    name, px = tls_bucket
    assert px.url.startswith("https://127.0.0.1:")
    cp = feedfs.mount("s3://" + name, px.url, env=ENV, ok=False)
    assert cp.returncode == 1
    assert "TLS certificate of %s was not accepted" % px.url in cp.stderr, cp.stderr


@pytest.mark.san
def test_https_with_ca_bundle(feedfs, tls_bucket, tls_files):
    name, px = tls_bucket
    mnt, _ = feedfs.mount("s3://" + name, px.url, env=ENV,
                          args=["--ca-bundle", os.path.join(tls_files, "ca.pem")])
    read_x(mnt)


def test_https_with_aws_ca_bundle(feedfs, tls_bucket, tls_files):
    name, px = tls_bucket
    env = dict(ENV, AWS_CA_BUNDLE=os.path.join(tls_files, "ca.pem"))
    mnt, _ = feedfs.mount("s3://" + name, px.url, env=env)
    read_x(mnt)
    cp = feedfs.run(["--dry-run", "s3://" + name, "--endpoint-url", px.url], env=env)
    assert cp.returncode == 0 and cp.stdout.startswith("ok:"), cp.stderr


def test_wrong_ca_bundle(feedfs, tls_bucket, tls_files):
    name, px = tls_bucket
    cp = feedfs.mount("s3://" + name, px.url, env=ENV, ok=False,
                      args=["--ca-bundle", os.path.join(tls_files, "srv.key.missing")])
    assert cp.returncode != 0 and cp.stderr.strip(), cp.stderr


def test_http_proxy_variable_is_honoured(feedfs, s3, s3server):
    """http_proxy reaches libcurl: requests arrive at the proxy in absolute form."""
    name = "proxy-%d" % os.getpid()
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="p.txt", Body=b"via proxy")
    px = ForwardProxy(s3server.url)
    try:
        env = dict(ENV, http_proxy=px.url, NO_PROXY=None)
        cp = feedfs.run(["--dry-run", "s3://" + name, "--endpoint-url", s3server.url], env=env)
        assert cp.returncode == 0, cp.stderr
        assert px.absolute >= 1, "the proxy saw no request"
        before = px.count
        env = dict(ENV, http_proxy=px.url, NO_PROXY="127.0.0.1")
        cp = feedfs.run(["--dry-run", "s3://" + name, "--endpoint-url", s3server.url], env=env)
        assert cp.returncode == 0 and px.count == before, "NO_PROXY was not honoured"
    finally:
        px.stop()
