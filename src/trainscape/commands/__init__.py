"""CLI commands, one module per command; each defines a click command named ``command``.
:class:`trainscape.cli.CommandsGroup` discovers them, so adding a module adds a command."""
