"""The nightly ingest of the shadow spool, end to end from a spool written through the spool
module (tests/shadow/spool_case.py, checked by hand): jobs, quarantine (a torn last line, a
job never submitted), `shadow_decisions` rows and the per-day summary, idempotent re-runs,
a failed ingest leaving the warehouse as it was, the counterfactual replay and the report."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import polars as pl
import pytest

from pipelines.cli import main
from pipelines.report import write_report
from pipelines.shadow_ingest import shadow_ingest_stage
from pipelines.shadow_replay import compare, shadow_replay_stage
from tests.shadow.spool_case import D1, D2, SLUG, SOURCE_ID, write_spool
from tracelib.shadow.spool import Spool
from tracelib.shadow.trace import load_shadow_day
from warehouse import connect, read_frame

TODAY = date(2026, 11, 28)


@pytest.fixture
def spool(warehouse_path):
    """The case's spool in the default place, beside the warehouse."""
    write_spool(warehouse_path.parent / "shadow-spool")
    return warehouse_path.parent / "shadow-spool"


def tables(warehouse_path) -> dict[str, pl.DataFrame]:
    with connect(warehouse_path, read_only=True) as con:
        return {
            name: read_frame(con, f"SELECT * FROM {name} ORDER BY ALL")
            for name in ("trace_sources", "jobs", "quarantine", "shadow_decisions")
        }


def test_a_closed_day_becomes_a_trace_and_its_decisions(spool, warehouse_path):
    [day] = shadow_ingest_stage(warehouse_path, today=TODAY)  # 2026-11-28 is still open
    assert (day.source_id, day.outcome, day.decisions, day.policies) == (
        SOURCE_ID,
        "new",
        3,
        ("fifo",),
    )
    got = tables(warehouse_path)
    assert got["trace_sources"]["format"].to_list() == ["shadow"]
    jobs = got["jobs"].sort("job_id")
    assert jobs.select("job_id", "status", "num_gpus").rows() == [
        ("A", "completed", 2.0),
        ("B", "running", 4.0),
        ("C", "pending", 1.0),
    ]
    a = jobs.row(0, named=True)
    assert (a["submit_time"], a["start_time"], a["end_time"], a["duration_s"]) == (
        datetime(2026, 11, 27, 8, 50),
        datetime(2026, 11, 27, 9, 1),
        datetime(2026, 11, 27, 9, 30),
        1740.0,
    )
    quarantine = got["quarantine"].select("record_no", "field", "reason").rows()
    assert quarantine[0][:2] == (7, "submitted") and "job D" in quarantine[0][2]
    assert quarantine[1][:2] == (8, "record") and "torn" in quarantine[1][2]
    assert got["quarantine"]["raw_record"][1].startswith('{"v":1,"seq":8')
    rows = {
        (r["decision_id"], r["job_id"]): r for r in got["shadow_decisions"].iter_rows(named=True)
    }
    assert sorted(rows) == [(D1, "A"), (D1, "B"), (D2, "B")]
    both = rows[(D1, "A")]
    assert (both["policy_start"], both["real_started"], both["same_action"]) == (True, True, True)
    assert json.loads(both["policy_servers"]) == ["s1"] and both["same_servers"] is True
    held = rows[(D1, "B")]  # started at 09:15, after the next snapshot (09:10)
    assert (held["policy_start"], held["real_started"], held["same_action"]) == (
        False,
        False,
        True,
    )
    assert held["same_servers"] is None
    converse = rows[(D2, "B")]  # 09:15 is within the median gap (10 min) after 09:10
    assert (converse["policy_start"], converse["real_started"], converse["same_action"]) == (
        False,
        True,
        False,
    )
    assert json.loads(converse["real_servers"]) == ["s2"] and converse["real_gpus"] == 4.0
    with connect(warehouse_path, read_only=True) as con:
        summary = read_frame(con, "SELECT * FROM shadow_agreement").row(0, named=True)
    assert summary["decisions"] == 2 and summary["pending_rows"] == 3
    assert summary["agreement"] == pytest.approx(2 / 3)
    assert (summary["policy_started_real_held"], summary["real_started_policy_held"]) == (0, 1)
    assert summary["day"] == date(2026, 11, 27)


def test_ingesting_again_changes_nothing(spool, warehouse_path):
    shadow_ingest_stage(warehouse_path, today=TODAY)
    before = tables(warehouse_path)
    [again] = shadow_ingest_stage(warehouse_path, today=TODAY)
    assert again.outcome == "unchanged" and again.decisions == 0
    after = tables(warehouse_path)
    for name in ("jobs", "quarantine", "shadow_decisions"):
        assert after[name].equals(before[name]), name
    # The next day closes: it is ingested, the first day is not read again.
    days = shadow_ingest_stage(warehouse_path, today=date(2026, 11, 29))
    assert [(d.source_id, d.outcome) for d in days] == [
        (SOURCE_ID, "unchanged"),
        (f"shadow:{SLUG}:2026-11-28", "new"),
    ]


def test_a_late_append_replaces_the_day_whole(spool, warehouse_path):
    shadow_ingest_stage(warehouse_path, today=TODAY)
    path = spool / SLUG / "2026-11-27.jsonl"
    path.write_bytes(path.read_bytes().rsplit(b"\n", 1)[0] + b"\n")  # the torn line dropped
    [day] = shadow_ingest_stage(warehouse_path, today=TODAY)
    assert (day.outcome, day.rows_quarantined) == ("replaced", 1)
    got = tables(warehouse_path)
    assert got["quarantine"].height == 1 and got["shadow_decisions"].height == 3


def test_a_failed_ingest_leaves_the_warehouse_as_it_was(spool, warehouse_path, monkeypatch):
    shadow_ingest_stage(warehouse_path, today=TODAY)
    before = tables(warehouse_path)
    path = spool / SLUG / "2026-11-27.jsonl"
    path.write_bytes(path.read_bytes() + b"\n")  # changed bytes: read again

    import tracelib.shadow.trace as trace

    real = trace._decision_rows

    def broken(*args):
        rows = real(*args)
        return rows.with_columns(pl.lit(False).alias("same_action"))  # breaks the contract

    monkeypatch.setattr(trace, "_decision_rows", broken)
    [failed] = shadow_ingest_stage(warehouse_path, today=TODAY)
    assert failed.outcome == "failed" and "shadow_decisions" in failed.note
    after = tables(warehouse_path)
    for name in before:
        assert (
            after[name]
            .drop("ingested_at", strict=False)
            .equals(before[name].drop("ingested_at", strict=False))
        ), name


def test_no_spool_no_ingest(warehouse_path):
    assert shadow_ingest_stage(warehouse_path, today=TODAY) == []


def test_the_counterfactual_replay_and_the_report(spool, warehouse_path, tmp_path):
    [day] = shadow_ingest_stage(warehouse_path, today=TODAY)
    replay = shadow_replay_stage(warehouse_path, day.source_id, "fifo", day.servers)
    assert replay.eval_id is not None, replay.note
    with connect(warehouse_path, read_only=True) as con:
        row = compare(con, day.source_id).row(0, named=True)
    # Observed: A ended 40 min after its submission, waited 11 min; B waited 20 min.
    assert row["observed_jct_h"] == pytest.approx(40 / 60)
    assert row["observed_queueing_h"] == pytest.approx((11 + 20) / 2 / 60)
    # FIFO on two 4-GPU servers starts A and B on arrival: A runs its 29 minutes.
    assert row["replayed_jct_h"] == pytest.approx(29 / 60)
    assert row["replayed_queueing_h"] == pytest.approx(0.0)
    unknown = shadow_replay_stage(warehouse_path, day.source_id, "oracle-9000", day.servers)
    assert unknown.eval_id is None and "neither a replay rule" in unknown.note
    html = write_report(warehouse_path, out=tmp_path / "r.html", systems=[]).read_text()
    section = html[html.index("Shadow mode</h2>") :]
    assert "agreement per day" in section and SOURCE_ID in section
    assert "counterfactual replay beside what happened" in section
    assert "<td>0.667</td>" in section  # the day's agreement


def test_delete_source_takes_the_decisions_with_it(spool, warehouse_path, capsys):
    shadow_ingest_stage(warehouse_path, today=TODAY)
    assert main(["delete-source", SOURCE_ID, "--yes", "--quiet"]) == 0
    got = tables(warehouse_path)
    assert all(frame.height == 0 for frame in got.values())


def test_only_folders_the_spool_names_are_read(spool, warehouse_path):
    odd = spool / "Not A Slug"
    odd.mkdir()
    (odd / "2026-11-27.jsonl").write_bytes((spool / SLUG / "2026-11-27.jsonl").read_bytes())
    assert [d.source_id for d in shadow_ingest_stage(warehouse_path, today=TODAY)] == [SOURCE_ID]


def test_a_learned_policy_without_a_trained_one_is_said_not_replayed(spool, warehouse_path):
    [day] = shadow_ingest_stage(warehouse_path, today=TODAY)
    replay = shadow_replay_stage(warehouse_path, day.source_id, "dl2", day.servers)
    assert replay.eval_id is None and "no registered policy of dl2" in replay.note


def test_a_job_cancelled_while_pending_is_killed_without_a_start(tmp_path):
    at = iter([datetime(2026, 11, 27, 10, tzinfo=UTC), datetime(2026, 11, 27, 10, 5, tzinfo=UTC)])
    with Spool(tmp_path, clock=lambda: next(at)) as spool:
        submitted = {"kind": "submitted", "job": "X", "time": "2026-11-27T10:00:00Z", "gpus": 2}
        spool.append("observation", submitted, cluster="lab")
        spool.append(
            "observation",
            {"kind": "cancelled", "job": "X", "time": "2026-11-27T10:05:00Z"},
            cluster="lab",
        )
    day = load_shadow_day(tmp_path / "lab" / "2026-11-27.jsonl", date(2026, 11, 27))
    [job] = day.jobs.iter_rows(named=True)
    assert (job["job_id"], job["status"], job["start_time"]) == ("X", "killed", None)
    assert job["end_time"] == datetime(2026, 11, 27, 10, 5)
