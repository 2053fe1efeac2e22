"""A trained Chic / Chic-Pair policy: network + configs, checkpoints, and its evaluation.

    policy = ChicPolicy(net, cem_config)
    sha = policy.save(path)                       # models.checkpoints format
    acts = evaluate_policy(policy, sequences, scenario)   # one ACT per sequence
    policy.arena()                                # an AllocationPolicy (arena networks)

A network trained in the arena (`ChicNetConfig.setting == "dl2"`) runs in any DL2-setting
simulator as `ChicArenaPolicy`, an `AllocationPolicy` composed with a placement policy;
its checkpoints belong to system "<variant>-arena".

Deployment samples from pi(a | s) with absent jobs masked (the paper charges p1 for them
in training; a deployed scheduler has no reason to waste a step), from a generator seeded
per sequence, so a policy's ACT on a sequence is reproducible; `greedy=True` takes the most
probable valid action instead.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from models.checkpoints import Checkpoint, CheckpointError, SavesPolicyNet, load_checkpoint
from models.chic.networks import ChicNetConfig, ChicPolicyNet, NumpyPolicy
from models.heuristics.registry import PLACEMENTS
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.envs.chic import ChicEnv, ChicEnvConfig, average_jct_s
from tracelib.envs.chic_arena import ChicArenaEnv, ChicArenaSchedule, play_schedule
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario
from tracelib.sim.builder import any_task_fits
from tracelib.sim.engine import SimResult
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import Allocation, Snapshot

ARENA = "-arena"
"""Suffix of the system of a policy trained in the arena ("chic-arena"), apart from those
trained in Chic's own scenario (other network shapes, their own lineage)."""


@dataclass
class ChicPolicy(SavesPolicyNet):
    """A Chic network and how it was trained."""

    net: ChicPolicyNet
    train_config: dict[str, Any]
    """The trainer's config (CEMConfig as a dict) and the scenario it trained in."""

    @property
    def system(self) -> str:
        """The `policies.system`: "chic" or "chic-pair", with "-arena" for a network
        trained in the arena."""
        cfg = self.net.cfg
        return cfg.variant + (ARENA if cfg.setting == "dl2" else "")

    def env_config(self) -> ChicEnvConfig:
        """The MDP it was trained in (its deviations included), as deployed: absent jobs
        masked (a deployed scheduler has no reason to waste a step)."""
        trained = self.train_config
        base = trained.get("env") or {}
        return ChicEnvConfig(
            **{
                **base,
                "variant": self.net.cfg.variant,
                "work_conserving": bool(
                    trained.get("work_conserving", False) or base.get("work_conserving", False)
                ),
                "mask_absent": True,
            }
        )

    def arena(self, name: str | None = None, seed: int = 0) -> ChicArenaPolicy:
        """This arena network as an allocation policy (sampled unless it was validated
        greedy, as in training)."""
        if self.net.cfg.setting != "dl2":
            raise ValueError(f"a {self.system} network reads Chic's own scenario, not the arena")
        return ChicArenaPolicy(
            self,
            name=name or self.system,
            greedy=bool(self.train_config.get("greedy", False)),
            seed=seed,
        )

    def checkpoint_config(self) -> dict[str, Any]:
        """What the checkpoint and the registry record."""
        return {"net": asdict(self.net.cfg), "train": self.train_config}

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


def make_env(
    workloads: Sequence[Sequence[JobSpec]],
    scenario: ChicScenario | ChicArenaScenario,
    cfg: ChicEnvConfig,
) -> ChicEnv | ChicArenaEnv:
    """The decision process of `scenario`: Chic's own, or the arena's (placed by the
    scenario's placement policy)."""
    if isinstance(scenario, ChicArenaScenario):
        return ChicArenaEnv(workloads, scenario, cfg, PLACEMENTS.create(scenario.placement))
    return ChicEnv(workloads, scenario, cfg)


def run_episode(
    env: ChicEnv | ChicArenaEnv,
    actor: NumpyPolicy | None,
    rng: np.random.Generator | None,
    workload: int,
    seed: int,
    record: bool = False,
    sim_seed: int | None = None,
) -> tuple[float, float, list[np.ndarray], list[np.ndarray], list[int]]:
    """One episode on sequence `workload`: actions from `actor` (sampled with `rng`, greedy
    when rng is None; uniform over valid actions when actor is None). Returns (return,
    ACT, observations, masks, actions), the last three only when `record`."""
    obs, info = env.reset(seed=seed, options={"workload": workload, "sim_seed": sim_seed})
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
    scenario: ChicScenario | ChicArenaScenario,
    env_cfg: ChicEnvConfig | None = None,
    greedy: bool = False,
    seed: int = 0,
    sim_seeds: Sequence[int] | None = None,
) -> list[SimResult]:
    """The simulation of the policy on each sequence, in order. Actions are sampled from
    pi(a | s) (the paper's policy is a distribution), seeded per sequence from `seed`, so
    the figures are reproducible; `greedy` takes the most probable valid action instead.
    `sim_seeds` gives each sequence's simulator seed: a comparison passes the seeds its
    baselines run on, so every scheduler meets the same run-to-run variation on a
    sequence (pairs by sequence and seed); None draws it from episode seed 0."""
    actor = policy.numpy() if isinstance(policy, ChicPolicy) else policy
    variant = policy.system if isinstance(policy, ChicPolicy) else None
    if env_cfg is None:
        # Deploy in the MDP the policy was trained in (its deviations included).
        if isinstance(policy, ChicPolicy):
            env_cfg = policy.env_config()
        else:
            env_cfg = ChicEnvConfig(variant=variant or "chic")
    cfg = replace(env_cfg, mask_absent=True)
    if variant is not None and cfg.variant != variant:
        raise ValueError(f"a {variant} policy cannot run in a {cfg.variant} environment")
    if sim_seeds is not None and len(sim_seeds) != len(sequences):
        raise ValueError(f"{len(sim_seeds)} simulator seeds for {len(sequences)} sequences")
    env = make_env(sequences, scenario, cfg)
    out = []
    for k, ss in enumerate(np.random.SeedSequence(seed).spawn(len(sequences))):
        rng = None if greedy else np.random.default_rng(ss)
        sim_seed = None if sim_seeds is None else int(sim_seeds[k])
        run_episode(env, actor, rng, k, 0, sim_seed=sim_seed)
        out.append(env.result())
    return out


def evaluate_policy(
    policy: ChicPolicy | NumpyPolicy,
    sequences: Sequence[Sequence[JobSpec]],
    scenario: ChicScenario | ChicArenaScenario,
    env_cfg: ChicEnvConfig | None = None,
    **options: Any,
) -> list[float]:
    """ACT (seconds) of the policy on each sequence, in order: of `episode_results` with
    the same arguments (`options`: its `greedy` and `seed`)."""
    results = episode_results(policy, sequences, scenario, env_cfg, **options)
    return [average_jct_s(result) for result in results]


class ChicArenaPolicy:
    """An arena Chic / Chic-Pair network as an `AllocationPolicy`: at every decision, one
    schedule of the first I visible jobs (`tracelib.envs.chic_arena.ChicArenaSchedule`),
    actions from the network until void or S', absent jobs masked. Sampled actions come
    from a generator seeded by (`seed`, decision number), so a decision does not depend on
    which runs this object made before; `greedy` takes the most probable valid action.

    `batches`: where every job in the system is visible (the whole-trace replay, hundreds
    of jobs on hundreds of GPUs), the first I jobs alone would leave most of the cluster
    idle. Then a decision plays one schedule per I jobs in arrival order, each from the
    resources the schedules before it left (as DL2 allocates J jobs at a time), its
    backlog the jobs after it; the fallback (module doc of `tracelib.envs.chic_arena`,
    5) applies to the first schedule only, and a batch that no task fits any more is
    skipped without an inference. The first schedule is the one `batches` off plays."""

    interval_s: float | None = None
    uses_oracle: bool = False

    def __init__(
        self,
        policy: ChicPolicy,
        *,
        name: str,
        greedy: bool = False,
        seed: int = 0,
        batches: bool = False,
    ) -> None:
        self.policy = policy
        self.name = name
        self.greedy = greedy
        self.seed = seed
        self.batches = batches
        self.window = policy.net.cfg.window
        self.env_cfg = policy.env_config()
        self.actor = policy.numpy()
        self._models = tuple(jt.model for jt in DL2_CATALOGUE)

    def allocate(self, snap: Snapshot) -> Allocation:
        """Workers and PSs of the first I visible jobs."""
        ordered = tuple(jt.model for jt in sorted(snap.catalogue, key=lambda j: j.type_index))
        if ordered != self._models:
            raise ValueError(
                f"policy {self.name} reads the DL2 catalogue {self._models}; the simulator's "
                f"is {ordered}"
            )
        rng = None if self.greedy else np.random.default_rng([self.seed, snap.decision])

        def choose(obs: np.ndarray, mask: np.ndarray) -> int:
            return self.actor.act(obs, mask, rng)

        if not self.batches:
            return play_schedule(ChicArenaSchedule(snap, self.env_cfg, self.window), choose)
        counts: dict[int, tuple[int, int]] = {}
        pool = None
        full: set[tuple] = set()  # task shapes that no longer fit (the pool only shrinks)
        for start in range(0, len(snap.jobs), self.window):
            batch = snap.jobs[start : start + self.window]
            if pool is not None and not any_task_fits(pool, batch, full):
                continue
            rest = replace(snap, jobs=snap.jobs[start:])
            schedule = ChicArenaSchedule(rest, self.env_cfg, self.window, pool=pool)
            counts.update(play_schedule(schedule, choose, fallback=pool is None).counts)
            pool = schedule.builder.pool
        return Allocation.of(counts)
