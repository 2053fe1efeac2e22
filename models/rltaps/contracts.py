"""Pandera contracts of RL-TAPS' tables (DDL: warehouse/migrations/0012_rltaps.sql;
tests/test_contracts.py checks they agree). Trained policies go to the shared `policies`
table (systems "rl-taps" and "rl-taps-streaming").

rltaps_learning_curves  one row per training epoch of a registered policy: validation mean
                        reward (G_1) and mean slowdown of the greedy policy, training
                        figures, entropy and surrogate loss (models/rltaps/reinforce.py)
rltaps_evaluation       one row per scheduler x job-sequence set: mean reward, mean slowdown
                        and their 95% CIs over the set's sequences
                        (pipelines/systems/rltaps/stages.py)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from models.rltaps.config import MODES
from models.rltaps.policy import BASELINES

EVAL_SCHEDULERS = ["rl-taps-nonstreaming", "rl-taps-streaming", *BASELINES]
"""`rltaps_evaluation.scheduler`: RL-TAPS trained in each mode, and the job pickers."""


class RLTapsLearningCurves(pa.DataFrameModel):
    policy_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    iteration: pl.Int32 = pa.Field(ge=0)
    mode: pl.Utf8 = pa.Field(isin=list(MODES))
    updates: pl.Int32 = pa.Field(ge=0)
    episodes: pl.Int32 = pa.Field(ge=0)
    wall_s: pl.Float64 = pa.Field(ge=0)
    train_reward: pl.Float64 = pa.Field(nullable=True)
    train_slowdown: pl.Float64 = pa.Field(nullable=True, gt=0)
    val_reward: pl.Float64
    val_slowdown: pl.Float64 = pa.Field(gt=0)
    entropy: pl.Float64 = pa.Field(nullable=True, ge=0)
    loss: pl.Float64 = pa.Field(nullable=True)
    val_seeds: pl.Utf8 = pa.Field(str_matches=r"^[0-9]+(,[0-9]+)*$")

    class Config:
        name = "rltaps_learning_curves"
        strict = True
        coerce = True
        unique = ["policy_id", "iteration"]


class RLTapsEvaluation(pa.DataFrameModel):
    run_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    scheduler: pl.Utf8 = pa.Field(isin=EVAL_SCHEDULERS)
    sequence_set: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    n_sequences: pl.Int32 = pa.Field(ge=1)
    n_jobs: pl.Int32 = pa.Field(ge=1)
    mean_reward: pl.Float64
    reward_ci95: pl.Float64 = pa.Field(ge=0)
    mean_slowdown: pl.Float64 = pa.Field(gt=0)
    slowdown_ci95: pl.Float64 = pa.Field(ge=0)
    policy_id: pl.Utf8 = pa.Field(nullable=True)
    seeds: pl.Utf8 = pa.Field(str_startswith="[")
    config: pl.Utf8 = pa.Field(str_startswith="{")
    code_version: pl.Utf8

    class Config:
        name = "rltaps_evaluation"
        strict = True
        coerce = True
        unique = ["run_id", "scheduler", "sequence_set"]

    @pa.dataframe_check
    def learned_rows_name_their_policy(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """A policy id exactly on the RL-TAPS rows (baselines have none)."""
        learned = pl.col("scheduler").str.starts_with("rl-taps")
        return data.lazyframe.select(learned == pl.col("policy_id").is_not_null())
