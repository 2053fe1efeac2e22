"""What every trace adapter shares: the parsed-trace record, file errors, and normalization.

An adapter turns a file into a `ParsedTrace`: typed job fields per record plus the records
it could not parse. `normalize` then applies the checks common to all formats (required
fields, signs, ordering of times, absurd durations, the plausibility `Bounds`, NUL bytes in
text, duplicate ids) and splits the records into accepted jobs and quarantined rows, each
quarantined row with a reason naming a field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from tracelib.contracts import JOB_COLUMNS

# Longer than any training job we know of; a duration beyond it is a unit or clock error.
MAX_DURATION_S = 365 * 24 * 3600.0

# The smallest normal double: a non-zero magnitude below it (a subnormal such as 6e-319)
# is the residue of a wrong unit or a corrupted value, never a measurement.
MIN_NORMAL = 2.2250738585072014e-308


@dataclass(frozen=True)
class Bounds:
    """What a stored job field may hold (docs/traces.md): a value outside is a unit or
    clock error, and its record is quarantined naming the field.

    Every later command sizes its work by these values (a replay's cluster by the widest
    job, a report's timeline by the span of times), so they are what keeps one impossible
    value from making those commands run out of memory or crash.
    """

    earliest: datetime = datetime(2000, 1, 1)
    """Times from here on. GPU clusters with job logs start after 2000; a time before it is
    an offset from an unknown start or a unit error."""
    latest: datetime = datetime(2100, 1, 1)
    """Times before here. Fixed, not "today plus some years", so an ingest's result does not
    depend on the day it runs."""
    num_gpus: float = 100_000.0
    """GPUs per job: the largest clusters hold about this many GPUs in all."""
    num_cpus: float = 10_000_000.0
    """Cores per job: 100,000 servers of 100 cores."""
    mem_gb: float = 100_000_000.0
    """GB per job: 100,000 servers of 1 TB."""
    num_workers: int = 100_000
    """Workers per job: one per GPU at most, the GPU ceiling."""
    num_ps: int = 100_000
    """Parameter servers per job: the same ceiling as workers."""
    epochs: float = 1_000_000.0
    """Training epochs: far beyond any schedule in the papers (hundreds)."""
    duration_s: float = MAX_DURATION_S
    """Run time in seconds (also `max_duration_s`)."""

    def ceilings(self) -> dict[str, float]:
        """Field -> the largest value it may hold."""
        return {
            "num_gpus": self.num_gpus,
            "num_cpus": self.num_cpus,
            "mem_gb": self.mem_gb,
            "num_workers": self.num_workers,
            "num_ps": self.num_ps,
            "epochs": self.epochs,
            "duration_s": self.duration_s,
        }

    def params(self) -> dict[str, Any]:
        """The bounds that differ from the defaults, as JSON-ready values (part of an
        ingest's identity only when set, so default ingests keep theirs)."""
        out: dict[str, Any] = {}
        default = Bounds()
        for name in ("earliest", "latest", *self.ceilings()):
            value = getattr(self, name)
            if value != getattr(default, name):
                out[name] = value.isoformat(sep=" ") if isinstance(value, datetime) else value
        return out


PAI_BOUNDS = Bounds(earliest=datetime(1970, 1, 1))
"""PAI writes times as seconds from an undisclosed start, stored from 1970-01-01."""

_BOUND_UNITS = {
    "num_gpus": "GPUs",
    "num_cpus": "cores",
    "mem_gb": "GB",
    "num_workers": "workers",
    "num_ps": "parameter servers",
    "epochs": "epochs",
    "duration_s": "s",
}

_STATUS_WORDS = {
    "completed": "completed",
    "complete": "completed",
    "pass": "completed",
    "passed": "completed",
    "success": "completed",
    "succeeded": "completed",
    "successful": "completed",
    "finished": "completed",
    "done": "completed",
    "terminated": "completed",
    "failed": "failed",
    "fail": "failed",
    "error": "failed",
    "timeout": "failed",
    "node_fail": "failed",
    "out_of_memory": "failed",
    "killed": "killed",
    "cancelled": "killed",
    "canceled": "killed",
    "preempted": "killed",
    "running": "running",
    "pending": "pending",
    "queued": "pending",
    "waiting": "pending",
}


class IngestError(Exception):
    """The file as a whole cannot be ingested (unreadable, empty, a required column missing).

    Nothing is written to the warehouse when this is raised.
    """

    def __init__(self, path: Path | str, message: str, column: str | None = None):
        self.path = Path(path)
        self.column = column
        # Paths and values come from users and files: shown escaped, never as raw control
        # characters a terminal would act on.
        super().__init__(printable(f"{self.path}: {message}"))


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str, limit: int | None = None) -> str:
    """`text` with control characters (ANSI escapes, NUL, carriage returns, ...) shown as
    `\\xNN`-style escapes, and cut to `limit` characters (with "...") when given, so a
    message never hands a terminal a raw control sequence or an endless line."""
    out = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    if limit is not None and len(out) > limit:
        out = out[: max(limit - 3, 0)] + "..."
    return out


@dataclass
class ParsedTrace:
    """One trace file parsed into typed job fields, before the common checks."""

    path: Path
    format: str
    content_hash: str
    # record_no (Int64) plus any subset of the `jobs` fields, already typed.
    frame: pl.DataFrame
    # record_no, field, reason: records the adapter could not parse.
    errors: pl.DataFrame
    # record numbers -> the raw records as they appear in the file.
    raw: Callable[[Sequence[int]], list[str]]
    params: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """What the user should know about how the file was read (a defaulted field, ...)."""


def empty_errors() -> pl.DataFrame:
    return pl.DataFrame(schema={"record_no": pl.Int64, "field": pl.Utf8, "reason": pl.Utf8})


def normalize_status(expr: pl.Expr, overrides: dict[str, str] | None = None) -> pl.Expr:
    """Map raw status strings to the `jobs.status` vocabulary; unknown words -> 'unknown'.

    Matching is case-insensitive on the first word, so Slurm's 'CANCELLED by 123' is 'killed'.
    """
    words = dict(_STATUS_WORDS)
    words.update({k.lower(): v for k, v in (overrides or {}).items()})
    first = expr.cast(pl.Utf8).str.strip_chars().str.to_lowercase().str.split(" ").list.first()
    return first.replace_strict(words, default="unknown", return_dtype=pl.Utf8)


@dataclass(frozen=True)
class Check:
    """One per-record check: where it fails, the job field it names, and why.

    `reason` is the message, or a function of `values` (evaluated on the failing records
    only, each cast to text) that returns it.
    """

    fails: pl.Expr
    field: str
    reason: str | Callable[..., str]
    values: tuple[pl.Expr, ...] = ()


def first_problems(
    frame: pl.DataFrame, checks: Sequence[Check], *, key: str = "record_no"
) -> pl.DataFrame:
    """`key`, field, reason of the first failing check of each record (records that pass
    every check are not listed), sorted by `key`.

    Which check fails is decided column-wise; the messages are built in Python for the
    failing records alone. Formatting them with polars string expressions inside
    when/then on a filtered frame panicked in polars ("assertion failed: i < self.len()")
    on about half of large dirty files, and only failing records need a message.
    """
    schema = {key: pl.Int64, "field": pl.Utf8, "reason": pl.Utf8}
    if not checks:
        return pl.DataFrame(schema=schema)
    which = pl.coalesce(
        pl.when(check.fails.fill_null(False)).then(pl.lit(index, dtype=pl.Int32))
        for index, check in enumerate(checks)
    )
    flagged = frame.with_columns(which.alias("_check")).filter(pl.col("_check").is_not_null())
    out: dict[str, list] = {key: [], "field": [], "reason": []}
    if flagged.height:
        for index in flagged.get_column("_check").unique().sort().to_list():
            check = checks[index]
            rows = flagged.filter(pl.col("_check") == index).select(
                key, *[v.cast(pl.Utf8).alias(f"_v{i}") for i, v in enumerate(check.values)]
            )
            for row in rows.iter_rows():
                out[key].append(row[0])
                out["field"].append(check.field)
                out["reason"].append(
                    check.reason if isinstance(check.reason, str) else check.reason(*row[1:])
                )
    return pl.DataFrame(out, schema=schema).sort(key)


def normalize(
    parsed: ParsedTrace,
    source_id: str,
    *,
    max_duration_s: float = MAX_DURATION_S,
    bounds: Bounds | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split a parsed trace into (accepted `jobs` rows, `quarantine` rows).

    A record is quarantined with the first problem found, in this order: the adapter's own
    parse error, a missing required field, a negative quantity, times out of order, an
    absurd duration, a value outside `bounds` (times outside the era, quantities above
    their ceiling or subnormal), a duplicate job id (the first occurrence is kept). Every
    record of the parsed frame ends up in exactly one of the two.
    """
    bounds = bounds or Bounds()
    if max_duration_s != MAX_DURATION_S and bounds.duration_s == MAX_DURATION_S:
        bounds = replace(bounds, duration_s=max_duration_s)
    max_duration_s = bounds.duration_s
    frame = parsed.frame
    for name, dtype in JOB_COLUMNS.items():
        if name == "source_id":
            continue
        if name not in frame.columns:
            frame = frame.with_columns(pl.lit(None, dtype=dtype).alias(name))
    frame = frame.with_columns(
        pl.when(pl.col("duration_s").is_null())
        .then((pl.col("end_time") - pl.col("start_time")).dt.total_microseconds() / 1e6)
        .otherwise(pl.col("duration_s"))
        .alias("duration_s"),
        pl.col("status").fill_null("unknown"),
    )

    checks = [
        Check(pl.col(f).is_null(), f, f"missing required field {f}")
        for f in ("job_id", "submit_time", "num_gpus")
    ]
    for col in ("num_gpus", "num_cpus", "mem_gb", "num_workers", "num_ps"):
        checks.append(
            Check(pl.col(col) < 0, col, lambda v, col=col: f"negative {col} {v}", (pl.col(col),))
        )
    checks += [
        Check(
            pl.col("epochs") <= 0,
            "epochs",
            lambda v: f"non-positive epochs {v}",
            (pl.col("epochs"),),
        ),
        Check(
            pl.col("start_time") < pl.col("submit_time"),
            "start_time",
            lambda a, b: f"start_time {a} is before submit_time {b}",
            (pl.col("start_time"), pl.col("submit_time")),
        ),
        Check(
            pl.col("end_time") < pl.col("start_time"),
            "end_time",
            lambda a, b: f"end_time {a} is before start_time {b}",
            (pl.col("end_time"), pl.col("start_time")),
        ),
        Check(
            pl.col("duration_s") < 0,
            "duration_s",
            lambda v: f"negative duration {v} s",
            (pl.col("duration_s"),),
        ),
        Check(
            pl.col("duration_s") > max_duration_s,
            "duration_s",
            lambda v: f"absurd duration {v} s (more than {max_duration_s:.0f} s)",
            (pl.col("duration_s"),),
        ),
        *bound_checks(bounds),
        # A NUL byte ends strings in C tools and terminals: text holding one is not stored.
        *(
            Check(
                pl.col(name).str.contains("\x00", literal=True),
                name,
                f"{name} holds a NUL byte (\\x00)",
            )
            for name in ("job_id", "user_name", "vc", "model", "gpu_type")
        ),
    ]
    problems = first_problems(frame, checks)
    if parsed.errors.height:
        # The adapter's own error comes first: it explains why the later checks fail.
        adapter = parsed.errors.sort("record_no", maintain_order=True).unique(
            "record_no", keep="first", maintain_order=True
        )
        problems = pl.concat(
            [adapter, problems.filter(~pl.col("record_no").is_in(adapter["record_no"].implode()))]
        )

    # Duplicates are judged among otherwise-clean records: a broken first copy must not
    # push a good second copy into quarantine.
    clean = frame
    if problems.height:
        clean = frame.filter(~pl.col("record_no").is_in(problems["record_no"].implode()))
    ids = clean.get_column("job_id")
    if ids.hash().n_unique() == ids.len():
        # All hashes differ, so all ids do: 0.03 s for a million, where finding the first
        # of each id takes 0.2 s (needed only when two hashes meet).
        accepted, repeats = clean, clean.head(0).select("record_no", "job_id")
    else:
        is_first = ids.is_first_distinct()
        accepted = clean.filter(is_first)
        repeats = clean.filter(~is_first).select("record_no", "job_id")
    if repeats.height:
        repeats = repeats.join(
            accepted.select("job_id", pl.col("record_no").alias("_first")), on="job_id"
        )
        duplicates = pl.DataFrame(
            {
                "record_no": repeats.get_column("record_no"),
                "field": ["job_id"] * repeats.height,
                "reason": [
                    f"duplicate job_id {job} (first at record {first})"
                    for job, first in repeats.select("job_id", "_first").iter_rows()
                ],
            },
            schema=problems.schema,
        )
        problems = pl.concat([problems, duplicates])
    problems = problems.sort("record_no")
    quarantine = pl.DataFrame(
        {
            "source_id": pl.Series([source_id] * problems.height, dtype=pl.Utf8),
            "record_no": problems.get_column("record_no"),
            "field": problems.get_column("field"),
            "reason": problems.get_column("reason"),
            "raw_record": pl.Series(
                parsed.raw(problems.get_column("record_no").to_list()), dtype=pl.Utf8
            ),
        }
    )
    jobs = accepted.select(
        pl.lit(source_id).alias("source_id"),
        *[pl.col(c).cast(t) for c, t in JOB_COLUMNS.items() if c != "source_id"],
    )
    return jobs, quarantine


def bound_checks(bounds: Bounds) -> list[Check]:
    """The checks of `bounds` on a frame of `jobs` fields (see `Bounds`)."""
    checks = []
    for name in ("submit_time", "start_time", "end_time"):
        col = pl.col(name)
        checks.append(
            Check(
                (col < bounds.earliest) | (col >= bounds.latest),
                name,
                lambda t, secs, name=name: _era_reason(name, t, float(secs), bounds),
                (col, col.dt.epoch("us").cast(pl.Float64) / 1e6),
            )
        )
    for name, ceiling in bounds.ceilings().items():
        col = pl.col(name)
        unit = _BOUND_UNITS[name]
        if name in ("num_workers", "num_ps"):
            fails = col > ceiling
        else:
            fails = (~col.is_finite()) | ((col != 0) & (col.abs() < MIN_NORMAL)) | (col > ceiling)
        checks.append(
            Check(
                fails,
                name,
                lambda v, name=name, ceiling=ceiling, unit=unit: _bound_reason(
                    name, v, ceiling, unit
                ),
                (col,),
            )
        )
    return checks


def _bound_reason(name: str, value: str, ceiling: float, unit: str) -> str:
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        return f"{name} {value} is not a finite number"
    if number != 0 and abs(number) < MIN_NORMAL:
        return f"{name} {number!r} is subnormal (below {MIN_NORMAL:.3g}): not a measurement"
    return (
        f"{name} {number:g} is above the ceiling of {ceiling:g} {unit} per job "
        f"(a mapping can raise it: [bounds] {_bound_key(name)} = ...)"
    )


def _bound_key(name: str) -> str:
    return "duration" if name == "duration_s" else name


def _era_reason(name: str, shown: str, seconds: float, bounds: Bounds) -> str:
    """Why a time is outside the era, and the unit it would fit in, if one does."""
    era = f"{bounds.earliest:%Y-%m-%d} to {bounds.latest:%Y-%m-%d}"
    reason = f"{name} {shown} is outside the plausible era {era}"
    low, high = (
        (t - datetime(1970, 1, 1)).total_seconds() for t in (bounds.earliest, bounds.latest)
    )
    for unit, scale, key in (
        ("milliseconds", 1e3, "ms"),
        ("microseconds", 1e6, "us"),
        ("nanoseconds", 1e9, None),
    ):
        if low <= seconds / scale < high:
            fix = (
                f'set the column\'s unit to {key} in the mapping ([time] epoch_unit = "{key}")'
                if key
                else "convert the column to seconds"
            )
            return f"{reason}: {seconds:.6g} looks like epoch {unit}; {fix}"
    if low <= seconds * 1e3 < high:
        return (
            f"{reason}: {seconds * 1e3:.6g} looks like epoch seconds read as milliseconds; "
            'set [time] epoch_unit = "s" in the mapping'
        )
    return (
        f"{reason} (offsets from a trace's start need [time] base; "
        "[bounds] earliest and latest widen the era)"
    )


def line_lookup(data: bytes, *, first_line: int = 1) -> Callable[[Sequence[int]], list[str]]:
    """Raw-record lookup for line-oriented files: record number = 1-based line number.

    Lines are split only when a record is first asked for, so clean files never pay for it.
    Invalid UTF-8 is kept visible as backslash escapes rather than lost.
    """
    lines: list[bytes] | None = None

    def lookup(record_nos: Sequence[int]) -> list[str]:
        nonlocal lines
        if not record_nos:
            return []
        if lines is None:
            lines = data.split(b"\n")
        out = []
        for no in record_nos:
            index = no - first_line
            raw = lines[index] if 0 <= index < len(lines) else b""
            out.append(raw.rstrip(b"\r").decode("utf-8", errors="backslashreplace"))
        return out

    return lookup
