/* Hierarchical network: tiers, placement orders, groups over tiers.
 * Port of src/trainscape/model/network.py (per-dimension decomposition of ASTRA-sim's analytical
 * backend, Won et al., ISPASS 2023, §IV; rank order as Megatron-LM's RankGenerator). */
#include "ts_model.h"

/* network.py tier_field: field of one tier in the system block. */
TS_FN double ts_tier_field(const double *sys, int tier, int field)
{
    return sys[TS_SYS_TIER_BASE + tier * TS_N_TIER + field];
}

/* network.py n_tiers: tiers in use (checked to be 1..TS_MAX_TIERS by ts_check_blocks). */
TS_FN int ts_n_tiers(const double *sys)
{
    return (int)sys[TS_SYS_N_TIERS];
}

/* network.py tier_span: ranks in one tier domain; the outermost tier is unbounded. */
TS_FN double ts_tier_span(const double *sys, int tier)
{
    double span = 1.0;
    if (tier >= ts_n_tiers(sys) - 1)
        return INFINITY;
    for (int i = 0; i <= tier; i++)
        span *= ts_tier_field(sys, i, TS_TIER_SIZE);
    return span;
}

/* network.py tier_capacity: product of all tier sizes. */
TS_FN double ts_tier_capacity(const double *sys)
{
    double span = 1.0;
    int n = ts_n_tiers(sys);
    for (int i = 0; i < n; i++)
        span *= ts_tier_field(sys, i, TS_TIER_SIZE);
    return span;
}

/* network.py transport_window_bandwidth: window / RTT (RFC 7323 §1.1); inf without a window
 * or a latency. */
TS_FN double ts_transport_window_bandwidth(const double *sys, int tier)
{
    double window = ts_tier_field(sys, tier, TS_TIER_WINDOW_BYTES);
    double rtt = 2.0 * ts_tier_field(sys, tier, TS_TIER_LATENCY);
    if (window <= 0.0 || rtt <= 0.0)
        return INFINITY;
    return window / rtt;
}

/* network.py tier_link_bandwidth: bandwidth * efficiency / oversubscription (Llama 3,
 * arXiv 2407.21783 §3.3.1). */
TS_FN double ts_tier_link_bandwidth(const double *sys, int tier)
{
    double bw = ts_tier_field(sys, tier, TS_TIER_BANDWIDTH)
                * ts_tier_field(sys, tier, TS_TIER_EFFICIENCY)
                / ts_tier_field(sys, tier, TS_TIER_OVERSUBSCRIPTION);
    double cap = ts_transport_window_bandwidth(sys, tier);
    return TS_PYMIN(bw, cap);
}

/* network.py tier_path_bandwidth: slowest of tiers 1..tier; tier 0 is the scale-up link. */
TS_FN double ts_tier_path_bandwidth(const double *sys, int tier)
{
    double bw;
    if (tier == 0)
        return ts_tier_link_bandwidth(sys, 0);
    bw = ts_tier_link_bandwidth(sys, 1);
    for (int i = 2; i <= tier; i++) {
        double b = ts_tier_link_bandwidth(sys, i);
        bw = TS_PYMIN(bw, b);
    }
    return bw;
}

/* network.py tier_latency. */
TS_FN double ts_tier_latency(const double *sys, int tier)
{
    double lat = ts_tier_field(sys, tier, TS_TIER_LATENCY);
    return lat + ts_tier_field(sys, tier, TS_TIER_HANDSHAKE_RTTS) * 2.0 * lat;
}

/* network.py boundary_link_bandwidth: per sending GPU on tier links that only the GPUs of one
 * of the inner domain's inner_members group members use (bandwidth * efficiency /
 * max(o / inner_members, min(o, 1))). */
TS_FN double ts_boundary_link_bandwidth(const ts_net *net, int tier, double inner_members)
{
    double o = net->oversub[tier];
    double factor = o / inner_members;
    double floor = o < 1.0 ? o : 1.0;
    if (factor < floor)
        factor = floor;
    {
        double bw = net->line_bw[tier] / factor;
        return TS_PYMIN(bw, net->window_bw[tier]);
    }
}

/* Per-batch network view: every tier_* value the collectives read, computed once. */
TS_FN void ts_net_init(ts_net *net, const double *sys)
{
    int n = ts_n_tiers(sys);
    net->n_tiers = n;
    net->any_comm_dtype = 0;
    /* collectives.py codec_time: memory-bound at the achieved HBM bandwidth */
    net->inv_codec = 1.0 / (sys[TS_SYS_HBM_BANDWIDTH] * sys[TS_SYS_MEMORY_EFFICIENCY]);
    for (int i = 0; i < TS_MAX_TIERS; i++) {
        if (i < n) {
            net->comm_dtype_bytes[i] = ts_tier_field(sys, i, TS_TIER_COMM_DTYPE_BYTES);
            if (net->comm_dtype_bytes[i] > 0.0)
                net->any_comm_dtype = 1;
            net->span[i] = ts_tier_span(sys, i);
            net->link_bw[i] = ts_tier_link_bandwidth(sys, i);
            net->path_bw[i] = ts_tier_path_bandwidth(sys, i);
            net->latency[i] = ts_tier_latency(sys, i);
            net->inv_link_bw[i] = 1.0 / net->link_bw[i];
            net->inv_path_bw[i] = 1.0 / net->path_bw[i];
            net->line_bw[i] = ts_tier_field(sys, i, TS_TIER_BANDWIDTH)
                              * ts_tier_field(sys, i, TS_TIER_EFFICIENCY);
            net->oversub[i] = ts_tier_field(sys, i, TS_TIER_OVERSUBSCRIPTION);
            net->window_bw[i] = ts_transport_window_bandwidth(sys, i);
        } else {
            net->comm_dtype_bytes[i] = 0.0;
            net->window_bw[i] = INFINITY;
            net->line_bw[i] = 0.0;
            net->oversub[i] = 1.0;
            net->inv_link_bw[i] = 0.0;
            net->inv_path_bw[i] = 0.0;
            net->span[i] = INFINITY;
            net->link_bw[i] = 0.0;
            net->path_bw[i] = 0.0;
            net->latency[i] = 0.0;
        }
    }
    net->capacity = ts_tier_capacity(sys);
    /* network.py n_sites / site_link_tier: links of the site graph (checked to be
     * 0..TS_MAX_SITES by ts_check_blocks) */
    net->n_sites = (int)sys[TS_SYS_N_SITES];
    for (int a = 0; a < TS_MAX_SITES; a++)
        for (int b = 0; b < TS_MAX_SITES; b++) {
            int link = TS_MAX_TIERS + a * TS_MAX_SITES + b;
            if (a < net->n_sites && b < net->n_sites && a != b) {
                net->site_latency[a][b] = ts_tier_latency(sys, link);
                net->site_line_bw[a][b] = ts_tier_field(sys, link, TS_TIER_BANDWIDTH)
                                          * ts_tier_field(sys, link, TS_TIER_EFFICIENCY);
                net->site_oversub[a][b] = ts_tier_field(sys, link, TS_TIER_OVERSUBSCRIPTION);
                net->site_window_bw[a][b] = ts_transport_window_bandwidth(sys, link);
            } else {
                net->site_latency[a][b] = 0.0;
                net->site_line_bw[a][b] = 0.0;
                net->site_oversub[a][b] = 1.0;
                net->site_window_bw[a][b] = INFINITY;
            }
        }
}

/* network.py order_dim_at: dimension at a position of a placement order (Lehmer code). */
TS_FN int ts_order_dim_at(int order, int position)
{
    int used = 0, rank = order, dim = 0;
    for (int pos = 0; pos <= position; pos++) {
        int radix = 1, digit, seen = -1;
        for (int k = 1; k < TS_N_DIMS - pos; k++)
            radix *= k;
        digit = rank / radix;
        rank = rank - digit * radix;
        for (int d = 0; d < TS_N_DIMS; d++) {
            if (((used >> d) & 1) == 0) {
                seen += 1;
                if (seen == digit) {
                    dim = d;
                    break;
                }
            }
        }
        used |= 1 << dim;
    }
    return dim;
}

/* network.py order_permutation: every dimension of an order, innermost first -- the Lehmer
 * code of order_dim_at decoded in one pass (digit p has radix (N_DIMS-1-p)!). */
TS_FN void ts_order_permutation(int order, int8_t perm[TS_N_DIMS])
{
    int used = 0, rank = order, radix = 1;
    for (int k = 1; k < TS_N_DIMS; k++)
        radix *= k;
    for (int pos = 0; pos < TS_N_DIMS; pos++) {
        int digit = rank / radix, seen = -1, dim = 0;
        rank -= digit * radix;
        for (int d = 0; d < TS_N_DIMS; d++) {
            if (((used >> d) & 1) == 0) {
                seen += 1;
                if (seen == digit) {
                    dim = d;
                    break;
                }
            }
        }
        used |= 1 << dim;
        perm[pos] = (int8_t)dim;
        if (pos < TS_N_DIMS - 1)
            radix /= TS_N_DIMS - 1 - pos;
    }
}

/* network.py placement_strides: stride of each dimension = product of the degrees inside it.
 * Takes the decoded permutation of the order; writes strides[TS_DIM_*]. */
TS_FN void ts_placement_strides(const int8_t perm[TS_N_DIMS], double deg_tp, double deg_cp,
                                double deg_ep, double deg_dp, double deg_pp,
                                double strides[TS_N_DIMS])
{
    double deg[TS_N_DIMS];
    double stride = 1.0;
    deg[TS_DIM_TP] = deg_tp;
    deg[TS_DIM_CP] = deg_cp;
    deg[TS_DIM_EP] = deg_ep;
    deg[TS_DIM_DP] = deg_dp;
    deg[TS_DIM_PP] = deg_pp;
    for (int pos = 0; pos < TS_N_DIMS; pos++) {
        int d = perm[pos];
        strides[d] = stride;
        stride *= deg[d];
    }
}

/* network.py dim_members_within: min(degree, max(1, floor(span / stride))). */
TS_FN double ts_dim_members_within(double span, double degree, double stride)
{
    double inside;
    if (span >= stride * degree)
        return degree;
    /* span < stride: floor(span / stride) is 0 (or 1 when the quotient rounds up to 1.0);
     * either way the answer is 1 -- skip the division */
    if (span < stride)
        return 1.0;
    /* 1 <= span / stride < degree <= 2^31 here, so truncation is floor (and needs no SSE4.1
     * round instruction or libm call) */
    inside = (double)(int64_t)(span / stride);
    if (inside < 1.0)
        return 1.0;
    return inside;
}

/* network.py group_members_within: members of a group in one aligned block of span ranks. */
TS_FN double ts_group_members_within(double span, double n_a, double s_a, double n_b,
                                     double s_b, double n_c, double s_c)
{
    return ts_dim_members_within(span, n_a, s_a) * ts_dim_members_within(span, n_b, s_b)
           * ts_dim_members_within(span, n_c, s_c);
}

/* network.py group_fanout: tier-(tier-1) sub-groups one tier-`tier` sub-group joins. */
TS_FN double ts_group_fanout(const ts_net *net, int tier, double n_a, double s_a, double n_b,
                             double s_b, double n_c, double s_c)
{
    double inner = 1.0, outer;
    if (tier > 0)
        inner = ts_group_members_within(net->span[tier - 1], n_a, s_a, n_b, s_b, n_c, s_c);
    outer = ts_group_members_within(net->span[tier], n_a, s_a, n_b, s_b, n_c, s_c);
    return outer / inner;
}

/* network.py group_top_tier: outermost tier the group crosses (-1 for one rank). */
TS_FN int ts_group_top_tier(const ts_net *net, double n_a, double s_a, double n_b, double s_b,
                            double n_c, double s_c)
{
    int top = -1;
    for (int i = 0; i < net->n_tiers; i++)
        if (ts_group_fanout(net, i, n_a, s_a, n_b, s_b, n_c, s_c) > 1.0)
            top = i;
    return top;
}

/* A group's size, fan-out per tier and top tier, computed once (group_size, group_fanout and
 * group_top_tier of network.py / collectives.py with the per-tier member counts shared). */
TS_FN void ts_group_init(ts_group *g, const ts_net *net, double n_a, double s_a, double n_b,
                         double s_b, double n_c, double s_c)
{
    double inner = 1.0;
    int top = -1;
    g->n = ts_group_size(n_a, n_b, n_c);
    if (n_a == 1.0 && n_b == 1.0 && n_c == 1.0) {
        /* one rank: every members-within count is 1, every fan-out 1/1 */
        for (int i = 0; i < net->n_tiers; i++)
            g->fanout[i] = 1.0;
        g->top = -1;
        g->crossings = 0;
        return;
    }
    g->crossings = 0;
    for (int i = 0; i < net->n_tiers; i++) {
        double outer = ts_group_members_within(net->span[i], n_a, s_a, n_b, s_b, n_c, s_c);
        double f;
        /* outer / inner, skipping the division where it is exact without one */
        if (inner == 1.0)
            f = outer;
        else if (outer == inner)
            f = 1.0;
        else
            f = outer / inner;
        g->fanout[i] = f;
        if (f > 1.0) {
            top = i;
            g->crossings += 1;
        }
        inner = outer;
    }
    g->top = top;
}

/* ts_group_init for a group of one dimension (the other two of degree 1, whose members-within
 * counts are exactly 1): the same values with a third of the work. */
TS_FN void ts_group_init1(ts_group *g, const ts_net *net, double n, double stride)
{
    double inner = 1.0;
    int top = -1, crossings = 0;
    g->n = n; /* group_size(n, 1, 1) */
    if (n == 1.0) {
        for (int i = 0; i < net->n_tiers; i++)
            g->fanout[i] = 1.0;
        g->top = -1;
        g->crossings = 0;
        return;
    }
    for (int i = 0; i < net->n_tiers; i++) {
        double outer = ts_dim_members_within(net->span[i], n, stride);
        double f;
        if (inner == 1.0)
            f = outer;
        else if (outer == inner)
            f = 1.0;
        else
            f = outer / inner;
        g->fanout[i] = f;
        if (f > 1.0) {
            top = i;
            crossings += 1;
        }
        inner = outer;
    }
    g->top = top;
    g->crossings = crossings;
}
