"""Tetris (Grandl et al.): packing alignment plus shortest-remaining-time preference.

Each round scores every job that has not yet got its request: alignment (Tetris' dot
product of the job's worker+PS demand with a server's free resources, both as shares of the
server, best over servers) normalized by the best job's, plus a remaining-time term
(1 - remaining / longest remaining, remaining = estimated epochs left at the catalogue speed
of the requested allocation), weighted equally (Tetris' epsilon = 1). The top job then gets
its whole request (`num_workers`, `num_ps`, at least 1 PS), task by task while it fits:
DL2 section 6.3 notes Tetris "always adds tasks to the job until the number of tasks
reaches a user-defined threshold". Rounds repeat until no job can take anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from models.heuristics.common import nominal_remaining_s
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.snapshot import Allocation, Snapshot


@dataclass(frozen=True)
class Tetris:
    """Packing alignment + remaining time picks a job; it gets its whole request."""

    name: str = "tetris"
    interval_s: float | None = None
    uses_oracle: bool = False
    srtf_weight: float = 1.0
    """Tetris' epsilon: weight of the remaining-time term against packing alignment."""

    def allocate(self, snap: Snapshot) -> Allocation:
        """Tetris allocation of every visible job."""
        builder = AllocationBuilder(snap)
        jobs = builder.jobs
        target = [
            (min(j.requested_workers, j.max_workers), min(max(j.requested_ps, 1), j.max_workers))
            for j in jobs
        ]
        remaining = [nominal_remaining_s(snap, j, *target[i]) for i, j in enumerate(jobs)]
        longest = max(remaining, default=1.0)
        pending = set(range(len(jobs)))
        while pending:
            align = {}
            for i in pending:
                j = jobs[i]
                bundle = tuple(w + p for w, p in zip(j.worker_demand, j.ps_demand, strict=True))
                a = builder.pool.best_alignment(bundle, j.gpu_types)
                align[i] = (
                    a if a >= 0 else builder.pool.best_alignment(j.worker_demand, j.gpu_types)
                )
            fitting = [i for i in pending if align[i] >= 0]
            if not fitting:
                break
            top = max(align[i] for i in fitting) or 1.0
            best = max(
                fitting,
                key=lambda i: (
                    align[i] / top + self.srtf_weight * (1.0 - remaining[i] / longest),
                    -i,
                ),
            )
            pending.discard(best)
            want_w, want_p = target[best]
            # Pairs first so a partial grant still trains; then whichever kind is missing.
            while builder.workers[best] < want_w and builder.ps[best] < want_p:
                if not builder.add(best, 1, 1):
                    break
            while builder.workers[best] < want_w and builder.add(best, 1, 0):
                pass
            while builder.ps[best] < want_p and builder.add(best, 0, 1):
                pass
        return builder.allocation()
