"""Small helpers the heuristics share (all read only the snapshot)."""

from __future__ import annotations

from tracelib.sim.snapshot import JobView, Snapshot


def remaining_epochs(job: JobView, floor_share: float = 0.01) -> float:
    """Estimated remaining epochs, never below `floor_share` of the estimate: a job that has
    outrun its user's estimate is still running and still needs resources."""
    return max(job.remaining_epochs_est, floor_share * job.epochs_est)


def nominal_remaining_s(snap: Snapshot, job: JobView, workers: int = 1, ps: int = 1) -> float:
    """Remaining time at the catalogue speed with `workers` workers and `ps` PSs: the
    scheduler-visible estimate (the catalogue is public; the job's true speed is not)."""
    jt = snap.job_types[job.model]
    return remaining_epochs(job) / jt.epochs_per_second(workers, ps)
