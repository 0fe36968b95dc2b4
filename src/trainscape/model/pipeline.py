"""Pipeline-parallel schedules: closed forms of the bubble, activations in flight, copies of the
parameters and the point-to-point transfers on the critical path.

Reference-model code: numba-compatible plain Python (int/float scalars, ``math``, if/else).

Conventions (shared with :mod:`trainscape.model.llm`):

* ``p`` pipeline devices (pp degree), ``m`` microbatches per step per pipeline, ``v`` virtual
  stages per device (only the interleaved schedule uses it).
* ``f, b, w``: time of ONE microbatch through ONE DEVICE'S WORTH OF LAYERS (layers/p) for the
  forward, the backward for inputs ("B" of Qi et al., arXiv 2401.10241) and the backward for
  weights ("W"). Schedules that do not split the backward run B then W as one backward. A device
  holding c chunks runs each chunk operation in f/c etc.
* The pipeline phase of a step takes ``m*(f+b+w) + bubble_time(...)``: every device computes
  ``m*(f+b+w)`` and the bubble is the idle time on the critical path, *with every device starting
  the step at time 0 and the step ending when the last device ends* (a synchronous optimizer step
  after the pipeline, as Megatron-LM, DeepSpeed and DualPipe do by default).

Every closed form below was checked against the discrete-event simulator
(:mod:`trainscape.model.schedule_sim`), which replays each device's order of operations as the
public implementations issue them. Where the published form and the simulation differ, the
function follows the simulation and the docstring says how (see also the notes per schedule).

``p == 1`` is valid for every schedule: no pipeline, the m microbatches run back to back
(gradient accumulation), bubble 0, one microbatch's activations stored at a time.
"""

import math

from ..layout import (
    SCHED_1F1B,
    SCHED_DUALPIPE,
    SCHED_DUALPIPE_V,
    SCHED_GPIPE,
    SCHED_INTERLEAVED,
    SCHED_ZB_H1,
    SCHED_ZB_H2,
    SCHED_ZB_V,
    SCHEDULES,
)

N_SCHEDULE_CODES = len(SCHEDULES)

#: Reasons returned by :func:`schedule_valid` (index = code, 0 = ok).
SCHEDULE_INVALID_REASONS = (
    "ok",
    "pp, microbatches and vpp must all be >= 1",
    "unknown schedule code",
    # Megatron-LM forward_backward_pipelining_with_interleaving asserts
    # num_microbatches % pipeline_parallel_size == 0 (the schedule of Narayanan et al. SC'21
    # §2.2 runs microbatches in groups of p per model chunk).
    "interleaved needs microbatches divisible by pp",
    # deepseek-ai/DualPipe dualpipe/dualpipe.py step(): assert num_ranks % 2 == 0
    "dualpipe needs an even pp",
    # ... and assert num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    "dualpipe needs an even number of microbatches >= 2*pp",
    # deepseek-ai/DualPipe dualpipe/dualpipev.py step(): assert num_chunks >= num_ranks * 2
    "dualpipe-v needs microbatches >= 2*pp",
)
SCHED_OK = 0
SCHED_ERR_RANGE = 1
SCHED_ERR_CODE = 2
SCHED_ERR_INTERLEAVED_M = 3
SCHED_ERR_DUALPIPE_P = 4
SCHED_ERR_DUALPIPE_M = 5
SCHED_ERR_DUALPIPE_V_M = 6


def schedule_chunks(schedule, v):
    """Model chunks (stages) held by one device: interleaved v (Narayanan et al. SC'21 §2.2);
    ZB-V 2 (Qi et al., V-shape schedule); DualPipeV 2 (deepseek-ai/DualPipe, "cut-in-half");
    DualPipe 2 mirrored stages, one per direction (DeepSeek-V3 tech report §3.2.1, each of
    layers/p); others 1."""
    if schedule == SCHED_INTERLEAVED:
        if v < 1:
            return 1
        return v
    if schedule == SCHED_ZB_V or schedule == SCHED_DUALPIPE_V or schedule == SCHED_DUALPIPE:
        return 2
    return 1


def schedule_layer_divisor(schedule, p, v):
    """Layers must be divisible by this: the number of stages a microbatch passes through.
    Interleaved p*v, ZB-V and DualPipeV 2p (V of 2p chunks), DualPipe p (each direction's copy
    of the model in p stages), others p. 1 when p == 1 (no pipeline)."""
    if p <= 1:
        return 1
    if schedule == SCHED_INTERLEAVED:
        if v < 1:
            return p
        return p * v
    if schedule == SCHED_ZB_V or schedule == SCHED_DUALPIPE_V:
        return 2 * p
    return p


def schedule_valid(schedule, p, m, v):
    """0 when the schedule can run with these values, else a code into
    ``SCHEDULE_INVALID_REASONS``. Constraints are those the public implementations assert
    (cited at the reasons); ZB-H1/ZB-H2/ZB-V run any m >= 1 (the ZB-V order pads to 2p-1
    microbatches and drops the padding, sail-sg handcrafted_zb_v). p == 1 is always valid."""
    if p < 1 or m < 1 or v < 1:
        return SCHED_ERR_RANGE
    if schedule < 0 or schedule >= N_SCHEDULE_CODES:
        return SCHED_ERR_CODE
    if p == 1:
        return SCHED_OK
    if schedule == SCHED_INTERLEAVED:
        if v > 1 and m % p != 0:
            return SCHED_ERR_INTERLEAVED_M
    elif schedule == SCHED_DUALPIPE:
        if p % 2 != 0:
            return SCHED_ERR_DUALPIPE_P
        if m % 2 != 0 or m < 2 * p:
            return SCHED_ERR_DUALPIPE_M
    elif schedule == SCHED_DUALPIPE_V:
        if m < 2 * p:
            return SCHED_ERR_DUALPIPE_V_M
    return SCHED_OK


def _nonneg(x):
    """x when it is a number >= 0, else 0 (guards NaN and negative times)."""
    if x > 0.0:
        return x
    return 0.0


# ---- bubble closed forms, one per schedule ----------------------------------------------------


def bubble_fill_drain(p, f, b, w):
    """GPipe (Huang et al. 2019) and 1F1B (Narayanan et al. SC'21 §2.1, PipeDream-Flush):
    ``(p-1)(f+b+w)``. Exact for every m >= 1."""
    return (p - 1.0) * (f + b + w)


def bubble_interleaved(p, v, f, b, w):
    """Interleaved 1F1B, Narayanan et al. SC'21 §2.2: ``(p-1)(f+b+w)/v``. Exact for every
    m % p == 0 (m == p included, where Megatron runs all forwards first)."""
    if v < 1:
        v = 1
    return (p - 1.0) * (f + b + w) / v


def bubble_zb_h1(p, m, f, b, w):
    """ZB-H1 (Qi et al., arXiv 2401.10241 §3.1, Table: ``(p-1)(F+B-W)``).

    Simulated closed form, with ``k = min(m, p)``::

        max((p-k) f + (p-1) b,  (p-1) f + (p-k) b,  (p-1)(f+b) - (k-1) w)

    For m >= p this is ``(p-1) max(f+b-w, f, b)``: the published ``(p-1)(f+b-w)`` holds when
    ``w <= min(f, b)`` (W's longer than F or B cannot all be hidden in the gaps they fill).
    Exact for m >= p; for m < p it is an upper bound of the simulation (the W's of the few
    microbatches only partly fill the drain)."""
    k = m
    if k > p:
        k = p
    a = (p - k) * f + (p - 1.0) * b
    c = (p - 1.0) * f + (p - k) * b
    d = (p - 1.0) * (f + b) - (k - 1.0) * w
    if c > a:
        a = c
    if d > a:
        a = d
    return a


def bubble_zb_h2(p, m, f, b, w):
    """ZB-H2 (Qi et al., arXiv 2401.10241 §3.1: bubble ``(p-1)(F+B-2W)``, zero when F=B=W,
    *after* removing the optimizer synchronisation, §4 "post-validation").

    With a synchronous step (all devices start at 0 and the step ends with the last one) the
    simulation gives, for m >= 2p-1::

        (p-1) max(f, b - f, f + b - 2w)

    i.e. the published term plus the start skew of the parallelogram: the last stage cannot
    start before (p-1) forwards reached it, which post-validation hides by overlapping
    consecutive steps. Exact for m >= 2p-1. For m < 2p-1 (not enough microbatches to fill the
    2p-1 warm-up slots) it returns the ZB-H1 form, an upper bound of the simulation."""
    if m < 2 * p - 1:
        return bubble_zb_h1(p, m, f, b, w)
    a = f
    if b - f > a:
        a = b - f
    if f + b - 2.0 * w > a:
        a = f + b - 2.0 * w
    return (p - 1.0) * a


def bubble_zb_v(p, m, f, b, w):
    """ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", V-shape schedule: zero bubble when
    F=B=W with post-validation, 1F1B's memory). Order: sail-sg handcrafted ZB-V.

    Synchronous step, simulated, for m >= 2p-1: the maximum of nine critical-path forms
    (chunk times are f/2, b/2, w/2)::

        (p-1)/2 b,  b/2 + (p-2)/2 w,  (p-1)(b-w),  f/2 + (p-2)/2 w,  (p-1)/2 f,
        (p-1)/2 (f+b) - (p-1) w,  ((2p-3) f - (p-2) b)/2,  (p-1) f - (p-1)/2 b - w/2,
        (p-1) f - (p - 1/2) w,  (2p-3)/2 f + b/2 - (p-1) w

    At f=b=w this is ``(p-1) f/2`` -- the start skew of the V (device p-1 starts after p-1
    chunk forwards), which post-validation hides. Exact for m >= 2p-1; for m < 2p-1 (the
    padded microbatches leave W's queued at the end) it returns 1F1B's ``(p-1)(f+b+w)``, an
    upper bound of the simulation."""
    if m < 2 * p - 1:
        return (p - 1.0) * (f + b + w)
    q = p - 1.0
    a = q * 0.5 * b
    t = 0.5 * b + (p - 2.0) * 0.5 * w
    if t > a:
        a = t
    t = q * (b - w)
    if t > a:
        a = t
    t = 0.5 * f + (p - 2.0) * 0.5 * w
    if t > a:
        a = t
    t = q * 0.5 * f
    if t > a:
        a = t
    t = q * 0.5 * (f + b) - q * w
    if t > a:
        a = t
    t = ((2.0 * p - 3.0) * f - (p - 2.0) * b) * 0.5
    if t > a:
        a = t
    t = q * f - q * 0.5 * b - 0.5 * w
    if t > a:
        a = t
    t = q * f - (p - 0.5) * w
    if t > a:
        a = t
    t = (2.0 * p - 3.0) * 0.5 * f + 0.5 * b - q * w
    if t > a:
        a = t
    return a


def bubble_dualpipe(p, f, b, w):
    """DualPipe (deepseek-ai/DualPipe README: ``(PP/2-1)(F&B + B - 3W)``, B = full backward).

    F&B is the overlapped forward + full backward of two microbatches; we take it as
    ``f + b + w`` (the overlapped backward in dualpipe.py runs with ``enable_zb=False``, so it
    includes W; no compute-overlap gain, communication overlap is modelled elsewhere). With
    ``h = p/2 - 1`` the simulation gives, for every valid m (even, >= 2p)::

        h max(0, b - w) + max((h-1) f + h b,  2h f)

    which equals the README's ``h (f + 2b - w)`` when ``f = b >= w`` (the README's setting)
    and differs otherwise (e.g. p=4, f=1, b=2, w=1: README 4, simulation 3; f=2, b=w=1:
    README 3, simulation 4)."""
    h = p * 0.5 - 1.0
    a = (h - 1.0) * f + h * b
    c = 2.0 * h * f
    if c > a:
        a = c
    d = b - w
    if d < 0.0:
        d = 0.0
    return h * d + a


def bubble_dualpipe_v(p, f, b, w):
    """DualPipeV (deepseek-ai/DualPipe dualpipev.py, the "cut-in-half" DualPipe): the README
    form with PP = 2p chunks of time f/2, b/2, w/2 is ``(p-1)(f + 2b - w)/2``. With
    ``H = (p-1)/2`` the simulation gives, for every valid m (>= 2p)::

        H max(0, b - w) + max((p-2)/2 f + H b,  2H f)

    equal to the README form when ``f = b >= w``."""
    hh = (p - 1.0) * 0.5
    a = (p - 2.0) * 0.5 * f + hh * b
    c = 2.0 * hh * f
    if c > a:
        a = c
    d = b - w
    if d < 0.0:
        d = 0.0
    return hh * d + a


def bubble_time(schedule, p, m, v, f, b, w):
    """Device idle time on the critical path of the pipeline phase (synchronous step), so the
    phase takes ``m*(f+b+w) + bubble_time``. Never negative, never NaN (negative or NaN times
    count as 0). Exactness regions per schedule (elsewhere a documented upper bound):
    gpipe/1f1b all m; interleaved m % p == 0; zb-h1 m >= p; zb-h2 and zb-v m >= 2p-1;
    dualpipe (even p, even m >= 2p) and dualpipe-v (m >= 2p) all valid m."""
    f = _nonneg(f)
    b = _nonneg(b)
    w = _nonneg(w)
    if p <= 1 or m < 1:
        return 0.0
    if schedule == SCHED_GPIPE or schedule == SCHED_1F1B:
        r = bubble_fill_drain(p, f, b, w)
    elif schedule == SCHED_INTERLEAVED:
        r = bubble_interleaved(p, v, f, b, w)
    elif schedule == SCHED_ZB_H1:
        r = bubble_zb_h1(p, m, f, b, w)
    elif schedule == SCHED_ZB_H2:
        r = bubble_zb_h2(p, m, f, b, w)
    elif schedule == SCHED_ZB_V:
        r = bubble_zb_v(p, m, f, b, w)
    elif schedule == SCHED_DUALPIPE:
        r = bubble_dualpipe(p, f, b, w)
    elif schedule == SCHED_DUALPIPE_V:
        r = bubble_dualpipe_v(p, f, b, w)
    else:
        r = bubble_fill_drain(p, f, b, w)
    return _nonneg(r)


def inflight_activations(schedule, p, m, v):
    """Peak number of stored microbatch activations on the busiest device (the first one, rank
    0), in units of one microbatch through layers/p layers: :func:`inflight_activations_rank`
    at rank 0."""
    return inflight_activations_rank(schedule, p, m, v, 0)


def inflight_activations_rank(schedule, p, m, v, r):
    """Peak number of stored microbatch activations on pipeline rank ``r`` (0 = first stage),
    in units of one microbatch through that device's layers (stored from F to W, or to the
    fused backward).

    * GPipe: m on every rank (all forwards first; Huang et al. 2019).
    * 1F1B: ``min(p - r, m)``. Megatron-LM ``megatron/core/pipeline_parallel/schedules.py``
      ``forward_backward_pipelining_without_interleaving``: ``num_warmup_microbatches =
      min(p - r - 1, m)`` forwards, then the steady state runs one more forward before its first
      backward; the last stage holds one microbatch.
    * ZB-H1: ``min(p, m)`` on every rank (Qi et al., arXiv 2401.10241 §3.1: 1F1B's first-stage
      peak, ``p M_B``, on every worker -- the later stages defer their W's, which keep the
      activations until they run).
    * Interleaved (v > 1): Megatron-LM ``forward_backward_pipelining_with_interleaving``:
      ``num_warmup_microbatches = (p - r - 1) * 2 + (v - 1) * p`` chunk forwards (capped at
      ``m * v``: ``get_pp_rank_microbatches``, all of them when the warm-up reaches the total),
      plus one in the steady state, each chunk 1/v of the device's layers: ``min(warm-up + 1,
      m v) / v``; rank 0 holds ``p + (p-1)/v`` (Korthikanti et al. 2022 §4.2.3), rank p-1
      ``p - (p-1)/v``. When m == p every rank runs all its forwards first and holds p (Megatron-LM
      releases up to core_r0.9 special-case ``num_microbatches == pipeline_parallel_size``; the
      schedule simulator replays that order, and so does the bubble's closed form).
    * ZB-H2: ``min(2p - 1, m)`` on every rank (Qi et al. §3.1: ``(2p-1) M_B``, the deferred W's
      again keep every worker at the first one's peak).
    * ZB-V: ``min(p, m)`` on every rank (Qi et al. §4, V-shape: every device peaks at 1F1B's
      first-stage memory, balanced by the V placement of its two chunks; exact for m >= 2p-1,
      an upper bound below).
    * DualPipe ``p + 1`` and DualPipeV ``p + 1/2`` on every rank (deepseek-ai/DualPipe README:
      PP+1 activations; for DualPipeV PP = 2p chunks of layers/2p).
    ``p == 1``: 1 (forward and backward back to back); ``m < 1``: 0."""
    if m < 1:
        return 0.0
    if p <= 1:
        return 1.0
    if r < 0:
        r = 0
    if r > p - 1:
        r = p - 1
    fm = m * 1.0
    fp = p * 1.0
    fr = r * 1.0
    if schedule == SCHED_GPIPE:
        return fm
    if schedule == SCHED_INTERLEAVED:
        if v <= 1:
            return min(fp - fr, fm)
        if m == p:
            return fp
        fv = v * 1.0
        chunks = 2.0 * (fp - fr - 1.0) + (fv - 1.0) * fp + 1.0
        return min(chunks, fm * fv) / fv
    if schedule == SCHED_ZB_H2:
        return min(2.0 * fp - 1.0, fm)
    if schedule == SCHED_DUALPIPE:
        return fp + 1.0
    if schedule == SCHED_DUALPIPE_V:
        return fp + 0.5
    if schedule == SCHED_ZB_V or schedule == SCHED_ZB_H1:
        return min(fp, fm)
    # 1F1B
    return min(fp - fr, fm)


def loss_on_first_device(schedule, p):
    """True when the device of the first stage also holds the last one: no pipeline (p == 1),
    or a V placement, whose last chunk comes back to device 0 (ZB-V, Qi et al. §4; DualPipeV,
    deepseek-ai/DualPipe dualpipev.py)."""
    if p <= 1:
        return True
    return schedule == SCHED_ZB_V or schedule == SCHED_DUALPIPE_V


def explicit_stage_layers(p, layers, first_n, last_n):
    """Transformer layers ``(first, middle, last)`` of a split whose first and / or last stage
    holds a stated count (``first_n``, ``last_n``; 0: not stated): the stages without one --
    the middle ones and an end left unstated -- split the rest, ``ceil(rest / stages)`` on the
    busiest. Megatron-Core ``num_layers_in_first_pipeline_stage`` /
    ``num_layers_in_last_pipeline_stage`` (``TransformerConfig``; the rest "evenly distributed"
    over the other stages); NeMo 2.3's DeepSeek-V3 script sets them (first ``64/p - 1``, last
    ``64/p - 2``). ``p >= 2``; the two ends on different devices."""
    stated = 0
    if first_n > 0:
        stated += 1
    if last_n > 0:
        stated += 1
    rest = layers - first_n - last_n
    if rest < 0:
        rest = 0
    others = p - stated
    middle = 0
    if others > 0:
        middle = (rest + others - 1) // others
    first = first_n if first_n > 0 else middle
    last = last_n if last_n > 0 else middle
    if p <= 2:
        middle = 0
    return (first * 1.0, middle * 1.0, last * 1.0)


def explicit_stage_layers_error(schedule, p, v, layers, first_n, last_n):
    """True when stated first / last stage layer counts cannot run on this pipeline: a V
    placement (its first and last stage share device 0), more layers stated than the model has,
    two stages with both stated and layers left over, or a device holding fewer layers than
    its model chunks (:func:`schedule_layer_divisor` / p). Without a pipeline or a stated count
    there is nothing to check."""
    if p <= 1 or (first_n <= 0 and last_n <= 0):
        return False
    if loss_on_first_device(schedule, p):
        return True
    if first_n + last_n > layers:
        return True
    if p == 2 and first_n > 0 and last_n > 0 and first_n + last_n != layers:
        return True
    chunks = schedule_layer_divisor(schedule, p, v) // p
    first, middle, last = explicit_stage_layers(p, layers, first_n, last_n)
    if first < chunks or last < chunks:
        return True
    return p > 2 and middle < chunks


def pipeline_stage_layers(schedule, p, v, layers, edge, mtp, first_n, last_n):
    """Transformer layers ``(first, middle, last)`` per microbatch pass on the first device, on
    the busiest middle device and on the last device, when ``layers`` are split over the
    pipeline's model chunks as evenly as possible.

    ``edge`` (k) counts the embedding and the loss as k layers each in the split, so the stage
    holding the embedding and the stage holding the loss each get k transformer layers fewer:
    Megatron-LM ``--account-for-embedding-in-pipeline-split`` /
    ``--account-for-loss-in-pipeline-split`` (k = 1; NeMo 2.0's Llama 3.1 405B recipe on PP8:
    126 + 2 = 128 layers), Llama 3 (arXiv 2407.21783 §3.3.2: one transformer layer fewer on the
    first and the last stage); k = 0 is the plain split.

    The ``L + 2k`` layers (edge layers included) are spread over the p devices: no device
    holds more than ``U = ceil((L + 2k) / p)`` (reachable with the pipeline's ``p*v`` chunks as
    well: give the ``(L + 2k) mod pv`` larger chunks round-robin over the devices). The first
    device holds ``U - k`` transformer layers (``U - 2k`` when it also holds the loss, see
    :func:`loss_on_first_device`), the last ``U - k``, never below 0 nor above an equal share
    of the layers; the middle devices the rest, the busiest ``ceil(rest / (p - edge devices))``.

    ``mtp`` multi-token prediction blocks ride on the device holding the loss (Megatron-Core
    ``mtp_on_this_rank``: the last pipeline stage). A split that counts the embedding and the
    loss (k > 0) counts each of them as a layer too: ``L + 2k + mtp`` slots, the loss device
    ``mtp`` transformer layers fewer -- NeMo 2.0's DeepSeek-V3 performance script
    (``scripts/performance/llm/pretrain_deepseek_v3.py``, NVIDIA/NeMo r2.3.0: first stage
    ``64/p - 1``, last ``64/p - 2`` layers of 61) and Megatron-Bridge's layout ``Et|(tt|)*30mL``
    (an MTP slot ``m`` and a loss slot ``L`` in the last chunk). The returned counts are
    transformer layers; the MTP blocks are added by the caller.

    ``first_n`` / ``last_n`` (either > 0): the stated counts of :func:`explicit_stage_layers`
    instead of the rule (``edge`` and the MTP slots then play no part in the split).
    Without a pipeline the one device holds every layer. DualPipe's two mirrored directions are
    counted as one: each device runs one p-th of the model per microbatch. When the last stage
    shares the first device the returned ``last`` equals ``first``."""
    if p <= 1:
        return (layers * 1.0, 0.0, layers * 1.0)
    if first_n > 0 or last_n > 0:
        return explicit_stage_layers(p, layers, first_n, last_n)
    k = edge
    if k < 0:
        k = 0
    slots = 0  # MTP blocks counted in the split (only where the edges are)
    if k > 0 and mtp > 0:
        slots = mtp
    total = layers + 2 * k + slots
    u = (total + p - 1) // p
    if loss_on_first_device(schedule, p):
        ends = 1
        first = u - 2 * k - slots
        last = first
    else:
        ends = 2
        first = u - k
        last = u - k - slots
    mids = p - ends
    if mids <= 0:
        # two devices, one end each: the layers split in halves (the larger on both, the
        # slowest end costs ceil)
        first = (layers + 1) // 2
        return (first * 1.0, 0.0, first * 1.0)
    cap = layers // ends
    if first < 0:
        first = 0
    if first > cap:
        first = cap
    if last < 0:
        last = 0
    if last > cap:
        last = cap
    if ends == 1:
        last = first
    rest = layers - first - (last if ends == 2 else 0)
    middle = (rest + mids - 1) // mids
    return (first * 1.0, middle * 1.0, last * 1.0)


def parameter_copies(schedule):
    """Copies of the device's share of the parameters: DualPipe keeps two mirrored copies
    (README: 2x parameters); every other schedule 1."""
    if schedule == SCHED_DUALPIPE:
        return 2.0
    return 1.0


def p2p_critical_transfers(schedule, p, v):
    """Stage-to-stage activation/gradient transfers on the critical path of the fill and the
    drain (the transfers a step pays whatever m, besides any steady-state ones).

    * gpipe, 1f1b, zb-h1, zb-h2: 2(p-1) -- the first microbatch's forward crosses p-1 device
      boundaries before the last stage can start, the last backward crosses p-1 back. For
      GPipe these are all the exposed transfers (:func:`pipeline_comm_time`); 1F1B adds
      :func:`p2p_steady_crossings_1f1b` steady-state ones.
    * interleaved: 2(pv-1) -- the microbatch route has pv stages on p devices, every boundary
      between consecutive stages is a device boundary (stage c*p+r on device r), and the fill
      waits for the first microbatch to come round all v loops (the simulator with a per-transfer
      delay and m = 4p gives exactly 2(pv-1) for this schedule).
    * zb-v, dualpipe-v: 4(p-1) -- a V route of 2p stages: 2p-1 boundaries of which the turn at
      device p-1 is local, so 2(p-1) transfers each way.
    * dualpipe: 2(p-1) -- each direction is a p-stage pipeline; the two directions fill at the
      same time from opposite ends, so one fill and one drain are exposed.
    p == 1: 0."""
    if p <= 1:
        return 0.0
    q = p - 1.0
    if schedule == SCHED_INTERLEAVED:
        if v < 1:
            v = 1
        return 2.0 * (p * v - 1.0)
    if schedule == SCHED_ZB_V or schedule == SCHED_DUALPIPE_V:
        return 4.0 * q
    return 2.0 * q


def p2p_steady_crossings_1f1b(p, m):
    """Steady-state stage-boundary transfers on the critical path of 1F1B, beyond the
    2(p-1) of the fill and the drain: ``2(m-1) - 2 floor((m+p-2)/p)`` (0 for m = 1; about
    ``2m(p-1)/p`` for m >> p).

    Megatron-LM ``forward_backward_pipelining_without_interleaving`` issues its steady-state
    transfers as *blocking* pairs (``send_forward_recv_backward``,
    ``send_backward_recv_forward``): rank r cannot start its next forward before the gradient
    of rank r+1 came back, and rank r+1 cannot start that forward before rank r's activation
    arrived. With zero transfer time 1F1B is tight everywhere (bubble (p-1)(f+b+w) on every
    path), so every transfer adds to the makespan: a window of k+1 consecutive ranks is a
    dependency cycle of k+1 microbatches that crosses its k boundaries twice, and the whole
    pipeline (k = p-1) crosses 2(p-1) boundaries every p microbatches.

    The count is that of the schedule simulator (:mod:`trainscape.model.schedule_sim`, the
    spec of schedule timing): ``makespan(c) - makespan(0) = (2(p-1) + this) c`` exactly, for
    every transfer time c (no compute window hides any of it), every f, b, w split and
    p = 2..16, m = 1..8p (``tests/test_pipeline_p2p_sim.py``)."""
    if p <= 1 or m < 1:
        return 0.0
    return 2.0 * (m - 1.0) - 2.0 * math.floor((m + p - 2.0) / p)


def p2p_steady_transfer_1f1b(p, route, t_max):
    """Time charged per steady-state 1F1B crossing (:func:`p2p_steady_crossings_1f1b`) when
    the p-1 boundaries differ: ``max(route / (p-1), t_max p / (2(p-1)))``.

    The steady crossings go round dependency cycles of consecutive ranks (k boundaries
    crossed twice every k+1 microbatches), so a microbatch pays the slowest such cycle's
    ``2 (sum of its k transfers) / (k+1)``. With only the route sum and the slowest transfer
    known, the two cycles they name are the whole pipeline, ``2 route / p``, and the slowest
    boundary alone, ``t_max``; the crossings number about ``2m(p-1)/p``, so each is charged the
    larger rate times ``p / (2(p-1))``. Exact when every boundary is alike (the first term,
    ``route / (p-1) = t_max``, is then the larger). With one slow boundary every g (tiers,
    fast ones 0.01 to 0.9 of it) the simulator replaying a per-boundary transfer time
    (p = 4..16, m = p, 4p, 8p) is within -11 % .. +12 % of this form for m >= 4p; at m = p the
    form over-counts by up to 65 % (little is at stake there); a cycle over a
    few slow boundaries in a row can be slower than both terms."""
    if p <= 1:
        return 0.0
    q = p - 1.0
    t = route / q
    u = t_max * p / (2.0 * q)
    if u > t:
        t = u
    if t < 0.0:
        t = 0.0
    return t


def pipeline_hide_window(f, b, w, chunks):
    """Compute that hides one steady-state stage-boundary transfer: while an activation (a
    gradient) is in flight the receiving device runs one chunk's backward (forward) of another
    microbatch, so a transfer shorter than ``min(f, b + w) / chunks`` costs nothing in the
    steady state (Megatron-LM's non-blocking ``overlap_p2p_comm`` send/recv of the interleaved
    schedule, Narayanan et al. SC'21 §2.2). The schedule simulator
    (:mod:`trainscape.model.schedule_sim`, interleaved with a per-transfer delay) starts to
    stall exactly past this window (p = 8 and 16, v = 2 and 4). It does NOT apply to 1F1B
    (blocking p2p, every transfer exposed: :func:`p2p_steady_crossings_1f1b`) nor to GPipe
    (no steady-state transfer on the critical path at all); :func:`pipeline_comm_time` uses it
    for the interleaved, zero-bubble and DualPipe schedules."""
    if chunks < 1:
        chunks = 1
    hide = b + w
    if f < hide:
        hide = f
    if hide < 0.0:
        hide = 0.0
    return hide / chunks


def pipeline_comm_time(schedule, p, v, m, route, t_top, t_max, hide):
    """Pipeline point-to-point time of one step: the fill and drain transfers, each at the tier
    its boundary crosses, plus the steady-state transfers the schedule exposes.

    ``route``, ``t_top``, ``t_max``: :func:`~trainscape.model.collectives.pipeline_boundary_
    transfers`; ``hide``: :func:`pipeline_hide_window`. The schedule simulator
    (:mod:`trainscape.model.schedule_sim`) is the spec; with every boundary alike (``route =
    (p-1) t``, ``t_top = t_max = t``) it gives, for any t:

    * gpipe: ``2 route`` -- the first forward's fill and the last backward's drain. Exact at
      every t: a stage's next forward (backward) never waits for a transfer, the previous
      stage produces one every f (b + w) and the transfers only shift the stream.
    * 1f1b (and interleaved with v = 1, which runs it): ``2 route +``
      :func:`p2p_steady_crossings_1f1b` ``x`` :func:`p2p_steady_transfer_1f1b`. Megatron-LM's
      blocking ``send_forward_recv_backward`` / ``send_backward_recv_forward`` put every
      steady-state transfer on the critical path, at every t (no compute window hides any):
      ``(2(p-2) + 2m(p-1)/p) t`` when p divides m.
    * interleaved (v > 1): ``2 (v route + (v - 1) t_top)`` (v loops over the devices and v - 1
      wraps from the last device to the first: 2(pv-1) transfers), exact while ``t_max <=
      hide``; past the window ``m v (t_max - hide)`` is added, an upper bound of the simulator
      (whose stall grows by 2(pv-1) + (v-1)(m-p) per unit of delay just past the window, by
      more further out).
    * zb-h1, zb-h2, zb-v, dualpipe, dualpipe-v: ``2 route`` (``4 route`` for the V schedules,
      each boundary twice per direction) plus ``m * chunks * max(0, t_max - hide)``: a
      transfer within the compute window is hidden. Kept from the simulator's replay because
      the simulator does not represent how these schedules communicate: it replays orders
      drawn for zero transfer time with blocking waits, whereas the sail-sg zero-bubble runtime
      schedules its sends and receives as their own nodes at the peer's completion time and
      moves a receive ahead of the computation it overlaps
      (``zerobubble/scheduler/communication.py``, ``reorder_communication``, with the
      transfer cost ``cost_comm`` in the schedule search), and DualPipe overlaps the
      transfers of one microbatch with the forward-and-backward chunk of another (DeepSeek-V3
      tech report §3.2.1), which the simulator's ``FB`` operation, waiting for both inputs,
      does not.
    """
    if p <= 1:
        return 0.0
    if schedule == SCHED_GPIPE:
        return 2.0 * route
    if schedule == SCHED_1F1B or (schedule == SCHED_INTERLEAVED and v <= 1):
        steady = p2p_steady_crossings_1f1b(p, m) * p2p_steady_transfer_1f1b(p, route, t_max)
        return 2.0 * route + steady
    n = p2p_critical_transfers(schedule, p, v)
    if schedule == SCHED_INTERLEAVED:
        fill = 2.0 * (v * route + (v - 1.0) * t_top)
    else:
        fill = n / (p - 1.0) * route
    chunks = schedule_chunks(schedule, v)
    stall = t_max - hide
    if stall < 0.0:
        stall = 0.0
    return fill + m * chunks * stall
