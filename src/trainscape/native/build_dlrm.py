"""cffi builder (API mode) for ``trainscape.native._dlrm``: the DLRM C kernel.

Used by setup.py (``cffi_modules=["src/trainscape/native/build_dlrm.py:ffibuilder"]``) or run
directly, ``python src/trainscape/native/build_dlrm.py``, to build the extension in place.
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
    "trainscape.native._dlrm",
    # the source joins cffi's generated file, as the LLM kernel's do: no source path, so the
    # build works from any directory (setup.py's, or the temporary one of a build by hand)
    '#include "dlrm.h"\n#include "dlrm.c"\n',
    include_dirs=[CSRC],
    # dlrm.c compiles in the LLM port's network and collectives (one C truth for the tiers)
    depends=[os.path.relpath(os.path.join(CSRC, f)) for f in (
        "dlrm.h", "dlrm.c", "network.c", "collectives.c", "ts_model.h", "trainscape.h",
        "trainscape_layout.h")],
    extra_compile_args=["-O3", "-std=c99"],
    libraries=["m"],
)

if __name__ == "__main__":
    # developer build in place (pip install -e . is the usual way); the same atomic install as
    # the LLM kernel's builder
    import sys
    import tempfile

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from build_llm import install_in_place

    with tempfile.TemporaryDirectory() as tmp:
        built = ffibuilder.compile(tmpdir=tmp, verbose=False)
        print("built", install_in_place(built, os.path.dirname(os.path.abspath(__file__)),
                                        "_dlrm"))
