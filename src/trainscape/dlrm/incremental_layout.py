"""Slots of the incremental move scorer's state (:mod:`trainscape.dlrm.incremental`): the
numba scorer, the C scorer ``dl_score_moves`` (through ``csrc/dlrm.h``, generated from these by
:mod:`trainscape.native.dlrm_header`) and the C glue's shape checks all index by these names."""

MAXT = 6
NEG = -1.0e300
POS = 1.0e300
# scalar slots of the constants vector (then MAXT reciprocal link bandwidths)
C_TOP, C_LAT, C_UNIT_IDX, C_UNIT_FWD, C_UNIT_BWD, C_CONST_FWD, C_CONST_BWD, C_DENSE_AR, \
    C_USABLE, C_DDR_CAP, C_WORLD, C_UNI_IDX, C_TOT_POOL, C_TOT_IDX, C_FEASIBLE, C_STEP = range(16)
C_INV_BW = 16
N_C = C_INV_BW + MAXT
# rank rows of the state matrix
R_LF, R_LB, R_HBM, R_DDR, R_OWN0, R_OWN, R_IDX = range(7)
N_R = 7
# top-3 structures: 0 lf, 1 lb, 2 hbm, 3 ddr, then send[q][i], recv[q][i] (q 0 pooled, 1 index)
S_LF, S_LB, S_HBM, S_DDR = range(4)
S_SEND = 4
S_RECV = 4 + 2 * MAXT
N_S = 4 + 4 * MAXT
# per-table terms (table-wise, per memory tier)
TT_FWD, TT_BWD, TT_HBM, TT_DDR = range(4)
N_TT = 4
# candidate kinds
MV_MOVE, MV_SWAP, MV_TIER = range(3)
# Per-rank records (rows of ``rec``, one per rank; what the C scorer reads for ranks a and b):
# the rank's values, then per list the largest entry excluding this rank (its domain), and
# per tier i <= top and kind q a lane l = 2 i + q in each of N_G groups of L = 2 (top + 1):
# own weight, send factor, send list excluding the rank, its domain's sum, the receive list
# excluding its domain, the domain id, and (i = 0) the node's smallest own weight excluding
# the rank. ``rmask[r]`` holds bit masks of the lists with r (its domain) at position 0 / 1:
# the largest entry excluding {a, b} is the smaller of the two records' entries unless a and
# b are the list's first two (then the kernel takes the general path).
F_LF, F_LB, F_HBM, F_DDR, F_XLF, F_XLB, F_XHBM, F_XDDR = range(8)
F_G0 = 8
G_OWN, G_FAC, G_XS, G_DS, G_XR, G_DOM, G_NMX = range(7)
N_G = 7
B_LF, B_LB, B_HBM, B_DDR = range(4)
B_SEND = 4
B_RECV = B_SEND + 2 * MAXT
B_NB = B_RECV + 2 * MAXT
