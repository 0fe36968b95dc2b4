"""``trainscape pack``: a scenario's packed blocks (and candidate set) for the C library."""

from __future__ import annotations

import click

from . import load_scenario_arg, scenario_argument, set_option


@click.command("pack")
@scenario_argument
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The pack file to write (replaced atomically).")
@click.option("--candidates", is_flag=True,
              help="Also write the candidate set (the scenario's [space] axes, or the default "
                   "axes) that ts_llm_best / ts_blocks_best search.")
@set_option
def command(scenario: str, out: str, candidates: bool, overrides: tuple[str, ...]) -> None:
    """Validate SCENARIO and write its packed system, model and job blocks to a pack file that
    the C library reads with ts_blocks_load (format: docs/embedding.md). The file records the
    ABI version and the layout hash; a library built for another layout refuses it."""
    from .. import layout as L
    from ..embed.packfile import abi_version, write_pack
    from ..spec.errors import ScenarioError

    sc = load_scenario_arg(scenario, overrides)
    try:
        size = write_pack(sc, out, candidates=candidates)
    except OSError as exc:
        raise ScenarioError.at("--out", f"cannot write the pack file ({exc.strerror})", out,
                               "a writable file path") from None
    what = "blocks and candidate set" if candidates else "blocks"
    click.echo(f"wrote {out} ({size} bytes): {what} of {sc.name!r} for {sc.cluster.gpus} GPUs, "
               f"ABI {abi_version()}, layout hash {L.layout_hash():#010x}")
