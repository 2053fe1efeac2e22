"""Tiresias' discretized 2D-LAS and 2D-Gittins (Gu et al., "Tiresias: A GPU Cluster Manager
for Distributed Deep Learning", NSDI'19) as arena allocation policies.

The same schedulers as the replay rules `tiresias-las` and `tiresias-gittins`
(`tracelib.sim.replay.ReplayRule`, whose knobs these share), in the slot simulator:

- Every decision (every slot, as DL2's heuristics and RL-TAPS' arena policy decide), every
  visible job is ranked and the cluster is handed out again in rank order: each job gets
  its request, all or nothing (`pickers.request`: its requested workers, at least one PS
  for a PS model), while it fits; a job that does not fit lets the ones behind it try.
  A running job that no longer fits is paused (preempted): it keeps its progress, and the
  simulator charges `SpeedConfig.realloc_pause_s` when it resumes, as it charges every
  policy's paused jobs, RL-TAPS' included.
- Attained service: GPU-seconds of training since the job last entered the highest queue,
  read from the job's observed training intervals (`JobView.history`): workers x GPUs
  per worker x seconds trained (a reallocation pause is not service). A worker of a
  CPU-only model (cnn-text, dssm) counts as one GPU: it is the job's unit of parallelism,
  and counting it as none would keep such jobs in the highest queue forever.
- Queues: `thresholds_gpu_s` split attained service into len + 1 queues; a higher queue
  always ranks first. PROMOTEKNOB (`promote_knob`): a job below the highest queue that has
  waited, since it last entered the highest queue and once it has run, `promote_knob` times
  as long as it ran over the same span goes back to the highest queue with its service
  reset (the reallocation pause before a resumed interval counts as waiting: the snapshot
  records training, not holding).
- Within a queue, `tiresias-las` is FIFO by arrival with running jobs ahead of waiting
  ones (the released simulator keeps them ahead: a waiting job never preempts a running
  job of its own queue). `tiresias-gittins` ranks by the Gittins index of the job's
  attained service (highest first; running jobs ahead on equal indices, so a waiting job
  preempts one of its queue only for a strictly higher index), over the distribution of
  the total service of the jobs completed so far in the run (`Snapshot.finished`): what
  an operator has seen, never the jobs' true sizes (the replay rule, replaying a whole
  trace, takes the trace's recorded services as that history). Until a job has completed
  the index is 0 for every job and the order is LAS'.

Everything is read from the snapshot (no state is carried between decisions), so a run is
a pure function of its inputs and a forked simulation continues as the original would.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.heuristics.pickers import _Grants, _pick
from models.heuristics.replay import REPLAY_RULES
from tracelib.sim.replay import gittins_index
from tracelib.sim.snapshot import Allocation, FinishedJob, JobView, Snapshot, SpeedSample

_LAS = REPLAY_RULES["tiresias-las"]
_EPS = 1e-6
"""GPU-seconds: a service this close to a threshold has reached it (sums of intervals)."""


def gpus_per_worker(worker_demand: Sequence[float]) -> float:
    """GPUs one worker counts for in attained service (a CPU-only worker counts as one)."""
    return float(worker_demand[0]) if worker_demand[0] > 0 else 1.0


def service_gpu_s(history: Sequence[SpeedSample], worker_demand: Sequence[float]) -> float:
    """GPU-seconds of training over the observed intervals `history`."""
    g = gpus_per_worker(worker_demand)
    return sum(s.workers * g * s.duration_s for s in history)


def finished_services(finished: Sequence[FinishedJob]) -> np.ndarray:
    """Total service (GPU-seconds) of each completed job: the Gittins index' distribution."""
    return np.array([service_gpu_s(f.history, f.worker_demand) for f in finished], dtype=float)


@dataclass(frozen=True)
class QueueState:
    """Where a job stands in Tiresias' queues at a decision."""

    queue: int
    """0 is the highest queue."""
    attained_gpu_s: float
    """Service since the job last entered the highest queue."""
    ran_s: float
    """Seconds trained over the same span."""
    waited_s: float
    """Seconds waited over the same span, counted once it has run."""


def queue_state(
    job: JobView,
    now_s: float,
    thresholds_gpu_s: Sequence[float] = _LAS.thresholds_gpu_s,
    promote_knob: float | None = _LAS.promote_knob,
) -> QueueState:
    """The job's queue, attained service, run and wait at `now_s`, replayed from its
    observed intervals: training adds service (and may demote it), a gap between intervals
    (or since the last one, for a job that holds nothing now) is waiting, and waiting
    `promote_knob` times its run puts a demoted job back in the highest queue."""
    g = gpus_per_worker(job.worker_demand)
    attained = ran = waited = 0.0
    last_end: float | None = None

    def wait(gap: float) -> None:
        nonlocal attained, ran, waited
        if ran <= 0 or gap <= 0:
            return  # waiting counts only once the job has run since entering the queue
        demoted = bisect.bisect_right(thresholds_gpu_s, attained + _EPS) > 0
        if promote_knob is not None and demoted and waited + gap >= promote_knob * ran:
            attained = ran = waited = 0.0
        else:
            waited += gap

    for sample in job.history:
        start = sample.time_s - sample.duration_s
        if last_end is not None:
            wait(start - last_end)
        attained += sample.workers * g * sample.duration_s
        ran += sample.duration_s
        last_end = sample.time_s
    if last_end is not None and not _running(job):
        wait(now_s - last_end)
    queue = bisect.bisect_right(thresholds_gpu_s, attained + _EPS)
    return QueueState(queue, attained, ran, waited)


def _running(job: JobView) -> bool:
    return bool(job.placement.workers or job.placement.ps)


def _check_knobs(thresholds_gpu_s: tuple[float, ...], promote_knob: float | None) -> None:
    t = thresholds_gpu_s
    if not t or any(not (b > a) for a, b in zip((0.0, *t), t, strict=False)):
        raise ValueError("thresholds_gpu_s must be positive and ascending")
    if promote_knob is not None and not promote_knob > 0:
        raise ValueError("promote_knob must be positive (None: no promotion)")


def _allocate_ranked(snap: Snapshot, key: Callable[[JobView], tuple]) -> Allocation:
    """Every visible job re-picked each decision, requests granted in `key` order."""

    def order(snap: Snapshot, grants: _Grants, waiting: list[JobView]) -> list[JobView]:
        return sorted(waiting, key=key)

    return _pick(snap, order, preemptive=True)


@dataclass(frozen=True)
class TiresiasLAS:
    """Discretized 2D-LAS: queues by attained GPU-seconds, FIFO within a queue."""

    name: str = "tiresias-las"
    interval_s: float | None = None
    uses_oracle: bool = False
    thresholds_gpu_s: tuple[float, ...] = _LAS.thresholds_gpu_s
    """Queue thresholds, GPU-seconds of attained service (the replay rule's: one at 1
    GPU-hour, two queues)."""
    promote_knob: float | None = _LAS.promote_knob
    """PROMOTEKNOB (the replay rule's: 8); None: no promotion."""

    def __post_init__(self) -> None:
        _check_knobs(self.thresholds_gpu_s, self.promote_knob)

    def allocate(self, snap: Snapshot) -> Allocation:
        """Requests granted by (queue, running first, arrival) while they fit."""

        def key(job: JobView) -> tuple:
            q = queue_state(job, snap.time_s, self.thresholds_gpu_s, self.promote_knob).queue
            return (q, not _running(job), job.arrival_s, job.job_id)

        return _allocate_ranked(snap, key)


@dataclass(frozen=True)
class TiresiasGittins:
    """Discretized 2D-Gittins: the same queues, by Gittins index within a queue, the index
    over the service of the jobs completed so far."""

    name: str = "tiresias-gittins"
    interval_s: float | None = None
    uses_oracle: bool = False
    thresholds_gpu_s: tuple[float, ...] = _LAS.thresholds_gpu_s
    """Queue thresholds, GPU-seconds of attained service (as `tiresias-las`)."""
    promote_knob: float | None = _LAS.promote_knob
    """PROMOTEKNOB (as `tiresias-las`); None: no promotion."""

    def __post_init__(self) -> None:
        _check_knobs(self.thresholds_gpu_s, self.promote_knob)

    def allocate(self, snap: Snapshot) -> Allocation:
        """Requests granted by (queue, highest index, running first, arrival) while they
        fit."""
        services = finished_services(snap.finished)

        def key(job: JobView) -> tuple:
            state = queue_state(job, snap.time_s, self.thresholds_gpu_s, self.promote_knob)
            index = gittins_index(services, state.attained_gpu_s) if services.size else 0.0
            return (state.queue, -index, not _running(job), job.arrival_s, job.job_id)

        return _allocate_ranked(snap, key)
