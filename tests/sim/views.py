"""Job views the tests of scheduling rules build by hand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.envs.environments import ExternalPolicy
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
