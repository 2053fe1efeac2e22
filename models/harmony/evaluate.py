"""Harmony against its baselines in the simulator with the TRUE speed model (Fig. 8, Table
II), and the speeds it observes there, as new interference samples (online update).

Every scheduler runs the same job sequences of each arrival pattern with the same simulator
seeds (common random numbers: a job's hidden speed deviation is the same under every
scheduler). Per (pattern, scheduler): mean over sequences of the average JCT, a Student-t
95% interval, and the improvement over the best baseline of that pattern,
1 - JCT / best baseline JCT (positive: better).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from models.harmony.placement import BASELINES, RulePlacement
from models.harmony.train import harmony_sim
from models.harmony.workloads import PATTERNS, ArrivalConfig, sequences
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json, code_version
from tracelib.sim import SimConfig, SimResult, Simulator
from tracelib.sim.snapshot import JobPlacement
from tracelib.sim.speed import SpeedModel
from tracelib.stats import mean_ci


@dataclass(frozen=True)
class HarmonyEvalConfig:
    """Which sequences, which baselines, which simulator."""

    patterns: tuple[str, ...] = PATTERNS
    n_sequences: int = 8
    """Job sequences per arrival pattern (with 4, one policy's paired ratio to the best
    baseline has a 95% interval about +-20% wide)."""
    arrivals: ArrivalConfig = field(default_factory=ArrivalConfig)
    """Sequence shape (its `pattern` is replaced by each of `patterns`)."""
    baselines: tuple[str, ...] = BASELINES
    sim: SimConfig = field(default_factory=harmony_sim)
    seed: int = 1000
    """Root seed of the sequences and simulator seeds (disjoint from training's)."""

    def to_json(self) -> str:
        return canonical_json(asdict(self))


def evaluate(
    learned: Mapping[str, tuple[Any, str | None]],
    cfg: HarmonyEvalConfig,
    progress: ProgressFn = no_progress,
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, list[SimResult]]]:
    """Run the baselines and `learned` (name -> (decision policy, policy id)) on every
    pattern; returns (summary rows, per-run rows, results by scheduler for the learned).
    `paired_ratio`: mean over sequences of the scheduler's average JCT / the best baseline's
    on the same sequence, with its own t-interval (much tighter than the JCT's, as the
    sequences' load cancels out). `progress(runs done, total)` after every simulation."""
    schedulers: dict[str, tuple[Any, str | None]] = {
        b: (RulePlacement(b), None) for b in cfg.baselines
    }
    schedulers.update(learned)
    runs: list[dict[str, Any]] = []
    results: dict[str, list[SimResult]] = {name: [] for name in learned}
    for p_idx, pattern in enumerate(cfg.patterns):
        arr = replace(cfg.arrivals, pattern=pattern)
        seqs = sequences(arr, cfg.n_sequences, cfg.seed + 7919 * p_idx)
        for k, jobs in enumerate(seqs):
            sim = replace(cfg.sim, seed=cfg.seed + k)
            for name, (policy, _) in schedulers.items():
                res = Simulator(jobs, policy, sim).run()
                runs.append(
                    {
                        "pattern": pattern,
                        "scheduler": name,
                        "sequence": k,
                        "avg_jct_s": res.avg_jct_s,
                    }
                )
                if name in results:
                    results[name].append(res)
                progress(len(runs), len(cfg.patterns) * cfg.n_sequences * len(schedulers))
    run_frame = pl.DataFrame(runs)
    rows = []
    for pattern in cfg.patterns:
        part = run_frame.filter(pl.col("pattern") == pattern)
        means = {
            s: float(part.filter(pl.col("scheduler") == s)["avg_jct_s"].mean()) for s in schedulers
        }
        best = min(cfg.baselines, key=lambda b: means[b]) if cfg.baselines else None
        ref = (
            part.filter(pl.col("scheduler") == best).sort("sequence")["avg_jct_s"].to_numpy()
            if best
            else None
        )
        for name, (_, policy_id) in schedulers.items():
            mine = part.filter(pl.col("scheduler") == name).sort("sequence")
            vals = mine["avg_jct_s"].to_numpy()
            _, lo, hi = mean_ci(vals)
            # Paired by sequence (same jobs, same seed): the sequence's load cancels out.
            ratio = vals / ref if ref is not None else None
            r_lo, r_hi = mean_ci(ratio)[1:] if ratio is not None else (None, None)
            rows.append(
                {
                    "pattern": pattern,
                    "scheduler": name,
                    "policy_id": policy_id,
                    "n_sequences": len(vals),
                    "avg_jct_s": float(vals.mean()),
                    "avg_jct_intervals": float(vals.mean()) / cfg.sim.slot_s,
                    "ci_low_s": lo,
                    "ci_high_s": hi,
                    "best_baseline": best,
                    "improvement_over_best_baseline": (
                        1.0 - float(vals.mean()) / means[best] if best else None
                    ),
                    "paired_ratio": float(ratio.mean()) if ratio is not None else None,
                    "paired_ratio_ci_low": r_lo,
                    "paired_ratio_ci_high": r_hi,
                }
            )
    summary = pl.DataFrame(
        rows,
        schema={
            "pattern": pl.Utf8,
            "scheduler": pl.Utf8,
            "policy_id": pl.Utf8,
            "n_sequences": pl.Int32,
            "avg_jct_s": pl.Float64,
            "avg_jct_intervals": pl.Float64,
            "ci_low_s": pl.Float64,
            "ci_high_s": pl.Float64,
            "best_baseline": pl.Utf8,
            "improvement_over_best_baseline": pl.Float64,
            "paired_ratio": pl.Float64,
            "paired_ratio_ci_low": pl.Float64,
            "paired_ratio_ci_high": pl.Float64,
        },
    )
    return summary, run_frame, results


def observed_samples(
    results: list[SimResult], source: str, seed: int, max_sets: int | None = None
) -> pl.DataFrame:
    """Speeds observed in evaluation runs as `interference_samples` rows: each decision
    interval of each run is one sample set (the jobs training in it, their placement and
    measured speed in mini-batches/s); the isolated speed is the noise-free standalone
    profile of the job in the same placement, as `tracelib.interference` records it."""
    types = {jt.model: jt for jt in DL2_CATALOGUE}
    rows: list[dict[str, Any]] = []
    sample_set = 0
    for res in results:
        model = SpeedModel(res.config.speed)
        n_srv = res.config.cluster.n_servers
        models = dict(zip(res.jobs["job_id"].to_list(), res.jobs["model"].to_list(), strict=True))
        ev = res.events_frame().filter((pl.col("kind") == "alloc") & (pl.col("value") > 0))
        rates = {(t, j): v for t, j, v in ev.select("time_s", "job_id", "value").iter_rows()}
        for (_, t), part in res.placements.group_by("decision", "time_s", maintain_order=True):
            jobs: dict[int, tuple[list[int], list[int]]] = {}
            for job_id, server, w, p in part.select(
                "job_id", "server", "workers", "ps"
            ).iter_rows():
                entry = jobs.setdefault(job_id, ([0] * n_srv, [0] * n_srv))
                entry[0][server] += w
                entry[1][server] += p
            jobs = {j: v for j, v in jobs.items() if (t, j) in rates}
            if not jobs:
                continue
            for k, (job_id, (w_on, p_on)) in enumerate(sorted(jobs.items())):
                jt = types[models[job_id]]
                place = JobPlacement.of(
                    [s for s, c in enumerate(w_on) for _ in range(c)],
                    [s for s, c in enumerate(p_on) for _ in range(c)],
                )
                w, p = sum(w_on), sum(p_on)
                iso = float(model.placed([jt.type_index], [w], [p], [place], n_srv)[0])
                measured = rates[(t, job_id)] * jt.iters_per_epoch
                tasks = np.array(w_on) + np.array(p_on)
                others = sum(
                    np.array(a) + np.array(b) for j2, (a, b) in jobs.items() if j2 != job_id
                )
                others = np.zeros(n_srv) if isinstance(others, int) else others
                shared = sum(
                    1
                    for j2, (a, b) in jobs.items()
                    if j2 != job_id and ((np.array(a) + np.array(b)) * tasks).sum() > 0
                )
                rows.append(
                    {
                        "source": source,
                        "seed": seed,
                        "sample_set": sample_set,
                        "job_in_set": k,
                        "model": jt.model,
                        "type_index": jt.type_index,
                        "workers": w,
                        "ps": p,
                        "n_servers": n_srv,
                        "worker_servers": json.dumps(w_on, separators=(",", ":")),
                        "ps_servers": json.dumps(p_on, separators=(",", ":")),
                        "servers_used": int((tasks > 0).sum()),
                        "colocated_tasks": int((others * (tasks > 0)).sum()),
                        "colocated_jobs": shared,
                        "isolated_speed": iso,
                        "measured_speed": measured,
                        "slowdown": 1.0 - measured / iso,
                        "params": canonical_json({"observed": res.scheduler}),
                        "code_version": code_version(),
                    }
                )
            sample_set += 1
            if max_sets is not None and sample_set >= max_sets:
                return _frame(rows)
    return _frame(rows)


def _frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    from tracelib.contracts import InterferenceSamples

    schema = {name: col.dtype.type for name, col in InterferenceSamples.to_schema().columns.items()}
    return pl.DataFrame(rows, schema=schema)
