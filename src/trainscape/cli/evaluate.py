"""``trainscape evaluate``: cost one configuration of a scenario."""

from __future__ import annotations

import click

from . import load_scenario_arg, scenario_argument, set_option


@click.command("evaluate")
@scenario_argument
@click.option("--config", "config_text", metavar="K=V,...",
              help="Cost this configuration instead of the scenario's [config], e.g. "
                   "tp=8,pp=16,schedule=interleaved,vpp=2. Fields left out take their "
                   "defaults; dp is derived from the GPU count. (To tweak the file's [config] "
                   "use --set config.pp=8.)")
@set_option
@click.option("--json", "as_json", is_flag=True,
              help="Print every output field, the config, the scenario name and per network "
                   "tier the bytes per step and busy time (links) as JSON.")
def command(scenario: str, config_text: str | None, overrides: tuple[str, ...],
            as_json: bool) -> None:
    """Cost one configuration of SCENARIO (a TOML or JSON scenario file): step time,
    throughput, MFU, memory and the step-time breakdown, and how far the model was from
    published runs of the same GPU preset and software stack that no fit saw (its error
    band, docs/accuracy.md)."""
    from ..api import evaluate
    from ..spec import parse_assignments

    sc = load_scenario_arg(scenario, overrides)
    config = parse_assignments(config_text) if config_text is not None else None
    result = evaluate(sc, config)
    from ..api import error_band

    band = error_band(sc, result)
    if as_json:
        from ..api import link_report
        from ..jsonsafe import dumps

        out = result.to_dict()
        out["links"] = link_report(sc, config)
        from ..report import sync_summary

        out["sync"] = sync_summary(sc, result)
        from ..api import site_notes

        if sc.cluster.sites is not None:
            out["notes"] = site_notes(sc, config)
        out["error_band"] = band
        from ..api import pipeline_split

        out["pipeline_split"] = pipeline_split(sc, config)
        click.echo(dumps(out, indent=2))
        return
    from ..api import site_notes
    from ..report import make_console, render_result

    console = make_console()
    console.print(render_result(result, sc))
    for note in site_notes(sc, config):
        console.print("note: " + note, highlight=False)
    console.print("accuracy: " + band["text"], highlight=False)
