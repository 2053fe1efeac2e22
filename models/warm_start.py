"""What a warm start is, for every trainer that makes one: the policy network cloned from a
baseline's decisions before RL (Harmony's clone of LIF-Quad, `models.harmony.train`; Chic's
clone of Optimus, `models.chic.cem`), kept with what made it, so one clone can serve every
training of the same config (the variants of a run, made once ahead of them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class WarmStart:
    """A policy network cloned from a config's teacher, with what made it."""

    key: tuple
    """The trainer's `warm_key` of the config it was made for (a training refuses another's)."""
    state: dict[str, torch.Tensor]
    """The policy network's weights."""
    metrics: dict[str, Any]
    """The imitation's figures (teacher, steps, held-out accuracy, ...)."""
