"""Pandera contracts of the tables models/ writes: the learned schedulers' and the
evaluation's (DDL: warehouse/migrations/0004_learning.sql and those named below;
tests/test_contracts.py checks they agree).

decision_traces  one row per inference step of a recorded heuristic (models/dl2/recorder.py)
dl2_teacher_configs  per recording of DL2's searched teacher, each model's configuration
                 (models/dl2/search.py; DDL 0022_dl2_teacher_configs.sql)
policies         every trained policy of every learned system (models/checkpoints.py)
dl2_learning_curves  training curves of those policies (warm-up epochs, RL validation points)
checkpoint_problems  policies whose checkpoint file was found missing or refused
eval_runs, eval_selection_runs, eval_jobs, eval_summary  the evaluation's runs, jobs and
                 summary (models/evaluation `store_evaluation`)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from warehouse.contract import TableContract

KINDS = ["worker", "ps", "both", "stop"]
"""DL2 action kinds, in `tracelib.sim.builder.Action` order, then stop."""
PHASES = ["warmup", "finetune"]
CHECKPOINT_PROBLEMS = ["missing", "refused"]


class DecisionTraces(TableContract):
    run_id: pl.Utf8
    workload_id: pl.Utf8
    teacher: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    seed: pl.Int64
    decision: pl.Int32 = pa.Field(ge=0)
    step: pl.Int32 = pa.Field(ge=0)
    time_s: pl.Float64 = pa.Field(ge=0)
    n_jobs: pl.Int32 = pa.Field(ge=1)
    obs_window: pl.Int32 = pa.Field(ge=1)
    n_features: pl.Int32 = pa.Field(ge=1)
    observation: pl.List(pl.Float32)
    mask: pl.List(pl.Boolean)
    action: pl.Int32 = pa.Field(ge=0)
    kind: pl.Utf8 = pa.Field(isin=KINDS)
    job_index: pl.Int32 = pa.Field(nullable=True, ge=0)
    obs_config: pl.Utf8 = pa.Field(str_startswith="{")
    trace_version: pl.Utf8
    code_version: pl.Utf8

    class Config:
        name = "decision_traces"
        unique = ["run_id", "workload_id", "teacher", "seed", "decision", "step"]

    @pa.dataframe_check
    def shapes(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """Observation holds n_jobs rows, the mask 3 * n_jobs + 1 entries, n_jobs <= J."""
        return data.lazyframe.select(
            (pl.col("n_jobs") <= pl.col("obs_window"))
            & (pl.col("observation").list.len() == pl.col("n_jobs") * pl.col("n_features"))
            & (pl.col("mask").list.len() == 3 * pl.col("n_jobs") + 1)
        )

    @pa.dataframe_check
    def action_matches_kind(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """stop is action 3J with no job; otherwise action = 3 * row + kind, row < n_jobs."""
        stop = pl.col("kind") == "stop"
        kind_of_action = (
            pl.when(pl.col("action") % 3 == 0)
            .then(pl.lit("worker"))
            .when(pl.col("action") % 3 == 1)
            .then(pl.lit("ps"))
            .otherwise(pl.lit("both"))
        )
        return data.lazyframe.select(
            pl.when(stop)
            .then((pl.col("action") == 3 * pl.col("obs_window")) & pl.col("job_index").is_null())
            .otherwise(
                (pl.col("action") // 3 < pl.col("n_jobs"))
                & (kind_of_action == pl.col("kind"))
                & pl.col("job_index").is_not_null()
            )
        )

    @pa.dataframe_check
    def action_is_valid(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """The mask allows the action taken."""
        index = (
            pl.when(pl.col("kind") == "stop").then(3 * pl.col("n_jobs")).otherwise(pl.col("action"))
        )
        return data.lazyframe.select(
            pl.col("mask").list.get(index, null_on_oob=True).fill_null(False)
        )


class DL2TeacherConfigs(TableContract):
    """Each model's (workers, PSs) of DL2's searched teacher, per recording (run_id)."""

    run_id: pl.Utf8
    model: pl.Utf8
    jobs: pl.Int32 = pa.Field(ge=1)
    start_workers: pl.Int32 = pa.Field(ge=1)
    start_ps: pl.Int32 = pa.Field(ge=1)
    workers: pl.Int32 = pa.Field(ge=1)
    ps: pl.Int32 = pa.Field(ge=1)
    start_avg_jct_s: pl.Float64 = pa.Field(gt=0)
    found_avg_jct_s: pl.Float64 = pa.Field(gt=0)
    evaluations: pl.Int32 = pa.Field(ge=0)
    code_version: pl.Utf8

    class Config:
        name = "dl2_teacher_configs"
        unique = ["run_id", "model"]

    @pa.dataframe_check
    def never_worse(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """The search adopts a configuration only when it lowers the training JCT."""
        return data.lazyframe.select(pl.col("found_avg_jct_s") <= pl.col("start_avg_jct_s"))


class Policies(TableContract):
    policy_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    system: pl.Utf8 = pa.Field(str_matches=r"^[a-z0-9][a-z0-9-]*$")
    config: pl.Utf8 = pa.Field(str_startswith="{")
    parent_policy_id: pl.Utf8 = pa.Field(nullable=True)
    training_workloads: pl.Utf8 = pa.Field(str_startswith="[")
    metrics: pl.Utf8 = pa.Field(str_startswith="{")
    checkpoint_path: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    sha256: pl.Utf8 = pa.Field(str_matches=r"^[0-9a-f]{64}$")
    created_at: pl.Datetime("us")
    code_version: pl.Utf8

    class Config:
        name = "policies"
        unique = ["policy_id"]

    @pa.dataframe_check
    def not_its_own_parent(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            pl.col("parent_policy_id").is_null()
            | (pl.col("parent_policy_id") != pl.col("policy_id"))
        )


class CheckpointProblems(TableContract):
    """A registered policy whose checkpoint file was missing or refused when needed
    (DDL: warehouse/migrations/0016_checkpoint_problems.sql)."""

    policy_id: pl.Utf8
    problem: pl.Utf8 = pa.Field(isin=CHECKPOINT_PROBLEMS)
    detail: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    checkpoint_path: pl.Utf8
    detected_at: pl.Datetime("us")

    class Config:
        name = "checkpoint_problems"
        unique = ["policy_id", "problem"]


class LearningCurves(TableContract):
    policy_id: pl.Utf8
    phase: pl.Utf8 = pa.Field(isin=PHASES)
    step: pl.Int32 = pa.Field(ge=0)
    episodes: pl.Int32 = pa.Field(nullable=True, ge=0)
    wall_s: pl.Float64 = pa.Field(ge=0)
    train_loss: pl.Float64 = pa.Field(nullable=True, ge=0)
    val_loss: pl.Float64 = pa.Field(nullable=True, ge=0)
    val_accuracy: pl.Float64 = pa.Field(nullable=True, ge=0, le=1)
    val_avg_jct_s: pl.Float64 = pa.Field(nullable=True, gt=0)
    reward: pl.Float64 = pa.Field(nullable=True)
    entropy: pl.Float64 = pa.Field(nullable=True, ge=0)
    policy_loss: pl.Float64 = pa.Field(nullable=True)
    value_loss: pl.Float64 = pa.Field(nullable=True, ge=0)

    class Config:
        name = "dl2_learning_curves"
        unique = ["policy_id", "phase", "step"]


CURVE_COLUMNS = [c for c in LearningCurves.to_schema().columns if c != "policy_id"]
"""Columns of a trainer's curve frame (a `learning_curves` row without its policy id)."""


# --- evaluation (DDL: warehouse/migrations/0003_evaluation.sql, 0018, 0020; writer:
# models.evaluation.store_evaluation)

EVAL_SPLITS = ["train", "validation", "test"]
_JCT_TOLERANCE_S = 1e-6


class EvalRuns(TableContract):
    """One simulator run of a scheduler on a workload with a seed, and its metrics."""

    run_id: pl.Utf8 = pa.Field(unique=True, str_length={"min_value": 1})
    eval_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    scheduler: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    policy: pl.Utf8
    workload_set: pl.Utf8
    workload_id: pl.Utf8
    split: pl.Utf8 = pa.Field(isin=EVAL_SPLITS)
    sequence_no: pl.Int32 = pa.Field(ge=0)
    replicate: pl.Int32 = pa.Field(ge=0)
    seed: pl.Int64
    n_jobs: pl.Int32 = pa.Field(ge=1)
    avg_jct_s: pl.Float64 = pa.Field(gt=0)
    median_jct_s: pl.Float64 = pa.Field(gt=0)
    p95_jct_s: pl.Float64 = pa.Field(gt=0)
    makespan_s: pl.Float64 = pa.Field(gt=0)
    mean_slowdown: pl.Float64 = pa.Field(gt=0)
    gpu_time_s: pl.Float64 = pa.Field(ge=0)
    utilization: pl.Float64 = pa.Field(ge=0, le=1)
    trace_version: pl.Utf8
    config: pl.Utf8
    code_version: pl.Utf8
    reward: pl.Float64 = pa.Field(nullable=True)
    """The episode's return where the scenario's MDP defines one (RL-TAPS' G_1), else NULL."""

    class Config:
        name = "eval_runs"
        unique = ["eval_id", "scheduler", "workload_id", "replicate"]


class EvalSelectionRuns(EvalRuns):
    """A baseline's run on a held-out validation sequence of an evaluation (DDL: migration
    0028): where the set's best heuristic is chosen, apart from the runs it is judged on."""

    class Config:
        name = "eval_selection_runs"
        unique = ["eval_id", "scheduler", "workload_id", "replicate"]


class EvalJobs(TableContract):
    """Every job of every evaluation run: times, JCT, slowdown and GPU-seconds held."""

    run_id: pl.Utf8
    eval_id: pl.Utf8
    scheduler: pl.Utf8
    workload_id: pl.Utf8
    seed: pl.Int64
    job_index: pl.Int32 = pa.Field(ge=0)
    job_id: pl.Utf8
    model: pl.Utf8
    arrival_s: pl.Float64 = pa.Field(ge=0)
    start_s: pl.Float64
    finish_s: pl.Float64
    jct_s: pl.Float64 = pa.Field(gt=0)
    ideal_s: pl.Float64 = pa.Field(gt=0)
    slowdown: pl.Float64 = pa.Field(gt=0)
    gpu_time_s: pl.Float64 = pa.Field(ge=0)

    class Config:
        name = "eval_jobs"
        unique = ["run_id", "job_index"]

    @pa.dataframe_check
    def started_between_arrival_and_finish(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(
            (pl.col("start_s") >= pl.col("arrival_s")) & (pl.col("finish_s") >= pl.col("start_s"))
        )

    @pa.dataframe_check
    def jct_is_finish_minus_arrival(cls, data: pa.PolarsData) -> pl.LazyFrame:
        gap = pl.col("finish_s") - pl.col("arrival_s") - pl.col("jct_s")
        return data.lazyframe.select(gap.abs() <= _JCT_TOLERANCE_S)


SUMMARY_METRICS = (
    ("avg_jct_s", "avg_jct"),
    ("median_jct_s", "median_jct"),
    ("p95_jct_s", "p95_jct"),
    ("makespan_s", "makespan"),
    ("mean_slowdown", "mean_slowdown"),
    ("utilization", "utilization"),
)
"""(eval_runs column, eval_summary stem): summary has `<column>`, `<stem>_ci_low/_high`."""


def _within_ci(metric: str, low: str, high: str) -> pl.Expr:
    return pl.col(low).is_null() | (
        (pl.col(low) <= pl.col(metric)) & (pl.col(metric) <= pl.col(high))
    )


class EvalSummary(TableContract):
    """Per (evaluation, workload set, scheduler): means over runs with confidence intervals."""

    eval_id: pl.Utf8
    workload_set: pl.Utf8
    scheduler: pl.Utf8
    policy: pl.Utf8
    n_runs: pl.Int32 = pa.Field(ge=1)
    n_sequences: pl.Int32 = pa.Field(ge=1)
    n_seeds: pl.Int32 = pa.Field(ge=1)
    n_jobs: pl.Int64 = pa.Field(ge=1)
    confidence: pl.Float64 = pa.Field(gt=0, lt=1)
    avg_jct_s: pl.Float64 = pa.Field(gt=0)
    avg_jct_ci_low: pl.Float64 = pa.Field(nullable=True)
    avg_jct_ci_high: pl.Float64 = pa.Field(nullable=True)
    avg_jct_slots: pl.Float64 = pa.Field(gt=0)
    median_jct_s: pl.Float64 = pa.Field(gt=0)
    median_jct_ci_low: pl.Float64 = pa.Field(nullable=True)
    median_jct_ci_high: pl.Float64 = pa.Field(nullable=True)
    p95_jct_s: pl.Float64 = pa.Field(gt=0)
    p95_jct_ci_low: pl.Float64 = pa.Field(nullable=True)
    p95_jct_ci_high: pl.Float64 = pa.Field(nullable=True)
    makespan_s: pl.Float64 = pa.Field(gt=0)
    makespan_ci_low: pl.Float64 = pa.Field(nullable=True)
    makespan_ci_high: pl.Float64 = pa.Field(nullable=True)
    mean_slowdown: pl.Float64 = pa.Field(gt=0)
    mean_slowdown_ci_low: pl.Float64 = pa.Field(nullable=True)
    mean_slowdown_ci_high: pl.Float64 = pa.Field(nullable=True)
    utilization: pl.Float64 = pa.Field(ge=0, le=1)
    utilization_ci_low: pl.Float64 = pa.Field(nullable=True)
    utilization_ci_high: pl.Float64 = pa.Field(nullable=True)
    reference: pl.Utf8
    jct_ratio: pl.Float64 = pa.Field(gt=0)
    jct_ratio_ci_low: pl.Float64 = pa.Field(nullable=True)
    jct_ratio_ci_high: pl.Float64 = pa.Field(nullable=True)
    config: pl.Utf8
    code_version: pl.Utf8
    evaluated_at: pl.Datetime = pa.Field(nullable=True)
    family: pl.Utf8 = pa.Field(nullable=True)
    """"heuristic" or the learned system (dl2, ...)."""
    best_heuristic: pl.Utf8 = pa.Field(nullable=True)
    """The set's non-oracle heuristic with the lowest mean `ratio_metric` on the sequences
    named by `best_heuristic_chosen_on`."""
    ratio_to_best_heuristic: pl.Float64 = pa.Field(nullable=True, gt=0)
    """Mean over (sequence, seed) pairs of JCT / the best heuristic's JCT."""
    ratio_ci_low: pl.Float64 = pa.Field(nullable=True)
    ratio_ci_high: pl.Float64 = pa.Field(nullable=True)
    scenario: pl.Utf8 = pa.Field(nullable=True)
    """The paper whose own scenario `workload_set` names (harmony, chic, rl-taps; the
    scenario registry's sets); NULL for a workload set of the warehouse or a replay."""
    ratio_metric: pl.Utf8 = pa.Field(nullable=True, isin=["avg_jct_s", "mean_slowdown"])
    """The per-run cost `jct_ratio` and `ratio_to_best_heuristic` pair (RL-TAPS' scenario:
    mean slowdown; NULL in rows written before migration 0020: avg_jct_s)."""
    mean_reward: pl.Float64 = pa.Field(nullable=True)
    """Mean of eval_runs.reward where every run has one."""
    mean_reward_ci_low: pl.Float64 = pa.Field(nullable=True)
    mean_reward_ci_high: pl.Float64 = pa.Field(nullable=True)
    teacher: pl.Utf8 = pa.Field(nullable=True)
    """The scheduler this one imitated or searched with, where it ran in the same
    evaluation (DL2's searched table "dl2-table"); NULL for a heuristic or without one."""
    ratio_to_teacher: pl.Float64 = pa.Field(nullable=True, gt=0)
    """Paired ratio of `ratio_metric` to the teacher's, the test sequence as the unit (as
    `ratio_to_best_heuristic`): below 1, the learning added something over its teacher."""
    teacher_ci_low: pl.Float64 = pa.Field(nullable=True)
    teacher_ci_high: pl.Float64 = pa.Field(nullable=True)
    best_heuristic_chosen_on: pl.Utf8 = pa.Field(nullable=True, isin=EVAL_SPLITS)
    """The split whose sequences chose `best_heuristic`: "validation" (held out from the
    ratios, eval_selection_runs) or the evaluated split itself (a choice favouring the
    heuristic; a whole-trace replay, or rows written before migration 0028: NULL there)."""

    class Config:
        name = "eval_summary"
        unique = ["eval_id", "workload_set", "scheduler"]

    @pa.dataframe_check
    def mean_inside_its_interval(cls, data: pa.PolarsData) -> pl.LazyFrame:
        metrics = (*SUMMARY_METRICS, ("jct_ratio", "jct_ratio"), ("ratio_to_teacher", "teacher"))
        ok = pl.lit(True)
        for metric, stem in metrics:
            ok = ok & _within_ci(metric, f"{stem}_ci_low", f"{stem}_ci_high")
        return data.lazyframe.select(ok.alias("mean_inside_its_interval"))
