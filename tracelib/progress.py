"""The progress callback long loops accept (training, evaluation, sampling, replay).

A loop calls `progress(done, total)` as it goes; the caller decides what that shows
(pipelines.progress draws a bar with an ETA). Plain callables, so `tracelib` and `models`
depend on no display library, and a loop without a caller's callback pays one no-op call.
"""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[..., None]
"""`progress(done, total=None)`: `done` units of `total` finished so far."""


def no_progress(done: int, total: int | None = None) -> None:
    """The callback of a loop nobody watches."""
