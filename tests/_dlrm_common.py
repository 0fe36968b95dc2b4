"""A tiny DLRM scenario on disk for the command-line tests: 12 tables on 8 ZionEX GPUs."""

from __future__ import annotations

from pathlib import Path


def write_tiny_scenario(directory: Path, extra: str = "") -> Path:
    """``t.csv`` (12 tables, 1k-12k rows, dim 64, pooling 1-5) and ``s.toml`` in ``directory``;
    ``extra`` is appended to the TOML. Returns the scenario's path."""
    (directory / "t.csv").write_text("table,rows,dim,multi_hot\n" + "\n".join(
        f"c{i},{1000 * (i + 1)},64,{i % 5 + 1}" for i in range(12)) + "\n")
    scen = directory / "s.toml"
    scen.write_text(
        'name = "tiny"\n[model]\ntables_csv = "t.csv"\ninteraction = "dcn"\n'
        "[job]\nglobal_batch = 1024\n"
        '[cluster]\npreset = "zionex"\ngpus = 8\n' + extra)
    return scen
