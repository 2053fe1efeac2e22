"""FIFO and SRTF: jobs in priority order, each given as many workers and PSs as it can use.

DL2's baselines (section 6.4): in priority order a job receives worker+PS pairs up to its
cap (16 workers, 16 PSs) while the cluster has room; the next job gets what is left.
FIFO orders by arrival; SRTF by the estimated remaining time (remaining epochs at the
catalogue speed with one worker and one PS, which normalizes epochs across models).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.heuristics.common import nominal_remaining_s
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.snapshot import Allocation, Snapshot


def _fill_in_order(builder: AllocationBuilder, order: list[int]) -> Allocation:
    for i in order:
        while builder.add(i, 1, 1):
            pass
    return builder.allocation()


@dataclass(frozen=True)
class FIFO:
    """First in, first out: the earliest arrival takes all it can use."""

    name: str = "fifo"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """Fill jobs in arrival order."""
        builder = AllocationBuilder(snap)
        return _fill_in_order(builder, list(range(len(builder.jobs))))  # snapshot: by arrival


@dataclass(frozen=True)
class SRTF:
    """Shortest remaining time first (estimated, single-worker time)."""

    name: str = "srtf"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """Fill jobs by increasing estimated remaining time."""
        builder = AllocationBuilder(snap)
        rem = [nominal_remaining_s(snap, j) for j in builder.jobs]
        order = sorted(range(len(rem)), key=lambda i: (rem[i], i))
        return _fill_in_order(builder, order)
