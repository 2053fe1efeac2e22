"""Decision modes beyond DL2's slots, and driving the simulator from outside (SimSession)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from models.heuristics import make_scheduler
from tests.sim.rules import Probe
from tests.sim.workloads import NOISY, dl2_jobs
from tracelib.catalogue import by_name
from tracelib.sim import (
    Allocation,
    ClusterConfig,
    InvalidDecision,
    JobSpec,
    LoadBalancing,
    Placement,
    RequestedAllocation,
    Scheduler,
    SimConfig,
    Simulator,
    Snapshot,
    SpeedConfig,
    simulate,
)
from tracelib.sim.policy import WatchedAllocation


def config(**kw) -> SimConfig:
    return SimConfig(cluster=ClusterConfig(n_servers=kw.pop("n_servers", 4)), **kw)


def test_session_driven_by_the_scheduler_equals_run():
    jobs, sched = dl2_jobs(12, 5), make_scheduler("drf")
    cfg = config(speed=NOISY, seed=3)
    sim = Simulator(jobs, sched, cfg)
    session = sim.session()
    steps = 0
    while not session.done:
        session.submit(*sched.decide(session.snapshot, session.rng))
        steps += 1
    assert steps > 0
    assert session.result().events == sim.run().events
    assert session.unfinished() == 0 and session.jobs_in_system() == 0


def test_session_reports_progress_and_refuses_misuse():
    jobs = dl2_jobs(6, 5)
    sim = Simulator(jobs, make_scheduler("fifo"), config())
    session = sim.session()
    with pytest.raises(RuntimeError, match="not over"):
        session.result()
    first = session.snapshot
    assert first is not None and session.time_s == first.time_s
    assert session.jobs_in_system() == len(first.jobs)
    session.submit(*make_scheduler("fifo").decide(first, session.rng))
    done = session.epochs_done()
    assert any(d > 0 for d, _ in done.values())
    assert all(0 <= d <= total for d, total in done.values())
    while not session.done:
        session.submit(*make_scheduler("fifo").decide(session.snapshot, session.rng))
    with pytest.raises(RuntimeError, match="over"):
        session.submit(Allocation(), Placement())


@dataclass
class Switch:
    """Test policy: `first` for the first `at` decisions, then `then`."""

    first: object
    then: object
    at: int
    name: str = "switch"
    interval_s: float | None = None
    uses_oracle: bool = False
    made: int = 0

    def decide(self, snap: Snapshot, rng: np.random.Generator):
        self.made += 1
        return (self.first if self.made <= self.at else self.then).decide(snap, rng)


@pytest.mark.parametrize("mode", [{}, {"trigger": "events"}, {"fixed_placement": True}], ids=str)
def test_a_fork_continues_as_a_replayed_run_and_leaves_its_origin_alone(mode):
    jobs, cfg = dl2_jobs(14, 5), config(speed=NOISY, seed=7, n_servers=3, **mode)
    first, then, at = make_scheduler("fifo"), make_scheduler("drf"), 4
    session = Simulator(jobs, first, cfg).session()
    for _ in range(at):
        session.submit(*first.decide(session.snapshot, session.rng))
    fork = session.fork()
    assert fork.snapshot is session.snapshot and fork.time_s == session.time_s
    while not fork.done:
        fork.submit(*then.decide(fork.snapshot, fork.rng))
    # The fork ends exactly as a run that switched policy at that decision from the start.
    replayed = Simulator(jobs, Switch(first, then, at), cfg).run()
    assert fork.result().events == replayed.events
    assert fork.result().placements.equals(replayed.placements)
    # The origin saw none of the fork's decisions, draws or progress: continued with
    # `first` it ends as `first`'s own run, which differs from the fork's.
    assert not session.done
    session.submit(*first.decide(session.snapshot, session.rng))
    fresh = Simulator(jobs, first, cfg).session()
    for _ in range(at + 1):
        fresh.submit(*first.decide(fresh.snapshot, fresh.rng))
    assert session.snapshot.jobs == fresh.snapshot.jobs  # speed histories included
    while not session.done:
        session.submit(*first.decide(session.snapshot, session.rng))
    alone = Simulator(jobs, first, cfg).run()
    assert session.result().events == alone.events
    assert session.result().events != fork.result().events


def test_event_trigger_decides_exactly_at_arrivals_and_completions():
    jobs = dl2_jobs(10, 5)
    result = simulate(jobs, make_scheduler("drf"), config(trigger="events", speed=NOISY))
    ev = result.events_frame()
    decide_t = set(ev.filter(pl.col("kind") == "decide")["time_s"].to_list())
    arrive_t = set(ev.filter(pl.col("kind") == "arrive")["time_s"].to_list())
    finish_t = set(ev.filter(pl.col("kind") == "finish")["time_s"].to_list())
    assert arrive_t <= decide_t  # every arrival triggers one
    jobs_f = result.jobs
    busy = {  # completions that leave other jobs in the system
        t
        for t in finish_t
        if jobs_f.filter((pl.col("arrival_s") <= t) & (pl.col("finish_s") > t)).height
    }
    assert busy and busy <= decide_t  # each of those triggers one
    assert decide_t <= arrive_t | finish_t  # and nothing else does
    # Every job trains exactly its epochs.
    trained = ev.filter(pl.col("kind") == "progress").group_by("job_id").agg(pl.col("value").sum())
    joined = result.jobs.join(trained, on="job_id")
    np.testing.assert_allclose(joined["value"], joined["epochs_real"], rtol=1e-9)


def test_event_trigger_speeds_up_a_job_when_its_neighbour_leaves():
    """Two one-worker jobs packed on one server interfere; when the short one finishes, the
    long one must speed up at once (its completion scheduled at the slow speed is stale)."""
    jt = by_name()["resnet-50"]
    alone = jt.speed(1, 1) / jt.iters_per_epoch
    jobs = (
        JobSpec(0, "resnet-50", epochs=alone * 600.0, arrival_s=0.0),
        JobSpec(1, "resnet-50", epochs=alone * 6000.0, arrival_s=0.0),
    )
    cfg = config(
        n_servers=1,
        trigger="events",
        speed=SpeedConfig(
            truth="analytical",
            locality=False,
            realloc_pause_s=0.0,
            speed_variation=0.0,
            slot_noise=0.0,
        ),
    )
    result = simulate(jobs, Scheduler(RequestedAllocation(), LoadBalancing()), cfg)
    rates = result.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("job_id") == 1))
    slow, fast = rates["value"][0], rates["value"][-1]
    assert fast == pytest.approx(alone, rel=1e-9) and slow < 0.9 * fast
    t0 = float(result.jobs.filter(pl.col("job_id") == 0)["finish_s"][0])
    expected = t0 + (jobs[1].epochs - slow * t0) / fast
    assert float(result.jobs.filter(pl.col("job_id") == 1)["finish_s"][0]) == pytest.approx(
        expected, rel=1e-9
    )


def test_fixed_placement_keeps_running_jobs_where_they_started():
    jobs = dl2_jobs(14, 5)
    cfg = config(fixed_placement=True, n_servers=3, speed=NOISY)
    result = simulate(jobs, Scheduler(RequestedAllocation(), LoadBalancing()), cfg)
    assert result.jobs["finish_s"].null_count() == 0
    layouts = result.placements.group_by("job_id").agg(
        pl.struct("server", "workers", "ps").sort_by("server").alias("layout"), pl.col("decision")
    )
    # Per job, the set of (server, workers, ps) rows is identical at every decision it ran.
    per_decision = result.placements.group_by("job_id", "decision").agg(
        pl.struct("server", "workers", "ps").sort_by("server").alias("layout")
    )
    distinct = per_decision.group_by("job_id").agg(pl.col("layout").n_unique().alias("n"))
    assert layouts.height == len(jobs)
    assert distinct["n"].max() == 1
    assert per_decision.group_by("job_id").len()["len"].max() > 1  # jobs did span decisions


def test_fixed_placement_offers_only_waiting_jobs_and_refuses_running_ones():
    jobs = (
        JobSpec(0, "resnet-50", epochs=1e6, arrival_s=0.0),
        JobSpec(1, "vgg-16", epochs=1e6, arrival_s=1500.0),
    )
    seen: list[tuple[tuple[int, ...], tuple[int, ...], float]] = []

    def spy(snap: Snapshot) -> Allocation:
        reserved = 0.0 if snap.cluster.reserved is None else snap.cluster.reserved.sum()
        seen.append(
            (
                tuple(j.job_id for j in snap.jobs),
                tuple(j.job_id for j in snap.fixed_jobs),
                reserved,
            )
        )
        return RequestedAllocation().allocate(snap)

    cfg = config(n_servers=2, fixed_placement=True)
    Simulator(jobs, Scheduler(Probe(spy, name="spy"), LoadBalancing()), cfg).run(until_s=3000.0)
    assert seen[0] == ((0,), (), 0.0)
    assert seen[1][:2] == ((), (0,)) and seen[1][2] > 0  # job 0 runs, holds resources
    assert seen[2][:2] == ((1,), (0,))  # job 1 arrived: only it is decided

    def grab(snap: Snapshot) -> Allocation:
        return Allocation.of({j.job_id: (1, 1) for j in snap.fixed_jobs + snap.jobs})

    grabby = Probe(grab, name="mover")

    with pytest.raises(InvalidDecision, match="not visible"):
        Simulator(jobs, Scheduler(grabby, LoadBalancing()), cfg).run(until_s=3000.0)
    # The same decisions are fine when every job is re-decided.
    Simulator(jobs, Scheduler(grabby, LoadBalancing()), config(n_servers=2)).run(until_s=3000.0)


def test_unknown_trigger_is_refused():
    with pytest.raises(ValueError, match="trigger"):
        SimConfig(trigger="sometimes")


def test_a_watched_allocation_decides_as_its_policy_and_counts_what_it_gave():
    jobs = (
        JobSpec(0, "resnet-50", epochs=2.0, arrival_s=0.0, num_workers=2, num_ps=3),
        JobSpec(1, "wlm", epochs=2.0, arrival_s=0.0, num_workers=1, num_ps=2),
    )
    cfg = config()
    seen: dict = {}
    watched = simulate(
        jobs, Scheduler(WatchedAllocation(RequestedAllocation(), seen), LoadBalancing()), cfg
    )
    plain = simulate(jobs, Scheduler(RequestedAllocation(), LoadBalancing()), cfg)
    assert watched.jobs.equals(plain.jobs)
    assert set(seen) == {"resnet-50", "wlm"}
    assert set(seen["resnet-50"]) == {(2, 3)} and set(seen["wlm"]) == {(1, 2)}
    assert seen["resnet-50"].total() >= 1
