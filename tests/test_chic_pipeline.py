"""Chic's stages on a temporary warehouse: registration with curves, skipping unchanged
inputs, fine-tuning from the latest policy of the same variant and rate, evaluation rows
against Optimus, idempotence and determinism."""

from __future__ import annotations

from dataclasses import replace

import polars as pl
import pytest

from models.chic.config import CEMConfig, ChicEvalConfig
from models.chic.stage_config import ChicTrainConfig
from pipelines.systems.chic import steps as chic_steps
from pipelines.systems.chic.stages import evaluate_chic_stage, latest_chic_policy, train_chic_stage
from tests.learned_eval import stored_evaluation
from tests.tables import assert_readme_queries_answer
from tracelib.configs import resized
from tracelib.scenarios.chic import ChicScenario
from warehouse import connect, read_frame

TINY = ChicTrainConfig(
    train_sequences=3,
    val_sequences=2,
    cem=CEMConfig(iterations=2, n_trajectories=3, scenario=ChicScenario(jobs_per_sequence=6)),
)
EVAL = ChicEvalConfig(rates=(0.9, 1.8), test_sequences=3, jobs_per_sequence=6)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("chic") / "wh.duckdb")
    chic = train_chic_stage(path, TINY)
    pair = train_chic_stage(path, replace(TINY, variant="chic-pair"))
    return path, chic, pair


def test_policies_registered_with_curves(trained):
    path, chic, pair = trained
    assert chic.policy_id.startswith("chic-") and pair.policy_id.startswith("chic-pair-")
    assert chic.parent_policy_id is None
    with connect(path) as con:
        systems = read_frame(con, "SELECT system FROM policies ORDER BY system")["system"]
        curve = read_frame(
            con, "SELECT * FROM chic_learning_curves WHERE policy_id = ?", [chic.policy_id]
        )
        assert latest_chic_policy(con, "chic", 1.8) == chic.policy_id
        assert latest_chic_policy(con, "chic", 0.9) is None
    assert systems.to_list() == ["chic", "chic-pair"]
    assert curve["iteration"].to_list() == [1, 2]
    assert curve["val_act_s"].null_count() == 1  # validated every two iterations


def test_unchanged_inputs_train_nothing_and_new_ones_fine_tune(trained):
    path, chic, _ = trained
    again = train_chic_stage(path, TINY)
    assert again.policy_id == chic.policy_id and again.metrics.get("cached")
    tuned = train_chic_stage(path, replace(TINY, seed=1))
    assert tuned.parent_policy_id == chic.policy_id
    with connect(path) as con:
        assert latest_chic_policy(con, "chic", 1.8) == tuned.policy_id


def test_evaluation_rows_and_idempotence(trained):
    path, _, _ = trained
    result = evaluate_chic_stage(path, EVAL)
    with connect(path) as con:
        rows = read_frame(con, "SELECT * FROM chic_evaluation ORDER BY rate_per_hour, system")
    # The view keeps the old table's columns (migration 0011), so old queries still run.
    assert rows.columns == CHIC_EVALUATION_COLUMNS
    at = {(r["system"], r["rate_per_hour"]): r for r in rows.iter_rows(named=True)}
    # Policies trained at 1.8 only: "chic" appears at 1.8, "chic-trained-at-1.8" everywhere.
    assert ("chic", 1.8) in at and ("chic", 0.9) not in at
    assert ("chic-trained-at-1.8", 0.9) in at and ("chic-pair-trained-at-1.8", 0.9) in at
    assert at[("optimus-600", 0.9)]["improvement_vs_optimus_600"] == 0.0
    assert at[("optimus-300", 0.9)]["policy_id"] is None
    o600, o300 = at[("optimus-600", 1.8)], at[("optimus-300", 1.8)]
    assert o300["improvement_vs_optimus_600"] == pytest.approx(
        1 - o300["avg_jct_s"] / o600["avg_jct_s"]
    )
    assert all(r["n_sequences"] == 3 for r in at.values())
    assert result.act["optimus-600"][1.8] == pytest.approx(o600["avg_jct_s"])
    again = evaluate_chic_stage(path, EVAL)
    assert again.eval_id == result.eval_id and again.act == result.act
    with connect(path) as con:
        n = con.sql("SELECT count(*) FROM chic_evaluation").fetchall()[0][0]
    assert n == rows.height


CHIC_EVALUATION_COLUMNS = [
    "eval_id",
    "system",
    "rate_per_hour",
    "avg_jct_s",
    "ci95_s",
    "n_sequences",
    "policy_id",
    "improvement_vs_optimus_600",
    "sequence_seeds",
    "config",
    "seed",
    "code_version",
    "evaluated_at",
]


def test_own_evaluation_lands_in_the_eval_tables_with_paired_ratios(trained):
    path, _, _ = trained
    result = evaluate_chic_stage(path, EVAL)
    runs, n_jobs, summary, board = stored_evaluation(path, result.eval_id)
    # One run per scheduler x sequence (x one seed), one eval_jobs row per job.
    per_rate = summary.group_by("workload_set").len()
    assert runs.height == int(per_rate["len"].sum()) * 3
    assert n_jobs == runs["n_jobs"].sum()
    assert set(summary["workload_set"]) == {"chic@0.9/h", "chic@1.8/h"}
    assert set(summary["scenario"]) == {"chic"}
    chic = summary.filter(summary["family"] == "chic")
    optimus = ["optimus-600", "optimus-300", "optimus-events"]
    assert chic.height > 0 and chic["best_heuristic"].is_in(optimus).all()
    # Optimus deciding at every event, as Chic does, is among the baselines.
    assert "optimus-events" in set(summary["scheduler"])
    # Paired by sequence, with an interval, in the leaderboard too.
    assert chic["ratio_ci_low"].is_not_null().all()
    learned = board.filter(board["family"] == "chic")
    assert set(learned["kind"]) == {"paper"} and learned["ratio_paired"].all()
    assert learned["ratio_ci_low"].is_not_null().all()
    assert (learned["ratio_ci_low"] <= learned["ratio_to_best_heuristic"]).all()
    # Each policy's warm start cloned Optimus: its ratio to Optimus at every event, paired.
    assert set(chic["teacher"]) == {"optimus-events"}
    for row in chic.iter_rows(named=True):
        ratio = (
            runs.filter(workload_set=row["workload_set"])
            .pivot("scheduler", index="workload_id", values="avg_jct_s")
            .select(pl.col(row["scheduler"]) / pl.col("optimus-events"))
            .to_series()
            .mean()
        )
        assert row["ratio_to_teacher"] == pytest.approx(ratio)
    assert summary.filter(family="heuristic")["teacher"].is_null().all()


def test_same_seed_same_policy(tmp_path):
    other = train_chic_stage(str(tmp_path / "wh.duckdb"), resized(TINY, {"cem.iterations": 1}))
    again = train_chic_stage(str(tmp_path / "wh2.duckdb"), resized(TINY, {"cem.iterations": 1}))
    assert other.policy_id == again.policy_id


def test_the_readmes_queries_on_chic_evaluation_still_answer(trained):
    # chic_evaluation is a view over the evaluation tables since migration 0020.
    path, _, _ = trained
    evaluate_chic_stage(path, EVAL)
    assert_readme_queries_answer(path, "chic_evaluation")


def test_the_reports_evaluation_table_leaves_the_seed_lists_to_sql(trained):
    path, _, _ = trained
    evaluate_chic_stage(path, EVAL)
    with connect(path) as con:
        (section,) = chic_steps.report(con)
    (table,) = [t for t in section.tables if t.title == "chic_evaluation"]
    assert table.rows and "avg_jct_s" in table.columns
    assert not {"sequence_seeds", "config", "code_version"} & set(table.columns)


def test_a_policy_from_the_warm_start_says_so_in_the_run_summary(trained):
    from dataclasses import asdict

    from pipelines.systems.chic.plugin import summary_lines

    _, chic, pair = trained
    assert chic.metrics["started_from"] == "imitation of optimus"
    lines = summary_lines(
        {
            "train": {"chic@1.8": asdict(chic), "chic-pair@1.8": asdict(pair)},
            "evaluation": {"act": {}},
        }
    )
    started = [line for line in lines if "(from imitation of optimus, held-out accuracy" in line]
    assert len(started) == 2
