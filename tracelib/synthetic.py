"""Seeded synthetic job traces in the `jobs` schema, one generator per paper's workload.

    diurnal_trace   DL2: arrivals per 20-minute slot following a daily/weekly cycle
    poisson_trace   Chic: Poisson arrivals at a rate per hour
    uniform_trace   Harmony: a uniform random number of arrivals per interval
    bimodal_trace   DeepRM / RL-TAPS: Bernoulli arrivals per step, bimodal lengths and GPU asks

Each returns a frame with exactly the `jobs` columns (source_id filled in), so synthetic and
production traces take the same path through workload derivation. Randomness comes only from
the `numpy.random.Generator`s built from the config's seed, one stream per quantity
(arrivals, models, sizes, allocation requests, users), so changing how one quantity is drawn
does not reshuffle the others.

Job size: a synthetic job's `duration_s` is its run time with one worker and one PS, so
workload derivation (which converts durations with the single-worker speed) recovers it
exactly. Generators whose papers state sizes in epochs (Chic) set `epochs` directly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, JobType, by_name
from tracelib.contracts import JOB_COLUMNS
from tracelib.provenance import canonical_json, sha256_hex
from tracelib.seeds import named_streams

# A Monday at midnight: slot 0 starts a week, so the weekly pattern is aligned.
EPOCH = datetime(2026, 1, 5)
DL2_MODELS = tuple(jt.model for jt in DL2_CATALOGUE)
# Harmony Table I: the six MXNet-tutorial models of its interference study.
HARMONY_MODELS = ("resnet-50", "vgg-16", "resnext-110", "seq2seq", "cnn-text", "wlm")
"""Harmony's six Table I models as its text names them (ResNet, VGG-16, ResNeXt-110,
Seq2Seq, WLM and the CPU-heavy CTC, for which the catalogue's CPU-only CNN-text stands in);
the same set `tracelib.sim.calibration.HARMONY_TABLE_I` calibrates interference on."""
CHIC_MODELS = ("resnet-50", "vgg-16", "resnext-110")
GPU_MODELS = tuple(jt.model for jt in DL2_CATALOGUE if jt.worker_gpu > 0)
_STREAMS = ("arrivals", "models", "sizes", "requests", "users")


@dataclass(frozen=True)
class DurationDist:
    """Log-normal job run time, parameterized by its mean and median in minutes.

    Default from DL2 section 6.1 (production trace): mean 147 minutes and "over a half of
    jobs run for more than an hour"; the median of 70 minutes is our choice within that.
    """

    mean_min: float = 147.0
    median_min: float = 70.0
    min_min: float = 5.0
    max_min: float = 3 * 24 * 60.0

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n run times in seconds."""
        if not self.median_min < self.mean_min:
            raise ValueError("a log-normal's mean must exceed its median")
        mu = math.log(self.median_min)
        sigma = math.sqrt(2.0 * (math.log(self.mean_min) - mu))
        minutes = np.clip(rng.lognormal(mu, sigma, n), self.min_min, self.max_min)
        return minutes * 60.0


@dataclass(frozen=True)
class DiurnalConfig:
    """DL2-style arrivals: a Poisson count per slot whose rate follows the day and week.

    DL2 Fig. 8(a) shows a week of arrivals per 20-minute slot with daily peaks; the rate
    here is mean * (1 + amplitude * cos(2 pi (hour - peak_hour) / 24)), times
    weekend_factor on Saturdays and Sundays, capped at max_arrivals_per_slot (DL2's
    simulator caps arrivals per slot: 3 in its small setting, 10 in the large one).
    """

    n_jobs: int = 200
    seed: int = 0
    slot_s: float = 1200.0
    mean_arrivals_per_slot: float = 1.5
    max_arrivals_per_slot: int = 3
    daily_amplitude: float = 0.6
    peak_hour: float = 14.0
    weekend_factor: float = 0.6
    models: tuple[str, ...] = DL2_MODELS
    durations: DurationDist = DurationDist()
    max_workers_requested: int = 4
    max_ps_requested: int = 4


@dataclass(frozen=True)
class PoissonConfig:
    """Chic section 5: Poisson arrivals (0.9 to 2.7 per hour), three models, 100-200 iterations.

    Chic states job size as iterations of its own speed model; we record it as epochs.
    """

    n_jobs: int = 30
    seed: int = 0
    rate_per_hour: float = 1.8
    models: tuple[str, ...] = CHIC_MODELS
    min_epochs: int = 100
    max_epochs: int = 200
    max_workers_requested: int = 3
    max_ps_requested: int = 3


@dataclass(frozen=True)
class UniformConfig:
    """Harmony section VI: 3 jobs per 20-minute interval on average, uniformly random
    (a count drawn uniformly from 0..2*mean), workers and PSs each uniform in [1, 3]."""

    n_jobs: int = 60
    seed: int = 0
    interval_s: float = 1200.0
    mean_jobs_per_interval: float = 3.0
    models: tuple[str, ...] = HARMONY_MODELS
    durations: DurationDist = DurationDist()
    max_workers_requested: int = 3
    max_ps_requested: int = 3


@dataclass(frozen=True)
class BimodalConfig:
    """DeepRM's job mix as RL-TAPS uses it: Bernoulli(new_job_rate) arrivals per time step;
    a share of short jobs (1-3 steps) and long ones (10-15 steps); GPU requests bimodal too.

    Defaults are DeepRM's (rate 0.7, 80% short, long 10-15) with RL-TAPS's GPU asks (half 1-7,
    half 8-12); `rl_taps()` gives RL-TAPS section 5.1's own mix.
    """

    n_jobs: int = 100
    seed: int = 0
    step_s: float = 60.0
    new_job_rate: float = 0.7
    short_share: float = 0.8
    short_steps: tuple[int, int] = (1, 3)
    long_steps: tuple[int, int] = (10, 15)
    small_gpu_share: float = 0.5
    small_gpus: tuple[int, int] = (1, 7)
    large_gpus: tuple[int, int] = (8, 12)
    models: tuple[str, ...] = GPU_MODELS

    @classmethod
    def rl_taps(cls, n_jobs: int = 400, seed: int = 0) -> BimodalConfig:
        """RL-TAPS section 5.1: one job per step, half 1-3 steps and half 6-10 steps."""
        return cls(n_jobs=n_jobs, seed=seed, new_job_rate=1.0, short_share=0.5, long_steps=(6, 10))


def _streams(seed: int) -> dict[str, np.random.Generator]:
    return named_streams(seed, _STREAMS)


def diurnal_trace(cfg: DiurnalConfig, source_id: str = "synthetic:dl2-diurnal") -> pl.DataFrame:
    rng = _streams(cfg.seed)
    slots_per_day = 86400.0 / cfg.slot_s
    counts: list[int] = []
    slot = 0
    while sum(counts) < cfg.n_jobs:
        hour = (slot % slots_per_day) * 24.0 / slots_per_day
        weekday = int(slot // slots_per_day) % 7
        rate = cfg.mean_arrivals_per_slot * (
            1.0 + cfg.daily_amplitude * math.cos(2 * math.pi * (hour - cfg.peak_hour) / 24.0)
        )
        if weekday >= 5:
            rate *= cfg.weekend_factor
        counts.append(min(int(rng["arrivals"].poisson(rate)), cfg.max_arrivals_per_slot))
        slot += 1
    slots = np.repeat(np.arange(len(counts)), counts)[: cfg.n_jobs]
    # Arrivals spread uniformly inside their slot.
    offsets = rng["arrivals"].uniform(0.0, cfg.slot_s, cfg.n_jobs)
    arrivals = np.sort(slots * cfg.slot_s + offsets)
    return _frame(
        source_id,
        arrivals,
        rng,
        cfg.models,
        durations=cfg.durations.sample(rng["sizes"], cfg.n_jobs),
        max_workers=cfg.max_workers_requested,
        max_ps=cfg.max_ps_requested,
    )


def poisson_trace(cfg: PoissonConfig, source_id: str = "synthetic:chic-poisson") -> pl.DataFrame:
    rng = _streams(cfg.seed)
    gaps = rng["arrivals"].exponential(3600.0 / cfg.rate_per_hour, cfg.n_jobs)
    arrivals = np.cumsum(gaps) - gaps[0]
    epochs = rng["sizes"].integers(cfg.min_epochs, cfg.max_epochs + 1, cfg.n_jobs).astype(float)
    models = _pick_models(rng, cfg.models, cfg.n_jobs)
    durations = np.array(
        [e / by_name()[m].epochs_per_second(1, 1) for e, m in zip(epochs, models, strict=True)]
    )
    return _frame(
        source_id,
        arrivals,
        rng,
        cfg.models,
        durations=durations,
        max_workers=cfg.max_workers_requested,
        max_ps=cfg.max_ps_requested,
        epochs=epochs,
        models=models,
    )


def uniform_trace(cfg: UniformConfig, source_id: str = "synthetic:harmony-uniform") -> pl.DataFrame:
    rng = _streams(cfg.seed)
    high = round(2 * cfg.mean_jobs_per_interval)
    counts: list[int] = []
    while sum(counts) < cfg.n_jobs:
        counts.append(int(rng["arrivals"].integers(0, high + 1)))
    intervals = np.repeat(np.arange(len(counts)), counts)[: cfg.n_jobs]
    # Harmony batches each interval's arrivals; they arrive at the interval's start.
    arrivals = intervals * cfg.interval_s
    return _frame(
        source_id,
        arrivals.astype(float),
        rng,
        cfg.models,
        durations=cfg.durations.sample(rng["sizes"], cfg.n_jobs),
        max_workers=cfg.max_workers_requested,
        max_ps=cfg.max_ps_requested,
    )


def bimodal_trace(cfg: BimodalConfig, source_id: str = "synthetic:deeprm-bimodal") -> pl.DataFrame:
    rng = _streams(cfg.seed)
    steps: list[int] = []
    step = 0
    while len(steps) < cfg.n_jobs:
        if rng["arrivals"].random() < cfg.new_job_rate:
            steps.append(step)
        step += 1
    n = cfg.n_jobs
    short = rng["sizes"].random(n) < cfg.short_share
    length = np.where(
        short,
        rng["sizes"].integers(cfg.short_steps[0], cfg.short_steps[1] + 1, n),
        rng["sizes"].integers(cfg.long_steps[0], cfg.long_steps[1] + 1, n),
    )
    small = rng["requests"].random(n) < cfg.small_gpu_share
    gpus = np.where(
        small,
        rng["requests"].integers(cfg.small_gpus[0], cfg.small_gpus[1] + 1, n),
        rng["requests"].integers(cfg.large_gpus[0], cfg.large_gpus[1] + 1, n),
    )
    models = _pick_models(rng, cfg.models, n)
    catalogue = by_name()
    cpus = np.array([catalogue[m].worker_cpu for m in models]) * gpus
    mem = np.array([catalogue[m].worker_mem_gb for m in models]) * gpus
    frame = _base_frame(source_id, np.array(steps, dtype=float) * cfg.step_s, rng, n)
    return frame.with_columns(
        pl.Series("duration_s", length * cfg.step_s, dtype=pl.Float64),
        pl.Series("num_gpus", gpus, dtype=pl.Float64),
        pl.Series("num_cpus", cpus, dtype=pl.Float64),
        pl.Series("mem_gb", mem, dtype=pl.Float64),
        # All-reduce jobs: one worker per GPU, no parameter servers.
        pl.Series("num_workers", gpus, dtype=pl.Int32),
        pl.Series("num_ps", np.zeros(n), dtype=pl.Int32),
        pl.Series("model", models, dtype=pl.Utf8),
    ).select(list(JOB_COLUMNS))


def _pick_models(rng: dict[str, np.random.Generator], models: tuple[str, ...], n: int) -> list[str]:
    known = by_name()
    unknown = [m for m in models if m not in known]
    if unknown:
        raise ValueError(f"models {unknown} are not in the catalogue {sorted(known)}")
    return [models[i] for i in rng["models"].integers(0, len(models), n)]


def _base_frame(
    source_id: str, arrivals_s: np.ndarray, rng: dict[str, np.random.Generator], n: int
) -> pl.DataFrame:
    users = rng["users"].integers(0, 20, n)
    submit = [EPOCH + timedelta(seconds=float(s)) for s in arrivals_s]
    return pl.DataFrame(
        {
            "source_id": [source_id] * n,
            "job_id": [f"job-{i:06d}" for i in range(n)],
            "submit_time": pl.Series(submit, dtype=pl.Datetime("us")),
            "status": ["completed"] * n,
            "user_name": [f"user-{u:02d}" for u in users],
            "vc": [f"vc-{u % 4}" for u in users],
        }
    ).with_columns(
        pl.lit(None, dtype=pl.Datetime("us")).alias("start_time"),
        pl.lit(None, dtype=pl.Datetime("us")).alias("end_time"),
        pl.lit(None, dtype=pl.Float64).alias("epochs"),
        # Synthetic clusters are homogeneous: no job asks for a GPU type.
        pl.lit(None, dtype=pl.Utf8).alias("gpu_type"),
    )


def _frame(
    source_id: str,
    arrivals_s: np.ndarray,
    rng: dict[str, np.random.Generator],
    model_pool: tuple[str, ...],
    *,
    durations: np.ndarray,
    max_workers: int,
    max_ps: int,
    epochs: np.ndarray | None = None,
    models: list[str] | None = None,
) -> pl.DataFrame:
    n = len(arrivals_s)
    models = models if models is not None else _pick_models(rng, model_pool, n)
    workers = rng["requests"].integers(1, max_workers + 1, n)
    ps = rng["requests"].integers(1, max_ps + 1, n)
    types: list[JobType] = [by_name()[m] for m in models]
    gpu = np.array([t.worker_gpu for t in types]) * workers
    cpu = (
        np.array([t.worker_cpu for t in types]) * workers + np.array([t.ps_cpu for t in types]) * ps
    )
    mem = (
        np.array([t.worker_mem_gb for t in types]) * workers
        + np.array([t.ps_mem_gb for t in types]) * ps
    )
    frame = _base_frame(source_id, arrivals_s, rng, n)
    return frame.with_columns(
        pl.Series("duration_s", durations, dtype=pl.Float64),
        pl.Series("num_gpus", gpu, dtype=pl.Float64),
        pl.Series("num_cpus", cpu, dtype=pl.Float64),
        pl.Series("mem_gb", mem, dtype=pl.Float64),
        pl.Series("num_workers", workers, dtype=pl.Int32),
        pl.Series("num_ps", ps, dtype=pl.Int32),
        pl.Series("model", models, dtype=pl.Utf8),
        pl.Series("epochs", epochs, dtype=pl.Float64) if epochs is not None else pl.col("epochs"),
    ).select(list(JOB_COLUMNS))


GENERATORS = {
    "dl2-diurnal": (DiurnalConfig, diurnal_trace),
    "chic-poisson": (PoissonConfig, poisson_trace),
    "harmony-uniform": (UniformConfig, uniform_trace),
    "deeprm-bimodal": (BimodalConfig, bimodal_trace),
}


def synthetic_source(kind: str, cfg) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Generate a synthetic trace as (`jobs` rows, its `trace_sources` row).

    The source id names the generator and seed; its content hash is that of the generated
    rows, so re-generating the same trace is recognised as unchanged.
    """
    from tracelib.ingest import source_row

    config_type, generate = GENERATORS[kind]
    if not isinstance(cfg, config_type):
        raise TypeError(f"{kind} needs a {config_type.__name__}, got {type(cfg).__name__}")
    source_id = f"synthetic:{kind}:seed{cfg.seed}"
    jobs = generate(cfg, source_id)
    content = sha256_hex(jobs.write_csv().encode())
    source = source_row(
        source_id,
        "synthetic",
        f"synthetic://{kind}",
        content,
        rows_accepted=jobs.height,
        rows_quarantined=0,
        params={"generator": kind, "config": asdict(cfg)},
    )
    return jobs, source


def config_json(cfg) -> str:
    return canonical_json(asdict(cfg))
