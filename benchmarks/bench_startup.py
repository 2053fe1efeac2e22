"""Start-up under load: many `schedlab run --budget smoke` starts, two at a time, beside CPU
burners; every start must reach the flow's first stage.

    python -m benchmarks startup [--runs 30] [--parallel 2] [--burners 2]
                                 [--until started|done] [--timeout 900] [--dir DIR]
                                 [--budget smoke|default]

Each run has its own warehouse; all share one PREFECT_HOME, as runs of one checkout do, so
their temporary API servers start on the same database. `--until started` (the default)
stops a run (SIGTERM, which ends it at once, its children with it) as soon as its first
stage begins: what is measured is the start, and 30 starts then take minutes rather than
an hour. `--until done` lets every run finish and counts any failure.

A start fails when the run exits (any code) or times out before its first stage, or when
its output up to then holds a traceback (each run's output is kept in its folder's
`output.log`). Printed: starts, failures (with the first line of each), the
time to the first stage (min / median / max), the load average seen, wall and CPU time.
Target: 0 failures.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from benchmarks.options import parse

FIRST_STAGE = re.compile(r"\] synthetic trace \(")
"""The first stage every run starts (pipelines/flows.py): the flow is running."""


@dataclass
class Start:
    """One run's start: how long to its first stage, and how it ended."""

    index: int
    seconds: float | None = None
    """Time to the first stage (None: never reached)."""
    code: int | None = None
    stopped_at: int | None = None
    """How many output lines there were when it was stopped at its first stage."""
    failure: str = ""
    output: list[str] = field(default_factory=list)


def _one_run(index: int, args: Options, work: Path) -> Start:
    start = Start(index)
    folder = work / f"run-{index:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PREFECT_HOME": str(work / "prefect"),
        "PYTHONUNBUFFERED": "1",
        # Never the user's server: the start of a temporary one is what is measured.
        "PREFECT_API_URL": "",
    }
    command = [
        sys.executable,
        "-m",
        "pipelines.cli",
        "run",
        "--budget",
        args.budget,
        "--warehouse",
        str(folder / "wh.duckdb"),
        "--seed",
        str(index),
    ]
    began = time.monotonic()
    proc = subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    timer = threading.Timer(args.timeout, lambda: _stop(proc, signal.SIGKILL))
    timer.start()
    try:
        for line in proc.stdout:
            start.output.append(line.rstrip("\n"))
            if start.seconds is None and FIRST_STAGE.search(line):
                start.seconds = time.monotonic() - began
                if args.until == "started":
                    start.stopped_at = len(start.output)
                    _stop(proc, signal.SIGTERM)
        start.code = proc.wait()
    finally:
        timer.cancel()
    (folder / "output.log").write_text("\n".join(start.output) + "\n")
    # Stopped on purpose at its first stage, a run's processes may print their own
    # shutdown (Prefect's server cancelling its tasks): only what came before counts.
    upto = start.output[: start.stopped_at] if start.stopped_at is not None else start.output
    text = "\n".join(upto)
    if start.seconds is None:
        why = "timed out" if start.code == -signal.SIGKILL else f"exit {start.code}"
        start.failure = f"{why} before its first stage: {_last_error(start.output)}"
    elif "Traceback (most recent call last)" in text:
        start.failure = f"traceback: {_last_error(upto)}"
    elif args.until == "done" and start.code != 0:
        start.failure = f"exit {start.code}: {_last_error(start.output)}"
    return start


def _stop(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _last_error(lines: list[str]) -> str:
    for line in reversed(lines):
        if line.startswith(("error:", "RuntimeError", "SystemError")) or "Error:" in line:
            return line.strip()[:200]
    return lines[-1].strip()[:200] if lines else "no output"


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_startup`'s options (see the module docstring)."""

    runs: int = 30
    """runs to start"""
    parallel: int = 2
    """runs at once"""
    burners: int = 2
    """CPU burners"""
    until: Literal["started", "done"] = "started"
    """stop each run at its first stage (started) or let it finish (done)"""
    timeout: float = 900.0
    """seconds before a run is killed"""
    dir: str | None = None
    """work folder (default: a temporary one)"""
    budget: Literal["smoke", "default"] = "smoke"
    """the runs' budget: default starts the worker processes (one per core) as well"""


def main(argv: list[str]) -> int:
    """Run the stress benchmark; returns 0 when every start succeeded, 1 otherwise."""
    args = parse(Options, argv)
    holder = tempfile.TemporaryDirectory(prefix="schedlab-startup-") if not args.dir else None
    work = Path(args.dir or holder.name)
    work.mkdir(parents=True, exist_ok=True)
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.burners)
    ]
    loads: list[float] = []
    done = threading.Event()

    def sample_load() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    wall0, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    results: list[Start] = []
    lock = threading.Lock()
    queue = list(range(args.runs))

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                index = queue.pop(0)
            result = _one_run(index, args, work)
            with lock:
                results.append(result)
                state = "ok" if not result.failure else f"FAILED ({result.failure})"
                took = f"{result.seconds:.1f} s" if result.seconds is not None else "-"
                print(
                    f"  start {len(results):2d}/{args.runs}: run {index:02d} first stage "
                    f"after {took}, load {os.getloadavg()[0]:.1f}: {state}",
                    flush=True,
                )

    print(
        f"startup stress: {args.runs} {args.budget} runs, {args.parallel} at a time, "
        f"{args.burners} CPU burners, until {args.until}; work folder {work}",
        flush=True,
    )
    try:
        threads = [threading.Thread(target=worker) for _ in range(args.parallel)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        done.set()
        for burner in burners:
            burner.kill()
            burner.wait()
    wall = time.monotonic() - wall0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    failures = [r for r in results if r.failure]
    times = sorted(r.seconds for r in results if r.seconds is not None)
    print(f"starts: {len(results)}, failures: {len(failures)} (target 0)")
    for result in sorted(failures, key=lambda r: r.index):
        print(f"  run {result.index:02d}: {result.failure}")
    if times:
        print(
            f"time to the first stage: min {times[0]:.1f} s, median "
            f"{statistics.median(times):.1f} s, max {times[-1]:.1f} s"
        )
    if loads:
        print(f"load average (1 min) while running: {min(loads):.1f} to {max(loads):.1f}")
    print(f"wall {wall:.0f} s, CPU {cpu:.0f} s (runs and burners)")
    if holder is not None:
        holder.cleanup()
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
