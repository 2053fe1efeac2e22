"""RL-TAPS' per-GPU environment: checker, per-GPU masks, preemption, reward terms."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tracelib.catalogue import RLTAPS_CATALOGUE
from tracelib.envs.gpu import GpuAssignmentEnv, GpuEnvConfig, GpuObsConfig
from tracelib.scenarios.rltaps import rl_taps_jobs
from tracelib.sim import JobPlacement, JobSpec
from tracelib.synthetic import BimodalConfig


def sequences(n_jobs: int = 12, count: int = 2):
    return [rl_taps_jobs(BimodalConfig.rl_taps(n_jobs=n_jobs, seed=s)) for s in range(count)]


def env(**kw) -> GpuAssignmentEnv:
    cfg = GpuEnvConfig(obs=GpuObsConfig(slots=4, backlog=8), invalid_action_penalty=-1.0, **kw)
    return GpuAssignmentEnv(sequences(), cfg)


def test_checker_passes():
    check_env(env(), skip_render_check=True)


def test_per_gpu_mask_allows_existing_slots_and_null_only():
    e = env()
    _, info = e.reset(seed=0)
    mask = info["action_mask"]
    n_jobs = len(e.session.snapshot.jobs[:4])
    assert mask.shape == (32, 5)
    assert mask[:, -1].all()  # the null slot
    assert mask[:, :n_jobs].all() and not mask[:, n_jobs:-1].any()


def test_masked_choice_idles_the_gpu_and_is_flagged():
    e = env()
    e.reset(seed=0)
    n_jobs = len(e.session.snapshot.jobs[:4])
    assert n_jobs < 4
    choice = np.full(32, 4)  # every GPU idle...
    choice[0] = 3  # ...but GPU 0 picks an empty slot
    alloc, placement, invalid = e.decision(choice)
    assert invalid == 1 and not alloc.counts and not placement.jobs
    _, reward, _, _, info = e.step(choice)
    assert info["invalid_gpus"] == 1
    # Everyone idles: only the idle penalty, plus the invalid-choice charge.
    assert reward < -1.0


def test_reward_terms_on_one_job():
    jt = next(t for t in RLTAPS_CATALOGUE if t.model_size_mb > 100)
    job = JobSpec(0, jt.model, epochs=1.0, arrival_s=0.0, num_workers=4, num_ps=0)
    e = GpuAssignmentEnv([(job,)], GpuEnvConfig(obs=GpuObsConfig(slots=2, backlog=2)))
    e.reset(seed=0)
    snap = e.session.snapshot
    tt = jt.local_comp_s
    model = e.model
    # Four GPUs of one machine: throughput term only.
    on_one = np.full(32, 2)
    on_one[:4] = 0
    _, placement, _ = e.decision(on_one)
    rt = model.reduction_s([jt.type_index], [JobPlacement.of(range(4), ())])[0]
    assert e.step_reward(snap, placement) == pytest.approx(4 * tt / (tt + rt))
    # The same four GPUs spread over four racks reduce slower: less reward.
    spread = np.full(32, 2)
    spread[[0, 8, 16, 24]] = 0
    _, placement_spread, _ = e.decision(spread)
    assert e.step_reward(snap, placement_spread) < e.step_reward(snap, placement)
    # Two of four requested: the under-allocation penalty for the missing two.
    two = np.full(32, 2)
    two[:2] = 0
    _, placement_two, _ = e.decision(two)
    rt2 = model.reduction_s([jt.type_index], [JobPlacement.of(range(2), ())])[0]
    eff = tt / (tt + rt2)
    assert e.step_reward(snap, placement_two) == pytest.approx(2 * eff - 2 * eff)
    # Nothing: the idle penalty at the single-rack reduction time of its request.
    _, nothing, _ = e.decision(np.full(32, 2))
    sr = model.single_rack_reduction_s([jt.type_index], [4])[0]
    assert e.step_reward(snap, nothing) == pytest.approx(-4 * tt / (tt + sr))
    weighted = replace(e.cfg, idle_penalty=0.5)
    e.cfg = weighted
    assert e.step_reward(snap, nothing) == pytest.approx(-2 * tt / (tt + sr))


def test_preempted_job_pauses_and_episode_completes():
    e = env()
    _, info = e.reset(seed=1)
    first = e.session.snapshot.jobs[0].job_id
    everything = np.zeros(32, dtype=int)  # all GPUs to slot 0
    e.step(everything)
    done_before = e.session.epochs_done()[first][0]
    assert done_before > 0
    _, _, _, _, info = e.step(np.full(32, 4))  # everyone paused
    assert e.session.epochs_done()[first][0] == done_before
    rng = np.random.default_rng(0)
    while True:
        choice = np.array([rng.choice(np.flatnonzero(row)) for row in info["action_mask"]])
        _, _, terminated, truncated, info = e.step(choice)
        if terminated or truncated:
            break
    assert terminated and e.result().jobs["finish_s"].null_count() == 0


def test_observation_image_shows_running_jobs_and_requests():
    e = env()
    e.reset(seed=0)
    slot0 = e.session.snapshot.jobs[0]
    choice = np.full(32, 4)
    choice[:3] = 0
    obs, *_ = e.step(choice)
    o = e.cfg.obs
    cluster = obs[: o.horizon * 32].reshape(o.horizon, 32)
    slots = obs[o.horizon * 32 : o.horizon * 32 + o.slots * o.horizon * o.max_gpus].reshape(
        o.slots, o.horizon, o.max_gpus
    )
    assert e.session.snapshot.jobs[0].job_id == slot0.job_id  # still running
    assert (cluster[0, :3] == 1 / (o.slots + 1)).all()  # slot 0's colour on its GPUs
    assert not cluster[:, 3:].any()
    req = min(slot0.requested_workers, o.max_gpus)
    assert slots[0, 0, :req].all() and not slots[0, :, req:].any()
    assert obs.min() >= 0 and obs.max() <= 1
