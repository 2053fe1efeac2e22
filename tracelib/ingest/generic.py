"""Any CSV or Parquet job log, read through a user-written mapping file (TOML).

Mapping file (every key optional except submit_time, and num_gpus unless defaulted):

    extends = "alibaba-gpu-2023"   # start from a shipped mapping (SHIPPED_MAPPINGS), then
                                   # override it key by key with the sections below

    [columns]                  # job field = column in the file
    job_id = "JobID"           # else "<file name>:<record number>" (stable per file)
    submit_time = "Submit"     # required
    start_time = "Start"
    end_time = "End"
    duration = "Elapsed"       # run time; else end_time - start_time
    num_gpus = "GPUs"          # required unless given in [defaults]
    gpu_share = "GPUMilli"     # share of each GPU a job uses; num_gpus becomes
                               # num_gpus x share (0.5 = half of one GPU)
    gpu_type = "GPUModel"      # GPU type the job needs ("V100", or "V100|T4": any of them)
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
    epoch_unit = "s"               # they are numbers: s, ms or us since 1970, or since
    base = 2023-01-01 00:00:00     # this date-time (offset timestamps; TOML date-time or
                                   # "YYYY-MM-DD HH:MM:SS")

    [duration]
    unit = "s"                     # s, ms, min or h

    [units]                        # how resource columns are written
    num_gpus = "whole"             # whole (as is), percent (100 = 1) or milli (1000 = 1)
    gpu_share = "milli"            # the same three
    num_cpus = "milli"             # the same three (milli-cores, PAI's percent of a core)
    mem_gb = "MiB"                 # bytes, KB, MB, GB, TB, KiB, MiB, GiB, TiB (jobs hold GB)

    [defaults]                     # value for a field the file lacks or leaves empty
    num_gpus = 1

    [status]                       # extra raw status -> completed|failed|killed|running|pending
    "EXIT_OK" = "completed"

    [bounds]                       # what a value may be (defaults: `base.Bounds`,
    earliest = 2000-01-01          # docs/traces.md); times from earliest, before latest,
    latest = 2100-01-01            # and a ceiling per quantity (duration in seconds)
    num_gpus = 100000
    duration = 31536000

Without a status column or a status default, every job with a run time is taken as
completed and the others as unknown (derive keeps completed, failed and killed jobs), and
the ingest says so (`ingest_notes`).
"""

from __future__ import annotations

import contextlib
import io
import math
import tomllib
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import polars as pl

from tracelib.contracts import JOB_COLUMNS, STATUSES
from tracelib.ingest.base import (
    Bounds,
    Check,
    IngestError,
    ParsedTrace,
    first_problems,
    normalize_status,
)
from tracelib.ingest.csvrecords import is_utf8, read_csv_records
from tracelib.ingest.files import is_linked, read_regular
from tracelib.provenance import sha256_hex

FIELDS = (
    "job_id",
    "submit_time",
    "start_time",
    "end_time",
    "duration",
    "num_gpus",
    "gpu_share",
    "gpu_type",
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
_NUMBER_FIELDS = ("num_gpus", "gpu_share", "num_cpus", "mem_gb", "epochs", "duration")
_INT_FIELDS = ("num_workers", "num_ps")
_TEXT_FIELDS = ("job_id", "user_name", "vc", "model", "gpu_type")
_DURATION_UNITS = {"s": 1.0, "ms": 1e-3, "min": 60.0, "h": 3600.0}
_EPOCH_UNITS = ("s", "ms", "us")
# Resource units: counts (GPUs, GPU shares, cores) and sizes (memory, held in GB = 1e9 B).
_COUNT_UNITS = {"whole": 1.0, "percent": 1e-2, "milli": 1e-3}
_MEM_UNITS = {
    "bytes": 1e-9,
    "KB": 1e-6,
    "MB": 1e-3,
    "GB": 1.0,
    "TB": 1e3,
    "KiB": 2**10 / 1e9,
    "MiB": 2**20 / 1e9,
    "GiB": 2**30 / 1e9,
    "TiB": 2**40 / 1e9,
}
_UNIT_FIELDS = {
    "num_gpus": _COUNT_UNITS,
    "gpu_share": _COUNT_UNITS,
    "num_cpus": _COUNT_UNITS,
    "mem_gb": _MEM_UNITS,
}
# Words that exports (pandas above all) write for "no GPU type": not a type to match.
_NO_GPU_TYPE = ("nan", "none", "null", "na", "n/a", "-")
_MICROSECOND = timedelta(microseconds=1)


_DEFAULTABLE = tuple(f for f in FIELDS if f not in ("job_id", *_TIME_FIELDS))
"""Every field but the job's id and times: those a mapping's [defaults] may give."""
_SECTIONS = {
    "columns": 'field = "column name" pairs',
    "time": 'format = "%Y-%m-%d %H:%M:%S" or epoch_unit = "s" (and base = a date-time)',
    "duration": 'unit = "s"',
    "units": 'field = "unit" pairs, e.g. num_cpus = "milli"',
    "defaults": "field = value pairs",
    "status": '"raw status" = "completed" pairs',
    "bounds": "field = ceiling pairs, earliest/latest = a date (docs/traces.md)",
}
_BOUND_KEYS = (
    "earliest",
    "latest",
    "num_gpus",
    "num_cpus",
    "mem_gb",
    "num_workers",
    "num_ps",
    "epochs",
    "duration",
)


@dataclass(frozen=True)
class Mapping:
    """How the columns of one job-log layout map onto `jobs` fields.

    Everything in it comes from a user's file, so every value is checked for its type and
    range here; a bad one raises ValueError naming the section and key.
    """

    columns: dict[str, str]
    time_format: str | None = None
    epoch_unit: str | None = None
    duration_unit: str = "s"
    defaults: dict[str, Any] = field(default_factory=dict)
    status_map: dict[str, str] = field(default_factory=dict)
    time_base: datetime | None = None
    """Epoch-unit times count from this date-time instead of 1970 (offset timestamps)."""
    units: dict[str, str] = field(default_factory=dict)
    """Resource field -> unit its column is written in (`_UNIT_FIELDS`)."""
    bounds: Bounds = field(default_factory=Bounds)
    """What each field may hold ([bounds]; `base.Bounds` has the defaults and reasons)."""

    def __post_init__(self) -> None:
        _require(
            isinstance(self.columns, dict), "[columns] must be a table of " + _SECTIONS["columns"]
        )
        unknown = sorted(set(self.columns) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in [columns]; known: {list(FIELDS)}")
        for fld, col in self.columns.items():
            _require(
                isinstance(col, str) and col != "",
                f"[columns] {fld} must be a column name (a non-empty string), got {_kind(col)}",
            )
        if "submit_time" not in self.columns:
            raise ValueError("[columns] must map the required field 'submit_time'")
        _require(isinstance(self.defaults, dict), "[defaults] must be a table of field = value")
        unknown = sorted(set(self.defaults) - set(_DEFAULTABLE))
        if unknown:
            raise ValueError(
                f"[defaults] cannot give {unknown}; fields with a default: {list(_DEFAULTABLE)}"
            )
        for fld, value in self.defaults.items():
            _check_default(fld, value)
        if "num_gpus" not in self.columns and "num_gpus" not in self.defaults:
            raise ValueError("map num_gpus in [columns] or give it a value in [defaults]")
        for key, value in (("format", self.time_format), ("epoch_unit", self.epoch_unit)):
            _require(
                value is None or isinstance(value, str),
                f"[time] {key} must be a string, got {_kind(value)}",
            )
        if (self.time_format is None) == (self.epoch_unit is None):
            raise ValueError("[time] needs exactly one of format or epoch_unit")
        if self.epoch_unit is not None and self.epoch_unit not in _EPOCH_UNITS:
            raise ValueError(f"[time] epoch_unit must be one of {_EPOCH_UNITS}")
        if self.time_format is not None:
            _check_time_format(self.time_format)
        if self.time_base is not None and self.epoch_unit is None:
            raise ValueError("[time] base needs epoch_unit (offsets from the base), not format")
        _require(isinstance(self.units, dict), "[units] must be a table of " + _SECTIONS["units"])
        for fld, unit in self.units.items():
            if fld not in _UNIT_FIELDS:
                raise ValueError(
                    f"[units] cannot convert {fld!r}; fields with units: {list(_UNIT_FIELDS)}"
                )
            _require(
                isinstance(unit, str) and unit in _UNIT_FIELDS[fld],
                f"[units] {fld} must be one of {list(_UNIT_FIELDS[fld])}, got {_kind(unit)}",
            )
        _require(
            isinstance(self.duration_unit, str) and self.duration_unit in _DURATION_UNITS,
            f"[duration] unit must be one of {sorted(_DURATION_UNITS)}",
        )
        _require(
            isinstance(self.status_map, dict), "[status] must be a table of " + _SECTIONS["status"]
        )
        bad = {k: v for k, v in self.status_map.items() if v not in STATUSES}
        if bad:
            raise ValueError(f"[status] values must be among {STATUSES}: {bad}")

    @classmethod
    def from_toml(cls, path: str | Path) -> Mapping:
        """Read and check a mapping file; IngestError naming the file and what is wrong."""
        path = Path(path)
        # A mapping is read like a trace (a regular file under the size cap), so a pipe or a
        # device given as the mapping is refused instead of blocking or filling memory.
        data = read_regular(path, "mapping file")
        try:
            doc = tomllib.loads(data.decode())
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise IngestError(path, f"cannot read mapping file: {exc}") from None
        try:
            return cls.from_dict(doc)
        except ValueError as exc:
            raise IngestError(path, f"invalid mapping: {exc}") from None

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Mapping:
        """A mapping from a parsed TOML document; ValueError naming the section and key."""
        extends = doc.get("extends")
        if extends is not None:
            if not isinstance(extends, str) or extends not in SHIPPED_MAPPINGS:
                raise ValueError(
                    f"extends must name a shipped mapping ({', '.join(SHIPPED_MAPPINGS)}), "
                    f"got {_kind(extends)}"
                )
            doc = _merged(_shipped_doc(extends), {k: v for k, v in doc.items() if k != "extends"})
        unknown = sorted(set(doc) - set(_SECTIONS) - {"extends"})
        if unknown:
            raise ValueError(
                f"unknown key(s) {unknown} at the top level; the sections are "
                f"{', '.join(f'[{k}]' for k in _SECTIONS)}"
            )
        for section, what in _SECTIONS.items():
            if section in doc and not isinstance(doc[section], dict):
                raise ValueError(
                    f"[{section}] must be a table of {what}, got {_kind(doc[section])}"
                )
        time = doc.get("time", {})
        unknown = sorted(set(time) - {"format", "epoch_unit", "base"})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} in [time]; known: format, epoch_unit, base")
        duration = doc.get("duration", {})
        unknown = sorted(set(duration) - {"unit"})
        if unknown:
            raise ValueError(f"unknown key(s) {unknown} in [duration]; known: unit")
        return cls(
            columns=dict(doc.get("columns", {})),
            time_format=time.get("format"),
            epoch_unit=time.get("epoch_unit"),
            duration_unit=duration.get("unit", "s"),
            defaults=dict(doc.get("defaults", {})),
            status_map=dict(doc.get("status", {})),
            time_base=_time_base(time.get("base")),
            units=dict(doc.get("units", {})),
            bounds=_bounds(doc.get("bounds", {})),
        )


SHIPPED_MAPPINGS = ("helios", "alibaba-gpu-2023")
"""Mappings shipped in tracelib/ingest/mappings/<name>.toml: pass the name as the mapping
(`--mapping alibaba-gpu-2023`) or start a mapping file from one (`extends = "..."`)."""


def _shipped_doc(name: str) -> dict[str, Any]:
    text = resources.files("tracelib.ingest").joinpath("mappings", f"{name}.toml").read_text()
    return tomllib.loads(text)


def shipped_mapping(name: str) -> Mapping:
    """One of `SHIPPED_MAPPINGS` by name."""
    if name not in SHIPPED_MAPPINGS:
        raise ValueError(f"no shipped mapping {name!r}; shipped: {', '.join(SHIPPED_MAPPINGS)}")
    return Mapping.from_dict(_shipped_doc(name))


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`base` with `override`'s sections merged key by key (a table replaces nothing else)."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key].update(value)
        else:
            out[key] = value
    return out


def _time_base(value: Any) -> datetime | None:
    """[time] base as a naive datetime: a TOML date-time or date, or ISO text."""
    if value is None:
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not ISO: refused below with the value shown
            value = datetime.fromisoformat(value.strip())
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise ValueError("[time] base must be a local date-time (no time zone)")
        return value
    if isinstance(value, date):
        return datetime.combine(value, time())
    raise ValueError(
        f"[time] base must be a date-time such as 2023-01-01 00:00:00, got {_kind(value)}"
    )


def _bounds(section: dict[str, Any]) -> Bounds:
    """[bounds]: `earliest`/`latest` dates or date-times, a positive finite ceiling per
    quantity (`duration` in seconds); the rest keep `Bounds`' defaults."""
    unknown = sorted(set(section) - set(_BOUND_KEYS))
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in [bounds]; known: {', '.join(_BOUND_KEYS)}")
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key in ("earliest", "latest"):
            if isinstance(value, str) or not isinstance(value, date):
                raise ValueError(
                    f"[bounds] {key} must be a TOML date or date-time such as 2000-01-01, "
                    f"got {_kind(value)}"
                )
            moment = value if isinstance(value, datetime) else datetime.combine(value, time())
            _require(moment.tzinfo is None, f"[bounds] {key} must be local (no time zone)")
            values[key] = moment
            continue
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        _require(is_number, f"[bounds] {key} must be a number, got {_kind(value)}")
        _require(
            math.isfinite(value) and value > 0,
            f"[bounds] {key} must be a positive finite number, got {value!r}",
        )
        if key in _INT_FIELDS:
            _require(
                float(value).is_integer() and value < 2**31,
                f"[bounds] {key} must be a whole number below 2**31, got {value!r}",
            )
            values[key] = int(value)
        else:
            values["duration_s" if key == "duration" else key] = float(value)
    bounds = Bounds(**values)
    _require(
        bounds.earliest < bounds.latest,
        f"[bounds] earliest {bounds.earliest} must be before latest {bounds.latest}",
    )
    return bounds


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _kind(value: Any) -> str:
    """A TOML value's kind and (short) value, for messages."""
    kinds = {bool: "a boolean", int: "an integer", float: "a float", str: "a string"}
    for kind, name in kinds.items():
        if type(value) is kind:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
            return f"{name} {shown}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if value is None:
        return "nothing"
    return f"a {type(value).__name__}"


def _check_default(fld: str, value: Any) -> None:
    """A [defaults] value must have its field's type and be in range."""
    if fld in ("status", *_TEXT_FIELDS):
        _require(isinstance(value, str), f"[defaults] {fld} must be a string, got {_kind(value)}")
        return
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    _require(is_number, f"[defaults] {fld} must be a number, got {_kind(value)}")
    _require(math.isfinite(value), f"[defaults] {fld} must be finite, got {value!r}")
    _require(value >= 0, f"[defaults] {fld} must not be negative, got {value!r}")
    if fld in _INT_FIELDS:
        _require(
            float(value).is_integer() and value < 2**31,
            f"[defaults] {fld} must be a whole number, got {value!r}",
        )


def _check_time_format(fmt: str) -> None:
    """Refuse a strptime format polars cannot use (it would fail on every value)."""
    if "%" not in fmt:
        raise ValueError(f"[time] format {fmt!r} has no % directive; e.g. '%Y-%m-%d %H:%M:%S'")
    try:
        pl.Series(["2020-01-02 03:04:05"]).str.strptime(pl.Datetime("us"), fmt, strict=False)
    except Exception as exc:  # polars raises several error types for a bad format
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"[time] format {fmt!r} is not a usable strptime format: {first}"
        ) from None


def read_bytes(path: Path) -> bytes:
    """The file's bytes; IngestError if it is not a regular file within the size cap
    (`tracelib.ingest.files`), cannot be read, or holds nothing but blanks."""
    data = read_regular(path, "file")
    if not data or data.isspace():
        raise IngestError(path, "file is empty")
    return data


def is_parquet(path: Path) -> bool:
    """Parquet by extension; everything else is read as CSV."""
    return path.suffix.lower() in (".parquet", ".pq")


def read_parquet(path: Path, data: bytes) -> pl.DataFrame:
    """A Parquet file as a frame with `record_no` (1-based row number) first."""
    try:
        frame = pl.read_parquet(io.BytesIO(data))
    except Exception as exc:  # polars raises several error types for unreadable input
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise IngestError(path, f"cannot parse as a Parquet table: {first}") from None
    if frame.height == 0:
        raise IngestError(path, "file has no data rows")
    if "record_no" in frame.columns:
        frame = frame.rename({"record_no": "record_no_"})
    return frame.with_row_index("record_no", offset=1).with_columns(
        pl.col("record_no").cast(pl.Int64)
    )


def parse_mapped(
    path: Path,
    data: bytes,
    table: pl.DataFrame,
    mapping: Mapping,
    *,
    fmt: str,
    raw,
    record_problems: pl.DataFrame | None = None,
    params: dict[str, Any] | None = None,
    blank_free: bool = False,
) -> ParsedTrace:
    """Apply a mapping to a table that has `record_no` first: typed job fields plus one
    parse error per bad record.

    `record_problems` (record_no, column, reason) are records that could not even be split
    into fields (ragged CSV rows); they are reported under the job field of their column.
    `blank_free`: no text value starts or ends with a blank (`CsvRecords.blank_free`), so
    text is not trimmed (empty text is still missing).
    Raises IngestError when a mapped column is missing or has a type no field can hold, or
    when no value at all of a time column matches the mapping's time format.
    """
    field_of = {col: fld for fld, col in mapping.columns.items()}
    missing = [col for col in mapping.columns.values() if col not in table.columns]
    if missing:
        col = missing[0]
        raise IngestError(
            path, f"missing required column {col!r} (mapped to field {field_of[col]!r})", col
        )
    for fld, col in mapping.columns.items():
        if f"{col}_duplicated_0" in table.columns:
            # Two columns of the name: which one the field means cannot be known.
            raise IngestError(
                path,
                f"column {col!r} (mapped to field {fld!r}) appears more than once in the "
                "header: rename one of them",
                col,
            )
        dtype = table.schema[col]
        if dtype.is_nested() or dtype in (pl.Binary, pl.Object):
            raise IngestError(
                path,
                f"column {col!r} (field {fld!r}) holds {dtype} values, not text or numbers",
                col,
            )
    # Checking for replacement characters only matters if the bytes were not valid UTF-8.
    check_encoding = not is_utf8(data)
    targets = {fld: "duration_s" if fld == "duration" else fld for fld in mapping.columns}
    # Trim the raw text once, parse it once, then check column-wise which records failed.
    trimmed = table.select(
        "record_no",
        *[
            _trimmed(col, table.schema[col], strip=not blank_free).alias(f"_raw_{fld}")
            for fld, col in mapping.columns.items()
        ],
    )
    kinds = {}
    conversions = []
    for fld, col in mapping.columns.items():
        converted, what = _convert(fld, pl.col(f"_raw_{fld}"), table.schema[col], mapping)
        conversions.append(converted.alias(targets[fld]))
        kinds[fld] = what
    parsed_frame = trimmed.with_columns(conversions)
    broken = (
        record_problems.get_column("record_no")
        if record_problems is not None and record_problems.height
        else pl.Series("record_no", [], dtype=pl.Int64)
    )
    _refuse_unmatched_times(path, parsed_frame, mapping, kinds, broken)

    checks: list[Check] = []
    for fld, col in mapping.columns.items():
        target, raw_col = targets[fld], pl.col(f"_raw_{fld}")
        where = f"field {target!r} (column {col!r})"
        if check_encoding and table.schema[col] == pl.Utf8:
            checks.append(
                Check(
                    raw_col.str.contains("\ufffd", literal=True),
                    target,
                    f"{where}: invalid UTF-8 bytes",
                )
            )
        if kinds[fld] is not None:
            checks.append(
                Check(
                    raw_col.is_not_null() & pl.col(target).is_null(),
                    target,
                    lambda value, where=where, what=kinds[fld]: (
                        f"{where}: cannot parse {value!r} as {what}"
                    ),
                    (raw_col,),
                )
            )
    errors = first_problems(parsed_frame, checks)
    if broken.len():
        # A record that could not be split into fields is reported as such, first.
        split = record_problems.select(
            "record_no",
            pl.col("column")
            .replace_strict(
                {col: targets[fld] for fld, col in mapping.columns.items()},
                default=pl.col("column"),
                return_dtype=pl.Utf8,
            )
            .fill_null("record")
            .alias("field"),
            "reason",
        )
        errors = pl.concat(
            [split, errors.filter(~pl.col("record_no").is_in(broken.implode()))]
        ).sort("record_no")

    frame = parsed_frame.select("record_no", *targets.values())
    if "job_id" not in mapping.columns:
        # No id column: the file and the record number name a job, stably across ingests.
        frame = frame.with_columns(
            (pl.lit(f"{path.name}:") + pl.col("record_no").cast(pl.Utf8)).alias("job_id")
        )
    defaults = {("duration_s" if k == "duration" else k): v for k, v in mapping.defaults.items()}
    for fld, value in defaults.items():
        dtype = pl.Float64 if fld == "gpu_share" else JOB_COLUMNS[fld]
        if fld == "status":
            value = normalize_status(pl.lit(str(value)), mapping.status_map)
        else:
            value = pl.lit(value).cast(dtype)
        if fld in frame.columns:
            frame = frame.with_columns(pl.col(fld).fill_null(value))
        else:
            frame = frame.with_columns(value.alias(fld))
    if "gpu_share" in frame.columns:
        frame, errors = _apply_gpu_share(frame, errors, mapping)
    notes = []
    if "status" not in frame.columns:
        # No status at all: a job that ran (it has a run time) is replayable, which is what
        # derive needs; one without a run time stays unknown. Said, so it is no surprise.
        ran = pl.lit(False)
        for col in ("duration_s", "end_time"):
            if col in frame.columns:
                ran = ran | pl.col(col).is_not_null()
        frame = frame.with_columns(
            pl.when(ran).then(pl.lit("completed")).otherwise(pl.lit("unknown")).alias("status")
        )
        notes.append(NO_STATUS_NOTE)
    return ParsedTrace(
        path=path,
        format=fmt,
        content_hash=sha256_hex(data),
        frame=frame,
        errors=errors,
        raw=raw,
        params=params or {},
        notes=notes,
    )


NO_STATUS_NOTE = (
    "no status column: jobs with a run time are taken as completed, the others as "
    "unknown (map a status column or set [defaults] status to change this)"
)


def _apply_gpu_share(
    frame: pl.DataFrame, errors: pl.DataFrame, mapping: Mapping
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """num_gpus times the share of each GPU (Alibaba's gpu_milli): 1 GPU at 0.46 is 0.46 of
    one GPU. A share outside [0, 1] is not a share: that record is quarantined."""
    where = "field 'gpu_share'" + (
        f" (column {mapping.columns['gpu_share']!r})" if "gpu_share" in mapping.columns else ""
    )
    bad = first_problems(
        frame.filter(~pl.col("record_no").is_in(errors.get_column("record_no").implode())),
        [
            Check(
                (pl.col("gpu_share") < 0) | (pl.col("gpu_share") > 1 + 1e-9),
                "gpu_share",
                lambda v: f"{where}: share {v} of a GPU is not in [0, 1]",
                (pl.col("gpu_share"),),
            )
        ],
    )
    if bad.height:
        errors = pl.concat([errors, bad]).sort("record_no")
    share = pl.col("gpu_share").clip(0.0, 1.0)
    return (
        frame.with_columns(
            pl.when(share.is_not_null() & pl.col("num_gpus").is_not_null())
            .then(pl.col("num_gpus") * share)
            .otherwise(pl.col("num_gpus"))
            .alias("num_gpus")
        ).drop("gpu_share"),
        errors,
    )


def _refuse_unmatched_times(
    path: Path, parsed: pl.DataFrame, mapping: Mapping, kinds: dict, broken: pl.Series
) -> None:
    """A time column none of whose values parse is a wrong mapping, not bad records:
    fail naming the column and an example value instead of quarantining every record."""
    usable = parsed
    if broken.len():
        usable = parsed.filter(~pl.col("record_no").is_in(broken.implode()))
    for fld in _TIME_FIELDS:
        if fld not in mapping.columns or kinds[fld] is None:
            continue
        raw, times = usable.get_column(f"_raw_{fld}"), usable.get_column(fld)
        if raw.null_count() < raw.len() and times.null_count() == times.len():
            col = mapping.columns[fld]
            # A value is quoted only from a file named directly: a link may lead anywhere
            # (/etc/passwd), and an error must not be a way to read another file.
            shown = ""
            if not is_linked(path):
                example = str(raw.drop_nulls()[0])
                example = example if len(example) <= 40 else example[:37] + "..."
                shown = f", e.g. {example!r}"
            raise IngestError(
                path,
                f"no value of column {col!r} (field {fld!r}) parses as {kinds[fld]}"
                f"{shown}: check [time] in the mapping",
                col,
            )


def _trimmed(col: str, dtype: pl.DataType, strip: bool = True) -> pl.Expr:
    """Text with surrounding blanks removed (unless `strip` is False: the caller knows
    there are none) and empty strings as missing; other types as is."""
    if dtype != pl.Utf8:
        return pl.col(col)
    text = pl.col(col).str.strip_chars() if strip else pl.col(col)
    return pl.when(text == "").then(None).otherwise(text)


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
        # Beyond +-2**62 us (year 146,000) the integer cast would overflow: not a time.
        micros = number * scale
        if mapping.time_base is not None:
            # Offset timestamps (Alibaba's are seconds from the trace's start) from the base.
            base = mapping.time_base - datetime(1970, 1, 1)
            micros = micros + float(base // _MICROSECOND)
        micros = pl.when(micros.abs() < 2.0**62).then(micros)
        return (
            micros.cast(pl.Int64, strict=False).cast(pl.Datetime("us")),
            f"epoch {mapping.epoch_unit}",
        )
    if fld in _NUMBER_FIELDS:
        number = col.cast(pl.Float64, strict=False)
        number = pl.when(number.is_finite()).then(number)
        if fld == "duration":
            number = number * _DURATION_UNITS[mapping.duration_unit]
        elif fld in mapping.units:
            number = number * _UNIT_FIELDS[fld][mapping.units[fld]]
        return number, "a number"
    if fld in _INT_FIELDS:
        number = col.cast(pl.Float64, strict=False)
        whole = pl.when(
            number.is_finite() & (number == number.round(0)) & (number.abs() < 2.0**31)
        ).then(number)
        return whole.cast(pl.Int32, strict=False), "a whole number"
    if fld == "status":
        return normalize_status(col, mapping.status_map), None
    if fld == "gpu_type":
        text = col.cast(pl.Utf8)
        return pl.when(text.str.to_lowercase().is_in(list(_NO_GPU_TYPE))).then(None).otherwise(
            text
        ), None
    if fld in _TEXT_FIELDS:
        return col.cast(pl.Utf8), None
    raise AssertionError(fld)


def ingest_params(mapping: Mapping) -> dict[str, Any]:
    """What, besides the bytes, decides the jobs a mapped file yields: part of the identity
    of an ingest, so a corrected mapping re-ingests an unchanged file."""
    return {"mapping": _mapping_params(mapping)}


def parse_generic(
    path: str | Path, mapping: Mapping, *, fmt: str = "generic", data: bytes | None = None
) -> ParsedTrace:
    """Parse a CSV or Parquet job log with a mapping (`data`: its bytes, if already read)."""
    path = Path(path)
    data = read_bytes(path) if data is None else data
    if is_parquet(path):
        table = read_parquet(path, data)
        raw, problems, blank_free = _row_lookup(table), None, False
    else:
        records = read_csv_records(path, data)
        table, raw, problems = records.table, records.raw, records.problems
        blank_free = records.blank_free
    return parse_mapped(
        path,
        data,
        table,
        mapping,
        fmt=fmt,
        raw=raw,
        record_problems=problems,
        params=ingest_params(mapping),
        blank_free=blank_free,
    )


def _row_lookup(table: pl.DataFrame):
    """Parquet record number -> the row as text (the file has no lines to quote)."""

    def lookup(record_nos):
        return [
            str({k: v for k, v in table.row(no - 1, named=True).items() if k != "record_no"})
            for no in record_nos
        ]

    return lookup


def _mapping_params(mapping: Mapping) -> dict[str, Any]:
    params: dict[str, Any] = {
        "columns": mapping.columns,
        "time_format": mapping.time_format,
        "epoch_unit": mapping.epoch_unit,
        "duration_unit": mapping.duration_unit,
        "defaults": mapping.defaults,
        "status": mapping.status_map,
    }
    # Keys added later appear only when used, so a mapping without them keeps the identity
    # it had (an unchanged file is not re-ingested after an upgrade).
    if mapping.time_base is not None:
        params["time_base"] = mapping.time_base.isoformat(sep=" ")
    if mapping.units:
        params["units"] = mapping.units
    if mapping.bounds.params():
        params["bounds"] = mapping.bounds.params()
    return params


# SenseTime Helios (cluster_log.csv of each cluster): shipped as mappings/helios.toml.
HELIOS_MAPPING = shipped_mapping("helios")


def parse_helios(path: str | Path, *, data: bytes | None = None) -> ParsedTrace:
    """Parse a Helios cluster_log.csv."""
    return parse_generic(path, HELIOS_MAPPING, fmt="helios", data=data)
