"""The pieces every learned system's steps and stages share: reading futures back, the
plugin entry built from its module, the own-scenario workloads and the evaluate-once
routine."""

from __future__ import annotations

import polars as pl
import pytest

from models.evaluation import EvalTables, scenario_workloads
from pipelines import trained
from pipelines.system_steps import arena_entry, results
from pipelines.trained import evaluate_once
from tests.toy_system import TOY, plugin, steps
from tracelib.sim import JobSpec


class Done:
    """A finished future."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


def test_results_reads_every_future_through_nested_dicts():
    pending = {"train": {"a": Done(1), "b": Done(2)}, "evaluation": Done({"x": 3}), "none": {}}
    assert results(pending) == {"train": {"a": 1, "b": 2}, "evaluation": {"x": 3}, "none": {}}


def test_arena_entry_names_one_policy_per_set_or_none():
    pending = {"arena": {"set-a": Done({"policy_id": "p1"}), "set-b": Done({"policy_id": "p2"})}}
    assert arena_entry("toy", pending) == {"toy": {"set-a": "p1", "set-b": "p2"}}
    assert arena_entry("toy", {}) == {}


def test_plugin_entry_takes_the_module_parts_and_the_steps_beside_it():
    assert TOY.budgets is plugin.BUDGETS
    assert TOY.apply is plugin.apply and TOY.seeded is plugin.seeded
    assert TOY.summary_lines is plugin.summary_lines
    assert dict(TOY.nested) == {}
    assert TOY.steps() is steps
    assert TOY.configured("smoke", {}).steps == 2


def test_scenario_workloads_pair_ids_seeds_and_sequences_in_order():
    job = JobSpec(job_id=0, model="resnet50", arrival_s=0.0, epochs=1, num_workers=1, num_ps=1)
    made = scenario_workloads("paper-set", ["w0", "w1"], [7, 9], [(job,), (job, job)])
    assert [(w.workload_id, w.sequence_no, w.seeds, len(w.jobs)) for w in made] == [
        ("w0", 0, (7,), 1),
        ("w1", 1, (9,), 2),
    ]
    assert {w.trace_version for w in made} == {"scenario:paper-set"}
    with pytest.raises(ValueError):
        scenario_workloads("paper-set", ["w0"], [7, 9], [(job,), (job,)])


def test_evaluate_once_reads_a_stored_result_back_without_simulating(tmp_path):
    def tables(advance):
        raise AssertionError("simulated although a result was stored")

    out = evaluate_once(
        tmp_path / "wh.duckdb",
        stored=lambda con: "stored",
        tables=tables,
        result=lambda con, made: "new",
        bar="test",
    )
    assert out == "stored"


def test_evaluate_once_stores_the_tables_then_reads_the_result(tmp_path, monkeypatch):
    empty = EvalTables("e0", pl.DataFrame(), pl.DataFrame(), pl.DataFrame())
    calls = []

    def tables(advance):
        calls.append("tables")
        return empty

    def result(con, made):
        calls.append("result")
        assert made is empty
        return "new"

    # What is stored is `store_evaluation`'s own business (tests/test_evaluation.py).
    monkeypatch.setattr(trained, "store_evaluation", lambda con, made: calls.append(made.eval_id))
    out = evaluate_once(
        tmp_path / "wh.duckdb", stored=lambda con: None, tables=tables, result=result, bar="test"
    )
    assert out == "new"
    assert calls == ["tables", "e0", "result"]
