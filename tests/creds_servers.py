#!/usr/bin/python3
"""Local stand-ins for every credential service feedfs can talk to.

One threaded HTTP server on 127.0.0.1 (stdlib only), one path prefix per
service; point the provider's endpoint override at http://127.0.0.1:PORT/<prefix>:

  /imds          EC2 IMDSv2          AWS_EC2_METADATA_SERVICE_ENDPOINT
  /imds-v1       EC2 without tokens (PUT /latest/api/token -> 405)
  /ecs           Aliyun ECS metadata ALIBABA_CLOUD_ECS_METADATA_ENDPOINT
  /container     container endpoint  AWS_CONTAINER_CREDENTIALS_FULL_URI=.../container/creds
  /sts           AWS STS AssumeRoleWithWebIdentity   AWS_ENDPOINT_URL_STS
  /aliyun-sts    Aliyun STS AssumeRoleWithOIDC       ALIBABA_CLOUD_STS_ENDPOINT
  /stats         JSON request counters (GET), /reset zeroes them (POST)

Every service issues access key S3RVER / secret S3RVER (what the local s3rver
accepts; --access-key/--secret-key issue others, e.g. a Ceph RGW user's) with a fresh session token "feedfs-session-<service>-<n>" that expires
--lifetime seconds from now. The metadata services insist on a valid session
token from their PUT /latest/api/token; the container endpoint, both STS APIs
check the caller's token against --container-token / --web-token /
--oidc-token and answer like the real service when it is wrong.

Prints "PORT <n>" on stdout once listening; runs until killed or stdin closes
(with --die-with-stdin) so a test that crashes does not leave it behind.
"""
import argparse
import datetime
import json
import secrets
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ARGS = None
LOCK = threading.Lock()
STATS = {}
SERIAL = {}
MDS_TOKENS = {}  # token -> expiry (datetime)


def bump(name):
    with LOCK:
        STATS[name] = STATS.get(name, 0) + 1


def issue(service):
    with LOCK:
        SERIAL[service] = SERIAL.get(service, 0) + 1
        n = SERIAL[service]
    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=ARGS.lifetime)
    return {
        "ak": ARGS.access_key,
        "sk": ARGS.secret_key,
        "token": "feedfs-session-%s-%d" % (service, n),
        "exp": exp.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *a):
        if ARGS.verbose:
            sys.stderr.write("creds_servers: " + fmt % a + "\n")

    def send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n).decode() if n else ""

    # ---- metadata services -------------------------------------------------
    def mds_token(self, ttl_header):
        ttl = self.headers.get(ttl_header)
        if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.send(400, "missing or bad " + ttl_header, "text/plain")
        tok = secrets.token_urlsafe(24)
        with LOCK:
            MDS_TOKENS[tok] = datetime.datetime.now() + datetime.timedelta(seconds=int(ttl))
        self.send(200, tok, "text/plain")

    def mds_ok(self, token_header):
        tok = self.headers.get(token_header)
        with LOCK:
            exp = MDS_TOKENS.get(tok)
        return exp is not None and exp > datetime.datetime.now()

    def imds(self, path, v1):
        prefix = "/latest/meta-data/iam/security-credentials/"
        if path == "/latest/api/token":
            if self.command != "PUT":
                return self.send(405, "", "text/plain")
            if v1:
                return self.send(405, "", "text/plain")
            return self.mds_token("X-aws-ec2-metadata-token-ttl-seconds")
        if not v1 and not self.mds_ok("X-aws-ec2-metadata-token"):
            return self.send(401, "", "text/plain")
        if path == prefix:
            return self.send(200, ARGS.role + "\n", "text/plain")
        if path == prefix + ARGS.role:
            c = issue("imds")
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            return self.send(200, json.dumps({
                "Code": "Success", "LastUpdated": now, "Type": "AWS-HMAC",
                "AccessKeyId": c["ak"], "SecretAccessKey": c["sk"], "Token": c["token"],
                "Expiration": c["exp"]}, indent=2))
        return self.send(404, "not found", "text/plain")

    def ecs(self, path):
        prefix = "/latest/meta-data/ram/security-credentials/"
        if path == "/latest/api/token":
            if self.command != "PUT":
                return self.send(405, "", "text/plain")
            return self.mds_token("X-aliyun-ecs-metadata-token-ttl-seconds")
        if not self.mds_ok("X-aliyun-ecs-metadata-token"):
            return self.send(401, "", "text/plain")
        if path == prefix:
            return self.send(200, ARGS.role, "text/plain")
        if path == prefix + ARGS.role:
            c = issue("ecs")
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            return self.send(200, json.dumps({
                "AccessKeyId": c["ak"], "AccessKeySecret": c["sk"],
                "SecurityToken": c["token"], "Expiration": c["exp"],
                "LastUpdated": now, "Code": "Success"}))
        return self.send(404, "not found", "text/plain")

    # ---- container endpoint ---------------------------------------------------
    def container(self, path):
        if path != "/creds" or self.command != "GET":
            return self.send(404, json.dumps({"Code": "NotFound"}))
        if self.headers.get("Authorization") != ARGS.container_token:
            return self.send(401, json.dumps({
                "Code": "AccessDenied", "Message": "invalid authorization token"}))
        c = issue("container")
        return self.send(200, json.dumps({
            "AccessKeyId": c["ak"], "SecretAccessKey": c["sk"], "Token": c["token"],
            "Expiration": c["exp"], "RoleArn": "arn:aws:iam::000000000000:role/feedfs"}))

    # ---- STS ------------------------------------------------------------------
    def params(self):
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        if self.command == "POST":
            q.update(urllib.parse.parse_qs(self.body()))
        return {k: v[0] for k, v in q.items()}

    def sts(self):
        p = self.params()
        if p.get("Action") != "AssumeRoleWithWebIdentity" or not p.get("RoleArn") \
                or not p.get("RoleSessionName"):
            return self.sts_error(400, "InvalidParameterValue", "bad request")
        if p.get("WebIdentityToken") != ARGS.web_token:
            return self.sts_error(400, "InvalidIdentityToken",
                                  "Couldn't retrieve verification key from your identity provider")
        c = issue("sts")
        xml = """<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:default:feedfs</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>%s/%s</Arn>
      <AssumedRoleId>AROAFEEDFS:%s</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>%s</SessionToken>
      <SecretAccessKey>%s</SecretAccessKey>
      <Expiration>%s</Expiration>
      <AccessKeyId>%s</AccessKeyId>
    </Credentials>
    <Audience>sts.amazonaws.com</Audience>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>feedfs-test</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>
""" % (p["RoleArn"], p["RoleSessionName"], p["RoleSessionName"], c["token"], c["sk"],
       c["exp"], c["ak"])
        return self.send(200, xml, "text/xml")

    def sts_error(self, status, code, msg):
        xml = """<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>
  <RequestId>feedfs-test</RequestId>
</ErrorResponse>
""" % (code, msg)
        return self.send(status, xml, "text/xml")

    def aliyun_sts(self):
        p = self.params()
        need = ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName")
        if p.get("Action") != "AssumeRoleWithOIDC" or p.get("Format", "JSON") != "JSON" \
                or any(not p.get(k) for k in need):
            return self.send(400, json.dumps({
                "RequestId": "feedfs-test", "Code": "MissingParameter",
                "Message": "a required parameter is missing"}))
        if p["OIDCToken"] != ARGS.oidc_token:
            return self.send(400, json.dumps({
                "RequestId": "feedfs-test", "HostId": "sts.aliyuncs.com",
                "Code": "AuthenticationFail.OIDCToken.Invalid",
                "Message": "The OIDC token is invalid."}))
        c = issue("aliyun-sts")
        return self.send(200, json.dumps({
            "RequestId": "feedfs-test",
            "AssumedRoleUser": {"Arn": p["RoleArn"], "AssumedRoleId": "3000:" + p["RoleSessionName"]},
            "Credentials": {"SecurityToken": c["token"], "Expiration": c["exp"],
                            "AccessKeySecret": c["sk"], "AccessKeyId": c["ak"]}}))

    # ---- dispatch -------------------------------------------------------------
    def route(self):
        path = urllib.parse.urlsplit(self.path).path
        for prefix, fn in (("/imds-v1", lambda rest: self.imds(rest, True)),
                           ("/imds", lambda rest: self.imds(rest, False)),
                           ("/ecs", self.ecs),
                           ("/container", self.container),
                           ("/aliyun-sts", lambda rest: self.aliyun_sts()),
                           ("/sts", lambda rest: self.sts())):
            if path == prefix or path.startswith(prefix + "/"):
                bump("%s %s%s" % (self.command, prefix, path[len(prefix):]))
                if self.command == "GET" or prefix.endswith("sts"):
                    pass
                elif self.command == "PUT" and "Content-Length" in self.headers:
                    self.body()
                return fn(path[len(prefix):] or "/")
        if path == "/stats":
            with LOCK:
                return self.send(200, json.dumps(STATS))
        if path == "/reset":
            self.body()
            with LOCK:
                STATS.clear()
            return self.send(200, "{}")
        return self.send(404, "no such service", "text/plain")

    do_GET = route
    do_PUT = route
    do_POST = route


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--lifetime", type=int, default=900, help="seconds each credential lives")
    ap.add_argument("--role", default="feedfs-role")
    ap.add_argument("--access-key", default="S3RVER", help="key id handed out")
    ap.add_argument("--secret-key", default="S3RVER", help="secret handed out")
    ap.add_argument("--web-token", default="web-identity-token-ok")
    ap.add_argument("--oidc-token", default="oidc-token-ok")
    ap.add_argument("--container-token", default="container-token-ok")
    ap.add_argument("--die-with-stdin", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    ARGS = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    if ARGS.die_with_stdin:
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        sys.stdin.read()
        srv.shutdown()
    else:
        srv.serve_forever()


if __name__ == "__main__":
    main()
