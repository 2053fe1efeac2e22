"""The toy system's entry: options, budgets, seeding and its end-summary lines."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pipelines.system import plugin


@dataclass(frozen=True)
class ToyOptions:
    """The toy's `schedlab run` options."""

    steps: int | None = None
    """toy training steps (default: the budget's; 0 skips the toy)"""
    flavour: Literal["plain", "fancy"] = "plain"
    """which toy to train"""
    verbose: bool = False
    """say more in the end summary"""


BUDGETS = {"smoke": {"steps": 2}, "large": {"steps": 50}}


def apply(cfg, opts: ToyOptions):
    """The options on the budget's config; 0 steps skip the toy."""
    if opts.steps is not None:
        cfg = replace(cfg, steps=opts.steps)
    cfg = replace(cfg, flavour=opts.flavour, verbose=opts.verbose)
    return cfg if cfg.steps > 0 else None


def seeded(cfg, seed: int, workload_set: str):
    """The toy trains on the run's synthetic set."""
    return replace(cfg, seed=seed, workload_set=workload_set)


def summary_lines(summary: dict) -> list[str]:
    """One line: the toy's score."""
    return [f"  toy {summary['flavour']} score {summary['score']} ({summary['evaluation']})"]


TOY = plugin(__name__, name="toy", key="toy", options=ToyOptions)
