"""Alibaba PAI GPU trace 2020: `pai_job_table.csv` plus `pai_task_table.csv`, both headerless.

    pai_job_table:  job_name, inst_id, user, status, start_time, end_time
    pai_task_table: job_name, task_name, inst_num, status, start_time, end_time,
                    plan_cpu, plan_mem, plan_gpu, gpu_type

Times are seconds (floats, shifted by a constant for anonymity); a job's start_time is its
submission, the gap to its earliest task start_time is its queueing delay. plan_cpu and
plan_gpu are percent of one core / one GPU (600 = 6 cores, 50 = half a GPU), per instance;
plan_mem is GB per instance; inst_num is the number of instances of the task; gpu_type is
the GPU model a task ran on (V100, V100M32, P100, T4, MISC), kept per job as the type(s) of
its GPU tasks.

A job's demand is the sum over its tasks of inst_num times the per-instance plan. Record
numbers are line numbers of pai_job_table.csv (first line = 1); the raw record is that line.
A job inherits the first problem of any of its task rows, named with the task-table line.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracelib.ingest.base import Check, IngestError, ParsedTrace, first_problems, normalize_status
from tracelib.ingest.csvrecords import read_csv_records
from tracelib.ingest.generic import read_bytes
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
MAX_INSTANCES = 1_000_000

# Task-table column -> the job field it feeds, so a task error names the field at stake.
# Task end_time, status and gpu_type do not feed any job field and are not checked.
_TASK_NUMBERS = {
    "inst_num": "num_gpus",
    "start_time": "start_time",
    "plan_cpu": "num_cpus",
    "plan_mem": "mem_gb",
    "plan_gpu": "num_gpus",
}


# Job-table column -> the job field it feeds, so a ragged line names the field at stake.
_JOB_FIELDS = {
    "job_name": "job_id",
    "inst_id": "record",
    "user": "user_name",
    "status": "status",
    "start_time": "submit_time",
    "end_time": "end_time",
}


def ingest_params() -> dict:
    """What, besides the two tables' bytes, decides the jobs a PAI trace yields."""
    return {
        "task_table": TASK_TABLE,
        "worker_tasks": sorted(WORKER_TASKS),
        "ps_tasks": sorted(PS_TASKS),
    }


def read_pai_bytes(path: str | Path) -> tuple[Path, bytes, Path, bytes]:
    """(job table path, its bytes, task table path, its bytes); IngestError naming the file
    when either is missing, unreadable or empty."""
    job_path, task_path = _locate(Path(path))
    return job_path, read_bytes(job_path), task_path, read_bytes(task_path)


def parse_pai(
    path: str | Path, *, tables: tuple[Path, bytes, Path, bytes] | None = None
) -> ParsedTrace:
    """Parse the PAI job and task tables into one row of typed job fields per job.

    `path` is the directory holding both tables, or the job table (the task table must be
    beside it); `tables` are `read_pai_bytes(path)` if already read. Raises IngestError
    naming the file when either table is missing, empty or has no line of the expected
    width; a single line of the wrong width is a record error.
    """
    job_path, job_bytes, task_path, task_bytes = tables or read_pai_bytes(path)
    jobs, job_ragged = _read(job_path, job_bytes, JOB_TABLE_COLUMNS)
    tasks, task_ragged = _read(task_path, task_bytes, TASK_TABLE_COLUMNS)

    per_job = _aggregate_tasks(tasks, _task_problems(tasks, task_ragged))
    typed = _parse_jobs(jobs).join(per_job, on="job_name", how="left")
    job_problems = _job_problems(jobs, job_ragged)

    # One problem per record: job-table fields first, then its tasks, then no tasks at all.
    no_tasks = typed.filter(pl.col("job_name").is_not_null() & pl.col("_tasks").is_null())
    errors = pl.concat(
        [
            job_problems,
            typed.filter(pl.col("_task_field").is_not_null()).select(
                "record_no",
                pl.col("_task_field").alias("field"),
                pl.col("_task_reason").alias("reason"),
            ),
            no_tasks.select(
                "record_no",
                pl.lit("num_gpus").alias("field"),
                pl.lit(f"num_gpus: job has no tasks in {TASK_TABLE}").alias("reason"),
            ),
        ]
    ).unique("record_no", keep="first", maintain_order=True)
    frame = typed.select(
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
        pl.when(pl.col("gpu_type") != "").then(pl.col("gpu_type")).alias("gpu_type"),
    )
    return ParsedTrace(
        path=job_path,
        format="pai",
        content_hash=sha256_hex(job_bytes, task_bytes),
        frame=frame,
        errors=errors.sort("record_no"),
        raw=_raw_lines(job_path, job_bytes),
        params=ingest_params(),
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
        # A table that exists but is no regular file (a pipe, a device) is refused by
        # name when it is read (`read_bytes`), not reported missing.
        if not table.exists() and not table.is_symlink():
            raise IngestError(table, f"PAI {what} {table.name} not found")
    return job_path, task_path


def _read(path: Path, data: bytes, columns: tuple[str, ...]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the table as text columns plus `line`, its line number; lines of the wrong width)."""
    records = read_csv_records(path, data, has_header=False, columns=columns)
    if not (records.n_fields == len(columns)).any():
        widths = records.n_fields.value_counts(sort=True).get_column("n_fields")
        raise IngestError(
            path, f"expected {len(columns)} columns, found {widths[0]} (not a PAI {path.stem})"
        )
    table = records.table.rename({"record_no": "line"}).with_columns(
        *(_blank_to_null(pl.col(c)).alias(c) for c in columns)
    )
    return table, records.problems


def _raw_lines(path: Path, data: bytes):
    """Job-table line numbers -> the lines, as the record reader keeps them."""
    return read_csv_records(path, data, has_header=False, columns=JOB_TABLE_COLUMNS).raw


def _parse_jobs(jobs: pl.DataFrame) -> pl.DataFrame:
    """Typed job-table fields, one row per line."""
    return jobs.select(
        pl.col("line").alias("record_no"),
        "job_name",
        pl.col("user").alias("user_name"),
        normalize_status(pl.col("status"), PAI_STATUS).alias("status"),
        _seconds(pl.col("start_time")).alias("submit_time"),
        _seconds(pl.col("end_time")).alias("end_time"),
    )


def _job_problems(jobs: pl.DataFrame, ragged: pl.DataFrame) -> pl.DataFrame:
    """The first problem of each job-table line: its width, then each field."""
    checks = [
        Check(_invalid_utf8(col), fld, f"{col}: invalid UTF-8 bytes")
        for col, fld in (("job_name", "job_id"), ("user", "user_name"), ("status", "status"))
    ]
    checks += [
        Check(
            _unparsed(col),
            fld,
            lambda value, col=col: f"{col}: cannot parse {value!r} as unix seconds",
            (pl.col(col),),
        )
        for col, fld in (("start_time", "submit_time"), ("end_time", "end_time"))
    ]
    found = first_problems(jobs.rename({"line": "record_no"}), checks)
    split = ragged.select(
        "record_no",
        pl.col("column")
        .replace_strict(_JOB_FIELDS, default="record", return_dtype=pl.Utf8)
        .fill_null("record")
        .alias("field"),
        "reason",
    )
    return pl.concat([split, found]).unique("record_no", keep="first", maintain_order=True)


def _task_problems(tasks: pl.DataFrame, ragged: pl.DataFrame) -> pl.DataFrame:
    """line, field, reason: the first problem of each task line (width, then fields)."""
    where = "task table line {}"
    inst = _number(pl.col("inst_num"))
    # Without a usable instance count no demand of the job can be computed.
    checks = [
        Check(
            pl.col("inst_num").is_null(),
            "num_gpus",
            lambda line: f"inst_num: {where.format(line)}: missing",
            (pl.col("line"),),
        ),
        Check(
            inst.is_not_null() & (inst != inst.round(0)),
            "num_gpus",
            lambda line, value: f"inst_num: {where.format(line)}: {value!r} is not a whole number",
            (pl.col("line"), pl.col("inst_num")),
        ),
        # No task runs a million instances; beyond that it is a corrupt value (and would
        # overflow the instance counts).
        Check(
            (inst < 0) | (inst > MAX_INSTANCES),
            "num_gpus",
            lambda line, value: (
                f"inst_num: {where.format(line)}: {value} is out of range (0 to {MAX_INSTANCES:,})"
            ),
            (pl.col("line"), pl.col("inst_num")),
        ),
    ]
    for col, fld in _TASK_NUMBERS.items():
        checks.append(
            Check(
                _unparsed(col),
                fld,
                lambda line, value, col=col: (
                    f"{col}: {where.format(line)}: cannot parse {value!r} as a number"
                ),
                (pl.col("line"), pl.col(col)),
            )
        )
        if col != "start_time":
            # A negative plan would be netted against the job's other tasks, unseen.
            checks.append(
                Check(
                    _number(pl.col(col)) < 0,
                    fld,
                    lambda line, value, col=col: (
                        f"{col}: {where.format(line)}: negative value {value}"
                    ),
                    (pl.col("line"), pl.col(col)),
                )
            )
    found = first_problems(tasks, checks, key="line")
    split = ragged.select(
        pl.col("record_no").alias("line"),
        pl.lit("num_gpus").alias("field"),
        pl.format("task table line {}: {}", pl.col("record_no"), pl.col("reason")).alias("reason")
        if ragged.height
        else pl.lit(None, dtype=pl.Utf8).alias("reason"),
    )
    return pl.concat([split, found]).unique("line", keep="first", maintain_order=True)


def _aggregate_tasks(tasks: pl.DataFrame, problems: pl.DataFrame) -> pl.DataFrame:
    """Per job: demand summed over tasks, earliest task start, first task problem by line.

    Task rows without a job name cannot be attributed to a job and are left out.
    """
    tasks = tasks.filter(pl.col("job_name").is_not_null()).join(
        problems.rename({"field": "_task_field", "reason": "_task_reason"}), on="line", how="left"
    )
    role = pl.col("task_name").str.to_lowercase()
    tasks = tasks.select(
        "job_name",
        "line",
        _number(pl.col("inst_num")).alias("inst_num"),
        role.is_in(list(WORKER_TASKS)).fill_null(False).alias("_is_worker"),
        role.is_in(list(PS_TASKS)).fill_null(False).alias("_is_ps"),
        _seconds(pl.col("start_time")).alias("start_time"),
        _number(pl.col("plan_cpu")).alias("plan_cpu"),
        _number(pl.col("plan_mem")).alias("plan_mem"),
        # PAI leaves plan_gpu empty for tasks that ask for no GPU (parameter servers, CPU jobs).
        _number(pl.col("plan_gpu")).fill_null(0.0).alias("plan_gpu"),
        _blank_to_null(pl.col("gpu_type")).alias("gpu_type"),
        "_task_field",
        "_task_reason",
    )

    def total(plan: str) -> pl.Expr:
        # Unknown for the job if any task's plan is unknown, rather than a silent undercount.
        product = pl.col("inst_num") * pl.col(plan)
        return pl.when(product.is_null().any()).then(None).otherwise(product.sum())

    inst = pl.col("inst_num").fill_null(0).round(0).cast(pl.Int64, strict=False)
    # Sorted by line, so first() is the earliest task line of each job.
    return (
        tasks.sort("line")
        .group_by("job_name", maintain_order=True)
        .agg(
            pl.len().alias("_tasks"),
            pl.col("start_time").min(),
            (total("plan_gpu") / 100).alias("num_gpus"),
            (total("plan_cpu") / 100).alias("num_cpus"),
            total("plan_mem").alias("mem_gb"),
            inst.filter(pl.col("_is_worker")).sum().cast(pl.Int32).alias("num_workers"),
            inst.filter(pl.col("_is_ps")).sum().cast(pl.Int32).alias("num_ps"),
            # The GPU type(s) of the tasks that use GPUs: "V100", or "P100|V100" for a job
            # whose GPU tasks ran on both (the replay then takes either).
            pl.col("gpu_type")
            .filter(pl.col("plan_gpu") > 0)
            .drop_nulls()
            .unique()
            .sort()
            .str.join("|")
            .alias("gpu_type"),
            pl.col("_task_field").drop_nulls().first(),
            pl.col("_task_reason").drop_nulls().first(),
        )
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


def _invalid_utf8(col: str) -> pl.Expr:
    # The record reader decodes lossily, so an invalid byte arrives as U+FFFD.
    return pl.col(col).str.contains("\ufffd", literal=True).fill_null(False)
