"""`schedlab replay SOURCE_ID`: a whole ingested trace into the evaluation tables."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from pipelines.cli import main
from pipelines.replay import DEFAULT_RULES
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
    assert sorted(runs["scheduler"].to_list()) == sorted(DEFAULT_RULES)
    assert rows["n"].to_list() == [final.height] * len(DEFAULT_RULES)
    assert rows["ids"].to_list() == [final.height] * len(DEFAULT_RULES)
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
    assert again["n"][0] == final.height * len(DEFAULT_RULES)


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


def test_scheduler_all_replays_every_registered_rule(helios, warehouse_path, capsys):
    from models.heuristics import REPLAYS

    assert main(["replay", helios, "--scheduler", "all", "--quiet"]) == 0
    with connect(warehouse_path) as con:
        runs = read_frame(
            con, "SELECT scheduler FROM eval_runs WHERE workload_set = ?", [f"replay:{helios}"]
        )
    assert sorted(runs["scheduler"].to_list()) == sorted(REPLAYS.names())
    assert "fifo-backfill" in REPLAYS.names() and "fifo-backfill" not in DEFAULT_RULES


def test_the_production_baselines_replay_from_the_command_line(helios, warehouse_path, capsys):
    rules = ["fifo", "tiresias-las", "tiresias-gittins", "fifo-fgd"]
    argv = ["replay", helios, "--servers", "16", "--quiet"]
    for rule in rules:
        argv += ["--scheduler", rule]
    assert main(argv) == 0
    out = capsys.readouterr().out
    with connect(warehouse_path) as con:
        summary = read_frame(
            con,
            "SELECT scheduler, avg_jct_s, mean_slowdown, jct_ratio FROM eval_summary "
            "WHERE workload_set = ?",
            [f"replay:{helios}"],
        )
        rows = read_frame(
            con,
            "SELECT scheduler, count(*) AS n FROM eval_jobs WHERE scheduler IN "
            "('tiresias-las', 'tiresias-gittins', 'fifo-fgd') GROUP BY scheduler",
        )
    by_rule = {r["scheduler"]: r for r in summary.iter_rows(named=True)}
    assert sorted(by_rule) == sorted(rules)
    assert len(set(rows["n"].to_list())) == 1 and rows.height == 3
    for rule in rules:
        assert rule in out
    # Queues form on 128 GPUs: ranking by attained service lets the short jobs by, where
    # FIFO holds them behind the long ones (neither reads a job's run time).
    for rule in ("tiresias-las", "tiresias-gittins"):
        assert by_rule[rule]["mean_slowdown"] < by_rule["fifo"]["mean_slowdown"]
    # The same replay again gives the same figures (no hidden state between runs).
    assert main(argv) == 0
    with connect(warehouse_path) as con:
        again = read_frame(
            con,
            "SELECT scheduler, avg_jct_s FROM eval_summary WHERE workload_set = ? "
            "ORDER BY evaluated_at DESC LIMIT 4",
            [f"replay:{helios}"],
        )
    for r in again.iter_rows(named=True):
        assert r["avg_jct_s"] == pytest.approx(by_rule[r["scheduler"]]["avg_jct_s"])


MAPPING = """
[columns]
job_id = "id"
submit_time = "submitted"
{times}
num_gpus = "gpus"
status = "state"
user_name = "user"

[time]
epoch_unit = "s"
"""

T0 = 1_600_000_000


def _ingest(tmp_path, capsys, rows: dict, start: bool) -> str:
    """A generic-mapped trace of `rows` ingested; its source id."""
    csv, mapping = tmp_path / "trace.csv", tmp_path / "trace.toml"
    pl.DataFrame(rows).write_csv(csv)
    times = 'start_time = "started"\nend_time = "ended"' if start else 'duration = "ran"'
    mapping.write_text(MAPPING.format(times=times))
    argv = ["ingest", str(csv), "--format", "generic", "--mapping", str(mapping), "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    with connect() as con:
        return read_frame(con, "SELECT source_id FROM trace_sources")["source_id"][0]


# Four whole-server jobs really run on 2 servers: two at once from t=0 to 100, then the two
# that waited (90 s and 80 s). FIFO with backfill on 2 servers starts them exactly so.
QUEUED = {
    "id": [0, 1, 2, 3],
    "submitted": [T0, T0, T0 + 10, T0 + 20],
    "started": [T0, T0, T0 + 100, T0 + 100],
    "ended": [T0 + 100, T0 + 100, T0 + 200, T0 + 150],
    "gpus": [8, 8, 8, 8],
    "state": ["COMPLETED"] * 4,
    "user": ["a", "b", "a", "b"],
}


def test_recorded_starts_calibrate_the_servers_that_reproduce_the_queueing(
    warehouse_path, tmp_path, capsys
):
    source = _ingest(tmp_path, capsys, QUEUED, start=True)
    assert main(["replay", source, "--scheduler", "fifo", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "cluster 2 servers x 8 GPUs" in out
    assert "against the 0.012 h observed (error +0.0%" in out  # (90 + 80) / 4 s = 0.0118 h
    # Mean queueing delay per rule, as replayed on those 2 servers.
    assert "queueing     0.01 h" in out


def test_calibration_bisects_from_above_the_peak_down_to_the_size_that_fits():
    from pipelines.progress import QUIET
    from pipelines.replay import _calibrate, _Shape
    from tracelib.sim.replay import ReplayJobs

    jobs = ReplayJobs(
        np.array([0.0, 0.0, 10.0, 20.0]), np.array([100.0, 100.0, 100.0, 50.0]), np.full(4, 8.0)
    )
    # The search starts from 16 servers, far above the 2 that reproduce the delays.
    shape = _Shape(8.0, ("",), (16,), (1,))
    sizing = _calibrate(jobs, shape, 42.5, np.ones(4, dtype=bool), 0.0, QUIET)
    assert sizing.cluster.n_servers == 2
    assert sizing.calibration_error == pytest.approx(0.0)
    assert sizing.replays <= 12
    # Three servers start job 2 at once: 20 s of mean delay, which the bracket passes over.
    three = _calibrate(jobs, shape, 20.0, np.ones(4, dtype=bool), 0.0, QUIET)
    assert three.cluster.n_servers == 3
    # No observed delay: the fewest servers that start every job on arrival.
    none = _calibrate(jobs, shape, 0.0, np.ones(4, dtype=bool), 0.0, QUIET)
    assert none.cluster.n_servers == 4


def test_a_trace_without_starts_is_sized_to_the_stated_utilization(
    warehouse_path, tmp_path, capsys
):
    # Ten 4-GPU jobs of an hour each, one every 6 minutes: 144,000 GPU-seconds over a
    # 6,840 s span (first submit to last end).
    rows = {
        "id": list(range(10)),
        "submitted": [T0 + 360 * i for i in range(10)],
        "ran": [3600] * 10,
        "gpus": [4] * 10,
        "state": ["COMPLETED"] * 10,
        "user": ["a"] * 10,
    }
    source = _ingest(tmp_path, capsys, rows, start=False)
    assert main(["replay", source, "--scheduler", "fifo", "--quiet"]) == 0
    out = capsys.readouterr().out
    # 144,000 / (6,840 x 0.7 x 8) = 3.76 -> 4 servers.
    assert "cluster 4 servers x 8 GPUs" in out
    assert "average 70% utilization" in out
    assert main(["replay", source, "--scheduler", "fifo", "--utilization", "0.5", "--quiet"]) == 0
    # 144,000 / (6,840 x 0.5 x 8) = 5.26 -> 6 servers.
    assert "cluster 6 servers x 8 GPUs" in capsys.readouterr().out


def test_servers_or_gpus_override_the_rule(helios, capsys):
    assert main(["replay", helios, "--scheduler", "fifo", "--gpus", "130", "--quiet"]) == 0
    assert "cluster 17 servers x 8 GPUs (136 GPUs), given (--gpus 130)" in capsys.readouterr().out
    assert main(["replay", helios, "--scheduler", "fifo", "--servers", "20", "--quiet"]) == 0
    assert "cluster 20 servers x 8 GPUs (160 GPUs), given (--servers)" in capsys.readouterr().out
    assert main(["replay", helios, "--servers", "20", "--gpus", "130", "--quiet"]) == 2
    assert "not both" in capsys.readouterr().err
    assert main(["replay", helios, "--capacity", "0.5,x", "--quiet"]) == 2
    assert "--capacity" in capsys.readouterr().err


def test_capacity_sweep_stores_each_capacity_and_draws_the_plot(helios, warehouse_path, capsys):
    argv = ["replay", helios, "--scheduler", "fifo", "--scheduler", "sjf", "--servers", "30"]
    assert main([*argv, "--capacity", "0.6,1", "--workers", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    with connect(warehouse_path) as con:
        runs = read_frame(
            con,
            "SELECT eval_id, scheduler, json_extract(config, '$.capacity')::DOUBLE AS capacity, "
            "json_extract(config, '$.cluster.n_servers')::INT AS servers, avg_jct_s "
            "FROM eval_runs WHERE workload_set = ? ORDER BY capacity, scheduler",
            [f"replay:{helios}"],
        )
        latest = read_frame(
            con,
            "SELECT DISTINCT eval_id FROM leaderboard WHERE latest AND workload_set = ?",
            [f"replay:{helios}"],
        )
    assert runs["capacity"].to_list() == [0.6, 0.6, 1.0, 1.0]
    assert runs["servers"].to_list() == [18, 18, 30, 30]
    assert runs["eval_id"].n_unique() == 2
    # The given size's evaluation is the leaderboard's newest.
    assert (
        latest["eval_id"].to_list()
        == runs.filter(pl.col("capacity") == 1.0)["eval_id"][:1].to_list()
    )
    assert "capacity 0.6 (18 servers, 144 GPUs)" in out
    assert "capacity 1 (30 servers, 240 GPUs)" in out
    plot = warehouse_path.parent / "evaluations" / warehouse_path.stem
    plot = plot / f"capacity_replay_{helios.replace(':', '_')}.png"
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert f"plot: {plot}" in out
    # The same sweep again, one process: the same evaluations and figures.
    assert main([*argv, "--capacity", "0.6,1", "--workers", "1", "--quiet"]) == 0
    with connect(warehouse_path) as con:
        again = read_frame(
            con,
            "SELECT eval_id, scheduler, json_extract(config, '$.capacity')::DOUBLE AS capacity, "
            "json_extract(config, '$.cluster.n_servers')::INT AS servers, avg_jct_s "
            "FROM eval_runs WHERE workload_set = ? ORDER BY capacity, scheduler",
            [f"replay:{helios}"],
        )
    assert again.equals(runs)


def test_the_sweep_on_a_local_ray_instance_gives_the_same_rows(helios, warehouse_path, capsys):
    argv = ["replay", helios, "--scheduler", "fifo", "--scheduler", "sjf", "--servers", "30"]
    query = (
        "SELECT eval_id, scheduler, json_extract(config, '$.capacity')::DOUBLE AS capacity, "
        "avg_jct_s, p95_jct_s, utilization FROM eval_runs WHERE workload_set = ? "
        "ORDER BY capacity, scheduler"
    )
    assert main([*argv, "--capacity", "0.6,1", "--task-runner", "sequential", "--quiet"]) == 0
    with connect(warehouse_path) as con:
        sequential = read_frame(con, query, [f"replay:{helios}"])
    assert main([*argv, "--capacity", "0.6,1", "--task-runner", "ray", "--quiet"]) == 0
    out = capsys.readouterr().out
    with connect(warehouse_path) as con:
        on_ray = read_frame(con, query, [f"replay:{helios}"])
    # Where the replays ran is not part of the evaluation: same ids, same figures.
    assert on_ray.equals(sequential) and on_ray.height == 4
    assert "capacity 0.6 (18 servers, 144 GPUs)" in out


def test_a_ray_address_needs_the_ray_runner(helios, warehouse_path, capsys):
    assert main(["replay", helios, "--ray-address", "auto", "--quiet"]) == 2
    assert "--ray-address needs --task-runner ray" in capsys.readouterr().err


def test_the_report_shows_the_what_if_from_the_stored_rows(helios, warehouse_path, capsys):
    from pipelines.report import replay_capacity_section

    argv = ["replay", helios, "--scheduler", "fifo", "--servers", "30", "--workers", "1"]
    assert main([*argv, "--quiet"]) == 0
    with connect(warehouse_path, read_only=True) as con:
        # One size only: nothing to compare yet.
        assert replay_capacity_section(con).tables == []
    assert main([*argv, "--capacity", "0.6,1", "--quiet"]) == 0
    with connect(warehouse_path, read_only=True) as con:
        section = replay_capacity_section(con)
    (table,) = section.tables
    assert table.title == f"replay:{helios}"
    servers = [row[table.columns.index("servers")] for row in table.rows]
    assert servers == ["18", "30"]
    queueing = [float(row[table.columns.index("queueing_h")]) for row in table.rows]
    assert queueing[0] > queueing[1]
    assert len(section.figures) == 1


@pytest.fixture
def philly_like(warehouse_path, tmp_path, capsys) -> str:
    """A generated 2,000-job Philly-like trace over 90 days, ingested (its source id)."""
    from benchmarks.bench_replay import MAPPING as PHILLY_MAPPING
    from benchmarks.bench_replay import make_trace

    csv, mapping = tmp_path / "philly.csv", tmp_path / "philly.toml"
    make_trace(csv, 2000, seed=3)
    mapping.write_text(PHILLY_MAPPING)
    argv = ["ingest", str(csv), "--format", "generic", "--mapping", str(mapping), "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    with connect(warehouse_path) as con:
        return read_frame(con, "SELECT source_id FROM trace_sources")["source_id"][0]


def test_replay_opens_with_its_headline_and_block_bootstrap_intervals(
    philly_like, warehouse_path, tmp_path, capsys
):
    from pipelines.replay import reads_run_time

    assert main(["replay", philly_like, "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    with connect(warehouse_path) as con:
        summary = read_frame(
            con,
            "SELECT scheduler, avg_jct_s, jct_ratio, jct_ratio_ci_low, jct_ratio_ci_high, "
            "best_heuristic, ratio_to_best_heuristic, ratio_ci_low, ratio_ci_high, config "
            "FROM eval_summary WHERE workload_set = ?",
            [f"replay:{philly_like}"],
        )
    rows = {r["scheduler"]: r for r in summary.iter_rows(named=True)}
    # The best heuristic is the fastest rule that does not read the recorded run times;
    # srtf, which does, is not it even where it is faster.
    fair = {n: r for n, r in rows.items() if not reads_run_time(n)}
    best = min(fair, key=lambda n: fair[n]["avg_jct_s"])
    assert {r["best_heuristic"] for r in rows.values()} == {best}
    assert reads_run_time("srtf") and not reads_run_time("tiresias-las")
    # Paired by day: every rule's interval brackets its ratio; the best against itself is 1.
    for r in rows.values():
        assert r["ratio_ci_low"] <= r["ratio_to_best_heuristic"] <= r["ratio_ci_high"]
        assert r["jct_ratio_ci_low"] <= r["jct_ratio"] <= r["jct_ratio_ci_high"]
        assert r["jct_ratio"] == pytest.approx(r["avg_jct_s"] / rows["fifo"]["avg_jct_s"])
    assert rows[best]["ratio_ci_low"] == rows[best]["ratio_ci_high"] == 1.0
    # The sentence: trace, jobs, cluster, load, best heuristic with its ratio to FIFO.
    config = json.loads(rows["fifo"]["config"])
    servers = config["cluster"]["n_servers"]
    assert first.startswith(f"{philly_like}: 2,000 jobs on {servers:,} servers")
    assert f"offered load {config['load']:.2f}" in first
    b = rows[best]
    assert (
        f"best heuristic {best} (average JCT {b['avg_jct_s'] / 3600:.2f} h, "
        f"{b['jct_ratio']:.3f} [{b['jct_ratio_ci_low']:.3f}, {b['jct_ratio_ci_high']:.3f}] x fifo)"
    ) in first
    assert "no learned policy replayed" in first
    assert "intervals over days" in first
    # A week as the block: other (wider) intervals, the same point ratios.
    assert main(["replay", philly_like, "--workers", "1", "--block", "week", "--quiet"]) == 0
    assert "intervals over weeks" in capsys.readouterr().out.splitlines()[0]
    # The report opens with the same sentence (from the stored rows, newest replay).
    report = tmp_path / "report.html"
    assert main(["report", "--out", str(report)]) == 0
    page = report.read_text()
    assert "Replayed traces" in page and "intervals over weeks" in page
    assert page.index("Replayed traces") < page.index("Leaderboard")


def test_the_headline_names_fifo_only_when_fifo_is_not_the_best_heuristic():
    """Where the reference is the best heuristic itself (an arena replay without FIFO),
    the sentence gives each ratio once, not the same ratio twice."""
    from pipelines.replay import headline

    def row(name, family, avg_h, ratio, reference):
        return {
            "scheduler": name,
            "family": family,
            "n_jobs": 100,
            "avg_jct_s": avg_h * 3600,
            "reference": reference,
            "jct_ratio": ratio,
            "jct_ratio_ci_low": ratio - 0.1,
            "jct_ratio_ci_high": ratio + 0.1,
            "ratio_to_best_heuristic": ratio,
            "ratio_ci_low": ratio - 0.1,
            "ratio_ci_high": ratio + 0.1,
        }

    config = {"cluster": {"n_servers": 4, "gpus_per_server": 2}, "load": 0.5}
    alone = pl.DataFrame(
        [
            row("optimus-events", "heuristic", 2.0, 1.0, "optimus-events"),
            row("d", "dl2", 2.4, 1.2, "optimus-events"),
        ]
    )
    text = headline("s", alone, config)
    assert "best heuristic optimus-events (average JCT 2.00 h)" in text
    assert "best dl2 d 1.200 [1.100, 1.300] x optimus-events (ratios" in text
    assert text.count("1.200") == 1
    with_fifo = pl.DataFrame(
        [
            row("fifo", "heuristic", 4.0, 1.0, "fifo"),
            row("drf", "heuristic", 2.0, 0.5, "fifo"),
            row("d", "dl2", 1.0, 0.25, "fifo"),
        ]
    )
    text = headline("s", with_fifo, config)
    assert "best heuristic drf (average JCT 2.00 h, 0.500 [0.400, 0.600] x fifo)" in text
    assert "best dl2 d 0.250 [0.150, 0.350] x drf and 0.250 [0.150, 0.350] x fifo" in text
