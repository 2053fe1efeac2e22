"""Harmony end to end: reward predictor accuracy (Fig. 9), placement DRL against the
baselines under three arrival patterns (Fig. 8), and the Table II ablations.

    python -m benchmarks harmony          # the default budget of `schedlab run`, one seed
    python -m benchmarks.bench_harmony [--updates N] [--epochs N] [--sequences N]
        [--train-sequences N] [--val-sequences N] [--gavel FILE] [--seeds N]
        [--systems NAME,...] [--set FIELD=JSON ...]
    python -m benchmarks.bench_harmony --seeds 5      # every system, 5 seeds (~40 min)
    python -m benchmarks.bench_harmony --seeds 5 --systems harmony,harmony-warm-start
                                                      # docs/harmony.md's figures (~9 min)
    python -m benchmarks.bench_harmony --updates 1500 --seeds 5 --systems harmony \
        --set rollout_speed='"simulator"'              # rollouts on the simulator's speeds

`--systems` limits which learned systems train (default: Harmony, its three ablations,
`harmony-as-published` and `harmony-warm-start`); `--set` changes a `PlacementTrainConfig`
field of every one of them (JSON values; `as_published` undoes it again). Training,
validation and held-out sequence counts default to the run's default budget; the held-out
sequences are the same for every training seed (seed 1000 of `HarmonyEvalConfig`), and the
searched teacher, which does not depend on the seed, is searched once for all of them.

1. 13,177 synthetic interference samples (Harmony's count) on the 6-server testbed; the
   reward predictor (a shared MLP over job x server pairs pooled per job, then 3 hidden
   layers 196/196/128 per job, batch norm, Adam 0.005, batch 32, relative-error loss) on
   a 90/10 split of sample sets, against LIF-Line, LIF-Quad and gradient boosting on the
   same split. Target: held-out error <= 9.8% and below LIF (at 80 epochs, seed 0: 2.8%
   against LIF-Line 10.8%, LIF-Quad 5.9%, gradient boosting 4.3%; noise floor ~2.5%).
2. With a Gavel throughputs file: the same predictor fitted on each GPU type's measured
   pairs (real co-location throughputs), its held-out error beside the synthetic one.
3. Harmony and its three ablations trained on rollouts scored by the predictor (uniform
   arrivals, the run's 48 training sequences, each from the clone of the searched teacher,
   `models.harmony.search`), then every policy and the baselines (load balancing,
   Tetris, LIF-Line, LIF-Quad) on held-out sequences of the uniform, Poisson and
   Google-like patterns, in the simulator with the true speed model. Target: Harmony's
   average JCT at least 25% below every baseline; each ablation worse than Harmony.
   `harmony-as-published` is the paper's method without this project's deviations
   (`PlacementTrainConfig.as_published`). With `seeds` > 1 every system is trained once
   per seed and the paired ratios and ablation slowdowns are summarized over seeds (one
   seed's ranking of close systems is noise: the paired ratio of one policy moves by 10%
   between training seeds). Two references are evaluated beside them: the greedy one-step
   optimum of Harmony's reward with the true speed model, and the same greedy search
   scored by the predictor; and two heuristics that are not the paper's, LIF-Quad placing
   the waiting jobs smallest work times tasks first (`lif-quad/smallest-area`) or newest
   first (`lif-quad/newest`). The baselines include one that is not the paper's either,
   LIF-Quad placing the shortest remaining work first (`lif-quad/shortest`,
   `models.harmony.config.ORDERED_BASELINES`).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace

import polars as pl
import torch

from benchmarks.options import parse, parsed, repeated, setting
from models.harmony.config import ORDERED_BASELINES, VARIANTS, HarmonyEvalConfig
from models.harmony.evaluate import harmony_tables
from models.harmony.placement import GreedySpeedPlacement, RulePlacement
from models.harmony.reward import RewardTrainConfig, compare_estimators, fit_reward_model
from models.harmony.search import search_teacher
from models.harmony.stage_config import HarmonyStageConfig
from models.harmony.train import PlacementTrainConfig, train_placement, warm_key, warm_start
from pipelines.system import at_least
from tracelib.gavel import read_gavel
from tracelib.interference import InterferenceConfig, collect_samples
from tracelib.scenarios.harmony import ArrivalConfig, sequences, split_seed
from tracelib.sim.speed import SpeedModel
from tracelib.stats import mean_ci

pl.Config.set_tbl_rows(200)
pl.Config.set_tbl_cols(12)
pl.Config.set_tbl_width_chars(160)


def reward_models(epochs: int, gavel: str | None) -> object:
    t0 = time.perf_counter()
    frame = collect_samples(InterferenceConfig())
    fit = fit_reward_model(frame, RewardTrainConfig(epochs=epochs))
    table = compare_estimators(frame, fit)
    print(
        f"reward predictor on {frame.height} synthetic samples ({time.perf_counter() - t0:.0f} s)"
    )
    print(
        table.filter(pl.col("job_type") == "all")
        .pivot("split", index="estimator", values="mean_relative_error")
        .sort("test")
    )
    print(
        table.filter((pl.col("split") == "test") & (pl.col("job_type") != "all")).pivot(
            "estimator", index="job_type", values="mean_relative_error"
        )
    )
    if gavel:
        read = read_gavel(gavel)
        for key, reason in read.skipped.items():
            print(f"Gavel {key}: skipped ({reason})")
        for gpu in read.gpu_types:
            part = read.samples.filter(pl.col("source") == f"gavel:{gpu}")
            gfit = fit_reward_model(part, RewardTrainConfig(epochs=epochs))
            gtab = compare_estimators(part, gfit, lif_profile="measured")
            print(f"Gavel {gpu}: {part.height} measured samples")
            print(
                gtab.filter(pl.col("job_type") == "all").pivot(
                    "split", index="estimator", values="mean_relative_error"
                )
            )
    return fit.predictor


def systems(base: PlacementTrainConfig) -> dict[str, PlacementTrainConfig]:
    """Every learned system the benchmark can train, by name, from one base config."""
    configs = {v: replace(base, **switches) for v, switches in VARIANTS.items()}
    # The paper's method as written, beside the default with its deviations.
    configs["harmony-as-published"] = base.as_published()
    # The warm start alone (the teacher cloned, no actor-critic update).
    configs["harmony-warm-start"] = replace(base, updates=0)
    return configs


SYSTEMS = tuple(systems(PlacementTrainConfig()))


def placement(
    predictor,
    updates: int,
    n_sequences: int,
    seeds: int,
    names: tuple[str, ...] = SYSTEMS,
    changes: dict | None = None,
    n_train: int | None = None,
    n_val: int | None = None,
) -> None:
    arrivals = ArrivalConfig()
    stage = HarmonyStageConfig()
    # The run's training and validation sequences at stage seed 0.
    train = sequences(arrivals, n_train or stage.n_train_sequences, split_seed(0, "train"))
    val = sequences(arrivals, n_val or stage.n_val_sequences, split_seed(0, "validation"))
    print(f"{len(train)} training and {len(val)} validation sequences (uniform arrivals)")
    learned = {}
    searched = None
    for seed in range(seeds):
        base = PlacementTrainConfig(updates=updates, val_every=max(updates // 6, 1), seed=seed)
        base = replace(base, **(changes or {}))
        configs = {n: c for n, c in systems(base).items() if n in names}
        # Variants differing only in the actor-critic share one warm start, as in the run;
        # the searched teacher does not depend on the seed: searched once for every seed.
        t0 = time.perf_counter()
        warm = None
        if base.teacher == "searched":
            if searched is None:
                obs = base.net.obs_config()
                searched = search_teacher(train, base.sim, obs, base.search)
            warm = warm_start(train, predictor, base, searched=searched)
        elif base.teacher:
            warm = warm_start(train, predictor, base)
        if warm is not None:
            print(
                f"warm start (seed {seed}): {warm.metrics['imitation_steps']} {base.teacher} "
                f"placements, held-out accuracy "
                f"{warm.metrics['imitation_held_out_accuracy']:.3f}, "
                f"{time.perf_counter() - t0:.0f} s"
            )
        for variant, cfg in configs.items():
            t0 = time.perf_counter()
            shared = warm if warm and cfg.teacher and warm_key(cfg) == warm.key else None
            policy, curve, metrics = train_placement(train, val, predictor, cfg, warm=shared)
            learned[f"{variant}@{seed}"] = (policy, None)
            took = time.perf_counter() - t0
            step = metrics["best_val_step"]
            kept = "the start" if step == 0 else f"update {step}" if step else "the last weights"
            print(f"{variant} (seed {seed}): {cfg.updates} updates in {took:.0f} s, kept {kept}")
            print(curve.select("step", "reward", "entropy", "epsilon", "val_avg_jct_s"))
    # References (not baselines): the one-step optimum of Harmony's reward with the true
    # speed model, and the same greedy search scored by the reward predictor.
    learned["greedy-true-model"] = (GreedySpeedPlacement(SpeedModel(), "greedy-true-model"), None)
    learned["greedy-predictor"] = (GreedySpeedPlacement(predictor, "greedy-predictor"), None)
    # Heuristics that are not the paper's: LIF-Quad placing the waiting jobs in another
    # order (the searched teacher's candidates), which its baselines never do.
    for order in ("smallest-area", "newest"):  # shortest first is a baseline
        rule = RulePlacement("lif-quad", order=order)
        learned[rule.name] = (rule, None)
    t0 = time.perf_counter()
    tables, _ = harmony_tables(learned, HarmonyEvalConfig(n_sequences=n_sequences), "bench")
    # The harmony_evaluation view's columns, from the one evaluation's summary.
    best = tables.summary.select(
        "workload_set",
        pl.col("scheduler").alias("best_heuristic"),
        pl.col("avg_jct_s").alias("_best"),
    )
    summary = tables.summary.join(best, on=["workload_set", "best_heuristic"], how="left").select(
        pl.col("workload_set").str.strip_prefix("harmony-").alias("pattern"),
        "scheduler",
        "avg_jct_s",
        pl.col("avg_jct_slots").alias("avg_jct_intervals"),
        pl.col("avg_jct_ci_high").alias("ci_high_s"),
        pl.col("best_heuristic").alias("best_baseline"),
        (1 - pl.col("avg_jct_s") / pl.col("_best")).alias("improvement_over_best_baseline"),
        pl.col("ratio_to_best_heuristic").alias("paired_ratio"),
        pl.col("ratio_ci_low").alias("paired_ratio_ci_low"),
        pl.col("ratio_ci_high").alias("paired_ratio_ci_high"),
    )
    print(f"evaluation: {n_sequences} sequences per pattern ({time.perf_counter() - t0:.0f} s)")
    print(
        summary.select(
            "pattern",
            "scheduler",
            "avg_jct_intervals",
            (pl.col("ci_high_s") - pl.col("avg_jct_s")).truediv(1200).alias("ci_half_intervals"),
            "best_baseline",
            "improvement_over_best_baseline",
            "paired_ratio",
            "paired_ratio_ci_low",
            "paired_ratio_ci_high",
        )
    )
    trained = summary.filter(pl.col("scheduler").str.contains("@")).with_columns(
        pl.col("scheduler").str.split("@").list.get(0).alias("system"),
        pl.col("scheduler").str.split("@").list.get(1).alias("seed"),
    )
    print(f"over {seeds} training seed(s): paired JCT ratio to the best baseline")
    print(
        trained.group_by("pattern", "system")
        .agg(
            pl.col("paired_ratio").mean().alias("mean"),
            pl.col("paired_ratio").min().alias("min"),
            pl.col("paired_ratio").max().alias("max"),
        )
        .sort("pattern", "mean")
    )
    pooled_ratios(tables.runs, seeds)
    full = trained.filter(pl.col("system") == "harmony").select("pattern", "seed", "avg_jct_s")
    slowdown = pl.col("avg_jct_s") / pl.col("avg_jct_s_harmony") - 1
    if "harmony" not in names:
        return
    print("ablations: slowdown against Harmony trained with the same seed")
    print(
        trained.filter(pl.col("system") != "harmony")
        .join(full, on=["pattern", "seed"], suffix="_harmony")
        .group_by("system", "pattern")
        .agg(
            slowdown.mean().alias("mean_slowdown"),
            (slowdown > 0).sum().alias("seeds_worse"),
            pl.len().alias("seeds"),
        )
        .sort("system", "pattern")
    )


def _systems(text: str) -> tuple[str, ...]:
    names = tuple(n for n in text.split(",") if n)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: systems are {', '.join(SYSTEMS)}")
    return names


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_harmony`'s options (see the module docstring)."""

    updates: int = 300
    """actor-critic updates"""
    epochs: int = 80
    """reward predictor epochs"""
    sequences: int = parsed(HarmonyEvalConfig().n_sequences, at_least(int, 1))
    """held out per pattern"""
    train_sequences: int | None = parsed(None, at_least(int, 1))
    """training sequences (default: the run's)"""
    val_sequences: int | None = parsed(None, at_least(int, 1))
    """validation sequences (default: the run's)"""
    gavel: str | None = None
    """Gavel's simulation_throughputs.json"""
    seeds: int = parsed(1, at_least(int, 1))
    """training seeds 0..N-1"""
    systems: tuple[str, ...] = parsed(SYSTEMS, _systems)
    """which systems to train (comma-separated)"""
    set: tuple[tuple[str, object], ...] = repeated(
        setting(PlacementTrainConfig, exclude=("net", "sim", "seed", "updates"))
    )
    """FIELD=JSON: a PlacementTrainConfig field of every system (repeatable)"""

    def __post_init__(self) -> None:
        try:  # a value of the right type can still be one the config refuses
            replace(PlacementTrainConfig(), **dict(self.set))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--set: {exc}") from None


def pooled_ratios(runs: pl.DataFrame, seeds: int) -> None:
    """Each trained system's paired JCT ratio to LIF-Quad and to LIF-Quad shortest job
    first, per pattern: per held-out sequence the mean over training seeds of the ratio,
    then the mean and 95% t-interval over the sequences (the unit that is held out: the
    seeds share the sequences, so pooling seed x sequence pairs would overstate n)."""
    jct = runs.select(
        pl.col("workload_set").str.strip_prefix("harmony-").alias("pattern"),
        "sequence_no",
        "scheduler",
        "avg_jct_s",
    )
    trained = jct.filter(pl.col("scheduler").str.contains("@")).with_columns(
        pl.col("scheduler").str.split("@").list.get(0).alias("system")
    )
    rows = []
    for reference in ("lif-quad", *ORDERED_BASELINES):
        ref = jct.filter(pl.col("scheduler") == reference).select(
            "pattern", "sequence_no", pl.col("avg_jct_s").alias("ref")
        )
        per_seq = (
            trained.join(ref, on=["pattern", "sequence_no"])
            .group_by("pattern", "system", "sequence_no")
            .agg((pl.col("avg_jct_s") / pl.col("ref")).mean().alias("ratio"))
        )
        for (pattern, system), part in per_seq.group_by("pattern", "system"):
            mean, low, high = mean_ci(part["ratio"].to_numpy())
            rows.append(
                {
                    "pattern": pattern,
                    "system": system,
                    "against": reference,
                    "ratio": mean,
                    "ci_low": low,
                    "ci_high": high,
                    "sequences": part.height,
                    "lower_on": int((part["ratio"] < 1).sum()),
                }
            )
    print(f"paired JCT ratio per held-out sequence (mean over {seeds} seed(s)), 95% t-interval")
    print(pl.DataFrame(rows).sort("against", "pattern", "system"))


def main(argv: list[str]) -> int:
    """Fit the reward models, train and evaluate the placement systems, print."""
    opts = parse(Options, argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    predictor = reward_models(opts.epochs, opts.gavel)
    placement(
        predictor,
        opts.updates,
        opts.sequences,
        opts.seeds,
        opts.systems,
        dict(opts.set),
        opts.train_sequences,
        opts.val_sequences,
    )
    print(f"total wall time {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
