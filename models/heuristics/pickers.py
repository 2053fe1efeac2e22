"""Job pickers (SJF, Random, Tetris) and first-fit placement: RL-TAPS' baselines.

RL-TAPS section 5.3 compares against DeepRM's static schedulers: a picker chooses jobs one
at a time among the waiting ones, each picked job gets exactly the GPUs it requested if
they are free (DeepRM picks the best-scoring job that fits, so a job that does not fit is
skipped and a later one may still start), and "the first x free resources" numbered left
to right go to it; a started job keeps its GPUs until it finishes (no preemption).

Here that is an allocation policy (the picker) plus a placement policy (`FirstFit`):

- running jobs keep their workers/PSs (`preemptive=False`, the default; with
  `preemptive=True` every job is re-picked each decision, as DL2's FIFO/SRTF do);
- waiting jobs in the picker's order get their request, all or nothing, while it fits:
  `requested_workers` workers, and `max(requested_ps, 1)` PSs for job types that have PSs
  (all-reduce types, whose PS demand is zero, get none), both capped at `max_workers`;
- `FirstFit` keeps every task a job keeps on its server and puts new ones on the
  lowest-index server with room, jobs in the order the allocation lists them (pick order).

Orders: `SJF` by estimated remaining time at the requested allocation (catalogue speed:
for a job not yet started, DeepRM's job length; for RL-TAPS types, len(j)); `Random`
uniformly, from a generator seeded by (seed, decision index), so runs are reproducible;
`TetrisPicker` repeatedly the fitting job whose request best aligns with the free
resources (DeepRM's Tetris: dot product of the request and the free capacity, here both as
shares of the cluster; with GPUs only this is RL-TAPS' gpusreq(j) x free GPUs, i.e. the
largest request that fits).

Why a new Tetris: `models.heuristics.tetris.Tetris` runs on RL-TAPS jobs to completion,
but is not RL-TAPS' baseline there: it re-decides every job each step (running jobs can
lose their GPUs), scores packing per server, which is the same for every job when a server
is one GPU (so it degenerates to remaining-time order), and gives PS-less jobs a
zero-demand PS.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from models.heuristics.common import nominal_remaining_s
from tracelib.sim.cluster import FreePool
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot

RL_TAPS_BASELINES = ("random", "sjf", "tetris-picker")
"""RL-TAPS section 5.3's job pickers (registered names), each with `FirstFit`."""


def has_ps(job: JobView) -> bool:
    """Whether the job's type trains with parameter servers (all-reduce types declare a
    zero PS demand)."""
    return any(d > 0 for d in job.ps_demand)


def request(job: JobView) -> tuple[int, int]:
    """(workers, PSs) a picked job receives: its request, at least one PS if its type has
    PSs, none otherwise, capped at `max_workers`."""
    cap = job.max_workers
    ps = min(max(job.requested_ps, 1), cap) if has_ps(job) else 0
    return min(job.requested_workers, cap), ps


def _running(job: JobView) -> bool:
    return bool(job.placement.workers or job.placement.ps)


class _Grants:
    """Requests granted so far, with a tentative placement proving they fit (one
    `FreePool` over the whole cluster: every job's allocation is re-decided each time)."""

    def __init__(self, snap: Snapshot) -> None:
        self.pool: FreePool = snap.cluster.pool(snap.cluster.capacity, reserved=False)
        self.free = [float(x) for x in snap.cluster.total]
        """Free resources summed over servers (a cheap necessary condition for a fit)."""

    @staticmethod
    def need(job: JobView, w: int, p: int) -> tuple[float, float, float]:
        """Resources of w workers and p PSs of `job`."""
        wd, pd = job.worker_demand, job.ps_demand
        return (w * wd[0] + p * pd[0], w * wd[1] + p * pd[1], w * wd[2] + p * pd[2])

    def _take(self, job: JobView, w: int, p: int) -> list | None:
        need = self.need(job, w, p)
        if any(n > f + 1e-9 for n, f in zip(need, self.free, strict=True)):
            return None
        taken = []
        for demand in [job.worker_demand] * w + [job.ps_demand] * p:
            server = self.pool.feasible_fit(demand, job.gpu_types)
            if server < 0:
                self.pool.give_all(taken)
                return None
            self.pool.take_unchecked(server, demand)
            taken.append((server, demand))
        return taken

    def fits(self, job: JobView, w: int, p: int) -> bool:
        """Whether `grant(job, w, p)` would succeed (nothing changes)."""
        taken = self._take(job, w, p)
        if taken is None:
            return False
        self.pool.give_all(taken)
        return True

    def grant(self, job: JobView, w: int, p: int) -> bool:
        """Grant w workers and p PSs to `job` if they fit (all or nothing)."""
        if self._take(job, w, p) is None:
            return False
        self.free = [f - n for f, n in zip(self.free, self.need(job, w, p), strict=True)]
        return True


Order = Callable[[Snapshot, _Grants, list[JobView]], Iterable[JobView]]


def _pick(snap: Snapshot, order: Order, preemptive: bool) -> Allocation:
    """Keep running jobs (unless preemptive), then grant requests in `order` while they fit.
    The allocation lists jobs in that order (kept ones first): `FirstFit` places in it."""
    grants = _Grants(snap)
    counts: dict[int, tuple[int, int]] = {}
    waiting = []
    for job in snap.jobs:
        if not preemptive and _running(job):
            keep = (len(job.placement.workers), len(job.placement.ps))
            if grants.grant(job, *keep):
                counts[job.job_id] = keep
        else:
            waiting.append(job)
    for job in order(snap, grants, waiting):
        want = request(job)
        if want != (0, 0) and grants.grant(job, *want):
            counts[job.job_id] = want
    return Allocation.of(counts)


@dataclass(frozen=True)
class _Picker:
    """What every picker here is: a non-oracle `AllocationPolicy` that decides at every
    event (`interval_s` None), granting waiting jobs' requests in its own order (`_pick`).
    A subclass gives `name` its default (the field keeps its place: first)."""

    name: str
    interval_s: float | None = None
    uses_oracle: bool = False
    preemptive: bool = False
    """Re-pick running jobs every decision (False: they keep their GPUs to the end)."""


@dataclass(frozen=True)
class SJF(_Picker):
    """Shortest job first: the shortest estimated remaining time at the request."""

    name: str = "sjf"

    def allocate(self, snap: Snapshot) -> Allocation:
        """Requests granted shortest first while they fit."""

        def order(snap: Snapshot, grants: _Grants, waiting: list[JobView]) -> list[JobView]:
            def key(job: JobView) -> float:
                w, p = request(job)
                return nominal_remaining_s(snap, job, max(w, 1), max(p, 1))

            return sorted(waiting, key=key)  # stable: ties keep arrival order

        return _pick(snap, order, self.preemptive)


@dataclass(frozen=True)
class Random(_Picker):
    """Jobs in uniformly random order (seeded by `seed` and the decision index)."""

    name: str = "random"
    seed: int = 0

    def allocate(self, snap: Snapshot) -> Allocation:
        """Requests granted in a random order while they fit."""

        def order(snap: Snapshot, grants: _Grants, waiting: list[JobView]) -> list[JobView]:
            rng = np.random.default_rng((self.seed, snap.decision))
            return [waiting[k] for k in rng.permutation(len(waiting))]

        return _pick(snap, order, self.preemptive)


@dataclass(frozen=True)
class TetrisPicker(_Picker):
    """DeepRM's Tetris: the fitting request best aligned with the free resources first."""

    name: str = "tetris-picker"

    def allocate(self, snap: Snapshot) -> Allocation:
        """Repeatedly grant the fitting request with the largest alignment score."""
        total = snap.cluster.total.tolist()
        inv = [1.0 / t if t > 0 else 0.0 for t in total]

        def order(snap: Snapshot, grants: _Grants, waiting: list[JobView]):
            # (job, request, request as shares of the cluster)
            pending = []
            for job in waiting:
                want = request(job)
                need = grants.need(job, *want)
                pending.append((job, want, [n * k for n, k in zip(need, inv, strict=True)]))
            while pending:
                # Free shares now (`_pick` grants each yielded job before asking for the
                # next). Best score first, ties to the earlier arrival (the sort is stable);
                # the first one that fits is granted.
                free = [f * k for f, k in zip(grants.free, inv, strict=True)]
                scores = [
                    sum(n * f for n, f in zip(share, free, strict=True)) for *_, share in pending
                ]
                ranked = sorted(range(len(pending)), key=lambda i: -scores[i])
                best = next((i for i in ranked if grants.fits(pending[i][0], *pending[i][1])), None)
                if best is None:
                    return
                yield pending.pop(best)[0]

        return _pick(snap, order, self.preemptive)


@dataclass(frozen=True)
class FirstFit:
    """Kept tasks stay; new ones go to the lowest-index server with room (RL-TAPS' and
    DeepRM's baseline allocator: not topology-aware). Tasks that fit nowhere are left out."""

    name: str = "first-fit"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Place `alloc`, jobs in its listing order, workers then PSs."""
        pool = snap.cluster.pool(snap.cluster.capacity, reserved=False)
        out: dict[int, tuple[list[int], list[int]]] = {}
        views = snap.by_id
        # Kept tasks first (lowest-index servers of each kind kept when a job shrinks): they
        # fitted last decision, so they fit now.
        for job_id, (w, p) in alloc.counts.items():
            job = views[job_id]
            kept_w, kept_p = list(job.placement.workers[:w]), list(job.placement.ps[:p])
            for s in kept_w:
                pool.take(s, job.worker_demand)
            for s in kept_p:
                pool.take(s, job.ps_demand)
            out[job_id] = (kept_w, kept_p)
        for job_id, (w, p) in alloc.counts.items():
            job = views[job_id]
            workers, ps = out[job_id]
            for demand, tasks, want in ((job.worker_demand, workers, w), (job.ps_demand, ps, p)):
                while len(tasks) < want:
                    server = pool.first_fit(demand, job.gpu_types)
                    if server < 0:
                        break
                    pool.take_unchecked(server, demand)
                    tasks.append(server)
        return Placement.of({jid: JobPlacement.of(w, p) for jid, (w, p) in out.items()})
