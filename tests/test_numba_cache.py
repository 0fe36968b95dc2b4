"""The numba kernels' on-disk cache is keyed by every source their compiled code depends on.

numba alone keys a cached function by its own file only; our kernels embed constants of
``trainscape.layout`` / ``trainscape.dlrm.layout`` and jitted twins of functions of other
modules, so a layout edit would load stale machine code. These tests prove the key moves with
any dependency's text, that the text is the one read at import, and that every kernel of the
package (LLM and DLRM) is cached through the one helper, :mod:`trainscape.native.numba_cache`.
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import sys
import warnings
from pathlib import Path

import numba
import pytest

from trainscape.native import numba_cache
from trainscape.dlrm import balance, incremental
from trainscape.dlrm import numba_kernel as dk
from trainscape.explore import kernel_numba as ek
from trainscape.model import numba_kernel as nk
from trainscape.space import kernels as sk

SRC = Path(numba_cache.__file__).parents[1]  # the package root

#: kernel module -> sources its compiled code reads (beyond its own)
KERNELS = {
    nk: ("trainscape.layout", "trainscape.model.llm", "trainscape.model.pipeline",
         "trainscape.model.collectives", "trainscape.model.network"),
    dk: ("trainscape.layout", "trainscape.dlrm.layout", "trainscape.dlrm.reference",
         "trainscape.model.collectives", "trainscape.model.network"),
    incremental: ("trainscape.layout", "trainscape.dlrm.layout", "trainscape.dlrm.numba_kernel",
                  "trainscape.dlrm.reference", "trainscape.model.network"),
    balance: ("trainscape.layout", "trainscape.dlrm.layout", "trainscape.dlrm.numba_kernel",
              "trainscape.dlrm.reference", "trainscape.dlrm.estimates"),
    ek: ("trainscape.layout", "trainscape.explore.reduce"),
}
CASES = [(mod, dep) for mod, deps in KERNELS.items() for dep in (mod.__name__, *deps)]


@pytest.mark.parametrize("mod,dep", CASES, ids=[f"{m.__name__}<-{d}" for m, d in CASES])
def test_key_moves_with_the_text_of_every_dependency(mod, dep, monkeypatch):
    before = numba_cache.cache_dir([mod])
    assert before == mod._njit.cache_dir  # the directory the kernels were built with
    assert dep in numba_cache.dependencies([mod])
    edited = numba_cache.source_text(dep).replace("\n", "\n\n", 1)  # a one-byte edit
    monkeypatch.setitem(numba_cache._SOURCES, dep, edited)
    after = numba_cache.cache_dir([mod])
    assert after != before
    assert os.path.dirname(after) == os.path.dirname(before)
    # the same edit passed explicitly gives the same key: the key is a function of the texts
    monkeypatch.undo()
    assert numba_cache.cache_dir([mod], sources={dep: edited}) == after
    assert numba_cache.cache_dir([mod]) == before


def test_layout_constant_edit_moves_the_llm_and_dlrm_keys(monkeypatch):
    text = numba_cache.source_text("trainscape.layout")
    m = re.search(r"^(MAX_TIERS\s*=\s*)(\d+)", text, re.M)
    assert m, "layout.py defines MAX_TIERS (N_SYS follows from it)"
    edited = text[:m.start(2)] + str(int(m.group(2)) + 1) + text[m.end(2):]
    before = {mod: numba_cache.cache_dir([mod]) for mod in (nk, dk, incremental, balance)}
    monkeypatch.setitem(numba_cache._SOURCES, "trainscape.layout", edited)
    for mod, old in before.items():
        assert numba_cache.cache_dir([mod]) != old, mod.__name__


def test_key_includes_numba_version(monkeypatch):
    before = numba_cache.cache_dir([nk])
    monkeypatch.setattr(numba, "__version__", numba.__version__ + ".post1")
    assert numba_cache.cache_dir([nk]) != before


def test_source_is_the_text_read_at_import_not_the_file_now(tmp_path, monkeypatch):
    """A source edited after its import keeps its key (the text read at import), and the
    helper notices the file no longer matches the imported bytecode: the process then caches
    privately rather than store old code under the new text's key."""
    monkeypatch.setattr(numba_cache, "_SOURCES", {})
    monkeypatch.setattr(numba_cache, "_IMPORTS", {})
    monkeypatch.setattr(numba_cache, "_UNVERIFIED", set())
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "ts_numba_cache_probe.py"
    path.write_text("K = 1\n")
    probe = importlib.import_module("ts_numba_cache_probe")
    monkeypatch.setitem(sys.modules, "ts_numba_cache_probe", probe)
    assert Path(importlib.util.cache_from_source(str(path))).exists()
    assert numba_cache.source_text(probe) == "K = 1\n"
    key = numba_cache.cache_key([probe])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shared = numba_cache.cache_dir([probe])  # source and bytecode agree: no warning
    assert shared.startswith(numba_cache.cache_root())

    path.write_text("K = 22\n")  # edited while the process runs
    assert numba_cache.source_text(probe) == "K = 1\n"
    assert numba_cache.cache_key([probe]) == key

    # a process that first reads the source after the edit cannot know what it compiled
    monkeypatch.setattr(numba_cache, "_SOURCES", {})
    monkeypatch.setattr(numba_cache, "_PRIVATE_DIR", [str(tmp_path / "private")])
    with pytest.warns(RuntimeWarning, match="changed since it was imported"):
        private = numba_cache.cache_dir([probe])
    assert private.startswith(str(tmp_path / "private"))
    assert not private.startswith(numba_cache.cache_root())


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("TRAINSCAPE_CACHE_DIR", raising=False)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert numba_cache.cache_root() == str(tmp_path / "xdg" / "trainscape")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "nb"))
    assert numba_cache.cache_root() == str(tmp_path / "nb" / "trainscape")
    monkeypatch.setenv("TRAINSCAPE_CACHE_DIR", str(tmp_path / "ts"))
    assert numba_cache.cache_root() == str(tmp_path / "ts")
    assert numba_cache.cache_dir([dk]).startswith(str(tmp_path / "ts" / "numba") + os.sep)


def _dispatchers(mod):
    return {k: v for k, v in vars(mod).items() if isinstance(v, numba.core.registry.CPUDispatcher)}


@pytest.mark.parametrize("mod", list(KERNELS), ids=[m.__name__ for m in KERNELS])
def test_every_cached_kernel_uses_the_shared_helper(mod):
    found = dict(_dispatchers(mod))
    if mod is nk:
        found.update(nk.jitted)
    if mod is dk:
        found.update(dk.JIT)
    own = {k: v for k, v in found.items() if v.py_func.__module__ == mod.__name__ or mod in (nk, dk)}
    assert own, f"no jitted function found in {mod.__name__}"
    directory = numba_cache.cache_dir([mod])
    for name, disp in own.items():
        assert disp._cache is not None and disp._cache._cache_path, name
        assert isinstance(disp._cache._impl.locator, numba.core.caching.UserProvidedCacheLocator), name
        assert Path(disp._cache._cache_path).is_relative_to(directory), name


def test_model_njit_kernels_cache_under_model_and_caller_sources():
    kernel = sk.model_njit(sk._codes_kernel, sk)
    assert Path(kernel._cache._cache_path).is_relative_to(numba_cache.cache_dir((nk, sk)))
    deps = numba_cache.dependencies((nk, ek))
    assert {"trainscape.layout", "trainscape.model.llm", "trainscape.explore.reduce",
            "trainscape.explore.kernel_numba"} <= set(deps)


def _cache_true_calls(path):
    tree = ast.parse(path.read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and any(k.arg == "cache" and isinstance(k.value, ast.Constant) and k.value.value is True
                    for k in n.keywords)]


def test_no_kernel_caches_next_to_its_source():
    """A ``cache=True`` call appears only where the helper sets the directory first."""
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if _cache_true_calls(p))
    assert users == ["native/numba_cache.py", "space/kernels.py"]
    assert "with caching_in(" in (SRC / "space" / "kernels.py").read_text()


def test_a_compiled_kernel_lands_in_its_keyed_directory(tmp_path, monkeypatch):
    """End to end, in a private root (the shared one may be cleared by other processes): a
    function compiled through the helper saves its index and code in the keyed directory."""
    monkeypatch.setenv("TRAINSCAPE_CACHE_DIR", str(tmp_path))
    njit = numba_cache.njit_for([incremental])
    assert njit.cache_dir == os.path.join(str(tmp_path), "numba",
                                          os.path.basename(incremental._njit.cache_dir))
    f = incremental.rec_cols.py_func
    twin = type(f)(f.__code__, f.__globals__, f.__name__)
    twin.__module__, twin.__qualname__ = f.__module__, f.__qualname__
    compiled = njit(twin)
    assert compiled(0) == f(0)
    saved = sorted(p.suffix for p in Path(njit.cache_dir).rglob("incremental.rec_cols-*"))
    assert saved == [".nbc", ".nbi"], saved
