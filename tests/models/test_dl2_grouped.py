"""DL2's grouped PPO fine-tuning (models/dl2/grouped.py): the return is the time jobs spend
in the system, the baseline the group's other rollouts, training is deterministic and keeps
the best validated policy, and the pipeline stage trains DL2 with it and the paper's
actor-critic beside it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.dl2.config import DL2NetConfig, RecorderConfig, WarmupConfig, dl2_sim
from models.dl2.grouped import (
    Episode,
    GroupedConfig,
    finetune_grouped,
    group_advantages,
    scale_advantages,
    time_in_system_after,
)
from models.dl2.policy import average_jct
from models.dl2.recorder import record_runs
from models.dl2.stage_config import DL2StageConfig
from models.dl2.warmup import warmup
from tests.models.stalls import stall_steps
from tracelib.sim import dl2_like_frame, jobs_from_frame

torch.set_num_threads(1)

WINDOW = 4
NET = DL2NetConfig(window=WINDOW, hidden=(16, 16), head="rows", trigger="events")
SIM = dl2_sim(n_servers=3, window=WINDOW)


def _workloads(count: int, first_seed: int = 0, n_jobs: int = 6):
    return {
        f"w{s}": jobs_from_frame(
            dl2_like_frame(n_jobs, s, mean_duration_min=40.0, median_duration_min=20.0)
        )
        for s in range(first_seed, first_seed + count)
    }


def test_time_in_system_counts_each_job_from_the_later_of_t_and_its_arrival():
    arrival = np.array([0.0, 3600.0])
    finish = np.array([7200.0, 5400.0])
    hours = time_in_system_after(np.array([0.0, 1800.0, 3600.0, 6000.0, 9000.0]), arrival, finish)
    # t = 0: the JCTs (2 h + 0.5 h); t = 1800: 1.5 h + 0.5 h; t = 3600: 1 h + 0.5 h;
    # t = 6000: 1200 s of the first job; after every finish: nothing.
    assert hours.tolist() == pytest.approx([2.5, 2.0, 1.5, 1200 / 3600, 0.0])


def _episode(times, arrival, finish) -> Episode:
    ep = Episode(time_s=list(times))
    ep.arrival, ep.finish = np.asarray(arrival, float), np.asarray(finish, float)
    return ep


def test_group_advantages_are_against_the_other_rollouts_of_the_same_input():
    times = [0.0, 1000.0]
    same = [_episode(times, [0, 0], [2000, 3000]) for _ in range(3)]
    for adv in group_advantages(same):
        assert np.allclose(adv, 0.0)  # identical rollouts: nothing to credit
    fast = _episode(times, [0, 0], [1000, 2000])
    slow = _episode(times, [0, 0], [3000, 4000])
    mid = _episode(times, [0, 0], [2000, 3000])
    adv = group_advantages([fast, slow, mid])
    # At t = 0 the fast rollout spends 0.833 h, the others' mean (1.944 + 1.389) / 2 h.
    assert adv[0][0] == pytest.approx(-(3000 / 3600) + (7000 / 3600 + 5000 / 3600) / 2)
    assert adv[0][0] > 0 > adv[1][0]
    # Leave-one-out: at the same times the group's advantages sum to zero.
    assert np.allclose(np.sum(adv, axis=0), 0.0)


def _jobs_episode(times, jobs, finish) -> Episode:
    ep = _episode(times, [0, 0], finish)
    ep.job, ep.job_id = list(jobs), np.array([7, 9])
    return ep


def test_job_credit_counts_the_job_an_inference_adds_to_and_stop_counts_every_job():
    # Two jobs arrive at 0. Rollout a finishes job 0 an hour earlier than b and job 1 an
    # hour later: by every job's hours they are level, by job 0's a is ahead.
    times, jobs = [0.0, 0.0, 0.0], [0, 1, -1]  # add to job 0, add to job 1, stop
    a = _jobs_episode(times, jobs, [3600, 3 * 3600])
    b = _jobs_episode(times, jobs, [2 * 3600, 2 * 3600])
    episode = group_advantages([a, b])
    job = group_advantages([a, b], credit="job")
    assert np.allclose(episode[0], 0.0)  # 4 hours each
    assert job[0].tolist() == pytest.approx([1.0, -1.0, 0.0])
    assert job[1].tolist() == pytest.approx([-1.0, 1.0, 0.0])
    other = _jobs_episode(times, jobs, [3600, 3 * 3600])
    other.job_id = np.array([7, 8])  # not the same jobs: no baseline to compare with
    with pytest.raises(ValueError, match="same jobs"):
        group_advantages([a, other], credit="job")


def test_job_credit_scales_additions_and_stops_each_on_their_own():
    adv = np.array([1.0, -1.0, 10.0, -10.0])
    stop = np.array([False, False, True, True])
    together = scale_advantages(adv, stop, "episode")
    assert together.tolist() == pytest.approx((adv / np.sqrt(50.5)).tolist())  # one deviation
    assert scale_advantages(adv, stop, "job").tolist() == pytest.approx([1, -1, 1, -1])


@pytest.fixture(scope="module")
def warm():
    wl = _workloads(2)
    frame, _ = record_runs(wl, "optimus", RecorderConfig(teacher="optimus", net=NET, sim=SIM))
    return warmup(frame, WarmupConfig(hidden=(16, 16), head="rows", max_epochs=3))[0]


def test_grouped_ppo_is_deterministic_and_keeps_the_best_validated_policy(warm):
    train, val = _workloads(2), _workloads(1, first_seed=50)
    cfg = GroupedConfig(sim=SIM, iterations=3, group_size=3, val_every=1, minibatch=64, lr=1e-3)
    first, curve, m1 = finetune_grouped(train, val, cfg, init=warm)
    second, _, m2 = finetune_grouped(train, val, cfg, init=warm)
    for a, b in zip(first.net.state_dict().values(), second.net.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert m1 == {**m2, "train_wall_s": m1["train_wall_s"]}
    assert first.cfg == warm.cfg and first.value_net is None
    assert m1["algorithm"] == "grouped-ppo" and m1["samples"] > 0 and m1["policy_updates"] > 0
    assert curve["step"].to_list() == [0, 1, 2, 3]
    assert m1["best_val_avg_jct_s"] == min(curve["val_avg_jct_s"].to_list())
    # The returned weights are the best validated ones: they reproduce that figure.
    (jobs,) = val.values()
    assert average_jct(first, [jobs], replace(SIM, window=WINDOW)) == pytest.approx(
        m1["best_val_avg_jct_s"]
    )
    other, _, _ = finetune_grouped(train, val, replace(cfg, seed=1), init=warm)
    pairs = zip(first.net.state_dict().values(), other.net.state_dict().values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)


def test_job_noise_sticks_to_a_job_and_weights_what_the_policy_would_not_have_done(warm):
    from models.dl2.grouped import _rollout
    from models.dl2.networks import fast_policy
    from tracelib.envs import AllocationEnv, AllocationEnvConfig

    (jobs,) = _workloads(1).values()
    sim = replace(SIM, window=WINDOW)
    env = AllocationEnv(
        [list(jobs)],
        AllocationEnvConfig(obs=NET.obs, sim=sim, interval_s=NET.interval_s, trigger="events"),
    )
    fast = fast_policy(warm.net)
    plain = _rollout(env, fast, NET, np.random.default_rng(0), 5, 0)
    assert plain.rho == [1.0] * len(plain.action)  # sampled from the policy itself
    noisy = _rollout(env, fast, NET, np.random.default_rng(0), 5, 0, sigma=2.0)
    rho = np.array(noisy.rho)
    assert (rho <= 1.0).all() and (rho < 1.0).any()
    again = _rollout(env, fast, NET, np.random.default_rng(0), 5, 0, sigma=2.0)
    assert again.action == noisy.action and again.rho == noisy.rho  # one seed, one rollout
    # Every inference of a rollout that adds to a job is credited to that job's row.
    assert set(noisy.job) <= set(range(len(noisy.job_id))) | {-1}
    train, val = _workloads(2), _workloads(1, first_seed=50)
    cfg = GroupedConfig(sim=SIM, iterations=2, group_size=3, val_every=1, minibatch=64)
    cfg = replace(cfg, credit="job", job_noise=1.0)
    first, _, m1 = finetune_grouped(train, val, cfg, init=warm)
    second, _, m2 = finetune_grouped(train, val, cfg, init=warm)
    for a, b in zip(first.net.state_dict().values(), second.net.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert m1["samples"] == m2["samples"] > 0
    with pytest.raises(ValueError, match="credit"):
        GroupedConfig(credit="team")
    with pytest.raises(ValueError, match="job_noise"):
        GroupedConfig(job_noise=-1.0)


def test_a_rollout_that_stalls_is_dropped_not_raised(warm, monkeypatch):
    # Deciding at events only, a sampled allocation that leaves nothing running and no
    # arrival to come has no next decision; the simulator says so (SimulationStalled). The
    # rollout is dropped from its group instead of ending the training.
    calls = stall_steps(monkeypatch, lambda n: n == 40)  # in the first rollout
    train, val = _workloads(2), _workloads(1, first_seed=50)
    cfg = GroupedConfig(sim=SIM, iterations=1, group_size=3, val_every=1, minibatch=64)
    _, _, metrics = finetune_grouped(train, val, cfg, init=warm)
    assert calls["n"] > 40 and metrics["dropped_episodes"] == 1
    assert metrics["episodes"] == 3 and metrics["samples"] > 0


def test_training_stops_when_every_rollout_of_an_iteration_stalls(warm, monkeypatch):
    limit: list[int] = []  # empty: no stall yet
    calls = stall_steps(monkeypatch, lambda n: bool(limit) and n > limit[0])
    train, val = _workloads(2), _workloads(1, first_seed=50)
    cfg = GroupedConfig(sim=SIM, iterations=4, group_size=2, val_every=1, minibatch=64)
    finetune_grouped(train, val, replace(cfg, iterations=1), init=warm)
    limit.append(calls["n"])  # the first iteration plays as before, then stalls
    calls["n"] = 0
    _, curve, metrics = finetune_grouped(train, val, cfg, init=warm)
    assert metrics["collapsed_at"] == 2 and metrics["updates"] == 1
    assert curve["step"].to_list() == [0, 1]  # the collapsed policy is never validated
    assert metrics["best_val_avg_jct_s"] == min(curve["val_avg_jct_s"].to_list())


def test_stage_trains_dl2_by_grouped_ppo_and_the_papers_actor_critic_beside_it():
    cfg = DL2StageConfig()
    assert cfg.algorithm_of("dl2") == "grouped-ppo"
    assert cfg.algorithm_of("dl2-without-replay") == "actor-critic"
    # The actor-critic DL2 is trained beside it; without exploration is that same
    # actor-critic (exploration is off by default), so it is not trained twice.
    assert cfg.trained_variants() == (
        "dl2-without-grouped-ppo",
        "offline-rl",
        "dl2-without-critic",
        "dl2-without-replay",
    )
    paper = cfg.as_published()
    assert (
        paper.algorithm == "actor-critic"
        and "dl2-without-grouped-ppo" not in paper.trained_variants()
    )
    with pytest.raises(ValueError, match="algorithm"):
        DL2StageConfig(algorithm="reinforce")
    with pytest.raises(ValueError, match="group_size"):
        GroupedConfig(group_size=1)
