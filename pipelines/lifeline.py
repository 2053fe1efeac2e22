"""Processes a `schedlab run` starts end with it, even when it is killed with SIGKILL.

Prefect starts its temporary API server (uvicorn) as a child process and stops it from an
`atexit` hook, which never runs when the run is killed with SIGKILL: the server was left
running, one orphan per killed run. Prefect's code cannot be asked to start it
with a parent-death signal, so the run guards its children from outside:

- `start_lifeline()` starts a small watchdog process first, holding the write end of a pipe
  to it, and marks the run's environment with `SCHEDLAB_LIFELINE=<run pid>:<token>`; every
  process the run starts afterwards (the Prefect server, task-runner workers, a local Ray)
  inherits the mark.
- The watchdog blocks reading the pipe. The kernel closes the run's end when the run exits,
  however it exits (SIGKILL included), so the read returns; the watchdog then waits for the
  run to be gone and gives the marked processes a moment to end by themselves (Python's
  multiprocessing resource tracker ends when the run does), then stops (SIGTERM, then
  SIGKILL after a grace period) every process still carrying the mark, and says so.

The mark is an environment variable because that is the one thing a child inherits whatever
code starts it, and it cannot be faked by an unrelated process that reuses a pid. Linux
only (it reads /proc); elsewhere `start_lifeline` does nothing.

    python -m pipelines.lifeline RUN_PID MARK   # the watchdog (started by start_lifeline)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ENV_VAR = "SCHEDLAB_LIFELINE"
GRACE_S = 10.0
"""How long marked processes get to stop after SIGTERM before SIGKILL."""
SETTLE_S = 3.0
"""How long marked processes get to end by themselves once the run is gone."""
RUN_EXIT_S = 30.0
"""How long the watchdog waits for a run that closed its pipe to finish exiting."""


def start_lifeline() -> subprocess.Popen | None:
    """Start the watchdog for this process's children (once per process; Linux only).

    Returns the watchdog process, or None when there is nothing to do (not Linux, or this
    process already has one). Call it before starting anything that must not outlive the
    process; it must stay referenced (its pipe stays open) until the process exits.
    """
    if not Path("/proc/self/environ").exists():
        return None
    mine = os.environ.get(ENV_VAR, "")
    if mine.split(":", 1)[0] == str(os.getpid()):
        return None  # already watched
    mark = f"{os.getpid()}:{uuid.uuid4().hex}"
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "pipelines.lifeline", str(os.getpid()), mark],
        stdin=subprocess.PIPE,
        # Only this process holds the pipe's write end (close_fds is the default, and the
        # pipe is not inheritable), so its exit alone closes it.
        close_fds=True,
    )
    # Set after the watchdog started, so the watchdog itself is not marked.
    os.environ[ENV_VAR] = mark
    # On a normal exit, close the pipe only after every other exit hook ran (atexit runs
    # hooks last-registered first, and Prefect registers its server's stop later than
    # this), so the watchdog finds nothing left and exits quietly.
    atexit.register(_release, watchdog)
    return watchdog


def _release(watchdog: subprocess.Popen) -> None:
    """Close the watchdog's pipe. Not waiting for its sweep: it waits for this process to be
    gone (whatever this process started that ends with it, such as multiprocessing's
    resource tracker, then ends by itself and is left alone)."""
    if watchdog.stdin is not None:
        watchdog.stdin.close()


def marked(mark: str, *, exclude: set[int]) -> list[int]:
    """Pids of live processes whose environment carries `ENV_VAR=mark` (those readable)."""
    needle = f"{ENV_VAR}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours to read
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # The state follows the parenthesized command name, which may itself hold spaces.
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (a reused pid has another)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _wait_until(done, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in raw.split(b"\0") if w)[:120]


def stop_marked(mark: str, *, exclude: set[int], grace_s: float = GRACE_S) -> list[str]:
    """SIGTERM every marked process, SIGKILL those still running after `grace_s`; returns
    a description of each process stopped."""
    victims = marked(mark, exclude=exclude)
    stopped = []
    for pid in victims:
        stopped.append(f"{pid} ({_command(pid)})")
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            continue
    deadline = time.monotonic() + grace_s
    while victims and time.monotonic() < deadline:
        victims = [pid for pid in victims if _alive(pid)]
        time.sleep(0.1)
    for pid in victims:
        with contextlib.suppress(OSError):  # it may have exited just now
            os.kill(pid, signal.SIGKILL)
    return stopped


def main(argv: list[str]) -> int:
    """The watchdog: wait for the run to end, then stop what it left running."""
    run_pid, mark = int(argv[0]), argv[1]
    # Ctrl-C in a terminal reaches the whole process group; the run handles it, and this
    # process must live on to clean up after it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    started = _start_time(run_pid)
    sys.stdin.buffer.read()  # returns at EOF: the run has exited or is exiting
    # A normal exit closes the pipe from its last exit hook: wait for the run to be gone
    # (or a zombie, or its pid reused), then let what ends with it end by itself.
    _wait_until(
        lambda: not _alive(run_pid) or _start_time(run_pid) != started, timeout_s=RUN_EXIT_S
    )
    exclude = {os.getpid(), run_pid}
    left = marked(mark, exclude=exclude)
    _wait_until(lambda: not any(_alive(pid) for pid in left), timeout_s=SETTLE_S)
    stopped = stop_marked(mark, exclude=exclude)
    if stopped:
        print(
            f"schedlab: run {run_pid} ended without stopping its child processes; stopped "
            + ", ".join(stopped),
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
