"""Learned schedulers over a whole trace: `schedlab replay SOURCE --scheduler dl2 ...`.

The replay rules (`pipelines.replay`) keep each job's recorded GPUs and run time, which
leaves nothing for DL2, Chic or Harmony to decide: they choose workers and parameter
servers, or where tasks go, and a job's speed follows from that. So a learned family runs
where it runs in the arena, the event simulator of the DL2 setting
(`models.evaluation.evaluate`), on the whole trace as one workload instead of 60-job
windows:

- the trace's jobs become one sequence by the same derivation as any workload set
  (`tracelib.workloads.derive_workloads`: a job's model from the DL2 catalogue, its epochs
  from its run time; its GPU type and its share of a GPU as the trace records them), the
  jobs the replay rules replay, in every phase: a job the trace records no end for (a
  running pod, say) runs from its submission to the trace's end, as the replay censors it
  (`pipelines.replay.load_trace`), arrivals as recorded;
- the cluster is the replay's (at each capacity it is asked for, one run each): a node
  list's servers as they are (each server's GPUs, GPU type, cores and memory;
  `arena_cluster`), else servers of the DL2 setting (2 GPUs each) with the replay
  cluster's GPUs;
- each family runs its newest registered policy trained on a workload set of this source,
  else the newest trained on a synthetic set, composed with the arena's default for the
  other half of the decision (`EvalConfig.default_allocation` / `default_placement`);
- the arena's heuristics run beside them on the same simulator seed (`BASELINES`), so each
  learned family's ratio to the best of them is paired job by job; its interval is the
  replay's block bootstrap over the trace's days.

The simulator shows every job in the system at each decision (no arena window: a window of
20 would let at most 20 jobs run on a cluster of hundreds of GPUs). A policy that sees a
bounded window of jobs decides as it does when more jobs wait than it sees: DL2 allocates
J = 20 jobs at a time in arrival order, each batch taking what the earlier ones left
(`models.dl2.policy`); Chic plays one schedule per I = 20 jobs in arrival order, each from
what the schedules before it left (`models.chic.policy.ChicArenaPolicy`, `batches`);
Harmony places the arena's default allocation (every job its requested workers and PSs
while they fit) with its network sized to the window it was trained with; RL-TAPS decides
N = 20 jobs at a time in arrival order, each batch on the GPUs the earlier ones left, its
cluster image resampled to the cluster it was trained on (`models.rltaps.arena`); the
heuristics see every job.
Rows go to the evaluation tables in workload set `replay-arena:<source>`, each learned
scheduler's `policy` naming its policy id. The what-if's runs (one per capacity) are
independent: `learned_replays` runs them on the task runner the user picks, as the rules'.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from models.checkpoints import verify_registered
from models.evaluation import (
    EvalConfig,
    NotApplicable,
    evaluate,
    resolve_scheduler,
    store_evaluation,
)
from models.torch_scope import scoped_torch
from pipelines.progress import QUIET, Reporter
from pipelines.replay import (
    BLOCKS,
    REPLAYED_STATUSES,
    ReplayConfig,
    ReplayInputError,
    headline,
    load_trace,
    offered_load,
    runs_here,
    side_by_side,
    what_if_frame,
    with_block_intervals,
)
from pipelines.runners import available_cores
from pipelines.stages import learned_policies
from tracelib.scenarios.dl2 import DL2_SMALL
from tracelib.sim import ClusterConfig
from tracelib.sim.config import ServerGroup
from tracelib.sim.replay import ReplayCluster
from tracelib.workloads import DeriveConfig, derive_workloads
from warehouse import connect, read_frame, resolve_path, transaction

FAMILIES = {
    "dl2": "dl2",
    "harmony": "harmony-arena",
    "chic": "chic-arena",
    "chic-pair": "chic-pair-arena",
    "rl-taps": "rl-taps-arena",
}
"""Learned family (a `--scheduler` name) -> the `policies.system` of its arena policies."""

BASELINES = ("optimus-events", "drf", "fifo")
"""The arena's heuristics a learned family is compared with on the same simulator by default
(`schedlab replay --arena-baseline` names others): the arena's best heuristic (Optimus
deciding at every event), DL2's paper baseline and FIFO. Optimus at every event fits a
speed model for every running job at every arrival and completion, which makes it the
slowest scheduler of a long trace's replay."""


def check_baselines(names: Sequence[str]) -> tuple[str, ...]:
    """`names` as arena heuristics a learned family can be compared with (duplicates
    dropped), or ReplayInputError naming the first that is not one: unknown in the arena,
    or an oracle (it reads the simulator's truth, so it is no heuristic to beat)."""
    if not names:
        raise ReplayInputError("a learned replay needs an arena heuristic to compare with")
    for name in names:
        try:
            policy = resolve_scheduler(name)
        except NotApplicable as exc:
            raise ReplayInputError(f"arena baseline {name!r}: {exc}") from None
        if policy.uses_oracle:
            raise ReplayInputError(
                f"arena baseline {name!r} reads the simulator's true speeds: an oracle is a "
                "reference, not a heuristic a learned family is judged against"
            )
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class LearnedReplayConfig:
    """One whole-trace run of learned families."""

    source_id: str
    families: tuple[str, ...]
    gpus: float
    """GPUs of the cluster (the replay's, at the capacity this run is for)."""
    servers: ReplayCluster | None = None
    """The replay's cluster at the capacity this run is for; where its servers differ or
    carry GPU types (a node list), the arena's simulator runs on those servers
    (`arena_cluster`)."""
    baselines: tuple[str, ...] = BASELINES
    seed: int = 0
    """Root seed: the simulator's seed and the bootstrap's draws."""
    block: str = "day"
    window: tuple[datetime, datetime] | None = None
    """Only jobs submitted in [start, end) (`schedlab replay --window`)."""
    skip_refused: bool = False
    """A family whose policy cannot run on this cluster (Harmony's placement on servers
    with GPU types) is left out with its reason (`refused`); False: such a family is a
    clear error."""
    capacity: float | None = None
    """The what-if factor this run's cluster is for (`--capacity`), recorded in the
    evaluation's config for the report; None: not part of a what-if."""

    def __post_init__(self) -> None:
        unknown = [f for f in self.families if f not in FAMILIES]
        if unknown or not self.families:
            raise ReplayInputError(
                f"unknown learned scheduler(s) {unknown}; known: {', '.join(FAMILIES)}"
            )
        if not self.gpus > 0:
            raise ReplayInputError("a learned replay needs a cluster with GPUs")
        check_baselines(self.baselines)

    @property
    def workload_set(self) -> str:
        return f"replay-arena:{self.source_id}"

    @property
    def at(self) -> str:
        """What a what-if run's progress lines add to say its capacity ("at capacity F");
        empty for a single run."""
        return f" at capacity {self.capacity:g}" if self.capacity is not None else ""


@dataclass(frozen=True)
class LearnedReplayOutcome:
    eval_id: str
    summary: pl.DataFrame
    policies: dict[str, str]
    """Family -> the policy id it ran."""
    headline: str
    seconds: float
    scheduler_seconds: dict[str, float]
    """Scheduler -> seconds its whole-trace run took (policy loading included)."""
    refused: dict[str, str]
    """Family -> why its policy cannot run on this cluster (with `skip_refused`)."""
    servers: int = 0
    gpus: float = 0.0
    """The arena cluster's servers and GPUs."""
    queueing_s: dict[str, float] = field(default_factory=dict)
    """Scheduler -> mean queueing delay (first start - submit), seconds."""


def newest_policies(
    con,
    source_id: str,
    families: tuple[str, ...],
    usable: Callable[[str], bool] = lambda policy_id: True,
) -> dict[str, str | None]:
    """Family -> the policy it runs on `source_id`: the newest `usable` one of its system
    trained on a workload set derived from the source, else the newest trained on a
    synthetic set (a derivation of synthetic sources only); None when there is neither."""
    derivations = read_frame(con, "SELECT DISTINCT derivation, source_ids FROM workloads")
    own, synthetic = set(), set()
    for name, sources in derivations.iter_rows():
        parts = sources.split(",")  # a workload's sources, comma-joined
        if source_id in parts:
            own.add(name)
        if all(p.startswith("synthetic:") for p in parts):
            synthetic.add(name)
    chosen: dict[str, str | None] = {}
    for family in families:
        rows = read_frame(
            con,
            "SELECT policy_id, training_workloads FROM policies WHERE system = ? "
            "ORDER BY created_at DESC, policy_id",
            [FAMILIES[family]],
        )

        pick = next((p for p, w in rows.iter_rows() if _trained_on(own, w) and usable(p)), None)
        chosen[family] = pick or next(
            (p for p, w in rows.iter_rows() if _trained_on(synthetic, w) and usable(p)), None
        )
    return chosen


def _trained_on(sets: set[str], training_workloads: str | None) -> bool:
    """Whether a policy's training workloads (JSON list of workload ids) are of `sets`."""
    return any(w.split("/", 1)[0] in sets for w in json.loads(training_workloads or "[]"))


def whole_trace_workload(
    jobs: pl.DataFrame, sources: pl.DataFrame, workload_set: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The source's jobs (`jobs` rows whose `duration_s` is their run time, censored ones
    included) as one test sequence of the arena's simulator (workloads and workload_jobs
    frames, not stored)."""
    cfg = DeriveConfig(
        name=workload_set,
        jobs_per_sequence=max(1, jobs.height),
        split_fractions=(0.0, 0.0, 1.0),
        statuses=REPLAYED_STATUSES,
    )
    return derive_workloads(jobs, sources, cfg)


def replayed_jobs(con, source_id: str, window) -> tuple[pl.DataFrame, dict[str, int]]:
    """The source's `jobs` rows the replay rules replay (every phase; see
    `pipelines.replay.load_trace`), each with `duration_s` its run time there (a job
    without a recorded end held to the trace's end), and the left-out counts by reason."""
    kept, left_out, _ = load_trace(con, ReplayConfig(source_id, window=window))
    rows = read_frame(con, "SELECT * FROM jobs WHERE source_id = ?", [source_id])
    run = kept.select("job_id", "run_s")
    jobs = rows.join(run, on="job_id").with_columns(duration_s=pl.col("run_s")).drop("run_s")
    return jobs.sort("submit_time", "job_id"), left_out


DL2_SERVER = DL2_SMALL.cluster()
"""A server of the DL2 setting (2 GPUs, 16 cores, 48 GB): what the learned policies were
trained on, and what a cluster known only by its GPUs is made of."""


def arena_cluster(gpus: float, servers: ReplayCluster | None = None) -> ClusterConfig:
    """The arena simulator's cluster for a replay: the replay's servers as they are where
    they differ or carry GPU types (a node list: each server's GPUs and GPU type, its cores
    and memory where the list gives them, else the DL2 server's per GPU), else DL2
    servers holding `gpus` GPUs."""
    if servers is None or (servers.server_gpus is None and servers.gpu_types is None):
        return replace(DL2_SERVER, n_servers=max(1, math.ceil(gpus / DL2_SERVER.gpus - 1e-9)))
    n = servers.n_servers
    each = servers.server_gpus or (servers.gpus_per_server,) * n
    per_gpu_cpus, per_gpu_mem = (
        DL2_SERVER.cpus / DL2_SERVER.gpus,
        DL2_SERVER.mem_gb / DL2_SERVER.gpus,
    )
    cpus = servers.server_cpus or tuple(max(g, 1.0) * per_gpu_cpus for g in each)
    mem = servers.server_mem_gb or tuple(max(g, 1.0) * per_gpu_mem for g in each)
    types = servers.gpu_types or (None,) * n
    groups: list[ServerGroup] = []
    for server in zip(each, cpus, mem, types, strict=True):
        last = groups[-1] if groups else None
        if last is not None and (last.gpus, last.cpus, last.mem_gb, last.gpu_type) == server:
            groups[-1] = replace(last, n_servers=last.n_servers + 1)
        else:
            groups.append(ServerGroup(1, *server))
    return ClusterConfig.heterogeneous(*groups)


def learned_replay_stage(
    warehouse: str | Path | None, cfg: LearnedReplayConfig, progress: Reporter = QUIET
) -> LearnedReplayOutcome:
    """Run `cfg.families`' policies and the baselines over the whole trace in the arena's
    simulator, store the rows (one transaction) and say it in one sentence."""
    from pipelines.registry import SYSTEMS

    with connect(warehouse) as con:
        # A policy whose checkpoint file is gone or was modified is marked in
        # checkpoint_problems and passed over for the next newest.
        chosen = newest_policies(
            con, cfg.source_id, cfg.families, usable=lambda policy: verify_registered(con, policy)
        )
        sources = read_frame(
            con, "SELECT * FROM trace_sources WHERE source_id = ?", [cfg.source_id]
        )
        jobs, _ = replayed_jobs(con, cfg.source_id, cfg.window)
    missing = [f for f, p in chosen.items() if p is None]
    if missing and (not cfg.skip_refused or len(missing) == len(chosen)):
        raise ReplayInputError(
            f"no registered policy of {', '.join(missing)} with a usable checkpoint, trained "
            "on this source or a synthetic set (lost or modified checkpoints are listed in "
            "checkpoint_problems): run `schedlab run` (with the trace in --incoming) first"
        )
    refused = {f: "no registered policy with a usable checkpoint" for f in missing}
    for family in refused:
        progress.line(f"{family} left out: {refused[family]}")
    chosen = {f: p for f, p in chosen.items() if p is not None}
    try:
        workloads, workload_jobs = whole_trace_workload(jobs, sources, cfg.workload_set)
    except ValueError as exc:  # no job the derivation keeps (none in the window, say)
        raise ReplayInputError(
            f"source {cfg.source_id!r} has no job the arena's simulator can run: {exc}"
        ) from None
    if workloads.height == 0:
        raise ReplayInputError(f"source {cfg.source_id!r} has no job to replay")
    refs = learned_policies(warehouse, dict(chosen), SYSTEMS.loaders())
    cluster = arena_cluster(cfg.gpus, cfg.servers)
    n_servers = cluster.n_servers
    total_gpus = float(cluster.server_capacity()[:, 0].sum())
    eval_cfg = EvalConfig(
        workload_sets=(cfg.workload_set,),
        schedulers=cfg.baselines,
        n_seeds=1,
        seed=cfg.seed,
        cluster=cluster,
        reference="fifo" if "fifo" in cfg.baselines else cfg.baselines[0],
        learned=refs,
        capacity=cfg.capacity,
        # Every job in the system is visible: the arena's window of 20 would let at most 20
        # jobs run on a cluster of hundreds of GPUs. A policy that sees a bounded window
        # decides as it does for more jobs than its window (see the module docstring).
        window=None,
    )
    for ref in refs if cfg.skip_refused else ():
        try:
            eval_cfg.policy(ref.name)  # loads and checks it against this cluster
        except NotApplicable as exc:
            refused[ref.name] = str(exc)
    if refused:
        kept = tuple(r for r in refs if r.name not in refused)
        if not kept:
            raise ReplayInputError("; ".join(f"{f}: {why}" for f, why in refused.items()))
        eval_cfg = replace(eval_cfg, learned=kept)
        for family in (f for f in refused if f not in missing):  # those said above
            progress.line(f"{family} left out: {refused[family]}")
    n_jobs = int(workloads["n_jobs"][0])
    shape = (
        f"{n_servers:,} servers x {cluster.gpus:g} GPUs"
        if not cluster.groups
        else f"{n_servers:,} servers ({total_gpus:,.0f} GPUs) as the replay's"
    )
    progress.line(
        f"replay {cfg.source_id} in the arena's simulator: {n_jobs:,} jobs on {shape}; "
        f"{', '.join(eval_cfg.names)}"
    )
    t = time.perf_counter()
    # One workload, one seed: evaluate's runs are the schedulers, in `names` order.
    marks = [t]

    # The what-if's runs may go side by side (`learned_replays`): a line names its capacity
    # (`cfg.at`).
    def finished(done: int, total: int | None = None) -> None:
        marks.append(time.perf_counter())
        name = eval_cfg.names[done - 1]
        progress.line(f"  {name}{cfg.at}: {marks[-1] - marks[-2]:,.1f} s ({done}/{total})")
        advance(done, total)

    said = [t]

    def within(name: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done < total and now - said[0] >= 30.0:  # a line every half minute at most
            said[0] = now
            progress.line(
                f"  {name}{cfg.at}: {done:,} of {total:,} jobs finished ({now - marks[-1]:,.0f} s)"
            )

    try:
        # One intra-op thread, as in the evaluation stage: Harmony scores one small batch per
        # action, where a second thread only adds synchronization (several times slower when
        # the other core is busy, as in a what-if sweep's side-by-side runs), and the
        # decisions must not depend on the machine.
        with (
            scoped_torch(threads=1),
            progress.bar("arena replay: schedulers", len(eval_cfg.names)) as advance,
        ):
            tables = evaluate(workload_jobs, workloads, eval_cfg, finished, within)
    except NotApplicable as exc:
        # A policy that cannot run on the replay's cluster (Harmony's placement on typed
        # servers): a user-facing refusal, not a crash.
        raise ReplayInputError(str(exc)) from None
    seconds = time.perf_counter() - t
    # One trajectory per scheduler: intervals from the trace's days, paired by block.
    by_scheduler = {
        name: part.sort("job_index")
        for (name,), part in tables.jobs.group_by("scheduler", maintain_order=True)
    }
    arrival = next(iter(by_scheduler.values()))["arrival_s"].to_numpy()
    blocks = (arrival // BLOCKS[cfg.block]).astype(np.int64)
    summary = with_block_intervals(
        tables.summary,
        {name: frame["jct_s"].to_numpy() for name, frame in by_scheduler.items()},
        blocks,
        cfg.seed,
    )
    tables = replace(tables, summary=summary)
    with connect(warehouse) as con, transaction(con):
        store_evaluation(con, tables)
    gpu_seconds = workload_jobs["duration_s"].to_numpy() * workload_jobs["num_gpus"].to_numpy()
    config = {
        "cluster": {
            "n_servers": n_servers,
            "gpus_per_server": cluster.gpus,
            "server_gpus": cluster.server_capacity()[:, 0].tolist() if cluster.groups else None,
        },
        "load": offered_load(arrival, gpu_seconds, total_gpus),
        "block": cfg.block,
    }
    sentence = headline(f"{cfg.source_id} (arena's simulator)", summary, config)
    per_scheduler = {
        name: marks[k + 1] - marks[k] for k, name in enumerate(eval_cfg.names[: len(marks) - 1])
    }
    policies = {f: p for f, p in chosen.items() if f not in refused}
    queueing = {
        name: float((frame["start_s"] - frame["arrival_s"]).mean())
        for name, frame in by_scheduler.items()
    }
    return LearnedReplayOutcome(
        tables.eval_id,
        summary,
        policies,
        sentence,
        seconds,
        per_scheduler,
        refused,
        n_servers,
        total_gpus,
        queueing,
    )


def arena_capacity_frame(outcomes: list[tuple[float, LearnedReplayOutcome]]) -> pl.DataFrame:
    """The what-if rows of learned replays, one per (capacity, scheduler), as the rules'
    (`pipelines.replay.what_if_frame`; `capacity_figure` draws either)."""
    return what_if_frame(
        (factor, o.servers, o.gpus, o.summary, o.queueing_s) for factor, o in outcomes
    )


def learned_replays(
    warehouse: str | Path | None,
    cfgs: Sequence[LearnedReplayConfig],
    *,
    runner: str = "processes",
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Reporter = QUIET,
) -> list[LearnedReplayOutcome]:
    """`learned_replay_stage` of each config (the what-if's capacities), outcomes in `cfgs`
    order, on `runner`: the runs are independent, so local worker processes (default, one
    per available core at most) or Ray (`ray_address`, None: a local instance) run them
    side by side; "sequential", a single worker or a single config, one after another in
    this process. Each run reads the warehouse, simulates with it closed and stores its
    rows in one transaction (a writer waits out another's), so the tables are those of a
    sequential sweep. A worker's progress lines name the capacity they are for."""
    # A worker's own working directory and environment need not be this process's.
    warehouse = resolve_path(warehouse).absolute()
    n = min(workers or available_cores(), len(cfgs))
    if runs_here(runner, n):
        return [_staged(warehouse, cfg, progress) for cfg in cfgs]
    outcomes = []
    calls = [(warehouse, cfg, progress.mode, progress.t0) for cfg in cfgs]
    done = side_by_side(_replay_task, calls, runner=runner, workers=n, ray_address=ray_address)
    for cfg, outcome in zip(cfgs, done, strict=True):
        outcomes.append(outcome)
        if runner == "ray":  # a Ray worker's own lines stay in its log
            progress.line(f"arena replay {cfg.source_id}{cfg.at} on Ray: {outcome.seconds:,.1f} s")
    return outcomes


def _staged(
    warehouse: str | Path | None, cfg: LearnedReplayConfig, progress: Reporter
) -> LearnedReplayOutcome:
    """One run in this process, bracketed as a stage."""
    with progress.stage(f"arena replay {cfg.source_id}{cfg.at}"):
        return learned_replay_stage(warehouse, cfg, progress)


def _replay_task(
    warehouse: str | Path | None, cfg: LearnedReplayConfig, mode: str, t0: float
) -> LearnedReplayOutcome:
    """One run in a worker (a process or a Ray task): stage lines rather than bars, which
    only the command's own display draws."""
    return _staged(warehouse, cfg, Reporter("lines" if mode != "quiet" else "quiet", t0=t0))
