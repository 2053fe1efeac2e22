"""Wire snapshot -> the simulator's snapshot -> a policy's decision -> wire decision.

Pure functions: nothing here reads a clock, a file or a global. The mapping of a live job
is the one a learned replay applies to a trace's jobs (`tracelib.workloads`):

- model: the job's model if it names a catalogue model (ignoring case and punctuation),
  otherwise a catalogue GPU model picked by a draw that is a hash of the job id (the same
  job maps to the same model in every snapshot);
- workers: its GPUs over the model's GPUs per worker (at least 1, at most the model's
  max_workers), PSs one per worker; a job of one worker asking for a fraction of a GPU
  keeps that share (`JobSpec.gpu_share`); a fractional request above one GPU is rounded up
  to whole-GPU workers;
- epochs: its duration estimate read as single-worker run time; a job without one is
  taken to need `DEFAULT_RUN_TIME_S`;
- arrival: seconds since the earliest submission in the snapshot.

The policy decides over what is free now: each server's capacity in the simulator's view
is its free GPUs, CPUs and memory (GiB converted to the catalogue's GB), a partly free GPU
is a GPU share the pool knows about, and the running jobs are not the policy's to move (they
are not in the view). A pending job starts when the policy gives it at least one worker and
places every task it allocated. Each start is then checked against the live free
resources and GPU types (`fit_live`) in the policy's order, and a start that does not fit
waits instead: a decision never puts a job on a server without the free GPUs.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.scenarios.dl2 import DL2_SMALL
from tracelib.shadow.schemas import PendingJob, Snapshot, StartedJob
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import DecisionPolicy
from tracelib.sim.snapshot import (
    Allocation,
    ClusterView,
    JobView,
    Placement,
    read_only,
)
from tracelib.sim.snapshot import Snapshot as SimSnapshot
from tracelib.workloads import CatalogueMatcher, DeriveConfig, epochs_of_run_time, requested_tasks

DEFAULT_RUN_TIME_S = 3600.0
"""Run time assumed for a pending job without a duration estimate (one hour)."""
GB_PER_GIB = 2**30 / 1e9
_EPS = 1e-9


class Task(NamedTuple):
    """One worker or PS of a start: its server (index into the wire snapshot's servers) and
    its (GPU, CPU, memory GB) demand. (A named tuple: a decision makes thousands.)"""

    server: int
    demand: tuple[float, float, float]
    worker: bool


@dataclass(frozen=True)
class Start:
    """A pending job the policy would start: its index among the wire snapshot's pending
    jobs, its counts and its tasks."""

    job: int
    workers: int
    ps: int
    tasks: tuple[Task, ...]


@dataclass(frozen=True)
class SimView:
    """The simulator's snapshot of a wire snapshot. Simulator job `k` is `pending[k]`;
    simulator server `i` is wire server `i`."""

    snapshot: SimSnapshot
    pending: tuple[PendingJob, ...]
    typed: bool
    """Whether any server names a GPU type (then jobs' GPU types are honoured)."""


def job_type_of(job: PendingJob, matcher: CatalogueMatcher) -> JobType:
    """A live job's catalogue model: named, else a draw from the hash of its id."""
    draw = zlib.crc32(job.id.encode("utf-8")) / 2**32
    return matcher.job_type(job.model, job.gpus, draw)


def _seconds(t: datetime, origin: datetime) -> float:
    return (t - origin).total_seconds()


def to_sim(
    snap: Snapshot,
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
    slot_s: float = DL2_SMALL.slot_s,
) -> SimView:
    """The simulator's immutable snapshot of `snap` (see the module docstring)."""
    matcher = CatalogueMatcher(catalogue)
    servers = snap.servers
    capacity = np.array(
        [[s.free_gpus, s.free_cpus, s.free_memory_gib * GB_PER_GIB] for s in servers],
        dtype=float,
    ).reshape(len(servers), 3)
    # A partly free GPU (free_gpus 1.5: one whole GPU and half of another) is a GPU the
    # pool already shares: a task of that share on it, so only the rest is free there.
    shares = {
        i: (1.0 - (s.free_gpus % 1.0),)
        for i, s in enumerate(servers)
        if _EPS < s.free_gpus % 1.0 < 1.0 - _EPS
    }
    typed = any(s.gpu_type for s in servers)
    cluster = ClusterView(
        capacity=read_only(capacity),
        used=read_only(np.zeros_like(capacity)),
        gpu_types=tuple(s.gpu_type for s in servers) if typed else None,
        reserved_shares=shares or None,
    )
    origin = min((j.submit_time for j in snap.pending), default=snap.time)
    min_epochs = DeriveConfig().min_epochs
    views = []
    for k, job in enumerate(snap.pending):
        jt = job_type_of(job, matcher)
        workers, ps = requested_tasks(jt, job.gpus)
        run_time = job.duration_estimate_s or DEFAULT_RUN_TIME_S
        spec = JobSpec(
            job_id=k,
            model=jt.model,
            epochs=max(epochs_of_run_time(jt, run_time), min_epochs),
            arrival_s=_seconds(job.submit_time, origin),
            num_workers=workers,
            num_ps=ps,
            name=job.id,
            # As a trace's job (tracelib.sim.jobs.jobs_from_frame): a share of one GPU
            # stays a share only for a GPU model's single worker.
            gpu_share=job.gpus if job.gpus < 1.0 and workers == 1 and jt.worker_gpu > 0 else None,
            gpu_type=job.gpu_type,
        )
        views.append(
            JobView(
                job_id=k,
                model=jt.model,
                type_index=jt.type_index,
                arrival_s=spec.arrival_s,
                epochs_est=spec.epochs,
                epochs_done=0.0,
                workers=0,
                ps=0,
                requested_workers=workers,
                requested_ps=ps,
                max_workers=jt.max_workers,
                worker_demand=spec.worker_demand(jt),
                ps_demand=jt.ps_demand,
                gpu_types=spec.gpu_types if typed else None,
            )
        )
    views.sort(key=lambda v: (v.arrival_s, v.job_id))
    time_s = max(_seconds(snap.time, origin), max((v.arrival_s for v in views), default=0.0))
    sim = SimSnapshot(
        time_s=time_s,
        slot=int(time_s // slot_s),
        slot_s=slot_s,
        decision=0,
        cluster=cluster,
        jobs=tuple(views),
        catalogue=catalogue,
    )
    return SimView(sim, tuple(snap.pending), typed)


def proposed_starts(view: SimView, alloc: Allocation, placement: Placement) -> list[Start]:
    """The jobs the policy would start, in its snapshot's job order: at least one worker
    and every allocated task placed (a job placed in part waits)."""
    starts = []
    for job in view.snapshot.jobs:
        workers, ps = alloc.get(job.job_id)
        placed = placement.get(job.job_id)
        if workers < 1 or len(placed.workers) != workers or len(placed.ps) != ps:
            continue
        tasks = tuple(Task(s, job.worker_demand, True) for s in placed.workers) + tuple(
            Task(s, job.ps_demand, False) for s in placed.ps
        )
        starts.append(Start(job.job_id, workers, ps, tasks))
    return starts


class _ServerRoom:
    """What is left on one live server while starts are checked: whole free GPUs, the free
    part of each partly used GPU, CPUs and memory (GB)."""

    def __init__(self, free_gpus: float, cpus: float, memory_gb: float) -> None:
        self.whole = math.floor(free_gpus + _EPS)
        part = free_gpus - self.whole
        self.parts = [part] if part > _EPS else []
        self.cpus, self.memory = cpus, memory_gb

    def copy(self) -> _ServerRoom:
        """An independent copy (a start is tried on copies and kept only if it fits)."""
        out = _ServerRoom(0.0, self.cpus, self.memory)
        out.whole, out.parts = self.whole, list(self.parts)
        return out

    def take(self, gpu: float, cpu: float, memory: float) -> bool:
        """Take one task's demand if it fits (True), else leave everything as it was."""
        if cpu > self.cpus + _EPS or memory > self.memory + _EPS:
            return False
        if gpu >= 1.0 - _EPS:
            need = math.ceil(gpu - _EPS)
            if need > self.whole:
                return False
            self.whole -= need
        elif gpu > _EPS:
            fitting = [k for k, room in enumerate(self.parts) if room + _EPS >= gpu]
            if fitting:
                best = min(fitting, key=lambda k: self.parts[k])  # best fit
                self.parts[best] -= gpu
            elif self.whole >= 1:
                self.whole -= 1
                self.parts.append(1.0 - gpu)
            else:
                return False
        self.cpus -= cpu
        self.memory -= memory
        return True


def _allowed(job: PendingJob, server_type: str | None, typed: bool) -> bool:
    """Whether a GPU worker of `job` may run on a server of `server_type` (JobSpec's rule:
    a cluster without types ignores jobs' types)."""
    if not typed or not job.gpu_type:
        return True
    wanted = {t.strip() for t in job.gpu_type.split("|") if t.strip()}
    return server_type in wanted


def fit_live(
    snap: Snapshot, starts: Sequence[Start], typed: bool
) -> tuple[list[Start], list[Start]]:
    """Split `starts` into those that fit the live cluster, taken in order (each one's tasks
    from what the earlier ones left), and those that do not (wrong GPU type, or not enough
    free GPUs, CPUs or memory on a server)."""
    # Only the servers some start uses are tracked (made on first use).
    rooms: dict[int, _ServerRoom] = {}
    fitting, refused = [], []
    for start in starts:
        job = snap.pending[start.job]
        # Tried on copies of the servers it touches; kept only if every task fits.
        trial: dict[int, _ServerRoom] = {}
        ok = True
        for task in start.tasks:
            server = task.server
            if task.worker and task.demand[0] > _EPS:
                ok = _allowed(job, snap.servers[server].gpu_type, typed)
            if ok:
                room = trial.get(server)
                if room is None:
                    base = rooms.get(server)
                    room = trial[server] = base.copy() if base else _room_of(snap, server)
                ok = room.take(*task.demand)
            if not ok:
                break
        if ok:
            rooms.update(trial)
            fitting.append(start)
        else:
            refused.append(start)
    return fitting, refused


def _room_of(snap: Snapshot, server: int) -> _ServerRoom:
    s = snap.servers[server]
    return _ServerRoom(s.free_gpus, s.free_cpus, s.free_memory_gib * GB_PER_GIB)


def started_jobs(snap: Snapshot, starts: Sequence[Start]) -> list[StartedJob]:
    """The wire form of `starts`: job id, GPUs its workers hold, the servers its tasks use."""
    out = []
    for start in starts:
        gpus = sum(t.demand[0] for t in start.tasks if t.worker)
        names = sorted({snap.servers[t.server].name for t in start.tasks})
        out.append(
            StartedJob(
                job=snap.pending[start.job].id,
                gpus=round(gpus, 9),
                servers=names,
                workers=start.workers,
                ps=start.ps,
            )
        )
    return out


@dataclass(frozen=True)
class Outcome:
    """A decision on the live cluster: what starts, what waits, and the starts the policy
    proposed that the live check refused."""

    start: list[StartedJob]
    wait: list[str]
    refused: int
    compute_s: float = 0.0
    """Seconds computing it took (set by the caller that timed it; this module reads no clock)."""


def decide(policy: DecisionPolicy, snap: Snapshot, rng: np.random.Generator) -> Outcome:
    """Run `policy` on `snap` and return the decision as it would apply to the live cluster."""
    view = to_sim(snap)
    if not view.snapshot.jobs:
        return Outcome([], [], 0)
    alloc, placement = policy.decide(view.snapshot, rng)
    fitting, refused = fit_live(snap, proposed_starts(view, alloc, placement), view.typed)
    started = {s.job for s in fitting}
    wait = [job.id for k, job in enumerate(snap.pending) if k not in started]
    return Outcome(started_jobs(snap, fitting), wait, len(refused))
