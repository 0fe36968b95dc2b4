"""Search without enumerating: evolutionary (single-objective GA and NSGA-II) and beam search.

Both work on *genomes* over the design space (:mod:`trainscape.space.design`): a core row
(the validity-deciding axes tp cp pp dp ep mbs vpp schedule sp tp_overlap, as one valid row of
the space's table), a placement order (a permutation, canonicalized against the row's degree
mask) and the free axes (recompute, zero, dp_overlap). Every genome maps to a global index
of the space, so every configuration a search proposes is valid by construction:

* mutation changes one axis value and *repairs* the core part to the nearest valid row (the
  fewest other axes changed, ties broken by the seeded generator); an order outside the
  listed orders is replaced by an allowed one;
* crossover mixes the axis values of two parents gene by gene, then repairs.

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

import time
from dataclasses import dataclass

import numpy as np

from .. import layout as L
from ..space import design as D
from ..space import orders as O
from .sweep import (Rows, SweepResult, evaluate_indices, objective_column, reduce_columns)

METHODS = ("evolve", "beam")


def default_budget(size: int) -> int:
    """Evaluations a search may spend by default: 1% of the space, at least 200 (or the whole
    space when it is smaller), at most 20,000."""
    return int(min(size, max(200, min(size // 100, 20_000))))


# ---------------------------------------------------------------------------------------------
# Genomes
# ---------------------------------------------------------------------------------------------


class Genes:
    """Encoding of the space for search: per core row the value index of each core axis."""

    def __init__(self, space: D.DesignSpace):
        self.space = space
        self.n_rows = space.core.shape[1]
        # value index of every core field of every row
        self.vi = np.zeros((D.N_CORE, self.n_rows), dtype=np.int32)
        self.n_values = []
        for f, name in enumerate(D.CORE_FIELDS):
            vals = np.unique(space.core[f])
            self.vi[f] = np.searchsorted(vals, space.core[f])
            self.n_values.append(len(vals))
        # searchable core axes: more than one value among the valid rows; dp only when an axis
        self.axes = [f for f in range(D.N_CORE) if self.n_values[f] > 1
                     and not (D.CORE_FIELDS[f] == "dp" and space.axes["dp"] is None)]
        self.lookup = {tuple(self.vi[self.axes, r]): r for r in range(self.n_rows)}
        self.nr, self.nz, self.nd = len(space.recompute), len(space.zero), len(space.dp_overlap)

    # genome: (row, order_perm_index, r, z, d) as an int64 vector of 5
    def from_index(self, g: np.ndarray) -> np.ndarray:
        sp = self.space
        g = np.asarray(g, dtype=np.int64)
        rows = np.searchsorted(sp.cum, g, side="right") - 1
        rem = g - sp.cum[rows]
        d = rem % self.nd
        rem //= self.nd
        z = rem % self.nz
        rem //= self.nz
        r = rem % self.nr
        slot = rem // self.nr
        orders = sp.order_flat[sp.order_off[sp.mask[rows]] + slot]
        return np.stack([rows, orders, r, z, d]).astype(np.int64)

    def to_index(self, gen: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Global indices of genomes (orders canonicalized, repaired when not allowed)."""
        sp = self.space
        out = np.empty(gen.shape[1], dtype=np.int64)
        for j in range(gen.shape[1]):
            row, order, r, z, d = (int(x) for x in gen[:, j])
            m = int(sp.mask[row])
            off, cnt = int(sp.order_off[m]), int(sp.order_cnt[m])
            allowed = sp.order_flat[off:off + cnt]
            o = O.canonical_order(order, m)
            k = int(np.searchsorted(allowed, o))
            if k >= cnt or allowed[k] != o:
                k = int(rng.integers(cnt))
            local = ((k * self.nr + r) * self.nz + z) * self.nd + d
            out[j] = int(sp.cum[row]) + local
        return out

    def repair_row(self, target: np.ndarray, pinned: list[int], rng) -> int:
        """The valid row nearest to the axis-value vector ``target`` (over ``self.axes``):
        exact when it exists, else the fewest differing axes among rows that keep the
        ``pinned`` axes (positions in ``self.axes``), ties at random."""
        row = self.lookup.get(tuple(int(t) for t in target))
        if row is not None:
            return row
        vi = self.vi[self.axes]
        cand = np.ones(self.n_rows, dtype=bool)
        for p in pinned:
            sel = cand & (vi[p] == target[p])
            if sel.any():
                cand = sel
        idx = np.flatnonzero(cand)
        dist = (vi[:, idx] != target[:, None]).sum(axis=0)
        best = idx[dist == dist.min()]
        return int(best[rng.integers(best.size)])


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
               population: int | None = None, backend: str | None = None) -> SweepResult:
    """Evolutionary search over the valid space, reproducible for ``seed``.

    Single-objective (``multi=False``): a steady generational GA with binary tournaments on
    the objective, uniform crossover, one-axis mutation with repair, and elitism. With
    ``multi=True``: NSGA-II on (step time, memory per GPU) with constraint-domination
    (memory above HBM is the violation). Stops after ``budget`` distinct evaluations
    (:func:`default_budget`) or when a generation finds nothing new several times in a row.
    """
    from ..space import design_space
    from ..spec.pack import pack

    t0 = time.perf_counter()
    col, obj_col, sign = objective_column(objective)
    space = space or design_space(scenario)
    space.check_nonempty()
    blocks = pack(scenario)
    budget = int(budget or default_budget(space.size))
    rng = np.random.Generator(np.random.PCG64(seed))
    genes = Genes(space)
    ev = Evaluator(space, blocks, obj_col, sign, backend, budget)
    pop_n = int(population or max(16, min(64, budget // 12)))

    pop = sample_by_row(space, rng, pop_n)
    key, step, mem, feas = ev(pop)
    stale = 0
    gens = 0
    while not ev.exhausted and stale < 8:
        gens += 1
        if multi:
            viol = np.where(feas, 0.0, np.maximum(mem - ev.hbm_gib, 1e-9))
            rank = _nondominated_ranks(step, mem, viol)
            crowd = _crowding(step, mem, rank)
            fitness = (rank, -crowd)
        else:
            fitness = (key, mem * 0)
        parents = _tournament(rng, fitness, 2 * pop_n)
        pg = genes.from_index(pop)
        children = _breed(genes, pg, parents, rng)
        child_idx = genes.to_index(children, rng)
        before = ev.count
        ck, cs, cm, cf = ev(child_idx)
        stale = stale + 1 if ev.count == before else 0
        # survivors: the best pop_n of parents + children (elitist, NSGA-II style)
        allidx = np.concatenate([pop, child_idx])
        allk, alls, allm, allf = (np.concatenate(x) for x in ((key, ck), (step, cs),
                                                             (mem, cm), (feas, cf)))
        _, uniq = np.unique(allidx, return_index=True)
        uniq = np.sort(uniq)
        allidx, allk, alls, allm, allf = (x[uniq] for x in (allidx, allk, alls, allm, allf))
        if multi:
            viol = np.where(allf, 0.0, np.maximum(allm - ev.hbm_gib, 1e-9))
            rank = _nondominated_ranks(alls, allm, viol)
            crowd = _crowding(alls, allm, rank)
            order = np.lexsort((allidx, -crowd, rank))
        else:
            order = np.lexsort((allidx, allm, allk))
        keep = order[:pop_n]
        pop, key, step, mem, feas = (x[keep] for x in (allidx, allk, alls, allm, allf))
    extra = {"method": "evolve", "multi": multi, "seed": seed, "budget": budget,
             "generations": gens, "population": pop_n}
    return _result(scenario, space, ev, col, obj_col, sign, top, "evolve",
                   time.perf_counter() - t0, extra)


def _tournament(rng, fitness, n) -> np.ndarray:
    """Binary tournaments: the lexicographically smaller ``fitness`` tuple wins."""
    a = rng.integers(0, fitness[0].size, size=n)
    b = rng.integers(0, fitness[0].size, size=n)
    f0, f1 = fitness
    a_wins = (f0[a] < f0[b]) | ((f0[a] == f0[b]) & (f1[a] <= f1[b]))
    return np.where(a_wins, a, b)


def _breed(genes: Genes, pg: np.ndarray, parents: np.ndarray, rng) -> np.ndarray:
    """Children genomes: uniform crossover of parent pairs (p=0.9), then one-axis mutation
    (p=0.9 per child, plus 0.3 for a second axis), with repair of the core row."""
    n = parents.size // 2
    out = np.empty((5, n), dtype=np.int64)
    axes = genes.axes
    n_core_axes = len(axes)
    for j in range(n):
        a, b = pg[:, parents[2 * j]], pg[:, parents[2 * j + 1]]
        va = genes.vi[axes, a[0]]
        vb = genes.vi[axes, b[0]]
        if rng.random() < 0.9:
            take_b = rng.random(n_core_axes + 4) < 0.5
        else:
            take_b = np.zeros(n_core_axes + 4, dtype=bool)
        target = np.where(take_b[:n_core_axes], vb, va)
        free = np.where(take_b[n_core_axes:], b[1:], a[1:])
        pinned: list[int] = []
        n_mut = 1 + (rng.random() < 0.3)
        if rng.random() < 0.9:
            for _ in range(n_mut):
                gene = int(rng.integers(n_core_axes + 4))
                if gene < n_core_axes:
                    nv = genes.n_values[axes[gene]]
                    target[gene] = (target[gene] + 1 + rng.integers(nv - 1)) % nv
                    pinned.append(gene)
                else:
                    free = _mutate_free(genes, free, gene - n_core_axes, rng)
        row = genes.repair_row(target, pinned, rng) if n_core_axes else int(a[0])
        out[0, j] = row
        out[1:, j] = free
    return out


def _mutate_free(genes: Genes, free: np.ndarray, which: int, rng) -> np.ndarray:
    free = free.copy()
    if which == 0:  # order: swap two dimensions (neighbouring or not)
        perm = list(O.perm_of(int(free[0])))
        i, j = rng.choice(L.N_DIMS, size=2, replace=False)
        perm[i], perm[j] = perm[j], perm[i]
        free[0] = L.order_index(tuple(perm))
    else:
        n = (genes.nr, genes.nz, genes.nd)[which - 1]
        if n > 1:
            free[which] = (free[which] + 1 + rng.integers(n - 1)) % n
    return free


# ---------------------------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------------------------

#: Order in which beam search decides the axes: the degrees that shape the placement first
#: (pipeline and tensor parallel, then context and expert), then the placement order, then
#: the schedule and the memory/overlap knobs.
BEAM_AXES = ("pp", "tp", "cp", "ep", "dp", "order", "schedule", "vpp", "mbs", "recompute",
             "zero", "sp", "tp_overlap", "dp_overlap")


@dataclass
class _Beam:
    index: int
    key: float


def run_beam(scenario, *, space=None, width: int = 16, budget: int | None = None,
             seed: int = 0, top: int = 10, objective: str = "step_time_s",
             completions: int = 2, passes: int = 50, backend: str | None = None) -> SweepResult:
    """Beam search: decide the axes one at a time (:data:`BEAM_AXES`), keeping the ``width``
    best partial configurations. A partial configuration is scored by completing it with the
    kernel: its parent's best completion with the new axis value (repaired to validity), and
    ``completions`` random variations of the still-undecided axes; the best of them is its
    score and its completion. Passes over the axes repeat (at most ``passes``), the beam restarted from fresh
    random seeds around its best when a pass brings no improvement. Stops at
    ``budget`` distinct evaluations."""
    from ..space import design_space
    from ..spec.pack import pack

    t0 = time.perf_counter()
    col, obj_col, sign = objective_column(objective)
    space = space or design_space(scenario)
    space.check_nonempty()
    blocks = pack(scenario)
    budget = int(budget or default_budget(space.size))
    rng = np.random.Generator(np.random.PCG64(seed))
    genes = Genes(space)
    ev = Evaluator(space, blocks, obj_col, sign, backend, budget)

    core_pos = {D.CORE_FIELDS[f]: i for i, f in enumerate(genes.axes)}
    levels = [a for a in BEAM_AXES if a in core_pos or _free_gene(a, genes) is not None]

    # seeds: the best of a random sample
    n0 = int(min(max(4 * width, 32), max(budget // 8, width)))
    seeds = sample_by_row(space, rng, n0)
    key, *_ = ev(seeds)
    order = np.lexsort((seeds, key))
    beam = _dedupe([_Beam(int(seeds[i]), float(key[i])) for i in order])[:width]

    for _ in range(passes):
        before = (beam[0].key, beam[0].index)
        count_before = ev.count
        decided: list[str] = []
        for axis in levels:
            if ev.exhausted:
                break
            cands: list[int] = []
            for st in beam:
                gen = genes.from_index(np.array([st.index]))[:, 0]
                for child in _axis_children(genes, gen, axis, core_pos, decided, rng):
                    cands.append(child)
                    for _c in range(completions):
                        cands.append(_vary_undecided(genes, child, axis, decided, core_pos,
                                                     rng))
            cand = np.array(cands, dtype=np.int64)
            ck, *_ = ev(cand)
            pool = [_Beam(int(i), float(k)) for i, k in zip(cand, ck)] + beam
            pool.sort(key=lambda b: (b.key, b.index))
            beam = _dedupe(pool)[:width]
            decided.append(axis)
        if ev.exhausted or ev.count == count_before:
            break
        if (beam[0].key, beam[0].index) == before:
            # no progress this pass: restart the rest of the beam from fresh random seeds
            seeds = sample_by_row(space, rng, n0)
            key, *_ = ev(seeds)
            order = np.lexsort((seeds, key))
            fresh = [_Beam(int(seeds[i]), float(key[i])) for i in order]
            beam = _dedupe(beam[:1] + fresh)[:width]
    extra = {"method": "beam", "seed": seed, "budget": budget, "width": width,
             "levels": levels, "passes": passes}
    return _result(scenario, space, ev, col, obj_col, sign, top, "beam",
                   time.perf_counter() - t0, extra)


def _dedupe(items: list[_Beam]) -> list[_Beam]:
    seen, out = set(), []
    for b in items:
        if b.index not in seen:
            seen.add(b.index)
            out.append(b)
    return out


def _free_gene(axis: str, genes: Genes) -> int | None:
    n = {"order": 2, "recompute": genes.nr, "zero": genes.nz, "dp_overlap": genes.nd}
    if axis not in n or n[axis] < 2:
        return None
    return {"order": 1, "recompute": 2, "zero": 3, "dp_overlap": 4}[axis]


def _axis_children(genes: Genes, gen, axis, core_pos, decided, rng) -> list[int]:
    """One child index per value of ``axis`` (decided axes pinned where possible)."""
    sp = genes.space
    out = []
    if axis in core_pos:
        p = core_pos[axis]
        f = genes.axes[p]
        base = genes.vi[genes.axes, gen[0]].copy()
        pinned = [core_pos[a] for a in decided if a in core_pos] + [p]
        for v in range(genes.n_values[f]):
            target = base.copy()
            target[p] = v
            row = genes.repair_row(target, pinned[::-1], rng)
            g = gen.copy()
            g[0] = row
            out.append(int(genes.to_index(g[:, None], rng)[0]))
    elif axis == "order":
        m = int(sp.mask[gen[0]])
        off, cnt = int(sp.order_off[m]), int(sp.order_cnt[m])
        for o in sp.order_flat[off:off + cnt]:
            g = gen.copy()
            g[1] = int(o)
            out.append(int(genes.to_index(g[:, None], rng)[0]))
    else:
        k = _free_gene(axis, genes)
        n = (genes.nr, genes.nz, genes.nd)[k - 2]
        for v in range(n):
            g = gen.copy()
            g[k] = v
            out.append(int(genes.to_index(g[:, None], rng)[0]))
    return out


def _vary_undecided(genes: Genes, index: int, axis, decided, core_pos, rng) -> int:
    """``index`` with one random undecided axis changed (repaired)."""
    fixed = set(decided) | {axis}
    free_axes = [a for a in BEAM_AXES if a not in fixed
                 and (a in core_pos or _free_gene(a, genes) is not None)]
    if not free_axes:
        return index
    a = free_axes[int(rng.integers(len(free_axes)))]
    gen = genes.from_index(np.array([index]))[:, 0]
    if a in core_pos:
        p = core_pos[a]
        f = genes.axes[p]
        target = genes.vi[genes.axes, gen[0]].copy()
        nv = genes.n_values[f]
        target[p] = (target[p] + 1 + rng.integers(nv - 1)) % nv
        pinned = [core_pos[x] for x in fixed if x in core_pos]
        gen[0] = genes.repair_row(target, pinned + [p], rng)
    else:
        gen[1:] = _mutate_free(genes, gen[1:], _free_gene(a, genes) - 1, rng)
    return int(genes.to_index(gen[:, None], rng)[0])


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
