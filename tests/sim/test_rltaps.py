"""RL-TAPS' topology model and fixed-step mode: the paper's properties, and its baselines
running to completion."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl
import pytest

from models.heuristics import make_scheduler
from tracelib.catalogue import RLTAPS_CATALOGUE
from tracelib.scenarios.rltaps import rl_taps_jobs, rl_taps_scenario
from tracelib.sim import JobPlacement, Simulator
from tracelib.sim.topology import TopologyConfig, build_graph, topology_for
from tracelib.synthetic import BimodalConfig

BIG = max(RLTAPS_CATALOGUE, key=lambda jt: jt.model_size_mb)


def model():
    return rl_taps_scenario().speed_model


def rt(placements, jt=BIG) -> np.ndarray:
    return model().reduction_s([jt.type_index] * len(placements), placements)


def gpus(*ids: int) -> JobPlacement:
    return JobPlacement.of(ids, ())


def test_graph_has_the_papers_links_and_bandwidths():
    cfg = TopologyConfig()
    g = build_graph(cfg)
    bandwidths = {d["kind"]: d["bandwidth"] for _, _, d in g.edges(data=True)}
    assert bandwidths == {
        "cpu-cpu": 38.5,
        "cpu-gpu": 40.0,
        "cpu-ibc": 1000.0,
        "ibc-tor": 12.5,
        "tor-ds": 6.25,
    }
    assert cfg.n_gpus == 32 and sum(1 for n in g if n[0] == "gpu") == 32
    assert sum(1 for n in g if n[0] == "tor") == cfg.n_racks


def test_reduction_grows_with_gpus_racks_and_shared_links():
    one_gpu, two, four = rt([gpus(0)]), rt([gpus(0, 1)]), rt([gpus(0, 1, 2, 3)])
    assert one_gpu[0] == 0.0 and 0 < two[0] < four[0]
    # Same GPU count, more racks: slower (x1.2 per extra rack on top of the links).
    racks = TopologyConfig().machines_per_rack * 4  # GPUs per rack
    one_rack = rt([gpus(0, 1, 4, 5)])[0]
    two_racks = rt([gpus(0, 1, racks, racks + 1)])[0]
    four_racks = rt([gpus(0, racks, 2 * racks, 3 * racks)])[0]
    assert one_rack < two_racks < four_racks
    assert four_racks / one_rack >= 1.6 - 1e-9
    # A second job whose paths share the inter-rack links slows the first one down.
    alone = rt([gpus(0, racks)])[0]
    shared = rt([gpus(0, racks), gpus(1, racks + 1)])[0]
    assert shared > alone


def test_one_machine_is_faster_than_spread_over_racks():
    m = model()
    racks = TopologyConfig().machines_per_rack * 4
    t = [BIG.type_index]
    local = m.placed(t, [4], [0], [gpus(0, 1, 2, 3)], 32)[0]
    spread = m.placed(t, [4], [0], [gpus(0, racks, 2 * racks, 3 * racks)], 32)[0]
    assert local > spread > 0
    # Diminishing returns: 8 GPUs do not give twice the speed of 4 for a big gradient.
    eight = m.placed(t, [8], [0], [gpus(*range(8))], 32)[0]
    assert local < eight < 2 * local


def test_topology_is_built_once_per_config():
    assert topology_for(TopologyConfig()) is topology_for(TopologyConfig())


@pytest.mark.parametrize("picker", ["sjf", "random", "tetris-picker"])
def test_baselines_run_to_completion_with_exact_work(picker):
    jobs = rl_taps_jobs(BimodalConfig.rl_taps(n_jobs=30, seed=2))
    scenario = rl_taps_scenario(seed=1)

    def run():
        sched = make_scheduler(picker, "first-fit")
        cat, speed = scenario.catalogue, scenario.speed_model
        return Simulator(jobs, sched, scenario.cfg, cat, speed_model=speed).run()

    result = run()
    assert result.jobs["finish_s"].null_count() == 0
    ev = result.events_frame()
    trained = ev.filter(pl.col("kind") == "progress").group_by("job_id").agg(pl.col("value").sum())
    joined = result.jobs.join(trained, on="job_id")
    np.testing.assert_allclose(joined["value"], joined["epochs_real"], rtol=1e-9)
    # One worker per GPU per decision, never more.
    per_gpu = result.placements.group_by("decision", "server").agg(pl.col("workers").sum())
    assert per_gpu["workers"].max() == 1
    # Non-preemptive pickers: a started job keeps its GPUs to the end.
    layouts = Counter(
        (r["job_id"], r["server"]) for r in result.placements.select("job_id", "server").to_dicts()
    )
    decisions = result.placements.group_by("job_id").agg(pl.col("decision").n_unique())
    for job_id, n in decisions.iter_rows():
        servers = {s for (j, s), c in layouts.items() if j == job_id}
        assert all(layouts[(job_id, s)] == n for s in servers)
    assert run().events == result.events
