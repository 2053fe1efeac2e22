"""Workload derivation: any jobs (production or synthetic) -> job sequences for the simulator.

For each accepted job of the chosen sources:
- model: the trace's model if it names a catalogue model (matched ignoring case and
  punctuation, so 'ResNet50' is 'resnet-50'); otherwise drawn from the catalogue with the
  derivation's seed, among GPU models for jobs that used GPUs and CPU-only models otherwise;
- workers: the trace's worker count, else its GPUs divided by the model's GPUs per worker
  (at least 1), capped at the catalogue's max_workers; PSs: the trace's PS count, else one
  per worker (DL2's motivating experiments keep PSs equal to workers);
- epochs: the trace's epochs if it states them, else its run time times the model's speed
  with ONE worker and ONE PS (`epoch_basis="single_worker"`): the run time is read as
  single-worker work, so a job that ran long needs long whichever scheduler replays it.
  `epoch_basis="requested"` uses the speed at the job's recorded allocation instead, i.e.
  the epochs the job actually trained if it ran at the model's nominal speed.
  `time_scale` shrinks run times first (DL2 scaled its trace's job lengths down);
- arrivals: seconds since the first job of its sequence (times `arrival_scale`), and the
  slot of `slot_s` seconds they fall in.

Jobs ordered by submit time are cut into consecutive sequences of `jobs_per_sequence` (the
last one takes the remainder); sequences are assigned to train/validation/test at random
with the seed, so the splits never share a job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Literal

import duckdb
import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, JobType
from tracelib.contracts import JobTypes, WorkloadJobs, Workloads
from tracelib.provenance import canonical_json, code_version
from tracelib.seeds import named_streams

SPLITS = ("train", "validation", "test")


def set_name(source_ids: Sequence[str]) -> str:
    """A workload set's name from its sources: each `format:name` source says what it is
    once ("helios:night2" -> "helios-night2"; "philly:philly-jan" -> "philly-jan"; a generic
    mapping names no format: "generic:generic-philly" -> "philly"), several joined by "+"."""
    names = []
    for source_id in source_ids:
        fmt, _, name = source_id.partition(":")
        if not name:
            names.append(fmt)
        elif fmt == "generic":
            names.append(name.removeprefix("generic-") or name)
        elif name.startswith(fmt):
            names.append(name)
        else:
            names.append(f"{fmt}-{name}")
    return "+".join(names)


@dataclass(frozen=True)
class DeriveConfig:
    """How jobs become simulator workloads."""

    name: str = "default"
    """Derivation name; workload ids are `name/split/NNN`, re-deriving a name replaces it."""
    seed: int = 0
    jobs_per_sequence: int = 60
    slot_s: float = 1200.0
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    statuses: tuple[str, ...] = ("completed", "failed", "killed")
    """Job statuses kept; running and pending jobs have no final run time."""
    epoch_basis: Literal["single_worker", "requested"] = "single_worker"
    time_scale: float = 1.0
    arrival_scale: float = 1.0
    min_duration_s: float = 1.0
    min_epochs: float = 1.0
    max_epochs: float | None = None

    def __post_init__(self) -> None:
        if self.jobs_per_sequence < 1:
            raise ValueError("jobs_per_sequence must be at least 1")
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1.0) > 1e-9:
            raise ValueError("split_fractions must be three fractions summing to 1")
        if self.time_scale <= 0 or self.arrival_scale <= 0:
            raise ValueError("time_scale and arrival_scale must be positive")


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class CatalogueMatcher:
    """A trace job's catalogue model: the trace's model if it names one (matched ignoring
    case and punctuation), otherwise one picked by a uniform draw in [0, 1) among the GPU
    models for a job with GPUs and the CPU-only models otherwise."""

    def __init__(self, catalogue: tuple[JobType, ...] = DL2_CATALOGUE) -> None:
        self.by_key = {_key(jt.model): jt for jt in catalogue}
        self.gpu_types = [jt for jt in catalogue if jt.worker_gpu > 0]
        self.cpu_types = [jt for jt in catalogue if jt.worker_gpu == 0] or self.gpu_types

    def job_type(self, raw_model: str | None, gpus: float, draw: float) -> JobType:
        """The catalogue type of a job with trace model `raw_model` and `gpus` GPUs."""
        known = self.by_key.get(_key(raw_model)) if raw_model else None
        if known is not None:
            return known
        pool = self.gpu_types if gpus > 0 else self.cpu_types
        return pool[int(draw * len(pool))]


def requested_tasks(
    jt: JobType, gpus: float, workers: float | None = None, ps: float | None = None
) -> tuple[int, int]:
    """(workers, PSs) of a trace job: its worker count, else its GPUs over the model's GPUs
    per worker (at least 1), capped at the model's max_workers; its PS count, else one per
    worker."""
    w = workers
    if w is None or not np.isfinite(w) or w < 1:
        w = math.ceil(gpus / jt.worker_gpu) if jt.worker_gpu > 0 else 1
    w = int(min(max(w, 1), jt.max_workers))
    p = w if ps is None or not np.isfinite(ps) else int(min(ps, jt.max_workers))
    return w, p


def epochs_of_run_time(
    jt: JobType,
    duration_s: float,
    basis: Literal["single_worker", "requested"] = "single_worker",
    workers: int = 1,
    ps: int = 1,
) -> float:
    """Epochs a run time stands for (see the module docstring: read as single-worker work,
    or at the job's requested `workers` and `ps`)."""
    counts = (1, 1) if basis == "single_worker" else (workers, max(ps, 1))
    return duration_s * jt.epochs_per_second(*counts)


def derive_workloads(
    jobs: pl.DataFrame,
    sources: pl.DataFrame,
    cfg: DeriveConfig,
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Turn `jobs` rows into (`workloads` rows, `workload_jobs` rows). Pure and deterministic.

    Stored rows with impossible values (`tracelib.describe.readable_jobs`: stored before
    the ingest checked them) are not derived from; `schedlab describe` counts them."""
    from tracelib.describe import readable_jobs

    jobs, _ = readable_jobs(jobs)
    streams = named_streams(cfg.seed, ("models", "split"))
    model_rng, split_rng = streams["models"], streams["split"]

    kept = jobs.filter(
        pl.col("status").is_in(list(cfg.statuses))
        & pl.col("duration_s").is_not_null()
        & (pl.col("duration_s") >= cfg.min_duration_s)
    ).sort("submit_time", "source_id", "job_id")
    if kept.height == 0:
        raise ValueError(
            f"no jobs to derive workloads from (statuses {list(cfg.statuses)}, "
            f"duration >= {cfg.min_duration_s} s)"
        )
    matcher = CatalogueMatcher(catalogue)
    n = kept.height
    raw_models = kept.get_column("model").to_list()
    gpus = kept.get_column("num_gpus").to_numpy()
    draws = model_rng.random(n)
    types = [matcher.job_type(raw, g, u) for raw, g, u in zip(raw_models, gpus, draws, strict=True)]

    workers_in = kept.get_column("num_workers").to_numpy(allow_copy=True)
    ps_in = kept.get_column("num_ps").to_numpy(allow_copy=True)
    epochs_in = kept.get_column("epochs").to_numpy(allow_copy=True)
    duration = kept.get_column("duration_s").to_numpy() * cfg.time_scale
    workers = np.empty(n, dtype=np.int64)
    ps = np.empty(n, dtype=np.int64)
    epochs = np.empty(n, dtype=np.float64)
    for i, jt in enumerate(types):
        w, p = requested_tasks(jt, gpus[i], workers_in[i], ps_in[i])
        workers[i], ps[i] = w, p
        e = epochs_in[i]
        if e is None or not np.isfinite(e):
            e = epochs_of_run_time(jt, duration[i], cfg.epoch_basis, w, p)
        epochs[i] = e
    epochs = np.maximum(epochs, cfg.min_epochs)
    if cfg.max_epochs is not None:
        epochs = np.minimum(epochs, cfg.max_epochs)

    seq = np.minimum(np.arange(n) // cfg.jobs_per_sequence, max(n // cfg.jobs_per_sequence, 1) - 1)
    detail = kept.select("source_id", "job_id", "submit_time", "gpu_type").with_columns(
        pl.Series("model", [jt.model for jt in types], dtype=pl.Utf8),
        pl.Series("epochs", epochs, dtype=pl.Float64),
        pl.Series("num_workers", workers, dtype=pl.Int32),
        pl.Series("num_ps", ps, dtype=pl.Int32),
        pl.Series("num_gpus", gpus, dtype=pl.Float64),
        pl.Series("duration_s", duration, dtype=pl.Float64),
        pl.Series("_seq", seq, dtype=pl.Int32),
    )
    detail = detail.with_columns(
        (
            (pl.col("submit_time") - pl.col("submit_time").min().over("_seq"))
            .dt.total_microseconds()
            .cast(pl.Float64)
            / 1e6
            * cfg.arrival_scale
        ).alias("arrival_s"),
        pl.int_range(pl.len()).over("_seq").cast(pl.Int32).alias("job_index"),
    ).with_columns((pl.col("arrival_s") // cfg.slot_s).cast(pl.Int32).alias("arrival_slot"))

    n_seq = int(seq.max()) + 1
    split_of = _assign_splits(n_seq, cfg.split_fractions, split_rng)
    sequence_no = {}
    counters = dict.fromkeys(SPLITS, 0)
    for s in range(n_seq):
        sequence_no[s] = counters[split_of[s]]
        counters[split_of[s]] += 1
    ids = {s: f"{cfg.name}/{split_of[s]}/{sequence_no[s]:03d}" for s in range(n_seq)}

    workload_jobs = detail.with_columns(
        pl.col("_seq").replace_strict(ids, return_dtype=pl.Utf8).alias("workload_id")
    ).select(list(WorkloadJobs.to_schema().columns))

    per_seq = detail.group_by("_seq").agg(
        pl.len().alias("n_jobs"),
        pl.col("arrival_s").max().alias("span_s"),
        pl.col("source_id").unique().sort().str.join(",").alias("source_ids"),
    )
    hashes = dict(sources.select("source_id", "content_hash").iter_rows())
    params = canonical_json(asdict(cfg))
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = []
    for s, n_jobs, span, source_ids in per_seq.sort("_seq").iter_rows():
        rows.append(
            {
                "workload_id": ids[s],
                "derivation": cfg.name,
                "split": split_of[s],
                "sequence_no": sequence_no[s],
                "source_ids": source_ids,
                "source_hashes": ",".join(hashes.get(x, "?") for x in source_ids.split(",")),
                "n_jobs": n_jobs,
                "span_s": span,
                "seed": cfg.seed,
                "params": params,
                "code_version": code_version(),
                "derived_at": now,
            }
        )
    workloads = pl.DataFrame(rows).sort("workload_id")
    return workloads, workload_jobs.sort("workload_id", "job_index")


def _assign_splits(
    n_seq: int, fractions: tuple[float, float, float], rng: np.random.Generator
) -> dict[int, str]:
    """Sequences -> split. Test gets at least one sequence, validation one once there are 3."""
    n_test = max(1, round(fractions[2] * n_seq))
    n_val = max(1, round(fractions[1] * n_seq)) if n_seq >= 3 else 0
    n_test = min(n_test, n_seq)
    n_val = min(n_val, n_seq - n_test)
    n_train = n_seq - n_test - n_val
    order = rng.permutation(n_seq)
    labels = ["train"] * n_train + ["validation"] * n_val + ["test"] * n_test
    return {int(s): labels[i] for i, s in enumerate(order)}


def store_workloads(
    con: duckdb.DuckDBPyConnection,
    workloads: pl.DataFrame,
    workload_jobs: pl.DataFrame,
    name: str,
    catalogue: tuple[JobType, ...] = DL2_CATALOGUE,
) -> None:
    """Replace derivation `name` (and refresh `job_types`) in one transaction."""
    from tracelib.catalogue import CATALOGUES, catalogue_frame, catalogues_frame
    from warehouse import replace_rows, transaction, write_frame

    with transaction(con):
        con.execute(
            "DELETE FROM workload_jobs WHERE workload_id IN "
            "(SELECT workload_id FROM workloads WHERE derivation = ?)",
            [name],
        )
        replace_rows(con, workloads, Workloads, {"derivation": name})
        write_frame(con, workload_jobs, WorkloadJobs)
        con.execute("DELETE FROM job_types")
        # Every catalogue, with this derivation's in place of the default of its name.
        rows = catalogues_frame()
        name = next((n for n, c in CATALOGUES.items() if c == catalogue), "dl2")
        rows = pl.concat(
            [rows.filter(pl.col("catalogue") != name), catalogue_frame(catalogue, name)],
            how="vertical_relaxed",
        )
        write_frame(con, rows, JobTypes)
