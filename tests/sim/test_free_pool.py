"""The allocation hot path against plain references: `FreePool`'s buckets against a
server-by-server scan, the vectorized task sums and (job, server) tables against the
per-task and Counter versions they replaced, bit for bit."""

from __future__ import annotations

from collections import Counter
from functools import reduce

import numpy as np
import polars as pl
import pytest

from models.heuristics import make_scheduler
from tests.sim.views import job_view
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.sim import ClusterConfig, SimConfig, Simulator, dl2_like_frame, jobs_from_frame
from tracelib.sim.builder import (
    any_task_fits,
    kinds_after,
    kinds_full,
    last_of_kinds,
)
from tracelib.sim.cluster import (
    FreePool,
    _share_add,
    _share_remove,
    byte_rows,
    is_share,
    row_classes,
    summed_demands,
    task_arrays,
)
from tracelib.sim.snapshot import JobPlacement
from tracelib.sim.speed import SpeedModel, task_rows

EPS = 1e-9
WORKER, PS = (1.0, 4.0, 10.0), (0.0, 4.0, 10.0)
DEMANDS = (WORKER, PS, (2.0, 8.0, 20.0), (0.0, 1.0, 1.0), (1.0, 2.5, 7.25))


def reference_feasible_fit(free: list, demand) -> int:
    """`feasible_fit` by scanning every server."""
    gpu = demand[0] > EPS
    fitting = [
        ((-f[0] if gpu else f[0]), -f[1], -f[2], s)
        for s, f in enumerate(free)
        if all(f[k] >= demand[k] - EPS for k in range(3))
    ]
    return min(fitting)[3] if fitting else -1


def reference_least_loaded(cap: list, free: list, demand) -> int:
    """`least_loaded` (no random tie-break) by scanning every server."""
    fitting = [
        (round(sum((c - f) / c for c, f in zip(cap[s], free[s], strict=True) if c > 0), 9), s)
        for s in range(len(free))
        if all(free[s][k] + EPS >= demand[k] for k in range(3))
    ]
    return min(fitting)[1] if fitting else -1


@pytest.mark.parametrize("seed", range(6))
def test_pool_choices_match_a_server_by_server_scan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    # mixed capacities: buckets of equal free resources but different servers tie on order
    cap = np.array([[2.0, 16.0, 48.0], [4.0, 16.0, 48.0]])[rng.integers(0, 2, n)]
    free = cap - np.array([0.0, 4.0, 10.0]) * rng.integers(0, 2, (n, 1))
    pool = FreePool(cap, free)
    ref_cap, ref_free = [tuple(c) for c in cap.tolist()], [tuple(f) for f in free.tolist()]
    held: list[tuple[int, tuple]] = []
    for _ in range(300):
        demand = DEMANDS[int(rng.integers(len(DEMANDS)))]
        op = int(rng.integers(4))
        if op == 0:
            want = reference_feasible_fit(ref_free, demand)
            assert pool.feasible_fit(demand) == want
            assert pool.take_feasible(demand) == want
        elif op == 1:
            want = reference_least_loaded(ref_cap, ref_free, demand)
            assert pool.least_loaded(demand) == want
            if want >= 0:
                pool.take(want, demand)
        elif op == 2 and held:
            want, demand = held.pop(int(rng.integers(len(held))))
            pool.give(want, demand)
            ref_free[want] = tuple(f + d for f, d in zip(ref_free[want], demand, strict=True))
            continue
        else:
            fits = [all(f[k] + EPS >= demand[k] for k in range(3)) for f in ref_free]
            assert pool.fitting_mask(demand).tolist() == fits
            assert pool.any_fit(demand) == any(fits)
            assert pool.first_fit(demand) == (fits.index(True) if any(fits) else -1)
            continue
        if want >= 0:
            held.append((want, demand))
            ref_free[want] = tuple(f - d for f, d in zip(ref_free[want], demand, strict=True))
        assert pool.free_array().tolist() == [list(f) for f in ref_free]


@pytest.mark.parametrize("seed", range(3))
def test_remembered_choices_match_a_scan_as_sets_of_buckets_recur(seed):
    """`take_feasible` and `least_loaded` keep their answers per set of active buckets: pairs
    taken (as the allocation builder does) and given back cycle the pool through the same
    sets, where every choice must still be what a server-by-server scan picks (ties between
    buckets of equal free resources or load and different capacity included)."""
    rng = np.random.default_rng(seed)
    n = 12
    cap = np.array([[2.0, 16.0, 48.0], [4.0, 16.0, 48.0]])[rng.integers(0, 2, n)]
    pool = FreePool(cap)
    cap_rows = [tuple(c) for c in cap.tolist()]
    ref_free = list(cap_rows)
    held: list[tuple[int, tuple]] = []
    for _ in range(1500):
        if held and (rng.random() < 0.45 or len(held) > 30):
            server, demand = held.pop(int(rng.integers(len(held))))
            pool.give(server, demand)
            ref_free[server] = tuple(f + d for f, d in zip(ref_free[server], demand, strict=True))
            continue
        for demand in (WORKER, PS) if rng.random() < 0.8 else (DEMANDS[2],):
            assert pool.least_loaded(demand) == reference_least_loaded(cap_rows, ref_free, demand)
            want = reference_feasible_fit(ref_free, demand)
            assert pool.take_feasible(demand) == want
            if want >= 0:
                held.append((want, demand))
                ref_free[want] = tuple(f - d for f, d in zip(ref_free[want], demand, strict=True))
    assert pool.free_array().tolist() == [list(f) for f in ref_free]
    assert sum(map(len, pool._feasible.values())) > 10  # answers were kept, and used
    assert sum(map(len, pool._least.values())) > 10


def reference_gpu_fits(free_gpu: float, shared, gpu: float) -> bool:
    """Whether a task of `gpu` GPUs fits: whole GPUs for one or more, room on one GPU for
    a share (summing each partly used GPU's shares afresh)."""
    if gpu <= EPS:
        return True
    if not shared:
        return free_gpu + EPS >= (1.0 if gpu < 1.0 - EPS else gpu)
    whole = free_gpu - sum(1.0 - sum(g) for g in shared)
    if gpu < 1.0 - EPS:
        return whole + EPS >= 1.0 or any(sum(g) + gpu <= 1.0 + EPS for g in shared)
    return whole + EPS >= gpu


@pytest.mark.parametrize("seed", range(4))
def test_typed_shared_pool_choices_match_a_server_by_server_scan(seed):
    """On a cluster with GPU types and shared GPUs, the answers kept per set of active
    buckets (keyed by demand and allowed types) are what a scan of every server picks,
    while tasks are taken and given back so that sets recur."""
    rng = np.random.default_rng(seed)
    n = 14
    cap = np.array([[2.0, 16.0, 48.0], [4.0, 16.0, 48.0]])[rng.integers(0, 2, n)]
    types = [("v100", "t4", None)[int(k)] for k in rng.integers(0, 3, n)]
    cap_rows = [tuple(c) for c in cap.tolist()]
    free = [list(c) for c in cap_rows]
    free[0][0] -= 0.5  # a task of half a GPU already runs on server 0
    pool = FreePool(cap, np.array(free), gpu_types=types, shares={0: (0.5,)})
    shared = [() for _ in range(n)]
    shared[0] = ((0.5,),)
    demands = ((0.5, 2.0, 4.0), (0.25, 1.0, 2.0), (1.0, 4.0, 10.0), (0.0, 4.0, 10.0))
    kinds = (None, frozenset({"v100"}), frozenset({"t4", "v100"}))

    def ok(s, demand, allowed):
        f = free[s]
        if not (f[1] + EPS >= demand[1] and f[2] + EPS >= demand[2]):
            return False
        if demand[0] > EPS and allowed is not None and types[s] not in allowed:
            return False
        return reference_gpu_fits(f[0], shared[s], demand[0])

    def feasible(demand, allowed):
        gpu = demand[0] > EPS and not is_share(demand[0])
        keys = [
            ((-free[s][0] if gpu else free[s][0]), -free[s][1], -free[s][2], s)
            for s in range(n)
            if ok(s, demand, allowed)
        ]
        return min(keys)[3] if keys else -1

    def least(demand, allowed):
        keys = [
            (
                round(
                    sum((c - f) / c for c, f in zip(cap_rows[s], free[s], strict=True) if c > 0), 9
                ),
                s,
            )
            for s in range(n)
            if ok(s, demand, allowed)
        ]
        return min(keys)[1] if keys else -1

    def move(s, demand, sign):
        free[s] = [f - sign * d for f, d in zip(free[s], demand, strict=True)]
        if is_share(demand[0]):
            add = _share_add if sign > 0 else _share_remove
            shared[s] = add(shared[s], demand[0])

    held: list[tuple[int, tuple]] = []
    for _ in range(1200):
        if held and (rng.random() < 0.45 or len(held) > 25):
            server, demand = held.pop(int(rng.integers(len(held))))
            pool.give(server, demand)
            move(server, demand, -1)
            continue
        demand = demands[int(rng.integers(len(demands)))]
        allowed = kinds[int(rng.integers(len(kinds)))]
        if rng.random() < 0.5:
            want = feasible(demand, allowed)
            assert pool.feasible_fit(demand, allowed) == want
            assert pool.take_feasible(demand, allowed) == want
        else:
            want = least(demand, allowed)
            assert pool.least_loaded(demand, None, allowed) == want
            if want >= 0:
                pool.take(want, demand, allowed)
        if want >= 0:
            held.append((want, demand))
            move(want, demand, 1)
    assert pool.free_array().tolist() == free
    kept = [k for answers in pool._feasible.values() for k in answers]
    assert any(len(k) == 2 for k in kept)  # answers for typed demands were kept, and used


def test_a_pool_groups_servers_as_a_dict_of_their_rows_would():
    rng = np.random.default_rng(3)
    cap = np.array([[2.0, 16.0, 48.0], [8.0, 64.0, 256.0]])[rng.integers(0, 2, 200)]
    free = cap - rng.integers(0, 3, (200, 3)) * np.array([0.5, 4.0, 10.0])
    groups: dict[tuple, list[int]] = {}
    for s, row in enumerate(np.concatenate([cap, free], axis=1).tolist()):
        groups.setdefault(tuple(row), []).append(s)
    pool = FreePool(cap, free)
    got = {(*b.cap, *b.free): b.servers for b in pool._active.values()}
    assert got == groups
    assert FreePool(np.zeros((0, 3))).first_fit(PS) == -1


def test_a_typed_pool_groups_servers_by_their_rows_types_and_shares():
    rng = np.random.default_rng(4)
    n = 300
    cap = np.array([[2.0, 16.0, 48.0], [8.0, 64.0, 256.0]])[rng.integers(0, 2, n)]
    free = cap - rng.integers(0, 3, (n, 3)) * np.array([1.0, 4.0, 10.0])
    types = [("V100", "T4", "A10", None)[int(k)] for k in rng.integers(0, 4, n)]
    held = {int(s): (0.5,) if s % 2 else (0.25, 0.25) for s in rng.choice(n, 30, replace=False)}
    for s, shares in held.items():
        free[s, 0] -= sum(shares)
    pool = FreePool(cap, free, gpu_types=types, shares=held)
    # A server's shares as the pool packs them: first fit decreasing onto its GPUs.
    packed = {s: reduce(_share_add, sorted(v, reverse=True), ()) for s, v in held.items()}
    groups: dict[tuple, list[int]] = {}
    for s in range(n):
        key = (tuple(cap[s].tolist()), tuple(free[s].tolist()), packed.get(s, ()), types[s])
        groups.setdefault(key, []).append(s)
    assert {b.key: b.servers for b in pool._active.values()} == groups
    assert not pool.plain
    assert {pool._of[s].gtype for s in range(n)} == {"V100", "T4", "A10", None}


def test_summed_demands_add_in_task_order_like_add_at():
    rng = np.random.default_rng(0)
    shapes = [(0.46, 2.0, 5.5), (1.0, 4.0, 10.0), (0.1, 0.3, 0.7), (0.0, 4.0, 10.0)]
    groups = [
        (list(rng.integers(0, 7, rng.integers(0, 9))), shapes[int(rng.integers(4))])
        for _ in range(60)
    ]
    servers, demands = task_arrays(groups)
    flat_servers = [s for on, _ in groups for s in on]
    flat_demands = [d for on, d in groups for _ in on]
    assert servers.tolist() == flat_servers and demands.tolist() == [list(d) for d in flat_demands]
    expected = np.zeros((7, 3))
    np.add.at(expected, np.array(flat_servers), np.array(flat_demands))
    assert summed_demands(servers, demands, 7).tobytes() == expected.tobytes()


def reference_locality(place: JobPlacement) -> float:
    """The Counter-based locality the vectorized one replaced."""
    if not place.workers or not place.ps:
        return 0.0
    w_on, p_on = Counter(place.workers), Counter(place.ps)
    worker_side = min(p_on.get(s, 0) for s in w_on) / len(place.ps)
    ps_side = min(w_on.get(s, 0) for s in p_on) / len(place.workers)
    return min(worker_side, ps_side)


def test_task_rows_and_locality_match_counters():
    rng = np.random.default_rng(1)
    placements = [
        JobPlacement.of(
            rng.integers(0, 9, rng.integers(0, 6)), rng.integers(0, 9, rng.integers(0, 6))
        )
        for _ in range(40)
    ]
    rows = task_rows(placements, 9)
    expected = []
    for j, place in enumerate(placements):
        w_on, p_on = Counter(place.workers), Counter(place.ps)
        expected += [(j, s, w_on[s], p_on[s]) for s in sorted(set(w_on) | set(p_on))]
    got = list(zip(*(a.tolist() for a in rows[:4]), strict=True))
    assert got == expected
    locality = SpeedModel().locality(placements)
    assert locality.tolist() == [reference_locality(place) for place in placements]


def test_placements_log_counts_each_jobs_tasks_per_server():
    jobs = jobs_from_frame(dl2_like_frame(20, 5))
    cfg = SimConfig(cluster=ClusterConfig(n_servers=8), seed=2)
    result = Simulator(jobs, make_scheduler("drf"), cfg).run()
    frame = result.placements
    assert frame.schema == {
        "decision": pl.Int64,
        "time_s": pl.Float64,
        "job_id": pl.Int64,
        "server": pl.Int64,
        "workers": pl.Int64,
        "ps": pl.Int64,
    }
    # one row per (decision, job, server), servers ascending within a job
    assert not frame.select("decision", "job_id", "server").is_duplicated().any()
    assert frame.filter((pl.col("workers") == 0) & (pl.col("ps") == 0)).height == 0
    totals = frame.group_by("time_s", "job_id", maintain_order=True).agg(
        pl.col("workers").sum(), pl.col("ps").sum()
    )
    allocs = [
        (e.time_s, e.job_id, e.workers, e.ps)
        for e in result.events
        if e.kind == "alloc" and (e.workers or e.ps)
    ]
    assert sorted(totals.rows()) == sorted(allocs)


def _take_tasks(pool: FreePool, job) -> None:
    """The pool shrinks: a worker and a PS of `job` taken where each fits, if it does."""
    for demand in (job.worker_demand, job.ps_demand):
        server = pool.feasible_fit(demand, job.gpu_types)
        if server >= 0:
            pool.take_unchecked(server, demand)


def reference_any_task_fits(pool: FreePool, jobs, full: set) -> bool:
    """`any_task_fits` as it reads: every job's two shapes, those in `full` passed over."""
    for job in jobs:
        if job.max_workers <= 0:
            continue
        for demand in (job.worker_demand, job.ps_demand):
            shape = (tuple(map(float, demand)), job.gpu_types)
            if shape in full:
                continue
            if pool.any_fit(*shape):
                return True
            full.add(shape)
    return False


@pytest.mark.parametrize("seed", range(4))
def test_any_task_fits_passing_over_known_kinds_answers_as_every_job_is_checked(seed):
    """Batches of a queue asked in turn while a decision's pool shrinks: `any_task_fits`,
    which passes over jobs of a kind whose two shapes are known not to fit, answers as
    checking every job does, and finds the same shapes full."""
    rng = np.random.default_rng(seed)
    types = [None, "a", "b"]
    cap = np.array([[4.0, 16.0, 64.0]] * 6)
    pool = FreePool(cap, gpu_types=[types[k % 3] for k in range(6)])
    catalogue = list(DL2_CATALOGUE)
    jobs = [
        job_view(
            catalogue[rng.integers(len(catalogue))],
            k,
            max_workers=int(rng.integers(0, 3)),
            gpu_types=[None, frozenset({"a"}), frozenset({"b"})][rng.integers(3)],
            # a fresh but equal tuple now and then: kinds are compared by value
            worker_demand=tuple(float(x) for x in catalogue[k % 3].worker_demand),
        )
        for k in range(200)
    ]
    full, ref_full, answers = set(), set(), []
    for step in range(60):
        batch = jobs[(step * 20) % 200 :][:20]
        got = any_task_fits(pool, batch, full)
        assert got == reference_any_task_fits(pool, batch, ref_full)
        assert {key for key in full if len(key) == 2} == ref_full
        answers.append(got)
        _take_tasks(pool, jobs[rng.integers(200)])
    assert True in answers and False in answers  # both answers were checked
    assert any(len(key) == 3 for key in full)  # kinds were passed over


@pytest.mark.parametrize("seed", range(4))
def test_kinds_full_only_when_no_job_of_the_rest_can_take_a_task(seed):
    """`kinds_full` of the kinds of the rest of a queue, as a decision's pool shrinks: True exactly
    when checking every job finds none that can take a task (every job below its cap
    here), whatever `full` already holds from earlier batches."""
    rng = np.random.default_rng(seed)
    cap = np.array([[2.0, 8.0, 32.0]] * 4)
    pool = FreePool(cap, gpu_types=["a", "b", None, "a"])
    catalogue = list(DL2_CATALOGUE)
    # kinds of many sizes, so that some fit where others no longer do
    jobs = [
        job_view(
            catalogue[rng.integers(len(catalogue))],
            k,
            gpu_types=[None, frozenset({"a"}), frozenset({"b"})][rng.integers(3)],
            worker_demand=(float(rng.integers(1, 3)), float(rng.integers(1, 7)), 4.0),
            ps_demand=(0.0, float(rng.integers(1, 7)), float(rng.integers(1, 25))),
        )
        for k in range(120)
    ]
    full, answers = set(), []
    for _ in range(80):
        start = int(rng.integers(100))
        any_task_fits(pool, jobs[start : start + 20], full)  # what earlier batches leave
        rest = jobs[start + 20 :]
        got = kinds_full(pool, {j.task_kind for j in rest}, full)
        assert got == (not reference_any_task_fits(pool, rest, set()))
        # the kinds after an index, as a policy reads them from each kind's last job
        after = kinds_after(last_of_kinds(jobs), start + 20)
        assert sorted(map(repr, after)) == sorted({repr(j.task_kind) for j in rest})
        assert kinds_full(pool, after, set(full)) == got
        answers.append(got)
        _take_tasks(pool, jobs[rng.integers(120)])
    assert True in answers and False in answers


def test_row_classes_group_rows_by_their_bytes_in_order_of_appearance():
    rows = np.array([[1, 0], [2, 0], [1, 0], [0, -0.0], [0, 0], [2, 0]], dtype=np.float32)
    which, first = row_classes(rows)
    # -0.0 and 0.0 differ in their bytes: two classes, as `byte_rows` has them.
    assert which.tolist() == [0, 1, 0, 2, 3, 1]
    assert first.tolist() == [0, 1, 3, 4]
    assert (rows[first][which] == rows).all()
    rng = np.random.default_rng(0)
    rows = rng.integers(0, 3, (300, 4)).astype(np.float64)
    which, first = row_classes(rows)
    _, groups = byte_rows(rows)
    # The same partition as sorting by bytes; each class's first row is its lowest.
    assert len(first) == len(set(groups.tolist()))
    assert all(len(set(groups[which == k].tolist())) == 1 for k in range(len(first)))
    assert [int(np.flatnonzero(which == k)[0]) for k in range(len(first))] == first.tolist()
    which, first = row_classes(np.zeros((0, 3)))
    assert which.tolist() == [] and first.tolist() == []
