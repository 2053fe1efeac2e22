"""Prefect flows: thin glue over the stage functions in pipelines/stages.py.

Flows run locally without a server (Prefect starts a temporary API per process). Only
warehouse I/O is retried: a busy warehouse file is worth another try, bad input is not.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from models.evaluation import EvalConfig, eval_config
from models.fidelity import FidelityConfig
from pipelines.config import SYNTHETIC_JOBS, TraceInput, run_config, stage_seed
from pipelines.progress import QUIET, Reporter
from pipelines.registry import SYSTEMS
from pipelines.report import write_report
from pipelines.retries import IO_RETRIES
from pipelines.stages import (
    derive_stage,
    evaluate_stage,
    fidelity_stage,
    finish_run,
    ingest_stage,
    interference_stage,
    learned_policies,
    start_run,
    synthetic_stage,
)
from pipelines.system import ArenaPolicies, Registry, RunContext, arena_policy
from tracelib.ingest import IngestError
from tracelib.interference import InterferenceConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig, set_name


@task(name="ingest-trace", **IO_RETRIES)
def ingest_task(warehouse: str | None, trace: TraceInput, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"ingest {trace.format} trace {Path(trace.path).name}"):
        result = ingest_stage(
            warehouse,
            trace.path,
            trace.format,
            mapping=trace.mapping,
            source_id=trace.source_id,
            progress=progress,
        )
    return asdict(result)


@task(name="shadow-ingest", **IO_RETRIES)
def shadow_ingest_task(
    warehouse: str | None, spool: str | None, progress: Reporter = QUIET
) -> list[dict]:
    from pipelines.shadow_ingest import shadow_ingest_stage

    with progress.stage("shadow spool: closed days"):
        return [asdict(r) for r in shadow_ingest_stage(warehouse, spool)]


@task(name="shadow-replay", **IO_RETRIES)
def shadow_replay_task(warehouse: str | None, day: dict, progress: Reporter = QUIET) -> dict:
    from pipelines.shadow_replay import shadow_replay_stage

    policy = day["policies"][0]
    with progress.stage(f"counterfactual replay of {day['source_id']} under {policy}"):
        return asdict(
            shadow_replay_stage(warehouse, day["source_id"], policy, day["servers"], progress)
        )


@task(name="synthetic-trace", **IO_RETRIES)
def synthetic_task(warehouse: str | None, cfg: DiurnalConfig, progress: Reporter = QUIET) -> dict:
    with progress.stage(f"synthetic trace ({cfg.n_jobs} jobs)"):
        return asdict(synthetic_stage(warehouse, "dl2-diurnal", cfg))


@task(name="derive-workloads", **IO_RETRIES)
def derive_task(
    warehouse: str | None, source_ids: list[str], cfg: DeriveConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"derive workloads {cfg.name}"):
        return asdict(derive_stage(warehouse, source_ids, cfg))


@task(name="interference-samples", **IO_RETRIES)
def interference_task(
    warehouse: str | None, cfg: InterferenceConfig, progress: Reporter = QUIET
) -> dict:
    with progress.stage(f"interference samples ({cfg.n_samples:,})"):
        return asdict(interference_stage(warehouse, cfg, progress))


@task(name="fidelity-checks", **IO_RETRIES)
def fidelity_task(
    warehouse: str | None, cfg: FidelityConfig, run_id: str, progress: Reporter = QUIET
) -> dict:
    with progress.stage("simulator fidelity checks"):
        return asdict(fidelity_stage(warehouse, cfg, run_id))


@task(name="evaluate-schedulers", **IO_RETRIES)
def evaluate_task(
    warehouse: str | None,
    cfg: EvalConfig,
    out_dir: str | None = None,
    progress: Reporter = QUIET,
) -> dict:
    with progress.stage(f"evaluate schedulers on {', '.join(cfg.workload_sets) or 'every set'}"):
        return asdict(evaluate_stage(warehouse, cfg, out_dir, progress))


@task(name="report", **IO_RETRIES)
def report_task(
    warehouse: str | None,
    run_id: str,
    registry: Registry,
    progress: Reporter = QUIET,
) -> str:
    with progress.stage("HTML report"):
        return str(write_report(warehouse, run_id, systems=registry))


@flow(name="schedlab-ingest")
def ingest_flow(
    paths: list[str],
    format: str,
    mapping: str | None = None,
    warehouse: str | None = None,
) -> list[dict]:
    """Ingest trace files of one format."""
    return [ingest_task(warehouse, TraceInput(p, format, mapping)) for p in paths]


@flow(name="schedlab-derive")
def derive_flow(
    source_ids: list[str],
    name: str | None = None,
    seed: int = 0,
    jobs_per_sequence: int = 60,
    warehouse: str | None = None,
) -> dict:
    """Derive train/validation/test workloads from ingested trace sources (the set's name
    defaults to one made from theirs: `tracelib.workloads.set_name`)."""
    cfg = DeriveConfig(
        name=name or set_name(source_ids), seed=seed, jobs_per_sequence=jobs_per_sequence
    )
    return derive_task(warehouse, source_ids, cfg)


@flow(name="schedlab-evaluate")
def evaluate_flow(
    workload_sets: list[str] | None = None,
    schedulers: list[str] | None = None,
    n_seeds: int = 3,
    seed: int = 0,
    max_sequences: int | None = None,
    n_servers: int | None = None,
    window: int | None = 20,
    warehouse: str | None = None,
    out_dir: str | None = None,
) -> dict:
    """Evaluate schedulers on the test workloads of `workload_sets` (default: every set)."""
    cfg = eval_config(workload_sets, schedulers, n_seeds, seed, max_sequences, n_servers, window)
    run_id = start_run(warehouse, "schedlab-evaluate", seed, {"evaluation": cfg.to_dict()})
    try:
        result = evaluate_task(warehouse, cfg, out_dir)
    except BaseException:
        finish_run(warehouse, run_id, "failed", {"run_id": run_id})
        raise
    summary = {"run_id": run_id, **result}
    finish_run(warehouse, run_id, "completed", summary)
    return summary


# One task at a time unless the caller picks a runner (pipelines/runners.py): threads of
# one process would share torch's seeding and matplotlib's text layout, neither thread-safe.
@flow(name="schedlab-nightly", task_runner=ThreadPoolTaskRunner(max_workers=1))
def nightly_flow(
    warehouse: str | None = None,
    seed: int = 0,
    n_jobs: int = SYNTHETIC_JOBS,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
    eval_seeds: int | None = None,
    eval_sequences: int | None = None,
    budget: str = "default",
    arena_training: str | None = None,
    systems: list[str] | None = None,
    options: dict[str, Any] | None = None,
    registry: Registry | None = None,
    progress: Reporter | None = None,
    shadow_spool: str | None = None,
) -> dict:
    """The nightly job: ingest new traces and the closed days of the shadow spool
    (`shadow_spool`, default `shadow-spool/` beside the warehouse; see
    pipelines/shadow_ingest.py), generate the synthetic trace, derive workloads,
    collect interference samples, train every learned system of `registry` (default
    `pipelines.registry.SYSTEMS`: DL2, Harmony, Chic and Chic-Pair, RL-TAPS), each from its
    latest registered policy, evaluate the heuristics and the policies the systems enter on
    each derived set's test workloads and every system in its own paper's scenario, and
    write the HTML report (`reports/` beside the warehouse).

    A trace that cannot be ingested is reported and skipped; the rest of the run proceeds.
    `budget` (smoke, default, large) sizes every system's training and evaluation;
    `options` (keyed like the `schedlab run` flags' dests: `dl2_updates`,
    `harmony_online_update`, ...; see `LearnedSystem.options`) override it, and 0 updates,
    epochs or iterations skip that system; `systems` names the learned systems to train
    (default all). The DL2-setting evaluation (one per derived set with test workloads) runs
    `eval_seeds` seeds on at most `eval_sequences` test sequences per set (None: the
    budget's, 3 seeds and 9 sequences by default, 1 and 1 with smoke; `eval_sequences=0`:
    all; `eval_seeds=0` skips it). Each system trains its arena policy on the synthetic set
    and, with `arena_training="every-set"` (None: the budget's; every budget but smoke), on
    each production set, whose evaluation then runs that set's own policy. `progress` (made
    by the command line) prints a line per stage and draws progress bars; None prints
    nothing.
    """
    logger = get_run_logger()
    progress = progress or QUIET
    registry = SYSTEMS if registry is None else registry
    cfg = run_config(
        registry,
        seed=seed,
        n_jobs=n_jobs,
        jobs_per_sequence=jobs_per_sequence,
        incoming=incoming,
        budget=budget,
        systems=systems,
        options=options,
        eval_seeds=eval_seeds,
        eval_sequences=eval_sequences,
        arena_training=arena_training,
    )
    trained = [s for s in registry if s.name in cfg.learned]
    evaluation = (
        eval_config(
            n_seeds=cfg.eval_seeds,
            seed=stage_seed(cfg.seed, "evaluation"),
            max_sequences=cfg.eval_sequences,
        )
        if cfg.eval_seeds > 0
        else None
    )
    config = {
        **cfg.to_dict(),
        "budget": budget,
        "evaluation": evaluation.to_dict() if evaluation else None,
    }
    run_id = start_run(warehouse, "schedlab-nightly", cfg.seed, config)
    progress.line(
        f"run {run_id} started: budget {budget}, {len(cfg.traces)} production trace(s), "
        f"systems {', '.join(s.key for s in trained)}"
    )
    summary: dict = {
        "run_id": run_id,
        "ingested": [],
        "rejected": [],
        "shadow": [],
        "shadow_replays": [],
        "derived": [],
        "interference": None,
        "fidelity": None,
        **{s.key: None for s in registry},
        "evaluated": [],
        "report": None,
    }
    try:
        production = []
        for trace in cfg.traces:
            try:
                result = ingest_task(warehouse, trace, progress)
            except IngestError as exc:
                logger.error("trace rejected: %s", exc)
                summary["rejected"].append({"path": trace.path, "error": str(exc)})
                continue
            summary["ingested"].append(result)
            production.append(result["source_id"])
        summary["shadow"] = shadow_ingest_task(warehouse, shadow_spool, progress)
        # A day stored this run is a trace like any other; one with no ended job has nothing
        # to derive workloads from (derivation keeps completed, failed and killed jobs).
        fresh_days = [d for d in summary["shadow"] if d["outcome"] in ("new", "replaced")]
        production += [d["source_id"] for d in fresh_days if d["finished_jobs"]]
        synthetic = synthetic_task(warehouse, cfg.synthetic, progress)
        summary["ingested"].append(synthetic)
        summary["derived"].append(
            derive_task(warehouse, [synthetic["source_id"]], cfg.derive, progress)
        )
        for source_id in production:
            named = replace(
                cfg.derive, name=set_name([source_id]), split_fractions=cfg.production_splits
            )
            summary["derived"].append(derive_task(warehouse, [source_id], named, progress))
        # Every task from here on is submitted as a future, in dependency order (futures as
        # arguments), so a parallel task runner overlaps the systems, their variants and the
        # interference sampling, while the sequential one runs them in this order.
        interference = interference_task.submit(warehouse, cfg.interference, progress)
        fidelity = fidelity_task.submit(warehouse, cfg.fidelity, run_id, progress)
        production_sets = tuple(d["derivation"] for d in summary["derived"][1:])
        # A set is trained on when it has training and validation workloads to do it with.
        trainable = tuple(
            d["derivation"]
            for d in summary["derived"][1:]
            if d["splits"].get("train") and d["splits"].get("validation")
        )
        run = RunContext(
            warehouse,
            progress,
            interference,
            production_sets=production_sets,
            synthetic_set=cfg.derive.name,
            arena_sets=(cfg.derive.name, *(trainable if cfg.arena_training == "every-set" else ())),
        )
        pending = {s.name: s.steps().prepare(run, cfg.learned[s.name]) for s in trained}
        # Systems that prepared nothing train first: their tasks are ready to run at once,
        # while the others' wait for what they prepared and would hold the runner's
        # dispatching threads (see DL2's prepare) ahead of them.
        for s in sorted(trained, key=lambda s: bool(pending[s.name])):
            pending[s.name] |= s.steps().train(run, cfg.learned[s.name], pending[s.name])
        # Each system's own evaluation waits for its training only.
        for s in trained:
            pending[s.name] |= s.steps().evaluate(run, cfg.learned[s.name], pending[s.name])
        progress.line(
            f"training submitted: {', '.join(s.key for s in trained) or 'nothing'}; each "
            "stage prints a line as it starts and ends"
        )
        entered: ArenaPolicies = {}
        for s in trained:
            entered |= s.steps().arena(run, pending[s.name])
        loaders = registry.loaders()
        to_evaluate = {}
        for derived in summary["derived"] if evaluation else ():
            name = derived["derivation"]
            if not derived["splits"].get(evaluation.split):
                logger.warning("no %s workloads in %s: not evaluated", evaluation.split, name)
                continue
            # Each set's evaluation runs the policy trained on it, where there is one.
            wanted = {
                scheduler: policy
                for scheduler, by_set in entered.items()
                if (policy := arena_policy(by_set, name, run.synthetic_set)) is not None
            }
            # Every set's policies are looked up before any evaluation is submitted: a
            # submitted task may hold the warehouse open in this process (thread runners).
            to_evaluate[name] = learned_policies(warehouse, wanted, loaders)
        evaluations = [
            evaluate_task.submit(
                warehouse,
                replace(evaluation, workload_sets=(name,), learned=refs),
                progress=progress,
            )
            for name, refs in to_evaluate.items()
        ]
        summary["evaluated"] = [future.result() for future in evaluations]
        summary["interference"] = interference.result()
        summary["fidelity"] = fidelity.result()
        if summary["fidelity"]["failed"]:
            logger.warning("fidelity checks failed: %s", ", ".join(summary["fidelity"]["failed"]))
        for s in trained:
            summary[s.key] = s.steps().collect(run, cfg.learned[s.name], pending[s.name])
        # After training: a learned shadowed policy replays with the newest policy.
        summary["shadow_replays"] = [
            shadow_replay_task(warehouse, day, progress) for day in fresh_days if day["policies"]
        ]
        summary["report"] = report_task(warehouse, run_id, registry, progress)
    except BaseException:
        finish_run(warehouse, run_id, "failed", summary)
        raise
    finish_run(warehouse, run_id, "completed", summary)
    summary["backup"] = nightly_backup(warehouse, progress)
    return summary


def nightly_backup(warehouse: str | None, progress: Reporter) -> str | None:
    """Back the warehouse up after a completed run and keep the newest $SCHEDLAB_BACKUPS
    (default 3; 0: none) in `backups/` beside it; the backup's path (None: none made).
    The backup reads the warehouse whole, so a damaged block stops here, before an older
    good backup is pruned."""
    from warehouse.maintenance import backup, backups_kept, prune_backups

    keep = backups_kept()
    if keep == 0:
        return None
    path = backup(warehouse)
    prune_backups(warehouse, keep)
    progress.line(f"backup: {path} (the newest {keep} are kept)")
    return str(path)
