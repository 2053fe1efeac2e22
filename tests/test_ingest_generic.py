import shutil
from datetime import datetime

import polars as pl
import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tests.test_bad_input import refusal
from tracelib.ingest import IngestError, Mapping, load_trace, store_trace
from warehouse import connect, read_frame

SAMPLE = TRACES / "generic_sample.csv"
MAPPING = TRACES / "generic_sample.toml"


def quarantined(loaded) -> dict[int, tuple[str, str]]:
    return {
        r: (f, why)
        for r, f, why in loaded.quarantine.select("record_no", "field", "reason").iter_rows()
    }


def test_generic_mapping_types_units_defaults_and_statuses():
    loaded = load_trace(SAMPLE, "generic", mapping=MAPPING)
    jobs = {row["job_id"]: row for row in loaded.jobs.iter_rows(named=True)}
    assert sorted(jobs) == ["a1", "a2", "a9"]
    a1 = jobs["a1"]
    assert a1["submit_time"] == datetime(2023, 11, 14, 22, 13, 20)
    assert a1["duration_s"] == 3600.0  # 60 minutes
    assert a1["num_gpus"] == 8.0
    assert a1["status"] == "completed"  # through the [status] map
    assert a1["model"] == "ResNet50"
    assert jobs["a2"]["num_gpus"] == 1.0  # empty -> [defaults]
    assert jobs["a2"]["status"] == "failed"
    assert jobs["a9"]["user_name"] == "hank"  # blanks trimmed
    assert jobs["a9"]["status"] == "running"


def test_every_malformed_record_is_quarantined_with_a_reason_naming_the_field():
    loaded = load_trace(SAMPLE, "generic", mapping=MAPPING)
    q = quarantined(loaded)
    # record number = line number in the file (the header is line 1)
    assert q[4][0] == "num_gpus" and "cannot parse 'four' as a number" in q[4][1]
    assert q[5][0] == "end_time" and "before start_time" in q[5][1]
    assert q[6][0] == "submit_time" and "missing required field" in q[6][1]
    assert q[7][0] == "duration_s" and "absurd duration" in q[7][1]
    assert q[8][0] == "job_id" and "duplicate job_id a1 (first at record 2)" in q[8][1]
    assert q[9][0] == "num_gpus" and "negative num_gpus" in q[9][1]
    assert sorted(q) == [4, 5, 6, 7, 8, 9]
    raw = dict(loaded.quarantine.select("record_no", "raw_record").iter_rows())
    assert raw[4].startswith("a3,1700000200") and "four" in raw[4]
    assert loaded.source.item(0, "rows_accepted") == 3
    assert loaded.source.item(0, "rows_quarantined") == 6


def test_negative_duration_is_quarantined(tmp_path):
    path = tmp_path / "neg.csv"
    path.write_text("JobID,Submitted,Elapsed_min\nx,1700000000,-5\n")
    mapping = Mapping(
        columns={"job_id": "JobID", "submit_time": "Submitted", "duration": "Elapsed_min"},
        epoch_unit="s",
        duration_unit="min",
        defaults={"num_gpus": 1},
    )
    loaded = load_trace(path, "generic", mapping=mapping)
    assert loaded.jobs.height == 0
    assert loaded.quarantine.row(0, named=True)["field"] == "duration_s"
    assert "negative duration -300" in loaded.quarantine.item(0, "reason")


def test_bad_encoding_is_quarantined_and_the_raw_bytes_kept_visible(tmp_path):
    path = tmp_path / "enc.csv"
    path.write_bytes(
        b"JobID,Submitted,Elapsed_min,GPUs,Owner,State\n"
        b"ok,1700000000,5,1,ann,EXIT_OK\n"
        b"bad,1700000000,5,1,b\xffob,EXIT_OK\n"
    )
    loaded = load_trace(path, "generic", mapping=MAPPING_MIN(tmp_path))
    assert loaded.jobs.get_column("job_id").to_list() == ["ok"]
    row = loaded.quarantine.row(0, named=True)
    assert row["record_no"] == 3 and row["field"] == "user_name"
    assert "invalid UTF-8" in row["reason"]
    assert "\\xff" in row["raw_record"]


def MAPPING_MIN(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text(
        '[columns]\njob_id="JobID"\nsubmit_time="Submitted"\nduration="Elapsed_min"\n'
        'num_gpus="GPUs"\nuser_name="Owner"\nstatus="State"\n'
        '[time]\nepoch_unit="s"\n[duration]\nunit="min"\n[status]\nEXIT_OK="completed"\n'
    )
    return path


def test_parquet_with_a_time_format(tmp_path):
    path = tmp_path / "log.parquet"
    pl.DataFrame(
        {
            "id": ["p1", "p2"],
            "t": ["2024-01-02 03:04:05", "not a time"],
            "g": [2, 4],
            "d": [10.0, 1.0],
        }
    ).write_parquet(path)
    mapping = Mapping(
        columns={"job_id": "id", "submit_time": "t", "num_gpus": "g", "duration": "d"},
        time_format="%Y-%m-%d %H:%M:%S",
    )
    loaded = load_trace(path, "generic", mapping=mapping)
    assert loaded.jobs.get_column("job_id").to_list() == ["p1"]
    assert loaded.jobs.item(0, "submit_time") == datetime(2024, 1, 2, 3, 4, 5)
    assert "cannot parse 'not a time' as a time" in loaded.quarantine.item(0, "reason")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "file is empty"),
        (b"JobID,Submitted,Elapsed_min,GPUs,Owner,State,Model\n", "no data rows"),
        (b"JobID,Elapsed_min\nx,5\n", "missing required column 'Submitted'"),
    ],
)
def test_unusable_files_fail_naming_file_and_column(tmp_path, content, message):
    assert message in str(refusal(tmp_path / "trace.csv", content, "generic", mapping=MAPPING))


def test_cli_exit_status_2_and_warehouse_unchanged(tmp_path, warehouse_path, capsys):
    assert main(["ingest", str(SAMPLE), "--format", "generic", "--mapping", str(MAPPING)]) == 0
    with connect(warehouse_path) as con:
        before = read_frame(con, "SELECT * FROM jobs ORDER BY job_id")
    broken = tmp_path / "broken.csv"
    broken.write_text("JobID,Elapsed_min\nx,5\n")
    missing = tmp_path / "nope.csv"
    for path in (broken, missing):
        code = main(["ingest", str(path), "--format", "generic", "--mapping", str(MAPPING)])
        assert code == 2
        assert path.name in capsys.readouterr().err
    with connect(warehouse_path) as con:
        assert read_frame(con, "SELECT * FROM jobs ORDER BY job_id").equals(before)
        assert read_frame(con, "SELECT count(*) AS n FROM trace_sources").item() == 1


def test_reingest_is_a_noop_and_a_changed_file_replaces(tmp_path, warehouse_path):
    path = tmp_path / "log.csv"
    shutil.copy(SAMPLE, path)
    with connect(warehouse_path) as con:
        first = store_trace(con, load_trace(path, "generic", mapping=MAPPING))
        again = store_trace(con, load_trace(path, "generic", mapping=MAPPING))
        assert (first.outcome, again.outcome) == ("new", "unchanged")
        ingested_at = read_frame(con, "SELECT ingested_at FROM trace_sources").item()

        path.write_text(
            SAMPLE.read_text() + "a10,1700001000,1700001100,1700001200,2,1,ivy,EXIT_OK,\n"
        )
        changed = store_trace(con, load_trace(path, "generic", mapping=MAPPING))
        assert changed.outcome == "replaced"
        counts = read_frame(
            con,
            "SELECT count(*) AS n, count(DISTINCT job_id) AS d FROM jobs WHERE source_id = ?",
            [changed.source_id],
        )
        assert counts.row(0) == (4, 4)
        assert read_frame(con, "SELECT count(*) AS n FROM quarantine").item() == 6
        assert read_frame(con, "SELECT ingested_at FROM trace_sources").item() > ingested_at


def test_bad_mapping_is_reported(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[columns]\njob_id = "JobID"\n[time]\nepoch_unit = "s"\n')
    with pytest.raises(IngestError, match="submit_time"):
        load_trace(SAMPLE, "generic", mapping=bad)


def test_helios_sample():
    loaded = load_trace(TRACES / "helios_sample.csv", "helios")
    jobs = {r["job_id"]: r for r in loaded.jobs.iter_rows(named=True)}
    assert sorted(jobs) == ["6094482", "6094483", "6094484", "6094488"]
    assert jobs["6094482"]["num_gpus"] == 8 and jobs["6094482"]["duration_s"] == 7800
    assert jobs["6094483"]["status"] == "killed"  # "CANCELLED by 1021"
    assert jobs["6094488"]["status"] == "failed"  # TIMEOUT
    assert jobs["6094482"]["vc"] == "vc6YE" and jobs["6094482"]["num_cpus"] == 48
    assert {
        r: f for r, f, _ in loaded.quarantine.select("record_no", "field", "reason").iter_rows()
    } == {
        5: "num_gpus",
        6: "end_time",
        7: "submit_time",
        8: "job_id",
    }
