"""Allocation rules the simulator tests share: a fixed plan, and a probe that hands each
snapshot to a function of the test (to record what the engine shows or to try a decision)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tracelib.sim import Allocation, Snapshot


@dataclass(frozen=True)
class Fixed:
    """Test policy: a fixed (workers, PSs) per decision index, for every visible job (the
    last one from then on); by default one worker and one PS each."""

    plan: tuple[tuple[int, int], ...] = ((1, 1),)
    name: str = "fixed"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """The plan's (workers, PSs) of this decision for every visible job."""
        w, p = self.plan[min(snap.decision, len(self.plan) - 1)]
        return Allocation.of({j.job_id: (w, p) for j in snap.jobs})


@dataclass(frozen=True)
class Probe:
    """Test policy whose allocation is `decide(snapshot)`, a function of the test."""

    decide: Callable[[Snapshot], Allocation]
    name: str = "probe"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        """What `decide` makes of `snap`."""
        return self.decide(snap)
