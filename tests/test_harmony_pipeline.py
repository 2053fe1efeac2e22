"""Harmony's pipeline stages on a tiny warehouse: reward model with its comparison table,
Gavel ingestion, placement policies with lineage, evaluation, the online update, skipping
unchanged inputs and atomic failure."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from models.harmony.config import HarmonyEvalConfig
from models.harmony.placement import HarmonyNetConfig
from models.harmony.reward import ESTIMATORS, RewardTrainConfig
from models.harmony.stage_config import HarmonyStageConfig
from models.harmony.train import PlacementTrainConfig
from pipelines.progress import Reporter
from pipelines.stages import interference_stage
from pipelines.systems.harmony import steps as harmony_steps
from pipelines.systems.harmony.plugin import summary_lines
from pipelines.systems.harmony.stages import (
    evaluate_harmony_stage,
    fit_reward_model_stage,
    online_update_stage,
    train_placement_stage,
)
from tests.learned_eval import row_counts
from tests.tables import assert_readme_queries_answer
from tracelib.interference import InterferenceConfig
from tracelib.scenarios.harmony import ArrivalConfig
from warehouse import connect, read_frame

GAVEL = Path(__file__).parent / "data" / "gavel" / "throughputs_sample.json"
CFG = HarmonyStageConfig(
    gavel_path=str(GAVEL),
    gavel_gpu_types=("v100",),
    reward=RewardTrainConfig(epochs=3, hidden=(32, 32, 16)),
    train=PlacementTrainConfig(
        net=HarmonyNetConfig(hidden=(32, 32, 16), row_embed=8), updates=4, val_every=2, n_workers=2
    ),
    variants=("harmony", "harmony-without-replay"),
    arrivals=ArrivalConfig(n_jobs=6),
    n_train_sequences=2,
    n_val_sequences=1,
    eval=HarmonyEvalConfig(
        n_sequences=2,
        arrivals=ArrivalConfig(n_jobs=6),
        baselines=("load-balancing", "tetris", "lif-quad/shortest"),
    ),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("harmony") / "wh.duckdb")
    interference_stage(path, InterferenceConfig(n_samples=300, seed=0))
    reward = fit_reward_model_stage(path, CFG)
    placed = train_placement_stage(path, CFG)
    evaluated = evaluate_harmony_stage(path, CFG)
    return path, reward, placed, evaluated


def test_reward_model_is_registered_with_its_comparison(run):
    path, reward, _, _ = run
    rid = reward.reward_model.policy_id
    assert rid.startswith("harmony-reward-model-")
    with connect(path) as con:
        metrics = read_frame(
            con, "SELECT * FROM reward_model_metrics WHERE reward_model_id = ?", [rid]
        )
        curve = read_frame(
            con, "SELECT * FROM harmony_learning_curves WHERE policy_id = ? ORDER BY step", [rid]
        )
        gavel = read_frame(
            con, "SELECT count(*) AS n FROM interference_samples WHERE source = 'gavel:v100'"
        )
    overall = metrics.filter(metrics["job_type"] == "all")
    assert set(overall["estimator"]) == {"harmony-nn", "lif-line", "lif-quad", "gradient-boosting"}
    assert set(overall["split"]) == {"train", "test"}
    assert curve["step"].to_list() == [1, 2, 3] and set(curve["phase"]) == {"reward_model"}
    assert gavel["n"][0] == 10
    assert reward.gavel["v100"].policy_id.startswith("harmony-reward-model-gavel-")


def test_placement_policies_and_evaluation_rows(run):
    path, reward, placed, evaluated = run
    assert set(placed) == {"harmony", "harmony-without-replay"}
    with connect(path) as con:
        rows = read_frame(
            con, "SELECT * FROM harmony_evaluation WHERE eval_id = ?", [evaluated.eval_id]
        )
        policies = read_frame(con, "SELECT * FROM policies WHERE system = 'harmony'")
        online = read_frame(
            con, "SELECT count(*) AS n FROM interference_samples WHERE source = 'harmony-online'"
        )
    assert rows.height == 3 * 5  # patterns x (3 baselines + 2 learned)
    learned = rows.filter(rows["scheduler"] == "harmony")
    assert set(learned["policy_id"]) == {placed["harmony"].policy_id}
    assert rows.filter(rows["scheduler"] == "tetris")["policy_id"].is_null().all()
    # a "<rule>/<order>" baseline is run as the ordered heuristic, a heuristic
    ordered = rows.filter(rows["scheduler"] == "lif-quad/shortest")
    assert ordered.height == 3 and ordered["policy_id"].is_null().all()
    best = rows.filter(rows["scheduler"] == rows["best_baseline"])
    assert best["paired_ratio"].to_list() == [1.0, 1.0, 1.0]
    assert (rows["paired_ratio"] > 0).all()
    assert json.loads(policies["metrics"][0])["reward_model_id"] == reward.reward_model.policy_id
    assert online["n"][0] == evaluated.online_samples > 0


def test_fresh_variants_start_from_one_clone_of_the_searched_teacher_named_in_the_summary(run):
    _, _, placed, _ = run
    metrics = {name: result.metrics for name, result in placed.items()}
    for m in metrics.values():
        assert m["started_from"] == "imitation of searched"
        # the search's own figures travel with the policy (never worse than LIF-Quad)
        assert 0 < m["teacher_train_ratio_to_lif_quad"] <= 1.0
        assert sum(json.loads(m["teacher_choices"]).values()) > 0
    # one warm start, shared: the same clone measured the same
    first, second = metrics.values()
    assert first["imitation_steps"] == second["imitation_steps"] > 0
    assert first["imitation_held_out_accuracy"] == second["imitation_held_out_accuracy"]
    assert first["teacher_choices"] == second["teacher_choices"]
    lines = summary_lines(
        {
            "reward": {"reward_model": {"policy_id": "r", "metrics": {}}},
            "placement": {k: asdict(v) for k, v in placed.items()},
            "evaluation": {"summary": []},
        }
    )
    started = [line for line in lines if "(from imitation of searched, held-out accuracy" in line]
    assert len(started) == 2
    assert all("; the searched runs " in line for line in started)


def test_own_evaluation_lands_in_the_eval_tables_with_paired_ratios(run):
    path, _, placed, evaluated = run
    with connect(path) as con:
        runs = read_frame(con, "SELECT * FROM eval_runs WHERE eval_id = ?", [evaluated.eval_id])
        jobs = read_frame(
            con, "SELECT count(*) AS n FROM eval_jobs WHERE eval_id = ?", [evaluated.eval_id]
        )
        summary = read_frame(
            con, "SELECT * FROM eval_summary WHERE eval_id = ?", [evaluated.eval_id]
        )
        board = read_frame(
            con,
            "SELECT * FROM leaderboard WHERE eval_id = ? AND scheduler = 'harmony'",
            [evaluated.eval_id],
        )
    n_seq = CFG.eval.n_sequences
    # One run per scheduler x sequence x seed (one seed per sequence), a row per job.
    assert runs.height == 3 * 5 * n_seq
    assert jobs["n"][0] == runs["n_jobs"].sum()
    assert set(summary["workload_set"]) == {"harmony-uniform", "harmony-poisson", "harmony-google"}
    assert set(summary["scenario"]) == {"harmony"}
    learned = summary.filter(summary["scheduler"] == "harmony")
    assert set(learned["policy"]) == {placed["harmony"].policy_id}
    assert set(learned["family"]) == {"harmony"}
    if n_seq > 1:
        assert learned["ratio_ci_low"].is_not_null().all()
    assert set(board["kind"]) == {"paper"} and board["ratio_paired"].all()


def test_rerun_on_unchanged_inputs_trains_nothing(run):
    path, reward, placed, _ = run
    before = row_counts(path)
    again = fit_reward_model_stage(path, replace(CFG, gavel_path=None))
    assert again.reward_model.policy_id == reward.reward_model.policy_id
    assert again.reward_model.metrics["cached"]
    assert row_counts(path) == before
    again_placed = train_placement_stage(path, CFG, reward.reward_model.policy_id)
    assert {k: v.policy_id for k, v in again_placed.items()} == {
        k: v.policy_id for k, v in placed.items()
    }


def test_an_unchanged_evaluation_is_read_back_not_simulated(run, monkeypatch):
    path, _, _, evaluated = run
    import pipelines.systems.harmony.stages as stages

    def no_simulation(*args, **kwargs):
        raise AssertionError("an unchanged Harmony evaluation was simulated again")

    monkeypatch.setattr(stages, "harmony_tables", no_simulation)
    before = row_counts(path)
    again = stages.evaluate_harmony_stage(path, CFG)
    assert again.eval_id == evaluated.eval_id
    assert again.online_samples == evaluated.online_samples
    key = ["pattern", "scheduler"]
    assert again.summary.sort(key).equals(evaluated.summary.sort(key))
    assert row_counts(path) == before


def test_online_update_retrains_from_the_last_checkpoints(run):
    path, reward, placed, _ = run
    new_reward, new_placed = online_update_stage(path, CFG)
    assert new_reward.reward_model.parent_policy_id == reward.reward_model.policy_id
    assert new_reward.reward_model.policy_id != reward.reward_model.policy_id
    assert new_placed["harmony"].parent_policy_id == placed["harmony"].policy_id
    assert new_placed["harmony"].metrics["reward_model_id"] == new_reward.reward_model.policy_id


def test_a_failed_stage_leaves_the_warehouse_as_it_was(run):
    path, _, _, _ = run
    before = row_counts(path)
    with pytest.raises(ValueError, match="no interference samples"):
        fit_reward_model_stage(path, replace(CFG, sample_sources=("nothing",)))
    with pytest.raises(ValueError, match="unknown Harmony variant"):
        train_placement_stage(path, replace(CFG, variants=("harmony-without-everything",)))
    assert row_counts(path) == before


def test_same_seed_same_policies_in_another_warehouse(run, tmp_path):
    _, reward, placed, _ = run
    other = str(tmp_path / "other.duckdb")
    interference_stage(other, InterferenceConfig(n_samples=300, seed=0))
    reward2 = fit_reward_model_stage(other, replace(CFG, gavel_path=None))
    placed2 = train_placement_stage(other, replace(CFG, variants=("harmony",)))
    assert reward2.reward_model.policy_id == reward.reward_model.policy_id
    assert placed2["harmony"].policy_id == placed["harmony"].policy_id


def test_the_readmes_queries_on_harmony_evaluation_still_answer(run):
    # harmony_evaluation is a view over the evaluation tables since migration 0020.
    path, _, _, _ = run
    assert_readme_queries_answer(path, "harmony_evaluation")


def test_the_reports_evaluation_table_leaves_the_config_json_to_sql(run):
    path, _, _, _ = run
    with connect(path) as con:
        (section,) = harmony_steps.report(con)
    (table,) = [t for t in section.tables if t.title == "harmony_evaluation"]
    assert table.rows and "paired_ratio" in table.columns
    assert not {"eval_config", "config", "code_version"} & set(table.columns)


def test_gavel_types_default_to_the_file_and_print_beside_lif(run, capsys):
    # Last in this module: it adds k80's predictor to the shared warehouse.
    path, _, _, _ = run
    lines = Reporter("lines", 0.0)
    reward = fit_reward_model_stage(path, replace(CFG, gavel_gpu_types=()), lines)
    assert set(reward.gavel) == {"k80", "v100"}
    assert set(reward.gavel_skipped) == {"v100_unconsolidated"}
    for gpu in ("k80", "v100"):
        errors = reward.gavel_errors[gpu]
        assert set(errors) == {*ESTIMATORS, "test_samples"} and errors["test_samples"] >= 1
    printed = capsys.readouterr().out.splitlines()
    per_type = [line for line in printed if "Gavel " in line]
    assert len(per_type) == 3
    for gpu in ("k80", "v100"):
        (line,) = [line for line in per_type if f"Gavel {gpu}:" in line]
        for name in ("predictor", "LIF-Line", "LIF-Quad", "gradient boosting"):
            assert f"{name} " in line and f"{name} n/a" not in line
    assert any("Gavel v100_unconsolidated: skipped (no pair of its own" in x for x in per_type)
    # The end summary lists the same lines.
    summary = summary_lines(
        {
            "reward": asdict(reward),
            "placement": {},
            "evaluation": {"summary": []},
        }
    )
    assert sum("Gavel " in line for line in summary) == 3


def test_a_warm_start_made_ahead_serves_every_variant_and_then_none_is_needed(
    run, tmp_path, monkeypatch
):
    """`schedlab run` makes the warm start in one task and hands it to the variants' tasks
    (separate worker processes): the policies are those made with their own, and once they
    are trained no warm start is made."""
    import pipelines.systems.harmony.stages as stages

    _, _, placed, _ = run
    other = str(tmp_path / "ahead.duckdb")
    interference_stage(other, InterferenceConfig(n_samples=300, seed=0))
    fit_reward_model_stage(other, replace(CFG, gavel_path=None))
    warm = stages.warm_start_stage(other, CFG)
    assert len(warm) == 1  # the two variants differ only in the actor-critic

    def no_cloning(*args, **kwargs):
        raise AssertionError("a variant cloned the teacher again")

    monkeypatch.setattr(stages, "warm_start", no_cloning)
    again = stages.train_placement_stage(other, CFG, warm=warm)
    assert {k: v.policy_id for k, v in again.items()} == {k: v.policy_id for k, v in placed.items()}
    assert stages.warm_start_stage(other, CFG) == {}


def test_the_summary_says_why_training_kept_its_clone() -> None:
    def line(**metrics) -> str:
        base = {"started_from": "imitation of searched", "imitation_held_out_accuracy": 0.85}
        placed = {"harmony": {"policy_id": "p", "parent_policy_id": None, "metrics": base}}
        base.update(best_val_step=0, **metrics)
        summary = {"reward": {"reward_model": {"policy_id": "r", "metrics": {}}}}
        lines = summary_lines({**summary, "placement": placed, "evaluation": {"summary": []}})
        return next(x for x in lines if x.startswith("  harmony p "))

    assert line().endswith("; kept: no update beat it on validation)")
    assert line(best_update_val_ratio_to_start=0.9326, best_update_val_ratio_high=1.0651).endswith(
        "; kept: no update significantly better on validation (the best 0.933 times its JCT, "
        "upper end 1.065))"
    )
    assert line(best_update_val_ratio_to_start=0.9, best_update_val_ratio_high=None).endswith(
        "(the best 0.900 times its JCT, no interval))"
    )
