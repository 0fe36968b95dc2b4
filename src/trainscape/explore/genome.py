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
* :meth:`Encoding.neighbours` lists the single-axis and paired-axis moves of one point, and
  :meth:`Encoding.single_moves`, :meth:`~Encoding.order_moves` and
  :meth:`~Encoding.compound_moves` the neighbourhoods of :class:`Climb`;
* :class:`Climb` is the local search the searches race: first improvement through
  neighbourhoods of growing size, moves ordered by their observed success, an additive model
  of pairs of moves (two single moves' effects on time and memory added) for the pairs that
  trade memory for time; :func:`hill_climb` is the plain best- or first-improvement form.
  Either is the "local improvement" step of a memetic algorithm (Moscato 1989; Hart,
  Krasnogor & Smith 2005, "Recent advances in memetic algorithms", §1: a genetic algorithm
  whose individuals are refined by local search).

Reproducible for a seed: all randomness comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import itertools
import math

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
        # move classes (for move statistics): one per (gene, new value), one for every order
        # move, one for compound moves and one for paired moves
        sizes = [1 if x == self.G_ORDER else int(self.nv[x]) for x in range(self.n_genes)]
        self.cls_off = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64)
        self.C_COMPOUND = int(sum(sizes))  # additive pairs
        self.C_PAIRS = self.C_COMPOUND + 1
        self.C_TWO = self.C_COMPOUND + 2  # compound moves of genes (x, y): C_TWO + x * n + y
        self.n_classes = self.C_TWO + self.n_genes * self.n_genes
        self.cls_gene = np.concatenate([np.full(n, x) for x, n in enumerate(sizes)]
                                       + [np.full(2 + self.n_genes ** 2, -1)]).astype(np.int64)
        # mixed-radix key of a core value-index vector -> row (sorted for searchsorted); the
        # keys are int64, so the product of the value counts must stay below 2^62
        if math.prod(int(v) for v in self.nv_core) >= 1 << 62:
            from ..spec.errors import ScenarioError

            widest = sorted(zip(self.nv_core.tolist(), self.names), reverse=True)[:3]
            raise ScenarioError.at(
                "space", "too many distinct values among the valid combinations to search; "
                "give fewer values for " + ", ".join(f"space.{n} ({v})" for v, n in widest),
                allowed="a product of distinct value counts below 2^62")
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
        nz, nd = sp.row_radix(rows)
        g = np.empty((self.n_genes, idx.size), dtype=np.int64)
        g[self.G_DPO] = rem % nd
        rem = rem // nd
        g[self.G_ZERO] = rem % nz
        rem = rem // nz
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
        # a row without a data-parallel group holds one zero and dp_overlap value (the first)
        nz, nd = sp.row_radix(rows)
        z = np.where(nz > 1, g[self.G_ZERO], 0)
        d = np.where(nd > 1, g[self.G_DPO], 0)
        local = ((slot * self.nr + g[self.G_REC]) * nz + z) * nd + d
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
    def _encode_moves(self, g0, cols, pinned, moved, rng, fixed):
        """Indices of the genomes ``cols`` (moves from ``g0``), repaired with the genes in
        ``pinned`` (one tuple per move) and ``fixed`` kept, those whose repair changed a
        fixed gene dropped, repeats and ``g0`` itself removed; with their moved genes."""
        if not cols:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 2), dtype=np.int64)
        g = np.array(cols, dtype=np.int64).T
        pin = np.zeros((self.k, g.shape[1]), dtype=bool)
        for x in fixed:
            if x < self.k:
                pin[x] = True
        for j, ps in enumerate(pinned):
            for x in ps:
                if x < self.k:
                    pin[x, j] = True
        idx = self.to_index(g, rng, pin)
        mv = np.array(moved, dtype=np.int64).reshape(-1, 2)
        if fixed:
            got = self.from_index(idx)
            keep = np.ones(idx.size, dtype=bool)
            for x in fixed:
                keep &= got[x] == g0[x]
            idx, mv = idx[keep], mv[keep]
        return idx, mv

    def _dedupe(self, index, idx, *cols):
        _, first = np.unique(idx, return_index=True)
        first = np.sort(first)
        keep = idx[first] != index
        return (idx[first][keep],) + tuple(c[first][keep] for c in cols)

    def single_moves(self, index: int, rng, fixed: tuple[int, ...] = ()):
        """Moves of one gene from ``index``: every other value of each gene but ``order``,
        and every swap of two parallel dimensions in the placement order. Returns
        ``(indices, move classes, moved genes (n, 2))`` (the second moved gene is -1)."""
        g0 = self.from_index(np.array([index]))[:, 0]
        cols, pinned, moved, cls = [], [], [], []
        for x in range(self.n_genes):
            if x == self.G_ORDER or self.nv[x] < 2 or x in fixed:
                continue
            for v in range(int(self.nv[x])):
                if v != g0[x]:
                    c = g0.copy()
                    c[x] = v
                    cols.append(c)
                    pinned.append((x,))
                    moved.append((x, -1))
                    cls.append(self.cls_off[x] + v)
        if self.G_ORDER not in fixed:
            for a, b in itertools.combinations(range(L.N_DIMS), 2):
                c = g0.copy()
                c[self.G_ORDER] = self.swap[g0[self.G_ORDER], a, b]
                cols.append(c)
                pinned.append(())
                moved.append((self.G_ORDER, -1))
                cls.append(self.cls_off[self.G_ORDER])
        idx, mv = self._encode_moves(g0, cols, pinned, moved, rng, fixed)
        c = np.array(cls, dtype=np.int64)
        if fixed and c.size:
            # _encode_moves dropped the moves whose repair broke a fixed gene: keep classes
            # aligned by re-deriving them from the moved genes' new values
            got = self.from_index(idx)
            c = np.where(mv[:, 0] == self.G_ORDER, self.cls_off[self.G_ORDER],
                         self.cls_off[mv[:, 0]] + got[mv[:, 0], np.arange(idx.size)])
        return self._dedupe(index, idx, c, mv)

    def order_moves(self, index: int) -> np.ndarray:
        """Every other placement order the space lists for the row of ``index``."""
        row = int(self.rows_of_index(np.array([index]))[0])
        cnt = int(self.row_norders[row])
        sp = self.space
        base = int(index) - int(sp.cum[row])
        nz, nd = (int(v[0]) for v in sp.row_radix(np.array([row])))
        inner = self.nr * nz * nd
        out = int(sp.cum[row]) + np.arange(cnt, dtype=np.int64) * inner + base % inner
        return out[out != index]

    def _add_second_moves(self, g0, x, v, genes, cols, pinned, moved, pin_first: bool) -> None:
        """Append the moves of gene ``x`` to value ``v`` together with every other value of
        each gene of ``genes``; the repair pins ``x`` (``pin_first``) or the second gene."""
        for y in genes:
            for w in range(int(self.nv[y])):
                if w != g0[y]:
                    c = g0.copy()
                    c[x], c[y] = v, w
                    cols.append(c)
                    pinned.append((x,) if pin_first else (y,))
                    moved.append((x, y))

    def compound_moves(self, index: int, rng, fixed: tuple[int, ...] = ()):
        """Moves of two genes that single moves miss when their effects interact: a new
        parallel degree (``DEGREE_AXES``) with a swap in the placement order (which network
        tier each group spans depends on both) or with another core gene's value, and a new
        ZeRO stage or recomputation mode (memory traded for time) with a core gene's value.
        Returns ``(indices, moved genes (n, 2))``."""
        g0 = self.from_index(np.array([index]))[:, 0]
        cols, pinned, moved = [], [], []
        core = [y for y in range(self.k) if self.nv[y] > 1 and y not in fixed]
        for x in (self.G_REC, self.G_ZERO):
            if self.nv[x] < 2 or x in fixed:
                continue
            for v in range(int(self.nv[x])):
                if v != g0[x]:
                    self._add_second_moves(g0, x, v, core, cols, pinned, moved, pin_first=False)
        extra_idx, extra_mv = [], []
        for x in core:
            if self.names[x] not in DEGREE_AXES:
                continue
            for v in range(int(self.nv[x])):
                if v == g0[x]:
                    continue
                if self.G_ORDER not in fixed:
                    # the new degree with every placement order of its row
                    c = g0.copy()
                    c[x] = v
                    pin = np.zeros((self.k, 1), dtype=bool)
                    pin[x] = True
                    for f in fixed:
                        if f < self.k:
                            pin[f] = True
                    row = int(self.rows_for(c[:self.k, None], pin, rng)[0])
                    if all(self.vi[f, row] == g0[f] for f in fixed if f < self.k):
                        cnt = int(self.row_norders[row])
                        nz, nd = (int(v[0]) for v in self.space.row_radix(np.array([row])))
                        inner = self.nr * nz * nd
                        local = (g0[self.G_REC] * nz + (g0[self.G_ZERO] if nz > 1 else 0)) \
                            * nd + (g0[self.G_DPO] if nd > 1 else 0)
                        extra_idx.append(int(self.space.cum[row])
                                         + np.arange(cnt, dtype=np.int64) * inner + local)
                        extra_mv.append(np.tile([x, self.G_ORDER], (cnt, 1)))
                self._add_second_moves(g0, x, v, [y for y in core if y != x], cols, pinned,
                                       moved, pin_first=True)
        idx, mv = self._encode_moves(g0, cols, pinned, moved, rng, fixed)
        if extra_idx:
            idx = np.concatenate([idx] + extra_idx)
            mv = np.concatenate([mv] + extra_mv)
        return self._dedupe(index, idx, mv)

    def neighbours(self, index: int, rng, pairs: bool = False,
                   fixed: tuple[int, ...] = ()) -> np.ndarray:
        """Global indices of the moves of one configuration: every other value of each axis
        (every allowed placement order of its degree mask), or with ``pairs`` every pair of
        other values of two axes, and every other value of one axis with two dimensions of
        the placement order swapped. Genes in ``fixed`` never move (moves whose repair would
        change them are dropped)."""
        if not pairs:
            idx = self.single_moves(index, rng, fixed)[0]
            if self.G_ORDER not in fixed:
                idx = np.concatenate([idx, self.order_moves(index)])
            return self._dedupe(index, idx)[0]
        g0 = self.from_index(np.array([index]))[:, 0]
        cols, pinned, moved = [], [], []
        genes = [x for x in range(self.n_genes)
                 if x != self.G_ORDER and self.nv[x] > 1 and x not in fixed]
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
                        pinned.append((x,))
                        moved.append((x, self.G_ORDER))
        for x, y in itertools.combinations(genes, 2):
            for vx in range(int(self.nv[x])):
                if vx == g0[x]:
                    continue
                for vy in range(int(self.nv[y])):
                    if vy != g0[y]:
                        c = g0.copy()
                        c[x], c[y] = vx, vy
                        cols.append(c)
                        pinned.append((x, y))
                        moved.append((x, y))
        idx, _mv = self._encode_moves(g0, cols, pinned, moved, rng, fixed)
        return self._dedupe(index, idx)[0]


#: Core axes that set the degree of a parallel dimension, hence the rank strides the
#: placement order gives every group (:mod:`trainscape.space.orders`).
DEGREE_AXES = ("tp", "cp", "pp", "dp", "ep")

#: The neighbourhoods a :class:`Climb` goes through, in order, before it counts as a local
#: optimum: single moves, the rest of the placement orders, pairs of single moves predicted
#: to improve by adding their effects, compound moves (and, for ``pairs``, every pair).
STAGES = ("single", "orders", "additive", "compound")
#: Pairs the additive model proposes at most, per configuration.
ADDITIVE_MAX = 64
#: A gene whose moves left the objective exactly unchanged this many times in a niche (and
#: never changed it) is not moved there again.
NEUTRAL_MIN = 2
#: Moves looked ahead for ones already costed (those are free).
WINDOW = 64
#: Pseudo-count of improvements per move class before any trial (a Laplace-style prior:
#: (improvements + PRIOR) / (trials + 2)), so untried classes are neither first nor last.
PRIOR = 0.1


class Climb:
    """A local search that advances a few evaluations at a time (for racing several): first
    improvement over the moves of each neighbourhood of :data:`STAGES` (and paired moves with
    ``pairs``) in turn, ``batch`` new evaluations at a time, back to the first neighbourhood
    after every improvement; genes in ``fixed`` stay. ``done`` once at a local optimum of
    them all.

    Moves are tried in the order of their observed success (``stats``: a list of
    ``(array (4, n_classes), weight[, neutrality only])``: per move class the trials, the
    improvements weighted by their relative size, the exact ties among configurations that
    fit and the trials from one that fits; own statistics first), moves already costed cost nothing, the moves of a gene that
    turned out neutral here are skipped, and a single move that is faster but does not fit
    in memory puts the pairs the additive model predicts to fit and improve at the front
    (memory and time of two moves added, a pair of genes trading memory for time)."""

    def __init__(self, enc: Encoding, start: int, key: float, fixed: tuple[int, ...] = (),
                 pairs: bool = True, batch: int = 1, stats=None):
        self.enc, self.cur, self.key = enc, int(start), float(key)
        self.fixed, self.pairs, self.batch = tuple(fixed), pairs, max(1, int(batch))
        self.stats = stats
        self.stages = STAGES + (("pairs",) if pairs else ())
        self.stage = 0
        self.queue: np.ndarray | None = None
        self.done = False
        self.singles: np.ndarray | None = None  # the single moves of the current point
        self._tried: set = set()  # additive pairs already put at the front of the queue
        self._faster_oom = False  # a single move was faster but did not fit
        self._pred: dict = {}  # queued additive pairs -> predicted objective

    # -- the move queue -----------------------------------------------------------------------
    def _build(self, ev, rng) -> None:
        enc = self.enc
        name = self.stages[self.stage]
        if name == "single":
            q, qc, qm = enc.single_moves(self.cur, rng, self.fixed)
            self.singles = q
        elif name == "orders":
            q = enc.order_moves(self.cur) if enc.G_ORDER not in self.fixed else \
                np.zeros(0, dtype=np.int64)
            qc = np.full(q.size, enc.cls_off[enc.G_ORDER])
            qm = np.tile([enc.G_ORDER, -1], (q.size, 1))
        elif name == "additive":
            q = self._additive(ev, rng, self.singles)
            qc = np.full(q.size, enc.C_COMPOUND)
            qm = np.full((q.size, 2), -1, dtype=np.int64)
        elif name == "compound":
            q, qm = enc.compound_moves(self.cur, rng, self.fixed)
            qc = enc.C_TWO + qm[:, 0] * enc.n_genes + np.maximum(qm[:, 1], 0)
        else:
            q = enc.neighbours(self.cur, rng, pairs=True, fixed=self.fixed)
            qc = np.full(q.size, enc.C_PAIRS)
            qm = np.full((q.size, 2), -1, dtype=np.int64)
        perm = rng.permutation(q.size)
        if name == "compound":
            perm = self._by_first_move(ev, rng, q, qm, perm)
        elif self.stats is not None and name != "additive":
            t = sum(e[1] * e[0][0] for e in self.stats)
            sc = sum(e[1] * e[0][1] for e in self.stats)
            rate = (sc + PRIOR) / (t + 2.0)
            perm = perm[np.argsort(-rate[qc[perm]], kind="stable")]
        self.queue, self.qcls, self.qm, self.pos = q[perm], qc[perm], qm[perm], 0
        self.n_neutral = -1

    def _by_first_move(self, ev, rng, q, qm, perm):
        """Compound moves ordered by how good their first move alone was (costed among the
        single moves): a promising new degree is tried first with the orders and values it
        may need."""
        enc = self.enc
        if q.size == 0:
            return perm
        g0 = enc.from_index(np.array([self.cur]))[:, 0]
        gq = enc.from_index(q)
        x = qm[:, 0]
        cols = np.arange(q.size)
        base = np.repeat(g0[:, None], q.size, axis=1)
        base[x, cols] = gq[x, cols]
        pin = np.zeros((enc.k, q.size), dtype=bool)
        sel = x < enc.k
        pin[x[sel], cols[sel]] = True
        for f in self.fixed:
            if f < enc.k:
                pin[f] = True
        bidx = enc.to_index(base, rng, pin)
        known = ev.positions(bidx) >= 0
        raw = np.full(q.size, np.inf)
        if known.any():
            raw[known] = ev.raw(bidx[known])[0]
        return perm[np.argsort(raw[perm], kind="stable")]

    def _neutral_genes(self) -> np.ndarray:
        # this niche's statistics and those of the niches in its neutrality group
        own = sum(st[0] for st in self.stats if len(st) > 2 and st[2]) + self.stats[0][0]
        enc = self.enc
        single = np.arange(enc.C_COMPOUND)
        gt = np.bincount(enc.cls_gene[single], own[3][single], minlength=enc.n_genes)
        gn = np.bincount(enc.cls_gene[single], own[2][single], minlength=enc.n_genes)
        return np.append((gt >= NEUTRAL_MIN) & (gn == gt), False)  # index -1: no gene

    def _drop_neutral(self) -> None:
        neutral = self._neutral_genes()
        n = int(neutral.sum())
        if n == self.n_neutral:
            return
        self.n_neutral = n
        rest = self.qm[self.pos:]
        drop = neutral[rest[:, 0]] | neutral[rest[:, 1]]
        if drop.any():
            keep = np.concatenate([np.ones(self.pos, dtype=bool), ~drop])
            self.queue, self.qcls, self.qm = self.queue[keep], self.qcls[keep], self.qm[keep]

    # -- the additive model -------------------------------------------------------------------
    def _additive(self, ev, rng, singles) -> np.ndarray:
        """Pairs of single moves already costed at the current configuration (on different
        genes) predicted to improve it by adding their effects on the objective and on the
        memory per GPU (both costed whether a configuration fits or not), best predicted
        first; those predicted not to fit (memory at least that of a configuration that did
        not) are left out."""
        enc = self.enc
        if singles is None or singles.size < 2:
            return np.zeros(0, dtype=np.int64)
        s = singles[ev.positions(singles) >= 0]
        if s.size < 2:
            return np.zeros(0, dtype=np.int64)
        raw, mem = ev.raw(s)
        raw0, mem0 = (a[0] for a in ev.raw(np.array([self.cur])))
        g0 = enc.from_index(np.array([self.cur]))[:, 0]
        gs = enc.from_index(s)
        diff = gs != g0[:, None]
        i, j = np.triu_indices(s.size, 1)
        pred = raw[i] + raw[j] - raw0
        pmem = mem[i] + mem[j] - mem0
        ok = ~(diff[:, i] & diff[:, j]).any(axis=0) & np.isfinite(pred)
        ok &= (pred < self.key) & (pmem < ev.min_infeasible_mem)
        i, j, pred = i[ok], j[ok], pred[ok]
        if i.size == 0:
            return np.zeros(0, dtype=np.int64)
        o = np.argsort(pred, kind="stable")[:ADDITIVE_MAX]
        i, j, pred = i[o], j[o], pred[o]
        g = np.where(diff[:, j], gs[:, j], gs[:, i])
        pin = diff[:enc.k, i] | diff[:enc.k, j]
        for x in self.fixed:
            if x < enc.k:
                pin[x] = True
        idx = enc.to_index(g, rng, pin)
        if self.fixed:
            got = enc.from_index(idx)
            keep = np.ones(idx.size, dtype=bool)
            for x in self.fixed:
                keep &= got[x] == g0[x]
            idx, pred = idx[keep], pred[keep]
        idx, pred = enc._dedupe(self.cur, idx, pred)
        for x, p in zip(idx.tolist(), pred.tolist()):
            self._pred[x] = min(p, self._pred.get(x, np.inf))
        return idx

    def promise(self, ev) -> float:
        """The best objective the additive model predicts for a queued pair not costed yet
        (an optimistic estimate of where this search is heading), or ``key``."""
        if not self._pred:
            return self.key
        idx = np.fromiter(self._pred, dtype=np.int64, count=len(self._pred))
        open_ = ev.positions(idx) < 0
        if not open_.any():
            return self.key
        return min(self.key, min(self._pred[int(x)] for x in idx[open_]))

    def _eager(self, ev, rng, part) -> None:
        """A single move just costed is faster but does not fit: the pairs the additive model
        proposes over the single moves costed so far go to the front of the queue."""
        raw, _mem = ev.raw(part)
        feas = ev(part)[3]
        self._faster_oom = self._faster_oom or bool(((~feas) & (raw < self.key)).any())
        if not self._faster_oom:
            return
        p = self._additive(ev, rng, self.queue[:self.pos])
        p = np.array([x for x in p.tolist() if x not in self._tried], dtype=np.int64)
        if p.size == 0:
            return
        self._tried.update(p.tolist())
        rest = slice(self.pos, None)
        keep = ~np.isin(self.queue[rest], p)
        self.queue = np.concatenate([self.queue[:self.pos], p, self.queue[rest][keep]])
        self.qcls = np.concatenate([self.qcls[:self.pos], np.full(p.size, self.enc.C_COMPOUND),
                                    self.qcls[rest][keep]])
        self.qm = np.concatenate([self.qm[:self.pos], np.full((p.size, 2), -1, np.int64),
                                  self.qm[rest][keep]])

    # -- search -------------------------------------------------------------------------------
    def advance(self, ev, rng, evaluations: int) -> None:
        """Spend about ``evaluations`` new evaluations (fewer when done or out of budget)."""
        c0 = ev.count
        while not self.done and not ev.exhausted and ev.count - c0 < evaluations:
            if self.queue is None:
                self._build(ev, rng)
            if self.stats is not None:
                self._drop_neutral()
            if self.pos >= self.queue.size:
                if self.stage + 1 < len(self.stages):
                    self.stage, self.queue = self.stage + 1, None
                    continue
                self.done = True
                break
            # moves already costed are free: take the first that improves, skip the others
            win = self.queue[self.pos:self.pos + WINDOW]
            known = ev.positions(win) >= 0
            wkey = np.full(win.size, np.inf)
            if known.any():
                wkey[known] = score(ev, win[known])
            stop = np.flatnonzero((known & (wkey < self.key)) | ~known)
            if stop.size == 0:
                self.pos += win.size
                continue
            f = int(stop[0])
            if known[f]:
                self._move(int(win[f]), float(wkey[f]))
                continue
            b = max(1, min(self.batch, evaluations - (ev.count - c0)))
            unk = np.flatnonzero(~known[f:])[:b] + f
            end = int(unk[-1]) + 1
            part = win[f:end]
            cls = self.qcls[self.pos + unk]
            self.pos += end
            key = score(ev, part)
            if self.stats is not None:
                ku = key[unk - f]
                # an improvement counts by its relative size (a large gain weighs more)
                gain = np.clip((self.key - ku) / max(abs(self.key), 1e-300), 0.0, 1.0)
                for st, *_rest in self.stats:
                    np.add.at(st[0], cls, 1.0)
                    np.add.at(st[1], cls, gain)
                    # ties count only among configurations that fit (every move that does
                    # not change the memory ties among those that do not)
                    np.add.at(st[2], cls, ((ku == self.key) & (self.key < INFEASIBLE))
                              .astype(np.float64))
                    if self.key < INFEASIBLE:
                        np.add.at(st[3], cls, 1.0)
            j = int(np.argmin(key))
            if key[j] < self.key:
                self._move(int(part[j]), float(key[j]))
            elif self.stages[self.stage] == "single":
                self._eager(ev, rng, part)

    def _move(self, idx: int, key: float) -> None:
        self.cur, self.key = idx, key
        self.queue, self.stage = None, 0
        self._tried = set()
        self._faster_oom = False
        self._pred = {}


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
