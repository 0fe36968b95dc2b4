"""``trainscape shard``: plan the embedding sharding of a DLRM scenario (see trainscape.dlrm)."""

from ..dlrm.cli import command  # noqa: F401  (found by the commands group)
