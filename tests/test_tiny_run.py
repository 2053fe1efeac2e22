"""The tiny complete run (tests/tiny_run.py) through `schedlab run` in local worker processes
(its default) gives the reference's tables; readers get an answer or a clear "busy" during
the run, and stage lines reach the terminal from the worker processes.

The other ways of running it are in their own modules (tests/test_tiny_run_ray.py,
tests/test_tiny_run_restart.py) so that pytest-xdist can run them beside this one; the
reference is made once for all of them."""

from __future__ import annotations

import multiprocessing
import os
import re

import pytest

from pipelines.runners import RunnerConfig, available_cores, default_runner, task_runner
from tests.tables import assert_same_tables
from tracelib import provenance


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


def _child_version(queue) -> None:
    queue.put(provenance.code_version())


def _version_in_a_spawned_process() -> str:
    context = multiprocessing.get_context("spawn")  # as the task runners start workers
    queue = context.Queue()
    child = context.Process(target=_child_version, args=(queue,))
    child.start()
    version = queue.get(timeout=120)
    child.join()
    return version


@pytest.fixture
def fresh_code_version():
    """No version pinned in the environment and none cached; afterwards, as before."""
    before = os.environ.pop(provenance.CODE_VERSION_ENV, None)
    provenance.code_version.cache_clear()
    yield
    os.environ.pop(provenance.CODE_VERSION_ENV, None)
    if before is not None:
        os.environ[provenance.CODE_VERSION_ENV] = before
    provenance.code_version.cache_clear()


def test_a_runs_workers_stamp_the_code_version_it_started_with(fresh_code_version):
    # What this process pins, a process it starts afterwards stamps, without asking git
    # again: an edit to the checkout while a run goes on (the checkout turning "-dirty")
    # would otherwise give its later workers other checkpoint bytes and policy ids.
    os.environ[provenance.CODE_VERSION_ENV] = "1.0+gabcdef123456-test"
    assert _version_in_a_spawned_process() == "1.0+gabcdef123456-test"
    # A runner with worker processes pins this process's own version for them.
    del os.environ[provenance.CODE_VERSION_ENV]
    task_runner(RunnerConfig("processes", workers=1))
    own = provenance.code_version()
    assert os.environ[provenance.CODE_VERSION_ENV] == own
    assert _version_in_a_spawned_process() == own
