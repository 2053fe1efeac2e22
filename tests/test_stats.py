"""The paired block bootstrap behind a whole-trace replay's intervals
(`tracelib.stats.block_bootstrap_ratio`)."""

from __future__ import annotations

import numpy as np
import pytest

from tracelib.stats import block_bootstrap_ratio


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_two_blocks_by_hand():
    # Block totals: candidate 1 and 3, reference 2 and 2. Drawing two blocks with
    # replacement gives ratio 2/4 (block 0 twice, p = 1/4), 4/4 (one of each, p = 1/2) or
    # 6/4 (block 1 twice, p = 1/4): the 95% percentile interval is [0.5, 1.5].
    candidate = [0.5, 0.5, 1.0, 2.0]
    reference = [1.0, 1.0, 1.5, 0.5]
    blocks = [0, 0, 1, 1]
    result = block_bootstrap_ratio(candidate, reference, blocks, _rng())
    assert result.ratio == pytest.approx(1.0)
    assert (result.low, result.high) == pytest.approx((0.5, 1.5))
    assert result.n_pairs == 2 and result.wins == 1


def test_pairing_by_block_cancels_the_blocks_own_load():
    # Days of very different load, the candidate 10% better on every job: every resample
    # of blocks gives exactly 0.9, however unequal the days.
    rng = _rng(1)
    blocks = np.repeat(np.arange(30), 50)
    day_load = rng.lognormal(0.0, 1.5, 30)[blocks]
    reference = day_load * rng.lognormal(0.0, 1.0, blocks.size)
    result = block_bootstrap_ratio(0.9 * reference, reference, blocks, _rng())
    assert result.ratio == pytest.approx(0.9)
    assert (result.low, result.high) == pytest.approx((0.9, 0.9))
    assert result.wins == 30


def test_blocks_not_jobs_are_the_unit():
    # One bad day for the candidate: per job the difference looks tiny and certain, per
    # day it rests on one block out of ten, and the interval says so.
    blocks = np.repeat(np.arange(10), 100)
    reference = np.ones(blocks.size)
    candidate = np.where(blocks == 3, 3.0, 0.95)
    result = block_bootstrap_ratio(candidate, reference, blocks, _rng())
    assert result.ratio == pytest.approx((900 * 0.95 + 300) / 1000)
    assert result.low < 1.0 < result.high  # not resolved: the bad day may or may not be drawn
    assert result.wins == 9


def test_same_seed_same_interval_and_one_block_has_none():
    rng = np.random.default_rng(5)
    a, b = rng.random(200) + 0.5, rng.random(200) + 0.5
    blocks = rng.integers(0, 12, 200)
    assert block_bootstrap_ratio(a, b, blocks, _rng(7)) == block_bootstrap_ratio(
        a, b, blocks, _rng(7)
    )
    one = block_bootstrap_ratio(a, b, np.zeros(200, dtype=int), _rng())
    assert one.low is None and one.high is None and one.n_pairs == 1
    assert one.ratio == pytest.approx(a.sum() / b.sum())


def test_unequal_samples_are_refused():
    with pytest.raises(ValueError, match="equal, non-empty"):
        block_bootstrap_ratio([1.0, 2.0], [1.0], [0, 1], _rng())
    with pytest.raises(ValueError, match="equal, non-empty"):
        block_bootstrap_ratio([], [], [], _rng())


def test_seeds_of_one_sequence_are_one_unit():
    from tracelib.stats import paired_ratio

    # 2 sequences x 3 seeds: n is 2, not 6, and the interval is over the two sequences'
    # mean ratios (0.8 and 1.0): mean 0.9, sd 0.1414, t(1) = 12.706 -> half width 1.2706.
    reference = np.ones(6)
    candidate = np.array([0.79, 0.80, 0.81, 0.99, 1.00, 1.01])
    sequences = ["a", "a", "a", "b", "b", "b"]
    by_sequence = paired_ratio(candidate, reference, units=sequences)
    assert by_sequence.n_pairs == 2 and by_sequence.wins == 1
    assert by_sequence.ratio == pytest.approx(0.9)
    assert (by_sequence.low, by_sequence.high) == pytest.approx(
        (0.9 - 1.2706, 0.9 + 1.2706), abs=1e-3
    )
    # Counting the six runs as pairs claims an interval ten times narrower.
    by_run = paired_ratio(candidate, reference)
    assert by_run.n_pairs == 6
    assert (by_run.high - by_run.low) < (by_sequence.high - by_sequence.low) / 10


def test_pooled_runs_nest_sequences_in_runs():
    from tracelib.stats import nested_ratio, paired_ratio

    # Two trainings (runs) with 6 sequences each: one run's policy is 20% better on every
    # sequence, the other's is level. Over runs the interval must span 1 (two runs that
    # disagree); over twelve sequences as if independent it would not.
    runs = ["r1"] * 6 + ["r2"] * 6
    sequences = [f"s{k}" for k in range(6)] * 2
    reference = np.ones(12)
    candidate = np.array([0.8] * 6 + [1.0] * 6)
    pooled = nested_ratio(candidate, reference, runs, sequences)
    assert pooled.n_pairs == 2 and pooled.ratio == pytest.approx(0.9)
    assert pooled.low < 1.0 < pooled.high
    cells = [f"{r}/{q}" for r, q in zip(runs, sequences, strict=True)]
    flat = paired_ratio(candidate, reference, units=cells)
    assert flat.n_pairs == 12 and flat.high < 1.0  # the overclaim nesting removes
