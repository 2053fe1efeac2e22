"""The arena's preemptive baselines: Tiresias' 2D-LAS and 2D-Gittins, preemptive SRTF.

Every schedule below is worked out by hand in the comments. The cluster is one server with
one GPU (a ResNet-50 worker and its PS fit beside each other), so one job trains at a time;
speeds are the catalogue's analytical model with no variation, noise, interference or
locality, so a job of length L (seconds at one worker and one PS) asks for exactly
L x the catalogue's epochs per second and trains for exactly L seconds. Decisions come
every 1,200 s slot; a job arriving at a decision is visible to it, a job finishing at one
is gone before it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from models.heuristics import (
    ALLOCATIONS,
    PREEMPTIVE_BASELINES,
    REPLAYS,
    TiresiasGittins,
    TiresiasLAS,
    make_scheduler,
)
from models.heuristics.tiresias import finished_services, queue_state
from tracelib.catalogue import by_name
from tracelib.sim import (
    ClusterConfig,
    JobSpec,
    Scheduler,
    SimConfig,
    Simulator,
    SpeedConfig,
    dl2_like_frame,
    jobs_from_frame,
    simulate,
)
from tracelib.sim.placement import LoadBalancing
from tracelib.sim.replay import ReplayCluster, ReplayJobs, replay

RATE = by_name()["resnet-50"].epochs_per_second(1, 1)
SLOT = 1200.0
ONE_GPU = SimConfig(
    cluster=ClusterConfig(n_servers=1, gpus=1.0),
    speed=SpeedConfig(
        truth="analytical",
        speed_variation=0.0,
        slot_noise=0.0,
        interference_scale=0.0,
        locality=False,
        realloc_pause_s=0.0,
    ),
    slot_s=SLOT,
)


def job(job_id: int, arrival_s: float, length_s: float) -> JobSpec:
    """A one-worker, one-PS ResNet-50 job that trains for `length_s` seconds."""
    return JobSpec(job_id, "resnet-50", epochs=RATE * length_s, arrival_s=arrival_s)


def jcts(jobs, policy, cfg: SimConfig = ONE_GPU) -> dict[int, float]:
    scheduler = policy if isinstance(policy, Scheduler) else make_scheduler(policy)
    result = simulate(jobs, scheduler, cfg)
    return dict(result.jobs.select("job_id", "jct_s").rows())


def with_pause(pause_s: float) -> SimConfig:
    return replace(ONE_GPU, speed=replace(ONE_GPU.speed, realloc_pause_s=pause_s))


# A 3-hour job alone, then a 20-minute job arriving at the second decision.
LONG_THEN_SHORT = (job(0, 0.0, 10800.0), job(1, 1200.0, 1200.0))


def test_las_demotes_at_the_threshold_and_the_short_job_preempts():
    # Threshold 3,600 GPU-s (one GPU-hour), one GPU: job 0 reaches it after 3,600 s.
    # t=1200: job 1 arrives; both in the high queue, job 0 runs, so it stays ahead.
    # t=2400: the same (job 0 has 2,400 GPU-s).
    # t=3600: job 0 has 3,600 GPU-s: low queue. Job 1 (high) preempts it, runs 3600-4800.
    # t=4800: job 0 resumes with 7,200 s left: finishes at 12,000.
    # JCTs: job 0 12,000, job 1 4,800 - 1,200 = 3,600.
    assert jcts(LONG_THEN_SHORT, "tiresias-las") == pytest.approx({0: 12000.0, 1: 3600.0})
    # Without preemption (SJF keeps a running job to the end) job 1 waits for all of job 0.
    assert jcts(LONG_THEN_SHORT, "sjf") == pytest.approx({0: 10800.0, 1: 10800.0})


def test_a_resumed_job_pays_the_simulators_reallocation_pause_once():
    # The same schedule with SpeedConfig.realloc_pause_s = 30: job 1's first start pays
    # nothing (start_delay_s is 0); job 0 resumes at 4,800 and trains from 4,830, so it
    # finishes 30 s later, at 12,030. The same pause any policy's paused job pays,
    # RL-TAPS' arena policy's included: the engine charges it, not the policy.
    costly = with_pause(30.0)
    assert jcts(LONG_THEN_SHORT, "tiresias-las", costly) == pytest.approx({0: 12030.0, 1: 3600.0})
    # SRTF preempts job 0 at once: t=1200, 1,200 s left against job 0's 9,600. Job 1 runs
    # 1200-2400; job 0 resumes at 2400, trains from 2430: 9,600 s left, finishes at 12,030.
    assert jcts(LONG_THEN_SHORT, "srtf-preemptive", costly) == pytest.approx(
        {0: 12030.0, 1: 1200.0}
    )
    assert jcts(LONG_THEN_SHORT, "srtf-preemptive") == pytest.approx({0: 12000.0, 1: 1200.0})


@pytest.mark.parametrize("name", ["tiresias-las", "srtf-preemptive"])
@pytest.mark.parametrize("pause_s", [0.0, 30.0])
def test_replay_and_arena_agree_when_events_fall_on_decisions(name, pause_s):
    # The replay decides at every arrival, completion and threshold crossing; here each
    # falls on a slot boundary, so the replay rule of the same name (srtf for
    # srtf-preemptive), charged the same resume cost, schedules exactly as the arena does.
    arrival = np.array([j.arrival_s for j in LONG_THEN_SHORT])
    length = np.array([j.epochs / RATE for j in LONG_THEN_SHORT])
    rule = REPLAYS.create(name.removesuffix("-preemptive"))
    replayed = replay(
        ReplayJobs(arrival, length, np.ones(2)), ReplayCluster(1, 1.0), rule, preempt_cost_s=pause_s
    ).jobs
    arena = jcts(LONG_THEN_SHORT, name, with_pause(pause_s))
    assert replayed["jct_s"].to_list() == pytest.approx([arena[0], arena[1]])
    assert replayed["preemptions"].to_list() == [1, 0]


def test_promote_knob_sends_a_starved_job_back_to_the_high_queue():
    # Threshold 1,200 GPU-s, PROMOTEKNOB 1: a demoted job that has waited as long as it ran
    # goes back to the high queue, service reset. Job 0: 7,200 s from 0; job 1: 4,800 s
    # from 1,200.
    # t=1200: job 0 has 1,200 GPU-s (low); job 1 (high) preempts it, runs 1200-2400.
    # t=2400: job 0 waited 1,200 = 1 x its 1,200 run: high again; job 1 is low now: job 0
    #   preempts job 1. From here the two alternate every slot: job 1 runs 3600-4800,
    #   6000-7200, 8400-9600 (its 4th slot: done at 9,600, JCT 8,400); job 0 runs
    #   4800-6000, 7200-8400, then 9600-12000 alone (6 slots in all: JCT 12,000).
    jobs = (job(0, 0.0, 7200.0), job(1, 1200.0, 4800.0))
    knob = Scheduler(TiresiasLAS(thresholds_gpu_s=(1200.0,), promote_knob=1.0), LoadBalancing())
    assert jcts(jobs, knob) == pytest.approx({0: 12000.0, 1: 8400.0})
    # Without promotion, at t=2400 both are low and job 1 runs, so it stays ahead: it
    # finishes at 1200 + 4800 = 6,000 (JCT 4,800); job 0 resumes then, 6,000 s left: 12,000.
    none = Scheduler(TiresiasLAS(thresholds_gpu_s=(1200.0,), promote_knob=None), LoadBalancing())
    assert jcts(jobs, none) == pytest.approx({0: 12000.0, 1: 4800.0})


# Gittins: job 0 (20 min) and job 1 (60 min) at 0, job 2 (20 min) at 2,400; the threshold
# is far away (one queue throughout), so only the index orders jobs.
GITTINS_CASE = (job(0, 0.0, 1200.0), job(1, 0.0, 3600.0), job(2, 2400.0, 1200.0))
ONE_QUEUE = {"thresholds_gpu_s": (1e9,), "promote_knob": None}


def test_gittins_learns_from_completed_jobs_and_preempts_for_a_higher_index():
    # t=0: nothing has completed, every index is 0: FIFO, job 0 (lower id) runs, done 1200.
    # t=1200: the completed services are {1,200 GPU-s}. Job 1 (0 attained) has index
    #   1/1200 (G(a) = max_k k / (sum_{l<=k} (t_l - a) + (m - k)(t_k - a)) over the
    #   samples t above a): it runs 1200-2400.
    # t=2400: job 1 has 1,200 GPU-s: no completed job was longer, index 0. Job 2 (index
    #   1/1200) preempts it and runs 2400-3600. t=3600: job 1 resumes, 2,400 s left: 6,000.
    # JCTs: 1,200, 6,000, 3,600 - 2,400 = 1,200.
    gittins = Scheduler(TiresiasGittins(**ONE_QUEUE), LoadBalancing())
    assert jcts(GITTINS_CASE, gittins) == pytest.approx({0: 1200.0, 1: 6000.0, 2: 1200.0})
    # LAS with the same queue keeps running job 1 ahead of job 2 (FIFO, running first):
    # job 1 runs 1200-4800, job 2 4800-6000. JCTs: 1,200, 4,800, 3,600.
    las = Scheduler(TiresiasLAS(**ONE_QUEUE), LoadBalancing())
    assert jcts(GITTINS_CASE, las) == pytest.approx({0: 1200.0, 1: 4800.0, 2: 3600.0})


def test_gittins_reads_completed_jobs_never_the_running_jobs_sizes():
    # Job 1 twice as long (7,200 s): the decisions up to its preemption are the same (the
    # index reads only job 0's completed service), so job 2 still preempts it at 2,400.
    gittins = Scheduler(TiresiasGittins(**ONE_QUEUE), LoadBalancing())
    longer = (GITTINS_CASE[0], job(1, 0.0, 7200.0), GITTINS_CASE[2])
    # Job 1: 1200-2400, then 3600-9600 (6,000 s left).
    assert jcts(longer, gittins) == pytest.approx({0: 1200.0, 1: 9600.0, 2: 1200.0})
    assert not TiresiasGittins().uses_oracle and not TiresiasLAS().uses_oracle


def test_snapshot_lists_completed_jobs_with_their_service():
    sim = Simulator(GITTINS_CASE, make_scheduler("tiresias-gittins"), ONE_GPU)
    session = sim.session()
    seen = []
    while not session.done:
        snap = session.snapshot
        seen.append((snap.time_s, [f.job_id for f in snap.finished]))
        if snap.time_s == 2400.0:
            assert finished_services(snap.finished).tolist() == pytest.approx([1200.0])
            running = snap.by_id[1]
            state = queue_state(running, snap.time_s)
            assert (state.queue, state.attained_gpu_s) == (0, pytest.approx(1200.0))
        session.submit(*sim.scheduler.decide(snap, session.rng))
    assert seen[:3] == [(0.0, []), (1200.0, [0]), (2400.0, [0])]
    # A fork carries the completed jobs and continues as the original does.
    session = sim.session()
    session.submit(*sim.scheduler.decide(session.snapshot, session.rng))
    twin = session.fork()
    for s in (session, twin):
        while not s.done:
            s.submit(*sim.scheduler.decide(s.snapshot, s.rng))
    assert session.result().events == twin.result().events


def test_knobs_are_the_replay_rules():
    for name in ("tiresias-las", "tiresias-gittins"):
        rule, policy = REPLAYS.create(name), ALLOCATIONS.create(name)
        assert policy.thresholds_gpu_s == rule.thresholds_gpu_s == (3600.0,)
        assert policy.promote_knob == rule.promote_knob == 8.0
    with pytest.raises(ValueError, match="ascending"):
        TiresiasLAS(thresholds_gpu_s=(3600.0, 100.0))
    with pytest.raises(ValueError, match="positive"):
        TiresiasGittins(promote_knob=0.0)


@pytest.mark.parametrize("name", PREEMPTIVE_BASELINES)
def test_same_seed_same_event_log(name):
    jobs = jobs_from_frame(dl2_like_frame(30, 3, max_arrivals_per_slot=3))
    cfg = SimConfig(cluster=ClusterConfig(n_servers=4), seed=5, window=10)
    a = simulate(jobs, make_scheduler(name), cfg)
    b = simulate(jobs, make_scheduler(name), cfg)
    assert a.events == b.events
    assert a.jobs["finish_s"].null_count() == 0
    # They do preempt on a contended cluster: some job loses its GPUs while unfinished.
    alloc = a.events_frame().filter(pl.col("kind") == "alloc")
    held = alloc.with_columns(
        pl.col("workers").shift(1).over("job_id").alias("before"),
    ).filter((pl.col("before") > 0) & (pl.col("workers") == 0))
    assert held.height > 0, name


def test_a_snapshot_sees_the_finished_jobs_as_of_its_decision():
    """`Snapshot.finished` is a view of the run's completion list: what a snapshot shows
    does not change when later jobs finish, and it reads like a tuple."""
    from tracelib.sim.snapshot import Finished

    items = ["a", "b"]
    view = Finished(items)
    items.append("c")
    assert len(view) == 2 and list(view) == ["a", "b"] and view[-1] == "b"
    assert view[0:5] == ("a", "b") and view == ("a", "b") and "c" not in view
    with pytest.raises(IndexError):
        view[2]
