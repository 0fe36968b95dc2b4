"""The standalone C library: configure, build and install ``libtrainscape`` with CMake into a
temporary prefix, compile ``examples/c/scheduler.c`` against it with pkg-config (as
docs/embedding.md says a user does), run it on a pack file and check that it prints the same
best layouts as ``trainscape.best_for_allocation``.

Skipped only when a tool it needs is missing (cmake, a C compiler, pkg-config).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

import trainscape
from trainscape.embed import write_pack

ROOT = Path(__file__).resolve().parent.parent
ALLOCATIONS = (2048, 4096, 16384)

CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = [
    pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed"),
    pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc or clang) on PATH"),
    pytest.mark.skipif(shutil.which("pkg-config") is None, reason="pkg-config is not installed"),
]


def _run(cmd, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert res.returncode == 0, f"{cmd}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A prefix with the installed library; returns (prefix, env with PKG_CONFIG_PATH)."""
    tmp = tmp_path_factory.mktemp("libtrainscape")
    build, prefix = tmp / "build", tmp / "prefix"
    _run(["cmake", "-S", str(ROOT / "csrc"), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
          f"-DCMAKE_INSTALL_PREFIX={prefix}"])
    _run(["cmake", "--build", str(build), "--parallel"])
    _run(["cmake", "--install", str(build)])
    pcs = list(prefix.rglob("trainscape.pc"))
    assert len(pcs) == 1, pcs
    env = dict(os.environ, PKG_CONFIG_PATH=str(pcs[0].parent))
    return prefix, env


def test_install_layout(installed):
    prefix, env = installed
    libdir = Path(_run(["pkg-config", "--variable=libdir", "trainscape"], env=env).strip())
    assert (libdir / "libtrainscape.a").exists()
    assert any(libdir.glob("libtrainscape.so*")) or any(libdir.glob("libtrainscape*.dylib"))
    for header in ("trainscape.h", "trainscape_layout.h", "trainscape_embed.h", "sweep.h"):
        assert (prefix / "include" / "trainscape" / header).exists(), header
    version = _run(["pkg-config", "--modversion", "trainscape"], env=env).strip()
    assert version == trainscape.__version__


def test_c_example_prints_the_python_answer(installed, tmp_path, llama_example):
    prefix, env = installed
    flags = shlex.split(_run(["pkg-config", "--cflags", "--libs", "trainscape"], env=env))
    exe = tmp_path / "scheduler"
    _run([CC, "-std=c99", "-O2", str(ROOT / "examples" / "c" / "scheduler.c"), "-o", str(exe),
          *flags])
    sc = trainscape.load(llama_example)
    job = tmp_path / "job.tsp"
    write_pack(sc, job, candidates=True)
    libdir = _run(["pkg-config", "--variable=libdir", "trainscape"], env=env).strip()
    run_env = dict(os.environ, LD_LIBRARY_PATH=libdir, DYLD_LIBRARY_PATH=libdir)
    out = _run([str(exe), str(job), *map(str, ALLOCATIONS)], env=run_env)
    lines = {int(m.group(1)): m for m in re.finditer(
        r"^gpus=(\d+) best: .*step_time_s=([0-9.]+) .*cfg=([0-9,]+)$", out, flags=re.M)}
    assert sorted(lines) == sorted(ALLOCATIONS), out
    for gpus in ALLOCATIONS:
        want = trainscape.best_for_allocation(sc, gpus)
        m = lines[gpus]
        assert tuple(int(v) for v in m.group(3).split(",")) == want.column
        assert float(m.group(2)) == pytest.approx(want.result.step_time_s, abs=5e-7)


def test_c_example_refuses_a_file_of_another_layout(installed, tmp_path, llama_example):
    prefix, env = installed
    flags = shlex.split(_run(["pkg-config", "--cflags", "--libs", "trainscape"], env=env))
    exe = tmp_path / "scheduler"
    _run([CC, "-std=c99", str(ROOT / "examples" / "c" / "scheduler.c"), "-o", str(exe), *flags])
    job = tmp_path / "job.tsp"
    write_pack(trainscape.load(llama_example), job, candidates=True)
    data = bytearray(job.read_bytes())
    data[16] ^= 0xFF  # the layout hash
    job.write_bytes(bytes(data))
    libdir = _run(["pkg-config", "--variable=libdir", "trainscape"], env=env).strip()
    res = subprocess.run([str(exe), str(job)], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, LD_LIBRARY_PATH=libdir, DYLD_LIBRARY_PATH=libdir))
    assert res.returncode == 1
    assert "another block layout" in res.stderr


@pytest.mark.skipif(shutil.which("rustc") is None, reason="rustc is not installed (the Rust "
                    "example is optional)")
def test_rust_example_prints_the_python_answer(installed, tmp_path, llama_example):
    prefix, env = installed
    libdir = _run(["pkg-config", "--variable=libdir", "trainscape"], env=env).strip()
    exe = tmp_path / "scheduler_rs"
    _run(["rustc", "-O", str(ROOT / "examples" / "rust" / "scheduler.rs"), "-o", str(exe),
          "-L", libdir, "-l", "trainscape"])
    sc = trainscape.load(llama_example)
    job = tmp_path / "job.tsp"
    write_pack(sc, job, candidates=True)
    out = _run([str(exe), str(job), "4096"],
               env=dict(os.environ, LD_LIBRARY_PATH=libdir, DYLD_LIBRARY_PATH=libdir))
    want = trainscape.best_for_allocation(sc, 4096)
    m = re.search(r"gpus=4096 tp=(\d+) cp=(\d+) pp=(\d+) dp=(\d+) step_time_s=([0-9.]+)", out)
    assert m, out
    assert tuple(int(v) for v in m.groups()[:4]) == want.column[:4]
    assert float(m.group(5)) == pytest.approx(want.result.step_time_s, abs=5e-7)
