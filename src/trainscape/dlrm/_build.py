"""cffi builder (API mode) for ``trainscape.dlrm._native``: the DLRM C kernel.

Used by setup.py (``cffi_modules=["src/trainscape/dlrm/_build.py:ffibuilder"]``) or run
directly, ``python src/trainscape/dlrm/_build.py``, to build the extension in place.
"""

from __future__ import annotations

import os
import re

from cffi import FFI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CSRC = os.path.join(ROOT, "csrc")


def cdef_text() -> str:
    """The header without preprocessor lines and comments (cffi's cdef takes declarations)."""
    with open(os.path.join(CSRC, "dlrm.h"), encoding="utf-8") as fh:
        text = fh.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
ffibuilder.set_source(
    "trainscape.dlrm._native",
    '#include "dlrm.h"',
    # setuptools rejects absolute source paths; relative to the working directory (setup.py
    # runs from the project root)
    sources=[os.path.relpath(os.path.join(CSRC, "dlrm.c"))],
    include_dirs=[CSRC],
    extra_compile_args=["-O3", "-std=c99"],
    libraries=["m"],
)

if __name__ == "__main__":
    import shutil
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        so = ffibuilder.compile(tmpdir=tmp, verbose=False)
        dest = os.path.join(here, os.path.basename(so))
        shutil.copy(so, dest)
        print(dest)
