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
  servers free for wide jobs), or, under `placement="fgd"`, where the server's expected GPU
  fragmentation grows least, or "gpu-best-fit", best fit GPU by GPU (`_GpuServers`).
- Decisions happen at every arrival and every completion (all events at one instant first).
- A `ReplayRule` says who goes first: `order` ("arrival", "remaining": shortest remaining
  run time, "user-share": the user holding the smallest share of the cluster's GPUs,
  "largest-fit": the widest job that fits, Tetris' alignment with GPUs as the only
  resource), whether a job that does not fit blocks the ones behind it (`backfill`), and
  whether a waiting job may preempt running jobs that rank below it (`preemptive`; a
  preempted job keeps its progress and pays `preempt_cost_s` when it resumes). Orders "las"
  and "gittins" are Tiresias' (`ReplayRule` says how they rank).

Jobs' recorded run times include whatever interference they met on the real cluster, so a
replay adds none. Orders that read `duration_s` (remaining time) read what the trace
recorded, as the slot simulator's SRTF reads the user's epoch estimate.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import polars as pl

ORDERS = ("arrival", "remaining", "user-share", "largest-fit", "las", "gittins")
TIRESIAS_ORDERS = ("las", "gittins")
"""Orders whose ranks change while jobs run (attained service), Tiresias' two schedulers."""
PLACEMENTS = ("best-fit", "fgd", "gpu-best-fit")
GPU_PLACEMENTS = ("fgd", "gpu-best-fit")
"""Placements that track each GPU's free share (`_GpuServers`)."""
_EPS = 1e-9
_GITTINS_POINTS = 2000
"""Most attained-service points the Gittins index is tabulated at (quantiles of the
recorded services beyond that: the table costs points x jobs to build)."""


@dataclass(frozen=True)
class ReplayRule:
    """Who goes first in a replay, and where (see the module doc).

    Orders "las" and "gittins" are Tiresias' discretized 2D schedulers (Gu et al., NSDI'19,
    the 2DAS scheduler; parameters as its released simulator, SymbioticLab/Tiresias
    `simulator/run_sim.py`, sets them): a job's attained service is GPUs x seconds it has
    run (progress only: a resume's restart time is not service), counted since it last
    entered the highest queue. `thresholds_gpu_s` split attained service into len + 1 queues
    (a job moves down when its service crosses the next threshold); a higher queue always
    ranks first. Within a queue, "las" is FIFO by submit time and a waiting job never
    preempts a running job of its own queue (the released simulator keeps running jobs ahead
    of waiting ones in each queue); "gittins" ranks by the Gittins index of the job's
    attained service (highest first, then submit time) and preempts a running job of its
    queue only for a strictly higher index. `promote_knob` is Tiresias' PROMOTEKNOB
    (starvation avoidance).
    """

    order: str
    backfill: bool = True
    """A job that does not fit lets later ones start (False: strict head-of-line FIFO)."""
    preemptive: bool = False
    """A waiting job may pause running jobs that rank below it (orders "remaining", "las",
    "gittins")."""
    placement: str = "best-fit"
    """Where a one-server job goes: "best-fit" (the fitting server with the least free GPUs)
    "fgd" (Weng et al., ATC'23: the server whose expected fragmentation grows least) or
    "gpu-best-fit" (best fit with GPUs tracked one by one, FGD's best-fit baseline); the
    last two for non-preemptive orders only."""
    thresholds_gpu_s: tuple[float, ...] = (3600.0,)
    """Tiresias' queue thresholds in GPU-seconds of attained service (ascending): one
    threshold, two queues, as the paper's evaluation uses (K = 2). The default, 1 GPU-hour,
    is the released simulator's example threshold (3,600 s; its job files use 3,250): it
    sends a one-GPU job to the low queue after an hour, an 8-GPU one after 7.5 minutes."""
    promote_knob: float | None = 8.0
    """Tiresias' PROMOTEKNOB: a job below the highest queue that has waited (since it last
    entered the highest queue, counted once it has run) `promote_knob` times as long as it
    has run over the same span goes back to the highest queue with its attained service
    reset, as the released simulator does (`dlas_sim_jobs(solve_starvation=...)`). 8 is
    the largest knob that simulator's runs sweep (1, 2, 4, 8): it bounds a job's wait while
    leaving the LAS order alone for all but the longest waits. None: no promotion."""

    def __post_init__(self) -> None:
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {ORDERS}, got {self.order!r}")
        if self.preemptive and self.order not in ("remaining", *TIRESIAS_ORDERS):
            raise ValueError(
                "only the 'remaining' order and Tiresias' 'las' and 'gittins' can preempt "
                "(other ranks ignore how far a job has run)"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.placement in GPU_PLACEMENTS and self.preemptive:
            # A preemption frees GPUs on paper before it picks them; these pick single GPUs.
            raise ValueError(f"placement {self.placement!r} places for non-preemptive orders only")
        t = self.thresholds_gpu_s
        if not t or any(not (b > a) for a, b in zip((0.0, *t), t, strict=False)):
            raise ValueError("thresholds_gpu_s must be positive and ascending")
        if self.promote_knob is not None and not self.promote_knob > 0:
            raise ValueError("promote_knob must be positive (None: no promotion)")


@dataclass(frozen=True)
class ReplayCluster:
    """Servers of a replay: `gpus_per_server` GPUs each (or `server_gpus`), optionally a
    GPU type, CPU cores and memory each."""

    n_servers: int
    gpus_per_server: float = 8.0
    """GPUs of every server; with `server_gpus`, the most any server has."""
    gpu_types: tuple[str, ...] | None = None
    """One GPU type per server (None: one type, and jobs' types are ignored)."""
    server_gpus: tuple[float, ...] | None = None
    """GPUs of each server (a node list's servers differ); None: `gpus_per_server` each."""
    server_cpus: tuple[float, ...] | None = None
    """CPU cores of each server; None: CPU is no constraint."""
    server_mem_gb: tuple[float, ...] | None = None
    """Memory (GB) of each server; None: memory is no constraint."""

    def __post_init__(self) -> None:
        if self.n_servers < 1 or self.gpus_per_server <= 0:
            raise ValueError("a replay cluster needs at least one server with GPUs")
        for name in ("gpu_types", "server_gpus", "server_cpus", "server_mem_gb"):
            value = getattr(self, name)
            if value is not None and len(value) != self.n_servers:
                raise ValueError(f"{name} needs one entry per server")
        for name in ("server_gpus", "server_cpus", "server_mem_gb"):
            value = getattr(self, name)
            if value is not None and not all(math.isfinite(v) and v >= 0 for v in value):
                raise ValueError(f"{name} must be finite and non-negative")
        if self.server_gpus is not None and (
            not any(v > 0 for v in self.server_gpus)
            or abs(max(self.server_gpus) - self.gpus_per_server) > _EPS
        ):
            raise ValueError("server_gpus needs a server with GPUs; gpus_per_server its most")

    @property
    def total_gpus(self) -> float:
        if self.server_gpus is not None:
            return float(sum(self.server_gpus))
        return self.n_servers * self.gpus_per_server

    def extras(self) -> dict:
        """The per-server fields that are set (for a config record that stays as it was
        for a homogeneous cluster)."""
        return {
            k: getattr(self, k)
            for k in ("server_gpus", "server_cpus", "server_mem_gb")
            if getattr(self, k) is not None
        }


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
    cpus: np.ndarray | None = None
    """CPU cores per job (checked against servers with `server_cpus`); None: none."""
    mem_gb: np.ndarray | None = None
    """Memory (GB) per job (checked against servers with `server_mem_gb`); None: none."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        for name in ("cpus", "mem_gb"):
            value = getattr(self, name)
            if value is not None and (len(value) != n or np.any(~(np.asarray(value) >= 0))):
                raise ValueError(f"{name} needs {n} non-negative values")
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
    """Free GPUs per server and the placement rules (best fit; gather for wide jobs).

    With servers' CPU and memory given (and jobs' demands), a job goes only where its CPU
    and memory fit too; a job wider than one server takes them from each server in
    proportion to the GPUs it takes there. Planning a preemption (`free` given) counts GPUs
    alone: the start that follows checks CPU and memory."""

    def __init__(self, cluster: ReplayCluster, jobs: ReplayJobs | None = None) -> None:
        self.g = float(cluster.gpus_per_server)
        self.sized = cluster.server_gpus is not None
        self.size = (
            np.asarray(cluster.server_gpus, dtype=float)
            if self.sized
            else np.full(cluster.n_servers, self.g)
        )
        self.free = self.size.copy()
        types = cluster.gpu_types or ("",) * cluster.n_servers
        self.type_mask: dict[str, np.ndarray] = {
            t: np.array([s == t for s in types]) for t in sorted(set(types))
        }
        self.typed = cluster.gpu_types is not None
        # Each constrained resource: (free per server, demand per job).
        self.other: list[tuple[np.ndarray, np.ndarray]] = []
        for have, want in (
            (cluster.server_cpus, None if jobs is None else jobs.cpus),
            (cluster.server_mem_gb, None if jobs is None else jobs.mem_gb),
        ):
            if have is not None and want is not None:
                self.other.append((np.asarray(have, dtype=float), np.asarray(want, dtype=float)))
        self.full = [(free.copy(), want) for free, want in self.other]
        # `may_fit`'s bounds and the free total, kept until the next place or release.
        self._most: float | None = None
        self._whole: float | None = None
        self._total: float | None = None

    def may_fit(self, need: float) -> bool:
        """False when `need` GPUs fit nowhere now, whatever the job's type, CPU and memory
        (the most free GPUs on one server for a narrow job, the whole free GPUs of all
        servers for a wide one): most waiting jobs on a busy cluster are turned away
        here, without a placement."""
        bound = self.most_free() if need <= self.g + _EPS else self.whole_free()
        return need <= bound + _EPS

    def most_free(self) -> float:
        """The most free GPUs on one server (what `may_fit` allows a narrow job)."""
        if self._most is None:
            self._most = float(self.free.max())
        return self._most

    def whole_free(self) -> float:
        """The whole free GPUs of all servers (what `may_fit` allows a wide job); computed
        only when a wide job asks, which most decisions never do."""
        if self._whole is None:
            self._whole = float(np.floor(np.maximum(self.free, 0.0) + _EPS).sum())
        return self._whole

    def _changed(self) -> None:
        """Free GPUs moved: the kept bounds and total are read afresh."""
        self._most = self._whole = self._total = None

    def free_total(self) -> float:
        """Free GPUs of all servers."""
        if self._total is None:
            self._total = float(self.free.sum())
        return self._total

    def _candidates(self, gpu_type: str) -> np.ndarray | None:
        """Servers a job of `gpu_type` may use ("A|B": either type); None: any."""
        if not self.typed or not gpu_type:
            return None
        mask = np.zeros(len(self.free), dtype=bool)
        for one in gpu_type.split("|"):
            if one in self.type_mask:
                mask |= self.type_mask[one]
        return mask

    def _room(self, need: float, job: int | None) -> np.ndarray | None:
        """Servers with the CPU and memory job `job` needs for `need` GPUs on one server
        (for a wider job, one GPU's part of them); None: no constraint."""
        if job is None or not self.other:
            return None
        part = 1.0 if need <= self.g + _EPS else 1.0 / need
        ok = np.ones(len(self.free), dtype=bool)
        for free, want in self.other:
            ok &= free >= want[job] * part - _EPS
        return ok

    def short_of(self, need: float, gpu_type: str, job: int) -> str | None:
        """The resource ("CPU", "memory") no server of the job's type has enough of even
        when empty; None if some server could take it."""
        mask = self._candidates(gpu_type)
        part = 1.0 if need <= self.g + _EPS else 1.0 / need
        for name, (have, want) in zip(("CPU", "memory"), self.full, strict=False):
            room = have >= want[job] * part - _EPS
            if not (room if mask is None else room & mask).any():
                return name
        return None

    def capacity(self, gpu_type: str) -> float:
        """GPUs of the servers a job of this type may use."""
        mask = self._candidates(gpu_type)
        if self.sized:
            return float(self.size.sum() if mask is None else self.size[mask].sum())
        return self.g * (len(self.free) if mask is None else int(mask.sum()))

    def plan(
        self,
        need: float,
        gpu_type: str,
        free: np.ndarray | None = None,
        job: int | None = None,
    ) -> list[tuple[int, float]] | None:
        """Where `need` GPUs would go given `free` (default: now): [(server, GPUs)], or
        None if they do not fit."""
        mask = self._candidates(gpu_type)
        room = self._room(need, job) if free is None else None
        free = self.free if free is None else free
        if room is not None:
            mask = room if mask is None else mask & room
        if mask is not None:
            free = np.where(mask, free, -1.0)
        if need <= self.g + _EPS:
            # Best fit: the fitting server with the least free GPUs (first such on ties);
            # none fits where even the least is the infinity standing for "no room".
            room_left = np.where(free >= need - _EPS, free, np.inf)
            best = int(room_left.argmin())
            if room_left[best] == np.inf:
                return None
            return [(best, need)]
        whole = np.floor(np.maximum(free, 0.0) + _EPS)
        if room is not None:
            # No more GPUs on a server than its CPU and memory carry.
            for have, want in self.other:
                if want[job] > 0:
                    whole = np.minimum(whole, np.floor(have / (want[job] / need) + _EPS))
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

    def place(
        self, need: float, gpu_type: str, job: int | None = None
    ) -> list[tuple[int, float]] | None:
        """Take `need` GPUs now (and job `job`'s CPU and memory where they go); returns
        [(server, GPUs)] or None if they are not free."""
        taken = self.plan(need, gpu_type, job=job)
        if taken is not None:
            for server, amount in taken:
                self.free[server] -= amount
            self._changed()
            self._hold(taken, job, -1.0)
        return taken

    def release(self, taken: list[tuple[int, float]], job: int | None = None) -> None:
        """Give back what `place(..., job)` took."""
        for server, amount in taken:
            self.free[server] += amount
        self._changed()
        self._hold(taken, job, 1.0)

    def _hold(self, taken, job: int | None, sign: float) -> None:
        if job is None or not self.other:
            return
        total = sum(t[1] for t in taken)
        for free, want in self.other:
            for server, amount, *_ in taken:
                free[server] += sign * want[job] * (amount / total if total > 0 else 1.0)


def gittins_index(services: np.ndarray, attained: float) -> float:
    """Gittins index of a job that has received `attained` service, job sizes drawn from the
    empirical distribution `services` (Tiresias' 2D-Gittins index):

        G(a) = sup over D > 0 of P(S - a <= D | S > a) / E[min(S - a, D) | S > a].

    Over an empirical distribution the numerator steps up only at the samples and the
    denominator grows between them, so the supremum is reached at D = s - a for a sample
    s > a: with the m samples above a sorted, t_1 <= ... <= t_m, the index is the largest
    k / (sum_{l<=k} (t_l - a) + (m - k) (t_k - a)). 0 when no sample exceeds a (nothing
    says the job will ever end)."""
    s = np.sort(np.asarray(services, dtype=float))
    tail = s[s > attained + _EPS] - attained
    if tail.size == 0:
        return 0.0
    k = np.arange(1, tail.size + 1)
    spent = np.cumsum(tail) + (tail.size - k) * tail
    return float(np.max(k / spent))


class GittinsTable:
    """The Gittins index of any attained service, from a table over the recorded services.

    Between two neighbouring recorded sizes p < q the survivors are fixed, and 1 / G(a) is
    the least of lines in a (one per candidate quantum), so concave, reaching 0 as a nears
    q (the job may end at q). The table holds 1 / G at 0 and at each distinct size (thinned
    to `_GITTINS_POINTS` sizes on large traces) and a lookup draws the chord to 0 at q:
    exact when the best quantum at p is "up to q" (the line itself), an upper bound of the
    index otherwise. Beyond the largest size the index is 0."""

    def __init__(self, services: np.ndarray) -> None:
        services = np.asarray(services, dtype=float)
        values = np.unique(services)
        if values.size > _GITTINS_POINTS:
            grid = np.linspace(0, 1, _GITTINS_POINTS)
            values = np.unique(np.quantile(values, grid, method="nearest"))
        self.points = np.unique(np.concatenate([[0.0], values]))
        index = np.array([gittins_index(services, a) for a in self.points[:-1]])
        self.inverse = 1.0 / index
        self._points, self._inverse = self.points.tolist(), self.inverse.tolist()

    def __call__(self, attained: np.ndarray | float) -> np.ndarray:
        a = np.asarray(attained, dtype=float)
        k = np.searchsorted(self.points, a + _EPS, side="right") - 1
        inside = k < len(self.inverse)
        k = np.minimum(k, len(self.inverse) - 1)
        lo, hi = self.points[k], self.points[k + 1]
        inverse = self.inverse[k] * (hi - a) / (hi - lo)
        with np.errstate(divide="ignore"):
            return np.where(inside, 1.0 / np.maximum(inverse, _EPS), 0.0)

    def at(self, attained: float) -> float:
        """The index of one attained service (as `__call__`, without array overhead: a
        waiting job's rank is read once per queue entry)."""
        points = self._points
        k = bisect.bisect_right(points, attained + _EPS) - 1
        if k >= len(self._inverse):
            return 0.0
        lo, hi = points[k], points[k + 1]
        return 1.0 / max(self._inverse[k] * (hi - attained) / (hi - lo), _EPS)


class _GpuServers(_Servers):
    """GPUs tracked one by one (a share of one GPU below 1), placed by Fragmentation
    Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
    Workloads with Fragmentation Gradient Descent", ATC'23): a node's fragmentation
    for a request is its free GPU capacity that request could not use; the node's expected
    fragmentation weighs that over the workload's mix of requests; a job goes where (node,
    and GPU for a share) that expectation grows least (ties: the node with the least free
    GPUs, the GPU with the least free share, then the lowest indices). With
    `objective="gpu-best-fit"` the node with the least free GPUs goes first (FGD's best-fit
    baseline under the same GPU-by-GPU bookkeeping, so the two compare placement alone:
    `_Servers`' best fit counts a node's free GPUs as one pool, which lets two halves of
    different GPUs host a whole-GPU job).

    What a request cannot use on a node (the paper's task-level fragmentation): a share d
    below 1 cannot use a GPU with less than d free; k whole GPUs cannot use partly taken GPUs, nor
    anything when fewer than k GPUs are wholly free. A request wider than a server gathers
    wholly free GPUs across servers (as best fit does), so on one node it too can use only
    whole free GPUs. A request above 1 GPU takes whole GPUs (1.5 -> 2: a GPU is shared only
    by shares). The mix is the replayed jobs' requested GPUs weighted by how many jobs ask
    for each (the paper's task popularity from the trace itself), GPU-less jobs left out."""

    def __init__(
        self,
        cluster: ReplayCluster,
        requests: np.ndarray,
        objective: str = "fgd",
        jobs: ReplayJobs | None = None,
    ) -> None:
        super().__init__(cluster, jobs)
        self.objective = objective
        per = round(self.g)
        if np.any(np.abs(self.size - np.round(self.size)) > _EPS):
            raise ValueError(f"placement {objective!r} needs a whole number of GPUs per server")
        # A server with fewer GPUs than the most has the rest as GPUs with nothing free.
        self.gpu = (np.arange(per) < np.round(self.size)[:, None]).astype(float)
        asked = np.asarray(requests, dtype=float)
        asked = np.where(asked < 1.0, asked, np.ceil(asked - _EPS))
        values, counts = np.unique(asked[asked > 0], return_counts=True)
        self.mix = list(zip(values.tolist(), (counts / max(counts.sum(), 1)).tolist(), strict=True))

    def fragmentation(self, rows: np.ndarray) -> np.ndarray:
        """Expected fragmentation of each node of `rows` (free share per GPU, one row per
        node) against the workload's request mix."""
        total = rows.sum(axis=-1)
        whole = rows >= 1.0 - _EPS
        n_whole = whole.sum(axis=-1)
        partial = total - n_whole
        out = np.zeros(rows.shape[:-1])
        for d, p in self.mix:
            if d < 1.0:
                out += p * np.where(rows < d - _EPS, rows, 0.0).sum(axis=-1)
            elif d > rows.shape[-1]:
                out += p * partial
            else:
                out += p * np.where(n_whole < d - _EPS, total, partial)
        return out

    def plan(self, need, gpu_type, free=None, job=None):
        if free is not None:
            raise ValueError("GPU-by-GPU placement plans with the servers' current state only")
        mask = self._candidates(gpu_type)
        room = self._room(need, job)
        if room is not None:
            mask = room if mask is None else mask & room
        nodes = np.arange(len(self.free)) if mask is None else np.flatnonzero(mask)
        rows = self.gpu[nodes]
        per = rows.shape[1]
        if need < 1.0:
            fit_node, fit_gpu = np.nonzero(rows >= need - _EPS)
            if fit_node.size == 0:
                return None
            after = rows[fit_node].copy()
            after[np.arange(fit_node.size), fit_gpu] -= need
            grow = self._growth(after, rows[fit_node])
            share = rows[fit_node, fit_gpu]
            order = np.lexsort(
                (fit_gpu, nodes[fit_node], share, self.free[nodes[fit_node]], np.round(grow, 9))
            )
            best = order[0]
            return [(int(nodes[fit_node[best]]), need, (int(fit_gpu[best]),))]
        k = math.ceil(need - _EPS)
        whole = rows >= 1.0 - _EPS
        if k > per:
            # Wide: wholly free GPUs, emptiest servers first (fewest servers spanned).
            counts = whole.sum(axis=1)
            if counts.sum() < k:
                return None
            taken, left = [], k
            for j in np.argsort(-counts, kind="stable"):
                if left <= 0 or counts[j] == 0:
                    break
                idx = np.flatnonzero(whole[j])[: min(left, counts[j])]
                taken.append((int(nodes[j]), float(idx.size), tuple(idx.tolist())))
                left -= idx.size
            return taken
        fits = np.flatnonzero(whole.sum(axis=1) >= k)
        if fits.size == 0:
            return None
        # All wholly free GPUs of a node are alike: take its first k.
        take = whole[fits] & (np.cumsum(whole[fits], axis=1) <= k)
        after = np.where(take, 0.0, rows[fits])
        grow = self._growth(after, rows[fits])
        best = np.lexsort((nodes[fits], self.free[nodes[fits]], np.round(grow, 9)))[0]
        return [(int(nodes[fits[best]]), float(k), tuple(np.flatnonzero(take[best]).tolist()))]

    def _growth(self, after: np.ndarray, before: np.ndarray) -> np.ndarray:
        """How much each candidate adds to its node's expected fragmentation (0 for all
        under best fit, whose order is the free GPUs alone)."""
        if self.objective != "fgd":
            return np.zeros(len(after))
        return self.fragmentation(after) - self.fragmentation(before)

    def place(self, need, gpu_type, job=None):
        taken = self.plan(need, gpu_type, job=job)
        if taken is not None:
            self._apply(taken, -1.0)
            self._hold(taken, job, -1.0)
        return taken

    def release(self, taken, job=None) -> None:
        self._apply(taken, 1.0)
        self._hold(taken, job, 1.0)

    def _apply(self, taken, sign: float) -> None:
        for server, amount, gpus in taken:
            # A share moves one GPU by its amount; whole GPUs move by one each.
            step = amount if amount < 1.0 else 1.0
            self.gpu[server, list(gpus)] = np.round(self.gpu[server, list(gpus)] + sign * step, 9)
            self.free[server] = float(self.gpu[server].sum())
        self._changed()


def replay(
    jobs: ReplayJobs,
    cluster: ReplayCluster,
    rule: ReplayRule,
    *,
    preempt_cost_s: float = 0.0,
    progress: Callable[[int, int], None] | None = None,
    skip_settled: bool = True,
) -> ReplayResult:
    """Replay `jobs` on `cluster` under `rule`; every job runs to completion.

    Raises Unplaceable when a job can never run (it needs more GPUs than the servers of its
    type have). `progress(finished, total)` is called every 2,000 completions.
    `skip_settled=False` decides at every event instant, even where nothing a decision
    depends on changed since the last one, and lets every waiting head look for room by
    preemption (the same result, slower: a reference).

    What a rule learns from the trace is learned from `jobs` themselves, as an operator
    learns it from past jobs: "gittins" the distribution of service (GPUs x recorded run
    time of every job with GPUs), "fgd" the mix of requested GPUs. Neither reads a job's
    own run time to rank that job."""
    n = len(jobs)
    arrival = np.asarray(jobs.arrival_s, dtype=float)
    duration = np.asarray(jobs.duration_s, dtype=float)
    gpus = np.asarray(jobs.gpus, dtype=float)
    users = np.zeros(n, dtype=np.int64) if jobs.users is None else np.asarray(jobs.users)
    types = [""] * n if jobs.gpu_types is None else [str(t or "") for t in jobs.gpu_types]
    servers = (
        _GpuServers(cluster, gpus, rule.placement, jobs)
        if rule.placement in GPU_PLACEMENTS
        else _Servers(cluster, jobs)
    )
    too_big = [i for i in range(n) if gpus[i] > servers.capacity(types[i]) + _EPS]
    if too_big:
        i = too_big[0]
        raise Unplaceable(
            f"{len(too_big)} job(s) can never run on this cluster, e.g. job {i} needs "
            f"{gpus[i]:g} GPUs{f' of type {types[i]}' if types[i] else ''} "
            f"(the cluster has {servers.capacity(types[i]):g})"
        )
    short = [(i, r) for i in range(n) if (r := servers.short_of(gpus[i], types[i], i))]
    if short:
        i, resource = short[0]
        raise Unplaceable(
            f"{len(short)} job(s) can never run on this cluster, e.g. job {i}: no server"
            f"{f' of type {types[i]}' if types[i] else ''} has the {resource} it needs"
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

    # Tiresias' state: queue, attained GPU-seconds and run seconds since the job last
    # entered the highest queue (at the start of its current stint), the waiting it has
    # done since then, and a version that invalidates a stale queue-change event.
    tiresias = rule.order in TIRESIAS_ORDERS
    thresholds = np.asarray(rule.thresholds_gpu_s, dtype=float)
    lowest = len(thresholds)
    queue = np.zeros(n, dtype=np.int64)
    attained = np.zeros(n)
    ran = np.zeros(n)
    waited = np.zeros(n)
    wait_since = arrival.copy()
    qversion = np.zeros(n, dtype=np.int64)
    queued: dict[int, tuple] = {}  # a waiting job's current rank; other heap entries are stale
    # Running jobs (with GPUs) and the GPUs they hold, per queue: LAS turns most waiting
    # heads away on these alone, without ranking the running jobs.
    in_queue = [0] * (lowest + 1)
    held_in_queue = [0.0] * (lowest + 1)
    held_on = np.zeros((lowest + 1, cluster.n_servers))  # the same per server
    running_jobs: set[int] = set()  # the same jobs, ranked in `_ranked_running`
    if rule.order == "gittins":
        gittins = GittinsTable((gpus * duration)[gpus > 0])
    # The per-job constants as Python lists for the event loop's scalar reads (a numpy
    # scalar costs several times a float there); the arrays stay for column arithmetic.
    arrival_a, duration_a, gpus_a = arrival, duration, gpus
    arrival, duration, gpus = arrival_a.tolist(), duration_a.tolist(), gpus_a.tolist()
    users = users.tolist()

    # Waiting jobs in one heap per (GPU demand, GPU type) class: the classes are few (GPU
    # counts are 1, 2, 4, 8, ...), so each decision compares class heads, not the queue.
    classes: dict[tuple[float, str], list[tuple]] = {}
    by_user: dict[int, list[tuple]] = {}
    # Classes whose head may be stale (a job's entries are all in its own class, and an
    # entry goes stale only when its job is queued again or starts): only these are
    # cleaned before a decision looks at the heads.
    dirty: set[tuple[float, str]] = set()

    def rank(i: int) -> tuple:
        if rule.order == "remaining":
            return (duration[i] - done[i], arrival[i], i)
        if rule.order == "las":
            return (int(queue[i]), arrival[i], i)
        if rule.order == "gittins":
            return (int(queue[i]), -gittins.at(float(attained[i])), arrival[i], i)
        return (arrival[i], i)

    def enqueue(i: int) -> None:
        touched[0] += 1
        if rule.order == "user-share":
            heapq.heappush(by_user.setdefault(int(users[i]), []), (arrival[i], i))
            return
        r = rank(i)
        key = (gpus[i], types[i])
        if tiresias:
            queued[i] = r
            dirty.add(key)
        heapq.heappush(classes.setdefault(key, []), r)

    # Running jobs by finish time, latest first (= longest remaining: every running job's
    # remaining time shrinks at the same rate), for preemption.
    running_heap: list[tuple[float, int, int]] = []  # (-planned finish, job, version)
    # (time, kind 0=finish 1=arrive 2=queue change, job, version), taken in tuple order.
    # Arrivals are known in advance and read from their own sorted list; the heap holds
    # what the replay schedules as it goes, so it stays near the size of the running set
    # (a heap of every arrival costs each pop tens of tuple comparisons).
    arrivals = [(arrival[i], 1, int(i), 0) for i in np.argsort(arrival_a, kind="stable")]
    arrivals.append((math.inf, 1, n, 0))  # sentinel: compares after every event
    events: list[tuple[float, int, int, int]] = []
    finished = 0
    n_events = 0

    # Running-set changes and running jobs moved down a queue, for the ranking below.
    changes = [0]
    ranked: list = [None, None]
    below_queue: dict[int, int] = {}
    # What a decision depends on, counted: starts, stops, jobs (re-)queued, running jobs
    # moved down a queue. A decision at an instant where none of these changed since the
    # last one settled starts nothing, and it is skipped (queue-change events and a
    # preempted job's stale finish make most instants of an overloaded replay), unless a
    # rank moves with the clock in a way that could let a waiting job by: Gittins' indices
    # do. Under preemptive "remaining" time only shrinks what running jobs have left, so
    # fewer of them rank below a waiting job: nothing new starts.
    touched = [0]
    settled = [-1]
    timeless = (
        skip_settled
        and rule.order != "gittins"
        # SRTF's preemption can pause jobs without starting the job it paused them for
        # where CPU and memory bind, at any instant: no instant is settled there.
        and not (rule.order == "remaining" and rule.preemptive and servers.other)
    )

    def hold_in_queue(i: int, level: int, taken: list[tuple[int, float]], sign: int) -> None:
        """Count running job i, holding `taken`, in (sign 1) or out of (-1) queue `level`."""
        in_queue[level] += sign
        held_in_queue[level] += sign * gpus[i]
        for server, amount in taken:
            held_on[level, server] += sign * amount

    def begin(i: int, now: float, taken: list[tuple[int, float]]) -> None:
        placed[i] = taken
        changes[0] += 1
        touched[0] += 1
        user_gpus[users[i]] += gpus[i]
        if math.isnan(start[i]):
            start[i] = now
        stint[i] = now
        end = now + resume_extra[i] + duration[i] - done[i]
        heapq.heappush(events, (end, 0, i, int(version[i])))
        if rule.preemptive and not tiresias:
            heapq.heappush(running_heap, (-end, i, int(version[i])))
        if tiresias:
            queued.pop(i, None)
            dirty.add((gpus[i], types[i]))
            hold_in_queue(i, int(queue[i]), taken, 1)
            running_jobs.add(i)
            if ran[i] > 0:
                waited[i] += now - wait_since[i]
            qversion[i] += 1
            if queue[i] < lowest:
                # Service accrues once the restart is paid: the moment it crosses the
                # queue's threshold is known now.
                cross = now + resume_extra[i] + (thresholds[queue[i]] - attained[i]) / gpus[i]
                heapq.heappush(events, (cross, 2, i, int(qversion[i])))

    def stop(i: int, now: float) -> None:
        taken = placed.pop(i)
        servers.release(taken, i)
        changes[0] += 1
        touched[0] += 1
        held[i] += now - stint[i]
        user_gpus[users[i]] -= gpus[i]
        if tiresias and gpus[i] > 0:
            hold_in_queue(i, int(queue[i]), taken, -1)
            running_jobs.discard(i)

    def preempt(i: int, now: float) -> None:
        stop(i, now)
        progress_s = max(0.0, now - stint[i] - resume_extra[i])
        done[i] += progress_s
        resume_extra[i] = preempt_cost_s
        preemptions[i] += 1
        version[i] += 1
        if tiresias:
            attained[i] += gpus[i] * progress_s
            ran[i] += progress_s
            wait_since[i] = now
            qversion[i] += 1
            if rule.promote_knob is not None and queue[i] > 0 and ran[i] > 0:
                due = now + max(0.0, rule.promote_knob * ran[i] - waited[i])
                heapq.heappush(events, (due, 2, i, int(qversion[i])))
        enqueue(i)

    def change_queue(i: int, now: float) -> None:
        """A running job crosses its queue's threshold (down one queue), or a waiting one
        has waited PROMOTEKNOB times its run (back to the highest queue, service reset)."""
        if i in placed:
            hold_in_queue(i, int(queue[i]), placed[i], -1)
            queue[i] += 1
            hold_in_queue(i, int(queue[i]), placed[i], 1)
            touched[0] += 1
            changes[0] += 1
            if queue[i] < lowest:
                cross = now + (thresholds[queue[i]] - thresholds[queue[i] - 1]) / gpus[i]
                heapq.heappush(events, (cross, 2, i, int(qversion[i])))
            return
        queue[i] = 0
        attained[i] = ran[i] = waited[i] = 0.0
        wait_since[i] = now
        enqueue(i)

    def try_start(i: int, now: float) -> bool:
        if not servers.may_fit(gpus[i]):
            return False
        return start_placed(i, now)

    def start_placed(i: int, now: float) -> bool:
        """`try_start` once `may_fit` has passed."""
        taken = servers.place(gpus[i], types[i], i)
        if taken is None:
            return False
        begin(i, now, taken)
        return True

    def schedule(now: float) -> None:
        if rule.order == "user-share":
            _schedule_users(now)
            return
        blocked: set[tuple[float, str]] = set()
        may_preempt = rule.preemptive
        # Fewest GPUs that found no room by preemption, per GPU type and width: a later
        # head ranks lower (fewer jobs below it; a preemption since frees only GPUs of jobs
        # that ranked below the one that found none), so asking as much finds no room
        # either. Not kept under `skip_settled=False`, the reference that tries them all.
        no_room: dict[tuple[str, bool], float] = {}
        narrow = servers.g + _EPS  # the most GPUs a narrow job asks
        while True:
            if tiresias:
                # A promotion re-queued some jobs under a new rank: drop the old entries.
                for dirty_key in dirty:
                    q = classes[dirty_key]
                    while q and queued.get(q[0][-1]) != q[0]:
                        heapq.heappop(q)
                dirty.clear()
            heads = [(q[0], key) for key, q in classes.items() if q and key not in blocked]
            if not heads:
                return
            # Heads in the order a decision takes them: a head that neither starts nor
            # preempts changes nothing, so the next is the next of this order; a start
            # changes the heads, and the order is drawn again.
            if rule.order == "largest-fit":
                # Tetris: the widest waiting job that fits now (earliest among equals).
                heads.sort(key=lambda h: (h[1][0], (-h[0][0], -h[0][1])), reverse=True)
            else:
                heads.sort()
            # `may_fit`'s bounds, read once (the wide one when a wide head asks: most passes
            # have none): until a head starts or a preemption moves jobs (both end this
            # pass), nothing changes the free GPUs.
            most, whole = servers.most_free(), None
            for head, key in heads:
                # A class's key is its jobs' GPUs and type: all a head's checks read.
                need, gpu_type = key
                wide = need > narrow
                if wide and whole is None:
                    whole = servers.whole_free()
                # The head stays in its heap until it starts: the victims a preemption
                # puts back rank below it, so it is still the heap's first entry then.
                if need <= (whole if wide else most) + _EPS and start_placed(head[-1], now):
                    started(key, head)
                    break
                moved = False
                shape = (gpu_type, wide)
                # (A start that failed changed nothing: whether to preempt is read now.)
                if may_preempt and need < no_room.get(shape, math.inf):
                    before = changes[0]
                    paused = _preempt_ranked(head, now) if tiresias else _preempt_for(head[-1], now)
                    if paused:
                        started(key, head)
                        break
                    # Where servers' CPU and memory bind, the GPUs a preemption planned for
                    # can be freed for a job that then does not fit: jobs were paused.
                    moved = changes[0] != before
                    # Nobody runs below this head, so nobody runs below the heads after it.
                    may_preempt = paused is not None
                    if skip_settled and (tiresias or not moved):
                        no_room[shape] = need  # below what was there: the test above
                if not rule.backfill:
                    return
                blocked.add(key)
                if moved:
                    break  # the paused jobs are queued again: the heads are drawn again
            else:
                return

    def started(key: tuple[float, str], head: tuple) -> None:
        """Take a started head off its class heap (Tiresias' entry is stale once the job
        starts, and the cleaning before the next decision drops it)."""
        if tiresias:
            return
        q = classes[key]
        if q[0] is head:
            heapq.heappop(q)
        else:
            # A victim SRTF put back ranks below the head by its remaining time, which is
            # computed anew when it pauses: at large clock values it can round a hair
            # under the head's, ahead of it in the heap. The entries are the same either
            # way.
            q.remove(head)
            heapq.heapify(q)

    def _ranked_running(now: float) -> tuple[np.ndarray, ...]:
        """Running jobs lowest rank first, their queues, Gittins indices and cumulative GPUs
        (once per instant and running set: most waiting heads find nothing to preempt)."""
        # LAS ranks running jobs by queue and submit time alone: the ranking holds until
        # the running set or a queue changes. Gittins' indices move as jobs run.
        key = changes[0] if rule.order == "las" else (now, changes[0])
        if ranked[0] != key:
            run = np.fromiter(running_jobs, dtype=np.int64, count=len(running_jobs))
            q = queue[run]
            if rule.order == "las":
                g = np.zeros(run.size)
            else:
                served = attained[run] + gpus_a[run] * np.maximum(
                    0.0, now - stint[run] - resume_extra[run]
                )
                g = gittins(served)
            order = np.lexsort((-run, -arrival_a[run], g, -q))
            run = run[order]
            ranked[0], ranked[1] = key, (run, q[order], g[order], np.cumsum(gpus_a[run]))
            below_queue.clear()
        return ranked[1]

    def _below_queue(level: int) -> int:
        """How many running jobs sit in a queue below `level` (a prefix of the ranking)."""
        if level not in below_queue:
            q = ranked[1][1]
            below_queue[level] = int(np.count_nonzero(q > level))
        return below_queue[level]

    def freed_room(trial: np.ndarray, j: int, first: bool, need: float, mask) -> bool:
        """Add running job j's GPUs to `trial` (free GPUs per server, victims paused);
        whether a plan for `need` GPUs is worth trying now: after the first victim a
        narrow job fits only where one server has the GPUs, and none had before j, so
        only j's servers can have them now (`mask`: the servers of the job's type)."""
        for server, amount in placed[j]:
            trial[server] += amount
        if first or need > servers.g + _EPS:
            return True
        return any(
            trial[server] >= need - _EPS and (mask is None or mask[server])
            for server, _ in placed[j]
        )

    def _preempt_ranked(head: tuple, now: float) -> bool | None:
        """Tiresias: pause running jobs ranked below the waiting job of rank `head` (i),
        lowest first, until i fits, then only those on the servers i goes to; False
        (nothing paused) if they cannot make room, None if no running job ranks below it.
        Running jobs' ranks are read now (their
        service grows as they run); a waiting job's is its queue entry (service frozen)."""
        i = head[-1]
        if rule.order == "las":
            # FIFO inside a queue: only a lower queue's running jobs can give way.
            level = int(queue[i])
            if not any(in_queue[level + 1 :]):
                return None
            # Kept sums may be off in the last bits: only a clear shortfall returns here.
            if sum(held_in_queue[level + 1 :]) + servers.free_total() < gpus[i] - 1e-6:
                return False
            # Nor when no server (no servers together, for a wide job) would have the
            # GPUs with every lower-queue job paused.
            mask = servers._candidates(types[i])
            room = servers.free + held_on[level + 1 :].sum(axis=0)
            if mask is not None:
                room = room[mask]
            if gpus[i] <= servers.g + _EPS:
                if room.max() < gpus[i] - 1e-6:
                    return False
            elif np.floor(room + 1e-6).sum() < gpus[i] - 1e-6:
                return False
        else:
            mask = servers._candidates(types[i])
        run, q, g, held_gpus = _ranked_running(now)
        # Lowest first, so the jobs ranked below i are a prefix. LAS is FIFO inside a
        # queue: only a lower queue's running jobs give way.
        if rule.order == "las":
            count = _below_queue(int(queue[i]))
        else:
            below = (q > queue[i]) | ((q == queue[i]) & (g < -head[1] - _EPS))
            count = int(np.argmin(below)) if not below.all() else below.size
        if count == 0:
            return None
        if held_gpus[count - 1] + servers.free_total() < gpus[i] - _EPS:
            return False
        victims = run[:count].tolist()
        trial = servers.free.copy()
        chosen: list[int] = []
        plan = None
        need = gpus[i]
        for j in victims:
            chosen.append(j)
            if not freed_room(trial, j, len(chosen) == 1, need, mask):
                continue
            plan = servers.plan(need, types[i], trial)
            if plan is not None:
                break
        if plan is None:
            return False
        where = {server for server, _ in plan}
        for j in chosen:
            if any(server in where for server, _ in placed[j]):
                preempt(j, now)
        # Not `try_start`: the pauses just moved the free GPUs, so `may_fit`'s bounds
        # would be computed for this one check and thrown away by the start.
        return start_placed(i, now)

    def _preempt_for(i: int, now: float) -> bool:
        """Pause the fewest running jobs ranked below job i (longest remaining first) that
        make room for it, and start it; False (nothing paused) if no such set exists."""
        mine = duration[i] - done[i]
        popped: list[tuple[float, int, int]] = []
        trial = servers.free.copy()
        fits = False
        need = gpus[i]
        mask = servers._candidates(types[i])
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
            if not freed_room(trial, j, len(popped) == 1, need, mask):
                continue
            fits = servers.plan(need, types[i], trial) is not None
        if not fits:
            for entry in popped:
                heapq.heappush(running_heap, entry)
            return False
        for _, j, _ in popped:
            preempt(j, now)
        return start_placed(i, now)  # as in `_preempt_ranked`

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

    next_arrival = 0
    # A preempted job's finish and a superseded queue change stay in the heap until their
    # time (stale: skipped when popped). Where a decision needs something to have changed
    # (`timeless`), an instant of stale events alone decides nothing, so they can be dropped
    # early: once the heap has doubled, it is rebuilt from its live entries, which pop in
    # the same order (the tuples are totally ordered).
    compact_at = 4096
    while events or next_arrival < n:
        now = min(events[0][0], arrivals[next_arrival][0]) if events else arrivals[next_arrival][0]
        # Every event of this instant first, then one decision.
        while True:
            if events and events[0] < arrivals[next_arrival]:
                if events[0][0] > now:
                    break
                _, kind, i, ver = heapq.heappop(events)
            elif arrivals[next_arrival][0] <= now:
                _, kind, i, ver = arrivals[next_arrival]
                next_arrival += 1
            else:
                break
            n_events += 1
            if kind == 2:
                if ver == qversion[i] and finish[i] != finish[i]:
                    change_queue(i, now)
                continue
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
        if not (timeless and touched[0] == settled[0]):
            schedule(now)
            settled[0] = touched[0]
        if timeless and len(events) > compact_at:
            live = [e for e in events if e[3] == (version[e[2]] if e[1] == 0 else qversion[e[2]])]
            n_events += len(events) - len(live)  # counted as the skipped events they are
            events[:] = live
            heapq.heapify(events)
            compact_at = max(4096, 2 * len(events))
    if progress is not None:
        progress(finished, n)
    if np.isnan(finish).any():
        raise RuntimeError("replay ended with unfinished jobs (a bug: report it)")
    jct = finish - arrival_a
    frame = pl.DataFrame(
        {
            "job_index": np.arange(n, dtype=np.int32),
            "arrival_s": arrival_a,
            "start_s": start,
            "finish_s": finish,
            "jct_s": jct,
            "ideal_s": duration_a,
            "slowdown": jct / duration_a,
            "gpu_time_s": gpus_a * held,
            "preemptions": preemptions,
        }
    )
    return ReplayResult(frame, n_events)
