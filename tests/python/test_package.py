"""The package as users get it: its version is the daemon's, help(feedfs)
explains it, and (FEEDFS_TEST_INSTALLED=1: the wheel in a venv) it carries
its metadata and libfeedfs.so.1, which the device path loads from beside it."""
import importlib.metadata
import os
import pydoc
import re
import subprocess
import sys

import pytest

import feedfs
import feedfs.device
from conftest import INSTALLED, ROOT

installed_only = pytest.mark.skipif(not INSTALLED, reason="the source tree's package (make "
                                    "python-wheel-test tests the installed wheel)")


def header_version():
    with open(os.path.join(ROOT, "include", "feedfs", "options.h")) as f:
        m = re.search(r'^#define FEEDFS_VERSION "([^"]+)"$', f.read(), re.M)
    assert m, "no FEEDFS_VERSION in include/feedfs/options.h"
    return m.group(1)


def test_version_is_the_daemons():
    assert feedfs.__version__ == header_version()
    binary = os.environ.get("FEEDFS_BIN", os.path.join(ROOT, "build", "feedfs"))
    if not os.access(binary, os.X_OK):
        pytest.skip("%s is not built: --version not compared" % binary)
    cp = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0
    assert cp.stdout.split()[:2] == ["feedfs", feedfs.__version__]


def test_help_explains_the_package():
    text = pydoc.render_doc(feedfs, renderer=pydoc.plaintext)
    for what in ("docs/PYTHON.md", "feedfs.torch.FolderDataset", "OrderedSampler",
                 "feedfs.paddle", "send_order", "read_into", "__version__"):
        assert what in text, what
    for mod in ("feedfs.torch", "feedfs.paddle", "feedfs.order", "feedfs.datasets"):
        doc = sys.modules.get(mod) or __import__(mod, fromlist=["_"])
        assert len((doc.__doc__ or "").splitlines()) > 5, mod


@installed_only
def test_installed_from_the_wheel_with_metadata():
    assert os.path.realpath(feedfs.__file__).startswith(os.path.realpath(sys.prefix) + "/")
    assert sys.prefix != sys.base_prefix                    # a venv
    assert importlib.metadata.version("feedfs") == feedfs.__version__


@installed_only
def test_wheel_carries_libfeedfs():
    here = os.path.dirname(os.path.abspath(feedfs.__file__))
    assert os.path.isfile(os.path.join(here, "libfeedfs.so.1"))
    env = dict(os.environ)
    env.pop("FEEDFS_LIB", None)
    cp = subprocess.run([sys.executable, "-c", "import feedfs.device as d; l = d.library(); "
                         "print(d.library_path(), l.feedfs_open is not None)"],
                        capture_output=True, text=True, env=env, cwd="/", timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout == "%s True\n" % os.path.join(here, "libfeedfs.so.1")
