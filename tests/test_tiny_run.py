"""The tiny complete run (tests/tiny_run.py) made every way a user can make it gives the
same tables: one task at a time, in local worker processes (`schedlab run`'s default), on
a local Ray instance, and killed with SIGKILL then started again. Readers get an answer or
a clear "busy" during a run, and stage lines reach the terminal from worker processes.

All in one module: pytest-xdist sends a module's tests to one worker (`--dist loadfile`),
so the session's shared runs are made once."""

from __future__ import annotations

import os
import re
import signal
import time

import polars as pl
import pytest

from pipelines.runners import RunnerConfig, available_cores, default_runner, task_runner
from tests.tables import comparable_tables
from tests.tiny_run import TINY, finish, start_cli_run
from warehouse import connect, read_frame


def _difference(table: str, got: pl.DataFrame, expected: pl.DataFrame) -> str:
    """Where two versions of a table part: the columns and the first rows that differ (a
    nondeterminism is found from this message, not by re-running under the same load)."""
    if got.shape != expected.shape:
        return f"{table}: shape {got.shape}, expected {expected.shape}"
    columns = [c for c in expected.columns if not got[c].equals(expected[c])]
    rows = [i for i in range(expected.height) if got.row(i) != expected.row(i)][:3]
    keys = [c for c in expected.columns if c not in columns][:4]
    shown = [
        {
            "row": i,
            **{c: expected[c][i] for c in keys},
            **{c: (got[c][i], expected[c][i]) for c in columns},
        }
        for i in rows
    ]
    return f"{table} differs in columns {columns}; first rows (got, expected): {shown}"


def _assert_same(warehouse, reference) -> None:
    got, expected = comparable_tables(warehouse), comparable_tables(reference)
    assert got.keys() == expected.keys()
    for table, frame in expected.items():
        assert got[table].equals(frame), _difference(table, got[table], frame)


@pytest.mark.flow
def test_local_processes_give_the_same_tables(cli_run, reference_run):
    # The reference ran in-process, one task at a time.
    assert "task runner processes (" in cli_run.output
    _assert_same(cli_run.warehouse, reference_run)


@pytest.mark.flow
def test_stage_lines_come_from_worker_processes(cli_run):
    lines = cli_run.output.splitlines()
    stamped = [line for line in lines if re.match(r"^\d\d:\d\d:\d\d \[\+\s*\d+:\d\d\] ", line)]
    # Every trained variant's stage, run in a worker process, says when it ends.
    for stage in ("DL2 fine-tuning dl2-without-replay", "Harmony placement harmony", "HTML report"):
        assert any(re.search(rf"{re.escape(stage)} done in \d+\.\d s$", s) for s in stamped), stage
    # Not a terminal: lines, never a bar's control characters.
    assert "\x1b[" not in cli_run.output
    # The end summary follows the stage lines.
    assert lines.index(next(s for s in lines if s.startswith("run "))) > lines.index(stamped[-1])


@pytest.mark.flow
def test_a_local_ray_instance_gives_the_same_tables(reference_run, tmp_path):
    import ray  # the ray extra is part of .[dev]

    from pipelines.flows import nightly_flow

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runner = task_runner(RunnerConfig("ray", address=ray.get_runtime_context().gcs_address))
        nightly_flow.with_options(task_runner=runner)(warehouse=str(tmp_path / "wh.duckdb"), **TINY)
    finally:
        ray.shutdown()
    _assert_same(tmp_path / "wh.duckdb", reference_run)


def test_the_default_runner_uses_every_core_beyond_the_smoke_budget():
    many = available_cores() > 1
    assert default_runner("default") == ("processes" if many else "sequential")
    assert default_runner("large") == default_runner("default")
    assert default_runner("smoke") == "sequential"
    assert task_runner(RunnerConfig("processes"))._max_workers == available_cores()


def test_runner_config_is_checked():
    with pytest.raises(ValueError, match="unknown task runner"):
        RunnerConfig("threads")
    with pytest.raises(ValueError, match="needs the ray task runner"):
        RunnerConfig("processes", address="auto")


@pytest.mark.flow
def test_killed_run_restarted_ends_with_the_same_tables(tmp_path, reference_run, prefect_harness):
    crashed = tmp_path / "a" / "wh.duckdb"
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
    resumed, expected = comparable_tables(crashed), comparable_tables(reference_run)
    assert resumed.keys() == expected.keys()
    for table, frame in expected.items():
        assert resumed[table].equals(frame), _difference(table, resumed[table], frame)
    assert expected["eval_summary"].height > 0
    systems = set(expected["policies"]["system"])
    assert {"dl2", "harmony", "harmony-reward-model", "chic", "chic-pair", "rl-taps"} <= systems
    # Every paper's own-scenario evaluation lands in the one family of evaluation tables.
    assert {"harmony", "chic", "rl-taps"} <= set(expected["eval_summary"]["scenario"])
    assert "rl-taps-arena" in systems
    assert "rl-taps" in set(expected["eval_summary"]["scheduler"])
    with connect(crashed, read_only=True) as con:
        runs = read_frame(con, "SELECT status FROM pipeline_runs ORDER BY started_at")
    # The killed run stays visible as never finished; the restart completed.
    assert runs["status"].to_list() == ["running", "completed"]


@pytest.mark.flow
def test_readers_get_answers_during_a_run(cli_run):
    # Each answer was a result, a clear busy (exit 3) or "does not exist yet".
    assert cli_run.reader_errors == []
    assert 0 in cli_run.reader_codes  # readers get answers between stages
