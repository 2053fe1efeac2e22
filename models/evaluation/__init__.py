"""Evaluation: every applicable scheduler on the test workloads, over several seeds.

    tables = evaluate(workload_jobs, workloads, EvalConfig(workload_sets=("dl2-synthetic",)))
    tables.runs, tables.jobs, tables.summary        # rows of eval_runs, eval_jobs, eval_summary

`evaluate` is pure (polars frames in, frames out, no DuckDB); `store_evaluation` writes the
three tables in the caller's transaction, replacing the evaluation's previous rows;
`write_jct_cdf_plots` draws one JCT CDF per workload set. pipelines/stages.py wires them.

One evaluation for every system: `run_schedulers` is the loop (every scheduler x workload x
seed -> eval_runs and eval_jobs rows) and `summarize_runs` the summary (means, intervals,
paired ratios) that `evaluate` and each learned system's own-scenario evaluation
(`models.{harmony,chic,rltaps}.evaluate`, `*_tables`) go through. A scheduler is a
`RunFn` (workload, seed) -> `RunOutcome`: `simulated` runs a DecisionPolicy in the
simulator; a system whose policy acts through its own decision process (Chic's actions,
RL-TAPS' per-GPU softmax) gives the episodes it ran. A paper's scenario is a workload set
of its own (harmony-<pattern>, chic@<rate>/h, rl-taps-bimodal), marked by
eval_summary.scenario.

What a run is and what is measured
----------------------------------
- Evaluation: a config (schedulers, seeds, cluster) applied to the `split` (default: test)
  workloads of the named workload sets (derivations). Its `eval_id` hashes the config and the
  content of those workloads' jobs, so re-running the same evaluation on the same workloads
  gives the same id (and replaces its rows), and a new trace or config gives a new one.
- Run: one scheduler on one workload (a job sequence) with one simulator seed. `run_id`
  hashes (eval_id, scheduler, workload_id, seed). Seeds: `n_seeds` seeds spawned from `seed`
  with `numpy.random.SeedSequence`; replicate k uses the same seed for every scheduler and
  workload (common random numbers: a job's hidden speed deviation is the same under every
  scheduler, so differences between schedulers are paired).
- Run-to-run variation: by default each job's speed deviates by up to +-10% from the model,
  drawn per seed, and by up to +-5% more in each slot (`SpeedConfig` defaults; DL2 Fig. 4
  and 13's variation of the same job's completion time). Without it a seed would change
  only placement tie-breaks.
- Per job (eval_jobs): `arrival_s` (after any arrival jitter); `start_s`, the first decision
  at which the job was given a positive training rate (the engine's start time if its job
  frame has one, else the first `alloc` event with a positive rate in the event log; a start
  delay or a reallocation pause can hold actual training back a little longer); `finish_s`;
  `jct_s = finish_s - arrival_s`; `ideal_s`, the JCT the job would have alone in an empty
  cluster with its best allocation: `start_delay_s + epochs / best epochs per second`, the
  best over every (workers, PSs) up to the catalogue cap that fits the cluster's summed
  capacity, at the simulator's isolated speed (spread placement, no interference, no decision
  interval to wait for); `slowdown = jct_s / ideal_s`. The slowdown is >= 1 up to what the
  ideal does not know: the job's own speed deviation (down to 1 / (1 + speed_variation)),
  per-slot noise, and the locality gain of a co-located job (at most 6.2%). `gpu_time_s`:
  GPU-seconds held: at every decision that placed the job, its workers' GPUs times the time
  until the next decision or its finish, whichever is first (reallocation pauses included:
  the GPUs are held though not training). CPU-only models (cnn-text, dssm) hold none.
- Per run (eval_runs): average, median and p95 JCT, makespan (last finish - first arrival),
  mean slowdown, GPU-seconds, utilization = GPU-seconds / (cluster GPUs x makespan). The
  per-run rows are the summary's per-run level: they let a reader pair schedulers on the
  same workload and seed in SQL.
- Summary (eval_summary), per (evaluation, workload set, scheduler) over its runs (seeds x
  sequences), with the test sequence as the statistical unit: the runs of one sequence (its
  simulator seeds) share its jobs, so they are averaged first, and each metric's mean has a
  Student-t `confidence` interval over sequences (n_sequences - 1 degrees of freedom; NULL
  with one sequence). For comparing schedulers use `jct_ratio`: per sequence, the mean over
  its seeds of avg JCT / the reference scheduler's avg JCT on the same seed (paired), then
  the mean over sequences with its own interval (the sequence's difficulty cancels out of
  a ratio). `ratio_to_best_heuristic` is the same against the set's best non-oracle
  heuristic. JCT is in seconds; `avg_jct_slots` gives the mean in decision slots (DL2's
  unit).

Which schedulers apply
----------------------
The evaluation runs the DL2 setting: time-slotted decisions over the DL2 catalogue's PS jobs
with `tracelib.sim`'s speed model. In it a registered name (`models.heuristics.registry`)
applies if it is
- an allocation policy (ALLOCATIONS): run with the placement `default_placement`. Every
  allocation policy reads only the snapshot, so all of them run on PS jobs, including
  those written for another system (RL-TAPS' job pickers "sjf", "random", "tetris-picker";
  name "sjf+first-fit" for RL-TAPS' own pairing);
- a placement policy (PLACEMENTS): run with the allocation `default_allocation` (DL2's
  workloads state requested workers/PSs; Harmony's setting is exactly that), e.g.
  "lif-line" is "requested+lif-line";
- "allocation+placement": both named explicitly (a name registered as both an allocation and
  a placement policy, e.g. "random", means the allocation policy; name the pair for the
  other, e.g. "requested+random");
- a joint decision policy from any other registry in that module (e.g. an RL-TAPS per-GPU
  assignment) that declares `settings` containing "dl2"; a policy built for another setting
  (a topology of single GPUs) does not apply, and naming it is an error that says so.
The default list is every name of `HEURISTICS` (the DL2 baselines), of `OPTIMUS_VARIANTS`
(Optimus every 300 s and at every arrival and completion: Optimus at its best interval), of
`OTHER_BASELINES` (Harmony's placement heuristics with the requested allocation, RL-TAPS'
SJF with first-fit GPUs) and of `PREEMPTIVE_BASELINES` (Tiresias' 2D-LAS and 2D-Gittins,
preemptive SRTF) that applies, read from the registry when the config is made: every
family's baselines beside every family's learned policies.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl

from models.contracts import (
    SUMMARY_METRICS,
    EvalJobs,
    EvalRuns,
    EvalSelectionRuns,
    EvalSummary,
)
from models.heuristics import registry
from tracelib.catalogue import DL2_CATALOGUE, JobType, by_name
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json, code_version
from tracelib.scenarios.dl2 import DL2_SMALL
from tracelib.sim import (
    ClusterConfig,
    DecisionPolicy,
    JobSpec,
    Scheduler,
    SimConfig,
    SimResult,
    Simulator,
    SpeedConfig,
    SpeedModel,
    jobs_from_frame,
)
from tracelib.stats import mean_ci, paired_ratio, unit_means
from warehouse.io import replace_rows

SETTING = "dl2"
"""The setting this evaluation simulates (see the module docstring)."""

_JOB_CONTENT = ("job_index", "model", "epochs", "num_workers", "num_ps", "arrival_s")


class NotApplicable(ValueError):
    """A scheduler name that is unknown or does not run in the evaluation's setting."""


def resolve_scheduler(
    name: str, default_allocation: str = "requested", default_placement: str = "load-balancing"
) -> DecisionPolicy:
    """The policy a scheduler name stands for in the DL2 setting, or NotApplicable."""
    allocations, placements = registry.ALLOCATIONS, registry.PLACEMENTS
    if "+" in name:
        alloc, place = name.split("+", 1)
        if alloc in allocations.names() and place in placements.names():
            return Scheduler(allocations.create(alloc), placements.create(place))
        raise NotApplicable(
            f"scheduler {name!r}: {alloc!r} must be an allocation policy "
            f"({', '.join(allocations.names())}) and {place!r} a placement policy "
            f"({', '.join(placements.names())})"
        )
    if name in allocations.names():
        return Scheduler(allocations.create(name), placements.create(default_placement))
    if name in placements.names():
        return Scheduler(allocations.create(default_allocation), placements.create(name))
    for other in _other_registries():
        if name in other.names():
            policy = other.create(name)
            settings = tuple(getattr(policy, "settings", ()))
            if isinstance(policy, DecisionPolicy) and SETTING in settings:
                return policy
            raise NotApplicable(
                f"scheduler {name!r} ({other.kind}) does not run in the {SETTING} setting "
                f"(it declares settings {list(settings)})"
            )
    known = sorted(
        {*allocations.names(), *placements.names()}.union(
            *(set(r.names()) for r in _other_registries())
        )
    )
    raise NotApplicable(f"unknown scheduler {name!r}; known: {', '.join(known)}")


def _other_registries() -> list[registry.Registry]:
    """Registries of models.heuristics.registry beyond allocation and placement policies."""
    return [
        value
        for value in vars(registry).values()
        if isinstance(value, registry.Registry)
        and value is not registry.ALLOCATIONS
        and value is not registry.PLACEMENTS
    ]


def applicable(name: str) -> bool:
    """Whether `name` runs in the evaluation's setting (with the default companions)."""
    try:
        resolve_scheduler(name)
    except (NotApplicable, KeyError):
        return False
    return True


def default_schedulers() -> tuple[str, ...]:
    """Every heuristic of the registry's baseline lists that runs in the DL2 setting, in
    report order: DL2's baselines, Optimus at shorter intervals, the other papers', then
    the preemptive ones."""
    names = (
        *registry.HEURISTICS,
        *registry.OPTIMUS_VARIANTS,
        *registry.OTHER_BASELINES,
        *registry.PREEMPTIVE_BASELINES,
    )
    return tuple(name for name in names if applicable(name))


Loader = Callable[["LearnedPolicy", "EvalConfig"], DecisionPolicy]
"""How a learned system's checkpoint runs in this evaluation's setting: (the policy's
reference, the evaluation config) -> a decision policy (composed with the config's default
placement or allocation where the system decides only one half). Each system's steps
declare theirs (`Steps.loaders`, keyed by `policies.system`)."""


@dataclass(frozen=True)
class ArenaLoader:
    """A system's loader (`Steps.loaders` may give this instead of a bare `Loader`) with
    what the evaluation needs to know of the policies it loads besides how they run."""

    load: Loader
    baseline: bool = False
    """Its policies are baselines, not learned schedulers (DL2's searched table): the
    leaderboard lists them as heuristics, and the best heuristic is chosen among them too."""
    teacher: Callable[[Mapping[str, Any]], str | None] | None = None
    """The scheduler name, in the evaluation, of what a policy imitated or searched with,
    from its `policies` row (its metrics' `stage_config`); None: no teacher."""


def arena_loader(entry: Loader | ArenaLoader) -> ArenaLoader:
    """`entry` as an `ArenaLoader` (a bare loader: a learned system's, without a teacher)."""
    return entry if isinstance(entry, ArenaLoader) else ArenaLoader(entry)


@dataclass(frozen=True)
class LearnedPolicy:
    """A registered policy (a `policies` row) evaluated under the scheduler name `name`."""

    name: str
    """Scheduler name in the evaluation tables (e.g. "dl2", "dl2-warmup")."""
    policy_id: str
    system: str
    checkpoint_path: str
    sha256: str
    """The checkpoint is refused unless its bytes hash to this (models.checkpoints)."""
    loader: Loader | None = field(default=None, compare=False, repr=False)
    """How it runs here (from its system's steps); None: its system has no policy that runs
    in this setting."""
    teacher: str | None = None
    """The scheduler it imitated or searched with (`ArenaLoader.teacher`): where that one
    runs in the same evaluation, the summary gives the ratio to it (`ratio_to_teacher`)."""
    baseline: bool = False
    """A baseline built by a learned system's training (`ArenaLoader.baseline`)."""

    @property
    def family(self) -> str:
        """Its leaderboard family: "heuristic" for a baseline, else its system's."""
        return "heuristic" if self.baseline else family_of(self.system)


@dataclass(frozen=True)
class EvalConfig:
    """What the evaluation runs: schedulers x test workloads x seeds, on one cluster."""

    workload_sets: tuple[str, ...] = ()
    """Workload sets (derivation names) to evaluate; empty: every set in the input."""
    split: str = "test"
    """Which split of each set is evaluated."""
    choose_on: str | None = "validation"
    """The split on which each set's best heuristic is chosen: the baselines (every
    scheduler but the learned ones) also run on up to `max_sequences` of its sequences
    (eval_selection_runs), and the one with the lowest mean there is the best heuristic
    the evaluated split's ratios are taken to. None, or a set without such sequences: the
    best on the evaluated sequences themselves (a choice that favours the heuristic)."""
    max_sequences: int | None = None
    """At most this many sequences per set (the lowest sequence numbers); None: all."""
    schedulers: tuple[str, ...] = field(default_factory=default_schedulers)
    """Registry names (allocation, placement, "allocation+placement"); default: every
    baseline of models.heuristics.registry.HEURISTICS, OPTIMUS_VARIANTS, OTHER_BASELINES
    and PREEMPTIVE_BASELINES that applies."""
    n_seeds: int = 3
    """Simulator seeds per workload (replicates)."""
    seed: int = 0
    """Root seed; the simulator seeds are spawned from it."""
    cluster: ClusterConfig = field(default_factory=DL2_SMALL.cluster)
    """The cluster (default: DL2's small setting, 96 servers of 2 GPUs; the scenario
    dl2-small of tracelib.scenarios)."""
    window: int | None = DL2_SMALL.window
    """Jobs visible to the scheduler per decision (DL2 small setting: 20)."""
    slot_s: float = DL2_SMALL.slot_s
    """Decision slot, seconds (DL2: 20 minutes)."""
    speed: SpeedConfig = field(default_factory=SpeedConfig)
    """Speed realism: the measured truth with +-10% per-job and +-5% per-slot variation
    (`SpeedConfig` defaults; see module)."""
    default_allocation: str = "requested"
    """Allocation used with a placement-only policy."""
    default_placement: str = "load-balancing"
    """Placement used with an allocation-only policy (DL2's default)."""
    reference: str = "drf"
    """Scheduler the summary's `jct_ratio` compares with (the first one if not evaluated)."""
    confidence: float = 0.95
    """Confidence level of the intervals."""
    learned: tuple[LearnedPolicy, ...] = ()
    """Registered learned policies evaluated beside `schedulers` (each under its name)."""
    capacity: float | None = None
    """A whole-trace replay's what-if factor (`schedlab replay --capacity`): the cluster is
    this multiple of the size the replay's rule gave. Recorded for the report's what-if;
    None (not in the config's JSON): not a what-if run."""

    def __post_init__(self) -> None:
        if not self.schedulers:
            raise ValueError("no schedulers to evaluate")
        if len(set(self.schedulers)) != len(self.schedulers):
            raise ValueError(f"schedulers named twice: {list(self.schedulers)}")
        if self.n_seeds < 1:
            raise ValueError("n_seeds must be at least 1")
        if self.choose_on is not None and self.choose_on == self.split:
            raise ValueError(f"the best heuristic is chosen on another split than {self.split!r}")
        if self.max_sequences is not None and self.max_sequences < 1:
            raise ValueError("max_sequences must be at least 1 (or None for all)")
        if not 0 < self.confidence < 1:
            raise ValueError("confidence must be in (0, 1)")
        for name in self.schedulers:
            resolve_scheduler(name, self.default_allocation, self.default_placement)
        for ref in self.learned:
            if ref.loader is None:
                raise NotApplicable(
                    f"learned policy {ref.policy_id}: system {ref.system!r} has no policy "
                    f"that runs in the {SETTING} setting"
                )
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"scheduler names used twice: {list(self.names)}")

    @property
    def names(self) -> tuple[str, ...]:
        """Every evaluated scheduler name: the registry's, then the learned policies'."""
        return (*self.schedulers, *(ref.name for ref in self.learned))

    @property
    def baselines(self) -> tuple[str, ...]:
        """The schedulers that may be the best heuristic's candidates: every name but the
        learned policies' (a learned system's baseline, e.g. DL2's searched table, is one)."""
        return (*self.schedulers, *(ref.name for ref in self.learned if ref.baseline))

    @property
    def reference_scheduler(self) -> str:
        return self.reference if self.reference in self.schedulers else self.schedulers[0]

    def sim_seeds(self) -> list[int]:
        """The simulator seed of each replicate."""
        children = np.random.SeedSequence(self.seed).spawn(self.n_seeds)
        return [int(c.generate_state(1, dtype=np.uint32)[0]) for c in children]

    def sim_config(self, seed: int) -> SimConfig:
        return SimConfig(
            cluster=self.cluster,
            speed=self.speed,
            slot_s=self.slot_s,
            seed=seed,
            window=self.window,
        )

    def policy(self, name: str) -> DecisionPolicy:
        for ref in self.learned:
            if ref.name == name:
                return ref.loader(ref, self)
        return resolve_scheduler(name, self.default_allocation, self.default_placement)

    def to_dict(self) -> dict:
        """The config as JSON-able values. Learned policies appear by id and hash, not by
        file path, so the evaluation id does not depend on where the warehouse lives."""
        out = asdict(self)
        for ref in out["learned"]:
            del ref["checkpoint_path"], ref["loader"]
        if out["capacity"] is None:  # every other evaluation keeps its config and its id
            del out["capacity"]
        return out


def eval_setting() -> SimConfig:
    """The simulator the evaluation runs at its defaults (cluster, slot, window, speed
    realism): where the learned systems train the policies it evaluates."""
    return EvalConfig().sim_config(0)


def eval_config(
    workload_sets: list[str] | tuple[str, ...] | None = None,
    schedulers: list[str] | tuple[str, ...] | None = None,
    n_seeds: int = 3,
    seed: int = 0,
    max_sequences: int | None = None,
    n_servers: int | None = None,
    window: int | None = 20,
    split: str = "test",
    learned: tuple[LearnedPolicy, ...] = (),
    choose_on: str | None = "validation",
) -> EvalConfig:
    """An EvalConfig from flow and CLI options (None or empty keeps the default)."""
    base = EvalConfig()
    return EvalConfig(
        learned=tuple(learned),
        workload_sets=tuple(workload_sets or ()),
        split=split,
        choose_on=choose_on if choose_on != split else None,
        schedulers=tuple(schedulers) if schedulers else base.schedulers,
        n_seeds=n_seeds,
        seed=seed,
        max_sequences=max_sequences,
        cluster=replace(base.cluster, n_servers=n_servers) if n_servers else base.cluster,
        window=window,
    )


@dataclass(frozen=True)
class EvalTables:
    """Rows of the three evaluation tables for one evaluation."""

    eval_id: str
    runs: pl.DataFrame
    jobs: pl.DataFrame
    summary: pl.DataFrame
    selection: pl.DataFrame | None = None
    """eval_selection_runs rows: the baselines on the sequences the best heuristic is
    chosen on (None: chosen on the evaluated sequences)."""


# -- the pure evaluation -------------------------------------------------------------------


def _of_split(workloads: pl.DataFrame, cfg: EvalConfig, split: str) -> pl.DataFrame:
    chosen = workloads.filter(pl.col("split") == split)
    if cfg.workload_sets:
        chosen = chosen.filter(pl.col("derivation").is_in(list(cfg.workload_sets)))
    chosen = chosen.sort("derivation", "sequence_no")
    if cfg.max_sequences is not None:
        chosen = chosen.filter(
            pl.col("sequence_no").rank("ordinal").over("derivation") <= cfg.max_sequences
        )
    return chosen


def select_workloads(workloads: pl.DataFrame, cfg: EvalConfig) -> pl.DataFrame:
    """The workloads the config evaluates, ordered by set and sequence number."""
    chosen = _of_split(workloads, cfg, cfg.split)
    if chosen.height == 0:
        sets = list(cfg.workload_sets) or "any set"
        raise ValueError(f"no {cfg.split!r} workloads to evaluate in {sets}")
    return chosen


def selection_workloads(workloads: pl.DataFrame, cfg: EvalConfig) -> pl.DataFrame:
    """The workloads the best heuristic is chosen on (`cfg.choose_on`) of the sets the
    config evaluates, ordered by set and sequence number; empty without any."""
    evaluated = select_workloads(workloads, cfg)["derivation"].unique().to_list()
    if cfg.choose_on is None:
        return workloads.clear()
    chosen = _of_split(workloads, cfg, cfg.choose_on)
    return chosen.filter(pl.col("derivation").is_in(evaluated))


def evaluated_workloads(workloads: pl.DataFrame, cfg: EvalConfig) -> pl.DataFrame:
    """Every workload the config runs: the evaluated ones, then the selection's."""
    return pl.concat([select_workloads(workloads, cfg), selection_workloads(workloads, cfg)])


def evaluation_id(cfg: EvalConfig, chosen: pl.DataFrame, workload_jobs: pl.DataFrame) -> str:
    """Hash of the config and of the evaluated workloads' jobs (what the runs depend on)."""
    ids = chosen.get_column("workload_id").sort().to_list()
    content = (
        workload_jobs.filter(pl.col("workload_id").is_in(ids))
        .select("workload_id", *_JOB_CONTENT)
        .sort("workload_id", "job_index")
        .rows()
    )
    digest = hashlib.sha256(canonical_json([cfg.to_dict(), ids, content]).encode()).hexdigest()
    return f"ev-{digest[:16]}"


def _run_id(eval_id: str, scheduler: str, workload_id: str, seed: int) -> str:
    key = canonical_json([eval_id, scheduler, workload_id, seed])
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def best_rates(
    cluster: ClusterConfig, speed: SpeedConfig, catalogue: tuple[JobType, ...] = DL2_CATALOGUE
) -> dict[str, float]:
    """Best epochs/s of each model alone in an empty cluster: over workers 1..cap and PSs
    0..cap whose summed demand fits the cluster's summed capacity, at the catalogue speed."""
    model = SpeedModel(speed, catalogue)
    totals = np.array([cluster.gpus, cluster.cpus, cluster.mem_gb]) * cluster.n_servers
    out = {}
    for jt in catalogue:
        cap = jt.max_workers
        w, p = np.meshgrid(np.arange(1, cap + 1), np.arange(0, cap + 1), indexing="ij")
        w, p = w.ravel(), p.ravel()
        demand = np.outer(w, jt.worker_demand) + np.outer(p, jt.ps_demand)  # (n, 3)
        fits = (demand <= totals + 1e-9).all(axis=1)
        rates = model.base([jt.type_index] * len(w), w, p) / jt.iters_per_epoch
        feasible = rates[fits]
        out[jt.model] = float(feasible.max()) if feasible.size else 0.0
    return out


def _start_times(result: SimResult, events: pl.DataFrame) -> pl.DataFrame:
    """job_id -> start_s: the engine's start time if it reports one, else the first decision
    that gave the job a positive training rate."""
    for column in ("start_s", "started_s"):
        if column in result.jobs.columns:
            return result.jobs.select("job_id", pl.col(column).cast(pl.Float64).alias("start_s"))
    return (
        events.filter((pl.col("kind") == "alloc") & (pl.col("value") > 0))
        .group_by("job_id")
        .agg(pl.col("time_s").min().alias("start_s"))
    )


def _gpu_time(
    result: SimResult, events: pl.DataFrame, finish: dict[int, float], gpus_per_worker: dict
) -> dict[int, float]:
    """GPU-seconds each job held: per decision, its workers' GPUs until the next decision or
    its finish."""
    placed = result.placements
    if placed.height == 0:
        return {}
    # Sorted: a job's seconds are summed below in time order, so the float total does not
    # depend on the order polars' group_by happens to return groups in.
    per_decision = (
        placed.group_by("time_s", "job_id").agg(pl.col("workers").sum()).sort("time_s", "job_id")
    )
    decisions = np.unique(
        np.concatenate(
            [
                events.filter(pl.col("kind") == "decide").get_column("time_s").to_numpy(),
                placed.get_column("time_s").to_numpy(),
            ]
        )
    )
    times = per_decision.get_column("time_s").to_numpy()
    idx = np.searchsorted(decisions, times, side="right")
    next_t = np.where(idx < len(decisions), decisions[np.minimum(idx, len(decisions) - 1)], np.inf)
    job_ids = per_decision.get_column("job_id").to_numpy()
    ends = np.minimum(next_t, np.array([finish[int(j)] for j in job_ids]))
    held = np.maximum(ends - times, 0.0) * per_decision.get_column("workers").to_numpy()
    out: dict[int, float] = {}
    for job_id, seconds in zip(job_ids, held, strict=True):
        out[int(job_id)] = out.get(int(job_id), 0.0) + float(seconds)
    return {j: s * gpus_per_worker[j] for j, s in out.items()}


def job_rows(
    result: SimResult,
    frame: pl.DataFrame | None,
    rates: Mapping[str, float],
    start_delay_s: float,
    catalogue: tuple[JobType, ...] | None = None,
) -> pl.DataFrame:
    """Per-job rows of one run (without the run's keys): times, JCT, slowdown, GPU-time.
    `frame`: the workload's jobs with the trace's names (None: named by the simulator);
    `catalogue`: the job types' GPUs per worker (None: every catalogue's, by name)."""
    jobs = result.jobs
    if jobs.get_column("finish_s").null_count():
        raise RuntimeError(f"{result.scheduler}: some jobs did not finish")
    events = result.events_frame()
    types = by_name() if catalogue is None else {jt.model: jt for jt in catalogue}
    gpus = {
        int(j): types[m].worker_gpu
        for j, m in zip(jobs["job_id"].to_list(), jobs["model"].to_list(), strict=True)
    }
    finish = dict(zip(jobs["job_id"].to_list(), jobs["finish_s"].to_list(), strict=True))
    gpu_time = _gpu_time(result, events, finish, gpus)
    held = pl.DataFrame(
        {"job_id": list(gpu_time), "gpu": list(gpu_time.values())},
        schema={"job_id": pl.Int64, "gpu": pl.Float64},
    )
    if frame is None:
        names = pl.DataFrame(schema={"job_id": pl.Int64, "trace_job": pl.Utf8})
    else:
        names = frame.select(
            pl.col("job_index").cast(pl.Int64).alias("job_id"),
            pl.col("job_id").alias("trace_job"),
        )
    best = pl.col("model").replace_strict(rates, return_dtype=pl.Float64)
    return (
        jobs.join(_start_times(result, events), on="job_id", how="left")
        .join(names, on="job_id", how="left")
        .join(held, on="job_id", how="left")
        .select(
            pl.col("job_id").cast(pl.Int32).alias("job_index"),
            pl.col("trace_job").fill_null(pl.col("name")).alias("job_id"),
            "model",
            "arrival_s",
            "start_s",
            "finish_s",
            "jct_s",
            (start_delay_s + pl.col("epochs_real") / best).alias("ideal_s"),
            pl.col("gpu").fill_null(0.0).alias("gpu_time_s"),
        )
        .with_columns((pl.col("jct_s") / pl.col("ideal_s")).alias("slowdown"))
        .sort("job_index")
    )


def run_metrics(jobs: pl.DataFrame, total_gpus: float) -> dict[str, float]:
    """The per-run metrics of eval_runs from its job rows."""
    jct = jobs.get_column("jct_s")
    makespan = float(jobs["finish_s"].max() - jobs["arrival_s"].min())
    gpu_time = float(jobs["gpu_time_s"].sum())
    return {
        "n_jobs": jobs.height,
        "avg_jct_s": float(jct.mean()),
        "median_jct_s": float(jct.median()),
        "p95_jct_s": float(jct.quantile(0.95, interpolation="linear")),
        "makespan_s": makespan,
        "mean_slowdown": float(jobs["slowdown"].mean()),
        "gpu_time_s": gpu_time,
        "utilization": gpu_time / (total_gpus * makespan) if total_gpus > 0 else 0.0,
    }


@dataclass(frozen=True)
class Workload:
    """One job sequence an evaluation runs every scheduler on, with its simulator seeds."""

    workload_set: str
    """The set it belongs to: a derivation name or a paper scenario's (e.g. harmony-uniform)."""
    workload_id: str
    sequence_no: int
    jobs: tuple[JobSpec, ...]
    seeds: tuple[int, ...]
    """Simulator seed of each replicate (the same for every scheduler: common random numbers)."""
    split: str = "test"
    trace_version: str = ""
    names: pl.DataFrame | None = field(default=None, compare=False, repr=False)
    """job_index -> job_id (the trace's job names), when the sequence has them."""


@dataclass(frozen=True)
class RunOutcome:
    """What one run gave: its eval_jobs rows (without the run's keys) and, where the
    scenario's MDP defines one, the episode's return."""

    jobs: pl.DataFrame
    policy: str
    reward: float | None = None
    result: SimResult | None = field(default=None, compare=False, repr=False)


RunFn = Callable[[Workload, int], RunOutcome]
"""How one scheduler runs: (workload, simulator seed) -> its outcome."""


def simulated(
    make_policy: Callable[[], DecisionPolicy],
    sim_config: Callable[[int], SimConfig],
    *,
    catalogue: tuple[JobType, ...] | None = None,
    rates: Mapping[str, float],
    start_delay_s: float,
    policy_name: str | None = None,
    keep_result: bool = False,
    on_jobs: Callable[[int, int], None] | None = None,
) -> RunFn:
    """A decision policy run in `tracelib.sim`'s simulator (`sim_config(seed)`), its jobs'
    slowdowns against `rates` (best epochs/s alone, `best_rates`). `make_policy()` is
    called once per workload: the seeds of one workload share the policy object, as a
    policy that keeps state across runs (Optimus' fitted curves) always did. `policy_name`:
    eval_runs.policy (default: the policy's own name; a learned one's policy id).
    `on_jobs(finished, jobs)`: the run's progress, now and then (`Simulator.run`)."""
    made: dict[str, DecisionPolicy] = {}

    def run(workload: Workload, seed: int) -> RunOutcome:
        if workload.workload_id not in made:
            made.clear()
            made[workload.workload_id] = make_policy()
        policy = made[workload.workload_id]
        sim = Simulator(workload.jobs, policy, sim_config(seed), catalogue or DL2_CATALOGUE)
        result = sim.run(progress=on_jobs)
        rows = job_rows(result, workload.names, rates, start_delay_s, catalogue)
        name = policy_name or policy.name
        return RunOutcome(rows, name, result=result if keep_result else None)

    return run


def run_schedulers(
    schedulers: Mapping[str, RunFn],
    workloads: Sequence[Workload],
    *,
    eval_id: str,
    total_gpus: float,
    run_config: Callable[[int], str],
    version: str,
    progress: ProgressFn = no_progress,
    on_result: Callable[[str, Workload, RunOutcome], None] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """eval_runs and eval_jobs rows of every scheduler on every workload with each of its
    seeds: the one loop every evaluation (the DL2-setting one on workload sets, each
    system's own scenario) goes through. Pure but for `on_result`, which sees each outcome
    (e.g. to keep the simulations a system learns from). Deterministic when the run
    functions are. `run_config(seed)` is the run's config JSON."""
    run_rows: list[dict] = []
    job_frames: list[pl.DataFrame] = []
    total_runs = sum(len(wl.seeds) for wl in workloads) * len(schedulers)
    for wl in workloads:
        for name, run in schedulers.items():
            for replicate, seed in enumerate(wl.seeds):
                try:
                    outcome = run(wl, seed)
                except NotApplicable:
                    # A property of the scheduler, not of this run: the caller decides.
                    raise
                except Exception as exc:
                    raise RuntimeError(
                        f"evaluation run failed: scheduler {name!r}, workload "
                        f"{wl.workload_id}, seed {seed}: {exc}"
                    ) from exc
                if on_result is not None:
                    on_result(name, wl, outcome)
                run_id = _run_id(eval_id, name, wl.workload_id, seed)
                run_rows.append(
                    {
                        "run_id": run_id,
                        "eval_id": eval_id,
                        "scheduler": name,
                        "policy": outcome.policy,
                        "workload_set": wl.workload_set,
                        "workload_id": wl.workload_id,
                        "split": wl.split,
                        "sequence_no": wl.sequence_no,
                        "replicate": replicate,
                        "seed": seed,
                        **run_metrics(outcome.jobs, total_gpus),
                        "reward": outcome.reward,
                        "trace_version": wl.trace_version,
                        "config": run_config(seed),
                        "code_version": version,
                    }
                )
                job_frames.append(
                    outcome.jobs.with_columns(
                        pl.lit(run_id).alias("run_id"),
                        pl.lit(eval_id).alias("eval_id"),
                        pl.lit(name).alias("scheduler"),
                        pl.lit(wl.workload_id).alias("workload_id"),
                        pl.lit(seed, dtype=pl.Int64).alias("seed"),
                    )
                )
                progress(len(run_rows), total_runs)
    runs = cast_to_contract(pl.DataFrame(run_rows, infer_schema_length=None), EvalRuns)
    return runs, cast_to_contract(pl.concat(job_frames), EvalJobs)


def evaluate(
    workload_jobs: pl.DataFrame,
    workloads: pl.DataFrame,
    cfg: EvalConfig,
    progress: ProgressFn = no_progress,
    on_jobs: Callable[[str, int, int], None] | None = None,
) -> EvalTables:
    """Run every scheduler of `cfg` on every selected workload with every seed.

    `workloads` and `workload_jobs` have the columns of the tables of those names (only
    the selected workloads' jobs are used). Deterministic: same inputs, same tables.
    `progress(runs done, total runs)` is called after every simulation, `on_jobs(scheduler,
    jobs finished, jobs)` now and then within one (a whole trace's run takes minutes).
    """
    chosen = select_workloads(workloads, cfg)
    held_out = selection_workloads(workloads, cfg)
    eval_id = evaluation_id(cfg, pl.concat([chosen, held_out]), workload_jobs)
    version = code_version()
    seeds = tuple(cfg.sim_seeds())
    rates = best_rates(cfg.cluster, cfg.speed)

    def as_workloads(frame: pl.DataFrame) -> list[Workload]:
        out = []
        for wl in frame.iter_rows(named=True):
            jobs = workload_jobs.filter(pl.col("workload_id") == wl["workload_id"])
            if jobs.height == 0:
                raise ValueError(f"workload {wl['workload_id']} has no jobs")
            jobs = jobs.sort("job_index")
            out.append(
                Workload(
                    workload_set=wl["derivation"],
                    workload_id=wl["workload_id"],
                    sequence_no=wl["sequence_no"],
                    jobs=tuple(jobs_from_frame(jobs)),
                    seeds=seeds,
                    split=wl["split"],
                    trace_version=wl["source_hashes"],
                    names=jobs,
                )
            )
        return out

    selected, selection = as_workloads(chosen), as_workloads(held_out)
    schedulers = {
        name: simulated(
            lambda name=name: cfg.policy(name),
            cfg.sim_config,
            rates=rates,
            start_delay_s=cfg.speed.start_delay_s,
            catalogue=None,
            on_jobs=None if on_jobs is None else partial(on_jobs, name),
        )
        for name in cfg.names
    }
    total = len(seeds) * (len(selected) * len(cfg.names) + len(selection) * len(cfg.baselines))
    common = dict(
        eval_id=eval_id,
        total_gpus=cfg.cluster.gpus * cfg.cluster.n_servers,
        run_config=lambda seed: canonical_json(
            {"evaluation": cfg.to_dict(), "sim": asdict(cfg.sim_config(seed))}
        ),
        version=version,
    )
    runs, jobs = run_schedulers(
        schedulers, selected, progress=lambda done, _: progress(done, total), **common
    )
    chosen_on = None
    if selection:
        # The baselines on the held-out selection sequences, after the evaluated runs (a
        # policy object never carries state from one into the other: one per workload).
        chosen_on, _ = run_schedulers(
            {name: schedulers[name] for name in cfg.baselines},
            selection,
            progress=lambda done, _: progress(runs.height + done, total),
            **common,
        )
    summary = summarize(runs, cfg, version, selection=chosen_on)
    return EvalTables(eval_id, runs, jobs, summary, _selection_rows(chosen_on))


def _selection_rows(runs: pl.DataFrame | None) -> pl.DataFrame | None:
    return None if runs is None else cast_to_contract(runs, EvalSelectionRuns)


def cast_to_contract(frame: pl.DataFrame, contract) -> pl.DataFrame:
    """The contract's columns, in its order and types."""
    columns = contract.to_schema().columns
    return frame.select(
        [
            (pl.col(n) if n in frame.columns else pl.lit(None)).cast(c.dtype.type).alias(n)
            for n, c in columns.items()
        ]
    )


# -- summary -----------------------------------------------------------------------------


def summarize(
    runs: pl.DataFrame, cfg: EvalConfig, version: str, selection: pl.DataFrame | None = None
) -> pl.DataFrame:
    """eval_summary rows: per (evaluation, workload set, scheduler) over its runs, the best
    heuristic chosen on `selection`'s runs where a set has them."""
    return summarize_runs(
        runs,
        reference=cfg.reference_scheduler,
        order=cfg.names,
        confidence=cfg.confidence,
        slot_s=cfg.slot_s,
        config=canonical_json(cfg.to_dict()),
        version=version,
        families={ref.name: ref.family for ref in cfg.learned},
        teachers={ref.name: ref.teacher for ref in cfg.learned if ref.teacher is not None},
        selection=selection,
    )


ARENA_SUFFIX = "-arena"
"""A system's policies trained for the evaluation on every workload set are registered as
`<system>-arena` ("harmony-arena"), apart from those trained in its own paper's scenario
(their networks have other shapes, and each training continues from its own newest)."""


def family_of(system: str) -> str:
    """The leaderboard family of a learned policy's system: an ablation and an arena policy
    belong to their system ("dl2-without-replay", "harmony-arena" -> "dl2", "harmony")."""
    return system.removesuffix(ARENA_SUFFIX).split("-without-")[0]


def is_oracle(scheduler: str) -> bool:
    """Schedulers that read the simulator's truth: never the best heuristic."""
    return scheduler.endswith("-oracle") or "-oracle+" in scheduler


def summarize_runs(
    runs: pl.DataFrame,
    *,
    reference: str,
    order: Sequence[str],
    confidence: float,
    slot_s: float,
    config: str,
    version: str,
    families: Mapping[str, str] | None = None,
    metric: str = "avg_jct_s",
    scenario: str | None = None,
    teachers: Mapping[str, str] | None = None,
    selection: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """eval_summary rows of any evaluation's `eval_runs` rows: means with intervals, the
    ratio of `metric` (a per-run cost: average JCT, or RL-TAPS' mean slowdown) to
    `reference` and to the set's best non-oracle heuristic, each paired by (workload,
    replicate) with the sequence as the unit. The best heuristic has the lowest mean
    `metric` on the set's `selection` runs (the baselines on held-out validation
    sequences; `best_heuristic_chosen_on` "validation"), else on `runs` themselves.
    `families`: scheduler -> learned system (others: heuristic); `scenario`: the paper
    whose own scenario the sets are (None: workload sets); `teachers`: scheduler -> the
    scheduler it learned from, for the ratio to it (`ratio_to_teacher`, where that one ran
    on the same set)."""
    families = dict(families or {})
    sets = runs["workload_set"].unique().to_list()
    to_reference = _paired_ratios(runs, dict.fromkeys(sets, reference), confidence, metric)
    rank = {name: i for i, name in enumerate(order)}
    rows = []
    for (workload_set, scheduler), group in runs.group_by(
        "workload_set", "scheduler", maintain_order=True
    ):
        row = {
            "eval_id": group["eval_id"][0],
            "workload_set": workload_set,
            "scheduler": scheduler,
            "policy": group["policy"][0],
            "n_runs": group.height,
            "n_sequences": group["workload_id"].n_unique(),
            "n_seeds": group["seed"].n_unique(),
            "n_jobs": int(group["n_jobs"].sum()),
            "confidence": confidence,
        }
        # The test sequence is the unit: its simulator seeds are averaged first (they share
        # its jobs, so they are not independent samples of the workload).
        sequence = group["workload_id"].to_list()
        for column, stem in SUMMARY_METRICS:
            mean, low, high = mean_ci(unit_means(group[column], sequence), confidence)
            row.update({column: mean, f"{stem}_ci_low": low, f"{stem}_ci_high": high})
        row["avg_jct_slots"] = row["avg_jct_s"] / slot_s
        rewards = group["reward"].drop_nulls() if "reward" in group.columns else []
        if len(rewards) == group.height:
            mean, low, high = mean_ci(unit_means(rewards, sequence), confidence)
            row.update(mean_reward=mean, mean_reward_ci_low=low, mean_reward_ci_high=high)
        ratio, low, high = to_reference.get((workload_set, scheduler), (math.nan, None, None))
        row.update(
            reference=reference,
            jct_ratio=ratio,
            jct_ratio_ci_low=low,
            jct_ratio_ci_high=high,
            config=config,
            code_version=version,
            scenario=scenario,
            ratio_metric=metric,
        )
        rows.append(row)
    for row in rows:
        row["family"] = families.get(row["scheduler"], "heuristic")
    _add_best_heuristic(rows, runs, confidence, metric, selection)
    _add_teachers(rows, runs, dict(teachers or {}), confidence, metric)
    rows.sort(key=lambda r: (r["workload_set"], rank[r["scheduler"]]))
    frame = pl.DataFrame(rows, infer_schema_length=None)
    return cast_to_contract(frame, EvalSummary)


def _paired_ratios(
    runs: pl.DataFrame, reference_of: Mapping[str, str], confidence: float, metric: str
) -> dict[tuple[str, str], tuple[float, float | None, float | None]]:
    """Per (workload set, scheduler): mean and interval of its `metric` over the set's
    reference scheduler's on the same (workload, replicate), with the test sequence as the
    unit (`tracelib.stats.paired_ratio`'s `units`); sets without a reference are left out."""
    chosen = pl.DataFrame(
        {"workload_set": list(reference_of), "scheduler": list(reference_of.values())},
        schema={"workload_set": pl.Utf8, "scheduler": pl.Utf8},
    )
    ref = runs.join(chosen, on=["workload_set", "scheduler"]).select(
        "workload_set", "workload_id", "replicate", pl.col(metric).alias("_ref")
    )
    paired = runs.join(ref, on=["workload_set", "workload_id", "replicate"])
    out = {}
    for (workload_set, scheduler), group in paired.group_by("workload_set", "scheduler"):
        # Seeds averaged within each test sequence; the interval is over sequences.
        r = paired_ratio(group[metric], group["_ref"], confidence, units=group["workload_id"])
        out[(workload_set, scheduler)] = (r.ratio, r.low, r.high)
    return out


def _add_best_heuristic(
    rows: list[dict],
    runs: pl.DataFrame,
    confidence: float,
    metric: str,
    selection: pl.DataFrame | None = None,
) -> None:
    """Per workload set: the non-oracle heuristic with the lowest mean `metric` (on the
    set's `selection` runs where it has any, else on `runs`), and every scheduler's paired
    ratio to it on `runs` (None where the set has no such heuristic)."""
    best_of: dict[str, str] = {}
    chosen_on: dict[str, str] = {}
    for workload_set in {r["workload_set"] for r in rows}:
        fair = [
            r["scheduler"]
            for r in rows
            if r["workload_set"] == workload_set
            and r["family"] == "heuristic"
            and not is_oracle(r["scheduler"])
        ]
        if not fair:
            continue
        held_out = _selection_means(selection, workload_set, fair, metric)
        if held_out:
            best_of[workload_set] = min(fair, key=lambda name: held_out.get(name, math.inf))
            chosen_on[workload_set] = selection["split"][0]
        else:
            mean = {r["scheduler"]: r[metric] for r in rows if r["workload_set"] == workload_set}
            best_of[workload_set] = min(fair, key=mean.__getitem__)
            chosen_on[workload_set] = runs["split"][0] if "split" in runs.columns else None
    to_best = _paired_ratios(runs, best_of, confidence, metric)
    for row in rows:
        key = (row["workload_set"], row["scheduler"])
        if key in to_best:
            ratio, low, high = to_best[key]
            row.update(
                best_heuristic=best_of[row["workload_set"]],
                best_heuristic_chosen_on=chosen_on[row["workload_set"]],
                ratio_to_best_heuristic=ratio,
                ratio_ci_low=low,
                ratio_ci_high=high,
            )


def _selection_means(
    selection: pl.DataFrame | None, workload_set: str, names: Sequence[str], metric: str
) -> dict[str, float]:
    """Each of `names`' mean `metric` over its runs of `workload_set` in `selection`
    (seeds averaged within a sequence first, as in the summary)."""
    if selection is None or selection.height == 0:
        return {}
    runs = selection.filter(
        (pl.col("workload_set") == workload_set) & pl.col("scheduler").is_in(list(names))
    )
    return {
        name: float(unit_means(group[metric], group["workload_id"].to_list()).mean())
        for (name,), group in runs.group_by("scheduler", maintain_order=True)
    }


def _add_teachers(
    rows: list[dict], runs: pl.DataFrame, teachers: dict[str, str], confidence: float, metric: str
) -> None:
    """Every scheduler's paired ratio to its teacher (`teachers`), where the teacher ran on
    the same workload set: does the learning add anything over what it learned from?"""
    ran = {(r["workload_set"], r["scheduler"]) for r in rows}
    for teacher in sorted(set(teachers.values())):
        sets = {workload_set: teacher for workload_set, name in ran if name == teacher}
        to_teacher = _paired_ratios(runs, sets, confidence, metric)
        for row in rows:
            key = (row["workload_set"], row["scheduler"])
            if teachers.get(row["scheduler"]) == teacher and key in to_teacher:
                ratio, low, high = to_teacher[key]
                row.update(
                    teacher=teacher,
                    ratio_to_teacher=ratio,
                    teacher_ci_low=low,
                    teacher_ci_high=high,
                )


# -- storage and plots ---------------------------------------------------------------------


VALIDATION_STREAM = 0x7A11D
"""Spawn key of a paper scenario's validation sequences (`SeedSequence(seed,
spawn_key=(VALIDATION_STREAM, ...))`): a stream of its own, so no validation sequence or
simulator seed is a test one."""


def scenario_workloads(
    workload_set: str,
    ids: Sequence[str],
    seeds: Sequence[int],
    sequences: Sequence[tuple],
    split: str = "test",
) -> list[Workload]:
    """A paper scenario's `split` sequences as workloads of `workload_set` (its trace
    version "scenario:<set>"): sequence k is `sequences[k]`, its id `ids[k]` and its one
    replicate simulated with seed `seeds[k]`."""
    return [
        Workload(
            workload_set=workload_set,
            workload_id=workload_id,
            sequence_no=k,
            jobs=jobs,
            seeds=(int(seed),),
            split=split,
            trace_version=f"scenario:{workload_set}",
        )
        for k, (workload_id, seed, jobs) in enumerate(zip(ids, seeds, sequences, strict=True))
    ]


def scenario_tables(
    eval_id: str,
    parts: Iterable[tuple[Mapping[str, RunFn], Sequence[Workload], float]],
    *,
    config: str,
    scenario: str,
    reference: str,
    slot_s: float,
    families: Mapping[str, str],
    progress: ProgressFn = no_progress,
    on_result: Callable[[str, Workload, RunOutcome], None] | None = None,
    selection: Iterable[tuple[Mapping[str, RunFn], Sequence[Workload], float]] = (),
    **summary: Any,
) -> EvalTables:
    """The three tables of a learned system's own-scenario evaluation (`scenario` in
    eval_summary, every run's config `config`): each part's schedulers (name -> run
    function) on its workloads on a cluster of that many GPUs (`run_schedulers`), then one
    summary of all runs against `reference` (95% intervals, the schedulers in the order
    they first appear; `summary` passes the metric or the teachers on to `summarize_runs`).
    `selection`: parts of the same shape, the baselines on held-out validation sequences
    (split "validation"), where each set's best heuristic is chosen (eval_selection_runs).
    `families` and `summary` are read after the last part, so a part may add to them."""
    version = code_version()

    def run_parts(parts, on_result=None) -> tuple[list, list, list]:
        run_frames, job_frames, order = [], [], []
        for schedulers, workloads, total_gpus in parts:
            runs, jobs = run_schedulers(
                schedulers,
                workloads,
                eval_id=eval_id,
                total_gpus=total_gpus,
                run_config=lambda seed: config,
                version=version,
                progress=progress,
                on_result=on_result,
            )
            run_frames.append(runs)
            job_frames.append(jobs)
            order += [name for name in schedulers if name not in order]
        return run_frames, job_frames, order

    run_frames, job_frames, order = run_parts(parts, on_result)
    held_out = run_parts(selection)[0]
    chosen_on = pl.concat(held_out) if held_out else None
    runs = pl.concat(run_frames)
    table = summarize_runs(
        runs,
        reference=reference,
        order=order,
        confidence=0.95,
        slot_s=slot_s,
        config=config,
        version=version,
        families=families,
        scenario=scenario,
        selection=chosen_on,
        **summary,
    )
    return EvalTables(eval_id, runs, pl.concat(job_frames), table, _selection_rows(chosen_on))


def store_evaluation(con: duckdb.DuckDBPyConnection, tables: EvalTables) -> dict[str, int]:
    """Replace the evaluation's rows in eval_runs, eval_jobs, eval_selection_runs and
    eval_summary. Call inside `warehouse.transaction` so the tables change together or not
    at all."""
    where = {"eval_id": tables.eval_id}
    # When it was written (the leaderboard's `latest`); not part of the pure result.
    now = pl.lit(datetime.now(UTC).replace(tzinfo=None), dtype=pl.Datetime("us"))
    summary = tables.summary.with_columns(now.alias("evaluated_at"))
    selection = tables.selection
    if selection is None:
        selection = cast_to_contract(tables.runs.clear(), EvalSelectionRuns)
    return {
        "eval_runs": replace_rows(con, tables.runs, EvalRuns, where),
        "eval_jobs": replace_rows(con, tables.jobs, EvalJobs, where),
        "eval_selection_runs": replace_rows(con, selection, EvalSelectionRuns, where),
        "eval_summary": replace_rows(con, summary, EvalSummary, where),
    }


_LINESTYLES = ("-", "--", "-.", ":")


def plot_name(workload_set: str) -> str:
    """File name of a set's JCT CDF (the set name made safe for a file name)."""
    return f"jct_cdf_{re.sub(r'[^A-Za-z0-9._-]+', '_', workload_set)}.png"


def jct_cdf_figure(jobs: pl.DataFrame, schedulers: Sequence[str], title: str):
    """A matplotlib Figure: the empirical CDF of `jobs["jct_s"]` (hours, log scale), one line
    per scheduler in `schedulers` order (`jobs` has columns scheduler and jct_s)."""
    from matplotlib.figure import Figure  # Agg canvas; no pyplot, no global backend state

    fig = Figure(figsize=(7, 4.5), dpi=110)
    ax = fig.add_subplot()
    for i, scheduler in enumerate(schedulers):
        jct = np.sort(jobs.filter(pl.col("scheduler") == scheduler)["jct_s"].to_numpy())
        if jct.size == 0:
            continue
        ax.step(
            jct / 3600.0,
            np.arange(1, jct.size + 1) / jct.size,
            where="post",
            label=scheduler,
            linestyle=_LINESTYLES[i % len(_LINESTYLES)],  # identical curves stay visible
        )
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    if ax.lines:
        ax.legend(loc="lower right", fontsize="small")
    else:  # no scheduler finished a job: say so rather than draw an empty legend
        ax.text(0.5, 0.5, "no finished jobs", transform=ax.transAxes, ha="center")
    fig.tight_layout()
    return fig


def write_jct_cdf_plots(tables: EvalTables, out_dir: str | Path) -> dict[str, str]:
    """One PNG per workload set: the empirical CDF of JCT over every job of every run
    (sequences x seeds), one line per scheduler. Returns set -> path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sets = tables.runs.select("run_id", "workload_set")
    jobs = tables.jobs.join(sets, on="run_id")
    schedulers = list(dict.fromkeys(tables.runs["scheduler"].to_list()))
    paths = {}
    for workload_set in sorted(set(sets["workload_set"].to_list())):
        of_set = jobs.filter(pl.col("workload_set") == workload_set)
        n_runs = tables.runs.filter(pl.col("workload_set") == workload_set)
        per = n_runs.group_by("scheduler").len()["len"].max()
        title = f"JCT CDF: {workload_set} ({per} runs per scheduler, {tables.eval_id})"
        fig = jct_cdf_figure(of_set, schedulers, title)
        path = out / plot_name(workload_set)
        fig.savefig(path, metadata={"Software": None})
        paths[workload_set] = str(path)
    return paths


def headline(summary: pl.DataFrame) -> list[dict]:
    """Average JCT with its interval and the ratio to the reference, per set and scheduler."""
    return summary.select(
        "workload_set",
        "scheduler",
        "n_runs",
        "confidence",
        "avg_jct_s",
        "avg_jct_ci_low",
        "avg_jct_ci_high",
        "avg_jct_slots",
        "reference",
        "jct_ratio",
        "jct_ratio_ci_low",
        "jct_ratio_ci_high",
    ).to_dicts()
