"""``python -m trainscape`` runs the command line (same as the ``trainscape`` script)."""

from .cli import main

main(prog_name="trainscape")
