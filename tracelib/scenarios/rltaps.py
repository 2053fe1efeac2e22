"""RL-TAPS' setting (section 5.1) as a named scenario: the fixed-step preemptive simulator on
its GPU topology (`tracelib.sim.topology`), the bimodal job sequences of DeepRM's mix, and
the paper's slowdown (eq. 17).

    scenario = rl_taps_scenario()                      # SimConfig, catalogue, speed model
    jobs = rl_taps_jobs(BimodalConfig.rl_taps(n_jobs=30, seed=7))
    Simulator(jobs, scheduler, scenario.cfg, scenario.catalogue,
              speed_model=scenario.speed_model).run()

Resumption cost: RL-TAPS models none (its section 6 names that a limitation). A full-
preemption scheduler pausing jobs for free against baselines that never preempt is not a
comparison on equal terms, so the scenario charges every (re)start after a pause or a change
of GPUs the checkpoint-restart time DL2 measured (`RESTART_PAUSE_S`, 30 s, the arena's
reallocation pause), for RL-TAPS and the preemptive baselines alike;
`rl_taps_scenario(resume_cost_s=0)` is the paper's setting (see `tracelib.sim.topology`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from tracelib.catalogue import GPU_EFFICIENCY, RLTAPS_CATALOGUE, JobType, by_name
from tracelib.sim.config import RESTART_PAUSE_S, SimConfig, SpeedConfig
from tracelib.sim.jobs import JobSpec
from tracelib.sim.topology import (
    RLTAPS_STEP_S,
    TopologyConfig,
    TopologySpeedModel,
    topology_for,
)

RLTAPS_RESUME_COST_S = RESTART_PAUSE_S
"""Training lost when a job resumes or changes GPUs: the checkpoint-restart time every
preemptive scheduler pays (RL-TAPS itself models none; module docstring)."""

_MODEL_STREAM = 0x5A95
"""Spawn key of the stream that draws RL-TAPS job types (independent of bimodal_trace's)."""


class RLTapsScenario(NamedTuple):
    """What `Simulator(jobs, scheduler, cfg, catalogue=..., speed_model=...)` needs."""

    cfg: SimConfig
    catalogue: tuple[JobType, ...]
    speed_model: TopologySpeedModel


def rl_taps_scenario(
    topology: TopologyConfig | None = None,
    seed: int = 0,
    resume_cost_s: float = RLTAPS_RESUME_COST_S,
    step_s: float = RLTAPS_STEP_S,
    catalogue: tuple[JobType, ...] = RLTAPS_CATALOGUE,
) -> RLTapsScenario:
    """RL-TAPS' fixed-step preemptive setting: a decision every `step_s`, one server per
    GPU, the topology speed model, `resume_cost_s` lost whenever a job (re)starts on
    changed GPUs after having trained. Jobs come from `rl_taps_jobs`."""
    topo_cfg = topology or TopologyConfig()
    cluster = topo_cfg.cluster()
    capacity = (cluster.gpus, cluster.cpus, cluster.mem_gb)
    too_big = [
        jt.model
        for jt in catalogue
        if any(d > c + 1e-9 for d, c in zip(jt.worker_demand, capacity, strict=True))
    ]
    if too_big:
        raise ValueError(f"workers of {too_big[:3]} do not fit one GPU's share {capacity}")
    cfg = SimConfig(
        cluster=cluster,
        # Locality and interference belong to the PS speed model, unused here.
        speed=SpeedConfig(locality=False, interference_scale=0.0, realloc_pause_s=resume_cost_s),
        slot_s=step_s,
        seed=seed,
    )
    return RLTapsScenario(cfg, catalogue, TopologySpeedModel(topology_for(topo_cfg), catalogue))


def rl_taps_jobs(
    cfg=None,
    catalogue: tuple[JobType, ...] = RLTAPS_CATALOGUE,
    step_s: float = RLTAPS_STEP_S,
) -> tuple[JobSpec, ...]:
    """Jobs of a `tracelib.synthetic.BimodalConfig` (default `BimodalConfig.rl_taps()`) as
    RL-TAPS jobs: arrival at its step, a catalogue type drawn uniformly (its own seeded
    stream; the trace's DL2 model is dropped), `num_workers` = requested GPUs, no PSs,
    and len(j) * gpusreq(j) cells of work (RL-TAPS eq. 11) in epochs."""
    from tracelib.synthetic import EPOCH, BimodalConfig, bimodal_trace

    cfg = cfg or BimodalConfig.rl_taps()
    # Unit steps keep arrivals and lengths exact integers through the trace's timestamps.
    frame = bimodal_trace(replace(cfg, step_s=1.0))
    steps = [round((t - EPOCH).total_seconds()) for t in frame["submit_time"].to_list()]
    lengths = [round(d) for d in frame["duration_s"].to_list()]
    gpus = frame["num_workers"].to_list()
    rng = np.random.default_rng(np.random.SeedSequence(cfg.seed, spawn_key=(_MODEL_STREAM,)))
    types = rng.integers(0, len(catalogue), len(steps))
    ordered = sorted(catalogue, key=lambda jt: jt.type_index)
    jobs = []
    for i, (step, length, g, name) in enumerate(
        zip(steps, lengths, gpus, frame["job_id"].to_list(), strict=True)
    ):
        jt = ordered[int(types[i])]
        # A cell is one step of one GPU at v_P100; one GPU does a mini-batch per
        # local_comp_s at GPU_EFFICIENCY of v_P100.
        minibatches = length * g * step_s / (GPU_EFFICIENCY * jt.local_comp_s)
        jobs.append(
            JobSpec(
                job_id=i,
                model=jt.model,
                epochs=minibatches / jt.iters_per_epoch,
                arrival_s=step * step_s,
                num_workers=int(g),
                num_ps=0,
                name=str(name),
            )
        )
    return tuple(jobs)


def job_length_s(job: JobSpec, catalogue: tuple[JobType, ...] = RLTAPS_CATALOGUE) -> float:
    """len(j) in seconds: the job's work at its requested GPUs at v_P100, no communication
    (RL-TAPS' slowdown denominator; `rl_taps_jobs` makes it len(j) * step_s)."""
    jt = by_name(catalogue)[job.model]
    minibatches = job.epochs * jt.iters_per_epoch
    return minibatches * GPU_EFFICIENCY * jt.local_comp_s / job.num_workers


def mean_slowdown(
    result,
    jobs: Sequence[JobSpec],
    catalogue: tuple[JobType, ...] = RLTAPS_CATALOGUE,
    horizon_s: float | None = None,
) -> float:
    """RL-TAPS eq. 17 averaged over jobs: (finish - arrival) / len(j). Unfinished jobs finish
    at `horizon_s` (the paper's T_max); without one they are an error. `result` is a
    `SimResult` (its arrival times, jitter included, are used)."""
    frame = result.jobs
    arrival = dict(zip(frame["job_id"].to_list(), frame["arrival_s"].to_list(), strict=True))
    finish = dict(zip(frame["job_id"].to_list(), frame["finish_s"].to_list(), strict=True))
    total = 0.0
    for job in jobs:
        end = finish[job.job_id]
        if end is None:
            if horizon_s is None:
                raise ValueError(f"job {job.job_id} did not finish; pass horizon_s")
            end = horizon_s
        total += (end - arrival[job.job_id]) / job_length_s(job, catalogue)
    return total / len(jobs)
