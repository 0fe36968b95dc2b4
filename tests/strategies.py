"""Hypothesis strategies that draw packed blocks and config columns directly.

Blocks (system, model, job) are drawn as the kernels see them (``layout`` indices, SI units):
systems with 1..MAX_TIERS tiers whose capacity usually (not always) holds the GPUs, dense and
MoE models with odd layer counts and GQA, jobs with every dtype width. Config columns are built
so that a good share is valid (the GPU count's prime factors dealt out over tp/cp/pp/dp, ep and
mbs from divisors) and the rest hits every rule of ``config_error``: degree 1, huge groups,
memory that does not fit, and invalid or out-of-range values (negative degrees, unknown
schedule / recompute / zero / order codes, int32 extremes).

Values are kept where the reference's integer arithmetic is exact (products of two config
fields fit in int32), since the reference computes some checks on NumPy int32 scalars.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st

from trainscape import layout as L

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0] if n <= 4096 else \
        sorted({d for k in range(1, int(n**0.5) + 1) if n % k == 0 for d in (k, n // k)})


# ------------------------------------------------------------------------------------------
# Blocks
# ------------------------------------------------------------------------------------------

gpu_counts = st.one_of(
    st.sampled_from([1, 2, 4, 8, 16, 64, 256, 1024, 2048, 8192, 16384]),
    st.integers(1, 64),  # odd and prime counts
    st.sampled_from([3 * 2**k for k in range(12)]),
    st.sampled_from([2**16, 2**18, 2**20]),  # huge groups
)


@st.composite
def tiers(draw, gpus: int):
    """Tier rows ``(size, bandwidth, latency, efficiency, oversubscription, window_bytes,
    handshake_rtts, comm_dtype_bytes)``, innermost first;
    the product of sizes usually covers ``gpus``."""
    n = draw(st.integers(1, L.MAX_TIERS))
    rows = []
    cap = 1
    for i in range(n):
        if i == n - 1:
            need = -(-gpus // cap)
            if draw(st.integers(0, 9)) > 0:
                size = draw(st.one_of(st.just(need), st.integers(need, need + 4)))
            else:  # sometimes too small: config_error code 26
                size = draw(st.integers(1, max(1, need)))
        else:
            size = draw(st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 72]))
        cap *= size
        bw = draw(st.floats(1e8, 2e12))
        lat = draw(st.one_of(st.just(0.0), st.floats(1e-7, 5e-3)))
        eff = draw(st.floats(0.05, 1.0))
        over = draw(st.one_of(st.just(1.0), st.floats(1.0, 16.0), st.floats(0.5, 1.0)))
        # transport: no window limit mostly, else a window (bytes in flight) that may bind;
        # RDMA (no handshake) or TCP (one RTT per message)
        window = draw(st.one_of(st.just(0.0), st.just(0.0), st.floats(1e3, 1e9)))
        handshake = draw(st.sampled_from([0.0, 0.0, 1.0]))
        # comm_dtype of the data-parallel traffic crossing the tier: none mostly, bf16, or
        # fp8 / int8 with one fp32 scale per 128 elements (spec.pack.comm_dtype_bytes)
        comm_dtype = draw(st.sampled_from([0.0, 0.0, 0.0, 2.0, 1.03125]))
        rows.append((float(size), bw, lat, eff, over, window, handshake, comm_dtype))
    return rows


@st.composite
def system_blocks(draw, gpus: int | None = None):
    if gpus is None:
        gpus = draw(gpu_counts)
    sys = np.zeros(L.N_SYS, dtype=np.float64)
    sys[L.SYS_GPUS] = gpus
    rows = draw(tiers(gpus))
    sys[L.SYS_N_TIERS] = len(rows)
    sys[L.SYS_PEAK_FLOPS] = draw(st.floats(1e13, 5e15))
    # small HBM sometimes, so memory does not fit
    sys[L.SYS_HBM_BYTES] = draw(st.one_of(st.floats(16e9, 192e9), st.floats(1e8, 16e9)))
    sys[L.SYS_HBM_BANDWIDTH] = draw(st.floats(2e11, 8e12))
    sys[L.SYS_HBM_RESERVE_BYTES] = draw(st.one_of(st.just(0.0), st.floats(0.0, 8e9)))
    sys[L.SYS_GEMM_EFFICIENCY_MAX] = draw(st.floats(0.3, 1.0))
    sys[L.SYS_GEMM_HALF_FLOPS] = draw(st.one_of(st.just(0.0), st.floats(0.0, 1e12)))
    sys[L.SYS_ATTENTION_EFFICIENCY] = draw(st.floats(0.1, 0.9))
    sys[L.SYS_MEMORY_EFFICIENCY] = draw(st.floats(0.3, 1.0))
    # the streaming microbenchmark's efficiency, or 0 (falls back to memory_efficiency)
    sys[L.SYS_STREAM_MEMORY_EFFICIENCY] = draw(st.one_of(st.just(0.0), st.floats(0.5, 1.0)))
    sys[L.SYS_LAYER_OVERHEAD_S] = draw(st.one_of(st.just(0.0), st.floats(0.0, 5e-5)))
    # the host's time to issue an eager op: none, an x86 host's, a Grace host's, or any
    sys[L.SYS_HOST_OP_S] = draw(st.one_of(st.just(0.0), st.sampled_from([10e-6, 27.5e-6]),
                                          st.floats(0.0, 1e-4)))
    # the linear layers' curve: the 16-bit one (a bf16 job) or its own (FP8)
    if draw(st.booleans()):
        sys[L.SYS_LINEAR_PEAK_FLOPS] = sys[L.SYS_PEAK_FLOPS]
        sys[L.SYS_LINEAR_EFFICIENCY_MAX] = sys[L.SYS_GEMM_EFFICIENCY_MAX]
        sys[L.SYS_LINEAR_HALF_FLOPS] = sys[L.SYS_GEMM_HALF_FLOPS]
    else:
        sys[L.SYS_LINEAR_PEAK_FLOPS] = sys[L.SYS_PEAK_FLOPS] * draw(st.floats(1.0, 4.0))
        sys[L.SYS_LINEAR_EFFICIENCY_MAX] = draw(st.floats(0.3, 1.0))
        sys[L.SYS_LINEAR_HALF_FLOPS] = draw(st.one_of(st.just(0.0), st.floats(0.0, 1e12)))
    sys[L.SYS_TP_OVERLAP_EXPOSED] = draw(st.one_of(st.just(0.0), st.just(1.0),
                                                   st.floats(0.0, 1.0)))
    sys[L.SYS_TP_OVERLAP_SLOWDOWN] = draw(st.one_of(st.just(0.0), st.floats(0.0, 0.5)))
    sys[L.SYS_CP_OVERLAP_SLOWDOWN] = draw(st.one_of(st.just(0.0), st.floats(0.0, 0.5)))
    sys[L.SYS_ATTENTION_HALF_SEQ] = draw(st.one_of(st.just(0.0), st.floats(0.0, 4096.0)))
    sys[L.SYS_ATTENTION_HEAD_DIM_HALF] = draw(st.one_of(st.just(0.0), st.sampled_from(
        [18.3, 36.2, 73.1]), st.floats(0.0, 512.0)))
    # price of a GPU-second and power per GPU; 0 = not given
    sys[L.SYS_USD_PER_GPU_S] = draw(st.one_of(st.just(0.0), st.floats(1e-5, 1e-2)))
    sys[L.SYS_POWER_W] = draw(st.one_of(st.just(0.0), st.floats(100.0, 1500.0)))
    sys[L.SYS_HOST_LINK_BANDWIDTH] = draw(st.floats(8e9, 2e11))  # > 0: offload may be drawn
    sys[L.SYS_HOST_MEMORY_BANDWIDTH] = draw(st.floats(2e10, 5e11))
    for i, row in enumerate(rows):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        for f, v in enumerate(row):
            sys[base + f] = v
    # a site graph over the outermost tier's domains (spec.pack: the site links in path order,
    # each a tier record), often when the outermost tier has 2..MAX_SITES domains
    outer = int(rows[-1][0])
    if len(rows) >= 2 and 2 <= outer <= L.MAX_SITES and draw(st.integers(0, 2)) > 0:
        sys[L.SYS_N_SITES] = outer
        for a in range(outer):
            for b in range(a + 1, outer):
                link = draw(tiers(1).map(lambda r: r[0]))  # one tier row's link fields
                for x, y in ((a, b), (b, a)):
                    base = L.SYS_SITE_LINK_BASE + (x * L.MAX_SITES + y) * L.N_TIER
                    for f, v in enumerate(link):
                        sys[base + f] = v if f != L.TIER_SIZE else 0.0
    return sys


@st.composite
def model_blocks(draw, moe: bool | None = None):
    mdl = np.zeros(L.N_MODEL, dtype=np.float64)
    heads = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40, 64, 96, 128]))
    kv = draw(st.one_of(st.sampled_from([d for d in _divisors(heads)]), st.integers(1, heads)))
    head_dim = draw(st.sampled_from([16, 32, 64, 80, 96, 128, 192]))
    hidden = draw(st.one_of(st.just(heads * head_dim), st.sampled_from([512, 768, 1024, 4096,
                                                                        5120, 12288, 16384])))
    ffn = draw(st.one_of(st.just(4 * hidden), st.sampled_from([1376, 2816, 11008, 14336, 28672,
                                                               53248]),
                         st.integers(64, 65536)))
    mdl[L.MDL_LAYERS] = draw(st.one_of(st.integers(1, 130), st.sampled_from([32, 80, 96, 126,
                                                                             128])))
    mdl[L.MDL_HIDDEN] = hidden
    mdl[L.MDL_FFN_HIDDEN] = ffn
    mdl[L.MDL_HEADS] = heads
    mdl[L.MDL_KV_HEADS] = kv
    mdl[L.MDL_HEAD_DIM] = head_dim
    mdl[L.MDL_VOCAB] = draw(st.one_of(st.sampled_from([32000, 50257, 128256, 256000]),
                                      st.integers(1, 300000)))
    mdl[L.MDL_SWIGLU] = draw(st.sampled_from([0.0, 1.0]))
    # sliding-window attention: none (most models), short (GPT-OSS's 128), long (Mistral's
    # 4096), any; full layers never, alternate, one in six, or a drawn stride up to the depth
    window = draw(st.one_of(st.just(0), st.just(0), st.sampled_from([128, 1024, 4096]),
                            st.integers(1, 40000)))
    mdl[L.MDL_ATTENTION_WINDOW] = window
    if window:
        mdl[L.MDL_FULL_ATTENTION_EVERY] = draw(st.one_of(
            st.sampled_from([0, 2, 6]), st.integers(1, int(mdl[L.MDL_LAYERS]))))
    if moe is None:
        moe = draw(st.booleans())
    if moe:
        experts = draw(st.sampled_from([2, 4, 8, 16, 32, 64, 160, 256]))
        mdl[L.MDL_EXPERTS] = experts
        mdl[L.MDL_TOP_K] = draw(st.integers(1, min(8, experts)))
        mdl[L.MDL_EXPERT_FFN_HIDDEN] = draw(st.one_of(st.sampled_from([1408, 2048, 14336]),
                                                      st.integers(64, 16384)))
        mdl[L.MDL_MOE_EVERY] = draw(st.sampled_from([1, 1, 2, 3]))
        mdl[L.MDL_SHARED_EXPERTS] = draw(st.sampled_from([0, 0, 1, 2]))
        # node-limited routing: none, a limit below / at / above top_k
        mdl[L.MDL_MAX_ROUTE_NODES] = draw(st.sampled_from([0, 0, 1, 2, 3, 4, 8]))
        # leading dense layers: none (most MoE models), DeepSeek-V3's 3, Kimi K2's 1, or any
        # count up to the depth (past layers - moe_every no MoE layer is left: the spec refuses
        # it, the kernel keeps its counts sane)
        mdl[L.MDL_FIRST_DENSE_LAYERS] = draw(st.one_of(
            st.sampled_from([0, 0, 0, 1, 3]), st.integers(0, int(mdl[L.MDL_LAYERS]))))
    # multi-token prediction: none (most models), DeepSeek-V3's one block, a deeper stack
    mdl[L.MDL_MTP_LAYERS] = min(draw(st.sampled_from([0, 0, 0, 1, 2])), mdl[L.MDL_LAYERS])
    return mdl


@st.composite
def job_blocks(draw):
    job = np.zeros(L.N_JOB, dtype=np.float64)
    job[L.JOB_SEQ_LEN] = draw(st.one_of(st.sampled_from([512, 2048, 4096, 8192, 32768, 131072]),
                                        st.integers(1, 20000)))
    job[L.JOB_GLOBAL_BATCH] = draw(st.one_of(
        st.sampled_from([1, 8, 64, 256, 512, 1024, 1536, 2048, 4096, 16384]),
        st.integers(1, 5000)))
    act = draw(st.sampled_from([1.0, 2.0, 4.0]))
    job[L.JOB_ACTIVATION_BYTES] = act
    job[L.JOB_PARAM_BYTES] = draw(st.sampled_from([1.0, 2.0, 4.0]))
    # the linear weights' all-gather width: param_bytes, or FP8 with job.fp8_param_gather (per-
    # tensor, mxfp8 scales; spec.pack.linear_param_comm_bytes)
    job[L.JOB_LINEAR_PARAM_COMM_BYTES] = draw(st.sampled_from(
        [job[L.JOB_PARAM_BYTES], job[L.JOB_PARAM_BYTES], 1.0, 1.03125]))
    job[L.JOB_GRAD_BYTES] = draw(st.sampled_from([2.0, 4.0]))
    job[L.JOB_OPTIMIZER_BYTES] = draw(st.sampled_from([0.0, 6.0, 8.0, 12.0, 16.0]))
    job[L.JOB_OPTIMIZER_TRAFFIC_BYTES] = draw(st.sampled_from([0.0, 16.0, 24.0, 36.0]))
    job[L.JOB_COMM_BYTES] = draw(st.sampled_from([act, 1.0, 2.0]))
    job[L.JOB_GRAD_COMM_BYTES] = draw(st.sampled_from([2.0, 4.0]))
    job[L.JOB_FLASH_ATTENTION] = draw(st.sampled_from([0.0, 1.0]))
    # MoE all-to-all widths: fp8 with its 1x128 scales, 16-bit, and the activation width
    job[L.JOB_DISPATCH_BYTES] = draw(st.sampled_from([1.03125, 2.0, act]))
    job[L.JOB_COMBINE_BYTES] = draw(st.sampled_from([2.0, 1.03125, act]))
    job[L.JOB_PIPELINE_EDGE_LAYERS] = draw(st.sampled_from([0.0, 0.0, 1.0, 2.0, 5.0]))
    # stated first / last stage layers: mostly by rule, else counts that fit a stage or not
    job[L.JOB_PIPELINE_FIRST_STAGE_LAYERS] = float(draw(st.sampled_from([0, 0, 0, 1, 3, 7, 16])))
    job[L.JOB_PIPELINE_LAST_STAGE_LAYERS] = float(draw(st.sampled_from([0, 0, 0, 1, 2, 6, 16])))
    job[L.JOB_DROPOUT] = draw(st.sampled_from([0.0, 1.0]))
    # FP8 recipes' cast traffic and weight copies (spec.pack.fp8_cast_bytes), or none (bf16);
    # with FP8 parameters the copies net of the 16-bit weight (mxfp8: 0.0625,
    # spec.pack.fp8_linear_weight_extra_bytes)
    job[L.JOB_LINEAR_CAST_BYTES] = draw(st.sampled_from([0.0, 0.0, 4.0, 6.0, 4.0625]))
    job[L.JOB_FP8_WEIGHT_CACHE_BYTES] = draw(st.sampled_from([0.0, 0.0, 2.0, 2.0625, 0.0625]))
    # saved linear-layer inputs: the activation width (16-bit) or the FP8 copy with its scales
    # (spec.pack.saved_linear_input_bytes)
    job[L.JOB_LINEAR_INPUT_BYTES] = draw(st.sampled_from([act, act, 1.0, 1.03125]))
    # sequence-parallel all-gathers of the FP8 copy (spec.pack.tp_gather_bytes), or 0: comm
    job[L.JOB_TP_GATHER_BYTES] = draw(st.sampled_from([0.0, 0.0, 1.0, 1.03125, 4.0]))
    # the cross-entropy's fp32 copy of the logits, or a fused kernel's gradient (spec.pack)
    job[L.JOB_LOGITS_EXTRA_BYTES] = draw(st.sampled_from([4.0, 4.0, act]))
    job[L.JOB_OFFLOAD_OPTIMIZER] = draw(st.sampled_from([0.0, 0.0, 1.0]))  # ZeRO-Offload
    # job.sync: synchronous (most draws), DiLoCo with H steps, or a one-step delayed reduction;
    # outer traffic in fp32 / bf16 / fp8-int8 widths (a ZeRO-3 column is then invalid: code 28)
    strategy = draw(st.sampled_from([L.SYNC_SYNCHRONOUS, L.SYNC_SYNCHRONOUS, L.SYNC_DILOCO,
                                     L.SYNC_DELAYED]))
    job[L.JOB_SYNC_STRATEGY] = strategy
    job[L.JOB_SYNC_INNER_STEPS] = draw(st.sampled_from([1.0, 4.0, 32.0, 500.0])) \
        if strategy == L.SYNC_DILOCO else 1.0
    job[L.JOB_SYNC_OUTER_BYTES] = draw(st.sampled_from([job[L.JOB_GRAD_COMM_BYTES], 4.0, 2.0,
                                                        1.0]))
    # Streaming DiLoCo: P fragments (at most H) and tau overlapped inner steps (below H)
    h = int(job[L.JOB_SYNC_INNER_STEPS])
    job[L.JOB_SYNC_FRAGMENTS] = float(draw(st.sampled_from([1, 1, 2, 4, h]))) \
        if strategy == L.SYNC_DILOCO and h > 1 else 1.0
    if job[L.JOB_SYNC_FRAGMENTS] > h:
        job[L.JOB_SYNC_FRAGMENTS] = 1.0
    job[L.JOB_SYNC_OVERLAP_STEPS] = float(draw(st.sampled_from([0, 0, 1, h - 1]))) \
        if strategy == L.SYNC_DILOCO and h > 1 else 0.0
    # activation offload: the share of each stage's layers offloaded to host memory
    job[L.JOB_OFFLOAD_ACTIVATIONS] = draw(st.one_of(st.sampled_from([0.0, 0.0, 0.5, 1.0]),
                                                    st.floats(0.0, 1.0)))
    # data-parallel gradient buckets: none, Megatron-Core's rule, a fixed size (1 parameter
    # to more than any model: one bucket)
    job[L.JOB_DP_BUCKET_MIN_PARAMS], job[L.JOB_DP_BUCKET_PARAMS_PER_RANK] = draw(st.sampled_from(
        [(0.0, 0.0), (4e7, 1e6), (4e7, 1e6), (1.0, 0.0), (2.5e7, 0.0), (1e15, 0.0)]))
    # Megatron-Core recompute modules beside selective recompute's attention core
    job[L.JOB_RECOMPUTE_LAYERNORM] = float(draw(st.sampled_from([0, 0, 1])))
    job[L.JOB_RECOMPUTE_MOE_ACT] = float(draw(st.sampled_from([0, 0, 1])))
    job[L.JOB_RECOMPUTE_MLP] = float(draw(st.sampled_from([0, 0, 1])))
    job[L.JOB_RECOMPUTE_MOE] = float(draw(st.sampled_from([0, 0, 1])))
    job[L.JOB_RECOMPUTE_SHARED_EXPERTS] = float(draw(st.sampled_from([0, 0, 1])))
    # ZeRO-3's parameter shard: 16-bit beside the master, or the fp32 master itself (FSDP)
    job[L.JOB_ZERO3_SHARD_PARAM_BYTES] = draw(st.sampled_from([job[L.JOB_PARAM_BYTES], 0.0]))
    # fused element-wise kernels, or PyTorch eager's op-by-op norms, rotary and SwiGLU
    job[L.JOB_EAGER_ELEMENTWISE] = float(draw(st.sampled_from([0, 0, 1])))
    # TP collectives that also copy their buffer (a [batch, seq, hidden] stack), or none
    job[L.JOB_TP_SEQUENCE_COPY] = float(draw(st.sampled_from([0, 0, 1])))
    # ZeRO-3 under a pipeline: unit by unit every microbatch, or kept unsharded all step
    job[L.JOB_FSDP_PP_UNSHARDED] = float(draw(st.sampled_from([0, 0, 1])))
    # MoE experts: one GEMM per local expert (Transformer Engine), or one grouped kernel
    job[L.JOB_GROUPED_EXPERT_GEMM] = float(draw(st.sampled_from([0, 0, 1])))
    # the routed experts' bias fused (or none), or added per expert in eager PyTorch
    job[L.JOB_EAGER_EXPERT_BIAS] = float(draw(st.sampled_from([0, 0, 1])))
    # full recompute of every layer, or of the first N of each model chunk (block method)
    job[L.JOB_RECOMPUTE_LAYERS] = float(draw(st.sampled_from([0, 0, 1, 2, 5, 64])))
    # hybrid sharding: ZeRO over all data-parallel ranks (most draws; 0 in a packed block
    # means the same), or R replica groups (layouts whose dp / ep R does not divide are code
    # 32, and so, rarely drawn, are replicas under the other sync strategies)
    replicas = [0, 1, 1, 2, 2, 3, 4, 8] if strategy == L.SYNC_SYNCHRONOUS else [1, 1, 1, 1, 2]
    job[L.JOB_DP_REPLICAS] = float(draw(st.sampled_from(replicas)))
    return job


@st.composite
def site_blocks(draw, moe: bool | None = None):
    """``(sys, mdl, job)`` on a site graph whose sites tile the GPUs exactly (as spec.pack packs
    one): 2..MAX_SITES sites of ``node x mid`` GPUs, the site tier and random per-pair links
    (asymmetric at times: the kernels read each direction), so that pipelines crossing sites
    take the per-link path (collectives.site_path_transfers)."""
    ns = draw(st.integers(2, L.MAX_SITES))
    node = draw(st.sampled_from([1, 2, 4, 8]))
    mid = draw(st.sampled_from([1, 2, 3, 4]))
    gpus = ns * node * mid
    sys = draw(system_blocks(gpus))
    rows = [draw(tiers(1).map(lambda r: r[0])) for _ in range(3)]  # tier fields (size reset)
    sizes = [node, mid, ns]
    sys[L.SYS_TIER_BASE:L.SYS_SITE_LINK_BASE] = 0.0
    sys[L.SYS_N_TIERS] = 3
    for i, row in enumerate(rows):
        base = L.SYS_TIER_BASE + i * L.N_TIER
        for f, v in enumerate(row):
            sys[base + f] = v if f != L.TIER_SIZE else sizes[i]
    sys[L.SYS_SITE_LINK_BASE:] = 0.0
    sys[L.SYS_N_SITES] = ns
    symmetric = draw(st.booleans())
    for a in range(ns):
        for b in range(ns):
            if a == b or (symmetric and b < a):
                continue
            link = draw(tiers(1).map(lambda r: r[0]))
            pairs = ((a, b), (b, a)) if symmetric else ((a, b),)
            for x, y in pairs:
                base = L.SYS_SITE_LINK_BASE + (x * L.MAX_SITES + y) * L.N_TIER
                for f, v in enumerate(link):
                    sys[base + f] = v if f != L.TIER_SIZE else 0.0
    mdl, job = draw(model_blocks(moe)), draw(job_blocks())
    job[L.JOB_GLOBAL_BATCH] = gpus * draw(st.sampled_from([1, 2, 4]))
    return sys, mdl, job


def site_crossing_column(sys, mdl):
    """A config column whose pipeline stages sit on different sites: ``pp`` the largest divisor
    of the site count from 2 up to the model's layers, outermost in Megatron's
    ``tp-cp-ep-dp-pp`` order so that each stage holds whole sites and neighbouring stages meet
    across a site link; data parallelism inside the stages, 1F1B, full recompute. Built
    without draws, so that a site batch holds a column that takes the per-link path
    (collectives.site_path_transfers) whatever the drawn columns are, wherever the model's
    depth allows such a pipeline (invalid otherwise: a check of its own)."""
    sites = int(sys[L.SYS_N_SITES])
    layers = int(mdl[L.MDL_LAYERS])
    gpus = int(sys[L.SYS_GPUS])
    pp = max([d for d in range(2, min(sites, layers) + 1) if sites % d == 0], default=sites)
    col = np.zeros(L.N_CFG, dtype=np.int32)
    col[[L.CFG_TP, L.CFG_CP, L.CFG_EP, L.CFG_MBS, L.CFG_VPP]] = 1
    col[L.CFG_PP] = pp
    col[L.CFG_DP] = gpus // pp
    col[L.CFG_SCHEDULE] = L.SCHED_1F1B
    col[L.CFG_RECOMPUTE] = L.RECOMPUTE_FULL
    col[L.CFG_ORDER] = L.order_from_names(["tp", "cp", "ep", "dp", "pp"])
    return col


@st.composite
def site_batches(draw, max_size: int = 32):
    """``(sys, mdl, job, cfg)`` on :func:`site_blocks`: drawn columns, then
    :func:`site_crossing_column`."""
    sys, mdl, job = draw(site_blocks())
    cfg = draw(config_columns(sys, mdl, job, max_size=max_size))
    sys[L.SYS_STEP_OVERHEAD_S] = draw(step_overheads())
    crossing = site_crossing_column(sys, mdl)[:, None]
    cfg = np.ascontiguousarray(np.concatenate([cfg, crossing], axis=1))
    return sys, mdl, job, cfg


@st.composite
def scenarios(draw, moe: bool | None = None):
    """``(sys, mdl, job)``; the global batch is usually a multiple of the GPU count so that
    many data-parallel degrees divide it."""
    sys, mdl, job = draw(system_blocks()), draw(model_blocks(moe)), draw(job_blocks())
    if draw(st.integers(0, 3)) > 0:
        job[L.JOB_GLOBAL_BATCH] = sys[L.SYS_GPUS] * draw(st.sampled_from([1, 2, 3, 4]))
    return sys, mdl, job


# ------------------------------------------------------------------------------------------
# Config columns
# ------------------------------------------------------------------------------------------

#: Config fields with an index range, and values outside it.
_BAD_VALUES = {
    L.CFG_SCHEDULE: [-1, L.N_SCHEDULES, 99, INT32_MIN, INT32_MAX],
    L.CFG_RECOMPUTE: [-1, len(L.RECOMPUTE), INT32_MAX],
    L.CFG_ZERO: [-1, 4, INT32_MIN],
    L.CFG_ORDER: [-1, L.N_ORDERS, 1000, INT32_MAX],
    L.CFG_SP: [-1, 2, INT32_MAX],
    L.CFG_TP_OVERLAP: [-1, 2],
    L.CFG_DP_OVERLAP: [-1, 2, INT32_MIN],
    L.CFG_TP: [0, -1, INT32_MIN, 3, 5, 7],
    L.CFG_CP: [0, -8, 3],
    L.CFG_PP: [0, -1, 3, 7],
    L.CFG_DP: [0, -2, 3],
    L.CFG_EP: [0, -1, 3, 64],
    L.CFG_MBS: [0, -1, 3, 1024],
    L.CFG_VPP: [0, -1, 2, 3, 64],
}


@st.composite
def config_column(draw, sys, mdl, job, invalid_rate: int = 10, folded: bool = False):
    """One config column (``int32 (N_CFG,)``) for these blocks; mostly plausible, about
    1 in ``invalid_rate`` with a field replaced by an invalid or out-of-range value. ``folded``:
    ep drawn from the divisors of tp * dp that do not divide dp where there are any (MoE
    parallel folding, llm.moe_folded)."""
    gpus = int(sys[L.SYS_GPUS])
    if draw(st.integers(0, 3)) == 0:
        # the GPU count's prime factors dealt out at random (often invalid for the model)
        degs = [1, 1, 1, 1]  # tp, cp, pp, dp
        for p in _prime_factors(gpus):
            degs[draw(st.sampled_from([0, 0, 1, 2, 2, 3, 3, 3]))] *= p
        tp, cp, pp, dp = degs
    else:
        # aimed at validity: tp divides the heads and hidden sizes, pp often the layers, 2cp the
        # sequence; dp takes the rest
        heads, kv = int(mdl[L.MDL_HEADS]), int(mdl[L.MDL_KV_HEADS])
        g = math.gcd(gpus, heads, int(mdl[L.MDL_HIDDEN]), int(mdl[L.MDL_FFN_HIDDEN]),
                     int(mdl[L.MDL_EXPERT_FFN_HIDDEN]))
        tps = [d for d in _divisors(g) if kv % d == 0 or d % kv == 0] or [1]
        tp = draw(st.sampled_from(tps))
        rest = gpus // tp
        # pp dividing the layers, or any pp (uneven pipeline splits)
        pp_pool = math.gcd(rest, int(mdl[L.MDL_LAYERS])) if draw(st.booleans()) else rest
        pp = draw(st.sampled_from(_divisors(pp_pool)))
        rest //= pp
        seq = int(job[L.JOB_SEQ_LEN])
        cp = draw(st.sampled_from(_divisors(math.gcd(rest, seq // 2)))) if seq >= 2 else 1
        dp = rest // cp
    experts = int(mdl[L.MDL_EXPERTS])
    # ep | dp (experts at TP degree tp), or ep | tp * dp only: MoE parallel folding, expert TP 1
    ep_choices = [d for d in _divisors(tp * dp) if experts > 0 and experts % d == 0] or [1]
    if folded:
        ep_choices = [d for d in ep_choices if dp % d != 0] or ep_choices
    ep = draw(st.sampled_from(ep_choices))
    gb = int(job[L.JOB_GLOBAL_BATCH])
    mbs_choices = [d for d in _divisors(gb // dp)] if gb % dp == 0 else [1]
    mbs = draw(st.sampled_from(mbs_choices[:12]))
    schedule = draw(st.integers(0, L.N_SCHEDULES - 1))
    vpp = 1
    if schedule == L.SCHED_INTERLEAVED:
        vpp = draw(st.sampled_from([1, 2, 2, 3, 4, 8]))
    col = np.zeros(L.N_CFG, dtype=np.int64)
    col[L.CFG_TP] = tp
    col[L.CFG_CP] = cp
    col[L.CFG_PP] = pp
    col[L.CFG_DP] = dp
    col[L.CFG_EP] = ep
    col[L.CFG_MBS] = mbs
    col[L.CFG_VPP] = vpp
    col[L.CFG_SCHEDULE] = schedule
    col[L.CFG_RECOMPUTE] = draw(st.integers(0, len(L.RECOMPUTE) - 1))
    col[L.CFG_ZERO] = draw(st.integers(0, 3))
    col[L.CFG_SP] = draw(st.integers(0, 1))
    col[L.CFG_ORDER] = draw(st.integers(0, L.N_ORDERS - 1))
    col[L.CFG_TP_OVERLAP] = draw(st.integers(0, 1))
    col[L.CFG_DP_OVERLAP] = draw(st.integers(0, 1))
    if draw(st.integers(1, invalid_rate)) == 1:
        field = draw(st.sampled_from(sorted(_BAD_VALUES)))
        col[field] = draw(st.sampled_from(_BAD_VALUES[field]))
    return col.astype(np.int32)


@st.composite
def config_columns(draw, sys, mdl, job, min_size: int = 1, max_size: int = 48,
                   folded: bool = False):
    """A batch ``int32 (N_CFG, n)``, C-contiguous."""
    n = draw(st.integers(min_size, max_size))
    cols = [draw(config_column(sys, mdl, job, folded=folded)) for _ in range(n)]
    return np.ascontiguousarray(np.stack(cols, axis=1))


@st.composite
def batches(draw, moe: bool | None = None, max_size: int = 48, folded: bool = False):
    """``(sys, mdl, job, cfg)``: drawn blocks and a batch of configs for them (``folded``: see
    :func:`config_column`)."""
    sys, mdl, job = draw(scenarios(moe))
    cfg = draw(config_columns(sys, mdl, job, max_size=max_size, folded=folded))
    sys[L.SYS_STEP_OVERHEAD_S] = draw(step_overheads())
    return sys, mdl, job, cfg


def step_overheads():
    """The system's fixed cost per step (``step_overhead_s``): 0 or up to 0.2 s. Drawn last by
    :func:`batches` and :func:`site_batches`, so the draws before it are what they were before
    the field existed (the derandomized runs that count how often a path is taken)."""
    return st.one_of(st.just(0.0), st.floats(0.0, 0.2))
