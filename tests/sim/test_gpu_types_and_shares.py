"""Heterogeneous clusters (servers with GPU types) and fractional GPUs (shares of one GPU):
the pool's bookkeeping, then whole replays under every heuristic and placement rule."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import polars as pl
import pytest

from models.heuristics import HEURISTICS, make_scheduler
from tracelib.sim import (
    ClusterConfig,
    JobSpec,
    ServerGroup,
    SimConfig,
    SpeedConfig,
    jobs_from_frame,
    simulate,
)
from tracelib.sim.cluster import FreePool

EXACT = SpeedConfig(truth="analytical", speed_variation=0.0, slot_noise=0.0)
WORKER = (1.0, 4.0, 10.0)


def share(x: float) -> tuple[float, float, float]:
    return (x, 4.0, 10.0)


# -- the pool ----------------------------------------------------------------------------------


def test_shares_pack_onto_one_gpu_and_are_checked_per_gpu():
    pool = FreePool(np.array([[2.0, 64.0, 256.0]]))
    pool.take(0, share(0.6))
    pool.take(0, share(0.6))  # does not fit next to the first: a second GPU
    # 0.8 of a GPU is free in all, but no single GPU has 0.5 left.
    assert pool.free_of(0)[0] == pytest.approx(0.8)
    assert not pool.fits(0, share(0.5))
    assert pool.fits(0, share(0.4))
    assert not pool.fits(0, WORKER)
    pool.give(0, share(0.6))
    assert pool.fits(0, WORKER)  # a whole GPU is free again


def test_several_shares_share_one_gpu_leaving_the_other_whole():
    pool = FreePool(np.array([[2.0, 64.0, 256.0]]))
    for _ in range(4):
        pool.take(0, share(0.25))
    assert pool.fits(0, WORKER) and not pool.fits(0, (2.0, 4.0, 10.0))
    pool.take(0, WORKER)
    assert not pool.any_fit(share(0.1))


def test_a_rebuilt_pool_packs_the_shares_already_placed():
    free = np.array([[2.0 - 1.2, 64.0, 256.0]])
    pool = FreePool(np.array([[2.0, 64.0, 256.0]]), free, shares={0: [0.6, 0.6]})
    assert not pool.fits(0, share(0.5)) and pool.fits(0, share(0.4))


def test_gpu_types_restrict_gpu_tasks_only():
    cap = np.array([[2.0, 16.0, 48.0]] * 3)
    pool = FreePool(cap, gpu_types=["T4", "V100", None])
    v100 = frozenset({"V100"})
    assert pool.first_fit(WORKER, v100) == 1
    assert pool.first_fit(WORKER, frozenset({"A10", "T4"})) == 0
    assert pool.first_fit(WORKER) == 0  # no constraint
    assert pool.first_fit((0.0, 4.0, 10.0), v100) == 0  # a PS needs no GPU: anywhere
    assert pool.first_fit(WORKER, frozenset({"P100"})) == -1
    assert pool.fitting_mask(WORKER, v100).tolist() == [False, True, False]


# -- whole replays ------------------------------------------------------------------------------


def frame(rows: list[dict]) -> pl.DataFrame:
    n = len(rows)
    return pl.DataFrame(
        {
            "job_index": list(range(n)),
            "job_id": [f"j{i}" for i in range(n)],
            "model": ["resnet-50"] * n,
            "epochs": [r.get("epochs", 20.0) for r in rows],
            "num_workers": [r.get("workers", 1) for r in rows],
            "num_ps": [1] * n,
            "num_gpus": [r.get("gpus", 1.0) for r in rows],
            "arrival_s": [0.0] * n,
            "gpu_type": pl.Series([r.get("type") for r in rows], dtype=pl.Utf8),
        }
    )


def worker_servers(result) -> dict[int, set[int]]:
    out: dict[int, set[int]] = defaultdict(set)
    for job, server, workers in result.placements.select("job_id", "server", "workers").rows():
        if workers:
            out[job].add(server)
    return out


def one_gpu_server() -> SimConfig:
    return SimConfig(cluster=ClusterConfig(n_servers=1, gpus=1.0), speed=EXACT)


def test_two_half_gpu_jobs_run_together_on_one_gpu_where_whole_ones_queue():
    shared = simulate(
        jobs_from_frame(frame([{"gpus": 0.5}] * 2)), make_scheduler("drf"), one_gpu_server()
    )
    whole = simulate(
        jobs_from_frame(frame([{"gpus": 1.0}] * 2)), make_scheduler("drf"), one_gpu_server()
    )
    first = shared.placements.filter(pl.col("decision") == 0)
    assert sorted(first.get_column("job_id").unique().to_list()) == [0, 1]
    assert whole.placements.filter(pl.col("decision") == 0).get_column("job_id").unique().len() == 1
    assert shared.jobs["jct_s"].mean() < whole.jobs["jct_s"].mean()


def test_a_share_that_does_not_fit_beside_another_waits():
    jobs = jobs_from_frame(frame([{"gpus": 0.6}, {"gpus": 0.6}]))
    result = simulate(jobs, make_scheduler("drf"), one_gpu_server())
    assert result.placements.filter(pl.col("decision") == 0).get_column("job_id").to_list() == [0]
    assert result.jobs["finish_s"].is_not_null().all()


HETERO = ClusterConfig.heterogeneous(
    ServerGroup(2, gpu_type="T4"), ServerGroup(3, gpu_type="V100M32"), ServerGroup(1)
)
TYPED = [
    {"type": "V100M32", "workers": 2},
    {"type": "T4"},
    {},
    {"type": "V100M16|V100M32", "gpus": 0.5},
    {"type": "T4", "gpus": 0.25},
    {"type": "V100M32"},
    {},
    {"type": "T4|A10", "workers": 2},
]


@pytest.mark.parametrize("placement", ["load-balancing", "bin-packing", "random"])
@pytest.mark.parametrize("allocation", HEURISTICS)
def test_typed_jobs_run_only_on_servers_of_their_type(allocation, placement):
    jobs = jobs_from_frame(frame(TYPED))
    cfg = SimConfig(cluster=HETERO, speed=EXACT, seed=4)
    result = simulate(jobs, make_scheduler(allocation, placement), cfg)
    assert result.jobs["finish_s"].is_not_null().all()
    types = HETERO.server_gpu_types()
    for job, servers in worker_servers(result).items():
        allowed = jobs[job].gpu_types
        if allowed is not None:
            assert {types[s] for s in servers} <= allowed, (job, servers)


def test_replays_on_a_typed_cluster_are_deterministic():
    jobs = jobs_from_frame(frame(TYPED))
    cfg = SimConfig(cluster=HETERO, speed=EXACT, seed=4)
    a = simulate(jobs, make_scheduler("drf", "random"), cfg)
    b = simulate(jobs, make_scheduler("drf", "random"), cfg)
    assert a.jobs.equals(b.jobs) and a.placements.equals(b.placements)


def test_a_job_naming_a_type_no_server_has_is_refused_up_front():
    jobs = jobs_from_frame(frame([{"type": "H100"}]))
    with pytest.raises(ValueError, match="needs GPU type 'H100', which no server has"):
        simulate(jobs, make_scheduler("fifo"), SimConfig(cluster=HETERO))


def test_an_untyped_cluster_replays_typed_jobs_anywhere():
    jobs = jobs_from_frame(frame([{"type": "H100"}, {"type": "T4"}]))
    result = simulate(jobs, make_scheduler("fifo"), SimConfig(cluster=ClusterConfig(n_servers=2)))
    assert result.jobs["finish_s"].is_not_null().all()


def test_fractional_gpus_become_shares_only_for_one_worker_of_a_gpu_model():
    jobs = jobs_from_frame(frame([{"gpus": 0.5}, {"gpus": 1.0}, {"gpus": 0.5, "workers": 2}]))
    assert [j.gpu_share for j in jobs] == [0.5, None, None]
    with pytest.raises(ValueError, match="gpu_share must be in"):
        JobSpec(job_id=0, model="resnet-50", epochs=1.0, arrival_s=0.0, gpu_share=1.5)


def test_heterogeneous_config_checks_its_groups():
    assert HETERO.n_servers == 6
    assert HETERO.server_capacity().shape == (6, 3)
    assert HETERO.server_gpu_types() == ("T4",) * 2 + ("V100M32",) * 3 + (None,)
    assert ClusterConfig().server_gpu_types() is None
    with pytest.raises(ValueError, match="differs from the groups"):
        ClusterConfig(n_servers=3, groups=(ServerGroup(2),))
