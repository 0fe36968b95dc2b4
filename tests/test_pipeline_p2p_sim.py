"""The pipeline point-to-point cost (``pipeline.pipeline_comm_time``) held to the schedule
simulator (``schedule_sim``, the spec of schedule timing), with every stage-to-stage transfer
taking the same time c: ``route = (p-1) c``, ``t_top = t_max = c``.

Every time here (f, b, w, c) is a small dyadic rational, so the simulator's sums and the
closed form's products are exact in binary floating point; the relative tolerance of 1e-12
is there for form's sake, not to absorb any error (a wrong count is off by at least c, a
relative error of 1/n for n <= a few hundred transfers)."""

import pytest

from trainscape import layout as L
from trainscape.model import pipeline as P
from trainscape.model.schedule_sim import simulate

TOL = 1e-12

# f, b, w per device; c from far below to far above the compute window min(f, b + w)
COMPUTE = [(1.0, 1.0, 1.0), (1.0, 2.0, 0.0), (2.0, 1.0, 0.5), (0.5, 1.5, 0.25)]
TRANSFERS = [0.015625, 0.25, 1.0, 3.0, 16.0]


def _exposed(schedule, p, m, v, f, b, w, c):
    """Simulated exposed transfer time: makespan with transfers minus makespan without."""
    return (simulate(schedule, p, m, v, f, b, w, comm=c).makespan
            - simulate(schedule, p, m, v, f, b, w).makespan)


def _model(code, p, m, v, f, b, w, c):
    hide = P.pipeline_hide_window(f, b, w, P.schedule_chunks(code, v))
    return P.pipeline_comm_time(code, p, v, m, (p - 1) * c, c, c, hide)


@pytest.mark.parametrize("f,b,w", COMPUTE)
@pytest.mark.parametrize("p,m", [(2, 2), (2, 7), (4, 4), (4, 16), (5, 13), (8, 32), (8, 64)])
def test_gpipe_exposes_fill_and_drain_only_at_any_transfer_time(p, m, f, b, w):
    """GPipe: 2(p-1) c at every c, below and far above the window (a stage's next forward
    never waits: the previous stage produces one every f whatever the transfer time)."""
    for c in TRANSFERS:
        sim = _exposed("gpipe", p, m, 1, f, b, w, c)
        assert sim == pytest.approx(2 * (p - 1) * c, rel=TOL), c
        assert _model(L.SCHED_GPIPE, p, m, 1, f, b, w, c) == pytest.approx(sim, rel=TOL), c


def _one_f_one_b_count(p, m):
    """Transfers on 1F1B's critical path, by hand: 2(p-1) for the fill and the drain, plus
    2 per microbatch after the first, less 2 for every microbatch j in 2..m with
    j = 2 (mod p) (the cycle through all p ranks crosses 2(p-1) boundaries every p
    microbatches)."""
    skipped = sum(1 for j in range(2, m + 1) if (j - 2) % p == 0)
    return 2 * (p - 1) + 2 * (m - 1) - 2 * skipped


@pytest.mark.parametrize("p", [2, 3, 4, 5, 7, 8, 12, 16])
def test_1f1b_transfer_count_matches_the_simulator(p):
    """1F1B (Megatron-LM's blocking send_forward_recv_backward / send_backward_recv_forward):
    every steady-state transfer is on the critical path; the simulated count, m = 1..8p."""
    c = 0.125
    for m in range(1, 8 * p + 1):
        n = _one_f_one_b_count(p, m)
        assert _exposed("1f1b", p, m, 1, 1.0, 1.0, 1.0, c) == pytest.approx(n * c, rel=TOL), m
        got = 2 * (p - 1) + P.p2p_steady_crossings_1f1b(p, m)
        assert got == n, m
        if m % p == 0:  # the form of the report: 2(p-2) + 2m(p-1)/p
            assert n == 2 * (p - 2) + 2 * m * (p - 1) // p


@pytest.mark.parametrize("f,b,w", COMPUTE)
@pytest.mark.parametrize("p,m", [(2, 5), (3, 9), (4, 16), (6, 17), (8, 32), (8, 64)])
def test_1f1b_closed_form_matches_the_simulator_below_and_above_the_window(p, m, f, b, w):
    """No compute window: the exposed time is (2(p-1) + 2(m-1) - 2 floor((m+p-2)/p)) c for
    every c and every f, b, w split; interleaved with v = 1 runs the same schedule."""
    for c in TRANSFERS:
        n = _one_f_one_b_count(p, m)
        sim = _exposed("1f1b", p, m, 1, f, b, w, c)
        assert sim == pytest.approx(n * c, rel=TOL), c
        assert _model(L.SCHED_1F1B, p, m, 1, f, b, w, c) == pytest.approx(sim, rel=TOL), c
        assert _model(L.SCHED_INTERLEAVED, p, m, 1, f, b, w, c) == pytest.approx(sim, rel=TOL)


@pytest.mark.parametrize("f,b,w", COMPUTE)
@pytest.mark.parametrize("p,m,v", [(2, 4, 2), (4, 8, 2), (4, 16, 2), (4, 12, 3), (4, 16, 4),
                                   (8, 32, 2)])
def test_interleaved_exact_within_the_window_upper_bound_past_it(p, m, v, f, b, w):
    """Interleaved (v > 1): 2(pv-1) c while c <= min(f, b+w)/v; past the window the model
    adds m v (c - window), never less than the simulator."""
    hide = P.pipeline_hide_window(f, b, w, v)
    for c in TRANSFERS + [hide]:
        sim = _exposed("interleaved", p, m, v, f, b, w, c)
        model = _model(L.SCHED_INTERLEAVED, p, m, v, f, b, w, c)
        if c <= hide:
            assert sim == pytest.approx(2 * (p * v - 1) * c, rel=TOL), c
            assert model == pytest.approx(sim, rel=TOL), c
        else:
            assert model == pytest.approx(2 * (p * v - 1) * c + m * v * (c - hide), rel=TOL)
            assert model >= sim, c


def test_1f1b_known_answers_by_hand():
    """The report's cases at c = 0.01: p = 4, m = 16: 2(p-2) + 2m(p-1)/p = 4 + 24 = 28
    transfers; p = 8, m = 32: 12 + 56 = 68; p = 8, m = 64: 12 + 112 = 124."""
    c = 0.01
    for p, m, n in [(4, 16, 28), (8, 32, 68), (8, 64, 124)]:
        got = P.pipeline_comm_time(L.SCHED_1F1B, p, 1, m, (p - 1) * c, c, c, 0.5)
        assert got == pytest.approx(n * c, rel=1e-12)


def test_1f1b_uneven_boundaries_charge_the_slower_cycle():
    """p = 4, m = 8, boundaries 1 ms, 1 ms, 10 ms (route 12 ms, t_max 10 ms): the steady
    crossings, 2 x 7 - 2 floor(10/4) = 10, each at max(route/3, t_max x 4/6) = max(4, 6.667) ms;
    plus the fill and drain 2 x 12 ms."""
    got = P.pipeline_comm_time(L.SCHED_1F1B, 4, 1, 8, 12e-3, 10e-3, 10e-3, 1.0)
    assert got == pytest.approx(24e-3 + 10 * 10e-3 * 4 / 6, rel=1e-12)
    # every boundary alike: both terms are the one transfer time
    assert P.p2p_steady_transfer_1f1b(4, 3 * 2e-3, 2e-3) == pytest.approx(2e-3, rel=1e-15)
    assert P.p2p_steady_transfer_1f1b(1, 1.0, 1.0) == 0.0
    assert P.p2p_steady_crossings_1f1b(1, 8) == 0.0
    assert P.p2p_steady_crossings_1f1b(4, 1) == 0.0
