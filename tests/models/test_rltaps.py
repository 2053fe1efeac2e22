"""RL-TAPS: per-GPU masks, the REINFORCE update, training in both modes, the baselines' view,
checkpoints."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.checkpoints import CheckpointError
from models.rltaps.config import ReinforceConfig, RLTapsNetConfig
from models.rltaps.networks import PolicyNet, choose
from models.rltaps.policy import (
    RLTapsPolicy,
    VisibleSlots,
    baseline_scheduler,
    evaluate_schedulers,
    job_sequences,
    load_policy,
    run_episode,
)
from models.rltaps.reinforce import policy_gradient_loss, returns_and_advantages, train
from tracelib.envs.gpu import GpuAssignmentEnv, GpuEnvConfig, GpuObsConfig
from tracelib.scenarios.rltaps import rl_taps_scenario
from tracelib.sim import Simulator

ENV = GpuEnvConfig(obs=GpuObsConfig(slots=4, backlog=8), max_steps=60)
TINY = ReinforceConfig(
    env=ENV,
    hidden=32,
    n_jobs=6,
    train_sequences=2,
    val_sequences=2,
    episodes=3,
    batch_sequences=2,
    epochs=2,
    refresh_every=1,
)


def fresh_policy(seed: int = 0) -> RLTapsPolicy:
    torch.manual_seed(seed)
    return RLTapsPolicy(PolicyNet(RLTapsNetConfig.for_env(ENV, hidden=32)))


def test_network_shapes_follow_the_paper():
    cfg = RLTapsNetConfig()
    assert cfg.n_outputs == 32 * 11 and cfg.hidden_units == 528  # ceil(1.5 x 352)
    net = PolicyNet(cfg)
    logits = net(torch.zeros(3, cfg.input_dim))
    assert logits.shape == (3, 32, 11)
    env = GpuAssignmentEnv(job_sequences([0], 5), GpuEnvConfig())
    assert env.observation_space.shape == (cfg.input_dim,)


def test_per_gpu_masks_are_never_violated():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(32, 5))
    mask = np.zeros((32, 5), dtype=bool)
    mask[:, -1] = True
    mask[::2, 0] = True  # even GPUs may also take slot 0
    logits[:, 1] = 50.0  # the favourite slot is masked everywhere
    assert (choose(logits, mask, None)[1::2] == 4).all()
    for _ in range(50):
        picks = choose(logits, mask, rng)
        assert mask[np.arange(32), picks].all()
    # Torch side: masked entries get zero probability, each GPU's softmax sums to one.
    net = PolicyNet(RLTapsNetConfig(n_gpus=32, slots=4, horizon=2, max_gpus=2, backlog=1))
    obs = torch.rand(1, net.cfg.input_dim)
    p = net.log_probs(obs, torch.from_numpy(mask)[None]).exp()[0]
    assert torch.allclose(p.sum(-1), torch.ones(32))
    assert (p[torch.from_numpy(~mask)] == 0).all()


def test_sampled_episode_uses_only_valid_slots():
    env = GpuAssignmentEnv(job_sequences([1], 8), ENV)
    policy = fresh_policy()
    ep = run_episode(env, 0, policy=policy, rng=np.random.default_rng(1), record=True)
    assert ep.masks[np.arange(len(ep.choices))[:, None], np.arange(32), ep.choices].all()
    assert ep.obs.shape == (len(ep.rewards), policy.cfg.input_dim)
    assert ep.slowdown >= 1.0


def test_returns_and_per_step_baseline():
    returns, adv = returns_and_advantages([np.array([1.0, 1.0, 1.0]), np.array([3.0])], 0.5)
    np.testing.assert_allclose(returns, [[1.75, 1.5, 1.0], [3.0, 0.0, 0.0]])
    np.testing.assert_allclose(adv, [[-0.625, 0.75, 0.5], [0.625, -0.75, -0.5]])
    assert np.allclose(adv.sum(axis=0), 0.0)  # b_t is the mean over episodes


def test_one_reinforce_update_favours_the_better_episode():
    env = GpuAssignmentEnv(job_sequences([2], 5), ENV)
    policy = fresh_policy(3)
    rng = np.random.default_rng(0)
    eps = [run_episode(env, 0, policy=policy, rng=rng, record=True) for _ in range(2)]
    n = min(len(e.rewards) for e in eps)
    for e, r in zip(eps, (1.0, -1.0), strict=True):  # same length, opposite rewards
        e.rewards, e.obs, e.masks, e.choices = np.full(n, r), e.obs[:n], e.masks[:n], e.choices[:n]

    def logp(ep) -> float:
        with torch.no_grad():
            lp, _ = policy.net.log_prob_and_entropy(
                torch.from_numpy(ep.obs), torch.from_numpy(ep.masks), torch.from_numpy(ep.choices)
            )
        return float(lp.sum())

    before = logp(eps[0]) - logp(eps[1])
    optimizer = torch.optim.SGD(policy.net.parameters(), lr=1e-3)
    loss, entropy = policy_gradient_loss(policy.net, eps, 1.0, 1.0 / 2)
    loss.backward()
    optimizer.step()
    assert entropy > 0
    assert logp(eps[0]) - logp(eps[1]) > before


def test_training_in_both_modes_is_deterministic():
    policy, curve, metrics = train(TINY)
    assert curve["iteration"].to_list() == [0, 1, 2]
    assert curve["updates"].to_list() == [0, 1, 2]
    assert metrics["episodes"] == 2 * 2 * 3
    assert len(set(curve["val_seeds"])) == 1  # static validation set
    again, curve2, _ = train(TINY)
    assert curve.drop("wall_s").equals(curve2.drop("wall_s"))
    for a, b in zip(policy.net.parameters(), again.net.parameters(), strict=True):
        assert torch.equal(a, b)
    streaming, s_curve, s_metrics = train(replace(TINY, mode="streaming"))
    assert streaming.system == "rl-taps-streaming" and policy.system == "rl-taps"
    assert s_curve["val_seeds"].n_unique() == 3  # fresh validation sequences every epoch
    assert len(s_metrics["train_seeds"]) == 2  # fresh training sequences every epoch
    assert s_metrics["train_seeds"][0] != s_metrics["train_seeds"][1]


def test_fine_tuning_starts_from_the_given_policy():
    start = fresh_policy(5)
    tuned, _, _ = train(replace(TINY, epochs=1, keep_best=False), init=start)
    assert tuned is not start
    changed = any(
        not torch.equal(a, b)
        for a, b in zip(start.net.parameters(), tuned.net.parameters(), strict=True)
    )
    assert changed
    wrong = replace(TINY, env=replace(ENV, obs=GpuObsConfig(slots=5, backlog=8)))
    with pytest.raises(ValueError, match="does not fit"):
        train(wrong, init=start)


def test_baselines_only_start_jobs_from_the_visible_slots():
    jobs = job_sequences([4], 30)[0]
    scenario = rl_taps_scenario()
    picker = baseline_scheduler("sjf", slots=2)
    assert isinstance(picker.allocation, VisibleSlots)
    session = Simulator(
        jobs, picker, scenario.cfg, scenario.catalogue, speed_model=scenario.speed_model
    ).session()
    while not session.done:
        snap = session.snapshot
        alloc, placement = picker.decide(snap, session.rng)
        waiting = [j.job_id for j in snap.jobs if not j.placement.workers]
        started = [j for j in alloc.counts if j in waiting]
        assert set(started) <= set(waiting[:2])
        session.submit(alloc, placement)


@pytest.mark.parametrize("name", ["srtf-preemptive", "tiresias-las", "tiresias-gittins"])
def test_preemptive_baselines_run_in_the_scenario_and_pause_jobs(name):
    # On RL-TAPS' 32 GPUs and its bimodal mix (half the jobs ask for 8-12 GPUs), the arena's
    # preemptive baselines take GPUs from running jobs; SJF never does.
    jobs = job_sequences([4], 30)[0]
    scenario = rl_taps_scenario()

    def pauses(scheduler) -> int:
        session = Simulator(
            jobs, scheduler, scenario.cfg, scenario.catalogue, speed_model=scenario.speed_model
        ).session()
        count = 0
        while not session.done:
            snap = session.snapshot
            alloc, placement = scheduler.decide(snap, session.rng)
            count += sum(
                1 for j in snap.jobs if j.placement.workers and j.job_id not in alloc.counts
            )
            session.submit(alloc, placement)
        return count

    picker = baseline_scheduler(name)
    assert picker.name == f"{name}+first-fit" and isinstance(picker.allocation, VisibleSlots)
    assert pauses(picker) > 0 and pauses(baseline_scheduler("sjf")) == 0
    with pytest.raises(ValueError, match="known: random, sjf, tetris, tiresias-las"):
        baseline_scheduler("tiresias")


def test_evaluation_runs_everyone_in_the_same_environment(tmp_path):
    seqs = job_sequences([7, 8], 8)
    policy = fresh_policy()
    out = evaluate_schedulers(
        {"rl-taps-nonstreaming": policy, "random": None, "sjf": None, "tetris": None}, seqs, ENV
    )
    assert set(out) == {"rl-taps-nonstreaming", "random", "sjf", "tetris"}
    assert all(len(v) == 2 and all(s >= 1.0 for _, s in v) for v in out.values())
    # Non-preemptive pickers pay no under-allocation penalty: their reward is throughput
    # minus the idle cost only, which SJF keeps lower than an untrained network.
    path = tmp_path / "p.pt"
    sha = policy.save(path)
    loaded = load_policy(path, sha256=sha)
    again = evaluate_schedulers({"rl-taps-nonstreaming": loaded}, seqs, ENV)
    assert again["rl-taps-nonstreaming"] == out["rl-taps-nonstreaming"]
    with pytest.raises(CheckpointError, match="modified"):
        load_policy(path, sha256="0" * 64)


def test_resumption_cost_is_charged_when_a_paused_job_resumes():
    seqs = job_sequences([9], 3)

    def trained_after_pause(cost: float) -> float:
        env = GpuAssignmentEnv(seqs, replace(ENV, resume_cost_s=cost))
        env.reset(seed=0, options={"workload": 0})
        first = env.session.snapshot.jobs[0].job_id
        run = np.full(32, 4)
        run[:2] = 0
        env.step(run)  # trains
        env.step(np.full(32, 4))  # paused
        env.step(run)  # resumes
        return env.session.epochs_done()[first][0]

    assert trained_after_pause(30.0) < trained_after_pause(0.0)
