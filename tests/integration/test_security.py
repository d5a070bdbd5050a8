"""Security properties of a running mount (threat model: docs/SECURITY.md).

- read-only is absolute: O_RDWR open fails EROFS, a shared writable mapping of a
  read-only fd fails EACCES (the other mutating calls are in test_errno.py);
- hostile keys ("../../x", absolute, NUL inside, "." / "..") cannot name
  anything outside the mount, nor make feedfs create files outside --cache-dir;
- the cache directory is 0700 and its files 0600;
- allow_other is off unless asked: another user cannot enter the mount;
- TLS certificates are checked by default; --no-verify-ssl warns loudly;
- secrets (secret key, session token, signatures) never reach the log;
- the daemon is not dumpable (no core dumps, no same-uid ptrace).
"""

import errno
import mmap
import os
import re
import ssl
import stat
import subprocess

import pytest

from conftest import content_for, is_mounted, pids_of_mount, run_feedfs, unmount

HOSTILE = ["../../escape-canary", "../up.txt", "/abs/key.txt", "//double", "a/../../b.txt",
           "./dot.txt", "ok/..", "ok/.", "nul\0inside.txt", "ok/nul\0dir/x", "ok/good.txt",
           "..", ".", "...", "ok/" + "x" * 300]


def err_of(fn, *a):
    try:
        r = fn(*a)
        if isinstance(r, int) and r >= 3:
            os.close(r)
    except OSError as e:
        return e.errno
    return 0


@pytest.fixture
def hostile(stub):
    stub.create_bucket("sec")
    for k in HOSTILE:
        stub.put("sec", k, content_for(k, 100))
    return stub


def stub_mount(feedfs_bin, stub, mnt, log, *args, env=None):
    cp, _ = run_feedfs(feedfs_bin, "s3://sec", mnt, args, endpoint=stub.url, log=log, env=env)
    assert cp.returncode == 0, cp.stderr
    return pids_of_mount(feedfs_bin, mnt)


def test_rdwr_open_erofs_and_shared_writable_mmap_eacces(mount, edge):
    m = mount(edge.name)
    p = m.p("top.txt")
    assert err_of(os.open, p, os.O_RDWR) == errno.EROFS
    assert err_of(os.open, p, os.O_WRONLY) == errno.EROFS
    fd = os.open(p, os.O_RDONLY)
    try:
        with pytest.raises(OSError) as ei:
            mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        assert ei.value.errno == errno.EACCES
        # a private writable mapping is allowed and must not reach the file
        mp = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        mp[0:1] = b"Z"
        mp.close()
    finally:
        os.close(fd)
    assert open(p, "rb").read() == edge.expected("top.txt")


def test_hostile_keys_stay_inside_mount_and_cache(feedfs_bin, hostile, tmp_path):
    root = tmp_path / "jail"
    root.mkdir()
    mnt = root / "mnt"
    mnt.mkdir()
    cdir = root / "cache"
    log = str(tmp_path / "sec.log")
    before = set(os.listdir(tmp_path)) | set(os.listdir(root))
    pids = stub_mount(feedfs_bin, hostile, str(mnt), log, "--cache-dir", str(cdir),
                      "--cache-size", "64M", "--block-size", "1M")
    try:
        seen = []
        for d, dirs, files in os.walk(str(mnt)):
            for n in dirs + files:
                assert n not in (".", "..") and "/" not in n and "\0" not in n
                full = os.path.join(d, n)
                assert os.path.realpath(full).startswith(str(mnt) + "/"), full
                seen.append(os.path.relpath(full, str(mnt)))
        for rel in seen:
            full = os.path.join(str(mnt), rel)
            if os.path.isfile(full):
                with open(full, "rb") as f:
                    assert f.read() == content_for(rel, 100), rel
        # what S3 would allow as a file: only the plain names show
        assert "ok/good.txt" in seen and "..." in seen
        for bad in ("escape-canary", "up.txt", "b.txt"):
            assert not os.path.exists(str(tmp_path / bad))
            assert not os.path.exists(str(root / bad))
        assert err_of(os.stat, str(mnt / ".." / ".." / "escape-canary")) == errno.ENOENT
    finally:
        assert not unmount(str(mnt), pids)
    # nothing appeared next to the mount or the cache, and the cache holds only its own files
    assert set(os.listdir(root)) == {"mnt", "cache"}
    assert set(os.listdir(tmp_path)) - before <= {"sec.log", "jail"}
    for n in os.listdir(str(cdir)):
        assert re.fullmatch(r"[a-z._-]+", n), n


def test_cache_dir_0700_files_0600(feedfs_bin, hostile, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cdir = tmp_path / "c" / "cache"
    os.makedirs(str(cdir.parent))
    old = os.umask(0)            # a lax umask must not loosen the cache
    try:
        pids = stub_mount(feedfs_bin, hostile, str(mnt), str(tmp_path / "l.log"),
                          "--cache-dir", str(cdir), "--cache-size", "64M", "--block-size", "1M")
    finally:
        os.umask(old)
    try:
        with open(str(mnt / "ok" / "good.txt"), "rb") as f:
            f.read()
        assert stat.S_IMODE(os.stat(str(cdir)).st_mode) == 0o700
        files = os.listdir(str(cdir))
        assert files
        for n in files:
            mode = stat.S_IMODE(os.lstat(str(cdir / n)).st_mode)
            assert mode & 0o077 == 0, "%s is %o" % (n, mode)
    finally:
        assert not unmount(str(mnt), pids)


def test_allow_other_off_by_default(mount, edge):
    m = mount(edge.name)
    with open("/proc/self/mountinfo") as f:
        line = [l for l in f if l.split()[4] == m.path][0].split()
    opts = line[5].split(",") + line[line.index("-") + 3].split(",")
    assert "allow_other" not in opts and "user_id=0" in opts, opts
    pid = os.fork()
    if pid == 0:                  # another user must not even stat the mount
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                os.stat(m.p("top.txt"))
                os._exit(0)
            except OSError as e:
                os._exit(100 + e.errno)
        except BaseException:
            os._exit(99)
    _, st = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(st) == 100 + errno.EACCES, os.WEXITSTATUS(st)


@pytest.fixture
def tls_stub(stub, tmp_path):
    """The stub behind TLS with a self-signed certificate for 127.0.0.1."""
    key, crt = str(tmp_path / "k.pem"), str(tmp_path / "c.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    stub.httpd.socket = ctx.wrap_socket(stub.httpd.socket, server_side=True)
    stub.create_bucket("sec")
    stub.put("sec", "hello.txt", b"hello\n")
    stub.tls_url = stub.url.replace("http://", "https://")
    return stub


def test_tls_verified_by_default_and_no_verify_warns(feedfs_bin, tls_stub, tmp_path):
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    env = {"AWS_CA_BUNDLE": ""}
    cp, _ = run_feedfs(feedfs_bin, "s3://sec", mnt, ["--connect-timeout", "5"],
                       endpoint=tls_stub.tls_url, log=str(tmp_path / "a.log"), env=env)
    assert cp.returncode == 1, cp
    assert re.search(rb"certificate|SSL|TLS", cp.stderr, re.I), cp.stderr
    assert not is_mounted(mnt)
    cp, _ = run_feedfs(feedfs_bin, "s3://sec", mnt, ["--no-verify-ssl"],
                       endpoint=tls_stub.tls_url, log=str(tmp_path / "b.log"), env=env)
    pids = pids_of_mount(feedfs_bin, mnt)
    try:
        assert cp.returncode == 0, cp.stderr
        assert b"WARNING" in cp.stderr and b"--no-verify-ssl" in cp.stderr
        with open(os.path.join(mnt, "hello.txt"), "rb") as f:
            assert f.read() == b"hello\n"
        with open(str(tmp_path / "b.log")) as f:
            assert "NOT checked" in f.read()
    finally:
        assert not unmount(mnt, pids)


def test_secrets_never_logged(feedfs_bin, hostile, tmp_path):
    secret = "SeCrEt0123456789abcdefSECRETkey/+xyz"
    token = "ToKeN-session-0123456789-TOKENvalue"
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    log = str(tmp_path / "debug.log")
    pids = stub_mount(feedfs_bin, hostile, mnt, log, "--log-level", "debug",
                      env={"AWS_SECRET_ACCESS_KEY": secret, "AWS_SESSION_TOKEN": token})
    try:
        with open(os.path.join(mnt, "ok", "good.txt"), "rb") as f:
            f.read()
        assert err_of(os.stat, os.path.join(mnt, "missing")) == errno.ENOENT
        hostile.deny = (403, "SignatureDoesNotMatch")   # failures are logged in detail
        assert err_of(os.listdir, os.path.join(mnt, "ok")) in (0, errno.EACCES)
        try:
            with open(os.path.join(mnt, "..."), "rb") as f:
                f.read()
        except OSError:
            pass
        hostile.deny = None
    finally:
        assert not unmount(mnt, pids)
    text = open(log, errors="replace").read()
    assert len(text) > 200
    for s in (secret, secret[:16], token, token[:16], "Signature=", "X-Amz-Security-Token:"):
        assert s not in text, "%r in the log" % s


def test_daemon_reports_not_dumpable(feedfs_bin, hostile, tmp_path):
    """The daemon reads PR_GET_DUMPABLE back after setting it, and logs it."""
    mnt = str(tmp_path / "mnt")
    os.mkdir(mnt)
    log = str(tmp_path / "d.log")
    pids = stub_mount(feedfs_bin, hostile, mnt, log, "--log-level", "debug")
    assert not unmount(mnt, pids)
    assert "PR_GET_DUMPABLE is 0" in open(log).read()


def test_daemon_not_dumpable(feedfs_bin, tmp_path):
    """Run the daemon as an unprivileged user: /proc/PID of a non-dumpable process
    belongs to root, of a dumpable one to its own uid. (Skipped where an
    unprivileged user cannot mount FUSE.)"""
    from s3stub import S3Stub
    st = S3Stub().start()
    st.create_bucket("sec")
    st.put("sec", "a.txt", b"a")
    import pathlib
    import shutil
    import tempfile
    d = pathlib.Path(tempfile.mkdtemp(prefix="feedfs-nobody-"))    # pytest's tmp is 0700 root
    os.chown(str(d), 65534, 65534)
    mnt = str(d / "mnt")
    os.mkdir(mnt)
    os.chown(mnt, 65534, 65534)
    log = str(d / "n.log")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER", HOME=str(d))
    try:
        cp = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                             feedfs_bin, "s3://sec", mnt, "--endpoint-url", st.url,
                             "--force-path-style", "--region", "us-east-1", "--log-file", log,
                             "--no-bdi-readahead"],
                            env=env, capture_output=True, timeout=60)
        if cp.returncode != 0:
            pytest.skip("cannot mount as an unprivileged user here: %r" % cp.stderr)
        pids = pids_of_mount(feedfs_bin, mnt)
        try:
            assert pids
            for pid in pids:
                s = os.stat("/proc/%d" % pid)
                real_uid = int(open("/proc/%d/status" % pid).read().split("Uid:")[1].split()[0])
                assert real_uid == 65534
                assert s.st_uid == 0, "daemon is dumpable (/proc/%d owned by %d)" % (pid, s.st_uid)
        finally:
            assert not unmount(mnt, pids)
    finally:
        st.stop()
        shutil.rmtree(str(d), ignore_errors=True)
