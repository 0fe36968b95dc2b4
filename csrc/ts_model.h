/* Internal declarations of the C port of the LLM cost model (not part of the public ABI).
 *
 * One function per function of the Python reference (src/trainscape/model/), same name with
 * a ts_ prefix, same argument meaning. Where the reference re-derives a per-batch invariant on
 * every call (tier spans, path bandwidths, a group's fan-out per tier, the placement order's
 * permutation), the port takes it precomputed: a ts_net holds what the reference reads from the
 * system block's tiers, a ts_group holds one communication group's per-tier fan-outs, and a
 * placement order arrives decoded as a permutation.
 *
 * The arithmetic is the reference's, term for term. On the hot path a few divisions become
 * multiplications by a reciprocal computed once (per batch: 1 / bandwidth, 1 / (peak x
 * efficiency); per config: 1 / tp, 1 / (tp cp), 1 / dp shards, 1 / step), and gemm_time folds
 * gemm_efficiency into (flops + count * half) / (peak * eff_max) -- the same values to a few
 * ulps, far inside the 1e-9 the differential tests hold every column to. Shortcuts that skip
 * work (a group of one rank, x / 1, a one-tier hierarchical collective that equals the flat
 * ring) give exactly the reference's value.
 *
 * Built as one translation unit (TS_UNITY_BUILD, what the cffi build does: trainscape_all.c
 * includes every source) the model functions are static and inline freely; compiled file by
 * file they are ordinary external functions with the ts_ prefix.
 */
#ifndef TS_MODEL_H
#define TS_MODEL_H

#include <math.h>
#include <stdint.h>

#include "trainscape.h"

#ifdef TS_UNITY_BUILD
#define TS_FN static inline
#else
#define TS_FN
#endif

/* Python's max(a, b) and min(a, b) for two floats: the first argument unless the second is
 * strictly greater (smaller). Matches the reference exactly, NaN and -0.0 included. */
#define TS_PYMAX(a, b) ((b) > (a) ? (b) : (a))
#define TS_PYMIN(a, b) ((b) < (a) ? (b) : (a))

#define TS_GIB 1073741824.0

/* ---- network.py: per-batch view of the tiers ------------------------------------------- */
typedef struct {
    int n_tiers;
    double span[TS_MAX_TIERS];     /* tier_span(sys, i); inf for the outermost tier */
    double link_bw[TS_MAX_TIERS];  /* tier_link_bandwidth(sys, i) */
    double path_bw[TS_MAX_TIERS];  /* tier_path_bandwidth(sys, i) */
    double latency[TS_MAX_TIERS];  /* tier_latency(sys, i) */
    double inv_link_bw[TS_MAX_TIERS];  /* 1 / link_bw: the hot path multiplies */
    double inv_path_bw[TS_MAX_TIERS];  /* 1 / path_bw */
    double line_bw[TS_MAX_TIERS];  /* bandwidth * efficiency (boundary_link_bandwidth) */
    double oversub[TS_MAX_TIERS];  /* oversubscription */
    double window_bw[TS_MAX_TIERS]; /* transport_window_bandwidth(sys, i) */
    double comm_dtype_bytes[TS_MAX_TIERS]; /* tier_comm_dtype_bytes(sys, i); 0: none */
    int any_comm_dtype;            /* some tier in use has a comm_dtype */
    double inv_codec;              /* 1 / (hbm_bandwidth * memory_efficiency): codec_time */
    double capacity;               /* tier_capacity(sys) */
    /* the site graph (network.py n_sites; 0: none) and its links in path order, read as tier
     * records site_link_tier(a, b): tier_latency, bandwidth * efficiency, oversubscription and
     * transport_window_bandwidth of each */
    int n_sites;
    double site_latency[TS_MAX_SITES][TS_MAX_SITES];
    double site_line_bw[TS_MAX_SITES][TS_MAX_SITES];
    double site_oversub[TS_MAX_SITES][TS_MAX_SITES];
    double site_window_bw[TS_MAX_SITES][TS_MAX_SITES];
} ts_net;

/* One communication group (up to three dimensions) over the tiers. */
typedef struct {
    double n;                       /* group_size(n_a, n_b, n_c) */
    int top;                        /* group_top_tier(...) */
    double fanout[TS_MAX_TIERS];    /* group_fanout(sys, i, ...) for i < n_tiers */
    int crossings;                  /* tiers with fanout > 1 (1: hierarchical == flat ring) */
} ts_group;

TS_FN double ts_tier_field(const double *sys, int tier, int field);
TS_FN int ts_n_tiers(const double *sys);
TS_FN double ts_tier_span(const double *sys, int tier);
TS_FN double ts_tier_capacity(const double *sys);
TS_FN double ts_transport_window_bandwidth(const double *sys, int tier);
TS_FN double ts_tier_link_bandwidth(const double *sys, int tier);
TS_FN double ts_tier_path_bandwidth(const double *sys, int tier);
TS_FN double ts_tier_latency(const double *sys, int tier);
TS_FN double ts_boundary_link_bandwidth(const ts_net *net, int tier, double inner_members);
TS_FN void ts_net_init(ts_net *net, const double *sys);
TS_FN int ts_order_dim_at(int order, int position);
TS_FN void ts_order_permutation(int order, int8_t perm[TS_N_DIMS]);
TS_FN void ts_placement_strides(const int8_t perm[TS_N_DIMS], double deg_tp, double deg_cp,
                                double deg_ep, double deg_dp, double deg_pp,
                                double strides[TS_N_DIMS]);
TS_FN double ts_dim_members_within(double span, double degree, double stride);
TS_FN double ts_group_members_within(double span, double n_a, double s_a, double n_b,
                                     double s_b, double n_c, double s_c);
TS_FN double ts_group_fanout(const ts_net *net, int tier, double n_a, double s_a, double n_b,
                             double s_b, double n_c, double s_c);
TS_FN int ts_group_top_tier(const ts_net *net, double n_a, double s_a, double n_b, double s_b,
                            double n_c, double s_c);
TS_FN void ts_group_init(ts_group *g, const ts_net *net, double n_a, double s_a, double n_b,
                         double s_b, double n_c, double s_c);
TS_FN void ts_group_init1(ts_group *g, const ts_net *net, double n, double stride);

/* ---- collectives.py ---------------------------------------------------------------------- */
TS_FN double ts_ring_all_reduce_time(double n, double nbytes, double latency, double bandwidth);
TS_FN double ts_ring_all_gather_time(double n, double nbytes, double latency, double bandwidth);
TS_FN double ts_ceil_log2(double n);
TS_FN double ts_tree_all_reduce_time(double n, double nbytes, double latency, double bandwidth);
TS_FN double ts_group_size(double n_a, double n_b, double n_c);
TS_FN double ts_all_reduce_time(const ts_net *net, double nbytes, const ts_group *g);
TS_FN double ts_all_gather_time(const ts_net *net, double nbytes, const ts_group *g);
TS_FN double ts_reduce_scatter_time(const ts_net *net, double nbytes, const ts_group *g);
TS_FN double ts_wire_bytes(double comm_dtype_bytes, double elem_bytes);
TS_FN double ts_compressed_all_reduce_time(const ts_net *net, double nbytes, double elem_bytes,
                                           const ts_group *g);
TS_FN double ts_compressed_all_gather_time(const ts_net *net, double nbytes, double elem_bytes,
                                           const ts_group *g);
TS_FN double ts_all_to_all_time(const ts_net *net, double nbytes, const ts_group *g);
TS_FN double ts_site_members(const ts_net *net, const ts_group *g);
TS_FN double ts_within_site_time(const ts_net *net, double nbytes, double elem_bytes, int reduce,
                                 const ts_group *g);
TS_FN double ts_cross_site_time(const ts_net *net, double nbytes, double elem_bytes,
                                const ts_group *g);
TS_FN double ts_node_limited_share(double copies, double max_nodes, double n,
                                   double node_members);
TS_FN double ts_routed_all_to_all_pair_time(const ts_net *net, double nd, double nc,
                                            double copies, double max_nodes, const ts_group *g);
TS_FN double ts_p2p_time(const ts_net *net, double nbytes, const ts_group *g);
TS_FN void ts_pipeline_boundary_transfers(const ts_net *net, double nbytes, double p,
                                          double s_pp, double out[3]);
TS_FN double ts_site_stride(double s_pp, double site_span);
TS_FN int ts_site_path_applies(const ts_net *net, double f, double d);
TS_FN double ts_site_link_transfer(const ts_net *net, double nbytes, double inner, int a, int b,
                                   double nic);
TS_FN void ts_site_path_transfers(const ts_net *net, double nbytes, double inner, double f,
                                  double d, double nic, double out[3]);

/* ---- pipeline.py ------------------------------------------------------------------------- */
TS_FN int64_t ts_schedule_chunks(int schedule, int64_t v);
TS_FN int64_t ts_schedule_layer_divisor(int schedule, int64_t p, int64_t v);
TS_FN int ts_schedule_valid(int schedule, int64_t p, int64_t m, int64_t v);
TS_FN double ts_bubble_time(int schedule, int64_t p, int64_t m, int64_t v, double f, double b,
                            double w);
TS_FN double ts_inflight_activations(int schedule, int64_t p, int64_t m, int64_t v);
TS_FN double ts_inflight_activations_rank(int schedule, int64_t p, int64_t m, int64_t v,
                                          int64_t r);
TS_FN int ts_loss_on_first_device(int schedule, int64_t p);
TS_FN void ts_explicit_stage_layers(int64_t p, int64_t layers, int64_t first_n, int64_t last_n,
                                    double *first_out, double *middle_out, double *last_out);
TS_FN int ts_explicit_stage_layers_error(int schedule, int64_t p, int64_t v, int64_t layers,
                                         int64_t first_n, int64_t last_n);
TS_FN void ts_pipeline_stage_layers(int schedule, int64_t p, int64_t v, int64_t layers,
                                    int64_t edge, int64_t mtp, int64_t first_n, int64_t last_n,
                                    double *first_out, double *middle_out, double *last_out);
TS_FN double ts_p2p_critical_transfers(int schedule, double p, double v);
TS_FN double ts_parameter_copies(int schedule);
TS_FN double ts_p2p_steady_crossings_1f1b(double p, double m);
TS_FN double ts_p2p_steady_transfer_1f1b(double p, double route, double t_max);
TS_FN double ts_pipeline_hide_window(double f, double b, double w, double chunks);
TS_FN double ts_pipeline_comm_time(int schedule, double p, double v, double m, double route,
                                   double t_top, double t_max, double hide);

/* ---- llm.py ------------------------------------------------------------------------------ */
/* Values of llm.py that depend on the blocks only, computed once per batch with the
 * reference's own expressions (so hoisting them changes no bit). */
typedef struct {
    /* config_error's int(...) of block fields */
    int64_t heads, kv_heads, global_batch, layers, experts, seq, hidden, ffn, expert_ffn;
    int64_t edge;            /* int(job pipeline_edge_layers) */
    int64_t mtp;             /* int(model mtp_layers) */
    int64_t first_n;         /* int(job pipeline_first_stage_layers) */
    int64_t last_n;          /* int(job pipeline_last_stage_layers) */
    double mtp_moe;          /* mtp_moe_blocks */
    int dropout;             /* job dropout > 0 */
    double n_moe;            /* moe_layer_count(layers, experts, moe_every) */
    double model_flops;      /* model_flops_per_sequence(mdl, seq) * global_batch */
    double dense_layer_params;  /* attention_params + mlp_params(h, ffn) */
    double moe_layer_params;    /* attention_params + h * experts + shared * mlp_params(h, e_ffn) */
    double embedding_params;    /* embedding_params(vocab, h) */
    double expert_mlp_params;   /* mlp_params(h, expert_ffn) */
    /* reciprocals of the system's rates, so the hot path multiplies instead of dividing */
    double inv_peak_gemm;       /* 1 / (peak_flops * gemm_efficiency_max) */
    double gemm_half;           /* gemm_half_flops */
    double inv_peak_attention;  /* 1 / (peak_flops * attention_efficiency
                                 *      * attention_head_dim_efficiency(head_dim)) */
    double inv_hbm;             /* 1 / (hbm_bandwidth * memory_efficiency) */
    double inv_stream_hbm;      /* 1 / (hbm_bandwidth * stream_memory_efficiency(sys)) */
    double inv_gpus;            /* 1 / gpus */
    double inv_gpus_peak;       /* 1 / (gpus * the MFU peak: llm.py mfu_peak_flops) */
    double usd_per_s;           /* gpus * usd_per_gpu_s: what a second of the job costs */
    double tokens_per_usd_s;    /* tokens per step / usd_per_s (0 without a price) */
    double tokens_per_j_s;      /* tokens per step / (gpus * power_w) (0 without a power) */
    double top_k, max_route_nodes;  /* moe_all_to_all_pair_time's block fields */
    double inv_peak_linear;     /* 1 / (linear_peak_flops * linear_efficiency_max) */
    double linear_half;         /* linear_half_flops */
    double attn_bwd_factor;     /* attention_backward_factor(flash) */
    double attn_half_over_seq;  /* attention_half_seq / seq_len */
    double window_layer_share;  /* windowed_layer_count / layers when it applies, else 0 */
    double window_pair_share;   /* window_pair_share(seq_len, attention_window) */
    double window;              /* attention_window */
    double dense_layer_linear_params; /* attention_linear_params + mlp_params(h, ffn) */
    double moe_layer_linear_params;   /* attention_linear_params + shared * mlp_params(h, e_ffn) */
} ts_llm_inv;

/* Everything one batch shares: the blocks, the network view, block-only values of the model
 * and the decoded orders. */
typedef struct {
    const double *sys;
    const double *mdl;
    const double *job;
    ts_net net;
    ts_llm_inv inv;
    const int8_t (*orders)[TS_N_DIMS]; /* decoded placement orders, or NULL (decode per call) */
} ts_ctx;

TS_FN int ts_ctx_init(ts_ctx *ctx, const double *sys, const double *mdl, const double *job);

/* ---- llm.py evaluate_config in stages ----------------------------------------------------
 * A configuration is a "core row" (tp cp pp dp ep mbs vpp schedule sp tp_overlap: the fields
 * every compute and memory term reads) plus four free fields. ts_evaluate_config is exactly
 *     ts_row_init -> ts_ord_init(order) -> ts_rec_init(recompute) -> ts_final(zero, dp_overlap)
 * the twins of the reference's row_terms -> order_terms -> recompute_terms ->
 * data_parallel_comm + finish_config (ts_row also keeps per-recompute values the reference
 * computes in recompute_terms)
 * and each stage only reads the stages before it, so a caller that holds a stage fixed (the
 * sweep walks every order / recompute / zero / dp_overlap under one row; a batch meets the same
 * rows again and again) may reuse it. Every value is computed by the same expressions in the
 * same order as the one-shot function: reuse changes no bit. The activation memory of a
 * recompute choice other than "none" is filled into the row on first use (ts_row_act), and so
 * is a ZeRO stage's state memory (ts_final; the reference's state_memory_terms). */
typedef struct {
    /* read for every configuration (ts_rec_init, ts_final): first, to share cache lines */
    int code;            /* config_error over the core fields (0, 1..8, 12, 13, 15..27, 100+) */
    int schedule, tp_overlap, dualpipe, has_ep_comm, sp;
    double cp, pp, vpp, m;
    double fsdp_units;   /* llm.py fsdp_units: ZeRO-3 collectives per microbatch pass */
    double dp_last_share; /* llm.py dp_last_bucket_share: the last gradient bucket's share */
    double t_core, t_core_bwd, gemm_f, stage_layers, f_compute, w_compute;
    double cp_attn_step_f, cp_attn_step_b; /* attention of one CP ring step, fwd / bwd */
    double b_compute[TS_RECOMPUTE_COUNT]; /* b_compute after the recompute adjustment */
    double gemm_redo[TS_RECOMPUTE_COUNT]; /* GEMM time a named-dot policy re-runs (else 0) */
    /* selective recompute's checkpointing modules (llm.py recompute_module_gemm_time,
     * recompute_module_tp_replay): the re-run blocks' GEMM time and TP traffic share */
    double module_gemm_redo, module_tp_replay;
    int act_have;                         /* bit rc: mem_act[rc] computed (see ts_row_act) */
    /* per ZeRO stage z and pipeline stage c: the weights', gradients' and optimizer states'
     * bytes (llm.py state_memory_terms) under synchronous data parallelism; bit z of mem_have:
     * filled by ts_final on first use (ts_stage_state_memory) */
    int mem_have;
    double mem_state[4][3][3];
    /* per stage c (0 first, 1 busiest middle, 2 last; llm.py stage_activations):
     * stage layers x per-layer bytes(recompute) x inflight_activations_rank */
    double mem_act[TS_RECOMPUTE_COUNT][3];
    /* one microbatch's saved bytes of one dense and one MoE layer (job.offload_activations) */
    double act_layer[TS_RECOMPUTE_COUNT][2];
    /* full recompute with every layer checkpointed: one layer's bytes the backward rebuilds
     * beyond its checkpoint, dense and MoE (llm.py recompute_working_set); else 0 */
    double rebuild[2];
    double hw_flops[TS_RECOMPUTE_COUNT];
    double optimizer[2];                  /* zero == 0, zero >= 1 */
    double opt_params[2];                 /* parameters whose optimizer step this GPU runs */
    double dense_params, expert_params, r_dp_dense, r_dp_expert, mem_logits;
    double st_dparams[3], st_eparams[3], st_logits[3]; /* per stage (llm.py stage_params) */
    /* per stage: ZeRO-3's gathered dense / expert units in flight (llm.py zero3_gather_bytes) */
    double st_gather_d[3], st_gather_e[3];
    double st_lparams[3];                 /* per stage: FP8 linear weights outside the experts */
    /* read by ts_ord_init only */
    double tp, dp, ep, b, dpx, moe_layers, dense_layers;
    int fold;                /* llm.py moe_folded: EP folded over TP x DP, expert TP 1 */
    double fold_gather_bytes; /* folded without SP: the combine output all-gathered over TP */
    double st_dense[3], st_moe[3], st_inflight[3]; /* per stage, for ts_row_act */
    double tp_bytes, kv_chunk, a2a_dispatch_bytes, a2a_combine_bytes, pp_bytes, pp_hide;
    double tp_gather_bytes;  /* SP's all-gathers: the linear inputs, FP8 under an FP8 recipe */
    double tp_gather_share;  /* llm.py tp_gather_share: their share of a pass's TP bytes */
    double full_share;       /* llm.py full_recompute_share: the layers full recompute re-runs */
    double tp_copy_f, tp_copy_b; /* llm.py tp_sequence_copy_bytes of one layer, as time */
    double dp_dense, dp_expert;
    double ar_dense_bytes, ar_expert_bytes, ag_dense_bytes, ag_expert_bytes;
    double e_ag_dense, e_ag_expert; /* the weight all-gathers' widths (llm.py param_gather_bytes) */
} ts_row;

typedef struct {
    double tp_pass, cp_step, ep_pass, pp_comm;
    /* the data-parallel collectives, computed when a zero stage first needs them (from the
     * groups, rebuilt for the order when a copied-in ts_ord lacks them: groups_ok 0) */
    int have_ar, have_ag, have_ag3, groups_ok, order;
    double ar, rs, ag; /* zero == 0: ar; zero 1 or 2: rs, ag of all the device's parameters */
    double rs3, ag3;   /* zero == 3: one FSDP unit's (llm.py data_parallel_comm) */
    ts_group g_dp_dense, g_dp_expert;
    /* hybrid sharding (job.dp_replicas > 1; llm.py dp_shard_groups, dp_replica_group): the
     * groups ZeRO shards over and the replicas' group; unset otherwise */
    ts_group g_dps_dense, g_dps_expert, g_dp_rep;
} ts_ord;

typedef struct {
    int recompute;
    double f_stage, bw_stage, fbw_stage, step_pre;
    double compute, tp_comm, cp_comm, ep_comm, bubble, mem_act[3], hw_flops;
    double offload; /* llm.py REC_OFFLOAD: exposed activation offload per step */
} ts_rec;

/* config_error split: the core fields' code, and the free fields' (9, 10, 11, 14). The
 * reference returns the first failing check in code order, so the whole code is the smaller
 * non-zero one of the two. */
TS_FN int ts_core_error(const ts_ctx *ctx, int64_t tp, int64_t cp, int64_t pp, int64_t dp,
                        int64_t ep, int64_t mbs, int64_t vpp, int64_t schedule, int64_t sp,
                        int64_t tp_overlap);
TS_FN int ts_free_error(int64_t recompute, int64_t zero, int64_t order, int64_t dp_overlap);
TS_FN int ts_free_sync_error(const double *job, int64_t recompute, int64_t zero, int64_t order,
                             int64_t dp_overlap);
TS_FN void ts_row_init(const ts_ctx *ctx, const int32_t *cfg, int64_t stride, ts_row *R);
TS_FN void ts_ord_init(const ts_ctx *ctx, const ts_row *R, int order, ts_ord *O);
TS_FN void ts_ord_dp_groups(const ts_ctx *ctx, const ts_row *R, ts_ord *O);
TS_FN void ts_ord_dp_groups_at(const ts_ctx *ctx, const ts_row *R, ts_ord *O,
                               const double strides[TS_N_DIMS]);
/* mem_act[rc] of a row, computed by ts_row_init for rc = none only, by ts_rec_init (through
 * ts_row_act) the first time another choice needs it. */
TS_FN void ts_row_act(const ts_ctx *ctx, ts_row *R, int rc);
TS_FN void ts_rec_init(const ts_ctx *ctx, ts_row *R, const ts_ord *O, int recompute, ts_rec *V);
TS_FN int ts_final(const ts_ctx *ctx, ts_row *R, ts_ord *O, const ts_rec *V, int zero,
                   int dp_overlap, double *out, int64_t os);
TS_FN int ts_write_invalid(double *out, int64_t os, int code);

TS_FN void ts_llm_invariants(ts_llm_inv *inv, const double *sys, const double *mdl,
                             const double *job);
TS_FN int ts_config_error(const ts_ctx *ctx, const int32_t *cfg, int64_t stride);
TS_FN int ts_evaluate_config(const ts_ctx *ctx, const int32_t *cfg, int64_t stride, double *out,
                             int64_t out_stride);

#endif /* TS_MODEL_H */
