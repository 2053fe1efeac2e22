"""Pandera contracts of the tables pipelines/ writes (DDL: warehouse/migrations/)."""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from warehouse.contract import TableContract


class PipelineRuns(TableContract):
    run_id: pl.Utf8 = pa.Field(unique=True)
    flow: pl.Utf8
    started_at: pl.Datetime("us")
    finished_at: pl.Datetime("us") = pa.Field(nullable=True)
    status: pl.Utf8 = pa.Field(isin=["running", "completed", "failed", "interrupted"])
    """`interrupted`: its process ended without finishing it (found by a later start)."""
    seed: pl.Int64
    config: pl.Utf8
    code_version: pl.Utf8
    summary: pl.Utf8 = pa.Field(nullable=True)
    host: pl.Utf8 = pa.Field(nullable=True)
    """The machine whose process runs it (NULL: recorded before runs kept it)."""
    pid: pl.Int64 = pa.Field(nullable=True)
    process_started: pl.Utf8 = pa.Field(nullable=True)
    """That process's start time (Linux clock ticks since boot, with the boot id), so a
    reused pid is not taken for the run's process."""

    class Config:
        name = "pipeline_runs"


# --- fidelity (DDL: warehouse/migrations/0015_fidelity.sql; writer: pipelines/stages.py)


class FidelityChecks(TableContract):
    check_key: pl.Utf8
    check_name: pl.Utf8
    source: pl.Utf8
    measured: pl.Float64 = pa.Field(nullable=True)
    low: pl.Float64
    high: pl.Float64
    passed: pl.Boolean
    run_id: pl.Utf8
    code_version: pl.Utf8
    created_at: pl.Datetime("us")

    class Config:
        name = "fidelity_checks"
        unique = ["check_key", "check_name"]


# --- shadow mode (DDL: warehouse/migrations/0027_shadow.sql; writer: pipelines/shadow_ingest.py)


class ShadowDecisions(TableContract):
    """One row per (decision the shadowed policy made, job pending in its snapshot): what
    the policy would have done beside what the real scheduler did (tracelib/shadow/trace.py
    says how "started at that snapshot" is judged)."""

    source_id: pl.Utf8 = pa.Field(str_startswith="shadow:")
    decision_id: pl.Utf8 = pa.Field(str_length={"min_value": 32, "max_value": 32})
    job_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    cluster: pl.Utf8
    snapshot_time: pl.Datetime("us")
    policy: pl.Utf8
    policy_id: pl.Utf8
    latency_ms: pl.Float64 = pa.Field(ge=0)
    requested_gpus: pl.Float64 = pa.Field(gt=0)
    policy_start: pl.Boolean
    """The policy would have started the job with this snapshot."""
    policy_gpus: pl.Float64 = pa.Field(nullable=True, ge=0)
    policy_servers: pl.Utf8 = pa.Field(nullable=True)
    """JSON list of server names, sorted (NULL: the policy would not start it)."""
    real_started: pl.Boolean
    """The real scheduler started it at or after the snapshot, before the next one."""
    real_start_time: pl.Datetime("us") = pa.Field(nullable=True)
    """When the real scheduler started it, whenever that was (NULL: not within the day)."""
    real_gpus: pl.Float64 = pa.Field(nullable=True, ge=0)
    real_servers: pl.Utf8 = pa.Field(nullable=True)
    same_action: pl.Boolean
    """Both started it, or both held it."""
    same_servers: pl.Boolean = pa.Field(nullable=True)
    """Both started it on the same servers (NULL unless both started it)."""

    class Config:
        name = "shadow_decisions"
        unique = ["decision_id", "job_id"]

    @pa.dataframe_check
    def agreement_matches(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """`same_action` is what the two start flags say."""
        return data.lazyframe.select(
            pl.col("same_action") == (pl.col("policy_start") == pl.col("real_started"))
        )
