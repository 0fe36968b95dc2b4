/* DLRM step-time and memory model: a port of src/trainscape/dlrm/reference.py (the spec),
 * with the tier and collective functions of src/trainscape/model/network.py and
 * collectives.py it uses. Sources are cited in the reference; names match it one to one.
 * Pure: no allocation, no I/O, no global state; indexes are checked before use. */
#include <math.h>
#include <stdint.h>

#include "dlrm.h"

#define GIB 1073741824.0

static inline double dmax(double a, double b) { return a >= b ? a : b; }
static inline double dmin(double a, double b) { return a <= b ? a : b; }

/* ---- network.py ---------------------------------------------------------------------- */
static inline double tier_field(const double *sys, int tier, int field) {
    return sys[DL_SYS_TIER_BASE + tier * DL_N_TIER + field];
}
static inline int n_tiers(const double *sys) { return (int)sys[DL_SYS_N_TIERS]; }
static double tier_span(const double *sys, int tier) {
    if (tier >= n_tiers(sys) - 1) return INFINITY;
    double span = 1.0;
    for (int i = 0; i < tier + 1; i++) span *= tier_field(sys, i, DL_TIER_SIZE);
    return span;
}
static double tier_link_bandwidth(const double *sys, int tier) {
    return tier_field(sys, tier, DL_TIER_BANDWIDTH) * tier_field(sys, tier, DL_TIER_EFFICIENCY) /
           tier_field(sys, tier, DL_TIER_OVERSUBSCRIPTION);
}
static double tier_path_bandwidth(const double *sys, int tier) {
    if (tier == 0) return tier_link_bandwidth(sys, 0);
    double bw = tier_link_bandwidth(sys, 1);
    for (int i = 2; i < tier + 1; i++) bw = dmin(bw, tier_link_bandwidth(sys, i));
    return bw;
}
static inline double tier_latency(const double *sys, int tier) {
    return tier_field(sys, tier, DL_TIER_LATENCY);
}
static double dim_members_within(double span, double degree, double stride) {
    if (span >= stride * degree) return degree;
    double inside = floor(span / stride);
    if (inside < 1.0) return 1.0;
    return inside;
}
static double group_members_within(double span, double n_a, double s_a, double n_b, double s_b,
                                   double n_c, double s_c) {
    return dim_members_within(span, n_a, s_a) * dim_members_within(span, n_b, s_b) *
           dim_members_within(span, n_c, s_c);
}
static double group_fanout(const double *sys, int tier, double n_a, double s_a, double n_b,
                           double s_b, double n_c, double s_c) {
    double inner = 1.0;
    if (tier > 0)
        inner = group_members_within(tier_span(sys, tier - 1), n_a, s_a, n_b, s_b, n_c, s_c);
    double outer = group_members_within(tier_span(sys, tier), n_a, s_a, n_b, s_b, n_c, s_c);
    return outer / inner;
}
static int group_top_tier(const double *sys, double n_a, double s_a, double n_b, double s_b,
                          double n_c, double s_c) {
    int top = -1;
    for (int i = 0; i < n_tiers(sys); i++)
        if (group_fanout(sys, i, n_a, s_a, n_b, s_b, n_c, s_c) > 1.0) top = i;
    return top;
}

/* ---- collectives.py -------------------------------------------------------------------- */
static double ring_all_reduce_time(double n, double nbytes, double latency, double bandwidth) {
    if (n <= 1.0) return 0.0;
    return 2.0 * (n - 1.0) * latency + 2.0 * (n - 1.0) / n * nbytes / bandwidth;
}
static double ring_all_gather_time(double n, double nbytes, double latency, double bandwidth) {
    if (n <= 1.0) return 0.0;
    return (n - 1.0) * latency + (n - 1.0) / n * nbytes / bandwidth;
}
static double tree_all_reduce_time(double n, double nbytes, double latency, double bandwidth) {
    if (n <= 1.0) return 0.0;
    double depth = ceil(log2(n));
    return 2.0 * depth * latency + 2.0 * nbytes / bandwidth;
}
/* the DLRM model only uses one-dimension groups (n, 1, 1, 1, 1, 1) */
static double all_reduce_time(const double *sys, double nbytes, double n) {
    int top = group_top_tier(sys, n, 1.0, 1.0, 1.0, 1.0, 1.0);
    if (n <= 1.0 || top < 0 || nbytes <= 0.0) return 0.0;
    double lat = tier_latency(sys, top), bw = tier_path_bandwidth(sys, top);
    double best = ring_all_reduce_time(n, nbytes, lat, bw);
    best = dmin(best, tree_all_reduce_time(n, nbytes, lat, bw));
    double hier = 0.0, inner = 1.0;
    for (int i = 0; i < top + 1; i++) {
        double f = group_fanout(sys, i, n, 1.0, 1.0, 1.0, 1.0, 1.0);
        if (f > 1.0) {
            hier += ring_all_reduce_time(f, nbytes / inner, tier_latency(sys, i),
                                         tier_path_bandwidth(sys, i));
            inner *= f;
        }
    }
    return dmin(best, hier);
}
static double all_gather_time(const double *sys, double nbytes, double n) {
    int top = group_top_tier(sys, n, 1.0, 1.0, 1.0, 1.0, 1.0);
    if (n <= 1.0 || top < 0 || nbytes <= 0.0) return 0.0;
    double best = ring_all_gather_time(n, nbytes, tier_latency(sys, top),
                                       tier_path_bandwidth(sys, top));
    double hier = 0.0, inner = 1.0;
    for (int i = 0; i < top + 1; i++) {
        double f = group_fanout(sys, i, n, 1.0, 1.0, 1.0, 1.0, 1.0);
        if (f > 1.0) {
            hier += ring_all_gather_time(f, nbytes / inner, tier_latency(sys, i),
                                         tier_path_bandwidth(sys, i));
            inner *= f;
        }
    }
    return dmin(best, hier);
}
static double reduce_scatter_time(const double *sys, double nbytes, double n) {
    return all_gather_time(sys, nbytes, n);
}

/* ---- reference.py ---------------------------------------------------------------------- */
#define W(f, r) work[(int64_t)(f) * stride_w + (r)]

static double lookup_seconds_per_byte(const double *sys, const double *job, int tier,
                                      double hit_rate) {
    double hbm = sys[DL_SYS_HBM_BANDWIDTH] * job[DL_DJOB_LOOKUP_EFFICIENCY];
    double h2d = job[DL_DJOB_H2D_BANDWIDTH];
    if (tier == DL_MT_HBM) return 1.0 / hbm;
    if (tier == DL_MT_UVM_CACHE) return hit_rate / hbm + (1.0 - hit_rate) / h2d;
    return 1.0 / h2d;
}
static inline double lookup_bytes(double lookups, double dim, double emb_bytes,
                                  double index_bytes, double outputs, double out_bytes) {
    return lookups * index_bytes + lookups * dim * emb_bytes + outputs * dim * out_bytes;
}
static inline double shard_state_bytes(double rows, double dim, double emb_bytes,
                                       double opt_row_bytes, double opt_elem_bytes) {
    return rows * dim * emb_bytes + rows * opt_row_bytes + rows * dim * opt_elem_bytes;
}
static void add_shard_storage(double *work, int64_t stride_w, int r, int tier, double rows,
                              double dim, const double *job) {
    double state = shard_state_bytes(rows, dim, job[DL_DJOB_EMB_BYTES],
                                     job[DL_DJOB_OPT_ROW_BYTES], job[DL_DJOB_OPT_ELEM_BYTES]);
    if (tier == DL_MT_HBM) {
        W(DL_RK_HBM_BYTES, r) += state;
    } else if (tier == DL_MT_UVM_CACHE) {
        W(DL_RK_DDR_BYTES, r) += state;
        W(DL_RK_HBM_BYTES, r) += job[DL_DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DL_DJOB_EMB_BYTES];
    } else {
        W(DL_RK_DDR_BYTES, r) += state;
    }
}
static double uniform_storage_hbm(int tier, double rows, double dim, const double *job) {
    double state = shard_state_bytes(rows, dim, job[DL_DJOB_EMB_BYTES],
                                     job[DL_DJOB_OPT_ROW_BYTES], job[DL_DJOB_OPT_ELEM_BYTES]);
    if (tier == DL_MT_HBM) return state;
    if (tier == DL_MT_UVM_CACHE)
        return job[DL_DJOB_UVM_CACHE_FRACTION] * rows * dim * job[DL_DJOB_EMB_BYTES];
    return 0.0;
}
static double uniform_storage_ddr(int tier, double rows, double dim, const double *job) {
    if (tier == DL_MT_HBM) return 0.0;
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
    double node, lat, d_fwd, d_bwd, dense_ar, usable;
    double span[DL_MAX_TIERS];   /* tier_span(sys, i) */
    double inv_bw[DL_MAX_TIERS]; /* 1 / tier_link_bandwidth(sys, i) */
} ctx_t;

static void write_invalid(double *out, int64_t n_plans, int64_t col, int status) {
    for (int f = 0; f < DL_N_DOUT; f++) out[f * n_plans + col] = 0.0;
    out[DL_DO_STATUS * n_plans + col] = status;
    out[DL_DO_FEASIBLE * n_plans + col] = 0.0;
    out[DL_DO_STEP_TIME_S * n_plans + col] = INFINITY;
}
#define P(f, t) plan[(int64_t)(f) * n_t + (t)]
static int check_plan(const double *job, const double *tables, int64_t n_t, const int32_t *plan) {
    int world = (int)job[DL_DJOB_WORLD];
    if (world < 1) return DL_STATUS_BAD_INDEX;
    for (int64_t t = 0; t < n_t; t++) {
        int32_t kind = P(DL_PL_KIND, t), tier = P(DL_PL_TIER, t), rank = P(DL_PL_RANK, t);
        if (kind < 0 || kind > DL_SH_DATA_PARALLEL || tier < 0 || tier > DL_MT_DDR)
            return DL_STATUS_BAD_INDEX;
        if (rank < 0 || rank >= world || P(DL_PL_STRIDE, t) < 0) return DL_STATUS_BAD_INDEX;
        double dim = tables[DL_TAB_DIM * n_t + t];
        if (tables[DL_TAB_ROWS * n_t + t] < 1.0 || dim < 1.0 ||
            tables[DL_TAB_POOLING * n_t + t] < 0.0)
            return DL_STATUS_INVALID_CONFIG;
        if (kind == DL_SH_COLUMN_WISE) {
            int32_t k = P(DL_PL_SHARDS, t);
            if (k < 1 || k > world) return DL_STATUS_INVALID_CONFIG;
            if ((int64_t)dim % k != 0) return DL_STATUS_INVALID_CONFIG;
        }
    }
    return DL_STATUS_OK;
}

static int evaluate_plan(const ctx_t *c, const double *sys, const double *job,
                         const double *tables, int64_t n_t, const int32_t *plan, double *work,
                         int64_t stride_w, double *out, int64_t n_plans, int64_t col) {
    int world = c->world;
    int status = check_plan(job, tables, n_t, plan);
    if (status != DL_STATUS_OK) {
        write_invalid(out, n_plans, col, status);
        return status;
    }
    for (int f = 0; f < DL_N_RANK; f++)
        for (int r = 0; r < world + 1; r++) W(f, r) = 0.0;
    double wf = world * 1.0, batch = job[DL_DJOB_GLOBAL_BATCH], local = batch / wf;
    double eb = job[DL_DJOB_EMB_BYTES], ib = job[DL_DJOB_INDEX_BYTES];
    double cbf = job[DL_DJOB_COMM_FWD_BYTES], cbb = job[DL_DJOB_COMM_BWD_BYTES];
    double bwd_mult = job[DL_DJOB_BWD_MULTIPLIER];
    double node = c->node;
    double uni_fwd = 0.0, uni_bwd = 0.0, uni_hbm = 0.0, uni_ddr = 0.0, uni_idx = 0.0;
    double rw_dim = 0.0, dp_elems = 0.0, sum_dim = 0.0, sum_pool = 0.0;
    for (int64_t t = 0; t < n_t; t++) {
        double rows = tables[DL_TAB_ROWS * n_t + t], dim = tables[DL_TAB_DIM * n_t + t];
        double pool = tables[DL_TAB_POOLING * n_t + t], hit = tables[DL_TAB_HIT_RATE * n_t + t];
        int kind = P(DL_PL_KIND, t), tier = P(DL_PL_TIER, t), rank = P(DL_PL_RANK, t);
        double spb = lookup_seconds_per_byte(sys, job, tier, hit);
        sum_dim += dim;
        sum_pool += pool;
        if (kind == DL_SH_TABLE_WISE || kind == DL_SH_COLUMN_WISE) {
            int64_t k = 1, stride = 0;
            if (kind == DL_SH_COLUMN_WISE) {
                k = P(DL_PL_SHARDS, t);
                stride = P(DL_PL_STRIDE, t);
            }
            double ds = dim / (double)k;
            double fwd = lookup_bytes(batch * pool, ds, eb, ib, batch, cbf) * spb;
            for (int64_t j = 0; j < k; j++) {
                int o = (int)((rank + j * stride) % world);
                W(DL_RK_LOOKUP_FWD_S, o) += fwd;
                W(DL_RK_LOOKUP_BWD_S, o) += bwd_mult * fwd;
                W(DL_RK_OWN_DIM0, o) += ds;
                W(DL_RK_OWN_DIM, o) += ds;
                W(DL_RK_OWN_IDX, o) += pool;
                add_shard_storage(work, stride_w, o, tier, rows, ds, job);
                W(DL_RK_HBM_BYTES, o) += batch * pool * ib + 2.0 * batch * ds * cbf;
            }
        } else if (kind == DL_SH_ROW_WISE) {
            double fwd = lookup_bytes(batch * pool / wf, dim, eb, ib, batch, cbf) * spb;
            uni_fwd += fwd;
            uni_bwd += bwd_mult * fwd;
            uni_idx += pool / wf;
            rw_dim += dim;
            double shard_rows = ceil(rows / wf);
            uni_hbm += uniform_storage_hbm(tier, shard_rows, dim, job);
            uni_hbm += batch * pool / wf * ib + 2.0 * batch * dim * cbf;
            uni_ddr += uniform_storage_ddr(tier, shard_rows, dim, job);
        } else if (kind == DL_SH_TABLE_ROW_WISE) {
            double lo = domain_lo(node, world, rank), hi = domain_hi(node, world, rank);
            double n_in = hi - lo;
            double fwd = lookup_bytes(batch * pool / n_in, dim, eb, ib, batch, cbf) * spb;
            double shard_rows = ceil(rows / n_in);
            for (int o = (int)lo; o < (int)hi; o++) {
                W(DL_RK_LOOKUP_FWD_S, o) += fwd;
                W(DL_RK_LOOKUP_BWD_S, o) += bwd_mult * fwd;
                W(DL_RK_OWN_DIM, o) += dim / n_in;
                W(DL_RK_OWN_IDX, o) += pool / n_in;
                W(DL_RK_TWRW_DIM, o) += dim;
                add_shard_storage(work, stride_w, o, tier, shard_rows, dim, job);
                W(DL_RK_HBM_BYTES, o) += batch * pool / n_in * ib + 2.0 * batch * dim * cbf;
            }
        } else {
            double fwd = lookup_bytes(local * pool, dim, eb, ib, local, cbf) * spb;
            uni_fwd += fwd;
            uni_bwd += bwd_mult * fwd + job[DL_DJOB_DP_UPDATE_FACTOR] * rows * dim * eb * spb;
            dp_elems += rows * dim;
            uni_hbm += uniform_storage_hbm(tier, rows, dim, job);
            uni_ddr += uniform_storage_ddr(tier, rows, dim, job);
        }
    }
    uni_hbm += 2.0 * local * (sum_dim * cbf + sum_pool * ib) + dense_memory_bytes(job);
    for (int r = 0; r < world; r++) {
        W(DL_RK_PRE_DIM0, r + 1) = W(DL_RK_PRE_DIM0, r) + W(DL_RK_OWN_DIM0, r);
        W(DL_RK_PRE_DIM, r + 1) = W(DL_RK_PRE_DIM, r) + W(DL_RK_OWN_DIM, r);
        W(DL_RK_PRE_IDX, r + 1) = W(DL_RK_PRE_IDX, r) + W(DL_RK_OWN_IDX, r);
    }
    int top = c->top;
    double unit_idx = local * ib, unit_fwd = local * cbf, unit_bwd = local * cbb;
    /* per-rank busiest tier of the two all-to-alls (reference: rank_a2a_units), walked domain
     * by domain so no division is needed per rank */
    for (int r = 0; r < world; r++) {
        W(DL_RK_X_POOL, r) = 0.0;
        W(DL_RK_X_IDX, r) = 0.0;
    }
    for (int i = 0; i < top + 1; i++) {
        double span = i == 0 ? c->span[0] : c->span[i - 1];
        double inv = c->inv_bw[i];
        int step = span >= wf ? world : (int)span;
        for (int lo = 0; lo < world; lo += step) {
            int hi = lo + step < world ? lo + step : world;
            double cnt = (double)(hi - lo);
            if (i == 0) {
                double dom0 = W(DL_RK_PRE_DIM0, hi) - W(DL_RK_PRE_DIM0, lo);
                double domi = W(DL_RK_PRE_IDX, hi) - W(DL_RK_PRE_IDX, lo) + uni_idx * cnt;
                for (int r = lo; r < hi; r++) {
                    double mine = W(DL_RK_OWN_DIM0, r);
                    double t = dmax(mine * (cnt - 1.0), dom0 - mine) * inv;
                    if (t > W(DL_RK_X_POOL, r)) W(DL_RK_X_POOL, r) = t;
                    mine = W(DL_RK_OWN_IDX, r) + uni_idx;
                    t = dmax(mine * (cnt - 1.0), domi - mine) * inv;
                    if (t > W(DL_RK_X_IDX, r)) W(DL_RK_X_IDX, r) = t;
                }
            } else {
                double domp = W(DL_RK_PRE_DIM, hi) - W(DL_RK_PRE_DIM, lo);
                double domi = W(DL_RK_PRE_IDX, hi) - W(DL_RK_PRE_IDX, lo) + uni_idx * cnt;
                double recvp = W(DL_RK_PRE_DIM, world) - domp;
                double recvi = W(DL_RK_PRE_IDX, world) + uni_idx * wf - domi;
                for (int r = lo; r < hi; r++) {
                    double t = dmax(W(DL_RK_OWN_DIM, r) * (wf - cnt), recvp) * inv;
                    if (t > W(DL_RK_X_POOL, r)) W(DL_RK_X_POOL, r) = t;
                    t = dmax((W(DL_RK_OWN_IDX, r) + uni_idx) * (wf - cnt), recvi) * inv;
                    if (t > W(DL_RK_X_IDX, r)) W(DL_RK_X_IDX, r) = t;
                }
            }
        }
    }
    double max_lf = 0.0, max_lb = 0.0, max_pool = 0.0, max_idx = 0.0;
    double max_hbm = 0.0, max_ddr = 0.0, max_twrw = 0.0, crit_load = -1.0;
    int crit = 0;
    for (int r = 0; r < world; r++) {
        double x_pool = W(DL_RK_X_POOL, r), x_idx = W(DL_RK_X_IDX, r);
        double lf = W(DL_RK_LOOKUP_FWD_S, r) + uni_fwd;
        double lb = W(DL_RK_LOOKUP_BWD_S, r) + uni_bwd;
        double a2a = unit_idx * x_idx + (unit_fwd + unit_bwd) * x_pool;
        W(DL_RK_LOOKUP_FWD_S, r) = lf;
        W(DL_RK_LOOKUP_BWD_S, r) = lb;
        W(DL_RK_HBM_BYTES, r) += uni_hbm;
        W(DL_RK_DDR_BYTES, r) += uni_ddr;
        W(DL_RK_A2A_S, r) = a2a;
        max_lf = dmax(max_lf, lf);
        max_lb = dmax(max_lb, lb);
        max_pool = dmax(max_pool, x_pool);
        max_idx = dmax(max_idx, x_idx);
        max_hbm = dmax(max_hbm, W(DL_RK_HBM_BYTES, r));
        max_ddr = dmax(max_ddr, W(DL_RK_DDR_BYTES, r));
        max_twrw = dmax(max_twrw, W(DL_RK_TWRW_DIM, r));
        if (lf + lb + a2a > crit_load) {
            crit_load = lf + lb + a2a;
            crit = r;
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
        rs_fwd += reduce_scatter_time(sys, batch * rw_dim * cbf, wf);
        ag_bwd += all_gather_time(sys, batch * rw_dim * cbb, wf);
    }
    if (max_twrw > 0.0) {
        rs_fwd += reduce_scatter_time(sys, batch * max_twrw * cbf, node);
        ag_bwd += all_gather_time(sys, batch * max_twrw * cbb, node);
    }
    double gcb = job[DL_DJOB_GRAD_COMM_BYTES];
    double dp_ar = 0.0, dense_ar = c->dense_ar;
    if (dp_elems > 0.0) dp_ar = all_reduce_time(sys, dp_elems * gcb, wf);
    double d_fwd = c->d_fwd, d_bwd = c->d_bwd;
    double emb_bwd = a2a_bwd + ag_bwd + max_lb + dp_ar;
    double exposed = dmax(0.0, dense_ar - emb_bwd);
    double step = idx_a2a + max_lf + a2a_fwd + rs_fwd + d_fwd + d_bwd + emb_bwd + exposed;
    double usable = c->usable;
    status = DL_STATUS_OK;
    if (max_hbm > usable || max_ddr > job[DL_DJOB_DDR_BYTES]) status = DL_STATUS_OUT_OF_MEMORY;
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
#undef O
    return status;
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
    if (work_len < (int64_t)DL_N_RANK * stride_w) {
        for (int64_t p = 0; p < n_plans; p++) write_invalid(out, n_plans, p, DL_STATUS_BAD_INDEX);
        return -1;
    }
    ctx_t c;
    double wf = (double)(stride_w - 1);
    c.world = (int)(stride_w - 1);
    c.top = group_top_tier(sys, wf, 1.0, 1.0, 1.0, 1.0, 1.0);
    c.node = tier_span(sys, 0);
    if (c.node > wf) c.node = wf;
    c.lat = c.top >= 0 ? tier_latency(sys, c.top) : 0.0;
    c.d_fwd = dense_fwd_time(sys, job);
    c.d_bwd = 2.0 * dense_fwd_time(sys, job);
    c.dense_ar = 0.0;
    if (job[DL_DJOB_DENSE_PARAMS] > 0.0)
        c.dense_ar = all_reduce_time(sys, job[DL_DJOB_DENSE_PARAMS] * job[DL_DJOB_GRAD_COMM_BYTES], wf);
    c.usable = sys[DL_SYS_HBM_BYTES] - sys[DL_SYS_HBM_RESERVE_BYTES];
    for (int i = 0; i < DL_MAX_TIERS; i++) {
        c.span[i] = i < nt ? tier_span(sys, i) : INFINITY;
        c.inv_bw[i] = i < nt ? 1.0 / tier_link_bandwidth(sys, i) : 0.0;
    }
    for (int64_t p = 0; p < n_plans; p++)
        evaluate_plan(&c, sys, job, tables, n_tables, plans + p * (int64_t)DL_N_PLAN * n_tables,
                      work, stride_w, out, n_plans, p);
    return 0;
}
