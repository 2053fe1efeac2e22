"""Chic and Chic-Pair in the arena: what each of the deviations is worth, measured.

    python -m benchmarks chic_arena                # default: 5 seeds, every config below
    python -m benchmarks.bench_chic_arena [--seeds 0,1,2,3,4] [--variants chic,chic-pair]
        [--configs default,as-published,without-mask_absent,...] [--iterations N]
        [--sequences N] [--sim-seeds N]

On a temporary warehouse made like the default `schedlab run`'s (the synthetic DL2-setting
trace derived into `dl2-synthetic`), `train_chic_arena_stage` trains each variant under each
config from scratch at the run's default arena budget, once per training seed; the shared
evaluation then runs every trained policy and every heuristic of the arena on the set's test
sequences (`--sequences` of them, `--sim-seeds` simulator seeds each). Printed per variant and
config: the paired ratio of average JCT to the best non-oracle heuristic (chosen by mean
average JCT over the same runs), pooled over training seeds x sequences x simulator seeds,
with its 95% interval, and the target (upper end below 1). Configs: `default` (the
four deviations on in the arena, the run's default), `as-published` (none),
`without-<name>` (the default less one: mask_absent, work_conserving, shared_sequence,
smoothing), `with-teacher` (the default plus the warm start from Optimus,
`CEMConfig.teacher`, off in the arena by default).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

from benchmarks.arena import evaluate_with_heuristics, make_warehouse, print_ratios
from benchmarks.options import parse
from models.chic.config import PUBLISHED
from models.chic.stage_config import ChicArenaConfig
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from pipelines.systems.chic.stages import train_chic_arena_stage
from tracelib.configs import resized

CONFIGS = (
    "default",
    "as-published",
    *(f"without-{name}" for name in PUBLISHED if name != "teacher"),
    "with-teacher",
)


def config_named(base: ChicArenaConfig, name: str) -> ChicArenaConfig:
    """`base` (the run's arena config, deviations on) as the named config."""
    if name == "default":
        return base
    if name == "as-published":
        return base.as_published()
    if name == "with-teacher":  # the warm start from Optimus, off in the arena by default
        return resized(base, {"cem.teacher": "optimus"})
    deviation = name.removeprefix("without-")
    if not name.startswith("without-") or deviation not in PUBLISHED:
        raise ValueError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}")
    return resized(base, {f"cem.{deviation}": PUBLISHED[deviation]})


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_chic_arena`'s options (see the module docstring)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """training seeds (comma-separated)"""
    variants: tuple[str, ...] = ("chic", "chic-pair")
    """the Chic variants to train (comma-separated)"""
    configs: tuple[str, ...] = CONFIGS
    """the configs to train (comma-separated)"""
    iterations: int | None = None
    """CEM iterations (default: the run's arena budget)"""
    sequences: int = 4
    """test sequences of the set"""
    sim_seeds: int = 3
    """simulator seeds per sequence"""

    def __post_init__(self) -> None:
        unknown = [c for c in self.configs if c not in CONFIGS]
        if unknown:
            raise ValueError(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")


def main(argv: list[str]) -> int:
    """Train every (variant, config, seed), evaluate them with the heuristics, print."""
    opts = parse(Options, argv)
    started = time.perf_counter()
    cfg = run_config(SYSTEMS)
    warehouse = make_warehouse(cfg, "bench-chic-arena-")
    base = cfg.learned["chic"].arena
    if opts.iterations is not None:
        base = resized(base, {"cem.iterations": opts.iterations})
    wanted: dict[str, str] = {}
    for variant in opts.variants:
        for name in opts.configs:
            for seed in opts.seeds:
                arena = replace(config_named(base, name), seed=seed, init="scratch")
                t0 = time.perf_counter()
                result = train_chic_arena_stage(warehouse, arena, variant)
                wanted[f"{variant}/{name}/{seed}"] = result.policy_id
                print(
                    f"trained {variant:9s} {name:26s} seed {seed}: validation ACT "
                    f"{result.metrics['best_val_act_s']:9,.0f} s "
                    f"({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
    runs, heuristics, chosen_on = evaluate_with_heuristics(
        warehouse, cfg.derive.name, wanted, opts.sequences, opts.sim_seeds
    )
    # Each (variant, config): its training seeds pooled.
    groups = {
        f"{variant} {config}": f"{variant}/{config}/"
        for variant in opts.variants
        for config in opts.configs
    }
    print_ratios(runs, heuristics, groups, chosen_on)
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
