"""RL-TAPS' steps in `schedlab run` (pipelines/system.py `Steps`): REINFORCE in each training
mode, then the evaluation against the Random, SJF and Tetris job pickers in its own scenario;
and REINFORCE of its arena policy (`rl-taps-arena`), which runs in the evaluation on every
workload set under the scheduler name "rl-taps"."""

from __future__ import annotations

from models.evaluation import EvalConfig, LearnedPolicy, Loader, NotApplicable
from models.rltaps.stage_config import RLTapsRunConfig
from pipelines.sections import Section
from pipelines.system import ArenaPolicies, Pending, RunContext, arena_configs
from pipelines.system_steps import (
    arena_entry,
    nothing,
    of_system,
    results,
    submit_stage,
    view_section,
)
from pipelines.systems.rltaps.stages import (
    evaluate_rltaps_stage,
    train_arena_stage,
    train_rltaps_stage,
)
from tracelib.sim import DecisionPolicy


def train(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> Pending:
    """One REINFORCE training per mode, and the arena training on each arena set."""
    out: Pending = {
        "train": {
            t.mode: submit_stage(
                "rltaps-train", f"RL-TAPS training {t.mode}", train_rltaps_stage, run, t
            )
            for t in cfg.train_configs()
        }
    }
    if cfg.arena is not None:
        out["arena"] = {
            name: submit_stage(
                "rltaps-arena-train",
                f"RL-TAPS arena training ({name})",
                train_arena_stage,
                run,
                one,
            )
            for name, one in arena_configs(run, cfg.arena).items()
        }
    return out


def evaluate(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> Pending:
    """The evaluation against the job pickers, after every training."""
    wait = pending["train"].values()
    evaluation = submit_stage(
        "rltaps-evaluate",
        "RL-TAPS evaluation",
        evaluate_rltaps_stage,
        run,
        cfg.stage,
        wait_for=wait,
    )
    return {"evaluation": evaluation}


def collect(run: RunContext, cfg: RLTapsRunConfig, pending: Pending) -> dict:
    """Every trained policy and the evaluation."""
    return {"arena": {}, **results(pending)}


def report(con) -> list[Section]:
    """The evaluation against the job pickers."""
    section = Section(
        "RL-TAPS: topology-aware GPU assignment",
        "RL-TAPS (both training modes) against the Random, SJF and Tetris job pickers with "
        "first-fit GPUs, on held-out job sequences.",
        empty="No RL-TAPS evaluation has been stored yet.",
    )
    return view_section(con, section, "rltaps_evaluation", ("config", "code_version"))


def config() -> RLTapsRunConfig:
    """RL-TAPS' run config at the default budget."""
    return RLTapsRunConfig()


prepare = nothing
"""Nothing to prepare: each mode trains independently."""


def arena(run: RunContext, pending: Pending) -> ArenaPolicies:
    """Its arena policy per set, as scheduler "rl-taps" (when trained)."""
    return arena_entry("rl-taps", pending)


def load_arena_policy(ref: LearnedPolicy, cfg: EvalConfig) -> DecisionPolicy:
    """An `rl-taps-arena` checkpoint assigning the GPUs of the evaluation's cluster, its
    PSs placed by the evaluation's default placement (DL2's: load balancing). It runs on
    the cluster and window it was trained for (its network reads that cluster's image), or,
    where every job is visible (the whole-trace replay: no window), on any cluster as
    `RLTapsArenaPolicy.transfer` describes."""
    from models.heuristics.registry import PLACEMENTS
    from models.rltaps.arena import load_arena_policy as load

    policy = of_system(load(ref.checkpoint_path, sha256=ref.sha256), ref)
    if cfg.window is None:
        policy.transfer = True
    elif policy.env.cluster != cfg.cluster or policy.env.window != cfg.window:
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
