"""What every learned system's training stage shares: where checkpoints go, how a stage's
inputs are hashed, and how a stage finds the policy it already trained on those inputs.

Checkpoints are content-addressed files (`policies/<system>-<sha256 prefix>.pt` beside the
warehouse), written before the transaction that registers them; an unregistered file left
by a failed or killed stage is harmless (the next run writes the same bytes to it). A
trained policy records the hash of its inputs in `policies.metrics.input_key`, so a stage
re-run on unchanged inputs returns that policy instead of training again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from models.checkpoints import Resumed, checkpoint_file, verify_registered
from tracelib.provenance import canonical_json
from warehouse import read_frame, resolve_path


class Saveable(Protocol):
    def save(self, path: Path) -> str:
        """Write the checkpoint to `path`; return its sha256."""
        ...


def policies_dir(warehouse: str | Path | None) -> Path:
    """Where checkpoints are written: `policies/` beside the warehouse (./var/ by default)."""
    return resolve_path(warehouse).parent / "policies"


def save_checkpoint_file(
    policy: Saveable, warehouse: str | Path | None, system: str
) -> tuple[Path, str]:
    """Write a checkpoint under its content address; returns (path, sha256). Written to a
    temporary name first, so a reader never sees a half-written file."""
    folder = policies_dir(warehouse)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{uuid.uuid4().hex}.pt"
    sha = policy.save(tmp)
    target = folder / f"{system}-{sha[:16]}.pt"
    os.replace(tmp, target)
    return target, sha


def input_key(*parts: Any) -> str:
    """Hash of a stage's inputs: frames (as CSV, without the `code_version` of the code that
    wrote them: the data's identity, not its writer's), strings, dataclass configs and other
    JSON-able values (as canonical JSON)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, pl.DataFrame):
            digest.update(part.drop("code_version", strict=False).write_csv().encode())
        elif isinstance(part, str):
            digest.update(part.encode())
        elif is_dataclass(part) and not isinstance(part, type):
            digest.update(canonical_json(asdict(part)).encode())
        else:
            digest.update(canonical_json(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def public_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics for a run summary (JSON-safe scalars only)."""
    return {k: v for k, v in metrics.items() if isinstance(v, int | float | str | None)}


@dataclass(frozen=True)
class TrainResult:
    """What a training stage returns: the registered policy, the policy it started from,
    its checkpoint file and its metrics (`cached` when the inputs were already trained on)."""

    policy_id: str
    parent_policy_id: str | None
    checkpoint: str
    metrics: dict[str, Any]


def already_trained(con, key: str, system: str) -> TrainResult | None:
    """The policy of `system` trained on exactly the inputs hashed to `key` (its checkpoint
    file still there with the registered bytes), its metrics marked `cached`; None if there
    is none. The oldest usable one wins; a lost or altered checkpoint is marked in
    `checkpoint_problems` and passed over, so a policy trained again after a loss is found
    by every later run (the stage trains again only when none is usable)."""
    rows = read_frame(
        con,
        "SELECT * FROM policies WHERE system = ? "
        "AND json_extract_string(metrics, '$.input_key') = ? ORDER BY created_at, policy_id",
        [system, key],
    )
    for row in rows.iter_rows(named=True):
        if verify_registered(con, row["policy_id"]):
            metrics = public_metrics({**json.loads(row["metrics"]), "cached": True})
            path = str(checkpoint_file(con, row["checkpoint_path"]))
            return TrainResult(row["policy_id"], row["parent_policy_id"], path, metrics)
    return None


def resume_note(resumed: Resumed) -> dict[str, str]:
    """`{"resume_note": ...}` for a stage's metrics when training could not continue from
    the policy it meant to (its checkpoint lost or refused), else nothing; also logged."""
    if not resumed.note:
        return {}
    logging.getLogger("schedlab").warning("%s", resumed.note)
    return {"resume_note": resumed.note}


def newest_policy(con, system: str, workload_set: str | None = None) -> str | None:
    """Id of the newest registered policy of `system` (None if none); with `workload_set`,
    of those trained on that set (`metrics.workload_set`, or its stage config's).

    A set's first training does not start from a policy of another set: the sets of one
    run train at the same time, so which of them would be newest depends on which task
    finished first, and the same seed must give the same tables."""
    rows = con.sql(
        "SELECT policy_id FROM policies WHERE system = ? AND (? IS NULL OR coalesce("
        "json_extract_string(metrics, '$.workload_set'), "
        "json_extract_string(metrics, '$.stage_config.workload_set')) = ?) "
        "ORDER BY created_at DESC, policy_id LIMIT 1",
        params=[system, workload_set, workload_set],
    ).fetchall()
    return rows[0][0] if rows else None


def set_workloads(con, workload_set: str, split: str, limit: int | None = None) -> pl.DataFrame:
    """`workload_jobs` rows of one split of a derived workload set, in workload and job
    order: at most `limit` sequences (the lowest sequence numbers; None: all). ValueError
    naming what exists when the set has no such workloads."""
    jobs = read_frame(
        con,
        "SELECT j.* FROM workload_jobs j JOIN workloads w USING (workload_id) "
        "WHERE w.derivation = ? AND w.split = ? AND w.sequence_no < ? "
        "ORDER BY j.workload_id, j.job_index",
        [workload_set, split, limit if limit is not None else 2**31 - 1],
    )
    if jobs.height == 0:
        raise ValueError(
            f"no {split!r} workloads in set {workload_set!r}; derive it first "
            '(`schedlab derive`) or see `schedlab sql "SELECT derivation, split, count(*) '
            'FROM workloads GROUP BY ALL"`'
        )
    return jobs
