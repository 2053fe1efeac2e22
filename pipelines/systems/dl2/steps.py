"""DL2's steps in `schedlab run` (pipelines/system.py `Steps`): record a heuristic's
decisions, imitate them (warm-up), fine-tune by actor-critic RL beside OfflineRL and the
paper's three ablations; the policies then run in the evaluation on every workload set
(`arena`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from models.dl2.config import VARIANTS
from models.dl2.search import TABLE_SYSTEM
from models.dl2.search import TEACHER as SEARCHED
from models.dl2.stage_config import DL2StageConfig
from models.evaluation import ArenaLoader, EvalConfig, LearnedPolicy, Loader
from pipelines.progress import Reporter
from pipelines.sections import Section, exists, frame_table
from pipelines.system import ArenaPolicies, Pending, RunContext
from pipelines.system_steps import nothing, of_system, placed, submit_stage
from pipelines.systems.dl2.stages import (
    RecordResult,
    finetune_stage,
    newest_teacher_configs,
    record_stage,
    table_stage,
    warmup_stage,
)
from tracelib.sim import DecisionPolicy
from warehouse import read_frame

config = DL2StageConfig
"""DL2's run config is its stages' config."""


@dataclass(frozen=True)
class Recorded(RecordResult):
    """A recording and the searched table registered from it (None: a heuristic teacher)."""

    table_policy_id: str | None = None


def _record(warehouse: str | None, cfg: DL2StageConfig, progress: Reporter) -> Recorded:
    recorded = record_stage(warehouse, cfg, progress)
    table = table_stage(warehouse, cfg, recorded.run_id, progress)
    return Recorded(**vars(recorded), table_policy_id=table.policy_id if table else None)


def _warmup(warehouse: str | None, cfg: DL2StageConfig, recorded: dict, progress: Reporter):
    return warmup_stage(warehouse, cfg, recorded["run_id"], progress)


def _finetune(
    warehouse: str | None, cfg: DL2StageConfig, warm: dict, variant: str, progress: Reporter
):
    return finetune_stage(warehouse, cfg, warm["policy_id"], variant, progress)


def _with_traces(run: RunContext, cfg: DL2StageConfig) -> DL2StageConfig:
    # Fine-tuning also learns from every production trace's workloads: a new trace changes
    # its inputs, so each variant retrains from its latest policy.
    return replace(cfg, finetune_sets=run.production_sets)


def prepare(run: RunContext, cfg: DL2StageConfig) -> Pending:
    """The recording, then the warm-up. DL2's chain (recording, warm-up, five fine-tunings)
    is the longest, so its warm-up is submitted as soon as the recording ends, ahead of the
    other systems' work. (Prefect's process runner dispatches in submission order once a
    task's inputs are ready, from as many resolver threads as workers: submitting it at the
    start would park a thread on it while a worker idles.)"""
    cfg = _with_traces(run, cfg)
    recorded = submit_stage(
        "dl2-record-decisions", f"DL2 record {cfg.teacher} decisions", _record, run, cfg
    )
    recorded.wait()
    warm = submit_stage("dl2-warmup", "DL2 supervised warm-up", _warmup, run, cfg, recorded)
    return {"record": recorded, "warmup": warm}


def train(run: RunContext, cfg: DL2StageConfig, pending: Pending) -> Pending:
    """DL2 and each variant fine-tuned from the warm-up (or its newest policy)."""
    cfg = _with_traces(run, cfg)
    return {
        "finetune": {
            name: submit_stage(
                "dl2-finetune",
                f"DL2 fine-tuning {name}",
                _finetune,
                run,
                cfg,
                pending["warmup"],
                name,
            )
            for name in ("dl2", *cfg.trained_variants())
        }
    }


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """A DL2-family checkpoint (DL2, OfflineRL, the ablations) allocating in the evaluation,
    placed by the evaluation's default placement (DL2's: load balancing)."""
    from models.dl2.policy import load_policy

    policy = load_policy(ref.checkpoint_path, sha256=ref.sha256, name=ref.policy_id)
    return placed(of_system(policy, ref), cfg)


def load_table_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """The searched table (`table_stage`) allocating in the evaluation, placed by the
    evaluation's default placement, as DL2 is."""
    from models.dl2.search import load_table

    return placed(load_table(ref.checkpoint_path, sha256=ref.sha256, name=ref.policy_id), cfg)


def teacher_of(policy: dict) -> str | None:
    """The scheduler a DL2-family policy learned from, by its name in the evaluation: the
    searched table ("dl2-table") or the heuristic its warm-up imitated ("drf", ...)."""
    teacher = policy["metrics"].get("stage_config", {}).get("teacher")
    return TABLE_SYSTEM if teacher == SEARCHED else teacher


def loaders() -> dict[str, Loader | ArenaLoader]:
    """DL2's and every variant's checkpoints allocate in the evaluation, each beside its
    teacher; the searched table runs there as a baseline."""
    return {
        **dict.fromkeys(VARIANTS, ArenaLoader(load_arena_policy, teacher=teacher_of)),
        TABLE_SYSTEM: ArenaLoader(load_table_policy, baseline=True),
    }


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """The warm-up and every fine-tuned policy, by scheduler name: one policy for every
    set, as each fine-tuning learns from the synthetic set and every production set at
    once (`finetune_sets`), the way DL2 trains one policy on its whole trace; the warm-up
    imitates the teacher on the synthetic set, and the searched teacher's table runs too
    ("dl2-table", a baseline)."""
    sets = (run.synthetic_set, *run.production_sets)
    warm = pending["warmup"].result()
    tuned = {name: f.result()["policy_id"] for name, f in pending["finetune"].items()}
    table = pending["record"].result()["table_policy_id"]
    entered = {"dl2-warmup": warm["policy_id"], **tuned}
    if table is not None:
        entered[TABLE_SYSTEM] = table
    return {name: dict.fromkeys(sets, policy_id) for name, policy_id in entered.items()}


def collect(run: RunContext, cfg: DL2StageConfig, pending: Pending) -> dict:
    """The recording, the warm-up, DL2's fine-tuning and each variant's."""
    trained = {name: f.result() for name, f in pending["finetune"].items()}
    return {
        "record": pending["record"].result(),
        "warmup": pending["warmup"].result(),
        "finetune": trained.pop("dl2"),
        "variants": trained,
    }


ABLATION_SYSTEMS = (
    "dl2",
    "dl2-without-grouped-ppo",
    "offline-rl",
    "dl2-without-critic",
    "dl2-without-exploration",
    "dl2-without-replay",
)
"""DL2, DL2 fine-tuned by the paper's actor-critic instead of grouped PPO, and what the paper
compares it with in Table 2 (each evaluated under this name)."""


def report(con) -> list[Section]:
    """DL2 against OfflineRL and its ablations on each set's newest evaluation."""
    section = Section(
        "DL2: allocation by deep reinforcement learning",
        "DL2 against OfflineRL and its ablations (paper Table 2) on the newest evaluation of "
        "each workload set.",
        empty="No DL2 policy has been evaluated yet.",
    )
    if not exists(con, "leaderboard"):
        return [section]
    names = ", ".join(f"'{s}'" for s in ABLATION_SYSTEMS)
    ablations = read_frame(
        con,
        "SELECT workload_set, scheduler, avg_jct_s / 3600 AS avg_jct_h, avg_jct_slots, "
        f"100 * improvement_over_drf AS improvement_over_drf_pct FROM leaderboard "
        f"WHERE latest AND scheduler IN ({names}) ORDER BY workload_set, avg_jct_s",
    )
    if ablations.height:
        section.tables.append(frame_table("DL2 (paper Table 2)", ablations))
    if exists(con, "dl2_teacher_configs"):
        # What the newest warm-up imitated, when its teacher was the searched one.
        teacher = newest_teacher_configs(con).select(
            "model",
            "jobs",
            optimus=pl.format("{} + {}", "start_workers", "start_ps"),
            searched=pl.format("{} + {}", "workers", "ps"),
            jct_before_s=pl.col("start_avg_jct_s").round(),
            jct_after_s=pl.col("found_avg_jct_s").round(),
            evaluations="evaluations",
        )
        if teacher.height:
            section.tables.append(
                frame_table(
                    "DL2's searched teacher: each model's workers + PSs",
                    teacher,
                    "What the newest DL2 warm-up imitates: per model, Optimus' configuration "
                    "on the training sequences and the one the search kept, with the training "
                    "sequences' average JCT before and after that model's step.",
                )
            )
    return [section]


evaluate = nothing
"""Nothing of its own: DL2's policies run in the evaluation on every workload set."""
