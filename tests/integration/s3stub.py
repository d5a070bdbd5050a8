"""s3stub — a small in-memory S3 endpoint for the cases s3rver cannot serve.

s3rver (the default test server) cannot store a path segment over 233 bytes,
refuses `a//b`, folds `.`/`..`, leaves a prefix holding only sub-prefixes out of
CommonPrefixes, ignores If-Match, does not check SigV4 signatures, and its request
log does not say the method (see /work/shared/reference/s3rver-quirks.md). This
stub answers the few requests feedfs makes (ListObjectsV2/V1, HeadBucket,
HeadObject, GetObject with Range and If-Match) the way S3 documents them, counts
requests by kind, and can be told to refuse everything with 403
SignatureDoesNotMatch (a wrong secret). It binds 127.0.0.1 only.

Written for these tests; it checks no signatures and is not an S3 implementation.
"""

import base64
import hashlib
import http.server
import threading
import time
import urllib.parse
from email.utils import formatdate
from xml.sax.saxutils import escape

_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"


class _Object:
    __slots__ = ("data", "etag", "mtime")

    def __init__(self, data):
        self.data = bytes(data)
        self.etag = '"%s"' % hashlib.md5(self.data).hexdigest()
        self.mtime = time.time()


class S3Stub:
    """In-memory buckets served over HTTP on 127.0.0.1:<port>."""

    def __init__(self, deny=None, list_page_max=1000):
        self.buckets = {}            # name -> {key(str): _Object}
        self.deny = deny             # None or (status, code) answered to every request
        self.list_page_max = list_page_max
        self.lock = threading.Lock()
        self.counts = {}             # "list", "head", "get", "headbucket", "other" -> n
        self.log = []                # (method, path, status)
        stub = self

        class Handler(_Handler):
            server_stub = stub

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # --- control API used by tests (same process) ---
    def create_bucket(self, name):
        with self.lock:
            self.buckets.setdefault(name, {})

    def put(self, bucket, key, data):
        with self.lock:
            self.buckets[bucket][key] = _Object(data)

    def delete(self, bucket, key):
        with self.lock:
            self.buckets[bucket].pop(key, None)

    def reset_counts(self):
        with self.lock:
            self.counts = {}
            self.log = []

    def count(self, kind):
        with self.lock:
            return self.counts.get(kind, 0)

    def _note(self, kind, method, path, status):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.log.append((method, path, status))


def _error_xml(code, message, resource=""):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
            '<Message>%s</Message><Resource>%s</Resource>'
            '<RequestId>STUB0001</RequestId></Error>' %
            (code, escape(message), escape(resource))).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_stub = None

    def log_message(self, fmt, *args):  # quiet
        pass

    # --- plumbing ---
    def _send(self, status, body=b"", headers=None, kind="other"):
        self.send_response(status)
        hdrs = {"x-amz-request-id": "STUB0001", "Server": "s3stub"}
        hdrs.update(headers or {})
        if "Content-Length" not in hdrs:
            hdrs["Content-Length"] = str(len(body))
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
        self.server_stub._note(kind, self.command, self.path, status)

    def _err(self, status, code, message, kind="other"):
        body = _error_xml(code, message, self.path)
        self._send(status, body, {"Content-Type": "application/xml"}, kind)

    def _drain(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)

    def _split(self):
        u = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(u.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        q = {k: v[0] for k, v in q.items()}
        bucket, _, key = path.lstrip("/").partition("/")
        return bucket, key, q, ("/" in path.lstrip("/"))

    def do_HEAD(self):
        self._serve()

    def do_GET(self):
        self._serve()

    def do_PUT(self):
        self._drain()
        self._err(403, "AccessDenied", "s3stub is read-only")

    do_POST = do_DELETE = do_PUT

    def _serve(self):
        stub = self.server_stub
        if stub.deny:
            status, code = stub.deny
            self._err(status, code, "The request signature we calculated does not match "
                      "the signature you provided. Check your key and signing method.")
            return
        bucket, key, q, has_key = self._split()
        with stub.lock:
            objs = stub.buckets.get(bucket)
            objs = None if objs is None else dict(objs)
        if objs is None:
            self._err(404, "NoSuchBucket", "The specified bucket does not exist",
                      "headbucket" if not has_key else "other")
            return
        if not has_key:
            if self.command == "HEAD":
                self._send(200, kind="headbucket")
            else:
                self._list(bucket, objs, q)
            return
        obj = objs.get(key)
        kind = "head" if self.command == "HEAD" else "get"
        if obj is None:
            self._err(404, "NoSuchKey", "The specified key does not exist.", kind)
            return
        self._object(obj, kind)

    def _object(self, obj, kind):
        im = self.headers.get("If-Match")
        if im is not None and im.strip() != obj.etag and im.strip() != "*":
            self._err(412, "PreconditionFailed",
                      "At least one of the pre-conditions you specified did not hold", kind)
            return
        size = len(obj.data)
        hdrs = {"ETag": obj.etag, "Last-Modified": formatdate(obj.mtime, usegmt=True),
                "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if rng is None or self.command == "HEAD":
            self._send(200, obj.data, hdrs, kind)
            return
        try:
            unit, _, spec = rng.partition("=")
            first, _, last = spec.partition("-")
            if unit.strip() != "bytes" or "," in spec:
                raise ValueError
            if first == "":
                n = int(last)
                first, last = max(0, size - n), size - 1
            else:
                first = int(first)
                last = size - 1 if last == "" else min(int(last), size - 1)
        except ValueError:
            self._send(200, obj.data, hdrs, kind)
            return
        if first >= size or first > last:
            self._err(416, "InvalidRange", "The requested range is not satisfiable", kind)
            return
        hdrs["Content-Range"] = "bytes %d-%d/%d" % (first, last, size)
        self._send(206, obj.data[first:last + 1], hdrs, kind)

    def _list(self, bucket, objs, q):
        v2 = q.get("list-type") == "2"
        prefix = q.get("prefix", "")
        delim = q.get("delimiter", "")
        enc = q.get("encoding-type") == "url"
        try:
            max_keys = int(q.get("max-keys", "1000"))
        except ValueError:
            self._err(400, "InvalidArgument", "max-keys", "list")
            return
        max_keys = max(0, min(max_keys, self.server_stub.list_page_max))
        if v2:
            tok = q.get("continuation-token")
            if tok:
                try:
                    after = base64.urlsafe_b64decode(tok.encode()).decode("utf-8")
                except Exception:
                    self._err(400, "InvalidArgument", "The continuation token provided is incorrect", "list")
                    return
            else:
                after = q.get("start-after", "")
        else:
            after = q.get("marker", "")

        # S3 orders keys by their UTF-8 bytes; keys and prefixes both count to max-keys.
        keys = sorted((k for k in objs if k.startswith(prefix)), key=lambda k: k.encode())
        contents, prefixes = [], []
        last = None
        truncated = False
        i = 0
        while i < len(keys):
            k = keys[i]
            if after and k.encode() <= after.encode():
                i += 1
                continue
            cp = None
            if delim:
                j = k.find(delim, len(prefix))
                if j >= 0:
                    cp = k[:j + len(delim)]
            if cp is not None and after and cp.encode() <= after.encode():
                i += 1
                continue
            if len(contents) + len(prefixes) >= max_keys:
                truncated = True
                break
            if cp is not None:
                prefixes.append(cp)
                last = cp
                while i < len(keys) and keys[i].startswith(cp):
                    i += 1
                continue
            contents.append(k)
            last = k
            i += 1

        def e(s):
            return escape(urllib.parse.quote(s, safe="/") if enc else s)

        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="%s">' % _XMLNS,
               "<Name>%s</Name><Prefix>%s</Prefix>" % (escape(bucket), e(prefix)),
               "<MaxKeys>%d</MaxKeys>" % max_keys]
        if delim:
            out.append("<Delimiter>%s</Delimiter>" % e(delim))
        if enc:
            out.append("<EncodingType>url</EncodingType>")
        out.append("<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false"))
        if v2:
            out.append("<KeyCount>%d</KeyCount>" % (len(contents) + len(prefixes)))
            if q.get("continuation-token"):
                out.append("<ContinuationToken>%s</ContinuationToken>" % escape(q["continuation-token"]))
            if truncated:
                tok = base64.urlsafe_b64encode(last.encode()).decode()
                out.append("<NextContinuationToken>%s</NextContinuationToken>" % tok)
        else:
            out.append("<Marker>%s</Marker>" % e(after))
            if truncated and delim:
                out.append("<NextMarker>%s</NextMarker>" % e(last))
        for k in contents:
            o = objs[k]
            out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified>"
                       "<ETag>%s</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass>"
                       "</Contents>" % (e(k), time.strftime("%Y-%m-%dT%H:%M:%S.000Z",
                                                            time.gmtime(o.mtime)),
                                        escape(o.etag), len(o.data)))
        for p in prefixes:
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % e(p))
        out.append("</ListBucketResult>")
        self._send(200, "".join(out).encode("utf-8"), {"Content-Type": "application/xml"}, "list")

