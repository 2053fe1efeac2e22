"""Where the nightly flow's independent tasks run: one at a time, in local worker
processes, or on a Ray cluster.

The flow submits what does not depend on each other (the fine-tuning of every DL2 variant,
each workload set's evaluation, each learned system's training chain) and the task runner
decides how many run at once. Every task derives its randomness from seeds in its
arguments, never from shared state, so any runner produces the same tables.

Threads are not offered: trainers seed torch's process-wide generator while they build
their networks, and matplotlib's text layout is not thread-safe; concurrent threads of one
process would interleave both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tracelib.provenance import pin_code_version

RUNNERS = ("sequential", "processes", "ray")


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def default_runner(budget: str = "default") -> str:
    """`schedlab run`'s default: local worker processes, one per available core, when there
    is more than one and the budget is worth it (the independent trainings and evaluations
    then overlap; docs/benchmarks.md); one task at a time on a single core, and for the
    smoke budget, whose whole run is shorter than starting the worker processes (each
    imports torch, Prefect and the pipeline: 10-60 s on a loaded 2-core machine)."""
    return "processes" if available_cores() > 1 and budget != "smoke" else "sequential"


@dataclass(frozen=True)
class RunnerConfig:
    """How the nightly flow's tasks are executed."""

    kind: str = "sequential"
    """sequential (one task at a time, in this process), processes (local worker
    processes), or ray (a Ray cluster: `address`, else a local one started for the run)."""
    workers: int | None = None
    """Worker processes for `processes` (default: the cores available to this process)."""
    address: str | None = None
    """Ray cluster address for `ray`, e.g. "ray://head:10001" or "auto"; None starts a
    local Ray instance for the run."""

    def __post_init__(self) -> None:
        if self.kind not in RUNNERS:
            raise ValueError(f"unknown task runner {self.kind!r}; choose one of {RUNNERS}")
        if self.kind != "ray" and self.address is not None:
            raise ValueError("a Ray address needs the ray task runner (--task-runner ray)")


def task_runner(cfg: RunnerConfig):
    """The Prefect task runner for `cfg`. Its worker processes stamp this process's code
    version (`pin_code_version`), whatever happens to the checkout meanwhile."""
    if cfg.kind == "sequential":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=1)
    pin_code_version()
    if cfg.kind == "processes":
        # Prefect's process task runner, whose workers `schedlab run` can start early.
        from pipelines.prestart import PrestartedPool

        return PrestartedPool(max_workers=cfg.workers or available_cores())
    try:
        from prefect_ray import RayTaskRunner
    except ImportError as exc:  # an optional extra: keep the error actionable
        raise ValueError(
            "the ray task runner needs prefect-ray and ray: pip install -e '.[ray]'"
        ) from exc
    return RayTaskRunner(address=cfg.address)
