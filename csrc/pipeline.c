/* Pipeline-parallel schedules: bubble closed forms, activations in flight, parameter copies and
 * critical-path transfers. Port of src/trainscape/model/pipeline.py (closed forms checked there
 * against the discrete-event simulator model/schedule_sim.py). Integer arguments (p, m, v) are
 * the reference's Python ints, here int64_t; float arithmetic converts them exactly. */
#include "ts_model.h"

/* pipeline.py SCHED_* reason codes of schedule_valid. */
enum {
    TS_SCHED_OK = 0,
    TS_SCHED_ERR_RANGE = 1,
    TS_SCHED_ERR_CODE = 2,
    TS_SCHED_ERR_INTERLEAVED_M = 3,
    TS_SCHED_ERR_DUALPIPE_P = 4,
    TS_SCHED_ERR_DUALPIPE_M = 5,
    TS_SCHED_ERR_DUALPIPE_V_M = 6
};

/* pipeline.py schedule_chunks: model chunks per device (Narayanan et al. SC'21 §2.2; Qi et al.
 * ZB-V; deepseek-ai/DualPipe). */
TS_FN int64_t ts_schedule_chunks(int schedule, int64_t v)
{
    if (schedule == TS_SCHED_INTERLEAVED) {
        if (v < 1)
            return 1;
        return v;
    }
    if (schedule == TS_SCHED_ZB_V || schedule == TS_SCHED_DUALPIPE_V || schedule == TS_SCHED_DUALPIPE)
        return 2;
    return 1;
}

/* pipeline.py schedule_layer_divisor: stages a microbatch passes through. */
TS_FN int64_t ts_schedule_layer_divisor(int schedule, int64_t p, int64_t v)
{
    if (p <= 1)
        return 1;
    if (schedule == TS_SCHED_INTERLEAVED) {
        if (v < 1)
            return p;
        return p * v;
    }
    if (schedule == TS_SCHED_ZB_V || schedule == TS_SCHED_DUALPIPE_V)
        return 2 * p;
    return p;
}

/* pipeline.py schedule_valid: Megatron-LM interleaving and deepseek-ai/DualPipe asserts. */
TS_FN int ts_schedule_valid(int schedule, int64_t p, int64_t m, int64_t v)
{
    if (p < 1 || m < 1 || v < 1)
        return TS_SCHED_ERR_RANGE;
    if (schedule < 0 || schedule >= TS_SCHED_COUNT)
        return TS_SCHED_ERR_CODE;
    if (p == 1)
        return TS_SCHED_OK;
    if (schedule == TS_SCHED_INTERLEAVED) {
        if (v > 1 && m % p != 0)
            return TS_SCHED_ERR_INTERLEAVED_M;
    } else if (schedule == TS_SCHED_DUALPIPE) {
        if (p % 2 != 0)
            return TS_SCHED_ERR_DUALPIPE_P;
        if (m % 2 != 0 || m < 2 * p)
            return TS_SCHED_ERR_DUALPIPE_M;
    } else if (schedule == TS_SCHED_DUALPIPE_V) {
        if (m < 2 * p)
            return TS_SCHED_ERR_DUALPIPE_V_M;
    }
    return TS_SCHED_OK;
}

/* pipeline.py _nonneg: x when > 0, else 0 (NaN included). */
static inline double ts_nonneg(double x)
{
    if (x > 0.0)
        return x;
    return 0.0;
}

/* pipeline.py bubble_fill_drain: GPipe (Huang et al. 2019), 1F1B (Narayanan et al. SC'21
 * §2.1): (p-1)(f+b+w). */
static inline double ts_bubble_fill_drain(int64_t p, double f, double b, double w)
{
    return ((double)p - 1.0) * (f + b + w);
}

/* pipeline.py bubble_interleaved: Narayanan et al. SC'21 §2.2, (p-1)(f+b+w)/v. */
static inline double ts_bubble_interleaved(int64_t p, int64_t v, double f, double b, double w)
{
    if (v < 1)
        v = 1;
    return ((double)p - 1.0) * (f + b + w) / (double)v;
}

/* pipeline.py bubble_zb_h1: Qi et al., arXiv 2401.10241 §3.1, simulated closed form. */
static inline double ts_bubble_zb_h1(int64_t p, int64_t m, double f, double b, double w)
{
    int64_t k = m;
    double a, c, d;
    if (k > p)
        k = p;
    a = (double)(p - k) * f + ((double)p - 1.0) * b;
    c = ((double)p - 1.0) * f + (double)(p - k) * b;
    d = ((double)p - 1.0) * (f + b) - ((double)k - 1.0) * w;
    if (c > a)
        a = c;
    if (d > a)
        a = d;
    return a;
}

/* pipeline.py bubble_zb_h2: Qi et al., arXiv 2401.10241 §3.1, synchronous-step form. */
static inline double ts_bubble_zb_h2(int64_t p, int64_t m, double f, double b, double w)
{
    double a;
    if (m < 2 * p - 1)
        return ts_bubble_zb_h1(p, m, f, b, w);
    a = f;
    if (b - f > a)
        a = b - f;
    if (f + b - 2.0 * w > a)
        a = f + b - 2.0 * w;
    return ((double)p - 1.0) * a;
}

/* pipeline.py bubble_zb_v: Qi et al. ZB-V (sail-sg handcrafted order), nine critical paths. */
static inline double ts_bubble_zb_v(int64_t p, int64_t m, double f, double b, double w)
{
    double q, a, t, fp = (double)p;
    if (m < 2 * p - 1)
        return (fp - 1.0) * (f + b + w);
    q = fp - 1.0;
    a = q * 0.5 * b;
    t = 0.5 * b + (fp - 2.0) * 0.5 * w;
    if (t > a)
        a = t;
    t = q * (b - w);
    if (t > a)
        a = t;
    t = 0.5 * f + (fp - 2.0) * 0.5 * w;
    if (t > a)
        a = t;
    t = q * 0.5 * f;
    if (t > a)
        a = t;
    t = q * 0.5 * (f + b) - q * w;
    if (t > a)
        a = t;
    t = ((2.0 * fp - 3.0) * f - (fp - 2.0) * b) * 0.5;
    if (t > a)
        a = t;
    t = q * f - q * 0.5 * b - 0.5 * w;
    if (t > a)
        a = t;
    t = q * f - (fp - 0.5) * w;
    if (t > a)
        a = t;
    t = (2.0 * fp - 3.0) * 0.5 * f + 0.5 * b - q * w;
    if (t > a)
        a = t;
    return a;
}

/* pipeline.py bubble_dualpipe: deepseek-ai/DualPipe README (PP/2-1)(F&B+B-3W), simulated. */
static inline double ts_bubble_dualpipe(int64_t p, double f, double b, double w)
{
    double h = (double)p * 0.5 - 1.0;
    double a = (h - 1.0) * f + h * b;
    double c = 2.0 * h * f;
    double d;
    if (c > a)
        a = c;
    d = b - w;
    if (d < 0.0)
        d = 0.0;
    return h * d + a;
}

/* pipeline.py bubble_dualpipe_v: deepseek-ai/DualPipe dualpipev.py, simulated. */
static inline double ts_bubble_dualpipe_v(int64_t p, double f, double b, double w)
{
    double fp = (double)p;
    double hh = (fp - 1.0) * 0.5;
    double a = (fp - 2.0) * 0.5 * f + hh * b;
    double c = 2.0 * hh * f;
    double d;
    if (c > a)
        a = c;
    d = b - w;
    if (d < 0.0)
        d = 0.0;
    return hh * d + a;
}

/* pipeline.py bubble_time: idle time on the critical path of the pipeline phase. */
TS_FN double ts_bubble_time(int schedule, int64_t p, int64_t m, int64_t v, double f, double b,
                            double w)
{
    double r;
    f = ts_nonneg(f);
    b = ts_nonneg(b);
    w = ts_nonneg(w);
    if (p <= 1 || m < 1)
        return 0.0;
    switch (schedule) {
    case TS_SCHED_GPIPE:
    case TS_SCHED_1F1B:
        r = ts_bubble_fill_drain(p, f, b, w);
        break;
    case TS_SCHED_INTERLEAVED:
        r = ts_bubble_interleaved(p, v, f, b, w);
        break;
    case TS_SCHED_ZB_H1:
        r = ts_bubble_zb_h1(p, m, f, b, w);
        break;
    case TS_SCHED_ZB_H2:
        r = ts_bubble_zb_h2(p, m, f, b, w);
        break;
    case TS_SCHED_ZB_V:
        r = ts_bubble_zb_v(p, m, f, b, w);
        break;
    case TS_SCHED_DUALPIPE:
        r = ts_bubble_dualpipe(p, f, b, w);
        break;
    case TS_SCHED_DUALPIPE_V:
        r = ts_bubble_dualpipe_v(p, f, b, w);
        break;
    default:
        r = ts_bubble_fill_drain(p, f, b, w);
        break;
    }
    return ts_nonneg(r);
}

/* pipeline.py inflight_activations_rank: peak stored microbatch activations on pipeline rank r
 * (Megatron-LM megatron/core/pipeline_parallel/schedules.py warm-up counts; Korthikanti et al.
 * 2022 §4.2.3; Qi et al. §3.1; DualPipe README). */
TS_FN double ts_inflight_activations_rank(int schedule, int64_t p, int64_t m, int64_t v,
                                          int64_t r)
{
    double fm, fp, fr;
    if (m < 1)
        return 0.0;
    if (p <= 1)
        return 1.0;
    if (r < 0)
        r = 0;
    if (r > p - 1)
        r = p - 1;
    fm = (double)m * 1.0;
    fp = (double)p * 1.0;
    fr = (double)r * 1.0;
    if (schedule == TS_SCHED_GPIPE)
        return fm;
    if (schedule == TS_SCHED_INTERLEAVED) {
        double fv, chunks, total;
        if (v <= 1) {
            double x = fp - fr;
            return TS_PYMIN(x, fm);
        }
        if (m == p)
            return fp;
        fv = (double)v * 1.0;
        chunks = 2.0 * (fp - fr - 1.0) + (fv - 1.0) * fp + 1.0;
        total = fm * fv;
        return TS_PYMIN(chunks, total) / fv;
    }
    if (schedule == TS_SCHED_ZB_H2) {
        double x = 2.0 * fp - 1.0;
        return TS_PYMIN(x, fm);
    }
    if (schedule == TS_SCHED_DUALPIPE)
        return fp + 1.0;
    if (schedule == TS_SCHED_DUALPIPE_V)
        return fp + 0.5;
    if (schedule == TS_SCHED_ZB_V || schedule == TS_SCHED_ZB_H1)
        return TS_PYMIN(fp, fm);
    {
        double x = fp - fr;
        return TS_PYMIN(x, fm);
    }
}

/* pipeline.py inflight_activations: rank 0's. */
TS_FN double ts_inflight_activations(int schedule, int64_t p, int64_t m, int64_t v)
{
    return ts_inflight_activations_rank(schedule, p, m, v, 0);
}

/* pipeline.py loss_on_first_device: no pipeline, or a V placement (ZB-V, DualPipeV). */
TS_FN int ts_loss_on_first_device(int schedule, int64_t p)
{
    if (p <= 1)
        return 1;
    return schedule == TS_SCHED_ZB_V || schedule == TS_SCHED_DUALPIPE_V;
}

/* pipeline.py explicit_stage_layers: stated first / last stage layers (0: not stated), the
 * other stages splitting the rest, ceil on the busiest (Megatron-Core
 * num_layers_in_first/last_pipeline_stage). p >= 2. */
TS_FN void ts_explicit_stage_layers(int64_t p, int64_t layers, int64_t first_n, int64_t last_n,
                                    double *first_out, double *middle_out, double *last_out)
{
    int64_t stated = (first_n > 0) + (last_n > 0);
    int64_t rest = layers - first_n - last_n, others = p - stated, middle = 0;
    if (rest < 0)
        rest = 0;
    if (others > 0)
        middle = (rest + others - 1) / others;
    *first_out = (double)(first_n > 0 ? first_n : middle) * 1.0;
    *last_out = (double)(last_n > 0 ? last_n : middle) * 1.0;
    *middle_out = p <= 2 ? 0.0 : (double)middle * 1.0;
}

/* pipeline.py explicit_stage_layers_error: stated counts this pipeline cannot run. */
TS_FN int ts_explicit_stage_layers_error(int schedule, int64_t p, int64_t v, int64_t layers,
                                         int64_t first_n, int64_t last_n)
{
    double first, middle, last, chunks;
    if (p <= 1 || (first_n <= 0 && last_n <= 0))
        return 0;
    if (ts_loss_on_first_device(schedule, p))
        return 1;
    if (first_n + last_n > layers)
        return 1;
    if (p == 2 && first_n > 0 && last_n > 0 && first_n + last_n != layers)
        return 1;
    chunks = (double)(ts_schedule_layer_divisor(schedule, p, v) / p);
    ts_explicit_stage_layers(p, layers, first_n, last_n, &first, &middle, &last);
    if (first < chunks || last < chunks)
        return 1;
    return p > 2 && middle < chunks;
}

/* pipeline.py pipeline_stage_layers: transformer layers of the first, the busiest middle and
 * the last device, layers + 2 edge spread as evenly as possible over p devices (Megatron-LM
 * --account-for-embedding/loss-in-pipeline-split; Llama 3 arXiv 2407.21783 §3.3.2); with
 * edges the mtp blocks on the loss device count as layers of the split too (NeMo r2.3.0's
 * DeepSeek-V3 script, Megatron-Bridge's "Et|(tt|)*30mL"). */
TS_FN void ts_pipeline_stage_layers(int schedule, int64_t p, int64_t v, int64_t layers,
                                    int64_t edge, int64_t mtp, int64_t first_n, int64_t last_n,
                                    double *first_out, double *middle_out, double *last_out)
{
    int64_t k, slots, total, u, ends, first, last, cap, mids, rest, middle;
    (void)v;
    if (p <= 1) {
        *first_out = (double)layers * 1.0;
        *middle_out = 0.0;
        *last_out = (double)layers * 1.0;
        return;
    }
    if (first_n > 0 || last_n > 0) {
        ts_explicit_stage_layers(p, layers, first_n, last_n, first_out, middle_out, last_out);
        return;
    }
    k = edge < 0 ? 0 : edge;
    slots = (k > 0 && mtp > 0) ? mtp : 0;
    total = layers + 2 * k + slots;
    u = (total + p - 1) / p;
    if (ts_loss_on_first_device(schedule, p)) {
        ends = 1;
        first = u - 2 * k - slots;
        last = first;
    } else {
        ends = 2;
        first = u - k;
        last = u - k - slots;
    }
    mids = p - ends;
    if (mids <= 0) {
        first = (layers + 1) / 2;
        *first_out = (double)first * 1.0;
        *middle_out = 0.0;
        *last_out = (double)first * 1.0;
        return;
    }
    cap = layers / ends;
    if (first < 0)
        first = 0;
    if (first > cap)
        first = cap;
    if (last < 0)
        last = 0;
    if (last > cap)
        last = cap;
    if (ends == 1)
        last = first;
    rest = layers - first - (ends == 2 ? last : 0);
    middle = (rest + mids - 1) / mids;
    *first_out = (double)first * 1.0;
    *middle_out = (double)middle * 1.0;
    *last_out = (double)last * 1.0;
}

/* pipeline.py parameter_copies: DualPipe keeps two mirrored copies (README). */
TS_FN double ts_parameter_copies(int schedule)
{
    if (schedule == TS_SCHED_DUALPIPE)
        return 2.0;
    return 1.0;
}

/* pipeline.py p2p_critical_transfers: stage-boundary transfers exposed in fill and drain. */
TS_FN double ts_p2p_critical_transfers(int schedule, double p, double v)
{
    double q;
    if (p <= 1.0)
        return 0.0;
    q = p - 1.0;
    if (schedule == TS_SCHED_INTERLEAVED) {
        if (v < 1.0)
            v = 1.0;
        return 2.0 * (p * v - 1.0);
    }
    if (schedule == TS_SCHED_ZB_V || schedule == TS_SCHED_DUALPIPE_V)
        return 4.0 * q;
    return 2.0 * q;
}

/* pipeline.py p2p_steady_crossings_1f1b: steady-state 1F1B transfers on the critical path,
 * 2(m-1) - 2 floor((m+p-2)/p); Megatron-LM's blocking send_forward_recv_backward /
 * send_backward_recv_forward expose every one (the schedule simulator's count). */
TS_FN double ts_p2p_steady_crossings_1f1b(double p, double m)
{
    if (p <= 1.0 || m < 1.0)
        return 0.0;
    return 2.0 * (m - 1.0) - 2.0 * floor((m + p - 2.0) / p);
}

/* pipeline.py p2p_steady_transfer_1f1b: time per steady crossing, the slower of the whole
 * pipeline's cycle and the slowest boundary's, max(route/(p-1), t_max p/(2(p-1))). */
TS_FN double ts_p2p_steady_transfer_1f1b(double p, double route, double t_max)
{
    double q, t, u;
    if (p <= 1.0)
        return 0.0;
    q = p - 1.0;
    t = route / q;
    u = t_max * p / (2.0 * q);
    if (u > t)
        t = u;
    if (t < 0.0)
        t = 0.0;
    return t;
}

/* pipeline.py pipeline_hide_window: compute that hides one steady-state boundary transfer,
 * min(f, b + w) / chunks. */
TS_FN double ts_pipeline_hide_window(double f, double b, double w, double chunks)
{
    double hide = b + w;
    if (chunks < 1.0)
        chunks = 1.0;
    if (f < hide)
        hide = f;
    if (hide < 0.0)
        hide = 0.0;
    return hide / chunks;
}

/* pipeline.py pipeline_comm_time: gpipe 2 route; 1f1b (and interleaved v = 1) 2 route plus
 * every steady crossing; interleaved v > 1, zb-* and dualpipe* fill + drain at the tiers
 * crossed plus the stall m * chunks * max(0, t_max - hide). */
TS_FN double ts_pipeline_comm_time(int schedule, double p, double v, double m, double route,
                                   double t_top, double t_max, double hide)
{
    double n, fill, chunks, stall, steady;
    if (p <= 1.0)
        return 0.0;
    if (schedule == TS_SCHED_GPIPE)
        return 2.0 * route;
    if (schedule == TS_SCHED_1F1B || (schedule == TS_SCHED_INTERLEAVED && v <= 1.0)) {
        steady = ts_p2p_steady_crossings_1f1b(p, m) * ts_p2p_steady_transfer_1f1b(p, route, t_max);
        return 2.0 * route + steady;
    }
    n = ts_p2p_critical_transfers(schedule, p, v);
    if (schedule == TS_SCHED_INTERLEAVED)
        fill = 2.0 * (v * route + (v - 1.0) * t_top);
    else
        fill = n / (p - 1.0) * route;
    chunks = (double)ts_schedule_chunks(schedule, (int64_t)v);
    stall = t_max - hide;
    if (stall < 0.0)
        stall = 0.0;
    return fill + m * chunks * stall;
}
