"""The LLM training step: FLOPs, per-GPU times, communication, memory.

Every function is a small scalar formula citing where it comes from. Shapes follow Megatron-LM:
``b`` sequences per microbatch, ``s`` tokens per sequence, ``h`` hidden size, ``a`` query heads,
``d`` head dimension, ``t`` tensor-parallel degree. Plain scalar code: the numba backend compiles
these very functions and the C kernel (``csrc/llm.c``) ports them one by one.

Conventions worth knowing:
- *Model FLOPs* (for MFU and model TFLOP/s) count attention scores over the full ``s x s`` square,
  as Narayanan et al. (SC'21, eq. 3) and PaLM (Chowdhery et al. 2022, App. B) do, and no
  recomputation. *Hardware FLOPs* count what runs: causal attention skips the masked half (as
  FlashAttention's causal kernels do) and recomputation is added.
- Backward = input gradient ``B`` + weight gradient ``W``, each as costly as the forward GEMMs
  (Qi et al., arXiv 2401.10241 §2). Attention's core has no weights; unfused, its backward is 2x
  forward, FlashAttention's is 2.5x (it recomputes the scores, :func:`attention_backward_factor`).
- Precision as Transformer Engine runs FP8: only the linear layers (QKV, proj, fc1, fc2,
  experts) run at ``linear_peak_flops`` on their own efficiency curve, plus the cost of casting
  their inputs; attention, the router, the output layer and memory-bound kernels stay 16-bit
  (``peak_flops``). For a 16-bit job the linear fields equal the 16-bit ones. The linear
  layers' inputs are saved for backward as their FP8 copies (``linear_input_bytes``,
  :func:`linear_input_saved_bytes`); every other stored activation stays 16-bit, and the
  memory-bound kernels' time is costed from the 16-bit sizes.
"""

from __future__ import annotations

import math

from ..layout import (
    CFG_CP,
    CFG_DP,
    CFG_DP_OVERLAP,
    CFG_EP,
    CFG_MBS,
    CFG_ORDER,
    CFG_PP,
    CFG_RECOMPUTE,
    CFG_SCHEDULE,
    CFG_SP,
    CFG_TP,
    CFG_TP_OVERLAP,
    CFG_VPP,
    CFG_ZERO,
    JOB_ACTIVATION_BYTES,
    JOB_COMBINE_BYTES,
    JOB_COMM_BYTES,
    JOB_DISPATCH_BYTES,
    JOB_DP_BUCKET_MIN_PARAMS,
    JOB_DP_BUCKET_PARAMS_PER_RANK,
    JOB_DROPOUT,
    JOB_EAGER_ELEMENTWISE,
    JOB_EAGER_EXPERT_BIAS,
    JOB_FLASH_ATTENTION,
    JOB_PIPELINE_EDGE_LAYERS,
    JOB_PIPELINE_FIRST_STAGE_LAYERS,
    JOB_PIPELINE_LAST_STAGE_LAYERS,
    JOB_GLOBAL_BATCH,
    JOB_GRAD_BYTES,
    JOB_GRAD_COMM_BYTES,
    JOB_LINEAR_PARAM_COMM_BYTES,
    JOB_OPTIMIZER_BYTES,
    JOB_OPTIMIZER_TRAFFIC_BYTES,
    JOB_PARAM_BYTES,
    JOB_SEQ_LEN,
    JOB_SYNC_FRAGMENTS,
    JOB_SYNC_INNER_STEPS,
    JOB_SYNC_OUTER_BYTES,
    JOB_SYNC_OVERLAP_STEPS,
    JOB_SYNC_STRATEGY,
    MDL_EXPERT_FFN_HIDDEN,
    MDL_EXPERTS,
    MDL_FFN_HIDDEN,
    MDL_HEAD_DIM,
    MDL_HEADS,
    MDL_HIDDEN,
    MDL_KV_HEADS,
    MDL_LAYERS,
    MDL_MAX_ROUTE_NODES,
    MDL_ATTENTION_WINDOW,
    MDL_FULL_ATTENTION_EVERY,
    MDL_FIRST_DENSE_LAYERS,
    MDL_MTP_LAYERS,
    MDL_MOE_EVERY,
    MDL_SHARED_EXPERTS,
    MDL_SWIGLU,
    MDL_TOP_K,
    MDL_VOCAB,
    N_ORDERS,
    N_OUT,
    OUT_BUBBLE_S,
    OUT_COMPUTE_S,
    OUT_CP_COMM_S,
    OUT_DP_COMM_S,
    OUT_EP_COMM_S,
    OUT_FEASIBLE,
    OUT_HW_TFLOPS_PER_GPU,
    OUT_MEM_ACTIVATIONS_GIB,
    OUT_MEM_GRADS_GIB,
    OUT_MEM_LOGITS_GIB,
    OUT_MEM_OPTIMIZER_GIB,
    OUT_MEM_RESERVE_GIB,
    OUT_MEM_WEIGHTS_GIB,
    OUT_MEMORY_GIB,
    OUT_MFU,
    OUT_MICROBATCHES,
    OUT_COST_PER_STEP_USD,
    OUT_TOKENS_PER_USD,
    OUT_TOKENS_PER_JOULE,
    OUT_OFFLOAD_S,
    OUT_OVERHEAD_S,
    OUT_MODEL_TFLOPS_PER_GPU,
    OUT_OPTIMIZER_S,
    OUT_PP_COMM_S,
    OUT_STATUS,
    OUT_STEP_TIME_S,
    OUT_TOKENS_PER_S,
    OUT_TP_COMM_S,
    RECOMPUTE_DOTS,
    RECOMPUTE_DOTS_ATTN,
    RECOMPUTE_DOTS_NO_MLP_IN,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_OP_SELECTIVE,
    RECOMPUTE_QKV_PROJ,
    RECOMPUTE_SELECTIVE,
    SCHED_DUALPIPE,
    SCHED_DUALPIPE_V,
    N_SCHEDULES,
    SYNC_DELAYED,
    SYNC_DILOCO,
    SYNC_SYNCHRONOUS,
    SYS_ATTENTION_EFFICIENCY,
    SYS_GEMM_EFFICIENCY_MAX,
    SYS_GEMM_HALF_FLOPS,
    STATUS_BAD_INDEX,
    STATUS_INVALID_CONFIG,
    STATUS_OK,
    STATUS_OUT_OF_MEMORY,
    STATUS_OVERFLOW,
    SYS_GPUS,
    SYS_HBM_BANDWIDTH,
    SYS_HBM_BYTES,
    SYS_HBM_RESERVE_BYTES,
    SYS_LAYER_OVERHEAD_S,
    SYS_MEMORY_EFFICIENCY,
    SYS_PEAK_FLOPS,
    SYS_LINEAR_PEAK_FLOPS,
    SYS_LINEAR_EFFICIENCY_MAX,
    SYS_LINEAR_HALF_FLOPS,
    SYS_TP_OVERLAP_EXPOSED,
    SYS_TP_OVERLAP_SLOWDOWN,
    SYS_CP_OVERLAP_SLOWDOWN,
    SYS_ATTENTION_HALF_SEQ,
    SYS_ATTENTION_HEAD_DIM_HALF,
    SYS_POWER_W,
    SYS_MFU_PEAK_FLOPS,
    SYS_STEP_OVERHEAD_S,
    SYS_STREAM_MEMORY_EFFICIENCY,
    SYS_HOST_OP_S,
    SYS_HOST_LINK_BANDWIDTH,
    SYS_HOST_MEMORY_BANDWIDTH,
    SYS_USD_PER_GPU_S,
    JOB_LINEAR_CAST_BYTES,
    JOB_FP8_WEIGHT_CACHE_BYTES,
    JOB_LINEAR_INPUT_BYTES,
    JOB_LOGITS_EXTRA_BYTES,
    JOB_OFFLOAD_OPTIMIZER,
    JOB_OFFLOAD_ACTIVATIONS,
    JOB_RECOMPUTE_LAYERNORM,
    JOB_RECOMPUTE_MOE_ACT,
    JOB_RECOMPUTE_MLP,
    JOB_RECOMPUTE_MOE,
    JOB_RECOMPUTE_SHARED_EXPERTS,
    JOB_ZERO3_SHARD_PARAM_BYTES,
    JOB_TP_GATHER_BYTES,
    JOB_TP_SEQUENCE_COPY,
    JOB_GROUPED_EXPERT_GEMM,
    JOB_DP_REPLICAS,
    JOB_FSDP_PP_UNSHARDED,
    JOB_RECOMPUTE_LAYERS,
)
from .collectives import (
    all_gather_time,
    all_reduce_time,
    compressed_all_gather_time,
    compressed_all_reduce_time,
    cross_site_time,
    p2p_time,
    pipeline_boundary_transfers,
    routed_all_to_all_time,
    site_members,
    within_site_time,
)
from .network import placement_strides, tier_capacity
from .pipeline import (
    bubble_time,
    explicit_stage_layers_error,
    inflight_activations_rank,
    loss_on_first_device,
    pipeline_comm_time,
    pipeline_hide_window,
    pipeline_stage_layers,
    parameter_copies,
    schedule_chunks,
    schedule_layer_divisor,
    schedule_valid,
)

GIB = 1073741824.0

# =============================================================================================
# FLOPs of one layer for one microbatch, before any parallel split
# =============================================================================================


def attention_projection_flops(b, s, h, heads, kv_heads, head_dim):
    """Q, K, V and output projections with grouped-query attention (Ainslie et al. 2023):
    ``2bs h (a d + 2 a_kv d) + 2bs (a d) h``. With ``a_kv = a`` and ``a d = h`` this is Megatron's
    ``8bsh^2`` (Narayanan et al. SC'21 §5.1)."""
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    return 2.0 * b * s * h * (q_dim + 2.0 * kv_dim) + 2.0 * b * s * q_dim * h


def attention_core_flops(b, s, heads, head_dim):
    """Scores ``QK^T`` and ``softmax(QK^T) V`` over the full ``s x s`` square:
    ``4 b s^2 a d`` (Megatron's ``4bs^2h``, Narayanan et al. SC'21 §5.1)."""
    return 4.0 * b * s * s * heads * head_dim


def windowed_layer_count(layers, window, full_every):
    """Layers whose attention is a sliding window of ``window`` keys: all of them, or all but
    every ``full_every``-th, which attends to the whole causal prefix. Mistral 7B windows every
    layer (Jiang et al. 2023, arXiv 2310.06825 §2); GPT-OSS alternates 128-token windows with
    full attention (OpenAI gpt-oss model card, 2025; Megatron-Core ``window_attn_skip_freq``
    = 2 in Megatron-Bridge's ``GPTOSSProvider``); Gemma 3 keeps one global layer in six
    (Gemma Team 2025, arXiv 2503.19786 §2)."""
    if window <= 0.0:
        return 0.0
    if full_every <= 0.0:
        return layers
    return layers - math.floor(layers / full_every)


def window_pair_share(seq, window):
    """Share of a causal attention's (query, key) pairs that a sliding window of ``window``
    keys keeps: the band ``i - window < j <= i`` of the lower triangle, ``w s - w^2 / 2`` of
    its ``s^2 / 2``, i.e. ``2x - x^2`` with ``x = window / seq``; 1 when the window spans the
    sequence. FlashAttention's local (sliding-window) kernels skip the K/V blocks outside the
    band, as its causal ones skip those above the diagonal (Dao-AILab/flash-attention
    ``window_size``, v2.3)."""
    if window <= 0.0 or window >= seq:
        return 1.0
    x = window / seq
    return 2.0 * x - x * x


def mlp_flops(b, s, h, ffn, swiglu):
    """Dense MLP: two ``h x ffn`` matrices for GeLU, three for SwiGLU (Shazeer 2020)."""
    matrices = 3.0 if swiglu else 2.0
    return 2.0 * b * s * h * ffn * matrices


def router_flops(b, s, h, experts):
    """MoE router: one ``h x E`` projection per token (Fedus et al. 2021, Switch Transformer)."""
    return 2.0 * b * s * h * experts


def moe_mlp_flops(b, s, h, expert_ffn, top_k, shared_experts, swiglu):
    """Routed + shared experts: every token runs ``top_k + shared`` expert MLPs (Shazeer et al.
    2017; DeepSeek-V3 tech report §2.1.2 for shared experts)."""
    return (top_k + shared_experts) * mlp_flops(b, s, h, expert_ffn, swiglu)


def expert_gemm_count(job, routed_local, shared):
    """GEMM kernels one MoE layer's experts launch in one pass (fc1 and fc2 each), the count
    :func:`linear_gemm_time` charges its per-GEMM cost for: with one GEMM per local expert
    (``job.grouped_expert_gemm`` 0: Transformer Engine's ``GroupedLinear``, whose experts
    "launch multiple local GEMM kernels in multiple streams", Megatron-LM README
    ``--moe-grouped-gemm``) ``2 (routed_local + shared)``; with one grouped kernel per
    projection for all the routed experts (1: a CUTLASS grouped GEMM -- NeMo AutoModel's
    ``grouped_gemm.ops.gmm``, torchtitan's ``torch._grouped_mm``, MaxText's megablox ``gmm``;
    :func:`trainscape.spec.pack.grouped_expert_gemm`) ``2 (1 + shared)``, the shared experts
    being dense MLPs of their own."""
    if job[JOB_GROUPED_EXPERT_GEMM] > 0.0:
        return 2.0 * (1.0 + shared)
    return 2.0 * (routed_local + shared)


def logits_flops(b, s, h, vocab):
    """Output projection to the vocabulary: ``2bshV`` (Narayanan et al. SC'21 §5.1)."""
    return 2.0 * b * s * h * vocab


def moe_layer_count(layers, experts, moe_every, first_dense):
    """MoE layers: after ``first_dense`` leading dense layers, every ``moe_every``-th layer when
    the model has experts (GShard puts one in every other layer, Mixtral in every layer;
    DeepSeek-V3 keeps its first 3 layers dense and routes every layer after them, 58 of 61:
    arXiv 2412.19437 §4.2, ``config_671B.json`` ``n_dense_layers`` 3, Hugging Face
    ``first_k_dense_replace``; Megatron-Core ``moe_layer_freq`` ``[0]*3+[1]*58``)."""
    rest = layers - first_dense
    if experts <= 0.0 or moe_every <= 0.0 or rest <= 0.0:
        return 0.0
    return math.floor(rest / moe_every)


def model_moe_layers(mdl):
    """:func:`moe_layer_count` of the model block."""
    return moe_layer_count(mdl[MDL_LAYERS], mdl[MDL_EXPERTS], mdl[MDL_MOE_EVERY],
                           mdl[MDL_FIRST_DENSE_LAYERS])


def mtp_moe_blocks(mdl):
    """MoE blocks among the model's ``mtp_layers`` multi-token prediction blocks. An MTP block
    is a transformer layer of the kind of the model's last layer (Megatron-LM
    ``megatron/training/training.py`` ``num_floating_point_operations``: ``last_layer_is_moe``);
    with MoE in every ``moe_every``-th layer (:func:`moe_layer_count`) the last one is routed
    when ``moe_every`` divides the depth after the leading dense layers. DeepSeek-V3's MTP
    module is an MoE layer (arXiv 2412.19437 §2.2)."""
    mtp = mdl[MDL_MTP_LAYERS]
    n_moe = model_moe_layers(mdl)
    if mtp <= 0.0 or n_moe <= 0.0 \
            or n_moe * mdl[MDL_MOE_EVERY] != mdl[MDL_LAYERS] - mdl[MDL_FIRST_DENSE_LAYERS]:
        return 0.0
    return mtp


def mtp_block_params(h):
    """An MTP block's weights besides its transformer layer: the ``2h x h`` projection and the
    three norms' scales (the embedding and output head are shared with the model's)."""
    return 2.0 * h * h + 3.0 * h


def mtp_projection_flops(b, s, h):
    """One MTP block's own work besides its transformer layer, forward: the projection of the
    concatenated normed hidden state and normed embedding, ``2h -> h`` (DeepSeek-V3
    arXiv 2412.19437 eq. 21, ``M_k``), and its three norms, two FLOPs per weight and token,
    ``2 b s (2h^2 + 3h)`` (Megatron-LM ``num_floating_point_operations``, "MTP norms and
    proj")."""
    return 2.0 * b * s * mtp_block_params(h)


def output_head_flops(mdl, b, s):
    """Forward FLOPs after the last layer: the output projection to the vocabulary, once for
    the model and once per MTP block, and each block's projection and norms
    (:func:`mtp_projection_flops`)."""
    mtp = mdl[MDL_MTP_LAYERS]
    return ((1.0 + mtp) * logits_flops(b, s, mdl[MDL_HIDDEN], mdl[MDL_VOCAB])
            + mtp * mtp_projection_flops(b, s, mdl[MDL_HIDDEN]))


def attention_blocks(mdl):
    """Transformer layers with an attention core: the model's and its MTP blocks'. (The
    selective and named-dots recompute of single modules count the model's layers only.)"""
    return mdl[MDL_LAYERS] + mdl[MDL_MTP_LAYERS]


def megatron_flops_per_iteration(batch, s, layers, h, vocab, full_recompute):
    """Narayanan et al. SC'21 eq. (3): ``96 B s l h^2 (1 + s/6h + V/16lh)`` with full activation
    recomputation; without it the 4 forward-equivalent passes become 3 (``72 B s l h^2 ...``)."""
    passes = 4.0 if full_recompute else 3.0
    return (
        24.0 * passes * batch * s * layers * h * h
        * (1.0 + s / (6.0 * h) + vocab / (16.0 * layers * h * passes / 4.0))
    )


def model_flops_per_sequence(mdl, s):
    """Model FLOPs of one sequence through forward and backward (3 forward-equivalents), the
    numerator of MFU (Chowdhery et al. 2022, App. B): no recomputation, full attention square."""
    h = mdl[MDL_HIDDEN]
    layers = mdl[MDL_LAYERS]
    n_moe = model_moe_layers(mdl)
    per_layer = attention_projection_flops(
        1.0, s, h, mdl[MDL_HEADS], mdl[MDL_KV_HEADS], mdl[MDL_HEAD_DIM]
    ) + attention_core_flops(1.0, s, mdl[MDL_HEADS], mdl[MDL_HEAD_DIM])
    dense_mlp = mlp_flops(1.0, s, h, mdl[MDL_FFN_HIDDEN], mdl[MDL_SWIGLU] > 0.0)
    moe_mlp = router_flops(1.0, s, h, mdl[MDL_EXPERTS]) + moe_mlp_flops(
        1.0, s, h, mdl[MDL_EXPERT_FFN_HIDDEN], mdl[MDL_TOP_K], mdl[MDL_SHARED_EXPERTS],
        mdl[MDL_SWIGLU] > 0.0,
    )
    # each multi-token prediction block: a layer of the last layer's kind, its projection, and
    # one more pass through the output head (Megatron-LM num_floating_point_operations)
    mtp = mdl[MDL_MTP_LAYERS]
    mtp_moe = mtp_moe_blocks(mdl)
    forward = (
        (layers + mtp) * per_layer
        + (layers - n_moe + mtp - mtp_moe) * dense_mlp
        + (n_moe + mtp_moe) * moe_mlp
        + mtp * mtp_projection_flops(1.0, s, h)
        + (1.0 + mtp) * logits_flops(1.0, s, h, mdl[MDL_VOCAB])
    )
    return 3.0 * forward


# =============================================================================================
# Parameters
# =============================================================================================


def attention_linear_params(h, heads, kv_heads, head_dim):
    """Q, K, V and output projection weights (the attention block's linear layers)."""
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    return h * (q_dim + 2.0 * kv_dim) + q_dim * h


def layer_linear_params(mdl, swiglu):
    """Linear-layer weights ``(dense layer, MoE layer)`` outside the routed experts: the
    attention projections plus the dense MLP, or plus the shared experts' MLPs (the weights FP8
    training keeps as FP8; the router, norms and embeddings stay 16-bit)."""
    h = mdl[MDL_HIDDEN]
    attn_lin = attention_linear_params(h, mdl[MDL_HEADS], mdl[MDL_KV_HEADS], mdl[MDL_HEAD_DIM])
    return (attn_lin + mlp_params(h, mdl[MDL_FFN_HIDDEN], swiglu),
            attn_lin + mdl[MDL_SHARED_EXPERTS] * mlp_params(h, mdl[MDL_EXPERT_FFN_HIDDEN],
                                                             swiglu))


def stage_linear_params(dense_layers, moe_layers, lin, tp, copies):
    """Linear-layer weights (:func:`layer_linear_params` ``lin``) one GPU of a stage holds:
    its dense and MoE layers', split over TP, times the schedule's parameter copies."""
    return (dense_layers * lin[0] + moe_layers * lin[1]) / tp * copies


def attention_params(h, heads, kv_heads, head_dim):
    """Q, K, V, output projection weights and the two layer norms' scales."""
    return attention_linear_params(h, heads, kv_heads, head_dim) + 2.0 * h


def mlp_params(h, ffn, swiglu):
    """Weights of one MLP (one expert): 2 or 3 ``h x ffn`` matrices."""
    return (3.0 if swiglu else 2.0) * h * ffn


def embedding_params(vocab, h):
    """Input embedding (the untied output projection has the same size)."""
    return vocab * h


# =============================================================================================
# Activation memory (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
# Transformer Models", §4 and Table 2), generalized to GQA, SwiGLU, MoE and FlashAttention
# =============================================================================================


def dropout_mask_bytes(dropout):
    """Bytes per element of a stored dropout mask: 1 (Korthikanti et al. §4.1 count a byte per
    element) with dropout on, 0 with dropout off -- Megatron-LM skips the dropout kernel and
    keeps no mask when ``hidden_dropout = attention_dropout = 0``, as NeMo's Llama, Mistral,
    Nemotron and GPT recipes set them (NeMo ``collections/llm/gpt/model/llama.py``
    ``Llama3Config``: ``attention_dropout = 0.0, hidden_dropout = 0.0``)."""
    if dropout:
        return 1.0
    return 0.0


def attention_activation_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, flash,
                               store_scores, dropout, lin_bytes):
    """Bytes one attention block keeps for backward (Korthikanti et al. §4.1).

    Korthikanti's ``11sbh + 5as^2b`` at 2-byte activations: layer-norm output fed to QKV
    (``2sbh``), Q and K (``4sbh``), V (``2sbh``), the projection input (``2sbh``), the dropout
    mask (``sbh``); softmax output, dropout mask and output (``5as^2b``). With GQA, K and V are
    ``kv_heads/heads`` as large. FlashAttention (Dao et al. 2022) keeps no scores, only a
    log-sum-exp per row in fp32 (``4 a s b``). Without sequence parallelism the QKV input and the
    mask stay replicated across the ``t`` tensor-parallel ranks; the rest is split. Without
    dropout (:func:`dropout_mask_bytes` 0) neither mask is kept and the unfused scores keep only
    the softmax output (``2as^2b``: it is the input of ``PV`` itself).

    The two linear-layer inputs (the QKV input and the projection input) are kept at
    ``lin_bytes`` (:func:`linear_input_saved_bytes`: the FP8 copy in an fp8 job); Q, K, V and the
    scores stay at ``act_bytes``.
    """
    sbh = s * b * h
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    mask = dropout_mask_bytes(dropout)
    replicated = lin_bytes * sbh + mask * sbh  # QKV input, dropout mask
    split = act_bytes * s * b * (q_dim + 2.0 * kv_dim) + lin_bytes * s * b * q_dim
    if store_scores and not flash:
        if dropout:
            split += (2.0 * act_bytes + mask) * heads * s * s * b
        else:
            split += act_bytes * heads * s * s * b
    elif flash:
        split += 4.0 * heads * s * b
    if sp:
        return (replicated + split) / t
    return replicated + split / t


def mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout, lin_bytes):
    """Bytes one dense MLP block keeps (Korthikanti et al. §4.1: ``19sbh`` for a ``4h`` GeLU MLP
    at 2-byte activations): input (``2sbh``), activation-function input and output
    (``2 x 2sb·ffn``; SwiGLU keeps gate, up and product, ``3 x 2sb·ffn``), dropout mask (``sbh``,
    only with dropout).

    SwiGLU as Megatron-Core stores it: ``linear_fc1`` (TE ``LayerNormColumnParallelLinear``)
    writes one ``2·ffn``-wide output (gate and up fused), saved by the activation
    (``megatron/core/fusions/fused_bias_swiglu.py``, ``SwiGLUFunction.forward`` saves its
    input), and ``linear_fc2`` saves its ``ffn``-wide input: ``3 x sb·ffn`` elements, as here.
    The norm fused into ``LayerNormLinear`` saves its input and its output (the GEMM input),
    Korthikanti's layer-norm input (:func:`layernorm_activation_bytes`) and MLP input: no term
    is counted twice.

    The fc1 input (the MLP input) and the fc2 input (the activation function's output) are
    linear-layer inputs, kept at ``lin_bytes`` (:func:`linear_input_saved_bytes`); the fc1
    output (the activation function's input: ``2·ffn`` for SwiGLU, ``ffn`` for GeLU) stays at
    ``act_bytes``.
    """
    replicated = lin_bytes * s * b * h + dropout_mask_bytes(dropout) * s * b * h
    split = (2.0 if swiglu else 1.0) * act_bytes * s * b * ffn + lin_bytes * s * b * ffn
    if sp:
        return (replicated + split) / t
    return replicated + split / t


def moe_activation_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes, dropout,
                         lin_bytes):
    """An MoE block: the MLP block's input and mask (with dropout), then every routed copy of a
    token keeps its dispatched input and its expert's activation-function tensors
    (``top_k + shared`` copies). The block input is the router's input (a 16-bit GEMM) and stays
    at ``act_bytes``; each copy's expert fc1 input and fc2 input are linear-layer inputs, kept at
    ``lin_bytes`` (:func:`linear_input_saved_bytes`; TE ``GroupedLinear`` saves its FP8
    ``inputmats``), its fc1 output at ``act_bytes``."""
    replicated = act_bytes * s * b * h + dropout_mask_bytes(dropout) * s * b * h
    copies = top_k + shared
    split = copies * (lin_bytes * s * b * h + (2.0 if swiglu else 1.0) * act_bytes * s * b
                      * expert_ffn + lin_bytes * s * b * expert_ffn)
    if sp:
        return (replicated + split) / t
    return replicated + split / t


def layernorm_activation_bytes(s, b, h, t, sp, act_bytes):
    """The two layer norms' inputs (Korthikanti et al. §4.1: ``4sbh``), split only with SP."""
    ln = 2.0 * act_bytes * s * b * h
    if sp:
        return ln / t
    return ln


def linear_input_saved_bytes(job):
    """Bytes per element of a linear layer's input as saved for its weight-gradient GEMM: the
    job's ``linear_input_bytes`` -- under FP8, Transformer Engine saves the quantized copy
    (``LayerNormLinear``'s FP8 ``ln_out``, ``Linear``'s FP8 ``inputmat``;
    ``transformer_engine/pytorch/module/layernorm_linear.py``, ``linear.py``), 1 byte plus
    scales (``spec.pack.saved_linear_input_bytes``); in a 16-bit job ``activation_bytes``."""
    return job[JOB_LINEAR_INPUT_BYTES]


def layer_input_bytes(s, b, h, t, sp, act_bytes):
    """What full recomputation keeps of a layer: its input, ``2sbh`` at 2-byte activations
    (Korthikanti et al. §5), split over the TP ranks with sequence parallelism."""
    if sp:
        return act_bytes * s * b * h / t
    return act_bytes * s * b * h


def named_dots_policy(recompute, q_dim, kv_dim, swiglu):
    """``(keep_qkv, keep_out, keep_fc1, keep_fc2)``: which share of each linear GEMM output a
    dot-saving recompute policy keeps (1.0 all, 0.0 none) -- Q/K/V, the attention output
    projection, fc1 (SwiGLU's gate and up projections, MaxText ``mlpwi_0``/``mlpwi_1``), fc2
    (``mlpwo``). What is dropped is recomputed in the backward (:func:`named_dots_gemm_redo`);
    the layer input is always kept (:func:`dots_layer_bytes`). ``q_dim``, ``kv_dim`` (heads x
    head_dim, kv_heads x head_dim) and ``swiglu`` matter only where a policy keeps part of a
    group.

    JAX ``jax.checkpoint_policies.save_only_these_names(*names)`` saves exactly the values
    tagged with ``jax.ad_checkpoint.checkpoint_name`` under those names (JAX docs, "Gradient
    checkpointing with jax.checkpoint", custom policies). MaxText ``Decoder.get_remat_policy``
    (``src/MaxText/layers/decoders.py``) builds its ``remat_policy`` options from it:

    * "dots" -- ``minimal`` (``checkpoint_dots_with_no_batch_dims``): every projection's dot;
    * "dots_no_mlp_in" -- ``save_dot_except_mlpwi``: ``query_proj``, ``key_proj``,
      ``value_proj``, ``qkv_proj``, ``out_proj``, ``mlpwo``;
    * "dots_attn" -- ``save_dot_except_mlp``: ``query_proj``, ``key_proj``, ``value_proj``,
      ``qkv_proj``, ``out_proj`` (PaxML ``AutodiffCheckpointType.SAVE_QKV_OUT_PROJ`` keeps the
      same tensors);
    * "qkv_proj" -- ``save_qkv_proj``: ``query_proj``, ``key_proj``, ``value_proj``,
      ``qkv_proj``.

    "op_selective" is torchtitan's per-op selective activation checkpointing (``ac_mode =
    "selective"``, ``selective_ac_option = "op"``: ``torchtitan/distributed/
    activation_checkpoint.py``, ``_apply_op_sac``): each transformer block's checkpoint keeps the
    outputs of the ops on its save list -- ``aten.mm`` except every second one counted from the
    block's start, the SDPA attention kernels, the reduce-scatters -- and recomputes every other
    op. A Llama-style block runs its matmuls as wq, wk, wv, wo, then w1, w3, w2 (torchtitan
    ``models/llama3/model.py``: ``Attention.forward``, ``FeedForward.forward`` computes
    ``w2(silu(w1(x)) * w3(x))``), so wk, wo and w3 are dropped: Q/K/V kept in the share ``(q +
    kv) / (q + 2 kv)`` (Q and V), the output projection dropped, fc1 half kept with SwiGLU (w1;
    all of it with a GeLU MLP, w1 the 5th matmul), fc2 kept. With GeLU, fc2 (the 6th) is not
    saved, but nothing in the backward reads it and PyTorch's recomputation stops once the
    tensors the backward needs are back (``torch.utils.checkpoint``, ``early_stop``): counted as
    kept, an upper bound of ``sbh`` per layer. Routed experts are taken to follow the same
    pattern (fc1 half, fc2 kept). Unlike the JAX policies it keeps the attention's output
    (:func:`named_dots_core_saved`, :func:`op_selective_extra_bytes`).
    """
    if recompute == RECOMPUTE_OP_SELECTIVE:
        keep_qkv = (q_dim + kv_dim) / (q_dim + 2.0 * kv_dim)
        if swiglu:
            return (keep_qkv, 0.0, 0.5, 1.0)
        return (keep_qkv, 0.0, 1.0, 1.0)
    if recompute == RECOMPUTE_DOTS_NO_MLP_IN:
        return (1.0, 1.0, 0.0, 1.0)
    if recompute == RECOMPUTE_DOTS_ATTN:
        return (1.0, 1.0, 0.0, 0.0)
    if recompute == RECOMPUTE_QKV_PROJ:
        return (1.0, 0.0, 0.0, 0.0)
    return (1.0, 1.0, 1.0, 1.0)


def named_dots_gemm_redo(attn_gemm, mlp_gemm, q_dim, kv_dim, swiglu, recompute):
    """The part of the linear GEMMs a dot-saving policy (:func:`named_dots_policy`) re-runs in
    the backward because their outputs were not kept: ``attn_gemm`` (Q/K/V and output
    projection together) and ``mlp_gemm`` (fc1 and fc2, the routed and shared experts' in an
    MoE layer) -- times or FLOPs -- split by FLOP share (:func:`attention_projection_flops`:
    Q/K/V ``(a d + 2 a_kv d)``, output projection ``a d`` of ``2 a d + 2 a_kv d``;
    :func:`mlp_flops`: fc1 2 of 3 matrices with SwiGLU, 1 of 2 with GeLU, fc2 the rest). A
    dropped output is re-run even where only its consumer's backward needs it (fc1 for the
    activation and fc2's weight gradient; fc2 for an MoE combine's gate gradient), so a dense
    fc2 re-run is an upper bound where the compiler can drop it. 0 under "dots"."""
    keep = named_dots_policy(recompute, q_dim, kv_dim, swiglu)
    out_share = q_dim / (2.0 * q_dim + 2.0 * kv_dim)
    fc1_share = 2.0 / 3.0 if swiglu else 0.5
    attn_redo = (1.0 - keep[0]) * (1.0 - out_share) + (1.0 - keep[1]) * out_share
    mlp_redo = (1.0 - keep[2]) * fc1_share + (1.0 - keep[3]) * (1.0 - fc1_share)
    return attn_gemm * attn_redo + mlp_gemm * mlp_redo


def named_dots_core_saved(recompute, flash):
    """Whether a dot-saving policy keeps the attention core's output, so its backward re-runs
    no attention forward: only "op_selective" with a fused kernel (torchtitan's save list holds
    ``aten._scaled_dot_product_flash_attention`` and ``_efficient_attention``; an unfused
    attention is a chain of batched matmuls and a softmax, none of them on the list). The JAX
    policies save no batched dot (``checkpoint_dots_with_no_batch_dims``)."""
    return recompute == RECOMPUTE_OP_SELECTIVE and flash


def op_selective_extra_bytes(s, b, h, heads, head_dim, t, sp, act_bytes):
    """Bytes an "op_selective" layer keeps beyond its saved GEMM outputs (:func:`dots_layer_bytes`
    with :func:`named_dots_policy`): the fused attention's output (``sb·a·d``, split over the TP
    ranks by heads) and its fp32 log-sum-exp (``4 sb·a``), which the SDPA backward reads
    (FlashAttention-2, Dao 2023, Algorithm 2), and -- with sequence parallelism over ``t > 1``
    ranks -- the reduce-scatter after the output projection (``sbh / t``), on the save list
    though its GEMM is dropped (fc2's reduce-scattered output is counted as fc2 kept)."""
    out = (act_bytes * head_dim + 4.0) * s * b * heads / t
    if sp and t > 1.0:
        out += act_bytes * s * b * h / t
    return out


def named_dots_tp_replay(recompute, sp, swiglu, gather_share):
    """Fraction of a layer pass's tensor-parallel traffic (:func:`tp_layer_comm_time`) that a
    dot-saving policy replays in the backward for the GEMMs it re-runs
    (:func:`named_dots_gemm_redo`): with sequence parallelism four collectives -- the
    all-gathers of the Q/K/V and fc1 inputs, each ``gather_share / 2`` of the pass
    (:func:`tp_gather_share`; 1/4 without FP8), the reduce-scatters of the output projection's
    and fc2's outputs, each ``(1 - gather_share) / 2`` -- each replayed when its GEMM is
    re-run; without SP the two all-reduces, after the output projection and after fc2
    (Korthikanti et al. §4.2.2, Shoeybi et al. 2019 §3: the column-parallel GEMMs' forward
    ``f`` is the identity). 0 under "dots" (the saved outputs are the reduced ones).
    "op_selective" keeps the reduce-scatters' outputs (on its save list) and replays the
    all-gathers in front of its re-run wk and, with SwiGLU, w3 (with SP), or the all-reduce
    after its re-run output projection (without)."""
    if recompute == RECOMPUTE_OP_SELECTIVE:
        if sp:
            return 0.5 * gather_share * (2.0 if swiglu else 1.0)
        return 0.5
    keep = named_dots_policy(recompute, 1.0, 1.0, swiglu)
    if sp:
        return 0.5 * (gather_share * ((1.0 - keep[0]) + (1.0 - keep[2]))
                      + (1.0 - gather_share) * ((1.0 - keep[1]) + (1.0 - keep[3])))
    return 0.5 * ((1.0 - keep[1]) + (1.0 - keep[3]))


def dots_attention_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, keep_qkv,
                         keep_out):
    """What an attention block keeps under the "dots" policy (:func:`dots_layer_bytes`): the
    outputs of its linear GEMMs -- Q, K, V (``sb(a d + 2 a_kv d)``, split over the TP ranks)
    and the output projection's (``sbh``, replicated over the TP ranks without sequence
    parallelism, like Korthikanti's layer-norm output) -- at ``act_bytes`` (GEMM outputs are
    16-bit, FP8 job or not). ``keep_qkv``, ``keep_out``: 1.0 or 0.0, whether a named-dot
    policy keeps each (:func:`named_dots_policy`)."""
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    replicated = keep_out * act_bytes * s * b * h
    split = keep_qkv * act_bytes * s * b * (q_dim + 2.0 * kv_dim)
    if sp:
        return (replicated + split) / t
    return replicated + split / t


def dots_mlp_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, keep_fc1, keep_fc2):
    """What a dense MLP keeps under the "dots" policy: fc1's output (``2·ffn`` wide for
    SwiGLU's gate and up projections, MaxText ``mlpwi_0`` and ``mlpwi_1``; ``ffn`` for GeLU),
    split over the TP ranks, and fc2's (``sbh``, replicated without SP); each only where the
    policy keeps it (``keep_fc1``, ``keep_fc2``: :func:`named_dots_policy`)."""
    replicated = keep_fc2 * act_bytes * s * b * h
    split = keep_fc1 * (2.0 if swiglu else 1.0) * act_bytes * s * b * ffn
    if sp:
        return (replicated + split) / t
    return replicated + split / t


def dots_moe_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes, keep_fc1,
                   keep_fc2):
    """What an MoE block keeps under the "dots" policy, per routed copy (``top_k + shared``):
    the expert's fc1 output (``2·ffn`` or ``ffn``) and fc2 output (``sbh``), each where the
    policy keeps it (``keep_fc1``, ``keep_fc2``: :func:`named_dots_policy`), and its dispatched
    input -- a modelling choice, under every dot-saving policy: kept so that the backward
    replays no dispatch all-to-all (the expert fc1 weight gradient needs it); the router's
    ``sb·E`` logits are neglected (``E << h``)."""
    copies = top_k + shared
    split = copies * (act_bytes * s * b * h + keep_fc1 * (2.0 if swiglu else 1.0) * act_bytes
                      * s * b * expert_ffn + keep_fc2 * act_bytes * s * b * h)
    return split / t


def dots_layer_bytes(attention, block, s, b, h, t, sp, act_bytes):
    """Bytes one layer keeps under the "dots" recompute policy: the layer input
    (:func:`layer_input_bytes`) plus the outputs of its linear GEMMs (``attention``:
    :func:`dots_attention_bytes`, ``block``: :func:`dots_mlp_bytes` or :func:`dots_moe_bytes`);
    norms, activation functions, dropout and the attention core are recomputed in the backward.

    MaxText's ``remat_policy = "minimal"`` is exactly this: ``Decoder.get_remat_policy``
    (MaxText ``layers/decoders.py``) maps it to
    ``jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims`` -- the projections' dots are
    saved, attention's batched ``QK^T`` and ``PV`` dots are not; its named subsets
    (``save_dot_except_mlpwi``: ``query_proj``, ``key_proj``, ``value_proj``, ``out_proj``,
    ``mlpwo`` through ``jax.checkpoint_policies.save_only_these_names``; ``save_dot_except_mlp``,
    ``save_qkv_proj``) keep fewer: the recompute values "dots_no_mlp_in", "dots_attn" and
    "qkv_proj", whose ``attention`` and ``block`` drop the outputs :func:`named_dots_policy`
    drops. JAX's ``jax.checkpoint_policies.dots_saveable`` and
    ``save_only_these_names`` (JAX docs, "Gradient checkpointing with jax.checkpoint"), PaxML's
    ``checkpoint_policy`` ``SAVE_DOT_ONLY`` / ``SAVE_QKV_OUT_PROJ`` are the same kind of
    policy; torchtitan's per-op selective activation checkpointing is one too, with half the
    matmuls and the attention output ("op_selective", :func:`named_dots_policy`)."""
    return layer_input_bytes(s, b, h, t, sp, act_bytes) + attention + block


def expert_copy_activation_bytes(s, b, h, expert_ffn, swiglu, t, act_bytes, lin_bytes):
    """Bytes one routed (or shared) copy of a token keeps in an MoE block, per TP rank: its
    dispatched input and its fc2 input at ``lin_bytes``, its fc1 output (``2·ffn`` wide for
    SwiGLU) at ``act_bytes`` -- one copy of :func:`moe_activation_bytes`' split part."""
    return (lin_bytes * s * b * h + (2.0 if swiglu else 1.0) * act_bytes * s * b * expert_ffn
            + lin_bytes * s * b * expert_ffn) / t


def recompute_module_savings(s, b, h, ffn, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes,
                             lin_bytes, dropout, layernorm, moe_act, mlp, moe, shared_experts):
    """``(dense, moe)``: bytes per layer that Megatron-Core's recompute modules free under
    selective recompute (``TransformerConfig.recompute_modules``,
    ``megatron/core/transformer/transformer_config.py``).

    Output-discarding checkpoints (the module's output is dropped once its consumer has run and
    rebuilt in the backward):

    - ``layernorm`` (``input_layernorm``, ``pre_mlp_layernorm``): the two norm outputs. Where
      the consumer saves that very tensor it is freed: the QKV and fc1 inputs when the linear
      layers save 16-bit inputs (``lin_bytes == act_bytes``; in FP8, Transformer Engine saves
      its own FP8 copy, which stays), and an MoE layer's router input (a 16-bit GEMM) always.
    - ``moe_act``: each routed copy's activation-function output, the experts' fc2 input, when
      fc2 saves it (16-bit inputs; ``top_k + shared`` copies).

    Normal checkpoints (``tensor_parallel.checkpoint``: only the module's input is kept):

    - ``mlp`` (dense layers only, ``TransformerLayer.recompute_mlp``): the whole MLP block of
      :func:`mlp_activation_bytes`. The input the checkpoint keeps is the residual stream the
      fused pre-MLP norm (TE ``LayerNormLinear``) saved already (:func:`layernorm_activation_bytes`),
      so nothing is added; with ``layernorm`` the fc1 input is not freed twice.
    - ``moe`` (``MoELayer.moe_layer_recompute``): the whole MoE block -- every routed and shared
      copy (:func:`expert_copy_activation_bytes`) and the block's dropout mask; the router input
      is the checkpoint's input and stays (``layernorm`` still frees it). ``moe_act`` adds
      nothing beside it.
    - ``shared_experts`` (without ``moe``): the shared copies, less their fc2 inputs where
      ``moe_act`` already frees those.

    Sizes as :func:`attention_activation_bytes`, :func:`mlp_activation_bytes` and
    :func:`moe_activation_bytes` count them (the norm outputs split over TP only with SP)."""
    sbh = s * b * h
    norm_out = sbh / t if sp else sbh
    same = lin_bytes == act_bytes
    dense = 0.0
    moe_b = 0.0
    if layernorm:
        if same:
            dense += 2.0 * lin_bytes * norm_out
            moe_b += lin_bytes * norm_out
        moe_b += act_bytes * norm_out
    if mlp:
        dense += mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout, lin_bytes)
        if layernorm and same:
            dense -= lin_bytes * norm_out
    fc2_in = lin_bytes * s * b * expert_ffn / t
    copy = expert_copy_activation_bytes(s, b, h, expert_ffn, swiglu, t, act_bytes, lin_bytes)
    if moe:
        moe_b += (top_k + shared) * copy + dropout_mask_bytes(dropout) * norm_out
    else:
        if moe_act and same:
            moe_b += (top_k + shared) * fc2_in
        if shared_experts:
            moe_b += shared * copy
            if moe_act and same:
                moe_b -= shared * fc2_in
    return dense, moe_b


def recompute_module_redo_bytes(s, b, h, ffn, expert_ffn, top_k, shared, swiglu, t, sp,
                                act_bytes, dropout, layernorm, moe_act, mlp, moe,
                                shared_experts):
    """``(dense, moe)``: HBM bytes one layer's backward moves to rebuild what
    :func:`recompute_module_savings` dropped, memory-bound kernels (:func:`memory_bound_time`):
    each norm reads its input and writes its output (``2 x 2 sbh``), each copy's activation
    function reads its fc1 output (``2·ffn`` wide for SwiGLU, ``ffn`` for GeLU) and writes
    ``ffn``; a re-run MLP or MoE block (or the shared experts) touches each of its stored
    activations once, as a forward does (:func:`layer_activations` at 16 bits)."""
    sbh = s * b * h
    norm_io = 2.0 * act_bytes * (sbh / t if sp else sbh)
    act_io = (3.0 if swiglu else 2.0) * act_bytes * s * b * expert_ffn / t
    dense = 0.0
    moe_b = 0.0
    if layernorm:
        dense += 2.0 * norm_io
        moe_b += 2.0 * norm_io
    if mlp:
        dense += mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout, act_bytes)
    if moe:
        moe_b += moe_activation_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp,
                                      act_bytes, dropout, act_bytes)
    else:
        if moe_act:
            moe_b += (top_k + shared) * act_io
        if shared_experts:
            moe_b += shared * expert_copy_activation_bytes(s, b, h, expert_ffn, swiglu, t,
                                                           act_bytes, act_bytes)
            if moe_act:
                moe_b -= shared * act_io
    return dense, moe_b


def layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, ffn, swiglu, t, sp, recompute,
                           flash, act_bytes, dropout, lin_bytes):
    """Bytes one dense transformer layer keeps for backward for one microbatch.

    Korthikanti et al. Table 2: no parallelism ``sbh(34 + 5as/h)``; tensor parallel
    ``sbh(10 + 24/t + 5as/(ht))``; with sequence parallelism ``sbh/t (34 + 5as/h)``; selective
    recomputation drops the ``5as/h`` term; full recomputation keeps only the layer input
    ``2sbh`` (``/t`` with SP). ``dropout`` 0 drops the 1-byte masks (:func:`dropout_mask_bytes`).
    ``lin_bytes``: bytes per element of the saved linear-layer inputs
    (:func:`linear_input_saved_bytes`; ``act_bytes`` in a 16-bit job).
    """
    if recompute == RECOMPUTE_FULL:
        return layer_input_bytes(s, b, h, t, sp, act_bytes)
    if recompute >= RECOMPUTE_DOTS:
        keep = named_dots_policy(recompute, heads * head_dim, kv_heads * head_dim, swiglu)
        extra = 0.0
        if named_dots_core_saved(recompute, flash):
            extra = op_selective_extra_bytes(s, b, h, heads, head_dim, t, sp, act_bytes)
        return dots_layer_bytes(
            dots_attention_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, keep[0],
                                 keep[1]),
            dots_mlp_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, keep[2], keep[3]),
            s, b, h, t, sp, act_bytes) + extra
    store_scores = recompute == RECOMPUTE_NONE
    return (
        attention_activation_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, flash,
                                   store_scores, dropout, lin_bytes)
        + mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout, lin_bytes)
        + layernorm_activation_bytes(s, b, h, t, sp, act_bytes)
    )


def moe_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, expert_ffn, top_k, shared,
                               swiglu, t, sp, recompute, flash, act_bytes, dropout, lin_bytes):
    """Bytes one MoE transformer layer keeps (attention + MoE block + norms)."""
    if recompute == RECOMPUTE_FULL:
        return layer_input_bytes(s, b, h, t, sp, act_bytes)
    if recompute >= RECOMPUTE_DOTS:
        keep = named_dots_policy(recompute, heads * head_dim, kv_heads * head_dim, swiglu)
        extra = 0.0
        if named_dots_core_saved(recompute, flash):
            extra = op_selective_extra_bytes(s, b, h, heads, head_dim, t, sp, act_bytes)
        return dots_layer_bytes(
            dots_attention_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, keep[0],
                                 keep[1]),
            dots_moe_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes,
                           keep[2], keep[3]),
            s, b, h, t, sp, act_bytes) + extra
    store_scores = recompute == RECOMPUTE_NONE
    return (
        attention_activation_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, flash,
                                   store_scores, dropout, lin_bytes)
        + moe_activation_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes,
                               dropout, lin_bytes)
        + layernorm_activation_bytes(s, b, h, t, sp, act_bytes)
    )


def mtp_projection_input_bytes(b, s, h, t, sp, act_bytes):
    """The input an MTP block's projection keeps for its weight gradient: the concatenated
    normed hidden state and normed embedding, ``2h`` wide (Megatron-Core
    ``MultiTokenPredictionLayer``: ``torch.cat`` then ``eh_proj``, a column-parallel linear
    whose input is split over the TP ranks under sequence parallelism)."""
    return 2.0 * b * s * h * act_bytes / (t if sp else 1.0)


def logits_memory_bytes(b, s, vocab, t, act_bytes, extra_bytes):
    """Logits of the microbatch on the last stage, vocabulary-parallel: the activation-dtype
    logits plus what the cross-entropy holds beside them, ``extra_bytes`` per logit (the job's
    ``logits_extra_bytes``: Megatron-LM ``vocab_parallel_cross_entropy``'s fp32 copy, 4; a fused
    kernel's gradient tensor, ``act_bytes``; see ``spec.pack.logits_extra_bytes``)."""
    return b * s * vocab / t * (act_bytes + extra_bytes)


# =============================================================================================
# Time on one GPU
# =============================================================================================


def gemm_efficiency(sys, gemm_flops):
    """Achieved fraction of peak for a GEMM of ``gemm_flops`` FLOPs: a saturating curve
    ``eff_max * x / (x + x_half)`` -- small GEMMs (thin TP shards, few tokens per expert) cannot
    fill the GPU, large ones approach ``eff_max`` (the shape of cuBLAS throughput-vs-size sweeps;
    constants per GPU type from public microbenchmarks, see the presets)."""
    if gemm_flops <= 0.0:
        return sys[SYS_GEMM_EFFICIENCY_MAX]
    return sys[SYS_GEMM_EFFICIENCY_MAX] * gemm_flops / (gemm_flops + sys[SYS_GEMM_HALF_FLOPS])


def gemm_time(sys, flops, gemm_count):
    """Time of ``flops`` spread over ``gemm_count`` equally sized GEMMs."""
    if flops <= 0.0:
        return 0.0
    return flops / (sys[SYS_PEAK_FLOPS] * gemm_efficiency(sys, flops / gemm_count))


def linear_efficiency(sys, gemm_flops):
    """:func:`gemm_efficiency` of the transformer's linear layers, on their own curve
    (``linear_efficiency_max``, ``linear_half_flops``): an FP8 GEMM reaches a different fraction
    of the FP8 peak than a BF16 one of the BF16 peak (ml-engineering MAMF tables: H100 SXM BF16
    80.3 %, FP8 70.9 %), and its fixed per-GEMM cost weighs against a twice faster peak."""
    if gemm_flops <= 0.0:
        return sys[SYS_LINEAR_EFFICIENCY_MAX]
    return sys[SYS_LINEAR_EFFICIENCY_MAX] * gemm_flops / (gemm_flops + sys[SYS_LINEAR_HALF_FLOPS])


def linear_gemm_time(sys, flops, gemm_count):
    """Time of a linear layer's ``flops`` over ``gemm_count`` equal GEMMs at the linear layers'
    precision: Transformer Engine runs the forward, dgrad and wgrad GEMMs of ``te.Linear`` in FP8
    under ``fp8_autocast`` (TE docs, "Using FP8 with Transformer Engine"), the router, attention
    and Megatron-Core's ``output_layer`` (a plain ``ColumnParallelLinear``) in BF16."""
    if flops <= 0.0:
        return 0.0
    return flops / (sys[SYS_LINEAR_PEAK_FLOPS] * linear_efficiency(sys, flops / gemm_count))


def linear_cast_elements_forward(b, s, h, q_dim, ffn, mlp_copies, t, sp):
    """Elements one GPU quantizes per layer in forward: the input of every FP8 linear layer
    (QKV and fc1 read the layer-normed ``bsh``, split over TP ranks with SP; proj reads the
    ``bs·a·d/t`` attention output, fc2 the ``bs·ffn/t`` activation), with ``mlp_copies`` MLPs per
    token (``top_k + shared`` in an MoE layer)."""
    x_in = b * s * h / t if sp else b * s * h
    return (x_in + b * s * q_dim / t) + mlp_copies * (x_in + b * s * ffn / t)


def linear_cast_elements_backward(b, s, h, q_dim, kv_dim, ffn, swiglu, mlp_copies, t, sp):
    """Elements one GPU quantizes per layer in backward: the output gradient of every FP8
    linear layer, cast for its dgrad and wgrad GEMMs (TE casts ``grad_output`` to E5M2): QKV's
    ``bs(a d + 2 a_kv d)/t``, proj's and fc2's ``bsh``, fc1's ``bs·ffn/t`` (two of them for
    SwiGLU's gate and up projections)."""
    x_in = b * s * h / t if sp else b * s * h
    fc1_out = (2.0 if swiglu else 1.0) * ffn
    return (b * s * (q_dim + 2.0 * kv_dim) / t + x_in) + mlp_copies * (b * s * fc1_out / t + x_in)


def linear_cast_time(sys, job, elements):
    """Memory-bound time of quantizing ``elements`` linear-layer inputs: ``linear_cast_bytes``
    of HBM traffic each (read the bf16 tensor, write its FP8 copies and scales; 0 in a 16-bit
    job; see ``spec.pack.fp8_cast_bytes``)."""
    return memory_bound_time(sys, elements * job[JOB_LINEAR_CAST_BYTES])


def attention_backward_factor(flash):
    """Attention-core backward FLOPs over forward FLOPs. FlashAttention's backward recomputes
    ``S = QK^T`` and ``P`` blockwise, then runs ``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``,
    ``dK = dS^T Q``: 5 matmuls against the forward's 2, i.e. 2.5x (Dao 2023, FlashAttention-2 §3.2;
    the ``2.5 * f`` of ``flops(..., mode="bwd")`` in Dao-AILab/flash-attention
    ``benchmarks/benchmark_flash_attention.py``, which FlashAttention-3's figures use too).
    Unfused attention keeps ``P`` and runs only the 4 gradient matmuls: 2x."""
    if flash:
        return 2.5
    return 2.0


def attention_sequence_efficiency(sys, kv_len):
    """Fraction of ``attention_efficiency`` a fused attention kernel reaches when each query
    block loops over ``kv_len`` keys: ``kv_len / (kv_len + attention_half_seq)``. Each thread
    block's fixed prologue and epilogue (load Q, rescale and write O) is amortized over the K/V
    loop, so short sequences run slower: FlashAttention-3 forward on H100 SXM5, head dim 128,
    16k tokens per batch (Shah et al. 2024, arXiv 2407.08608, Fig. 5): 467, 565, 625, 638, 646,
    648 TFLOPs/s at 512 .. 16k tokens, fitted by ``669 * s / (s + 209)`` (rms log error 1.8 %).
    Context parallelism shortens every kernel's K/V loop to ``seq / cp``."""
    return kv_len / (kv_len + sys[SYS_ATTENTION_HALF_SEQ])


#: head dim of the FlashAttention figures ``attention_efficiency`` is taken from (presets)
ATTENTION_REFERENCE_HEAD_DIM = 128.0


def attention_head_dim_efficiency(sys, head_dim):
    """Fused attention's rate at ``head_dim`` relative to the 128-wide heads
    ``attention_efficiency`` is measured at: ``d / (d + c)`` over ``128 / (128 + c)`` with
    ``c = attention_head_dim_half``. Each (query, key) score costs ``4d`` matmul FLOPs forward
    and ``10d`` backward (:func:`attention_backward_factor`) but one exponential each way, and
    the exponentials run on the multi-function units at a fixed rate: H100 SXM5 has 989 TFLOPS
    of 16-bit matmul against 3.9 TFLOPS of exponentials (Shah et al. 2024, FlashAttention-3,
    arXiv 2407.08608 §3). Serialized with the matmuls, a score takes ``14d / P + 2 / E``: the
    kernel reaches ``d / (d + P / 7E)`` of its matmul-bound rate, so narrow heads (GPT-OSS's
    64) run slower per FLOP and wide ones (Nemotron-4 340B's 192) faster. 1 at ``c = 0``."""
    c = sys[SYS_ATTENTION_HEAD_DIM_HALF]
    ref = ATTENTION_REFERENCE_HEAD_DIM
    return head_dim * (ref + c) / (ref * (head_dim + c))


def exponential_rate_attention_ratio(head_dim_half_from, head_dim_half_to):
    """How much faster fused attention runs at the reference 128-wide heads on a GPU whose
    exponentials are faster, at the same matmul rate: :func:`attention_head_dim_efficiency`'s
    serialized score, ``d / (d + c)`` of the matmul-bound rate with ``c = P / 7E``, at
    ``d = 128`` for ``c`` going from ``head_dim_half_from`` to ``head_dim_half_to``:
    ``(128 + c_from) / (128 + c_to)``. Blackwell Ultra doubles Blackwell's exponential rate at
    the same dense BF16 rate (NVIDIA's "2x attention-layer acceleration"; Verda's GB300 NVL72
    table: 10.7 against 5 TeraExponentials/s): c 73.1 -> 34.2, 1.24x. Used by the calibration
    scripts to carry a fitted attention share from one part to the other."""
    ref = ATTENTION_REFERENCE_HEAD_DIM
    return (ref + head_dim_half_from) / (ref + head_dim_half_to)


def kernel_attention_efficiency(native_efficiency, legacy_fraction, legacy):
    """``attention_efficiency`` of the fused attention kernel a job runs: the GPU's native-kernel
    figure, times ``legacy_attention_fraction`` when the kernel was written for an older
    architecture (``job.attention_kernel = "legacy"``). On Hopper, FlashAttention-2 and Triton
    FlashAttention issue Ampere's synchronous ``mma.sync`` and loads instead of the asynchronous
    ``wgmma``/TMA path: FlashAttention-2 reaches 35 % of H100 peak where FlashAttention-3 reaches
    75 % (Shah et al. 2024, arXiv 2407.08608, abstract), a fraction of 0.47."""
    if legacy:
        return native_efficiency * legacy_fraction
    return native_efficiency


def attention_kernel_time(sys, flops, kv_len, head_dim):
    """Fused attention (FlashAttention) at a fixed fraction of the 16-bit peak: TE's fused
    attention runs in BF16 under FP8 autocast by default. ``attention_efficiency`` is the
    forward+backward rate under the 2.5x backward convention (see the presets), so forward and
    backward both run at it, scaled by :func:`attention_sequence_efficiency` of the kernel's K/V
    length and :func:`attention_head_dim_efficiency` of its heads' width."""
    return flops / (sys[SYS_PEAK_FLOPS] * sys[SYS_ATTENTION_EFFICIENCY]
                    * attention_sequence_efficiency(sys, kv_len)
                    * attention_head_dim_efficiency(sys, head_dim))


def executed_attention_core_flops(core_flops, flash):
    """Attention-core FLOPs that actually run. FlashAttention's causal kernels skip the blocks
    above the diagonal, half the square (Dao 2023, FlashAttention-2 §3.1.1); unfused attention
    (Megatron-LM's ``CoreAttention`` before FlashAttention: ``baddbmm`` for the scores, a masked
    softmax, ``bmm`` with V) computes the whole square and masks it afterwards."""
    if flash:
        return 0.5 * core_flops
    return core_flops


def windowed_attention_core(sys, core_hw, t_core, flash, seq, kv_len, mdl):
    """``(core_hw, t_core)`` of the average layer when some layers attend through a sliding
    window (:func:`windowed_layer_count`): a windowed layer runs :func:`window_pair_share` of the
    causal kernel's FLOPs, over a K/V loop of at most ``window`` keys (so at
    :func:`attention_sequence_efficiency` of the shorter loop). Unfused attention computes the
    whole square and masks it, window or not: unchanged. The context-parallel ring exchange is
    not shortened (the K/V chunks still travel)."""
    window = mdl[MDL_ATTENTION_WINDOW]
    layers = mdl[MDL_LAYERS]
    windowed = windowed_layer_count(layers, window, mdl[MDL_FULL_ATTENTION_EVERY])
    if not flash or windowed <= 0.0 or window >= seq:
        return core_hw, t_core
    share = windowed / layers
    core_w = core_hw * window_pair_share(seq, window)
    t_w = attention_kernel_time(sys, core_w, min(kv_len, window), mdl[MDL_HEAD_DIM])
    return (core_hw + share * (core_w - core_hw), t_core + share * (t_w - t_core))


def attention_core_time(sys, flops, flash, kv_len, head_dim):
    """Time of the attention core: a fused kernel at ``attention_efficiency`` (over K/V loops of
    ``kv_len`` keys), or, unfused, two batched GEMMs (``QK^T`` and ``PV``) on the GEMM efficiency
    curve; the unfused softmax and dropout traffic is in the memory-bound time (the ``5as^2b``
    activation terms)."""
    if flash:
        return attention_kernel_time(sys, flops, kv_len, head_dim)
    return gemm_time(sys, flops, 2.0)


#: extra HBM bytes per element when an op chain runs eager instead of as one fused kernel
#: (:func:`eager_elementwise_bytes`): an RMSNorm, the rotary embedding, SwiGLU's gate
EAGER_NORM_EXTRA_BYTES = 32.0
EAGER_ROTARY_EXTRA_BYTES = 16.0
EAGER_SWIGLU_EXTRA_BYTES = 4.0


def eager_elementwise_bytes(s, b, h, q_dim, kv_dim, ffn, mlp_copies, swiglu, t, sp):
    """HBM bytes one layer's forward moves beyond a fused implementation when its element-wise
    ops run one kernel each, as PyTorch eager runs torchtitan's Llama modules
    (``torchtitan/models/norms.py`` ``RMSNorm``, ``models/llama/model.py``
    ``apply_rotary_emb`` and ``FeedForward``, 9dec370). Per element, reads + writes:

    - RMSNorm, ``(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps)).type_as(x) * w``:
      upcast 2+4, square 4+4, mean 4, scale 4+4, downcast 4+2, weight 2+2 = 36 against a
      fused norm's 2+2: 32 more, for each of the layer's two norms over its ``h`` (``h / t``
      under sequence parallelism);
    - rotary embedding, ``view_as_complex(x.float()) * freqs`` then ``type_as``: upcast 2+4,
      complex multiply 4+4, downcast 4+2 = 20 against 2+2: 16 more, over the query and key
      projections' ``(q_dim + kv_dim) / t``;
    - SwiGLU, ``silu(a) * b``: 2+2 then 2+2+2 = 10 against a fused 2+2+2: 4 more, over each of
      ``mlp_copies`` MLPs' ``ffn / t`` (0 for a GELU MLP, one kernel either way).

    The backward and a recomputed forward replay the same chain, which the element-wise time of
    :func:`stage_pass_times` carries (twice, once). Counted kernel by kernel, these bytes run at
    the streaming bandwidth (:func:`streaming_time`), not at the fitted proxy's."""
    tokens = b * s
    norm_width = h / t if sp else h
    swiglu_extra = EAGER_SWIGLU_EXTRA_BYTES * ffn * mlp_copies / t if swiglu else 0.0
    return tokens * (2.0 * EAGER_NORM_EXTRA_BYTES * norm_width
                     + EAGER_ROTARY_EXTRA_BYTES * (q_dim + kv_dim) / t + swiglu_extra)


def memory_bound_time(sys, nbytes):
    """Memory-bound kernels (norms, activation functions, residual adds, dropout, optimizer):
    bytes over achieved HBM bandwidth (roofline, Williams et al. 2009)."""
    return nbytes / (sys[SYS_HBM_BANDWIDTH] * sys[SYS_MEMORY_EFFICIENCY])


def stream_memory_efficiency(sys):
    """The fraction of HBM bandwidth a plain streaming kernel reaches: the GPU's microbenchmark
    value (``stream_memory_efficiency``; 0: ``memory_efficiency``). The fitted
    ``memory_efficiency`` is lower where it absorbs element-wise traffic the model counts only
    by proxy; bytes counted op by op run at this one."""
    if sys[SYS_STREAM_MEMORY_EFFICIENCY] > 0.0:
        return sys[SYS_STREAM_MEMORY_EFFICIENCY]
    return sys[SYS_MEMORY_EFFICIENCY]


def streaming_time(sys, nbytes):
    """Bytes counted op by op over the streaming bandwidth (:func:`stream_memory_efficiency`)."""
    return nbytes / (sys[SYS_HBM_BANDWIDTH] * stream_memory_efficiency(sys))


def eager_op_time(sys, nbytes):
    """One eager framework op that moves ``nbytes``: its kernel streams them
    (:func:`streaming_time`), but the host first spends ``host_op_s`` issuing it -- Python, the
    PyTorch dispatcher, the launch -- and a GPU that finishes sooner waits for the next one:
    ``max(bytes / bandwidth, host_op_s)``. Host figures: Transformer Engine PR #1016
    (NVIDIA/TransformerEngine, 2024-07-15) measures ~10 us to launch a one-value kernel from
    PyTorch and ~20 us for the two PyTorch ops it replaced; TE issue #2053 (2025-08-11) a
    ``torch.nn.Linear`` forward at 13.5 us of host time on an H100 DGX (Xeon 8480C) and 37 us on
    a GB200 (Grace)."""
    return max(streaming_time(sys, nbytes), sys[SYS_HOST_OP_S])


#: Megatron-Core's eager expert-bias add (``TEGroupedMLP._apply_bias``): HBM bytes per routed
#: element (one element of an expert's ``[tokens, hidden]`` output) of each op, forward: per
#: local expert ``b * p`` (the bias times the router probability, an fp32 result written) and
#: ``t + b * p`` (bf16 and fp32 read, fp32 written); then ``torch.cat`` of the fp32 pieces and
#: the cast back to bf16
EXPERT_BIAS_MUL_BYTES = 4.0
EXPERT_BIAS_ADD_BYTES = 10.0
EXPERT_BIAS_CAT_BYTES = 8.0
EXPERT_BIAS_CAST_BYTES = 6.0
#: ... backward, by autograd: the cast's (a bf16 gradient to fp32); per local expert the add's
#: gradient cast to its bf16 input, and for each of the bias and the router probability a
#: product written then reduced (``sum_to_size``); the split's, a ``torch.cat`` of the bf16
#: input gradients
EXPERT_BIAS_GRAD_CAST_BYTES = 6.0
EXPERT_BIAS_GRAD_MUL_BYTES = 8.0
EXPERT_BIAS_GRAD_SUM_BYTES = 4.0
EXPERT_BIAS_GRAD_CAT_BYTES = 4.0


def eager_expert_bias_elements(b, seq, top_k, h, split):
    """Routed elements one GPU's local experts output per MoE layer and microbatch: each of the
    ``b x seq / split`` tokens of its attention ranks (``split = tp x cp``) copied to
    ``top_k`` experts, ``h`` wide -- what the expert GEMMs of :func:`row_terms` produce."""
    return b * seq * top_k * h / split


def eager_expert_bias_forward_time(sys, elements, local_experts):
    """Forward time of Megatron-Core's eager expert-bias add in one MoE layer
    (``spec.pack.eager_expert_bias``: ``TEGroupedMLP._apply_bias``, ``torch.cat([t + b * p for
    t, b, p in zip(...)])`` in fp32, then ``.to(bf16)``) over ``elements`` routed elements split
    evenly over ``local_experts``: two ops per expert and two over all of them, 28 bytes per
    element (``EXPERT_BIAS_*_BYTES``) in ``2 L + 2`` kernels, each :func:`eager_op_time` -- a
    small expert's ops are host-bound."""
    if elements <= 0.0 or local_experts <= 0.0:
        return 0.0
    per = elements / local_experts
    return local_experts * (eager_op_time(sys, EXPERT_BIAS_MUL_BYTES * per)
                            + eager_op_time(sys, EXPERT_BIAS_ADD_BYTES * per)) \
        + eager_op_time(sys, EXPERT_BIAS_CAT_BYTES * elements) \
        + eager_op_time(sys, EXPERT_BIAS_CAST_BYTES * elements)


def eager_expert_bias_backward_time(sys, elements, local_experts):
    """Backward time of :func:`eager_expert_bias_forward_time`'s ops under autograd: the cast's
    gradient over all elements; per local expert the add's gradient cast to bf16, the bias's
    and the router probabilities' gradients (a product and a reduction each) and the bias
    gradient's own cast (an ``h``-wide tensor: its host cost only); then the split's gradient
    (a ``torch.cat``) and the probabilities' (a few bytes): 40 bytes per element in ``6 L + 3``
    kernels, each :func:`eager_op_time`."""
    if elements <= 0.0 or local_experts <= 0.0:
        return 0.0
    per = elements / local_experts
    per_expert = (eager_op_time(sys, EXPERT_BIAS_GRAD_CAST_BYTES * per)
                  + 2.0 * eager_op_time(sys, EXPERT_BIAS_GRAD_MUL_BYTES * per)
                  + 2.0 * eager_op_time(sys, EXPERT_BIAS_GRAD_SUM_BYTES * per)
                  + eager_op_time(sys, 0.0))
    return eager_op_time(sys, EXPERT_BIAS_GRAD_CAST_BYTES * elements) \
        + local_experts * per_expert \
        + eager_op_time(sys, EXPERT_BIAS_GRAD_CAT_BYTES * elements) + eager_op_time(sys, 0.0)


def gpu_count(sys):
    """GPUs in the job."""
    return sys[SYS_GPUS]


# =============================================================================================
# Configuration validity (the single truth that the input edge and every kernel share)
# =============================================================================================

#: ``(config field, message)`` per :func:`config_error` code; codes >= 100 are
#: ``100 + pipeline.schedule_valid`` reasons (see :func:`config_error_message`).
CONFIG_ERRORS = (
    ("", "ok"),
    ("tp", "must be >= 1"),
    ("cp", "must be >= 1"),
    ("pp", "must be >= 1"),
    ("dp", "must be >= 1"),
    ("ep", "must be >= 1"),
    ("mbs", "must be >= 1"),
    ("vpp", "must be >= 1"),
    ("schedule", "unknown schedule code"),
    ("recompute", "unknown recompute code"),
    ("zero", "must be 0, 1, 2 or 3"),
    ("order", "unknown placement order code"),
    ("sp", "must be 0 or 1"),
    ("tp_overlap", "must be 0 or 1"),
    ("dp_overlap", "must be 0 or 1"),
    ("dp", "tp * cp * pp * dp must equal the GPU count"),
    ("tp", "must divide the number of attention heads"),
    ("tp", "must divide the number of KV heads, or be a multiple of it"),
    ("mbs", "global batch must be divisible by dp * mbs"),
    ("pp", "fewer layers (+ 2 x job.pipeline_edge_layers) than the pipeline's model chunks "
           "(pp, x vpp or x 2 by schedule)"),
    ("ep", "must divide dp, or tp*dp with expert TP 1 (MoE parallel folding)"),
    ("ep", "must divide the number of experts (and be 1 for a dense model)"),
    ("cp", "sequence length must be divisible by 2 * cp (load-balanced ring attention)"),
    ("sp", "sequence length / cp must be divisible by tp with sequence parallelism"),
    ("vpp", "only the interleaved schedule uses vpp > 1"),
    ("vpp", "the interleaved schedule needs vpp >= 2 when pp > 1"),
    ("dp", "the network tiers cannot hold this many GPUs"),
    ("tp", "must divide the hidden size and the FFN hidden sizes"),
    ("zero", "must be 0, 1 or 2 with job.sync.strategy \"diloco\" or \"delayed\" (each site "
             "keeps a full replica; ZeRO shards only inside a site)"),
    ("job.sync", "settings out of range in the job block (a known strategy; with diloco "
                 "inner_steps >= 1, 1 <= fragments <= inner_steps, 0 <= overlap_steps < "
                 "inner_steps or 0)"),
    ("job.offload_activations", "out of range in the job block (a share from 0 to 1)"),
    ("pp", "job.pipeline_first/last_stage_layers do not fit this pipeline (a V schedule puts "
           "both ends on one device; two stages must hold every layer; every device needs a "
           "layer per model chunk)"),
    ("dp", "job.dp_replicas must divide dp / ep (hybrid sharding splits the data-parallel "
           "ranks outside expert parallelism: ep must divide dp, no MoE parallel folding) and "
           "needs the synchronous job.sync.strategy"),
)
#: :func:`sync_config_error`'s codes
SYNC_ZERO_ERROR = 28
SYNC_SETTINGS_ERROR = 29
#: an activation offload share outside 0..1 (or NaN) in a job block the validator never saw
OFFLOAD_SETTINGS_ERROR = 30
#: stated first / last pipeline stage layers this pipeline cannot run
#: (:func:`pipeline.explicit_stage_layers_error`)
STAGE_LAYERS_ERROR = 31
#: job.dp_replicas that this layout cannot split its data-parallel ranks into
#: (:func:`dp_replicas_error`)
DP_REPLICAS_ERROR = 32
N_CONFIG_ERRORS = len(CONFIG_ERRORS)
SCHEDULE_ERROR_BASE = 100


def config_error(sys, mdl, job, cfg, i):
    """0 when configuration column ``i`` of ``cfg`` is valid, else a code into CONFIG_ERRORS
    (or ``SCHEDULE_ERROR_BASE + reason`` from :func:`pipeline.schedule_valid`).

    The checks run in code order and the first failing one is reported; the core fields' checks
    (:func:`core_config_error`) and the free fields' (:func:`free_config_error`) interleave in
    that order, so the first failure is the smaller non-zero code of the two."""
    return first_config_error(core_config_error(sys, mdl, job, cfg, i),
                              free_sync_error(job, cfg, i))


def free_sync_error(job, cfg, i):
    """The free fields' checks (:func:`free_config_error`), then :func:`sync_config_error`,
    then :func:`offload_config_error`."""
    return first_config_error(first_config_error(free_config_error(cfg, i),
                                                 sync_config_error(job, cfg[CFG_ZERO, i])),
                              offload_config_error(job))


def offload_config_error(job):
    """Code 30 when ``job.offload_activations`` is not a share from 0 to 1 (NaN included): a
    job block written by hand or by another program, which would otherwise store a negative
    activation memory and report it as fitting. Else 0."""
    share = job[JOB_OFFLOAD_ACTIVATIONS]
    if not (share >= 0.0 and share <= 1.0):
        return OFFLOAD_SETTINGS_ERROR
    return 0


def sync_config_error(job, zero):
    """Code 28 for ZeRO-3 under a non-synchronous ``job.sync.strategy``: DiLoCo keeps a full
    replica of the model per site (Douillard et al. 2023, arXiv 2311.08105, Algorithm 1) and a
    delayed cross-site reduction needs each site's whole gradient, so the weights cannot be
    sharded across sites; ZeRO-1/2 states are sharded inside a site only. Code 29 for sync
    settings a validated scenario cannot have (a job block written by hand or by another
    program: the kernel defends itself instead of dividing by zero). Else 0."""
    strategy = job[JOB_SYNC_STRATEGY]
    if zero == 3 and strategy != SYNC_SYNCHRONOUS:
        return SYNC_ZERO_ERROR
    steps = job[JOB_SYNC_INNER_STEPS]
    fragments = job[JOB_SYNC_FRAGMENTS]
    overlap = job[JOB_SYNC_OVERLAP_STEPS]
    if not (strategy == SYNC_SYNCHRONOUS or strategy == SYNC_DILOCO or strategy == SYNC_DELAYED):
        return SYNC_SETTINGS_ERROR
    if strategy == SYNC_DILOCO:  # the only strategy that reads H, P and tau
        if not (steps >= 1.0 and fragments >= 1.0 and fragments <= steps):
            return SYNC_SETTINGS_ERROR
        if not (overlap >= 0.0 and (overlap < steps or overlap == 0.0)):
            return SYNC_SETTINGS_ERROR
    return 0


def first_config_error(core, free):
    """The first failing check of :func:`config_error` from its two halves (0 when both pass)."""
    if core == 0:
        return free
    if free == 0:
        return core
    return min(core, free)


def free_config_error(cfg, i):
    """Checks of the free fields (recompute, zero, order, dp_overlap): codes 9, 10, 11, 14."""
    if cfg[CFG_RECOMPUTE, i] < 0 or cfg[CFG_RECOMPUTE, i] > RECOMPUTE_OP_SELECTIVE:
        return 9
    if cfg[CFG_ZERO, i] < 0 or cfg[CFG_ZERO, i] > 3:
        return 10
    if cfg[CFG_ORDER, i] < 0 or cfg[CFG_ORDER, i] >= N_ORDERS:
        return 11
    if cfg[CFG_DP_OVERLAP, i] < 0 or cfg[CFG_DP_OVERLAP, i] > 1:
        return 14
    return 0


def core_config_error(sys, mdl, job, cfg, i):
    """Checks of the core fields (tp cp pp dp ep mbs vpp schedule sp tp_overlap): every code of
    :func:`config_error` but 9, 10, 11, 14."""
    # 64-bit Python/numba ints: products of int32 degrees must not wrap
    tp = int(cfg[CFG_TP, i])
    cp = int(cfg[CFG_CP, i])
    pp = int(cfg[CFG_PP, i])
    dp = int(cfg[CFG_DP, i])
    ep = int(cfg[CFG_EP, i])
    mbs = int(cfg[CFG_MBS, i])
    vpp = int(cfg[CFG_VPP, i])
    schedule = int(cfg[CFG_SCHEDULE, i])
    if tp < 1:
        return 1
    if cp < 1:
        return 2
    if pp < 1:
        return 3
    if dp < 1:
        return 4
    if ep < 1:
        return 5
    if mbs < 1:
        return 6
    if vpp < 1:
        return 7
    if schedule < 0 or schedule >= N_SCHEDULES:
        return 8
    if cfg[CFG_SP, i] < 0 or cfg[CFG_SP, i] > 1:
        return 12
    if cfg[CFG_TP_OVERLAP, i] < 0 or cfg[CFG_TP_OVERLAP, i] > 1:
        return 13
    gpus = sys[SYS_GPUS]
    if float(tp) * cp * pp * dp != gpus:
        return 15
    heads = int(mdl[MDL_HEADS])
    kv_heads = int(mdl[MDL_KV_HEADS])
    if heads % tp != 0:
        return 16
    if kv_heads % tp != 0 and tp % kv_heads != 0:
        return 17
    global_batch = int(job[JOB_GLOBAL_BATCH])
    if global_batch % (dp * mbs) != 0:
        return 18
    layers = int(mdl[MDL_LAYERS])
    # every model chunk holds a layer; the embedding and the loss count as
    # pipeline_edge_layers each (a first or last chunk may hold only them)
    if layers + 2 * int(job[JOB_PIPELINE_EDGE_LAYERS]) < schedule_layer_divisor(schedule, pp, vpp):
        return 19
    if explicit_stage_layers_error(schedule, pp, vpp, layers,
                                   int(job[JOB_PIPELINE_FIRST_STAGE_LAYERS]),
                                   int(job[JOB_PIPELINE_LAST_STAGE_LAYERS])):
        return STAGE_LAYERS_ERROR
    if dp % ep != 0 and (tp * dp) % ep != 0:
        return 20
    experts = int(mdl[MDL_EXPERTS])
    if ep > 1 and (experts <= 0 or experts % ep != 0):
        return 21
    seq = int(job[JOB_SEQ_LEN])
    if cp > 1 and seq % (2 * cp) != 0:
        return 22
    if cfg[CFG_SP, i] == 1 and (seq // cp) % tp != 0:
        return 23
    if vpp > 1 and schedule != 2:
        return 24
    if schedule == 2 and pp > 1 and vpp < 2:
        return 25
    if tier_capacity(sys) < gpus:
        return 26
    hidden = int(mdl[MDL_HIDDEN])
    if hidden % tp != 0 or int(mdl[MDL_FFN_HIDDEN]) % tp != 0 or int(
        mdl[MDL_EXPERT_FFN_HIDDEN]
    ) % tp != 0:
        return 27
    if dp_replicas_error(job, dp, ep):
        return DP_REPLICAS_ERROR
    microbatches = global_batch // (dp * mbs)
    reason = schedule_valid(schedule, pp, microbatches, vpp)
    if reason != 0:
        return SCHEDULE_ERROR_BASE + reason
    return 0


def dp_replicas_error(job, dp, ep):
    """True when ``job.dp_replicas`` cannot split this layout's data-parallel ranks into its
    replica groups (:func:`dp_replica_group`): R must be a whole number >= 1 that divides
    ``dp / ep`` -- the data-parallel ranks outside expert parallelism, of which the dense and
    the expert weights' groups both take the outer R (so ``ep`` must divide ``dp``: MoE
    parallel folding spreads the experts' data parallelism over TP x DP, which the replicas
    would cut across) -- under the synchronous ``job.sync.strategy`` (the others already keep a
    replica per site). R = 1 (no hybrid sharding) always passes. A job block written by
    another program may hold anything: NaN, a fraction or a value above ``dp`` fail here
    before any integer conversion. 0 in a packed block means 1 (:func:`dp_replica_count`)."""
    r = job[JOB_DP_REPLICAS]
    if r == 0.0 or r == 1.0:
        return False
    if not (r >= 1.0 and r <= dp and r == math.floor(r)):
        return True
    if job[JOB_SYNC_STRATEGY] != SYNC_SYNCHRONOUS or dp % ep != 0:
        return True
    return (dp // ep) % int(r) != 0


def config_error_message(code):
    """``(field, message)`` for a :func:`config_error` code (plain Python, for the edge)."""
    if code >= SCHEDULE_ERROR_BASE:
        from .pipeline import SCHEDULE_INVALID_REASONS

        return ("schedule", SCHEDULE_INVALID_REASONS[code - SCHEDULE_ERROR_BASE])
    return CONFIG_ERRORS[code]


# =============================================================================================
# Per-stage times for one microbatch
# =============================================================================================


def stage_layer_split(stage_layers, lead, layers, first_dense, n_moe):
    """Dense and MoE layers among a device's ``stage_layers``, ``lead`` of them among the
    model's ``first_dense`` leading dense layers (:func:`leading_dense_layers`); the MoE layers
    spread evenly over the rest, in proportion ``n_moe / (layers - first_dense)``."""
    rest = layers - first_dense
    moe = 0.0
    if rest > 0.0:
        moe = (stage_layers - lead) * n_moe / rest
    return stage_layers - moe, moe


def leading_dense_layers(first_dense, n_first, n_mid, n_last, pp, chunks, loss_first):
    """``(first, middle, last)``: how many of the model's ``first_dense`` leading dense layers
    the first, the busiest middle and the last device hold, of their ``n_first, n_mid, n_last``
    layers over ``chunks`` model chunks each. The leading layers open the model's first chunk,
    on the first device, and spill over into the first chunks of the devices after it, in
    order (devices 1, 2, ...: a chunk's layers taken as the device's share,
    ``n / chunks``); the busiest middle device is the one the spill reaches last, holding what
    the middle devices before it leave. Under a V placement (``loss_first``: ZB-V, DualPipeV)
    the first device holds the model's last chunk too, and its other devices are all middle
    ones. Without a pipeline the one device holds them all."""
    if first_dense <= 0.0:
        return 0.0, 0.0, 0.0
    if pp <= 1.0:
        lead = min(first_dense, n_first)
        return lead, 0.0, lead
    lead1 = min(first_dense, n_first / chunks)
    spill = first_dense - lead1
    c_mid = n_mid / chunks
    # the middle devices: all but device 0 under a V placement, all but the two ends otherwise
    mids = pp - 1.0 if loss_first else pp - 2.0
    lead2 = 0.0
    if mids > 0.0:
        lead2 = min(c_mid, max(0.0, spill - (mids - 1.0) * c_mid))
    if loss_first:
        return lead1, lead2, lead1
    return lead1, lead2, min(n_last / chunks, max(0.0, spill - mids * c_mid))


def leading_dense_chunks(schedule, pp, vpp):
    """The model chunks a device's per-microbatch layers are split into, for
    :func:`leading_dense_layers`: :func:`pipeline.schedule_chunks`, except that DualPipe counts
    its two mirrored directions as one pass (:func:`pipeline.pipeline_stage_layers`), so its
    first device's stage is one whole chunk (each direction's first stage, the leading layers
    in it); 1 without a pipeline."""
    if pp <= 1.0 or schedule == SCHED_DUALPIPE:
        return 1.0
    return float(schedule_chunks(schedule, vpp))


def stage_layer_splits(mdl, job, schedule, pp, vpp):
    """``(d1, m1, d2, m2, d3, m3, loss_first)``: the dense and MoE layers
    (:func:`stage_layer_split`) of the first, busiest middle and last device of
    :func:`pipeline_stages` (the model's leading dense layers where
    :func:`leading_dense_layers` puts them), and whether the first device also holds the
    loss."""
    layers = mdl[MDL_LAYERS]
    first_dense = mdl[MDL_FIRST_DENSE_LAYERS]
    n_moe = model_moe_layers(mdl)
    n_first, n_mid, n_last, loss_first = pipeline_stages(mdl, job, schedule, pp, vpp)
    lead = leading_dense_layers(first_dense, n_first, n_mid, n_last, pp,
                                leading_dense_chunks(schedule, pp, vpp), loss_first)
    d1, m1 = stage_layer_split(n_first, lead[0], layers, first_dense, n_moe)
    d2, m2 = stage_layer_split(n_mid, lead[1], layers, first_dense, n_moe)
    d3, m3 = stage_layer_split(n_last, lead[2], layers, first_dense, n_moe)
    # the multi-token prediction blocks run on the device holding the loss (Megatron-Core
    # mtp_on_this_rank: the last pipeline stage), as layers of the last layer's kind
    mtp_m = mtp_moe_blocks(mdl)
    mtp_d = mdl[MDL_MTP_LAYERS] - mtp_m
    if loss_first:
        d1 += mtp_d
        m1 += mtp_m
    else:
        d3 += mtp_d
        m3 += mtp_m
    return d1, m1, d2, m2, d3, m3, loss_first


def embedding_time(sys, b, s, h, act_bytes):
    """The input embedding of one microbatch on the first stage, one pass: a memory-bound
    gather that reads ``b s`` rows of ``h`` and writes them (``2 b s h`` elements; Megatron-LM
    ``VocabParallelEmbedding``: every TP rank writes the full output, masked, before the TP
    reduction); the backward scatter-adds as many bytes into the embedding gradient."""
    return memory_bound_time(sys, 2.0 * act_bytes * b * s * h)


def cross_entropy_time(sys, b, s, vocab, t, act_bytes, extra_bytes):
    """Vocabulary-parallel cross-entropy of one microbatch on the last stage, one pass: a
    memory-bound sweep over the logits and what the loss keeps beside them
    (:func:`logits_memory_bytes`; Megatron-LM ``tensor_parallel/cross_entropy.py``
    ``_VocabParallelCrossEntropy``: max, exp, sum and the softmax gradient, each an elementwise
    pass over the ``b s V / t`` logits and their fp32 copy; a fused kernel reads the logits and
    writes their gradient once)."""
    return memory_bound_time(sys, logits_memory_bytes(b, s, vocab, t, act_bytes, extra_bytes))


def stage_pass_times(dense, moe, t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense, t_mem_moe,
                     t_cast_f_dense, t_cast_f_moe, t_cast_b_dense, t_cast_b_moe, attn_bwd,
                     overhead, embed, loss, t_embed, t_logits, t_ce):
    """``(gemm_f, core_f, mem_f, f, b, w)``: one microbatch's forward GEMM, attention-core and
    memory-bound times over a device's ``dense + moe`` layers, and its forward, input-gradient
    and weight-gradient times (Qi et al., arXiv 2401.10241 §2: B and W each as costly as the
    forward GEMMs; the attention core's backward ``attn_bwd`` times its forward,
    :func:`attention_backward_factor`). ``mem_f`` includes the FP8 casts of the linear layers'
    inputs (what a recomputed forward runs again); the backward casts the output gradients
    (:func:`linear_cast_time`). The first stage adds the embedding (``embed``:
    :func:`embedding_time`, forward and backward), the last the output projection to the
    vocabulary (a GEMM in F, B and W) and the cross-entropy (``loss``: :func:`cross_entropy_time`,
    forward and backward)."""
    gemm_f = dense * (t_proj + t_dense_mlp) + moe * (t_proj + t_moe_mlp)
    core_f = (dense + moe) * t_core
    mem_plain = dense * t_mem_dense + moe * t_mem_moe
    cast_f = dense * t_cast_f_dense + moe * t_cast_f_moe
    cast_b = dense * t_cast_b_dense + moe * t_cast_b_moe
    mem_f = mem_plain + cast_f
    n = dense + moe
    f = gemm_f + core_f + mem_f + n * overhead
    b = gemm_f + attn_bwd * core_f + 2.0 * mem_plain + cast_b + n * overhead
    w = gemm_f
    if embed:
        f += t_embed
        b += t_embed
    if loss:
        f += t_logits + t_ce
        b += t_logits + t_ce
        w += t_logits
    return gemm_f, core_f, mem_f, f, b, w


def whole_gcd(a, b):
    """Greatest common divisor of two positive whole numbers (Euclid)."""
    while b != 0:
        a, b = b, a % b
    return a


def moe_folded(tp, dp, ep):
    """Whether expert parallelism is *folded* over the attention's TP x DP ranks: ``ep`` does not
    divide ``dp`` (the config check admits it then only when ``ep`` divides ``tp * dp``).

    MoE Parallel Folding (Liu et al. 2025, arXiv 2504.14960 §3; Megatron-Core
    ``--expert-tensor-parallel-size``, ``parallel_state.initialize_model_parallel`` building the
    expert groups over the same ranks as TP x CP x DP) lets the MoE layers use their own grid
    (ETP x EP x EDP) over a stage's ranks. The model keeps the original layout (experts at the
    attention's TP degree, EP inside DP) whenever ``ep | dp`` and folds with expert TP 1
    otherwise."""
    return dp % ep != 0


def expert_tp_degree(tp, dp, ep):
    """Tensor-parallel degree of the expert GEMMs: the attention's ``tp``, or 1 when folded
    (:func:`moe_folded`; Megatron-Core ``expert_tensor_parallel_size`` 1, the NeMo recipes'
    setting for Qwen3-235B-A22B: TP 2, EP 32, ETP 1)."""
    if moe_folded(tp, dp, ep):
        return 1.0
    return tp


def expert_data_parallel_degree(tp, dp, ep):
    """Data-parallel degree of the expert weights outside context parallelism: ``dp / ep``, or
    ``tp * dp / ep`` when folded (the expert grid ETP 1 x EP x EDP covers the stage's TP x DP
    ranks; Megatron-Core's expert-data-parallel group, arXiv 2504.14960 §3)."""
    if moe_folded(tp, dp, ep):
        return tp * dp / ep
    return dp / ep


def folded_ep_groups(tp, s_tp, dp, s_dp, ep):
    """``(n_a, s_a, n_b, s_b, x_a, sx_a, x_b, sx_b)``: the folded expert-parallel group (``n_a``
    ranks ``s_a`` apart times ``n_b`` ranks ``s_b`` apart) and, over the rest of the TP x DP
    ranks, its expert-data-parallel complement (``x_a, sx_a, x_b, sx_b``).

    Megatron-Core's expert rank generator takes the EP group from the innermost ranks of the
    TP x DP block (``RankGenerator(tp=etp, ep=ep, dp=edp, order="tp-ep-dp-pp")``): here the
    inner of TP and DP (smaller placement stride) contributes ``g = gcd(inner, ep)`` consecutive
    ranks and the outer ``ep / g`` (which divides it since ``ep | tp * dp``). The approximation:
    the real group interleaves the TP and DP ranks in rank order whatever this model's placement
    order calls them; the two-level (degree, stride) pair prices the same span of the network."""
    if s_tp <= s_dp:
        n_in, s_in, n_out, s_out = tp, s_tp, dp, s_dp
    else:
        n_in, s_in, n_out, s_out = dp, s_dp, tp, s_tp
    g = float(whole_gcd(int(n_in), int(ep)))
    e_out = ep / g
    return (g, s_in, e_out, s_out, n_in / g, s_in * g, n_out / e_out, s_out * e_out)


def mtp_stage_params(mdl, emb_p, embed):
    """Dense weights the multi-token prediction blocks add to the device holding the loss
    besides their layers: each block's projection and norms (:func:`mtp_block_params`), and the
    input embedding where that device does not hold it already (Megatron-Core ``GPTModel``
    builds the word embedding on the stage that runs MTP, ``if self.pre_process or
    self.mtp_process``, its gradient summed with the first stage's)."""
    mtp = mdl[MDL_MTP_LAYERS]
    if mtp <= 0.0:
        return 0.0
    extra = mtp * mtp_block_params(mdl[MDL_HIDDEN])
    if not embed:
        extra += emb_p
    return extra


def stage_params(dense, moe, dense_layer_p, moe_layer_p, expert_layer_p, embed, loss, emb_p,
                 tp, etp, copies, mtp_p):
    """``(dense, expert)`` parameters a device holds for its ``dense + moe`` layers, the input
    embedding on the first stage and the (untied) output projection on the last (Megatron-LM
    keeps a copy of the word embeddings on the last stage even when they are tied,
    ``LanguageModule.setup_embeddings_and_output_layer``), split over ``tp`` and times the
    schedule's parameter copies; the experts split over the expert tensor-parallel degree ``etp``
    (:func:`expert_tp_degree`). The loss device adds ``mtp_p`` (:func:`mtp_stage_params`)."""
    d = dense * dense_layer_p + moe * moe_layer_p
    if embed:
        d += emb_p
    if loss:
        d += emb_p + mtp_p
    return d / tp * copies, moe * expert_layer_p / etp * copies


def zero3_gather_bytes(job, params, linear_params, layers, keep):
    """ZeRO-3 / FSDP: the unsharded weights of the units in flight on a device holding
    ``layers`` transformer layers, one unit each (:func:`stage_fsdp_units`): the unit being
    computed and the next one, prefetched while it runs (PyTorch FSDP's forward and backward
    prefetch of one unit, Zhao et al., VLDB 2023, §3.3; DeepSpeed ZeRO-3's prefetch bucket) --
    two units' share of the device's ``params`` (``linear_params`` of them linear weights), at
    their all-gather width (:func:`param_gather_bytes`: FP8 for the linear weights with
    ``fp8_param_gather``); all of them when the device holds a single unit, or when ``keep``
    holds every unit gathered for the step (:func:`fsdp_keeps_unsharded`)."""
    if keep:
        return param_gather_bytes(job, params, linear_params)[0]
    units = stage_fsdp_units(layers)
    in_flight = 2.0 if units > 2.0 else units
    return param_gather_bytes(job, params, linear_params)[0] * in_flight / units


def stage_state_memory(job, dense_p, expert_p, linear_p, layers, zero, dp_dense, dp_expert,
                       param_bytes, grad_bytes, opt_bytes, keep):
    """``(weights, grads, optimizer)`` bytes of one device holding ``layers`` transformer
    layers: parameters, gradients and optimizer states sharded over the data-parallel ranks by
    the ZeRO stage (Rajbhandari et al. 2020 §5) and the FP8 weight copies of its ``linear_p``
    dense linear weights and its experts (:func:`fp8_weight_cache_bytes`). Under ZeRO-3 over more
    than one rank the weights are the shard at ``zero3_shard_param_bytes`` (0 where it is the
    optimizer's master copy, :func:`trainscape.spec.pack.zero3_shard_param_bytes`) and the
    gathered units in flight (:func:`zero3_gather_bytes`); with no data-parallel group
    (``dp_dense`` 1) ZeRO-3 holds what ZeRO-0 does.

    ``keep`` (:func:`fsdp_keeps_unsharded`: ``job.fsdp_pp_unsharded`` under a pipeline): ZeRO-3
    holds every unit of the device gathered, not two, and its gradients unsharded at
    ``grad_bytes`` -- torchtitan's FSDP2 under PP does not reshard after the forward
    (``reshard_after_forward=False``, ``apply_fsdp`` in
    ``torchtitan/parallelisms/parallelize_llama.py``), and PyTorch pipelining runs every
    backward but the last without gradient sync or resharding (``backward_maybe_with_nosync``,
    ``torch/distributed/pipelining/stage.py``): FSDP2 accumulates the unsharded gradient in its
    ``reduce_dtype`` until the last microbatch reduce-scatters it."""
    w_shard_d = dp_dense if zero == 3 else 1.0
    w_shard_e = dp_expert if zero == 3 else 1.0
    g_shard_d = dp_dense if zero >= 2 else 1.0
    g_shard_e = dp_expert if zero >= 2 else 1.0
    o_shard_d = dp_dense if zero >= 1 else 1.0
    o_shard_e = dp_expert if zero >= 1 else 1.0
    # ZeRO-3 with a data-parallel group: the shards at zero3_shard_param_bytes and the
    # gathered units in flight -- the experts' too where their expert-data-parallel group
    # shards them or the shard is held in another dtype than the compute copy (FSDP wraps
    # them with the rest: its unsharded copy is a cast); without a group (cp x dp = 1)
    # nothing is sharded or gathered and every ZeRO stage costs the same
    bytes_d = param_bytes
    bytes_e = param_bytes
    gathered = 0.0
    if zero == 3 and dp_dense > 1.0:
        shard_bytes = job[JOB_ZERO3_SHARD_PARAM_BYTES]
        bytes_d = shard_bytes
        bytes_e = shard_bytes
        gathered = zero3_gather_bytes(job, dense_p, linear_p, layers, keep)
        if dp_expert > 1.0 or shard_bytes != param_bytes:
            gathered += zero3_gather_bytes(job, expert_p, expert_p, layers, keep)
        if keep:
            # the gradients accumulate unsharded until the last microbatch (an expert group
            # of one rank holds its gradients whole anyway)
            g_shard_d = 1.0
            g_shard_e = 1.0
    mem_w = dense_p / w_shard_d * bytes_d + expert_p / w_shard_e * bytes_e + gathered \
        + fp8_weight_cache_bytes(job, linear_p / w_shard_d + expert_p / w_shard_e)
    mem_g = (dense_p / g_shard_d + expert_p / g_shard_e) * grad_bytes
    mem_o = (dense_p / o_shard_d + expert_p / o_shard_e) * opt_bytes
    return mem_w, mem_g, mem_o


def pipeline_stages(mdl, job, schedule, pp, vpp):
    """Transformer layers ``(first, middle, last)`` of the first, the busiest middle and the
    last device (:func:`pipeline.pipeline_stage_layers` with the job's
    ``pipeline_edge_layers``) and whether the first device also holds the loss."""
    first, middle, last = pipeline_stage_layers(schedule, int(pp), int(vpp),
                                                int(mdl[MDL_LAYERS]),
                                                int(job[JOB_PIPELINE_EDGE_LAYERS]),
                                                int(mdl[MDL_MTP_LAYERS]),
                                                int(job[JOB_PIPELINE_FIRST_STAGE_LAYERS]),
                                                int(job[JOB_PIPELINE_LAST_STAGE_LAYERS]))
    return first, middle, last, loss_on_first_device(schedule, int(pp))


def tp_gather_bytes(job):
    """Bytes per element of a tensor-parallel all-gather under sequence parallelism: the input
    of a linear layer as its GEMM reads it. An FP8 recipe that quantizes before it gathers moves
    the FP8 copy, one byte per element plus the recipe's scales (``job.tp_gather_bytes``,
    :func:`trainscape.spec.pack.tp_gather_bytes`): Transformer Engine 1.11 ``LayerNormLinear``
    writes ``ln_out`` in FP8 from the norm kernel and all-gathers it (``gather_along_first_dim``)
    for the Q/K/V and fc1 GEMMs, and in the backward casts ``grad_output`` to FP8 before
    gathering it for the row-parallel layers (``base.py`` ``grad_output_preprocess``,
    ``transformer_engine/pytorch/module/``); torchao's tensorwise ``Float8ColwiseParallel``
    likewise casts before its all-gather. The reduce-scatters move GEMM outputs, in 16 bits
    (``comm_bytes``). 0 (no FP8, or a recipe that gathers 16 bits): ``comm_bytes``; never wider
    than it."""
    g = job[JOB_TP_GATHER_BYTES]
    if g <= 0.0 or g > job[JOB_COMM_BYTES]:
        return job[JOB_COMM_BYTES]
    return g


def tp_gather_share(job):
    """Share of a layer pass's sequence-parallel TP bytes that its two all-gathers carry (the
    two reduce-scatters carry the rest): ``g / (g + r)`` with ``g`` :func:`tp_gather_bytes` and
    ``r`` ``comm_bytes``, 1/2 without FP8. The replay of part of the collectives
    (:func:`named_dots_tp_replay`) splits the pass's time by it."""
    g = tp_gather_bytes(job)
    r = job[JOB_COMM_BYTES]
    if g + r <= 0.0:
        return 0.5
    return g / (g + r)


def tp_layer_comm_time(sys, gather_nbytes, nbytes, sp, tp, s_tp):
    """Tensor-parallel traffic of one layer pass (forward, or backward): two all-reduces of the
    layer's ``bsh`` activations (``nbytes``), or with sequence parallelism two all-gathers of
    the linear layers' inputs (``gather_nbytes``: FP8 under an FP8 recipe,
    :func:`tp_gather_bytes`) and two reduce-scatters of ``nbytes`` (Korthikanti et al.
    §4.2.2; Shoeybi et al. 2019 §3)."""
    if tp <= 1.0:
        return 0.0
    if sp:
        # a reduce-scatter costs what the all-gather of the same buffer does
        return 2.0 * (all_gather_time(sys, gather_nbytes, tp, s_tp, 1.0, 1.0, 1.0, 1.0)
                      + all_gather_time(sys, nbytes, tp, s_tp, 1.0, 1.0, 1.0, 1.0))
    return 2.0 * all_reduce_time(sys, nbytes, tp, s_tp, 1.0, 1.0, 1.0, 1.0)


def tp_sequence_copy_bytes(job, gather_nbytes, nbytes, sp, tp, overlap):
    """``(forward, backward)`` HBM bytes of one layer pass's chunk-and-concatenate copies
    around its sequence-parallel TP collectives, on a stack whose TP gathers and scatters the
    sequence along dim 1 of ``[batch, seq, hidden]`` activations (``job.tp_sequence_copy``,
    :func:`trainscape.spec.pack.tp_sequence_copy`: PyTorch DTensor, torchtitan).

    PyTorch's functional collectives run NCCL along dim 0 only: ``all_gather_tensor`` with
    ``gather_dim = 1`` concatenates the gathered chunks into a new tensor, and
    ``reduce_scatter_tensor`` with ``scatter_dim = 1`` concatenates the input's chunks before
    the call (``torch.cat(torch.chunk(...))``, ``torch/distributed/_functional_collectives.py``):
    each collective reads and writes its whole (unsharded) buffer once more. A pass holds two
    all-gathers of ``gather_nbytes`` (:func:`tp_gather_bytes`) and two reduce-scatters of
    ``nbytes``, the backward the same (the gradient of a gather is a scatter and back), so
    ``2 x 2 x (gather_nbytes + nbytes)`` bytes a pass.

    With the stack's TP overlap (AsyncTP: Inductor's ``micro_pipeline_tp`` pass fuses the
    forward's four collectives and the backward's two all-gathers with their matmuls, shard by
    shard, with no concatenated copy) only the backward's two reduce-scatters stay plain:
    ``(0, 2 x 2 x nbytes)``. Megatron-Core (``[seq, batch, hidden]``, gathering along dim 0) and
    XLA copy nothing: ``(0, 0)``; likewise without SP (all-reduces) or TP."""
    if tp <= 1.0 or not sp or job[JOB_TP_SEQUENCE_COPY] <= 0.0:
        return (0.0, 0.0)
    scatter = 4.0 * nbytes
    if overlap:
        return (0.0, scatter)
    both = 4.0 * gather_nbytes + scatter
    return (both, both)


def tp_sequence_copy_time(sys, mdl, job, row):
    """``(forward, backward)`` time of one stage pass's TP copies
    (:func:`tp_sequence_copy_bytes` of every layer of the stage), streamed over HBM
    (:func:`streaming_time`) on the compute stream, where nothing hides them."""
    bsh = row[ROW_B] * row[ROW_S] * mdl[MDL_HIDDEN]
    f, b = tp_sequence_copy_bytes(job, bsh * tp_gather_bytes(job), bsh * job[JOB_COMM_BYTES],
                                  row[ROW_SP] > 0.0, row[ROW_TP], row[ROW_TP_OVERLAP] > 0.0)
    layers = row[ROW_STAGE_LAYERS]
    return (layers * streaming_time(sys, f), layers * streaming_time(sys, b))


def exposed(comm, window, overlap):
    """Communication left on the critical path after overlapping it with ``window`` of compute."""
    if not overlap:
        return comm
    return max(0.0, comm - window)


def dp_bucket_params(job, dp_cp):
    """Parameters per data-parallel gradient bucket for ``dp_cp`` data-parallel ranks (context
    parallelism included): ``max(dp_bucket_min_params, dp_bucket_params_per_rank x dp_cp)``.
    Megatron-Core's default is ``max(40000000, 1000000 x dp_cp)`` (``DistributedDataParallel``,
    ``DistributedDataParallelConfig.bucket_size``: "larger DP sizes need larger buckets to ensure
    collectives do not become latency-bound"); 0: no bucket limit."""
    per_rank = job[JOB_DP_BUCKET_PARAMS_PER_RANK] * dp_cp
    if per_rank > job[JOB_DP_BUCKET_MIN_PARAMS]:
        return per_rank
    return job[JOB_DP_BUCKET_MIN_PARAMS]


def dp_last_bucket_share(params, bucket, chunks):
    """Share of a device's data-parallel gradient traffic in the last piece it reduces: its
    ``params`` split into buckets of ``bucket`` parameters. Megatron-Core buckets only a
    device's first model chunk; the other chunks of an interleaved (or V) stage reduce in one
    piece each, their gradients complete earlier in the drain (``disable_bucketing`` for model
    chunks after the first, ``megatron/training/training.py``). So the first chunk's
    ``params / chunks`` split into ``n = ceil(params / (chunks x bucket))`` buckets, the last
    reduced piece being ``1 / (chunks x n)`` of the traffic. 0 with no bucket limit (``bucket``
    0): the collectives split as finely as the overlap needs."""
    if bucket <= 0.0 or params <= 0.0:
        return 0.0
    if chunks < 1.0:
        chunks = 1.0
    n = math.ceil(params / (chunks * bucket))
    return 1.0 / (chunks * n)


def bucketed_exposed(comm, window, share, overlap):
    """Time a data-parallel collective of ``comm`` adds after a compute ``window`` when it runs
    bucket by bucket, ``N = 1 / share`` equal buckets that become ready evenly over the window
    (a bucket's gradients once its layers' backward is done; the next bucket's parameter
    all-gather once a bucket's forward starts), each collective after the one before: the last
    ends at ``max(window + comm/N, window/N + comm)``, so

        max(share·comm, comm − window·(1 − share))

    is exposed. The last bucket has nothing left to hide behind (the first, for an all-gather
    before the forward): with one bucket all of ``comm`` (Megatron-Core's ``overlap_grad_reduce``
    cannot overlap a single bucket), with ``share`` 0 ``max(0, comm − window)``
    (:func:`exposed`). That is :func:`overlapped_exposed` with ``f = share`` over the window's
    first ``1 − share`` (the last bucket becomes ready only at its end) and no slowdown. Not
    overlapped (``dp_overlap`` off): ``comm``."""
    if not overlap:
        return comm
    return overlapped_exposed(comm, window * (1.0 - share), share, 0.0)


def overlapped_exposed(comm, window, exposed_fraction, slowdown):
    """Time a communication ``comm`` adds to a compute ``window`` it is overlapped with, when a
    fraction of it cannot overlap and the overlapped compute runs slower:

        max(f·C, C − W) + σ·min((1 − f)·C, W)

    Decomposing a GEMM and its dependent collective into ``n`` chunks pipelines chunk ``i``'s
    communication with chunk ``i±1``'s compute, but the first (all-gather) or last
    (reduce-scatter) chunk has nothing to hide behind: ``f ≈ 1/n`` (Wang et al., ASPLOS'23,
    "Overlap Communication with Dependent Computation via Decomposition in Large Deep Learning
    Models"). While
    communication kernels run they hold SMs the GEMM would use (Transformer Engine userbuffers:
    ``num_sm`` = 16 SMs for the ``pipeline``/``bulk`` methods, ``set_sm_margin``;
    ``transformer_engine/pytorch/module/base.py`` ``initialize_ub``), so the overlapped part of
    the window stretches by ``σ``. With ``f = σ = 0`` this is :func:`exposed`'s ``max(0, C − W)``.
    """
    if comm <= 0.0:
        return 0.0
    hidden = (1.0 - exposed_fraction) * comm
    return max(exposed_fraction * comm, comm - window) + slowdown * min(hidden, window)


def tp_exposed(sys, comm, window, overlap):
    """Tensor-parallel traffic ``comm`` of one stage pass left on the critical path: all of it
    without overlap, else :func:`overlapped_exposed` with the GPU's ``tp_overlap_exposed`` and
    ``tp_overlap_slowdown`` (Megatron-LM ``--tp-comm-overlap``: TE userbuffers)."""
    if not overlap:
        return comm
    return overlapped_exposed(comm, window, sys[SYS_TP_OVERLAP_EXPOSED],
                              sys[SYS_TP_OVERLAP_SLOWDOWN])


def cp_ring_exposed_forward(sys, step, t_attn, cp):
    """Exposed ring-attention communication of one layer's forward. Megatron-Core's context
    parallelism (TE ``AttnFuncWithCPAndKVP2P``, ``transformer_engine/pytorch/attention.py``)
    runs ``cp`` attention steps; before step ``i`` computes it posts the P2P of the K/V block
    step ``i+1`` needs, so ``cp − 1`` transfers of ``step`` seconds each overlap one step of
    attention. With the load-balanced causal split (each rank holds chunks ``j`` and
    ``2cp−1−j``) every step computes half a block, ``t_attn / cp``. Per overlapped step:
    :func:`overlapped_exposed` with nothing unhidable and the P2P kernels' ``cp_overlap_slowdown``.
    """
    return (cp - 1.0) * overlapped_exposed(step, t_attn / cp, 0.0, sys[SYS_CP_OVERLAP_SLOWDOWN])


def cp_ring_exposed_backward(sys, step, t_attn_bwd, cp):
    """Exposed ring communication of one layer's backward: each step sends K/V onwards and the
    partial dK/dV back (twice a forward step's bytes) behind ``t_attn_bwd / cp`` of attention
    backward, and the last dK/dV hop to its owner follows the last step with nothing to hide
    behind (TE ``AttnFuncWithCPAndKVP2P.backward``)."""
    return (cp - 1.0) * overlapped_exposed(2.0 * step, t_attn_bwd / cp, 0.0,
                                           sys[SYS_CP_OVERLAP_SLOWDOWN]) + step


# =============================================================================================
# One configuration, in four stages
# =============================================================================================
# A configuration is a *core row* (tp cp pp dp ep mbs vpp schedule sp tp_overlap: the fields
# every compute and memory term reads) plus four *free* fields. The model is costed in stages,
# each reading only the stages before it:
#     row_terms(core row) -> order_terms(+ order) -> recompute_terms(+ recompute)
#     -> data_parallel_comm(+ zero) -> finish_config(+ dp_overlap)
# so a caller that holds a stage fixed may reuse it: a design space walks every free field under
# one row, and a batch meets the same rows and (row, order) pairs again and again. Stages pass
# plain float tuples indexed by the ROW_* / ORD_* / REC_* constants below (a memo may keep them
# as array rows instead: indexing reads the same). Reuse changes no bit: every value is
# computed by the same expressions in the same order whoever calls.

# row_terms (at most 30 fields: CPython builds a longer tuple display through a list, which
# numba cannot compile)
ROW_TP = 0
ROW_CP = 1
ROW_PP = 2
ROW_DP = 3
ROW_EP = 4
ROW_DPX = 5  # expert data parallelism outside CP: dp / ep (folded: tp * dp / ep)
ROW_B = 6  # sequences per microbatch (mbs)
ROW_VPP = 7
ROW_SCHEDULE = 8
ROW_SP = 9
ROW_TP_OVERLAP = 10
ROW_M = 11  # microbatches per step
ROW_S = 12  # tokens of a sequence on one context-parallel rank
ROW_DENSE_LAYERS = 13  # per pipeline stage
ROW_MOE_LAYERS = 14
ROW_STAGE_LAYERS = 15
ROW_T_CORE = 16  # attention core time of one layer
ROW_GEMM_F = 17  # GEMM time of a stage's forward
ROW_CORE_F = 18
ROW_MEM_F = 19
ROW_F_COMPUTE = 20
ROW_B_COMPUTE = 21  # before recomputation
ROW_W_COMPUTE = 22
ROW_DENSE_PARAMS = 23  # per GPU, before ZeRO sharding
ROW_EXPERT_PARAMS = 24
ROW_HW_FWD = 25  # hardware FLOPs of one microbatch's forward, whole model
ROW_HW_CORE = 26  # executed attention core FLOPs of one layer on one GPU
ROW_MODEL_FLOPS = 27  # per step
ROW_ATTN_GEMM_F = 28  # Q/K/V + output projection GEMM time of a stage's forward
ROW_MLP_GEMM_F = 29  # dense MLP + expert MLP GEMM time of a stage's forward (no router)
ROW_DENSE_LINEAR_PARAMS = 30  # the linear-layer weights among ROW_DENSE_PARAMS (same stage)
N_ROW = 31

# order_terms
ORD_S_TP = 0  # placement strides
ORD_S_CP = 1
ORD_S_EP = 2
ORD_S_DP = 3
ORD_S_PP = 4
ORD_TP_PASS = 5  # tensor-parallel traffic of one stage pass
ORD_CP_STEP = 6  # one ring step of context parallelism
ORD_A2A = 7  # one expert-parallel dispatch + combine pair (moe_all_to_all_pair_time)
ORD_PP_COMM = 8  # pipeline transfers on the critical path, per step
N_ORD = 9

# recompute_terms
REC_F_STAGE = 0
REC_B_STAGE = 1
REC_W_STAGE = 2
REC_COMPUTE = 3
REC_TP_COMM = 4
REC_CP_COMM = 5
REC_EP_COMM = 6
REC_BUBBLE = 7
REC_MEM_ACT = 8  # activation memory of the first stage
REC_HW_FLOPS = 9
REC_MEM_ACT_MID = 10  # the busiest middle stage's (REC_MEM_ACT: the first stage's)
REC_MEM_ACT_LAST = 11
REC_OFFLOAD = 12  # exposed activation offload transfers per step (job.offload_activations)
N_REC = 13


def dots_recompute_time(core_f, mem_f, gemm_redo):
    """Backward time the "dots" policy adds to a stage pass (:func:`dots_layer_bytes`): it
    re-runs what it did not save -- the memory-bound kernels (norms, activation functions,
    residual adds, and the FP8 casts of the linear inputs the weight gradients need: ``mem_f``)
    and the attention core's forward (``core_f``; its output and log-sum-exp feed the
    attention backward) -- but no GEMM, since their outputs are kept (JAX
    ``checkpoint_policies.dots_saveable``). The recomputation runs inside the backward pass
    (XLA fuses the rematerialized ops into the backward program), so no extra per-layer pass
    overhead is charged, and no TP or EP collective is replayed: the saved GEMM outputs are the
    reduced ones; the attention forward's context-parallel ring is (see
    :func:`recompute_terms`). The named-dot subsets (:func:`named_dots_policy`) also re-run the
    GEMMs whose outputs they drop, ``gemm_redo`` (:func:`named_dots_gemm_redo`; 0 under
    "dots"), and replay the TP collectives around them (:func:`named_dots_tp_replay`); an MoE
    combine replayed for a re-run expert fc2 is neglected (no EP all-to-all is replayed).
    ``core_f`` is 0 where the policy keeps the attention output
    (:func:`named_dots_core_saved`)."""
    return core_f + mem_f + gemm_redo


def named_dots_redo_flops(mdl, b, seq, recompute):
    """Hardware FLOPs of one microbatch's forward GEMMs, whole model, that a named-dot policy
    re-runs (:func:`named_dots_gemm_redo` of the attention projections of every layer and the
    MLPs of the dense and MoE layers: :func:`attention_projection_flops`, :func:`mlp_flops`,
    :func:`moe_mlp_flops`)."""
    h = mdl[MDL_HIDDEN]
    layers = mdl[MDL_LAYERS]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    n_moe = model_moe_layers(mdl)
    attn = layers * attention_projection_flops(b, seq, h, mdl[MDL_HEADS], mdl[MDL_KV_HEADS],
                                               mdl[MDL_HEAD_DIM])
    mlp = (layers - n_moe) * mlp_flops(b, seq, h, mdl[MDL_FFN_HIDDEN], swiglu) \
        + n_moe * moe_mlp_flops(b, seq, h, mdl[MDL_EXPERT_FFN_HIDDEN], mdl[MDL_TOP_K],
                                mdl[MDL_SHARED_EXPERTS], swiglu)
    return named_dots_gemm_redo(attn, mlp, mdl[MDL_HEADS] * mdl[MDL_HEAD_DIM],
                                mdl[MDL_KV_HEADS] * mdl[MDL_HEAD_DIM], swiglu, recompute)


def layer_activations(mdl, job, s, b, tp, sp, recompute, lin_bytes):
    """Activation bytes of one dense and of one MoE layer, per microbatch on one GPU
    (:func:`layer_activation_bytes`, :func:`moe_layer_activation_bytes`), with the linear-layer
    inputs at ``lin_bytes`` per element; selective recompute less what the job's recompute
    modules drop (:func:`recompute_module_savings`)."""
    h = mdl[MDL_HIDDEN]
    heads = mdl[MDL_HEADS]
    kv_heads = mdl[MDL_KV_HEADS]
    head_dim = mdl[MDL_HEAD_DIM]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    flash = job[JOB_FLASH_ATTENTION] > 0.0
    act_bytes = job[JOB_ACTIVATION_BYTES]
    dropout = job[JOB_DROPOUT] > 0.0
    dense = layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, mdl[MDL_FFN_HIDDEN],
                                   swiglu, tp, sp, recompute, flash, act_bytes, dropout,
                                   lin_bytes)
    moe = moe_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim,
                                     mdl[MDL_EXPERT_FFN_HIDDEN], mdl[MDL_TOP_K],
                                     mdl[MDL_SHARED_EXPERTS], swiglu, tp, sp, recompute, flash,
                                     act_bytes, dropout, lin_bytes)
    if recompute == RECOMPUTE_SELECTIVE:
        flags = recompute_module_flags(job)
        saved = recompute_module_savings(s, b, h, mdl[MDL_FFN_HIDDEN],
                                         mdl[MDL_EXPERT_FFN_HIDDEN], mdl[MDL_TOP_K],
                                         mdl[MDL_SHARED_EXPERTS], swiglu, tp, sp, act_bytes,
                                         lin_bytes, dropout, flags[0], flags[1], flags[2],
                                         flags[3], flags[4])
        dense -= saved[0]
        moe -= saved[1]
    return dense, moe


def full_recompute_share(job, stage_layers, schedule, pp, vpp):
    """Share of a device's transformer layers that full recompute checkpoints: all of them, or
    with ``job.recompute_layers`` N > 0 the first N layers of each of the device's model chunks
    (:func:`pipeline.schedule_chunks`; one without a pipeline, where the schedule and its
    chunks are moot), the others keeping every activation -- Megatron-LM's
    ``--recompute-granularity full --recompute-method block --recompute-num-layers N``
    (``TransformerBlock._checkpointed_forward``: "block" checkpoints the first N layers of the
    chunk and runs the rest plainly; the default "uniform" with N = 1 is what full recompute
    costs here). ``N / (stage_layers / chunks)``, at most 1: the device's layers are spread
    evenly over its chunks (an uneven split checkpoints a slightly different share)."""
    n = job[JOB_RECOMPUTE_LAYERS]
    if n <= 0.0 or stage_layers <= 0.0:
        return 1.0
    chunks = 1.0
    if pp > 1.0:
        chunks = float(schedule_chunks(schedule, vpp))
    per_chunk = stage_layers / chunks
    if n >= per_chunk:
        return 1.0
    return n / per_chunk


def evaluate_config(sys, mdl, job, cfg, i, out):
    """Cost configuration column ``i`` of ``cfg`` and write every result column of ``out[:, i]``.

    Returns the status code written to ``out[OUT_STATUS, i]``.
    """
    code = config_error(sys, mdl, job, cfg, i)
    if code != 0:
        return write_invalid(out, i, code)
    row = row_terms(sys, mdl, job, cfg, i)
    ordt = order_terms(sys, mdl, job, row, cfg[CFG_ORDER, i])
    rect = recompute_terms(sys, mdl, job, row, ordt, cfg[CFG_RECOMPUTE, i])
    zero = cfg[CFG_ZERO, i]
    dpc = data_parallel_comm(sys, job, row, ordt, zero)
    return finish_config(sys, mdl, job, row, ordt, rect, dpc[0], dpc[1], zero,
                         cfg[CFG_DP_OVERLAP, i] == 1, out, i)


def row_terms(sys, mdl, job, cfg, i):
    """Every term of a valid configuration that reads only its core fields (see ROW_*)."""
    tp = float(cfg[CFG_TP, i])
    cp = float(cfg[CFG_CP, i])
    pp = float(cfg[CFG_PP, i])
    dp = float(cfg[CFG_DP, i])
    ep = float(cfg[CFG_EP, i])
    mbs = float(cfg[CFG_MBS, i])
    vpp = float(cfg[CFG_VPP, i])
    schedule = cfg[CFG_SCHEDULE, i]
    sp = cfg[CFG_SP, i] == 1

    h = mdl[MDL_HIDDEN]
    heads = mdl[MDL_HEADS]
    kv_heads = mdl[MDL_KV_HEADS]
    head_dim = mdl[MDL_HEAD_DIM]
    layers = mdl[MDL_LAYERS]
    vocab = mdl[MDL_VOCAB]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    experts = mdl[MDL_EXPERTS]
    top_k = mdl[MDL_TOP_K]
    expert_ffn = mdl[MDL_EXPERT_FFN_HIDDEN]
    shared = mdl[MDL_SHARED_EXPERTS]
    n_moe = model_moe_layers(mdl)

    seq = job[JOB_SEQ_LEN]
    global_batch = job[JOB_GLOBAL_BATCH]
    flash = job[JOB_FLASH_ATTENTION] > 0.0
    m = global_batch / (dp * mbs)
    s = seq / cp  # tokens of a sequence on one context-parallel rank
    b = mbs
    # expert GEMMs at the attention's TP or, folded, unsplit: a rank's experts then see the
    # tokens of the stage's tp x dp attention ranks spread over ep ranks, b x s x top_k / tp
    # copies per microbatch -- the same FLOPs per rank as the TP-split experts (expert_mlp)
    etp = expert_tp_degree(tp, dp, ep)

    # ---- compute per layer, per microbatch, on one GPU ----------------------------------------
    split = tp * cp
    proj = attention_projection_flops(b, seq, h, heads, kv_heads, head_dim) / split
    core_hw = executed_attention_core_flops(attention_core_flops(b, seq, heads, head_dim) / split,
                                            flash)
    dense_mlp = mlp_flops(b, seq, h, mdl[MDL_FFN_HIDDEN], swiglu) / split
    routed = router_flops(b, seq, h, experts) / split
    expert_mlp = moe_mlp_flops(b, seq, h, expert_ffn, top_k, shared, swiglu) / split
    t_proj = linear_gemm_time(sys, proj, 2.0)
    # each attention kernel (one per ring step with CP) loops over the K/V of s = seq / cp tokens
    t_core = attention_core_time(sys, core_hw, flash, s, head_dim)
    core_hw, t_core = windowed_attention_core(sys, core_hw, t_core, flash, seq, s, mdl)
    t_dense_mlp = linear_gemm_time(sys, dense_mlp, 2.0)
    t_expert_mlp = linear_gemm_time(sys, expert_mlp, expert_gemm_count(job, experts / ep, shared))
    t_moe_mlp = gemm_time(sys, routed, 1.0) + t_expert_mlp
    # elementwise kernels touch about every stored activation once forward, twice backward; they
    # read and write the 16-bit tensors, so the linear-layer inputs count at activation_bytes
    # here even in an fp8 job (the FP8 copies are written by the casts, linear_cast_time)
    act_dense, act_moe = layer_activations(mdl, job, s, b, tp, sp, RECOMPUTE_NONE,
                                           job[JOB_ACTIVATION_BYTES])
    q_dim = heads * head_dim
    kv_dim = kv_heads * head_dim
    copies_moe = top_k + shared
    # unfused (eager) norms, rotary embedding and SwiGLU move more bytes than fused kernels
    eager = job[JOB_EAGER_ELEMENTWISE]
    eager_dense = eager * eager_elementwise_bytes(s, b, h, q_dim, kv_dim, mdl[MDL_FFN_HIDDEN],
                                                  1.0, swiglu, tp, sp)
    eager_moe = eager * eager_elementwise_bytes(s, b, h, q_dim, kv_dim, expert_ffn, copies_moe,
                                                swiglu, tp, sp)
    t_mem_dense = memory_bound_time(sys, act_dense) + streaming_time(sys, eager_dense)
    t_mem_moe = memory_bound_time(sys, act_moe) + streaming_time(sys, eager_moe)
    # quantizing the FP8 linear layers' inputs (forward) and output gradients (backward)
    t_cast_f_dense = linear_cast_time(
        sys, job, linear_cast_elements_forward(b, s, h, q_dim, mdl[MDL_FFN_HIDDEN], 1.0, tp, sp))
    t_cast_b_dense = linear_cast_time(
        sys, job, linear_cast_elements_backward(b, s, h, q_dim, kv_dim, mdl[MDL_FFN_HIDDEN],
                                                swiglu, 1.0, tp, sp))
    t_cast_f_moe = linear_cast_time(
        sys, job, linear_cast_elements_forward(b, s, h, q_dim, expert_ffn, copies_moe, tp, sp))
    t_cast_b_moe = linear_cast_time(
        sys, job, linear_cast_elements_backward(b, s, h, q_dim, kv_dim, expert_ffn, swiglu,
                                                copies_moe, tp, sp))
    # Megatron-Core's eager expert-bias add rides with the MoE layer's casts: forward work a
    # recomputed forward replays, and its gradient in the backward
    if job[JOB_EAGER_EXPERT_BIAS] > 0.0 and n_moe > 0.0:
        routed_el = eager_expert_bias_elements(b, seq, top_k, h, split)
        t_cast_f_moe += eager_expert_bias_forward_time(sys, routed_el, experts / ep)
        t_cast_b_moe += eager_expert_bias_backward_time(sys, routed_el, experts / ep)
    overhead = sys[SYS_LAYER_OVERHEAD_S]
    attn_bwd = attention_backward_factor(flash)

    # ---- the pipeline's stages: first (embedding), busiest middle, last (output and loss) ----
    d1, m1, d2, m2, d3, m3, loss_first = stage_layer_splits(mdl, job, schedule, pp, vpp)
    act_bytes = job[JOB_ACTIVATION_BYTES]
    t_embed = embedding_time(sys, b, s, h, act_bytes)
    # the last stage also projects to the vocabulary (Megatron places it there, in BF16)
    t_logits = gemm_time(sys, logits_flops(b, s, h, vocab) / tp, 1.0)
    t_ce = cross_entropy_time(sys, b, s, vocab, tp, act_bytes, job[JOB_LOGITS_EXTRA_BYTES])
    # each multi-token prediction block embeds the shifted tokens, projects 2h -> h and passes
    # the output head and the loss once more (its transformer layer is among the stage's)
    mtp = mdl[MDL_MTP_LAYERS]
    if mtp > 0.0:
        t_logits = (1.0 + mtp) * t_logits \
            + mtp * linear_gemm_time(sys, mtp_projection_flops(b, s, h) / tp, 1.0)
        t_ce = (1.0 + mtp) * t_ce + mtp * t_embed
    last_embed = pp <= 1.0
    st1 = stage_pass_times(d1, m1, t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                           t_mem_moe, t_cast_f_dense, t_cast_f_moe, t_cast_b_dense,
                           t_cast_b_moe, attn_bwd, overhead, True, loss_first, t_embed,
                           t_logits, t_ce)
    st2 = stage_pass_times(d2, m2, t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                           t_mem_moe, t_cast_f_dense, t_cast_f_moe, t_cast_b_dense,
                           t_cast_b_moe, attn_bwd, overhead, False, False, t_embed, t_logits,
                           t_ce)
    st3 = stage_pass_times(d3, m3, t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                           t_mem_moe, t_cast_f_dense, t_cast_f_moe, t_cast_b_dense,
                           t_cast_b_moe, attn_bwd, overhead, last_embed, True, t_embed,
                           t_logits, t_ce)
    # the slowest stage sets every device's pace (the schedules' closed forms take one F, B, W):
    # the last unless another one's F + B + W is larger
    st = st3
    dense_layers = d3
    moe_layers = m3
    if st1[3] + st1[4] + st1[5] > st[3] + st[4] + st[5]:
        st = st1
        dense_layers = d1
        moe_layers = m1
    if st2[3] + st2[4] + st2[5] > st[3] + st[4] + st[5]:
        st = st2
        dense_layers = d2
        moe_layers = m2
    gemm_f = st[0]
    core_f = st[1]
    mem_f = st[2]
    f_compute = st[3]
    b_compute = st[4]
    w_compute = st[5]
    stage_layers = dense_layers + moe_layers
    attn_gemm_f = stage_layers * t_proj
    mlp_gemm_f = dense_layers * t_dense_mlp + moe_layers * t_expert_mlp

    # ---- parameters per GPU: the largest stage's (data-parallel traffic, optimizer step) -------
    copies = parameter_copies(schedule)
    attn_p = attention_params(h, heads, kv_heads, head_dim)
    dense_layer_p = attn_p + mlp_params(h, mdl[MDL_FFN_HIDDEN], swiglu)
    moe_layer_p = attn_p + h * experts + shared * mlp_params(h, expert_ffn, swiglu)
    expert_layer_p = (experts / ep) * mlp_params(h, expert_ffn, swiglu)
    emb_p = embedding_params(vocab, h)
    pa = stage_params(d1, m1, dense_layer_p, moe_layer_p, expert_layer_p, True, loss_first,
                      emb_p, tp, etp, copies, mtp_stage_params(mdl, emb_p, True))
    pb = stage_params(d2, m2, dense_layer_p, moe_layer_p, expert_layer_p, False, False,
                      emb_p, tp, etp, copies, 0.0)
    pc = stage_params(d3, m3, dense_layer_p, moe_layer_p, expert_layer_p, last_embed, True,
                      emb_p, tp, etp, copies, mtp_stage_params(mdl, emb_p, last_embed))
    # the linear-layer weights among a stage's dense ones (the weight all-gather's FP8 part)
    lin = layer_linear_params(mdl, swiglu)
    dense_params = pc[0]
    expert_params = pc[1]
    linear_params = stage_linear_params(d3, m3, lin, tp, copies)
    if pa[0] + pa[1] > dense_params + expert_params:
        dense_params = pa[0]
        expert_params = pa[1]
        linear_params = stage_linear_params(d1, m1, lin, tp, copies)
    if pb[0] + pb[1] > dense_params + expert_params:
        dense_params = pb[0]
        expert_params = pb[1]
        linear_params = stage_linear_params(d2, m2, lin, tp, copies)

    # ---- FLOPs ----------------------------------------------------------------------------------
    model_flops = model_flops_per_sequence(mdl, seq) * global_batch
    hw_per_layer_f = (proj + core_hw) * split
    mtp_moe = mtp_moe_blocks(mdl)
    hw_fwd = (
        (layers - n_moe + mtp - mtp_moe) * (hw_per_layer_f + dense_mlp * split)
        + (n_moe + mtp_moe) * (hw_per_layer_f + (routed + expert_mlp) * split)
        + output_head_flops(mdl, b, seq)
    )

    # two tuples joined: a literal of more than 30 items compiles to LIST_TO_TUPLE (CPython
    # 3.9+), an op-code numba does not support
    head = (tp, cp, pp, dp, ep, expert_data_parallel_degree(tp, dp, ep), b, vpp, float(schedule), 1.0 if sp else 0.0,
            1.0 if cfg[CFG_TP_OVERLAP, i] == 1 else 0.0, m, s, dense_layers, moe_layers,
            stage_layers, t_core, gemm_f, core_f, mem_f, f_compute, b_compute, w_compute,
            dense_params, expert_params, hw_fwd, core_hw, model_flops, attn_gemm_f, mlp_gemm_f)
    return head + (linear_params,)


def moe_all_to_all_pair_time(sys, mdl, job, tokens, ep, s_ep):
    """One MoE dispatch plus one combine all-to-all of ``tokens`` tokens per rank over an
    expert-parallel group of ``ep`` ranks ``s_ep`` apart.

    Each direction moves every token's ``top_k`` copies of the hidden state (Lepikhin et al.
    2020, GShard §2; Megatron-Core ``MoEAlltoAllTokenDispatcher``): dispatch at
    ``dispatch_bytes`` per element (FP8 with its scales when training in FP8), combine at
    ``combine_bytes`` (BF16) -- DeepSeek-V3 tech report (arXiv 2412.19437) §3.3.2. Node-limited
    routing (``max_route_nodes``, §2.1.2) caps the copies that leave a node
    (:func:`~trainscape.model.collectives.node_limited_share`).
    """
    copies_bytes = tokens * mdl[MDL_TOP_K] * mdl[MDL_HIDDEN]
    top_k = mdl[MDL_TOP_K]
    limit = mdl[MDL_MAX_ROUTE_NODES]
    dispatch = routed_all_to_all_time(sys, copies_bytes * job[JOB_DISPATCH_BYTES], top_k, limit,
                                      ep, s_ep, 1.0, 1.0, 1.0, 1.0)
    combine = routed_all_to_all_time(sys, copies_bytes * job[JOB_COMBINE_BYTES], top_k, limit,
                                     ep, s_ep, 1.0, 1.0, 1.0, 1.0)
    return dispatch + combine


def folded_moe_all_to_all_pair_time(sys, mdl, job, b, s, tp, s_tp, dp, s_dp, ep, sp):
    """:func:`moe_all_to_all_pair_time` of a folded layer (:func:`moe_folded`, expert TP 1): each
    rank dispatches its ``b * s / tp`` share of the microbatch's tokens over the EP group of
    :func:`folded_ep_groups`.

    With sequence parallelism the tokens are already split over TP after the attention's
    reduce-scatter (Megatron-Core requires SP for MoE with TP > 1 and EP > 1,
    ``arguments.py``); without it every TP rank holds all ``b * s`` tokens, dispatches a
    ``1 / tp`` slice (no traffic) and all-gathers the combined output over TP
    (``comm_bytes`` per element), counted here once per pass like the pair."""
    g = folded_ep_groups(tp, s_tp, dp, s_dp, ep)
    copies_bytes = b * s / tp * mdl[MDL_TOP_K] * mdl[MDL_HIDDEN]
    top_k = mdl[MDL_TOP_K]
    limit = mdl[MDL_MAX_ROUTE_NODES]
    dispatch = routed_all_to_all_time(sys, copies_bytes * job[JOB_DISPATCH_BYTES], top_k, limit,
                                      g[0], g[1], g[2], g[3], 1.0, 1.0)
    combine = routed_all_to_all_time(sys, copies_bytes * job[JOB_COMBINE_BYTES], top_k, limit,
                                     g[0], g[1], g[2], g[3], 1.0, 1.0)
    gather = 0.0
    if not sp:
        gather = all_gather_time(sys, b * s * mdl[MDL_HIDDEN] * job[JOB_COMM_BYTES], tp, s_tp,
                                 1.0, 1.0, 1.0, 1.0)
    return dispatch + combine + gather


def order_terms(sys, mdl, job, row, order):
    """Every communication time of a row that depends on the placement ``order`` but not on
    recompute, zero or dp_overlap (see ORD_*)."""
    tp = row[ROW_TP]
    cp = row[ROW_CP]
    pp = row[ROW_PP]
    b = row[ROW_B]
    s = row[ROW_S]
    h = mdl[MDL_HIDDEN]
    kv_heads = mdl[MDL_KV_HEADS]
    comm_bytes = job[JOB_COMM_BYTES]
    ep = row[ROW_EP]
    fold = moe_folded(tp, row[ROW_DP], ep)
    if fold:
        # the attention's grid: tp x cp x dp x pp (EP folds over the TP x DP ranks)
        s_tp, s_cp, s_ep, s_dp, s_pp = placement_strides(order, tp, cp, 1.0, row[ROW_DP], pp)
    else:
        s_tp, s_cp, s_ep, s_dp, s_pp = placement_strides(order, tp, cp, ep, row[ROW_DPX], pp)
    # tensor parallelism: every layer of the stage, one pass
    sp = row[ROW_SP] > 0.0
    tp_bytes = b * s * h * comm_bytes
    tp_pass = row[ROW_STAGE_LAYERS] * tp_layer_comm_time(sys, b * s * h * tp_gather_bytes(job),
                                                         tp_bytes, sp, tp, s_tp)
    # context parallelism: one step of the ring exchange of K and V
    cp_step = 0.0
    if cp > 1.0:
        kv_local = kv_heads / tp if kv_heads >= tp else 1.0
        kv_chunk = 2.0 * b * s * kv_local * mdl[MDL_HEAD_DIM] * comm_bytes
        cp_step = p2p_time(sys, kv_chunk, cp, s_cp, 1.0, 1.0, 1.0, 1.0)
    # expert parallelism: one dispatch and one combine all-to-all
    a2a = 0.0
    if row[ROW_MOE_LAYERS] > 0.0 and ep > 1.0 and fold:
        a2a = folded_moe_all_to_all_pair_time(sys, mdl, job, b, s, tp, s_tp, row[ROW_DP], s_dp,
                                              ep, sp)
    elif row[ROW_MOE_LAYERS] > 0.0 and ep > 1.0:
        a2a = moe_all_to_all_pair_time(sys, mdl, job, b * s / tp if sp else b * s, ep, s_ep)
    # pipeline: stage-to-stage transfers on the critical path
    pp_comm = 0.0
    if pp > 1.0:
        pp_bytes = b * s * h * comm_bytes / tp  # Megatron scatter/gather over TP ranks
        # each boundary at the tier it crosses (pipeline_boundary_transfers); fill and drain
        # plus a steady-state stall past the compute that hides a transfer (recompute only
        # lengthens the backward, so the row's compute is the smallest window)
        schedule = int(row[ROW_SCHEDULE])
        vpp = row[ROW_VPP]
        tr = pipeline_boundary_transfers(sys, pp_bytes, pp, s_pp)
        hide = pipeline_hide_window(row[ROW_F_COMPUTE], row[ROW_B_COMPUTE], row[ROW_W_COMPUTE],
                                    schedule_chunks(schedule, vpp))
        pp_comm = pipeline_comm_time(schedule, pp, vpp, row[ROW_M], tr[0], tr[1], tr[2], hide)
    return (s_tp, s_cp, s_ep, s_dp, s_pp, tp_pass, cp_step, a2a, pp_comm)


def largest_layer_activation_bytes(dense, moe, act_dense, act_moe):
    """Saved activation bytes of one microbatch in the largest layer a stage holds: the dense
    layer's when it holds any dense layer (``dense > 0``), the MoE layer's when it holds any MoE
    layer and that is larger (what one slot of :func:`offloaded_activation_memory`'s double
    buffer must take)."""
    largest = 0.0
    if dense > 0.0:
        largest = act_dense
    if moe > 0.0 and act_moe > largest:
        largest = act_moe
    return largest


def offloaded_activation_memory(stage_bytes, share, layer_bytes):
    """Activation bytes a stage keeps in HBM when ``share`` (0..1) of its layers offload their
    saved activations to host memory (``job.offload_activations``): the rest of its stored
    activations, ``stage_bytes * (1 - share)``, plus a double buffer of two layers of one
    microbatch (``2 * layer_bytes``, :func:`largest_layer_activation_bytes`) -- the layer whose
    activations are being copied out (forward) or prefetched (backward) beside the one being
    computed. Sources: Megatron-Core ``--cpu-offloading --cpu-offloading-num-layers N`` through
    Transformer Engine ``get_cpu_offload_context`` (``transformer_engine/pytorch/
    cpu_offload.py``, ``AsyncDoubleBufferGroupOffloadHandler``: offload and reload overlapped
    with the next layer's compute through double buffering); Calculon (Isaev et al., SC'23,
    ``calculon/llm/llm.py`` ``_get_mem_cap_reqs``: with activation offload tier 1 keeps only the
    block in flight, ``get_act_space_min``, the rest goes to tier 2). The share is continuous
    (Megatron offloads a whole number of layers N: share = N / stage layers). Without offload
    (share 0) the stage's bytes unchanged."""
    if share > 0.0:
        return stage_bytes * (1.0 - share) + 2.0 * layer_bytes
    return stage_bytes


def offload_transfer_exposed(nbytes, link_bandwidth, window):
    """Host-link time of one pass's offload traffic (``nbytes`` over ``link_bandwidth`` bytes/s,
    one direction) left on the critical path beside ``window`` of that pass's compute: copies
    run on their own stream, prefetched a layer ahead, so only what outlasts the compute is
    exposed, ``max(0, nbytes / bandwidth - window)``. Calculon (Isaev et al., SC'23,
    ``calculon/llm/llm.py``: ``_baseblock_fw_offload_overhead = max(0, fw_offload_time + ... -
    fw_time)``, alike for the backward). The forward's copies go device-to-host and the
    backward's host-to-device, each direction at ``cluster.host_to_device_GBps`` (the link is
    full duplex)."""
    return max(0.0, nbytes / link_bandwidth - window)


def recompute_module_flags(job):
    """The job's Megatron-Core recompute modules as flags: ``(layernorm, moe_act, mlp, moe,
    shared_experts)``."""
    return (job[JOB_RECOMPUTE_LAYERNORM] > 0.0, job[JOB_RECOMPUTE_MOE_ACT] > 0.0,
            job[JOB_RECOMPUTE_MLP] > 0.0, job[JOB_RECOMPUTE_MOE] > 0.0,
            job[JOB_RECOMPUTE_SHARED_EXPERTS] > 0.0)


def recompute_module_gemm_time(sys, mdl, job, row):
    """GEMM time one microbatch's backward spends on a stage re-running the blocks the
    checkpointing recompute modules dropped: each dense layer's MLP (``mlp``: fc1 and fc2 on the
    linear layers' curve), each MoE layer's router and experts (``moe``), or only its shared
    experts (``shared_experts``) -- the forward's GEMMs of :func:`row_terms` once more."""
    flags = recompute_module_flags(job)
    b = row[ROW_B]
    seq = job[JOB_SEQ_LEN]
    split = row[ROW_TP] * row[ROW_CP]
    h = mdl[MDL_HIDDEN]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    expert_ffn = mdl[MDL_EXPERT_FFN_HIDDEN]
    shared = mdl[MDL_SHARED_EXPERTS]
    t = 0.0
    if flags[2]:
        t += row[ROW_DENSE_LAYERS] * linear_gemm_time(
            sys, mlp_flops(b, seq, h, mdl[MDL_FFN_HIDDEN], swiglu) / split, 2.0)
    if flags[3]:
        experts = mdl[MDL_EXPERTS]
        t += row[ROW_MOE_LAYERS] * (
            gemm_time(sys, router_flops(b, seq, h, experts) / split, 1.0)
            + linear_gemm_time(sys, moe_mlp_flops(b, seq, h, expert_ffn, mdl[MDL_TOP_K], shared,
                                                  swiglu) / split,
                               expert_gemm_count(job, experts / row[ROW_EP], shared)))
    elif flags[4]:
        t += row[ROW_MOE_LAYERS] * linear_gemm_time(
            sys, moe_mlp_flops(b, seq, h, expert_ffn, 0.0, shared, swiglu) / split, 2.0 * shared)
    return t


def recompute_module_cast_time(sys, mdl, job, row):
    """FP8 casts of the re-run blocks' linear-layer inputs (:func:`linear_cast_time` of the MLP
    part of :func:`linear_cast_elements_forward`): the dense MLPs' (``mlp``), every routed and
    shared copy's (``moe``) or the shared copies' (``shared_experts``); 0 in a 16-bit job."""
    flags = recompute_module_flags(job)
    b = row[ROW_B]
    s = row[ROW_S]
    t = row[ROW_TP]
    h = mdl[MDL_HIDDEN]
    x_in = b * s * h / t if row[ROW_SP] > 0.0 else b * s * h
    expert_in = x_in + b * s * mdl[MDL_EXPERT_FFN_HIDDEN] / t
    elements = 0.0
    if flags[2]:
        elements += row[ROW_DENSE_LAYERS] * (x_in + b * s * mdl[MDL_FFN_HIDDEN] / t)
    if flags[3]:
        elements += row[ROW_MOE_LAYERS] * (mdl[MDL_TOP_K] + mdl[MDL_SHARED_EXPERTS]) * expert_in
    elif flags[4]:
        elements += row[ROW_MOE_LAYERS] * mdl[MDL_SHARED_EXPERTS] * expert_in
    return linear_cast_time(sys, job, elements)


def recompute_modules_time(sys, mdl, job, row):
    """Backward time one microbatch spends on a stage rebuilding what the job's Megatron-Core
    recompute modules dropped: the memory-bound kernels of :func:`recompute_module_redo_bytes`
    over the stage's dense and MoE layers, the re-run blocks' GEMMs
    (:func:`recompute_module_gemm_time`) and FP8 casts (:func:`recompute_module_cast_time`);
    0 without any."""
    flags = recompute_module_flags(job)
    if not (flags[0] or flags[1] or flags[2] or flags[3] or flags[4]):
        return 0.0
    redo = recompute_module_redo_bytes(row[ROW_S], row[ROW_B], mdl[MDL_HIDDEN],
                                       mdl[MDL_FFN_HIDDEN], mdl[MDL_EXPERT_FFN_HIDDEN],
                                       mdl[MDL_TOP_K], mdl[MDL_SHARED_EXPERTS],
                                       mdl[MDL_SWIGLU] > 0.0, row[ROW_TP], row[ROW_SP] > 0.0,
                                       job[JOB_ACTIVATION_BYTES], job[JOB_DROPOUT] > 0.0,
                                       flags[0], flags[1], flags[2], flags[3], flags[4])
    t = memory_bound_time(sys, row[ROW_DENSE_LAYERS] * redo[0]
                          + row[ROW_MOE_LAYERS] * redo[1]) \
        + recompute_module_gemm_time(sys, mdl, job, row) \
        + recompute_module_cast_time(sys, mdl, job, row)
    if flags[3] and job[JOB_EAGER_EXPERT_BIAS] > 0.0:
        # the re-run MoE block adds its experts' bias again (eager_expert_bias_forward_time)
        t += row[ROW_MOE_LAYERS] * eager_expert_bias_forward_time(
            sys, eager_expert_bias_elements(row[ROW_B], job[JOB_SEQ_LEN], mdl[MDL_TOP_K],
                                            mdl[MDL_HIDDEN], row[ROW_TP] * row[ROW_CP]),
            mdl[MDL_EXPERTS] / row[ROW_EP])
    return t


def recompute_module_tp_replay(job, row):
    """Share of a stage pass's TP traffic the re-run blocks replay: a layer's MLP (or MoE) block
    carries half of it (its all-gather and reduce-scatter with SP, its all-reduce without), for
    the dense layers under ``mlp`` and the MoE layers under ``moe``."""
    flags = recompute_module_flags(job)
    layers = 0.0
    if flags[2]:
        layers += row[ROW_DENSE_LAYERS]
    if flags[3]:
        layers += row[ROW_MOE_LAYERS]
    if layers <= 0.0:
        return 0.0  # nothing re-run (a stage may hold no transformer layer at all)
    return 0.5 * layers / row[ROW_STAGE_LAYERS]


def recompute_module_redo_flops(mdl, job, b):
    """Hardware FLOPs of one microbatch of ``b`` sequences that the checkpointing recompute
    modules run again, over the whole model: the dense MLPs (``mlp``), the MoE layers' router
    and experts (``moe``) or their shared experts (``shared_experts``)."""
    flags = recompute_module_flags(job)
    seq = job[JOB_SEQ_LEN]
    h = mdl[MDL_HIDDEN]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    layers = mdl[MDL_LAYERS]
    n_moe = model_moe_layers(mdl)
    flops = 0.0
    if flags[2]:
        flops += (layers - n_moe) * mlp_flops(b, seq, h, mdl[MDL_FFN_HIDDEN], swiglu)
    if flags[3]:
        flops += n_moe * (router_flops(b, seq, h, mdl[MDL_EXPERTS])
                          + moe_mlp_flops(b, seq, h, mdl[MDL_EXPERT_FFN_HIDDEN], mdl[MDL_TOP_K],
                                          mdl[MDL_SHARED_EXPERTS], swiglu))
    elif flags[4]:
        flops += n_moe * moe_mlp_flops(b, seq, h, mdl[MDL_EXPERT_FFN_HIDDEN], 0.0,
                                       mdl[MDL_SHARED_EXPERTS], swiglu)
    return flops


def recompute_terms(sys, mdl, job, row, ordt, recompute):
    """Per-microbatch stage times, their communication, the bubble, activation memory and
    hardware FLOPs of a row, placed by ``ordt``, under ``recompute`` (see REC_*)."""
    schedule = int(row[ROW_SCHEDULE])
    flash = job[JOB_FLASH_ATTENTION] > 0.0
    stage_layers = row[ROW_STAGE_LAYERS]
    moe_layers = row[ROW_MOE_LAYERS]
    gemm_f = row[ROW_GEMM_F]
    core_f = row[ROW_CORE_F]
    t_core = row[ROW_T_CORE]
    m = row[ROW_M]
    f_compute = row[ROW_F_COMPUTE]
    w_compute = row[ROW_W_COMPUTE]
    b_compute = row[ROW_B_COMPUTE]
    # full recompute's share of the stage's layers (job.recompute_layers: Megatron's block method)
    full_share = 0.0
    if recompute == RECOMPUTE_FULL:
        full_share = full_recompute_share(job, stage_layers, schedule, row[ROW_PP],
                                          row[ROW_VPP])
    gemm_redo = 0.0
    if recompute >= RECOMPUTE_DOTS:
        gemm_redo = named_dots_gemm_redo(row[ROW_ATTN_GEMM_F], row[ROW_MLP_GEMM_F],
                                         mdl[MDL_HEADS] * mdl[MDL_HEAD_DIM],
                                         mdl[MDL_KV_HEADS] * mdl[MDL_HEAD_DIM],
                                         mdl[MDL_SWIGLU] > 0.0, recompute)
    if recompute == RECOMPUTE_FULL:
        b_compute += full_share * (gemm_f + core_f + row[ROW_MEM_F]
                                   + stage_layers * sys[SYS_LAYER_OVERHEAD_S])
    elif recompute == RECOMPUTE_SELECTIVE:
        if not flash:
            b_compute += core_f  # Korthikanti et al. §5: recompute only the attention core
        b_compute += recompute_modules_time(sys, mdl, job, row)
    elif recompute >= RECOMPUTE_DOTS:
        core_redo = core_f
        if named_dots_core_saved(recompute, flash):
            core_redo = 0.0
        b_compute += dots_recompute_time(core_redo, row[ROW_MEM_F], gemm_redo)

    # ---- tensor parallelism -------------------------------------------------------------------
    tp_overlap = row[ROW_TP_OVERLAP] > 0.0
    tp_pass = ordt[ORD_TP_PASS]
    window_f = gemm_f
    # the copies around the collectives (job.tp_sequence_copy), on the compute stream
    copy_f, copy_b = tp_sequence_copy_time(sys, mdl, job, row)
    # one pass's exposed collectives: the forward's, the backward's and a full replay's alike
    tp_one = tp_exposed(sys, tp_pass, window_f, tp_overlap)
    tp_f = tp_one + copy_f
    tp_b = tp_one + copy_b
    if recompute == RECOMPUTE_FULL:
        tp_b += full_share * (tp_one + copy_f)
    elif recompute > RECOMPUTE_DOTS:
        # the collectives around the re-run GEMMs, overlapped with those GEMMs (and their
        # copies: the same share of the forward's, each copy twice its collective's buffer)
        replay = named_dots_tp_replay(recompute, row[ROW_SP] > 0.0, mdl[MDL_SWIGLU] > 0.0,
                                      tp_gather_share(job))
        tp_b += tp_exposed(sys, replay * tp_pass, gemm_redo, tp_overlap) + replay * copy_f
    elif recompute == RECOMPUTE_SELECTIVE:
        # the re-run MLP / MoE blocks' collectives, overlapped with their GEMMs (no traffic,
        # so nothing exposed, without the checkpointing modules), and their copies
        replay = recompute_module_tp_replay(job, row)
        tp_b += tp_exposed(sys, replay * tp_pass, recompute_module_gemm_time(sys, mdl, job, row),
                           tp_overlap) + replay * copy_f

    # ---- context parallelism: ring exchange of K and V overlapped with attention --------------
    # (Liu et al. 2023, Ring Attention; Megatron-Core CP through TE AttnFuncWithCPAndKVP2P)
    cp = row[ROW_CP]
    cp_f = 0.0
    cp_b = 0.0
    if cp > 1.0:
        step = ordt[ORD_CP_STEP]
        ring_f = cp_ring_exposed_forward(sys, step, t_core, cp)
        cp_f = stage_layers * ring_f
        cp_b = stage_layers * cp_ring_exposed_backward(
            sys, step, attention_backward_factor(flash) * t_core, cp)
        if recompute == RECOMPUTE_FULL:
            # the recomputed attention forward runs its ring again
            cp_b += full_share * stage_layers * ring_f
        elif recompute >= RECOMPUTE_DOTS and not named_dots_core_saved(recompute, flash):
            cp_b += stage_layers * ring_f

    # ---- expert parallelism: dispatch + combine all-to-all per MoE layer ----------------------
    ep_f = 0.0
    ep_b = 0.0
    if moe_layers > 0.0 and row[ROW_EP] > 1.0:
        a2a = ordt[ORD_A2A]  # dispatch + combine (Lepikhin et al. 2020, GShard §2)
        ep_f = moe_layers * a2a
        # backward: the combine's gradient goes the dispatch way, in the dispatch dtype (FP8 in
        # DeepSeek-V3: the activation gradient before the down-projections), the dispatch's
        # gradient goes the combine way, in BF16 ("backward combine", DeepSeek-V3 §3.3.2):
        # the same pair of all-to-alls as the forward
        ep_b = moe_layers * a2a
        if recompute == RECOMPUTE_FULL:
            # the re-run forward's dispatch and combine
            ep_b += full_share * ep_f
        elif recompute == RECOMPUTE_SELECTIVE and job[JOB_RECOMPUTE_MOE] > 0.0:
            # ... and those the "moe" module checkpoints
            ep_b += ep_f
        if schedule == SCHED_DUALPIPE or schedule == SCHED_DUALPIPE_V:
            # DualPipe overlaps one microbatch's all-to-all with another's compute
            # (DeepSeek-V3 tech report §3.2.1)
            ep_f = max(0.0, ep_f - b_compute)
            ep_b = max(0.0, ep_b - f_compute)

    # ---- activation offload (job.offload_activations): the offloaded layers' saved
    # activations of one microbatch go out beside the forward's compute and come back beside the
    # backward's (recomputation and the weight gradients included: Calculon's backward block
    # time is agrad + wgrad), for the costed stage ----------------------------------------------
    b = row[ROW_B]
    act_dense_r, act_moe_r = layer_activations(mdl, job, row[ROW_S], b, row[ROW_TP],
                                               row[ROW_SP] > 0.0, recompute,
                                               linear_input_saved_bytes(job))
    # the layer a full-recompute backward rebuilds (recompute_working_set): only where every
    # layer is checkpointed -- with block recompute a chunk's plain layers, each at least as
    # large, are freed before its checkpointed ones are rebuilt
    rebuild_dense = 0.0
    rebuild_moe = 0.0
    if recompute == RECOMPUTE_FULL:
        kept_dense, kept_moe = layer_activations(mdl, job, row[ROW_S], b, row[ROW_TP],
                                                 row[ROW_SP] > 0.0, RECOMPUTE_NONE,
                                                 linear_input_saved_bytes(job))
        if full_share < 1.0:
            # the layers block recompute leaves plain keep every activation
            act_dense_r = full_share * act_dense_r + (1.0 - full_share) * kept_dense
            act_moe_r = full_share * act_moe_r + (1.0 - full_share) * kept_moe
        else:
            rebuild_dense = kept_dense - act_dense_r
            rebuild_moe = kept_moe - act_moe_r
    share = job[JOB_OFFLOAD_ACTIVATIONS]
    off_f = 0.0
    off_b = 0.0
    if share > 0.0:
        off_bytes = share * (row[ROW_DENSE_LAYERS] * act_dense_r + row[ROW_MOE_LAYERS] * act_moe_r)
        off_f = offload_transfer_exposed(off_bytes, sys[SYS_HOST_LINK_BANDWIDTH], f_compute)
        off_b = offload_transfer_exposed(off_bytes, sys[SYS_HOST_LINK_BANDWIDTH],
                                         b_compute + w_compute)

    f_stage = f_compute + tp_f + cp_f + ep_f + off_f
    b_stage = b_compute + tp_b + cp_b + ep_b + off_b
    w_stage = w_compute

    # ---- pipeline ----------------------------------------------------------------------------
    pp = int(row[ROW_PP])
    vpp = int(row[ROW_VPP])
    bubble = bubble_time(schedule, pp, int(m), vpp, f_stage, b_stage, w_stage)

    # ---- activation memory of the first, the busiest middle and the last stage ----------------
    mem_act_first, mem_act_mid, mem_act_last = stage_activations(mdl, job, schedule, pp, int(m),
                                                                 vpp, act_dense_r, act_moe_r)
    if share > 0.0:
        mem_act_first, mem_act_mid, mem_act_last = offloaded_stage_activations(
            mdl, job, schedule, pp, vpp, act_dense_r, act_moe_r, share, mem_act_first,
            mem_act_mid, mem_act_last)
    if rebuild_dense > 0.0 or rebuild_moe > 0.0:
        w1, w2, w3 = stage_recompute_working_sets(mdl, job, schedule, pp, vpp, rebuild_dense,
                                                  rebuild_moe)
        mem_act_first += w1
        mem_act_mid += w2
        mem_act_last += w3

    # ---- hardware FLOPs --------------------------------------------------------------------
    hw_fwd = row[ROW_HW_FWD]
    hw_recompute = 0.0
    if recompute == RECOMPUTE_FULL:
        hw_recompute = full_share * (hw_fwd - output_head_flops(mdl, b, job[JOB_SEQ_LEN]))
    elif recompute >= RECOMPUTE_DOTS or (recompute == RECOMPUTE_SELECTIVE and not flash):
        if not named_dots_core_saved(recompute, flash):
            hw_recompute = attention_blocks(mdl) * row[ROW_HW_CORE] * (row[ROW_TP] * row[ROW_CP])
        if recompute > RECOMPUTE_DOTS:
            hw_recompute += named_dots_redo_flops(mdl, b, job[JOB_SEQ_LEN], recompute)
    if recompute == RECOMPUTE_SELECTIVE:
        hw_recompute += recompute_module_redo_flops(mdl, job, b)
    # backward = B + W: GEMMs twice, the attention core attention_backward_factor times (no
    # weights; FlashAttention recomputes the scores): 3 forwards in all, plus 0.5 x the executed
    # attention core with FlashAttention
    bwd_extra = (attention_backward_factor(flash) - 2.0) * attention_blocks(mdl) \
        * row[ROW_HW_CORE] * (row[ROW_TP] * row[ROW_CP])
    hw_flops = (3.0 * hw_fwd + bwd_extra + hw_recompute) * (job[JOB_GLOBAL_BATCH] / b)

    return (f_stage, b_stage, w_stage, m * (f_compute + b_compute + w_compute), m * (tp_f + tp_b),
            m * (cp_f + cp_b), m * (ep_f + ep_b), bubble, mem_act_first, hw_flops, mem_act_mid,
            mem_act_last, m * (off_f + off_b))


def recompute_working_set(dense, moe, rebuild_dense, rebuild_moe):
    """HBM a full-recompute backward holds beyond the stored checkpoints: the layer it is
    rebuilding, one microbatch's activations of it less the checkpoint (its input) already
    counted (``rebuild_*``: :func:`layer_activation_bytes` without recompute less with full
    recompute), of the largest layer kind the stage holds. Checkpointing keeps the segment
    boundaries and recomputes one segment at a time in the backward, whose activations then
    live beside the boundaries (Chen et al., "Training Deep Nets with Sublinear Memory Cost",
    arXiv 1604.06174, §4: memory O(n/k) for the boundaries plus O(k) for the segment being
    rebuilt; here a segment is one transformer layer, Megatron-LM's ``--recompute-method
    uniform --recompute-num-layers 1`` and PyTorch's per-block ``checkpoint_wrapper``)."""
    return largest_layer_activation_bytes(dense, moe, rebuild_dense, rebuild_moe)


def stage_recompute_working_sets(mdl, job, schedule, pp, vpp, rebuild_dense, rebuild_moe):
    """:func:`recompute_working_set` of the first, busiest middle and last device."""
    d1, m1, d2, m2, d3, m3, loss_first = stage_layer_splits(mdl, job, schedule, pp, vpp)
    return (recompute_working_set(d1, m1, rebuild_dense, rebuild_moe),
            recompute_working_set(d2, m2, rebuild_dense, rebuild_moe),
            recompute_working_set(d3, m3, rebuild_dense, rebuild_moe))


def offloaded_stage_activations(mdl, job, schedule, pp, vpp, act_dense, act_moe, share, a1, a2,
                                a3):
    """:func:`stage_activations`' first, busiest middle and last device's bytes ``a1, a2, a3``
    with ``share`` of the layers offloaded (:func:`offloaded_activation_memory`, the double
    buffer sized by each device's own largest layer)."""
    d1, m1, d2, m2, d3, m3, loss_first = stage_layer_splits(mdl, job, schedule, pp, vpp)
    return (offloaded_activation_memory(a1, share, largest_layer_activation_bytes(
                d1, m1, act_dense, act_moe)),
            offloaded_activation_memory(a2, share, largest_layer_activation_bytes(
                d2, m2, act_dense, act_moe)),
            offloaded_activation_memory(a3, share, largest_layer_activation_bytes(
                d3, m3, act_dense, act_moe)))


def stage_activations(mdl, job, schedule, pp, m, vpp, act_dense, act_moe):
    """Stored activation bytes of the first, the busiest middle and the last device: each
    device's layers (:func:`pipeline_stages`) times the per-layer bytes times the microbatches
    in flight on its rank (:func:`pipeline.inflight_activations_rank`: rank 0, rank 1 -- the
    most of any middle rank -- and rank pp-1; the first rank's when it also holds the loss)."""
    d1, m1, d2, m2, d3, m3, loss_first = stage_layer_splits(mdl, job, schedule, pp, vpp)
    r_last = 0 if loss_first else pp - 1
    a1 = (d1 * act_dense + m1 * act_moe) * inflight_activations_rank(schedule, pp, m, vpp, 0)
    a2 = (d2 * act_dense + m2 * act_moe) * inflight_activations_rank(schedule, pp, m, vpp, 1)
    a3 = (d3 * act_dense + m3 * act_moe) * inflight_activations_rank(schedule, pp, m, vpp,
                                                                     r_last)
    return a1, a2, a3


def fsdp_units(row):
    """FSDP units of a device: one per transformer layer it holds (the row's stage layers,
    rounded to a whole count -- the dense + MoE split may leave an ulp -- and at least 1).

    PyTorch FSDP wraps each transformer block as its own unit with one ``FlatParameter``
    (Zhao et al., "PyTorch FSDP: Experiences on Scaling Fully Sharded Data Parallel", VLDB 2023,
    §3.2-3.3; ``transformer_auto_wrap_policy``); DeepSpeed ZeRO-3 gathers per submodule and
    JAX/MaxText FSDP per scanned layer alike. The device's other parameters (embedding, output
    layer: FSDP's root unit) are spread over the units with the rest."""
    return stage_fsdp_units(row[ROW_STAGE_LAYERS])


def stage_fsdp_units(layers):
    """FSDP units of a device holding ``layers`` transformer layers (:func:`fsdp_units`)."""
    return max(1.0, float(math.floor(layers + 0.5)))


def fsdp_keeps_unsharded(job, row):
    """Whether ZeRO-3 keeps the device's weights gathered and its gradients unsharded from the
    step's first microbatch to its last (``job.fsdp_pp_unsharded``): only under a pipeline
    (``pp > 1``), whose stage runs several microbatches back to back (torchtitan's rule; see
    :func:`stage_state_memory`)."""
    return job[JOB_FSDP_PP_UNSHARDED] > 0.0 and row[ROW_PP] > 1.0


def fsdp_exposed(unit_gather, comm, window, overlap):
    """ZeRO-3 / FSDP collectives of one microbatch left on the critical path: ``comm`` (every
    unit's all-gathers and reduce-scatter) after overlapping with ``window`` of compute.

    With prefetching (FSDP ``forward_prefetch`` / ``BackwardPrefetch.BACKWARD_PRE``, Zhao et
    al. VLDB 2023 §3.3) unit ``k+1``'s all-gather runs under unit ``k``'s compute, but the first
    unit's all-gather (``unit_gather``) has no compute before it: ``max(unit_gather, C - W)``.
    Without overlap all of ``comm``."""
    if not overlap:
        return comm
    return max(unit_gather, comm - window)


def dp_groups(row, ordt):
    """The data-parallel groups of :func:`data_parallel_comm`: ``(cp, s_cp, ep, s_ep, dpx,
    s_dp)`` over which the dense weights are replicated and ``(cp, s_cp, e_a, se_a, e_b,
    se_b)`` over which the expert weights are, as one flat tuple. Dense weights are replicated
    over cp x ep x dp/ep, expert weights over cp x dp/ep; folded (:func:`moe_folded`) dense
    weights over cp x dp and expert weights over cp and the expert-data-parallel complement of
    the EP group in the TP x DP ranks (:func:`folded_ep_groups`, ``tp * dp / ep`` of them)."""
    ep = row[ROW_EP]
    dpx = row[ROW_DPX]
    s_dp = ordt[ORD_S_DP]
    e_a = dpx
    se_a = s_dp
    e_b = 1.0
    se_b = 1.0
    if moe_folded(row[ROW_TP], row[ROW_DP], ep):
        g = folded_ep_groups(row[ROW_TP], ordt[ORD_S_TP], row[ROW_DP], s_dp, ep)
        e_a = g[4]
        se_a = g[5]
        e_b = g[6]
        se_b = g[7]
        ep = 1.0
        dpx = row[ROW_DP]
    return (row[ROW_CP], ordt[ORD_S_CP], ep, ordt[ORD_S_EP], dpx, s_dp, e_a, se_a, e_b, se_b)


def dp_replica_count(job):
    """The replica groups of hybrid sharding, ``job.dp_replicas``; 0 in a packed block (one
    built field by field, as the tests do) means 1, no hybrid sharding."""
    r = job[JOB_DP_REPLICAS]
    if r > 1.0:
        return r
    return 1.0


def dp_shard_groups(job, row, ordt):
    """The groups ZeRO shards over, as :func:`dp_groups`' flat tuple: with hybrid sharding
    (``job.dp_replicas`` R > 1) each group keeps the inner ``dp / ep / R`` of its data-parallel
    ranks (the stride stays the data-parallel one), the outer R being the replicas
    (:func:`dp_replica_group`); with R = 1 :func:`dp_groups` itself. R > 1 only reaches here
    for a layout :func:`dp_replicas_error` passes (unfolded, R divides dp / ep)."""
    g = dp_groups(row, ordt)
    r = dp_replica_count(job)
    if r == 1.0:
        return g
    return (g[0], g[1], g[2], g[3], g[4] / r, g[5], g[6] / r, g[7], g[8], g[9])


def dp_replica_group(job, row, ordt):
    """``(R, stride)``: the replica groups of hybrid sharding (``job.dp_replicas``) -- the outer
    R of the ``dp / ep`` data-parallel ranks, ``dp / ep / R`` data-parallel strides apart (PyTorch
    HSDP's replicate dimension of the ``(replicate, shard)`` device mesh, outer to the shard
    one; torchtitan ``data_parallel_replicate_degree``)."""
    r = dp_replica_count(job)
    return (r, ordt[ORD_S_DP] * row[ROW_DPX] / r)


def dp_collective_time(sys, job, nbytes, elem_bytes, reduce, cp, s_cp, n_b, s_b, n_c, s_c):
    """One data-parallel collective of ``nbytes`` (``elem_bytes`` per element, sent over each
    tier in its ``comm_dtype``): the synchronous one (:func:`compressed_all_reduce_time`, or
    :func:`compressed_all_gather_time`, which a reduce-scatter costs alike) or, under a
    non-synchronous ``job.sync.strategy``, only its part inside each site
    (:func:`within_site_time`; the cross-site part is :func:`cross_site_sync_time`)."""
    if job[JOB_SYNC_STRATEGY] != SYNC_SYNCHRONOUS:
        return within_site_time(sys, nbytes, elem_bytes, reduce, cp, s_cp, n_b, s_b, n_c, s_c)
    if reduce:
        return compressed_all_reduce_time(sys, nbytes, elem_bytes, cp, s_cp, n_b, s_b, n_c, s_c)
    return compressed_all_gather_time(sys, nbytes, elem_bytes, cp, s_cp, n_b, s_b, n_c, s_c)


def param_gather_bytes(job, params, linear_params):
    """``(bytes, bytes per element)`` of the data-parallel weight all-gather of ``params``
    parameters of which ``linear_params`` are linear-layer weights: every weight at
    ``param_bytes``, except that with FP8 parameters (``job.fp8_param_gather``) the linear
    layers' weights (attention projections, MLPs, shared and routed experts) travel at
    ``linear_param_comm_bytes`` -- their FP8 data, 1 byte per element plus the recipe's scales
    (``spec.pack.linear_param_comm_bytes``). Megatron-LM ``--fp8-param-gather`` ("perform the
    param all-gather in fp8", ``megatron/training/arguments.py``): the distributed optimizer's
    parameter buffer (``megatron/core/distributed/param_and_grad_buffer.py``) holds the raw
    FP8 bytes of Transformer Engine's ``Float8Tensor`` weights and all-gathers them as such,
    while the other parameters -- embeddings, output layer, norms, MoE router -- stay 16-bit.
    The per-element width returned is the parameter-weighted mean -- exactly ``param_bytes``
    without FP8 parameters and exactly ``linear_param_comm_bytes`` when all are linear (the
    experts) -- which a tier's ``comm_dtype`` narrows where narrower
    (:func:`dp_collective_time`; its quantize codec is then charged on every element at the
    mean width, a slight overestimate for the weights already in FP8)."""
    param_bytes = job[JOB_PARAM_BYTES]
    linear_bytes = job[JOB_LINEAR_PARAM_COMM_BYTES]
    if linear_bytes == param_bytes or linear_params <= 0.0:
        return params * param_bytes, param_bytes
    if linear_params >= params:
        return params * linear_bytes, linear_bytes
    nbytes = params * param_bytes + linear_params * (linear_bytes - param_bytes)
    return nbytes, nbytes / params


def data_parallel_comm(sys, job, row, ordt, zero):
    """The data-parallel collectives of one step before overlap: ``(all-reduce, 0)`` of the
    gradients without ZeRO; with ZeRO-1/2 ``(reduce-scatter of gradients, all-gather of
    weights)`` of all the device's parameters at once; with ZeRO-3 the same pair for one FSDP
    unit, ``1 / fsdp_units`` of the parameters (Zhao et al. VLDB 2023 §3.2: one collective per
    unit's ``FlatParameter``, so each pays the collective's latency), over the groups of
    :func:`dp_groups`. Under a non-synchronous ``job.sync.strategy`` the part of each inside a
    site (:func:`dp_collective_time`). Gradients travel at ``grad_comm_bytes`` per element and
    weights at ``param_bytes`` (the linear layers' at ``linear_param_comm_bytes``:
    :func:`param_gather_bytes`), or a tier's ``comm_dtype`` where narrower.

    With hybrid sharding (``job.dp_replicas`` R > 1) the pair runs inside the shard groups
    (:func:`dp_shard_groups`), and the reduce-scattered gradient shard -- ``1 / shard size``
    of the reduced gradients -- is then all-reduced across the R replicas
    (:func:`dp_replica_group`), charged with the reduce-scatter it follows (PyTorch FSDP2
    HSDP: ``foreach_reduce`` reduce-scatters over the shard mesh dimension, then all-reduces
    the shard over the replicate one, per unit; Zhao et al. VLDB 2023 §3.2.2, hybrid
    sharding)."""
    g = dp_groups(row, ordt)
    cp = g[0]
    s_cp = g[1]
    dense_params = row[ROW_DENSE_PARAMS]
    expert_params = row[ROW_EXPERT_PARAMS]
    grad_comm = job[JOB_GRAD_COMM_BYTES]
    if zero == 0:
        red = dp_collective_time(sys, job, dense_params * grad_comm, grad_comm, True, cp, s_cp,
                                 g[2], g[3], g[4], g[5]) \
            + dp_collective_time(sys, job, expert_params * grad_comm, grad_comm, True, cp, s_cp,
                                 g[6], g[7], g[8], g[9])
        return (red, 0.0)
    g = dp_shard_groups(job, row, ordt)
    ag_dense = param_gather_bytes(job, dense_params, row[ROW_DENSE_LINEAR_PARAMS])
    ag_expert = param_gather_bytes(job, expert_params, expert_params)  # experts: all linear
    units = 1.0
    if zero == 3:
        units = fsdp_units(row)
    rs = dp_collective_time(sys, job, dense_params * grad_comm / units, grad_comm, False, cp,
                            s_cp, g[2], g[3], g[4], g[5]) \
        + dp_collective_time(sys, job, expert_params * grad_comm / units, grad_comm, False, cp,
                             s_cp, g[6], g[7], g[8], g[9])
    ag = dp_collective_time(sys, job, ag_dense[0] / units, ag_dense[1], False, cp, s_cp, g[2],
                            g[3], g[4], g[5]) \
        + dp_collective_time(sys, job, ag_expert[0] / units, ag_expert[1], False, cp, s_cp,
                             g[6], g[7], g[8], g[9])
    if dp_replica_count(job) != 1.0:
        # the reduce-scattered shard (1 / shard size of the gradients) across the replicas
        rep = dp_replica_group(job, row, ordt)
        rs += dp_collective_time(sys, job, dense_params * grad_comm / units / (cp * g[2] * g[4]),
                                 grad_comm, True, rep[0], rep[1], 1.0, 1.0, 1.0, 1.0) \
            + dp_collective_time(sys, job,
                                 expert_params * grad_comm / units / (cp * g[6] * g[8]),
                                 grad_comm, True, rep[0], rep[1], 1.0, 1.0, 1.0, 1.0)
    return (rs, ag)


def cross_site_sync_time(sys, job, row, ordt, strategy):
    """Time per step of the data-parallel traffic at the site tier (before overlap) under
    ``strategy`` (a ``SYNC_*`` code): the gradients' (``grad_comm_bytes`` per element) or, for
    the non-synchronous strategies, ``sync_outer_bytes`` per element, through
    :func:`cross_site_time` (dense and expert groups). DiLoCo (Douillard et al. 2023, arXiv
    2311.08105, Algorithm 1) all-reduces the pseudo-gradient across sites once every ``H =
    inner_steps`` steps, so a step carries ``1 / H`` of it; Streaming DiLoCo (Douillard et al.
    2025, arXiv 2501.18512, §2.2) all-reduces each of its ``P = fragments`` fragments once per H
    steps, so a step carries ``P / H`` of one fragment's all-reduce (the same bytes; the latency
    is paid per fragment). The site tier's ``comm_dtype`` applies where narrower
    (:func:`cross_site_time`). For the synchronous strategy this is
    the site-tier term of the hierarchical collective (what the strategies are compared
    against; the synchronous step charges the cheapest of flat and hierarchical)."""
    g = dp_groups(row, ordt)
    nbytes = job[JOB_GRAD_COMM_BYTES]
    share = 1.0  # of the parameters in one all-reduce
    if strategy != SYNC_SYNCHRONOUS:
        nbytes = job[JOB_SYNC_OUTER_BYTES]
    if strategy == SYNC_DILOCO:
        share = 1.0 / job[JOB_SYNC_FRAGMENTS]
    t = cross_site_time(sys, row[ROW_DENSE_PARAMS] * share * nbytes, nbytes, g[0], g[1], g[2],
                        g[3], g[4], g[5]) \
        + cross_site_time(sys, row[ROW_EXPERT_PARAMS] * share * nbytes, nbytes, g[0], g[1],
                          g[6], g[7], g[8], g[9])
    if strategy == SYNC_DILOCO:
        t = t * job[JOB_SYNC_FRAGMENTS] / job[JOB_SYNC_INNER_STEPS]
    return t


def streaming_overlap_window(job, compute):
    """Compute per step that hides Streaming DiLoCo's outer all-reduces (Douillard et al. 2025,
    arXiv 2501.18512, §2.3 "overlapping communication"): each fragment's all-reduce runs beside
    the next ``tau = overlap_steps`` inner steps and its outer update is applied after them; a
    step holds ``P / H`` of these syncs on average, each with ``tau`` steps of ``compute``, so
    ``P / H * tau * compute`` (0 without overlap: plain DiLoCo blocks)."""
    return job[JOB_SYNC_FRAGMENTS] / job[JOB_SYNC_INNER_STEPS] * job[JOB_SYNC_OVERLAP_STEPS] \
        * compute


def cross_site_exposed(strategy, cross, compute, window):
    """What the site-tier traffic ``cross`` adds to a step: DiLoCo's outer all-reduce blocks
    the next inner phase (Douillard et al. 2023, Algorithm 1: the outer step needs the averaged
    pseudo-gradient), all of it beyond the Streaming DiLoCo overlap ``window``
    (:func:`streaming_overlap_window`: per sync ``max(0, t_fragment - tau * compute)``, times
    the ``P / H`` syncs of a step); a one-step delayed reduction runs under the next step's
    compute (the 1-stale weight update of PipeDream-2BW, Narayanan et al., "Memory-Efficient
    Pipeline-Parallel DNN Training", ICML 2021; the overlapped outer step of Streaming DiLoCo,
    Douillard et al. 2025 arXiv 2501.18512, and of "eager updates", Kale et al. 2025 arXiv
    2502.12996), only what outlasts ``compute``."""
    if strategy == SYNC_DILOCO:
        return max(0.0, cross - window)
    return max(0.0, cross - compute)


def sync_outer_state_bytes(job):
    """Bytes per parameter DiLoCo adds to the optimizer states: the fp32 outer copy of the
    parameters (theta at the last outer step) and the outer Nesterov momentum (Douillard et al.
    2023, Algorithm 1: OuterOpt = SGD with Nesterov momentum), 4 + 4; 0 for the others."""
    if job[JOB_SYNC_STRATEGY] == SYNC_DILOCO:
        return 8.0
    return 0.0


def offload_optimizer_time(sys, job, shard_params, window, overlap):
    """The optimizer step of the ``shard_params`` parameters this GPU owns, offloaded to the host
    (ZeRO-Offload, Ren et al., USENIX ATC 2021, §4.1-4.2; DeepSpeed ``offload_optimizer``):
    their gradients go to host memory over the host link during the backward (``window``, when
    overlapped), the CPU's Adam streams the optimizer states in host memory (the same bytes per
    parameter as the GPU's step, at the host memory bandwidth of this GPU's share), and the
    updated 16-bit weights come back over the host link before the next forward."""
    down = shard_params * job[JOB_GRAD_COMM_BYTES] / sys[SYS_HOST_LINK_BANDWIDTH]
    up = shard_params * job[JOB_PARAM_BYTES] / sys[SYS_HOST_LINK_BANDWIDTH]
    cpu = shard_params * job[JOB_OPTIMIZER_TRAFFIC_BYTES] / sys[SYS_HOST_MEMORY_BANDWIDTH]
    return exposed(down, window, overlap) + cpu + up


def finish_config(sys, mdl, job, row, ordt, rect, dp_first, dp_second, zero, dp_overlap, out, i):
    """Data-parallel time after overlap, the optimizer step, the step time and memory per GPU
    of a staged configuration; writes result column ``i`` of ``out`` and returns its status.
    ``dp_first, dp_second`` are :func:`data_parallel_comm` of the same row, order and zero
    (with ZeRO-3 one FSDP unit's collectives). :func:`finish_config_state` with the
    row's :func:`state_memory_terms` at the ranks ZeRO shards over (:func:`zero_shard_ranks`)."""
    ranks = zero_shard_ranks(sys, job, row, ordt)
    state = state_memory_terms(mdl, job, row, zero, ranks[0], ranks[1])
    return finish_config_state(sys, mdl, job, row, ordt, rect, dp_first, dp_second, zero,
                               dp_overlap, ranks[0], ranks[1], state, out, i)


def zero_shard_ranks(sys, job, row, ordt):
    """``(dense, expert)``: the ranks ZeRO shards a device's dense and expert parameters over --
    every data-parallel rank (``cp x dp``; ``cp x dpx`` for the experts), or with hybrid
    sharding (``job.dp_replicas``) 1 / R of them; under a cross-site ``job.sync`` the members of
    the device's site (each site keeps a full replica: ZeRO-1/2 shard inside it)."""
    if job[JOB_SYNC_STRATEGY] != SYNC_SYNCHRONOUS:
        g = dp_groups(row, ordt)
        return (site_members(sys, g[0], g[1], g[2], g[3], g[4], g[5]),
                site_members(sys, g[0], g[1], g[6], g[7], g[8], g[9]))
    replicas = dp_replica_count(job)
    return row[ROW_CP] * row[ROW_DP] / replicas, row[ROW_CP] * row[ROW_DPX] / replicas


#: values of :func:`state_memory_terms` (the native drivers' per-row store is this wide)
N_STATE = 11


def state_memory_terms(mdl, job, row, zero, dp_dense, dp_expert):
    """``(w1, g1, o1, w2, g2, o2, w3, g3, o3, logits_first, logits_last)``: the weights',
    gradients' and optimizer states' bytes (:func:`stage_state_memory`) of the first, busiest
    middle and last pipeline device at ZeRO stage ``zero`` sharded over ``dp_dense`` /
    ``dp_expert`` ranks, and the logits the first and the last device hold. Everything of a
    device's memory but its activations: one core row's at one ZeRO stage under synchronous
    data parallelism, whatever the order, recompute and overlap (the native batch drivers keep
    it per row)."""
    h = mdl[MDL_HIDDEN]
    vocab = mdl[MDL_VOCAB]
    swiglu = mdl[MDL_SWIGLU] > 0.0
    d1, m1, d2, m2, d3, m3, loss_first = stage_layer_splits(mdl, job, int(row[ROW_SCHEDULE]),
                                                            row[ROW_PP], row[ROW_VPP])
    tp = row[ROW_TP]
    etp = expert_tp_degree(tp, row[ROW_DP], row[ROW_EP])
    copies = parameter_copies(int(row[ROW_SCHEDULE]))
    attn_p = attention_params(h, mdl[MDL_HEADS], mdl[MDL_KV_HEADS], mdl[MDL_HEAD_DIM])
    dense_layer_p = attn_p + mlp_params(h, mdl[MDL_FFN_HIDDEN], swiglu)
    moe_layer_p = attn_p + h * mdl[MDL_EXPERTS] \
        + mdl[MDL_SHARED_EXPERTS] * mlp_params(h, mdl[MDL_EXPERT_FFN_HIDDEN], swiglu)
    expert_layer_p = (mdl[MDL_EXPERTS] / row[ROW_EP]) \
        * mlp_params(h, mdl[MDL_EXPERT_FFN_HIDDEN], swiglu)
    emb_p = embedding_params(vocab, h)
    # the FP8 linear layers' weights (the router, norms and embeddings stay 16-bit)
    lin = layer_linear_params(mdl, swiglu)
    param_bytes = job[JOB_PARAM_BYTES]
    grad_bytes = job[JOB_GRAD_BYTES]
    opt_bytes = job[JOB_OPTIMIZER_BYTES] + sync_outer_state_bytes(job)
    if job[JOB_OFFLOAD_OPTIMIZER] > 0.0:
        opt_bytes = 0.0  # the optimizer states (DiLoCo's outer ones too) live in host memory
    logits = logits_memory_bytes(row[ROW_B], row[ROW_S], vocab, tp, job[JOB_ACTIVATION_BYTES],
                                 job[JOB_LOGITS_EXTRA_BYTES])
    mtp = mdl[MDL_MTP_LAYERS]
    if mtp > 0.0:
        # every MTP block keeps its own logits and its projection's input
        logits = (1.0 + mtp) * logits + mtp * mtp_projection_input_bytes(
            row[ROW_B], row[ROW_S], h, tp, row[ROW_SP] > 0.0, job[JOB_ACTIVATION_BYTES])
    last_embed = row[ROW_PP] <= 1.0
    keep = fsdp_keeps_unsharded(job, row)
    p1 = stage_params(d1, m1, dense_layer_p, moe_layer_p, expert_layer_p, True, loss_first,
                      emb_p, tp, etp, copies, mtp_stage_params(mdl, emb_p, True))
    p2 = stage_params(d2, m2, dense_layer_p, moe_layer_p, expert_layer_p, False, False, emb_p,
                      tp, etp, copies, 0.0)
    p3 = stage_params(d3, m3, dense_layer_p, moe_layer_p, expert_layer_p, last_embed, True,
                      emb_p, tp, etp, copies, mtp_stage_params(mdl, emb_p, last_embed))
    s1 = stage_state_memory(job, p1[0], p1[1], stage_linear_params(d1, m1, lin, tp, copies),
                            d1 + m1, zero, dp_dense, dp_expert, param_bytes, grad_bytes,
                            opt_bytes, keep)
    s2 = stage_state_memory(job, p2[0], p2[1], stage_linear_params(d2, m2, lin, tp, copies),
                            d2 + m2, zero, dp_dense, dp_expert, param_bytes, grad_bytes,
                            opt_bytes, keep)
    s3 = stage_state_memory(job, p3[0], p3[1], stage_linear_params(d3, m3, lin, tp, copies),
                            d3 + m3, zero, dp_dense, dp_expert, param_bytes, grad_bytes,
                            opt_bytes, keep)
    return (s1[0], s1[1], s1[2], s2[0], s2[1], s2[2], s3[0], s3[1], s3[2],
            logits if loss_first else 0.0, logits)


def finish_config_state(sys, mdl, job, row, ordt, rect, dp_first, dp_second, zero, dp_overlap,
                        dp_dense, dp_expert, state, out, i):
    """:func:`finish_config` with the ranks ZeRO shards over (:func:`zero_shard_ranks`) and the
    device memory but activations (:func:`state_memory_terms`) given."""
    m = row[ROW_M]
    dense_params = row[ROW_DENSE_PARAMS]
    expert_params = row[ROW_EXPERT_PARAMS]
    f_stage = rect[REC_F_STAGE]
    b_stage = rect[REC_B_STAGE]
    w_stage = rect[REC_W_STAGE]

    # ---- data parallelism ----------------------------------------------------------------------
    # gradient buckets (Megatron-Core DDP): the last bucket's reduction and the first bucket's
    # gather are exposed whatever the window (see bucketed_exposed)
    # (model chunks only with a pipeline: at pp = 1 no schedule splits the device's layers)
    chunks = 1.0
    if row[ROW_PP] > 1.0:
        chunks = schedule_chunks(int(row[ROW_SCHEDULE]), row[ROW_VPP])
    share = dp_last_bucket_share(row[ROW_DENSE_PARAMS] + row[ROW_EXPERT_PARAMS],
                                 dp_bucket_params(job, row[ROW_CP] * row[ROW_DP]), chunks)
    if zero == 0:
        dp_time = bucketed_exposed(dp_first, b_stage + w_stage, share, dp_overlap)
    elif zero == 1 or zero == 2:
        # gradients reduce under the last backward; parameters gather under the next forward
        dp_time = bucketed_exposed(dp_first, b_stage + w_stage, share, dp_overlap) \
            + bucketed_exposed(dp_second, f_stage, share, dp_overlap)
    else:
        # ZeRO-3 / FSDP: every unit gathers its weights for forward and again for backward and
        # reduce-scatters its gradients, for every microbatch (Rajbhandari et al. 2020 §5; Zhao
        # et al. VLDB 2023, PyTorch FSDP §3.2-3.3); dp_first, dp_second are one unit's
        units = fsdp_units(row)
        if fsdp_keeps_unsharded(job, row):
            # weights gathered once, in the first microbatch's forward, gradients
            # reduce-scattered once, after the last backward (fsdp_keeps_unsharded)
            dp_time = fsdp_exposed(dp_second, units * (dp_second + dp_first),
                                   f_stage + b_stage + w_stage, dp_overlap)
        else:
            dp_time = m * fsdp_exposed(dp_second, units * (2.0 * dp_second + dp_first),
                                       f_stage + b_stage + w_stage, dp_overlap)

    # ---- cross-site synchronisation (job.sync; synchronous: inside the collectives above) ----
    strategy = job[JOB_SYNC_STRATEGY]
    if strategy != SYNC_SYNCHRONOUS:
        dp_time += cross_site_exposed(strategy, cross_site_sync_time(sys, job, row, ordt,
                                                                     strategy),
                                      rect[REC_COMPUTE],
                                      streaming_overlap_window(job, rect[REC_COMPUTE]))

    # ---- optimizer step (memory-bound over the shard this GPU owns) ---------------------------
    opt_dense = dense_params / dp_dense if zero >= 1 else dense_params
    opt_expert = expert_params / dp_expert if zero >= 1 else expert_params
    optimizer = memory_bound_time(sys, (opt_dense + opt_expert) * job[JOB_OPTIMIZER_TRAFFIC_BYTES])
    offload = job[JOB_OFFLOAD_OPTIMIZER] > 0.0
    if offload:
        optimizer = offload_optimizer_time(sys, job, opt_dense + opt_expert, b_stage + w_stage,
                                           dp_overlap)

    # ---- step ----------------------------------------------------------------------------------
    compute = rect[REC_COMPUTE]
    tp_comm = rect[REC_TP_COMM]
    cp_comm = rect[REC_CP_COMM]
    ep_comm = rect[REC_EP_COMM]
    pp_comm = ordt[ORD_PP_COMM]
    bubble = rect[REC_BUBBLE]
    act_offload = rect[REC_OFFLOAD]
    overhead = step_overhead(sys)
    step = compute + tp_comm + cp_comm + ep_comm + pp_comm + bubble + dp_time + optimizer \
        + act_offload + overhead

    # ---- memory per GPU: the largest of the first, busiest middle and last stage's ------------
    # (ZeRO paper §5 accounting, Rajbhandari et al. 2020; see stage_state_memory)
    logits_first = state[9]
    logits = state[10]
    s1 = (state[0], state[1], state[2],
          state[0] + state[1] + state[2] + rect[REC_MEM_ACT] + logits_first)
    s2 = (state[3], state[4], state[5],
          state[3] + state[4] + state[5] + rect[REC_MEM_ACT_MID] + 0.0)
    s3 = (state[6], state[7], state[8],
          state[6] + state[7] + state[8] + rect[REC_MEM_ACT_LAST] + logits)
    # the last stage unless another one needs more
    sm = s3
    mem_act = rect[REC_MEM_ACT_LAST]
    mem_logits = logits
    if s1[3] > sm[3]:
        sm = s1
        mem_act = rect[REC_MEM_ACT]
        mem_logits = logits_first
    if s2[3] > sm[3]:
        sm = s2
        mem_act = rect[REC_MEM_ACT_MID]
        mem_logits = 0.0
    mem_weights = sm[0]
    mem_grads = sm[1]
    mem_opt = sm[2]
    mem_reserve = reserve_bytes(sys)
    memory = sm[3] + mem_reserve

    return write_result(out, i, sys, memory, step, row[ROW_MODEL_FLOPS], rect[REC_HW_FLOPS],
                        gpu_count(sys), job[JOB_SEQ_LEN], job[JOB_GLOBAL_BATCH], compute,
                        tp_comm, cp_comm, ep_comm, pp_comm, bubble, dp_time, optimizer,
                        mem_weights, mem_grads, mem_opt, mem_act, mem_logits, mem_reserve, m,
                        act_offload, overhead)


def step_overhead(sys):
    """The step's fixed cost outside the GPU's queue of work (``step_overhead_s``): time the
    GPUs wait while the host catches up at the training loop's synchronisation points, once a
    step, whatever the layout. The host launches kernels ahead of the GPU except where it
    waits for a GPU value, and after each wait the GPU idles until new work is queued:
    Megatron-Core's optimizer step reads the gradient norm to the host
    (``megatron/core/optimizer/clip_grads.py`` ``get_grad_norm_fp32``: ``total_norm.item()``)
    and, with a loss scaler, the found-inf flag (``megatron/core/optimizer/optimizer.py``
    ``found_inf.item()``), NeMo reduces and logs the loss every step, and each step's batch is
    fetched, broadcast over the TP group and copied to the GPU (``megatron/core/utils.py``
    ``get_batch_on_this_tp_rank``, from ``pretrain_gpt.py`` ``get_batch``; Megatron-LM main,
    read 2026-11). None of these scale with the model or the layout: one constant per GPU
    system, times the software stack's multiplier (``presets/stacks.toml``), fitted
    (``scripts/calibrate.py``); it shows where steps are short (a few hundred ms)."""
    return sys[SYS_STEP_OVERHEAD_S]


# =============================================================================================
# Result columns
# =============================================================================================


def fp8_weight_cache_bytes(job, linear_params):
    """Bytes of the FP8 weight copies Transformer Engine keeps beside the BF16 weights: every FP8
    linear layer caches its quantized weight (and, for Hopper's TN-only FP8 GEMMs, its transposed
    copy for dgrad) across microbatches (``is_first_microbatch``; TE docs, FP8 primer), at
    ``fp8_weight_cache_bytes`` per weight (0 in a 16-bit job). With FP8 parameters
    (``job.fp8_param_gather``) the weights have no 16-bit copy and the field holds the FP8
    copies net of the 16-bit bytes already counted (``spec.pack.fp8_linear_weight_extra_bytes``:
    0 for per-tensor recipes)."""
    return linear_params * job[JOB_FP8_WEIGHT_CACHE_BYTES]


def reserve_bytes(sys):
    """HBM the model cannot use (CUDA context, allocator fragmentation)."""
    return sys[SYS_HBM_RESERVE_BYTES]


def write_invalid(out, i, code):
    """An invalid configuration: status set, infeasible, infinite step time, zero rates."""
    for k in range(N_OUT):
        out[k, i] = 0.0
    if code >= 8 and code <= 14:
        out[OUT_STATUS, i] = STATUS_BAD_INDEX
    else:
        out[OUT_STATUS, i] = STATUS_INVALID_CONFIG
    out[OUT_STEP_TIME_S, i] = math.inf
    return int(out[OUT_STATUS, i])


def cost_per_step_usd(step, gpus, usd_per_gpu_s):
    """What one step costs: the GPU-seconds it holds (every GPU of the job for the step time)
    times the price of a GPU-second (the GPU's price per hour plus each network tier's per-GPU
    share, / 3600; packed as ``usd_per_gpu_s``): the GPU-hour accounting of cloud list prices
    (e.g. AWS EC2 P5 on-demand, per instance-hour of 8 GPUs); 0 when no price is given."""
    return step * gpus * usd_per_gpu_s


def energy_per_step_j(step, gpus, power_w):
    """Energy of one step: the GPUs' power for the step time (``power_w`` per GPU, e.g. its
    board power / TDP as an upper bound, or a measured figure)."""
    return step * gpus * power_w


def tokens_per_unit(tokens, amount):
    """Tokens per dollar or per joule: ``tokens / amount``; 0 when the amount is not known
    (0), so a result never holds an infinity."""
    if amount > 0.0:
        return tokens / amount
    return 0.0


def mfu_peak_flops(sys):
    """The peak MFU is quoted against: the GPU's rated (datasheet) 16-bit peak, also under a
    power limit that lowers the clock (``power_limit_w``; torchtitan's H100 benchmarks quote
    their 500 W parts' MFU against the SXM5 peak for the same reason); ``peak_flops`` where
    the system block does not give it."""
    if sys[SYS_MFU_PEAK_FLOPS] > 0.0:
        return sys[SYS_MFU_PEAK_FLOPS]
    return sys[SYS_PEAK_FLOPS]


def write_result(out, i, sys, memory, step, model_flops, hw_flops, gpus, seq, global_batch,
                 compute, tp_comm, cp_comm, ep_comm, pp_comm, bubble, dp_comm, optimizer,
                 mem_weights, mem_grads, mem_opt, mem_act, mem_logits, mem_reserve, m,
                 act_offload, overhead):
    """Write a costed configuration; feasible when its memory fits in HBM."""
    fits = memory <= sys[SYS_HBM_BYTES]
    out[OUT_STATUS, i] = STATUS_OK if fits else STATUS_OUT_OF_MEMORY
    out[OUT_FEASIBLE, i] = 1.0 if fits else 0.0
    out[OUT_STEP_TIME_S, i] = step
    out[OUT_TOKENS_PER_S, i] = global_batch * seq / step
    out[OUT_MFU, i] = model_flops / (step * gpus * mfu_peak_flops(sys))
    out[OUT_MODEL_TFLOPS_PER_GPU, i] = model_flops / (step * gpus) * 1e-12
    out[OUT_HW_TFLOPS_PER_GPU, i] = hw_flops / (step * gpus) * 1e-12
    out[OUT_MEMORY_GIB, i] = memory / GIB
    out[OUT_COMPUTE_S, i] = compute
    out[OUT_TP_COMM_S, i] = tp_comm
    out[OUT_CP_COMM_S, i] = cp_comm
    out[OUT_EP_COMM_S, i] = ep_comm
    out[OUT_PP_COMM_S, i] = pp_comm
    out[OUT_BUBBLE_S, i] = bubble
    out[OUT_DP_COMM_S, i] = dp_comm
    out[OUT_OPTIMIZER_S, i] = optimizer
    out[OUT_MEM_WEIGHTS_GIB, i] = mem_weights / GIB
    out[OUT_MEM_GRADS_GIB, i] = mem_grads / GIB
    out[OUT_MEM_OPTIMIZER_GIB, i] = mem_opt / GIB
    out[OUT_MEM_ACTIVATIONS_GIB, i] = mem_act / GIB
    out[OUT_MEM_LOGITS_GIB, i] = mem_logits / GIB
    out[OUT_MEM_RESERVE_GIB, i] = mem_reserve / GIB
    out[OUT_MICROBATCHES, i] = m
    out[OUT_OFFLOAD_S, i] = act_offload
    out[OUT_OVERHEAD_S, i] = overhead
    tokens = global_batch * seq
    cost = cost_per_step_usd(step, gpus, sys[SYS_USD_PER_GPU_S])
    out[OUT_COST_PER_STEP_USD, i] = cost
    out[OUT_TOKENS_PER_USD, i] = tokens_per_unit(tokens, cost)
    out[OUT_TOKENS_PER_JOULE, i] = tokens_per_unit(tokens,
                                                   energy_per_step_j(step, gpus, sys[SYS_POWER_W]))
    return guard_finite(out, i)


def guard_finite(out, i):
    """The kernel's own defence (the reliability contract): a result with a non-finite output
    or a step time that is not a positive finite number becomes status ``overflow`` --
    infeasible, every output 0, step time infinite -- instead of NaN or Infinity reported with
    status ok. The validator's ranges (``spec/ranges.py``) keep valid inputs away from this;
    the guard holds whatever reaches the kernel. Returns the status."""
    bad = not (out[OUT_STEP_TIME_S, i] > 0.0)
    for k in range(N_OUT):
        v = out[k, i]
        if not math.isfinite(v):
            bad = True
    if bad:
        for k in range(N_OUT):
            out[k, i] = 0.0
        out[OUT_STATUS, i] = STATUS_OVERFLOW
        out[OUT_STEP_TIME_S, i] = math.inf
    return int(out[OUT_STATUS, i])
