"""Harmony's placement DRL (section IV.B), read top to bottom.

Rollouts: `n_workers` placement environments (`tracelib.envs.PlacementEnv`), each a
simulator whose speed model is the reward predictor (`models.harmony.reward`), so training
never sees the true interference (`rollout_speed="simulator"`: the simulator's own speed
model, for a setting the predictor was not fitted on: the arena, `models.harmony.arena`).
One update = every worker runs one scheduling interval (all the inferences that place that
interval's waiting jobs). The interval's reward (Eqn. 1: the sum over jobs of epochs
trained / total epochs) is observed after all its inferences.
The paper gives every inference of the interval that reward; by default here each inference
is credited its own predicted share of it and the last one the rest (`credit`), see
"Deviations".

Exploration (job-aware): at each inference, with probability epsilon the task the network
chose (job n's worker or PS) goes where bin packing or load balancing (picked uniformly)
would put it instead (`models.harmony.placement`). Epsilon and the entropy weight are
annealed linearly to their end values.

Update (actor-critic with experience replay): samples go to a FIFO replay buffer (8192);
each worker draws a minibatch of 32 from it and computes its gradient: policy gradient with
the TD advantage r + gamma V(s') - V(s) (gamma 0.9 over inferences), minus beta times the
policy entropy; the value network is trained on the TD target. The workers' gradients are
averaged (the paper's synchronous aggregation of 20 workers' gradients; here the workers
run one after another in one process, which gives the same averaged update). Adam.

Ablations (Table II): `value_net=False` uses an exponential moving average of the rewards
as the baseline; `exploration=False` drops the epsilon rule; `replay=False` trains each
worker on the samples of its own latest interval instead of a replay minibatch.

Validation: every `val_every` updates the greedy policy runs the validation sequences; the
best validated weights are kept (`keep_start` and a warm start count the starting policy
among the candidates). By default they run in the simulator's own speeds, the JCTs a
cluster running them would report (`validation_speed`; "rollouts": in the rollouts' speed
model, the predictor's unless `rollout_speed="simulator"`, so no true speed is used).

Deviations (defaults; `PlacementTrainConfig.as_published` undoes them all). As written, the
method does not learn here: 300 to 3,000 updates end 15-50% behind LIF with the policy's
entropy still near uniform, and cloning LIF's own decisions shows the flat network cannot
represent them (63% held-out accuracy). The changes, each measured (300 updates unless said):
- the pair network (`HarmonyNetConfig.head`): cloning accuracy 81%;
- credit per inference (`credit="marginal+rest"`): the interval's reward mixes every running
  job's progress, which the state cannot tell apart from the placement being made; an
  inference's predicted marginal reward is its own part of Eqn. 1 (the rest goes to the
  interval's last inference, so an interval's samples still sum to the paper's reward);
- lr 1e-3 and an entropy weight from 0.01 (paper: 1e-4 and 0.5; advantages are normalized,
  against which 0.5 keeps the policy uniform);
- epsilon from 0.1 (paper: 0.5): the rules it borrows from are far worse than LIF here, and
  at 0.5 exploration hurts (the ablation without it does better);
- clipped importance ratios on the actor loss (`off_policy_clip`): replayed actions of older
  policies and epsilon-actions of the rules enter the gradient weighted by how likely the
  current policy is to take them; without it, once the entropy weight is small the loss
  diverges and the policy collapses;
- a warm start (`teacher`, `models.harmony.imitation`): without a starting policy, the
  policy network first clones a teacher's placements on the training sequences, and that
  clone is validated as a candidate (kept unless an update beats it). From random weights
  the five changes above still end 31-73% behind LIF-Quad in the simulator with the
  measured ground truth (docs/harmony.md), and even the reward predictor's own one-step
  optimum is 39-65% behind it, so the predictor's rewards alone do not lead there. The
  teacher is searched (`models.harmony.search`): the placement rule and job order chosen
  decision by decision by the simulated JCT of the run that follows, on the training
  sequences; cloning LIF-Quad itself (`teacher="lif-quad"`) leaves the policy level with
  LIF-Quad at best, and the actor-critic does not take it further.
Removing one of the first five at a time, on an earlier version of the simulator (before its
ground truth was the measured one; seed 0; JCT / best baseline's, uniform / Poisson /
Google-like; the default then 0.85 / 1.04 / 0.92): flat head 1.18 / 1.50 / 1.51, interval
credit 1.22 / 1.60 / 1.26, no clip 1.17 / 1.62 / 1.25, epsilon from 0.5 1.02 / 1.25 / 1.07;
all of them (`as_published`) about 1.3 / 1.6 / 1.5 (`benchmarks/bench_harmony.py`;
docs/harmony.md has today's figures).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl
import torch

from models.harmony.config import (
    PlacementTrainConfig,
)
from models.harmony.contracts import curve_frame
from models.harmony.imitation import TeacherSamples, imitate, teacher_samples
from models.harmony.placement import (
    HarmonyPolicy,
    PolicyNet,
    ValueNet,
    bin_packing,
    load_balancing,
    predicted_reward,
)
from models.harmony.search import SearchResult, search_key, search_teacher
from models.torch_scope import scoped_torch
from models.warm_start import WarmStart, clone_by_imitation
from tracelib.envs.environments import PlacementEnv, PlacementEnvConfig
from tracelib.progress import ProgressFn, no_progress
from tracelib.seeds import named_seeds, named_streams
from tracelib.sim import SimConfig, Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.stats import paired_ratio

STREAMS = ("init", "envs", "actions", "exploration", "replay", "imitation")
"""Independent random streams of one training (`SeedSequence(seed).spawn`; appending one
leaves the others' seeds as they were)."""
EXPLORERS = (bin_packing, load_balancing)
"""The rules epsilon-exploration borrows a server from (paper: bin packing or LB)."""
PLACEMENT_CURVE = (
    "step",
    "episodes",
    "wall_s",
    "reward",
    "entropy",
    "policy_loss",
    "value_loss",
    "epsilon",
    "entropy_weight",
    "val_avg_jct_s",
)
"""Columns of a placement training's curve (a `harmony_learning_curves` row's)."""


def _anneal(pair: tuple[float, float], frac: float) -> float:
    return pair[0] + (pair[1] - pair[0]) * min(max(frac, 0.0), 1.0)


@dataclass
class _Worker:
    env: PlacementEnv
    obs: np.ndarray
    decision: int
    """The simulator decision the worker's next inference belongs to."""
    episodes: int = 0
    latest: list[tuple] = field(default_factory=list)


def _interval(
    w: _Worker,
    policy: PolicyNet,
    predictor,
    eps: float,
    cfg: PlacementTrainConfig,
    gen: torch.Generator,
    explore_rng: np.random.Generator,
    reset_seed: int,
) -> tuple[list[tuple], float]:
    """Run one scheduling interval on worker `w`; returns its samples
    (obs, mask, action, reward, next_obs, done, behaviour probability of the action) and
    the interval's reward."""
    env, layout = w.env, cfg.net.actions
    steps: list[tuple[np.ndarray, np.ndarray, int, float]] = []
    start = w.decision
    reward, done, over = 0.0, False, False
    next_obs = w.obs
    # Predicted reward rate of the draft so far: each inference's "after" is the next one's
    # "before", as the interval's inferences all build the same draft.
    placed = predicted_reward(env.draft, predictor) if cfg.credit != "interval" else 0.0
    while True:
        mask = env.action_masks()
        obs_t = torch.from_numpy(w.obs)[None]
        with torch.no_grad():
            probs = policy.distribution(obs_t, torch.from_numpy(mask)[None]).probs[0]
        if not torch.isfinite(probs).all():
            raise FloatingPointError("policy network diverged (non-finite probabilities)")
        action = int(torch.multinomial(probs, 1, generator=gen))
        behaviour = float(probs[action])
        if cfg.exploration:
            i, role, _ = layout.decode(action)
            allowed = np.flatnonzero(layout.grid(mask)[i, role])
            picks = [layout.of(i, role, r(env.draft, i, role, allowed)) for r in EXPLORERS]
            if explore_rng.random() < eps:
                action = picks[int(explore_rng.random() >= 0.5)]
            # mu(a): the network's choice, or its task's server replaced by either rule
            task_p = float(probs[layout.task(i, role)].sum())
            behaviour = (1 - eps) * float(probs[action]) + eps * task_p * sum(
                0.5 for p in picks if p == action
            )
        gain = 0.0
        if cfg.credit != "interval":
            after = predicted_reward(env.draft, predictor, layout.decode(action))
            gain, placed = (after - placed) * cfg.sim.slot_s, after
        steps.append((w.obs, mask, action, behaviour, gain))
        next_obs, r, term, trunc, info = env.step(action)
        w.obs, w.decision = next_obs, info["decision"]
        if term or trunc or info["decision"] != start:
            reward, done, over = float(r), bool(term), bool(term or trunc)
            break
    samples = []
    gains = [g for *_, g in steps]
    for k, (o, mk, a, mu, g) in enumerate(steps):
        last = k == len(steps) - 1
        nxt = next_obs if last else steps[k + 1][0]
        if cfg.credit == "interval":
            r = reward
        elif cfg.credit == "marginal":
            r = g
        else:  # marginal+rest: the observed reward, shared out by predicted contribution
            r = g + (reward - sum(gains) if last else 0.0)
        samples.append((o, mk, a, r, nxt, done and last, mu))
    if over:
        w.episodes += 1
        w.obs, info = env.reset(seed=reset_seed)
        w.decision = info["decision"]
    return samples, reward


def validate(
    policy: HarmonyPolicy, workloads: Sequence[Sequence[JobSpec]], sim: SimConfig, speed_model
) -> np.ndarray:
    """Average JCT (s) of the greedy policy on each of `workloads` (sequence k with simulator
    seed k) in a simulator with `speed_model` (None: the simulator's own): (len(workloads),)."""
    jcts = []
    for k, jobs in enumerate(workloads):
        res = Simulator(jobs, policy, replace(sim, seed=k), speed_model=speed_model).run()
        jcts.append(res.avg_jct_s)
    return np.asarray(jcts, dtype=float)


def _rollout_setting(cfg: PlacementTrainConfig, predictor) -> tuple[PlacementEnvConfig, Any]:
    """The rollouts' environment and speed model (None: the simulator's own), which the
    teacher's placements are recorded in too, so the clone learns the states it will see."""
    env_cfg = PlacementEnvConfig(obs=cfg.net.obs_config(), sim=cfg.sim)
    return env_cfg, predictor if cfg.rollout_speed == "predictor" else None


def warm_key(cfg: PlacementTrainConfig) -> tuple:
    """What a warm start depends on besides the training sequences and the predictor: the
    fields of `cfg` it reads (variants that differ only in the actor-critic share one)."""
    return (
        cfg.teacher,
        cfg.search if cfg.teacher == "searched" else None,
        cfg.imitation_epochs,
        cfg.imitation_lr,
        cfg.imitation_batch,
        cfg.seed,
        cfg.net,
        cfg.sim,
        cfg.rollout_speed,
    )


def warm_start(
    workloads: Sequence[Sequence[JobSpec]],
    predictor,
    cfg: PlacementTrainConfig,
    progress: ProgressFn = no_progress,
    searched: SearchResult | None = None,
) -> WarmStart:
    """Clone `cfg.teacher`'s placements on `workloads` into a fresh policy network: a rule's
    recorded in the rollouts' simulator (speeds from `predictor` unless `cfg.rollout_speed`
    says the simulator's), the searched teacher's in the simulator it searched in (its own
    speeds: the search judges runs by the JCTs a cluster would report). `progress(done,
    total)` follows the search's sequences. `searched`: that search made already (it does
    not depend on `cfg.seed`, so training seeds can share it); ValueError if it searched
    other workloads or with another config. Pure: the same arguments give the same weights
    (its own random stream)."""
    if cfg.teacher is None:
        raise ValueError("warm_start needs a teacher (PlacementTrainConfig.teacher)")
    if searched is not None:
        key = search_key(workloads, cfg.sim, cfg.net.obs_config(), cfg.search)
        if cfg.teacher != "searched" or searched.key != key:
            raise ValueError("the search given was made for other workloads or another config")
    stream = named_seeds(cfg.seed, STREAMS)["imitation"]
    net_seed, fit_seed = stream.generate_state(2)
    # The teacher's run draws nothing from torch: recorded before the network is made.
    found: dict[str, Any] = {}
    if cfg.teacher == "searched":
        result = searched
        if result is None:
            result = search_teacher(workloads, cfg.sim, cfg.net.obs_config(), cfg.search, progress)
        samples = TeacherSamples(*result.arrays())
        found = result.metrics()
    else:
        samples = teacher_samples(workloads, cfg.teacher, *_rollout_setting(cfg, predictor))
    state, metrics = clone_by_imitation(
        lambda: PolicyNet(cfg.net), imitate, samples, cfg, fit_seed, int(net_seed)
    )
    return WarmStart(warm_key(cfg), state, {"teacher": cfg.teacher, **found, **metrics})


def train_placement(
    workloads: Sequence[Sequence[JobSpec]],
    val_workloads: Sequence[Sequence[JobSpec]],
    predictor,
    cfg: PlacementTrainConfig,
    init: HarmonyPolicy | None = None,
    progress: ProgressFn = no_progress,
    warm: WarmStart | None = None,
) -> tuple[HarmonyPolicy, pl.DataFrame, dict[str, Any]]:
    """Train (or continue training `init`) a placement policy on rollouts scored by
    `predictor`; returns the best validated policy, its curve and metrics.
    Without `init`, and with a teacher, training starts from `warm_start` of the same
    arguments (`warm`: one made already, e.g. shared by variants; it must be of this
    config's `warm_key`), validated as a candidate.
    `progress(updates, total)` is called after every update."""
    if init is None and cfg.teacher is not None:
        if warm is None:
            warm = warm_start(workloads, predictor, cfg)
        elif warm.key != warm_key(cfg):
            raise ValueError("the warm start given was made for another config")
    else:
        warm = None
    # It seeds torch's global generator for the networks' initialization; the scope gives
    # the generator back as it was.
    with scoped_torch():
        return _train_placement(workloads, val_workloads, predictor, cfg, init, progress, warm)


def _train_placement(
    workloads: Sequence[Sequence[JobSpec]],
    val_workloads: Sequence[Sequence[JobSpec]],
    predictor,
    cfg: PlacementTrainConfig,
    init: HarmonyPolicy | None,
    progress: ProgressFn,
    warm: WarmStart | None,
) -> tuple[HarmonyPolicy, pl.DataFrame, dict[str, Any]]:
    rngs = named_streams(cfg.seed, STREAMS)
    torch.manual_seed(int(rngs["init"].integers(2**31 - 1)))
    gen = torch.Generator().manual_seed(int(rngs["actions"].integers(2**31 - 1)))
    policy_net = PolicyNet(cfg.net)
    value_net = ValueNet(cfg.net)
    if init is not None:
        if init.cfg != cfg.net:
            raise ValueError(f"initial policy has network {init.cfg}, training {cfg.net}")
        policy_net.load_state_dict(init.net.state_dict())
        if init.value_net is not None and cfg.value_net:
            value_net.load_state_dict(init.value_net.state_dict())
    elif warm is not None:
        policy_net.load_state_dict(warm.state)  # the critic starts fresh
    opt_pi = torch.optim.Adam(policy_net.parameters(), lr=cfg.lr)
    opt_v = torch.optim.Adam(value_net.parameters(), lr=cfg.lr)
    env_cfg, rollout_model = _rollout_setting(cfg, predictor)
    val_model = rollout_model if cfg.validation_speed == "rollouts" else None
    workers = []
    for _ in range(cfg.n_workers):
        env = PlacementEnv(workloads, env_cfg, speed_model=rollout_model)
        obs, info = env.reset(seed=int(rngs["envs"].integers(2**31 - 1)))
        workers.append(_Worker(env, obs, info["decision"]))
    buffer: deque = deque(maxlen=cfg.replay_size)
    train_config = {**asdict(cfg), "system": cfg.system}
    current = HarmonyPolicy(
        policy_net, value_net if cfg.value_net else None, cfg.system, train_config
    )
    best_state, best_jct, best_step = None, float("inf"), None

    def snapshot() -> tuple[dict, dict]:
        return (
            {k: t.clone() for k, t in policy_net.state_dict().items()},
            {k: t.clone() for k, t in value_net.state_dict().items()},
        )

    start_jcts = None  # (V,) the starting policy's, when it is validated
    if ((cfg.keep_start and init is not None) or warm is not None) and val_workloads:
        start_jcts = validate(current, val_workloads, cfg.sim, val_model)
        best_jct, best_state, best_step = float(start_jcts.mean()), snapshot(), 0
    best_update = None  # (mean JCT, paired ratio to the start) of the best-validated update
    baseline = 0.0
    rows: list[dict[str, Any]] = []
    stats: dict[str, list[float]] = {"reward": [], "entropy": [], "pi": [], "v": []}
    start = time.perf_counter()
    for update in range(cfg.updates):
        frac = update / max((cfg.anneal_updates or cfg.updates) - 1, 1)
        eps, beta = _anneal(cfg.epsilon, frac), _anneal(cfg.entropy, frac)
        batches = []
        for w in workers:
            samples, reward = _interval(
                w,
                policy_net,
                predictor,
                eps,
                cfg,
                gen,
                rngs["exploration"],
                int(rngs["envs"].integers(2**31 - 1)),
            )
            stats["reward"].append(reward)
            w.latest = samples
            buffer.extend(samples)
        for w in workers:
            if cfg.replay:
                idx = rngs["replay"].integers(len(buffer), size=min(cfg.minibatch, len(buffer)))
                batches.append([buffer[int(i)] for i in idx])
            else:
                batches.append(w.latest)
        opt_pi.zero_grad()
        opt_v.zero_grad()
        for batch in batches:
            obs = torch.from_numpy(np.stack([b[0] for b in batch]))  # (B, obs_dim)
            mask = torch.from_numpy(np.stack([b[1] for b in batch]))  # (B, 2N'M)
            act = torch.tensor([b[2] for b in batch])
            rew = torch.tensor([b[3] for b in batch], dtype=torch.float32)
            nxt = torch.from_numpy(np.stack([b[4] for b in batch]))
            done = torch.tensor([b[5] for b in batch], dtype=torch.float32)
            dist = policy_net.distribution(obs, mask)
            if cfg.value_net:
                v = value_net.get_value(obs)
                with torch.no_grad():
                    target = rew + cfg.gamma * value_net.get_value(nxt) * (1.0 - done)
                adv = (target - v).detach()
                v_loss = ((v - target) ** 2).mean()
                (v_loss / len(batches)).backward()
                stats["v"].append(v_loss.item())
            else:
                adv = rew - baseline
                baseline = cfg.ema * baseline + (1 - cfg.ema) * float(rew.mean())
            if cfg.normalize_advantage and len(adv) > 1:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ent = dist.entropy().mean()
            logp = dist.log_prob(act)
            if cfg.off_policy_clip is None:
                surrogate = logp * adv
            else:
                mu = torch.tensor([b[6] for b in batch], dtype=torch.float64)
                ratio = torch.exp(logp - torch.log(mu.clamp_min(1e-30)).float())
                c = cfg.off_policy_clip
                surrogate = torch.min(ratio * adv, ratio.clamp(1 - c, 1 + c) * adv)
            pi_loss = -surrogate.mean() - beta * ent
            (pi_loss / len(batches)).backward()
            stats["pi"].append(pi_loss.item())
            stats["entropy"].append(ent.item())
        opt_pi.step()
        if cfg.value_net:
            opt_v.step()
        progress(update + 1, cfg.updates)
        last = update == cfg.updates - 1
        if (cfg.val_every and (update + 1) % cfg.val_every == 0) or last:
            jct = None
            if val_workloads:
                jcts = validate(current, val_workloads, cfg.sim, val_model)
                jct = float(jcts.mean())
                eligible = True
                if start_jcts is not None:
                    to_start = paired_ratio(jcts, start_jcts)
                    if best_update is None or jct < best_update[0]:
                        best_update = (jct, to_start)
                    # Seven candidates judged on a few sequences: the lowest mean is often
                    # luck (`significant_update`).
                    eligible = not cfg.significant_update or (
                        to_start.high is not None and to_start.high < 1.0
                    )
                if eligible and jct < best_jct:
                    best_jct, best_state, best_step = jct, snapshot(), update + 1
            rows.append(
                {
                    "step": update + 1,
                    "episodes": sum(w.episodes for w in workers),
                    "wall_s": time.perf_counter() - start,
                    "reward": float(np.mean(stats["reward"])),
                    "entropy": float(np.mean(stats["entropy"])),
                    "policy_loss": float(np.mean(stats["pi"])),
                    "value_loss": float(np.mean(stats["v"])) if stats["v"] else None,
                    "epsilon": eps,
                    "entropy_weight": beta,
                    "val_avg_jct_s": jct,
                }
            )
            stats = {k: [] for k in stats}
    if best_state is not None:
        policy_net.load_state_dict(best_state[0])
        value_net.load_state_dict(best_state[1])
    curve = curve_frame(rows, PLACEMENT_CURVE)
    metrics = {
        "updates": cfg.updates,
        "episodes": sum(w.episodes for w in workers),
        "samples": len(buffer),
        "best_val_avg_jct_s": best_jct if best_state is not None else None,
        "best_val_step": best_step,
        "wall_s": time.perf_counter() - start,
    }
    if best_update is not None:
        # The best-validated update against the start, kept or not (why it was not).
        metrics["best_update_val_ratio_to_start"] = best_update[1].ratio
        metrics["best_update_val_ratio_high"] = best_update[1].high
    if warm is not None:
        metrics.update(warm.metrics)
        metrics["started_from"] = f"imitation of {cfg.teacher}"
    return current, curve, metrics
