"""Table-column-wise search forms: column shards on consecutive ranks of one node (TorchRec's
table-column-wise sharding), offered only when the world spans several nodes."""

from __future__ import annotations

import numpy as np

from trainscape import dlrm
from trainscape.dlrm import balance
from trainscape.dlrm import layout as D


def scenario(gpus, node=8):
    tables = [{"name": f"t{i}", "rows": 10_000 * (i + 1), "dim": 128, "pooling": 4.0}
              for i in range(4)]
    tiers = [{"name": "node", "size": node, "bandwidth_GBps": 400.0, "latency_us": 2.0},
             {"name": "net", "size": 16, "bandwidth_GBps": 50.0, "latency_us": 10.0}]
    raw = {"model": {"tables": tables, "interaction": "dcn", "dense_arch": [64, 32],
                     "over_arch": [64, 1]},
           "job": {"global_batch": 128 * gpus},
           "cluster": {"gpu": "h100-sxm-80gb", "gpus": gpus, "tiers": tiers,
                       "host_ddr_gb": 512.0, "host_to_device_GBps": 32.0}}
    return dlrm.load(raw)


def forms(sc):
    plan = np.zeros((D.N_PLAN, sc.n_tables), dtype=np.int32)
    return balance.table_forms(sc, plan, 0, 0.0, 1e30)


def local(sc):
    """Column-wise forms of stride 1 that fit in a node and are not the whole world (a spread
    form of k >= W / 2 shards also has stride 1)."""
    return [f[1] for f in forms(sc) if f[0] == D.SH_CW and f[2] == 1 and f[1] <= 8
            and f[1] < sc.world]


def test_node_local_forms_only_across_nodes():
    assert local(scenario(24)) == [2, 4]
    assert local(scenario(8)) == []


def test_node_local_bases_keep_the_shards_in_one_node():
    # 20 ranks in nodes of 8: {0..7}, {8..15}, {16..19}; 4 shards at b, b+1, b+2, b+3
    np.random.seed(0)
    seen = set()
    for _ in range(2000):
        b = int(balance._random_base(balance.IK_CW, 4, 1, 20, 8, 3))
        assert b // 8 == (b + 3) // 8 and b + 3 < 20
        seen.add(b)
    assert seen == {0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 16}
