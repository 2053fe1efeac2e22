"""Whole-trace replay engine (`tracelib.sim.replay`): hand-computed schedules per rule."""

from __future__ import annotations

import numpy as np
import pytest

from models.heuristics import REPLAYS
from tracelib.sim.replay import (
    ReplayCluster,
    ReplayJobs,
    ReplayRule,
    Unplaceable,
    replay,
)

# One 4-GPU server. A: t=0, 4 GPUs, 100 s (user 0); B: t=10, 1 GPU, 10 s (user 1);
# C: t=20, 4 GPUs, 50 s (user 0).
THREE = ReplayJobs(
    arrival_s=np.array([0.0, 10.0, 20.0]),
    duration_s=np.array([100.0, 10.0, 50.0]),
    gpus=np.array([4.0, 1.0, 4.0]),
    users=np.array([0, 1, 0]),
)
ONE_SERVER = ReplayCluster(1, 4.0)


def _finish(rule: str, **kw) -> list[float]:
    return replay(THREE, ONE_SERVER, REPLAYS.create(rule), **kw).jobs["finish_s"].to_list()


@pytest.mark.parametrize(
    ("rule", "finish"),
    [
        # A runs to 100; B (head, fits) 100-110; C needs the whole server: 110-160.
        ("fifo", [100.0, 110.0, 160.0]),
        ("sjf", [100.0, 110.0, 160.0]),
        # B's user holds nothing: B first at 100, then C.
        ("drf", [100.0, 110.0, 160.0]),
        # The widest job that fits at 100 is C (100-150); B after it.
        ("tetris", [100.0, 160.0, 150.0]),
        # B (10 s) preempts A (90 s left) at 10; C (50 s) beats A's 90 s at 20; A last.
        ("srtf", [160.0, 20.0, 70.0]),
    ],
)
def test_each_rule_gives_its_hand_computed_schedule(rule, finish):
    assert _finish(rule) == finish


def test_strict_fifo_blocks_where_backfill_does_not():
    # 4 GPUs; A (3 GPUs, 100 s) runs; B (4 GPUs) waits; C (1 GPU) fits beside A.
    jobs = ReplayJobs(
        np.array([0.0, 1.0, 2.0]), np.array([100.0, 10.0, 10.0]), np.array([3.0, 4.0, 1.0])
    )
    strict = replay(jobs, ONE_SERVER, REPLAYS.create("fifo")).jobs["finish_s"].to_list()
    backfill = replay(jobs, ONE_SERVER, REPLAYS.create("fifo-backfill")).jobs["finish_s"]
    assert strict == [100.0, 110.0, 120.0]
    assert backfill.to_list() == [100.0, 110.0, 12.0]


def test_a_preempted_job_pays_the_resume_cost_and_keeps_its_progress():
    result = replay(THREE, ONE_SERVER, REPLAYS.create("srtf"), preempt_cost_s=5.0)
    assert result.jobs["finish_s"].to_list() == [165.0, 20.0, 70.0]
    assert result.jobs["preemptions"].to_list() == [1, 0, 0]


def test_no_queueing_on_a_cluster_that_holds_the_peak():
    rng = np.random.default_rng(3)
    n = 400
    arrival = np.sort(rng.uniform(0, 5e4, n))
    duration = rng.lognormal(6, 1.5, n) + 1
    gpus = rng.choice([0.5, 1, 2, 4, 8, 16], n).astype(float)
    # Room for every job at once, however they fragment: one server per job.
    cluster = ReplayCluster(n, 16.0)
    jobs = ReplayJobs(arrival, duration, gpus)
    for name in REPLAYS.names():
        frame = replay(jobs, cluster, REPLAYS.create(name)).jobs
        np.testing.assert_allclose(frame["jct_s"].to_numpy(), duration)
        assert frame["slowdown"].max() == pytest.approx(1.0)


def test_wide_jobs_span_servers_and_shares_pack_one_gpu():
    two = ReplayCluster(2, 4.0)
    wide = ReplayJobs(np.array([0.0, 0.0]), np.array([10.0, 10.0]), np.array([8.0, 8.0]))
    assert replay(wide, two, REPLAYS.create("fifo")).jobs["finish_s"].to_list() == [10.0, 20.0]
    halves = ReplayJobs(np.zeros(3), np.full(3, 10.0), np.array([0.5, 0.5, 0.5]))
    one_gpu = ReplayCluster(1, 1.0)
    finish = replay(halves, one_gpu, REPLAYS.create("fifo")).jobs["finish_s"].to_list()
    assert finish == [10.0, 10.0, 20.0]


def test_typed_jobs_run_only_on_their_servers():
    cluster = ReplayCluster(2, 4.0, ("a", "b"))
    jobs = ReplayJobs(
        np.zeros(3),
        np.full(3, 10.0),
        np.array([4.0, 4.0, 4.0]),
        gpu_types=np.array(["b", "b", "a|b"], dtype=object),
    )
    # Two b-jobs share the one b server in turn; "a|b" takes the free a server at once.
    finish = replay(jobs, cluster, REPLAYS.create("fifo-backfill")).jobs["finish_s"].to_list()
    assert finish == [10.0, 20.0, 10.0]
    too_wide = ReplayJobs(
        np.zeros(1), np.ones(1), np.array([8.0]), gpu_types=np.array(["a"], dtype=object)
    )
    with pytest.raises(Unplaceable, match="needs 8 GPUs of type a"):
        replay(too_wide, cluster, REPLAYS.create("fifo"))


def test_zero_gpu_jobs_run_on_arrival():
    jobs = ReplayJobs(np.array([0.0, 5.0]), np.array([100.0, 3.0]), np.array([4.0, 0.0]))
    assert replay(jobs, ONE_SERVER, REPLAYS.create("fifo")).jobs["finish_s"].to_list() == [
        100.0,
        8.0,
    ]


def test_same_input_same_schedule():
    rng = np.random.default_rng(0)
    n = 2000
    arrival = np.sort(rng.uniform(0, 1e5, n))
    jobs = ReplayJobs(
        arrival,
        rng.lognormal(7, 1.5, n) + 1,
        rng.choice([1.0, 2, 4, 8, 16], n),
        users=rng.integers(0, 20, n),
    )
    cluster = ReplayCluster(6, 8.0)
    for name in REPLAYS.names():
        a = replay(jobs, cluster, REPLAYS.create(name), preempt_cost_s=30).jobs
        b = replay(jobs, cluster, REPLAYS.create(name), preempt_cost_s=30).jobs
        assert a.equals(b)
        # Nobody starts before arriving; every run lasts at least its recorded time.
        assert (a["start_s"] >= a["arrival_s"]).all()
        assert (a["finish_s"] - a["start_s"] >= a["ideal_s"] - 1e-6).all()


def test_rules_reject_what_they_cannot_do():
    with pytest.raises(ValueError, match="only the 'remaining' order"):
        ReplayRule("arrival", preemptive=True)
    with pytest.raises(ValueError, match="order must be one of"):
        ReplayRule("random")
    with pytest.raises(ValueError, match="durations > 0"):
        ReplayJobs(np.zeros(1), np.zeros(1), np.ones(1))
