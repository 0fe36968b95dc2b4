/* DLRM step-time and memory model: a port of src/trainscape/dlrm/reference.py (the spec),
 * calling the LLM port's twins of src/trainscape/model/network.py and collectives.py.
 * Sources are cited in the reference; names match it one to one.
 * Pure: no allocation, no I/O, no global state; indexes are checked before use. */
#include <math.h>
#include <stdint.h>

#include "dlrm.h"

#define GIB 1073741824.0

/* a > b ? a : b returns b for a NaN or an equal pair, as a >= b ? a : b does up to the sign of
 * zero, and maps onto one maxsd / minsd */
static inline double dmax(double a, double b) { return a > b ? a : b; }
static inline double dmin(double a, double b) { return a < b ? a : b; }

/* ---- network.py, collectives.py ------------------------------------------------------
 * The LLM port's tier and collective functions (csrc/network.c, csrc/collectives.c, twins of
 * model/network.py and model/collectives.py), compiled into this unit rather than copied: the
 * DLRM system block is the LLM's (DL_SYS_* == TS_SYS_*). */
#include "ts_model.h"
#include "network.c"
#include "collectives.c"

/* the shared functions index the system block with TS_* fields: it must be the same layout */
typedef char dl_sys_layout_is_the_llm_one[
    ((int)DL_SYS_N_TIERS == (int)TS_SYS_N_TIERS && (int)DL_SYS_TIER_BASE == TS_SYS_TIER_BASE &&
     (int)DL_N_TIER == TS_N_TIER && (int)DL_MAX_TIERS == TS_MAX_TIERS &&
     (int)DL_TIER_BANDWIDTH == (int)TS_TIER_BANDWIDTH &&
     (int)DL_TIER_LATENCY == (int)TS_TIER_LATENCY) ? 1 : -1];

/* ---- reference.py ---------------------------------------------------------------------- */
#define W(f, r) work[(int64_t)(f) * stride_w + (r)]

/* TorchRec planner constants (torchrec/distributed/planner/constants.py), as in reference.py */
#define FULL_BLOCK_EMB_DIM 128.0
#define HALF_BLOCK_PENALTY 1.15
#define QUARTER_BLOCK_PENALTY 1.75
#define MIN_KERNEL_DIM 32.0
#define UVM_KERNEL_EFFICIENCY 0.1
#define BATCHED_COPY_PERF_FACTOR 2.455
#define DENSE_KERNEL_EFFICIENCY 0.5

/* reference.ssd_prefetch_pipelined */
static inline int ssd_prefetch_pipelined(const double *job) {
    return job[DL_DJOB_SSD_BYTES] > 0.0 && job[DL_DJOB_PREFETCH_DEPTH] >= 1.0;
}
static double lookup_seconds_per_byte(const double *sys, const double *job, int tier,
                                      double hit_rate) {
    double hbm = sys[DL_SYS_HBM_BANDWIDTH] * job[DL_DJOB_LOOKUP_EFFICIENCY];
    double h2d = job[DL_DJOB_H2D_BANDWIDTH];
    if (tier == DL_MT_HBM) return 1.0 / hbm;
    if (tier == DL_MT_KEY_VALUE && ssd_prefetch_pipelined(job)) return 1.0 / hbm;
    if (tier == DL_MT_UVM_CACHE)
        return 1.0 / ((hit_rate * hbm + (1.0 - hit_rate) * h2d) * UVM_KERNEL_EFFICIENCY);
    if (tier == DL_MT_DENSE) return 1.0 / (hbm * DENSE_KERNEL_EFFICIENCY);
    if (tier == DL_MT_KEY_VALUE) return 1.0 / h2d;
    return 1.0 / (h2d * UVM_KERNEL_EFFICIENCY);
}
static inline double lookup_bytes(double lookups, double dim, double emb_bytes,
                                  double index_bytes, double outputs, double out_bytes) {
    return lookups * index_bytes + lookups * dim * emb_bytes + outputs * dim * out_bytes;
}
static inline double block_usage_penalty(double width) {
    if (width >= FULL_BLOCK_EMB_DIM) return 1.0;
    if (width >= 0.5 * FULL_BLOCK_EMB_DIM) return HALF_BLOCK_PENALTY;
    return QUARTER_BLOCK_PENALTY;
}
static inline double shard_lookup_bytes(double lookups, double width, double emb_bytes,
                                        double index_bytes, double outputs, double out_bytes) {
    return (lookups * index_bytes + lookups * dmax(width, MIN_KERNEL_DIM) * emb_bytes +
            outputs * width * out_bytes) *
           block_usage_penalty(width);
}
static inline double batched_copy_seconds(double batch, double dim, double comm_bwd_bytes,
                                          double spb) {
    return BATCHED_COPY_PERF_FACTOR * batch * dim * comm_bwd_bytes * spb;
}
static inline double shard_state_bytes(double rows, double dim, double emb_bytes,
                                       double opt_row_bytes, double opt_elem_bytes) {
    return rows * dim * emb_bytes + rows * opt_row_bytes + rows * dim * opt_elem_bytes;
}
static double uniform_storage_hbm(int tier, double rows, double dim, const double *job) {
    double state = shard_state_bytes(rows, dim, job[DL_DJOB_EMB_BYTES],
                                     job[DL_DJOB_OPT_ROW_BYTES], job[DL_DJOB_OPT_ELEM_BYTES]);
    if (tier == DL_MT_HBM || tier == DL_MT_DENSE) return state;
    if (tier == DL_MT_UVM_CACHE || tier == DL_MT_KEY_VALUE)
        return job[DL_DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DL_DJOB_EMB_BYTES];
    return 0.0;
}
static double uniform_storage_ssd(int tier, double rows, double dim, const double *job) {
    if (tier != DL_MT_KEY_VALUE) return 0.0;
    return shard_state_bytes(rows, dim, job[DL_DJOB_EMB_BYTES], job[DL_DJOB_OPT_ROW_BYTES],
                             job[DL_DJOB_OPT_ELEM_BYTES]);
}
/* reference.ssd_fetch_seconds, prefetch_staging_bytes, ssd_exposed_seconds */
static double ssd_fetch_seconds(const double *job, double lookups, double hit_rate,
                                double width) {
    if (job[DL_DJOB_SSD_BYTES] <= 0.0 || job[DL_DJOB_SSD_BANDWIDTH] <= 0.0) return 0.0;
    double row = shard_state_bytes(1.0, width, job[DL_DJOB_EMB_BYTES],
                                   job[DL_DJOB_OPT_ROW_BYTES], job[DL_DJOB_OPT_ELEM_BYTES]);
    return 2.0 * lookups * (1.0 - hit_rate) * row / job[DL_DJOB_SSD_BANDWIDTH];
}
static double prefetch_staging_bytes(const double *job, double lookups, double hit_rate,
                                     double width) {
    if (!ssd_prefetch_pipelined(job)) return 0.0;
    return job[DL_DJOB_PREFETCH_DEPTH] * lookups * (1.0 - hit_rate) * width *
           job[DL_DJOB_EMB_BYTES];
}
static double ssd_exposed_seconds(const double *job, double fetch, double hide) {
    if (ssd_prefetch_pipelined(job)) return dmax(0.0, fetch - hide);
    return fetch;
}
static double uniform_storage_ddr(int tier, double rows, double dim, const double *job) {
    if (tier == DL_MT_HBM || tier == DL_MT_DENSE || tier == DL_MT_KEY_VALUE) return 0.0;
    return shard_state_bytes(rows, dim, job[DL_DJOB_EMB_BYTES], job[DL_DJOB_OPT_ROW_BYTES],
                             job[DL_DJOB_OPT_ELEM_BYTES]);
}
static inline double domain_lo(double span, int world, int r) {
    if (span >= world) return 0.0;
    return floor(r / span) * span;
}
static inline double domain_hi(double span, int world, int r) {
    if (span >= world) return world * 1.0;
    return dmin(world * 1.0, floor(r / span) * span + span);
}
static double dense_fwd_time(const double *sys, const double *job) {
    double local = job[DL_DJOB_GLOBAL_BATCH] / job[DL_DJOB_WORLD];
    return local * job[DL_DJOB_DENSE_FLOPS_PER_SAMPLE] /
           (sys[DL_SYS_PEAK_FLOPS] * job[DL_DJOB_DENSE_EFFICIENCY]);
}
static double dense_memory_bytes(const double *job) {
    double local = job[DL_DJOB_GLOBAL_BATCH] / job[DL_DJOB_WORLD];
    return job[DL_DJOB_DENSE_PARAMS] * job[DL_DJOB_DENSE_STATE_BYTES] +
           local * job[DL_DJOB_DENSE_ACT_BYTES_PER_SAMPLE];
}
/* Per-batch constants: everything that depends on the system and job blocks only, computed once
 * per call with the same functions the reference calls per plan. */
typedef struct {
    int world, top;
    double node, lat, d_fwd, d_bwd, dense_ar, usable, ddr_cap;
    double batch, local, eb, ib, cbf, cbb, bwd_mult, uvm_frac, sum_dim, sum_pool, dense_mem;
    double span[DL_MAX_TIERS];   /* tier_span(sys, i) */
    double inv_bw[DL_MAX_TIERS]; /* 1 / tier_link_bandwidth(sys, i) */
    double top_bw;               /* tier_link_bandwidth(sys, top) */
    ts_net net;                  /* the tiers, resolved once per batch */
    ts_group g_world, g_node;    /* all ranks; the ranks of one node */
    const double *tc; /* per-table cache (TC_* fields), in the caller's work buffer */
    const double *sys;
} ctx_t;

/* Per-table cache: terms that depend on the table and its memory tier but not on the plan,
 * computed once per batch with the reference's own expressions (so the per-plan sums see
 * bit-identical addends). Fields per table; "x3" fields are per memory tier (DL_N_MT of them). */
enum {
    TC_SPB = 0,                    /* xN (per memory tier, DL_N_MT) lookup_seconds_per_byte */
    TC_TW_FWD = TC_SPB + DL_N_MT,        /* x3 table-wise forward lookup seconds */
    TC_TW_BWD = TC_TW_FWD + DL_N_MT,     /* x3 bwd_mult * forward */
    TC_RW_FWD = TC_TW_BWD + DL_N_MT,     /* x3 row-wise forward (per rank) */
    TC_RW_BWD = TC_RW_FWD + DL_N_MT,     /* x3 */
    TC_RW_HBM = TC_RW_BWD + DL_N_MT,     /* x3 uniform_storage_hbm of the row-wise shard */
    TC_RW_DDR = TC_RW_HBM + DL_N_MT,     /* x3 uniform_storage_ddr */
    TC_DP_FWD = TC_RW_DDR + DL_N_MT,     /* x3 data-parallel forward */
    TC_DP_BWD = TC_DP_FWD + DL_N_MT,     /* x3 bwd + update */
    TC_DP_HBM = TC_DP_BWD + DL_N_MT,     /* x3 */
    TC_DP_DDR = TC_DP_HBM + DL_N_MT,     /* x3 */
    TC_TW_STATE = TC_DP_DDR + DL_N_MT,   /* shard_state_bytes(rows, dim) */
    TC_TW_CACHE,                   /* uvm cache bytes of the whole table */
    TC_TW_BUF,                     /* table-wise I/O buffers */
    TC_RW_BUF,                     /* row-wise I/O buffers (every rank) */
    TC_RW_IDX,                     /* pool / W */
    TC_DP_ELEMS,                   /* rows * dim */
    TC_N
};

static void write_invalid(double *out, int64_t n_plans, int64_t col, int status) {
    for (int f = 0; f < DL_N_DOUT; f++) out[f * n_plans + col] = 0.0;
    out[DL_DO_STATUS * n_plans + col] = status;
    out[DL_DO_FEASIBLE * n_plans + col] = 0.0;
    out[DL_DO_STEP_TIME_S * n_plans + col] = INFINITY;
}
#define P(f, t) plan[(int64_t)(f) * n_t + (t)]
/* tables are checked once per batch (tables_ok); per plan only the plan entries */
static int tables_ok(const double *tables, int64_t n_t) {
    for (int64_t t = 0; t < n_t; t++) {
        double dim = tables[DL_TAB_DIM * n_t + t];
        if (!(tables[DL_TAB_ROWS * n_t + t] >= 1.0 && dim >= 1.0 &&
              tables[DL_TAB_POOLING * n_t + t] >= 0.0)) /* NaN fails too */
            return 0;
    }
    return 1;
}
static int check_plan(const ctx_t *c, const double *tables, int64_t n_t, const int32_t *plan,
                      int tab_ok) {
    int world = c->world;
    for (int64_t t = 0; t < n_t; t++) {
        int32_t kind = P(DL_PL_KIND, t), tier = P(DL_PL_TIER, t), rank = P(DL_PL_RANK, t);
        int32_t group = P(DL_PL_GROUP, t);
        if ((uint32_t)kind > DL_SH_GRID_SHARD || (uint32_t)tier >= DL_N_MT)
            return DL_STATUS_BAD_INDEX;
        if (rank < 0 || rank >= world || P(DL_PL_STRIDE, t) < 0 || group < 0)
            return DL_STATUS_BAD_INDEX;
        if (!tab_ok) {
            /* the reference reports the first bad table in table order */
            double dim = tables[DL_TAB_DIM * n_t + t];
            if (!(tables[DL_TAB_ROWS * n_t + t] >= 1.0 && dim >= 1.0 &&
                  tables[DL_TAB_POOLING * n_t + t] >= 0.0))
                return DL_STATUS_INVALID_CONFIG;
        }
        if (kind == DL_SH_COLUMN_WISE || kind == DL_SH_GRID_SHARD) {
            int32_t k = P(DL_PL_SHARDS, t);
            if (k < 1 || k > world) return DL_STATUS_INVALID_CONFIG;
            double fdim = tables[DL_TAB_DIM * n_t + t];
            /* reference.check_plan: a dim beyond 2^53 is no exact integer (and no int64) */
            if (!(fdim <= 9007199254740992.0)) return DL_STATUS_INVALID_CONFIG;
            int64_t idim = (int64_t)fdim;
            /* powers of two (the usual shard counts) without a division */
            int64_t rem = (k & (k - 1)) == 0 ? (idim & (int64_t)(k - 1)) : idim % k;
            if (rem != 0) return DL_STATUS_INVALID_CONFIG;
        }
        if ((kind == DL_SH_TABLE_ROW_WISE || kind == DL_SH_GRID_SHARD) && group > 0) {
            if (group > world || world % group != 0) return DL_STATUS_INVALID_CONFIG;
        }
    }
    return DL_STATUS_OK;
}

static void fill_table_cache(ctx_t *c, const double *sys, const double *job, const double *tables,
                             int64_t n_t, double *tc) {
    double wf = c->world * 1.0, batch = c->batch, local = c->local;
    double eb = c->eb, ib = c->ib, cbf = c->cbf, bwd_mult = c->bwd_mult;
    double sum_dim = 0.0, sum_pool = 0.0;
    for (int64_t t = 0; t < n_t; t++) {
        double *x = tc + t * TC_N;
        double rows = tables[DL_TAB_ROWS * n_t + t], dim = tables[DL_TAB_DIM * n_t + t];
        double pool = tables[DL_TAB_POOLING * n_t + t], hit = tables[DL_TAB_HIT_RATE * n_t + t];
        sum_dim += dim;
        sum_pool += pool;
        double rw_rows = ceil(rows / wf);
        for (int tier = 0; tier < DL_N_MT; tier++) {
            double spb = lookup_seconds_per_byte(sys, job, tier, hit);
            x[TC_SPB + tier] = spb;
            double fwd = shard_lookup_bytes(batch * pool, dim / 1.0, eb, ib, batch, cbf) * spb;
            x[TC_TW_FWD + tier] = fwd;
            x[TC_TW_BWD + tier] = bwd_mult * fwd;
            fwd = lookup_bytes(batch * pool / wf, dim, eb, ib, batch, cbf) * spb;
            x[TC_RW_FWD + tier] = fwd;
            x[TC_RW_BWD + tier] = bwd_mult * fwd + batched_copy_seconds(batch, dim, c->cbb, spb);
            x[TC_RW_HBM + tier] = uniform_storage_hbm(tier, rw_rows, dim, job);
            x[TC_RW_DDR + tier] = uniform_storage_ddr(tier, rw_rows, dim, job);
            fwd = lookup_bytes(local * pool, dim, eb, ib, local, cbf) * spb;
            x[TC_DP_FWD + tier] = fwd;
            x[TC_DP_BWD + tier] =
                bwd_mult * fwd + job[DL_DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb;
            x[TC_DP_HBM + tier] = uniform_storage_hbm(tier, rows, dim, job);
            x[TC_DP_DDR + tier] = uniform_storage_ddr(tier, rows, dim, job);
        }
        x[TC_TW_STATE] = shard_state_bytes(rows, dim / 1.0, eb, job[DL_DJOB_OPT_ROW_BYTES],
                                           job[DL_DJOB_OPT_ELEM_BYTES]);
        x[TC_TW_CACHE] = job[DL_DJOB_UVM_CACHE_FRACTION] * rows * (dim / 1.0) * eb;
        x[TC_TW_BUF] = batch * pool * ib + 2.0 * batch * (dim / 1.0) * cbf;
        x[TC_RW_BUF] = batch * pool / wf * ib + 2.0 * batch * dim * cbf;
        x[TC_RW_IDX] = pool / wf;
        x[TC_DP_ELEMS] = rows * dim;
    }
    c->sum_dim = sum_dim;
    c->sum_pool = sum_pool;
}

/* add_shard_storage with the shard's state / cache bytes already computed */
#define ADD_STORAGE(o, tier, state, cache)                         \
    do {                                                           \
        if ((tier) == DL_MT_HBM || (tier) == DL_MT_DENSE) {        \
            W(DL_RK_HBM_BYTES, o) += (state);                      \
        } else if ((tier) == DL_MT_UVM_CACHE) {                    \
            W(DL_RK_DDR_BYTES, o) += (state);                      \
            W(DL_RK_HBM_BYTES, o) += (cache);                      \
        } else if ((tier) == DL_MT_KEY_VALUE) {                    \
            W(DL_RK_HBM_BYTES, o) += (cache);                      \
            W(DL_RK_SSD_BYTES, o) += (state);                      \
        } else {                                                   \
            W(DL_RK_DDR_BYTES, o) += (state);                      \
        }                                                          \
    } while (0)

/* reference.add_ssd_shard */
#define ADD_SSD(o, tier, lookups, hit, width)                                          \
    do {                                                                               \
        if ((tier) == DL_MT_KEY_VALUE) {                                               \
            W(DL_RK_SSD_FETCH_S, o) += ssd_fetch_seconds(job, (lookups), (hit), (width)); \
            W(DL_RK_HBM_BYTES, o) += prefetch_staging_bytes(job, (lookups), (hit), (width)); \
        }                                                                              \
    } while (0)

/* reference.row_group_bounds: returns at_node */
static inline int row_group_bounds(double node, int world, int32_t group, int r, double *lo,
                                   double *hi) {
    if (group <= 0 || (double)group == node) {
        *lo = domain_lo(node, world, r);
        *hi = domain_hi(node, world, r);
        return 1;
    }
    *lo = floor((double)r / (double)group) * (double)group;
    *hi = *lo + (double)group;
    return 0;
}

/* reference.add_row_group_shard */
static void add_row_group_shard(const double *job, double *work, int64_t stride_w, double lo,
                                double hi, int at_node, int narrow, double node, int tier,
                                double rows, double width, double pool, double hit, double spb,
                                double rs_s, double ag_s) {
    double batch = job[DL_DJOB_GLOBAL_BATCH], eb = job[DL_DJOB_EMB_BYTES];
    double ib = job[DL_DJOB_INDEX_BYTES], cbf = job[DL_DJOB_COMM_FWD_BYTES];
    double n_in = hi - lo;
    double fwd = (at_node && !narrow)
                     ? lookup_bytes(batch * pool / n_in, width, eb, ib, batch, cbf) * spb
                     : shard_lookup_bytes(batch * pool / n_in, width, eb, ib, batch, cbf) * spb;
    double bwd = job[DL_DJOB_BWD_MULTIPLIER] * fwd;
    double shard_rows = ceil(rows / n_in);
    double state = shard_state_bytes(shard_rows, width, eb, job[DL_DJOB_OPT_ROW_BYTES],
                                     job[DL_DJOB_OPT_ELEM_BYTES]);
    double cache = job[DL_DJOB_UVM_CACHE_FRACTION] * shard_rows * width * eb;
    double buf = batch * pool / n_in * ib + 2.0 * batch * width * cbf;
    double od = width / n_in, oi = pool / n_in;
    for (int o = (int)lo; o < (int)hi; o++) {
        W(DL_RK_LOOKUP_FWD_S, o) += fwd;
        W(DL_RK_LOOKUP_BWD_S, o) += bwd;
        W(DL_RK_OWN_DIM, o) += od;
        W(DL_RK_OWN_IDX, o) += oi;
        if (at_node) {
            W(DL_RK_TWRW_DIM, o) += width;
        } else {
            if (n_in < node) W(DL_RK_OWN_DIM0, o) += od;
            W(DL_RK_GRP_RS_S, o) += rs_s;
            W(DL_RK_GRP_AG_S, o) += ag_s;
        }
        ADD_STORAGE(o, tier, state, cache);
        W(DL_RK_HBM_BYTES, o) += buf;
        ADD_SSD(o, tier, batch * pool / n_in, hit, width);
    }
}

/* reference.rw_collective_time: the full pooled output over the outermost tier's link */
static double rw_collective_time(const ctx_t *c, double nbytes) {
    if (c->top < 0 || nbytes <= 0.0) return 0.0;
    return c->lat + nbytes / c->top_bw;
}

/* reference.group_collective_time */
static double group_collective_time(const ctx_t *c, double nbytes, double n, int gather) {
    if (n <= 1.0) return 0.0;
    ts_group g;
    ts_group_init1(&g, &c->net, n, 1.0);
    if (n > c->node) {
        if (g.top < 0 || nbytes <= 0.0) return 0.0;
        return ts_tier_latency(c->sys, g.top) + nbytes / ts_tier_link_bandwidth(c->sys, g.top);
    }
    return gather ? ts_all_gather_time(&c->net, nbytes, &g)
                  : ts_reduce_scatter_time(&c->net, nbytes, &g);
}

static int evaluate_plan(const ctx_t *c, const double *job,
                         const double *tables, int64_t n_t, const int32_t *plan, double *work,
                         int64_t stride_w, double *out, int64_t n_plans, int64_t col,
                         int tab_ok) {
    int world = c->world;
    int status = check_plan(c, tables, n_t, plan, tab_ok);
    if (status != DL_STATUS_OK) {
        write_invalid(out, n_plans, col, status);
        return status;
    }
    /* accumulated rows (the rest is written below, column W of every row stays 0) */
    for (int f = DL_RK_LOOKUP_FWD_S; f <= DL_RK_SSD_FETCH_S; f++)
        for (int r = 0; r < world; r++) W(f, r) = 0.0;
    double wf = world * 1.0, batch = c->batch, local = c->local;
    double eb = c->eb, ib = c->ib, cbf = c->cbf, cbb = c->cbb;
    double bwd_mult = c->bwd_mult;
    double node = c->node;
    double uni_fwd = 0.0, uni_bwd = 0.0, uni_hbm = 0.0, uni_ddr = 0.0, uni_idx = 0.0;
    double rw_dim = 0.0, dp_elems = 0.0, uni_ssd = 0.0, uni_fetch = 0.0;
    const double *tc = c->tc;
    double *lfw = &W(DL_RK_LOOKUP_FWD_S, 0), *lbw = &W(DL_RK_LOOKUP_BWD_S, 0);
    double *own0 = &W(DL_RK_OWN_DIM0, 0), *own = &W(DL_RK_OWN_DIM, 0);
    double *oidx = &W(DL_RK_OWN_IDX, 0), *hbmw = &W(DL_RK_HBM_BYTES, 0);
    double *ddrw = &W(DL_RK_DDR_BYTES, 0);
    for (int64_t t = 0; t < n_t; t++) {
        const double *x = tc + t * TC_N;
        int kind = P(DL_PL_KIND, t), tier = P(DL_PL_TIER, t), rank = P(DL_PL_RANK, t);
        if (kind == DL_SH_TABLE_WISE) {
            double dim = tables[DL_TAB_DIM * n_t + t], pool = tables[DL_TAB_POOLING * n_t + t];
            int o = rank;
            lfw[o] += x[TC_TW_FWD + tier];
            lbw[o] += x[TC_TW_BWD + tier];
            own0[o] += dim;
            own[o] += dim;
            oidx[o] += pool;
            if (tier == DL_MT_HBM || tier == DL_MT_DENSE) {
                hbmw[o] += x[TC_TW_STATE];
            } else if (tier == DL_MT_UVM_CACHE) {
                ddrw[o] += x[TC_TW_STATE];
                hbmw[o] += x[TC_TW_CACHE];
            } else if (tier == DL_MT_KEY_VALUE) {
                hbmw[o] += x[TC_TW_CACHE];
                W(DL_RK_SSD_BYTES, o) += x[TC_TW_STATE];
            } else {
                ddrw[o] += x[TC_TW_STATE];
            }
            hbmw[o] += x[TC_TW_BUF];
            ADD_SSD(o, tier, c->batch * pool, tables[DL_TAB_HIT_RATE * n_t + t], dim / 1.0);
        } else if (kind == DL_SH_COLUMN_WISE) {
            double rows = tables[DL_TAB_ROWS * n_t + t], dim = tables[DL_TAB_DIM * n_t + t];
            double pool = tables[DL_TAB_POOLING * n_t + t];
            int64_t k = P(DL_PL_SHARDS, t);
            int32_t stride = P(DL_PL_STRIDE, t);
            int step = stride < world ? stride : (int)(stride % world);
            double ds = dim / (double)k;
            double fwd = shard_lookup_bytes(batch * pool, ds, eb, ib, batch, cbf) * x[TC_SPB + tier];
            double bwd = bwd_mult * fwd;
            double state = shard_state_bytes(rows, ds, eb, job[DL_DJOB_OPT_ROW_BYTES],
                                             job[DL_DJOB_OPT_ELEM_BYTES]);
            double cache = job[DL_DJOB_UVM_CACHE_FRACTION] * rows * ds * eb;
            double buf = batch * pool * ib + 2.0 * batch * ds * cbf;
            int o = rank;
            for (int64_t j = 0; j < k; j++) {
                lfw[o] += fwd;
                lbw[o] += bwd;
                own0[o] += ds;
                own[o] += ds;
                oidx[o] += pool;
                ADD_STORAGE(o, tier, state, cache);
                hbmw[o] += buf;
                ADD_SSD(o, tier, batch * pool, tables[DL_TAB_HIT_RATE * n_t + t], ds);
                o += step;
                if (o >= world) o -= world;
            }
        } else if (kind == DL_SH_ROW_WISE) {
            uni_fwd += x[TC_RW_FWD + tier];
            uni_bwd += x[TC_RW_BWD + tier];
            uni_idx += x[TC_RW_IDX];
            rw_dim += tables[DL_TAB_DIM * n_t + t];
            uni_hbm += x[TC_RW_HBM + tier];
            uni_hbm += x[TC_RW_BUF];
            uni_ddr += x[TC_RW_DDR + tier];
            if (tier == DL_MT_KEY_VALUE) {
                double dim = tables[DL_TAB_DIM * n_t + t], pool = tables[DL_TAB_POOLING * n_t + t];
                double hit = tables[DL_TAB_HIT_RATE * n_t + t];
                uni_ssd += uniform_storage_ssd(tier, ceil(tables[DL_TAB_ROWS * n_t + t] / wf), dim, job);
                uni_fetch += ssd_fetch_seconds(job, batch * pool / wf, hit, dim);
                uni_hbm += prefetch_staging_bytes(job, batch * pool / wf, hit, dim);
            }
        } else if (kind == DL_SH_TABLE_ROW_WISE || kind == DL_SH_GRID_SHARD) {
            double rows = tables[DL_TAB_ROWS * n_t + t], dim = tables[DL_TAB_DIM * n_t + t];
            double pool = tables[DL_TAB_POOLING * n_t + t];
            double hit = tables[DL_TAB_HIT_RATE * n_t + t];
            int64_t k = 1;
            int32_t stride = 0;
            if (kind == DL_SH_GRID_SHARD) {
                k = P(DL_PL_SHARDS, t);
                stride = P(DL_PL_STRIDE, t);
            }
            double ws = dim / (double)k;
            int32_t group = P(DL_PL_GROUP, t);
            int64_t gi = group <= 0 ? (int64_t)node : (int64_t)group;
            int64_t n_groups = (world + gi - 1) / gi, g0 = rank / gi;
            double rs_s = 0.0, ag_s = 0.0;
            for (int64_t j = 0; j < k; j++) {
                int r0 = (int)(((g0 + j * (int64_t)stride) % n_groups) * gi);
                double lo, hi;
                int at_node = row_group_bounds(node, world, group, r0, &lo, &hi);
                if (!at_node && j == 0) {
                    rs_s = group_collective_time(c, batch * ws * cbf, hi - lo, 0);
                    ag_s = group_collective_time(c, batch * ws * cbb, hi - lo, 1);
                }
                add_row_group_shard(job, work, stride_w, lo, hi, at_node,
                                    kind == DL_SH_GRID_SHARD, node, tier, rows, ws, pool, hit,
                                    x[TC_SPB + tier], rs_s, ag_s);
            }
        } else {
            uni_fwd += x[TC_DP_FWD + tier];
            uni_bwd += x[TC_DP_BWD + tier];
            dp_elems += x[TC_DP_ELEMS];
            uni_hbm += x[TC_DP_HBM + tier];
            uni_ddr += x[TC_DP_DDR + tier];
            if (tier == DL_MT_KEY_VALUE) {
                double dim = tables[DL_TAB_DIM * n_t + t], pool = tables[DL_TAB_POOLING * n_t + t];
                double hit = tables[DL_TAB_HIT_RATE * n_t + t];
                uni_ssd += uniform_storage_ssd(tier, tables[DL_TAB_ROWS * n_t + t], dim, job);
                uni_fetch += ssd_fetch_seconds(job, local * pool, hit, dim);
                uni_hbm += prefetch_staging_bytes(job, local * pool, hit, dim);
            }
        }
    }
    uni_hbm += 2.0 * local * (c->sum_dim * cbf + c->sum_pool * ib) + c->dense_mem;
    {
        double p0 = 0.0, p1 = 0.0, p2 = 0.0;
        double *q0 = &W(DL_RK_PRE_DIM0, 0), *q1 = &W(DL_RK_PRE_DIM, 0), *q2 = &W(DL_RK_PRE_IDX, 0);
        q0[0] = q1[0] = q2[0] = 0.0;
        for (int r = 0; r < world; r++) {
            p0 = p0 + own0[r];
            p1 = p1 + own[r];
            p2 = p2 + oidx[r];
            q0[r + 1] = p0;
            q1[r + 1] = p1;
            q2[r + 1] = p2;
        }
    }
    int top = c->top;
    double unit_idx = local * ib, unit_fwd = local * cbf, unit_bwd = local * cbb;
    double *xp = &W(DL_RK_X_POOL, 0), *xi = &W(DL_RK_X_IDX, 0);
    const double *pd0 = &W(DL_RK_PRE_DIM0, 0), *pd = &W(DL_RK_PRE_DIM, 0);
    const double *pi = &W(DL_RK_PRE_IDX, 0);
    double max_lf = 0.0, max_lb = 0.0, max_pool = 0.0, max_idx = 0.0;
    double max_hbm = 0.0, max_ddr = 0.0, max_twrw = 0.0, crit_load = -1.0;
    double max_grs = 0.0, max_gag = 0.0, max_ssd = 0.0, max_fetch = 0.0;
    int crit = 0;
    double *a2aw = &W(DL_RK_A2A_S, 0);
    const double *twrw = &W(DL_RK_TWRW_DIM, 0);
    double unit_fb = unit_fwd + unit_bwd;
    /* One pass over the tier-0 domains (nodes); every outer domain is a union of nodes. Per
     * rank: the busiest tier of the two all-to-alls (reference: rank_a2a_units, here without
     * a division per rank), then the rank's totals and the maxima over ranks. */
    int step0 = c->span[0] >= wf ? world : (int)c->span[0];
    double fac[DL_MAX_TIERS], recvp[DL_MAX_TIERS], recvi[DL_MAX_TIERS];
    for (int lo0 = 0; lo0 < world; lo0 += step0) {
        int hi0 = lo0 + step0 < world ? lo0 + step0 : world;
        double cnt0 = (double)(hi0 - lo0);
        double dom0 = pd0[hi0] - pd0[lo0];
        double domi0 = pi[hi0] - pi[lo0] + uni_idx * cnt0;
        for (int i = 1; i < top + 1; i++) {
            double span = c->span[i - 1];
            int lo = 0, hi = world;
            if (span < wf) {
                int sp = (int)span;
                lo = (lo0 / sp) * sp;
                hi = lo + sp < world ? lo + sp : world;
            }
            double cnt = (double)(hi - lo);
            fac[i] = wf - cnt;
            recvp[i] = pd[world] - (pd[hi] - pd[lo]);
            recvi[i] = pi[world] + uni_idx * wf - (pi[hi] - pi[lo] + uni_idx * cnt);
        }
        for (int r = lo0; r < hi0; r++) {
            double x_pool = 0.0, x_idx = 0.0;
            if (top >= 0) {
                double inv = c->inv_bw[0];
                double mine = own0[r];
                double t = dmax(mine * (cnt0 - 1.0), dom0 - mine) * inv;
                if (t > x_pool) x_pool = t;
                mine = oidx[r] + uni_idx;
                t = dmax(mine * (cnt0 - 1.0), domi0 - mine) * inv;
                if (t > x_idx) x_idx = t;
                for (int i = 1; i < top + 1; i++) {
                    inv = c->inv_bw[i];
                    t = dmax(own[r] * fac[i], recvp[i]) * inv;
                    if (t > x_pool) x_pool = t;
                    t = dmax((oidx[r] + uni_idx) * fac[i], recvi[i]) * inv;
                    if (t > x_idx) x_idx = t;
                }
            }
            xp[r] = x_pool;
            xi[r] = x_idx;
            double lf = lfw[r] + uni_fwd;
            double lb = lbw[r] + uni_bwd;
            double a2a = unit_idx * x_idx + unit_fb * x_pool;
            double h = hbmw[r] + uni_hbm, d = ddrw[r] + uni_ddr;
            lfw[r] = lf;
            lbw[r] = lb;
            hbmw[r] = h;
            ddrw[r] = d;
            a2aw[r] = a2a;
            max_lf = dmax(max_lf, lf);
            max_lb = dmax(max_lb, lb);
            max_pool = dmax(max_pool, x_pool);
            max_idx = dmax(max_idx, x_idx);
            max_hbm = dmax(max_hbm, h);
            max_ddr = dmax(max_ddr, d);
            max_twrw = dmax(max_twrw, twrw[r]);
            max_grs = dmax(max_grs, W(DL_RK_GRP_RS_S, r));
            max_gag = dmax(max_gag, W(DL_RK_GRP_AG_S, r));
            W(DL_RK_SSD_BYTES, r) += uni_ssd;
            W(DL_RK_SSD_FETCH_S, r) += uni_fetch;
            max_ssd = dmax(max_ssd, W(DL_RK_SSD_BYTES, r));
            max_fetch = dmax(max_fetch, W(DL_RK_SSD_FETCH_S, r));
            double load = lf + lb + a2a;
            if (load > crit_load) {
                crit_load = load;
                crit = r;
            }
        }
    }
    double lat = c->lat;
    double idx_a2a = 0.0, a2a_fwd = 0.0, a2a_bwd = 0.0;
    if (max_idx > 0.0) idx_a2a = lat + unit_idx * max_idx;
    if (max_pool > 0.0) {
        a2a_fwd = lat + unit_fwd * max_pool;
        a2a_bwd = lat + unit_bwd * max_pool;
    }
    double rs_fwd = 0.0, ag_bwd = 0.0;
    if (rw_dim > 0.0) {
        rs_fwd += rw_collective_time(c, batch * rw_dim * cbf);
        ag_bwd += rw_collective_time(c, batch * rw_dim * cbb);
    }
    if (max_twrw > 0.0) {
        rs_fwd += ts_all_gather_time(&c->net, batch * max_twrw * cbf, &c->g_node);
        ag_bwd += ts_all_gather_time(&c->net, batch * max_twrw * cbb, &c->g_node);
    }
    rs_fwd += max_grs;
    ag_bwd += max_gag;
    double gcb = job[DL_DJOB_GRAD_COMM_BYTES];
    double dp_ar = 0.0, dense_ar = c->dense_ar;
    if (dp_elems > 0.0) dp_ar = ts_all_reduce_time(&c->net, dp_elems * gcb, &c->g_world);
    double d_fwd = c->d_fwd, d_bwd = c->d_bwd;
    double emb_bwd = a2a_bwd + ag_bwd + max_lb + dp_ar;
    double exposed = dmax(0.0, dense_ar - emb_bwd);
    double ssd_exposed = ssd_exposed_seconds(job, max_fetch, d_fwd + d_bwd);
    double step = idx_a2a + max_lf + a2a_fwd + rs_fwd + d_fwd + d_bwd + emb_bwd + exposed +
                  ssd_exposed;
    status = DL_STATUS_OK;
    if (max_hbm > c->usable || max_ddr > c->ddr_cap) status = DL_STATUS_OUT_OF_MEMORY;
    if (job[DL_DJOB_SSD_BYTES] > 0.0 && max_ssd > job[DL_DJOB_SSD_BYTES])
        status = DL_STATUS_OUT_OF_MEMORY;
#define O(f) out[(int64_t)(f) * n_plans + col]
    O(DL_DO_STATUS) = status;
    O(DL_DO_FEASIBLE) = status == DL_STATUS_OK ? 1.0 : 0.0;
    O(DL_DO_STEP_TIME_S) = step;
    O(DL_DO_SAMPLES_PER_S) = step > 0.0 ? batch / step : 0.0;
    O(DL_DO_IDX_A2A_S) = idx_a2a;
    O(DL_DO_LOOKUP_FWD_S) = max_lf;
    O(DL_DO_A2A_FWD_S) = a2a_fwd;
    O(DL_DO_RS_FWD_S) = rs_fwd;
    O(DL_DO_DENSE_FWD_S) = d_fwd;
    O(DL_DO_DENSE_BWD_S) = d_bwd;
    O(DL_DO_A2A_BWD_S) = a2a_bwd;
    O(DL_DO_AG_BWD_S) = ag_bwd;
    O(DL_DO_LOOKUP_BWD_S) = max_lb;
    O(DL_DO_DP_ALLREDUCE_S) = dp_ar;
    O(DL_DO_DENSE_ALLREDUCE_EXPOSED_S) = exposed;
    O(DL_DO_DENSE_ALLREDUCE_S) = dense_ar;
    O(DL_DO_HBM_MAX_GIB) = max_hbm / GIB;
    O(DL_DO_DDR_MAX_GIB) = max_ddr / GIB;
    O(DL_DO_CRITICAL_RANK) = crit;
    O(DL_DO_SSD_PREFETCH_EXPOSED_S) = ssd_exposed;
    O(DL_DO_SSD_FETCH_S) = max_fetch;
    O(DL_DO_SSD_MAX_GIB) = max_ssd / GIB;
    /* reference.guard_finite: a non-finite output -> status overflow, zeros, infinite step */
    int bad = 0;
    for (int f = 0; f < DL_N_DOUT; f++) {
        double v = O(f);
        if (!(v - v == 0.0)) bad = 1;
    }
    if (bad) {
        for (int f = 0; f < DL_N_DOUT; f++) O(f) = 0.0;
        O(DL_DO_STATUS) = DL_STATUS_OVERFLOW;
        O(DL_DO_STEP_TIME_S) = INFINITY;
        status = DL_STATUS_OVERFLOW;
    }
#undef O
    return status;
}

int64_t dl_work_len(int64_t world, int64_t n_tables) {
    if (world < 1 || n_tables < 0) return -1;
    return (int64_t)DL_N_RANK * (world + 1) + (int64_t)TC_N * n_tables;
}

int dl_evaluate_plans(const double *sys, const double *job, const double *tables,
                      int64_t n_tables, const int32_t *plans, int64_t n_plans, double *work,
                      int64_t work_len, double *out) {
    if (!sys || !job || !tables || !plans || !work || !out || n_tables < 0 || n_plans < 0)
        return -1;
    double wd = job[DL_DJOB_WORLD];
    int nt = (int)sys[DL_SYS_N_TIERS];
    if (!(wd >= 1.0) || wd > 1.0e9 || nt < 1 || nt > DL_MAX_TIERS) {
        for (int64_t p = 0; p < n_plans; p++) write_invalid(out, n_plans, p, DL_STATUS_BAD_INDEX);
        return -1;
    }
    int64_t stride_w = (int64_t)wd + 1;
    if (work_len < dl_work_len(stride_w - 1, n_tables)) {
        for (int64_t p = 0; p < n_plans; p++) write_invalid(out, n_plans, p, DL_STATUS_BAD_INDEX);
        return -1;
    }
    ctx_t c;
    double wf = (double)(stride_w - 1);
    c.world = (int)(stride_w - 1);
    c.sys = sys;
    ts_net_init(&c.net, sys);
    ts_group_init1(&c.g_world, &c.net, wf, 1.0);
    c.top = c.g_world.top; /* group_top_tier(sys, W, 1, 1, 1, 1, 1) */
    c.node = ts_tier_span(sys, 0);
    if (c.node > wf) c.node = wf;
    ts_group_init1(&c.g_node, &c.net, c.node, 1.0);
    c.lat = c.top >= 0 ? ts_tier_latency(sys, c.top) : 0.0;
    c.top_bw = c.top >= 0 ? ts_tier_link_bandwidth(sys, c.top) : 1.0;
    c.d_fwd = dense_fwd_time(sys, job);
    c.d_bwd = 2.0 * dense_fwd_time(sys, job);
    c.dense_ar = 0.0;
    if (job[DL_DJOB_DENSE_PARAMS] > 0.0)
        c.dense_ar = ts_all_reduce_time(&c.net, job[DL_DJOB_DENSE_PARAMS] * job[DL_DJOB_GRAD_COMM_BYTES],
                                        &c.g_world);
    c.usable = sys[DL_SYS_HBM_BYTES] - sys[DL_SYS_HBM_RESERVE_BYTES];
    c.ddr_cap = job[DL_DJOB_DDR_BYTES];
    c.batch = job[DL_DJOB_GLOBAL_BATCH];
    c.local = c.batch / wf;
    c.eb = job[DL_DJOB_EMB_BYTES];
    c.ib = job[DL_DJOB_INDEX_BYTES];
    c.cbf = job[DL_DJOB_COMM_FWD_BYTES];
    c.cbb = job[DL_DJOB_COMM_BWD_BYTES];
    c.bwd_mult = job[DL_DJOB_BWD_MULTIPLIER];
    c.uvm_frac = job[DL_DJOB_UVM_CACHE_FRACTION];
    c.dense_mem = dense_memory_bytes(job);
    for (int i = 0; i < DL_MAX_TIERS; i++) {
        c.span[i] = i < nt ? ts_tier_span(sys, i) : INFINITY;
        c.inv_bw[i] = i < nt ? 1.0 / ts_tier_link_bandwidth(sys, i) : 0.0;
    }
    double *tc = work + (int64_t)DL_N_RANK * stride_w;
    fill_table_cache(&c, sys, job, tables, n_tables, tc);
    c.tc = tc;
    int tab_ok = tables_ok(tables, n_tables);
    /* column W of every row: the reference zeroes it and only the prefix rows write it */
    for (int f = 0; f < DL_N_RANK; f++) W(f, stride_w - 1) = 0.0;
    for (int f = DL_RK_A2A_S; f < DL_N_RANK; f++)
        for (int64_t r = 0; r < stride_w; r++) W(f, r) = 0.0;
    for (int64_t p = 0; p < n_plans; p++)
        evaluate_plan(&c, job, tables, n_tables, plans + p * (int64_t)DL_N_PLAN * n_tables,
                      work, stride_w, out, n_plans, p, tab_ok);
    return 0;
}

/* ---- O(1) move scoring: a port of score_batch in src/trainscape/dlrm/incremental.py ------
 * The state (constants c, per-rank rows rk, send factors fac, domains did, domain sums dsum,
 * top-3 lists tv/ti, per-node bottom-3 lists nb_v/nb_i, per-table terms tt, per-rank records
 * rec/rmask) is built by incremental.init_state / rebuild. A candidate is (table t, rank b,
 * partner table u or -1, memory tier). A move of t (u < 0) takes t's terms at its tier off
 * rank a = prank[t] and gives rank b the terms of the new tier; a swap (u >= 0) takes the
 * difference (t's terms - u's terms) off rank a and gives it to rank b = prank[u]. Both are
 * one code path: the partner terms of a move are zeros, and x - 0.0 == x exactly.
 *
 * Every maximum over ranks (domains) after the change is the largest entry of its top-3 list
 * whose index is neither a nor b, combined with the two changed entries. The fast path reads
 * that entry from the two ranks' records: the largest entry excluding a is rec[a]'s, and the
 * largest excluding both is the smaller of rec[a]'s and rec[b]'s unless a and b are the list's
 * first two entries (rmask says; then it is the list's third). Only when a and b are the two
 * smallest of one node does the general path read the lists. (Those two exceptions cannot
 * change a score in exact arithmetic -- one of a, b does not decrease -- but they keep it
 * exact in floating point.) Same values, same operations in the same order as score_batch:
 * the scores are the numba scores bit for bit. On x86-64 the fast path runs four lanes a vector
 * where the CPU has AVX (inc_fast_avx, chosen at run time), else two (inc_fast_simd, SSE2;
 * dl_score_moves_base always): the same operations lane by lane; the rest as written. */

#define INC_NEG (-1.0e300)
#define INC_POS 1.0e300

/* largest of a top-3 list (v, ix) whose index is neither e1 nor e2 (selects, no branches) */
static inline double inc_ex2(const double *v, const int64_t *ix, int64_t e1, int64_t e2) {
    int k0 = (ix[0] != e1) & (ix[0] != e2);
    int k1 = (ix[1] != e1) & (ix[1] != e2);
    int k2 = (ix[2] != e1) & (ix[2] != e2);
    double r = k2 ? v[2] : INC_NEG;
    r = k1 ? v[1] : r;
    return k0 ? v[0] : r;
}

/* smallest of a bottom-3 list whose index is neither e1 nor e2 (INC_POS when none) */
static inline double inc_mn2(const double *v, const int64_t *ix, int64_t e1, int64_t e2) {
    int k0 = (ix[0] != e1) & (ix[0] != e2);
    int k1 = (ix[1] != e1) & (ix[1] != e2);
    int k2 = (ix[2] != e1) & (ix[2] != e2);
    double r = k2 ? v[2] : INC_POS;
    r = k1 ? v[1] : r;
    return k0 ? v[0] : r;
}

typedef struct {
    const double *c, *rk, *fac, *dsum, *tv, *nb_v, *tt, *rec, *tdim, *tpool;
    const int64_t *did, *ti, *nb_i, *rmask, *prank, *ptier, *cand;
    int64_t world, n_tables, rec_cols;
    double *out;
} inc_args_t;

#define RK(row, r) rk[(int64_t)(row) * world + (r)]
#define TV(s) (tv + 3 * (s))
#define TI(s) (ti + 3 * (s))

/* The step time of evaluate_plan from its maxima (incremental._step). */
/* incremental.py _step's last line: a step that is not finite (a time that left the float64
 * range, a NaN from inf - inf) scores as infinite -- infeasible -- never as NaN, which every
 * comparison of the planner would take as "not worse" (steps are >= 0: no -inf) */
static inline double finite_or_inf(double s) { return s < INFINITY ? s : INFINITY; } /* minsd */

static inline double inc_step(double lat, double u_idx, double u_fwd, double u_bwd,
                              double k_fwd, double k_bwd, double dense_ar, double lf,
                              double lb, double xq0, double xq1) {
    lf = dmax(0.0, lf);
    lb = dmax(0.0, lb);
    double idx = xq1 > 0.0 ? lat + u_idx * xq1 : 0.0;
    double af = xq0 > 0.0 ? lat + u_fwd * xq0 : 0.0;
    double ab = xq0 > 0.0 ? lat + u_bwd * xq0 : 0.0;
    double emb = ab + lb + k_bwd;
    return finite_or_inf(idx + lf + af + k_fwd + emb + dmax(0.0, dense_ar - emb));
}

/* ---- the fast path two lanes a vector (SSE2, baseline x86-64) -----------------------------
 * The record fields come in pairs the vectors take as they lie: (lf, lb), (hbm, ddr) and their
 * exclusions, and per tier i the lanes (pooled, index) l = 2 i, 2 i + 1 of every group; the
 * per-table terms likewise, (fwd, bwd), (hbm, ddr). maxpd / minpd are dmax / dmin lane by lane
 * (a > b ? a : b, a < b ? a : b), the adds, subtracts and multiplies are the scalar ones in the
 * same order, so every lane is the scalar path's value bit for bit (no FMA: C99 mode keeps
 * -ffp-contract=off). Without SSE2 (or with -DDL_INC_SIMD=0) the scalar path does it all. */
#ifndef DL_INC_SIMD
#ifdef __SSE2__
#define DL_INC_SIMD 1
#else
#define DL_INC_SIMD 0
#endif
#endif
#if DL_INC_SIMD
#include <emmintrin.h>

typedef struct {
    __m128d lim, tot, ibw[DL_INC_MAXT], tv0[DL_INC_MAXT];
    __m128d look2, mem2, xs2[DL_INC_MAXT], xr2[DL_INC_MAXT]; /* the lists' third entries */
    __m128d lat2, u_fi, u_b; /* (lat, lat), (u_fwd, u_idx), (u_bwd, u_bwd) */
    double k_fwd, k_bwd, dense_ar;
} inc_simd_t;

/* lane masks of two bits (bit 0: lane 0) */
static const union {
    int64_t i[4][2];
    __m128d v[4];
} inc_mask2 = {{{0, 0}, {-1, 0}, {0, -1}, {-1, -1}}};

#define VLD(p) _mm_loadu_pd(p)
/* m ? x : y for a lane mask m, as bit operations (GCC 12 lowers a blend of a comparison in a
 * target("avx") function to one branch a lane, mispredicted half the time) */
static inline __attribute__((always_inline)) __m128d inc_sel(__m128d m, __m128d x, __m128d y) {
    return _mm_or_pd(_mm_and_pd(m, x), _mm_andnot_pd(m, y));
}

/* EX of two lanes from bit B of e on: the third entry v2 where the bit is set (MASK 0: e == 0,
 * no select), else the smaller of xa, xb */
static inline __attribute__((always_inline)) __m128d
inc_exv(uint64_t e, int B, __m128d xa, __m128d xb, __m128d v2, const int MASK) {
    return MASK ? inc_sel(inc_mask2.v[(e >> B) & 3u], v2, _mm_min_pd(xa, xb))
                : _mm_min_pd(xa, xb);
}

/* One tier's two lanes (pooled, index) of the fast path: the larger of the send and receive
 * volumes times the inverse bandwidth. i the tier (0: the node tier, whose receive side is the
 * node less its smallest), w (wq[0], wq[1]); xs2, xr2, tot, tv0, ibw the lanes' constants.
 * The two-lane path runs every tier through it, the four-lane path a last unpaired tier. */
static inline __attribute__((always_inline)) __m128d
inc_tier2(const double *RA, const double *RB, int L, int i, __m128d w, uint64_t e, __m128d xs2,
          __m128d xr2, __m128d tot, __m128d tv0, __m128d ibw, const int MASK) {
#define G(R, g) ((R) + DL_INC_F_G0 + (g) * L + 2 * i)
    const __m128d oa = _mm_sub_pd(VLD(G(RA, DL_INC_G_OWN)), w);
    const __m128d ob = _mm_add_pd(VLD(G(RB, DL_INC_G_OWN)), w);
    const __m128d send =
        _mm_max_pd(inc_exv(e, DL_INC_B_SEND + 2 * i, VLD(G(RA, DL_INC_G_XS)),
                           VLD(G(RB, DL_INC_G_XS)), xs2, MASK),
                   _mm_max_pd(_mm_mul_pd(oa, VLD(G(RA, DL_INC_G_FAC))),
                              _mm_mul_pd(ob, VLD(G(RB, DL_INC_G_FAC)))));
    const __m128d exr = inc_exv(e, DL_INC_B_RECV + 2 * i, VLD(G(RA, DL_INC_G_XR)),
                                VLD(G(RB, DL_INC_G_XR)), xr2, MASK);
    const __m128d same = _mm_cmpeq_pd(VLD(G(RA, DL_INC_G_DOM)), VLD(G(RB, DL_INC_G_DOM)));
    const __m128d dA = VLD(G(RA, DL_INC_G_DS)), dB = VLD(G(RB, DL_INC_G_DS));
    __m128d recv;
    if (i == 0) {
        const __m128d nA = VLD(G(RA, DL_INC_G_NMX)), nB = VLD(G(RB, DL_INC_G_NMX));
        const __m128d r_same = _mm_max_pd(
            exr, _mm_sub_pd(dA, _mm_min_pd(_mm_max_pd(nA, nB), _mm_min_pd(oa, ob))));
        const __m128d r_diff = _mm_max_pd(
            exr, _mm_max_pd(_mm_sub_pd(_mm_sub_pd(dA, w), _mm_min_pd(nA, oa)),
                            _mm_sub_pd(_mm_add_pd(dB, w), _mm_min_pd(nB, ob))));
        recv = inc_sel(same, r_same, r_diff);
    } else {
        const __m128d r_diff =
            _mm_max_pd(exr, _mm_max_pd(_mm_sub_pd(tot, _mm_sub_pd(dA, w)),
                                       _mm_sub_pd(tot, _mm_add_pd(dB, w))));
        recv = inc_sel(same, tv0, r_diff);
    }
    return _mm_mul_pd(_mm_max_pd(send, recv), ibw);
#undef G
}

/* inc_step with the pairs look = (lf, lb) and acc = (x0 -> af, x1 -> idx) as vectors:
 * lat2 (lat, lat), u_fi (u_fwd, u_idx), u_b (u_bwd, u_bwd) */
static inline __attribute__((always_inline)) double
inc_step2(__m128d look, __m128d acc, __m128d lat2, __m128d u_fi, __m128d u_b, double k_fwd,
          double k_bwd, double dense_ar) {
    const __m128d zero = _mm_setzero_pd();
    const __m128d lfb = _mm_max_pd(zero, look); /* dmax(0.0, lf), dmax(0.0, lb) */
    const __m128d ai =
        _mm_and_pd(_mm_cmpgt_pd(acc, zero), _mm_add_pd(lat2, _mm_mul_pd(u_fi, acc)));
    /* ab = x0 > 0.0 ? lat + u_bwd * x0 : 0.0 and dmax(0.0, dense_ar - emb) without branches
     * (the sign of dense_ar - emb varies from candidate to candidate) */
    const __m128d ab =
        _mm_and_pd(_mm_cmpgt_sd(acc, zero), _mm_add_sd(lat2, _mm_mul_sd(u_b, acc)));
    const double lf = _mm_cvtsd_f64(lfb), lb = _mm_cvtsd_f64(_mm_unpackhi_pd(lfb, lfb));
    const double af = _mm_cvtsd_f64(ai), idx = _mm_cvtsd_f64(_mm_unpackhi_pd(ai, ai));
    const double emb = _mm_cvtsd_f64(ab) + lb + k_bwd;
    const double exposed =
        _mm_cvtsd_f64(_mm_max_sd(zero, _mm_set_sd(dense_ar - emb))); /* dmax(0.0, .) */
    return finite_or_inf(idx + lf + af + k_fwd + emb + exposed);
}

/* The fast path's score. Every exclusion of {a, b} is the smaller of rec[a]'s and rec[b]'s,
 * or, where a and b are the list's first two entries (bit set in e), the list's third; MASK 0:
 * e == 0, no selects. tl, tg, tp: the terms a loses, b gains, and the partner's; *dt, *pt the
 * moved table's dim and pooling, *du, *pu the partner's; sw all ones for a swap, 0 for a move
 * (then the partner's terms and weights count as +0.0, the scalar path's zeros). */
static inline __attribute__((always_inline)) double
inc_fast_simd(const double *RA, const double *RB, const double *tl, const double *tg,
              const double *tp, int64_t sw, const double *dt, const double *pt,
              const double *du, const double *pu, uint64_t e, const inc_simd_t *V,
              const int TOP, const int FEAS, const int MASK) {
    const int L = 2 * (TOP + 1);
    /* the partner's terms, +0.0 for a move (as x - 0.0 in the scalar path) */
    const __m128d swm = _mm_castsi128_pd(_mm_set1_epi64x(sw));
    const __m128d tu01 = _mm_and_pd(swm, VLD(tp + DL_INC_TT_FWD));
    const __m128d tu23 = _mm_and_pd(swm, VLD(tp + DL_INC_TT_HBM));
    const __m128d dla = _mm_sub_pd(VLD(tl + DL_INC_TT_FWD), tu01); /* (fa, ba) */
    const __m128d dma = _mm_sub_pd(VLD(tl + DL_INC_TT_HBM), tu23); /* (ha, xa) */
    const __m128d dlb = _mm_sub_pd(VLD(tg + DL_INC_TT_FWD), tu01); /* (fb, bb) */
    const __m128d dmb = _mm_sub_pd(VLD(tg + DL_INC_TT_HBM), tu23); /* (hb, xb) */
    __m128d mem = _mm_max_pd(_mm_sub_pd(VLD(RA + DL_INC_F_HBM), dma),
                             _mm_add_pd(VLD(RB + DL_INC_F_HBM), dmb));
    if (!FEAS)
        mem = _mm_max_pd(mem, inc_exv(e, DL_INC_B_HBM, VLD(RA + DL_INC_F_XHBM),
                                      VLD(RB + DL_INC_F_XHBM), V->mem2, MASK));
    if (_mm_movemask_pd(_mm_cmpgt_pd(mem, V->lim))) return INFINITY;
    const __m128d look =
        _mm_max_pd(inc_exv(e, DL_INC_B_LF, VLD(RA + DL_INC_F_XLF), VLD(RB + DL_INC_F_XLF),
                           V->look2, MASK),
                   _mm_max_pd(_mm_sub_pd(VLD(RA + DL_INC_F_LF), dla),
                              _mm_add_pd(VLD(RB + DL_INC_F_LF), dlb)));
    /* (wq[0], wq[1]) */
    const __m128d w = _mm_sub_pd(_mm_set_pd(*pt, *dt), _mm_and_pd(swm, _mm_set_pd(*pu, *du)));
    __m128d acc = _mm_setzero_pd(); /* (x0, x1) */
    for (int i = 0; i <= TOP; i++)
        acc = _mm_max_pd(inc_tier2(RA, RB, L, i, w, e, V->xs2[i], V->xr2[i], V->tot, V->tv0[i],
                                   V->ibw[i], MASK),
                         acc);
    return inc_step2(look, acc, V->lat2, V->u_fi, V->u_b, V->k_fwd, V->k_bwd, V->dense_ar);
}
#undef VLD
#endif

/* ---- the fast path four lanes a vector (AVX, chosen at run time) ---------------------------
 * The lanes of two tiers at once, l = 2 i + q for i = 2 j, 2 j + 1, and the record's first
 * eight fields as (lf, lb, hbm, ddr) and their exclusions: the same operations lane by lane as
 * inc_fast_simd (vmaxpd / vminpd are a > b ? a : b, a < b ? a : b; no FMA), half the vector
 * instructions. Chunk 0 holds the node tier (lanes 0, 1) and the next (lanes 2, 3): both
 * receive formulas run and a constant blend keeps each lane's own. A last tier without a
 * partner runs two lanes (SSE2 operations, VEX-encoded). The accumulator takes the tiers in
 * order, as the scalar loop. */
#if DL_INC_SIMD && defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define DL_INC_AVX 1
#include <immintrin.h>
/* not always_inline: the plain variants hold the call in dead code, and GCC refuses to force
 * an AVX function into a non-AVX one; the AVX variants inline it (flatten) */
#define INC_AVX_FN static inline __attribute__((target("avx")))

/* the record's (lf, lb, hbm, ddr) and their exclusions, and the terms (fwd, bwd, hbm, ddr),
 * lie as four consecutive doubles each (one vector) */
typedef char inc_avx_layout_ok[(DL_INC_F_LB == DL_INC_F_LF + 1 && DL_INC_F_HBM == DL_INC_F_LF + 2 &&
                                 DL_INC_F_DDR == DL_INC_F_LF + 3 &&
                                 DL_INC_F_XLB == DL_INC_F_XLF + 1 &&
                                 DL_INC_F_XHBM == DL_INC_F_XLF + 2 &&
                                 DL_INC_F_XDDR == DL_INC_F_XLF + 3 &&
                                 DL_INC_B_LB == DL_INC_B_LF + 1 && DL_INC_B_HBM == DL_INC_B_LF + 2 &&
                                 DL_INC_B_DDR == DL_INC_B_LF + 3 &&
                                 DL_INC_TT_BWD == DL_INC_TT_FWD + 1 &&
                                 DL_INC_TT_HBM == DL_INC_TT_FWD + 2 &&
                                 DL_INC_TT_DDR == DL_INC_TT_FWD + 3) ? 1 : -1];

/* per-lane constants, four lanes a vector (lanes past the top tier unused) */
typedef struct {
    double ibw[2 * DL_INC_MAXT], tv0[2 * DL_INC_MAXT], xs2[2 * DL_INC_MAXT],
        xr2[2 * DL_INC_MAXT], tot[2 * DL_INC_MAXT];
    double head2[4]; /* third entries of the lf, lb, hbm, ddr lists */
    double lim[2], lat[2], u_fi[2], u_b[2];
    double k_fwd, k_bwd, dense_ar;
} inc_avx_t;

/* lane masks of four bits (bit 0: lane 0) */
static const union {
    int64_t i[16][4];
    __m256d v[16];
} inc_mask4 = {{{0, 0, 0, 0},   {-1, 0, 0, 0},   {0, -1, 0, 0},   {-1, -1, 0, 0},
                {0, 0, -1, 0},  {-1, 0, -1, 0},  {0, -1, -1, 0},  {-1, -1, -1, 0},
                {0, 0, 0, -1},  {-1, 0, 0, -1},  {0, -1, 0, -1},  {-1, -1, 0, -1},
                {0, 0, -1, -1}, {-1, 0, -1, -1}, {0, -1, -1, -1}, {-1, -1, -1, -1}}};

/* m ? x : y lane by lane for a lane mask m, as bit operations (as inc_sel) */
INC_AVX_FN __m256d inc_sel4(__m256d m, __m256d x, __m256d y) {
    return _mm256_or_pd(_mm256_and_pd(m, x), _mm256_andnot_pd(m, y));
}

/* inc_fast_simd's score, arguments as there; V the per-lane constants. Always with the
 * selects (no MASK 0 twin): a blend costs less than a branch on e == 0, mispredicted where a
 * and b often head a list together (a quarter of the Criteo bench's candidates). */
INC_AVX_FN double inc_fast_avx(const double *RA, const double *RB, const double *tl,
                               const double *tg, const double *tp, int64_t sw,
                               const double *dt, const double *pt, const double *du,
                               const double *pu, uint64_t e, const inc_avx_t *V,
                               const int TOP, const int FEAS) {
    const int L = 2 * (TOP + 1);
#define LD4(p) _mm256_loadu_pd(p)
#define LD2(p) _mm_loadu_pd(p)
/* EX of four lanes from bit B on: the third entry where the bit is set */
#define EX4(B, xa_, xb_, v2) \
    inc_sel4(inc_mask4.v[(e >> (B)) & 15u], (v2), _mm256_min_pd((xa_), (xb_)))
    const __m256d swm = _mm256_castsi256_pd(_mm256_set1_epi64x(sw));
    /* the partner's terms, +0.0 for a move (as x - 0.0 in the scalar path) */
    const __m256d tu = _mm256_and_pd(swm, LD4(tp + DL_INC_TT_FWD));
    const __m256d da = _mm256_sub_pd(LD4(tl + DL_INC_TT_FWD), tu); /* (fa, ba, ha, xa) */
    const __m256d db = _mm256_sub_pd(LD4(tg + DL_INC_TT_FWD), tu); /* (fb, bb, hb, xb) */
    const __m256d m4 = _mm256_max_pd(_mm256_sub_pd(LD4(RA + DL_INC_F_LF), da),
                                     _mm256_add_pd(LD4(RB + DL_INC_F_LF), db));
    const __m256d x4 = EX4(DL_INC_B_LF, LD4(RA + DL_INC_F_XLF), LD4(RB + DL_INC_F_XLF),
                           LD4(V->head2));
    __m128d mem = _mm256_extractf128_pd(m4, 1);
    if (!FEAS) mem = _mm_max_pd(mem, _mm256_extractf128_pd(x4, 1));
    if (_mm_movemask_pd(_mm_cmpgt_pd(mem, LD2(V->lim)))) return INFINITY;
    const __m128d look = _mm_max_pd(_mm256_castpd256_pd128(x4), _mm256_castpd256_pd128(m4));
    /* (wq[0], wq[1]) */
    const __m128d w =
        _mm_sub_pd(_mm_set_pd(*pt, *dt),
                   _mm_and_pd(_mm256_castpd256_pd128(swm), _mm_set_pd(*pu, *du)));
    const __m256d w4 = _mm256_insertf128_pd(_mm256_castpd128_pd256(w), w, 1);
    __m128d acc = _mm_setzero_pd(); /* (x0, x1) */
#define G(R, g) ((R) + DL_INC_F_G0 + (g) * L + l)
    int i = 0;
    for (; i + 1 <= TOP; i += 2) {
        const int l = 2 * i;
        const __m256d oa = _mm256_sub_pd(LD4(G(RA, DL_INC_G_OWN)), w4);
        const __m256d ob = _mm256_add_pd(LD4(G(RB, DL_INC_G_OWN)), w4);
        const __m256d send =
            _mm256_max_pd(EX4(DL_INC_B_SEND + l, LD4(G(RA, DL_INC_G_XS)),
                              LD4(G(RB, DL_INC_G_XS)), LD4(V->xs2 + l)),
                          _mm256_max_pd(_mm256_mul_pd(oa, LD4(G(RA, DL_INC_G_FAC))),
                                        _mm256_mul_pd(ob, LD4(G(RB, DL_INC_G_FAC)))));
        const __m256d exr = EX4(DL_INC_B_RECV + l, LD4(G(RA, DL_INC_G_XR)),
                                LD4(G(RB, DL_INC_G_XR)), LD4(V->xr2 + l));
        const __m256d same =
            _mm256_cmp_pd(LD4(G(RA, DL_INC_G_DOM)), LD4(G(RB, DL_INC_G_DOM)), _CMP_EQ_OQ);
        const __m256d dA = LD4(G(RA, DL_INC_G_DS)), dB = LD4(G(RB, DL_INC_G_DS));
        const __m256d dAw = _mm256_sub_pd(dA, w4), dBw = _mm256_add_pd(dB, w4);
        const __m256d tot = LD4(V->tot + l);
        const __m256d r_diff = _mm256_max_pd(
            exr, _mm256_max_pd(_mm256_sub_pd(tot, dAw), _mm256_sub_pd(tot, dBw)));
        __m256d recv = inc_sel4(same, LD4(V->tv0 + l), r_diff);
        if (i == 0) { /* lanes 0, 1: the node tier, the node less its smallest */
            const __m256d nA = LD4(G(RA, DL_INC_G_NMX)), nB = LD4(G(RB, DL_INC_G_NMX));
            const __m256d n_same = _mm256_max_pd(
                exr, _mm256_sub_pd(dA, _mm256_min_pd(_mm256_max_pd(nA, nB),
                                                     _mm256_min_pd(oa, ob))));
            const __m256d n_diff = _mm256_max_pd(
                exr, _mm256_max_pd(_mm256_sub_pd(dAw, _mm256_min_pd(nA, oa)),
                                   _mm256_sub_pd(dBw, _mm256_min_pd(nB, ob))));
            recv = _mm256_blend_pd(inc_sel4(same, n_same, n_diff), recv, 0xC);
        }
        const __m256d v = _mm256_mul_pd(_mm256_max_pd(send, recv), LD4(V->ibw + l));
        acc = _mm_max_pd(_mm256_castpd256_pd128(v), acc);
        acc = _mm_max_pd(_mm256_extractf128_pd(v, 1), acc);
    }
    if (i <= TOP) /* the last tier alone, two lanes */
        acc = _mm_max_pd(inc_tier2(RA, RB, L, i, w, e, LD2(V->xs2 + 2 * i), LD2(V->xr2 + 2 * i),
                                   LD2(V->tot + 2 * i), LD2(V->tv0 + 2 * i),
                                   LD2(V->ibw + 2 * i), 1),
                         acc);
#undef G
#undef EX4
    return inc_step2(look, acc, LD2(V->lat), LD2(V->u_fi), LD2(V->u_b), V->k_fwd, V->k_bwd,
                     V->dense_ar);
#undef LD4
#undef LD2
}
#else
#define DL_INC_AVX 0
#endif

/* One batch with the top tier TOP a compile-time constant (loops over tiers unrolled) and
 * FEAS whether every rank fits in memory now (then only ranks a and b can overflow).
 * Returns the number of bad candidates. */
static inline __attribute__((always_inline)) int64_t
inc_batch(const inc_args_t *A, int64_t lo, int64_t hi, const int TOP, const int FEAS,
          const int AVX) {
    (void)AVX; /* unread without DL_INC_AVX */
    static const double zeros[4] = {0.0, 0.0, 0.0, 0.0};
    const double *c = A->c, *rk = A->rk, *fac = A->fac, *dsum = A->dsum, *tv = A->tv,
                 *nb_v = A->nb_v, *tt = A->tt, *rec = A->rec, *tdim = A->tdim,
                 *tpool = A->tpool;
    const int64_t *did = A->did, *ti = A->ti, *nb_i = A->nb_i, *rmask = A->rmask,
                  *prank = A->prank, *ptier = A->ptier, *cand = A->cand;
    const int64_t world = A->world, n_t = A->n_tables;
    const int64_t ncol = DL_INC_F_G0 + DL_INC_N_G * 2 * (TOP + 1); /* == A->rec_cols, checked */
    double *out = A->out;
    const int L = 2 * (TOP + 1); /* lanes l = 2 i + q */
    const double usable = c[DL_INC_C_USABLE], ddr_cap = c[DL_INC_C_DDR_CAP];
    const double cur = c[DL_INC_C_STEP], lat = c[DL_INC_C_LAT];
    const double u_idx = c[DL_INC_C_UNIT_IDX], u_fwd = c[DL_INC_C_UNIT_FWD];
    const double u_bwd = c[DL_INC_C_UNIT_BWD], k_fwd = c[DL_INC_C_CONST_FWD];
    const double k_bwd = c[DL_INC_C_CONST_BWD], dense_ar = c[DL_INC_C_DENSE_AR];
    const double tot[2] = {c[DL_INC_C_TOT_POOL], c[DL_INC_C_TOT_IDX]};
    double inv_bw[DL_INC_MAXT], ibw_l[2 * DL_INC_MAXT], tv0_l[2 * DL_INC_MAXT];
    double xs2_l[2 * DL_INC_MAXT], xr2_l[2 * DL_INC_MAXT]; /* third entries of the lists */
    for (int i = 0; i < DL_INC_MAXT; i++) inv_bw[i] = c[DL_INC_C_INV_BW + i];
    /* the all-to-alls now (a tier change leaves them as they are), per-lane constants */
    double now0 = 0.0, now1 = 0.0;
    for (int i = 0; i <= TOP; i++) {
        double v = dmax(TV(DL_INC_S_SEND + i)[0], TV(DL_INC_S_RECV + i)[0]) * inv_bw[i];
        if (v > now0) now0 = v;
        v = dmax(TV(DL_INC_S_SEND + DL_INC_MAXT + i)[0],
                 TV(DL_INC_S_RECV + DL_INC_MAXT + i)[0]) * inv_bw[i];
        if (v > now1) now1 = v;
        for (int q = 0; q < 2; q++) {
            ibw_l[2 * i + q] = inv_bw[i];
            tv0_l[2 * i + q] = TV(DL_INC_S_RECV + q * DL_INC_MAXT + i)[0];
            xs2_l[2 * i + q] = TV(DL_INC_S_SEND + q * DL_INC_MAXT + i)[2];
            xr2_l[2 * i + q] = TV(DL_INC_S_RECV + q * DL_INC_MAXT + i)[2];
        }
    }
    const double lf2 = TV(DL_INC_S_LF)[2], lb2 = TV(DL_INC_S_LB)[2];
    const double hbm2 = TV(DL_INC_S_HBM)[2], ddr2 = TV(DL_INC_S_DDR)[2];
#if DL_INC_SIMD
    inc_simd_t V;
    V.lim = _mm_set_pd(ddr_cap, usable);
    V.tot = _mm_set_pd(tot[1], tot[0]);
    V.look2 = _mm_set_pd(lb2, lf2);
    V.mem2 = _mm_set_pd(ddr2, hbm2);
    V.lat2 = _mm_set1_pd(lat);
    V.u_fi = _mm_set_pd(u_idx, u_fwd);
    V.u_b = _mm_set1_pd(u_bwd);
    V.k_fwd = k_fwd;
    V.k_bwd = k_bwd;
    V.dense_ar = dense_ar;
    for (int i = 0; i <= TOP; i++) {
        V.ibw[i] = _mm_set1_pd(inv_bw[i]);
        V.tv0[i] = _mm_loadu_pd(tv0_l + 2 * i);
        V.xs2[i] = _mm_loadu_pd(xs2_l + 2 * i);
        V.xr2[i] = _mm_loadu_pd(xr2_l + 2 * i);
    }
#endif
#if DL_INC_AVX
    inc_avx_t V4;
    if (AVX) {
        for (int l = 0; l < 2 * DL_INC_MAXT; l++) { /* lanes past the top tier unread */
            const int in = l < 2 * (TOP + 1);
            V4.ibw[l] = in ? ibw_l[l] : 0.0;
            V4.tv0[l] = in ? tv0_l[l] : 0.0;
            V4.xs2[l] = in ? xs2_l[l] : 0.0;
            V4.xr2[l] = in ? xr2_l[l] : 0.0;
            V4.tot[l] = tot[l & 1];
        }
        V4.head2[0] = lf2;
        V4.head2[1] = lb2;
        V4.head2[2] = hbm2;
        V4.head2[3] = ddr2;
        V4.lim[0] = usable;
        V4.lim[1] = ddr_cap;
        V4.lat[0] = V4.lat[1] = lat;
        V4.u_fi[0] = u_fwd;
        V4.u_fi[1] = u_idx;
        V4.u_b[0] = V4.u_b[1] = u_bwd;
        V4.k_fwd = k_fwd;
        V4.k_bwd = k_bwd;
        V4.dense_ar = dense_ar;
    }
#endif
    int64_t bad = 0;
    for (int64_t k = lo; k < hi; k++) {
        const int64_t *cd = cand + 4 * k;
        int64_t t = cd[0], b = cd[1], u = cd[2], tier = cd[3];
        if ((uint64_t)t >= (uint64_t)n_t || (uint64_t)(u + 1) > (uint64_t)n_t) {
            out[k] = NAN;
            bad++;
            continue;
        }
        /* a swap: a loses t and gains u, b the reverse, the tiers stay (masks, no branch:
         * moves and swaps come mixed) */
        const int64_t sw = -(int64_t)(u >= 0); /* all ones for a swap */
        const int swap = u >= 0;
        const int64_t uu = t ^ ((t ^ u) & sw);
        int64_t a = prank[t], ta = ptier[t], pu = prank[uu], qu = ptier[uu];
        b ^= (b ^ pu) & sw;
        const int64_t tb = qu & sw;
        tier ^= (tier ^ ta) & sw;
        if (((uint64_t)a >= (uint64_t)world) | ((uint64_t)b >= (uint64_t)world) |
            ((uint64_t)ta >= DL_N_MT) | ((uint64_t)tb >= DL_N_MT) | ((uint64_t)tier >= DL_N_MT)) {
            out[k] = NAN;
            bad++;
            continue;
        }
        const double *tl = tt + (t * DL_N_MT + ta) * DL_INC_N_TT;   /* terms a loses */
        const double *tg = tt + (t * DL_N_MT + tier) * DL_INC_N_TT; /* terms b gains */
        const double *tp = tt + (uu * DL_N_MT + tb) * DL_INC_N_TT;  /* the partner's (a swap) */
/* the terms a loses (fa ..) and b gains (fb ..) less the partner's (none for a move) */
#define INC_TERMS                                                      \
    const double *tu = swap ? tp : zeros;                              \
    double fa = tl[DL_INC_TT_FWD] - tu[DL_INC_TT_FWD];                 \
    double ba = tl[DL_INC_TT_BWD] - tu[DL_INC_TT_BWD];                 \
    double ha = tl[DL_INC_TT_HBM] - tu[DL_INC_TT_HBM];                 \
    double xa = tl[DL_INC_TT_DDR] - tu[DL_INC_TT_DDR];                 \
    double fb = tg[DL_INC_TT_FWD] - tu[DL_INC_TT_FWD];                 \
    double bb = tg[DL_INC_TT_BWD] - tu[DL_INC_TT_BWD];                 \
    double hb = tg[DL_INC_TT_HBM] - tu[DL_INC_TT_HBM];                 \
    double xb = tg[DL_INC_TT_DDR] - tu[DL_INC_TT_DDR]
        if (__builtin_expect(a == b, 0)) {
            if (swap || tier == ta) {
                out[k] = cur;
                continue;
            }
            INC_TERMS;
            /* memory-tier change on rank a: the all-to-alls do not change */
            double h = RK(DL_INC_R_HBM, a) - ha + hb;
            double x = RK(DL_INC_R_DDR, a) - xa + xb;
            if (dmax(inc_ex2(TV(DL_INC_S_HBM), TI(DL_INC_S_HBM), a, a), h) > usable ||
                dmax(inc_ex2(TV(DL_INC_S_DDR), TI(DL_INC_S_DDR), a, a), x) > ddr_cap) {
                out[k] = INFINITY;
                continue;
            }
            double lf = dmax(inc_ex2(TV(DL_INC_S_LF), TI(DL_INC_S_LF), a, a),
                             RK(DL_INC_R_LF, a) - fa + fb);
            double lb = dmax(inc_ex2(TV(DL_INC_S_LB), TI(DL_INC_S_LB), a, a),
                             RK(DL_INC_R_LB, a) - ba + bb);
            out[k] = inc_step(lat, u_idx, u_fwd, u_bwd, k_fwd, k_bwd, dense_ar, lf, lb, now0,
                              now1);
            continue;
        }
        const double *RA = rec + a * ncol, *RB = rec + b * ncol;
        uint64_t pa0 = (uint64_t)rmask[2 * a], pa1 = (uint64_t)rmask[2 * a + 1];
        uint64_t pb0 = (uint64_t)rmask[2 * b], pb1 = (uint64_t)rmask[2 * b + 1];
        /* bit s of e: a and b are the first two entries of list s (their exclusion is then
         * the list's third entry) */
        uint64_t e = (pa0 & pb1) | (pb0 & pa1);
#if DL_INC_SIMD
        /* the fast path below two lanes a vector (the node bits of e only matter to the
         * general path); without selects when no list has a and b as its first two entries */
        const uint64_t ev = e & ~(3ull << DL_INC_B_NB);
        if (!(TOP >= 0 && ev != e &&
              RA[DL_INC_F_G0 + DL_INC_G_DOM * L] == RB[DL_INC_F_G0 + DL_INC_G_DOM * L])) {
#if DL_INC_AVX
            if (AVX) {
                out[k] = inc_fast_avx(RA, RB, tl, tg, tp, sw, tdim + t, tpool + t, tdim + uu,
                                      tpool + uu, ev, &V4, TOP, FEAS);
                continue;
            }
#endif
            if (__builtin_expect(ev == 0, 1))
                out[k] = inc_fast_simd(RA, RB, tl, tg, tp, sw, tdim + t, tpool + t, tdim + uu,
                                       tpool + uu, ev, &V, TOP, FEAS, 0);
            else
                out[k] = inc_fast_simd(RA, RB, tl, tg, tp, sw, tdim + t, tpool + t, tdim + uu,
                                       tpool + uu, ev, &V, TOP, FEAS, 1);
            continue;
        }
#endif
        INC_TERMS;
#undef INC_TERMS
        double wq[2];
        wq[0] = tdim[t] - (swap ? tdim[uu] : 0.0);
        wq[1] = tpool[t] - (swap ? tpool[uu] : 0.0);
        int same_node = TOP >= 0 && RA[DL_INC_F_G0 + DL_INC_G_DOM * L] ==
                                        RB[DL_INC_F_G0 + DL_INC_G_DOM * L];
        if (__builtin_expect(!(same_node && (e & (3ull << DL_INC_B_NB))), 1)) {
            /* fast path: every exclusion from the two records */
#define EX(bit, xa_, xb_, v2) (((e >> (bit)) & 1u) ? (v2) : dmin((xa_), (xb_)))
            double hm = dmax(RA[DL_INC_F_HBM] - ha, RB[DL_INC_F_HBM] + hb);
            double xm = dmax(RA[DL_INC_F_DDR] - xa, RB[DL_INC_F_DDR] + xb);
            if (!FEAS) {
                hm = dmax(hm, EX(DL_INC_B_HBM, RA[DL_INC_F_XHBM], RB[DL_INC_F_XHBM], hbm2));
                xm = dmax(xm, EX(DL_INC_B_DDR, RA[DL_INC_F_XDDR], RB[DL_INC_F_XDDR], ddr2));
            }
            if ((hm > usable) | (xm > ddr_cap)) {
                out[k] = INFINITY;
                continue;
            }
            double lf = dmax(EX(DL_INC_B_LF, RA[DL_INC_F_XLF], RB[DL_INC_F_XLF], lf2),
                             dmax(RA[DL_INC_F_LF] - fa, RB[DL_INC_F_LF] + fb));
            double lb = dmax(EX(DL_INC_B_LB, RA[DL_INC_F_XLB], RB[DL_INC_F_XLB], lb2),
                             dmax(RA[DL_INC_F_LB] - ba, RB[DL_INC_F_LB] + bb));
#define G(R, g) ((R) + DL_INC_F_G0 + (g) * L)
            const double *oA = G(RA, DL_INC_G_OWN), *oB = G(RB, DL_INC_G_OWN);
            const double *fA = G(RA, DL_INC_G_FAC), *fB = G(RB, DL_INC_G_FAC);
            const double *sA = G(RA, DL_INC_G_XS), *sB = G(RB, DL_INC_G_XS);
            const double *dA = G(RA, DL_INC_G_DS), *dB = G(RB, DL_INC_G_DS);
            const double *rA = G(RA, DL_INC_G_XR), *rB = G(RB, DL_INC_G_XR);
            const double *mA = G(RA, DL_INC_G_DOM), *mB = G(RB, DL_INC_G_DOM);
            const double *nA = G(RA, DL_INC_G_NMX), *nB = G(RB, DL_INC_G_NMX);
#undef G
            double x0 = 0.0, x1 = 0.0;
            for (int l = 0; l < L; l++) {
                const double w = wq[l & 1];
                double oa = oA[l] - w, ob = oB[l] + w;
                double send = dmax(EX(DL_INC_B_SEND + l, sA[l], sB[l], xs2_l[l]),
                                   dmax(oa * fA[l], ob * fB[l]));
                double exr = EX(DL_INC_B_RECV + l, rA[l], rB[l], xr2_l[l]);
                int same = mA[l] == mB[l];
                double recv;
                if (l < 2) { /* node tier: the receive side is the node less its smallest */
                    double r_same = dmax(exr, dA[l] - dmin(dmax(nA[l], nB[l]), dmin(oa, ob)));
                    double r_diff = dmax(exr, dmax(dA[l] - w - dmin(nA[l], oa),
                                                   dB[l] + w - dmin(nB[l], ob)));
                    recv = same ? r_same : r_diff;
                } else {
                    const double tq = tot[l & 1];
                    double r_diff = dmax(exr, dmax(tq - (dA[l] - w), tq - (dB[l] + w)));
                    recv = same ? tv0_l[l] : r_diff;
                }
                double v = dmax(send, recv) * ibw_l[l];
                if (l & 1)
                    x1 = v > x1 ? v : x1;
                else
                    x0 = v > x0 ? v : x0;
            }
            out[k] = inc_step(lat, u_idx, u_fwd, u_bwd, k_fwd, k_bwd, dense_ar, lf, lb, x0,
                              x1);
            continue;
#undef EX
        }
        /* general path: a and b are the two smallest of their node */
        double hm = dmax(RK(DL_INC_R_HBM, a) - ha, RK(DL_INC_R_HBM, b) + hb);
        double xm = dmax(RK(DL_INC_R_DDR, a) - xa, RK(DL_INC_R_DDR, b) + xb);
        if (!FEAS) { /* other ranks may be over too */
            hm = dmax(hm, inc_ex2(TV(DL_INC_S_HBM), TI(DL_INC_S_HBM), a, b));
            xm = dmax(xm, inc_ex2(TV(DL_INC_S_DDR), TI(DL_INC_S_DDR), a, b));
        }
        if (hm > usable || xm > ddr_cap) {
            out[k] = INFINITY;
            continue;
        }
        double lf = dmax(inc_ex2(TV(DL_INC_S_LF), TI(DL_INC_S_LF), a, b),
                         dmax(RK(DL_INC_R_LF, a) - fa, RK(DL_INC_R_LF, b) + fb));
        double lb = dmax(inc_ex2(TV(DL_INC_S_LB), TI(DL_INC_S_LB), a, b),
                         dmax(RK(DL_INC_R_LB, a) - ba, RK(DL_INC_R_LB, b) + bb));
        double xq[2];
        for (int q = 0; q < 2; q++) {
            const double w = wq[q];
            const int row = q == 0 ? DL_INC_R_OWN : DL_INC_R_IDX;
            const int row0 = q == 0 ? DL_INC_R_OWN0 : DL_INC_R_IDX;
            double worst = 0.0;
            for (int i = 0; i <= TOP; i++) {
                const int rr = i == 0 ? row0 : row;
                const int ss = DL_INC_S_SEND + q * DL_INC_MAXT + i;
                const int sr = DL_INC_S_RECV + q * DL_INC_MAXT + i;
                double oa = RK(rr, a) - w;
                double ob = RK(rr, b) + w;
                double send = dmax(inc_ex2(TV(ss), TI(ss), a, b),
                                   dmax(oa * fac[i * world + a], ob * fac[i * world + b]));
                int64_t da = did[i * world + a], db = did[i * world + b];
                const double *ds = dsum + (q * DL_INC_MAXT + i) * world;
                double recv;
                if (i == 0) {
                    const double *nv = nb_v + (q * world) * 3;
                    const int64_t *ni = nb_i + (q * world) * 3;
                    if (da == db) {
                        double mn = dmin(inc_mn2(nv + 3 * da, ni + 3 * da, a, b), dmin(oa, ob));
                        recv = dmax(inc_ex2(TV(sr), TI(sr), da, da), ds[da] - mn);
                    } else {
                        double mna = ni[3 * da] != a ? nv[3 * da] : nv[3 * da + 1];
                        double mnb = ni[3 * db] != b ? nv[3 * db] : nv[3 * db + 1];
                        mna = dmin(mna, oa);
                        mnb = dmin(mnb, ob);
                        recv = dmax(inc_ex2(TV(sr), TI(sr), da, db),
                                    dmax(ds[da] - w - mna, ds[db] + w - mnb));
                    }
                } else if (da == db) {
                    recv = TV(sr)[0];
                } else {
                    recv = dmax(inc_ex2(TV(sr), TI(sr), da, db),
                                dmax(tot[q] - (ds[da] - w), tot[q] - (ds[db] + w)));
                }
                double v = dmax(send, recv) * inv_bw[i];
                if (v > worst) worst = v;
            }
            xq[q] = worst;
        }
        out[k] = inc_step(lat, u_idx, u_fwd, u_bwd, k_fwd, k_bwd, dense_ar, lf, lb, xq[0],
                          xq[1]);
    }
    return bad;
}

/* one compiled loop per top tier (-1 .. DL_INC_MAXT - 1) and feasibility, and with the AVX
 * fast path where the compiler can build it */
#define INC_VARIANT(N, T, F)                                                            \
    static int64_t inc_batch_##N##_##F(const inc_args_t *A, int64_t lo, int64_t hi) { \
        return inc_batch(A, lo, hi, T, F, 0);                                          \
    }
#define INC_VARIANTS(N, T) INC_VARIANT(N, T, 0) INC_VARIANT(N, T, 1)
INC_VARIANTS(0, -1)
INC_VARIANTS(1, 0)
INC_VARIANTS(2, 1)
INC_VARIANTS(3, 2)
INC_VARIANTS(4, 3)
INC_VARIANTS(5, 4)
INC_VARIANTS(6, 5)
typedef int64_t (*inc_fn)(const inc_args_t *, int64_t, int64_t);
static const inc_fn INC_FNS[DL_INC_MAXT + 1][2] = {
    {inc_batch_0_0, inc_batch_0_1}, {inc_batch_1_0, inc_batch_1_1},
    {inc_batch_2_0, inc_batch_2_1}, {inc_batch_3_0, inc_batch_3_1},
    {inc_batch_4_0, inc_batch_4_1}, {inc_batch_5_0, inc_batch_5_1},
    {inc_batch_6_0, inc_batch_6_1}};
#if DL_INC_AVX
#define INC_VARIANT_AVX(N, T, F)                                                                \
    __attribute__((target("avx"), flatten)) static int64_t inc_batch_avx_##N##_##F(const inc_args_t *A, \
                                                                          int64_t lo, int64_t hi) { \
        return inc_batch(A, lo, hi, T, F, 1);                                                   \
    }
#define INC_VARIANTS_AVX(N, T) INC_VARIANT_AVX(N, T, 0) INC_VARIANT_AVX(N, T, 1)
/* top tier -1 (one rank domain) has no tier lanes: the two-lane path is all of it */
INC_VARIANTS_AVX(1, 0)
INC_VARIANTS_AVX(2, 1)
INC_VARIANTS_AVX(3, 2)
INC_VARIANTS_AVX(4, 3)
INC_VARIANTS_AVX(5, 4)
INC_VARIANTS_AVX(6, 5)
static const inc_fn INC_FNS_AVX[DL_INC_MAXT + 1][2] = {
    {inc_batch_0_0, inc_batch_0_1},         {inc_batch_avx_1_0, inc_batch_avx_1_1},
    {inc_batch_avx_2_0, inc_batch_avx_2_1}, {inc_batch_avx_3_0, inc_batch_avx_3_1},
    {inc_batch_avx_4_0, inc_batch_avx_4_1}, {inc_batch_avx_5_0, inc_batch_avx_5_1},
    {inc_batch_avx_6_0, inc_batch_avx_6_1}};
#endif
#undef RK
#undef TV
#undef TI

static int64_t score_moves(const double *c, const double *rk, const double *fac,
                           const int64_t *did, const double *dsum, const double *tv,
                           const int64_t *ti, const double *nb_v, const int64_t *nb_i,
                           const double *tt, const double *rec, const int64_t *rmask,
                           int64_t rec_cols, const double *tdim, const double *tpool,
                           const int64_t *prank, const int64_t *ptier, int64_t world,
                           int64_t n_tables, const int64_t *cand, int64_t n_cand, double *out,
                           int avx) {
    (void)avx; /* unread without DL_INC_AVX */
    if (!c || !rk || !fac || !did || !dsum || !tv || !ti || !nb_v || !nb_i || !tt || !rec ||
        !rmask || !tdim || !tpool || !prank || !ptier || !cand || !out || n_cand < 0 ||
        n_tables < 0)
        return -1;
    int ok = world >= 1 && c[DL_INC_C_WORLD] == (double)world;
    double topd = c[DL_INC_C_TOP];
    int top = ok && topd >= -1.0 && topd < (double)DL_INC_MAXT ? (int)topd : -2;
    ok = ok && (double)top == topd &&
         rec_cols == DL_INC_F_G0 + DL_INC_N_G * 2 * (int64_t)(top + 1);
    /* every domain index the kernel reads must lie in [0, world) */
    for (int i = 0; ok && i <= top; i++) {
        const int64_t *d = did + i * world;
        int64_t acc = 0;
        for (int64_t r = 0; r < world; r++) acc |= ((uint64_t)d[r] >= (uint64_t)world);
        ok = !acc;
    }
    if (!ok) {
        for (int64_t k = 0; k < n_cand; k++) out[k] = NAN;
        return -1;
    }
    inc_args_t A = {c,   rk,   fac,   dsum,  tv,    nb_v,  tt,     rec,      tdim,  tpool,
                    did, ti,   nb_i,  rmask, prank, ptier, cand,   world,    n_tables,
                    rec_cols, out};
    int feas = c[DL_INC_C_FEASIBLE] > 0.0;
#if DL_INC_AVX
    if (avx && __builtin_cpu_supports("avx")) return INC_FNS_AVX[top + 1][feas](&A, 0, n_cand);
#endif
    return INC_FNS[top + 1][feas](&A, 0, n_cand);
}

#define SCORE_MOVES_ARGS                                                                     \
    c, rk, fac, did, dsum, tv, ti, nb_v, nb_i, tt, rec, rmask, rec_cols, tdim, tpool, prank, \
        ptier, world, n_tables, cand, n_cand, out
int64_t dl_score_moves(const double *c, const double *rk, const double *fac, const int64_t *did,
                       const double *dsum, const double *tv, const int64_t *ti,
                       const double *nb_v, const int64_t *nb_i, const double *tt,
                       const double *rec, const int64_t *rmask, int64_t rec_cols,
                       const double *tdim, const double *tpool, const int64_t *prank,
                       const int64_t *ptier, int64_t world, int64_t n_tables,
                       const int64_t *cand, int64_t n_cand, double *out) {
    return score_moves(SCORE_MOVES_ARGS, 1);
}

int64_t dl_score_moves_base(const double *c, const double *rk, const double *fac,
                            const int64_t *did, const double *dsum, const double *tv,
                            const int64_t *ti, const double *nb_v, const int64_t *nb_i,
                            const double *tt, const double *rec, const int64_t *rmask,
                            int64_t rec_cols, const double *tdim, const double *tpool,
                            const int64_t *prank, const int64_t *ptier, int64_t world,
                            int64_t n_tables, const int64_t *cand, int64_t n_cand,
                            double *out) {
    return score_moves(SCORE_MOVES_ARGS, 0);
}
#undef SCORE_MOVES_ARGS
