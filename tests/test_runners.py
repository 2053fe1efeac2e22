"""The nightly flow's fan-out: the same seed gives the same tables whichever task runner
executes the tasks (one at a time, local processes, a local Ray instance)."""

from __future__ import annotations

import pytest

from pipelines.runners import RunnerConfig, task_runner
from tests.tables import comparable_tables

TINY = {
    "seed": 4,
    "n_jobs": 60,
    "jobs_per_sequence": 10,
    "budget": "smoke",
    "eval_seeds": 1,
    "eval_sequences": 1,
}


def _run(kind: str, warehouse, **runner) -> dict:
    from pipelines.flows import nightly_flow

    flow = nightly_flow.with_options(task_runner=task_runner(RunnerConfig(kind, **runner)))
    return flow(warehouse=str(warehouse), **TINY)


def _assert_same(warehouse, reference) -> None:
    got, expected = comparable_tables(warehouse), comparable_tables(reference)
    assert got.keys() == expected.keys()
    for table, frame in expected.items():
        assert got[table].equals(frame), f"{table} differs between task runners"


@pytest.fixture(scope="module")
def sequential(tmp_path_factory, prefect_harness):
    path = tmp_path_factory.mktemp("sequential") / "wh.duckdb"
    summary = _run("sequential", path)
    # Five DL2 fine-tunings, four Harmony placement trainings, two Chic and two RL-TAPS
    # trainings and three system evaluations: the fan-out had work to spread.
    assert len(summary["dl2"]["variants"]) == 4
    assert len(summary["harmony"]["placement"]) == 4
    assert len(summary["chic"]["train"]) == len(summary["rltaps"]["train"]) == 2
    return path


@pytest.mark.flow
def test_local_processes_give_the_same_tables(sequential, tmp_path):
    _run("processes", tmp_path / "wh.duckdb", workers=2)
    _assert_same(tmp_path / "wh.duckdb", sequential)


@pytest.mark.flow
def test_a_local_ray_instance_gives_the_same_tables(sequential, tmp_path):
    import ray  # the ray extra is part of .[dev]

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _run("ray", tmp_path / "wh.duckdb", address=ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()
    _assert_same(tmp_path / "wh.duckdb", sequential)


def test_runner_config_is_checked():
    with pytest.raises(ValueError, match="unknown task runner"):
        RunnerConfig("threads")
    with pytest.raises(ValueError, match="needs the ray task runner"):
        RunnerConfig("processes", address="auto")
