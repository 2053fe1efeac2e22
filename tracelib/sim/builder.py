"""Per-action allocation: add one worker and/or PS to one job at a time, with checks.

Heuristics build their allocation through an `AllocationBuilder`, and a DL2-style agent
(3J+1 actions: add a worker, a PS or both to job i, or stop) would step through the same
object. Each action checks the job's cap (`max_workers`, applied to workers and to PSs) and
that the new tasks can still be placed: the builder keeps a tentative placement in a
`FreePool` starting from what the decision may hand out (`ClusterView.available`: the
whole cluster in the time-slotted mode, where every job's allocation is re-decided; less
what running jobs hold when placements are fixed). The real placement is decided
later by the placement policy; the tentative one only guarantees feasibility.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import IntEnum
from operator import attrgetter

import numpy as np

from tracelib.sim.cluster import FreePool
from tracelib.sim.snapshot import Allocation, JobView, Snapshot


class Action(IntEnum):
    """Kinds of allocation step (DL2's action space is job x kind, plus stop)."""

    WORKER = 0
    PS = 1
    BOTH = 2


class AllocationBuilder:
    """Accumulates workers/PSs per visible job; `add` is the per-action step."""

    def __init__(
        self,
        snap: Snapshot,
        jobs: Sequence[JobView] | None = None,
        pool: FreePool | None = None,
    ) -> None:
        """`pool`: the free resources to build from (default: what the snapshot's decision
        may hand out, `ClusterView.pool()`); a batch of jobs taking what earlier batches of
        the same decision left passes theirs."""
        self.snap = snap
        self.jobs: tuple[JobView, ...] = tuple(snap.jobs if jobs is None else jobs)
        self.index = {j.job_id: i for i, j in enumerate(self.jobs)}
        n = len(self.jobs)
        self.workers = [0] * n
        self.ps = [0] * n
        self.pool: FreePool = snap.cluster.pool() if pool is None else pool
        # GPU types each job's workers may use (None: any server).
        self._allowed = [j.gpu_types for j in self.jobs]
        # Shares of the cluster one worker / one PS holds, for DRF and for Optimus' "per unit
        # of dominant resource"; resources the cluster lacks entirely are ignored. Plain
        # floats: these are read on every step, where numpy's call overhead dominates.
        inv = [1.0 / t if t > 0 else 0.0 for t in snap.cluster.total.tolist()]
        # Jobs share a few demands: each distinct demand is one tuple object (the pool's
        # tables, keyed by demand, then find it by identity, without comparing floats)
        # and its shares are computed once.
        canonical: dict[tuple[float, ...], tuple[float, ...]] = {}
        shares: dict[tuple[float, ...], tuple[float, ...]] = {}

        def intern(values) -> tuple[float, ...]:
            # A demand seen before is found as it is (equal values hash alike, numpy's or
            # not): a decision interns every waiting job's two demands.
            found = canonical.get(values) if type(values) is tuple else None
            if found is not None:
                return found
            dem = tuple(map(float, values))
            found = canonical.get(dem)
            if found is None:
                found = canonical[dem] = dem
                shares[dem] = tuple(d * k for d, k in zip(dem, inv, strict=True))
            return found

        self._w_dem = [intern(j.worker_demand) for j in self.jobs]
        self._p_dem = [intern(j.ps_demand) for j in self.jobs]
        self._w_share = [shares[dem] for dem in self._w_dem]
        self._p_share = [shares[dem] for dem in self._p_dem]
        self._shapes: tuple | None = None  # the mask's tables, built on its first use
        self._caps = [j.max_workers for j in self.jobs]
        cap = np.array(self._caps, dtype=np.int64)  # (n,)
        self._room = np.repeat(cap[:, None] > 0, 2, axis=1)  # (n, 2): workers, PSs below cap
        self._room_version = 0  # counts the changes of `_room` (a key of `fit_mask`'s answer)
        # `fit_mask`'s answers: per pool signature, the shapes' fits and the pairs' fits
        # (None where a pair's fit depends on more than the signature); the last mask and
        # the (signature, room version) it holds for.
        self._by_sig: dict[int, tuple[np.ndarray, list[bool | None]]] = {}
        self._fit: np.ndarray | None = None
        self._fit_key: tuple[int, int] | None = None

    def _mask_tables(self) -> None:
        """The vectorized mask's tables (`mask`; heuristics that only `add` never need
        them)."""
        # Jobs share a few task shapes (and worker+PS pairs of shapes), so feasibility is
        # checked once per shape and broadcast to the jobs.
        shapes: dict[tuple, int] = {}
        pairs: dict[tuple[int, int], int] = {}
        w_sid, p_sid, pair_id, pair_rep = [], [], [], []
        for i, (wd, pd) in enumerate(zip(self._w_dem, self._p_dem, strict=True)):
            allowed = self._allowed[i]
            w_sid.append(shapes.setdefault((wd, allowed), len(shapes)))
            p_sid.append(shapes.setdefault((pd, allowed), len(shapes)))
            key = (w_sid[-1], p_sid[-1])
            if key not in pairs:
                pairs[key] = len(pairs)
                pair_rep.append(i)
            pair_id.append(pairs[key])
        self._shapes = tuple(shapes)
        self._w_sid = np.array(w_sid, dtype=np.intp)
        self._p_sid = np.array(p_sid, dtype=np.intp)
        self._pair_id = np.array(pair_id, dtype=np.intp)
        self._pair_rep = tuple(pair_rep)
        self._pair_shape = tuple(
            (
                tuple(a + b for a, b in zip(self._w_dem[i], self._p_dem[i], strict=True)),
                self._allowed[i],
            )
            for i in pair_rep
        )

    # -- queries ---------------------------------------------------------------------

    def dominant_share(self, i: int) -> float:
        """Largest share of any resource the job's current tasks hold."""
        w, p = self.workers[i], self.ps[i]
        ws, ps = self._w_share[i], self._p_share[i]
        return max(w * ws[0] + p * ps[0], w * ws[1] + p * ps[1], w * ws[2] + p * ps[2])

    def shape(self, i: int) -> tuple[tuple[float, ...], tuple[float, ...], int]:
        """(shares of one worker, shares of one PS, cap) of job i: with its counts, what its
        dominant share and its count fractions depend on (a key for caching them)."""
        return self._w_share[i], self._p_share[i], self._caps[i]

    def worker_share(self, i: int) -> float:
        """Dominant share of one more worker of job i."""
        return max(self._w_share[i])

    def ps_share(self, i: int) -> float:
        """Dominant share of one more PS of job i."""
        return max(self._p_share[i])

    def under_cap(self, i: int, workers: int = 0, ps: int = 0) -> bool:
        """Whether job i may take that many more workers and PSs (its max_workers)."""
        cap = self.jobs[i].max_workers
        return self.workers[i] + workers <= cap and self.ps[i] + ps <= cap

    def can_add(self, i: int, workers: int = 0, ps: int = 0) -> bool:
        """Whether `add(i, workers, ps)` would succeed (nothing changes)."""
        if not self.under_cap(i, workers, ps):
            return False
        if workers + ps == 1:  # the common single-task case: no tentative placement needed
            demand = self._w_dem[i] if workers else self._p_dem[i]
            return self.pool.any_fit(demand, self._allowed[i])
        taken = self._take(i, workers, ps)
        if taken is None:
            return False
        self.pool.give_all(taken)
        return True

    def mask(self) -> np.ndarray:
        """Valid actions as a (n_jobs, 3) bool array over (WORKER, PS, BOTH)."""
        return self.fit_mask().copy()

    def fit_mask(self) -> np.ndarray:
        """`mask()` without the copy, for a caller asking after every step: the same array
        while neither the pool's signature nor a job's room changed. Read-only, and valid
        only until the next `add`."""
        key = (self.pool.signature, self._room_version)
        if key == self._fit_key:
            return self._fit
        if self._shapes is None:
            self._mask_tables()
        known = self._by_sig.get(key[0])
        if known is None:
            known = self._by_sig[key[0]] = self._signature_fits()
        fits, pair_known = known
        if None in pair_known:
            # Some pair fits only on two servers, which depends on how many servers each
            # bucket holds: checked now, and this mask is not kept.
            pair = [
                self._pair_fits(i) if ok is None else ok
                for i, ok in zip(self._pair_rep, pair_known, strict=True)
            ]
            self._fit_key = None
            return self._compose(fits, np.array(pair, dtype=bool))
        self._fit = self._compose(fits, np.array(pair_known, dtype=bool))
        self._fit_key = key
        return self._fit

    def _signature_fits(self) -> tuple[np.ndarray, list[bool | None]]:
        """Which task shapes fit the pool now, and which worker+PS pairs do (None: each task
        fits, both on one server do not, so it takes a tentative placement to tell)."""
        pool = self.pool
        fits = np.array([pool.any_fit(*shape) for shape in self._shapes], dtype=bool)
        # A worker+PS pair may fail where each alone fits (the same last free slot): check
        # each pair of shapes once, on a job that has that pair.
        pair: list[bool | None] = [
            (True if pool.any_fit(*both) else None)
            if fits[self._w_sid[i]] and fits[self._p_sid[i]]
            else False
            for i, both in zip(self._pair_rep, self._pair_shape, strict=True)
        ]
        return fits, pair

    def _compose(self, fits: np.ndarray, pair: np.ndarray) -> np.ndarray:
        """The (n_jobs, 3) mask from the shapes' and pairs' fits and the jobs' room."""
        out = np.empty((len(self.jobs), 3), dtype=bool)
        np.logical_and(fits[self._w_sid], self._room[:, 0], out=out[:, 0])
        np.logical_and(fits[self._p_sid], self._room[:, 1], out=out[:, 1])
        np.logical_and(out[:, 0], out[:, 1], out=out[:, 2])
        out[:, 2] &= pair[self._pair_id]
        return out

    def _pair_fits(self, i: int) -> bool:
        """Worker and PS of job i on two different servers (one server is checked first)."""
        taken = self._take(i, 1, 1)
        if taken is None:
            return False
        self.pool.give_all(taken)
        return True

    # -- actions ---------------------------------------------------------------------

    def _take(self, i: int, workers: int, ps: int):
        pool, allowed = self.pool, self._allowed[i]
        taken = []
        for demand in [self._w_dem[i]] * workers + [self._p_dem[i]] * ps:
            server = pool.take_feasible(demand, allowed)
            if server < 0:
                pool.give_all(taken)
                return None
            taken.append((server, demand))
        return taken

    def add(self, i: int, workers: int = 0, ps: int = 0) -> bool:
        """Add `workers` workers and `ps` PSs to job i (all or nothing); False if the cap or
        the cluster does not allow it."""
        # The new counts are computed once and kept in locals: each attribute or list read
        # saved counts here (hundreds of steps per DL2 decision).
        cap = self._caps[i]
        n_w = self.workers[i] + workers
        n_p = self.ps[i] + ps
        if n_w > cap or n_p > cap:
            return False
        if workers == 1 and ps == 1:
            # The common step (a worker+PS pair), written out: it runs ~10^5 times a run.
            pool, wd, allowed = self.pool, self._w_dem[i], self._allowed[i]
            s_w = pool.take_feasible(wd, allowed)
            if s_w < 0:
                return False
            if pool.take_feasible(self._p_dem[i], allowed) < 0:
                pool.give(s_w, wd)
                return False
        elif workers + ps == 1 and workers >= 0 and ps >= 0:  # one task: `_take` without a list
            demand = self._w_dem[i] if workers else self._p_dem[i]
            if self.pool.take_feasible(demand, self._allowed[i]) < 0:
                return False
        elif self._take(i, workers, ps) is None:
            return False
        self.workers[i] = n_w
        self.ps[i] = n_p
        # Counts only grow, so a job's room only ever closes: write it then, not every step.
        if n_w >= cap:
            self._room[i, 0] = False
            self._room_version += 1
        if n_p >= cap:
            self._room[i, 1] = False
            self._room_version += 1
        return True

    def step(self, i: int, action: Action) -> bool:
        """One DL2-style action on job i."""
        if action == Action.WORKER:
            return self.add(i, 1, 0)
        if action == Action.PS:
            return self.add(i, 0, 1)
        return self.add(i, 1, 1)

    def allocation(self) -> Allocation:
        """The allocation built so far."""
        return Allocation.of(
            {j.job_id: (self.workers[i], self.ps[i]) for i, j in enumerate(self.jobs)}
        )


def any_task_fits(pool: FreePool, jobs: Sequence[JobView], full: set[tuple]) -> bool:
    """Whether one worker or one PS of some job of `jobs` below its cap fits `pool` (what
    any step of an `AllocationBuilder` on those jobs needs: `mask`); shapes found not to
    fit are added to `full`. A policy deciding a long queue in batches asks this before
    each batch: within one decision the pool only shrinks, so a shape in `full` never fits
    again and a batch that nothing fits is skipped without building it.

    `full` also holds each job kind (`JobView.task_kind`) both of whose shapes are in it: a
    queue of thousands has a few kinds, and a job of a known kind is then passed over
    without converting its demands."""
    for job in jobs:
        if job.max_workers <= 0:
            continue
        kind = job.task_kind  # a 3-tuple: never equals a shape
        if kind in full:
            continue
        if not _kind_full(pool, kind, full):
            return True
    return False


def _kind_full(pool: FreePool, kind: tuple, full: set[tuple]) -> bool:
    """Whether neither a worker nor a PS of job kind `kind` fits `pool`; the shapes found
    not to fit, and then the kind, are added to `full`."""
    w_demand, p_demand, gpu_types = kind
    for demand in (w_demand, p_demand):
        shape = (tuple(map(float, demand)), gpu_types)
        if shape in full:
            continue
        if pool.any_fit(*shape):
            return False
        full.add(shape)
    full.add(kind)
    return True


def kinds_full(pool: FreePool, kinds: Iterable[tuple], full: set[tuple]) -> bool:
    """Whether every job kind of `kinds` is full (`full`, as `any_task_fits` fills it, or
    found so now): then no job of these kinds can take a worker or a PS in `pool`, and a
    policy may stop asking batch by batch (one pass over a long queue's few kinds instead
    of a Python loop over its jobs). False may also mean only that a kind that fits belongs
    to jobs at their cap."""
    return all(kind in full or _kind_full(pool, kind, full) for kind in kinds)


def last_of_kinds(jobs: Sequence[JobView]) -> dict[tuple, int]:
    """Job kind -> the index of the last job of `jobs` of that kind: the kinds after index
    i are those whose last job is after it (a queue of thousands has a few kinds)."""
    return dict(zip(map(_task_kind, jobs), range(len(jobs)), strict=True))


def kinds_after(last_of: dict[tuple, int], index: int) -> list[tuple]:
    """The kinds of the jobs from `index` on, given `last_of_kinds` of all of them."""
    return [kind for kind, last in last_of.items() if last >= index]


_task_kind = attrgetter("task_kind")
