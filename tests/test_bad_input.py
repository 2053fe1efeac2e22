"""The bad-input corpus: every kind of broken input, per format, through the CLI.

Each file case states how many records the file holds and which of them are bad; the test
checks the exit code, the messages, that accepted + quarantined = records (nothing lost),
that each bad record is quarantined under its line number with the field named, and that
the warehouse holds exactly what the command reported. Each unusable file or mapping must
exit 2 naming the file (and the column or key), leave no traceback, and write nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import polars as pl
import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tracelib.ingest import IngestError, load_trace
from warehouse import connect, read_frame

GENERIC_MAPPING = TRACES / "generic_sample.toml"
G_HEADER = "JobID,Submitted,Started,Ended,Elapsed_min,GPUs,Owner,State,Model"


def g(job: str, user: str = "ann", gpus: str = "1", model: str = "") -> str:
    """One clean generic record."""
    return f"{job},1700000000,1700000060,1700003660,60,{gpus},{user},EXIT_OK,{model}"


H_HEADER = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,"
    "end_time,duration,queue"
)


def h(job: str, user: str = "u1", gpus: str = "8") -> str:
    """One clean Helios record."""
    return (
        f"{job},{user},vc6YE,job,{gpus},48,1,COMPLETED,2020-04-01 00:00:05,"
        "2020-04-01 00:00:10,2020-04-01 02:10:10,7800,5"
    )


def pai_job(name: str, start: str = "1000.0") -> str:
    return f"{name},inst,user1,Terminated,{start},5000.0"


def pai_task(name: str, gpu: str = "100.0") -> str:
    return f"{name},worker,1.0,Terminated,1010.0,4990.0,600.0,16.0,{gpu},V100"


def philly_job(jobid: str, **overrides) -> dict:
    record = {
        "status": "Pass",
        "vc": "vc1",
        "jobid": jobid,
        "attempts": [
            {
                "start_time": "2017-10-03 01:00:00",
                "end_time": "2017-10-03 02:00:00",
                "detail": [{"ip": "m1", "gpus": ["gpu0"]}],
            }
        ],
        "submitted_time": "2017-10-03 00:59:00",
        "user": "u1",
    }
    record.update(overrides)
    return record


@dataclass
class Case:
    """A file with some bad records: what must be loaded and what quarantined."""

    fmt: str
    files: dict[str, bytes]
    """File name (relative to the case folder) -> content; the first one is ingested
    (PAI: the folder)."""
    records: int
    """Records in the file (what accepted + quarantined must add up to)."""
    quarantined: dict[int, tuple[str, str]] = field(default_factory=dict)
    """record number (line) -> (field, a phrase of the reason)."""
    raw: dict[int, str] = field(default_factory=dict)
    """record number -> the exact raw record expected in the quarantine."""

    @classmethod
    def generic(cls, *lines: str, **expected: Any) -> Self:
        """A case of one generic CSV, t.csv (the sample mapping's columns): `G_HEADER`, then
        `lines`; `expected` holds the other fields (records, quarantined, ...)."""
        return cls("generic", {"t.csv": text(G_HEADER, *lines)}, **expected)


def text(*lines: str, end: str = "\n") -> bytes:
    return (end.join(lines) + end).encode()


def refusal(path: Path, content: bytes, fmt: str, **options) -> IngestError:
    """The error `load_trace` raises for a file at `path` holding `content`; asserts that
    it names the file."""
    path.write_bytes(content)
    with pytest.raises(IngestError) as info:
        load_trace(path, fmt, **options)
    assert path.name in str(info.value)
    return info.value


CASES = {
    # -- generic CSV ----------------------------------------------------------------------
    "generic-extra-field": Case.generic(
        g("a1"),
        g("a2") + ",EXTRA",
        g("a3"),
        records=3,
        quarantined={3: ("record", "record has 10 fields, the header has 9: extra fields")},
        raw={3: g("a2") + ",EXTRA"},
    ),
    "generic-missing-fields": Case.generic(
        g("a1"),
        "a2,1700000100,1700000200",
        g("a3"),
        records=3,
        quarantined={3: ("end_time", "record has 3 field(s), the header has 9: 'Ended'")},
    ),
    "generic-one-field-short": Case.generic(
        # The last column is optional (Model), but a cut-off record is still not trusted.
        g("a1"),
        g("a2").rsplit(",", 1)[0],
        records=2,
        quarantined={3: ("model", "'Model' missing")},
    ),
    "generic-blank-lines": Case.generic(
        "",
        g("a1"),
        "   ",
        "\t",
        g("a2", gpus="x"),
        "",
        "",
        records=2,
        quarantined={6: ("num_gpus", "cannot parse 'x' as a number")},
    ),
    "generic-quoted-newline": Case.generic(
        g("a1", user='"ann\nand bob"'),
        g("a2", gpus="two"),
        g("a3", user='"carl, jr"'),
        g("a4", gpus="-1", user='"dan\n\nand eve"'),
        g("a5"),
        records=5,
        # a2 is on line 4 (a1 spans lines 2-3); a4 starts on line 6 and spans 6-8.
        quarantined={
            4: ("num_gpus", "cannot parse 'two'"),
            6: ("num_gpus", "negative num_gpus"),
        },
        raw={4: g("a2", gpus="two"), 6: g("a4", gpus="-1", user='"dan\n\nand eve"')},
    ),
    "generic-unterminated-quote": Case.generic(
        g("a1"),
        g("a2", user='"bob'),
        g("a3"),
        g("a4"),
        records=4,  # the line that opens the quote is one record, the lines after it too
        quarantined={3: ("record", "a quote opened in this record is never closed")},
        raw={3: g("a2", user='"bob')},
    ),
    "generic-invalid-utf8": Case(
        "generic",
        {"t.csv": text(G_HEADER, g("a1")) + g("a2", user="b\xffob").encode("latin-1") + b"\n"},
        records=2,
        quarantined={3: ("user_name", "invalid UTF-8")},
        raw={3: g("a2", user="b\\xffob")},
    ),
    "generic-crlf-and-bom": Case(
        "generic",
        {"t.csv": b"\xef\xbb\xbf" + text(G_HEADER, g("a1"), g("a2", gpus="?"), end="\r\n")},
        records=2,
        quarantined={3: ("num_gpus", "cannot parse '?'")},
        raw={3: g("a2", gpus="?")},
    ),
    "generic-nul-byte": Case.generic(
        g("a1"),
        g("a2", gpus="1\x002"),
        records=2,
        quarantined={3: ("num_gpus", "cannot parse")},
    ),
    "generic-huge-numbers": Case.generic(
        g("a1", gpus="1e400"),
        "a2,1e30,1700000060,1700003660,60,1,ann,EXIT_OK,",
        g("a3"),
        records=3,
        quarantined={
            2: ("num_gpus", "cannot parse '1e400' as a number"),
            3: ("submit_time", "cannot parse '1e30' as epoch s"),
        },
    ),
    "generic-field-too-long-for-csv": Case.generic(
        g("a1"),
        g("a2", user='"' + "x" * 200_000 + '"'),
        g("a3"),
        records=3,
        quarantined={3: ("record", "cannot split the record into fields")},
    ),
    # -- Helios ---------------------------------------------------------------------------
    "helios-ragged-blank-quoted": Case(
        "helios",
        {
            "cluster_log.csv": text(
                H_HEADER,
                h("1"),
                "",
                h("2") + ",extra",
                h("3", user='"u\n3"'),
                h("4").rsplit(",", 2)[0],
                h("5", gpus="eight"),
                h("6"),
            )
        },
        records=6,
        quarantined={
            4: ("record", "extra fields"),
            7: ("duration_s", "'duration', 'queue' missing"),
            8: ("num_gpus", "cannot parse 'eight'"),
        },
    ),
    # -- PAI ------------------------------------------------------------------------------
    "pai-ragged-lines-and-blanks": Case(
        "pai",
        {
            "pai_job_table.csv": text(
                pai_job("j1"),
                pai_job("j2") + ",more",
                "",
                "j3,inst,user1,Terminated,1000.0",
                pai_job("j4"),
                pai_job("j5", start="soon"),
                pai_job("j6"),
            ),
            "pai_task_table.csv": text(
                pai_task("j1"),
                pai_task("j2"),
                "",
                pai_task("j3"),
                pai_task("j4") + ",x",
                pai_task("j5"),
                pai_task("j6", gpu="lots"),
            ),
        },
        records=6,
        quarantined={
            2: ("record", "extra fields"),
            4: ("end_time", "'end_time' missing"),
            5: ("num_gpus", "task table line 5: record has 11 fields"),
            6: ("submit_time", "cannot parse 'soon' as unix seconds"),
            7: ("num_gpus", "plan_gpu: task table line 7: cannot parse 'lots'"),
        },
    ),
    # -- Philly ---------------------------------------------------------------------------
    "philly-wrong-types-and-deep-record": Case(
        "philly",
        {
            "cluster_job_log": json.dumps(
                [
                    philly_job("a1"),
                    philly_job("a2", attempts=[[[[[[]]]]]]),
                    philly_job("a3", submitted_time={"nested": [1, 2, 3]}),
                    "just text",
                    philly_job("a5", user=[["deep"] * 3] * 3),
                    philly_job("a6"),
                ]
            ).encode()
        },
        records=6,
        quarantined={
            2: ("num_gpus", "attempts[0]: expected an object, got array"),
            3: ("submit_time", "expected a time string, got object"),
            4: ("job_id", "record is a JSON string"),
            5: ("user_name", "user: expected a string, got array"),
        },
    ),
}


def _setup(tmp_path: Path, case: Case) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    return folder if case.fmt == "pai" else folder / next(iter(case.files))


def _argv(case: Case, path: Path, mapping: Path | None = GENERIC_MAPPING) -> list[str]:
    argv = ["ingest", str(path), "--format", case.fmt]
    if case.fmt == "generic" and mapping is not None:
        argv += ["--mapping", str(mapping)]
    return argv


def _tables(warehouse: Path) -> dict[str, pl.DataFrame]:
    if not warehouse.exists():
        return {}
    with connect(warehouse, read_only=True) as con:
        return {
            t: read_frame(con, f"SELECT * EXCLUDE (source_id) FROM {t} ORDER BY ALL")
            for t in ("jobs", "quarantine")
        } | {"sources": read_frame(con, "SELECT source_id, rows_accepted FROM trace_sources")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_records_are_quarantined_and_nothing_is_lost(name, tmp_path, warehouse_path, capsys):
    case = CASES[name]
    path = _setup(tmp_path, case)
    assert main(_argv(case, path)) == 0
    _, found = assert_accounted(capsys, warehouse_path, case.records, case.quarantined)
    for record_no, raw in case.raw.items():
        assert found[record_no]["raw_record"] == raw
    # Idempotent: the same file again changes nothing.
    before = _tables(warehouse_path)
    assert main(_argv(case, path)) == 0
    assert "unchanged" in capsys.readouterr().out
    after = _tables(warehouse_path)
    assert all(after[t].equals(before[t]) for t in before)


def assert_accounted(
    capsys, warehouse: Path, records: int, quarantined: dict[int, tuple[str, str]]
) -> tuple[pl.DataFrame, dict[int, dict]]:
    """Asserts the ingest just run reported nothing on stderr, accepted + quarantined =
    `records` with the jobs table holding the accepted ones, and each expected record
    quarantined under its number with its field and a phrase of its reason. Returns the
    stored users (one row a job) and the quarantine rows by record number."""
    out, err = capsys.readouterr()
    assert err == ""
    accepted, n_quarantined = (int(w) for w in _counts(out))
    assert accepted + n_quarantined == records, out
    assert n_quarantined == len(quarantined), out
    with connect(warehouse, read_only=True) as con:
        jobs = read_frame(con, "SELECT user_name FROM jobs")
        rows = read_frame(
            con, "SELECT record_no, field, reason, raw_record FROM quarantine ORDER BY record_no"
        )
    assert jobs.height == accepted
    found = {r["record_no"]: r for r in rows.iter_rows(named=True)}
    assert sorted(found) == sorted(quarantined)
    for record_no, (fld, phrase) in quarantined.items():
        assert found[record_no]["field"] == fld, (record_no, found[record_no])
        assert phrase in found[record_no]["reason"], (record_no, found[record_no])
    return jobs, found


def _counts(out: str) -> tuple[str, str]:
    # "<source>: new; 3 jobs accepted, 1 quarantined" (after the command's progress lines)
    first = next(line for line in out.splitlines() if " jobs accepted, " in line)
    accepted = first.split("; ")[1].split(" jobs accepted")[0]
    quarantined = first.split("accepted, ")[1].split(" quarantined")[0]
    return accepted, quarantined


# -- files that cannot be ingested at all: exit 2, the file named, nothing written --------

UNUSABLE = {
    "generic-empty": ("generic", {"t.csv": b""}, "file is empty"),
    "generic-only-blanks": ("generic", {"t.csv": b"\n \n\t\n"}, "file is empty"),
    "generic-header-only": ("generic", {"t.csv": text(G_HEADER)}, "no data rows"),
    "generic-header-and-blank-lines": (
        "generic",
        {"t.csv": text(G_HEADER, "", "  ")},
        "no data rows",
    ),
    "generic-missing-column": (
        "generic",
        {"t.csv": text("JobID,Elapsed_min", "x,5")},
        "missing required column 'Submitted' (mapped to field 'submit_time')",
    ),
    "generic-binary-garbage": (
        "generic",
        {"t.csv": bytes(range(256)) * 4},
        "missing required column",
    ),
    "helios-time-format-matches-nothing": (
        "helios",
        {
            "cluster_log.csv": text(
                H_HEADER,
                h("1").replace("2020-04-01 00:00:05", "04/01/2020 00:00:05"),
                h("2").replace("2020-04-01 00:00:05", "04/01/2020 00:00:05"),
            )
        },
        "no value of column 'submit_time' (field 'submit_time') parses as a time in format",
    ),
    "pai-wrong-width-everywhere": (
        "pai",
        {
            "pai_job_table.csv": text("job_name,user,status,start_time", "j1,u1,T,100.0"),
            "pai_task_table.csv": text(pai_task("j1")),
        },
        "expected 6 columns, found 4",
    ),
    "pai-missing-task-table": (
        "pai",
        {"pai_job_table.csv": text(pai_job("j1"))},
        "pai_task_table.csv not found",
    ),
    "philly-nested-100000-deep": (
        "philly",
        {"cluster_job_log": b"[" * 100_000 + b"]" * 100_000},
        "nested too deeply",
    ),
    "philly-huge-integer": (
        "philly",
        {"cluster_job_log": b'[{"jobid": ' + b"9" * 5000 + b"}]"},
        "not usable JSON",
    ),
    "philly-truncated": (
        "philly",
        {"cluster_job_log": json.dumps([philly_job("a1")]).encode()[:-10]},
        "not valid JSON",
    ),
    "philly-not-an-array": ("philly", {"cluster_job_log": b'{"a": 1}'}, "expected a JSON array"),
    "missing-file": ("helios", {}, "cannot read file"),
}


@pytest.mark.parametrize("name", sorted(UNUSABLE))
def test_unusable_files_exit_2_naming_the_file_and_write_nothing(
    name, tmp_path, warehouse_path, capsys
):
    fmt, files, message = UNUSABLE[name]
    # Something already in the warehouse, which must stay exactly as it is.
    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    capsys.readouterr()
    before = _tables(warehouse_path)
    case = Case(fmt, files or {"absent.csv": b""}, records=0)
    path = _setup(tmp_path, case)
    if not files:
        path.unlink()
    assert main(_argv(case, path)) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert err.startswith("error: ") and "Traceback" not in err
    named = path / "pai_job_table.csv" if fmt == "pai" and "task" not in message else path
    assert str(named) in err or str(path) in err
    after = _tables(warehouse_path)
    assert all(after[t].equals(before[t]) for t in before)


def test_a_parquet_column_of_lists_is_refused(tmp_path, warehouse_path, capsys):
    path = tmp_path / "log.parquet"
    pl.DataFrame(
        {"JobID": ["a"], "Submitted": [1700000000], "GPUs": [[1, 2]], "Elapsed_min": [1.0]}
    ).write_parquet(path)
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        '[columns]\njob_id="JobID"\nsubmit_time="Submitted"\nnum_gpus="GPUs"\n'
        'duration="Elapsed_min"\n[time]\nepoch_unit="s"\n'
    )
    assert main(["ingest", str(path), "--format", "generic", "--mapping", str(mapping)]) == 2
    err = capsys.readouterr().err
    assert "column 'GPUs' (field 'num_gpus') holds" in err and "log.parquet" in err


# -- mappings: every wrong shape is a clear error (exit 2) naming the key -------------------

GOOD_MAPPING = GENERIC_MAPPING.read_text()
MAPPINGS = {
    "columns-not-a-table": ("columns = 5\n", "[columns] must be a table"),
    "time-not-a-table": (
        'time = "s"\n[columns]\njob_id = "JobID"\nsubmit_time = "Submitted"\n',
        "[time] must be a table",
    ),
    "column-name-is-an-array": (
        GOOD_MAPPING.replace('job_id = "JobID"', 'job_id = ["JobID"]'),
        "[columns] job_id must be a column name (a non-empty string), got an array",
    ),
    "column-name-is-a-table": (
        GOOD_MAPPING.replace('job_id = "JobID"', "job_id = { name = 'JobID' }"),
        "[columns] job_id must be a column name (a non-empty string), got a table",
    ),
    "column-name-is-empty": (
        GOOD_MAPPING.replace('job_id = "JobID"', 'job_id = ""'),
        "[columns] job_id must be a column name",
    ),
    "unknown-field": (
        GOOD_MAPPING.replace('model = "Model"', 'modle = "Model"'),
        "unknown field(s) ['modle'] in [columns]",
    ),
    "unknown-default": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = 1\ngpu_model = 'V100'"),
        "[defaults] cannot give ['gpu_model']",
    ),
    "default-not-a-number": (
        GOOD_MAPPING.replace("num_gpus = 1", 'num_gpus = "abc"'),
        "[defaults] num_gpus must be a number, got a string 'abc'",
    ),
    "default-a-table": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = { value = 1 }"),
        "[defaults] num_gpus must be a number, got a table",
    ),
    "default-negative": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = -1"),
        "[defaults] num_gpus must not be negative",
    ),
    "default-infinite": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = inf"),
        "[defaults] num_gpus must be finite",
    ),
    "default-boolean": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = true"),
        "[defaults] num_gpus must be a number, got a boolean",
    ),
    "default-fractional-workers": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = 1\nnum_workers = 1.5"),
        "[defaults] num_workers must be a whole number",
    ),
    "default-for-the-job-id": (
        GOOD_MAPPING.replace("num_gpus = 1", "num_gpus = 1\njob_id = 'x'"),
        "[defaults] cannot give ['job_id']",
    ),
    "epoch-unit-a-number": (
        GOOD_MAPPING.replace('epoch_unit = "s"', "epoch_unit = 5"),
        "[time] epoch_unit must be a string, got an integer 5",
    ),
    "epoch-unit-unknown": (
        GOOD_MAPPING.replace('epoch_unit = "s"', 'epoch_unit = "days"'),
        "[time] epoch_unit must be one of",
    ),
    "time-format-and-epoch": (
        GOOD_MAPPING.replace('epoch_unit = "s"', 'epoch_unit = "s"\nformat = "%Y"'),
        "[time] needs exactly one of format or epoch_unit",
    ),
    "time-format-without-directive": (
        GOOD_MAPPING.replace('epoch_unit = "s"', 'format = "YYYY-MM-DD"'),
        "has no % directive",
    ),
    "time-unknown-key": (
        GOOD_MAPPING.replace('epoch_unit = "s"', 'epoch_unit = "s"\nzone = "UTC"'),
        "unknown key(s) ['zone'] in [time]",
    ),
    "duration-unit-unknown": (
        GOOD_MAPPING.replace('unit = "min"', 'unit = "weeks"'),
        "[duration] unit must be one of",
    ),
    "status-value-unknown": (
        GOOD_MAPPING.replace('EXIT_OK = "completed"', 'EXIT_OK = "great"'),
        "[status] values must be among",
    ),
    "status-a-string": (
        'status = "completed"\n' + GOOD_MAPPING.replace('[status]\nEXIT_OK = "completed"\n', ""),
        "[status] must be a table",
    ),
    "unknown-top-level-key": ('colour = "blue"\n' + GOOD_MAPPING, "unknown key(s) ['colour']"),
    "required-field-unmapped": (
        GOOD_MAPPING.replace('submit_time = "Submitted"\n', ""),
        "[columns] must map the required field 'submit_time'",
    ),
    "bounds-not-a-table": ("bounds = 5\n" + GOOD_MAPPING, "[bounds] must be a table"),
    "bounds-unknown-key": (
        GOOD_MAPPING + "\n[bounds]\ngpus = 8\n",
        "unknown key(s) ['gpus'] in [bounds]",
    ),
    "bounds-ceiling-a-string": (
        GOOD_MAPPING + '\n[bounds]\nnum_gpus = "many"\n',
        "[bounds] num_gpus must be a number, got a string 'many'",
    ),
    "bounds-ceiling-negative": (
        GOOD_MAPPING + "\n[bounds]\nduration = -1\n",
        "[bounds] duration must be a positive finite number, got -1",
    ),
    "bounds-ceiling-infinite": (
        GOOD_MAPPING + "\n[bounds]\nmem_gb = inf\n",
        "[bounds] mem_gb must be a positive finite number, got inf",
    ),
    "bounds-workers-not-whole": (
        GOOD_MAPPING + "\n[bounds]\nnum_workers = 2.5\n",
        "[bounds] num_workers must be a whole number",
    ),
    "bounds-era-a-string": (
        GOOD_MAPPING + '\n[bounds]\nearliest = "1990"\n',
        "[bounds] earliest must be a TOML date or date-time",
    ),
    "bounds-era-reversed": (
        GOOD_MAPPING + "\n[bounds]\nearliest = 2030-01-01\nlatest = 2020-01-01\n",
        "[bounds] earliest 2030-01-01 00:00:00 must be before latest",
    ),
    "not-toml": ("[columns\njob_id = ", "cannot read mapping file"),
    "invalid-utf8": ("[columns]\njob_id = '\udcff'\n", "cannot read mapping file"),
}


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_malformed_mappings_exit_2_naming_the_key(name, tmp_path, warehouse_path, capsys):
    content, message = MAPPINGS[name]
    mapping = tmp_path / "mapping.toml"
    mapping.write_bytes(content.encode("utf-8", errors="surrogateescape"))
    argv = ["ingest", str(TRACES / "generic_sample.csv"), "--format", "generic"]
    assert main([*argv, "--mapping", str(mapping)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert "mapping.toml" in err and "Traceback" not in err
    assert not warehouse_path.exists()


def test_a_missing_mapping_file(tmp_path, warehouse_path, capsys):
    argv = ["ingest", str(TRACES / "generic_sample.csv"), "--format", "generic"]
    assert main([*argv, "--mapping", str(tmp_path / "nowhere.toml")]) == 2
    assert "nowhere.toml: cannot read mapping file" in capsys.readouterr().err
    assert main(argv) == 2
    assert "needs a mapping file" in capsys.readouterr().err
