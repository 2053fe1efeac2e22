"""How much an allocation policy can gain over Optimus at every event on `dl2-synthetic`,
and where that gain lies (the measurements that say why DL2's target is missed).

    python -m benchmarks dl2_headroom
    python -m benchmarks.bench_dl2_headroom [--dir DIR] [--seeds 0,1,2,3,4] [--servers N]

On the scoreboard's default runs (`benchmarks/bench_scoreboard.py`, DIR default
./var/scoreboard-default; missing runs are made, finished ones reused), each run's
`dl2-synthetic` test sequences x 3 simulator seeds (1000-1002), the DL2 stage's simulator
(deciding at every arrival and completion, load-balancing placement), paired against
Optimus at every event (the arena's best non-oracle heuristic), n = 30 with five runs.
`--servers N` runs every policy on a cluster of N servers instead of the stage's 96 (the
policies as trained; with fewer servers the cluster runs out of room and the order across
jobs, and each job's share of it, start to matter):

- optimus-oracle at every event: Optimus' greedy on each job's true isolated speed
  (`Snapshot.oracle`), not on the curve it fits: what knowing each job's speed is worth;
- Optimus with short jobs first / long jobs first: the same curves and the same stopping
  rule (a task is added while the job's estimated remaining time falls), the additions
  across jobs taken in another order (each job's gains divided by, or multiplied by, its
  estimated remaining time at one worker and one PS). Identical JCTs mean the cluster never
  ran out of room before every job had what its curve asks: the order across jobs, what an
  allocator trades when capacity binds, never mattered;
- per model, the workers and PSs each policy gives a job most often, with the measured
  speed there (`tracelib.sim.measured`, isolated), and the share of jobs whose Optimus
  curve was ever fitted on the job's own observations (it needs `min_points` distinct
  configurations; before, the catalogue's prior scaled to the job), beside the fastest
  configuration of the model's measured surface;
- the run's searched teacher (`models/dl2/search.py`, rebuilt from the run's
  `dl2_teacher_configs`; runs whose DL2 imitated a heuristic have none): what DL2's warm-up
  imitates, alone;
- the run's DL2 (the fine-tuned policy of system dl2), for its configurations beside them.

The figures in docs/dl2.md ("Headroom", "Results") come from this command.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.bench_dl2_finetune import dl2_policies, test_jct
from benchmarks.bench_scoreboard import run_seed
from benchmarks.options import parse
from models.dl2.recorder import as_workloads
from models.dl2.search import ConfigTable, table_of
from models.dl2.stage_config import DL2StageConfig
from models.heuristics.common import remaining_epochs
from models.heuristics.optimus import Optimus, OptimusOracle, SpeedFn
from pipelines.systems.dl2.stages import newest_teacher_configs
from pipelines.trained import set_workloads
from tracelib.sim.measured import load_measured_speeds
from tracelib.sim.policy import WatchedAllocation
from tracelib.sim.snapshot import JobView, Snapshot
from tracelib.stats import paired_ratio
from warehouse import connect

SET = "dl2-synthetic"
CAP = 16
"""Most workers (and PSs) a job of the catalogue may have."""


@dataclass(frozen=True)
class Reordered(Optimus):
    """Optimus whose gains across jobs are reweighted by the job's estimated remaining time
    at one worker and one PS, to the power `power` (speed scaled by a per-job constant: the
    gains' signs, so each job's stopping point, are unchanged; only the order differs)."""

    power: float = 1.0

    def speed_model(self, snap: Snapshot, job: JobView) -> SpeedFn:
        speed = super().speed_model(snap, job)
        at_one = speed(1, 1)
        if at_one <= 0:
            return speed
        work = remaining_epochs(job) * snap.job_types[job.model].iters_per_epoch
        scale = (work / at_one) ** self.power
        return lambda w, p: speed(w, p) * scale


def _runs(test, sim, make, configs, refits=None) -> np.ndarray:
    """`test_jct` of the policies `make` gives, each watched into `configs`; with `refits`,
    the number of configurations each job was observed at (Optimus' merged history)."""
    made = []

    def watched():
        made.append(make())
        return WatchedAllocation(made[-1], configs)

    out = test_jct(test, sim, watched)
    if refits is not None:
        for inner in made:
            refits.extend(inner.merged.configurations().values())
    return out


def searched_teacher(warehouse: Path) -> ConfigTable | None:
    """The searched teacher of the recording the run's newest DL2 warm-up imitated, deciding
    at every event (None when that recording's teacher was a heuristic)."""
    with connect(warehouse, read_only=True) as con:
        rows = newest_teacher_configs(con)
    if rows.height == 0:
        return None
    return ConfigTable(table_of(rows.to_dicts()), trigger="events")


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_dl2_headroom`'s options (see the module docstring)."""

    dir: Path = Path("var/scoreboard-default")
    """the scoreboard's folder of default runs"""
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    """the runs' seeds (comma-separated)"""
    servers: int | None = None
    """servers of the cluster every policy runs on (default: the stage's)"""


def main(argv: list[str]) -> int:
    """Run every policy on each run's test sequences and print where the gain lies."""
    opts = parse(Options, argv)
    folder, seeds, servers = opts.dir, list(opts.seeds), opts.servers
    torch.set_num_threads(1)
    folder.mkdir(parents=True, exist_ok=True)
    where = f", {servers} servers" if servers else ""
    print(f"DL2 headroom on the default runs in {folder} (seeds {seeds}{where})")
    policies = {
        "optimus-events": lambda: Optimus(name="optimus-events", trigger="events"),
        "optimus-oracle-events": lambda: OptimusOracle(trigger="events"),
        "short-jobs-first": lambda: Reordered(name="short", trigger="events", power=1.0),
        "long-jobs-first": lambda: Reordered(name="long", trigger="events", power=-1.0),
    }
    jct: dict[str, list[np.ndarray]] = defaultdict(list)
    configs: dict[str, dict[str, Counter]] = defaultdict(dict)
    observed: list[int] = []
    min_points = Optimus().min_points
    for seed in seeds:
        warehouse = run_seed(seed, "default", folder)
        with connect(warehouse, read_only=True) as con:
            test = as_workloads(set_workloads(con, SET, "test"))
        dl2 = dl2_policies(warehouse)[1]
        sim = replace(DL2StageConfig(seed=seed).sim, window=dl2.cfg.window if dl2 else 20)
        if servers:
            sim = replace(sim, cluster=replace(sim.cluster, n_servers=servers))
        for name, make in policies.items():
            refits = observed if name == "optimus-events" else None
            jct[name].append(_runs(test, sim, make, configs[name], refits))
        teacher = searched_teacher(warehouse)
        if teacher is not None:
            jct["searched-teacher"].append(
                _runs(test, sim, lambda t=teacher: t, configs["searched-teacher"])
            )
        if dl2 is not None:
            jct["dl2"].append(_runs(test, sim, lambda dl2=dl2: dl2, configs["dl2"]))
        ratios = {k: float(np.mean(v[-1] / jct["optimus-events"][-1])) for k, v in jct.items()}
        print(f"  run {seed}: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()), flush=True)
    events = np.concatenate(jct["optimus-events"])
    print("paired ratio of average JCT to Optimus at every event [95%]:")
    for name, runs in jct.items():
        if name == "optimus-events":
            continue
        p = paired_ratio(np.concatenate(runs), events)
        same = np.array_equal(np.concatenate(runs), events)
        print(
            f"  {name}: {p.ratio:.3f} [{p.low:.3f}, {p.high:.3f}] (n={p.n_pairs}, lower on "
            f"{p.wins})" + (" - identical to the last bit" if same else "")
        )
    seen = np.array(observed)
    print(
        f"jobs whose Optimus curve was fitted on their own observations (>= {min_points} "
        f"configurations): {np.sum(seen >= min_points)} of {len(seen)}; configurations "
        f"observed per job: median {np.median(seen):.0f}, max {seen.max()}"
    )
    shown = [
        k
        for k in ("optimus-events", "optimus-oracle-events", "searched-teacher", "dl2")
        if configs.get(k)
    ]
    print(
        "per model, each policy's most frequent workers + PSs per job and decision (its "
        "share of decisions) and the measured speed there, mini-batches/s: "
        + " | ".join(shown)
        + f" || the surface's fastest with at most {CAP} of each"
    )
    measured = load_measured_speeds()
    for model in sorted(configs["optimus-events"]):
        cells = []
        for name in shown:
            counts = configs[name].get(model)
            if not counts:
                cells.append("-")
                continue
            (w, p), n = counts.most_common(1)[0]
            speed = measured.table(model, cap=max(w, p, 1))[w, p]
            cells.append(f"{w:2d} + {p:2d} ({n / counts.total():4.0%}) {speed:7.1f}")
        table = measured.table(model, cap=CAP)
        w, p = np.unravel_index(int(table.argmax()), table.shape)
        print(f"  {model:14s} " + " | ".join(cells) + f" || best {w} + {p} {table[w, p]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
