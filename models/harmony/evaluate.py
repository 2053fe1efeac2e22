"""Harmony's own evaluation scenario (Fig. 8, Table II): what it runs (`HarmonyEvalConfig`:
arrival patterns, sequences, baselines, the simulator with the TRUE speed model), and the
speeds Harmony observes there, as new interference samples (online update).

The runs and their summary go through the one evaluation (`models.evaluation`) in
`harmony_tables`, which pipelines/systems/harmony/stages.py calls: every scheduler on the same job
sequences of each arrival pattern with the same simulator seeds (common random numbers),
into eval_runs / eval_jobs / eval_summary with paired ratios to the best baseline.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import polars as pl

from models.evaluation import (
    VALIDATION_STREAM,
    EvalTables,
    best_rates,
    scenario_tables,
    scenario_workloads,
    simulated,
)
from models.harmony.config import HarmonyEvalConfig
from models.harmony.placement import (
    RulePlacement,
)
from tracelib.catalogue import DL2_CATALOGUE
from tracelib.contracts import InterferenceSamples
from tracelib.progress import ProgressFn, no_progress
from tracelib.provenance import canonical_json, code_version
from tracelib.scenarios import harmony_set
from tracelib.scenarios.harmony import sequences
from tracelib.sim import SimResult
from tracelib.sim.snapshot import JobPlacement
from tracelib.sim.speed import SpeedModel


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
    from warehouse.io import column_types

    return pl.DataFrame(rows, schema=column_types(InterferenceSamples))


SCENARIO = "harmony"
"""eval_summary.scenario of Harmony's own evaluation; its sets are harmony-<pattern>."""


def harmony_tables(
    learned: dict[str, tuple[Any, str | None]],
    cfg: HarmonyEvalConfig,
    eval_id: str,
    progress: ProgressFn = no_progress,
) -> tuple[EvalTables, dict[str, list[SimResult]]]:
    """Harmony's own scenario (Fig. 8, Table II) through the one evaluation: the baselines
    and `learned` (name -> (decision policy, policy id or None)) on `cfg.n_sequences`
    sequences of every arrival pattern (set harmony-<pattern>), sequence k with simulator
    seed `cfg.seed + k` under every scheduler (common random numbers, one replicate).
    Returns the three tables and the simulations of the learned policies (what Harmony
    observes for its online update). Pure: same inputs, same tables."""
    rates = best_rates(cfg.sim.cluster, cfg.sim.speed)
    baselines = {b: (RulePlacement.named(b), None) for b in cfg.baselines}
    schedulers = {
        name: simulated(
            lambda policy=policy: policy,
            lambda seed: replace(cfg.sim, seed=seed),
            rates=rates,
            start_delay_s=cfg.sim.speed.start_delay_s,
            policy_name=policy_id or name,
            keep_result=name in learned,
        )
        for name, (policy, policy_id) in {**baselines, **learned}.items()
    }
    workloads, held_out = [], []
    for p_idx, pattern in enumerate(cfg.patterns):
        arrivals = replace(cfg.arrivals, pattern=pattern)
        root = cfg.seed + 7919 * p_idx
        seqs = sequences(arrivals, cfg.n_sequences, root)
        ids = [f"{harmony_set(pattern)}:{root}:{k}" for k in range(len(seqs))]
        seeds = [cfg.seed + k for k in range(len(seqs))]
        workloads += scenario_workloads(harmony_set(pattern), ids, seeds, seqs)
        if cfg.n_validation:
            # A stream of its own: no validation sequence or seed is a test one.
            state = np.random.SeedSequence(cfg.seed, spawn_key=(VALIDATION_STREAM, p_idx))
            val_root, *val_seeds = (int(x) for x in state.generate_state(1 + cfg.n_validation))
            val_seqs = sequences(arrivals, cfg.n_validation, val_root)
            val_ids = [
                f"{harmony_set(pattern)}:validation:{val_root}:{k}" for k in range(len(val_seqs))
            ]
            held_out += scenario_workloads(
                harmony_set(pattern), val_ids, val_seeds, val_seqs, split="validation"
            )
    results: dict[str, list[SimResult]] = {name: [] for name in learned}

    def keep(name, _workload, outcome) -> None:
        if name in results:
            results[name].append(outcome.result)

    tables = scenario_tables(
        eval_id,
        [(schedulers, workloads, cfg.sim.cluster.gpus * cfg.sim.cluster.n_servers)],
        config=cfg.to_json(),
        scenario=SCENARIO,
        reference=cfg.baselines[0] if cfg.baselines else next(iter(schedulers)),
        slot_s=cfg.sim.slot_s,
        families={name: SCENARIO for name in learned},
        progress=progress,
        on_result=keep,
        selection=[
            (
                {name: schedulers[name] for name in baselines},
                held_out,
                cfg.sim.cluster.gpus * cfg.sim.cluster.n_servers,
            )
        ]
        if held_out
        else (),
    )
    return tables, results
