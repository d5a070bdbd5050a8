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
        import mypy  # noqa: F401
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
