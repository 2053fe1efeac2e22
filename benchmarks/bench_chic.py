"""Chic and Chic-Pair against Optimus (Chic section 6.2), through the pipeline's stages.

    python -m benchmarks chic                       # small budget (about 2 minutes here)
    python -m benchmarks.bench_chic ITERATIONS [RATES] [--out DIR] [--fit-epochs E]
        [--smoothing A] [--as-published] [--without DEVIATION[,DEVIATION]]
        [--train-rates RATES] [--seeds 0,1,2]

On a temporary warehouse: `train_chic_stage` trains Chic and Chic-Pair at every rate of
RATES (comma-separated, per hour; default 0.9,1.8,2.7; --train-rates restricts which rates
get their own policies, the reference rate 1.8 always does), ITERATIONS CEM iterations each
(N = 35 + 1 trajectories of W = 30 jobs, validation on 30 sequences every two iterations);
then `evaluate_chic_stage` runs every policy, the policies trained at 1.8 at every rate, and
Optimus at 600 s and 300 s on 30 unseen sequences per rate. Prints the ACT table, the
reduction against Optimus-600 with the paper's targets (Chic >= 12.65%, Chic-Pair >= 10.08%
at every rate), the learning curves at 1.8 and the seconds per training iteration (paper:
28.15 s on one core). With --out, also writes the figures (PNG) there.
Training runs with the stage's defaults, the five measured deviations (docs/chic.md);
`--as-published` undoes all five, `--without mask_absent,smoothing` (or work_conserving,
shared_sequence) undoes those named, to measure what each is worth.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from benchmarks.options import parse, positional
from models.chic.config import CHIC_CEM, PUBLISHED, REFERENCE_RATE, ChicEvalConfig
from models.chic.stage_config import ChicTrainConfig
from pipelines.systems.chic.stages import evaluate_chic_stage, train_chic_stage
from tracelib.stats import nested_ratio
from warehouse import connect, read_frame

TARGETS = {"chic": 0.1265, "chic-pair": 0.1008}
"""Chic section 6.2.1: ACT reduction against Optimus (600 s) at every rate."""


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_chic`'s options (see the module docstring)."""

    iterations: int = positional(4)
    """ITERATIONS: CEM iterations per policy"""
    rates: tuple[float, ...] = positional((0.9, 1.8, 2.7))
    """RATES: arrival rates per hour, comma-separated (the evaluation's and the training's)"""
    out: Path | None = None
    """folder for the figures (PNG)"""
    fit_epochs: int = 40
    """epochs of the warm start's fit"""
    smoothing: float | None = None
    """CEM smoothing; default the stage's (or the paper's with --as-published)"""
    as_published: bool = False
    """undo all five measured deviations"""
    without: tuple[str, ...] = ()
    """undo the named deviations (comma-separated)"""
    train_rates: tuple[float, ...] | None = None
    """the rates that get their own policies (default RATES; 1.8 always)"""
    seeds: tuple[int, ...] = (0,)
    """training seeds (comma-separated)"""

    def __post_init__(self) -> None:
        unknown = [n for n in self.without if n.replace("-", "_") not in PUBLISHED]
        if unknown:
            raise ValueError(f"--without: unknown deviation {unknown[0]!r}; {sorted(PUBLISHED)}")

    def deviations(self) -> dict:
        """The five settings `--as-published` and `--without` undo: the stage's defaults,
        the paper's where undone; an explicit --smoothing wins."""
        out = {name: getattr(CHIC_CEM, name) for name in PUBLISHED}
        if self.as_published:
            out.update(PUBLISHED)
        for name in self.without:
            out[name.replace("-", "_")] = PUBLISHED[name.replace("-", "_")]
        if self.smoothing is not None:
            out["smoothing"] = self.smoothing
        return out


def main(argv: list[str]) -> int:
    """Train, evaluate and print once per training seed (see the module doc); with several
    seeds, then the paired ACT ratios over (seed, test sequence) pairs."""
    opts = parse(Options, argv)
    started = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="bench-chic-"))
    per_seed = []
    for seed in opts.seeds:
        out = opts.out / f"seed-{seed}" if opts.out and len(opts.seeds) > 1 else opts.out
        per_seed.append(run_seed(opts, seed, folder / f"seed-{seed}", out))
    if len(per_seed) > 1:
        _paired(per_seed, opts.rates)
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


def _paired(per_seed: list[dict[str, dict[float, list[float]]]], rates) -> None:
    """Each Chic variant's ACT over Optimus' (600 s, 300 s, at every event), paired by
    sequence within each training seed, the interval over training seeds."""
    print(f"\npaired ACT ratios over {len(per_seed)} training seeds x test sequences:")
    for rate in rates:
        for variant in ("chic", "chic-pair"):
            for base in ("optimus-600", "optimus-300", "optimus-events"):
                if variant not in per_seed[0] or base not in per_seed[0]:
                    continue
                mine = [x for acts in per_seed for x in acts[variant][rate]]
                ref = [x for acts in per_seed for x in acts[base][rate]]
                # Sequences are nested in training seeds: the interval is over seeds (n
                # counts seeds), so a training seed's luck is not read as many samples.
                runs = [r for r, acts in enumerate(per_seed) for _ in acts[variant][rate]]
                sequences = [k for acts in per_seed for k in range(len(acts[variant][rate]))]
                ratio = nested_ratio(mine, ref, runs, sequences)
                print(f"  {rate:g}/h {variant} / {base}: {ratio}")


def run_seed(
    opts: Options, seed: int, folder: Path, out: Path | None
) -> dict[str, dict[float, list[float]]]:
    """One training seed: train every policy on a fresh warehouse, evaluate, print; returns
    system -> rate -> completion time per test sequence (the same sequences every seed)."""
    folder.mkdir(parents=True, exist_ok=True)
    warehouse = str(folder / "wh.duckdb")
    train_rates = opts.train_rates or opts.rates
    train_rates = tuple(sorted({*train_rates, REFERENCE_RATE}))
    per_iteration: dict[str, list[float]] = {"chic": [], "chic-pair": []}
    for variant in ("chic", "chic-pair"):
        for rate in train_rates:
            cem = replace(
                CHIC_CEM,
                iterations=opts.iterations,
                fit_epochs=opts.fit_epochs,
                **opts.deviations(),
            )
            cfg = ChicTrainConfig(variant=variant, rate_per_hour=rate, cem=cem, seed=seed)
            result = train_chic_stage(warehouse, cfg)
            per_iteration[variant].append(result.metrics["s_per_iteration"])
            print(
                f"trained {variant} at {rate:g}/h: {result.policy_id}, best validation ACT "
                f"{result.metrics['best_val_act_s']:.0f} s at iteration "
                f"{result.metrics['best_iteration']}, {result.metrics['wall_s']:.0f} s "
                f"({result.metrics['s_per_iteration']:.2f} s per iteration)"
            )
    evaluation = evaluate_chic_stage(warehouse, ChicEvalConfig(rates=opts.rates))
    with connect(warehouse) as con:
        rows = read_frame(
            con,
            "SELECT system, rate_per_hour, avg_jct_s, ci95_s, improvement_vs_optimus_600 "
            "FROM chic_evaluation WHERE eval_id = ? ORDER BY system, rate_per_hour",
            [evaluation.eval_id],
        )
        curves = read_frame(
            con,
            "SELECT p.system, c.iteration, c.elite_bound, c.mean_return, c.val_act_s, c.wall_s "
            "FROM chic_learning_curves c JOIN policies p USING (policy_id) "
            "WHERE CAST(json_extract(p.config, '$.train.scenario.rate_per_hour') AS DOUBLE) = ? "
            "ORDER BY p.system, c.iteration",
            [REFERENCE_RATE],
        )
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=160, float_precision=3):
        act = rows.pivot(on="rate_per_hour", index="system", values="avg_jct_s")
        print("\naverage completion time (s) by arrival rate (per hour), 30 unseen sequences:")
        print(act)
        imp = rows.pivot(on="rate_per_hour", index="system", values="improvement_vs_optimus_600")
        print("\nACT reduction against Optimus-600 (paper: Chic >= 0.1265, Chic-Pair >= 0.1008):")
        print(imp)
        print(f"\nlearning curves at {REFERENCE_RATE}/h:")
        print(curves)
    for system, target in TARGETS.items():
        got = rows.filter(pl.col("system") == system)
        if got.height:
            worst = float(got["improvement_vs_optimus_600"].min())
            verdict = "reached" if worst >= target else "NOT reached"
            print(
                f"{system}: smallest ACT reduction against Optimus-600 over the rates "
                f"{worst:+.2%} (target >= {target:.2%}): {verdict}"
            )
    for variant, values in per_iteration.items():
        mean = sum(values) / len(values)
        print(f"{variant}: {mean:.2f} s per training iteration here (paper: 28.15 s, Chic)")
    if out is not None:
        _figures(rows, curves, out)
    return evaluation.sequence_acts


def _figures(rows: pl.DataFrame, curves: pl.DataFrame, out: Path) -> None:
    """ACT by rate (Fig. 4) and the learning curves at 1.8 (Fig. 6) as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for system in rows["system"].unique().sort().to_list():
        part = rows.filter(pl.col("system") == system).sort("rate_per_hour")
        ax.errorbar(
            part["rate_per_hour"], part["avg_jct_s"], yerr=part["ci95_s"], label=system, capsize=3
        )
    ax.set_xlabel("arrival rate (jobs per hour)")
    ax.set_ylabel("average completion time (s)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "chic-act-by-rate.png", dpi=120)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for system in curves["system"].unique().sort().to_list():
        part = curves.filter(pl.col("system") == system)
        axes[0].plot(part["iteration"], part["elite_bound"], label=f"{system} elite bound")
        axes[0].plot(part["iteration"], part["mean_return"], "--", label=f"{system} mean return")
        val = part.drop_nulls("val_act_s")
        axes[1].plot(val["iteration"], val["val_act_s"], "o-", label=system)
    axes[0].set_xlabel("iteration")
    axes[0].set_ylabel("return")
    axes[0].legend(fontsize=7)
    axes[1].set_xlabel("iteration")
    axes[1].set_ylabel("validation ACT (s)")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "chic-learning-curves.png", dpi=120)
    print(f"figures written to {out}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
