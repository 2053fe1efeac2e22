"""DL2's pipeline stages on a tiny warehouse: lineage, skipping unchanged inputs, retraining
from the latest policy when new workloads arrive, determinism, atomic failure, evaluation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from models.dl2.policy import average_jct
from models.dl2.recorder import as_workloads
from models.dl2.stage_config import DL2StageConfig
from models.evaluation import EvalConfig, evaluate
from pipelines.registry import SYSTEMS
from pipelines.stages import derive_stage, learned_policies, synthetic_stage
from pipelines.systems.dl2 import stages
from pipelines.systems.dl2 import steps as dl2_steps
from pipelines.systems.dl2.stages import (
    finetune_stage,
    record_stage,
    table_stage,
    teacher_policy,
    warmup_stage,
)
from pipelines.trained import set_workloads
from tests.learned_eval import row_counts, tiny_set_evaluation, tiny_warehouse
from tracelib.configs import resized
from tracelib.sim import ClusterConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import connect, read_frame

SIM = replace(EvalConfig().sim_config(0), cluster=ClusterConfig(n_servers=8))
CFG = resized(
    DL2StageConfig(workload_set="tiny", sim=SIM),
    {
        "net.hidden": (32, 32),
        "warmup.max_epochs": 2,
        "finetune.max_updates": 24,
        "finetune.val_every": 12,
        "grouped.iterations": 3,
        "grouped.group_size": 2,
    },
)


def _train(path, cfg: DL2StageConfig = CFG):
    recorded = record_stage(path, cfg)
    warm = warmup_stage(path, cfg, recorded.run_id)
    tuned = finetune_stage(path, cfg, warm.policy_id)
    return recorded, warm, tuned


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = tiny_warehouse(tmp_path_factory.mktemp("dl2") / "wh.duckdb")
    return path, _train(path)


def test_stages_register_policies_with_lineage_and_curves(trained):
    path, (recorded, warm, tuned) = trained
    assert tuned.parent_policy_id == warm.policy_id
    with connect(path) as con:
        policies = read_frame(
            con, "SELECT * FROM policies WHERE system = 'dl2' ORDER BY created_at"
        )
        phases = read_frame(
            con, "SELECT policy_id, phase, count(*) AS n FROM dl2_learning_curves GROUP BY ALL"
        )
        steps = read_frame(
            con, "SELECT count(*) AS n FROM decision_traces WHERE run_id = ?", [recorded.run_id]
        )["n"][0]
    assert policies["policy_id"].to_list() == [warm.policy_id, tuned.policy_id]
    assert policies["parent_policy_id"].to_list() == [None, warm.policy_id]
    assert steps == recorded.steps > 0
    assert recorded.workloads == 4  # the training split only
    assert set(phases.select("policy_id", "phase").rows()) == {
        (warm.policy_id, "warmup"),
        (tuned.policy_id, "finetune"),
    }
    metrics = json.loads(policies["metrics"][1])
    stage_config = metrics["stage_config"]
    assert stage_config["finetune"]["max_updates"] == 24 and len(metrics["input_key"]) == 64
    assert json.loads(policies["training_workloads"][1]) == [
        f"tiny/train/{i:03d}" for i in range(4)
    ]


def test_the_searched_teacher_is_stored_and_is_what_the_warm_up_is_compared_with(
    trained, monkeypatch
):
    path, (recorded, warm, _tuned) = trained
    assert recorded.teacher == "searched" and warm.metrics["teacher"] == "searched"
    with connect(path) as con:
        configs = read_frame(
            con,
            "SELECT * FROM dl2_teacher_configs WHERE run_id = ? ORDER BY model",
            [recorded.run_id],
        )
        jobs = read_frame(
            con,
            "SELECT DISTINCT model FROM workload_jobs j JOIN workloads w USING (workload_id) "
            "WHERE w.derivation = 'tiny' AND w.split = 'train' ORDER BY model",
        )
        teacher = teacher_policy(con, CFG, recorded.run_id)
        val = set_workloads(con, "tiny", "validation", CFG.val_sequences_per_set)
    assert configs["model"].to_list() == jobs["model"].to_list()
    assert (configs["found_avg_jct_s"] <= configs["start_avg_jct_s"]).all()
    assert dict(teacher.table) == {
        m: (w, p) for m, w, p in configs.select("model", "workers", "ps").rows()
    }
    jct = average_jct(teacher, [j for _, j in as_workloads(val)], CFG.sim, seed=CFG.seed)
    assert warm.metrics["teacher_avg_jct_s"] == pytest.approx(jct, rel=1e-12)

    # The report's DL2 section shows it, model by model.
    with connect(path) as con:
        (section,) = dl2_steps.report(con)
    (table,) = [t for t in section.tables if t.title.startswith("DL2's searched teacher")]
    assert [(r[0], r[3]) for r in table.rows] == [
        (m, f"{w} + {p}") for m, w, p in configs.select("model", "workers", "ps").rows()
    ]

    # Recording the same inputs again neither searches nor writes.
    def no_search(*args, **kwargs):
        raise AssertionError("searched again")

    monkeypatch.setattr(stages, "search_configurations", no_search)
    assert record_stage(path, CFG) == recorded


def test_rerun_on_unchanged_inputs_trains_nothing(trained):
    path, (recorded, warm, tuned) = trained
    before = row_counts(path)
    again = _train(path)
    assert [r.policy_id for r in again[1:]] == [warm.policy_id, tuned.policy_id]
    assert again[0].run_id == recorded.run_id
    assert again[1].metrics["cached"] and again[2].metrics["cached"]
    assert row_counts(path) == before


def test_new_workloads_fine_tune_from_the_latest_policy(tmp_path):
    path = tiny_warehouse(tmp_path / "wh.duckdb")
    _, warm, first = _train(path)
    # New traces arrive: the set is re-derived with different jobs.
    source = synthetic_stage(path, "dl2-diurnal", DiurnalConfig(n_jobs=60, seed=5))
    derive_stage(path, [source.source_id], DeriveConfig(name="tiny", jobs_per_sequence=10))
    _recorded, warm2, second = _train(path)
    assert warm2.policy_id != warm.policy_id  # new decision logs, new warm-up
    assert second.parent_policy_id == first.policy_id  # lineage continues
    assert not second.metrics.get("cached")
    with connect(path) as con:
        lineage = read_frame(
            con,
            "SELECT policy_id, parent_policy_id FROM policies "
            "WHERE json_extract_string(config, '$.train.stage') = 'finetune' ORDER BY created_at",
        )
        runs = read_frame(con, "SELECT DISTINCT run_id FROM decision_traces")
        view = read_frame(
            con, "SELECT * FROM policy_lineage WHERE policy_id = ?", [second.policy_id]
        ).row(0, named=True)
    assert lineage.rows() == [
        (first.policy_id, warm.policy_id),
        (second.policy_id, first.policy_id),
    ]
    assert runs.height == 2  # both recordings kept
    assert view["generation"] == 2 and view["root_policy_id"] == warm.policy_id
    assert view["lineage"] == [warm.policy_id, first.policy_id, second.policy_id]


def test_same_seed_same_policies_in_another_warehouse(trained, tmp_path):
    path, (_recorded, warm, tuned) = trained
    other = tiny_warehouse(tmp_path / "other.duckdb")
    _recorded2, warm2, tuned2 = _train(other)
    assert (warm2.policy_id, tuned2.policy_id) == (warm.policy_id, tuned.policy_id)
    with connect(path) as a, connect(other) as b:
        for table in ("decision_traces", "dl2_teacher_configs"):
            query = f"SELECT * EXCLUDE (code_version) FROM {table} ORDER BY ALL"
            assert read_frame(a, query).equals(read_frame(b, query)), table


def test_a_failed_stage_leaves_the_warehouse_as_it_was(trained):
    path, _ = trained
    before = row_counts(path)
    with pytest.raises(KeyError, match="not registered"):
        finetune_stage(
            path, resized(CFG, {"init": "dl2-missing", "finetune.max_updates": 25}), "unused"
        )
    with pytest.raises(ValueError, match="no 'train' workloads"):
        record_stage(path, replace(CFG, workload_set="nope"))
    assert row_counts(path) == before


def test_a_recording_that_fails_writing_its_teacher_writes_nothing(trained, monkeypatch):
    # The decision logs are written first, the searched teacher's rows in the same
    # transaction: a failure there must take the logs back with it.
    path, _ = trained
    before = row_counts(path)
    real = stages.write_frame

    def failing(con, frame, contract):
        if contract.Config.name == "dl2_teacher_configs":
            raise OSError("disk full")
        return real(con, frame, contract)

    monkeypatch.setattr(stages, "write_frame", failing)
    with pytest.raises(OSError, match="disk full"):
        record_stage(path, replace(CFG, seed=11))
    assert row_counts(path) == before


def test_registered_policy_is_evaluated_beside_the_heuristics(trained):
    path, (_, warm, tuned) = trained
    refs = learned_policies(path, {"dl2": "dl2", "dl2-warmup": warm.policy_id}, SYSTEMS.loaders())
    assert [r.policy_id for r in refs] == [tuned.policy_id, warm.policy_id]
    jobs, workloads, cfg = tiny_set_evaluation(path, refs, ("drf",), 1, SIM.cluster)
    tables = evaluate(jobs, workloads, cfg)
    runs = tables.runs.select("scheduler", "policy").rows()
    assert runs == [
        ("drf", "drf+load-balancing"),
        ("dl2", f"{tuned.policy_id}+load-balancing"),
        ("dl2-warmup", f"{warm.policy_id}+load-balancing"),
    ]
    assert "checkpoint_path" not in json.dumps(cfg.to_dict())
    with pytest.raises(ValueError, match="no registered policy"):
        learned_policies(path, {"x": "no-such-system"}, SYSTEMS.loaders())
    with pytest.raises(ValueError, match="does not run in the evaluation's setting"):
        learned_policies(path, {"dl2": "dl2"}, {"harmony": SYSTEMS.loaders()["dl2"]})


def test_offline_rl_and_ablations_register_under_their_systems(trained):
    path, (_, warm, _) = trained
    offline = finetune_stage(path, CFG, warm.policy_id, "offline-rl")
    ablation = finetune_stage(path, CFG, warm.policy_id, "dl2-without-replay")
    assert offline.parent_policy_id is None  # OfflineRL trains from scratch
    assert ablation.parent_policy_id == warm.policy_id
    assert offline.policy_id.startswith("offline-rl-")
    assert ablation.policy_id.startswith("dl2-without-replay-")
    with connect(path) as con:
        systems = read_frame(con, "SELECT DISTINCT system FROM policies ORDER BY system")
    assert {"offline-rl", "dl2-without-replay"} <= set(systems["system"].to_list())
    with pytest.raises(ValueError, match="unknown DL2 variant"):
        finetune_stage(path, CFG, warm.policy_id, "dl2-without-everything")


def test_fifo_and_srtf_can_teach_the_warm_up(trained):
    path, _ = trained
    for teacher in ("fifo", "srtf"):
        cfg = replace(CFG, teacher=teacher)
        recorded = record_stage(path, cfg)
        warm = warmup_stage(path, cfg, recorded.run_id)
        assert recorded.teacher == teacher and warm.metrics["teacher"] == teacher
        # They fill one job at a time, which the bundle-first rule would forbid.
        with connect(path) as con:
            net = json.loads(
                read_frame(
                    con, "SELECT config FROM policies WHERE policy_id = ?", [warm.policy_id]
                )["config"][0]
            )["net"]
        assert net["bundle_first"] is False


def test_the_searched_table_runs_beside_dl2_as_a_baseline_and_as_its_teacher(trained):
    path, (recorded, warm, tuned) = trained
    table = table_stage(path, CFG, recorded.run_id)
    assert table.policy_id.startswith("dl2-table-")
    assert table_stage(path, CFG, recorded.run_id).policy_id == table.policy_id
    assert table_stage(path, replace(CFG, teacher="drf"), recorded.run_id) is None
    wanted = {"dl2": tuned.policy_id, "dl2-warmup": warm.policy_id, "dl2-table": table.policy_id}
    refs = {r.name: r for r in learned_policies(path, wanted, SYSTEMS.loaders())}
    assert refs["dl2"].teacher == refs["dl2-warmup"].teacher == "dl2-table"
    assert refs["dl2-table"].baseline and refs["dl2-table"].family == "heuristic"
    assert refs["dl2"].family == "dl2" and not refs["dl2"].baseline
    learned = tuple(refs.values())
    jobs, workloads, cfg = tiny_set_evaluation(path, learned, ("drf",), 2, SIM.cluster)
    with connect(path) as con:
        teacher = teacher_policy(con, CFG, recorded.run_id)
    tables = evaluate(jobs, workloads, cfg)
    by = {r["scheduler"]: r for r in tables.summary.iter_rows(named=True)}
    assert by["dl2-table"]["family"] == "heuristic"
    fair = {name: by[name]["avg_jct_s"] for name in ("drf", "dl2-table")}
    assert by["dl2"]["best_heuristic"] == min(fair, key=fair.get)
    assert by["dl2"]["teacher"] == "dl2-table" and by["dl2"]["ratio_to_teacher"] > 0
    assert by["drf"]["teacher"] is None
    # The registered table is the teacher the warm-up imitated, with its decision timing.
    loaded = refs["dl2-table"].loader(refs["dl2-table"], cfg).allocation
    assert dict(loaded.table) == dict(teacher.table) and len(teacher.table) > 0
    assert (loaded.interval_s, loaded.trigger) == (teacher.interval_s, teacher.trigger)
