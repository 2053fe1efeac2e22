"""The benchmarks pool training seeds with test sequences nested in seeds."""

from __future__ import annotations

from benchmarks import bench_chic


def test_pooled_ratios_count_training_seeds_not_sequences(capsys):
    # Two training seeds x three sequences: Chic's ACT is 0.8x Optimus' on every sequence
    # of seed 0 and 1.0x on seed 1, so the mean is 0.9 over n=2 seeds (6 pairs would claim
    # six independent samples).
    per_seed = [
        {"chic": {1.8: [80.0, 160.0, 240.0]}, "optimus-600": {1.8: [100.0, 200.0, 300.0]}},
        {"chic": {1.8: [50.0, 60.0, 70.0]}, "optimus-600": {1.8: [50.0, 60.0, 70.0]}},
    ]
    bench_chic._paired(per_seed, [1.8])
    line = next(x for x in capsys.readouterr().out.splitlines() if "optimus-600" in x)
    assert "0.900" in line and "n=2" in line


def test_rltaps_pooled_ratios_count_training_seeds():
    from benchmarks import bench_rltaps

    per_seed = [
        {"rl-taps-streaming": [8.0, 16.0], "sjf": [10.0, 20.0]},
        {"rl-taps-streaming": [10.0, 10.0], "sjf": [10.0, 10.0]},
    ]
    pooled = bench_rltaps._pooled_ratio(per_seed, "rl-taps-streaming", "sjf")
    assert pooled.n_pairs == 2 and abs(pooled.ratio - 0.9) < 1e-12
    alone = bench_rltaps._pooled_ratio(per_seed[:1], "rl-taps-streaming", "sjf")
    assert alone.n_pairs == 2 and abs(alone.ratio - 0.8) < 1e-12
