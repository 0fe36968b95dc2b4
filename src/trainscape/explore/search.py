"""Search without enumerating: evolutionary (single-objective GA and NSGA-II) and beam search.

Both work on *genomes* over the design space (:mod:`.genome`: value indices of the core axes,
a placement order, recompute, zero, dp_overlap), vectorized with NumPy. Every genome maps to a
global index of the space (core values repaired to the nearest valid row, orders
canonicalized), so every configuration a search proposes is valid by construction.

Both end the same way: the memory-deciding axes (pp, zero, recompute: a pipeline-free layout
only fits with ZeRO-3 or recomputation, so these move together) split the space into niches;
the best configurations seen so far are carried into every niche and the niches race by local
search within them (successive halving), and the winners are refined by local search over
every axis (single, paired and order-swap moves). Evolve gets its starting configurations from
a GA; beam from a random sample and its levels.

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
from .sweep import (Rows, SweepResult, evaluate_indices, objective_column, reduce_columns)

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
        self._key = np.zeros(0)
        self._step = np.zeros(0)
        self._mem = np.zeros(0)
        self._feas = np.zeros(0, dtype=bool)

    @property
    def count(self) -> int:
        return len(self.cache)

    @property
    def exhausted(self) -> bool:
        return self.budget is not None and self.count >= self.budget

    def __call__(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(key, step, mem, feasible)`` of each index (key: objective, minimized; +inf for
        an infeasible configuration)."""
        g = np.asarray(g, dtype=np.int64)
        new = [int(x) for x in dict.fromkeys(g.tolist()) if int(x) not in self.cache]
        if self.budget is not None:
            new = new[: max(0, self.budget - self.count)]
        if new:
            rows = evaluate_indices(self.space, self.blocks, np.array(new, np.int64),
                                    self.backend)
            base = len(self._key)
            for j, x in enumerate(new):
                self.cache[x] = base + j
            self.idx.append(rows.index)
            self.out.append(rows.out)
            feas = rows.out[L.OUT_FEASIBLE] == 1.0
            key = np.where(feas, self.sign * rows.out[self.obj_col], np.inf)
            self._key = np.concatenate([self._key, key])
            self._step = np.concatenate([self._step, rows.out[L.OUT_STEP_TIME_S]])
            self._mem = np.concatenate([self._mem, rows.out[L.OUT_MEMORY_GIB]])
            self._feas = np.concatenate([self._feas, feas])
        pos = np.array([self.cache.get(int(x), -1) for x in g], dtype=np.int64)
        known = pos >= 0
        key = np.full(g.size, np.inf)
        step = np.full(g.size, np.inf)
        mem = np.full(g.size, np.inf)
        feas = np.zeros(g.size, dtype=bool)
        key[known] = self._key[pos[known]]
        step[known] = self._step[pos[known]]
        mem[known] = self._mem[pos[known]]
        feas[known] = self._feas[pos[known]]
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
    after :data:`GA_SHARE` of the budget the ``width`` best niche leaders are refined by raced
    local search within their niche, then over every axis (as :func:`run_beam`'s last
    stage). With ``multi=True``: NSGA-II on (step time, memory per GPU) with
    constraint-domination (memory above HBM is the violation) for the whole budget. Stops
    after ``budget`` distinct evaluations (:func:`default_budget`) or when generations stop
    finding anything new."""
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
        gs = enc.from_index(seen[order])
        leaders: dict = {}
        for j in range(order.size):
            leaders.setdefault(tuple(int(gs[x, j]) for x in niche_genes), int(seen[order[j]]))
        beam = [({}, -1, np.inf)]
        if niche_genes:
            beam = _level(enc, ev, rng, beam, niche_genes, elite, None,
                          LEVEL_SHARE * (budget - ev.count), width, leaders)
        starts = [i for _p, i, _k in beam if i >= 0] or elite
        _polish(enc, ev, rng, starts, budget)
    extra = {"method": "evolve", "multi": multi, "seed": seed, "budget": budget,
             "generations": gens, "population": pop_n}
    return _result(scenario, space, ev, col, obj_col, sign, top, "evolve",
                   time.perf_counter() - t0, extra)


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
LEVEL_SHARE = 0.6
#: Share of the budget spent on the random sample whose best configurations complete the
#: first level's partial configurations, and how many of them.
SAMPLE_SHARE = 0.1
ELITE = 3
#: Share of the budget the single-objective GA spends before its memetic stage.
GA_SHARE = 0.1
#: Whether the level races' local searches try paired moves.
RACE_PAIRS = False


def run_beam(scenario, *, space=None, width: int = 8, budget: int | None = None,
             seed: int = 0, top: int = 10, objective: str = "step_time_s",
             completions: int | None = None, backend: str | None = None) -> SweepResult:
    """Beam search: decide the axes group by group (:data:`BEAM_LEVELS`), keeping the
    ``width`` best partial configurations. A partial configuration is scored by completing
    it with the kernel: its parent's best completion with the new values (repaired to
    validity, decided axes kept) and ``completions`` random completions of the undecided
    axes; its score and completion are the best of them (infeasible completions rank after
    feasible ones, by memory). After the last level, local search (:func:`genome.hill_climb`,
    single then paired axis moves) refines the beam's completions, best first, until the
    budget is spent or every one is a local optimum. Stops at ``budget`` distinct
    evaluations (:func:`default_budget`)."""
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
    level_budget = LEVEL_SHARE * budget / max(len(levels), 1)
    for genes in levels:
        if ev.exhausted:
            break
        beam = _level(enc, ev, rng, beam, genes, elite, completions, level_budget, width)
    # local search from the beam's completions over every axis, raced the same way
    _polish(enc, ev, rng, [i for _p, i, _k in beam if i >= 0], budget)
    extra = {"method": "beam", "seed": seed, "budget": budget, "width": width,
             "levels": [[enc.names[x] for x in genes] for genes in levels]}
    return _result(scenario, space, ev, col, obj_col, sign, top, "beam",
                   time.perf_counter() - t0, extra)


def _level(enc, ev, rng, beam, genes, elite, completions, level_budget, width,
           leaders: dict | None = None):
    """One level of beam search: every beam state times every combination of values of
    ``genes`` is a partial configuration, completed by its parent's completion (or, at the
    first level, by the ``elite`` configurations and the ``leaders`` entry of its values)
    with its values applied and by random completions; the partials then race
    (:func:`race`) by local search over their undecided axes. Returns the new beam."""
    from . import genome as G

    c0 = ev.count
    combos = np.array(list(itertools.product(*[range(int(enc.nv[x])) for x in genes])),
                      dtype=np.int64).reshape(-1, len(genes))
    n_children = len(beam) * combos.shape[0]
    c = completions if completions is not None else int(
        np.clip(0.25 * level_budget / max(n_children, 1) - 1, 1, 8))
    parts, cols, owner = [], [], []
    for decided, idx, _k in beam:
        # the parent's completion, or at the first level the best configurations seen so
        # far: good values of the undecided axes carry over between partial configurations
        par = [idx] if idx >= 0 else list(elite)
        for combo in combos:
            part = dict(decided)
            part.update({x: int(v) for x, v in zip(genes, combo)})
            extra = [] if leaders is None else [leaders[tuple(combo)]] if tuple(combo) in \
                leaders else []
            parents = enc.from_index(np.array(par + extra, dtype=np.int64))
            parts.append(part)
            cols.append(_completions(enc, part, c, rng, parents))
            owner.append(np.full(cols[-1][0].shape[1], len(parts) - 1))
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
    for j, part in enumerate(parts):
        sel = np.flatnonzero(owner == j)
        bst = sel[np.argmin(key[sel])]
        if np.isfinite(key[bst]):
            racers.append((part, G.Climb(enc, int(idx[bst]), float(key[bst]),
                                         fixed=tuple(part), pairs=RACE_PAIRS)))
    racers = race(ev, rng, racers, level_budget - (ev.count - c0), width)
    if not racers:
        return beam
    return [(part, cl.cur, cl.key) for part, cl in racers[:width]]


def _polish(enc, ev, rng, starts: list[int], budget: int) -> None:
    """Race local searches over every axis (single, paired and order-swap moves) from
    ``starts`` with what is left of ``budget``, down to one that runs to its local optimum."""
    from . import genome as G

    starts = list(dict.fromkeys(int(i) for i in starts))
    if not starts or ev.exhausted:
        return
    skeys = G.score(ev, np.array(starts, dtype=np.int64))
    racers = [(None, G.Climb(enc, i, float(k), pairs=True)) for i, k in zip(starts, skeys)]
    while racers and not ev.exhausted and not all(cl.done for _p, cl in racers):
        racers = race(ev, rng, racers, budget - ev.count, 1)


def race(ev, rng, racers: list, budget: float, keep: int) -> list:
    """Successive halving (Jamieson & Talwalkar 2016, "Non-stochastic best arm identification
    and hyperparameter optimization", Alg. 1) over local searches: each round every racer
    (``(tag, genome.Climb)``) advances by an equal share of the round's evaluations, then the
    better half goes on, until ``keep`` are left. Returns the racers left, best first."""
    racers = [r for r in racers]
    rounds = max(1, int(np.ceil(np.log2(max(len(racers), 1) / max(keep, 1)))) + 1)
    c0 = ev.count
    per_round = budget / rounds
    while racers and not ev.exhausted:
        share = max(1, int(per_round / len(racers)))
        for _tag, cl in racers:
            cl.advance(ev, rng, share)
        racers.sort(key=lambda t: (t[1].key, t[1].cur))
        if len(racers) <= keep or ev.count - c0 >= budget:
            break
        racers = racers[:max(keep, len(racers) // 2)]
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
