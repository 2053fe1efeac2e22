"""Pandera contracts of Chic's tables (DDL: warehouse/migrations/0011_chic.sql).

chic_learning_curves  one row per CEM iteration of a registered policy

(Chic's evaluation in its own scenario writes eval_runs / eval_jobs / eval_summary,
pipelines/contracts.py; `chic_evaluation` is a view over them, migration 0020.)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from warehouse.contract import TableContract


class ChicLearningCurves(TableContract):
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
        unique = ["policy_id", "iteration"]

    @pa.dataframe_check
    def best_is_best(cls, data: pa.PolarsData) -> pl.LazyFrame:
        """The best return bounds the elite bound and the mean."""
        return data.lazyframe.select(
            (pl.col("best_return") >= pl.col("elite_bound"))
            & (pl.col("best_return") >= pl.col("mean_return"))
        )
