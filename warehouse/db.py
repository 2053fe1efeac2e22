"""Opening the warehouse file and running one transaction per stage write."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

DEFAULT_PATH = Path("var") / "schedlab.duckdb"
ENV_VAR = "SCHEDLAB_WAREHOUSE"
LOCK_WAIT_ENV = "SCHEDLAB_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 60.0
"""How long a read-write open waits for other processes' readers to let go."""

# duckdb 2.0 would write storage version 69, which the duckdb CLI (1.5.x) cannot open;
# users query the warehouse from that CLI, so new files are written in the 1.5 format.
_CONNECT_CONFIG = {"storage_compatibility_version": "v1.5.0"}


class WarehouseBusy(RuntimeError):
    """Another process holds the warehouse file; DuckDB allows one writer per file."""


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    """The warehouse file: explicit path, else $SCHEDLAB_WAREHOUSE, else ./var/schedlab.duckdb."""
    if path is not None:
        return Path(path)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_PATH


@contextmanager
def connect(
    path: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the warehouse, bring its schema up to date (read-write only), close on exit.

    A connection is held only for the duration of one stage's I/O: DuckDB lets a single
    process hold a file read-write, and that blocks readers in other processes.
    """
    from warehouse.migrations import migrate

    target = resolve_path(path)
    if read_only and not target.exists():
        raise FileNotFoundError(
            f"warehouse {target} does not exist yet; run `schedlab run` or `schedlab ingest` first"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # A writer waits out short readers (a `schedlab sql` holds the file for a moment) rather
    # than failing a nightly stage; a reader is told at once, with when to retry.
    wait_s = float(os.environ.get(LOCK_WAIT_ENV, DEFAULT_LOCK_WAIT_S)) if not read_only else 0.0
    deadline = time.monotonic() + wait_s
    pause = 0.05
    while True:
        try:
            con = duckdb.connect(str(target), read_only=read_only, config=_CONNECT_CONFIG)
            break
        except duckdb.IOException as exc:
            busy = _busy_or_raise(target, exc)
            if not isinstance(busy, WarehouseBusy) or time.monotonic() + pause > deadline:
                raise busy from exc
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
    try:
        if not read_only:
            migrate(con)
        yield con
    finally:
        con.close()


def _busy_or_raise(target: Path, exc: duckdb.IOException) -> Exception:
    message = str(exc)
    if "lock" not in message.lower():
        return exc
    pid = re.search(r"PID (\d+)", message)
    holder = f" by process {pid.group(1)}" if pid else ""
    return WarehouseBusy(
        f"warehouse {target} is busy: it is held{holder} (a running stage writes it). "
        "Retry when that run finishes; nothing was read or changed."
    )


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception so the warehouse is left as it was."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
