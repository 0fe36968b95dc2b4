"""Build shim. Metadata lives in pyproject.toml; this file declares only what pyproject cannot:
the cffi extension modules (the C kernel). The C build is optional: without a working C
compiler the install still succeeds, prints one warning line, and the numba and python backends
remain (``trainscape.backends.available_backends()`` says why ``c`` is missing)."""

import glob
import os

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))

CFFI_MODULES = ["src/trainscape/native/build_llm.py:ffibuilder",
                "src/trainscape/native/build_dlrm.py:ffibuilder"]


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed C build into one warning line instead of an error."""

    warned = False

    def run(self):
        # an in-place developer build (python src/trainscape/native/build_llm.py) is named
        # *.cpython-3XX-*.so, which Python prefers over the *.abi3.so built here: remove it so a
        # stale kernel can never shadow a fresh one
        for pattern in ("src/trainscape/native/_llm.cpython-*.so",
                        "src/trainscape/native/_dlrm.cpython-*.so"):
            for stale in glob.glob(os.path.join(HERE, pattern)):
                os.remove(stale)
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 - no compiler, missing headers, ...
            if not self.warned:  # else: the follow-up of a failure already reported
                self._warn("the C extensions", exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:  # noqa: BLE001
            self._remove_previous_build(ext.name)
            self._warn(ext.name, exc)

    def _remove_previous_build(self, name):
        # a failed rebuild must not leave the last good one in the source tree, where it would
        # keep running old code while the sources say otherwise: without it, the 'c' backend
        # reports itself missing instead
        stem = os.path.join(HERE, "src", *name.split("."))
        for old in glob.glob(stem + ".*.so") + glob.glob(stem + ".*.pyd"):
            os.remove(old)

    def _warn(self, what, exc):
        self.warned = True
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        print(f"WARNING: trainscape: could not build {what} ({reason}); a C compiler (e.g. gcc "
              "or clang) and the Python headers are needed for the 'c' backend -- the numba "
              "and python backends remain available.")


setup(cffi_modules=CFFI_MODULES, cmdclass={"build_ext": OptionalBuildExt})
