"""RL-TAPS' decision type as a gymnasium environment: every step, every GPU picks a job slot.

The simulator runs RL-TAPS' fixed-step preemptive scenario (`tracelib.sim.topology`): one
simulator "server" per GPU, a decision every step, the topology speed model. The first N
unfinished jobs by arrival are the job slots, the rest the backlog.

Action: one choice per GPU over N + 1 (`MultiDiscrete`): job slot n < N, or N for the null
slot (the GPU idles). A running job given no GPU is paused (full preemption); the resumption
cost is the scenario's. Mask: `(G, N + 1)` bool, slot n allowed for every GPU iff it holds a
job, the null slot always; a masked choice is treated as the null slot and flagged
(`info["invalid_gpus"]`), charged `invalid_action_penalty` per GPU.

Observation (RL-TAPS 4.3, DeepRM's image), flattened, values in [0, 1]:
- cluster: (horizon, G): a GPU's column is lit for as many rows as its job has steps left at
  its current (topology-dependent) speed, with the value (slot + 1) / (N + 1) so the policy
  can tell jobs apart (DeepRM's colours);
- job slots: N images (horizon, max_gpus): gpusreq(j) columns lit for the steps the job
  needs alone on its requested GPUs without communication;
- backlog: `backlog` cells, one per waiting job beyond the slots.

Reward per step (RL-TAPS eq. 3-6), in units of one GPU computing without communication
(eq. 3 divided by d_m / tt_m, so models of different FLOPs are comparable):
    sum over running jobs of |G| tt / (tt + rt)
  - idle_penalty  * sum over jobs in slots or backlog without GPUs of gpusreq tt / (tt + sr)
  - under_penalty * sum over running jobs with |G| < gpusreq of (gpusreq - |G|) tt / (tt + rt)
with rt the job's reduction time given every job's GPUs (shared links, racks) and sr its
single-rack reduction time at gpusreq. Speeds are those of the step's decision (a job that
finishes mid-step is counted for the whole step, as the paper's per-step average does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from tracelib.envs.environments import _SessionEnv
from tracelib.scenarios.rltaps import RLTAPS_RESUME_COST_S, rl_taps_scenario
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot
from tracelib.sim.topology import TopologyConfig, TopologySpeedModel


@dataclass(frozen=True)
class GpuObsConfig:
    """RL-TAPS' state image (section 5.1: N = 10 slots, a backlog of 60, gpusreq <= 12)."""

    slots: int = 10
    """N: job slots."""
    horizon: int = 10
    """Rows of the image: time steps ahead (RL-TAPS App. A: 10)."""
    max_gpus: int = 12
    """Columns of a job slot (requests above are drawn as this many)."""
    backlog: int = 60
    """Backlog cells."""

    def __post_init__(self) -> None:
        if min(self.slots, self.horizon, self.max_gpus, self.backlog) < 1:
            raise ValueError("slots, horizon, max_gpus and backlog must be positive")


@dataclass(frozen=True)
class GpuEnvConfig:
    """The RL-TAPS environment."""

    obs: GpuObsConfig = field(default_factory=GpuObsConfig)
    topology: TopologyConfig = field(default_factory=TopologyConfig)
    idle_penalty: float = 1.0
    """Weight of RL-TAPS' idle-job penalty (eq. 5)."""
    under_penalty: float = 1.0
    """Weight of its under-allocation penalty (eq. 6)."""
    max_steps: int = 20_000
    """Steps per episode before truncation (the paper's T_max)."""
    invalid_action_penalty: float = 0.0
    """Per GPU whose choice was masked."""
    resume_cost_s: float = RLTAPS_RESUME_COST_S
    """Training time a job loses when it resumes or changes GPUs after having trained
    (`rl_taps_scenario`; RL-TAPS models none)."""


class GpuAssignmentEnv(_SessionEnv):
    """RL-TAPS: one softmax per GPU over N + 1 job slots, every fixed step."""

    def __init__(self, workloads: Sequence[Sequence[JobSpec]], cfg: GpuEnvConfig | None = None):
        self.cfg = cfg or GpuEnvConfig()
        scenario = rl_taps_scenario(self.cfg.topology, resume_cost_s=self.cfg.resume_cost_s)
        super().__init__(
            workloads,
            scenario.cfg,
            scenario.catalogue,
            self.cfg.max_steps,
            self.cfg.invalid_action_penalty,
            None,
            speed_model=scenario.speed_model,
        )
        self.model: TopologySpeedModel = scenario.speed_model
        self.n_gpus = self.cfg.topology.n_gpus
        self.types = sorted(scenario.catalogue, key=lambda jt: jt.type_index)
        o = self.cfg.obs
        size = o.horizon * self.n_gpus + o.slots * o.horizon * o.max_gpus + o.backlog
        self.observation_space = gym.spaces.Box(0.0, 1.0, (size,), dtype=np.float32)
        self.action_space = gym.spaces.MultiDiscrete(np.full(self.n_gpus, o.slots + 1))
        self._mask = np.zeros((self.n_gpus, o.slots + 1), dtype=bool)

    # -- state -------------------------------------------------------------------------

    def _slots(self, snap: Snapshot | None) -> tuple[JobView, ...]:
        return snap.jobs[: self.cfg.obs.slots] if snap is not None else ()

    def _begin(self) -> None:
        snap = self.session.snapshot if self.session else None
        self._mask[:] = False
        self._mask[:, -1] = True
        self._mask[:, : len(self._slots(snap))] = True

    def _steps_left(self, views: Sequence[JobView], speeds: np.ndarray, step_s: float):
        out = np.zeros(len(views))
        for i, (job, speed) in enumerate(zip(views, speeds, strict=True)):
            if speed > 0:
                minibatches = job.remaining_epochs_est * self.types[job.type_index].iters_per_epoch
                out[i] = minibatches / speed / step_s
        return out

    def _obs(self) -> np.ndarray:
        o = self.cfg.obs
        cluster = np.zeros((o.horizon, self.n_gpus), dtype=np.float32)
        slots = np.zeros((o.slots, o.horizon, o.max_gpus), dtype=np.float32)
        backlog = np.zeros(o.backlog, dtype=np.float32)
        snap = self.session.snapshot if self.session else None
        if snap is not None:
            jobs = self._slots(snap)
            running = [j for j in jobs if j.placement.workers]
            speeds = self.model.placed(
                [j.type_index for j in running],
                [len(j.placement.workers) for j in running],
                [0] * len(running),
                [j.placement for j in running],
                self.n_gpus,
            )
            left = self._steps_left(running, speeds, snap.slot_s)
            slot_of = {j.job_id: k for k, j in enumerate(jobs)}
            for job, steps in zip(running, left, strict=True):
                rows = min(math.ceil(steps - 1e-9), o.horizon)
                cluster[:rows, list(job.placement.workers)] = (slot_of[job.job_id] + 1) / (
                    o.slots + 1
                )
            for k, job in enumerate(jobs):
                jt = self.types[job.type_index]
                req = job.requested_workers
                alone = job.remaining_epochs_est * jt.iters_per_epoch * jt.local_comp_s / req
                rows = min(math.ceil(alone / snap.slot_s - 1e-9), o.horizon)
                slots[k, :rows, : min(req, o.max_gpus)] = 1.0
            backlog[: min(len(snap.jobs) - len(jobs), o.backlog)] = 1.0
        return np.concatenate([cluster.ravel(), slots.ravel(), backlog])

    def _info(self) -> dict[str, Any]:
        return {
            "action_mask": self._mask.copy(),
            "time_s": self.session.time_s if self.session else 0.0,
        }

    # -- episode -----------------------------------------------------------------------

    def decision(self, choice: np.ndarray) -> tuple[Allocation, Placement, int]:
        """The allocation and placement a per-GPU choice means, and how many GPUs chose a
        masked slot (they idle)."""
        snap = self.session.snapshot
        jobs = self._slots(snap)
        choice = np.asarray(choice, dtype=np.int64).reshape(self.n_gpus)
        invalid = int((~self._mask[np.arange(self.n_gpus), choice]).sum())
        gpus: dict[int, list[int]] = {}
        for g, k in enumerate(choice.tolist()):
            if k < len(jobs):
                gpus.setdefault(jobs[k].job_id, []).append(g)
        alloc = Allocation.of({j: (len(gs), 0) for j, gs in gpus.items()})
        placement = Placement.of({j: JobPlacement.of(gs, ()) for j, gs in gpus.items()})
        return alloc, placement, invalid

    def choice_of(self, placement: Placement) -> np.ndarray:
        """The per-GPU choice (M,) that means `placement` in the current state (the inverse
        of `decision`): each GPU holding a worker of the job in slot n chooses n, a free GPU
        the null slot N, and a GPU held by a job outside the slots (a baseline may run a
        job RL-TAPS' action cannot name) -1."""
        snap = self.session.snapshot
        n = self.cfg.obs.slots
        slot_of = {j.job_id: k for k, j in enumerate(self._slots(snap))}
        choice = np.full(self.n_gpus, n, dtype=np.int64)
        for job in snap.jobs:
            for g in placement.get(job.job_id).workers:
                choice[g] = slot_of.get(job.job_id, -1)
        return choice

    def step_reward(self, snap: Snapshot, placement: Placement) -> float:
        """RL-TAPS' reward (module docstring) of a step's decision."""
        cfg = self.cfg
        placed = [j for j in snap.jobs if placement.get(j.job_id).workers]
        idle = [j for j in snap.jobs if not placement.get(j.job_id).workers]
        reward = 0.0
        if placed:
            types = [j.type_index for j in placed]
            rt = self.model.reduction_s(types, [placement.get(j.job_id) for j in placed])
            tt = self.model.tt[types]
            n = np.array([len(placement.get(j.job_id).workers) for j in placed], dtype=float)
            req = np.array([j.requested_workers for j in placed], dtype=float)
            eff = tt / (tt + rt)
            reward += float((n * eff).sum())
            reward -= cfg.under_penalty * float((np.maximum(req - n, 0.0) * eff).sum())
        if idle:
            types = [j.type_index for j in idle]
            req = np.array([j.requested_workers for j in idle], dtype=float)
            tt = self.model.tt[types]
            sr = self.model.single_rack_reduction_s(types, req)
            reward -= cfg.idle_penalty * float((req * tt / (tt + sr)).sum())
        return reward

    def step(self, action):
        """Assign every GPU for one fixed step and run it."""
        self._count_step()
        snap = self.session.snapshot
        alloc, placement, invalid = self.decision(action)
        reward = self.step_reward(snap, placement) + invalid * self.invalid_action_penalty
        self._submit(alloc, placement)
        self._begin()
        return self._outcome(reward, invalid_gpus=invalid)

    def step_decision(self, alloc: Allocation, placement: Placement):
        """Run a decision made outside the per-GPU action space (a baseline's, which may
        start a backlog job) for one step, with the same reward and outcome as `step`."""
        self._count_step()
        reward = self.step_reward(self.session.snapshot, placement)
        self._submit(alloc, placement)
        self._begin()
        return self._outcome(reward, invalid_gpus=0)
