"""Prefect flows: thin glue over the stage functions in pipelines/stages.py.

Flows run locally without a server (Prefect starts a temporary API per process). Only
warehouse I/O is retried: a busy warehouse file is worth another try, bad input is not.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from prefect import flow, get_run_logger, task
from prefect.task_runners import ThreadPoolTaskRunner

from pipelines.config import RunConfig, TraceInput, trace_inputs_from_dir
from pipelines.evaluation import EvalConfig, eval_config
from pipelines.report import write_report
from pipelines.stages import (
    derive_stage,
    evaluate_stage,
    finish_run,
    ingest_stage,
    interference_stage,
    learned_policies,
    start_run,
    synthetic_stage,
)
from pipelines.stages_dl2 import DL2StageConfig, finetune_stage, record_stage, warmup_stage
from tracelib.ingest import IngestError
from tracelib.interference import InterferenceConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import WarehouseBusy


def _retry_on_io(task, task_run, state) -> bool:
    try:
        state.result()
    except (WarehouseBusy, OSError):
        return True
    except Exception:
        return False
    return False


_io_retries = {"retries": 3, "retry_delay_seconds": 5, "retry_condition_fn": _retry_on_io}


@task(name="ingest-trace", **_io_retries)
def ingest_task(warehouse: str | None, trace: TraceInput) -> dict:
    result = ingest_stage(
        warehouse, trace.path, trace.format, mapping=trace.mapping, source_id=trace.source_id
    )
    return asdict(result)


@task(name="synthetic-trace", **_io_retries)
def synthetic_task(warehouse: str | None, cfg: DiurnalConfig) -> dict:
    return asdict(synthetic_stage(warehouse, "dl2-diurnal", cfg))


@task(name="derive-workloads", **_io_retries)
def derive_task(warehouse: str | None, source_ids: list[str], cfg: DeriveConfig) -> dict:
    return asdict(derive_stage(warehouse, source_ids, cfg))


@task(name="interference-samples", **_io_retries)
def interference_task(warehouse: str | None, cfg: InterferenceConfig) -> dict:
    return asdict(interference_stage(warehouse, cfg))


@task(name="evaluate-schedulers", **_io_retries)
def evaluate_task(warehouse: str | None, cfg: EvalConfig, out_dir: str | None = None) -> dict:
    return asdict(evaluate_stage(warehouse, cfg, out_dir))


@task(name="dl2-record-decisions", **_io_retries)
def dl2_record_task(warehouse: str | None, cfg: DL2StageConfig) -> dict:
    return asdict(record_stage(warehouse, cfg))


@task(name="dl2-warmup", **_io_retries)
def dl2_warmup_task(warehouse: str | None, cfg: DL2StageConfig, record_run_id: str) -> dict:
    return asdict(warmup_stage(warehouse, cfg, record_run_id))


@task(name="dl2-finetune", **_io_retries)
def dl2_finetune_task(
    warehouse: str | None, cfg: DL2StageConfig, warmup_policy_id: str, variant: str = "dl2"
) -> dict:
    return asdict(finetune_stage(warehouse, cfg, warmup_policy_id, variant))


@task(name="report", **_io_retries)
def report_task(warehouse: str | None, run_id: str) -> str:
    return str(write_report(warehouse, run_id))


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
    name: str = "default",
    seed: int = 0,
    jobs_per_sequence: int = 60,
    warehouse: str | None = None,
) -> dict:
    """Derive train/validation/test workloads from ingested trace sources."""
    cfg = DeriveConfig(name=name, seed=seed, jobs_per_sequence=jobs_per_sequence)
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
    n_jobs: int = 600,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
    eval_seeds: int = 3,
    eval_sequences: int | None = 4,
    dl2_updates: int = 3000,
    dl2_warmup_epochs: int = 40,
    dl2_teacher: str = "drf",
    dl2_baselines: bool = True,
) -> dict:
    """The nightly job: ingest new traces, generate the synthetic trace, derive workloads,
    collect interference samples, train DL2 (decision logs, warm-up, fine-tuning from the
    latest registered policy), evaluate the heuristics and the learned policies on each
    derived set's test workloads, and write the HTML report (`reports/` beside the
    warehouse).

    A trace that cannot be ingested is reported and skipped; the rest of the run proceeds.
    DL2 trains `dl2_updates` RL updates after at most `dl2_warmup_epochs` supervised epochs
    on `dl2_teacher`'s decisions (`dl2_updates=0` skips DL2); with `dl2_baselines`, the
    OfflineRL baseline and the three Table 2 ablations get the same budget. The evaluation (one per
    derived set with test workloads) runs `eval_seeds` seeds on at most `eval_sequences`
    test sequences per set (None: all); `eval_seeds=0` skips it.
    """
    logger = get_run_logger()
    base = RunConfig(seed=seed)
    dl2 = (
        replace(
            DL2StageConfig(),
            updates=dl2_updates,
            warmup_epochs=dl2_warmup_epochs,
            teacher=dl2_teacher,
            variants=DL2StageConfig().variants if dl2_baselines else (),
        )
        if dl2_updates > 0
        else None
    )
    cfg = replace(
        base,
        synthetic=replace(base.synthetic, n_jobs=n_jobs),
        derive=replace(base.derive, jobs_per_sequence=jobs_per_sequence),
        traces=trace_inputs_from_dir(incoming) if incoming else (),
        dl2=dl2,
    ).seeded()
    evaluation = (
        eval_config(n_seeds=eval_seeds, seed=cfg.seed, max_sequences=eval_sequences)
        if eval_seeds > 0
        else None
    )
    config = {**cfg.to_dict(), "evaluation": evaluation.to_dict() if evaluation else None}
    run_id = start_run(warehouse, "schedlab-nightly", cfg.seed, config)
    summary: dict = {
        "run_id": run_id,
        "ingested": [],
        "rejected": [],
        "derived": [],
        "interference": None,
        "dl2": None,
        "evaluated": [],
        "report": None,
    }
    try:
        production = []
        for trace in cfg.traces:
            try:
                result = ingest_task(warehouse, trace)
            except IngestError as exc:
                logger.error("trace rejected: %s", exc)
                summary["rejected"].append({"path": trace.path, "error": str(exc)})
                continue
            summary["ingested"].append(result)
            production.append(result["source_id"])
        synthetic = synthetic_task(warehouse, cfg.synthetic)
        summary["ingested"].append(synthetic)
        summary["derived"].append(derive_task(warehouse, [synthetic["source_id"]], cfg.derive))
        for source_id in production:
            named = replace(cfg.derive, name=source_id.replace(":", "-"))
            summary["derived"].append(derive_task(warehouse, [source_id], named))
        summary["interference"] = interference_task(warehouse, cfg.interference)
        learned = {}
        if cfg.dl2 is not None:
            # Fine-tuning also learns from every production trace's workloads: a new trace
            # changes its inputs, so each variant retrains from its latest policy.
            sets = tuple(d["derivation"] for d in summary["derived"][1:])
            dl2 = replace(cfg.dl2, finetune_sets=sets)
            recorded = dl2_record_task(warehouse, dl2)
            warm = dl2_warmup_task(warehouse, dl2, recorded["run_id"])
            # DL2 and its baselines train independently: the task runner fans them out.
            futures = {
                name: dl2_finetune_task.submit(warehouse, dl2, warm["policy_id"], name)
                for name in ("dl2", *dl2.variants)
            }
            trained = {name: future.result() for name, future in futures.items()}
            tuned = trained.pop("dl2")
            variants = trained
            summary["dl2"] = {
                "record": recorded,
                "warmup": warm,
                "finetune": tuned,
                "variants": variants,
            }
            learned = {"dl2-warmup": warm["policy_id"], "dl2": tuned["policy_id"]}
            learned |= {name: result["policy_id"] for name, result in variants.items()}
        refs = learned_policies(warehouse, learned)
        evaluations = []
        for derived in summary["derived"] if evaluation else ():
            if not derived["splits"].get(evaluation.split):
                logger.warning(
                    "no %s workloads in %s: not evaluated", evaluation.split, derived["derivation"]
                )
                continue
            one_set = replace(evaluation, workload_sets=(derived["derivation"],), learned=refs)
            evaluations.append(evaluate_task.submit(warehouse, one_set))
        summary["evaluated"] = [future.result() for future in evaluations]
        summary["report"] = report_task(warehouse, run_id)
    except BaseException:
        finish_run(warehouse, run_id, "failed", summary)
        raise
    finish_run(warehouse, run_id, "completed", summary)
    return summary
