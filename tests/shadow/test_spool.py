"""The spool keeps every acknowledged record and quarantines torn or corrupt lines."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import pytest

from tracelib.shadow.spool import (
    Spool,
    SpoolError,
    cluster_slug,
    read_spool,
    read_spool_file,
    record_crc,
    spool_days,
)

DAY = date(2026, 11, 28)


def fixed_clock():
    return datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def write(root, n, cluster="lab"):
    with Spool(root, clock=fixed_clock) as spool:
        return [spool.append("observation", {"i": i}, cluster=cluster) for i in range(n)]


def test_appends_read_back_in_order_with_sequence_and_crc(tmp_path):
    written = write(tmp_path, 3)
    records, bad = read_spool(tmp_path, DAY)
    assert bad == []
    assert [r.seq for r in records] == [1, 2, 3]
    assert [r.payload["i"] for r in records] == [0, 1, 2]
    assert records == written
    line = json.loads((tmp_path / "lab" / "2026-11-28.jsonl").read_text().splitlines()[0])
    crc = line.pop("crc32")
    assert crc == record_crc(line)
    assert spool_days(tmp_path) == [DAY]


def test_torn_last_line_is_quarantined_and_the_next_append_starts_fresh(tmp_path):
    write(tmp_path, 2)
    path = tmp_path / "lab" / "2026-11-28.jsonl"
    text = path.read_text()
    path.write_text(text + text.splitlines()[0][:25])  # a crash mid-write of a third record
    records, bad = read_spool_file(path)
    assert [r.seq for r in records] == [1, 2]
    assert [(b.line, b.reason) for b in bad] == [(3, "torn: last line has no newline")]
    assert bad[0].file == path

    write(tmp_path, 2)
    records, bad = read_spool_file(path)
    assert [r.seq for r in records] == [1, 2, 3, 4]
    assert [r.payload["i"] for r in records] == [0, 1, 0, 1]
    assert len(bad) == 1 and bad[0].line == 3 and "not JSON" in bad[0].reason


def test_a_flipped_byte_fails_the_crc_and_reading_goes_on(tmp_path):
    write(tmp_path, 3)
    path = tmp_path / "lab" / "2026-11-28.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"i":1', '"i":7')
    path.write_text("".join(lines))
    records, bad = read_spool_file(path)
    assert [r.seq for r in records] == [1, 3]
    assert [(b.line, b.reason) for b in bad] == [(2, "crc32: mismatch (record corrupted)")]


def test_out_of_sequence_lines_are_quarantined(tmp_path):
    write(tmp_path, 2)
    path = tmp_path / "lab" / "2026-11-28.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1] + lines[0])
    records, bad = read_spool_file(path)
    assert [r.seq for r in records] == [1, 2]
    assert bad[0].line == 3 and bad[0].reason.startswith("seq: out of sequence")


def test_garbage_lines_are_quarantined_with_reasons(tmp_path):
    path = tmp_path / "lab" / "2026-11-28.jsonl"
    path.parent.mkdir()
    path.write_bytes(b'[1,2]\n{"v":1}\n\xff\xfe\n')
    records, bad = read_spool_file(path)
    assert records == []
    assert [b.line for b in bad] == [1, 2, 3]
    assert "not a JSON object" in bad[0].reason and "missing" in bad[1].reason


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("../../etc", "etc"),
        ("/abs/path", "abs-path"),
        ("..", "cluster"),
        ("Prod GPU #1", "prod-gpu-1"),
        ("a" * 300, "a" * 64),
        (".hidden", "hidden"),
    ],
)
def test_cluster_names_cannot_leave_the_spool(tmp_path, name, slug):
    assert cluster_slug(name) == slug
    with Spool(tmp_path / "spool", clock=fixed_clock) as spool:
        spool.append("snapshot", {}, cluster=name)
    files = list((tmp_path / "spool").rglob("*.jsonl"))
    assert [f.relative_to(tmp_path / "spool").parts for f in files] == [(slug, "2026-11-28.jsonl")]


def test_a_second_writer_is_refused(tmp_path):
    with Spool(tmp_path), pytest.raises(SpoolError, match="in use"):
        Spool(tmp_path)
    Spool(tmp_path).close()  # released on close


def test_an_unwritable_spool_raises_spool_error(tmp_path):
    # The day's file path is taken by a directory: the write fails as a full disk would
    # (permissions cannot be used, tests may run as root).
    (tmp_path / "lab" / "2026-11-28.jsonl").mkdir(parents=True)
    with Spool(tmp_path, clock=fixed_clock) as spool, pytest.raises(SpoolError, match="cannot"):
        spool.append("observation", {}, cluster="lab")


def test_append_many_writes_consecutive_records_at_once(tmp_path):
    with Spool(tmp_path, clock=fixed_clock) as spool:
        spool.append("snapshot", {"first": True}, cluster="lab")
        got = spool.append_many("observation", [{"i": 0}, {"i": 1}], cluster="lab")
    assert [r.seq for r in got] == [2, 3]
    records, bad = read_spool(tmp_path, DAY)
    assert bad == [] and [r.kind for r in records] == ["snapshot", "observation", "observation"]
