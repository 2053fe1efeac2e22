"""DL2 scheduling latency: one decision (a whole slot's inferences) for 40 concurrent jobs.

    python -m benchmarks dl2

A DL2 policy network (J = 40; the run's default head, one network of two hidden layers of
64 shared by the job rows, and the paper's flat network of two hidden layers of 256, each
timed) is warmed up briefly on DRF's decisions, so it allocates like DRF (worker+PS pairs
until the cluster is full) rather than stopping at once as an untrained network might. It
then decides the snapshots of a DL2 large-setting run (200 jobs, up to 10 arrivals per
slot) in which 40 jobs are visible, greedy, through `DL2Policy.allocate` (encode, mask,
infer, step, repeat). Two cluster sizes:
64 servers (128 GPUs) and the DL2 large setting's 500 servers (1000 GPUs, up to 16 workers
and 16 PSs per job: hundreds of inferences per decision).

Target (issue: DL2): under 5 ms per decision (DL2 section 6.1 reports under 3 ms).

`python -m benchmarks.bench_dl2 experiment [seeds]` runs the whole DL2 pipeline in our small
DL2-like setting (32 servers, J = 20, 60-job workloads: 16 training, 4 validation, 8 test):
DRF decision logs, supervised warm-up, RL fine-tuning, OfflineRL and the three Table 2
ablations (each with `seeds` RL seeds), then every policy and the heuristic baselines on the
held-out test workloads. About 2 minutes per RL run here.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from benchmarks.options import parse, positional
from models.dl2.config import DL2NetConfig, RecorderConfig, WarmupConfig, dl2_sim
from models.dl2.policy import DL2Policy
from models.dl2.recorder import record_decisions
from models.dl2.warmup import warmup
from models.heuristics import make_scheduler
from tracelib.sim import (
    SimConfig,
    SimulationStalled,
    Simulator,
    dl2_like_frame,
    jobs_from_frame,
)
from tracelib.stats import paired_ratio

WINDOW = 40
TARGET_MS = 5.0
"""Target: one decision (a slot's inferences, 40 jobs) at most 5 ms at 500 servers."""


HEADS = {"rows": (64, 64), "flat": (256, 256)}
"""The heads timed and their hidden layers: the run's default (`DL2StageConfig`), the paper's."""


def _warm_policy(traces, head: str) -> tuple[DL2Policy, dict]:
    # No stop smoothing: DRF never stops while a pair fits, and neither should the policy
    # timed (a full cluster's worth of inferences, the slowest decision; with smoothing the
    # rows head learns in 6 epochs to stop after about 140).
    cfg = WarmupConfig(
        head=head,
        hidden=HEADS[head],
        max_epochs=6,
        patience=6,
        max_wall_s=20.0,
        stop_smoothing=0.0,
    )
    policy, metrics, _ = warmup(traces, cfg)
    return policy, metrics


def _drf_traces():
    jobs = {
        f"w{s}": jobs_from_frame(dl2_like_frame(120, s, max_arrivals_per_slot=10)) for s in (0, 1)
    }
    net = DL2NetConfig(window=WINDOW)
    return record_decisions(jobs, "drf", RecorderConfig(net=net, sim=dl2_sim(64, WINDOW)))


def _snapshots(n_servers: int, count: int = 30):
    """Snapshots of a DRF run (DL2 large arrivals) with WINDOW visible jobs."""
    jobs = jobs_from_frame(dl2_like_frame(200, 7, max_arrivals_per_slot=10))
    drf = make_scheduler("drf")
    session = Simulator(jobs, drf, dl2_sim(n_servers, WINDOW)).session()
    out = []
    while not session.done and len(out) < count:
        snap = session.snapshot
        if len(snap.jobs) == WINDOW:
            out.append(snap)
        session.submit(*drf.decide(snap, session.rng))
    return out


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_dl2`'s options (see the module docstring)."""

    command: Literal["latency", "experiment", "generality"] = positional("latency")
    """latency (the default), the end-to-end experiment, or section 6.4's generality"""
    count: int | None = positional(None)
    """experiment: RL seeds (default 1); generality: updates (default 1500)"""
    out: str | None = positional(None)
    """experiment and generality: folder for their outputs"""


def main(argv: list[str]) -> int:
    """The command `argv` names (see the module docstring)."""
    opts = parse(Options, argv)
    if opts.command == "experiment":
        experiment(1 if opts.count is None else opts.count, opts.out)
    elif opts.command == "generality":
        generality(1500 if opts.count is None else opts.count, opts.out)
    else:
        latency()
    return 0


def latency() -> None:
    """Print the decision latency of a warm DL2 policy with 40 concurrent jobs."""
    torch.set_num_threads(1)
    traces = _drf_traces()
    snapshots = {n_servers: _snapshots(n_servers) for n_servers in (64, 500)}
    for head in HEADS:
        start = time.perf_counter()
        policy, metrics = _warm_policy(traces, head)
        print(
            f"{head} head {HEADS[head]}: warm-up for the benchmark: {metrics['epochs']} epochs, "
            f"imitation accuracy {metrics['imitation_accuracy']:.3f}, "
            f"{time.perf_counter() - start:.0f} s"
        )
        _time(policy, head, snapshots)


def _time(policy: DL2Policy, head: str, snapshots: dict) -> None:
    for n_servers, snaps in snapshots.items():
        for snap in snaps[:3]:  # warm caches
            policy.allocate(snap)
        times, cpus, steps = [], [], []
        for snap in snaps:
            t, cpu = time.perf_counter(), time.process_time()
            policy.allocate(snap)
            times.append(time.perf_counter() - t)
            cpus.append(time.process_time() - cpu)
            steps.append(policy.inferences)
        ms = np.array(times) * 1e3
        per = float(np.sum(times) / np.sum(steps) * 1e6)
        verdict = "met" if np.median(ms) <= TARGET_MS else "MISSED"
        print(
            f"  {head}: {n_servers} servers, {WINDOW} jobs: {len(snaps)} decisions, median "
            f"{np.median(ms):.2f} ms, p95 {np.percentile(ms, 95):.2f} ms, max {ms.max():.2f} ms "
            f"per decision ({np.mean(steps):.0f} inferences, {per:.0f} us each; CPU time "
            f"median {np.median(cpus) * 1e3:.2f} ms) (target <= {TARGET_MS:g} ms median: {verdict})"
        )


# -- the end-to-end experiment ------------------------------------------------------------


def experiment(seeds: int = 1, out: str | None = None) -> None:
    """DL2 against its baselines and ablations on held-out workloads (prints a table)."""
    import json
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from models.dl2.config import FinetuneConfig
    from models.dl2.finetune import finetune
    from models.dl2.policy import run_workloads
    from models.heuristics import ALLOCATIONS

    torch.set_num_threads(1)
    folder = Path(out or tempfile.mkdtemp(prefix="bench-dl2-"))
    folder.mkdir(parents=True, exist_ok=True)
    sim = dl2_sim(32, 20)
    net = DL2NetConfig(window=20)

    def workloads(first: int, n: int) -> dict[str, tuple]:
        return {
            f"dl2like-{s}": jobs_from_frame(dl2_like_frame(60, s)) for s in range(first, first + n)
        }

    train, val, test = workloads(0, 16), workloads(1000, 4), workloads(2000, 8)
    val_jobs, test_jobs = list(val.values()), list(test.values())
    slots = sim.slot_s

    def test_jct(policy) -> list[float]:
        """Average JCT (slots) on each held-out workload; inf where the policy stalls."""
        try:
            return [r.avg_jct_s / slots for r in run_workloads(policy, test_jobs, sim, seed=2)]
        except SimulationStalled:
            return [float("inf")] * len(test_jobs)

    t = time.perf_counter()
    rec = RecorderConfig(net=net, sim=sim)
    traces = record_decisions(train, "drf", rec)
    val_traces = record_decisions(val, "drf", replace(rec, seed=1))
    print(
        f"decision logs: {traces.height:,} training / {val_traces.height:,} validation "
        f"steps (DRF), {time.perf_counter() - t:.1f} s"
    )
    t = time.perf_counter()
    warm, wm, _ = warmup(
        traces, WarmupConfig(), val_traces=val_traces, val_workloads=val_jobs, sim=sim, eval_seed=1
    )
    warm.save(folder / "warm.pt")
    print(
        f"warm-up: {wm['epochs']} epochs, {time.perf_counter() - t:.0f} s; imitation accuracy "
        f"{wm['imitation_accuracy']:.4f} (validation decisions); validation JCT "
        f"{wm['val_avg_jct_s'] / slots:.2f} slots vs DRF {wm['teacher_avg_jct_s'] / slots:.2f} "
        f"({wm['jct_vs_teacher']:+.1%})"
    )
    # name -> one list of per-workload JCTs per training seed (one for the heuristics)
    table: dict[str, list[list[float]]] = {}
    for name in ("drf", "fifo", "srtf", "tetris", "optimus", "optimus-oracle"):
        table[name] = [test_jct(ALLOCATIONS.create(name))]
    table["dl2-warm-up"] = [test_jct(warm)]
    variants = {
        "dl2": ({}, warm),
        "offline-rl": ({"offline": True}, None),
        "dl2 w/o actor-critic": ({"value_net": False}, warm),
        "dl2 w/o exploration": ({"exploration": False}, warm),
        "dl2 w/o replay": ({"replay": False}, warm),
    }
    for name, (switches, init) in variants.items():
        for seed in range(seeds):
            cfg = FinetuneConfig(net=net, sim=sim, seed=seed, progress=False, **switches)
            t = time.perf_counter()
            policy, curve, m = finetune(train, val, cfg, init=init, eval_seed=1)
            per_workload = test_jct(policy)
            jct = float(np.mean(per_workload))
            table.setdefault(name, []).append(per_workload)
            stem = name.replace(" w/o ", "-without-").replace(" ", "-")
            policy.save(folder / f"{stem}-{seed}.pt")
            curve.write_parquet(folder / f"{stem}-{seed}.curve.parquet")
            first, best = m["init_val_avg_jct_s"] / slots, m["best_val_avg_jct_s"] / slots
            print(
                f"{name} seed {seed}: {m['updates']} updates, {m['episodes']} episodes, "
                f"{time.perf_counter() - t:.0f} s; validation JCT {first:.2f} -> best "
                f"{best:.2f} slots (update {m['best_update']}); test {jct:.2f} slots"
            )
    n_seeds = len(table["dl2"])
    print(
        f"\ntest workloads ({len(test_jobs)} x 60 jobs, 32 servers), {n_seeds} RL seed(s); "
        "average JCT in slots (mean over seeds x workloads) and DL2's paired JCT ratio to "
        "each (DL2 seed s on workload w / the scheduler on w; heuristics are one run):"
    )
    dl2_pairs = np.array(table["dl2"]).ravel()
    for name, runs in table.items():
        values = np.array(runs)
        mean = float(values.mean())
        # Heuristics ran once: pair each DL2 seed's workload w with the same run on w.
        other = np.array(runs if len(runs) == n_seeds else runs * n_seeds).ravel()
        ratio = paired_ratio(dl2_pairs, other)
        print(f"{name:24} {mean:7.2f}   DL2 / it: {ratio}")
    print(
        "(paper, as 1 - JCT(DL2)/JCT(X): DRF +44.1%, Optimus +17.5%, OfflineRL +37.9%; "
        "ablations: DL2 is 21.1%, 28.8%, 39.6% better)"
    )
    (folder / "table.json").write_text(json.dumps(table, indent=1))
    print(f"checkpoints and curves in {folder}")


# -- generality (DL2 section 6.4) ------------------------------------------------------------


def generality(updates: int = 1500, out: str | None = None) -> None:
    """DL2 section 6.4 in the small setting: speed variation (Fig. 13), epoch-estimate error
    (Fig. 14), job types unseen until mid-training (Fig. 15) and the window J (Fig. 17).
    Every RL run fine-tunes `updates` updates from a DRF warm-up; JCT in slots on held-out
    test workloads, each scheduler in the same simulator as the policy was trained in."""
    import tempfile
    from dataclasses import replace
    from pathlib import Path

    from models.dl2.config import FinetuneConfig
    from models.dl2.finetune import finetune
    from models.dl2.policy import average_jct
    from models.heuristics import ALLOCATIONS
    from tracelib.catalogue import DL2_CATALOGUE

    torch.set_num_threads(1)
    folder = Path(out or tempfile.mkdtemp(prefix="bench-dl2-generality-"))
    folder.mkdir(parents=True, exist_ok=True)
    base = dl2_sim(32, 20)

    def workloads(first: int, n: int, catalogue=DL2_CATALOGUE) -> list[tuple]:
        return [
            jobs_from_frame(dl2_like_frame(60, s, catalogue=catalogue))
            for s in range(first, first + n)
        ]

    train, val, test = workloads(0, 16), workloads(1000, 4), workloads(2000, 8)

    def jct(policy, sim) -> float:
        try:
            return average_jct(policy, test, sim, seed=2) / sim.slot_s
        except SimulationStalled:
            return float("inf")

    def warm_up(window: int, train_set, sim) -> DL2Policy:
        net = DL2NetConfig(window=window)
        rec = RecorderConfig(net=net, sim=sim)
        traces = record_decisions(dict(enumerate(train_set)), "drf", rec)
        val_traces = record_decisions(dict(enumerate(val)), "drf", replace(rec, seed=1))
        policy, _, _ = warmup(traces, WarmupConfig(max_epochs=60), val_traces=val_traces)
        return policy

    def tune(init: DL2Policy, sim, train_set=train, n: int = updates) -> DL2Policy:
        cfg = FinetuneConfig(
            net=init.cfg, sim=sim, max_updates=n, val_every=max(1, n // 4), progress=False
        )
        policy, _, _ = finetune(train_set, val, cfg, init=init, eval_seed=1)
        return policy

    t0 = time.perf_counter()
    warm = warm_up(20, train, base)
    print(f"DRF warm-up (J = 20): {time.perf_counter() - t0:.0f} s")

    def against_drf(**speed: float) -> tuple[SimConfig, float, float]:
        """The base simulator with these speed settings, DL2's average JCT (the warm
        policy tuned under it) and DRF's."""
        sim = replace(base, speed=replace(base.speed, **speed))
        return sim, jct(tune(warm, sim), sim), jct(ALLOCATIONS.create("drf"), sim)

    print("\nFig. 13, training speed variation: average JCT (slots)")
    print(f"{'variation':>10} {'DL2':>7} {'DRF':>7} {'Optimus':>8}  DL2 vs DRF, vs Optimus")
    for variation in (0.0, 0.2, 0.4):
        sim, dl2, drf = against_drf(speed_variation=variation)
        opt = jct(ALLOCATIONS.create("optimus"), sim)
        print(
            f"{variation:>10.0%} {dl2:7.2f} {drf:7.2f} {opt:8.2f}  "
            f"{1 - dl2 / drf:+.1%}, {1 - dl2 / opt:+.1%}"
        )

    print("\nFig. 14, epoch-estimate error: average JCT (slots)")
    print(f"{'error':>10} {'DL2':>7} {'DRF':>7}  DL2 vs DRF")
    for error in (0.0, 0.1, 0.2):
        _, dl2, drf = against_drf(epoch_error=error)
        print(f"{error:>10.0%} {dl2:7.2f} {drf:7.2f}  {1 - dl2 / drf:+.1%}")

    print("\nFig. 15, unseen job types: validation on all 8 types, average JCT (slots)")
    old_types = DL2_CATALOGUE[:6]
    seen = warm_up(20, workloads(0, 16, old_types), base)
    phases = [
        ("6 types (warm-up + RL)", workloads(0, 16, old_types)),
        ("+ type 7 at 1/3", workloads(0, 16, DL2_CATALOGUE[:7])),
        ("+ type 8 at 2/3", train),
    ]
    policy = seen
    print(f"  {'after warm-up on 6 types':28} {jct(policy, base):7.2f}")
    for label, train_set in phases:
        policy = tune(policy, base, train_set, n=max(1, updates // 3))
        print(f"  {label:28} {jct(policy, base):7.2f}")
    ideal = tune(warm, base)
    print(f"  {'ideal (8 types from start)':28} {jct(ideal, base):7.2f}")
    print(f"  {'DRF':28} {jct(ALLOCATIONS.create('drf'), base):7.2f}")

    print("\nFig. 17, window J (up to ~40 concurrent jobs; beyond J, batches of J)")
    wide = replace(base, window=None)
    print(f"  {'DRF (sees every job)':28} {jct(ALLOCATIONS.create('drf'), wide):7.2f}")
    for window in (5, 10, 20, 40):
        sim_j = replace(base, window=window)
        init = warm if window == 20 else warm_up(window, train, sim_j)
        policy = tune(init, sim_j)
        print(f"  {'DL2 J = ' + str(window):28} {jct(policy, wide):7.2f}")
    print(f"\n{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
