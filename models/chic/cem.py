"""Chic's training algorithm: the modified cross-entropy method (section 4.3, Algorithm 1).

Each iteration k:
  1. N trajectories from the current policy pi(a | s; theta_(k-1)), each on a training
     sequence drawn at random, plus (the paper's modification) trajectory N + 1 with
     actions uniform over the valid ones;
  2. returns R(x_n) sorted ascending, the elite bound xi_k = R_(floor((1 - rho) N));
  3. theta_hat_k maximizes the likelihood of the elite trajectories' actions (eq. 9, as
     the cross-entropy loss -log pi'(a_t | s_t), minimized with Adam from theta_(k-1) for
     `fit_epochs` passes, dropout on);
  4. smoothed update theta_k = alpha * theta_hat_k + (1 - alpha) * theta_(k-1).
Every `val_every` iterations the policy schedules the validation sequences; the
policy with the lowest validation ACT is the one returned. Episodes run in
`cfg.scenario`: Chic's own (`tracelib.envs.chic`) or the arena's DL2 setting
(`tracelib.envs.chic_arena`), the same algorithm either way.

Warm start (a deviation, `cfg.teacher`, `models.chic.imitation`): without a starting policy
the network first clones the teacher's (Optimus') schedules on the training sequences, and
that clone is validated as iteration 0: the policy returned is the clone unless a CEM
iteration beats it on validation.

Randomness: one SeedSequence root (cfg.seed) spawns the streams for torch (initialization,
dropout, minibatch order), sequence choice and action sampling, and (a fourth child, so the
first three keep their seeds) the warm start's initialization, split and minibatch order.

In the arena, training episodes are a workload set's sequences cut into runs of W jobs
(`arena_sequences`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

import numpy as np
import polars as pl
import torch

from models.chic.config import CEMConfig
from models.chic.imitation import imitate, teacher_samples
from models.chic.networks import ChicPolicyNet, NumpyPolicy
from models.chic.policy import ChicPolicy, evaluate_policy, make_env, run_episode
from models.warm_start import WarmStart, clone_by_imitation
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds
from tracelib.sim import jobs_from_frame
from tracelib.sim.jobs import JobSpec

CURVE_SCHEMA = {
    "iteration": pl.Int32,
    "elite_bound": pl.Float64,
    "mean_return": pl.Float64,
    "best_return": pl.Float64,
    "n_elite": pl.Int32,
    "uniform_elite": pl.Boolean,
    "fit_loss": pl.Float64,
    "val_act_s": pl.Float64,
    "steps": pl.Int64,
    "wall_s": pl.Float64,
}
"""Columns of the learning-curve frame (one row per iteration)."""


def elite_bound(returns: Sequence[float], n_policy: int, rho: float) -> float:
    """xi_k = R_(floor((1 - rho) N)) of the ascending returns (1-based; at least the first)."""
    ordered = sorted(returns)
    index = max(1, math.floor((1.0 - rho) * n_policy))
    return ordered[min(index, len(ordered)) - 1]


def _fit(
    net: ChicPolicyNet,
    optim: torch.optim.Optimizer,
    obs: np.ndarray,
    masks: np.ndarray,
    actions: np.ndarray,
    cfg: CEMConfig,
    gen: torch.Generator,
) -> float:
    """Cross-entropy fit on the elite pairs; returns the last pass's mean loss."""
    x = torch.from_numpy(obs)  # (S, input_dim)
    m = torch.from_numpy(masks)  # (S, n_actions) bool
    a = torch.from_numpy(actions)  # (S,)
    net.train()
    loss_sum = 0.0
    for _ in range(cfg.fit_epochs):
        order = torch.randperm(len(a), generator=gen)
        loss_sum, count = 0.0, 0
        for start in range(0, len(a), cfg.minibatch):
            idx = order[start : start + cfg.minibatch]
            loss_sum += net.cross_entropy_step(optim, x[idx], m[idx], a[idx])
            count += len(idx)
        loss_sum /= max(count, 1)
    net.eval()
    return loss_sum


STREAMS = ("torch", "episodes", "actions", "imitation")
"""Children of SeedSequence(cfg.seed), in spawn order (new streams go at the end)."""


def warm_key(cfg: CEMConfig) -> tuple:
    """What a warm start depends on besides the training sequences: the fields of `cfg` it
    reads (configs that differ only in CEM's settings share one)."""
    return (
        cfg.teacher,
        cfg.imitation_epochs,
        cfg.imitation_lr,
        cfg.imitation_batch,
        cfg.imitation_sequences,
        cfg.imitation_order,
        cfg.seed,
        cfg.net_config,
        cfg.scenario,
        cfg.env_config,
    )


def warm_start(train: Sequence[Sequence[JobSpec]], cfg: CEMConfig) -> WarmStart:
    """Clone `cfg.teacher`'s schedules on the first `cfg.imitation_sequences` training
    sequences (in the training MDP) into a fresh policy network. Pure: the same arguments
    give the same weights (its own random stream; torch's global generator is restored)."""
    if cfg.teacher is None:
        raise ValueError("warm_start needs a teacher (CEMConfig.teacher)")
    started = time.perf_counter()
    stream = named_seeds(cfg.seed, STREAMS)["imitation"]
    net_seed, fit_seed, env_seed = (int(x) for x in stream.generate_state(3))
    sequences = list(train)[: cfg.imitation_sequences]
    samples = teacher_samples(sequences, cfg, cfg.teacher, env_seed, cfg.imitation_order)
    state, metrics = clone_by_imitation(
        lambda: ChicPolicyNet(cfg.net_config), imitate, samples, cfg, fit_seed, net_seed
    )
    metrics = {
        "teacher": cfg.teacher,
        "imitation_sequences": len(sequences),
        "teacher_act_s": samples.teacher_act_s,
        **metrics,
        "warm_start_wall_s": time.perf_counter() - started,
    }
    return WarmStart(warm_key(cfg), state, metrics)


def train_cem(
    train: Sequence[Sequence[JobSpec]],
    validation: Sequence[Sequence[JobSpec]],
    cfg: CEMConfig,
    init: ChicPolicy | None = None,
    progress: ProgressFn = no_progress,
    warm: WarmStart | None = None,
) -> tuple[ChicPolicy, pl.DataFrame, dict[str, Any]]:
    """Train a Chic (or Chic-Pair) policy; returns (best validated policy, learning curve,
    metrics). `init` starts from a trained policy (same network shape) instead of random.
    Without `init`, and with a teacher, training starts from `warm_start` of the same
    arguments (`warm`: one made already; it must be of this config's `warm_key`), validated
    as iteration 0. `progress(iteration, iterations)` is called after every iteration."""
    if not train or not validation:
        raise ValueError("need training and validation sequences")
    if init is None and cfg.teacher is None and cfg.iterations == 0:
        raise ValueError("0 iterations need a teacher (the clone is the policy)")
    if init is None and cfg.teacher is not None:
        if warm is None:
            warm = warm_start(train, cfg)
        elif warm.key != warm_key(cfg):
            raise ValueError("the warm start given was made for another config")
    else:
        warm = None
        if cfg.iterations == 0:
            raise ValueError("0 iterations from a starting policy train nothing")
    seeds = named_seeds(cfg.seed, STREAMS)
    torch_seed = seeds["torch"]
    gen = torch.Generator().manual_seed(int(torch_seed.generate_state(1)[0]))
    episode_rng = np.random.default_rng(seeds["episodes"])
    action_rng = np.random.default_rng(seeds["actions"])

    # Initialization and dropout draw from torch's global generator: seed it for this run
    # and restore it afterwards, so training is a function of cfg.seed alone.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch_seed.generate_state(2)[1]))
        return _train(train, validation, cfg, init, gen, episode_rng, action_rng, progress, warm)


def _train(train, validation, cfg, init, gen, episode_rng, action_rng, progress, warm):
    net = ChicPolicyNet(cfg.net_config)
    if init is not None:
        if init.net.cfg != cfg.net_config:
            raise ValueError(f"init policy has network {init.net.cfg}, training {cfg.net_config}")
        net.load_state_dict(init.net.state_dict())
    elif warm is not None:
        net.load_state_dict(warm.state)
    net.eval()
    optim = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    env = make_env(train, cfg.scenario, cfg.env_config)
    train_cfg = {**asdict(cfg), "stage": "cem"}

    def snapshot() -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in net.state_dict().items()}

    def validation_act() -> float:
        """Mean ACT (seconds) of the net as it is now over the validation sequences."""
        acts = evaluate_policy(
            NumpyPolicy(net),
            validation,
            cfg.scenario,
            cfg.env_config,
            greedy=cfg.greedy,
            seed=cfg.seed,
        )
        return float(np.mean(acts))

    best_state, best_act, best_iteration = snapshot(), math.inf, 0
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    clone_act = math.nan
    if warm is not None:
        # The clone is a candidate: iteration 0, kept unless an iteration beats it.
        clone_act = validation_act()
        best_act = clone_act
    total_steps = 0
    for k in range(1, cfg.iterations + 1):
        actor = NumpyPolicy(net)
        trajectories = []
        shared = int(episode_rng.integers(len(train))) if cfg.shared_sequence else None
        for n in range(cfg.n_trajectories + int(cfg.uniform_trajectory)):
            uniform = n == cfg.n_trajectories
            workload = shared if shared is not None else int(episode_rng.integers(len(train)))
            seed = int(episode_rng.integers(2**31 - 1))
            ret, _, obs, masks, acts = run_episode(
                env, None if uniform else actor, action_rng, workload, seed, record=True
            )
            trajectories.append((ret, obs, masks, acts, uniform))
        returns = [t[0] for t in trajectories]
        xi = elite_bound(returns, cfg.n_trajectories, cfg.elite_quantile)
        elite = [t for t in trajectories if t[0] >= xi and t[3]]
        steps = sum(len(t[3]) for t in trajectories)
        total_steps += steps
        loss = math.nan
        if elite:
            before = snapshot()
            loss = _fit(
                net,
                optim,
                np.concatenate([np.stack(t[1]) for t in elite]).astype(np.float32),
                np.concatenate([np.stack(t[2]) for t in elite]),
                np.concatenate([np.asarray(t[3], dtype=np.int64) for t in elite]),
                cfg,
                gen,
            )
            with torch.no_grad():
                for name, param in net.state_dict().items():
                    param.mul_(cfg.smoothing).add_(before[name], alpha=1.0 - cfg.smoothing)
        val_act = math.nan
        if k % cfg.val_every == 0 or k == cfg.iterations:
            val_act = validation_act()
            if val_act < best_act:
                best_state, best_act, best_iteration = snapshot(), val_act, k
        rows.append(
            {
                "iteration": k,
                "elite_bound": xi,
                "mean_return": float(np.mean(returns)),
                "best_return": float(np.max(returns)),
                "n_elite": len(elite),
                "uniform_elite": any(t[4] for t in elite),
                "fit_loss": loss,
                "val_act_s": val_act,
                "steps": steps,
                "wall_s": time.perf_counter() - started,
            }
        )
        progress(k, cfg.iterations)
    net.load_state_dict(best_state)
    net.eval()
    wall = time.perf_counter() - started
    curve = pl.DataFrame(rows, schema=CURVE_SCHEMA).with_columns(
        pl.col("fit_loss").fill_nan(None), pl.col("val_act_s").fill_nan(None)
    )
    metrics = {
        "best_val_act_s": best_act,
        "best_iteration": best_iteration,
        "iterations": cfg.iterations,
        "train_sequences": len(train),
        "val_sequences": len(validation),
        "wall_s": wall,
        "s_per_iteration": wall / max(cfg.iterations, 1),
        "steps": total_steps,
    }
    if warm is not None:
        metrics.update(warm.metrics)
        metrics["started_from"] = f"imitation of {cfg.teacher}"
        metrics["clone_val_act_s"] = clone_act
    else:
        metrics["started_from"] = "random weights" if init is None else "the starting policy"
    return ChicPolicy(net, train_cfg), curve, metrics


def arena_sequences(jobs: pl.DataFrame, jobs_per_episode: int | None) -> list[tuple[JobSpec, ...]]:
    """Job sequences of workload_jobs rows, each workload cut into runs of
    `jobs_per_episode` jobs by arrival whose arrivals start at 0 (None: whole workloads)."""
    out = []
    for _, frame in jobs.group_by("workload_id", maintain_order=True):
        specs = jobs_from_frame(frame.sort("job_index"))
        size = jobs_per_episode or len(specs)
        for start in range(0, len(specs), size):
            part = specs[start : start + size]
            t0 = part[0].arrival_s
            out.append(tuple(replace(j, arrival_s=j.arrival_s - t0) for j in part))
    return out
