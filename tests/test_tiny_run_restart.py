"""The tiny complete run (tests/tiny_run.py) killed with SIGKILL then started again ends with
the reference's tables."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.tables import comparable_tables, difference
from tests.tiny_run import finish, reference_figures, start_cli_run
from warehouse import connect, read_frame


@pytest.mark.flow
def test_killed_run_restarted_ends_with_the_same_tables(tmp_path, reference_run, prefect_harness):
    crashed = tmp_path / "a" / "wh.duckdb"
    reference_figures(reference_run, crashed)
    # One task at a time, so the kill lands in a known stage.
    proc = start_cli_run(crashed, tmp_path / "prefect-a", "--task-runner", "sequential")
    # Kill in the middle of training: the first checkpoint file exists, its registration
    # may or may not have committed, evaluation has not started.
    checkpoints = crashed.parent / "policies"
    deadline = time.monotonic() + 600
    while not list(checkpoints.glob("*.pt")):
        assert proc.poll() is None, "the run ended before it could be killed: " + (
            proc.stdout.read() if proc.stdout else ""
        )
        assert time.monotonic() < deadline, "no checkpoint within 10 minutes"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with connect(crashed, read_only=True) as con:
        status = read_frame(con, "SELECT status FROM pipeline_runs")["status"].to_list()
        evaluated = read_frame(con, "SELECT count(*) AS n FROM eval_runs")["n"][0]
    assert status == ["running"] and evaluated == 0  # it really stopped midway

    finish(start_cli_run(crashed, tmp_path / "prefect-a", "--task-runner", "sequential"))
    # The same run never interrupted (tests/tiny_run.py).
    resumed, expected = comparable_tables(crashed), comparable_tables(reference_run.warehouse)
    assert resumed.keys() == expected.keys()
    for table, frame in expected.items():
        assert resumed[table].equals(frame), difference(table, resumed[table], frame)
    assert expected["eval_summary"].height > 0
    systems = set(expected["policies"]["system"])
    assert {"dl2", "harmony", "harmony-reward-model", "chic", "chic-pair", "rl-taps"} <= systems
    # Every paper's own-scenario evaluation lands in the one family of evaluation tables.
    assert {"harmony", "chic", "rl-taps"} <= set(expected["eval_summary"]["scenario"])
    assert "rl-taps-arena" in systems
    assert "rl-taps" in set(expected["eval_summary"]["scheduler"])
    with connect(crashed, read_only=True) as con:
        runs = read_frame(con, "SELECT status FROM pipeline_runs ORDER BY started_at")
    # The restart found the killed run's process gone and marked it; the restart completed.
    assert runs["status"].to_list() == ["interrupted", "completed"]
