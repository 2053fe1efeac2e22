"""The tiny complete run (tests/tiny_run.py) through `schedlab run` in local worker processes
(its default) gives the reference's tables; readers get an answer or a clear "busy" during
the run, and stage lines reach the terminal from the worker processes.

The other ways of running it are in their own modules (tests/test_tiny_run_ray.py,
tests/test_tiny_run_restart.py) so that pytest-xdist can run them beside this one; the
reference is made once for all of them."""

from __future__ import annotations

import re

import pytest

from pipelines.runners import RunnerConfig, available_cores, default_runner, task_runner
from tests.tables import assert_same_tables


@pytest.mark.flow
def test_local_processes_give_the_same_tables(cli_run, reference_run):
    # The reference ran in-process, one task at a time.
    assert "task runner processes (" in cli_run.output
    assert_same_tables(cli_run.warehouse, reference_run.warehouse)


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
def test_readers_get_answers_during_a_run(cli_run):
    # Each answer was a result, a clear busy (exit 3) or "does not exist yet".
    assert cli_run.reader_errors == []
    assert 0 in cli_run.reader_codes  # readers get answers between stages


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
