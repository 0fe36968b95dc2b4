"""Pack a validated scenario into the flat blocks the kernels read.

``pack_system``, ``pack_model`` and ``pack_job`` return ``float64`` vectors of
``layout.N_SYS`` / ``N_MODEL`` / ``N_JOB``; ``pack_configs`` returns an ``int32`` array of shape
``(layout.N_CFG, n)``. Every index comes from :mod:`trainscape.layout`; every unit is SI here
(bytes, bytes/s, seconds, FLOP/s).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import layout as L
from ..model.llm import kernel_attention_efficiency
from .config import ConfigSpec, complete_order, parse_order
from .errors import ScenarioError

if TYPE_CHECKING:  # for annotations only: the schema packs its own config while validating
    from .models import Scenario

GB = 1e9  # decimal gigabyte (bytes); GB/s likewise
GIB = 2.0**30  # HBM capacities are binary: an "80GB" A100 has 81920 MiB (nvidia-smi)
US = 1e-6  # microsecond (seconds)
MS = 1e-3  # millisecond (seconds)
TFLOPS = 1e12

# --------------------------------------------------------------------------------------------
# Bytes per element / per parameter (small named functions, each with its source)
# --------------------------------------------------------------------------------------------


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of a floating-point format."""
    return {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}[dtype]


def param_bytes(compute_dtype: str) -> int:
    """Bytes per weight held for compute: 2 (bf16/fp16). FP8 training keeps bf16 weights and
    casts them to fp8 per GEMM (NVIDIA Transformer Engine FP8 primer; DeepSeek-V3 report §3.3,
    arXiv 2412.19437), so fp8 also holds 2 bytes."""
    return 2


def activation_bytes(compute_dtype: str) -> int:
    """Bytes per stored activation element: 2 (Korthikanti et al. 2022 §4 count 16-bit
    activations; FP8 recipes keep most stored activations in bf16, Transformer Engine)."""
    return 2


def grad_bytes(grad_dtype: str) -> int:
    """Bytes per gradient element as accumulated: fp32 accumulation is Megatron-LM's default
    (``--accumulate-allreduce-grads-in-fp32``)."""
    return dtype_bytes(grad_dtype)


def outer_sync_bytes(outer_dtype: str | None, gradient_bytes: float) -> float:
    """Bytes per element of the cross-site (outer) data-parallel traffic of ``[job.sync]``:
    ``outer_dtype``'s width (int8 and fp8: 1), else the gradient's (``grad_dtype``)."""
    if outer_dtype is None:
        return float(gradient_bytes)
    return float({"fp32": 4, "bf16": 2, "fp8": 1, "int8": 1}[outer_dtype])


def optimizer_state_bytes(optimizer: str, grad_dtype: str, state_dtype: str = "fp32") -> int:
    """Optimizer state per parameter, in bytes.

    Mixed-precision Adam holds an fp32 master copy, momentum and variance: 4 + 4 + 4 = 12
    bytes (K = 12 in Rajbhandari et al. 2020, "ZeRO", §3.1). SGD with momentum holds the fp32
    master copy and the momentum: 8. When gradients are reduced in 16 bits the optimizer also
    keeps an fp32 main-gradient copy, +4 (Megatron Core distributed optimizer guide: 20 bytes
    per parameter for fp16 params + fp16 grads vs 18 for bf16 params + fp32 grads).

    ``state_dtype`` "bf16" (``job.optimizer_dtype``): the moments in bf16 and no master copy --
    the bf16 weights are updated in place -- plus the optimizer's shard of the reduced
    gradient in the gradient dtype. That is Apex ``DistributedFusedAdam`` with ``dtype =
    bf16`` (``apex/contrib/optimizers/distributed_fused_adam.py``: ``exp_avg_shard`` and
    ``exp_avg_sq_shard`` in ``dtype``, ``params_shard`` only with ``store_params``, the bucket's
    ``grads_shard`` in ``grad_sync_dtype``), which NeMo 1.0 runs without ``store_params`` when
    the optimizer dtype equals the model's (``megatron_base_model.py setup_optimization``):
    Adam 2 + 2 + the gradient shard (2 for bf16 gradients); SGD 2 + the gradient shard.
    """
    if state_dtype == "bf16":
        moments = {"adam": 2, "sgd": 1}[optimizer]
        return dtype_bytes("bf16") * moments + dtype_bytes(grad_dtype)
    state = {"adam": 12, "sgd": 8}[optimizer]
    if grad_dtype != "fp32":
        state += 4
    return state


#: software stacks whose weights are the fp32 master copy, cast to the compute dtype where they
#: are used (PyTorch FSDP mixed precision / torchao float8, JAX / XLA): no separate 16-bit
#: shard under ZeRO-3 (:func:`zero3_shard_param_bytes`) and no FP8 weight cache across
#: microbatches (:func:`fp8_linear_weight_extra_bytes`)
MASTER_CAST_STACKS = ("pytorch-fsdp", "jax-xla")
#: stacks whose element-wise work a compiler fuses: torch.compile (PyTorch FSDP / torchtitan,
#: with torchao's float8) and XLA
COMPILED_STACKS = ("pytorch-fsdp", "jax-xla")


def zero3_shard_param_bytes(stack: str, optimizer_dtype: str, param_bytes_: float) -> float:
    """Bytes per element of the parameter shard ZeRO-3 keeps beside the optimizer states.
    DeepSpeed ZeRO-3 and Megatron-Core's FSDP keep a 16-bit shard beside the fp32 master copy
    (``param_bytes``). PyTorch FSDP with mixed precision keeps the sharded parameters in their
    original fp32 -- they are what the optimizer steps, the master copy the optimizer bytes
    already count -- and casts them to ``param_dtype`` only in the all-gather
    (``torch.distributed.fsdp.MixedPrecisionPolicy``; Zhao et al., VLDB 2023, §4.4); JAX
    trainers keep fp32 parameters the same way and compute in bf16 (MaxText ``weight_dtype``
    float32 beside ``dtype`` bfloat16, ``MaxText/configs/base.yml``): 0 on the
    ``pytorch-fsdp`` and ``jax-xla`` stacks with an fp32 optimizer."""
    if stack in MASTER_CAST_STACKS and optimizer_dtype == "fp32":
        return 0.0
    return float(param_bytes_)


def optimizer_traffic_bytes(optimizer: str, grad_dtype: str, param_bytes_: int,
                            state_dtype: str = "fp32") -> int:
    """HBM bytes moved per parameter by one optimizer step (a memory-bound kernel).

    Adam's update (Kingma & Ba 2015, Algorithm 1) reads the gradient, reads and writes m, v and
    the parameter; in mixed precision (Micikevicius et al. 2018, §3.1) the parameter is the fp32
    master copy and the step ends by writing the 16-bit compute copy. Per parameter:
    read fp32 grad 4 + read/write (master, m, v) 2·12 + write compute weight 2 = 30 bytes.
    SGD with momentum: 4 + 2·8 + 2 = 22. With 16-bit gradients the cast into the fp32
    main-gradient copy adds a read of the 16-bit gradient and a write of 4 bytes.

    With bf16 states (:func:`optimizer_state_bytes`, no master copy): read the gradient shard,
    read and write the bf16 moments and the 16-bit weight: Adam ``g + 2·(2 + 2) + 2·2``
    (14 with bf16 gradients), SGD ``g + 2·2 + 2·2``.
    """
    if state_dtype == "bf16":
        moments = {"adam": 2, "sgd": 1}[optimizer]
        return dtype_bytes(grad_dtype) + 2 * dtype_bytes("bf16") * moments + 2 * param_bytes_
    state = {"adam": 12, "sgd": 8}[optimizer]
    traffic = 4 + 2 * state + param_bytes_
    if grad_dtype != "fp32":
        traffic += dtype_bytes(grad_dtype) + 4
    return traffic


#: FP8 activations are quantized in 1x128 tiles, one fp32 scale per tile (DeepSeek-V3 tech
#: report, arXiv 2412.19437, §3.3.2; deepseek-ai/DeepEP ``Buffer.dispatch`` takes an FP8
#: tensor [tokens, hidden] with fp32 scales [tokens, hidden / 128]).
FP8_TILE = 128
FP8_SCALE_BYTES = 4


def moe_dispatch_bytes(dispatch_dtype: str) -> float:
    """Bytes per element of the MoE dispatch all-to-all (tokens to their experts). FP8
    dispatch sends the FP8 activations the experts' up-projections read plus their 1x128 tile
    scales: 1 + 4/128 = 1.03125 bytes (DeepSeek-V3 report §3.3.2 "Low-Precision
    Communication"; DeepEP dispatches in FP8). 16-bit dispatch: 2."""
    if dispatch_dtype == "fp8":
        return dtype_bytes("fp8") + FP8_SCALE_BYTES / FP8_TILE
    return float(dtype_bytes(dispatch_dtype))


def comm_dtype_bytes(comm_dtype: str | None) -> float:
    """Bytes per element of a tier's ``comm_dtype`` (``[[cluster.tiers]]``), the data-parallel
    traffic crossing it: bf16 2; fp8 and int8 1 byte plus one fp32 scale per block of 128
    elements, 1 + 4/128 = 1.03125 (the 1x128 tiles of DeepSeek-V3's fine-grained quantization,
    arXiv 2412.19437 §3.3.2; ZeRO++ quantizes in blocks with a scale each, qwZ / qgZ, Wang et
    al. 2023, arXiv 2306.10209 §3.1, §3.3 -- we assume the same 128-element block for int8);
    0 without one or with ``"none"`` (the traffic keeps the job's width). The model sends a
    tier's traffic in this format only where it is narrower
    (:func:`trainscape.model.collectives.wire_bytes`)."""
    if comm_dtype is None or comm_dtype == "none":
        return 0.0
    if comm_dtype == "bf16":
        return float(dtype_bytes("bf16"))
    return 1.0 + FP8_SCALE_BYTES / FP8_TILE


def moe_combine_bytes(combine_dtype: str) -> float:
    """Bytes per element of the MoE combine all-to-all (expert outputs back to their tokens):
    DeepSeek-V3 keeps the forward and backward combine in BF16 even in FP8 training (report
    §3.3.2), as DeepEP's combine does: 2. An explicit fp8 combine is priced like fp8 dispatch."""
    return moe_dispatch_bytes(combine_dtype)


def default_dispatch_dtype(compute_dtype: str) -> str:
    """The dispatch dtype a job uses unless it says otherwise: fp8 for FP8 training (its
    up-projections read FP8 inputs, DeepSeek-V3 §3.3.2), else bf16/fp16 as computed."""
    return compute_dtype


def default_combine_dtype(compute_dtype: str) -> str:
    """The combine dtype a job uses unless it says otherwise: 16-bit (bf16 for FP8 training,
    DeepSeek-V3 §3.3.2)."""
    return "bf16" if compute_dtype == "fp8" else compute_dtype
def fp8_cast_bytes(recipe: str | None, stack: str = "megatron-core") -> float:
    """HBM bytes moved per element to quantize one FP8 linear layer's input (0 without FP8).

    Every recipe reads the bf16 tensor (2 bytes) and writes two FP8 copies (1 byte each): the
    rowwise one for the forward / dgrad GEMM and the columnwise (transposed) one the wgrad GEMM
    needs, Hopper's FP8 tensor cores taking only the TN layout (Transformer Engine's fused
    ``cast_transpose``; TE docs, "Using FP8 with Transformer Engine"). On top of that:

    - ``delayed`` (TE ``DelayedScaling``): the scale comes from earlier steps' amax history, so
      one pass: 2 + 2 x 1 = 4.
    - ``tensorwise`` (TE ``Float8CurrentScaling``, torchao tensorwise): the current tensor's amax
      first, a second read: 2 + 2 + 2 x 1 = 6.
    - ``rowwise`` (torchao rowwise): per-row amax and scales for the rowwise copy, per-column
      ones for the transposed copy, so an amax pass too: 6 (the 4-byte scale per row of
      thousands of elements is negligible).
    - ``blockwise`` (DeepSeek-V3 report §3.3.2, arXiv 2412.19437: 1x128 activation tiles, one
      fp32 scale each; the transposed copy is requantized): 2 + 2 x (1 + 4/128) = 4.0625.
    - ``mxfp8`` (OCP Microscaling Formats spec v1.0: 32-element blocks, one E8M0 byte each; TE
      ``MXFP8BlockScaling`` keeps rowwise and columnwise copies): 2 + 2 x (1 + 1/32) = 4.0625.

    Under a compiler (``COMPILED_STACKS``: torch.compile with torchao's float8, XLA) the
    tensorwise amax is a reduction the compiler fuses into the kernel that produces the tensor
    (Inductor / XLA reduction fusion), so ``tensorwise`` costs a delayed recipe's one pass: 4.
    ``rowwise`` keeps its second pass there too: the transposed copy's per-column scales need the
    whole tensor first.
    """
    if recipe is None:
        return 0.0
    if recipe == "tensorwise" and stack in COMPILED_STACKS:
        return 4.0
    return {"delayed": 4.0, "tensorwise": 6.0, "rowwise": 6.0,
            "blockwise": 2.0 + 2.0 * (1.0 + 4.0 / 128.0),
            "mxfp8": 2.0 + 2.0 * (1.0 + 1.0 / 32.0)}[recipe]


def fp8_weight_cache_bytes(recipe: str | None) -> float:
    """Bytes per linear weight of the FP8 weight copies kept beside the BF16 weights (0 without
    FP8): Transformer Engine caches each FP8 weight and its transpose across the microbatches of a
    step (``is_first_microbatch``; TE FP8 primer): 2 bytes for per-tensor recipes; with block
    scales, plus their scale bytes (``blockwise``: 128x128 weight blocks with an fp32 scale,
    DeepSeek-V3 §3.3.2; ``mxfp8``: an E8M0 byte per 32 elements, OCP MX spec v1.0)."""
    if recipe is None:
        return 0.0
    return {"delayed": 2.0, "tensorwise": 2.0, "rowwise": 2.0,
            "blockwise": 2.0 * (1.0 + 4.0 / (128.0 * 128.0)),
            "mxfp8": 2.0 * (1.0 + 1.0 / 32.0)}[recipe]


def fp8_linear_weight_extra_bytes(recipe: str | None, fp8_param_gather: bool,
                                  param_bytes_: float, stack: str = "megatron-core") -> float:
    """Bytes per linear weight held beyond the ``param_bytes_`` every weight is counted at: the
    FP8 copies (:func:`fp8_weight_cache_bytes`), less the 16-bit copy when the job keeps none.

    With FP8 parameters (``job.fp8_param_gather``; Megatron-LM ``--fp8-param-gather``: "Keep
    the compute param in fp8 (do not use any other intermediate dtype) and perform the param
    all-gather in fp8", ``megatron/training/arguments.py``; Transformer Engine
    ``fp8_model_init``) a linear weight lives only as its FP8 data and the transposed copy
    Hopper's dgrad GEMM reads: :func:`fp8_weight_cache_bytes` bytes in all, so the 16-bit
    ``param_bytes_`` already counted for it is not held (``delayed``: 2 - 2 = 0). NeMo 2.0's
    FP8 precision recipes set it (``bf16_with_fp8_mixed``: ``fp8_params = True`` in NeMo
    2.1-2.2, ``fp8_param_gather = True`` from 2.3, ``nemo/collections/llm/recipes/precision/
    mixed_precision.py``), as do Megatron-Bridge's (``bf16_with_fp8_current_scaling_mixed``,
    ``src/megatron/bridge/training/mixed_precision.py``). The fp32 master copy stays in the
    optimizer states (:func:`optimizer_state_bytes`).

    Only Transformer Engine under Megatron keeps FP8 weight copies across microbatches (it
    quantizes a weight on the first microbatch, ``is_first_microbatch``); torchao's float8
    training and XLA cast the weights in every forward, so the ``pytorch-fsdp`` and
    ``jax-xla`` stacks hold none (0), and their FP8 all-gathers (``fp8_param_gather``) gather
    the fp32 master shard cast to FP8 (:func:`zero3_shard_param_bytes`)."""
    if stack in MASTER_CAST_STACKS:
        return 0.0
    cache = fp8_weight_cache_bytes(recipe)
    if fp8_param_gather and recipe is not None:
        return cache - param_bytes_
    return cache


def linear_param_comm_bytes(recipe: str | None, fp8_param_gather: bool,
                            param_bytes_: float) -> float:
    """Bytes per linear-layer weight element of the data-parallel weight all-gather (ZeRO-1/2's
    distributed optimizer, ZeRO-3 / FSDP): ``param_bytes_`` as every other weight, or with FP8
    parameters (``job.fp8_param_gather``) the FP8 data, 1 byte per element, plus its scales.

    Megatron-LM ``--fp8-param-gather`` ("perform the param all-gather in fp8",
    ``megatron/training/arguments.py``): the distributed optimizer's parameter buffer
    (``megatron/core/distributed/param_and_grad_buffer.py``) holds the raw bytes of
    Transformer Engine's ``Float8Tensor`` weights, so the linear layers' shards are gathered at
    1 byte per element; the embeddings, output layer, norms and router stay 16-bit
    (``model.llm.param_gather_bytes`` mixes the two per stage). Scales: one fp32 per tensor
    (``delayed``, ``tensorwise``) or per row (``rowwise``) is negligible; ``blockwise`` adds an
    fp32 per 128x128 block (DeepSeek-V3 §3.3.2, arXiv 2412.19437); ``mxfp8`` an E8M0 byte per
    32 elements (OCP Microscaling Formats spec v1.0)."""
    if not fp8_param_gather or recipe is None:
        return param_bytes_
    return {"delayed": 1.0, "tensorwise": 1.0, "rowwise": 1.0,
            "blockwise": 1.0 + 4.0 / (128.0 * 128.0), "mxfp8": 1.0 + 1.0 / 32.0}[recipe]


def logits_extra_bytes(cross_entropy: str, activation_bytes_: float) -> float:
    """Bytes per logit the loss holds beside the activation-dtype logits: the fp32 copy of an
    unfused vocabulary-parallel cross-entropy (4; Megatron-LM ``tensor_parallel/cross_entropy.py``
    upcasts the logits with ``.float()``), or the gradient a fused kernel writes into a new
    tensor of the logits' dtype (flash-attn ``losses/cross_entropy.py``, ``inplace_backward``
    off by default). ``upcast``, PyTorch's ``F.cross_entropy(logits.float())`` run eagerly:
    the fp32 copy (4) and the fp32 log-softmax ``log_softmax`` saves for its backward (4) are
    both alive when the forward's loss peaks (torchtitan ``train.py`` ``loss_fn`` to 2025-03;
    from bbb1b616e, 2025-04, the loss is compiled with the model and keeps the log-softmax
    only)."""
    if cross_entropy == "upcast":
        return 8.0
    return activation_bytes_ if cross_entropy == "fused" else 4.0


def tp_gather_bytes(recipe: str | None, activation_bytes_: float) -> float:
    """Bytes per element of a sequence-parallel TP all-gather, 0 for the activation traffic's
    ``comm_bytes`` (``model.llm.tp_gather_bytes``).

    An FP8 recipe that quantizes a linear layer's input before gathering it moves the FP8 copy
    (:func:`saved_linear_input_bytes`, scales included): Transformer Engine's
    ``LayerNormLinear`` gathers the FP8 ``ln_out`` and, in the backward, the FP8
    ``grad_output`` (TE 1.11 ``transformer_engine/pytorch/module/layernorm_linear.py``,
    ``base.py`` ``grad_output_preprocess``), and torchao's tensorwise ``Float8ColwiseParallel``
    casts before its all-gather. torchtitan applies torchao's float8 TP styles to the
    tensorwise recipe only (``enable_float8_tensorwise_tp``): rowwise runs gather 16 bits."""
    if recipe is None or recipe == "rowwise":
        return 0.0
    return saved_linear_input_bytes(recipe, activation_bytes_)


#: stacks whose tensor parallelism shards the sequence along dim 1 of ``[batch, seq, hidden]``
#: activations through PyTorch DTensor (torchtitan's TP plan: ``SequenceParallel()`` norms,
#: ``PrepareModuleInput`` ``Shard(1)`` -> ``Replicate()``, row-parallel outputs ``Shard(1)``;
#: ``torchtitan/parallelisms/parallelize_llama.py`` ``apply_tp`` at 9dec370). Megatron-Core
#: keeps activations ``[seq, batch, hidden]`` and gathers along dim 0; XLA picks its own layouts.
SEQUENCE_DIM1_TP_STACKS = ("pytorch-fsdp",)


def tp_sequence_copy(stack: str, setting: bool | None = None) -> float:
    """1.0 where each sequence-parallel TP collective also copies its whole buffer once
    (``model.llm.tp_sequence_copy_bytes``), else 0.0: the job's ``tp_sequence_copy`` where it
    sets one, else the stack's. PyTorch's functional collectives gather
    and scatter along dim 0 only: ``all_gather_tensor`` with ``gather_dim != 0`` concatenates
    the gathered chunks along that dim (``torch.cat(torch.chunk(res, group_size, dim=0),
    dim=gather_dim)``) and ``reduce_scatter_tensor`` with ``scatter_dim != 0`` does the same to
    its input before the NCCL call (``torch/distributed/_functional_collectives.py``), which
    DTensor's ``Shard(1)`` redistributions go through (:data:`SEQUENCE_DIM1_TP_STACKS`)."""
    if setting is not None:
        return 1.0 if setting else 0.0
    return 1.0 if stack in SEQUENCE_DIM1_TP_STACKS else 0.0


#: stacks whose MoE layers run each expert projection as one grouped kernel over every local
#: expert (:func:`grouped_expert_gemm`)
GROUPED_EXPERT_GEMM_STACKS = ("pytorch-fsdp", "jax-xla")


def grouped_expert_gemm(stack: str, setting: str | None = None) -> float:
    """1.0 where an MoE layer's routed experts run each projection as one grouped GEMM kernel
    (``model.llm.expert_gemm_count``), 0.0 where each local expert runs its own GEMMs: the
    job's ``expert_gemm`` where it sets one, else the stack's.

    - Megatron-Core's default experts (``TEGroupedMLP``, Transformer Engine ``GroupedLinear``)
      "launch multiple local GEMM kernels in multiple streams" (Megatron-LM README,
      ``--moe-grouped-gemm``; TE ``general_grouped_gemm``): one GEMM per local expert.
    - PyTorch-native MoE runs one kernel per projection: NeMo AutoModel's ``GroupedExperts``
      calls ``grouped_gemm.ops.gmm`` (a CUTLASS grouped GEMM; ``nemo_automodel/components/moe/
      layers.py``), torchtitan's experts ``torch._grouped_mm`` (``torchtitan/models/common/
      moe.py``).
    - MaxText's MoE runs megablox ``gmm`` or ``jax.lax.ragged_dot`` (``sparse_matmul``), or one
      einsum over the expert dimension (``dense_matmul``; ``MaxText/layers/moe.py``)."""
    if setting is not None:
        return 1.0 if setting == "grouped" else 0.0
    return 1.0 if stack in GROUPED_EXPERT_GEMM_STACKS else 0.0


#: stacks that add the routed experts' output bias in an eager loop over the local experts
#: (:func:`eager_expert_bias`)
EAGER_EXPERT_BIAS_STACKS = ("megatron-core",)


def eager_expert_bias(expert_bias: bool, stack: str, setting: str | None = None) -> float:
    """1.0 where an MoE layer adds its routed experts' second-projection bias one local expert
    at a time in eager PyTorch (``model.llm.eager_expert_bias_forward_time``), 0.0 where the
    model has no expert bias or the stack fuses it: the job's ``expert_bias`` where it sets
    one, else the stack's.

    Megatron-Core's ``TEGroupedMLP`` (``megatron/core/transformer/moe/experts.py``) lets
    ``linear_fc2`` return its bias and adds it in ``_apply_bias``: ``torch.split`` by tokens per
    expert, ``t + b * p`` for each local expert in fp32, ``torch.cat``, then a cast back --
    from the commit that gave the experts biases for GPT-OSS (a329dd6da5, 2025-09-22) through
    every release to core_v0.19.0 (2026-08-19); 883533e049 (2026-08-14, not in a release yet)
    replaces it by a packed kernel, and the opt-in TE op-fuser path (core_v0.18.0+,
    ``use_transformer_engine_op_fuser``) scales the bias inside ``GroupedLinear``. The
    grouped-GEMM stacks and XLA add it in one kernel per projection: fused."""
    if not expert_bias:
        return 0.0
    if setting is not None:
        return 1.0 if setting == "eager" else 0.0
    return 1.0 if stack in EAGER_EXPERT_BIAS_STACKS else 0.0


def saved_linear_input_bytes(recipe: str | None, activation_bytes_: float) -> float:
    """Bytes per element of a linear layer's input saved for its weight-gradient GEMM.

    Under FP8, Transformer Engine saves the *quantized* input, not the BF16 tensor:
    ``LayerNormLinear`` saves its FP8 ``ln_out`` (QKV and fc1 inputs), ``Linear`` its FP8
    ``inputmat`` (the attention output projection's and fc2's inputs), ``GroupedLinear`` the
    experts' FP8 ``inputmats`` (``transformer_engine/pytorch/module/layernorm_linear.py``,
    ``linear.py``, ``grouped_linear.py``): one byte per element plus the recipe's scales --
    negligible per tensor or per row (``delayed``, ``tensorwise``, ``rowwise``), one fp32 per
    1x128 tile for ``blockwise`` (DeepSeek-V3 §3.3.2), one E8M0 byte per 32 elements for
    ``mxfp8`` (OCP MX spec v1.0). Without FP8 the input is saved at ``activation_bytes``."""
    if recipe is None:
        return float(activation_bytes_)
    return {"delayed": 1.0, "tensorwise": 1.0, "rowwise": 1.0,
            "blockwise": 1.0 + 4.0 / 128.0,
            "mxfp8": 1.0 + 1.0 / 32.0}[recipe]


# --------------------------------------------------------------------------------------------
# Blocks
# --------------------------------------------------------------------------------------------


def hbm_capacity_bytes(gb: float) -> float:
    """HBM capacity in bytes from the vendor's "GB": memory sizes are binary (the A100 80GB
    reports 81920 MiB total in nvidia-smi, the A100 40GB 40960 MiB; the H100 SXM5 80GB carries
    five 16 GiB HBM3 stacks, 80 GiB = 85.9e9 bytes, of which nvidia-smi shows 81559 MiB after
    the driver's reservation), so 1 "GB" = 2**30 bytes, unlike bandwidths (GB/s = 1e9
    bytes/s). The one conversion of ``hbm_gb`` and ``hbm_reserve_gb``: packing and the
    report's "total / HBM" both use it."""
    return gb * GIB


def usd_per_gpu_second(scenario: Scenario) -> float:
    """Price of one GPU-second: the GPU's price per hour plus every tier's cost per GPU per
    hour, / 3600 (0 when no price is given). With ``[[cluster.sites]]``: the GPU-weighted mean
    over the sites of their GPU's price plus their inner tiers' costs."""
    c = scenario.cluster
    if c.sites is not None:
        from .sites import resolve_site_gpus, site_tiers

        gpus = resolve_site_gpus(scenario)
        per_site = [(g.price_per_hour_usd or 0.0)
                    + sum(t.cost_per_gpu_hour_usd for t in site_tiers(c, i))
                    for i, g in enumerate(gpus)]
        return sum(x * s.gpus for x, s in zip(per_site, c.sites)) / c.gpus / 3600.0
    per_hour = (c.gpu.price_per_hour_usd or 0.0) + sum(t.cost_per_gpu_hour_usd for t in c.tiers)
    return per_hour / 3600.0


def effective_gpu(scenario: Scenario):
    """The GPU every rank is costed with: ``cluster.gpu``, or with ``[[cluster.sites]]`` of
    several GPU types the one that paces the step (:func:`trainscape.spec.sites.paced_gpu`)."""
    if scenario.cluster.sites is None:
        return scenario.cluster.gpu
    from .sites import paced_gpu, resolve_site_gpus

    return paced_gpu(scenario, resolve_site_gpus(scenario))


def _pack_tier(sys: np.ndarray, tier: int, size: float, link) -> None:
    """One tier record (``tier`` may be a site link's "tier", ``model.network.site_link_tier``)
    from a :class:`trainscape.model.sites.Link` already in SI units."""
    base = L.SYS_TIER_BASE + tier * L.N_TIER
    sys[base + L.TIER_SIZE] = size
    sys[base + L.TIER_BANDWIDTH] = link.bandwidth
    sys[base + L.TIER_LATENCY] = link.latency
    sys[base + L.TIER_EFFICIENCY] = link.efficiency
    sys[base + L.TIER_OVERSUBSCRIPTION] = link.oversubscription
    sys[base + L.TIER_WINDOW_BYTES] = link.window_bytes
    sys[base + L.TIER_HANDSHAKE_RTTS] = link.handshake_rtts


def pack_system(scenario: Scenario) -> np.ndarray:
    """The system block: GPU and network tiers, in SI units; unused tier slots are zero.

    With ``[[cluster.sites]]`` (:mod:`trainscape.spec.sites`): the paced GPU and inner tiers,
    then the site tier derived from the graph, and the site links in path order."""
    c = scenario.cluster
    plan = None
    tiers = c.tiers
    if c.sites is not None:
        from .sites import site_plan

        plan = site_plan(scenario)
        tiers = plan.tiers
    g = plan.gpu if plan is not None else c.gpu
    sys = np.zeros(L.N_SYS, dtype=np.float64)
    sys[L.SYS_GPUS] = c.gpus
    sys[L.SYS_N_TIERS] = len(tiers) + (1 if plan is not None else 0)
    dtype = scenario.job.dtype
    # attention, the output layer and the memory-bound kernels run in 16 bits even in an FP8
    # job (Transformer Engine); only the linear layers run at the FP8 peak
    sys[L.SYS_PEAK_FLOPS] = g.peak_for("bf16" if dtype == "fp8" else dtype) * TFLOPS
    sys[L.SYS_LINEAR_PEAK_FLOPS] = g.peak_for(dtype) * TFLOPS
    # MFU against the datasheet figure, whatever clock a power limit leaves (peak_for)
    sys[L.SYS_MFU_PEAK_FLOPS] = g.rated_peak_for("bf16" if dtype == "fp8" else dtype) * TFLOPS
    fp8 = dtype == "fp8"
    sys[L.SYS_LINEAR_EFFICIENCY_MAX] = (g.fp8_gemm_efficiency_max if fp8 and
                                        g.fp8_gemm_efficiency_max is not None
                                        else g.gemm_efficiency_max)
    sys[L.SYS_LINEAR_HALF_FLOPS] = (g.fp8_gemm_half_flops if fp8 and
                                    g.fp8_gemm_half_flops is not None else g.gemm_half_flops)
    sys[L.SYS_TP_OVERLAP_EXPOSED] = g.tp_overlap_exposed
    sys[L.SYS_TP_OVERLAP_SLOWDOWN] = g.tp_overlap_slowdown
    sys[L.SYS_CP_OVERLAP_SLOWDOWN] = g.cp_overlap_slowdown
    sys[L.SYS_ATTENTION_HALF_SEQ] = g.attention_half_seq
    sys[L.SYS_ATTENTION_HEAD_DIM_HALF] = g.attention_head_dim_half
    sys[L.SYS_HBM_BYTES] = hbm_capacity_bytes(g.hbm_gb)
    sys[L.SYS_HBM_BANDWIDTH] = g.hbm_bandwidth_GBps * GB
    sys[L.SYS_HBM_RESERVE_BYTES] = hbm_capacity_bytes(g.hbm_reserve_gb)
    sys[L.SYS_GEMM_EFFICIENCY_MAX] = g.gemm_efficiency_max
    sys[L.SYS_GEMM_HALF_FLOPS] = g.gemm_half_flops
    sys[L.SYS_ATTENTION_EFFICIENCY] = kernel_attention_efficiency(
        g.attention_efficiency, g.legacy_attention_fraction,
        scenario.job.attention_kernel == "legacy")
    sys[L.SYS_MEMORY_EFFICIENCY] = g.memory_efficiency
    sys[L.SYS_STREAM_MEMORY_EFFICIENCY] = (g.stream_memory_efficiency
                                           if g.stream_memory_efficiency is not None
                                           else g.memory_efficiency)
    sys[L.SYS_LAYER_OVERHEAD_S] = g.layer_overhead_us * US
    sys[L.SYS_STEP_OVERHEAD_S] = g.step_overhead_ms * MS
    sys[L.SYS_HOST_OP_S] = g.host_op_us * US
    sys[L.SYS_USD_PER_GPU_S] = usd_per_gpu_second(scenario)
    sys[L.SYS_POWER_W] = g.drawn_power_w or 0.0
    sys[L.SYS_HOST_LINK_BANDWIDTH] = (c.host_to_device_GBps or 0.0) * GB
    sys[L.SYS_HOST_MEMORY_BANDWIDTH] = (c.host_memory_GBps or 0.0) * GB
    if plan is not None:
        from ..model.network import site_link_tier

        n = len(c.sites)
        _pack_tier(sys, len(tiers), n, plan.ring)
        sys[L.SYS_N_SITES] = n
        for a in range(n):
            for b in range(n):
                if a != b:
                    _pack_tier(sys, site_link_tier(a, b), 0.0, plan.matrix[a][b])
    for i, t in enumerate(tiers):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        sys[base + L.TIER_SIZE] = t.size
        sys[base + L.TIER_BANDWIDTH] = t.bandwidth_GBps * GB
        sys[base + L.TIER_LATENCY] = t.latency_us * US
        sys[base + L.TIER_EFFICIENCY] = t.efficiency
        sys[base + L.TIER_OVERSUBSCRIPTION] = t.oversubscription
        if t.transport is not None:
            sys[base + L.TIER_WINDOW_BYTES] = t.transport.window_bytes
            sys[base + L.TIER_HANDSHAKE_RTTS] = t.transport.handshake_rtts
        sys[base + L.TIER_COMM_DTYPE_BYTES] = comm_dtype_bytes(t.comm_dtype)
    return sys


def pack_model(scenario: Scenario) -> np.ndarray:
    """The model block (dense models have zero experts, top_k, moe_every and leading dense
    layers)."""
    m = scenario.model
    mdl = np.zeros(L.N_MODEL, dtype=np.float64)
    mdl[L.MDL_LAYERS] = m.layers
    mdl[L.MDL_HIDDEN] = m.hidden
    mdl[L.MDL_FFN_HIDDEN] = m.ffn_hidden
    mdl[L.MDL_HEADS] = m.heads
    mdl[L.MDL_KV_HEADS] = m.kv_heads
    mdl[L.MDL_HEAD_DIM] = m.head_dim
    mdl[L.MDL_VOCAB] = m.vocab
    mdl[L.MDL_SWIGLU] = 1.0 if m.mlp == "swiglu" else 0.0
    mdl[L.MDL_ATTENTION_WINDOW] = m.attention_window
    mdl[L.MDL_FULL_ATTENTION_EVERY] = m.full_attention_every
    mdl[L.MDL_MTP_LAYERS] = m.mtp_layers
    if m.is_moe:
        mdl[L.MDL_EXPERTS] = m.experts
        mdl[L.MDL_TOP_K] = m.top_k
        mdl[L.MDL_EXPERT_FFN_HIDDEN] = m.expert_ffn_hidden
        mdl[L.MDL_MOE_EVERY] = m.moe_every
        mdl[L.MDL_SHARED_EXPERTS] = m.shared_experts
        mdl[L.MDL_MAX_ROUTE_NODES] = m.max_route_nodes
        mdl[L.MDL_FIRST_DENSE_LAYERS] = m.first_dense_layers
    return mdl


#: Megatron-Core's default data-parallel bucket: max(40000000, 1000000 x dp x cp) parameters
#: (``megatron/core/distributed/distributed_data_parallel.py``; ``DistributedDataParallelConfig.
#: bucket_size``: "larger DP sizes need larger buckets to ensure collectives do not become
#: latency-bound").
MEGATRON_DP_BUCKET = (40_000_000.0, 1_000_000.0)


def dp_bucket_rule(bucket_params: int | None, stack: str) -> tuple[float, float]:
    """``(minimum parameters, parameters per data-parallel rank)`` of the gradient bucket
    (``model.llm.dp_bucket_params``): a bucket size the job sets, fixed; else the stack's rule --
    Megatron-Core's :data:`MEGATRON_DP_BUCKET` -- or ``(0, 0)``, no bucket limit, where the stack
    reduces otherwise (FSDP unit by unit, XLA's scheduler, Megatron-LM 2021-22's single
    all-reduce, which ``dp_overlap`` describes)."""
    if bucket_params is not None:
        return float(bucket_params), 0.0
    if stack == "megatron-core":
        return MEGATRON_DP_BUCKET
    return 0.0, 0.0


def pack_job(scenario: Scenario) -> np.ndarray:
    """The job block: batch shape and bytes per element of each kind of data."""
    j = scenario.job
    job = np.zeros(L.N_JOB, dtype=np.float64)
    pb = param_bytes(j.dtype)
    gb = grad_bytes(j.grad_dtype)
    job[L.JOB_SEQ_LEN] = j.seq_len
    job[L.JOB_GLOBAL_BATCH] = j.global_batch
    job[L.JOB_ACTIVATION_BYTES] = activation_bytes(j.dtype)
    job[L.JOB_PARAM_BYTES] = pb
    job[L.JOB_GRAD_BYTES] = gb
    job[L.JOB_OPTIMIZER_BYTES] = optimizer_state_bytes(j.optimizer, j.grad_dtype,
                                                       j.optimizer_dtype)
    job[L.JOB_OPTIMIZER_TRAFFIC_BYTES] = optimizer_traffic_bytes(j.optimizer, j.grad_dtype, pb,
                                                                 j.optimizer_dtype)
    job[L.JOB_COMM_BYTES] = activation_bytes(j.dtype)
    job[L.JOB_GRAD_COMM_BYTES] = gb
    job[L.JOB_FLASH_ATTENTION] = 1.0 if j.flash_attention else 0.0
    job[L.JOB_DISPATCH_BYTES] = moe_dispatch_bytes(
        j.moe_dispatch_dtype or default_dispatch_dtype(j.dtype))
    job[L.JOB_COMBINE_BYTES] = moe_combine_bytes(
        j.moe_combine_dtype or default_combine_dtype(j.dtype))
    job[L.JOB_PIPELINE_EDGE_LAYERS] = j.pipeline_edge_layers
    job[L.JOB_DROPOUT] = 1.0 if j.dropout else 0.0
    job[L.JOB_EAGER_ELEMENTWISE] = 1.0 if j.elementwise == "eager" else 0.0
    job[L.JOB_LINEAR_CAST_BYTES] = fp8_cast_bytes(j.recipe, j.stack)
    job[L.JOB_FP8_WEIGHT_CACHE_BYTES] = fp8_linear_weight_extra_bytes(j.recipe,
                                                                      j.fp8_param_gather, pb,
                                                                      j.stack)
    job[L.JOB_LINEAR_INPUT_BYTES] = saved_linear_input_bytes(j.recipe, activation_bytes(j.dtype))
    job[L.JOB_TP_GATHER_BYTES] = tp_gather_bytes(j.recipe, activation_bytes(j.dtype))
    job[L.JOB_TP_SEQUENCE_COPY] = tp_sequence_copy(j.stack, j.tp_sequence_copy)
    job[L.JOB_FSDP_PP_UNSHARDED] = 1.0 if j.fsdp_pp_unsharded else 0.0
    job[L.JOB_GROUPED_EXPERT_GEMM] = grouped_expert_gemm(j.stack, j.expert_gemm)
    job[L.JOB_EAGER_EXPERT_BIAS] = eager_expert_bias(scenario.model.expert_bias, j.stack,
                                                     j.expert_bias)
    job[L.JOB_DP_REPLICAS] = float(j.dp_replicas)
    job[L.JOB_RECOMPUTE_LAYERS] = float(j.recompute_layers)
    job[L.JOB_PIPELINE_FIRST_STAGE_LAYERS] = float(j.pipeline_first_stage_layers)
    job[L.JOB_PIPELINE_LAST_STAGE_LAYERS] = float(j.pipeline_last_stage_layers)
    job[L.JOB_LOGITS_EXTRA_BYTES] = logits_extra_bytes(j.cross_entropy, activation_bytes(j.dtype))
    job[L.JOB_OFFLOAD_OPTIMIZER] = 1.0 if j.offload_optimizer else 0.0
    job[L.JOB_OFFLOAD_ACTIVATIONS] = float(j.offload_activations)
    job[L.JOB_LINEAR_PARAM_COMM_BYTES] = linear_param_comm_bytes(j.recipe, j.fp8_param_gather,
                                                                 pb)
    job[L.JOB_DP_BUCKET_MIN_PARAMS], job[L.JOB_DP_BUCKET_PARAMS_PER_RANK] = dp_bucket_rule(
        j.dp_bucket_params, j.stack)
    job[L.JOB_RECOMPUTE_LAYERNORM] = 1.0 if "layernorm" in j.recompute_modules else 0.0
    job[L.JOB_RECOMPUTE_MOE_ACT] = 1.0 if "moe_act" in j.recompute_modules else 0.0
    job[L.JOB_RECOMPUTE_MLP] = 1.0 if "mlp" in j.recompute_modules else 0.0
    job[L.JOB_RECOMPUTE_MOE] = 1.0 if "moe" in j.recompute_modules else 0.0
    job[L.JOB_RECOMPUTE_SHARED_EXPERTS] = 1.0 if "shared_experts" in j.recompute_modules else 0.0
    job[L.JOB_ZERO3_SHARD_PARAM_BYTES] = zero3_shard_param_bytes(j.stack, j.optimizer_dtype, pb)
    job[L.JOB_SYNC_STRATEGY] = L.SYNC_STRATEGIES.index(j.sync.strategy)
    job[L.JOB_SYNC_INNER_STEPS] = j.sync.inner_steps
    job[L.JOB_SYNC_OUTER_BYTES] = outer_sync_bytes(j.sync.outer_dtype, gb)
    job[L.JOB_SYNC_FRAGMENTS] = j.sync.fragments
    job[L.JOB_SYNC_OVERLAP_STEPS] = j.sync.overlap_steps
    return job


def pack(scenario: Scenario) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(sys, mdl, job)`` blocks of a scenario."""
    return pack_system(scenario), pack_model(scenario), pack_job(scenario)


# --------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------


def encode_order(order: str) -> int:
    """Order index of a placement string (missing dims completed, see ``complete_order``)."""
    return L.order_from_names(complete_order(parse_order(order)))


def encode_value(field: str, value: Any) -> int:
    """The int32 code of one config value (enum strings and orders to their codes)."""
    if field == "schedule" and isinstance(value, str):
        return L.SCHEDULES.index(value)
    if field == "recompute" and isinstance(value, str):
        return L.RECOMPUTE.index(value)
    if field == "order" and isinstance(value, str):
        return encode_order(value)
    return int(value)


def _column_values(field: str, values: Any, n: int) -> np.ndarray:
    arr = np.asarray(values)
    if arr.shape != (n,):
        raise ScenarioError.at(f"configs.{field}", f"expected {n} values like the other "
                               "columns", f"shape {arr.shape}", f"an array of length {n}")
    if arr.dtype.kind in "iub":
        return arr.astype(np.int32)
    try:
        return np.array([encode_value(field, v) for v in arr.tolist()], dtype=np.int32)
    except (ValueError, TypeError) as exc:
        raise ScenarioError.at(f"configs.{field}", f"cannot encode: {exc}", None,
                               show_got=False) from None


def pack_configs(configs: Sequence[ConfigSpec] | Mapping[str, Any] | Iterable[ConfigSpec],
                 gpus: int | None = None) -> np.ndarray:
    """Configurations as int32 columns of shape ``(layout.N_CFG, n)``.

    ``configs`` is a list of :class:`ConfigSpec` (``dp`` derived from ``gpus`` where omitted)
    or a dict of equal-length arrays keyed by ``layout.CONFIG_FIELDS`` names (values already
    integer codes, or strings for schedule / recompute / order). Columns left out of the dict
    take the ConfigSpec defaults (``sp`` = tp > 1); ``dp`` is required unless ``gpus`` is given.
    """
    if isinstance(configs, Mapping):
        return _pack_columns(configs, gpus)
    specs = list(configs)
    cfg = np.zeros((L.N_CFG, len(specs)), dtype=np.int32)
    for j, spec in enumerate(specs):
        if spec.dp is None:
            if gpus is None:
                raise ScenarioError.at("config.dp", "missing, and no GPU count to derive it "
                                       "from", None, "a positive integer", show_got=False)
            spec = spec.resolved(gpus)
        data = spec.model_dump()
        for i, field in enumerate(L.CONFIG_FIELDS):
            cfg[i, j] = encode_value(field, data[field])
    return cfg


def _pack_columns(columns: Mapping[str, Any], gpus: int | None) -> np.ndarray:
    unknown = [k for k in columns if k not in L.CONFIG_FIELDS]
    if unknown:
        raise ScenarioError.at(f"configs.{unknown[0]}", "unknown config column", None,
                               ", ".join(L.CONFIG_FIELDS), show_got=False)
    if not columns:
        return np.zeros((L.N_CFG, 0), dtype=np.int32)
    n = len(np.asarray(next(iter(columns.values()))))
    cfg = np.zeros((L.N_CFG, n), dtype=np.int32)
    defaults = ConfigSpec()
    for i, field in enumerate(L.CONFIG_FIELDS):
        if field in columns:
            cfg[i] = _column_values(field, columns[field], n)
        elif field == "sp":
            cfg[i] = (cfg[L.CFG_TP] > 1).astype(np.int32)
        elif field == "dp":
            if gpus is None:
                raise ScenarioError.at("configs.dp", "missing, and no GPU count to derive it "
                                       "from", None, "an array of degrees", show_got=False)
            inner = cfg[L.CFG_TP].astype(np.int64) * cfg[L.CFG_CP] * cfg[L.CFG_PP]
            cfg[i] = np.where(inner > 0, gpus // np.maximum(inner, 1), 0).astype(np.int32)
        else:
            cfg[i] = encode_value(field, getattr(defaults, field))
    return cfg
