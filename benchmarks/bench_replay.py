"""Whole-trace replay speed: a 100,000-job production-like trace under each replay rule.

A generated trace (Philly-like shapes: 90 days of bursty arrivals, log-normal run times with
a median of 20 minutes, 1-GPU jobs the majority and a tail up to 64 GPUs, 300 users) is
ingested through the generic mapping into a fresh warehouse, then `replay_stage` replays it
under FIFO, SRTF, DRF and Tetris (and SJF) on the cluster sized from the trace (its rule:
docs/traces.md), writing the evaluation rows. Printed: seconds per rule beside the target
(at most 60 s each; the anchor is Alibaba's PAI simulator, 51-111 s per policy for 20,000
jobs on 6,500 GPUs), average JCT and utilization. Also at a cluster of half that size.

    python -m benchmarks.bench_replay [jobs]
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from benchmarks.options import parse, positional

TARGET_S = 60.0
RULES = ("fifo", "srtf", "drf", "tetris", "sjf")

MAPPING = """
[columns]
job_id = "id"
submit_time = "submitted"
start_time = "started"
end_time = "ended"
num_gpus = "gpus"
status = "state"
user_name = "user"

[time]
epoch_unit = "s"
"""


def make_trace(path: Path, jobs: int, seed: int = 0) -> None:
    """A Philly-like generic CSV of `jobs` jobs (recorded starts include queueing)."""
    rng = np.random.default_rng(seed)
    span = 90 * 86400
    # Bursty arrivals: a day/night cycle times a random per-hour burst factor.
    hours = np.arange(span // 3600)
    weight = (1.2 + np.sin(2 * np.pi * (hours % 24) / 24)) * rng.gamma(2.0, 0.5, hours.size)
    hour = rng.choice(hours, jobs, p=weight / weight.sum())
    submit = 1_500_000_000 + np.sort(hour * 3600 + rng.integers(0, 3600, jobs))
    start = submit + rng.exponential(600.0, jobs).astype(np.int64)
    run = np.clip(rng.lognormal(np.log(1200.0), 2.0, jobs), 30, 30 * 86400).astype(np.int64)
    pl.DataFrame(
        {
            "id": np.arange(jobs),
            "submitted": submit,
            "started": start,
            "ended": start + run,
            "gpus": rng.choice(
                [1, 2, 4, 8, 16, 32, 64], jobs, p=[0.7, 0.1, 0.08, 0.07, 0.03, 0.015, 0.005]
            ),
            "state": rng.choice(["COMPLETED", "FAILED", "KILLED"], jobs, p=[0.7, 0.2, 0.1]),
            "user": [f"u{i}" for i in rng.zipf(1.5, jobs) % 300],
        }
    ).write_csv(path)


@dataclass(frozen=True)
class Options:
    """`python -m benchmarks.bench_replay`'s options (see the module docstring)."""

    jobs: int = positional(100_000)
    """jobs of the generated trace"""


def main(argv: list[str]) -> int:
    """Generate, ingest, replay under each rule at two cluster sizes; print beside target."""
    measure(parse(Options, argv).jobs)
    return 0


def measure(jobs: int) -> None:
    """The replay of a generated trace of `jobs` jobs under each rule, printed."""
    from dataclasses import replace

    from pipelines.replay import ReplayConfig, replay_stage
    from pipelines.stages import ingest_stage

    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        csv, mapping = Path(tmp) / "trace.csv", Path(tmp) / "trace.toml"
        make_trace(csv, jobs)
        mapping.write_text(MAPPING)
        warehouse = Path(tmp) / "wh.duckdb"
        t = time.perf_counter()
        ingested = ingest_stage(warehouse, str(csv), "generic", mapping=str(mapping))
        print(f"ingested {jobs:,} jobs in {time.perf_counter() - t:.1f} s ({ingested.source_id})")
        # One process: the seconds printed are each rule's own, not overlapped.
        cfg = ReplayConfig(source_id=ingested.source_id, schedulers=RULES, workers=1)
        full = replay_stage(warehouse, cfg)
        half = replay_stage(warehouse, replace(cfg, servers=max(1, full.cluster.n_servers // 2)))
        for label, outcome in (("sized from the trace", full), ("half of it", half)):
            c = outcome.cluster
            print(
                f"\n{outcome.n_jobs:,} jobs, {c.n_servers:,} servers x {c.gpus_per_server:g} GPUs "
                f"({label}):"
            )
            for row in outcome.summary.iter_rows(named=True):
                s = outcome.seconds[row["scheduler"]]
                verdict = "met" if s <= TARGET_S else "MISSED"
                print(
                    f"  {row['scheduler']:8} {s:6.1f} s (target <= {TARGET_S:.0f} s: {verdict})  "
                    f"average JCT {row['avg_jct_s'] / 3600:8.2f} h  utilization "
                    f"{row['utilization']:.2f}"
                )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
