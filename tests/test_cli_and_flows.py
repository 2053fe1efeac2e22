import shutil
from pathlib import Path

import polars as pl
import pytest

from pipelines.cli import build_parser, main, nightly_deployment
from pipelines.config import stage_seed
from tests.conftest import TRACES
from tests.tiny_run import INCOMING, TINY
from warehouse import connect, read_frame


def test_tables_and_sql(warehouse_path, capsys):
    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    capsys.readouterr()
    assert main(["tables"]) == 0
    out = capsys.readouterr().out
    assert "jobs" in out and "quarantine" in out
    assert main(["sql", "SELECT count(*) AS n FROM jobs", "--format", "csv"]) == 0
    assert capsys.readouterr().out == "n\n4\n"
    assert main(["sql", "SELECT * FROM no_such_table"]) == 1
    assert "no_such_table" in capsys.readouterr().err


def test_report_verb_on_an_empty_warehouse(warehouse_path, tmp_path, capsys):
    with connect(warehouse_path):
        pass  # created and migrated, nothing run
    out = tmp_path / "r" / "report.html"
    assert main(["report", "--warehouse", str(warehouse_path), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    html = out.read_text()
    # Every section is there and says why it is empty rather than vanishing.
    assert "No evaluation has been stored yet." in html
    assert "No learned policy has been trained yet." in html
    assert "No reward model has been fitted yet." in html
    assert "<img" not in html


def test_derive_verb(warehouse_path, capsys):
    main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"])
    assert main(["derive", "helios:helios_sample", "--name", "h", "--jobs-per-sequence", "2"]) == 0
    assert "h: 2 workloads" in capsys.readouterr().out
    assert main(["derive", "nope:missing"]) == 1


def test_serve_builds_a_cron_deployment(warehouse_path):
    args = build_parser().parse_args(["serve", "--cron", "30 3 * * *", "--seed", "5"])
    deployment = nightly_deployment(args)
    assert deployment.name == "schedlab-nightly"
    [schedule] = deployment.schedules
    assert schedule.schedule.cron == "30 3 * * *"
    assert deployment.parameters["seed"] == 5
    assert deployment.parameters["warehouse"] == str(warehouse_path.resolve())


@pytest.mark.flow
def test_nightly_flow_end_to_end(reference_run, prefect_harness, tmp_path):
    from pipelines.flows import nightly_flow

    # The tiny run (tests/tiny_run.py), which the task-runner tests compare with: its
    # incoming folder holds a Helios sample and a Helios file missing its columns. It runs
    # again below on a copy of its folder.
    summary = reference_run.summary
    assert [r["path"] for r in summary["rejected"]] == [str(INCOMING / "helios-broken.csv")]
    assert "missing required column" in summary["rejected"][0]["error"]
    assert {d["derivation"] for d in summary["derived"]} == {
        "dl2-synthetic",
        "helios-sample",
    }
    warehouse_path = tmp_path / "run" / "wh.duckdb"
    shutil.copytree(reference_run.warehouse.parent, warehouse_path.parent)
    with connect(warehouse_path) as con:
        runs = read_frame(con, "SELECT status, seed FROM pipeline_runs")
        assert runs.rows() == [("completed", TINY["seed"])]
        first = read_frame(con, "SELECT * FROM workload_jobs ORDER BY workload_id, job_index")
        samples = read_frame(
            con, "SELECT * FROM interference_samples WHERE source = 'synthetic' ORDER BY ALL"
        )
        catalogues = read_frame(
            con, "SELECT catalogue, count(*) AS n FROM job_types GROUP BY ALL ORDER BY ALL"
        )
    from tracelib.catalogue import DL2_CATALOGUE, RLTAPS_CATALOGUE

    assert catalogues.rows() == [("dl2", len(DL2_CATALOGUE)), ("rl-taps", len(RLTAPS_CATALOGUE))]
    assert summary["interference"]["samples"] == samples.height >= 13_177
    # The interference stage's own seed, spawned from the run seed.
    assert samples["seed"].unique().to_list() == [stage_seed(TINY["seed"], "interference")]

    dl2 = summary["dl2"]
    assert dl2["finetune"]["parent_policy_id"] == dl2["warmup"]["policy_id"]
    evaluated = {row["scheduler"] for e in summary["evaluated"] for row in e["summary"]}
    assert {"dl2", "dl2-warmup", "drf", "rl-taps"} <= evaluated  # synthetic and helios sets
    # Every arena policy trained on each set (arena_training="every-set"), and each set's
    # evaluation running the policy trained on it.
    sets = [d["derivation"] for d in summary["derived"]]
    assert len(sets) == 2
    arena = {
        "rl-taps": summary["rltaps"]["arena"],
        "harmony": summary["harmony"]["arena"],
        "chic": summary["chic"]["arena"]["chic"],
        "chic-pair": summary["chic"]["arena"]["chic-pair"],
    }
    with connect(warehouse_path) as con:
        ran = read_frame(
            con,
            "SELECT DISTINCT workload_set, scheduler, policy FROM eval_runs "
            "WHERE workload_set IN (?, ?)",
            sets,
        )
    for scheduler, by_set in arena.items():
        assert list(by_set) == sets, scheduler
        ids = {name: result["policy_id"] for name, result in by_set.items()}
        assert len(set(ids.values())) == 2, scheduler  # a policy per set
        for workload_set, policy_id in ids.items():
            policies = ran.filter(
                (ran["scheduler"] == scheduler) & (ran["workload_set"] == workload_set)
            )["policy"]
            assert policies.len() == 1 and policy_id in policies[0], (scheduler, workload_set)
    with connect(warehouse_path) as con:
        board = read_frame(
            con,
            "SELECT workload_kind, workload_set, scheduler, improvement_over_drf, rank, latest "
            "FROM leaderboard WHERE scheduler IN ('drf', 'dl2') ORDER BY ALL",
        )
    assert set(board.select("workload_kind", "workload_set").unique().rows()) == {
        ("production", "helios-sample"),
        ("synthetic", "dl2-synthetic"),
    }
    assert board.filter(pl.col("scheduler") == "drf")["improvement_over_drf"].to_list() == [0, 0]
    assert board["latest"].all() and board["rank"].min() >= 1
    with connect(warehouse_path) as con:
        families = read_frame(
            con,
            "SELECT kind, workload_set, scheduler, family, best_heuristic, "
            "ratio_to_best_heuristic, ratio_ci_low, ratio_ci_high FROM leaderboard WHERE latest",
        )
    # One board across families: the DL2 setting's sets and each paper scenario.
    assert {"heuristic", "dl2", "harmony", "chic", "rl-taps"} <= set(families["family"])
    assert {"synthetic", "production", "paper"} == set(families["kind"])
    synthetic = families.filter(pl.col("workload_set") == "dl2-synthetic")
    # RL-TAPS' arena policy runs in the DL2 setting beside the heuristics.
    assert {"heuristic", "dl2", "rl-taps"} <= set(synthetic["family"])
    best = synthetic["best_heuristic"].unique().to_list()
    assert len(best) == 1 and not best[0].endswith("-oracle")
    # The best heuristic's ratio to itself is 1; every paired interval holds its ratio.
    assert synthetic.filter(pl.col("scheduler") == best[0])["ratio_to_best_heuristic"][0] == 1.0
    assert synthetic["ratio_to_best_heuristic"].null_count() == 0
    # Harmony's arena policy places there beside the placement heuristics.
    harmony = synthetic.filter(pl.col("family") == "harmony")
    assert harmony["scheduler"].to_list() == ["harmony"]

    again = nightly_flow(warehouse=str(warehouse_path), **TINY)
    assert {i["outcome"] for i in again["ingested"]} == {"unchanged"}
    with connect(warehouse_path) as con:
        second = read_frame(con, "SELECT * FROM workload_jobs ORDER BY workload_id, job_index")
        samples_again = read_frame(
            con, "SELECT * FROM interference_samples WHERE source = 'synthetic' ORDER BY ALL"
        )
    assert first.equals(second)  # same seed, same tables
    assert samples.equals(samples_again)
    # Unchanged inputs: nothing is retrained; the same policies are evaluated again.
    assert again["dl2"]["finetune"]["policy_id"] == dl2["finetune"]["policy_id"]
    assert again["dl2"]["finetune"]["metrics"]["cached"]
    assert all(e["cached"] for e in again["evaluated"])  # nor simulated again

    # Each run ends with its report: one self-contained HTML file.
    report = Path(again["report"])
    assert report.name == f"report-{again['run_id']}.html"
    html = report.read_text()
    assert (report.parent / "latest.html").read_text() == html
    for heading in ("Leaderboard", "JCT distributions", "Learning curves", "Policies"):
        assert f">{heading}</h2>" in html
    # Every learned system trained, was evaluated in its own scenario, and is reported.
    assert summary["harmony"]["evaluation"]["summary"] and summary["chic"]["evaluation"]["act"]
    assert summary["rltaps"]["evaluation"]["mean_slowdown"]
    for title in ("Harmony: interference", "Chic and Chic-Pair", "RL-TAPS: topology"):
        assert title in html
    assert "Held-out error" in html  # the reward-model section
    with connect(warehouse_path) as con:
        curves = read_frame(con, "SELECT DISTINCT system FROM learning_curves ORDER BY ALL")
        quality = read_frame(
            con, "SELECT estimator FROM reward_model_quality WHERE latest ORDER BY ALL"
        )
    assert {"dl2", "harmony", "harmony-reward-model", "chic", "rl-taps"} <= set(curves["system"])
    assert quality["estimator"].to_list() == [
        "gradient-boosting",
        "harmony-nn",
        "lif-line",
        "lif-quad",
    ]
    assert "helios-sample (production)" in html and "dl2-synthetic (synthetic)" in html
    assert html.count("data:image/png;base64,") >= 2 + 2 + 2  # bars, CDFs, DL2 curves
    assert 'src="http' not in html  # nothing to fetch: the file stands alone


@pytest.mark.flow
def test_a_new_trace_is_ingested_and_retrains_the_learned_schedulers(
    prefect_harness, warehouse_path, tmp_path
):
    from pipelines.flows import nightly_flow

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    small = {
        "n_jobs": 120,
        "jobs_per_sequence": 30,
        "budget": "smoke",
        "systems": ["dl2"],
        "options": {"dl2_baselines": False},
        "eval_seeds": 1,
    }
    run = {"warehouse": str(warehouse_path), "seed": 3, "incoming": str(incoming), **small}
    first = nightly_flow(**run)
    assert [d["derivation"] for d in first["derived"]] == ["dl2-synthetic"]

    # A production trace lands in the incoming folder before the next night.
    _helios_trace(incoming / "helios-night2.csv", n_jobs=150, seed=5)
    second = nightly_flow(**run)
    outcomes = {i["source_id"]: i["outcome"] for i in second["ingested"]}
    synthetic = f"synthetic:dl2-diurnal:seed{stage_seed(3, 'synthetic')}"
    assert outcomes == {"helios:helios-night2": "new", synthetic: "unchanged"}
    assert [d["derivation"] for d in second["derived"]] == ["dl2-synthetic", "helios-night2"]
    assert second["derived"][1]["splits"]["train"] >= 1
    # The warm-up's inputs (the synthetic recording) did not change; fine-tuning's did.
    assert second["dl2"]["warmup"]["policy_id"] == first["dl2"]["warmup"]["policy_id"]
    tuned = second["dl2"]["finetune"]
    assert not tuned["metrics"].get("cached")
    assert tuned["parent_policy_id"] == first["dl2"]["finetune"]["policy_id"]
    with connect(warehouse_path) as con:
        lineage = read_frame(
            con,
            "SELECT generation, lineage FROM policy_lineage WHERE policy_id = ?",
            [tuned["policy_id"]],
        )
        training = read_frame(
            con,
            "SELECT training_workloads FROM policies WHERE policy_id = ?",
            [tuned["policy_id"]],
        )["training_workloads"][0]
        board = read_frame(
            con,
            "SELECT workload_set, scheduler, latest, eval_id FROM leaderboard "
            "WHERE scheduler = 'dl2' ORDER BY evaluated_at",
        )
    warm, old = first["dl2"]["warmup"]["policy_id"], first["dl2"]["finetune"]["policy_id"]
    assert lineage.rows() == [(2, [warm, old, tuned["policy_id"]])]
    assert "helios" in training  # it learned from the new trace's workloads
    # Old and new policies both on the leaderboard; the new evaluation is the latest.
    synthetic = board.filter(pl.col("workload_set") == "dl2-synthetic")
    assert synthetic["latest"].to_list() == [False, True]
    assert synthetic["eval_id"].n_unique() == 2
    assert board.filter(pl.col("workload_set") == "helios-night2")["latest"].to_list() == [True]


def _helios_trace(path: Path, n_jobs: int, seed: int) -> None:
    """A Helios-format job log of completed GPU jobs (arrivals a few minutes apart)."""
    from datetime import datetime, timedelta

    import numpy as np

    rng = np.random.default_rng(seed)
    start = datetime(2020, 5, 1)
    lines = [TRACES.joinpath("helios_sample.csv").read_text().splitlines()[0]]
    submit = start
    for i in range(n_jobs):
        submit += timedelta(seconds=int(rng.integers(30, 600)))
        duration = int(rng.integers(600, 20_000))
        begin = submit + timedelta(seconds=int(rng.integers(0, 300)))
        end = begin + timedelta(seconds=duration)
        gpus = int(rng.choice([1, 2, 4, 8]))
        lines.append(
            f"{7_000_000 + i},u{i % 7},vc{i % 3},job{i},{gpus},{6 * gpus},1,COMPLETED,"
            f"{submit:%Y-%m-%d %H:%M:%S},{begin:%Y-%m-%d %H:%M:%S},{end:%Y-%m-%d %H:%M:%S},"
            f"{duration},{int((begin - submit).total_seconds())}"
        )
    path.write_text("\n".join(lines) + "\n")


def test_sql_into_a_closed_pipe_ends_quietly(warehouse_path, tmp_path):
    # `schedlab sql ... | head -1`: the reader leaves early; no traceback, exit 0.
    import subprocess
    import sys

    assert main(["ingest", str(TRACES / "helios_sample.csv"), "--format", "helios"]) == 0
    query = "SELECT * FROM range(200000)"
    cmd = [sys.executable, "-m", "pipelines.cli", "sql", "--warehouse", str(warehouse_path), query]
    proc = subprocess.run(
        f"{subprocess.list2cmdline(cmd)} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.stdout.count("\n") == 1


def test_two_warehouses_in_one_folder_keep_their_own_reports(tmp_path):
    from pipelines.report import write_report
    from pipelines.stages import evaluation_dir

    first, second = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    for path in (first, second):
        with connect(path):  # an empty warehouse: its schema only
            pass
    written = [write_report(str(path), run_id="r1", systems=()) for path in (first, second)]
    assert written[0] != written[1]
    for path, report in zip((first, second), written, strict=True):
        latest = report.parent / "latest.html"
        assert str(path) in latest.read_text()  # each latest.html names its own warehouse
    assert evaluation_dir(first) != evaluation_dir(second)
