"""`ls -l` of a large directory must not cost one HEAD per entry.

s3rver's request log omits the method (its logger cuts it off), so it cannot tell a
HEAD from a GET; this test runs on the S3 stub, which counts requests by kind."""

import subprocess


def test_ls_l_no_head_per_entry(stub, mount):
    stub.create_bucket("plus")
    n = 1500
    for i in range(n):
        stub.put("plus", "d/f%05d.jpg" % i, b"x" * (i % 97))
    m = mount("plus", endpoint=stub.url)
    stub.reset_counts()
    out = subprocess.run(["ls", "-l", m.p("d")], capture_output=True, text=True, check=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("-")]
    assert len(lines) == n
    # sizes in ls -l come from the listing
    sizes = sorted(int(l.split()[4]) for l in lines)
    assert sizes == sorted(i % 97 for i in range(n))
    heads, gets, lists = stub.count("head"), stub.count("get"), stub.count("list")
    assert heads <= 5, "%d HEADs for ls -l of %d entries" % (heads, n)
    assert gets == 0, "%d GETs for ls -l" % gets
    assert lists <= 10, "%d LIST requests for one directory of %d entries" % (lists, n)
    # a second ls -l within the TTL costs nothing more than a relist
    stub.reset_counts()
    subprocess.run(["ls", "-l", m.p("d")], capture_output=True, check=True)
    assert stub.count("head") <= 5
