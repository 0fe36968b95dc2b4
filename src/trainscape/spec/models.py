"""Validated scenario inputs: what is trained (model, job), on what (cluster), with which knobs
(config, space).

Units follow the field names: ``*_GBps`` decimal gigabytes per second per GPU per direction,
``*_gb`` gigabytes of memory as vendors count HBM (binary: 2**30 bytes, see
:func:`~trainscape.spec.pack.hbm_capacity_bytes`), ``*_us`` microseconds, ``*_tflops`` 10^12 FLOP/s. Packing
(:mod:`trainscape.spec.pack`) converts them to bytes, bytes/s and seconds.

Every model forbids unknown keys and checks types strictly (no ``"8"`` for ``8``). Checks
that need several fields raise :func:`~trainscape.spec.errors.fail` with the offending field.
Presets are merged into the raw input before validation (:func:`expand_presets`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator

from .. import layout
from ..model.power import drawn_power_w, power_limited_clock_fraction
from . import ranges as R
from .config import _ORDER_ALLOWED, ConfigSpec, Recompute, Schedule, Zero, _Spec, parse_order
from .errors import ScenarioError, fail, from_validation_error

DTYPES = ("bf16", "fp16", "fp8")
#: Software-stack profiles (presets/stacks.toml), the same tuple as ``presets.STACKS``.
STACKS = ("megatron-core", "pytorch-fsdp", "jax-xla", "megatron-lm")
DEFAULT_STACK = "megatron-core"
OPTIMIZERS = ("adam", "sgd")
GRAD_DTYPES = ("fp32", "bf16")
#: element types of the optimizer states (Adam's moments, SGD's momentum)
OPTIMIZER_DTYPES = ("fp32", "bf16")
MLPS = ("swiglu", "gelu")
#: Megatron-Core recompute_modules modelled beside the attention core (job.recompute_modules)
RECOMPUTE_MODULES = ("layernorm", "moe_act", "mlp", "moe", "shared_experts")
#: FP8 scaling recipes (see ``spec.pack.fp8_cast_bytes``): Transformer Engine's delayed and
#: current ("tensorwise") per-tensor scaling, torchao's rowwise scaling, DeepSeek-V3's 1x128 /
#: 128x128 blockwise scaling, and MXFP8 (OCP microscaling, 32-element blocks).
FP8_RECIPES = ("delayed", "tensorwise", "rowwise", "blockwise", "mxfp8")
#: Keys of preset tables that document where numbers come from; dropped when merging.
PRESET_META_KEYS = ("sources",)

# every numeric field has a documented range (spec/ranges.py, README "Input ranges")
PosInt = R.Dim
NonNegInt = R.DimOrZero
Fraction = R.Efficiency

Dtype = Literal[DTYPES]


# --------------------------------------------------------------------------------------------
# Model, job, hardware
# --------------------------------------------------------------------------------------------


class ModelSpec(_Spec):
    """Transformer shape. MoE when ``experts > 0``: every ``moe_every``-th layer routes each
    token to ``top_k`` of ``experts`` MLPs of width ``expert_ffn_hidden`` (plus
    ``shared_experts`` always-active ones)."""

    preset: str | None = None
    name: str | None = None
    layers: PosInt
    hidden: PosInt
    ffn_hidden: PosInt
    heads: PosInt
    kv_heads: PosInt | None = None  # default: heads (multi-head attention)
    head_dim: PosInt | None = None  # default: hidden / heads
    vocab: PosInt
    mlp: Literal[MLPS] = "swiglu"
    experts: NonNegInt = 0
    top_k: NonNegInt = 0
    expert_ffn_hidden: NonNegInt | None = None  # default: ffn_hidden for MoE models
    moe_every: NonNegInt | None = None  # default: 1 for MoE models
    shared_experts: NonNegInt = 0
    # node-limited routing (DeepSeek-V3 §2.1.2): a token's experts lie on at most this many
    # nodes (tier-0 domains); 0: no limit
    max_route_nodes: NonNegInt = 0
    # sliding-window attention: a query sees at most this many keys (itself included) in the
    # windowed layers; 0: full causal attention everywhere
    attention_window: NonNegInt = 0
    # with a window, every k-th layer attends to the whole prefix (GPT-OSS 2, Gemma 3 6);
    # 0: every layer windowed (no effect without a window)
    full_attention_every: NonNegInt = 0
    # multi-token prediction (DeepSeek-V3 §2.2): depth D, one transformer block each after the
    # last layer, with its own projection and loss on the shared output head; 0: none
    mtp_layers: NonNegInt = 0
    # the routed experts' linear layers carry biases (GPT-OSS: every linear layer has one);
    # job.expert_bias says how a stack adds the second projection's
    expert_bias: bool = False
    # leading dense layers: the first N layers keep a dense MLP of ffn_hidden and the MoE
    # pattern (every moe_every-th layer) starts after them (DeepSeek-V3 config
    # first_k_dense_replace = 3, Kimi K2 1; Megatron-Core moe_layer_freq "[0]*3+[1]*58"); 0: none
    first_dense_layers: NonNegInt = 0

    @model_validator(mode="after")
    def _derive_and_check(self) -> ModelSpec:
        if self.kv_heads is None:
            self.kv_heads = self.heads
        if self.heads % self.kv_heads:
            raise fail("kv_heads", "must divide heads", self.kv_heads,
                       f"a divisor of heads = {self.heads}")
        if self.head_dim is None:
            if self.hidden % self.heads:
                raise fail("head_dim", f"required: heads = {self.heads} does not divide "
                           f"hidden = {self.hidden}", None, "a positive integer",
                           show_got=False)
            self.head_dim = self.hidden // self.heads
        # without a window every layer attends fully whatever the stride: a [space] may sweep
        # model.attention_window through 0 and keep the model's stride
        if self.full_attention_every > self.layers:
            raise fail("full_attention_every", "a stride longer than the model",
                       self.full_attention_every, f"0 to {self.layers}")
        if self.mtp_layers > self.layers:
            raise fail("mtp_layers", "more multi-token prediction blocks than the model has "
                       "layers", self.mtp_layers, f"0 to {self.layers}")
        if self.experts > 0:
            if not 1 <= self.top_k <= self.experts:
                raise fail("top_k", "an MoE model routes each token to 1..experts experts",
                           self.top_k, f"1 to {self.experts}")
            if self.moe_every is None:
                self.moe_every = 1
            if not 1 <= self.moe_every <= self.layers:
                raise fail("moe_every", "must be between 1 and layers for an MoE model",
                           self.moe_every, f"1 to {self.layers}")
            if self.first_dense_layers > self.layers - self.moe_every:
                raise fail("first_dense_layers", "an MoE model needs at least one MoE layer "
                           f"after its leading dense ones (every moe_every = {self.moe_every}"
                           f"-th of the rest of its {self.layers} layers)",
                           self.first_dense_layers, f"0 to {self.layers - self.moe_every}")
            if self.expert_ffn_hidden is None:
                self.expert_ffn_hidden = self.ffn_hidden
            if self.expert_ffn_hidden <= 0:
                raise fail("expert_ffn_hidden", "must be > 0 for an MoE model",
                           self.expert_ffn_hidden, "> 0")
        else:
            for field in ("top_k", "moe_every", "shared_experts", "expert_ffn_hidden",
                          "max_route_nodes", "expert_bias", "first_dense_layers"):
                value = getattr(self, field)
                if value:
                    raise fail(field, "only for MoE models (model.experts = 0)", value,
                               ("false" if isinstance(value, bool) else "0")
                               + ", or set model.experts")
            self.moe_every = 0
            self.expert_ffn_hidden = 0
        return self

    @property
    def is_moe(self) -> bool:
        return self.experts > 0


SYNC_STRATEGIES = layout.SYNC_STRATEGIES
#: formats of a tier's data-parallel traffic, [[cluster.tiers]] comm_dtype ("none", as leaving
#: it out: the job's widths -- a value a [space] hardware axis can list beside the others)
COMM_DTYPES = ("none", "bf16", "fp8", "int8")
#: element types of the cross-site (outer) traffic of job.sync.outer_dtype
OUTER_DTYPES = ("fp32", "bf16", "fp8", "int8")


class SyncSpec(_Spec):
    """``[job.sync]``: how data-parallel replicas at different sites (the outermost network tier
    when the cluster has two or more) synchronise. ``synchronous``: every step, as in one
    building. ``diloco``: DiLoCo (Douillard et al. 2023, arXiv 2311.08105, Algorithm 1): each
    site trains ``inner_steps`` (H) steps on its own, then the sites all-reduce the
    pseudo-gradient. ``delayed``: the cross-site reduction of a step's gradients runs under the
    next step and is applied one step late. ``outer_dtype``: element type of the cross-site
    traffic (default: the gradient's). ``tokens_factor``: the user's convergence factor, tokens
    to reach the target relative to synchronous training; reported, never applied to the
    step time. Streaming DiLoCo (Douillard et al. 2025, arXiv 2501.18512): ``fragments`` (P)
    groups of layers, each all-reduced once per H steps at its own offset, and
    ``overlap_steps`` (tau) inner steps each fragment's all-reduce runs beside (its outer
    update lands tau steps late)."""

    strategy: Literal[SYNC_STRATEGIES] = "synchronous"
    inner_steps: R.InnerSteps = 1
    outer_dtype: Literal[OUTER_DTYPES] | None = None
    tokens_factor: R.PosFactor = 1.0
    fragments: R.InnerSteps = 1
    overlap_steps: R.OverlapSteps = 0

    @model_validator(mode="after")
    def _check_inner(self) -> SyncSpec:
        if self.inner_steps != 1 and self.strategy != "diloco":
            raise fail("inner_steps", "only for strategy = \"diloco\" (H steps between outer "
                       "syncs)", self.inner_steps, "leave it out, or set strategy = \"diloco\"")
        for name in ("fragments", "overlap_steps"):
            if getattr(self, name) != (1 if name == "fragments" else 0) \
                    and self.strategy != "diloco":
                raise fail(name, "only for strategy = \"diloco\" (Streaming DiLoCo)",
                           getattr(self, name), "leave it out, or set strategy = \"diloco\"")
        if self.fragments > self.inner_steps:
            raise fail("fragments", "more fragments than inner steps: each fragment syncs "
                       "once every inner_steps steps, one fragment per step at most",
                       self.fragments, f"1 to inner_steps ({self.inner_steps})")
        if self.overlap_steps >= self.inner_steps and self.overlap_steps > 0:
            raise fail("overlap_steps", "a fragment's all-reduce must end before its next "
                       "sync", self.overlap_steps, f"0 to inner_steps - 1 ({self.inner_steps - 1})")
        return self


class JobSpec(_Spec):
    """What one training step processes and in which precision."""

    seq_len: PosInt
    global_batch: R.Batch  # sequences per step
    dtype: Dtype = "bf16"  # compute precision of the GEMMs
    optimizer: Literal[OPTIMIZERS] = "adam"
    grad_dtype: Literal[GRAD_DTYPES] = "fp32"  # gradient accumulation (Megatron: fp32)
    flash_attention: bool = True
    # Which generation of fused attention kernel runs (with flash_attention): "native" -- one
    # written for the GPU's architecture (cuDNN / TE fused attention, FlashAttention-3 on
    # Hopper); "legacy" -- one written for an older architecture (FlashAttention-2, Triton
    # FlashAttention on Hopper), at the GPU's legacy_attention_fraction of attention_efficiency
    attention_kernel: Literal["native", "legacy"] = "native"
    # MoE all-to-all precision: dispatch default fp8 for fp8 jobs, else the compute dtype;
    # combine default bf16 for fp8 jobs, else the compute dtype (DeepSeek-V3 §3.3.2)
    moe_dispatch_dtype: Dtype | None = None
    moe_combine_dtype: Dtype | None = None
    # software-stack profile (presets/stacks.toml): multipliers on the GPU preset's constants
    stack: Literal[STACKS] = DEFAULT_STACK
    # Transformer layers fewer on the first and on the last pipeline stage: the embedding and
    # the loss each count as this many layers in the pipeline split (Megatron-LM
    # --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split: 1;
    # Llama 3, arXiv 2407.21783 §3.3.2: 1). 0: the plain split.
    pipeline_edge_layers: NonNegInt = 0
    # ZeRO-Offload: optimizer states in host memory, the optimizer step on the CPU (needs
    # cluster.host_to_device_GBps and cluster.host_memory_GBps)
    offload_optimizer: bool = False
    # Activation offload (Megatron-Core --cpu-offloading --cpu-offloading-num-layers N, TE
    # get_cpu_offload_context): share (0..1) of each pipeline stage's layers whose saved
    # activations go to host memory in the forward and come back for the backward, a layer
    # ahead (needs cluster.host_to_device_GBps). 0: none.
    offload_activations: R.Share = 0.0
    # Hidden and attention dropout on (1-byte masks stored, Korthikanti et al. 2022 §4.1).
    # NeMo's Llama / Mistral / Nemotron / GPT recipes train with dropout 0: set false for them.
    dropout: bool = True
    # How the loss reads the logits: "fp32" -- an fp32 copy of the vocabulary-parallel logits
    # (Megatron-LM's vocab_parallel_cross_entropy); "fused" -- one fused kernel over the
    # activation-dtype logits that keeps only a per-row log-sum-exp and writes the gradient into
    # a new activation-dtype tensor (flash-attn's losses.cross_entropy, llm-foundry's default
    # loss_fn "fused_crossentropy"; Liger's fused cross-entropy alike); "upcast" -- PyTorch's
    # F.cross_entropy on an fp32 copy of the logits, uncompiled: the copy and the fp32
    # log-softmax it saves are both held at the loss's peak (torchtitan before April 2025).
    cross_entropy: Literal["fp32", "fused", "upcast"] = "fp32"
    # How the element-wise work of a layer runs: "fused" -- fused kernels (Transformer Engine's
    # norms and SwiGLU, torch.compile'd regions, XLA, flash-attn / Apex kernels); "eager" -- each
    # op of an RMSNorm, the rotary embedding and SwiGLU its own kernel, upcast to fp32 where the
    # code says so (PyTorch eager: torchtitan's Llama modules without torch.compile).
    elementwise: Literal["fused", "eager"] = "fused"
    # Whether every sequence-parallel TP collective also copies its whole buffer once (the
    # chunk + cat of a gather or scatter along dim 1 of [batch, seq, hidden] activations,
    # PyTorch DTensor's Shard(1) TP; AsyncTP fuses all but the backward's reduce-scatters).
    # None (default): the stack's -- true on "pytorch-fsdp" (torchtitan), false elsewhere
    # (Megatron's [seq, batch, hidden] gathers along dim 0; XLA picks its layouts).
    tp_sequence_copy: bool | None = None
    # How an MoE layer's routed experts run their GEMMs: "per_expert" -- one GEMM per local
    # expert and projection (Transformer Engine's GroupedLinear, Megatron-Core's default
    # TEGroupedMLP: multi-stream cuBLAS GEMMs); "grouped" -- one grouped kernel per projection
    # for all local experts (NeMo AutoModel's grouped_gemm ops.gmm, torchtitan's
    # torch._grouped_mm, MaxText's megablox gmm / ragged dot). None (default): the stack's --
    # "grouped" on "pytorch-fsdp" and "jax-xla", "per_expert" on the Megatron stacks.
    expert_gemm: Literal["per_expert", "grouped"] | None = None
    # How a model with expert biases (model.expert_bias) adds the routed experts' second
    # projection's bias: "eager" -- a Python loop over the local experts, a few PyTorch ops
    # each, forward and backward (Megatron-Core TEGroupedMLP._apply_bias, releases 0.15-0.19);
    # "fused" -- in a grouped kernel's epilogue or a packed kernel (Megatron-Core's TE op-fuser
    # path, grouped-GEMM stacks, XLA). None (default): the stack's -- "eager" on
    # "megatron-core", "fused" elsewhere. No effect without model.expert_bias.
    expert_bias: Literal["fused", "eager"] | None = None
    # ZeRO-3 / FSDP under a pipeline (pp > 1): true -- a stage's weights, once gathered in the
    # first microbatch's forward, stay unsharded until the step's last backward, and its
    # gradients accumulate unsharded (at grad_dtype) until then, one all-gather and one
    # reduce-scatter a step (torchtitan: reshard_after_forward=False with PP, PyTorch
    # pipelining's backward without gradient sync before the last microbatch); false
    # (default): every microbatch gathers and reduce-scatters unit by unit.
    fsdp_pp_unsharded: bool = False
    # Hybrid sharding: the data-parallel ranks (dp / ep of them outside expert parallelism)
    # form dp_replicas groups, outermost; ZeRO (zero >= 1) shards its states within a group and
    # every group holds a whole copy, the gradients all-reduced across the groups (PyTorch
    # FSDP2 HSDP: torchtitan data_parallel_replicate_degree; FSDP1 HYBRID_SHARD; MaxText
    # dcn_data_parallelism x fsdp; Megatron-LM --num-distributed-optimizer-instances). 1
    # (default): ZeRO shards over every data-parallel rank. Must divide dp / ep (checked per
    # layout); no effect without ZeRO.
    dp_replicas: R.Degree = 1
    # FP8 scaling recipe (dtype = "fp8" only); default "delayed", Transformer Engine's default
    # recipe (DelayedScaling)
    fp8_recipe: Literal[FP8_RECIPES] | None = None
    # FP8 weights without a 16-bit copy (dtype = "fp8" only): the linear layers' weights are
    # held only as their FP8 copies and all-gathered in FP8 (Megatron-LM --fp8-param-gather,
    # NeMo 2.0 / Megatron-Bridge FP8 precision recipes); the distributed optimizer keeps the
    # fp32 master copy. Default false: 16-bit weights plus Transformer Engine's FP8 copies.
    fp8_param_gather: bool = False
    # Element type of the optimizer states. "fp32" (default): fp32 master weights and moments
    # (mixed-precision Adam). "bf16": moments in bf16 and no separate master copy -- the 16-bit
    # weights are the master (Apex DistributedFusedAdam with dtype = bf16, as NeMo 1.0's
    # Nemotron-4 340B recipe runs it).
    optimizer_dtype: Literal[OPTIMIZER_DTYPES] = "fp32"
    # Parameters per data-parallel gradient bucket: the gradients' reduce-scatter (all-reduce)
    # and the weights' all-gather run bucket by bucket beside the backward and the forward, and
    # the last bucket's reduction (the first's gather) has nothing left to hide behind. Default:
    # the stack's -- Megatron-Core's max(4e7, 1e6 x dp x cp) on "megatron-core"
    # (DistributedDataParallelConfig.bucket_size), no bucket limit on the others.
    dp_bucket_params: R.BucketParams | None = None
    # Megatron-Core recompute_modules the selective recompute runs beside the attention core
    # (config recompute = "selective"): "layernorm" discards the two norms' outputs and re-runs
    # the norms in the backward, "moe_act" the experts' activation-function outputs
    # (output-discarding checkpoints); "mlp" checkpoints each dense layer's MLP block, "moe"
    # each MoE layer's whole MoE block (router, all-to-alls, experts), "shared_experts" the
    # shared experts (TransformerConfig.recompute_modules, normal checkpoints)
    recompute_modules: list[Literal[RECOMPUTE_MODULES]] = Field(default_factory=list)
    # Full recompute (config recompute = "full") of only the first N transformer layers of each
    # model chunk, the other layers keeping every activation: Megatron-LM's
    # --recompute-granularity full --recompute-method block --recompute-num-layers N (NeMo /
    # Megatron-Bridge recompute_num_layers). 0 (default): every layer, Megatron's "uniform"
    # method with one layer per checkpoint. N at least a chunk's layers checkpoints them all.
    recompute_layers: NonNegInt = 0
    # Megatron-Core num_layers_in_first_pipeline_stage / num_layers_in_last_pipeline_stage:
    # the transformer layers of the first / last pipeline stage, the other stages splitting the
    # rest evenly; 0: split by rule (pipeline_edge_layers)
    pipeline_first_stage_layers: NonNegInt = 0
    pipeline_last_stage_layers: NonNegInt = 0
    # Megatron-Core --pipeline-model-parallel-layout, e.g. "Et|(tt|)*30mL": read against
    # [config] pp and vpp into the two counts above (spec.pipeline_layout.split)
    pipeline_layout: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    # cross-site synchronisation strategy ([job.sync], see SyncSpec)
    sync: SyncSpec = SyncSpec()

    @model_validator(mode="after")
    def _check_recipe(self) -> JobSpec:
        if self.attention_kernel == "legacy" and not self.flash_attention:
            raise fail("attention_kernel", "names a fused attention kernel: only with "
                       "flash_attention = true", self.attention_kernel,
                       "\"native\", or flash_attention = true")
        if self.fp8_recipe is not None and self.dtype != "fp8":
            raise fail("fp8_recipe", "only for FP8 training (job.dtype = \"fp8\")",
                       self.fp8_recipe, "leave it out, or set job.dtype = \"fp8\"")
        if self.fp8_param_gather and self.dtype != "fp8":
            raise fail("fp8_param_gather", "only for FP8 training (job.dtype = \"fp8\")",
                       self.fp8_param_gather, "false, or set job.dtype = \"fp8\"")
        if self.optimizer_dtype == "bf16" and self.dtype == "fp16":
            raise fail("optimizer_dtype", "bf16 optimizer states keep no master copy: the "
                       "weights must be bf16 (job.dtype = \"bf16\" or \"fp8\")",
                       self.optimizer_dtype, "\"fp32\"")
        if self.optimizer_dtype == "bf16" and self.fp8_param_gather:
            raise fail("optimizer_dtype", "bf16 optimizer states keep no master copy: with "
                       "fp8_param_gather the weights are FP8 and need an fp32 one",
                       self.optimizer_dtype, "\"fp32\", or fp8_param_gather = false")
        return self

    @property
    def recipe(self) -> str | None:
        """The FP8 recipe in use: ``fp8_recipe`` or "delayed" for an fp8 job, else None."""
        if self.dtype != "fp8":
            return None
        return self.fp8_recipe or "delayed"


class GpuSpec(_Spec):
    """One accelerator. ``peak_tflops`` is dense (no sparsity), per dtype."""

    preset: str | None = None
    name: str | None = None
    peak_tflops: dict[Dtype, R.Tflops] = Field(min_length=1)
    hbm_gb: R.HbmGb
    hbm_bandwidth_GBps: R.Bandwidth
    nvlink_bandwidth_GBps: R.Bandwidth | None = None
    gemm_efficiency_max: Fraction
    gemm_half_flops: R.HalfFlops  # GEMM FLOPs at which efficiency is half its maximum
    attention_efficiency: Fraction
    memory_efficiency: Fraction
    # Fraction of HBM bandwidth a plain streaming kernel reaches: the microbenchmark value a
    # preset ships (gpus.toml memory_efficiency before any fit; the fits lower
    # memory_efficiency to absorb the element-wise traffic the model counts only by proxy).
    # Bytes the model counts op by op (job.elementwise = "eager") run at it. Default: the
    # preset's stock value, or memory_efficiency for a GPU without a preset.
    stream_memory_efficiency: Fraction | None = None
    hbm_reserve_gb: R.HbmGbOrZero = 0.0
    layer_overhead_us: R.Micros = 0.0  # fixed cost per layer per microbatch pass
    step_overhead_ms: R.Millis = 0.0  # fixed cost per training step (host synchronisations)
    # host time to issue one eager framework op -- Python, the PyTorch dispatcher and the
    # kernel launch: an eager kernel shorter than it leaves the GPU waiting (model.llm
    # eager_op_time). Default: 10 us, an x86 host's (presets/gpus.toml cites the figures).
    host_op_us: R.Micros = 10.0
    # with ``preset``: apply the constants fitted for this GPU (presets/calibrated.toml)
    calibrated: bool = True
    # FP8 GEMMs of the linear layers on their own curve; left out: the BF16 curve's values
    fp8_gemm_efficiency_max: Fraction | None = None
    fp8_gemm_half_flops: R.HalfFlops | None = None
    # TP communication overlap (TE userbuffers): fraction that stays exposed, and fractional
    # slowdown of the overlapped GEMMs. Defaults: the H100 derivation in presets/gpus.toml.
    tp_overlap_exposed: R.Share = 0.125
    tp_overlap_slowdown: R.Slowdown = 0.064
    # slowdown of attention while context parallelism's ring P2P runs beside it
    cp_overlap_slowdown: R.Slowdown = 0.03
    # K/V length at which a fused attention kernel reaches half of attention_efficiency; 0: no
    # dependence on the sequence length
    attention_half_seq: R.HalfSeq = 0.0
    # head dim at which a fused attention kernel reaches half its matmul-bound rate (the
    # softmax exponentials' share, presets/gpus.toml); 0: no dependence on the head dim
    attention_head_dim_half: R.HalfSeq = 0.0
    # share of attention_efficiency a kernel written for an older architecture reaches here
    # (applied when job.attention_kernel is "legacy"; presets/gpus.toml cites the figure)
    legacy_attention_fraction: Fraction = 1.0
    # cost and power (optional): price of one GPU-hour in US dollars and electrical power per GPU
    # while training, in watts; they give the results' cost_per_step_usd, tokens_per_usd and
    # tokens_per_joule (0 when left out)
    price_per_hour_usd: R.Price | None = None
    power_w: R.PowerW | None = None
    # board power limit the GPUs run under (nvidia-smi -pl), below the rated power_w: the
    # tensor-core clock, and every peak_tflops rate with it, falls as
    # (power_limit_w / power_w) ** (1 / power_clock_exponent) (model.power); the energy per
    # step counts the limit. Left out: the rated power, no derating.
    power_limit_w: R.PowerLimitW | None = None
    power_clock_exponent: R.ClockExponent = 3.0

    @model_validator(mode="after")
    def _check(self) -> GpuSpec:
        if self.hbm_reserve_gb >= self.hbm_gb:
            raise fail("hbm_reserve_gb", "must be smaller than hbm_gb", self.hbm_reserve_gb,
                       f"< {self.hbm_gb:g}")
        if self.power_limit_w is not None:
            if not self.power_w:
                raise fail("power_limit_w", "needs power_w, the board's rated power, to scale "
                           "the clock from", self.power_limit_w, "set power_w too")
            if self.power_limit_w > self.power_w:
                raise fail("power_limit_w", "must not exceed power_w, the board's rated power",
                           self.power_limit_w, f"> 0 and <= {self.power_w:g}")
        return self

    @property
    def clock_fraction(self) -> float:
        """Sustained tensor-core clock under ``power_limit_w`` as a fraction of the rated
        one (:func:`trainscape.model.power.power_limited_clock_fraction`; 1 without a
        limit)."""
        return power_limited_clock_fraction(self.power_limit_w or 0.0, self.power_w or 0.0,
                                            self.power_clock_exponent)

    @property
    def drawn_power_w(self) -> float | None:
        """Power per GPU while training (the limit where one is set), None when neither
        ``power_w`` nor a limit is given."""
        if self.power_w is None and self.power_limit_w is None:
            return None
        return drawn_power_w(self.power_w or 0.0, self.power_limit_w or 0.0)

    def rated_peak_for(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` as rated, at the board's full power. fp16 falls
        back to bf16 when not listed: on NVIDIA tensor cores since Ampere the dense FP16 and
        BF16 rates are equal (NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 1;
        H100 whitepaper, Table 1)."""
        if dtype in self.peak_tflops:
            return self.peak_tflops[dtype]
        if dtype == "fp16":
            return self.peak_tflops.get("bf16")
        return None

    def peak_for(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` at the clock the GPU sustains: the rated peak
        (:meth:`rated_peak_for`) times :attr:`clock_fraction` under ``power_limit_w`` -- the
        one peak every kernel is packed with."""
        peak = self.rated_peak_for(dtype)
        if peak is None:
            return None
        return peak * self.clock_fraction


class TransportSpec(_Spec):
    """How a tier's messages travel: ``protocol`` (``rdma``: queue pairs set up once; ``tcp``:
    one round trip of handshake before each message's data), ``channels`` (connections or
    queue pairs per GPU) and ``window_MiB`` (bytes each may have in flight; none: no limit).
    The achieved bandwidth is at most ``channels * window / RTT`` (the bandwidth-delay
    product, RFC 7323 §1.1)."""

    protocol: Literal["rdma", "tcp"] = "rdma"
    channels: PosInt = 1
    window_MiB: R.WindowMiB | None = None

    @property
    def window_bytes(self) -> float:
        """Bytes in flight per GPU (channels x window); 0 when the window is unlimited."""
        if self.window_MiB is None:
            return 0.0
        return self.channels * self.window_MiB * 1048576.0

    @property
    def handshake_rtts(self) -> float:
        """Round trips before each message's data: 1 for TCP, 0 for RDMA."""
        return 1.0 if self.protocol == "tcp" else 0.0


class TierSpec(_Spec):
    """One network tier, innermost first. ``size`` is GPUs per node for the first tier and
    sub-domains per domain above it; bandwidth is per GPU, per direction."""

    name: str
    size: R.GpuCount
    bandwidth_GBps: R.Bandwidth
    latency_us: R.Micros
    # Default achieved fraction of link bandwidth: nccl-tests reports ~360 GB/s bus bandwidth
    # for all-reduce on 450 GB/s NVLink4 (H100), i.e. ~0.8 (nccl-tests doc/PERFORMANCE.md).
    efficiency: Fraction = 0.8
    oversubscription: R.Oversubscription = 1.0
    # this tier's cost per GPU per hour (switches, NICs, optics amortized), added to the GPU's
    # price for cost_per_step_usd
    cost_per_gpu_hour_usd: R.Price = 0.0
    transport: TransportSpec | None = None
    # format of the data-parallel traffic crossing this tier (gradients' reduce-scatter /
    # all-reduce, weights' all-gather), quantized before sending where it is narrower than the
    # job's width (ZeRO++ qgZ / qwZ, arXiv 2306.10209); none: the job's own width
    comm_dtype: Literal[COMM_DTYPES] | None = None
    source: str | None = None


class SiteSpec(_Spec):
    """One site of a ``[[cluster.sites]]`` graph: a building or region with ``gpus`` GPUs of
    type ``gpu`` (a GPU preset name; default ``cluster.gpu``) on its own inner ``tiers``
    (innermost first; default ``cluster.tiers``)."""

    name: str = Field(min_length=1)
    gpus: R.GpuCount
    gpu: str | None = None
    tiers: list[TierSpec] | None = Field(default=None, min_length=1,
                                         max_length=layout.MAX_TIERS - 1)

    @field_validator("gpu")
    @classmethod
    def _gpu_id(cls, name: str | None) -> str | None:
        """Another name of a GPU preset ("NVIDIA H200") becomes its id; a name of none stays,
        for :func:`trainscape.spec.sites.check_site_gpus` to report with its path."""
        from .. import presets

        try:
            return name if name is None else presets.preset_id("gpu", name)
        except presets.UnknownPreset:
            return name


class LinkSpec(_Spec):
    """A link between two sites: per-GPU line rate (GB/s, per direction), one-way latency,
    achieved fraction, oversubscription and transport, as a tier's."""

    sites: list[str] = Field(min_length=2, max_length=2)
    bandwidth_GBps: R.Bandwidth
    latency_us: R.Micros
    efficiency: Fraction = 0.8
    oversubscription: R.Oversubscription = 1.0
    transport: TransportSpec | None = None
    name: str | None = None
    source: str | None = None

    @property
    def label(self) -> str:
        """``name`` or ``"a-b"``."""
        return self.name or f"{self.sites[0]}-{self.sites[1]}"


class ClusterSpec(_Spec):
    """The machine park: a GPU type, how many of them, and the network tiers -- or, with
    ``sites`` and ``links``, a graph of sites whose inner tiers are ``tiers`` (see
    :mod:`trainscape.spec.sites`)."""

    preset: str | None = None
    name: str | None = None
    gpu: GpuSpec
    gpus: R.GpuCount
    tiers: list[TierSpec] = Field(min_length=1, max_length=layout.MAX_TIERS)
    sites: list[SiteSpec] | None = Field(default=None, min_length=2, max_length=R.MAX_SITES)
    links: list[LinkSpec] | None = None
    host_ddr_gb: R.DdrGb | None = None
    host_to_device_GBps: R.BandwidthOrZero | None = None
    # host DRAM bandwidth per GPU's share (GB/s): the CPU optimizer step of job.offload_optimizer
    host_memory_GBps: R.BandwidthOrZero | None = None

    @model_validator(mode="after")
    def _check(self) -> ClusterSpec:
        if self.sites is not None or self.links is not None:
            from .sites import check_site_graph

            check_site_graph(self)
            return self
        if self.capacity < self.gpus:
            raise fail("tiers", f"the tier sizes hold only {self.capacity} GPUs, fewer than "
                       f"cluster.gpus = {self.gpus}", [t.size for t in self.tiers],
                       f"tier sizes whose product is >= {self.gpus}")
        return self

    @property
    def capacity(self) -> int:
        """GPUs the tiers can hold: the product of the tier sizes (with ``sites``: the sites
        times the product of the first site's inner tier sizes)."""
        out = 1
        tiers = self.tiers
        if self.sites:
            tiers = self.sites[0].tiers if self.sites[0].tiers is not None else self.tiers
            out = len(self.sites)
        for t in tiers:
            out *= t.size
        return out


# --------------------------------------------------------------------------------------------
# The design space
# --------------------------------------------------------------------------------------------


#: How a scenario's space becomes an enumerable design space. The design-space package
#: (:mod:`trainscape.space`) reads this schema, so the schema cannot import it back: the
#: package root (``trainscape/__init__.py``) hands :func:`trainscape.space.design_space` in
#: with :func:`use_design_space_builder` when ``trainscape`` is imported.
_DESIGN_SPACE_BUILDER: list[Callable[[Any], Any]] = []


def use_design_space_builder(builder: Callable[[Any], Any]) -> None:
    """Install the function that builds a scenario's design space (see above)."""
    _DESIGN_SPACE_BUILDER[:] = [builder]


def _build_design_space(scenario):
    if not _DESIGN_SPACE_BUILDER:
        raise RuntimeError("no design-space builder installed: import trainscape first")
    return _DESIGN_SPACE_BUILDER[0](scenario)


IntAxis = Annotated[list[R.Degree], Field(min_length=1)]
BoolAxis = Annotated[list[bool], Field(min_length=1)]


class SpaceSpec(_Spec):
    """The design space: per config axis, the values to try. Axes left out keep the value of
    ``[config]`` (or its default). ``order = "all"`` means every placement of the dimensions.
    Enumeration and constraints live in :mod:`trainscape.space`."""

    tp: IntAxis | None = None
    cp: IntAxis | None = None
    pp: IntAxis | None = None
    dp: IntAxis | None = None
    ep: IntAxis | None = None
    mbs: IntAxis | None = None
    vpp: IntAxis | None = None
    schedule: Annotated[list[Schedule], Field(min_length=1)] | None = None
    recompute: Annotated[list[Recompute], Field(min_length=1)] | None = None
    zero: Annotated[list[Zero], Field(min_length=1)] | None = None
    sp: BoolAxis | None = None
    order: Literal["all"] | Annotated[list[str], Field(min_length=1)] | None = None
    tp_overlap: BoolAxis | None = None
    dp_overlap: BoolAxis | None = None
    #: hardware axes (co-design): scenario field path -> values, e.g. ``{"cluster.gpus":
    #: [8192, 16384], "cluster.tiers[0].size": [8, 72]}``; written in ``[space]`` as
    #: ``gpu = [...]``, ``gpus = [...]`` or any numeric field by the path ``--set`` takes
    #: (:mod:`trainscape.explore.hardware`)
    hardware: dict[str, Annotated[list[Any], Field(min_length=1)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _hardware_axes(cls, data: Any) -> Any:
        """Move ``gpu``, ``gpus`` and dotted scenario paths into ``hardware``."""
        if not isinstance(data, dict):
            return data
        hw = dict(data.get("hardware") or {})
        out = {}
        for key, value in data.items():
            if key in ("gpu", "gpus"):
                hw[f"cluster.{key}"] = value
            elif isinstance(key, str) and key.split(".")[0].split("[")[0] in (
                    "cluster", "job", "model"):
                hw[key] = value
            else:
                out[key] = value
        for key, value in hw.items():
            if isinstance(value, (str, bytes)) or not isinstance(value, list) or not value:
                raise fail(f'"{key}"', "a hardware axis needs a non-empty list of values",
                           value, "a list, e.g. [8, 72]")
        if hw:
            out["hardware"] = hw
        return out

    @field_validator("order", mode="before")
    @classmethod
    def _orders(cls, value: Any) -> Any:
        if isinstance(value, list):
            for i, item in enumerate(value):
                try:
                    parse_order(item)
                except ValueError as exc:
                    raise fail(f"[{i}]", f"not a placement order: {exc}", item,
                               _ORDER_ALLOWED + ", or \"all\"") from None
        elif value is not None and value != "all":
            raise fail("", "expected \"all\" or a list of orders", value,
                       "\"all\", or a list like [\"tp-cp-ep-dp-pp\"]")
        return value

    #: the scenario this space belongs to (set when the scenario is validated)
    _scenario: Any = PrivateAttr(default=None)
    _design: Any = PrivateAttr(default=None)

    def axes(self) -> dict[str, Any]:
        """The axes given, by name, in ``layout.CONFIG_FIELDS`` order."""
        return {k: getattr(self, k) for k in layout.CONFIG_FIELDS
                if getattr(self, k) is not None}

    def design(self):
        """The enumerable design space (:class:`trainscape.space.design.DesignSpace`) of this
        ``[space]`` within its scenario: constraints applied, size known before any work."""
        if self._design is None:
            if self._scenario is None:
                raise ScenarioError.at("space", "is not attached to a scenario", None,
                                       "a [space] loaded with trainscape.load", show_got=False)
            self._design = _build_design_space(self._scenario)
        return self._design

    @property
    def size(self) -> int:
        """Valid configurations in the space."""
        return self.design().size

    def sample(self, n: int, seed: int = 0):
        """``n`` valid configurations drawn uniformly (reproducible for ``seed``), as int32
        columns of shape ``(layout.N_CFG, n)``."""
        return self.design().sample(n, seed=seed)

    def enumerate(self, start: int = 0, stop: int | None = None):
        """Valid configurations ``start .. stop`` in enumeration order, as int32 columns."""
        return self.design().enumerate(start, stop)


# --------------------------------------------------------------------------------------------
# The scenario
# --------------------------------------------------------------------------------------------


def _preset(kind: str, name: Any, path: str) -> dict:
    """Preset ``name`` of ``kind`` (an id, or another name of one: compared as
    :func:`trainscape.presets.normalized_name`), with ``preset`` set to its id."""
    from .. import presets

    try:
        table = presets.get(kind, name)
    except presets.UnknownPreset:
        raise ScenarioError.at(path, f"unknown {kind} preset", name,
                               ", ".join(presets.names(kind))) from None
    for key in PRESET_META_KEYS:
        table.pop(key, None)
    table["preset"] = presets.preset_id(kind, name)
    return table


def _gpu_preset(name: Any, path: str, dtype: Any, stack: Any, calibrated: Any) -> dict:
    """GPU preset ``name`` resolved for the job (:func:`trainscape.presets.resolve_gpu`, the
    one path for GPU constants), without its ``sources``, with ``preset`` set to its id (as
    :func:`_preset` does)."""
    from .. import presets

    try:
        table = presets.resolve_gpu(name, dtype=dtype, stack=stack,
                                    calibrated=calibrated is not False)
    except presets.UnknownPreset:
        raise ScenarioError.at(path, "unknown gpu preset", name,
                               presets.gpu_names_allowed()) from None
    for key in PRESET_META_KEYS:
        table.pop(key, None)
    table["preset"] = presets.preset_id("gpu", name)
    return table


def expand_presets(raw: dict, resolve_gpu: bool = True, calibrated: bool = True) -> dict:
    """Merge named presets under the fields given next to them (a copy; idempotent).

    ``[model] preset``, ``[cluster] preset`` (gpu + tiers + ...), and ``[cluster] gpu`` as a
    name or as a table with ``preset``. Fields written in the scenario override the preset's;
    a list (``tiers``) replaces the preset's list as a whole.

    A GPU preset resolves through :func:`trainscape.presets.resolve_gpu` for the job's
    ``dtype`` and ``stack`` (fitted constants, per-dtype fits, the stack profile), unless the
    GPU table says ``calibrated = false`` (stock constants and the stack profile only). With
    ``resolve_gpu`` false the GPU stays a ``{"preset": name, ...}`` table (resolved later, by
    validation, once ``--set`` overrides of the job are in). ``calibrated`` is the default of
    the GPU table's ``calibrated`` (DLRM scenarios pass False: the fits are LLM-training fits).
    """
    out = copy.deepcopy(raw)
    model = out.get("model")
    if isinstance(model, dict) and model.get("preset") is not None:
        table = _preset("model", model["preset"], "model.preset")
        out["model"] = {**table, **model, "preset": table["preset"]}
    job = out.get("job")
    dtype = job.get("dtype", "bf16") if isinstance(job, dict) else None
    stack = job.get("stack") if isinstance(job, dict) else None
    cluster = out.get("cluster")
    if isinstance(cluster, dict):
        if cluster.get("preset") is not None:
            table = _preset("cluster", cluster["preset"], "cluster.preset")
            cluster = {**table, **cluster, "preset": table["preset"]}
        gpu = cluster.get("gpu")
        if isinstance(gpu, str) and (resolve_gpu or "gpu" not in raw["cluster"]):
            gpu = {"preset": gpu}  # (a name the user wrote stays one until it resolves)
        if resolve_gpu and isinstance(gpu, dict) and gpu.get("preset") is not None:
            path = "cluster.gpu.preset" if isinstance(cluster.get("gpu"), dict) else "cluster.gpu"
            fitted = gpu.get("calibrated", calibrated)
            table = _gpu_preset(gpu["preset"], path, dtype, stack, fitted)
            gpu = {**table, **gpu, "preset": table["preset"]}
            if isinstance(fitted, bool):  # (a non-bool is reported by validation)
                gpu["calibrated"] = fitted
        if gpu is not None:
            cluster["gpu"] = gpu
        out["cluster"] = cluster
    return out


def _unresolved_gpu(raw: dict) -> dict | None:
    """The GPU table of ``raw`` as written (a preset name as ``{"preset": name}``), when it
    names a preset; None otherwise."""
    cluster = expand_presets(raw, resolve_gpu=False).get("cluster")
    gpu = cluster.get("gpu") if isinstance(cluster, dict) else None
    if isinstance(gpu, str):
        gpu = {"preset": gpu}
    if isinstance(gpu, dict) and gpu.get("preset") is not None:
        return copy.deepcopy(gpu)
    return None


class Scenario(_Spec):
    """A whole scenario file. ``config`` is the one point ``evaluate`` costs; ``space`` the
    design space searches explore."""

    name: str = ""
    description: str | None = None
    model: ModelSpec
    job: JobSpec
    cluster: ClusterSpec
    config: ConfigSpec | None = None
    space: SpaceSpec | None = None

    #: the ``[cluster.gpu]`` table as given (preset name and the fields the user set), before
    #: its constants were resolved for the job (see :meth:`raw_dump`)
    _gpu_input: Any = PrivateAttr(default=None)
    #: the ``job`` fields ``job.pipeline_layout`` set (dropped by :meth:`raw_dump`, so that a
    #: changed ``[config]`` reads the layout afresh)
    _layout_fields: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _presets(cls, data: Any, handler: Any) -> Any:
        if not isinstance(data, dict):
            return handler(data)
        try:
            gpu_input = _unresolved_gpu(data)
            data = expand_presets(data)
        except ScenarioError as exc:
            raise exc.as_pydantic() from None
        out = handler(data)
        out._gpu_input = gpu_input
        return out

    def raw_dump(self) -> dict[str, Any]:
        """The scenario as a raw dict to validate again (after changes): ``model_dump``, but a
        GPU preset as the user gave it, so that it resolves afresh for the (maybe changed) job
        dtype and stack instead of keeping the constants resolved for this one."""
        data = self.model_dump(exclude_none=True)
        if self._gpu_input is not None:
            data["cluster"]["gpu"] = copy.deepcopy(self._gpu_input)
        for name in self._layout_fields:
            data["job"].pop(name, None)
        return data

    @model_validator(mode="after")
    def _cross_checks(self) -> Scenario:
        if self.space is not None:
            self.space._scenario = self
        if 2 * self.job.pipeline_edge_layers >= self.model.layers:
            raise fail("job.pipeline_edge_layers", "must leave transformer layers: "
                       "2 * pipeline_edge_layers < model.layers", self.job.pipeline_edge_layers,
                       f"< {self.model.layers / 2:g}")
        if self.job.recompute_layers > self.model.layers:
            raise fail("job.recompute_layers", "more checkpointed layers than the model has",
                       self.job.recompute_layers, f"0 to model.layers ({self.model.layers})")
        first, last = self.job.pipeline_first_stage_layers, self.job.pipeline_last_stage_layers
        if first + last > self.model.layers:
            field = "pipeline_last_stage_layers" if last else "pipeline_first_stage_layers"
            raise fail(f"job.{field}", "the first and last pipeline stages would hold more "
                       f"layers than the model has ({first} + {last})", getattr(self.job, field),
                       f"pipeline_first_stage_layers + pipeline_last_stage_layers <= "
                       f"model.layers ({self.model.layers})")
        if self.job.sync.fragments > self.model.layers:
            raise fail("job.sync.fragments", "more fragments than layers (a fragment is a group "
                       "of layers)", self.job.sync.fragments, f"1 to model.layers ({self.model.layers})")
        if self.job.offload_activations > 0:
            v = self.cluster.host_to_device_GBps
            if v is None or v <= 0:
                raise fail("cluster.host_to_device_GBps", "needed (> 0) with "
                           "job.offload_activations > 0", v, "a bandwidth in GB/s > 0")
        if self.job.offload_optimizer:
            for field_name in ("host_to_device_GBps", "host_memory_GBps"):
                v = getattr(self.cluster, field_name)
                if v is None or v <= 0:
                    raise fail(f"cluster.{field_name}", "needed (> 0) with "
                               "job.offload_optimizer = true", v, "a bandwidth in GB/s > 0")
        if self.cluster.gpu.peak_for(self.job.dtype) is None:
            raise fail("job.dtype", "the GPU has no peak rate for this dtype", self.job.dtype,
                       ", ".join(self.cluster.gpu.peak_tflops))
        if self.job.dtype == "fp8" and self.cluster.gpu.peak_for("bf16") is None:
            raise fail("cluster.gpu.peak_tflops", "FP8 training runs attention and the output "
                       "layer in BF16: the GPU needs a bf16 peak too",
                       dict(self.cluster.gpu.peak_tflops), "a table with bf16 and fp8")
        if self.cluster.sites is not None:
            from .sites import check_site_gpus

            check_site_gpus(self)
        if self.job.pipeline_layout is not None:
            self._apply_pipeline_layout()
        if self.config is not None:
            try:
                self.config = self.config.resolved(self.cluster.gpus)
            except ScenarioError as exc:
                raise exc.as_pydantic() from None
            from .checks import config_problem

            problem = config_problem(self, self.config)
            if problem is not None:
                raise fail(*problem)
        return self

    def _apply_pipeline_layout(self) -> None:
        """``job.pipeline_layout`` read on ``[config]``'s pipeline into the stated first and
        last stage layers (which it sets); every reason it cannot be names its field."""
        from .pipeline_layout import PipelineLayoutError, split

        text = self.job.pipeline_layout
        if self.config is None:
            raise fail("job.pipeline_layout", "a layout is laid out for one pipeline degree: "
                       "it needs a [config] with pp (and vpp)", text, "a [config] table")
        try:
            lay = split(text, self.config.pp, self.model.layers, self.model.mtp_layers)
        except PipelineLayoutError as exc:
            raise fail("job.pipeline_layout", str(exc), text,
                       "Megatron-Core's layout syntax: E, t, m, L; x*n, (...)*n; | between "
                       "stages") from None
        if self.config.vpp != lay.vpp:
            raise fail("config.vpp", f"job.pipeline_layout has {lay.pp * lay.vpp} stages, "
                       f"{lay.vpp} per device on pp = {lay.pp}", self.config.vpp, str(lay.vpp))
        if self.job.pipeline_edge_layers:
            raise fail("job.pipeline_edge_layers", "job.pipeline_layout states the split",
                       self.job.pipeline_edge_layers, "0 (left out) with a layout")
        if lay.pp == 1:
            return
        derived = []
        for name, value in (("pipeline_first_stage_layers", lay.first),
                            ("pipeline_last_stage_layers", lay.last)):
            given = getattr(self.job, name)
            if given and given != value:
                raise fail(f"job.{name}", f"differs from job.pipeline_layout, which puts "
                           f"{value} transformer layers there", given,
                           f"{value}, or left out")
            if not given:
                derived.append(name)
            setattr(self.job, name, value)
        self._layout_fields = tuple(derived)

    def design_space(self):
        """The enumerable design space: ``[space]``, or the default axes when there is none
        (:func:`trainscape.space.design_space`)."""
        if self.space is not None:
            return self.space.design()
        return _build_design_space(self)

    def with_config(self, config: ConfigSpec | dict | None) -> Scenario:
        """A copy whose ``[config]`` is ``config`` (validated and resolved against this
        scenario); ``ScenarioError`` if it is invalid here."""
        data = self.raw_dump()
        if isinstance(config, ConfigSpec):
            config = config.model_dump(exclude_none=True)
        data["config"] = dict(config or {})
        return validate(data)


def validate(raw: Mapping) -> Scenario:
    """A validated :class:`Scenario` from a raw dict; ``ScenarioError`` on any problem."""
    if not isinstance(raw, Mapping):
        raise ScenarioError.at("<scenario>", "expected a table", raw, "a table")
    try:
        return Scenario.model_validate(dict(raw))
    except ValidationError as exc:
        raise from_validation_error(exc, Scenario) from None
