/* The LLM training step: FLOPs, per-GPU times, communication, memory.
 * Port of src/trainscape/model/llm.py, function by function (sources cited per function). */
#include <float.h>

#include "ts_model.h"

/* ===== FLOPs of one layer for one microbatch ============================================= */

/* llm.py attention_projection_flops: GQA projections (Ainslie et al. 2023; Narayanan et al.
 * SC'21 §5.1). */
TS_FN double ts_attention_projection_flops(double b, double s, double h, double heads,
                                           double kv_heads, double head_dim)
{
    double q_dim = heads * head_dim;
    double kv_dim = kv_heads * head_dim;
    return 2.0 * b * s * h * (q_dim + 2.0 * kv_dim) + 2.0 * b * s * q_dim * h;
}

/* llm.py attention_core_flops: 4 b s^2 a d (Narayanan et al. SC'21 §5.1). */
TS_FN double ts_attention_core_flops(double b, double s, double heads, double head_dim)
{
    return 4.0 * b * s * s * heads * head_dim;
}

/* llm.py mlp_flops: 2 or 3 h x ffn matrices (Shazeer 2020). */
TS_FN double ts_mlp_flops(double b, double s, double h, double ffn, int swiglu)
{
    double matrices = swiglu ? 3.0 : 2.0;
    return 2.0 * b * s * h * ffn * matrices;
}

/* llm.py router_flops: h x E router (Fedus et al. 2021). */
TS_FN double ts_router_flops(double b, double s, double h, double experts)
{
    return 2.0 * b * s * h * experts;
}

/* llm.py moe_mlp_flops: top_k + shared expert MLPs per token (Shazeer et al. 2017;
 * DeepSeek-V3 §2.1.2). */
TS_FN double ts_moe_mlp_flops(double b, double s, double h, double expert_ffn, double top_k,
                              double shared_experts, int swiglu)
{
    return (top_k + shared_experts) * ts_mlp_flops(b, s, h, expert_ffn, swiglu);
}

/* llm.py expert_gemm_count: GEMM kernels of one MoE layer's experts in a pass -- fc1 and fc2
 * per local expert (Transformer Engine GroupedLinear), or one grouped kernel each for all the
 * routed experts (job.grouped_expert_gemm: CUTLASS grouped GEMM), plus the shared experts'. */
static inline double ts_expert_gemm_count(const double *job, double routed_local,
                                          double shared)
{
    if (job[TS_JOB_GROUPED_EXPERT_GEMM] > 0.0)
        return 2.0 * (1.0 + shared);
    return 2.0 * (routed_local + shared);
}

/* llm.py logits_flops: 2bshV (Narayanan et al. SC'21 §5.1). */
TS_FN double ts_logits_flops(double b, double s, double h, double vocab)
{
    return 2.0 * b * s * h * vocab;
}

/* llm.py windowed_layer_count: layers attending through a sliding window (all, or all but
 * every full_every-th). */
TS_FN double ts_windowed_layer_count(double layers, double window, double full_every)
{
    if (window <= 0.0)
        return 0.0;
    if (full_every <= 0.0)
        return layers;
    return layers - floor(layers / full_every);
}

/* llm.py window_pair_share: the band of the causal triangle a window of `window` keys keeps,
 * 2x - x^2 with x = window / seq. */
TS_FN double ts_window_pair_share(double seq, double window)
{
    double x;
    if (window <= 0.0 || window >= seq)
        return 1.0;
    x = window / seq;
    return 2.0 * x - x * x;
}

/* llm.py moe_layer_count: after first_dense leading dense layers, every moe_every-th layer
 * (GShard, Mixtral; DeepSeek-V3: 3 dense, then 58 MoE). */
TS_FN double ts_moe_layer_count(double layers, double experts, double moe_every,
                                double first_dense)
{
    double rest = layers - first_dense;
    if (experts <= 0.0 || moe_every <= 0.0 || rest <= 0.0)
        return 0.0;
    return floor(rest / moe_every);
}

/* llm.py model_moe_layers: moe_layer_count of the model block. */
TS_FN double ts_model_moe_layers(const double *mdl)
{
    return ts_moe_layer_count(mdl[TS_MDL_LAYERS], mdl[TS_MDL_EXPERTS], mdl[TS_MDL_MOE_EVERY],
                              mdl[TS_MDL_FIRST_DENSE_LAYERS]);
}

/* llm.py megatron_flops_per_iteration: Narayanan et al. SC'21 eq. (3). */
TS_FN double ts_megatron_flops_per_iteration(double batch, double s, double layers, double h,
                                             double vocab, int full_recompute)
{
    double passes = full_recompute ? 4.0 : 3.0;
    return 24.0 * passes * batch * s * layers * h * h
           * (1.0 + s / (6.0 * h) + vocab / (16.0 * layers * h * passes / 4.0));
}

/* llm.py mtp_moe_blocks: MoE blocks among the MTP blocks -- the last layer's kind (Megatron-LM
 * num_floating_point_operations last_layer_is_moe; routed when moe_every divides the depth
 * after the leading dense layers). */
TS_FN double ts_mtp_moe_blocks(const double *mdl)
{
    double mtp = mdl[TS_MDL_MTP_LAYERS];
    double n_moe = ts_model_moe_layers(mdl);
    if (mtp <= 0.0 || n_moe <= 0.0
        || n_moe * mdl[TS_MDL_MOE_EVERY] != mdl[TS_MDL_LAYERS] - mdl[TS_MDL_FIRST_DENSE_LAYERS])
        return 0.0;
    return mtp;
}

/* llm.py mtp_block_params: an MTP block's 2h x h projection and three norm scales. */
TS_FN double ts_mtp_block_params(double h)
{
    return 2.0 * h * h + 3.0 * h;
}

/* llm.py mtp_projection_flops: an MTP block's 2h -> h projection and three norms, forward
 * (DeepSeek-V3 arXiv 2412.19437 eq. 21; Megatron-LM "MTP norms and proj"). */
TS_FN double ts_mtp_projection_flops(double b, double s, double h)
{
    return 2.0 * b * s * ts_mtp_block_params(h);
}

/* llm.py mtp_projection_input_bytes: the projection's 2h-wide input kept for its wgrad,
 * sequence-split under SP. */
TS_FN double ts_mtp_projection_input_bytes(double b, double s, double h, double t, int sp,
                                           double act_bytes)
{
    return 2.0 * b * s * h * act_bytes / (sp ? t : 1.0);
}

/* llm.py output_head_flops: the output projection once plus once per MTP block, and the
 * blocks' projections. */
TS_FN double ts_output_head_flops(const double *mdl, double b, double s)
{
    double mtp = mdl[TS_MDL_MTP_LAYERS];
    return (1.0 + mtp) * ts_logits_flops(b, s, mdl[TS_MDL_HIDDEN], mdl[TS_MDL_VOCAB])
           + mtp * ts_mtp_projection_flops(b, s, mdl[TS_MDL_HIDDEN]);
}

/* llm.py model_flops_per_sequence: 3 forward-equivalents, no recompute (Chowdhery et al. 2022,
 * App. B); each MTP block a layer of the last layer's kind plus its output-head pass. */
TS_FN double ts_model_flops_per_sequence(const double *mdl, double s)
{
    double h = mdl[TS_MDL_HIDDEN];
    double layers = mdl[TS_MDL_LAYERS];
    double n_moe = ts_model_moe_layers(mdl);
    int swiglu = mdl[TS_MDL_SWIGLU] > 0.0;
    double per_layer = ts_attention_projection_flops(1.0, s, h, mdl[TS_MDL_HEADS],
                                                     mdl[TS_MDL_KV_HEADS], mdl[TS_MDL_HEAD_DIM])
                       + ts_attention_core_flops(1.0, s, mdl[TS_MDL_HEADS], mdl[TS_MDL_HEAD_DIM]);
    double dense_mlp = ts_mlp_flops(1.0, s, h, mdl[TS_MDL_FFN_HIDDEN], swiglu);
    double moe_mlp = ts_router_flops(1.0, s, h, mdl[TS_MDL_EXPERTS])
                     + ts_moe_mlp_flops(1.0, s, h, mdl[TS_MDL_EXPERT_FFN_HIDDEN], mdl[TS_MDL_TOP_K],
                                        mdl[TS_MDL_SHARED_EXPERTS], swiglu);
    double mtp = mdl[TS_MDL_MTP_LAYERS];
    double mtp_moe = ts_mtp_moe_blocks(mdl);
    double forward = (layers + mtp) * per_layer + (layers - n_moe + mtp - mtp_moe) * dense_mlp
                     + (n_moe + mtp_moe) * moe_mlp + mtp * ts_mtp_projection_flops(1.0, s, h)
                     + (1.0 + mtp) * ts_logits_flops(1.0, s, h, mdl[TS_MDL_VOCAB]);
    return 3.0 * forward;
}

/* ===== Parameters ========================================================================= */

/* llm.py attention_linear_params: Q, K, V and output weights. */
TS_FN double ts_attention_linear_params(double h, double heads, double kv_heads, double head_dim)
{
    double q_dim = heads * head_dim;
    double kv_dim = kv_heads * head_dim;
    return h * (q_dim + 2.0 * kv_dim) + q_dim * h;
}

/* llm.py attention_params: Q, K, V, output weights and two norm scales. */
TS_FN double ts_attention_params(double h, double heads, double kv_heads, double head_dim)
{
    return ts_attention_linear_params(h, heads, kv_heads, head_dim) + 2.0 * h;
}

/* llm.py mlp_params: 2 or 3 h x ffn matrices. */
TS_FN double ts_mlp_params(double h, double ffn, int swiglu)
{
    return (swiglu ? 3.0 : 2.0) * h * ffn;
}

/* llm.py embedding_params: vocab x h. */
TS_FN double ts_embedding_params(double vocab, double h)
{
    return vocab * h;
}

/* ===== Activation memory (Korthikanti et al. 2022 §4, Table 2) ============================ */

/* llm.py dropout_mask_bytes: 1 byte per masked element with dropout, none without. */
TS_FN double ts_dropout_mask_bytes(int dropout)
{
    return dropout ? 1.0 : 0.0;
}

/* llm.py attention_activation_bytes: Korthikanti et al. §4.1, GQA, FlashAttention, dropout. */
TS_FN double ts_attention_activation_bytes(double s, double b, double h, double heads,
                                           double kv_heads, double head_dim, double t, int sp,
                                           double act_bytes, int flash, int store_scores,
                                           int dropout, double lin_bytes)
{
    double sbh = s * b * h;
    double q_dim = heads * head_dim;
    double kv_dim = kv_heads * head_dim;
    double mask = ts_dropout_mask_bytes(dropout);
    double replicated = lin_bytes * sbh + mask * sbh;
    double split = act_bytes * s * b * (q_dim + 2.0 * kv_dim) + lin_bytes * s * b * q_dim;
    if (store_scores && !flash) {
        if (dropout)
            split += (2.0 * act_bytes + mask) * heads * s * s * b;
        else
            split += act_bytes * heads * s * s * b;
    }
    else if (flash)
        split += 4.0 * heads * s * b;
    if (sp)
        return (replicated + split) / t;
    return replicated + split / t;
}

/* llm.py mlp_activation_bytes: Korthikanti et al. §4.1 (19sbh for a 4h GeLU MLP); fc1 and fc2
 * inputs at lin_bytes. */
TS_FN double ts_mlp_activation_bytes(double s, double b, double h, double ffn, int swiglu,
                                     double t, int sp, double act_bytes, int dropout,
                                     double lin_bytes)
{
    double replicated = lin_bytes * s * b * h + ts_dropout_mask_bytes(dropout) * s * b * h;
    double split = (swiglu ? 2.0 : 1.0) * act_bytes * s * b * ffn + lin_bytes * s * b * ffn;
    if (sp)
        return (replicated + split) / t;
    return replicated + split / t;
}

/* llm.py moe_activation_bytes: MoE block, top_k + shared routed copies. */
TS_FN double ts_moe_activation_bytes(double s, double b, double h, double expert_ffn,
                                     double top_k, double shared, int swiglu, double t, int sp,
                                     double act_bytes, int dropout, double lin_bytes)
{
    double replicated = act_bytes * s * b * h + ts_dropout_mask_bytes(dropout) * s * b * h;
    double copies = top_k + shared;
    double split = copies * (lin_bytes * s * b * h + (swiglu ? 2.0 : 1.0) * act_bytes * s * b
                             * expert_ffn + lin_bytes * s * b * expert_ffn);
    if (sp)
        return (replicated + split) / t;
    return replicated + split / t;
}

/* llm.py layernorm_activation_bytes: 4sbh, split only with SP (Korthikanti et al. §4.1). */
TS_FN double ts_layernorm_activation_bytes(double s, double b, double h, double t, int sp,
                                           double act_bytes)
{
    double ln = 2.0 * act_bytes * s * b * h;
    if (sp)
        return ln / t;
    return ln;
}

/* llm.py layer_input_bytes: what full recomputation keeps, the layer input (Korthikanti et al.
 * §5), split over the TP ranks with sequence parallelism. */
TS_FN double ts_layer_input_bytes(double s, double b, double h, double t, int sp,
                                  double act_bytes)
{
    return sp ? act_bytes * s * b * h / t : act_bytes * s * b * h;
}

/* llm.py named_dots_policy: keep[0..3] = the share of the Q/K/V, output projection, fc1, fc2
 * outputs kept (MaxText remat_policy via jax.checkpoint_policies.save_only_these_names;
 * torchtitan's per-op SAC: every second matmul of a block dropped -- wk, wo, w3). */
TS_FN void ts_named_dots_policy(int recompute, double q_dim, double kv_dim, int swiglu,
                                double *keep)
{
    keep[0] = keep[1] = keep[2] = keep[3] = 1.0;
    if (recompute == TS_RECOMPUTE_OP_SELECTIVE) {
        keep[0] = (q_dim + kv_dim) / (q_dim + 2.0 * kv_dim);
        keep[1] = 0.0;
        keep[2] = swiglu ? 0.5 : 1.0;
    } else if (recompute == TS_RECOMPUTE_DOTS_NO_MLP_IN) {
        keep[2] = 0.0;
    } else if (recompute == TS_RECOMPUTE_DOTS_ATTN) {
        keep[2] = keep[3] = 0.0;
    } else if (recompute == TS_RECOMPUTE_QKV_PROJ) {
        keep[1] = keep[2] = keep[3] = 0.0;
    }
}

/* llm.py named_dots_gemm_redo: the dropped GEMMs' share of attn_gemm (Q/K/V + out proj) and
 * mlp_gemm (fc1 + fc2), by FLOP share. */
TS_FN double ts_named_dots_gemm_redo(double attn_gemm, double mlp_gemm, double q_dim,
                                     double kv_dim, int swiglu, int recompute)
{
    double keep[4];
    double out_share, fc1_share, attn_redo, mlp_redo;
    ts_named_dots_policy(recompute, q_dim, kv_dim, swiglu, keep);
    out_share = q_dim / (2.0 * q_dim + 2.0 * kv_dim);
    fc1_share = swiglu ? 2.0 / 3.0 : 0.5;
    attn_redo = (1.0 - keep[0]) * (1.0 - out_share) + (1.0 - keep[1]) * out_share;
    mlp_redo = (1.0 - keep[2]) * fc1_share + (1.0 - keep[3]) * (1.0 - fc1_share);
    return attn_gemm * attn_redo + mlp_gemm * mlp_redo;
}

/* llm.py named_dots_redo_flops: the dropped GEMMs' FLOPs of one microbatch's forward, whole
 * model (every layer's attention projections, the dense and MoE layers' MLPs). */
TS_FN double ts_named_dots_redo_flops(const double *mdl, double b, double seq, double n_moe,
                                      int recompute)
{
    double h = mdl[TS_MDL_HIDDEN], layers = mdl[TS_MDL_LAYERS];
    double heads = mdl[TS_MDL_HEADS], kv_heads = mdl[TS_MDL_KV_HEADS];
    double head_dim = mdl[TS_MDL_HEAD_DIM];
    int swiglu = mdl[TS_MDL_SWIGLU] > 0.0;
    double attn = layers * ts_attention_projection_flops(b, seq, h, heads, kv_heads, head_dim);
    double mlp = (layers - n_moe) * ts_mlp_flops(b, seq, h, mdl[TS_MDL_FFN_HIDDEN], swiglu)
                 + n_moe * ts_moe_mlp_flops(b, seq, h, mdl[TS_MDL_EXPERT_FFN_HIDDEN],
                                            mdl[TS_MDL_TOP_K], mdl[TS_MDL_SHARED_EXPERTS],
                                            swiglu);
    return ts_named_dots_gemm_redo(attn, mlp, heads * head_dim, kv_heads * head_dim, swiglu,
                                   recompute);
}

/* llm.py recompute_module_redo_flops: the FLOPs the checkpointing recompute modules run again
 * per microbatch, whole model ("mlp": dense MLPs; "moe": router and experts; else
 * "shared_experts": the shared experts). */
TS_FN double ts_recompute_module_redo_flops(const double *mdl, const double *job, double b,
                                            double seq, double n_moe)
{
    double h = mdl[TS_MDL_HIDDEN], layers = mdl[TS_MDL_LAYERS], flops = 0.0;
    int swiglu = mdl[TS_MDL_SWIGLU] > 0.0;
    if (job[TS_JOB_RECOMPUTE_MLP] > 0.0)
        flops += (layers - n_moe) * ts_mlp_flops(b, seq, h, mdl[TS_MDL_FFN_HIDDEN], swiglu);
    if (job[TS_JOB_RECOMPUTE_MOE] > 0.0)
        flops += n_moe * (ts_router_flops(b, seq, h, mdl[TS_MDL_EXPERTS])
                          + ts_moe_mlp_flops(b, seq, h, mdl[TS_MDL_EXPERT_FFN_HIDDEN],
                                             mdl[TS_MDL_TOP_K], mdl[TS_MDL_SHARED_EXPERTS],
                                             swiglu));
    else if (job[TS_JOB_RECOMPUTE_SHARED_EXPERTS] > 0.0)
        flops += n_moe * ts_moe_mlp_flops(b, seq, h, mdl[TS_MDL_EXPERT_FFN_HIDDEN], 0.0,
                                          mdl[TS_MDL_SHARED_EXPERTS], swiglu);
    return flops;
}

/* llm.py named_dots_core_saved: the policy keeps the fused attention's output (op_selective). */
TS_FN int ts_named_dots_core_saved(int recompute, int flash)
{
    return recompute == TS_RECOMPUTE_OP_SELECTIVE && flash;
}

/* llm.py op_selective_extra_bytes: the saved attention output and fp32 log-sum-exp, and with
 * SP over t > 1 ranks the output projection's reduce-scattered output. */
TS_FN double ts_op_selective_extra_bytes(double s, double b, double h, double heads,
                                         double head_dim, double t, int sp, double act_bytes)
{
    double out = (act_bytes * head_dim + 4.0) * s * b * heads / t;
    if (sp && t > 1.0)
        out += act_bytes * s * b * h / t;
    return out;
}

/* llm.py named_dots_tp_replay: the share of a layer pass's TP traffic replayed for the re-run
 * GEMMs (SP: the all-gathers gather_share / 2 each, the reduce-scatters (1 - gather_share) / 2
 * each; else the two all-reduces after out proj and fc2; op_selective: the all-gathers before
 * wk and w3, or the all-reduce after wo). */
TS_FN double ts_named_dots_tp_replay(int recompute, int sp, int swiglu, double gather_share)
{
    double keep[4];
    if (recompute == TS_RECOMPUTE_OP_SELECTIVE)
        return sp ? 0.5 * gather_share * (swiglu ? 2.0 : 1.0) : 0.5;
    ts_named_dots_policy(recompute, 1.0, 1.0, swiglu, keep);
    if (sp)
        return 0.5 * (gather_share * ((1.0 - keep[0]) + (1.0 - keep[2]))
                      + (1.0 - gather_share) * ((1.0 - keep[1]) + (1.0 - keep[3])));
    return 0.5 * ((1.0 - keep[1]) + (1.0 - keep[3]));
}

/* llm.py dots_attention_bytes: Q, K, V (split) and the output projection's output (sbh,
 * replicated without SP) under the "dots" policy, where kept. */
TS_FN double ts_dots_attention_bytes(double s, double b, double h, double heads, double kv_heads,
                                     double head_dim, double t, int sp, double act_bytes,
                                     double keep_qkv, double keep_out)
{
    double q_dim = heads * head_dim;
    double kv_dim = kv_heads * head_dim;
    double replicated = keep_out * act_bytes * s * b * h;
    double split = keep_qkv * act_bytes * s * b * (q_dim + 2.0 * kv_dim);
    if (sp)
        return (replicated + split) / t;
    return replicated + split / t;
}

/* llm.py dots_mlp_bytes: fc1 output (2 ffn for SwiGLU, split) and fc2 output (sbh). */
TS_FN double ts_dots_mlp_bytes(double s, double b, double h, double ffn, int swiglu, double t,
                               int sp, double act_bytes, double keep_fc1, double keep_fc2)
{
    double replicated = keep_fc2 * act_bytes * s * b * h;
    double split = keep_fc1 * (swiglu ? 2.0 : 1.0) * act_bytes * s * b * ffn;
    if (sp)
        return (replicated + split) / t;
    return replicated + split / t;
}

/* llm.py dots_moe_bytes: per routed copy, the dispatched input, fc1 and fc2 outputs. */
TS_FN double ts_dots_moe_bytes(double s, double b, double h, double expert_ffn, double top_k,
                               double shared, int swiglu, double t, double act_bytes,
                               double keep_fc1, double keep_fc2)
{
    double copies = top_k + shared;
    double split = copies * (act_bytes * s * b * h + keep_fc1 * (swiglu ? 2.0 : 1.0) * act_bytes
                             * s * b * expert_ffn + keep_fc2 * act_bytes * s * b * h);
    return split / t;
}

/* llm.py dots_layer_bytes: the layer input plus the linear GEMMs' outputs (JAX
 * checkpoint_dots_with_no_batch_dims, MaxText remat_policy "minimal"). */
TS_FN double ts_dots_layer_bytes(double attention, double block, double s, double b, double h,
                                 double t, int sp, double act_bytes)
{
    return ts_layer_input_bytes(s, b, h, t, sp, act_bytes) + attention + block;
}

/* llm.py expert_copy_activation_bytes: one routed or shared copy's bytes, per TP rank. */
static inline double ts_expert_copy_activation_bytes(double s, double b, double h,
                                                     double expert_ffn, int swiglu, double t,
                                                     double act_bytes, double lin_bytes)
{
    return (lin_bytes * s * b * h + (swiglu ? 2.0 : 1.0) * act_bytes * s * b * expert_ffn
            + lin_bytes * s * b * expert_ffn) / t;
}

/* llm.py recompute_module_savings: bytes per dense / MoE layer that Megatron-Core's recompute
 * modules free under selective recompute ("layernorm": the norm outputs its consumers saved as
 * themselves; "moe_act": the experts' fc2 inputs; "mlp": the dense MLP block; "moe": every
 * routed and shared copy; "shared_experts": the shared copies). flags: layernorm, moe_act,
 * mlp, moe, shared_experts. */
static inline void ts_recompute_module_savings(double s, double b, double h, double ffn,
                                               double expert_ffn, double top_k, double shared,
                                               int swiglu, double t, int sp, double act_bytes,
                                               double lin_bytes, int dropout, const int fl[5],
                                               double out[2])
{
    double sbh = s * b * h;
    double norm_out = sp ? sbh / t : sbh;
    int same = lin_bytes == act_bytes;
    double dense = 0.0, moe = 0.0, fc2_in, copy;
    if (fl[0]) {
        if (same) {
            dense += 2.0 * lin_bytes * norm_out;
            moe += lin_bytes * norm_out;
        }
        moe += act_bytes * norm_out;
    }
    if (fl[2]) {
        dense += ts_mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout,
                                         lin_bytes);
        if (fl[0] && same)
            dense -= lin_bytes * norm_out;
    }
    fc2_in = lin_bytes * s * b * expert_ffn / t;
    copy = ts_expert_copy_activation_bytes(s, b, h, expert_ffn, swiglu, t, act_bytes, lin_bytes);
    if (fl[3]) {
        moe += (top_k + shared) * copy + ts_dropout_mask_bytes(dropout) * norm_out;
    } else {
        if (fl[1] && same)
            moe += (top_k + shared) * fc2_in;
        if (fl[4]) {
            moe += shared * copy;
            if (fl[1] && same)
                moe -= shared * fc2_in;
        }
    }
    out[0] = dense;
    out[1] = moe;
}

/* llm.py recompute_module_redo_bytes: HBM bytes the backward moves to rebuild them. */
static inline void ts_recompute_module_redo_bytes(double s, double b, double h, double ffn,
                                                  double expert_ffn, double top_k, double shared,
                                                  int swiglu, double t, int sp, double act_bytes,
                                                  int dropout, const int fl[5], double out[2])
{
    double sbh = s * b * h;
    double norm_io = 2.0 * act_bytes * (sp ? sbh / t : sbh);
    double act_io = (swiglu ? 3.0 : 2.0) * act_bytes * s * b * expert_ffn / t;
    double dense = 0.0, moe = 0.0;
    if (fl[0]) {
        dense += 2.0 * norm_io;
        moe += 2.0 * norm_io;
    }
    if (fl[2])
        dense += ts_mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout,
                                         act_bytes);
    if (fl[3]) {
        moe += ts_moe_activation_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp,
                                       act_bytes, dropout, act_bytes);
    } else {
        if (fl[1])
            moe += (top_k + shared) * act_io;
        if (fl[4]) {
            moe += shared * ts_expert_copy_activation_bytes(s, b, h, expert_ffn, swiglu, t,
                                                            act_bytes, act_bytes);
            if (fl[1])
                moe -= shared * act_io;
        }
    }
    out[0] = dense;
    out[1] = moe;
}

/* llm.py recompute_module_flags */
static inline void ts_recompute_module_flags(const double *job, int fl[5])
{
    fl[0] = job[TS_JOB_RECOMPUTE_LAYERNORM] > 0.0;
    fl[1] = job[TS_JOB_RECOMPUTE_MOE_ACT] > 0.0;
    fl[2] = job[TS_JOB_RECOMPUTE_MLP] > 0.0;
    fl[3] = job[TS_JOB_RECOMPUTE_MOE] > 0.0;
    fl[4] = job[TS_JOB_RECOMPUTE_SHARED_EXPERTS] > 0.0;
}

/* llm.py layer_activation_bytes: Korthikanti et al. Table 2 forms for a dense layer. */
TS_FN double ts_layer_activation_bytes(double s, double b, double h, double heads,
                                       double kv_heads, double head_dim, double ffn, int swiglu,
                                       double t, int sp, int recompute, int flash,
                                       double act_bytes, int dropout, double lin_bytes)
{
    int store_scores;
    if (recompute == TS_RECOMPUTE_FULL)
        return ts_layer_input_bytes(s, b, h, t, sp, act_bytes);
    if (recompute >= TS_RECOMPUTE_DOTS) {
        double keep[4];
        double extra = 0.0;
        ts_named_dots_policy(recompute, heads * head_dim, kv_heads * head_dim, swiglu, keep);
        if (ts_named_dots_core_saved(recompute, flash))
            extra = ts_op_selective_extra_bytes(s, b, h, heads, head_dim, t, sp, act_bytes);
        return ts_dots_layer_bytes(
            ts_dots_attention_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, keep[0],
                                    keep[1]),
            ts_dots_mlp_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, keep[2], keep[3]),
            s, b, h, t, sp, act_bytes) + extra;
    }
    store_scores = recompute == TS_RECOMPUTE_NONE;
    return ts_attention_activation_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes,
                                         flash, store_scores, dropout, lin_bytes)
           + ts_mlp_activation_bytes(s, b, h, ffn, swiglu, t, sp, act_bytes, dropout, lin_bytes)
           + ts_layernorm_activation_bytes(s, b, h, t, sp, act_bytes);
}

/* llm.py moe_layer_activation_bytes: attention + MoE block + norms. */
TS_FN double ts_moe_layer_activation_bytes(double s, double b, double h, double heads,
                                           double kv_heads, double head_dim, double expert_ffn,
                                           double top_k, double shared, int swiglu, double t,
                                           int sp, int recompute, int flash, double act_bytes,
                                           int dropout, double lin_bytes)
{
    int store_scores;
    if (recompute == TS_RECOMPUTE_FULL)
        return ts_layer_input_bytes(s, b, h, t, sp, act_bytes);
    if (recompute >= TS_RECOMPUTE_DOTS) {
        double keep[4];
        double extra = 0.0;
        ts_named_dots_policy(recompute, heads * head_dim, kv_heads * head_dim, swiglu, keep);
        if (ts_named_dots_core_saved(recompute, flash))
            extra = ts_op_selective_extra_bytes(s, b, h, heads, head_dim, t, sp, act_bytes);
        return ts_dots_layer_bytes(
            ts_dots_attention_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes, keep[0],
                                    keep[1]),
            ts_dots_moe_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, act_bytes, keep[2],
                              keep[3]),
            s, b, h, t, sp, act_bytes) + extra;
    }
    store_scores = recompute == TS_RECOMPUTE_NONE;
    return ts_attention_activation_bytes(s, b, h, heads, kv_heads, head_dim, t, sp, act_bytes,
                                         flash, store_scores, dropout, lin_bytes)
           + ts_moe_activation_bytes(s, b, h, expert_ffn, top_k, shared, swiglu, t, sp, act_bytes,
                                     dropout, lin_bytes)
           + ts_layernorm_activation_bytes(s, b, h, t, sp, act_bytes);
}

/* llm.py logits_memory_bytes: activation-dtype logits + what the cross-entropy keeps beside
 * them (job logits_extra_bytes: Megatron-LM's fp32 copy, or a fused kernel's gradient). */
TS_FN double ts_logits_memory_bytes(double b, double s, double vocab, double t, double act_bytes,
                                    double extra_bytes)
{
    return b * s * vocab / t * (act_bytes + extra_bytes);
}

/* ===== Time on one GPU ==================================================================== */

/* llm.py gemm_efficiency: eff_max * x / (x + x_half). */
TS_FN double ts_gemm_efficiency(const double *sys, double gemm_flops)
{
    if (gemm_flops <= 0.0)
        return sys[TS_SYS_GEMM_EFFICIENCY_MAX];
    return sys[TS_SYS_GEMM_EFFICIENCY_MAX] * gemm_flops / (gemm_flops + sys[TS_SYS_GEMM_HALF_FLOPS]);
}

/* llm.py gemm_time: flops over gemm_count equal GEMMs. */
TS_FN double ts_gemm_time(const double *sys, double flops, double gemm_count)
{
    if (flops <= 0.0)
        return 0.0;
    return flops / (sys[TS_SYS_PEAK_FLOPS] * ts_gemm_efficiency(sys, flops / gemm_count));
}

/* llm.py executed_attention_core_flops: FlashAttention's causal kernels skip half the square
 * (Dao 2023 §3.1.1); unfused attention computes all of it. */
TS_FN double ts_executed_attention_core_flops(double core_flops, int flash)
{
    return flash ? 0.5 * core_flops : core_flops;
}

/* llm.py linear_efficiency: the linear layers' own curve (FP8 in an fp8 job). */
TS_FN double ts_linear_efficiency(const double *sys, double gemm_flops)
{
    if (gemm_flops <= 0.0)
        return sys[TS_SYS_LINEAR_EFFICIENCY_MAX];
    return sys[TS_SYS_LINEAR_EFFICIENCY_MAX] * gemm_flops
           / (gemm_flops + sys[TS_SYS_LINEAR_HALF_FLOPS]);
}

/* llm.py linear_gemm_time: linear layers at linear_peak_flops (TE FP8 te.Linear). */
TS_FN double ts_linear_gemm_time(const double *sys, double flops, double gemm_count)
{
    if (flops <= 0.0)
        return 0.0;
    return flops / (sys[TS_SYS_LINEAR_PEAK_FLOPS] * ts_linear_efficiency(sys, flops / gemm_count));
}

/* llm.py linear_cast_elements_forward: inputs of the FP8 linear layers of one layer. */
TS_FN double ts_linear_cast_elements_forward(double b, double s, double h, double q_dim,
                                             double ffn, double mlp_copies, double t, int sp)
{
    double x_in = sp ? b * s * h / t : b * s * h;
    return (x_in + b * s * q_dim / t) + mlp_copies * (x_in + b * s * ffn / t);
}

/* llm.py linear_cast_elements_backward: output gradients of the FP8 linear layers. */
TS_FN double ts_linear_cast_elements_backward(double b, double s, double h, double q_dim,
                                              double kv_dim, double ffn, int swiglu,
                                              double mlp_copies, double t, int sp)
{
    double x_in = sp ? b * s * h / t : b * s * h;
    double fc1_out = (swiglu ? 2.0 : 1.0) * ffn;
    return (b * s * (q_dim + 2.0 * kv_dim) / t + x_in) + mlp_copies * (b * s * fc1_out / t + x_in);
}

/* llm.py attention_backward_factor: FlashAttention's backward recomputes the scores, 5 matmuls
 * against 2 (Dao 2023, FlashAttention-2 §3.2): 2.5x; unfused 2x. */
TS_FN double ts_attention_backward_factor(int flash)
{
    return flash ? 2.5 : 2.0;
}

/* llm.py attention_sequence_efficiency: kv_len / (kv_len + attention_half_seq) (fit to
 * FlashAttention-3 Fig. 5, Shah et al. 2024). */
TS_FN double ts_attention_sequence_efficiency(const double *sys, double kv_len)
{
    return kv_len / (kv_len + sys[TS_SYS_ATTENTION_HALF_SEQ]);
}

/* llm.py attention_head_dim_efficiency: d / (d + c) relative to the 128-wide heads
 * attention_efficiency is measured at (the softmax exponentials' share, FlashAttention-3 §3). */
TS_FN double ts_attention_head_dim_efficiency(const double *sys, double head_dim)
{
    double c = sys[TS_SYS_ATTENTION_HEAD_DIM_HALF];
    return head_dim * (128.0 + c) / (128.0 * (head_dim + c));
}

/* llm.py attention_kernel_time: fused attention at a fraction of the 16-bit peak. */
TS_FN double ts_attention_kernel_time(const double *sys, double flops, double kv_len,
                                      double head_dim)
{
    return flops / (sys[TS_SYS_PEAK_FLOPS] * sys[TS_SYS_ATTENTION_EFFICIENCY]
                    * ts_attention_sequence_efficiency(sys, kv_len)
                    * ts_attention_head_dim_efficiency(sys, head_dim));
}

/* llm.py attention_core_time: fused kernel at attention_efficiency, or unfused as two batched
 * GEMMs on the GEMM efficiency curve. (The batch kernel inlines this with reciprocals.) */
TS_FN double ts_attention_core_time(const double *sys, double flops, int flash, double kv_len,
                                    double head_dim)
{
    return flash ? ts_attention_kernel_time(sys, flops, kv_len, head_dim)
                 : ts_gemm_time(sys, flops, 2.0);
}

/* llm.py eager_elementwise_bytes: the bytes a layer's forward moves beyond fused kernels
 * when its norms, rotary embedding and SwiGLU run op by op (PyTorch eager); 32, 16 and 4 are
 * llm.py's EAGER_NORM / ROTARY / SWIGLU_EXTRA_BYTES */
TS_FN double ts_eager_elementwise_bytes(double s, double b, double h, double q_dim,
                                        double kv_dim, double ffn, double mlp_copies, int swiglu,
                                        double t, int sp)
{
    double tokens = b * s;
    double norm_width = sp ? h / t : h;
    double swiglu_extra = swiglu ? 4.0 * ffn * mlp_copies / t : 0.0;
    return tokens * (2.0 * 32.0 * norm_width + 16.0 * (q_dim + kv_dim) / t + swiglu_extra);
}

/* llm.py memory_bound_time: bytes over achieved HBM bandwidth (Williams et al. 2009). */
TS_FN double ts_memory_bound_time(const double *sys, double nbytes)
{
    return nbytes / (sys[TS_SYS_HBM_BANDWIDTH] * sys[TS_SYS_MEMORY_EFFICIENCY]);
}

/* llm.py eager_op_time: one eager framework op's kernel streams its bytes, but the host
 * spends host_op_s issuing it, and a GPU that finishes sooner waits (TE PR #1016, #2053). */
static inline double ts_eager_op_time(const ts_ctx *ctx, double nbytes)
{
    double t = nbytes * ctx->inv.inv_stream_hbm, host = ctx->sys[TS_SYS_HOST_OP_S];
    return t > host ? t : host;
}

/* llm.py eager_expert_bias_elements: routed elements one GPU's local experts output per MoE
 * layer and microbatch. */
static inline double ts_eager_expert_bias_elements(double b, double seq, double top_k, double h,
                                                   double split)
{
    return b * seq * top_k * h / split;
}

/* llm.py eager_expert_bias_forward_time: Megatron-Core TEGroupedMLP._apply_bias, forward:
 * b * p and t + b * p per local expert, then the cat and the cast (EXPERT_BIAS_*_BYTES). */
static inline double ts_eager_expert_bias_forward_time(const ts_ctx *ctx, double elements,
                                                       double local_experts)
{
    double per;
    if (elements <= 0.0 || local_experts <= 0.0)
        return 0.0;
    per = elements / local_experts;
    return local_experts * (ts_eager_op_time(ctx, 4.0 * per) + ts_eager_op_time(ctx, 10.0 * per))
           + ts_eager_op_time(ctx, 8.0 * elements) + ts_eager_op_time(ctx, 6.0 * elements);
}

/* llm.py eager_expert_bias_backward_time: the same ops' gradients under autograd. */
static inline double ts_eager_expert_bias_backward_time(const ts_ctx *ctx, double elements,
                                                        double local_experts)
{
    double per, per_expert;
    if (elements <= 0.0 || local_experts <= 0.0)
        return 0.0;
    per = elements / local_experts;
    per_expert = ts_eager_op_time(ctx, 6.0 * per) + 2.0 * ts_eager_op_time(ctx, 8.0 * per)
                 + 2.0 * ts_eager_op_time(ctx, 4.0 * per) + ts_eager_op_time(ctx, 0.0);
    return ts_eager_op_time(ctx, 6.0 * elements) + local_experts * per_expert
           + ts_eager_op_time(ctx, 4.0 * elements) + ts_eager_op_time(ctx, 0.0);
}

/* llm.py gpu_count. */
TS_FN double ts_gpu_count(const double *sys)
{
    return sys[TS_SYS_GPUS];
}

/* ===== Configuration validity ============================================================= */

/* a % b for a >= 0, b >= 1 (Python's and C's % agree there): a mask for a power-of-two b,
 * 32-bit division when both fit (several times faster than 64-bit idiv on common x86). */
static inline int64_t ts_mod(int64_t a, int64_t b)
{
    if ((b & (b - 1)) == 0)
        return a & (b - 1);
    if ((uint64_t)a <= 0xffffffffULL && (uint64_t)b <= 0xffffffffULL)
        return (int64_t)((uint32_t)a % (uint32_t)b);
    return a % b;
}

/* llm.py cost_per_step_usd: GPU-seconds of the step x price of a GPU-second */
TS_FN double ts_cost_per_step_usd(double step, double gpus, double usd_per_gpu_s)
{
    return step * gpus * usd_per_gpu_s;
}

/* llm.py energy_per_step_j */
TS_FN double ts_energy_per_step_j(double step, double gpus, double power_w)
{
    return step * gpus * power_w;
}

/* llm.py tokens_per_unit: tokens / amount, 0 when the amount is not known */
TS_FN double ts_tokens_per_unit(double tokens, double amount)
{
    if (amount > 0.0)
        return tokens / amount;
    return 0.0;
}

/* The block-only values of the model (see ts_llm_inv), with llm.py's expressions. */
TS_FN void ts_llm_invariants(ts_llm_inv *inv, const double *sys, const double *mdl,
                             const double *job)
{
    double h = mdl[TS_MDL_HIDDEN];
    int swiglu = mdl[TS_MDL_SWIGLU] > 0.0;
    double attn_p = ts_attention_params(h, mdl[TS_MDL_HEADS], mdl[TS_MDL_KV_HEADS],
                                        mdl[TS_MDL_HEAD_DIM]);
    inv->heads = (int64_t)mdl[TS_MDL_HEADS];
    inv->kv_heads = (int64_t)mdl[TS_MDL_KV_HEADS];
    inv->global_batch = (int64_t)job[TS_JOB_GLOBAL_BATCH];
    inv->layers = (int64_t)mdl[TS_MDL_LAYERS];
    inv->edge = (int64_t)job[TS_JOB_PIPELINE_EDGE_LAYERS];
    inv->mtp = (int64_t)mdl[TS_MDL_MTP_LAYERS];
    inv->first_n = (int64_t)job[TS_JOB_PIPELINE_FIRST_STAGE_LAYERS];
    inv->last_n = (int64_t)job[TS_JOB_PIPELINE_LAST_STAGE_LAYERS];
    inv->mtp_moe = ts_mtp_moe_blocks(mdl);
    inv->dropout = job[TS_JOB_DROPOUT] > 0.0;
    inv->experts = (int64_t)mdl[TS_MDL_EXPERTS];
    inv->seq = (int64_t)job[TS_JOB_SEQ_LEN];
    inv->hidden = (int64_t)mdl[TS_MDL_HIDDEN];
    inv->ffn = (int64_t)mdl[TS_MDL_FFN_HIDDEN];
    inv->expert_ffn = (int64_t)mdl[TS_MDL_EXPERT_FFN_HIDDEN];
    inv->n_moe = ts_model_moe_layers(mdl);
    inv->model_flops = ts_model_flops_per_sequence(mdl, job[TS_JOB_SEQ_LEN]) * job[TS_JOB_GLOBAL_BATCH];
    inv->dense_layer_params = attn_p + ts_mlp_params(h, mdl[TS_MDL_FFN_HIDDEN], swiglu);
    inv->moe_layer_params = attn_p + h * mdl[TS_MDL_EXPERTS]
                            + mdl[TS_MDL_SHARED_EXPERTS] * ts_mlp_params(h, mdl[TS_MDL_EXPERT_FFN_HIDDEN], swiglu);
    inv->embedding_params = ts_embedding_params(mdl[TS_MDL_VOCAB], h);
    inv->expert_mlp_params = ts_mlp_params(h, mdl[TS_MDL_EXPERT_FFN_HIDDEN], swiglu);
    inv->inv_peak_gemm = 1.0 / (sys[TS_SYS_PEAK_FLOPS] * sys[TS_SYS_GEMM_EFFICIENCY_MAX]);
    inv->gemm_half = sys[TS_SYS_GEMM_HALF_FLOPS];
    inv->inv_peak_attention = 1.0 / (sys[TS_SYS_PEAK_FLOPS] * sys[TS_SYS_ATTENTION_EFFICIENCY]
                                     * ts_attention_head_dim_efficiency(sys, mdl[TS_MDL_HEAD_DIM]));
    inv->inv_hbm = 1.0 / (sys[TS_SYS_HBM_BANDWIDTH] * sys[TS_SYS_MEMORY_EFFICIENCY]);
    /* llm.py stream_memory_efficiency: 0 falls back to memory_efficiency */
    inv->inv_stream_hbm = 1.0 / (sys[TS_SYS_HBM_BANDWIDTH]
                                 * (sys[TS_SYS_STREAM_MEMORY_EFFICIENCY] > 0.0
                                        ? sys[TS_SYS_STREAM_MEMORY_EFFICIENCY]
                                        : sys[TS_SYS_MEMORY_EFFICIENCY]));
    inv->inv_gpus = 1.0 / sys[TS_SYS_GPUS];
    /* llm.py mfu_peak_flops: the rated peak (else peak_flops) */
    inv->inv_gpus_peak = 1.0 / (sys[TS_SYS_GPUS] * (sys[TS_SYS_MFU_PEAK_FLOPS] > 0.0
                                                       ? sys[TS_SYS_MFU_PEAK_FLOPS]
                                                       : sys[TS_SYS_PEAK_FLOPS]));
    /* llm.py cost_per_step_usd / energy_per_step_j / tokens_per_unit, with the per-step factor
     * (the step time) left out: the hot path multiplies by the step or 1 / step */
    inv->usd_per_s = sys[TS_SYS_GPUS] * sys[TS_SYS_USD_PER_GPU_S];
    inv->tokens_per_usd_s = ts_tokens_per_unit(job[TS_JOB_GLOBAL_BATCH] * job[TS_JOB_SEQ_LEN],
                                               inv->usd_per_s);
    inv->tokens_per_j_s = ts_tokens_per_unit(
        job[TS_JOB_GLOBAL_BATCH] * job[TS_JOB_SEQ_LEN],
        ts_energy_per_step_j(1.0, sys[TS_SYS_GPUS], sys[TS_SYS_POWER_W]));
    inv->top_k = mdl[TS_MDL_TOP_K];
    inv->max_route_nodes = mdl[TS_MDL_MAX_ROUTE_NODES];
    inv->inv_peak_linear = 1.0 / (sys[TS_SYS_LINEAR_PEAK_FLOPS] * sys[TS_SYS_LINEAR_EFFICIENCY_MAX]);
    inv->linear_half = sys[TS_SYS_LINEAR_HALF_FLOPS];
    inv->attn_bwd_factor = ts_attention_backward_factor(job[TS_JOB_FLASH_ATTENTION] > 0.0);
    inv->attn_half_over_seq = sys[TS_SYS_ATTENTION_HALF_SEQ] / job[TS_JOB_SEQ_LEN];
    {
        /* llm.py windowed_attention_core's block-only parts (0 share: no windowed layer, or a
         * window spanning the sequence) */
        double window = mdl[TS_MDL_ATTENTION_WINDOW];
        double windowed = ts_windowed_layer_count(mdl[TS_MDL_LAYERS], window,
                                                  mdl[TS_MDL_FULL_ATTENTION_EVERY]);
        int on = job[TS_JOB_FLASH_ATTENTION] > 0.0 && windowed > 0.0
                 && window < job[TS_JOB_SEQ_LEN];
        inv->window_layer_share = on ? windowed / mdl[TS_MDL_LAYERS] : 0.0;
        inv->window_pair_share = ts_window_pair_share(job[TS_JOB_SEQ_LEN], window);
        inv->window = window;
    }
    {
        double attn_lin = ts_attention_linear_params(h, mdl[TS_MDL_HEADS], mdl[TS_MDL_KV_HEADS],
                                                     mdl[TS_MDL_HEAD_DIM]);
        inv->dense_layer_linear_params = attn_lin + ts_mlp_params(h, mdl[TS_MDL_FFN_HIDDEN], swiglu);
        inv->moe_layer_linear_params = attn_lin + mdl[TS_MDL_SHARED_EXPERTS]
                                       * ts_mlp_params(h, mdl[TS_MDL_EXPERT_FFN_HIDDEN], swiglu);
    }
}

/* llm.py gemm_time with gemm_efficiency folded in, for the hot path:
 * flops / (peak * eff_max * g / (g + half)) with g = flops / count
 *   = (flops + count * half) / (peak * eff_max)            (same value to a few ulps) */
static inline double ts_gemm_time_fast(const ts_llm_inv *inv, double flops, double gemm_count)
{
    if (flops <= 0.0)
        return 0.0;
    return (flops + gemm_count * inv->gemm_half) * inv->inv_peak_gemm;
}

/* llm.py linear_gemm_time, folded the same way on the linear layers' curve. */
static inline double ts_linear_time_fast(const ts_llm_inv *inv, double flops, double gemm_count)
{
    if (flops <= 0.0)
        return 0.0;
    return (flops + gemm_count * inv->linear_half) * inv->inv_peak_linear;
}

/* llm.py dp_replicas_error: job.dp_replicas R must be a whole number in [1, dp] dividing
 * dp / ep (ep dividing dp: no MoE parallel folding), under the synchronous job.sync strategy;
 * R = 1 (or 0: ts_dp_replica_count) always passes. Checked before any integer conversion (a
 * hand-written job block). */
static inline int ts_dp_replicas_error(const double *job, int64_t dp, int64_t ep)
{
    double r = job[TS_JOB_DP_REPLICAS];
    if (r == 0.0 || r == 1.0)
        return 0;
    if (!(r >= 1.0 && r <= (double)dp && r == floor(r)))
        return 1;
    if ((int)job[TS_JOB_SYNC_STRATEGY] != TS_SYNC_SYNCHRONOUS || ts_mod(dp, ep) != 0)
        return 1;
    return ts_mod(dp / ep, (int64_t)r) != 0;
}

/* llm.py dp_replica_count: job.dp_replicas, 0 meaning 1 */
static inline double ts_dp_replica_count(const double *job)
{
    return job[TS_JOB_DP_REPLICAS] > 1.0 ? job[TS_JOB_DP_REPLICAS] : 1.0;
}

/* llm.py config_error, checks over the core fields (tp cp pp dp ep mbs vpp schedule sp
 * tp_overlap) in the reference's order: the first failing one's code, else 0. Integer checks in
 * 64 bits. */
TS_FN int ts_core_error(const ts_ctx *ctx, int64_t tp, int64_t cp, int64_t pp, int64_t dp,
                        int64_t ep, int64_t mbs, int64_t vpp, int64_t schedule, int64_t sp,
                        int64_t tp_overlap)
{
    const double *sys = ctx->sys;
    const ts_llm_inv *inv = &ctx->inv;
    int64_t seq, microbatches;
    int reason;
    if (tp < 1)
        return 1;
    if (cp < 1)
        return 2;
    if (pp < 1)
        return 3;
    if (dp < 1)
        return 4;
    if (ep < 1)
        return 5;
    if (mbs < 1)
        return 6;
    if (vpp < 1)
        return 7;
    if (schedule < 0 || schedule >= TS_SCHED_COUNT)
        return 8;
    if (sp < 0 || sp > 1)
        return 12;
    if (tp_overlap < 0 || tp_overlap > 1)
        return 13;
    if ((double)tp * (double)cp * (double)pp * (double)dp != sys[TS_SYS_GPUS])
        return 15;
    if (ts_mod(inv->heads, tp) != 0)
        return 16;
    if (ts_mod(inv->kv_heads, tp) != 0 && ts_mod(tp, inv->kv_heads) != 0)
        return 17;
    if (ts_mod(inv->global_batch, dp * mbs) != 0)
        return 18;
    if (inv->layers + 2 * inv->edge < ts_schedule_layer_divisor((int)schedule, pp, vpp))
        return 19;
    if (ts_explicit_stage_layers_error((int)schedule, pp, vpp, inv->layers, inv->first_n,
                                       inv->last_n))
        return 31; /* llm.py STAGE_LAYERS_ERROR */
    if (ts_mod(dp, ep) != 0 && ts_mod(tp * dp, ep) != 0)
        return 20;
    if (ep > 1 && (inv->experts <= 0 || ts_mod(inv->experts, ep) != 0))
        return 21;
    seq = inv->seq;
    if (cp > 1 && ts_mod(seq, 2 * cp) != 0)
        return 22;
    if (sp == 1 && ts_mod(seq / cp, tp) != 0)
        return 23;
    if (vpp > 1 && schedule != TS_SCHED_INTERLEAVED)
        return 24;
    if (schedule == TS_SCHED_INTERLEAVED && pp > 1 && vpp < 2)
        return 25;
    if (ctx->net.capacity < sys[TS_SYS_GPUS])
        return 26;
    if (ts_mod(inv->hidden, tp) != 0 || ts_mod(inv->ffn, tp) != 0 || ts_mod(inv->expert_ffn, tp) != 0)
        return 27;
    if (ts_dp_replicas_error(ctx->job, dp, ep))
        return 32; /* llm.py DP_REPLICAS_ERROR */
    microbatches = inv->global_batch / (dp * mbs);
    reason = ts_schedule_valid((int)schedule, pp, microbatches, vpp);
    if (reason != 0)
        return 100 + reason;
    return 0;
}

/* llm.py config_error, range checks of the free fields (recompute, zero, order, dp_overlap). */
TS_FN int ts_free_error(int64_t recompute, int64_t zero, int64_t order, int64_t dp_overlap)
{
    if (recompute < 0 || recompute >= TS_RECOMPUTE_COUNT)
        return 9;
    if (zero < 0 || zero > 3)
        return 10;
    if (order < 0 || order >= TS_N_ORDERS)
        return 11;
    if (dp_overlap < 0 || dp_overlap > 1)
        return 14;
    return 0;
}

/* The first failing check of config_error given the core and the free fields' first failures:
 * the checks run in code order, so it is the smaller non-zero code. */
static inline int ts_join_error(int core, int free_)
{
    if (core == 0)
        return free_;
    if (free_ == 0 || core < free_)
        return core;
    return free_;
}

/* llm.py sync_config_error: ZeRO-3 under a non-synchronous job.sync.strategy (code 28);
 * sync settings out of range in the job block (code 29). */
static inline int ts_sync_error(const double *job, int64_t zero)
{
    double strategy = job[TS_JOB_SYNC_STRATEGY];
    double steps = job[TS_JOB_SYNC_INNER_STEPS];
    double fragments = job[TS_JOB_SYNC_FRAGMENTS];
    double overlap = job[TS_JOB_SYNC_OVERLAP_STEPS];
    if (zero == 3 && strategy != TS_SYNC_SYNCHRONOUS)
        return 28;
    if (!(strategy == TS_SYNC_SYNCHRONOUS || strategy == TS_SYNC_DILOCO
          || strategy == TS_SYNC_DELAYED))
        return 29;
    if (strategy == TS_SYNC_DILOCO) { /* the only strategy that reads H, P and tau */
        if (!(steps >= 1.0 && fragments >= 1.0 && fragments <= steps))
            return 29;
        if (!(overlap >= 0.0 && (overlap < steps || overlap == 0.0)))
            return 29;
    }
    return 0;
}

/* llm.py offload_config_error: an activation offload share outside 0..1 or NaN (code 30). */
static inline int ts_offload_error(const double *job)
{
    double share = job[TS_JOB_OFFLOAD_ACTIVATIONS];
    if (!(share >= 0.0 && share <= 1.0))
        return 30;
    return 0;
}

/* llm.py free_sync_error: the free fields' checks, then sync_config_error, then
 * offload_config_error. */
TS_FN int ts_free_sync_error(const double *job, int64_t recompute, int64_t zero, int64_t order,
                             int64_t dp_overlap)
{
    return ts_join_error(ts_join_error(ts_free_error(recompute, zero, order, dp_overlap),
                                       ts_sync_error(job, zero)),
                         ts_offload_error(job));
}

/* llm.py config_error (exact port; codes into CONFIG_ERRORS, >= 100 from schedule_valid).
 * cfg[f * stride] is field f of this configuration. */
TS_FN int ts_config_error(const ts_ctx *ctx, const int32_t *cfg, int64_t stride)
{
    int core = ts_core_error(ctx, cfg[TS_CFG_TP * stride], cfg[TS_CFG_CP * stride],
                             cfg[TS_CFG_PP * stride], cfg[TS_CFG_DP * stride],
                             cfg[TS_CFG_EP * stride], cfg[TS_CFG_MBS * stride],
                             cfg[TS_CFG_VPP * stride], cfg[TS_CFG_SCHEDULE * stride],
                             cfg[TS_CFG_SP * stride], cfg[TS_CFG_TP_OVERLAP * stride]);
    int free_ = ts_free_sync_error(ctx->job, cfg[TS_CFG_RECOMPUTE * stride],
                                   cfg[TS_CFG_ZERO * stride], cfg[TS_CFG_ORDER * stride],
                                   cfg[TS_CFG_DP_OVERLAP * stride]);
    return ts_join_error(core, free_);
}

/* ===== Per-stage times for one microbatch ================================================ */

/* llm.py stage_layer_split: dense and MoE layers among a device's stage_layers, lead of them
 * leading dense layers, the MoE ones spread over the rest in proportion n_moe / (layers -
 * first_dense). */
TS_FN void ts_stage_layer_split(double stage_layers, double lead, double layers,
                                double first_dense, double n_moe, double *dense, double *moe)
{
    double rest = layers - first_dense;
    double m = 0.0;
    if (rest > 0.0)
        m = (stage_layers - lead) * n_moe / rest;
    *moe = m;
    *dense = stage_layers - m;
}

/* llm.py leading_dense_chunks: schedule_chunks, DualPipe's two directions counted as one pass. */
TS_FN double ts_leading_dense_chunks(int schedule, double pp, double vpp)
{
    if (pp <= 1.0 || schedule == TS_SCHED_DUALPIPE)
        return 1.0;
    return (double)ts_schedule_chunks(schedule, (int64_t)vpp);
}

/* llm.py leading_dense_layers: the leading dense layers of the first, busiest middle and last
 * device -- the first device's first chunk, then the next devices' first chunks in order. */
TS_FN void ts_leading_dense_layers(double first_dense, double n_first, double n_mid,
                                   double n_last, double pp, double chunks, int loss_first,
                                   double *lead)
{
    double spill, c_mid, mids;
    lead[0] = lead[1] = lead[2] = 0.0;
    if (first_dense <= 0.0)
        return;
    if (pp <= 1.0) {
        lead[0] = fmin(first_dense, n_first);
        lead[2] = lead[0];
        return;
    }
    lead[0] = fmin(first_dense, n_first / chunks);
    spill = first_dense - lead[0];
    c_mid = n_mid / chunks;
    /* the middle devices: all but device 0 under a V placement, all but the two ends otherwise */
    mids = loss_first ? pp - 1.0 : pp - 2.0;
    if (mids > 0.0)
        lead[1] = fmin(c_mid, fmax(0.0, spill - (mids - 1.0) * c_mid));
    lead[2] = loss_first ? lead[0] : fmin(n_last / chunks, fmax(0.0, spill - mids * c_mid));
}

/* llm.py stage_pass_times: (gemm_f, core_f, mem_f, f, b, w) of one device's layers, plus the
 * embedding on the first stage and the output GEMM + cross-entropy on the last. */
static inline void ts_stage_pass_times(double dense, double moe, double t_proj,
                                       double t_dense_mlp, double t_moe_mlp, double t_core,
                                       double t_mem_dense, double t_mem_moe,
                                       double c_f_dense, double c_f_moe, double c_b_dense,
                                       double c_b_moe, double attn_bwd, double overhead,
                                       int embed, int loss, double t_embed, double t_logits,
                                       double t_ce, double st[6])
{
    double gemm_f = dense * (t_proj + t_dense_mlp) + moe * (t_proj + t_moe_mlp);
    double core_f = (dense + moe) * t_core;
    double mem_plain = dense * t_mem_dense + moe * t_mem_moe;
    double cast_f = dense * c_f_dense + moe * c_f_moe;
    double cast_b = dense * c_b_dense + moe * c_b_moe;
    double mem_f = mem_plain + cast_f;
    double n = dense + moe;
    double f = gemm_f + core_f + mem_f + n * overhead;
    double b = gemm_f + attn_bwd * core_f + 2.0 * mem_plain + cast_b + n * overhead;
    double w = gemm_f;
    if (embed) {
        f += t_embed;
        b += t_embed;
    }
    if (loss) {
        f += t_logits + t_ce;
        b += t_logits + t_ce;
        w += t_logits;
    }
    st[0] = gemm_f;
    st[1] = core_f;
    st[2] = mem_f;
    st[3] = f;
    st[4] = b;
    st[5] = w;
}

/* llm.py tp_layer_comm_time: 2 all-reduces of nbytes, or with SP 2 all-gathers of the linear
 * inputs (gather_nbytes: FP8 under an FP8 recipe) + 2 reduce-scatters of nbytes (Korthikanti et
 * al. §4.2.2; Shoeybi et al. 2019 §3). */
TS_FN double ts_tp_layer_comm_time(const ts_net *net, double gather_nbytes, double nbytes, int sp,
                                   double tp, const ts_group *g_tp)
{
    if (tp <= 1.0)
        return 0.0;
    if (sp) {
        /* reduce_scatter_time is all_gather_time with the same arguments */
        double ag = ts_all_gather_time(net, gather_nbytes, g_tp);
        double rs = gather_nbytes == nbytes ? ag : ts_all_gather_time(net, nbytes, g_tp);
        return 2.0 * (ag + rs);
    }
    return 2.0 * ts_all_reduce_time(net, nbytes, g_tp);
}

/* llm.py overlapped_exposed: max(f C, C - W) + s min((1 - f) C, W) (Wang et al. ASPLOS'23;
 * TE userbuffers num_sm). */
TS_FN double ts_overlapped_exposed(double comm, double window, double exposed_fraction,
                                   double slowdown)
{
    double hidden, a, b;
    if (comm <= 0.0)
        return 0.0;
    hidden = (1.0 - exposed_fraction) * comm;
    a = exposed_fraction * comm;
    b = comm - window;
    return TS_PYMAX(a, b) + slowdown * (window < hidden ? window : hidden);
}

/* llm.py tp_exposed: TP traffic after overlap (TE userbuffers). */
TS_FN double ts_tp_exposed(const double *sys, double comm, double window, int overlap)
{
    if (!overlap)
        return comm;
    return ts_overlapped_exposed(comm, window, sys[TS_SYS_TP_OVERLAP_EXPOSED],
                                 sys[TS_SYS_TP_OVERLAP_SLOWDOWN]);
}

/* llm.py cp_ring_exposed_forward: cp - 1 P2P steps each behind one step of attention (TE
 * AttnFuncWithCPAndKVP2P). */
TS_FN double ts_cp_ring_exposed_forward(const double *sys, double step, double t_attn, double cp)
{
    return (cp - 1.0) * ts_overlapped_exposed(step, t_attn / cp, 0.0,
                                              sys[TS_SYS_CP_OVERLAP_SLOWDOWN]);
}

/* llm.py cp_ring_exposed_backward: K/V onwards and dK/dV back per step, and the last dK/dV hop
 * exposed. */
TS_FN double ts_cp_ring_exposed_backward(const double *sys, double step, double t_attn_bwd,
                                         double cp)
{
    return (cp - 1.0) * ts_overlapped_exposed(2.0 * step, t_attn_bwd / cp, 0.0,
                                              sys[TS_SYS_CP_OVERLAP_SLOWDOWN])
           + step;
}

/* llm.py param_gather_bytes: bytes of the data-parallel weight all-gather of params
   parameters, linear_params of them linear-layer weights at job.linear_param_comm_bytes (FP8
   with --fp8-param-gather: Megatron-Core param_and_grad_buffer.py gathers TE Float8Tensor
   weights' raw bytes) and the rest at param_bytes; *elem: the bytes per element (the mean;
   exactly param_bytes when the two widths agree, exactly the linear width when all are
   linear). */
TS_FN double ts_param_gather_bytes(const double *job, double params, double linear_params,
                                   double *elem)
{
    double param_bytes = job[TS_JOB_PARAM_BYTES];
    double linear_bytes = job[TS_JOB_LINEAR_PARAM_COMM_BYTES];
    double nbytes;
    if (linear_bytes == param_bytes || linear_params <= 0.0) {
        *elem = param_bytes;
        return params * param_bytes;
    }
    if (linear_params >= params) {
        *elem = linear_bytes;
        return params * linear_bytes;
    }
    nbytes = params * param_bytes + linear_params * (linear_bytes - param_bytes);
    *elem = nbytes / params;
    return nbytes;
}

/* llm.py fp8_weight_cache_bytes: TE's FP8 weight (+ transpose) copies, net of the 16-bit
   copy with FP8 parameters (job.fp8_param_gather; spec.pack). */
TS_FN double ts_fp8_weight_cache_bytes(const double *job, double linear_params)
{
    return linear_params * job[TS_JOB_FP8_WEIGHT_CACHE_BYTES];
}

/* llm.py exposed: communication left after overlap with a compute window. */
TS_FN double ts_exposed(double comm, double window, int overlap)
{
    double r;
    if (!overlap)
        return comm;
    r = comm - window;
    return TS_PYMAX(0.0, r);
}

/* llm.py dp_bucket_params: max(dp_bucket_min_params, dp_bucket_params_per_rank x dp_cp)
 * (Megatron-Core's default max(4e7, 1e6 x dp x cp)). */
TS_FN double ts_dp_bucket_params(const double *job, double dp_cp)
{
    double per_rank = job[TS_JOB_DP_BUCKET_PARAMS_PER_RANK] * dp_cp;
    if (per_rank > job[TS_JOB_DP_BUCKET_MIN_PARAMS])
        return per_rank;
    return job[TS_JOB_DP_BUCKET_MIN_PARAMS];
}

/* llm.py dp_last_bucket_share: 1 / (chunks x ceil(params / (chunks x bucket))), the last
 * bucket of the first model chunk; 0 without a bucket limit. */
TS_FN double ts_dp_last_bucket_share(double params, double bucket, double chunks)
{
    double n;
    if (bucket <= 0.0 || params <= 0.0)
        return 0.0;
    if (chunks < 1.0)
        chunks = 1.0;
    n = ceil(params / (chunks * bucket));
    return 1.0 / (chunks * n);
}

/* llm.py bucketed_exposed: ts_overlapped_exposed with f = share over the window's first
 * (1 - share), no slowdown, when overlapped. */
TS_FN double ts_bucketed_exposed(double comm, double window, double share, int overlap)
{
    if (!overlap)
        return comm;
    return ts_overlapped_exposed(comm, window * (1.0 - share), share, 0.0);
}

/* llm.py offload_optimizer_time: ZeRO-Offload (Ren et al., USENIX ATC 2021, §4.1-4.2) */
TS_FN double ts_offload_optimizer_time(const double *sys, const double *job, double shard_params,
                                       double window, int overlap)
{
    double down = shard_params * job[TS_JOB_GRAD_COMM_BYTES] / sys[TS_SYS_HOST_LINK_BANDWIDTH];
    double up = shard_params * job[TS_JOB_PARAM_BYTES] / sys[TS_SYS_HOST_LINK_BANDWIDTH];
    double cpu = shard_params * job[TS_JOB_OPTIMIZER_TRAFFIC_BYTES]
                 / sys[TS_SYS_HOST_MEMORY_BANDWIDTH];
    return ts_exposed(down, window, overlap) + cpu + up;
}

/* llm.py full_recompute_share: all of a device's layers, or with job.recompute_layers N > 0
 * (Megatron's block method) the first N of each of its model chunks. */
TS_FN double ts_full_recompute_share(const double *job, double stage_layers, int schedule,
                                     double pp, double vpp)
{
    double n = job[TS_JOB_RECOMPUTE_LAYERS], per_chunk, chunks = 1.0;
    if (n <= 0.0 || stage_layers <= 0.0)
        return 1.0;
    if (pp > 1.0) /* without a pipeline the schedule and its chunks are moot: one */
        chunks = (double)ts_schedule_chunks(schedule, (int64_t)vpp);
    per_chunk = stage_layers / chunks;
    if (n >= per_chunk)
        return 1.0;
    return n / per_chunk;
}

/* llm.py largest_layer_activation_bytes: the largest layer a stage holds, one microbatch */
TS_FN double ts_largest_layer_activation_bytes(double dense, double moe, double act_dense,
                                               double act_moe)
{
    double largest = 0.0;
    if (dense > 0.0)
        largest = act_dense;
    if (moe > 0.0 && act_moe > largest)
        largest = act_moe;
    return largest;
}

/* llm.py offloaded_activation_memory: Megatron-Core / TE CPU offloading (double buffer);
 * Calculon (Isaev et al., SC'23) _get_mem_cap_reqs */
TS_FN double ts_offloaded_activation_memory(double stage_bytes, double share, double layer_bytes)
{
    if (share > 0.0)
        return stage_bytes * (1.0 - share) + 2.0 * layer_bytes;
    return stage_bytes;
}

/* llm.py offload_transfer_exposed: Calculon's offload overhead, max(0, transfer - compute) */
TS_FN double ts_offload_transfer_exposed(double nbytes, double link_bandwidth, double window)
{
    double x = nbytes / link_bandwidth - window;
    return TS_PYMAX(0.0, x);
}

/* llm.py fsdp_units: one FSDP unit per transformer layer of the device (Zhao et al., VLDB 2023,
 * PyTorch FSDP §3.2-3.3), a whole count, at least 1. */
TS_FN double ts_fsdp_units(double stage_layers)
{
    double u = floor(stage_layers + 0.5);
    return TS_PYMAX(1.0, u);
}

/* llm.py zero3_gather_bytes without keep: the unsharded weights of the ZeRO-3 units in flight
 * (the unit computed and the one prefetched; all of them with a single unit), at their
 * all-gather width (with keep, ts_final takes ts_param_gather_bytes of them all). */
TS_FN double ts_zero3_gather_bytes(const double *job, double params, double linear_params,
                                   double layers)
{
    double units = ts_fsdp_units(layers), elem;
    double in_flight = units > 2.0 ? 2.0 : units;
    return ts_param_gather_bytes(job, params, linear_params, &elem) * in_flight / units;
}

/* llm.py fsdp_exposed: the first unit's all-gather has no compute to hide under (Zhao et al.,
 * VLDB 2023 §3.3: prefetching hides the others). */
TS_FN double ts_fsdp_exposed(double unit_gather, double comm, double window, int overlap)
{
    double r;
    if (!overlap)
        return comm;
    r = comm - window;
    return TS_PYMAX(unit_gather, r);
}

/* ===== Result columns ===================================================================== */

/* llm.py reserve_bytes. */
TS_FN double ts_reserve_bytes(const double *sys)
{
    return sys[TS_SYS_HBM_RESERVE_BYTES];
}

/* llm.py write_invalid: status, infeasible, infinite step, zeros. */
TS_FN int ts_write_invalid(double *out, int64_t os, int code)
{
    int status;
    for (int k = 0; k < TS_N_OUT; k++)
        out[k * os] = 0.0;
    status = (code >= 8 && code <= 14) ? TS_STATUS_BAD_INDEX : TS_STATUS_INVALID_CONFIG;
    out[TS_OUT_STATUS * os] = (double)status;
    out[TS_OUT_STEP_TIME_S * os] = INFINITY;
    return status;
}

/* llm.py guard_finite: a non-finite output or a step time that is not > 0 -> status overflow,
 * zeros, infinite step time (never NaN / Infinity with status ok). */
TS_FN int ts_guard_finite(double *out, int64_t os, int status)
{
    int bad = !(out[TS_OUT_STEP_TIME_S * os] > 0.0);
    for (int k = 0; k < TS_N_OUT; k++) {
        double v = out[k * os];
        if (!(v - v == 0.0))
            bad = 1;
    }
    if (!bad)
        return status;
    for (int k = 0; k < TS_N_OUT; k++)
        out[k * os] = 0.0;
    out[TS_OUT_STATUS * os] = (double)TS_STATUS_OVERFLOW;
    out[TS_OUT_STEP_TIME_S * os] = INFINITY;
    return TS_STATUS_OVERFLOW;
}

/* ===== One configuration, in stages ======================================================= */

/* llm.py evaluate_config, the core row's part: config_error over the core fields and every
 * term that reads no free field (compute, activation and parameter sizes, message sizes),
 * including the backward time and FLOP rate of each recompute value; the activation memory of
 * recompute "none" only (the others: ts_row_act, on first use). */
TS_FN void ts_row_init(const ts_ctx *ctx, const int32_t *cfg, int64_t stride, ts_row *R)
{
    const double *sys = ctx->sys, *mdl = ctx->mdl, *job = ctx->job;
    double tp, cp, pp, dp, ep, mbs, vpp;
    int schedule, sp;
    double h, heads, kv_heads, head_dim, layers, vocab, experts, top_k, expert_ffn, shared, n_moe;
    double ffn, seq, global_batch, act_bytes, comm_bytes, m, s, b, dpx;
    int swiglu, flash;
    double split, proj, core_hw, dense_mlp, routed, expert_mlp;
    double t_proj, t_core, t_dense_mlp, t_moe_mlp, t_expert_mlp, act_dense, act_moe, t_mem_dense, t_mem_moe;
    double eager_dense, eager_moe;
    double overhead, dense_layers, moe_layers, gemm_f, core_f, mem_f, stage_layers, t_logits;
    double n_st[3], d_st[3], m_st[3], lead_st[3], st_t[3][6], t_embed, t_ce, best_t, x;
    double dense_layer_p, moe_layer_p, expert_layer_p, emb_p;
    int loss_first, last_embed, sel, c;
    double c_f_dense, c_f_moe, c_b_dense, c_b_moe, t_bias_f;
    double f_compute, b_compute, w_compute, copies, dense_params, expert_params, linear_params;
    double grad_comm, dp_dense, dp_expert, r_tp, r_split, r_dp_dense, r_dp_expert;
    double hw_per_layer_f, hw_fwd, hw_scale;
    int code;

    code = ts_core_error(ctx, cfg[TS_CFG_TP * stride], cfg[TS_CFG_CP * stride],
                         cfg[TS_CFG_PP * stride], cfg[TS_CFG_DP * stride],
                         cfg[TS_CFG_EP * stride], cfg[TS_CFG_MBS * stride],
                         cfg[TS_CFG_VPP * stride], cfg[TS_CFG_SCHEDULE * stride],
                         cfg[TS_CFG_SP * stride], cfg[TS_CFG_TP_OVERLAP * stride]);
    R->code = code;
    if (code != 0)
        return;

    tp = (double)cfg[TS_CFG_TP * stride];
    cp = (double)cfg[TS_CFG_CP * stride];
    pp = (double)cfg[TS_CFG_PP * stride];
    dp = (double)cfg[TS_CFG_DP * stride];
    ep = (double)cfg[TS_CFG_EP * stride];
    mbs = (double)cfg[TS_CFG_MBS * stride];
    vpp = (double)cfg[TS_CFG_VPP * stride];
    schedule = cfg[TS_CFG_SCHEDULE * stride];
    sp = cfg[TS_CFG_SP * stride] == 1;
    R->schedule = schedule;
    R->sp = sp;
    R->tp_overlap = cfg[TS_CFG_TP_OVERLAP * stride] == 1;
    R->dualpipe = schedule == TS_SCHED_DUALPIPE || schedule == TS_SCHED_DUALPIPE_V;

    h = mdl[TS_MDL_HIDDEN];
    heads = mdl[TS_MDL_HEADS];
    kv_heads = mdl[TS_MDL_KV_HEADS];
    head_dim = mdl[TS_MDL_HEAD_DIM];
    layers = mdl[TS_MDL_LAYERS];
    vocab = mdl[TS_MDL_VOCAB];
    swiglu = mdl[TS_MDL_SWIGLU] > 0.0;
    experts = mdl[TS_MDL_EXPERTS];
    top_k = mdl[TS_MDL_TOP_K];
    expert_ffn = mdl[TS_MDL_EXPERT_FFN_HIDDEN];
    shared = mdl[TS_MDL_SHARED_EXPERTS];
    ffn = mdl[TS_MDL_FFN_HIDDEN];
    n_moe = ctx->inv.n_moe;

    seq = job[TS_JOB_SEQ_LEN];
    global_batch = job[TS_JOB_GLOBAL_BATCH];
    act_bytes = job[TS_JOB_ACTIVATION_BYTES];
    comm_bytes = job[TS_JOB_COMM_BYTES];
    flash = job[TS_JOB_FLASH_ATTENTION] > 0.0;
    m = global_batch / (dp * mbs);
    s = seq / cp;
    b = mbs;
    /* llm.py moe_folded / expert_data_parallel_degree */
    R->fold = fmod(dp, ep) != 0.0;
    dpx = R->fold ? tp * dp / ep : dp / ep;

    /* per-config reciprocals: the hot path multiplies (equal to the reference's divisions to
     * a few ulps) */
    split = tp * cp;
    r_tp = 1.0 / tp;
    r_split = 1.0 / split;

    /* ---- compute per layer, per microbatch, on one GPU ---- */
    proj = ts_attention_projection_flops(b, seq, h, heads, kv_heads, head_dim) * r_split;
    core_hw = ts_executed_attention_core_flops(
        ts_attention_core_flops(b, seq, heads, head_dim) * r_split, flash);
    dense_mlp = ts_mlp_flops(b, seq, h, ffn, swiglu) * r_split;
    t_proj = ts_linear_time_fast(&ctx->inv, proj, 2.0);
    /* attention_core_time; 1 / attention_sequence_efficiency(s) = 1 + half / s with
     * half / s = (half / seq) * cp */
    t_core = flash ? core_hw * ctx->inv.inv_peak_attention
                     * (1.0 + ctx->inv.attn_half_over_seq * cp)
                   : ts_gemm_time_fast(&ctx->inv, core_hw, 2.0);
    if (ctx->inv.window_layer_share > 0.0) {
        /* llm.py windowed_attention_core: the average layer, windowed ones running the band's
         * FLOPs over K/V loops of at most `window` keys */
        double kv = s < ctx->inv.window ? s : ctx->inv.window;
        double core_w = core_hw * ctx->inv.window_pair_share;
        double t_w = ts_attention_kernel_time(ctx->sys, core_w, kv, mdl[TS_MDL_HEAD_DIM]);
        core_hw += ctx->inv.window_layer_share * (core_w - core_hw);
        t_core += ctx->inv.window_layer_share * (t_w - t_core);
    }
    t_dense_mlp = ts_linear_time_fast(&ctx->inv, dense_mlp, 2.0);
    act_dense = ts_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, ffn, swiglu, tp, sp,
                                          TS_RECOMPUTE_NONE, flash, act_bytes,
                                          ctx->inv.dropout, act_bytes);
    eager_dense = eager_moe = 0.0;
    if (job[TS_JOB_EAGER_ELEMENTWISE] != 0.0) {
        /* llm.py row_terms: unfused (eager) element-wise ops */
        double q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
        eager_dense = job[TS_JOB_EAGER_ELEMENTWISE]
                      * ts_eager_elementwise_bytes(s, b, h, q_dim, kv_dim, ffn, 1.0, swiglu, tp,
                                                   sp);
        eager_moe = job[TS_JOB_EAGER_ELEMENTWISE]
                    * ts_eager_elementwise_bytes(s, b, h, q_dim, kv_dim, expert_ffn,
                                                 top_k + shared, swiglu, tp, sp);
    }
    t_mem_dense = act_dense * ctx->inv.inv_hbm; /* memory_bound_time */
    if (eager_dense != 0.0)
        t_mem_dense += eager_dense * ctx->inv.inv_stream_hbm; /* streaming_time */
    if (n_moe > 0.0) {
        routed = ts_router_flops(b, seq, h, experts) * r_split;
        expert_mlp = ts_moe_mlp_flops(b, seq, h, expert_ffn, top_k, shared, swiglu) * r_split;
        t_expert_mlp = ts_linear_time_fast(&ctx->inv, expert_mlp,
                                           ts_expert_gemm_count(job, experts / ep, shared));
        t_moe_mlp = ts_gemm_time_fast(&ctx->inv, routed, 1.0) + t_expert_mlp;
        act_moe = ts_moe_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, expert_ffn,
                                                top_k, shared, swiglu, tp, sp, TS_RECOMPUTE_NONE,
                                                flash, act_bytes, ctx->inv.dropout, act_bytes);
        t_mem_moe = act_moe * ctx->inv.inv_hbm;
        if (eager_moe != 0.0)
            t_mem_moe += eager_moe * ctx->inv.inv_stream_hbm;
    } else {
        /* dense model: every MoE term below is multiplied by 0 MoE layers */
        routed = expert_mlp = t_moe_mlp = t_expert_mlp = act_moe = t_mem_moe = 0.0;
    }
    overhead = sys[TS_SYS_LAYER_OVERHEAD_S];

    /* FP8 casts of the linear layers' inputs and output gradients per layer (llm.py
     * linear_cast_time); a 16-bit job has linear_cast_bytes 0 and the reference's terms are
     * exactly 0 */
    c_f_dense = c_f_moe = c_b_dense = c_b_moe = 0.0;
    if (job[TS_JOB_LINEAR_CAST_BYTES] != 0.0) {
        double cb = job[TS_JOB_LINEAR_CAST_BYTES], q_dim = heads * head_dim;
        double kv_dim = kv_heads * head_dim, copies_moe = top_k + shared;
        c_f_dense = ts_linear_cast_elements_forward(b, s, h, q_dim, ffn, 1.0, tp, sp)
                    * cb * ctx->inv.inv_hbm;
        c_b_dense = ts_linear_cast_elements_backward(b, s, h, q_dim, kv_dim, ffn, swiglu, 1.0,
                                                     tp, sp) * cb * ctx->inv.inv_hbm;
        c_f_moe = ts_linear_cast_elements_forward(b, s, h, q_dim, expert_ffn, copies_moe, tp, sp)
                  * cb * ctx->inv.inv_hbm;
        c_b_moe = ts_linear_cast_elements_backward(b, s, h, q_dim, kv_dim, expert_ffn, swiglu,
                                                   copies_moe, tp, sp) * cb * ctx->inv.inv_hbm;
    }
    /* llm.py row_terms: Megatron-Core's eager expert-bias add rides with the MoE casts */
    t_bias_f = 0.0;
    if (job[TS_JOB_EAGER_EXPERT_BIAS] > 0.0 && n_moe > 0.0) {
        double routed_el = ts_eager_expert_bias_elements(b, seq, top_k, h, split);
        t_bias_f = ts_eager_expert_bias_forward_time(ctx, routed_el, experts / ep);
        c_f_moe += t_bias_f;
        c_b_moe += ts_eager_expert_bias_backward_time(ctx, routed_el, experts / ep);
    }
    /* ---- the pipeline's stages: first (embedding), busiest middle, last (output and loss) ---- */
    ts_pipeline_stage_layers(schedule, (int64_t)pp, (int64_t)vpp, ctx->inv.layers, ctx->inv.edge,
                             ctx->inv.mtp, ctx->inv.first_n, ctx->inv.last_n, &n_st[0],
                             &n_st[1], &n_st[2]);
    loss_first = ts_loss_on_first_device(schedule, (int64_t)pp);
    last_embed = pp <= 1.0;
    t_embed = 2.0 * act_bytes * b * s * h * ctx->inv.inv_hbm; /* embedding_time */
    t_logits = ts_gemm_time_fast(&ctx->inv, ts_logits_flops(b, s, h, vocab) * r_tp, 1.0);
    t_ce = ts_logits_memory_bytes(b, s, vocab, tp, act_bytes, job[TS_JOB_LOGITS_EXTRA_BYTES])
           * ctx->inv.inv_hbm;
    /* MTP blocks: embed, project 2h -> h, and the output head and loss once more each */
    if (ctx->inv.mtp > 0) {
        double mtp = (double)ctx->inv.mtp;
        t_logits = (1.0 + mtp) * t_logits
                   + mtp * ts_linear_time_fast(&ctx->inv, ts_mtp_projection_flops(b, s, h) * r_tp,
                                               1.0);
        t_ce = (1.0 + mtp) * t_ce + mtp * t_embed;
    }
    ts_leading_dense_layers(mdl[TS_MDL_FIRST_DENSE_LAYERS], n_st[0], n_st[1], n_st[2], pp,
                            ts_leading_dense_chunks(schedule, pp, vpp), loss_first, lead_st);
    for (c = 0; c < 3; c++)
        ts_stage_layer_split(n_st[c], lead_st[c], layers, mdl[TS_MDL_FIRST_DENSE_LAYERS], n_moe,
                             &d_st[c], &m_st[c]);
    /* llm.py stage_layer_splits: the MTP blocks on the device holding the loss */
    c = loss_first ? 0 : 2;
    d_st[c] += (double)ctx->inv.mtp - ctx->inv.mtp_moe;
    m_st[c] += ctx->inv.mtp_moe;
    ts_stage_pass_times(d_st[0], m_st[0], t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                        t_mem_moe, c_f_dense, c_f_moe, c_b_dense, c_b_moe,
                        ctx->inv.attn_bwd_factor, overhead, 1, loss_first, t_embed, t_logits, t_ce, st_t[0]);
    ts_stage_pass_times(d_st[1], m_st[1], t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                        t_mem_moe, c_f_dense, c_f_moe, c_b_dense, c_b_moe,
                        ctx->inv.attn_bwd_factor, overhead, 0, 0, t_embed, t_logits, t_ce, st_t[1]);
    ts_stage_pass_times(d_st[2], m_st[2], t_proj, t_dense_mlp, t_moe_mlp, t_core, t_mem_dense,
                        t_mem_moe, c_f_dense, c_f_moe, c_b_dense, c_b_moe,
                        ctx->inv.attn_bwd_factor, overhead, last_embed, 1, t_embed, t_logits, t_ce, st_t[2]);
    /* the slowest stage: the last unless another one's F + B + W is larger */
    sel = 2;
    best_t = st_t[2][3] + st_t[2][4] + st_t[2][5];
    x = st_t[0][3] + st_t[0][4] + st_t[0][5];
    if (x > best_t) {
        sel = 0;
        best_t = x;
    }
    x = st_t[1][3] + st_t[1][4] + st_t[1][5];
    if (x > best_t)
        sel = 1;
    dense_layers = d_st[sel];
    moe_layers = m_st[sel];
    gemm_f = st_t[sel][0];
    core_f = st_t[sel][1];
    mem_f = st_t[sel][2];
    f_compute = st_t[sel][3];
    b_compute = st_t[sel][4];
    w_compute = st_t[sel][5];
    stage_layers = dense_layers + moe_layers;
    R->b_compute[TS_RECOMPUTE_NONE] = b_compute;
    R->full_share = ts_full_recompute_share(job, stage_layers, schedule, pp, vpp);
    R->b_compute[TS_RECOMPUTE_FULL] = b_compute + R->full_share * (gemm_f + core_f + mem_f
                                                                   + stage_layers * overhead);
    R->b_compute[TS_RECOMPUTE_SELECTIVE] = flash ? b_compute : b_compute + core_f;
    R->module_gemm_redo = 0.0;
    R->module_tp_replay = 0.0;
    {
        int fl[5];
        ts_recompute_module_flags(job, fl);
        if (fl[0] || fl[1] || fl[2] || fl[3] || fl[4]) {
            /* llm.py recompute_modules_time: memory-bound redo, the re-run blocks' GEMMs
             * (recompute_module_gemm_time) and FP8 casts (recompute_module_cast_time) */
            double redo[2], gemm = 0.0, cast = 0.0, replay_layers = 0.0;
            double x_in = sp ? b * s * h * r_tp : b * s * h;
            double expert_in = x_in + b * s * expert_ffn * r_tp;
            ts_recompute_module_redo_bytes(s, b, h, ffn, expert_ffn, top_k, shared, swiglu, tp,
                                           sp, act_bytes, ctx->inv.dropout, fl, redo);
            if (fl[2]) {
                gemm += dense_layers * t_dense_mlp;
                cast += dense_layers * (x_in + b * s * ffn * r_tp);
                replay_layers += dense_layers;
            }
            if (fl[3]) {
                gemm += moe_layers * t_moe_mlp;
                cast += moe_layers * (top_k + shared) * expert_in;
                replay_layers += moe_layers;
            } else if (fl[4] && moe_layers > 0.0) {
                gemm += moe_layers
                        * ts_linear_time_fast(&ctx->inv,
                                              ts_moe_mlp_flops(b, seq, h, expert_ffn, 0.0, shared,
                                                               swiglu) * r_split,
                                              2.0 * shared);
                cast += moe_layers * shared * expert_in;
            }
            R->b_compute[TS_RECOMPUTE_SELECTIVE] += (dense_layers * redo[0]
                                                     + moe_layers * redo[1]) * ctx->inv.inv_hbm
                                                    + gemm
                                                    + cast * job[TS_JOB_LINEAR_CAST_BYTES]
                                                      * ctx->inv.inv_hbm;
            /* the re-run MoE block adds its experts' bias again */
            if (fl[3])
                R->b_compute[TS_RECOMPUTE_SELECTIVE] += moe_layers * t_bias_f;
            R->module_gemm_redo = gemm;
            /* recompute_module_tp_replay: 0 where nothing is re-run (a stage may hold no
             * transformer layer at all) */
            R->module_tp_replay = replay_layers > 0.0 ? 0.5 * replay_layers / stage_layers : 0.0;
        }
    }
    /* llm.py dots_recompute_time: the memory-bound kernels and the attention core, no GEMM */
    R->b_compute[TS_RECOMPUTE_DOTS] = b_compute + (core_f + mem_f + 0.0);
    {
        /* the named-dot subsets also re-run the GEMMs they drop (llm.py named_dots_gemm_redo
         * of the stage's attention and MLP GEMM times) */
        double attn_gemm_f = stage_layers * t_proj;
        double mlp_gemm_f = dense_layers * t_dense_mlp + moe_layers * t_expert_mlp;
        double q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
        for (c = 0; c <= TS_RECOMPUTE_DOTS; c++)
            R->gemm_redo[c] = 0.0;
        for (c = TS_RECOMPUTE_DOTS + 1; c < TS_RECOMPUTE_COUNT; c++) {
            R->gemm_redo[c] = ts_named_dots_gemm_redo(attn_gemm_f, mlp_gemm_f, q_dim, kv_dim,
                                                      swiglu, c);
            /* op_selective keeps the attention output: no core re-run (llm.py
             * named_dots_core_saved) */
            R->b_compute[c] = b_compute + ((ts_named_dots_core_saved(c, flash) ? 0.0 : core_f)
                                           + mem_f + R->gemm_redo[c]);
        }
    }

    /* ---- message sizes of the parallel dimensions ---- */
    R->tp_bytes = b * s * h * comm_bytes;
    /* llm.py tp_gather_bytes, tp_gather_share: SP's all-gathers move the linear inputs, FP8
     * under an FP8 recipe that gathers quantized (job.tp_gather_bytes; 0: comm_bytes) */
    {
        double gather = job[TS_JOB_TP_GATHER_BYTES];
        if (gather <= 0.0 || gather > comm_bytes)
            gather = comm_bytes;
        R->tp_gather_bytes = b * s * h * gather;
        R->tp_gather_share = gather + comm_bytes <= 0.0 ? 0.5 : gather / (gather + comm_bytes);
        /* llm.py tp_sequence_copy_bytes: the chunk + cat copies of a [batch, seq, hidden]
         * stack's SP collectives (job.tp_sequence_copy), one layer's forward and backward,
         * as streaming time; with the stack's overlap (AsyncTP) only the backward's two
         * reduce-scatters copy */
        R->tp_copy_f = R->tp_copy_b = 0.0;
        if (tp > 1.0 && sp && job[TS_JOB_TP_SEQUENCE_COPY] > 0.0) {
            double scatter = 4.0 * R->tp_bytes;
            if (R->tp_overlap) {
                R->tp_copy_b = scatter * ctx->inv.inv_stream_hbm;
            } else {
                R->tp_copy_f = (4.0 * R->tp_gather_bytes + scatter) * ctx->inv.inv_stream_hbm;
                R->tp_copy_b = R->tp_copy_f;
            }
        }
    }
    /* context parallelism: ring exchange of K and V (Liu et al. 2023) */
    {
        double kv_local = kv_heads >= tp ? kv_heads * r_tp : 1.0;
        R->kv_chunk = 2.0 * b * s * kv_local * head_dim * comm_bytes;
    }
    /* expert parallelism: dispatch + combine (Lepikhin et al. 2020, GShard §2) */
    R->has_ep_comm = moe_layers > 0.0 && ep > 1.0;
    {
        /* folded: every rank dispatches its 1 / tp share (llm.py
         * folded_moe_all_to_all_pair_time), without SP then all-gathering the output */
        double tokens = (sp || R->fold) ? b * s * r_tp : b * s;
        double copies_bytes = tokens * top_k * h; /* llm.py moe_all_to_all_pair_time */
        R->a2a_dispatch_bytes = copies_bytes * job[TS_JOB_DISPATCH_BYTES];
        R->a2a_combine_bytes = copies_bytes * job[TS_JOB_COMBINE_BYTES];
        R->fold_gather_bytes = R->fold && !sp ? b * s * h * comm_bytes : 0.0;
    }
    R->pp_bytes = b * s * h * comm_bytes * r_tp;
    /* llm.py order_terms: the compute that hides a steady-state boundary transfer (the row's,
     * before recompute) */
    R->pp_hide = ts_pipeline_hide_window(f_compute, b_compute, w_compute,
                                         (double)ts_schedule_chunks(schedule, (int64_t)vpp));

    /* ---- parameters per GPU of each stage (llm.py stage_params); the largest stage's drive the
     * data-parallel traffic and the optimizer step ---- */
    copies = ts_parameter_copies(schedule);
    dense_layer_p = ctx->inv.dense_layer_params;
    moe_layer_p = ctx->inv.moe_layer_params;
    expert_layer_p = (experts / ep) * ctx->inv.expert_mlp_params;
    emb_p = ctx->inv.embedding_params;
    for (c = 0; c < 3; c++) {
        int embed = c == 0 || (c == 2 && last_embed);
        int loss = c == 2 || (c == 0 && loss_first);
        double d = d_st[c] * dense_layer_p + m_st[c] * moe_layer_p;
        if (embed)
            d += emb_p;
        if (loss) {
            d += emb_p;
            /* llm.py mtp_stage_params: the blocks' projections and norms, and the embedding */
            if (ctx->inv.mtp > 0)
                d += (double)ctx->inv.mtp * ts_mtp_block_params(h) + (embed ? 0.0 : emb_p);
        }
        R->st_dparams[c] = d * r_tp * copies;
        /* expert TP: the attention's, or 1 when folded (llm.py expert_tp_degree) */
        R->st_eparams[c] = m_st[c] > 0.0
            ? m_st[c] * expert_layer_p * (R->fold ? 1.0 : r_tp) * copies : 0.0;
        R->st_lparams[c] = (d_st[c] * ctx->inv.dense_layer_linear_params
                            + m_st[c] * ctx->inv.moe_layer_linear_params) * r_tp * copies;
        R->st_dense[c] = d_st[c];
        R->st_moe[c] = m_st[c];
        R->st_gather_d[c] = ts_zero3_gather_bytes(job, R->st_dparams[c], R->st_lparams[c],
                                                  d_st[c] + m_st[c]);
        R->st_gather_e[c] = ts_zero3_gather_bytes(job, R->st_eparams[c], R->st_eparams[c],
                                                  d_st[c] + m_st[c]);
    }
    dense_params = R->st_dparams[2];
    expert_params = R->st_eparams[2];
    linear_params = R->st_lparams[2];
    if (R->st_dparams[0] + R->st_eparams[0] > dense_params + expert_params) {
        dense_params = R->st_dparams[0];
        expert_params = R->st_eparams[0];
        linear_params = R->st_lparams[0];
    }
    if (R->st_dparams[1] + R->st_eparams[1] > dense_params + expert_params) {
        dense_params = R->st_dparams[1];
        expert_params = R->st_eparams[1];
        linear_params = R->st_lparams[1];
    }

    /* ---- data parallelism: message sizes (the weights': llm.py param_gather_bytes, the
     * experts all linear) ---- */
    grad_comm = job[TS_JOB_GRAD_COMM_BYTES];
    /* ZeRO's shard groups: all the data-parallel ranks, or 1 / job.dp_replicas of them
     * (llm.py finish_config) */
    dp_dense = cp * dp / ts_dp_replica_count(job);
    dp_expert = cp * dpx / ts_dp_replica_count(job);
    R->ar_dense_bytes = dense_params * grad_comm;
    R->ar_expert_bytes = expert_params * grad_comm;
    R->ag_dense_bytes = ts_param_gather_bytes(job, dense_params, linear_params, &R->e_ag_dense);
    R->ag_expert_bytes = ts_param_gather_bytes(job, expert_params, expert_params,
                                               &R->e_ag_expert);

    /* ---- optimizer step ---- */
    r_dp_dense = 1.0 / dp_dense;
    r_dp_expert = 1.0 / dp_expert;
    R->optimizer[0] = (dense_params + expert_params) * job[TS_JOB_OPTIMIZER_TRAFFIC_BYTES]
                      * ctx->inv.inv_hbm;
    R->optimizer[1] = (dense_params * r_dp_dense + expert_params * r_dp_expert)
                      * job[TS_JOB_OPTIMIZER_TRAFFIC_BYTES] * ctx->inv.inv_hbm;
    R->opt_params[0] = dense_params + expert_params;
    R->opt_params[1] = dense_params * r_dp_dense + expert_params * r_dp_expert;

    /* ---- activation memory: recompute "none" here (its per-layer sizes are the ones the
     * memory-bound time above reads); the other choices on first use (ts_row_act) ---- */
    /* llm.py stage_activations: ranks 0, 1 and pp-1 (0 when the first device holds the loss) */
    R->st_inflight[0] = ts_inflight_activations_rank(schedule, (int64_t)pp, (int64_t)m,
                                                     (int64_t)vpp, 0);
    R->st_inflight[1] = ts_inflight_activations_rank(schedule, (int64_t)pp, (int64_t)m,
                                                     (int64_t)vpp, 1);
    R->st_inflight[2] = ts_inflight_activations_rank(schedule, (int64_t)pp, (int64_t)m,
                                                     (int64_t)vpp,
                                                     loss_first ? 0 : (int64_t)pp - 1);
    if (job[TS_JOB_LINEAR_INPUT_BYTES] == act_bytes) {
        /* the stored sizes are the 16-bit ones the memory-bound time read */
        for (c = 0; c < 3; c++)
            R->mem_act[TS_RECOMPUTE_NONE][c] = (d_st[c] * act_dense + m_st[c] * act_moe)
                                               * R->st_inflight[c];
        R->act_layer[TS_RECOMPUTE_NONE][0] = act_dense;
        R->act_layer[TS_RECOMPUTE_NONE][1] = act_moe;
        R->act_have = 1 << TS_RECOMPUTE_NONE;
    } else {
        R->act_have = 0; /* FP8-saved linear inputs: ts_row_act on first use */
    }
    R->rebuild[0] = 0.0; /* ts_row_act sets them with full recompute */
    R->rebuild[1] = 0.0;
    R->mem_have = 0; /* ts_final fills a ZeRO stage's state memory on first use */
    R->mem_logits = ts_logits_memory_bytes(b, s, vocab, tp, act_bytes,
                                           job[TS_JOB_LOGITS_EXTRA_BYTES]);
    /* every MTP block keeps its logits and its projection's 2h input (llm.py
     * mtp_projection_input_bytes) */
    if (ctx->inv.mtp > 0)
        R->mem_logits = (1.0 + (double)ctx->inv.mtp) * R->mem_logits
                        + (double)ctx->inv.mtp
                              * ts_mtp_projection_input_bytes(b, s, h, tp, sp, act_bytes);
    R->st_logits[0] = loss_first ? R->mem_logits : 0.0;
    R->st_logits[1] = 0.0;
    R->st_logits[2] = R->mem_logits;

    /* ---- FLOP rates per recompute choice ---- */
    hw_per_layer_f = (proj + core_hw) * split;
    hw_fwd = (layers - n_moe + (double)ctx->inv.mtp - ctx->inv.mtp_moe)
                 * (hw_per_layer_f + dense_mlp * split)
             + (n_moe + ctx->inv.mtp_moe) * (hw_per_layer_f + (routed + expert_mlp) * split)
             + ts_output_head_flops(mdl, b, seq);
    hw_scale = global_batch / b;
    {
        /* FlashAttention's backward recomputes the scores: + 0.5 x the executed core; the
         * attention cores of the model's layers and its MTP blocks (llm.py attention_blocks) */
        double blocks = layers + (double)ctx->inv.mtp;
        double bwd_extra = (ctx->inv.attn_bwd_factor - 2.0) * blocks * core_hw * split;
        R->hw_flops[TS_RECOMPUTE_NONE] = (3.0 * hw_fwd + bwd_extra + 0.0) * hw_scale;
        R->hw_flops[TS_RECOMPUTE_FULL] = (3.0 * hw_fwd + bwd_extra
                                          + R->full_share
                                            * (hw_fwd - ts_output_head_flops(mdl, b, seq)))
                                         * hw_scale;
        R->hw_flops[TS_RECOMPUTE_SELECTIVE] = (3.0 * hw_fwd + bwd_extra
                                               + ((flash ? 0.0 : blocks * core_hw * split)
                                                  + ts_recompute_module_redo_flops(mdl, job, b,
                                                                                   seq, n_moe)))
                                              * hw_scale;
        R->hw_flops[TS_RECOMPUTE_DOTS] = (3.0 * hw_fwd + bwd_extra + blocks * core_hw * split)
                                         * hw_scale;
        for (c = TS_RECOMPUTE_DOTS + 1; c < TS_RECOMPUTE_COUNT; c++)
            R->hw_flops[c] = (3.0 * hw_fwd + bwd_extra
                              + ((ts_named_dots_core_saved(c, flash) ? 0.0
                                                                      : blocks * core_hw * split)
                                 + ts_named_dots_redo_flops(mdl, b, seq, n_moe, c)))
                             * hw_scale;
    }

    R->tp = tp;
    R->cp = cp;
    R->pp = pp;
    R->dp = dp;
    R->ep = ep;
    R->vpp = vpp;
    R->m = m;
    R->b = b;
    R->dpx = dpx;
    R->t_core = t_core;
    R->t_core_bwd = ctx->inv.attn_bwd_factor * t_core;
    /* one ring step's attention, forward and backward (cp_ring_exposed_*'s t_attn / cp; the
     * reciprocal of cp from r_split, equal to a few ulps) */
    if (cp > 1.0) {
        double r_cp = r_split * tp;
        R->cp_attn_step_f = t_core * r_cp;
        R->cp_attn_step_b = R->t_core_bwd * r_cp;
    } else {
        R->cp_attn_step_f = R->cp_attn_step_b = 0.0;
    }
    R->gemm_f = gemm_f;
    R->stage_layers = stage_layers;
    R->fsdp_units = ts_fsdp_units(stage_layers);
    R->f_compute = f_compute;
    R->w_compute = w_compute;
    R->moe_layers = moe_layers;
    R->dense_layers = dense_layers;
    R->dense_params = dense_params;
    R->expert_params = expert_params;
    R->dp_dense = dp_dense;
    R->dp_expert = dp_expert;
    /* llm.py finish_config: the last gradient bucket's share (dp_last_bucket_share) */
    R->dp_last_share = ts_dp_last_bucket_share(
        dense_params + expert_params, ts_dp_bucket_params(job, cp * dp),
        pp > 1.0 ? (double)ts_schedule_chunks(schedule, (int64_t)vpp) : 1.0);
    R->r_dp_dense = r_dp_dense;
    R->r_dp_expert = r_dp_expert;
}

/* llm.py evaluate_config's activation memory for a recompute choice other than "none"
 * (layer_activation_bytes and moe_layer_activation_bytes of that choice, times the stage's
 * layers and inflight_activations), from the row's own values: ts_row_init's expressions with
 * the same inputs, so the same bits whenever it is computed. */
TS_FN void ts_row_act(const ts_ctx *ctx, ts_row *R, int rc)
{
    const double *mdl = ctx->mdl, *job = ctx->job;
    double h = mdl[TS_MDL_HIDDEN], heads = mdl[TS_MDL_HEADS], kv_heads = mdl[TS_MDL_KV_HEADS];
    double head_dim = mdl[TS_MDL_HEAD_DIM], ffn = mdl[TS_MDL_FFN_HIDDEN];
    double act_bytes = job[TS_JOB_ACTIVATION_BYTES], lin_bytes = job[TS_JOB_LINEAR_INPUT_BYTES];
    double s = job[TS_JOB_SEQ_LEN] / R->cp, b = R->b, tp = R->tp;
    int swiglu = mdl[TS_MDL_SWIGLU] > 0.0, flash = job[TS_JOB_FLASH_ATTENTION] > 0.0;
    int sp = R->sp;
    double act_dense_r, act_moe_r;
    act_dense_r = ts_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim, ffn, swiglu, tp,
                                            sp, rc, flash, act_bytes, ctx->inv.dropout,
                                            lin_bytes);
    act_moe_r = ctx->inv.n_moe > 0.0
                ? ts_moe_layer_activation_bytes(s, b, h, heads, kv_heads, head_dim,
                                                mdl[TS_MDL_EXPERT_FFN_HIDDEN], mdl[TS_MDL_TOP_K],
                                                mdl[TS_MDL_SHARED_EXPERTS], swiglu, tp, sp, rc,
                                                flash, act_bytes, ctx->inv.dropout, lin_bytes)
                : 0.0;
    if (rc == TS_RECOMPUTE_SELECTIVE) {
        /* llm.py layer_activations: less what the recompute modules drop */
        double saved[2];
        int fl[5];
        ts_recompute_module_flags(job, fl);
        if (fl[0] || fl[1] || fl[2] || fl[3] || fl[4]) { /* else the reference subtracts 0 */
            ts_recompute_module_savings(s, b, h, ffn, mdl[TS_MDL_EXPERT_FFN_HIDDEN],
                                        mdl[TS_MDL_TOP_K], mdl[TS_MDL_SHARED_EXPERTS], swiglu,
                                        tp, sp, act_bytes, lin_bytes, ctx->inv.dropout, fl,
                                        saved);
            act_dense_r -= saved[0];
            if (ctx->inv.n_moe > 0.0) /* a dense model's MoE bytes stay 0, as computed above */
                act_moe_r -= saved[1];
        }
    }
    if (rc == TS_RECOMPUTE_FULL) {
        if (!(R->act_have >> TS_RECOMPUTE_NONE & 1))
            ts_row_act(ctx, R, TS_RECOMPUTE_NONE);
        if (R->full_share < 1.0) {
            /* llm.py recompute_terms: the layers block recompute leaves plain keep everything */
            double fs = R->full_share;
            act_dense_r = fs * act_dense_r + (1.0 - fs) * R->act_layer[TS_RECOMPUTE_NONE][0];
            act_moe_r = fs * act_moe_r + (1.0 - fs) * R->act_layer[TS_RECOMPUTE_NONE][1];
            R->rebuild[0] = 0.0;
            R->rebuild[1] = 0.0;
        } else {
            /* llm.py recompute_terms: the layer the backward rebuilds (recompute_working_set) */
            R->rebuild[0] = R->act_layer[TS_RECOMPUTE_NONE][0] - act_dense_r;
            R->rebuild[1] = R->act_layer[TS_RECOMPUTE_NONE][1] - act_moe_r;
        }
    }
    for (int c = 0; c < 3; c++)
        R->mem_act[rc][c] = (R->st_dense[c] * act_dense_r + R->st_moe[c] * act_moe_r)
                            * R->st_inflight[c];
    R->act_layer[rc][0] = act_dense_r;
    R->act_layer[rc][1] = act_moe_r;
    R->act_have |= 1 << rc;
}

/* llm.py folded_ep_groups: out[0..3] the EP group (n_a, s_a, n_b, s_b), out[4..7] its
 * expert-data-parallel complement in the TP x DP ranks. */
TS_FN void ts_folded_ep_groups(double tp, double s_tp, double dp, double s_dp, double ep,
                               double out[8])
{
    double n_in, s_in, n_out, s_out, g, e_out;
    int64_t a, b2, r;
    if (s_tp <= s_dp) {
        n_in = tp; s_in = s_tp; n_out = dp; s_out = s_dp;
    } else {
        n_in = dp; s_in = s_dp; n_out = tp; s_out = s_tp;
    }
    a = (int64_t)n_in; /* llm.py whole_gcd */
    b2 = (int64_t)ep;
    while (b2 != 0) {
        r = a % b2;
        a = b2;
        b2 = r;
    }
    g = (double)a;
    e_out = ep / g;
    out[0] = g;
    out[1] = s_in;
    out[2] = e_out;
    out[3] = s_out;
    out[4] = n_in / g;
    out[5] = s_in * g;
    out[6] = n_out / e_out;
    out[7] = s_out * e_out;
}

/* llm.py order_terms' strides: the attention's grid tp x cp x dp x pp when folded. */
TS_FN void ts_row_strides(const ts_row *R, const int8_t *perm, double strides[TS_N_DIMS])
{
    if (R->fold)
        ts_placement_strides(perm, R->tp, R->cp, 1.0, R->dp, R->pp, strides);
    else
        ts_placement_strides(perm, R->tp, R->cp, R->ep, R->dpx, R->pp, strides);
}

/* llm.py evaluate_config, the placement order's part: the strides of every dimension, the
 * communication groups and the per-pass communication times of tp, cp, ep and pp. */
TS_FN void ts_ord_init(const ts_ctx *ctx, const ts_row *R, int order, ts_ord *O)
{
    const ts_net *net = &ctx->net;
    double strides[TS_N_DIMS];
    int8_t perm_local[TS_N_DIMS];
    const int8_t *perm;
    double tp = R->tp, cp = R->cp, pp = R->pp, ep = R->ep;
    ts_group g;

    if (ctx->orders) {
        perm = ctx->orders[order];
    } else {
        ts_order_permutation(order, perm_local);
        perm = perm_local;
    }
    ts_row_strides(R, perm, strides);

    /* ---- tensor parallelism ---- */
    O->tp_pass = 0.0;
    if (tp > 1.0) { /* else tp_layer_comm_time is 0 without looking at the group */
        ts_group_init1(&g, net, tp, strides[TS_DIM_TP]);
        O->tp_pass = R->stage_layers * ts_tp_layer_comm_time(net, R->tp_gather_bytes,
                                                             R->tp_bytes, R->sp, tp, &g);
    } else {
        O->tp_pass = R->stage_layers * 0.0;
    }

    /* ---- context parallelism: one ring step per peer ---- */
    O->cp_step = 0.0;
    if (cp > 1.0) {
        ts_group_init1(&g, net, cp, strides[TS_DIM_CP]);
        O->cp_step = ts_p2p_time(net, R->kv_chunk, &g);
    }

    /* ---- expert parallelism: all-to-all per MoE layer ---- */
    O->ep_pass = 0.0;
    if (R->has_ep_comm) {
        double a2a;
        if (R->fold) {
            double fg[8];
            ts_folded_ep_groups(tp, strides[TS_DIM_TP], R->dp, strides[TS_DIM_DP], ep, fg);
            ts_group_init(&g, net, fg[0], fg[1], fg[2], fg[3], 1.0, 1.0);
        } else {
            ts_group_init1(&g, net, ep, strides[TS_DIM_EP]);
        }
        /* moe_all_to_all_pair_time: dispatch + combine (forward, and backward likewise) */
        a2a = ts_routed_all_to_all_pair_time(net, R->a2a_dispatch_bytes, R->a2a_combine_bytes,
                                             ctx->inv.top_k, ctx->inv.max_route_nodes, &g);
        if (R->fold_gather_bytes > 0.0) {
            ts_group_init1(&g, net, tp, strides[TS_DIM_TP]);
            a2a += ts_all_gather_time(net, R->fold_gather_bytes, &g);
        }
        O->ep_pass = R->moe_layers * a2a;
    }

    /* ---- pipeline: stage-boundary transfers ---- */
    O->pp_comm = 0.0;
    if (pp > 1.0) {
        ts_group_init1(&g, net, pp, strides[TS_DIM_PP]);
        double tr[3];
        ts_pipeline_boundary_transfers(net, R->pp_bytes, pp, strides[TS_DIM_PP], tr);
        O->pp_comm = ts_pipeline_comm_time(R->schedule, pp, R->vpp, R->m, tr[0], tr[1], tr[2],
                                           R->pp_hide);
    }

    O->order = order;
    O->have_ar = 0;
    O->have_ag = 0;
    O->have_ag3 = 0;
    /* set by ts_final before it reads them (have_ar / have_ag / have_ag3) */
    O->ar = O->rs = O->ag = O->rs3 = O->ag3 = 0.0;
    ts_ord_dp_groups_at(ctx, R, O, strides);
}

/* The data-parallel groups of the order O->order (ts_ord_init's last part; ts_final calls it
 * when a ts_ord copied from a memo lacks a collective). */
TS_FN void ts_ord_dp_groups(const ts_ctx *ctx, const ts_row *R, ts_ord *O)
{
    double strides[TS_N_DIMS];
    int8_t perm_local[TS_N_DIMS];
    const int8_t *perm;
    if (ctx->orders) {
        perm = ctx->orders[O->order];
    } else {
        ts_order_permutation(O->order, perm_local);
        perm = perm_local;
    }
    ts_row_strides(R, perm, strides);
    ts_ord_dp_groups_at(ctx, R, O, strides);
}

/* ts_ord_dp_groups for given strides. */
TS_FN void ts_ord_dp_groups_at(const ts_ctx *ctx, const ts_row *R, ts_ord *O,
                               const double strides[TS_N_DIMS])
{
    const ts_net *net = &ctx->net;
    double cp = R->cp, ep = R->ep, dpx = R->dpx, r = ts_dp_replica_count(ctx->job);
    if (R->fold) { /* llm.py data_parallel_comm, folded */
        double fg[8];
        ts_folded_ep_groups(R->tp, strides[TS_DIM_TP], R->dp, strides[TS_DIM_DP], ep, fg);
        ts_group_init(&O->g_dp_dense, net, cp, strides[TS_DIM_CP], 1.0, strides[TS_DIM_EP],
                      R->dp, strides[TS_DIM_DP]);
        if (ctx->inv.experts > 0) {
            ts_group_init(&O->g_dp_expert, net, cp, strides[TS_DIM_CP], fg[4], fg[5], fg[6],
                          fg[7]);
        } else {
            O->g_dp_expert.n = 1.0;
            O->g_dp_expert.top = -1;
            O->g_dp_expert.crossings = 0;
        }
        O->groups_ok = 1;
        return;
    }
    ts_group_init(&O->g_dp_dense, net, cp, strides[TS_DIM_CP], ep, strides[TS_DIM_EP], dpx,
                  strides[TS_DIM_DP]);
    if (r != 1.0) {
        /* llm.py dp_shard_groups / dp_replica_group: the inner dpx / R data-parallel ranks
         * shard, the outer R replicate (unfolded layouts only: ts_dp_replicas_error) */
        ts_group_init(&O->g_dps_dense, net, cp, strides[TS_DIM_CP], ep, strides[TS_DIM_EP],
                      dpx / r, strides[TS_DIM_DP]);
        ts_group_init(&O->g_dps_expert, net, cp, strides[TS_DIM_CP], dpx / r,
                      strides[TS_DIM_DP], 1.0, 1.0);
        ts_group_init1(&O->g_dp_rep, net, r, strides[TS_DIM_DP] * dpx / r);
    }
    /* a MoE model's expert group is set even when the costed stage holds no expert layer: the
     * job.sync shards (site_members) of the other stages read it */
    if (ctx->inv.experts > 0) {
        if (ep == 1.0) /* same members as the dense group: (cp, 1, dpx) == (cp, dpx, 1) */
            O->g_dp_expert = O->g_dp_dense;
        else
            ts_group_init(&O->g_dp_expert, net, cp, strides[TS_DIM_CP], dpx, strides[TS_DIM_DP],
                          1.0, 1.0);
    } else {
        /* a dense model: every collective on this group has nbytes <= 0 and returns 0
         * before reading the group */
        O->g_dp_expert.n = 1.0;
        O->g_dp_expert.top = -1;
        O->g_dp_expert.crossings = 0;
    }
    O->groups_ok = 1;
}

/* llm.py evaluate_config, the recompute choice's part: per-stage times, the pipeline bubble
 * and the step's terms before data parallelism and the optimizer. */
TS_FN void ts_rec_init(const ts_ctx *ctx, ts_row *R, const ts_ord *O, int recompute, ts_rec *V)
{
    double f_compute = R->f_compute, b_compute = R->b_compute[recompute];
    double w_compute = R->w_compute, stage_layers = R->stage_layers;
    double m = R->m, window_f = R->gemm_f;
    double tp_f, tp_b, cp_f, cp_b, ep_f, ep_b, f_stage, b_stage, w_stage, bubble;
    double compute, tp_comm, cp_comm, ep_comm, share, off_f, off_b, copy_f, copy_b;
    int full = recompute == TS_RECOMPUTE_FULL;

    /* ---- tensor parallelism ---- */
    tp_f = ts_tp_exposed(ctx->sys, O->tp_pass, window_f, R->tp_overlap);
    tp_b = tp_f; /* the same expression with the same inputs */
    /* llm.py tp_sequence_copy_time: the collectives' copies, on the compute stream */
    copy_f = stage_layers * R->tp_copy_f;
    copy_b = stage_layers * R->tp_copy_b;
    if (full) {
        tp_b += R->full_share * (tp_f + copy_f);
    } else if (recompute > TS_RECOMPUTE_DOTS) { /* llm.py named_dots_tp_replay */
        double replay = ts_named_dots_tp_replay(recompute, R->sp, ctx->mdl[TS_MDL_SWIGLU] > 0.0,
                                                R->tp_gather_share);
        tp_b += ts_tp_exposed(ctx->sys, replay * O->tp_pass, R->gemm_redo[recompute],
                              R->tp_overlap)
                + replay * copy_f;
    } else if (recompute == TS_RECOMPUTE_SELECTIVE && R->module_tp_replay > 0.0) {
        /* llm.py recompute_module_tp_replay: the re-run MLP / MoE blocks' collectives */
        tp_b += ts_tp_exposed(ctx->sys, R->module_tp_replay * O->tp_pass, R->module_gemm_redo,
                              R->tp_overlap)
                + R->module_tp_replay * copy_f;
    }
    tp_f += copy_f;
    tp_b += copy_b;

    /* ---- context parallelism: ring exchange of K and V (Liu et al. 2023; TE
     * AttnFuncWithCPAndKVP2P) ---- */
    cp_f = 0.0;
    cp_b = 0.0;
    if (R->cp > 1.0) {
        /* ts_cp_ring_exposed_forward / _backward with the row's per-step attention times */
        double sig = ctx->sys[TS_SYS_CP_OVERLAP_SLOWDOWN], step = O->cp_step;
        double ring_f = (R->cp - 1.0) * ts_overlapped_exposed(step, R->cp_attn_step_f, 0.0, sig);
        cp_f = stage_layers * ring_f;
        cp_b = stage_layers * ((R->cp - 1.0) * ts_overlapped_exposed(2.0 * step,
                                                                     R->cp_attn_step_b, 0.0, sig)
                               + step);
        if (full) /* the recomputed attention's ring */
            cp_b += R->full_share * stage_layers * ring_f;
        else if (recompute >= TS_RECOMPUTE_DOTS
                 && !ts_named_dots_core_saved(recompute, ctx->job[TS_JOB_FLASH_ATTENTION] > 0.0))
            cp_b += stage_layers * ring_f;
    }

    /* ---- expert parallelism: dispatch + combine (Lepikhin et al. 2020, GShard §2) ---- */
    ep_f = 0.0;
    ep_b = 0.0;
    if (R->has_ep_comm) {
        ep_f = O->ep_pass;
        ep_b = O->ep_pass;
        if (full) /* the re-run forward's dispatch and combine */
            ep_b += R->full_share * ep_f;
        else if (recompute == TS_RECOMPUTE_SELECTIVE && ctx->job[TS_JOB_RECOMPUTE_MOE] > 0.0)
            ep_b += ep_f; /* ... and the "moe" module's */
        if (R->dualpipe) {
            /* DeepSeek-V3 tech report §3.2.1: all-to-all overlapped with the other
             * microbatch's compute */
            double x = ep_f - b_compute;
            ep_f = TS_PYMAX(0.0, x);
            x = ep_b - f_compute;
            ep_b = TS_PYMAX(0.0, x);
        }
    }

    /* ---- activation offload (llm.py recompute_terms, job.offload_activations) ---- */
    if (!(R->act_have >> recompute & 1))
        ts_row_act(ctx, R, recompute);
    share = ctx->job[TS_JOB_OFFLOAD_ACTIVATIONS];
    off_f = 0.0;
    off_b = 0.0;
    if (share > 0.0) {
        double off_bytes = share * (R->dense_layers * R->act_layer[recompute][0]
                                    + R->moe_layers * R->act_layer[recompute][1]);
        off_f = ts_offload_transfer_exposed(off_bytes, ctx->sys[TS_SYS_HOST_LINK_BANDWIDTH],
                                            f_compute);
        off_b = ts_offload_transfer_exposed(off_bytes, ctx->sys[TS_SYS_HOST_LINK_BANDWIDTH],
                                            b_compute + w_compute);
    }

    f_stage = f_compute + tp_f + cp_f + ep_f + off_f;
    b_stage = b_compute + tp_b + cp_b + ep_b + off_b;
    w_stage = w_compute;

    /* ---- pipeline ---- */
    bubble = ts_bubble_time(R->schedule, (int64_t)R->pp, (int64_t)m, (int64_t)R->vpp, f_stage,
                            b_stage, w_stage);

    /* ---- step terms ---- */
    compute = m * (f_compute + b_compute + w_compute);
    tp_comm = m * (tp_f + tp_b);
    cp_comm = m * (cp_f + cp_b);
    ep_comm = m * (ep_f + ep_b);
    V->recompute = recompute;
    V->f_stage = f_stage;
    V->bw_stage = b_stage + w_stage;
    V->fbw_stage = f_stage + b_stage + w_stage;
    V->compute = compute;
    V->tp_comm = tp_comm;
    V->cp_comm = cp_comm;
    V->ep_comm = ep_comm;
    V->bubble = bubble;
    V->step_pre = compute + tp_comm + cp_comm + ep_comm + O->pp_comm + bubble;
    V->offload = m * (off_f + off_b);
    for (int c = 0; c < 3; c++) {
        V->mem_act[c] = ts_offloaded_activation_memory(
            R->mem_act[recompute][c], share,
            share > 0.0 ? ts_largest_layer_activation_bytes(R->st_dense[c], R->st_moe[c],
                                                            R->act_layer[recompute][0],
                                                            R->act_layer[recompute][1])
                        : 0.0);
        if (recompute == TS_RECOMPUTE_FULL && (R->rebuild[0] > 0.0 || R->rebuild[1] > 0.0))
            V->mem_act[c] += ts_largest_layer_activation_bytes(R->st_dense[c], R->st_moe[c],
                                                               R->rebuild[0], R->rebuild[1]);
    }
    V->hw_flops = R->hw_flops[recompute];
}

/* llm.py state_memory_terms (stage_state_memory per device): the weights', gradients' and
 * optimizer states' bytes of the first, busiest middle and last pipeline stage (st[c] =
 * {weights, gradients, optimizer states}) at ZeRO stage `zero` with the data-parallel shares
 * r_dp_dense / r_dp_expert and `ob` optimizer bytes per parameter. */
static void ts_stage_state_memory(const double *job, const ts_row *R, int zero,
                                  double r_dp_dense, double r_dp_expert, double ob,
                                  double st[3][3])
{
    double pb = job[TS_JOB_PARAM_BYTES], gb = job[TS_JOB_GRAD_BYTES];
    /* shards: dp_dense / dp_expert when sharded by the ZeRO stage, else 1 (no division) */
    double w_shard_d = zero == 3 ? r_dp_dense : 1.0, w_shard_e = zero == 3 ? r_dp_expert : 1.0;
    double g_shard_d = zero >= 2 ? r_dp_dense : 1.0, g_shard_e = zero >= 2 ? r_dp_expert : 1.0;
    double o_shard_d = zero >= 1 ? r_dp_dense : 1.0, o_shard_e = zero >= 1 ? r_dp_expert : 1.0;
    /* llm.py fsdp_keeps_unsharded: ZeRO-3 under a pipeline keeps the stage unsharded */
    int keep = job[TS_JOB_FSDP_PP_UNSHARDED] > 0.0 && R->pp > 1.0;
    for (int c = 0; c < 3; c++) {
        double dpc = R->st_dparams[c], epc = R->st_eparams[c];
        /* ZeRO-3 with a data-parallel group: the shards at zero3_shard_param_bytes and the
         * gathered units in flight, the experts' where sharded or held in another dtype
         * (llm.py stage_state_memory) */
        int z3 = zero == 3 && r_dp_dense < 1.0;
        double sb = z3 ? job[TS_JOB_ZERO3_SHARD_PARAM_BYTES] : pb;
        double mw = dpc * w_shard_d * sb + epc * w_shard_e * sb;
        double gsd = g_shard_d, gse = g_shard_e;
        if (z3 && keep) {
            /* llm.py stage_state_memory, keep: every unit gathered, gradients unsharded */
            double elem;
            mw += ts_param_gather_bytes(job, dpc, R->st_lparams[c], &elem);
            if (r_dp_expert < 1.0 || sb != pb)
                mw += ts_param_gather_bytes(job, epc, epc, &elem);
            gsd = gse = 1.0;
        } else if (z3) {
            mw += R->st_gather_d[c];
            if (r_dp_expert < 1.0 || sb != pb)
                mw += R->st_gather_e[c];
        }
        if (job[TS_JOB_FP8_WEIGHT_CACHE_BYTES] != 0.0) /* else the reference adds exactly 0 */
            mw += ts_fp8_weight_cache_bytes(job, R->st_lparams[c] * w_shard_d + epc * w_shard_e);
        st[c][0] = mw;
        st[c][1] = (dpc * gsd + epc * gse) * gb;
        st[c][2] = (dpc * o_shard_d + epc * o_shard_e) * ob;
    }
}

/* llm.py evaluate_config, the last part: data-parallel communication (ZeRO stage, overlap),
 * the optimizer step, the step time, memory per GPU, and every result column. The row's
 * state memory per ZeRO stage is kept in it on first use (R->mem_state). */
TS_FN int ts_final(const ts_ctx *ctx, ts_row *R, ts_ord *O, const ts_rec *V, int zero,
                   int dp_overlap, double *out, int64_t os)
{
    const double *sys = ctx->sys, *job = ctx->job;
    const ts_net *net = &ctx->net;
    double dp_time, optimizer, step, memory, r_step, model_flops, pp_comm = O->pp_comm;
    double opt_params, r_dp_dense, r_dp_expert;
    double mem_weights = 0.0, mem_grads = 0.0, mem_opt = 0.0, mem_act, mem_logits, mem_reserve;
    double global_batch = job[TS_JOB_GLOBAL_BATCH], seq = job[TS_JOB_SEQ_LEN];
    int fits, status, finite = 1;
    /* llm.py job.sync: 0 synchronous (inside the collectives), else the part inside a site
     * here and the site tier's part below (cross_site_sync_time) */
    int strategy = (int)job[TS_JOB_SYNC_STRATEGY];
    /* llm.py fsdp_keeps_unsharded: ZeRO-3 under a pipeline keeps the stage unsharded */
    int keep = job[TS_JOB_FSDP_PP_UNSHARDED] > 0.0 && R->pp > 1.0;
    /* the data-parallel traffic's widths per element (a tier's comm_dtype applies where
     * narrower): gradients here, weights R->e_ag_dense / e_ag_expert */
    double e_grad = job[TS_JOB_GRAD_COMM_BYTES];

    if (strategy != TS_SYNC_SYNCHRONOUS && zero == 3) /* sweeps reach here unchecked */
        return ts_write_invalid(out, os, ts_sync_error(job, zero));
    if (!O->groups_ok && (strategy != TS_SYNC_SYNCHRONOUS
                          || (zero == 0 ? !O->have_ar : zero == 3 ? !O->have_ag3 : !O->have_ag)))
        ts_ord_dp_groups(ctx, R, O);
    if (strategy != TS_SYNC_SYNCHRONOUS) {
        /* llm.py dp_collective_time: within_site_time (zero 0, 1 or 2 here) */
        if (zero == 0 && !O->have_ar) {
            O->ar = ts_within_site_time(net, R->ar_dense_bytes, e_grad, 1, &O->g_dp_dense)
                    + ts_within_site_time(net, R->ar_expert_bytes, e_grad, 1, &O->g_dp_expert);
            O->have_ar = 1;
        } else if (zero != 0 && !O->have_ag) {
            O->rs = ts_within_site_time(net, R->ar_dense_bytes, e_grad, 0, &O->g_dp_dense)
                    + ts_within_site_time(net, R->ar_expert_bytes, e_grad, 0, &O->g_dp_expert);
            O->ag = ts_within_site_time(net, R->ag_dense_bytes, R->e_ag_dense, 0, &O->g_dp_dense)
                    + ts_within_site_time(net, R->ag_expert_bytes, R->e_ag_expert, 0,
                                          &O->g_dp_expert);
            O->have_ag = 1;
        }
    } else if (zero == 0) {
        if (!O->have_ar) {
            O->ar = ts_compressed_all_reduce_time(net, R->ar_dense_bytes, e_grad, &O->g_dp_dense)
                    + ts_compressed_all_reduce_time(net, R->ar_expert_bytes, e_grad,
                                                    &O->g_dp_expert);
            O->have_ar = 1;
        }
    } else if (zero == 3 ? !O->have_ag3 : !O->have_ag) {
        /* ZeRO-1/2: all the device's parameters; ZeRO-3: one FSDP unit's share. The
         * reduce-scatter costs the all-gather's (collectives.py reduce_scatter_time). With
         * hybrid sharding (llm.py data_parallel_comm) both run in the shard groups and
         * the gradient shard is all-reduced across the replicas after the reduce-scatter. */
        int hybrid = ts_dp_replica_count(job) != 1.0;
        const ts_group *gd = hybrid ? &O->g_dps_dense : &O->g_dp_dense;
        const ts_group *ge = hybrid ? &O->g_dps_expert : &O->g_dp_expert;
        double units = zero == 3 ? R->fsdp_units : 1.0;
        double rs = ts_compressed_all_gather_time(net, R->ar_dense_bytes / units, e_grad, gd)
                    + ts_compressed_all_gather_time(net, R->ar_expert_bytes / units, e_grad, ge);
        double ag = ts_compressed_all_gather_time(net, R->ag_dense_bytes / units, R->e_ag_dense,
                                                  gd)
                    + ts_compressed_all_gather_time(net, R->ag_expert_bytes / units,
                                                    R->e_ag_expert, ge);
        if (hybrid)
            rs += ts_compressed_all_reduce_time(net, R->ar_dense_bytes / units * R->r_dp_dense,
                                                e_grad, &O->g_dp_rep)
                  + ts_compressed_all_reduce_time(net, R->ar_expert_bytes / units * R->r_dp_expert,
                                                  e_grad, &O->g_dp_rep);
        if (zero == 3) {
            O->rs3 = rs;
            O->ag3 = ag;
            O->have_ag3 = 1;
        } else {
            O->rs = rs;
            O->ag = ag;
            O->have_ag = 1;
        }
    }
    if (zero == 0) {
        dp_time = ts_bucketed_exposed(O->ar, V->bw_stage, R->dp_last_share, dp_overlap);
    } else if (zero == 1 || zero == 2) {
        dp_time = ts_bucketed_exposed(O->rs, V->bw_stage, R->dp_last_share, dp_overlap)
                  + ts_bucketed_exposed(O->ag, V->f_stage, R->dp_last_share, dp_overlap);
    } else {
        /* ZeRO-3 / FSDP, unit by unit (Rajbhandari et al. 2020 §5; Zhao et al. VLDB 2023
         * §3.2-3.3) */
        double ag3 = O->ag3;
        if (keep) /* llm.py fsdp_keeps_unsharded: one gather and one reduce-scatter a step */
            dp_time = ts_fsdp_exposed(ag3, R->fsdp_units * (ag3 + O->rs3), V->fbw_stage,
                                      dp_overlap);
        else
            dp_time = R->m * ts_fsdp_exposed(ag3, R->fsdp_units * (2.0 * ag3 + O->rs3),
                                             V->fbw_stage, dp_overlap);
    }
    optimizer = R->optimizer[zero >= 1];
    opt_params = R->opt_params[zero >= 1];
    r_dp_dense = R->r_dp_dense;
    r_dp_expert = R->r_dp_expert;
    if (strategy != TS_SYNC_SYNCHRONOUS) {
        /* llm.py cross_site_sync_time + cross_site_exposed (+ streaming_overlap_window):
         * DiLoCo moves 1/P of the parameters per fragment sync, P/H syncs a step */
        double share = strategy == TS_SYNC_DILOCO ? 1.0 / job[TS_JOB_SYNC_FRAGMENTS] : 1.0;
        double ob = job[TS_JOB_SYNC_OUTER_BYTES];
        double cross = ts_cross_site_time(net, R->dense_params * share * ob, ob, &O->g_dp_dense)
                       + ts_cross_site_time(net, R->expert_params * share * ob, ob,
                                            &O->g_dp_expert);
        if (strategy == TS_SYNC_DILOCO) {
            double per_step = cross * job[TS_JOB_SYNC_FRAGMENTS] / job[TS_JOB_SYNC_INNER_STEPS];
            double window = job[TS_JOB_SYNC_FRAGMENTS] / job[TS_JOB_SYNC_INNER_STEPS]
                            * job[TS_JOB_SYNC_OVERLAP_STEPS] * V->compute;
            dp_time += TS_PYMAX(0.0, per_step - window);
        } else
            dp_time += TS_PYMAX(0.0, cross - V->compute);
        /* each site keeps a full replica: ZeRO-1/2 shard over the members inside a site */
        r_dp_dense = 1.0 / ts_site_members(net, &O->g_dp_dense);
        r_dp_expert = 1.0 / ts_site_members(net, &O->g_dp_expert);
        if (zero >= 1) {
            opt_params = R->dense_params * r_dp_dense + R->expert_params * r_dp_expert;
            optimizer = opt_params * job[TS_JOB_OPTIMIZER_TRAFFIC_BYTES] * ctx->inv.inv_hbm;
        }
    }
    if (job[TS_JOB_OFFLOAD_OPTIMIZER] > 0.0)
        optimizer = ts_offload_optimizer_time(sys, job, opt_params, V->bw_stage, dp_overlap);
    /* llm.py step_overhead: the training loop's fixed host-side cost, once a step */
    step = V->step_pre + dp_time + optimizer + V->offload + sys[TS_SYS_STEP_OVERHEAD_S];

    /* ---- memory per GPU (Rajbhandari et al. 2020 §5) ---- */
    /* llm.py finish_config_state: each stage's state memory, activations and logits; the
     * largest counts (the last unless another one needs more) */
    {
        /* offloaded: the optimizer states live in host memory */
        double ob = job[TS_JOB_OFFLOAD_OPTIMIZER] > 0.0
                        ? 0.0
                        : job[TS_JOB_OPTIMIZER_BYTES]
                              + (strategy == TS_SYNC_DILOCO ? 8.0 : 0.0); /* outer states */
        double best = 0.0;
        int sel = 2;
        static const int stage_order[3] = {2, 0, 1};
        double (*st)[3] = R->mem_state[zero], cross[3][3];
        if (strategy == TS_SYNC_SYNCHRONOUS) { /* the row's, computed once per ZeRO stage */
            if (!(R->mem_have >> zero & 1)) {
                ts_stage_state_memory(job, R, zero, r_dp_dense, r_dp_expert, ob, st);
                R->mem_have |= 1 << zero;
            }
        } else { /* the site's shards (r_dp_*) come from this order's groups */
            ts_stage_state_memory(job, R, zero, r_dp_dense, r_dp_expert, ob, cross);
            st = cross;
        }
        for (int j = 0; j < 3; j++) {
            int c = stage_order[j];
            double mw = st[c][0], mg = st[c][1], mo = st[c][2];
            double tot = mw + mg + mo + V->mem_act[c] + R->st_logits[c];
            if (j == 0 || tot > best) {
                best = tot;
                sel = c;
                mem_weights = mw;
                mem_grads = mg;
                mem_opt = mo;
            }
        }
        mem_act = V->mem_act[sel];
        mem_logits = R->st_logits[sel];
        memory = best;
    }
    mem_reserve = ts_reserve_bytes(sys);
    memory = memory + mem_reserve;

    /* ---- llm.py write_result: feasible when memory fits in HBM ---- */
    model_flops = ctx->inv.model_flops;
    fits = memory <= sys[TS_SYS_HBM_BYTES];
    status = fits ? TS_STATUS_OK : TS_STATUS_OUT_OF_MEMORY;
    /* each result stored and checked finite as it is made (llm.py guard_finite): reading the
     * 27 stores back to check them stalled on them; ts_guard_finite runs only when one fails */
#define TS_PUT(k, expr)                                                                        \
    do {                                                                                       \
        double v_ = (expr);                                                                    \
        out[(k) * os] = v_;                                                                    \
        finite &= fabs(v_) <= DBL_MAX;                                                         \
    } while (0)
    TS_PUT(TS_OUT_STATUS, (double)status);
    TS_PUT(TS_OUT_FEASIBLE, fits ? 1.0 : 0.0);
    TS_PUT(TS_OUT_STEP_TIME_S, step);
    r_step = 1.0 / step;
    TS_PUT(TS_OUT_TOKENS_PER_S, global_batch * seq * r_step);
    TS_PUT(TS_OUT_MFU, model_flops * r_step * ctx->inv.inv_gpus_peak);
    TS_PUT(TS_OUT_MODEL_TFLOPS_PER_GPU, model_flops * r_step * ctx->inv.inv_gpus * 1e-12);
    TS_PUT(TS_OUT_HW_TFLOPS_PER_GPU, V->hw_flops * r_step * ctx->inv.inv_gpus * 1e-12);
    TS_PUT(TS_OUT_MEMORY_GIB, memory / TS_GIB);
    TS_PUT(TS_OUT_COMPUTE_S, V->compute);
    TS_PUT(TS_OUT_TP_COMM_S, V->tp_comm);
    TS_PUT(TS_OUT_CP_COMM_S, V->cp_comm);
    TS_PUT(TS_OUT_EP_COMM_S, V->ep_comm);
    TS_PUT(TS_OUT_PP_COMM_S, pp_comm);
    TS_PUT(TS_OUT_BUBBLE_S, V->bubble);
    TS_PUT(TS_OUT_DP_COMM_S, dp_time);
    TS_PUT(TS_OUT_OPTIMIZER_S, optimizer);
    TS_PUT(TS_OUT_MEM_WEIGHTS_GIB, mem_weights / TS_GIB);
    TS_PUT(TS_OUT_MEM_GRADS_GIB, mem_grads / TS_GIB);
    TS_PUT(TS_OUT_MEM_OPTIMIZER_GIB, mem_opt / TS_GIB);
    TS_PUT(TS_OUT_MEM_ACTIVATIONS_GIB, mem_act / TS_GIB);
    TS_PUT(TS_OUT_MEM_LOGITS_GIB, mem_logits / TS_GIB);
    TS_PUT(TS_OUT_MEM_RESERVE_GIB, mem_reserve / TS_GIB);
    TS_PUT(TS_OUT_MICROBATCHES, R->m);
    TS_PUT(TS_OUT_OFFLOAD_S, V->offload);
    TS_PUT(TS_OUT_OVERHEAD_S, sys[TS_SYS_STEP_OVERHEAD_S]);
    /* llm.py write_result's cost columns, factored: cost = step * gpus * usd_per_gpu_s,
     * tokens / cost = (tokens / (gpus * usd_per_gpu_s)) / step, likewise per joule */
    TS_PUT(TS_OUT_COST_PER_STEP_USD,
           ts_cost_per_step_usd(step, sys[TS_SYS_GPUS], sys[TS_SYS_USD_PER_GPU_S]));
    TS_PUT(TS_OUT_TOKENS_PER_USD, ctx->inv.tokens_per_usd_s * r_step);
    TS_PUT(TS_OUT_TOKENS_PER_JOULE, ctx->inv.tokens_per_j_s * r_step);
#undef TS_PUT
    if (finite && step > 0.0)
        return status;
    return ts_guard_finite(out, os, status);
}

/* The rest of a configuration after its core row: config_error's free-field checks, then the
 * order, recompute and final stages. */
TS_FN int ts_evaluate_free(const ts_ctx *ctx, ts_row *R, const int32_t *cfg,
                           int64_t stride, double *out, int64_t os)
{
    int recompute = cfg[TS_CFG_RECOMPUTE * stride], zero = cfg[TS_CFG_ZERO * stride];
    int order = cfg[TS_CFG_ORDER * stride], dp_overlap = cfg[TS_CFG_DP_OVERLAP * stride];
    int code = ts_join_error(R->code,
                             ts_free_sync_error(ctx->job, recompute, zero, order, dp_overlap));
    ts_ord O;
    ts_rec V;
    if (code != 0)
        return ts_write_invalid(out, os, code);
    ts_ord_init(ctx, R, order, &O);
    ts_rec_init(ctx, R, &O, recompute, &V);
    return ts_final(ctx, R, &O, &V, zero, dp_overlap == 1, out, os);
}

/* llm.py evaluate_config: cost one configuration and write every result column.
 * cfg[f * stride] is config field f; out[k * out_stride] result column k. Returns the status. */
#if defined(TS_UNITY_BUILD) && (defined(__GNUC__) || defined(__clang__))
/* one configuration from scratch (small batches, ts_llm_cost, ranges whose rows rarely repeat):
 * every stage inlined here, so the row's values stay in registers instead of a ts_row */
__attribute__((flatten))
#endif
TS_FN int ts_evaluate_config(const ts_ctx *ctx, const int32_t *cfg, int64_t stride, double *out,
                             int64_t os)
{
    ts_row R;
    ts_row_init(ctx, cfg, stride, &R);
    return ts_evaluate_free(ctx, &R, cfg, stride, out, os);
}
