"""Gavel's measured co-location throughputs as interference samples (real measurements).

Gavel (Narayanan et al., OSDI 2020, github.com/stanford-futuredata/gavel) publishes, per GPU
type, the throughput of each job type at each scale factor alone and when space-sharing
its GPUs with another job type (`scheduler/simulation_throughputs.json`):

    {"v100": {"('ResNet-50 (batch size 64)', 1)": {
                 "null": 180.2,                                   # alone
                 "('LM (batch size 20)', 1)": [120.3, 35.1],      # self, other when paired
                 ...}, ...}, ...}

`read_gavel(path)` turns each unordered pair with both throughputs positive into one
sample set of two jobs (a throughput of 0 marks a pair that does not fit in GPU memory and
is left out): source `gavel:<key>`, seed 0, job types numbered by their sorted names
(the Gavel job types are not catalogue models, so `type_index` indexes Gavel's own list),
`workers` = scale factor, no PSs (Gavel's jobs are all-reduce or single-GPU), isolated
speed = "null", measured = paired throughput. The rows satisfy the `interference_samples`
contract, so the reward predictor is fitted on them exactly as on the synthetic samples.

Keys and layouts. Every top-level key is read unless `GavelConfig.gpu_types` names some:

- `<gpu>` (consolidated): a job's workers on one server, the pair sharing its GPUs:
  `n_servers` = 1, `worker_servers` = [scale factor].
- `<gpu>_unconsolidated`: Gavel's throughputs with a job's workers spread over servers, read
  as its own sample sets (source `gavel:<gpu>_unconsolidated`) with one worker per server,
  the pair sharing those servers: `n_servers` = the larger scale factor, `worker_servers` =
  [1] * scale factor (padded with 0). A 1-GPU job cannot be spread, so a pair that repeats
  the consolidated key's measurement exactly (same pair, same four throughputs) is a
  duplicate and left out; a key left with no pair of its own is skipped, with the counts
  as its reason (`GavelRead.skipped`). In Gavel's published file every positive pair is a
  1-GPU pair and the `_unconsolidated` keys repeat them: they differ from the consolidated
  keys only in the isolated throughputs of multi-GPU jobs, which pair with nothing (Gavel's
  own scheduler leaves these keys out of its throughput estimator too), so all three are
  skipped there.
- A key with no positive pair at all is skipped too ("no pair fits").
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field

import polars as pl

from tracelib.provenance import canonical_json, code_version

UNCONSOLIDATED = "_unconsolidated"
"""Suffix of Gavel's keys whose jobs spread their workers over servers."""


@dataclass(frozen=True)
class GavelConfig:
    """Which part of a Gavel throughputs file becomes samples."""

    gpu_types: tuple[str, ...] = ()
    """GPU types (top-level keys) to read (empty: every key of the file)."""
    seed: int = 0
    """Value of the `seed` column."""


@dataclass(frozen=True)
class GavelRead:
    """What a Gavel file gave: samples, the keys they came from, the keys skipped and why."""

    samples: pl.DataFrame
    """`interference_samples` rows (not yet contract-checked), sources `gavel:<key>`."""
    gpu_types: tuple[str, ...]
    """Keys read (each has at least one sample set), in the file's sorted order."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Key -> why it gave no sample."""


SCHEMA = {
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

Job = tuple[str, int]
"""(Gavel job type, scale factor)."""


def _key(raw: str) -> Job:
    name, scale = ast.literal_eval(raw)
    return str(name), int(scale)


def _table(entries: dict) -> dict[Job, dict]:
    return {_key(k): v for k, v in entries.items()}


def _alone(table: dict[Job, dict], job: Job) -> float:
    return float(table.get(job, {}).get("null", 0.0) or 0.0)


def _pairs(table: dict[Job, dict]) -> list[tuple[Job, Job, float, float, float, float]]:
    """Each unordered pair once, as (job, other, job alone, other alone, job paired, other
    paired), sorted; a job paired with its own type is one pair."""
    seen: set[frozenset] = set()
    out = []
    for job, entry in sorted(table.items()):
        for raw, pair in sorted(entry.items()):
            if raw == "null":
                continue
            other = _key(raw)
            key = frozenset({job, other})
            if other != job and key in seen:
                continue
            seen.add(key)
            out.append(
                (
                    job,
                    other,
                    _alone(table, job),
                    _alone(table, other),
                    float(pair[0]),
                    float(pair[1]),
                )
            )
    return out


def _layout(scale: int, width: int, spread: bool) -> str:
    """Per-server worker counts of a job of `scale` workers among `width` servers."""
    if not spread:
        return f"[{scale}]"
    return json.dumps([1] * scale + [0] * (width - scale))


def _rows(gpu: str, table: dict[Job, dict], pairs: list, cfg: GavelConfig, path) -> list[dict]:
    spread = gpu.endswith(UNCONSOLIDATED)
    names = sorted({name for name, _ in table})
    index = {name: i for i, name in enumerate(names)}
    params = canonical_json({"format": "gavel", "file": os.path.basename(path), "gpu": gpu})
    rows: list[dict] = []
    for sample_set, (job, other, alone, other_alone, mine, theirs) in enumerate(pairs):
        width = max(job[1], other[1]) if spread else 1
        jobs = [(job, alone, mine), (other, other_alone, theirs)]
        for j, ((name, scale), iso, speed) in enumerate(jobs):
            partner = jobs[1 - j][0][1]
            rows.append(
                {
                    "source": f"gavel:{gpu}",
                    "seed": cfg.seed,
                    "sample_set": sample_set,
                    "job_in_set": j,
                    "model": name,
                    "type_index": index[name],
                    "workers": scale,
                    "ps": 0,
                    "n_servers": width,
                    "worker_servers": _layout(scale, width, spread),
                    "ps_servers": json.dumps([0] * width),
                    "servers_used": scale if spread else 1,
                    # Spread jobs share the first min(scales) servers, one worker each there.
                    "colocated_tasks": min(scale, partner) if spread else partner,
                    "colocated_jobs": 1,
                    "isolated_speed": iso,
                    "measured_speed": speed,
                    "slowdown": 1.0 - speed / iso,
                    "params": params,
                    "code_version": code_version(),
                }
            )
    return rows


def read_gavel(path: str | os.PathLike[str], cfg: GavelConfig | None = None) -> GavelRead:
    """Samples from a Gavel throughputs file, per key, with the keys skipped and why (see
    the module docstring for the layouts and the duplicate rule)."""
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
    read: list[str] = []
    skipped: dict[str, str] = {}
    for gpu in gpus:
        table = _table(data[gpu])
        pairs = _pairs(table)
        fitting = [p for p in pairs if min(p[2:]) > 0]
        base = gpu.removesuffix(UNCONSOLIDATED)
        duplicates = []
        if gpu.endswith(UNCONSOLIDATED) and base in data:
            consolidated = set(_pairs(_table(data[base])))
            duplicates = [p for p in fitting if p in consolidated]
        own = [p for p in fitting if p not in duplicates]
        if own:
            rows += _rows(gpu, table, own, cfg, path)
            read.append(gpu)
        elif duplicates:
            skipped[gpu] = (
                f"no pair of its own: its {len(duplicates)} fitting pairs repeat {base}'s "
                f"measurements exactly (jobs of {_scales(duplicates)} GPU, which are not "
                f"spread), {len(pairs) - len(fitting)} do not fit (a throughput of 0)"
            )
        else:
            skipped[gpu] = f"no pair fits: all {len(pairs)} pairs have a throughput of 0"
    return GavelRead(pl.DataFrame(rows, schema=SCHEMA), tuple(read), skipped)


def _scales(pairs: list) -> str:
    scales = sorted({s for job, other, *_ in pairs for s in (job[1], other[1])})
    return "/".join(str(s) for s in scales)


def gavel_samples(path: str | os.PathLike[str], cfg: GavelConfig | None = None) -> pl.DataFrame:
    """`interference_samples` rows (not yet contract-checked) from a Gavel throughputs file
    (`read_gavel(...).samples`)."""
    return read_gavel(path, cfg).samples
