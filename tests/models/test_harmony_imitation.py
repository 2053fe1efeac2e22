"""Harmony's warm start: LIF-Quad's placements recorded as policy actions, cloned, and the
actor-critic starting from the clone (kept unless training beats it)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from models.harmony.imitation import imitate, teacher_samples
from models.harmony.placement import HarmonyNetConfig, PolicyNet
from models.harmony.reward import RewardTrainConfig, fit_reward_model
from models.harmony.train import (
    PlacementTrainConfig,
    train_placement,
    validate,
    warm_key,
    warm_start,
)
from tracelib.envs.environments import PlacementEnvConfig
from tracelib.interference import InterferenceConfig, collect_samples
from tracelib.scenarios.harmony import ArrivalConfig, sequences

torch.set_num_threads(1)
NET = HarmonyNetConfig(hidden=(32, 32, 16), row_embed=8)
CFG = PlacementTrainConfig(
    net=NET, updates=4, val_every=2, n_workers=2, imitation_epochs=8, teacher="lif-quad"
)
TRAIN = sequences(ArrivalConfig(n_jobs=8), 3, 1)
VAL = sequences(ArrivalConfig(n_jobs=8), 1, 2)


@pytest.fixture(scope="module")
def predictor():
    samples = collect_samples(InterferenceConfig(n_samples=300, seed=3))
    return fit_reward_model(samples, RewardTrainConfig(epochs=1, hidden=(32, 32, 16))).predictor


@pytest.fixture(scope="module")
def recorded(predictor):
    env_cfg = PlacementEnvConfig(obs=NET.obs_config(), sim=CFG.sim)
    return teacher_samples(TRAIN, "lif-quad", env_cfg, predictor)


def test_teacher_actions_are_allowed_and_place_jobs_in_arrival_order(recorded):
    layout = NET.actions
    assert len(recorded) > 20
    assert recorded.obs.shape == (len(recorded), NET.obs_dim)
    for mask, action in zip(recorded.masks, recorded.actions, strict=True):
        assert mask[action]
        row, role, _ = layout.decode(int(action))
        grid = layout.grid(mask)  # (N', 2, M)
        # the first job with a task the mask allows is the one placed (Harmony's baselines)
        assert row == int(np.flatnonzero(grid.any(axis=(1, 2)))[0])
        assert grid[row, role].any()


def test_teacher_must_be_a_known_rule(predictor):
    with pytest.raises(ValueError, match="unknown teacher 'sjf'"):
        teacher_samples(TRAIN, "sjf", PlacementEnvConfig(obs=NET.obs_config()), predictor)


def test_cloning_learns_the_teachers_actions_and_is_deterministic(recorded):
    def clone(seed: int) -> tuple[PolicyNet, dict]:
        torch.manual_seed(0)
        net = PolicyNet(NET)
        m = imitate(net, recorded, epochs=40, lr=3e-3, batch=16, rng=np.random.default_rng(seed))
        return net, m

    torch.manual_seed(0)
    untrained = PolicyNet(NET)
    with torch.no_grad():
        logits = untrained.masked_logits(
            torch.from_numpy(recorded.obs), torch.from_numpy(recorded.masks)
        )
    before = float((logits.argmax(-1) == torch.from_numpy(recorded.actions)).float().mean())
    net, metrics = clone(1)
    assert metrics["imitation_accuracy"] > max(0.5, before + 0.2)
    assert metrics["imitation_steps"] == len(recorded)
    again, _ = clone(1)
    for a, b in zip(net.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)


def test_training_starts_from_the_warm_start_shared_or_not(predictor):
    policy, _, metrics = train_placement(TRAIN, VAL, predictor, CFG)
    assert metrics["started_from"] == "imitation of lif-quad"
    assert 0 <= metrics["imitation_held_out_accuracy"] <= 1
    warm = warm_start(TRAIN, predictor, CFG)
    shared, _, shared_metrics = train_placement(TRAIN, VAL, predictor, CFG, warm=warm)
    for a, b in zip(policy.net.parameters(), shared.net.parameters(), strict=True):
        assert torch.equal(a, b)
    assert shared_metrics["imitation_accuracy"] == metrics["imitation_accuracy"]
    # A variant differing only in the actor-critic has the same warm start ...
    assert warm_key(replace(CFG, replay=False)) == warm.key
    # ... another teacher does not, and is refused.
    with pytest.raises(ValueError, match="another config"):
        train_placement(TRAIN, VAL, predictor, replace(CFG, teacher="lif-line"), warm=warm)


def test_the_warm_start_is_kept_unless_training_beats_it(predictor):
    warm = warm_start(TRAIN, predictor, CFG)
    kept, curve, metrics = train_placement(
        TRAIN, VAL, predictor, replace(CFG, updates=0), warm=warm
    )
    assert curve.height == 0 and metrics["best_val_step"] == 0
    for name, tensor in kept.net.state_dict().items():
        assert torch.equal(tensor, warm.state[name])


def test_an_update_replaces_the_warm_start_only_when_significantly_better(predictor):
    val = sequences(ArrivalConfig(n_jobs=8), 3, 2)
    cfg = replace(CFG, updates=8, val_every=1, seed=2, lr=3e-3, significant_update=False)
    warm = warm_start(TRAIN, predictor, cfg)
    # By the lowest mean alone, an update whose paired ratio to the start is not
    # significantly below 1 replaces the start ...
    _, _, lowest = train_placement(TRAIN, val, predictor, cfg, warm=warm)
    assert lowest["best_val_step"] > 0
    assert lowest["best_update_val_ratio_high"] >= 1.0
    # ... and with the significance rule (the default) it does not.
    kept, curve, metrics = train_placement(
        TRAIN, val, predictor, replace(cfg, significant_update=True), warm=warm
    )
    assert metrics["best_val_step"] == 0 and curve.height == 8
    assert metrics["best_val_avg_jct_s"] == validate(kept, val, CFG.sim, None).mean()
    for name, tensor in kept.net.state_dict().items():
        assert torch.equal(tensor, warm.state[name])


def test_validation_judges_by_the_simulators_jcts_unless_told_the_rollouts(predictor):
    warm = warm_start(TRAIN, predictor, CFG)
    rollouts = replace(CFG, updates=0, validation_speed="rollouts")
    for cfg, speed_model in ((replace(CFG, updates=0), None), (rollouts, predictor)):
        kept, _, metrics = train_placement(TRAIN, VAL, predictor, cfg, warm=warm)
        assert metrics["best_val_avg_jct_s"] == validate(kept, VAL, CFG.sim, speed_model).mean()
    assert CFG.as_published().validation_speed == "rollouts"
    with pytest.raises(ValueError, match="validation_speed must be one of"):
        replace(CFG, validation_speed="predictor")


def test_as_published_trains_from_random_weights(predictor):
    cfg = replace(CFG.as_published(), net=NET)
    assert cfg.teacher is None
    _, _, metrics = train_placement(TRAIN, VAL, predictor, cfg)
    assert "started_from" not in metrics and "imitation_accuracy" not in metrics
    with pytest.raises(ValueError, match="needs a teacher"):
        warm_start(TRAIN, predictor, cfg)
