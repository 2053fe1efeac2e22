"""Job views the tests of scheduling rules build by hand."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.envs.environments import ExternalPolicy
from tracelib.envs.observation import PlacementDraft
from tracelib.sim import ClusterConfig, SimConfig, Simulator
from tracelib.sim.cluster import FreePool
from tracelib.sim.config import ServerGroup
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import JobView, Snapshot


def job_view(jt: JobType, job_id: int = 0, **fields: Any) -> JobView:
    """The view of job `job_id` of type `jt` as it arrives at time 0: 100 epochs estimated,
    none done, no tasks, one worker and one PS requested, the type's cap and demands;
    `fields` set any of these (or the view's other fields) instead."""
    defaults = {
        "job_id": job_id,
        "model": jt.model,
        "type_index": jt.type_index,
        "arrival_s": 0.0,
        "epochs_est": 100.0,
        "epochs_done": 0.0,
        "workers": 0,
        "ps": 0,
        "requested_workers": 1,
        "requested_ps": 1,
        "max_workers": jt.max_workers,
        "worker_demand": jt.worker_demand,
        "ps_demand": jt.ps_demand,
    }
    return JobView(**(defaults | fields))


def random_snapshot(rng: np.random.Generator, n_jobs: int | None = None) -> Snapshot:
    """A decision over a few jobs of random DL2 types on a small random cluster (plain, or
    two GPU types), the jobs' caps mostly small (1 to 4) or the type's, some workers asking
    for half a GPU and, on a typed cluster, some allowed on one type only: varied cases for
    what a builder or a schedule keeps up to date step by step."""
    n_servers = int(rng.integers(1, 9))
    cpus = float(rng.choice([6.0, 8.0, 12.0, 16.0]))  # below 8: a pair may need two servers
    if rng.random() < 0.3:
        cluster = ClusterConfig.heterogeneous(
            ServerGroup(n_servers, cpus=cpus, gpu_type="A"),
            ServerGroup(int(rng.integers(1, 3)), gpu_type="B"),
        )
    else:
        cluster = ClusterConfig(n_servers=n_servers, cpus=cpus)
    typed = bool(cluster.groups)
    n = int(rng.integers(1, 7)) if n_jobs is None else n_jobs
    specs = [
        JobSpec(i, DL2_CATALOGUE[int(rng.integers(len(DL2_CATALOGUE)))].model, 50.0, 0.0)
        for i in range(max(n, 1))  # a simulator with no job has no decision to show
    ]
    sim = Simulator(specs, ExternalPolicy(), SimConfig(cluster=cluster, window=None))
    snap = sim.session().snapshot
    views = []
    for view in snap.jobs:
        fields: dict[str, Any] = {"max_workers": int(rng.choice([1, 2, 3, 4, view.max_workers]))}
        if rng.random() < 0.25:
            fields["worker_demand"] = (0.5, *view.worker_demand[1:])
        if typed and rng.random() < 0.4:
            fields["gpu_types"] = frozenset({str(rng.choice(["A", "B"]))})
        views.append(replace(view, **fields))
    return replace(snap, jobs=tuple(views[:n]))


def random_pool(snap: Snapshot, rng: np.random.Generator) -> FreePool:
    """`snap`'s pool with a random part of each server already taken (whole GPUs)."""
    cap = snap.cluster.capacity
    used = np.floor(rng.random(cap.shape) * rng.random() * (cap + 1.0))
    return snap.cluster.pool(free=cap - np.minimum(used, cap))


def random_free(rng: np.random.Generator, low: int, high: int) -> np.ndarray:
    """(M, 3) free resources of low..high servers in random states (full, empty, between)."""
    cap = np.array([8.0, 32.0, 64.0])
    m = int(rng.integers(low, high))
    return np.round(cap * rng.random((m, 3)) ** rng.choice([0.3, 1.0, 3.0]))


def queue_draft(rng: np.random.Generator, low: int = 10, high: int = 40) -> PlacementDraft:
    """A placement draft without a snapshot: ten waiting jobs on low..high servers in random
    states. Six jobs share a worker demand and differ in their PS demand, what they still
    need and the GPU types they accept (half the servers are of a type some accept); two
    more are exactly like the first two and two like the next two but needing more PSs.
    Nothing is placed yet."""
    free = random_free(rng, low, high)
    typed = rng.random(len(free)) < 0.5
    worker = (float(rng.choice([1, 2])), float(rng.choice([1, 4])), float(rng.choice([2, 8])))
    jobs, need, allowed = [], [], []
    for _ in range(6):
        ps = (0.0, float(rng.choice([1, 2])), float(rng.choice([2, 4])))
        jobs.append(SimpleNamespace(worker_demand=worker, ps_demand=ps, type_index=0))
        need.append([rng.integers(1, 12), rng.integers(0, 3)])
        allowed.append((typed if rng.random() < 0.5 else None, None))
    jobs += jobs[:4]  # two jobs exactly alike others, two needing more PSs
    need += need[:2] + [[w, p + rng.integers(5, 40)] for w, p in need[2:4]]
    allowed += allowed[:4]
    draft = PlacementDraft.__new__(PlacementDraft)
    draft.jobs, draft.free, draft.allowed = tuple(jobs), free, tuple(allowed)
    draft.need = np.array(need, dtype=np.int64)
    draft.placed = [([], []) for _ in jobs]
    draft.tasks = np.zeros((len(free), 1))
    return draft
