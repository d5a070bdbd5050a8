"""fault_proxy — an HTTP proxy on 127.0.0.1 that breaks object GETs on purpose.

Put it between feedfs (--endpoint-url proxy.url) and s3rver. Requests are
forwarded unchanged (Host included, so signatures still hold); listings and HEADs
always pass. Ranged object GETs meet the active fault by a seeded schedule: a
request (method, path, Range) is picked with probability `rate`, decided by a hash
of (seed, path, range) and not by thread timing, and a picked request fails on its
first `repeat` attempts only, so retries recover. rate=1 with a large repeat makes
every attempt fail (to exhaust retries).

Fault kinds:
  500       500 InternalError (S3 XML)
  503       503 SlowDown (S3 XML)
  429       429 Too Many Requests
  reset     headers and half the body, then a TCP reset
  short     headers with the full Content-Length, half the body, clean close
  stall     headers and a few bytes, then nothing for `stall_s`, then close
  trickle   the whole body, correct, in small slices with pauses (slow, not broken)
  range     a Content-Range that names other bytes than the ones sent
  etag      a different ETag than the object's (the object "changed" between parts)
set_mix(rate, kinds) is the other mode, for the benchmark's fault runs: every
request (listings and HEADs too), each attempt on its own, fails with
probability `rate`, the kind drawn from `kinds`, both by a hash of (seed,
method, target, Range, attempt number). A HEAD has no body: "reset" then
resets before the answer, "short" cuts the header block, "stall" waits before
it.

set_target(substring, kind, repeat=1) breaks the first `repeat` attempts of
every request (any method) whose target (URL-decoded) contains substring, or
for which substring, when it is a function, returns true; nothing else. It also
takes the kind "cut": a well-formed answer whose body is the first half of the
real one (its Content-Length says so), e.g. a listing's XML cut short.

Every request is logged in `log` as (conn, method, target, range, fault), conn
numbering the client connections in accept order, so a test can tell a retry
on a fresh connection from one on the same.

refuse_for(seconds) closes the listening socket and every open connection, so
connects are refused, then listens again on the same port.

Written for these tests; it is not a general proxy (no chunked requests, no TLS).
"""

import hashlib
import http.client
import socket
import struct
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}
KINDS = ("500", "503", "429", "reset", "short", "stall", "trickle", "range", "etag")
TARGET_KINDS = KINDS + ("cut",)    # cut: half the body, its Content-Length says half

_ERR = {
    "500": (500, "Internal Server Error", "InternalError", "We encountered an internal error."),
    "503": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
    "429": (429, "Too Many Requests", "TooManyRequests", "Please reduce your request rate."),
}


class FaultProxy:
    def __init__(self, upstream_url, seed=1, port=0):
        u = urllib.parse.urlsplit(upstream_url)
        self.up_host, self.up_port = u.hostname, u.port
        self.seed = seed
        self.kind, self.rate, self.repeat = None, 0.0, 1
        self.mix = None              # set_mix: kinds drawn for every request
        self.target = None           # set_target: substring of the targets to break
        self.log = []                # (conn, method, target, range, fault)
        self.n_conns = 0
        self.stall_s = 3.0
        self.trickle_pause_s = 0.01  # between 64 KiB slices of a "trickle"
        self.lock = threading.Lock()
        self.attempts = {}           # (path, range) -> attempts seen
        self.injected = {}           # kind -> faults injected
        self.requests = 0
        self.conns = set()
        self.stopping = False
        self.refusing = threading.Event()
        self.lsock = self._listen(port)
        self.port = self.lsock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)

    # ------------------------------------------------------------ control

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping = True
        self._close_all()
        self.thread.join(5)

    def set_fault(self, kind, rate=0.3, repeat=1):
        assert kind is None or kind in KINDS, kind
        with self.lock:
            self.kind, self.rate, self.repeat = kind, rate, repeat
            self.mix = self.target = None
            self.attempts.clear()

    def set_target(self, substring, kind, repeat=1):
        assert kind in TARGET_KINDS, kind
        with self.lock:
            self.kind, self.rate, self.repeat = kind, 1.0, repeat
            self.mix, self.target = None, substring
            self.attempts.clear()

    def set_mix(self, rate, kinds=("503", "500", "reset", "short", "stall")):
        assert all(k in KINDS for k in kinds), kinds
        with self.lock:
            self.kind, self.rate, self.repeat = None, rate, 1
            self.mix, self.target = tuple(kinds), None
            self.attempts.clear()

    def clear(self):
        self.set_fault(None)

    def refuse_for(self, seconds):
        """Refuse connections for `seconds` (blocks), then accept again."""
        self.refusing.set()
        self._close_all()
        time.sleep(seconds)
        self.lsock = self._listen(self.port)
        self.refusing.clear()
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    def count(self, kind):
        with self.lock:
            return self.injected.get(kind, 0)

    # ------------------------------------------------------------ plumbing

    @staticmethod
    def _listen(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(128)
        return s

    def _close_all(self):
        try:
            self.lsock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.lsock.close()
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept_loop(self):
        ls = self.lsock
        while not self.stopping:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.add(c)
                self.n_conns += 1
                cid = self.n_conns
            threading.Thread(target=self._serve, args=(c, cid), daemon=True).start()

    def _pick(self, method, path, rng, cid=0):
        """The fault for this attempt, or None (deterministic per request)."""
        kind = self._draw(method, path, rng)
        with self.lock:
            self.log.append((cid, method, path, rng, kind))
        return kind

    def _draw(self, method, path, rng):
        with self.lock:
            self.requests += 1
            if self.mix:
                k = (method, path, rng)
                n = self.attempts.get(k, 0)
                self.attempts[k] = n + 1
                h = hashlib.sha256(("%d|%s|%s|%s|%d" % (self.seed, method, path, rng, n))
                                   .encode()).digest()
                if struct.unpack("<Q", h[:8])[0] / 2.0 ** 64 >= self.rate:
                    return None
                kind = self.mix[h[8] % len(self.mix)]
                self.injected[kind] = self.injected.get(kind, 0) + 1
                return kind
            kind = self.kind
            if self.target is not None:
                k = (method, path, rng)
                n = self.attempts.get(k, 0)
                self.attempts[k] = n + 1
                t = urllib.parse.unquote(path)
                hit = self.target(t) if callable(self.target) else self.target in t
                if not hit or n >= self.repeat:
                    return None
                self.injected[kind] = self.injected.get(kind, 0) + 1
                return kind
            if not kind or method != "GET" or not rng or "?" in path:
                return None
            k = (path, rng)
            n = self.attempts.get(k, 0)
            self.attempts[k] = n + 1
            h = hashlib.sha256(("%d|%s|%s|%s" % (self.seed, kind, path, rng)).encode()).digest()
            if struct.unpack("<Q", h[:8])[0] / 2.0 ** 64 >= self.rate or n >= self.repeat:
                return None
            self.injected[kind] = self.injected.get(kind, 0) + 1
            return kind

    def _serve(self, c, cid=0):
        f = c.makefile("rb")
        up = None
        try:
            while True:
                line = f.readline(65536)
                if not line or not line.strip():
                    return
                method, target, _ = line.decode("latin-1").split(" ", 2)
                hdrs = []
                while True:
                    h = f.readline(65536)
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, v = h.decode("latin-1").split(":", 1)
                    hdrs.append((k.strip(), v.strip()))
                n = int(dict((k.lower(), v) for k, v in hdrs).get("content-length", 0))
                body = f.read(n) if n else None
                rng = dict((k.lower(), v) for k, v in hdrs).get("range")
                fault = self._pick(method, target, rng, cid)
                if method == "HEAD" and fault in ("reset", "short", "stall"):
                    self._break_head(c, fault)
                    return
                if fault in _ERR:
                    st, reason, code, msg = _ERR[fault]
                    x = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
                         '<Message>%s</Message><RequestId>FAULT%d</RequestId></Error>'
                         % (code, msg, self.requests)).encode()
                    c.sendall(("HTTP/1.1 %d %s\r\nContent-Type: application/xml\r\n"
                               "Content-Length: %d\r\n\r\n" % (st, reason, len(x))).encode() +
                              (x if method != "HEAD" else b""))
                    continue
                fwd = {k: v for k, v in hdrs if k.lower() not in HOP}
                # The upstream closes a keep-alive connection after a few idle
                # seconds: a request that finds it gone goes again on a new
                # one, as a client would (a 502 here would be a fault nobody
                # asked for).
                resp = None
                for _ in range(2 if up is not None else 1):
                    if up is None:
                        up = http.client.HTTPConnection(self.up_host, self.up_port, timeout=60)
                    try:
                        up.request(method, target, body=body, headers=fwd)
                        resp = up.getresponse()
                        data = resp.read()
                        break
                    except (OSError, http.client.HTTPException):
                        up.close()
                        up, resp = None, None
                if resp is None:
                    c.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    continue
                if not self._answer(c, method, resp, data, fault):
                    return
        except (OSError, ValueError):
            return
        finally:
            with self.lock:
                self.conns.discard(c)
            if up is not None:
                up.close()
            try:
                c.close()
            except OSError:
                pass

    def _break_head(self, c, fault):
        """A HEAD has no body to break: break its answer instead."""
        if fault == "reset":
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif fault == "short":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Le")
            c.shutdown(socket.SHUT_WR)
        else:
            end = time.monotonic() + self.stall_s
            while time.monotonic() < end and not self.stopping and not self.refusing.is_set():
                time.sleep(0.05)

    def _answer(self, c, method, resp, data, fault):
        """Sends one response, broken as `fault` says. False: connection is done."""
        out = []
        for k, v in resp.getheaders():
            lk = k.lower()
            if lk in HOP or lk == "content-length":
                continue
            if fault == "etag" and lk == "etag":
                v = '"%s"' % hashlib.md5(v.encode()).hexdigest()
            if fault == "range" and lk == "content-range":
                # "bytes a-b/n" -> shifted by one byte
                try:
                    unit, rest = v.split(" ", 1)
                    ab, total = rest.split("/", 1)
                    a, b = (int(x) for x in ab.split("-"))
                    v = "%s %d-%d/%s" % (unit, a + 1, b + 1, total)
                except ValueError:
                    v = "bytes 0-0/1"
            out.append("%s: %s\r\n" % (k, v))
        no_body = method == "HEAD" or resp.status in (204, 304)
        if fault == "cut":
            data = data[:len(data) // 2]
        length = resp.getheader("Content-Length") if method == "HEAD" else str(len(data))
        head = ("HTTP/1.1 %d %s\r\n" % (resp.status, resp.reason) + "".join(out) +
                ("Content-Length: %s\r\n" % length if length is not None else "") +
                "\r\n").encode("latin-1")
        if no_body:
            c.sendall(head)
            return True
        half = len(data) // 2
        if fault == "reset":
            c.sendall(head + data[:half])
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        if fault == "short":
            c.sendall(head + data[:half])
            c.shutdown(socket.SHUT_WR)
            return False
        if fault == "stall":
            c.sendall(head + data[:min(half, 100)])
            end = time.monotonic() + self.stall_s
            while time.monotonic() < end and not self.stopping and not self.refusing.is_set():
                time.sleep(0.05)
            return False
        if fault == "trickle":
            c.sendall(head)
            for i in range(0, len(data), 64 << 10):
                c.sendall(data[i:i + (64 << 10)])
                time.sleep(self.trickle_pause_s)
            return True
        c.sendall(head + data)
        return True
