"""Vectorized genome encoding of a design space, and local search over it.

A *genome* is an ``int64 (n_genes, n)`` array of value indices, one row per searchable axis:
first the core axes of :mod:`trainscape.space.design` that take more than one value among the
valid core rows (``dp`` only when it is an axis, not derived), then ``order`` (a raw placement
order index, 0..119, canonicalized against the row's degree mask when encoded), ``recompute``,
``zero`` and ``dp_overlap``. Every operation here works on whole batches with NumPy:

* :meth:`Encoding.from_index` decodes global indices of the space into genomes;
* :meth:`Encoding.to_index` encodes genomes back, *repairing* core value combinations that no
  valid row has: the valid row with the fewest axes changed, axes marked as pinned kept where
  possible, ties broken by the seeded generator. Nearby rows are found by key look-ups
  (one then two axes changed), a full distance scan only when neither exists;
* :meth:`Encoding.neighbours` lists the single-axis and paired-axis moves of one point;
* :func:`hill_climb` is best-improvement local search over those moves (single-axis moves
  first, paired moves when no single move improves), the "local improvement" step of a
  memetic algorithm (Moscato 1989; Hart, Krasnogor & Smith 2005, "Recent advances in memetic
  algorithms", §1: a genetic algorithm whose individuals are refined by local search).

Reproducible for a seed: all randomness comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import itertools

import numpy as np

from .. import layout as L
from ..space import design as D
from ..space import orders as O

_CANON: np.ndarray | None = None  # (N_MASKS, N_ORDERS) canonical order of each order per mask
_SWAP: np.ndarray | None = None  # (N_ORDERS, N_DIMS, N_DIMS) order with two dimensions swapped


def _tables() -> tuple[np.ndarray, np.ndarray]:
    global _CANON, _SWAP
    if _CANON is None:
        canon = np.empty((O.N_MASKS, L.N_ORDERS), dtype=np.int64)
        for m in range(O.N_MASKS):
            for o in range(L.N_ORDERS):
                canon[m, o] = O.canonical_order(o, m)
        swap = np.empty((L.N_ORDERS, L.N_DIMS, L.N_DIMS), dtype=np.int64)
        for o in range(L.N_ORDERS):
            perm = O.perm_of(o)
            for a in range(L.N_DIMS):
                for b in range(L.N_DIMS):
                    p = [b if d == a else a if d == b else d for d in perm]
                    swap[o, a, b] = L.order_index(tuple(p))
        _CANON, _SWAP = canon, swap
    return _CANON, _SWAP


class Encoding:
    """The genome encoding of one :class:`~trainscape.space.design.DesignSpace`."""

    def __init__(self, space: D.DesignSpace):
        self.space = space
        n_rows = space.core.shape[1]
        self.n_rows = n_rows
        vi_all, nv_all = [], []
        for f in range(D.N_CORE):
            vals = np.unique(space.core[f])
            vi_all.append(np.searchsorted(vals, space.core[f]))
            nv_all.append(len(vals))
        self.core_fields = [f for f in range(D.N_CORE) if nv_all[f] > 1
                            and not (D.CORE_FIELDS[f] == "dp" and space.axes["dp"] is None)]
        k = len(self.core_fields)
        self.k = k
        self.vi = (np.array([vi_all[f] for f in self.core_fields], dtype=np.int64)
                   .reshape(k, n_rows))
        self.nv_core = np.array([nv_all[f] for f in self.core_fields], dtype=np.int64)
        self.nr, self.nz, self.nd = len(space.recompute), len(space.zero), len(space.dp_overlap)
        self.G_ORDER, self.G_REC, self.G_ZERO, self.G_DPO = k, k + 1, k + 2, k + 3
        self.n_genes = k + 4
        self.nv = np.concatenate([self.nv_core, [L.N_ORDERS, self.nr, self.nz, self.nd]])
        self.names = [D.CORE_FIELDS[f] for f in self.core_fields] + list(D.FREE_FIELDS)
        # mixed-radix key of a core value-index vector -> row (sorted for searchsorted)
        self.mult = np.ones(k, dtype=np.int64)
        for a in range(k - 2, -1, -1):
            self.mult[a] = self.mult[a + 1] * self.nv_core[a + 1]
        keys = (self.vi * self.mult[:, None]).sum(axis=0) if k else np.zeros(n_rows, np.int64)
        order = np.argsort(keys, kind="stable")
        self.sorted_keys, self.sorted_rows = keys[order], order.astype(np.int64)
        # moves of one and two axes (axis, value) used by the repair look-ups
        a1 = [(a, v) for a in range(k) for v in range(int(self.nv_core[a]))]
        self.m1 = np.array(a1, dtype=np.int64).reshape(-1, 2)
        a2 = [(a, va, b, vb) for a, b in itertools.combinations(range(k), 2)
              for va in range(int(self.nv_core[a])) for vb in range(int(self.nv_core[b]))]
        self.m2 = np.array(a2, dtype=np.int64).reshape(-1, 4)
        # placement orders: slot of each raw order under each degree mask (-1: not allowed)
        canon, self.swap = _tables()
        slot = np.full((O.N_MASKS, L.N_ORDERS), -1, dtype=np.int64)
        for m in range(O.N_MASKS):
            off, cnt = int(space.order_off[m]), int(space.order_cnt[m])
            if cnt == 0:
                continue
            allowed = space.order_flat[off:off + cnt]
            k_ = np.minimum(np.searchsorted(allowed, canon[m]), cnt - 1)
            slot[m] = np.where(allowed[k_] == canon[m], k_, -1)
        self.slot_of = slot
        self.row_mask = space.mask.astype(np.int64)
        self.row_norders = space.order_cnt[self.row_mask].astype(np.int64)
        # dimensions of degree > 1 of each mask, for order swaps
        self.mask_dims = [[d for d in range(L.N_DIMS) if (m >> d) & 1] for m in range(O.N_MASKS)]

    # -- decoding ---------------------------------------------------------------------------
    def rows_of_index(self, idx: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.space.cum, idx, side="right") - 1

    def from_index(self, idx) -> np.ndarray:
        """Genomes ``int64 (n_genes, n)`` of global indices."""
        sp = self.space
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        rows = self.rows_of_index(idx)
        rem = idx - sp.cum[rows]
        g = np.empty((self.n_genes, idx.size), dtype=np.int64)
        g[self.G_DPO] = rem % self.nd
        rem = rem // self.nd
        g[self.G_ZERO] = rem % self.nz
        rem = rem // self.nz
        g[self.G_REC] = rem % self.nr
        slot = rem // self.nr
        g[self.G_ORDER] = sp.order_flat[sp.order_off[sp.mask[rows]] + slot]
        g[:self.k] = self.vi[:, rows]
        return g

    # -- encoding with repair ---------------------------------------------------------------
    def _lookup(self, keys: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self.sorted_keys, keys)
        pos = np.minimum(pos, self.sorted_keys.size - 1)
        return np.where(self.sorted_keys[pos] == keys, self.sorted_rows[pos], -1)

    def rows_for(self, core: np.ndarray, pin: np.ndarray | None, rng) -> np.ndarray:
        """Valid row of each core value-index column: exact, else repaired (see module)."""
        n = core.shape[1]
        if self.k == 0:
            return np.zeros(n, dtype=np.int64)
        keys = (core * self.mult[:, None]).sum(axis=0)
        rows = self._lookup(keys)
        miss = np.flatnonzero(rows < 0)
        if miss.size == 0:
            return rows
        t = core[:, miss]
        p = (np.zeros(t.shape, dtype=bool) if pin is None else pin[:, miss].astype(bool))
        base = keys[miss]
        found = np.full(miss.size, -1, dtype=np.int64)
        # one axis changed (never a pinned one)
        a, v = self.m1[:, 0], self.m1[:, 1]
        cur = t[a]  # (M1, c)
        ok = (v[:, None] != cur) & ~p[a]
        cand = self._lookup(base[None, :] + (v[:, None] - cur) * self.mult[a][:, None])
        found = _pick(cand, ok, rng, found)
        # two axes changed
        left = found < 0
        if left.any() and self.m2.size:
            sel = np.flatnonzero(left)
            a, va, b, vb = (self.m2[:, i] for i in range(4))
            ca, cb = t[a][:, sel], t[b][:, sel]
            ok = ((va[:, None] != ca) & (vb[:, None] != cb) & ~p[a][:, sel] & ~p[b][:, sel])
            cand = self._lookup(base[sel][None, :] + (va[:, None] - ca) * self.mult[a][:, None]
                                + (vb[:, None] - cb) * self.mult[b][:, None])
            found[sel] = _pick(cand, ok, rng, found[sel])
        # anything else: the full weighted distance (pinned axes weigh more than all others)
        left = np.flatnonzero(found < 0)
        for j in left:
            w = 1 + (self.k + 1) * p[:, j]
            dist = ((self.vi != t[:, j][:, None]) * w[:, None]).sum(axis=0).astype(np.float64)
            dist += 0.5 * rng.random(self.n_rows)
            found[j] = int(np.argmin(dist))
        rows[miss] = found
        return rows

    def to_index(self, g: np.ndarray, rng, pin: np.ndarray | None = None,
                 redraw_order: np.ndarray | None = None) -> np.ndarray:
        """Global indices of genomes (core repaired, order canonicalized; an order the space
        does not list for the row's placement, or one marked in ``redraw_order``, is drawn
        among the allowed ones)."""
        sp = self.space
        g = np.asarray(g, dtype=np.int64)
        rows = self.rows_for(g[:self.k], pin, rng)
        m = self.row_mask[rows]
        slot = self.slot_of[m, g[self.G_ORDER]]
        bad = slot < 0
        if redraw_order is not None:
            bad |= redraw_order
        if bad.any():
            cnt = self.row_norders[rows[bad]]
            slot[bad] = (rng.random(int(bad.sum())) * cnt).astype(np.int64)
        local = ((slot * self.nr + g[self.G_REC]) * self.nz + g[self.G_ZERO]) * self.nd \
            + g[self.G_DPO]
        return sp.cum[rows] + local

    # -- variation --------------------------------------------------------------------------
    def mutate(self, g: np.ndarray, rng, p_second: float = 0.3,
               p_mutate: float = 0.9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One-axis mutation (a second axis with ``p_second``) of each column of ``g`` (with
        probability ``p_mutate``); returns ``(genomes, pin, redraw_order)``. A core axis takes
        another of its values and is pinned for the repair; ``order`` swaps two dimensions of
        degree > 1 or is redrawn; the free axes take another value."""
        g = g.copy()
        n = g.shape[1]
        pin = np.zeros((self.k, n), dtype=bool)
        redraw = np.zeros(n, dtype=bool)
        movable = np.flatnonzero(self.nv > 1)
        for round_ in range(2):
            p = p_mutate if round_ == 0 else p_mutate * p_second
            hit = np.flatnonzero(rng.random(n) < p)
            if hit.size == 0 or movable.size == 0:
                continue
            gene = movable[rng.integers(0, movable.size, size=hit.size)]
            for x in np.unique(gene):
                cols = hit[gene == x]
                if x == self.G_ORDER:
                    self._mutate_order(g, cols, rng, redraw)
                    continue
                nvx = int(self.nv[x])
                g[x, cols] = (g[x, cols] + 1 + rng.integers(0, nvx - 1, size=cols.size)) % nvx
                if x < self.k:
                    pin[x, cols] = True
        return g, pin, redraw

    def _mutate_order(self, g, cols, rng, redraw) -> None:
        rows = self.rows_for(g[:self.k, cols], None, rng)
        masks = self.row_mask[rows]
        coin = rng.random(cols.size) < 0.5
        for j, c in enumerate(cols):
            dims = self.mask_dims[int(masks[j])]
            if coin[j] or len(dims) < 2:
                redraw[c] = True
            else:
                a, b = rng.choice(len(dims), size=2, replace=False)
                g[self.G_ORDER, c] = self.swap[g[self.G_ORDER, c], dims[a], dims[b]]

    def crossover(self, ga: np.ndarray, gb: np.ndarray, rng, p: float = 0.9) -> np.ndarray:
        """Uniform crossover gene by gene (each pair with probability ``p``)."""
        take_b = rng.random(ga.shape) < 0.5
        take_b &= (rng.random(ga.shape[1]) < p)[None, :]
        return np.where(take_b, gb, ga)

    # -- neighbourhoods ---------------------------------------------------------------------
    def neighbours(self, index: int, rng, pairs: bool = False,
                   fixed: tuple[int, ...] = ()) -> np.ndarray:
        """Global indices of the moves of one configuration: every other value of each axis
        (every allowed placement order of its degree mask), or with ``pairs`` every pair of
        other values of two axes, and every other value of one axis with two dimensions of
        the placement order swapped. Genes
        in ``fixed`` never move (moves whose repair would change them are dropped)."""
        g0 = self.from_index(np.array([index]))[:, 0]
        cols, pins = [], []
        genes = [x for x in range(self.n_genes)
                 if x != self.G_ORDER and self.nv[x] > 1 and x not in fixed]
        if not pairs:
            for x in genes:
                for v in range(int(self.nv[x])):
                    if v != g0[x]:
                        c = g0.copy()
                        c[x] = v
                        cols.append(c)
                        pins.append((x,))
        else:
            # one axis and a swap of two dimensions in the placement order
            if self.G_ORDER not in fixed:
                for x in genes:
                    for v in range(int(self.nv[x])):
                        if v == g0[x]:
                            continue
                        for da, db in itertools.combinations(range(L.N_DIMS), 2):
                            c = g0.copy()
                            c[x] = v
                            c[self.G_ORDER] = self.swap[g0[self.G_ORDER], da, db]
                            cols.append(c)
                            pins.append((x,))
            for x, y in itertools.combinations(genes, 2):
                for vx in range(int(self.nv[x])):
                    if vx == g0[x]:
                        continue
                    for vy in range(int(self.nv[y])):
                        if vy != g0[y]:
                            c = g0.copy()
                            c[x], c[y] = vx, vy
                            cols.append(c)
                            pins.append((x, y))
        out = []
        if cols:
            g = np.array(cols, dtype=np.int64).T
            pin = np.zeros((self.k, g.shape[1]), dtype=bool)
            for x in fixed:
                if x < self.k:
                    pin[x] = True
            for j, ps in enumerate(pins):
                for x in ps:
                    if x < self.k:
                        pin[x, j] = True
            idx = self.to_index(g, rng, pin)
            if fixed:
                got = self.from_index(idx)
                keep = np.ones(idx.size, dtype=bool)
                for x in fixed:
                    keep &= got[x] == g0[x]
                idx = idx[keep]
            out.append(idx)
        if not pairs and self.G_ORDER not in fixed:
            row = int(self.rows_of_index(np.array([index]))[0])
            cnt = int(self.row_norders[row])
            if cnt > 1:
                sp = self.space
                base = int(index) - int(sp.cum[row])
                inner = self.nr * self.nz * self.nd
                slots = np.arange(cnt, dtype=np.int64)
                out.append(int(sp.cum[row]) + slots * inner + base % inner)
        if not out:
            return np.zeros(0, dtype=np.int64)
        res = np.concatenate(out)
        _, first = np.unique(res, return_index=True)
        res = res[np.sort(first)]
        return res[res != index]


class Climb:
    """A local search that advances a few evaluations at a time (for racing several):
    first improvement over the moves in random order, ``batch`` at a time, single-axis moves
    first and paired moves (``pairs``) when no single move improves; genes in ``fixed``
    stay. ``done`` once at a local optimum."""

    def __init__(self, enc: Encoding, start: int, key: float, fixed: tuple[int, ...] = (),
                 pairs: bool = True, batch: int = 8):
        self.enc, self.cur, self.key = enc, int(start), float(key)
        self.fixed, self.pairs, self.batch = tuple(fixed), pairs, batch
        self.queue: np.ndarray | None = None
        self.pos = 0
        self.level = 0  # 0: single moves, 1: paired moves
        self.done = False

    def advance(self, ev, rng, evaluations: int) -> None:
        """Spend about ``evaluations`` new evaluations (fewer when done or out of budget)."""
        c0 = ev.count
        while not self.done and not ev.exhausted and ev.count - c0 < evaluations:
            if self.queue is None:
                q = self.enc.neighbours(self.cur, rng, pairs=self.level == 1, fixed=self.fixed)
                self.queue, self.pos = q[rng.permutation(q.size)], 0
            if self.pos >= self.queue.size:
                if self.level == 0 and self.pairs:
                    self.level, self.queue = 1, None
                    continue
                self.done = True
                break
            part = self.queue[self.pos:self.pos + self.batch]
            self.pos += part.size
            key = score(ev, part)
            j = int(np.argmin(key))
            if key[j] < self.key:
                self.cur, self.key = int(part[j]), float(key[j])
                self.queue, self.level = None, 0


def _pick(cand: np.ndarray, ok: np.ndarray, rng, found: np.ndarray) -> np.ndarray:
    """Per column, a uniformly random valid candidate row (``ok`` and found), else ``found``."""
    good = ok & (cand >= 0)
    if not good.any():
        return found
    score = np.where(good, rng.random(good.shape), -1.0)
    j = np.argmax(score, axis=0)
    have = score[j, np.arange(good.shape[1])] >= 0
    out = found.copy()
    out[have] = cand[j[have], np.flatnonzero(have)]
    return out


#: Score of an infeasible configuration: above every feasible one, ordered by its memory.
INFEASIBLE = 1e12


def score(ev, idx: np.ndarray) -> np.ndarray:
    """Objective of feasible configurations; ``INFEASIBLE * (1 + memory GiB)`` for the others,
    so that a search started among configurations that do not fit moves towards ones that do
    (constraint domination, Deb et al. 2002 §VI: feasible first, infeasible by violation)."""
    key, _step, mem, feas = ev(idx)
    return np.where(feas & np.isfinite(key), key,
                    INFEASIBLE * (1.0 + np.where(np.isfinite(mem), mem, 1e9)))


def hill_climb(enc: Encoding, ev, start: int, rng, max_steps: int = 1000,
               pairs: bool = True, batch: int = 0) -> int:
    """Local search from ``start`` with the evaluator ``ev`` (an
    :class:`~trainscape.explore.search.Evaluator`): single-axis moves while one improves,
    then paired moves; stop at a local optimum of both or when the budget is spent.

    ``batch = 0`` is best improvement (the whole neighbourhood costed at once); ``batch > 0``
    first improvement over the moves in random order, ``batch`` at a time (the best improving
    move of the first batch that has one is taken). Returns the best index reached."""
    cur = int(start)
    cur_key = float(score(ev, np.array([cur]))[0])
    for _ in range(max_steps):
        if ev.exhausted:
            break
        improved = False
        for use_pairs in ((False, True) if pairs else (False,)):
            cand = enc.neighbours(cur, rng, pairs=use_pairs)
            if cand.size == 0:
                continue
            if batch > 0:
                cand = cand[rng.permutation(cand.size)]
            step = cand.size if batch <= 0 else batch
            for s in range(0, cand.size, step):
                part = cand[s:s + step]
                key = score(ev, part)
                j = int(np.argmin(key))
                if key[j] < cur_key:
                    cur, cur_key = int(part[j]), float(key[j])
                    improved = True
                    break
                if ev.exhausted:
                    break
            if improved or ev.exhausted:
                break
        if not improved:
            break
    return cur
