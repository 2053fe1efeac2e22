"""Another process holding a warehouse file open, for the tests of what a second user sees."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from pathlib import Path


def _hold(path: str, ready, release, read_only: bool, hold_s: float) -> None:
    # Runs in the child: DuckDB's own connect, so only the file lock is in play.
    import duckdb

    con = duckdb.connect(path, read_only=read_only)
    ready.set()
    release.wait(hold_s)
    con.close()


@contextmanager
def held_open(path: Path, read_only: bool = True, hold_s: float = 30.0) -> Iterator[BaseProcess]:
    """A child process (spawned, so it shares no DuckDB state with the test) that opens the
    file at `path` and keeps it open for up to `hold_s` seconds. Yields the process once the
    file is open; on exit lets it close the file and waits for it."""
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(path), ready, release, read_only, hold_s))
    holder.start()
    try:
        assert ready.wait(30)
        yield holder
    finally:
        release.set()
        holder.join(30)
