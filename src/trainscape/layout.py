"""The packed layout: field order of the parameter blocks, config columns and result columns.

This module is the single declaration of the layout. ``csrc/trainscape_layout.h`` is generated
from it by ``scripts/gen_layout.py`` and ``tests/test_layout.py`` proves the committed header and
this module agree, so the C kernel, the numba kernel and the reference all index the same way.

Blocks are flat ``float64`` vectors (system, model, job). A batch of configurations is an
``int32`` array of shape ``(N_CFG, n)`` -- one contiguous column per axis -- and results are a
``float64`` array of shape ``(N_OUT, n)``.
"""

from __future__ import annotations

# --------------------------------------------------------------------------------------------
# Enumerations shared by every implementation (values are the integers stored in the columns).
# --------------------------------------------------------------------------------------------

#: Pipeline schedules, in the order of their integer codes.
SCHEDULES = (
    "gpipe",
    "1f1b",
    "interleaved",
    "zb-h1",
    "zb-h2",
    "zb-v",
    "dualpipe",
    "dualpipe-v",
)
#: Activation recomputation modes (codes are positions: new modes are appended). "dots": keep
#: only the linear layers' GEMM outputs and the layer input, recompute everything else (JAX
#: ``checkpoint_policies.dots_saveable``, MaxText ``remat_policy``). The named-dot
#: subsets keep fewer GEMM outputs (``model.llm.named_dots_policy``): "dots_no_mlp_in" (MaxText
#: ``save_dot_except_mlpwi``), "dots_attn" (``save_dot_except_mlp``, PaxML
#: ``SAVE_QKV_OUT_PROJ``), "qkv_proj" (``save_qkv_proj``). "op_selective": torchtitan's per-op
#: selective activation checkpointing (every second matmul of a block and the element-wise ops
#: recomputed, the attention output saved: ``model.llm.named_dots_policy``).
RECOMPUTE = ("none", "selective", "full", "dots", "dots_no_mlp_in", "dots_attn", "qkv_proj",
             "op_selective")
#: The parallel dimensions a rank index is decomposed into. ``dp`` here is the part of data
#: parallelism *outside* expert parallelism (the expert-data-parallel degree ``dp / ep``); the
#: user-facing ``dp`` degree is ``ep * (dp / ep)``.
DIMS = ("tp", "cp", "ep", "dp", "pp")
#: Maximum number of network tiers a system block can hold.
MAX_TIERS = 6
#: Maximum number of sites of a ``[[cluster.sites]]`` graph (the best Hamiltonian cycle and path
#: over them are found exhaustively, :mod:`trainscape.model.sites`).
MAX_SITES = 8

#: Result status codes.
#: ``overflow``: a valid configuration whose cost left the float64 range (a non-finite or
#: non-positive step time, or any non-finite output); every output is zeroed, the step time set
#: to infinity, and it is infeasible -- never a NaN or Infinity reported as "ok".
STATUS = ("ok", "out_of_memory", "invalid_config", "bad_index", "overflow")

# --------------------------------------------------------------------------------------------
# Field lists. Each name becomes an index constant below (``SYS_GPUS`` ...) and, upper-cased,
# an enum member in the C header (``TS_SYS_GPUS`` ...).
# --------------------------------------------------------------------------------------------

SYSTEM_FIELDS = (
    "gpus",  # GPUs in the job
    "n_tiers",  # network tiers in use (1..MAX_TIERS)
    "peak_flops",  # dense peak FLOP/s of one GPU for the job's compute dtype
    "hbm_bytes",  # HBM capacity per GPU
    "hbm_bandwidth",  # HBM bandwidth per GPU, bytes/s
    "hbm_reserve_bytes",  # HBM kept back (CUDA context, allocator fragmentation)
    "gemm_efficiency_max",  # asymptotic GEMM efficiency for large GEMMs
    "gemm_half_flops",  # GEMM size (FLOPs) at which efficiency is half its maximum
    "attention_efficiency",  # fraction of peak reached by the fused attention kernel
    "memory_efficiency",  # fraction of HBM bandwidth reached by memory-bound kernels
    "layer_overhead_s",  # fixed time per layer per microbatch pass (kernel launches, syncs)
    # the transformer's linear layers (QKV, proj, fc1, fc2, experts): FP8 in an fp8 job
    # (Transformer Engine), on their own achieved-efficiency curve; equal to peak_flops,
    # gemm_efficiency_max, gemm_half_flops for a 16-bit job
    "linear_peak_flops",  # dense peak FLOP/s of the linear layers' dtype
    "linear_efficiency_max",  # asymptotic efficiency of the linear layers' GEMMs
    "linear_half_flops",  # linear GEMM size (FLOPs) at which efficiency is half its maximum
    "tp_overlap_exposed",  # fraction of TP traffic exposed even when overlapped (0..1)
    "tp_overlap_slowdown",  # fractional slowdown of GEMMs while overlapped TP comm runs
    "cp_overlap_slowdown",  # fractional slowdown of attention while the CP ring's P2P runs
    "attention_half_seq",  # K/V length per attention kernel at which it reaches half its max
    "usd_per_gpu_s",  # what one GPU-second costs: the GPU's price + each tier's per-GPU share
    "power_w",  # electrical power per GPU while training (0: not given)
    "host_link_bandwidth",  # GPU <-> host memory, bytes/s per GPU per direction (0: not given)
    "host_memory_bandwidth",  # host DRAM bandwidth per GPU's share, bytes/s (0: not given)
    "n_sites",  # sites of a [[cluster.sites]] graph (0: none; the outermost tier is uniform)
    "mfu_peak_flops",  # the peak MFU is quoted against: peak_flops at the board's rated power
    # (the datasheet figure; peak_flops is the clock a power limit leaves); 0: peak_flops
    "stream_memory_efficiency",  # fraction of HBM bandwidth a plain streaming kernel reaches
    # (the GPU's microbenchmark value, never fitted): the bytes counted op by op run at it
    "attention_head_dim_half",  # head dim at which fused attention reaches half its matmul
    # rate, the softmax exponentials' share (0: no dependence on the head dim)
    "step_overhead_s",  # fixed time per training step outside the GPU's queue of work: the
    # training loop's host-side synchronisations and data loading (model.llm.step_overhead)
    "host_op_s",  # host time to issue one eager framework op (Python, dispatcher, launch): a
    # kernel that runs shorter leaves the GPU waiting for the next (model.llm.eager_op_time)
)
#: Fields of one network tier; tier ``i`` field ``f`` lives at ``SYS_TIER_BASE + i*N_TIER + f``.
TIER_FIELDS = (
    "size",  # fan-out: GPUs per node for tier 0, sub-domains per domain above it
    "bandwidth",  # per-GPU unidirectional bandwidth, bytes/s
    "latency",  # one message across this tier, seconds
    "efficiency",  # achieved fraction of the bandwidth
    "oversubscription",  # traffic leaving a domain at this tier shares 1/oversubscription
    "window_bytes",  # transport: bytes in flight per GPU (channels x window); 0 = no limit
    "handshake_rtts",  # transport: round trips before each message's data (TCP 1, RDMA 0)
    # comm_dtype: bytes per element of the data-parallel traffic crossing this tier, scales
    # included (bf16 2, fp8 / int8 1 + 4/128); 0 = none (the job's own width)
    "comm_dtype_bytes",
)

MODEL_FIELDS = (
    "layers",
    "hidden",
    "ffn_hidden",  # dense MLP hidden size
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "swiglu",  # 1: SwiGLU MLP (3 matrices), 0: GeLU MLP (2 matrices)
    "experts",  # routed experts per MoE layer; 0 for a dense model
    "top_k",  # experts each token is routed to
    "expert_ffn_hidden",
    "moe_every",  # every k-th layer is an MoE layer; 0 for a dense model
    "shared_experts",  # always-active experts of size expert_ffn_hidden per MoE layer
    "max_route_nodes",  # node-limited routing: nodes a token's experts span at most; 0: no limit
    "attention_window",  # sliding-window attention: keys a query sees at most; 0: full causal
    "full_attention_every",  # with a window, every k-th layer attends fully; 0: every layer windowed
    "mtp_layers",  # multi-token prediction depth: MTP blocks after the last layer (DeepSeek-V3 1)
    "first_dense_layers",  # leading dense layers before the MoE pattern (DeepSeek-V3 3); 0: none
)

JOB_FIELDS = (
    "seq_len",
    "global_batch",  # sequences per step
    "activation_bytes",  # bytes per stored activation element (2 for bf16)
    "param_bytes",  # bytes per weight as held for compute (2 for bf16)
    "grad_bytes",  # bytes per gradient element as accumulated
    "optimizer_bytes",  # optimizer state bytes per parameter (12 for mixed-precision Adam)
    "optimizer_traffic_bytes",  # HBM bytes moved per parameter by one optimizer step
    "comm_bytes",  # bytes per element of activation traffic (TP, CP, EP, PP)
    "grad_comm_bytes",  # bytes per element of gradient reduction traffic
    "flash_attention",  # 1: attention scores are never stored (FlashAttention)
    "dispatch_bytes",  # bytes per element of the MoE dispatch all-to-all (fp8: 1 + scales)
    "combine_bytes",  # bytes per element of the MoE combine all-to-all
    "pipeline_edge_layers",  # k: the first and the last pipeline stage each hold the share of
    # k more layers in the split and k transformer layers fewer (embedding / loss counted as
    # k layers each: Megatron-LM --account-for-embedding/loss-in-pipeline-split, k = 1)
    "dropout",  # 1: hidden and attention dropout on (1-byte masks stored), 0: off
    "linear_cast_bytes",  # HBM bytes per linear-layer input element to quantize it (0: bf16)
    "fp8_weight_cache_bytes",  # bytes per linear weight beyond its 16-bit count (FP8 copies)
    "linear_input_bytes",  # bytes per element of a linear layer's input saved for its wgrad
    # GEMM: 1 in an fp8 job (Transformer Engine saves the FP8 copy), else activation_bytes
    "logits_extra_bytes",  # bytes per logit held beside the activation-dtype logits by the
    # cross-entropy: 4 (Megatron's fp32 copy), activation_bytes (a fused kernel's gradient)
    "offload_optimizer",  # 1: optimizer states in host memory, the step on the CPU (ZeRO-Offload)
    "sync_strategy",  # cross-site data-parallel synchronisation: index into SYNC_STRATEGIES
    "sync_inner_steps",  # H: steps between DiLoCo's cross-site outer syncs (1 otherwise)
    "sync_outer_bytes",  # bytes per element of the cross-site (outer) traffic
    "sync_fragments",  # P: Streaming DiLoCo's fragments, each synced on its own (1: DiLoCo)
    "sync_overlap_steps",  # tau: inner steps a fragment's outer all-reduce runs beside
    "offload_activations",  # share (0..1) of each stage's layers whose saved activations go to
    # host memory in the forward and come back for the backward (Megatron-Core/TE CPU offload)
    "linear_param_comm_bytes",  # bytes per linear-layer weight element of the ZeRO / FSDP
    # weight all-gather: param_bytes, or the FP8 data (1 + scales) with job.fp8_param_gather
    "dp_bucket_min_params",  # data-parallel gradient bucket: at least this many parameters...
    "dp_bucket_params_per_rank",  # ...or this many per data-parallel rank (x dp x cp), the
    # larger (Megatron-Core: 4e7 and 1e6); both 0: no bucket limit
    "recompute_layernorm",  # 1: selective recompute also discards and re-runs the two norms'
    # outputs (Megatron-Core recompute_modules "layernorm")
    "recompute_moe_act",  # 1: ... and the experts' activation-function outputs ("moe_act")
    "recompute_mlp",  # 1: ... and checkpoints every dense layer's MLP block ("mlp")
    "recompute_moe",  # 1: ... and every MoE layer's whole MoE block, all-to-alls included
    # ("moe")
    "recompute_shared_experts",  # 1: ... and the MoE layers' shared experts
    # ("shared_experts")
    "zero3_shard_param_bytes",  # bytes per element of the ZeRO-3 parameter shard held beside
    # the optimizer states: param_bytes, or 0 where the shard is the optimizer's fp32 master
    # copy (PyTorch FSDP mixed precision)
    "eager_elementwise",  # 1: the norms, rotary embedding and SwiGLU run op by op, unfused
    # (PyTorch eager, torchtitan's modules without torch.compile); 0: fused kernels
    "tp_gather_bytes",  # bytes per element of a sequence-parallel TP all-gather (the linear
    # layers' inputs): the FP8 copy (1 + scales) under an FP8 recipe that gathers quantized; 0:
    # comm_bytes
    "tp_sequence_copy",  # 1: every sequence-parallel TP collective also copies its whole
    # buffer once (the chunk + cat of a gather or scatter along dim 1 of [batch, seq, hidden]
    # activations: PyTorch DTensor TP, torchtitan); 0: none (Megatron's [seq, batch, hidden])
    "fsdp_pp_unsharded",  # 1: under a pipeline, ZeRO-3 keeps a stage's weights and gradients
    # unsharded from the first microbatch to the last (one all-gather and one reduce-scatter a
    # step); 0: unit by unit, every microbatch
    "recompute_layers",  # N > 0: full recompute checkpoints only the first N transformer layers
    # of each model chunk, the rest keep their activations (Megatron-LM --recompute-method
    # block --recompute-num-layers N); 0: every layer
    "pipeline_first_stage_layers",  # F > 0: the first pipeline stage holds F transformer layers
    "pipeline_last_stage_layers",  # L > 0: the last one L, the other stages splitting the rest
    # (Megatron-Core num_layers_in_first/last_pipeline_stage); 0: split by rule
    "grouped_expert_gemm",  # 1: an MoE layer's routed experts run each projection as one
    # grouped GEMM kernel (CUTLASS grouped GEMM, torch._grouped_mm, XLA ragged dot); 0: one GEMM
    # per local expert (Transformer Engine GroupedLinear's multi-stream cuBLAS GEMMs)
    "dp_replicas",  # R >= 2: the data-parallel ranks form R replica groups, outermost, each
    # holding a whole ZeRO-sharded copy (hybrid sharding: PyTorch HSDP, MaxText dp x fsdp,
    # Megatron --num-distributed-optimizer-instances); 0 or 1: ZeRO shards over all of them
    "eager_expert_bias",  # 1: each MoE layer adds its routed experts' output bias in an eager
    # loop over the local experts (Megatron-Core TEGroupedMLP._apply_bias); 0: fused or no bias
)

#: job.sync.strategy codes (``JOB_SYNC_STRATEGY``); see model/collectives.py cross_site_time
SYNC_STRATEGIES = ("synchronous", "diloco", "delayed")

CONFIG_FIELDS = (
    "tp",
    "cp",
    "pp",
    "dp",  # total data-parallel degree, expert parallelism included
    "ep",
    "mbs",  # sequences per microbatch
    "vpp",  # virtual stages per device (interleaved schedule)
    "schedule",  # index into SCHEDULES
    "recompute",  # index into RECOMPUTE
    "zero",  # 0, 1, 2 or 3 (3 = FSDP)
    "sp",  # sequence parallelism on/off
    "order",  # rank of the permutation of DIMS, innermost first (see order_index)
    "tp_overlap",
    "dp_overlap",
)

OUTPUT_FIELDS = (
    "status",  # index into STATUS
    "feasible",  # 1.0 when the configuration is valid and fits in memory
    "step_time_s",
    "tokens_per_s",
    "mfu",
    "model_tflops_per_gpu",
    "hw_tflops_per_gpu",
    "memory_gib",
    "compute_s",
    "tp_comm_s",
    "cp_comm_s",
    "ep_comm_s",
    "pp_comm_s",
    "bubble_s",
    "dp_comm_s",
    "optimizer_s",
    "mem_weights_gib",
    "mem_grads_gib",
    "mem_optimizer_gib",
    "mem_activations_gib",
    "mem_logits_gib",
    "mem_reserve_gib",
    "microbatches",
    "cost_per_step_usd",  # step time x GPUs x price per GPU-second (0: no price given)
    "tokens_per_usd",  # tokens per step / cost per step (0: no price given)
    "tokens_per_joule",  # tokens per step / (step time x GPUs x power) (0: no power given)
    "offload_s",  # exposed host-link transfers of job.offload_activations (beyond the compute)
    "overhead_s",  # the step's fixed host-side cost (system step_overhead_s)
)

#: The breakdown columns; their sum is the step time.
BREAKDOWN_FIELDS = (
    "compute_s",
    "tp_comm_s",
    "cp_comm_s",
    "ep_comm_s",
    "pp_comm_s",
    "bubble_s",
    "dp_comm_s",
    "optimizer_s",
    "offload_s",
    "overhead_s",
)
#: The memory parts; their sum is ``memory_gib``.
MEMORY_FIELDS = (
    "mem_weights_gib",
    "mem_grads_gib",
    "mem_optimizer_gib",
    "mem_activations_gib",
    "mem_logits_gib",
    "mem_reserve_gib",
)

N_SYS_SCALARS = len(SYSTEM_FIELDS)
N_TIER = len(TIER_FIELDS)
SYS_TIER_BASE = N_SYS_SCALARS
#: Site links after the tiers: the link between the ``a``-th and ``b``-th site along the sites'
#: pipeline path is a tier record (``TIER_FIELDS``; ``size`` unused) at
#: ``SYS_SITE_LINK_BASE + (a * MAX_SITES + b) * N_TIER`` -- "tier" ``MAX_TIERS + a*MAX_SITES + b``
#: of the accessors in :mod:`trainscape.model.network`.
SYS_SITE_LINK_BASE = SYS_TIER_BASE + MAX_TIERS * N_TIER
N_SYS = SYS_SITE_LINK_BASE + MAX_SITES * MAX_SITES * N_TIER
N_MODEL = len(MODEL_FIELDS)
N_JOB = len(JOB_FIELDS)
N_CFG = len(CONFIG_FIELDS)
N_OUT = len(OUTPUT_FIELDS)

# Index constants, e.g. SYS_PEAK_FLOPS, TIER_BANDWIDTH, MDL_HIDDEN, JOB_SEQ_LEN, CFG_TP, OUT_MFU.
# Written out (not generated with globals()) so readers, linters and numba all see plain ints.
SYS_GPUS, SYS_N_TIERS, SYS_PEAK_FLOPS, SYS_HBM_BYTES, SYS_HBM_BANDWIDTH, SYS_HBM_RESERVE_BYTES, \
    SYS_GEMM_EFFICIENCY_MAX, SYS_GEMM_HALF_FLOPS, SYS_ATTENTION_EFFICIENCY, \
    SYS_MEMORY_EFFICIENCY, SYS_LAYER_OVERHEAD_S = range(11)
SYS_LINEAR_PEAK_FLOPS = SYSTEM_FIELDS.index("linear_peak_flops")
SYS_LINEAR_EFFICIENCY_MAX = SYSTEM_FIELDS.index("linear_efficiency_max")
SYS_LINEAR_HALF_FLOPS = SYSTEM_FIELDS.index("linear_half_flops")
SYS_TP_OVERLAP_EXPOSED = SYSTEM_FIELDS.index("tp_overlap_exposed")
SYS_TP_OVERLAP_SLOWDOWN = SYSTEM_FIELDS.index("tp_overlap_slowdown")
SYS_CP_OVERLAP_SLOWDOWN = SYSTEM_FIELDS.index("cp_overlap_slowdown")
SYS_ATTENTION_HALF_SEQ = SYSTEM_FIELDS.index("attention_half_seq")
SYS_USD_PER_GPU_S = SYSTEM_FIELDS.index("usd_per_gpu_s")
SYS_POWER_W = SYSTEM_FIELDS.index("power_w")
SYS_HOST_LINK_BANDWIDTH = SYSTEM_FIELDS.index("host_link_bandwidth")
SYS_HOST_MEMORY_BANDWIDTH = SYSTEM_FIELDS.index("host_memory_bandwidth")
SYS_N_SITES = SYSTEM_FIELDS.index("n_sites")
SYS_MFU_PEAK_FLOPS = SYSTEM_FIELDS.index("mfu_peak_flops")
SYS_HOST_OP_S = SYSTEM_FIELDS.index("host_op_s")
SYS_STREAM_MEMORY_EFFICIENCY = SYSTEM_FIELDS.index("stream_memory_efficiency")
SYS_ATTENTION_HEAD_DIM_HALF = SYSTEM_FIELDS.index("attention_head_dim_half")
SYS_STEP_OVERHEAD_S = SYSTEM_FIELDS.index("step_overhead_s")
TIER_SIZE, TIER_BANDWIDTH, TIER_LATENCY, TIER_EFFICIENCY, TIER_OVERSUBSCRIPTION, \
    TIER_WINDOW_BYTES, TIER_HANDSHAKE_RTTS, TIER_COMM_DTYPE_BYTES = range(N_TIER)
MDL_LAYERS, MDL_HIDDEN, MDL_FFN_HIDDEN, MDL_HEADS, MDL_KV_HEADS, MDL_HEAD_DIM, MDL_VOCAB, \
    MDL_SWIGLU, MDL_EXPERTS, MDL_TOP_K, MDL_EXPERT_FFN_HIDDEN, MDL_MOE_EVERY, \
    MDL_SHARED_EXPERTS, MDL_MAX_ROUTE_NODES, MDL_ATTENTION_WINDOW, \
    MDL_FULL_ATTENTION_EVERY, MDL_MTP_LAYERS, MDL_FIRST_DENSE_LAYERS = range(N_MODEL)
JOB_SEQ_LEN, JOB_GLOBAL_BATCH, JOB_ACTIVATION_BYTES, JOB_PARAM_BYTES, JOB_GRAD_BYTES, \
    JOB_OPTIMIZER_BYTES, JOB_OPTIMIZER_TRAFFIC_BYTES, JOB_COMM_BYTES, JOB_GRAD_COMM_BYTES, \
    JOB_FLASH_ATTENTION, JOB_DISPATCH_BYTES, JOB_COMBINE_BYTES, \
    JOB_PIPELINE_EDGE_LAYERS, JOB_DROPOUT, JOB_LINEAR_CAST_BYTES, \
    JOB_FP8_WEIGHT_CACHE_BYTES, JOB_LINEAR_INPUT_BYTES = range(17)
JOB_LOGITS_EXTRA_BYTES = JOB_FIELDS.index("logits_extra_bytes")
JOB_OFFLOAD_OPTIMIZER = JOB_FIELDS.index("offload_optimizer")
JOB_SYNC_STRATEGY = JOB_FIELDS.index("sync_strategy")
JOB_SYNC_INNER_STEPS = JOB_FIELDS.index("sync_inner_steps")
JOB_SYNC_OUTER_BYTES = JOB_FIELDS.index("sync_outer_bytes")
JOB_SYNC_FRAGMENTS = JOB_FIELDS.index("sync_fragments")
JOB_SYNC_OVERLAP_STEPS = JOB_FIELDS.index("sync_overlap_steps")
JOB_OFFLOAD_ACTIVATIONS = JOB_FIELDS.index("offload_activations")
JOB_LINEAR_PARAM_COMM_BYTES = JOB_FIELDS.index("linear_param_comm_bytes")
JOB_DP_BUCKET_MIN_PARAMS = JOB_FIELDS.index("dp_bucket_min_params")
JOB_DP_BUCKET_PARAMS_PER_RANK = JOB_FIELDS.index("dp_bucket_params_per_rank")
JOB_RECOMPUTE_LAYERNORM = JOB_FIELDS.index("recompute_layernorm")
JOB_RECOMPUTE_MOE_ACT = JOB_FIELDS.index("recompute_moe_act")
JOB_RECOMPUTE_MLP = JOB_FIELDS.index("recompute_mlp")
JOB_RECOMPUTE_MOE = JOB_FIELDS.index("recompute_moe")
JOB_RECOMPUTE_SHARED_EXPERTS = JOB_FIELDS.index("recompute_shared_experts")
JOB_ZERO3_SHARD_PARAM_BYTES = JOB_FIELDS.index("zero3_shard_param_bytes")
JOB_EAGER_ELEMENTWISE = JOB_FIELDS.index("eager_elementwise")
JOB_EAGER_EXPERT_BIAS = JOB_FIELDS.index("eager_expert_bias")
JOB_TP_GATHER_BYTES = JOB_FIELDS.index("tp_gather_bytes")
JOB_TP_SEQUENCE_COPY = JOB_FIELDS.index("tp_sequence_copy")
JOB_FSDP_PP_UNSHARDED = JOB_FIELDS.index("fsdp_pp_unsharded")
JOB_RECOMPUTE_LAYERS = JOB_FIELDS.index("recompute_layers")
JOB_PIPELINE_FIRST_STAGE_LAYERS = JOB_FIELDS.index("pipeline_first_stage_layers")
JOB_PIPELINE_LAST_STAGE_LAYERS = JOB_FIELDS.index("pipeline_last_stage_layers")
JOB_GROUPED_EXPERT_GEMM = JOB_FIELDS.index("grouped_expert_gemm")
JOB_DP_REPLICAS = JOB_FIELDS.index("dp_replicas")
SYNC_SYNCHRONOUS, SYNC_DILOCO, SYNC_DELAYED = range(len(SYNC_STRATEGIES))
CFG_TP, CFG_CP, CFG_PP, CFG_DP, CFG_EP, CFG_MBS, CFG_VPP, CFG_SCHEDULE, CFG_RECOMPUTE, \
    CFG_ZERO, CFG_SP, CFG_ORDER, CFG_TP_OVERLAP, CFG_DP_OVERLAP = range(N_CFG)
OUT_STATUS, OUT_FEASIBLE, OUT_STEP_TIME_S, OUT_TOKENS_PER_S, OUT_MFU, \
    OUT_MODEL_TFLOPS_PER_GPU, OUT_HW_TFLOPS_PER_GPU, OUT_MEMORY_GIB, OUT_COMPUTE_S, \
    OUT_TP_COMM_S, OUT_CP_COMM_S, OUT_EP_COMM_S, OUT_PP_COMM_S, OUT_BUBBLE_S, OUT_DP_COMM_S, \
    OUT_OPTIMIZER_S, OUT_MEM_WEIGHTS_GIB, OUT_MEM_GRADS_GIB, OUT_MEM_OPTIMIZER_GIB, \
    OUT_MEM_ACTIVATIONS_GIB, OUT_MEM_LOGITS_GIB, OUT_MEM_RESERVE_GIB, \
    OUT_MICROBATCHES, OUT_COST_PER_STEP_USD, OUT_TOKENS_PER_USD, \
    OUT_TOKENS_PER_JOULE, OUT_OFFLOAD_S, OUT_OVERHEAD_S = range(N_OUT)

SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZB_H1, SCHED_ZB_H2, SCHED_ZB_V, \
    SCHED_DUALPIPE, SCHED_DUALPIPE_V = range(len(SCHEDULES))
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL, RECOMPUTE_DOTS, RECOMPUTE_DOTS_NO_MLP_IN, \
    RECOMPUTE_DOTS_ATTN, RECOMPUTE_QKV_PROJ, RECOMPUTE_OP_SELECTIVE = range(len(RECOMPUTE))
DIM_TP, DIM_CP, DIM_EP, DIM_DP, DIM_PP = range(len(DIMS))
N_DIMS = len(DIMS)
N_SCHEDULES = len(SCHEDULES)
N_ORDERS = 120  # 5!
STATUS_OK, STATUS_OUT_OF_MEMORY, STATUS_INVALID_CONFIG, STATUS_BAD_INDEX, STATUS_OVERFLOW = \
    range(len(STATUS))

#: (python name, field tuple, C prefix) for every enumerated list, used by the header generator
#: and the agreement test.
GROUPS = (
    ("SYSTEM_FIELDS", SYSTEM_FIELDS, "TS_SYS_"),
    ("TIER_FIELDS", TIER_FIELDS, "TS_TIER_"),
    ("MODEL_FIELDS", MODEL_FIELDS, "TS_MDL_"),
    ("JOB_FIELDS", JOB_FIELDS, "TS_JOB_"),
    ("CONFIG_FIELDS", CONFIG_FIELDS, "TS_CFG_"),
    ("OUTPUT_FIELDS", OUTPUT_FIELDS, "TS_OUT_"),
    ("SCHEDULES", SCHEDULES, "TS_SCHED_"),
    ("RECOMPUTE", RECOMPUTE, "TS_RECOMPUTE_"),
    ("DIMS", DIMS, "TS_DIM_"),
    ("STATUS", STATUS, "TS_STATUS_"),
    ("SYNC_STRATEGIES", SYNC_STRATEGIES, "TS_SYNC_"),
)


def c_name(prefix: str, field: str) -> str:
    """The C enum member for a field: ``("TS_SCHED_", "zb-h1") -> "TS_SCHED_ZB_H1"``."""
    return prefix + field.upper().replace("-", "_")


# --------------------------------------------------------------------------------------------
# Placement orders: a permutation of DIMS (innermost first) stored as its lexicographic rank.
# --------------------------------------------------------------------------------------------


def order_index(perm: tuple[int, ...]) -> int:
    """Lexicographic rank (Lehmer code) of a permutation of ``range(N_DIMS)``."""
    rank = 0
    remaining = sorted(perm)
    for i, d in enumerate(perm):
        pos = remaining.index(d)
        rank = rank * (N_DIMS - i) + pos
        remaining.pop(pos)
    return rank


def order_from_names(names: list[str] | tuple[str, ...]) -> int:
    """Order index from dimension names innermost first, e.g. ``["tp","cp","ep","dp","pp"]``."""
    return order_index(tuple(DIMS.index(n) for n in names))


# --------------------------------------------------------------------------------------------
# Layout hash: a fingerprint of everything above that a packed block's reader depends on.
# --------------------------------------------------------------------------------------------

#: Constants the hash covers besides the field lists.
HASHED_CONSTANTS = ("MAX_TIERS", "MAX_SITES", "N_SYS_SCALARS", "N_TIER", "SYS_TIER_BASE",
                    "SYS_SITE_LINK_BASE", "N_SYS", "N_MODEL",
                    "N_JOB", "N_CFG", "N_OUT", "N_DIMS", "N_ORDERS")


def layout_text() -> str:
    """The canonical text hashed by :func:`layout_hash`: every enumerated list in ``GROUPS``
    order as ``PREFIX=name,name,...;`` then ``NAME=value;`` for ``HASHED_CONSTANTS``."""
    parts = [f"{prefix}={','.join(fields)};" for _, fields, prefix in GROUPS]
    parts += [f"{name}={globals()[name]};" for name in HASHED_CONSTANTS]
    return "".join(parts)


def layout_hash() -> int:
    """32-bit FNV-1a of :func:`layout_text` (Fowler-Noll-Vo, offset basis 2166136261, prime
    16777619). Written into pack files and ``TS_LAYOUT_HASH``: a reader built from another
    layout refuses the file instead of reading the wrong fields."""
    h = 2166136261
    for byte in layout_text().encode("ascii"):
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h
