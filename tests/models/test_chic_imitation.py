"""Chic's warm start: Optimus' schedules recorded as Chic actions (allowed by the masks, in
Chic's own scenario and in the arena), cloned deterministically, and the CEM starting from
the clone (validated as iteration 0; none as published or from a starting policy)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.chic.cem import train_cem, warm_key, warm_start
from models.chic.config import CEMConfig
from models.chic.imitation import by_rows, chic_actions, imitate, teacher_samples
from models.chic.networks import ChicPolicyNet
from models.heuristics.optimus import Optimus
from tracelib.envs.chic import ChicActions
from tracelib.scenarios.chic import ChicArenaScenario, ChicScenario, split_seeds
from tracelib.sim import ClusterConfig, SimConfig
from tracelib.sim.jobs import JobSpec

torch.set_num_threads(1)
TINY = ChicScenario(jobs_per_sequence=6, rate_per_hour=2.7)
TRAIN = TINY.sequences(split_seeds("train", 3))
VAL = TINY.sequences(split_seeds("validation", 2))
ARENA = ChicArenaScenario(sim=SimConfig(cluster=ClusterConfig(n_servers=4), window=20), window=4)
ARENA_JOBS = (
    JobSpec(0, "resnet-50", 40.0, 0.0, 2, 2),
    JobSpec(1, "dssm", 30.0, 0.0, 1, 1),
    JobSpec(2, "vgg-16", 20.0, 1500.0, 2, 1),
    JobSpec(3, "seq2seq", 60.0, 2000.0, 1, 2),
)


def cfg(**kw) -> CEMConfig:
    return CEMConfig(
        variant=kw.pop("variant", "chic"),
        scenario=kw.pop("scenario", TINY),
        iterations=kw.pop("iterations", 1),
        n_trajectories=3,
        fit_epochs=2,
        val_every=1,
        imitation_epochs=kw.pop("imitation_epochs", 5),
        **kw,
    )


def test_optimus_additions_become_chic_actions():
    steps = [(0, 1, 1), (1, 1, 1), (0, 1, 0), (0, 0, 1), (1, 0, 1), (0, 1, 0)]
    chic = ChicActions("chic", 4)
    assert chic_actions(steps, chic) == [0, 1, 2, 3, 0, 1, 3, 0]
    assert chic_actions(by_rows(steps), chic) == [0, 1, 0, 1, 0, 2, 3, 3]
    # Chic-Pair: a pair whenever the smaller of a job's counts rises.
    assert chic_actions(steps, ChicActions("chic-pair", 4)) == [0, 1, 0]


@pytest.mark.parametrize("variant", ["chic", "chic-pair"])
@pytest.mark.parametrize("where", ["own", "arena"])
def test_teacher_actions_are_allowed_by_the_mask(variant, where):
    if where == "own":
        c, seqs = cfg(variant=variant), TRAIN
    else:
        c, seqs = cfg(variant=variant, scenario=ARENA), [ARENA_JOBS]
    samples = teacher_samples(seqs, c)
    n_actions = c.net_config.n_actions
    assert len(samples) > 10 and samples.schedules > 0
    assert samples.obs.shape == (len(samples), c.net_config.input_dim)
    assert samples.masks.shape == (len(samples), n_actions)
    assert all(mask[a] for mask, a in zip(samples.masks, samples.actions, strict=True))
    assert np.isfinite(samples.teacher_act_s) and samples.teacher_act_s > 0
    assert (samples.actions < n_actions - 1).any()
    if where == "own":  # (the tiny arena's 4 servers fill up: S' ends its schedules)
        assert (samples.actions == n_actions - 1).any()  # Optimus stops by void


def test_chic_teacher_rebuilds_optimus_allocation_in_the_arena():
    """With nothing skipped, the env's first schedule is exactly Optimus' allocation."""
    c = cfg(scenario=ARENA)
    samples = teacher_samples([ARENA_JOBS], c, order="optimus")
    assert samples.skipped == 0
    from models.chic.policy import make_env

    env = make_env([ARENA_JOBS], ARENA, c.env_config)
    env.reset(seed=int(np.random.SeedSequence([0, 0]).generate_state(1)[0] >> 1))
    snap = env.schedule.snap
    expected, steps = Optimus().allocate_in_order(snap)
    chic = ChicActions("chic", ARENA.window)
    first = chic_actions(steps, chic)
    assert list(samples.actions[: len(first)]) == first
    rows = teacher_samples([ARENA_JOBS], c, order="rows")
    assert list(rows.actions[: len(first)]) == chic_actions(by_rows(steps), chic)
    assert sorted(rows.actions[: len(first)]) == sorted(first)
    for a in first:
        decoded = chic.decode(a)
        assert decoded is not None
        env.schedule.apply(a)
    assert env.schedule.allocation() == expected


def test_cloning_learns_and_is_deterministic():
    c = cfg()
    samples = teacher_samples(TRAIN, c)

    def clone(epochs: int) -> tuple[ChicPolicyNet, dict]:
        torch.manual_seed(0)
        net = ChicPolicyNet(c.net_config)
        metrics = imitate(
            net, samples, epochs=epochs, lr=3e-3, batch=64, rng=np.random.default_rng(1)
        )
        return net, metrics

    _, untrained = clone(0)
    net, trained = clone(30)
    assert trained["imitation_accuracy"] > untrained["imitation_accuracy"] + 0.1
    assert trained["imitation_held_out_accuracy"] > 0.5
    again, _ = clone(30)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in net.state_dict().items())
    # warm_start: pure in its arguments, and torch's global generator is left alone.
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    w1 = warm_start(TRAIN, c)
    assert torch.equal(torch.random.get_rng_state(), before)
    w2 = warm_start(TRAIN, c)
    assert w1.key == w2.key == warm_key(c)
    assert all(torch.equal(v, w2.state[k]) for k, v in w1.state.items())
    assert w1.metrics["teacher"] == "optimus" and w1.metrics["imitation_steps"] > 0


def test_zero_iterations_return_the_validated_clone():
    c = cfg(iterations=0)
    warm = warm_start(TRAIN, c)
    policy, curve, metrics = train_cem(TRAIN, VAL, c, warm=warm)
    assert curve.height == 0
    assert metrics["best_iteration"] == 0 and metrics["started_from"] == "imitation of optimus"
    assert metrics["best_val_act_s"] == pytest.approx(metrics["clone_val_act_s"])
    assert all(torch.equal(v, warm.state[k]) for k, v in policy.net.state_dict().items())
    # A warm start made for another config is refused.
    with pytest.raises(ValueError, match="another config"):
        train_cem(TRAIN, VAL, replace(c, imitation_epochs=6), warm=warm)


def test_cem_starts_from_the_clone_and_keeps_the_best_validated():
    _, curve, metrics = train_cem(TRAIN, VAL, cfg(iterations=2))
    assert curve.height == 2 and metrics["started_from"] == "imitation of optimus"
    best = min([metrics["clone_val_act_s"], *curve["val_act_s"].drop_nulls().to_list()])
    assert metrics["best_val_act_s"] == pytest.approx(best)
    assert "imitation_held_out_accuracy" in metrics


def test_as_published_and_a_starting_policy_have_no_warm_start():
    paper = cfg().as_published()
    assert paper.teacher is None
    with pytest.raises(ValueError, match="needs a teacher"):
        warm_start(TRAIN, paper)
    with pytest.raises(ValueError, match="0 iterations need a teacher"):
        train_cem(TRAIN, VAL, replace(paper, iterations=0))
    with pytest.raises(ValueError, match="imitation_order"):
        cfg(imitation_order="sjf")
    policy, _, metrics = train_cem(TRAIN, VAL, paper)
    assert metrics["started_from"] == "random weights"
    assert "imitation_steps" not in metrics
    _, _, resumed = train_cem(TRAIN, VAL, cfg(), init=policy.__class__(policy.net, {}))
    assert resumed["started_from"] == "the starting policy" and "teacher" not in resumed
