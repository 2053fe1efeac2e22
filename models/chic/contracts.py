"""Pandera contracts of Chic's tables (DDL: warehouse/migrations/0011_chic.sql).

chic_learning_curves  one row per CEM iteration of a registered policy
chic_evaluation       ACT per system and arrival rate against Optimus (600 s and 300 s)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

SYSTEM_PATTERN = r"^((chic|chic-pair)(-trained-at-[0-9.]+)?|optimus-[0-9]+)$"


class ChicLearningCurves(pa.DataFrameModel):
    policy_id: pl.Utf8
    iteration: pl.Int32 = pa.Field(ge=1)
    elite_bound: pl.Float64
    mean_return: pl.Float64
    best_return: pl.Float64
    n_elite: pl.Int32 = pa.Field(ge=0)
    uniform_elite: pl.Boolean
    fit_loss: pl.Float64 = pa.Field(nullable=True, ge=0)
    val_act_s: pl.Float64 = pa.Field(nullable=True, gt=0)
    steps: pl.Int64 = pa.Field(ge=0)
    wall_s: pl.Float64 = pa.Field(ge=0)

    class Config:
        name = "chic_learning_curves"
        strict = True
        coerce = True
        unique = ["policy_id", "iteration"]

    @pa.dataframe_check
    def best_is_best(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """The best return bounds the elite bound and the mean."""
        return data.lazyframe.select(
            (pl.col("best_return") >= pl.col("elite_bound"))
            & (pl.col("best_return") >= pl.col("mean_return"))
        )


class ChicEvaluation(pa.DataFrameModel):
    eval_id: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    system: pl.Utf8 = pa.Field(str_matches=SYSTEM_PATTERN)
    rate_per_hour: pl.Float64 = pa.Field(gt=0)
    avg_jct_s: pl.Float64 = pa.Field(gt=0)
    ci95_s: pl.Float64 = pa.Field(ge=0)
    n_sequences: pl.Int32 = pa.Field(ge=1)
    policy_id: pl.Utf8 = pa.Field(nullable=True)
    improvement_vs_optimus_600: pl.Float64
    sequence_seeds: pl.Utf8 = pa.Field(str_startswith="[")
    config: pl.Utf8 = pa.Field(str_startswith="{")
    seed: pl.Int64
    code_version: pl.Utf8
    evaluated_at: pl.Datetime("us")

    class Config:
        name = "chic_evaluation"
        strict = True
        coerce = True
        unique = ["eval_id", "system", "rate_per_hour"]

    @pa.dataframe_check
    def policy_iff_learned(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """Learned systems name their policy; Optimus rows have none."""
        return data.lazyframe.select(
            pl.col("policy_id").is_null() == pl.col("system").str.starts_with("optimus-")
        )
