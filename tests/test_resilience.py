"""A `schedlab run` killed with SIGKILL and started again ends with the same tables as one
that was never interrupted; a reader during a run gets an answer or a clear "busy"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.tables import comparable_tables
from warehouse import connect, read_frame

# A small but complete run: every stage and every learned system, on 60 synthetic jobs.
TINY_RUN = [
    "--jobs",
    "60",
    "--jobs-per-sequence",
    "10",
    "--budget",
    "smoke",
    "--no-dl2-baselines",
    "--eval-seeds",
    "1",
    "--eval-sequences",
    "1",
]


def _run(warehouse: Path, prefect_home: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "pipelines.cli", "run", "--warehouse", str(warehouse), *TINY_RUN],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: the kill reaches every child
    )


def _finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


def _query_while_running(proc: subprocess.Popen, warehouse: Path, capsys) -> list[int]:
    """`schedlab sql` over and over while `proc` runs; each answer is a result, or a clear
    busy (exit 3) or not-yet-created message. Returns the exit codes seen."""
    from pipelines.cli import main

    codes = []
    query = "SELECT count(*) AS n FROM jobs"
    while proc.poll() is None:
        code = main(["sql", "--warehouse", str(warehouse), query])
        out, err = capsys.readouterr()
        if code == 0:
            assert "(1 rows)" in out
        elif code == 3:
            assert "is busy" in err and "Retry when that process is done" in err
        else:
            assert code == 1 and "does not exist yet" in err, (code, err)
        codes.append(code)
        time.sleep(0.2)
    return codes


@pytest.mark.flow
def test_killed_run_restarted_ends_with_the_same_tables(tmp_path, capsys):
    crashed = tmp_path / "a" / "wh.duckdb"
    proc = _run(crashed, tmp_path / "prefect-a")
    # Kill in the middle of DL2: the first checkpoint file exists, its registration may or
    # may not have committed, evaluation has not started.
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

    _finish(_run(crashed, tmp_path / "prefect-a"))
    # The uninterrupted run, with a user querying the warehouse all along.
    clean = tmp_path / "b" / "wh.duckdb"
    proc = _run(clean, tmp_path / "prefect-b")
    codes = _query_while_running(proc, clean, capsys)
    _finish(proc)
    assert 0 in codes  # readers get answers between stages

    resumed, expected = comparable_tables(crashed), comparable_tables(clean)
    assert resumed.keys() == expected.keys()
    for table, frame in expected.items():
        assert resumed[table].equals(frame), f"{table} differs after kill and restart"
    assert expected["eval_summary"].height > 0
    systems = set(expected["policies"]["system"])
    assert {"dl2", "harmony", "harmony-reward-model", "chic", "chic-pair", "rl-taps"} <= systems
    for table in ("harmony_evaluation", "chic_evaluation", "rltaps_evaluation"):
        assert expected[table].height > 0, table
    with connect(crashed, read_only=True) as con:
        runs = read_frame(con, "SELECT status FROM pipeline_runs ORDER BY started_at")
    # The killed run stays visible as never finished; the restart completed.
    assert runs["status"].to_list() == ["running", "completed"]
