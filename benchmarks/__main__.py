"""Run benchmarks of this folder.

    python -m benchmarks                    every benchmark, each at its defaults
    python -m benchmarks NAME [NAME ...]    those benchmarks (`harmony` or `bench_harmony`)
    python -m benchmarks NAME ARG ...       one benchmark with its own arguments, as
                                            `python -m benchmarks.bench_NAME ARG ...`

An unknown name, or arguments for a benchmark that takes none, is a usage error (exit 2).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import runpy
import sys
from pathlib import Path


def _names() -> list[str]:
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )


def _module_name(arg: str) -> str:
    return arg if arg.startswith("bench_") else f"bench_{arg}"


def _usage(message: str) -> None:
    print(f"python -m benchmarks: {message}", file=sys.stderr)
    raise SystemExit(2)


def _takes_arguments(path: str) -> bool:
    """Whether the benchmark module at `path` reads its command line at all (the benchmarks
    without options, e.g. bench_env, would silently ignore one)."""
    return "sys.argv" in Path(path).read_text()


def main(argv: list[str]) -> int:
    """Run the benchmarks `argv` names (every one when empty), or one with its arguments."""
    names = _names()
    wanted = [_module_name(a) for a in argv]
    if all(n in names for n in wanted):  # names only (or none: every benchmark)
        for name in wanted or names:
            print(f"== {name}")
            importlib.import_module(f"benchmarks.{name}").main()
        return 0
    if wanted[0] not in names:
        _usage(f"unknown benchmark {argv[0]!r}; known: {', '.join(n[6:] for n in names)}")
    # One benchmark and its own arguments, run exactly as `python -m benchmarks.<name>`
    # runs it: without this, `harmony --seeds 5` ran the benchmark at its defaults and then
    # failed on "--seeds" as a benchmark's name.
    path = importlib.util.find_spec(f"benchmarks.{wanted[0]}").origin
    if not _takes_arguments(path):
        _usage(f"{argv[0]} takes no arguments (given: {' '.join(argv[1:])})")
    print(f"== {wanted[0]}")
    saved = sys.argv
    sys.argv = [path, *argv[1:]]
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
