"""Any CSV or Parquet job log, read through a user-written mapping file (TOML).

Mapping file (every key optional except the two required columns):

    [columns]                  # job field = column in the file
    job_id = "JobID"           # required
    submit_time = "Submit"     # required
    start_time = "Start"
    end_time = "End"
    duration = "Elapsed"       # run time; else end_time - start_time
    num_gpus = "GPUs"          # required unless given in [defaults]
    num_cpus = "CPUs"
    mem_gb = "MemGB"
    num_workers = "Workers"
    num_ps = "PS"
    epochs = "Epochs"
    status = "State"
    user_name = "User"
    vc = "Partition"
    model = "Model"

    [time]
    format = "%Y-%m-%d %H:%M:%S"   # strptime format of the time columns, or
    epoch_unit = "s"               # they are numbers since 1970: s, ms or us

    [duration]
    unit = "s"                     # s, ms, min or h

    [defaults]                     # value for a field the file lacks or leaves empty
    num_gpus = 1

    [status]                       # extra raw status -> completed|failed|killed|running|pending
    "EXIT_OK" = "completed"
"""

from __future__ import annotations

import io
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracelib.contracts import JOB_COLUMNS, STATUSES
from tracelib.ingest.base import IngestError, ParsedTrace, line_lookup, normalize_status
from tracelib.provenance import sha256_hex

FIELDS = (
    "job_id",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "num_gpus",
    "num_cpus",
    "mem_gb",
    "num_workers",
    "num_ps",
    "epochs",
    "status",
    "user_name",
    "vc",
    "model",
)
_TIME_FIELDS = ("submit_time", "start_time", "end_time")
_NUMBER_FIELDS = ("num_gpus", "num_cpus", "mem_gb", "epochs", "duration")
_INT_FIELDS = ("num_workers", "num_ps")
_TEXT_FIELDS = ("job_id", "user_name", "vc", "model")
_DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
_EPOCH_UNITS = ("s", "ms", "us")
_SEP = "\x1f"


@dataclass(frozen=True)
class Mapping:
    """How the columns of one job-log layout map onto `jobs` fields."""

    columns: dict[str, str]
    time_format: str | None = None
    epoch_unit: str | None = None
    duration_unit: str = "s"
    defaults: dict[str, Any] = field(default_factory=dict)
    status_map: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.columns) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in [columns]; known: {list(FIELDS)}")
        for required in ("job_id", "submit_time"):
            if required not in self.columns:
                raise ValueError(f"[columns] must map the required field {required!r}")
        if "num_gpus" not in self.columns and "num_gpus" not in self.defaults:
            raise ValueError("map num_gpus in [columns] or give it a value in [defaults]")
        if (self.time_format is None) == (self.epoch_unit is None):
            raise ValueError("[time] needs exactly one of format or epoch_unit")
        if self.epoch_unit is not None and self.epoch_unit not in _EPOCH_UNITS:
            raise ValueError(f"[time] epoch_unit must be one of {_EPOCH_UNITS}")
        if self.duration_unit not in _DURATION_UNITS:
            raise ValueError(f"[duration] unit must be one of {sorted(_DURATION_UNITS)}")
        bad = {k: v for k, v in self.status_map.items() if v not in STATUSES}
        if bad:
            raise ValueError(f"[status] values must be among {STATUSES}: {bad}")

    @classmethod
    def from_toml(cls, path: str | Path) -> Mapping:
        path = Path(path)
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise IngestError(path, f"cannot read mapping file: {exc}") from None
        time = doc.get("time", {})
        try:
            return cls(
                columns=dict(doc.get("columns", {})),
                time_format=time.get("format"),
                epoch_unit=time.get("epoch_unit"),
                duration_unit=doc.get("duration", {}).get("unit", "s"),
                defaults=dict(doc.get("defaults", {})),
                status_map=dict(doc.get("status", {})),
            )
        except ValueError as exc:
            raise IngestError(path, f"invalid mapping: {exc}") from None


def read_bytes(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise IngestError(path, f"cannot read file: {exc.strerror or exc}") from None
    if not data or data.isspace():
        raise IngestError(path, "file is empty")
    return data


def read_table(path: Path, data: bytes, *, has_header: bool = True, columns=None) -> pl.DataFrame:
    """CSV (every column as text) or Parquet, by extension; errors name the file."""
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame = pl.read_parquet(io.BytesIO(data))
        else:
            frame = pl.read_csv(
                io.BytesIO(data),
                has_header=has_header,
                new_columns=columns,
                infer_schema=False,
                encoding="utf8-lossy",
            )
    except Exception as exc:  # polars raises several error types for unreadable input
        raise IngestError(path, f"cannot parse as a table: {exc}") from None
    if frame.height == 0:
        raise IngestError(path, "file has no data rows")
    return frame


def parse_mapped(
    path: Path,
    data: bytes,
    table: pl.DataFrame,
    mapping: Mapping,
    *,
    fmt: str,
    first_record: int,
    raw=None,
) -> ParsedTrace:
    """Apply a mapping to an already-read table: typed job fields plus per-record parse errors."""
    missing = [col for col in mapping.columns.values() if col not in table.columns]
    if missing:
        field_of = {v: k for k, v in mapping.columns.items()}
        col = missing[0]
        raise IngestError(
            path, f"missing required column {col!r} (mapped to field {field_of[col]!r})", col
        )
    table = table.with_row_index("record_no", offset=first_record).with_columns(
        pl.col("record_no").cast(pl.Int64)
    )
    # Checking for replacement characters only matters if the bytes were not valid UTF-8.
    check_encoding = not _is_utf8(data)
    # Three cheap passes: trim the raw text once, parse it once, then flag records whose
    # non-empty text did not parse. Messages are formatted only for flagged records.
    trimmed = table.select(
        "record_no",
        *[
            _trimmed(col, table.schema[col]).alias(f"_raw_{fld}")
            for fld, col in mapping.columns.items()
        ],
    )
    targets = {fld: "duration_s" if fld == "duration" else fld for fld in mapping.columns}
    kinds = {}
    conversions = []
    for fld, col in mapping.columns.items():
        parsed, what = _convert(fld, pl.col(f"_raw_{fld}"), table.schema[col], mapping)
        conversions.append(parsed.alias(targets[fld]))
        kinds[fld] = what
    parsed_frame = trimmed.with_columns(conversions)
    problems: list[tuple[pl.Expr, pl.Expr]] = []
    for fld, col in mapping.columns.items():
        target, raw_col = targets[fld], pl.col(f"_raw_{fld}")
        where = f"{target}{_SEP}field {target!r} (column {col!r})"
        if check_encoding and table.schema[col] == pl.Utf8:
            problems.append(
                (
                    raw_col.str.contains("\ufffd", literal=True),
                    pl.lit(f"{where}: invalid UTF-8 bytes"),
                )
            )
        if kinds[fld] is not None:
            problems.append(
                (
                    raw_col.is_not_null() & pl.col(target).is_null(),
                    pl.format(
                        f"{where}: cannot parse '{{}}' as {kinds[fld]}", raw_col.cast(pl.Utf8)
                    ),
                )
            )
    typed = parsed_frame.select("record_no", *targets.values())
    bad = pl.DataFrame(schema={"record_no": pl.Int64, "_problem": pl.Utf8})
    if problems:
        mask = parsed_frame.select(pl.any_horizontal(f.fill_null(False) for f, _ in problems))
        mask = mask.to_series()
        if mask.any():
            bad = parsed_frame.filter(mask).select(
                "record_no",
                pl.coalesce(pl.when(flag).then(message) for flag, message in problems).alias(
                    "_problem"
                ),
            )
    parts = bad.get_column("_problem").str.split_exact(_SEP, 1)
    errors = pl.DataFrame(
        {
            "record_no": bad.get_column("record_no"),
            "field": parts.struct.field("field_0"),
            "reason": parts.struct.field("field_1"),
        }
    )
    frame = typed
    defaults = {("duration_s" if k == "duration" else k): v for k, v in mapping.defaults.items()}
    for fld, value in defaults.items():
        dtype = JOB_COLUMNS[fld]
        if fld == "status":
            value = normalize_status(pl.lit(str(value)), mapping.status_map)
        else:
            value = pl.lit(value).cast(dtype)
        if fld in frame.columns:
            frame = frame.with_columns(pl.col(fld).fill_null(value))
        else:
            frame = frame.with_columns(value.alias(fld))
    return ParsedTrace(
        path=path,
        format=fmt,
        content_hash=sha256_hex(data),
        frame=frame,
        errors=errors,
        raw=raw or line_lookup(data, first_line=1),
    )


def _trimmed(col: str, dtype: pl.DataType) -> pl.Expr:
    """Text with surrounding blanks removed and empty strings as missing; other types as is."""
    if dtype != pl.Utf8:
        return pl.col(col)
    text = pl.col(col).str.strip_chars()
    return pl.when(text == "").then(None).otherwise(text)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _convert(fld: str, col: pl.Expr, dtype: pl.DataType, mapping: Mapping):
    """(typed expression, what it was parsed as, for error messages; None if it cannot fail)."""
    is_text = dtype == pl.Utf8
    if fld in _TIME_FIELDS:
        if isinstance(dtype, pl.Datetime):
            return col.cast(pl.Datetime("us")), None
        if mapping.time_format is not None:
            if not is_text:
                col = col.cast(pl.Utf8)
            return (
                col.str.strptime(pl.Datetime("us"), mapping.time_format, strict=False),
                f"a time in format {mapping.time_format!r}",
            )
        number = col.cast(pl.Float64, strict=False)
        scale = {"s": 1_000_000, "ms": 1_000, "us": 1}[mapping.epoch_unit]
        return (
            (number * scale).cast(pl.Int64, strict=False).cast(pl.Datetime("us")),
            f"epoch {mapping.epoch_unit}",
        )
    if fld in _NUMBER_FIELDS:
        number = col.cast(pl.Float64, strict=False)
        number = pl.when(number.is_finite()).then(number)
        if fld == "duration":
            number = number * _DURATION_UNITS[mapping.duration_unit]
        return number, "a number"
    if fld in _INT_FIELDS:
        number = col.cast(pl.Float64, strict=False)
        whole = pl.when(number.is_finite() & (number == number.round(0))).then(number)
        return whole.cast(pl.Int32, strict=False), "a whole number"
    if fld == "status":
        return normalize_status(col, mapping.status_map), None
    if fld in _TEXT_FIELDS:
        return col.cast(pl.Utf8), None
    raise AssertionError(fld)


def parse_generic(path: str | Path, mapping: Mapping, *, fmt: str = "generic") -> ParsedTrace:
    """Parse a CSV or Parquet job log with a mapping."""
    path = Path(path)
    data = read_bytes(path)
    table = read_table(path, data)
    is_csv = path.suffix.lower() not in (".parquet", ".pq")
    raw = None if is_csv else _row_lookup(table)
    # CSV record numbers are file line numbers (line 1 is the header).
    parsed = parse_mapped(
        path, data, table, mapping, fmt=fmt, first_record=2 if is_csv else 1, raw=raw
    )
    parsed.params = {"mapping": _mapping_params(mapping)}
    return parsed


def _row_lookup(table: pl.DataFrame):
    def lookup(record_nos):
        return [str(table.row(no - 1, named=True)) for no in record_nos]

    return lookup


def _mapping_params(mapping: Mapping) -> dict[str, Any]:
    return {
        "columns": mapping.columns,
        "time_format": mapping.time_format,
        "epoch_unit": mapping.epoch_unit,
        "duration_unit": mapping.duration_unit,
        "defaults": mapping.defaults,
        "status": mapping.status_map,
    }


# SenseTime Helios (cluster_log.csv of each cluster): a header row; times as local
# date-times; duration in seconds; Slurm job states.
HELIOS_MAPPING = Mapping(
    columns={
        "job_id": "job_id",
        "user_name": "user",
        "vc": "vc",
        "num_gpus": "gpu_num",
        "num_cpus": "cpu_num",
        "status": "state",
        "submit_time": "submit_time",
        "start_time": "start_time",
        "end_time": "end_time",
        "duration": "duration",
    },
    time_format="%Y-%m-%d %H:%M:%S",
)


def parse_helios(path: str | Path) -> ParsedTrace:
    """Parse a Helios cluster_log.csv."""
    return parse_generic(path, HELIOS_MAPPING, fmt="helios")
