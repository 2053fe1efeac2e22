"""Chic's pipeline stages: CEM training per variant and arrival rate, and the evaluation
against Optimus (Chic section 6); CEM training in the arena.

    train_chic_stage     trains Chic or Chic-Pair at one arrival rate (from the newest
                         registered policy of that variant and rate, if any); registers it
                         in `policies` (system "chic" / "chic-pair") with its
                         `chic_learning_curves` rows
    evaluate_chic_stage  at every rate, the newest policies trained at that rate, the ones
                         trained at the reference rate (1.8 per hour), Optimus at 600 s and
                         300 s intervals, on the same unseen sequences -> eval_runs /
                         eval_jobs / eval_summary (sets chic@<rate>/h; the view
                         `chic_evaluation` keeps the old columns)
    train_chic_arena_stage  trains Chic or Chic-Pair in the arena's DL2 setting on a
                         workload set's train split (from the newest "<variant>-arena"
                         policy whose network fits); registers it as system "chic-arena" /
                         "chic-pair-arena" with its `chic_learning_curves` rows. The shared
                         evaluation then runs it on every workload set's test split.

Workloads are generated in-stage from the scenario's seeded generator (the paper's
sequences are synthetic): train, validation and test sequences have disjoint seeds
(`tracelib.scenarios.chic.split_seeds`), recorded in the rows. A training
hands its pure parts to `pipelines.trained.train_and_register` (skip, resume, save,
register); an evaluation's id hashes its config and the policies it evaluates, so
re-running it replaces nothing and writes nothing new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import polars as pl

from models.checkpoints import Resumed, resume_from
from models.chic.cem import arena_sequences, train_cem, warm_start
from models.chic.config import CEMConfig, ChicEvalConfig
from models.chic.contracts import ChicLearningCurves
from models.chic.evaluate import OPTIMUS_EVENTS, chic_tables
from models.chic.policy import ARENA, policy_from_checkpoint
from models.chic.stage_config import ChicArenaConfig, ChicTrainConfig
from models.evaluation import (
    EvalTables,
)
from pipelines.progress import QUIET, Reporter
from pipelines.trained import (
    Trained,
    TrainResult,
    arena_splits,
    evaluate_once,
    input_key,
    newest_policy,
    newest_usable,
    parent_of,
    train_and_register,
)
from tracelib.progress import ProgressFn
from tracelib.provenance import canonical_json
from tracelib.scenarios import chic_set
from tracelib.scenarios.chic import split_seeds
from warehouse import connect, read_frame


def _cem_training(
    train: list, validation: list, cem: CEMConfig, name: str, progress: Reporter
) -> Callable[[Resumed, ProgressFn], Trained]:
    """The train function of one CEM training (`train_and_register`'s `train`): from the
    policy it resumes, else from the clone of `cem.teacher` (said in one line), else from
    random weights."""

    def run(resumed: Resumed, advance: ProgressFn) -> Trained:
        warm = None
        if resumed.policy is None and cem.teacher is not None:
            warm = warm_start(train, cem)
            m = warm.metrics
            progress.line(
                f"{name} warm start: {cem.teacher}'s {m['imitation_steps']} actions cloned, "
                f"held-out accuracy {m['imitation_held_out_accuracy']:.2f} "
                f"({m['warm_start_wall_s']:.1f} s)"
            )
        return Trained(*train_cem(train, validation, cem, resumed.policy, advance, warm))

    return run


@dataclass(frozen=True)
class ChicEvalResult:
    eval_id: str
    rows: int
    act: dict[str, dict[float, float]]
    """system -> rate -> average completion time (s)."""
    improvement: dict[str, dict[float, float]]
    """system -> rate -> ACT reduction against Optimus-600."""
    sequence_acts: dict[str, dict[float, list[float]]] | None = None
    """system -> rate -> completion time per test sequence, in the order of the sequence
    seeds (for paired comparisons); None when the evaluation was read back, not run."""


def latest_chic_policy(con, variant: str, rate: float) -> str | None:
    """Id of the newest registered `variant` policy trained at `rate` (None if none)."""
    return newest_policy(con, variant, config_is=("$.train.scenario.rate_per_hour", float(rate)))


def train_chic_stage(
    warehouse: str | Path | None, cfg: ChicTrainConfig, progress: Reporter = QUIET
) -> TrainResult:
    """Train one variant at one rate with the modified CEM; register the best validated
    policy (child of the policy it started from) and its learning curve."""
    cem = cfg.cem_config()
    scenario = cfg.scenario()
    train_seeds = split_seeds("train", cfg.train_sequences, cfg.seed)
    val_seeds = split_seeds("validation", cfg.val_sequences, cfg.seed)
    train, validation = scenario.sequences(train_seeds), scenario.sequences(val_seeds)
    name = "Chic" if cfg.variant == "chic" else "Chic-Pair"
    return train_and_register(
        warehouse,
        system=cfg.variant,
        key=input_key(cfg.init, cem, f"train:{cfg.train_sequences}:val:{cfg.val_sequences}"),
        config=cfg,
        start=lambda con: resume_from(
            con,
            parent_of(cfg.init, lambda: latest_chic_policy(con, cfg.variant, cfg.rate_per_hour)),
            policy_from_checkpoint,
        ),
        train=_cem_training(train, validation, cem, name, progress),
        bar=f"{cfg.variant} CEM iterations",
        steps=cem.iterations,
        progress=progress,
        workloads=[f"chic:train:{s}@{cfg.rate_per_hour:g}" for s in train_seeds],
        metrics={"rate_per_hour": cfg.rate_per_hour, "val_seeds": list(val_seeds)},
        curves=ChicLearningCurves,
    )


def warm_start_teacher(con, policy_id: str) -> str | None:
    """The scheduler of Chic's own evaluation a policy's warm start cloned: Optimus
    deciding at every event (`optimus-events`, as the clone's Optimus decided inside Chic's
    MDP, there over its first I jobs), or None without a warm start."""
    (teacher,) = con.sql(
        "SELECT json_extract_string(metrics, '$.stage_config.cem.teacher') FROM policies "
        "WHERE policy_id = ?",
        params=[policy_id],
    ).fetchall()[0]
    return OPTIMUS_EVENTS if teacher == "optimus" else None


def evaluate_chic_stage(
    warehouse: str | Path | None, cfg: ChicEvalConfig, progress: Reporter = QUIET
) -> ChicEvalResult:
    """Evaluate the newest Chic / Chic-Pair policies and Optimus at every rate (eval_runs,
    eval_jobs, eval_summary; one `chic_evaluation` row per system and rate)."""
    with connect(warehouse) as con:
        usable = newest_usable(
            con,
            (
                (
                    (variant, rate),
                    lambda v=variant, r=rate: latest_chic_policy(con, v, r),
                    policy_from_checkpoint,
                )
                for variant in ("chic", "chic-pair")
                for rate in sorted({*cfg.rates, cfg.reference_rate})
            ),
        )
        policies = {key: resumed.policy_id for key, resumed in usable.items()}
        loaded = {resumed.policy_id: resumed.policy for resumed in usable.values()}
        teachers = {pid: t for pid in loaded if (t := warm_start_teacher(con, pid)) is not None}
    eval_id = (
        "chic-eval-"
        + input_key(
            canonical_json(asdict(cfg)), canonical_json(sorted(map(list, policies.items())))
        )[:16]
    )

    def stored(con) -> ChicEvalResult | None:
        frame = read_frame(con, "SELECT * FROM chic_evaluation WHERE eval_id = ?", [eval_id])
        return _summary(eval_id, frame) if frame.height else None

    def result(con, tables: EvalTables) -> ChicEvalResult:
        frame = read_frame(con, "SELECT * FROM chic_evaluation WHERE eval_id = ?", [eval_id])
        acts: dict[str, dict[float, list[float]]] = {}
        for rate in cfg.rates:
            of_rate = tables.runs.filter(pl.col("workload_set") == chic_set(rate))
            for (system,), part in of_rate.group_by("scheduler", maintain_order=True):
                by_sequence = part.sort("sequence_no")["avg_jct_s"].to_list()
                acts.setdefault(system, {})[float(rate)] = by_sequence
        return replace(_summary(eval_id, frame), sequence_acts=acts)

    return evaluate_once(
        warehouse,
        stored=stored,
        tables=lambda advance: chic_tables(cfg, policies, loaded, eval_id, advance, teachers),
        result=result,
        bar="Chic evaluation: arrival rates",
        steps=len(cfg.rates),
        progress=progress,
    )


def _summary(eval_id: str, frame: pl.DataFrame) -> ChicEvalResult:
    act: dict[str, dict[float, float]] = {}
    imp: dict[str, dict[float, float]] = {}
    for row in frame.iter_rows(named=True):
        act.setdefault(row["system"], {})[row["rate_per_hour"]] = row["avg_jct_s"]
        imp.setdefault(row["system"], {})[row["rate_per_hour"]] = row["improvement_vs_optimus_600"]
    return ChicEvalResult(eval_id, frame.height, act, imp)


# -- the arena ---------------------------------------------------------------------------


def _resume_fitting(con, parent: str | None, cem: CEMConfig) -> Resumed:
    """The policy to start from if its network has the training's shape; else scratch,
    with a note saying why."""
    resumed = resume_from(con, parent, policy_from_checkpoint)
    if resumed.policy is not None and resumed.policy.net.cfg != cem.net_config:
        note = (
            f"{resumed.policy_id} has network {resumed.policy.net.cfg}, the training "
            f"{cem.net_config}: trained from scratch"
        )
        return Resumed(None, None, "; ".join(filter(None, [resumed.note, note])))
    return resumed


def train_chic_arena_stage(
    warehouse: str | Path | None,
    cfg: ChicArenaConfig,
    variant: str = "chic",
    progress: Reporter = QUIET,
) -> TrainResult:
    """Train one variant in the arena with the modified CEM; register the best validated
    policy as system "<variant>-arena" (child of the policy it started from)."""
    system = variant + ARENA
    cem = cfg.cem_config(variant)
    train_jobs, val_jobs = arena_splits(warehouse, cfg)
    train = arena_sequences(train_jobs, cfg.jobs_per_episode)
    validation = arena_sequences(val_jobs, None)
    name = ("Chic" if variant == "chic" else "Chic-Pair") + " (arena)"

    return train_and_register(
        warehouse,
        system=system,
        key=input_key(cfg.init, cem, f"episode:{cfg.jobs_per_episode}", train_jobs, val_jobs),
        config=cfg,
        start=lambda con: _resume_fitting(
            con, parent_of(cfg.init, lambda: newest_policy(con, system, cfg.workload_set)), cem
        ),
        train=_cem_training(train, validation, cem, name, progress),
        bar=f"{system} CEM iterations",
        steps=cem.iterations,
        progress=progress,
        workloads=train_jobs["workload_id"].unique().to_list(),
        metrics={"workload_set": cfg.workload_set, "episodes": len(train)},
        curves=ChicLearningCurves,
    )
