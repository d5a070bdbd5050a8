"""Objects changed after mounting show up after --metadata-ttl, and bytes of two
versions of an object are never mixed."""

import errno
import os
import time

import pytest

from conftest import content_for

DEADLINE_S = 60         # generous: we never assert timing, only eventual visibility


def read_all(path):
    with open(path, "rb", buffering=0) as f:
        out = bytearray()
        while True:
            b = f.read(1 << 16)
            if not b:
                return bytes(out)
            out += b


@pytest.mark.san
def test_changes_visible_after_ttl(s3, new_bucket, mount):
    b = new_bucket("ttl")
    v1 = content_for("v1", 1000)
    v2 = content_for("v2", 3333)
    s3.put_object(Bucket=b, Key="dir/a.txt", Body=v1)
    s3.put_object(Bucket=b, Key="dir/gone.txt", Body=b"gone")
    s3.put_object(Bucket=b, Key="keep.txt", Body=b"keep")
    m = mount(b, "", "--metadata-ttl", "2", "--negative-ttl", "2")
    assert sorted(os.listdir(m.p("dir"))) == ["a.txt", "gone.txt"]
    assert read_all(m.p("dir/a.txt")) == v1
    assert not os.path.exists(m.p("dir/new.txt"))

    s3.put_object(Bucket=b, Key="dir/new.txt", Body=b"new!")
    s3.put_object(Bucket=b, Key="dir/a.txt", Body=v2)
    s3.delete_object(Bucket=b, Key="dir/gone.txt")

    seen = set()
    deadline = time.monotonic() + DEADLINE_S
    while True:
        names = sorted(os.listdir(m.p("dir")))
        try:
            data = read_all(m.p("dir/a.txt"))
        except OSError:
            data = None          # a read that noticed the change may fail; never mix
        if data is not None:
            assert data in (v1, v2), "mixed or wrong bytes: len %d" % len(data)
            seen.add(data == v2)
        try:
            size = os.stat(m.p("dir/a.txt")).st_size
        except OSError:
            size = None
        new_ok = os.path.exists(m.p("dir/new.txt"))
        if names == ["a.txt", "new.txt"] and data == v2 and size == len(v2) and new_ok \
                and not os.path.exists(m.p("dir/gone.txt")):
            break
        assert time.monotonic() < deadline, \
            "after %ds: names %s, a.txt %s bytes (stat %s), new.txt %s" % (
                DEADLINE_S, names, None if data is None else len(data), size, new_ok)
        time.sleep(0.2)
    assert read_all(m.p("dir/new.txt")) == b"new!"
    assert read_all(m.p("keep.txt")) == b"keep"
    assert True in seen


def test_replace_during_open_read_never_mixes(stub, mount):
    """An object replaced while a reader holds it open: the reader gets the old bytes
    or an error, never a mix. Runs on the S3 stub because s3rver ignores If-Match."""
    stub.create_bucket("mix")
    size = 16 << 20
    v1 = content_for("mix-v1", size)
    v2 = content_for("mix-v2", size)
    stub.put("mix", "obj.bin", v1)
    m = mount("mix", "", "--metadata-ttl", "1", "--part-size", "1M", endpoint=stub.url)
    outcomes = []
    for attempt in range(2):
        with open(m.p("obj.bin"), "rb", buffering=0) as f:
            first = f.read(1 << 20)
            stub.put("mix", "obj.bin", v2 if attempt == 0 else v1)
            rest = bytearray()
            try:
                while True:
                    b = f.read(1 << 20)
                    if not b:
                        break
                    rest += b
                got = first + bytes(rest)
                assert got in (v1, v2), "mixed bytes: first differs at %s" % next(
                    (i for i in range(len(got)) if got[i] != v1[i]), None)
                outcomes.append("whole")
            except OSError as e:
                outcomes.append("error %d" % e.errno)
        time.sleep(1.5)
    assert outcomes


def test_an_older_open_file_never_puts_its_version_back(s3, new_bucket, mount):
    """The kernel's pages of a file are shared by all its open files. Once an open
    has read a newer version (and dropped the pages), a file opened on the older
    version must not fill pages with the old bytes: a later open of the newer
    version keeps those pages (same ETag) and would read old bytes from them. Its
    reads get ESTALE instead; every later open reads only the newer version."""
    b = new_bucket("older")
    size = 8 << 20
    v1 = content_for("older-v1", size)
    v2 = content_for("older-v2", size)
    s3.put_object(Bucket=b, Key="f.bin", Body=v1)
    m = mount(b, "", "--metadata-ttl", "1")
    h1 = os.open(m.p("f.bin"), os.O_RDONLY)
    try:
        assert os.pread(h1, 1 << 20, 0) == v1[:1 << 20]
        s3.put_object(Bucket=b, Key="f.bin", Body=v2)
        time.sleep(1.5)                           # past the TTL: the next open HEADs
        h2 = os.open(m.p("f.bin"), os.O_RDONLY)
        try:
            assert os.pread(h2, 4096, 0) == v2[:4096]
            with pytest.raises(OSError) as ei:
                os.pread(h1, 4096, 1 << 20)       # not in the kernel's pages: asks feedfs
            assert ei.value.errno == errno.ESTALE
        finally:
            os.close(h2)
    finally:
        os.close(h1)
    assert read_all(m.p("f.bin")) == v2
    time.sleep(1.5)
    assert read_all(m.p("f.bin")) == v2
