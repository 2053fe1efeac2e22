"""Checkpoints of learned policies and the `policies` registry every learned system shares.

A checkpoint is one `torch.save` file holding plain values only (so it loads with
`weights_only=True`: no pickled code runs on load):

    {"format": FORMAT, "system": "dl2", "config": "<canonical JSON>",
     "state": {"policy": state_dict, "value": state_dict, ...}, "meta": {...}}

`config` is everything needed to rebuild the networks (and how they were trained);
`meta` holds the data version (training workloads), code version and creation time.

The registry row (`policies`, DDL in warehouse/migrations/0004_learning.sql, contract
`models.contracts.Policies`) records the file's sha256. Loading through the registry
(`load_registered`) refuses a file whose bytes changed (sha256) or whose embedded config
differs from the registered one; a system's own loader then refuses weights whose shapes do
not fit the config (see `models.dl2.policy.load_policy`).
"""

from __future__ import annotations

import io
import json
import math
import os
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import torch

from models.contracts import CheckpointProblems, LearningCurves, Policies
from tracelib.provenance import canonical_json, code_version, sha256_hex
from warehouse.db import transaction
from warehouse.io import read_frame, write_frame

FORMAT = "schedlab-checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint that must not be used: tampered, corrupt, or not what was asked for.

    `problem` is "missing" when the file cannot be read at all, else "refused".
    """

    def __init__(self, message: str, problem: str = "refused"):
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True)
class Checkpoint:
    """A loaded (and verified) checkpoint."""

    system: str
    config: dict[str, Any]
    state: dict[str, dict[str, torch.Tensor]]
    """Named state dicts ("policy", "value", ...)."""
    meta: dict[str, Any]
    sha256: str


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes (hex)."""
    return sha256_hex(Path(path).read_bytes())


def save_checkpoint(
    path: str | os.PathLike[str],
    *,
    system: str,
    config: Mapping[str, Any],
    state: Mapping[str, Mapping[str, torch.Tensor]],
    meta: Mapping[str, Any] | None = None,
) -> str:
    """Write a checkpoint atomically (temp file, then rename); returns its sha256."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "format": FORMAT,
        "system": system,
        "config": canonical_json(dict(config)),
        "state": {name: {k: v.detach().cpu() for k, v in sd.items()} for name, sd in state.items()},
        # No timestamp: the same weights and config give the same bytes, so the sha256 and
        # the content-addressed policy id are reproducible (the registry row dates it).
        "meta": {"code_version": code_version(), **dict(meta or {})},
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, target)
    return sha256_hex(data)


class SavesPolicyNet:
    """`save` for a policy object holding its network as `net`, its `policies.system` as
    `system` and a `checkpoint_config()`: one weights-only checkpoint, the network's state
    under "policy", so each learned system's loader finds it where the others do."""

    def save(self, path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None) -> str:
        """Write a weights-only checkpoint (config inside); returns its sha256."""
        return save_checkpoint(
            path,
            system=self.system,
            config=self.checkpoint_config(),
            state={"policy": self.net.state_dict()},
            meta=meta,
        )


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    sha256: str | None = None,
    system: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Checkpoint:
    """Load a checkpoint with `weights_only=True`, refusing it (CheckpointError) when its
    sha256 is not `sha256`, its system not `system`, or its config not `config`."""
    target = Path(path)
    try:
        data = target.read_bytes()
    except OSError as exc:
        raise CheckpointError(
            f"checkpoint {target} cannot be read: {exc.strerror or exc}", problem="missing"
        ) from None
    actual = sha256_hex(data)
    if sha256 is not None and actual != sha256:
        raise CheckpointError(
            f"checkpoint {target} was modified or replaced: its sha256 is {actual}, the "
            f"registry recorded {sha256}; refusing to load it"
        )
    try:
        payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(
            f"checkpoint {target} is not a loadable weights-only checkpoint: {first}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {target} is not a {FORMAT} file")
    if system is not None and payload["system"] != system:
        raise CheckpointError(
            f"checkpoint {target} holds a {payload['system']!r} policy, not {system!r}"
        )
    stored = json.loads(payload["config"])
    if config is not None:
        expected = json.loads(canonical_json(dict(config)))
        if stored != expected:
            raise CheckpointError(
                f"checkpoint {target} config does not match: {_diff(stored, expected)}"
            )
    return Checkpoint(payload["system"], stored, payload["state"], payload["meta"], actual)


def _diff(stored: Any, expected: Any, prefix: str = "") -> str:
    """The first few differing keys of two JSON values, readable."""
    if isinstance(stored, dict) and isinstance(expected, dict):
        parts = []
        for key in sorted(set(stored) | set(expected)):
            name = f"{prefix}.{key}" if prefix else str(key)
            if key not in stored:
                parts.append(f"{name} missing from the checkpoint")
            elif key not in expected:
                parts.append(f"{name} unexpected in the checkpoint")
            elif stored[key] != expected[key]:
                parts.append(_diff(stored[key], expected[key], name))
        return "; ".join(parts[:5])
    return f"{prefix or 'value'} is {stored!r} in the checkpoint, {expected!r} expected"


# -- registry ------------------------------------------------------------------------------


def warehouse_folder(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The folder of the warehouse file `con` has open (None: an in-memory database)."""
    rows = con.sql(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()
    return Path(rows[0][0]).resolve().parent if rows and rows[0][0] else None


def stored_checkpoint_path(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str]) -> str:
    """How `policies.checkpoint_path` records `path`: relative to the warehouse's folder
    when the file is inside it (`policies/dl2-....pt`), so a warehouse moved or copied with
    its `policies/` folder finds its own files; absolute otherwise."""
    target = Path(path).resolve()
    folder = warehouse_folder(con)
    if folder is not None and target.is_relative_to(folder):
        return target.relative_to(folder).as_posix()
    return str(target)


def checkpoint_file(con: duckdb.DuckDBPyConnection, stored: str) -> Path:
    """The file a `policies.checkpoint_path` value names, for the warehouse `con` has open.

    A relative path is under the warehouse's folder. An absolute one (recorded by older
    code, or a file outside the folder) is used as is unless the warehouse's own
    `policies/` holds a file of that name: checkpoints are written there under their
    content address (`pipelines.trained.save_checkpoint_file`) and verified by sha256 on
    every load, so that copy is the same bytes, and a moved or copied warehouse reads its
    own files rather than those of the place it came from."""
    path = Path(stored)
    folder = warehouse_folder(con)
    if not path.is_absolute():
        return (folder or Path.cwd()) / path
    if folder is not None:
        local = folder / "policies" / path.name
        if local.is_file():
            return local
    return path


def policy_id_for(system: str, sha256: str) -> str:
    """Content-addressed policy id: the system and the checkpoint's hash."""
    return f"{system}-{sha256[:16]}"


def register_policy(
    con: duckdb.DuckDBPyConnection,
    *,
    system: str,
    config: Mapping[str, Any],
    checkpoint_path: str | os.PathLike[str],
    sha256: str,
    training_workloads: Sequence[str],
    metrics: Mapping[str, Any],
    parent_policy_id: str | None = None,
    curve: pl.DataFrame | None = None,
    policy_id: str | None = None,
    created_at: datetime | None = None,
) -> str:
    """Record a trained policy (and its learning curve) in `policies` / `dl2_learning_curves`;
    returns its policy id. The checkpoint file must exist and hash to `sha256`, and the
    parent must be registered. Registering the same policy again is a no-op; reusing an id
    for different content is an error. Call inside the stage's transaction."""
    actual = file_sha256(checkpoint_path)
    if actual != sha256:
        raise CheckpointError(
            f"checkpoint {checkpoint_path} hashes to {actual}, not the given {sha256}"
        )
    policy_id = policy_id or policy_id_for(system, sha256)
    existing = con.sql(
        "SELECT sha256 FROM policies WHERE policy_id = ?", params=[policy_id]
    ).fetchall()
    if existing:
        if existing[0][0] != sha256:
            raise ValueError(f"policy {policy_id} is registered with a different checkpoint")
        # The same bytes were just written again (retrained on the same inputs): a lost or
        # altered file is whole again, so its mark no longer holds.
        con.execute("DELETE FROM checkpoint_problems WHERE policy_id = ?", [policy_id])
        return policy_id
    if parent_policy_id is not None:
        found = con.sql(
            "SELECT 1 FROM policies WHERE policy_id = ?", params=[parent_policy_id]
        ).fetchall()
        if not found:
            raise ValueError(f"parent policy {parent_policy_id} is not registered")
    row = pl.DataFrame(
        {
            "policy_id": [policy_id],
            "system": [system],
            "config": [canonical_json(dict(config))],
            "parent_policy_id": [parent_policy_id],
            "training_workloads": [canonical_json(sorted(training_workloads))],
            "metrics": [canonical_json(_finite(dict(metrics)))],
            "checkpoint_path": [stored_checkpoint_path(con, checkpoint_path)],
            "sha256": [sha256],
            "created_at": [(created_at or datetime.now(UTC)).replace(tzinfo=None)],
            "code_version": [code_version()],
        },
        schema_overrides={"parent_policy_id": pl.Utf8},
    )
    write_frame(con, row, Policies)
    if curve is not None and curve.height:
        write_frame(con, curve_rows(curve, policy_id), LearningCurves)
    return policy_id


def _finite(value: Any) -> Any:
    """JSON-safe: NaN and infinities (a stalled validation run) become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def curve_rows(curve: pl.DataFrame, policy_id: str) -> pl.DataFrame:
    """A trainer's curve frame as `dl2_learning_curves` rows of `policy_id` (missing metric
    columns become nulls)."""
    columns = list(LearningCurves.to_schema().columns)
    out = curve.with_columns(pl.lit(policy_id).alias("policy_id"))
    for name in columns:
        if name not in out.columns:
            out = out.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    return out.select(columns)


def registered(con: duckdb.DuckDBPyConnection, policy_id: str) -> dict[str, Any]:
    """The `policies` row of `policy_id` (KeyError if unknown)."""
    rows = read_frame(con, "SELECT * FROM policies WHERE policy_id = ?", [policy_id])
    if rows.height == 0:
        raise KeyError(f"policy {policy_id!r} is not registered")
    return rows.row(0, named=True)


def load_registered(con: duckdb.DuckDBPyConnection, policy_id: str) -> Checkpoint:
    """Load a registered policy's checkpoint, verified against the registry: same bytes
    (sha256), same system, same config."""
    row = registered(con, policy_id)
    return load_checkpoint(
        checkpoint_file(con, row["checkpoint_path"]),
        sha256=row["sha256"],
        system=row["system"],
        config=json.loads(row["config"]),
    )


# -- lost or refused checkpoints ------------------------------------------------------------


def mark_unusable(con: duckdb.DuckDBPyConnection, policy_id: str, error: CheckpointError) -> None:
    """Record in `checkpoint_problems` that `policy_id`'s checkpoint is missing or refused
    (once per policy and kind of problem; later sightings keep the first record)."""
    seen = con.sql(
        "SELECT 1 FROM checkpoint_problems WHERE policy_id = ? AND problem = ?",
        params=[policy_id, error.problem],
    ).fetchall()
    if seen:
        return
    path = con.sql(
        "SELECT checkpoint_path FROM policies WHERE policy_id = ?", params=[policy_id]
    ).fetchall()
    row = pl.DataFrame(
        {
            "policy_id": [policy_id],
            "problem": [error.problem],
            "detail": [str(error)],
            "checkpoint_path": [path[0][0] if path else ""],
            "detected_at": [datetime.now(UTC).replace(tzinfo=None)],
        }
    )
    with transaction(con):
        write_frame(con, row, CheckpointProblems)


@dataclass(frozen=True)
class Resumed:
    """Where a training stage starts: the policy it continues (None: from scratch), that
    policy rebuilt from its checkpoint, and what was skipped on the way, if anything."""

    policy_id: str | None
    policy: Any
    note: str = ""


def resume_from(con: duckdb.DuckDBPyConnection, policy_id: str | None, build) -> Resumed:
    """Load `policy_id` to continue training from it; if its checkpoint is missing or
    refused, mark it (`mark_unusable`) and try its parent, then the parent's parent, ...;
    from scratch when none is usable. `build` turns a verified Checkpoint into the policy
    (a CheckpointError it raises, e.g. for weights that do not fit, counts as refused).

    A lost file under policies/ therefore costs the training it held, never a run.
    """
    skipped: list[str] = []
    current = policy_id
    while current is not None:
        try:
            return Resumed(current, build(load_registered(con, current)), _note(skipped, current))
        except CheckpointError as exc:
            mark_unusable(con, current, exc)
            skipped.append(f"{current} ({exc.problem}: {exc})")
            rows = con.sql(
                "SELECT parent_policy_id FROM policies WHERE policy_id = ?", params=[current]
            ).fetchall()
            current = rows[0][0] if rows else None
    return Resumed(None, None, _note(skipped, None))


def _note(skipped: list[str], used: str | None) -> str:
    if not skipped:
        return ""
    start = f"resumed from ancestor {used}" if used else "trained from scratch"
    return f"checkpoint unusable, {start}; skipped: " + "; ".join(skipped)


def verify_registered(con: duckdb.DuckDBPyConnection, policy_id: str) -> bool:
    """Whether `policy_id`'s checkpoint file is there with the registered bytes (sha256);
    if not, it is marked in `checkpoint_problems` and False is returned."""
    row = registered(con, policy_id)
    path = checkpoint_file(con, row["checkpoint_path"])
    try:
        actual = file_sha256(path)
    except OSError as exc:
        error = CheckpointError(
            f"checkpoint {path} cannot be read: {exc.strerror or exc}", problem="missing"
        )
        mark_unusable(con, policy_id, error)
        return False
    if actual != row["sha256"]:
        error = CheckpointError(
            f"checkpoint {path} was modified or replaced: its sha256 is {actual}, the "
            f"registry recorded {row['sha256']}"
        )
        mark_unusable(con, policy_id, error)
        return False
    return True
