"""Pandera contracts of the tables tracelib writes (DDL: warehouse/migrations/0001_foundation.sql).

A contract and its DDL must agree column for column (type and nullability); the test suite
checks that. Contracts also hold the checks the DDL cannot express cheaply.
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from warehouse.contract import TableContract

STATUSES = ["completed", "failed", "killed", "running", "pending", "unknown"]
FORMATS = ["philly", "pai", "helios", "generic", "synthetic", "shadow"]
"""Trace formats; "shadow" is a closed day of the shadow spool (tracelib/shadow/trace.py)."""
SPLITS = ["train", "validation", "test"]


class TraceSources(TableContract):
    source_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    format: pl.Utf8 = pa.Field(isin=FORMATS)
    path: pl.Utf8
    content_hash: pl.Utf8 = pa.Field(str_length={"min_value": 64, "max_value": 64})
    ingested_at: pl.Datetime("us")
    rows_accepted: pl.Int64 = pa.Field(ge=0)
    rows_quarantined: pl.Int64 = pa.Field(ge=0)
    params: pl.Utf8
    code_version: pl.Utf8

    class Config:
        name = "trace_sources"
        unique = ["source_id"]


class Jobs(TableContract):
    source_id: pl.Utf8
    job_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    submit_time: pl.Datetime("us")
    start_time: pl.Datetime("us") = pa.Field(nullable=True)
    end_time: pl.Datetime("us") = pa.Field(nullable=True)
    duration_s: pl.Float64 = pa.Field(nullable=True, ge=0)
    num_gpus: pl.Float64 = pa.Field(ge=0)
    num_cpus: pl.Float64 = pa.Field(nullable=True, ge=0)
    mem_gb: pl.Float64 = pa.Field(nullable=True, ge=0)
    num_workers: pl.Int32 = pa.Field(nullable=True, ge=0)
    num_ps: pl.Int32 = pa.Field(nullable=True, ge=0)
    epochs: pl.Float64 = pa.Field(nullable=True, gt=0)
    status: pl.Utf8 = pa.Field(isin=STATUSES)
    user_name: pl.Utf8 = pa.Field(nullable=True)
    vc: pl.Utf8 = pa.Field(nullable=True)
    model: pl.Utf8 = pa.Field(nullable=True)
    gpu_type: pl.Utf8 = pa.Field(nullable=True)
    """GPU type the job needs, as the trace names it ("V100"; "V100M16|V100M32": any of
    them); null when the trace names none (migration 0017)."""

    __table_key__ = ("source_id", "job_id")
    """The table's key, held by the code rather than an index (migration 0021): unique in
    each frame (`one_row_per_job`) and against the stored rows (`warehouse.io`)."""

    __sql_checks__ = {
        "one_row_per_job": "key is unique",  # warehouse.bulk.KEY_UNIQUE
        "start_after_submit": "start_time IS NULL OR start_time >= submit_time",
        "end_after_start": "end_time IS NULL OR start_time IS NULL OR end_time >= start_time",
    }
    """The dataframe checks in SQL, for rows checked where they are stored
    (`warehouse.bulk.check_stored`, the fast ingest of a plain CSV)."""

    class Config:
        name = "jobs"

    @pa.dataframe_check
    def one_row_per_job(cls, data: pa.PolarsData) -> pl.LazyFrame | bool:
        """(source_id, job_id) is unique: the table has no key since migration 0021 (its
        index was a third of a million-row ingest), so this check is the guarantee, with
        `warehouse.replace_rows` replacing a source's jobs as a whole. Hashes first: when
        all differ the keys do (0.04 s for a million rows); otherwise the exact check names
        each repeat (every occurrence after the first)."""
        key = pl.struct("source_id", "job_id")
        counts = data.lazyframe.select(pl.len(), key.hash().n_unique()).collect().row(0)
        if counts[0] == counts[1]:
            return True
        return data.lazyframe.select(key.is_first_distinct())

    @pa.dataframe_check
    def start_after_submit(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            pl.col("start_time").is_null() | (pl.col("start_time") >= pl.col("submit_time"))
        )

    @pa.dataframe_check
    def end_after_start(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            pl.col("end_time").is_null()
            | pl.col("start_time").is_null()
            | (pl.col("end_time") >= pl.col("start_time"))
        )


class Quarantine(TableContract):
    source_id: pl.Utf8
    record_no: pl.Int64 = pa.Field(ge=1)
    field: pl.Utf8
    reason: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    raw_record: pl.Utf8

    class Config:
        name = "quarantine"
        unique = ["source_id", "record_no"]


class JobTypes(TableContract):
    catalogue: pl.Utf8 = pa.Field(isin=["dl2", "rl-taps"])
    model: pl.Utf8
    type_index: pl.Int32 = pa.Field(ge=0)
    domain: pl.Utf8
    global_batch: pl.Int32 = pa.Field(gt=0)
    iters_per_epoch: pl.Int32 = pa.Field(gt=0)
    local_comp_s: pl.Float64 = pa.Field(gt=0)
    model_size_mb: pl.Float64 = pa.Field(gt=0)
    worker_gpu: pl.Float64 = pa.Field(ge=0)
    worker_cpu: pl.Float64 = pa.Field(ge=0)
    worker_mem_gb: pl.Float64 = pa.Field(ge=0)
    ps_cpu: pl.Float64 = pa.Field(ge=0)
    ps_mem_gb: pl.Float64 = pa.Field(ge=0)
    speed_a: pl.Float64 = pa.Field(ge=0)
    speed_b: pl.Float64 = pa.Field(ge=0)
    speed_c: pl.Float64 = pa.Field(ge=0)
    speed_d: pl.Float64 = pa.Field(ge=0)
    speed_e: pl.Float64 = pa.Field(ge=0)
    max_workers: pl.Int32 = pa.Field(ge=1)

    class Config:
        name = "job_types"
        unique = ["catalogue", "model"]


class Workloads(TableContract):
    workload_id: pl.Utf8 = pa.Field(unique=True)
    derivation: pl.Utf8
    split: pl.Utf8 = pa.Field(isin=SPLITS)
    sequence_no: pl.Int32 = pa.Field(ge=0)
    source_ids: pl.Utf8
    source_hashes: pl.Utf8
    n_jobs: pl.Int32 = pa.Field(ge=1)
    span_s: pl.Float64 = pa.Field(ge=0)
    seed: pl.Int64
    params: pl.Utf8
    code_version: pl.Utf8
    derived_at: pl.Datetime("us")

    class Config:
        name = "workloads"
        unique = ["derivation", "split", "sequence_no"]


class WorkloadJobs(TableContract):
    workload_id: pl.Utf8
    job_index: pl.Int32 = pa.Field(ge=0)
    source_id: pl.Utf8
    job_id: pl.Utf8
    model: pl.Utf8
    epochs: pl.Float64 = pa.Field(gt=0)
    num_workers: pl.Int32 = pa.Field(ge=1)
    num_ps: pl.Int32 = pa.Field(ge=0)
    num_gpus: pl.Float64 = pa.Field(ge=0)
    arrival_s: pl.Float64 = pa.Field(ge=0)
    arrival_slot: pl.Int32 = pa.Field(ge=0)
    duration_s: pl.Float64 = pa.Field(gt=0)
    gpu_type: pl.Utf8 = pa.Field(nullable=True)
    """The job's GPU type from the trace; the replay places it on servers of that type."""

    class Config:
        name = "workload_jobs"
        unique = ["workload_id", "job_index"]


class InterferenceSamples(TableContract):
    """Co-location speed samples (tracelib.interference; DDL 0002_interference.sql)."""

    source: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    seed: pl.Int64
    sample_set: pl.Int32 = pa.Field(ge=0)
    job_in_set: pl.Int32 = pa.Field(ge=0)
    model: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    type_index: pl.Int32 = pa.Field(ge=0)
    workers: pl.Int32 = pa.Field(ge=1)
    ps: pl.Int32 = pa.Field(ge=0)
    n_servers: pl.Int32 = pa.Field(ge=1)
    worker_servers: pl.Utf8 = pa.Field(str_startswith="[", str_endswith="]")
    ps_servers: pl.Utf8 = pa.Field(str_startswith="[", str_endswith="]")
    servers_used: pl.Int32 = pa.Field(ge=1)
    colocated_tasks: pl.Int32 = pa.Field(ge=0)
    colocated_jobs: pl.Int32 = pa.Field(ge=0)
    isolated_speed: pl.Float64 = pa.Field(gt=0)
    measured_speed: pl.Float64 = pa.Field(gt=0)
    slowdown: pl.Float64 = pa.Field(lt=1)
    params: pl.Utf8
    code_version: pl.Utf8

    class Config:
        name = "interference_samples"
        unique = ["source", "seed", "sample_set", "job_in_set"]

    @pa.dataframe_check
    def slowdown_matches_speeds(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            (pl.col("slowdown") - (1.0 - pl.col("measured_speed") / pl.col("isolated_speed"))).abs()
            <= 1e-9
        )

    @pa.dataframe_check
    def servers_used_within_tasks(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            pl.col("servers_used") <= pl.col("workers") + pl.col("ps"),
            pl.col("colocated_jobs") <= pl.col("colocated_tasks"),
        )

    @pa.dataframe_check
    def placement_matches_counts(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """The per-server counts have one entry per server and add up to workers / PSs."""
        out = []
        for col, total in (("worker_servers", "workers"), ("ps_servers", "ps")):
            counts = pl.col(col).str.json_decode(pl.List(pl.Int64))
            out.append(
                (counts.list.len() == pl.col("n_servers"))
                & (counts.list.sum() == pl.col(total))
                & (counts.list.min() >= 0)
            )
        return data.lazyframe.select(out[0] & out[1])


JOB_COLUMNS: dict[str, pl.DataType] = {
    name: col.dtype.type for name, col in Jobs.to_schema().columns.items()
}
