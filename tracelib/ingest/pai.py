"""Alibaba PAI GPU trace 2020: `pai_job_table.csv` plus `pai_task_table.csv`, both headerless.

    pai_job_table:  job_name, inst_id, user, status, start_time, end_time
    pai_task_table: job_name, task_name, inst_num, status, start_time, end_time,
                    plan_cpu, plan_mem, plan_gpu, gpu_type

Times are seconds (floats, shifted by a constant for anonymity); a job's start_time is its
submission, the gap to its earliest task start_time is its queueing delay. plan_cpu and
plan_gpu are percent of one core / one GPU (600 = 6 cores, 50 = half a GPU), per instance;
plan_mem is GB per instance; inst_num is the number of instances of the task.

A job's demand is the sum over its tasks of inst_num times the per-instance plan. Record
numbers are line numbers of pai_job_table.csv (first line = 1); the raw record is that line.
A job inherits the first problem of any of its task rows, named with the task-table line.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracelib.ingest.base import IngestError, ParsedTrace, line_lookup, normalize_status
from tracelib.ingest.generic import read_bytes, read_table
from tracelib.provenance import sha256_hex

JOB_TABLE = "pai_job_table.csv"
TASK_TABLE = "pai_task_table.csv"
JOB_TABLE_COLUMNS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
TASK_TABLE_COLUMNS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
PAI_STATUS = {
    "Terminated": "completed",
    "Failed": "failed",
    "Running": "running",
    "Waiting": "pending",
}
# Task names (compared lower-case) whose instances train the model. Not workers: 'ps'
# (counted as num_ps), 'evaluator', 'OpenmpiTracker' (MPI rendezvous), 'JupyterTask' and any
# other helper role. 'tensorflow' is the single task of most single-role TF jobs; 'chief'
# is a TF worker that also writes checkpoints.
WORKER_TASKS = frozenset(
    {"worker", "tensorflow", "pytorchworker", "tvtworker", "xcomputeworker", "chief"}
)
PS_TASKS = frozenset({"ps"})

# Task-table column -> the job field it feeds, so a task error names the field at stake.
# Task end_time, status and gpu_type do not feed any job field and are not checked.
_TASK_NUMBERS = {
    "inst_num": "num_gpus",
    "start_time": "start_time",
    "plan_cpu": "num_cpus",
    "plan_mem": "mem_gb",
    "plan_gpu": "num_gpus",
}


def parse_pai(path: str | Path) -> ParsedTrace:
    """Parse the PAI job and task tables into one row of typed job fields per job.

    `path` is the directory holding both tables, or the job table (the task table must be
    beside it). Raises IngestError naming the file when either table is missing, empty or
    not a table of the expected width.
    """
    job_path, task_path = _locate(Path(path))
    job_bytes = read_bytes(job_path)
    task_bytes = read_bytes(task_path)
    jobs = _read(job_path, job_bytes, JOB_TABLE_COLUMNS)
    tasks = _read(task_path, task_bytes, TASK_TABLE_COLUMNS)

    per_job = _aggregate_tasks(_parse_tasks(tasks))
    jobs = _parse_jobs(jobs).join(per_job, on="job_name", how="left")

    has_name = pl.col("job_name").is_not_null()
    no_tasks = has_name & pl.col("_tasks").is_null()
    # One problem per record: job-table fields first, then its tasks, then no tasks at all.
    problem_field = pl.coalesce(
        pl.col("_job_field"),
        pl.col("_task_field"),
        pl.when(no_tasks).then(pl.lit("num_gpus")),
    )
    problem_reason = pl.coalesce(
        pl.col("_job_reason"),
        pl.col("_task_reason"),
        pl.when(no_tasks).then(pl.lit(f"num_gpus: job has no tasks in {TASK_TABLE}")),
    )
    jobs = jobs.with_columns(problem_field.alias("field"), problem_reason.alias("reason"))
    errors = jobs.filter(pl.col("field").is_not_null()).select("record_no", "field", "reason")
    frame = jobs.select(
        "record_no",
        pl.col("job_name").alias("job_id"),
        "submit_time",
        "start_time",
        "end_time",
        "num_gpus",
        "num_cpus",
        "mem_gb",
        "num_workers",
        "num_ps",
        "status",
        "user_name",
    )
    return ParsedTrace(
        path=job_path,
        format="pai",
        content_hash=sha256_hex(job_bytes, task_bytes),
        frame=frame,
        errors=errors,
        raw=line_lookup(job_bytes, first_line=1),
        params={
            "task_table": task_path.name,
            "worker_tasks": sorted(WORKER_TASKS),
            "ps_tasks": sorted(PS_TASKS),
        },
    )


def _locate(path: Path) -> tuple[Path, Path]:
    """(job table, task table) from a directory or the job table's path."""
    if path.is_dir():
        job_path, task_path = path / JOB_TABLE, path / TASK_TABLE
    else:
        if path.name == TASK_TABLE:
            raise IngestError(path, f"give {JOB_TABLE} (or its directory), not {TASK_TABLE}")
        job_path, task_path = path, path.with_name(TASK_TABLE)
    for table, what in ((job_path, "job table"), (task_path, "task table")):
        if not table.is_file():
            raise IngestError(table, f"PAI {what} {table.name} not found")
    return job_path, task_path


def _read(path: Path, data: bytes, columns: tuple[str, ...]) -> pl.DataFrame:
    """The table as text columns plus `line` (1-based line number in the file)."""
    table = read_table(path, data, has_header=False, columns=list(columns))
    if table.width != len(columns):
        raise IngestError(path, f"expected {len(columns)} columns, found {table.width}")
    # Blank lines come back as all-null rows, so row index + 1 is the line number.
    return table.with_row_index("line", offset=1).with_columns(
        pl.col("line").cast(pl.Int64),
        *(_blank_to_null(pl.col(c)).alias(c) for c in columns),
    )


def _parse_jobs(jobs: pl.DataFrame) -> pl.DataFrame:
    """Typed job-table fields plus the first problem of each line (_job_field, _job_reason)."""
    checks = [
        (_invalid_utf8(col), fld, pl.lit(f"{col}: invalid UTF-8 bytes"))
        for col, fld in (("job_name", "job_id"), ("user", "user_name"), ("status", "status"))
    ]
    checks += [
        (_unparsed(col), fld, _cannot_parse(pl.lit(col), col, "unix seconds"))
        for col, fld in (("start_time", "submit_time"), ("end_time", "end_time"))
    ]
    return jobs.select(
        pl.col("line").alias("record_no"),
        "job_name",
        pl.col("user").alias("user_name"),
        normalize_status(pl.col("status"), PAI_STATUS).alias("status"),
        _seconds(pl.col("start_time")).alias("submit_time"),
        _seconds(pl.col("end_time")).alias("end_time"),
        pl.coalesce(pl.when(bad).then(pl.lit(fld)) for bad, fld, _ in checks).alias("_job_field"),
        pl.coalesce(pl.when(bad).then(reason) for bad, _, reason in checks).alias("_job_reason"),
    )


def _parse_tasks(tasks: pl.DataFrame) -> pl.DataFrame:
    """Typed task rows with per-row problems; rows without a job name cannot be attributed."""
    tasks = tasks.filter(pl.col("job_name").is_not_null())
    where = pl.format("task table line {}", pl.col("line"))
    inst = _number(pl.col("inst_num"))
    # Without a usable instance count no demand of the job can be computed.
    checks = [
        (pl.col("inst_num").is_null(), "num_gpus", pl.format("inst_num: {}: missing", where)),
        (
            inst.is_not_null() & (inst != inst.round(0)),
            "num_gpus",
            pl.format("inst_num: {}: '{}' is not a whole number", where, pl.col("inst_num")),
        ),
    ]
    for col, fld in _TASK_NUMBERS.items():
        checks.append(
            (_unparsed(col), fld, _cannot_parse(pl.format(f"{col}: {{}}", where), col, "a number"))
        )
        if col != "start_time":
            # A negative plan would be netted against the job's other tasks, unseen.
            checks.append(
                (
                    _number(pl.col(col)) < 0,
                    fld,
                    pl.format(f"{col}: {{}}: negative value {{}}", where, pl.col(col)),
                )
            )
    role = pl.col("task_name").str.to_lowercase()
    return tasks.select(
        "job_name",
        "line",
        inst.alias("inst_num"),
        role.is_in(list(WORKER_TASKS)).fill_null(False).alias("_is_worker"),
        role.is_in(list(PS_TASKS)).fill_null(False).alias("_is_ps"),
        _seconds(pl.col("start_time")).alias("start_time"),
        _number(pl.col("plan_cpu")).alias("plan_cpu"),
        _number(pl.col("plan_mem")).alias("plan_mem"),
        # PAI leaves plan_gpu empty for tasks that ask for no GPU (parameter servers, CPU jobs).
        _number(pl.col("plan_gpu")).fill_null(0.0).alias("plan_gpu"),
        pl.coalesce(pl.when(bad).then(pl.lit(fld)) for bad, fld, _ in checks).alias("_task_field"),
        pl.coalesce(pl.when(bad).then(reason) for bad, _, reason in checks).alias("_task_reason"),
    )


def _aggregate_tasks(tasks: pl.DataFrame) -> pl.DataFrame:
    """Per job: demand summed over tasks, earliest task start, first task problem by line."""

    def total(plan: str) -> pl.Expr:
        # Unknown for the job if any task's plan is unknown, rather than a silent undercount.
        product = pl.col("inst_num") * pl.col(plan)
        return pl.when(product.is_null().any()).then(None).otherwise(product.sum())

    inst = pl.col("inst_num").fill_null(0).round(0).cast(pl.Int64)
    # group_by keeps file order within a job, so first() is the earliest task line.
    return tasks.group_by("job_name").agg(
        pl.len().alias("_tasks"),
        pl.col("start_time").min(),
        (total("plan_gpu") / 100).alias("num_gpus"),
        (total("plan_cpu") / 100).alias("num_cpus"),
        total("plan_mem").alias("mem_gb"),
        inst.filter(pl.col("_is_worker")).sum().cast(pl.Int32).alias("num_workers"),
        inst.filter(pl.col("_is_ps")).sum().cast(pl.Int32).alias("num_ps"),
        pl.col("_task_field").drop_nulls().first(),
        pl.col("_task_reason").drop_nulls().first(),
    )


def _blank_to_null(col: pl.Expr) -> pl.Expr:
    stripped = col.str.strip_chars()
    return pl.when(stripped == "").then(None).otherwise(stripped)


def _number(col: pl.Expr) -> pl.Expr:
    number = col.cast(pl.Float64, strict=False)
    return pl.when(number.is_finite()).then(number)


def _seconds(col: pl.Expr) -> pl.Expr:
    """Seconds as a datetime; PAI writes 0 for a time it does not know (not yet started)."""
    number = _number(col)
    micros = (number * 1_000_000).round(0).cast(pl.Int64, strict=False)
    return pl.when(number != 0).then(micros.cast(pl.Datetime("us")))


def _unparsed(col: str) -> pl.Expr:
    return pl.col(col).is_not_null() & _number(pl.col(col)).is_null()


def _cannot_parse(where: pl.Expr, col: str, what: str) -> pl.Expr:
    return pl.format(f"{{}}: cannot parse '{{}}' as {what}", where, pl.col(col))


def _invalid_utf8(col: str) -> pl.Expr:
    # read_table decodes lossily, so an invalid byte arrives as U+FFFD.
    return pl.col(col).str.contains("\ufffd", literal=True).fill_null(False)
