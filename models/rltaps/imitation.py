"""RL-TAPS' warm start: imitate a baseline's decisions before REINFORCE (a deviation).

The paper trains from random weights. Here, with a budget of minutes, REINFORCE from random
weights leaves the greedy policy as slow as the Random picker (docs/rltaps.md), so a fresh
network first learns, by supervised cross-entropy, what a baseline (default SJF with the
first-fit allocator) does in the same states; REINFORCE then starts from a schedule that
works, as DL2 starts from its warm-up. Every other part of the method is unchanged.

The teacher's decision is translated into RL-TAPS' action (`GpuAssignmentEnv.choice_of`):
each GPU's target is the job slot of the job it runs, or the null slot when it idles. A GPU
held by a job outside the N job slots (a baseline may start a backlog job) has no target and
is left out of the loss. The loss is the mean over GPUs with a target of minus the masked
log-probability of the target (eq. 7's per-GPU softmaxes), Adam, shuffled minibatches.
Measured (docs/rltaps.md): the imitation ends 10-23% behind SJF on held-out sequences
whatever was tried at this budget (more epochs, 5-10x more teacher sequences, two to four
DAgger rounds adding the states the imitating policy reaches): a 97-99.9% per-GPU agreement
still leaves a few GPUs per step on another job than SJF's, and those errors compound.

    metrics = warm_start(policy, train_env, cfg, seed)     # trains policy.net in place
    samples = teacher_samples(env, "sjf")                  # states, masks, per-GPU targets
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.rltaps.config import ReinforceConfig
from models.rltaps.policy import RLTapsPolicy, baseline_scheduler
from tracelib.envs.gpu import GpuAssignmentEnv


@dataclass(frozen=True)
class TeacherSamples:
    """A teacher's decisions on every sequence of an environment, one row per step."""

    obs: np.ndarray
    """(S, D) float32 states."""
    masks: np.ndarray
    """(S, M, N + 1) bool action masks."""
    targets: np.ndarray
    """(S, M) int64 per-GPU slot the teacher gave (N: idle; -1: no target)."""

    def __len__(self) -> int:
        return len(self.obs)


def teacher_samples(env: GpuAssignmentEnv, teacher: str, seed: int = 0) -> TeacherSamples:
    """Run baseline `teacher` (RL-TAPS' BASELINES) on every sequence of `env` and record, at
    every step, the state, the mask and the per-GPU choice its decision means."""
    scheduler = baseline_scheduler(teacher, env.cfg.obs.slots, seed)
    obs_rows, mask_rows, target_rows = [], [], []
    for k in range(len(env.workloads)):
        obs, info = env.reset(seed=0, options={"workload": k})
        while True:
            alloc, placement = scheduler.decide(env.session.snapshot, env.session.rng)
            obs_rows.append(obs)
            mask_rows.append(info["action_mask"])
            target_rows.append(env.choice_of(placement))
            obs, _, terminated, truncated, info = env.step_decision(alloc, placement)
            if terminated or truncated:
                break
    return TeacherSamples(
        np.stack(obs_rows).astype(np.float32), np.stack(mask_rows), np.stack(target_rows)
    )


def imitation_loss(
    policy: RLTapsPolicy, obs: torch.Tensor, mask: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean negative log-probability of the targets over GPUs that have one, and how many
    of those the greedy choice gets right. obs (B, D), mask (B, M, N + 1), targets (B, M)."""
    logp = policy.net.log_probs(obs, mask)  # (B, M, N + 1)
    has = targets >= 0  # (B, M)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # (B, M)
    # A target the mask forbids cannot occur (the teacher's jobs are in the slots), but a
    # -inf must never reach the sum.
    picked = torch.where(has, picked, torch.zeros_like(picked))
    n = has.sum().clamp(min=1)
    right = ((logp.argmax(-1) == targets) & has).sum()
    return -picked.sum() / n, right


def warm_start(
    policy: RLTapsPolicy, env: GpuAssignmentEnv, cfg: ReinforceConfig, seed: int
) -> dict[str, Any]:
    """Imitate `cfg.teacher` on every sequence of `env` (training `policy` in place);
    returns the imitation's metrics."""
    teacher_seed, fit_seed = np.random.SeedSequence(seed).generate_state(2)
    samples = teacher_samples(env, cfg.teacher, int(teacher_seed))
    return imitate(policy, samples, cfg, np.random.default_rng(fit_seed))


def imitate(
    policy: RLTapsPolicy,
    samples: TeacherSamples,
    cfg: ReinforceConfig,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """Train `policy.net` in place on the teacher's decisions for `cfg.imitation_epochs`
    passes; returns the imitation's metrics (final loss and per-GPU accuracy on the
    samples, sizes, wall time). The minibatch order comes from `rng`."""
    start = time.perf_counter()
    obs = torch.from_numpy(samples.obs)
    mask = torch.from_numpy(samples.masks)
    targets = torch.from_numpy(samples.targets)
    optimizer = torch.optim.Adam(policy.net.parameters(), lr=cfg.imitation_lr)
    for _ in range(cfg.imitation_epochs):
        order = torch.from_numpy(rng.permutation(len(samples)))
        for at in range(0, len(samples), cfg.imitation_batch):
            batch = order[at : at + cfg.imitation_batch]
            loss, _ = imitation_loss(policy, obs[batch], mask[batch], targets[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    with torch.no_grad():
        loss, right = imitation_loss(policy, obs, mask, targets)
    policy.refresh()
    with_target = int((samples.targets >= 0).sum())
    return {
        "teacher": cfg.teacher,
        "imitation_epochs": cfg.imitation_epochs,
        "imitation_steps": len(samples),
        "imitation_loss": float(loss),
        "imitation_accuracy": int(right) / max(with_target, 1),
        "imitation_untargeted_gpus": float((samples.targets < 0).mean()),
        "imitation_wall_s": time.perf_counter() - start,
    }
