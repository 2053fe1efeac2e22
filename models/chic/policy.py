"""A trained Chic / Chic-Pair policy: network + configs, checkpoints, and its evaluation.

    policy = ChicPolicy(net, cem_config)
    sha = policy.save(path)                       # models.checkpoints format
    acts = evaluate_policy(policy, sequences, scenario)   # one ACT per sequence

Deployment samples from pi(a | s) with absent jobs masked (the paper charges p1 for them
in training; a deployed scheduler has no reason to waste a step), from a generator seeded
per sequence, so a policy's ACT on a sequence is reproducible; `greedy=True` takes the most
probable valid action instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from models.checkpoints import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from models.chic.networks import ChicNetConfig, ChicPolicyNet, NumpyPolicy
from tracelib.envs.chic import ChicEnv, ChicEnvConfig, average_jct_s
from tracelib.scenarios.chic import ChicScenario
from tracelib.sim.engine import SimResult
from tracelib.sim.jobs import JobSpec


@dataclass
class ChicPolicy:
    """A Chic network and how it was trained."""

    net: ChicPolicyNet
    train_config: dict[str, Any]
    """The trainer's config (CEMConfig as a dict) and the scenario it trained in."""

    @property
    def system(self) -> str:
        """ "chic" or "chic-pair" (the `policies.system`)."""
        return self.net.cfg.variant

    def checkpoint_config(self) -> dict[str, Any]:
        """What the checkpoint and the registry record."""
        return {"net": asdict(self.net.cfg), "train": self.train_config}

    def save(self, path: str | os.PathLike[str], meta: Mapping[str, Any] | None = None) -> str:
        """Write a weights-only checkpoint; returns its sha256."""
        return save_checkpoint(
            path,
            system=self.system,
            config=self.checkpoint_config(),
            state={"policy": self.net.state_dict()},
            meta=meta,
        )

    def numpy(self) -> NumpyPolicy:
        return NumpyPolicy(self.net)


def policy_from_checkpoint(ckpt: Checkpoint) -> ChicPolicy:
    """Rebuild a policy from a verified checkpoint (CheckpointError if it does not fit)."""
    try:
        raw = dict(ckpt.config["net"])
        cfg = ChicNetConfig(**{**raw, "hidden": tuple(raw["hidden"])})
        net = ChicPolicyNet(cfg)
        net.load_state_dict(ckpt.state["policy"], strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"checkpoint is not a Chic policy: {first}") from None
    net.eval()
    return ChicPolicy(net, dict(ckpt.config.get("train", {})))


def load_policy(path: str | os.PathLike[str], *, sha256: str | None = None) -> ChicPolicy:
    """Load a Chic checkpoint (weights_only=True), verifying its sha256 when given."""
    return policy_from_checkpoint(load_checkpoint(path, sha256=sha256))


def run_episode(
    env: ChicEnv,
    actor: NumpyPolicy | None,
    rng: np.random.Generator | None,
    workload: int,
    seed: int,
    record: bool = False,
) -> tuple[float, float, list[np.ndarray], list[np.ndarray], list[int]]:
    """One episode on sequence `workload`: actions from `actor` (sampled with `rng`, greedy
    when rng is None; uniform over valid actions when actor is None). Returns (return,
    ACT, observations, masks, actions), the last three only when `record`."""
    obs, info = env.reset(seed=seed, options={"workload": workload})
    total = info["initial_reward"]
    observations: list[np.ndarray] = []
    masks: list[np.ndarray] = []
    actions: list[int] = []
    while env.schedule is not None:
        mask = env.action_masks()
        if actor is None:
            valid = np.flatnonzero(mask)
            action = int(valid[rng.integers(len(valid))])
        else:
            action = actor.act(obs, mask, rng)
        if record:
            observations.append(obs)
            masks.append(mask)
            actions.append(action)
        obs, reward, _, _, _ = env.step(action)
        total += reward
    return total, average_jct_s(env.result()), observations, masks, actions


def episode_results(
    policy: ChicPolicy | NumpyPolicy,
    sequences: Sequence[Sequence[JobSpec]],
    scenario: ChicScenario,
    env_cfg: ChicEnvConfig | None = None,
    greedy: bool = False,
    seed: int = 0,
) -> list[SimResult]:
    """The simulation of the policy on each sequence, in order. Actions are sampled from
    pi(a | s) (the paper's policy is a distribution), seeded per sequence from `seed`, so
    the figures are reproducible; `greedy` takes the most probable valid action instead."""
    actor = policy.numpy() if isinstance(policy, ChicPolicy) else policy
    variant = policy.system if isinstance(policy, ChicPolicy) else None
    if env_cfg is None:
        # Deploy in the MDP the policy was trained in (its deviations included).
        trained = policy.train_config if isinstance(policy, ChicPolicy) else {}
        env_cfg = ChicEnvConfig(
            variant=variant or "chic",
            work_conserving=bool(trained.get("work_conserving", False)),
        )
    cfg = env_cfg
    cfg = replace(cfg, mask_absent=True)
    if variant is not None and cfg.variant != variant:
        raise ValueError(f"a {variant} policy cannot run in a {cfg.variant} environment")
    env = ChicEnv(sequences, scenario, cfg)
    out = []
    for k, ss in enumerate(np.random.SeedSequence(seed).spawn(len(sequences))):
        rng = None if greedy else np.random.default_rng(ss)
        run_episode(env, actor, rng, k, 0)
        out.append(env.result())
    return out


def evaluate_policy(
    policy: ChicPolicy | NumpyPolicy,
    sequences: Sequence[Sequence[JobSpec]],
    scenario: ChicScenario,
    env_cfg: ChicEnvConfig | None = None,
    greedy: bool = False,
    seed: int = 0,
) -> list[float]:
    """ACT (seconds) of the policy on each sequence, in order (`episode_results`)."""
    results = episode_results(policy, sequences, scenario, env_cfg, greedy, seed)
    return [average_jct_s(result) for result in results]
