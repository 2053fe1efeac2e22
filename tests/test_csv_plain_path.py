"""The plain-file way of reading CSV records (polars' reader) gives exactly the records the
line-by-line way gives, and is taken only for plain files (tracelib.ingest.csvrecords)."""

from __future__ import annotations

import polars as pl
import pytest

import tracelib.ingest.csvrecords as csvrecords
from benchmarks.bench_ingest import make_csv
from tests.conftest import TRACES
from tests.test_ingest_fuzz import _case
from tracelib.ingest.csvrecords import read_csv_records

PAI_COLUMNS = ("a", "b", "c", "d", "e", "f", "g")


def _both(path, data: bytes, monkeypatch, **kwargs):
    """(records read as the code chooses, records read line by line)."""
    chosen = read_csv_records(path, data, **kwargs)
    with monkeypatch.context() as patch:
        patch.setattr(csvrecords, "_plain_records", lambda *a, **k: None)
        careful = read_csv_records(path, data, **kwargs)
    return chosen, careful


def _assert_same(chosen, careful) -> None:
    assert chosen.table.equals(careful.table)
    assert chosen.n_fields.equals(careful.n_fields, check_names=True)
    assert chosen.problems.equals(careful.problems)
    n = careful.table.height
    numbers = [0, 1, *careful.table["record_no"].to_list(), n + 5, n + 50]
    assert chosen.raw(numbers) == careful.raw(numbers)
    if chosen.blank_free:  # trimming would change nothing
        text = [c for c, t in chosen.table.schema.items() if t == pl.Utf8]
        trimmed = chosen.table.select(pl.col(text).str.strip_chars())
        assert trimmed.equals(chosen.table.select(text))


def _fuzz_files(tmp_path):
    for fmt, cases in (("generic", 60), ("helios", 30), ("pai", 30)):
        for seed in range(cases):
            path, _, _ = _case(fmt, seed, tmp_path)
            if fmt == "pai":
                path = path / "pai_job_table.csv"
            yield fmt, path


def test_plain_and_careful_reads_agree_on_corrupted_samples(tmp_path, monkeypatch):
    plain = 0
    for fmt, path in _fuzz_files(tmp_path):
        data = path.read_bytes()
        kwargs = {}
        if fmt == "pai":
            width = data.split(b"\n")[0].count(b",") + 1
            kwargs = {"has_header": False, "columns": [f"c{i}" for i in range(width)]}
        try:
            chosen, careful = _both(path, data, monkeypatch, **kwargs)
        except csvrecords.IngestError:
            continue
        _assert_same(chosen, careful)
        header = kwargs.get("has_header", True)
        columns = kwargs.get("columns")
        plain += csvrecords._plain_records(data, has_header=header, columns=columns) is not None
    assert plain > 0  # some corrupted files are still plain: both ways were compared


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.parametrize("final_newline", [False, True])
def test_plain_files_take_the_plain_way(tmp_path, monkeypatch, crlf, final_newline):
    path = tmp_path / "jobs.csv"
    make_csv(path, 2000)
    data = path.read_bytes().removesuffix(b"\n")
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    if final_newline:
        data += b"\r\n" if crlf else b"\n"
    plain = csvrecords._plain_records(data, has_header=True, columns=None)
    assert plain is not None and plain.blank_free
    _assert_same(*_both(path, data, monkeypatch))
    spaced = data.replace(b",u1", b", u1 ", 1)
    assert not csvrecords._plain_records(spaced, has_header=True, columns=None).blank_free
    _assert_same(*_both(path, spaced, monkeypatch))
    sample = (TRACES / "helios_sample.csv").read_bytes()
    _assert_same(*_both(path, sample, monkeypatch))


@pytest.mark.parametrize(
    "data",
    [
        b'id,gpus\n1,2\n"3",4\n',  # a quote
        b"id,gpus\n1,2\n\n3,4\n",  # a blank line
        b"id,gpus\n1,2\n   \n3,4\n",  # a whitespace-only line
        b"id,gpus\n1,2\n3\n",  # a short line
        b"id,gpus\n1,2,9\n3\n",  # extra and short lines (same comma count)
        b"id,gpus\n1,2,9\n3,4\n",  # an extra field
        b"\xef\xbb\xbfid,gpus\n1,2\n",  # a byte-order mark
        b"id,gpus\n1,2\r3,4\n",  # a lone carriage return
        b"id,gpus\n1,\xff\n",  # invalid UTF-8
        b"id\n1\n\n2\n",  # one column: a blank line would pass for a record
        b"id,gpus\n",  # no data record
    ],
)
def test_files_that_are_not_plain_are_read_line_by_line(tmp_path, monkeypatch, data):
    assert csvrecords._plain_records(data, has_header=True, columns=None) is None
    path = tmp_path / "t.csv"
    if data.count(b"\n") < 2:  # no data record: refused, the same way
        with pytest.raises(csvrecords.IngestError, match="no data rows"):
            read_csv_records(path, data)
        return
    _assert_same(*_both(path, data, monkeypatch))


def test_a_headerless_file_needs_the_given_width(tmp_path, monkeypatch):
    data = b"1,2,3,4,5,6,7\n8,9,10,11,12,13,14\n"
    assert csvrecords._plain_records(data, has_header=False, columns=PAI_COLUMNS) is not None
    assert csvrecords._plain_records(data, has_header=False, columns=PAI_COLUMNS[:3]) is None
    _assert_same(
        *_both(tmp_path / "t.csv", data, monkeypatch, has_header=False, columns=PAI_COLUMNS)
    )
