"""DL2's settings (the authors' simulator, SPEC "Reference figures") as named scenarios:
dl2-small (96 servers, 60 jobs, up to 3 arrivals per 20-minute slot, a window of 20
concurrent jobs) and dl2-large (500 servers, 200 jobs, up to 10 arrivals, window 40), over
the DL2 catalogue's PS jobs, decided every slot.

The production-derived and synthetic workload sets of the warehouse are evaluated in the
small setting's cluster (`models.evaluation.EvalConfig`); `DL2Setting.sequence` draws a
DL2-style sequence from a seed for tests and benchmarks (`tracelib.sim.jobs.dl2_like_frame`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracelib.sim.config import ClusterConfig, SimConfig, SpeedConfig
from tracelib.sim.jobs import JobSpec, dl2_like_frame, jobs_from_frame


@dataclass(frozen=True)
class DL2Setting:
    """One of DL2's cluster sizes with its workload shape."""

    name: str
    n_servers: int
    n_jobs: int
    max_arrivals_per_slot: int
    window: int
    """Jobs visible to the scheduler per decision."""
    slot_s: float = 1200.0
    """Decision slot (20 minutes)."""

    def cluster(self) -> ClusterConfig:
        return ClusterConfig(n_servers=self.n_servers)

    def sim_config(self, seed: int = 0, speed: SpeedConfig | None = None) -> SimConfig:
        return SimConfig(
            cluster=self.cluster(),
            speed=speed or SpeedConfig(),
            slot_s=self.slot_s,
            seed=seed,
            window=self.window,
        )

    def sequence(self, seed: int) -> tuple[JobSpec, ...]:
        """A DL2-style job sequence of this setting's size, a pure function of the seed."""
        frame = dl2_like_frame(
            self.n_jobs,
            seed,
            max_arrivals_per_slot=self.max_arrivals_per_slot,
            slot_s=self.slot_s,
        )
        return tuple(jobs_from_frame(frame))


DL2_SMALL = DL2Setting("dl2-small", n_servers=96, n_jobs=60, max_arrivals_per_slot=3, window=20)
"""DL2 authors' small setting: 96 servers (192 GPUs)."""
DL2_LARGE = DL2Setting("dl2-large", n_servers=500, n_jobs=200, max_arrivals_per_slot=10, window=40)
"""DL2 authors' large setting: 500 servers (1000 GPUs, like DL2's production cluster)."""


def dl2_small() -> ClusterConfig:
    """The small setting's cluster (the evaluation's default)."""
    return DL2_SMALL.cluster()


def dl2_large() -> ClusterConfig:
    return DL2_LARGE.cluster()
