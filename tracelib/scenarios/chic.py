"""Chic's setting (Gong et al., IWQoS'19, section 6.1) as a named scenario.

    scenario = ChicScenario(rate_per_hour=1.8)
    jobs = scenario.sequence(seed)                  # W = 30 jobs, Poisson arrivals
    simulate(jobs, Scheduler(Optimus(interval_s=600.0), LoadBalancing()),
             scenario.sim_config(trigger="interval"))

| quantity | value | source |
|---|---|---|
| cluster | 10 GPUs, 120 CPU cores, 600 GB, one pool | Chic 6.1 |
| models | ResNet-50, VGG-16, ResNeXt-110, uniform | Chic 6.1 |
| ResNet-50 worker / PS | 1 GPU, 2 cores, 8 GB / 3 cores, 9 GB | Chic 6.1 |
| VGG-16 worker / PS | 1 GPU, 2 cores, 10 GB / 4 cores, 10 GB | Chic 6.1 |
| ResNeXt-110 worker / PS | 1 GPU, 2 cores, 10 GB / 3 cores, 10 GB | Chic 6.1 |
| arrivals | Poisson, 0.9 to 2.7 per hour | Chic 6.1 |
| job size | uniform 100..200 "iterations" | Chic 6.1 |
| W, I | 30 jobs per sequence, first 3 jobs scheduled | Chic 6.1 |
| speed g_i(w, p) | the measured speeds of the same models | our choice, below |

The paper states capacities as one pool per resource (its constraint sum_i(...) <= c_k), so
the cluster is one simulator server holding all of it; placement is then trivial. It names
no speed model beyond a per-iteration time g_i(w, p); the simulator uses the measured speeds
of the same three models (`tracelib.sim.measured`, the shared ground truth, with its
run-to-run variation), and the paper's simulation has neither interference, locality nor a
restart cost, so those are off (`chic_speed`). `iteration_time_s`, the MDP's own rule for
when an addition stops lowering a job's iteration time, reads the catalogue's analytical
(Optimus-form) fit: what the agent's environment believes, not the truth. A Chic
"iteration" is one catalogue epoch of the job (what `tracelib.synthetic.PoissonConfig`
draws): the paper's ACTs of thousands of seconds for 100-200 iterations need iterations of
seconds, not single mini-batches, and one epoch at one worker + one PS takes 7.6 s
(ResNet-50), 12.6 s (VGG-16) and 1.0 s (ResNeXt-110) at the analytical speed.

`ChicArenaScenario` is the other setting Chic trains in: the arena's (the DL2 setting every
scheduler is evaluated in, `models.evaluation`), whose episodes are derived workload
sets' sequences; `tracelib.envs.chic_arena` says how the MDP reads it.

Sequence seeds: `split_seeds` gives the train, validation and test sequences disjoint seed
ranges, the same at every arrival rate (so rates are compared on the same model and size
draws, the arrival gaps scaled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from tracelib.catalogue import DL2_CATALOGUE, JobType, by_name
from tracelib.scenarios.dl2 import dl2_small
from tracelib.sim.config import ClusterConfig, SimConfig, SpeedConfig
from tracelib.sim.jobs import JobSpec
from tracelib.synthetic import CHIC_MODELS, EPOCH, PoissonConfig, poisson_trace

CHIC_DEMANDS: dict[str, tuple[tuple[float, float, float], tuple[float, float]]] = {
    # model: ((worker GPU, CPU cores, GB), (PS CPU cores, GB)), Chic section 6.1.
    "resnet-50": ((1.0, 2.0, 8.0), (3.0, 9.0)),
    "vgg-16": ((1.0, 2.0, 10.0), (4.0, 10.0)),
    "resnext-110": ((1.0, 2.0, 10.0), (3.0, 10.0)),
}


def _chic_catalogue() -> tuple[JobType, ...]:
    dl2 = by_name(DL2_CATALOGUE)
    out = []
    for k, model in enumerate(CHIC_MODELS):
        (gpu, cpu, mem), (ps_cpu, ps_mem) = CHIC_DEMANDS[model]
        out.append(
            replace(
                dl2[model],
                type_index=k,
                worker_gpu=gpu,
                worker_cpu=cpu,
                worker_mem_gb=mem,
                ps_cpu=ps_cpu,
                ps_mem_gb=ps_mem,
            )
        )
    return tuple(out)


CHIC_CATALOGUE: tuple[JobType, ...] = _chic_catalogue()
"""Chic's three job types: the paper's demands, the catalogue's speed coefficients."""

CHIC_RATES: tuple[float, ...] = (0.9, 1.35, 1.8, 2.25, 2.7)
"""Arrival rates (per hour) spanning the paper's 0.9 to 2.7 (Fig. 4's exact points are
lost in the text; its ends and 1.8 are named)."""

SPLITS = ("train", "validation", "test")
_SPLIT_STRIDE = 1_000_000


def chic_speed() -> SpeedConfig:
    """The paper's simulation: speed depends on workers and PSs only (no interference, no
    locality gain) and a new schedule takes effect at once (no restart pause)."""
    return SpeedConfig(locality=False, interference_scale=0.0, realloc_pause_s=0.0)


def iteration_time_s(jt: JobType, workers: int, ps: int) -> float:
    """g_i(w, p) as the MDP models it: seconds per Chic iteration (one catalogue epoch) at
    the analytical speed; infinite without a worker or a PS (the job cannot train)."""
    speed = jt.speed(workers, ps)
    return jt.iters_per_epoch / speed if speed > 0 else math.inf


@dataclass(frozen=True)
class ChicScenario:
    """Chic section 6.1's cluster and workload at one arrival rate."""

    rate_per_hour: float = 1.8
    """Poisson arrival rate (paper: 0.9 to 2.7 per hour)."""
    jobs_per_sequence: int = 30
    """W: workloads per sequence (one training episode)."""
    window: int = 3
    """I: workloads the scheduler sees and allocates to (the rest wait in the backlog)."""
    gpus: float = 10.0
    cpus: float = 120.0
    mem_gb: float = 600.0
    min_iterations: int = 100
    max_iterations: int = 200
    setting: ClassVar[str] = "chic"
    """Which observation Chic's network reads here (`ChicNetConfig.setting`)."""

    def __post_init__(self) -> None:
        if self.rate_per_hour <= 0 or self.jobs_per_sequence < 1 or self.window < 1:
            raise ValueError("rate_per_hour, jobs_per_sequence and window must be positive")
        if not 1 <= self.min_iterations <= self.max_iterations:
            raise ValueError("need 1 <= min_iterations <= max_iterations")

    @property
    def catalogue(self) -> tuple[JobType, ...]:
        """The scenario's job types (`CHIC_CATALOGUE`)."""
        return CHIC_CATALOGUE

    def cluster(self) -> ClusterConfig:
        """The paper's capacities as one pool (one simulator server)."""
        return ClusterConfig(n_servers=1, gpus=self.gpus, cpus=self.cpus, mem_gb=self.mem_gb)

    @property
    def capacity(self) -> np.ndarray:
        """(GPU, CPU, memory GB) of the cluster, shape (3,)."""
        return np.array([self.gpus, self.cpus, self.mem_gb])

    def sim_config(self, trigger: str = "events", seed: int = 0) -> SimConfig:
        """Simulator settings: Chic decides on events and sees the first I jobs; Optimus
        ("interval") decides every interval and sees every job."""
        return SimConfig(
            cluster=self.cluster(),
            speed=chic_speed(),
            seed=seed,
            trigger=trigger,
            window=self.window if trigger == "events" else None,
            stall_decisions=0 if trigger == "events" else 3,
        )

    def sequence(self, seed: int) -> tuple[JobSpec, ...]:
        """W jobs with Poisson arrivals at this rate, the first at time 0 (poisson_trace)."""
        frame = poisson_trace(
            PoissonConfig(
                n_jobs=self.jobs_per_sequence,
                seed=seed,
                rate_per_hour=self.rate_per_hour,
                models=CHIC_MODELS,
                min_epochs=self.min_iterations,
                max_epochs=self.max_iterations,
            )
        )
        arrivals = [(t - EPOCH).total_seconds() for t in frame["submit_time"].to_list()]
        return tuple(
            JobSpec(
                job_id=k,
                model=str(m),
                epochs=float(e),
                arrival_s=float(a),
                num_workers=int(w),
                num_ps=int(p),
                name=str(j),
            )
            for k, (m, e, a, w, p, j) in enumerate(
                zip(
                    frame["model"].to_list(),
                    frame["epochs"].to_list(),
                    arrivals,
                    frame["num_workers"].to_list(),
                    frame["num_ps"].to_list(),
                    frame["job_id"].to_list(),
                    strict=True,
                )
            )
        )

    def sequences(self, seeds: list[int] | tuple[int, ...]) -> list[tuple[JobSpec, ...]]:
        """One sequence per seed."""
        return [self.sequence(s) for s in seeds]


def split_seeds(split: str, n: int, root_seed: int = 0) -> tuple[int, ...]:
    """Seeds of the first n sequences of a split; splits never share a seed (for n below
    one million), and the same split gives the same seeds at every rate."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    base = (root_seed * len(SPLITS) + SPLITS.index(split)) * _SPLIT_STRIDE
    return tuple(base + k for k in range(n))


def _dl2_setting() -> SimConfig:
    return SimConfig(cluster=dl2_small(), window=20)


@dataclass(frozen=True)
class ChicArenaScenario:
    """The arena's DL2 setting (`models.evaluation.EvalConfig`) as Chic's MDP sees it:
    the evaluation's simulator (96 servers of 2 GPUs, 20-minute slots, the measured speeds
    with interference and run-to-run variation), the DL2 catalogue's parameter-server jobs,
    and the first `window` visible jobs allocated to (`tracelib.envs.chic_arena`). Its
    workloads are the derived workload sets' sequences, not generated here."""

    sim: SimConfig = field(default_factory=_dl2_setting)
    """The evaluation's simulator (the pipeline passes `EvalConfig().sim_config(0)`); the
    seed is drawn per episode."""
    window: int = 20
    """I: visible jobs the policy allocates to (the evaluation's window; Chic: 3)."""
    placement: str = "load-balancing"
    """Registered placement policy that places each allocation (the evaluation's default)."""
    setting: ClassVar[str] = "dl2"

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be positive")
        if self.sim.window is not None and self.window > self.sim.window:
            raise ValueError(f"window {self.window} exceeds the simulator's {self.sim.window}")

    @property
    def catalogue(self) -> tuple[JobType, ...]:
        """The DL2 catalogue (the evaluation's job types)."""
        return DL2_CATALOGUE

    def sim_config(self, seed: int = 0) -> SimConfig:
        """The simulator of one episode: an agent may idle (it pays in reward), so no stall
        check, as in the other environments."""
        return replace(self.sim, seed=seed, stall_decisions=0)
