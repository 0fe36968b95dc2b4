/* Public entry points: block checks, one configuration, a batch split over cores.
 * The batch driver is the C twin of model/reference.py evaluate_batch (and of the numba
 * backend's prange loop): per-batch invariants (network view, decoded placement orders) are
 * computed once on the stack, then every column is costed by the staged model (ts_row_init ->
 * ts_ord_init -> ts_rec_init -> ts_final, see ts_model.h), with the row and order stages taken
 * from per-worker memos when a batch repeats them. */
#include <stdlib.h>
#include <string.h>

#include "ts_model.h"

#if defined(__SSE2__) && (defined(__x86_64__) || defined(_M_X64))
#include <emmintrin.h> /* _mm_stream_pd, _mm_sfence */
#define TS_HAVE_STREAM_STORES 1
#endif

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

/* The fields of a tier record at sys[base] (a tier, or a site link) outside their ranges: the
 * size (when ``with_size``), bandwidth, efficiency and oversubscription > 0; latency, window and
 * handshake RTTs >= 0. Returns the block error naming the first bad field, or 0. */
static int ts_tier_record_error(const double *sys, int base, int with_size)
{
    static const int positive[] = {TS_TIER_SIZE, TS_TIER_BANDWIDTH, TS_TIER_EFFICIENCY,
                                   TS_TIER_OVERSUBSCRIPTION};
    static const int nonneg[] = {TS_TIER_LATENCY, TS_TIER_WINDOW_BYTES, TS_TIER_HANDSHAKE_RTTS};
    for (unsigned k = with_size ? 0 : 1; k < sizeof positive / sizeof *positive; k++)
        if (!ts_in_range(sys[base + positive[k]], 0.0, 1, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, base + positive[k]);
    for (unsigned k = 0; k < sizeof nonneg / sizeof *nonneg; k++)
        if (!ts_in_range(sys[base + nonneg[k]], 0.0, 0, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, base + nonneg[k]);
    return 0;
}

int ts_check_blocks(const double *sys, const double *mdl, const double *job)
{
    static const int sys_positive[] = {TS_SYS_GPUS, TS_SYS_PEAK_FLOPS, TS_SYS_HBM_BANDWIDTH,
                                       TS_SYS_GEMM_EFFICIENCY_MAX, TS_SYS_ATTENTION_EFFICIENCY,
                                       TS_SYS_MEMORY_EFFICIENCY, TS_SYS_LINEAR_PEAK_FLOPS,
                                       TS_SYS_LINEAR_EFFICIENCY_MAX};
    static const int sys_nonneg[] = {TS_SYS_HBM_BYTES, TS_SYS_HBM_RESERVE_BYTES,
                                     TS_SYS_GEMM_HALF_FLOPS, TS_SYS_LAYER_OVERHEAD_S,
                                     TS_SYS_LINEAR_HALF_FLOPS, TS_SYS_TP_OVERLAP_SLOWDOWN,
                                     TS_SYS_CP_OVERLAP_SLOWDOWN, TS_SYS_ATTENTION_HALF_SEQ,
                                     TS_SYS_STREAM_MEMORY_EFFICIENCY,
                                     TS_SYS_ATTENTION_HEAD_DIM_HALF, TS_SYS_STEP_OVERHEAD_S,
                                     TS_SYS_HOST_OP_S};
    static const int mdl_count[] = {TS_MDL_LAYERS, TS_MDL_HIDDEN, TS_MDL_HEADS, TS_MDL_KV_HEADS,
                                    TS_MDL_HEAD_DIM, TS_MDL_VOCAB};
    static const int mdl_nonneg[] = {TS_MDL_FFN_HIDDEN, TS_MDL_SWIGLU, TS_MDL_EXPERTS,
                                     TS_MDL_TOP_K, TS_MDL_EXPERT_FFN_HIDDEN, TS_MDL_MOE_EVERY,
                                     TS_MDL_SHARED_EXPERTS, TS_MDL_MAX_ROUTE_NODES,
                                     TS_MDL_ATTENTION_WINDOW, TS_MDL_FULL_ATTENTION_EVERY,
                                     TS_MDL_MTP_LAYERS, TS_MDL_FIRST_DENSE_LAYERS};
    static const int job_count[] = {TS_JOB_SEQ_LEN, TS_JOB_GLOBAL_BATCH};
    static const int job_int_nonneg[] = {TS_JOB_PIPELINE_EDGE_LAYERS, TS_JOB_RECOMPUTE_LAYERS,
                                         TS_JOB_PIPELINE_FIRST_STAGE_LAYERS,
                                         TS_JOB_PIPELINE_LAST_STAGE_LAYERS, TS_JOB_DP_REPLICAS};
    static const int job_nonneg[] = {TS_JOB_ACTIVATION_BYTES, TS_JOB_PARAM_BYTES,
                                     TS_JOB_GRAD_BYTES, TS_JOB_OPTIMIZER_BYTES,
                                     TS_JOB_OPTIMIZER_TRAFFIC_BYTES, TS_JOB_COMM_BYTES,
                                     TS_JOB_GRAD_COMM_BYTES, TS_JOB_FLASH_ATTENTION,
                                     TS_JOB_DISPATCH_BYTES, TS_JOB_COMBINE_BYTES,
                                     TS_JOB_DROPOUT,

                                     TS_JOB_LINEAR_CAST_BYTES, TS_JOB_FP8_WEIGHT_CACHE_BYTES,
                                     TS_JOB_LINEAR_INPUT_BYTES, TS_JOB_LOGITS_EXTRA_BYTES,
                                     TS_JOB_LINEAR_PARAM_COMM_BYTES, TS_JOB_EAGER_ELEMENTWISE,
                                     TS_JOB_TP_GATHER_BYTES, TS_JOB_TP_SEQUENCE_COPY,
                                     TS_JOB_FSDP_PP_UNSHARDED, TS_JOB_GROUPED_EXPERT_GEMM,
                                     TS_JOB_EAGER_EXPERT_BIAS};
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
    /* a fraction of the TP traffic */
    if (!ts_in_range(sys[TS_SYS_TP_OVERLAP_EXPOSED], 0.0, 0, 1.0))
        return ts_field_error(TS_ERR_BLOCK_SYS, TS_SYS_TP_OVERLAP_EXPOSED);
    for (int i = 0; i < n; i++) {
        int base = TS_SYS_TIER_BASE + i * TS_N_TIER, err = ts_tier_record_error(sys, base, 1);
        if (err)
            return err;
        if (!ts_in_range(sys[base + TS_TIER_COMM_DTYPE_BYTES], 0.0, 0, INFINITY))
            return ts_field_error(TS_ERR_BLOCK_SYS, base + TS_TIER_COMM_DTYPE_BYTES);
    }
    {
        /* the site graph: 0 (none) or 2..TS_MAX_SITES sites, each link a tier record */
        double ns = sys[TS_SYS_N_SITES];
        int m;
        if (!(ns >= 0.0 && ns <= (double)TS_MAX_SITES && ns == floor(ns) && ns != 1.0))
            return ts_field_error(TS_ERR_BLOCK_SYS, TS_SYS_N_SITES);
        m = (int)ns;
        for (int a = 0; a < m; a++)
            for (int b = 0; b < m; b++) {
                int base = TS_SYS_SITE_LINK_BASE + (a * TS_MAX_SITES + b) * TS_N_TIER, err;
                if (a == b)
                    continue;
                err = ts_tier_record_error(sys, base, 0); /* a link's size is unused */
                if (err)
                    return err;
            }
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
    /* read as int64 by the kernel (pipeline_stage_layers): an integer-range number */
    for (unsigned k = 0; k < sizeof job_int_nonneg / sizeof *job_int_nonneg; k++)
        if (!ts_in_range(job[job_int_nonneg[k]], 0.0, 0, TS_MAX_INT_FIELD))
            return ts_field_error(TS_ERR_BLOCK_JOB, job_int_nonneg[k]);
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

/* Result columns of a large batch, stored around the caches. A batch's results are TS_N_OUT
 * rows of n doubles; stored as each configuration is costed, they stream the whole output
 * (216 bytes a configuration, 43 MB for 200,000) through the caches and evict the memo's row
 * and pair entries, which every configuration reads (on the bench's 200,000-configuration
 * batch, one thread: 8.0 M configurations/s stored so, 8.6 M through the ring, 10.8 M with all
 * but two result rows left unstored).
 * So a range of at least TS_STREAM_MIN configurations writes its results into a ring of
 * TS_RING configurations per row (first-level cache) and, every 8 configurations, stores
 * each row's completed 64-byte-aligned lines with non-temporal stores (whole lines, so
 * nothing is read for them); the partial lines at either end of a range are stored plainly.
 * Where there are no such stores (not x86-64 with SSE2), or `out` is not aligned to a double
 * (a caller's unaligned buffer: its lines cannot be whole), results are stored plainly. */
#define TS_STREAM_MIN 65536
#define TS_RING 16 /* two lines of each row: a line may start in the previous group of 8 */
/* a configuration's slot in the ring: j is never negative, and a mask on an unsigned index is
 * one instruction where the signed j % TS_RING is five (a store of 8 configurations' 27
 * results takes 432 of them) */
#define TS_RING_AT(j) ((uint64_t)(j) & (TS_RING - 1))

typedef struct {
    double ring[TS_N_OUT * TS_RING]; /* row k, configuration j: ring[k * TS_RING + j % TS_RING] */
    int64_t stored[TS_N_OUT];        /* per row: configurations below this are in out */
    int64_t first_line[TS_N_OUT];    /* per row: the first configuration of an aligned line */
} ts_stream;

static void ts_stream_start(ts_stream *S, const double *out, int64_t n, int64_t lo)
{
    for (int k = 0; k < TS_N_OUT; k++) {
        /* the configuration index j whose result (out + k * n + j) starts a 64-byte line */
        uintptr_t words = ((uintptr_t)(out + k * n) / sizeof(double)) % 8;
        S->stored[k] = lo;
        S->first_line[k] = lo + (int64_t)((8 - (words + (uintptr_t)lo) % 8) % 8);
    }
}

/* One whole 64-byte line of a result row: row[j .. j + 8) from the row's ring. */
static inline void ts_store_line(double *row, const double *ring, int64_t j)
{
#ifdef TS_HAVE_STREAM_STORES
    for (int w = 0; w < 8; w += 2)
        _mm_stream_pd(row + j + w, _mm_set_pd(ring[TS_RING_AT(j + w + 1)],
                                              ring[TS_RING_AT(j + w)]));
#else
    for (int w = 0; w < 8; w++)
        row[j + w] = ring[TS_RING_AT(j + w)];
#endif
}

/* Store what is done below configuration `done` (at most TS_RING - 8 configurations after
 * the last call; `tail`: also the partial line at the end). */
static void ts_stream_store(ts_stream *S, double *out, int64_t n, int64_t done, int tail)
{
    for (int k = 0; k < TS_N_OUT; k++) {
        const double *ring = S->ring + k * TS_RING;
        double *row = out + k * n;
        int64_t j = S->stored[k], line = S->first_line[k];
        for (; j < done && j < line; j++) /* the partial line at the start of the range */
            row[j] = ring[TS_RING_AT(j)];
        if (j >= line)
            for (; j + 8 <= done; j += 8)
                ts_store_line(row, ring, j);
        if (tail)
            for (; j < done; j++)
                row[j] = ring[TS_RING_AT(j)];
        S->stored[k] = j;
    }
}

/* Memos for a batch. Configurations of a batch drawn from one design space share few core
 * rows (tp cp pp dp ep mbs vpp schedule sp tp_overlap) and few (row, order) pairs, and the
 * row's stage (config_error's checks, compute, parameter and activation terms) and the order's
 * stage (placement strides, communication groups, collective times) are most of a
 * configuration's work (see ts_row / ts_ord in ts_model.h). A hit reuses values the same stage
 * function computed from the same inputs, so no bit changes.
 *
 * Rows: an open-addressing hash table (linear probing, at most half full) of 32-bit slots
 * (16 bits of the key's hash, 16 bits of 1 + the row's index) over a dense store of row entries,
 * filled in order of first sight. A row entry holds its key, the row stage, and the index of
 * each order's (row, order) entry: one load finds a pair, with no hashing and no conflicts.
 * Pairs: a dense store of 64-byte entries (one cache line), filled in order of first sight.
 * When either store is full, both start over (a batch sorted or enumerated in row order keeps
 * hitting; a random one holds its rows). One memo per worker and batch call, allocated before
 * the loop and freed after it: untouched pages of the stores cost nothing. Without one (a small
 * range, or no memory) every configuration is costed from scratch, and so is the rest of a
 * range whose rows rarely repeat (fewer than TS_MEMO_MIN_HITS row hits in a window: a miss
 * costs the hashing and bookkeeping on top of the stages). */
#define TS_ROW_CAP 4096           /* rows held before a fresh start */
#define TS_ROW_SLOT_BITS 13       /* 8192 hash slots: the table stays at most half full */
#define TS_PAIR_CAP 65535         /* (row, order) pairs held before a fresh start (16-bit index) */
#define TS_MEMO_MIN 16384         /* configurations below which a range runs without a memo */
#define TS_MEMO_WINDOW 8192       /* configurations per hit-rate check */
#define TS_MEMO_MIN_HITS 512      /* fewer row hits than this in a window: the memo goes off */

typedef struct {
    uint64_t key[5];                 /* the ten core fields, two per word */
    uint16_t pair[TS_N_ORDERS];      /* 1 + index of the (row, order) entry; 0: none */
    ts_row row;
} ts_row_entry;

/* an entry padded to whole cache lines (the store is 64-byte aligned) */
typedef union {
    ts_row_entry e;
    char pad[(sizeof(ts_row_entry) + 63) / 64 * 64];
} ts_row_memo;

/* 64 bytes: one cache line. flags: bit 1 ar, bit 0 rs and ag, bit 2 the ZeRO-3 pair (kept
 * beside, in ts_pair3_memo: only zero == 3 configurations touch it) computed */
typedef struct {
    double tp_pass, cp_step, ep_pass, pp_comm, ar, rs, ag;
    int32_t flags, pad_;
} ts_pair_memo;

/* one FSDP unit's reduce-scatter and all-gather of a pair (ts_ord rs3, ag3) */
typedef struct {
    double rs3, ag3;
} ts_pair3_memo;

typedef struct {
    ts_row_memo row[TS_ROW_CAP];
    ts_pair_memo pair[TS_PAIR_CAP];
    ts_pair3_memo pair3[TS_PAIR_CAP];
    uint32_t slot[1 << TS_ROW_SLOT_BITS];
    int n_rows, n_pairs;
    ts_stream stream;
} ts_memo;

/* Both stores start over (only the hash slots need clearing: an entry is written whole when
 * it is filled). */
static void ts_memo_reset(ts_memo *M)
{
    memset(M->slot, 0, sizeof M->slot);
    M->n_rows = 0;
    M->n_pairs = 0;
}

/* A configuration's core fields as the row memo's key, its hash slot and tag. */
typedef struct {
    uint64_t k[5];   /* the ten core fields, two per word */
    uint32_t slot;   /* first slot to probe */
    uint32_t tag;    /* 16 hash bits, in the slot's high half */
} ts_row_key;

static inline void ts_row_key_of(const int32_t *c, int64_t n, ts_row_key *K)
{
    uint64_t k0 = (uint32_t)c[TS_CFG_TP * n] | (uint64_t)(uint32_t)c[TS_CFG_CP * n] << 32;
    uint64_t k1 = (uint32_t)c[TS_CFG_PP * n] | (uint64_t)(uint32_t)c[TS_CFG_DP * n] << 32;
    uint64_t k2 = (uint32_t)c[TS_CFG_EP * n] | (uint64_t)(uint32_t)c[TS_CFG_MBS * n] << 32;
    uint64_t k3 = (uint32_t)c[TS_CFG_VPP * n] | (uint64_t)(uint32_t)c[TS_CFG_SCHEDULE * n] << 32;
    uint64_t k4 = (uint32_t)c[TS_CFG_SP * n] | (uint64_t)(uint32_t)c[TS_CFG_TP_OVERLAP * n] << 32;
    /* multiplicative hashing (Knuth, TAOCP 6.4), the five products independent, then one
     * xor-shift-multiply round of SplitMix64's finalizer (Steele et al., OOPSLA 2014) */
    uint64_t h = (k0 * 0x9E3779B97F4A7C15ull) ^ (k1 * 0xC2B2AE3D27D4EB4Full)
                 ^ (k2 * 0x165667B19E3779F9ull) ^ (k3 * 0xD6E8FEB86659FD93ull)
                 ^ (k4 * 0xFF51AFD7ED558CCDull);
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    K->k[0] = k0;
    K->k[1] = k1;
    K->k[2] = k2;
    K->k[3] = k3;
    K->k[4] = k4;
    K->slot = (uint32_t)(h >> (64 - TS_ROW_SLOT_BITS));
    K->tag = (uint32_t)(h >> 16) & 0xffff0000u;
}

#if defined(__GNUC__) || defined(__clang__)
#define TS_PREFETCH(p) __builtin_prefetch(p)
#else
#define TS_PREFETCH(p) ((void)(p))
#endif

/* Prefetching, a few configurations ahead (the memo is larger than the first-level cache, and
 * each lookup is a chain of dependent loads: slot -> row entry -> pair index -> pair entry).
 * A hint only: what it reads may change before the lookup, which reads everything again. */
static inline void ts_prefetch_row(const ts_memo *M, const ts_row_key *K, int order)
{
    uint32_t v = M->slot[K->slot];
    if (v != 0 && (v & 0xffff0000u) == K->tag) {
        const ts_row_entry *e = &M->row[(v & 0xffffu) - 1].e;
        const char *r = (const char *)&e->row;
        TS_PREFETCH(e->key);
        if (order >= 0 && order < TS_N_ORDERS)
            TS_PREFETCH(&e->pair[order]);
        for (int off = 0; off < (int)sizeof(ts_row); off += 64)
            if (off < (int)((const char *)&e->row.tp - r)) /* the part read per configuration */
                TS_PREFETCH(r + off);
    }
}

static inline void ts_prefetch_pair(const ts_memo *M, const ts_row_key *K, int order, int zero)
{
    uint32_t v = M->slot[K->slot];
    if (v != 0 && (v & 0xffff0000u) == K->tag && order >= 0 && order < TS_N_ORDERS) {
        unsigned p = M->row[(v & 0xffffu) - 1].e.pair[order];
        if (p != 0) {
            TS_PREFETCH(&M->pair[p - 1]);
            if (zero == 3)
                TS_PREFETCH(&M->pair3[p - 1]);
        }
    }
}

/* The row entry of configuration c (column stride n, key K), filled by ts_row_init on a
 * miss. */
static inline ts_row_entry *ts_memo_row(ts_memo *M, const ts_ctx *ctx, const int32_t *c,
                                        int64_t n, const ts_row_key *K, int *hit)
{
    uint32_t mask = (1u << TS_ROW_SLOT_BITS) - 1, i = K->slot;
    ts_row_entry *e;
    for (;; i = (i + 1) & mask) {
        uint32_t v = M->slot[i];
        if (v == 0)
            break;
        if ((v & 0xffff0000u) == K->tag) {
            e = &M->row[(v & 0xffffu) - 1].e;
            if (((e->key[0] ^ K->k[0]) | (e->key[1] ^ K->k[1]) | (e->key[2] ^ K->k[2])
                 | (e->key[3] ^ K->k[3]) | (e->key[4] ^ K->k[4])) == 0) {
                *hit = 1;
                return e;
            }
        }
    }
    *hit = 0;
    if (M->n_rows == TS_ROW_CAP) {
        ts_memo_reset(M);
        i = K->slot; /* the table is empty: the key's own slot is free */
    }
    e = &M->row[M->n_rows].e;
    M->slot[i] = K->tag | (uint32_t)(M->n_rows + 1);
    M->n_rows++;
    for (int w = 0; w < 5; w++)
        e->key[w] = K->k[w];
    memset(e->pair, 0, sizeof e->pair);
    ts_row_init(ctx, c, n, &e->row);
    return e;
}

/* configurations between a key's hashing and its lookup (a power of two) */
#define TS_AHEAD 8

/* Configuration i of the batch from scratch. Its results are composed in a local buffer and
 * stored once: read back from the batch's columns (ts_guard_finite), results just stored with
 * the column stride stalled on those stores (1.75 -> 2.2 M configurations/s on the bench's
 * batch in calls of 8,192). */
static inline void ts_evaluate_column(const ts_ctx *ctx, const int32_t *cfg, int64_t n,
                                      double *out, int64_t i)
{
    double res[TS_N_OUT];
    ts_evaluate_config(ctx, cfg + i, n, res, 1);
    for (int k = 0; k < TS_N_OUT; k++)
        out[k * n + i] = res[k];
}

/* Columns [lo, hi) of the batch. */
static void ts_run_range(const ts_ctx *ctx, const int32_t *cfg, int64_t n, double *out,
                         int64_t lo, int64_t hi)
{
    ts_memo *M = NULL;
    void *block = NULL;
    int64_t i = lo, row_hits = 0, check;
    ts_row_key ring[TS_AHEAD];
    ts_stream *S = NULL; /* a large range: results through the ring (one in the memo block) */
    if (hi - lo >= TS_MEMO_MIN)
        block = calloc(1, sizeof(ts_memo) + 64);
    if (block) /* round up to a cache line */
        M = (ts_memo *)((char *)block + (64 - (uintptr_t)block % 64) % 64);
    if (!M) {
        for (; i < hi; i++)
            ts_evaluate_column(ctx, cfg, n, out, i);
        return;
    }
    if (hi - lo >= TS_STREAM_MIN && (uintptr_t)out % sizeof(double) == 0) {
        S = &M->stream;
        ts_stream_start(S, out, n, lo);
    }
    /* hi - lo >= TS_MEMO_MIN > TS_AHEAD: the keys of lo .. lo + 5 */
    for (int64_t j = lo; j < lo + 6; j++)
        ts_row_key_of(cfg + j, n, &ring[j & (TS_AHEAD - 1)]);
    check = lo + TS_MEMO_WINDOW;
    for (; i < hi; i++) {
        const int32_t *c = cfg + i;
        const ts_row_key *K = &ring[i & (TS_AHEAD - 1)];
        ts_row_entry *e;
        ts_row *R;
        ts_pair_memo *pm = NULL;
        ts_ord O;
        ts_rec V;
        int recompute, zero, order, dp_overlap, code, hit;
        double *res = S ? S->ring + TS_RING_AT(i) : out + i; /* this configuration's results */
        int64_t rs = S ? TS_RING : n;
        if (S && (i & 7) == 0 && i > lo)
            ts_stream_store(S, out, n, i, 0);
        if (i == check) { /* the memo pays for its misses only when rows repeat */
            if (row_hits < TS_MEMO_MIN_HITS)
                break;
            row_hits = 0;
            check += TS_MEMO_WINDOW;
        }
        /* three stages ahead: hash i + 6 (and fetch its slot), fetch the row of i + 4, the
         * pair of i + 2 (two configurations apart: one was too close for a second-level
         * cache miss, 2 % of the bench's time; three apart gained nothing more) */
        if (i + 6 < hi) {
            ts_row_key *K3 = &ring[(i + 6) & (TS_AHEAD - 1)];
            ts_row_key_of(c + 6, n, K3);
            TS_PREFETCH(&M->slot[K3->slot]);
        }
        if (i + 4 < hi)
            ts_prefetch_row(M, &ring[(i + 4) & (TS_AHEAD - 1)], c[TS_CFG_ORDER * n + 4]);
        if (i + 2 < hi)
            ts_prefetch_pair(M, &ring[(i + 2) & (TS_AHEAD - 1)], c[TS_CFG_ORDER * n + 2],
                             c[TS_CFG_ZERO * n + 2]);

        e = ts_memo_row(M, ctx, c, n, K, &hit);
        row_hits += hit;
        R = &e->row;

        recompute = c[TS_CFG_RECOMPUTE * n];
        zero = c[TS_CFG_ZERO * n];
        order = c[TS_CFG_ORDER * n];
        dp_overlap = c[TS_CFG_DP_OVERLAP * n];
        code = ts_join_error(R->code,
                             ts_free_sync_error(ctx->job, recompute, zero, order, dp_overlap));
        if (code != 0) {
            ts_write_invalid(res, rs, code);
            continue;
        }

        if (e->pair[order] != 0) {
            pm = &M->pair[e->pair[order] - 1];
            O.tp_pass = pm->tp_pass;
            O.cp_step = pm->cp_step;
            O.ep_pass = pm->ep_pass;
            O.pp_comm = pm->pp_comm;
            O.ar = pm->ar;
            O.rs = pm->rs;
            O.ag = pm->ag;
            O.have_ar = pm->flags >> 1 & 1;
            O.have_ag = pm->flags & 1;
            O.have_ag3 = pm->flags >> 2 & 1;
            if (O.have_ag3) {
                const ts_pair3_memo *p3 = &M->pair3[pm - M->pair];
                O.rs3 = p3->rs3;
                O.ag3 = p3->ag3;
            }
            O.order = order;
            O.groups_ok = 0;
        } else {
            ts_ord_init(ctx, R, order, &O);
            if (M->n_pairs < TS_PAIR_CAP) { /* (always: a full store starts over below) */
                pm = &M->pair[M->n_pairs];
                M->n_pairs++;
                e->pair[order] = (uint16_t)M->n_pairs;
                pm->tp_pass = O.tp_pass;
                pm->cp_step = O.cp_step;
                pm->ep_pass = O.ep_pass;
                pm->pp_comm = O.pp_comm;
                pm->flags = 0;
            }
        }
        ts_rec_init(ctx, R, &O, recompute, &V);
        ts_final(ctx, R, &O, &V, zero, dp_overlap == 1, res, rs);
        /* keep the data-parallel collectives ts_final computed */
        if (pm) {
            if (O.have_ar && !(pm->flags & 2)) {
                pm->ar = O.ar;
                pm->flags |= 2;
            }
            if (O.have_ag && !(pm->flags & 1)) {
                pm->rs = O.rs;
                pm->ag = O.ag;
                pm->flags |= 1;
            }
            if (O.have_ag3 && !(pm->flags & 4)) {
                ts_pair3_memo *p3 = &M->pair3[pm - M->pair];
                p3->rs3 = O.rs3;
                p3->ag3 = O.ag3;
                pm->flags |= 4;
            }
        }
        if (M->n_pairs == TS_PAIR_CAP) /* e and pm are not used again */
            ts_memo_reset(M);
    }
    if (S) {
        ts_stream_store(S, out, n, i, 1);
#ifdef TS_HAVE_STREAM_STORES
        _mm_sfence(); /* the non-temporal stores are seen before the results are read */
#endif
    }
    /* rows that rarely repeat: the rest from scratch */
    for (; i < hi; i++)
        ts_evaluate_column(ctx, cfg, n, out, i);
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
