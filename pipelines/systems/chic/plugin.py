"""Chic and Chic-Pair in `schedlab run`: their options, budgets and end-summary lines (their
steps: `steps.py`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from models.chic.config import CEMConfig
from pipelines.system import Nested, plugin, trained_line
from tracelib.configs import resized
from tracelib.envs.chic import ChicEnvConfig
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario
from tracelib.seeds import named_seeds

if TYPE_CHECKING:
    from models.chic.stage_config import ChicRunConfig


@dataclass(frozen=True)
class ChicOptions:
    """Chic's `schedlab run` options."""

    iterations: int | None = None
    """Chic / Chic-Pair cross-entropy-method iterations (default: the budget's; 0 skips Chic)"""
    arena_iterations: int | None = None
    """Chic's cross-entropy-method iterations in the arena's DL2 setting (default: the
    budget's; 0 enters no Chic policy into the evaluation on every workload set)"""
    as_published: bool = False
    """train Chic and Chic-Pair with the paper's MDP and update as written (p1 for actions
    on absent jobs, void always valid, a fresh sequence per trajectory, smoothing 0.7,
    random initial weights) instead of the measured departures that are the default, in its
    own scenario and in the arena (the warm start cloning Optimus is on in its own scenario
    only)"""


BUDGETS = {
    "smoke": {
        "train.cem.iterations": 2,
        "train.cem.n_trajectories": 4,
        "train.train_sequences": 4,
        "train.val_sequences": 2,
        "train.cem.fit_epochs": 2,
        "eval.test_sequences": 2,
        "eval.validation_sequences": 1,
        "arena.cem.iterations": 1,
        "arena.cem.n_trajectories": 2,
        "arena.cem.fit_epochs": 2,
        "arena.train_sequences": 1,
        "arena.val_sequences": 1,
        "arena.jobs_per_episode": 10,
    },
    "large": {
        "train.cem.iterations": 30,
        "arena.cem.iterations": 40,
        "arena.cem.n_trajectories": 35,
        "arena.cem.fit_epochs": 40,
        "arena.val_sequences": None,
    },
}

_RUN_LEVEL = frozenset({"variant", "scenario", "net", "env", "seed", "iterations"})
"""What the stage fills into the CEM's config (`ChicTrainConfig.cem_config`, ...) or what
has no flag's type: the variant, scenario, seed; the network (None: the paper's for the
variant and window); the MDP (None in Chic's own scenario: the paper's); and the
iterations, set by `--chic-iterations` and `--chic-arena-iterations`."""

NESTED = {
    "train.cem": Nested(CEMConfig, _RUN_LEVEL),
    "train.cem.scenario": Nested(ChicScenario, frozenset({"rate_per_hour"})),
    "arena.cem": Nested(CEMConfig, _RUN_LEVEL),
    "arena.cem.scenario": Nested(ChicArenaScenario, frozenset({"sim"})),
    "arena.cem.env": Nested(
        ChicEnvConfig, frozenset({"variant", "mask_absent", "work_conserving"})
    ),
}
"""Chic's nested configs whose fields are flags (`--chic-train-cem-lr`,
`--chic-arena-cem-scenario-window`): the cross-entropy method of its own scenario and of
the arena, their scenarios, and the arena's MDP. Besides what the stage derives: the
scenario's arrival rate is each training's (`ChicRunConfig.train_rates`), the arena's
simulator the evaluation's, and the MDP's variant, absent-job masking and work
conservation the CEM's own (`CEMConfig.env_config`)."""


def apply(cfg: ChicRunConfig, opts: ChicOptions) -> ChicRunConfig | None:
    """The options on the budget's config; 0 iterations skip Chic (0 arena iterations: its
    arena training only)."""
    changes = {}
    if opts.iterations is not None:
        changes["train.cem.iterations"] = opts.iterations
    if opts.arena_iterations is not None:
        changes["arena.cem.iterations"] = opts.arena_iterations
    cfg = resized(cfg, changes)
    if opts.as_published:
        cfg = replace(cfg, train=cfg.train.as_published(), arena=cfg.arena.as_published())
    return cfg if cfg.train.cem.iterations > 0 else None


def seeded(cfg: ChicRunConfig, seed: int, workload_set: str) -> ChicRunConfig:
    """One seed for training and evaluation: their sequences' seeds are split from it
    (`split_seeds`), so the test sequences are never trained on. The arena training gets
    a child of it and the run's synthetic workload set."""
    arena_seed = int(named_seeds(seed, ("arena",))["arena"].generate_state(1)[0])
    return replace(
        cfg,
        train=replace(cfg.train, seed=seed),
        eval=replace(cfg.eval, seed=seed),
        arena=replace(cfg.arena, seed=arena_seed, workload_set=workload_set),
    )


def summary_lines(summary: dict) -> list[str]:
    """Each policy, and each system's ACT per rate."""
    lines = [
        f"  Chic {name} {result['policy_id']}{_started(result.get('metrics', {}))}"
        for name, result in summary["train"].items()
    ]
    for system, by_rate in summary["evaluation"]["act"].items():
        acts = ", ".join(f"{rate}/h {act:,.0f} s" for rate, act in sorted(by_rate.items()))
        lines.append(f"    chic {system:<26} ACT {acts}")
    for variant, by_set in summary.get("arena", {}).items():
        for workload_set, result in by_set.items():
            m = result["metrics"]
            lines.append(
                f"{trained_line(f'Chic arena {variant} on {workload_set}', result)}: "
                f"validation ACT {m['best_val_act_s']:,.0f} s, {m['iterations']} iterations, "
                f"{m['wall_s']:.0f} s; from {result['parent_policy_id'] or 'scratch'}"
            )
    return lines


def _started(m: dict) -> str:
    """ " (from imitation of optimus, held-out accuracy 0.98; ...)" for a policy trained from
    a warm start (CEMConfig.teacher), saying whether a CEM iteration beat the clone."""
    started = m.get("started_from", "")
    if not started.startswith("imitation of"):
        return ""
    kept = "; kept: no iteration beat it on validation" if m.get("best_iteration") == 0 else ""
    return f" (from {started}, held-out accuracy {m['imitation_held_out_accuracy']:.2f}{kept})"


CHIC = plugin(__name__, name="chic", key="chic", options=ChicOptions)
