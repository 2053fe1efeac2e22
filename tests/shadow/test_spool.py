"""The spool keeps every acknowledged record and quarantines torn or corrupt lines."""

from __future__ import annotations

import json
import multiprocessing
import zlib
from datetime import UTC, date, datetime

import orjson
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
    first = (tmp_path / "lab" / "2026-11-28.jsonl").read_bytes().splitlines()[0]
    text, _, tail = first.rpartition(b',"crc32":')
    assert int(tail.rstrip(b"}")) == zlib.crc32(text) == records[0].crc32
    assert list(json.loads(first)) == [
        "cluster",
        "kind",
        "payload",
        "received",
        "seq",
        "v",
        "crc32",
    ]
    assert spool_days(tmp_path) == [DAY]


def test_version_1_records_are_still_read(tmp_path):
    """A record as version 1 wrote it: canonical ASCII JSON, crc of that text."""
    fields = {"cluster": "lab", "kind": "observation", "payload": {"i": 5, "name": "é"}}
    fields |= {"received": "2026-11-28T12:00:00.000000Z", "seq": 1, "v": 1}
    line = json.dumps(
        {**fields, "crc32": record_crc(fields)}, sort_keys=True, separators=(",", ":")
    )
    path = tmp_path / "lab" / "2026-11-28.jsonl"
    path.parent.mkdir()
    path.write_text(line + "\n")
    records, bad = read_spool_file(path)
    assert bad == [] and records[0].payload == {"i": 5, "name": "é"}
    path.write_text(line.replace('"i":5', '"i":6') + "\n")
    assert read_spool_file(path)[1][0].reason == "crc32: mismatch (record corrupted)"
    write(tmp_path, 1)  # appends after it, as version 2
    records, bad = read_spool_file(path)
    assert [r.seq for r in records] == [2] and len(bad) == 1


def test_a_payload_may_embed_json_text_as_received(tmp_path):
    body = b'{"b": [1, 2.5, "x"],  "a": {"nested": null}}'
    with Spool(tmp_path, clock=fixed_clock) as spool:
        spool.append("snapshot", {"raw": orjson.Fragment(body), "n": 1}, cluster="lab")
    (record,), bad = read_spool(tmp_path, DAY)
    assert bad == [] and record.payload == {"raw": json.loads(body), "n": 1}
    assert body in (tmp_path / "lab" / "2026-11-28.jsonl").read_bytes()


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


def _append_from_a_process(root: str, start: int, n: int) -> None:
    with Spool(root, clock=fixed_clock) as spool:
        for i in range(start, start + n):
            spool.append("observation", {"i": i, "pad": "x" * (i % 7) * 100}, cluster="lab")


def test_writer_processes_share_a_spool_with_consecutive_sequence_numbers(tmp_path):
    """Three processes appending at once (a service's workers): every record read back
    once, in one sequence 1..n without gaps, nothing quarantined."""
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=_append_from_a_process, args=(str(tmp_path), k * 1000, 40))
        for k in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    records, bad = read_spool(tmp_path, DAY)
    assert bad == []
    assert [r.seq for r in records] == list(range(1, 121))
    assert sorted(r.payload["i"] for r in records) == sorted(
        k * 1000 + i for k in range(3) for i in range(40)
    )


def test_a_closed_spool_refuses_appends(tmp_path):
    spool = Spool(tmp_path, clock=fixed_clock)
    spool.close()
    with pytest.raises(SpoolError, match="closed"):
        spool.append("observation", {}, cluster="lab")


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
