"""A small discrete-event simulator of pipeline-parallel schedules (reference only, not compiled).

It checks the closed forms of :mod:`trainscape.model.pipeline`. For each schedule it builds every
device's *order of operations* the way the public implementations issue them, then plays the
orders under the data dependencies with zero communication time:

* ``F`` of a microbatch on stage ``s+1`` starts after its ``F`` on stage ``s`` ends;
* ``B`` (input gradient) on stage ``s`` starts after ``B`` on stage ``s+1`` ends (after the
  stage's own ``F`` on the last stage);
* ``W`` (weight gradient) starts after ``B`` of the same stage and microbatch;
* a device runs one operation at a time, strictly in its list order.

Schedules that do not split the backward run a fused ``BW`` (time ``b + w``); DualPipe's
overlapped "F&B" is one operation ``FB`` that needs both inputs before it starts and takes the
sum of its parts (no compute-overlap gain; communication overlap is modelled elsewhere).

A *stage* is a slice of layers/(number of stages); stage ``k`` of a microbatch's route lives on one
device. ``f, b, w`` are the times of one microbatch through one device's worth of layers
(layers/p), so an operation on a device holding ``c`` chunks takes ``f/c`` etc.

Two lengths are reported:

* ``makespan`` -- every device may start at time 0 and the step ends when the last device ends
  (a synchronous optimizer step after the pipeline, as in Megatron-LM, DeepSpeed and DualPipe);
* ``span`` -- the longest window of a single device from its first operation's start to its last
  operation's end. This is the iteration period when the optimizer steps of the stages are not a
  global barrier (the Zero Bubble paper's "optimizer post-validation", arXiv 2401.10241 §4); it is
  the quantity the paper's schedule search minimises (``best_time`` in
  ``megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py`` of
  sail-sg/zero-bubble-pipeline-parallelism).

``bubble = makespan - m*(f+b+w)`` and ``span_bubble = span - m*(f+b+w)``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

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
from .pipeline import SCHEDULE_INVALID_REASONS, schedule_chunks, schedule_valid


class DeadlockError(RuntimeError):
    """The operation orders cannot all complete under the dependencies."""


class ScheduleInvalidError(ValueError):
    """``schedule_valid`` rejects the (schedule, p, m, v) combination."""


@dataclass(frozen=True)
class Op:
    """One operation in a device's list.

    ``kind`` is ``F``, ``B`` (input gradient only), ``W`` (weight gradient), ``BW`` (fused full
    backward) or ``FB`` (DualPipe's overlapped forward of (stage, mb) and fused full backward of
    (stage2, mb2)). ``stage`` indexes the microbatch's route, 0 = first layers.
    """

    kind: str
    stage: int
    mb: int
    stage2: int = -1
    mb2: int = -1

    def __str__(self) -> str:
        if self.kind == "FB":
            return f"F{self.mb}@{self.stage}&BW{self.mb2}@{self.stage2}"
        return f"{self.kind}{self.mb}@{self.stage}"


@dataclass
class SimResult:
    makespan: float
    bubble: float
    span: float
    span_bubble: float
    peak_inflight: list[float]
    ops: list[list[Op]]
    critical: tuple[float, float, float]
    start: list[list[float]] = field(repr=False)
    end: list[list[float]] = field(repr=False)

    def timeline(self) -> str:
        """Per-device text listing of operations with start/end times (debugging aid)."""
        lines = []
        for d, ops in enumerate(self.ops):
            items = [
                f"{op}[{s:g},{e:g}]" for op, s, e in zip(ops, self.start[d], self.end[d])
            ]
            lines.append(f"dev{d}: " + " ".join(items))
        return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Builders: per-device operation orders
# --------------------------------------------------------------------------------------------


def _no_pipeline(m: int) -> list[list[Op]]:
    """p == 1: gradient accumulation, each microbatch's forward then backward
    (Megatron-LM ``forward_backward_no_pipelining``)."""
    ops = []
    for i in range(m):
        ops.append(Op("F", 0, i))
        ops.append(Op("BW", 0, i))
    return [ops]


def _gpipe(p: int, m: int) -> list[list[Op]]:
    """GPipe (Huang et al. 2019): all forwards, then all backwards in microbatch order
    (torch.distributed.pipelining ``ScheduleGPipe``)."""
    return [
        [Op("F", r, i) for i in range(m)] + [Op("BW", r, i) for i in range(m)] for r in range(p)
    ]


def _one_f_one_b(p: int, m: int) -> list[list[Op]]:
    """Megatron-LM ``forward_backward_pipelining_without_interleaving``: rank r runs
    ``min(p-r-1, m)`` warm-up forwards, then one-forward-one-backward, then the cool-down
    backwards (megatron/core/pipeline_parallel/schedules.py)."""
    out = []
    for r in range(p):
        warm = min(p - r - 1, m)
        ops = [Op("F", r, i) for i in range(warm)]
        nb = 0
        for i in range(m - warm):
            ops.append(Op("F", r, warm + i))
            ops.append(Op("BW", r, nb))
            nb += 1
        while nb < m:
            ops.append(Op("BW", r, nb))
            nb += 1
        out.append(ops)
    return out


def _interleaved(p: int, m: int, v: int) -> list[list[Op]]:
    """Megatron-LM ``forward_backward_pipelining_with_interleaving`` (Narayanan et al. SC'21 §2.2).

    Device r holds chunks c = 0..v-1, i.e. global stages c*p + r. Virtual microbatch k
    (0 <= k < m*v) maps to chunk ``(k mod p*v) // p`` (backward: ``v-1-`` that) and microbatch
    ``(k // p*v)*p + k mod p``. Warm-up: all m*v forwards when m == p, otherwise
    ``min(2(p-r-1) + (v-1)p, m*v)``; then 1F1B over virtual microbatches; then cool-down.
    Requires m % p == 0 (Megatron's assertion, see pipeline.schedule_valid)."""
    total = m * v
    out = []
    for r in range(p):

        def fwd(k: int) -> Op:
            g = k % (p * v)
            return Op("F", (g // p) * p + r, (k // (p * v)) * p + k % p)

        def bwd(k: int) -> Op:
            g = k % (p * v)
            return Op("BW", (v - 1 - g // p) * p + r, (k // (p * v)) * p + k % p)

        if m == p:
            warm = total
        else:
            warm = min(2 * (p - r - 1) + (v - 1) * p, total)
        ops = [fwd(k) for k in range(warm)]
        for k in range(total - warm):
            ops.append(fwd(warm + k))
            ops.append(bwd(k))
        for k in range(total - warm, total):
            ops.append(bwd(k))
        out.append(ops)
    return out


def _zb_h1(p: int, m: int) -> list[list[Op]]:
    """ZB-H1 (Qi et al., arXiv 2401.10241 §3.1, Fig. 3 top) as issued by
    ``ZeroBubbleH1Pipeline.steps`` (microsoft/Megatron-DeepSpeed,
    megatron/core/pipeline_parallel/deepspeed_zbh1_schedule.py, exact-semantics branch):
    rank r runs ``p-r-1`` warm-up forwards, then r rounds of (F, B) with the W deferred, then
    (F, B, W) rounds, (B, W) rounds, and the remaining W's. W's are popped FIFO. The first rank
    runs the fused backward."""
    out = []
    for r in range(p):
        ops: list[Op] = []
        pend: deque[int] = deque()
        nf = nb = 0

        def f_():
            nonlocal nf
            ops.append(Op("F", r, nf))
            nf += 1

        def b_():
            nonlocal nb
            if r == 0:
                ops.append(Op("BW", r, nb))
            else:
                ops.append(Op("B", r, nb))
                pend.append(nb)
            nb += 1

        def w_():
            if r != 0:
                ops.append(Op("W", r, pend.popleft()))

        for _ in range(p - r - 1):
            if nf < m:
                f_()
        for _ in range(r):
            if nf < m:
                f_()
                b_()
        while nf < m:
            f_()
            b_()
            w_()
        while nb < m:
            b_()
            w_()
        while pend:
            w_()
        out.append(ops)
    return out


def _dualpipe_like(p: int, m: int, v_shape: bool) -> list[list[Op]]:
    """DualPipe / DualPipeV ``step()`` (deepseek-ai/DualPipe, dualpipe/dualpipe.py and
    dualpipe/dualpipev.py): the eight steps nF0, nF0F1, nB1W1F1, nF0B1F1B0, nB1F1B0, nB1B0,
    nWB0, nW; backward chunks with ``enable_zb`` defer their W to a FIFO popped by
    ``_weight_chunk``; the others (and every overlapped F&B) run the full backward.

    DualPipe: p devices, two directions of m/2 microbatches each; direction 0 goes device
    0 -> p-1 (stage = device), direction 1 goes p-1 -> 0 (stage = p-1-device); "phase" is
    relative: on the second half of the devices phase 0 is direction 1.
    DualPipeV: p devices, one V-shaped route of 2p stages; device r holds stage r (phase 0)
    and stage 2p-1-r (phase 1); all m microbatches take it.
    """
    out = []
    half = m // 2
    for rank in range(p):
        ops: list[Op] = []
        pend: deque[tuple[int, int]] = deque()
        if v_shape:
            n_half_ranks = p
            hr = rank
            middle = rank == p - 1
            n_mb = m
        else:
            n_half_ranks = p // 2
            hr = min(rank, p - 1 - rank)
            middle = rank == p // 2 - 1 or rank == p // 2
            n_mb = half
        second = (not v_shape) and rank >= p // 2
        fcnt = [0, 0]
        bcnt = [0, 0]

        def route(phase: int) -> tuple[int, int]:
            """(stage, microbatch offset) of the next op in a relative phase."""
            if v_shape:
                return (rank if phase == 0 else 2 * p - 1 - rank), 0
            d = phase ^ int(second)
            return (rank if d == 0 else p - 1 - rank), d * half

        def next_f(phase):
            st, off = route(phase)
            i = fcnt[phase]
            fcnt[phase] += 1
            return st, off + i

        def next_b(phase):
            st, off = route(phase)
            i = bcnt[phase]
            bcnt[phase] += 1
            return st, off + i

        def F(phase):
            st, mb = next_f(phase)
            ops.append(Op("F", st, mb))

        def B(phase, zb=False):
            st, mb = next_b(phase)
            if zb:
                ops.append(Op("B", st, mb))
                pend.append((st, mb))
            else:
                ops.append(Op("BW", st, mb))

        def W():
            st, mb = pend.popleft()
            ops.append(Op("W", st, mb))

        def FB(phase0, phase1):
            st0, mb0 = next_f(phase0)
            st1, mb1 = next_b(phase1)
            ops.append(Op("FB", st0, mb0, st1, mb1))

        for _ in range((n_half_ranks - hr - 1) * 2):  # step 1: nF0
            F(0)
        for _ in range(hr + 1):  # step 2: nF0F1
            F(0)
            F(1)
        for _ in range(n_half_ranks - hr - 1):  # step 3: nB1W1F1
            B(1, zb=True)
            W()
            F(1)
        step_4 = (n_mb - 2 * n_half_ranks + hr + 1) if v_shape else (half - p + hr + 1)
        for i in range(step_4):  # step 4: nF0B1F1B0
            if i == 0 and middle:
                F(0)  # "We don't overlap these two chunks to further reduce bubble size."
                B(1)
            else:
                FB(0, 1)
            FB(1, 0)
        for _ in range(n_half_ranks - hr - 1):  # step 5: nB1F1B0
            B(1)
            FB(1, 0)
        zb = False  # step 6: nB1B0, the second half with zero bubble
        s6 = hr + 1
        for i in range(s6):
            if i == s6 // 2 and hr % 2 == 1:
                zb = True
            B(1, zb)
            if i == s6 // 2 and hr % 2 == 0:
                zb = True
            B(0, zb)
        for _ in range(n_half_ranks - hr - 1):  # step 7: nWB0
            W()
            B(0, True)
        for _ in range(hr + 1):  # step 8: nW
            W()
        assert not pend
        out.append(ops)
    return out


# ---- greedy list scheduler (ZB-H2) -----------------------------------------------------


def _greedy_orders(
    n_dev: int,
    n_stages: int,
    m: int,
    dev_of_stage: list[int],
    cost: tuple[float, float, float],
    cap: int,
    f_pref: list[list[int]],
) -> list[list[Op]]:
    """Build per-device orders by event-driven list scheduling under unit costs (F=B=W, the
    assumption the Zero Bubble paper's handcrafted schedules are drawn for, arXiv 2401.10241
    §3.1 and Fig. 3). Each idle device takes, in priority:
    a ready B (latest stage first, so the loss end drains first), a ready F (stages in
    ``f_pref[d]`` order) while fewer than ``cap`` stage-activations are stored, otherwise the
    oldest pending W (FIFO, as WeightGradStore). Activations are stored from F to W.

    This mirrors the rules of the public greedy constructors (``manual_order`` in zb.py and
    ``try_v_schedule`` in zbv.py of sail-sg/zero-bubble-pipeline-parallelism: B first, F while
    memory allows, W to fill what would be a bubble or to free memory), written down plainly."""
    fc, bc, wc = cost
    f_end: dict[tuple[int, int], float] = {}
    b_end: dict[tuple[int, int], float] = {}
    nf = [0] * n_stages
    nb = [0] * n_stages
    stored = [0] * n_dev
    pend: list[deque[tuple[int, int]]] = [deque() for _ in range(n_dev)]
    busy_until = [0.0] * n_dev
    stages_of = [[s for s in range(n_stages) if dev_of_stage[s] == d] for d in range(n_dev)]
    orders: list[list[Op]] = [[] for _ in range(n_dev)]
    remaining = 3 * n_stages * m
    t = 0.0
    while remaining:
        progressed = False
        for d in range(n_dev):
            if busy_until[d] > t:
                continue
            choice = None
            # B: latest stage first
            for s in sorted(stages_of[d], reverse=True):
                i = nb[s]
                if i >= m or nf[s] <= i:
                    continue
                dep = f_end.get((s, i)) if s == n_stages - 1 else b_end.get((s + 1, i))
                if dep is not None and dep <= t and f_end[(s, i)] <= t:
                    choice = ("B", s, i)
                    break
            if choice is None and stored[d] < cap:
                for s in f_pref[d]:
                    i = nf[s]
                    if i >= m:
                        continue
                    dep = 0.0 if s == 0 else f_end.get((s - 1, i))
                    if dep is not None and dep <= t:
                        choice = ("F", s, i)
                        break
            if choice is None and pend[d]:
                s, i = pend[d].popleft()
                choice = ("W", s, i)
            if choice is None:
                continue
            kind, s, i = choice
            if kind == "F":
                end = t + fc
                f_end[(s, i)] = end
                nf[s] += 1
                stored[d] += 1
            elif kind == "B":
                end = t + bc
                b_end[(s, i)] = end
                nb[s] += 1
                pend[d].append((s, i))
            else:
                end = t + wc
                stored[d] -= 1
            orders[d].append(Op(kind, s, i))
            busy_until[d] = end
            remaining -= 1
            progressed = True
        # advance the clock to the next completion
        future = [x for x in busy_until if x > t]
        if not future:
            if not progressed and remaining:
                raise DeadlockError("greedy order construction stalled")
            continue
        t = min(future)
    return orders


def _zb_h2(p: int, m: int) -> list[list[Op]]:
    """ZB-H2 (arXiv 2401.10241 §3.1, Fig. 3 bottom): more warm-up forwards (2(p-r)-1 on rank r,
    peak (2p-1) stored microbatches) and W's moved to the tail so the schedule becomes a
    parallelogram. Built by the greedy rules above under unit costs with a cap of 2p-1."""
    return _greedy_orders(p, p, m, list(range(p)), (1.0, 1.0, 1.0), 2 * p - 1, [[r] for r in range(p)])


def _zb_v(p: int, m: int) -> list[list[Op]]:
    """ZB-V (Qi et al., Zero Bubble PP, V-shape schedule; the handcrafted order in
    ``get_zb_v_schedule``, sail-sg/zero-bubble-pipeline-parallelism,
    megatron/core/pipeline_parallel/handcrafted_zb_v). Device r holds stage r (chunk 0) and
    stage 2p-1-r (chunk 1). Warm-up: 2(p-r)-1 F0, r pairs (F1, F0), p-r triples (F1, B1, W1);
    stable: (F0, B0, W0, F1, B1, W1); cool-down: r pairs (B0, B1), p-r pairs (B0, W0), then the
    deferred W1's and W0's. Microbatches are padded to 2p-1 and the padding removed."""
    n = max(2 * p - 1, m)
    out = []
    for r in range(p):
        s0, s1 = r, 2 * p - 1 - r
        ops: list[Op] = []
        f0 = f1 = b0 = b1 = 0

        def add(kind, st, i):
            if i < m:
                ops.append(Op(kind, st, i))

        for _ in range(2 * (p - r) - 1):
            add("F", s0, f0)
            f0 += 1
        for _ in range(r):
            add("F", s1, f1)
            f1 += 1
            add("F", s0, f0)
            f0 += 1
        for _ in range(p - r):
            add("F", s1, f1)
            f1 += 1
            add("B", s1, b1)
            add("W", s1, b1)
            b1 += 1
        while f1 < f0 or f0 < n:
            if f0 < n:
                add("F", s0, f0)
                f0 += 1
            add("B", s0, b0)
            add("W", s0, b0)
            b0 += 1
            add("F", s1, f1)
            f1 += 1
            add("B", s1, b1)
            add("W", s1, b1)
            b1 += 1
        w0, w1 = b0, b1
        for _ in range(r):
            add("B", s0, b0)
            b0 += 1
            add("B", s1, b1)
            b1 += 1
        for _ in range(p - r):
            add("B", s0, b0)
            b0 += 1
            add("W", s0, w0)
            w0 += 1
        while w1 < b1:
            add("W", s1, w1)
            w1 += 1
        while w0 < b0:
            add("W", s0, w0)
            w0 += 1
        out.append(ops)
    return out


# --------------------------------------------------------------------------------------------
# Replay
# --------------------------------------------------------------------------------------------


def _schedule_code(schedule: str | int) -> int:
    if isinstance(schedule, str):
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule: {schedule!r} is not one of {', '.join(SCHEDULES)}")
        return SCHEDULES.index(schedule)
    code = int(schedule)
    if not 0 <= code < len(SCHEDULES):
        raise ValueError(f"schedule: {schedule!r} is not a code in 0..{len(SCHEDULES) - 1}")
    return code


def build_orders(
    schedule: str | int, p: int, m: int, v: int, check: bool = True
) -> tuple[list[list[Op]], int]:
    """Per-device operation orders and the number of stages of a microbatch's route.
    ``check=False`` skips :func:`schedule_valid` (to show what goes wrong without it)."""
    code = _schedule_code(schedule)
    if p < 1 or m < 1 or v < 1:
        raise ValueError(f"pp={p}, microbatches={m}, vpp={v}: all must be >= 1")
    reason = schedule_valid(code, p, m, v)
    if check and reason != 0:
        raise ScheduleInvalidError(
            f"schedule: {SCHEDULES[code]} with pp={p}, microbatches={m}, vpp={v}: "
            f"{SCHEDULE_INVALID_REASONS[reason]}"
        )
    if p == 1:
        return _no_pipeline(m), 1
    if code == SCHED_GPIPE:
        return _gpipe(p, m), p
    if code == SCHED_1F1B or (code == SCHED_INTERLEAVED and v == 1):
        return _one_f_one_b(p, m), p
    if code == SCHED_INTERLEAVED:
        return _interleaved(p, m, v), p * v
    if code == SCHED_ZB_H1:
        return _zb_h1(p, m), p
    if code == SCHED_ZB_H2:
        return _zb_h2(p, m), p
    if code == SCHED_ZB_V:
        return _zb_v(p, m), 2 * p
    if code == SCHED_DUALPIPE:
        return _dualpipe_like(p, m, v_shape=False), p
    if code == SCHED_DUALPIPE_V:
        return _dualpipe_like(p, m, v_shape=True), 2 * p
    raise AssertionError(code)


class IncompleteScheduleError(ValueError):
    """The orders do not run every (stage, microbatch) forward, input and weight gradient
    exactly once."""


def _check_complete(orders: list[list[Op]], n_stages: int, m: int) -> None:
    seen: dict[tuple[str, int, int], int] = {}

    def add(kind, s, i):
        seen[(kind, s, i)] = seen.get((kind, s, i), 0) + 1

    for ops in orders:
        for op in ops:
            if op.kind == "F":
                add("F", op.stage, op.mb)
            elif op.kind in ("B", "W"):
                add(op.kind, op.stage, op.mb)
            elif op.kind == "BW":
                add("B", op.stage, op.mb)
                add("W", op.stage, op.mb)
            else:
                add("F", op.stage, op.mb)
                add("B", op.stage2, op.mb2)
                add("W", op.stage2, op.mb2)
    want = {(k, s, i): 1 for k in "FBW" for s in range(n_stages) for i in range(m)}
    if seen != want:
        missing = sorted(set(want) - set(seen))[:3]
        extra = sorted(k for k in seen if seen[k] != want.get(k))[:3]
        raise IncompleteScheduleError(
            f"orders do not cover each op once: missing {missing}, wrong count {extra}"
        )


def replay(
    orders: list[list[Op]],
    n_stages: int,
    m: int,
    chunks: int,
    f: float,
    b: float,
    w: float,
    comm: float = 0.0,
) -> SimResult:
    """Play the orders under the dependencies; raise :class:`DeadlockError` if they cannot
    complete. ``chunks`` = stages held per device (op times are f/chunks, ...). ``comm`` delays
    every dependency between two different devices (a p2p transfer); 0 by default."""
    _check_complete(orders, n_stages, m)
    fs, bs, ws = f / chunks, b / chunks, w / chunks
    f_end: dict[tuple[int, int], float] = {}
    b_end: dict[tuple[int, int], float] = {}  # input gradient available (end of B, BW or FB)
    f_who: dict[tuple[int, int], tuple[int, int]] = {}
    b_who: dict[tuple[int, int], tuple[int, int]] = {}
    n_dev = len(orders)
    pred: dict[tuple[int, int], tuple[int, int] | None] = {}
    ptr = [0] * n_dev
    free = [0.0] * n_dev
    starts: list[list[float]] = [[] for _ in range(n_dev)]
    ends: list[list[float]] = [[] for _ in range(n_dev)]

    def lat(t, who, d):
        if t is None or who is None or who[0] == d:
            return t
        return t + comm

    def f_ready(s: int, i: int):
        return (0.0, None) if s == 0 else (f_end.get((s - 1, i)), f_who.get((s - 1, i)))

    def b_ready(s: int, i: int):
        own = f_end.get((s, i))
        if own is None:
            return None, None
        if s == n_stages - 1:
            return own, f_who[(s, i)]
        dep = b_end.get((s + 1, i))
        if dep is None:
            return None, None
        return (own, f_who[(s, i)]) if own > dep else (dep, b_who[(s + 1, i)])

    progress = True
    while progress:
        progress = False
        for d in range(n_dev):
            while ptr[d] < len(orders[d]):
                op = orders[d][ptr[d]]
                k = op.kind
                if k == "F":
                    (ready, who), dur = f_ready(op.stage, op.mb), fs
                elif k == "B":
                    (ready, who), dur = b_ready(op.stage, op.mb), bs
                elif k == "BW":
                    (ready, who), dur = b_ready(op.stage, op.mb), bs + ws
                elif k == "W":
                    ready, who, dur = b_end.get((op.stage, op.mb)), b_who.get((op.stage, op.mb)), ws
                else:  # FB
                    r1, w1 = f_ready(op.stage, op.mb)
                    r2, w2 = b_ready(op.stage2, op.mb2)
                    ready = None if r1 is None or r2 is None else max(r1, r2)
                    who = w1 if ready is not None and r1 >= r2 else w2
                    dur = fs + bs + ws
                if ready is None:
                    break
                if k == "FB":
                    r1 = lat(r1, w1, d)
                    r2 = lat(r2, w2, d)
                    ready = max(r1, r2)
                    who = w1 if r1 >= r2 else w2
                else:
                    ready = lat(ready, who, d)
                me = (d, ptr[d])
                if ptr[d] > 0 and free[d] >= ready:
                    pred[me] = (d, ptr[d] - 1)
                else:
                    pred[me] = who
                st = max(free[d], ready)
                en = st + dur
                if k == "F":
                    f_end[(op.stage, op.mb)] = en
                    f_who[(op.stage, op.mb)] = me
                elif k in ("B", "BW"):
                    b_end[(op.stage, op.mb)] = en
                    b_who[(op.stage, op.mb)] = me
                elif k == "FB":
                    f_end[(op.stage, op.mb)] = en
                    b_end[(op.stage2, op.mb2)] = en
                    f_who[(op.stage, op.mb)] = me
                    b_who[(op.stage2, op.mb2)] = me
                starts[d].append(st)
                ends[d].append(en)
                free[d] = en
                ptr[d] += 1
                progress = True
    stuck = [d for d in range(n_dev) if ptr[d] < len(orders[d])]
    if stuck:
        d = stuck[0]
        raise DeadlockError(
            f"deadlock: device {d} waits at op {ptr[d]} ({orders[d][ptr[d]]}); "
            f"{len(stuck)} device(s) stuck"
        )

    # peak stored activations per device, in units of one microbatch through layers/p layers
    peaks = []
    for d in range(n_dev):
        cur = peak = 0.0
        for op in orders[d]:
            if op.kind == "F":
                cur += 1.0 / chunks
                peak = max(peak, cur)
            elif op.kind in ("W", "BW"):
                cur -= 1.0 / chunks
            elif op.kind == "FB":
                cur += 1.0 / chunks
                peak = max(peak, cur)
                cur -= 1.0 / chunks
        peaks.append(peak)

    work = m * (f + b + w)
    makespan = max((e[-1] for e in ends if e), default=0.0)
    # critical path of the makespan: counts of f, b, w units (in per-op fractions)
    last = max(((e[-1], d) for d, e in enumerate(ends) if e), default=(0.0, -1))[1]
    crit = [0.0, 0.0, 0.0]
    node = (last, len(orders[last]) - 1) if last >= 0 else None
    while node is not None:
        op = orders[node[0]][node[1]]
        c = 1.0 / chunks
        if op.kind == "F":
            crit[0] += c
        elif op.kind == "B":
            crit[1] += c
        elif op.kind == "W":
            crit[2] += c
        elif op.kind == "BW":
            crit[1] += c
            crit[2] += c
        else:
            crit[0] += c
            crit[1] += c
            crit[2] += c
        node = pred.get(node)
    span = max((e[-1] - s[0] for s, e in zip(starts, ends) if e), default=0.0)
    return SimResult(
        makespan=makespan,
        bubble=makespan - work,
        span=span,
        span_bubble=span - work,
        peak_inflight=peaks,
        ops=orders,
        critical=(crit[0] - m, crit[1] - m, crit[2] - m),
        start=starts,
        end=ends,
    )


def simulate(
    schedule: str | int,
    p: int,
    m: int,
    v: int,
    f: float,
    b: float,
    w: float,
    comm: float = 0.0,
    check: bool = True,
) -> SimResult:
    """Simulate one pipeline step; see the module docstring for the model. ``comm`` (default 0)
    is the time of one stage-to-stage transfer, used to count the transfers on the critical
    path."""
    code = _schedule_code(schedule)
    orders, n_stages = build_orders(code, p, m, v, check)
    chunks = 1 if p == 1 else schedule_chunks(code, v)
    if code == SCHED_DUALPIPE:
        chunks = 1  # two mirrored stages of layers/p each: ops take the full f, b, w
    return replay(orders, n_stages, m, chunks, f, b, w, comm)
