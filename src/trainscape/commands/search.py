"""``trainscape search`` (see trainscape.explore.cli)."""

from ..explore.cli import search as command  # noqa: F401
