"""RL-TAPS in `schedlab run`: its options, budgets and end-summary lines (its steps:
`steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from pipelines.system import LearnedSystem

if TYPE_CHECKING:
    from pipelines.systems.rltaps.steps import RLTapsRunConfig


@dataclass(frozen=True)
class RLTapsOptions:
    """RL-TAPS' `schedlab run` options."""

    epochs: int | None = None
    """RL-TAPS REINFORCE epochs per training mode (default: the budget's; 0 skips RL-TAPS)"""
    arena_epochs: int | None = None
    """RL-TAPS arena REINFORCE epochs on the synthetic workload set (default: the budget's;
    0 skips the arena policy)"""
    as_published: bool = False
    """train RL-TAPS in its own scenario from random weights, as the paper, instead of
    first imitating SJF's decisions (the measured default)"""


BUDGETS = {
    "smoke": {
        "stage.n_jobs": 10,
        "stage.epochs": 1,
        "stage.train_sequences": 1,
        "stage.val_sequences": 1,
        "stage.episodes": 2,
        "stage.batch_sequences": 1,
        "stage.test_sequences": 2,
        "stage.imitation_epochs": 1,
        "arena.epochs": 1,
        "arena.episodes": 2,
        "arena.train_sequences": 1,
        "arena.val_sequences": 1,
    },
    "large": {
        "stage.epochs": 50,
        "stage.train_sequences": 20,
        "stage.episodes": 20,
        "stage.test_sequences": 30,
        "arena.epochs": 20,
        "arena.episodes": 8,
        "arena.train_sequences": None,
        "arena.val_sequences": None,
    },
}


def apply(cfg: RLTapsRunConfig, opts: RLTapsOptions) -> RLTapsRunConfig | None:
    """The options on the budget's config; 0 epochs skip RL-TAPS, 0 arena epochs its arena
    policy."""
    if opts.epochs is not None:
        cfg = replace(cfg, stage=replace(cfg.stage, epochs=opts.epochs))
    if opts.as_published:
        cfg = replace(cfg, stage=cfg.stage.as_published())
    if opts.arena_epochs is not None and cfg.arena is not None:
        arena = replace(cfg.arena, epochs=opts.arena_epochs) if opts.arena_epochs > 0 else None
        cfg = replace(cfg, arena=arena)
    return cfg if cfg.stage.epochs > 0 else None


ARENA_STREAM = 1
"""Spawn key of the arena training's seed under RL-TAPS' seed."""


def seeded(cfg: RLTapsRunConfig, seed: int, workload_set: str) -> RLTapsRunConfig:
    """RL-TAPS generates its own sequences: only the seed is pushed in; its arena policy
    trains on the run's synthetic workload set, from a seed spawned from it."""
    cfg = replace(cfg, stage=replace(cfg.stage, seed=seed))
    if cfg.arena is None:
        return cfg
    child = np.random.SeedSequence(seed, spawn_key=(ARENA_STREAM,))
    arena_seed = int(child.generate_state(1)[0])
    return replace(cfg, arena=replace(cfg.arena, seed=arena_seed, workload_set=workload_set))


def summary_lines(summary: dict) -> list[str]:
    """Each policy, each scheduler's mean slowdown and reward, and the arena policy."""
    lines = []
    for mode, result in summary["train"].items():
        m = result["metrics"]
        start = result["parent_policy_id"] or "scratch"
        shipped = " (shipped with the code)" if m.get("started_from") == "shipped" else ""
        cached = " (already trained on these inputs)" if m.get("cached") else ""
        lines.append(
            f"  RL-TAPS {mode} {result['policy_id']}{cached}: validation slowdown "
            f"{m['initial_val_slowdown']:.2f} -> {m['val_slowdown']:.2f}, from {start}{shipped}"
        )
    for workload_set, arena in (summary.get("arena") or {}).items():
        m = arena["metrics"]
        cached = " (already trained on these inputs)" if m.get("cached") else ""
        lines.append(
            f"  RL-TAPS arena on {workload_set} {arena['policy_id']}{cached}: validation JCT "
            f"{m['initial_val_avg_jct_s']:,.0f} s -> {m['val_avg_jct_s']:,.0f} s, "
            f"from {arena['parent_policy_id'] or 'scratch'}, {m['wall_s']:.0f} s"
        )
    evaluation = summary["evaluation"]
    stored = " (already evaluated on these inputs: nothing simulated)"
    lines.append(
        f"  RL-TAPS evaluation {evaluation['run_id']}{stored if evaluation.get('cached') else ''}"
    )
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
