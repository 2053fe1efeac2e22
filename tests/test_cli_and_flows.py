import shutil

import polars as pl
import pytest

from pipelines.cli import build_parser, main, nightly_deployment
from tests.conftest import TRACES
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
def test_nightly_flow_end_to_end(prefect_harness, warehouse_path, tmp_path):
    from pipelines.flows import nightly_flow

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    shutil.copy(TRACES / "helios_sample.csv", incoming / "helios-sample.csv")
    (incoming / "helios-broken.csv").write_text("job_id,user\n1,a\n")

    small = {"n_jobs": 120, "jobs_per_sequence": 30, "dl2_updates": 20, "dl2_warmup_epochs": 2}
    summary = nightly_flow(warehouse=str(warehouse_path), seed=1, incoming=str(incoming), **small)
    assert [r["path"] for r in summary["rejected"]] == [str(incoming / "helios-broken.csv")]
    assert "missing required column" in summary["rejected"][0]["error"]
    assert {d["derivation"] for d in summary["derived"]} == {
        "dl2-synthetic",
        "helios-helios-sample",
    }
    with connect(warehouse_path) as con:
        runs = read_frame(con, "SELECT status, seed FROM pipeline_runs")
        assert runs.rows() == [("completed", 1)]
        first = read_frame(con, "SELECT * FROM workload_jobs ORDER BY workload_id, job_index")
        samples = read_frame(con, "SELECT * FROM interference_samples ORDER BY ALL")
        catalogues = read_frame(
            con, "SELECT catalogue, count(*) AS n FROM job_types GROUP BY ALL ORDER BY ALL"
        )
    from tracelib.catalogue import DL2_CATALOGUE, RLTAPS_CATALOGUE

    assert catalogues.rows() == [("dl2", len(DL2_CATALOGUE)), ("rl-taps", len(RLTAPS_CATALOGUE))]
    assert summary["interference"]["samples"] == samples.height >= 13_177
    assert samples["seed"].unique().to_list() == [1]  # the run seed, pushed down

    dl2 = summary["dl2"]
    assert dl2["finetune"]["parent_policy_id"] == dl2["warmup"]["policy_id"]
    evaluated = {row["scheduler"] for e in summary["evaluated"] for row in e["summary"]}
    assert {"dl2", "dl2-warmup", "drf"} <= evaluated  # on the synthetic and the helios set
    with connect(warehouse_path) as con:
        board = read_frame(
            con,
            "SELECT workload_kind, workload_set, scheduler, improvement_over_drf, rank, latest "
            "FROM leaderboard WHERE scheduler IN ('drf', 'dl2') ORDER BY ALL",
        )
    assert set(board.select("workload_kind", "workload_set").unique().rows()) == {
        ("production", "helios-helios-sample"),
        ("synthetic", "dl2-synthetic"),
    }
    assert board.filter(pl.col("scheduler") == "drf")["improvement_over_drf"].to_list() == [0, 0]
    assert board["latest"].all() and board["rank"].min() >= 1

    again = nightly_flow(warehouse=str(warehouse_path), seed=1, incoming=str(incoming), **small)
    assert {i["outcome"] for i in again["ingested"]} == {"unchanged"}
    with connect(warehouse_path) as con:
        second = read_frame(con, "SELECT * FROM workload_jobs ORDER BY workload_id, job_index")
        samples_again = read_frame(con, "SELECT * FROM interference_samples ORDER BY ALL")
    assert first.equals(second)  # same seed, same tables
    assert samples.equals(samples_again)
    # Unchanged inputs: nothing is retrained; the same policies are evaluated again.
    assert again["dl2"]["finetune"]["policy_id"] == dl2["finetune"]["policy_id"]
    assert again["dl2"]["finetune"]["metrics"]["cached"]
