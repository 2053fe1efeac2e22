"""Chic's steps in `schedlab run` (pipelines/system.py `Steps`): the cross-entropy method per
variant and arrival rate, then one evaluation against Optimus at every rate."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from prefect import task

from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import Pending, RunContext
from pipelines.systems.chic.stages import (
    ChicEvalConfig,
    ChicTrainConfig,
    evaluate_chic_stage,
    train_chic_stage,
)
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


@task(name="chic-evaluate", **IO_RETRIES)
def evaluate_task(warehouse: str | None, cfg: ChicEvalConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage("Chic evaluation"):
        return asdict(evaluate_chic_stage(warehouse, cfg, progress))


def train(run: RunContext, cfg: ChicRunConfig, pending: Pending) -> Pending:
    """One CEM training per variant and rate."""
    return {
        "train": {
            f"{t.variant}@{t.rate_per_hour:g}": train_task.submit(run.warehouse, t, run.progress)
            for t in cfg.train_configs()
        }
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
            keep = [c for c in frame.columns if c not in ("config", "code_version")]
            section.tables.append(frame_table("chic_evaluation", frame.select(keep)))
    return [section]


def config() -> ChicRunConfig:
    """Chic's run config at the default budget."""
    return ChicRunConfig()


def prepare(run: RunContext, cfg: ChicRunConfig) -> Pending:
    """Nothing: each training is independent."""
    return {}


def arena(pending: Pending) -> dict[str, str]:
    """Nothing yet: Chic is evaluated in its own scenario only."""
    return {}


def loaders() -> dict:
    """None of its policies runs in the evaluation on every workload set yet."""
    return {}
