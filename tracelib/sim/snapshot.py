"""What a scheduler sees and what it returns: immutable snapshots and decisions.

A snapshot is built fresh for every decision from the simulator's state: frozen dataclasses,
tuples and read-only numpy arrays, so a policy cannot change the simulation by accident.
Decisions (`Allocation`, `Placement`) are frozen too; the engine validates them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from types import MappingProxyType
from typing import Protocol

import numpy as np

from tracelib.catalogue import JobType
from tracelib.sim.cluster import FreePool


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only copy of `a` (a policy writing into it raises ValueError)."""
    out = np.array(a, dtype=float, copy=True)
    out.flags.writeable = False
    return out


@dataclass(frozen=True)
class JobPlacement:
    """Servers of a job's workers and PSs: one server index per task, sorted."""

    workers: tuple[int, ...] = ()
    ps: tuple[int, ...] = ()

    @classmethod
    def of(cls, workers, ps) -> JobPlacement:
        """From any iterables of server indices (sorted here)."""
        return cls(tuple(sorted(map(int, workers))), tuple(sorted(map(int, ps))))


EMPTY_PLACEMENT = JobPlacement()


@dataclass(frozen=True)
class SpeedSample:
    """One observation of a job's training speed over an interval it ran unchanged."""

    workers: int
    ps: int
    speed: float
    """Mini-batches per second summed over workers (catalogue unit), as observed."""
    duration_s: float
    """Training time the observation covers."""
    time_s: float
    """End of the observed interval."""


@dataclass(frozen=True)
class JobView:
    """A visible (arrived, unfinished) job as the scheduler sees it."""

    job_id: int
    model: str
    type_index: int
    arrival_s: float
    epochs_est: float
    """Total epochs as estimated by the user (the true total may differ: epoch_error)."""
    epochs_done: float
    workers: int
    """Workers during the interval that just ended."""
    ps: int
    requested_workers: int
    requested_ps: int
    max_workers: int
    """Cap on workers and on PSs per job (catalogue)."""
    worker_demand: tuple[float, float, float]
    """(GPU, CPU, memory GB) of one worker."""
    ps_demand: tuple[float, float, float]
    placement: JobPlacement = EMPTY_PLACEMENT
    history: tuple[SpeedSample, ...] = ()
    """Observed speeds, oldest first (Optimus fits its model on these)."""
    started_s: float | None = None
    """When the job first trained, None if it has not yet."""
    gpu_types: frozenset[str] | None = None
    """GPU types its workers may use (the trace's), None for any server."""

    @cached_property
    def task_kind(self) -> tuple:
        """(worker demand, PS demand, GPU types): where one of its tasks may go depends on
        nothing else (`builder.any_task_fits`). Kept with the view, which a waiting job
        keeps from decision to decision."""
        return (self.worker_demand, self.ps_demand, self.gpu_types)

    @property
    def remaining_epochs_est(self) -> float:
        """Epochs left by the user's estimate (0 once the estimate is used up)."""
        return max(self.epochs_est - self.epochs_done, 0.0)


def held_by_tasks(views: Iterable[JobView], n_servers: int) -> np.ndarray:
    """(n_servers, 3) resources the placed workers and PSs of `views` hold per server."""
    used = np.zeros((n_servers, 3))
    for v in views:
        for server in v.placement.workers:
            used[server] += v.worker_demand
        for server in v.placement.ps:
            used[server] += v.ps_demand
    return used


@dataclass(frozen=True)
class FinishedJob:
    """A job that has completed, as the cluster manager saw it: when it came and went and
    what it trained on (what a scheduler may learn job sizes from, e.g. Tiresias' Gittins
    index over the service of completed jobs)."""

    job_id: int
    model: str
    arrival_s: float
    finish_s: float
    worker_demand: tuple[float, float, float]
    """(GPU, CPU, memory GB) of one worker."""
    history: tuple[SpeedSample, ...]
    """Its observed training intervals, oldest first, the last one ending at `finish_s`."""


class Finished(Sequence[FinishedJob]):
    """The jobs completed so far in a run, oldest first: a read-only view of the first
    entries of the run's completion list, which only grows. A snapshot holds one at no
    cost however many jobs have finished (a copy per decision would make a whole trace's
    run quadratic in its jobs)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[FinishedJob] | tuple[FinishedJob, ...] = ()) -> None:
        self._items = items
        self._n = len(items)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return tuple(self._items[i] for i in range(*index.indices(self._n)))
        if not -self._n <= index < self._n:
            raise IndexError("finished job index out of range")
        return self._items[index % self._n]

    def __iter__(self) -> Iterator[FinishedJob]:
        return islice(self._items, self._n)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self._n and all(a == b for a, b in zip(self, other, strict=False))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Finished({self._n} jobs)"


@dataclass(frozen=True)
class ClusterView:
    """Servers' capacities and what the current placements use; arrays are (n_servers, 3)
    over (GPU, CPU, memory GB) and read-only."""

    capacity: np.ndarray
    used: np.ndarray
    reserved: np.ndarray | None = None
    """What jobs outside this decision hold (Harmony's fixed mode: the running jobs); None
    when every job is re-decided."""
    gpu_types: tuple[str | None, ...] | None = None
    """Each server's GPU type; None for a cluster without types."""
    reserved_shares: Mapping[int, tuple[float, ...]] | None = None
    """GPU shares (tasks below one GPU) within `reserved`, per server."""

    def pool(
        self,
        free: np.ndarray | None = None,
        shares: Mapping[int, list[float]] | None = None,
        *,
        reserved: bool = True,
    ) -> FreePool:
        """A `FreePool` over these servers, with their GPU types, starting from `free`
        (default `available`). `shares`: per server, GPU shares of tasks already counted in
        `free`; the reserved tasks' shares are added when `free` excludes them (`reserved`)."""
        held: dict[int, list[float]] = {}
        if free is None:
            free = self.available
        if reserved:
            for server, values in (self.reserved_shares or {}).items():
                held.setdefault(server, []).extend(values)
        for server, values in (shares or {}).items():
            held.setdefault(server, []).extend(values)
        return FreePool(self.capacity, free, gpu_types=self.gpu_types, shares=held)

    @cached_property
    def available(self) -> np.ndarray:
        """What this decision may hand out: capacity minus `reserved`, (n_servers, 3)."""
        if self.reserved is None:
            return self.capacity
        return read_only(self.capacity - self.reserved)

    @cached_property
    def free(self) -> np.ndarray:
        """Capacity minus what current placements use, (n_servers, 3)."""
        return read_only(self.capacity - self.used)

    @cached_property
    def total(self) -> np.ndarray:
        """Summed capacity per resource, shape (3,)."""
        return read_only(self.capacity.sum(axis=0))

    @property
    def n_servers(self) -> int:
        """Number of servers."""
        return int(self.capacity.shape[0])


class SpeedOracle(Protocol):
    """The true isolated speed of a job (no interference, spread placement). Only policies
    declaring `uses_oracle = True` get one; they are labelled as oracles."""

    def speed(self, job_id: int, workers: int, ps: int) -> float:
        """Mini-batches per second of job `job_id` with that many workers and PSs."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """Everything a scheduler may look at for one decision."""

    time_s: float
    slot: int
    """Index of the time slot containing `time_s` (slot_s seconds each)."""
    slot_s: float
    decision: int
    """Sequence number of this decision (0, 1, ...)."""
    cluster: ClusterView
    jobs: tuple[JobView, ...]
    """Visible jobs to decide, by arrival (then job id)."""
    catalogue: tuple[JobType, ...]
    oracle: SpeedOracle | None = None
    fixed_jobs: tuple[JobView, ...] = ()
    """Jobs that keep their placement whatever the decision (Harmony's fixed mode: running
    jobs); context for interference-aware placement, not part of the decision."""
    finished: Sequence[FinishedJob] = ()
    """Every job completed so far in the run, in the order they completed (`Finished`)."""

    @cached_property
    def job_types(self) -> dict[str, JobType]:
        """Catalogue entries by model name."""
        return {jt.model: jt for jt in self.catalogue}

    @cached_property
    def by_id(self) -> Mapping[int, JobView]:
        """Visible jobs by job id."""
        return MappingProxyType({j.job_id: j for j in self.jobs})


@dataclass(frozen=True)
class Allocation:
    """Workers and PSs per job for the coming interval; jobs not listed get none."""

    counts: Mapping[int, tuple[int, int]] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, counts: Mapping[int, tuple[int, int]]) -> Allocation:
        """From job id -> (workers, PSs); jobs given (0, 0) are dropped."""
        clean = {int(j): (int(w), int(p)) for j, (w, p) in counts.items() if w > 0 or p > 0}
        return cls(MappingProxyType(clean))

    def get(self, job_id: int) -> tuple[int, int]:
        """(workers, PSs) of a job, (0, 0) if not allocated."""
        return self.counts.get(job_id, (0, 0))


@dataclass(frozen=True)
class Placement:
    """Server of every worker and PS per job; must match the allocation's counts or fall
    short of them (tasks the policy could not place)."""

    jobs: Mapping[int, JobPlacement] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, jobs: Mapping[int, JobPlacement]) -> Placement:
        """From job id -> JobPlacement."""
        return cls(MappingProxyType(dict(jobs)))

    def get(self, job_id: int) -> JobPlacement:
        """A job's placement, empty if it has none."""
        return self.jobs.get(job_id, EMPTY_PLACEMENT)
