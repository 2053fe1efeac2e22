"""The papers' scenarios in one registry (tracelib.scenarios): every name builds, draws the
same sequence from the same seed, and names the workload set its own evaluation writes."""

from __future__ import annotations

import importlib

import pytest

from tracelib.scenarios import (
    RL_TAPS_SET,
    TRIGGERS,
    chic_set,
    harmony_set,
    is_scenario,
    names,
    scenario,
)
from tracelib.scenarios.harmony import ArrivalConfig, sequence


@pytest.mark.parametrize("name", names())
def test_every_registered_scenario_draws_the_same_sequence_from_the_same_seed(name):
    s = scenario(name)
    assert s.name == name and s.trigger in TRIGGERS
    assert s.paper in {"dl2", "harmony", "chic", "rl-taps"}
    first, again, other = s.sequence(3), s.sequence(3), s.sequence(4)
    assert first == again and first != other and len(first) > 0
    assert {job.model for job in first} <= {jt.model for jt in s.catalogue}
    assert s.sim_config(7).seed == 7


def test_names_are_the_ones_the_evaluations_write():
    assert harmony_set("poisson") == "harmony-poisson" and is_scenario("harmony-google")
    assert chic_set(1.8) == "chic@1.8/h" and scenario("chic@2.25/h").paper == "chic"
    assert RL_TAPS_SET == "rl-taps-bimodal" and scenario(RL_TAPS_SET).trigger == "steps"
    assert scenario("dl2-large").cluster.n_servers == 500
    assert not is_scenario("dl2-synthetic")  # a workload set of the warehouse
    with pytest.raises(KeyError, match="unknown scenario"):
        scenario("harmony-bursty")


def test_harmony_scenario_draws_harmonys_own_sequences():
    cfg = ArrivalConfig(pattern="google")
    assert scenario("harmony-google").sequence(11) == sequence(cfg, 11)


@pytest.mark.parametrize("old", ["tracelib.sim.chic", "models.harmony.workloads"])
def test_the_old_scenario_modules_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
