"""Ingest throughput: a generated 1,000,000-row generic CSV, end to end into a warehouse.

Measured: read + parse + quarantine checks + contract validation + one-transaction load,
i.e. `load_trace`, then opening the warehouse and `store_trace`, excluding interpreter and
Prefect start-up and the one-time creation of the warehouse's schema (each repetition
stores into its own warehouse file, created and migrated beforehand, as an operator's
ingest meets an existing warehouse). Best of `REPEATS` (the machine is shared: the best
run is the one least disturbed), each phase shown. Target (issue 19): at least 1,000,000
rows/s on a 2-core machine. The yardstick is DuckDB's own `read_csv` of the same file into
a table (no checks, no normalization), best of `REPEATS` too: the ratio says how much our
checks cost on top of the fastest load this machine can do. Also prints peak resident
memory.

    python -m benchmarks.bench_ingest [rows]
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

TARGET_ROWS_PER_S = 1_000_000

MAPPING = """
[columns]
job_id = "id"
submit_time = "submitted"
start_time = "started"
end_time = "ended"
num_gpus = "gpus"
num_cpus = "cpus"
mem_gb = "mem"
status = "state"
user_name = "user"
vc = "queue"

[time]
epoch_unit = "s"
"""


def make_csv(path: Path, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    submit = 1_600_000_000 + np.sort(rng.integers(0, 90 * 86400, rows))
    start = submit + rng.integers(0, 3600, rows)
    end = start + rng.integers(60, 3 * 86400, rows)
    pl.DataFrame(
        {
            "id": np.arange(rows),
            "submitted": submit,
            "started": start,
            "ended": end,
            "gpus": rng.choice([1, 2, 4, 8, 16], rows),
            "cpus": rng.integers(1, 64, rows),
            "mem": rng.uniform(1, 256, rows).round(1),
            "state": rng.choice(["COMPLETED", "FAILED", "CANCELLED"], rows),
            "user": [f"u{i}" for i in rng.integers(0, 500, rows)],
            "queue": [f"vc{i}" for i in rng.integers(0, 20, rows)],
        }
    ).write_csv(path)


REPEATS = 3


def main(rows: int | None = None) -> None:
    from tracelib.ingest import load_trace, store_trace
    from warehouse import connect

    rows = rows or 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "jobs.csv"
        mapping = Path(tmp) / "jobs.toml"
        mapping.write_text(MAPPING)
        make_csv(csv, rows)
        for i in range(REPEATS):
            with connect(Path(tmp) / f"bench{i}.duckdb"):
                pass  # schema created once per warehouse, not per ingest
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        runs = []
        for i in range(REPEATS):
            t0 = time.perf_counter()
            loaded = load_trace(csv, "generic", mapping=mapping)
            t1 = time.perf_counter()
            with connect(Path(tmp) / f"bench{i}.duckdb") as con:
                result = store_trace(con, loaded)
            t2 = time.perf_counter()
            runs.append((t2 - t0, t1 - t0, t2 - t1))
            del loaded
        peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        duck = min(_duckdb_read_csv(csv, Path(tmp) / f"duck{i}.duckdb") for i in range(REPEATS))
    total, parse, store = min(runs)
    rate = rows / total
    print(f"rows                 {rows:,} ({result.rows_accepted:,} accepted), best of {REPEATS}")
    print(f"parse + checks       {parse:.2f} s")
    print(f"store (1 transaction){store:.2f} s (open the warehouse, validate, insert, commit)")
    verdict = "met" if rate >= TARGET_ROWS_PER_S else "MISSED"
    print(
        f"end to end           {total:.2f} s = {rate:,.0f} rows/s "
        f"(target >= {TARGET_ROWS_PER_S:,}: {verdict}); all runs "
        + ", ".join(f"{t:.2f}" for t, _, _ in runs)
        + " s"
    )
    print(
        f"duckdb read_csv      {duck:.2f} s = {rows / duck:,.0f} rows/s; "
        f"ours / duckdb = {rate / (rows / duck):.2f}"
    )
    print(f"peak RSS             {peak_rss:,.0f} MiB (before ingest {base_rss:,.0f} MiB)")


def _duckdb_read_csv(csv: Path, db: Path) -> float:
    """Seconds DuckDB takes to load the same file into a table with its own `read_csv`."""
    import duckdb

    con = duckdb.connect(str(db))
    try:
        start = time.perf_counter()
        con.execute("CREATE TABLE jobs AS SELECT * FROM read_csv(?)", [str(csv)])
        return time.perf_counter() - start
    finally:
        con.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
