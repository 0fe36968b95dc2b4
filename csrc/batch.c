/* Public entry points: block checks, one configuration, a batch split over cores.
 * The batch driver is the C twin of model/reference.py evaluate_batch (and of the numba
 * backend's prange loop): per-batch invariants (network view, decoded placement orders) are
 * computed once on the stack, then every column is costed by ts_evaluate_config. */
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

/* Columns [lo, hi) of the batch. */
static void ts_run_range(const ts_ctx *ctx, const int32_t *cfg, int64_t n, double *out,
                         int64_t lo, int64_t hi)
{
    for (int64_t i = lo; i < hi; i++)
        ts_evaluate_config(ctx, cfg + i, n, out + i, n);
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
