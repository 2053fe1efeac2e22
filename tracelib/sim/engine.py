"""The simulator: one event loop over a heap of (time, priority, sequence number, event).

Time-slotted allocation mode (DL2): at every decision time (multiples of the scheduler's
interval, by default `SimConfig.slot_s`) the allocation policy decides workers/PSs for every
visible job, the placement policy puts them on servers, and each job trains at its speed
until the next decision; a job that completes its epochs inside the interval leaves at that
exact moment (its finish event), and its resources stay idle until the next decision.
Speeds are fixed for an interval (interference from a job that left mid-interval persists
until the next decision, as in the DL2 simulator's per-slot model).

The same loop serves the other systems (`SimConfig`):
- `fixed_placement` (Harmony): decisions still come every interval, but a job that has
  started keeps its workers, PSs and servers to the end: the snapshot offers only waiting
  jobs (running ones are `Snapshot.fixed_jobs`, their resources `ClusterView.reserved`).
- `trigger="events"` (Chic; or a policy's own `trigger`, e.g. "optimus-events"): a decision
  at every arrival and every completion and nowhere else; a job's completion is scheduled
  at the speed of the latest decision and made stale (`Finish.version`) by the next one,
  since every decision recomputes every speed.
- fixed-step preemption (RL-TAPS): the interval mode with a short `slot_s`, an injected
  topology speed model, one simulator "server" per GPU; a job given nothing is paused and
  pays `realloc_pause_s` when it resumes.

The loop runs to the next decision (`_next_decision`), returns its snapshot and takes the
decision back (`_decide`), so `run()` (the scheduler decides) and `SimSession` (a caller
decides: gymnasium environments, decision recorders, searches) share every line of it.
Everything a run mutates is one `_RunState`, so a session can be copied at a decision
(`SimSession.fork`) and continued in several ways without replaying what came before.

Randomness: the simulator owns four numpy Generators spawned from `SimConfig.seed` with
`SeedSequence.spawn`, one per source (arrival jitter, speed noise, epoch-estimate error,
placement tie-breaks), created afresh by every `run()`, so a run is a pure function of
(jobs, scheduler, config) and changing one source never reshuffles another.
"""

from __future__ import annotations

import copy
import gc
import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from typing import NamedTuple, Protocol

import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, DL2_SIM_FACTS, JobType, SimFacts, by_name
from tracelib.seeds import named_streams
from tracelib.sim.cluster import is_share, summed_demands, task_arrays
from tracelib.sim.config import TRIGGERS, SimConfig
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import DecisionPolicy
from tracelib.sim.snapshot import (
    EMPTY_PLACEMENT,
    Allocation,
    ClusterView,
    Finished,
    FinishedJob,
    JobPlacement,
    JobView,
    Placement,
    Snapshot,
    SpeedSample,
    read_only,
)
from tracelib.sim.speed import SpeedModel

STREAMS = ("arrivals", "speed", "epochs", "placement")
"""Random streams, in SeedSequence.spawn order (append only: reordering changes every run)."""

# Simultaneous events pop in this order: a job that completes exactly at a decision time is
# gone before the decision, and a job arriving at it is already visible.
_FINISH, _ARRIVAL, _DECIDE = 0, 1, 2


class InvalidDecision(ValueError):
    """A policy returned a decision the simulator cannot apply."""


class SimulationStalled(RuntimeError):
    """Unfinished jobs, nothing running, nothing arriving: the scheduler would wait forever."""


class EventRecord(NamedTuple):
    """One line of the event log.

    kinds: arrive (value: arrival time), decide (job_id -1, value: visible jobs),
    alloc (per visible job per decision: workers, PSs, value: epochs/s for the interval; a
    job left with no tasks and no rate is recorded at the first such decision only, until it
    gets some),
    unplaced (workers/PSs the placement could not place), progress (epochs trained since the
    previous record), finish (value: completion time minus arrival)."""

    time_s: float
    kind: str
    job_id: int
    workers: int
    ps: int
    value: float


class _Entry(NamedTuple):
    """A heap entry. Ordered as a tuple, in C: (time, priority, sequence number) decide,
    the sequence number is unique, so `event` is never compared."""

    time_s: float
    priority: int
    seq: int
    event: object


@dataclass(frozen=True)
class Arrival:
    """A job is submitted."""

    job_id: int


@dataclass(frozen=True)
class Decide:
    """The scheduler decides allocation and placement."""

    index: int
    """Decision k happens at k * interval."""


@dataclass(frozen=True)
class Finish:
    """A job completes its epochs (if its allocation has not changed since)."""

    job_id: int
    version: int
    """The job's decision version when scheduled; any later decision makes it stale."""


@dataclass
class _Job:
    """Mutable per-job state, private to the engine."""

    spec: JobSpec
    jt: JobType
    arrival_s: float
    real_epochs: float
    speed_mult: float
    worker_demand: tuple[float, float, float]
    """The catalogue's, with the trace's GPU share in place of a whole GPU."""
    gpu_types: frozenset[str] | None = None
    """GPU types its workers may use on this cluster (None: any server)."""
    done: float = 0.0
    workers: int = 0
    ps: int = 0
    placement: JobPlacement = EMPTY_PLACEMENT
    rate: float = 0.0
    """Epochs per second for the current interval."""
    pause_until: float = 0.0
    last_s: float = 0.0
    version: int = 0
    arrived: bool = False
    finish_s: float | None = None
    started_s: float | None = None
    history: list[SpeedSample] = field(default_factory=list)
    view: JobView | None = None
    """The view last built of this job (`Simulator._refresh_views`), valid while `view_key`
    holds."""
    view_key: tuple | None = None
    """(done, workers, PSs, placement, samples in history, started) when `view` was built:
    everything of a view that changes in a run."""
    logged_idle: bool = False
    """Its last "alloc" record says it has no tasks and no rate (`Simulator._apply`)."""


def _view(j: _Job, history: bool = True) -> JobView:
    """A job's view as of now, built afresh; without `history`, its history is empty (a
    running job's grows by a sample at every decision, and copying it into every view cost
    more than the rest of the view once jobs have run through thousands of decisions)."""
    return JobView(
        job_id=j.spec.job_id,
        model=j.jt.model,
        type_index=j.jt.type_index,
        arrival_s=j.arrival_s,
        epochs_est=j.spec.epochs,
        epochs_done=j.done,
        workers=j.workers,
        ps=j.ps,
        requested_workers=j.spec.num_workers,
        requested_ps=j.spec.num_ps,
        max_workers=j.jt.max_workers,
        worker_demand=j.worker_demand,
        ps_demand=j.jt.ps_demand,
        placement=j.placement,
        history=tuple(j.history) if history else (),
        started_s=j.started_s,
        gpu_types=j.gpu_types,
    )


def _view_key(j: _Job) -> tuple:
    """Everything of a job's view that changes in a run (`_Job.view_key`)."""
    return (j.done, j.workers, j.ps, j.placement, len(j.history), j.started_s)


def _arrival_order(j: _Job) -> tuple[float, int]:
    """The order of jobs in a snapshot: by arrival, then job id."""
    return (j.arrival_s, j.spec.job_id)


def _shares(jobs) -> dict[int, tuple[float, ...]]:
    """GPU shares (workers below one GPU) the jobs hold, per server."""
    out: dict[int, list[float]] = {}
    for job in jobs:
        if is_share(job.worker_demand[0]):
            for server in job.placement.workers:
                out.setdefault(server, []).append(job.worker_demand[0])
    return {server: tuple(values) for server, values in out.items()}


def _placements_frame(
    rows: Sequence[tuple[int, float, int, tuple[int, ...], tuple[int, ...]]], n_servers: int
) -> pl.DataFrame:
    """`SimResult.placements`: one row per (decision, job, server holding its tasks), in
    the order of `rows`, then by server, with the job's workers and PSs there; counted for
    the whole run at once (numpy) rather than with a Counter per job and decision."""
    columns = [list(c) for c in zip(*rows, strict=True)] if rows else [[]] * 5
    decision, time_s, job_id, workers, ps = columns
    n_w = np.array([len(w) for w in workers], dtype=np.int64)  # (E,)
    n_p = np.array([len(p) for p in ps], dtype=np.int64)
    entry = np.arange(len(workers), dtype=np.int64)
    # key = entry * n_servers + server: sorted keys are entries in order, servers ascending
    keys_w = np.repeat(entry, n_w) * n_servers + np.fromiter(
        chain.from_iterable(workers), np.int64, int(n_w.sum())
    )
    keys_p = np.repeat(entry, n_p) * n_servers + np.fromiter(
        chain.from_iterable(ps), np.int64, int(n_p.sum())
    )
    keys, inv = np.unique(np.concatenate([keys_w, keys_p]), return_inverse=True)
    at = keys // n_servers
    return pl.DataFrame(
        {
            "decision": np.array(decision, dtype=np.int64)[at],
            "time_s": np.array(time_s, dtype=np.float64)[at],
            "job_id": np.array(job_id, dtype=np.int64)[at],
            "server": keys % n_servers,
            "workers": np.bincount(inv[: len(keys_w)], minlength=len(keys)).astype(np.int64),
            "ps": np.bincount(inv[len(keys_w) :], minlength=len(keys)).astype(np.int64),
        },
        schema={
            "decision": pl.Int64,
            "time_s": pl.Float64,
            "job_id": pl.Int64,
            "server": pl.Int64,
            "workers": pl.Int64,
            "ps": pl.Int64,
        },
    )


class PlacedSpeedModel(Protocol):
    """What the engine needs of a speed model (`SpeedModel`, or RL-TAPS' topology model)."""

    def base(self, types, workers, ps) -> np.ndarray:
        """Isolated speed (mini-batches/s) per job, ignoring placement."""
        ...

    def placed(self, types, workers, ps, placements, n_servers: int) -> np.ndarray:
        """Speed (mini-batches/s) of each job given every job's placement."""
        ...


class _Oracle:
    """True isolated speed: catalogue speed times the job's hidden speed multiplier."""

    def __init__(self, model: SpeedModel, jobs: dict[int, _Job]) -> None:
        self._model = model
        self._jobs = jobs

    def speed(self, job_id: int, workers: int, ps: int) -> float:
        """True isolated speed of job `job_id` with `workers` workers and `ps` PSs."""
        job = self._jobs[job_id]
        return float(self._model.base([job.jt.type_index], [workers], [ps])[0]) * job.speed_mult


@dataclass
class _RunState:
    """Everything one run mutates (the Simulator itself stays reusable)."""

    rng: dict[str, np.random.Generator]
    jobs: dict[int, _Job]
    oracle: _Oracle | None
    until_s: float | None = None
    """Events after this time are not simulated (None: until every job has finished)."""
    # The two logs of a run hold plain tuples of numbers and strings, which the garbage
    # collector stops tracking: a run's millions of records would otherwise be walked at
    # every full collection. `Simulator._result` makes them `EventRecord`s and a frame.
    log: list[tuple] = field(default_factory=list)
    """The fields of each `EventRecord` of the run so far."""
    placement_rows: list[tuple[int, float, int, tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=list
    )
    """(decision, time, job id, servers of its workers, of its PSs) of every placed job at
    every decision."""
    finished: list[FinishedJob] = field(default_factory=list)
    """Completed jobs in completion order (`Snapshot.finished`)."""
    time_s: float = 0.0
    heap: list[_Entry] = field(default_factory=list)
    """Pending events, a heap of (time, priority, sequence number)."""
    seq: int = 0
    """Events pushed so far (the heap's tie-break: first pushed, first popped)."""
    decide_pending: bool = False
    """A decision event is on the heap (at most one is)."""
    decisions: int = 0
    """Decision events popped so far (those with no job to decide for included)."""
    idle_streak: int = 0
    """Decisions in a row at which nothing trained and nothing was still to arrive."""
    pending_arrivals: int = 0
    waiting: Decide | None = None
    """The decision event awaiting `_decide`."""
    live: dict[int, _Job] = field(default_factory=dict)
    """Arrived, unfinished jobs, by arrival (then job id): the order they arrive in, since
    arrivals leave the heap in that order (`_start` pushes them so)."""
    rank: dict[int, int] = field(default_factory=dict)
    """job id -> its place in `jobs` (the order a decision advances jobs and logs their
    progress in)."""
    # What a decision reads and changes is kept up to date as it changes, so a decision
    # costs what changed (the jobs training, the jobs decided for), not the jobs waiting in
    # a long queue, which stay as they were decision after decision.
    running: dict[int, _Job] = field(default_factory=dict)
    """Live jobs training at a positive rate since the last decision: the only ones a
    decision advances (`_advance`)."""
    holding: dict[int, _Job] = field(default_factory=dict)
    """Live jobs holding tasks, by arrival: what the cluster's use sums, and the jobs the
    next decision changes besides those it names (it takes their tasks if it names none)."""
    started: dict[int, _Job] = field(default_factory=dict)
    """Live jobs that have started (`fixed_placement`: the fixed ones)."""
    views: dict[int, JobView] = field(default_factory=dict)
    """Every live job's view, by arrival (then job id)."""
    stale: set[int] = field(default_factory=set)
    """Live jobs whose view may have changed since it was built: those the last decision
    changed or left training (`_apply`); no other job changes before the next snapshot."""
    histories: bool = True
    """Views show the jobs' histories (False: a run whose policy declares it reads none,
    `DecisionPolicy.reads_history`)."""
    unlogged: dict[int, _Job] = field(default_factory=dict)
    """Live jobs with no tasks and no rate whose last "alloc" record (if any) says they had
    some: each is recorded once, at the next decision that shows it (`_record_allocs`)."""

    def push(self, time_s: float, priority: int, event: object) -> None:
        heapq.heappush(self.heap, _Entry(time_s, priority, self.seq, event))
        self.seq += 1

    def copy(self) -> _RunState:
        """An independent copy: jobs, random streams, logs and heap copied; the oracle
        shared (it reads only what never changes in a run: types and speed multipliers)."""
        jobs = {job_id: _copy_job(job) for job_id, job in self.jobs.items()}

        def same(part: dict[int, _Job]) -> dict[int, _Job]:
            return {job_id: jobs[job_id] for job_id in part}

        return replace(
            self,
            rng={name: copy.deepcopy(g) for name, g in self.rng.items()},
            jobs=jobs,
            live=same(self.live),
            running=same(self.running),
            holding=same(self.holding),
            started=same(self.started),
            unlogged=same(self.unlogged),
            views=dict(self.views),
            stale=set(self.stale),
            log=list(self.log),
            placement_rows=list(self.placement_rows),
            finished=list(self.finished),
            heap=list(self.heap),
        )

    def leave(self, job_id: int) -> None:
        """Take a finished job out of everything kept of the live ones."""
        kept = (self.live, self.running, self.holding, self.started, self.views, self.unlogged)
        for part in kept:
            part.pop(job_id, None)
        self.stale.discard(job_id)


def _copy_job(job: _Job) -> _Job:
    """A copy of one job's state (its fields are immutable values but the history list)."""
    twin = copy.copy(job)
    twin.history = list(job.history)
    return twin


@dataclass(frozen=True)
class SimResult:
    """Outcome of one run: per-job results, the event log and every decision's placement."""

    scheduler: str
    config: SimConfig
    jobs: pl.DataFrame
    """job_id, name, model, arrival_s, epochs_est, epochs_real, finish_s, jct_s."""
    events: tuple[EventRecord, ...]
    placements: pl.DataFrame
    """decision, time_s, job_id, server, workers, ps: tasks per (decision, job, server)."""

    @property
    def avg_jct_s(self) -> float:
        """Average job completion time (finish - arrival), seconds."""
        return float(self.jobs["jct_s"].mean())

    @property
    def avg_jct_slots(self) -> float:
        """Average JCT in time slots (DL2 reports JCT in slots)."""
        return self.avg_jct_s / self.config.slot_s

    @property
    def makespan_s(self) -> float:
        """Time the last job finished."""
        return float(self.jobs["finish_s"].max())

    def events_frame(self) -> pl.DataFrame:
        """The event log as a frame (columns of `EventRecord`)."""
        return pl.DataFrame(
            list(self.events),
            schema={
                "time_s": pl.Float64,
                "kind": pl.Utf8,
                "job_id": pl.Int64,
                "workers": pl.Int64,
                "ps": pl.Int64,
                "value": pl.Float64,
            },
            orient="row",
        )


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block, then as it was (a run inside a
    run leaves it to the outer one). A run allocates millions of short-lived objects and
    almost no reference cycles, so the collector's passes cost a whole-trace run 10-20% of
    its time and free next to nothing (RL-TAPS over 10,000 Philly-like jobs: 15 MB more at
    its peak); reference counting still frees everything else at once."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Simulator:
    """Runs a workload under a scheduler; `run()` may be called repeatedly (same result)."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        scheduler: DecisionPolicy,
        cfg: SimConfig | None = None,
        catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
        facts: tuple[SimFacts, ...] = DL2_SIM_FACTS,
        speed_model: PlacedSpeedModel | None = None,
    ) -> None:
        """`speed_model` replaces the default `SpeedModel(cfg.speed, catalogue, facts)`
        (RL-TAPS' topology model); it must index types by the catalogue's `type_index`."""
        self.cfg = cfg or SimConfig()
        self.scheduler = scheduler
        self.catalogue = catalogue
        self.specs = tuple(jobs)
        ids = [j.job_id for j in self.specs]
        if len(set(ids)) != len(ids):
            raise ValueError("job ids must be unique")
        names = by_name(catalogue)
        unknown = sorted({j.model for j in self.specs} - set(names))
        if unknown:
            raise ValueError(f"models not in the catalogue: {unknown}")
        self._types = names
        self.model = speed_model or SpeedModel(self.cfg.speed, catalogue, facts)
        c = self.cfg.cluster
        self._capacity = read_only(c.server_capacity())
        self._server_types = c.server_gpu_types()
        if self._server_types is not None:
            # A job naming only types the cluster lacks could never run: say so now.
            have = set(self._server_types)
            for j in self.specs:
                if j.gpu_types is not None and not j.gpu_types & have:
                    raise ValueError(
                        f"job {j.job_id} ({j.name or 'unnamed'}) needs GPU type {j.gpu_type!r}, "
                        f"which no server has (types: {sorted(t for t in have if t)})"
                    )
        interval = scheduler.interval_s
        self.interval_s = float(interval) if interval else self.cfg.slot_s
        # A policy may bring its own trigger (Optimus deciding at every event, a baseline
        # beside the ones deciding every interval in the same evaluation).
        self.trigger = getattr(scheduler, "trigger", None) or self.cfg.trigger
        if self.trigger not in TRIGGERS:
            raise ValueError(f"trigger must be one of {TRIGGERS}, got {self.trigger!r}")
        if self.interval_s <= 0:
            raise ValueError("decision interval must be positive")

    # -- setup ---------------------------------------------------------------------------

    def _streams(self) -> dict[str, np.random.Generator]:
        return named_streams(self.cfg.seed, STREAMS)

    def _init_jobs(self, rng: dict[str, np.random.Generator]) -> dict[int, _Job]:
        n = len(self.specs)
        sp = self.cfg.speed
        # Draw every stream's numbers up front, in job order, whether used or not, so turning
        # one noise source on or off leaves the others' draws unchanged.
        jitter = rng["arrivals"].uniform(0.0, 1.0, n) * self.cfg.arrival_jitter_s
        mult = 1.0 + sp.speed_variation * rng["speed"].uniform(-1.0, 1.0, n)
        err = 1.0 + sp.epoch_error * rng["epochs"].uniform(-1.0, 1.0, n)
        typed = self._server_types is not None
        return {
            s.job_id: _Job(
                spec=s,
                jt=self._types[s.model],
                arrival_s=s.arrival_s + float(jitter[i]),
                real_epochs=s.epochs * float(err[i]),
                speed_mult=float(mult[i]),
                worker_demand=s.worker_demand(self._types[s.model]),
                gpu_types=s.gpu_types if typed else None,
            )
            for i, s in enumerate(self.specs)
        }

    # -- run ---------------------------------------------------------------------------

    def run(
        self,
        until_s: float | None = None,
        progress: Callable[[int, int], None] | None = None,
        every: int = 2000,
    ) -> SimResult:
        """Simulate until every job has finished, or only the events up to `until_s` (then
        unfinished jobs have no finish time). `progress(finished jobs, jobs)` is called
        every `every` decisions and at the end (a whole trace runs for minutes)."""
        with _collector_paused():
            # The scheduler is the only reader of this run's snapshots: a policy declaring
            # that it reads no job history is given views without it.
            session = SimSession(
                self, until_s, histories=bool(getattr(self.scheduler, "reads_history", True))
            )
            decisions = 0
            while not session.done:
                session.submit(*self.scheduler.decide(session.snapshot, session.rng))
                decisions += 1
                if progress is not None and decisions % every == 0:
                    progress(len(self.specs) - session.unfinished(), len(self.specs))
            if progress is not None:
                progress(len(self.specs) - session.unfinished(), len(self.specs))
            return session.result()

    def session(self, until_s: float | None = None) -> SimSession:
        """A run driven from outside: read `session.snapshot`, `submit` a decision, repeat
        (gymnasium environments and decision recorders drive the simulator this way; the
        simulator's own scheduler is not consulted)."""
        return SimSession(self, until_s)

    def _start(self, state: _RunState) -> None:
        """Put every job's arrival on the heap."""
        for job in sorted(state.jobs.values(), key=lambda j: (j.arrival_s, j.spec.job_id)):
            state.push(job.arrival_s, _ARRIVAL, Arrival(job.spec.job_id))
        state.pending_arrivals = len(state.jobs)

    def _request_decision(self, state: _RunState, t: float) -> None:
        """Schedule the next decision (event-driven: now; otherwise the next interval
        boundary at or after t), unless one is already scheduled."""
        if state.decide_pending:
            return
        if self.trigger == "events":
            state.push(t, _DECIDE, Decide(state.decisions))
        else:
            k = math.ceil(t / self.interval_s - 1e-12)
            state.push(k * self.interval_s, _DECIDE, Decide(k))
        state.decide_pending = True

    def _next_decision(self, state: _RunState) -> Snapshot | None:
        """Run events up to the next decision with a job to decide for and return its
        snapshot (the decision then waits in `state.waiting`); None when the run is over."""
        jobs, log = state.jobs, state.log
        while state.heap and (state.until_s is None or state.heap[0].time_s <= state.until_s):
            entry = heapq.heappop(state.heap)
            t, event = entry.time_s, entry.event
            state.time_s = t
            if isinstance(event, Finish):
                job = jobs[event.job_id]
                if job.finish_s is None and job.version == event.version:
                    self._complete(job, t, state)
                    if self.trigger == "events":
                        self._request_decision(state, t)
            elif isinstance(event, Arrival):
                job = jobs[event.job_id]
                job.arrived = True
                job.last_s = t
                state.live[event.job_id] = job
                job.view, job.view_key = _view(job, state.histories), _view_key(job)
                state.views[event.job_id] = job.view
                state.unlogged[event.job_id] = job
                state.pending_arrivals -= 1
                log.append((t, "arrive", job.spec.job_id, 0, 0, job.arrival_s))
                self._request_decision(state, t)
            elif isinstance(event, Decide):
                state.decide_pending = False
                state.decisions += 1
                if state.decisions > self.cfg.max_decisions:
                    raise SimulationStalled(
                        f"more than {self.cfg.max_decisions} decisions; "
                        f"{sum(j.finish_s is None for j in jobs.values())} jobs unfinished"
                    )
                self._advance(state, t)
                if not state.live:
                    continue
                state.waiting = event
                return self._snapshot(state, t)
        return None

    def _decide(
        self, state: _RunState, snap: Snapshot, alloc: Allocation, placement: Placement
    ) -> None:
        """Apply the decision waiting at `snap` and schedule what follows from it."""
        if state.waiting is None:
            raise RuntimeError("no decision is waiting")
        event = state.waiting
        t = snap.time_s
        events_mode = self.trigger == "events"
        training = self._apply(state, snap, alloc, placement)
        state.waiting = None
        next_t = math.inf if events_mode else (event.index + 1) * self.interval_s
        # Completions before the next decision are known now: speeds are fixed until then
        # (in the event-driven mode, until the next arrival or finish).
        for job in training:
            start = max(t, job.pause_until)
            t_f = start + (job.real_epochs - job.done) / job.rate
            if t_f <= next_t:
                state.push(t_f, _FINISH, Finish(job.spec.job_id, job.version))
        state.idle_streak = 0 if training or state.pending_arrivals else state.idle_streak + 1
        # Event-driven, an idle decision is the last one (nothing would wake it).
        limit = 1 if events_mode else self.cfg.stall_decisions
        if limit and state.idle_streak >= limit:
            raise SimulationStalled(
                f"at t={t:.0f}s {len(state.live)} jobs wait, none runs and none arrives "
                f"(scheduler {self.scheduler.name})"
            )
        if not events_mode:
            state.push(next_t, _DECIDE, Decide(event.index + 1))
            state.decide_pending = True

    # -- steps -------------------------------------------------------------------------

    def _advance(self, state: _RunState, t: float) -> None:
        """Bring the progress of every job training since the last decision to time t
        (taking those that finish by t out of the run, onto `finished`). A job training at
        no rate has nothing to advance; its clock (`last_s`) is set when it starts again
        (`_apply`)."""
        rank = state.rank
        for job in sorted(state.running.values(), key=lambda j: rank[j.spec.job_id]):
            productive = max(0.0, t - max(job.last_s, job.pause_until))
            gained = job.rate * productive
            if job.done + gained >= job.real_epochs * (1.0 - 1e-12):
                # Rounding put the exact finish a hair past the decision: finish now.
                self._complete(job, t, state)
                continue
            if productive > 0:
                job.done += gained
                self._observe(job, productive, gained, t, state.log)
            job.last_s = t

    def _observe(self, job: _Job, productive: float, gained: float, t: float, log) -> None:
        log.append((t, "progress", job.spec.job_id, job.workers, job.ps, gained))
        speed = gained * job.jt.iters_per_epoch / productive
        job.history.append(SpeedSample(job.workers, job.ps, speed, productive, t))

    def _complete(self, job: _Job, t: float, state: _RunState) -> None:
        """`job` finishes at t: its last progress and its finish are logged, and it leaves
        the live jobs."""
        log = state.log
        productive = max(0.0, t - max(job.last_s, job.pause_until))
        gained = job.real_epochs - job.done
        job.done = job.real_epochs  # exactly: no overshoot, no rounding residue
        if productive > 0:
            self._observe(job, productive, gained, t, log)
        job.finish_s = t
        job.last_s = t
        job.rate = 0.0
        job.version += 1
        job.workers = job.ps = 0
        job.placement = EMPTY_PLACEMENT
        log.append((t, "finish", job.spec.job_id, 0, 0, t - job.arrival_s))
        state.finished.append(
            FinishedJob(
                job.spec.job_id,
                job.jt.model,
                job.arrival_s,
                t,
                job.worker_demand,
                tuple(job.history),
            )
        )
        state.leave(job.spec.job_id)

    def _used(self, jobs: Iterable[_Job]) -> np.ndarray:
        # Only placed jobs hold resources.
        servers, demands = task_arrays(
            group
            for job in jobs
            if job.workers or job.ps
            for group in (
                (job.placement.workers, job.worker_demand),
                (job.placement.ps, job.jt.ps_demand),
            )
        )
        return summed_demands(servers, demands, self._capacity.shape[0])

    def _snapshot(self, state: _RunState, t: float) -> Snapshot:
        self._refresh_views(state)
        views, window = state.views, self.cfg.window
        holding = list(state.holding.values())
        fixed: list[_Job] = []
        reserved = shares = None
        if self.cfg.fixed_placement:
            # Running jobs keep their placement: context for the decision, not part of it.
            fixed = sorted(state.started.values(), key=_arrival_order)
            waiting = (v for job_id, v in views.items() if job_id not in state.started)
            visible = tuple(waiting if window is None else islice(waiting, window))
            # The waiting jobs' tasks, then the fixed ones', each by arrival.
            kept = [j for j in holding if j.started_s is not None]
            holding = [j for j in holding if j.started_s is None] + kept
            reserved, shares = read_only(self._used(kept)), _shares(fixed)
        else:
            visible = tuple(views.values() if window is None else islice(views.values(), window))
        return Snapshot(
            time_s=t,
            slot=int(t // self.cfg.slot_s),
            slot_s=self.cfg.slot_s,
            decision=state.decisions - 1,
            cluster=ClusterView(
                self._capacity,
                read_only(self._used(holding)),
                reserved,
                gpu_types=self._server_types,
                reserved_shares=shares,
            ),
            jobs=visible,
            catalogue=self.catalogue,
            oracle=state.oracle,
            fixed_jobs=tuple(views[j.spec.job_id] for j in fixed),
            finished=Finished(state.finished),
        )

    def _refresh_views(self, state: _RunState) -> None:
        """Build again the views of the jobs whose view may have changed (`stale`), each
        only when something it shows has (a queue of waiting jobs shows the same views
        decision after decision)."""
        for job_id in state.stale:
            j = state.live[job_id]
            key = _view_key(j)
            if j.view_key != key:
                j.view, j.view_key = _view(j, state.histories), key
                state.views[job_id] = j.view
        state.stale.clear()

    def _validate(
        self,
        snap: Snapshot,
        alloc: Allocation,
        placement: Placement,
        visible: Mapping[int, JobView],
    ) -> None:
        for job_id, (w, p) in alloc.counts.items():
            view = visible.get(job_id)
            if view is None:
                raise InvalidDecision(f"allocation names job {job_id}, which is not visible")
            if not (0 <= w <= view.max_workers and 0 <= p <= view.max_workers):
                raise InvalidDecision(
                    f"job {job_id}: {w} workers / {p} PSs outside 0..{view.max_workers}"
                )
        n = self._capacity.shape[0]
        groups: list[tuple[tuple[int, ...], tuple[float, float, float]]] = []
        for job_id, pl_ in placement.jobs.items():
            w, p = alloc.get(job_id)
            view = visible.get(job_id)
            if view is None or len(pl_.workers) > w or len(pl_.ps) > p:
                raise InvalidDecision(
                    f"placement of job {job_id} has {len(pl_.workers)} workers / "
                    f"{len(pl_.ps)} PSs, allocation {w} / {p}"
                )
            groups.append((pl_.workers, view.worker_demand))
            groups.append((pl_.ps, view.ps_demand))
        servers, demands = task_arrays(groups)
        bad = servers[(servers < 0) | (servers >= n)]
        if len(bad):
            raise InvalidDecision(
                f"placement names servers that do not exist: {sorted(set(bad.tolist()))}"
            )
        for job_id, pl_ in placement.jobs.items():
            view = visible[job_id]
            if view.gpu_types is not None and view.worker_demand[0] > 0:
                wrong = [s for s in pl_.workers if self._server_types[s] not in view.gpu_types]
                if wrong:
                    raise InvalidDecision(
                        f"job {job_id} needs GPU type {sorted(view.gpu_types)}; servers "
                        f"{sorted(set(wrong))} have another"
                    )
        if snap.cluster.reserved is None:
            used = summed_demands(servers, demands, n)
        else:  # added task by task onto what is reserved
            used = np.zeros_like(self._capacity)
            used += snap.cluster.reserved
            np.add.at(used, servers, demands)
        over = np.argwhere(used > self._capacity + 1e-9)
        if len(over):
            server, res = over[0]
            raise InvalidDecision(
                f"placement exceeds server {server} capacity of resource {res}: "
                f"{used[server, res]} > {self._capacity[server, res]}"
            )

    def _trainable(self, jobs: Sequence[_Job], placements: Sequence[JobPlacement]) -> list[bool]:
        """Whether each job can train with its placement: the speed model gives it a
        positive isolated speed (DL2 jobs need a worker and a PS; all-reduce jobs only
        workers). One vectorized call for all jobs (the speed models are elementwise)."""
        out = [False] * len(jobs)
        # Only placed jobs can train: the speed model runs on those.
        idx = [i for i, pl_ in enumerate(placements) if pl_.workers]
        if not idx:
            return out
        base = self.model.base(
            [jobs[i].jt.type_index for i in idx],
            [len(placements[i].workers) for i in idx],
            [len(placements[i].ps) for i in idx],
        )
        for i, speed in zip(idx, base.tolist(), strict=True):
            out[i] = speed > 0
        return out

    def _visible(self, state: _RunState, snap: Snapshot) -> Mapping[int, JobView]:
        """The jobs `snap` shows to decide for, by id."""
        if self.cfg.window is None and not self.cfg.fixed_placement:
            return state.views  # every live job, unchanged since the snapshot
        return {v.job_id: v for v in snap.jobs}

    def _apply(
        self, state: _RunState, snap: Snapshot, alloc: Allocation, placement: Placement
    ) -> list[_Job]:
        """Validate and apply one decision; returns the jobs that train this interval.

        Only the jobs the decision names and those holding tasks can change: every other
        live job waited with nothing before and waits with nothing after."""
        jobs, t, decision = state.jobs, snap.time_s, snap.decision
        log, speed_rng = state.log, state.rng["speed"]
        visible = self._visible(state, snap)
        self._validate(snap, alloc, placement, visible)
        if snap.fixed_jobs:
            kept = {v.job_id: jobs[v.job_id] for v in snap.fixed_jobs}
            alloc = Allocation.of(
                {**alloc.counts, **{i: (j.workers, j.ps) for i, j in kept.items()}}
            )
            placement = Placement.of(
                {**placement.jobs, **{i: j.placement for i, j in kept.items()}}
            )
        log.append((t, "decide", -1, 0, 0, float(len(snap.jobs))))
        pause = self.cfg.speed.realloc_pause_s
        named = {*alloc.counts, *placement.jobs, *state.holding}
        # By arrival, as every live job would be: the speed model and the speed stream's
        # draws see the placed jobs in this order.
        touched = sorted((jobs[i] for i in named), key=_arrival_order)
        news = [placement.get(job.spec.job_id) for job in touched]
        trainable = self._trainable(touched, news)
        for job, new, can_train in zip(touched, news, trainable, strict=True):
            w, p = alloc.get(job.spec.job_id)
            if (len(new.workers), len(new.ps)) != (w, p):
                log.append(
                    (t, "unplaced", job.spec.job_id, w - len(new.workers), p - len(new.ps), 0.0)
                )
            # Every decision recomputes every speed (interference changes even when this
            # job's placement does not), so any completion scheduled before is stale.
            job.version += 1
            if can_train and new != job.placement:
                delay = pause if job.started_s is not None else self.cfg.speed.start_delay_s
                job.pause_until = t + delay
            job.placement = new
            job.workers, job.ps = len(new.workers), len(new.ps)
            if job.started_s is None and can_train:
                job.started_s = t
                state.started[job.spec.job_id] = job
            job.rate = 0.0
            state.stale.add(job.spec.job_id)

        placed = [j for j in touched if j.placement.workers or j.placement.ps]
        speeds = self.model.placed(
            [j.jt.type_index for j in placed],
            [j.workers for j in placed],
            [j.ps for j in placed],
            [j.placement for j in placed],
            self._capacity.shape[0],
        )
        # One draw per placed job each decision; the speed stream's order is job order.
        noise = 1.0 + self.cfg.speed.slot_noise * speed_rng.uniform(-1.0, 1.0, len(placed))
        for job, speed, eps in zip(placed, speeds, noise, strict=True):
            job.rate = float(speed * job.speed_mult * eps / job.jt.iters_per_epoch)
        self._record_allocs(state, snap, touched, visible)
        # The placements log is built once at the end of the run (`_placements_frame`).
        state.placement_rows.extend(
            (decision, t, job.spec.job_id, job.placement.workers, job.placement.ps)
            for job in placed
        )
        training = [j for j in placed if j.rate > 0]
        for job in training:
            job.last_s = t  # its progress counts from now (`_advance`)
        state.holding = {j.spec.job_id: j for j in placed}
        state.running = {j.spec.job_id: j for j in training}
        return training

    def _record_allocs(
        self,
        state: _RunState,
        snap: Snapshot,
        touched: list[_Job],
        visible: Mapping[int, JobView],
    ) -> None:
        """An "alloc" record per job the decision showed (fixed ones first, each by
        arrival), but that a job left with no tasks and no rate is recorded at the first
        such decision only: a queue of thousands over a whole trace would fill the log.
        The jobs to record are those decided for and those not recorded since they last
        had nothing (`unlogged`; with a window, those it shows)."""
        jobs = state.jobs
        fixed = {v.job_id for v in snap.fixed_jobs}
        if self.cfg.window is None:
            waiting = state.unlogged
        else:
            waiting = {
                v.job_id: jobs[v.job_id] for v in snap.jobs if not jobs[v.job_id].logged_idle
            }
        shown = {j.spec.job_id: j for j in touched} | waiting
        order = sorted(
            (j for i, j in shown.items() if i in fixed or i in visible),
            key=lambda j: (j.spec.job_id not in fixed, *_arrival_order(j)),
        )
        for job in order:
            idle = not (job.workers or job.ps or job.rate)
            if idle and job.logged_idle:
                continue
            job.logged_idle = idle
            state.log.append((snap.time_s, "alloc", job.spec.job_id, job.workers, job.ps, job.rate))
        for job_id, job in shown.items():
            if not (job.workers or job.ps or job.rate or job.logged_idle):
                state.unlogged[job_id] = job
            else:
                state.unlogged.pop(job_id, None)

    def _result(self, jobs: dict[int, _Job], log, placement_rows) -> SimResult:
        ordered = sorted(jobs.values(), key=lambda j: j.spec.job_id)
        frame = pl.DataFrame(
            {
                "job_id": [j.spec.job_id for j in ordered],
                "name": [j.spec.name for j in ordered],
                "model": [j.jt.model for j in ordered],
                "arrival_s": [j.arrival_s for j in ordered],
                "epochs_est": [j.spec.epochs for j in ordered],
                "epochs_real": [j.real_epochs for j in ordered],
                "finish_s": [j.finish_s for j in ordered],
            },
            schema_overrides={"finish_s": pl.Float64},
        ).with_columns((pl.col("finish_s") - pl.col("arrival_s")).alias("jct_s"))
        placements = _placements_frame(placement_rows, self._capacity.shape[0])
        events = tuple(map(EventRecord._make, log))
        return SimResult(self.scheduler.name, self.cfg, frame, events, placements)


class SimSession:
    """One run, advanced decision by decision from outside.

    `snapshot` is the pending decision (None once the run is over); `submit(alloc,
    placement)` applies a decision and runs to the next one. Progress figures a reward
    needs (epochs trained, jobs in the system) are read here, never by the policy."""

    def __init__(
        self, sim: Simulator, until_s: float | None = None, *, histories: bool = True
    ) -> None:
        """`histories`: whether the snapshots' views show the jobs' histories (a session
        driven from outside may be read by anything: `session` keeps them)."""
        self.sim = sim
        rng = sim._streams()
        jobs = sim._init_jobs(rng)
        oracle = _Oracle(sim.model, jobs) if sim.scheduler.uses_oracle else None
        self._state = _RunState(
            rng=rng,
            jobs=jobs,
            oracle=oracle,
            until_s=until_s,
            rank={job_id: i for i, job_id in enumerate(jobs)},
            histories=histories,
        )
        self._result: SimResult | None = None
        self.snapshot: Snapshot | None = None
        sim._start(self._state)
        self._next()

    def _next(self) -> None:
        self.snapshot = self.sim._next_decision(self._state)
        if self.snapshot is None:
            state = self._state
            self._result = self.sim._result(state.jobs, state.log, state.placement_rows)

    def fork(self) -> SimSession:
        """An independent copy of the run as it stands (the same pending decision, the
        same random streams): whatever is submitted to one leaves the other as it was, and
        a fork continued with the same decisions ends exactly as this run would. A search
        forks at a decision to try every continuation without replaying the run so far."""
        twin = object.__new__(SimSession)
        twin.sim = self.sim
        twin._state = self._state.copy()
        twin._result = self._result
        twin.snapshot = self.snapshot
        return twin

    @property
    def done(self) -> bool:
        """True when no decision is pending (every job finished, or `until_s` reached)."""
        return self.snapshot is None

    @property
    def rng(self) -> np.random.Generator:
        """The simulator's placement stream (what `DecisionPolicy.decide` receives)."""
        return self._state.rng["placement"]

    @property
    def time_s(self) -> float:
        """Simulated time of the pending decision (of the last event once done)."""
        return self.snapshot.time_s if self.snapshot is not None else self._state.time_s

    def submit(self, alloc: Allocation, placement: Placement) -> None:
        """Apply a decision to the pending snapshot and run to the next decision."""
        if self.snapshot is None:
            raise RuntimeError("the run is over; nothing to decide")
        self.sim._decide(self._state, self.snapshot, alloc, placement)
        self._next()

    def epochs_done(self) -> dict[int, tuple[float, float]]:
        """job id -> (epochs trained, epochs the job really needs) for every arrived job,
        finished ones included, as of the pending decision."""
        return {
            j.spec.job_id: (j.done, j.real_epochs) for j in self._state.jobs.values() if j.arrived
        }

    def jobs_in_system(self) -> int:
        """Arrived, unfinished jobs."""
        return len(self._state.live)

    def unfinished(self) -> int:
        """Jobs not finished yet, arrived or not."""
        return self._state.pending_arrivals + len(self._state.live)

    def result(self) -> SimResult:
        """The run's result; only once `done`."""
        if self._result is None:
            raise RuntimeError("the run is not over; keep submitting decisions")
        return self._result


def simulate(
    jobs: Sequence[JobSpec], scheduler: DecisionPolicy, cfg: SimConfig | None = None
) -> SimResult:
    """Run `jobs` under `scheduler` with `cfg` (default config) and return the result."""
    return Simulator(jobs, scheduler, cfg).run()
