"""What the arena benchmarks share (`bench_chic_arena`, `bench_dl2_arena`): the warehouse a
default `schedlab run` would make, one evaluation of the trained policies beside every
heuristic of the arena, and the paired ratios to the best non-oracle heuristic."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from models.evaluation import EvalConfig, default_schedulers, evaluate
from pipelines.config import RunConfig
from pipelines.registry import SYSTEMS
from pipelines.stages import derive_stage, learned_policies, synthetic_stage
from tracelib.stats import nested_ratio, paired_ratio
from warehouse import connect, read_frame

TARGET = 1.0
"""Target: the paired ratio's upper end below 1 (better than the best heuristic)."""


def make_warehouse(cfg: RunConfig, prefix: str, path: str | None = None) -> str:
    """The run's synthetic set derived like `schedlab run`'s, in a temporary warehouse (or
    at `path`, made once and reused when it exists)."""
    if path is None:
        path = str(Path(tempfile.mkdtemp(prefix=prefix)) / "wh.duckdb")
    elif Path(path).exists():
        return path
    source = synthetic_stage(path, "dl2-diurnal", cfg.synthetic)
    derive_stage(path, [source.source_id], cfg.derive)
    return path


def evaluate_with_heuristics(
    warehouse: str,
    workload_set: str,
    wanted: Mapping[str, str],
    sequences: int | None,
    sim_seeds: int,
) -> tuple[pl.DataFrame, tuple[str, ...], pl.DataFrame | None]:
    """`wanted` (scheduler name -> policy id) and every heuristic of the arena on the set's
    test sequences, the heuristics also on its validation sequences; returns the
    evaluation's runs, the heuristics' names and the validation runs (None without any)."""
    heuristics = default_schedulers()
    eval_cfg = EvalConfig(
        workload_sets=(workload_set,),
        max_sequences=sequences,
        n_seeds=sim_seeds,
        schedulers=heuristics,
        learned=learned_policies(warehouse, wanted, SYSTEMS.loaders()),
    )
    with connect(warehouse) as con:
        workloads = read_frame(con, "SELECT * FROM workloads")
        jobs = read_frame(con, "SELECT * FROM workload_jobs")
    t0 = time.perf_counter()
    tables = evaluate(jobs, workloads, eval_cfg)
    print(f"evaluated {tables.runs.height} runs in {time.perf_counter() - t0:.0f} s")
    return tables.runs, heuristics, tables.selection


def print_ratios(
    runs: pl.DataFrame,
    heuristics: tuple[str, ...],
    groups: Mapping[str, str],
    chosen_on: pl.DataFrame | None = None,
) -> None:
    """The paired ratio of average JCT to the best non-oracle heuristic (chosen by mean
    average JCT on the validation runs `chosen_on`, else on the same runs) of the next
    three heuristics, for scale, and of each group (label -> scheduler-name prefix: its
    training seeds pooled), against TARGET."""
    means = (
        (runs if chosen_on is None else chosen_on)
        .filter(
            pl.col("scheduler").is_in(heuristics) & ~pl.col("scheduler").str.ends_with("-oracle")
        )
        .group_by("scheduler")
        .agg(pl.col("avg_jct_s").mean())
        .sort("avg_jct_s", "scheduler")
    )
    best = means["scheduler"][0]
    key = ["workload_id", "seed"]
    reference = runs.filter(pl.col("scheduler") == best).select(*key, ref=pl.col("avg_jct_s"))
    print(
        f"\nbest non-oracle heuristic: {best} (chosen on the "
        f"{'test' if chosen_on is None else 'validation'} sequences); paired ratio of average JCT "
        f"(target: upper end < {TARGET})"
    )
    # The test sequence is the unit (its simulator seeds averaged); a group's training
    # seeds are runs, with the sequences nested in them.
    for name in means["scheduler"][1:4]:
        mine = runs.filter(pl.col("scheduler") == name).join(reference, on=key)
        ratio = paired_ratio(mine["avg_jct_s"], mine["ref"], units=mine["workload_id"])
        print(f"  {name:34s} {ratio}")
    for label, prefix in groups.items():
        mine = runs.filter(pl.col("scheduler").str.starts_with(prefix)).join(reference, on=key)
        ratio = nested_ratio(mine["avg_jct_s"], mine["ref"], mine["scheduler"], mine["workload_id"])
        met = "met" if ratio.high is not None and ratio.high < TARGET else "not met"
        print(f"  {label:34s} {ratio}  ({met})")
