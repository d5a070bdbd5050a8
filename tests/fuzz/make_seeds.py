#!/usr/bin/python3
"""Writes the seed corpora under tests/fuzz/corpus/ (small, hand-written inputs).
Run again after changing it; `make fuzz-smoke` runs every harness over these."""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


def put(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def obj(key, size=3, etag='"abc"'):
    return ("<Contents><Key>%s</Key><LastModified>2024-01-02T03:04:05.123Z</LastModified>"
            "<ETag>%s</ETag><Size>%d</Size><StorageClass>STANDARD</StorageClass></Contents>"
            % (key, etag.replace('"', "&quot;"), size))


v2 = ('<?xml version="1.0" encoding="UTF-8"?><ListBucketResult %s><Name>b</Name><Prefix>p/</Prefix>'
      '<KeyCount>3</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>/</Delimiter>'
      '<EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>'
      '<NextContinuationToken>tok+/=</NextContinuationToken>%s%s'
      '<CommonPrefixes><Prefix>p/sub%%2F/</Prefix></CommonPrefixes></ListBucketResult>'
      % (NS, obj("p/a%20b.txt"), obj("p/%2E%2E/%2E%2E/etc/passwd", 0)))
put("fuzz_list_xml", "v2_url", b"\x00" + v2.encode())
put("fuzz_list_xml", "v2_plain", b"\x00" + ('<ListBucketResult><IsTruncated>false</IsTruncated>%s'
                                             '</ListBucketResult>' % obj("k/\u00e9")).encode())
put("fuzz_list_xml", "v2_nul", b"\x00" + ('<ListBucketResult><EncodingType>url</EncodingType>'
                                           '%s</ListBucketResult>' % obj("a%00b")).encode())
put("fuzz_list_xml", "v1", b"\x01" + ('<ListBucketResult %s><Marker></Marker><NextMarker>m</NextMarker>'
                                       '<IsTruncated>true</IsTruncated>%s</ListBucketResult>'
                                       % (NS, obj("x/y"))).encode())
put("fuzz_list_xml", "bad", b"\x00<ListBucketResult><Contents><Key>")
put("fuzz_list_xml", "huge_size", b"\x00" + ('<ListBucketResult>%s</ListBucketResult>'
                                              % obj("k", 2 ** 64 - 1)).encode())

put("fuzz_error_xml", "slowdown", b"\xcb<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>"
    b"<Message>Reduce</Message><RequestId>R1</RequestId></Error>")
put("fuzz_error_xml", "region", b"\x90<Error><Code>AuthorizationHeaderMalformed</Code>"
    b"<Region>eu-west-1</Region><RequestId>X</RequestId></Error>")
put("fuzz_error_xml", "nosuchkey", b"\x94<Error><Code>NoSuchKey</Code><Key>a</Key></Error>")
put("fuzz_error_xml", "garbage", b"\x01<Error><Code>" + b"A" * 200 + b"</Code>")

# byte0: off index (0..5) + 6 * len index (0..3), 0x80: If-Match "abc"
put("fuzz_http_headers", "ok206", bytes([0 + 6 * 1]) +
    b"HTTP/1.1 206 Partial Content\r\nContent-Length: 7\r\nContent-Range: bytes 0-6/100\r\n"
    b"ETag: \"abc\"\r\nLast-Modified: Tue, 02 Jan 2024 03:04:05 GMT\r\n"
    b"x-amz-request-id: RID\r\nx-amz-bucket-region: us-east-1\r\n\r\n0123456")
put("fuzz_http_headers", "wrongrange", bytes([1 + 6 * 1]) +
    b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 2-8/100\r\n\r\n0123456")
put("fuzz_http_headers", "etag_changed", bytes([0x80 | (0 + 6 * 1)]) +
    b"HTTP/1.1 206 OK\r\nContent-Range: bytes 0-6/100\r\nETag: \"zzz\"\r\n\r\n0123456")
put("fuzz_http_headers", "long_body", bytes([0]) +
    b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxxxxxxxxxx")
put("fuzz_http_headers", "continue", bytes([2 + 6 * 2]) +
    b"HTTP/1.1 100 Continue\r\n\r\n")
put("fuzz_http_headers", "short_obj", bytes([3 + 6 * 3]) +
    b"HTTP/1.1 206 OK\r\nContent-Range: bytes 1048576-1048600/1048601\r\n\r\nabc")
put("fuzz_http_headers", "err503", bytes([0]) +
    b"HTTP/1.1 503 Slow Down\r\nContent-Length: 40\r\n\r\n<Error><Code>SlowDown</Code></Error>")
put("fuzz_http_headers", "big_cl", bytes([0]) +
    b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\nETag: " + b"e" * 300 + b"\r\n\r\n")

for i, k in enumerate([b"a/b/c.txt", b"dir/", b"../../etc/passwd", b"/abs/key", b"a//b",
                       b"p/./q", b"a\x00b/c", b"x/" + b"n" * 300, b"\xff\xfe/\xc3\xa9"]):
    put("fuzz_names", "k%d" % i, bytes([0]) + k)
    put("fuzz_names", "t%d" % i, bytes([0x80]) + k + b"\n" + k + b"/x\nq/../r\n")
put("fuzz_names", "prefix", bytes([4]) + b"dir/sub/file")


def key_seed(name, prefix, path, dir_form=0):
    """Byte 0 = 0x40 (key round trip) | dir_form, chosen so that byte 0 % size ==
    len(prefix): the item splits into that prefix and path."""
    size = 1 + len(prefix) + len(path)
    for b in range(0x40, 0x80):
        if b % size == len(prefix) and (b & 1) == dir_form:
            put("fuzz_names", name, bytes([b]) + prefix + path)
            return
    raise ValueError(name)


key_seed("key_plain", b"pre/", b"a/b.txt")
key_seed("key_dir", b"pre/", b"ab/c", 1)
key_seed("key_root", b"p/", b"", 1)
key_seed("key_utf8", b"\xe6\x95\xb0/", b"\xe5\x9b\xbe/x y.jpg")
key_seed("key_nul", b"p/", b"a\x00b/c")
key_seed("key_leading_slash", b"premba/", b"/c", 1)   # found by fuzzing
key_seed("key_1024", b"x" * 63 + b"/", b"/".join([b"s" * 200] * 4) + b"/" + b"l" * 156)

for i, (sel, s) in enumerate([(0, b"8M"), (0, b"512KiB"), (0, b"1G"), (0, b"18446744073709551615K"),
                              (1, b"2.5"), (1, b"-1"), (1, b"1e308"), (2, b"0777"), (0x82, b"0777"),
                              (2, b"4294967296"), (3, b"a b/c%+\x00\xff"), (0x83, b"k/../x"),
                              (4, b"%41%2"), (4, b"a+b%2Fc%00"),
                              (5, b"http://127.0.0.1:9000/base/"), (5, b"https://[::1]:443"),
                              (5, b"2024-01-02T03:04:05.123Z"), (5, b"http://")]):
    put("fuzz_options", "o%02d" % i, bytes([sel]) + s)
# options_parse itself: byte 0x60, then argv after "feedfs", one word a line.
for i, words in enumerate([
        [b"s3://b/p", b"/mnt"], [b"--part-size", b"16M", b"b", b"/m", b"-f"],
        [b"--cache-dir", b"rel", b"--block-size", b"8M", b"--cache-clear", b"b/x", b"/m"],
        [b"--metrics-addr", b"[::1]:9100", b"--dry-run", b"gs://g/"],
        [b"--metrics-addr", b"127.0.0.1:0", b"b", b"/m"],
        [b"--internal", b"--region", b"cn-hangzhou", b"oss://o/d", b"/m"],
        [b"--print-credentials-source", b"--profile", b""],
        [b"-fdh"], [b"--version"], [b"--max-memory", b"40M", b"--cache-dir", b"/c", b"b", b"/m"],
        [b"b", b"/m", b"--part-size"], [b"--bogus", b"-x", b"--dry-run=1"],
        [b"--stall-timeout", b"0.5", b"--max-retries", b"101", b"x://b", b"/m", b"z"]]):
    put("fuzz_options", "p%02d" % i, bytes([0x60]) + b"\n".join(words))

CREDS_INI = b"""[default]
aws_access_key_id = AKIDEXAMPLE
aws_secret_access_key = wJalrXUtnFEMI/K7MDENG
; comment
[dev]
aws_access_key_id=A2
aws_secret_access_key=S2
aws_session_token=T2
"""
CONFIG_INI = b"""[default]
region = eu-west-1
[profile dev]
role_arn = arn:aws:iam::123:role/r
source_profile = default
credential_process = /bin/echo {}
s3 =
  endpoint_url = http://127.0.0.1:9000
"""
put("fuzz_creds", "ini_creds", b"\x00" + CREDS_INI)
put("fuzz_creds", "ini_config", b"\x01" + CONFIG_INI)
put("fuzz_creds", "ini_bad", b"\x00[unterminated\nkey\n=\n")
AWS_JSON = (b'{"Code":"Success","AccessKeyId":"ASIA1","SecretAccessKey":"s\\u00e9c","Token":"t",'
            b'"Expiration":"2030-01-02T03:04:05Z","Nested":[1,2.5e3,true,null,{"a":"\\ud83d\\ude00"}]}')
put("fuzz_creds", "json_imds", b"\x02" + AWS_JSON)
put("fuzz_creds", "json_deep", b"\x02" + b"[" * 40 + b"]" * 40)
put("fuzz_creds", "process", b"\x03" + b'{"Version":1,"AccessKeyId":"A","SecretAccessKey":"S",'
    b'"SessionToken":"T","Expiration":"2030-01-02T03:04:05+00:00"}')
put("fuzz_creds", "aliyun", b"\x04" + b'{"RequestId":"r","Credentials":{"AccessKeyId":"STS.A",'
    b'"AccessKeySecret":"S","SecurityToken":"T","Expiration":"2030-01-02T03:04:05Z"}}')
put("fuzz_creds", "sts", b"\x05" + b'<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
    b"<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA</AccessKeyId>"
    b"<SecretAccessKey>S</SecretAccessKey><SessionToken>T</SessionToken>"
    b"<Expiration>2030-01-02T03:04:05Z</Expiration></Credentials>"
    b"</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>")
put("fuzz_creds", "sts_err", b"\x05<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>"
    b"<Message>no</Message></Error></ErrorResponse>")
put("fuzz_creds", "iso", b"\x06" + b"2030-01-02T03:04:05.999+05:30")

# fuzz_order: byte 0 picks the claimed count (0: the true one), then the payload.
put("fuzz_order", "good", b"\x00train/c0/img0001.jpg\nval/x.png\n")
put("fuzz_order", "dotdot", b"\x00a/../b\n")
put("fuzz_order", "abs", b"\x00/etc/passwd\n")
put("fuzz_order", "empty_seg", b"\x00a//b\nc/\n\n")
put("fuzz_order", "count_off", b"\x01a\nb\n")
put("fuzz_order", "no_newline", b"\x00a\nb")
put("fuzz_order", "nul", b"\x00a\x00b\n")
put("fuzz_order", "long_seg", b"\x00" + b"d/" + b"x" * 300 + b"\n")

# fuzz_gpu_ioctl: 4 bytes of ioctl command, then the request (feedfs_ioctl.h).
import struct  # noqa: E402


def ioc(nr, size):
    return struct.pack("<I", (3 << 30) | (size << 16) | (0xF7 << 8) | nr)


_caps = struct.pack("<II", 1, 64) + bytes(56)
_dest_region = struct.pack("<IIQQ", 1, 0, 7, 0) + bytes(64)
_dest_device = struct.pack("<IIQQ", 2, 0, 0, 0) + bytes(64)
_read = struct.pack("<IIIIQQ", 1, 152, 0, 0, 0, 10)
_batch = struct.pack("<IIII", 1, 8328, 0, 2) + _dest_region + bytes(32) + \
    struct.pack("<QQQq", 0, 10, 0, 0) * 2
put("fuzz_gpu_ioctl", "caps", ioc(0, 64) + _caps)
put("fuzz_gpu_ioctl", "read_region", ioc(1, 152) + _read + _dest_region + bytes(32))
put("fuzz_gpu_ioctl", "read_device", ioc(1, 152) + _read + _dest_device + bytes(32))
put("fuzz_gpu_ioctl", "batch", ioc(2, 8328) + _batch + bytes(8328 - len(_batch)))
put("fuzz_gpu_ioctl", "bad_size", ioc(1, 144) + (_read + _dest_region + bytes(32))[:144])
put("fuzz_gpu_ioctl", "unknown", ioc(9, 64) + _caps)


# fuzz_snap: byte 0 (bit 0: check the CRCs) + a snapshot written by feedfs
# (the files under corpus/fuzz_snap/ were written by snap_writer: a few keys
# with MD5 and odd ETags, a version id, a directory marker, two blocks; write
# new ones the same way when the format changes: this script does not).

# fuzz_sources: the --sources file; the seeds under corpus/fuzz_sources/ (good, dup,
# bad) are written by hand: a valid three-source file, a duplicate name with an
# unknown key, a bad name with a flagless value-taking key.
