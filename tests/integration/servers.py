"""servers — fixtures for the RGW, credential-provider and TLS tests.

  rgw          session: Ceph RGW from tests/rgw/start.sh (skips the test, with the
               reason printed, when it cannot start); FEEDFS_RGW_KEEP=1 leaves it running
  rgw_s3       boto3 client for it
  rgw_edge     session: an edge-case bucket on RGW (unicode, + % space, directories
               holding only sub-directories without markers, 2,500 common prefixes,
               1,200 keys, a 40 MiB object)
  feedfs       function: the test's Mounter (mounter.py) with a scrubbed environment
               (every credential source disabled, metadata endpoints never reachable)
  creds_server function: factory for tests/creds_servers.py on 127.0.0.1
  ForwardProxy a plain or TLS (or IPv6) reverse/forward proxy that keeps Host as sent
  Gate         a TCP forwarder that holds every connection until open(): a store
               that does not answer yet, for as long as a test wants, no timing

A pytest plugin (conftest's pytest_plugins): the fixtures reach every test; a
test module imports the classes and constants it names.
"""

import hashlib
import http.client
import os
import socket
import subprocess
import sys
import threading
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import content_for
from mounter import ROOT

RGW_START = os.path.join(ROOT, "tests", "rgw", "start.sh")
RGW_STOP = os.path.join(ROOT, "tests", "rgw", "stop.sh")
CREDS_SERVERS = os.path.join(ROOT, "tests", "creds_servers.py")
PY = "/usr/bin/python3"


def sha_of(data):
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- environment

CRED_VARS_PREFIXES = ("AWS_", "OSS_", "ALIBABA_CLOUD_")


def scrubbed_env(home, extra=None):
    """os.environ without any credential or proxy setting; IMDS and ECS metadata
    disabled; HOME without ~/.aws. `extra` is applied last (None deletes)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(CRED_VARS_PREFIXES) and k.lower() not in
         ("http_proxy", "https_proxy", "all_proxy", "no_proxy")}
    e.update({
        "HOME": home,
        "AWS_EC2_METADATA_DISABLED": "true",
        "ALIBABA_CLOUD_ECS_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": os.path.join(home, "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(home, "no-aws-credentials"),
        "NO_PROXY": "127.0.0.1,::1,localhost",
    })
    for k, v in (extra or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    return e


def boto(endpoint, access, secret, token=None):
    import boto3
    from botocore.config import Config
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access, aws_secret_access_key=secret,
        aws_session_token=token, region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      retries={"max_attempts": 5, "mode": "standard"}))


# ---------------------------------------------------------------- feedfs, scrubbed

class ScrubbedFeedfs:
    """The test's Mounter (mounter.py: watchdog, $FEEDFS_WRAP, sanitizer
    reports, unmount at teardown) with a scrubbed environment: only the
    credentials a test hands it reach feedfs."""

    def __init__(self, mounter, tmp):
        self.mounter = mounter
        self.home = os.path.join(tmp, "home")
        os.makedirs(self.home, exist_ok=True)

    def run(self, args, env=None, timeout=90):
        """feedfs ARGS with scrubbed_env(env); returns CompletedProcess (text)."""
        return self.mounter.run(args, scrubbed_env(self.home, env), timeout=timeout)

    def mount(self, source, endpoint, args=(), env=None, ok=True, log_level="debug"):
        """Mounts; with ok=True fails the test unless mounted, returns (mnt, log).
        With ok=False returns the CompletedProcess (and checks nothing got mounted)."""
        argv = ["--log-level", log_level]
        if endpoint:
            argv += ["--endpoint-url", endpoint]
        r = self.mounter.mount(source, argv + list(args), env=scrubbed_env(self.home, env),
                               ok=ok, text=True)
        return (r.path, r.log) if ok else r

    def umount(self, mnt):
        """Unmounts mnt now; returns the problems (empty when clean)."""
        m = self.mounter.find(mnt)
        return self.mounter.unmount(m) if m else []


@pytest.fixture
def feedfs(mounter, tmp_path):
    return ScrubbedFeedfs(mounter, str(tmp_path))


# ---------------------------------------------------------------- Ceph RGW

class Rgw:
    def __init__(self, env):
        self.url = env["RGW_ENDPOINT"]
        self.access = env["RGW_ACCESS_KEY"]
        self.secret = env["RGW_SECRET_KEY"]


_rgw_state = {}


@pytest.fixture(scope="session")
def rgw():
    if "skip" in _rgw_state:
        pytest.skip(_rgw_state["skip"])
    if "rgw" not in _rgw_state:
        try:
            cp = subprocess.run([RGW_START], capture_output=True, text=True, timeout=400)
        except (OSError, subprocess.TimeoutExpired) as e:
            cp = None
            why = str(e)
        if cp is None or cp.returncode != 0:
            if cp is not None:
                tail = (cp.stderr.strip().splitlines() or ["no output"])[-1]
                why = "exit %d: %s" % (cp.returncode, tail)
            _rgw_state["skip"] = "Ceph RGW could not start (tests/rgw/start.sh %s)" % why
            sys.stderr.write("\n[servers] %s: RGW tests skipped\n" % _rgw_state["skip"])
            pytest.skip(_rgw_state["skip"])
        env = dict(l.split("=", 1) for l in cp.stdout.split() if "=" in l)
        _rgw_state["rgw"] = Rgw(env)
    yield _rgw_state["rgw"]
    if not os.environ.get("FEEDFS_RGW_KEEP"):
        subprocess.run([RGW_STOP], capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def rgw_s3(rgw):
    return boto(rgw.url, rgw.access, rgw.secret)


RGW_N_PREFIXES = 2500
RGW_N_KEYS = 1200
RGW_BIG_KEY = "big/forty.bin"
RGW_BIG_SIZE = 40 << 20
RGW_NAMES = [
    "数据/训练集/图片 01.jpg", "数据/验证集/标签.txt", "emoji/😀 smile.txt",
    "special/plus+sign.txt", "special/pct%.txt", "special/pct%25.txt", "special/sp ace.txt",
    "special/two  spaces .txt", "special/q?mark&eq=.txt", "special/hash#.txt", "top.txt",
    # directories that hold only sub-directories, and no marker objects anywhere
    "onlydirs/a/b/c/leaf.txt", "onlydirs/x/y.txt", "deep/1/2/3/4/5/6/7/8/f.txt",
]


class RgwEdge:
    def __init__(self, name, objects, big_sha, listing):
        self.name, self.objects, self.big_sha, self.listing = name, objects, big_sha, listing


@pytest.fixture(scope="session")
def rgw_edge(rgw, rgw_s3, session_dir):
    name = "feedfs-edge"
    objs = {}
    for i, k in enumerate(RGW_NAMES):
        objs[k] = content_for(k, 50 + 731 * i)
    for i in range(RGW_N_KEYS):
        k = "many/k%05d.dat" % i
        objs[k] = content_for(k, (i * 97) % 2000)
    for i in range(RGW_N_PREFIXES):
        k = "prefixes/p%04d/only.txt" % i
        objs[k] = content_for(k, 32 + i % 40)
    big = os.urandom(RGW_BIG_SIZE)
    listing = None
    try:
        rgw_s3.head_bucket(Bucket=name)
        have = {}
        for page in rgw_s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for o in page.get("Contents", []):
                have[o["Key"]] = o["Size"]
        if set(have) == set(objs) | {RGW_BIG_KEY}:
            listing = sorted(have.items())   # a kept RGW already holds it (FEEDFS_RGW_KEEP)
    except Exception:  # noqa: BLE001 - the bucket does not exist yet
        rgw_s3.create_bucket(Bucket=name)
    if listing is None:
        def one(kv):
            rgw_s3.put_object(Bucket=name, Key=kv[0], Body=kv[1])
        with ThreadPoolExecutor(32) as ex:
            list(ex.map(one, list(objs.items()) + [(RGW_BIG_KEY, big)]))
        listing = []
        for page in rgw_s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            listing += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    big_sha = sha_of(rgw_s3.get_object(Bucket=name, Key=RGW_BIG_KEY)["Body"].read())
    return RgwEdge(name, objs, big_sha, listing)


# ---------------------------------------------------------------- credential stand-ins

class CredsServer:
    def __init__(self, args):
        self.proc = subprocess.Popen([PY, CREDS_SERVERS, "--die-with-stdin"] + args,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("PORT "), "creds_servers.py did not start: %r" % line
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def stats(self):
        import json
        import urllib.request
        with urllib.request.urlopen(self.url + "/stats", timeout=5) as r:
            return json.loads(r.read())

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(10)
        except Exception:  # noqa: BLE001
            self.proc.kill()


@pytest.fixture
def creds_server():
    started = []

    def start(lifetime=900, access="S3RVER", secret="S3RVER", extra=()):
        s = CredsServer(["--lifetime", str(lifetime), "--access-key", access,
                         "--secret-key", secret] + list(extra))
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


# ---------------------------------------------------------------- proxy

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade",
       "proxy-authorization"}


class ForwardProxy:
    """Forwards every request to `upstream` with its headers (Host included, so
    SigV4 still verifies). Listens on 127.0.0.1, or ::1 with ipv6=True; speaks TLS
    when given an ssl.SSLContext. Requests in absolute form (as sent to an HTTP
    proxy) are forwarded too; `count` is the number of requests served."""

    def __init__(self, upstream, ipv6=False, tls=None, on_request=None):
        u = urllib.parse.urlsplit(upstream)
        up = (u.hostname, u.port)
        proxy = self
        self.on_request = on_request        # called with the request headers
        self.count = 0
        self.absolute = 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def fwd(self):
                path = self.path
                if proxy.on_request:
                    proxy.on_request(self.headers)
                with proxy.lock:
                    proxy.count += 1
                    if path.startswith("http://"):
                        proxy.absolute += 1
                if path.startswith("http://"):
                    p = urllib.parse.urlsplit(path)
                    path = p.path + ("?" + p.query if p.query else "")
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn = http.client.HTTPConnection(*up, timeout=60)
                try:
                    conn.request(self.command, path, body=body, headers=hdrs)
                    resp = conn.getresponse()
                    data = resp.read()
                except (OSError, http.client.HTTPException):
                    self.send_error(502)
                    return
                finally:
                    conn.close()
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                self.send_header("Content-Length", resp.getheader("Content-Length") or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = fwd

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            address_family = socket.AF_INET6 if ipv6 else socket.AF_INET

        self.server = Server(("::1" if ipv6 else "127.0.0.1", 0), Handler)
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        port = self.server.server_address[1]
        host = "[::1]" if ipv6 else "127.0.0.1"
        self.url = "%s://%s:%d" % ("https" if tls else "http", host, port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Gate:
    """A TCP forwarder to 127.0.0.1:upstream_port that accepts connections at
    once but holds every byte until open(): feedfs waits on the store as long
    as the test wants (a mount that is not ready yet), with no timing involved.
    accepted is set at the first connection; connections counts them."""

    def __init__(self, upstream_port):
        self.upstream = ("127.0.0.1", upstream_port)
        self.opened = threading.Event()
        self.accepted = threading.Event()
        self.connections = 0
        self.conns = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self.conns.append(c)
            self.accepted.set()
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        self.opened.wait()
        try:
            u = socket.create_connection(self.upstream)
        except OSError:
            c.close()
            return
        self.conns.append(u)

        def pump(a, b):
            try:
                while True:
                    d = a.recv(65536)
                    if not d:
                        break
                    b.sendall(d)
            except OSError:
                pass
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Thread(target=pump, args=(u, c), daemon=True).start()
        pump(c, u)

    def open(self):
        self.opened.set()

    def close(self):
        self.opened.set()
        self.sock.close()
        for s in self.conns:
            s.close()
