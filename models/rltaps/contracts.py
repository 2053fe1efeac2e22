"""Pandera contracts of RL-TAPS' tables (DDL: warehouse/migrations/0012_rltaps.sql;
tests/test_contracts.py checks they agree). Trained policies go to the shared `policies`
table (systems "rl-taps" and "rl-taps-streaming").

rltaps_learning_curves  one row per training epoch of a registered policy: validation mean
                        reward (G_1) and mean slowdown of the greedy policy, training
                        figures, entropy and surrogate loss (models/rltaps/reinforce.py)
(RL-TAPS' evaluation in its own scenario writes eval_runs / eval_jobs / eval_summary,
pipelines/contracts.py; `rltaps_evaluation` is a view over them, migration 0020.)
"""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from models.rltaps.config import MODES
from warehouse.contract import TableContract


class RLTapsLearningCurves(TableContract):
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
        unique = ["policy_id", "iteration"]
