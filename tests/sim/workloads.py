"""Workloads and speed settings the simulator tests share."""

from __future__ import annotations

from tracelib.sim import JobSpec, SpeedConfig, dl2_like_frame, jobs_from_frame

NOISY = SpeedConfig(speed_variation=0.2, slot_noise=0.1, epoch_error=0.2)
"""Every source of noise in the speed model on: what determinism tests must survive."""


def dl2_jobs(n: int, seed: int) -> tuple[JobSpec, ...]:
    """`n` DL2-like jobs drawn with `seed`, an hour long on average (median half an hour)."""
    return jobs_from_frame(
        dl2_like_frame(n, seed, mean_duration_min=60.0, median_duration_min=30.0)
    )
