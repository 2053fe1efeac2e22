"""Chic and Chic-Pair's decision process (Gong et al., section 4.2) over the simulator.

A new schedule is needed when one of the first I workloads finishes or a workload arrives
while fewer than I are in the system (the simulator decides on every arrival and
completion, `SimConfig.trigger="events"`; an arrival that only joins the backlog keeps the
schedule, so the env re-submits it without asking the agent, unless it trains nothing).
Each schedule starts from
zero workers and PSs for every job; one action per step adds

    Chic       a worker (action 2i) or a PS (2i + 1) to job i, or nothing (void, 2I): 2I + 1
    Chic-Pair  a worker and a PS to job i (action i), or nothing (void, I):           I + 1

(0-based; the paper counts from 1) until the agent takes the void action or the state is
in S', where the paper's policy takes void with probability 1 and the env does so itself:

    condition (1), eq. 4: the smallest task (Chic; Chic-Pair: the smallest worker+PS pair)
        of the visible jobs no longer fits one resource; also, generalizing it, no task of
        any visible job fits at all (a job's cap, or GPUs gone with every PS added);
    condition (2), eq. 5: no single addition shortens any visible job's per-iteration
        time g_i(w, p). A job still lacking a worker or a PS has g = infinity, which one
        addition may leave infinite: we count such a job as improvable (read literally,
        eq. 5 would end every schedule before its first step);
    no visible job.

The job-training phase is one more time step; its reward is r1 (eq. 8), minus the time
every job in the system (the first I, the backlog, and those arriving) spends in it, in
units of `reward_unit_s` (paper: 20 minutes). Since the simulator stops at every arrival and
completion, the set of jobs in the system is constant between two of its decisions, so r1 is
-(jobs in system) x (time to the next decision), summed over the decisions merged into one
training phase. Decision-making steps take no simulated time (the paper: under 1 ms).

Penalties: -p1 (5) for an action on a job that does not exist (the state does not change),
-p2 (1) when a job first gets a worker or a PS, +p2 back once it has both (Chic only).
The return of an episode is therefore -(sum of JCTs) / reward_unit_s less the penalties.

Actions on existing jobs whose task does not fit are masked; actions on absent jobs are
not (the paper penalizes them; `mask_absent=True` masks them too, which the greedy
evaluation uses). The void action is masked when no visible job could train and no job is
still to arrive (and, with the `work_conserving` option, a deviation, while a job lacks a
worker or PS that fits) (the simulator would wait forever); if a schedule reaches S' in that state,
or a phase exceeds `max_phase_steps`, the env resets it to one worker + one PS for the
first job and charges p1.

Observation (`chic_features`): per visible job (rows past the jobs in the system are zero,
as in the paper) its model one-hot, remaining iterations s^B / `iterations_scale`, workers
s^w and (Chic only) PSs s^p / `tasks_scale`; then the backlog N_t / `backlog_scale`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from tracelib.catalogue import JobType
from tracelib.envs.environments import ExternalPolicy, episode_start
from tracelib.scenarios.chic import (
    CHIC_CATALOGUE,
    ChicArenaScenario,
    ChicScenario,
    iteration_time_s,
)
from tracelib.sim.config import SimConfig
from tracelib.sim.engine import SimResult, SimSession, Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot

VARIANTS = ("chic", "chic-pair")


@dataclass(frozen=True)
class ChicEnvConfig:
    """Chic's MDP: variant, penalties, reward unit and observation scales."""

    variant: str = "chic"
    """"chic" (add a worker or a PS: 2I + 1 actions) or "chic-pair" (add both: I + 1)."""
    p1: float = 5.0
    """Penalty for an action on a job that does not exist (paper: 5)."""
    p2: float = 1.0
    """Penalty while a job has workers but no PS or PSs but no worker (paper: 1; Chic only)."""
    reward_unit_s: float = 1200.0
    """r1 is counted in these units (paper: 20 minutes)."""
    iterations_scale: float = 200.0
    """s^B is divided by this (the largest job size)."""
    tasks_scale: float = 10.0
    """s^w and s^p are divided by this (the cluster's GPUs)."""
    backlog_scale: float = 30.0
    """N_t is divided by this (W)."""
    mask_absent: bool = False
    """Mask actions on absent jobs instead of charging p1 (greedy evaluation)."""
    work_conserving: bool = False
    """Deviation from the paper (off by default): void is also masked while a visible job
    lacks a worker or a PS that still fits. With speeds independent across jobs, giving an
    idle job tasks from free resources never slows another, so such a void is dominated."""
    max_phase_steps: int = 200
    """Steps in one decision-making phase before the env ends it (see module doc)."""

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if min(self.reward_unit_s, self.iterations_scale, self.tasks_scale) <= 0:
            raise ValueError("reward_unit_s and the scales must be positive")
        if self.backlog_scale <= 0 or self.max_phase_steps < 1:
            raise ValueError("backlog_scale and max_phase_steps must be positive")

    @property
    def pair(self) -> bool:
        return self.variant == "chic-pair"


def chic_features(
    variant: str, window: int, catalogue: tuple[JobType, ...] = CHIC_CATALOGUE
) -> tuple[str, ...]:
    """Names of the observation's entries: window rows of job features, then backlog."""
    types = [f"type={jt.model}" for jt in sorted(catalogue, key=lambda t: t.type_index)]
    per_job = (*types, "remaining_iterations", "workers") + (
        () if variant == "chic-pair" else ("ps",)
    )
    rows = [f"job{i}.{name}" for i in range(window) for name in per_job]
    return (*rows, "backlog")


@dataclass(frozen=True)
class ChicActions:
    """Chic's action layout: 2I + 1 actions, job row i's worker at 2i and PS at 2i + 1
    (Chic), or I + 1, row i's worker+PS pair at i (Chic-Pair); void last. Every index of
    this space is made or read here."""

    variant: str
    """"chic" or "chic-pair"."""
    window: int
    """I: the job rows acted on."""

    @property
    def per_row(self) -> int:
        """Actions per job row: 1 (Chic-Pair) or 2 (Chic)."""
        return 1 if self.variant == "chic-pair" else 2

    @property
    def n(self) -> int:
        """2I + 1 (Chic) or I + 1 (Chic-Pair)."""
        return self.per_row * self.window + 1

    @property
    def void(self) -> int:
        """The void action (the last): ends the phase."""
        return self.per_row * self.window

    def add_worker(self, row: int) -> int:
        """Chic: the action adding a worker to job row `row`."""
        return 2 * row

    def add_ps(self, row: int) -> int:
        """Chic: the action adding a PS to job row `row`."""
        return 2 * row + 1

    def add_pair(self, row: int) -> int:
        """Chic-Pair: the action adding a worker+PS pair to job row `row`."""
        return row

    def decode(self, action: int) -> tuple[int, int, int] | None:
        """(job row, workers added, PSs added) of `action`, or None for void."""
        if not 0 <= action < self.n:
            raise ValueError(f"action {action} outside 0..{self.n - 1}")
        if action == self.void:
            return None
        if self.per_row == 1:
            return action, 1, 1
        return action // 2, 1 - action % 2, action % 2

    def row(self, row: int) -> slice:
        """The actions of job row `row`."""
        return slice(self.per_row * row, self.per_row * (row + 1))

    def rows(self, start: int, stop: int) -> slice:
        """The actions of job rows `start`..`stop - 1`."""
        return slice(self.per_row * start, self.per_row * stop)

    def workers(self, n: int) -> slice:
        """Chic: the worker actions of the first `n` job rows."""
        return slice(0, 2 * n, 2)

    def ps(self, n: int) -> slice:
        """Chic: the PS actions of the first `n` job rows."""
        return slice(1, 2 * n, 2)


class ChicSchedule:
    """One decision-making phase: the visible jobs' workers and PSs, built one action at a
    time from zero, with the paper's stopping conditions and penalties (pure numpy)."""

    def __init__(
        self,
        jobs: Sequence[JobView],
        types: dict[str, JobType],
        capacity: np.ndarray,
        cfg: ChicEnvConfig,
        window: int,
        backlog: int = 0,
        pending_arrivals: int = 0,
    ) -> None:
        if len(jobs) > window:
            raise ValueError(f"{len(jobs)} jobs visible, window is {window}")
        self.jobs = tuple(jobs)
        self.cfg = cfg
        self.window = window
        self.actions = ChicActions(cfg.variant, window)
        self.backlog = backlog
        self.pending_arrivals = pending_arrivals
        self.types = [types[j.model] for j in self.jobs]
        # Plain floats: these checks run several times per step, where numpy's per-call
        # overhead would dominate.
        self.free = [float(x) for x in capacity]  # GPU, CPU, GB
        n = len(self.jobs)
        self.workers = [0] * n
        self.ps = [0] * n
        self.steps = 0
        self._w_dem = [tuple(float(x) for x in jt.worker_demand) for jt in self.types]
        self._p_dem = [tuple(float(x) for x in jt.ps_demand) for jt in self.types]
        self._mask: np.ndarray | None = None

    # -- the paper's conditions ------------------------------------------------------

    def _fits(self, demand: tuple[float, ...]) -> bool:
        f = self.free
        return demand[0] <= f[0] + 1e-9 and demand[1] <= f[1] + 1e-9 and demand[2] <= f[2] + 1e-9

    def can_add(self, i: int, workers: int, ps: int) -> bool:
        """Whether job i can take that many more workers and PSs (cap and resources)."""
        cap = self.jobs[i].max_workers
        if self.workers[i] + workers > cap or self.ps[i] + ps > cap:
            return False
        wd, pd = self._w_dem[i], self._p_dem[i]
        return self._fits(tuple(workers * a + ps * b for a, b in zip(wd, pd, strict=True)))

    def resources_exhausted(self) -> bool:
        """Condition (1), eq. 4 (Chic-Pair: the pair form), or no task of any job fits."""
        if not self.jobs:
            return True
        if self.cfg.pair:
            pairs = [
                tuple(a + b for a, b in zip(w, p, strict=True))
                for w, p in zip(self._w_dem, self._p_dem, strict=True)
            ]
            if not self._fits(tuple(min(d[k] for d in pairs) for k in range(3))):
                return True
            return not any(self.can_add(i, 1, 1) for i in range(len(self.jobs)))
        tasks = self._w_dem + self._p_dem
        if not self._fits(tuple(min(d[k] for d in tasks) for k in range(3))):
            return True
        return not any(
            self.can_add(i, 1, 0) or self.can_add(i, 0, 1) for i in range(len(self.jobs))
        )

    def improvable(self, i: int) -> bool:
        """Whether one addition (Chic-Pair: one pair) shortens job i's g_i(w, p); a job
        lacking a worker or a PS counts as improvable (see module doc)."""
        jt, w, p = self.types[i], self.workers[i], self.ps[i]
        now = iteration_time_s(jt, w, p)
        if self.cfg.pair:
            return iteration_time_s(jt, w + 1, p + 1) < now
        if w == 0 or p == 0:
            return True
        return min(iteration_time_s(jt, w + 1, p), iteration_time_s(jt, w, p + 1)) < now

    def no_gain(self) -> bool:
        """Condition (2), eq. 5: no addition shortens any visible job's iteration time."""
        return not any(self.improvable(i) for i in range(len(self.jobs)))

    def trainable(self) -> bool:
        """Some visible job has a worker and a PS."""
        return any(w > 0 and p > 0 for w, p in zip(self.workers, self.ps, strict=True))

    def finished(self) -> bool:
        """The state is in S': the policy must take void."""
        return not self.jobs or self.resources_exhausted() or self.no_gain()

    # -- actions ---------------------------------------------------------------------

    def mask(self) -> np.ndarray:
        """Valid actions (bool, `ChicActions.n`); void last."""
        if self._mask is None:
            self._mask = self._compute_mask()
        return self._mask.copy()

    def _compute_mask(self) -> np.ndarray:
        actions = self.actions
        out = np.zeros(actions.n, dtype=bool)
        for row in range(self.window):
            if row >= len(self.jobs):
                out[actions.row(row)] = not self.cfg.mask_absent
            elif self.cfg.pair:
                out[actions.add_pair(row)] = self.can_add(row, 1, 1)
            else:
                out[actions.add_worker(row)] = self.can_add(row, 1, 0)
                out[actions.add_ps(row)] = self.can_add(row, 0, 1)
        out[actions.void] = (self.trainable() or self.pending_arrivals > 0) and not (
            self.cfg.work_conserving and self._idle_job_fits()
        )
        return out

    def _idle_job_fits(self) -> bool:
        """Some visible job lacks a worker or a PS, and what it lacks fits."""
        for i in range(len(self.jobs)):
            w, p = self.workers[i], self.ps[i]
            if w > 0 and p > 0:
                continue
            if self.can_add(i, int(w == 0), int(p == 0)):
                return True
        return False

    def apply(self, action: int) -> float:
        """Take one non-void action; returns its reward (penalties; 0 otherwise)."""
        decoded = self.actions.decode(action)
        if decoded is None:
            raise ValueError("void ends the phase; it is not applied to the schedule")
        self.steps += 1
        row, dw, dp = decoded
        if row >= len(self.jobs):
            return -self.cfg.p1
        if not self.can_add(row, dw, dp):
            raise ValueError(f"action {action} does not fit (it is masked)")
        before = (self.workers[row], self.ps[row])
        self._commit(row, dw, dp)
        if self.cfg.pair:
            return 0.0
        if before == (0, 0):
            return -self.cfg.p2
        if 0 in before and self.workers[row] > 0 and self.ps[row] > 0:
            return self.cfg.p2
        return 0.0

    def _commit(self, row: int, dw: int, dp: int) -> None:
        """Give job `row` the tasks of a checked action (counts and resources)."""
        self.workers[row] += dw
        self.ps[row] += dp
        wd, pd = self._w_dem[row], self._p_dem[row]
        self.free = [f - dw * a - dp * b for f, a, b in zip(self.free, wd, pd, strict=True)]
        self._mask = None

    def _clear(self) -> None:
        """Take every task back (counts and resources)."""
        for i in range(len(self.jobs)):
            w, p, wd, pd = self.workers[i], self.ps[i], self._w_dem[i], self._p_dem[i]
            self.free = [f + w * a + p * b for f, a, b in zip(self.free, wd, pd, strict=True)]
        self.workers = [0] * len(self.jobs)
        self.ps = [0] * len(self.jobs)
        self._mask = None

    def fallback(self) -> float:
        """Reset to one worker + one PS for the first job (a stuck phase); returns -p1."""
        self._clear()
        self._commit(0, 1, 1)
        return -self.cfg.p1

    def allocation(self) -> Allocation:
        """The schedule as an allocation."""
        return Allocation.of(
            {j.job_id: (w, p) for j, w, p in zip(self.jobs, self.workers, self.ps, strict=True)}
        )

    def placement(self) -> Placement:
        """Every task on the one server (the paper's pooled cluster)."""
        return Placement.of(
            {
                j.job_id: JobPlacement((0,) * w, (0,) * p)
                for j, w, p in zip(self.jobs, self.workers, self.ps, strict=True)
                if w or p
            }
        )

    # -- observation -----------------------------------------------------------------

    def observation(self) -> np.ndarray:
        """The encoded state, float32 of len(chic_features(...))."""
        cfg, n_types = self.cfg, len(CHIC_CATALOGUE)
        width = n_types + (2 if cfg.pair else 3)
        obs = np.zeros(self.window * width + 1, dtype=np.float32)
        for i, (job, jt) in enumerate(zip(self.jobs, self.types, strict=True)):
            row = obs[i * width : (i + 1) * width]
            row[jt.type_index] = 1.0
            row[n_types] = job.remaining_epochs_est / cfg.iterations_scale
            row[n_types + 1] = self.workers[i] / cfg.tasks_scale
            if not cfg.pair:
                row[n_types + 2] = self.ps[i] / cfg.tasks_scale
        obs[-1] = self.backlog / cfg.backlog_scale
        return obs


class ChicEnvBase(gym.Env):
    """What Chic's two decision processes share (`ChicEnv` here, `ChicArenaEnv` in the
    arena): an episode is one job sequence (`options={"workload": k}` or drawn with the
    env's generator); reset's info holds "initial_reward", the reward of anything that ran
    before the first state the agent acts in; `schedule` is the schedule being built (None
    once the episode is over); `action_masks()` and `info["action_mask"]` give the valid
    actions; an invalid (masked) action raises, since the paper has none. A subclass says
    how its simulator is configured (`_sim_config`), how a schedule ends (`_submit`) and
    how the simulator runs to the next state the agent acts in (`_advance`)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        scenario: ChicScenario | ChicArenaScenario,
        cfg: ChicEnvConfig,
        features: Callable[[str, int, Sequence[JobType]], tuple[str, ...]],
    ) -> None:
        """`features(variant, window, catalogue)` names the observation's entries for
        the scenario's window (I) and catalogue."""
        if not workloads or not all(workloads):
            raise ValueError("need at least one non-empty workload")
        window = scenario.window
        self.workloads = tuple(tuple(w) for w in workloads)
        self.scenario = scenario
        self.cfg = cfg
        self.window = window
        self.features = features(cfg.variant, window, scenario.catalogue)
        self.observation_space = gym.spaces.Box(
            0.0, np.inf, (len(self.features),), dtype=np.float32
        )
        self.actions = ChicActions(cfg.variant, window)
        self.action_space = gym.spaces.Discrete(self.actions.n)
        self.session: SimSession | None = None
        self.schedule: ChicSchedule | None = None
        self.stats = EpisodeStats()

    # -- what a decision process defines -------------------------------------------------

    def _sim_config(self, sim_seed: int) -> SimConfig:
        raise NotImplementedError

    def _catalogue(self) -> tuple[JobType, ...]:
        return self.scenario.catalogue

    def _submit(self) -> float:
        raise NotImplementedError

    def _advance(self) -> float:
        raise NotImplementedError

    def _on_reset(self) -> None:
        """Forget what the last episode left (nothing by default)."""

    # -- episode -----------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start a sequence; returns the first state the agent acts in. `options` may name
        the sequence ("workload") and the simulator's seed ("sim_seed": an evaluation passes
        the seed its baselines ran the sequence on); otherwise both are drawn from `seed`."""
        super().reset(seed=seed)
        options = options or {}
        k, sim_seed = episode_start(self.np_random, len(self.workloads), options)
        if options.get("sim_seed") is not None:
            sim_seed = int(options["sim_seed"])
        sim = Simulator(
            self.workloads[k], ExternalPolicy(), self._sim_config(sim_seed), self._catalogue()
        )
        self.workload_index = int(k)
        self.session = sim.session()
        self.stats = EpisodeStats()
        self._on_reset()
        reward = self._advance()
        return self._obs(), {**self._info(), "initial_reward": reward}

    def step(self, action):
        """One action of the decision-making phase; void (or reaching S') runs the jobs."""
        if self.schedule is None:
            raise RuntimeError("episode is over; call reset()")
        action = int(action)
        mask = self.schedule.mask()
        if not mask[action]:
            raise ValueError(f"action {action} is not valid here (mask {mask.astype(int)})")
        self.stats.steps += 1
        reward = 0.0
        if self.actions.decode(action) is None:
            reward += self._submit()
        else:
            penalty = self.schedule.apply(action)
            self.stats.penalties += -penalty if penalty < 0 else 0.0
            reward += penalty
            if self.schedule.finished() or self.schedule.steps >= self.cfg.max_phase_steps:
                reward += self._submit()
        if self.schedule is None:
            reward += self._advance()
        terminated = self.schedule is None
        return self._obs(), float(reward), terminated, False, self._info()

    def action_masks(self) -> np.ndarray:
        """Valid actions in the current state (only void once the episode is over)."""
        if self.schedule is None:
            out = np.zeros(self.action_space.n, dtype=bool)
            out[-1] = True
            return out
        return self.schedule.mask()

    def result(self) -> SimResult:
        """The finished episode's simulation result."""
        if self.session is None:
            raise RuntimeError("reset the environment first")
        return self.session.result()

    def _obs(self) -> np.ndarray:
        if self.schedule is None:
            return np.zeros(len(self.features), dtype=np.float32)
        return self.schedule.observation()

    def _info(self) -> dict[str, Any]:
        return {
            "action_mask": self.action_masks(),
            "time_s": self.session.time_s if self.session else 0.0,
        }


class ChicEnv(ChicEnvBase):
    """Chic / Chic-Pair in Chic's own scenario, over the event-driven simulator
    (`ChicEnvBase` for the episode interface)."""

    def __init__(
        self,
        workloads: Sequence[Sequence[JobSpec]],
        scenario: ChicScenario | None = None,
        cfg: ChicEnvConfig | None = None,
    ) -> None:
        super().__init__(
            workloads, scenario or ChicScenario(), cfg or ChicEnvConfig(), chic_features
        )
        self.types = {jt.model: jt for jt in self.scenario.catalogue}
        self._last_ids: tuple[int, ...] | None = None
        self._last_decision: tuple[Allocation, Placement] | None = None

    def _sim_config(self, sim_seed: int) -> SimConfig:
        return self.scenario.sim_config("events", sim_seed)

    def _on_reset(self) -> None:
        self._last_ids = None
        self._last_decision = None

    def _run(self, alloc: Allocation, placement: Placement) -> float:
        """Submit one simulator decision; r1 of the interval to the next decision."""
        session = self.session
        t0, n = session.time_s, session.jobs_in_system()
        session.submit(alloc, placement)
        dt = session.time_s - t0
        return -n * dt / self.cfg.reward_unit_s

    def _submit(self) -> float:
        """End the decision-making phase: the schedule trains until the next decision."""
        schedule = self.schedule
        reward = 0.0
        if not schedule.trainable() and schedule.pending_arrivals == 0:
            reward += schedule.fallback()
            self.stats.penalties += self.cfg.p1
            self.stats.fallbacks += 1
        decision = (schedule.allocation(), schedule.placement())
        # Only a schedule that trains something stands through backlog arrivals: keeping
        # an idle one would wait forever once nothing is left to arrive.
        keep = schedule.trainable()
        self._last_ids = tuple(j.job_id for j in schedule.jobs) if keep else None
        self._last_decision = decision if keep else None
        self.stats.schedules += 1
        self.schedule = None
        return reward + self._run(*decision)

    def _advance(self) -> float:
        """Run the simulator to the next state where the agent acts; returns the reward of
        what ran meanwhile (kept schedules, phases that start in S')."""
        reward = 0.0
        while self.session is not None and not self.session.done:
            snap: Snapshot = self.session.snapshot
            ids = tuple(j.job_id for j in snap.jobs)
            if ids == self._last_ids and self._last_decision is not None:
                # An arrival joined the backlog: the schedule stands (Chic's triggers).
                reward += self._run(*self._last_decision)
                continue
            in_system = self.session.jobs_in_system()
            self.schedule = ChicSchedule(
                snap.jobs,
                self.types,
                self.scenario.capacity,
                self.cfg,
                self.window,
                backlog=in_system - len(snap.jobs),
                pending_arrivals=self.session.unfinished() - in_system,
            )
            if not self.schedule.finished():
                return reward
            reward += self._submit()
        self.schedule = None
        return reward


@dataclass
class EpisodeStats:
    """Counters of one episode (for learning curves and tests)."""

    steps: int = 0
    schedules: int = 0
    penalties: float = 0.0
    fallbacks: int = 0


def average_jct_s(result: SimResult) -> float:
    """Average completion time of a finished episode (NaN if a job never finished)."""
    jct = result.jobs["jct_s"]
    return float(jct.mean()) if jct.null_count() == 0 else math.nan
