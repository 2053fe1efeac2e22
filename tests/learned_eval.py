"""What the pipeline and arena tests of each learned system share: a warehouse with a tiny
workload set, its row counts, and an evaluation of registered learned policies beside
heuristics on that set."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from models.evaluation import EvalConfig
from pipelines.stages import derive_stage, synthetic_stage
from tracelib.sim import ClusterConfig
from tracelib.synthetic import DiurnalConfig
from tracelib.workloads import DeriveConfig
from warehouse import connect, read_frame, table_counts


def tiny_set_evaluation(
    path: Path, learned, schedulers: tuple[str, ...], n_seeds: int, cluster: ClusterConfig
) -> tuple[pl.DataFrame, pl.DataFrame, EvalConfig]:
    """The stored workload jobs and workloads of the warehouse at `path`, and a config that
    evaluates the `learned` policy references beside `schedulers` on its tiny set."""
    with connect(path) as con:
        workloads = read_frame(con, "SELECT * FROM workloads")
        jobs = read_frame(con, "SELECT * FROM workload_jobs")
    cfg = EvalConfig(
        workload_sets=("tiny",),
        schedulers=schedulers,
        n_seeds=n_seeds,
        cluster=cluster,
        learned=learned,
    )
    return jobs, workloads, cfg


def tiny_warehouse(path, synthetic_seed: int = 0) -> str:
    """A warehouse at `path` with one synthetic trace derived as set "tiny" (4 train, 1 val,
    1 test sequences of 10 jobs); its path as a string."""
    source = synthetic_stage(path, "dl2-diurnal", DiurnalConfig(n_jobs=60, seed=synthetic_seed))
    derive_stage(path, [source.source_id], DeriveConfig(name="tiny", jobs_per_sequence=10))
    return str(path)


def tiny_trained(folder: str, train, cfg):
    """A module-scoped fixture: (a tiny warehouse in a fresh folder named `folder`, the
    result of `train(its path, cfg)` there)."""

    @pytest.fixture(scope="module")
    def trained(tmp_path_factory):
        path = tiny_warehouse(tmp_path_factory.mktemp(folder) / "wh.duckdb")
        return path, train(path, cfg)

    return trained


def assert_reproducible(train, cfg, first, folder: Path) -> None:
    """Asserts `train(path, cfg)` on another tiny warehouse, made in `folder`, registers the
    policy id of `first` (the same seed gives the same policy whichever the warehouse)."""
    other = tiny_warehouse(folder / "other.duckdb")
    assert train(other, cfg).policy_id == first.policy_id


def row_counts(path) -> dict[str, int]:
    """Rows in each table of the warehouse at `path`, by table name."""
    with connect(path) as con:
        return dict(table_counts(con).select("table", "rows").rows())


def stored_evaluation(path, eval_id: str) -> tuple[pl.DataFrame, int, pl.DataFrame, pl.DataFrame]:
    """What the warehouse at `path` holds of evaluation `eval_id`: its `eval_runs` rows, its
    number of `eval_jobs` rows, its `eval_summary` rows and its `leaderboard` rows by
    scheduler."""
    with connect(path) as con:
        runs = read_frame(con, "SELECT * FROM eval_runs WHERE eval_id = ?", [eval_id])
        n_jobs = con.sql(
            "SELECT count(*) FROM eval_jobs WHERE eval_id = ?", params=[eval_id]
        ).fetchall()[0][0]
        summary = read_frame(con, "SELECT * FROM eval_summary WHERE eval_id = ?", [eval_id])
        board = read_frame(
            con, "SELECT * FROM leaderboard WHERE eval_id = ? ORDER BY scheduler", [eval_id]
        )
    return runs, n_jobs, summary, board


def assert_cached(train, path, cfg, first) -> None:
    """Asserts `train(path, cfg)` on unchanged inputs answers with `first` from its cache and
    writes no row."""
    before = row_counts(path)
    again = train(path, cfg)
    assert again.policy_id == first.policy_id and again.metrics["cached"]
    assert row_counts(path) == before
