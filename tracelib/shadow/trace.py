"""One cluster's closed day of the shadow spool as a trace: its observed jobs (`jobs` rows),
the records that cannot become jobs (`quarantine` rows, each with its reason), and the
decisions the shadowed policy would have made beside what the real scheduler did
(`shadow_decisions` rows). Pure: reads a spool file, touches no warehouse.

The trace's source id is `shadow:<cluster slug>:<YYYY-MM-DD>` (`shadow_source_id`): one
source per cluster and UTC day of receipt, so two clusters spooling into one directory
stay two traces, and a day's source never changes once the day is closed.

A job is folded from its observations (the collectors report a job's `submitted` on every
run while the scheduler lists it, so repeats are expected): submitted at its earliest
`submitted`, with that observation's GPUs, user, GPU type and model; started at its
earliest `started`, on that observation's servers; ended by its first `finished`
(status completed), `failed` (failed), `preempted` or `cancelled` (killed) at or after the
start (a job cancelled while pending ends without a start). A job
with no end is running (started) or pending. A job whose day holds no `submitted` (it was
submitted before the spool began, or its submission was lost) cannot be sized: it is
quarantined, as is a spool line that is torn, corrupt or not a valid snapshot, decision or
observation. Quarantine rows are numbered by spool line: a job's is the line of its first
observation.

A `shadow_decisions` row pairs one decision with one job pending in its snapshot: whether
the policy would have started it (with how many GPUs, on which servers) and whether the
real scheduler started it "at that snapshot", meaning at or after the snapshot's time and
before the next decision's snapshot of the same cluster (the day's last decision: within
the day's median gap between snapshots, `DEFAULT_WINDOW_S` when it has one decision).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import ValidationError

from tracelib.contracts import JOB_COLUMNS
from tracelib.ingest.base import ParsedTrace, empty_errors, normalize, printable
from tracelib.shadow.schemas import Decision, Observation, Snapshot
from tracelib.shadow.spool import SpoolRecord, read_spool_file

FORMAT = "shadow"
DEFAULT_WINDOW_S = 300.0
"""How long after a lone decision's snapshot a real start counts as "at that snapshot"."""
END_STATUS = {
    "finished": "completed",
    "failed": "failed",
    "preempted": "killed",
    "cancelled": "killed",
}
"""A job's status from the observation that ended it (cancelled is killed, as a trace's
`CANCELLED` is at ingest)."""
RAW_LIMIT = 2000
"""Characters of a quarantined line kept in `raw_record`."""

DECISION_COLUMNS: dict[str, pl.DataType] = {
    "source_id": pl.Utf8,
    "decision_id": pl.Utf8,
    "job_id": pl.Utf8,
    "cluster": pl.Utf8,
    "snapshot_time": pl.Datetime("us"),
    "policy": pl.Utf8,
    "policy_id": pl.Utf8,
    "latency_ms": pl.Float64,
    "requested_gpus": pl.Float64,
    "policy_start": pl.Boolean,
    "policy_gpus": pl.Float64,
    "policy_servers": pl.Utf8,
    "real_started": pl.Boolean,
    "real_start_time": pl.Datetime("us"),
    "real_gpus": pl.Float64,
    "real_servers": pl.Utf8,
    "same_action": pl.Boolean,
    "same_servers": pl.Boolean,
}
"""The `shadow_decisions` columns (contract: pipelines/shadow_contracts.py)."""


def shadow_source_id(slug: str, day: date) -> str:
    """`shadow:<cluster slug>:<YYYY-MM-DD>`."""
    return f"shadow:{slug}:{day.isoformat()}"


@dataclass
class ShadowDay:
    """One spool file read as a trace."""

    source_id: str
    cluster: str
    """The cluster's slug (the spool directory)."""
    day: date
    path: Path
    content_hash: str
    jobs: pl.DataFrame
    quarantine: pl.DataFrame
    decisions: pl.DataFrame
    policies: tuple[str, ...]
    """The policies whose decisions the day holds, most decisions first."""
    servers: dict[str, tuple[float, str | None]]
    """Server -> (GPUs, GPU type) as the day's newest snapshot saw it: the cluster a
    counterfactual replay runs on."""


def _naive(t: datetime) -> datetime:
    """UTC wall time without a zone: how the warehouse stores times."""
    return t.astimezone(UTC).replace(tzinfo=None)


def _raw(lines: list[bytes], line: int) -> str:
    text = lines[line - 1] if 0 < line <= len(lines) else b""
    return printable(text.decode("utf-8", errors="backslashreplace"), RAW_LIMIT)


def _reason(exc: ValidationError, prefix: str) -> tuple[str, str]:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "payload"
    return f"{prefix}.{loc}", f"{prefix}.{loc}: {first['msg']}"


def load_shadow_day(path: str | Path, day: date, slug: str | None = None) -> ShadowDay:
    """Read one spool file (`<slug>/<day>.jsonl`) as a trace (see the module docstring)."""
    path = Path(path)
    slug = slug or path.parent.name
    data = path.read_bytes()
    lines = data.split(b"\n")
    source_id = shadow_source_id(slug, day)
    records, torn = read_spool_file(path)
    problems: dict[int, tuple[str, list[str]]] = {}

    def quarantine(line: int, field: str, reason: str) -> None:
        if line in problems:
            problems[line][1].append(reason)
        else:
            problems[line] = (field, [reason])

    for bad in torn:
        quarantine(bad.line, "record", f"spool line {bad.line}: {bad.reason}")
    numbered = _line_numbers(lines, records)
    observations: list[tuple[int, Observation]] = []
    decisions: list[tuple[int, Snapshot, Decision]] = []
    for record, line in zip(records, numbered, strict=True):
        if record.kind == "observation":
            payload = record.payload
            items = payload.get("observations") if "observations" in payload else [payload]
            if not isinstance(items, list):
                quarantine(line, "observations", "observations: not a list")
                continue
            for k, item in enumerate(items):
                try:
                    observations.append((line, Observation.model_validate(item)))
                except ValidationError as exc:
                    quarantine(line, *_reason(exc, f"observations.{k}"))
        elif record.kind == "decision":
            try:
                snapshot = Snapshot.model_validate(record.payload.get("snapshot"))
                decision = Decision.model_validate(record.payload.get("decision"))
            except ValidationError as exc:
                quarantine(line, *_reason(exc, "payload"))
                continue
            decisions.append((line, snapshot, decision))
    jobs = _fold(observations, quarantine)
    parsed = _parsed(path, jobs, lines)
    accepted, rejected = normalize(parsed, source_id)
    for row in rejected.iter_rows(named=True):
        quarantine(row["record_no"], row["field"], row["reason"])
    quarantined = pl.DataFrame(
        {
            "source_id": [source_id] * len(problems),
            "record_no": sorted(problems),
            "field": [problems[k][0] for k in sorted(problems)],
            "reason": ["; ".join(problems[k][1]) for k in sorted(problems)],
            "raw_record": [_raw(lines, k) for k in sorted(problems)],
        },
        schema={
            "source_id": pl.Utf8,
            "record_no": pl.Int64,
            "field": pl.Utf8,
            "reason": pl.Utf8,
            "raw_record": pl.Utf8,
        },
    )
    decision_rows = _decision_rows(source_id, decisions, jobs)
    counts: dict[str, int] = {}
    for _, _, decision in decisions:
        counts[decision.policy] = counts.get(decision.policy, 0) + 1
    newest = max(decisions, key=lambda d: d[1].time)[1] if decisions else None
    return ShadowDay(
        source_id=source_id,
        cluster=slug,
        day=day,
        path=path,
        content_hash=hashlib.sha256(data).hexdigest(),
        jobs=accepted,
        quarantine=quarantined,
        decisions=decision_rows,
        policies=tuple(sorted(counts, key=lambda p: (-counts[p], p))),
        servers=({s.name: (float(s.gpus), s.gpu_type) for s in newest.servers} if newest else {}),
    )


def _line_numbers(lines: list[bytes], records: list[SpoolRecord]) -> list[int]:
    """The 1-based line of each accepted record (records are read in line order; a record's
    line is the one whose seq and crc match)."""
    out, at = [], 0
    for record in records:
        marker = f'"crc32":{record.crc32}'.encode()
        seq = f'"seq":{record.seq},'.encode()
        while at < len(lines) and not (marker in lines[at] and seq in lines[at]):
            at += 1
        out.append(at + 1)
        at += 1
    return out


def _fold(observations: list[tuple[int, Observation]], quarantine) -> list[dict[str, Any]]:
    """One dict per job with a `submitted` observation, from all of its observations."""
    by_job: dict[str, list[tuple[int, Observation]]] = {}
    for line, obs in observations:
        by_job.setdefault(obs.job, []).append((line, obs))
    jobs = []
    for job_id, seen in by_job.items():
        first_line = min(line for line, _ in seen)
        submitted = [o for _, o in seen if o.kind == "submitted"]
        if not submitted:
            quarantine(
                first_line,
                "submitted",
                f"job {printable(job_id, 80)}: no 'submitted' observation in this day's spool "
                "(its size and submit time are unknown)",
            )
            continue
        sub = min(submitted, key=lambda o: o.time)
        starts = sorted((o for _, o in seen if o.kind == "started"), key=lambda o: o.time)
        start = starts[0] if starts else None
        ends = sorted(
            (
                o
                for _, o in seen
                if o.kind in END_STATUS and (start is None or o.time >= start.time)
            ),
            key=lambda o: o.time,
        )
        end = ends[0] if ends else None
        if end is not None:
            status = END_STATUS[end.kind]
        else:
            status = "running" if start is not None else "pending"
        jobs.append(
            {
                "record_no": first_line,
                "job_id": job_id,
                "submit_time": _naive(sub.time),
                "start_time": _naive(start.time) if start else None,
                "end_time": _naive(end.time) if end else None,
                "num_gpus": sub.gpus,
                "status": status,
                "user_name": sub.user,
                "model": sub.model,
                "gpu_type": sub.gpu_type,
                "servers": json.dumps(sorted(start.servers or [])) if start else None,
            }
        )
    return jobs


def _parsed(path: Path, jobs: list[dict[str, Any]], lines: list[bytes]) -> ParsedTrace:
    schema = {"record_no": pl.Int64, **{k: JOB_COLUMNS[k] for k in JOB_COLUMNS if k != "source_id"}}
    columns = [c for c in schema if c in ("record_no", *jobs[0])] if jobs else list(schema)
    frame = pl.DataFrame(
        [{c: job.get(c) for c in columns} for job in jobs],
        schema={c: schema[c] for c in columns},
    )
    return ParsedTrace(
        path=path,
        format=FORMAT,
        content_hash="",
        frame=frame,
        errors=empty_errors(),
        raw=lambda numbers: [_raw(lines, n) for n in numbers],
    )


def _decision_rows(
    source_id: str, decisions: list[tuple[int, Snapshot, Decision]], jobs: list[dict[str, Any]]
) -> pl.DataFrame:
    """One row per (decision, job pending in its snapshot)."""
    real = {j["job_id"]: j for j in jobs}
    ordered = sorted(decisions, key=lambda d: d[1].time)
    times = [s.time for _, s, _ in ordered]
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times) if b > a]
    last_window = statistics.median(gaps) if gaps else DEFAULT_WINDOW_S
    rows = []
    for k, (_, snapshot, decision) in enumerate(ordered):
        later = [t for t in times[k + 1 :] if t > snapshot.time]
        until = later[0] if later else snapshot.time + timedelta(seconds=last_window)
        started = {s.job: s for s in decision.start}
        for job in snapshot.pending:
            mine = started.get(job.id)
            observed = real.get(job.id)
            start = observed["start_time"] if observed else None
            real_started = start is not None and _naive(snapshot.time) <= start < _naive(until)
            real_servers = observed["servers"] if observed and start is not None else None
            policy_servers = json.dumps(sorted(mine.servers)) if mine else None
            rows.append(
                {
                    "source_id": source_id,
                    "decision_id": decision.decision_id,
                    "job_id": job.id,
                    "cluster": snapshot.cluster,
                    "snapshot_time": _naive(snapshot.time),
                    "policy": decision.policy,
                    "policy_id": decision.policy_id,
                    "latency_ms": decision.latency_ms,
                    "requested_gpus": job.gpus,
                    "policy_start": mine is not None,
                    "policy_gpus": mine.gpus if mine else None,
                    "policy_servers": policy_servers,
                    "real_started": real_started,
                    "real_start_time": start,
                    "real_gpus": observed["num_gpus"] if observed and start is not None else None,
                    "real_servers": real_servers,
                    "same_action": (mine is not None) == real_started,
                    "same_servers": (
                        policy_servers == real_servers
                        if mine is not None and real_started
                        else None
                    ),
                }
            )
    return pl.DataFrame(rows, schema=DECISION_COLUMNS)
