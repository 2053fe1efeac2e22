"""`schedlab describe` and the report's trace section on the sample traces."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest

from pipelines.cli import main
from pipelines.describe import describe_source, trace_figure
from tests.conftest import TRACES
from tracelib.describe import describe_text, describe_trace, sparkline
from warehouse import connect, read_frame

SAMPLES = {
    "philly": (TRACES / "philly_cluster_job_log.json", []),
    "pai": (TRACES / "pai", []),
    "helios": (TRACES / "helios_sample.csv", []),
    "generic": (
        TRACES / "generic_sample.csv",
        ["--mapping", str(TRACES / "generic_sample.toml")],
    ),
}


@pytest.fixture
def ingested(warehouse_path, capsys) -> dict[str, str]:
    """Every sample trace ingested: format -> source id."""
    for fmt, (path, extra) in SAMPLES.items():
        assert main(["ingest", str(path), "--format", fmt, "--quiet", *extra]) == 0
    capsys.readouterr()
    with connect(warehouse_path) as con:
        sources = read_frame(con, "SELECT format, source_id FROM trace_sources")
    return dict(sources.iter_rows())


def _brute_peak(jobs: pl.DataFrame) -> float:
    """Most GPUs held at once, checked at every start instant (ends exclusive)."""
    start = jobs["start_time"].fill_null(jobs["submit_time"]).to_list()
    dur = jobs["duration_s"].to_list()
    end = [
        e if e is not None else (s + timedelta(seconds=d) if d is not None else None)
        for s, e, d in zip(start, jobs["end_time"].to_list(), dur, strict=True)
    ]
    gpus = jobs["num_gpus"].to_list()
    best = 0.0
    for t in start:
        held = sum(
            g
            for s, e, g in zip(start, end, gpus, strict=True)
            if e is not None and e > s and s <= t < e
        )
        best = max(best, held)
    return best


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_describe_summarizes_each_sample_trace(ingested, warehouse_path, fmt):
    source_id = ingested[fmt]
    d = describe_source(warehouse_path, source_id)
    with connect(warehouse_path) as con:
        jobs = read_frame(con, "SELECT * FROM jobs WHERE source_id = ?", [source_id])
        quarantined = read_frame(
            con, "SELECT field, reason FROM quarantine WHERE source_id = ?", [source_id]
        )
    assert d.n_jobs == jobs.height > 0
    assert d.first_submit == jobs["submit_time"].min()
    assert d.last_submit == jobs["submit_time"].max()
    # Every job counted once in the hourly arrivals, the GPU bins and the status mix.
    assert d.arrivals_per_hour["jobs"].sum() == jobs.height
    hours = d.arrivals_per_hour["hour"]
    assert (hours.diff().drop_nulls() == timedelta(hours=1)).all()  # no hour skipped
    assert d.gpu_histogram["jobs"].sum() == jobs.height
    assert dict(d.status_mix.select("status", "jobs").iter_rows()) == dict(
        jobs.group_by("status").len().iter_rows()
    )
    assert d.n_users == jobs["user_name"].drop_nulls().n_unique()
    assert d.n_vcs == jobs["vc"].drop_nulls().n_unique()
    assert d.peak_gpus == pytest.approx(_brute_peak(jobs))
    assert d.n_quarantined == quarantined.height
    assert d.quarantine_reasons["records"].sum() == quarantined.height
    text = describe_text(d)
    assert f"{d.n_jobs:,} jobs" in text and f"quarantined: {d.n_quarantined:,}" in text


def test_describe_command_prints_the_summary(ingested, warehouse_path, capsys):
    source_id = ingested["helios"]
    assert main(["describe", source_id]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"trace {source_id}: ")
    for words in ("arrivals per hour", "duration", "GPU demand", "peak concurrent GPU demand"):
        assert words in out
    assert main(["describe", "helios:nope"]) == 2  # bad input
    assert "unknown trace source" in capsys.readouterr().err


def test_quarantine_reasons_are_counted_by_field_and_reason(ingested, warehouse_path):
    with connect(warehouse_path) as con:
        worst = read_frame(
            con,
            "SELECT source_id, field, reason, count(*) AS n, min(record_no) AS first "
            "FROM quarantine GROUP BY ALL ORDER BY n DESC, field, reason LIMIT 1",
        )
    assert worst.height == 1, "a sample trace should have quarantined records"
    source_id, field, reason, n, first = worst.row(0)
    d = describe_source(warehouse_path, source_id)
    assert d.quarantine_reasons.row(0) == (field, reason, n, first)


def test_peak_concurrency_and_bins_on_a_known_trace():
    t0 = datetime(2024, 1, 1)
    jobs = pl.DataFrame(
        {
            "submit_time": [t0, t0, t0 + timedelta(hours=2), t0 + timedelta(hours=3)],
            "start_time": [t0, t0 + timedelta(hours=1), t0 + timedelta(hours=2), None],
            "end_time": [
                t0 + timedelta(hours=2),  # ends as the third starts: not counted together
                t0 + timedelta(hours=3),
                t0 + timedelta(hours=4),
                None,
            ],
            "duration_s": [7200.0, 7200.0, 7200.0, 1800.0],
            "num_gpus": [8.0, 4.0, 16.0, 0.5],
            "status": ["completed", "failed", "completed", "running"],
            "user_name": ["a", "b", "a", None],
            "vc": [None, None, None, None],
        },
        schema_overrides={"vc": pl.Utf8},
    )
    quarantine = pl.DataFrame(
        {"record_no": [3, 9], "field": ["num_gpus", "num_gpus"], "reason": ["negative"] * 2}
    )
    d = describe_trace(jobs, quarantine, "toy")
    # 1-3 h: 4 + 16 (the 8-GPU job ended at 2 h); 3-3.5 h: 16 + 0.5.
    assert d.peak_gpus == 20.0 and d.peak_at == t0 + timedelta(hours=2)
    bins = dict(d.gpu_histogram.select("gpus", "jobs").iter_rows())
    assert bins["1"] == 1 and bins["3-4"] == 1 and bins["5-8"] == 1 and bins["9-16"] == 1
    assert d.arrivals_per_hour["jobs"].to_list() == [2, 0, 1, 1]
    assert d.n_users == 2 and d.n_vcs == 0
    assert d.derivable_jobs == 3  # the running job has no final status
    assert d.quarantine_reasons.rows() == [("num_gpus", "negative", 2, 3)]
    assert "virtual clusters: 0 (not recorded)" in describe_text(d)
    fig = trace_figure(d)
    assert len(fig.axes) == 4


def test_arrivals_panel_spans_the_trace_even_when_it_is_one_hour():
    # A trace submitted within one hour: the panel's axis is that hour, not years of dates
    # around a zero-width area (seen in the report of a 7-minute sample).
    from matplotlib.dates import date2num

    t0 = datetime(2020, 4, 1)
    jobs = pl.DataFrame(
        {
            "submit_time": [t0, t0 + timedelta(minutes=7)],
            "start_time": [t0, t0 + timedelta(minutes=7)],
            "end_time": [t0 + timedelta(hours=1), t0 + timedelta(hours=2)],
            "duration_s": [3600.0, 6480.0],
            "num_gpus": [1.0, 8.0],
            "status": ["completed", "completed"],
            "user_name": ["a", "b"],
            "vc": ["v", "v"],
        }
    )
    d = describe_trace(jobs, pl.DataFrame({"record_no": [], "field": [], "reason": []}), "t")
    lo, hi = trace_figure(d).axes[0].get_xlim()
    assert (lo, hi) == (date2num(t0), date2num(t0 + timedelta(hours=1)))


def test_sparkline_scales_to_the_busiest_bucket():
    assert sparkline(np.array([0, 4, 8])) == " ▄█"
    assert len(sparkline(np.arange(500), width=60)) == 60
    assert sparkline(np.zeros(3)) == "   "


def test_report_has_a_trace_section_with_plots(ingested, warehouse_path, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", "--out", str(out)]) == 0
    html = out.read_text()
    assert ">Traces</h2>" in html
    for source_id in ingested.values():
        assert f'alt="{source_id}"' in html  # one figure per source
    assert "peak concurrent GPUs" in html and "usable for workloads" in html


def test_concurrency_keeps_the_peak_and_the_sparse_tail_when_thinned():
    # 20,000 half-hour one-GPU jobs, one a minute, then ten two-GPU jobs that start with
    # the last one and end a day apart: 40,020 events thinned to at most 2,000 points.
    t0 = datetime(2024, 1, 1)
    n, last = 20_000, t0 + timedelta(minutes=19_999)
    starts = [t0 + timedelta(minutes=i) for i in range(n)] + [last] * 10
    ends = [s + timedelta(minutes=30) for s in starts[:n]] + [
        last + timedelta(days=k) for k in range(1, 11)
    ]
    jobs = pl.DataFrame(
        {
            "submit_time": starts,
            "start_time": starts,
            "end_time": ends,
            "duration_s": [(e - s).total_seconds() for s, e in zip(starts, ends, strict=True)],
            "num_gpus": [1.0] * n + [2.0] * 10,
            "status": ["completed"] * (n + 10),
            "user_name": ["a"] * (n + 10),
            "vc": ["v"] * (n + 10),
        }
    )
    d = describe_trace(jobs, pl.DataFrame(schema={"record_no": pl.Int64}), "thin")
    held = d.concurrent_gpus
    assert held.height <= 2000
    assert held["gpus"].max() == d.peak_gpus == 30.0 + 20.0  # the peak survives thinning
    # Every day of the tail shows: one long job fewer each day (thinning by row count kept
    # one flat step at the last busy value, then a drop to zero).
    tail = held.filter(pl.col("time") > last + timedelta(hours=1))
    assert tail["gpus"].to_list() == [2.0 * k for k in range(9, -1, -1)]
