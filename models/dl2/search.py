"""DL2's searched teacher: each model's workers and PSs, searched on the training sequences'
average JCT, then imitated by the warm-up (a deviation from the paper, whose warm-up imitates
DRF; docs/dl2.md, "The searched teacher").

Why: on `dl2-synthetic` the cluster never runs out of room, so an allocator's only decision
is each job's own configuration, and Optimus gives every job of a model the configuration
its catalogue prior's optimum says (it never observes enough configurations of a job to
refit). The measured surface's optimum lies elsewhere, far from Optimus' in DL2's one-task-at-
a-time action sequence (wlm: 4 + 16 where 1 + 5 is faster), so neither imitation nor
fine-tuning's sampled steps find it (`python -m benchmarks dl2_headroom`). A search over
whole configurations does: first a screening (every model at one point of a grid of (workers,
PSs) per run; each model's own jobs rank the points for it), then, one model at a time with
the others at their current best (coordinate descent from Optimus' configurations), its best
screened points and a hill climb by one task at a time, every candidate judged by the
simulated average JCT of the training sequences (what the RL reward measures; the search
never reads the speed surface, only what the simulated cluster shows of whole runs). The
result is an allocation policy (`ConfigTable`) that the recorder records like any heuristic.

    found = search_configurations(train, SearchConfig(), sim, seed=0, interval_s=None,
                                  trigger="events")
    teacher = found.policy()
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

import polars as pl
import torch

from models.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from models.dl2.policy import average_jct, run_workloads, workload_seeds
from models.heuristics.optimus import Optimus
from models.heuristics.registry import PLACEMENTS
from tracelib.catalogue import DL2_CATALOGUE, by_name
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import code_version
from tracelib.sim.builder import AllocationBuilder
from tracelib.sim.config import SimConfig
from tracelib.sim.engine import Simulator
from tracelib.sim.jobs import JobSpec
from tracelib.sim.policy import Scheduler, WatchedAllocation
from tracelib.sim.snapshot import Allocation, JobView, Snapshot

TEACHER = "searched"
"""`DL2StageConfig.teacher` / `RecorderConfig.teacher` naming the searched teacher."""

TABLE_SYSTEM = "dl2-table"
"""`policies.system` of a searched table registered as a baseline of the evaluation."""


@dataclass(frozen=True)
class ConfigTable:
    """Allocation policy giving every job of a model that model's (workers, PSs).

    Built in the order the DL2 recorder replays ("rows"): one worker+PS pair per job by
    arrival, then job by job its other pairs, its other workers, its other PSs, each until
    the job's target or the first addition that does not fit (a job whose pair did not fit
    gets nothing more, so the replay's pair count is the job's). A model without an entry
    gets its job's requested workers and PSs (at least one of each)."""

    table: Mapping[str, tuple[int, int]]
    name: str = TEACHER
    interval_s: float | None = None
    trigger: str | None = "events"
    uses_oracle: bool = False

    def target(self, job: JobView) -> tuple[int, int]:
        """(workers, PSs) the job should have."""
        found = self.table.get(job.model)
        if found is not None:
            return found
        return max(job.requested_workers, 1), max(job.requested_ps, 1)

    def allocate(self, snap: Snapshot) -> Allocation:
        builder = AllocationBuilder(snap)
        for i in range(len(builder.jobs)):
            builder.add(i, 1, 1)
        for i, job in enumerate(builder.jobs):
            if builder.workers[i] == 0:
                continue
            workers, ps = self.target(job)
            if not _fill(builder, i, min(workers, ps), 1, 1):
                continue
            _fill(builder, i, workers, 1, 0)
            _fill(builder, i, ps, 0, 1)
        return builder.allocation()

    def checkpoint_config(self) -> dict[str, Any]:
        """What the table is, as registered (`policies.config`): its decision timing and,
        per model, (workers, PSs)."""
        return {
            "interval_s": self.interval_s,
            "trigger": self.trigger,
            "table": {model: list(self.table[model]) for model in sorted(self.table)},
        }

    def save(self, path) -> str:
        """Write the table as a checkpoint (plain values, loadable weights-only); returns
        its sha256. The same table always gives the same bytes."""
        models = sorted(self.table)
        state = {"table": {m: torch.tensor(self.table[m], dtype=torch.int64) for m in models}}
        return save_checkpoint(
            path, system=TABLE_SYSTEM, config=self.checkpoint_config(), state=state
        )


def load_table(path, *, sha256: str | None = None, name: str = TEACHER) -> ConfigTable:
    """A searched table saved by `ConfigTable.save`, refused (CheckpointError) if its bytes
    do not hash to `sha256` or its weights disagree with its registered config."""
    ckpt = load_checkpoint(path, sha256=sha256, system=TABLE_SYSTEM)
    state = {m: tuple(int(v) for v in t.tolist()) for m, t in ckpt.state["table"].items()}
    stated = {m: tuple(v) for m, v in ckpt.config["table"].items()}
    if state != stated:
        raise CheckpointError(f"checkpoint {path}: its table differs from its config")
    return ConfigTable(
        MappingProxyType(state),
        name=name,
        interval_s=ckpt.config["interval_s"],
        trigger=ckpt.config["trigger"],
    )


def _fill(builder: AllocationBuilder, i: int, upto: int, workers: int, ps: int) -> bool:
    """Add (workers, ps) to job i while its count of that kind is below `upto`; False when
    an addition did not fit (the job's cap or the cluster)."""
    while (builder.workers[i] if workers else builder.ps[i]) < upto:
        if not builder.add(i, workers, ps):
            return False
    return True


@dataclass(frozen=True)
class SearchConfig:
    """The search over each model's (workers, PSs)."""

    workers: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 12, 16)
    """Workers of the screening grid (each capped by the model's most workers)."""
    ps: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16)
    """PSs of the screening grid."""
    keep: int = 6
    """Screening: every grid point is run with every model at it, and each model's jobs'
    JCTs rank the points for that model; the `keep` best of each model are then tried one
    model at a time, the others at their current best (the screening ignores how one
    model's configuration slows another's jobs; the confirmation does not)."""
    climb: int = 4
    """After the confirmation, at most this many moves to the best of the eight neighbours
    (one worker and/or one PS more or fewer) while one improves."""
    sweeps: int = 1
    """Passes of confirmation and climb over the models."""
    placement: str = "load-balancing"
    """Placement policy of the searched runs (the recorder's)."""


@dataclass(frozen=True)
class ModelSearch:
    """What the search found for one model."""

    model: str
    jobs: int
    """Training jobs of the model."""
    start: tuple[int, int]
    """Optimus' most frequent configuration for the model's jobs on the training sequences."""
    found: tuple[int, int]
    start_avg_jct_s: float
    """Training average JCT before this model's search (the others at their best so far)."""
    found_avg_jct_s: float
    evaluations: int
    """Candidates judged for this model, each by the training sequences' average JCT (one
    judged before, e.g. met again by the climb, is read from the search's cache)."""


@dataclass(frozen=True)
class SearchResult:
    """A search's outcome: per model what it found, and the table of every model."""

    models: tuple[ModelSearch, ...]
    interval_s: float | None
    trigger: str | None
    table: Mapping[str, tuple[int, int]] = field(default_factory=lambda: MappingProxyType({}))

    def policy(self) -> ConfigTable:
        """The searched teacher, deciding as the student will."""
        return ConfigTable(self.table, interval_s=self.interval_s, trigger=self.trigger)


def optimus_configurations(
    workloads: Sequence[Sequence[JobSpec]],
    sim: SimConfig,
    *,
    seed: int,
    interval_s: float | None,
    trigger: str | None,
    placement: str = "load-balancing",
) -> dict[str, tuple[int, int]]:
    """Per model, the (workers, PSs) Optimus gives its jobs most often on `workloads`
    (deciding as the student will, workload k with simulator seed `workload_seeds(seed,
    n)[k]` as recorded; ties: the smaller configuration)."""
    seen: dict[str, Counter] = {}
    seeds = workload_seeds(seed, len(workloads))
    for jobs, sim_seed in zip(workloads, seeds, strict=True):
        # a fresh Optimus per sequence: it keeps each job's observations
        optimus = Optimus(name="optimus", interval_s=interval_s, trigger=trigger or "interval")
        watched = Scheduler(WatchedAllocation(optimus, seen), PLACEMENTS.create(placement))
        Simulator(jobs, watched, replace(sim, seed=sim_seed)).run()
    return {m: max(c.items(), key=lambda kv: (kv[1], -sum(kv[0])))[0] for m, c in seen.items()}


def search_configurations(
    workloads: Sequence[Sequence[JobSpec]],
    cfg: SearchConfig,
    sim: SimConfig,
    *,
    seed: int,
    interval_s: float | None,
    trigger: str | None,
    progress: ProgressFn = no_progress,
) -> SearchResult:
    """Each model's (workers, PSs) searched on the average JCT of `workloads` (the
    recorder's simulator seeds from `seed`): screening on the grid, then confirmation and a
    hill climb one model at a time; `progress(steps done, steps)` after the screening and
    after each model.

    Deterministic: the models in name order, candidates in rank order, ties kept by the
    earlier candidate. A candidate is adopted only when it lowers the training JCT, so the
    result is never worse there than Optimus' configurations it starts from."""
    if not workloads:
        raise ValueError("the search needs at least one training sequence")
    types = by_name(DL2_CATALOGUE)
    counts = Counter(job.model for jobs in workloads for job in jobs)
    models = sorted(counts)
    caps = {m: types[m].max_workers for m in models}
    steps = 1 + cfg.sweeps * len(models)
    start = optimus_configurations(
        workloads, sim, seed=seed, interval_s=interval_s, trigger=trigger, placement=cfg.placement
    )
    current = {m: start.get(m, (1, 1)) for m in models}
    scores: dict[tuple, float] = {}

    def policy(table: Mapping[str, tuple[int, int]]) -> ConfigTable:
        return ConfigTable(MappingProxyType(dict(table)), interval_s=interval_s, trigger=trigger)

    def score(table: dict[str, tuple[int, int]]) -> float:
        key = tuple(sorted(table.items()))
        if key not in scores:
            scores[key] = average_jct(
                policy(table), workloads, sim, seed=seed, placement=cfg.placement
            )
        return scores[key]

    # -- screening: every model at one grid point per run; per model, its jobs' mean JCT
    grid = [(w, p) for w in sorted(set(cfg.workers)) for p in sorted(set(cfg.ps))]
    screened: dict[str, list[tuple[float, tuple[int, int]]]] = defaultdict(list)
    for w, p in grid:
        table = {m: (min(w, caps[m]), min(p, caps[m])) for m in models}
        results = run_workloads(policy(table), workloads, sim, seed=seed, placement=cfg.placement)
        jct = pl.concat([r.jobs.select("model", "jct_s") for r in results])
        for model, mean in jct.group_by("model").agg(pl.col("jct_s").mean()).iter_rows():
            if table[model] not in [c for _, c in screened[model]]:
                screened[model].append((float(mean), table[model]))
    progress(1, steps)

    found: dict[str, ModelSearch] = {}
    for sweep in range(cfg.sweeps):
        for done, model in enumerate(models, 1):
            before = score(current)
            best, best_jct, tried = _improve(
                score,
                current,
                model,
                caps[model],
                [c for _, c in sorted(screened[model])[: cfg.keep]],
                cfg.climb,
            )
            current[model] = best
            first = found.get(model)
            found[model] = ModelSearch(
                model=model,
                jobs=counts[model],
                start=start.get(model, (1, 1)),
                found=best,
                start_avg_jct_s=first.start_avg_jct_s if first else before,
                found_avg_jct_s=best_jct,
                evaluations=tried + (first.evaluations if first else 0),
            )
            progress(1 + sweep * len(models) + done, steps)
    return SearchResult(
        models=tuple(found[m] for m in models),
        interval_s=interval_s,
        trigger=trigger,
        table=MappingProxyType(dict(current)),
    )


def _improve(
    score, current: dict[str, tuple[int, int]], model: str, cap: int, candidates, climb: int
) -> tuple[tuple[int, int], float, int]:
    """`model`'s best configuration among `candidates`, then climbing by one task at a time
    (at most `climb` moves), the other models at `current`: (best, its JCT,
    candidates judged)."""
    best, best_jct, tried = current[model], score(current), 0
    for round_ in range(climb + 1):
        centre = best
        if round_ > 0:
            candidates = [(best[0] + dw, best[1] + dp) for dw in (-1, 0, 1) for dp in (-1, 0, 1)]
        for candidate in candidates:
            w, p = candidate
            if not (1 <= w <= cap and 1 <= p <= cap) or candidate == best:
                continue
            tried += 1
            jct = score({**current, model: candidate})
            if jct < best_jct:
                best, best_jct = candidate, jct
        if round_ > 0 and best == centre:
            break
    return best, best_jct, tried


def result_frame(result: SearchResult, run_id: str) -> pl.DataFrame:
    """`dl2_teacher_configs` rows of one search (the recording `run_id`)."""
    return pl.DataFrame(
        [
            {
                "run_id": run_id,
                "model": m.model,
                "jobs": m.jobs,
                "start_workers": m.start[0],
                "start_ps": m.start[1],
                "workers": m.found[0],
                "ps": m.found[1],
                "start_avg_jct_s": m.start_avg_jct_s,
                "found_avg_jct_s": m.found_avg_jct_s,
                "evaluations": m.evaluations,
                "code_version": code_version(),
            }
            for m in result.models
        ],
        schema={
            "run_id": pl.Utf8,
            "model": pl.Utf8,
            "jobs": pl.Int32,
            "start_workers": pl.Int32,
            "start_ps": pl.Int32,
            "workers": pl.Int32,
            "ps": pl.Int32,
            "start_avg_jct_s": pl.Float64,
            "found_avg_jct_s": pl.Float64,
            "evaluations": pl.Int32,
            "code_version": pl.Utf8,
        },
    )


def table_of(rows: Sequence[Mapping]) -> MappingProxyType:
    """model -> (workers, PSs) from `dl2_teacher_configs`-like rows."""
    return MappingProxyType({str(r["model"]): (int(r["workers"]), int(r["ps"])) for r in rows})


__all__ = [
    "TABLE_SYSTEM",
    "TEACHER",
    "ConfigTable",
    "ModelSearch",
    "SearchConfig",
    "SearchResult",
    "load_table",
    "optimus_configurations",
    "result_frame",
    "search_configurations",
    "table_of",
]
