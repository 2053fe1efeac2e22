"""RL-TAPS' pipeline stages on a temporary warehouse: registration and curves, lineage,
skipping unchanged inputs, evaluation rows, determinism, atomic failure."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from models.rltaps.stage_config import RLTapsStageConfig
from pipelines.systems.rltaps.stages import evaluate_rltaps_stage, train_rltaps_stage
from tests.learned_eval import row_counts, stored_evaluation
from tests.tables import assert_readme_queries_answer
from tracelib.configs import resized
from warehouse import connect, read_frame

CFG = resized(
    RLTapsStageConfig(test_sequences=3),
    {
        "reinforce.n_jobs": 6,
        "reinforce.env.max_steps": 50,
        "reinforce.train_sequences": 2,
        "reinforce.val_sequences": 2,
        "reinforce.episodes": 2,
        "reinforce.batch_sequences": 2,
        "reinforce.epochs": 2,
        "reinforce.refresh_every": 1,
        "reinforce.hidden": 32,
    },
)


def _run(path, cfg: RLTapsStageConfig = CFG):
    trained = [
        train_rltaps_stage(path, replace(cfg, mode=m)) for m in ("nonstreaming", "streaming")
    ]
    return trained, evaluate_rltaps_stage(path, cfg)


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    path = tmp_path_factory.mktemp("rltaps") / "wh.duckdb"
    return path, _run(path)


def test_stages_register_both_modes_with_curves_and_evaluate(done):
    path, ((plain, streaming), ev) = done
    assert plain.system == "rl-taps" and streaming.system == "rl-taps-streaming"
    assert plain.parent_policy_id is None and streaming.parent_policy_id is None
    with connect(path) as con:
        curves = read_frame(
            con, "SELECT policy_id, mode, count(*) AS n FROM rltaps_learning_curves GROUP BY ALL"
        )
        rows = read_frame(con, "SELECT * FROM rltaps_evaluation ORDER BY scheduler")
        policy = read_frame(
            con, "SELECT * FROM policies WHERE policy_id = ?", [plain.policy_id]
        ).row(0, named=True)
    assert set(curves.rows()) == {
        (plain.policy_id, "nonstreaming", 3),
        (streaming.policy_id, "streaming", 3),
    }
    assert rows["scheduler"].to_list() == [
        "random",
        "rl-taps-nonstreaming",
        "rl-taps-streaming",
        "sjf",
        "srtf-preemptive",
        "tetris",
        "tiresias-gittins",
        "tiresias-las",
    ]
    ids = dict(rows.select("scheduler", "policy_id").rows())
    assert ids["rl-taps-nonstreaming"] == plain.policy_id
    assert ids["rl-taps-streaming"] == streaming.policy_id
    assert ids["sjf"] is None
    assert (rows["n_sequences"] == 3).all() and (rows["mean_slowdown"] >= 1.0).all()
    assert json.loads(rows["seeds"][0]) == CFG.test_seeds()
    metrics = json.loads(policy["metrics"])
    assert metrics["stage_config"]["reinforce"]["epochs"] == 2 and len(metrics["input_key"]) == 64
    assert len(json.loads(policy["training_workloads"])) == 2
    assert set(ev.mean_slowdown) == set(rows["scheduler"])


def test_own_evaluation_lands_in_the_eval_tables_with_paired_slowdown_ratios(done):
    path, (_, ev) = done
    runs, n_jobs, summary, board = stored_evaluation(path, ev.run_id)
    # One run per scheduler x sequence, one eval_jobs row per job of each run.
    assert runs.height == 8 * 3 and n_jobs == 8 * 3 * CFG.reinforce.n_jobs
    assert runs["reward"].is_not_null().all()
    # Eq. 17's slowdown is the mean of the runs' mean_slowdown.
    for name, slowdowns in ev.slowdowns.items():
        mine = runs.filter(runs["scheduler"] == name).sort("sequence_no")
        assert mine["mean_slowdown"].to_list() == pytest.approx(slowdowns)
    assert set(summary["workload_set"]) == {"rl-taps-bimodal"}
    assert set(summary["scenario"]) == {"rl-taps"} and set(summary["ratio_metric"]) == {
        "mean_slowdown"
    }
    learned = board.filter(board["family"] == "rl-taps")
    assert learned.height == 2 and set(learned["kind"]) == {"paper"}
    assert set(learned["metric"]) == {"mean_slowdown"} and learned["ratio_paired"].all()
    assert (
        learned["ratio_ci_low"].is_not_null().all() and learned["ratio_ci_high"].is_not_null().all()
    )
    # The paper's pickers and the preemptive baselines compete for the best heuristic.
    assert set(board["best_heuristic"]) <= {
        "random",
        "sjf",
        "tetris",
        "srtf-preemptive",
        "tiresias-las",
        "tiresias-gittins",
    }


def test_rerun_on_unchanged_inputs_trains_and_simulates_nothing(done, monkeypatch):
    path, ((plain, streaming), ev) = done
    before = row_counts(path)
    with connect(path) as con:
        stored = read_frame(con, "SELECT * FROM eval_summary WHERE eval_id = ?", [ev.run_id])

    def simulate(*args, **kwargs):
        raise AssertionError("an unchanged evaluation was simulated again")

    monkeypatch.setattr("pipelines.systems.rltaps.stages.rltaps_tables", simulate)
    (again_plain, again_streaming), again_ev = _run(path)
    assert (again_plain.policy_id, again_streaming.policy_id) == (
        plain.policy_id,
        streaming.policy_id,
    )
    assert again_plain.metrics["cached"] and again_streaming.metrics["cached"]
    assert again_ev.run_id == ev.run_id and again_ev.mean_slowdown == ev.mean_slowdown
    assert not ev.cached and again_ev.cached
    assert again_ev.slowdowns == ev.slowdowns and again_ev.mean_reward == ev.mean_reward
    assert row_counts(path) == before
    with connect(path) as con:  # not even rewritten
        assert read_frame(con, "SELECT * FROM eval_summary WHERE eval_id = ?", [ev.run_id]).equals(
            stored
        )


def test_the_run_summary_says_when_the_evaluation_was_stored_already(done):
    from dataclasses import asdict

    from pipelines.systems.rltaps.plugin import summary_lines

    _, (_, ev) = done
    summary = {"train": {}, "arena": None}
    fresh = summary_lines({**summary, "evaluation": asdict(ev)})
    stored = summary_lines({**summary, "evaluation": {**asdict(ev), "cached": True}})
    assert f"  RL-TAPS evaluation {ev.run_id}" in fresh
    assert f"  RL-TAPS evaluation {ev.run_id} (already evaluated on these inputs" in stored[0]


def test_new_training_continues_from_the_latest_policy(tmp_path):
    path = tmp_path / "wh.duckdb"
    first = train_rltaps_stage(path, CFG)
    second = train_rltaps_stage(path, replace(CFG, seed=1))
    assert second.parent_policy_id == first.policy_id
    assert not second.metrics.get("cached")
    scratch = train_rltaps_stage(path, replace(CFG, seed=1, init="scratch"))
    assert scratch.parent_policy_id is None
    ev = evaluate_rltaps_stage(path, CFG)
    assert ev.policy_ids == {"rl-taps-nonstreaming": scratch.policy_id}  # the newest one


def test_same_seed_same_tables_in_another_warehouse(done, tmp_path):
    path, ((plain, streaming), _) = done
    other = tmp_path / "other.duckdb"
    (plain2, streaming2), _ = _run(other)
    assert (plain2.policy_id, streaming2.policy_id) == (plain.policy_id, streaming.policy_id)
    for query in (
        "SELECT * EXCLUDE (wall_s) FROM rltaps_learning_curves ORDER BY ALL",
        "SELECT * EXCLUDE (code_version) FROM rltaps_evaluation ORDER BY ALL",
    ):
        with connect(path) as a, connect(other) as b:
            assert read_frame(a, query).equals(read_frame(b, query))


def test_a_failed_stage_leaves_the_warehouse_as_it_was(done):
    path, _ = done
    before = row_counts(path)
    with pytest.raises(KeyError, match="not registered"):
        train_rltaps_stage(path, replace(CFG, init="rl-taps-missing", seed=7))
    with pytest.raises(ValueError, match="hidden"):
        train_rltaps_stage(path, replace(resized(CFG, {"reinforce.hidden": 16}), seed=7))
    assert row_counts(path) == before


def test_the_readmes_queries_on_rltaps_evaluation_still_answer(done):
    # rltaps_evaluation is a view over the evaluation tables since migration 0020.
    path, _ = done
    assert_readme_queries_answer(path, "rltaps_evaluation")


SHIPPED = resized(
    CFG,
    {
        "reinforce.hidden": None,
        "reinforce.env.max_steps": 40,
        "reinforce.epochs": 1,
        "reinforce.train_sequences": 1,
        "reinforce.val_sequences": 1,
    },
)
"""The network the shipped policies have (hidden None: RL-TAPS' 528 units)."""


def test_a_fresh_warehouse_starts_from_the_shipped_policy(tmp_path):
    from dataclasses import asdict

    from models.checkpoints import policy_id_for
    from models.rltaps.pretrained import load_shipped
    from pipelines.systems.rltaps.plugin import summary_lines

    path = tmp_path / "wh.duckdb"
    about = load_shipped("nonstreaming", SHIPPED.env_config()).description
    first = train_rltaps_stage(path, SHIPPED)
    shipped_id = policy_id_for("rl-taps", about["checkpoint_sha256"])
    assert first.parent_policy_id == shipped_id
    assert first.metrics["started_from"] == "shipped" and "resume_note" not in first.metrics
    assert "imitation_accuracy" not in first.metrics  # no warm start: it starts trained
    with connect(path) as con:
        row = read_frame(con, "SELECT * FROM policies WHERE policy_id = ?", [shipped_id])
        newest = con.sql(
            "SELECT policy_id FROM policies ORDER BY created_at DESC LIMIT 1"
        ).fetchall()
    assert row["system"][0] == "rl-taps" and row["parent_policy_id"][0] is None
    assert json.loads(row["metrics"][0])["shipped"]["chosen_seed"] == about["chosen_seed"]
    assert row["created_at"][0].isoformat() == about["created_at"].removesuffix("+00:00")
    assert newest == [(first.policy_id,)]  # what the evaluation takes
    evaluation = {"run_id": "e", "mean_slowdown": {}, "mean_reward": {}}
    [line, _] = summary_lines({"train": {"nonstreaming": asdict(first)}, "evaluation": evaluation})
    assert line.endswith(f"from {shipped_id} (shipped with the code)")
    # Later trainings continue the warehouse's own lineage.
    second = train_rltaps_stage(path, replace(SHIPPED, seed=1))
    assert second.parent_policy_id == first.policy_id
    assert train_rltaps_stage(path, replace(SHIPPED, init="scratch")).parent_policy_id is None


def test_an_unusable_shipped_policy_falls_back_with_a_note(tmp_path, monkeypatch):
    import shutil

    from models.rltaps import pretrained

    folder = tmp_path / "shipped"
    shutil.copytree(pretrained.PRETRAINED_DIR, folder)
    about = json.loads((folder / "nonstreaming.json").read_text())
    (folder / "nonstreaming.json").write_text(json.dumps({**about, "fingerprint": "0" * 16}))
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", folder)
    path = tmp_path / "wh.duckdb"
    plain = train_rltaps_stage(path, SHIPPED)
    assert plain.parent_policy_id is None
    note = plain.metrics["resume_note"]
    assert "shipped nonstreaming policy not used" in note and "trained in simulator" in note
    assert "trained from scratch (sjf warm start)" in note
    before = row_counts(path)
    with pytest.raises(ValueError, match="not used"):
        train_rltaps_stage(path, replace(SHIPPED, init="shipped", seed=3))
    assert row_counts(path) == before
