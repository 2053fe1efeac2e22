"""One small but complete nightly run (every stage, every learned system, on 60 synthetic
jobs and a production trace from an incoming folder beside a file it rejects), made once per
test session and compared by several tests: the task runners and kill-and-restart each check
that their way of running gives exactly these tables.

    reference  the flow in-process with the sequential runner (the flow's default); made
               once per session even with several pytest-xdist workers (`shared_folder`):
               tests/test_tiny_run*.py compare with it and test_nightly_flow_end_to_end
               reads it and runs it again
    cli        `schedlab run` as a user starts it, with local worker processes (the default
               runner beyond the smoke budget), `schedlab sql` querying the warehouse all
               along (tests/test_tiny_run.py only)

The runs compared with the reference start with its report figures (`reference_figures`).
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

INCOMING = Path(__file__).parent / "data" / "incoming"
"""The run's incoming folder: a Helios sample and a Helios file missing its columns."""

SMALL_RUN = {"n_jobs": 60, "jobs_per_sequence": 10, "budget": "smoke"}
"""nightly_flow's parameters of a small run: 60 synthetic jobs in sequences of 10, at the
smoke budget (the tests' runs add their seed, systems and evaluation)."""

TINY = {
    "seed": 4,
    **SMALL_RUN,
    "incoming": str(INCOMING),
    "arena_training": "every-set",
    "eval_seeds": 1,
    "eval_sequences": 1,
}
"""The run: nightly_flow's parameters."""

TINY_ARGS = [
    "--seed",
    "4",
    "--jobs",
    "60",
    "--jobs-per-sequence",
    "10",
    "--incoming",
    str(INCOMING),
    "--budget",
    "smoke",
    "--arena-training",
    "every-set",
    "--eval-seeds",
    "1",
    "--eval-sequences",
    "1",
]
"""The same run as `schedlab run` arguments."""


def start_cli_run(warehouse: Path, prefect_home: Path, *extra: str) -> subprocess.Popen:
    """`schedlab run` of the tiny run in its own process group (stdout a pipe: stage lines,
    no bars). Inside the session's Prefect test harness it uses the harness's API server
    instead of starting a temporary one of its own (10-20 s each)."""
    from prefect.settings import PREFECT_API_URL

    env = {
        **os.environ,
        "PREFECT_HOME": str(prefect_home),
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    }
    if PREFECT_API_URL.value():
        env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pipelines.cli",
            "run",
            "--warehouse",
            str(warehouse),
            *TINY_ARGS,
            *extra,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: a kill reaches every child
    )


def finish(proc: subprocess.Popen) -> str:
    """Wait for a CLI run; its output (it must have succeeded)."""
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0, out
    return out


@dataclass(frozen=True)
class CliRun:
    warehouse: Path
    output: str
    """What `schedlab run` printed (stdout and stderr)."""
    reader_codes: list[int]
    """Exit status of every `schedlab sql` made while it ran."""
    reader_errors: list[str]
    """Their unexpected answers (none, or the test fails and shows them)."""


def query_while_running(proc: subprocess.Popen, warehouse: Path) -> tuple[list[int], list[str]]:
    """`schedlab sql` over and over while `proc` runs; each answer must be a result, a clear
    busy (exit 3) or a not-yet-created message. Returns the exit codes and bad answers."""
    from pipelines.cli import main

    codes, bad = [], []
    query = "SELECT count(*) AS n FROM jobs"
    while proc.poll() is None:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["sql", "--warehouse", str(warehouse), query])
        ok = (
            (code == 0 and "(1 rows)" in out.getvalue())
            or (
                code == 3
                and "is busy" in err.getvalue()
                and "Retry when that process is done" in err.getvalue()
            )
            or (code == 1 and "does not exist yet" in err.getvalue())
        )
        if not ok:
            bad.append(f"exit {code}: {out.getvalue()} {err.getvalue()}")
        codes.append(code)
        # Each query costs about 45 ms of CPU: every 0.2 s it took a fifth of a core from
        # the run it watches (and the test session); every half second, still some hundreds
        # of answers over the run.
        time.sleep(0.5)
    return codes, bad


def shared_folder(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder that `make` fills once per test session, even across pytest-xdist workers:
    the first worker to ask makes it, under a lock in the workers' common temporary folder,
    while any other waits and then reads the same folder. (A session fixture alone is made
    once per worker; the tiny run's modules are spread over the workers to balance them.)"""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        folder = tmp_path_factory.mktemp(name)
        make(folder)
        return folder
    root = tmp_path_factory.getbasetemp().parent  # shared by the session's workers
    made = root / f"{name}.made"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not made.exists():
            folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
            make(folder)  # if it fails, the next worker to ask tries again (and fails too)
            made.write_text(str(folder))
        return Path(made.read_text())


@dataclass(frozen=True)
class ReferenceRun:
    warehouse: Path
    summary: dict
    """The flow's summary as the run recorded it (`pipeline_runs.summary`)."""


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory, prefect_harness) -> ReferenceRun:
    """The tiny run, in-process one task at a time."""

    def make(folder: Path) -> None:
        from pipelines.flows import nightly_flow

        summary = nightly_flow(warehouse=str(folder / "wh.duckdb"), **TINY)
        # Five DL2 fine-tunings (DL2 by grouped PPO, then the paper's actor-critic, which
        # trains without exploration, so that ablation is the actor-critic itself, and
        # three variants of it), four Harmony placement trainings, two Chic and two RL-TAPS
        # trainings and three system evaluations: a parallel runner has work to spread.
        assert summary["dl2"]["finetune"]["metrics"]["algorithm"] == "grouped-ppo"
        assert len(summary["dl2"]["variants"]) == 4
        assert len(summary["harmony"]["placement"]) == 4
        assert len(summary["chic"]["train"]) == len(summary["rltaps"]["train"]) == 2

    warehouse = shared_folder(tmp_path_factory, "reference", make) / "wh.duckdb"
    from warehouse import connect, read_frame

    with connect(warehouse, read_only=True) as con:
        [recorded] = read_frame(con, "SELECT summary FROM pipeline_runs")["summary"]
    return ReferenceRun(warehouse, json.loads(recorded))


def reference_figures(reference: ReferenceRun, warehouse: Path) -> None:
    """Put the reference's report figures where a run into `warehouse` keeps its own
    (`pipelines.sections.Plots`, `reports/<stem>/plots/` beside it), before that run starts.
    A run that stores the reference's tables then reads back the report's 38 figures, each
    found by the hash of the data it plots, instead of drawing them again (12-20 s of CPU
    a run); a figure whose data differs is drawn. What a run is compared on is its tables,
    and its report is still written from them; the figures themselves are drawn by the
    reference and tested in tests/test_report_plots.py."""
    from pipelines.report import reports_dir

    shutil.copytree(reports_dir(reference.warehouse) / "plots", reports_dir(warehouse) / "plots")


@pytest.fixture(scope="session")
def cli_run(tmp_path_factory, prefect_harness, reference_run) -> CliRun:
    """The tiny run through the command line with local worker processes, a reader
    querying the warehouse all along."""
    folder = tmp_path_factory.mktemp("cli")
    warehouse = folder / "wh.duckdb"
    reference_figures(reference_run, warehouse)
    proc = start_cli_run(warehouse, folder / "prefect", "--task-runner", "processes")
    codes, bad = query_while_running(proc, warehouse)
    return CliRun(warehouse, finish(proc), codes, bad)
