/* The scheduler query (trainscape_embed.h ts_llm_best): build the candidate set of a GPU count
 * and search it with the sweep kernel, in one call on the calling thread.
 *
 * The C twin of src/trainscape/space/design.py design_space (core table, canonical orders,
 * free axes, canonical forms of space/canonical.py: pp = 1 schedule / vpp rows collapsed, zero
 * and dp_overlap fixed to their first values where cp * dp = 1) followed by explore/sweep.py
 * run_sweep(top=1): the same rows, enumeration order and tie rule (smallest
 * (sign * objective, index)), so the same winner. Core combinations
 * whose degrees cannot multiply to the GPU count are skipped before the model's checks (they
 * fail config_error's product check; skipping them removes no valid row and keeps the order of
 * the others). Uses ts_sweep_worker of sweep.c: compiled in the same translation unit. */
#include <stdlib.h>
#include <string.h>

#include "trainscape_embed.h"
#include "sweep.h"
#include "ts_model.h"

/* Space vector fields: config columns in TS_CFG_* order without TS_CFG_ORDER. */
#define TS_SPACE_N_AXES 13
static const int ts_space_cfg[TS_SPACE_N_AXES] = {
    TS_CFG_TP, TS_CFG_CP, TS_CFG_PP, TS_CFG_DP, TS_CFG_EP, TS_CFG_MBS, TS_CFG_VPP,
    TS_CFG_SCHEDULE, TS_CFG_RECOMPUTE, TS_CFG_ZERO, TS_CFG_SP, TS_CFG_TP_OVERLAP,
    TS_CFG_DP_OVERLAP};
#define TS_N_MASKS (1 << TS_N_DIMS)

typedef struct {
    const int32_t *v[TS_N_CFG]; /* values per config column (indexed by TS_CFG_*) */
    int32_t n[TS_N_CFG];
    int32_t order_off[TS_N_MASKS], order_cnt[TS_N_MASKS];
    const int32_t *order_flat;
    int32_t n_order_flat;
} ts_space_view;

/* Parse and check the space vector; 0 or TS_ERR_SPACE. */
static int ts_space_parse(const int32_t *space, int64_t len, ts_space_view *S)
{
    int64_t p = 0, total = 0;
    if (!space || len < 0)
        return TS_ERR_SPACE;
    for (int a = 0; a < TS_SPACE_N_AXES; a++) {
        int c = ts_space_cfg[a];
        int32_t n;
        if (p >= len)
            return TS_ERR_SPACE;
        n = space[p++];
        if (n < 0 || n > len - p || (n == 0 && c != TS_CFG_DP && c != TS_CFG_SP))
            return TS_ERR_SPACE;
        S->n[c] = n;
        S->v[c] = space + p;
        p += n;
    }
    if (len - p < TS_N_MASKS)
        return TS_ERR_SPACE;
    for (int m = 0; m < TS_N_MASKS; m++) {
        int32_t n = space[p++];
        if (n < 0 || n > TS_N_ORDERS)
            return TS_ERR_SPACE;
        S->order_off[m] = (int32_t)total;
        S->order_cnt[m] = n;
        total += n;
    }
    if (len - p != total)
        return TS_ERR_SPACE;
    S->order_flat = space + p;
    S->n_order_flat = (int32_t)total;
    for (int64_t j = 0; j < total; j++)
        if (S->order_flat[j] < 0 || S->order_flat[j] >= TS_N_ORDERS)
            return TS_ERR_SPACE;
    return 0;
}

static int ts_objective_sign(int32_t objective, double *sign)
{
    switch (objective) {
    case TS_OUT_STEP_TIME_S:
    case TS_OUT_MEMORY_GIB:
        *sign = 1.0;
        return 0;
    case TS_OUT_TOKENS_PER_S:
    case TS_OUT_MFU:
    case TS_OUT_MODEL_TFLOPS_PER_GPU:
        *sign = -1.0;
        return 0;
    default:
        return TS_ERR_OBJECTIVE;
    }
}

uint32_t ts_layout_hash(void)
{
    return (uint32_t)TS_LAYOUT_HASH;
}

const char *ts_schedule_name(int32_t code)
{
    static const char *names[TS_SCHED_COUNT] = {"gpipe", "1f1b", "interleaved", "zb-h1",
                                                "zb-h2", "zb-v", "dualpipe", "dualpipe-v"};
    return code >= 0 && code < TS_SCHED_COUNT ? names[code] : "?";
}

const char *ts_recompute_name(int32_t code)
{
    static const char *names[TS_RECOMPUTE_COUNT] = {"none", "selective", "full", "dots",
                                                    "dots_no_mlp_in", "dots_attn", "qkv_proj",
                                                    "op_selective"};
    return code >= 0 && code < TS_RECOMPUTE_COUNT ? names[code] : "?";
}

/* The degree mask of a core row (space/orders.py degree_mask with dpx = dp / ep). */
static int32_t ts_row_mask(int64_t tp, int64_t cp, int64_t pp, int64_t dp, int64_t ep)
{
    int64_t dpx = ep > 0 ? dp / ep : dp;
    return (int32_t)((tp > 1) << TS_DIM_TP | (cp > 1) << TS_DIM_CP | (ep > 1) << TS_DIM_EP
                     | (dpx > 1) << TS_DIM_DP | (pp > 1) << TS_DIM_PP);
}

typedef struct {
    int32_t *rows; /* (n, TS_SWEEP_N_CORE) while building */
    int32_t *mask;
    int64_t n, cap;
} ts_core_buf;

static int ts_core_push(ts_core_buf *B, const int32_t row[TS_SWEEP_N_CORE], int32_t mask)
{
    if (B->n == B->cap) {
        int64_t cap = B->cap ? 2 * B->cap : 256;
        int32_t *rows = realloc(B->rows, (size_t)cap * TS_SWEEP_N_CORE * sizeof(int32_t));
        int32_t *masks;
        if (!rows)
            return TS_ERR_NOMEM;
        B->rows = rows;
        masks = realloc(B->mask, (size_t)cap * sizeof(int32_t));
        if (!masks)
            return TS_ERR_NOMEM;
        B->mask = masks;
        B->cap = cap;
    }
    memcpy(B->rows + B->n * TS_SWEEP_N_CORE, row, TS_SWEEP_N_CORE * sizeof(int32_t));
    B->mask[B->n] = mask;
    B->n++;
    return 0;
}

/* design_space's core table for `gpus`: every combination of the core values in C order (last
 * field fastest), dp derived and sp / tp_overlap canonicalized at tp = 1 as there, kept when
 * the model's core checks pass, ep divides dp and the mask has an order. */
static int ts_build_core(const ts_ctx *ctx, const ts_space_view *S, int64_t gpus,
                         ts_core_buf *B, int64_t *checked)
{
    const int dp_derived = S->n[TS_CFG_DP] == 0, sp_rule = S->n[TS_CFG_SP] == 0;
    int32_t sp_canon = 0, tpo_canon = S->v[TS_CFG_TP_OVERLAP][0];
    int32_t row[TS_SWEEP_N_CORE];
    int64_t n_checked = 0;
    if (!sp_rule) {
        sp_canon = S->v[TS_CFG_SP][0];
        for (int32_t j = 0; j < S->n[TS_CFG_SP]; j++)
            if (S->v[TS_CFG_SP][j] == 0)
                sp_canon = 0;
    }
    for (int32_t i0 = 0; i0 < S->n[TS_CFG_TP]; i0++) {
        int64_t tp = S->v[TS_CFG_TP][i0];
        for (int32_t i1 = 0; i1 < S->n[TS_CFG_CP]; i1++) {
            int64_t cp = S->v[TS_CFG_CP][i1];
            for (int32_t i2 = 0; i2 < S->n[TS_CFG_PP]; i2++) {
                int64_t pp = S->v[TS_CFG_PP][i2], inner = tp * cp * pp;
                int32_t n_dp = dp_derived ? 1 : S->n[TS_CFG_DP];
                if (dp_derived && (inner < 1 || gpus % inner != 0))
                    continue; /* no dp makes the product: config_error's check 15 */
                for (int32_t i3 = 0; i3 < n_dp; i3++) {
                    int64_t dp = dp_derived ? gpus / inner : S->v[TS_CFG_DP][i3];
                    if (!dp_derived && inner * dp != gpus)
                        continue;
                    for (int32_t i4 = 0; i4 < S->n[TS_CFG_EP]; i4++) {
                        int64_t ep = S->v[TS_CFG_EP][i4];
                        for (int32_t i5 = 0; i5 < S->n[TS_CFG_MBS]; i5++)
                        for (int32_t i6 = 0; i6 < S->n[TS_CFG_VPP]; i6++)
                        for (int32_t i7 = 0; i7 < S->n[TS_CFG_SCHEDULE]; i7++)
                        for (int32_t i8 = 0; i8 < (sp_rule ? 1 : S->n[TS_CFG_SP]); i8++)
                        for (int32_t i9 = 0; i9 < S->n[TS_CFG_TP_OVERLAP]; i9++) {
                            int64_t sp = sp_rule ? (tp > 1) : S->v[TS_CFG_SP][i8];
                            int64_t tpo = S->v[TS_CFG_TP_OVERLAP][i9];
                            int32_t mask;
                            int code, err;
                            if (tp <= 1 && ((!sp_rule && sp != sp_canon) || tpo != tpo_canon))
                                continue; /* tp = 1: sp and tp_overlap change nothing */
                            n_checked++;
                            code = ts_core_error(ctx, tp, cp, pp, dp, ep,
                                                 S->v[TS_CFG_MBS][i5], S->v[TS_CFG_VPP][i6],
                                                 S->v[TS_CFG_SCHEDULE][i7], sp, tpo);
                            if (code != 0 || dp % (ep > 1 ? ep : 1) != 0)
                                continue;
                            mask = ts_row_mask(tp, cp, pp, dp, ep);
                            if (S->order_cnt[mask] < 1)
                                continue;
                            row[0] = (int32_t)tp;
                            row[1] = (int32_t)cp;
                            row[2] = (int32_t)pp;
                            row[3] = (int32_t)dp;
                            row[4] = (int32_t)ep;
                            row[5] = S->v[TS_CFG_MBS][i5];
                            row[6] = S->v[TS_CFG_VPP][i6];
                            row[7] = S->v[TS_CFG_SCHEDULE][i7];
                            row[8] = (int32_t)sp;
                            row[9] = (int32_t)tpo;
                            err = ts_core_push(B, row, mask);
                            if (err != 0)
                                return err;
                        }
                    }
                }
            }
        }
    }
    *checked = n_checked;
    return 0;
}

/* canonical.py collapse_core_rows: of the rows without a pipeline (pp = 1) that differ only in
 * schedule and vpp, keep one per class (DualPipe, which keeps two parameter copies whatever pp,
 * is its own class): the preferred one -- 1F1B, then the schedules in code order, then the
 * smallest vpp, then the first in the table. The kept rows stay in table order. As there, the
 * grouping is by every field (rows with a pipeline are their own class). */
typedef struct {
    int64_t key[TS_SWEEP_N_CORE]; /* the class key (canonical.py collapse_core_rows) */
    int64_t first, vpp, idx;      /* the preference, then the table index */
} ts_collapse_item;

static int ts_collapse_cmp(const void *pa, const void *pb)
{
    const ts_collapse_item *a = pa, *b = pb;
    for (int f = 0; f < TS_SWEEP_N_CORE; f++)
        if (a->key[f] != b->key[f])
            return a->key[f] < b->key[f] ? -1 : 1;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->vpp != b->vpp)
        return a->vpp < b->vpp ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

static int ts_collapse_core(ts_core_buf *B)
{
    ts_collapse_item *it;
    unsigned char *keep;
    int64_t n = B->n, w = 0;
    if (n == 0)
        return 0;
    it = malloc((size_t)n * sizeof *it);
    keep = calloc((size_t)n, 1);
    if (!it || !keep) {
        free(it);
        free(keep);
        return TS_ERR_NOMEM;
    }
    for (int64_t r = 0; r < n; r++) {
        const int32_t *row = B->rows + r * TS_SWEEP_N_CORE;
        int64_t pp = row[2], vpp = row[6], sched = row[7];
        int64_t cls = pp > 1 ? -1 : (sched == TS_SCHED_DUALPIPE ? 1 : 0);
        for (int f = 0; f < TS_SWEEP_N_CORE; f++)
            it[r].key[f] = row[f];
        it[r].key[6] = cls < 0 ? vpp : 0;
        it[r].key[7] = cls < 0 ? sched : -1 - cls;
        it[r].first = cls < 0 ? 0 : (sched == TS_SCHED_1F1B ? -1 : sched) + 1;
        it[r].vpp = cls < 0 ? 0 : vpp;
        it[r].idx = r;
    }
    qsort(it, (size_t)n, sizeof *it, ts_collapse_cmp);
    for (int64_t j = 0; j < n; j++)
        if (j == 0 || memcmp(it[j].key, it[j - 1].key, sizeof it[j].key) != 0)
            keep[it[j].idx] = 1;
    for (int64_t r = 0; r < n; r++) {
        if (!keep[r])
            continue;
        if (w != r) {
            memmove(B->rows + w * TS_SWEEP_N_CORE, B->rows + r * TS_SWEEP_N_CORE,
                    TS_SWEEP_N_CORE * sizeof(int32_t));
            B->mask[w] = B->mask[r];
        }
        w++;
    }
    B->n = w;
    free(it);
    free(keep);
    return 0;
}

int ts_llm_best(const double *sys, const double *mdl, const double *job,
                const int32_t *space, int64_t space_len, int64_t gpus, int32_t objective,
                int32_t *cfg_out, double *out, int64_t *stats)
{
    static const int core_cfg[TS_SWEEP_N_CORE] = {
        TS_CFG_TP, TS_CFG_CP, TS_CFG_PP, TS_CFG_DP, TS_CFG_EP,
        TS_CFG_MBS, TS_CFG_VPP, TS_CFG_SCHEDULE, TS_CFG_SP, TS_CFG_TP_OVERLAP};
    double sys_g[TS_N_SYS], sign, topk_key = INFINITY, o_key[TS_N_ORDERS];
    double sweep_stats[TS_SWEEP_N_STATS] = {0, 0, 0, 0, INFINITY}, dummy_f = 0;
    double best_out[TS_N_OUT];
    int64_t topk_idx = -1, o_idx[TS_N_ORDERS], f_n = 0, dummy_i = 0, checked = 0, g, rem;
    int32_t rec[TS_RECOMPUTE_COUNT + 64], n_rec = 0, cfg[TS_N_CFG];
    int8_t orders[TS_N_ORDERS][TS_N_DIMS];
    ts_space_view S;
    ts_core_buf B = {NULL, NULL, 0, 0};
    ts_ctx ctx;
    ts_sweep_job J;
    int32_t *core = NULL, *single = NULL, nz, nd;
    int64_t *cum = NULL, lo, hi, row;
    int err, has_none = 0, has_sel = 0;

    if (!sys || !mdl || !job)
        return TS_ERR_ARG;
    err = ts_objective_sign(objective, &sign);
    if (err != 0)
        return err;
    err = ts_space_parse(space, space_len, &S);
    if (err != 0)
        return err;
    memcpy(sys_g, sys, sizeof sys_g);
    if (gpus < 1 || gpus > INT32_MAX)
        return TS_ERR_GPUS;
    sys_g[TS_SYS_GPUS] = (double)gpus;
    err = ts_ctx_init(&ctx, sys_g, mdl, job);
    if (err != 0)
        return err;
    if ((double)gpus > ts_tier_capacity(sys_g))
        return TS_ERR_GPUS;
    for (int o = 0; o < TS_N_ORDERS; o++)
        ts_order_permutation(o, orders[o]);
    ctx.orders = (const int8_t(*)[TS_N_DIMS])orders;

    /* recompute: selective equals none under flash attention without recompute modules
     * (design.py selective_is_none keeps one) */
    if (S.n[TS_CFG_RECOMPUTE] > (int32_t)(sizeof rec / sizeof *rec))
        return TS_ERR_SPACE;
    for (int32_t j = 0; j < S.n[TS_CFG_RECOMPUTE]; j++) {
        has_none |= S.v[TS_CFG_RECOMPUTE][j] == TS_RECOMPUTE_NONE;
        has_sel |= S.v[TS_CFG_RECOMPUTE][j] == TS_RECOMPUTE_SELECTIVE;
    }
    for (int32_t j = 0; j < S.n[TS_CFG_RECOMPUTE]; j++) {
        int32_t v = S.v[TS_CFG_RECOMPUTE][j];
        if (job[TS_JOB_FLASH_ATTENTION] > 0 && job[TS_JOB_RECOMPUTE_LAYERNORM] == 0
            && job[TS_JOB_RECOMPUTE_MOE_ACT] == 0 && job[TS_JOB_RECOMPUTE_MLP] == 0
            && job[TS_JOB_RECOMPUTE_MOE] == 0 && job[TS_JOB_RECOMPUTE_SHARED_EXPERTS] == 0
            && has_none && has_sel
            && v == TS_RECOMPUTE_SELECTIVE)
            continue;
        rec[n_rec++] = v;
    }

    err = ts_build_core(&ctx, &S, gpus, &B, &checked);
    if (err == 0)
        err = ts_collapse_core(&B);
    if (err == 0 && B.n > 0) {
        /* canonical.py single_rows: without a data-parallel group (cp * dp = 1) a row takes
         * only the first zero and dp_overlap values */
        int64_t per = (int64_t)S.n[TS_CFG_ZERO] * S.n[TS_CFG_DP_OVERLAP];
        core = malloc((size_t)B.n * TS_SWEEP_N_CORE * sizeof(int32_t));
        single = malloc((size_t)B.n * sizeof(int32_t));
        cum = malloc((size_t)(B.n + 1) * sizeof(int64_t));
        if (!core || !single || !cum) {
            err = TS_ERR_NOMEM;
        } else {
            cum[0] = 0;
            for (int64_t r = 0; r < B.n; r++) {
                const int32_t *rw = B.rows + r * TS_SWEEP_N_CORE;
                for (int f = 0; f < TS_SWEEP_N_CORE; f++)
                    core[(int64_t)f * B.n + r] = rw[f];
                single[r] = (int64_t)rw[1] * rw[3] == 1;
                cum[r + 1] = cum[r] + (int64_t)S.order_cnt[B.mask[r]] * n_rec
                                          * (single[r] ? 1 : per);
            }
        }
    }
    if (err != 0)
        goto done;
    hi = B.n > 0 ? cum[B.n] : 0;
    lo = 0;
    if (hi > 0) {
        for (int o = 0; o < TS_N_ORDERS; o++) {
            o_key[o] = INFINITY;
            o_idx[o] = -1;
        }
        memset(&J, 0, sizeof J);
        J.ctx = &ctx;
        J.core = core;
        J.mask = B.mask;
        J.single = single;
        J.order_off = S.order_off;
        J.order_cnt = S.order_cnt;
        J.order_flat = S.order_flat;
        J.rec = rec;
        J.zero = S.v[TS_CFG_ZERO];
        J.dpo = S.v[TS_CFG_DP_OVERLAP];
        J.cum = cum;
        J.n_rows = B.n;
        J.n_rec = n_rec;
        J.n_zero = S.n[TS_CFG_ZERO];
        J.n_dpo = S.n[TS_CFG_DP_OVERLAP];
        J.obj_col = objective;
        J.obj_sign = sign;
        J.k = 1;
        J.cap = 0; /* no Pareto front */
        J.lo = lo;
        J.hi = hi;
        J.topk_key = &topk_key;
        J.topk_idx = &topk_idx;
        J.f_step = &dummy_f;
        J.f_mem = &dummy_f;
        J.f_idx = &dummy_i;
        J.f_n = &f_n;
        J.o_key = o_key;
        J.o_idx = o_idx;
        J.stats = sweep_stats;
        J.prune_step = objective == TS_OUT_STEP_TIME_S;
        ts_sweep_worker(&J);
    }
    if (stats) {
        stats[TS_BEST_ST_CANDIDATES] = hi;
        stats[TS_BEST_ST_COSTED] = (int64_t)sweep_stats[TS_SWEEP_ST_EVALUATED];
        stats[TS_BEST_ST_FEASIBLE] = (int64_t)sweep_stats[TS_SWEEP_ST_OK];
        stats[TS_BEST_ST_CORE_ROWS] = B.n;
        stats[TS_BEST_ST_CORE_CHECKED] = checked;
    }
    if (topk_idx < 0) {
        err = TS_BEST_NONE;
        goto done;
    }
    /* decode the winner (design.py DesignSpace.decode) and cost it once more for its columns */
    g = topk_idx;
    {
        int64_t a = 0, b = B.n;
        while (b - a > 1) {
            int64_t mid = (a + b) / 2;
            if (cum[mid] <= g)
                a = mid;
            else
                b = mid;
        }
        row = a;
    }
    rem = g - cum[row];
    for (int f = 0; f < TS_N_CFG; f++)
        cfg[f] = 0;
    for (int f = 0; f < TS_SWEEP_N_CORE; f++)
        cfg[core_cfg[f]] = core[(int64_t)f * B.n + row];
    nz = single[row] ? 1 : S.n[TS_CFG_ZERO];
    nd = single[row] ? 1 : S.n[TS_CFG_DP_OVERLAP];
    cfg[TS_CFG_DP_OVERLAP] = S.v[TS_CFG_DP_OVERLAP][rem % nd];
    rem /= nd;
    cfg[TS_CFG_ZERO] = S.v[TS_CFG_ZERO][rem % nz];
    rem /= nz;
    cfg[TS_CFG_RECOMPUTE] = rec[rem % n_rec];
    rem /= n_rec;
    cfg[TS_CFG_ORDER] = S.order_flat[S.order_off[B.mask[row]] + rem];
    ts_evaluate_config(&ctx, cfg, 1, best_out, 1);
    if (cfg_out)
        memcpy(cfg_out, cfg, sizeof cfg);
    if (out)
        memcpy(out, best_out, sizeof best_out);
    err = 0;
done:
    free(B.rows);
    free(B.mask);
    free(core);
    free(single);
    free(cum);
    return err;
}
