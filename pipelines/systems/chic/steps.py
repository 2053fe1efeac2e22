"""Chic's steps in `schedlab run` (pipelines/system.py `Steps`): the cross-entropy method per
variant and arrival rate, then one evaluation against Optimus at every rate; and the
cross-entropy method in the arena's DL2 setting on each arena set, whose policies (systems
"chic-arena", "chic-pair-arena") run in the evaluation on every workload set (`arena`,
`loaders`)."""

from __future__ import annotations

from models.chic.stage_config import ChicRunConfig
from models.evaluation import EvalConfig, LearnedPolicy, Loader
from pipelines.sections import Section
from pipelines.system import ArenaPolicies, Pending, RunContext, arena_configs
from pipelines.system_steps import (
    nothing,
    of_system,
    placed,
    policy_ids,
    results,
    submit_stage,
    view_section,
)
from pipelines.systems.chic.stages import (
    evaluate_chic_stage,
    train_chic_arena_stage,
    train_chic_stage,
)
from tracelib.sim import DecisionPolicy


def train(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> Pending:
    """One CEM training per variant and rate, and one per variant and arena set."""
    variants = cfg.arena.variants if cfg.arena.iterations > 0 else ()
    by_set = arena_configs(run, cfg.arena)
    return {
        "train": {
            f"{t.variant}@{t.rate_per_hour:g}": submit_stage(
                "chic-train",
                f"{t.variant} CEM training at {t.rate_per_hour:g}/h",
                train_chic_stage,
                run,
                t,
            )
            for t in cfg.train_configs()
        },
        "arena": {
            v: {
                name: submit_stage(
                    "chic-arena-train",
                    f"{v} CEM training in the arena ({name})",
                    train_chic_arena_stage,
                    run,
                    one,
                    v,
                )
                for name, one in by_set.items()
            }
            for v in variants
        },
    }


def evaluate(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> Pending:
    """The evaluation at every rate, after every training."""
    wait = pending["train"].values()
    evaluation = submit_stage(
        "chic-evaluate", "Chic evaluation", evaluate_chic_stage, run, cfg.eval, wait_for=wait
    )
    return {"evaluation": evaluation}


def collect(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> dict:
    """Every trained policy and the evaluation."""
    return results(pending)


def report(con) -> list[Section]:
    """The evaluation against Optimus at every arrival rate (the sequences' seeds are a
    list of 30 numbers per row: in SQL, not in the report)."""
    section = Section(
        "Chic and Chic-Pair: configuration by the cross-entropy method",
        "Chic and Chic-Pair against Optimus (600 s and 300 s) in Chic's scenario, at every "
        "arrival rate.",
        empty="No Chic evaluation has been stored yet.",
    )
    return view_section(
        con, section, "chic_evaluation", ("config", "sequence_seeds", "code_version")
    )


def config() -> ChicRunConfig:
    """Chic's run config at the default budget."""
    return ChicRunConfig()


prepare = nothing
"""Nothing to prepare: each training is independent."""


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """Each variant trained in the arena, by scheduler name ("chic", "chic-pair"), per set."""
    return {v: policy_ids(by_set) for v, by_set in pending.get("arena", {}).items()}


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """An arena Chic / Chic-Pair checkpoint allocating in the evaluation, placed by the
    evaluation's default placement (load balancing, as in its training). Where every job
    is visible (the whole-trace replay: no window) it schedules them I at a time
    (`ChicArenaPolicy.batches`)."""
    from models.chic.policy import load_policy

    policy = of_system(load_policy(ref.checkpoint_path, sha256=ref.sha256), ref)
    arena = policy.arena(name=ref.policy_id)
    arena.batches = cfg.window is None
    return placed(arena, cfg)


def loaders() -> dict[str, Loader]:
    """Arena Chic and Chic-Pair checkpoints allocate in the evaluation."""
    return dict.fromkeys(("chic-arena", "chic-pair-arena"), load_arena_policy)
