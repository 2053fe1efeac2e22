"""RL-TAPS' steps in `schedlab run` (pipelines/system.py `Steps`): REINFORCE in each training
mode, then the evaluation against the Random, SJF and Tetris job pickers in its own scenario;
and REINFORCE of its arena policy (`rl-taps-arena`), which runs in the evaluation on every
workload set under the scheduler name "rl-taps"."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from prefect import task

from models.rltaps.config import MODES
from pipelines.evaluation import EvalConfig, LearnedPolicy, Loader, NotApplicable
from pipelines.progress import QUIET, Reporter
from pipelines.retries import IO_RETRIES
from pipelines.sections import Section, exists, frame_table
from pipelines.system import ArenaPolicies, Pending, RunContext, arena_configs
from pipelines.systems.rltaps.stages import (
    RLTapsArenaConfig,
    RLTapsStageConfig,
    evaluate_rltaps_stage,
    train_arena_stage,
    train_rltaps_stage,
)
from tracelib.sim import DecisionPolicy
from warehouse import read_frame


@dataclass(frozen=True)
class RLTapsRunConfig:
    """RL-TAPS in `schedlab run`: one policy per training mode, then the evaluation in its
    own scenario; and its arena policy (None: not trained)."""

    stage: RLTapsStageConfig = field(default_factory=RLTapsStageConfig)
    modes: tuple[str, ...] = MODES
    arena: RLTapsArenaConfig | None = field(default_factory=RLTapsArenaConfig)

    def train_configs(self) -> list[RLTapsStageConfig]:
        """One training config per mode."""
        return [replace(self.stage, mode=m) for m in self.modes]


@task(name="rltaps-train", **IO_RETRIES)
def train_task(warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"RL-TAPS training {cfg.mode}"):
        return asdict(train_rltaps_stage(warehouse, cfg, progress))


@task(name="rltaps-arena-train", **IO_RETRIES)
def arena_task(warehouse: str | None, cfg: RLTapsArenaConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"RL-TAPS arena training ({cfg.workload_set})"):
        return asdict(train_arena_stage(warehouse, cfg, progress))


@task(name="rltaps-evaluate", **IO_RETRIES)
def evaluate_task(
    warehouse: str | None, cfg: RLTapsStageConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage("RL-TAPS evaluation"):
        return asdict(evaluate_rltaps_stage(warehouse, cfg, progress))


def train(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> Pending:
    """One REINFORCE training per mode, and the arena training on each arena set."""
    out: Pending = {
        "train": {
            t.mode: train_task.submit(run.warehouse, t, run.progress) for t in cfg.train_configs()
        }
    }
    if cfg.arena is not None:
        out["arena"] = {
            name: arena_task.submit(run.warehouse, one, run.progress)
            for name, one in arena_configs(run, cfg.arena).items()
        }
    return out


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
        "arena": {name: f.result() for name, f in pending.get("arena", {}).items()},
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


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """Its arena policy per set, as scheduler "rl-taps" (when trained)."""
    if "arena" not in pending:
        return {}
    return {"rl-taps": {name: f.result()["policy_id"] for name, f in pending["arena"].items()}}


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """An `rl-taps-arena` checkpoint assigning the GPUs of the evaluation's cluster, its
    PSs placed by the evaluation's default placement (DL2's: load balancing). It runs only
    on the cluster and window it was trained for (its network reads that cluster's image)."""
    from models.heuristics.registry import PLACEMENTS
    from models.rltaps.arena import load_arena_policy as load

    policy = load(ref.checkpoint_path, sha256=ref.sha256)
    if policy.system != ref.system:
        raise NotApplicable(f"{ref.policy_id}: checkpoint of system {policy.system!r}")
    if policy.env.cluster != cfg.cluster or policy.env.window != cfg.window:
        raise NotApplicable(
            f"{ref.policy_id}: trained for {policy.env.cluster} with window "
            f"{policy.env.window}; the evaluation runs {cfg.cluster} with window {cfg.window}"
        )
    policy.ps_placement = PLACEMENTS.create(cfg.default_placement)
    policy.name = f"{ref.policy_id}+{policy.ps_placement.name}"
    return policy


def loaders() -> dict[str, Loader]:
    """Its arena checkpoints assign GPUs in the evaluation."""
    return {"rl-taps-arena": load_arena_policy}
