"""The evaluation stage: pure functions on a tiny workload, storage, the flow end to end."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import numpy as np
import polars as pl
import pytest

from models.contracts import EvalJobs, EvalRuns, EvalSummary
from models.evaluation import (
    EvalConfig,
    NotApplicable,
    default_schedulers,
    evaluate,
    is_oracle,
    plot_name,
    resolve_scheduler,
    store_evaluation,
    write_jct_cdf_plots,
)
from models.heuristics import registry
from tests.tiny_run import SMALL_RUN
from tracelib.catalogue import by_name
from tracelib.contracts import WorkloadJobs, Workloads
from tracelib.sim import ClusterConfig, Scheduler, SpeedConfig, dl2_like_frame
from tracelib.stats import mean_ci
from warehouse import ContractViolation, connect, read_frame, transaction, write_frame
from warehouse.io import validate

SCHEDULERS = ("fifo", "drf", "optimus")


def tiny_workloads(
    n_sequences: int = 2,
    n_jobs: int = 8,
    name: str = "tiny",
    split: str = "test",
    first_seed: int = 100,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`workloads` and `workload_jobs` rows: n_sequences sequences of n_jobs short jobs
    (sequence s drawn with seed first_seed + s)."""
    jobs, rows = [], []
    for s in range(n_sequences):
        workload_id = f"{name}/{split}/{s:03d}"
        frame = dl2_like_frame(
            n_jobs, seed=first_seed + s, mean_duration_min=40.0, median_duration_min=20.0
        )
        jobs.append(frame.with_columns(pl.lit(workload_id).alias("workload_id")))
        rows.append(
            {
                "workload_id": workload_id,
                "derivation": name,
                "split": split,
                "sequence_no": s,
                "source_ids": "synthetic:sim",
                "source_hashes": "0" * 64,
                "n_jobs": n_jobs,
                "span_s": float(frame["arrival_s"].max()),
                "seed": first_seed + s,
                "params": "{}",
                "code_version": "test",
                "derived_at": datetime(2026, 1, 1),
            }
        )
    workload_jobs = pl.concat(jobs).select(list(WorkloadJobs.to_schema().columns))
    return validate(pl.DataFrame(rows), Workloads), validate(workload_jobs, WorkloadJobs)


def tiny_config(**overrides) -> EvalConfig:
    """Three schedulers on 4 servers (8 GPUs): the 8 jobs contend for the cluster."""
    base = {
        "schedulers": SCHEDULERS,
        "n_seeds": 2,
        "cluster": ClusterConfig(n_servers=4),
        "window": None,
    }
    return EvalConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def tiny():
    return tiny_workloads()


@pytest.fixture(scope="module")
def tables(tiny):
    workloads, workload_jobs = tiny
    return evaluate(workload_jobs, workloads, tiny_config())


# -- the pure functions ----------------------------------------------------------------------


def test_one_run_per_scheduler_workload_and_seed(tables, tiny):
    runs = tables.runs
    assert runs.height == len(SCHEDULERS) * 2 * 2
    keys = runs.select("scheduler", "workload_id", "replicate")
    assert keys.unique().height == runs.height
    assert set(runs["scheduler"]) == set(SCHEDULERS)
    assert set(runs["workload_id"]) == {"tiny/test/000", "tiny/test/001"}
    assert runs["run_id"].n_unique() == runs.height
    assert (runs["eval_id"] == tables.eval_id).all()
    # the same two seeds for every scheduler and workload (paired replicates)
    assert runs.group_by("replicate").agg(pl.col("seed").n_unique())["seed"].to_list() == [1, 1]
    assert runs["seed"].n_unique() == 2
    assert tables.jobs.height == runs.height * 8
    assert runs["policy"].to_list()[0] == "fifo+load-balancing"
    for contract, frame in ((EvalRuns, runs), (EvalJobs, tables.jobs)):
        validate(frame, contract)
    validate(tables.summary, EvalSummary)


def test_job_times_jct_slowdown_and_gpu_time(tables):
    jobs = tables.jobs
    assert np.allclose(jobs["jct_s"], jobs["finish_s"] - jobs["arrival_s"])
    assert (jobs["start_s"] >= jobs["arrival_s"]).all()
    assert (jobs["finish_s"] >= jobs["start_s"]).all()
    # slowdown >= 1 up to the noise the ideal ignores: +-10% speed variation, locality gain
    assert (jobs["slowdown"] >= 1 / (1.1 * 1.07)).all()
    assert jobs["slowdown"].median() > 1
    gpu_models = {m for m, jt in by_name().items() if jt.worker_gpu > 0}
    uses_gpu = jobs["model"].is_in(list(gpu_models))
    assert (jobs.filter(uses_gpu)["gpu_time_s"] > 0).all()
    assert (jobs.filter(~uses_gpu)["gpu_time_s"] == 0).all()
    # a job holds at most 16 workers' GPUs from its start to its finish
    assert (jobs["gpu_time_s"] <= 16 * (jobs["finish_s"] - jobs["start_s"]) + 1e-6).all()
    runs = tables.runs
    assert ((runs["utilization"] > 0) & (runs["utilization"] <= 1)).all()
    per_run = jobs.group_by("run_id").agg(pl.col("gpu_time_s").sum().alias("g"))
    joined = runs.join(per_run, on="run_id")
    assert np.allclose(joined["gpu_time_s"], joined["g"])
    assert np.allclose(joined["utilization"], joined["g"] / (8 * joined["makespan_s"]))


def test_start_is_the_first_placement_in_the_simulator(tables, tiny):
    """Independent of the event log: re-run one FIFO run and read the placements."""
    from tracelib.sim import Simulator, jobs_from_frame

    _, workload_jobs = tiny
    cfg = tiny_config()
    run = tables.runs.filter(
        (pl.col("scheduler") == "fifo") & (pl.col("workload_id") == "tiny/test/000")
    ).row(0, named=True)
    frame = workload_jobs.filter(pl.col("workload_id") == run["workload_id"])
    result = Simulator(
        jobs_from_frame(frame), cfg.policy("fifo"), cfg.sim_config(run["seed"])
    ).run()
    first = (
        result.placements.filter(pl.col("workers") > 0)
        .group_by("job_id")
        .agg(pl.col("time_s").min().alias("first"))
    )
    jobs = tables.jobs.filter(pl.col("run_id") == run["run_id"])
    joined = jobs.join(first, left_on=pl.col("job_index").cast(pl.Int64), right_on="job_id").sort(
        "job_index"
    )
    assert joined.height == 8
    assert (joined["start_s"] == joined["first"]).all()
    assert joined["finish_s"].to_list() == result.jobs.sort("job_id")["finish_s"].to_list()
    # the cluster is contended: under FIFO some job waits beyond the first decision
    assert ((jobs["start_s"] - jobs["arrival_s"]) > cfg.slot_s).any()


def test_without_noise_or_locality_no_job_beats_its_ideal(tiny):
    workloads, workload_jobs = tiny
    cfg = tiny_config(speed=SpeedConfig(locality=False), n_seeds=1)
    jobs = evaluate(workload_jobs, workloads, cfg).jobs
    assert (jobs["slowdown"] >= 1 - 1e-9).all()


def test_single_job_start_and_gpu_time_are_exact():
    """One job with its requested 2 workers and 3 PSs arrives at t=100: the first decision
    (t=1200) starts it, it keeps its placement, so it holds 2 GPUs from 1200 to its finish."""
    workloads, workload_jobs = tiny_workloads(n_sequences=1, n_jobs=1)
    workload_jobs = workload_jobs.with_columns(
        pl.lit("resnet-50").alias("model"),
        pl.lit(100.0).alias("arrival_s"),
        pl.lit(2, dtype=pl.Int32).alias("num_workers"),
        pl.lit(3, dtype=pl.Int32).alias("num_ps"),
    )
    cfg = tiny_config(schedulers=("requested",), n_seeds=1, speed=SpeedConfig())
    tables = evaluate(workload_jobs, workloads, cfg)
    [job] = tables.jobs.to_dicts()
    assert job["start_s"] == 1200.0
    assert job["gpu_time_s"] == pytest.approx(2 * (job["finish_s"] - 1200.0))
    assert job["slowdown"] > 1  # waited for the slot, and 2+3 is not resnet-50's best
    [run] = tables.runs.to_dicts()
    assert run["makespan_s"] == pytest.approx(job["finish_s"] - 100.0)


def test_summary_intervals(tables):
    summary = tables.summary
    assert summary["n_runs"].to_list() == [4, 4, 4]
    assert summary["scheduler"].to_list() == list(SCHEDULERS)  # config order
    for stem, mean in (("avg_jct", "avg_jct_s"), ("utilization", "utilization")):
        assert (summary[f"{stem}_ci_low"] <= summary[mean]).all()
        assert (summary[mean] <= summary[f"{stem}_ci_high"]).all()
    for row in summary.to_dicts():
        # The test sequence is the unit: its two seeds averaged first, then the interval
        # over the two sequences (1 degree of freedom), not over four runs.
        per_sequence = (
            tables.runs.filter(pl.col("scheduler") == row["scheduler"])
            .group_by("workload_id")
            .agg(pl.col("avg_jct_s").mean())
        )
        assert per_sequence.height == row["n_sequences"] == 2
        mean, low, high = mean_ci(per_sequence["avg_jct_s"].to_numpy())
        assert row["avg_jct_s"] == pytest.approx(mean)
        assert (row["avg_jct_ci_low"], row["avg_jct_ci_high"]) == pytest.approx((low, high))
        assert row["avg_jct_slots"] == pytest.approx(mean / 1200.0)


def test_jct_ratio_is_paired_with_the_reference(tables):
    runs = tables.runs
    ref = runs.filter(pl.col("scheduler") == "drf").select(
        "workload_id", "replicate", pl.col("avg_jct_s").alias("ref")
    )
    ratios = runs.join(ref, on=["workload_id", "replicate"]).with_columns(
        (pl.col("avg_jct_s") / pl.col("ref")).alias("r")
    )
    summary = tables.summary
    assert (summary["reference"] == "drf").all()
    for row in summary.to_dicts():
        per_sequence = (
            ratios.filter(pl.col("scheduler") == row["scheduler"])
            .group_by("workload_id")
            .agg(pl.col("r").mean())
        )
        expected, low, high = mean_ci(per_sequence["r"].to_numpy())
        assert row["jct_ratio"] == pytest.approx(expected)
        if row["scheduler"] != "drf":
            # Over 2 sequences, not 4 paired runs.
            assert (row["jct_ratio_ci_low"], row["jct_ratio_ci_high"]) == pytest.approx((low, high))
    drf = summary.filter(pl.col("scheduler") == "drf").to_dicts()[0]
    assert drf["jct_ratio"] == drf["jct_ratio_ci_low"] == drf["jct_ratio_ci_high"] == 1.0


def test_confidence_interval_properties():
    mean, low, high = mean_ci([1.0, 2.0, 3.0, 4.0])
    assert low < mean == 2.5 < high
    # same spread, fewer runs: wider
    few = mean_ci([1.0, 2.0, 3.0, 4.0])
    many = mean_ci([1.0, 2.0, 3.0, 4.0] * 4)
    assert few[2] - few[1] > many[2] - many[1]
    assert mean_ci([5.0]) == (5.0, None, None)
    # the 95% Student-t interval covers the true mean about 95% of the time
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(2000):
        _, low, high = mean_ci(rng.normal(10.0, 3.0, 5))
        covered += low <= 10.0 <= high
    assert 0.93 < covered / 2000 < 0.97


def test_one_run_has_no_interval(tiny):
    workloads, workload_jobs = tiny
    cfg = tiny_config(n_seeds=1, max_sequences=1, schedulers=("drf",))
    summary = evaluate(workload_jobs, workloads, cfg).summary
    assert summary["n_runs"].to_list() == [1]
    assert summary["avg_jct_ci_low"].is_null().all()
    validate(summary, EvalSummary)


def test_fewer_runs_give_a_wider_interval_in_the_summary(tiny):
    workloads, workload_jobs = tiny
    cfg = tiny_config(schedulers=("drf",), n_seeds=2)
    widths = []
    for n_seeds in (2, 8):
        row = evaluate(workload_jobs, workloads, replace(cfg, n_seeds=n_seeds)).summary.row(
            0, named=True
        )
        widths.append(row["avg_jct_ci_high"] - row["avg_jct_ci_low"])
    assert widths[0] > widths[1]


def test_same_seed_same_tables_other_seed_other_runs(tables, tiny):
    workloads, workload_jobs = tiny
    again = evaluate(workload_jobs, workloads, tiny_config())
    assert again.eval_id == tables.eval_id
    assert again.runs.equals(tables.runs)
    assert again.jobs.equals(tables.jobs)
    assert again.summary.equals(tables.summary)
    other = evaluate(workload_jobs, workloads, tiny_config(seed=1))
    assert other.eval_id != tables.eval_id
    assert set(other.runs["seed"]).isdisjoint(set(tables.runs["seed"]))
    assert not other.jobs["finish_s"].equals(tables.jobs["finish_s"])


def test_eval_id_follows_the_workloads_content(tables, tiny):
    workloads, workload_jobs = tiny
    longer = workload_jobs.with_columns(pl.col("epochs") * 1.5)
    assert evaluate(longer, workloads, tiny_config()).eval_id != tables.eval_id


def test_selection_by_set_split_and_count(tiny):
    workloads, workload_jobs = tiny
    other_w, other_j = tiny_workloads(name="other")
    train_w, train_j = tiny_workloads(name="tiny", split="train")
    all_w = pl.concat([workloads, other_w, train_w])
    all_j = pl.concat([workload_jobs, other_j, train_j])
    cfg = tiny_config(schedulers=("drf",), n_seeds=1)
    runs = evaluate(all_j, all_w, replace(cfg, workload_sets=("tiny",))).runs
    assert sorted(runs["workload_id"]) == ["tiny/test/000", "tiny/test/001"]
    runs = evaluate(all_j, all_w, replace(cfg, max_sequences=1)).runs
    assert sorted(runs["workload_id"]) == ["other/test/000", "tiny/test/000"]
    with pytest.raises(ValueError, match="no 'test' workloads"):
        evaluate(all_j, all_w, replace(cfg, workload_sets=("missing",)))


def test_the_baselines_also_run_on_the_validation_sequences_where_the_best_is_chosen(
    tables, tiny, tmp_path
):
    workloads, workload_jobs = tiny
    val_w, val_j = tiny_workloads(split="validation", first_seed=300)
    both = evaluate(pl.concat([workload_jobs, val_j]), pl.concat([workloads, val_w]), tiny_config())
    # The test runs are the same runs: the held-out ones only choose the best heuristic.
    keys = ["scheduler", "workload_id", "replicate"]
    metrics = ["avg_jct_s", "makespan_s", "mean_slowdown", "utilization"]
    assert (
        both.runs.sort(keys)
        .select(*keys, *metrics)
        .equals(tables.runs.sort(keys).select(*keys, *metrics))
    )
    assert both.eval_id != tables.eval_id
    selection = both.selection
    assert selection.height == len(SCHEDULERS) * 2 * 2
    assert set(selection["split"]) == {"validation"}
    assert set(selection["workload_id"]) == {"tiny/validation/000", "tiny/validation/001"}
    assert set(both.summary["best_heuristic_chosen_on"]) == {"validation"}
    assert set(tables.summary["best_heuristic_chosen_on"]) == {"test"}
    fair = selection.filter(~pl.col("scheduler").str.contains("oracle"))
    means = fair.group_by("scheduler").agg(pl.col("avg_jct_s").mean()).sort("avg_jct_s")
    assert set(both.summary["best_heuristic"]) == {means["scheduler"][0]}
    # Not asked for: no held-out runs, the best on the test sequences.
    alone = evaluate(
        pl.concat([workload_jobs, val_j]),
        pl.concat([workloads, val_w]),
        tiny_config(choose_on=None),
    )
    assert alone.selection is None
    assert set(alone.summary["best_heuristic_chosen_on"]) == {"test"}
    with connect(tmp_path / "wh.duckdb") as con:
        for _ in range(2):
            with transaction(con):
                store_evaluation(con, both)
        assert _counts(con, both.eval_id)["eval_selection_runs"] == selection.height


def test_the_choosing_split_is_not_the_evaluated_one():
    with pytest.raises(ValueError, match="another split"):
        tiny_config(split="validation", choose_on="validation")


# -- schedulers ----------------------------------------------------------------------------


def test_default_schedulers_are_every_family_s_applicable_baselines():
    names = default_schedulers()
    families = (
        registry.HEURISTICS,
        registry.OPTIMUS_VARIANTS,
        registry.OTHER_BASELINES,
        registry.PREEMPTIVE_BASELINES,
    )
    assert names and set(names) <= {name for family in families for name in family}
    assert {"fifo", "drf", "optimus", "lif-quad", "sjf+first-fit"} <= set(names)
    # Optimus at its best interval stands beside every learned system.
    assert {"optimus-300", "optimus-events"} <= set(names)
    # So do the preemptive ones (RL-TAPS preempts), each a candidate best heuristic.
    assert {"tiresias-las", "tiresias-gittins", "srtf-preemptive"} <= set(names)
    assert not any(is_oracle(name) for name in registry.PREEMPTIVE_BASELINES)
    assert EvalConfig().schedulers == names


def test_scheduler_resolution():
    drf = resolve_scheduler("drf")
    assert isinstance(drf, Scheduler) and drf.name == "drf+load-balancing"
    assert resolve_scheduler("drf+bin-packing").name == "drf+bin-packing"
    # a placement-only policy runs with the default allocation
    assert resolve_scheduler("bin-packing").name == "requested+bin-packing"
    with pytest.raises(NotApplicable, match="unknown scheduler"):
        resolve_scheduler("no-such")
    with pytest.raises(NotApplicable):
        resolve_scheduler("bin-packing+drf")
    with pytest.raises(NotApplicable):
        EvalConfig(schedulers=("drf", "no-such"))
    with pytest.raises(ValueError, match="twice"):
        EvalConfig(schedulers=("drf", "drf"))


def test_joint_policies_apply_only_to_their_settings(monkeypatch):
    from dataclasses import dataclass
    from types import MappingProxyType

    @dataclass(frozen=True)
    class Picker:
        name: str = "picker"
        interval_s: float | None = None
        uses_oracle: bool = False
        settings: tuple[str, ...] = ("rl-taps",)

        def decide(self, snap, rng):
            raise AssertionError("not run")

    joint = registry.Registry(
        "joint policy",
        MappingProxyType(
            {"picker": Picker, "dl2-joint": lambda: Picker("dl2-joint", settings=("dl2",))}
        ),
    )
    monkeypatch.setattr(registry, "JOINT_TEST", joint, raising=False)
    with pytest.raises(NotApplicable, match="does not run in the dl2 setting"):
        resolve_scheduler("picker")
    assert resolve_scheduler("dl2-joint").name == "dl2-joint"


# -- storage and plots ---------------------------------------------------------------------


def _counts(con, eval_id=None) -> dict[str, int]:
    where = " WHERE eval_id = ?" if eval_id else ""
    params = [eval_id] if eval_id else None
    return {
        t: read_frame(con, f"SELECT count(*) AS n FROM {t}{where}", params)["n"][0]
        for t in ("eval_runs", "eval_jobs", "eval_selection_runs", "eval_summary")
    }


def test_storing_again_replaces_the_evaluation(tables, tiny, tmp_path):
    workloads, workload_jobs = tiny
    other = evaluate(workload_jobs, workloads, tiny_config(seed=1, schedulers=("drf",)))
    expected = {
        "eval_runs": tables.runs.height,
        "eval_jobs": tables.jobs.height,
        "eval_selection_runs": 0,
        "eval_summary": tables.summary.height,
    }
    with connect(tmp_path / "wh.duckdb") as con:
        for _ in range(2):
            with transaction(con):
                assert store_evaluation(con, tables) == expected
        with transaction(con):
            store_evaluation(con, other)
        assert _counts(con, tables.eval_id) == expected
        assert _counts(con)["eval_runs"] == tables.runs.height + other.runs.height
        stored = read_frame(con, "SELECT * FROM eval_jobs WHERE eval_id = ?", [tables.eval_id])
    assert stored.sort("run_id", "job_index").equals(tables.jobs.sort("run_id", "job_index"))


def test_contract_violation_writes_nothing(tables, tmp_path):
    broken_jobs = tables.jobs.with_columns(
        pl.when(pl.col("job_index") == 3)
        .then(pl.col("arrival_s") - 10.0)
        .otherwise(pl.col("start_s"))
        .alias("start_s")
    )
    with pytest.raises(
        ContractViolation, match=r"(?s)eval_jobs.*started_between_arrival_and_finish"
    ):
        validate(broken_jobs, EvalJobs)
    wrong_jct = tables.jobs.with_columns(pl.col("jct_s") + 5.0)
    with pytest.raises(ContractViolation, match="jct_is_finish_minus_arrival"):
        validate(wrong_jct, EvalJobs)
    bad_ci = tables.summary.with_columns(pl.col("avg_jct_s") * 10)
    with pytest.raises(ContractViolation, match=r"(?s)eval_summary.*mean_inside_its_interval"):
        validate(bad_ci, EvalSummary)

    with connect(tmp_path / "wh.duckdb") as con:
        with transaction(con):
            store_evaluation(con, tables)
        before = _counts(con)
        # runs and jobs are replaced first; the broken summary fails; all of it rolls back
        broken = replace(tables, runs=tables.runs.head(1), summary=bad_ci)
        with pytest.raises(ContractViolation, match="eval_summary"):
            with transaction(con):
                store_evaluation(con, broken)
        assert _counts(con) == before


def test_ddl_rejects_a_start_before_arrival(tables, tmp_path):
    import duckdb

    row = tables.jobs.head(1).with_columns(pl.col("arrival_s") + 1e6)
    with connect(tmp_path / "wh.duckdb") as con:
        arrow = row.to_arrow()  # noqa: F841 - read by name in the SQL
        with pytest.raises(duckdb.ConstraintException):
            con.execute("INSERT INTO eval_jobs BY NAME SELECT * FROM arrow")


def test_one_jct_cdf_per_workload_set(tiny, tmp_path):
    workloads, workload_jobs = tiny
    other_w, other_j = tiny_workloads(name="other:set")
    tables = evaluate(
        pl.concat([workload_jobs, other_j]),
        pl.concat([workloads, other_w]),
        tiny_config(n_seeds=1),
    )
    paths = write_jct_cdf_plots(tables, tmp_path / "plots")
    assert sorted(paths) == ["other:set", "tiny"]
    assert paths["other:set"].endswith(plot_name("other:set")) and ":" not in plot_name("a:b")
    for path in paths.values():
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# -- stage, CLI and flows ------------------------------------------------------------------


def _load_tiny(path, **kwargs) -> None:
    workloads, workload_jobs = tiny_workloads(**kwargs)
    with connect(path) as con, transaction(con):
        write_frame(con, workloads, Workloads)
        write_frame(con, workload_jobs, WorkloadJobs)


def test_an_unchanged_evaluation_is_not_simulated_again(warehouse_path, tmp_path, monkeypatch):
    import pipelines.stages as stages

    _load_tiny(warehouse_path)
    cfg = tiny_config(seed=0, schedulers=("drf", "fifo", "tetris"))
    first = stages.evaluate_stage(warehouse_path, cfg, tmp_path / "a")
    with connect(warehouse_path) as con:
        before = {t: read_frame(con, f"SELECT * FROM {t} ORDER BY ALL") for t in _counts(con)}

    def must_not_run(*args, **kwargs):
        raise AssertionError("the stored evaluation should have been reused")

    monkeypatch.setattr(stages, "evaluate", must_not_run)
    again = stages.evaluate_stage(warehouse_path, cfg, tmp_path / "b")
    assert not first.cached and again.cached
    assert (again.eval_id, again.runs, again.jobs) == (first.eval_id, first.runs, first.jobs)
    assert again.summary == first.summary
    with connect(warehouse_path) as con:
        for table, frame in before.items():
            assert read_frame(con, f"SELECT * FROM {table} ORDER BY ALL").equals(frame), table
    # The plots drawn from the stored rows are the ones drawn from the fresh ones.
    name = plot_name("tiny")
    fresh = (tmp_path / "a" / first.eval_id / name).read_bytes()
    assert (tmp_path / "b" / again.eval_id / name).read_bytes() == fresh
    # Where they were drawn already, they are not drawn again.
    monkeypatch.setattr(stages, "write_jct_cdf_plots", must_not_run)
    third = stages.evaluate_stage(warehouse_path, cfg, tmp_path / "a")
    assert third.cached and third.plots == first.plots
    # A different config is a different evaluation, and runs.
    with pytest.raises(AssertionError, match="reused"):
        stages.evaluate_stage(warehouse_path, replace(cfg, n_seeds=1), tmp_path / "c")


def test_evaluate_verb(warehouse_path, capsys):
    from pipelines.cli import main

    _load_tiny(warehouse_path)
    args = ["evaluate", "--set", "tiny", "--scheduler", "drf", "--scheduler", "tetris"]
    assert main([*args, "--seeds", "2", "--servers", "4"]) == 0
    out = capsys.readouterr().out
    assert "drf" in out and "tetris" in out and "95% CI" in out
    assert (warehouse_path.parent / "evaluations" / warehouse_path.stem).is_dir()
    with connect(warehouse_path) as con:
        assert _counts(con)["eval_runs"] == 2 * 2 * 2
        runs = read_frame(con, "SELECT flow, status FROM pipeline_runs")
    assert runs.rows() == [("schedlab-evaluate", "completed")]
    assert main(["evaluate", "--scheduler", "no-such"]) == 1
    assert "unknown scheduler" in capsys.readouterr().err
    assert main(["evaluate", "--set", "missing"]) == 1


@pytest.mark.flow
def test_evaluation_flows_end_to_end(prefect_harness, warehouse_path, tmp_path):
    import json

    from pipelines.flows import evaluate_flow, nightly_flow

    # The smoke budget: with no learned system, what it changes is only that the simulator's
    # large fidelity checks are skipped (most of this flow's time otherwise; they are tested
    # in tests/test_fidelity.py); the evaluation is the default budget's (4 sequences at most).
    summary = nightly_flow(
        warehouse=str(warehouse_path),
        seed=2,
        **SMALL_RUN,
        eval_seeds=2,
        eval_sequences=4,
        systems=[],
    )
    [evaluated] = summary["evaluated"]
    assert evaluated["workload_sets"] == ["dl2-synthetic"]
    assert all(p.endswith(".png") for p in evaluated["plots"].values())
    with connect(warehouse_path) as con:
        counts = _counts(con, evaluated["eval_id"])
        runs = read_frame(con, "SELECT * FROM eval_runs")
        recorded = read_frame(con, "SELECT summary FROM pipeline_runs")["summary"][0]
    n_test = summary["derived"][0]["splits"]["test"]
    assert counts["eval_runs"] == len(default_schedulers()) * n_test * 2
    assert counts["eval_summary"] == len(default_schedulers())
    assert json.loads(recorded)["evaluated"][0]["eval_id"] == evaluated["eval_id"]
    assert (runs["trace_version"].str.len_chars() == 64).all()

    again = evaluate_flow(
        workload_sets=["dl2-synthetic"],
        schedulers=["drf", "optimus"],
        n_seeds=2,
        warehouse=str(warehouse_path),
        out_dir=str(tmp_path / "out"),
    )
    assert again["runs"] == 2 * n_test * 2
    assert (tmp_path / "out" / again["eval_id"] / plot_name("dl2-synthetic")).exists()
    with connect(warehouse_path) as con:
        flows = read_frame(con, "SELECT flow, status FROM pipeline_runs ORDER BY started_at")
    assert flows.rows() == [("schedlab-nightly", "completed"), ("schedlab-evaluate", "completed")]


def _two_replicate_runs(jct: dict[str, list[float]]) -> pl.DataFrame:
    """eval_runs-like rows of one set: per scheduler, its average JCTs for (sequence k // 2,
    replicate k % 2), every other metric constant."""
    return pl.DataFrame(
        [
            {
                "eval_id": "e",
                "workload_set": "s",
                "scheduler": name,
                "policy": name,
                "workload_id": f"w{k // 2}",
                "replicate": k % 2,
                "seed": k % 2,
                "n_jobs": 3,
                "avg_jct_s": v,
                "median_jct_s": v,
                "p95_jct_s": v,
                "makespan_s": v,
                "mean_slowdown": 1.0,
                "utilization": 0.5,
            }
            for name, values in jct.items()
            for k, v in enumerate(values)
        ]
    )


def _summary_by_scheduler(jct: dict[str, list[float]], **labels) -> dict[str, dict]:
    """The summary rows, by scheduler, of `_two_replicate_runs(jct)` against drf at 95 %
    confidence; `labels` are the families and teachers `summarize_runs` takes."""
    from models.evaluation import summarize_runs

    summary = summarize_runs(
        _two_replicate_runs(jct),
        reference="drf",
        order=list(jct),
        confidence=0.95,
        slot_s=1.0,
        config="{}",
        version="v",
        **labels,
    )
    return {r["scheduler"]: r for r in summary.iter_rows(named=True)}


def test_the_best_heuristic_is_never_an_oracle_and_ratios_are_paired():
    # Four sequences x two replicates; the oracle is fastest, drf the best fair heuristic.
    jct = {
        "optimus-oracle": [5.0, 6, 5, 6, 5, 6, 5, 6],
        "drf": [10.0, 12, 10, 12, 10, 12, 10, 12],
        "fifo": [20.0, 24, 30, 36, 22, 26, 24, 28],
        "dl2": [9.0, 12, 11, 12, 10, 12, 10, 12],
    }
    by = _summary_by_scheduler(jct, families={"dl2": "dl2"})
    assert {r["best_heuristic"] for r in by.values()} == {"drf"}
    assert by["dl2"]["family"] == "dl2" and by["fifo"]["family"] == "heuristic"
    assert by["drf"]["ratio_to_best_heuristic"] == 1.0
    # Paired by seed, seeds averaged within each sequence, then over the four sequences:
    # (9/10 + 12/12) / 2, (11/10 + 12/12) / 2, 1 and 1 (not the ratio of the means).
    assert by["dl2"]["ratio_to_best_heuristic"] == pytest.approx((0.95 + 1.05 + 1 + 1) / 4)
    assert by["dl2"]["n_sequences"] == 4
    assert by["dl2"]["ratio_ci_low"] < 1 < by["dl2"]["ratio_ci_high"]
    assert by["fifo"]["ratio_ci_low"] > 1


def test_the_best_heuristic_is_the_best_on_held_out_runs_and_judged_on_the_test_runs():
    from models.evaluation import summarize_runs

    # On the test runs drf is best; on the held-out runs fifo is (the oracle better still,
    # sjf never ran there): fifo is the best heuristic, every ratio on the test runs.
    test = {
        "drf": [10.0, 10, 10, 10, 10, 10, 10, 10],
        "fifo": [11.0, 11, 11, 11, 11, 11, 11, 11],
        "sjf": [5.0, 5, 5, 5, 5, 5, 5, 5],
        "dl2": [11.0, 11, 11, 11, 11, 11, 11, 11],
    }
    held_out = {"drf": [9.0, 9, 9, 9], "fifo": [8.0, 8, 8, 8], "optimus-oracle": [1.0] * 4}
    selection = _two_replicate_runs(held_out).with_columns(pl.lit("validation").alias("split"))
    summary = summarize_runs(
        _two_replicate_runs(test).with_columns(pl.lit("test").alias("split")),
        reference="drf",
        order=[*test, "optimus-oracle"],
        confidence=0.95,
        slot_s=1.0,
        config="{}",
        version="v",
        families={"dl2": "dl2"},
        selection=selection,
    )
    by = {r["scheduler"]: r for r in summary.iter_rows(named=True)}
    assert {r["best_heuristic"] for r in by.values()} == {"fifo"}
    assert {r["best_heuristic_chosen_on"] for r in by.values()} == {"validation"}
    assert by["dl2"]["ratio_to_best_heuristic"] == pytest.approx(1.0)
    assert by["drf"]["ratio_to_best_heuristic"] == pytest.approx(10 / 11)
    assert set(by) == set(test)  # the held-out runs are not summarized


def test_a_learned_policy_is_compared_with_its_teacher_and_a_built_baseline_can_be_best():
    # Three sequences x two replicates. "table" is a baseline a learned system built (its
    # family: heuristic), better than drf: it is the best heuristic, and dl2's teacher.
    jct = {
        "drf": [10.0, 10, 10, 10, 10, 10],
        "table": [8.0, 8, 9, 9, 10, 10],
        "dl2": [8.0, 8, 9, 9, 11, 11],
        "dl2-warmup": [16.0, 16, 18, 18, 20, 20],
    }
    by = _summary_by_scheduler(
        jct,
        families={"dl2": "dl2", "dl2-warmup": "dl2", "table": "heuristic"},
        teachers={"dl2": "table", "dl2-warmup": "table", "drf": "absent"},
    )
    assert {r["best_heuristic"] for r in by.values()} == {"table"}
    assert by["dl2"]["teacher"] == "table"
    # Per sequence 1, 1, 11/10: the learning adds nothing over the table.
    assert by["dl2"]["ratio_to_teacher"] == pytest.approx((1 + 1 + 1.1) / 3)
    assert by["dl2"]["teacher_ci_low"] < 1 < by["dl2"]["teacher_ci_high"]
    assert by["dl2-warmup"]["ratio_to_teacher"] == pytest.approx(2.0)
    # No teacher named, or one that did not run: no ratio.
    for name in ("table", "drf"):
        assert by[name]["teacher"] is None and by[name]["ratio_to_teacher"] is None


def test_an_ablation_or_arena_policy_belongs_to_its_system_family():
    from models.evaluation import family_of

    assert family_of("dl2-without-replay") == "dl2"
    assert family_of("harmony-arena") == "harmony"
    assert family_of("rl-taps-arena") == "rl-taps"
    assert family_of("offline-rl") == "offline-rl"


def test_a_smaller_newer_evaluation_shows_the_larger_one_s_sample_size(warehouse_path, capsys):
    from pipelines.cli import main
    from pipelines.report import leaderboard_section

    _load_tiny(warehouse_path)
    base = ["evaluate", "--set", "tiny", "--scheduler", "drf", "--servers", "4"]
    assert main([*base, "--seeds", "3"]) == 0
    assert main([*base, "--seeds", "1"]) == 0
    capsys.readouterr()
    with connect(warehouse_path) as con:
        board = read_frame(
            con,
            "SELECT latest, n_runs, largest_n_runs, largest_eval_id, smaller_than_largest, "
            "eval_id FROM leaderboard WHERE scheduler = 'drf' ORDER BY evaluated_at",
        )
        section = leaderboard_section(con)
    large, small = board.rows(named=True)
    assert small["latest"] and not large["latest"]
    assert small["n_runs"] < large["n_runs"] == small["largest_n_runs"]
    assert small["largest_eval_id"] == large["eval_id"] and small["smaller_than_largest"]
    assert not large["smaller_than_largest"]
    (table,) = section.tables
    assert "larger_evaluation" in table.columns
    assert f"{large['n_runs']} runs in {large['eval_id']}" in str(table.rows)
