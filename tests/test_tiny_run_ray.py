"""The tiny complete run (tests/tiny_run.py) on a local Ray instance gives the reference's
tables."""

from __future__ import annotations

import pytest

from pipelines.runners import RunnerConfig, task_runner
from tests.tables import assert_same_tables
from tests.tiny_run import TINY, reference_figures


@pytest.mark.flow
def test_a_local_ray_instance_gives_the_same_tables(prefect_harness, tmp_path, reference_run):
    import ray  # the ray extra is part of .[dev]

    from pipelines.flows import nightly_flow

    reference_figures(reference_run, tmp_path / "wh.duckdb")
    # Idle workers are kept for the run: Ray ends one after a second idle by default, and
    # the next task then waits while a new one imports torch and the pipeline again (seven
    # workers started for this run instead of four, a fifth of its time).
    # One CPU: Ray still runs every task in its worker processes, carrying the tasks, their
    # arguments, results and progress lines, which is what this test is for; tasks running
    # at once are tested with the local worker processes (tests/test_tiny_run.py). Two CPUs
    # made Ray start more workers, each importing torch and the pipeline: 78 s of the
    # workers' CPU against 45 s (measured, the whole suite's second-largest cost).
    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        _system_config={"idle_worker_killing_time_threshold_ms": 600_000},
    )
    try:
        runner = task_runner(RunnerConfig("ray", address=ray.get_runtime_context().gcs_address))
        nightly_flow.with_options(task_runner=runner)(warehouse=str(tmp_path / "wh.duckdb"), **TINY)
    finally:
        ray.shutdown()
    assert_same_tables(tmp_path / "wh.duckdb", reference_run.warehouse)
