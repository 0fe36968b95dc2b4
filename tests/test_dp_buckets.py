"""Data-parallel gradient buckets: Megatron-Core reduces (and gathers) a device's parameters
bucket by bucket, and the last bucket's reduction -- the first bucket's gather -- has no compute
left to hide behind (model.llm.dp_bucket_params, dp_last_bucket_share, bucketed_exposed)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from trainscape import layout as L
from trainscape.cli import main
from trainscape.model import llm
from trainscape.model.reference import evaluate_batch
from trainscape.spec import ScenarioError, load_scenario, pack_job
from trainscape.spec.pack import MEGATRON_DP_BUCKET, dp_bucket_rule

from test_model_known_answers import FABRIC, NODE, gpt_model, job, one_config, system
from test_spec import BASE


def megatron_job(seq=2048, batch=1024):
    j = job(seq=seq, batch=batch)
    j[L.JOB_DP_BUCKET_MIN_PARAMS], j[L.JOB_DP_BUCKET_PARAMS_PER_RANK] = MEGATRON_DP_BUCKET
    return j


def test_megatron_bucket_grows_with_the_data_parallel_size():
    j = megatron_job()
    assert llm.dp_bucket_params(j, 8.0) == 4e7  # the 40M floor
    assert llm.dp_bucket_params(j, 40.0) == 4e7
    assert llm.dp_bucket_params(j, 1024.0) == 1.024e9  # 1M per data-parallel rank
    assert llm.dp_bucket_params(job(), 1024.0) == 0.0  # no rule: no bucket limit


def test_last_bucket_share_by_hand():
    # 3.9e9 parameters in buckets of 1.024e9: 4 buckets, the last 1/4 of the traffic
    assert llm.dp_last_bucket_share(3.9e9, 1.024e9, 1.0) == 0.25
    # interleaved with 2 chunks: only the first chunk (1.95e9) is bucketed, in 2 buckets; the
    # second chunk reduces in one piece -- the last piece is 1/4 of the traffic
    assert llm.dp_last_bucket_share(3.9e9, 1.024e9, 2.0) == 0.25
    assert llm.dp_last_bucket_share(3.9e9, 4e7, 12.0) == 1.0 / (12 * math.ceil(3.9e9 / 4.8e8))
    assert llm.dp_last_bucket_share(3.9e9, 5e9, 1.0) == 1.0  # one bucket
    assert llm.dp_last_bucket_share(3.9e9, 0.0, 1.0) == 0.0  # no bucket limit


def simulated_exposed(comm, window, n):
    """n equal buckets ready at window * j / n (j = 1..n), each collective after the previous
    one: how long the last ends after the window."""
    end = 0.0
    for j in range(1, n + 1):
        end = max(end, window * j / n) + comm / n
    return end - window


@given(comm=st.floats(0.0, 10.0), window=st.floats(0.0, 10.0), n=st.integers(1, 64))
def test_bucketed_exposed_is_the_bucket_schedule(comm, window, n):
    got = llm.bucketed_exposed(comm, window, 1.0 / n, True)
    assert got == pytest.approx(simulated_exposed(comm, window, n), rel=1e-9, abs=1e-12)
    assert llm.bucketed_exposed(comm, window, 1.0 / n, False) == comm


def test_no_bucket_limit_is_the_plain_overlap():
    for comm, window in ((1.0, 3.0), (3.0, 1.0), (0.0, 1.0)):
        assert llm.bucketed_exposed(comm, window, 0.0, True) == llm.exposed(comm, window, True)


def test_stack_defaults_and_an_explicit_bucket():
    assert dp_bucket_rule(None, "megatron-core") == (4e7, 1e6)
    for stack in ("pytorch-fsdp", "jax-xla", "megatron-lm"):
        assert dp_bucket_rule(None, stack) == (0.0, 0.0)
    assert dp_bucket_rule(25_000_000, "pytorch-fsdp") == (2.5e7, 0.0)
    raw = copy.deepcopy(BASE)
    raw["job"]["dp_bucket_params"] = 100_000_000
    j = pack_job(load_scenario(raw))
    assert (j[L.JOB_DP_BUCKET_MIN_PARAMS], j[L.JOB_DP_BUCKET_PARAMS_PER_RANK]) == (1e8, 0.0)


@pytest.mark.parametrize("value", [0, -5, 1.5, "many", 10**16, True])
def test_bad_bucket_sizes_name_the_field(value):
    raw = copy.deepcopy(BASE)
    raw["job"]["dp_bucket_params"] = value
    with pytest.raises(ScenarioError) as info:
        load_scenario(raw)
    assert str(info.value).startswith("job.dp_bucket_params: "), str(info.value)


def test_bad_bucket_size_on_the_command_line_exits_2():
    res = CliRunner().invoke(main, ["evaluate", "examples/llama3-405b-2bldg.toml", "--set",
                                    "job.dp_bucket_params=0"])
    assert res.exit_code == 2, res.output
    assert "job.dp_bucket_params" in res.output and "Traceback" not in res.output


def test_one_bucket_exposes_the_whole_gradient_reduction(backend):
    from trainscape.backends import evaluate_blocks

    # 16 data-parallel ranks over 2 nodes, ZeRO-1 with overlap: with no bucket limit the
    # reduce-scatter and all-gather hide under the backward and forward; with a bucket larger
    # than the device's parameters every byte of both is exposed
    sys = system([NODE, FABRIC], gpus=16)
    mdl = gpt_model(layers=4, h=2048, heads=16, vocab=32000)
    cfg = one_config(dp=16, zero=1, dp_overlap=1)
    free = job(seq=2048, batch=64)
    one = free.copy()
    one[L.JOB_DP_BUCKET_MIN_PARAMS] = 1e15
    off = one_config(dp=16, zero=1, dp_overlap=0)
    got_free = evaluate_blocks(sys, mdl, free, cfg, backend=backend)
    got_one = evaluate_blocks(sys, mdl, one, cfg, backend=backend)
    not_overlapped = evaluate_blocks(sys, mdl, free, off, backend=backend)
    assert got_free[L.OUT_DP_COMM_S, 0] < got_one[L.OUT_DP_COMM_S, 0]
    assert got_one[L.OUT_DP_COMM_S, 0] == pytest.approx(not_overlapped[L.OUT_DP_COMM_S, 0],
                                                        rel=1e-12)
    for got, j in ((got_free, free), (got_one, one)):
        np.testing.assert_allclose(got, evaluate_batch(sys, mdl, j, cfg), rtol=1e-12, atol=0.0)


def test_megatron_buckets_expose_more_at_a_larger_data_parallel_size():
    # the same per-device work (weak scaling, 16 sequences per rank): the 1M-per-rank bucket
    # grows with DP, fewer buckets, a larger exposed last bucket
    mdl = gpt_model(layers=8, h=4096, heads=32, vocab=32000)
    exposed = []
    for dp in (8, 512):
        sys = system([NODE, FABRIC], gpus=dp)
        cfg = one_config(dp=dp, zero=1, dp_overlap=1)
        out = evaluate_batch(sys, mdl, megatron_job(batch=16 * dp), cfg)
        plain = evaluate_batch(sys, mdl, job(batch=16 * dp), cfg)
        exposed.append(out[L.OUT_DP_COMM_S, 0] - plain[L.OUT_DP_COMM_S, 0])
    assert 0.0 <= exposed[0] < exposed[1]
