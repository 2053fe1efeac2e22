"""The tiny complete run (tests/tiny_run.py) on a local Ray instance gives the reference's
tables."""

from __future__ import annotations

import pytest

from pipelines.runners import RunnerConfig, task_runner
from tests.tables import assert_same_tables
from tests.tiny_run import TINY


@pytest.mark.flow
def test_a_local_ray_instance_gives_the_same_tables(prefect_harness, tmp_path, request):
    import ray  # the ray extra is part of .[dev]

    from pipelines.flows import nightly_flow

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        runner = task_runner(RunnerConfig("ray", address=ray.get_runtime_context().gcs_address))
        nightly_flow.with_options(task_runner=runner)(warehouse=str(tmp_path / "wh.duckdb"), **TINY)
    finally:
        ray.shutdown()
    # Asked for once this run is done: another worker may be making it meanwhile.
    reference_run = request.getfixturevalue("reference_run")
    assert_same_tables(tmp_path / "wh.duckdb", reference_run.warehouse)
