"""Run benchmarks of this folder.

    python -m benchmarks                    every benchmark, each at its defaults
    python -m benchmarks NAME [NAME ...]    those benchmarks (`harmony` or `bench_harmony`)
    python -m benchmarks NAME ARG ...       one benchmark with its own arguments, as
                                            `python -m benchmarks.bench_NAME ARG ...`

Every benchmark is `main(argv) -> int`; the exit status is the first non-zero one. An
unknown name is a usage error (exit 2), and so is an argument the benchmark refuses.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def names() -> list[str]:
    """Every benchmark's module name (`bench_...`), sorted."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )


def _module_name(arg: str) -> str:
    return arg if arg.startswith("bench_") else f"bench_{arg}"


def _run(name: str, argv: list[str]) -> int:
    print(f"== {name}", flush=True)
    return importlib.import_module(f"benchmarks.{name}").main(argv)


def main(argv: list[str]) -> int:
    """Run the benchmarks `argv` names (every one when empty), or one with its arguments."""
    known = names()
    wanted = [_module_name(a) for a in argv]
    if all(n in known for n in wanted):  # names only (or none: every benchmark)
        codes = [_run(name, []) for name in wanted or known]
        return next((c for c in codes if c), 0)
    if wanted[0] not in known:
        print(
            f"python -m benchmarks: error: unknown benchmark {argv[0]!r}; "
            f"known: {', '.join(n[6:] for n in known)}",
            file=sys.stderr,
        )
        return 2
    return _run(wanted[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
