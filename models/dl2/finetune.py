"""DL2 online RL fine-tuning (section 4.3): actor-critic in the simulator, read top to bottom.

Episodes run in `AllocationEnv` (the real simulator through a SimSession). Each time slot
the policy makes repeated masked inferences (3J + 1 actions) until stop or nothing fits; the
slot's reward (sum over jobs of epochs trained / total epochs, given by the env when the
slot ends) becomes the reward of every sample of that slot, and the next state of the slot
is the first state of the next slot. At the end of every slot the networks are updated once
(DL2's "step") on a minibatch of 256 drawn from a replay buffer of the latest 8192 samples:

    value (TD):  target = r + gamma * V(s_next_slot) * (1 - done);  loss = (V(s) - target)^2
    policy:      A = target - V(s), standardized in the minibatch (`normalize_advantage`)
                 loss = -A * log pi(a | s) - entropy_weight * H(pi(. | s)) / (3J + 1)

(the entropy bonus is scaled as in the authors' code, which averages -p log p over the
actions; the policy waits `critic_warmup` updates for the critic). Job-aware exploration:
when some job is in a poor state (several workers and no PS, several PSs and no worker, or
a worker/PS ratio above 10), the corrective action replaces the policy's with probability
epsilon; and, as in the authors' code (not in the paper's text), once every visible job
holds more than k workers (k drawn per slot) stop is tried with probability
`stop_injection` (a policy warmed up on DRF, which never stops, meets stop no other way).
Each slot starts with a worker+PS pair for every job that fits one (`bundle_first`). The
greedy policy is validated every `val_every` updates (average JCT on the validation
workloads); the best validated weights are returned.

Two additions that are not in the paper, both off by default in this module (the pipeline's
`DL2StageConfig` sets what was measured best): `clip`, PPO's clipped surrogate, the ratio
of the policy's probability of a replayed action to the probability it had when played
clipped to 1 +- clip (so an update cannot push a sample far, however old it is); and
`kl_init`, a penalty on KL(initial policy || policy) over each minibatch's states, which
keeps fine-tuning near its warm-up. The policy decides every `net.interval_s` seconds, or
at every arrival and completion with `net.trigger="events"` (a "slot" below is the time
from one decision to the next).

Switches (DL2 Table 2): `value_net=False` replaces V by an exponential moving average of
slot rewards (advantage = r - average: the TD advantage with V held at the average
return), `exploration=False` drops the job-aware exploration (the entropy bonus stays),
`replay=False` updates on the slot just played. `offline=True` is OfflineRL: the same
algorithm trained and validated in the analytical-model simulator.

    policy, curve, metrics = finetune(train_workloads, val_workloads, FinetuneConfig(), init=warm)
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from models.contracts import CURVE_COLUMNS
from models.dl2.config import DL2NetConfig, FinetuneConfig, to_dict
from models.dl2.networks import (
    PolicyNet,
    ValueNet,
    acting_mask,
    choose,
    fast_policy,
    masked_entropy,
    masked_log_prob,
)
from models.dl2.policy import DL2Policy, average_jct, clone_net
from models.dl2.recorder import Workloads, as_workloads
from tracelib.envs import AllocationEnv, AllocationEnvConfig
from tracelib.envs.observation import AllocationActions
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.config import SimConfig
from tracelib.sim.engine import SimulationStalled
from tracelib.sim.jobs import JobSpec

MAX_EPISODE_SLOTS = 2000
"""An episode that has not finished after this many slots is truncated (a policy that
stops too early can starve jobs for ever)."""


def overallocated(builder: AllocationBuilder, window: int, k: int) -> bool:
    """Every visible job holds more than k workers (when stop injection may try stop)."""
    n = min(len(builder.jobs), window)
    return n > 0 and min(builder.workers[:n]) > k


def corrective_action(
    builder: AllocationBuilder, mask: np.ndarray, window: int, threshold: float
) -> int | None:
    """DL2's job-aware exploration: the fixed action for the first job in a poor state
    (whose action is valid), None if no job is in one.

    (i) several workers, no PS -> add a PS; (ii) several PSs, no worker -> add a worker;
    (iii) workers/PSs > threshold -> add a PS, PSs/workers > threshold -> add a worker."""
    actions = AllocationActions(window)
    for i in range(min(len(builder.jobs), window)):
        w, p = builder.workers[i], builder.ps[i]
        if (w >= 2 and p == 0) or (p > 0 and w / p > threshold):
            action = actions.add_ps(i)
        elif (p >= 2 and w == 0) or (w > 0 and p / w > threshold):
            action = actions.add_worker(i)
        else:
            continue
        if mask[action]:
            return action
    return None


class Replay:
    """Ring buffer of samples: (obs, mask, action) of one inference, the reward of its slot,
    the state after the action (`step_next`), whether it was the slot's last inference, and
    the slot's next state (`slot_next`: the first state of the next slot) and `done`."""

    def __init__(self, size: int, obs_dim: int, n_actions: int) -> None:
        self.size = size
        self.obs = np.zeros((size, obs_dim), dtype=np.float32)
        self.step_next = np.zeros((size, obs_dim), dtype=np.float32)
        self.slot_next = np.zeros((size, obs_dim), dtype=np.float32)
        self.mask = np.zeros((size, n_actions), dtype=bool)
        self.action = np.zeros(size, dtype=np.int64)
        self.reward = np.zeros(size, dtype=np.float32)
        self.last = np.zeros(size, dtype=bool)
        self.done = np.zeros(size, dtype=np.float32)
        self.logp = np.zeros(size, dtype=np.float32)
        self.count = 0
        self._next = 0

    def add(self, slot: dict[str, np.ndarray]) -> None:
        """Append the samples of one slot (`slot_batch` arrays)."""
        for k in range(len(slot["action"])):
            i = self._next
            for name in ("obs", "step_next", "slot_next", "mask", "action", "reward", "logp"):
                getattr(self, name)[i] = slot[name][k]
            self.last[i], self.done[i] = slot["last"][k], slot["done"][k]
            self._next = (i + 1) % self.size
            self.count = min(self.count + 1, self.size)

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """Tensors of the samples at `index`."""
        names = (
            "obs",
            "step_next",
            "slot_next",
            "mask",
            "action",
            "reward",
            "last",
            "done",
            "logp",
        )
        return {name: torch.from_numpy(getattr(self, name)[index]) for name in names}


def slot_batch(
    obs: list[np.ndarray],
    mask: list[np.ndarray],
    action: list[int],
    step_next: list[np.ndarray],
    reward: float,
    slot_next: np.ndarray,
    done: bool,
    logp: list[float] | None = None,
) -> dict[str, np.ndarray]:
    """The samples of one slot as arrays; the last one's next state is the next slot's.
    `logp`: the acting policy's log-probability of each action (PPO's ratio)."""
    n = len(action)
    step_next = [*step_next[: n - 1], slot_next]
    return {
        "obs": np.stack(obs),
        "mask": np.stack(mask),
        "action": np.asarray(action, dtype=np.int64),
        "step_next": np.stack(step_next),
        "slot_next": np.repeat(slot_next[None], n, axis=0),
        "reward": np.full(n, reward, dtype=np.float32),
        "last": np.arange(n) == n - 1,
        "done": np.full(n, float(done), dtype=np.float32),
        "logp": np.asarray(logp if logp is not None else [0.0] * n, dtype=np.float32),
    }


def validate_greedy(policy_net: PolicyNet, workloads, sim, seed: int) -> float:
    """Average JCT (s) of the greedy policy on the validation workloads (inf if stuck)."""
    try:
        return average_jct(DL2Policy(policy_net), workloads, sim, seed=seed)
    except SimulationStalled:
        return math.inf


def finetune(
    train_workloads: Workloads | Sequence[Sequence[JobSpec]],
    val_workloads: Workloads | Sequence[Sequence[JobSpec]],
    cfg: FinetuneConfig | None = None,
    init: DL2Policy | None = None,
    *,
    eval_seed: int = 0,
    progress: ProgressFn = no_progress,
) -> tuple[DL2Policy, pl.DataFrame, dict[str, Any]]:
    """Train a DL2 policy by actor-critic RL from `init` (a warm-up policy) or from scratch;
    returns (best validated policy, learning curve, metrics). `progress(updates, total)` is
    called after every update."""
    cfg = cfg or FinetuneConfig()
    start = time.perf_counter()
    train_jobs, val_jobs = training_and_validation_jobs(train_workloads, val_workloads)

    # -- seeds: one stream per source of randomness -----------------------------------------
    seeds = named_seeds(cfg.seed, ("init", "envs", "actions", "replay"))
    act_rng = np.random.default_rng(seeds["actions"])
    replay_rng = np.random.default_rng(seeds["replay"])
    env_seed = int(seeds["envs"].generate_state(1)[0])

    # -- networks -----------------------------------------------------------------------------
    net_cfg = init.cfg if init is not None else cfg.net
    with torch.random.fork_rng():
        torch.manual_seed(int(seeds["init"].generate_state(1)[0]))
        policy_net = clone_net(init.net) if init is not None else PolicyNet(net_cfg)
        value_net = ValueNet(net_cfg) if cfg.value_net else None
    anchor = clone_net(policy_net) if cfg.kl_init > 0 else None  # frozen initial policy
    opt_pi = torch.optim.Adam(policy_net.parameters(), lr=cfg.lr)
    opt_v = torch.optim.Adam(value_net.parameters(), lr=cfg.lr) if value_net else None
    fast = fast_policy(policy_net)

    # -- environment ------------------------------------------------------------------------
    window = net_cfg.window
    sim = cfg.train_sim(window)
    env = training_env(train_jobs, net_cfg, sim)
    replay = Replay(cfg.replay_size, net_cfg.input_dim, net_cfg.n_actions)

    # -- bookkeeping ----------------------------------------------------------------------
    rows: list[dict[str, Any]] = []
    since: dict[str, list[float]] = {"reward": [], "entropy": [], "pl": [], "vl": []}
    best_jct = validate_greedy(policy_net, val_jobs, sim, eval_seed)
    init_jct = best_jct
    best_state = {k: v.clone() for k, v in policy_net.state_dict().items()}
    best_update = 0
    rows.append(_row(0, 0, start, best_jct, since))
    updates = episodes = samples = policy_updates = stalled = 0
    baseline: float | None = None  # moving-average reward (value_net off)

    def update(batch: dict[str, torch.Tensor]) -> None:
        """One actor-critic step on a batch of samples."""
        nonlocal baseline, fast, policy_updates
        if value_net is not None:
            with torch.no_grad():
                # Value target of every inference of a slot: the slot's reward plus the
                # discounted value of the next slot's first state (TD across slots).
                target = batch["reward"] + cfg.gamma * value_net(batch["slot_next"]) * (
                    1.0 - batch["done"]
                )
                if cfg.credit == "inference":
                    # TD error of the per-inference MDP: no reward and no discount between
                    # a slot's inferences, so the advantage of one inference is the change
                    # of value it caused; the last one closes the slot.
                    q = torch.where(batch["last"], target, value_net(batch["step_next"]))
                else:
                    q = target
            v = value_net(batch["obs"])
            value_loss = F.mse_loss(v, target)
            opt_v.zero_grad()
            value_loss.backward()
            opt_v.step()
            advantage = (q - v).detach()
            since["vl"].append(float(value_loss.detach()))
        else:
            advantage = batch["reward"] - baseline
        if cfg.normalize_advantage and len(advantage) > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
        logits = policy_net.masked_logits(batch["obs"], batch["mask"])  # (B, 3J + 1)
        log_pi = torch.log_softmax(logits, dim=-1)
        logp = log_pi.gather(1, batch["action"][:, None]).squeeze(1)  # (B,)
        entropy = masked_entropy(logits, batch["mask"]).mean()
        bonus = cfg.entropy_weight * entropy / net_cfg.n_actions
        if cfg.clip is None:
            policy_loss = -(logp * advantage).mean() - bonus
        else:
            # PPO's clipped surrogate against the policy that played each sample
            ratio = torch.exp(logp - batch["logp"])
            clipped = torch.clamp(ratio, 1.0 - cfg.clip, 1.0 + cfg.clip)
            policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean() - bonus
        if anchor is not None:
            with torch.no_grad():
                log_init = torch.log_softmax(anchor.masked_logits(batch["obs"], batch["mask"]), -1)
            # KL(init || pi) over the valid actions (masked ones have probability 0 in both)
            kl = (log_init.exp() * (log_init - log_pi)).masked_fill(~batch["mask"], 0.0)
            policy_loss = policy_loss + cfg.kl_init * kl.sum(-1).mean()
        if updates >= cfg.critic_warmup or value_net is None:
            opt_pi.zero_grad()
            policy_loss.backward()
            opt_pi.step()
            fast = fast_policy(policy_net)  # rollouts use the new weights
            policy_updates += 1
        since["entropy"].append(max(float(entropy.detach()), 0.0))
        since["pl"].append(float(policy_loss.detach()))

    # -- training loop: episodes of slots of inferences ---------------------------------------
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    )
    title = "OfflineRL" if cfg.offline else "DL2 RL"
    with Progress(*columns, disable=not cfg.progress) as bar:
        task = bar.add_task(title, total=cfg.max_updates, status=f"val JCT {best_jct:.0f}s")
        obs, info = env.reset(seed=env_seed)
        slot_obs: list[np.ndarray] = []
        slot_mask: list[np.ndarray] = []
        slot_action: list[int] = []
        slot_step_next: list[np.ndarray] = []
        slot_logp: list[float] = []
        slots_in_episode = 0
        stop_k = int(act_rng.integers(1, 16))
        while updates < cfg.max_updates:
            if cfg.max_wall_s is not None and time.perf_counter() - start > cfg.max_wall_s:
                break
            # one inference
            mask = acting_mask(info["action_mask"], env.builder, net_cfg)
            logits = fast.full_logits(obs)
            action = choose(logits, mask, act_rng)
            if cfg.exploration and env.builder is not None:
                fix = corrective_action(env.builder, mask, window, cfg.ratio_threshold)
                if fix is not None and act_rng.random() < cfg.epsilon:
                    action = fix
                elif (
                    cfg.stop_injection > 0
                    and mask[-1]
                    and overallocated(env.builder, window, stop_k)
                    and act_rng.random() < cfg.stop_injection
                ):
                    action = net_cfg.actions.stop
            stored = mask.sum() > 1  # a forced stop teaches nothing
            if stored:
                slot_obs.append(obs)
                slot_mask.append(mask)
                slot_action.append(action)
                slot_logp.append(masked_log_prob(logits, mask, action))
            decision = info["decision"]
            try:
                obs, reward, terminated, truncated, info = env.step(action)
            except SimulationStalled:
                # Deciding only at arrivals and completions, an allocation that leaves
                # nothing running with no arrival to come has no next decision: the slot's
                # samples are dropped and a new episode starts.
                slot_obs, slot_mask, slot_action, slot_step_next, slot_logp = [], [], [], [], []
                episodes += 1
                stalled += 1
                slots_in_episode = 0
                obs, info = env.reset()
                continue
            if stored:
                slot_step_next.append(obs)
            if not terminated and info["decision"] == decision:
                continue  # the slot is still being decided

            # the slot ran: its reward goes to every sample of the slot
            slots_in_episode += 1
            truncated = truncated or slots_in_episode >= MAX_EPISODE_SLOTS
            since["reward"].append(reward)
            if value_net is None:
                baseline = (
                    reward
                    if baseline is None
                    else cfg.baseline_decay * baseline + (1 - cfg.baseline_decay) * reward
                )
            if slot_action:
                slot = slot_batch(
                    slot_obs,
                    slot_mask,
                    slot_action,
                    slot_step_next,
                    reward,
                    obs,
                    terminated,
                    slot_logp,
                )
                samples += len(slot_action)
                if cfg.replay:
                    replay.add(slot)
                    if replay.count >= cfg.batch_size:
                        index = replay_rng.integers(0, replay.count, cfg.batch_size)
                        update(replay.batch(index))
                        updates += 1
                else:
                    update({k: torch.from_numpy(v) for k, v in slot.items()})
                    updates += 1
                if updates and updates % cfg.val_every == 0 and rows[-1]["step"] != updates:
                    jct = validate_greedy(policy_net, val_jobs, sim, eval_seed)
                    rows.append(_row(updates, episodes, start, jct, since))
                    if jct < best_jct:
                        best_jct, best_update = jct, updates
                        best_state = {k: v.clone() for k, v in policy_net.state_dict().items()}
                    bar.update(
                        task,
                        completed=updates,
                        status=f"val JCT {jct:.0f}s (best {best_jct:.0f}s @ {best_update}) "
                        f"H {rows[-1]['entropy'] or 0:.2f}",
                    )
                else:
                    bar.update(task, completed=updates)
                progress(updates, cfg.max_updates)
            slot_obs, slot_mask, slot_action, slot_step_next, slot_logp = [], [], [], [], []
            stop_k = int(act_rng.integers(1, 16))
            if terminated or truncated:
                episodes += 1
                slots_in_episode = 0
                obs, info = env.reset()

    # -- final validation, best weights ---------------------------------------------------
    if rows[-1]["step"] != updates:
        jct = validate_greedy(policy_net, val_jobs, sim, eval_seed)
        rows.append(_row(updates, episodes, start, jct, since))
        if jct < best_jct:
            best_jct, best_update = jct, updates
            best_state = {k: v.clone() for k, v in policy_net.state_dict().items()}
    final_jct = rows[-1]["val_avg_jct_s"]
    policy_net.load_state_dict(best_state)
    policy = DL2Policy(
        policy_net,
        name=cfg.system,
        value_net=value_net,
        system=cfg.system,
        train_config={"stage": "finetune", **to_dict(cfg)},
    )
    metrics = {
        "updates": updates,
        "policy_updates": policy_updates,
        "episodes": episodes,
        "stalled_episodes": stalled,
        "samples": samples,
        "train_wall_s": time.perf_counter() - start,
        "init_val_avg_jct_s": init_jct,
        "final_val_avg_jct_s": final_jct,
        "best_val_avg_jct_s": best_jct,
        "best_update": best_update,
        "improvement_vs_init": 1.0 - best_jct / init_jct if math.isfinite(init_jct) else None,
        "validation_sim": "analytical" if cfg.offline else "full",
    }
    return policy, finetune_curve(rows), metrics


def job_lists(workloads) -> list[tuple[JobSpec, ...]]:
    """Workloads (a `workload_jobs` frame or sequences of jobs) as tuples of jobs."""
    if isinstance(workloads, pl.DataFrame) or hasattr(workloads, "items"):
        return [jobs for _, jobs in as_workloads(workloads)]
    return [tuple(w) for w in workloads]


def training_and_validation_jobs(
    train_workloads: Workloads | Sequence[Sequence[JobSpec]],
    val_workloads: Workloads | Sequence[Sequence[JobSpec]],
) -> tuple[list[tuple[JobSpec, ...]], list[tuple[JobSpec, ...]]]:
    """A trainer's two sets of workloads as job lists (`job_lists`); ValueError unless
    both hold some."""
    train_jobs = job_lists(train_workloads)
    val_jobs = job_lists(val_workloads)
    if not train_jobs or not val_jobs:
        raise ValueError("need training and validation workloads")
    return train_jobs, val_jobs


def training_env(
    train_jobs: Sequence[Sequence[JobSpec]], net_cfg: DL2NetConfig, sim: SimConfig
) -> AllocationEnv:
    """The allocation environment a network of `net_cfg` trains in on `sim`: the network's
    observation, decision interval and trigger."""
    return AllocationEnv(
        train_jobs,
        AllocationEnvConfig(
            obs=net_cfg.obs, sim=sim, interval_s=net_cfg.interval_s, trigger=net_cfg.trigger
        ),
    )


def _row(update: int, episodes: int, start: float, jct: float, since: dict) -> dict[str, Any]:
    def mean(key: str) -> float | None:
        values = since[key]
        out = float(np.mean(values)) if values else None
        values.clear()
        return out

    return {
        "step": update,
        "episodes": episodes,
        "wall_s": time.perf_counter() - start,
        "val_avg_jct_s": jct if math.isfinite(jct) else None,
        "reward": mean("reward"),
        "entropy": mean("entropy"),
        "policy_loss": mean("pl"),
        "value_loss": mean("vl"),
    }


def finetune_curve(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """Rows as a `learning_curves` frame without policy id (phase "finetune")."""
    curve = pl.DataFrame(rows, infer_schema_length=None).with_columns(
        pl.lit("finetune").alias("phase")
    )
    for name in CURVE_COLUMNS:
        if name not in curve.columns:
            curve = curve.with_columns(pl.lit(None, dtype=pl.Float64).alias(name))
    return (
        curve.select(CURVE_COLUMNS)
        .with_columns(pl.col("step").cast(pl.Int32), pl.col("episodes").cast(pl.Int32))
        .with_columns(pl.exclude("phase", "step", "episodes").cast(pl.Float64))
    )
