"""Seeded random corruption of the sample traces: ingest never crashes and never
loses a record.

Each case corrupts one sample file 1-4 times (garbage values, missing or extra fields,
duplicated, dropped or cut-off lines, blank lines, quoted line breaks and commas, invalid
UTF-8, NUL bytes, CRLF endings, a BOM, stray quotes; for Philly, values of the wrong JSON
type, missing keys, deep nesting). The test keeps its own count of the records it wrote,
and checks it against an independent reading with Python's csv module (or json). Then:
either the file as a whole is refused with IngestError (only for the reasons listed in
ALLOWED_FILE_ERRORS), or accepted + quarantined = records, every quarantined record has a
distinct number, a field and a reason, and every twentieth case is stored through the contracts
into a real warehouse.
"""

from __future__ import annotations

import csv
import json
import random

import pytest

from tests.conftest import TRACES
from tracelib.ingest import IngestError, Mapping, load_trace, store_trace
from warehouse import connect

CASES_PER_FORMAT = {"generic": 100, "helios": 50, "pai": 50, "philly": 60}
GENERIC_MAPPING = Mapping.from_toml(TRACES / "generic_sample.toml")
# The only reasons a corrupted sample may be refused as a whole.
ALLOWED_FILE_ERRORS = ("no value of column", "file has no data rows", "file is empty")

GARBAGE = [
    "",
    " ",
    "abc",
    "-5",
    "1e400",
    "-1e400",
    "nan",
    "inf",
    "-0",
    "0x10",
    "١٢",
    "9" * 30,
    "2020-13-45 99:99:99",
    "1969-12-31 23:59:59",
    "None",
    "null",
    "1.5",
    "  7  ",
    "é€😀",
    "\x00",
    "a\x00b",
    "\udcff",  # written as the invalid UTF-8 byte 0xff
    "b\udcfe\udcffc",
    "a,b",  # the writer quotes it
    'say "hi"',  # the writer quotes it
    "two\nlines",  # the writer quotes it
    "\n",
    "1700000000",
    "2020-04-01 00:00:05",
]


def _field(value: str) -> str:
    """One CSV field, quoted when it must be."""
    if any(c in value for c in ',"\n\r'):
        return '"' + value.replace('"', '""') + '"'
    return value


def _csv_corruptions(rows: list[list[str]], rng: random.Random) -> tuple[list[list[str]], dict]:
    """Apply 1-4 record-level corruptions; returns the rows and layout options."""
    rows = [list(r) for r in rows]
    layout = {"blank_after": {}, "crlf": False, "bom": False, "no_final_newline": False}
    for _ in range(rng.randint(1, 4)):
        op = rng.choice(
            ["garbage"] * 6
            + ["drop_field", "add_field", "dup", "delete", "cut", "swap", "blank"]
            + ["layout"]
        )
        if not rows:
            break
        i = rng.randrange(len(rows))
        row = rows[i]
        if op == "garbage" and row:
            row[rng.randrange(len(row))] = rng.choice(GARBAGE)
        elif op == "drop_field" and row:
            del row[rng.randrange(len(row))]
        elif op == "add_field":
            row.insert(rng.randrange(len(row) + 1), rng.choice(GARBAGE))
        elif op == "dup":
            rows.insert(i, list(row))
        elif op == "delete" and len(rows) > 1:
            del rows[i]
        elif op == "cut" and row:
            keep = rng.randrange(len(row))
            cut = row[keep][: rng.randrange(len(row[keep]) + 1)]
            rows[i] = [*row[:keep], cut]
        elif op == "swap" and len(row) > 1:
            a, b = rng.sample(range(len(row)), 2)
            row[a], row[b] = row[b], row[a]
        elif op == "blank":
            layout["blank_after"][i] = rng.choice(["", "  ", "\t", " \t "])
        elif op == "layout":
            key = rng.choice(["crlf", "bom", "no_final_newline"])
            layout[key] = True
    return rows, layout


def _write_csv(header: list[str] | None, rows: list[list[str]], layout: dict) -> bytes:
    lines = [",".join(_field(f) for f in header)] if header is not None else []
    for i, row in enumerate(rows):
        lines.append(",".join(_field(f) for f in row))
        if i in layout["blank_after"]:
            lines.append(layout["blank_after"][i])
    end = "\r\n" if layout["crlf"] else "\n"
    text = end.join(lines) + ("" if layout["no_final_newline"] else end)
    data = text.encode("utf-8", errors="surrogateescape")
    return (b"\xef\xbb\xbf" if layout["bom"] else b"") + data


def _stray_quote(data: bytes, rng: random.Random) -> bytes:
    """A quote character dropped somewhere after the header: the record count is whatever
    csv makes of it."""
    at = rng.randrange(data.index(b"\n") + 1, len(data) + 1)
    return data[:at] + b'"' + data[at:]


def _csv_oracle(data: bytes, header: bool) -> int:
    """Records in the file as Python's csv module reads it; a record whose lines are all
    blank (whitespace only) is not a record."""
    text = data.decode("utf-8", errors="replace").removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.removesuffix("\r") for line in lines]
    reader = csv.reader([line + "\n" for line in lines], strict=False)
    count, start = 0, 0
    for _ in reader:
        end = reader.line_num
        if any(line.strip() for line in lines[start:end]):
            count += 1
        start = end
    return count - (1 if header else 0)


def _records(rows: list[list[str]]) -> int:
    """How many of the rows are records once written (a row written as a blank line is not)."""
    return sum(1 for r in rows if ",".join(_field(f) for f in r).strip())


def _sample_rows(path) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(path.read_text().splitlines()))
    return rows[0], rows[1:]


def _philly_corruptions(jobs: list, rng: random.Random) -> list:
    jobs = json.loads(json.dumps(jobs))
    values = [None, 5, -1.5, True, "", "None", "garbage", [], {}, [1, [2, [3]]], {"a": {"b": 1}}]
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(jobs))
        op = rng.choice(["value", "value", "delete", "element", "dup", "attempt", "deep"])
        job = jobs[i]
        if op == "value" and isinstance(job, dict) and job:
            job[rng.choice(sorted(job))] = rng.choice(values)
        elif op == "delete" and isinstance(job, dict) and job:
            del job[rng.choice(sorted(job))]
        elif op == "element":
            jobs[i] = rng.choice(values)
        elif op == "dup":
            jobs.insert(i, json.loads(json.dumps(job)))
        elif op == "attempt" and isinstance(job, dict) and isinstance(job.get("attempts"), list):
            for attempt in job["attempts"]:
                if isinstance(attempt, dict):
                    key = rng.choice(["start_time", "end_time", "detail"])
                    attempt[key] = rng.choice([*values, "2017-13-03 99:00:00", "2017-10-03"])
        elif op == "deep":
            nested: object = "x"
            for _ in range(rng.randint(10, 400)):
                nested = [nested] if rng.random() < 0.5 else {"k": nested}
            jobs[i] = (
                nested
                if rng.random() < 0.5
                else {**(job if isinstance(job, dict) else {}), "user": nested}
            )
    return jobs


def _case(fmt: str, seed: int, tmp_path) -> tuple[object, dict, int]:
    """Write one corrupted trace; returns (path to ingest, load_trace kwargs, records)."""
    rng = random.Random(f"{fmt}-{seed}")
    folder = tmp_path / f"{fmt}-{seed}"
    folder.mkdir()
    if fmt in ("generic", "helios"):
        sample = TRACES / ("generic_sample.csv" if fmt == "generic" else "helios_sample.csv")
        header, rows = _sample_rows(sample)
        rows, layout = _csv_corruptions(rows, rng)
        data = _write_csv(header, rows, layout)
        expected = _records(rows)
        if rng.random() < 0.1:
            data, expected = _stray_quote(data, rng), None
        oracle = _csv_oracle(data, header=True)
        assert expected is None or oracle == expected, "the test's own count disagrees with csv"
        path = folder / "trace.csv"
        path.write_bytes(data)
        kwargs = {"mapping": GENERIC_MAPPING} if fmt == "generic" else {}
        return path, kwargs, oracle
    if fmt == "pai":
        jobs = list(csv.reader((TRACES / "pai" / "pai_job_table.csv").read_text().splitlines()))
        tasks = list(csv.reader((TRACES / "pai" / "pai_task_table.csv").read_text().splitlines()))
        target = rng.choice(["jobs", "tasks", "both"])
        layout_tasks = {"blank_after": {}, "crlf": False, "bom": False, "no_final_newline": False}
        layout_jobs = dict(layout_tasks, blank_after={})
        if target in ("jobs", "both"):
            jobs, layout_jobs = _csv_corruptions(jobs, rng)
        if target in ("tasks", "both"):
            tasks, layout_tasks = _csv_corruptions(tasks, rng)
        job_data = _write_csv(None, jobs, layout_jobs)
        (folder / "pai_job_table.csv").write_bytes(job_data)
        (folder / "pai_task_table.csv").write_bytes(_write_csv(None, tasks, layout_tasks))
        expected = _records(jobs)
        assert _csv_oracle(job_data, header=False) == expected
        return folder, {}, expected
    sample = json.loads(
        (TRACES / "philly_cluster_job_log.json").read_bytes().decode(errors="replace")
    )
    jobs = _philly_corruptions(sample, rng)
    path = folder / "cluster_job_log.json"
    path.write_text(json.dumps(jobs))
    return path, {}, len(jobs)


@pytest.mark.parametrize("fmt", sorted(CASES_PER_FORMAT))
def test_random_corruption_never_crashes_and_never_loses_a_record(fmt, tmp_path):
    outcomes = {"loaded": 0, "refused": 0, "quarantined": 0}
    with connect(tmp_path / "wh.duckdb") as con:
        for seed in range(CASES_PER_FORMAT[fmt]):
            path, kwargs, records = _case(fmt, seed, tmp_path)
            where = f"{fmt} case {seed} ({path})"
            try:
                loaded = load_trace(path, fmt, source_id=f"{fmt}:{seed}", **kwargs)
            except IngestError as exc:
                assert any(reason in str(exc) for reason in ALLOWED_FILE_ERRORS), (where, exc)
                outcomes["refused"] += 1
                continue
            jobs, quarantine = loaded.jobs, loaded.quarantine
            assert jobs.height + quarantine.height == records, where
            numbers = quarantine["record_no"].to_list()
            assert len(set(numbers)) == len(numbers) and all(n >= 1 for n in numbers), where
            assert all(quarantine["field"].str.len_chars() > 0), where
            assert all(quarantine["reason"].str.len_chars() > 0), where
            assert jobs["job_id"].n_unique() == jobs.height, where
            if seed % 20 == 0:
                store_trace(con, loaded)  # through the pandera contracts and the DDL
            outcomes["loaded"] += 1
            outcomes["quarantined"] += quarantine.height > 0
    # The corruption really produced bad records, and most files were still loaded.
    assert outcomes["quarantined"] > CASES_PER_FORMAT[fmt] // 2, outcomes
    assert outcomes["refused"] < CASES_PER_FORMAT[fmt] // 10, outcomes
