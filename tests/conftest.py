"""Shared fixtures. Prefect state goes to a temporary folder, never ~/.prefect."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

# Before any test module imports prefect.
os.environ.setdefault("PREFECT_HOME", tempfile.mkdtemp(prefix="schedlab-prefect-"))
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")

import pytest

pytest_plugins = ["tests.tiny_run"]

DATA = Path(__file__).parent / "data"
TRACES = DATA / "traces"


@pytest.fixture
def warehouse_path(tmp_path, monkeypatch) -> Path:
    """A fresh warehouse file; also the default for code that reads $SCHEDLAB_WAREHOUSE."""
    path = tmp_path / "wh.duckdb"
    monkeypatch.setenv("SCHEDLAB_WAREHOUSE", str(path))
    return path


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


FIRST = (
    # Makes the reference tiny run (tests/tiny_run.py), then the CLI run compared with it.
    "tests/test_tiny_run.py",
    # Need no tiny run: they fill the other worker while the reference is made (50-80 s).
    "tests/test_ingest_bulk.py",
    "tests/test_lifeline.py",
    "tests/test_warehouse_errors.py",
    "tests/test_dl2_pipeline.py",
    # The other runs compared with the reference, which they wait for, longest first.
    "tests/test_tiny_run_ray.py",
    "tests/test_tiny_run_restart.py",
    "tests/test_cli_and_flows.py",
    "tests/test_frame_checks.py",
)
"""The modules handed out first, in this order (measured durations; see
`pytest_collection_modifyitems`)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """`FIRST`, then the modules with the most end-to-end flows, the rest in their usual
    order: pytest-xdist hands whole modules to its workers in this order (`--dist loadfile
    --no-loadscope-reorder` in pyproject.toml), so the long ones start at once instead of
    one of them running alone at the end. The runs that compare with the reference tiny run
    start once it is made (they read back its report figures): one worker makes it first
    while the other runs modules that need no tiny run."""
    flows = Counter(item.nodeid.split("::")[0] for item in items if item.get_closest_marker("flow"))

    def rank(item) -> tuple[int, int]:
        module = item.nodeid.split("::")[0]
        return (FIRST.index(module) if module in FIRST else len(FIRST), -flows[module])

    items.sort(key=rank)
