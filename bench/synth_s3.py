#!/usr/bin/env python3
"""synth_s3 — an S3 endpoint whose keys, sizes, ETags and bytes are computed.

Nothing is stored: key number i (0 <= i < dirs * files) is

    <dstem><d:05>/<fstem><f:07>.bin        d = i // files, f = i % files

(fixed-width numbers, so key(i) grows with i in UTF-8 byte order, the order
S3 lists in), its size is 1 + crc32(key) % max_size, its ETag the MD5 of the
key (not of the bytes: S3 ETags are no checksum either), its mtime one fixed
instant, and its bytes shake_256(key) cut to the size. `--names long` makes
both stems ~120 bytes of Greek and CJK (UTF-8), for bytes-per-entry of long
unicode names; `--names nested` puts every directory under one more, `all/`
(a directory that holds only directories and more keys than one page).

Answers what feedfs sends: ListObjectsV2 (list-type=2, prefix, delimiter,
continuation-token, start-after, max-keys capped at 1000, encoding-type=url)
and V1 (marker), HeadBucket, HeadObject, GetObject with Range; path-style,
any bucket name, any signature (none is checked). Listing is by binary search
over i, so a page costs the same at 10,000,000 keys as at 1,000.

GET /__synth/stats answers JSON request counts by kind (list, head, get);
feedfs never asks for it. Library use: SynthS3(dirs, files).start().url.

    python3 bench/synth_s3.py --dirs 1000 --files 1000 --port 9555
"""

import argparse
import base64
import hashlib
import http.server
import json
import re
import threading
import urllib.parse
import zlib

_XMLNS = "http://s3.amazonaws.com/doc/2006-03-01/"
_MTIME_XML = "2026-01-01T00:00:00.000Z"
_PLAIN = re.compile(rb"[A-Za-z0-9/._~-]*")    # what quote(safe="/") leaves alone
_MTIME_HTTP = "Thu, 01 Jan 2026 00:00:00 GMT"
_LONG_D = "Ωμέγα-δεδομένα-εικόνες-データセット-画像-" * 2
_LONG_F = "εικόνα-αναγνώριση-χαρακτήρων-領収書-画像ファイル-" * 2


class Keys:
    """The key space: key(i), its attributes, and search in byte order."""

    def __init__(self, dirs, files, names="short", max_size=16384):
        self.dirs, self.files, self.n = dirs, files, dirs * files
        self.max_size = max_size
        if names == "long":
            self.dstem, self.fstem = _LONG_D.encode(), _LONG_F.encode()
        elif names == "nested":
            self.dstem, self.fstem = b"all/d", b"f"
        else:
            self.dstem, self.fstem = b"d", b"f"

    def key(self, i):
        d, f = divmod(i, self.files)
        return b"%s%05d/%s%07d.bin" % (self.dstem, d, self.fstem, f)

    def size(self, key):
        return 1 + zlib.crc32(key) % self.max_size

    def etag(self, key):
        return '"%s"' % hashlib.md5(key).hexdigest()

    def data(self, key):
        return hashlib.shake_256(key).digest(self.size(key))

    def lower_bound(self, s):
        """First i with key(i) >= s (bytes)."""
        lo, hi = 0, self.n
        while lo < hi:
            mid = (lo + hi) // 2
            if self.key(mid) < s:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def index(self, key):
        """i of an existing key, or -1."""
        i = self.lower_bound(key)
        return i if i < self.n and self.key(i) == key else -1

    def list(self, prefix, delim, after, max_keys):
        """(contents keys, common prefixes, truncated, last item) of one page."""
        lo = self.lower_bound(prefix)
        hi = self.lower_bound(prefix + b"\xff")    # keys are UTF-8: no 0xff byte
        i = lo
        if after:
            i = max(i, self.lower_bound(after + b"\x00"))
            # after a common prefix: skip every key under it
            if delim and after.endswith(delim) and i < hi and self.key(i).startswith(after):
                i = self.lower_bound(after + b"\xff")
        contents, prefixes, last = [], [], None
        while i < hi and len(contents) + len(prefixes) < max_keys:
            k = self.key(i)
            j = k.find(delim, len(prefix)) if delim else -1
            if j >= 0:
                cp = k[:j + len(delim)]
                prefixes.append(cp)
                last = cp
                i = self.lower_bound(cp + b"\xff")
                continue
            contents.append(k)
            last = k
            i += 1
        return contents, prefixes, i < hi, last


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    synth = None

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, body=b"", headers=None, kind="other"):
        # Counted before the answer leaves: a client that has its answer
        # must find the request in /__synth/stats (counting after the write
        # let a test read the count before this thread got to it).
        self.synth.note(kind)
        self.send_response(status)
        hdrs = {"x-amz-request-id": "SYNTH", "Content-Length": str(len(body))}
        hdrs.update(headers or {})
        for k, v in hdrs.items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _err(self, status, code, kind):
        body = ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
                '<Message>%s</Message></Error>' % (code, code)).encode()
        self._send(status, body, {"Content-Type": "application/xml"}, kind)

    def do_PUT(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        self._err(403, "AccessDenied", "other")

    do_POST = do_DELETE = do_PUT

    def do_HEAD(self):
        self._serve()

    def do_GET(self):
        self._serve()

    def _serve(self):
        u = urllib.parse.urlsplit(self.path)
        if u.path == "/__synth/stats":
            self._send(200, json.dumps(self.synth.snapshot()).encode(),
                       {"Content-Type": "application/json"}, "stats")
            return
        path = urllib.parse.unquote_to_bytes(u.path)
        _bucket, _, key = path.lstrip(b"/").partition(b"/")
        if not key:
            if self.command == "HEAD":
                self._send(200, kind="headbucket")
            else:
                self._list(urllib.parse.parse_qs(u.query, keep_blank_values=True))
            return
        self._object(key)

    def _object(self, key):
        ks = self.synth.keys
        kind = "head" if self.command == "HEAD" else "get"
        if ks.index(key) < 0:
            self._err(404, "NoSuchKey", kind)
            return
        etag, size = ks.etag(key), ks.size(key)
        im = self.headers.get("If-Match")
        if im is not None and im.strip() not in (etag, "*"):
            self._err(412, "PreconditionFailed", kind)
            return
        hdrs = {"ETag": etag, "Last-Modified": _MTIME_HTTP, "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream"}
        rng = self.headers.get("Range")
        if self.command == "HEAD":
            hdrs["Content-Length"] = str(size)
            self._send(200, b"", hdrs, kind)
            return
        data = ks.data(key)
        if rng:
            unit, _, spec = rng.partition("=")
            first, _, last = spec.partition("-")
            if first == "":
                first, last = max(0, size - int(last)), size - 1
            else:
                first = int(first)
                last = size - 1 if last == "" else min(int(last), size - 1)
            if unit.strip() != "bytes" or first >= size or first > last:
                self._err(416, "InvalidRange", kind)
                return
            hdrs["Content-Range"] = "bytes %d-%d/%d" % (first, last, size)
            self._send(206, data[first:last + 1], hdrs, kind)
            return
        self._send(200, data, hdrs, kind)

    def _list(self, q):
        def arg(name, default=b""):
            v = q.get(name)
            return v[0].encode("utf-8", "surrogateescape") if v else default

        v2 = arg("list-type") == b"2"
        prefix, delim = arg("prefix"), arg("delimiter")
        enc = arg("encoding-type") == b"url"
        try:
            max_keys = max(0, min(int(arg("max-keys", b"1000")), 1000))
        except ValueError:
            self._err(400, "InvalidArgument", "list")
            return
        tok = arg("continuation-token")
        if v2 and tok:
            after = base64.urlsafe_b64decode(tok)
        elif v2:
            after = arg("start-after")
        else:
            after = arg("marker")
        contents, prefixes, truncated, last = self.synth.keys.list(prefix, delim, after,
                                                                   max_keys)

        def e(b):
            # Names here hold no XML specials; only the encoding matters.
            # Plain ASCII names encode to themselves: skip quote(), which
            # would otherwise be most of the endpoint's CPU per page.
            if enc and not _PLAIN.fullmatch(b):
                return urllib.parse.quote(b, safe="/")
            return b.decode("utf-8")

        ks = self.synth.keys
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="%s">'
               "<Name>synth</Name><Prefix>%s</Prefix><MaxKeys>%d</MaxKeys>"
               % (_XMLNS, e(prefix), max_keys)]
        if delim:
            out.append("<Delimiter>%s</Delimiter>" % e(delim))
        if enc:
            out.append("<EncodingType>url</EncodingType>")
        out.append("<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false"))
        if v2:
            out.append("<KeyCount>%d</KeyCount>" % (len(contents) + len(prefixes)))
            if truncated:
                out.append("<NextContinuationToken>%s</NextContinuationToken>"
                           % base64.urlsafe_b64encode(last).decode())
        elif truncated:
            out.append("<NextMarker>%s</NextMarker>" % e(last))
        for k in contents:
            out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>%s</ETag>"
                       "<Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
                       % (e(k), _MTIME_XML, ks.etag(k).replace('"', "&quot;"), ks.size(k)))
        for p in prefixes:
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % e(p))
        out.append("</ListBucketResult>")
        self._send(200, "".join(out).encode("utf-8"), {"Content-Type": "application/xml"},
                   "list")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hedged or gave up closed its end: not our error.
        import sys
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class SynthS3:
    """The endpoint on 127.0.0.1:<port> (0: any free port)."""

    def __init__(self, dirs, files, names="short", port=0, max_size=16384):
        self.keys = Keys(dirs, files, names, max_size)
        self.lock = threading.Lock()
        self.counts = {}
        synth = self

        class Handler(_Handler):
            pass
        Handler.synth = synth
        self.httpd = _Server(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def note(self, kind):
        with self.lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    def snapshot(self):
        with self.lock:
            return dict(self.counts)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--names", choices=("short", "long", "nested"), default="short")
    ap.add_argument("--max-size", type=int, default=16384)
    ap.add_argument("--port", type=int, default=9555)
    a = ap.parse_args()
    s = SynthS3(a.dirs, a.files, a.names, a.port, a.max_size)
    print("synth_s3: %d keys at %s" % (s.keys.n, s.url), flush=True)
    s.httpd.serve_forever()


if __name__ == "__main__":
    main()
