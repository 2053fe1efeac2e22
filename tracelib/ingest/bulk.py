"""The fast way for a plain CSV: DuckDB reads, types and checks the rows inside the ingest's
transaction, so a million rows never cross into Python and back.

It is an optimization of the careful way (`load_trace` then `store_trace`), never a second
meaning: it is taken only for files and mappings whose every step it reproduces exactly, and
only when every record of the file is accepted. At the first record the checks refuse (a
quarantine), DuckDB stops, the transaction is rolled back and the careful way runs, which
finds each reason, record number and raw text; so the stored tables are those of the
careful way, bit for bit (tests/test_ingest_bulk.py compares both ways).

What the fast way takes (`plan_bulk`): a generic mapping (or one extending a shipped
mapping) with a job id column, times as epoch numbers (no strptime format: DuckDB and polars
read formats differently) and no GPU share, over a CSV that is ASCII without a quote, a
blank or a NUL (no field to unquote or trim) and whose line breaks are all LF or all
CRLF. Every data line must come out as one row: DuckDB's strict reader stops at a line of
another width, or with a value it cannot read as a number, and then the careful way runs.
Numbers are read by DuckDB (its CSV reader, or `TRY_CAST(... AS DOUBLE)`), which agrees with
polars' cast on every ASCII text without a blank except digits separated by "_" (DuckDB
reads "1_000" as 1000): in a file holding a "_", number columns are read as text and such a
value counts as unparsable, so the careful way decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from tracelib.contracts import JOB_COLUMNS
from tracelib.ingest.base import _STATUS_WORDS, MIN_NORMAL, Bounds, normalize_status
from tracelib.ingest.csvrecords import DELIMITER, QUOTE, _column_names
from tracelib.ingest.generic import (
    _DURATION_UNITS,
    _INT_FIELDS,
    _NO_GPU_TYPE,
    _NUMBER_FIELDS,
    _TEXT_FIELDS,
    _TIME_FIELDS,
    _UNIT_FIELDS,
    Mapping,
    is_parquet,
)

_EPOCH_SCALE = {"s": 1_000_000, "ms": 1_000, "us": 1}
_LIMIT_US = "4611686018427387904.0"  # 2**62 us: beyond it the careful way has no time either
_NO_BLANKS = (b" ", b"\t", b"\x0b", b"\x0c", b"\x00")
_MICROSECOND = timedelta(microseconds=1)
_NUMERIC = (*_TIME_FIELDS, *_NUMBER_FIELDS, *_INT_FIELDS)


@dataclass(frozen=True)
class BulkPlan:
    """How DuckDB turns the file's text columns (`c0`, `c1`, ... in a relation `raw`) into
    `jobs` rows, and which rows the careful way would not accept as they are."""

    types: tuple[str, ...]
    """The DuckDB type each field is read as (VARCHAR, or DOUBLE for a column only read
    as a number)."""
    records: int
    """Data lines in the file: every one must become a job, or the careful way decides."""
    typed: str
    """SELECT over `raw`: `COLUMNS` then `_bad` (the careful way would not accept the row
    as it is)."""


COLUMNS = [c for c in JOB_COLUMNS if c != "source_id"]
"""The `jobs` columns the typing SQL yields (source_id is the store's)."""


def plan_bulk(
    path,
    data: bytes,
    mapping: Mapping | None,
    *,
    max_duration_s: float,
    bounds: Bounds | None = None,
) -> BulkPlan | None:
    """The fast way for this file and mapping, or None when only the careful way reproduces
    the jobs (see the module docstring)."""
    if mapping is None or is_parquet(path) or mapping.time_format is not None:
        return None
    if "job_id" not in mapping.columns or "gpu_share" in {*mapping.columns, *mapping.defaults}:
        return None
    if not data.isascii() or QUOTE.encode() in data or any(b in data for b in _NO_BLANKS):
        return None
    breaks = data.count(b"\n")
    # Every line break "\n" or every one "\r\n": DuckDB reads a file of mixed line ends
    # differently (a "\r" left in a field).
    if b"\r" in data and not data.count(b"\r") == data.count(b"\r\n") == breaks:
        return None
    n_lines = breaks + (0 if data.endswith(b"\n") else 1)
    end = data.find(b"\n")
    header = (data if end < 0 else data[:end]).removesuffix(b"\r").decode()
    names = _column_names(header.split(DELIMITER))
    width = len(names)
    # A line that is not exactly `width` fields (short, long) stops DuckDB's strict
    # reader, and one it skips (blank) leaves fewer rows than data lines: the careful way.
    if width < 2 or n_lines < 2:
        return None
    index = {name: i for i, name in reversed(list(enumerate(names)))}
    if any(col not in index or f"{col}_duplicated_0" in index for col in mapping.columns.values()):
        return None  # the careful way names the missing or repeated column
    raw = {fld: f"c{index[col]}" for fld, col in mapping.columns.items()}
    # DuckDB reads digits grouped by "_" as a number, polars does not. Without a "_" in
    # the file, a column read only as a number is parsed by DuckDB's CSV reader (a value
    # it cannot read stops it, so the file goes the careful way); with one, every
    # column is text and such a value counts as unparsable (the careful way decides).
    guard = b"_" in data
    numeric = set() if guard else {col for fld, col in raw.items() if fld in _NUMERIC}
    numeric -= {col for fld, col in raw.items() if fld not in _NUMERIC}
    types = tuple("DOUBLE" if f"c{i}" in numeric else "VARCHAR" for i in range(width))
    typed = _typed_sql(raw, mapping, max_duration_s, guard, numeric, bounds or Bounds())
    return BulkPlan(types, n_lines - 1, typed)


def _typed_sql(
    raw: dict[str, str],
    mapping: Mapping,
    max_duration_s: float,
    guard: bool,
    read_as_number: set[str],
    bounds: Bounds,
) -> str:
    """The SQL twin of `generic.parse_mapped` then `base.normalize` for a plain, blank-free
    file: the same values, and `_bad` true exactly where the careful way would quarantine
    (plus values whose reading could differ, which the careful way then decides)."""
    target = {fld: "duration_s" if fld == "duration" else fld for fld in raw}
    # Layers, so each value is parsed once: numbers (n*), typed fields (t_*), defaults
    # and parse failures, the duration, then the checks.
    numbers = {
        col: col if col in read_as_number else _number(col, guard)
        for fld, col in raw.items()
        if fld in _NUMERIC
    }
    layer0 = ", ".join(f"{expr} AS n{col[1:]}" for col, expr in numbers.items())
    typed: dict[str, str] = {}
    converted = []
    failed: list[str] = []
    for fld, col in raw.items():
        expr, can_fail = _convert(fld, col, f"n{col[1:]}", mapping)
        converted.append(f"{expr} AS t_{target[fld]}")
        typed[target[fld]] = f"t_{target[fld]}"
        if can_fail:
            failed.append(f"({col} IS NOT NULL AND t_{target[fld]} IS NULL)")
    defaults = {("duration_s" if k == "duration" else k): v for k, v in mapping.defaults.items()}
    stage1 = {}
    for name in JOB_COLUMNS:
        if name == "source_id":
            continue
        expr = typed.get(name)
        if name in defaults:
            value = _default_sql(name, defaults[name], mapping)
            expr = value if expr is None else f"coalesce({expr}, {value})"
        stage1[name] = expr
    if "status" not in typed and "status" not in defaults:
        # As parse_mapped: a job that ran is completed, one without a run time unknown.
        ran = " OR ".join(
            f"{c} IS NOT NULL" for c in ("duration_s", "end_time") if stage1[c] is not None
        )
        stage1["status"] = (
            f"CASE WHEN {ran} THEN 'completed' ELSE 'unknown' END" if ran else "'unknown'"
        )
    nulls = {name: f"CAST(NULL AS {_sql_type(JOB_COLUMNS[name])})" for name in stage1}
    first = ",\n  ".join(f"{expr or nulls[name]} AS {name}" for name, expr in stage1.items())
    parse_failed = " OR ".join(failed) or "false"
    # normalize: the duration from the times where none is given, then the checks. Polars
    # divides by a constant as a product with its inverse (not always the quotient's bits).
    duration = (
        "coalesce(duration_s, CAST(epoch_us(end_time) - epoch_us(start_time) AS DOUBLE)"
        f" * {_double(1 / 1e6)})"
    )
    checks = [
        "job_id IS NULL",
        "submit_time IS NULL",
        "num_gpus IS NULL",
        *(f"{c} < 0" for c in ("num_gpus", "num_cpus", "mem_gb", "num_workers", "num_ps")),
        "epochs <= 0",
        "start_time < submit_time",
        "end_time < start_time",
        "d < 0",
        f"d > CAST('{float(max_duration_s)!r}' AS DOUBLE)",
        *_bound_sql(bounds),
    ]
    bad = " OR ".join(f"coalesce({c}, false)" for c in checks)
    final = ", ".join(
        "d AS duration_s"
        if c == "duration_s"
        else "coalesce(status, 'unknown') AS status"
        if c == "status"
        else c
        for c in COLUMNS
    )
    layer1 = ", ".join(converted)
    return (
        f"SELECT {final}, _parse_failed OR {bad} AS _bad FROM ("
        f"SELECT *, {duration} AS d FROM ("
        f"SELECT {first},\n  {parse_failed} AS _parse_failed FROM ("
        f"SELECT *, {layer1} FROM (SELECT *{', ' + layer0 if layer0 else ''} FROM raw))))"
    )


def _bound_sql(bounds: Bounds, duration: str = "d") -> list[str]:
    """`base.bound_checks` in SQL: true where a record breaks a bound (the careful way then
    quarantines it with the reason). `duration`: the column holding the run time."""
    out = []
    for name in _TIME_FIELDS:
        out.append(
            f"({name} < TIMESTAMP '{bounds.earliest.isoformat(sep=' ')}' "
            f"OR {name} >= TIMESTAMP '{bounds.latest.isoformat(sep=' ')}')"
        )
    for name, ceiling in bounds.ceilings().items():
        column = duration if name == "duration_s" else name
        out.append(f"{column} > {_double(ceiling)}")
        if name not in _INT_FIELDS:
            out.append(
                f"(NOT isfinite({column}) OR ({column} <> 0 AND abs({column}) < "
                f"{_double(MIN_NORMAL)}))"
            )
    return out


def bounds_sql(bounds: Bounds) -> str:
    """A condition on `jobs` rows: true where a stored row breaks `bounds`."""
    return " OR ".join(_bound_sql(bounds, duration="duration_s"))


def _sql_type(dtype: pl.DataType) -> str:
    if isinstance(dtype, pl.Datetime):
        return "TIMESTAMP"
    return {pl.Utf8: "VARCHAR", pl.Float64: "DOUBLE", pl.Int32: "INTEGER"}[dtype]


def _double(value: float) -> str:
    """A DOUBLE literal that is exactly `value` (repr round-trips; a bare 0.001 would be a
    DECIMAL in DuckDB)."""
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _number(col: str, guard: bool) -> str:
    if guard:
        return f"(CASE WHEN NOT contains({col}, '_') THEN TRY_CAST({col} AS DOUBLE) END)"
    return f"TRY_CAST({col} AS DOUBLE)"


def _convert(fld: str, col: str, n: str, mapping: Mapping) -> tuple[str, bool]:
    """(SQL of `generic._convert` for one field, `col` its text and `n` its number,
    whether it can fail to parse)."""
    if fld in _TIME_FIELDS:
        micros = f"({n} * {_double(_EPOCH_SCALE[mapping.epoch_unit])}"
        if mapping.time_base is not None:
            base = mapping.time_base - datetime(1970, 1, 1)
            micros += f" + {_double(float(base // _MICROSECOND))}"
        micros += ")"
        return (
            f"(CASE WHEN abs({micros}) < {_LIMIT_US} "
            f"THEN make_timestamp(CAST(trunc({micros}) AS BIGINT)) END)"
        ), True
    if fld in _NUMBER_FIELDS:
        number = f"(CASE WHEN isfinite({n}) THEN {n} END)"
        if fld == "duration":
            number = f"({number} * {_double(_DURATION_UNITS[mapping.duration_unit])})"
        elif fld in mapping.units:
            number = f"({number} * {_double(_UNIT_FIELDS[fld][mapping.units[fld]])})"
        return number, True
    if fld in _INT_FIELDS:
        return (
            f"(CASE WHEN isfinite({n}) AND {n} = round({n}) AND abs({n}) < 2147483648.0 "
            f"THEN CAST({n} AS INTEGER) END)"
        ), True
    if fld == "status":
        return _status_sql(col, mapping.status_map), False
    if fld == "gpu_type":
        words = ", ".join(_text(w) for w in _NO_GPU_TYPE)
        return f"(CASE WHEN lower({col}) IN ({words}) THEN NULL ELSE {col} END)", False
    if fld in _TEXT_FIELDS:
        return col, False
    raise AssertionError(fld)


def _status_sql(col: str, overrides: dict[str, str]) -> str:
    """`base.normalize_status` for text without blanks (the first word is the whole text;
    ASCII, so DuckDB's lower() is polars' to_lowercase()); missing text is 'unknown' too."""
    words = dict(_STATUS_WORDS)
    words.update({k.lower(): v for k, v in overrides.items()})
    cases = " ".join(f"WHEN {_text(k)} THEN {_text(v)}" for k, v in words.items())
    return f"(CASE lower({col}) {cases} ELSE 'unknown' END)"


def _default_sql(name: str, value, mapping: Mapping) -> str:
    """A [defaults] value as the careful way types it (`parse_mapped`)."""
    if name == "status":
        word = pl.select(normalize_status(pl.lit(str(value)), mapping.status_map)).item()
        return _text(word)
    dtype = JOB_COLUMNS[name]
    typed = pl.select(pl.lit(value).cast(dtype)).item()
    if dtype == pl.Float64:
        return _double(typed)
    if dtype == pl.Int32:
        return f"CAST({int(typed)} AS INTEGER)"
    return _text(str(typed))
