"""Chic in the arena: the training stage registers a "chic-arena" policy, is cached on
unchanged inputs, resumes from the newest one whose network fits, gives the same policy
from the same seed in another warehouse, and its loader runs the policy in the shared
evaluation beside the heuristics; the run config wires it to the run's synthetic set."""

from __future__ import annotations

import json
from dataclasses import replace

from models.chic.stage_config import ChicArenaConfig
from models.evaluation import EvalConfig, evaluate
from pipelines.config import run_config
from pipelines.progress import QUIET
from pipelines.registry import SYSTEMS
from pipelines.stages import learned_policies
from pipelines.system import RunContext
from pipelines.systems.chic import plugin, steps
from pipelines.systems.chic.stages import train_chic_arena_stage
from tests.learned_eval import assert_cached, assert_reproducible, tiny_set_evaluation, tiny_trained
from tracelib.configs import resized
from tracelib.sim import ClusterConfig
from warehouse import connect, read_frame

SIM = replace(EvalConfig().sim_config(0), cluster=ClusterConfig(n_servers=8))
TINY = resized(
    ChicArenaConfig(
        workload_set="tiny", sim=SIM, train_sequences=2, val_sequences=1, jobs_per_episode=5
    ),
    {"cem.iterations": 2, "cem.n_trajectories": 2, "cem.fit_epochs": 1},
)


trained = tiny_trained("chic-arena", train_chic_arena_stage, TINY)


def test_registers_an_arena_policy_with_its_curve(trained):
    path, first = trained
    assert first.policy_id.startswith("chic-arena-") and first.parent_policy_id is None
    with connect(path) as con:
        row = read_frame(con, "SELECT * FROM policies WHERE policy_id = ?", [first.policy_id])
        curve = read_frame(
            con, "SELECT * FROM chic_learning_curves WHERE policy_id = ?", [first.policy_id]
        )
    assert row["system"][0] == "chic-arena"
    config = json.loads(row["config"][0])
    assert config["net"]["setting"] == "dl2" and config["net"]["window"] == 20
    metrics = json.loads(row["metrics"][0])
    assert metrics["workload_set"] == "tiny" and metrics["episodes"] == 4  # 2 x 10 jobs / 5
    assert json.loads(row["training_workloads"][0]) == ["tiny/train/000", "tiny/train/001"]
    assert curve["iteration"].to_list() == [1, 2]


def test_unchanged_inputs_are_cached_and_new_ones_resume(trained, tmp_path):
    path, first = trained
    assert_cached(train_chic_arena_stage, path, TINY, first)
    # Another seed is a new input: it continues from the newest arena policy.
    second = train_chic_arena_stage(path, replace(TINY, seed=1))
    assert second.parent_policy_id == first.policy_id and not second.metrics.get("cached")
    # A network of another shape cannot continue it: from scratch, said in the metrics.
    other = train_chic_arena_stage(path, resized(TINY, {"cem.scenario.window": 10}))
    assert other.parent_policy_id is None and "from scratch" in other.metrics["resume_note"]
    # Chic-Pair has its own lineage.
    pair = train_chic_arena_stage(path, TINY, "chic-pair")
    assert pair.policy_id.startswith("chic-pair-arena-") and pair.parent_policy_id is None


def test_same_seed_same_policy_in_another_warehouse(trained, tmp_path):
    assert_reproducible(train_chic_arena_stage, TINY, trained[1], tmp_path)


def test_loader_runs_the_policy_beside_the_heuristics(trained):
    path, first = trained
    refs = learned_policies(path, {"chic": first.policy_id}, SYSTEMS.loaders())
    jobs, workloads, cfg = tiny_set_evaluation(path, refs, ("drf", "optimus"), 2, SIM.cluster)
    tables = evaluate(jobs, workloads, cfg)
    policies = dict(tables.runs.select("scheduler", "policy").unique().rows())
    assert policies["chic"] == f"{first.policy_id}+load-balancing"
    chic = tables.summary.filter(tables.summary["scheduler"] == "chic").row(0, named=True)
    assert chic["family"] == "chic" and chic["n_runs"] == 2
    assert chic["best_heuristic"] in ("drf", "optimus") and chic["ratio_to_best_heuristic"] > 0
    assert evaluate(jobs, workloads, cfg).runs.equals(tables.runs)  # deterministic


def test_the_whole_trace_replay_schedules_every_job_in_batches(trained):
    path, first = trained
    [ref] = learned_policies(path, {"chic": first.policy_id}, SYSTEMS.loaders())
    windowed = steps.load_arena_policy(ref, EvalConfig())
    whole = steps.load_arena_policy(ref, replace(EvalConfig(), window=None))
    assert not windowed.allocation.batches and whole.allocation.batches


def test_steps_enter_each_variant_and_load_both_systems():
    class Done:
        def __init__(self, value):
            self.value = value

        def result(self):
            return self.value

    pending = {
        "arena": {
            "chic": {
                "dl2-synthetic": Done({"policy_id": "chic-arena-1"}),
                "prod": Done({"policy_id": "chic-arena-2"}),
            }
        }
    }
    run = RunContext(None, QUIET, None, ("prod",), "dl2-synthetic", ("dl2-synthetic", "prod"))
    assert steps.arena(run, pending) == {
        "chic": {"dl2-synthetic": "chic-arena-1", "prod": "chic-arena-2"}
    }
    assert steps.arena(run, {}) == {}
    assert set(steps.loaders()) == {"chic-arena", "chic-pair-arena"}
    assert {"chic-arena", "chic-pair-arena"} <= set(SYSTEMS.loaders())


def test_run_config_trains_on_the_runs_synthetic_set():
    default = run_config(SYSTEMS, seed=3).learned["chic"]
    assert default.arena.workload_set == "dl2-synthetic"
    assert default.arena.seed not in (default.train.seed, 3)  # its own stream
    assert default.arena.sim == EvalConfig().sim_config(0)
    assert default.arena.cem_config("chic").scenario.sim == EvalConfig().sim_config(0)
    assert default.arena.cem.scenario.placement == EvalConfig().default_placement
    sizes = [run_config(SYSTEMS, budget=b).learned["chic"].arena for b in plugin.BUDGETS]
    smoke, large = sizes
    assert smoke.iterations < default.arena.iterations < large.iterations
    off = run_config(SYSTEMS, options={"chic_arena_iterations": 0}).learned["chic"]
    assert off.arena.iterations == 0 and off.train.cem.iterations > 0
    assert default.arena.cem.mask_absent and default.arena.cem.smoothing == 1.0
    arena = run_config(SYSTEMS, options={"chic_as_published": True}).learned["chic"].arena
    paper = arena.cem_config("chic")
    assert not (paper.mask_absent or paper.work_conserving) and paper.smoothing == 0.7
