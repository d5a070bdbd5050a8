"""A tiny HTTP proxy on 127.0.0.1 that counts requests by method.

Put it between feedfs (--endpoint-url proxy.url) and s3rver: it forwards each
request unchanged (the Host header too, so SigV4 signatures still verify) and
streams the response body back. `counts()` gives {"GET": n, ...}; `gets(key)`
counts object GETs whose path ends with the key. `delay_s` holds every GET
response that long before answering (to make concurrent readers overlap);
with `delay_from` set, only ranged GETs that start at or past that byte.
`aborted` counts GET responses the client closed its connection on before
the whole body was sent (a cancelled transfer).
"""

import http.client
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


class CountingProxy:
    def __init__(self, upstream_url):
        u = urllib.parse.urlsplit(upstream_url)
        self.up_host, self.up_port = u.hostname, u.port
        self.lock = threading.Lock()
        self.by_method = {}
        self.get_paths = []
        self.get_bytes = 0          # object body bytes sent for GETs
        self.aborted = 0            # GET bodies the client hung up on
        self.delay_s = 0.0
        self.delay_from = None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _forward(self):
                with proxy.lock:
                    proxy.by_method[self.command] = proxy.by_method.get(self.command, 0) + 1
                    if self.command == "GET" and "?" not in self.path:
                        proxy.get_paths.append(urllib.parse.unquote(self.path))
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                hdrs = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                conn = getattr(self.server.local, "conn", None)
                if conn is None:
                    conn = http.client.HTTPConnection(proxy.up_host, proxy.up_port, timeout=60)
                    self.server.local.conn = conn
                try:
                    # Host is among hdrs, so http.client keeps it as sent.
                    conn.request(self.command, self.path, body=body, headers=hdrs)
                    resp = conn.getresponse()
                except (OSError, http.client.HTTPException):
                    conn.close()
                    self.server.local.conn = None
                    self.send_error(502)
                    return
                if self.command == "GET" and proxy.delay_s and proxy.held(self.headers):
                    threading.Event().wait(proxy.delay_s)
                length = resp.getheader("Content-Length")
                no_body = self.command == "HEAD" or resp.status in (204, 304)
                data = None
                if length is None and not no_body:
                    data = resp.read()
                    length = str(len(data))
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                if length is not None:
                    self.send_header("Content-Length", length)
                    if self.command == "GET" and "?" not in self.path and resp.status < 300:
                        with proxy.lock:
                            proxy.get_bytes += int(length)
                try:
                    self.end_headers()
                    if no_body:
                        resp.read()
                    elif data is not None:
                        self.wfile.write(data)
                    else:
                        while True:
                            chunk = resp.read(1 << 16)
                            if not chunk:
                                break
                            self.wfile.write(chunk)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    # The client gave up on this response: the upstream
                    # connection is mid-body, so it cannot be reused.
                    with proxy.lock:
                        proxy.aborted += 1
                    conn.close()
                    self.server.local.conn = None
                    self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.local = threading.local()
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def held(self, headers):
        if self.delay_from is None:
            return True
        m = re.match(r"bytes=(\d+)-", headers.get("Range") or "")
        return bool(m) and int(m.group(1)) >= self.delay_from

    def counts(self):
        with self.lock:
            return dict(self.by_method)

    def reset(self):
        with self.lock:
            self.by_method.clear()
            self.get_paths.clear()
            self.get_bytes = 0
            self.aborted = 0

    def gets(self, key=None):
        with self.lock:
            if key is None:
                return len(self.get_paths)
            return sum(1 for p in self.get_paths if p.endswith("/" + key))
