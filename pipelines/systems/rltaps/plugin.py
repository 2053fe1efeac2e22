"""RL-TAPS in `schedlab run`: its options, budgets and end-summary lines (its steps:
`steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipelines.system import LearnedSystem

if TYPE_CHECKING:
    from pipelines.systems.rltaps.steps import RLTapsRunConfig


@dataclass(frozen=True)
class RLTapsOptions:
    """RL-TAPS' `schedlab run` options."""

    epochs: int | None = None
    """RL-TAPS REINFORCE epochs per training mode (default: the budget's; 0 skips RL-TAPS)"""


BUDGETS = {
    "smoke": {
        "stage.n_jobs": 10,
        "stage.epochs": 1,
        "stage.train_sequences": 1,
        "stage.val_sequences": 1,
        "stage.episodes": 2,
        "stage.batch_sequences": 1,
        "stage.test_sequences": 2,
    },
    "large": {
        "stage.epochs": 50,
        "stage.train_sequences": 20,
        "stage.episodes": 20,
        "stage.test_sequences": 30,
    },
}


def apply(cfg: RLTapsRunConfig, opts: RLTapsOptions) -> RLTapsRunConfig | None:
    """The options on the budget's config; 0 epochs skip RL-TAPS."""
    if opts.epochs is not None:
        cfg = replace(cfg, stage=replace(cfg.stage, epochs=opts.epochs))
    return cfg if cfg.stage.epochs > 0 else None


def seeded(cfg: RLTapsRunConfig, seed: int, workload_set: str) -> RLTapsRunConfig:
    """RL-TAPS generates its own sequences: only the seed is pushed in."""
    return replace(cfg, stage=replace(cfg.stage, seed=seed))


def summary_lines(summary: dict) -> list[str]:
    """Each policy, and each scheduler's mean slowdown and reward."""
    lines = [f"  RL-TAPS {mode} {result['policy_id']}" for mode, result in summary["train"].items()]
    evaluation = summary["evaluation"]
    for name, slowdown in evaluation["mean_slowdown"].items():
        lines.append(
            f"    rl-taps {name:<22} mean slowdown {slowdown:6.2f}, mean reward "
            f"{evaluation['mean_reward'][name]:8.2f}"
        )
    return lines


def steps():
    """RL-TAPS' steps (imports torch and Prefect)."""
    from pipelines.systems.rltaps import steps

    return steps


RLTAPS = LearnedSystem(
    name="rl-taps",
    key="rltaps",
    options=RLTapsOptions,
    budgets=BUDGETS,
    apply=apply,
    seeded=seeded,
    summary_lines=summary_lines,
    steps=steps,
)
