"""The scoreboard: every learned system beside the best non-oracle heuristic, in each paper
scenario and on the arena's synthetic set, pooled over several runs of `schedlab run`.

    python -m benchmarks scoreboard                 # 5 seeds at the default budget
    python -m benchmarks.bench_scoreboard [--seeds 0,1,2,3,4] [--budget default|large]
        [--dir DIR]

Runs `schedlab run --seed k --budget B` once per seed, each into its own warehouse under DIR
(default ./var/scoreboard-B; a warehouse whose run finished is reused, so an interrupted
scoreboard continues where it stopped, and an existing folder is read as it is). A run's seed
changes everything it draws: the synthetic trace and so the held-out workloads, every
training seed, the simulator seeds. Then every run's `eval_runs` (the newest evaluation of
each workload set) are pooled and summarized by the evaluation's own `summarize_runs`: per
set, the non-oracle heuristic with the lowest pooled mean of the set's metric (average JCT;
mean slowdown in RL-TAPS' scenario) on the held-out validation sequences the evaluations ran
their baselines on (`eval_selection_runs`), and every learned scheduler's ratio to it on the
test sequences, paired by
(run, sequence, simulator seed), with its 95% interval nested: simulator seeds averaged
within each sequence, sequences within each run, and the interval over runs
(`tracelib.stats.nested_ratio`: a run is one training seed, its sequences share its
policies, so they are not independent of each other). Printed beside its target (the
interval's upper end below 1), with the spread of the runs' own ratios; the pooled rows are
written to DIR/scoreboard.csv. A learned scheduler whose evaluation names its teacher (what
it imitated or searched with, run in the same evaluation: DL2's searched table `dl2-table`,
Chic's `optimus-events`) gets a second line: its ratio to the teacher, nested the same way.

What it measures is what a user's nightly run produces, not a system's benchmark in
isolation: the default budgets, the default deviations, the default evaluation sizes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from benchmarks.options import parse
from models.evaluation import summarize_runs
from tracelib.stats import nested_ratio
from warehouse import connect, read_frame

TARGET = 1.0
"""Target: a learned system's ratio's upper end below this."""


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_scoreboard`'s options (see the module docstring)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """the runs' seeds (comma-separated)"""
    budget: Literal["smoke", "default", "large"] = "default"
    """the runs' budget (`schedlab run --budget`)"""
    dir: str | None = None
    """folder of the runs' warehouses (default ./var/scoreboard-BUDGET)"""


def _finished(warehouse: Path) -> str | None:
    """How the run completed into `warehouse` was made (code version, start, wall time),
    as pipeline_runs records it; None if no run completed there."""
    if not warehouse.exists():
        return None
    try:
        with connect(warehouse) as con:
            done = read_frame(
                con,
                "SELECT code_version, started_at, finished_at FROM pipeline_runs "
                "WHERE status = 'completed' ORDER BY finished_at DESC LIMIT 1",
            )
    except Exception:
        return None  # a half-made file from an interrupted run: made again
    if done.height == 0:
        return None
    row = done.row(0, named=True)
    wall = (row["finished_at"] - row["started_at"]).total_seconds()
    return f"code {row['code_version']}, started {row['started_at']:%Y-%m-%d %H:%M}, {wall:.0f} s"


def run_seed(seed: int, budget: str, folder: Path) -> Path:
    """`schedlab run --seed seed --budget budget` into folder/seed-<seed>.duckdb, unless a
    finished one is there; its output goes to folder/seed-<seed>.log."""
    warehouse = folder / f"seed-{seed}.duckdb"
    if made := _finished(warehouse):
        print(f"  seed {seed}: {warehouse} already has a finished run ({made}): reused")
        return warehouse
    for stale in (warehouse, warehouse.with_suffix(".duckdb.wal")):
        stale.unlink(missing_ok=True)
    start = time.perf_counter()
    schedlab = Path(sys.executable).with_name("schedlab")
    cmd = [str(schedlab), "run", "--quiet", "--seed", str(seed), "--budget", budget]
    cmd += ["--warehouse", str(warehouse)]
    with open(folder / f"seed-{seed}.log", "w") as log:
        code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise SystemExit(f"seed {seed}: schedlab run exited {code}; see {log.name}")
    print(f"  seed {seed}: schedlab run {time.perf_counter() - start:.0f} s -> {warehouse}")
    return warehouse


def newest_runs(warehouse: Path, seed: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The eval_runs rows of each workload set's newest evaluation in `warehouse` (their
    workload ids prefixed by the run's seed, so runs pair only within themselves) and
    those evaluations' eval_summary rows."""
    with connect(warehouse) as con:
        summary = read_frame(
            con,
            "SELECT * FROM eval_summary QUALIFY eval_id = first_value(eval_id) OVER "
            "(PARTITION BY workload_set ORDER BY evaluated_at DESC, eval_id)",
        )
        # The baselines' runs on held-out validation sequences ride along, marked: where
        # they exist, the pooled best heuristic is chosen on them.
        runs = pl.concat(
            [
                read_frame(con, "SELECT *, FALSE AS held_out FROM eval_runs"),
                read_frame(con, "SELECT *, TRUE AS held_out FROM eval_selection_runs"),
            ],
            how="diagonal_relaxed",
        )
    keys = summary.select("eval_id", "workload_set").unique()
    runs = runs.join(keys, on=["eval_id", "workload_set"]).with_columns(
        workload_id=pl.format("seed{}:{}", pl.lit(seed), "workload_id")
    )
    return runs, summary


def pooled(runs: pl.DataFrame, summaries: pl.DataFrame) -> pl.DataFrame:
    """One summary row per (workload set, scheduler) over every run's `newest_runs`
    (concatenated): the set's best non-oracle heuristic by pooled mean on the held-out
    validation runs (where the set has them; else on the test runs) and every scheduler's
    paired ratio to it on the test runs."""
    if "held_out" in runs.columns:
        selection = runs.filter(pl.col("held_out"))
        runs = runs.filter(~pl.col("held_out"))
    else:
        selection = runs.clear()
    about = summaries.group_by("workload_set", "scheduler").agg(
        pl.col("family").first(),
        pl.col("ratio_metric").first(),
        pl.col("scenario").first(),
        pl.col("teacher").drop_nulls().first(),
    )
    out = []
    # per set: one scheduler name can be of different families in different sets (chic-pair
    # is Chic's in its paper scenario and its own in the arena)
    for (workload_set,), sets in about.sort("workload_set", "scheduler").group_by(
        "workload_set", maintain_order=True
    ):
        group = runs.filter(pl.col("workload_set") == workload_set)
        families = dict(zip(sets["scheduler"], sets["family"], strict=True))
        teachers = {
            r["scheduler"]: r["teacher"]
            for r in sets.iter_rows(named=True)
            if r["teacher"] is not None
        }
        metric = sets["ratio_metric"][0]
        rows = summarize_runs(
            group,
            reference=group["scheduler"][0],
            order=sorted(group["scheduler"].unique().to_list()),
            confidence=0.95,
            slot_s=1.0,
            config="",
            version="",
            families=families,
            metric=metric,
            teachers=teachers,
            selection=selection.filter(pl.col("workload_set") == workload_set),
        )
        out.append(_nested_by_run(rows.with_columns(ratio_metric=pl.lit(metric)), runs))
    frame = pl.concat(out, how="diagonal_relaxed")
    kinds = summaries.group_by("workload_set").agg(paper=pl.col("scenario").is_not_null().any())
    return frame.join(kinds, on="workload_set", how="left")


def _nested_by_run(rows: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """`rows` (one set's pooled summary) with each ratio to the best heuristic and to its
    teacher, each with its interval from `nested_ratio`: sequences nested in runs, the
    interval over runs."""
    fixed = []
    for row in rows.iter_rows(named=True):
        for name, ratio, low, high in (
            ("best_heuristic", "ratio_to_best_heuristic", "ratio_ci_low", "ratio_ci_high"),
            ("teacher", "ratio_to_teacher", "teacher_ci_low", "teacher_ci_high"),
        ):
            if row.get(name) is not None:
                paired = paired_with_best(runs, row, row[name])
                r = nested_ratio(paired["value"], paired["ref"], paired["run"], paired["sequence"])
                row.update({ratio: r.ratio, low: r.low, high: r.high})
        fixed.append(row)
    return pl.DataFrame(fixed, schema=rows.schema)


def paired_with_best(runs: pl.DataFrame, row: dict, best: str | None = None) -> pl.DataFrame:
    """The scheduler's runs of the row's set beside the best heuristic's (or `best`'s) on
    the same (workload, replicate): columns run (the seed), sequence, value, ref."""
    metric, best = row["ratio_metric"], best or row["best_heuristic"]
    in_set = runs.filter(pl.col("workload_set") == row["workload_set"])
    mine = in_set.filter(pl.col("scheduler") == row["scheduler"])
    ref = in_set.filter(pl.col("scheduler") == best).select(
        "workload_id", "replicate", pl.col(metric).alias("ref")
    )
    return mine.join(ref, on=["workload_id", "replicate"]).select(
        run=pl.col("workload_id").str.extract(r"^seed(\d+):"),
        sequence=pl.col("workload_id"),
        value=pl.col(metric),
        ref="ref",
    )


def per_run_ratios(paired: pl.DataFrame) -> list[float]:
    """Each run's ratio of mean metric to the best heuristic's mean over its own pairs:
    a training seed is a cluster (its sequences share one trained policy), so how the runs
    spread shows what the nested interval is made of."""
    per = paired.group_by("run").agg(pl.col("value").mean() / pl.col("ref").mean())
    return sorted(per["value"].to_list())


def report(frame: pl.DataFrame, runs: pl.DataFrame, seeds: list[int]) -> None:
    """Print each set's learned schedulers beside its best heuristic, best first."""
    learned = frame.filter(pl.col("family") != "heuristic").sort(
        pl.col("paper"), "workload_set", "ratio_to_best_heuristic"
    )
    print(
        f"\nscoreboard over {len(seeds)} runs (seeds {','.join(map(str, seeds))}): paired ratio "
        "of each set's metric to its best non-oracle heuristic, 95% interval "
        f"(target: upper end below {TARGET:g})"
    )
    last = None
    for row in learned.iter_rows(named=True):
        if row["workload_set"] != last:
            last = row["workload_set"]
            where = "paper scenario" if row["paper"] else "workload set"
            print(
                f"{last} ({where}; {row['ratio_metric']}; best heuristic {row['best_heuristic']})"
            )
        ratio, low, high = (
            row[k] for k in ("ratio_to_best_heuristic", "ratio_ci_low", "ratio_ci_high")
        )
        if ratio is None:
            continue
        paired = paired_with_best(runs, row)
        lower = int((paired["value"] < paired["ref"]).sum())
        per_run = per_run_ratios(paired)
        better_runs = sum(r < 1 for r in per_run)
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None else "[n/a]"
        verdict = "met" if high is not None and high < TARGET else "not met"
        print(
            f"  {row['scheduler']:28} {row['family']:10} {ratio:6.3f} {interval:17} "
            f"n={paired.height:<4} lower on {lower:<4} runs {per_run[0]:.2f}-{per_run[-1]:.2f} "
            f"({better_runs} of {len(per_run)} below 1)  {verdict}"
        )
        if row.get("ratio_to_teacher") is not None:
            low, high = row["teacher_ci_low"], row["teacher_ci_high"]
            interval = f"[{low:.3f}, {high:.3f}]" if low is not None else "[n/a]"
            adds = "adds over it" if high is not None and high < 1 else "not shown to add"
            print(
                f"  {'':28} {'':10} {row['ratio_to_teacher']:6.3f} {interval:17} "
                f"vs its teacher {row['teacher']}: {adds}"
            )


def main(argv: list[str]) -> int:
    """`python -m benchmarks scoreboard`: 5 seeds of the default run."""
    opts = parse(Options, argv)
    seeds = list(opts.seeds)
    folder = Path(opts.dir or f"var/scoreboard-{opts.budget}")
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    print(f"scoreboard: schedlab run --budget {opts.budget}, seeds {seeds}, in {folder}")
    warehouses = [run_seed(seed, opts.budget, folder) for seed in seeds]
    per_seed = [newest_runs(w, s) for w, s in zip(warehouses, seeds, strict=True)]
    runs = pl.concat([r for r, _ in per_seed], how="diagonal_relaxed")
    frame = pooled(runs, pl.concat([s for _, s in per_seed], how="diagonal_relaxed"))
    report(frame, runs.filter(~pl.col("held_out")), seeds)
    frame.write_csv(folder / "scoreboard.csv")
    print(f"\nrows: {folder / 'scoreboard.csv'}; total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
