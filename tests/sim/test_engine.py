"""The event loop: capacity, exact epochs, timing, pauses, determinism, validation."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import polars as pl
import pytest

from models.heuristics import HEURISTICS, make_scheduler
from tests.imports import packages_loaded_by
from tests.sim.golden import ENGINE_EXPECTED, engine_digests, float_kernels
from tests.sim.rules import Fixed, Probe
from tests.sim.workloads import NOISY, dl2_jobs
from tracelib.catalogue import by_name
from tracelib.contracts import WorkloadJobs
from tracelib.sim import (
    Allocation,
    AllocationBuilder,
    BinPacking,
    ClusterConfig,
    EventRecord,
    InvalidDecision,
    JobPlacement,
    JobSpec,
    LoadBalancing,
    Placement,
    Scheduler,
    SimConfig,
    SimulationStalled,
    Simulator,
    Snapshot,
    SpeedConfig,
    dl2_like_frame,
    jobs_from_frame,
    simulate,
)

# The engine's mechanics (exact finish times, pauses, streams) checked against the
# catalogue's closed-form speed without run-to-run variation, so expected times are exact.
EXACT = SpeedConfig(truth="analytical", speed_variation=0.0, slot_noise=0.0)


def cfg(n_servers: int = 4, seed: int = 0, speed: SpeedConfig | None = None, **kw) -> SimConfig:
    return SimConfig(
        cluster=ClusterConfig(n_servers=n_servers), speed=speed or EXACT, seed=seed, **kw
    )


@pytest.mark.parametrize("name", HEURISTICS)
def test_capacity_never_exceeded_and_epochs_exact(name):
    jobs = dl2_jobs(16, 3)
    result = simulate(jobs, make_scheduler(name), cfg(speed=NOISY))
    # Capacity, per decision and server, rebuilt from the placement log.
    demand = {jt.model: (jt.worker_demand, jt.ps_demand) for jt in by_name().values()}
    model_of = {j.job_id: j.model for j in jobs}
    use = result.placements.with_columns(
        *[
            (
                pl.col("workers")
                * pl.col("job_id").replace_strict(
                    {k: v[0][r] for k, v in ((j, demand[m]) for j, m in model_of.items())}
                )
                + pl.col("ps")
                * pl.col("job_id").replace_strict(
                    {k: v[1][r] for k, v in ((j, demand[m]) for j, m in model_of.items())}
                )
            ).alias(res)
            for r, res in enumerate(("gpu", "cpu", "mem"))
        ]
    )
    per_server = use.group_by("decision", "server").agg(pl.col("gpu", "cpu", "mem").sum())
    c = result.config.cluster
    assert per_server.height > 0
    assert per_server["gpu"].max() <= c.gpus
    assert per_server["cpu"].max() <= c.cpus
    assert per_server["mem"].max() <= c.mem_gb
    # Every job finished and trained exactly its (true) epochs: no overshoot, no shortfall.
    events = result.events_frame()
    trained = (
        events.filter(pl.col("kind") == "progress")
        .group_by("job_id")
        .agg(pl.col("value").sum().alias("trained"), pl.col("time_s").max().alias("last"))
    )
    joined = result.jobs.join(trained, on="job_id")
    assert joined.height == len(jobs)
    assert result.jobs["finish_s"].null_count() == 0
    np.testing.assert_allclose(joined["trained"], joined["epochs_real"], rtol=1e-9)
    np.testing.assert_array_equal(joined["last"], joined["finish_s"])  # nothing after finish
    assert (joined["finish_s"] > joined["arrival_s"]).all()


def test_mid_slot_finish_time_is_exact():
    jt = by_name()["resnet-50"]
    rate = jt.speed(1, 1) / jt.iters_per_epoch  # LB puts worker and PS on different servers
    epochs = rate * 1500.0  # needs 1500 s: one slot and a quarter
    job = JobSpec(0, "resnet-50", epochs=epochs, arrival_s=0.0)
    result = simulate((job,), Scheduler(Fixed(((1, 1),)), LoadBalancing()), cfg(n_servers=2))
    assert result.jobs["finish_s"][0] == pytest.approx(1500.0, rel=1e-12)
    alloc = result.events_frame().filter(pl.col("kind") == "alloc")
    assert alloc.height == 2  # decisions at 0 and 1200 s, none after the finish


def test_arrival_waits_for_the_next_slot_and_jct_counts_the_wait():
    jt = by_name()["dssm"]
    job = JobSpec(0, "dssm", epochs=jt.epochs_per_second(1, 1) * 600.0, arrival_s=100.0)
    result = simulate((job,), Scheduler(Fixed(((1, 1),)), LoadBalancing()), cfg(n_servers=2))
    assert result.jobs["finish_s"][0] == pytest.approx(1200.0 + 600.0)
    assert result.jobs["jct_s"][0] == pytest.approx(1700.0)


def test_reallocation_pauses_training():
    jt = by_name()["dssm"]  # no locality or self-interference: speed is the catalogue's
    job = JobSpec(0, "dssm", epochs=1e6, arrival_s=0.0)
    sched = Scheduler(Fixed(((1, 1), (2, 2), (2, 2))), LoadBalancing())
    result = Simulator((job,), sched, cfg(n_servers=4)).run(until_s=3600.0)
    progress = result.events_frame().filter(pl.col("kind") == "progress")["value"].to_list()
    r1 = jt.epochs_per_second(1, 1)
    r2 = jt.epochs_per_second(2, 2)
    pause = SpeedConfig().realloc_pause_s
    assert progress[0] == pytest.approx(r1 * 1200.0)  # first start: no pause (start_delay 0)
    assert progress[1] == pytest.approx(r2 * (1200.0 - pause))  # changed: paused
    assert progress[2] == pytest.approx(r2 * 1200.0)  # unchanged: no pause


def test_same_seed_same_log_different_seed_different_log():
    jobs = dl2_jobs(16, 3)
    sched = make_scheduler("drf")
    a = simulate(jobs, sched, cfg(seed=5, speed=NOISY))
    b = simulate(jobs, sched, cfg(seed=5, speed=NOISY))
    c = simulate(jobs, sched, cfg(seed=6, speed=NOISY))
    assert a.events == b.events
    assert a.placements.equals(b.placements)
    assert a.events != c.events


def test_epoch_error_changes_only_true_epochs():
    jobs = dl2_jobs(16, 3)
    result = simulate(jobs, make_scheduler("drf"), cfg(speed=SpeedConfig(epoch_error=0.3)))
    ratio = (result.jobs["epochs_real"] / result.jobs["epochs_est"]).to_numpy()
    assert ((ratio >= 0.7) & (ratio <= 1.3)).all()
    assert ratio.std() > 0.05
    assert result.jobs["epochs_est"].to_list() == [
        j.epochs for j in sorted(jobs, key=lambda j: j.job_id)
    ]


def test_noise_sources_draw_from_independent_streams():
    jobs = dl2_jobs(16, 3)
    sched = make_scheduler("fifo")
    base = simulate(jobs, sched, cfg(speed=SpeedConfig(epoch_error=0.2)))
    more = simulate(jobs, sched, cfg(speed=SpeedConfig(epoch_error=0.2, speed_variation=0.2)))
    # Turning speed variation on does not change the epoch-error draws.
    assert base.jobs["epochs_real"].to_list() == more.jobs["epochs_real"].to_list()


def test_window_limits_visible_jobs():
    jobs = tuple(JobSpec(i, "dssm", epochs=1e5, arrival_s=0.0) for i in range(5))
    result = simulate(
        jobs, Scheduler(Fixed(((1, 1),)), LoadBalancing()), cfg(n_servers=8, window=2)
    )
    first = result.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("time_s") == 0.0))
    assert first["job_id"].to_list() == [0, 1]


def test_snapshot_is_read_only():
    seen = {}

    def vandal(snap: Snapshot) -> Allocation:
        for attempt in (
            lambda: snap.cluster.capacity.__setitem__((0, 0), 99.0),
            lambda: snap.cluster.free.__setitem__((0, 0), 99.0),
            lambda: setattr(snap.jobs[0], "epochs_done", 1e9),
            lambda: setattr(snap, "time_s", -1.0),
        ):
            try:
                attempt()
                seen["mutated"] = True
            except (ValueError, AttributeError, TypeError):
                pass
        return Fixed().allocate(snap)

    job = JobSpec(0, "dssm", epochs=100.0, arrival_s=0.0)
    simulate((job,), Scheduler(Probe(vandal, name="vandal"), LoadBalancing()), cfg(n_servers=2))
    assert "mutated" not in seen


def test_invalid_decisions_are_rejected():
    job = JobSpec(0, "resnet-50", epochs=100.0, arrival_s=0.0)

    @dataclass(frozen=True)
    class Greedy:
        counts: tuple[int, int]
        job_id: int = 0
        name: str = "greedy"
        interval_s: float | None = None
        uses_oracle: bool = False

        def allocate(self, snap: Snapshot) -> Allocation:
            return Allocation.of({self.job_id: self.counts})

    @dataclass(frozen=True)
    class Stacker:
        name: str = "stacker"

        def place(self, snap, alloc, rng) -> Placement:
            w, p = alloc.get(0)
            return Placement.of({0: JobPlacement.of([0] * w, [0] * p)})

    with pytest.raises(InvalidDecision, match="outside"):
        simulate((job,), Scheduler(Greedy((17, 1)), LoadBalancing()), cfg())
    with pytest.raises(InvalidDecision, match="not visible"):
        simulate((job,), Scheduler(Greedy((1, 1), job_id=7), LoadBalancing()), cfg())
    with pytest.raises(InvalidDecision, match="capacity"):
        simulate((job,), Scheduler(Greedy((3, 1)), Stacker()), cfg())  # 3 GPUs on a 2-GPU server


def test_scheduler_that_never_allocates_is_reported():
    job = JobSpec(0, "resnet-50", epochs=100.0, arrival_s=0.0)
    with pytest.raises(SimulationStalled):
        simulate((job,), Scheduler(Fixed(((0, 0),)), LoadBalancing()), cfg())


def test_fifo_takes_what_fits():
    # Two 16-worker requests on a 2-server cluster: the builder grants what can be placed.
    jobs = tuple(JobSpec(i, "resnet-50", epochs=50.0, arrival_s=0.0) for i in range(2))
    result = simulate(jobs, make_scheduler("fifo"), cfg(n_servers=2))
    first = result.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("time_s") == 0))
    assert first["workers"].to_list() == [4, 0]  # 4 GPUs; 4 workers + 4 PSs fill the CPUs
    assert first["ps"].to_list() == [4, 0]


def test_unplaceable_tasks_are_trimmed_and_logged():
    job = JobSpec(0, "resnet-50", epochs=50.0, arrival_s=0.0)
    result = simulate((job,), Scheduler(Fixed(((8, 8),)), LoadBalancing()), cfg(n_servers=2))
    events = result.events_frame()
    unplaced = events.filter(pl.col("kind") == "unplaced").row(0, named=True)
    assert (unplaced["workers"], unplaced["ps"]) == (4, 4)
    alloc = events.filter(pl.col("kind") == "alloc").row(0, named=True)
    assert (alloc["workers"], alloc["ps"]) == (4, 4)


def test_builder_checks_caps_and_capacity():
    jobs = tuple(JobSpec(i, "resnet-50", epochs=50.0, arrival_s=0.0) for i in range(3))
    captured = {}

    def probe(snap: Snapshot) -> Allocation:
        b = AllocationBuilder(snap)
        captured["mask0"] = b.mask().copy()
        steps = 0
        while b.add(0, 1, 1):
            steps += 1
        captured["steps"] = steps
        captured["mask1"] = b.mask().copy()
        return b.allocation()

    simulate(jobs, Scheduler(Probe(probe), LoadBalancing()), cfg(n_servers=20))
    assert captured["mask0"].all()
    assert captured["steps"] == 16  # the cap, not the cluster, stops job 0
    assert not captured["mask1"][0].any() and captured["mask1"][1:].all()


def test_jobs_from_frame_validates_and_orders():
    frame = dl2_like_frame(5, 1)
    jobs = jobs_from_frame(frame.reverse())
    assert [j.job_id for j in jobs] == sorted(j.job_id for j in jobs)
    assert jobs[0].name == "j0000"
    with pytest.raises(ValueError, match="lacks columns"):
        jobs_from_frame(frame.drop("epochs"))
    with pytest.raises(ValueError, match="not in the catalogue"):
        jobs_from_frame(frame.with_columns(pl.lit("alexnet").alias("model")))


def test_simulator_does_not_import_torch():
    code = "import tracelib.sim, tracelib.sim.calibration, models.heuristics"
    assert packages_loaded_by(code, "torch") == []


def test_fragmentation_triggers_a_full_replacement():
    # Decision 0 packs the CPU-only DSSM job's 4 tasks onto server 0 (its CPUs full, GPUs
    # idle); at 1200 s a ResNet-50 job needs 3 GPU workers: kept in place, only 2 fit, so the
    # placement starts again from scratch, moves the DSSM job, and that costs it a pause.
    @dataclass(frozen=True)
    class Staged:
        name: str = "staged"

        def place(self, snap, alloc, rng):
            first = snap.decision == 0
            return (BinPacking() if first else LoadBalancing()).place(snap, alloc, rng)

    def plan(snap: Snapshot) -> Allocation:
        want = {0: (2, 2), 1: (3, 1)}
        return Allocation.of({j.job_id: want[j.job_id] for j in snap.jobs})

    jobs = (
        JobSpec(0, "dssm", epochs=1e6, arrival_s=0.0),
        JobSpec(1, "resnet-50", epochs=1e6, arrival_s=1200.0),
    )
    result = Simulator(jobs, Scheduler(Probe(plan, name="plan"), Staged()), cfg(n_servers=2)).run(
        until_s=2400.0
    )
    events = result.events_frame()
    assert events.filter(pl.col("kind") == "unplaced").height == 0
    first = result.placements.filter((pl.col("decision") == 0) & (pl.col("job_id") == 0))
    assert first["server"].to_list() == [0]
    second = result.placements.filter((pl.col("decision") == 1) & (pl.col("job_id") == 0))
    assert second["server"].n_unique() == 2  # moved
    progress = events.filter((pl.col("kind") == "progress") & (pl.col("job_id") == 0))
    r = progress["value"].to_list()
    assert r[1] == pytest.approx(r[0] * (1200.0 - SpeedConfig().realloc_pause_s) / 1200.0, rel=0.3)
    assert r[1] < r[0]


def test_stand_in_workload_has_the_workload_jobs_contract():
    frame = WorkloadJobs.validate(dl2_like_frame(30, 4, max_arrivals_per_slot=10))
    jobs = jobs_from_frame(frame)
    assert len(jobs) == 30
    assert max(Counter(j.arrival_s for j in jobs).values()) <= 10


@pytest.mark.parametrize("name", ["fifo", "drf"])
def test_a_decision_advances_exactly_the_jobs_in_the_system(name):
    """The jobs a decision advances are the arrived, unfinished ones (kept as arrivals and
    completions happen, so a decision's work follows the queue, not the trace's length),
    forks included; the run ends as an unforked one does."""
    jobs = dl2_jobs(24, 5)
    sim = Simulator(jobs, make_scheduler(name), cfg(n_servers=2, speed=NOISY))
    session = sim.session()
    forked_at = 7
    decisions = 0
    while not session.done:
        state = session._state
        brute = {i for i, j in state.jobs.items() if j.arrived and j.finish_s is None}
        assert set(state.live) == brute
        # What is kept of the live jobs, against the jobs' own state: by arrival, the
        # views, the jobs holding tasks; the training, the started, the not yet recorded.
        live = sorted(brute, key=lambda i: (state.jobs[i].arrival_s, i))
        assert list(state.live) == list(state.views) == live
        assert list(state.holding) == [
            i for i in live if state.jobs[i].placement.workers or state.jobs[i].placement.ps
        ]
        assert set(state.running) == {i for i in live if state.jobs[i].rate > 0}
        assert set(state.started) == {i for i in live if state.jobs[i].started_s is not None}
        idle = {i for i in live if not (state.jobs[i].workers or state.jobs[i].ps)}
        assert set(state.unlogged) == {i for i in idle if not state.jobs[i].logged_idle}
        assert session.jobs_in_system() == len(brute) > 0
        assert {v.job_id for v in session.snapshot.jobs} <= brute
        if decisions == forked_at:
            fork = session.fork()
            assert set(fork._state.live) == brute
            assert all(fork._state.live[i] is fork._state.jobs[i] for i in brute)
        session.submit(*sim.scheduler.decide(session.snapshot, session.rng))
        decisions += 1
    assert decisions > forked_at and not session._state.live
    while not fork.done:
        fork.submit(*sim.scheduler.decide(fork.snapshot, fork.rng))
    assert fork.result().jobs.equals(session.result().jobs)
    assert fork.result().jobs.equals(sim.run().jobs)


def test_engine_output_is_pinned_to_the_last_bit():
    """Every mode of the engine (windows, fixed placements, decisions at events, GPU types
    and shares, tied arrivals) under filling, sharing, event-driven and preemptive
    schedulers gives the committed job results, event logs and placements, floats exactly
    (`tests.sim.golden.engine_digests`; stalls pinned with their message), as recorded for
    numpy's float kernels on this machine (`float_kernels`)."""
    kernels = float_kernels()
    expected = json.loads(ENGINE_EXPECTED.read_text()).get(kernels)
    if expected is None:
        pytest.skip(
            f"no engine digests recorded for these float kernels ({kernels}); "
            "`python -m tests.sim.golden` records them"
        )
    got = engine_digests()
    assert got.keys() == expected.keys()
    assert [k for k in got if got[k] != expected[k]] == []


def test_a_run_reports_its_finished_jobs_as_it_goes():
    """`run(progress=...)` sees the finished jobs grow to all of them, and the run's
    result is the one without a progress callback."""
    jobs = dl2_jobs(20, 2)
    sim = Simulator(jobs, make_scheduler("drf"), cfg(n_servers=2, speed=NOISY))
    seen: list[tuple[int, int]] = []
    result = sim.run(progress=lambda done, total: seen.append((done, total)), every=3)
    assert len(seen) > 2 and seen[-1] == (20, 20)
    assert all(total == 20 for _, total in seen)
    done = [d for d, _ in seen]
    assert done == sorted(done) and done[0] < 20
    assert result.jobs.equals(sim.run().jobs)


@pytest.mark.parametrize(
    "mode", [{}, {"trigger": "events"}, {"fixed_placement": True}, {"window": 5}]
)
def test_job_views_kept_across_decisions_equal_views_built_afresh(mode):
    """A job's view is built again only when it changed: at every decision (every mode,
    noise on, forks included) each view the snapshot shows equals the view built afresh
    from the job's state, and views of unchanged jobs are reused."""
    from tracelib.sim.engine import _view

    jobs = dl2_jobs(30, 8)
    sim = Simulator(jobs, make_scheduler("drf"), cfg(n_servers=2, speed=NOISY, **mode))
    session, fork, reused, seen = sim.session(), None, 0, {}
    decisions = 0
    while not session.done:
        if decisions == 5:
            fork = session.fork()
        snap = session.snapshot
        for view in snap.jobs + snap.fixed_jobs:
            assert view == _view(session._state.jobs[view.job_id]), (decisions, view.job_id)
            reused += seen.get(view.job_id) is view
            seen[view.job_id] = view
        session.submit(*sim.scheduler.decide(snap, session.rng))
        decisions += 1
    assert reused > 0 and decisions > 5
    while not fork.done:
        for view in fork.snapshot.jobs + fork.snapshot.fixed_jobs:
            assert view == _view(fork._state.jobs[view.job_id])
        fork.submit(*sim.scheduler.decide(fork.snapshot, fork.rng))
    assert fork.result().events == session.result().events


def test_a_runs_records_are_left_untracked_by_the_garbage_collector():
    """The event log and the placement rows of a run in progress hold plain tuples of
    numbers and strings, which the collector stops tracking (millions of records are not
    walked at each full collection); the result still gives `EventRecord`s."""
    import gc

    session = Simulator(dl2_jobs(8, 1), make_scheduler("fifo"), cfg()).session()
    for _ in range(4):
        session.submit(*session.sim.scheduler.decide(session.snapshot, session.rng))
    # A tuple is let go once what it holds is: a row's server tuples at one pass, the row
    # at the next (a long run collects many times).
    gc.collect()
    gc.collect()
    state = session._state
    assert state.log and state.placement_rows
    assert not any(gc.is_tracked(r) for r in state.log)
    assert not any(gc.is_tracked(r) for r in state.placement_rows)
    while not session.done:
        session.submit(*session.sim.scheduler.decide(session.snapshot, session.rng))
    assert all(type(e) is EventRecord for e in session.result().events)


def test_a_run_pauses_the_garbage_collector_and_leaves_it_as_it_was():
    """The cyclic collector is off while a run decides (its passes cost a whole trace
    10-20% of its time and free almost nothing) and as it was once the run ends, also when
    the scheduler fails; a run inside another's decision leaves it to the outer run."""
    import gc

    fifo = make_scheduler("fifo").allocation
    seen: list[bool] = []

    def probe(allocate):
        return Scheduler(Probe(allocate), LoadBalancing())

    def watching(snap):
        seen.append(gc.isenabled())
        return fifo.allocate(snap)

    def nested(snap):
        Simulator(dl2_jobs(2, 3), probe(watching), cfg()).run()
        seen.append(gc.isenabled())  # after the inner run, still off
        return fifo.allocate(snap)

    def failing(snap):
        raise RuntimeError("the scheduler broke")

    assert gc.isenabled()
    Simulator(dl2_jobs(6, 1), probe(watching), cfg()).run()
    assert seen and not any(seen)
    assert gc.isenabled()
    seen.clear()
    Simulator(dl2_jobs(3, 2), probe(nested), cfg()).run()
    assert seen and not any(seen)
    assert gc.isenabled()
    with pytest.raises(RuntimeError, match="broke"):
        Simulator(dl2_jobs(3, 2), probe(failing), cfg()).run()
    assert gc.isenabled()
    gc.disable()
    try:
        Simulator(dl2_jobs(3, 2), probe(watching), cfg()).run()
        assert not gc.isenabled()  # left off, as it was found
    finally:
        gc.enable()
