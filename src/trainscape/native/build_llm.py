"""cffi builder of ``trainscape.native._llm`` (API mode), the C port of the LLM cost model.

The ``cdef`` is the real text of ``csrc/trainscape.h`` and ``csrc/trainscape_layout.h`` with the
preprocessor guard and ``#include`` lines stripped (as pyca/pynacl and argon2-cffi-bindings feed
their headers to cffi), so the C declarations exist once. The sources compile as one translation
unit (``TS_UNITY_BUILD``) so the model's small functions inline across files; ``-O3``, and
``-fopenmp`` when the compiler has it (else the kernel splits a batch with pthreads).

Used by ``setup.py`` (``cffi_modules``) and runnable by hand to build in place::

    python src/trainscape/native/build_llm.py     # writes src/trainscape/native/_llm*.so
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

from cffi import FFI

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
CSRC = ROOT / "csrc"
HEADERS = ("trainscape_layout.h", "trainscape.h")
SOURCES = ("network.c", "collectives.c", "pipeline.c", "llm.c", "batch.c")
# The exhaustive sweep kernel (csrc/sweep.c, its ABI in sweep.h) calls the model's internals
# (ts_ctx, ts_evaluate_config); it joins the same translation unit when present.
if (CSRC / "sweep.c").exists() and (CSRC / "sweep.h").exists():
    HEADERS = (*HEADERS, "sweep.h")
    SOURCES = (*SOURCES, "sweep.c")
    # the embedding API (pack files, the scheduler query ts_llm_best) builds on the sweep kernel
    if (CSRC / "trainscape_embed.h").exists():
        HEADERS = (*HEADERS, "trainscape_embed.h")
        SOURCES = (*SOURCES, "best.c", "blocks_file.c")

_PREPROCESSOR = re.compile(r"^\s*#\s*(ifndef|ifdef|endif|include|if|else|elif|pragma)\b")
_GUARD_DEFINE = re.compile(r"^\s*#\s*define\s+\w+_H\s*$")


def cdef_text() -> str:
    """The public headers as cffi ``cdef`` input: guards and includes removed; integer
    ``#define`` constants and enums kept (cffi reads both)."""
    lines = []
    for name in HEADERS:
        for line in (CSRC / name).read_text().splitlines():
            if _PREPROCESSOR.match(line) or _GUARD_DEFINE.match(line):
                continue
            lines.append(line)
    text = "\n".join(lines)
    # cffi wants negative constants spelled without parentheses
    return re.sub(r"#define\s+(\w+)\s+\((-\d+)\)", r"#define \1 \2", text)


def _has_openmp(compiler: str | None = None) -> bool:
    """Whether the C compiler accepts -fopenmp (links a tiny OpenMP program)."""
    import setuptools  # noqa: F401  (provides distutils on Python >= 3.12)
    from distutils.ccompiler import new_compiler
    from distutils.errors import CompileError, LinkError
    from distutils.sysconfig import customize_compiler

    cc = new_compiler()
    customize_compiler(cc)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "omp.c")
        with open(src, "w") as f:
            f.write("#include <omp.h>\nint main(void){return omp_get_num_procs() > 0 ? 0 : 1;}\n")
        try:
            objs = cc.compile([src], output_dir=tmp, extra_postargs=["-fopenmp"])
            cc.link_executable(objs, os.path.join(tmp, "omp"), extra_postargs=["-fopenmp"])
        except (CompileError, LinkError, OSError):
            return False
    return True


def _flags() -> tuple[list[str], list[str], list[str]]:
    if sys.platform == "win32":
        return ["/O2", "/fp:precise"], [], []
    compile_args = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-std=c99"]
    link_args: list[str] = []
    libraries = ["m"]
    omp = os.environ.get("TRAINSCAPE_OPENMP", "auto")
    use_omp = omp == "1" or (omp == "auto" and _has_openmp())
    if use_omp:
        compile_args.append("-fopenmp")
        link_args.append("-fopenmp")
    else:
        compile_args.append("-pthread")
        link_args.append("-pthread")
    return compile_args, link_args, libraries


ffibuilder = FFI()
ffibuilder.cdef(cdef_text())
_compile_args, _link_args, _libraries = _flags()
ffibuilder.set_source(
    "trainscape.native._llm",
    "#define TS_UNITY_BUILD 1\n"
    + '#include "trainscape.h"\n'
    + "".join(f'#include "{s}"\n' for s in SOURCES),
    include_dirs=[str(CSRC)],
    # relative to the working directory (setup.py runs from the project root; setuptools wants
    # relative paths there)
    depends=[os.path.relpath(CSRC / f) for f in (*HEADERS, "ts_model.h", *SOURCES)],
    extra_compile_args=_compile_args,
    extra_link_args=_link_args,
    libraries=_libraries,
)

def install_in_place(built: str, package_dir: str, stem: str) -> str:
    """Put a freshly built extension into ``package_dir`` atomically (``os.replace``: a process
    that has the old one loaded keeps its mapping instead of crashing) and remove every other
    build of it there (an ``*.abi3.so`` from pip would otherwise shadow or be shadowed)."""
    import glob
    import shutil

    dest = os.path.join(package_dir, os.path.basename(built))
    tmp = dest + ".tmp"
    shutil.copy2(built, tmp)
    for other in glob.glob(os.path.join(package_dir, stem + ".*.so")):
        if other != dest:
            os.remove(other)
    os.replace(tmp, dest)
    return dest


if __name__ == "__main__":
    # developer build in place next to this file (pip install -e . is the usual way)
    built = ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=False)
    print("built", install_in_place(built, str(HERE), "_llm"))
