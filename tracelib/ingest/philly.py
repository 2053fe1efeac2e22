"""Microsoft Philly `cluster_job_log`: one JSON array of jobs.

Each element looks like

    {"status": "Pass", "vc": "11cb48", "jobid": "application_1506638472019_10238",
     "submitted_time": "2017-10-03 02:15:12", "user": "6214e9",
     "attempts": [{"start_time": "2017-10-03 02:17:13", "end_time": "2017-10-03 04:01:10",
                   "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}

Times are local date-times "%Y-%m-%d %H:%M:%S", or "None"/null when unknown (an attempt
still running has end_time "None"). A job is retried in place, so one job has one or more
attempts; the job's run time is the sum of its attempts, and its GPU demand the largest
allocation any attempt held.

Record numbers are 1-based positions in the array; the raw record of a job is the element
re-serialized as JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

import polars as pl

from tracelib.ingest.base import (
    Check,
    IngestError,
    ParsedTrace,
    empty_errors,
    first_problems,
    normalize_status,
)
from tracelib.ingest.generic import read_bytes
from tracelib.provenance import sha256_hex

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
# Philly's own status words; normalize_status knows most already, but listing them keeps the
# mapping visible next to the format it belongs to.
PHILLY_STATUS = {
    "Pass": "completed",
    "Killed": "killed",
    "Failed": "failed",
    "Running": "running",
    "Queued": "pending",
    "Waiting": "pending",
}
# Philly writes the string "None" (Python's repr leaking into the dump) for an unknown time.
_UNKNOWN_TIME = ("None", "")
# Which job field a top-level key feeds; used to name the field of a per-record error.
_FIELD_OF_KEY = {
    "jobid": "job_id",
    "user": "user_name",
    "vc": "vc",
    "status": "status",
    "submitted_time": "submit_time",
    "attempts": "num_gpus",
}
# A JSON \ufffd escape decodes to the same character as a replaced byte; both mean the text
# was already damaged before it reached us.
_ESCAPED_REPLACEMENT = re.compile(r"\\u[fF]{3}[dD]")
_MISSING = object()


def parse_philly(path: str | Path, *, data: bytes | None = None) -> ParsedTrace:
    """Parse a Philly `cluster_job_log` (JSON array of jobs) into typed job fields.

    Raises IngestError when the file is empty, is not JSON (or nested too deeply to read),
    is not an array or has no jobs. `data`: the file's bytes, if already read.
    Every other problem is confined to its record and reported in the errors frame.
    """
    path = Path(path)
    data = read_bytes(path) if data is None else data
    # Invalid UTF-8 is confined to the records that contain it, never fatal for the file.
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise IngestError(path, f"not valid JSON: {exc}") from None
    except RecursionError:
        raise IngestError(
            path, "not usable JSON: nested too deeply (arrays or objects within each other)"
        ) from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise IngestError(path, f"not usable JSON: {exc}") from None
    if not isinstance(doc, list):
        raise IngestError(path, f"expected a JSON array of jobs, found a JSON {_kind(doc)}")
    if not doc:
        raise IngestError(path, "the job array is empty")

    check_utf8 = "\ufffd" in text or _ESCAPED_REPLACEMENT.search(text) is not None
    jobs = _JobColumns()
    for record_no, element in enumerate(doc, start=1):
        try:
            jobs.add(record_no, element, check_utf8=check_utf8)
        except RecursionError:
            # Only a record nested nearly as deep as the JSON parser allows gets here.
            jobs.reject(record_no, "record is nested too deeply to read")

    frame, errors = jobs.to_frames()
    return ParsedTrace(
        path=path,
        format="philly",
        content_hash=sha256_hex(data),
        frame=frame,
        errors=errors,
        raw=lambda record_nos: [_raw_json(doc[no - 1]) for no in record_nos],
        params={"time_format": TIME_FORMAT},
    )


class _JobColumns:
    """Column lists built job by job, turned into frames once at the end.

    Times stay text here and are parsed column-wise by polars, which is much faster than
    strptime per value on the ~117k-job real log.
    """

    def __init__(self) -> None:
        self.job = {
            k: [] for k in ("record_no", "job_id", "user_name", "vc", "status", "submitted_time")
        }
        self.attempt = {k: [] for k in ("record_no", "attempt", "start", "end", "gpus")}
        # At most one (field, reason) per record: the first problem found.
        self.error = {k: [] for k in ("record_no", "field", "reason")}

    def add(self, record_no: int, element: Any, *, check_utf8: bool) -> None:
        problems: list[tuple[str, str]] = []
        if isinstance(element, dict):
            job = element
            if check_utf8:
                problems += _invalid_utf8(job)
        else:
            job = {}
            problems.append(("job_id", f"record is a JSON {_kind(element)}, not an object"))

        values = {"record_no": record_no}
        for key, fld in (("jobid", "job_id"), ("user", "user_name"), ("vc", "vc")):
            values[fld] = _text(job, key, fld, required=key == "jobid", problems=problems)
        values["status"] = _text(job, "status", "status", required=False, problems=problems)
        values["submitted_time"] = _time_text(
            job, "submitted_time", "submit_time", "submitted_time", True, problems
        )
        for key, value in values.items():
            self.job[key].append(value)

        attempts = job.get("attempts", _MISSING)
        if attempts is _MISSING:
            problems.append(("num_gpus", "attempts: missing (required)"))
            attempts = []
        elif not isinstance(attempts, list):
            problems.append(("num_gpus", f"attempts: expected an array, got {_kind(attempts)}"))
            attempts = []
        for index, attempt in enumerate(attempts):
            self._add_attempt(record_no, index, attempt, problems)

        if problems:
            fld, reason = problems[0]
            self.error["record_no"].append(record_no)
            self.error["field"].append(fld)
            self.error["reason"].append(reason)

    def reject(self, record_no: int, reason: str) -> None:
        """Drop whatever `add` had half-collected for `record_no` and keep it as a record
        with nothing but the error (so it is quarantined, not lost)."""
        for columns in (self.job, self.attempt, self.error):
            keep = [i for i, no in enumerate(columns["record_no"]) if no != record_no]
            for key in columns:
                columns[key] = [columns[key][i] for i in keep]
        for key in self.job:
            self.job[key].append(record_no if key == "record_no" else None)
        self.error["record_no"].append(record_no)
        self.error["field"].append("job_id")
        self.error["reason"].append(reason)

    def _add_attempt(
        self, record_no: int, index: int, attempt: Any, problems: list[tuple[str, str]]
    ) -> None:
        where = f"attempts[{index}]"
        if not isinstance(attempt, dict):
            problems.append(("num_gpus", f"{where}: expected an object, got {_kind(attempt)}"))
            return
        start = _time_text(
            attempt, "start_time", "start_time", f"{where}.start_time", False, problems
        )
        end = _time_text(attempt, "end_time", "end_time", f"{where}.end_time", False, problems)
        gpus = 0
        detail = attempt.get("detail", _MISSING)
        if detail is _MISSING:
            problems.append(("num_gpus", f"{where}.detail: missing (required)"))
        elif not isinstance(detail, list):
            problems.append(("num_gpus", f"{where}.detail: expected an array, got {_kind(detail)}"))
        else:
            for slot, host in enumerate(detail):
                here = f"{where}.detail[{slot}]"
                if not isinstance(host, dict):
                    problems.append(("num_gpus", f"{here}: expected an object, got {_kind(host)}"))
                    continue
                held = host.get("gpus", _MISSING)
                if held is _MISSING:
                    problems.append(("num_gpus", f"{here}.gpus: missing (required)"))
                elif not isinstance(held, list):
                    problems.append(
                        ("num_gpus", f"{here}.gpus: expected an array, got {_kind(held)}")
                    )
                else:
                    gpus += len(held)
        self.attempt["record_no"].append(record_no)
        self.attempt["attempt"].append(index)
        self.attempt["start"].append(start)
        self.attempt["end"].append(end)
        self.attempt["gpus"].append(gpus)

    def to_frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(typed job fields per record, one parse error per record at most)."""
        text = pl.Utf8
        jobs = pl.DataFrame(
            self.job,
            schema={
                "record_no": pl.Int64,
                "job_id": text,
                "user_name": text,
                "vc": text,
                "status": text,
                "submitted_time": text,
            },
        ).with_columns(_parse_time("submitted_time").alias("submit_time"))
        attempts = pl.DataFrame(
            self.attempt,
            schema={
                "record_no": pl.Int64,
                "attempt": pl.Int64,
                "start": text,
                "end": text,
                "gpus": pl.Int64,
            },
        ).with_columns(
            _parse_time("start").alias("start_time"), _parse_time("end").alias("end_time")
        )

        # Errors the column-wise parsing finds rank after the structural ones found above,
        # and within a record the first failing attempt wins.
        submit_problems = first_problems(
            jobs,
            [
                Check(
                    _unparsed("submitted_time", "submit_time"),
                    "submit_time",
                    lambda value: _cannot_parse("submitted_time", value),
                    (pl.col("submitted_time"),),
                )
            ],
        )
        attempts = attempts.with_row_index("_row")
        attempt_checks = [
            Check(
                _unparsed("start", "start_time"),
                "start_time",
                lambda i, value: _cannot_parse(f"attempts[{i}].start_time", value),
                (pl.col("attempt"), pl.col("start")),
            ),
            Check(
                _unparsed("end", "end_time"),
                "end_time",
                lambda i, value: _cannot_parse(f"attempts[{i}].end_time", value),
                (pl.col("attempt"), pl.col("end")),
            ),
            # A job-level end >= start can hide one attempt that ran backwards.
            Check(
                pl.col("end_time") < pl.col("start_time"),
                "duration_s",
                lambda i, end, start: f"attempts[{i}]: end_time {end} is before start_time {start}",
                (pl.col("attempt"), pl.col("end"), pl.col("start")),
            ),
        ]
        attempt_problems = (
            first_problems(
                attempts.with_columns(pl.col("_row").cast(pl.Int64)), attempt_checks, key="_row"
            )
            .join(attempts.select(pl.col("_row").cast(pl.Int64), "record_no"), on="_row")
            .sort("_row")
            .select("record_no", "field", "reason")
        )
        errors = pl.concat(
            [
                pl.DataFrame(self.error, schema=empty_errors().schema),
                submit_problems,
                attempt_problems,
            ]
        ).unique("record_no", keep="first", maintain_order=True)

        both_known = pl.col("start_time").is_not_null() & pl.col("end_time").is_not_null()
        per_job = attempts.group_by("record_no").agg(
            pl.col("start_time").first(),
            pl.col("end_time").last(),
            # Unknown if any attempt's span is unknown; normalize then falls back to
            # end_time - start_time of the whole job.
            pl.when(both_known.all())
            .then((pl.col("end_time") - pl.col("start_time")).dt.total_microseconds().sum() / 1e6)
            .alias("duration_s"),
            pl.col("gpus").max().alias("num_gpus"),
        )
        frame = jobs.join(per_job, on="record_no", how="left").select(
            "record_no",
            "job_id",
            "submit_time",
            "start_time",
            "end_time",
            "duration_s",
            # A job that never got an attempt held no GPUs.
            pl.col("num_gpus").fill_null(0).cast(pl.Float64),
            normalize_status(pl.col("status"), PHILLY_STATUS).alias("status"),
            "user_name",
            "vc",
        )
        return frame.sort("record_no"), errors.sort("record_no")


def _string(
    value: object,
    fld: str,
    where: str,
    *,
    absent: Collection[object],
    kind: str,
    required: bool,
    problems: list[tuple[str, str]],
) -> str | None:
    """`value` if it is text; otherwise None, noting the problem for field `fld` at `where`:
    a value that is None or in `absent` is one only when `required`, any other non-string
    always is (`kind` names the text expected)."""
    if value is None or value in absent:
        if required:
            problems.append((fld, f"{where}: missing (required)"))
        return None
    if not isinstance(value, str):
        problems.append((fld, f"{where}: expected {kind}, got {_kind(value)} {value!r}"))
        return None
    return value


def _text(
    obj: dict, key: str, fld: str, *, required: bool, problems: list[tuple[str, str]]
) -> str | None:
    return _string(
        obj.get(key), fld, key, absent=("",), kind="a string", required=required, problems=problems
    )


def _time_text(
    obj: dict, key: str, fld: str, where: str, required: bool, problems: list[tuple[str, str]]
) -> str | None:
    return _string(
        obj.get(key),
        fld,
        where,
        absent=_UNKNOWN_TIME,
        kind="a time string",
        required=required,
        problems=problems,
    )


def _parse_time(col: str) -> pl.Expr:
    return pl.col(col).str.strptime(pl.Datetime("us"), TIME_FORMAT, strict=False)


def _unparsed(raw: str, parsed: str) -> pl.Expr:
    return pl.col(raw).is_not_null() & pl.col(parsed).is_null()


def _cannot_parse(where: str, value: str | None) -> str:
    return f"{where}: cannot parse {value!r} as a time ({TIME_FORMAT})"


def _invalid_utf8(job: dict) -> list[tuple[str, str]]:
    """The first string (key or value) holding U+FFFD, as (job field, reason)."""
    found = _find_replacement(job, "")
    if found is None:
        return []
    top = found.split(".")[0].split("[")[0]
    fld = _FIELD_OF_KEY.get(top, top)
    if top == "attempts":
        for leaf in ("start_time", "end_time"):
            if found.endswith(f".{leaf}"):
                fld = leaf
    return [(fld, f"{found}: invalid UTF-8 bytes")]


def _find_replacement(value: Any, where: str) -> str | None:
    if isinstance(value, str):
        return where if "\ufffd" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{where}.{key}" if where else key
            if "\ufffd" in key:
                return here
            found = _find_replacement(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find_replacement(item, f"{where}[{index}]")
            if found is not None:
                return found
    return None


def _raw_json(element: Any) -> str:
    """A record as JSON text for the quarantine (a placeholder if it is too deep to print)."""
    try:
        return json.dumps(element, ensure_ascii=False)
    except (RecursionError, ValueError):
        return f"<a JSON {_kind(element)} nested too deeply to show>"


def _kind(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
