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


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The modules with the most end-to-end flows first, the rest in their usual order:
    pytest-xdist hands whole modules to its workers in this order (`--dist loadfile
    --no-loadscope-reorder` in pyproject.toml), so the long ones start at once instead of
    one of them running alone at the end."""
    flows = Counter(item.nodeid.split("::")[0] for item in items if item.get_closest_marker("flow"))
    items.sort(key=lambda item: -flows[item.nodeid.split("::")[0]])
