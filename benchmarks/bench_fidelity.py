"""Fidelity of the simulator's ground truth: every check of models/fidelity.py.

    python -m benchmarks fidelity          # about 2-4 minutes here (the DL2 large setting)

Prints each check's figure beside its target range and its source; exits non-zero when a
check fails (the same rows `schedlab run` writes to `fidelity_checks`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from benchmarks.options import parse
from models.fidelity import FidelityConfig, fidelity_checks


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_fidelity` takes no options."""


def main(argv: list[str]) -> int:
    """Run every check, print it; 1 when one does not pass."""
    parse(Options, argv)
    start = time.perf_counter()
    rows = fidelity_checks(FidelityConfig())
    width = max(len(r.check_name) for r in rows)
    for r in rows:
        status = "pass" if r.passed else "FAIL"
        print(
            f"  {r.check_name:{width}s} {r.measured:8.4f}  target [{r.low:.3g}, {r.high:.3g}]  "
            f"{status}  ({r.source})"
        )
    failed = [r.check_name for r in rows if not r.passed]
    wall = time.perf_counter() - start
    print(f"  {len(rows) - len(failed)} of {len(rows)} checks pass ({wall:.0f} s)")
    if failed:
        print(f"fidelity checks failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
