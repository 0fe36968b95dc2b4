"""The ``trainscape`` command line: a click group whose commands live in
:mod:`trainscape.commands`, one module per command, imported only when used.

Adding a command: create ``src/trainscape/commands/<name>.py`` defining a click command named
``command`` (``<name>`` with ``_`` becomes ``-`` on the command line). Nothing here changes.
Shared pieces for commands: :data:`scenario_argument`, :data:`set_option`,
:func:`load_scenario_arg`. Any :class:`~trainscape.spec.ScenarioError` a command raises is
printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import importlib
import pkgutil

import click

from .spec import ScenarioError
from .spec import options as O

#: Exit code for bad input (scenario files, overrides, options).
EXIT_BAD_INPUT = 2


class InputError(click.ClickException):
    """Bad input: printed as ``Error: <one line>`` on stderr, exit code 2."""

    exit_code = EXIT_BAD_INPUT


class CommandsGroup(click.Group):
    """A group that finds its commands as modules of ``trainscape.commands``."""

    package = "trainscape.commands"

    def _module_names(self) -> list[str]:
        pkg = importlib.import_module(self.package)
        return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                      if not m.name.startswith("_"))

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        names.update(n.replace("_", "-") for n in self._module_names())
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None:
            return found
        module_name = cmd_name.replace("-", "_")
        if module_name not in self._module_names():
            return None
        module = importlib.import_module(f"{self.package}.{module_name}")
        return module.command

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
    from .api import load

    return load(path, overrides)
