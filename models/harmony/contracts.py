"""Pandera contracts of Harmony's tables (DDL: warehouse/migrations/0010_harmony.sql).

reward_model_metrics     reward-predictor accuracy against LIF and gradient boosting
harmony_learning_curves  training curves of the reward predictor and placement policies

(Harmony's evaluation in its own scenario writes eval_runs / eval_jobs / eval_summary,
pipelines/contracts.py; `harmony_evaluation` is a view over them, migration 0020.)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from warehouse import column_types
from warehouse.contract import TableContract

ESTIMATORS = ["harmony-nn", "lif-line", "lif-quad", "gradient-boosting"]
PATTERNS = ["uniform", "poisson", "google"]


class RewardModelMetrics(TableContract):
    reward_model_id: pl.Utf8
    source: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    estimator: pl.Utf8 = pa.Field(isin=ESTIMATORS)
    split: pl.Utf8 = pa.Field(isin=["train", "test"])
    job_type: pl.Utf8 = pa.Field(str_length={"min_value": 1})
    n_samples: pl.Int32 = pa.Field(ge=1)
    mean_relative_error: pl.Float64 = pa.Field(ge=0)
    seed: pl.Int64
    code_version: pl.Utf8

    class Config:
        name = "reward_model_metrics"
        unique = ["reward_model_id", "source", "estimator", "split", "job_type"]


class HarmonyLearningCurves(TableContract):
    policy_id: pl.Utf8
    phase: pl.Utf8 = pa.Field(isin=["reward_model", "placement"])
    step: pl.Int32 = pa.Field(ge=0)
    episodes: pl.Int32 = pa.Field(nullable=True, ge=0)
    wall_s: pl.Float64 = pa.Field(ge=0)
    train_loss: pl.Float64 = pa.Field(nullable=True, ge=0)
    test_rel_error: pl.Float64 = pa.Field(nullable=True, ge=0)
    reward: pl.Float64 = pa.Field(nullable=True)
    entropy: pl.Float64 = pa.Field(nullable=True, ge=0)
    policy_loss: pl.Float64 = pa.Field(nullable=True)
    value_loss: pl.Float64 = pa.Field(nullable=True, ge=0)
    epsilon: pl.Float64 = pa.Field(nullable=True, ge=0, le=1)
    entropy_weight: pl.Float64 = pa.Field(nullable=True, ge=0)
    val_avg_jct_s: pl.Float64 = pa.Field(nullable=True, gt=0)

    class Config:
        name = "harmony_learning_curves"
        unique = ["policy_id", "phase", "step"]


def curve_frame(rows: list[dict], columns: tuple[str, ...]) -> pl.DataFrame:
    """A training curve: `rows` as a frame of `columns`, each of the type the
    `harmony_learning_curves` table gives it."""
    types = column_types(HarmonyLearningCurves)
    return pl.DataFrame(rows, schema={c: types[c] for c in columns})
