"""Gymnasium views of the simulator, one per decision type, with action masks.

Each environment drives a `SimSession` (the simulator's own loop, nothing re-implemented)
and turns one decision into a sequence of small actions, as the learned schedulers act:

    AllocationEnv  DL2: per slot, add a worker / PS / both to one of J jobs, or stop (3J+1).
    PlacementEnv   Harmony: place one worker or PS of a waiting job on a server (2N'M);
                   placements are fixed for a job's life (SimConfig.fixed_placement).

Reward (both): at the end of each decision, the epochs every job trained until the next
decision, each as a fraction of its total (DL2's per-slot reward, Harmony's normalized
progress), so an episode's undiscounted return is the number of jobs. Steps inside a
decision earn 0. Masks come from `tracelib.envs.observation`: `env.action_masks()` and
`info["action_mask"]`. An invalid action changes nothing and earns
`invalid_action_penalty` (training masks them; gymnasium's checker samples them).

An episode is one workload (drawn from the given ones with the env's seeded generator, or
`options={"workload": k}`); the simulator's seed is drawn from the same generator, so
`reset(seed=s)` fixes the whole episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.envs.observation import (
    AllocationObsConfig,
    PlacementActions,
    PlacementDraft,
    PlacementObsConfig,
    allocation_features,
    allocation_mask,
    encode_allocation,
    encode_placement,
    placement_job_features,
    placement_server_features,
    refresh_allocation_row,
)
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.config import SimConfig
from tracelib.sim.engine import PlacedSpeedModel, SimResult, SimSession, Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.sim.placement import LoadBalancing
from tracelib.sim.policy import PlacementPolicy
from tracelib.sim.snapshot import Allocation, JobPlacement, Placement, Snapshot


def episode_start(
    rng: np.random.Generator, n_workloads: int, options: dict | None
) -> tuple[int, int]:
    """The sequence an episode runs (`options["workload"]`, else drawn from `rng`) and a
    simulator seed drawn after it: how every environment's reset picks them, so an
    environment's episodes follow from its reset seed alone."""
    k = (options or {}).get("workload")
    if k is None:
        k = int(rng.integers(n_workloads))
    return k, int(rng.integers(2**31 - 1))


@dataclass(frozen=True)
class ExternalPolicy:
    """Marks a simulator driven through a `SimSession`: decisions come from outside."""

    name: str = "external"
    interval_s: float | None = None
    """Decision interval (None: SimConfig.slot_s)."""
    trigger: str | None = None
    """Decision trigger ("events": every arrival and completion; None: SimConfig.trigger)."""
    uses_oracle: bool = False

    def decide(self, snap: Snapshot, rng: np.random.Generator) -> tuple[Allocation, Placement]:
        """Never called: the session's driver decides."""
        raise RuntimeError("an externally driven simulator has no policy of its own")


class _SessionEnv(gym.Env):
    """Shared episode handling: workload choice, seeding, reward, termination."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        sim: SimConfig,
        catalogue: tuple[JobType, ...],
        max_steps: int,
        invalid_action_penalty: float,
        interval_s: float | None,
        speed_model: PlacedSpeedModel | None = None,
        trigger: str | None = None,
    ) -> None:
        if not workloads or not all(workloads):
            raise ValueError("need at least one non-empty workload")
        if max_steps > sim.max_decisions:
            raise ValueError("max_steps must not exceed sim.max_decisions")
        self.workloads = tuple(tuple(w) for w in workloads)
        self.sim_cfg = sim
        self.catalogue = catalogue
        self.max_steps = max_steps
        self.invalid_action_penalty = invalid_action_penalty
        self.interval_s = interval_s
        self.trigger = trigger
        self.speed_model = speed_model
        self.session: SimSession | None = None
        self._steps = 0
        self._progress: dict[int, tuple[float, float]] = {}

    def _start(self, seed: int | None, options: dict | None) -> Snapshot | None:
        super().reset(seed=seed)
        k, sim_seed = episode_start(self.np_random, len(self.workloads), options)
        # An agent may idle (it pays in reward), so the simulator must not call that a
        # stall; max_steps <= max_decisions makes truncation come first.
        cfg = replace(self.sim_cfg, seed=sim_seed, stall_decisions=0)
        sim = Simulator(
            self.workloads[k],
            ExternalPolicy(interval_s=self.interval_s, trigger=self.trigger),
            cfg,
            self.catalogue,
            speed_model=self.speed_model,
        )
        self.session = sim.session()
        self.workload_index = k
        self._steps = 0
        self._progress = {}
        return self.session.snapshot

    def _submit(self, alloc: Allocation, placement: Placement) -> float:
        """Apply a decision; the reward is the jobs' progress (fractions) until the next."""
        assert self.session is not None
        self.session.submit(alloc, placement)
        now = self.session.epochs_done()
        reward = 0.0
        for job_id, (done, total) in now.items():
            reward += (done - self._progress.get(job_id, (0.0, total))[0]) / total
        self._progress = now
        return reward

    def action_masks(self) -> np.ndarray:
        """Bool mask of the valid actions in the current state (shape per environment)."""
        return self._mask.copy()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a workload; returns the first decision's observation."""
        self._start(seed, options)
        self._begin()
        return self._obs(), self._info()

    def _count_step(self) -> None:
        if self.session is None or self.session.done:
            raise RuntimeError("episode is over; call reset()")
        self._steps += 1

    def _outcome(self, reward: float, **info: Any):
        """The step's (observation, reward, terminated, truncated, info)."""
        terminated = self.session.done
        truncated = not terminated and self._steps >= self.max_steps
        return self._obs(), float(reward), terminated, truncated, {**self._info(), **info}

    def result(self) -> SimResult:
        """The finished episode's simulation result (JCTs, event log)."""
        if self.session is None:
            raise RuntimeError("reset the environment first")
        return self.session.result()


@dataclass(frozen=True)
class AllocationEnvConfig:
    """DL2's allocation environment."""

    obs: AllocationObsConfig = field(default_factory=AllocationObsConfig)
    sim: SimConfig = field(default_factory=SimConfig)
    """Simulator settings; its `window` is set to `obs.window`."""
    max_steps: int = 100_000
    """Actions per episode before truncation (at most `sim.max_decisions`)."""
    invalid_action_penalty: float = 0.0
    interval_s: float | None = None
    """Seconds between decisions (None: every `sim.slot_s`); the reward of a decision is
    the progress until the next."""
    trigger: str | None = None
    """"events": decide at every arrival and completion instead (None: `sim.trigger`)."""


class AllocationEnv(_SessionEnv):
    """DL2: each slot, repeated inferences add one worker/PS/both to a job until stop."""

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        cfg: AllocationEnvConfig | None = None,
        placement: PlacementPolicy | None = None,
        catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
    ) -> None:
        self.cfg = cfg or AllocationEnvConfig()
        window = self.cfg.obs.window
        super().__init__(
            workloads,
            replace(self.cfg.sim, window=window),
            catalogue,
            self.cfg.max_steps,
            self.cfg.invalid_action_penalty,
            self.cfg.interval_s,
            trigger=self.cfg.trigger,
        )
        self.placement = placement or LoadBalancing()
        self.features = allocation_features(catalogue)
        self.observation_space = gym.spaces.Box(
            0.0, 1.0, (window * len(self.features),), dtype=np.float32
        )
        self.actions = self.cfg.obs.actions
        self.action_space = gym.spaces.Discrete(self.actions.n)
        self.builder: AllocationBuilder | None = None
        self._mask = np.zeros(self.action_space.n, dtype=bool)

    def _begin(self) -> None:
        snap = self.session.snapshot if self.session else None
        self.builder = AllocationBuilder(snap) if snap is not None else None
        if self.builder is None:
            self._obs_rows = np.zeros((self.cfg.obs.window, len(self.features)), np.float32)
        else:
            self._obs_rows = encode_allocation(self.builder, self.cfg.obs)
        self._refresh_mask()

    def _refresh_mask(self) -> None:
        if self.builder is None:
            self._mask = np.zeros(self.action_space.n, dtype=bool)
            self._mask[-1] = True
        else:
            self._mask = allocation_mask(self.builder, self.cfg.obs)

    def _obs(self) -> np.ndarray:
        return self._obs_rows.reshape(-1).copy()

    def _info(self) -> dict[str, Any]:
        snap = self.builder.snap if self.builder else None
        return {
            "action_mask": self._mask.copy(),
            "time_s": self.session.time_s if self.session else 0.0,
            "decision": snap.decision if snap else -1,
        }

    def step(self, action):
        """One inference: add to a job, or stop and let the slot run."""
        self._count_step()
        action = int(action)
        reward, invalid = 0.0, False
        decoded = self.actions.decode(action)
        if not self._mask[action]:
            reward, invalid = self.invalid_action_penalty, True
        elif decoded is not None:
            row, kind = decoded
            self.builder.step(row, kind)
            refresh_allocation_row(self._obs_rows, self.builder, row)
            self._refresh_mask()
        # Stop, or nothing left to add: the slot's allocation goes to the simulator.
        if not invalid and (decoded is None or not self._mask[:-1].any()):
            alloc = self.builder.allocation()
            placement = self.placement.place(self.builder.snap, alloc, self.session.rng)
            reward += self._submit(alloc, placement)
            self._begin()
        return self._outcome(reward, invalid_action=invalid)


@dataclass(frozen=True)
class PlacementEnvConfig:
    """Harmony's placement environment."""

    obs: PlacementObsConfig = field(default_factory=PlacementObsConfig)
    sim: SimConfig = field(default_factory=lambda: SimConfig(fixed_placement=True))
    """Simulator settings; `fixed_placement` is forced on."""
    max_steps: int = 100_000
    invalid_action_penalty: float = 0.0


class PlacementEnv(_SessionEnv):
    """Harmony: each interval, the waiting jobs' requested workers and PSs are placed one
    task at a time; a job runs once all its tasks are placed and keeps them to the end."""

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        cfg: PlacementEnvConfig | None = None,
        catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
        speed_model: PlacedSpeedModel | None = None,
    ) -> None:
        """`speed_model` replaces the simulator's (Harmony scores rollouts with its reward
        predictor)."""
        self.cfg = cfg or PlacementEnvConfig()
        sim = replace(self.cfg.sim, fixed_placement=True)
        super().__init__(
            workloads,
            sim,
            catalogue,
            self.cfg.max_steps,
            self.cfg.invalid_action_penalty,
            None,
            speed_model=speed_model,
        )
        self.n_servers = sim.cluster.n_servers
        window = self.cfg.obs.window
        self.job_features = placement_job_features(catalogue)
        self.server_features = placement_server_features(catalogue, self.cfg.obs)
        size = window * len(self.job_features) + self.n_servers * len(self.server_features)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), dtype=np.float32)
        self.actions = PlacementActions(window, self.n_servers)
        self.action_space = gym.spaces.Discrete(self.actions.n)
        self.draft: PlacementDraft | None = None
        self._mask = np.zeros(self.action_space.n, dtype=bool)

    @staticmethod
    def requested(snap: Snapshot) -> dict[int, tuple[int, int]]:
        """Harmony's jobs come with fixed counts: requested workers and PSs (at least one
        of each, within the job's cap)."""
        return {
            j.job_id: (
                min(max(j.requested_workers, 1), j.max_workers),
                min(max(j.requested_ps, 1), j.max_workers),
            )
            for j in snap.jobs
        }

    def _begin(self) -> float:
        """Open the next decision that has something to place; decisions where nothing
        fits run as they are. Returns the reward those decisions earned."""
        reward = 0.0
        while self.session is not None and not self.session.done:
            snap = self.session.snapshot
            self.draft = PlacementDraft.start(snap, self.requested(snap), self.cfg.obs.window)
            self._mask = self.draft.mask(self.cfg.obs)
            if self._mask.any():
                return reward
            reward += self._submit(Allocation(), Placement())
        self.draft = None
        self._mask = np.zeros(self.action_space.n, dtype=bool)
        return reward

    def _finish_decision(self) -> float:
        draft = self.draft
        rows = draft.complete()
        # A job runs only with every task placed; a partly placed one waits (its draft
        # tasks are dropped), as its counts are fixed.
        alloc = Allocation.of(
            {draft.jobs[i].job_id: (len(draft.placed[i][0]), len(draft.placed[i][1])) for i in rows}
        )
        placement = Placement.of(
            {draft.jobs[i].job_id: JobPlacement.of(*draft.placed[i]) for i in rows}
        )
        return self._submit(alloc, placement)

    def _obs(self) -> np.ndarray:
        if self.draft is None:
            return np.zeros(self.observation_space.shape, dtype=np.float32)
        return encode_placement(self.draft, self.cfg.obs)

    def _info(self) -> dict[str, Any]:
        return {
            "action_mask": self._mask.copy(),
            "time_s": self.session.time_s if self.session else 0.0,
            "decision": self.draft.snap.decision if self.draft else -1,
        }

    def step(self, action):
        """Place one task; when nothing more fits, the interval runs."""
        self._count_step()
        action = int(action)
        reward, invalid = 0.0, False
        if not self._mask[action]:
            reward, invalid = self.invalid_action_penalty, True
        else:
            row, role, server = self.actions.decode(action)
            self.draft.place(row, role, server)
            self._mask = self.draft.mask(self.cfg.obs)
            if not self._mask.any():
                reward += self._finish_decision()
                reward += self._begin()
        return self._outcome(reward, invalid_action=invalid)
