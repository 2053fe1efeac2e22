"""Observation encodings and action masks for every decision type, with named features.

This is the one place that turns a snapshot (plus the decision being built) into arrays a
network reads, and says which actions are valid. Environments (`tracelib.envs`), decision
recorders and the learned schedulers in `models/` all call these functions, so the same
state always becomes the same numbers.

Allocation (DL2): the first J visible jobs by arrival, each a row of `allocation_features`:
    type=<model>       one-hot over the catalogue (L columns)
    slots_run          slots since the job first trained / slots_scale, clipped to 1
    remaining_epochs   log1p(estimated epochs left) / log1p(epochs_scale), clipped to 1
    remaining_fraction estimated epochs left / estimated total
    dominant_share     largest cluster share the job's tasks hold in the decision so far
    workers, ps        tasks given so far in this decision / the job's cap
    present            1 for a real job, 0 for an empty row (fewer than J jobs)
  Actions: 3J + 1, job i's (worker, PS, both) at 3i + kind, stop last (always valid):
  `AllocationActions` makes and reads these indices.

Placement (Harmony, state (x, r, w, p, v, d)): the first N' waiting jobs, each a row of
`placement_job_features` (x: model one-hot; r: remaining epochs; w, p: workers and PSs still
to place / cap; placed_w, placed_p: placed so far / cap; present), then per server the free
resources v (GPU, CPU, memory as fractions of the server) and d, the tasks of each model on
it (running jobs and this decision's) / `tasks_scale`.
  Actions: 2 * N' * M, placing job i's worker (role 0) or PS (role 1) on server m at
  (2i + role) * M + m (`PlacementActions`). A job started in a decision is finished before
  another starts, and only where its remaining tasks still fit (`PlacementDraft.mask`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tracelib.catalogue import JobType
from tracelib.sim.builder import Action, AllocationBuilder
from tracelib.sim.snapshot import JobView, Snapshot

# -- allocation (DL2) ---------------------------------------------------------------------

ALLOCATION_SCALARS = (
    "slots_run",
    "remaining_epochs",
    "remaining_fraction",
    "dominant_share",
    "workers",
    "ps",
    "present",
)
ACTION_KINDS = 3
"""Per job: add a worker, a PS, or both (tracelib.sim.builder.Action)."""


@dataclass(frozen=True)
class AllocationObsConfig:
    """Shape and scaling of the DL2 observation."""

    window: int = 20
    """J: jobs the policy sees and acts on (DL2: 20 small setting, 40 large)."""
    slots_scale: float = 50.0
    """slots_run saturates at this many slots."""
    epochs_scale: float = 10_000.0
    """remaining_epochs saturates at this many epochs (log scale)."""

    def __post_init__(self) -> None:
        if self.window < 1 or self.slots_scale <= 0 or self.epochs_scale <= 0:
            raise ValueError("window, slots_scale and epochs_scale must be positive")

    @property
    def actions(self) -> AllocationActions:
        """The layout of the 3J + 1 actions on this observation's J job rows."""
        return AllocationActions(self.window)


def allocation_features(catalogue: tuple[JobType, ...]) -> tuple[str, ...]:
    """Column names of one job row of the allocation observation."""
    types = sorted(catalogue, key=lambda jt: jt.type_index)
    return tuple(f"type={jt.model}" for jt in types) + ALLOCATION_SCALARS


@dataclass(frozen=True)
class AllocationActions:
    """DL2's action layout, 3J + 1 actions: job row i's worker, PS and worker+PS pair at
    3i + kind (kind an `Action`), stop last. Every index of this space is made or read
    here, so the networks, policies, recorder and environment agree on it."""

    window: int
    """J: the job rows acted on."""

    @property
    def n(self) -> int:
        """3J + 1."""
        return ACTION_KINDS * self.window + 1

    @property
    def stop(self) -> int:
        """The stop action (the last)."""
        return ACTION_KINDS * self.window

    def of(self, row: int, kind: int) -> int:
        """The action adding `kind` (an `Action`) to job row `row`."""
        return ACTION_KINDS * row + kind

    def add_worker(self, row: int) -> int:
        """The action adding a worker to job row `row`."""
        return ACTION_KINDS * row + Action.WORKER

    def add_ps(self, row: int) -> int:
        """The action adding a PS to job row `row`."""
        return ACTION_KINDS * row + Action.PS

    def add_both(self, row: int) -> int:
        """The action adding a worker+PS pair to job row `row`."""
        return ACTION_KINDS * row + Action.BOTH

    def decode(self, action: int) -> tuple[int, Action] | None:
        """(job row, kind) of `action`, None for stop."""
        if action == self.stop:
            return None
        row, kind = divmod(int(action), ACTION_KINDS)
        return row, Action(kind)

    def row(self, row: int) -> slice:
        """The actions of job row `row` (its worker, PS and pair), in `Action` order."""
        return slice(ACTION_KINDS * row, ACTION_KINDS * (row + 1))

    def rows(self, n: int) -> slice:
        """The actions of the first `n` job rows."""
        return slice(0, ACTION_KINDS * n)

    def mask(self, builder: AllocationBuilder) -> np.ndarray:
        """(3J + 1,) bool: the valid actions of the decision `builder` holds; stop is always
        valid."""
        mask = np.zeros(self.n, dtype=bool)
        n = min(len(builder.jobs), self.window)
        if n:
            mask[self.rows(n)] = builder.mask()[:n].ravel()
        mask[self.stop] = True
        return mask


def encode_allocation(builder: AllocationBuilder, cfg: AllocationObsConfig) -> np.ndarray:
    """(J, L + 7) float32 observation of the decision `builder` is building."""
    snap = builder.snap
    n_types = len(snap.catalogue)
    out = np.zeros((cfg.window, n_types + len(ALLOCATION_SCALARS)), dtype=np.float32)
    log_scale = math.log1p(cfg.epochs_scale)
    for i, job in enumerate(builder.jobs[: cfg.window]):
        out[i, job.type_index] = 1.0
        row = out[i, n_types:]
        if job.started_s is not None:
            row[0] = min((snap.time_s - job.started_s) / snap.slot_s / cfg.slots_scale, 1.0)
        left = job.remaining_epochs_est
        row[1] = min(math.log1p(left) / log_scale, 1.0)
        row[2] = left / job.epochs_est
        row[6] = 1.0
        refresh_allocation_row(out, builder, i)
    return out


def refresh_allocation_row(obs: np.ndarray, builder: AllocationBuilder, i: int) -> None:
    """Update, in place, the columns of job row i that an action on job i changes
    (dominant_share, workers, ps) of an `encode_allocation` array (J, L + 7)."""
    cap = builder.jobs[i].max_workers
    base = len(builder.snap.catalogue) + 3
    row = obs[i]  # (L + 7,) view
    row[base] = min(builder.dominant_share(i), 1.0)
    row[base + 1] = builder.workers[i] / cap
    row[base + 2] = builder.ps[i] / cap


def allocation_mask(builder: AllocationBuilder, cfg: AllocationObsConfig) -> np.ndarray:
    """(3J + 1,) bool: valid actions; stop (the last) is always valid."""
    return cfg.actions.mask(builder)


# -- placement (Harmony) ------------------------------------------------------------------

PLACEMENT_SCALARS = ("remaining_epochs", "workers", "ps", "placed_w", "placed_p", "present")
SERVER_FREE = ("free_gpu", "free_cpu", "free_mem")


@dataclass(frozen=True)
class PlacementObsConfig:
    """Shape and scaling of the Harmony observation."""

    window: int = 10
    """N': waiting jobs the policy sees and places."""
    epochs_scale: float = 10_000.0
    """remaining_epochs saturates at this many epochs (log scale)."""
    tasks_scale: float = 8.0
    """A server's per-model task count saturates at this many."""
    job_placement: bool = True
    """Server rows carry Harmony's d for the jobs being placed: each window job's workers
    and PSs on the server (paper: d, M x 2N). Without it a policy cannot tell on which
    servers the job it is completing already has tasks (the per-model counts mix every job
    of a model); running jobs appear through the per-model counts either way."""

    def __post_init__(self) -> None:
        if self.window < 1 or self.epochs_scale <= 0 or self.tasks_scale <= 0:
            raise ValueError("window, epochs_scale and tasks_scale must be positive")


def placement_job_features(catalogue: tuple[JobType, ...]) -> tuple[str, ...]:
    """Column names of one job row of the placement observation."""
    types = sorted(catalogue, key=lambda jt: jt.type_index)
    return tuple(f"type={jt.model}" for jt in types) + PLACEMENT_SCALARS


def placement_server_features(
    catalogue: tuple[JobType, ...], cfg: PlacementObsConfig | None = None
) -> tuple[str, ...]:
    """Column names of one server row: free resources v, per-model tasks, then (with
    `cfg.job_placement`) each window job's workers and PSs there."""
    cfg = cfg or PlacementObsConfig()
    types = sorted(catalogue, key=lambda jt: jt.type_index)
    own: tuple[str, ...] = ()
    if cfg.job_placement:
        own = tuple(f"job{i}_{r}" for i in range(cfg.window) for r in ("workers", "ps"))
    return SERVER_FREE + tuple(f"tasks={jt.model}" for jt in types) + own


@dataclass(frozen=True)
class PlacementActions:
    """Harmony's action layout, 2 * N' * M actions: job row i's next worker (role 0) or PS
    (role 1) on server m at (2i + role) * M + m, the order of `PlacementDraft.mask`'s
    (N', 2, M) grid flattened. Every index of this space is made or read here."""

    window: int
    """N': the job rows placed."""
    n_servers: int
    """M."""

    @property
    def n(self) -> int:
        """2 * N' * M."""
        return 2 * self.window * self.n_servers

    def of(self, row: int, role: int, server: int) -> int:
        """The action placing job row `row`'s next task of `role` on `server`."""
        return (2 * row + role) * self.n_servers + server

    def task(self, row: int, role: int) -> slice:
        """The actions placing job row `row`'s next task of `role`, one per server."""
        start = (2 * row + role) * self.n_servers
        return slice(start, start + self.n_servers)

    def decode(self, action: int) -> tuple[int, int, int]:
        """(job row, role, server) of `action`."""
        job_role, server = divmod(int(action), self.n_servers)
        job, role = divmod(job_role, 2)
        return job, role, server

    def grid(self, mask: np.ndarray) -> np.ndarray:
        """(2 * N' * M,) -> (N', 2, M) view: by job row, role and server."""
        return mask.reshape(self.window, 2, self.n_servers)


_TOL = 1e-9
"""Slack of every fit test (float sums of demands)."""


def _room(free: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """How many tasks of `demand` (3,) fit in each row of `free` (..., 3): the largest k
    with free - k * demand >= -_TOL in every resource (a resource it does not use puts no
    limit on it; a task demanding nothing fits without limit)."""
    used = demand > 0
    if not used.any():
        # More tasks than any job has, and sums of it over any number of servers stay far
        # from overflowing (first fit sums rooms over servers).
        return np.full(free.shape[:-1], 1 << 40, dtype=np.int64)
    per = np.floor((free[..., used] + _TOL) / demand[used])
    return np.maximum(per.min(axis=-1), 0).astype(np.int64)


def _first_fit(
    free: np.ndarray,
    demands: tuple[np.ndarray, np.ndarray],
    need: np.ndarray,
    allowed: tuple[np.ndarray | None, np.ndarray | None] = (None, None),
) -> tuple[np.ndarray, np.ndarray]:
    """First fit of `need` (2,) workers then PSs of `demands` on each row of `free`
    (C, M, 3), changed in place: whether each row takes them all (C,), and the last server
    a task went to (C,; -1 if none, meaningful where all are taken). `allowed`: per role,
    the servers (M,) bool its tasks may use (GPU types; None: any)."""
    feasible = np.ones(free.shape[0], dtype=bool)
    last = np.full(free.shape[0], -1, dtype=np.int64)
    for r in (0, 1):
        if need[r] == 0:
            continue
        room = _room(free, demands[r])  # (C, M) tasks of this kind each server takes
        if allowed[r] is not None:
            room = np.where(allowed[r], room, 0)
        before = np.cumsum(room, axis=1) - room
        take = np.clip(need[r] - before, 0, room)  # (C, M) first fit's tasks per server
        taken = np.cumsum(take, axis=1)
        feasible &= taken[:, -1] >= need[r]
        # the first server where the tasks taken reach the need is the last one used
        last = np.maximum(last, np.argmax(taken >= need[r], axis=1))
        free -= take[..., None] * demands[r]
    return feasible, last


@dataclass
class PlacementDraft:
    """A placement being built one task at a time: what each waiting job still needs,
    where its tasks went, and the free resources and per-model task counts per server."""

    snap: Snapshot
    jobs: tuple[JobView, ...]
    need: np.ndarray
    """(n_jobs, 2) workers and PSs still to place."""
    placed: list[tuple[list[int], list[int]]]
    free: np.ndarray
    """(n_servers, 3) free resources."""
    tasks: np.ndarray
    """(n_servers, L) tasks per model on each server, running jobs included."""
    allowed: tuple[tuple[np.ndarray | None, np.ndarray | None], ...] = ()
    """Per job, per role: the servers (n_servers,) bool its tasks may use, where the job
    names GPU types and the task uses a GPU (as `tracelib.sim.cluster.FreePool` allows
    them); None (or no entry): any server."""

    @classmethod
    def start(cls, snap: Snapshot, counts: dict[int, tuple[int, int]], window: int):
        """A draft placing `counts` (job id -> workers, PSs) for the first `window` jobs."""
        jobs = tuple(j for j in snap.jobs if j.job_id in counts)[:window]
        need = np.array([counts[j.job_id] for j in jobs], dtype=np.int64).reshape(-1, 2)
        tasks = np.zeros((snap.cluster.n_servers, len(snap.catalogue)))
        for job in snap.fixed_jobs:
            for server in job.placement.workers + job.placement.ps:
                tasks[server, job.type_index] += 1
        free = np.array(snap.cluster.available, dtype=float, copy=True)
        allowed = ()
        types = snap.cluster.gpu_types
        if types is not None and any(j.gpu_types is not None for j in jobs):
            allowed = tuple(
                tuple(
                    None
                    if job.gpu_types is None or demand[0] <= _TOL
                    else np.array([t in job.gpu_types for t in types], dtype=bool)
                    for demand in (job.worker_demand, job.ps_demand)
                )
                for job in jobs
            )
        return cls(snap, jobs, need, [([], []) for _ in jobs], free, tasks, allowed)

    def demand(self, i: int, role: int) -> np.ndarray:
        """(3,) demand of one worker (role 0) or PS (role 1) of job i."""
        job = self.jobs[i]
        return np.asarray(job.worker_demand if role == 0 else job.ps_demand, dtype=float)

    def mask(self, cfg: PlacementObsConfig) -> np.ndarray:
        """(2 * N' * M,) bool: placing job i's next worker/PS on server m is allowed.

        Once a job has a task placed, only that job's tasks are allowed until it is
        complete, and a task may go only where the job's remaining tasks still fit (checked
        by first fit), so a decision never ends with a half-placed job. First fit can miss
        a packing that exists; the mask is conservative, never permissive."""
        out = np.zeros((cfg.window, 2, self.free.shape[0]), dtype=bool)
        # A job's row depends only on the free resources, its demands, what it still needs
        # and the servers it may use: jobs alike (same model and allocation, as most of a
        # queue is) share one count (half the rows of a replay's decisions).
        rows: dict[tuple, np.ndarray] = {}
        for i, role in self._open_rows():
            key = self._row_key(i, role)
            if key not in rows:
                rows[key] = self._completable(i, role)
            out[i, role] = rows[key]
        return out.reshape(-1)

    def candidates(
        self, cfg: PlacementObsConfig
    ) -> tuple[np.ndarray, Callable[[int, int, int], bool]]:
        """`mask` in two parts, for a policy that needs only its best allowed action:
        (2 * N' * M,) bool, where the task fits on the server (a superset of `mask`: its
        rows, without the first-fit check of the job's other tasks), and `allows(i, role,
        server)`, `mask`'s entry of job i's next task of `role` on `server`. Both hold until
        the next `place`. Most of `mask`'s cost is the first-fit counts of entries a greedy
        policy does not pick; with these it counts only those of its best candidates."""
        out = np.zeros((cfg.window, 2, self.free.shape[0]), dtype=bool)  # (N', 2, M)
        fits: dict[tuple, np.ndarray] = {}
        for i, role in self._open_rows():
            allowed = self.allowed[i][role] if self.allowed else None
            demand = self.jobs[i].worker_demand if role == 0 else self.jobs[i].ps_demand
            key = (tuple(demand), None if allowed is None else allowed.tobytes())
            if key not in fits:
                fits[key] = self._fits(i, role)
            out[i, role] = fits[key]
        # Per row shape (`_row_key`): first fit of the row's other tasks, counted when the
        # row is first asked; the whole row once one of its entries is refused (the rows a
        # policy reads past its best candidate, as at a decision's last step, where nothing
        # is allowed and every row is read).
        others: dict[tuple, tuple] = {}
        rows: dict[tuple, np.ndarray] = {}

        def allows(i: int, role: int, server: int) -> bool:
            if not out[i, role, server]:  # the task does not fit there (or the row is closed)
                return False
            key = self._row_key(i, role)
            row = rows.get(key)
            if row is not None:
                return bool(row[server])
            found = others.get(key)
            if found is None:
                found = others[key] = self._others(i, role)
            if self._completes(server, role, found):
                return True
            rows[key] = self._completable(i, role, found)
            return False

        return out.reshape(-1), allows

    def _open_rows(self) -> list[tuple[int, int]]:
        """The (job row, role) rows of the mask that may allow something: once a job has
        a task placed, only its own; else every job's with a task of that role to place."""
        need = self.need.tolist()  # plain ints: read per job and role at every step
        pending = [i for i, (w, p) in enumerate(need) if w or p]
        started = [i for i in pending if self.placed[i][0] or self.placed[i][1]]
        return [(i, role) for i in started or pending for role in (0, 1) if need[i][role] > 0]

    def _row_key(self, i: int, role: int) -> tuple:
        """What job i's mask row of `role` depends on besides the free resources."""
        job = self.jobs[i]
        allowed = self.allowed[i] if self.allowed else (None, None)
        return (
            role,
            tuple(job.worker_demand),
            tuple(job.ps_demand),
            int(self.need[i, 0]),
            int(self.need[i, 1]),
            *(None if a is None else a.tobytes() for a in allowed),
        )

    def _completable(self, i: int, role: int, others: tuple | None = None) -> np.ndarray:
        """(M,) bool: job i's next task of `role` fits on server m and the job's other
        remaining tasks still fit after it, by first fit (workers, then PSs, each on the
        lowest-numbered server with room).

        First fit of identical tasks fills servers in order, server m taking as many as fit
        in it, so the check is counted for every candidate server at once, (C, M) arrays,
        rather than simulated task by task (a 96-server cluster made the task-by-task loop
        most of the time a Harmony decision takes). First fit without the task stops at
        some server; a candidate past it changes no server first fit uses, so it completes
        exactly when first fit without it does: only the candidates up to that server are
        counted one by one (on a cluster of hundreds of servers, a handful). `others`:
        `_others(i, role)`, where already counted."""
        m = self.free.shape[0]
        cand = np.flatnonzero(self._fits(i, role))
        ok = np.zeros(m, dtype=bool)
        if not len(cand):
            return ok
        demands, allowed, need, done, last = others or self._others(i, role)
        if done:
            ok[cand[cand > last]] = True
            cand = cand[cand <= last]
            if not len(cand):
                return ok
        free = np.broadcast_to(self.free, (len(cand), m, 3)).copy()  # (C, M, 3)
        free[np.arange(len(cand)), cand] -= demands[role]
        ok[cand] = _first_fit(free, demands, need, allowed)[0]
        return ok

    def _others(self, i: int, role: int) -> tuple:
        """First fit of job i's remaining tasks but one of `role`, on the free resources:
        (its demands, the servers each role may use, what it places, whether all fit,
        the last server used)."""
        demands = (self.demand(i, 0), self.demand(i, 1))
        allowed = self.allowed[i] if self.allowed else (None, None)
        need = self.need[i].copy()
        need[role] -= 1
        done, last = _first_fit(self.free[None].copy(), demands, need, allowed)
        return demands, allowed, need, bool(done[0]), int(last[0])

    def _completes(self, server: int, role: int, others: tuple) -> bool:
        """`_completable(i, role)[server]` for a server where the task fits (`_fits`), given
        `_others(i, role)`: the same counts for one server (each row of `_first_fit` is
        counted on its own)."""
        demands, allowed, need, done, last = others
        if done and server > last:
            return True
        free = self.free[None].copy()  # (1, M, 3)
        free[0, server] -= demands[role]
        return bool(_first_fit(free, demands, need, allowed)[0][0])

    def _fits(self, i: int, role: int) -> np.ndarray:
        """(M,) bool: one task of job i's `role` fits on the server, of a type it may use."""
        fits = np.all(self.free >= self.demand(i, role) - _TOL, axis=1)
        allowed = self.allowed[i][role] if self.allowed else None
        if allowed is not None:
            fits &= allowed
        return fits

    def place(self, i: int, role: int, server: int) -> None:
        """Put one task; the caller has checked the mask."""
        self.free[server] -= self.demand(i, role)
        self.tasks[server, self.jobs[i].type_index] += 1
        self.need[i, role] -= 1
        self.placed[i][role].append(server)

    def complete(self) -> list[int]:
        """Rows of jobs with every task placed."""
        return [i for i in range(len(self.jobs)) if not self.need[i].any()]


def encode_placement(draft: PlacementDraft, cfg: PlacementObsConfig) -> np.ndarray:
    """Flat float32 observation: (N', L + 6) job rows then (M, 3 + L [+ 2N']) server rows."""
    jobs = np.zeros((cfg.window, len(draft.snap.catalogue) + len(PLACEMENT_SCALARS)), np.float32)
    for i in range(len(draft.jobs)):
        _encode_job(draft, cfg, i, jobs[i])
    servers = _encode_servers(draft, cfg, slice(None))
    return np.concatenate([jobs.reshape(-1), servers.reshape(-1)])


def _encode_job(draft: PlacementDraft, cfg: PlacementObsConfig, i: int, row: np.ndarray) -> None:
    """Job row i (L + 6,) into `row` (zeros or the row's previous encoding)."""
    job = draft.jobs[i]
    n_types = len(draft.snap.catalogue)
    row[job.type_index] = 1.0
    scalars = row[n_types:]
    scalars[0] = min(math.log1p(job.remaining_epochs_est) / math.log1p(cfg.epochs_scale), 1.0)
    scalars[1] = draft.need[i, 0] / job.max_workers
    scalars[2] = draft.need[i, 1] / job.max_workers
    scalars[3] = len(draft.placed[i][0]) / job.max_workers
    scalars[4] = len(draft.placed[i][1]) / job.max_workers
    scalars[5] = 1.0


def _encode_servers(
    draft: PlacementDraft,
    cfg: PlacementObsConfig,
    rows: slice | list[int],
    jobs: Sequence[int] | None = None,
) -> np.ndarray:
    """The server rows `rows` of the observation, (len(rows), 3 + L [+ 2N']) float32: each
    entry from its own server alone, so a few rows encode as they do among all. `jobs`:
    the job rows whose tasks on the servers are counted (None: all; the others' are 0)."""
    cap = draft.snap.cluster.capacity[rows]
    held = draft.free[rows]
    free = np.divide(held, cap, out=np.zeros_like(held), where=cap > 0)
    tasks = np.minimum(draft.tasks[rows] / cfg.tasks_scale, 1.0)
    parts = [np.clip(free, 0.0, 1.0), tasks]
    if cfg.job_placement:
        m = draft.free.shape[0]
        own = np.zeros((len(free), cfg.window, 2))  # (rows, N', worker/PS)
        for i in range(len(draft.placed)) if jobs is None else jobs:
            w_on, p_on = draft.placed[i]
            # Most rows have nothing placed yet; counts are whole numbers, exact as floats.
            if w_on or p_on:
                own[:, i, 0] = _tasks_on(w_on, m, rows)
                own[:, i, 1] = _tasks_on(p_on, m, rows)
                own[:, i] /= draft.jobs[i].max_workers
        parts.append(own.reshape(len(free), -1))
    return np.concatenate(parts, axis=1).astype(np.float32)


def _tasks_on(on: list[int], m: int, rows: slice | list[int]) -> np.ndarray:
    """Of the tasks on servers `on` (one entry per task), how many are on each of `rows`."""
    if isinstance(rows, slice):
        return np.bincount(on, minlength=m)[rows]
    return np.array([on.count(s) for s in rows], dtype=float)  # a few rows: no (M,) count


class PlacementEncoding:
    """`encode_placement` of a draft kept current as its tasks are placed: a task changes
    its job's row and its server's row only, so after `draft.place(i, role, server)`,
    `placed(i, server)` encodes those two again (the same numbers as encoding the whole
    draft anew; a decision on hundreds of servers places tasks one at a time)."""

    def __init__(self, draft: PlacementDraft, cfg: PlacementObsConfig) -> None:
        self.draft, self.cfg = draft, cfg
        self.obs = encode_placement(draft, cfg)
        """The observation, updated in place."""
        width = len(draft.snap.catalogue) + len(PLACEMENT_SCALARS)
        split = cfg.window * width
        self._jobs = self.obs[:split].reshape(cfg.window, width)
        self._servers = self.obs[split:].reshape(draft.free.shape[0], -1)

    def placed(self, i: int, server: int) -> None:
        """Encode job row i and server row `server` again (after a task of job i went
        there)."""
        _encode_job(self.draft, self.cfg, i, self._jobs[i])
        # The server's resources and tasks, and job i's tasks there: the other jobs' counts
        # on it are unchanged.
        row = _encode_servers(self.draft, self.cfg, [server], (i,))[0]
        width = len(row) - (2 * self.cfg.window if self.cfg.job_placement else 0)
        ours = slice(width + 2 * i, width + 2 * i + 2) if self.cfg.job_placement else slice(0)
        self._servers[server, :width] = row[:width]
        self._servers[server, ours] = row[ours]
