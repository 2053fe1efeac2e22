"""Benchmarks: speed and quality figures, printed. Run all with `make bench`."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class UsageError(ValueError):
    """A benchmark argument that is unknown, lacks its value or has a bad one."""


def parse_or_exit(parse: Callable[[list[str]], T], argv: list[str], prog: str) -> T:
    """`parse(argv)`, a benchmark's own argument loop; a bad argument prints `prog: error:
    ...` on stderr and exits 2, as argparse does, instead of a traceback (a missing value
    surfaces as StopIteration from `next(it)`, a bad number as ValueError). `-h` or `--help`
    prints the benchmark's module docstring, its usage, and exits 0."""
    if "-h" in argv or "--help" in argv:
        print(importlib.import_module(prog.split()[-1]).__doc__)
        raise SystemExit(0)
    try:
        return parse(argv)
    except StopIteration:
        message = f"{argv[-1]} needs a value"
    except ValueError as exc:  # UsageError, int("x"), json.JSONDecodeError
        message = str(exc)
    print(f"{prog}: error: {message} (see the module docstring)", file=sys.stderr)
    raise SystemExit(2)
