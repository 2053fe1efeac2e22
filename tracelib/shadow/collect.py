"""What the Slurm and Kubernetes collectors share: the result of one collection, the error
for an input that is unusable as a whole, and the readers of the small value formats both
schedulers print (host lists, counts with units).

A collector is a pure function from parsed JSON (what `squeue --json` or `kubectl get ...
-o json` printed) to a `Collected`: one `Snapshot` and the `Observation`s the input shows.
An item that cannot become a job or a server (a job without a submit time, a node with a
negative GPU count) is skipped and listed in `Collected.skipped` with its reason; an input
whose shape is wrong as a whole (not a JSON object, no `jobs` list) raises `CollectError`
naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tracelib.shadow.schemas import (
    MAX_SERVERS_PER_JOB,
    SCHEMA_VERSION,
    Observation,
    PendingJob,
    RunningJob,
    Server,
    Snapshot,
)


class CollectError(ValueError):
    """An input file is unusable as a whole; the message names the file and the field."""

    def __init__(self, file: str, field: str, message: str):
        self.file = file
        self.field = field
        super().__init__(f"{file}: {field}: {message}")


@dataclass(frozen=True)
class Skipped:
    """An item of an input left out of the snapshot and the observations, and why."""

    file: str
    item: str
    """Where it is: `jobs[3] (job 4103)`, `items[2] (pod nlp/ctc-train)`."""
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.item}: {self.reason}"


@dataclass
class Collected:
    """One collection: the cluster's snapshot, what the inputs show happened to jobs, and
    the items left out."""

    snapshot: Snapshot
    observations: list[Observation]
    skipped: list[Skipped] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The snapshot and an observe batch as JSON data (the service's two request
        bodies), plus the skipped items as text."""
        return {
            "snapshot": self.snapshot.model_dump(mode="json"),
            "observe": {
                "schema_version": 1,
                "cluster": self.snapshot.cluster,
                "observations": [o.model_dump(mode="json") for o in self.observations],
            },
            "skipped": [str(s) for s in self.skipped],
        }


KIND_ORDER = {
    "submitted": 0,
    "started": 1,
    "finished": 2,
    "failed": 2,
    "preempted": 2,
    "cancelled": 2,
}
"""Order of a job's observations at the same instant: submitted, started, then its end."""


def reason(exc: Exception) -> str:
    """What is wrong with an item: a validation error's first field and message, else the
    error's own message."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "value"
        return f"{loc}: {first['msg']}"
    return str(exc)


def collected(
    file: str,
    cluster: str,
    time: datetime,
    servers: list[Server],
    running: list[RunningJob],
    pending: list[PendingJob],
    observations: list[Observation],
    skipped: list[Skipped],
) -> Collected:
    """A collection from what a collector read (`file` is named if the snapshot as a whole
    is invalid: CollectError); observations by time, job, then kind."""
    try:
        snapshot = Snapshot(
            schema_version=SCHEMA_VERSION,
            cluster=cluster,
            time=time,
            servers=servers,
            running=running,
            pending=pending,
        )
    except ValidationError as exc:
        raise CollectError(file, "snapshot", reason(exc)) from None
    ordered = sorted(observations, key=lambda o: (o.time, o.job, KIND_ORDER[o.kind]))
    return Collected(snapshot, ordered, skipped)


class ItemError(ValueError):
    """One item cannot be read; the message names its field."""


JOB_RECORD_KEYS = (
    "id",
    "user",
    "gpus",
    "gpu_type",
    "cpus",
    "memory_gib",
    "submit",
    "start",
    "end",
    "end_kind",
    "hosts",
    "limit_s",
)
"""The keys of a collector's job record, the one form both collectors read a job into:
`end_kind` is the observation its end makes (None while it has not ended), `hosts` the
servers it runs on, `limit_s` its time limit in seconds (None: none known)."""


def _request(job: dict[str, Any]) -> dict[str, Any]:
    """Who asked for which GPUs: what every form of a job record repeats."""
    return {"user": job["user"], "gpus": job["gpus"], "gpu_type": job["gpu_type"]}


def pending_job(job: dict[str, Any]) -> PendingJob:
    """A job record (`JOB_RECORD_KEYS`) as a pending job of the snapshot."""
    return PendingJob(
        id=job["id"],
        **_request(job),
        cpus=job["cpus"],
        memory_gib=job["memory_gib"],
        submit_time=job["submit"],
        duration_estimate_s=job["limit_s"],
    )


def running_job(job: dict[str, Any]) -> RunningJob:
    """A job record (`JOB_RECORD_KEYS`) as a running job of the snapshot; one running
    without a start time (a pod bound before Kubernetes stamps it) counts from its
    submission."""
    return RunningJob(
        id=job["id"],
        **_request(job),
        servers=job["hosts"],
        submit_time=job["submit"],
        start_time=job["start"] or job["submit"],
        duration_estimate_s=job["limit_s"],
    )


def job_observations(job: dict[str, Any], now: datetime) -> list[Observation]:
    """What a job record (`JOB_RECORD_KEYS`) shows happened to the job by `now`: its
    submission; its start, once it runs on servers and started by `now`; its end, once it
    ended by `now`."""
    out = [
        Observation(
            kind="submitted",
            job=job["id"],
            time=job["submit"],
            **_request(job),
            duration_estimate_s=job["limit_s"],
        )
    ]
    if job["hosts"] and job["start"] is not None and job["start"] <= now:
        out.append(
            Observation(
                kind="started",
                job=job["id"],
                time=job["start"],
                gpus=job["gpus"],
                gpu_type=job["gpu_type"],
                servers=job["hosts"],
            )
        )
    if job["end_kind"] is not None and job["end"] is not None and job["end"] <= now:
        out.append(Observation(kind=job["end_kind"], job=job["id"], time=job["end"]))
    return out


def require_object(data: Any, file: str, what: str) -> dict:
    """`data` if it is a JSON object; CollectError naming `file` otherwise."""
    if not isinstance(data, dict):
        raise CollectError(file, what, f"expected a JSON object, got {type(data).__name__}")
    return data


def require_list(data: dict, key: str, file: str) -> list:
    """`data[key]` if it is a list; CollectError naming `file` and `key` otherwise."""
    if key not in data:
        raise CollectError(
            file, key, f"missing (the file holds {', '.join(sorted(data)) or 'no field'})"
        )
    value = data[key]
    if not isinstance(value, list):
        raise CollectError(file, key, f"expected a list, got {type(value).__name__}")
    return value


def _slurm_value(value: Any) -> Any:
    """The value inside Slurm's `{"set", "infinite", "number"}` wrapper (data_parser
    v0.0.39+): its number, or None when not set or infinite; any other value as it is."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        return value.get("number")
    return value


def epoch(value: Any, name: str) -> datetime | None:
    """A Slurm time: a UNIX timestamp, plain (sacct) or as `{"set", "infinite", "number"}`
    (squeue, data_parser v0.0.39+). None when not set, infinite or 0 (Slurm's "unknown")."""
    value = _slurm_value(value)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ItemError(f"{name}: not a UNIX time: {str(value)[:40]!r}")
    if value == 0:
        return None
    if not 0 < value < 4_102_444_800:  # before 2100-01-01
        raise ItemError(f"{name}: {value} is not a plausible UNIX time")
    return datetime.fromtimestamp(value, UTC)


def number(value: Any, name: str) -> float | None:
    """A Slurm count, plain or `{"set", "infinite", "number"}`; None when not set or infinite."""
    value = _slurm_value(value)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ItemError(f"{name}: not a number: {str(value)[:40]!r}")
    if value < 0:
        raise ItemError(f"{name}: negative ({value})")
    return float(value)


def rfc3339(value: Any, name: str) -> datetime | None:
    """A Kubernetes time ("2026-11-27T06:00:00Z"); None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ItemError(f"{name}: not a time: {str(value)[:40]!r}")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ItemError(f"{name}: not an RFC 3339 time: {value[:40]!r}") from None
    if parsed.tzinfo is None:
        raise ItemError(f"{name}: no time zone: {value[:40]!r}")
    return parsed.astimezone(UTC)


_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand_hostlist(text: str, name: str = "nodes") -> list[str]:
    """Slurm's compressed host list ("gpu[01-03,07],login1", "rack[1-2]-n[1-2]") as names,
    at most `MAX_SERVERS_PER_JOB` of them (a larger list is an error, not a memory hazard).
    "" and Slurm's "None assigned" / "(null)" are no hosts."""
    text = text.strip()
    if text in ("", "None assigned", "(null)"):
        return []
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ItemError(f"{name}: unbalanced ']' in {text[:60]!r}")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ItemError(f"{name}: unbalanced '[' in {text[:60]!r}")
    parts.append(text[start:])
    hosts: list[str] = []
    for part in parts:
        expanded = [""]
        pos = 0
        for match in _BRACKET.finditer(part):
            prefix = part[pos : match.start()]
            choices = _ranges(match.group(1), name, text)
            expanded = [e + prefix + c for e in expanded for c in choices]
            if len(hosts) + len(expanded) > MAX_SERVERS_PER_JOB:
                raise ItemError(f"{name}: more than {MAX_SERVERS_PER_JOB} hosts")
            pos = match.end()
        hosts.extend(e + part[pos:] for e in expanded)
        if len(hosts) > MAX_SERVERS_PER_JOB:
            raise ItemError(f"{name}: more than {MAX_SERVERS_PER_JOB} hosts")
    if any(not h for h in hosts):
        raise ItemError(f"{name}: empty host name in {text[:60]!r}")
    return hosts


def _ranges(body: str, name: str, text: str) -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        low, dash, high = piece.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ItemError(f"{name}: bad range {piece!r} in {text[:60]!r}")
        if not dash:
            out.append(low)
            continue
        a, b = int(low), int(high)
        if b < a or b - a >= MAX_SERVERS_PER_JOB:
            raise ItemError(f"{name}: bad range {piece!r} in {text[:60]!r}")
        width = len(low)
        out.extend(str(k).zfill(width) for k in range(a, b + 1))
    return out
