"""What every learned system's stages share: the routine around its trainer
(`train_and_register`), where checkpoints go, how a stage's inputs are hashed, how a
stage finds the policy it already trained on those inputs, and the routine around an
evaluation in its own paper's scenario (`newest_usable`, `evaluate_once`).

A system's stage reads its inputs, hashes them (`input_key`) and hands `train_and_register`
its pure parts: where training starts (`start`, its resume rule), the train function, and
the rows of its own tables. The routine does the bookkeeping every system shares, once:

    skip     the policy already trained on these inputs is returned (`already_trained`)
    resume   the policy to continue from is loaded (`models.checkpoints.resume_from`: a lost
             or refused checkpoint falls back to its ancestors, with a `resume_note`)
    train    with the warehouse closed, one intra-op thread (`scoped_torch`), a progress bar
    save     the checkpoint file under its content address (`save_checkpoint_file`)
    register the policy, its metrics (with `stage_config` and `input_key`) and the system's
             own rows in one transaction
    result   a `TrainResult`

Checkpoints are content-addressed files (`policies/<system>-<sha256 prefix>.pt` beside the
warehouse), written before the transaction that registers them; an unregistered file left
by a failed or killed stage is harmless (the next run writes the same bytes to it), and a
stage that fails leaves the warehouse as it was. A trained policy records the hash of its
inputs in `policies.metrics.input_key`, so a stage re-run on unchanged inputs returns that
policy instead of training again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Protocol

import polars as pl

from models.checkpoints import (
    Resumed,
    checkpoint_file,
    register_policy,
    resume_from,
    verify_registered,
)
from models.evaluation import EvalTables, store_evaluation
from models.torch_scope import scoped_torch
from pipelines.progress import QUIET, Reporter
from tracelib.progress import ProgressFn
from tracelib.provenance import canonical_json
from tracelib.sim import jobs_from_frame
from warehouse import connect, read_frame, resolve_path, transaction
from warehouse.io import write_frame


class Saveable(Protocol):
    def save(self, path: Path) -> str:
        """Write the checkpoint to `path`; return its sha256."""
        ...


class Checkpointed(Saveable, Protocol):
    def checkpoint_config(self) -> dict[str, Any]:
        """What rebuilds the policy (recorded as `policies.config`)."""
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


def newest_policy(
    con, system: str, workload_set: str | None = None, *, config_is: tuple[str, Any] | None = None
) -> str | None:
    """Id of the newest registered policy of `system` (None if none); with `workload_set`,
    of those trained on that set (`metrics.workload_set`, or its stage config's); with
    `config_is` (a JSON path into `policies.config` and a string or a number), of those
    whose config holds that value there (e.g. `("$.train.stage", "finetune")`).

    A set's first training does not start from a policy of another set: the sets of one
    run train at the same time, so which of them would be newest depends on which task
    finished first, and the same seed must give the same tables."""
    path, value = config_is or ("$", None)
    at = "json_extract_string(config, ?)"
    if not isinstance(value, str):
        at = "CAST(json_extract(config, ?) AS DOUBLE)"
    rows = con.sql(
        "SELECT policy_id FROM policies WHERE system = ? AND (? IS NULL OR coalesce("
        "json_extract_string(metrics, '$.workload_set'), "
        "json_extract_string(metrics, '$.stage_config.workload_set')) = ?) "
        f"AND (? IS NULL OR {at} = ?) "
        "ORDER BY created_at DESC, policy_id LIMIT 1",
        params=[system, workload_set, workload_set, value, path, value],
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


def arena_splits(warehouse: str | Path | None, cfg: Any) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The train and validation `workload_jobs` rows an arena training reads: those of
    `cfg.workload_set`, at most `cfg.train_sequences` and `cfg.val_sequences` sequences."""
    with connect(warehouse) as con:
        train = set_workloads(con, cfg.workload_set, "train", cfg.train_sequences)
        return train, set_workloads(con, cfg.workload_set, "validation", cfg.val_sequences)


def job_sequences_of(jobs: pl.DataFrame) -> list[tuple]:
    """One job sequence per workload of `workload_jobs` rows, in workload and job order."""
    return [
        jobs_from_frame(frame.sort("job_index"))
        for _, frame in jobs.group_by("workload_id", maintain_order=True)
    ]


def parent_of(init: str, latest: Callable[[], str | None]) -> str | None:
    """The policy a stage's `init` says training continues: "latest" the newest of its
    kind (`latest()`, None when there is none), "scratch" none, any other value that policy
    id."""
    if init == "latest":
        return latest()
    return None if init == "scratch" else init


SCRATCH = Resumed(None, None)
"""Where a training without a policy to continue starts: fresh weights, no parent."""


@dataclass(frozen=True)
class Trained:
    """What a system's train function returns: the policy (its checkpoint and config), its
    learning curve and its metrics, in the order the trainers return them."""

    policy: Checkpointed
    curve: pl.DataFrame | None
    metrics: dict[str, Any]
    detail: Any = None
    """Anything else the system's own rows are made of (Harmony's reward model: its
    comparison with LIF and gradient boosting)."""
    restarted: bool = False
    """True when the policy training was to continue could not be read after all and
    training began from fresh weights instead: the policy has no parent."""


def train_and_register(
    warehouse: str | Path | None,
    *,
    system: str,
    key: str,
    config: Any,
    train: Callable[[Resumed, ProgressFn], Trained],
    bar: str,
    steps: int | None = None,
    progress: Reporter = QUIET,
    start: Callable[[Any], Resumed] | None = None,
    workloads: Iterable[str] | Callable[[Trained], Iterable[str]] = (),
    metrics: Mapping[str, Any] | None = None,
    write: Callable[[Any, str, Trained], None] | None = None,
    curves: Any = None,
    curve_keys: Mapping[str, Any] | None = None,
    register: Callable[..., str] = register_policy,
) -> TrainResult:
    """One training stage's routine around the system's `train` function: the policy of
    `system` already trained on the inputs hashed to `key` if there is one; else training
    from where `start(con)` says (a `Resumed`; None: from scratch), `train(resumed,
    advance)` under one intra-op thread with a progress bar (`bar`, `steps` long), the
    checkpoint saved, then one transaction that registers the policy (child of the policy
    it started from) and writes the system's own rows (`write(con, policy_id, trained)`),
    then its learning curve: to the table of the contract `curves` (the policy's rows
    replaced, each given the values of `curve_keys`, e.g. a phase), or without `curves`
    and `write` to the shared `dl2_learning_curves`.

    The registered metrics are the trainer's, `metrics` (what the stage adds), the stage's
    `config` as `stage_config`, `input_key` and any `resume_note`; the result carries their
    JSON-safe scalars, as a cached result does. `workloads` are the training workloads'
    ids (or made from the trained result, when only training knows them). `register`
    registers the row (RL-TAPS registers the shipped policy it started from first)."""
    with connect(warehouse) as con:
        done = already_trained(con, key, system)
        if done is not None:
            return done
        resumed = start(con) if start is not None else SCRATCH
    with scoped_torch(threads=1), progress.bar(bar, steps) as advance:
        trained = train(resumed, advance)
    path, sha = save_checkpoint_file(trained.policy, warehouse, system)
    parent = None if trained.restarted else resumed.policy_id
    registered = {
        **trained.metrics,
        **(metrics or {}),
        "stage_config": asdict(config),
        "input_key": key,
        **resume_note(resumed),
    }
    own = write is not None or curves is not None
    with connect(warehouse) as con, transaction(con):
        policy_id = register(
            con,
            system=system,
            config=trained.policy.checkpoint_config(),
            checkpoint_path=path,
            sha256=sha,
            training_workloads=list(workloads(trained) if callable(workloads) else workloads),
            metrics=registered,
            parent_policy_id=parent,
            curve=None if own else trained.curve,
        )
        if write is not None:
            write(con, policy_id, trained)
        if curves is not None:
            keys = curve_keys or {}
            replace_policy_rows(con, curves, trained.curve, policy_id=policy_id, **keys)
    return TrainResult(policy_id, parent, str(path), public_metrics(registered))


def replace_policy_rows(con, contract: Any, rows: pl.DataFrame, **key: Any) -> None:
    """Write `rows` to the table of `contract` in place of its rows matching `key` (column
    -> value, e.g. the policy id), each written row given those values; columns of the
    table that `rows` lacks are null. Inside the stage's transaction."""
    table = contract.Config.name
    where = " AND ".join(f"{column} = ?" for column in key)
    con.execute(f"DELETE FROM {table} WHERE {where}", list(key.values()))
    rows = rows.with_columns(pl.lit(value).alias(column) for column, value in key.items())
    columns = list(contract.to_schema().columns)
    nulls = [pl.lit(None, dtype=pl.Float64).alias(c) for c in columns if c not in rows.columns]
    if rows.height:
        write_frame(con, rows.with_columns(nulls).select(columns), contract)


def newest_usable(
    con, candidates: Iterable[tuple[Any, Callable[[], str | None], Callable[[Any], Any]]]
) -> dict[Any, Resumed]:
    """The policies an own-scenario evaluation runs: for each (name, newest id, loader) the
    newest policy loaded (`resume_from`: a lost or refused checkpoint falls back to its
    ancestor, the note logged), by name; a name with no usable policy is left out. Each
    newest id is asked for in turn, after the previous policy is loaded."""
    out = {}
    for name, newest, load in candidates:
        resumed = resume_from(con, newest(), load)
        resume_note(resumed)
        if resumed.policy_id is not None:
            out[name] = resumed
    return out


def evaluate_once(
    warehouse: str | Path | None,
    *,
    stored: Callable[[Any], Any | None],
    tables: Callable[[ProgressFn], EvalTables],
    result: Callable[[Any, EvalTables], Any],
    bar: str,
    steps: int | None = None,
    progress: Reporter = QUIET,
) -> Any:
    """An own-scenario evaluation stage's routine, whose id hashes its config and the
    policies it runs: `stored(con)` when it gives the result of rows already stored under
    that id (what simulating again would give, so an unchanged run simulates nothing); else
    `tables(advance)` under one intra-op thread (a policy's sampled actions must not depend
    on the calling process's threads) with a progress bar, stored in one transaction that
    ends with `result(con, tables)` (which may write the system's own rows first)."""
    with connect(warehouse) as con:
        done = stored(con)
    if done is not None:
        return done
    with scoped_torch(threads=1), progress.bar(bar, steps) as advance:
        made = tables(advance)
    with connect(warehouse) as con, transaction(con):
        store_evaluation(con, made)
        return result(con, made)
