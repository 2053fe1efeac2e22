"""Simulator benchmark: DL2's large setting under DRF, and the per-action allocation step.

    python -m benchmarks.bench_sim

- end to end: 500 testbed servers (1000 GPUs, 8000 cores), 200 DL2-style jobs with up to
  10 arrivals per 20-minute slot, a window of 40 jobs, DRF + load balancing (target
  <= 0.4 s: 100x faster than the DL2 authors' simulator, 40-60 s here);
- step rate: `AllocationBuilder.add` (one worker+PS to one job, with its cap and placement
  feasibility check) on the first decision's snapshot of that run, the step a DL2-style
  agent takes (target >= 20,000 actions/s); also with a full action mask recomputed after
  every step, which a naive per-action environment would do.
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from benchmarks.options import parse
from models.heuristics import make_scheduler
from tracelib.sim import (
    Allocation,
    AllocationBuilder,
    ClusterConfig,
    LoadBalancing,
    Scheduler,
    SimConfig,
    Simulator,
    Snapshot,
    dl2_like_frame,
    jobs_from_frame,
)

N_SERVERS, N_JOBS, MAX_ARRIVALS, WINDOW = 500, 200, 10, 40
TARGET_EPISODE_S = 0.4


@dataclass(frozen=True)
class _Capture:
    """Allocation policy that records the snapshots it sees (and allocates nothing)."""

    seen: list[Snapshot] = field(default_factory=list)
    name: str = "capture"
    interval_s: float | None = None
    uses_oracle: bool = False

    def allocate(self, snap: Snapshot) -> Allocation:
        self.seen.append(snap)
        return Allocation.of({})


def _large_setting(seed: int = 0):
    jobs = jobs_from_frame(dl2_like_frame(N_JOBS, seed, max_arrivals_per_slot=MAX_ARRIVALS))
    cfg = SimConfig(cluster=ClusterConfig(n_servers=N_SERVERS), seed=seed, window=WINDOW)
    return jobs, cfg


def _snapshot_with_full_window() -> Snapshot:
    jobs, cfg = _large_setting()
    capture = _Capture()
    # By t = 8 slots the window holds 40 jobs; nothing runs, so nothing else changes.
    Simulator(jobs, Scheduler(capture, LoadBalancing()), cfg).run(until_s=8 * cfg.slot_s)
    return capture.seen[-1]


def _step_rate(snap: Snapshot, with_mask: bool, budget_s: float = 1.0) -> tuple[float, int]:
    rng = np.random.default_rng(0)
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < budget_s:
        builder = AllocationBuilder(snap)
        open_jobs = list(range(len(builder.jobs)))
        picks = rng.integers(0, 1 << 30, 4096)
        k = 0
        while open_jobs:
            i = open_jobs[int(picks[k % len(picks)]) % len(open_jobs)]
            k += 1
            if builder.add(i, 1, 1):
                steps += 1
                if with_mask:
                    builder.mask()
            else:
                open_jobs.remove(i)  # masked from now on
    return steps / (time.perf_counter() - start), steps


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_sim` takes no options."""


def main(argv: list[str]) -> int:
    """Run both benchmarks and print their figures."""
    parse(Options, argv)
    jobs, cfg = _large_setting()
    sim = Simulator(jobs, make_scheduler("drf"), cfg)
    walls, cpus = [], []
    for _ in range(3):
        start, cpu = time.perf_counter(), time.process_time()
        result = sim.run()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    decisions = sum(1 for e in result.events if e.kind == "decide")
    print(
        f"DL2 large setting, DRF + load balancing: {N_SERVERS} servers, {len(jobs)} jobs, "
        f"<= {MAX_ARRIVALS} arrivals/slot, window {WINDOW}"
    )
    median = statistics.median(walls)
    verdict = "met" if median <= TARGET_EPISODE_S else "MISSED"
    print(
        f"  wall time {median:.3f} s (median of 3; min {min(walls):.3f}; CPU time "
        f"{statistics.median(cpus):.3f} s, what a busy shared machine inflates least), "
        f"{decisions} decisions, {len(result.events)} events, "
        f"avg JCT {result.avg_jct_slots:.2f} slots (target <= {TARGET_EPISODE_S} s: {verdict})"
    )
    snap = _snapshot_with_full_window()
    rate, steps = _step_rate(snap, with_mask=False)
    print(
        f"  allocation step (AllocationBuilder.add, {len(snap.jobs)} jobs, {N_SERVERS} servers): "
        f"{rate:,.0f} actions/s over {steps:,} steps (target >= 20,000)"
    )
    rate_m, steps_m = _step_rate(snap, with_mask=True, budget_s=0.5)
    print(f"  step + full mask recomputed each step: {rate_m:,.0f} actions/s ({steps_m:,} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
