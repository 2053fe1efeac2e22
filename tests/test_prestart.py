"""`schedlab run`'s worker processes start before the flow (pipelines/prestart.py): they
import what the tasks need and say so, the flow runs on that very pool, and its tasks use
the flow's Prefect API instead of starting a temporary server each."""

from __future__ import annotations

import os
import pickle
import re

import cloudpickle
import pytest
from prefect import flow, task

from pipelines.api import shared_api
from pipelines.prestart import PrestartedPool, WarmUp
from pipelines.progress import Reporter


@task
def where() -> tuple[int, str | None]:
    from prefect.settings import PREFECT_API_URL

    return os.getpid(), PREFECT_API_URL.value()


@flow
def two_tasks() -> list[tuple[int, str | None]]:
    return [future.result() for future in [where.submit(), where.submit()]]


@pytest.mark.flow
def test_the_flow_runs_on_the_prestarted_workers_with_the_flows_api(prefect_harness, capfd):
    from prefect.settings import PREFECT_API_URL

    pool = PrestartedPool(max_workers=2)
    pool.start(WarmUp(modules=("json",), progress=Reporter("lines")))
    try:
        workers = {p.pid for p in pool._executor._processes.values()}
        assert len(workers) == 2  # started before any task was submitted
        # The flow engine runs the flow on a duplicate of its runner: this pool itself; a
        # pickled copy (sent to tasks with the flow) is an unstarted description of it.
        assert pool.duplicate() is pool
        copy = pickle.loads(cloudpickle.dumps(pool))
        assert not copy._started and copy._executor is None and copy._max_workers == 2
        results = two_tasks.with_options(task_runner=pool)()
        assert {pid for pid, _ in results} <= workers
        assert {api for _, api in results} == {PREFECT_API_URL.value()}
        assert pool._executor is not None  # the pool outlives the flow until stop()
    finally:
        pool.stop()
    assert pool._executor is None
    out = capfd.readouterr().out
    ready = re.findall(r"worker process (\d+) ready \(\d+\.\d s importing", out)
    assert {int(pid) for pid in ready} == workers


@pytest.mark.flow
def test_shared_api_names_one_api_and_runs_meanwhile(prefect_harness):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    configured, ran = PREFECT_API_URL.value(), []
    with shared_api(meanwhile=lambda: ran.append("configured")):
        assert PREFECT_API_URL.value() == configured  # a configured API is used as is
    # None configured: a temporary server, whose address the settings now name.
    with temporary_settings(updates={PREFECT_API_URL: None}):
        with shared_api(meanwhile=lambda: ran.append("started")):
            assert PREFECT_API_URL.value().startswith("http://127.0.0.1:")
    assert ran == ["configured", "started"]
