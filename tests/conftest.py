"""Shared test setup: hypothesis profiles and the example scenarios.

Profiles: ``ci`` (default; ~50 examples, derandomized, no deadline) and ``thorough`` (1000
examples), chosen with the environment variable ``HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from backend_fixture import backend, backend_report, warm_backends  # noqa: F401 (fixtures)
from hypothesis import settings

settings.register_profile("ci", max_examples=50, deadline=None, derandomize=True)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
# command output follows COLUMNS where it is set (report.make_console); tests read the piped
# default, whatever terminal they are started from
os.environ.pop("COLUMNS", None)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_DIR = ROOT / "examples"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.toml"))


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES_DIR


@pytest.fixture(scope="session")
def llama_example() -> Path:
    return EXAMPLES_DIR / "llama3-405b-2bldg.toml"


@pytest.fixture(scope="session")
def gpt_example() -> Path:
    return EXAMPLES_DIR / "gpt3-175b-a100.toml"


@pytest.fixture(scope="session")
def moe_example() -> Path:
    return EXAMPLES_DIR / "mixtral-8x7b-moe.toml"


@pytest.fixture(params=EXAMPLES, ids=lambda p: p.stem)
def example_path(request) -> Path:
    """Each scenario file under examples/."""
    return request.param


def pytest_report_header() -> str:
    """Which kernel backends loaded (and why one did not), at the top of every run."""
    return backend_report()
