"""RL-TAPS in `schedlab run`: its options, budgets and end-summary lines (its steps:
`steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from models.rltaps.config import ArenaTrainConfig, ReinforceConfig
from pipelines.system import Nested, plugin, trained_line
from tracelib.configs import resized
from tracelib.envs.gpu import GpuEnvConfig, GpuObsConfig
from tracelib.envs.gpu_arena import ArenaEnvConfig
from tracelib.sim.topology import TopologyConfig

if TYPE_CHECKING:
    from models.rltaps.stage_config import RLTapsRunConfig


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
        "stage.reinforce.n_jobs": 10,
        "stage.reinforce.epochs": 1,
        "stage.reinforce.train_sequences": 1,
        "stage.reinforce.val_sequences": 1,
        "stage.reinforce.episodes": 2,
        "stage.reinforce.batch_sequences": 1,
        "stage.test_sequences": 2,
        "stage.validation_sequences": 1,
        "stage.reinforce.imitation_epochs": 1,
        "arena.reinforce.epochs": 1,
        "arena.reinforce.episodes": 2,
        "arena.train_sequences": 1,
        "arena.val_sequences": 1,
    },
    "large": {
        "stage.reinforce.epochs": 50,
        "stage.reinforce.train_sequences": 20,
        "stage.reinforce.episodes": 20,
        "stage.test_sequences": 30,
        "arena.reinforce.epochs": 20,
        "arena.reinforce.episodes": 8,
        "arena.train_sequences": None,
        "arena.val_sequences": None,
    },
}

NESTED = {
    "stage.reinforce": Nested(ReinforceConfig, frozenset({"mode", "env", "seed", "epochs"})),
    "stage.reinforce.env": Nested(GpuEnvConfig, frozenset({"obs", "topology"})),
    "stage.reinforce.env.obs": Nested(GpuObsConfig),
    "stage.reinforce.env.topology": Nested(TopologyConfig),
    "arena.reinforce": Nested(ArenaTrainConfig, frozenset({"sim", "env", "seed", "epochs"})),
    "arena.reinforce.env": Nested(ArenaEnvConfig, frozenset({"cluster", "window"})),
}
"""RL-TAPS' nested configs whose fields are flags (`--rltaps-stage-reinforce-lr`,
`--rltaps-arena-reinforce-env-ps-rule`): REINFORCE in its own scenario (with its
environment, state image and topology, the evaluation's too) and in the arena (with its
decision's state). Besides what the stage fills in (the mode, the seed, the arena's
simulator and the decision's cluster and window from it), `--rltaps-epochs` and
`--rltaps-arena-epochs` set the epochs."""


def apply(cfg: RLTapsRunConfig, opts: RLTapsOptions) -> RLTapsRunConfig | None:
    """The options on the budget's config; 0 epochs skip RL-TAPS, 0 arena epochs its arena
    policy."""
    if opts.epochs is not None and opts.epochs <= 0:
        return None
    if opts.epochs is not None:
        cfg = resized(cfg, {"stage.reinforce.epochs": opts.epochs})
    if opts.as_published:
        cfg = replace(cfg, stage=cfg.stage.as_published())
    if opts.arena_epochs is not None and cfg.arena is not None:
        if opts.arena_epochs > 0:
            cfg = resized(cfg, {"arena.reinforce.epochs": opts.arena_epochs})
        else:
            cfg = replace(cfg, arena=None)
    return cfg


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
        lines.append(
            f"{trained_line(f'RL-TAPS {mode}', result)}: validation slowdown "
            f"{m['initial_val_slowdown']:.2f} -> {m['val_slowdown']:.2f}, from {start}{shipped}"
        )
    for workload_set, arena in (summary.get("arena") or {}).items():
        m = arena["metrics"]
        lines.append(
            f"{trained_line(f'RL-TAPS arena on {workload_set}', arena)}: validation JCT "
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


RLTAPS = plugin(__name__, name="rl-taps", key="rltaps", options=RLTapsOptions)
