"""``trainscape what-if``: what each network tier must deliver for a layout."""

from __future__ import annotations

import json

import click

from . import load_scenario_arg, scenario_argument, set_option


@click.command("what-if")
@scenario_argument
@click.option("--config", "config_text", metavar="K=V,...",
              help="The layout (default: the scenario's [config]), as for evaluate.")
@click.option("--slowdown", "slowdown", type=float, default=5.0, show_default=True,
              help="Allowed slowdown of the step, in percent.")
@set_option
@click.option("--json", "as_json", is_flag=True, help="Print the requirements as JSON.")
def command(scenario: str, config_text: str | None, slowdown: float,
            overrides: tuple[str, ...], as_json: bool) -> None:
    """Required bandwidth: per network tier of SCENARIO, the bandwidth below which the
    layout's step slows by more than --slowdown percent (the other tiers as they are)."""
    from ..explore.whatif import required_bandwidth, requirements_table
    from ..spec import parse_assignments

    sc = load_scenario_arg(scenario, overrides)
    config = parse_assignments(config_text) if config_text is not None else None
    step0, reqs = required_bandwidth(sc, slowdown, config=config)
    if as_json:
        click.echo(json.dumps({"scenario": sc.name, "slowdown_pct": slowdown,
                               "step_time_s": step0, "tiers": [r.to_dict() for r in reqs]},
                              indent=2))
        return
    from ..report import make_console

    con = make_console()
    con.print(requirements_table(step0, reqs, slowdown,
                                 f"required bandwidth per tier for a step within "
                                 f"+{slowdown:g}% of {step0:.4f} s ({sc.name})"))
    con.print("needs: below it the step slows by more than the bound; 'any': the tier's "
              "traffic is not on the critical path (bandwidths per GPU, per direction).",
              soft_wrap=True)
