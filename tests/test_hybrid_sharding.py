"""Hybrid sharding (``job.dp_replicas``): ZeRO shards within groups of the data-parallel ranks
and replicates across them (PyTorch HSDP, MaxText dp x fsdp, Megatron's partial distributed
optimizer). Closed forms on every backend, the validity rule, and the scenario edge."""

import numpy as np
import pytest
from click.testing import CliRunner
from test_model_known_answers import FABRIC, NODE, _LLAMA, gpt_model, job, one_config, system

from trainscape import layout as L
from trainscape.backends import evaluate_blocks
from trainscape.cli import main
from trainscape.model import collectives as C
from trainscape.model import llm

MEM_FIELDS = (L.OUT_MEM_WEIGHTS_GIB, L.OUT_MEM_GRADS_GIB, L.OUT_MEM_OPTIMIZER_GIB)


def _run(backend, replicas, **cfg):
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    j = job(batch=128)
    j[L.JOB_DP_REPLICAS] = replicas
    out = evaluate_blocks(sys, mdl, j, one_config(**cfg), backend=backend)
    assert out[L.OUT_STATUS, 0] != L.STATUS_INVALID_CONFIG, cfg
    return out[:, 0]


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_or_one_replica_is_plain_sharding(backend, zero):
    # 0 in a packed block means 1: ZeRO over every data-parallel rank, bit for bit
    one = _run(backend, 1, dp=64, zero=zero, dp_overlap=1)
    np.testing.assert_array_equal(_run(backend, 0, dp=64, zero=zero, dp_overlap=1), one)


@pytest.mark.parametrize("zero", [1, 2, 3])
@pytest.mark.parametrize("replicas", [2, 8, 64])
def test_each_replica_holds_its_own_shards(backend, zero, replicas):
    # the ZeRO-sharded states grow by the replica count: each is sharded over dp / R ranks
    # (ZeRO-1: optimizer states; ZeRO-2: and gradients; ZeRO-3: and weights)
    base = _run(backend, 1, dp=64, zero=zero)
    hyb = _run(backend, replicas, dp=64, zero=zero)
    sharded = [L.OUT_MEM_OPTIMIZER_GIB] + ([L.OUT_MEM_GRADS_GIB] if zero >= 2 else [])
    for f in sharded:
        assert hyb[f] == pytest.approx(replicas * base[f], rel=1e-12), f
    if zero < 2:
        assert hyb[L.OUT_MEM_GRADS_GIB] == base[L.OUT_MEM_GRADS_GIB]
    # the optimizer step walks R times the states
    assert hyb[L.OUT_OPTIMIZER_S] == pytest.approx(replicas * base[L.OUT_OPTIMIZER_S], rel=1e-12)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_a_replica_per_rank_holds_what_no_zero_holds(backend, zero):
    # R = dp: shard groups of one rank, so weights, gradients and optimizer states are whole,
    # as without ZeRO
    plain = _run(backend, 1, dp=64, zero=0)
    whole = _run(backend, 64, dp=64, zero=zero)
    for f in MEM_FIELDS:
        assert whole[f] == pytest.approx(plain[f], rel=1e-12), f


def test_collectives_are_the_shard_group_s_plus_a_replica_all_reduce():
    # 64 GPUs, 8 a node, dp 64 in 8 replicas: each shard group is one node (stride 1), the
    # replicas 8 ranks apart; ZeRO-1 reduce-scatters and gathers inside the node, then
    # all-reduces its 1/8 shard of the gradients across the nodes
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    j = job(batch=128)
    j[L.JOB_DP_REPLICAS] = 8
    cfg = one_config(dp=64, zero=1)
    row = llm.row_terms(sys, mdl, j, cfg, 0)
    ordt = llm.order_terms(sys, mdl, j, row, 0)
    params = row[llm.ROW_DENSE_PARAMS]
    grads = params * j[L.JOB_GRAD_COMM_BYTES]
    rs_ar, ag = llm.data_parallel_comm(sys, j, row, ordt, 1)
    want_rs = C.reduce_scatter_time(sys, grads, 8, 1, 1, 1, 1, 1)
    want_ar = C.all_reduce_time(sys, grads / 8, 8, 8, 1, 1, 1, 1)
    want_ag = C.all_gather_time(sys, params * j[L.JOB_PARAM_BYTES], 8, 1, 1, 1, 1, 1)
    assert rs_ar == pytest.approx(want_rs + want_ar, rel=1e-12)
    assert ag == pytest.approx(want_ag, rel=1e-12)
    # inside the node the gathers ride NVLink: less than the flat group's over the fabric
    flat = job(batch=128)
    flat_rs, flat_ag = llm.data_parallel_comm(sys, flat, row, llm.order_terms(sys, mdl, flat,
                                                                             row, 0), 1)
    assert ag < flat_ag


@pytest.mark.parametrize("replicas,dp,ep,strategy,bad", [
    (3, 64, 1, L.SYNC_SYNCHRONOUS, True),      # 3 does not divide 64
    (4, 64, 1, L.SYNC_SYNCHRONOUS, False),
    (4, 64, 8, L.SYNC_SYNCHRONOUS, False),     # dp / ep = 8 ranks in 4 replicas
    (16, 64, 8, L.SYNC_SYNCHRONOUS, True),     # 16 does not divide dp / ep = 8
    (2, 4, 8, L.SYNC_SYNCHRONOUS, True),       # ep 8 folded over tp x dp: not split
    (2, 64, 1, L.SYNC_DILOCO, True),           # sites keep their own replicas
    (2.5, 64, 1, L.SYNC_SYNCHRONOUS, True),    # a hand-written block: not a whole number
    (np.nan, 64, 1, L.SYNC_SYNCHRONOUS, True),
    (128, 64, 1, L.SYNC_SYNCHRONOUS, True),    # more replicas than ranks
])
def test_replicas_must_split_the_data_parallel_ranks(replicas, dp, ep, strategy, bad):
    j = job()
    j[L.JOB_DP_REPLICAS] = replicas
    j[L.JOB_SYNC_STRATEGY] = strategy
    assert llm.dp_replicas_error(j, dp, ep) is bad


def test_a_layout_replicas_cannot_split_is_invalid_on_every_backend(backend):
    sys = system([NODE, FABRIC], gpus=64)
    mdl = gpt_model(layers=8, h=4096, heads=32)
    j = job(batch=128)
    j[L.JOB_DP_REPLICAS] = 3
    out = evaluate_blocks(sys, mdl, j, one_config(dp=64, zero=1), backend=backend)
    assert out[L.OUT_STATUS, 0] == L.STATUS_INVALID_CONFIG
    assert llm.config_error(sys, mdl, j, one_config(dp=64, zero=1), 0) == llm.DP_REPLICAS_ERROR
    field, message = llm.config_error_message(llm.DP_REPLICAS_ERROR)
    assert field == "dp" and "job.dp_replicas" in message


def test_scenario_setting_packs_and_doubles_the_shards():
    import trainscape
    from trainscape.spec import pack

    full = trainscape.load(_LLAMA, overrides=["config.zero=3"])
    hsdp = trainscape.load(_LLAMA, overrides=["config.zero=3", "job.dp_replicas=2"])
    assert pack(full)[2][L.JOB_DP_REPLICAS] == 1.0
    assert pack(hsdp)[2][L.JOB_DP_REPLICAS] == 2.0
    a, b = trainscape.evaluate(full), trainscape.evaluate(hsdp)
    for part in ("mem_optimizer_gib", "mem_grads_gib"):
        assert b.memory[part] == pytest.approx(2 * a.memory[part], rel=1e-9)
    assert b.compute_s == a.compute_s


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "two", "true"])
def test_bad_replicas_exit_2_naming_the_field(value):
    res = CliRunner().invoke(main, ["evaluate", _LLAMA, "--set", f"job.dp_replicas={value}"])
    assert res.exit_code == 2, res.output
    assert "job.dp_replicas" in res.stderr and "Traceback" not in res.output


def test_replicas_a_layout_cannot_take_exit_2_naming_both():
    res = CliRunner().invoke(main, ["evaluate", _LLAMA, "--set", "job.dp_replicas=7"])
    assert res.exit_code == 2, res.output
    assert "config.dp" in res.stderr and "job.dp_replicas" in res.stderr
