"""`schedlab replay SOURCE_ID`: a whole ingested trace under each replay rule.

Every job with a recorded run time keeps its GPUs, its submit time and its run time
(`tracelib.sim.replay`); the cluster is given or sized from the trace: the most GPUs its
jobs held at once over their recorded run intervals (start to end; submit to submit + run
time where the trace has no start), rounded up to whole servers, per GPU type when the
trace names types. Each rule's run becomes one `eval_runs` row, one `eval_jobs` row per
replayed job and one `eval_summary` row, in workload set `replay:<source>`, so the
leaderboard and the queries of docs/querying.md read replays like any evaluation.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from models.heuristics import REPLAYS
from pipelines.contracts import EvalJobs, EvalRuns
from pipelines.evaluation import (
    EvalTables,
    cast_to_contract,
    run_metrics,
    store_evaluation,
    summarize_runs,
)
from pipelines.progress import QUIET, Reporter
from tracelib.describe import peak_gpu_demand, readable_jobs
from tracelib.ingest.base import IngestError, printable
from tracelib.ingest.nodes import read_node_list
from tracelib.provenance import canonical_json, code_version
from tracelib.sim.replay import ReplayCluster, ReplayJobs, replay
from warehouse import connect, read_frame, transaction

DEFAULT_RULES = ("fifo", "sjf", "srtf", "drf", "tetris", "tiresias-las", "fifo-fgd")
"""Rules `schedlab replay` runs when none is named: the papers' baselines and what
production schedulers run (Tiresias' 2D-LAS, needing no size estimate; FGD's
fragmentation-aware placement), each a few seconds at most per 10,000 jobs. Left to
`--scheduler` (or "all"): fifo-backfill, and tiresias-gittins, whose ranks move as jobs
run: on an overloaded cluster it preempts about 18 times per job and takes about 36 s on
10,000 jobs where the others take 5 s at most."""

REFERENCE = "fifo"
"""The rule every other's JCT ratio is taken against (what a plain queue does)."""

FINAL_STATUSES = ("completed", "failed", "killed")
"""Jobs whose recorded run time is final."""

REPLAYED_STATUSES = ("completed", "running", "pending", "failed", "killed")
"""Statuses a replay keeps, in the order its counts are printed. A running job is censored
at the trace's end (it holds its resources until then); a pending one keeps its recorded
times when the trace has them (Alibaba's pods record creation, scheduling and deletion for
every phase: the phase is a label) and is censored like a running one when it has none.
"unknown" stays out: nothing says whether it ever asked for resources."""


class ReplayInputError(ValueError):
    """The source, window or cluster given cannot be replayed (the message says why)."""


@dataclass(frozen=True)
class ReplayConfig:
    """One `schedlab replay`."""

    source_id: str
    schedulers: tuple[str, ...] = DEFAULT_RULES
    """Registered replay rules (`models.heuristics.REPLAYS`); "all" names every one."""
    servers: int | None = None
    """Servers of the cluster (None: sized from the trace's peak GPU demand)."""
    gpus_per_server: float = 8.0
    window: tuple[datetime, datetime] | None = None
    """Replay only jobs submitted in [start, end)."""
    preempt_cost_s: float = 30.0
    """Run time a preempted job loses when it resumes (checkpoint and restart; DL2 section
    6.3 measures tens of seconds)."""
    nodes: str | None = None
    """A node list (`tracelib.ingest.nodes`): the cluster itself, each server with its GPUs,
    GPU type, CPU cores and memory (instead of `servers` or sizing)."""

    def __post_init__(self) -> None:
        if "all" in self.schedulers:
            # Every registered rule once, in the default order first (FIFO, the reference,
            # leads), the others by name.
            every = (*DEFAULT_RULES, *(n for n in REPLAYS.names() if n not in DEFAULT_RULES))
            object.__setattr__(self, "schedulers", every)
        unknown = [s for s in self.schedulers if s not in REPLAYS.names()]
        if unknown or not self.schedulers:
            raise ReplayInputError(
                f"unknown replay rule(s) {unknown}; known: {', '.join(REPLAYS.names())}"
            )
        if self.nodes is not None and self.servers is not None:
            raise ReplayInputError("--nodes is the cluster: give it or --servers, not both")
        if self.servers is not None and self.servers < 1:
            raise ReplayInputError("--servers must be at least 1")
        if not self.gpus_per_server > 0:
            raise ReplayInputError("--gpus-per-server must be positive")
        if self.window is not None and not self.window[0] < self.window[1]:
            raise ReplayInputError("--window START,END needs START before END")
        if self.preempt_cost_s < 0:
            raise ReplayInputError("preempt_cost_s must be non-negative")

    @property
    def workload_set(self) -> str:
        return f"replay:{self.source_id}"


@dataclass(frozen=True)
class ReplayOutcome:
    eval_id: str
    n_jobs: int
    left_out: dict[str, int]
    """Jobs of the source not replayed, by reason."""
    cluster: ReplayCluster
    summary: pl.DataFrame
    seconds: dict[str, float]
    """Wall time of each rule's replay."""
    replayed: str = ""
    """The replayed jobs by status (`replayed_counts`)."""
    shape: str = ""
    """The node list's servers by type (`NodeList.describe`); "" without one."""
    at_end: dict[str, dict] | None = None
    """Per rule, `at_trace_end`'s allocation rate and waiting pods."""


def load_trace(con, cfg: ReplayConfig) -> tuple[pl.DataFrame, dict[str, int], str]:
    """The source's replayable jobs (submit order), the left-out counts by reason, and the
    source's content hash. ReplayInputError names what is missing."""
    source = read_frame(
        con, "SELECT content_hash FROM trace_sources WHERE source_id = ?", [cfg.source_id]
    )
    if source.height == 0:
        known = read_frame(con, "SELECT source_id FROM trace_sources ORDER BY source_id")
        raise ReplayInputError(
            f"unknown trace source {printable(repr(cfg.source_id), 80)}; ingested: "
            f"{', '.join(known['source_id'].to_list()) or 'none'}"
        )
    jobs = read_frame(
        con,
        "SELECT job_id, submit_time, start_time, end_time, duration_s, num_gpus, num_cpus, "
        "mem_gb, status, "
        "user_name, model, gpu_type FROM jobs WHERE source_id = ? ORDER BY submit_time, job_id",
        [cfg.source_id],
    )
    left_out: Counter[str] = Counter()
    # A row no ingest accepts today (stored without these checks) would break the time
    # arithmetic or size the cluster beyond memory: left out and counted.
    jobs, unreadable = readable_jobs(jobs)
    left_out["stored with impossible values (ingest the source again)"] = unreadable
    ran = pl.coalesce(
        "duration_s",
        (pl.col("end_time") - pl.col("start_time")).dt.total_microseconds() / 1e6,
    )
    jobs = jobs.with_columns(ran.alias("run_s"))
    # The trace's end: the latest moment it records, over the whole source (a window does
    # not move it), where jobs without a recorded end are censored.
    trace_end = jobs.select(
        pl.max_horizontal(
            pl.col("submit_time").max(),
            pl.col("start_time").max(),
            pl.col("end_time").max(),
            (
                pl.coalesce("start_time", "submit_time")
                + pl.duration(microseconds=(pl.col("run_s") * 1e6).cast(pl.Int64))
            ).max(),
        )
    ).item()
    if cfg.window is not None:
        inside = (pl.col("submit_time") >= cfg.window[0]) & (pl.col("submit_time") < cfg.window[1])
        left_out["submitted outside the window"] = int(jobs.filter(~inside).height)
        jobs = jobs.filter(inside)
    kept = pl.col("status").is_in(REPLAYED_STATUSES)
    left_out.update(
        {f"status {s}": n for s, n in jobs.filter(~kept)["status"].value_counts().iter_rows() if n}
    )
    jobs = jobs.filter(kept)
    # A running job has not ended by the trace's end, whatever deletion time the trace
    # holds for it; any replayed job without a recorded end is censored there too. Its run
    # time counts from its submission: started on arrival it holds its resources to the
    # trace's end, and a replay that makes it wait pushes that end out as for any job.
    censored = (pl.col("status") == "running") | pl.col("run_s").is_null()
    held = (pl.lit(trace_end) - pl.col("submit_time")).dt.total_microseconds() / 1e6
    jobs = jobs.with_columns(
        censored.alias("censored"),
        pl.when(censored).then(held).otherwise(pl.col("run_s")).alias("run_s"),
    )
    no_time = pl.col("run_s").is_null()
    left_out["no recorded run time"] = int(jobs.filter(no_time).height)
    jobs = jobs.filter(~no_time)
    if jobs.height == 0:
        raise ReplayInputError(
            f"source {cfg.source_id!r} has no job to replay (left out: "
            f"{_counts(left_out) or 'none'}); a job needs a known status and a run time"
        )
    return jobs, {k: v for k, v in left_out.items() if v}, source["content_hash"][0]


MAX_SERVERS = 1_000_000
"""Most servers `size_cluster` sizes a cluster to (8 million GPUs at 8 per server): the
simulator holds a few numbers per server, and a larger one is a trace's error."""


def size_cluster(jobs: pl.DataFrame, cfg: ReplayConfig) -> ReplayCluster:
    """The given cluster, or servers for the peak concurrent GPU demand as `schedlab
    describe` reports it (per GPU type when the trace names types: a job of "A|B" counts
    toward A), and at least the widest job."""
    g = cfg.gpus_per_server
    if cfg.servers is not None:
        # A given cluster has no types: jobs go wherever they fit.
        return ReplayCluster(cfg.servers, g)
    first_type = jobs["gpu_type"].fill_null("").str.split("|").list.first().fill_null("")
    per_type: list[tuple[str, int]] = []
    for gpu_type, part in jobs.with_columns(first_type.alias("_type")).group_by(
        "_type", maintain_order=False
    ):
        need = max(peak_gpu_demand(part), float(part["num_gpus"].max()))
        per_type.append((gpu_type[0], max(1, math.ceil(need / g - 1e-9))))
    per_type.sort()
    needed = sum(n for _, n in per_type)
    if needed > MAX_SERVERS:
        raise ReplayInputError(
            f"the trace's peak GPU demand needs {needed:,} servers of {g:g} GPUs, more than "
            f"the {MAX_SERVERS:,} a replay sizes on its own: give --servers"
        )
    if per_type == [("", per_type[0][1])]:
        return ReplayCluster(per_type[0][1], g)
    server_types = tuple(t for t, n in per_type for _ in range(n))
    return ReplayCluster(len(server_types), g, server_types)


def replayed_counts(jobs: pl.DataFrame) -> str:
    """ "N completed, M running (censored at trace end), K pending, F failed" for the loaded
    jobs (statuses without jobs left out), plus jobs of other statuses censored for want
    of a recorded end."""
    counts = dict(jobs["status"].value_counts().iter_rows())
    parts = [
        f"{counts[s]:,} {s}" + (" (censored at trace end)" if s == "running" else "")
        for s in REPLAYED_STATUSES
        if counts.get(s)
    ]
    other = int(jobs.filter(pl.col("censored") & (pl.col("status") != "running")).height)
    if other:
        parts.append(f"{other:,} of them with no recorded end (censored at trace end)")
    return ", ".join(parts)


def at_trace_end(result: pl.DataFrame, gpus: np.ndarray, end_s: float, total: float) -> dict:
    """What a pod list of long-running services is judged by (FGD, Weng et al. ATC'23):
    the GPU allocation rate at the trace's end `end_s` (GPU shares held then over the
    cluster's GPUs) and the pods that had arrived by then but were not yet running.
    `result` is a replay's per-job frame (`ReplayResult.jobs`, in job order)."""
    start = result["start_s"].to_numpy()
    finish = result["finish_s"].to_numpy()
    arrival = result["arrival_s"].to_numpy()
    # A job censored at the trace's end finishes exactly there: it counts as held.
    running = (start <= end_s) & (finish >= end_s - 1e-6)
    return {
        "allocation_at_end": float(gpus[running].sum() / total),
        "waiting_at_end": int(((arrival <= end_s) & ~(start <= end_s)).sum()),
    }


def _cluster_record(cluster: ReplayCluster) -> dict:
    unset = {"server_gpus", "server_cpus", "server_mem_gb"} - set(cluster.extras())
    return {k: v for k, v in asdict(cluster).items() if k not in unset}


def _seconds(column: pl.Series, t0) -> np.ndarray:
    return ((column - t0).dt.total_microseconds() / 1e6).to_numpy().astype(float)


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {reason}" for reason, n in counter.items() if n)


def replay_jobs(jobs: pl.DataFrame, cluster: ReplayCluster) -> ReplayJobs:
    """Engine columns of the loaded jobs: arrival from the first submit, run time (at least
    one second), GPUs, user index, GPU type (only when the servers have types)."""
    t0 = jobs["submit_time"].min()
    users = jobs["user_name"].fill_null("").cast(pl.Categorical).to_physical().to_numpy()
    return ReplayJobs(
        arrival_s=_seconds(jobs["submit_time"], t0),
        duration_s=np.maximum(jobs["run_s"].to_numpy().astype(float), 1.0),
        gpus=jobs["num_gpus"].to_numpy().astype(float),
        users=users.astype(np.int64),
        gpu_types=(
            np.array(jobs["gpu_type"].fill_null("").to_list(), dtype=object)
            if cluster.gpu_types is not None
            else None
        ),
        # CPU and memory only where the servers have them (a node list): a job without
        # a recorded amount asks for none.
        cpus=(
            jobs["num_cpus"].fill_null(0.0).to_numpy().astype(float)
            if cluster.server_cpus is not None
            else None
        ),
        mem_gb=(
            jobs["mem_gb"].fill_null(0.0).to_numpy().astype(float)
            if cluster.server_mem_gb is not None
            else None
        ),
    )


def replay_stage(
    warehouse: str | Path | None, cfg: ReplayConfig, progress: Reporter = QUIET
) -> ReplayOutcome:
    """Replay the source under every rule of `cfg` and store the rows (one transaction)."""
    with connect(warehouse, read_only=True) as con:
        jobs, left_out, content_hash = load_trace(con, cfg)
    record = asdict(cfg)
    if cfg.nodes is None:
        # Without a node list the record is what it was before the option existed.
        del record["nodes"]
        cluster = size_cluster(jobs, cfg)
        shape = ""
    else:
        try:
            node_list = read_node_list(cfg.nodes)
        except IngestError as exc:
            raise ReplayInputError(str(exc)) from None
        cluster = node_list.cluster
        record["nodes_hash"] = node_list.content_hash
        shape = node_list.describe()
    engine_jobs = replay_jobs(jobs, cluster)
    version = code_version()
    config = canonical_json(
        {**record, "window": [str(t) for t in cfg.window] if cfg.window else None}
        # The per-server fields only when set: a homogeneous cluster's record (and so its
        # eval_id) stays what it is without them.
        | {"cluster": {**_cluster_record(cluster)}}
    )
    eval_id = (
        "replay-" + hashlib.sha256(f"{config}|{content_hash}|{version}".encode()).hexdigest()[:16]
    )
    workload_id = cfg.workload_set + (
        f"@{cfg.window[0].isoformat()}..{cfg.window[1].isoformat()}" if cfg.window else ""
    )
    on = shape or (
        f"{cluster.n_servers:,} servers x {cluster.gpus_per_server:g} GPUs"
        + (f" ({len(set(cluster.gpu_types))} GPU types)" if cluster.gpu_types else "")
    )
    progress.line(
        f"replay {cfg.source_id}: {len(engine_jobs):,} jobs on {on}"
        + (f"; left out {_counts(left_out)}" if left_out else "")
    )
    run_rows, job_frames, seconds, at_end = [], [], {}, {}
    # The trace's end on the replay's clock: where its latest recorded job (or a censored
    # one) ends when run without waiting.
    end_s = float(np.max(engine_jobs.arrival_s + engine_jobs.duration_s))
    names = jobs["job_id"].to_list()
    models = jobs["model"].fill_null("unknown").to_list()
    for name in cfg.schedulers:
        t = time.perf_counter()
        with progress.bar(f"replay {name}", len(engine_jobs)) as advance:
            result = replay(
                engine_jobs,
                cluster,
                REPLAYS.create(name),
                preempt_cost_s=cfg.preempt_cost_s,
                progress=advance,
            )
        seconds[name] = time.perf_counter() - t
        at_end[name] = at_trace_end(result.jobs, engine_jobs.gpus, end_s, cluster.total_gpus)
        run_id = f"{eval_id}/{name}"
        metrics = run_metrics(result.jobs, cluster.total_gpus)
        run_rows.append(
            {
                "run_id": run_id,
                "eval_id": eval_id,
                "scheduler": name,
                "policy": f"replay:{name}",
                "workload_set": cfg.workload_set,
                "workload_id": workload_id,
                "split": "test",
                "sequence_no": 0,
                "replicate": 0,
                "seed": 0,
                **metrics,
                "trace_version": content_hash,
                "config": config,
                "code_version": version,
            }
        )
        job_frames.append(
            result.jobs.with_columns(
                pl.lit(run_id).alias("run_id"),
                pl.lit(eval_id).alias("eval_id"),
                pl.lit(name).alias("scheduler"),
                pl.lit(workload_id).alias("workload_id"),
                pl.lit(0, dtype=pl.Int64).alias("seed"),
                pl.Series("job_id", names, dtype=pl.Utf8),
                pl.Series("model", models, dtype=pl.Utf8),
            ).drop("preemptions")
        )
        progress.line(
            f"replay {name}: {seconds[name]:.1f} s, average JCT "
            f"{metrics['avg_jct_s'] / 3600:.2f} h, utilization {metrics['utilization']:.2f}, "
            f"GPUs allocated at trace end {at_end[name]['allocation_at_end']:.2f}, "
            f"{at_end[name]['waiting_at_end']:,} pods waiting then"
        )
    runs = cast_to_contract(pl.DataFrame(run_rows), EvalRuns)
    reference = REFERENCE if REFERENCE in cfg.schedulers else cfg.schedulers[0]
    summary = summarize_runs(
        runs,
        reference=reference,
        order=cfg.schedulers,
        confidence=0.95,
        slot_s=1200.0,
        config=config,
        version=version,
    )
    tables = EvalTables(eval_id, runs, cast_to_contract(pl.concat(job_frames), EvalJobs), summary)
    with connect(warehouse) as con, transaction(con):
        store_evaluation(con, tables)
    return ReplayOutcome(
        eval_id,
        len(engine_jobs),
        left_out,
        cluster,
        summary,
        seconds,
        replayed_counts(jobs),
        shape,
        at_end,
    )
