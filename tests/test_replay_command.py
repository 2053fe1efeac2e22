"""`schedlab replay SOURCE_ID`: a whole ingested trace into the evaluation tables."""

from __future__ import annotations

import polars as pl
import pytest

from pipelines.cli import main
from tests.conftest import TRACES
from warehouse import connect, read_frame

HELIOS = TRACES / "public" / "helios_cluster_log.csv"
"""30 jobs in Helios' published layout, 1 to 128 GPUs."""


@pytest.fixture
def helios(warehouse_path, capsys) -> str:
    assert main(["ingest", str(HELIOS), "--format", "helios", "--quiet"]) == 0
    capsys.readouterr()
    with connect(warehouse_path) as con:
        return read_frame(con, "SELECT source_id FROM trace_sources")["source_id"][0]


def test_replay_writes_one_job_row_per_replayed_job(helios, warehouse_path, capsys):
    assert main(["replay", helios, "--quiet"]) == 0
    out = capsys.readouterr().out
    with connect(warehouse_path) as con:
        jobs = read_frame(con, "SELECT * FROM jobs WHERE source_id = ?", [helios])
        runs = read_frame(
            con, "SELECT * FROM eval_runs WHERE workload_set = ?", [f"replay:{helios}"]
        )
        rows = read_frame(
            con,
            "SELECT scheduler, count(*) AS n, count(DISTINCT job_id) AS ids FROM eval_jobs "
            "WHERE eval_id = ? GROUP BY scheduler ORDER BY scheduler",
            [runs["eval_id"][0]],
        )
        summary = read_frame(
            con, "SELECT * FROM eval_summary WHERE eval_id = ?", [runs["eval_id"][0]]
        )
    final = jobs.filter(
        pl.col("status").is_in(["completed", "failed", "killed"])
        & (pl.col("duration_s").is_not_null() | pl.col("end_time").is_not_null())
    )
    assert sorted(runs["scheduler"].to_list()) == ["drf", "fifo", "sjf", "srtf", "tetris"]
    assert rows["n"].to_list() == [final.height] * 5
    assert rows["ids"].to_list() == [final.height] * 5
    assert summary.filter(pl.col("scheduler") == "fifo")["jct_ratio"][0] == pytest.approx(1.0)
    assert f"{final.height:,} jobs replayed" in out
    # The sample records start times: the cluster is calibrated to its queueing delay, and
    # the printed line says so with the error.
    assert "calibrated: replaying the trace's own order (fifo-backfill)" in out
    assert "observed (error " in out
    # The same replay again replaces its rows instead of adding to them.
    assert main(["replay", helios, "--quiet"]) == 0
    with connect(warehouse_path) as con:
        again = read_frame(
            con, "SELECT count(*) AS n FROM eval_jobs WHERE eval_id = ?", [runs["eval_id"][0]]
        )
    assert again["n"][0] == final.height * 5


def test_a_smaller_cluster_makes_queues(helios, warehouse_path, capsys):
    def replayed(*extra: str) -> dict[str, float]:
        assert (
            main(
                ["replay", helios, "--scheduler", "fifo", "--scheduler", "srtf", *extra, "--quiet"]
            )
            == 0
        )
        with connect(warehouse_path) as con:
            summary = read_frame(
                con,
                "SELECT scheduler, avg_jct_s, mean_slowdown FROM eval_summary "
                "WHERE workload_set = ? ORDER BY evaluated_at DESC LIMIT 2",
                [f"replay:{helios}"],
            )
        return {
            r["scheduler"]: (r["avg_jct_s"], r["mean_slowdown"])
            for r in summary.iter_rows(named=True)
        }

    sized = replayed()
    # 128 GPUs: the widest job fits, the trace's peak does not.
    small = replayed("--servers", "16")
    assert small["fifo"][0] > sized["fifo"][0]
    assert small["fifo"][1] > 1.0
    # SRTF puts short jobs first: its mean slowdown beats FIFO's when queues form.
    assert small["srtf"][1] < small["fifo"][1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "nope"], "unknown trace source 'nope'"),
        (["replay", "{src}", "--scheduler", "lottery"], "unknown replay rule"),
        (["replay", "{src}", "--window", "yesterday,today"], "--window"),
        (["replay", "{src}", "--window", "2020-01-02,2020-01-01"], "START before END"),
        (["replay", "{src}", "--servers", "1", "--gpus-per-server", "1"], "can never run"),
    ],
)
def test_bad_replay_input_exits_2_naming_the_problem(helios, capsys, args, message):
    argv = [a.replace("{src}", helios) for a in args] + ["--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_window_keeps_only_its_jobs(helios, warehouse_path, capsys):
    with connect(warehouse_path) as con:
        times = read_frame(con, "SELECT min(submit_time) AS t0, max(submit_time) AS t1 FROM jobs")
    t0, t1 = times["t0"][0], times["t1"][0]
    middle = t0 + (t1 - t0) / 2
    assert (
        main(["replay", helios, "--window", f"{t0.isoformat()},{middle.isoformat()}", "--quiet"])
        == 0
    )
    out = capsys.readouterr().out
    assert "submitted outside the window" in out
