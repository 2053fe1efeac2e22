"""A small shadow spool written through the spool module, checked by hand: one cluster's
closed day (2026-11-27) with two decisions, four jobs and a torn last line, and an open day
(2026-11-28) that the nightly ingest must leave alone.

    08:50 A submitted (2 GPUs)      08:55 B submitted (4 GPUs)
    09:00 decision 1 (fifo): pending A, B -> start A on s1, B waits
    09:01 A started on s1           09:10 decision 2: pending B -> B waits
    09:15 B started on s2           09:30 A finished
    09:40 D started on s1, never submitted in this day's spool (quarantined)
    09:45 C submitted (1 GPU), never started
    a torn last line (quarantined)

Decision rows: (1, A) both start, same servers; (1, B) both hold; (2, B) the real
scheduler started B at 09:15, before the day's median gap (600 s) after 09:10 ran out,
while the policy held it. Agreement 2 of 3; the real scheduler started one job the policy
held; the policy started none the real one held.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from tracelib.shadow.spool import Spool

CLUSTER = "Lab GPU"
SLUG = "lab-gpu"
DAY = "2026-11-27"
SOURCE_ID = f"shadow:{SLUG}:{DAY}"
D1, D2 = "a" * 32, "b" * 32


def t(hhmm: str, day: str = DAY) -> str:
    return f"{day}T{hhmm}:00Z"


def _servers(free1: float, free2: float) -> list[dict]:
    return [
        {"name": "s1", "gpu_type": "a100", "gpus": 4, "free_gpus": free1, "cpus": 32.0,
         "free_cpus": 32.0, "memory_gib": 256.0, "free_memory_gib": 256.0},
        {"name": "s2", "gpu_type": "a100", "gpus": 4, "free_gpus": free2, "cpus": 32.0,
         "free_cpus": 32.0, "memory_gib": 256.0, "free_memory_gib": 256.0},
    ]  # fmt: skip


def _pending(job: str, gpus: float, submitted: str) -> dict:
    return {"id": job, "user": "u1", "gpus": gpus, "submit_time": t(submitted)}


def _decision(decision_id: str, at: str, pending: list[dict], start: list[dict]) -> dict:
    waiting = [p["id"] for p in pending if p["id"] not in {s["job"] for s in start}]
    return {
        "snapshot": {
            "schema_version": 1,
            "cluster": CLUSTER,
            "time": t(at),
            "servers": _servers(4.0, 4.0),
            "running": [],
            "pending": pending,
        },
        "decision": {
            "schema_version": 1,
            "decision_id": decision_id,
            "policy": "fifo",
            "policy_id": "fifo",
            "time": t(at),
            "latency_ms": 1.5,
            "start": start,
            "wait": waiting,
        },
    }


def _observe(*observations: dict) -> dict:
    return {"schema_version": 1, "cluster": CLUSTER, "observations": list(observations)}


def write_spool(root: Path) -> Path:
    """Write the case under `root`; returns the closed day's file."""
    receipts = iter(
        datetime.fromisoformat(t(hhmm, day).replace("Z", "+00:00")).astimezone(UTC)
        for day, hhmm in [
            (DAY, "09:00"),
            (DAY, "09:00"),
            (DAY, "09:00"),
            (DAY, "09:02"),
            (DAY, "09:10"),
            (DAY, "09:31"),
            (DAY, "09:46"),
            ("2026-11-28", "00:05"),
        ]
    )
    a = {"kind": "submitted", "job": "A", "time": t("08:50"), "user": "u1", "gpus": 2.0}
    b = {"kind": "submitted", "job": "B", "time": t("08:55"), "user": "u1", "gpus": 4.0}
    with Spool(root, clock=lambda: next(receipts)) as spool:
        # The service spools each observation as its own record; a batch reads the same.
        spool.append("observation", a, cluster=CLUSTER)
        spool.append("observation", b, cluster=CLUSTER)
        spool.append(
            "decision",
            _decision(
                D1,
                "09:00",
                [_pending("A", 2.0, "08:50"), _pending("B", 4.0, "08:55")],
                [{"job": "A", "gpus": 2.0, "servers": ["s1"]}],
            ),
            cluster=CLUSTER,
        )
        spool.append(
            "observation",
            _observe({"kind": "started", "job": "A", "time": t("09:01"), "servers": ["s1"]}),
            cluster=CLUSTER,
        )
        spool.append(
            "decision", _decision(D2, "09:10", [_pending("B", 4.0, "08:55")], []), cluster=CLUSTER
        )
        spool.append(
            "observation",
            _observe(
                {"kind": "started", "job": "B", "time": t("09:15"), "servers": ["s2"]},
                {"kind": "finished", "job": "A", "time": t("09:30")},
                b,  # a collector reports a listed job's submission again on every run
            ),
            cluster=CLUSTER,
        )
        spool.append(
            "observation",
            _observe(
                {"kind": "started", "job": "D", "time": t("09:40"), "servers": ["s1"]},
                {"kind": "submitted", "job": "C", "time": t("09:45"), "gpus": 1.0},
            ),
            cluster=CLUSTER,
        )
        spool.append("observation", _observe(a), cluster=CLUSTER)  # the open day
    closed = root / SLUG / f"{DAY}.jsonl"
    with closed.open("ab") as f:  # a write cut short by a crash
        f.write(b'{"v":1,"seq":8,"received":"2026-11-27T09:50:00Z","kind":"obs')
    return closed
