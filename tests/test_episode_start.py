"""`tracelib.envs.environments.episode_start`: the sequence and simulator seed of an
episode follow from the reset's generator and options alone."""

from __future__ import annotations

import numpy as np

from tracelib.envs.environments import episode_start


def test_named_sequence_still_draws_the_simulator_seed():
    rng, same = np.random.default_rng(5), np.random.default_rng(5)
    k, seed = episode_start(rng, 10, {"workload": 7})
    assert k == 7
    assert seed == int(same.integers(2**31 - 1))


def test_drawn_sequence_comes_before_the_seed():
    rng, same = np.random.default_rng(9), np.random.default_rng(9)
    k, seed = episode_start(rng, 4, None)
    assert k == int(same.integers(4))
    assert seed == int(same.integers(2**31 - 1))
    assert episode_start(np.random.default_rng(9), 4, {}) == (k, seed)
