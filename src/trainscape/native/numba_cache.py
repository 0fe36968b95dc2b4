"""Where compiled numba code is cached on disk, for every numba kernel of the package.

numba's own cache (``cache=True`` alone) lives next to the source in ``__pycache__`` and is
invalidated only when the jitted function's *own* file changes. Our kernels read constants of
other modules (``trainscape.layout``, ``trainscape.dlrm.layout``, field indices, block sizes)
and call jitted twins of functions defined elsewhere, all of which are frozen into the machine
code: after an edit to one of those, numba would silently load stale code. So every kernel is
compiled with ``numba.config.CACHE_DIR`` pointing at a directory keyed by a hash of numba's
version and the source text of *every* module its compiled code depends on: the kernel module
and, transitively, each ``trainscape`` module it imports at module level (see
:func:`dependencies`).

The source text hashed is read once per process, when a kernel module is imported (the
dependencies were imported just before), and kept (:func:`source_text`): a file edited while
the process runs does not change the key of code compiled from the old text. When a source on
disk no longer matches the bytecode Python imported (its ``.pyc`` records another mtime or
size), the code that will be compiled is not the text we can read, and the kernels of this
process are cached in a private temporary directory instead, shared with no other process.
"""

from __future__ import annotations

import ast
import atexit
import hashlib
import importlib.util
import os
import shutil
import struct
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

PACKAGE = __name__.split(".")[0]  # "trainscape"

#: module name -> source text as first read in this process
_SOURCES: dict[str, str] = {}
#: module name -> names of the package's modules it imports at module level
_IMPORTS: dict[str, tuple[str, ...]] = {}
#: module names whose source on disk did not match the imported bytecode when read
_UNVERIFIED: set[str] = set()
_PRIVATE_DIR: list[str] = []


def _name(module) -> str:
    return module if isinstance(module, str) else module.__name__


def _origin(name: str) -> str:
    mod = sys.modules.get(name)
    spec = getattr(mod, "__spec__", None) or importlib.util.find_spec(name)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        raise ValueError(f"{name}: no Python source to key a numba cache on")
    return spec.origin


def _matches_bytecode(path: str, data: bytes) -> bool:
    """False when ``path``'s ``.pyc`` says the module was imported from other text (another
    mtime / size, or another hash for hash-based pycs); True when it agrees or there is none."""
    try:
        pyc = Path(importlib.util.cache_from_source(path)).read_bytes()[:16]
        st = os.stat(path)
    except (OSError, NotImplementedError, ValueError):
        return True
    if len(pyc) < 16 or pyc[:4] != importlib.util.MAGIC_NUMBER:
        return True
    flags = struct.unpack("<I", pyc[4:8])[0]
    if flags & 1:  # hash-based pyc (PEP 552)
        return pyc[8:16] == importlib.util.source_hash(data)
    mtime, size = struct.unpack("<II", pyc[8:16])
    return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (len(data) & 0xFFFFFFFF)


def source_text(module) -> str:
    """The source of ``module`` (a module or its dotted name), read once per process."""
    name = _name(module)
    if name not in _SOURCES:
        path = _origin(name)
        data = Path(path).read_bytes()
        if not _matches_bytecode(path, data):
            _UNVERIFIED.add(name)
        _SOURCES[name] = data.decode("utf-8")
    return _SOURCES[name]


def _resolve(node: ast.ImportFrom, package: str) -> str:
    if node.level:
        base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        return f"{base}.{node.module}" if node.module else base
    return node.module or ""


def _is_module(name: str) -> bool:
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _imports(name: str) -> tuple[str, ...]:
    """The package's modules ``name`` imports at module level (not inside functions: jitted
    code reads module globals only)."""
    if name in _IMPORTS:
        return _IMPORTS[name]
    is_pkg = os.path.basename(_origin(name)) == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found: list[str] = []

    def visit(body):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, package)
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    found.append(sub if a.name != "*" and _is_module(sub) else base)
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, field, None)
                    if isinstance(inner, list):
                        visit(inner)

    visit(ast.parse(source_text(name)).body)
    mine = tuple(sorted({m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}))
    _IMPORTS[name] = mine
    return mine


def dependencies(modules) -> tuple[str, ...]:
    """Sorted names of ``modules`` and every package module they import at module level,
    transitively: all the sources compiled code from ``modules`` can depend on."""
    seen: set[str] = set()
    todo = [_name(m) for m in modules]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imports(name))
    return tuple(sorted(seen))


def cache_key(modules, sources=None) -> str:
    """Hex digest of numba's version and the source of every module in
    :func:`dependencies` ``(modules)``. ``sources`` (name -> text) overrides the text of some
    of them (the text read at import otherwise)."""
    import numba

    digest = hashlib.sha256(f"numba {numba.__version__}\n".encode())
    for name in dependencies(modules):
        text = (sources or {}).get(name)
        if text is None:
            text = source_text(name)
        digest.update(f"{name}\n{len(text)}\n".encode())
        digest.update(text.encode())
    return digest.hexdigest()


def cache_root() -> str:
    """Root of the caches: ``TRAINSCAPE_CACHE_DIR``; else ``$NUMBA_CACHE_DIR/trainscape`` when
    numba's cache is pointed somewhere (a read-only home, say); else
    ``$XDG_CACHE_HOME/trainscape`` (``~/.cache/trainscape``)."""
    if os.environ.get("TRAINSCAPE_CACHE_DIR"):
        return os.environ["TRAINSCAPE_CACHE_DIR"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        return os.path.join(os.environ["NUMBA_CACHE_DIR"], "trainscape")
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"),
                        "trainscape")


def _private_dir() -> str:
    if not _PRIVATE_DIR:
        path = tempfile.mkdtemp(prefix="trainscape-numba-")
        atexit.register(shutil.rmtree, path, True)
        _PRIVATE_DIR.append(path)
    return _PRIVATE_DIR[0]


def cache_dir(modules, sources=None) -> str:
    """numba cache directory for code compiled from ``modules`` (see :func:`cache_key`)."""
    key = cache_key(modules, sources)[:16]
    if _UNVERIFIED.intersection(dependencies(modules)):
        warnings.warn(
            f"trainscape: source of {sorted(_UNVERIFIED)} changed since it was imported; "
            "numba kernels of this process are cached privately", RuntimeWarning, stacklevel=2)
        return os.path.join(_private_dir(), key)
    return os.path.join(cache_root(), "numba", key)


@contextmanager
def caching_in(directory: str):
    """``numba.config.CACHE_DIR`` set to ``directory`` while ``cache=True`` functions are
    created (numba picks a function's cache locator when it is decorated)."""
    import numba

    previous = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = directory
    try:
        yield directory
    finally:
        numba.config.CACHE_DIR = previous


def njit_for(modules, **defaults):
    """``numba.njit`` with ``cache=True`` and the cache in :func:`cache_dir` ``(modules)``,
    computed once, here: call it at the import of the kernel module, with that module among
    ``modules``. Use as ``njit = njit_for([sys.modules[__name__]])``, then ``@njit`` or
    ``@njit(inline="always")``. ``defaults``: options of every function it compiles (e.g.
    ``error_model="numpy"``: IEEE division by zero, as the reference on NumPy scalars)."""
    import numba

    directory = cache_dir(modules)

    def njit(fn=None, **options):
        def decorate(f):
            with caching_in(directory):
                return numba.njit(cache=True, **{**defaults, **options})(f)

        return decorate if fn is None else decorate(fn)

    njit.cache_dir = directory
    return njit


__all__ = ["cache_dir", "cache_key", "cache_root", "caching_in", "dependencies", "njit_for",
           "source_text"]
