"""DL2 fine-tuning by PPO over groups of rollouts of one job sequence (not in the paper).

DL2's actor-critic (`finetune.py`) credits each inference with its slot's reward and a
learned value, one update per slot. Its signal is dominated by what the policy does not
control: which jobs arrive and how long they run. Here the policy is judged on the metric
itself, against rollouts that saw the same input:

- an iteration picks a training sequence and a simulator seed, and plays it `group_size`
  times with the policy sampling its actions (the same arrivals and the same simulator
  noise each time: only the policy's choices differ);
- the return of the inferences of a decision made at time t is minus the time the jobs
  spend in the system from t on, in hours: G(t) = -sum_j max(0, finish_j - max(t, arrival_j))
  / 3600 (at t = 0, minus the sum of the JCTs);
- the baseline of an episode at time t is the mean of the group's other episodes' G(t)
  (the input-dependent baseline of Mao et al., "Variance reduction for reinforcement
  learning in input-driven environments", ICLR 2019, as in Decima and in RL-TAPS' time-step
  baseline), so the advantage G(t) - b(t) is what this episode's choices from t on gained
  or lost against the others' on the very same input;
- advantages are scaled to unit deviation over the iteration's samples, and the policy
  takes `epochs` passes of PPO's clipped surrogate (ratio to the probability each action
  had when it was played, clipped to 1 +- clip) over them in minibatches, with an optional
  KL(initial policy || policy) anchor and entropy bonus.

Two options, off by default (measured in docs/dl2.md, "Measured alternatives"): `credit`
"job" credits an inference that adds to job j with job j's own time in the system only,
against the same job in the group's other rollouts, and `job_noise` makes a rollout's
exploration stick to a job (logit offsets drawn once per job and rollout).

The greedy policy is validated every `val_every` iterations on the validation workloads
(average JCT); the best validated weights, the starting policy's included, are returned.
No value network is trained (the group is the baseline). The learning curve's `reward` is
the group's mean return at t = 0 (minus the sum of its JCTs, hours).

    policy, curve, metrics = finetune_grouped(train, val, GroupedConfig(), init=warm)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F

from models.dl2.config import ALGORITHM, DL2NetConfig, GroupedConfig, to_dict
from models.dl2.finetune import (
    finetune_curve,
    training_and_validation_jobs,
    training_env,
    validate_greedy,
)
from models.dl2.networks import (
    PolicyNet,
    acting_mask,
    choose,
    fast_policy,
    masked_entropy,
    masked_log_prob,
)
from models.dl2.policy import DL2Policy, clone_net
from models.dl2.recorder import Workloads
from tracelib.envs import AllocationEnv
from tracelib.envs.observation import AllocationActions
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds
from tracelib.sim.engine import SimulationStalled
from tracelib.sim.jobs import JobSpec


def time_in_system_after(times: np.ndarray, arrival: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """(K,) hours the jobs spend in the system after each of `times` (K,): sum over jobs of
    max(0, finish - max(t, arrival)) / 3600; at t <= every arrival, the sum of the JCTs."""
    start = np.maximum(times[:, None], arrival[None, :])  # (K, N)
    return np.maximum(finish[None, :] - start, 0.0).sum(axis=1) / 3600.0


@dataclass
class Episode:
    """One rollout: its stored inferences and the time of the decision each belongs to."""

    obs: list[np.ndarray] = field(default_factory=list)
    mask: list[np.ndarray] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    """Per inference, the log-probability the policy gave the action."""
    rho: list[float] = field(default_factory=list)
    """Per inference, min(1, policy / sampled probability of the action): the truncated
    importance weight of a rollout sampled with `job_noise` (1 without)."""
    time_s: list[float] = field(default_factory=list)
    job: list[int] = field(default_factory=list)
    """Per inference, the row in `job_id` of the job it adds to (-1: stop)."""
    job_id: np.ndarray | None = None
    arrival: np.ndarray | None = None
    finish: np.ndarray | None = None


def _job_offsets(env: AllocationEnv, window: int, noise: dict, sigma: float, rng) -> np.ndarray:
    """(3J + 1,) logit offsets of the decision's visible jobs (`GroupedConfig.job_noise`),
    each job's drawn once per rollout into `noise` (job id -> (worker, PS))."""
    actions = AllocationActions(window)
    out = np.zeros(actions.n, dtype=np.float32)
    for i, job in enumerate(env.builder.jobs[:window]):
        if job.job_id not in noise:
            noise[job.job_id] = rng.normal(0.0, sigma, 2)
        dw, dp = noise[job.job_id]
        out[actions.row(i)] = (dw, dp, dw + dp)  # worker, PS, both
    return out


def _rollout(
    env: AllocationEnv, fast, net_cfg: DL2NetConfig, rng, seed: int, k: int, sigma: float = 0.0
):
    """Play workload k once with the policy sampling (simulator seed from `seed`; per-job
    logit offsets of deviation `sigma`, `GroupedConfig.job_noise`); None if the episode was
    truncated before every job finished, or stalled: deciding only at arrivals and
    completions, a sampled allocation that leaves nothing running with no arrival to come
    has no next decision (seen once in about 6,000 rollouts)."""
    ep = Episode()
    noise: dict[int, np.ndarray] = {}
    obs, info = env.reset(seed=seed, options={"workload": k})
    offsets, decided_at = None, None
    while True:
        mask = acting_mask(info["action_mask"], env.builder, net_cfg)
        logits = fast.full_logits(obs)  # (3J + 1,)
        sampled = logits
        if sigma > 0:
            if decided_at is not env.builder:  # the visible jobs change between decisions only
                offsets = _job_offsets(env, net_cfg.window, noise, sigma, rng)
                decided_at = env.builder
            sampled = logits + offsets
        action = choose(sampled, mask, rng)
        if mask.sum() > 1:  # a forced action teaches nothing
            ep.obs.append(obs)
            ep.mask.append(mask)
            ep.action.append(action)
            logp = masked_log_prob(logits, mask, action)
            ep.logp.append(logp)
            behaviour = masked_log_prob(sampled, mask, action) if sigma > 0 else logp
            ep.rho.append(min(1.0, math.exp(logp - behaviour)))
            ep.time_s.append(info["time_s"])
            decoded = net_cfg.actions.decode(action)
            ep.job.append(-1 if decoded is None else env.builder.jobs[decoded[0]].job_id)
        try:
            obs, _, terminated, truncated, info = env.step(action)
        except SimulationStalled:
            return None
        if terminated:
            jobs = env.result().jobs
            ep.job_id = jobs["job_id"].to_numpy()
            index = {int(j): r for r, j in enumerate(ep.job_id)}
            ep.job = [index[j] if j >= 0 else -1 for j in ep.job]
            ep.arrival = jobs["arrival_s"].to_numpy()
            ep.finish = jobs["finish_s"].to_numpy()
            return ep
        if truncated:
            return None


def job_time_after(times: np.ndarray, rows: np.ndarray, ep: Episode) -> np.ndarray:
    """(K,) hours job `rows[k]` of `ep` spends in the system after `times[k]`."""
    start = np.maximum(times, ep.arrival[rows])
    return np.maximum(ep.finish[rows] - start, 0.0) / 3600.0


def group_advantages(episodes: list[Episode], credit: str = "episode") -> list[np.ndarray]:
    """Per episode, the advantage of each stored inference: minus the hours in system after
    its decision's time, less the mean of the other episodes' at that time. With credit
    "job", an inference that adds to a job counts that job's hours only (the same job of
    the other episodes as baseline: every episode of a group plays the same jobs)."""
    out = []
    for i, ep in enumerate(episodes):
        t = np.asarray(ep.time_s, dtype=float)
        others = [o for j, o in enumerate(episodes) if j != i]
        own = -time_in_system_after(t, ep.arrival, ep.finish)
        adv = own + np.mean([time_in_system_after(t, o.arrival, o.finish) for o in others], 0)
        if credit == "job":
            if any(not np.array_equal(o.job_id, ep.job_id) for o in others):
                raise ValueError("job credit needs every episode of a group to play the same jobs")
            rows = np.asarray(ep.job)
            on_job = rows >= 0
            r, tj = rows[on_job], t[on_job]
            base = np.mean([job_time_after(tj, r, o) for o in others], axis=0)
            adv[on_job] = base - job_time_after(tj, r, ep)
        out.append(adv)
    return out


def scale_advantages(adv: np.ndarray, stop: np.ndarray, credit: str) -> np.ndarray:
    """Advantages (S,) to unit deviation; with credit "job" the stop inferences (`stop`,
    (S,) bool: every job's hours) and the additions (one job's) each on their own."""
    out = adv.astype(np.float32)
    parts = (stop, ~stop) if credit == "job" else (np.ones_like(stop),)
    for part in parts:
        if part.any():
            out[part] = out[part] / (out[part].std() + 1e-8)
    return out


def finetune_grouped(
    train_workloads: Workloads | Sequence[Sequence[JobSpec]],
    val_workloads: Workloads | Sequence[Sequence[JobSpec]],
    cfg: GroupedConfig | None = None,
    init: DL2Policy | None = None,
    *,
    eval_seed: int = 0,
    progress: ProgressFn = no_progress,
) -> tuple[DL2Policy, pl.DataFrame, dict[str, Any]]:
    """Fine-tune a DL2 policy (from `init`, else from scratch) by grouped PPO; returns (best
    validated policy, learning curve, metrics) like `finetune.finetune`. `progress(i, n)` is
    called after every iteration."""
    cfg = cfg or GroupedConfig()
    start = time.perf_counter()
    train_jobs, val_jobs = training_and_validation_jobs(train_workloads, val_workloads)
    seeds = named_seeds(cfg.seed, ("init", "pick", "actions", "batches"))
    pick_rng = np.random.default_rng(seeds["pick"])
    act_rng = np.random.default_rng(seeds["actions"])
    batch_rng = np.random.default_rng(seeds["batches"])

    net_cfg = init.cfg if init is not None else cfg.net
    with torch.random.fork_rng():
        torch.manual_seed(int(seeds["init"].generate_state(1)[0]))
        policy_net = clone_net(init.net) if init is not None else PolicyNet(net_cfg)
    anchor = clone_net(policy_net) if cfg.kl_init > 0 else None
    opt = torch.optim.Adam(policy_net.parameters(), lr=cfg.lr)
    window = net_cfg.window
    sim = replace(cfg.sim, window=window)
    env = training_env(train_jobs, net_cfg, sim)

    best_jct = init_jct = validate_greedy(policy_net, val_jobs, sim, eval_seed)
    best_state = {k: v.clone() for k, v in policy_net.state_dict().items()}
    best_iteration = 0
    rows = [_row(0, 0, start, best_jct, {})]
    episodes = samples = steps = dropped = 0
    collapsed: int | None = None
    for iteration in range(1, cfg.iterations + 1):
        fast = fast_policy(policy_net)
        k = int(pick_rng.integers(len(train_jobs)))
        seed = int(pick_rng.integers(2**31 - 1))
        group = [
            _rollout(env, fast, net_cfg, act_rng, seed, k, cfg.job_noise)
            for _ in range(cfg.group_size)
        ]
        dropped += sum(ep is None for ep in group)
        episodes += cfg.group_size
        if all(ep is None for ep in group):
            # Every rollout stalled or was cut off: the policy has collapsed (seen once,
            # after 150 iterations at Adam 3e-4, and validating it then ran for minutes).
            # Training stops; the best validated weights are returned.
            collapsed = iteration
            progress(cfg.iterations, cfg.iterations)
            break
        group = [ep for ep in group if ep is not None and ep.action]
        stats: dict[str, float] = {}
        if len(group) >= 2:
            stop = np.concatenate([np.asarray(ep.job) < 0 for ep in group])  # (S,)
            raw = np.concatenate(group_advantages(group, cfg.credit))  # (S,)
            # the group's mean return at t = 0: minus the sum of its JCTs, in hours
            stats["reward"] = -float(np.mean([(ep.finish - ep.arrival).sum() for ep in group]))
            stats["reward"] /= 3600.0
            adv = scale_advantages(raw, stop, cfg.credit)
            obs = torch.from_numpy(np.stack([o for ep in group for o in ep.obs]))  # (S, J*F)
            mask = torch.from_numpy(np.stack([m for ep in group for m in ep.mask]))  # (S, 3J+1)
            action = torch.from_numpy(np.concatenate([ep.action for ep in group]))  # (S,)
            old = torch.from_numpy(np.concatenate([ep.logp for ep in group]).astype(np.float32))
            adv_t = torch.from_numpy(adv)
            rho = torch.from_numpy(np.concatenate([ep.rho for ep in group]).astype(np.float32))
            samples += len(adv)
            losses, entropies = [], []
            for _ in range(cfg.epochs):
                order = batch_rng.permutation(len(adv))
                for lo in range(0, len(order), cfg.minibatch):
                    idx = torch.from_numpy(order[lo : lo + cfg.minibatch])
                    logits = policy_net.masked_logits(obs[idx], mask[idx])  # (B, 3J+1)
                    log_pi = F.log_softmax(logits, dim=-1)
                    logp = log_pi.gather(1, action[idx, None]).squeeze(1)  # (B,)
                    ratio = torch.exp(logp - old[idx])
                    a = adv_t[idx] * rho[idx]  # off-policy samples weighted (1 on-policy)
                    clipped = torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip)
                    loss = -torch.min(ratio * a, clipped * a).mean()
                    entropy = masked_entropy(logits, mask[idx]).mean()
                    loss = loss - cfg.entropy_weight * entropy
                    if anchor is not None:
                        with torch.no_grad():
                            log_init = F.log_softmax(anchor.masked_logits(obs[idx], mask[idx]), -1)
                        kl = (log_init.exp() * (log_init - log_pi)).masked_fill(~mask[idx], 0.0)
                        loss = loss + cfg.kl_init * kl.sum(-1).mean()
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    steps += 1
                    losses.append(float(loss.detach()))
                    entropies.append(float(entropy.detach()))
            stats["pl"] = float(np.mean(losses))
            stats["entropy"] = float(np.mean(entropies))
        if iteration % cfg.val_every == 0 or iteration == cfg.iterations:
            jct = validate_greedy(policy_net, val_jobs, sim, eval_seed)
            rows.append(_row(iteration, episodes, start, jct, stats))
            if jct < best_jct:
                best_jct, best_iteration = jct, iteration
                best_state = {k: v.clone() for k, v in policy_net.state_dict().items()}
        progress(iteration, cfg.iterations)

    final_jct = rows[-1]["val_avg_jct_s"]
    policy_net.load_state_dict(best_state)
    policy = DL2Policy(
        policy_net,
        name=cfg.system,
        system=cfg.system,
        train_config={"stage": "finetune", "algorithm": ALGORITHM, **to_dict(cfg)},
    )
    metrics = {
        "algorithm": ALGORITHM,
        "updates": collapsed - 1 if collapsed is not None else cfg.iterations,
        "policy_updates": steps,
        "episodes": episodes,
        "dropped_episodes": dropped,
        "collapsed_at": collapsed,
        "samples": samples,
        "train_wall_s": time.perf_counter() - start,
        "init_val_avg_jct_s": init_jct,
        "final_val_avg_jct_s": final_jct,
        "best_val_avg_jct_s": best_jct,
        "best_update": best_iteration,
        "improvement_vs_init": 1.0 - best_jct / init_jct if math.isfinite(init_jct) else None,
        "validation_sim": "full",
    }
    return policy, finetune_curve(rows), metrics


def _row(step: int, episodes: int, start: float, jct: float, stats: dict) -> dict[str, Any]:
    return {
        "step": step,
        "episodes": episodes,
        "wall_s": time.perf_counter() - start,
        "val_avg_jct_s": jct if math.isfinite(jct) else None,
        "reward": stats.get("reward"),
        "entropy": stats.get("entropy"),
        "policy_loss": stats.get("pl"),
        "value_loss": None,
    }
