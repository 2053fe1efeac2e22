"""Chic and Chic-Pair's decision process in the arena: the DL2 setting every scheduler is
evaluated in (`tracelib.scenarios.chic.ChicArenaScenario`).

The MDP is the published one (`tracelib.envs.chic`): per schedule, starting from zero
workers and PSs, one action per step adds a worker (2i) or a PS (2i + 1) to job i (Chic,
2I + 1 actions) or a worker+PS pair (i, Chic-Pair, I + 1), or takes void (last); the env
takes void itself in S' (condition (1): no task of a visible job fits; condition (2): no
addition shortens any job's iteration time g_i(w, p), read from the catalogue's analytical
fit; no visible job); penalties p1 (an action on an absent job) and p2 (Chic: a job with
workers but no PS, or PSs but no worker); the job-training phase earns r1 = -(jobs in the
system) x (time to the next decision) / 20 minutes. What the setting changes:

1. Trigger: a schedule every slot (20 minutes), the evaluation's trigger for every
   scheduler, instead of at every arrival and completion. Each slot's schedule starts from
   zero, as each of the paper's schedules does; r1 of a slot is -(jobs in the system).
2. Window: I = 20, the evaluation's window, instead of 3: with I = 3, Chic could give at
   most 3 x 16 workers of the cluster's 192 GPUs.
3. Resources: condition (1) and the masks check placement on the 96 servers (a tentative
   placement, `tracelib.sim.builder.AllocationBuilder`, as for every allocation policy
   here) instead of the paper's pooled capacities; the evaluation's default placement
   (load balancing) then places the allocation.
4. State, per job row: model one-hot over the DL2 catalogue (8 types, not 3); remaining
   epochs on a log scale, log1p(epochs) / log1p(10,000) clipped to 1 (DL2's encoding: the
   DL2 jobs span 20 to 120,000 epochs, Chic's 100-200 iterations, so the paper's linear
   s^B / 200 would be 0 or saturated); workers and PSs / the job's cap (16; Chic divides
   by the cluster's 10 GPUs, the same order). Then the backlog N_t: visible jobs beyond
   the first I / `backlog_scale` (the simulator's window hides the rest from every
   scheduler; with I = the window it is 0).
5. Void: masked while nothing trains and some job could (the paper masks it while no job
   can train and none is still to arrive; a snapshot does not show future arrivals, so
   the schedule never idles on a bet on them). A schedule that reaches S' training
   nothing falls back to one worker + one PS for the first job and pays p1.

`ChicArenaSchedule` is one schedule on one snapshot: the environment steps through it in
training, and the deployed policy (`models.chic.policy.ChicArenaPolicy`) runs it inside
the simulator, so the two make the same decisions from the same actions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tracelib.catalogue import JobType
from tracelib.envs.chic import (
    ChicActions,
    ChicEnvBase,
    ChicEnvConfig,
    ChicSchedule,
)
from tracelib.scenarios.chic import ChicArenaScenario
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.cluster import FreePool
from tracelib.sim.config import SimConfig
from tracelib.sim.jobs import JobSpec
from tracelib.sim.placement import LoadBalancing
from tracelib.sim.policy import PlacementPolicy
from tracelib.sim.snapshot import Allocation, Placement, Snapshot

EPOCHS_SCALE = 10_000.0
"""remaining_epochs saturates at this many epochs, log scale (DL2's `AllocationObsConfig`)."""


def chic_arena_features(variant: str, window: int, catalogue: Sequence[JobType]) -> tuple[str, ...]:
    """Names of the arena observation's entries: window rows of job features, then backlog."""
    types = [f"type={jt.model}" for jt in sorted(catalogue, key=lambda t: t.type_index)]
    per_job = (*types, "remaining_epochs", "workers") + (() if variant == "chic-pair" else ("ps",))
    rows = [f"job{i}.{name}" for i in range(window) for name in per_job]
    return (*rows, "backlog")


class ChicArenaSchedule(ChicSchedule):
    """One schedule of the first `window` jobs of a DL2-setting snapshot, built one action
    at a time through an `AllocationBuilder` (pure numpy). The paper's conditions,
    penalties and masks are `ChicSchedule`'s; resources, the void rule and the encoding are
    the arena's (module doc)."""

    def __init__(
        self, snap: Snapshot, cfg: ChicEnvConfig, window: int, pool: FreePool | None = None
    ) -> None:
        """`pool`: the free resources to schedule from (default: what the snapshot's decision
        may hand out); a schedule of later jobs of the same decision passes what the
        schedules before it left (`ChicArenaPolicy` with `batches`). Such a schedule has no
        fallback: `fallback` takes every task back, and a pool shared with earlier
        schedules cannot be restored to this schedule's start."""
        jobs = tuple(snap.jobs[:window])
        self.snap = snap
        self._pool = pool
        self.jobs = jobs
        self.cfg = cfg
        self.window = window
        self.actions = ChicActions(cfg.variant, window)
        # The layout's numbers, read at every step (`apply`, `play_schedule`).
        self._n_actions, self._void, self._pair = self.actions.n, self.actions.void, cfg.pair
        self.backlog = max(len(snap.jobs) - window, 0)
        self.pending_arrivals = 0  # not in a snapshot; never idle on them (module doc, 5)
        self.types = [snap.job_types[j.model] for j in jobs]
        self.n_types = len(snap.catalogue)
        self._width = self.n_types + (2 if cfg.pair else 3)
        self.steps = 0
        self._obs: np.ndarray | None = None
        self._start()

    def _start(self) -> None:
        self.builder = AllocationBuilder(self.snap, self.jobs, pool=self._pool)
        # The builder's own lists: an action updates counts and resources at once.
        self.workers = self.builder.workers
        self.ps = self.builder.ps
        n = len(self.jobs)
        # What a step asks is kept up to date as actions change it, not recomputed from
        # every job at every step: the builder's fit mask (the same array while no fit
        # changed) and what is derived from it, the trainable jobs, and condition (2).
        # With no job, nothing fits and condition (1) holds: the builder is never asked.
        self._fit = np.zeros((0, 3), dtype=bool)
        self._exhausted = True
        self._job_mask: np.ndarray | None = None  # the mask's job rows, void left out
        self._mask: np.ndarray | None = None
        self._mask_key: tuple[np.ndarray, bool] | None = None
        self._trainable = 0  # jobs with a worker and a PS
        self._idle_fits: bool | None = None  # `_idle_job_fits` for `_fit`; None: not known
        self._gain: list[bool | None] = [None] * n
        self._gainers: set[int] = set()  # jobs known improvable
        self._unknown: set[int] = set(range(n))  # jobs whose `improvable` is not known
        if n:
            self._refresh()

    # -- resources: the builder's tentative placement ----------------------------------

    def _refresh(self) -> None:
        """Read the builder's fit mask after the pool changed (only this schedule's actions
        change it); what is derived from it is recomputed when it is a new array."""
        fit = self.builder.fit_mask()
        if fit is not self._fit:
            self._fit = fit
            self._exhausted = not (fit[:, 2].any() if self.cfg.pair else fit[:, :2].any())
            self._job_mask = None
            self._idle_fits = None

    def fits(self) -> np.ndarray:
        """(n_jobs, 3) bool over (worker, PS, pair): fits on some server within the cap.
        Read-only, valid until the next action."""
        return self._fit

    def can_add(self, i: int, workers: int, ps: int) -> bool:
        """Whether job i can take that many more workers and PSs (cap and servers)."""
        if (workers, ps) == (1, 0):
            return bool(self.fits()[i, 0])
        if (workers, ps) == (0, 1):
            return bool(self.fits()[i, 1])
        if (workers, ps) == (1, 1):
            return bool(self.fits()[i, 2])
        return self.builder.can_add(i, workers, ps)

    def resources_exhausted(self) -> bool:
        """Condition (1) on servers: no task (Chic-Pair: pair) of a visible job fits."""
        return self._exhausted

    def improvable(self, i: int) -> bool:
        """`ChicSchedule.improvable`, remembered until job i changes (it is asked for every
        job at every step)."""
        gain = self._gain[i]
        if gain is None:
            gain = self._gain[i] = super().improvable(i)
            self._unknown.discard(i)
            if gain:
                self._gainers.add(i)
        return gain

    def no_gain(self) -> bool:
        """Condition (2): asks `improvable` only of the jobs changed since it last knew."""
        if self._gainers:
            return False
        unknown = self._unknown
        while unknown:
            if self.improvable(next(iter(unknown))):
                return False
        return True

    def trainable(self) -> bool:
        """Some visible job has a worker and a PS."""
        return self._trainable > 0

    def finished(self) -> bool:
        """The state is in S': the policy must take void."""
        return self._exhausted or self.no_gain()

    def mask(self) -> np.ndarray:
        """Valid actions (bool, `ChicActions.n`); void last."""
        fit = self._fit
        idle = self._idle_fits
        if idle is None:
            idle = self._idle_fits = self._idle_job_fits()
        # Void: allowed while some job trains or none could get what it lacks; with
        # work_conserving, also not while an idle job's missing task fits. With nothing
        # training, "some job could train" is that same test (every job is idle).
        void = (not idle) if self.cfg.work_conserving else (self._trainable > 0 or not idle)
        key = self._mask_key
        if key is None or key[0] is not fit or key[1] != void:
            if self._job_mask is None:
                self._job_mask = self._jobs_part(fit)
            out = self._job_mask.copy()
            out[self.actions.void] = void
            self._mask = out
            self._mask_key = (fit, void)
        return self._mask.copy()

    def _jobs_part(self, fit: np.ndarray) -> np.ndarray:
        """The mask's rows of jobs and of absent jobs, void False."""
        actions = self.actions
        out = np.zeros(actions.n, dtype=bool)
        n = len(self.jobs)
        if self.cfg.pair:
            out[actions.rows(0, n)] = fit[:, 2]
        else:
            out[actions.workers(n)] = fit[:, 0]
            out[actions.ps(n)] = fit[:, 1]
        out[actions.rows(n, self.window)] = not self.cfg.mask_absent
        return out

    def apply(self, action: int) -> float:
        """Take one non-void action; returns its reward (penalties; 0 otherwise)."""
        # `ChicSchedule.apply` with the layout's decoding written out (the same checks,
        # errors and rewards): it runs at every step of every schedule.
        if not 0 <= action < self._n_actions:
            raise ValueError(f"action {action} outside 0..{self._n_actions - 1}")
        if action == self._void:
            raise ValueError("void ends the phase; it is not applied to the schedule")
        self.steps += 1
        cfg = self.cfg
        pair = self._pair
        if pair:
            row, dw, dp = action, 1, 1
        else:
            row, dw, dp = action >> 1, 1 - (action & 1), action & 1
        if row >= len(self.jobs):
            return -cfg.p1
        if not self._fit[row, 2 if pair else 1 - dw]:  # `can_add` of this action
            raise ValueError(f"action {action} does not fit (it is masked)")
        w, p = self.workers[row], self.ps[row]
        self._commit(row, dw, dp)
        if pair:
            return 0.0
        if w == 0 and p == 0:
            return -cfg.p2
        if (w == 0 or p == 0) and self.workers[row] > 0 and self.ps[row] > 0:
            return cfg.p2
        return 0.0

    def _commit(self, row: int, dw: int, dp: int) -> None:
        w, p = self.workers[row], self.ps[row]
        if not self.builder.add(row, dw, dp):
            raise ValueError(f"job row {row}: {dw} worker(s), {dp} PS(s) do not fit")
        self._refresh()
        if (w == 0) != (self.workers[row] == 0) or (p == 0) != (self.ps[row] == 0):
            # What the job lacks changed: `_idle_job_fits` may change with it.
            self._idle_fits = None
            if self.workers[row] > 0 and self.ps[row] > 0:
                self._trainable += 1
        self._gain[row] = None
        self._gainers.discard(row)
        self._unknown.add(row)
        if self._obs is not None:
            self._encode_tasks(self._obs, row)

    def _clear(self) -> None:
        if self._pool is not None:
            raise ValueError("a schedule on a pool shared with earlier schedules cannot restart")
        self._start()
        self._obs = None

    def allocation(self) -> Allocation:
        """The schedule as an allocation (the placement policy places it)."""
        return self.builder.allocation()

    def placement(self) -> Placement:
        raise NotImplementedError("the arena's placement policy places the allocation")

    # -- observation -------------------------------------------------------------------

    def observation(self) -> np.ndarray:
        """The encoded state, float32 of len(chic_arena_features(...)) (a copy)."""
        if self._obs is None:
            self._obs = self._encode()
        return self._obs.copy()

    def _encode(self) -> np.ndarray:
        cfg, n_types = self.cfg, self.n_types
        width = self._width
        obs = np.zeros(self.window * width + 1, dtype=np.float32)
        log_scale = math.log1p(EPOCHS_SCALE)
        for i, job in enumerate(self.jobs):
            at = i * width
            obs[at + job.type_index] = 1.0
            obs[at + n_types] = min(math.log1p(job.remaining_epochs_est) / log_scale, 1.0)
            self._encode_tasks(obs, i)
        obs[-1] = self.backlog / cfg.backlog_scale
        return obs

    def _encode_tasks(self, obs: np.ndarray, i: int) -> None:
        """Job row i's workers and PSs (what an action changes), in place."""
        at = i * self._width + self.n_types + 1
        cap = self.jobs[i].max_workers
        obs[at] = self.workers[i] / cap
        if not self.cfg.pair:
            obs[at + 1] = self.ps[i] / cap


def play_schedule(schedule: ChicArenaSchedule, choose, fallback: bool = True) -> Allocation:
    """Run one schedule to its end with `choose(observation, mask) -> action`: until void,
    S' or `max_phase_steps`; a schedule training nothing falls back (module doc, 5) unless
    `fallback` is False. What the deployed policy does at every decision."""
    limit, void = schedule.cfg.max_phase_steps, schedule.actions.void
    while not schedule.finished() and schedule.steps < limit:
        action = choose(schedule.observation(), schedule.mask())
        if action == void:  # anything else outside the layout: `apply` raises
            break
        schedule.apply(action)
    if fallback and schedule.jobs and not schedule.trainable():
        schedule.fallback()
    return schedule.allocation()


class ChicArenaEnv(ChicEnvBase):
    """Chic / Chic-Pair as a gymnasium environment in the arena's DL2 setting: the episode
    interface of `tracelib.envs.chic.ChicEnvBase` (what `models.chic` trains with), a
    schedule of the first I visible jobs every slot, placed by `placement`."""

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        scenario: ChicArenaScenario | None = None,
        cfg: ChicEnvConfig | None = None,
        placement: PlacementPolicy | None = None,
    ) -> None:
        super().__init__(
            workloads, scenario or ChicArenaScenario(), cfg or ChicEnvConfig(), chic_arena_features
        )
        self.placement = placement or LoadBalancing()
        self.schedule: ChicArenaSchedule | None = None

    def _sim_config(self, sim_seed: int) -> SimConfig:
        return self.scenario.sim_config(sim_seed)

    def _submit(self) -> float:
        """End the schedule: place it and train until the next slot; returns r1 (and -p1
        for a fallback)."""
        schedule, session = self.schedule, self.session
        reward = 0.0
        if schedule.jobs and not schedule.trainable():
            reward += schedule.fallback()
            self.stats.penalties += self.cfg.p1
            self.stats.fallbacks += 1
        alloc = schedule.allocation()
        placement = self.placement.place(schedule.snap, alloc, session.rng)
        self.stats.schedules += 1
        self.schedule = None
        t0, n = session.time_s, session.jobs_in_system()
        session.submit(alloc, placement)
        return -n * (session.time_s - t0) / self.cfg.reward_unit_s

    def _advance(self) -> float:
        """Run to the next slot where the agent acts; returns the reward of the slots that
        ran meanwhile (nothing to decide, or a schedule in S' from the start)."""
        reward = 0.0
        while self.session is not None and not self.session.done:
            self.schedule = ChicArenaSchedule(self.session.snapshot, self.cfg, self.window)
            if not self.schedule.finished():
                return reward
            reward += self._submit()
        self.schedule = None
        return reward
