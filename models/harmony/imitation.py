"""Harmony's warm start: clone a teacher's placements before the actor-critic (a deviation).

The paper trains the placement policy from random weights. Here, from random weights the
actor-critic ends 31-73% behind LIF-Quad (docs/harmony.md), and the one-step optimum of the
reward predictor itself (`GreedySpeedPlacement` scored by the predictor) is 39-65% behind
it too, so the predictor's rewards alone do not lead to LIF's placements. The policy
network therefore first learns, by supervised cross-entropy, what a baseline (default
LIF-Quad, the strongest here, fitted on interference samples as a cluster would measure
them) does in the states of the training rollouts: the actor-critic then starts from
placements that work, as DL2 starts from its warm-up and RL-TAPS from SJF's decisions.
Every other part of the method is unchanged.

A rule teacher (`teacher_samples`) places as Harmony's baselines do (`place_in_order`): jobs
in arrival order, each task on the server its rule picks among those the mask allows. Each
of its steps is one policy action (job row, role, server), recorded with the state and mask
the policy would see (`PlacementEnv`, whose speeds are the reward predictor's in training:
the teacher's rollouts never see the true interference either). The default teacher is the
searched one (`models.harmony.search`), whose steps are recorded the same way in the runs
it searched; `imitate` fits either. The loss is the masked cross-entropy of the
teacher's action (Adam, shuffled minibatches); 10% of the steps are held out to report how
often the greedy policy picks the teacher's exact action.

    samples = teacher_samples(workloads, "lif-quad", env_cfg, predictor)
    metrics = imitate(policy_net, samples, epochs=20, lr=1e-3, batch=64, rng=rng)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models import warm_start
from models.harmony.placement import RULES, PolicyNet, next_task
from tracelib.envs.environments import PlacementEnv, PlacementEnvConfig
from tracelib.sim.jobs import JobSpec

HELD_OUT = 0.1
"""Share of the teacher's steps held out of the fit to measure the clone's accuracy."""


@dataclass(frozen=True)
class TeacherSamples(warm_start.TeacherSamples):
    """A teacher's placements on every training sequence, one row per task placed: states
    as `encode_placement` writes them (S, obs_dim), masks (S, 2N'M), and actions
    (2 * job row + role) * M + server."""


def teacher_samples(
    workloads: Sequence[Sequence[JobSpec]],
    teacher: str,
    env_cfg: PlacementEnvConfig,
    speed_model: Any = None,
) -> TeacherSamples:
    """Run placement rule `teacher` (`placement.RULES`) through every sequence of
    `workloads` in a `PlacementEnv` with `speed_model` (None: the simulator's) and record,
    at every task it places, the state, the mask and its action."""
    if teacher not in RULES:
        raise ValueError(f"unknown teacher {teacher!r}; known: {', '.join(RULES)}")
    rule = RULES[teacher]()
    env = PlacementEnv(workloads, env_cfg, speed_model=speed_model)
    layout = env.actions
    obs_rows: list[np.ndarray] = []
    mask_rows: list[np.ndarray] = []
    actions: list[int] = []
    for k in range(len(workloads)):
        obs, _ = env.reset(seed=k, options={"workload": k})
        while env.draft is not None:
            mask = env.action_masks()
            grid = layout.grid(mask)  # (N', 2, M)
            task = next_task(env.draft, grid)
            if task is None:  # cannot happen with a non-empty mask; never loop on it
                raise RuntimeError("the placement mask allows a task next_task cannot find")
            i, role = task
            server = rule(env.draft, i, role, np.flatnonzero(grid[i, role]))
            action = layout.of(i, role, server)
            obs_rows.append(obs)
            mask_rows.append(mask)
            actions.append(action)
            obs, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
    return TeacherSamples(
        np.stack(obs_rows).astype(np.float32),
        np.stack(mask_rows),
        np.asarray(actions, dtype=np.int64),
    )


def _accuracy(net: PolicyNet, obs: torch.Tensor, mask: torch.Tensor, act: torch.Tensor) -> float:
    if not len(act):
        return float("nan")
    with torch.no_grad():
        return float((net.masked_logits(obs, mask).argmax(-1) == act).float().mean())


def imitate(
    net: PolicyNet,
    samples: TeacherSamples,
    *,
    epochs: int,
    lr: float,
    batch: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Train `net` in place on the teacher's actions (all but a held-out tenth) for
    `epochs` passes; returns the imitation's metrics. Split and minibatch order come from
    `rng`; the caller seeds torch."""
    start = time.perf_counter()
    obs = torch.from_numpy(samples.obs)  # (S, obs_dim)
    mask = torch.from_numpy(samples.masks)  # (S, 2N'M)
    act = torch.from_numpy(samples.actions)  # (S,)
    order = rng.permutation(len(samples))
    n_held = int(len(samples) * HELD_OUT)
    held, fit = order[:n_held], order[n_held:]
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    loss = torch.zeros(())
    for _ in range(epochs):
        for at in range(0, len(fit), batch):
            b = torch.from_numpy(rng.permutation(fit[at : at + batch]))
            logits = net.masked_logits(obs[b], mask[b])  # (B, 2N'M)
            loss = torch.nn.functional.cross_entropy(logits, act[b])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        fit = rng.permutation(fit)
    held_t, fit_t = torch.from_numpy(held), torch.from_numpy(fit)
    return {
        "imitation_steps": len(samples),
        "imitation_epochs": epochs,
        "imitation_loss": float(loss.detach()),
        "imitation_accuracy": _accuracy(net, obs[fit_t], mask[fit_t], act[fit_t]),
        "imitation_held_out_accuracy": _accuracy(net, obs[held_t], mask[held_t], act[held_t]),
        "imitation_wall_s": time.perf_counter() - start,
    }
