/* trainscape: the exhaustive sweep kernel (public C ABI).
 *
 * A design space (src/trainscape/space/design.py) is a table of valid "core" rows (values of
 * tp cp pp dp ep mbs vpp schedule sp tp_overlap, one contiguous array per field) and, under each
 * row, a mixed-radix number over the free axes:
 *     local = ((order_slot * n_rec + recompute) * z_r + zero) * d_r + dp_overlap
 * where order_slot ranges over the canonical placement orders of the row's degree mask
 * (order_flat[order_off[mask] .. + order_cnt[mask]]), z_r = n_zero and d_r = n_dpo, except in a
 * row with single[r] != 0 (no data-parallel group: zero and dp_overlap change nothing,
 * src/trainscape/space/canonical.py), where z_r = d_r = 1 (the first zero and dp_overlap values).
 * cum[r] is the first global index of row r; cum[n_rows] is the size of the space.
 *
 * ts_sweep_range enumerates global indices [start, stop) by index (no config arrays), costs
 * each configuration with the model, and reduces into per-worker buffers: top-k (smallest
 * (obj_sign * out[obj_col], index)), a Pareto front of step time vs memory (capacity cap per
 * worker, sorted by step time), the best configuration per placement order, and counters.
 * Worker w handles [start + (stop-start)*w/n_workers, start + (stop-start)*(w+1)/n_workers),
 * each on its own thread. No allocation, no globals; reentrant.
 *
 * Buffers (row-major, one row per worker): topk_key/topk_idx (n_workers, k);
 * f_step/f_mem/f_idx (n_workers, cap) with lengths f_n[n_workers]; o_key/o_idx
 * (n_workers, TS_N_ORDERS); stats (n_workers, TS_SWEEP_N_STATS). The caller initializes them
 * (keys +inf, indices -1, f_n 0, stats 0 and stats[TS_SWEEP_ST_MIN_MEM] = +inf) and may call
 * again to continue.
 *
 * Returns 0, TS_SWEEP_OVERFLOW when a worker's Pareto buffer was full (results partial: retry
 * with a larger cap), or a negative error code (TS_ERR_ARG for inconsistent space arrays or
 * ranges; the block errors of ts_check_blocks).
 */
#ifndef TRAINSCAPE_SWEEP_H
#define TRAINSCAPE_SWEEP_H

#include <stdint.h>

#include "trainscape.h"

#define TS_SWEEP_N_CORE 10
#define TS_SWEEP_N_STATS 5
#define TS_SWEEP_ST_EVALUATED 0
#define TS_SWEEP_ST_OK 1
#define TS_SWEEP_ST_OOM 2
#define TS_SWEEP_ST_INVALID 3
#define TS_SWEEP_ST_MIN_MEM 4
#define TS_SWEEP_OVERFLOW 1

int ts_sweep_range(const double *sys, const double *mdl, const double *job,
                   const int32_t *core, const int32_t *mask, const int32_t *single,
                   const int64_t *cum, int64_t n_rows, const int32_t *order_off, const int32_t *order_cnt, const int32_t *order_flat,
                   int32_t n_order_flat,
                   const int32_t *rec, int32_t n_rec, const int32_t *zero, int32_t n_zero,
                   const int32_t *dpo, int32_t n_dpo,
                   int64_t start, int64_t stop, int32_t obj_col, double obj_sign,
                   int32_t n_workers, int32_t k, int32_t cap,
                   double *topk_key, int64_t *topk_idx,
                   double *f_step, double *f_mem, int64_t *f_idx, int64_t *f_n,
                   double *o_key, int64_t *o_idx, double *stats);

#endif /* TRAINSCAPE_SWEEP_H */
