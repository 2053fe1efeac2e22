"""Interference samples: co-location speed measurements collected the way Harmony did.

Harmony (section VI.A, "Reward Model Training") trained its reward predictor on 13,177
samples from its 6-server testbed: "we generate jobs with random resource configurations,
place them randomly and measure the training speed of each job; the number of jobs generated
and their worker/PS configurations are sufficient to saturate resource capacity of our
cluster". `collect_samples` does the same against the simulator's own speed model:

- a *sample set* is one saturated cluster: jobs are drawn one after another (a catalogue
  model uniformly at random, workers and PSs uniformly in 1..3 as in Harmony's workloads) and
  their tasks are placed, one by one, each on a server drawn uniformly among those it fits;
- the set ends at the first task that fits nowhere: the job that task belongs to keeps the
  tasks already placed (it runs with fewer, as the simulator's placement leaves out tasks that
  do not fit). A job's first worker and first PS are placed as a unit, the worker only on a
  server that leaves room for a PS somewhere, so a job that cannot get both is not started;
  that job ends the set too. So after every set the next task (or the next job's first
  worker + PS) fits nowhere;
- each job's speed is `SpeedModel.placed` over the whole set (true interference and
  locality), times measurement noise from `SpeedConfig.speed_variation` and `slot_noise`
  (1 + x * U[-1, 1] each, an explicit numpy Generator); its isolated speed is the same
  model with the job alone on the cluster in the same placement (noise-free: a standalone
  profile averaged over runs), so `slowdown = 1 - measured / isolated` is interference
  (plus noise), not locality.

One row per job per set (`tracelib.contracts.InterferenceSamples`). The per-server worker and
PS counts (`worker_servers`, `ps_servers`: JSON arrays of length `n_servers`) of every job in
a set are Harmony's placement matrix d; (model one-hot x, workers w, PSs p, d) is the reward
predictor's input and `measured_speed` its label. Jobs of a set are the rows sharing
(`source`, `seed`, `sample_set`).

Randomness: three generators spawned from `InterferenceConfig.seed` (jobs, placement, noise);
the same config gives the same frame bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import duckdb
import numpy as np
import polars as pl

from tracelib.catalogue import DL2_CATALOGUE, JobType, by_name
from tracelib.contracts import InterferenceSamples
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json, code_version
from tracelib.scenarios.harmony import harmony_testbed
from tracelib.seeds import named_streams
from tracelib.sim.config import ClusterConfig, SpeedConfig
from tracelib.sim.snapshot import JobPlacement
from tracelib.sim.speed import SpeedModel

Vec = tuple[float, float, float]
_EPS = 1e-9
STREAMS = ("jobs", "placement", "noise")
"""Random streams, in SeedSequence.spawn order (append only)."""
_MAX_EMPTY_SETS = 1000


@dataclass(frozen=True)
class InterferenceConfig:
    """How interference samples are collected (Harmony section VI.A)."""

    n_samples: int = 13_177
    """Collect whole sample sets until at least this many job samples (Harmony: 13,177)."""
    cluster: ClusterConfig = field(default_factory=harmony_testbed)
    """Cluster the jobs saturate (Harmony: its 6-server testbed)."""
    models: tuple[str, ...] = tuple(jt.model for jt in DL2_CATALOGUE)
    """Catalogue models jobs are drawn from, uniformly. Default: the whole catalogue, so the
    reward predictor and LIF know every model a workload may hold (Harmony drew from its
    Table I's six: `tracelib.sim.calibration.HARMONY_TABLE_I`)."""
    workers: tuple[int, int] = (1, 3)
    """Inclusive range of a job's workers (Harmony: 1..3)."""
    ps: tuple[int, int] = (1, 3)
    """Inclusive range of a job's PSs (Harmony: 1..3)."""
    speed: SpeedConfig = field(
        default_factory=lambda: SpeedConfig(speed_variation=0.0, slot_noise=0.05)
    )
    """Speed model switches; `speed_variation` and `slot_noise` act as measurement noise
    (default: 5% run-to-run noise of one measurement, DL2 Fig. 4's order of magnitude)."""
    seed: int = 0
    """Root seed of the jobs, placement and noise streams."""
    source: str = "synthetic"
    """Value of the `source` column (rows are replaced per (source, seed))."""

    def __post_init__(self) -> None:
        if self.n_samples < 1:
            raise ValueError("n_samples must be at least 1")
        if not self.models:
            raise ValueError("models must name at least one catalogue model")
        unknown = sorted(set(self.models) - set(by_name()))
        if unknown:
            raise ValueError(f"models not in the catalogue: {unknown}")
        for name in ("workers", "ps"):
            lo, hi = getattr(self, name)
            if not 1 <= lo <= hi:
                raise ValueError(f"{name} must be a range (lo, hi) with 1 <= lo <= hi")
        if not self.source:
            raise ValueError("source must not be empty")


@dataclass(frozen=True)
class SampleSet:
    """One saturated cluster: the jobs placed and what could not be placed next."""

    types: tuple[int, ...]
    """Catalogue type_index per job, in placement order."""
    workers: tuple[int, ...]
    ps: tuple[int, ...]
    placements: tuple[JobPlacement, ...]
    free: tuple[Vec, ...]
    """Free (GPU, CPU, memory) per server after the set."""
    blocked: tuple[Vec, ...]
    """What ended the set: one demand (a task that fit nowhere) or two (a job's first worker
    and first PS, which fit nowhere together)."""


def _fits(free: Vec, d: Vec) -> bool:
    return free[0] + _EPS >= d[0] and free[1] + _EPS >= d[1] and free[2] + _EPS >= d[2]


def _take(free: list[Vec], s: int, d: Vec) -> None:
    f = free[s]
    free[s] = (f[0] - d[0], f[1] - d[1], f[2] - d[2])


def pair_fits(free: list[Vec] | tuple[Vec, ...], worker: Vec, ps: Vec) -> list[int]:
    """Servers where a worker can go such that a PS still fits somewhere afterwards."""
    out = []
    for s, f in enumerate(free):
        if not _fits(f, worker):
            continue
        after = (f[0] - worker[0], f[1] - worker[1], f[2] - worker[2])
        if _fits(after, ps) or any(_fits(g, ps) for t, g in enumerate(free) if t != s):
            out.append(s)
    return out


def _draw_set(
    capacity: list[Vec],
    cfg: InterferenceConfig,
    jts: list[JobType],
    jobs_rng: np.random.Generator,
    place_rng: np.random.Generator,
) -> SampleSet:
    """Place random jobs on uniformly random fitting servers until the cluster saturates."""
    free = list(capacity)
    types: list[int] = []
    workers: list[int] = []
    ps: list[int] = []
    placements: list[JobPlacement] = []
    (wlo, whi), (plo, phi) = cfg.workers, cfg.ps
    while True:
        jt = jts[int(jobs_rng.integers(len(jts)))]
        n_w = int(jobs_rng.integers(wlo, whi + 1))
        n_p = int(jobs_rng.integers(plo, phi + 1))
        wd, pd = jt.worker_demand, jt.ps_demand
        first = pair_fits(free, wd, pd)
        if not first:
            blocked: tuple[Vec, ...] = (wd, pd)
            break
        # Interleave workers and PSs (w, p, w, p, ...): a truncated job keeps both kinds.
        pair = [(True, wd), (False, pd)]
        order = pair * min(n_w, n_p) + pair[:1] * (n_w - n_p) + pair[1:] * (n_p - n_w)
        w_on: list[int] = []
        p_on: list[int] = []
        blocked = ()
        for k, (is_worker, d) in enumerate(order):
            fitting = first if k == 0 else [s for s, f in enumerate(free) if _fits(f, d)]
            if not fitting:
                blocked = (d,)
                break
            s = fitting[int(place_rng.integers(len(fitting)))]
            _take(free, s, d)
            (w_on if is_worker else p_on).append(s)
        types.append(jt.type_index)
        workers.append(len(w_on))
        ps.append(len(p_on))
        placements.append(JobPlacement.of(w_on, p_on))
        if blocked:
            break
    return SampleSet(
        tuple(types), tuple(workers), tuple(ps), tuple(placements), tuple(free), blocked
    )


def _streams(seed: int) -> dict[str, np.random.Generator]:
    """One generator per entry of STREAMS, by name, spawned from `seed`."""
    return named_streams(seed, STREAMS)


def sample_sets(cfg: InterferenceConfig) -> Iterator[SampleSet]:
    """Saturated sample sets, in order, until they hold at least `cfg.n_samples` jobs."""
    c = cfg.cluster
    capacity: list[Vec] = [(c.gpus, c.cpus, c.mem_gb)] * c.n_servers
    named = by_name()
    jts = [named[m] for m in cfg.models]
    streams = _streams(cfg.seed)
    jobs_rng, place_rng = streams["jobs"], streams["placement"]
    total = empty = 0
    while total < cfg.n_samples:
        ss = _draw_set(capacity, cfg, jts, jobs_rng, place_rng)
        if not ss.types:
            empty += 1
            if empty >= _MAX_EMPTY_SETS:
                raise ValueError(f"no job of {cfg.models} fits an empty cluster {c}")
            continue
        empty = 0
        total += len(ss.types)
        yield ss


def _counts(placements: tuple[JobPlacement, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    w = np.zeros((len(placements), n), dtype=np.int64)
    p = np.zeros((len(placements), n), dtype=np.int64)
    for i, pl_ in enumerate(placements):
        np.add.at(w[i], list(pl_.workers), 1)
        np.add.at(p[i], list(pl_.ps), 1)
    return w, p


def _shift(pl_: JobPlacement, offset: int) -> JobPlacement:
    return JobPlacement(tuple(s + offset for s in pl_.workers), tuple(s + offset for s in pl_.ps))


def collect_samples(
    cfg: InterferenceConfig | None = None, progress: ProgressFn = no_progress
) -> pl.DataFrame:
    """Interference samples (`interference_samples` rows, not yet contract-checked);
    `progress(samples drawn, n_samples)` as sets are drawn."""
    cfg = cfg or InterferenceConfig()
    n_srv = cfg.cluster.n_servers
    sets = []
    drawn = 0
    for ss in sample_sets(cfg):
        sets.append(ss)
        drawn += len(ss.types)
        progress(min(drawn, cfg.n_samples), cfg.n_samples)
    types: list[int] = []
    workers: list[int] = []
    ps: list[int] = []
    together: list[JobPlacement] = []  # set k on servers k*n .. k*n+n-1: one speed call
    alone: list[JobPlacement] = []  # every job on its own block of servers
    set_no: list[int] = []
    job_no: list[int] = []
    w_json: list[str] = []
    p_json: list[str] = []
    used: list[np.ndarray] = []
    co_tasks: list[np.ndarray] = []
    co_jobs: list[np.ndarray] = []
    for k, ss in enumerate(sets):
        for i, pl_ in enumerate(ss.placements):
            together.append(_shift(pl_, k * n_srv))
            alone.append(_shift(pl_, len(alone) * n_srv))
            set_no.append(k)
            job_no.append(i)
        types.extend(ss.types)
        workers.extend(ss.workers)
        ps.extend(ss.ps)
        wc, pc = _counts(ss.placements, n_srv)
        w_json.extend("[" + ",".join(map(str, row)) + "]" for row in wc.tolist())
        p_json.extend("[" + ",".join(map(str, row)) + "]" for row in pc.tolist())
        tasks = wc + pc  # (jobs, servers)
        occ = tasks > 0
        used.append(occ.sum(axis=1))
        co_tasks.append((occ * (tasks.sum(axis=0)[None, :] - tasks)).sum(axis=1))
        shared = (occ.astype(np.int64) @ occ.T.astype(np.int64)) > 0
        co_jobs.append(shared.sum(axis=1) - 1)

    model = SpeedModel(cfg.speed)
    true_speed = model.placed(types, workers, ps, together, len(sets) * n_srv)
    isolated = model.placed(types, workers, ps, alone, len(alone) * n_srv)
    noise_rng = _streams(cfg.seed)["noise"]
    u = noise_rng.uniform(-1.0, 1.0, (2, len(types)))
    sp = cfg.speed
    measured = true_speed * (1.0 + sp.speed_variation * u[0]) * (1.0 + sp.slot_noise * u[1])
    names = {jt.type_index: jt.model for jt in DL2_CATALOGUE}
    n = len(types)
    return pl.DataFrame(
        {
            "source": pl.Series([cfg.source] * n, dtype=pl.Utf8),
            "seed": pl.Series([cfg.seed] * n, dtype=pl.Int64),
            "sample_set": pl.Series(set_no, dtype=pl.Int32),
            "job_in_set": pl.Series(job_no, dtype=pl.Int32),
            "model": pl.Series([names[t] for t in types], dtype=pl.Utf8),
            "type_index": pl.Series(types, dtype=pl.Int32),
            "workers": pl.Series(workers, dtype=pl.Int32),
            "ps": pl.Series(ps, dtype=pl.Int32),
            "n_servers": pl.Series([n_srv] * n, dtype=pl.Int32),
            "worker_servers": pl.Series(w_json, dtype=pl.Utf8),
            "ps_servers": pl.Series(p_json, dtype=pl.Utf8),
            "servers_used": pl.Series(np.concatenate(used), dtype=pl.Int32),
            "colocated_tasks": pl.Series(np.concatenate(co_tasks), dtype=pl.Int32),
            "colocated_jobs": pl.Series(np.concatenate(co_jobs), dtype=pl.Int32),
            "isolated_speed": pl.Series(isolated, dtype=pl.Float64),
            "measured_speed": pl.Series(measured, dtype=pl.Float64),
            "slowdown": pl.Series(1.0 - measured / isolated, dtype=pl.Float64),
            "params": pl.Series([canonical_json(asdict(cfg))] * n, dtype=pl.Utf8),
            "code_version": pl.Series([code_version()] * n, dtype=pl.Utf8),
        }
    )


def interference_frame(
    cfg: InterferenceConfig | None = None, progress: ProgressFn = no_progress
) -> pl.DataFrame:
    """Stage-ready samples: `collect_samples` checked against the table's contract (raises
    `warehouse.ContractViolation` naming table, column and rows)."""
    from warehouse.io import validate

    return validate(collect_samples(cfg, progress), InterferenceSamples)


def store_samples(con: duckdb.DuckDBPyConnection, frame: pl.DataFrame) -> int:
    """Replace the rows of every (source, seed) in `frame` with the frame's, in one
    transaction (storing the same frame twice leaves the same rows); returns rows written."""
    from warehouse import replace_rows, transaction

    written = 0
    keys = frame.select("source", "seed").unique().sort("source", "seed").iter_rows()
    with transaction(con):
        for source, seed in keys:
            part = frame.filter((pl.col("source") == source) & (pl.col("seed") == seed))
            written += replace_rows(
                con, part, InterferenceSamples, {"source": source, "seed": seed}
            )
    return written


def placement_counts(frame: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-server worker and PS counts of every row, two (rows, n_servers) int arrays
    (rows of different `n_servers` are padded with zeros to the largest)."""
    n = int(frame["n_servers"].max()) if frame.height else 0
    out = []
    for col in ("worker_servers", "ps_servers"):
        lists = frame[col].str.json_decode(pl.List(pl.Int64))
        arr = np.zeros((frame.height, n), dtype=np.int64)
        flat = lists.explode().to_numpy()
        lens = lists.list.len().to_numpy().astype(np.int64)
        rows = np.repeat(np.arange(frame.height), lens)
        cols = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
        arr[rows, cols] = flat
        out.append(arr)
    return out[0], out[1]
