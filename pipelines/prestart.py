"""Worker processes started before the flow, while Prefect starts its temporary API.

Prefect's process task runner starts its workers when the flow submits its first task, and
each then imports torch, Prefect's task engine and the pipeline before it can run anything:
20-50 s of silence on a loaded 2-core machine, after the 10-20 s the temporary API server
takes to start. `PrestartedPool` starts them first, so the two overlap (the API server uses
one core while the flow's process mostly waits for it), and each worker says when it is
ready.

The workers use the flow's API (`pipelines.api.shared_api`) instead of starting one each.

Only `schedlab run` prestarts (pipelines/cli.py); a pool that is not prestarted is Prefect's
process task runner unchanged.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prefect.task_runners import ProcessPoolTaskRunner

from pipelines.progress import QUIET, Reporter


@dataclass(frozen=True)
class WarmUp:
    """What each worker process imports as it starts (before its first task)."""

    modules: tuple[str, ...] = ()
    """Modules to import (the flow's tasks live there)."""
    loaders: tuple[Callable[[], Any], ...] = ()
    """Called once each (every learned system's `steps`, which import its tasks)."""
    progress: Reporter = QUIET
    """Says when the worker is ready."""


def warm_worker(warm: WarmUp) -> None:
    """A worker's initializer: import what its tasks need, then say how long that took."""
    start = time.perf_counter()
    for name in warm.modules:
        importlib.import_module(name)
    for load in warm.loaders:
        load()
    warm.progress.line(
        f"worker process {os.getpid()} ready ({time.perf_counter() - start:.1f} s importing "
        "torch, Prefect and the pipeline)"
    )


class PrestartedPool(ProcessPoolTaskRunner):
    """Prefect's process task runner whose workers can start before the flow runs.

    `start(warm)` starts the pool and one worker per slot at once (each runs `warm_worker`);
    the flow then runs on this very pool (`duplicate` returns it, entering and leaving it
    are no-ops), and `stop()` ends it. Without `start` it is Prefect's runner unchanged."""

    def __init__(self, max_workers: int | None = None, **kwargs: Any) -> None:
        super().__init__(max_workers, **kwargs)
        self._prestarted = False

    def start(self, warm: WarmUp) -> None:
        """Start the pool and all its worker processes now (they import in the background)."""
        self._initializer = warm_worker
        self._initargs = (warm,)
        super().__enter__()
        self._prestarted = True
        # The executor starts a process per submission until it has max_workers (spawn
        # context), so one trivial call per slot starts them all now.
        for _ in range(self._max_workers):
            self._executor.submit(os.getpid)

    def stop(self) -> None:
        """Stop the worker processes (waits for running tasks; a no-op if not started)."""
        if self._prestarted:
            self._prestarted = False
            super().__exit__(None, None, None)

    def __getstate__(self) -> dict[str, Any]:
        # Prefect sends the flow, and with it its task runner, to every task's process: a
        # copy is this pool's description (unstarted), never its processes and queues.
        fresh = PrestartedPool(self._max_workers)
        fresh._initializer, fresh._initargs = self._initializer, self._initargs
        return fresh.__dict__

    def duplicate(self) -> PrestartedPool:
        # The flow engine runs the flow on a duplicate of its task runner: hand it this pool.
        return self if self._prestarted else super().duplicate()

    def __enter__(self) -> PrestartedPool:
        return self if self._prestarted else super().__enter__()

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        if not self._prestarted:
            super().__exit__(exc_type, exc_value, traceback)
            return
        # The flow ended; the pool lives on until `stop`. Its cached context is the flow
        # run's: a next flow on this pool must serialize its own.
        self._cached_context = None
        self._cached_env = None
