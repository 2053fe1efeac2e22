"""Gavel's measured co-location throughputs as interference samples (real measurements).

Gavel (Narayanan et al., OSDI 2020, github.com/stanford-futuredata/gavel) publishes, per GPU
type, the throughput of each job type at each scale factor alone and when space-sharing
its GPUs with another job type (`scheduler/simulation_throughputs.json`):

    {"v100": {"('ResNet-50 (batch size 64)', 1)": {
                 "null": 180.2,                                   # alone
                 "('LM (batch size 20)', 1)": [120.3, 35.1],      # self, other when paired
                 ...}, ...}, ...}

`gavel_samples(path)` turns each unordered pair with both throughputs positive into one
sample set of two jobs (a throughput of 0 marks a pair that does not fit in GPU memory and
is left out): source `gavel:<gpu type>`, seed 0, job types numbered by their sorted names
(the Gavel job types are not catalogue models, so `type_index` indexes Gavel's own list),
`workers` = scale factor, no PSs (Gavel's jobs are all-reduce or single-GPU), both jobs on
one server sharing its GPUs: `worker_servers` = [scale factor], isolated speed = "null",
measured = paired throughput. The rows satisfy the `interference_samples` contract, so the
reward predictor is fitted on them exactly as on the synthetic samples.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass

import polars as pl

from tracelib.provenance import canonical_json, code_version


@dataclass(frozen=True)
class GavelConfig:
    """Which part of a Gavel throughputs file becomes samples."""

    gpu_types: tuple[str, ...] = ()
    """GPU types to read (empty: every key of the file)."""
    seed: int = 0
    """Value of the `seed` column."""


def _key(raw: str) -> tuple[str, int]:
    name, scale = ast.literal_eval(raw)
    return str(name), int(scale)


def gavel_samples(path: str | os.PathLike[str], cfg: GavelConfig | None = None) -> pl.DataFrame:
    """`interference_samples` rows (not yet contract-checked) from a Gavel throughputs file."""
    cfg = cfg or GavelConfig()
    with open(path) as fh:
        data = json.load(fh)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a Gavel throughputs file (top level must be an object)")
    gpus = cfg.gpu_types or tuple(sorted(data))
    missing = [g for g in gpus if g not in data]
    if missing:
        raise ValueError(f"{path}: no GPU type {missing}; the file has {sorted(data)}")
    rows: list[dict] = []
    for gpu in gpus:
        table = {_key(k): v for k, v in data[gpu].items()}
        names = sorted({name for name, _ in table})
        index = {name: i for i, name in enumerate(names)}
        seen: set[frozenset] = set()
        sample_set = 0
        for (name, scale), entry in sorted(table.items()):
            alone = float(entry.get("null", 0.0) or 0.0)
            for raw, pair in sorted(entry.items()):
                if raw == "null":
                    continue
                other = _key(raw)
                key = frozenset({(name, scale), other}) if other != (name, scale) else None
                if key is not None and key in seen:
                    continue
                if key is not None:
                    seen.add(key)
                other_alone = float(table.get(other, {}).get("null", 0.0) or 0.0)
                mine, theirs = float(pair[0]), float(pair[1])
                if min(alone, other_alone, mine, theirs) <= 0:
                    continue
                jobs = [(name, scale, alone, mine), (other[0], other[1], other_alone, theirs)]
                for j, (jname, jscale, iso, speed) in enumerate(jobs):
                    rows.append(
                        {
                            "source": f"gavel:{gpu}",
                            "seed": cfg.seed,
                            "sample_set": sample_set,
                            "job_in_set": j,
                            "model": jname,
                            "type_index": index[jname],
                            "workers": jscale,
                            "ps": 0,
                            "n_servers": 1,
                            "worker_servers": f"[{jscale}]",
                            "ps_servers": "[0]",
                            "servers_used": 1,
                            "colocated_tasks": jobs[1 - j][1],
                            "colocated_jobs": 1,
                            "isolated_speed": iso,
                            "measured_speed": speed,
                            "slowdown": 1.0 - speed / iso,
                            "params": canonical_json(
                                {"format": "gavel", "file": os.path.basename(path), "gpu": gpu}
                            ),
                            "code_version": code_version(),
                        }
                    )
                sample_set += 1
    schema = {
        "source": pl.Utf8,
        "seed": pl.Int64,
        "sample_set": pl.Int32,
        "job_in_set": pl.Int32,
        "model": pl.Utf8,
        "type_index": pl.Int32,
        "workers": pl.Int32,
        "ps": pl.Int32,
        "n_servers": pl.Int32,
        "worker_servers": pl.Utf8,
        "ps_servers": pl.Utf8,
        "servers_used": pl.Int32,
        "colocated_tasks": pl.Int32,
        "colocated_jobs": pl.Int32,
        "isolated_speed": pl.Float64,
        "measured_speed": pl.Float64,
        "slowdown": pl.Float64,
        "params": pl.Utf8,
        "code_version": pl.Utf8,
    }
    return pl.DataFrame(rows, schema=schema)
