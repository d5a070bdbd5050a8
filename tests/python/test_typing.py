"""The package is typed (py.typed, annotations) and a type checker uses it:
mypy --strict passes on the package and on a typed user (typed/good.py),
and rejects each wrong call of typed/bad.py on its line. Under
FEEDFS_TEST_INSTALLED=1 mypy reads the installed package (the wheel's),
which it does only because of its py.typed marker."""
import os
import subprocess
import sys

import pytest

from conftest import INSTALLED, ROOT

HERE = os.path.dirname(os.path.abspath(__file__))


def mypy(*args):
    try:
        import mypy  # noqa: F401 -- only whether it is there
    except ImportError:
        pytest.fail("mypy is not installed (Debian: mypy; tests/deps.sh installs it)")
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if not INSTALLED:
        env["MYPYPATH"] = os.path.join(ROOT, "python")
    cp = subprocess.run([sys.executable, "-m", "mypy", "--config-file", os.path.join(HERE, "mypy.ini"),
                         "--cache-dir=/dev/null", "--no-error-summary", "--hide-error-context",
                         *args], capture_output=True, text=True, env=env, cwd=HERE, timeout=300)
    return cp.returncode, cp.stdout + cp.stderr


def test_package_passes_mypy_strict():
    rc, out = mypy("-p", "feedfs")
    assert (rc, out) == (0, "")


def test_typed_user_passes():
    rc, out = mypy(os.path.join("typed", "good.py"))
    assert (rc, out) == (0, "")


def test_wrong_calls_are_caught_on_their_lines():
    rc, out = mypy(os.path.join("typed", "bad.py"))
    errors = sorted((int(line.split(":")[1]), line.rsplit("[", 1)[-1].rstrip("]"))
                    for line in out.splitlines() if ": error: " in line)
    assert rc == 1, out
    assert errors == [(6, "assignment"), (7, "arg-type"), (8, "arg-type"), (9, "list-item"),
                      (10, "assignment"), (11, "call-overload")], out


def test_py_typed_marker_is_shipped():
    import feedfs
    assert os.path.isfile(os.path.join(os.path.dirname(feedfs.__file__), "py.typed"))


def doc_examples():
    """{name: code} of docs/PYTHON.md's complete examples (```python blocks
    that start with "# feedfs example: <name>")."""
    with open(os.path.join(ROOT, "docs", "PYTHON.md")) as f:
        text = f.read()
    out = {}
    for block in text.split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        first = code.splitlines()[0]
        if first.startswith("# feedfs example: "):
            out[first.split(": ", 1)[1]] = code
    return out


def test_doc_examples_pass_mypy(tmp_path):
    ex = doc_examples()
    assert sorted(ex) == ["paddle", "plain", "pytorch"]
    files = []
    for name, code in ex.items():
        p = tmp_path / ("example_%s.py" % name)
        p.write_text(code)
        files.append(str(p))
    rc, out = mypy(*files)
    assert (rc, out) == (0, "")
