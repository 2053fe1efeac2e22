"""The golden run: a committed 12-job workload on a 6-server cluster, every heuristic
(DL2's baselines and the preemptive ones).

Regenerate the expected values (after a deliberate change to the simulator or the
heuristics, and after checking the new numbers are plausible) with

    python -m tests.sim.golden            # writes tests/sim/data/golden_expected.json
    python -m tests.sim.golden --workload # also re-draws golden_workload.csv
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

from models.heuristics import HEURISTICS, PREEMPTIVE_BASELINES, make_scheduler
from tracelib.sim import ClusterConfig, SimConfig, SpeedConfig, dl2_like_frame, jobs_from_frame
from tracelib.sim.engine import simulate

DATA = Path(__file__).parent / "data"
WORKLOAD = DATA / "golden_workload.csv"
EXPECTED = DATA / "golden_expected.json"

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


def main(argv: list[str]) -> None:
    if "--workload" in argv or not WORKLOAD.exists():
        golden_frame().write_csv(WORKLOAD)
    expected = run_all(pl.read_csv(WORKLOAD))
    EXPECTED.write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")
    for name, v in expected.items():
        print(f"{name:17s} avg JCT {v['avg_jct_s'] / CONFIG.slot_s:6.2f} slots")


if __name__ == "__main__":
    main(sys.argv[1:])
