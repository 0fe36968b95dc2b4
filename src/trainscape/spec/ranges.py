"""The documented range of every numeric scenario field, checked at the edge.

The cost model is floating-point arithmetic over products of these fields (FLOPs ~ layers x
hidden^2 x tokens, bytes / bandwidth, ...). Each bound below is generous -- orders of magnitude
beyond any machine or model built so far -- but keeps every product a kernel forms finite in
float64, every count exact in int32 columns, and every loop over ranks or tables bounded.
Fractions (efficiencies) have a floor: a subnormal efficiency divides a finite time into
Infinity. The README's "Input ranges" section lists the same table; ``tests/test_ranges.py``
holds the two together.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

#: GPUs in a cluster, the degree of any parallel dimension, and a network tier's size: 2^24
#: (16.8 M; the largest training runs published use ~10^5 GPUs). Keeps ``tp*cp*pp*dp`` and
#: every rank index inside int32 configuration columns.
MAX_GPUS = 2**24
#: Ranks of a DLRM scenario: the planner holds per-rank arrays and scores moves per rank.
MAX_DLRM_GPUS = 2**16
#: Transformer shape fields (layers, hidden, heads, ffn_hidden, vocab, experts, ...) and
#: ``seq_len``: 2^24.
MAX_DIM = 2**24
#: ``global_batch`` (sequences or samples per step): 2^31 - 1 (int32 counts in the kernels).
MAX_BATCH = 2**31 - 1
#: Embedding table rows: 2^40 (10^12; the largest published tables hold ~10^10 rows).
MAX_ROWS = 2**40
#: Embedding dimension: 2^16.
MAX_EMB_DIM = 2**16
#: Embedding tables in one DLRM scenario: 2^20.
MAX_TABLES = 2**20
#: Lookups per sample per table (pooling factor): 10^6.
MAX_POOLING = 1e6
MAX_ZIPF_ALPHA = 10.0
#: Peak TFLOP/s of one GPU per dtype: 10^-3 to 10^6 (an H100 has ~10^3). Below the floor (and
#: below the bandwidth floor) a step takes longer than the age of the universe: a typo.
MIN_TFLOPS = 1e-3
MAX_TFLOPS = 1e6
#: Any bandwidth per GPU in GB/s (HBM, links, host-to-device): 10^-3 (1 MB/s) to 10^7 (HBM3e:
#: ~5*10^3); host_to_device_GBps may be 0 (no host link).
MIN_GBPS = 1e-3
MAX_GBPS = 1e7
#: Memory per GPU (``hbm_gb``, ``hbm_reserve_gb``) in GB: 10^6; host DDR per node: 10^9 GB.
MAX_HBM_GB = 1e6
MAX_DDR_GB = 1e9
#: Times in microseconds (latencies, per-layer overheads): 10^9 (1000 s).
MAX_US = 1e9
#: Times in milliseconds (the per-step overhead): 10^6 (1000 s).
MAX_MS = 1e6
#: FLOPs at which GEMM efficiency is half its maximum: 10^18.
MAX_HALF_FLOPS = 1e18
#: K/V length at which attention efficiency is half its maximum: 2^24 tokens.
MAX_HALF_SEQ = float(2**24)
#: Efficiencies and other fractions lie in [10^-6, 1]: below, a time divided by them leaves
#: the float64 range for extreme inputs (and a subnormal one is surely a typo).
MIN_FRACTION = 1e-6
#: Oversubscription of a tier: 1 to 10^6.
MAX_OVERSUB = 1e6
#: Fractional slowdowns (``tp_overlap_slowdown``, ``cp_overlap_slowdown``): 0 to 100.
MAX_SLOWDOWN = 100.0
#: Multipliers of the DLRM model (``bwd_multiplier``, ``dp_update_factor``): up to 10^3.
MAX_FACTOR = 1e3
#: Planner wall-clock limit in seconds: 10^6.
MAX_SECONDS = 1e6
#: Planner iterations: 10^9; beam width: 10^4; seeds: 0 to 2^32 - 1 (numpy's range).
MAX_ITERATIONS = 10**9
MAX_BEAM = 10**4
MAX_SEED = 2**32 - 1
#: prices (US dollars per GPU-hour, per tier and GPU-hour) and electrical power per GPU (W)
MAX_PRICE = 1e6
MAX_POWER_W = 1e6
#: power_clock_exponent: 1 (power proportional to clock) to 6
MIN_CLOCK_EXPONENT = 1.0
MAX_CLOCK_EXPONENT = 6.0
#: a transport's in-flight window per channel (MiB)
MAX_WINDOW_MIB = 1e9
#: sites of a [[cluster.sites]] graph: 2 to 8 (layout.MAX_SITES; the best Hamiltonian cycle
#: and path over them are searched exhaustively, (n-1)!/2 = 2520 cycles at 8)
MAX_SITES = 8
#: job.sync.inner_steps (DiLoCo's H): 1 to 10^6
MAX_INNER_STEPS = 10**6
#: job.dp_bucket_params: 1 to 10^15 parameters per data-parallel gradient bucket
MAX_BUCKET_PARAMS = 10**15


def _int(lo: int, hi: int):
    return Annotated[int, Field(ge=lo, le=hi)]


def _float(lo: float, hi: float, lo_open: bool = False):
    if lo_open:
        return Annotated[float, Field(gt=lo, le=hi, allow_inf_nan=False)]
    return Annotated[float, Field(ge=lo, le=hi, allow_inf_nan=False)]


GpuCount = _int(1, MAX_GPUS)
Degree = _int(1, MAX_GPUS)
Dim = _int(1, MAX_DIM)
DimOrZero = _int(0, MAX_DIM)
Batch = _int(1, MAX_BATCH)
BucketParams = _int(1, MAX_BUCKET_PARAMS)
Tflops = _float(MIN_TFLOPS, MAX_TFLOPS)
Bandwidth = _float(MIN_GBPS, MAX_GBPS)
BandwidthOrZero = _float(0.0, MAX_GBPS)
HbmGb = _float(0.0, MAX_HBM_GB, lo_open=True)
HbmGbOrZero = _float(0.0, MAX_HBM_GB)
DdrGb = _float(0.0, MAX_DDR_GB)
Micros = _float(0.0, MAX_US)
Millis = _float(0.0, MAX_MS)
HalfFlops = _float(0.0, MAX_HALF_FLOPS)
HalfSeq = _float(0.0, MAX_HALF_SEQ)
Efficiency = _float(MIN_FRACTION, 1.0)
#: a share that may be 0 (exposed fraction, cache fractions, hit rates)
Share = _float(0.0, 1.0)
Oversubscription = _float(1.0, MAX_OVERSUB)
Slowdown = _float(0.0, MAX_SLOWDOWN)
Factor = _float(0.0, MAX_FACTOR)
PosFactor = _float(0.0, MAX_FACTOR, lo_open=True)
Seconds = _float(0.0, MAX_SECONDS, lo_open=True)
Rows = _int(1, MAX_ROWS)
EmbDim = _int(1, MAX_EMB_DIM)
Pooling = _float(0.0, MAX_POOLING)
ZipfAlpha = _float(0.0, MAX_ZIPF_ALPHA)
DlrmGpuCount = _int(1, MAX_DLRM_GPUS)
Iterations = _int(1, MAX_ITERATIONS)
BeamWidth = _int(1, MAX_BEAM)
Seed = _int(0, MAX_SEED)
Price = _float(0.0, MAX_PRICE)
PowerW = _float(0.0, MAX_POWER_W)
PowerLimitW = _float(0.0, MAX_POWER_W, lo_open=True)
#: power_clock_exponent: board power grows as the clock to this power (model.power)
ClockExponent = _float(MIN_CLOCK_EXPONENT, MAX_CLOCK_EXPONENT)
WindowMiB = _float(0.0, MAX_WINDOW_MIB, lo_open=True)
InnerSteps = _int(1, MAX_INNER_STEPS)
OverlapSteps = _int(0, MAX_INNER_STEPS)

#: (field, range) rows for the README table and the test that keeps the two in step.
DOCUMENTED = (
    ("cluster.gpus, config/space degrees, cluster.tiers[].size, cluster.sites[].gpus",
     f"1 to 2^24 ({MAX_GPUS})"),
    ("cluster.sites (count)", f"2 to {MAX_SITES} (the best ring and path over them are found "
     "exhaustively)"),
    ("DLRM cluster.gpus", f"1 to 2^16 ({MAX_DLRM_GPUS})"),
    ("model shape fields, job.seq_len", f"1 to 2^24 ({MAX_DIM}) (MoE counts: 0 to 2^24)"),
    ("job.global_batch", f"1 to 2^31-1 ({MAX_BATCH})"),
    ("peak_tflops.*", "1e-3 to 1e6"),
    ("*_GBps", "1e-3 to 1e7 (host_to_device_GBps: 0 to 1e7)"),
    ("hbm_gb / hbm_reserve_gb", "> 0 to 1e6 / 0 to 1e6"),
    ("host_ddr_gb", "0 to 1e9"),
    ("*_us", "0 to 1e9"),
    ("step_overhead_ms", "0 to 1e6"),
    ("gemm_half_flops, fp8_gemm_half_flops", "0 to 1e18"),
    ("attention_half_seq, attention_head_dim_half", "0 to 2^24"),
    ("efficiencies (efficiency, *_efficiency*)", "1e-6 to 1"),
    ("tp_overlap_exposed, job.offload_activations, DLRM hit rates and cache fractions",
     "0 to 1"),
    ("oversubscription", "1 to 1e6"),
    ("tp_overlap_slowdown, cp_overlap_slowdown", "0 to 100"),
    ("DLRM rows / dim / pooling", "1 to 2^40 / 1 to 2^16 / 0 to 1e6"),
    ("DLRM zipf_alpha", "0 to 10"),
    ("DLRM tables", f"1 to 2^20 ({MAX_TABLES})"),
    ("DLRM bwd_multiplier, dp_update_factor", "(0 or >0) to 1e3"),
    ("DLRM reservation percentage / hbm_gb / ddr_gb; table min_partition / ranks",
     "0 to < 1 / 0 to 1e6 / 0 to 1e9; 1 to 2^16 / 0 to cluster.gpus - 1"),
    ("price_per_hour_usd, cost_per_gpu_hour_usd / power_w", "0 to 1e6 / 0 to 1e6"),
    ("power_limit_w / power_clock_exponent", "> 0 to power_w / 1 to 6"),
    ("transport window_MiB / channels", "> 0 to 1e9 / 1 to 2^24"),
    ("job.sync.inner_steps / tokens_factor", "1 to 1e6 / > 0 to 1e3"),
    ("job.sync.fragments / overlap_steps", "1 to 1e6 / 0 to 1e6"),
    ("planner iterations / beam_width / seed / time_limit_s",
     "1 to 1e9 / 1 to 1e4 / 0 to 2^32-1 / > 0 to 1e6"),
)
