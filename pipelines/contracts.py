"""Pandera contracts of the tables pipelines/ writes (DDL: warehouse/migrations/)."""

from __future__ import annotations

import pandera.polars as pa
import polars as pl


class PipelineRuns(pa.DataFrameModel):
    run_id: pl.Utf8 = pa.Field(unique=True)
    flow: pl.Utf8
    started_at: pl.Datetime("us")
    finished_at: pl.Datetime("us") = pa.Field(nullable=True)
    status: pl.Utf8 = pa.Field(isin=["running", "completed", "failed"])
    seed: pl.Int64
    config: pl.Utf8
    code_version: pl.Utf8
    summary: pl.Utf8 = pa.Field(nullable=True)

    class Config:
        name = "pipeline_runs"
        strict = True
        coerce = True
