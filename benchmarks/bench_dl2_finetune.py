"""DL2's grouped-PPO fine-tuning again from each scoreboard run's own warm-up, with other
settings (what fine-tuning can still take from the warm-up).

    python -m benchmarks dl2_finetune
    python -m benchmarks.bench_dl2_finetune [--dir DIR] [--seeds 0,1,2,3,4]
        [--set FIELD=JSON ...]

On the scoreboard's default runs (`benchmarks/bench_scoreboard.py`, DIR default
./var/scoreboard-default; missing runs are made, finished ones reused): per run, its DL2
warm-up (the policy of system dl2 without a parent) is fine-tuned by
`models.dl2.grouped.finetune_grouped` on the run's `dl2-synthetic` training sequences,
validated on its validation sequences, with the run's DL2 stage's settings and
`GroupedConfig` fields changed by `--set` (e.g. `--set iterations=160`, `--set
credit='"job"' --set job_noise=1.0`); then the result, the run's own fine-tuned DL2 and
its warm-up run greedy on the run's test sequences x 3 simulator seeds (1000-1002) beside
Optimus at every event. Printed per run the validation curve's start, best and end and the
test ratios; pooled (n = 30 with five runs) the paired ratios to Optimus at every event, to
the run's DL2 and to the warm-up, with their 95% intervals. Without `--set` the result is
another training seed of the run's DL2 (the stage's settings, seeded with the run's seed
where the pipeline spawns its own).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_scoreboard import run_seed
from benchmarks.options import parse, repeated, setting
from models.checkpoints import load_registered
from models.dl2.config import GroupedConfig
from models.dl2.grouped import finetune_grouped
from models.dl2.policy import policy_from_checkpoint
from models.dl2.recorder import as_workloads
from models.dl2.stage_config import DL2StageConfig
from models.heuristics.registry import ALLOCATIONS, PLACEMENTS
from pipelines.trained import set_workloads
from tracelib.sim.engine import Simulator
from tracelib.sim.policy import Scheduler
from tracelib.stats import paired_ratio
from warehouse import connect, read_frame

SET = "dl2-synthetic"
SIM_SEEDS = (1000, 1001, 1002)


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_dl2_finetune`'s options (see the module docstring)."""

    dir: Path = Path("var/scoreboard-default")
    """the scoreboard's folder of default runs"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """the runs' seeds (comma-separated)"""
    set: tuple[tuple[str, object], ...] = repeated(
        setting(GroupedConfig, exclude=("net", "sim", "seed", "variant"))
    )
    """FIELD=JSON: a GroupedConfig field (repeatable)"""


def dl2_policies(warehouse: Path):
    """The run's newest DL2 warm-up and fine-tuned policy (system dl2, without and with a
    parent); None for one the run does not have."""
    with connect(warehouse, read_only=True) as con:
        rows = read_frame(
            con,
            "SELECT policy_id, parent_policy_id IS NULL AS warm FROM policies "
            "WHERE system = 'dl2' ORDER BY created_at DESC",
        )
        # newest first: the first of each kind is kept
        ids: dict[bool, str] = {}
        for policy_id, warm in zip(rows["policy_id"], rows["warm"], strict=True):
            ids.setdefault(bool(warm), policy_id)
        return tuple(
            policy_from_checkpoint(load_registered(con, ids[k])) if k in ids else None
            for k in (True, False)
        )


def test_jct(test, sim, make) -> np.ndarray:
    """Average JCT of each test sequence x simulator seed (`SIM_SEEDS`) under `sim`, placed
    by load balancing; one policy from `make()` per sequence (Optimus keeps each job's
    fitted curve, so a sequence gets a fresh one)."""
    out = []
    for _, jobs in test:
        policy = make()
        for seed in SIM_SEEDS:
            run = Simulator(
                jobs,
                Scheduler(policy, PLACEMENTS.create("load-balancing")),
                replace(sim, seed=seed),
            )
            out.append(run.run().avg_jct_s)
    return np.array(out)


def main(argv: list[str]) -> int:
    """Fine-tune each run's warm-up again, test it beside the run's policies, print."""
    opts = parse(Options, argv)
    folder, seeds, changes = opts.dir, list(opts.seeds), dict(opts.set)
    torch.set_num_threads(1)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"DL2 fine-tuning from the warm-ups of the runs in {folder} (seeds {seeds}): {changes}")
    jct: dict[str, list[np.ndarray]] = {"tuned": [], "dl2": [], "warm-up": [], "events": []}
    for seed in seeds:
        warehouse = run_seed(seed, "default", folder)
        with connect(warehouse, read_only=True) as con:
            train = set_workloads(con, SET, "train")
            val = set_workloads(con, SET, "validation")
            test = as_workloads(set_workloads(con, SET, "test"))
        warm, dl2 = dl2_policies(warehouse)
        if warm is None or dl2 is None:
            raise SystemExit(f"{warehouse}: no DL2 warm-up and fine-tuned policy to start from")
        stage = DL2StageConfig(seed=seed)
        cfg = replace(stage.grouped_config(), **changes)
        start = time.perf_counter()
        tuned, _, m = finetune_grouped(
            train,
            val,
            cfg,
            init=warm,
            eval_seed=seed,
            progress=lambda i, n, s=seed: print(f"  run {s}: iteration {i}/{n}", end="\r"),
        )
        sim = replace(stage.sim, window=warm.cfg.window)
        for name, make in (
            ("tuned", lambda p=tuned: p),
            ("dl2", lambda p=dl2: p),
            ("warm-up", lambda p=warm: p),
            ("events", lambda: ALLOCATIONS.create("optimus-events")),
        ):
            jct[name].append(test_jct(test, sim, make))
        ratios = ", ".join(
            f"{k} {np.mean(v[-1] / jct['events'][-1]):.3f}" for k, v in jct.items() if k != "events"
        )
        print(
            f"  run {seed}: validation {m['init_val_avg_jct_s']:.0f} s -> best "
            f"{m['best_val_avg_jct_s']:.0f} s at iteration {m['best_update']} (last "
            f"{m['final_val_avg_jct_s']:.0f} s; {time.perf_counter() - start:.0f} s); test vs "
            f"Optimus at every event: {ratios}",
            flush=True,
        )
    pooled = {k: np.concatenate(v) for k, v in jct.items()}
    for a, b in (("tuned", "events"), ("dl2", "events"), ("warm-up", "events"), ("tuned", "dl2")):
        p = paired_ratio(pooled[a], pooled[b])
        print(
            f"{a} vs {b}: {p.ratio:.3f} [{p.low:.3f}, {p.high:.3f}] (n={p.n_pairs}, lower "
            f"on {p.wins})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
