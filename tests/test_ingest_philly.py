"""The Philly adapter on a small cluster_job_log in the real format, plus edge cases."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.test_bad_input import philly_job, refusal
from tracelib.contracts import Jobs, Quarantine
from tracelib.ingest import IngestError, load_trace
from tracelib.ingest.philly import parse_philly

SAMPLE = Path(__file__).parent / "data" / "traces" / "philly_cluster_job_log.json"
APP = "application_1506638472019_"


@pytest.fixture(scope="module")
def loaded():
    return load_trace(SAMPLE, "philly")


def by_id(frame):
    return {row["job_id"]: row for row in frame.iter_rows(named=True)}


def write_log(tmp_path: Path, jobs: list) -> Path:
    path = tmp_path / "cluster_job_log"
    path.write_text(json.dumps(jobs))
    return path


def job(jobid="application_1_1", **overrides):
    """One clean Philly job record; `overrides` replace its fields."""
    return philly_job(jobid, **overrides)


def test_sample_accepts_exactly_the_clean_jobs(loaded):
    assert sorted(loaded.jobs["job_id"]) == [
        APP + "10001",
        APP + "10002",
        APP + "10003",
        APP + "10004",
        APP + "10005",
        APP + "10011",
    ]
    assert loaded.source.item(0, "rows_accepted") == 6
    assert loaded.source.item(0, "rows_quarantined") == 6
    Jobs.validate(loaded.jobs)
    Quarantine.validate(loaded.quarantine)


def test_multi_attempt_job_sums_attempts_and_takes_the_largest_allocation(loaded):
    row = by_id(loaded.jobs)[APP + "10001"]
    assert row["submit_time"] == datetime(2017, 10, 3, 2, 15, 12)
    assert row["start_time"] == datetime(2017, 10, 3, 2, 17, 13)  # first attempt's start
    assert row["end_time"] == datetime(2017, 10, 3, 4, 0, 0)  # last attempt's end
    # 1800 s + 3600 s of attempts, not the 6167 s from first start to last end.
    assert row["duration_s"] == 5400.0
    # 2 GPUs in the first attempt, 4 + 4 on two machines in the second.
    assert row["num_gpus"] == 8.0
    assert row["status"] == "completed"
    assert row["user_name"] == "6214e9"
    assert row["vc"] == "11cb48"
    assert row["source_id"] == "philly:philly_cluster_job_log"


def test_statuses_gpus_and_durations_per_job(loaded):
    jobs = by_id(loaded.jobs)
    summary = {
        job_id[-5:]: (row["status"], row["num_gpus"], row["duration_s"])
        for job_id, row in jobs.items()
    }
    assert summary == {
        "10001": ("completed", 8.0, 5400.0),
        "10002": ("killed", 1.0, 600.0),
        "10003": ("failed", 2.0, 180.0),
        "10004": ("running", 4.0, None),
        "10005": ("pending", 0.0, None),
        # First attempt's end unknown: no attempt sum, so end - start of the whole job.
        "10011": ("completed", 2.0, 7200.0),
    }


def test_running_and_never_started_jobs_keep_unknown_times(loaded):
    jobs = by_id(loaded.jobs)
    running = jobs[APP + "10004"]
    assert running["start_time"] == datetime(2017, 10, 3, 6, 0, 0)
    assert running["end_time"] is None
    queued = jobs[APP + "10005"]
    assert queued["start_time"] is None
    assert queued["end_time"] is None


def test_sample_quarantine_names_field_and_reason(loaded):
    rows = {r["record_no"]: (r["field"], r["reason"]) for r in loaded.quarantine.to_dicts()}
    assert sorted(rows) == [6, 7, 8, 9, 10, 12]
    expected = {
        6: ("submit_time", "submitted_time: cannot parse '2017-10-03 25:61:00' as a time"),
        7: ("job_id", "jobid: missing"),
        8: ("job_id", f"duplicate job_id {APP}10002 (first at record 2)"),
        9: ("user_name", "user: invalid UTF-8 bytes"),
        10: ("num_gpus", "attempts: expected an array, got string"),
        12: ("num_gpus", "attempts[0].detail[0].gpus: expected an array, got string"),
    }
    for record_no, (fld, reason) in expected.items():
        assert rows[record_no][0] == fld, record_no
        assert reason in rows[record_no][1], record_no


def test_quarantined_raw_record_is_the_original_element(loaded):
    raw = {r["record_no"]: r["raw_record"] for r in loaded.quarantine.to_dicts()}
    assert '"submitted_time": "2017-10-03 25:61:00"' in raw[6]
    assert json.loads(raw[7])["submitted_time"] == "2017-10-03 08:59:00"
    assert f'"jobid": "{APP}10002"' in raw[8]
    # The invalid byte is visible as U+FFFD, the rest of the string kept.
    assert '"user": "c1\ufffde2a4"' in raw[9]
    assert '"attempts": "None"' in raw[10]


def test_content_hash_is_sha256_of_the_file(loaded):
    assert loaded.content_hash == hashlib.sha256(SAMPLE.read_bytes()).hexdigest()


def test_unparseable_attempt_time_names_the_attempt(tmp_path):
    bad = job(
        attempts=[
            {"start_time": "2017-10-03 01:00:00", "end_time": "2017-10-03 02:00:00", "detail": []},
            {"start_time": "2017-10-03 03:00:00", "end_time": "3 Oct", "detail": []},
        ]
    )
    parsed = parse_philly(write_log(tmp_path, [job(), bad]))
    assert parsed.errors.to_dicts() == [
        {
            "record_no": 2,
            "field": "end_time",
            "reason": "attempts[1].end_time: cannot parse '3 Oct' as a time (%Y-%m-%d %H:%M:%S)",
        }
    ]


def test_an_attempt_running_backwards_is_caught_even_if_the_job_span_is_fine(tmp_path):
    attempts = [
        {"start_time": "2017-10-03 01:00:00", "end_time": "2017-10-03 00:30:00", "detail": []},
        {"start_time": "2017-10-03 02:00:00", "end_time": "2017-10-03 05:00:00", "detail": []},
    ]
    loaded = load_trace(write_log(tmp_path, [job(attempts=attempts)]), "philly")
    assert loaded.jobs.height == 0
    row = loaded.quarantine.row(0, named=True)
    assert row["field"] == "duration_s"
    assert row["reason"].startswith("attempts[0]: end_time 2017-10-03 00:30:00 is before")


def test_wrong_types_become_record_errors(tmp_path):
    jobs = [
        "not a job",
        job(jobid=10238),
        job(attempts=[{"start_time": "None", "end_time": "None", "detail": "m1"}]),
        job(attempts=[{"start_time": "None", "end_time": "None", "detail": [["gpu0"]]}]),
        job(submitted_time=1506998112),
        job(submitted_time="None"),
        job(attempts=[{"start_time": "None", "end_time": "None"}]),
        job(),
    ]
    parsed = parse_philly(write_log(tmp_path, jobs))
    errors = {r["record_no"]: (r["field"], r["reason"]) for r in parsed.errors.to_dicts()}
    assert errors == {
        1: ("job_id", "record is a JSON string, not an object"),
        2: ("job_id", "jobid: expected a string, got number 10238"),
        3: ("num_gpus", "attempts[0].detail: expected an array, got string"),
        4: ("num_gpus", "attempts[0].detail[0]: expected an object, got array"),
        5: ("submit_time", "submitted_time: expected a time string, got number 1506998112"),
        6: ("submit_time", "submitted_time: missing (required)"),
        7: ("num_gpus", "attempts[0].detail: missing (required)"),
    }
    # Every record has a row, so normalize can attach each error to it.
    assert parsed.frame["record_no"].to_list() == list(range(1, 9))


def test_status_words(tmp_path):
    statuses = ["Pass", "Killed", "Failed", "Running", "Queued", "Waiting", "Mystery", None]
    jobs = [job(f"application_1_{i}", status=s) for i, s in enumerate(statuses)]
    parsed = parse_philly(write_log(tmp_path, jobs))
    assert parsed.frame.sort("record_no")["status"].to_list() == [
        "completed",
        "killed",
        "failed",
        "running",
        "pending",
        "pending",
        "unknown",
        "unknown",
    ]


def test_invalid_utf8_in_an_attempt_time_names_that_field(tmp_path):
    text = json.dumps([job(), job("application_1_2")])
    data = text.encode().replace(b'"2017-10-03 02:00:00"', b'"2017-10-03 02:00:0\xff"', 1)
    path = tmp_path / "log.json"
    path.write_bytes(data)
    loaded = load_trace(path, "philly")
    assert loaded.jobs["job_id"].to_list() == ["application_1_2"]
    row = loaded.quarantine.row(0, named=True)
    assert (row["record_no"], row["field"]) == (1, "end_time")
    assert row["reason"] == "attempts[0].end_time: invalid UTF-8 bytes"


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "log.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([job()]).encode())
    assert load_trace(path, "philly").jobs["job_id"].to_list() == ["application_1_1"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty"),
        (b"  \n", "file is empty"),
        (b"jobid,user\napplication_1,u1\n", "not valid JSON"),
        (b'{"jobid": "application_1"}', "expected a JSON array of jobs, found a JSON object"),
        (b"[]", "the job array is empty"),
    ],
)
def test_unusable_files_raise_ingest_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad_cluster_job_log.json"
    error = refusal(path, content, "philly")
    assert message in str(error)
    assert error.path == path


def test_missing_file_raises_ingest_error(tmp_path):
    with pytest.raises(IngestError, match=r"nowhere\.json"):
        load_trace(tmp_path / "nowhere.json", "philly")
