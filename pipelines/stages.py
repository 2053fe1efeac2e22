"""Stage functions: the warehouse I/O around tracelib's pure transforms.

Each stage opens the warehouse, does its writes in one transaction, and closes it, so a
failed stage leaves the warehouse as it was and other processes can read between stages.
Prefect tasks (pipelines/flows.py) are thin wrappers around these.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from models.checkpoints import checkpoint_file
from models.evaluation import (
    ArenaLoader,
    EvalConfig,
    EvalTables,
    LearnedPolicy,
    Loader,
    arena_loader,
    evaluate,
    evaluated_workloads,
    evaluation_id,
    headline,
    plot_name,
    store_evaluation,
    write_jct_cdf_plots,
)
from models.torch_scope import scoped_torch
from pipelines.contracts import FidelityChecks, PipelineRuns
from pipelines.progress import QUIET, Reporter
from tracelib.contracts import Quarantine
from tracelib.ingest import (
    LoadedTrace,
    StoreResult,
    bulk_plan,
    check_source_id,
    find_source_of,
    ingest_trace,
    load_trace,
    read_trace,
    store_trace,
)
from tracelib.interference import InterferenceConfig, interference_frame, store_samples
from tracelib.provenance import canonical_json, code_version, sha256_hex
from tracelib.synthetic import DiurnalConfig, synthetic_source
from tracelib.workloads import DeriveConfig, derive_workloads, store_workloads
from warehouse import (
    connect,
    empty_frame,
    files_dir,
    read_frame,
    replace_rows,
    resolve_path,
    transaction,
)

if TYPE_CHECKING:
    from models.fidelity import FidelityConfig


@dataclass(frozen=True)
class DeriveResult:
    derivation: str
    workloads: int
    jobs: int
    splits: dict[str, int]


def ingest_stage(
    warehouse: str | Path | None,
    path: str | Path,
    fmt: str,
    *,
    mapping: str | Path | None = None,
    source_id: str | None = None,
    progress: Reporter = QUIET,
) -> StoreResult:
    """Parse, quarantine and load one trace file (raises IngestError before writing).

    The file is hashed and matched against the warehouse before it is parsed, so
    re-ingesting an unchanged file (same bytes, mapping and options) costs a read and a
    hash, not a parse. Parsing, checking and loading are one step (`ingest_trace`: a plain
    CSV is read by DuckDB inside the load's transaction).
    """
    check_source_id(source_id, path)
    trace = read_trace(path, fmt, mapping)
    exists = resolve_path(warehouse).exists()
    if exists:
        with connect(warehouse) as con:
            match = find_source_of(con, trace, source_id)
        if match.unchanged:
            return StoreResult(match.source_id, "unchanged", 0, 0, match.note)
    with progress.bar(f"ingest {Path(path).name}: parse, check and load", 1) as advance:
        # A plain CSV is parsed by DuckDB inside the load's transaction; anything else is
        # parsed first. So is every file when there is no warehouse yet: a file refused as
        # a whole must not leave a new, empty warehouse behind.
        plan = bulk_plan(trace) if exists else None
        loaded = None if plan is not None else load_trace(trace, source_id=source_id)
        with connect(warehouse) as con:
            if loaded is None:
                result = ingest_trace(con, trace, source_id=source_id, plan=plan)
            else:
                result = store_trace(con, loaded)
        advance(1, 1)
    return result


def synthetic_stage(warehouse: str | Path | None, kind: str, cfg: DiurnalConfig) -> StoreResult:
    """Generate a synthetic trace and load it as a trace source."""
    jobs, source = synthetic_source(kind, cfg)
    # A synthetic trace has no malformed records: an empty frame shaped by the contract.
    empty = empty_frame(Quarantine)
    with connect(warehouse) as con:
        return store_trace(con, LoadedTrace(source=source, jobs=jobs, quarantine=empty))


def derive_stage(
    warehouse: str | Path | None, source_ids: list[str], cfg: DeriveConfig
) -> DeriveResult:
    """Derive workloads from the jobs of `source_ids` and replace derivation `cfg.name`."""
    with connect(warehouse) as con:
        placeholders = ", ".join("?" for _ in source_ids)
        sources = read_frame(
            con, f"SELECT * FROM trace_sources WHERE source_id IN ({placeholders})", source_ids
        )
        missing = sorted(set(source_ids) - set(sources.get_column("source_id").to_list()))
        if missing:
            raise ValueError(f"unknown trace source(s) {missing}; see `schedlab tables`")
        jobs = read_frame(
            con, f"SELECT * FROM jobs WHERE source_id IN ({placeholders})", source_ids
        )
        workloads, workload_jobs = derive_workloads(jobs, sources, cfg)
        store_workloads(con, workloads, workload_jobs, cfg.name)
    splits = workloads.group_by("split").len().sort("split")
    return DeriveResult(cfg.name, workloads.height, workload_jobs.height, dict(splits.iter_rows()))


@dataclass(frozen=True)
class InterferenceResult:
    source: str
    seed: int
    samples: int
    sample_sets: int
    mean_slowdown: float


def interference_stage(
    warehouse: str | Path | None, cfg: InterferenceConfig, progress: Reporter = QUIET
) -> InterferenceResult:
    """Collect interference samples and replace those of the same (source, seed)."""
    # Collected with the warehouse closed; only the write holds it (one transaction).
    with progress.bar("interference samples", cfg.n_samples) as advance:
        frame = interference_frame(cfg, advance)
    with connect(warehouse) as con:
        store_samples(con, frame)
    return InterferenceResult(
        source=cfg.source,
        seed=cfg.seed,
        samples=frame.height,
        sample_sets=frame["sample_set"].n_unique(),
        mean_slowdown=float(frame["slowdown"].mean()),
    )


@dataclass(frozen=True)
class FidelityResult:
    check_key: str
    checks: int
    failed: list[str]
    """Names of the checks that did not pass (empty: the ground truth is as measured)."""
    cached: bool
    """True when the same checks were already computed (same config, code, measurements)."""


def fidelity_stage(
    warehouse: str | Path | None, cfg: FidelityConfig, run_id: str
) -> FidelityResult:
    """Run the simulator's fidelity checks (models/fidelity.py) and store them in
    `fidelity_checks`, unless the same checks (config, code version, measurement file) were
    already stored."""
    # Imported here: the simulator (and scipy) are not needed by the commands that only
    # read or ingest (`schedlab ingest`, `sql`, `describe`), which import this module.
    from models.fidelity import fidelity_checks
    from tracelib.sim.measured import load_measured_speeds

    measured = load_measured_speeds(cfg.speed.measurements)
    key = sha256_hex(canonical_json([asdict(cfg), code_version(), measured.sha256]).encode())[:20]
    with connect(warehouse) as con:
        stored = read_frame(
            con, "SELECT check_name, passed FROM fidelity_checks WHERE check_key = ?", [key]
        )
    if stored.height:
        failed = stored.filter(~pl.col("passed"))["check_name"].to_list()
        return FidelityResult(key, stored.height, sorted(failed), cached=True)
    rows = fidelity_checks(cfg)  # computed with the warehouse closed
    now = datetime.now(UTC).replace(tzinfo=None)
    frame = pl.DataFrame(
        [
            {
                "check_key": key,
                "check_name": r.check_name,
                "source": r.source,
                "measured": r.measured,
                "low": r.low,
                "high": r.high,
                "passed": r.passed,
                "run_id": run_id,
                "code_version": code_version(),
                "created_at": now,
            }
            for r in rows
        ]
    )
    with connect(warehouse) as con, transaction(con):
        replace_rows(con, frame, FidelityChecks, {"check_key": key})
    failed = [r.check_name for r in rows if not r.passed]
    return FidelityResult(key, len(rows), failed, cached=False)


@dataclass(frozen=True)
class EvaluateResult:
    eval_id: str
    workload_sets: list[str]
    runs: int
    jobs: int
    plots: dict[str, str]
    """Workload set -> path of its JCT CDF plot (PNG)."""
    summary: list[dict]
    """Average JCT with its confidence interval per workload set and scheduler."""
    cached: bool = False
    """True when the same evaluation was already stored and nothing was simulated."""


def evaluation_dir(warehouse: str | Path | None) -> Path:
    """Where evaluations write files: `evaluations/<warehouse stem>/` beside the warehouse
    (./var/evaluations/schedlab/ by default)."""
    return files_dir(warehouse, "evaluations")


def evaluate_stage(
    warehouse: str | Path | None,
    cfg: EvalConfig,
    out_dir: str | Path | None = None,
    progress: Reporter = QUIET,
) -> EvaluateResult:
    """Run the evaluation on the warehouse's workloads, replace its rows in eval_runs,
    eval_jobs and eval_summary (one transaction), and draw its JCT CDFs under
    `out_dir/<eval_id>/` (default: `evaluation_dir`)."""
    with connect(warehouse) as con:
        # The evaluated split's workloads, and those the best heuristic is chosen on.
        splits = [cfg.split] if cfg.choose_on is None else [cfg.split, cfg.choose_on]
        query = f"SELECT * FROM workloads WHERE split IN ({', '.join('?' for _ in splits)})"
        params: list = list(splits)
        if cfg.workload_sets:
            query += f" AND derivation IN ({', '.join('?' for _ in cfg.workload_sets)})"
            params += list(cfg.workload_sets)
        workloads = read_frame(con, query, params)
        evaluated = workloads.filter(pl.col("split") == cfg.split)
        missing = sorted(set(cfg.workload_sets) - set(evaluated["derivation"].to_list()))
        if missing:
            raise ValueError(
                f"no {cfg.split!r} workloads in set(s) {missing}; see `schedlab sql "
                '"SELECT derivation, split, count(*) FROM workloads GROUP BY ALL"`'
            )
        ids = workloads.get_column("workload_id").to_list() or [""]
        jobs = read_frame(
            con,
            f"SELECT * FROM workload_jobs WHERE workload_id IN ({', '.join('?' for _ in ids)})",
            ids,
        )
    eval_id = evaluation_id(cfg, evaluated_workloads(workloads, cfg), jobs)
    tables = _stored_evaluation(warehouse, eval_id, cfg.names)
    cached = tables is not None
    if tables is None:
        # The simulations run with the warehouse closed, so other processes can read meanwhile.
        # One intra-op thread: the learned policies that infer with torch (Harmony's) score
        # one small batch per action, where a second thread only adds synchronization (3x
        # slower on 2 busy cores), and their decisions must not depend on the machine.
        with (
            scoped_torch(threads=1),
            progress.bar(f"evaluation runs {', '.join(cfg.workload_sets)}") as advance,
        ):
            tables = evaluate(jobs, workloads, cfg, progress=advance)
        with connect(warehouse) as con, transaction(con):
            store_evaluation(con, tables)
    folder = (Path(out_dir) if out_dir is not None else evaluation_dir(warehouse)) / eval_id
    sets = sorted(set(tables.runs["workload_set"].to_list()))
    plots = {s: str(folder / plot_name(s)) for s in sets}
    # A stored evaluation's plots drawn before are the same figure (its id hashes what they
    # plot): drawn only when one is missing.
    if not (cached and all(Path(path).exists() for path in plots.values())):
        plots = write_jct_cdf_plots(tables, folder)
    return EvaluateResult(
        eval_id=tables.eval_id,
        workload_sets=sorted(set(tables.runs["workload_set"].to_list())),
        runs=tables.runs.height,
        jobs=tables.jobs.height,
        plots=plots,
        summary=headline(tables.summary),
        cached=cached,
    )


def _stored_evaluation(
    warehouse: str | Path | None, eval_id: str, names: Sequence[str]
) -> EvalTables | None:
    """The stored tables of `eval_id`, or None if it was never completed. The id hashes the
    config (learned policies' ids included) and the workloads' jobs, so a stored evaluation
    is exactly what running it again would produce: re-running an unchanged evaluation
    simulates nothing."""
    with connect(warehouse) as con:
        summary = read_frame(con, "SELECT * FROM eval_summary WHERE eval_id = ?", [eval_id])
        if summary.height == 0:
            return None
        runs = read_frame(con, "SELECT * FROM eval_runs WHERE eval_id = ?", [eval_id])
        jobs = read_frame(
            con, "SELECT * FROM eval_jobs WHERE eval_id = ? ORDER BY run_id, job_index", [eval_id]
        )
    # The order `evaluate` produces (plots list schedulers in it).
    order = pl.col("scheduler").replace_strict(list(names), list(range(len(names))))
    runs = runs.sort("workload_set", "sequence_no", order, "replicate")
    return EvalTables(eval_id, runs, jobs, summary.drop("evaluated_at"))


def learned_policies(
    warehouse: str | Path | None,
    wanted: Mapping[str, str],
    loaders: Mapping[str, Loader | ArenaLoader],
) -> tuple[LearnedPolicy, ...]:
    """Registered policies to evaluate: scheduler name -> policy id, or -> a system name for
    its newest registered policy, each with its system's loader from `loaders`
    (`Registry.loaders()`; an `ArenaLoader` also says whether they are baselines and what
    each learned from). Unknown ids, systems without a policy and policies of a system no
    loader runs are errors."""
    refs = []
    with connect(warehouse) as con:
        for name, key in wanted.items():
            rows = read_frame(
                con,
                "SELECT * FROM policies WHERE policy_id = ? OR system = ? "
                "ORDER BY policy_id = ? DESC, created_at DESC, policy_id LIMIT 1",
                [key, key, key],
            )
            if rows.height == 0:
                raise ValueError(
                    f"no registered policy {key!r} (an id or a system); see `schedlab sql "
                    '"SELECT policy_id, system, created_at FROM policies"`'
                )
            row = rows.row(0, named=True)
            row["metrics"] = json.loads(row["metrics"])
            if row["system"] not in loaders:
                raise ValueError(
                    f"policy {row['policy_id']} (system {row['system']!r}) does not run in "
                    f"the evaluation's setting; these systems' policies do: "
                    f"{', '.join(sorted(loaders)) or 'none'}"
                )
            entry = arena_loader(loaders[row["system"]])
            refs.append(
                LearnedPolicy(
                    name=name,
                    policy_id=row["policy_id"],
                    system=row["system"],
                    checkpoint_path=str(checkpoint_file(con, row["checkpoint_path"])),
                    sha256=row["sha256"],
                    loader=entry.load,
                    teacher=entry.teacher(row) if entry.teacher is not None else None,
                    baseline=entry.baseline,
                )
            )
    return tuple(refs)


def start_run(warehouse: str | Path | None, flow: str, seed: int, config: dict) -> str:
    """Record a run as started, by this process; returns its id. Runs still marked running
    whose process is gone (killed, or the machine restarted) are marked `interrupted` in the
    same transaction (`interrupted_runs`)."""
    run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    row = _run_row(run_id, flow, seed, config, status="running")
    with connect(warehouse) as con, transaction(con):
        running = read_frame(con, "SELECT * FROM pipeline_runs WHERE status = 'running'")
        gone = interrupted_runs(running, socket.gethostname())
        if gone.height:
            found = f"found by run {run_id} at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
            marked = gone.with_columns(
                pl.lit("interrupted").alias("status"),
                pl.format(
                    '{{"interrupted": "its process ({} pid {}) ended without finishing '
                    'the run; {}"}}',
                    pl.col("host").fill_null("unrecorded host"),
                    pl.col("pid").cast(pl.Utf8).fill_null("unrecorded"),
                    pl.lit(found),
                ).alias("summary"),
            )
            for run in marked.partition_by("run_id", maintain_order=True):
                replace_rows(con, run, PipelineRuns, {"run_id": run["run_id"][0]})
        replace_rows(con, row, PipelineRuns, {"run_id": run_id})
    return run_id


def interrupted_runs(running: pl.DataFrame, host: str) -> pl.DataFrame:
    """The rows of `running` (`pipeline_runs` rows marked running) whose process is gone:
    recorded on `host` with a pid that is no longer that process, or recorded before runs
    kept their process (no host: no run of this code can still be running them). A run on
    another machine is left alone: this one cannot see its processes."""
    keep = []
    for item in running.iter_rows(named=True):
        if item["host"] is None:
            keep.append(True)
        elif item["host"] != host:
            keep.append(False)
        else:
            keep.append(_process_started(item["pid"]) != item["process_started"])
    return running.filter(pl.Series(keep, dtype=pl.Boolean))


def _process_started(pid: int | None) -> str | None:
    """When process `pid` started, as "<boot id>:<clock ticks since boot>" (Linux /proc);
    None when there is no such process. Elsewhere: "alive" for any existing process."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # Linux, and no such process
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "alive"
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return f"{boot}:{stat.rpartition(')')[2].split()[19]}"


def finish_run(
    warehouse: str | Path | None, run_id: str, status: str, summary: dict | None = None
) -> None:
    """Mark a run completed or failed, with a JSON summary of what its stages did."""
    with connect(warehouse) as con:
        current = read_frame(con, "SELECT * FROM pipeline_runs WHERE run_id = ?", [run_id])
        row = current.with_columns(
            pl.lit(datetime.now(UTC).replace(tzinfo=None)).alias("finished_at"),
            pl.lit(status).alias("status"),
            pl.lit(canonical_json(summary or {})).alias("summary"),
        )
        with transaction(con):
            replace_rows(con, row, PipelineRuns, {"run_id": run_id})


def _run_row(run_id: str, flow: str, seed: int, config: dict, status: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "run_id": [run_id],
            "flow": [flow],
            "started_at": [datetime.now(UTC).replace(tzinfo=None)],
            "finished_at": pl.Series([None], dtype=pl.Datetime("us")),
            "status": [status],
            "seed": [seed],
            "config": [canonical_json(config)],
            "code_version": [code_version()],
            "summary": pl.Series([None], dtype=pl.Utf8),
            "host": [socket.gethostname()],
            "pid": [os.getpid()],
            "process_started": [_process_started(os.getpid())],
        }
    )
