"""What a long command is doing, as it does it: a line per stage with its elapsed time, and
progress bars with an ETA inside the long loops (training, evaluation, sampling, ingest).

Two objects, both created by the command line and handed down (nothing global):

- `Reporter`, a small frozen, picklable value passed to the flow, its tasks and the stage
  functions. `reporter.stage(name)` brackets a stage (a line when it starts, a line with
  its elapsed time when it ends); `reporter.bar(description, total)` yields a callback
  `advance(done, total)` that trainers and loops call (`tracelib.progress.ProgressFn`).
  A reporter works in any process: Prefect's process task runner pickles it into its
  worker processes with the task's arguments.
- `ProgressDisplay`, the terminal side, in the command's own process. With bars it owns
  one rich live display and a queue (a `multiprocessing.Manager` queue, whose proxy
  pickles into worker processes); every reporter made from it sends its lines and bar
  updates there, so bars of concurrent tasks share one display instead of overwriting
  each other's lines. Without bars (stdout not a terminal) a reporter prints its stage
  lines itself, flushed at once, from whichever process it runs in. `--quiet` prints
  nothing but the command's end summary.

Modes: "bars" (a terminal: stage lines and bars), "lines" (not a terminal: stage lines
only, one per start and end), "quiet" (nothing).
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tracelib.progress import ProgressFn, no_progress

Mode = Literal["quiet", "lines", "bars"]

_SEND_EVERY_S = 0.2
"""Bar updates are sent at most this often (each is an IPC round trip with bars)."""


def stage_line(text: str, t0: float, now: float | None = None) -> str:
    """One progress line: wall-clock time, time since `t0` (the command's start), text."""
    now = time.time() if now is None else now
    elapsed = max(now - t0, 0.0)
    minutes, seconds = divmod(int(elapsed), 60)
    return f"{datetime.fromtimestamp(now):%H:%M:%S} [+{minutes:3d}:{seconds:02d}] {text}"


class Channel:
    """A handle on the display's queue. Copying a handle shares it (the reporter is copied
    into flow parameters), and it is not JSON: Prefect records the parameter as a
    placeholder instead of reading the queue."""

    __slots__ = ("queue",)

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def __deepcopy__(self, memo: dict) -> Channel:
        return self

    def __getstate__(self) -> Any:
        return self.queue

    def __setstate__(self, queue: Any) -> None:
        self.queue = queue

    def put(self, event: tuple) -> None:
        self.queue.put(event)


@dataclass(frozen=True)
class Reporter:
    """Progress reporting handed to flows, tasks and stages (see the module docstring)."""

    mode: Mode = "quiet"
    t0: float = field(default_factory=time.time)
    """When the command started (epoch seconds): stage lines show the time since."""
    channel: Channel | None = None
    """Queue of the `ProgressDisplay` drawing the bars (None: print lines directly)."""

    @property
    def enabled(self) -> bool:
        return self.mode != "quiet"

    def line(self, text: str) -> None:
        """Print one timestamped line (nothing when quiet)."""
        if not self.enabled:
            return
        line = stage_line(text, self.t0)
        if self.channel is not None and self._send(("line", line)):
            return
        print(line, flush=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[Reporter]:
        """Bracket a stage: a line as it starts, one with its elapsed time as it ends (or
        fails; the exception goes on)."""
        start = time.perf_counter()
        self.line(f"{name} ...")
        try:
            yield self
        except BaseException as exc:
            self.line(f"{name} FAILED after {time.perf_counter() - start:.1f} s: {exc!r}"[:300])
            raise
        self.line(f"{name} done in {time.perf_counter() - start:.1f} s")

    @contextmanager
    def bar(self, description: str, total: int | None = None) -> Iterator[ProgressFn]:
        """A progress bar for one loop: yields `advance(done, total)` (a no-op unless bars
        are drawn). Updates are throttled; the bar is removed when the block ends."""
        if self.mode != "bars" or self.channel is None:
            yield no_progress
            return
        key = uuid.uuid4().hex
        self._send(("bar", key, description, total))
        last = [0.0]

        def advance(done: int, total_now: int | None = None) -> None:
            now = time.perf_counter()
            if now - last[0] >= _SEND_EVERY_S or (total_now is not None and done >= total_now):
                last[0] = now
                self._send(("advance", key, done, total_now))

        try:
            yield advance
        finally:
            self._send(("end", key))

    def _send(self, event: tuple) -> bool:
        try:
            self.channel.put(event)
        except Exception:  # the display is gone (e.g. a remote Ray worker): print instead
            return False
        return True


QUIET = Reporter("quiet", 0.0)
"""The reporter of stages called without one (library use, tests): prints nothing."""


def choose_mode(quiet: bool, stream=None) -> Mode:
    """quiet with --quiet; bars on a terminal; otherwise stage lines only."""
    stream = sys.stdout if stream is None else stream
    if quiet:
        return "quiet"
    return "bars" if getattr(stream, "isatty", lambda: False)() else "lines"


class ProgressDisplay:
    """The terminal side of progress reporting, for one command (a context manager).

    with ProgressDisplay(choose_mode(args.quiet)) as display:
        nightly_flow(..., progress=display.reporter)
    """

    def __init__(self, mode: Mode, t0: float | None = None) -> None:
        self.mode = mode
        self.t0 = time.time() if t0 is None else t0
        self._manager = None
        self._queue = None
        self._thread: threading.Thread | None = None
        self._progress = None
        self.reporter = Reporter(mode, self.t0)

    def __enter__(self) -> ProgressDisplay:
        if self.mode != "bars":
            return self
        import multiprocessing

        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # A manager queue: its proxy pickles into worker processes, a plain queue does not.
        self._manager = multiprocessing.get_context("spawn").Manager()
        self._queue = self._manager.Queue()
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=sys.stdout),
            transient=True,
        )
        self._progress.start()
        self.reporter = Reporter(self.mode, self.t0, Channel(self._queue))
        self._thread = threading.Thread(target=self._drain, name="progress-display", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._queue.put(("stop",))
            self._thread.join(timeout=5)
            self._progress.stop()
            self._manager.shutdown()
        self.reporter = Reporter(self.mode, self.t0)

    def _drain(self) -> None:
        progress, tasks = self._progress, {}
        handlers: dict[str, Callable[..., None]] = {
            "line": lambda text: progress.console.print(text, markup=False, highlight=False),
            "bar": lambda key, description, total: tasks.__setitem__(
                key, progress.add_task(description, total=total)
            ),
            "advance": lambda key, done, total: (
                key in tasks
                and progress.update(
                    tasks[key], completed=done, **({"total": total} if total is not None else {})
                )
            ),
            "end": lambda key: key in tasks and progress.remove_task(tasks.pop(key)),
        }
        while True:
            try:
                event = self._queue.get()
            except (EOFError, OSError):
                return
            if event[0] == "stop":
                return
            handlers[event[0]](*event[1:])
