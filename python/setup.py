"""Only what pyproject.toml cannot say: a wheel that carries libfeedfs.so.1
(the Makefile's python-wheel target copies it into feedfs/ of a staged copy)
is platform-specific, tagged py3-none-<platform>: the library is loaded with
ctypes, so any CPython 3 on that platform can use it. Without the library the
wheel is pure (py3-none-any)."""
import os

from setuptools import Distribution, setup

HERE = os.path.dirname(os.path.abspath(__file__))
options = {}
if os.path.exists(os.path.join(HERE, "feedfs", "libfeedfs.so.1")):
    from wheel.bdist_wheel import bdist_wheel

    class PlatformDistribution(Distribution):
        # A binary inside: the wheel's root is platlib, its tag has a platform.
        def has_ext_modules(self):
            return True

    class BdistWheelPlatform(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    options = {"distclass": PlatformDistribution, "cmdclass": {"bdist_wheel": BdistWheelPlatform}}

setup(**options)
