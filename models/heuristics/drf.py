"""Dominant Resource Fairness (Ghodsi et al.), as DL2 uses it for its baseline and labels.

Repeatedly give one worker + one PS to the job whose dominant share (largest share of any
resource its tasks hold, relative to the cluster) is lowest, until no job can take another
pair (its cap or the cluster). Oblivious of speed: it keeps adding past the point where a
job's speed stops improving, which is what DL2 improves on.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.snapshot import Allocation, Snapshot


@dataclass(frozen=True)
class DRF:
    """Worker+PS pairs to the job with the lowest dominant share, until none fits."""

    name: str = "drf"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """DRF allocation of every visible job."""
        builder = AllocationBuilder(snap)
        # (share, arrival rank): equal shares go to the earlier job.
        heap = [(0.0, i) for i in range(len(builder.jobs))]
        while heap:
            _, i = heapq.heappop(heap)
            if builder.add(i, 1, 1):
                heapq.heappush(heap, (builder.dominant_share(i), i))
        return builder.allocation()
