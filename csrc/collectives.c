/* Collective communication costs over the hierarchical network (alpha-beta model).
 * Port of src/trainscape/model/collectives.py: cheapest algorithm wins as in NCCL's tuner
 * (NVIDIA/nccl src/graph/tuning.cc); bus-bandwidth factors of nccl-tests doc/PERFORMANCE.md.
 * A group arrives as a ts_group (its size, top tier and per-tier fan-outs, see network.c). */
#include <string.h>

#include "ts_model.h"

/* collectives.py ring_all_reduce_time: 2(n-1) steps of nbytes/n (Patarasuk & Yuan 2009).
 * The hot path below calls the _inv twins, which take 1 / bandwidth (a per-batch value) and
 * multiply: the same formula to a few ulps, without a division per call. */
TS_FN double ts_ring_all_reduce_time(double n, double nbytes, double latency, double bandwidth)
{
    if (n <= 1.0)
        return 0.0;
    return 2.0 * (n - 1.0) * latency + 2.0 * (n - 1.0) / n * nbytes / bandwidth;
}

static inline double ts_ring_all_reduce_time_inv(double n, double nbytes, double latency,
                                                 double inv_bandwidth)
{
    if (n <= 1.0)
        return 0.0;
    return 2.0 * (n - 1.0) * latency + 2.0 * (n - 1.0) / n * nbytes * inv_bandwidth;
}

/* collectives.py ring_all_gather_time: n-1 steps of nbytes/n (nccl-tests PERFORMANCE.md). */
TS_FN double ts_ring_all_gather_time(double n, double nbytes, double latency, double bandwidth)
{
    if (n <= 1.0)
        return 0.0;
    return (n - 1.0) * latency + (n - 1.0) / n * nbytes / bandwidth;
}

static inline double ts_ring_all_gather_time_inv(double n, double nbytes, double latency,
                                                 double inv_bandwidth)
{
    if (n <= 1.0)
        return 0.0;
    return (n - 1.0) * latency + (n - 1.0) / n * nbytes * inv_bandwidth;
}

/* math.ceil(math.log2(n)) for n > 1 without a log: from the binary exponent of n
 * (n = m * 2^e, 1 <= m < 2: e when m == 1, else e + 1). Exact for every finite n > 1. */
TS_FN double ts_ceil_log2(double n)
{
    uint64_t bits;
    int64_t e;
    memcpy(&bits, &n, sizeof bits);
    e = (int64_t)((bits >> 52) & 0x7ff) - 1023;
    if ((bits & 0xfffffffffffffULL) != 0)
        e += 1;
    return (double)e;
}

/* collectives.py tree_all_reduce_time: double binary tree, 2 ceil(log2 n) latency steps
 * (Sanders, Speck, Traff 2009; NCCL 2.4). */
TS_FN double ts_tree_all_reduce_time(double n, double nbytes, double latency, double bandwidth)
{
    double depth;
    if (n <= 1.0)
        return 0.0;
    depth = ts_ceil_log2(n);
    return 2.0 * depth * latency + 2.0 * nbytes / bandwidth;
}

static inline double ts_tree_all_reduce_time_inv(double n, double nbytes, double latency,
                                                 double inv_bandwidth)
{
    double depth;
    if (n <= 1.0)
        return 0.0;
    depth = ts_ceil_log2(n);
    return 2.0 * depth * latency + 2.0 * nbytes * inv_bandwidth;
}

/* collectives.py group_size. */
TS_FN double ts_group_size(double n_a, double n_b, double n_c)
{
    return n_a * n_b * n_c;
}

/* collectives.py all_reduce_time: cheapest of ring, tree and hierarchical (ASTRA-sim
 * multi-dimensional reduce-scatter -> all-reduce -> all-gather). */
TS_FN double ts_all_reduce_time(const ts_net *net, double nbytes, const ts_group *g)
{
    double n = g->n, lat, bw, best, hier = 0.0, inner = 1.0, t;
    int top = g->top;
    if (n <= 1.0 || top < 0 || nbytes <= 0.0)
        return 0.0;
    lat = net->latency[top];
    bw = net->inv_path_bw[top];
    best = ts_ring_all_reduce_time_inv(n, nbytes, lat, bw);
    t = ts_tree_all_reduce_time_inv(n, nbytes, lat, bw);
    best = TS_PYMIN(best, t);
    if (g->crossings <= 1) /* one tier crossed: the hierarchical sum is the flat ring itself */
        return best;
    for (int i = 0; i <= top; i++) {
        double f = g->fanout[i];
        if (f > 1.0) {
            hier += ts_ring_all_reduce_time_inv(f, nbytes / inner, net->latency[i],
                                                net->inv_path_bw[i]);
            inner *= f;
        }
    }
    return TS_PYMIN(best, hier);
}

/* collectives.py all_gather_time: cheapest of ring and hierarchical all-gather. */
TS_FN double ts_all_gather_time(const ts_net *net, double nbytes, const ts_group *g)
{
    double n = g->n, best, hier = 0.0, inner = 1.0;
    int top = g->top;
    if (n <= 1.0 || top < 0 || nbytes <= 0.0)
        return 0.0;
    best = ts_ring_all_gather_time_inv(n, nbytes, net->latency[top], net->inv_path_bw[top]);
    if (g->crossings <= 1) /* one tier crossed: the hierarchical sum is the flat ring itself */
        return best;
    for (int i = 0; i <= top; i++) {
        double f = g->fanout[i];
        if (f > 1.0) {
            hier += ts_ring_all_gather_time_inv(f, nbytes / inner, net->latency[i],
                                                net->inv_path_bw[i]);
            inner *= f;
        }
    }
    return TS_PYMIN(best, hier);
}

/* collectives.py reduce_scatter_time: the all-gather's traffic run backwards. */
TS_FN double ts_reduce_scatter_time(const ts_net *net, double nbytes, const ts_group *g)
{
    return ts_all_gather_time(net, nbytes, g);
}

/* ---- compression of the data-parallel traffic per tier (comm_dtype; ZeRO++ qwZ / qgZ, Wang
 * et al. 2023, arXiv 2306.10209 §3.1, §3.3; DeepSeek-V3 1x128 scales, arXiv 2412.19437
 * §3.3.2) ---- */

/* collectives.py wire_bytes: the tier's format where narrower, never wider. */
TS_FN double ts_wire_bytes(double comm_dtype_bytes, double elem_bytes)
{
    if (comm_dtype_bytes > 0.0 && comm_dtype_bytes < elem_bytes)
        return comm_dtype_bytes;
    return elem_bytes;
}

/* collectives.py codec_time: quantize what is sent, dequantize what arrives, at HBM speed. */
static inline double ts_codec_time(const ts_net *net, double elements, double elem_bytes,
                                   double wire)
{
    return 2.0 * elements * (elem_bytes + wire) * net->inv_codec;
}

/* collectives.py compressed_ring_time at tier `tier` (its latency and path bandwidth). */
static inline double ts_compressed_ring_time(const ts_net *net, int tier, double f, double nbytes,
                                             double elem_bytes, int reduce)
{
    double wire, elements, lat = net->latency[tier], inv = net->inv_path_bw[tier];
    if (f <= 1.0)
        return 0.0;
    wire = ts_wire_bytes(net->comm_dtype_bytes[tier], elem_bytes);
    if (wire >= elem_bytes)
        return reduce ? ts_ring_all_reduce_time_inv(f, nbytes, lat, inv)
                      : ts_ring_all_gather_time_inv(f, nbytes, lat, inv);
    elements = nbytes / elem_bytes;
    if (reduce)
        return ts_ring_all_reduce_time_inv(f, elements * wire, lat, inv)
               + ts_codec_time(net, 2.0 * (f - 1.0) / f * elements, elem_bytes, wire);
    return ts_ring_all_gather_time_inv(f, elements * wire, lat, inv)
           + ts_codec_time(net, (f - 1.0) / f * elements, elem_bytes, wire);
}

/* collectives.py compressed_tree_time at tier `tier`. */
static inline double ts_compressed_tree_time(const ts_net *net, int tier, double n, double nbytes,
                                             double elem_bytes)
{
    double wire, elements, lat = net->latency[tier], inv = net->inv_path_bw[tier];
    if (n <= 1.0)
        return 0.0;
    wire = ts_wire_bytes(net->comm_dtype_bytes[tier], elem_bytes);
    if (wire >= elem_bytes)
        return ts_tree_all_reduce_time_inv(n, nbytes, lat, inv);
    elements = nbytes / elem_bytes;
    return ts_tree_all_reduce_time_inv(n, elements * wire, lat, inv)
           + ts_codec_time(net, 2.0 * elements, elem_bytes, wire);
}

/* collectives.py hierarchical_time's minimum over the algorithms, compressed: the flat ring at
 * the top tier (and, for an all-reduce, the tree), against the sum of each crossed tier's
 * ring on the data left to it, every tier in its comm_dtype. ``reduce``: all-reduce, else
 * all-gather / reduce-scatter. */
static double ts_compressed_collective_time(const ts_net *net, double nbytes, double elem_bytes,
                                            const ts_group *g, int reduce)
{
    double n = g->n, best, hier = 0.0, inner = 1.0, t;
    int top = g->top;
    if (n <= 1.0 || top < 0 || nbytes <= 0.0)
        return 0.0;
    best = ts_compressed_ring_time(net, top, n, nbytes, elem_bytes, reduce);
    if (reduce) {
        t = ts_compressed_tree_time(net, top, n, nbytes, elem_bytes);
        best = TS_PYMIN(best, t);
    }
    if (g->crossings <= 1) /* one tier crossed: the hierarchical sum is the flat ring itself */
        return best;
    for (int i = 0; i <= top; i++) {
        double f = g->fanout[i];
        if (f > 1.0) {
            hier += ts_compressed_ring_time(net, i, f, nbytes / inner, elem_bytes, reduce);
            inner *= f;
        }
    }
    return TS_PYMIN(best, hier);
}

/* collectives.py compressed_all_reduce_time: ts_all_reduce_time with each tier's ring (and the
 * flat algorithms at the top tier) in that tier's comm_dtype; the plain one when no tier has
 * a comm_dtype. */
TS_FN double ts_compressed_all_reduce_time(const ts_net *net, double nbytes, double elem_bytes,
                                           const ts_group *g)
{
    if (!net->any_comm_dtype)
        return ts_all_reduce_time(net, nbytes, g);
    return ts_compressed_collective_time(net, nbytes, elem_bytes, g, 1);
}

/* collectives.py compressed_all_gather_time (reduce-scatter alike). */
TS_FN double ts_compressed_all_gather_time(const ts_net *net, double nbytes, double elem_bytes,
                                           const ts_group *g)
{
    if (!net->any_comm_dtype)
        return ts_all_gather_time(net, nbytes, g);
    return ts_compressed_collective_time(net, nbytes, elem_bytes, g, 0);
}

/* ---- sites: the outermost tier of a cluster with two or more (job.sync) ---- */

/* collectives.py site_members: the group's members inside one site (the product of its
 * fan-outs below the outermost tier; all of them with fewer than two tiers). */
TS_FN double ts_site_members(const ts_net *net, const ts_group *g)
{
    double m = 1.0;
    if (net->n_tiers < 2 || g->n <= 1.0) /* one rank: its fan-outs may be left unset */
        return g->n;
    for (int i = 0; i < net->n_tiers - 1; i++)
        m *= g->fanout[i];
    return m;
}

/* collectives.py within_site_time: a group inside one site, the synchronous collective; a
 * group across sites, the hierarchical algorithm's tiers below the outermost (each in its
 * comm_dtype for traffic of elem_bytes per element). */
TS_FN double ts_within_site_time(const ts_net *net, double nbytes, double elem_bytes, int reduce,
                                 const ts_group *g)
{
    int t = net->n_tiers;
    double hier = 0.0, inner = 1.0;
    if (g->n <= 1.0 || nbytes <= 0.0)
        return 0.0;
    if (t < 2 || g->fanout[t - 1] <= 1.0)
        return reduce ? ts_compressed_all_reduce_time(net, nbytes, elem_bytes, g)
                      : ts_compressed_all_gather_time(net, nbytes, elem_bytes, g);
    for (int i = 0; i < t - 1; i++) {
        double f = g->fanout[i];
        if (f > 1.0) {
            hier += ts_compressed_ring_time(net, i, f, nbytes / inner, elem_bytes, reduce);
            inner *= f;
        }
    }
    return hier;
}

/* collectives.py cross_site_time: ring all-reduce over the sites of each member's
 * nbytes / site_members shard at the outermost tier, in its comm_dtype. */
TS_FN double ts_cross_site_time(const ts_net *net, double nbytes, double elem_bytes,
                                const ts_group *g)
{
    int t = net->n_tiers;
    double f;
    if (t < 2 || g->n <= 1.0 || nbytes <= 0.0)
        return 0.0;
    f = g->fanout[t - 1];
    if (f <= 1.0)
        return 0.0;
    return ts_compressed_ring_time(net, t - 1, f, nbytes / ts_site_members(net, g), elem_bytes,
                                   1);
}

/* collectives.py all_to_all_time: direct all-to-all, busiest tier's links set the time, plus
 * one latency of the outermost tier. */
TS_FN double ts_all_to_all_time(const ts_net *net, double nbytes, const ts_group *g)
{
    double n = g->n, worst = 0.0, inner = 1.0, members, t;
    int top = g->top;
    if (n <= 1.0 || top < 0 || nbytes <= 0.0)
        return 0.0;
    for (int i = 0; i <= top; i++) {
        members = inner * g->fanout[i];
        if (i == 0)
            t = (members - 1.0) / n * nbytes * net->inv_link_bw[0];
        else
            t = (n - inner) / n * nbytes * net->inv_link_bw[i];
        worst = TS_PYMAX(worst, t);
        inner = members;
    }
    return net->latency[top] + worst;
}

/* collectives.py node_limited_share: the share of the node-leaving bytes of an MoE
 * all-to-all that node-limited routing keeps (DeepSeek-V3 §2.1.2, §3.2.2). */
TS_FN double ts_node_limited_share(double copies, double max_nodes, double n, double node_members)
{
    double leave = copies * (n - node_members) / n;
    if (max_nodes <= 0.0 || leave <= max_nodes)
        return 1.0;
    return max_nodes / leave;
}

/* llm.py moe_all_to_all_pair_time's two collectives.py routed_all_to_all_time calls (dispatch
 * of nd bytes, combine of nc bytes over the same group) in one walk of the tiers; returns
 * their sum. */
TS_FN double ts_routed_all_to_all_pair_time(const ts_net *net, double nd, double nc,
                                            double copies, double max_nodes, const ts_group *g)
{
    double n = g->n, worst_d = 0.0, worst_c = 0.0, inner = 1.0, members, f, share = 1.0;
    double lat;
    int top = g->top;
    if (n <= 1.0 || top < 0)
        return 0.0;
    for (int i = 0; i <= top; i++) {
        members = inner * g->fanout[i];
        if (i == 0) {
            f = (members - 1.0) / n;
            worst_d = TS_PYMAX(worst_d, f * nd * net->inv_link_bw[0]);
            worst_c = TS_PYMAX(worst_c, f * nc * net->inv_link_bw[0]);
        } else {
            if (i == 1)
                share = ts_node_limited_share(copies, max_nodes, n, inner);
            f = (n - inner) / n;
            worst_d = TS_PYMAX(worst_d, f * nd * share * net->inv_link_bw[i]);
            worst_c = TS_PYMAX(worst_c, f * nc * share * net->inv_link_bw[i]);
        }
        inner = members;
    }
    lat = net->latency[top];
    return (nd > 0.0 ? lat + worst_d : 0.0) + (nc > 0.0 ? lat + worst_c : 0.0);
}

/* collectives.py p2p_time: one transfer at the outermost tier the group crosses. */
TS_FN double ts_p2p_time(const ts_net *net, double nbytes, const ts_group *g)
{
    int top = g->top;
    if (top < 0 || nbytes <= 0.0)
        return 0.0;
    return net->latency[top] + nbytes * net->inv_path_bw[top];
}

/* collectives.py pipeline_boundary_transfers: the p - 1 stage-boundary transfers of a
 * pipeline, each at the tier it crosses. out = {route, t_top, t_max}. */
TS_FN void ts_pipeline_boundary_transfers(const ts_net *net, double nbytes, double p,
                                          double s_pp, double out[3])
{
    double route = 0.0, t_top = 0.0, t_max = 0.0, inner = 1.0, nic = INFINITY, path;
    double path_inner = INFINITY, span_inner = 1.0;
    out[0] = out[1] = out[2] = 0.0;
    if (p <= 1.0 || nbytes <= 0.0)
        return;
    for (int i = 0; i < net->n_tiers; i++) {
        double members = ts_dim_members_within(net->span[i], p, s_pp);
        if (i == 0) {
            path = ts_boundary_link_bandwidth(net, 0, inner);
        } else {
            double bw = ts_boundary_link_bandwidth(net, i, inner);
            nic = TS_PYMIN(nic, bw);
            path = nic;
        }
        if (members > inner) {
            double f = members / inner;
            double d = ts_site_stride(s_pp, span_inner);
            if (i >= 1 && i == net->n_tiers - 1 && ts_site_path_applies(net, f, d)) {
                double st[3];
                ts_site_path_transfers(net, nbytes, inner, f, d, path_inner, st);
                route += st[0];
                t_top = st[1];
                if (st[2] > t_max)
                    t_max = st[2];
            } else {
                double t = net->latency[i] + nbytes / path;
                route += (p / inner - p / members) * t;
                t_top = t;
                if (t > t_max)
                    t_max = t;
            }
        }
        path_inner = nic;
        span_inner = net->span[i];
        inner = members;
        if (members >= p)
            break;
    }
    out[0] = route;
    out[1] = t_top;
    out[2] = t_max;
}

/* collectives.py site_stride: sites between consecutive stages. */
TS_FN double ts_site_stride(double s_pp, double site_span)
{
    if (s_pp > site_span)
        return s_pp / site_span;
    return 1.0;
}

/* collectives.py site_path_applies: pipelines of f sites, d apart, tile the site graph. */
TS_FN int ts_site_path_applies(const ts_net *net, double f, double d)
{
    int ns = net->n_sites;
    int64_t k, dd;
    if (ns < 2 || f < 2.0 || d < 1.0)
        return 0;
    if (f > (double)ns || d > (double)ns)
        return 0; /* (then k * dd > ns; keeps the casts below in range) */
    k = (int64_t)f;
    dd = (int64_t)d;
    if ((double)k != f || (double)dd != d || k * dd > ns)
        return 0;
    return ns % (k * dd) == 0;
}

/* collectives.py site_link_transfer: one stage-boundary transfer over the a -> b site link. */
TS_FN double ts_site_link_transfer(const ts_net *net, double nbytes, double inner, int a, int b,
                                   double nic)
{
    double o = net->site_oversub[a][b];
    double factor = o / inner;
    double floor = o < 1.0 ? o : 1.0;
    double bw;
    if (factor < floor)
        factor = floor;
    bw = net->site_line_bw[a][b] / factor;
    bw = TS_PYMIN(bw, net->site_window_bw[a][b]);
    if (nic < bw)
        bw = nic;
    return net->site_latency[a][b] + nbytes / bw;
}

/* collectives.py site_path_transfers: out = {route, wrap, worst}. */
TS_FN void ts_site_path_transfers(const ts_net *net, double nbytes, double inner, double f,
                                  double d, double nic, double out[3])
{
    int ns = net->n_sites;
    int k = (int)f, dd = (int)d;
    double route = 0.0, wrap = 0.0, worst = 0.0;
    for (int first = 0; first < ns; first++) {
        double r = 0.0, w;
        if ((first / dd) % k != 0)
            continue;
        for (int j = 0; j < k - 1; j++) {
            int a = first + j * dd;
            double t = ts_site_link_transfer(net, nbytes, inner, a, a + dd, nic);
            r += t;
            if (t > worst)
                worst = t;
        }
        if (r > route)
            route = r;
        w = ts_site_link_transfer(net, nbytes, inner, first + (k - 1) * dd, first, nic);
        if (w > wrap)
            wrap = w;
    }
    out[0] = route;
    out[1] = wrap;
    out[2] = worst;
}
