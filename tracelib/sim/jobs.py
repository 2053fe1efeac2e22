"""Simulator jobs: `JobSpec`, built from a frame with the `workload_jobs` columns.

`jobs_from_frame` is how every stage feeds the simulator (the warehouse's `workload_jobs`
rows for one workload). `dl2_like_frame` is a small stand-in generator with the same
columns, for the simulator's own tests and benchmark; real workloads come from
`tracelib.workloads`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, JobType, by_name

REQUIRED_COLUMNS = ("model", "epochs", "num_workers", "num_ps", "arrival_s")


@dataclass(frozen=True)
class JobSpec:
    """One job as submitted: what the user asked for and when."""

    job_id: int
    """Dense index inside the workload (`job_index`); events and results use it."""
    model: str
    """Catalogue model name."""
    epochs: float
    """Epochs the user estimates the job needs (what schedulers see)."""
    arrival_s: float
    """Submission time, seconds from the start of the workload."""
    num_workers: int = 1
    """Workers the user requested (used by request-driven policies such as Tetris)."""
    num_ps: int = 1
    """PSs the user requested (0 in a trace means unknown; policies read at least 1)."""
    name: str = ""
    """The trace's job id, for reports."""
    gpu_share: float | None = None
    """A share of one GPU per worker (0 < x < 1) instead of the model's whole GPU: the trace's
    fractional GPU demand (Alibaba's GPU-sharing pods). None: the catalogue's demand."""
    gpu_type: str | None = None
    """GPU types the workers may use, as the trace names them ("T4", "V100M16|V100M32");
    honoured on a cluster whose servers have types."""

    @property
    def gpu_types(self) -> frozenset[str] | None:
        """`gpu_type` as the set of allowed types (None: any)."""
        if not self.gpu_type:
            return None
        return frozenset(t.strip() for t in self.gpu_type.split("|") if t.strip()) or None

    def worker_demand(self, jt: JobType) -> tuple[float, float, float]:
        """A worker's (GPU, CPU, memory) as model `jt`: the catalogue's, with the trace's
        share of one GPU in place of a whole one."""
        demand = jt.worker_demand
        if self.gpu_share is None or demand[0] <= 0:
            return demand
        return (self.gpu_share, demand[1], demand[2])

    def __post_init__(self) -> None:
        if not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"job {self.job_id}: epochs must be positive, got {self.epochs}")
        if not (self.arrival_s >= 0 and math.isfinite(self.arrival_s)):
            raise ValueError(f"job {self.job_id}: arrival_s must be >= 0, got {self.arrival_s}")
        if self.num_workers < 1 or self.num_ps < 0:
            raise ValueError(f"job {self.job_id}: needs num_workers >= 1 and num_ps >= 0")
        if self.gpu_share is not None and not 0.0 < self.gpu_share < 1.0:
            raise ValueError(
                f"job {self.job_id}: gpu_share must be in (0, 1), got {self.gpu_share}"
            )


def jobs_from_frame(
    df: pl.DataFrame, catalogue: tuple[JobType, ...] = DL2_CATALOGUE
) -> tuple[JobSpec, ...]:
    """Jobs of one workload from a frame with the `workload_jobs` columns, by arrival.

    Needs model, epochs, num_workers, num_ps and arrival_s; job_index (else the row number)
    becomes `job_id` and job_id (a string) becomes `name`; gpu_type is kept, and a job of
    one worker whose num_gpus is below one GPU asks for that share of a GPU (`gpu_share`).
    Other columns are ignored.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"workload frame lacks columns {missing}")
    known = by_name(catalogue)
    unknown = sorted(set(df["model"].to_list()) - set(known))
    if unknown:
        raise ValueError(f"models not in the catalogue: {unknown}")
    ids = (
        df["job_index"].cast(pl.Int64).to_list()
        if "job_index" in df.columns
        else list(range(df.height))
    )
    if len(set(ids)) != len(ids):
        raise ValueError("job_index values must be unique within a workload")
    names = df["job_id"].cast(pl.Utf8).to_list() if "job_id" in df.columns else [""] * df.height
    none = [None] * df.height
    gpus = df["num_gpus"].to_list() if "num_gpus" in df.columns else none
    types = df["gpu_type"].cast(pl.Utf8).to_list() if "gpu_type" in df.columns else none
    jobs = [
        JobSpec(
            job_id=int(i),
            model=str(m),
            epochs=float(e),
            arrival_s=float(a),
            num_workers=int(w),
            num_ps=int(p),
            name=str(n or ""),
            # A fractional GPU stays a share of one GPU (only for a GPU model's one worker).
            gpu_share=float(g)
            if g is not None and 0.0 < g < 1.0 and int(w) == 1 and known[str(m)].worker_gpu > 0
            else None,
            gpu_type=t or None,
        )
        for i, m, e, a, w, p, n, g, t in zip(
            ids,
            df["model"].to_list(),
            df["epochs"].to_list(),
            df["arrival_s"].to_list(),
            df["num_workers"].to_list(),
            df["num_ps"].to_list(),
            names,
            gpus,
            types,
            strict=True,
        )
    ]
    return tuple(sorted(jobs, key=lambda j: (j.arrival_s, j.job_id)))


def _slotted_frame(
    workload_id: str, slots: np.ndarray, slot_s: float, duration_s: np.ndarray, **per_job: Any
) -> pl.DataFrame:
    """`workload_jobs` rows of a generated workload whose jobs arrive at their slot's start:
    the ids, arrival and run time around the `per_job` columns (model to num_gpus, in
    order); no GPU type."""
    n_jobs = len(slots)
    return pl.DataFrame(
        {
            "workload_id": [workload_id] * n_jobs,
            "job_index": np.arange(n_jobs, dtype=np.int32),
            "source_id": ["synthetic:sim"] * n_jobs,
            "job_id": [f"j{i:04d}" for i in range(n_jobs)],
            **per_job,
            "arrival_s": slots.astype(np.float64) * slot_s,
            "arrival_slot": slots.astype(np.int32),
            "duration_s": duration_s,
            "gpu_type": pl.Series([None] * n_jobs, dtype=pl.Utf8),
        }
    )


def dl2_like_frame(
    n_jobs: int,
    seed: int,
    max_arrivals_per_slot: int = 3,
    slot_s: float = 1200.0,
    mean_duration_min: float = 147.0,
    median_duration_min: float = 70.0,
    max_request: int = 4,
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
) -> pl.DataFrame:
    """A DL2-style workload with the `workload_jobs` columns (tests and benchmarks only).

    Per slot, min(max_arrivals, Poisson(0.6 * max_arrivals)) jobs arrive at the slot's start
    (the DL2 simulator's arrivals are per slot and capped); the model is uniform over the
    catalogue; run time with one worker and one PS is log-normal with the DL2 trace's mean
    (147 min) and our median (70 min), clipped to [5 min, 3 days], converted to epochs with
    the catalogue speed; requests are uniform in 1..max_request workers and PSs.
    """
    rng = np.random.default_rng(seed)
    counts: list[int] = []
    while sum(counts) < n_jobs:
        counts.append(min(max_arrivals_per_slot, int(rng.poisson(0.6 * max_arrivals_per_slot))))
    slots = np.repeat(np.arange(len(counts)), counts)[:n_jobs]
    types = rng.integers(0, len(catalogue), n_jobs)
    mu = math.log(median_duration_min)
    sigma = math.sqrt(2.0 * (math.log(mean_duration_min) - mu))
    minutes = np.clip(rng.lognormal(mu, sigma, n_jobs), 5.0, 3 * 24 * 60.0)
    workers = rng.integers(1, max_request + 1, n_jobs)
    ps = rng.integers(1, max_request + 1, n_jobs)
    models = [catalogue[t].model for t in types]
    epochs = [
        d * 60.0 * catalogue[t].epochs_per_second(1, 1) for d, t in zip(minutes, types, strict=True)
    ]
    gpus = [float(w * catalogue[t].worker_gpu) for w, t in zip(workers, types, strict=True)]
    return _slotted_frame(
        f"sim-dl2/{seed}",
        slots,
        slot_s,
        minutes * 60.0,
        model=models,
        epochs=np.round(epochs, 3),
        num_workers=workers.astype(np.int32),
        num_ps=ps.astype(np.int32),
        num_gpus=gpus,
    )


DL2_AUTHORS_EPOCH_SHARE = {
    "resnet-50": 0.3,
    "vgg-16": 0.96,
    "resnext-110": 0.05,
    "inception-bn": 0.54,
    "seq2seq": 0.95,
    "cnn-text": 0.46,
    "dssm": 0.33,
    "wlm": 0.23,
}
"""The DL2 authors' simulator (pengyanghua/DL2 trace.py): a job's epochs are this share of
MAX_NUM_EPOCHS (30,000 in its parameters.py), times U{0.90..1.09} when lengths vary."""

DL2_AUTHORS_MAX_EPOCHS = 30_000.0
"""pengyanghua/DL2 parameters.py MAX_NUM_EPOCHS."""

DL2_AUTHORS_GOOGLE_ARRIVALS_10 = (
    6, 134, 8, 7, 8, 10, 9, 7, 6, 5, 6, 5, 7, 8, 9, 6, 8, 8, 8, 8, 7, 5, 5, 7, 9, 7, 5, 5, 5,
    3, 5, 6, 4, 6, 6, 6, 7, 7, 4, 5, 5, 3, 5, 5, 4, 6, 5, 6, 5, 3, 4, 4, 6, 7, 7, 7, 7, 7, 6,
    6, 6, 6, 7, 6, 4, 6, 4, 5, 4, 6, 5, 6, 5, 7, 6,
)  # fmt: skip
"""The DL2 authors' Google-trace arrival pattern for at most 10 arrivals per slot (trace.py
arrv_pattern_10): jobs arriving in each 20-minute slot, capped at 10 when used."""


def dl2_authors_frame(
    n_jobs: int = 200, seed: int = 0, max_arrivals_per_slot: int = 10, slot_s: float = 1200.0
) -> pl.DataFrame:
    """The DL2 authors' large-setting workload, as their simulator draws it (trace.py with
    LARGE_SCALE, Google-trace arrivals, "Normal" job lengths that vary): each slot
    min(cap, pattern[(slot + offset) % 75]) jobs arrive, offset uniform in 0..4; the model
    uniform over the 8; epochs = share x 30,000 x U{90..109}/100 (`DL2_AUTHORS_EPOCH_SHARE`);
    one worker and one PS requested. Same columns as `dl2_like_frame`; `duration_s` is the
    run time at one worker and one PS with the catalogue speed."""
    rng = np.random.default_rng(seed)
    pattern = DL2_AUTHORS_GOOGLE_ARRIVALS_10
    offset = int(rng.integers(0, 5))
    counts: list[int] = []
    while sum(counts) < n_jobs:
        counts.append(min(max_arrivals_per_slot, pattern[(len(counts) + offset) % len(pattern)]))
    slots = np.repeat(np.arange(len(counts)), counts)[:n_jobs]
    catalogue = DL2_CATALOGUE
    types = rng.integers(0, len(catalogue), n_jobs)
    factor = rng.integers(90, 110, n_jobs) / 100.0
    models = [catalogue[t].model for t in types]
    epochs = (
        np.array([DL2_AUTHORS_EPOCH_SHARE[m] * DL2_AUTHORS_MAX_EPOCHS for m in models]) * factor
    )
    seconds = [e / catalogue[t].epochs_per_second(1, 1) for e, t in zip(epochs, types, strict=True)]
    return _slotted_frame(
        f"sim-dl2-authors/{seed}",
        slots,
        slot_s,
        np.array(seconds),
        model=models,
        epochs=np.round(epochs, 3),
        num_workers=np.ones(n_jobs, dtype=np.int32),
        num_ps=np.ones(n_jobs, dtype=np.int32),
        num_gpus=[float(catalogue[t].worker_gpu) for t in types],
    )
