"""RL-TAPS against its baselines (RL-TAPS section 5): mean slowdown and mean reward.

Runs the pipeline stages on a temporary warehouse: REINFORCE training in both modes
(non-streaming: static sequences; streaming: fresh ones), then the evaluation of both
policies, the Random, SJF and Tetris job pickers and the preemptive baselines (Tiresias'
2D-LAS and 2D-Gittins, preemptive SRTF; all with first-fit GPUs) on held-out job
sequences, all in the same topology-aware environment. Prints the learning curves
(validation mean slowdown and reward per epoch) and the evaluation table, and writes the
figures (PNG) and tables (CSV) to a folder.

Target: RL-TAPS' mean slowdown below Random's, SJF's and Tetris' in both modes;
SEEDS (comma-separated, default 0) trains once per seed and reports paired ratios.

    python -m benchmarks.bench_rltaps                    # the run's default (shipped start)
    python -m benchmarks.bench_rltaps medium [out_dir] [seeds]   # 8 x 8 episodes, 15 epochs
    python -m benchmarks.bench_rltaps large [out_dir] [seeds]    # 16 x 8 episodes, 20 epochs
    python -m benchmarks.bench_rltaps paper [out_dir]    # RL-TAPS 5.1's sizes (hours)
    python -m benchmarks.bench_rltaps default /tmp/out 0,1,2,3,4 --as-published

The default budget is what `schedlab run` trains: 12 updates from the policy shipped with
the code (`models/rltaps/pretrained.py`, trained at the large budget). The other budgets
train from scratch: a fresh network first imitates SJF's decisions
(`ReinforceConfig.teacher`, a measured deviation); `--as-published` trains from random
weights as the paper.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import polars as pl

from benchmarks.options import parse, positional
from models.rltaps.config import MODES, RLTAPS_REINFORCE
from models.rltaps.policy import BASELINES, PREEMPTIVE
from models.rltaps.pretrained import pretrain_config
from models.rltaps.stage_config import RLTapsStageConfig
from pipelines.systems.rltaps.stages import evaluate_rltaps_stage, train_rltaps_stage
from tracelib.configs import resized
from tracelib.stats import PairedRatio, ci_half_width, nested_ratio, paired_ratio
from warehouse import connect, read_frame

PAPER_RESUME_COST_S = 0.0
"""Sensitivity run: the paper's scenario, where resuming a paused job costs nothing (the
default charges DL2's checkpoint-and-restart, `tracelib.sim.config.RESTART_PAUSE_S`)."""

BUDGETS = {
    # What `schedlab run` trains: from the shipped policy (models/rltaps/pretrained.py).
    "default": RLTapsStageConfig(),
    # The larger budgets measure training itself: from the SJF warm start.
    "medium": RLTapsStageConfig(
        reinforce=replace(
            RLTAPS_REINFORCE,
            train_sequences=8,
            val_sequences=8,
            episodes=8,
            epochs=15,
            refresh_every=5,
        ),
        test_sequences=20,
        init="scratch",
    ),
    # The shipped policy's pretraining (its sizes are PRETRAIN_SIZES).
    "large": RLTapsStageConfig(
        reinforce=pretrain_config("nonstreaming", 0), test_sequences=20, init="scratch"
    ),
    "paper": RLTapsStageConfig.paper(init="scratch"),
}


def _figures(curves: pl.DataFrame, evaluation: pl.DataFrame, folder: Path) -> list[Path]:
    """Learning curves (validation slowdown and reward per epoch, baselines as lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    baselines = evaluation.filter(~pl.col("scheduler").str.starts_with("rl-taps"))
    for metric, column, base in (
        ("mean slowdown", "val_slowdown", "mean_slowdown"),
        ("mean reward", "val_reward", "mean_reward"),
    ):
        fig, axes = plt.subplots(1, len(MODES), figsize=(10, 3.5), sharey=True)
        for ax, mode in zip(axes, MODES, strict=True):
            c = curves.filter(pl.col("mode") == mode).sort("iteration")
            ax.plot(c["iteration"], c[column], marker="o", label=f"RL-TAPS ({mode}, validation)")
            for i, (name, value) in enumerate(baselines.select("scheduler", base).rows()):
                ax.axhline(
                    value, color=f"C{i + 1}", linestyle="--", linewidth=1, label=f"{name} (test)"
                )
            ax.set_title(f"{mode}: {metric}")
            ax.set_xlabel("epoch")
            ax.legend(fontsize=7)
        path = folder / f"rltaps_{column}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out


def run_seed(
    budget: str, folder: Path, seed: int, as_published: bool = False
) -> dict[str, list[float]]:
    """Train both modes with training seed `seed` and evaluate on the held-out sequences
    (the same for every seed); returns each scheduler's slowdown per test sequence.
    `as_published`: from random weights (no imitation of SJF first)."""
    cfg = replace(BUDGETS[budget], seed=seed)
    if as_published:
        cfg = cfg.as_published()
    folder.mkdir(parents=True, exist_ok=True)
    warehouse = folder / "wh.duckdb"
    start = time.perf_counter()
    for mode in MODES:
        t = time.perf_counter()
        result = train_rltaps_stage(warehouse, replace(cfg, mode=mode))
        m = result.metrics
        print(
            f"seed {seed}, {mode}: {result.policy_id}, {m['epochs']} epochs, {m['updates']} "
            f"updates, {m['episodes']} episodes, {time.perf_counter() - t:.0f} s; validation "
            f"slowdown {m['initial_val_slowdown']:.2f} at the start -> {m['val_slowdown']:.2f} "
            f"(kept epoch {m['kept_iteration']})"
        )
        if "imitation_accuracy" in m:
            print(
                f"  imitating {m['teacher']}: validation slowdown "
                f"{m['untrained_val_slowdown']:.2f} untrained -> {m['initial_val_slowdown']:.2f}, "
                f"per-GPU accuracy {m['imitation_accuracy']:.1%} on {m['imitation_steps']} "
                f"steps, {m['imitation_wall_s']:.0f} s"
            )
    t = time.perf_counter()
    # Held-out sequences do not depend on the training seed: every seed meets the same ones.
    ev = evaluate_rltaps_stage(warehouse, replace(cfg, seed=0))
    print(f"evaluation on {ev.sequence_set}: {time.perf_counter() - t:.0f} s")
    with connect(warehouse) as con:
        curves = read_frame(con, "SELECT * FROM rltaps_learning_curves ORDER BY mode, iteration")
        table = read_frame(
            con,
            "SELECT scheduler, mean_slowdown, slowdown_ci95, mean_reward, reward_ci95, "
            "n_sequences, n_jobs, policy_id FROM rltaps_evaluation WHERE run_id = ? "
            "ORDER BY mean_slowdown",
            [ev.run_id],
        )
    with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=160, float_precision=2):
        print(
            curves.select(
                "mode",
                "iteration",
                "updates",
                "wall_s",
                "train_slowdown",
                "val_slowdown",
                "val_reward",
                "entropy",
                "loss",
            )
        )
        print(table)
    curves.write_csv(folder / "rltaps_learning_curves.csv")
    table.write_csv(folder / "rltaps_evaluation.csv")
    for path in _figures(curves, table, folder):
        print(f"figure: {path}")
    # Sensitivity: the same policies and sequences when pausing costs nothing, as RL-TAPS'
    # paper models it (the default charges what DL2 measured for a checkpoint-and-restart).
    free = evaluate_rltaps_stage(
        warehouse,
        replace(resized(cfg, {"reinforce.env.resume_cost_s": PAPER_RESUME_COST_S}), seed=0),
    )
    print(
        "without a resumption cost (the paper's scenario): "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(free.mean_slowdown.items()))
    )
    slowdowns = {k: list(v) for k, v in ev.slowdowns.items()}
    (folder / "slowdowns.json").write_text(json.dumps(slowdowns, indent=1))
    print(f"seed {seed}: {time.perf_counter() - start:.0f} s; outputs in {folder}")
    return slowdowns


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_rltaps`'s options (see the module docstring)."""

    budget: Literal["default", "medium", "large", "paper"] = positional("default")
    """the training budget"""
    out: str | None = positional(None)
    """folder for the figures and tables (default: a temporary one)"""
    seeds: tuple[int, ...] = positional((0,))
    """training seeds (comma-separated)"""
    as_published: bool = False
    """train from random weights as the paper (default: imitate SJF first)"""


def _pooled_ratio(per_seed: list[dict[str, list[float]]], name: str, base: str) -> PairedRatio:
    """`name`'s slowdown over `base`'s, paired by test sequence. One training seed: the
    interval is over its sequences; several: sequences are nested in training seeds and
    the interval is over seeds (n counts seeds), so one training's luck is not read as
    many independent samples."""
    if len(per_seed) == 1:
        return paired_ratio(per_seed[0][name], per_seed[0][base])
    mine = [x for run in per_seed for x in run[name]]
    ref = [x for run in per_seed for x in run[base]]
    runs = [r for r, run in enumerate(per_seed) for _ in run[name]]
    sequences = [k for run in per_seed for k in range(len(run[name]))]
    return nested_ratio(mine, ref, runs, sequences)


def main(argv: list[str]) -> int:
    """Train and evaluate once per training seed, then print each RL-TAPS mode's paired
    slowdown ratio to every baseline over (seed, test sequence) pairs."""
    opts = parse(Options, argv)
    budget, as_published, seed_list = opts.budget, opts.as_published, list(opts.seeds)
    folder = Path(opts.out or tempfile.mkdtemp(prefix="bench-rltaps-"))
    start = time.perf_counter()
    start_from = "the shipped policy" if BUDGETS[budget].init == "latest" else "SJF warm start"
    print(f"RL-TAPS {budget} budget, {'as published' if as_published else start_from}")
    per_seed = [run_seed(budget, folder / f"seed-{s}", s, as_published) for s in seed_list]
    pooled = {k: [x for run in per_seed for x in run[k]] for k in per_seed[0]}
    means = {k: float(np.mean(v)) for k, v in pooled.items()}
    print(f"\nmean slowdown over {len(seed_list)} training seeds x held-out sequences:")
    for name, value in sorted(means.items(), key=lambda kv: kv[1]):
        print(f"  {name:22} {value:6.2f} +- {ci_half_width(pooled[name]):.2f}")
    best = min(BASELINES, key=means.__getitem__)
    strongest = min((*BASELINES, *PREEMPTIVE), key=means.__getitem__)
    for mode in MODES:
        name = f"rl-taps-{mode}"
        for base in (*BASELINES, *PREEMPTIVE):
            r = _pooled_ratio(per_seed, name, base)
            print(f"  {name} / {base}: paired slowdown ratio {r}")
        r = _pooled_ratio(per_seed, name, best)
        verdict = "reached" if r.high is not None and r.high < 1 else "NOT reached"
        print(f"target ({mode}): ratio to the best baseline ({best}) below 1: {verdict}")
        r = _pooled_ratio(per_seed, name, strongest)
        print(
            f"  ({mode}) ratio to the best heuristic, preemptive ones included ({strongest}): {r}"
        )
    print(f"total wall time {time.perf_counter() - start:.0f} s; outputs in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
