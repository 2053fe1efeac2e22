"""DL2 in `schedlab run`: its options, budgets and end-summary lines (its steps:
`steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from models.dl2.config import (
    DL2NetConfig,
    FinetuneConfig,
    GroupedConfig,
    RecorderConfig,
    WarmupConfig,
)
from pipelines.system import Nested, plugin, trained_line
from tracelib.configs import resized

if TYPE_CHECKING:
    from models.dl2.stage_config import DL2StageConfig


@dataclass(frozen=True)
class DL2Options:
    """DL2's `schedlab run` options."""

    updates: int | None = None
    """DL2 RL fine-tuning updates of the actor-critic (DL2 with --dl2-algorithm
    actor-critic, its ablations, OfflineRL; default: the budget's; 0 skips DL2)"""
    iterations: int | None = None
    """grouped-PPO iterations of DL2's own fine-tuning (default: the budget's)"""
    algorithm: Literal["grouped-ppo", "actor-critic"] | None = None
    """how DL2 itself is fine-tuned (default grouped-ppo; the paper's: actor-critic)"""
    warmup_epochs: int | None = None
    """DL2 supervised warm-up epochs at most (default: the budget's; early stopping)"""
    teacher: Literal["searched", "drf", "fifo", "srtf", "optimus"] | None = None
    """what DL2's warm-up imitates (default searched: each model's workers and PSs searched on
    the training sequences' JCT from Optimus'; a heuristic; the paper's: drf)"""
    baselines: bool = True
    """train DL2 by the paper's actor-critic, the OfflineRL baseline and the paper's three
    ablations beside DL2"""
    as_published: bool = False
    """train DL2 with the paper's choices instead of the measured deviations (teacher drf,
    a decision every 20-minute slot, its flat network, job-aware exploration, the plain
    actor-critic without clip or KL to the warm-up)"""


BUDGETS = {
    "smoke": {
        "finetune.max_updates": 20,
        "finetune.val_every": 10,
        "grouped.iterations": 2,
        "grouped.group_size": 2,
        "warmup.max_epochs": 2,
        "train_sequences_per_set": 2,
        "val_sequences_per_set": 1,
    },
    "large": {
        "finetune.max_updates": 20_000,
        "finetune.val_every": 1000,
        "grouped.iterations": 160,
        "warmup.max_epochs": 100,
        "train_sequences_per_set": 64,
        "val_sequences_per_set": 16,
    },
}

_RUN_LEVEL = frozenset({"net", "sim", "seed", "variant", "progress"})
"""What the stage fills into every algorithm's config (`DL2StageConfig.grouped_config`,
...) or sets per variant: no flag."""

NESTED = {
    "net": Nested(DL2NetConfig, frozenset({"window", "bundle_first"})),
    "recorder": Nested(RecorderConfig, _RUN_LEVEL | {"teacher"}),
    "warmup": Nested(WarmupConfig, _RUN_LEVEL | {"hidden", "head", "max_epochs"}),
    "finetune": Nested(FinetuneConfig, _RUN_LEVEL | {"offline", "max_updates"}),
    "grouped": Nested(GroupedConfig, _RUN_LEVEL | {"iterations"}),
}
"""DL2's nested configs whose fields are flags (`--dl2-grouped-lr`). Besides what the stage
derives: the recorder's teacher is `--dl2-teacher`, the warm-up's network is `net`'s, the
actor-critic's `offline` is what the OfflineRL variant sets, and `--dl2-warmup-epochs`,
`--dl2-updates` and `--dl2-iterations` set the budgets."""


def apply(cfg: DL2StageConfig, opts: DL2Options) -> DL2StageConfig | None:
    """The options on the budget's config; 0 updates skip DL2."""
    if opts.updates is not None and opts.updates <= 0:
        return None
    cfg = replace(cfg, variants=cfg.variants if opts.baselines else ())
    if opts.as_published:
        cfg = cfg.as_published()
    if opts.teacher is not None:
        cfg = replace(cfg, teacher=opts.teacher)
    if opts.algorithm is not None:
        cfg = replace(cfg, algorithm=opts.algorithm)
    changes: dict[str, int] = {}
    if opts.iterations is not None:
        changes["grouped.iterations"] = max(opts.iterations, 1)
    if opts.updates is not None:
        changes["finetune.max_updates"] = opts.updates
    if opts.warmup_epochs is not None:
        changes["warmup.max_epochs"] = opts.warmup_epochs
    return resized(cfg, changes)


def seeded(cfg: DL2StageConfig, seed: int, workload_set: str) -> DL2StageConfig:
    """DL2 trains on the run's synthetic workload set."""
    return replace(cfg, seed=seed, workload_set=workload_set)


def summary_lines(summary: dict) -> list[str]:
    """The decision logs and one line per trained policy."""
    rec = summary["record"]
    lines = [
        f"  DL2 decision logs ({rec['teacher']}): {rec['steps']:,} inference steps over "
        f"{rec['workloads']} training workloads",
        _policy_line("DL2 warm-up", summary["warmup"]),
        _policy_line("DL2 fine-tuned", summary["finetune"]),
    ]
    return lines + [_policy_line(name, result) for name, result in summary["variants"].items()]


def _policy_line(what: str, result: dict) -> str:
    m = result["metrics"]
    if "imitation_accuracy" in m:
        detail = (
            f"imitation accuracy {m['imitation_accuracy']:.1%}, validation JCT "
            f"{m['val_avg_jct_s']:,.0f} s vs teacher {m['teacher_avg_jct_s']:,.0f} s"
        )
    else:
        unit = "PPO iterations" if m.get("algorithm") == "grouped-ppo" else "updates"
        detail = (
            f"{m['updates']} {unit}, validation JCT {m['init_val_avg_jct_s']:,.0f} s -> best "
            f"{m['best_val_avg_jct_s']:,.0f} s; from {result['parent_policy_id'] or 'scratch'}"
        )
    return f"{trained_line(what, result)}: {detail}, {m['train_wall_s']:.0f} s"


DL2 = plugin(__name__, name="dl2", key="dl2", options=DL2Options)
