"""``trainscape sweep`` (see trainscape.explore.cli)."""

from ..explore.cli import sweep as command  # noqa: F401
