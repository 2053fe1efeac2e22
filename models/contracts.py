"""Pandera contracts of the tables the learned schedulers write
(DDL: warehouse/migrations/0004_learning.sql; tests/test_contracts.py checks they agree).

decision_traces  one row per inference step of a recorded heuristic (models/dl2/recorder.py)
dl2_teacher_configs  per recording of DL2's searched teacher, each model's configuration
                 (models/dl2/search.py; DDL 0022_dl2_teacher_configs.sql)
policies         every trained policy of every learned system (models/checkpoints.py)
dl2_learning_curves  training curves of those policies (warm-up epochs, RL validation points)
checkpoint_problems  policies whose checkpoint file was found missing or refused
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
