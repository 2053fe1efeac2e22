"""LIF-Line / LIF-Quad: interference-model fits and least-interference-first placement."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from models.heuristics import PLACEMENTS, make_scheduler
from models.heuristics.lif import (
    LIFPlacement,
    default_model,
    features,
    fit_lif,
    foreign_load,
    lif_line,
    usage_matrix,
)
from tests.sim.views import job_view
from tracelib.catalogue import DL2_CATALOGUE, by_name
from tracelib.interference import InterferenceConfig, collect_samples, placement_counts
from tracelib.scenarios.harmony import harmony_testbed
from tracelib.sim import (
    Allocation,
    ClusterConfig,
    ClusterView,
    JobPlacement,
    JobView,
    PlacementPolicy,
    RandomPlacement,
    RequestedAllocation,
    Scheduler,
    SimConfig,
    Snapshot,
    SpeedConfig,
    SpeedModel,
    jobs_from_frame,
    simulate,
)
from tracelib.sim.calibration import HARMONY_TABLE_I
from tracelib.sim.snapshot import held_by_tasks

N_TYPES = len(DL2_CATALOGUE)


@pytest.fixture(scope="module")
def exact() -> pl.DataFrame:
    """Noise-free samples: their placements carry the synthetic relations below."""
    return collect_samples(InterferenceConfig(n_samples=1500, seed=11, speed=SpeedConfig()))


@pytest.fixture(scope="module")
def samples() -> pl.DataFrame:
    return collect_samples(InterferenceConfig(n_samples=3000, seed=5))


def _with_slowdown(frame: pl.DataFrame, kind: str, coef: np.ndarray) -> pl.DataFrame:
    """The frame with measured speeds following slowdown = f_model(load on worst server)."""
    types = frame["type_index"].to_numpy()
    w, p = placement_counts(frame)
    tasks = w + p
    load = foreign_load(types, tasks, usage_matrix(), frame["sample_set"].to_numpy())
    per_server = (features(load, kind) * coef[types][:, None, :]).sum(axis=-1)
    slowdown = np.where(tasks > 0, per_server, -np.inf).max(axis=1)
    measured = frame["isolated_speed"].to_numpy() * (1.0 - slowdown)
    return frame.with_columns(
        pl.Series("measured_speed", measured),
        pl.Series("slowdown", 1.0 - measured / frame["isolated_speed"].to_numpy()),
    )


@pytest.mark.parametrize("kind", ["line", "quad"])
def test_fit_recovers_a_known_relation(exact, kind):
    rng = np.random.default_rng(0)
    n_features = 2 if kind == "line" else 5
    truth = rng.uniform(0.02, 0.12, (N_TYPES, n_features))
    if kind == "quad":
        truth[:, 2:] = rng.uniform(-0.01, 0.01, (N_TYPES, 3))
    frame = _with_slowdown(exact, kind, truth)
    assert 0.05 < frame["slowdown"].mean() < 0.6
    model = fit_lif(frame, kind)
    np.testing.assert_allclose(model.coef, truth, rtol=1e-6, atol=1e-9)
    assert model.fit_error < 1e-8
    assert model.n_samples == frame.height and set(model.fitted_models) == set(by_name())


def test_line_cannot_fit_a_quadratic_relation_that_quad_recovers(exact):
    truth = np.zeros((N_TYPES, 5))
    truth[:, 0] = 0.02
    truth[:, 2] = 0.3  # slowdown = 0.02 cpu + 0.3 cpu^2
    frame = _with_slowdown(exact, "quad", truth)
    assert fit_lif(frame, "quad").fit_error < 1e-8
    assert fit_lif(frame, "line").fit_error > 0.01


def test_quad_fits_the_simulators_samples_at_least_as_well_as_line(samples):
    line, quad = fit_lif(samples, "line"), fit_lif(samples, "quad")
    assert quad.fit_error <= line.fit_error
    # Useful models, but neither is the simulator's interference: measurement noise (5%) and
    # the PCIe/disk channels LIF does not watch stay in the error.
    assert 0.02 < quad.fit_error < line.fit_error < 0.2
    # Watching all four channels fits better still (LIF's blind spot is real).
    assert fit_lif(samples, "line", ("cpu", "pcie", "net", "disk")).fit_error < line.fit_error


def test_fit_rejects_bad_arguments(samples):
    with pytest.raises(ValueError, match="kind"):
        fit_lif(samples, "cubic")
    with pytest.raises(ValueError, match="channels"):
        fit_lif(samples, "line", ("gpu",))
    with pytest.raises(ValueError, match="no samples"):
        fit_lif(samples.head(0), "line")


def _view(job_id: int, model: str, placement: JobPlacement | None = None) -> JobView:
    placement = placement or JobPlacement()
    return job_view(
        by_name()[model],
        job_id,
        arrival_s=float(job_id),
        workers=len(placement.workers),
        ps=len(placement.ps),
        placement=placement,
    )


def _snapshot(jobs, fixed=(), n_servers: int = 3) -> Snapshot:
    c = ClusterConfig(n_servers=n_servers)
    capacity = np.tile([c.gpus, c.cpus, c.mem_gb], (n_servers, 1))
    reserved = held_by_tasks(fixed, n_servers)
    return Snapshot(
        time_s=0.0,
        slot=0,
        slot_s=1200.0,
        decision=0,
        cluster=ClusterView(capacity, reserved + held_by_tasks(jobs, n_servers), reserved),
        jobs=tuple(jobs),
        catalogue=DL2_CATALOGUE,
        fixed_jobs=tuple(fixed),
    )


def _interference(placement, views, n_servers: int, model) -> tuple[float, float]:
    """(simulated, predicted) mean slowdown of the placed jobs."""
    types = [v.type_index for v in views]
    pls = [placement.get(v.job_id) for v in views]
    w = [len(p.workers) for p in pls]
    ps = [len(p.ps) for p in pls]
    sm = SpeedModel()
    packed = sm.placed(types, w, ps, pls, n_servers)
    alone = np.array(
        [
            sm.placed([t], [a], [b], [p], n_servers)[0]
            for t, a, b, p in zip(types, w, ps, pls, strict=True)
        ]
    )
    tasks = np.zeros((len(views), n_servers))
    for i, p in enumerate(pls):
        np.add.at(tasks[i], list(p.workers + p.ps), 1)
    return float(np.mean(1.0 - packed / alone)), float(
        model.job_slowdown(np.array(types), tasks).mean()
    )


@pytest.mark.parametrize("kind", ["line", "quad"])
def test_lif_beats_random_placement_on_harmonys_packed_case(kind):
    # Harmony case study 1: its six 1-worker + 1-PS jobs on three servers (fully packed).
    views = [_view(i, m) for i, m in enumerate(HARMONY_TABLE_I)]
    snap = _snapshot(views, n_servers=3)
    alloc = Allocation.of({v.job_id: (1, 1) for v in views})
    policy = LIFPlacement(default_model(kind))
    placed = policy.place(snap, alloc, np.random.default_rng(0))
    assert all(len(placed.get(v.job_id).workers + placed.get(v.job_id).ps) == 2 for v in views)
    lif_sim, lif_pred = _interference(placed, views, 3, policy.model)
    rand = np.array(
        [
            _interference(
                RandomPlacement().place(snap, alloc, np.random.default_rng(s)),
                views,
                3,
                policy.model,
            )
            for s in range(40)
        ]
    )
    assert lif_sim < rand[:, 0].mean() - 0.05, (lif_sim, rand[:, 0].mean())
    assert lif_pred < rand[:, 1].mean() - 0.02, (lif_pred, rand[:, 1].mean())
    assert lif_sim < np.quantile(rand[:, 0], 0.1)
    assert lif_pred < np.quantile(rand[:, 1], 0.25)
    # Against bin packing LIF holds no edge here: the simulator's contention (PCIe, disk,
    # the knee) is not LIF's CPU + network model (measured: LIF-Line 0.38 vs bin packing
    # 0.32 average slowdown, LIF-Quad 0.32), so no assertion on that comparison.


def test_lif_keeps_running_tasks_and_avoids_fixed_jobs():
    # A fixed ResNeXt-110 job fills half of server 0; a new CNN-text job should not join it.
    fixed = [_view(0, "resnext-110", JobPlacement.of([0], [0]))]
    new = [_view(1, "cnn-text")]
    snap = _snapshot(new, fixed, n_servers=2)
    placed = lif_line().place(snap, Allocation.of({1: (1, 1)}), np.random.default_rng(0))
    assert placed.get(1) == JobPlacement.of([1], [1])
    assert 0 not in placed.jobs
    # A running job given the same counts keeps its servers.
    running = [_view(2, "vgg-16", JobPlacement.of([0, 1], [1])), _view(3, "wlm")]
    snap = _snapshot(running, n_servers=2)
    placed = lif_line().place(snap, Allocation.of({2: (2, 1), 3: (1, 1)}), np.random.default_rng(0))
    assert placed.get(2) == JobPlacement.of([0, 1], [1])


def test_capacity_is_never_exceeded_when_not_everything_fits():
    # Eight 3-worker + 3-PS jobs on two servers: most tasks cannot be placed.
    views = [_view(i, m) for i, m in enumerate((*HARMONY_TABLE_I, "dssm", "inception-bn"))]
    snap = _snapshot(views, n_servers=2)
    alloc = Allocation.of({v.job_id: (3, 3) for v in views})
    for policy in (lif_line(), LIFPlacement(default_model("quad"))):
        placed = policy.place(snap, alloc, np.random.default_rng(0))
        placed_views = [
            _view(v.job_id, v.model, placed.get(v.job_id)) for v in views if v.job_id in placed.jobs
        ]
        used = held_by_tasks(placed_views, 2)
        assert (used <= snap.cluster.capacity + 1e-9).all()
        assert used[:, 1].sum() == snap.cluster.capacity[:, 1].sum()  # CPU: every slot taken


@pytest.mark.parametrize("fixed_placement", [True, False])
def test_simulations_with_lif_run_to_completion(fixed_placement):
    # Harmony's workload: Table I models, 1..3 workers and PSs, ~3 jobs per 20-minute interval.
    rng = np.random.default_rng(2)
    n = 24
    frame = pl.DataFrame(
        {
            "model": rng.choice(list(HARMONY_TABLE_I), n),
            "epochs": rng.uniform(100.0, 800.0, n),
            "num_workers": rng.integers(1, 4, n),
            "num_ps": rng.integers(1, 4, n),
            "arrival_s": np.sort(rng.integers(0, 8, n)) * 1200.0,
        }
    )
    jobs = jobs_from_frame(frame)
    cfg = SimConfig(
        cluster=harmony_testbed(),
        fixed_placement=fixed_placement,
        speed=SpeedConfig(slot_noise=0.05),
    )
    jct = {}
    for name in ("lif-line", "lif-quad", "random"):
        result = simulate(jobs, Scheduler(RequestedAllocation(), PLACEMENTS.create(name)), cfg)
        assert result.jobs["finish_s"].is_not_null().all()  # engine validated every decision
        jct[name] = result.avg_jct_s
    assert jct["lif-line"] < jct["random"] and jct["lif-quad"] < jct["random"]


def test_registry_factories_share_one_cached_fit():
    a, b = PLACEMENTS.create("lif-line"), PLACEMENTS.create("lif-line")
    assert isinstance(a, PlacementPolicy) and a.name == "lif-line"
    assert a.model is b.model
    quad = PLACEMENTS.create("lif-quad")
    assert quad.name == "lif-quad" and quad.model.kind == "quad"
    assert quad.model.n_samples >= 2000
    assert make_scheduler("drf", "lif-quad").name == "drf+lif-quad"
    with pytest.raises(ValueError):
        a.model.coef[0, 0] = 1.0  # read-only


def test_lif_placement_is_deterministic():
    views = [_view(i, m) for i, m in enumerate(HARMONY_TABLE_I)]
    snap = _snapshot(views, n_servers=3)
    alloc = Allocation.of({v.job_id: (2, 1) for v in views})
    first = lif_line().place(snap, alloc, np.random.default_rng(0))
    assert lif_line().place(snap, alloc, np.random.default_rng(99)) == first
