"""Chic / Chic-Pair: the paper's stopping conditions, penalties and reward, and the
modified cross-entropy method on a tiny problem."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from models.chic.cem import elite_bound, train_cem
from models.chic.config import CEMConfig, ChicNetConfig
from models.chic.networks import ChicPolicyNet, NumpyPolicy
from models.chic.policy import ChicPolicy, evaluate_policy, load_policy
from tests.imports import packages_loaded_by
from tests.sim.views import job_view
from tracelib.envs.chic import ChicActions, ChicEnv, ChicEnvConfig, ChicSchedule, chic_features
from tracelib.scenarios.chic import CHIC_CATALOGUE, ChicScenario, iteration_time_s, split_seeds
from tracelib.sim.jobs import JobSpec
from tracelib.sim.snapshot import JobView

TYPES = {jt.model: jt for jt in CHIC_CATALOGUE}
CAPACITY = np.array([10.0, 120.0, 600.0])


def view(job_id: int, model: str, epochs: float = 150.0) -> JobView:
    return job_view(TYPES[model], job_id, epochs_est=epochs)


def schedule(jobs, variant="chic", capacity=CAPACITY, **kw) -> ChicSchedule:
    return ChicSchedule(jobs, TYPES, capacity, ChicEnvConfig(variant=variant), 3, **kw)


# -- scenario ---------------------------------------------------------------------------


def test_scenario_is_the_papers_setting():
    sc = ChicScenario(rate_per_hour=2.7)
    demands = {jt.model: (jt.worker_demand, jt.ps_demand) for jt in CHIC_CATALOGUE}
    assert demands["vgg-16"] == ((1, 2, 10), (0, 4, 10))
    assert demands["resnet-50"] == ((1, 2, 8), (0, 3, 9))
    assert demands["resnext-110"] == ((1, 2, 10), (0, 3, 10))
    jobs = sc.sequence(5)
    assert len(jobs) == 30 and jobs[0].arrival_s == 0.0
    assert all(100 <= j.epochs <= 200 for j in jobs)
    assert {j.model for j in jobs} <= set(TYPES)
    cfg = sc.sim_config()
    assert cfg.trigger == "events" and cfg.window == 3
    assert cfg.cluster.gpus == 10 and cfg.cluster.cpus == 120 and cfg.cluster.mem_gb == 600
    assert not set(split_seeds("train", 50)) & set(split_seeds("test", 50))
    # Same seed, another rate: same models and sizes, arrival gaps scaled.
    slow = ChicScenario(rate_per_hour=0.9).sequence(5)
    assert [j.model for j in slow] == [j.model for j in jobs]
    assert slow[-1].arrival_s == pytest.approx(3 * jobs[-1].arrival_s)


# -- stopping conditions ------------------------------------------------------------------


def test_condition_1_resources_exhausted():
    # Room for one ResNet-50 worker (1 GPU, 2 cores) and then less than the smallest task.
    s = schedule([view(0, "resnet-50")], capacity=np.array([1.0, 3.0, 100.0]))
    assert not s.resources_exhausted() and not s.finished()
    s.apply(0)  # a worker: 1 core left, every task needs 2 or more
    assert s.resources_exhausted() and s.finished()


def test_condition_1_pair_form():
    # A ResNet-50 pair needs 5 cores: with 6 there is room for one pair, not two.
    s = schedule([view(0, "resnet-50")], "chic-pair", capacity=np.array([10.0, 6.0, 600.0]))
    assert not s.finished()
    assert s.apply(0) == 0.0
    assert s.resources_exhausted()


def test_condition_2_no_addition_shortens_an_iteration():
    jt = TYPES["resnext-110"]
    s = schedule([view(0, "resnext-110")])
    assert s.improvable(0)  # nothing yet: it cannot train, it can only gain
    # Walk to a (w, p) where neither one more worker nor one more PS helps.
    w, p = 1, 1
    while True:
        now = iteration_time_s(jt, w, p)
        if iteration_time_s(jt, w + 1, p) < now:
            w += 1
        elif iteration_time_s(jt, w, p + 1) < now:
            p += 1
        else:
            break
    for _ in range(w):
        s.apply(0)
    for _ in range(p):
        s.apply(1)
    assert (s.workers[0], s.ps[0]) == (w, p)
    assert not s.improvable(0) and s.no_gain() and s.finished()
    # A second job that could still gain keeps the phase open.
    s2 = schedule([view(0, "resnext-110"), view(1, "vgg-16")])
    s2.workers[0], s2.ps[0] = w, p
    assert not s2.no_gain()


def test_pair_stops_at_the_best_pair_count():
    jt = TYPES["resnext-110"]
    best = min(range(1, 11), key=lambda k: iteration_time_s(jt, k, k))
    env = ChicEnv(
        [(JobSpec(0, "resnext-110", 150.0, 0.0),)],
        ChicScenario(),
        ChicEnvConfig(variant="chic-pair"),
    )
    env.reset(seed=0)
    steps = 0
    while env.schedule is not None:
        env.step(0)
        steps += 1
    assert steps == best  # the env ended the phase itself (condition 2) after `best` pairs
    allocs = [e for e in env.result().events if e.kind == "alloc"]
    assert [(e.workers, e.ps) for e in allocs] == [(best, best)]


# -- penalties and reward -----------------------------------------------------------------


def test_penalties_p1_and_p2():
    env = ChicEnv([(JobSpec(0, "vgg-16", 120.0, 0.0),)], ChicScenario(), ChicEnvConfig())
    obs, _ = env.reset(seed=0)
    assert len(obs) == len(chic_features("chic", 3)) and env.action_space.n == 7
    before = obs.copy()
    obs, r, done, _, _ = env.step(2)  # a worker for job 2, which does not exist
    assert r == -5.0 and not done and np.array_equal(obs, before)
    obs, r, *_ = env.step(3)  # a PS for the absent job 2
    assert r == -5.0
    _, r, *_ = env.step(0)  # job 0's first task: a worker without a PS
    assert r == -1.0
    _, r, *_ = env.step(0)  # still no PS
    assert r == 0.0
    _, r, *_ = env.step(1)  # its first PS: the penalty is given back
    assert r == 1.0
    pair = ChicEnv(
        [(JobSpec(0, "vgg-16", 120.0, 0.0),)], ChicScenario(), ChicEnvConfig(variant="chic-pair")
    )
    pair.reset(seed=0)
    assert pair.action_space.n == ChicActions("chic-pair", 3).n == 4
    assert pair.step(1)[1] == -5.0
    assert pair.step(0)[1] == 0.0  # no p2 in Chic-Pair


def test_masks_void_and_absent_jobs():
    s = schedule([view(0, "vgg-16")])
    mask = s.mask()
    assert mask[:2].all() and mask[2:6].all()  # absent jobs: penalized, not masked
    assert not mask[-1]  # void with nothing trainable and nothing to arrive: masked
    s2 = schedule([view(0, "vgg-16")], pending_arrivals=3)
    assert s2.mask()[-1]
    masked = ChicSchedule(
        [view(0, "vgg-16")], TYPES, CAPACITY, ChicEnvConfig(mask_absent=True), 3
    ).mask()
    assert masked[:2].all() and not masked[2:6].any()


def test_return_is_minus_total_time_in_system():
    sc = ChicScenario(jobs_per_sequence=8, rate_per_hour=2.7)
    env = ChicEnv([sc.sequence(3)], sc, ChicEnvConfig(variant="chic-pair", mask_absent=True))
    _, info = env.reset(seed=1)
    total = info["initial_reward"]
    rng = np.random.default_rng(0)
    while env.schedule is not None:
        mask = env.action_masks()
        total += env.step(int(rng.choice(np.flatnonzero(mask))))[1]
    jobs = env.result().jobs
    assert jobs["finish_s"].null_count() == 0
    assert total == pytest.approx(-float(jobs["jct_s"].sum()) / 1200.0)


# -- the modified cross-entropy method --------------------------------------------------


def test_elite_bound_is_the_papers_quantile():
    returns = [float(r) for r in range(1, 37)]  # N = 35 plus the uniform trajectory
    assert elite_bound(returns, 35, 0.3) == 24.0  # R_(floor(0.7 * 35)) = R_(24)
    assert sum(r >= 24.0 for r in returns) == 13


TINY = ChicScenario(jobs_per_sequence=5, rate_per_hour=2.7)


def tiny_cfg(**kw) -> CEMConfig:
    return CEMConfig(
        variant=kw.pop("variant", "chic"),
        scenario=TINY,
        iterations=1,
        n_trajectories=5,
        fit_epochs=2,
        val_every=1,
        **kw,
    )


def test_one_cem_iteration_on_a_tiny_problem(tmp_path):
    torch.set_num_threads(1)
    train = TINY.sequences(split_seeds("train", 3))
    val = TINY.sequences(split_seeds("validation", 2))
    # From random weights (no warm start): the one iteration is the policy kept, whatever
    # a clone of the teacher would score (the warm start has its own tests).
    cfg = tiny_cfg(teacher=None)
    policy, curve, metrics = train_cem(train, val, cfg)
    assert curve.height == 1
    row = curve.row(0, named=True)
    assert 1 <= row["n_elite"] <= 6 and row["best_return"] >= row["elite_bound"]
    assert row["fit_loss"] is not None and row["fit_loss"] > 0
    assert row["val_act_s"] == pytest.approx(metrics["best_val_act_s"])
    # The elite fit moved the weights away from their initialization.
    init, _, _ = train_cem(train, val, replace(cfg, fit_epochs=1, lr=1e-12))
    trained_w, init_w = policy.net.state_dict(), init.net.state_dict()
    moved = any(not torch.allclose(trained_w[k], init_w[k]) for k in trained_w)
    assert moved
    # Same seed, same policy; the checkpoint round-trips.
    again, curve2, _ = train_cem(train, val, cfg)
    again_w = again.net.state_dict()
    assert all(torch.equal(trained_w[k], again_w[k]) for k in trained_w)
    assert curve.drop("wall_s").equals(curve2.drop("wall_s"))
    sha = policy.save(tmp_path / "p.pt")
    loaded = load_policy(tmp_path / "p.pt", sha256=sha)
    assert isinstance(loaded, ChicPolicy) and loaded.system == "chic"
    acts = evaluate_policy(loaded, val, TINY)
    assert acts == evaluate_policy(policy, val, TINY)
    assert all(math.isfinite(a) and a > 0 for a in acts)


def test_chic_pair_trains_too():
    train = TINY.sequences(split_seeds("train", 2))
    val = TINY.sequences(split_seeds("validation", 1))
    policy, curve, _ = train_cem(train, val, tiny_cfg(variant="chic-pair"))
    assert policy.system == "chic-pair" and policy.net.cfg.n_actions == 4
    assert curve.height == 1


def test_work_conserving_option_masks_void_while_an_idle_job_fits():
    cfg = ChicEnvConfig(work_conserving=True)
    s = ChicSchedule([view(0, "vgg-16"), view(1, "resnet-50")], TYPES, CAPACITY, cfg, 3, 0, 2)
    assert not s.mask()[-1]  # paper's mask would allow it (jobs still to arrive)
    s.apply(0)
    s.apply(1)  # job 0 trains; job 1 still idle
    assert not s.mask()[-1]
    s.apply(3)
    s.apply(2)
    assert s.mask()[-1]
    assert schedule([view(0, "vgg-16")], pending_arrivals=2).mask()[-1]


def test_scenario_and_env_are_torch_free():
    assert packages_loaded_by("import tracelib.scenarios.chic, tracelib.envs.chic", "torch") == []


def test_chics_configs_are_torch_free():
    """`schedlab run` reads the configs' fields for its flags before it trains anything."""
    code = (
        "import models.chic; from models.chic.config import ChicNetConfig; "
        "assert ChicNetConfig(setting='dl2').input_dim > 0"
    )
    assert packages_loaded_by(code, "torch") == []


def _plain_logits(actor: NumpyPolicy, obs: np.ndarray) -> np.ndarray:
    """The network's layers as written, one new array per operation."""
    x = obs.astype(np.float64)
    for k, (w, b) in enumerate(zip(actor.weights, actor.biases, strict=True)):
        x = x @ w + b
        if k < len(actor.weights) - 1:
            np.maximum(x, 0.0, out=x)
    return x


def _plain_act(actor: NumpyPolicy, obs, mask, rng) -> int:
    z = np.where(mask, _plain_logits(actor, obs), -np.inf)
    if rng is None:
        return int(np.argmax(z))
    z = np.exp(z - z.max())
    p = z / z.sum()
    return int(min(np.searchsorted(np.cumsum(p), rng.random() * p.sum()), len(p) - 1))


@pytest.mark.parametrize("variant", ["chic", "chic-pair"])
def test_numpy_policy_buffers_give_the_plain_layers_bit_for_bit(variant):
    # Inference writes each layer into a buffer: logits, probabilities and actions (greedy,
    # and sampled from the same generator state, one draw per action) must be exactly
    # those of the plain layers, on observations like the arena's (mostly zero rows).
    torch.manual_seed(3)
    net = ChicPolicyNet(ChicNetConfig(variant=variant, window=6, setting="dl2"))
    actor = NumpyPolicy(net)
    rng = np.random.default_rng(5)
    fast_rng, plain_rng = np.random.default_rng(9), np.random.default_rng(9)
    dim, n = net.cfg.input_dim, net.cfg.n_actions
    for _ in range(500):
        obs = (rng.random(dim) * (rng.random(dim) < 0.3) * 3).astype(np.float32)
        mask = rng.random(n) < rng.random()
        mask[rng.integers(n)] = True
        first = actor.logits(obs)
        kept = first.copy()
        assert first.tobytes() == _plain_logits(actor, obs).tobytes()
        z = np.where(mask, first, -np.inf)
        plain_p = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        assert actor.probs(obs, mask).tobytes() == plain_p.tobytes()
        assert actor.act(obs, mask, None) == _plain_act(actor, obs, mask, None)
        assert actor.act(obs, mask, fast_rng) == _plain_act(actor, obs, mask, plain_rng)
        actor.logits(obs * 2)
        assert first.tobytes() == kept.tobytes()  # a copy, not the buffer later calls reuse
    assert fast_rng.random() == plain_rng.random()
