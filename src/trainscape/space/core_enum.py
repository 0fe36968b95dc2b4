"""Candidate rows of the core table, pruned by the constraints that only some axes decide.

The core table (:mod:`trainscape.space.design`) holds the valid combinations of the core axes.
Checking their plain product would cost time in proportion to it: with wide value lists
(``tp`` 1..128, ``pp`` 1..128, ``mbs`` 1..64 ...) that product reaches 10^12 and beyond while
only a few thousand combinations are valid, because ``tp * cp * pp * dp`` must equal the GPU
count. So the combinations are built degree by degree, and a partial combination that already
fails a check is dropped with everything below it:

1. ``tp, cp, pp`` (and ``dp`` when it is an axis) whose product is the GPU count (derived ``dp``
   otherwise) -- :func:`~trainscape.model.llm.config_error` code 15;
2. ``tp`` that divides the heads (16) and fits the KV heads (17);
3. ``mbs`` with ``dp * mbs`` dividing the global batch (18).

Each pruned partial combination is counted under the code the kernel would give each of the
full combinations below it, which is exact because the kernel checks these codes first, in
this order (codes 1-14 are value ranges, already checked on the axis lists). The rest of the
checks run in the kernel itself on the surviving rows. Rows come out in the order of the
plain product (``tp`` outermost, ``tp_overlap`` innermost), so global indices do not depend on
the pruning; ``tests/test_space_core_enum.py`` holds the result to a brute-force tabulation.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .. import layout as L

# indices into CORE_FIELDS (see trainscape.space.design)
_TP, _CP, _PP, _DP, _EP, _MBS, _VPP, _SCHEDULE, _SP, _TPO = range(10)
#: Codes of :func:`trainscape.model.llm.config_error` decided here.
CODE_PRODUCT, CODE_HEADS, CODE_KV_HEADS, CODE_BATCH = 15, 16, 17, 18


def _heads_code(tp: int, heads: int, kv_heads: int) -> int:
    """Code 16 / 17 of ``config_error`` for a tensor-parallel degree (0 when it passes)."""
    if heads % tp != 0:
        return CODE_HEADS
    if kv_heads % tp != 0 and tp % kv_heads != 0:
        return CODE_KV_HEADS
    return 0


class CoreCandidates:
    """The pruned candidate rows of a core space, generated in chunks.

    ``vals`` are the encoded value lists of the core fields (``dp`` a one-element placeholder
    when derived, ``sp`` one element -1 for the rule "on when tp > 1"). ``n_candidates`` is the
    number of rows left to check in the kernel (known before generating them); ``rejections``
    counts the pruned combinations by code, as the kernel would have.
    """

    def __init__(self, vals: list[np.ndarray], dp_derived: bool, gpus: int, mdl, job):
        self.vals = vals
        self.dp_derived = dp_derived
        self.rejections: dict[int, int] = {}
        heads, kv_heads = int(mdl[L.MDL_HEADS]), int(mdl[L.MDL_KV_HEADS])
        batch = int(job[L.JOB_GLOBAL_BATCH])
        n = [len(v) for v in vals]
        n_ep, n_mbs = n[_EP], n[_MBS]
        n_tail = n[_VPP] * n[_SCHEDULE]  # axes below mbs, before the sp / tp_overlap pair

        def pairs(tp: int) -> int:
            # with tp = 1 only the canonical (sp, tp_overlap) pair is tabulated
            return n[_SP] * n[_TPO] if tp > 1 else 1

        def reject(code: int, count: int) -> None:
            if count:
                self.rejections[code] = self.rejections.get(code, 0) + count

        dp_vals = None if dp_derived else np.asarray(vals[_DP], dtype=np.int64)
        n_dp = 1 if dp_derived else len(dp_vals)
        cp_vals = np.asarray(vals[_CP], dtype=np.int64)
        pp_vals = np.asarray(vals[_PP], dtype=np.int64)
        below_dp = n_ep * n_mbs * n_tail  # full combinations under one (tp, cp, pp, dp)
        s4: list[tuple[int, int, int, int]] = []
        for tp in (int(v) for v in vals[_TP]):
            per = below_dp * pairs(tp)
            if gpus % tp:
                reject(CODE_PRODUCT, n[_CP] * n[_PP] * n_dp * per)
                continue
            heads_code = _heads_code(tp, heads, kv_heads)
            cp_ok = (gpus // tp) % cp_vals == 0
            reject(CODE_PRODUCT, int((~cp_ok).sum()) * n[_PP] * n_dp * per)
            for cp in cp_vals[cp_ok].tolist():
                rest = gpus // (tp * cp)
                pp_ok = rest % pp_vals == 0
                reject(CODE_PRODUCT, int((~pp_ok).sum()) * n_dp * per)
                for pp in pp_vals[pp_ok].tolist():
                    if dp_derived:
                        dps = [rest // pp]
                    else:
                        dps = dp_vals[dp_vals * pp == rest].tolist()
                        reject(CODE_PRODUCT, (n_dp - len(dps)) * per)
                    if heads_code:
                        reject(heads_code, len(dps) * per)
                        continue
                    s4.extend((tp, cp, pp, dp) for dp in dps)
        # mbs values each data-parallel degree admits (code 18), in list order
        mbs_vals = [int(v) for v in vals[_MBS]]
        ok_mbs: dict[int, list[int]] = {}
        counts = np.zeros(len(s4), dtype=np.int64)
        for i, (tp, _cp, _pp, dp) in enumerate(s4):
            good = ok_mbs.get(dp)
            if good is None:
                good = ok_mbs[dp] = [m for m in mbs_vals if batch % (dp * m) == 0]
            reject(CODE_BATCH, n_ep * (n_mbs - len(good)) * n_tail * pairs(tp))
            # candidate rows generated (before the canonical (sp, tp_overlap) filter)
            counts[i] = n_ep * len(good) * n_tail * n[_SP] * n[_TPO]
        self._s4 = np.array(s4, dtype=np.int64).reshape(-1, 4)
        dps = sorted(ok_mbs)
        self._dp_slot = {d: j for j, d in enumerate(dps)}
        width = max([len(ok_mbs[d]) for d in dps], default=0)
        self._mbs = np.zeros((len(dps), max(width, 1)), dtype=np.int64)
        self._n_mbs = np.zeros(len(dps), dtype=np.int64)
        for d, j in self._dp_slot.items():
            self._mbs[j, :len(ok_mbs[d])] = ok_mbs[d]
            self._n_mbs[j] = len(ok_mbs[d])
        self._slot_of_row = np.array([self._dp_slot[r[3]] for r in s4], dtype=np.int64)
        self._cum = np.zeros(len(s4) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._cum[1:])
        self._n = n

    @property
    def n_candidates(self) -> int:
        """Rows generated (before the canonical ``sp`` / ``tp_overlap`` filter at ``tp = 1``)."""
        return int(self._cum[-1])

    def chunks(self, size: int) -> Iterator[np.ndarray]:
        """``int32 (N_CORE, m)`` candidate columns, ``size`` at a time, in the plain product's
        order (``dp`` filled in when derived)."""
        n = self._n
        total = self.n_candidates
        for start in range(0, total, size):
            flat = np.arange(start, min(total, start + size), dtype=np.int64)
            row = np.searchsorted(self._cum, flat, side="right") - 1
            local = flat - self._cum[row]
            tpo = local % n[_TPO]
            local //= n[_TPO]
            sp = local % n[_SP]
            local //= n[_SP]
            sched = local % n[_SCHEDULE]
            local //= n[_SCHEDULE]
            vpp = local % n[_VPP]
            local //= n[_VPP]
            slot = self._slot_of_row[row]
            n_mbs = self._n_mbs[slot]
            mbs = self._mbs[slot, local % n_mbs]
            ep = local // n_mbs
            cols = np.empty((10, flat.size), dtype=np.int32)
            cols[_TP:_DP + 1] = self._s4[row].T
            cols[_EP] = self.vals[_EP][ep]
            cols[_MBS] = mbs
            cols[_VPP] = self.vals[_VPP][vpp]
            cols[_SCHEDULE] = self.vals[_SCHEDULE][sched]
            cols[_SP] = self.vals[_SP][sp]
            cols[_TPO] = self.vals[_TPO][tpo]
            yield cols
