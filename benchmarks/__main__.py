"""Run benchmarks of this folder.

    python -m benchmarks                    every benchmark, each at its defaults
    python -m benchmarks NAME [NAME ...]    those benchmarks (`harmony` or `bench_harmony`)
    python -m benchmarks NAME ARG ...       one benchmark with its own arguments, as
                                            `python -m benchmarks.bench_NAME ARG ...`
    python -m benchmarks --write-results ...
                                            the same, and each benchmark's output also
                                            written to docs/results/NAME.md, stamped with
                                            the commit, date, machine, load and times

Every benchmark is `main(argv) -> int`; the exit status is the first non-zero one. An
unknown name is a usage error (exit 2), and so is an argument the benchmark refuses.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pkgutil
import platform
import resource
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
"""Where `--write-results` puts each benchmark's page."""


def names() -> list[str]:
    """Every benchmark's module name (`bench_...`), sorted."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )


def _module_name(arg: str) -> str:
    return arg if arg.startswith("bench_") else f"bench_{arg}"


def _run(name: str, argv: list[str], results: Path | None = None) -> int:
    print(f"== {name}", flush=True)
    bench = importlib.import_module(f"benchmarks.{name}")
    if results is None:
        return bench.main(argv)
    load = os.getloadavg()[0]
    wall, cpu = time.monotonic(), _cpu_seconds()
    captured = _Tee(sys.stdout)
    with contextlib.redirect_stdout(captured):
        code = bench.main(argv)
    wall, cpu = time.monotonic() - wall, _cpu_seconds() - cpu
    page = results / f"{name.removeprefix('bench_')}.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(_page(name, argv, code, captured.getvalue(), load, wall, cpu))
    print(f"written: {page}", flush=True)
    return code


class _Tee(io.StringIO):
    """Keeps what is written and passes it on, so the run shows its progress as usual."""

    def __init__(self, through) -> None:
        super().__init__()
        self._through = through

    def write(self, text: str) -> int:
        self._through.write(text)
        return super().write(text)

    def flush(self) -> None:
        self._through.flush()


def _cpu_seconds() -> float:
    """CPU time of this process and the children it waited for."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _page(name: str, argv: list[str], code: int, output: str, load: float, wall, cpu) -> str:
    """A benchmark's results page: the command, the stamp, and what it printed."""
    from tracelib.provenance import code_version

    command = shlex.join(["python", "-m", "benchmarks", name.removeprefix("bench_"), *argv])
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    rows = [
        ("command", f"`{command}`"),
        ("exit status", str(code)),
        ("code", f"`{code_version()}`"),
        ("date", f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"),
        ("machine", machine),
        ("load average (1 min)", f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"),
        ("wall, CPU", f"{wall:.0f} s, {cpu:.0f} s (this process and the children it waited for)"),
    ]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    return (
        f"# {name.removeprefix('bench_')}\n\n"
        f"Written by `python -m benchmarks --write-results`; run the command again to "
        f"measure anew.\n\n| | |\n|---|---|\n{table}\n\n```text\n{output.rstrip()}\n```\n"
    )


def main(argv: list[str]) -> int:
    """Run the benchmarks `argv` names (every one when empty), or one with its arguments;
    a leading `--write-results` also writes each one's page into docs/results/."""
    results = None
    if argv[:1] == ["--write-results"]:
        argv, results = argv[1:], RESULTS
    known = names()
    wanted = [_module_name(a) for a in argv]
    if all(n in known for n in wanted):  # names only (or none: every benchmark)
        codes = [_run(name, [], results) for name in wanted or known]
        return next((c for c in codes if c), 0)
    if wanted[0] not in known:
        print(
            f"python -m benchmarks: error: unknown benchmark {argv[0]!r}; "
            f"known: {', '.join(n[6:] for n in known)}",
            file=sys.stderr,
        )
        return 2
    return _run(wanted[0], argv[1:], results)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
