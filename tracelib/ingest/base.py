"""What every trace adapter shares: the parsed-trace record, file errors, and normalization.

An adapter turns a file into a `ParsedTrace`: typed job fields per record plus the records
it could not parse. `normalize` then applies the checks common to all formats (required
fields, signs, ordering of times, absurd durations, duplicate ids) and splits the records
into accepted jobs and quarantined rows, each quarantined row with a reason naming a field.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracelib.contracts import JOB_COLUMNS

# Longer than any training job we know of; a duration beyond it is a unit or clock error.
MAX_DURATION_S = 365 * 24 * 3600.0
# A field separator that cannot occur in a field name.
_SEP = "\x1f"

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
        super().__init__(f"{self.path}: {message}")


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


def normalize(
    parsed: ParsedTrace, source_id: str, *, max_duration_s: float = MAX_DURATION_S
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split a parsed trace into (accepted `jobs` rows, `quarantine` rows).

    A record is quarantined with the first problem found, in this order: the adapter's own
    parse error, a missing required field, a negative quantity, times out of order, an
    absurd duration, a duplicate job id (the first occurrence is kept).
    """
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

    def flag(condition: pl.Expr, fld: str, reason: pl.Expr | str) -> pl.Expr:
        reason = pl.lit(reason) if isinstance(reason, str) else reason
        return pl.when(condition).then(pl.concat_str(pl.lit(fld + _SEP), reason))

    def fmt(template: str, *cols: str) -> pl.Expr:
        return pl.format(template, *(pl.col(c).cast(pl.Utf8) for c in cols))

    checks = [
        flag(pl.col("job_id").is_null(), "job_id", "missing required field job_id"),
        flag(pl.col("submit_time").is_null(), "submit_time", "missing required field submit_time"),
        flag(pl.col("num_gpus").is_null(), "num_gpus", "missing required field num_gpus"),
    ]
    for col in ("num_gpus", "num_cpus", "mem_gb", "num_workers", "num_ps"):
        checks.append(flag(pl.col(col) < 0, col, fmt(f"negative {col} {{}}", col)))
    checks += [
        flag(pl.col("epochs") <= 0, "epochs", fmt("non-positive epochs {}", "epochs")),
        flag(
            pl.col("start_time") < pl.col("submit_time"),
            "start_time",
            fmt("start_time {} is before submit_time {}", "start_time", "submit_time"),
        ),
        flag(
            pl.col("end_time") < pl.col("start_time"),
            "end_time",
            fmt("end_time {} is before start_time {}", "end_time", "start_time"),
        ),
        flag(
            pl.col("duration_s") < 0,
            "duration_s",
            fmt("negative duration {} s", "duration_s"),
        ),
        flag(
            pl.col("duration_s") > max_duration_s,
            "duration_s",
            fmt(f"absurd duration {{}} s (more than {max_duration_s:.0f} s)", "duration_s"),
        ),
    ]
    frame = frame.with_columns(pl.coalesce(checks).alias("_problem"))

    if parsed.errors.height:
        adapter_errors = parsed.errors.sort("record_no", maintain_order=True).unique(
            "record_no", keep="first", maintain_order=True
        )
        frame = frame.join(
            adapter_errors.select(
                "record_no", pl.concat_str("field", pl.lit(_SEP), "reason").alias("_parse")
            ),
            on="record_no",
            how="left",
        ).with_columns(pl.coalesce("_parse", "_problem").alias("_problem"))

    # Duplicates are judged among otherwise-clean records: a broken first copy must not
    # push a good second copy into quarantine.
    clean = frame.filter(pl.col("_problem").is_null())
    is_first = clean.get_column("job_id").is_first_distinct()
    accepted = clean.filter(is_first)
    repeats = clean.filter(~is_first).select("record_no", "job_id")
    if repeats.height:
        repeats = repeats.join(
            accepted.select("job_id", pl.col("record_no").alias("_first")), on="job_id"
        )
    duplicates = repeats.select(
        "record_no",
        pl.format(
            f"job_id{_SEP}duplicate job_id {{}} (first at record {{}})",
            pl.col("job_id"),
            pl.col("_first") if repeats.height else pl.lit(None, pl.Int64),
        ).alias("_problem"),
    )

    problems = pl.concat(
        [frame.filter(pl.col("_problem").is_not_null()).select("record_no", "_problem"), duplicates]
    ).sort("record_no")
    parts = problems.get_column("_problem").str.split_exact(_SEP, 1)
    quarantine = pl.DataFrame(
        {
            "source_id": pl.Series([source_id] * problems.height, dtype=pl.Utf8),
            "record_no": problems.get_column("record_no"),
            "field": parts.struct.field("field_0"),
            "reason": parts.struct.field("field_1"),
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
