"""Placement policies: which server each worker and PS of an allocation goes to.

All three share one procedure (`_place`), differing in the order tasks are placed and the
rule that picks a server:

    load-balancing  least-loaded fitting server (DL2's default, Kubernetes/Mesos style)
    bin-packing     first fit, jobs in decreasing order of dominant share (Borg, Tetris)
    random          a fitting server uniformly at random

Servers are filled up to `ClusterView.available` (what running jobs hold under Harmony's
fixed placement is not theirs to give). The procedure: tasks a job keeps (its workers/PSs
up to the smaller of the old and new counts) stay on their servers, shrinking jobs drop
tasks from the servers where they have the most; new tasks are placed by the rule. If some
new task fits nowhere (fragmentation), everything is placed again from scratch by the
rule; tasks that still do not fit are left out, and the job runs with fewer (the engine
logs it). A job whose trace names GPU types has its workers placed only on servers of those
types; a worker asking for a share of a GPU shares one with others (`FreePool`).

These live in tracelib (not models/) because they are the cluster's own mechanics, shared by
every system: the simulator's default, Harmony's baselines and its exploration.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tracelib.sim.cluster import FreePool, Vec, is_share, summed_demands, task_arrays
from tracelib.sim.snapshot import Allocation, JobPlacement, JobView, Placement, Snapshot

Rule = Callable[[FreePool, Vec, np.random.Generator, frozenset[str] | None], int]
Task = tuple[int, str, Vec]  # (job_id, "w" | "p", demand)


def _shrink(servers: tuple[int, ...], keep: int) -> list[int]:
    """Keep `keep` of a job's tasks, dropping from the servers holding most of them (ties:
    the highest server index) so the job stays spread as before."""
    if keep >= len(servers):
        return list(servers)
    counts = Counter(servers)
    for _ in range(len(servers) - keep):
        server = max(counts, key=lambda s: (counts[s], s))
        counts[server] -= 1
        if counts[server] == 0:
            del counts[server]
    return sorted(counts.elements())


def _tasks(job: JobView, workers: int, ps: int) -> list[Task]:
    return [(job.job_id, "w", job.worker_demand)] * workers + [
        (job.job_id, "p", job.ps_demand)
    ] * ps


def _place_tasks(pool: FreePool, tasks: list[Task], rule: Rule, rng, out, allowed) -> bool:
    ok = True
    for job_id, role, demand in tasks:
        server = rule(pool, demand, rng, allowed[job_id])
        if server < 0:
            ok = False
            continue
        pool.take_unchecked(server, demand)  # the rule chose it for this demand
        out[job_id][0 if role == "w" else 1].append(server)
    return ok


def _place(
    snap: Snapshot,
    alloc: Allocation,
    rng: np.random.Generator,
    rule: Rule,
    order: Callable[[Snapshot, list[tuple[JobView, int, int]]], list[Task]],
) -> Placement:
    # `alloc.get` read once per visible job, from the dict itself (a long queue is read
    # at every decision, and most of it gets nothing)
    counts = alloc.counts
    jobs = []
    for j in snap.jobs:
        c = counts.get(j.job_id)
        if c is not None and c != (0, 0):
            jobs.append((j, *c))
    out: dict[int, tuple[list[int], list[int]]] = {}
    missing: list[tuple[JobView, int, int]] = []
    kept: list[tuple[list[int], Vec]] = []
    shares: dict[int, list[float]] = {}
    allowed = {job.job_id: job.gpu_types for job, _, _ in jobs}
    for job, w, p in jobs:
        kept_w = _shrink(job.placement.workers, min(w, len(job.placement.workers)))
        kept_p = _shrink(job.placement.ps, min(p, len(job.placement.ps)))
        out[job.job_id] = (kept_w, kept_p)
        missing.append((job, w - len(kept_w), p - len(kept_p)))
        kept.append((kept_w, job.worker_demand))
        kept.append((kept_p, job.ps_demand))
        if is_share(job.worker_demand[0]):
            for server in kept_w:
                shares.setdefault(server, []).append(job.worker_demand[0])
    # Kept tasks are a subset of a placement that fitted, so they fit: one vectorized sum.
    available = snap.cluster.available
    used = summed_demands(*task_arrays(kept), snap.cluster.n_servers)
    pool = snap.cluster.pool(available - used, shares)
    if not _place_tasks(pool, order(snap, missing), rule, rng, out, allowed):
        # Fragmentation: start again from an empty cluster, every task by the rule.
        pool = snap.cluster.pool()
        out = {j.job_id: ([], []) for j, _, _ in jobs}
        _place_tasks(pool, order(snap, jobs), rule, rng, out, allowed)
    return Placement.of({jid: JobPlacement.of(w, p) for jid, (w, p) in out.items()})


def _gpu_first(snap: Snapshot, jobs: list[tuple[JobView, int, int]]) -> list[Task]:
    """GPU-needing tasks of every job first (in arrival order), so CPU-only tasks cannot take
    the CPU a GPU task needs next to its GPU; then the rest."""
    tasks = [t for job, w, p in jobs for t in _tasks(job, w, p)]
    return [t for t in tasks if t[2][0] > 0] + [t for t in tasks if t[2][0] <= 0]


def _decreasing_dominant(snap: Snapshot, jobs: list[tuple[JobView, int, int]]) -> list[Task]:
    """Jobs by the dominant share (of one server) of what they place, largest first."""
    server = snap.cluster.capacity.max(axis=0)
    inv = np.where(server > 0, 1.0 / np.where(server > 0, server, 1.0), 0.0)

    def share(item: tuple[JobView, int, int]) -> float:
        job, w, p = item
        total = w * np.asarray(job.worker_demand) + p * np.asarray(job.ps_demand)
        return float((total * inv).max())

    ordered = sorted(jobs, key=share, reverse=True)  # stable: ties keep arrival order
    return [t for job, w, p in ordered for t in _tasks(job, w, p)]


class _TaskRule:
    """What the placement rules below share: they place by resources alone."""

    reads_history = False
    """They read no job history (`Scheduler.reads_history`); not a dataclass field."""


@dataclass(frozen=True)
class LoadBalancing(_TaskRule):
    """Each task to the least-loaded server it fits (ties at random): DL2's default."""

    name: str = "load-balancing"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Place `alloc`, GPU tasks first, each on the least-loaded server it fits."""
        return _place(
            snap, alloc, rng, lambda pool, d, r, a: pool.least_loaded(d, r, a), _gpu_first
        )


@dataclass(frozen=True)
class BinPacking(_TaskRule):
    """Multi-resource bin packing: first-fit decreasing on the jobs' dominant share."""

    name: str = "bin-packing"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Place `alloc` first-fit, jobs by decreasing dominant share."""
        return _place(
            snap, alloc, rng, lambda pool, d, r, a: pool.first_fit(d, a), _decreasing_dominant
        )


@dataclass(frozen=True)
class RandomPlacement(_TaskRule):
    """Each task to a fitting server drawn uniformly at random."""

    name: str = "random"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Place `alloc`, GPU tasks first, each on a uniformly drawn fitting server."""
        return _place(snap, alloc, rng, lambda pool, d, r, a: pool.uniform(d, r, a), _gpu_first)
