"""What a warm start is, for every trainer that makes one: the policy network cloned from a
baseline's decisions before RL (Harmony's clone of LIF-Quad, `models.harmony.train`; Chic's
clone of Optimus, `models.chic.cem`), kept with what made it, so one clone can serve every
training of the same config (the variants of a run, made once ahead of them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from models.torch_scope import scoped_torch

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


@dataclass(frozen=True)
class TeacherSamples:
    """A teacher's decisions, one row per action, as a warm start's imitation fits them: the
    state, the action mask and the teacher's action (the shapes are the trainer's)."""

    obs: np.ndarray
    """(S, observation size) float32 states."""
    masks: np.ndarray
    """(S, actions) bool action masks."""
    actions: np.ndarray
    """(S,) int64 the teacher's action."""

    def __len__(self) -> int:
        return len(self.actions)


def clone_network(
    build: Callable[[], torch.nn.Module],
    fit: Callable[[torch.nn.Module], dict[str, Any]],
    net_seed: int,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """A fresh network from `build()`, initialized under torch's global generator seeded
    with `net_seed`, trained in place by `fit` (the trainer's imitation, which draws its
    dropout from that generator too); returns a copy of its weights and `fit`'s metrics.
    Torch's generator and thread count are restored afterwards (`scoped_torch`)."""
    with scoped_torch(seed=net_seed):
        net = build()
        metrics = fit(net)
    return {k: t.detach().clone() for k, t in net.state_dict().items()}, metrics


def clone_by_imitation(
    build: Callable[[], torch.nn.Module],
    imitate: Callable[..., dict[str, Any]],
    samples: Any,
    cfg: Any,
    fit_seed: int,
    net_seed: int,
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """`clone_network` fitting the fresh network by the trainer's `imitate(net, samples,
    epochs=, lr=, batch=, rng=)` with the config's `imitation_epochs`, `imitation_lr` and
    `imitation_batch`, split and minibatch order drawn from a generator seeded `fit_seed`."""
    return clone_network(
        build,
        lambda net: imitate(
            net,
            samples,
            epochs=cfg.imitation_epochs,
            lr=cfg.imitation_lr,
            batch=cfg.imitation_batch,
            rng=np.random.default_rng(fit_seed),
        ),
        net_seed,
    )
