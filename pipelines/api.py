"""Prefect's API for a run: the configured one, else a temporary local server started with
a bound and retries.

Without a configured API (PREFECT_API_URL), Prefect starts a temporary API server in every
process that needs one: the flow's, and each worker's on its first task (its own uvicorn
process on the same database, another 10-30 s of silence and CPU per worker). `shared_api`
starts the flow's first and hands its address to the workers with the flow's settings.
Prefect's own start has one try; on a loaded machine, or beside another run migrating the
same PREFECT_HOME database, one try can time out, so this one retries on a fresh port and
process and, when none comes up, fails with one line saying what to do.

Prefect is imported only inside the functions: the command line sets PREFECT_HOME before
anything imports Prefect (pipelines/cli.py).
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipelines.progress import QUIET, Reporter

API_START_ATTEMPTS = 3
"""How many times `shared_api` starts Prefect's temporary API before giving up."""


class ApiUnavailable(RuntimeError):
    """Prefect's temporary API server did not start: the environment's problem (a machine
    too loaded to start it in time, a port or database held by something else), not the
    run's. Nothing was run or written."""


@contextmanager
def shared_api(
    progress: Reporter = QUIET, meanwhile: Callable[[], Any] = lambda: None
) -> Iterator[None]:
    """Inside, Prefect's settings name one API for this process and the pool's workers:
    the configured one if there is one, else a temporary local server started now (and
    stopped when this process exits, as Prefect's own temporary server is). Local workers
    only: the address is this machine's loopback. `meanwhile()` runs while the server
    starts (this process would otherwise only wait for it).

    Each start is bounded by PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS and retried
    (`API_START_ATTEMPTS` in all) on a fresh port and process; when none comes up,
    `ApiUnavailable` says why in one line and what to do."""
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_HOME,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        meanwhile()
        yield
        return
    # Read here: settings are context-local, and the start runs in a thread of its own.
    home = Path(PREFECT_HOME.value())
    timeout = float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value())
    start = time.perf_counter()
    started: list[Any] = []
    failed: list[BaseException] = []

    def start_server() -> None:
        try:
            started.append(_start_api(progress, home, timeout))
        except BaseException as exc:  # raised in this process below
            failed.append(exc)

    starting = threading.Thread(target=start_server, name="prefect-api-start", daemon=True)
    starting.start()
    try:
        meanwhile()
    finally:
        starting.join()
    if failed:
        raise failed[0]
    progress.line(f"Prefect's temporary API up in {time.perf_counter() - start:.1f} s")
    with temporary_settings(updates={PREFECT_API_URL: started[0].api_url}):
        yield


def _start_api(progress: Reporter, home: Path, timeout: float) -> Any:
    """A running temporary API server, after at most `API_START_ATTEMPTS` starts of at most
    `timeout` seconds each, one process of PREFECT_HOME `home` at a time
    (`_one_start_at_a_time`)."""
    with _one_start_at_a_time(home, progress):
        return _start_api_now(progress, timeout)


@contextmanager
def _one_start_at_a_time(home: Path, progress: Reporter) -> Iterator[None]:
    """Hold this PREFECT_HOME's start lock while a temporary API server starts.

    Each server migrates PREFECT_HOME's database as it starts; two runs starting at once on
    a new database both migrate it, and one fails ("duplicate column name", a traceback on
    the terminal). Waiting for the other run's server to be up costs seconds, and the
    lock goes with its holder however it ends (an flock is released with the process).
    Where the folder cannot hold the lock file, servers start unguarded, as Prefect's do."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        fd = os.open(home / "schedlab-api-start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress.line("waiting for another run's Prefect API to finish starting")
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _start_api_now(progress: Reporter, timeout: float) -> Any:
    from prefect.server.api.server import SubprocessASGIServer

    reason = ""
    for attempt in range(1, API_START_ATTEMPTS + 1):
        server = SubprocessASGIServer()
        try:
            server.start(timeout=timeout)
            return server
        except Exception as exc:
            # Its process may still be starting: end it (and Prefect's record of the port)
            # before the next attempt takes a fresh port and process.
            reason = api_failure_reason(exc)
            server.stop()
            if attempt < API_START_ATTEMPTS:
                progress.line(
                    f"Prefect's temporary API did not start ({reason}); trying again "
                    f"({attempt + 1} of {API_START_ATTEMPTS})"
                )
    raise ApiUnavailable(unavailable_message(reason, timeout))


def api_failure_reason(exc: BaseException) -> str:
    """The first line of why a temporary API server did not start (Prefect's message
    carries the server's whole stdout and stderr after it)."""
    text = str(exc).strip()
    first = text.split(" stdout:", 1)[0].splitlines()[0] if text else type(exc).__name__
    return first[:300]


def unavailable_message(reason: str, timeout: float) -> str:
    """What `schedlab run` prints when Prefect's temporary API cannot be started."""
    return (
        f"Prefect's temporary API server did not start ({API_START_ATTEMPTS} attempts of "
        f"{timeout:g} s each; last: {reason}). The machine may be too loaded to start it in "
        "time. Nothing was run. Retry when the load is lower, give it longer "
        "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=300), or start a server once "
        "(`prefect server start`) and point runs at it (PREFECT_API_URL=http://127.0.0.1:4200/api)."
    )
