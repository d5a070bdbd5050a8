#!/usr/bin/python3
"""make_dataset.py — upload the demo dataset into a bucket (deterministic, idempotent).

  train/class_NN/img_NNNNN.jpg   N_CLASSES x PER_CLASS "images", 20-200 KiB each
  shards/shard-000000.tar        one ~512 MiB shard

Content is a pure function of the key (SHAKE-256 of it), so every run produces the
same bytes. Writes manifest.json (key -> size, sha256) next to --manifest.
"""
import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

N_CLASSES = 20
PER_CLASS = 150
SHARD_KEY = "shards/shard-000000.tar"
SHARD_SIZE = 512 * 1024 * 1024
CHUNK = 8 << 20


def image_size(key):
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")
    return 20 * 1024 + h % (180 * 1024 + 1)


def image_bytes(key, size):
    return hashlib.shake_256(key.encode()).digest(size)


def shard_chunks():
    left, i = SHARD_SIZE, 0
    while left:
        n = min(CHUNK, left)
        yield hashlib.shake_256(b"%s:%d" % (SHARD_KEY.encode(), i)).digest(n)
        left -= n
        i += 1


class ChunkReader:
    """A file-like object over shard_chunks() so the shard streams without a temp file."""

    def __init__(self):
        self.it = shard_chunks()
        self.buf = b""
        self.h = hashlib.sha256()

    def read(self, n=-1):
        while (n < 0 or len(self.buf) < n):
            try:
                c = next(self.it)
            except StopIteration:
                break
            self.h.update(c)
            self.buf += c
        if n < 0:
            n = len(self.buf)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="S3RVER",
                        aws_secret_access_key="S3RVER", region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", default="demo")
    ap.add_argument("--manifest", required=True)
    a = ap.parse_args()
    s3 = client(a.endpoint)
    try:
        s3.create_bucket(Bucket=a.bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    except Exception as e:  # noqa: BLE001 - s3rver answers BucketAlreadyExists
        if "BucketAlready" not in str(e):
            raise
    manifest = {}
    keys = ["train/class_%02d/img_%05d.jpg" % (c, c * PER_CLASS + i)
            for c in range(N_CLASSES) for i in range(PER_CLASS)]
    t0 = time.monotonic()

    def put(key):
        size = image_size(key)
        data = image_bytes(key, size)
        s3.put_object(Bucket=a.bucket, Key=key, Body=data)
        return key, size, hashlib.sha256(data).hexdigest()

    with ThreadPoolExecutor(16) as ex:
        for i, (k, n, h) in enumerate(ex.map(put, keys), 1):
            manifest[k] = {"size": n, "sha256": h}
            if i % 500 == 0:
                print("  uploaded %d/%d images" % (i, len(keys)), flush=True)
    print("  %d images (%.0f MiB) in %.1fs" % (len(keys), sum(v["size"] for v in manifest.values()) / 2**20,
                                               time.monotonic() - t0), flush=True)
    t0 = time.monotonic()
    from boto3.s3.transfer import TransferConfig
    r = ChunkReader()
    s3.upload_fileobj(r, a.bucket, SHARD_KEY, Config=TransferConfig(
        multipart_threshold=64 << 20, multipart_chunksize=64 << 20, max_concurrency=2))
    manifest[SHARD_KEY] = {"size": SHARD_SIZE, "sha256": r.h.hexdigest()}
    print("  shard %s (%d MiB) in %.1fs" % (SHARD_KEY, SHARD_SIZE >> 20, time.monotonic() - t0), flush=True)
    tmp = a.manifest + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=0, sort_keys=True)
    os.replace(tmp, a.manifest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
