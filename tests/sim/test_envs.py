"""Gymnasium environments: the checker, masks, rewards, determinism, and agreement with the
simulator driven by the same decisions."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from gymnasium.utils.env_checker import check_env

from models.heuristics import make_scheduler
from tests.sim.views import queue_draft, random_free, random_pool, random_snapshot
from tests.sim.workloads import NOISY, dl2_jobs
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.envs import (
    AllocationEnv,
    AllocationEnvConfig,
    AllocationObsConfig,
    PlacementEnv,
    PlacementEnvConfig,
    PlacementObsConfig,
)
from tracelib.envs.observation import (
    PlacementActions,
    PlacementDraft,
    PlacementEncoding,
    allocation_features,
    encode_allocation,
    encode_placement,
    placement_job_features,
    placement_server_features,
)
from tracelib.sim import (
    AllocationBuilder,
    ClusterConfig,
    SimConfig,
    simulate,
)


def workloads(n_jobs: int = 10, count: int = 3):
    return [dl2_jobs(n_jobs, s) for s in range(count)]


def alloc_env(window: int = 6, n_servers: int = 4) -> AllocationEnv:
    cfg = AllocationEnvConfig(
        obs=AllocationObsConfig(window=window),
        sim=SimConfig(cluster=ClusterConfig(n_servers=n_servers), speed=NOISY),
        invalid_action_penalty=-0.5,
    )
    return AllocationEnv(workloads(), cfg)


def place_env(n_servers: int = 6) -> PlacementEnv:
    cfg = PlacementEnvConfig(
        obs=PlacementObsConfig(window=5),
        sim=SimConfig(cluster=ClusterConfig(n_servers=n_servers), speed=NOISY),
        invalid_action_penalty=-0.5,
    )
    return PlacementEnv(workloads(12), cfg)


def run_masked(env, seed: int, pick=None):
    """One episode with uniformly random valid actions; returns (rewards, observations)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    rewards, observations = [], [obs]
    while True:
        valid = np.flatnonzero(info["action_mask"])
        action = pick(env, valid) if pick else rng.choice(valid)
        obs, reward, terminated, truncated, info = env.step(action)
        assert not info["invalid_action"]
        rewards.append(reward)
        observations.append(obs)
        if terminated or truncated:
            assert terminated
            return np.array(rewards), observations


@pytest.mark.parametrize("make", [alloc_env, place_env])
def test_gymnasium_checker_passes(make):
    check_env(make(), skip_render_check=True)


@pytest.mark.parametrize("make", [alloc_env, place_env])
def test_return_is_one_per_job_and_episodes_are_reproducible(make):
    env = make()
    rewards, obs = run_masked(env, seed=4)
    n_jobs = len(env.workloads[env.workload_index])
    assert rewards.sum() == pytest.approx(n_jobs, rel=1e-9)
    assert (rewards >= 0).all()
    assert env.result().jobs["finish_s"].null_count() == 0
    again, obs2 = run_masked(make(), seed=4)
    np.testing.assert_array_equal(rewards, again)
    assert all(np.array_equal(a, b) for a, b in zip(obs, obs2, strict=True))


@pytest.mark.parametrize("make", [alloc_env, place_env])
def test_invalid_action_changes_nothing_and_is_penalized(make):
    env = make()
    obs, info = env.reset(seed=1)
    invalid = np.flatnonzero(~info["action_mask"])
    assert len(invalid)
    obs2, reward, terminated, _truncated, info2 = env.step(invalid[0])
    assert info2["invalid_action"] and reward == -0.5 and not terminated
    np.testing.assert_array_equal(obs, obs2)
    np.testing.assert_array_equal(info["action_mask"], info2["action_mask"])
    np.testing.assert_array_equal(env.action_masks(), info2["action_mask"])


def test_allocation_env_driven_like_drf_reproduces_drf():
    """Choosing, each step, DRF's own choice (worker+PS to the lowest dominant share,
    stop when none fits) through the env gives DRF's simulation, event for event."""
    env = alloc_env(window=12)

    def drf_choice(env, valid):
        b = env.builder
        both = [i for i in range(len(b.jobs)) if 3 * i + 2 in set(valid)]
        if not both:
            return env.action_space.n - 1
        return 3 * min(both, key=lambda i: (b.dominant_share(i), i)) + 2

    run_masked(env, seed=7, pick=drf_choice)
    cfg = env.session.sim.cfg
    expected = simulate(env.workloads[env.workload_index], make_scheduler("drf"), cfg)
    assert env.result().events == expected.events


def test_allocation_observation_features_and_mask_on_a_snapshot():
    env = alloc_env(window=6)
    obs, info = env.reset(seed=2, options={"workload": 0})
    names = allocation_features(DL2_CATALOGUE)
    rows = obs.reshape(6, len(names))
    snap = env.builder.snap
    n = len(snap.jobs)
    assert rows[:n, names.index("present")].tolist() == [1.0] * n
    assert rows[n:].sum() == 0  # empty rows are all zero
    for i, job in enumerate(snap.jobs):
        assert rows[i, names.index(f"type={job.model}")] == 1.0
        assert rows[i, : len(DL2_CATALOGUE)].sum() == 1.0
    mask = info["action_mask"]
    assert mask[-1] and mask.shape == (3 * 6 + 1,)
    assert not mask[3 * n : -1].any()  # no actions on empty rows
    # Adding a worker to job 0 moves exactly its workers and dominant-share columns.
    obs2, *_ = env.step(0)
    rows2 = obs2.reshape(6, len(names))
    changed = np.argwhere(rows2 != rows)
    assert set(map(tuple, changed)) <= {
        (0, names.index("workers")),
        (0, names.index("dominant_share")),
    }
    assert rows2[0, names.index("workers")] == pytest.approx(1 / snap.jobs[0].max_workers)
    # The incremental update equals a fresh encoding of the same builder.
    np.testing.assert_array_equal(rows2, encode_allocation(env.builder, env.cfg.obs))


def test_placement_env_never_overfills_and_places_whole_jobs():
    env = place_env(n_servers=3)  # crowded: jobs must wait for room
    run_masked(env, seed=3)
    result = env.result()
    demand = {jt.model: (jt.worker_demand, jt.ps_demand) for jt in DL2_CATALOGUE}
    jobs = {j.job_id: j for j in env.workloads[env.workload_index]}
    rows = result.placements.to_dicts()
    use: dict[tuple[int, int], np.ndarray] = {}
    for r in rows:
        wd, pd = demand[jobs[r["job_id"]].model]
        key = (r["decision"], r["server"])
        use[key] = use.get(key, 0) + r["workers"] * np.array(wd) + r["ps"] * np.array(pd)
    server = ClusterConfig()
    cap = np.array([server.gpus, server.cpus, server.mem_gb])
    assert max(float((u - cap).max()) for u in use.values()) <= 1e-9
    counts = result.placements.group_by("job_id", "decision").agg(pl.col("workers", "ps").sum())
    for r in counts.to_dicts():
        spec = jobs[r["job_id"]]
        assert (r["workers"], r["ps"]) == (
            min(max(spec.num_workers, 1), 16),
            min(max(spec.num_ps, 1), 16),
        )
    assert result.jobs["finish_s"].null_count() == 0


def test_placement_server_rows_show_where_each_window_job_has_tasks():
    env = place_env(n_servers=3)
    obs, _ = env.reset(seed=1)
    cfg = env.cfg.obs
    names = placement_server_features(DL2_CATALOGUE, cfg)
    n_jobs = cfg.window * len(placement_job_features(DL2_CATALOGUE))
    action = int(np.flatnonzero(env.action_masks())[0])
    row, role, server = env.actions.decode(action)
    obs, *_ = env.step(action)
    servers = obs[n_jobs:].reshape(3, len(names))
    col = names.index(f"job{row}_{'workers' if role == 0 else 'ps'}")
    own = servers[:, names.index("job0_workers") :]
    assert servers[server, col] == pytest.approx(1 / env.draft.jobs[row].max_workers)
    assert np.count_nonzero(own) == 1  # only the task just placed
    # Without the switch the rows are the per-model counts alone (old checkpoints).
    short = placement_server_features(DL2_CATALOGUE, replace(cfg, job_placement=False))
    assert len(names) - len(short) == 2 * cfg.window


def test_env_refuses_empty_workloads_and_steps_after_the_end():
    with pytest.raises(ValueError, match="non-empty"):
        AllocationEnv([])
    env = alloc_env()
    run_masked(env, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(env.action_space.n - 1)


def test_builder_mask_agrees_with_can_add():
    env = alloc_env(window=8, n_servers=2)
    env.reset(seed=5)
    b: AllocationBuilder = env.builder
    rng = np.random.default_rng(0)
    for _ in range(40):
        mask = b.mask()
        for i in range(len(b.jobs)):
            assert mask[i].tolist() == [b.can_add(i, 1, 0), b.can_add(i, 0, 1), b.can_add(i, 1, 1)]
        valid = np.argwhere(mask)
        if not len(valid):
            break
        i, kind = valid[rng.integers(len(valid))]
        assert b.step(int(i), kind)


@pytest.mark.parametrize("seed", range(4))
def test_builder_fit_mask_kept_per_signature_matches_can_add(seed):
    # `fit_mask` keeps its answers per pool signature and room: at every step of random
    # builds (random jobs, caps, GPU shares and types, pools partly taken, pairs that only
    # fit on two servers), it must equal what `can_add` finds job by job.
    rng = np.random.default_rng(seed)
    steps = 0
    for _ in range(60):
        snap = random_snapshot(rng)
        b = AllocationBuilder(snap, pool=random_pool(snap, rng) if rng.random() < 0.7 else None)
        while True:
            fit = b.fit_mask()
            plain = [
                [b.can_add(i, 1, 0), b.can_add(i, 0, 1), b.can_add(i, 1, 1)]
                for i in range(len(b.jobs))
            ]
            assert fit.tolist() == plain and b.mask().tolist() == plain
            valid = np.argwhere(fit)
            if not len(valid):
                break
            i, kind = valid[rng.integers(len(valid))]
            assert b.step(int(i), kind)
            steps += 1
    assert steps > 200


def _first_fit_completable(draft, i: int, role: int, server: int) -> bool:
    """The placement mask's rule task by task: job i's next `role` task on `server`, then
    its other remaining tasks (workers, then PSs) each on the first server with room."""
    free = draft.free.copy()
    allowed = draft.allowed[i] if draft.allowed else (None, None)

    def ok(r: int) -> np.ndarray:  # (M,) servers with room for one task of role r
        fits = np.all(free >= draft.demand(i, r) - 1e-9, axis=1)
        return fits if allowed[r] is None else fits & allowed[r]

    if not ok(role)[server]:
        return False
    free[server] -= draft.demand(i, role)
    need = draft.need[i].copy()
    need[role] -= 1
    for r in (0, 1):
        demand = draft.demand(i, r)
        for _ in range(int(need[r])):
            fits = np.flatnonzero(ok(r))
            if not len(fits):
                return False
            free[fits[0]] -= demand
    return True


def _bare_draft(free, need, worker, ps, allowed=()) -> PlacementDraft:
    """A draft of one job with these free resources, needs and task demands (no snapshot)."""
    draft = PlacementDraft.__new__(PlacementDraft)
    draft.free, draft.need, draft.allowed = free.copy(), need, allowed
    draft.demand = lambda i, role: (worker if role == 0 else ps).astype(float)
    return draft


def _assert_mask_is_first_fit(draft) -> None:
    """Each role's mask of job 0 is task-by-task first fit, and computing it changes nothing."""
    free = draft.free.copy()
    for role in (0, 1):
        if draft.need[0, role] == 0:
            continue
        got = draft._completable(0, role)
        want = [_first_fit_completable(draft, 0, role, s) for s in range(len(free))]
        assert got.tolist() == want
        assert np.array_equal(draft.free, free)  # the check changes nothing


@pytest.mark.parametrize("seed", range(3))
def test_placement_mask_is_first_fit_on_large_clusters(seed):
    # Drafts of 30-80 servers in random states (full, empty, between), tasks that use some
    # resources or none: most candidate servers lie past where first fit of the remaining
    # tasks stops, the case the mask settles without counting each candidate.
    rng = np.random.default_rng(seed)
    for _ in range(150):
        free = random_free(rng, 30, 80)
        worker = np.array([rng.choice([0, 1, 2]), rng.choice([0, 1, 4]), rng.choice([0, 2, 8])])
        ps = np.array([0, rng.choice([0, 1, 2]), rng.choice([0, 2, 4])])
        need = np.array([[rng.integers(0, 30), rng.integers(0, 6)]])
        _assert_mask_is_first_fit(_bare_draft(free, need, worker, ps))


@pytest.mark.parametrize("seed", range(3))
def test_placement_mask_offers_a_job_only_the_gpu_types_it_accepts(seed):
    # Servers of three types (one untyped); a job accepting some of them: its workers may go
    # only there and its PSs (no GPU) anywhere, and the first-fit check of its other tasks
    # counts only those servers too. Task by task, first fit agrees.
    rng = np.random.default_rng(seed)
    for _ in range(100):
        free = random_free(rng, 20, 60)
        types = rng.choice(np.array(["T4", "V100", None], dtype=object), len(free))
        accepts = frozenset(rng.choice(["T4", "V100"], int(rng.integers(1, 3)), replace=False))
        worker = np.array([rng.choice([1, 2]), rng.choice([1, 4]), rng.choice([2, 8])])
        ps = np.array([0.0, rng.choice([1, 2]), rng.choice([2, 4])])
        need = np.array([[rng.integers(1, 30), rng.integers(0, 6)]])
        allowed = np.array([t in accepts for t in types])
        draft = _bare_draft(free, need, worker, ps, ((allowed, None),))
        _assert_mask_is_first_fit(draft)
        assert not (draft._completable(0, 0) & ~allowed).any()


@pytest.mark.parametrize("seed", range(3))
def test_placement_mask_of_jobs_alike_and_unlike_is_each_jobs_first_fit(seed):
    # Waiting jobs that differ in one thing only (PS demand, what they still need, the GPU
    # types they accept) or in nothing: rows of jobs alike are counted once, and every row
    # must still be that job's own first fit.
    rng = np.random.default_rng(seed)
    for _ in range(40):
        draft = queue_draft(rng)
        jobs, m = draft.jobs, len(draft.free)
        mask = draft.mask(SimpleNamespace(window=len(jobs))).reshape(len(jobs), 2, m)
        for i in range(len(jobs)):
            for role in (0, 1):
                want = [
                    bool(draft.need[i, role]) and _first_fit_completable(draft, i, role, s)
                    for s in range(m)
                ]
                assert mask[i, role].tolist() == want, (i, role)


@pytest.mark.parametrize("seed", range(3))
def test_placement_candidates_hold_the_mask_and_tell_its_entries(seed):
    # `candidates` is what fits one task (a superset of the mask) on the mask's open rows,
    # and `allows` is the mask's entry, asked in any order (one server, or the whole row
    # once an entry was refused): a greedy policy that checks only its best candidates
    # picks from the mask. Before and after a job has a task placed (then only that job's
    # rows are open).
    rng = np.random.default_rng(seed)
    for _ in range(40):
        draft = queue_draft(rng)
        n, m = len(draft.jobs), len(draft.free)
        cfg = SimpleNamespace(window=n)
        for _step in range(3):
            mask = draft.mask(cfg).reshape(n, 2, m)
            candidates, allows = draft.candidates(cfg)
            candidates = candidates.reshape(n, 2, m)
            pending = [i for i in range(n) if draft.need[i].any()]
            started = [i for i in pending if draft.placed[i][0] or draft.placed[i][1]]
            for i in range(n):
                for role in (0, 1):
                    if i not in (started or pending) or draft.need[i, role] == 0:
                        assert not candidates[i, role].any()
                        continue
                    fits = np.all(draft.free >= draft.demand(i, role) - 1e-9, axis=1)
                    if draft.allowed[i][role] is not None:
                        fits &= draft.allowed[i][role]
                    assert candidates[i, role].tolist() == fits.tolist(), (i, role)
                    servers = rng.permutation(np.flatnonzero(fits)).tolist()
                    got = [allows(i, role, s) for s in servers]
                    assert got == mask[i, role, servers].tolist(), (i, role)
            assert not (mask & ~candidates).any()
            if not mask.any():
                break
            i, role, server = np.unravel_index(rng.choice(np.flatnonzero(mask)), mask.shape)
            draft.place(int(i), int(role), int(server))


@pytest.mark.parametrize("job_placement", [True, False])
def test_placement_encoding_kept_current_is_the_draft_encoded_anew_bit_for_bit(job_placement):
    # Along random episodes: after each task, re-encoding only its job's and its server's
    # rows must give every bit of encoding the whole draft again.
    env = place_env(6)
    env.cfg = replace(env.cfg, obs=replace(env.cfg.obs, job_placement=job_placement))
    rng = np.random.default_rng(1)
    env.reset(seed=1)
    layout = PlacementActions(env.cfg.obs.window, env.n_servers)
    encoding, checked = None, 0
    for _ in range(300):
        draft = env.draft
        if encoding is None or encoding.draft is not draft:
            encoding = PlacementEncoding(draft, env.cfg.obs)
        assert encoding.obs.tobytes() == encode_placement(draft, env.cfg.obs).tobytes()
        checked += 1
        action = int(rng.choice(np.flatnonzero(env.action_masks())))
        _, _, term, trunc, _ = env.step(action)
        if term or trunc:
            break
        if env.draft is draft:
            i, _, server = layout.decode(action)
            encoding.placed(i, server)
    assert checked > 50


@pytest.mark.parametrize("n_servers", [3, 6, 24])
def test_placement_mask_is_first_fit_of_the_remaining_tasks(n_servers):
    # The mask counts first fit for every server at once; it must allow exactly what
    # placing the tasks one by one allows, along random episodes (many partly full states).
    env = place_env(n_servers)
    rng = np.random.default_rng(n_servers)
    env.reset(seed=n_servers)
    m, window = env.n_servers, env.cfg.obs.window
    for _ in range(300):
        draft = env.draft
        mask = env.action_masks().reshape(window, 2, m)
        pending = [i for i in range(len(draft.jobs)) if draft.need[i].any()]
        started = [i for i in pending if draft.placed[i][0] or draft.placed[i][1]]
        for i in range(window):
            for role in (0, 1):
                for server in range(m):
                    want = (
                        i in (started or pending)
                        and draft.need[i, role] > 0
                        and _first_fit_completable(draft, i, role, server)
                    )
                    assert mask[i, role, server] == want, (i, role, server)
        _, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            break
