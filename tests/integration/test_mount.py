"""Mounting: fails fast with one clear line for every bad setup; SIGTERM unmounts cleanly."""

import os
import signal
import subprocess
import time

import pytest

from conftest import (ACCESS_KEY, REGION, SECRET_KEY, closed_port, is_mounted, pid_alive,
                      run_feedfs, unmount)

FAST_S = 15      # generous: "fails fast" means seconds, not a retry loop of minutes


def check_fails_fast(cp, secs, *words):
    err = cp.stderr.decode(errors="replace").strip()
    lines = [l for l in err.splitlines() if l.strip()]
    assert cp.returncode != 0, "exit 0; stderr: %r" % err
    assert secs < FAST_S, "took %.1fs" % secs
    assert len(lines) == 1, "want one line on stderr, got %d: %r" % (len(lines), err)
    if words:
        low = lines[0].lower()
        assert any(w.lower() in low for w in words), "%r mentions none of %s" % (lines[0], words)
    return lines[0]


@pytest.fixture
def empty_dir(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    return str(d)


@pytest.fixture
def small_bucket(s3, new_bucket):
    b = new_bucket("small")
    s3.put_object(Bucket=b, Key="hello.txt", Body=b"hello\n")
    return b


@pytest.mark.san
def test_missing_bucket(feedfs_bin, s3server, empty_dir):
    cp, secs = run_feedfs(feedfs_bin, "s3://no-such-bucket-xyz", empty_dir, endpoint=s3server.url)
    check_fails_fast(cp, secs, "no-such-bucket-xyz", "NoSuchBucket", "does not exist")
    assert not is_mounted(empty_dir)


def test_unknown_access_key(feedfs_bin, s3server, small_bucket, empty_dir):
    """s3rver rejects an unknown access key id (InvalidAccessKeyId)."""
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, empty_dir, endpoint=s3server.url,
                          env={"AWS_ACCESS_KEY_ID": "NOTAKEY"})
    check_fails_fast(cp, secs, "InvalidAccessKeyId", "access", "denied", "credential", "403")
    assert not is_mounted(empty_dir)


@pytest.mark.san
def test_wrong_secret(feedfs_bin, stub, empty_dir):
    """s3rver does not verify SigV4 signatures at all (any secret works), so a stub that
    answers every request 403 SignatureDoesNotMatch stands in for a server that does."""
    stub.create_bucket("sig")
    stub.deny = (403, "SignatureDoesNotMatch")
    cp, secs = run_feedfs(feedfs_bin, "s3://sig", empty_dir, endpoint=stub.url,
                          env={"AWS_SECRET_ACCESS_KEY": "wrong"})
    check_fails_fast(cp, secs, "SignatureDoesNotMatch", "signature", "secret", "credential", "denied", "403")
    assert not is_mounted(empty_dir)


@pytest.mark.san
def test_unreachable_endpoint(feedfs_bin, small_bucket, empty_dir):
    url = "http://127.0.0.1:%d" % closed_port()
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, empty_dir, endpoint=url)
    check_fails_fast(cp, secs, "connect", "refused", "unreachable", "127.0.0.1")
    assert not is_mounted(empty_dir)


def test_mountpoint_missing(feedfs_bin, s3server, small_bucket, tmp_path):
    p = str(tmp_path / "does-not-exist")
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, p, endpoint=s3server.url)
    check_fails_fast(cp, secs, "does-not-exist", "no such", "exist")


def test_mountpoint_is_file(feedfs_bin, s3server, small_bucket, tmp_path):
    p = tmp_path / "afile"
    p.write_bytes(b"x")
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, str(p), endpoint=s3server.url)
    check_fails_fast(cp, secs, "not a directory", "afile")
    assert p.read_bytes() == b"x"


def test_mountpoint_not_empty(feedfs_bin, s3server, small_bucket, empty_dir):
    with open(os.path.join(empty_dir, "keep"), "w") as f:
        f.write("x")
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, empty_dir, endpoint=s3server.url)
    check_fails_fast(cp, secs, "not empty", "empty")
    assert not is_mounted(empty_dir)
    assert os.listdir(empty_dir) == ["keep"]


def test_already_mounted(feedfs_bin, s3server, small_bucket, mount):
    m = mount(small_bucket)
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, m.path, endpoint=s3server.url)
    check_fails_fast(cp, secs, "mounted", "busy", "not empty", "in use")
    # the first mount still works
    assert open(m.p("hello.txt"), "rb").read() == b"hello\n"


@pytest.mark.parametrize("args", [
    ["--part-size", "abc"], ["--part-size", "-5M"], ["--max-memory", "12Q"],
    ["--metadata-ttl", "soon"], ["--uid", "x"], ["--file-mode", "999"],
    ["--log-level", "loud"], ["--no-such-option"],
], ids=lambda a: " ".join(a))
def test_bad_options(feedfs_bin, s3server, small_bucket, empty_dir, args):
    cp, secs = run_feedfs(feedfs_bin, "s3://" + small_bucket, empty_dir, args, endpoint=s3server.url)
    check_fails_fast(cp, secs, args[0].lstrip("-"), args[-1])
    assert not is_mounted(empty_dir)


def test_bad_source_url(feedfs_bin, s3server, empty_dir):
    cp, secs = run_feedfs(feedfs_bin, "http://bucket", empty_dir, endpoint=s3server.url)
    check_fails_fast(cp, secs, "s3://")


def test_sigint_unmounts_even_when_started_with_sigint_ignored(mount, small_bucket):
    # A background job of a non-interactive shell (`feedfs ... &` in a CI
    # script) inherits SIGINT ignored; SIGINT must still unmount.
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        m = mount(small_bucket)
    finally:
        signal.signal(signal.SIGINT, old)
    with open("/proc/%d/status" % m.pids[0]) as f:
        ign = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
    assert not ign & (1 << (signal.SIGINT - 1)), "daemon ignores SIGINT: SigIgn %x" % ign
    os.kill(m.pids[0], signal.SIGINT)
    deadline = time.monotonic() + 15
    while (pid_alive(m.pids[0]) or is_mounted(m.path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(m.pids[0]), "daemon still running 15 s after SIGINT"
    assert not is_mounted(m.path)


@pytest.mark.san
def test_sigterm_unmounts_cleanly(feedfs_bin, s3server, small_bucket, empty_dir, tmp_path, request):
    log = str(tmp_path / "fg.log")
    request.node.feedfs_logs = [log]
    env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    p = subprocess.Popen([feedfs_bin, "s3://" + small_bucket, empty_dir, "-f",
                          "--endpoint-url", s3server.url, "--force-path-style", "--region", REGION,
                          "--log-file", log], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not is_mounted(empty_dir):
            assert p.poll() is None, "feedfs -f exited %s: %r" % (p.returncode, p.stderr.read())
            assert time.monotonic() < deadline, "not mounted after 30s"
            time.sleep(0.05)
        assert open(os.path.join(empty_dir, "hello.txt"), "rb").read() == b"hello\n"
        # keep a file open across the signal: unmount must still be clean
        f = open(os.path.join(empty_dir, "hello.txt"), "rb")
        f.close()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(30)
        assert rc == 0, "exit status %d after SIGTERM; stderr %r" % (rc, p.stderr.read())
        assert not is_mounted(empty_dir)
        assert not pid_alive(p.pid)
        assert os.listdir(empty_dir) == []
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        unmount(empty_dir, [])


def test_sigterm_daemonized(feedfs_bin, small_bucket, mount):
    """The daemonized form: SIGTERM to the daemon process (the keeper, which
    passes it to its server) unmounts, and both exit."""
    m = mount(small_bucket)
    assert len(m.pids) == 2, "found daemon pids %s (a keeper and its server)" % m.pids
    keeper = min(m.pids)
    os.kill(keeper, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while (any(pid_alive(p) for p in m.pids) or is_mounted(m.path)) and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_mounted(m.path)
    assert not any(pid_alive(p) for p in m.pids)
