"""The adapter: live jobs map as a trace's jobs do, and no decision starts a job on a server
without the free GPUs (of the right type), whatever the policy proposes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from models.evaluation import resolve_scheduler
from pipelines.shadow.adapter import decide, fit_live, proposed_starts, to_sim
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.shadow.schemas import Snapshot
from tracelib.sim.snapshot import Allocation, JobPlacement, Placement

T = "2026-11-28T12:00:00Z"


def server(name, free, gpus=8, gpu_type=None):
    return {
        "name": name,
        "gpu_type": gpu_type,
        "gpus": gpus,
        "free_gpus": free,
        "cpus": 64,
        "free_cpus": 64,
        "memory_gib": 512,
        "free_memory_gib": 512,
    }


def job(i, gpus, gpu_type=None, model=None, submit=T):
    return {
        "id": f"j{i}",
        "gpus": gpus,
        "gpu_type": gpu_type,
        "submit_time": submit,
        "model": model,
        "duration_estimate_s": 3600,
    }


def snapshot(servers, pending) -> Snapshot:
    body = {"schema_version": 1, "cluster": "c", "time": T, "servers": servers, "pending": pending}
    return Snapshot.model_validate(body)


@dataclass(frozen=True)
class Greedy:
    """A policy that ignores what is free: every job its requested workers, all on server 0."""

    name: str = "greedy"
    interval_s: float | None = None
    uses_oracle: bool = False

    def decide(self, snap, rng):
        counts = {j.job_id: (j.requested_workers, 0) for j in snap.jobs}
        places = {j.job_id: JobPlacement.of([0] * j.requested_workers, []) for j in snap.jobs}
        return Allocation.of(counts), Placement.of(places)


def rng():
    return np.random.default_rng(0)


def test_models_map_as_a_trace_s_do_and_unknown_ones_stay_put():
    snap = snapshot([server("a", 8)], [job(0, 2, model="ResNet50"), job(1, 1), job(2, 4)])
    view = to_sim(snap)
    by_name = {j.job_id: j for j in view.snapshot.jobs}
    assert by_name[0].model == "resnet-50"
    assert by_name[0].requested_workers == 2 and by_name[0].requested_ps == 2
    assert by_name[2].requested_workers == 4
    # The same job id gets the same model in another snapshot with other jobs around it.
    again = to_sim(snapshot([server("a", 8)], [job(1, 1), job(5, 1)]))
    assert again.snapshot.jobs[0].model == by_name[1].model
    assert {j.model for j in view.snapshot.jobs} <= {jt.model for jt in DL2_CATALOGUE}


def test_fractional_requests_keep_their_share_and_fit_a_partly_free_gpu():
    snap = snapshot([server("a", 0.5, gpus=1)], [job(0, 0.5), job(1, 0.5)])
    view = to_sim(snap)
    assert view.snapshot.jobs[0].worker_demand[0] == 0.5
    out = decide(resolve_scheduler("requested"), snap, rng())
    # Half a GPU is free: one of the two half-GPU jobs starts, the other waits.
    assert [s.job for s in out.start] == ["j0"] and out.wait == ["j1"]
    assert out.start[0].gpus == 0.5 and out.start[0].servers == ["a"]


def test_a_whole_gpu_job_never_lands_on_half_a_free_gpu():
    snap = snapshot([server("a", 1.5, gpus=2)], [job(0, 1), job(1, 1)])
    out = decide(Greedy(), snap, rng())
    assert [s.job for s in out.start] == ["j0"] and out.wait == ["j1"]
    assert out.refused == 1


def test_gpu_types_are_honoured():
    servers = [server("v", 8, gpu_type="V100"), server("a", 0, gpu_type="A100")]
    snap = snapshot(servers, [job(0, 1, gpu_type="A100"), job(1, 1, gpu_type="V100|T4")])
    out = decide(resolve_scheduler("requested"), snap, rng())
    assert [s.job for s in out.start] == ["j1"] and out.wait == ["j0"]
    # Its worker is on the V100 server; its PS (no GPU) may go anywhere with CPUs free.
    assert "v" in out.start[0].servers and out.start[0].gpus == 1
    # A policy that puts the A100 job on the V100 server is overruled.
    typed = decide(Greedy(), snap, rng())
    assert "j0" in typed.wait and typed.refused >= 1


@pytest.mark.parametrize("policy", ["fifo", "drf", "optimus-events", "srtf", "requested"])
def test_no_heuristic_starts_more_than_is_free(policy):
    streams = np.random.default_rng(7)
    free = streams.choice([0, 0.5, 1, 1.5, 2, 3, 8], size=12)
    servers = [server(f"s{i}", float(f)) for i, f in enumerate(free)]
    gpus = streams.choice([0.25, 0.5, 1, 2, 4], size=15)
    snap = snapshot(servers, [job(i, float(g)) for i, g in enumerate(gpus)])
    out = decide(resolve_scheduler(policy), snap, rng())
    assert out.start, "something fits"
    view = to_sim(snap)
    placed = proposed_starts(view, *resolve_scheduler(policy).decide(view.snapshot, rng()))
    fitting, refused = fit_live(snap, placed, view.typed)
    assert len(fitting) == len(out.start) and len(refused) == out.refused
    # Independently: whole GPUs taken per server never exceed its whole free GPUs, and
    # shares never exceed what is free in all.
    used: dict[str, float] = {}
    for start in fitting:
        for task in start.tasks:
            if task.worker:
                used[servers[task.server]["name"]] = (
                    used.get(servers[task.server]["name"], 0.0) + task.demand[0]
                )
    for s in servers:
        assert used.get(s["name"], 0.0) <= s["free_gpus"] + 1e-9


def test_a_snapshot_without_pending_jobs_starts_nothing():
    out = decide(Greedy(), snapshot([server("a", 8)], []), rng())
    assert out.start == [] and out.wait == [] and out.refused == 0
