/* Public entry points: block checks, one configuration, a batch split over cores.
 * The batch driver is the C twin of model/reference.py evaluate_batch (and of the numba
 * backend's prange loop): per-batch invariants (network view, decoded placement orders) are
 * computed once on the stack, then every column is costed by the staged model (ts_row_init ->
 * ts_ord_init -> ts_rec_init -> ts_final, see ts_model.h), with the row and order stages taken
 * from per-worker memos when a batch repeats them. */
#include <stdlib.h>

#include "ts_model.h"

#ifdef _OPENMP
#include <omp.h>
#else
#include <pthread.h>
#include <unistd.h>
#endif

#define TS_MAX_INT_FIELD 9007199254740992.0 /* 2^53: integer-valued fields are exact below */
#define TS_MAX_THREADS 256
/* Below this many configurations per thread a batch runs on one thread. */
#define TS_MIN_PER_THREAD 2048

int ts_abi_version(void)
{
    return TS_ABI_VERSION;
}

static int ts_field_error(int block, int index)
{
    return -(TS_ERR_FIELD_BASE + block * TS_ERR_BLOCK_STRIDE + index);
}

/* x is finite and lo <= x (strictly when strict) and x <= hi. */
static int ts_in_range(double x, double lo, int strict, double hi)
{
    if (!isfinite(x) || x > hi)
        return 0;
    return strict ? x > lo : x >= lo;
}

int ts_check_blocks(const double *sys, const double *mdl, const double *job)
{
    static const int sys_positive[] = {TS_SYS_GPUS, TS_SYS_PEAK_FLOPS, TS_SYS_HBM_BANDWIDTH,
                                       TS_SYS_GEMM_EFFICIENCY_MAX, TS_SYS_ATTENTION_EFFICIENCY,
                                       TS_SYS_MEMORY_EFFICIENCY};
    static const int sys_nonneg[] = {TS_SYS_HBM_BYTES, TS_SYS_HBM_RESERVE_BYTES,
                                     TS_SYS_GEMM_HALF_FLOPS, TS_SYS_LAYER_OVERHEAD_S};
    static const int tier_positive[] = {TS_TIER_SIZE, TS_TIER_BANDWIDTH, TS_TIER_EFFICIENCY,
                                        TS_TIER_OVERSUBSCRIPTION};
    static const int mdl_count[] = {TS_MDL_LAYERS, TS_MDL_HIDDEN, TS_MDL_HEADS, TS_MDL_KV_HEADS,
                                    TS_MDL_HEAD_DIM, TS_MDL_VOCAB};
    static const int mdl_nonneg[] = {TS_MDL_FFN_HIDDEN, TS_MDL_SWIGLU, TS_MDL_EXPERTS,
                                     TS_MDL_TOP_K, TS_MDL_EXPERT_FFN_HIDDEN, TS_MDL_MOE_EVERY,
                                     TS_MDL_SHARED_EXPERTS};
    static const int job_count[] = {TS_JOB_SEQ_LEN, TS_JOB_GLOBAL_BATCH};
    static const int job_nonneg[] = {TS_JOB_ACTIVATION_BYTES, TS_JOB_PARAM_BYTES,
                                     TS_JOB_GRAD_BYTES, TS_JOB_OPTIMIZER_BYTES,
                                     TS_JOB_OPTIMIZER_TRAFFIC_BYTES, TS_JOB_COMM_BYTES,
                                     TS_JOB_GRAD_COMM_BYTES, TS_JOB_FLASH_ATTENTION};
    double nt;
    int n;
    if (!sys || !mdl || !job)
        return TS_ERR_ARG;
    nt = sys[TS_SYS_N_TIERS];
    if (!(nt >= 1.0 && nt <= (double)TS_MAX_TIERS && nt == floor(nt)))
        return ts_field_error(TS_ERR_BLOCK_SYS, TS_SYS_N_TIERS);
    n = (int)nt;
    for (unsigned k = 0; k < sizeof sys_positive / sizeof *sys_positive; k++)
        if (!ts_in_range(sys[sys_positive[k]], 0.0, 1, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, sys_positive[k]);
    for (unsigned k = 0; k < sizeof sys_nonneg / sizeof *sys_nonneg; k++)
        if (!ts_in_range(sys[sys_nonneg[k]], 0.0, 0, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, sys_nonneg[k]);
    for (int i = 0; i < n; i++) {
        int base = TS_SYS_TIER_BASE + i * TS_N_TIER;
        for (unsigned k = 0; k < sizeof tier_positive / sizeof *tier_positive; k++)
            if (!ts_in_range(sys[base + tier_positive[k]], 0.0, 1, INFINITY))
                return ts_field_error(TS_ERR_BLOCK_SYS, base + tier_positive[k]);
        if (!ts_in_range(sys[base + TS_TIER_LATENCY], 0.0, 0, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, base + TS_TIER_LATENCY);
    }
    for (unsigned k = 0; k < sizeof mdl_count / sizeof *mdl_count; k++)
        if (!ts_in_range(mdl[mdl_count[k]], 1.0, 0, TS_MAX_INT_FIELD))
            return ts_field_error(TS_ERR_BLOCK_MDL, mdl_count[k]);
    for (unsigned k = 0; k < sizeof mdl_nonneg / sizeof *mdl_nonneg; k++)
        if (!ts_in_range(mdl[mdl_nonneg[k]], 0.0, 0, TS_MAX_INT_FIELD))
            return ts_field_error(TS_ERR_BLOCK_MDL, mdl_nonneg[k]);
    for (unsigned k = 0; k < sizeof job_count / sizeof *job_count; k++)
        if (!ts_in_range(job[job_count[k]], 1.0, 0, TS_MAX_INT_FIELD))
            return ts_field_error(TS_ERR_BLOCK_JOB, job_count[k]);
    for (unsigned k = 0; k < sizeof job_nonneg / sizeof *job_nonneg; k++)
        if (!ts_in_range(job[job_nonneg[k]], 0.0, 0, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_JOB, job_nonneg[k]);
    return 0;
}

/* Check the blocks and fill the per-batch context (orders left to the caller). */
TS_FN int ts_ctx_init(ts_ctx *ctx, const double *sys, const double *mdl, const double *job)
{
    int err = ts_check_blocks(sys, mdl, job);
    if (err != 0)
        return err;
    ctx->sys = sys;
    ctx->mdl = mdl;
    ctx->job = job;
    ts_net_init(&ctx->net, sys);
    ts_llm_invariants(&ctx->inv, sys, mdl, job);
    ctx->orders = NULL;
    return 0;
}

int ts_llm_cost(const double *sys, const double *mdl, const double *job, const int32_t *cfg,
                double *out)
{
    ts_ctx ctx;
    int err;
    if (!cfg || !out)
        return TS_ERR_ARG;
    err = ts_ctx_init(&ctx, sys, mdl, job);
    if (err != 0)
        return err;
    return ts_evaluate_config(&ctx, cfg, 1, out, 1);
}

int ts_llm_config_error(const double *sys, const double *mdl, const double *job,
                        const int32_t *cfg)
{
    ts_ctx ctx;
    int err;
    if (!cfg)
        return TS_ERR_ARG;
    err = ts_ctx_init(&ctx, sys, mdl, job);
    if (err != 0)
        return err;
    return ts_config_error(&ctx, cfg, 1);
}

int ts_max_threads(int n_threads)
{
    int n;
    if (n_threads > 0)
        n = n_threads;
    else {
#ifdef _OPENMP
        n = omp_get_num_procs();
#else
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
#endif
    }
    if (n > TS_MAX_THREADS)
        n = TS_MAX_THREADS;
    return n < 1 ? 1 : n;
}

/* Memos for a batch. Configurations of a batch drawn from one design space share few core
 * rows (tp cp pp dp ep mbs vpp schedule sp tp_overlap) and few (row, order) pairs, and the
 * row's stage (config_error's checks, compute, parameter and activation terms) and the order's
 * stage (placement strides, communication groups, collective times) are most of a
 * configuration's work (see ts_row / ts_ord in ts_model.h). Two set-associative memos, two
 * ways with LRU replacement, one keyed by the ten core fields, one by (row fill, order): a hit
 * reuses values the same stage function computed from the same inputs, so no bit changes. One
 * memo per worker and batch call, allocated before the loop and freed after it; without one (a
 * small range, or no memory) every configuration is costed from scratch. */
#define TS_ROW_SET_BITS 9  /* 512 sets x 2 ways of rows */
#define TS_ORD_SET_BITS 11 /* 2048 sets x 2 ways of (row, order) pairs */
#define TS_MEMO_MIN 16384  /* configurations below which a range runs without a memo */
#define TS_N_CORE 10

typedef struct {
    int32_t key[TS_N_CORE];
    uint64_t fill; /* 0: empty; else a number unique to this fill, for the order memo's key */
    ts_row row;
} ts_row_entry;

/* an entry padded to whole cache lines (the memo is 64-byte aligned) */
typedef union {
    ts_row_entry e;
    char pad[(sizeof(ts_row_entry) + 63) / 64 * 64];
} ts_row_memo;

/* 64 bytes: one cache line. key = (fill << 7 | order) << 2 | have_ar << 1 | have_ag; 0: empty */
typedef struct {
    uint64_t key;
    double tp_pass, cp_step, ep_pass, pp_comm, ar, rs, ag;
} ts_ord_memo;

typedef struct {
    ts_ord_memo ord[2 << TS_ORD_SET_BITS];
    ts_row_memo row[2 << TS_ROW_SET_BITS];
    uint8_t row_lru[1 << TS_ROW_SET_BITS]; /* the way to replace next */
    uint8_t ord_lru[1 << TS_ORD_SET_BITS];
} ts_memo;

static const int ts_core_fields[TS_N_CORE] = {
    TS_CFG_TP, TS_CFG_CP, TS_CFG_PP, TS_CFG_DP, TS_CFG_EP,
    TS_CFG_MBS, TS_CFG_VPP, TS_CFG_SCHEDULE, TS_CFG_SP, TS_CFG_TP_OVERLAP};

static inline int ts_row_key_eq(const ts_row_entry *e, const int32_t key[TS_N_CORE])
{
    int same = e->fill != 0;
    for (int f = 0; f < TS_N_CORE; f++)
        same &= e->key[f] == key[f];
    return same;
}

/* Columns [lo, hi) of the batch. */
static void ts_run_range(const ts_ctx *ctx, const int32_t *cfg, int64_t n, double *out,
                         int64_t lo, int64_t hi)
{
    ts_memo *M = NULL;
    void *block = NULL;
    uint64_t fills = 0;
    if (hi - lo >= TS_MEMO_MIN)
        block = calloc(1, sizeof(ts_memo) + 64);
    if (block) /* round up to a cache line */
        M = (ts_memo *)((char *)block + (64 - (uintptr_t)block % 64) % 64);
    if (!M) {
        for (int64_t i = lo; i < hi; i++)
            ts_evaluate_config(ctx, cfg + i, n, out + i, n);
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        const int32_t *c = cfg + i;
        int32_t key[TS_N_CORE];
        uint32_t h = 0;
        uint64_t okey;
        unsigned set, way;
        ts_row_entry *e;
        ts_ord_memo *om;
        const ts_row *R;
        ts_ord O;
        ts_rec V;
        int recompute, zero, order, dp_overlap, code;
        for (int f = 0; f < TS_N_CORE; f++) {
            key[f] = c[ts_core_fields[f] * n];
            h = (h ^ (uint32_t)key[f]) * 0x9E3779B1u; /* Fibonacci hashing (Knuth, TAOCP 6.4) */
        }
        set = h >> (32 - TS_ROW_SET_BITS);
        if (ts_row_key_eq(&M->row[2 * set].e, key)) {
            way = 0;
        } else if (ts_row_key_eq(&M->row[2 * set + 1].e, key)) {
            way = 1;
        } else {
            way = M->row_lru[set];
            e = &M->row[2 * set + way].e;
            for (int f = 0; f < TS_N_CORE; f++)
                e->key[f] = key[f];
            e->fill = ++fills;
            ts_row_init(ctx, c, n, &e->row);
        }
        M->row_lru[set] = (uint8_t)(1 - way);
        e = &M->row[2 * set + way].e;
        R = &e->row;

        recompute = c[TS_CFG_RECOMPUTE * n];
        zero = c[TS_CFG_ZERO * n];
        order = c[TS_CFG_ORDER * n];
        dp_overlap = c[TS_CFG_DP_OVERLAP * n];
        code = ts_join_error(R->code, ts_free_error(recompute, zero, order, dp_overlap));
        if (code != 0) {
            ts_write_invalid(out + i, n, code);
            continue;
        }

        okey = e->fill << 7 | (uint64_t)order; /* order < TS_N_ORDERS = 120 < 2^7 */
        set = (unsigned)((okey * 0x9E3779B97F4A7C15ull) >> (64 - TS_ORD_SET_BITS));
        om = &M->ord[2 * set];
        if (om[0].key >> 2 == okey) {
            way = 0;
        } else if (om[1].key >> 2 == okey) {
            way = 1;
        } else {
            way = 2;
        }
        if (way < 2) {
            om += way;
            O.tp_pass = om->tp_pass;
            O.cp_step = om->cp_step;
            O.ep_pass = om->ep_pass;
            O.pp_comm = om->pp_comm;
            O.ar = om->ar;
            O.rs = om->rs;
            O.ag = om->ag;
            O.have_ar = (int)(om->key >> 1) & 1;
            O.have_ag = (int)om->key & 1;
            O.order = order;
            O.groups_ok = 0;
        } else {
            way = M->ord_lru[set];
            om += way;
            ts_ord_init(ctx, R, order, &O);
            om->key = okey << 2;
            om->tp_pass = O.tp_pass;
            om->cp_step = O.cp_step;
            om->ep_pass = O.ep_pass;
            om->pp_comm = O.pp_comm;
        }
        M->ord_lru[set] = (uint8_t)(1 - way);
        ts_rec_init(ctx, R, &O, recompute, &V);
        ts_final(ctx, R, &O, &V, zero, dp_overlap == 1, out + i, n);
        /* keep the data-parallel collectives ts_final computed */
        if (O.have_ar && !(om->key & 2)) {
            om->ar = O.ar;
            om->key |= 2;
        }
        if (O.have_ag && !(om->key & 1)) {
            om->rs = O.rs;
            om->ag = O.ag;
            om->key |= 1;
        }
    }
    free(block);
}

#ifndef _OPENMP
typedef struct {
    const ts_ctx *ctx;
    const int32_t *cfg;
    int64_t n, lo, hi;
    double *out;
} ts_chunk;

static void *ts_chunk_main(void *arg)
{
    ts_chunk *c = (ts_chunk *)arg;
    ts_run_range(c->ctx, c->cfg, c->n, c->out, c->lo, c->hi);
    return NULL;
}
#endif

int ts_llm_evaluate_batch(const double *sys, const double *mdl, const double *job,
                          const int32_t *cfg, int64_t n, double *out, int n_threads)
{
    ts_ctx ctx;
    int8_t orders[TS_N_ORDERS][TS_N_DIMS];
    int err, nt;
    if (!cfg || !out || n < 0 || n_threads < 0)
        return TS_ERR_ARG;
    err = ts_ctx_init(&ctx, sys, mdl, job);
    if (err != 0)
        return err;
    if (n == 0)
        return 0;
    if (n >= TS_N_ORDERS) { /* a table of decoded orders pays off; small batches decode each */
        for (int o = 0; o < TS_N_ORDERS; o++)
            ts_order_permutation(o, orders[o]);
        ctx.orders = (const int8_t(*)[TS_N_DIMS])orders;
    }
    if (n < 2 * TS_MIN_PER_THREAD) {
        nt = 1; /* not worth a second thread (nor asking how many cores there are) */
    } else {
        nt = ts_max_threads(n_threads);
        if ((int64_t)nt * TS_MIN_PER_THREAD > n)
            nt = (int)(n / TS_MIN_PER_THREAD);
    }
    if (nt <= 1) {
        ts_run_range(&ctx, cfg, n, out, 0, n);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        int64_t lo = n * t / k, hi = n * (t + 1) / k;
        ts_run_range(&ctx, cfg, n, out, lo, hi);
    }
#else
    {
        pthread_t th[TS_MAX_THREADS];
        ts_chunk ch[TS_MAX_THREADS];
        int started[TS_MAX_THREADS];
        for (int t = 0; t < nt; t++) {
            ch[t].ctx = &ctx;
            ch[t].cfg = cfg;
            ch[t].n = n;
            ch[t].out = out;
            ch[t].lo = n * t / nt;
            ch[t].hi = n * (t + 1) / nt;
            started[t] = 0;
        }
        for (int t = 1; t < nt; t++)
            started[t] = pthread_create(&th[t], NULL, ts_chunk_main, &ch[t]) == 0;
        ts_chunk_main(&ch[0]);
        for (int t = 1; t < nt; t++) {
            if (started[t])
                pthread_join(th[t], NULL);
            else
                ts_chunk_main(&ch[t]); /* could not start a thread: run its share here */
        }
    }
#endif
    return 0;
}
