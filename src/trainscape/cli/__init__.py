"""The ``trainscape`` command line: every command lives in this package, one module per command
(``explore`` holds its siblings ``sweep`` and ``search``), imported only when used.

Adding a command: create ``src/trainscape/cli/<name>.py`` defining a click command and list it in
:data:`COMMANDS`.
Shared pieces for commands: :data:`scenario_argument`, :data:`set_option`,
:func:`load_scenario_arg`. Any :class:`~trainscape.spec.ScenarioError` a command raises is
printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import importlib

import click

from ..spec import ScenarioError
from . import options as O

#: Exit code for bad input (scenario files, overrides, options).
EXIT_BAD_INPUT = 2


class InputError(click.ClickException):
    """Bad input: printed as ``Error: <one line>`` on stderr, exit code 2."""

    exit_code = EXIT_BAD_INPUT


#: Every command: name -> (module of this package, click command attribute in it). Modules are
#: imported only when their command runs, so ``trainscape --help`` stays fast.
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("bench", "command"),
    "evaluate": ("evaluate", "command"),
    "explore": ("explore", "explore"),
    "pack": ("pack", "command"),
    "presets": ("presets", "command"),
    "search": ("explore", "search"),
    "shard": ("shard", "command"),
    "sweep": ("explore", "sweep"),
    "validate": ("validate", "command"),
    "what-if": ("what_if", "command"),
}


class CommandsGroup(click.Group):
    """A group whose commands live in this package (see :data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in COMMANDS:
            return found
        module_name, attr = COMMANDS[cmd_name]
        module = importlib.import_module(f"{__name__}.{module_name}")
        return getattr(module, attr)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ScenarioError as exc:
            raise InputError(str(exc)) from None


@click.group(cls=CommandsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trainscape")
def main() -> None:
    """trainscape: how should this training job be laid out on this machine park, and how
    long will a step take?"""


scenario_argument = click.argument("scenario", type=O.Path(dir_okay=False, path_type=str))

set_option = click.option(
    "--set", "overrides", multiple=True, metavar="PATH=VALUE",
    help="Override a scenario field before validation, e.g. "
         "--set cluster.tiers[2].bandwidth_GBps=100 (value parsed as TOML). Repeatable.")


def load_scenario_arg(path: str, overrides=()):
    """Load a scenario for a command (errors become exit code 2 via the group)."""
    from ..api import load

    return load(path, overrides)
