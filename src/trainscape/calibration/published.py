"""Published runs in the shared calibration layout (one row per run, one column layout).

Every CSV of ``trainscape/data/calibration`` except the two 2021-22 Megatron tables uses the
column layout its README describes (``source, case, version, ... gpus tp cp pp dp ep ...
metric value step_time_s tokens_per_s ...``). A row becomes a scenario with **the row's own
layout**: every parallel degree, the schedule, microbatch, recompute, ZeRO stage and sequence
parallelism as printed. Where the source leaves a setting out, the value the stack's own
defaults give is assumed and the row says so (``Case.assumptions``) -- never the fastest
candidate. A layout the model calls invalid or out of memory is a failed row.

Published metric -> step time (the model is compared on step time, never on raw TFLOP/s):

- ``step_time_s``: as printed.
- ``tokens_per_s_per_gpu`` / ``tokens_per_s``: ``seq_len * global_batch / tokens_per_s``.
- ``model_tflops_per_gpu``: the source's FLOP count / (TFLOP/s * GPUs). Megatron-LM
  (``megatron/training/training.py num_floating_point_operations``), NeMo
  (``nemo/collections/common/parts/flops_formulas.py`` / Megatron-Bridge) and MosaicML
  (``collect_results.py``) all count model FLOPs as 3 passes (forward + backward) of every
  GEMM, the attention core over the **full** ``s x s`` square (causal masking not discounted)
  and the logits, without recomputation -- exactly :func:`model.llm.model_flops_per_sequence`.
  The Llama 3 paper does not state its convention; the same one is assumed (its MFU of 43 %
  of 989 TFLOP/s at 430 TFLOP/s matches a model-FLOP count) and the row says so.
"""

from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from importlib import resources
from typing import Any

from ..spec.ranges import MAX_BUCKET_PARAMS

#: shared-layout calibration files: source id -> (file, citation)
PUBLISHED_FILES = {
    "dgxc_benchmarking_h100": (
        "dgxc_benchmarking_h100.csv",
        "NVIDIA DGX Cloud Benchmarking recipes, README 'Expected Performance' tables "
        "(github.com/NVIDIA/dgxc-benchmarking v24.11.1-v25.05.01), DGX H100",
    ),
    "nemo_perf_summary_h100": (
        "nemo_perf_summary_h100.csv",
        "NeMo Framework performance summary (NVIDIA-NeMo/Megatron-Bridge "
        "docs/performance-summary-archive.md), DGX-H100 rows",
    ),
    "nemo_long_sequence_h100": (
        "nemo_long_sequence_h100.csv",
        "NeMo long-sequence performance page (NVIDIA/NeMo docs/source/performance/"
        "performance_long_sequence.md), Llama 2 7B FP8, DGX-H100",
    ),
    "megatron_core_r080_h100": (
        "megatron_core_r080_h100.csv",
        "Megatron-LM README weak-scaling table (Megatron-Core r0.8.0), H100",
    ),
    "llm_foundry_mpt": (
        "llm_foundry_mpt.csv",
        "MosaicML llm-foundry scripts/train/benchmarking/README.md (PyTorch FSDP, "
        "A100 and H100)",
    ),
    "bloom_176b_a100": (
        "bloom_176b_a100.csv",
        "BigScience BLOOM-176B training log (bigscience-workshop/bigscience "
        "train/tr11-176B-ml/README.md), 384 A100 80GB",
    ),
    "llama3_table4": (
        "llama3_table4.csv",
        "Llama Team, The Llama 3 Herd of Models, arXiv 2407.21783, Table 4 (H100)",
    ),
}

#: The cluster each GPU type ran on when the source does not describe a different one.
GPU_CLUSTER = {
    "a100-sxm-80gb": "dgx-a100-superpod",
    "a100-sxm-40gb": "dgx-a100-superpod",
    "h100-sxm-80gb": "dgx-h100-superpod",
    "gb200": "gb200-nvl72",
    "gb300": "gb300-nvl72",
    "b300": "hgx-b300",
}

#: Machines a row's ``system`` names by a cloud's machine-type string, and the cluster preset
#: they are (matched case-insensitively as a substring): XPK's device type ``h100-80gb-8`` is
#: Google Cloud's ``a3-highgpu-8g`` (AI-Hypercomputer/xpk ``system_characteristics.py``), the
#: VM MaxText's 2024 A3 tables ran on (A3 Mega is ``h100-mega-80gb-8``)
SYSTEM_CLUSTER = {
    "h100-80gb-8": "gcp-a3-high",
}


def _mlperf_gpt3(version: str, files: str, bucket_mb: int, fp8_params: bool = False) -> tuple:
    """:data:`SOURCE_SETTINGS` of NVIDIA's MLPerf GPT-3 175B implementation at ``version``: Apex
    DistributedFusedAdam's ``bucket_mb`` MB buckets (half as many million bf16 gradients). Its
    dropout 0 and bf16 gradient sync come from the rows' framework text
    (:func:`is_nvidia_mlperf`), the FP8 weights of ``fp8_params`` (``FP8_PARAMS=True``) from their
    ``fp8_recipe`` (:func:`printed_fp8_params`); the note names them all, ``files`` where the
    release says so."""
    why = (f"MLPerf {version} GPT-3 implementation ({files}): dropout 0; Apex "
           f"distributed_fused_adam with bf16 gradient sync and {bucket_mb} MB buckets "
           f"({bucket_mb // 2} M gradients), grad and param sync overlapped")
    if fp8_params:
        why += "; FP8 parameters (FP8_PARAMS=True)"
    return {"dp_bucket_params": bucket_mb * 1_000_000 // 2}, {}, None, why


#: what a paper's stack did that its row's columns cannot say: source -> (job fields, config
#: fields, software-stack profile or None, why). Each is that stack's documented behaviour.
SOURCE_SETTINGS = {
    # MT-NLG 530B (Smith et al. 2022, arXiv 2201.11990): Megatron tensor slicing inside
    # DeepSpeed's pipeline engine, 2021 -- before FlashAttention (Dao et al., 2022-05), so
    # Megatron's fused-softmax attention; DeepSpeed's TrainSchedule reduces gradients once, at
    # the end of the batch (ReduceGrads before OptimizerStep, deepspeed/runtime/pipe/schedule.py)
    "mtnlg_paper": (
        {"flash_attention": False}, {"dp_overlap": False, "tp_overlap": False}, "megatron-lm",
        "Megatron-DeepSpeed 2021: unfused attention (pre-FlashAttention), gradients reduced "
        "after the last microbatch (DeepSpeed TrainSchedule ReduceGrads), no TP overlap"),
    # MegaScale's baseline (Jiang et al. 2024, arXiv 2402.15627, §6): Megatron-LM at 285068c8
    # (2023-01, the FlashAttention merge), before Transformer Engine's TP overlap and before
    # Megatron-LM's --overlap-grad-reduce: gradients all-reduced after the backward pass
    "megascale_paper": (
        {}, {"dp_overlap": False, "tp_overlap": False}, "megatron-lm",
        "Megatron-LM 285068c8 (2023-01): pre-Transformer Engine (no TP overlap), gradients "
        "all-reduced after the backward pass (no --overlap-grad-reduce yet)"),
    # Nemotron-4 340B's pre-training config as NVIDIA published it with the model
    # (NVIDIA/NeMo-Megatron-Launcher 7c842fcd, 2024-06-17, "actual GPU/GBS numbers used in
    # pretraining", conf/training/nemotron/nemotron_340b.yaml): ub_tp_comm_overlap False, and
    # Apex distributed_fused_adam with dtype bf16 and grad_sync_dtype bf16 (its VP 8, MBS 1,
    # selective recompute and SP are the CSV rows' own columns)
    "nemotron4_340b_report": (
        {"optimizer_dtype": "bf16", "grad_dtype": "bf16"}, {"tp_overlap": False}, None,
        "launcher yaml of the pre-training run (NeMo-Megatron-Launcher 7c842fcd "
        "nemotron_340b.yaml): no TP comm overlap; distributed_fused_adam with bf16 Adam moments "
        "and bf16 gradients"),
    # NVIDIA's MLPerf Training v3.0 / v3.1 GPT-3 175B (NeMo 23.04 / 23.09; v3.0's settings in
    # conf/megatron_gpt_config.yaml; mlcommons/training_results_v3.1
    # NVIDIA/benchmarks/gpt3/implementations/pytorch): conf/custom.yaml sets hidden and attention
    # dropout 0.0; conf/optim/distributed_fused_adam.yaml runs Apex DistributedFusedAdam with
    # grad_sync_dtype bf16, a contiguous grad buffer, bucket_cap_mb 100 (50 M bf16 gradients a
    # bucket) and overlapped grad and param sync
    "mlperf_training_v3.0": _mlperf_gpt3("v3.0", "conf/megatron_gpt_config.yaml", 100),
    "mlperf_training_v3.1": _mlperf_gpt3(
        "v3.1", "conf/custom.yaml, conf/optim/distributed_fused_adam.yaml", 100),
    # v4.0 (NeMo 24.04; mlcommons/training_results_v4.0 NVIDIA/benchmarks/gpt3/implementations/
    # nemo): the same, with BUCKET_CAP_MB=200 (100 M bf16 gradients a bucket) and FP8_PARAMS=True
    # in config_common.sh (FP8 weights gathered by the distributed optimizer)
    "mlperf_training_v4.0": _mlperf_gpt3(
        "v4.0", "conf/custom.yaml, conf/optim/distributed_fused_adam.yaml, config_common.sh",
        200, fp8_params=True),
    # v4.1 (NeMo 24.09; mlcommons/training_results_v4.1 NVIDIA/benchmarks/gpt3/implementations/
    # eos_n*_ngc24.09_nemo, and Oracle's copy of it): v4.0's optimizer and FP8 settings (the
    # 256-GPU config lowers the bucket to 125 MB, which moves its step by < 0.01 %)
    "mlperf_training_v4.1": _mlperf_gpt3(
        "v4.1", "conf/custom.yaml, conf/optim/distributed_fused_adam.yaml, config_common.sh",
        200, fp8_params=True),
    # MLPerf Training v5.0 Llama 3.1 405B (NeMo v2.2.0 / Megatron-Core core_r0.11.0 on the
    # 25.01 container; mlcommons/training_results_v5.0 NVIDIA/benchmarks/llama31_405b/
    # implementations/eos-dfw_n*_ngc25.01_nemo, which Nebius ran unchanged): pretrain.py sets
    # grad_reduce_in_fp32=False; config_common.sh FP8_PARAMS=True (MegatronMixedPrecision
    # fp8_params and DDP fp8_param_gather); OVERLAP_PARAM_GATHER_WITH_OPTIM_STEP=True, under
    # which NeMo's init_ddp disables bucketing for every model chunk
    # (nemo/lightning/megatron_parallel.py at v2.2.0: ``disable_bucketing = (model_chunk_idx >
    # 0) or overlap_param_gather_with_optimizer_step``), so a chunk reduces as one bucket;
    # Llama3Config's dropout is 0 (the dropout, gradient and FP8 settings come from the rows'
    # own text, is_nvidia_mlperf and printed_fp8_params; the buckets only from here)
    "mlperf_training_v5.0": (
        {"dp_bucket_params": MAX_BUCKET_PARAMS}, {}, None,
        "MLPerf v5.0 Llama 3.1 405B implementation (pretrain.py, config_common.sh; NeMo v2.2.0 "
        "megatron_parallel.py): dropout 0; gradients reduced in bf16; FP8 parameters "
        "(FP8_PARAMS=True); each model chunk's gradients one bucket "
        "(overlap_param_gather_with_optimizer_step disables bucketing)"),
    # MLPerf Training v5.1 Llama 3.1 8B / 405B as its B200, H100 and H200 submitters ran
    # NVIDIA's NeMo 25.09 implementation (mlcommons/training_results_v5.1 <submitter>/benchmarks/
    # llama31_8b|llama31_405b/implementations): pretrain.py grad_reduce_in_fp32=False;
    # conf/custom.yaml bucket_size 134,217,728 (BUCKET_SIZE unset; Dell and Oracle's 8B set
    # 768 M, Cisco's none reaches DDP: 0.3-0.6 points); TP communication not overlapped (the 8B
    # rows' TP_COMM_OVERLAP=False, University of Florida's 405B configs comment it out, HPE's
    # logged config has tp_comm_overlap False, Cisco's pretrain.py comments out the callback)
    "mlperf_training_v5.1": (
        {"dp_bucket_params": 134_217_728}, {"tp_overlap": False}, None,
        "MLPerf v5.1 Llama 3.1 implementation as submitted (pretrain.py, config_common*.sh, "
        "conf/custom.yaml): dropout 0; gradients reduced in bf16; 134,217,728-parameter "
        "buckets; TP communication not overlapped"),
    # NeMo 25.02's performance scripts run the FP8 precision plugin bf16_with_fp8_mixed, which
    # sets fp8_params (NVIDIA/NeMo v2.2.0 nemo/collections/llm/recipes/precision/
    # mixed_precision.py), as the DGX Cloud rows of the same release are read
    "nemo_perf_summary_2502": (
        {"fp8_param_gather": True}, {}, None,
        "FP8 weights without a 16-bit copy assumed (NeMo 2.0 bf16_with_fp8_mixed sets "
        "fp8_params)"),
}

#: The fabric of a GPU without a cluster preset of its own: 8 x 400 Gb/s InfiniBand per 8-GPU
#: node (DGX B200 and HGX H200 nodes carry the DGX H100's), its node tier set to the GPU's own
#: NVLink by :func:`.runs_file.place`
DEFAULT_CLUSTER = "dgx-h100-superpod"

#: Attention head width of models whose ``hidden / heads`` is not it (public model configs:
#: Hugging Face ``config.json`` ``head_dim`` of Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B,
#: Qwen/Qwen3-32B (hidden 5120, 64 heads), Qwen/Qwen3-4B (2560, 32), Qwen/Qwen3-0.6B (1024,
#: 16), openai/gpt-oss-120b and gpt-oss-20b (2880, 64), meta-llama/Llama-4-Maverick-17B-128E,
#: google/gemma-2-9b (3584, 16: 256) and gemma-2-27b (4608, 32: 128), google/gemma-3-12b-pt
#: (3840, 16: 256) and gemma-3-27b-pt (5376, 32: 128), mistralai/Mistral-Nemo-Base-2407
#: (5120, 32: 128)). A row's model is matched as :func:`architecture_key` reads it.
HEAD_DIM = {
    "qwen3-30b-a3b": 128,
    "qwen3-235b-a22b": 128,
    "qwen3-32b": 128,
    "qwen3-4b": 128,
    "qwen3-0.6b": 128,
    "gpt-oss-120b": 64,
    "gpt-oss-20b": 64,
    "llama4-maverick-400b": 128,
    "deepseek-v3": 128,
    "kimi-k2": 128,
    "gemma-2-9b": 256,
    "gemma-2-27b": 128,
    "gemma-3-12b": 256,
    "gemma-3-27b": 128,
    "mistral-nemo-12b": 128,
}
#: Multi-head latent attention (DeepSeek-V3, Kimi K2: ``kv_lora_rank`` 512, ``qk_nope_head_dim``
#: and ``v_head_dim`` 128, ``qk_rope_head_dim`` 64) is not modelled; these models are costed
#: with the approximation the ``deepseek-v3`` preset documents (``presets/models.toml``): GQA
#: with the 128-wide heads above and 8 KV heads standing in for the compressed latent -- the
#: attention core at 128 x 128 per head pair (0.8 of MLA's 128 x (192 + 128) / 2, where the
#: printed ``hidden / heads`` = 56 gave 0.35), the attention weights 33 % over MLA's.
KV_HEADS = {"deepseek-v3": 8, "kimi-k2": 8}
#: MoE models whose MoE layers alternate with dense ones, and their shared experts
#: (Llama 4 Maverick: MoE every other layer, one shared expert; Meta's model card / HF
#: config ``interleave_moe_layer_step = 2``).
MOE_EVERY = {"llama4-maverick-400b": 2}
#: DeepSeek-V3 and Kimi K2: one shared expert beside the routed ones (deepseek-ai/DeepSeek-V3
#: ``inference/configs/config_671B.json`` ``n_shared_experts: 1``; Kimi K2's config, the same
#: architecture, ``n_shared_experts: 1``)
SHARED_EXPERTS = {"llama4-maverick-400b": 1, "deepseek-v3": 1, "kimi-k2": 1}
#: Leading dense layers before the MoE ones (``model.first_dense_layers``): DeepSeek-V3's first
#: three (arXiv 2412.19437 §4.2; ``config_671B.json`` ``n_dense_layers: 3``, Hugging Face
#: ``first_k_dense_replace: 3``), Kimi K2's first one (moonshotai/Kimi-K2-Instruct
#: ``config.json`` ``first_k_dense_replace: 1``, one of the few fields Moonshot changed from
#: DeepSeek-V3's; Megatron-Bridge's bridges read it into ``moe_layer_freq = [0] * k + [1] *
#: (layers - k)``, ``src/megatron/bridge/models/kimi/kimi_bridge.py``).
FIRST_DENSE_LAYERS = {"deepseek-v3": 3, "kimi-k2": 1}
#: Group-limited routing: a token's experts lie in at most this many of the expert groups, one
#: group per node when EP spans 8 nodes (DeepSeek-V3 ``config_671B.json`` ``n_expert_groups:
#: 8``, ``n_limited_groups: 4``; the V3 report §2.1.2, node-limited routing, M = 4)
MAX_ROUTE_NODES = {"deepseek-v3": 4}
#: Sliding-window attention: (window, every k-th layer full). GPT-OSS alternates 128-token
#: windows with full attention (openai/gpt-oss-120b and -20b ``config.json``: ``sliding_window
#: 128``, ``layer_types`` alternating; Megatron-Bridge v0.2.0 ``GPTOSSProvider``: ``window_size
#: (128, 0)``, ``window_attn_skip_freq 2``, fused sink attention with TE >= 2.8)
#: Gemma 2 alternates 4,096-token windows with global layers (Gemma Team 2024, arXiv
#: 2408.00118 §2; config ``sliding_window 4096``), Gemma 3 keeps one global layer in six with
#: 1,024-token windows (arXiv 2503.19786 §2; config ``sliding_window 1024``,
#: ``sliding_window_pattern 6``).
SLIDING_WINDOW = {"gpt-oss-120b": (128, 2), "gpt-oss-20b": (128, 2),
                  "gemma-2-9b": (4096, 2), "gemma-2-27b": (4096, 2),
                  "gemma-3-12b": (1024, 6), "gemma-3-27b": (1024, 6)}
#: Pipeline splits a recipe states layer by layer: (source, model, newest release) -> {(pp,
#: vpp): (first device's transformer layers, last device's)}, read as
#: ``job.pipeline_first_stage_layers`` / ``pipeline_last_stage_layers``; the first entry whose
#: release holds (:func:`recipe_rule`, oldest first) applies.
#:
#: - NeMo 2.3 (NVIDIA/NeMo r2.3.0 ``scripts/performance/llm/pretrain_deepseek_v3.py``, DGX
#:   Cloud 25.05 on NeMo 25.04.01): ``num_layers_in_first_pipeline_stage = 64/p - 1``,
#:   ``num_layers_in_last_pipeline_stage = 64/p - 2`` (the MTP block and the loss beside them).
#: - NeMo 2.4 (v2.4.0, the same script; DGX Cloud 25.08 on NeMo 25.07.01): a layout per (PP,
#:   VP), ``[E + 8 t] [8 t] x 6 [5 t + loss]`` on (8, 1) and ``[E + 4 t] [4 t] x 14 [1 t +
#:   loss]`` on (8, 2) and (16, 1) -- on (8, 2) device 0 holds chunks 0 and 8 (4 + 4), device 7
#:   chunks 7 and 15 (4 + 1).
#: - Megatron-Bridge's ``deepseek_v3`` recipe (``src/megatron/bridge/recipes/deepseek/
#:   deepseek_v3.py``, the same from v0.2.0 through 26.04; the B200 performance configs pass
#:   ``layout=None`` and take it): the NeMo 2.4 layouts with ``mtp`` before the loss; the H100
#:   configs pass ``Et|(tt|)*30mL`` on (8, 4): 7 layers on device 0, 6 and the MTP block on
#:   device 7.
#:
#: A layout is written as Megatron-Core's ``pipeline_model_parallel_layout`` string (NeMo 2.4
#: gives its layouts as lists of the same stages) and read by
#: :func:`trainscape.spec.pipeline_layout.split`; a rule of counts as ``(first, last)``.
_DSV3_NEMO24 = "Et*4|(t*4|)*14tL"
_DSV3_BRIDGE = "Et*4|(t*4|)*14tmL"
RECIPE_STAGE_LAYERS = {
    ("dgxc_benchmarking", "deepseek-v3", (25, 4, 1)): {(8, 1): (7, 6), (16, 1): (3, 2)},
    ("dgxc_benchmarking", "deepseek-v3", (25, 7, 1)): {(8, 1): "Et*8|(t*8|)*6t*5L",
                                                       (8, 2): _DSV3_NEMO24,
                                                       (16, 1): _DSV3_NEMO24},
    ("nemo_perf_summary", "deepseek-v3", (99,)): {(16, 1): _DSV3_BRIDGE, (8, 2): _DSV3_BRIDGE,
                                                  (8, 4): "Et|(tt|)*30mL"},
}
#: Multi-token prediction a recipe trains with: (source, model, newest release) -> (depth, why).
#: DeepSeek-V3 trains with one MTP block (arXiv 2412.19437 §2.2, §4.2: depth 1), and so do
#: the Megatron recipes: NeMo 2.3's ``pretrain_recipe(use_mtp=True)`` (NVIDIA/NeMo r2.3.0
#: ``nemo/collections/llm/recipes/deepseek_v3.py``, ``mtp_num_layers=1``; the DGX Cloud 25.05
#: rows, NeMo 25.04.01) and Megatron-Bridge's ``deepseek_v3`` recipes (``mtp_num_layers = 1``,
#: layouts with an ``mtp`` slot beside the loss; the performance summaries from 25.09 on).
#: NeMo 2.4-2.5's performance script sets pipeline layouts without an ``mtp`` slot, which
#: Megatron-Core accepts only without MTP (``validate_layer_layout``), so its rows get none --
#: stated per source (depth 0), as a Megatron-Core row no entry holds for takes its model
#: preset's block (``run_of``).
_MTP_NEMO23 = (1, "multi-token prediction depth 1: NeMo 2.3 deepseek_v3 "
                  "pretrain_recipe(use_mtp=True), the MTP block on the last pipeline stage")
_MTP_NEMO24 = (0, "no multi-token prediction: NeMo 2.4's performance script sets pipeline "
                  "layouts without an mtp slot, which Megatron-Core accepts only without MTP")
RECIPE_MTP = {
    ("dgxc_benchmarking", "deepseek-v3", (25, 4, 1)): _MTP_NEMO23,
    ("dgxc_benchmarking", "deepseek-v3", (25, 7, 1)): _MTP_NEMO24,
    ("nemo_perf_summary", "deepseek-v3", (25, 4, 1)): _MTP_NEMO23,
    ("nemo_perf_summary", "deepseek-v3", (25, 7, 1)): _MTP_NEMO24,
    ("nemo_perf_summary", "deepseek-v3", (99,)): (
        1, "multi-token prediction depth 1: Megatron-Bridge deepseek_v3 recipe mtp_num_layers = "
           "1, the MTP block on the last pipeline stage"),
}


@dataclass
class PublishedRun:
    """One published run: what ran, what it measured, and the scenario that reproduces it."""

    source: str  # the CSV's source id (SOURCES key)
    group: str  # summary group: the source, or "<source> (JAX)" for JAX rows
    case: str
    gpu: str
    dtype: str
    stack: str
    scenario: dict[str, Any]  # without cluster
    config: dict[str, Any]
    metric: str
    value: float
    published_step_s: float
    model_flops: float  # per step, full-square model FLOPs (model.llm convention)
    cluster_preset: str
    cluster_overrides: dict[str, Any] = field(default_factory=dict)
    assumptions: list[str] = field(default_factory=list)
    counted: bool = True  # False: an older release of a layout a newer release repeats
    release: tuple[int, ...] = ()
    shipped: bool = True  # False: a user's file (trainscape validate --runs), not in the fit
    hardware_tflops: float | None = None  # a user's run measured in hardware TFLOP/s alone
    # recompute modes and expert-parallel degrees to try where the row prints none and its
    # reading does not fit (settled once by Runner.settle_layout; empty: the row's own, or
    # already settled)
    recompute_fallbacks: tuple[str, ...] = ()
    ep_fallbacks: tuple[int, ...] = ()
    # job fields to try, lightest departure first, where the row states no precision of its
    # gradients, weights and optimizer states and even the fallbacks above do not fit
    # (unstated_precision_fallbacks)
    precision_fallbacks: tuple[dict[str, Any], ...] = ()
    published_memory_gib: float | None = None  # a peak memory per GPU the source printed
    memory_measure: str = ""  # what that peak measures (calibration.ALLOCATOR_MEASURES)
    origin: str = ""  # where a user's run was read (file, line and case), for its messages

    def config_gpus(self) -> int:
        c = self.config
        return c["tp"] * c["cp"] * c["pp"] * c["dp"]


def read_rows(filename: str) -> list[dict[str, str]]:
    """The rows of a shipped calibration CSV."""
    text = resources.files("trainscape.data.calibration").joinpath(filename).read_text()
    return list(csv.DictReader(text.splitlines()))


def _int(row: dict[str, str], key: str, default: int | None = None) -> int | None:
    value = row.get(key, "").strip()
    if not value:
        return default
    return int(float(value))


def _leading_int(text: str) -> int | None:
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else None


def gpu_is_ampere(gpu: str) -> bool:
    """Whether a calibration GPU id is an A100 (the architecture FlashAttention-2 and Triton
    FlashAttention were written for)."""
    return gpu.startswith("a100")


#: words of a ``framework`` cell that name a Megatron-Core stack (NeMo, Megatron-Bridge,
#: Megatron-LM with Megatron-Core); a cell naming no known stack is read as Megatron-Core too,
#: and its row says so (:func:`stack_of`)
MEGATRON_CORE_WORDS = ("megatron", "nemo")
#: frameworks (lower case, found anywhere in ``framework``) run on JAX / XLA: Google's MaxText,
#: PaxML / Praxis and T5X, Apple's AXLearn, Stanford CRFM's Levanter, EasyLM
JAX_FRAMEWORKS = ("jax", "maxtext", "paxml", "praxis", "t5x", "axlearn", "levanter", "easylm")
#: ... and as whole words only (short names that occur inside other words)
JAX_FRAMEWORK_WORDS = frozenset({"flax", "pax"})
#: frameworks whose data parallelism shards parameters per module as PyTorch FSDP does:
#: FSDP itself, MosaicML's Composer / llm-foundry (FSDP), Meta's internal stack (Llama 3's),
#: torchtitan and torchtune (FSDP2), AI2's OLMo / OLMo-core (FSDP), metaseq (OPT: FSDP with
#: Megatron TP layers), FairScale (FSDP's origin)
FSDP_FRAMEWORKS = ("fsdp", "composer", "llm-foundry", "llm_foundry", "meta internal",
                   "torchtitan", "torchtune", "olmo", "metaseq", "fairscale")


#: Megatron-LM's first commit with ``--overlap-grad-reduce`` (2d5220a424, 2023-08-16); its
#: ``--tp-comm-overlap`` (Transformer Engine userbuffers) came later still (116ffddc58,
#: 2023-10-23)
MEGATRON_LM_DP_OVERLAP_DATE = (2023, 8, 16)


def megatron_lm_date(row: dict[str, str]) -> tuple[int, ...] | None:
    """The date of a plain Megatron-LM run (not Megatron-Core, NeMo or Megatron-DeepSpeed) as
    its ``framework`` or ``version`` text gives it -- ``2023-01-11``, ``2023-01`` or a bare
    year, read as its end -- or None."""
    f = row["framework"].lower()
    if "megatron-lm" not in f or any(w in f for w in ("core", "nemo", "deepspeed")):
        return None
    for text in (row["framework"], row["version"]):
        match = re.search(r"\b(20\d\d)-(\d\d)(?:-(\d\d))?\b", text)
        if match:
            return tuple(int(g) for g in match.groups() if g is not None)
        match = re.search(r"\b(20\d\d)\b", text)
        if match:
            return (int(match.group(1)), 12, 31)
    return None


def is_llm_foundry(row: dict[str, str]) -> bool:
    """A run of MosaicML's llm-foundry (Composer): its loss and attention defaults apply."""
    f = row["framework"].lower()
    return row["source"] == "llm_foundry_mpt" or "llm-foundry" in f or "llm_foundry" in f


def names_megatron_deepspeed(framework: str) -> bool:
    """Whether a ``framework`` text names a Megatron-DeepSpeed fork (Megatron's layers in
    DeepSpeed's engine: BLOOM's, MT-NLG's, EleutherAI's GPT-NeoX, which is built on it)."""
    f = framework.lower()
    return "neox" in f or ("deepspeed" in f and "megatron" in f)


def is_megatron_deepspeed(row: dict[str, str]) -> bool:
    """A run of a Megatron-DeepSpeed fork, which its ``framework`` names
    (:func:`names_megatron_deepspeed`)."""
    return names_megatron_deepspeed(row["framework"])


def stack_of(framework: str, notes: list[str] | None = None) -> str:
    """The software-stack profile a framework string belongs to (``notes``, when given, says
    so when the string names no stack the reader knows)."""
    stack, deepspeed_zero = _named_stack(framework)
    if stack is None:
        if notes is not None:
            notes.append(f"framework {framework!r} names no known stack (NeMo / Megatron, "
                         "PyTorch FSDP, JAX, Megatron-DeepSpeed): the Megatron-Core profile "
                         "assumed")
        return "megatron-core"
    if notes is not None and deepspeed_zero:
        notes.append(f"framework {framework!r}: DeepSpeed's ZeRO engine on PyTorch modules, "
                     "the PyTorch FSDP profile")
    return stack


def named_stack(framework: str) -> str | None:
    """The stack profile a framework string names, None when it names none the reader knows
    (:func:`stack_of` then takes Megatron-Core, and says so)."""
    return _named_stack(framework)[0]


def _named_stack(framework: str) -> tuple[str | None, bool]:
    """:func:`named_stack`, and whether the string was read as DeepSpeed's ZeRO engine without
    Megatron's layers: PyTorch modules whose parameters its per-module hooks gather and
    release (ZeRO-3, Rajbhandari et al. SC'20), as FSDP's do."""
    f = framework.lower()
    words = set(re.findall(r"[a-z0-9]+", f))
    if names_megatron_deepspeed(framework):
        return "megatron-lm", False
    if any(w in f for w in JAX_FRAMEWORKS) or words & JAX_FRAMEWORK_WORDS:
        return "jax-xla", False
    if any(w in f for w in FSDP_FRAMEWORKS):
        return "pytorch-fsdp", False
    if "deepspeed" in f and "megatron" not in f:
        return "pytorch-fsdp", True
    if any(w in f for w in MEGATRON_CORE_WORDS):
        return "megatron-core", False
    return None, False


def names_known_stack(framework: str) -> bool:
    """Whether a framework string names a stack the reader knows (:func:`named_stack`)."""
    return named_stack(framework) is not None


def release_of(row: dict[str, str]) -> tuple[int, ...]:
    """The software release a row ran (NeMo container version), for newest-release counting."""
    match = re.search(r"NeMo (\d+)\.(\d+)(?:\.(\d+))?", row["framework"] + " " + row["version"])
    if not match:
        return ()
    return tuple(int(g) for g in match.groups() if g is not None)


def layout_key(row: dict[str, str]) -> tuple:
    """Same GPU, model, dtype, GPU count and parallel settings (the README's counting rule;
    the GPU too, since one source's table may print the same layout on two systems)."""
    return tuple(row[k] for k in ("source", "framework_kind", "gpu", "model", "layers", "dtype",
                                  "gpus", "tp", "cp", "pp", "dp", "ep", "etp", "vpp", "mbs",
                                  "global_batch", "seq_len"))


def architecture_key(name: str) -> str:
    """The name the architecture tables above (``HEAD_DIM`` .. ``SLIDING_WINDOW``) know model
    ``name`` by, compared without case or separators (:func:`trainscape.presets.normalized_name`:
    "DeepSeek-V3" is ``deepseek-v3``, "GPT-OSS 120B" ``gpt-oss-120b``); ``name`` itself when
    they know none. A remark in parentheses ("DeepSeekV3 (w/o MTP)", "Llama 3.1 405B (FP8)") is
    not part of the name, nor a Hugging Face organization (:func:`model_name_forms`). Another
    name of a model preset the tables know (``presets/aliases.toml``: "DeepSeek-V3-Base",
    "Kimi-K2-Instruct") is read as that model, so one architecture is read one way whatever
    the row calls it."""
    from .. import presets

    names = _architecture_names()
    for text in model_name_forms(name):
        found = names.get(presets.normalized_name(text))
        if found:
            return found
    pid = model_preset_id(name)
    if pid is not None:
        return names.get(presets.normalized_name(pid), name)
    return name


#: a post-trained or repackaged checkpoint's suffix on a Hugging Face repo name: the same
#: architecture as the base model ("Llama-3.1-8B-Instruct", "Qwen3-235B-A22B-Instruct-2507",
#: "gemma-2-9b-it", "Llama-2-70b-chat-hf")
VARIANT_SUFFIX = re.compile(r"[-_ ](instruct|base|chat|it|hf)([-_ ]\d+)?$", re.IGNORECASE)


def model_name_forms(name: str) -> tuple[str, ...]:
    """The forms a ``model`` cell is looked up by, in order: as written, without a remark in
    parentheses ("Llama 3.1 405B (FP8)"), by the part after a Hugging Face organization
    ("deepseek-ai/DeepSeek-V3"), and that part without a post-training variant's suffixes
    (:data:`VARIANT_SUFFIX`: "Llama-3.1-8B-Instruct" is Llama 3.1 8B's architecture)."""
    bare = re.sub(r"\([^)]*\)", " ", name).strip()
    repo = bare.rsplit("/", 1)[-1]
    base = repo
    while VARIANT_SUFFIX.search(base):
        base = VARIANT_SUFFIX.sub("", base)
    return (name, bare, repo, base)


@functools.lru_cache(maxsize=None)
def _architecture_names() -> dict[str, str]:
    """Every model the architecture tables know, by its normalized name (built once)."""
    from .. import presets

    return {presets.normalized_name(k): k
            for table in (HEAD_DIM, KV_HEADS, MOE_EVERY, SHARED_EXPERTS, FIRST_DENSE_LAYERS,
                          MAX_ROUTE_NODES, SLIDING_WINDOW) for k in table}


def model_of(row: dict[str, str], notes: list[str]) -> dict[str, Any]:
    """The transformer shape of a row (``notes`` collects what was assumed)."""
    name = architecture_key(row["model"])
    if name != row["model"]:
        notes.append(f"model {row['model']!r} read as {name} (its attention and expert layout)")
    experts = _int(row, "experts", 0)
    ffn = _int(row, "ffn_hidden", 0)
    expert_ffn = _int(row, "expert_ffn", 0)
    mlp = row["mlp"]
    if mlp == "squared-relu":
        notes.append("squared-ReLU MLP costed as a 2-matrix (GeLU-shaped) MLP: same GEMMs")
        mlp = "gelu"
    elif mlp == "geglu":
        notes.append("GeGLU MLP costed as SwiGLU: the same three matrices (gate, up, down) and "
                     "one gated element-wise product")
        mlp = "swiglu"
    model: dict[str, Any] = {
        "name": row["model"], "layers": _int(row, "layers"), "hidden": _int(row, "hidden"),
        "ffn_hidden": ffn if ffn > 0 else expert_ffn, "heads": _int(row, "heads"),
        "kv_heads": _int(row, "kv_heads", _int(row, "heads")), "vocab": _int(row, "vocab"),
        "mlp": mlp,
    }
    # facts a row cannot carry: the reader's tables, else the model preset the name resolves to
    # (the two agree where both know a model: tests/test_presets.py)
    facts = model_preset_facts(row["model"])
    if name in HEAD_DIM:
        model["head_dim"] = HEAD_DIM[name]
    elif "head_dim" in facts and model["heads"] and facts["head_dim"] * model["heads"] != \
            model["hidden"]:
        model["head_dim"] = facts["head_dim"]
    if name in KV_HEADS:
        model["kv_heads"] = KV_HEADS[name]
        notes.append("multi-head latent attention not modelled: costed as GQA with 128-wide heads "
                     f"and {KV_HEADS[name]} KV heads (the deepseek-v3 preset's approximation)")
    if name in SLIDING_WINDOW:
        model["attention_window"], model["full_attention_every"] = SLIDING_WINDOW[name]
    elif facts.get("attention_window"):
        model["attention_window"] = facts["attention_window"]
        model["full_attention_every"] = facts.get("full_attention_every", 0)
    if experts:
        model.update(experts=experts, top_k=_int(row, "top_k"), expert_ffn_hidden=expert_ffn,
                     moe_every=MOE_EVERY.get(name, facts.get("moe_every", 1)),
                     shared_experts=SHARED_EXPERTS.get(name, facts.get("shared_experts", 0)))
        lead = FIRST_DENSE_LAYERS.get(name, facts.get("first_dense_layers", 0))
        if lead and lead <= model["layers"] - model["moe_every"]:
            model["first_dense_layers"] = lead
        elif lead:
            notes.append(f"{name}'s {lead} leading dense layers not applied: the row's "
                         f"{model['layers']} layers leave no MoE layer after them")
        route = MAX_ROUTE_NODES.get(name, facts.get("max_route_nodes", 0))
        if route:
            model["max_route_nodes"] = route
        if facts.get("expert_bias"):
            # the stack decides what the bias costs (job.expert_bias: eager on Megatron-Core)
            model["expert_bias"] = True
    return model


#: the model preset fields a published row's columns cannot state (``mtp_layers``: read by
#: ``run_of`` for a Megatron-Core row no recipe rule speaks for)
PRESET_FACTS = ("head_dim", "moe_every", "shared_experts", "first_dense_layers",
                "max_route_nodes", "attention_window", "full_attention_every", "expert_bias",
                "mtp_layers")


def model_preset_id(model_cell: str) -> str | None:
    """The model preset a ``model`` cell names (:func:`trainscape.presets.preset_id`: an id,
    a preset's name, an ``aliases.toml`` name) in any of :func:`model_name_forms`; None for a
    model no preset holds."""
    from .. import presets

    for text in model_name_forms(model_cell):
        try:
            return presets.preset_id("model", text)
        except presets.UnknownPreset:
            continue
    return None


def model_preset_facts(model_cell: str) -> dict[str, Any]:
    """:data:`PRESET_FACTS` of the model preset a ``model`` cell names
    (:func:`model_preset_id`), {} for a model no preset holds. A dense preset's MoE spacing
    says nothing of a row's own experts and is left out."""
    from .. import presets

    pid = model_preset_id(model_cell)
    if pid is None:
        return {}
    preset = presets.get("model", pid)
    facts = {k: preset[k] for k in PRESET_FACTS if k in preset}
    if not preset.get("experts"):
        for k in ("moe_every", "shared_experts", "first_dense_layers"):
            facts.pop(k, None)
    return facts


def hybrid_replicas_of(row: dict[str, str], config: dict[str, Any],
                       notes: list[str]) -> int | None:
    """``job.dp_replicas`` of a row that prints its data parallelism as replicas beside an
    FSDP degree (MaxText's ``dcn_data_parallelism`` x ``ici_fsdp`` x ``dcn_fsdp``: ``dp`` x
    ``fsdp`` = the data-parallel degree): FSDP shards within each group of ``fsdp`` ranks and
    the ``dp`` groups replicate (hybrid sharding). None when the row prints no such split."""
    dp, fsdp = _int(row, "dp"), _int(row, "fsdp")
    if dp is None or fsdp is None or dp <= 1 or dp * fsdp != config["dp"]:
        return None
    notes.append(f"printed dp x fsdp = {dp} x {fsdp}: FSDP within groups of {fsdp} ranks, "
                 f"{dp} replicas (hybrid sharding, job.dp_replicas = {dp})")
    return dp


#: ``sp`` cells that state sequence parallelism, compared lower-cased (``true`` / ``yes``: on)
SP_VALUES = ("true", "false", "yes", "no")


def config_of(row: dict[str, str], stack: str, notes: list[str]) -> dict[str, Any]:
    """The parallel layout of a row, as printed; unstated settings get the stack's default and
    a note."""
    gpus = _int(row, "gpus")
    tp, cp, pp, ep = (_int(row, k, 1) for k in ("tp", "cp", "pp", "ep"))
    dp = _int(row, "dp")
    if dp is None:
        dp = gpus // (tp * cp * pp)
        notes.append(f"dp not printed: gpus / (tp*cp*pp) = {dp}")
    elif tp * cp * pp * dp != gpus:
        # MaxText prints the replica count beside the FSDP degree: data parallelism in the
        # model's sense is both (hybrid_replicas_of reads the split)
        dp = gpus // (tp * cp * pp)
        notes.append(f"printed dp x fsdp: data-parallel degree = gpus / (tp*cp*pp) = {dp}")
    if experts_of(row) and _int(row, "ep") is None:
        notes.append(UNSTATED_EP_NOTE)
    etp = _int(row, "etp")
    # EP beyond DP folds the experts over the TP x DP ranks at expert TP 1
    # (model.llm.moe_folded): only an unfolded layout runs its experts at the attention's TP
    if etp is not None and experts_of(row) and etp != tp and dp % ep == 0:
        notes.append(f"expert TP {etp} differs from TP {tp}: the model runs experts at TP {tp}")
    mbs = _int(row, "mbs")
    if mbs is None:
        mbs = 1
        notes.append("mbs not printed: 1 assumed (NeMo/Megatron recipes' default for these "
                     "models)")
    schedule_text = row["schedule"].lower()
    vpp = _int(row, "vpp")
    named = named_schedule(schedule_text)
    if pp == 1:
        schedule, vpp = "1f1b", 1
    elif named is not None:
        schedule, vpp = named, 1  # the V-shape schedules' two chunks are the schedule's own
        if named == "zb-h1" and not re.search(r"h1", schedule_text):
            notes.append(f"schedule {row['schedule']!r}: zero-bubble ZB-H1 assumed (the variant "
                         "not printed; H1 keeps 1F1B's activation memory)")
    elif "interleaved" in schedule_text or (vpp or 1) > 1:
        schedule = "interleaved"
        if vpp is None or vpp < 2:
            vpp = interleave_guess(_int(row, "layers"), pp)
            notes.append(f"interleaved schedule without a printed vpp: {vpp} assumed (largest "
                         f"chunk count <= 4 dividing a stage's layer slots)")
    else:
        schedule, vpp = "1f1b", 1
        if not schedule_text:
            notes.append("schedule not printed: 1F1B assumed (Megatron's default without vpp)")
        elif "1f1b" not in schedule_text.replace(" ", ""):
            notes.append(f"schedule {row['schedule']!r} not one the reader knows: 1F1B assumed")
    recompute_text = row["recompute"].lower()
    if recompute_text.startswith("full"):
        recompute = "full"
    elif recompute_text.startswith("selective") and stack == "jax-xla":
        recompute = jax_remat_policy(row["recompute"])
        notes.append(f"JAX remat policy '{row['recompute']}' costed as {recompute} recompute "
                     f"({JAX_REMAT_REASON[recompute]})")
    elif recompute_text.startswith("selective") and is_torchtitan(row):
        # torchtitan's selective AC with selective_ac_option = "op" (its Llama 3 8B config):
        # every second matmul of a block recomputed, the attention output saved
        recompute = "op_selective"
        notes.append("torchtitan selective activation checkpointing costed as op_selective "
                     "(per-op SAC: wk, wo, w3 and the element-wise ops recomputed)")
    elif recompute_text.startswith("selective"):
        recompute = "selective"
    else:
        recompute = "none"
        if not recompute_text and row["source"] == "llama3_table4" and row["seq_len"] == "8192":
            notes.append("recompute none: Llama 3 §3.3.2 pre-trained on 8K-token sequences "
                         "without activation checkpointing")
        elif not recompute_text:
            notes.append(UNSTATED_RECOMPUTE_NOTE)
    zero_text = row["zero"]
    zero = _leading_int(zero_text)
    fsdp = _int(row, "fsdp", 0) or 0
    if zero is None and fsdp > 1:
        # a printed FSDP degree of more than one rank: parameters, gradients and optimizer
        # states sharded (Megatron-Bridge's "FSDP" column, Megatron FSDP / PyTorch FSDP; "0"
        # is plain DDP with the distributed optimizer, the page's own nomenclature)
        zero = 3
        notes.append(f"ZeRO stage not printed: FSDP degree {fsdp} printed, fully sharded "
                     "(ZeRO-3) assumed")
    if zero is None:
        if stack == "pytorch-fsdp" and pp > 1:
            # torchtitan's default reshard_after_forward policy: not under a pipeline, whose
            # stage would re-gather per microbatch (torchtitan/distributed/fsdp.py
            # get_fsdp_reshard_after_forward_policy); Llama 3's PP runs did the same (§3.3.2)
            zero = 2
            notes.append("ZeRO stage not printed: FSDP without resharding after forward "
                         "(ZeRO-2) assumed under a pipeline (torchtitan's default policy; "
                         "Llama 3 paper §3.3.2)")
        elif stack == "pytorch-fsdp":
            # FSDP's default everywhere else: PyTorch FSDP's FULL_SHARD, FSDP2 fully_shard's
            # reshard_after_forward=True, torchtitan's policy without a pipeline
            zero = 3
            notes.append("ZeRO stage not printed: FSDP fully sharded (ZeRO-3, resharding "
                         "after forward) assumed (PyTorch FSDP's default without a pipeline)")
        else:
            zero = 1
            notes.append("ZeRO stage not printed: Megatron distributed optimizer (ZeRO-1) "
                         "assumed")
    if zero == 1 and stack == "megatron-core" and () < release_of(row) <= (24, 7):
        # NeMo 1.0 recipes of these releases name the optimizer distributed_fused_adam (the
        # launcher's training yamls up to the 24.07 release, NVIDIA/NeMo-Megatron-Launcher
        # @4550dc9f launcher_scripts/conf/training/*/*.yaml ``optim.name``): Apex's
        # DistributedFusedAdam, which "implements the ZeRO-2 algorithm" (its docstring,
        # NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py): gradients sharded too
        zero = 2
        notes.append("NeMo <= 24.07 distributed optimizer assumed to be Apex "
                     "DistributedFusedAdam (ZeRO-2: optimizer states and gradients sharded)")
    sp_text = row["sp"].lower()
    if sp_text in SP_VALUES:
        sp = sp_text in ("true", "yes")
    elif tp > 1 and is_megatron_deepspeed(row):
        # Megatron-DeepSpeed's forks of 2021-22 (BLOOM's, MT-NLG's) predate Megatron-LM's
        # sequence parallelism (Korthikanti et al. 2022): the bigscience fork has none at its
        # last commit (bigscience-workshop/Megatron-DeepSpeed 8387ae17, 2023-12: no
        # sequence_parallel under megatron/), and forks that took it later take Megatron-LM's
        # --sequence-parallel, a flag that is off unless given
        sp = False
        notes.append("sequence parallelism not printed: off assumed (Megatron-DeepSpeed: "
                     "Megatron-LM's sequence parallelism absent or off by default)")
    else:
        sp = tp > 1 and stack != "jax-xla"
        if tp > 1:
            notes.append(f"sequence parallelism not printed: {'on' if sp else 'off'} assumed "
                         "with TP > 1")
    order = "tp-cp-pp-dp" if row["source"] == "llama3_table4" else "tp-cp-ep-dp-pp"
    # TP overlap: Transformer Engine's userbuffers (Megatron-Core), or torchtitan's AsyncTP
    # (enable_async_tensor_parallel: PyTorch's micro-pipelined TP, which decomposes each
    # all-gather / reduce-scatter and its GEMM into per-rank chunks -- the same decomposition
    # the model's tp_overlap costs)
    async_tp = "asynctp" in row["framework"].lower().replace(" ", "")
    if async_tp and tp > 1:
        notes.append("AsyncTP printed: TP communication overlapped (micro-pipelined TP)")
    # the overlap is an implementation's (Transformer Engine's userbuffers, AsyncTP): a
    # framework the reader does not know is read with Megatron-Core's costs, not its overlap
    known = names_known_stack(row["framework"])
    if stack == "megatron-core" and not known and tp > 1 and not async_tp:
        notes.append("TP communication not overlapped assumed: the overlap is Transformer "
                     "Engine's (userbuffers) or PyTorch's (AsyncTP), and the framework names "
                     "neither")
    return dict(tp=tp, cp=cp, pp=pp, dp=dp, ep=ep, mbs=mbs, vpp=vpp, schedule=schedule,
                recompute=recompute, zero=zero, sp=sp, order=order,
                tp_overlap=(stack == "megatron-core" and known) or async_tp, dp_overlap=True)


#: the overlap switches a row may state, as ``sp`` is stated (:data:`SP_VALUES`): TP
#: communication under the GEMMs (Transformer Engine userbuffers, AsyncTP) and the data-parallel
#: collectives under the backward / forward (``--overlap-grad-reduce`` / ``--overlap-param-
#: gather``, FSDP's prefetch)
OVERLAP_COLUMNS = ("tp_overlap", "dp_overlap")


def stated_overlaps(row: dict[str, str], config: dict[str, Any], notes: list[str]) -> None:
    """Set ``config``'s overlaps a row states over what its stack, release and framework rules
    assumed (Megatron-LM's own flags are off unless passed, NeMo's recipes turn them on), each
    change said in the row."""
    for column in OVERLAP_COLUMNS:
        text = row.get(column, "").strip().lower()
        if text not in SP_VALUES:
            continue
        on = text in ("true", "yes")
        if config[column] != on:
            notes.append(f"{column} printed {'on' if on else 'off'}: the "
                         f"{'overlap' if on else 'collectives'} as the row states (the rules "
                         f"above assumed {'off' if on else 'on'})")
        config[column] = on


#: why a JAX remat policy maps to a recompute mode of the model
JAX_REMAT_REASON = {
    "dots": "every matmul output saved; element-wise ops and the attention core recomputed",
    "dots_no_mlp_in": "every matmul output but the MLP's input projections (wi) saved; those "
                      "GEMMs, element-wise ops and the attention core recomputed",
    "dots_attn": "only the attention projections' outputs (Q/K/V, output projection) saved; the "
                 "MLP GEMMs, element-wise ops and the attention core recomputed",
    "qkv_proj": "only the Q/K/V projections saved; every other GEMM, element-wise op and the "
                "attention core recomputed",
}

#: MaxText ``remat_policy`` / PaxML ``checkpoint_policy`` names -> recompute mode: the names each
#: policy saves (``jax.checkpoint_policies.save_only_these_names``; MaxText
#: ``Decoder.get_remat_policy``). PaxML's SAVE_QKV_OUT_PROJ keeps what save_dot_except_mlp does;
#: SAVE_DOT_ONLY / dots_saveable keep every dot output.
JAX_REMAT_POLICIES = (
    ("save_dot_except_mlpwi", "dots_no_mlp_in"),
    ("save_dot_except_mlp", "dots_attn"),
    ("save_qkv_out_proj", "dots_attn"),
    ("save_qkv_proj", "qkv_proj"),
    ("save_dot_only", "dots"),
    ("minimal", "dots"),
)


def jax_remat_policy(policy: str) -> str:
    """The recompute mode matching a MaxText / PaxML remat policy (``JAX_REMAT_POLICIES``;
    an unknown policy that saves dots falls back to ``dots``)."""
    p = policy.lower()
    for name, mode in JAX_REMAT_POLICIES:
        if name in p:
            return mode
    return "dots"


#: pipeline schedules a ``schedule`` cell may name beyond 1F1B and interleaved, most specific
#: first: (words in the lower-cased cell, spaces and hyphens dropped) -> the model's schedule
NAMED_SCHEDULES = (
    (("dualpipev",), "dualpipe-v"),
    (("dualpipe",), "dualpipe"),
    (("zbv", "zerobubblev"), "zb-v"),
    (("zbh2", "zerobubbleh2"), "zb-h2"),
    (("zbh1", "zerobubbleh1", "zerobubble"), "zb-h1"),
    (("gpipe",), "gpipe"),
)

def named_schedule(text: str) -> str | None:
    """The model's schedule a ``schedule`` cell names (:data:`NAMED_SCHEDULES`), or None for
    1F1B, interleaved and text that names none."""
    squeezed = re.sub(r"[\s_-]", "", text.lower())
    for words, schedule in NAMED_SCHEDULES:
        if any(w in squeezed for w in words):
            return schedule
    return None


def experts_of(row: dict[str, str]) -> int:
    return _int(row, "experts", 0) or 0


def interleave_guess(layers: int, pp: int) -> int:
    """Chunks per device for an interleaved run that does not print them: the largest of 4, 3,
    2 dividing the layer slots of a stage. When the layers do not split over ``pp`` but two more
    do, the embedding and the loss take one slot each (Llama 3 §3.3.2: one transformer layer
    fewer on the first and the last stage; NeMo's ``account_for_embedding_in_pipeline_split``),
    so a stage has ``(layers + 2) / pp`` slots -- 126 layers on 16 stages are 8 slots, 4
    chunks of 2."""
    slots = layers + 2 if layers % pp and (layers + 2) % pp == 0 else layers
    per_stage = max(slots // pp, 1)
    for v in (4, 3, 2):
        if per_stage % v == 0:
            return v
    return 2


def measured_columns() -> tuple[str, ...]:
    """The columns a row's measurement is read from, most direct first
    (:func:`published_step`)."""
    return ("step_time_s", "tokens_per_s_per_gpu", "tokens_per_s", "model_tflops_per_gpu")


def published_step(row: dict[str, str], model_flops: float, notes: list[str]) -> float:
    """The published step time, from the most direct figure the row prints."""
    seq, batch, gpus = _int(row, "seq_len"), _int(row, "global_batch"), _int(row, "gpus")
    tokens = float(seq * batch)
    if row["step_time_s"]:
        return float(row["step_time_s"])
    if row["tokens_per_s_per_gpu"]:
        return tokens / (float(row["tokens_per_s_per_gpu"]) * gpus)
    if row["tokens_per_s"]:
        return tokens / float(row["tokens_per_s"])
    if row["model_tflops_per_gpu"]:
        if row["source"] == "llama3_table4":
            notes.append("TFLOP/s convention not stated: model FLOPs, full attention square, "
                         "assumed")
        return model_flops / (float(row["model_tflops_per_gpu"]) * 1e12 * gpus)
    raise ValueError(f"calibration row {row['case']}: no step time, tokens/s or TFLOP/s")


def grad_dtype_of(row: dict[str, str], stack: str, release: tuple[int, ...],
                     notes: list[str]) -> str:
    """Gradient buffer dtype. NeMo 2.0 performance recipes reduce gradients in BF16
    (``grad_reduce_in_fp32 = False`` in NeMo ``scripts/performance`` helpers). The NeMo-1.0
    yamls of the DGX Cloud collection's first tag (v24.11.1: ``llama3.1/*.yaml``,
    ``nemo_megatron/gpt3_175b_hydra.yaml``, ``nemotron/*.yaml``) run Apex
    ``DistributedFusedAdam`` (``optim.name: distributed_fused_adam``) with ``grad_sync_dtype:
    bf16`` and ``contiguous_grad_buffer: true``, whose persistent gradient buffer is allocated
    in the grad-sync dtype (``apex/contrib/optimizers/distributed_fused_adam.py``,
    ``_init_grad_buffer``): BF16 too. Megatron-LM (``accumulate_allreduce_grads_in_fp32`` with
    bf16), other NeMo 1.0 runs and FSDP mixed precision keep FP32 gradients."""
    if stack == "megatron-core" and is_nvidia_mlperf(row):
        notes.append("gradients reduced in BF16 (NVIDIA's MLPerf implementations: Apex "
                     "distributed_fused_adam with grad_sync_dtype bf16 for GPT-3, "
                     "grad_reduce_in_fp32 = False for Llama 3.1)")
        return "bf16"
    if stack == "megatron-core" and (row["source"] == "nemo_perf_summary"
                                     or release >= (24, 12)):
        notes.append("gradients reduced in BF16 assumed (NeMo 2.0 performance recipes set "
                     "grad_reduce_in_fp32 = False)")
        return "bf16"
    if stack == "megatron-core" and row["source"] == "dgxc_benchmarking":
        notes.append("gradients in BF16 (the tag's NeMo-1.0 yamls: Apex distributed_fused_adam "
                     "with grad_sync_dtype: bf16 and a contiguous grad buffer in that dtype)")
        return "bf16"
    return "fp32"


#: how a row's ``fp8_recipe`` says the run kept FP8 parameters (Transformer Engine's FP8 weights,
#: Megatron-Core ``--fp8-param-gather``, NeMo ``fp8_params``, MLPerf's ``FP8_PARAMS=True``) ...
FP8_PARAMS_ON = re.compile(r"fp8[ _-]?param|fp8 weights only"
                           r"|weights? (?:kept |stored )?in fp8 only")
#: ... and that it did not
FP8_PARAMS_OFF = re.compile(r"(?:no|without)\s+fp8[ _-]?param|fp8[ _-]?params?\w*\s*[:=]\s*false")


def printed_fp8_params(text: str) -> bool | None:
    """Whether a row's ``fp8_recipe`` text states FP8 parameters (True), states their absence
    (False) or says nothing of them (None)."""
    text = text.lower()
    if FP8_PARAMS_OFF.search(text):
        return False
    if FP8_PARAMS_ON.search(text):
        return True
    return None


def fp8_param_gather_of(row: dict[str, str], stack: str, release: tuple[int, ...],
                        notes: list[str]) -> bool:
    """Whether an FP8 run kept its linear weights only in FP8 (``job.fp8_param_gather``).

    - NeMo 2.0 performance scripts (DGX Cloud Benchmarking v25.04+: NeMo >= 25.02) take the FP8
      precision plugin ``bf16_with_fp8_mixed`` (``scripts/performance/utils.py``), which sets
      ``fp8_params = True`` (NeMo 2.2) / ``fp8_param_gather = True`` (NeMo 2.3;
      ``nemo/collections/llm/recipes/precision/mixed_precision.py``).
    - Megatron-Bridge performance configs (NeMo 25.11+ containers) take
      ``bf16_with_fp8_current_scaling_mixed`` (``fp8_param_gather = True``,
      ``src/megatron/bridge/training/mixed_precision.py``), as do 25.09's delayed,
      current-scaling and MXFP8 recipes (Megatron-Bridge v0.1.0rc3 / rc4). Only the
      subchannel recipe (128x128 / 1x128 blocks: the 25.09 page's parenthesised H100 numbers,
      none of which is a row here) keeps 16-bit weights.
    - NeMo 1.0 yamls: only the GPT-3 175B one sets ``fp8_params: true``
      (dgxc-benchmarking ``nemo_megatron/gpt3_175b_hydra.yaml``, v24.11.1 and v25.02); the
      Llama 3.1 and Nemotron-4 yamls do not.
    - Any other source's NeMo >= 25.02 row: the NeMo 2.0 scripts' plugins, as above.

    What the row's ``fp8_recipe`` prints about FP8 parameters (:func:`printed_fp8_params`)
    comes first.
    """
    if row["dtype"] != "fp8":
        return False
    if stack == "pytorch-fsdp":
        # torchao's float8 training with enable_fsdp_float8_all_gather: FSDP2 all-gathers the
        # linear weights as FP8 (torchao float8 README, "float8 all-gather with FSDP2")
        on = "fsdp all-gather" in row["fp8_recipe"].lower()
        if on:
            notes.append("FP8 FSDP all-gather printed: linear weights gathered in FP8")
        return on
    if stack != "megatron-core":
        return False
    printed = printed_fp8_params(row["fp8_recipe"])
    if printed is not None:
        notes.append("FP8 weights without a 16-bit copy printed" if printed else
                     "16-bit weights beside the FP8 ones printed (no FP8 parameters)")
        return printed
    source = row["source"]
    # the subchannel recipe (128x128 weight / 1x128 activation blocks) keeps 16-bit weights
    blocks = "128x128" in row["fp8_recipe"].replace("×", "x")
    on = False
    if source == "nemo_perf_summary":
        # from 25.09 (Megatron-Bridge v0.1.0rc3/rc4) the performance configs run the per-tensor
        # delayed or current-scaling recipes (H100, the table's plain numbers) or MXFP8 (B200's
        # parenthesised ones): scripts/performance/configs/*/..._llm_pretrain.yaml perf_matrix
        # fp8_ds / fp8_cs / fp8_mx, each with fp8_param_gather = True
        # (src/megatron/bridge/training/mixed_precision.py); only the subchannel recipe, 128x128
        # weight / 1x128 activation blocks (25.09's parenthesised H100 numbers), keeps 16-bit
        # weights (fp8_param_gather = False)
        on = release >= (25, 9) and not blocks
        why = "Megatron-Bridge FP8 precision config sets fp8_param_gather = True"
    elif source == "dgxc_benchmarking":
        if release >= (25, 2):
            on = True
            why = "NeMo 2.0 bf16_with_fp8_mixed sets fp8_params / fp8_param_gather = True"
        elif row["model"].startswith("gpt3"):
            on = True
            why = "NeMo 1.0 gpt3_175b_hydra.yaml sets fp8_params: true"
    elif release >= (25, 2) and not blocks:
        # any other table of a NeMo 2.0 release: its performance scripts' FP8 plugins keep the
        # weights in FP8 only, as above
        on = True
        why = ("NeMo >= 25.02 performance scripts' FP8 precision plugins set fp8_params / "
               "fp8_param_gather = True")
    if on:
        notes.append(f"FP8 weights without a 16-bit copy assumed ({why})")
    return on


def te_fp8_recipe_note(row: dict[str, str], stack: str, release: tuple[int, ...],
                       notes: list[str]) -> None:
    """Say which Transformer Engine scaling recipe a Megatron-Core FP8 row ran, and that it is
    costed as delayed scaling (the job default: one cast pass per linear input).

    - printed: ``FP8 current scaling`` / ``FP8-CS`` (TE ``Float8CurrentScaling``), ``MXFP8``
      (TE ``MXFP8BlockScaling``), delayed scaling;
    - not printed, a NeMo >= 25.11 container: the Megatron-Bridge performance configs' FP8
      precision, ``bf16_with_fp8_current_scaling_mixed``
      (``src/megatron/bridge/training/mixed_precision.py``; the H100 configs are the
      ``*_FP8_CS_*`` ones), as 25.11 prints it;
    - not printed otherwise: NeMo 2.0's performance scripts' ``bf16_with_fp8_mixed`` and the
      NeMo 1.0 yamls run delayed scaling (25.09's perf matrix ran both and does not say which).

    Current scaling reads each tensor once more for its amax (``spec.pack.fp8_cast_bytes``:
    6 bytes an element against 4). Costed so on the 21 H100 rows that ran it and refitted, every
    source but NeMo's long-sequence one got worse (docs/accuracy.md, "Tried and not adopted
    (stop 37)"), so the rows keep the delayed recipe's cost and say so; MXFP8's block scales
    add 1/32 of a byte an element, which the model leaves out with them."""
    if row["dtype"] != "fp8" or stack != "megatron-core":
        return
    text = row["fp8_recipe"].lower()
    costed = "costed as delayed scaling, one cast pass (docs/accuracy.md)"
    if "mxfp8" in text or "microscaling" in text:
        notes.append(f"FP8 recipe printed: MXFP8 block scaling; {costed}")
    elif any(w in text for w in ("current scaling", "fp8-cs", "tensorwise")):
        notes.append(f"FP8 recipe printed: per-tensor current scaling; {costed}")
    elif "delayed" in text:
        return
    elif text.strip() and not re.search(r"not (?:stated|printed|given)|unknown", text):
        # printed, in words the reader does not tell apart (a format such as E4M3 / hybrid, a
        # block recipe): said as printed, not as "not printed"
        notes.append(f"FP8 recipe printed as {row['fp8_recipe']!r}, not one the reader tells "
                     f"apart; {costed}")
    elif row["source"].startswith("nemo_perf_summary") and release >= (25, 11):
        notes.append("FP8 recipe not printed: per-tensor current scaling, the Megatron-Bridge "
                     f"performance configs' bf16_with_fp8_current_scaling_mixed; {costed}")
    elif row["source"].startswith("nemo_perf_summary") and release >= (25, 9):
        notes.append("FP8 recipe not printed: delayed scaling assumed (25.09's performance "
                     "matrix ran delayed and current scaling, its table does not say which)")
    else:
        notes.append("FP8 recipe not printed: delayed scaling assumed (the job default; NeMo "
                     "2.0's performance scripts run bf16_with_fp8_mixed, delayed)")


def is_torchtitan(row: dict[str, str]) -> bool:
    """Whether a row ran torchtitan (its ``framework`` names it)."""
    return "torchtitan" in row["framework"].lower()


def torchtitan_eager(row: dict[str, str]) -> bool:
    """Whether a row ran torchtitan without torch.compile (its ``framework`` says "eager")."""
    return is_torchtitan(row) and "eager" in row["framework"].lower()


def torchtitan_loss_upcast(row: dict[str, str]) -> bool:
    """Whether a row's loss ran torchtitan's uncompiled loss on fp32 logits: every run without
    torch.compile, and every run of a torchtitan dated before its loss was compiled with the
    model (bbb1b616e, 2025-04-02: ``build_cross_entropy_loss``); until then ``train.py`` (or
    the model's ``output(h).float()``) upcast the logits eagerly."""
    if not is_torchtitan(row):
        return False
    if torchtitan_eager(row):
        return True
    match = re.search(r"torchtitan \w+ \((\d{4})-(\d{2})", row["version"])
    return match is not None and (int(match.group(1)), int(match.group(2))) < (2025, 4)


def torchao_fp8_recipe_of(row: dict[str, str], notes: list[str]) -> str | None:
    """The scaling recipe of a row trained with torchao's float8 (``job.fp8_recipe``), None for
    any other row. torchao's ``Float8LinearConfig`` defaults to dynamic tensorwise scaling
    (``torchao/float8/config.py``; ``Float8LinearRecipeName.TENSORWISE``), torchtitan's
    ``--float8.recipe_name rowwise`` picks the rowwise one; a row names the recipe in its
    ``fp8_recipe`` text when it is not the default."""
    text = row["fp8_recipe"].lower()
    if row["dtype"] != "fp8" or "torchao" not in text:
        return None
    if "rowwise" in text:
        notes.append("torchao float8 rowwise scaling (printed)")
        return "rowwise"
    if "tensorwise" not in text:
        notes.append("torchao float8 scaling not printed: its default, dynamic tensorwise, "
                     "assumed")
    return "tensorwise"


#: Optimizer settings a recipe file states beside the layout the table prints: (source, model,
#: newest NeMo release the recipe applies to) -> job fields and the file. DGX Cloud
#: Benchmarking's NeMo 1.0 Nemotron-4 340B yaml (v24.11.1 and v25.02,
#: ``nemotron/nemotron4-340b-synth.yaml``, ``optim``) runs ``distributed_fused_adam`` with
#: ``dtype: bf16`` and ``grad_sync_dtype: bf16``: Apex DistributedFusedAdam with bf16 moments
#: and, the optimizer dtype equalling the model's, no master copy (NeMo
#: ``megatron_base_model.py setup_optimization``: ``store_params = False``).
RECIPE_OPTIMIZER = {
    ("dgxc_benchmarking", "nemotron4-340b", (24, 9)): (
        {"optimizer_dtype": "bf16", "grad_dtype": "bf16"},
        "recipe yaml (nemotron4-340b-synth.yaml optim: distributed_fused_adam, dtype bf16, "
        "grad_sync_dtype bf16): Adam moments and gradients in bf16, no fp32 master copy"),
    # the NeMo 24.07 launcher's yaml of the same model says the same
    # (NVIDIA/NeMo-Megatron-Launcher@4550dc9f conf/training/nemotron/nemotron_340b.yaml)
    ("nemo_perf_summary_2407", "nemotron4-340b", (24, 7)): (
        {"optimizer_dtype": "bf16", "grad_dtype": "bf16"},
        "recipe yaml (launcher nemotron_340b.yaml optim: distributed_fused_adam, dtype bf16, "
        "grad_sync_dtype bf16): Adam moments and gradients in bf16, no fp32 master copy"),
}


#: TP communication overlap a recipe file turns off (the reader's default is Transformer
#: Engine's userbuffers overlap on every Megatron-Core row with TP > 1): (source, model, newest
#: release) -> why. Nemotron-4 340B's NeMo-1.0 yamls set ``ub_tp_comm_overlap: False``: DGX
#: Cloud v24.11.1 ``nemotron/nemotron4-340b-synth.yaml`` and the 24.07-era launcher's
#: ``conf/training/nemotron/nemotron_340b.yaml`` (NVIDIA/NeMo-Megatron-Launcher@4550dc9f), as
#: the model's own pre-training config does (the same file at 7c842fcd, "actual GPU/GBS numbers
#: used in pretraining").
RECIPE_NO_TP_OVERLAP = {
    # NeMo 2.3's DeepSeek-V3 performance script (NVIDIA/NeMo r2.3.0
    # scripts/performance/llm/pretrain_deepseek_v3.py: MegatronCommOverlapCallback(
    # tp_comm_overlap=False)), which the DGX Cloud 25.05 rows ran
    ("dgxc_benchmarking", "deepseek-v3", (25, 4, 1)): (
        "recipe script (NeMo 2.3 pretrain_deepseek_v3.py MegatronCommOverlapCallback "
        "tp_comm_overlap=False): TP communication not overlapped"),
    ("dgxc_benchmarking", "nemotron4-340b", (24, 9)): (
        "recipe yaml (nemotron4-340b-synth.yaml ub_tp_comm_overlap: False): TP communication "
        "not overlapped"),
    ("nemo_perf_summary_2407", "nemotron4-340b", (24, 7)): (
        "recipe yaml (launcher nemotron_340b.yaml ub_tp_comm_overlap: False): TP communication "
        "not overlapped"),
}


#: how a row's ``model`` or ``notes`` says a run trained without its multi-token prediction
#: block (the NeMo performance summary prints "DeepSeekV3 (w/o MTP)" beside "(w/ MTP)" rows)
MTP_OFF = re.compile(r"\b(?:w/o|without|no)\s+mtp\b|\bmtp\s*(?:off|disabled|=\s*0)\b")


def printed_mtp(row: dict[str, str]) -> bool | None:
    """False where the row's ``model`` or ``notes`` say the run had no MTP block
    (:data:`MTP_OFF`), None where they do not say."""
    text = f"{row['model']} {row.get('notes', '')}".lower()
    return False if MTP_OFF.search(text) else None


def recipe_rule(table: dict, row: dict[str, str], release: tuple[int, ...]) -> Any:
    """The entry of a recipe table keyed ``(source, model, newest release)`` that holds for
    ``row``: its source and model, a known release no newer than the key's; None else."""
    for (source, model, newest), value in table.items():
        if row["source"] == source and row["model"] == model and () < release <= newest:
            return value
    return None


def recipe_tp_overlap_of(row: dict[str, str], release: tuple[int, ...],
                         config: dict[str, Any], notes: list[str]) -> None:
    """Turn ``config``'s TP overlap off where the row's recipe file does
    (``RECIPE_NO_TP_OVERLAP``), with a note."""
    why = recipe_rule(RECIPE_NO_TP_OVERLAP, row, release)
    if why is not None and config["tp_overlap"]:
        config["tp_overlap"] = False
        notes.append(why)


def recipe_optimizer_of(row: dict[str, str], release: tuple[int, ...],
                        notes: list[str]) -> dict[str, str]:
    """Optimizer fields a row's recipe file states (``RECIPE_OPTIMIZER``), with a note."""
    rule = recipe_rule(RECIPE_OPTIMIZER, row, release)
    if rule is None:
        return {}
    fields, why = rule
    notes.append(why)
    return dict(fields)


#: Layout degrees a release's recipe states where the printed table contradicts itself or
#: repeats an older release's columns: (source, model, release, gpu) -> (config fields, job
#: fields, why); the notes that assumed an unprinted value of a field it sets are dropped
#: (:data:`ASSUMED_NOTE_PREFIX`). NeMo 25.11's GPT-OSS 120B rows swap
#: values between the DGX-H100 and DGX-B200 tables (Megatron-Bridge v0.2.0,
#: ``scripts/performance/configs/gpt_oss/workload_base_configs.py``):
#:
#: - the H100 row prints MBS 4 and GA 2, the B200 row's values (64 GPUs, PP 1, DP 64: 512 /
#:   (4 x 64) = 2); on H100's PP 4, DP 16 they would need GA 8. ``GPT_OSS_120B_H100_BF16_
#:   BASE_CONFIG`` keeps the base ``micro_batch_size = 1`` (GA 32);
#: - the B200 row prints EP 8, the H100 row's degree. ``GPT_OSS_120B_B200_BF16_BASE_CONFIG``
#:   runs EP 64, and the row's 8,213 tokens/s/GPU sits with the 26.02 EP 64 row's 8,047, not
#:   with the EP 8 rows of 26.02.01-26.04.01 (13,000-13,700).
#:
#: NeMo 26.02.01's DGX-H100 Qwen3-30B-A3B row prints 26.02's layout (PP 2, VP 12, EP 8): the
#: commit that wrote that section (Megatron-Bridge ``1f0cfc3bc``, "2602_perf_table_reorder and
#: patch container data", on the ``r0.3.0`` branch the container ships) copied 26.02's
#: columns and changed the throughput. The recipe at that commit and at tag v0.3.1
#: (``QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_{BF16,FP8_CS}_V1`` in
#: ``scripts/performance/configs/qwen/qwen3_workload_base_configs.py``, changed by
#: ``f29a269f8`` "Update Qwen3 30B H100 Base Configs with HybridEP") runs PP 1, EP 16, and the
#: row's 9,058 tokens/s/GPU sits with the PP 1 / EP 16 rows of 26.04-26.06 (8,826-8,960), not
#: with 26.02's 5,113. NeMo 25.11's row likewise prints 25.09's VP 24 / MBS 2 (GA 32); the
#: release's recipe (v0.2.0 ``QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG`` in
#: ``scripts/performance/configs/qwen3/workload_base_configs.py``) runs VP 12 at the base
#: ``micro_batch_size = 1`` with the EP all-to-all overlap on -- 26.02's recipe -- and the row's
#: 5,275 tokens/s/GPU sits with 26.02's 5,113, not with 25.09's 10,494.
#:
#: NeMo 25.11's DGX-H100 LLAMA3_8B row prints 25.09's Megatron FSDP 8 without recompute: the
#: commit that created the 25.11 section (Megatron-Bridge ``35b5ecb74``) renamed the 25.09
#: header and edited only the throughput cells, and the r0.2.0 branch had moved the recipe off
#: FSDP on 2025-11-21 (``8aed9a229``), before the v0.2.0 tag: ``LLAMA3_8B_H100_FP8_CS_BASE_CONFIG
#: = replace(BASE_LLAMA3_8B_CONFIG, context_parallel_size=1, recompute_num_layers=5)``
#: (``scripts/performance/configs/llama3/workload_base_configs.py`` at v0.2.0), no
#: ``use_megatron_fsdp`` (DDP with the distributed optimizer), and the harness runs
#: ``recompute_granularity = "full"``, ``recompute_method = "block"`` with it
#: (``scripts/performance/utils/helpers.py``). No other release prints an H100 8B row, so no
#: throughput corroborates it (25.09's FSDP run reached 14,079 tokens/s/GPU, 25.11 14,451).
RECIPE_LAYOUT = {
    ("nemo_perf_summary", "gpt-oss-120b", (25, 11), "h100-sxm-80gb"): (
        {"mbs": 1}, {},
        "printed MBS 4 / GA 2 are the DGX-B200 row's (GBS / (MBS x DP) = 8 here): MBS 1 from "
        "the release's H100 recipe (Megatron-Bridge v0.2.0 GPT_OSS_120B_H100_BF16_BASE_CONFIG)"),
    ("nemo_perf_summary", "gpt-oss-120b", (25, 11), "b200"): (
        {"ep": 64}, {},
        "printed EP 8 is the DGX-H100 row's: EP 64 from the release's B200 recipe "
        "(Megatron-Bridge v0.2.0 GPT_OSS_120B_B200_BF16_BASE_CONFIG), as its throughput "
        "matches the 26.02 EP 64 row"),
    ("nemo_perf_summary", "qwen3-30b-a3b", (26, 2, 1), "h100-sxm-80gb"): (
        {"pp": 1, "vpp": 1, "schedule": "1f1b", "dp": 16, "ep": 16}, {},
        "printed PP 2 / VP 12 / EP 8 are the 26.02 row's: PP 1, EP 16 (DP 16) from the "
        "release's H100 recipe (Megatron-Bridge r0.3.0 / v0.3.1 "
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1), as its throughput matches the "
        "26.04-26.06 EP 16 rows"),
    ("nemo_perf_summary", "qwen3-30b-a3b", (25, 11), "h100-sxm-80gb"): (
        {"vpp": 12, "mbs": 1}, {},
        "printed VP 24 / MBS 2 are the 25.09 row's: VP 12, MBS 1 from the release's H100 "
        "recipe (Megatron-Bridge v0.2.0 QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG), as its "
        "throughput matches the 26.02 row of that recipe"),
    ("nemo_perf_summary", "llama3-8b", (25, 11), "h100-sxm-80gb"): (
        {"zero": 1, "recompute": "full"}, {"recompute_layers": 5},
        "printed FSDP 8 without recompute is the 25.09 row's layout: the release's recipe "
        "(Megatron-Bridge v0.2.0 LLAMA3_8B_H100_FP8_CS_BASE_CONFIG) runs the distributed "
        "optimizer (ZeRO-1) with full recompute of the first 5 layers (recompute_method block, "
        "job.recompute_layers = 5)"),
}
#: The note :func:`config_of` writes when it assumes a field's value the row does not print
ASSUMED_NOTE_PREFIX = {"recompute": "recompute not printed", "zero": "ZeRO stage not printed",
                       "mbs": "mbs not printed"}
#: the note of a row whose recompute is not printed and was read as none
UNSTATED_RECOMPUTE_NOTE = "recompute not printed: none assumed (the recipes run without)"
#: the note of an MoE row whose expert parallelism is not printed and was read as 1
UNSTATED_EP_NOTE = "ep not printed: 1 assumed (every expert on every data-parallel rank)"


def unstated_ep_fallbacks(experts: int, dp: int) -> tuple[int, ...]:
    """The expert-parallel degrees to try for an MoE row that prints none where EP 1 does not
    fit (``Runner.settle_layout``, which takes the fastest that fits): the powers of two above
    1 that divide both the routed experts and the data-parallel degree, so each rank of an EP
    group holds whole experts and the groups tile the data-parallel ranks (Megatron-Core's and
    torchtitan's EP both take its ranks from the data-parallel dimension)."""
    out = []
    ep = 2
    while ep <= dp:
        if experts % ep == 0 and dp % ep == 0:
            out.append(ep)
        ep *= 2
    return tuple(out)


def unstated_recompute_fallbacks(row: dict[str, str], stack: str) -> tuple[str, ...]:
    """The recompute modes to try, lightest first, for a row that prints none where none does
    not fit: the run did fit, so it recomputed something, and the lightest mode of its stack
    that fits is the likeliest (``Runner.settle_layout``). Megatron's selective recompute
    (the core attention, Korthikanti et al. 2022 §4.2, Megatron-LM
    ``--recompute-granularity selective``) then full; torchtitan's per-op selective
    checkpointing then full (its ``activation_checkpoint.mode`` choices); other FSDP stacks
    (llm-foundry, DeepSpeed ZeRO) and MaxText checkpoint whole layers
    (``activation_checkpointing: true``; MaxText's default ``remat_policy: full``)."""
    if stack in ("megatron-core", "megatron-lm"):
        return ("selective", "full")
    if stack == "pytorch-fsdp" and is_torchtitan(row):
        return ("op_selective", "full")
    return ("full",)


#: what each field of :func:`unstated_precision_fallbacks` means, for the row's note
PRECISION_FALLBACK_WORDS = {
    "grad_dtype": "gradients kept and reduced in BF16 (Megatron-Core grad_reduce_in_fp32 = "
                  "False)",
    "fp8_param_gather": "FP8 weights only, no 16-bit copy (Megatron-Core fp8_param_gather)",
    "optimizer_dtype": "BF16 optimizer states (Adam moments in BF16, no FP32 master copy: "
                       "Apex distributed_fused_adam dtype bf16, Megatron-Core's "
                       "precision-aware optimizer)",
    "cross_entropy": "a fused cross-entropy (the logits and their gradient only, no FP32 copy: "
                     "Megatron-Core cross_entropy_loss_fusion, flash-attn's or Liger's loss "
                     "kernels, a loss on the 16-bit logits)",
}


def unstated_precision_fallbacks(row: dict[str, str], stack: str,
                                 job: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """The memory-lighter precisions to try, in turn, for a Megatron-Core row whose
    layout does not fit even with the recompute and expert-parallel fallbacks
    (``Runner.settle_layout``). A published table prints no precision of the gradients, the
    weights or the optimizer states, and the run did fit, so it ran the lighter settings its
    stack offers, the most common first: BF16 gradients (NeMo 2.0's and Megatron-Bridge's
    recipes set ``grad_reduce_in_fp32 = False``), for FP8 runs FP8 weights without a 16-bit
    copy (``fp8_param_gather``, the same recipes), then BF16 optimizer states (NeMo 1.0's
    Nemotron-4 340B yaml: Apex ``distributed_fused_adam`` with ``dtype: bf16``; Megatron-Core
    ``--use-precision-aware-optimizer``) with 16-bit weights, as FP8 weights need an FP32
    master copy (``spec.models``). The later steps keep BF16 gradients; a field the reading
    already set that light (or a release recipe stated) is not tried. Other stacks have none of
    these to try (Megatron-LM forces FP32 gradient accumulation with BF16, ``arguments.py``;
    the FSDP and JAX stacks' precisions are their own). Last, on every stack, where the reading
    left the loss at the job's default (an FP32 copy of the logits beside them) and no table
    prints the loss: a fused cross-entropy (``job.cross_entropy = "fused"``: Megatron-Core's
    ``cross_entropy_loss_fusion``, which NeMo's and Megatron-Bridge's recipes set, flash-attn's
    and Liger's loss kernels, a loss taken on the 16-bit logits as NeMo AutoModel's is)."""
    steps = []
    grads = {}
    if stack == "megatron-core" and row["dtype"] in ("bf16", "fp16", "fp8"):
        grads = {} if job.get("grad_dtype", "fp32") == "bf16" else {"grad_dtype": "bf16"}
        steps.append(grads)
        if row["dtype"] == "fp8" and not job.get("fp8_param_gather", False):
            steps.append({**grads, "fp8_param_gather": True})
        if (job.get("optimizer_dtype", "fp32") != "bf16"
                and not job.get("fp8_param_gather", False)
                and row["dtype"] != "fp16"):  # FP16 weights need an FP32 master copy
            steps.append({**grads, "optimizer_dtype": "bf16"})
    if "cross_entropy" not in job:
        steps.append({**grads, "cross_entropy": "fused"})
    return tuple(step for step in steps if step)


def recipe_layout_of(row: dict[str, str], release: tuple[int, ...], config: dict[str, Any],
                     notes: list[str]) -> dict[str, Any]:
    """The layout a row's release recipe runs where the table prints another
    (``RECIPE_LAYOUT``): ``config`` updated, the assumed-value notes of the fields it sets
    replaced by the rule's own; returns the rule's job fields ({} where none holds)."""
    rule = RECIPE_LAYOUT.get((row["source"], row["model"], release, row["gpu"]))
    if rule is None:
        return {}
    fields, job_fields, why = rule
    config.update(fields)
    dropped = tuple(ASSUMED_NOTE_PREFIX[k] for k in fields if k in ASSUMED_NOTE_PREFIX)
    notes[:] = [n for n in notes if not n.startswith(dropped)]
    notes.append(why)
    return dict(job_fields)


#: Megatron-Core recompute modules a recipe runs where the table prints no recompute: (source,
#: model) -> (first NeMo release, modules, why). Megatron-Bridge's GPT-OSS 120B performance
#: configs, H100 and B200 alike, set ``recompute_modules=["layernorm", "moe_act"]`` from v0.2.0
#: (NeMo 25.11) on (``scripts/performance/configs/gpt_oss/workload_base_configs.py`` at v0.2.0,
#: ``gpt_oss_workload_base_configs.py`` at v0.3.0 / v0.4.0); the performance scripts then run
#: selective recompute (``utils/overrides.py set_recompute_overrides``).
RECIPE_RECOMPUTE_MODULES = {
    ("nemo_perf_summary", "gpt-oss-120b"): (
        (25, 11), ["layernorm", "moe_act"],
        "recompute not printed: the release's recipe runs selective recompute with "
        "recompute_modules [layernorm, moe_act] (Megatron-Bridge GPT-OSS 120B configs)"),
}


def recipe_recompute_modules_of(row: dict[str, str], release: tuple[int, ...],
                                config: dict[str, Any], notes: list[str]) -> list[str]:
    """The recompute modules a row's recipe runs (``RECIPE_RECOMPUTE_MODULES``) where the table
    prints no recompute: the config becomes selective recompute, the note says why; [] else."""
    recipe = RECIPE_RECOMPUTE_MODULES.get((row["source"], row["model"]))
    if recipe is None or release < recipe[0] or row["recompute"]:
        return []
    config["recompute"] = "selective"
    notes[:] = [n for n in notes if not n.startswith("recompute not printed")]
    notes.append(recipe[2])
    return list(recipe[1])


def printed_recompute_modules_of(row: dict[str, str], config: dict[str, Any],
                                 notes: list[str]) -> list[str]:
    """Megatron-Core recompute modules a row prints after its selective recompute
    (``selective: mla_up_proj,mlp,moe``): the ones the model has
    (``spec.models.RECOMPUTE_MODULES``), with a note naming any it leaves out."""
    from ..spec.models import RECOMPUTE_MODULES

    # only "selective: a,b": a parenthesised remark after "selective" ("selective (launcher
    # yaml activations_checkpoint_granularity: selective)") names no module
    match = re.fullmatch(r"\s*selective\s*:\s*(.+?)\s*", row["recompute"])
    if config["recompute"] != "selective" or match is None:
        return []
    printed = [m.strip() for m in match.group(1).split(",") if m.strip()]
    kept = [m for m in printed if m in RECOMPUTE_MODULES]
    left = [m for m in printed if m not in RECOMPUTE_MODULES]
    if left:
        why = {"mla_up_proj": "mla_up_proj: the model costs multi-latent attention as "
                              "grouped-query attention"}
        reasons = [why[m] for m in left if m in why]
        notes.append(f"recompute modules {', '.join(left)} not modelled"
                     + (f" ({'; '.join(reasons)})" if reasons else ""))
    return kept


#: a ``recompute`` cell's activation offload: Megatron-Core's ``--cpu-offloading-num-layers N``
#: (Megatron-Bridge ``cpu_offloading_num_layers = N``), the saved activations of N layers of each
#: model chunk copied to host memory in the forward and back for the backward
OFFLOAD_LAYERS = re.compile(r"cpu[_ -]offloading[_ -]num[_ -]layers\s*[=:]?\s*(\d+)")


def printed_activation_offload_of(row: dict[str, str], config: dict[str, Any], layers: int,
                                  notes: list[str]) -> float:
    """The share of each pipeline stage's layers whose saved activations a row offloads to host
    memory (``job.offload_activations``), from a ``cpu_offloading_num_layers = N`` its
    ``recompute`` cell prints (Megatron-Core ``TransformerBlock`` through Transformer Engine
    ``get_cpu_offload_context(num_layers=N)``: N of the chunk's layers); 0 when it prints none."""
    match = OFFLOAD_LAYERS.search(row["recompute"].lower())
    if match is None:
        return 0.0
    stage_layers = layers / (config["pp"] * config["vpp"])
    offloaded = int(match.group(1))
    share = min(1.0, offloaded / stage_layers)
    notes.append(f"activation offload printed: the saved activations of {offloaded} of each "
                 f"model chunk's {stage_layers:g} layers go to host memory "
                 f"(job.offload_activations = {share:.3g})")
    return share


#: model families trained with dropout (Megatron-LM's default hidden/attention dropout 0.1,
#: kept by the GPT-3 recipes); every other family here trains without (Llama, MPT, Nemotron-4,
#: Qwen3, GPT-OSS configs: dropout 0; BLOOM tr11: hidden/attention dropout 0)
DROPOUT_FAMILIES = ("gpt",)


def is_nvidia_mlperf(row: dict[str, str]) -> bool:
    """A run of NVIDIA's NeMo-based MLPerf Training LLM implementation (its own submissions and
    partners' runs of it), which its ``framework`` or ``version`` names."""
    text = (row["framework"] + " " + row["version"]).lower()
    return "mlperf" in text and "nemo" in text


def dropout_of(model: str, notes: list[str], row: dict[str, str]) -> bool:
    """Whether a model family stores dropout masks (see DROPOUT_FAMILIES); NVIDIA's MLPerf
    implementations train without (GPT-3: ``conf/custom.yaml`` hidden and attention dropout
    0.0; Llama 3.1: NeMo's ``Llama3Config``)."""
    if is_nvidia_mlperf(row):
        return False
    on = model.startswith(DROPOUT_FAMILIES) and not model.startswith("gpt-oss")
    if on:
        notes.append("dropout on assumed (Megatron-LM default 0.1 for GPT models)")
    return on


def run_of(source_id: str, row: dict[str, str]) -> PublishedRun:
    """One CSV row as a :class:`PublishedRun`."""
    from ..model.llm import model_flops_per_sequence
    from ..spec import pack_model
    from ..spec.models import ModelSpec

    notes: list[str] = []
    # the stack facts below key on the row's own source (a file's rows, or a user's file's,
    # with the same source id read the same way)
    source = row["source"] or source_id
    stack = stack_of(row["framework"], notes)
    dated = megatron_lm_date(row)
    # a stack of Megatron's own (not FSDP or JAX that borrows Megatron-LM's TP layers, as
    # metaseq does) dated before its overlaps existed
    legacy_megatron = (dated is not None and dated < MEGATRON_LM_DP_OVERLAP_DATE
                       and stack in ("megatron-core", "megatron-lm"))
    if legacy_megatron:
        stack = "megatron-lm"
    release = release_of(row)
    model = model_of(row, notes)
    mtp = recipe_rule(RECIPE_MTP, row, release)
    if mtp is not None and printed_mtp(row) is False:
        notes.append("multi-token prediction printed off (w/o MTP): no MTP block, whatever the "
                     "release's recipe sets")
    elif mtp is not None:
        if mtp[0]:
            model["mtp_layers"] = mtp[0]
        notes.append(mtp[1])
    elif stack == "megatron-core" and printed_mtp(row) is None:
        depth = int(model_preset_facts(row["model"]).get("mtp_layers", 0))
        if depth:
            model["mtp_layers"] = depth
            notes.append(f"multi-token prediction not printed: depth {depth}, the model's own "
                         "(its preset), as Megatron-Core's recipes for it train it "
                         "(Megatron-Bridge deepseek_v3 / glm45 mtp_num_layers = 1)")
    config = config_of(row, stack, notes)
    if legacy_megatron:
        # Megatron-LM before --overlap-grad-reduce: gradients all-reduced after the backward
        # pass, no Transformer Engine overlap (the megatron-lm profile's tp_overlap is off)
        config["dp_overlap"] = False
        notes.append(f"Megatron-LM of {'-'.join(f'{d:02d}' for d in dated)}: the Megatron-LM "
                     "profile, before --overlap-grad-reduce (2023-08) and --tp-comm-overlap "
                     "(2023-10): gradients reduced after the backward pass, no TP overlap")
    recipe_job = recipe_layout_of(row, release, config, notes)
    recompute_modules = (recipe_recompute_modules_of(row, release, config, notes)
                         or printed_recompute_modules_of(row, config, notes))
    seq, batch = _int(row, "seq_len"), _int(row, "global_batch")
    dtype = row["dtype"]
    flash = source != "bloom_176b"  # BLOOM (2022) ran Megatron's unfused attention
    job = {"seq_len": seq, "global_batch": batch, "dtype": dtype, "flash_attention": flash,
           "stack": stack,
           "grad_dtype": grad_dtype_of(row, stack, release, notes)}
    job["dropout"] = dropout_of(model["name"], notes, row)
    replicas = hybrid_replicas_of(row, config, notes)
    if replicas is not None:
        job["dp_replicas"] = replicas
    if fp8_param_gather_of(row, stack, release, notes):
        job["fp8_param_gather"] = True
    if torchtitan_loss_upcast(row):
        job["cross_entropy"] = "upcast"
        notes.append("loss: torchtitan's uncompiled F.cross_entropy on fp32 logits (before "
                     "bbb1b616e, 2025-04): the fp32 copy and log-softmax both held")
    if torchtitan_eager(row):
        # torchtitan without torch.compile: its RMSNorm, rotary embedding and SwiGLU run op
        # by op (models/norms.py, models/llama/model.py)
        job["elementwise"] = "eager"
        notes.append("torchtitan in eager mode (no torch.compile): norms, rotary embedding and "
                     "SwiGLU unfused (job.elementwise = eager)")
    if is_torchtitan(row) and config["pp"] > 1 and config["zero"] == 3:
        # torchtitan's apply_fsdp: "For PP, do not reshard after forward to avoid
        # per-microbatch all-gathers" (parallelisms/parallelize_llama.py at 9dec370), and
        # PyTorch pipelining's backward without gradient sync before the last microbatch
        job["fsdp_pp_unsharded"] = True
        notes.append("torchtitan FSDP2 under PP: no reshard after forward, gradients "
                     "accumulated unsharded until the last microbatch (job.fsdp_pp_unsharded)")
    torchao_recipe = torchao_fp8_recipe_of(row, notes)
    if torchao_recipe is not None:
        job["fp8_recipe"] = torchao_recipe
    te_fp8_recipe_note(row, stack, release, notes)
    job.update(recipe_optimizer_of(row, release, notes))
    recipe_tp_overlap_of(row, release, config, notes)
    if recompute_modules:
        job["recompute_modules"] = recompute_modules
    offload = printed_activation_offload_of(row, config, model["layers"], notes)
    if offload:
        job["offload_activations"] = offload
    job.update(recipe_job)
    if source == "automodel_perf_summary":
        # NeMo AutoModel's benchmark configs (examples/benchmark/configs/*_te_deepep.yaml at
        # 89e3a9fdd604, the commit of the performance summary) compute the loss with
        # MaskedCrossEntropy(fp32_upcast=False): F.cross_entropy on the bf16 logits, whose
        # log-softmax is kept in bf16 -- no fp32 copy (nemo_automodel/components/loss/
        # masked_ce.py)
        job["cross_entropy"] = "fused"
        notes.append("loss: AutoModel's MaskedCrossEntropy without fp32 upcast (benchmark "
                     "configs): 16-bit logits and log-softmax, no fp32 copy")
    if is_llm_foundry(row):
        # llm-foundry's MPT reads loss_fn from the model config, default "fused_crossentropy":
        # flash-attn's fused cross-entropy (llmfoundry/models/mpt/modeling_mpt.py)
        job["cross_entropy"] = "fused"
        notes.append("loss not printed: llm-foundry's default fused cross-entropy (flash-attn) "
                     "assumed, no fp32 copy of the logits")
        if "attn_impl" in row["notes"] and "triton" in row["notes"].lower():
            # llm-foundry's attn_impl = "triton": its Triton FlashAttention (2023), written for
            # Ampere (no Hopper wgmma/TMA path)
            job["attention_kernel"] = "legacy"
            if not gpu_is_ampere(row["gpu"]):
                notes.append("attn_impl triton: Triton FlashAttention, an Ampere-generation "
                             "kernel (job.attention_kernel = legacy)")
    chunks = config["pp"] * config["vpp"]
    stated = (recipe_rule(RECIPE_STAGE_LAYERS, row, release) or {}).get(
        (config["pp"], config["vpp"]))
    if isinstance(stated, str):
        from ..spec.pipeline_layout import split

        if "m" in stated and not model.get("mtp_layers", 0):
            # a run printed without its MTP block ran the layout without the block's slot
            # (Megatron-Core accepts an 'm' stage only with MTP, validate_layer_layout)
            notes.append(f"the recipe's layout {stated!r} without its MTP slot: no MTP block")
            stated = stated.replace("m", "")
        lay = split(stated, config["pp"], model["layers"], model.get("mtp_layers", 0))
        job["pipeline_first_stage_layers"], job["pipeline_last_stage_layers"] = (lay.first,
                                                                                 lay.last)
        notes.append(f"pipeline layout of the release's recipe, {stated!r}: {lay.describe()}")
    elif stated is not None:
        job["pipeline_first_stage_layers"], job["pipeline_last_stage_layers"] = stated
        notes.append(f"pipeline split of the release's recipe: {stated[0]} layers on the "
                     f"first device, {stated[1]} on the last, the others splitting the rest")
    elif chunks > 1 and model["layers"] % chunks:
        # layers that do not split evenly over the chunks: a split every stack must be told,
        # and the ones they are told lighten the edge stages -- NeMo 2.0's 405B recipe
        # (account_for_embedding/loss_in_pipeline_split), Llama 3 §3.3.2 (one layer fewer on
        # the first and last stage), NeMo's DeepSeek-V3 script (first 64/p - 1, last 64/p - 2),
        # torchtitan's and NeMo AutoModel's splits (pipeline_parallel_first/last_stage_less_
        # layers, default 1: the embedding and the output layer each counted as a layer). An
        # MTP block takes a slot of the last stage too (pipeline.pipeline_stage_layers)
        job["pipeline_edge_layers"] = 1
        if model.get("mtp_layers", 0):
            notes.append(f"{model['layers']} layers on {chunks} pipeline chunks: embedding, "
                         "loss and the MTP block counted as one layer each (one transformer "
                         "layer fewer on the first stage, two on the last)")
        else:
            notes.append(f"{model['layers']} layers on {chunks} pipeline chunks: embedding and "
                         "loss counted as one layer each (one transformer layer fewer on the "
                         "first and last stage)")
    settings = SOURCE_SETTINGS.get(row["source"])
    if settings is not None:
        job_settings, config_settings, stack_setting, why = settings
        if "dropout" in job_settings:  # the source says; the family default's note goes
            notes[:] = [n for n in notes if not n.startswith("dropout")]
        job.update(job_settings)
        config.update(config_settings)
        if stack_setting is not None:
            job["stack"] = stack = stack_setting
        notes.append(why)
    gpu = row["gpu"]
    # a GPU without a cluster of its own: the DGX H100 fabric (runs_file.place sets its NVLink)
    preset = GPU_CLUSTER.get(gpu, DEFAULT_CLUSTER)
    overrides: dict[str, Any] = {}
    system = row.get("system", "").lower()
    for machine, cluster in SYSTEM_CLUSTER.items():
        if machine in system:
            preset = cluster
            notes.append(f"cluster: {cluster} (the system's machine type {machine})")
    if source == "llama3_table4":
        preset = "meta-roce-h100"
    if source == "bloom_176b":
        # Jean Zay: 4 Omni-Path 100 Gb/s links per 8-GPU node = 6.25 GB/s per GPU
        overrides["tier1_bandwidth_GBps"] = 6.25
    stated_network = row.get("inter_node_GBps", "")
    if stated_network:
        # a machine the source describes: its NICs' line rate per GPU between nodes replaces
        # the cluster preset's second tier (the first tier outside a GPU's NVLink domain)
        overrides["tier1_bandwidth_GBps"] = float(stated_network)
        notes.append(f"inter-node bandwidth stated: {float(stated_network):g} GB/s per GPU "
                     "between nodes (the cluster preset's fabric tier at that rate)")
    if is_megatron_deepspeed(row) and (config["tp_overlap"] or config["dp_overlap"]):
        # Megatron-DeepSpeed: Megatron's tensor slicing without Transformer Engine's overlap,
        # and DeepSpeed's engine reducing the gradients once the batch is done (the pipeline
        # engine's TrainSchedule runs ReduceGrads after the last microbatch,
        # deepspeed/runtime/pipe/schedule.py; BLOOM's and MT-NLG's runs)
        config["tp_overlap"] = False
        config["dp_overlap"] = False
        notes.append("Megatron-DeepSpeed: no TP overlap, gradient all-reduce after the last "
                     "microbatch (not overlapped)")
    stated_overlaps(row, config, notes)
    if is_llm_foundry(row) and gpu.startswith("h100"):
        notes.append("H100 interconnect not stated: DGX H100 fabric (8 x 400 Gb/s per node) "
                     "assumed")
    scenario = {"name": row["case"], "model": model, "job": job}
    mdl = pack_model(SimpleNamespace(model=ModelSpec.model_validate(model)))
    model_flops = float(model_flops_per_sequence(mdl, seq)) * batch
    group = source
    if stack == "jax-xla":
        group += " (JAX)"
    fallbacks = ()
    if UNSTATED_RECOMPUTE_NOTE in notes and config["recompute"] == "none":
        fallbacks = unstated_recompute_fallbacks(row, stack)
    ep_fallbacks = ()
    if UNSTATED_EP_NOTE in notes and config["ep"] == 1:
        ep_fallbacks = unstated_ep_fallbacks(experts_of(row), config["dp"])
    precision_fallbacks = unstated_precision_fallbacks(row, stack, job)
    return PublishedRun(
        source=source, group=group, case=row["case"], gpu=gpu, dtype=dtype,
        stack=stack, scenario=scenario, config=config, metric=row["metric"],
        value=float(row["value"]), published_step_s=published_step(row, model_flops, notes),
        model_flops=model_flops, cluster_preset=preset, cluster_overrides=overrides,
        assumptions=notes, release=release, recompute_fallbacks=fallbacks,
        ep_fallbacks=ep_fallbacks, precision_fallbacks=precision_fallbacks)


def published_runs(sources: tuple[str, ...] | None = None) -> list[PublishedRun]:
    """Every row of the shared-layout files, with the newest-release counting rule applied:
    where a source repeats a layout across NeMo releases only the newest counts."""
    runs = []
    for source_id, (filename, _) in PUBLISHED_FILES.items():
        if sources is not None and source_id not in sources:
            continue
        rows = read_rows(filename)
        file_runs = [run_of(source_id, row) for row in rows]
        mark_older_releases(list(zip(rows, file_runs)))
        runs += file_runs
    return runs


def mark_older_releases(rows_runs: list[tuple[dict[str, str], PublishedRun]]) -> None:
    """Of the ``(row, run)`` pairs whose runs share a layout (:func:`layout_key` of the row, its
    stack as read), only the newest release's count; the older ones are marked not counted, and
    say why."""
    keyed = [(layout_key({**row, "framework_kind": run.stack}), run) for row, run in rows_runs]
    newest: dict[tuple, tuple[int, ...]] = {}
    for key, run in keyed:
        newest[key] = max(newest.get(key, ()), run.release)
    for key, run in keyed:
        if run.release and run.release < newest[key]:
            run.counted = False
            run.assumptions.append("older release of a layout a newer release repeats: "
                                   "reported, not counted")
