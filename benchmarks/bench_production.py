"""Production traces at their real scale: a generated Philly-like trace and an Alibaba
2023-like pod list with its node list, each replayed whole under every default rule at the
cluster its sizing rule gives and at the what-if capacities.

    python -m benchmarks production [--jobs 100000] [--capacity 0.5,0.75,1,1.25]
                                    [--scheduler RULE ...] [--block day|week]
                                    [--learned FAMILY ...] [--learned-jobs N]
                                    [--figures DIR]

The Philly-like trace (`bench_replay.make_trace`: 90 days, recorded starts) is sized by
calibration to its observed queueing delay; the pod list (`alibaba_like`: 8,152 pods in
every phase, 1,213 GPU nodes of 7 types, shares of a GPU) runs on its node list. Printed
per trace: the sizing rule with its calibration error, the headline sentence, and per
capacity and rule the replay's seconds (target: at most 60 s each), average JCT, mean
queueing delay, and the ratio to the best heuristic with its block-bootstrap interval; for
the pod list also the GPU allocation rate and the pods waiting at the trace's end. The
replays run one after another in this process, so each rule's seconds are its own.

Then the learned families, as `schedlab replay SOURCE --scheduler FAMILY` runs them: a
`schedlab run --budget smoke` trains every system's policies on the synthetic set in the
benchmark's warehouse first (a few minutes), and each family's policy then runs over the
Philly-like trace (its first `--learned-jobs` jobs; default all) in the arena's simulator on
each capacity's GPUs, beside Optimus deciding at every event (the arena's best heuristic),
one after another. Printed per capacity and scheduler: its seconds (target for a learned
policy on 100,000 jobs: at most 300 s, scaled to the jobs replayed), average JCT and its
ratio to Optimus with the block-bootstrap interval; a family whose policy cannot run on
that cluster is printed with the reason.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.options import parse, parsed, repeated

TARGET_S = 60.0
"""Most seconds one rule's replay of the whole trace may take (at any capacity)."""
LEARNED_TARGET_S = 300.0
"""Most seconds a learned policy's replay of 100,000 jobs may take."""


def _capacities(text: str) -> tuple[float, ...]:
    import argparse

    try:
        values = tuple(float(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers, e.g. 0.5,1") from None
    if not values or not all(v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: capacities must be positive")
    return values


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks production`'s options (see the module docstring)."""

    jobs: int = 100_000
    """jobs of the generated Philly-like trace"""
    capacity: tuple[float, ...] = parsed((0.5, 0.75, 1.0, 1.25), _capacities)
    """what-if capacities, relative to the sized cluster (comma-separated)"""
    scheduler: tuple[str, ...] = repeated(str)
    """replay rule (repeat for several; default: `schedlab replay`'s default rules)"""
    block: str = "day"
    """block of the bootstrap intervals: day or week"""
    learned: tuple[str, ...] = repeated(str)
    """learned family replayed over the Philly-like trace (repeat for several; default
    every family; `none`: no learned replay and no training run)"""
    learned_jobs: int | None = None
    """replay the learned families over the trace's first N jobs (default: all)"""
    figures: Path | None = None
    """folder for the Philly-like trace's what-if plots (PNG): the rules', and the learned
    families' beside Optimus"""

    def __post_init__(self) -> None:
        if self.jobs < 100:
            raise ValueError("--jobs must be at least 100")
        if self.block not in ("day", "week"):
            raise ValueError(f"--block {self.block!r}: choose day or week")
        from pipelines.replay_learned import FAMILIES

        unknown = [f for f in self.learned if f not in (*FAMILIES, "none")]
        if unknown:
            raise ValueError(f"--learned {unknown}: choose from {', '.join(FAMILIES)} or none")
        if self.learned_jobs is not None and self.learned_jobs < 1:
            raise ValueError("--learned-jobs must be at least 1")

    def families(self) -> tuple[str, ...]:
        """The learned families to replay (none for `--learned none`)."""
        from pipelines.replay_learned import FAMILIES

        if "none" in self.learned:
            return ()
        return self.learned or tuple(FAMILIES)


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it waited for (the training run)."""
    return sum(
        u.ru_utime + u.ru_stime
        for u in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def _print_outcome(label: str, outcome, wall: float, cpu: float) -> None:
    from pipelines.replay import at_end_text

    print(f"\n== {label}")
    print(outcome.headline)
    print(f"replayed: {outcome.replayed}")
    print(f"sizing: {outcome.sizing.statement}")
    if outcome.sizing.calibration_error is not None:
        print(f"calibration error: {outcome.sizing.calibration_error:+.1%}")
    for run in outcome.capacities:
        c = run.cluster
        print(f"capacity {run.factor:g}: {c.n_servers:,} servers, {c.total_gpus:,.0f} GPUs")
        for row in run.summary.iter_rows(named=True):
            name, seconds = row["scheduler"], run.seconds[row["scheduler"]]
            verdict = "met" if seconds <= TARGET_S else "MISSED"
            ratio = row["ratio_to_best_heuristic"]
            interval = (
                f"[{row['ratio_ci_low']:.3f}, {row['ratio_ci_high']:.3f}]"
                if row["ratio_ci_low"] is not None
                else ""
            )
            end = run.at_end[name]
            pods = f"  {at_end_text(end)}" if outcome.shape else ""
            print(
                f"  {name:16} {seconds:6.1f} s (<= {TARGET_S:.0f} s: {verdict})  avg JCT "
                f"{row['avg_jct_s'] / 3600:9.2f} h  queueing {run.queueing_s[name] / 3600:9.2f} h"
                f"  / {row['best_heuristic']} "
                + (f"{ratio:.3f} {interval}" if ratio is not None else "n/a")
                + pods
            )
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s")


def main(argv: list[str]) -> int:
    """Generate both traces, ingest, replay at every capacity; print beside the target."""
    args = parse(Options, argv)
    from benchmarks import alibaba_like
    from benchmarks.bench_replay import MAPPING, make_trace
    from pipelines.replay import DEFAULT_RULES, ReplayConfig, replay_stage
    from pipelines.stages import ingest_stage

    rules = args.scheduler or DEFAULT_RULES
    missed = 0
    with tempfile.TemporaryDirectory(prefix="bench-production-") as tmp:
        folder = Path(tmp)
        warehouse = folder / "wh.duckdb"
        csv, mapping = folder / "philly-like.csv", folder / "philly-like.toml"
        make_trace(csv, args.jobs)
        mapping.write_text(MAPPING)
        pods, nodes = alibaba_like.write(folder / "alibaba")
        philly = ingest_stage(warehouse, str(csv), "generic", mapping=str(mapping))
        alibaba = ingest_stage(warehouse, str(pods), "generic", mapping="alibaba-gpu-2023")
        philly_clusters: list = []
        for label, cfg in (
            (
                f"Philly-like, {args.jobs:,} jobs",
                ReplayConfig(philly.source_id, schedulers=rules, capacity=args.capacity),
            ),
            (
                "Alibaba 2023-like pod list on its node list",
                ReplayConfig(
                    alibaba.source_id, schedulers=rules, capacity=args.capacity, nodes=str(nodes)
                ),
            ),
        ):
            cfg = replace(cfg, workers=1, runner="sequential", block=args.block)
            wall, cpu = time.perf_counter(), _cpu_s()
            outcome = replay_stage(warehouse, cfg)
            _print_outcome(label, outcome, time.perf_counter() - wall, _cpu_s() - cpu)
            missed += sum(s > TARGET_S for run in outcome.capacities for s in run.seconds.values())
            if label.startswith("Philly"):
                philly_clusters = [(run.factor, run.cluster) for run in outcome.capacities]
                if args.figures is not None and len(outcome.capacities) > 1:
                    from pipelines.replay import capacity_frame

                    frame = capacity_frame(outcome.capacities)
                    _figure(args.figures / "production-what-if-rules.png", frame, "rules")
        if args.families():
            missed += _learned(args, folder, warehouse, philly.source_id, philly_clusters)
    print(f"\nreplays over their target: {missed} (target 0)")
    return 0


def _learned(args: Options, folder: Path, warehouse: Path, source_id: str, clusters) -> int:
    """Train at the smoke budget, replay each family over the trace at each (capacity,
    replay cluster) of `clusters`; the learned replays over their target."""
    import subprocess

    from pipelines.progress import Reporter
    from pipelines.replay import ReplayInputError
    from pipelines.replay_learned import LearnedReplayConfig, learned_replay_stage
    from warehouse import connect, read_frame

    print("\n== Learned families on the Philly-like trace")
    wall, cpu = time.perf_counter(), _cpu_s()
    command = [sys.executable, "-m", "pipelines.cli", "run", "--budget", "smoke", "--quiet"]
    trained = subprocess.run(
        [*command, "--warehouse", str(warehouse)], cwd=folder, capture_output=True, text=True
    )
    print(
        f"training: schedlab run --budget smoke, exit {trained.returncode}, "
        f"{time.perf_counter() - wall:.0f} s wall, {_cpu_s() - cpu:.0f} s CPU"
    )
    if trained.returncode != 0:
        print(trained.stdout[-2000:] + trained.stderr[-2000:])
        return len(args.families())
    window = None
    if args.learned_jobs is not None:
        with connect(warehouse, read_only=True) as con:
            submits = read_frame(
                con,
                "SELECT submit_time FROM jobs WHERE source_id = ? ORDER BY submit_time",
                [source_id],
            )["submit_time"]
        if args.learned_jobs < submits.len():
            window = (submits[0], submits[args.learned_jobs])
    missed = 0
    outcomes = []
    for factor, cluster in clusters:
        cfg = LearnedReplayConfig(
            source_id,
            args.families(),
            gpus=cluster.total_gpus,
            servers=cluster,
            baselines=("optimus-events",),
            block=args.block,
            window=window,
            skip_refused=True,
            capacity=factor,
        )
        print(f"capacity {factor:g}:")
        wall, cpu = time.perf_counter(), _cpu_s()
        try:
            outcome = learned_replay_stage(warehouse, cfg, Reporter("lines"))
        except ReplayInputError as exc:
            print(f"not replayed: {exc}")
            missed += len(args.families())
            continue
        outcomes.append((factor, outcome))
        print(outcome.headline)
        print(f"wall {time.perf_counter() - wall:.1f} s, CPU {_cpu_s() - cpu:.1f} s")
        for family, why in outcome.refused.items():
            print(f"  {family:16} not replayed: {why}")
        for row in outcome.summary.iter_rows(named=True):
            name = row["scheduler"]
            seconds = outcome.scheduler_seconds[name]
            # The target is a learned policy's, for 100,000 jobs: scaled to the jobs replayed.
            target = LEARNED_TARGET_S * row["n_jobs"] / 100_000
            verdict = "met" if seconds <= target else "MISSED"
            if row["family"] == "heuristic":
                timing = f"{seconds:7.1f} s (the baseline)"
            else:
                missed += seconds > target
                timing = f"{seconds:7.1f} s (<= {target:.1f} s: {verdict})"
            print(
                f"  {name:16} {timing}  avg JCT "
                f"{row['avg_jct_s'] / 3600:8.2f} h  / optimus-events "
                f"{row['ratio_to_best_heuristic']:.3f} "
                f"[{row['ratio_ci_low']:.3f}, {row['ratio_ci_high']:.3f}]"
            )
    if args.figures is not None and len(outcomes) > 1:
        from pipelines.replay_learned import arena_capacity_frame

        frame = arena_capacity_frame(outcomes)
        _figure(args.figures / "production-what-if-learned.png", frame, "learned families")
    return missed


def _figure(path: Path, frame, what: str) -> None:
    """Draw a what-if plot (`capacity_figure`) of `frame` to `path` and say where."""
    from pipelines.replay import capacity_figure

    path.parent.mkdir(parents=True, exist_ok=True)
    title = f"Philly-like trace, {what}: capacity what-if"
    capacity_figure(frame, title).savefig(path, format="png", metadata={"Software": None})
    print(f"figure: {path}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
