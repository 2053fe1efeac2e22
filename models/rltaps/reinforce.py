"""RL-TAPS training: REINFORCE with a per-time-step baseline (RL-TAPS 4.5.2, Algorithm 1).

A fresh network first imitates a baseline (`cfg.teacher`, default SJF; a deviation, see
`models.rltaps.imitation`; `cfg.as_published()` trains from random weights as the paper).
For every training job sequence (in a shuffled order each epoch), E episodes are played with
the current policy, every GPU's slot sampled from its masked softmax. Each step t of episode
i gets the return G_t^i (discount `gamma`); the baseline b_t is the mean of G_t over the E
episodes (eq. 9; an episode that already ended counts 0, as in DeepRM). The gradient

    sum over episodes i and steps t of (G_t^i - b_t) grad log pi(A_t^i | S_t^i),
    log pi = sum over GPUs of log p(A_g | S_t)                                 (eq. 7)

is accumulated over B sequences and applied as one Adam step of 1 / (B E) of it (ascent).
Leftover sequences at the end of an epoch make one smaller step.

Non-streaming mode: one static set of J training sequences and one of validation sequences.
Streaming mode: a fresh set of J training sequences every `refresh_every` epochs and a fresh
validation set every epoch (RL-TAPS 5.1.1). After every epoch the greedy policy is run on the
validation set (mean G_1 and mean slowdown, eq. 16-17), which is the learning curve; the
weights with the lowest validation slowdown are kept (`keep_best`).

    policy, curve, metrics = train(ReinforceConfig(mode="streaming", ...))
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import polars as pl
import torch
from threadpoolctl import threadpool_limits

from models.dl2.config import to_dict
from models.rltaps.config import ReinforceConfig
from models.rltaps.imitation import warm_start
from models.rltaps.networks import PolicyNet
from models.rltaps.policy import (
    Episode,
    RLTapsPolicy,
    clone,
    job_sequences,
    run_episode,
    sequence_seeds,
)
from models.torch_scope import scoped_torch
from tracelib.envs.gpu import GpuAssignmentEnv
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds

STREAMS = ("init", "train", "validation", "shuffle", "actions", "imitation")
"""Random streams of one training (`tracelib.seeds`: named, spawned in this order; append
only)."""

CURVE_SCHEMA = {
    "iteration": pl.Int32,
    "mode": pl.Utf8,
    "updates": pl.Int32,
    "episodes": pl.Int32,
    "wall_s": pl.Float64,
    "train_reward": pl.Float64,
    "train_slowdown": pl.Float64,
    "val_reward": pl.Float64,
    "val_slowdown": pl.Float64,
    "entropy": pl.Float64,
    "loss": pl.Float64,
    "val_seeds": pl.Utf8,
}
"""A trainer's curve frame: one row per epoch (iteration 0: before training)."""


class BestWeights:
    """A trainer's best validated weights so far: the lowest validation cost, the earlier
    one on a tie; the first offer is always kept."""

    def __init__(self) -> None:
        self._best: tuple[float, int, dict[str, torch.Tensor]] | None = None

    def offer(self, cost: float, step: int, net: torch.nn.Module) -> None:
        """Keep a copy of `net`'s weights at `step` if `cost` is the lowest so far."""
        if self._best is None or cost < self._best[0]:
            state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            self._best = (cost, step, state)

    def restore(self, net: torch.nn.Module, policy: Any, keep: bool) -> int:
        """The step of the best weights; with `keep`, they are loaded into `net` and
        `policy` refreshed from it."""
        assert self._best is not None
        _, step, state = self._best
        if keep:
            net.load_state_dict(state)
            policy.refresh()
        return step


def returns_and_advantages(
    rewards: list[np.ndarray], gamma: float
) -> tuple[np.ndarray, np.ndarray]:
    """Returns G_t^i (E, T) of E episodes padded with 0 past their end, and the advantages
    G_t^i - b_t with b_t the mean over episodes (eq. 9), (E, T)."""
    horizon = max(len(r) for r in rewards)
    padded = np.zeros((len(rewards), horizon))
    for i, r in enumerate(rewards):
        padded[i, : len(r)] = r
    returns = np.zeros_like(padded)
    running = np.zeros(len(rewards))
    for t in range(horizon - 1, -1, -1):
        running = padded[:, t] + gamma * running
        returns[:, t] = running
    return returns, returns - returns.mean(axis=0, keepdims=True)


def policy_gradient_loss(
    net: PolicyNet, episodes: list[Episode], gamma: float, scale: float
) -> tuple[torch.Tensor, float]:
    """The surrogate loss -scale * sum (G - b) log pi over the episodes' steps (its gradient
    is Algorithm 1's update direction, negated for descent), and the steps' mean entropy."""
    _, adv = returns_and_advantages([ep.rewards for ep in episodes], gamma)
    obs = torch.from_numpy(np.concatenate([ep.obs for ep in episodes]))  # (S, D)
    mask = torch.from_numpy(np.concatenate([ep.masks for ep in episodes]))  # (S, M, N+1)
    choice = torch.from_numpy(np.concatenate([ep.choices for ep in episodes]))  # (S, M)
    weight = torch.from_numpy(
        np.concatenate([adv[i, : len(ep.rewards)] for i, ep in enumerate(episodes)])
    ).float()  # (S,)
    logp, entropy = net.log_prob_and_entropy(obs, mask, choice)
    loss = -scale * (weight * logp).sum()
    return loss, float(entropy.mean().detach())


def _validate(policy: RLTapsPolicy, env: GpuAssignmentEnv, gamma: float) -> tuple[float, float]:
    """Greedy policy on every sequence of `env`: mean G_1 and mean slowdown."""
    eps = [run_episode(env, k, policy=policy) for k in range(len(env.workloads))]
    return (
        float(np.mean([ep.first_return(gamma) for ep in eps])),
        float(np.mean([ep.slowdown for ep in eps])),
    )


def train(
    cfg: ReinforceConfig,
    init: RLTapsPolicy | None = None,
    progress: ProgressFn = no_progress,
) -> tuple[RLTapsPolicy, pl.DataFrame, dict[str, Any]]:
    """Train an RL-TAPS policy (from `init`, or fresh); returns the policy, its curve frame
    (CURVE_SCHEMA) and metrics (validation figures, budget used, sequence seeds).
    `progress(sequences done, total)` is called after every training sequence."""
    # Single-state inferences are tiny matrix products: BLAS threads only contend.
    with scoped_torch(threads=1), threadpool_limits(limits=1):
        return _train(cfg, init, progress)


def _train(
    cfg: ReinforceConfig, init: RLTapsPolicy | None, progress: ProgressFn
) -> tuple[RLTapsPolicy, pl.DataFrame, dict[str, Any]]:
    start = time.perf_counter()
    seeds = named_seeds(cfg.seed, STREAMS)
    if init is not None:
        policy = clone(init)
        policy.check_env(cfg.env)
    else:
        # Initialization from the run's own seed, without touching torch's global stream.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seeds["init"].generate_state(1)[0]))
            policy = RLTapsPolicy(PolicyNet(cfg.net))
    policy.system = cfg.system
    policy.train_config = to_dict(cfg)
    net = policy.net
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg.lr)
    train_rng = np.random.default_rng(seeds["train"])
    val_rng = np.random.default_rng(seeds["validation"])
    shuffle_rng = np.random.default_rng(seeds["shuffle"])
    act_rng = np.random.default_rng(seeds["actions"])

    def new_env(rng: np.random.Generator, n: int) -> tuple[GpuAssignmentEnv, list[int]]:
        seeds = sequence_seeds(rng, n)
        return GpuAssignmentEnv(job_sequences(seeds, cfg.n_jobs), cfg.env), seeds

    train_env, train_seeds = new_env(train_rng, cfg.train_sequences)
    val_env, val_seeds = new_env(val_rng, cfg.val_sequences)
    all_train_seeds = [list(train_seeds)]
    imitation: dict[str, Any] = {}
    if init is None and cfg.imitates:
        # A fresh network first imitates the teacher on the training sequences (deviation:
        # models/rltaps/imitation.py); iteration 0 of the curve is then its result.
        _, imitation["untrained_val_slowdown"] = _validate(policy, val_env, cfg.gamma)
        imitation |= warm_start(
            policy, train_env, cfg, int(seeds["imitation"].generate_state(1)[0])
        )
    rows: list[dict[str, Any]] = []
    updates = episodes = 0
    best = BestWeights()
    stopped = False

    def record(iteration: int, stats: dict[str, list[float]]) -> None:
        val_reward, val_slowdown = _validate(policy, val_env, cfg.gamma)

        def mean(name: str) -> float | None:
            return float(np.mean(stats[name])) if stats.get(name) else None

        rows.append(
            {
                "iteration": iteration,
                "mode": cfg.mode,
                "updates": updates,
                "episodes": episodes,
                "wall_s": time.perf_counter() - start,
                "train_reward": mean("reward"),
                "train_slowdown": mean("slowdown"),
                "val_reward": val_reward,
                "val_slowdown": val_slowdown,
                "entropy": mean("entropy"),
                "loss": mean("loss"),
                "val_seeds": ",".join(map(str, val_seeds)),
            }
        )
        best.offer(val_slowdown, iteration, net)

    record(0, {})
    for epoch in range(1, cfg.epochs + 1):
        if cfg.mode == "streaming":
            if epoch > 1 and (epoch - 1) % cfg.refresh_every == 0:
                train_env, train_seeds = new_env(train_rng, cfg.train_sequences)
                all_train_seeds.append(list(train_seeds))
            # Each epoch ends on a fresh test set (iteration 0 had its own).
            val_env, val_seeds = new_env(val_rng, cfg.val_sequences)
        stats: dict[str, list[float]] = {"reward": [], "slowdown": [], "entropy": [], "loss": []}
        optimizer.zero_grad()
        pending = 0
        order = shuffle_rng.permutation(len(train_env.workloads))
        for position, k in enumerate(order):
            eps = [
                run_episode(train_env, int(k), policy=policy, rng=act_rng, record=True)
                for _ in range(cfg.episodes)
            ]
            episodes += len(eps)
            scale = 1.0 / (cfg.batch_sequences * cfg.episodes)
            loss, entropy = policy_gradient_loss(net, eps, cfg.gamma, scale)
            loss.backward()
            pending += 1
            stats["reward"] += [ep.first_return(cfg.gamma) for ep in eps]
            stats["slowdown"] += [ep.slowdown for ep in eps]
            stats["entropy"].append(entropy)
            stats["loss"].append(float(loss.detach()))
            out_of_time = cfg.max_wall_s is not None and (
                time.perf_counter() - start >= cfg.max_wall_s
            )
            if pending == cfg.batch_sequences or position == len(order) - 1 or out_of_time:
                optimizer.step()
                optimizer.zero_grad()
                policy.refresh()
                updates += 1
                pending = 0
            progress((epoch - 1) * len(order) + position + 1, cfg.epochs * len(train_env.workloads))
            if out_of_time:
                stopped = True
                break
        record(epoch, stats)
        if stopped:
            break
    curve = pl.DataFrame(rows, schema=CURVE_SCHEMA, orient="row")
    best_iteration = best.restore(net, policy, cfg.keep_best)
    kept = curve.filter(
        pl.col("iteration") == (best_iteration if cfg.keep_best else rows[-1]["iteration"])
    )
    metrics = {
        "mode": cfg.mode,
        "epochs": int(rows[-1]["iteration"]),
        "updates": updates,
        "episodes": episodes,
        "wall_s": time.perf_counter() - start,
        "stopped_on_wall_clock": stopped,
        "kept_iteration": int(kept["iteration"][0]),
        "val_slowdown": float(kept["val_slowdown"][0]),
        "val_reward": float(kept["val_reward"][0]),
        "initial_val_slowdown": float(rows[0]["val_slowdown"]),
        "train_seeds": all_train_seeds,
        **imitation,
    }
    return policy, curve, metrics
