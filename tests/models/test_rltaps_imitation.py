"""RL-TAPS' warm start (a measured deviation): a fresh network imitates SJF's decisions in
RL-TAPS' own action space before REINFORCE; `as_published()` trains from random weights."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from models.rltaps.config import ReinforceConfig, RLTapsNetConfig
from models.rltaps.imitation import imitate, imitation_loss, teacher_samples
from models.rltaps.networks import PolicyNet
from models.rltaps.policy import RLTapsPolicy, baseline_scheduler, job_sequences
from models.rltaps.reinforce import train
from tests.models.test_rltaps import ENV, TINY
from tracelib.envs.gpu import GpuAssignmentEnv


def _env(n: int = 3, n_jobs: int = 8) -> GpuAssignmentEnv:
    return GpuAssignmentEnv(job_sequences(list(range(11, 11 + n)), n_jobs), ENV)


def test_the_teachers_decision_is_rltaps_action_that_means_it():
    env = _env(1)
    scheduler = baseline_scheduler("sjf", ENV.obs.slots, 0)
    env.reset(seed=0, options={"workload": 0})
    checked = 0
    while True:
        snap = env.session.snapshot
        alloc, placement = scheduler.decide(snap, env.session.rng)
        choice = env.choice_of(placement)
        if (choice >= 0).all():
            # Every GPU nameable: RL-TAPS' action with this choice is the same decision.
            _, same, invalid = env.decision(choice)
            assert invalid == 0
            for job in snap.jobs:
                assert set(same.get(job.job_id).workers) == set(placement.get(job.job_id).workers)
            checked += 1
        _, _, terminated, truncated, _ = env.step_decision(alloc, placement)
        if terminated or truncated:
            break
    assert checked > 5


def test_imitation_learns_the_teacher_and_is_deterministic():
    env = _env()
    samples = teacher_samples(env, "sjf")
    assert samples.obs.shape[0] == samples.masks.shape[0] == samples.targets.shape[0]
    # Every target the teacher gives is an action the mask allows.
    rows, gpus = np.nonzero(samples.targets >= 0)
    assert samples.masks[rows, gpus, samples.targets[rows, gpus]].all()

    def fresh() -> RLTapsPolicy:
        torch.manual_seed(0)
        return RLTapsPolicy(PolicyNet(RLTapsNetConfig.for_env(ENV, hidden=32)))

    obs, mask = torch.from_numpy(samples.obs), torch.from_numpy(samples.masks)
    targets = torch.from_numpy(samples.targets)
    policy = fresh()
    with torch.no_grad():
        before, right_before = imitation_loss(policy, obs, mask, targets)
    cfg = replace(TINY, imitation_epochs=30)
    metrics = imitate(policy, samples, cfg, np.random.default_rng(3))
    assert metrics["imitation_loss"] < 0.5 * float(before)
    assert metrics["imitation_accuracy"] > max(0.9, int(right_before) / (targets >= 0).sum())
    # (What the imitation is worth in slowdown is the benchmark's: bench_rltaps.)
    again = fresh()
    imitate(again, samples, cfg, np.random.default_rng(3))
    for a, b in zip(policy.net.parameters(), again.net.parameters(), strict=True):
        assert torch.equal(a, b)


def test_training_imitates_first_unless_as_published():
    cfg = replace(TINY, epochs=1, imitation_epochs=2)
    assert cfg.teacher == "sjf" and cfg.imitates
    _, curve, metrics = train(cfg)
    assert metrics["teacher"] == "sjf" and metrics["imitation_steps"] > 0
    # Iteration 0 of the curve is the imitation's result, recorded beside the untrained one.
    assert curve["val_slowdown"][0] == metrics["initial_val_slowdown"]
    assert "untrained_val_slowdown" in metrics
    published = cfg.as_published()
    assert published.teacher is None and not published.imitates
    # The paper's scenario charges no resume cost; the default charges the measured one.
    assert published.env.resume_cost_s == 0 < cfg.env.resume_cost_s
    assert replace(published, teacher="sjf", env=cfg.env) == cfg
    _, _, plain = train(published)
    assert "teacher" not in plain and "imitation_steps" not in plain
    # Continuing from a policy never imitates again: it already schedules.
    start = train(published)[0]
    _, _, tuned = train(cfg, init=start)
    assert "imitation_steps" not in tuned


def test_reinforce_config_default_is_the_measured_one():
    assert ReinforceConfig().teacher == "sjf"
    assert ReinforceConfig().as_published().teacher is None
