"""The policy protocol: allocation and placement are separate, composable decisions.

    allocation.allocate(snapshot)           -> Allocation  (workers, PSs per job)
    placement.place(snapshot, allocation, rng) -> Placement (server per worker and PS)

Both read an immutable `Snapshot` and return a new frozen decision; neither can touch the
simulator. A `Scheduler` pairs one of each. Placement receives the simulator's placement
random stream explicitly (tie-breaks, random placement); allocation policies are
deterministic functions of the snapshot (a learned policy would carry its own generator).

The simulator itself only needs a `DecisionPolicy`: `decide(snapshot, rng)` returning both
at once. `Scheduler` is the composed one; a joint decision (RL-TAPS' per-GPU assignment,
where choosing the GPUs is choosing the jobs) implements `DecisionPolicy` directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.snapshot import Allocation, Placement, Snapshot


@runtime_checkable
class AllocationPolicy(Protocol):
    """Decides how many workers and PSs each visible job gets for the next interval."""

    name: str
    interval_s: float | None
    """Seconds between decisions; None decides every slot (SimConfig.slot_s)."""
    uses_oracle: bool
    """True only for policies that read the true speed model (`Snapshot.oracle`)."""

    def allocate(self, snap: Snapshot) -> Allocation:
        """Workers/PSs per job; must not mutate `snap`."""
        ...


@runtime_checkable
class PlacementPolicy(Protocol):
    """Decides the server of every worker and PS of an allocation."""

    name: str

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Servers per task of `alloc`; `rng` is the simulator's placement stream."""
        ...


@runtime_checkable
class DecisionPolicy(Protocol):
    """Anything the simulator can run: one joint allocation + placement per decision."""

    name: str
    interval_s: float | None
    """Seconds between decisions; None decides every slot (SimConfig.slot_s). A policy may
    also have a `trigger` attribute ("events": decide at every arrival and completion
    instead, whatever `SimConfig.trigger` says; None or absent: the config's)."""
    uses_oracle: bool
    # A policy may also have a `reads_history` attribute: False declares that it never reads
    # `JobView.history`, and `Simulator.run` then builds its views without one (absent:
    # True).

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Allocation and placement for `snap`; `rng` is the simulator's placement stream."""
        ...


@dataclass(frozen=True)
class Scheduler:
    """An allocation policy and a placement policy, run together by the simulator."""

    allocation: AllocationPolicy
    placement: PlacementPolicy

    @property
    def name(self) -> str:
        """ "allocation+placement", e.g. "drf+load-balancing"."""
        return f"{self.allocation.name}+{self.placement.name}"

    @property
    def interval_s(self) -> float | None:
        """The allocation policy's decision interval."""
        return self.allocation.interval_s

    @property
    def uses_oracle(self) -> bool:
        """True when the allocation policy reads the true speed model."""
        return self.allocation.uses_oracle

    @property
    def reads_history(self) -> bool:
        """Whether the allocation or the placement policy reads `JobView.history` (one
        without a `reads_history` attribute is taken to)."""
        return bool(
            getattr(self.allocation, "reads_history", True)
            or getattr(self.placement, "reads_history", True)
        )

    @property
    def trigger(self) -> str | None:
        """The allocation policy's own decision trigger, if it has one (see DecisionPolicy)."""
        return getattr(self.allocation, "trigger", None)

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Allocate, then place that allocation."""
        alloc = self.allocation.allocate(snap)
        return alloc, self.placement.place(snap, alloc, rng)


class WatchedAllocation:
    """An allocation policy that also counts, per model, the (workers, PSs) it gives each
    job at every decision into `seen` (model -> Counter); it decides exactly as `inner`."""

    def __init__(self, inner: AllocationPolicy, seen: MutableMapping[str, Counter]) -> None:
        self.inner, self.seen = inner, seen
        self.name, self.interval_s = inner.name, inner.interval_s
        self.uses_oracle = inner.uses_oracle
        self.trigger = getattr(inner, "trigger", None)

    def allocate(self, snap: Snapshot) -> Allocation:
        alloc = self.inner.allocate(snap)
        for job in snap.jobs:
            if job.job_id in alloc.counts:
                self.seen.setdefault(job.model, Counter())[alloc.counts[job.job_id]] += 1
        return alloc


@dataclass(frozen=True)
class RequestedAllocation:
    """Every job gets the workers and PSs its user requested (at least one PS), in arrival
    order, while they fit: Harmony's setting (fixed counts) and calibration experiments."""

    name: str = "requested"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """Requested counts (capped), earliest jobs first, while they fit."""
        builder = AllocationBuilder(snap)
        for i, job in enumerate(builder.jobs):
            cap = job.max_workers
            builder.add(i, min(job.requested_workers, cap), min(max(job.requested_ps, 1), cap))
        return builder.allocation()
