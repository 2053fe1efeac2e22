"""Harmony in `schedlab run`: its options, budgets and end-summary lines (its steps:
`steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from models.harmony.config import (
    HarmonyNetConfig,
    HarmonySearchConfig,
    PlacementTrainConfig,
    RewardTrainConfig,
)
from pipelines.system import Nested, plugin
from pipelines.systems.harmony.lines import gavel_line, skipped_line

if TYPE_CHECKING:
    from models.harmony.stage_config import HarmonyRunConfig


@dataclass(frozen=True)
class HarmonyOptions:
    """Harmony's `schedlab run` options."""

    updates: int | None = None
    """Harmony placement-DRL updates per policy (default: the budget's; 0 skips Harmony)"""
    arena_updates: int | None = None
    """updates of Harmony's placement policy trained for the evaluation on every workload
    set (default: the budget's; 0 leaves Harmony out of that evaluation)"""
    gavel: str | None = None
    """Gavel throughputs JSON: ingest its measured co-locations and fit a predictor per GPU
    type (every key of the file), printed beside LIF's and gradient boosting's error"""
    online_update: bool = False
    """after evaluating, re-fit Harmony's networks on the speeds the evaluation observed"""


def _why_kept(metrics: dict) -> str:
    """Why training kept its starting clone, with the best update's validation ratio."""
    best = metrics.get("best_update_val_ratio_to_start")
    if best is None:
        return "no update beat it on validation"
    high = metrics.get("best_update_val_ratio_high")
    interval = "no interval" if high is None else f"upper end {high:.3f}"
    return (
        f"no update significantly better on validation (the best {best:.3f} times its JCT, "
        f"{interval})"
    )


BUDGETS = {
    "smoke": {
        "stage.reward.epochs": 2,
        "stage.train.updates": 4,
        "stage.train.val_every": 2,
        "stage.train.n_workers": 2,
        "stage.n_train_sequences": 1,
        "stage.n_val_sequences": 1,
        "stage.eval.n_sequences": 1,
        "stage.eval.n_validation": 1,
        # A third of the default sequence: the smoke run only shows every stage works.
        "stage.arrivals.n_jobs": 10,
        "stage.eval.arrivals.n_jobs": 10,
        "arena.train.updates": 2,
        "arena.train.val_every": 1,
        "arena.train_sequences": 1,
        "arena.val_sequences": 1,
    },
    "large": {
        "stage.reward.epochs": 200,
        "stage.train.updates": 2000,
        "stage.train.val_every": 200,
        # The default's 96 training sequences: 192 made no better clone (stage config).
        "stage.n_val_sequences": 12,
        "stage.eval.n_sequences": 32,
        "arena.train.updates": 1500,
        "arena.train.val_every": 150,
        "arena.train_sequences": None,
    },
}


_RUN_LEVEL = frozenset({"net", "sim", "search", "seed", "updates"})
"""What the stage fills into the placement trainer's config (`train_config()`) or holds as
a nested config of its own: the networks, the simulator (Harmony's testbed; the arena's
setting), the searched teacher's config, the seed; and the updates, which `--harmony-updates`
and `--harmony-arena-updates` set."""

_NET_RUN_LEVEL = frozenset({"window", "n_servers"})
"""The networks' window and servers: the simulator's."""

NESTED = {
    "stage.reward": Nested(RewardTrainConfig),
    "stage.train": Nested(
        PlacementTrainConfig, _RUN_LEVEL | {"value_net", "exploration", "replay"}
    ),
    "stage.train.net": Nested(HarmonyNetConfig, _NET_RUN_LEVEL),
    "stage.train.search": Nested(HarmonySearchConfig),
    "arena.train": Nested(PlacementTrainConfig, _RUN_LEVEL),
    "arena.train.net": Nested(HarmonyNetConfig, _NET_RUN_LEVEL),
    "arena.train.search": Nested(HarmonySearchConfig),
}
"""Harmony's nested configs whose fields are flags (`--harmony-stage-train-lr`,
`--harmony-stage-reward-epochs`, `--harmony-arena-train-net-head`): the reward predictor's
training, the placement actor-critic in its own scenario and in the arena, their networks
and searched teachers. Besides what the stage derives: in its own scenario the value net,
exploration and replay switches are each variant's (`VARIANTS`, Table II's ablations)."""


def apply(cfg: HarmonyRunConfig, opts: HarmonyOptions) -> HarmonyRunConfig | None:
    """The options on the budget's config; 0 updates skip Harmony."""
    stage = replace(cfg.stage, gavel_path=opts.gavel)
    if opts.updates is not None:
        train = replace(
            stage.train,
            updates=opts.updates,
            val_every=min(stage.train.val_every, max(opts.updates, 1)),
        )
        stage = replace(stage, train=train)
    if stage.train.updates <= 0:
        return None
    arena = cfg.arena
    if opts.arena_updates is not None:
        updates = opts.arena_updates
        train = replace(
            arena.train, updates=updates, val_every=min(arena.train.val_every, max(updates, 1))
        )
        arena = replace(arena, train=train)
    return replace(cfg, stage=stage, arena=arena, online_update=opts.online_update)


def seeded(cfg: HarmonyRunConfig, seed: int, workload_set: str) -> HarmonyRunConfig:
    """Harmony generates its own sequences, its held-out ones from the run's seed too (with
    one fixed set, runs of different seeds were judged on the same sequences, and pooling
    their pairs counted each sequence as many times as there were runs); its arena policy
    trains on the run's synthetic workload set."""
    # Imported here: the plugin is read at every CLI start, the scenario loads the simulator.
    from tracelib.scenarios.harmony import split_seed

    evaluation = replace(cfg.stage.eval, seed=split_seed(seed, "evaluation"))
    return replace(
        cfg,
        stage=replace(cfg.stage, seed=seed, eval=evaluation),
        arena=replace(cfg.arena, seed=seed, workload_set=workload_set),
    )


def summary_lines(summary: dict) -> list[str]:
    """The predictor's error (and per Gavel GPU type beside LIF's and gradient boosting's),
    each policy, and the evaluation's average JCTs."""
    reward = summary["reward"]["reward_model"]
    error = reward["metrics"].get("test_rel_error")
    error_text = f"held-out relative error {error:.1%}" if error is not None else ""
    lines = [f"  Harmony reward model {reward['policy_id']}: {error_text}"]
    for gpu, errors in summary["reward"].get("gavel_errors", {}).items():
        lines.append(f"    {gavel_line(gpu, errors)}")
    for key, reason in summary["reward"].get("gavel_skipped", {}).items():
        lines.append(f"    {skipped_line(key, reason)}")
    arena = {f"harmony-arena on {k}": r for k, r in (summary.get("arena") or {}).items()}
    for name, result in {**summary["placement"], **arena}.items():
        metrics = result.get("metrics") or {}
        start = result["parent_policy_id"] or metrics.get("started_from") or "scratch"
        if (
            metrics.get("imitation_held_out_accuracy") is not None
            and not result["parent_policy_id"]
        ):
            start += f", held-out accuracy {metrics['imitation_held_out_accuracy']:.2f}"
            if metrics.get("teacher_train_ratio_to_lif_quad") is not None:
                start += (
                    f"; the searched runs {metrics['teacher_train_ratio_to_lif_quad']:.3f}"
                    " times LIF-Quad's JCT on the training sequences"
                )
            if metrics.get("best_val_step") == 0:
                start += "; kept: " + _why_kept(metrics)
        lines.append(f"  {name} {result['policy_id']} (from {start})")
    for row in summary["evaluation"]["summary"]:
        lines.append(
            f"    harmony {row['pattern']:<8} {row['scheduler']:<28} avg JCT "
            f"{row['avg_jct_s']:>9,.0f} s"
        )
    return lines


HARMONY = plugin(__name__, name="harmony", key="harmony", options=HarmonyOptions)
