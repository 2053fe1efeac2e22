"""Prefect flows: thin glue over the stage functions in pipelines/stages.py.

Flows run locally without a server (Prefect starts a temporary API per process). Only
warehouse I/O is retried: a busy warehouse file is worth another try, bad input is not.
"""

from __future__ import annotations

from dataclasses import asdict, replace

from prefect import flow, get_run_logger, task

from pipelines.config import RunConfig, TraceInput, trace_inputs_from_dir
from pipelines.stages import derive_stage, finish_run, ingest_stage, start_run, synthetic_stage
from tracelib.ingest import IngestError
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


@flow(name="schedlab-nightly")
def nightly_flow(
    warehouse: str | None = None,
    seed: int = 0,
    n_jobs: int = 600,
    jobs_per_sequence: int = 60,
    incoming: str | None = None,
) -> dict:
    """The nightly job: ingest new traces, generate the synthetic trace, derive workloads.

    A trace that cannot be ingested is reported and skipped; the rest of the run proceeds.
    """
    logger = get_run_logger()
    base = RunConfig(seed=seed)
    cfg = replace(
        base,
        synthetic=replace(base.synthetic, n_jobs=n_jobs),
        derive=replace(base.derive, jobs_per_sequence=jobs_per_sequence),
        traces=trace_inputs_from_dir(incoming) if incoming else (),
    ).seeded()
    run_id = start_run(warehouse, "schedlab-nightly", cfg.seed, cfg.to_dict())
    summary: dict = {"run_id": run_id, "ingested": [], "rejected": [], "derived": []}
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
    except BaseException:
        finish_run(warehouse, run_id, "failed", summary)
        raise
    finish_run(warehouse, run_id, "completed", summary)
    return summary
