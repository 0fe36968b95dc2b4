"""Embedding: pack files (``trainscape pack`` / ``ts_blocks_load``), the layout hash and the
scheduler query (``ts_llm_best`` / ``trainscape.best_for_allocation``).

The query's C kernel is held to the Python path it ports: ``design_space`` (the candidate set)
swept by the reference backend (``run_sweep(backend="python")``) -- same candidate count, same
winning configuration, same result columns -- on hand-picked and on generated spaces.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import trainscape
from trainscape import layout as L
from trainscape.cli import main
from trainscape.embed import best_for_allocation, read_pack, space_vector, write_pack
from trainscape.embed.best import native_best
from trainscape.embed.packfile import HEADER, PackFormatError, encode_pack
from trainscape.embed.space_vector import constrained_axes
from trainscape.spec import ScenarioError, pack

ROOT = Path(__file__).resolve().parent.parent
native = pytest.importorskip("trainscape.native.llm")
needs_c = pytest.mark.skipif(native.lib is None or not hasattr(native.lib, "ts_llm_best"),
                             reason="the C extension (with ts_llm_best) is not built")


# ------------------------------------------------------------------------------------------
# One source of truth, one layout
# ------------------------------------------------------------------------------------------


def test_library_unity_file_compiles_the_extension_sources():
    """csrc/trainscape_all.c (CMake's library) includes exactly the files, in the order, that
    the cffi extension compiles."""
    from trainscape.native import build_llm as _native_build

    text = (ROOT / "csrc" / "trainscape_all.c").read_text()
    included = re.findall(r'^#include "(\w+\.c)"', text, flags=re.M)
    assert tuple(included) == tuple(_native_build.SOURCES)


def test_layout_hash_is_fnv1a_of_the_layout_text():
    """FNV-1a 32 (offset basis 0x811c9dc5, prime 0x01000193) computed here byte by byte; the
    header's TS_LAYOUT_HASH is the same number."""
    h = 0x811C9DC5
    for b in L.layout_text().encode():
        h = ((h ^ b) * 0x01000193) % 2**32
    assert L.layout_hash() == h
    header = (ROOT / "csrc" / "trainscape_layout.h").read_text()
    assert int(re.search(r"TS_LAYOUT_HASH (0x[0-9A-F]+)", header).group(1), 16) == h


def test_layout_hash_changes_with_a_field(monkeypatch):
    before = L.layout_hash()
    monkeypatch.setattr(L, "GROUPS", tuple((n, f + ("extra",) if n == "JOB_FIELDS" else f, p)
                                           for n, f, p in L.GROUPS))
    assert L.layout_hash() != before


@needs_c
def test_extension_reports_the_layout_hash():
    assert native.lib.ts_layout_hash() == L.layout_hash()


# ------------------------------------------------------------------------------------------
# Pack files
# ------------------------------------------------------------------------------------------


def test_pack_file_round_trip(tmp_path, llama_example):
    sc = trainscape.load(llama_example)
    path = tmp_path / "job.tsp"
    size = write_pack(sc, path, candidates=True)
    assert path.stat().st_size == size
    got = read_pack(path)
    for a, b in zip((got.sys, got.mdl, got.job), pack(sc)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got.space, space_vector(constrained_axes(sc)))
    assert got.layout_hash == L.layout_hash()
    # header fields at their documented offsets
    data = path.read_bytes()
    assert data[:8] == b"TSBLOCKS"
    assert struct.unpack_from("<7I", data, 8)[3:6] == (L.N_SYS, L.N_MODEL, L.N_JOB)
    assert size == 40 + 8 * (L.N_SYS + L.N_MODEL + L.N_JOB) + 4 * got.space.size


def test_pack_without_candidates(tmp_path, gpt_example):
    path = tmp_path / "job.tsp"
    write_pack(trainscape.load(gpt_example), path)
    assert read_pack(path).space is None


def _patched(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack("<I", value) + data[offset + 4:]


@needs_c
def test_c_loader_reads_the_blocks_and_rejects_other_layouts(llama_example):
    ffi, lib = native.ffi, native.lib
    sc = trainscape.load(llama_example)
    sys_, mdl, job = pack(sc)
    space = space_vector(constrained_axes(sc))
    data = encode_pack(sys_, mdl, job, space)

    def parse(buf: bytes):
        out = ffi.new("ts_blocks **")
        code = lib.ts_blocks_parse(buf, len(buf), out)
        return code, out[0]

    code, b = parse(data)
    assert code == 0
    try:
        got = np.frombuffer(ffi.buffer(lib.ts_blocks_sys(b), 8 * L.N_SYS), dtype=np.float64)
        np.testing.assert_array_equal(got, sys_)
        got = np.frombuffer(ffi.buffer(lib.ts_blocks_job(b), 8 * L.N_JOB), dtype=np.float64)
        np.testing.assert_array_equal(got, job)
        n = ffi.new("int64_t *")
        ptr = lib.ts_blocks_space(b, n)
        assert n[0] == space.size
        np.testing.assert_array_equal(
            np.frombuffer(ffi.buffer(ptr, 4 * n[0]), dtype=np.int32), space)
        assert lib.ts_blocks_gpus(b) == sc.cluster.gpus
    finally:
        lib.ts_blocks_free(b)

    assert parse(_patched(data, 12, lib.TS_ABI_VERSION + 1))[0] == lib.TS_ERR_ABI
    assert parse(_patched(data, 16, L.layout_hash() ^ 1))[0] == lib.TS_ERR_LAYOUT
    assert parse(b"XXBLOCKS" + data[8:])[0] == lib.TS_ERR_FORMAT
    assert parse(_patched(data, 8, 2))[0] == lib.TS_ERR_FORMAT  # format version
    assert parse(data[:-4])[0] == lib.TS_ERR_FORMAT  # truncated
    assert parse(data[:20])[0] == lib.TS_ERR_FORMAT
    # a block value out of range: the field's code, as ts_check_blocks
    bad = sys_.copy()
    bad[L.SYS_HBM_BANDWIDTH] = -1.0
    code, _ = parse(encode_pack(bad, mdl, job))
    assert code == -(lib.TS_ERR_FIELD_BASE + lib.TS_ERR_BLOCK_STRIDE * lib.TS_ERR_BLOCK_SYS
                     + L.SYS_HBM_BANDWIDTH)
    out = ffi.new("ts_blocks **")
    assert lib.ts_blocks_load(b"/nonexistent/job.tsp", out) == lib.TS_ERR_IO
    assert out[0] == ffi.NULL


def test_python_reader_rejects_another_layout(tmp_path, gpt_example):
    path = tmp_path / "job.tsp"
    write_pack(trainscape.load(gpt_example), path)
    data = path.read_bytes()
    path.write_bytes(_patched(data, 16, L.layout_hash() ^ 1))
    with pytest.raises(PackFormatError, match="layout hash"):
        read_pack(path)


def test_pack_command(tmp_path, llama_example):
    out = tmp_path / "job.tsp"
    res = CliRunner().invoke(main, ["pack", str(llama_example), "--out", str(out),
                                    "--candidates", "--set", "space.zero=[1]"])
    assert res.exit_code == 0, res.output
    assert f"{L.layout_hash():#010x}" in res.output
    got = read_pack(out)
    sc = trainscape.load(llama_example, ["space.zero=[1]"])
    np.testing.assert_array_equal(got.space, space_vector(constrained_axes(sc)))


@pytest.mark.parametrize("args, needle", [
    (["--out", "/nonexistent-dir/job.tsp"], "--out"),
    (["--out", "{tmp}/x.tsp", "--set", "cluster.gpus=0"], "cluster.gpus"),
    ([], "--out"),
])
def test_pack_command_bad_input_exits_2(tmp_path, llama_example, args, needle):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    res = CliRunner().invoke(main, ["pack", str(llama_example), *args])
    assert res.exit_code == 2
    assert needle in res.output
    assert "Traceback" not in res.output


# ------------------------------------------------------------------------------------------
# The query: C kernel vs design_space + reference sweep
# ------------------------------------------------------------------------------------------


def _reference_best(sc, gpus, objective="step_time", constraints=None):
    """The winner by the Python path (design_space + the reference sweep), or None."""
    try:
        return best_for_allocation(sc, gpus, objective=objective, constraints=constraints,
                                   backend="python")
    except ScenarioError as exc:
        assert "no feasible layout" in str(exc)
        return None


def _assert_same(sc, gpus, objective="step_time", constraints=None):
    ref = _reference_best(sc, gpus, objective, constraints)
    try:
        got = best_for_allocation(sc, gpus, objective=objective, constraints=constraints,
                                  backend="c")
    except ScenarioError as exc:
        assert ref is None, f"C found nothing, the reference found {ref.config}: {exc}"
        return None
    assert ref is not None, f"C found {got.config}, the reference nothing"
    assert got.candidates == ref.candidates
    assert got.column == ref.column
    assert got.config == ref.config
    for name in L.OUTPUT_FIELDS:
        a, b = getattr(got.result, name), getattr(ref.result, name)
        if isinstance(a, float):
            assert a == pytest.approx(b, rel=1e-9, abs=0), name
        else:
            assert a == b, name
    return got


@needs_c
@pytest.mark.parametrize("example, gpus", [
    ("mixtral-8x7b-moe.toml", 64), ("mixtral-8x7b-moe.toml", 256),
    ("gpt3-175b-a100.toml", 1024), ("gpt3-175b-a100.toml", 1536),
])
@pytest.mark.parametrize("objective", ["step_time", "tokens_per_s", "mfu", "memory_gib"])
def test_c_query_equals_the_reference_sweep(examples_dir, example, gpus, objective):
    sc = trainscape.load(examples_dir / example, ["space.order=[\"tp-cp-ep-dp-pp\", "
                                                  "\"tp-cp-pp-dp\", \"tp-pp-dp\"]"])
    assert _assert_same(sc, gpus, objective) is not None


@needs_c
def test_c_query_with_a_listed_dp_axis(llama_example):
    """dp given as a constraint (the scenario derives it): only listed degrees are searched."""
    sc = trainscape.load(llama_example, ["space.zero=[1]", "space.schedule=[\"1f1b\"]"])
    got = _assert_same(sc, 4096, constraints={"dp": [16, 32, 64]})
    assert got is not None and got.config["dp"] in (16, 32, 64)


@needs_c
@given(tp=st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1),
       cp=st.sets(st.sampled_from([1, 2]), min_size=1),
       pp=st.sets(st.sampled_from([1, 2, 4, 8]), min_size=1),
       mbs=st.sets(st.sampled_from([1, 2]), min_size=1),
       schedule=st.sets(st.sampled_from(["1f1b", "interleaved", "zb-h1", "zb-v"]), min_size=1),
       recompute=st.sets(st.sampled_from(["none", "selective", "full"]), min_size=1),
       zero=st.sets(st.sampled_from([0, 1, 2, 3]), min_size=1),
       dp_overlap=st.sets(st.booleans(), min_size=1),
       sp=st.one_of(st.none(), st.sets(st.booleans(), min_size=1)),
       tp_overlap=st.sets(st.booleans(), min_size=1),
       dp=st.one_of(st.none(), st.sets(st.sampled_from([1, 2, 4, 8, 16]), min_size=1)),
       gpus=st.sampled_from([8, 16, 32, 48, 64]),
       objective=st.sampled_from(["step_time", "tokens_per_s", "memory_gib"]))
def test_c_query_equals_the_reference_on_generated_spaces(gpt_example, tp, cp, pp, mbs,
                                                           schedule, recompute, zero,
                                                           dp_overlap, sp, tp_overlap, dp,
                                                           gpus, objective):
    """A 13B-class model on up to 64 A100s, random axis subsets (sp by rule or listed, dp
    derived or listed): same candidate count and winner (or both none)."""
    overrides = ["cluster.gpus=64", "model.layers=40", "model.hidden=5120", "model.heads=40", "model.kv_heads=40",
                 "model.ffn_hidden=20480", "job.global_batch=64",
                 'space.order=["tp-cp-dp-pp", "tp-pp-dp", "dp-tp-pp"]']
    for name, values in (("tp", tp), ("cp", cp), ("pp", pp), ("mbs", mbs),
                         ("schedule", schedule), ("recompute", recompute), ("zero", zero),
                         ("dp_overlap", dp_overlap), ("sp", sp), ("tp_overlap", tp_overlap),
                         ("dp", dp)):
        if values is None:
            continue
        vals = sorted(values)
        text = ", ".join(f'"{v}"' if isinstance(v, str) else str(v).lower() for v in vals)
        overrides.append(f"space.{name}=[{text}]")
    overrides.append("space.vpp=[1, 2]")
    data = trainscape.load(gpt_example).raw_dump()
    data.pop("config")  # the allocation's layout is the answer
    sc = trainscape.load(data, overrides)
    _assert_same(sc, gpus, objective)


@needs_c
def test_c_query_candidates_equal_design_space_size(llama_example):
    from trainscape.space import design_space

    sc = trainscape.load(llama_example)
    axes = constrained_axes(sc)
    sys_, mdl, job = pack(sc)
    for gpus in (2048, 4096, 16384):
        code, cfg, out, stats = native_best(sys_, mdl, job, space_vector(axes), gpus,
                                            L.OUT_STEP_TIME_S)
        data = sc.raw_dump()
        data.pop("config")
        ds = design_space(trainscape.load(data, [f"cluster.gpus={gpus}"]), axes)
        assert code == 0
        assert stats[native.lib.TS_BEST_ST_CANDIDATES] == ds.size
        assert int(cfg[L.CFG_TP]) * cfg[L.CFG_CP] * cfg[L.CFG_PP] * cfg[L.CFG_DP] == gpus
        assert out[L.OUT_FEASIBLE] == 1.0


@needs_c
def test_c_query_error_codes(llama_example):
    lib = native.lib
    sc = trainscape.load(llama_example)
    sys_, mdl, job = pack(sc)
    space = space_vector(constrained_axes(sc))
    capacity = 8 * 1024 * 2
    assert native_best(sys_, mdl, job, space, 0, L.OUT_STEP_TIME_S)[0] == lib.TS_ERR_GPUS
    assert native_best(sys_, mdl, job, space, capacity + 8,
                       L.OUT_STEP_TIME_S)[0] == lib.TS_ERR_GPUS
    assert native_best(sys_, mdl, job, space, 4096, L.OUT_BUBBLE_S)[0] == lib.TS_ERR_OBJECTIVE
    assert native_best(sys_, mdl, job, space[:-1], 4096,
                       L.OUT_STEP_TIME_S)[0] == lib.TS_ERR_SPACE
    broken = space.copy()
    broken[0] = 0  # tp with no value
    assert native_best(sys_, mdl, job, broken, 4096, L.OUT_STEP_TIME_S)[0] == lib.TS_ERR_SPACE
    bad = mdl.copy()
    bad[L.MDL_HIDDEN] = 0
    code = native_best(sys_, bad, job, space, 4096, L.OUT_STEP_TIME_S)[0]
    assert code == -(lib.TS_ERR_FIELD_BASE + lib.TS_ERR_BLOCK_STRIDE * lib.TS_ERR_BLOCK_MDL
                     + L.MDL_HIDDEN)


# ------------------------------------------------------------------------------------------
# The Python API's input checks
# ------------------------------------------------------------------------------------------


def test_top_level_function(llama_example):
    got = trainscape.best_for_allocation(llama_example, 4096)
    tp, cp, pp, dp = (got.config[k] for k in ("tp", "cp", "pp", "dp"))
    assert tp * cp * pp * dp == 4096
    assert got.result.feasible
    assert got.result.step_time_s > 0


def test_constraints_restrict_the_space(llama_example):
    got = best_for_allocation(llama_example, 4096, constraints={"tp": [2, 4], "pp": [8]})
    assert got.config["tp"] in (2, 4) and got.config["pp"] == 8
    free = best_for_allocation(llama_example, 4096)
    assert got.candidates < free.candidates
    assert got.result.step_time_s >= free.result.step_time_s


@pytest.mark.parametrize("kwargs, path", [
    ({"gpus": 0}, "gpus"),
    ({"gpus": True}, "gpus"),
    ({"gpus": 4096.0}, "gpus"),
    ({"gpus": 40000}, "gpus"),  # more than the tiers hold
    ({"gpus": 4096, "sites": [2048, 2048]}, "sites"),  # not modelled: refused
    ({"gpus": 4096, "sites": [2048, 1024]}, "sites"),  # does not add up
    ({"gpus": 4096, "sites": [4096, 0]}, "sites[1]"),
    ({"gpus": 4096, "objective": "fastest"}, "objective"),
    ({"gpus": 4096, "constraints": {"tpp": [1]}}, "constraints.tpp"),
    ({"gpus": 4096, "constraints": {"tp": [16]}}, "constraints.tp"),
    ({"gpus": 4096, "constraints": {"tp": 8}}, "constraints.tp"),
    ({"gpus": 4096, "constraints": {"zero": [7]}}, "constraints.zero"),
    ({"gpus": 4096, "constraints": {"ep": [0]}}, "constraints.ep"),
    ({"gpus": 4096, "gpu_type": "no-such-gpu"}, "cluster.gpu"),
    ({"gpus": 4096, "backend": "fortran"}, "backend"),
    ({"gpus": 3}, "gpus"),  # no layout of 3 GPUs
])
def test_bad_input_names_the_argument(llama_example, kwargs, path):
    with pytest.raises(ScenarioError) as info:
        best_for_allocation(llama_example, **kwargs)
    assert str(info.value).startswith(path), str(info.value)
    assert "\n" not in str(info.value)


def test_one_site_and_a_gpu_type_are_accepted(llama_example):
    base = best_for_allocation(llama_example, 4096)
    assert best_for_allocation(llama_example, 4096, sites=[4096]).column == base.column
    other = best_for_allocation(llama_example, 4096, gpu_type="h100-sxm-80gb")
    assert other.column == base.column


def test_rust_example_constants_match_the_layout():
    """examples/rust/scheduler.rs copies a few header constants (it has no bindgen): they
    must be this layout's, or it would read the wrong columns."""
    text = (ROOT / "examples" / "rust" / "scheduler.rs").read_text()

    def const(name):
        return int(re.search(rf"const {name}: \w+ = (0x[0-9A-Fa-f_]+|\d+);", text)
                   .group(1).replace("_", ""), 0)

    abi = int(re.search(r"#define TS_ABI_VERSION (\d+)",
                        (ROOT / "csrc" / "trainscape.h").read_text()).group(1))
    assert const("ABI_VERSION") == abi
    assert const("LAYOUT_HASH") == L.layout_hash()
    assert (const("N_CFG"), const("N_OUT")) == (L.N_CFG, L.N_OUT)
    assert const("OUT_STEP_TIME_S") == L.OUT_STEP_TIME_S
    assert [L.CFG_TP, L.CFG_CP, L.CFG_PP, L.CFG_DP] == [0, 1, 2, 3]  # cfg[0..4] printed
