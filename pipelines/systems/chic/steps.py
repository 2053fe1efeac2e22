"""Chic's steps in `schedlab run` (pipelines/system.py `Steps`): the cross-entropy method per
variant and arrival rate, then one evaluation against Optimus at every rate; and the
cross-entropy method in the arena's DL2 setting on each arena set, whose policies (systems
"chic-arena", "chic-pair-arena") run in the evaluation on every workload set (`arena`,
`loaders`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from prefect import task

from pipelines.evaluation import EvalConfig, LearnedPolicy, Loader, NotApplicable
from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import ArenaPolicies, Pending, RunContext, arena_configs
from pipelines.systems.chic.stages import (
    ChicArenaConfig,
    ChicEvalConfig,
    ChicTrainConfig,
    evaluate_chic_stage,
    train_chic_arena_stage,
    train_chic_stage,
)
from tracelib.sim import DecisionPolicy, Scheduler
from warehouse import read_frame


@dataclass(frozen=True)
class ChicRunConfig:
    """Chic in `schedlab run`: which variants are trained at which arrival rates (each a
    `ChicTrainConfig`), then one evaluation at every rate of `eval`."""

    train: ChicTrainConfig = field(default_factory=ChicTrainConfig)
    """Budget and MDP options shared by every trained policy."""
    variants: tuple[str, ...] = ("chic", "chic-pair")
    train_rates: tuple[float, ...] = (1.8,)
    """Arrival rates (per hour) a policy is trained at; the evaluation also runs the one
    trained at `eval.reference_rate` at every rate (the paper's generality check)."""
    eval: ChicEvalConfig = field(default_factory=ChicEvalConfig)
    arena: ChicArenaConfig = field(default_factory=ChicArenaConfig)
    """Training in the arena (the DL2 setting of the evaluation on every workload set)."""

    def train_configs(self) -> list[ChicTrainConfig]:
        """One training config per variant and rate."""
        return [
            replace(self.train, variant=v, rate_per_hour=r)
            for v in self.variants
            for r in self.train_rates
        ]


@task(name="chic-train", **IO_RETRIES)
def train_task(warehouse: str | None, cfg: ChicTrainConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"{cfg.variant} CEM training at {cfg.rate_per_hour:g}/h"):
        return asdict(train_chic_stage(warehouse, cfg, progress))


@task(name="chic-arena-train", **IO_RETRIES)
def arena_task(
    warehouse: str | None, cfg: ChicArenaConfig, variant: str, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"{variant} CEM training in the arena ({cfg.workload_set})"):
        return asdict(train_chic_arena_stage(warehouse, cfg, variant, progress))


@task(name="chic-evaluate", **IO_RETRIES)
def evaluate_task(warehouse: str | None, cfg: ChicEvalConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage("Chic evaluation"):
        return asdict(evaluate_chic_stage(warehouse, cfg, progress))


def train(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> Pending:
    """One CEM training per variant and rate, and one per variant and arena set."""
    variants = cfg.arena.variants if cfg.arena.iterations > 0 else ()
    by_set = arena_configs(run, cfg.arena)
    return {
        "train": {
            f"{t.variant}@{t.rate_per_hour:g}": train_task.submit(run.warehouse, t, run.progress)
            for t in cfg.train_configs()
        },
        "arena": {
            v: {
                name: arena_task.submit(run.warehouse, one, v, run.progress)
                for name, one in by_set.items()
            }
            for v in variants
        },
    }


def evaluate(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> Pending:
    """The evaluation at every rate, after every training."""
    wait = list(pending["train"].values())
    return {
        "evaluation": evaluate_task.submit(run.warehouse, cfg.eval, run.progress, wait_for=wait)
    }


def collect(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> dict:
    """Every trained policy and the evaluation."""
    return {
        "train": {k: f.result() for k, f in pending["train"].items()},
        "evaluation": pending["evaluation"].result(),
        "arena": {
            v: {name: f.result() for name, f in by_set.items()}
            for v, by_set in pending.get("arena", {}).items()
        },
    }


def report(con) -> list[Section]:
    """The evaluation against Optimus at every arrival rate."""
    section = Section(
        "Chic and Chic-Pair: configuration by the cross-entropy method",
        "Chic and Chic-Pair against Optimus (600 s and 300 s) in Chic's scenario, at every "
        "arrival rate.",
        empty="No Chic evaluation has been stored yet.",
    )
    if exists(con, "chic_evaluation"):
        frame = read_frame(con, "SELECT * FROM chic_evaluation ORDER BY ALL")
        if frame.height:
            # The sequences' seeds are a list of 30 numbers per row: in SQL, not in the report.
            hidden = ("config", "sequence_seeds", "code_version")
            keep = [c for c in frame.columns if c not in hidden]
            section.tables.append(frame_table("chic_evaluation", frame.select(keep)))
    return [section]


def config() -> ChicRunConfig:
    """Chic's run config at the default budget."""
    return ChicRunConfig()


def prepare(run: RunContext, cfg: ChicRunConfig) -> Pending:
    """Nothing: each training is independent."""
    return {}


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """Each variant trained in the arena, by scheduler name ("chic", "chic-pair"), per set."""
    return {
        v: {name: f.result()["policy_id"] for name, f in by_set.items()}
        for v, by_set in pending.get("arena", {}).items()
    }


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """An arena Chic / Chic-Pair checkpoint allocating in the evaluation, placed by the
    evaluation's default placement (load balancing, as in its training)."""
    from models.chic.policy import load_policy
    from models.heuristics.registry import PLACEMENTS

    policy = load_policy(ref.checkpoint_path, sha256=ref.sha256)
    if policy.system != ref.system:
        raise NotApplicable(f"{ref.policy_id}: checkpoint of system {policy.system!r}")
    return Scheduler(policy.arena(name=ref.policy_id), PLACEMENTS.create(cfg.default_placement))


def loaders() -> dict[str, Loader]:
    """Arena Chic and Chic-Pair checkpoints allocate in the evaluation."""
    return dict.fromkeys(("chic-arena", "chic-pair-arena"), load_arena_policy)
