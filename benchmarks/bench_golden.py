"""Golden comparison: do two warehouses hold the same results, bit for bit?

    python -m benchmarks golden BEFORE.duckdb AFTER.duckdb [--show 5]

Made for a refactor: run `schedlab run` (same seed, same budget) at two commits, each in its
own checkout, and compare the two warehouses. Every base table is compared as a multiset of
rows after taking out what legitimately differs between two runs of different code:

- the code version (it is stamped into rows and into checkpoints, hence into the policy ids
  that are checkpoint hashes, the evaluation ids that name the policies, and the run ids
  that hash those): each such id is replaced, wherever it appears (in a column or inside a
  JSON text), by a label that only depends on content (`dl2#0` is the first DL2 policy
  created, `eval#3` the fourth evaluation ordered by workload set and then by when it was
  stored, `run#0` the first pipeline run);
- clock times and durations (`*_at`, `wall_s`, keys naming wall time in a JSON text), the
  process that ran (`host`, `pid`, `process_started`), file locations (`checkpoint_path`,
  `path`) and checkpoint bytes' hashes (`sha256`);
- `pipeline_runs.summary` (timings) and the run-level ids of evaluation rows (`run_id`,
  a hash of the evaluation id, scheduler, workload and seed, which the rows also hold);
- cache keys that hash the code version or a policy id (`input_key` in a JSON text, the
  fidelity checks' `check_key`, the seed labelling the samples Harmony observed online):
  each value is labelled by where its rows fall when the table is sorted by everything else.

Floats are compared exactly. Printed per table: rows in each, rows only in one of them,
and the first `--show` differing rows. Target: 0 rows differ. Exit status 1 when any do.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from benchmarks.options import parse, positional

DROPPED_COLUMNS = frozenset(
    {
        "code_version",
        "wall_s",
        "host",
        "pid",
        "process_started",
        "checkpoint_path",
        "path",
        "sha256",
        "run_id",
    }
)
"""Columns left out of every table (see the module docstring)."""

DROPPED_TABLE_COLUMNS = {"pipeline_runs": {"summary"}}
"""Columns left out of one table only."""

DERIVED_KEYS = {"fidelity_checks": "check_key", "interference_samples": "seed"}
"""Per table, a column holding a key that hashes the code version (or a policy id) for some
of its rows: labelled by the order of the rows it keys (see `_relabel`)."""

_VOLATILE_KEY = re.compile(
    r"(^|_)(wall|code_version|checkpoint_path|sha256|host|pid)(_|$)|_at$|s_per_iteration"
    r"|^input_key$"
)
"""JSON keys whose values are clock, process or code-version facts."""


@dataclass(frozen=True)
class Options:
    """Two warehouses to compare."""

    before: str = positional("")
    """The warehouse written by the older code."""
    after: str = positional("")
    """The warehouse written by the newer code."""
    show: int = 5
    """How many differing rows to print per table."""

    def __post_init__(self) -> None:
        if not self.before or not self.after:
            raise ValueError("give two warehouses: BEFORE.duckdb AFTER.duckdb")
        for name in (self.before, self.after):
            if not Path(name).is_file():
                raise ValueError(f"{name}: no such warehouse file")
        if self.show < 0:
            raise ValueError("--show must be 0 or more")


def _dropped(table: str, column: str) -> bool:
    return (
        column in DROPPED_COLUMNS
        or column.endswith("_at")
        or column in DROPPED_TABLE_COLUMNS.get(table, set())
    )


def _labels(con) -> dict[str, str]:
    """Every code-version-dependent id or stamp in the warehouse -> a content-only label."""
    from warehouse.io import read_frame

    labels: dict[str, str] = {}
    policies = read_frame(
        con, "SELECT policy_id, system FROM policies ORDER BY system, created_at, policy_id"
    )
    counts: Counter[str] = Counter()
    for policy_id, system in policies.iter_rows():
        labels[policy_id] = f"{system}#{counts[system]}"
        counts[system] += 1
    evals = read_frame(
        con,
        # By workload set first: the sets' evaluations run side by side on a task runner
        # with worker processes, so which is stored first differs from run to run.
        "SELECT eval_id FROM eval_summary GROUP BY eval_id "
        "ORDER BY min(workload_set), min(evaluated_at), eval_id",
    )
    for k, (eval_id,) in enumerate(evals.iter_rows()):
        labels[eval_id] = f"eval#{k}"
    runs = read_frame(con, "SELECT run_id FROM pipeline_runs ORDER BY started_at, run_id")
    for k, (run_id,) in enumerate(runs.iter_rows()):
        labels[run_id] = f"run#{k}"
    versions = read_frame(
        con,
        "SELECT DISTINCT code_version FROM policies UNION SELECT DISTINCT code_version "
        "FROM pipeline_runs",
    )
    for (version,) in versions.iter_rows():
        if version:
            labels[version] = "<code-version>"
    return labels


def _without_volatile_keys(value):
    if isinstance(value, dict):
        return {
            k: _without_volatile_keys(v) for k, v in value.items() if not _VOLATILE_KEY.search(k)
        }
    if isinstance(value, list):
        return [_without_volatile_keys(v) for v in value]
    return value


def _normal_text(text: str | None, labels: dict[str, str]) -> str | None:
    """A text with every volatile id replaced by its label, and a JSON text without its
    volatile keys (re-dumped with sorted keys)."""
    if text is None:
        return None
    for old in sorted((k for k in labels if k in text), key=len, reverse=True):
        text = text.replace(old, labels[old])
    if text[:1] in "{[":
        try:
            return json.dumps(_without_volatile_keys(json.loads(text)), sort_keys=True)
        except ValueError:
            return text
    return text


def normalized(con, table: str, labels: dict[str, str]) -> pl.DataFrame:
    """The table's rows with the volatile columns out and the volatile ids labelled."""
    from warehouse.io import read_frame

    frame = read_frame(con, f'SELECT * FROM "{table}"')
    frame = frame.select([c for c in frame.columns if not _dropped(table, c)])
    texts = [c for c, t in frame.schema.items() if t == pl.Utf8]
    frame = frame.with_columns(
        pl.col(c).map_elements(lambda s: _normal_text(s, labels), return_dtype=pl.Utf8)
        for c in texts
    )
    return _relabel(frame, DERIVED_KEYS[table]) if table in DERIVED_KEYS else frame


def _relabel(frame: pl.DataFrame, key: str) -> pl.DataFrame:
    """`key`'s hash values (strings of 16 characters or more, integers of 2^32 or more)
    replaced by "key#k", k the order in which each first appears when the rows are sorted
    by every other column: two warehouses whose rows differ only in those hashes get the
    same labels. Other values (a synthetic source's small seed) are kept as they are."""
    others = [c for c in frame.columns if c != key]
    ordered = frame.sort(others, nulls_last=True, maintain_order=True)
    hashes = [v for v in ordered[key].unique(maintain_order=True).to_list() if _is_hash(v)]
    labels = {v: f"{key}#{k}" for k, v in enumerate(hashes)}
    return frame.with_columns(
        pl.col(key).map_elements(lambda v: labels.get(v, str(v)), return_dtype=pl.Utf8)
    )


def _is_hash(value) -> bool:
    if isinstance(value, str):
        return len(value) >= 16
    return isinstance(value, int) and value >= 2**32


def _rows(frame: pl.DataFrame) -> Counter:
    # repr keeps a float's every bit (it round-trips) and tells None from "None"
    return Counter(repr(row) for row in frame.iter_rows())


def compare(before: str, after: str, show: int) -> int:
    """Print the per-table comparison; the number of rows that differ."""
    from warehouse.db import connect

    with connect(before, read_only=True) as a, connect(after, read_only=True) as b:
        tables = sorted(set(_tables(a)) | set(_tables(b)))
        labels_a, labels_b = _labels(a), _labels(b)
        differing = 0
        print(
            f"{'table':28s} {'before':>8s} {'after':>8s} {'only before':>12s} {'only after':>11s}"
        )
        for table in tables:
            if table not in _tables(a) or table not in _tables(b):
                print(f"{table:28s} only in {'before' if table in _tables(a) else 'after'}")
                differing += 1
                continue
            fa, fb = normalized(a, table, labels_a), normalized(b, table, labels_b)
            if fa.columns != fb.columns:
                print(f"{table:28s} columns differ: {fa.columns} vs {fb.columns}")
                differing += max(fa.height, fb.height, 1)
                continue
            ra, rb = _rows(fa), _rows(fb)
            only_a, only_b = ra - rb, rb - ra
            n_a, n_b = sum(only_a.values()), sum(only_b.values())
            differing += n_a + n_b
            print(f"{table:28s} {fa.height:8d} {fb.height:8d} {n_a:12d} {n_b:11d}")
            for label, only in (("before", only_a), ("after", only_b)):
                for row in list(only)[:show]:
                    print(f"    only {label}: {row[:400]}")
    return differing


def _tables(con) -> list[str]:
    from warehouse.io import read_frame

    return read_frame(
        con,
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'main' AND table_type = 'BASE TABLE'",
    )["table_name"].to_list()


def main(argv: list[str]) -> int:
    """Compare the two warehouses; 1 when any row differs."""
    args = parse(Options, argv)
    differing = compare(args.before, args.after, args.show)
    print(f"rows that differ: {differing} (target 0)")
    return 1 if differing else 0
