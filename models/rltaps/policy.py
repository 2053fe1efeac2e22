"""`RLTapsPolicy` (a trained network that assigns every GPU each step), checkpoints, episodes
and the evaluation RL-TAPS and its baselines share.

Every scheduler runs in the same topology-aware environment (`tracelib.envs.gpu`): RL-TAPS
through its per-GPU action, the baselines (RL-TAPS 5.3: Random, SJF and Tetris job pickers
with the first-fit GPU allocator, not topology-aware, no preemption) through
`GpuAssignmentEnv.step_decision`, so the reward (eq. 3-6) and the slowdown (eq. 17) are
measured alike. A baseline sees what DeepRM's pickers see: its running jobs and the first N
waiting jobs (the job slots); later arrivals wait in the backlog.

    policy = RLTapsPolicy(net)                              # greedy
    outcome = run_episode(env, k, policy=policy)            # one job sequence
    rows = evaluate_schedulers({"sjf": None, "rl-taps": policy}, sequences, env_cfg)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl
from threadpoolctl import threadpool_limits
from torch import nn

from models.checkpoints import Checkpoint, CheckpointError, SavesPolicyNet, load_checkpoint
from models.dl2.config import from_dict, to_dict
from models.heuristics.pickers import SJF, FirstFit, Random, TetrisPicker
from models.heuristics.registry import ALLOCATIONS, PREEMPTIVE_BASELINES
from models.rltaps.config import SYSTEM, RLTapsNetConfig
from models.rltaps.networks import FastPolicy, PolicyNet
from tracelib.envs.gpu import GpuAssignmentEnv, GpuEnvConfig
from tracelib.progress import ProgressFn, no_progress
from tracelib.scenarios.rltaps import job_length_s, rl_taps_jobs
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import AllocationPolicy, Scheduler
from tracelib.sim.snapshot import Allocation, Snapshot
from tracelib.synthetic import BimodalConfig

BASELINES = ("random", "sjf", "tetris")
"""RL-TAPS section 5.3's job pickers, each with the first-fit GPU allocator."""

PREEMPTIVE = PREEMPTIVE_BASELINES
"""The arena's preemptive baselines (`models.heuristics.registry.PREEMPTIVE_BASELINES`:
Tiresias' 2D-LAS and 2D-Gittins, preemptive SRTF), run in RL-TAPS' scenario as its
pickers are (first-fit GPUs, the visible job slots), beside them in its evaluation: a
preemptive learned scheduler judged against preemptive heuristics. They pay the scenario's
resume cost, as RL-TAPS does."""


class RLTapsPolicy(SavesPolicyNet):
    """Greedy (default) or sampled per-GPU choices of an RL-TAPS policy network."""

    def __init__(
        self,
        net: PolicyNet,
        *,
        system: str = SYSTEM,
        train_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.net = net
        self.cfg: RLTapsNetConfig = net.cfg
        self.system = system
        self.train_config = dict(train_config or {})
        """How the policy was trained (trainer config), saved with the checkpoint."""
        self.refresh()

    def refresh(self) -> None:
        """Re-read the network's weights (after training changed them)."""
        self.fast = FastPolicy(self.net)

    def act(
        self, obs: np.ndarray, mask: np.ndarray, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """(D,) image and (M, N + 1) mask -> (M,) job slot per GPU (N: idle)."""
        return self.fast.choose(obs, mask, rng)

    def check_env(self, env: GpuEnvConfig) -> None:
        """ValueError unless this network reads `env`'s observations."""
        want = RLTapsNetConfig.for_env(env, self.cfg.hidden)
        if want != self.cfg:
            raise ValueError(f"policy network {self.cfg} does not fit the environment {want}")

    def checkpoint_config(self) -> dict[str, Any]:
        """What the checkpoint and the registry record: network shape and training config."""
        return {"net": to_dict(self.cfg), "train": self.train_config}


def load_weights(net: nn.Module, ckpt: Checkpoint) -> None:
    """Put a checkpoint's "policy" weights into `net`; CheckpointError if they do not fit
    the network its config describes."""
    try:
        net.load_state_dict(ckpt.state["policy"], strict=True)
    except (KeyError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(f"checkpoint weights do not match its config: {first}") from None


def policy_from_checkpoint(ckpt: Checkpoint) -> RLTapsPolicy:
    """Rebuild an `RLTapsPolicy` from a loaded checkpoint; CheckpointError if the weights do
    not fit the network its config describes."""
    try:
        cfg = from_dict(RLTapsNetConfig, ckpt.config["net"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint config is not an RL-TAPS network: {exc}") from None
    net = PolicyNet(cfg)
    load_weights(net, ckpt)
    return RLTapsPolicy(net, system=ckpt.system, train_config=ckpt.config.get("train", {}))


def load_policy(path: str | os.PathLike[str], *, sha256: str | None = None) -> RLTapsPolicy:
    """Load an RL-TAPS checkpoint (weights_only=True), verifying its sha256 when given."""
    return policy_from_checkpoint(load_checkpoint(path, sha256=sha256))


def clone(policy: RLTapsPolicy) -> RLTapsPolicy:
    """A copy with its own weights (training the copy leaves `policy` as it was)."""
    net = PolicyNet(policy.cfg)
    net.load_state_dict({k: v.detach().clone() for k, v in policy.net.state_dict().items()})
    return RLTapsPolicy(net, system=policy.system, train_config=policy.train_config)


# -- job sequences -------------------------------------------------------------------------


def sequence_seeds(rng: np.random.Generator, n: int) -> list[int]:
    """n seeds of the bimodal job generator, drawn from `rng`."""
    return [int(s) for s in rng.integers(0, 2**31 - 1, n)]


def job_sequences(seeds: Sequence[int], n_jobs: int) -> list[tuple[JobSpec, ...]]:
    """RL-TAPS job sequences (one job per step, section 5.1's bimodal mix) of each seed."""
    return [rl_taps_jobs(BimodalConfig.rl_taps(n_jobs=n_jobs, seed=int(s))) for s in seeds]


# -- baselines -----------------------------------------------------------------------------


@dataclass(frozen=True)
class VisibleSlots:
    """A job picker restricted to DeepRM's view: running jobs plus the first `slots`
    waiting jobs by arrival (the rest are in the backlog and cannot be picked)."""

    picker: AllocationPolicy
    slots: int = 10

    @property
    def name(self) -> str:
        """The picker's name."""
        return self.picker.name

    @property
    def interval_s(self) -> float | None:
        """The picker's decision interval."""
        return self.picker.interval_s

    @property
    def uses_oracle(self) -> bool:
        """Whether the picker reads the speed oracle."""
        return self.picker.uses_oracle

    def allocate(self, snap: Snapshot) -> Allocation:
        """The picker's allocation over the visible jobs."""
        running = [j for j in snap.jobs if j.placement.workers or j.placement.ps]
        waiting = [j for j in snap.jobs if not (j.placement.workers or j.placement.ps)]
        visible = {j.job_id for j in running + waiting[: self.slots]}
        return self.picker.allocate(
            replace(snap, jobs=tuple(j for j in snap.jobs if j.job_id in visible))
        )


def baseline_scheduler(name: str, slots: int = 10, seed: int = 0) -> Scheduler:
    """A RL-TAPS baseline: `name` in BASELINES or PREEMPTIVE, first-fit GPUs, the visible
    job slots."""
    pickers = {"random": Random(seed=seed), "sjf": SJF(), "tetris": TetrisPicker()}
    if name in PREEMPTIVE:
        pickers[name] = ALLOCATIONS.create(name)
    if name not in pickers:
        known = ", ".join((*BASELINES, *PREEMPTIVE))
        raise ValueError(f"unknown RL-TAPS baseline {name!r}; known: {known}")
    return Scheduler(VisibleSlots(pickers[name], slots), FirstFit())


# -- episodes ------------------------------------------------------------------------------


@dataclass
class Episode:
    """One episode on one job sequence."""

    rewards: np.ndarray
    """(T,) reward of each step."""
    slowdown: float
    """Mean slowdown of the sequence's jobs (RL-TAPS eq. 17)."""
    obs: np.ndarray | None = None
    """(T, D) states (recorded for training only)."""
    masks: np.ndarray | None = None
    """(T, M, N + 1) masks."""
    choices: np.ndarray | None = None
    """(T, M) per-GPU choices."""
    finish_s: dict[int, float] | None = None
    """job_id -> the time eq. 17 counts it finished (its step's end; T_max if unfinished)."""

    def first_return(self, gamma: float) -> float:
        """G_1: the discounted sum of the episode's rewards (the paper's "reward")."""
        return float(np.sum(self.rewards * gamma ** np.arange(len(self.rewards))))


def run_episode(
    env: GpuAssignmentEnv,
    workload: int,
    *,
    policy: RLTapsPolicy | None = None,
    scheduler: Scheduler | None = None,
    rng: np.random.Generator | None = None,
    record: bool = False,
) -> Episode:
    """Run job sequence `workload` of `env` to the end (or T_max = env.max_steps) under
    `policy` (greedy, or sampled with `rng`) or a baseline `scheduler`.

    Slowdown (eq. 17): a job finishes at the end of the step after which it is gone,
    unfinished jobs (arrived or not) at T_max, over len(j) (the job alone on its requested
    GPUs without communication)."""
    if (policy is None) == (scheduler is None):
        raise ValueError("give exactly one of policy and scheduler")
    obs, info = env.reset(seed=0, options={"workload": workload})
    jobs = env.workloads[workload]
    step_s = env.sim_cfg.slot_s
    finish: dict[int, float] = {}
    seen: set[int] = set()
    rewards, states, masks, choices = [], [], [], []
    while True:
        snap = env.session.snapshot
        before = {j.job_id for j in snap.jobs}
        seen |= before
        if policy is not None:
            mask = info["action_mask"]
            choice = policy.act(obs, mask, rng)
            if record:
                states.append(obs)
                masks.append(mask)
                choices.append(choice)
            obs, reward, terminated, truncated, info = env.step(choice)
        else:
            alloc, placement = scheduler.decide(snap, env.session.rng)
            obs, reward, terminated, truncated, info = env.step_decision(alloc, placement)
        rewards.append(reward)
        now = env.session.snapshot
        end = now.time_s if now is not None else env.session.time_s
        after = {j.job_id for j in now.jobs} if now is not None else set()
        for job_id in before - after:
            finish[job_id] = end
        if terminated or truncated:
            break
    horizon = env.max_steps * step_s
    slowdowns = [
        (max(finish.get(j.job_id, horizon), j.arrival_s) - j.arrival_s)
        / job_length_s(j, env.catalogue)
        for j in jobs
    ]
    out = Episode(
        np.asarray(rewards, dtype=float),
        float(np.mean(slowdowns)),
        finish_s={j.job_id: max(finish.get(j.job_id, horizon), j.arrival_s) for j in jobs},
    )
    if record:
        out.obs = np.stack(states).astype(np.float32)
        out.masks = np.stack(masks)
        out.choices = np.stack(choices).astype(np.int64)
    return out


def evaluate_schedulers(
    schedulers: Mapping[str, RLTapsPolicy | None],
    sequences: Sequence[Sequence[JobSpec]],
    env_cfg: GpuEnvConfig,
    *,
    gamma: float = 1.0,
    seed: int = 0,
    progress: ProgressFn = no_progress,
) -> dict[str, list[tuple[float, float]]]:
    """(G_1, mean slowdown) per sequence of every scheduler (`scheduler_episodes`)."""
    episodes = scheduler_episodes(schedulers, sequences, env_cfg, seed=seed, progress=progress)
    return {
        name: [(ep.first_return(gamma), ep.slowdown) for ep in eps]
        for name, eps in episodes.items()
    }


def scheduler_episodes(
    schedulers: Mapping[str, RLTapsPolicy | None],
    sequences: Sequence[Sequence[JobSpec]],
    env_cfg: GpuEnvConfig,
    *,
    seed: int = 0,
    progress: ProgressFn = no_progress,
) -> dict[str, list[Episode]]:
    """The episode of every scheduler on every sequence: a name in BASELINES or PREEMPTIVE
    (value None;
    its picker's generator seeded from `seed` runs through the sequences in order) or a
    learned policy (greedy). `progress(episodes done, total)` after each."""
    env = GpuAssignmentEnv(sequences, env_cfg)
    out: dict[str, list[Episode]] = {}
    # Single-state inferences are tiny matrix products: BLAS threads only contend.
    with threadpool_limits(limits=1):
        for name, policy in schedulers.items():
            if policy is not None:
                policy.check_env(env_cfg)
            scheduler = None if policy else baseline_scheduler(name, env_cfg.obs.slots, seed)
            rows = []
            for k in range(len(sequences)):
                rows.append(run_episode(env, k, policy=policy, scheduler=scheduler))
                progress(len(out) * len(sequences) + k + 1, len(schedulers) * len(sequences))
            out[name] = rows
    return out


def episode_job_rows(episode: Episode, jobs: tuple[JobSpec, ...]) -> pl.DataFrame:
    """eval_jobs rows of one RL-TAPS episode: eq. 17's finish (its step's end, T_max if
    unfinished) and slowdown ((finish - arrival) / len(j), len(j) the `ideal_s`). The
    episode does not record when a job first got GPUs (start_s is its arrival) nor the
    GPU-seconds it held (0)."""
    finish = [episode.finish_s[j.job_id] for j in jobs]
    arrival = [j.arrival_s for j in jobs]
    ideal = [job_length_s(j) for j in jobs]
    jct = [f - a for f, a in zip(finish, arrival, strict=True)]
    return pl.DataFrame(
        {
            "job_index": [j.job_id for j in jobs],
            "job_id": [j.name or str(j.job_id) for j in jobs],
            "model": [j.model for j in jobs],
            "arrival_s": arrival,
            "start_s": arrival,
            "finish_s": finish,
            "jct_s": jct,
            "ideal_s": ideal,
            "slowdown": [t / i for t, i in zip(jct, ideal, strict=True)],
            "gpu_time_s": [0.0] * len(jobs),
        },
        schema_overrides={"job_index": pl.Int32},
    )
