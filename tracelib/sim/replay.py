"""Trace replay: a whole production trace, jobs as recorded, on a GPU cluster (pure numpy).

The slot simulator (`tracelib.sim.engine`) re-decides every job's workers and PSs each
interval, which is what DL2, Optimus and Chic decide; at 100,000 jobs it is hours. A
replay asks a different question, the one production-trace simulators ask (Alibaba's PAI
simulator, Helios, Tiresias): with every job keeping the GPUs it asked for and the run time
it recorded, in what order and on which servers would each scheduling rule have run them?

Model:
- A job needs `gpus` GPUs (0: runs at once; below 1: a share of one GPU, several share
  one GPU; above one server's GPUs: whole GPUs gathered across servers, most free first)
  for `duration_s` seconds of running, from `arrival_s` on; a job that names a GPU type
  ("A|B": either) runs only on servers of that type when the servers have types.
- One-server jobs go to the fitting server with the least free GPUs (best fit: keeps whole
  servers free for wide jobs).
- Decisions happen at every arrival and every completion (all events at one instant first).
- A `ReplayRule` says who goes first: `order` ("arrival", "remaining": shortest remaining
  run time, "user-share": the user holding the smallest share of the cluster's GPUs,
  "largest-fit": the widest job that fits, Tetris' alignment with GPUs as the only
  resource), whether a job that does not fit blocks the ones behind it (`backfill`), and
  whether a waiting job may preempt running jobs that rank below it (`preemptive`; a
  preempted job keeps its progress and pays `preempt_cost_s` when it resumes).

Jobs' recorded run times include whatever interference they met on the real cluster, so a
replay adds none. Orders that read `duration_s` (remaining time) read what the trace
recorded, as the slot simulator's SRTF reads the user's epoch estimate.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

ORDERS = ("arrival", "remaining", "user-share", "largest-fit")
_EPS = 1e-9


@dataclass(frozen=True)
class ReplayRule:
    """Who goes first in a replay (see the module doc)."""

    order: str
    backfill: bool = True
    """A job that does not fit lets later ones start (False: strict head-of-line FIFO)."""
    preemptive: bool = False
    """A waiting job may pause running jobs that rank below it (order "remaining" only)."""

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.preemptive and self.order != "remaining":
            raise ValueError("only the 'remaining' order can preempt (ranks must not change)")


@dataclass(frozen=True)
class ReplayCluster:
    """Servers of a replay: `gpus_per_server` GPUs each, optionally a GPU type each."""

    n_servers: int
    gpus_per_server: float = 8.0
    gpu_types: tuple[str, ...] | None = None
    """One GPU type per server (None: one type, and jobs' types are ignored)."""

    def __post_init__(self) -> None:
        if self.n_servers < 1 or self.gpus_per_server <= 0:
            raise ValueError("a replay cluster needs at least one server with GPUs")
        if self.gpu_types is not None and len(self.gpu_types) != self.n_servers:
            raise ValueError("gpu_types needs one entry per server")

    @property
    def total_gpus(self) -> float:
        return self.n_servers * self.gpus_per_server


@dataclass(frozen=True)
class ReplayJobs:
    """Jobs of a replay as columns (all of length n; `users` and `gpu_types` optional)."""

    arrival_s: np.ndarray
    duration_s: np.ndarray
    gpus: np.ndarray
    users: np.ndarray | None = None
    """Integer user index per job (order "user-share"); None: one user."""
    gpu_types: np.ndarray | None = None
    """GPU type per job (object array of str, "" for any); None: any type."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("duration_s", "gpus"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} rows, expected {n}")
        if n and (
            np.any(~np.isfinite(self.arrival_s))
            or np.any(self.arrival_s < 0)
            or np.any(~(self.duration_s > 0))
            or np.any(~(self.gpus >= 0))
        ):
            raise ValueError("arrivals must be >= 0, durations > 0 and GPUs >= 0")

    def __len__(self) -> int:
        return len(self.arrival_s)


@dataclass(frozen=True)
class ReplayResult:
    """Per-job outcome: first start, finish, JCT (finish - arrival), GPU-seconds held,
    preemptions (the columns of `eval_jobs`' times, plus preemptions)."""

    jobs: pl.DataFrame
    """job_index, arrival_s, start_s, finish_s, jct_s, ideal_s, slowdown, gpu_time_s,
    preemptions."""
    events: int


class Unplaceable(ValueError):
    """Some jobs can never run on the cluster (wider than it, or no server of their type)."""


class _Servers:
    """Free GPUs per server and the placement rules (best fit; gather for wide jobs)."""

    def __init__(self, cluster: ReplayCluster) -> None:
        self.g = float(cluster.gpus_per_server)
        self.free = np.full(cluster.n_servers, self.g)
        types = cluster.gpu_types or ("",) * cluster.n_servers
        self.type_mask: dict[str, np.ndarray] = {
            t: np.array([s == t for s in types]) for t in sorted(set(types))
        }
        self.typed = cluster.gpu_types is not None

    def _candidates(self, gpu_type: str) -> np.ndarray | None:
        """Servers a job of `gpu_type` may use ("A|B": either type); None: any."""
        if not self.typed or not gpu_type:
            return None
        mask = np.zeros(len(self.free), dtype=bool)
        for one in gpu_type.split("|"):
            if one in self.type_mask:
                mask |= self.type_mask[one]
        return mask

    def capacity(self, gpu_type: str) -> float:
        """GPUs of the servers a job of this type may use."""
        mask = self._candidates(gpu_type)
        return self.g * (len(self.free) if mask is None else int(mask.sum()))

    def plan(
        self, need: float, gpu_type: str, free: np.ndarray | None = None
    ) -> list[tuple[int, float]] | None:
        """Where `need` GPUs would go given `free` (default: now): [(server, GPUs)], or
        None if they do not fit."""
        mask = self._candidates(gpu_type)
        free = self.free if free is None else free
        if mask is not None:
            free = np.where(mask, free, -1.0)
        if need <= self.g + _EPS:
            # Best fit: the fitting server with the least free GPUs (first such on ties).
            fits = free >= need - _EPS
            if not fits.any():
                return None
            return [(int(np.argmin(np.where(fits, free, np.inf))), need)]
        whole = np.floor(np.maximum(free, 0.0) + _EPS)
        if whole.sum() < need - _EPS:
            return None
        # Wide jobs gather whole GPUs, emptiest servers first (fewest servers spanned).
        taken: list[tuple[int, float]] = []
        left = need
        for server in np.argsort(-whole, kind="stable"):
            if left <= _EPS:
                break
            take = float(min(whole[server], math.ceil(left - _EPS)))
            if take <= 0:
                break
            taken.append((int(server), take))
            left -= take
        return taken

    def place(self, need: float, gpu_type: str) -> list[tuple[int, float]] | None:
        """Take `need` GPUs now; returns [(server, GPUs)] or None if they are not free."""
        taken = self.plan(need, gpu_type)
        if taken is not None:
            for server, amount in taken:
                self.free[server] -= amount
        return taken

    def release(self, taken: list[tuple[int, float]]) -> None:
        for server, amount in taken:
            self.free[server] += amount


def replay(
    jobs: ReplayJobs,
    cluster: ReplayCluster,
    rule: ReplayRule,
    *,
    preempt_cost_s: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Replay `jobs` on `cluster` under `rule`; every job runs to completion.

    Raises Unplaceable when a job can never run (it needs more GPUs than the servers of its
    type have). `progress(finished, total)` is called every 2,000 completions."""
    n = len(jobs)
    arrival = np.asarray(jobs.arrival_s, dtype=float)
    duration = np.asarray(jobs.duration_s, dtype=float)
    gpus = np.asarray(jobs.gpus, dtype=float)
    users = np.zeros(n, dtype=np.int64) if jobs.users is None else np.asarray(jobs.users)
    types = [""] * n if jobs.gpu_types is None else [str(t or "") for t in jobs.gpu_types]
    servers = _Servers(cluster)
    too_big = [i for i in range(n) if gpus[i] > servers.capacity(types[i]) + _EPS]
    if too_big:
        i = too_big[0]
        raise Unplaceable(
            f"{len(too_big)} job(s) can never run on this cluster, e.g. job {i} needs "
            f"{gpus[i]:g} GPUs{f' of type {types[i]}' if types[i] else ''} "
            f"(the cluster has {servers.capacity(types[i]):g})"
        )

    done = np.zeros(n)  # seconds of running completed before the current stint
    start = np.full(n, np.nan)  # first start
    finish = np.full(n, np.nan)
    stint = np.zeros(n)  # when the current stint began
    resume_extra = np.zeros(n)  # preemption cost owed by the current stint
    preemptions = np.zeros(n, dtype=np.int64)
    held = np.zeros(n)  # seconds holding GPUs, restarts included
    version = np.zeros(n, dtype=np.int64)  # invalidates a preempted job's finish event
    placed: dict[int, list[tuple[int, float]]] = {}
    user_gpus = np.zeros(int(users.max()) + 1 if n else 1)
    total = cluster.total_gpus

    # Waiting jobs in one heap per (GPU demand, GPU type) class: the classes are few (GPU
    # counts are 1, 2, 4, 8, ...), so each decision compares class heads, not the queue.
    classes: dict[tuple[float, str], list[tuple]] = {}
    by_user: dict[int, list[tuple]] = {}

    def rank(i: int) -> tuple:
        if rule.order == "remaining":
            return (duration[i] - done[i], arrival[i], i)
        return (arrival[i], i)

    def enqueue(i: int) -> None:
        if rule.order == "user-share":
            heapq.heappush(by_user.setdefault(int(users[i]), []), (arrival[i], i))
        else:
            heapq.heappush(classes.setdefault((gpus[i], types[i]), []), rank(i))

    # Running jobs by finish time, latest first (= longest remaining: every running job's
    # remaining time shrinks at the same rate), for preemption.
    running_heap: list[tuple[float, int, int]] = []  # (-planned finish, job, version)
    events: list[tuple[float, int, int, int]] = []  # (time, kind 0=finish 1=arrive, job, ver)
    for i in np.argsort(arrival, kind="stable"):
        events.append((arrival[i], 1, int(i), 0))
    heapq.heapify(events)
    finished = 0
    n_events = 0

    def begin(i: int, now: float, taken: list[tuple[int, float]]) -> None:
        placed[i] = taken
        user_gpus[users[i]] += gpus[i]
        if math.isnan(start[i]):
            start[i] = now
        stint[i] = now
        end = now + resume_extra[i] + duration[i] - done[i]
        heapq.heappush(events, (end, 0, i, int(version[i])))
        if rule.preemptive:
            heapq.heappush(running_heap, (-end, i, int(version[i])))

    def stop(i: int, now: float) -> None:
        servers.release(placed.pop(i))
        held[i] += now - stint[i]
        user_gpus[users[i]] -= gpus[i]

    def preempt(i: int, now: float) -> None:
        stop(i, now)
        done[i] += max(0.0, now - stint[i] - resume_extra[i])
        resume_extra[i] = preempt_cost_s
        preemptions[i] += 1
        version[i] += 1
        enqueue(i)

    def try_start(i: int, now: float) -> bool:
        taken = servers.place(gpus[i], types[i])
        if taken is None:
            return False
        begin(i, now, taken)
        return True

    def schedule(now: float) -> None:
        if rule.order == "user-share":
            _schedule_users(now)
            return
        blocked: set[tuple[float, str]] = set()
        while True:
            heads = [(q[0], key) for key, q in classes.items() if q and key not in blocked]
            if not heads:
                return
            if rule.order == "largest-fit":
                # Tetris: the widest waiting job that fits now (earliest among equals).
                head, key = max(heads, key=lambda h: (h[1][0], (-h[0][0], -h[0][1])))
            else:
                head, key = min(heads)
            i = head[-1]
            # Off the queue first: a preemption below puts its victims back in the queues.
            heapq.heappop(classes[key])
            if try_start(i, now) or (rule.preemptive and _preempt_for(i, now)):
                continue
            heapq.heappush(classes[key], head)
            if not rule.backfill:
                return
            blocked.add(key)

    def _preempt_for(i: int, now: float) -> bool:
        """Pause the fewest running jobs ranked below job i (longest remaining first) that
        make room for it, and start it; False (nothing paused) if no such set exists."""
        mine = duration[i] - done[i]
        popped: list[tuple[float, int, int]] = []
        trial = servers.free.copy()
        fits = False
        while running_heap and not fits:
            neg_end, j, ver = running_heap[0]
            if ver != version[j] or j not in placed:
                heapq.heappop(running_heap)
                continue
            # Work left, not time to finish: a job resuming still owes its restart, and
            # counting that would let two jobs preempt each other back and forth.
            if min(-neg_end - now, duration[j] - done[j]) <= mine + _EPS:
                break
            popped.append(heapq.heappop(running_heap))
            for server, amount in placed[j]:
                trial[server] += amount
            fits = servers.plan(gpus[i], types[i], trial) is not None
        if not fits:
            for entry in popped:
                heapq.heappush(running_heap, entry)
            return False
        for _, j, _ in popped:
            preempt(j, now)
        return try_start(i, now)

    def _schedule_users(now: float) -> None:
        # DRF with GPUs as the dominant resource: the user with the smallest share first,
        # each user's jobs in arrival order; a user whose head does not fit waits this round.
        blocked: set[int] = set()
        while True:
            ready = [u for u, q in by_user.items() if q and u not in blocked]
            if not ready:
                return
            u = min(ready, key=lambda u: (user_gpus[u] / total, by_user[u][0]))
            i = by_user[u][0][1]
            if try_start(i, now):
                heapq.heappop(by_user[u])
            elif not rule.backfill:
                return
            else:
                blocked.add(u)

    while events:
        now = events[0][0]
        # Every event of this instant first, then one decision.
        while events and events[0][0] <= now:
            _, kind, i, ver = heapq.heappop(events)
            n_events += 1
            if kind == 1:
                if gpus[i] <= 0:
                    # No GPU asked: runs at once (the replay tracks GPUs only).
                    start[i] = stint[i] = now
                    heapq.heappush(events, (now + duration[i], 0, i, int(version[i])))
                    placed[i] = []
                    continue
                enqueue(i)
            elif ver == version[i] and i in placed:
                stop(i, now)
                finish[i] = now
                finished += 1
                if progress is not None and finished % 2000 == 0:
                    progress(finished, n)
        schedule(now)
    if progress is not None:
        progress(finished, n)
    if np.isnan(finish).any():
        raise RuntimeError("replay ended with unfinished jobs (a bug: report it)")
    jct = finish - arrival
    frame = pl.DataFrame(
        {
            "job_index": np.arange(n, dtype=np.int32),
            "arrival_s": arrival,
            "start_s": start,
            "finish_s": finish,
            "jct_s": jct,
            "ideal_s": duration,
            "slowdown": jct / duration,
            "gpu_time_s": gpus * held,
            "preemptions": preemptions,
        }
    )
    return ReplayResult(frame, n_events)
