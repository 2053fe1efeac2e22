"""RL-TAPS' steps in `schedlab run` (pipelines/system.py `Steps`): REINFORCE in each training
mode, then the evaluation against the Random, SJF and Tetris job pickers."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from prefect import task

from models.rltaps.config import MODES
from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import Pending, RunContext
from pipelines.systems.rltaps.stages import (
    RLTapsStageConfig,
    evaluate_rltaps_stage,
    train_rltaps_stage,
)
from warehouse import read_frame


@dataclass(frozen=True)
class RLTapsRunConfig:
    """RL-TAPS in `schedlab run`: one policy per training mode, then the evaluation."""

    stage: RLTapsStageConfig = field(default_factory=RLTapsStageConfig)
    modes: tuple[str, ...] = MODES

    def train_configs(self) -> list[RLTapsStageConfig]:
        """One training config per mode."""
        return [replace(self.stage, mode=m) for m in self.modes]


@task(name="rltaps-train", **IO_RETRIES)
def train_task(warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"RL-TAPS training {cfg.mode}"):
        return asdict(train_rltaps_stage(warehouse, cfg, progress))


@task(name="rltaps-evaluate", **IO_RETRIES)
def evaluate_task(
    warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("RL-TAPS evaluation"):
        return asdict(evaluate_rltaps_stage(warehouse, cfg, progress))


def train(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> Pending:
    """One REINFORCE training per mode."""
    return {
        "train": {
            t.mode: train_task.submit(run.warehouse, t, run.progress) for t in cfg.train_configs()
        }
    }


def evaluate(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> Pending:
    """The evaluation against the job pickers, after every training."""
    wait = list(pending["train"].values())
    return {
        "evaluation": evaluate_task.submit(run.warehouse, cfg.stage, run.progress, wait_for=wait)
    }


def collect(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> dict:
    """Every trained policy and the evaluation."""
    return {
        "train": {k: f.result() for k, f in pending["train"].items()},
        "evaluation": pending["evaluation"].result(),
    }


def report(con) -> list[Section]:
    """The evaluation against the job pickers."""
    section = Section(
        "RL-TAPS: topology-aware GPU assignment",
        "RL-TAPS (both training modes) against the Random, SJF and Tetris job pickers with "
        "first-fit GPUs, on held-out job sequences.",
        empty="No RL-TAPS evaluation has been stored yet.",
    )
    if exists(con, "rltaps_evaluation"):
        frame = read_frame(con, "SELECT * FROM rltaps_evaluation ORDER BY ALL")
        if frame.height:
            keep = [c for c in frame.columns if c not in ("config", "code_version")]
            section.tables.append(frame_table("rltaps_evaluation", frame.select(keep)))
    return [section]


def config() -> RLTapsRunConfig:
    """RL-TAPS' run config at the default budget."""
    return RLTapsRunConfig()


def prepare(run: RunContext, cfg: RLTapsRunConfig) -> Pending:
    """Nothing: each mode trains independently."""
    return {}


def arena(pending: Pending) -> dict[str, str]:
    """Nothing yet: RL-TAPS is evaluated in its own scenario only."""
    return {}


def loaders() -> dict:
    """None of its policies runs in the evaluation on every workload set yet."""
    return {}
