"""Chic's decision process in the arena's DL2 setting: the paper's masks, penalties and
stopping conditions on servers, the encoding, and the deployed policy making the same
decisions as the environment it was trained in."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from models.chic.config import ChicNetConfig
from models.chic.networks import ChicPolicyNet
from models.chic.policy import ChicArenaPolicy, ChicPolicy, make_env, run_episode
from tests.imports import packages_loaded_by
from tests.sim.views import random_pool, random_snapshot
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.envs.chic import ChicEnvConfig, ChicSchedule
from tracelib.envs.chic_arena import (
    ChicArenaEnv,
    ChicArenaSchedule,
    chic_arena_features,
    play_schedule,
)
from tracelib.envs.environments import ExternalPolicy
from tracelib.scenarios.chic import ChicArenaScenario, iteration_time_s
from tracelib.sim import ClusterConfig, Scheduler, SimConfig, Simulator
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.jobs import JobSpec
from tracelib.sim.placement import LoadBalancing

SIM = SimConfig(cluster=ClusterConfig(n_servers=4), window=20)
JOBS = (
    JobSpec(0, "resnet-50", 40.0, 0.0, 2, 2),
    JobSpec(1, "dssm", 30.0, 0.0, 1, 1),
    JobSpec(2, "vgg-16", 20.0, 1500.0, 2, 1),
    JobSpec(3, "seq2seq", 60.0, 2000.0, 1, 2),
)


def snapshot(jobs=JOBS[:2], cluster=SIM.cluster):
    sim = Simulator(jobs, ExternalPolicy(), replace(SIM, cluster=cluster, stall_decisions=0))
    return sim.session().snapshot


def schedule(window=4, jobs=JOBS[:2], cluster=SIM.cluster, **kw) -> ChicArenaSchedule:
    return ChicArenaSchedule(snapshot(jobs, cluster), ChicEnvConfig(**kw), window)


def test_features_read_the_dl2_catalogue_and_the_window():
    names = chic_arena_features("chic", 20, DL2_CATALOGUE)
    assert len(names) == 20 * (8 + 3) + 1 and names[-1] == "backlog"
    assert names[:11] == tuple(
        [f"job0.type={jt.model}" for jt in DL2_CATALOGUE]
        + ["job0.remaining_epochs", "job0.workers", "job0.ps"]
    )
    assert len(chic_arena_features("chic-pair", 20, DL2_CATALOGUE)) == 20 * 10 + 1
    net = ChicNetConfig(window=20, setting="dl2")
    assert net.input_dim == len(names) and net.n_actions == 41


def test_absent_jobs_penalized_void_masked_until_a_job_trains():
    s = schedule()
    mask = s.mask()
    assert mask[:4].all() and mask[4:8].all()  # two jobs; rows 2, 3 absent (p1)
    assert not mask[-1]  # nothing trains yet and a job could
    assert s.apply(5) == -5.0 and s.workers == [0, 0]  # absent: penalty, nothing changes
    assert s.apply(0) == -1.0  # a worker without a PS: p2
    assert not s.mask()[-1]
    assert s.apply(1) == 1.0  # the PS: p2 back
    assert s.trainable() and s.mask()[-1]
    masked = schedule(mask_absent=True).mask()
    assert not masked[4:8].any() and masked[:4].all()


def test_observation_rows_and_backlog():
    s = schedule(window=1)
    obs = s.observation()
    assert obs.shape == (len(chic_arena_features("chic", 1, DL2_CATALOGUE)),)
    assert obs[0] == 1.0 and obs[1:8].sum() == 0  # resnet-50 one-hot
    assert obs[8] == pytest.approx(np.log1p(40.0) / np.log1p(10_000.0))
    assert obs[-1] == pytest.approx(1 / 30)  # the visible job beyond I = 1
    s.apply(0)
    s.apply(1)
    after = s.observation()
    assert after[9] == after[10] == pytest.approx(1 / 16)  # workers, PSs / the job's cap


def test_condition_1_on_servers_and_fallback():
    # One server: 2 GPUs, 16 cores: four tasks of 4 cores.
    s = schedule(window=2, jobs=JOBS[:1], cluster=ClusterConfig(n_servers=1))
    for _ in range(4):
        assert not s.finished()
        s.apply(1)  # PSs only: nothing trains
    assert s.resources_exhausted() and s.finished() and not s.trainable()
    alloc = play_schedule(s, lambda obs, mask: len(mask) - 1)
    assert dict(alloc.counts) == {0: (1, 1)}  # fell back to a worker + a PS


def test_condition_2_no_gain_ends_the_schedule():
    job = JobSpec(0, "resnext-110", 40.0, 0.0, 1, 1)
    jt = next(t for t in DL2_CATALOGUE if t.model == job.model)
    s = schedule(window=1, jobs=(job,), cluster=ClusterConfig(n_servers=20))
    while not s.finished():  # add whichever task shortens the iteration more
        w, p = max(s.workers[0], 1), max(s.ps[0], 1)
        s.apply(0 if iteration_time_s(jt, w + 1, p) < iteration_time_s(jt, w, p + 1) else 1)
    assert s.no_gain() and not s.resources_exhausted()
    assert (s.workers[0], s.ps[0]) == (2, 4)  # the analytical optimum


def _policy(variant="chic", window=4) -> ChicPolicy:
    net = ChicPolicyNet(ChicNetConfig(variant=variant, window=window, setting="dl2"))
    net.eval()
    env = {"variant": variant, "max_phase_steps": 300}
    return ChicPolicy(net, {"env": env, "greedy": True})


@pytest.mark.parametrize("variant", ["chic", "chic-pair"])
def test_deployed_policy_decides_as_the_environment(variant):
    policy = _policy(variant)
    assert policy.system == f"{variant}-arena"
    scenario = ChicArenaScenario(sim=SIM, window=4)
    env = make_env([JOBS], scenario, policy.env_config())
    assert isinstance(env, ChicArenaEnv)
    _, act, *_ = run_episode(env, policy.numpy(), None, 0, 7)
    seed = env.session.sim.cfg.seed
    arena = policy.arena()
    assert isinstance(arena, ChicArenaPolicy) and arena.greedy
    result = Simulator(JOBS, Scheduler(arena, LoadBalancing()), replace(SIM, seed=seed)).run()
    assert result.avg_jct_s == pytest.approx(act)


def test_sampled_decisions_depend_on_the_decision_not_on_the_past():
    policy = _policy()
    arena = ChicArenaPolicy(policy, name="chic", seed=3)
    snap = snapshot()
    first = arena.allocate(snap)
    arena.allocate(snapshot(JOBS[:1]))
    assert arena.allocate(snap) == first
    with pytest.raises(ValueError, match="reads Chic's own scenario"):
        ChicPolicy(ChicPolicyNet(ChicNetConfig()), {}).arena()


def test_batches_schedule_every_visible_job_from_what_earlier_ones_left():
    jobs = tuple(JobSpec(i, "dssm", 30.0, 0.0, 1, 1) for i in range(6))
    cluster = ClusterConfig(n_servers=48)  # room for every job's 16 workers and 16 PSs
    snap = snapshot(jobs, cluster)
    policy = _policy(window=2)
    first = ChicArenaPolicy(policy, name="chic", greedy=True).allocate(snap)
    batched = ChicArenaPolicy(policy, name="chic", greedy=True, batches=True)
    every = batched.allocate(snap)
    assert first.counts and set(first.counts) <= {0, 1}  # I = 2: the rest wait
    # the same first schedule
    assert {j: c for j, c in every.counts.items() if j < 2} == dict(first.counts)
    # Void is masked until a job of the schedule trains: each later batch trains one too.
    trained = {j // 2 for j, (w, p) in every.counts.items() if w and p}
    assert trained == {0, 1, 2}
    sim = replace(SIM, cluster=cluster, window=None)
    result = Simulator(jobs, Scheduler(batched, LoadBalancing()), sim).run()
    assert len(result.jobs) == len(jobs)  # every allocation fit and every job finished


def test_batches_stop_where_nothing_fits(monkeypatch):
    # One server holds four tasks; eight jobs in four batches of I = 2.
    jobs = tuple(JobSpec(i, "dssm", 30.0, 0.0, 1, 1) for i in range(8))
    snap = snapshot(jobs, ClusterConfig(n_servers=1))
    built = []

    class Counted(ChicArenaSchedule):
        def __init__(self, snap, cfg, window, pool=None):
            built.append(len(snap.jobs))
            super().__init__(snap, cfg, window, pool)

    monkeypatch.setattr("models.chic.policy.ChicArenaSchedule", Counted)
    every = ChicArenaPolicy(_policy(window=2), name="chic", greedy=True, batches=True)
    counts = every.allocate(snap).counts
    assert sum(w + p for w, p in counts.values()) == 4  # the server is full
    # Each schedule's backlog is the jobs after it; none is built once nothing fits.
    assert built == [8, 6][: len(built)] and max(counts) < 2 * len(built)
    with pytest.raises(ValueError, match="cannot restart"):
        ChicArenaSchedule(snap, ChicEnvConfig(), 2, pool=snap.cluster.pool()).fallback()


def _plain_state(s: ChicArenaSchedule):
    """(mask, exhausted, finished, trainable, observation) of `s` computed afresh from its builder's
    counts and pool, job by job: what the schedule keeps up to date step by step."""
    b, cfg, actions, n = s.builder, s.cfg, s.actions, len(s.jobs)
    out = np.zeros(actions.n, dtype=bool)
    for row in range(s.window):
        if row >= n:
            out[actions.row(row)] = not cfg.mask_absent
        elif cfg.pair:
            out[actions.add_pair(row)] = b.can_add(row, 1, 1)
        else:
            out[actions.add_worker(row)] = b.can_add(row, 1, 0)
            out[actions.add_ps(row)] = b.can_add(row, 0, 1)
    counts = list(zip(b.workers, b.ps, strict=True))
    trainable = any(w > 0 and p > 0 for w, p in counts)
    lacking = [b.can_add(i, int(w == 0), int(p == 0)) for i, (w, p) in enumerate(counts)]
    void = trainable or not any(lacking)
    idle_fits = any(ok for ok, (w, p) in zip(lacking, counts, strict=True) if not (w and p))
    out[actions.void] = void and not (cfg.work_conserving and idle_fits)
    if cfg.pair:
        exhausted = not any(b.can_add(i, 1, 1) for i in range(n))
    else:
        exhausted = not any(b.can_add(i, 1, 0) or b.can_add(i, 0, 1) for i in range(n))
    no_gain = not any(ChicSchedule.improvable(s, i) for i in range(n))
    finished = not n or exhausted or no_gain
    return out, not n or exhausted, finished, trainable, s._encode()


@pytest.mark.parametrize("variant", ["chic", "chic-pair"])
def test_schedule_kept_up_to_date_matches_a_fresh_computation(variant):
    # Masks, S', trainable jobs and the observation are kept up to date action by action
    # (fits only change when the pool's signature or a job's room does; the void rule from
    # the jobs that changed): at every step of random schedules on random snapshots (pools
    # partly taken, GPU shares and types, small caps) they must equal a fresh computation.
    rng = np.random.default_rng(11 if variant == "chic" else 12)
    steps = 0
    for _ in range(200):
        snap = random_snapshot(rng, int(rng.integers(0, 7)))
        cfg = ChicEnvConfig(
            variant=variant,
            work_conserving=bool(rng.random() < 0.5),
            mask_absent=bool(rng.random() < 0.5),
        )
        shared = rng.random() < 0.5
        pool = random_pool(snap, rng) if shared else None
        s = ChicArenaSchedule(snap, cfg, int(rng.integers(max(len(snap.jobs), 1), 8)), pool=pool)
        for _ in range(300):
            mask, exhausted, finished, trainable, obs = _plain_state(s)
            assert s.mask().tolist() == mask.tolist()
            assert (s.finished(), s.trainable()) == (finished, trainable)
            assert s.observation().tolist() == obs.tolist()
            assert s.resources_exhausted() == exhausted
            if finished:
                fresh = AllocationBuilder(snap, s.jobs)
                if not shared and s.jobs and not trainable and fresh.can_add(0, 1, 1):
                    s.fallback()
                    continue
                break
            choices = np.flatnonzero(mask[:-1])
            if not len(choices):
                break
            s.apply(int(rng.choice(choices)))
            steps += 1
    assert steps > 250


def test_arena_env_is_torch_free():
    assert packages_loaded_by("import tracelib.envs.chic_arena", "torch") == []
