"""DL2 in the arena: the default against the paper's choices and each deviation removed.

    python -m benchmarks dl2_arena                 # default: 5 seeds, every config below
    python -m benchmarks.bench_dl2_arena [--seeds 0,1,2,3,4]
        [--configs default,as-published,without-teacher,...] [--updates N]
        [--sequences N] [--sim-seeds N] [--warehouse FILE] [--set FIELD=JSON ...]

On a warehouse made like the default `schedlab run`'s (the synthetic DL2-setting trace
derived into `dl2-synthetic`; a temporary one unless `--warehouse` names a file, which is
made once and reused), DL2's three stages run for each config and training seed as in the
run, at the run's default budget: the teacher's decisions are recorded on the set's training
sequences, the warm-up imitates them, and fine-tuning starts from that warm-up (never from
an earlier policy). The shared evaluation then runs every fine-tuned policy, every warm-up,
and every heuristic of the arena on the set's test sequences (`--sequences` of them,
`--sim-seeds` simulator seeds each). Printed per config: what each stage did (the warm-up's
validation JCT against its teacher's, fine-tuning's validation JCT from its start to its
best, at which update), then the paired ratio of average JCT to the best non-oracle
heuristic (chosen by mean average JCT over the same runs), pooled over training seeds x
sequences x simulator seeds, with its 95% interval, for the fine-tuned policy and for its
warm-up, and the target (upper end below 1). Configs: `default` (the run's
default, with every deviation of `models.dl2.config.PUBLISHED_DEVIATIONS`), `as-published`
(none of them), `without-<name>` (the default less one; the name is the deviation's
field, `without-clip` for `finetune.clip`). `--set finetune.clip=0.1` changes a
`DL2StageConfig` field, or a field of a config nested in it, of the base before the
configs are made (to try a value).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace

from benchmarks.arena import evaluate_with_heuristics, make_warehouse, print_ratios
from benchmarks.options import parse, repeated, setting
from models.dl2.config import PUBLISHED_DEVIATIONS
from models.dl2.stage_config import DL2StageConfig
from pipelines.config import run_config
from pipelines.registry import SYSTEMS
from pipelines.systems.dl2.stages import finetune_stage, record_stage, warmup_stage
from tracelib.configs import resized

DEVIATIONS = {path.rpartition(".")[2]: path for path in PUBLISHED_DEVIATIONS}
"""Each deviation by its field's name (`clip`) -> its dotted path (`finetune.clip`)."""
CONFIGS = ("default", "as-published", *(f"without-{name}" for name in DEVIATIONS))


def config_named(base: DL2StageConfig, name: str) -> DL2StageConfig:
    """`base` (the run's DL2 config, deviations on) as the named config."""
    if name == "default":
        return base
    if name == "as-published":
        return base.as_published()
    deviation = name.removeprefix("without-")
    if not name.startswith("without-") or deviation not in DEVIATIONS:
        raise ValueError(f"unknown config {name!r}; known: {', '.join(CONFIGS)}")
    path = DEVIATIONS[deviation]
    return resized(base, {path: PUBLISHED_DEVIATIONS[path][0]})


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_dl2_arena`'s options (see the module docstring)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """training seeds (comma-separated)"""
    configs: tuple[str, ...] = CONFIGS
    """the configs to train (comma-separated)"""
    updates: int | None = None
    """fine-tuning updates (default: the run's)"""
    sequences: int = 4
    """test sequences of the set"""
    sim_seeds: int = 3
    """simulator seeds per sequence"""
    warehouse: str | None = None
    """warehouse file, made once and reused (default: a temporary one)"""
    set: tuple[tuple[str, object], ...] = repeated(setting(DL2StageConfig))
    """FIELD=JSON: a DL2StageConfig field of the base, dotted into a nested config
    (finetune.clip=0.1; repeatable)"""

    def __post_init__(self) -> None:
        unknown = [c for c in self.configs if c not in CONFIGS]
        if unknown:
            raise ValueError(f"unknown configs {unknown}; known: {', '.join(CONFIGS)}")


def train(warehouse: str, cfg: DL2StageConfig) -> tuple[str, str]:
    """Record, warm up and fine-tune DL2 under `cfg`; prints what each stage did and returns
    (warm-up policy id, fine-tuned policy id)."""
    t0 = time.perf_counter()
    recorded = record_stage(warehouse, cfg)
    t1 = time.perf_counter()
    warm = warmup_stage(warehouse, cfg, recorded.run_id)
    t2 = time.perf_counter()
    tuned = finetune_stage(warehouse, cfg, warm.policy_id, "dl2")
    t3 = time.perf_counter()
    w, f = warm.metrics, tuned.metrics
    print(
        f"    record {recorded.steps:7,} steps {t1 - t0:4.0f} s | warm-up {w['epochs']:3d} "
        f"epochs, accuracy {w['imitation_accuracy']:.3f}, validation JCT "
        f"{w['val_avg_jct_s']:7,.0f} s vs teacher {w['teacher_avg_jct_s']:7,.0f} s "
        f"{t2 - t1:4.0f} s | fine-tune {f['init_val_avg_jct_s']:7,.0f} -> best "
        f"{f['best_val_avg_jct_s']:7,.0f} s @ {f['best_update']} of {f['updates']} "
        f"(final {f['final_val_avg_jct_s'] or float('inf'):7,.0f}) {t3 - t2:4.0f} s",
        flush=True,
    )
    return warm.policy_id, tuned.policy_id


def main(argv: list[str]) -> int:
    """Train every (config, seed), evaluate them with the heuristics, print."""
    opts = parse(Options, argv)
    started = time.perf_counter()
    cfg = run_config(SYSTEMS)
    warehouse = make_warehouse(cfg, "bench-dl2-arena-", opts.warehouse)
    base = resized(replace(cfg.learned["dl2"], variants=(), init="warmup"), dict(opts.set))
    if opts.updates is not None:
        base = resized(base, {"finetune.max_updates": opts.updates})
    wanted: dict[str, str] = {}
    for name in opts.configs:
        for seed in opts.seeds:
            print(f"  {name} seed {seed}", flush=True)
            stage_cfg = replace(config_named(base, name), seed=seed)
            warm, tuned = train(warehouse, stage_cfg)
            wanted[f"dl2/{name}/{seed}"] = tuned
            wanted[f"warmup/{name}/{seed}"] = warm
    runs, heuristics, chosen_on = evaluate_with_heuristics(
        warehouse, cfg.derive.name, wanted, opts.sequences, opts.sim_seeds
    )
    # Each config, fine-tuned and warm-up: its training seeds pooled.
    groups = {
        f"{config} ({'fine-tuned' if stage == 'dl2' else 'warm-up'})": f"{stage}/{config}/"
        for config in opts.configs
        for stage in ("dl2", "warmup")
    }
    print_ratios(runs, heuristics, groups, chosen_on)
    print(f"total wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
