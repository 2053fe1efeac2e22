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
  resource), earliest first among equals;
- `tiresias-las`: Tiresias' discretized 2D-LAS (Gu et al., "Tiresias: A GPU Cluster Manager
  for Distributed Deep Learning", NSDI'19, its 2DAS scheduler), preemptive, no size estimate: two
  queues split at 1 GPU-hour of attained service (GPUs x seconds run; the paper evaluates
  K = 2 queues), FIFO by submit time inside a queue, and PROMOTEKNOB = 8: a demoted job that
  has waited 8 times as long as it ran (both since it last entered the high queue) goes back
  to the high queue with its service reset;
- `tiresias-gittins`: Tiresias' discretized 2D-Gittins index, the same queues and knob,
  ranked inside a queue by the Gittins index of the job's attained service over the
  distribution of the trace's recorded job services (GPUs x run time): the history an
  operator has, not the job's own duration (on an overloaded cluster wide jobs cycle
  through promotion quickly, their threshold being GPU-seconds, and it preempts often);
- `fifo-fgd`: strict FIFO order as `fifo`, placed by Fragmentation Gradient Descent (Weng et
  al., "Beware of Fragmentation", ATC'23, the scheduler published with Alibaba's GPU 2023
  trace): a one-server job goes to the node (and GPU, for a share of one) whose expected
  fragmentation over the trace's mix of GPU requests grows least, where best fit takes the
  fullest fitting node;
- `fifo-gpu-best-fit`: strict FIFO, best fit with GPUs tracked one by one as FGD tracks them
  (FGD's best-fit baseline). Beside it `fifo-fgd` measures what FGD's choice of node alone
  changes; `fifo`'s best fit pools a node's free GPUs, which is looser for shares.

`sjf` and `srtf` read the recorded run time as the job's size estimate, as the slot
simulator's SRTF reads the user's epoch estimate. `ReplayRule` documents the Tiresias
parameters, `tracelib.sim.replay._GpuServers` the fragmentation measure.
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
    "tiresias-las": ReplayRule("las", preemptive=True),
    "tiresias-gittins": ReplayRule("gittins", preemptive=True),
    "fifo-fgd": ReplayRule("arrival", backfill=False, placement="fgd"),
    "fifo-gpu-best-fit": ReplayRule("arrival", backfill=False, placement="gpu-best-fit"),
}
"""Registered replay rules (names shared with the slot simulator's heuristics where the
idea is the same)."""
