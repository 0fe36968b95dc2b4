/* The exhaustive sweep kernel: enumeration by index over a design space, the cost model per
 * configuration, per-worker top-k / Pareto / best-per-order reduction (see sweep.h).
 *
 * The C twin of src/trainscape/explore/kernel_numba.py: same enumeration order, same tie rules
 * (src/trainscape/explore/reduce.py), so both give identical results. */
#include "sweep.h"
#include "ts_model.h"

#ifdef _OPENMP
#include <omp.h>
#else
#include <pthread.h>
#endif

#define TS_SWEEP_MAX_WORKERS 256

/* Config column of each core field, in the order of space/design.py CORE_FIELDS. */
static const int ts_sweep_core_cfg[TS_SWEEP_N_CORE] = {
    TS_CFG_TP, TS_CFG_CP, TS_CFG_PP, TS_CFG_DP, TS_CFG_EP,
    TS_CFG_MBS, TS_CFG_VPP, TS_CFG_SCHEDULE, TS_CFG_SP, TS_CFG_TP_OVERLAP};

typedef struct {
    const ts_ctx *ctx;
    const int32_t *core, *mask, *single, *order_off, *order_cnt, *order_flat, *rec, *zero, *dpo;
    const int64_t *cum;
    int64_t n_rows;
    int32_t n_rec, n_zero, n_dpo;
    int32_t obj_col;
    double obj_sign;
    int32_t k, cap;
    int64_t lo, hi;
    double *topk_key;
    int64_t *topk_idx;
    double *f_step, *f_mem;
    int64_t *f_idx, *f_n;
    double *o_key;
    int64_t *o_idx;
    double *stats;
    int overflow;
    /* k = 1, objective step time: skip the zero / dp_overlap digits under a recompute choice
     * whose step time before DP communication and optimizer (ts_rec.step_pre, a lower bound:
     * ts_final adds non-negative terms) is not below the best so far; they cannot win (a tie
     * loses to the earlier index). Used by ts_llm_best (best.c); counted in n_pruned. */
    int prune_step;
    int64_t n_pruned;
} ts_sweep_job;

/* The slot of the largest (key, index) pair of a top-k buffer: the one an insertion replaces
 * (an empty slot, key +inf and index -1, counts as larger than any pair). */
static int32_t ts_topk_worst(const double *keys, const int64_t *idx, int32_t k)
{
    int32_t worst = 0;
    for (int32_t j = 1; j < k; j++)
        if (keys[j] > keys[worst] || (keys[j] == keys[worst] && idx[j] > idx[worst]))
            worst = j;
    return worst;
}

/* Keep the k smallest (key, g) pairs in unsorted slots; worst is ts_topk_worst of the buffer,
 * returned updated. */
static inline int32_t ts_topk_insert(double *keys, int64_t *idx, int32_t k, int32_t worst,
                                     double key, int64_t g)
{
    if (key < keys[worst] || (key == keys[worst] && (idx[worst] < 0 || g < idx[worst]))) {
        keys[worst] = key;
        idx[worst] = g;
        return ts_topk_worst(keys, idx, k);
    }
    return worst;
}

/* Insert (s, m, g) into a front sorted by step (memory strictly decreasing); returns the new
 * length or -1 when full. */
static int64_t ts_pareto_insert(double *fs, double *fm, int64_t *fi, int64_t n, int32_t cap,
                                double s, double m, int64_t g)
{
    int64_t lo = 0, hi = n, pos, end, removed;
    /* dominated by the first point (the front's memory decreases along it): the search below
     * would land at pos >= 1 with fm[pos - 1] <= fm[0] <= m */
    if (n > 0 && fs[0] < s && fm[0] <= m)
        return n;
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (fs[mid] < s)
            lo = mid + 1;
        else
            hi = mid;
    }
    pos = lo;
    if (pos > 0 && fm[pos - 1] <= m)
        return n;
    if (pos < n && fs[pos] == s && (fm[pos] < m || (fm[pos] == m && fi[pos] < g)))
        return n;
    end = pos;
    while (end < n && fm[end] >= m)
        end++;
    removed = end - pos;
    if (removed == 0) {
        if (n >= cap)
            return -1;
        for (int64_t j = n; j > pos; j--) {
            fs[j] = fs[j - 1];
            fm[j] = fm[j - 1];
            fi[j] = fi[j - 1];
        }
        n++;
    } else if (removed > 1) {
        int64_t shift = removed - 1;
        for (int64_t j = pos + 1; j < n - shift; j++) {
            fs[j] = fs[j + shift];
            fm[j] = fm[j + shift];
            fi[j] = fi[j + shift];
        }
        n -= shift;
    }
    fs[pos] = s;
    fm[pos] = m;
    fi[pos] = g;
    return n;
}

/* One worker: indices [lo, hi) in enumeration order. Consecutive indices share their core row
 * (and, within it, their order and recompute choice), so the staged model (ts_row_init,
 * ts_ord_init, ts_rec_init, ts_final; see ts_model.h) recomputes a stage only when the odometer
 * digit it depends on moves: per configuration only the zero / dp_overlap part runs. */
static void ts_sweep_worker(ts_sweep_job *J)
{
    const ts_ctx *ctx = J->ctx;
    int32_t core_cfg[TS_N_CFG];
    double out[TS_N_OUT];
    int64_t a = 0, b = J->n_rows, row, rem, nfront = *J->f_n;
    int64_t n_eval = 0, n_ok = 0, n_oom = 0, n_invalid = 0;
    double min_mem = J->stats[TS_SWEEP_ST_MIN_MEM];
    int32_t d, z, r, slot, m = 0, order = 0, worst, nz_r, nd_r;
    int level = 3; /* the stages to recompute: 3 row, 2 order, 1 recompute, 0 none */
    int row_bad = 0, ord_bad = 0, rec_bad = 0;
    ts_row R;
    ts_ord O;
    ts_rec V;
    if (J->hi <= J->lo)
        return;
    /* the row holding lo: cum[row] <= lo < cum[row + 1] */
    while (b - a > 1) {
        int64_t mid = (a + b) / 2;
        if (J->cum[mid] <= J->lo)
            a = mid;
        else
            b = mid;
    }
    row = a;
    rem = J->lo - J->cum[row];
    nz_r = J->single[row] ? 1 : J->n_zero;
    nd_r = J->single[row] ? 1 : J->n_dpo;
    d = (int32_t)(rem % nd_r);
    rem /= nd_r;
    z = (int32_t)(rem % nz_r);
    rem /= nz_r;
    r = (int32_t)(rem % J->n_rec);
    slot = (int32_t)(rem / J->n_rec);
    worst = ts_topk_worst(J->topk_key, J->topk_idx, J->k);
    for (int f = 0; f < TS_N_CFG; f++)
        core_cfg[f] = 0;
    for (int64_t g = J->lo; g < J->hi; g++) {
        int status;
        if (level >= 3) {
            m = J->mask[row];
            for (int f = 0; f < TS_SWEEP_N_CORE; f++)
                core_cfg[ts_sweep_core_cfg[f]] = J->core[(int64_t)f * J->n_rows + row];
            ts_row_init(ctx, core_cfg, 1, &R);
            row_bad = R.code != 0;
        }
        if (level >= 2) {
            order = J->order_flat[J->order_off[m] + slot];
            /* order is in range (ts_sweep_check_space); the free-field checks of config_error
             * are made per stage below */
            ord_bad = row_bad;
            if (!ord_bad)
                ts_ord_init(ctx, &R, order, &O);
        }
        if (level >= 1) {
            int32_t rc = J->rec[r];
            rec_bad = ord_bad || rc < 0 || rc >= TS_RECOMPUTE_COUNT;
            if (!rec_bad)
                ts_rec_init(ctx, &R, &O, rc, &V);
            if (J->prune_step && !rec_bad && V.step_pre >= J->topk_key[0]) {
                int64_t left = (int64_t)(nz_r - z) * nd_r - d;
                if (left > J->hi - g)
                    left = J->hi - g;
                J->n_pruned += left;
                g += left - 1;
                d = nd_r - 1;
                z = nz_r - 1;
                goto advance;
            }
        }
        if (rec_bad || J->zero[z] < 0 || J->zero[z] > 3 || J->dpo[d] < 0 || J->dpo[d] > 1)
            status = TS_STATUS_INVALID_CONFIG;
        else
            status = ts_final(ctx, &R, &O, &V, J->zero[z], J->dpo[d] == 1, out, 1);
        n_eval++;
        if (status == TS_STATUS_OK || status == TS_STATUS_OUT_OF_MEMORY) {
            double mem = out[TS_OUT_MEMORY_GIB];
            if (mem < min_mem)
                min_mem = mem;
            if (out[TS_OUT_FEASIBLE] == 1.0) {
                double key = J->obj_sign * out[J->obj_col];
                int64_t nn;
                n_ok++;
                worst = ts_topk_insert(J->topk_key, J->topk_idx, J->k, worst, key, g);
                if (key < J->o_key[order] || (key == J->o_key[order] && g < J->o_idx[order])) {
                    J->o_key[order] = key;
                    J->o_idx[order] = g;
                }
                if (J->cap > 0) { /* cap 0: no front kept (ts_llm_best, best.c) */
                    nn = ts_pareto_insert(J->f_step, J->f_mem, J->f_idx, nfront, J->cap,
                                          out[TS_OUT_STEP_TIME_S], mem, g);
                    if (nn < 0) {
                        J->overflow = 1;
                        break;
                    }
                    nfront = nn;
                }
            } else {
                n_oom++;
            }
        } else {
            n_invalid++;
        }
    advance: /* the odometer */
        level = 0;
        if (++d == nd_r) {
            d = 0;
            if (++z == nz_r) {
                z = 0;
                level = 1;
                if (++r == J->n_rec) {
                    r = 0;
                    level = 2;
                    if (++slot == J->order_cnt[m]) {
                        slot = 0;
                        row++;
                        level = 3;
                        if (row < J->n_rows) {
                            nz_r = J->single[row] ? 1 : J->n_zero;
                            nd_r = J->single[row] ? 1 : J->n_dpo;
                        }
                    }
                }
            }
        }
    }
    J->stats[TS_SWEEP_ST_EVALUATED] += (double)n_eval;
    J->stats[TS_SWEEP_ST_OK] += (double)n_ok;
    J->stats[TS_SWEEP_ST_OOM] += (double)n_oom;
    J->stats[TS_SWEEP_ST_INVALID] += (double)n_invalid;
    J->stats[TS_SWEEP_ST_MIN_MEM] = min_mem;
    *J->f_n = nfront;
}

#ifndef _OPENMP
static void *ts_sweep_thread(void *arg)
{
    ts_sweep_worker((ts_sweep_job *)arg);
    return NULL;
}
#endif

/* The space arrays are consistent: every index decodes inside them. */
static int ts_sweep_check_space(const int32_t *core, const int32_t *mask, const int32_t *single,
                                const int64_t *cum, int64_t n_rows, const int32_t *order_off,
                                const int32_t *order_cnt, const int32_t *order_flat,
                                int32_t n_order_flat, int32_t n_rec, int32_t n_zero,
                                int32_t n_dpo)
{
    int64_t per;
    if (!core || !mask || !single || !cum || !order_off || !order_cnt || !order_flat || n_rows < 0)
        return 0;
    if (n_rec < 1 || n_zero < 1 || n_dpo < 1 || cum[0] != 0)
        return 0;
    for (int msk = 0; msk < (1 << TS_N_DIMS); msk++) {
        if (order_off[msk] < 0 || order_cnt[msk] < 0
            || (int64_t)order_off[msk] + order_cnt[msk] > n_order_flat)
            return 0;
    }
    for (int32_t j = 0; j < n_order_flat; j++)
        if (order_flat[j] < 0 || order_flat[j] >= TS_N_ORDERS)
            return 0;
    for (int64_t r = 0; r < n_rows; r++) {
        if (mask[r] < 0 || mask[r] >= (1 << TS_N_DIMS) || order_cnt[mask[r]] < 1)
            return 0;
        per = single[r] ? (int64_t)n_rec : (int64_t)n_rec * n_zero * n_dpo;
        if (cum[r + 1] - cum[r] != (int64_t)order_cnt[mask[r]] * per)
            return 0;
    }
    return 1;
}

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
                   double *o_key, int64_t *o_idx, double *stats)
{
    ts_ctx ctx;
    int8_t orders[TS_N_ORDERS][TS_N_DIMS];
    ts_sweep_job jobs[TS_SWEEP_MAX_WORKERS];
    int err, overflow = 0;
    int64_t total;
    if (!rec || !zero || !dpo || !topk_key || !topk_idx || !f_step || !f_mem || !f_idx || !f_n
        || !o_key || !o_idx || !stats)
        return TS_ERR_ARG;
    if (n_workers < 1 || n_workers > TS_SWEEP_MAX_WORKERS || k < 1 || cap < 1)
        return TS_ERR_ARG;
    if (obj_col < 0 || obj_col >= TS_N_OUT)
        return TS_ERR_ARG;
    if (!ts_sweep_check_space(core, mask, single, cum, n_rows, order_off, order_cnt, order_flat,
                              n_order_flat, n_rec, n_zero, n_dpo))
        return TS_ERR_ARG;
    if (start < 0 || stop < start || stop > cum[n_rows])
        return TS_ERR_ARG;
    for (int32_t w = 0; w < n_workers; w++)
        if (f_n[w] < 0 || f_n[w] > cap)
            return TS_ERR_ARG;
    err = ts_ctx_init(&ctx, sys, mdl, job);
    if (err != 0)
        return err;
    for (int o = 0; o < TS_N_ORDERS; o++)
        ts_order_permutation(o, orders[o]);
    ctx.orders = (const int8_t(*)[TS_N_DIMS])orders;
    total = stop - start;
    for (int32_t w = 0; w < n_workers; w++) {
        ts_sweep_job *J = &jobs[w];
        J->ctx = &ctx;
        J->core = core;
        J->mask = mask;
        J->single = single;
        J->order_off = order_off;
        J->order_cnt = order_cnt;
        J->order_flat = order_flat;
        J->rec = rec;
        J->zero = zero;
        J->dpo = dpo;
        J->cum = cum;
        J->n_rows = n_rows;
        J->n_rec = n_rec;
        J->n_zero = n_zero;
        J->n_dpo = n_dpo;
        J->obj_col = obj_col;
        J->obj_sign = obj_sign;
        J->k = k;
        J->cap = cap;
        J->lo = start + total * w / n_workers;
        J->hi = start + total * (w + 1) / n_workers;
        J->topk_key = topk_key + (int64_t)w * k;
        J->topk_idx = topk_idx + (int64_t)w * k;
        J->f_step = f_step + (int64_t)w * cap;
        J->f_mem = f_mem + (int64_t)w * cap;
        J->f_idx = f_idx + (int64_t)w * cap;
        J->f_n = f_n + w;
        J->o_key = o_key + (int64_t)w * TS_N_ORDERS;
        J->o_idx = o_idx + (int64_t)w * TS_N_ORDERS;
        J->stats = stats + (int64_t)w * TS_SWEEP_N_STATS;
        J->overflow = 0;
        J->prune_step = 0;
        J->n_pruned = 0;
    }
    if (n_workers == 1) {
        ts_sweep_worker(&jobs[0]);
    } else {
#ifdef _OPENMP
#pragma omp parallel for num_threads(n_workers) schedule(static, 1)
        for (int32_t w = 0; w < n_workers; w++)
            ts_sweep_worker(&jobs[w]);
#else
        pthread_t th[TS_SWEEP_MAX_WORKERS];
        int started[TS_SWEEP_MAX_WORKERS];
        for (int32_t w = 1; w < n_workers; w++)
            started[w] = pthread_create(&th[w], NULL, ts_sweep_thread, &jobs[w]) == 0;
        ts_sweep_worker(&jobs[0]);
        for (int32_t w = 1; w < n_workers; w++) {
            if (started[w])
                pthread_join(th[w], NULL);
            else
                ts_sweep_worker(&jobs[w]);
        }
#endif
    }
    for (int32_t w = 0; w < n_workers; w++)
        overflow |= jobs[w].overflow;
    return overflow ? TS_SWEEP_OVERFLOW : 0;
}
