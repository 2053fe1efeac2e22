"""The PAI adapter on small job and task tables in the real (headerless CSV) format."""

from __future__ import annotations

import hashlib
import shutil
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tracelib.contracts import Jobs, Quarantine
from tracelib.ingest import IngestError, load_trace
from tracelib.ingest.pai import parse_pai

SAMPLE = Path(__file__).parent / "data" / "traces" / "pai"
JOB = "4b3f04b66a525d2df903eb"
EPOCH = datetime(1970, 1, 1)


def at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


@pytest.fixture(scope="module")
def loaded():
    return load_trace(SAMPLE, "pai")


def by_id(frame):
    return {row["job_id"]: row for row in frame.iter_rows(named=True)}


def write_tables(tmp_path: Path, jobs: str, tasks: str | None) -> Path:
    (tmp_path / "pai_job_table.csv").write_text(jobs)
    if tasks is not None:
        (tmp_path / "pai_task_table.csv").write_text(tasks)
    return tmp_path


def by_job_number(loaded, *columns: str) -> dict[str, tuple]:
    """The accepted jobs' `columns`, by the last two digits of the job id."""
    return {
        job_id[-2:]: tuple(row[c] for c in columns) for job_id, row in by_id(loaded.jobs).items()
    }


def test_sample_accepts_exactly_the_clean_jobs(loaded):
    assert sorted(loaded.jobs["job_id"]) == [
        JOB + n for n in ("01", "02", "03", "04", "08", "09", "10")
    ]
    assert loaded.source_id == "pai:pai"
    Jobs.validate(loaded.jobs)
    Quarantine.validate(loaded.quarantine)


def test_demand_is_summed_over_tasks_and_instances(loaded):
    got = by_job_number(loaded, "num_gpus", "num_cpus", "mem_gb", "num_workers", "num_ps")
    assert got == {
        # 2 ps (400% CPU, 8 GB, no GPU) + 4 workers (600% CPU, 16 GB, 100% GPU).
        "01": (4.0, 32.0, 80.0, 4, 2),
        # One 'tensorflow' task holding half a GPU.
        "02": (0.5, 6.0, 29.296875, 1, 0),
        # 2 PyTorchWorker instances of 800% GPU each.
        "03": (16.0, 24.0, 120.0, 2, 0),
        # 2 workers at 100% + 1 evaluator at 50%; the evaluator is not a worker.
        "04": (2.5, 18.0, 68.0, 2, 0),
        "08": (1.0, 6.0, 16.0, 1, 0),
        # OpenmpiTracker (no GPU, not a worker) + 3 workers at 25%.
        "09": (0.75, 13.0, 32.0, 3, 0),
        # A CPU-only notebook with no plan_cpu: CPUs unknown, GPUs zero.
        "10": (0.0, None, 4.0, 0, 0),
    }


def test_times_status_and_duration(loaded):
    got = by_job_number(loaded, "submit_time", "start_time", "end_time", "duration_s", "status")
    assert got == {
        # submit = job start_time; start = earliest task start; end = job end_time.
        "01": (at(1000), at(1010), at(5000), 3990.0, "completed"),
        "02": (at(2000), at(2030), at(2600), 570.0, "completed"),
        "03": (at(3000), at(3100), at(3500), 400.0, "failed"),
        "04": (at(4000), at(4050), None, None, "running"),
        # The waiting job's task start_time is 0.0: not started.
        "08": (at(8000), None, None, None, "pending"),
        "09": (at(9000), at(9010), at(9900), 890.0, "completed"),
        "10": (at(10000), at(10005), at(10060), 55.0, "completed"),
    }
    assert by_id(loaded.jobs)[JOB + "01"]["user_name"] == "58540f191766"


def test_sample_quarantine_names_field_and_reason(loaded):
    rows = {r["record_no"]: (r["field"], r["reason"]) for r in loaded.quarantine.to_dicts()}
    assert rows == {
        5: ("num_gpus", "num_gpus: job has no tasks in pai_task_table.csv"),
        6: ("num_gpus", "plan_gpu: task table line 7: cannot parse 'abc' as a number"),
        7: (
            "end_time",
            "end_time 1970-01-01 01:55:00.000000 is before start_time 1970-01-01 01:58:20.000000",
        ),
        11: ("submit_time", "start_time: cannot parse 'yesterday' as unix seconds"),
    }


def test_quarantined_raw_record_is_the_job_table_line(loaded):
    lines = (SAMPLE / "pai_job_table.csv").read_text().splitlines()
    raw = {r["record_no"]: r["raw_record"] for r in loaded.quarantine.to_dicts()}
    assert raw == {no: lines[no - 1] for no in (5, 6, 7, 11)}
    assert raw[11].endswith(",Failed,yesterday,11100.0")


def test_job_table_path_gives_the_same_result(loaded):
    direct = load_trace(SAMPLE / "pai_job_table.csv", "pai")
    assert direct.jobs.drop("source_id").equals(loaded.jobs.drop("source_id"))
    assert direct.quarantine["record_no"].to_list() == [5, 6, 7, 11]
    assert direct.content_hash == loaded.content_hash


def test_content_hash_covers_both_tables(loaded, tmp_path):
    jobs = (SAMPLE / "pai_job_table.csv").read_bytes()
    tasks = (SAMPLE / "pai_task_table.csv").read_bytes()
    assert loaded.content_hash == hashlib.sha256(jobs + tasks).hexdigest()
    shutil.copy(SAMPLE / "pai_job_table.csv", tmp_path)
    (tmp_path / "pai_task_table.csv").write_bytes(tasks.replace(b"25.0", b"50.0"))
    changed = load_trace(tmp_path, "pai")
    assert changed.content_hash != loaded.content_hash
    assert by_id(changed.jobs)[JOB + "09"]["num_gpus"] == 1.5


def test_first_bad_task_line_of_a_job_wins(tmp_path):
    path = write_tables(
        tmp_path,
        "j1,i1,u1,Terminated,100.0,200.0\nj2,i2,u1,Terminated,100.0,200.0\n",
        "j1,worker,1.0,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n"
        "j2,worker,2.5,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n"
        "j1,ps,1.0,Terminated,110.0,200.0,-400.0,16.0,,\n"
        "j1,ps,1.0,Terminated,soon,200.0,400.0,16.0,,\n",
    )
    parsed = parse_pai(path)
    assert parsed.errors.sort("record_no").to_dicts() == [
        {
            "record_no": 1,
            "field": "num_cpus",
            "reason": "plan_cpu: task table line 3: negative value -400.0",
        },
        {
            "record_no": 2,
            "field": "num_gpus",
            "reason": "inst_num: task table line 2: '2.5' is not a whole number",
        },
    ]


def test_invalid_utf8_in_job_table_is_a_record_error(tmp_path):
    (tmp_path / "pai_job_table.csv").write_bytes(
        b"j1,i1,u\xff1,Terminated,100.0,200.0\nj2,i2,u2,Terminated,100.0,200.0\n"
    )
    (tmp_path / "pai_task_table.csv").write_bytes(
        b"j1,worker,1.0,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n"
        b"j2,worker,1.0,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n"
    )
    loaded = load_trace(tmp_path, "pai")
    assert loaded.jobs["job_id"].to_list() == ["j2"]
    row = loaded.quarantine.row(0, named=True)
    assert (row["record_no"], row["field"], row["reason"]) == (
        1,
        "user_name",
        "user: invalid UTF-8 bytes",
    )
    assert row["raw_record"] == "j1,i1,u\\xff1,Terminated,100.0,200.0"


def test_blank_line_is_skipped_and_record_numbers_stay_line_numbers(tmp_path):
    path = write_tables(
        tmp_path,
        "j1,i1,u1,Terminated,100.0,200.0\n\nj3,i3,u1,Terminated,x,200.0\n",
        "j1,worker,1.0,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n"
        "j3,worker,1.0,Terminated,110.0,200.0,600.0,16.0,100.0,T4\n",
    )
    loaded = load_trace(path, "pai")
    assert loaded.jobs["job_id"].to_list() == ["j1"]
    rows = {r["record_no"]: r["field"] for r in loaded.quarantine.to_dicts()}
    # Line 2 is blank: not a record, so not quarantined; line 3 keeps its number.
    assert rows == {3: "submit_time"}


def test_missing_task_table_raises_naming_it(tmp_path):
    write_tables(tmp_path, "j1,i1,u1,Terminated,100.0,200.0\n", None)
    with pytest.raises(IngestError, match=r"pai_task_table\.csv"):
        load_trace(tmp_path, "pai")
    with pytest.raises(IngestError, match=r"pai_task_table\.csv"):
        load_trace(tmp_path / "pai_job_table.csv", "pai")


def test_missing_job_table_raises_naming_it(tmp_path):
    (tmp_path / "pai_task_table.csv").write_text("j1,worker,1.0,T,1.0,2.0,1.0,1.0,1.0,T4\n")
    with pytest.raises(IngestError, match=r"pai_job_table\.csv"):
        load_trace(tmp_path, "pai")


def test_task_table_given_instead_of_job_table_is_refused(tmp_path):
    write_tables(tmp_path, "j1,i1,u1,Terminated,100.0,200.0\n", "j1,w,1,T,1,2,1,1,1,T4\n")
    with pytest.raises(IngestError, match=r"not pai_task_table\.csv"):
        load_trace(tmp_path / "pai_task_table.csv", "pai")


def test_empty_job_table_raises(tmp_path):
    write_tables(tmp_path, "", "j1,worker,1.0,T,1.0,2.0,1.0,1.0,1.0,T4\n")
    with pytest.raises(IngestError, match=r"pai_job_table\.csv: file is empty"):
        load_trace(tmp_path, "pai")


def test_job_table_of_the_wrong_width_raises(tmp_path):
    write_tables(
        tmp_path,
        "job_name,user,status,start_time\nj1,u1,Terminated,100.0\n",
        "j1,worker,1.0,T,1.0,2.0,1.0,1.0,1.0,T4\n",
    )
    with pytest.raises(IngestError, match=r"pai_job_table\.csv"):
        load_trace(tmp_path, "pai")
