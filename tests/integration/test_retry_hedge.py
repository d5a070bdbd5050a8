"""Retries by cause and hedged requests, seen from the proxy (issue 20).

feedfs reads through fault_proxy.py, which logs every request with the number
of the client connection it came on. What is asserted is behaviour, never
timing:
  - a 500, a reset or a short body is retried on a connection that was never
    used before (a fresh one); a 503 SlowDown is not (it backs off and takes
    whatever idle connection there is); the retry counters by cause equal the
    faults the proxy injected;
  - a stalled GET, HEAD or LIST gets a hedge, a second request for the same
    bytes, and the reader gets the right bytes (SHA-256 against the upload);
  - the client's request count is exactly what the proxy saw, and equals
    operations + retries + hedges.
The delay before each retry (backoff for throttling, none for the rest) is a
unit test (test_sigv4.c t_retry_delay_by_cause): a delay is timing.
"""

import os
import threading
import urllib.parse

import pytest

from conftest import content_for, feedfs_stats, settled_stats, sha256
from fault_proxy import FaultProxy

MIB = 1 << 20
SEED = 20261201
SMALL = {"r/s%02d.bin" % i: 3000 + i * 37_001 for i in range(24)}      # 3 KB .. 850 KB
BIG = {"r/big.bin": 12 * MIB + 333}
ARGS = ["--part-size", "1M", "--max-memory", "64M"]


@pytest.fixture(scope="module")
def rbucket(s3):
    name = "retry-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=name)
    data = {}
    for k, n in list(SMALL.items()) + list(BIG.items()):
        data[k] = content_for(k, n)
        s3.put_object(Bucket=name, Key=k, Body=data[k])
    return name, data


@pytest.fixture
def fproxy(s3server):
    p = FaultProxy(s3server.url, seed=SEED).start()
    yield p
    p.stop()


def read_all(m, data, keys, threads=4):
    """Reads keys whole with `threads` readers; returns {key: problem} (empty
    when every file read back exactly as uploaded)."""
    todo, bad, lock = list(keys), {}, threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                k = todo.pop()
            try:
                with open(m.p(k), "rb") as f:
                    got = f.read()
                if sha256(got) != sha256(data[k]):
                    bad[k] = "wrong bytes (%d of %d)" % (len(got), len(data[k]))
            except OSError as e:
                bad[k] = "errno %d" % e.errno
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not any(t.is_alive() for t in ts), "a reader hung"
    return bad


def first_use(log):
    """conn -> index in log of the first request it carried."""
    seen = {}
    for i, e in enumerate(log):
        seen.setdefault(e[0], i)
    return seen


def retries_of(log, i):
    """Index of the next request after log[i] for the same method, target and
    Range (the retry, or a hedge), or None."""
    conn, method, target, rng, _ = log[i]
    for j in range(i + 1, len(log)):
        if log[j][1:4] == (method, target, rng):
            return j
    return None


def accounting(st, proxy):
    """Every request counted reached the proxy, but for hedges cut when their
    twin won: closing one may reset its connection with the request unread."""
    s3 = st["s3"]
    lost = s3["hedges_started"] - s3["hedges_won"]
    assert 0 <= s3["requests"] - len(proxy.log) <= lost, (s3, len(proxy.log))
    assert s3["requests"] == (s3["gets"] + s3["heads"] + s3["lists"] + s3["retries"] +
                              s3["hedges_started"]), s3
    gets = sum(1 for e in proxy.log if e[1] == "GET" and e[3])
    assert 0 <= s3["get_requests"] - gets <= lost, (s3, gets)


@pytest.mark.parametrize("kind,counter", [("500", "retries_server"), ("reset", "retries_network"),
                                          ("short", "retries_network")])
def test_plain_errors_retry_on_a_fresh_connection(kind, counter, mount, fproxy, rbucket):
    bucket, data = rbucket
    m = mount(bucket, "", *ARGS, endpoint=fproxy.url)
    fproxy.set_fault(kind, rate=0.4, repeat=1)
    bad = read_all(m, data, sorted(SMALL) + sorted(BIG))
    assert not bad, bad
    st = settled_stats(m)
    fproxy.clear()
    log = list(fproxy.log)
    faulted = [i for i, e in enumerate(log) if e[4] == kind]
    assert len(faulted) == fproxy.count(kind) > 3, (len(faulted), fproxy.count(kind))
    assert st["s3"][counter] == len(faulted), st["s3"]
    assert st["s3"]["retries_throttle"] == 0 and st["s3"]["errors"] == 0, st["s3"]
    first = first_use(log)
    for i in faulted:
        j = retries_of(log, i)
        assert j is not None, "no retry of %r" % (log[i],)
        assert log[j][4] is None, log[j]
        # the retry opened its own connection: it is the first request on it
        assert first[log[j][0]] == j, ("retry of %r went on connection %d, used since request %d"
                                       % (log[i], log[j][0], first[log[j][0]]))
    accounting(st, fproxy)


def test_throttling_retries_without_a_fresh_connection(mount, fproxy, rbucket):
    """The idle keep-alive connection is taken for the retry after a 503
    SlowDown, which is a load signal, not a broken connection. One connection
    at most: with more, the small-file prefetch's GETs may hold every open
    connection at the moment of a retry, which then rightly opens another."""
    bucket, data = rbucket
    m = mount(bucket, "", *ARGS, "--max-connections", "1", endpoint=fproxy.url)
    fproxy.set_fault("503", rate=0.4, repeat=1)
    keys = sorted(SMALL)
    for k in keys:                      # one at a time: no competition for connections
        with open(m.p(k), "rb") as f:
            assert sha256(f.read()) == sha256(data[k]), k
    st = settled_stats(m)
    fproxy.clear()
    log = list(fproxy.log)
    faulted = [i for i, e in enumerate(log) if e[4] == "503"]
    assert len(faulted) > 3
    assert st["s3"]["retries_throttle"] == len(faulted), st["s3"]
    assert st["s3"]["retries_server"] == st["s3"]["retries_network"] == 0, st["s3"]
    first = first_use(log)
    reused = 0
    for i in faulted:
        j = retries_of(log, i)
        assert j is not None and log[j][4] is None
        reused += first[log[j][0]] < j
    assert reused == len(faulted), "%d of %d throttled retries on a new connection" % (
        len(faulted) - reused, len(faulted))
    accounting(st, fproxy)


def test_stalled_get_is_hedged_and_bytes_are_right(mount, fproxy, rbucket):
    """GETs stall mid-body for far longer than --stall-timeout would allow
    for: each is answered by a hedge, the bytes are right, and the stall
    watchdog never had to cut anything."""
    bucket, data = rbucket
    # a budget that cannot run out here: every stall can be hedged
    m = mount(bucket, "", *ARGS, "--stall-timeout", "30", "--hedge-budget", "100",
              endpoint=fproxy.url)
    # 12 s is far past a hedge's delay; a primary whose hedge stalled too
    # waits it out (below), so a longer stall only makes the test slower
    fproxy.stall_s = 12
    # warm up the tail estimate on clean requests first
    assert not read_all(m, data, sorted(SMALL)[:4])
    fproxy.set_fault("stall", rate=0.12, repeat=1)
    os.system("echo 3 > /proc/sys/vm/drop_caches 2>/dev/null")
    bad = read_all(m, data, sorted(SMALL)[4:] + sorted(BIG))
    st = feedfs_stats(m)
    fproxy.clear()
    assert not bad, bad
    log = list(fproxy.log)
    stalled = [i for i, e in enumerate(log) if e[4] == "stall"]
    assert stalled, "the schedule stalled nothing"
    # a hedge for the rest of a part asks for a range of its own, which the
    # schedule may stall too: then that primary waits for the proxy to end
    # the stall, and is retried. Every other stalled GET was won by a hedge.
    ends = {}
    twice = 0
    for i in stalled:
        _, _, target, rng, _ = log[i]
        key = (target, rng.split("-")[1])
        twice += key in ends
        ends[key] = i
    s3 = st["s3"]
    assert s3["hedges_won"] >= len(stalled) - 2 * twice, (s3, len(stalled), twice)
    assert s3["hedges_started"] >= s3["hedges_won"] and s3["stalls"] >= s3["hedges_started"], s3
    assert s3["retries_stall"] == 0 and s3["errors"] == 0, s3
    for i in stalled:
        _, _, target, rng, _ = log[i]
        end = rng.split("-")[1]
        # a hedge asks for the same bytes, or the rest of them (same last byte)
        assert any(e[2] == target and e[3] and e[3].endswith("-" + end) for e in log[i + 1:]), \
            "no hedge for %r" % (log[i],)


def test_no_hedges_with_a_zero_budget(mount, fproxy, rbucket):
    """--hedge-budget 0: a stall is waited out (here the proxy ends it after
    2 s and the read is retried), and no second request is ever sent."""
    bucket, data = rbucket
    m = mount(bucket, "", *ARGS, "--hedge-budget", "0", endpoint=fproxy.url)
    fproxy.stall_s = 2
    fproxy.set_fault("stall", rate=0.3, repeat=1)
    # Every file the prefetch may fetch is read, so every stalled GET is one
    # a reader waited for (a stalled prefetch of a file not read could still
    # be out, not yet seen as a stall, when the counters were read).
    keys = sorted(SMALL)
    bad = read_all(m, data, keys)
    st = settled_stats(m)
    fproxy.clear()
    assert not bad, bad
    assert fproxy.count("stall") > 0
    assert st["s3"]["hedges_started"] == st["s3"]["hedges_won"] == 0, st["s3"]
    assert st["s3"]["stalls"] >= 1, st["s3"]
    accounting(st, fproxy)


def test_lookups_in_one_directory_do_not_wait_for_each_other(mount, fproxy, rbucket):
    """The kernel runs lookups of one directory in parallel only when the INIT
    reply says so, which feedfs sets itself (src/fs/dirops.c): a lookup
    stuck on a stalled LIST (no hedging here, and no listing cache) must not
    hold up a lookup of another name in the same directory. Which one ends
    first is the check; $FEEDFS_PARALLEL_DIROPS=0 turns the order round."""
    bucket, data = rbucket
    m = mount(bucket, "", *ARGS, "--metadata-ttl", "0", "--hedge-budget", "0",
              endpoint=fproxy.url)
    fproxy.stall_s = 6
    assert os.path.isdir(m.p("r"))
    fproxy.set_target("r/s05.bin/", "stall")      # the lookup's LIST of "r/s05.bin/"
    order, started = [], threading.Event()

    def slow():
        started.set()
        order.append(("slow", os.stat(m.p("r/s05.bin")).st_size))

    t = threading.Thread(target=slow, daemon=True)
    t.start()
    started.wait(5)
    for _ in range(200):                          # the LIST is at the proxy
        if fproxy.count("stall"):
            break
        threading.Event().wait(0.02)
    assert fproxy.count("stall") == 1
    order.append(("fast", os.stat(m.p("r/s06.bin")).st_size))
    t.join(30)
    fproxy.clear()
    assert order == [("fast", SMALL["r/s06.bin"]), ("slow", SMALL["r/s05.bin"])], order


def test_lookup_waits_for_the_listing_in_flight(mount, fproxy, s3):
    """A lookup in a directory with no listing lists that directory's subtree
    (here its first page stalled by the proxy); a lookup of another name in
    the same directory meanwhile waits for that listing and answers from it:
    no LIST or HEAD of its own reaches the store, the fs counts it joined,
    and after both the whole directory is answered from the cache."""
    from conftest import put_many
    bucket = "joined-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=bucket)
    keys = {"k%04d" % i: content_for("k%04d" % i, 10 + i % 7) for i in range(1050)}
    put_many(s3, bucket, sorted(keys.items()))
    m = mount(bucket, "", "--hedge-budget", "0", endpoint=fproxy.url)
    fproxy.stall_s = 3
    before = feedfs_stats(m)["fs"]
    # the root's subtree listing: "prefix=" with nothing after it, first page
    fproxy.set_target(lambda t: t.endswith("?encoding-type=url&list-type=2&prefix="), "stall")
    first = threading.Thread(target=lambda: open(m.p("k0001"), "rb").read(), daemon=True)
    first.start()
    for _ in range(250):
        if fproxy.count("stall"):
            break
        threading.Event().wait(0.02)
    assert fproxy.count("stall") == 1, fproxy.log[-3:]
    n_log = len(fproxy.log)
    with open(m.p("k0777"), "rb") as f:
        assert f.read() == keys["k0777"]
    first.join(30)
    fproxy.clear()
    mine = [e for e in fproxy.log[n_log:] if "k0777" in urllib.parse.unquote(e[2]) and
            (e[1] == "HEAD" or not e[3])]
    assert not mine, mine
    after = feedfs_stats(m)["fs"]
    assert after["lookups_joined"] == before["lookups_joined"] + 1, after
    assert after["lookup_listings"] == before["lookup_listings"] + 1, after
    # everything else in the directory is answered without a request
    n_log = len(fproxy.log)
    for k in ("k0002", "k1049", "nope"):
        os.path.exists(m.p(k))
    assert not [e for e in fproxy.log[n_log:] if e[1] == "HEAD" or not e[3]], fproxy.log[n_log:]


def test_a_stall_curl_reconnects_in_silence_does_not_end_hedging(mount, fproxy, rbucket):
    """A HEAD whose connection stalls and then closes is sent again by curl
    itself on a new connection (it had no answer on a reused connection), so
    the attempt succeeds with a gap as long as the stall. Counted in the
    hedge delay's tail, that gap raised the delay past the stall and no later
    stall was hedged (a reader then waited out each one in full). The next
    stall must still be hedged."""
    bucket, _ = rbucket
    m = mount(bucket, "", *ARGS, "--stall-timeout", "60", "--metadata-ttl", "0",
              "--hedge-budget", "100", endpoint=fproxy.url)
    keys = sorted(SMALL)
    # Enough clean HEADs for the delay to come from the store's tail, not the
    # cap (32), but so few that one more outlier is the tail (the p99 of
    # under 100) and the delay follows each sample (under 48).
    for i in range(20):
        os.stat(m.p(keys[i % len(keys)]))
    st0 = feedfs_stats(m)["s3"]
    assert 32 <= st0["heads"] <= 44, st0
    # The HEAD and its hedge both stall; the attempt ends in curl's own
    # reconnect (the third try of the proxy's schedule passes).
    fproxy.stall_s = 3
    fproxy.set_target(lambda t: t.endswith("/" + keys[5]), "stall", repeat=2)
    assert os.stat(m.p(keys[5])).st_size == SMALL[keys[5]]
    st1 = settled_stats(m)["s3"]
    # (at least: on a loaded machine a slow LIST of the lookup may be hedged too)
    assert st1["hedges_started"] >= st0["hedges_started"] + 1, (st0, st1)
    # Another stall, the same length: a hedge answers it.
    fproxy.set_target(lambda t: t.endswith("/" + keys[6]), "stall")
    assert os.stat(m.p(keys[6])).st_size == SMALL[keys[6]]
    st2 = settled_stats(m)["s3"]
    fproxy.clear()
    assert st2["stalls"] >= st1["stalls"] + 1, (st1, st2)
    assert st2["hedges_won"] >= st1["hedges_won"] + 1, (st1, st2)
    assert st2["errors"] == 0, st2


def test_stalled_lookups_are_hedged(mount, fproxy, rbucket):
    """Listings and HEADs stall too (every request may): each stalled one gets
    a twin, and every file opened by path reads back right."""
    bucket, data = rbucket
    m = mount(bucket, "", *ARGS, "--stall-timeout", "60", "--metadata-ttl", "0",
              "--hedge-budget", "100", endpoint=fproxy.url)
    # A stall 15x the longest hedge delay (1 s) and well under --stall-timeout,
    # so only a hedge ends it early. Not longer: a hedge that stalls as well
    # (8% of hedges) costs its reader the whole stall, and on a loaded machine
    # a few of those in one reader's files came near read_all's 120 s.
    fproxy.stall_s = 15
    fproxy.set_mix(0.08, kinds=("stall",))
    bad = read_all(m, data, sorted(SMALL), threads=2)
    st = feedfs_stats(m)
    fproxy.clear()
    assert not bad, bad
    log = list(fproxy.log)
    meta = [i for i, e in enumerate(log) if e[4] == "stall" and (e[1] == "HEAD" or not e[3])]
    assert meta, "the schedule stalled no LIST or HEAD"
    for i in meta:
        assert retries_of(log, i) is not None, "no hedge for %r" % (log[i],)
    assert st["s3"]["hedges_won"] >= 1 and st["s3"]["errors"] == 0, st["s3"]


def test_a_listing_page_cut_short_is_asked_for_again(mount, fproxy, s3):
    """A listing answer that is well-formed HTTP but whose XML is cut (a proxy, a
    server restarting) is a fault on the wire: asked for again, counted as a body
    retry, and the walk finds every key. Before, the page failed at once, and the
    subtree listing's fall-back could lose a directory on servers that leave
    directories holding only directories out of delimiter listings (s3rver)."""
    from conftest import put_many
    bucket = "cut-%d" % (os.getpid() % 100000)
    s3.create_bucket(Bucket=bucket)
    keys = {"d/e/k%04d" % i: content_for("cut%04d" % i, 10 + i % 7) for i in range(1050)}
    keys["top.txt"] = b"top"
    put_many(s3, bucket, sorted(keys.items()))
    m = mount(bucket, "", "--hedge-budget", "0", endpoint=fproxy.url)
    before = feedfs_stats(m)["s3"]
    # the second page of the root's subtree listing
    fproxy.set_target(lambda t: "continuation-token" in t, "cut")
    found = {}
    for root, _, files in os.walk(m.path):
        for f in files:
            p = os.path.join(root, f)
            found[os.path.relpath(p, m.path)] = os.path.getsize(p)
    fproxy.clear()
    assert fproxy.count("cut") == 1, fproxy.log[-3:]
    assert found == {k: len(v) for k, v in keys.items()}
    after = feedfs_stats(m)["s3"]
    assert after["retries_body"] == before["retries_body"] + 1, after
    assert after["errors"] == before["errors"], after
    with open(m.p("d/e/k1049"), "rb") as f:
        assert f.read() == keys["d/e/k1049"]


def test_a_read_that_fails_costs_one_chain_of_attempts(mount, fproxy, rbucket):
    """A read whose GET fails every attempt gets EIO after --max-retries attempts,
    once: the kernel asks again for the first page of a failed readahead at once,
    and that second request must not start a second chain of attempts (twice the
    wait for the same EIO)."""
    import errno
    bucket, data = rbucket
    key = "r/s05.bin"
    m = mount(bucket, "", *ARGS, "--max-retries", "2", "--hedge-budget", "0",
              endpoint=fproxy.url)
    assert os.path.getsize(m.p(key)) == len(data[key])
    fproxy.set_target(key, "500", repeat=1000)
    n_log = len(fproxy.log)
    with pytest.raises(OSError) as ei:
        with open(m.p(key), "rb") as f:
            f.read()
    assert ei.value.errno == errno.EIO
    gets = [e for e in fproxy.log[n_log:] if e[1] == "GET" and e[3]]
    fproxy.clear()
    assert len(gets) == 2, gets
    with open(m.p(key), "rb") as f:                  # and the error is not kept
        assert f.read() == data[key]
