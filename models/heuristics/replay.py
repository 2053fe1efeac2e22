"""Scheduling rules of a whole-trace replay (`tracelib.sim.replay`), by registered name.

In a replay every job keeps the GPUs and run time its trace recorded, so a scheduler
decides only who starts next, where, and whether to pause someone for it:

- `fifo`: arrival order, strictly: a job that does not fit blocks the queue (YARN/Philly's
  FIFO queue);
- `fifo-backfill`: arrival order, later jobs start when the head does not fit;
- `sjf`: shortest recorded run time first, no preemption;
- `srtf`: shortest remaining run time first, preemptive (Tiresias' and Helios' SRTF);
- `drf`: the user holding the smallest share of the GPUs first (DRF with GPUs as the
  dominant resource), each user's jobs in arrival order, no preemption;
- `tetris`: the widest job that fits now (Tetris' alignment score with GPUs as the one
  resource), earliest first among equals.

`sjf` and `srtf` read the recorded run time as the job's size estimate, as the slot
simulator's SRTF reads the user's epoch estimate.
"""

from __future__ import annotations

from tracelib.sim.replay import ReplayRule

REPLAY_RULES: dict[str, ReplayRule] = {
    "fifo": ReplayRule("arrival", backfill=False),
    "fifo-backfill": ReplayRule("arrival"),
    "sjf": ReplayRule("remaining"),
    "srtf": ReplayRule("remaining", preemptive=True),
    "drf": ReplayRule("user-share"),
    "tetris": ReplayRule("largest-fit"),
}
"""Registered replay rules (names shared with the slot simulator's heuristics where the
idea is the same)."""
