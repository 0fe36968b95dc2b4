"""The two 2021-22 Megatron-LM tables (A100), in their own column layouts.

Each calibration source is a CSV shipped in ``trainscape/data/calibration`` (copied from the
project's shared calibration folder, which cites the papers). A row becomes a scenario -- the
model dimensions, GPU count and parallel layout of the published run, on the GPU and cluster
presets of the machine it ran on -- and the model predicts its step time.

- Narayanan et al., SC'21, Table 1 (Megatron-LM on Selene, DGX A100 80GB): fp16, full
  recomputation, the interleaved schedule, no sequence parallelism (it came later), no
  distributed optimizer, gradient all-reduce after the backward pass (2021 Megatron-LM), no
  FlashAttention. The table gives achieved TFLOP/s per GPU counted with eq. (3), so the
  published step time is that FLOP count / (TFLOP/s * GPUs). It does not list the microbatch
  size or the number of interleaved chunks; the paper reports its best tuned runs, so the
  prediction takes the fastest configuration that fits memory over the values it leaves open
  (microbatch 1..8, chunks dividing the layers per stage), and reports which it took.
- Korthikanti et al. 2022, Table 5: iteration times for full recomputation and for sequence
  parallelism + selective recomputation, everything else listed in the row.

Constants are fitted per GPU type (never per row) by ``scripts/calibrate.py`` and stored with
their provenance in ``trainscape/presets/calibrated.toml``; ``trainscape validate`` reports
every row.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from .. import layout as L
from .. import presets
from ..model.llm import megatron_flops_per_iteration

GPU = "a100-sxm-80gb"
CLUSTER = "dgx-a100-superpod"
SELENE_NODES = 560  # Selene: 560 DGX A100 nodes on one HDR InfiniBand fabric (SC'21 §5)
VOCAB = 51200  # GPT-2 BPE vocabulary padded as in Megatron-LM (SC'21 §5.1)
SEQ = 2048
#: the software-stack profile both tables ran (presets/stacks.toml): 2021-22 Megatron-LM
STACK = "megatron-lm"

#: calibration source id -> (file, citation)
SOURCES = {
    "megatron_sc21_table1": (
        "megatron_sc21_table1.csv",
        "Narayanan et al., Efficient Large-Scale Language Model Training on GPU Clusters "
        "Using Megatron-LM, SC'21, Table 1",
    ),
    "korthikanti_table5": (
        "korthikanti_table5.csv",
        "Korthikanti et al., Reducing Activation Recomputation in Large Transformer Models, "
        "2022, Table 5",
    ),
}

@dataclass
class Case:
    """One published measurement and the scenario that reproduces it (``scenario`` without
    its cluster, which :func:`selene_cluster` builds)."""

    source: str
    label: str
    scenario: dict[str, Any]
    candidates: list[dict[str, Any]]  # configs to try (one when the row lists every knob)
    published_step_s: float
    published_tflops: float | None  # per GPU, Megatron eq. (3) counting; None if not given
    flops: float  # FLOPs of one iteration as the source counts them


@dataclass
class Prediction:
    case: Case
    step_s: float
    config: dict[str, Any]
    breakdown: dict[str, float] = field(default_factory=dict)
    feasible: bool = True
    memory_gib: float = 0.0

    @property
    def error(self) -> float:
        """Signed relative error of the step time (prediction / published - 1)."""
        return self.step_s / self.case.published_step_s - 1.0


def read_source(source: str) -> list[dict[str, str]]:
    """The rows of a shipped calibration CSV."""
    name, _ = SOURCES[source]
    text = resources.files("trainscape.data.calibration").joinpath(name).read_text()
    return list(csv.DictReader(text.splitlines()))


def gpt_model(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    """A GPT-style decoder as both papers train it: GeLU MLP of 4h, multi-head attention."""
    return {"layers": layers, "hidden": hidden, "ffn_hidden": 4 * hidden, "heads": heads,
            "vocab": VOCAB, "mlp": "gelu"}


#: a cluster preset's host-side fields a scenario's ``[cluster]`` takes as they are
HOST_FIELDS = ("host_ddr_gb", "host_to_device_GBps", "host_memory_GBps")


def preset_cluster(preset: str, gpus: int, gpu_overrides: dict[str, Any] | None = None,
                   calibrated: bool = True, min_outer_size: int | None = None) -> dict[str, Any]:
    """A cluster preset as a scenario's ``[cluster]``: its tiers, its GPU's constants
    (calibrated or microbenchmark) with ``gpu_overrides`` on top, and the second tier at least
    ``min_outer_size`` domains large (default: enough domains of the first tier for ``gpus``)."""
    cluster = presets.cluster(preset)
    tiers = [{k: v for k, v in t.items() if k != "source"} for t in cluster["tiers"]]
    if min_outer_size is None:
        min_outer_size = gpus // tiers[0]["size"] + 1
    tiers[1]["size"] = max(tiers[1]["size"], min_outer_size)
    # the GPU by name: the scenario resolves its constants for the job's dtype and stack
    # (presets.resolve_gpu, the same path as a scenario file's), overrides on top
    gpu = {"preset": cluster["gpu"], "calibrated": calibrated, **(gpu_overrides or {})}
    # the host side the preset states (a run that offloads activations or the optimizer
    # reaches host memory through it)
    host = {k: cluster[k] for k in HOST_FIELDS if cluster.get(k) is not None}
    return {"gpu": gpu, "gpus": gpus, "tiers": tiers, **host}


def gpt_scenario(name: str, layers: int, hidden: int, heads: int, batch: int,
                 dtype: str) -> dict[str, Any]:
    """A published GPT run as a scenario (without its cluster): sequence 2048, and no
    FlashAttention -- both sources predate it."""
    return {"name": name, "model": gpt_model(layers, hidden, heads),
            "job": {"seq_len": SEQ, "global_batch": batch, "dtype": dtype,
                    "flash_attention": False, "stack": STACK}}


def megatron_config(tp: int, pp: int, dp: int, mbs: int, vpp: int, recompute: str,
                    sp: bool) -> dict[str, Any]:
    """A layout as 2021-22 Megatron-LM ran it: Megatron's rank order, the interleaved schedule
    when there are chunks, no distributed optimizer, and gradient reduction and TP
    communication not overlapped with compute (both came later)."""
    return dict(tp=tp, pp=pp, dp=dp, mbs=mbs, vpp=vpp,
                schedule="interleaved" if vpp > 1 else "1f1b", recompute=recompute, sp=sp,
                zero=0, tp_overlap=False, dp_overlap=False, order="tp-cp-ep-dp-pp")


def selene_cluster(gpus: int, gpu_overrides: dict[str, Any] | None = None,
                   calibrated: bool = True) -> dict[str, Any]:
    """The DGX A100 SuperPOD preset's tiers with Selene's node count."""
    return preset_cluster(CLUSTER, gpus, gpu_overrides, calibrated, SELENE_NODES)


def interleave_options(layers: int, pp: int) -> list[int]:
    """Chunks per device that divide the layers of a stage (interleaving needs >= 2)."""
    if pp == 1:
        return [1]
    per_stage = layers // pp
    return [v for v in range(2, per_stage + 1) if per_stage % v == 0] or [1]


def megatron_cases() -> list[Case]:
    cases = []
    for row in read_source("megatron_sc21_table1"):
        layers, h, heads = int(row["layers"]), int(row["hidden"]), int(row["heads"])
        tp, pp, gpus, batch = int(row["tp"]), int(row["pp"]), int(row["gpus"]), int(row["global_batch"])
        dp = gpus // (tp * pp)
        flops = megatron_flops_per_iteration(batch, SEQ, layers, h, VOCAB, True)
        tflops = float(row["tflops_per_gpu"])
        candidates = []
        for mbs in (1, 2, 4, 8):
            if batch % (dp * mbs):
                continue
            for vpp in interleave_options(layers, pp):
                candidates.append(megatron_config(tp, pp, dp, mbs, vpp, "full", False))
        cases.append(Case(
            source="megatron_sc21_table1", label=f"{row['params_billion']}B {gpus} GPUs",
            scenario=gpt_scenario(f"Megatron SC'21 {row['params_billion']}B", layers, h, heads,
                                  batch, "fp16"),
            candidates=candidates, published_step_s=flops / (tflops * 1e12 * gpus),
            published_tflops=tflops, flops=flops))
    return cases


def korthikanti_cases() -> list[Case]:
    cases = []
    for row in read_source("korthikanti_table5"):
        layers, h, heads = int(row["layers"]), int(row["hidden"]), int(row["heads"])
        tp, pp, gpus = int(row["tp"]), int(row["pp"]), int(row["gpus"])
        batch, mbs, vpp = int(row["global_batch"]), int(row["microbatch"]), int(row["vpp"])
        dp = gpus // (tp * pp)
        for setting, column, sp, recompute in (
            ("full recompute", "iter_s_full_recompute", False, "full"),
            ("SP + selective", "iter_s_sp_selective", True, "selective"),
        ):
            full = recompute == "full"
            cases.append(Case(
                source="korthikanti_table5", label=f"{row['model']} {setting}",
                scenario=gpt_scenario(f"Korthikanti Table 5 {row['model']}", layers, h, heads,
                                      batch, "bf16"),
                candidates=[megatron_config(tp, pp, dp, mbs, vpp, recompute, sp)], published_step_s=float(row[column]),
                published_tflops=None,
                flops=megatron_flops_per_iteration(batch, SEQ, layers, h, VOCAB, full)))
    return cases


def fitted_cases() -> list[Case]:
    """The rows the per-GPU constants are fitted to."""
    return megatron_cases() + korthikanti_cases()


def predict(case: Case, gpu_overrides: dict[str, Any] | None = None,
            backend: str | None = "python", calibrated: bool = True) -> Prediction:
    """The model's step time for a case: the fastest feasible candidate configuration."""
    from ..api import load
    from ..backends import evaluate_blocks
    from ..spec import ConfigSpec, pack, pack_configs

    first = case.candidates[0]
    gpus = first["tp"] * first.get("cp", 1) * first["pp"] * first["dp"]
    scenario = load({**case.scenario, "cluster": selene_cluster(gpus, gpu_overrides, calibrated)})
    sys, mdl, job = pack(scenario)
    cfg = pack_configs([ConfigSpec(**c) for c in case.candidates], gpus=gpus)
    out = evaluate_blocks(sys, mdl, job, cfg, backend=backend)
    step = np.where(out[L.OUT_FEASIBLE] > 0, out[L.OUT_STEP_TIME_S], np.inf)
    if not np.isfinite(step).any():  # nothing fits: report the fastest anyway, flagged below
        step = np.where(out[L.OUT_STATUS] <= L.STATUS_OUT_OF_MEMORY, out[L.OUT_STEP_TIME_S], np.inf)
    best = int(np.argmin(step))
    if not np.isfinite(step[best]):
        raise ValueError(f"calibration row {case.source} / {case.label}: none of its "
                         f"{len(case.candidates)} candidate layouts is a valid configuration")
    col = out[:, best]
    return Prediction(
        case=case, step_s=float(col[L.OUT_STEP_TIME_S]),
        config=case.candidates[best], feasible=bool(col[L.OUT_FEASIBLE] > 0),
        memory_gib=float(col[L.OUT_MEMORY_GIB]),
        breakdown={f: float(col[L.OUTPUT_FIELDS.index(f)]) for f in L.BREAKDOWN_FIELDS})
