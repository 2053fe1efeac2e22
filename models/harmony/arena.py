"""Harmony in the arena: its placement network deciding where the tasks of an allocation it
did not make go, in the DL2 setting every scheduler is evaluated in (96 servers, a window of
20 visible jobs, every job re-decided each slot).

Harmony's own setting (section II) has jobs with fixed worker and PS counts whose tasks,
once placed, stay put; the arena composes it with the jobs' requested allocation (every job
its requested workers and PSs while they fit, `RequestedAllocation`), which is that
setting. `ArenaPlacement` turns each decision into Harmony's view of it
(`harmony_view`): jobs the allocation gives the counts they already run with keep their
servers and become the running jobs (`Snapshot.fixed_jobs`: context, their resources
reserved), and the network places the rest one task at a time through the placement mask,
as in its own scenario. A job the mask cannot place whole (fragmentation around the jobs
that stay) waits for the next slot; the heuristics would move the running jobs instead,
which Harmony never does.

A policy is sized to the evaluation's cluster and window when loaded
(`HarmonyPolicy.resized`): the pair head's weights do not depend on either. On servers with
GPU types (a trace's node list) the network, which reads no types, is offered only the
servers of the types a job accepts (`PlacementDraft.allowed`: its mask, as every other
scheduler's placement is checked).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.harmony.placement import HarmonyPolicy
from tracelib.sim.snapshot import (
    Allocation,
    ClusterView,
    JobPlacement,
    JobView,
    Placement,
    Snapshot,
    held_by_tasks,
    read_only,
)


def harmony_view(
    snap: Snapshot, alloc: Allocation
) -> tuple[Snapshot, dict[int, tuple[int, int]], dict[int, JobPlacement]]:
    """Harmony's view of a DL2-setting decision: (a snapshot whose `jobs` are the allocated
    jobs to place and whose `fixed_jobs` are the jobs that keep their servers, the counts
    to place by job id, the kept placements by job id).

    A job keeps its servers when the allocation gives it exactly the workers and PSs it
    ran with; any other allocated job is placed from scratch (with the requested
    allocation a job's counts never change while it runs)."""
    kept: dict[int, JobPlacement] = {}
    fixed: list[JobView] = []
    todo: list[JobView] = []
    counts: dict[int, tuple[int, int]] = {}
    for job in snap.jobs:
        want = alloc.get(job.job_id)
        if want == (0, 0):
            continue
        has = (len(job.placement.workers), len(job.placement.ps))
        if has == want:
            kept[job.job_id] = job.placement
            fixed.append(replace(job, workers=has[0], ps=has[1]))
        else:
            counts[job.job_id] = want
            todo.append(replace(job, workers=0, ps=0, placement=JobPlacement()))
    c = snap.cluster
    reserved = read_only(held_by_tasks(fixed, c.n_servers))
    cluster = ClusterView(c.capacity, reserved, reserved, gpu_types=c.gpu_types)
    view = replace(snap, cluster=cluster, jobs=tuple(todo), fixed_jobs=tuple(fixed))
    return view, counts, kept


@dataclass(frozen=True, eq=False)
class ArenaPlacement:
    """A Harmony placement policy as the arena's `PlacementPolicy` (module docstring)."""

    policy: HarmonyPolicy
    """Sized to the evaluation's cluster and window (`HarmonyPolicy.resized`)."""
    name: str = "harmony"

    def place(self, snap: Snapshot, alloc: Allocation, rng: np.random.Generator) -> Placement:
        """Jobs whose counts are unchanged stay; the network places the others greedily."""
        view, counts, kept = harmony_view(snap, alloc)
        if not counts:
            return Placement.of(kept)
        _, placed = self.policy.place_counts(view, counts)
        return Placement.of({**kept, **placed.jobs})
