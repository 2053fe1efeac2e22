"""The golden run: a committed 12-job workload on a 6-server cluster, every heuristic
(DL2's baselines and the preemptive ones).

And the engine's whole output (job results, event log, placements, as digests) over a grid
of its modes (`engine_digests`): whatever the engine keeps to make a decision cost only what
changed must leave every line of it as it was.

The digests hash floats exactly, and some of numpy's float64 kernels (power, expm1, log1p)
give other last bits where AVX-512 versions of them run: the digests are recorded per set of
kernels (`float_kernels`), and a machine whose kernels have none recorded skips the check.

Regenerate the expected values (after a deliberate change to the simulator or the
heuristics, and after checking the new numbers are plausible) with

    python -m tests.sim.golden            # writes tests/sim/data/golden_expected.json and
                                          # this machine's kernels' engine_digests.json
    python -m tests.sim.golden --workload # also re-draws golden_workload.csv

A deliberate change to the engine's output needs its digests recorded on every set of
kernels (or the other sets removed from the file).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import platform
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl

from models.heuristics import HEURISTICS, PREEMPTIVE_BASELINES, make_scheduler
from tests.sim.rules import Probe
from tracelib.sim import (
    Allocation,
    ClusterConfig,
    LoadBalancing,
    Scheduler,
    ServerGroup,
    SimConfig,
    SimResult,
    SimulationStalled,
    Snapshot,
    SpeedConfig,
    dl2_like_frame,
    jobs_from_frame,
)
from tracelib.sim.engine import simulate

DATA = Path(__file__).parent / "data"
WORKLOAD = DATA / "golden_workload.csv"
EXPECTED = DATA / "golden_expected.json"
ENGINE_EXPECTED = DATA / "engine_digests.json"

# Harmony's testbed size: small enough that the 12 jobs contend for it. Speed variation and
# epoch-estimate error on, so the golden values also pin the random streams.
CONFIG = SimConfig(
    cluster=ClusterConfig(n_servers=6),
    speed=SpeedConfig(speed_variation=0.1, epoch_error=0.1),
    seed=11,
)


GOLDEN = (*HEURISTICS, *PREEMPTIVE_BASELINES)
"""The heuristics the golden run pins."""


def golden_frame() -> pl.DataFrame:
    """A 12-job DL2-style workload, shortened (median 40 min) to keep the run small."""
    return dl2_like_frame(12, seed=2051, mean_duration_min=80.0, median_duration_min=40.0)


def run_all(workload: pl.DataFrame) -> dict[str, dict]:
    jobs = jobs_from_frame(workload)
    out = {}
    for name in GOLDEN:
        result = simulate(jobs, make_scheduler(name), CONFIG)
        out[name] = {
            "avg_jct_s": result.avg_jct_s,
            "finish_s": {str(r["job_id"]): r["finish_s"] for r in result.jobs.to_dicts()},
        }
    return out


def digest(result: SimResult) -> str:
    """A run's job results, event log (floats exactly) and placements, hashed."""
    h = hashlib.sha256(result.jobs.write_csv().encode())
    for e in result.events:
        h.update(
            f"{e.time_s.hex()} {e.kind} {e.job_id} {e.workers} {e.ps} {e.value.hex()}".encode()
        )
    h.update(result.placements.write_csv().encode())
    return h.hexdigest()[:20]


ENGINE_SCHEDULERS = ("fifo", "drf", "optimus-events", "tiresias-las", "alternating")
"""Filling, sharing, deciding at events, preempting, and leaving jobs out (`_alternating`)."""


def _alternating(snap: Snapshot) -> Allocation:
    """One worker and one PS for every visible job at even decisions, for the even job ids
    only at odd ones: the others lose their tasks by not being named, then resume."""
    named = [j.job_id for j in snap.jobs if snap.decision % 2 == 0 or j.job_id % 2 == 0]
    return Allocation.of(dict.fromkeys(named, (1, 1)))


def _scheduler(name: str) -> Scheduler:
    if name == "alternating":
        return Scheduler(Probe(_alternating, name=name), LoadBalancing())
    return make_scheduler(name)


HETERO = ClusterConfig.heterogeneous(
    ServerGroup(1, gpu_type="T4"), ServerGroup(1, gpu_type="V100M32"), ServerGroup(1)
)


def engine_workloads() -> dict[str, tuple[tuple, ClusterConfig]]:
    """Three 30-job workloads contending for three servers: as drawn; with arrivals rounded
    to the half hour and ids reversed; with GPU types and GPU shares on typed servers."""
    jobs = jobs_from_frame(dl2_like_frame(30, 1, mean_duration_min=80.0, median_duration_min=40.0))
    # Ids against the arrival order: ties broken by id, and the trace's own order is not
    # the order of arrival.
    tied = tuple(
        replace(j, job_id=len(jobs) - j.job_id, arrival_s=float(j.arrival_s // 1800 * 1800))
        for j in jobs
    )
    types = ("T4", "V100M32|T4", None)
    typed = tuple(
        replace(j, gpu_type=types[i % 3], gpu_share=0.5 if i % 4 == 0 else None)
        for i, j in enumerate(jobs)
    )
    plain = ClusterConfig(n_servers=3)
    return {"plain": (jobs, plain), "tied": (tied, plain), "typed": (typed, HETERO)}


def float_kernels() -> str:
    """Which float64 kernels numpy runs here for the functions whose last bits differ
    between its dispatch targets (power, expm1, log1p: the AVX-512 versions differ from the
    baseline ones, which the AVX2 machines also run), with the machine's architecture."""
    from numpy.lib.introspect import opt_func_info

    info = opt_func_info(func_name="^(power|expm1|log1p)$", signature="float64")
    targets = sorted(f"{name}:{t['current']}" for name, sigs in info.items() for t in sigs.values())
    return " ".join([platform.machine(), *targets])


def engine_digests() -> dict[str, str]:
    """`digest` of every scheduler of `ENGINE_SCHEDULERS` on every workload, with and
    without a window, with and without fixed placements, deciding every slot or at events;
    every noise source on."""
    out = {}
    base = SimConfig(
        speed=SpeedConfig(speed_variation=0.1, epoch_error=0.1, slot_noise=0.05), seed=3
    )
    modes = itertools.product((None, 5), (False, True), ("interval", "events"))
    for (window, fixed, trigger), (name, (jobs, cluster)) in itertools.product(
        list(modes), engine_workloads().items()
    ):
        cfg = replace(base, cluster=cluster, window=window, fixed_placement=fixed, trigger=trigger)
        for scheduler in ENGINE_SCHEDULERS:
            key = f"{name} window={window} fixed={fixed} {trigger} {scheduler}"
            try:
                out[key] = digest(simulate(jobs, _scheduler(scheduler), cfg))
            except SimulationStalled as stalled:  # where it stalls and why, pinned too
                out[key] = f"stalled: {stalled}"
    return out


def main(argv: list[str]) -> None:
    if "--workload" in argv or not WORKLOAD.exists():
        golden_frame().write_csv(WORKLOAD)
    expected = run_all(pl.read_csv(WORKLOAD))
    EXPECTED.write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    recorded = json.loads(ENGINE_EXPECTED.read_text()) if ENGINE_EXPECTED.exists() else {}
    recorded[float_kernels()] = engine_digests()
    ENGINE_EXPECTED.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    for name, v in expected.items():
        print(f"{name:17s} avg JCT {v['avg_jct_s'] / CONFIG.slot_s:6.2f} slots")


if __name__ == "__main__":
    main(sys.argv[1:])
