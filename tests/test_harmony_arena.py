"""Harmony in the arena: its placement policy trained on a workload set's train split in the
DL2 setting (registered as harmony-arena, resumed from, cached), loaded beside the
heuristics in the evaluation, jobs keeping their servers while they run; determinism."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch

from models.evaluation import EvalConfig, evaluate
from models.harmony.arena import ArenaPlacement, harmony_view
from models.harmony.placement import HarmonyNetConfig, HarmonyPolicy, PolicyNet
from models.harmony.reward import RewardTrainConfig
from models.harmony.stage_config import HarmonyArenaConfig, HarmonyStageConfig
from models.harmony.train import PlacementTrainConfig, train_placement
from models.heuristics.registry import ALLOCATIONS
from pipelines.registry import SYSTEMS
from pipelines.stages import derive_stage, interference_stage, learned_policies, synthetic_stage
from pipelines.systems.harmony.stages import (
    ARENA_SYSTEM,
    fit_reward_model_stage,
    train_arena_stage,
    train_placement_stage,
)
from pipelines.trained import job_sequences_of, set_workloads
from tests.learned_eval import tiny_set_evaluation
from tracelib.interference import InterferenceConfig
from tracelib.scenarios.harmony import ArrivalConfig
from tracelib.sim import ClusterConfig, Scheduler, Simulator
from tracelib.sim.snapshot import Allocation, ClusterView, JobPlacement, JobView, Snapshot
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import connect, read_frame

NET = HarmonyNetConfig(hidden=(32, 32, 16), row_embed=8)
OWN = HarmonyStageConfig(
    reward=RewardTrainConfig(epochs=2, hidden=(32, 32, 16)),
    train=PlacementTrainConfig(net=NET, updates=2, val_every=0, n_workers=2),
    variants=("harmony",),
    arrivals=ArrivalConfig(n_jobs=6),
    n_train_sequences=1,
    n_val_sequences=1,
)
CLUSTER = ClusterConfig(n_servers=8)
_base = HarmonyArenaConfig().train
ARENA = HarmonyArenaConfig(
    workload_set="tiny",
    train=replace(
        _base,
        net=replace(NET, n_servers=CLUSTER.n_servers, window=6),
        sim=replace(_base.sim, cluster=CLUSTER, window=6),
        updates=3,
        val_every=2,
        n_workers=2,
        minibatch=8,
    ),
    train_sequences=2,
    val_sequences=1,
)


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory):
    """Set "tiny" (4 train, 1 validation, 1 test sequences of 10 jobs), a reward model and
    an own-scenario Harmony policy of the arena network's architecture."""
    path = str(tmp_path_factory.mktemp("harmony-arena") / "wh.duckdb")
    source = synthetic_stage(path, "dl2-diurnal", DiurnalConfig(n_jobs=60, seed=0))
    derive_stage(path, [source.source_id], DeriveConfig(name="tiny", jobs_per_sequence=10))
    interference_stage(path, InterferenceConfig(n_samples=200, seed=0))
    reward = fit_reward_model_stage(path, OWN).reward_model
    own = train_placement_stage(path, OWN, reward.policy_id)["harmony"]
    return path, reward.policy_id, own.policy_id


@pytest.fixture(scope="module")
def trained(warehouse):
    path, reward_id, own_id = warehouse
    first = train_arena_stage(path, ARENA, reward_id, own_id)
    return path, first


def test_arena_training_transfers_registers_caches_and_resumes(warehouse, trained):
    path, reward_id, own_id = warehouse
    _, first = trained
    assert first.policy_id.startswith(f"{ARENA_SYSTEM}-")
    # No arena policy yet: the own-scenario policy's pair head, resized, is the start.
    assert first.parent_policy_id == own_id and first.metrics["start"] == "transfer"
    again = train_arena_stage(path, ARENA, reward_id, own_id)
    assert again.policy_id == first.policy_id and again.metrics["cached"]
    longer = replace(ARENA, train=replace(ARENA.train, updates=4))
    resumed = train_arena_stage(path, longer, reward_id, own_id)
    assert resumed.parent_policy_id == first.policy_id and resumed.metrics["start"] == "latest"
    with connect(path) as con:
        rows = read_frame(
            con, "SELECT policy_id, system FROM policies WHERE system = ?", [ARENA_SYSTEM]
        )
        curve = read_frame(
            con,
            "SELECT step FROM harmony_learning_curves WHERE policy_id = ? ORDER BY step",
            [first.policy_id],
        )
    assert set(rows["policy_id"]) == {first.policy_id, resumed.policy_id}
    assert curve["step"].to_list() == [2, 3]
    scratch = train_arena_stage(path, replace(ARENA, init="scratch"), reward_id, own_id)
    assert scratch.parent_policy_id is None and scratch.metrics["start"] == "scratch"


def test_arena_policy_places_beside_the_heuristics(trained):
    path, first = trained
    refs = learned_policies(path, {"harmony": first.policy_id}, SYSTEMS.loaders())
    assert refs[0].system == ARENA_SYSTEM
    # Trained with a window of 6: the loader sizes it to the evaluation's 20.
    schedulers = ("lif-line", "requested+load-balancing")
    jobs, workloads, cfg = tiny_set_evaluation(path, refs, schedulers, 1, CLUSTER)
    tables = evaluate(jobs, workloads, cfg)
    assert tables.runs.select("scheduler", "policy").rows() == [
        ("lif-line", "requested+lif-line"),
        ("requested+load-balancing", "requested+load-balancing"),
        ("harmony", f"requested+{first.policy_id}"),
    ]
    summary = tables.summary.filter(pl.col("scheduler") == "harmony")
    assert summary["family"].to_list() == ["harmony"]
    assert summary["ratio_to_best_heuristic"][0] > 0


def test_jobs_keep_their_servers_while_they_run(trained):
    path, first = trained
    with connect(path) as con:
        test = job_sequences_of(set_workloads(con, "tiny", "test"))[0]
    [ref] = learned_policies(path, {"harmony": first.policy_id}, SYSTEMS.loaders())
    cfg = EvalConfig(schedulers=("requested+load-balancing",), cluster=CLUSTER)
    policy = ref.loader(ref, cfg)
    result = Simulator(test, policy, cfg.sim_config(0)).run()
    assert result.jobs["finish_s"].is_not_null().all()
    # Each job runs on one set of servers from its first decision to its last.
    placed = result.placements.group_by("job_id", "decision").agg(
        pl.struct("server", "workers", "ps").sort_by("server").alias("where")
    )
    moves = placed.group_by("job_id").agg(pl.col("where").n_unique().alias("n"))
    assert moves["n"].max() == 1


def _view(job_id: int, placement: JobPlacement, workers: int, ps: int) -> JobView:
    return JobView(
        job_id=job_id,
        model="resnet-50",
        type_index=0,
        arrival_s=float(job_id),
        epochs_est=10.0,
        epochs_done=0.0,
        workers=workers,
        ps=ps,
        requested_workers=2,
        requested_ps=1,
        max_workers=16,
        worker_demand=(1.0, 4.0, 10.0),
        ps_demand=(0.0, 4.0, 10.0),
        placement=placement,
    )


def test_harmony_view_keeps_unchanged_jobs_and_places_the_rest():
    from tracelib.catalogue import DL2_CATALOGUE

    capacity = np.tile([2.0, 16.0, 48.0], (3, 1))
    running = _view(0, JobPlacement.of([0, 0], [1]), 2, 1)
    waiting = _view(1, JobPlacement(), 0, 0)
    grown = _view(2, JobPlacement.of([2], [2]), 1, 1)
    snap = Snapshot(
        time_s=0.0,
        slot=0,
        slot_s=1200.0,
        decision=0,
        cluster=ClusterView(capacity, capacity * 0),
        jobs=(running, waiting, grown),
        catalogue=DL2_CATALOGUE,
    )
    alloc = Allocation.of({0: (2, 1), 1: (2, 1), 2: (2, 1)})
    view, counts, kept = harmony_view(snap, alloc)
    assert kept == {0: running.placement}
    assert counts == {1: (2, 1), 2: (2, 1)}
    assert [j.job_id for j in view.fixed_jobs] == [0]
    assert [j.job_id for j in view.jobs] == [1, 2]
    assert all(j.placement == JobPlacement() for j in view.jobs)
    np.testing.assert_allclose(view.cluster.available[0], [0.0, 8.0, 28.0])
    np.testing.assert_allclose(view.cluster.available[1], [2.0, 12.0, 38.0])
    torch.manual_seed(0)
    net = PolicyNet(replace(NET, n_servers=3, window=4))
    placement = ArenaPlacement(HarmonyPolicy(net)).place(snap, alloc, np.random.default_rng(0))
    assert placement.get(0) == running.placement
    used = np.zeros((3, 3))
    for job_id, where in placement.jobs.items():
        w, p = alloc.get(job_id)
        assert (len(where.workers), len(where.ps)) == (w, p)
        for s in where.workers:
            used[s] += running.worker_demand
        for s in where.ps:
            used[s] += running.ps_demand
    assert (used <= capacity + 1e-9).all()
    _ = Scheduler(ALLOCATIONS.create("requested"), ArenaPlacement(HarmonyPolicy(net)))


def test_arena_training_is_deterministic(warehouse):
    path, reward_id, _ = warehouse
    from models.checkpoints import load_registered
    from models.harmony.reward import predictor_from_checkpoint

    with connect(path) as con:
        jobs = job_sequences_of(set_workloads(con, "tiny", "train", 1))
        predictor = predictor_from_checkpoint(load_registered(con, reward_id))
    credit = predictor.for_cluster(CLUSTER.n_servers, 16)
    cfg = replace(ARENA.train_config(), updates=2, val_every=0)
    one, _, _ = train_placement(jobs, [], credit, cfg)
    two, _, _ = train_placement(jobs, [], credit, cfg)
    for (k, a), (_, b) in zip(
        one.net.state_dict().items(), two.net.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k


def test_resizing_keeps_the_pair_weights_and_refuses_the_flat_head(warehouse):
    path, reward_id, _ = warehouse
    from models.checkpoints import load_registered
    from models.harmony.reward import predictor_from_checkpoint

    policy = HarmonyPolicy(PolicyNet(replace(NET, n_servers=6, window=10)))
    sized = policy.resized(96, 20)
    assert (sized.cfg.n_servers, sized.cfg.window) == (96, 20) and sized.value_net is None
    for (k, a), (_, b) in zip(
        policy.net.state_dict().items(), sized.net.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), k
    assert policy.resized(6, 10) is policy
    with pytest.raises(ValueError, match="pair head"):
        HarmonyPolicy(PolicyNet(replace(NET, head="flat"))).resized(96, 20)
    # The reward predictor's pair network predicts the same speeds for the same jobs on a
    # larger cluster (the extra servers empty).
    with connect(path) as con:
        predictor = predictor_from_checkpoint(load_registered(con, reward_id))
    m = predictor.cfg.n_servers
    places = [JobPlacement.of([0, 1], [1]), JobPlacement.of([1], [2])]
    small = predictor.placed([0, 1], [2, 1], [1, 1], places, m)
    large = predictor.for_cluster(m + 10, 40).placed([0, 1], [2, 1], [1, 1], places, m + 10)
    np.testing.assert_allclose(large, small, rtol=1e-5)


def test_the_arena_training_defaults_to_the_evaluations_simulator():
    from models.evaluation import eval_setting
    from models.harmony.config import arena_training

    trained = arena_training()
    assert trained.sim == replace(eval_setting(), fixed_placement=True)
    assert (trained.net.n_servers, trained.net.window) == (eval_setting().cluster.n_servers, 20)
