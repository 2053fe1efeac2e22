"""Harmony's setting as named scenarios (harmony-uniform, harmony-poisson, harmony-google):
its 6-server testbed (`harmony_testbed`), 20-minute intervals with fixed placement
(`harmony_sim`), and its job sequences under the three arrival patterns (section VI.B,
Fig. 8):

    uniform  a count drawn uniformly from 0..2*mean per interval (mean 3: the default)
    poisson  Poisson counts per interval (rate 2)
    google   Google-cluster-like: Poisson counts whose rate follows a log-normal AR(1)
             process (bursty, autocorrelated arrivals with a heavy tail, as Reiss et al.
             describe the Google trace), downscaled to a mean of 2 per interval. No Google
             trace is available here; this reproduces its burstiness, not its exact series.

Each job: a model uniformly from Harmony's six Table I models, workers and PSs uniform in
[1, 3] (its "job variants"), and a size in epochs such that alone, with its requested
workers and PSs, it would train for a log-normal time (median `median_min`), clipped; the
paper downscales datasets "so that the training can be finished in a reasonable time".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tracelib.catalogue import by_name
from tracelib.seeds import named_streams
from tracelib.sim.config import ClusterConfig, SimConfig, SpeedConfig
from tracelib.sim.jobs import JobSpec
from tracelib.sim.speed import SpeedModel
from tracelib.synthetic import HARMONY_MODELS

PATTERNS = ("uniform", "poisson", "google")


def harmony_testbed() -> ClusterConfig:
    """Harmony's testbed: 6 servers of the same kind."""
    return ClusterConfig(n_servers=6)


def harmony_sim() -> SimConfig:
    """Harmony's setting: its 6-server testbed, 20-minute intervals, fixed placement, and
    the default run-to-run variation (10% per job, 5% per interval, as the evaluation)."""
    return SimConfig(
        cluster=harmony_testbed(),
        speed=SpeedConfig(),
        fixed_placement=True,
    )


@dataclass(frozen=True)
class ArrivalConfig:
    """One arrival pattern's job sequences."""

    pattern: str = "uniform"
    n_jobs: int = 30
    """Jobs per sequence."""
    interval_s: float = 1200.0
    """Scheduling interval (20 minutes)."""
    uniform_mean: float = 3.0
    poisson_rate: float = 2.0
    google_rate: float = 2.0
    google_sigma: float = 0.8
    """Standard deviation of the log rate (burstiness)."""
    google_rho: float = 0.7
    """Autocorrelation of the log rate from one interval to the next."""
    median_min: float = 30.0
    """Median run time alone at the requested size, minutes."""
    sigma: float = 0.8
    """Log-normal shape of the run time."""
    min_min: float = 10.0
    max_min: float = 240.0
    models: tuple[str, ...] = HARMONY_MODELS
    max_workers: int = 3
    max_ps: int = 3

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {PATTERNS}, got {self.pattern!r}")
        if self.n_jobs < 1:
            raise ValueError("n_jobs must be at least 1")


def _counts(cfg: ArrivalConfig, rng: np.random.Generator) -> list[int]:
    counts: list[int] = []
    log_rate = 0.0
    while sum(counts) < cfg.n_jobs:
        if cfg.pattern == "uniform":
            counts.append(int(rng.integers(0, round(2 * cfg.uniform_mean) + 1)))
        elif cfg.pattern == "poisson":
            counts.append(int(rng.poisson(cfg.poisson_rate)))
        else:
            s, rho = cfg.google_sigma, cfg.google_rho
            log_rate = rho * log_rate + np.sqrt(1 - rho**2) * s * rng.standard_normal()
            # exp(N(0, s^2)) has mean exp(s^2 / 2): divide it out to keep the mean rate.
            counts.append(int(rng.poisson(cfg.google_rate * np.exp(log_rate - s * s / 2))))
    return counts


def sequence(cfg: ArrivalConfig, seed: int) -> tuple[JobSpec, ...]:
    """One job sequence of the pattern, a pure function of (cfg, seed)."""
    rng = named_streams(seed, ("arrivals", "models", "sizes"))
    arrivals, models, sizes = rng["arrivals"], rng["models"], rng["sizes"]
    counts = _counts(cfg, arrivals)
    slots = np.repeat(np.arange(len(counts)), counts)[: cfg.n_jobs]
    named = by_name()
    speed = SpeedModel()
    jobs = []
    for k, slot in enumerate(slots):
        model = cfg.models[int(models.integers(len(cfg.models)))]
        w = int(models.integers(1, cfg.max_workers + 1))
        p = int(models.integers(1, cfg.max_ps + 1))
        minutes = float(
            np.clip(
                cfg.median_min * np.exp(cfg.sigma * sizes.standard_normal()),
                cfg.min_min,
                cfg.max_min,
            )
        )
        jt = named[model]
        per_s = float(speed.base([jt.type_index], [w], [p])[0]) / jt.iters_per_epoch
        jobs.append(
            JobSpec(
                job_id=k,
                model=model,
                epochs=max(minutes * 60.0 * per_s, 1e-3),
                arrival_s=float(slot) * cfg.interval_s,
                num_workers=w,
                num_ps=p,
            )
        )
    return tuple(jobs)


SPLIT_SEED_OFFSETS = {"train": 1, "validation": 2, "evaluation": 3}
"""A run's training, validation and held-out sequences come from its seed plus these
(`split_seed`): distinct roots, so no held-out sequence is one trained or validated on."""


def split_seed(seed: int, split: str) -> int:
    """The root seed of `split`'s sequences (`SPLIT_SEED_OFFSETS`) for a run seeded `seed`."""
    return seed + SPLIT_SEED_OFFSETS[split]


def sequences(cfg: ArrivalConfig, n: int, seed: int) -> list[tuple[JobSpec, ...]]:
    """n sequences, seeds spawned from `seed`."""
    children = np.random.SeedSequence(seed).spawn(n)
    return [sequence(cfg, int(c.generate_state(1)[0])) for c in children]
