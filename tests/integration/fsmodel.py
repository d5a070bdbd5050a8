"""fsmodel — the tree a mount must show, computed from a bucket listing.

An independent statement of the rules in include/feedfs/fs.h, written from the
spec and not from feedfs' code, so that a test compares two implementations:
  - keys split on '/'; every proper prefix of a key is a directory (implicit);
  - a key ending in '/' is a directory marker: it makes that directory (empty or not);
  - a directory shadows a file of the same name;
  - a key whose path cannot be a POSIX name is hidden: an empty segment (`a//b`,
    `/x`), a `.` or `..` segment, a NUL byte, a segment over 255 bytes; the valid
    segments in front of the first bad one still are directories (`a//b` shows an
    empty `a/`: a listing reports the common prefix `a/` without what is below);
  - the key equal to the mount prefix itself (the prefix's own marker) is not an entry.
"""

NAME_MAX = 255


def segments_ok(segs):
    for s in segs:
        if s in ("", ".", "..") or "\0" in s or len(s.encode("utf-8", "surrogateescape")) > NAME_MAX:
            return False
    return True


def expected_tree(objects, prefix=""):
    """objects: iterable of (key, size) as listed without a delimiter.

    Returns (tree, hidden) where tree maps a relative path ('a/b') to ('d', None) or
    ('f', size), and hidden lists keys that must not appear.
    """
    dirs, files, hidden = set(), {}, []
    for key, size in objects:
        if not key.startswith(prefix):
            continue
        rel = key[len(prefix):]
        if rel == "":
            continue
        marker = rel.endswith("/")
        segs = rel[:-1].split("/") if marker else rel.split("/")
        if not segments_ok(segs):
            hidden.append(key)
            for i in range(1, len(segs)):
                if not segments_ok(segs[:i]):
                    break
                dirs.add("/".join(segs[:i]))
            continue
        for i in range(1, len(segs)):
            dirs.add("/".join(segs[:i]))
        if marker:
            dirs.add("/".join(segs))
        else:
            files["/".join(segs)] = size
    tree = {d: ("d", None) for d in dirs}
    for path, size in files.items():
        if path not in dirs:          # a directory shadows a file
            tree[path] = ("f", size)
    return tree, hidden


def walk_mount(root):
    """Walks a mounted tree: {relpath: ('d', None) | ('f', size)}. Follows nothing."""
    import os
    out = {}
    errors = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=errors.append):
        rel = os.path.relpath(dirpath, root)
        for n in dirnames:
            p = n if rel == "." else rel + "/" + n
            out[p] = ("d", None)
        for n in filenames:
            p = n if rel == "." else rel + "/" + n
            st = os.lstat(os.path.join(dirpath, n))
            out[p] = ("f", st.st_size)
    if errors:
        raise errors[0]
    return out


def diff_trees(want, got, limit=20):
    """Human-readable differences (empty when equal)."""
    lines = []
    for p in sorted(set(want) - set(got))[:limit]:
        lines.append("missing in mount: %r %s" % (p, want[p]))
    for p in sorted(set(got) - set(want))[:limit]:
        lines.append("unexpected in mount: %r %s" % (p, got[p]))
    for p in sorted(set(want) & set(got)):
        if want[p] != got[p] and len(lines) < 3 * limit:
            lines.append("differs: %r want %s got %s" % (p, want[p], got[p]))
    return lines


def add_quirk2_markers(objs):
    """s3rver leaves a prefix that holds only sub-prefixes out of CommonPrefixes
    (quirk 2): a delimited listing would not show that directory at all. Adds a
    marker (key + "/", no bytes) to objs ({key: bytes}) for exactly those
    directories, so that a tree uploaded to s3rver lists as the model says.
    Tests of such directories use the stub or RGW instead."""
    with_files = {k.rsplit("/", 1)[0] for k in objs if "/" in k.rstrip("/")}
    for k in list(objs):
        segs = k.rstrip("/").split("/")
        for n in range(1, len(segs)):
            d = "/".join(segs[:n])
            if d not in with_files and d + "/" not in objs:
                objs[d + "/"] = b""
    return objs
