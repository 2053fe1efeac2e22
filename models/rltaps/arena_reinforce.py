"""RL-TAPS' arena training: REINFORCE with a per-time-step baseline (RL-TAPS 4.5.2,
Algorithm 1) on a workload set's job sequences, in the evaluation's DL2 setting.

For every training sequence (in a shuffled order each epoch), E episodes are simulated with
the current policy (`models.rltaps.arena.RLTapsArenaPolicy`), every GPU's slot drawn from
its masked softmax; all E share one simulator seed, so they differ only by the policy's
draws. Decision t of episode i gets the return G_t^i (discount `gamma`); the baseline b_t
is the mean of G_t over the E episodes (eq. 9; an episode that already ended counts 0). The
gradient of

    sum over episodes i and decisions t of (G_t^i - b_t) log pi(A_t^i | S_t^i),
    log pi = sum over the decision's GPUs of log p(A_g | S_t, A_<g)

is accumulated over B sequences and applied as one Adam step of 1 / (B E) of it (ascent).
Decisions the policy's liveness guard overrode are left out of the sum (their choices were
not the policy's); their rewards still count.

Reward (deviation from RL-TAPS' eq. 3-6, which rewards GPU throughput minus idle-job and
under-allocation penalties for its slowdown metric): minus the job-seconds spent in the
system during the decision's slot, over slot length x jobs in the sequence, so that with
gamma = 1 the return from the first decision is minus the sequence's average JCT in slots
(the arena judges average JCT; Chic's reward is the same quantity).

After every epoch the greedy policy runs on the validation sequences (one fixed simulator
seed): their mean average JCT is the learning curve, and the weights with the lowest one are
kept (`keep_best`); epoch 0 is the starting policy.

    policy, curve, metrics = train_arena(ArenaTrainConfig(...), train_jobs, val_jobs)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl
import torch
from threadpoolctl import threadpool_limits

from models.dl2.config import to_dict
from models.rltaps.arena import (
    ArenaNet,
    Recorded,
    RLTapsArenaPolicy,
    batch_of,
    clone_arena,
)
from models.rltaps.config import ARENA_SYSTEM, ArenaTrainConfig
from models.rltaps.reinforce import BestWeights, returns_and_advantages
from models.torch_scope import scoped_torch
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds
from tracelib.sim import JobSpec, SimResult, Simulator

ARENA_STREAMS = ("init", "shuffle", "actions", "simulator", "validation")
"""Random streams of one arena training (`tracelib.seeds`: named, spawned in this order;
append only)."""

CURVE_SCHEMA = {
    "phase": pl.Utf8,
    "step": pl.Int32,
    "episodes": pl.Int32,
    "wall_s": pl.Float64,
    "val_avg_jct_s": pl.Float64,
    "reward": pl.Float64,
    "entropy": pl.Float64,
    "policy_loss": pl.Float64,
}
"""The trainer's curve frame (`models.contracts.LearningCurves` columns; one row per epoch,
step 0 before training), registered with the policy (`register_policy(curve=...)`)."""


@dataclass
class ArenaEpisode:
    """One simulated episode of one job sequence."""

    rewards: np.ndarray
    """(T,) reward of each decision."""
    avg_jct_s: float
    records: list[Recorded]
    """The decisions as the policy saw them (empty unless recorded)."""


def slot_rewards(result: SimResult, times: Sequence[float], slot_s: float) -> np.ndarray:
    """(T,) minus the job-seconds in the system between consecutive decisions (the last
    until the last finish), over slot_s x the number of jobs."""
    arrival = result.jobs["arrival_s"].to_numpy()
    finish = result.jobs["finish_s"].to_numpy()
    starts = np.asarray(times, dtype=float)
    ends = np.append(starts[1:], max(float(finish.max()), starts[-1]))
    overlap = np.minimum(finish[None, :], ends[:, None]) - np.maximum(
        arrival[None, :], starts[:, None]
    )  # (T, J)
    return -np.maximum(overlap, 0.0).sum(axis=1) / (slot_s * len(arrival))


def run_episode(
    policy: RLTapsArenaPolicy,
    jobs: Sequence[JobSpec],
    sim_cfg,
    *,
    rng: np.random.Generator | None = None,
    record: bool = False,
) -> ArenaEpisode:
    """Simulate `jobs` under `policy`: greedy, or sampled with `rng`; with `record`, keep
    every decision for the gradient."""
    policy.sample_rng, policy.record, policy.records = rng, record, []
    try:
        result = Simulator(jobs, policy, sim_cfg).run()
        records = policy.records
    finally:
        policy.sample_rng, policy.record, policy.records = None, False, []
    rewards = np.zeros(0)
    if records:
        rewards = slot_rewards(result, [r.time_s for r in records], sim_cfg.slot_s)
    return ArenaEpisode(rewards, float(result.avg_jct_s), records)


def validate(policy: RLTapsArenaPolicy, sequences: Sequence[Sequence[JobSpec]], sim_cfg) -> float:
    """Mean over `sequences` of the greedy policy's average JCT (seconds)."""
    return float(np.mean([run_episode(policy, jobs, sim_cfg).avg_jct_s for jobs in sequences]))


def policy_gradient_loss(
    net: ArenaNet, episodes: list[ArenaEpisode], gamma: float, scale: float
) -> tuple[float, float]:
    """Backpropagate -scale * sum (G - b) log pi over the episodes' decisions, one episode at
    a time (memory stays at one episode's rows); returns the loss and the mean entropy."""
    _, adv = returns_and_advantages([ep.rewards for ep in episodes], gamma)
    total, entropies = 0.0, []
    for i, ep in enumerate(episodes):
        kept = [t for t, r in enumerate(ep.records) if not r.forced]
        if not kept:
            continue
        logp, entropy = net.log_prob_and_entropy(batch_of(ep.records))  # (T',), scalar
        weight = torch.from_numpy(adv[i, kept]).float()  # (T',)
        loss = -scale * (weight * logp).sum()
        loss.backward()
        total += float(loss.detach())
        entropies.append(float(entropy.detach()))
    return total, float(np.mean(entropies)) if entropies else 0.0


def train_arena(
    cfg: ArenaTrainConfig,
    train: Sequence[Sequence[JobSpec]],
    val: Sequence[Sequence[JobSpec]],
    init: RLTapsArenaPolicy | None = None,
    progress: ProgressFn = no_progress,
) -> tuple[RLTapsArenaPolicy, pl.DataFrame, dict[str, Any]]:
    """Train RL-TAPS' arena policy on `train` job sequences, validating on `val` (from
    `init`, or fresh); returns the policy, its curve (CURVE_SCHEMA) and metrics.
    `progress(sequences done, total)` after every training sequence."""
    if not train or not val:
        raise ValueError("need training and validation sequences")
    # Single-decision inferences are tiny matrix products: BLAS threads only contend.
    with scoped_torch(threads=1), threadpool_limits(limits=1):
        return _train(cfg, train, val, init, progress)


def _train(cfg, train, val, init, progress):
    start = time.perf_counter()
    seeds = named_seeds(cfg.seed, ARENA_STREAMS)
    if init is not None:
        policy = clone_arena(init)
        if policy.env != cfg.env:
            raise ValueError(f"policy for {policy.env}, training runs {cfg.env}")
    else:
        # Initialization from the run's own seed, without touching torch's global stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seeds["init"].generate_state(1)[0]))
            policy = RLTapsArenaPolicy(ArenaNet(cfg.net), cfg.env)
    policy.system = ARENA_SYSTEM
    policy.train_config = to_dict(cfg)
    net = policy.net
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    shuffle_rng, act_rng = (
        np.random.default_rng(seeds["shuffle"]),
        np.random.default_rng(seeds["actions"]),
    )
    sim_rng = np.random.default_rng(seeds["simulator"])
    val_cfg = replace(cfg.sim, seed=int(seeds["validation"].generate_state(1)[0]))
    rows: list[dict[str, Any]] = []
    episodes = updates = forced = 0
    best = BestWeights()

    def record(epoch: int, returns: list[float], entropy: list[float], loss: list[float]):
        val_jct = validate(policy, val, val_cfg)
        rows.append(
            {
                "phase": "finetune",
                "step": epoch,
                "episodes": episodes,
                "wall_s": time.perf_counter() - start,
                "val_avg_jct_s": val_jct,
                "reward": float(np.mean(returns)) if returns else None,
                "entropy": float(np.mean(entropy)) if entropy else None,
                "policy_loss": float(np.mean(loss)) if loss else None,
            }
        )
        best.offer(val_jct, epoch, net)

    record(0, [], [], [])
    scale = 1.0 / (cfg.batch_sequences * cfg.episodes)
    total = cfg.epochs * len(train)
    for epoch in range(1, cfg.epochs + 1):
        returns: list[float] = []
        entropies: list[float] = []
        losses: list[float] = []
        optimizer.zero_grad()
        pending = 0
        order = shuffle_rng.permutation(len(train))
        for position, k in enumerate(order.tolist()):
            sim_cfg = replace(cfg.sim, seed=int(sim_rng.integers(0, 2**31 - 1)))
            eps = [
                run_episode(policy, train[k], sim_cfg, rng=act_rng, record=True)
                for _ in range(cfg.episodes)
            ]
            episodes += len(eps)
            forced += sum(r.forced for ep in eps for r in ep.records)
            loss, entropy = policy_gradient_loss(net, eps, cfg.gamma, scale)
            pending += 1
            returns += [float(np.sum(ep.rewards)) for ep in eps]
            entropies.append(entropy)
            losses.append(loss)
            if pending == cfg.batch_sequences or position == len(order) - 1:
                optimizer.step()
                optimizer.zero_grad()
                policy.refresh()
                updates += 1
                pending = 0
            progress((epoch - 1) * len(train) + position + 1, total)
        record(epoch, returns, entropies, losses)
    curve = pl.DataFrame(rows, schema=CURVE_SCHEMA, orient="row")
    best_epoch = best.restore(net, policy, cfg.keep_best)
    kept = rows[best_epoch if cfg.keep_best else -1]
    metrics = {
        "epochs": cfg.epochs,
        "updates": updates,
        "episodes": episodes,
        "wall_s": time.perf_counter() - start,
        "kept_epoch": int(kept["step"]),
        "val_avg_jct_s": float(kept["val_avg_jct_s"]),
        "initial_val_avg_jct_s": float(rows[0]["val_avg_jct_s"]),
        "forced_decisions": forced,
    }
    return policy, curve, metrics
