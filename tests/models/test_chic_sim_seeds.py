"""Chic's evaluation episodes run on the simulator seeds the baselines run each sequence on."""

from __future__ import annotations

import pytest

from models.chic import ChicNetConfig
from models.chic.networks import ChicPolicyNet
from models.chic.policy import ChicPolicy, episode_results
from tracelib.envs.chic import ChicEnv
from tracelib.scenarios.chic import ChicScenario


def _recorded_seeds(monkeypatch, sim_seeds):
    seen: list[int] = []
    original = ChicEnv._sim_config

    def record(self, sim_seed):
        seen.append(sim_seed)
        return original(self, sim_seed)

    monkeypatch.setattr(ChicEnv, "_sim_config", record)
    scenario = ChicScenario(rate_per_hour=2.0, jobs_per_sequence=3)
    seeds = (101, 202)
    net = ChicPolicyNet(ChicNetConfig())
    net.eval()
    policy = ChicPolicy(net, {"env": {"variant": "chic", "max_phase_steps": 300}})
    results = episode_results(
        policy, scenario.sequences(seeds), scenario, seed=0, sim_seeds=sim_seeds
    )
    assert len(results) == 2
    return seen


def test_each_sequence_runs_on_its_own_simulator_seed(monkeypatch):
    # The Optimus baselines run sequence k on simulator seed seeds[k]; Chic must too.
    assert _recorded_seeds(monkeypatch, (101, 202)) == [101, 202]


def test_without_seeds_the_simulator_seed_comes_from_the_episode_seed(monkeypatch):
    seen = _recorded_seeds(monkeypatch, None)
    assert len(seen) == 2 and seen[0] == seen[1]  # one constant seed: unpaired with baselines


def test_a_seed_per_sequence_is_required(monkeypatch):
    with pytest.raises(ValueError, match="simulator seeds"):
        _recorded_seeds(monkeypatch, (1,))
