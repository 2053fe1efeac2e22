import numpy as np
import polars as pl
import pytest

from tracelib.contracts import Jobs
from tracelib.synthetic import (
    EPOCH,
    GENERATORS,
    BimodalConfig,
    DiurnalConfig,
    PoissonConfig,
    UniformConfig,
    bimodal_trace,
    diurnal_trace,
    poisson_trace,
    synthetic_source,
    uniform_trace,
)
from warehouse.io import validate


@pytest.mark.parametrize("kind", sorted(GENERATORS))
def test_same_seed_same_trace_other_seed_other_trace(kind):
    config_type, _ = GENERATORS[kind]
    a, source_a = synthetic_source(kind, config_type(seed=7))
    b, source_b = synthetic_source(kind, config_type(seed=7))
    c, _ = synthetic_source(kind, config_type(seed=8))
    assert a.equals(b)
    assert source_a.item(0, "content_hash") == source_b.item(0, "content_hash")
    assert not a.equals(c)
    validate(a, Jobs)  # every generator writes valid `jobs` rows


def arrival_seconds(frame: pl.DataFrame) -> np.ndarray:
    return ((frame.get_column("submit_time") - EPOCH).dt.total_microseconds() / 1e6).to_numpy()


def test_diurnal_arrivals_follow_the_day_and_respect_the_slot_cap():
    cfg = DiurnalConfig(n_jobs=4000, mean_arrivals_per_slot=2.0, max_arrivals_per_slot=5)
    t = arrival_seconds(diurnal_trace(cfg))
    slots = (t // cfg.slot_s).astype(int)
    assert np.bincount(slots).max() <= cfg.max_arrivals_per_slot
    hour = (t % 86400) / 3600
    near_peak = np.sum(np.abs(hour - cfg.peak_hour) < 3)
    near_trough = np.sum(np.abs(hour - (cfg.peak_hour + 12) % 24) < 3)
    assert near_peak > 2 * near_trough
    weekday = (t // 86400).astype(int) % 7
    per_day = np.bincount(weekday, minlength=7) / np.maximum(
        np.bincount(np.unique(t // 86400).astype(int) % 7, minlength=7), 1
    )
    assert per_day[5:].mean() < per_day[:5].mean()


def test_diurnal_durations_match_dl2_trace_statistics():
    frame = diurnal_trace(DiurnalConfig(n_jobs=20000))
    minutes = frame.get_column("duration_s").to_numpy() / 60
    assert 120 < minutes.mean() < 160  # DL2: 147 minutes on average (clipped tail)
    assert np.mean(minutes > 60) > 0.5  # "over a half of jobs run for more than an hour"


def test_poisson_rate_and_sizes():
    cfg = PoissonConfig(n_jobs=3000, rate_per_hour=2.7)
    frame = poisson_trace(cfg)
    t = arrival_seconds(frame)
    assert abs(len(t) / (t[-1] / 3600) - 2.7) < 0.2
    epochs = frame.get_column("epochs").to_numpy()
    assert epochs.min() >= 100 and epochs.max() <= 200
    assert set(frame.get_column("model").unique()) == {"resnet-50", "vgg-16", "resnext-110"}


def test_uniform_counts_per_interval():
    cfg = UniformConfig(n_jobs=3000)
    t = arrival_seconds(uniform_trace(cfg))
    assert np.all(t % cfg.interval_s == 0)
    counts = np.bincount((t // cfg.interval_s).astype(int))
    assert counts.max() <= 6 and abs(counts[:-1].mean() - 3.0) < 0.2
    workers = uniform_trace(cfg).get_column("num_workers").to_numpy()
    assert workers.min() == 1 and workers.max() == 3


def test_bimodal_mix():
    cfg = BimodalConfig(n_jobs=5000)
    frame = bimodal_trace(cfg)
    steps = frame.get_column("duration_s").to_numpy() / cfg.step_s
    assert abs(np.mean(steps <= 3) - 0.8) < 0.03
    assert set(np.unique(steps[steps > 3])) <= set(range(10, 16))
    t = arrival_seconds(frame) / cfg.step_s
    assert abs(len(t) / (t[-1] + 1) - 0.7) < 0.03
    gpus = frame.get_column("num_gpus").to_numpy()
    assert gpus.min() >= 1 and gpus.max() <= 12 and abs(np.mean(gpus <= 7) - 0.5) < 0.03
    taps = bimodal_trace(BimodalConfig.rl_taps(n_jobs=400))
    assert (arrival_seconds(taps) / cfg.step_s == np.arange(400)).all()  # one job per step
