"""Search without enumerating: evolutionary (single-objective GA and NSGA-II) and beam search.

Both work on *genomes* over the design space (:mod:`.genome`: value indices of the core axes,
a placement order, recompute, zero, dp_overlap), vectorized with NumPy. Every genome maps to a
global index of the space (core values repaired to the nearest valid row, orders
canonicalized), so every configuration a search proposes is valid by construction.

Both end the same way: the memory-deciding axes (pp, zero, recompute: a pipeline-free layout
only fits with ZeRO-3 or recomputation, so these move together) split the space into niches;
the best configurations seen so far are carried into every niche and the niches race by
iterated local search within them (successive halving, :func:`race`). During the race the
niches exchange their best configurations (migration between neighbouring niches), every line
of the niche grid keeps its best niche through the first cuts (an optimum in an isolated
corner, such as pp = 1 with ZeRO-3, looks poor after a few evaluations), and niches are cut by
what their search is about to find (the additive model of :class:`genome.Climb`). The
winners are refined by local search over every axis (single, paired and order-swap moves).
Evolve gets its starting configurations from a GA; beam from a random sample and its levels.
A level race also stops when it stalls (:data:`STALL_MIN`), so a search may use less than
its budget.

Configurations are evaluated in batches by the fastest kernel backend; a cache keeps each
configuration's result, and the *evaluation count* is the number of distinct configurations
costed. Runs are reproducible for a seed (NumPy PCG64; no other randomness).

No library is used: the search loop is a few hundred lines of NumPy, and the cost is in the
kernel evaluations, which a library (pymoo, DEAP) would not make cheaper; their per-generation
overhead in Python is of the same order as this code's.

References: Deb et al. 2002, "A fast and elitist multiobjective genetic algorithm: NSGA-II"
(fast non-dominated sort, crowding distance, binary tournament with the crowded-comparison
operator, constraint-domination §VI); beam search as in Lowerre 1976 (keep the B best partial
solutions per level).
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from .. import layout as L
from .results import Rows, SweepResult, evaluate_indices, objective_column
from .sweep import reduce_columns

METHODS = ("evolve", "beam")


def default_budget(size: int) -> int:
    """Evaluations a search may spend by default: 1% of the space, at least 200 (or the whole
    space when it is smaller), at most 20,000."""
    return int(min(size, max(200, min(size // 100, 20_000))))


# ---------------------------------------------------------------------------------------------
# Genomes
# ---------------------------------------------------------------------------------------------


def sample_by_row(space, rng, n: int) -> np.ndarray:
    """``n`` indices drawn row-first: a core row uniformly, then a point under it. Rows with
    few distinct placements (e.g. pp = 1) are as likely as rows with many, which a uniform
    draw over indices would starve."""
    rows = rng.integers(0, space.core.shape[1], size=n)
    width = space.cum[rows + 1] - space.cum[rows]
    return space.cum[rows] + (rng.random(n) * width).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Evaluation with a cache
# ---------------------------------------------------------------------------------------------


class Evaluator:
    """Costs global indices in batches, once each; keeps every result for the report."""

    def __init__(self, space, blocks, obj_col: int, sign: float, backend=None, budget=None):
        self.space, self.blocks = space, blocks
        self.obj_col, self.sign = obj_col, sign
        self.backend = backend
        self.budget = budget
        self.cache: dict[int, int] = {}  # index -> position in the stores
        self.idx: list[np.ndarray] = []
        self.out: list[np.ndarray] = []
        self.hbm_gib = blocks[0][L.SYS_HBM_BYTES] / 2**30
        self._n = 0
        self.best_key, self.best_at = np.inf, 0  # best objective, evaluations when found
        self.min_infeasible_mem = np.inf  # least memory per GPU of a configuration that did not fit
        self.stall_from: int | None = None  # evaluations when the stall rule started
        self._key = np.zeros(64)
        self._step = np.zeros(64)
        self._raw = np.zeros(64)  # the objective (minimized) whether feasible or not
        self._mem = np.zeros(64)
        self._feas = np.zeros(64, dtype=bool)

    @property
    def count(self) -> int:
        return len(self.cache)

    @property
    def exhausted(self) -> bool:
        """Out of budget, or stalled: since the stall rule started (``stall_from``), the last
        ``STALL_MIN`` evaluations, and at least the last ``STALL_SHARE`` of them, found
        nothing better."""
        n = self.count
        if self.budget is not None and n >= self.budget:
            return True
        if self.stall_from is None:
            return False
        n -= self.stall_from
        since = n - max(self.best_at - self.stall_from, 0)
        return since >= max(STALL_MIN, STALL_SHARE * n)

    def raw(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Objective (minimized, feasible or not) and memory per GPU of evaluated indices."""
        p = self.positions(np.asarray(g, dtype=np.int64).reshape(-1))
        return self._raw[p], self._mem[p]

    def positions(self, g: np.ndarray) -> np.ndarray:
        """Position of each index in the stores, -1 where not evaluated (evaluates nothing)."""
        get = self.cache.get
        return np.fromiter((get(x, -1) for x in g.tolist()), dtype=np.int64, count=g.size)

    def _store(self, key, step, mem, feas, raw) -> None:
        n = key.size
        if self._n + n > self._key.size:
            cap = max(2 * self._key.size, self._n + n)
            for name in ("_key", "_step", "_mem", "_feas", "_raw"):
                old = getattr(self, name)
                grown = np.zeros(cap, dtype=old.dtype)
                grown[:self._n] = old[:self._n]
                setattr(self, name, grown)
        sl = slice(self._n, self._n + n)
        self._key[sl], self._step[sl], self._mem[sl], self._feas[sl] = key, step, mem, feas
        self._raw[sl] = raw
        self._n += n

    def __call__(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(key, step, mem, feasible)`` of each index (key: objective, minimized; +inf for
        an infeasible configuration); indices not evaluated yet are costed (within the
        budget; any beyond it read as unknown: +inf, infeasible)."""
        g = np.asarray(g, dtype=np.int64).reshape(-1)
        pos = self.positions(g)
        if (pos < 0).any():
            new = list(dict.fromkeys(g[pos < 0].tolist()))
            if self.budget is not None:
                new = new[: max(0, self.budget - self.count)]
            if new:
                rows = evaluate_indices(self.space, self.blocks, np.array(new, np.int64),
                                        self.backend)
                base = self._n
                for j, x in enumerate(new):
                    self.cache[x] = base + j
                self.idx.append(rows.index)
                self.out.append(rows.out)
                feas = rows.out[L.OUT_FEASIBLE] == 1.0
                key = np.where(feas, self.sign * rows.out[self.obj_col], np.inf)
                raw = self.sign * rows.out[self.obj_col]
                self._store(key, rows.out[L.OUT_STEP_TIME_S], rows.out[L.OUT_MEMORY_GIB], feas,
                            np.where(np.isfinite(raw), raw, np.inf))
                bad = rows.out[L.OUT_MEMORY_GIB][~feas]
                if bad.size:
                    self.min_infeasible_mem = min(self.min_infeasible_mem, float(bad.min()))
                if key.size and key.min() < self.best_key:
                    self.best_key, self.best_at = float(key.min()), self.count
                pos = self.positions(g)
        known = pos >= 0
        p = np.where(known, pos, 0)
        key = np.where(known, self._key[p], np.inf)
        step = np.where(known, self._step[p], np.inf)
        mem = np.where(known, self._mem[p], np.inf)
        feas = known & self._feas[p]
        return key, step, mem, feas

    def all_rows(self) -> Rows:
        if not self.idx:
            return Rows(np.zeros(0, np.int64), np.zeros((L.N_CFG, 0), np.int32),
                        np.zeros((L.N_OUT, 0)))
        idx = np.concatenate(self.idx)
        return Rows(idx, self.space.decode(idx), np.concatenate(self.out, axis=1))


def _result(scenario, space, ev: Evaluator, col, obj_col, sign, k, method, elapsed, extra):
    rows = ev.all_rows()
    red = reduce_columns(rows.index, rows.cfg, rows.out, obj_col, sign, k)
    pos = {int(x): j for j, x in enumerate(rows.index)}

    def pick(ids):
        ids = np.asarray(ids, np.int64)
        sel = np.array([pos[int(x)] for x in ids], np.int64)
        return Rows(ids, rows.cfg[:, sel] if sel.size else np.zeros((L.N_CFG, 0), np.int32),
                    rows.out[:, sel] if sel.size else np.zeros((L.N_OUT, 0)))

    have = red.order_idx >= 0
    oi, ok = red.order_idx[have], red.order_key[have]
    res = SweepResult(
        scenario_name=scenario.name, objective=col, space_size=space.size,
        top=pick(red.topk_idx), front=pick(red.front_idx), by_order=pick(oi[np.lexsort((oi, ok))]),
        evaluated=red.evaluated, feasible=red.ok, out_of_memory=red.oom, invalid=red.invalid,
        min_memory_gib=red.min_mem, elapsed_s=elapsed, backend=method, workers=1,
        complete=True, extra=extra,
    )
    return res


# ---------------------------------------------------------------------------------------------
# Evolutionary search
# ---------------------------------------------------------------------------------------------


def _nondominated_ranks(f1: np.ndarray, f2: np.ndarray, viol: np.ndarray) -> np.ndarray:
    """NSGA-II fronts with constraint-domination (Deb et al. 2002 §VI): a feasible point beats
    an infeasible one; two infeasible points compare by violation; feasible ones by Pareto
    dominance of (f1, f2). Returns the front number of each point (0 = best)."""
    n = f1.size
    feas = viol <= 0
    dom = np.zeros((n, n), dtype=bool)  # dom[i, j]: i dominates j
    ff = feas[:, None] & feas[None, :]
    le = (f1[:, None] <= f1[None, :]) & (f2[:, None] <= f2[None, :])
    lt = (f1[:, None] < f1[None, :]) | (f2[:, None] < f2[None, :])
    dom |= ff & le & lt
    dom |= feas[:, None] & ~feas[None, :]
    dom |= (~feas[:, None] & ~feas[None, :]) & (viol[:, None] < viol[None, :])
    rank = np.full(n, -1)
    count = dom.sum(axis=0)
    current = np.flatnonzero(count == 0)
    r = 0
    while current.size:
        rank[current] = r
        count = count - dom[current].sum(axis=0)
        count[rank >= 0] = -1
        current = np.flatnonzero(count == 0)
        r += 1
    return rank


def _crowding(f1: np.ndarray, f2: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Crowding distance within each front (Deb et al. 2002 §III-B)."""
    dist = np.zeros(f1.size)
    for r in np.unique(rank):
        members = np.flatnonzero(rank == r)
        if members.size <= 2:
            dist[members] = np.inf
            continue
        for f in (f1, f2):
            vals = f[members]
            order = members[np.argsort(vals, kind="stable")]
            dist[order[0]] = dist[order[-1]] = np.inf
            with np.errstate(invalid="ignore"):
                span = f[order[-1]] - f[order[0]]
                if span > 0 and np.isfinite(span):
                    dist[order[1:-1]] += (f[order[2:]] - f[order[:-2]]) / span
    return dist


def run_evolve(scenario, *, space=None, budget: int | None = None, seed: int = 0,
               top: int = 10, objective: str = "step_time_s", multi: bool = False,
               population: int | None = None, width: int = 8,
               backend: str | None = None) -> SweepResult:
    """Evolutionary search over the valid space, reproducible for ``seed``.

    A generational GA on genomes (:mod:`.genome`): binary tournaments, uniform crossover,
    one-axis mutation (a second axis with probability 0.3), repair to a valid row, elitist
    survival; every genetic operator runs on the whole generation with NumPy. With
    ``multi=False`` it is memetic: survival keeps the best configuration of every niche of
    the memory-deciding axes (pp, zero, recompute; "clearing", Pétrowski 1996, "A clearing
    procedure as a niching method for genetic algorithms") before the rest by objective, and
    after :data:`GA_SHARE` of the budget every niche, started from the GA's best
    configuration with the niche's values and the best already seen in it, races by local
    search within it (:func:`race`, as :func:`run_beam`'s level); the (at most ``width``)
    niches left are refined over every axis (as :func:`run_beam`'s last stage). With
    ``multi=True``: NSGA-II on (step time, memory per GPU) with constraint-domination (memory
    above HBM is the violation) for the whole budget. Stops after ``budget`` distinct
    evaluations (:func:`default_budget`), when generations stop finding anything new, or when
    the niche race stalls (:data:`STALL_MIN`)."""
    from ..space import design_space
    from ..spec.pack import pack
    from . import genome as G

    t0 = time.perf_counter()
    col, obj_col, sign = objective_column(objective)
    space = space or design_space(scenario)
    space.check_nonempty()
    blocks = pack(scenario)
    budget = int(budget or default_budget(space.size))
    rng = np.random.Generator(np.random.PCG64(seed))
    enc = G.Encoding(space)
    ev = Evaluator(space, blocks, obj_col, sign, backend, budget)
    pop_n = int(population or max(16, min(64, budget // 12)))
    niche_genes = [enc.names.index(a) for a in BEAM_LEVELS[0]
                   if a in enc.names and enc.nv[enc.names.index(a)] > 1]
    ga_budget = budget if multi else int(GA_SHARE * budget)

    pop = sample_by_row(space, rng, pop_n)
    key, step, mem, feas = ev(pop)
    skey = G.score(ev, pop)
    stale = 0
    gens = 0
    while ev.count < ga_budget and not ev.exhausted and stale < 8:
        gens += 1
        if multi:
            viol = np.where(feas, 0.0, np.maximum(mem - ev.hbm_gib, 1e-9))
            rank = _nondominated_ranks(step, mem, viol)
            crowd = _crowding(step, mem, rank)
            fitness = (rank, -crowd)
        else:
            fitness = (skey, mem * 0)
        parents = _tournament(rng, fitness, 2 * pop_n)
        pg = enc.from_index(pop)
        child = enc.crossover(pg[:, parents[0::2]], pg[:, parents[1::2]], rng)
        child, pin, redraw = enc.mutate(child, rng)
        child_idx = enc.to_index(child, rng, pin, redraw)
        before = ev.count
        ck, cs, cm, cf = ev(child_idx)
        csk = G.score(ev, child_idx)
        stale = stale + 1 if ev.count == before else 0
        allidx = np.concatenate([pop, child_idx])
        allk, alls, allm, allf, allsk = (np.concatenate(x) for x in (
            (key, ck), (step, cs), (mem, cm), (feas, cf), (skey, csk)))
        _, uniq = np.unique(allidx, return_index=True)
        uniq = np.sort(uniq)
        allidx, allk, alls, allm, allf, allsk = (x[uniq] for x in (
            allidx, allk, alls, allm, allf, allsk))
        if multi:
            viol = np.where(allf, 0.0, np.maximum(allm - ev.hbm_gib, 1e-9))
            rank = _nondominated_ranks(alls, allm, viol)
            crowd = _crowding(alls, allm, rank)
            order = np.lexsort((allidx, -crowd, rank))
        else:
            # clearing: the best of each niche first (at most half the population), then
            # the rest by objective
            order = np.lexsort((allidx, allm, allsk))
            niche = _niche_of(enc, allidx, niche_genes)
            _, first = np.unique(niche[order], return_index=True)
            leaders = order[np.sort(first)][: pop_n // 2]
            rest = order[~np.isin(order, leaders)]
            order = np.concatenate([leaders, rest])
        keep = order[:pop_n]
        pop, key, step, mem, feas, skey = (x[keep] for x in (
            allidx, allk, alls, allm, allf, allsk))
    if not multi and not ev.exhausted:
        # memetic stage: the best configurations so far, carried into every niche of the
        # memory-deciding axes (with that niche's own best), race by local search within
        # their niche; the winners are refined over every axis
        seen = np.array(list(ev.cache), dtype=np.int64)
        sk = G.score(ev, seen)
        order = np.lexsort((seen, sk))
        elite = list(dict.fromkeys(int(x) for x in seen[order]))[:ELITE]
        beam = [({}, -1, np.inf)]
        if niche_genes:
            beam = _level(enc, ev, rng, beam, niche_genes, elite, None,
                          LEVEL_SHARE * (budget - ev.count), width, n_elite=1)
        starts = [i for _p, i, _k in beam if i >= 0] or elite
        _polish(enc, ev, rng, starts, budget)
    extra = {"method": "evolve", "multi": multi, "seed": seed, "budget": budget,
             "generations": gens, "population": pop_n}
    return _result(scenario, space, ev, col, obj_col, sign, top, "evolve",
                   time.perf_counter() - t0, extra)


def batch_for(budget) -> int:
    """Moves a local search costs at once: one (first improvement, the most thrifty) when
    evaluations are scarce, up to 8 per kernel call when the budget is large (a call's fixed
    cost then dominates a single evaluation's)."""
    return int(np.clip((budget or 0) // BATCH_PER, 1, 8))


def _niche_of(enc, idx: np.ndarray, genes: list[int]) -> np.ndarray:
    """Niche number of each index: the mixed-radix value of its ``genes``."""
    g = enc.from_index(idx)
    out = np.zeros(idx.size, dtype=np.int64)
    for x in genes:
        out = out * int(enc.nv[x]) + g[x]
    return out


def _tournament(rng, fitness, n) -> np.ndarray:
    """Binary tournaments: the lexicographically smaller ``fitness`` tuple wins."""
    a = rng.integers(0, fitness[0].size, size=n)
    b = rng.integers(0, fitness[0].size, size=n)
    f0, f1 = fitness
    a_wins = (f0[a] < f0[b]) | ((f0[a] == f0[b]) & (f1[a] <= f1[b]))
    return np.where(a_wins, a, b)


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------

#: Groups of axes beam search decides, one group per level, all values of a group jointly:
#: first the axes that decide whether a layout fits in memory (pipeline depth, ZeRO stage,
#: recomputation: a pipeline-free layout only fits with ZeRO-3 or recomputation, so deciding
#: them apart would score such layouts as out of memory), then the inner parallel degrees.
#: The axes left undecided by the levels are settled by local search from the beam.
BEAM_LEVELS = (("pp", "zero", "recompute"),)
#: Share of the budget the levels may spend; local search from the beam gets the rest.
LEVEL_SHARE = 0.85
#: Share of the budget spent on the random sample whose best configurations complete the
#: first level's partial configurations, and how many of them. Four, not three: on the GPT-3
#: 175B benchmark space (tests/test_search.py, 1 % of 135,184 configurations) 40 beam seeds
#: miss the optimum by more than 1 % twice with three and never with four (the GA's memetic
#: stage, which takes as many, misses once either way).
SAMPLE_SHARE = 0.1
ELITE = 4
#: Share of the budget the single-objective GA spends before its memetic stage.
GA_SHARE = 0.1
#: Whether the level races' local searches try paired moves.
RACE_PAIRS = False
#: Genes redrawn by an iterated local search's kick, and restarts without a new evaluation
#: after which a niche counts as exhausted.
KICK = 3
STALE_RESTARTS = 8
#: Evaluations every niche gets in the first rounds of a race (successive halving shares the
#: rest), and how many niches of each of its lines (:func:`_lines`) survive those rounds'
#: cuts besides the better half: a niche whose optimum is isolated (pp = 1 with ZeRO-3, say)
#: often looks poor after a few evaluations, while its line's best carries it on. Two in the
#: first cut, not one: on the GPT-3 175B benchmark space (tests/test_search.py, 1 % of
#: 135,184 configurations), seeds 0-99 miss the optimum by more than 1 % with one 1 / 3 times
#: (beam / GA) and never with two; on the model before full recompute held its rebuilt layer
#: (stop 51), 0 / 5 times and never. Not a gain everywhere: over bench/sweep.py's four
#: scenarios (seeds 0-19, both methods) two miss 18 times in 160 and one 16 (noise).
GROUP_SHARES = (8, 16)
GROUP_KEEP = (2, 1)
#: Evaluations a niche dropped from a race gets when a migrant improved it (it comes back
#: when it is then better than the worst niche kept).
PROBE = 8
#: The stall rule of a level race: stop once the last ``STALL_MIN`` evaluations, and at least
#: the last ``STALL_SHARE`` of those since the race began, found nothing better.
STALL_MIN = 5000
STALL_SHARE = 0.5
#: Budget per move a local search costs at once (:func:`batch_for`).
BATCH_PER = 2000
#: Weight of the move statistics shared by every niche of a race, against a niche's own.
STATS_SHARED = 0.25


def run_beam(scenario, *, space=None, width: int = 8, budget: int | None = None,
             seed: int = 0, top: int = 10, objective: str = "step_time_s",
             completions: int | None = None, backend: str | None = None) -> SweepResult:
    """Beam search: decide the axes group by group (:data:`BEAM_LEVELS`), keeping the
    ``width`` best partial configurations. A partial configuration (a niche) starts from its
    parent's best completion with the new values (at the first level, the best of a random
    sample of :data:`SAMPLE_SHARE` of the budget), the best configurations already seen in it
    and ``completions`` random completions of the undecided axes (repaired to validity,
    decided axes kept); the niches then race by iterated local search over the undecided axes
    (:func:`race`; infeasible configurations rank after feasible ones, by memory), and the
    best of those the race leaves, at most ``width``, go on. After the last level, raced local search over every axis (single,
    paired and order-swap moves, :class:`genome.Climb`) refines the beam's completions until
    the budget is spent or every one is a local optimum. Stops at ``budget`` distinct
    evaluations (:func:`default_budget`), or earlier when a level race stalls
    (:data:`STALL_MIN`)."""
    from ..space import design_space
    from ..spec.pack import pack
    from . import genome as G

    t0 = time.perf_counter()
    col, obj_col, sign = objective_column(objective)
    space = space or design_space(scenario)
    space.check_nonempty()
    blocks = pack(scenario)
    budget = int(budget or default_budget(space.size))
    rng = np.random.Generator(np.random.PCG64(seed))
    enc = G.Encoding(space)
    ev = Evaluator(space, blocks, obj_col, sign, backend, budget)

    levels = []
    for group in BEAM_LEVELS:
        genes = [enc.names.index(a) for a in group
                 if a in enc.names and enc.nv[enc.names.index(a)] > 1]
        if genes:
            levels.append(genes)
    # beam states: (decided genes -> values, best completion index, its score)
    beam: list[tuple[dict, int, float]] = [({}, -1, np.inf)]
    n0 = int(max(16, SAMPLE_SHARE * budget))
    sample = sample_by_row(space, rng, n0)
    skey = G.score(ev, sample)
    order = np.lexsort((sample, skey))
    elite = list(dict.fromkeys(int(x) for x in sample[order]))[:ELITE]
    c_lv = ev.count
    for li, genes in enumerate(levels):
        if ev.exhausted:
            break
        # the levels share LEVEL_SHARE of the budget equally; what one leaves flows on
        level_budget = LEVEL_SHARE * budget * (li + 1) / len(levels) - (ev.count - c_lv)
        beam = _level(enc, ev, rng, beam, genes, elite, completions, level_budget, width,
                      n_elite=ELITE)
    # local search from the beam's completions over every axis, raced the same way
    _polish(enc, ev, rng, [i for _p, i, _k in beam if i >= 0], budget)
    extra = {"method": "beam", "seed": seed, "budget": budget, "width": width,
             "levels": [[enc.names[x] for x in genes] for genes in levels]}
    return _result(scenario, space, ev, col, obj_col, sign, top, "beam",
                   time.perf_counter() - t0, extra)


def _level(enc, ev, rng, beam, genes, elite, completions, level_budget, width,
           n_elite: int):
    """One level of beam search: every beam state times every combination of values of
    ``genes`` is a partial configuration (a *niche*), completed by its parent's completion (or,
    at the first level, by the ``n_elite`` best ``elite`` configurations), by the best
    configurations seen so far in the niche and in each of its lines (one niche gene left
    free), all with the niche's values applied, and by ``completions`` random completions;
    the niches then race (:func:`race`) by local search over their undecided axes. Returns
    the new beam."""
    from . import genome as G

    c0 = ev.count
    combos = [tuple(int(v) for v in c)
              for c in itertools.product(*[range(int(enc.nv[x])) for x in genes])]
    c = completions or 0
    shared = np.zeros((4, enc.n_classes))  # move statistics shared by every niche
    group_stats: dict = {}  # move statistics of the niches with the same first niche gene
    # the best configuration evaluated so far in each partial configuration
    seen = np.array(list(ev.cache), dtype=np.int64)
    seen_g = enc.from_index(seen) if seen.size else np.zeros((enc.n_genes, 0), np.int64)
    seen_k = G.score(ev, seen) if seen.size else np.zeros(0)

    def leader_of(part):
        m = np.ones(seen.size, dtype=bool)
        for x, v in part.items():
            m &= seen_g[x] == v
        if not m.any():
            return []
        j = np.flatnonzero(m)
        return [int(seen[j[np.lexsort((seen[j], seen_k[j]))[0]]])]

    cols, owner, parts = [], [], []
    for decided, idx, _k in beam:
        # the parent's completion, or at the first level the best configurations seen so
        # far: good values of the undecided axes carry over between partial configurations
        par = [idx] if idx >= 0 else list(elite)[:n_elite]
        for combo in combos:
            part = dict(decided)
            part.update({x: v for x, v in zip(genes, combo)})
            lead = leader_of(part)
            if len(part) > 1:
                for x in part:
                    lead += leader_of({y: v for y, v in part.items() if y != x})
            parents = enc.from_index(np.array(par + lead, dtype=np.int64))
            cols.append(_completions(enc, part, c, rng, parents))
            owner.append(np.full(cols[-1][0].shape[1], len(parts)))
            parts.append(part)
    g = np.concatenate([x[0] for x in cols], axis=1)
    pin = np.concatenate([x[1] for x in cols], axis=1)
    owner = np.concatenate(owner)
    idx = enc.to_index(g, rng, pin)
    got = enc.from_index(idx)
    # a completion counts for its partial configuration only when the repair kept it
    match = np.ones(idx.size, dtype=bool)
    for j, part in enumerate(parts):
        sel = owner == j
        for x, v in part.items():
            match[sel] &= got[x, sel] == v
    key = np.where(match, G.score(ev, idx), np.inf)
    racers = []
    batch = batch_for(ev.budget)
    for j, part in enumerate(parts):
        sel = np.flatnonzero(owner == j)
        bst = sel[np.argmin(key[sel])]
        if np.isfinite(key[bst]):
            gst = group_stats.setdefault(part.get(genes[0], -1), np.zeros((4, enc.n_classes)))
            racers.append((part, Niche(enc, part, int(idx[bst]), float(key[bst]),
                                       pairs=RACE_PAIRS, stats=shared, batch=batch,
                                       group_stats=gst)))
    ev.stall_from = ev.count
    racers = race(ev, rng, racers, level_budget - (ev.count - c0), group=_lines, enc=enc)
    if not racers:
        return beam
    return [(part, cl.best, cl.key) for part, cl in racers[:width]]


def _polish(enc, ev, rng, starts: list[int], budget: int) -> None:
    """Race local searches over every axis (single, paired and order-swap moves) from
    ``starts`` with what is left of ``budget``, down to one that runs to its local optimum."""
    from . import genome as G

    starts = list(dict.fromkeys(int(i) for i in starts))
    if not starts or ev.exhausted:
        return
    skeys = G.score(ev, np.array(starts, dtype=np.int64))
    racers = [(None, Niche(enc, {}, i, float(k), pairs=True, batch=batch_for(ev.budget)))
               for i, k in zip(starts, skeys)]
    while racers and not ev.exhausted and not all(cl.exhausted for _p, cl in racers):
        racers = race(ev, rng, racers, budget - ev.count)


class Niche:
    """Iterated local search (Lourenço, Martin & Stützle 2003, "Iterated local search") in the
    niche of the configurations whose genes ``part`` (gene -> value) are fixed: a
    :class:`genome.Climb` from ``start``; whenever it reaches a local optimum, a new climb
    starts from the niche's best configuration with ``KICK`` other genes redrawn (repaired
    within the niche), or from a random completion of the niche when that fails.
    ``exhausted`` once restarts stop finding configurations not yet evaluated.

    Its climbs order their moves by move statistics (:class:`genome.Climb`): the niche's own,
    ``stats`` (shared by every niche of a race, weight :data:`STATS_SHARED`) and
    ``group_stats`` (shared by the niches of one value of the first niche gene; they count
    only for the neutral genes a climb skips)."""

    def __init__(self, enc, part: dict, start: int, key: float, pairs: bool = False,
                 stats=None, batch: int = 1, group_stats=None):
        from . import genome as G

        own = np.zeros((4, enc.n_classes))
        self.stats = [(own, 1.0)] + ([] if stats is None else [(stats, STATS_SHARED)])
        if group_stats is not None:
            self.stats.append((group_stats, 0.0, True))
        self.enc, self.part, self.fixed = enc, dict(part), tuple(part)
        self.batch = batch
        self.best, self.key = int(start), float(key)
        self.pairs = pairs
        self.climb = G.Climb(enc, self.best, self.key, fixed=self.fixed, pairs=pairs,
                             stats=self.stats, batch=batch)
        self.climbs = 1
        self.offered: set = set()  # migrants offered to this niche
        self.stale = 0
        self.exhausted = False

    def advance(self, ev, rng, evaluations: int) -> None:
        """Spend about ``evaluations`` new evaluations."""
        c0 = ev.count
        while not self.exhausted and not ev.exhausted and ev.count - c0 < evaluations:
            if self.climb.done:
                self._restart(ev, rng)
                continue
            self.climb.advance(ev, rng, evaluations - (ev.count - c0))
            if self.climb.key < self.key or (self.climb.key == self.key
                                             and self.climb.cur < self.best):
                self.best, self.key = self.climb.cur, self.climb.key

    def promise(self, ev) -> float:
        """The niche's best key, or the better value its local search's additive model
        predicts for a move it has queued."""
        return min(self.key, self.climb.promise(ev))

    def adopt(self, idx: int, key: float) -> None:
        """Restart the niche's local search from ``idx`` (a configuration of the niche, better
        than its best)."""
        from . import genome as G

        self.best, self.key = int(idx), float(key)
        self.climb = G.Climb(self.enc, self.best, self.key, fixed=self.fixed, pairs=self.pairs,
                             stats=self.stats, batch=self.batch)
        self.climbs += 1
        self.stale = 0
        self.exhausted = False

    def _restart(self, ev, rng) -> None:
        from . import genome as G

        enc = self.enc
        c0 = ev.count
        g = enc.from_index(np.array([self.best]))
        movable = [x for x in range(enc.n_genes) if enc.nv[x] > 1 and x not in self.fixed]
        start = -1
        if movable and self.climbs % 2 == 1:
            pick = rng.choice(len(movable), size=min(KICK, len(movable)), replace=False)
            pin = np.zeros((enc.k, 1), dtype=bool)
            for x in self.fixed:
                if x < enc.k:
                    pin[x] = True
            for j in pick:
                x = movable[j]
                g[x, 0] = (g[x, 0] + 1 + rng.integers(0, int(enc.nv[x]) - 1)) % int(enc.nv[x])
                if x < enc.k:
                    pin[x] = True
            idx = int(enc.to_index(g, rng, pin)[0])
            got = enc.from_index(np.array([idx]))[:, 0]
            if all(got[x] == v for x, v in self.part.items()):
                start = idx
        if start < 0:
            cg, pin = _completions(enc, self.part, 4, rng)
            idx = enc.to_index(cg, rng, pin)
            got = enc.from_index(idx)
            ok = np.ones(idx.size, dtype=bool)
            for x, v in self.part.items():
                ok &= got[x] == v
            start = int(idx[ok][0]) if ok.any() else self.best
        key = float(G.score(ev, np.array([start]))[0])
        self.climb = G.Climb(enc, start, key, fixed=self.fixed, pairs=self.pairs,
                             stats=self.stats, batch=self.batch)
        self.climbs += 1
        if key < self.key:
            self.best, self.key = start, key
        self.stale = self.stale + 1 if ev.count == c0 else 0
        if self.stale >= STALE_RESTARTS:
            self.exhausted = True


def _lines(tag: dict) -> list:
    """The lines of a niche in the grid of niche gene values: one per niche gene, the niches
    that share every other niche gene's value."""
    items = sorted(tag.items())
    return [(x,) + tuple(kv for kv in items if kv[0] != x) for x, _v in items]


def _drop_twins(enc, ev, racers: list) -> list:
    """Of niches whose best configurations differ only in the niche genes and cost the same
    time, keep the one that needs the least memory per GPU (the others are dominated in time
    and memory: ZeRO-1 and ZeRO-2 layouts often cost the same, for instance)."""
    from .genome import INFEASIBLE

    if len(racers) < 2:
        return racers
    best = np.array([cl.best for _t, cl in racers], dtype=np.int64)
    g = enc.from_index(best)
    mem = ev(best)[2]
    seen: dict = {}
    out = []
    for j, (tag, cl) in enumerate(racers):
        if cl.key >= INFEASIBLE:
            out.append((tag, cl))
            continue
        rest = tuple(int(g[x, j]) for x in range(enc.n_genes) if x not in tag)
        k = (tuple(sorted(tag)), rest, cl.key)
        if k in seen:
            i = seen[k]
            if mem[j] < mem[i]:
                out = [t for t in out if t[1] is not racers[i][1]] + [(tag, cl)]
                seen[k] = j
            continue
        seen[k] = j
        out.append((tag, cl))
    return sorted(out, key=lambda t: (t[1].key, t[1].best))


def migrate(enc, ev, rng, racers: list) -> list:
    """Migration between niches (the island model, Whitley, Rana & Heckendorn 1999, "The
    island model genetic algorithm"): every niche receives the best configuration of the best
    neighbouring niche (one niche gene changed, or a sub- or super-niche) that is better than
    its own and not offered before, with its own niche genes applied; a migrant better than
    the niche's best becomes its new start. Good values of the other axes are often shared
    along a niche gene (ZeRO-3 layouts at any pipeline depth), which is what brings a lone
    niche's optimum into reach. Returns the racers improved."""
    from . import genome as G

    tags = [t for t, _c in racers]
    items = list(racers)
    offers = []
    for j, (tag, cl) in enumerate(items):
        best_src = None
        for i, (t2, c2) in enumerate(items):
            if i == j or c2.key >= cl.key or c2.key >= G.INFEASIBLE:
                continue
            if set(tag) == set(t2):
                near = sum(1 for x in tag if tag[x] != t2[x]) == 1
            else:  # a niche and one of its sub- or super-niches
                near = all(tag[x] == t2[x] for x in set(tag) & set(t2))
            if not near or (c2.best in cl.offered):
                continue
            if best_src is None or (c2.key, c2.best) < (items[best_src][1].key,
                                                         items[best_src][1].best):
                best_src = i
        if best_src is not None:
            src = items[best_src][1].best
            cl.offered.add(src)
            offers.append((j, src))
    if not offers:
        return []
    g = enc.from_index(np.array([src for _j, src in offers], dtype=np.int64))
    pin = np.zeros((enc.k, len(offers)), dtype=bool)
    for n, (j, _src) in enumerate(offers):
        for x, v in tags[j].items():
            g[x, n] = v
            if x < enc.k:
                pin[x, n] = True
    idx = enc.to_index(g, rng, pin)
    got = enc.from_index(idx)
    keys = G.score(ev, idx)
    better = []
    for n, (j, _src) in enumerate(offers):
        cl = items[j][1]
        if all(got[x, n] == v for x, v in tags[j].items()) and keys[n] < cl.key:
            cl.adopt(int(idx[n]), float(keys[n]))
            better.append(items[j])
    return better


def race(ev, rng, racers: list, budget: float, group=None, enc=None) -> list:
    """Successive halving (Jamieson & Talwalkar 2016, "Non-stochastic best arm identification
    and hyperparameter optimization", Alg. 1) over local searches: each round every racer
    (``(tag, Niche)``) advances by an equal share of the round's evaluations, then the better
    half goes on (ranked by :meth:`Niche.promise`), down to one that spends what is left.

    With ``group`` (tag -> its strata, :func:`_lines`) the first rounds give every racer a
    fixed :data:`GROUP_SHARES` and their cuts also keep the :data:`GROUP_KEEP` best racers of
    every stratum. With ``enc`` (niches of a level) the niches exchange migrants after every
    round (:func:`migrate`), a dropped niche a migrant improved is probed and comes back when
    it is then better than the worst one kept, and of niches whose best configurations are
    twins (:func:`_drop_twins`) only the leanest goes on. Returns the racers left, best
    first."""
    from .genome import INFEASIBLE

    everyone = list(racers)
    rounds = max(1, int(np.ceil(np.log2(max(len(racers), 1)))) + 1)
    c0 = ev.count
    r = 0
    while racers and not ev.exhausted:
        left = budget - (ev.count - c0)
        if group is not None and r < len(GROUP_SHARES):
            share = min(GROUP_SHARES[r], max(1, int(left / len(racers))))
        else:
            share = max(1, int(left / max(rounds - r, 1) / len(racers)))
        for _tag, cl in racers:
            cl.advance(ev, rng, int(min(share, max(1, budget - (ev.count - c0)))))
        if enc is not None:
            improved = migrate(enc, ev, rng, everyone)
            for t in improved:
                if not any(t is u for u in racers) and not ev.exhausted:
                    t[1].advance(ev, rng, PROBE)
            if r > 0:
                worst = max(t[1].key for t in racers)
                racers = racers + [t for t in everyone if t[1].key < worst and
                                   not any(t is u for u in racers)]
        # the cut goes by what a niche's search is about to cost: its best key, or the
        # better value the additive model predicts for a pair it has queued
        racers.sort(key=lambda t: (t[1].promise(ev), t[1].key, t[1].best))
        if ev.count - c0 >= budget or all(cl.exhausted for _t, cl in racers):
            break
        n_keep = max(1, len(racers) // 2)
        cut = racers[:n_keep]
        if group is not None and r < len(GROUP_KEEP):
            seen: dict = {}
            for t in racers:
                take = False
                for gid in group(t[0]):
                    seen[gid] = seen.get(gid, 0) + 1
                    take |= seen[gid] <= GROUP_KEEP[r]
                if take and t[1].key < INFEASIBLE and not any(t is u for u in cut):
                    cut.append(t)
            rounds += 1 if len(cut) > n_keep else 0
        racers = sorted(cut, key=lambda t: (t[1].key, t[1].best))
        if enc is not None:
            racers = _drop_twins(enc, ev, racers)
        r += 1
    return racers


def _completions(enc, part: dict, n: int, rng, parent=None) -> tuple[np.ndarray, np.ndarray]:
    """Genomes completing the partial assignment ``part`` (gene -> value index): the parent
    genomes (columns) with ``part`` applied (when given) and ``n`` uniformly random ones; with the pin
    mask of the decided core genes."""
    g = np.stack([rng.integers(0, int(v), size=n) for v in enc.nv])
    if parent is not None:
        g = np.concatenate([parent.reshape(enc.n_genes, -1), g], axis=1)
    pin = np.zeros((enc.k, g.shape[1]), dtype=bool)
    for x, v in part.items():
        g[x] = v
        if x < enc.k:
            pin[x] = True
    return g, pin


def run_search(scenario, method: str = "evolve", **kw) -> SweepResult:
    """``method`` ``"evolve"`` or ``"beam"``; keyword arguments as :func:`run_evolve` /
    :func:`run_beam`."""
    from ..spec.errors import ScenarioError

    if method == "evolve":
        kw.pop("width", None)
        return run_evolve(scenario, **kw)
    if method == "beam":
        kw.pop("multi", None)
        kw.pop("population", None)
        return run_beam(scenario, **kw)
    raise ScenarioError.at("--method", "unknown search method", method, ", ".join(METHODS))
