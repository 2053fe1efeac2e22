"""The hostile-input corpus: impossible values, special files and odd encodings, through
the CLI, in the style of tests/test_bad_input.py.

Record cases state how many records the file holds and which are quarantined (field and
a phrase of the reason); the test checks exit 0, accepted + quarantined = records and the
quarantine rows. Refused cases must exit 2 with a message naming the file, without a
traceback, and leave the warehouse file byte for byte as it was. Special files (named
pipes, /dev/zero) run under an alarm, so a read that blocks fails the test instead of
hanging it. Stored-row cases put an impossible row straight into the warehouse (as one
stored without the bounds) and check that describe, replay and report still answer.
"""

from __future__ import annotations

import hashlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from tests.test_bad_input import (
    G_HEADER,
    GENERIC_MAPPING,
    _counts,
    assert_accounted,
    g,
    pai_job,
    pai_task,
    text,
)
from tests.test_bad_input import Case as BadInputCase
from tracelib.ingest import IngestError
from warehouse import connect, read_frame


def rec(job: str, submit: str = "1700000000", minutes: str = "60", gpus: str = "1") -> str:
    """A generic record (generic_sample.toml: epoch seconds, durations in minutes) whose
    submit time, duration and GPUs a case sets; no start or end time."""
    return f"{job},{submit},,,{minutes},{gpus},ann,EXIT_OK,"


@dataclass
class Case(BadInputCase):
    """A bad-input case with, where it sets one, a mapping of its own."""

    mapping: str | None = None
    """Mapping TOML (default: tests/data/traces/generic_sample.toml)."""


def impossible(records: int, bad: int, fld: str, phrase: str, **value: str) -> Case:
    """A generic CSV of `records` records (`rec`), the `bad`-th of them (from 1) with the
    impossible `value`: that record alone is quarantined, under `fld` with `phrase`."""
    lines = (rec(f"a{k}", **(value if k == bad else {})) for k in range(1, records + 1))
    # Record k stands on line k + 1, after the header.
    return Case.generic(*lines, records=records, quarantined={bad + 1: (fld, phrase)})


RECORDS = {
    "epoch-milliseconds": impossible(
        3, 2, "submit_time", "1.7e+12 looks like epoch milliseconds", submit="1700000000000"
    ),
    "epoch-11-digits": impossible(
        2,
        2,
        "submit_time",
        "outside the plausible era 2000-01-01 to 2100-01-01",
        submit="99999999999",
    ),
    "gpus-1e308": impossible(2, 1, "num_gpus", "above the ceiling of 100000 GPUs", gpus="1e308"),
    "duration-subnormal": impossible(2, 2, "duration_s", "subnormal", minutes="6e-319"),
    "duration-over-ceiling": impossible(
        2, 1, "duration_s", "absurd duration", minutes=str(2 * 525_600)
    ),
    "unterminated-quote": Case.generic(
        # The quote opened on line 5 never closes: that line alone is quarantined.
        *(g(f"a{i}") for i in range(1, 4)),
        g("a4", user='"bob'),
        *(g(f"a{i}") for i in range(5, 11)),
        records=10,
        quarantined={5: ("record", "a quote opened in this record is never closed")},
    ),
    "utf16-with-bom": Case(
        "generic",
        {"t.csv": text(G_HEADER, g("a1"), g("a2", user="zoë"), g("a3")).decode().encode("utf-16")},
        records=3,
    ),
    "utf16-pai-job-table": Case(
        "pai",
        {
            "pai_job_table.csv": text(*(pai_job(f"j{i}") for i in range(1, 12)))
            .decode()
            .encode("utf-16"),
            "pai_task_table.csv": text(*(pai_task(f"j{i}") for i in range(1, 12))),
        },
        records=11,
    ),
    "cr-only-line-ends": Case(
        "generic",
        {"t.csv": text(G_HEADER, g("a1"), g("a2"), g("a3"), end="\r")},
        records=3,
    ),
    "nul-in-user-name": Case.generic(
        g("a1"),
        g("a2", user="b\x00ob"),
        g("a3"),
        records=3,
        quarantined={3: ("user_name", "NUL byte")},
    ),
    "bounds-raised-in-the-mapping": Case.generic(
        # [bounds] widens the era and the GPU ceiling: both records are accepted.
        rec("a1", submit="1000"),
        rec("a2", gpus="500000"),
        mapping=GENERIC_MAPPING.read_text()
        + "\n[bounds]\nearliest = 1970-01-01\nnum_gpus = 1000000\n",
        records=2,
    ),
    "bounds-lowered-in-the-mapping": Case.generic(
        rec("a1", gpus="64"),
        rec("a2", minutes="600"),
        rec("a3"),
        mapping=GENERIC_MAPPING.read_text() + "\n[bounds]\nnum_gpus = 32\nduration = 3600\n",
        records=3,
        quarantined={
            2: ("num_gpus", "above the ceiling of 32 GPUs"),
            3: ("duration_s", "absurd duration"),
        },
    ),
}


def _setup(tmp_path: Path, case: Case) -> tuple[Path, Path | None]:
    folder = tmp_path / "in"
    folder.mkdir()
    for name, content in case.files.items():
        (folder / name).write_bytes(content)
    mapping = GENERIC_MAPPING if case.fmt == "generic" else None
    if case.mapping is not None:
        mapping = tmp_path / "m.toml"
        mapping.write_text(case.mapping)
    path = folder if case.fmt == "pai" else folder / next(iter(case.files))
    return path, mapping


def _argv(path: Path, fmt: str, mapping: Path | None, *extra: str) -> list[str]:
    argv = ["ingest", str(path), "--format", fmt, "--quiet", *extra]
    if mapping is not None:
        argv += ["--mapping", str(mapping)]
    return argv


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_impossible_records_are_quarantined_and_nothing_is_lost(
    name, tmp_path, warehouse_path, capsys
):
    case = RECORDS[name]
    path, mapping = _setup(tmp_path, case)
    assert main(_argv(path, case.fmt, mapping)) == 0
    jobs, _ = assert_accounted(capsys, warehouse_path, case.records, case.quarantined)
    assert not any("\x00" in (u or "") for u in jobs["user_name"].to_list())


def test_utf16_text_is_stored_as_written(tmp_path, warehouse_path, capsys):
    path, mapping = _setup(tmp_path, RECORDS["utf16-with-bom"])
    assert main(_argv(path, "generic", mapping)) == 0
    with connect(warehouse_path, read_only=True) as con:
        users = read_frame(con, "SELECT user_name FROM jobs ORDER BY job_id")["user_name"]
    assert users.to_list() == ["ann", "zoë", "ann"]


# -- refused: exit 2 naming the file, the warehouse byte for byte as it was ----------------


@pytest.fixture
def no_hang():
    """Fail (instead of hanging) when a command blocks for 30 s."""

    def timeout(signum, frame):
        raise TimeoutError("the command blocked (a read of a special file?)")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def stocked(warehouse_path, capsys) -> Path:
    """A warehouse holding one source (the sample Helios trace)."""
    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    capsys.readouterr()
    return warehouse_path


def _good_csv(tmp_path: Path) -> Path:
    path = tmp_path / "good.csv"
    path.write_bytes(text(G_HEADER, g("a1"), g("a2")))
    return path


def _fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


SOURCE_IDS = {
    "empty-source-id": ("", "--source-id '' is empty"),
    "blank-source-id": ("   ", "is empty"),
    "ansi-source-id": ("\x1b[31mred\x1b[0m", "'\\x1b[31mred\\x1b[0m' holds control characters"),
    "source-id-20000-chars": ("x" * 20_000, "has 20,000 characters; at most 200"),
}
"""Refused --source-id values of a good file: name -> (the value, a phrase of the message)."""


def _refused(tmp_path: Path, name: str) -> tuple[list[str], str, str]:
    """(argv, the path the message must name, a phrase of the message)."""
    good = _good_csv(tmp_path)
    if name == "fifo-trace":
        fifo = _fifo(tmp_path, "t.csv")
        return _argv(fifo, "generic", GENERIC_MAPPING), str(fifo), "is a named pipe"
    if name == "fifo-mapping":
        fifo = _fifo(tmp_path, "m.toml")
        return _argv(good, "generic", fifo), str(fifo), "mapping file is a named pipe"
    if name == "fifo-pai-table":
        folder = tmp_path / "pai"
        folder.mkdir()
        (folder / "pai_task_table.csv").write_bytes(text(pai_task("j1")))
        fifo = _fifo(folder, "pai_job_table.csv")
        return _argv(folder, "pai", None), str(fifo), "is a named pipe"
    if name == "symlink-to-fifo":
        link = tmp_path / "link.csv"
        link.symlink_to(_fifo(tmp_path, "target"))
        return _argv(link, "generic", GENERIC_MAPPING), str(link), "symbolic link to"
    if name == "dev-zero":
        return _argv(Path("/dev/zero"), "helios", None), "/dev/zero", "is a character device"
    if name == "directory":
        folder = tmp_path / "d.csv"
        folder.mkdir()
        return _argv(folder, "generic", GENERIC_MAPPING), str(folder), "is a directory"
    if name == "duplicate-header-column":
        path = tmp_path / "dup.csv"
        path.write_bytes(text(G_HEADER + ",GPUs", g("a1") + ",3"))
        return (
            _argv(path, "generic", GENERIC_MAPPING),
            str(path),
            "column 'GPUs' (mapped to field 'num_gpus') appears more than once",
        )
    if name in SOURCE_IDS:
        source_id, phrase = SOURCE_IDS[name]
        argv = _argv(good, "generic", GENERIC_MAPPING, "--source-id", source_id)
        return argv, str(good), phrase
    raise AssertionError(name)


REFUSED = (
    "fifo-trace",
    "fifo-mapping",
    "fifo-pai-table",
    "symlink-to-fifo",
    "dev-zero",
    "directory",
    "duplicate-header-column",
    "empty-source-id",
    "blank-source-id",
    "ansi-source-id",
    "source-id-20000-chars",
)


@pytest.mark.parametrize("name", REFUSED)
def test_refused_input_exits_2_and_leaves_the_warehouse_as_it_was(
    name, tmp_path, stocked, capsys, no_hang
):
    argv, named, phrase = _refused(tmp_path, name)
    before = _sha(stocked)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert phrase in err, err
    assert named in err, err
    assert "\x1b" not in err and len(err) < 1000, err
    assert _sha(stocked) == before


def test_a_file_over_the_size_cap_is_refused(tmp_path, stocked, capsys, monkeypatch):
    big = tmp_path / "big.csv"
    big.write_bytes(text(G_HEADER, *(g(f"a{i}") for i in range(40))))  # 2.6 KiB
    monkeypatch.setenv("SCHEDLAB_MAX_FILE_BYTES", "1000")  # the mapping (373 bytes) fits
    before = _sha(stocked)
    assert main(_argv(big, "generic", GENERIC_MAPPING)) == 2
    err = capsys.readouterr().err
    assert str(big) in err and "more than the 1000 bytes a file may hold" in err, err
    assert "SCHEDLAB_MAX_FILE_BYTES" in err
    assert _sha(stocked) == before
    # Raised above the file's size, the same file is read.
    monkeypatch.setenv("SCHEDLAB_MAX_FILE_BYTES", "1M")
    assert main(_argv(big, "generic", GENERIC_MAPPING)) == 0


def test_an_unusable_size_cap_is_a_clear_error(tmp_path, stocked, capsys, monkeypatch):
    monkeypatch.setenv("SCHEDLAB_MAX_FILE_BYTES", "lots")
    assert main(_argv(_good_csv(tmp_path), "generic", GENERIC_MAPPING)) == 2
    assert "SCHEDLAB_MAX_FILE_BYTES='lots' is not a size" in capsys.readouterr().err


def test_a_symlinked_file_is_read_but_its_content_never_quoted(tmp_path, warehouse_path, capsys):
    # A file outside the traces, reached through a link: its first value must not appear.
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("Submitted,GPUs\nroot-password-hash,1\n")
    mapping = tmp_path / "m.toml"
    mapping.write_text(
        '[columns]\nsubmit_time = "Submitted"\nnum_gpus = "GPUs"\n[time]\nformat = "%Y"\n'
    )
    link = tmp_path / "trace.csv"
    link.symlink_to(secret)
    assert main(_argv(link, "generic", mapping)) == 2
    err = capsys.readouterr().err
    assert "no value of column 'Submitted'" in err and str(link) in err
    assert "root-password-hash" not in err
    # The same file named directly: the example helps the user fix the format.
    assert main(_argv(secret, "generic", mapping)) == 2
    assert "root-password-hash" in capsys.readouterr().err
    assert not warehouse_path.exists()


def test_special_files_in_incoming_are_refused_one_by_one(tmp_path, warehouse_path, no_hang):
    from pipelines.config import trace_inputs_from_dir
    from pipelines.stages import ingest_stage

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    os.mkfifo(incoming / "generic-pipe.csv")
    (incoming / "generic-pipe.toml").write_text(GENERIC_MAPPING.read_text())
    (incoming / "generic-good.csv").write_bytes(text(G_HEADER, g("a1")))
    os.mkfifo(incoming / "generic-good.toml")  # its mapping is a pipe
    os.symlink("/dev/zero", incoming / "helios-zero.csv")
    errors = {}
    for trace in trace_inputs_from_dir(incoming):
        with pytest.raises(IngestError) as caught:
            ingest_stage(warehouse_path, trace.path, trace.format, mapping=trace.mapping)
        errors[Path(trace.path).name] = str(caught.value)
    assert sorted(errors) == ["generic-good.csv", "generic-pipe.csv", "helios-zero.csv"]
    assert "generic-good.toml: mapping file is a named pipe" in errors["generic-good.csv"]
    assert "generic-pipe.csv: file is a named pipe" in errors["generic-pipe.csv"]
    assert "symbolic link to /dev/zero" in errors["helios-zero.csv"]
    assert not warehouse_path.exists()


# -- rows already stored with impossible values: every later command still answers --------


def _store_impossible_rows(warehouse: Path) -> None:
    """Copies of a stored job with a year-52671 submit time, an 11-digit-epoch submit time
    (year 5138), 1e308 GPUs and a subnormal duration, as a warehouse written without the
    bounds would hold them."""
    with connect(warehouse) as con:
        for job_id, change in (
            ("bad-ms", "TIMESTAMP '52671-03-01 00:00:00' AS submit_time"),
            ("bad-11-digit", "TIMESTAMP '5138-11-16 09:46:40' AS submit_time"),
            ("bad-gpus", "CAST(1e308 AS DOUBLE) AS num_gpus"),
            ("bad-duration", "CAST(6e-319 AS DOUBLE) AS duration_s"),
        ):
            # A moved submit time takes the start and end with it (the table checks order).
            times = ", NULL AS start_time, NULL AS end_time" if "submit_time" in change else ""
            con.execute(
                f"INSERT INTO jobs SELECT * REPLACE ('{job_id}' AS job_id, {change}{times}) "
                "FROM jobs WHERE source_id = 'helios:helios_sample' LIMIT 1"
            )


def test_stored_impossible_rows_do_not_break_describe_replay_or_report(
    tmp_path, stocked, capsys, no_hang
):
    _store_impossible_rows(stocked)
    assert main(["describe", "helios:helios_sample"]) == 0
    out = capsys.readouterr().out
    assert "4 stored job(s) hold impossible values" in out
    assert "52671" not in out
    assert main(["replay", "helios:helios_sample", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "left out: 4 stored with impossible values" in out
    # Sized by the readable jobs: a handful of servers, not 1e304.
    servers = int(out.split(" jobs replayed; cluster ")[1].split(" servers")[0].replace(",", ""))
    assert servers < 100
    report = tmp_path / "report.html"
    assert main(["report", "--out", str(report)]) == 0
    assert "hold impossible values" in report.read_text()
    # The same file ingested again is not "unchanged": its source is read afresh.
    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    assert "helios:helios_sample: replaced" in capsys.readouterr().out
    assert main(["describe", "helios:helios_sample"]) == 0
    assert "impossible values" not in capsys.readouterr().out


def test_the_fast_way_applies_the_same_bounds(tmp_path, stocked, capsys):
    # A plain CSV into an existing warehouse is read by DuckDB (tracelib/ingest/bulk.py):
    # values at the bounds are accepted, values beyond them quarantined, as the careful way.
    path = tmp_path / "plain.csv"
    path.write_bytes(
        text(
            G_HEADER,
            rec("edge-start", submit="946684800"),  # 2000-01-01 00:00:00, the era's start
            rec("edge-gpus", gpus="100000"),
            rec("edge-duration", minutes="525600"),  # 365 days
            rec("late", submit="4102444800"),  # 2100-01-01, the era's end (excluded)
            rec("huge", gpus="100001"),
            rec("tiny", minutes="1e-310"),
        )
    )
    assert main(_argv(path, "generic", GENERIC_MAPPING)) == 0
    accepted, quarantined = _counts(capsys.readouterr().out)
    assert (accepted, quarantined) == ("3", "3")
    with connect(stocked, read_only=True) as con:
        rows = read_frame(
            con,
            "SELECT record_no, field FROM quarantine WHERE source_id = 'generic:plain' "
            "ORDER BY record_no",
        )
    assert rows.rows() == [(5, "submit_time"), (6, "num_gpus"), (7, "duration_s")]


def test_a_century_of_span_lists_only_the_hours_with_arrivals(tmp_path, warehouse_path, capsys):
    # Two jobs a century apart (both inside the era): describe stays as small as the source.
    path = tmp_path / "span.csv"
    path.write_bytes(text(G_HEADER, rec("first", submit="946684800"), rec("last", "4102444000")))
    assert main(_argv(path, "generic", GENERIC_MAPPING)) == 0
    capsys.readouterr()
    assert main(["describe", "generic:span"]) == 0
    out = capsys.readouterr().out
    assert "listed for the 2 hours with arrivals only" in out, out
    assert "(2 hours, left to right)" in out


def test_replay_does_not_size_a_cluster_beyond_a_million_servers(tmp_path, warehouse_path, capsys):
    # 100 jobs of 100,000 GPUs at once: 1.25 million servers of 8 GPUs.
    path = tmp_path / "wide.csv"
    path.write_bytes(text(G_HEADER, *(rec(f"w{i}", gpus="100000") for i in range(100))))
    assert main(_argv(path, "generic", GENERIC_MAPPING)) == 0
    capsys.readouterr()
    assert main(["replay", "generic:wide", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "needs 1,250,000 servers of 8 GPUs, more than the 1,000,000" in err, err
    assert "--servers" in err


def test_describe_never_prints_control_characters_from_the_trace(tmp_path, warehouse_path, capsys):
    # A user name and a repeated job id holding ANSI escapes reach describe's output
    # (top users, quarantine reasons) escaped.
    path = tmp_path / "ansi.csv"
    path.write_bytes(text(G_HEADER, g("\x1b[2Jx", user="\x1b[31mmallory"), g("\x1b[2Jx"), g("a3")))
    assert main(_argv(path, "generic", GENERIC_MAPPING)) == 0
    capsys.readouterr()
    assert main(["describe", "generic:ansi"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\\x1b[31mmallory" in out and "duplicate job_id \\x1b[2Jx" in out, out


def test_derive_leaves_stored_impossible_rows_out(stocked):
    from tracelib.workloads import DeriveConfig, derive_workloads

    _store_impossible_rows(stocked)
    with connect(stocked, read_only=True) as con:
        jobs = read_frame(con, "SELECT * FROM jobs")
        sources = read_frame(con, "SELECT * FROM trace_sources")
    _, derived = derive_workloads(jobs, sources, DeriveConfig(jobs_per_sequence=2))
    ids = derived["job_id"].to_list()
    assert ids and not any(i.startswith("bad-") for i in ids)
    assert int(derived["arrival_slot"].max()) < 1000
