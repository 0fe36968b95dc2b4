"""``trainscape explore`` (see trainscape.explore.cli)."""

from ..explore.cli import explore as command  # noqa: F401
